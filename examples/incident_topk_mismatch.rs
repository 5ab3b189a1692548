//! ROCm/ATOM PR #1591 (docs/FINDINGS.md, "4"): a bridge hard-coded
//! index_topk 1024 while V4-Flash was trained with 512; invisible below ~2K
//! tokens.
//!
//! Runs the model's selection (`fp8-fp32scale`, k = 512) beside the bridge's
//! (`fp8-fp32scale+topk=1024`) over 1K … 32K tokens and prints, per context,
//! how many rows each attends and the per-layer selection recall of each. Writes the
//! charts to `plots/incident_topk_mismatch/`.
//!
//! `cargo run --release --example incident_topk_mismatch`

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::report::{render_charts, PlotOptions, ReportMeta};
use dsa_recall::run::sweep::run_sweep;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let toml = r#"
preset = "deepseek-v4-flash"
[physics]
rope = "v4"
pooling = "on"
gate_bias_std = 0.0
needle_gate_boost = 2.0
[sweep]
contexts = "1024,1536,2048,2176,2560,3072,4096,8192,16384,32768"
depths = "50"
topk = "512"
precisions = "fp8-fp32scale,fp8-fp32scale+topk=1024"
trials = 300
"#;
    let s = config::check(config::resolve(parse_scenario_toml(toml)?)?)?;
    let outcome = run_sweep(&s, &|| {})?;
    let cells = &outcome.cells;
    let dir = Path::new("plots/incident_topk_mismatch");
    std::fs::create_dir_all(dir)?;
    render_charts(dir, &ReportMeta::from_scenario(&s, &outcome.effective), cells, &PlotOptions::default())?;
    std::fs::write(dir.join("summary.csv"), dsa_recall::run::output::summary_csv(cells))?;

    println!(
        "{:>8} {:>6}  {:>12} {:>12}  {:>10} {:>10}  {:>9}",
        "tokens", "rows", "k_eff model", "k_eff bridge", "recall 512", "recall 1024", "McNemar p"
    );
    for &l in &s.contexts {
        let find = |p: &str| cells.iter().find(|c| c.context_tokens == l && c.precision == p).expect("cell");
        let (a, b) = (find("fp8-fp32scale"), find("fp8-fp32scale+topk=1024"));
        println!(
            "{l:>8} {:>6}  {:>12} {:>12}  {:>10.3} {:>10.3}  {:>9.3}",
            a.candidate_rows,
            a.k_eff,
            b.k_eff,
            a.recall,
            b.recall,
            b.mcnemar_p.unwrap_or(f64::NAN)
        );
    }
    println!("wrote {}", dir.display());
    Ok(())
}

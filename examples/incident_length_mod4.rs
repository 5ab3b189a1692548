//! vLLM #55927 (docs/FINDINGS.md, "3"): with a needle at ~28K of a ~57K
//! prompt, V4-Flash answers a wrong digit whenever the prompt length is 3
//! mod 4, in several engines.
//!
//! Simulates every candidate hypothesis at 57,344 + m tokens for m = 0 … 3
//! (`length_mods = "all"`) and needle offsets 0 … 3 inside its 4-token
//! stride, and prints recall by length mod 4: a hypothesis that explains
//! the report must fail at m = 3 and hold at m = 0, 1, 2. Writes the charts
//! to `plots/incident_length_mod4/`.
//!
//! `cargo run --release --example incident_length_mod4`

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::report::{render_charts, PlotOptions, ReportMeta};
use dsa_recall::run::sweep::run_sweep;
use std::path::Path;

const VARIANTS: &[&str] = &[
    "bf16",
    "fp8-fp32scale",
    "fp8-fp32scale+slot-shift",
    "fp8-fp32scale+pages-swapped",
    "fp8-fp32scale+scale-offset",
    "fp8-fp32scale+stale-scale",
    "fp8-fp32scale+scale-per-page",
    "fp8-fp32scale+window=127",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let toml = format!(
        r#"
preset = "deepseek-v4-flash"
[needle]
strength = 1.5
[physics]
rope = "v4"
pooling = "on"
gate_bias_std = 0.0
needle_gate_boost = 2.0
[sweep]
contexts = "57344"
length_mods = "all"
depths = "49"
needle_offsets = "all"
topk = "512"
precisions = "{}"
trials = 200
"#,
        VARIANTS.join(",")
    );
    let s = config::check(config::resolve(parse_scenario_toml(&toml)?)?)?;
    let outcome = run_sweep(&s, &|| {})?;
    let cells = &outcome.cells;
    let dir = Path::new("plots/incident_length_mod4");
    std::fs::create_dir_all(dir)?;
    render_charts(dir, &ReportMeta::from_scenario(&s, &outcome.effective), cells, &PlotOptions::default())?;
    std::fs::write(dir.join("summary.csv"), dsa_recall::run::output::summary_csv(cells))?;

    println!("recall by prompt length mod 4 (mean over needle offsets 0 … 3, {} trials each)", s.trials);
    println!("{:<34} {:>6} {:>6} {:>6} {:>6}   spread", "variant", "m=0", "m=1", "m=2", "m=3");
    for p in VARIANTS {
        let by_mod: Vec<f64> = (0..4u64)
            .map(|m| {
                let rs: Vec<f64> = cells.iter().filter(|c| c.precision == *p && c.context_tokens % 4 == m).map(|c| c.recall).collect();
                rs.iter().sum::<f64>() / rs.len() as f64
            })
            .collect();
        let spread = by_mod.iter().cloned().fold(f64::MIN, f64::max) - by_mod.iter().cloned().fold(f64::MAX, f64::min);
        println!("{p:<34} {:>6.3} {:>6.3} {:>6.3} {:>6.3}   {spread:.3}", by_mod[0], by_mod[1], by_mod[2], by_mod[3]);
    }
    println!("wrote {}", dir.display());
    Ok(())
}

//! vLLM #52109 (docs/FINDINGS.md, "2"): V4-Flash on ROCm with the AITER
//! sparse indexer found the needle 3/3 times at 1,913 and 3,611 tokens and
//! 0/3 from 5,294 tokens up (to 506K).
//!
//! Simulates each candidate hypothesis at those lengths (and 8K, 16K for
//! "from 5,294 up"), then the likelihood of exactly what was seen:
//! r(1913)³ · r(3611)³ · Π_{L ≥ 5294} (1 − r(L))³, with r the simulated
//! recall. Writes the charts to `plots/incident_rocm_collapse/`.
//!
//! `cargo run --release --example incident_rocm_collapse`

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::report::{render_charts, PlotOptions, ReportMeta};
use dsa_recall::run::sweep::run_sweep;
use std::path::Path;

const VARIANTS: &[&str] = &[
    "bf16",
    "fp8-fp32scale",
    "fp8-fp32scale+e4m3fnuz-read",
    "fp8-fp32scale+e4m3fn-read",
    "fp8-fp32scale+hadamard-q-only",
    "fp8-fp32scale+pages-swapped",
    "fp8-fp32scale+slot-shift",
    "fp8-fp32scale+scale-unwritten-zero",
    "fp8-fp32scale+scale-unwritten-zero+ties-lowest",
    "fp8-fp32scale+scale-unwritten-nan+nan-last",
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
contexts = "1913,3611,5294,8192,16384"
depths = "25,50,75"
topk = "512"
precisions = "{}"
trials = 300
"#,
        VARIANTS.join(",")
    );
    let s = config::check(config::resolve(parse_scenario_toml(&toml)?)?)?;
    let outcome = run_sweep(&s, &|| {})?;
    let cells = &outcome.cells;
    let dir = Path::new("plots/incident_rocm_collapse");
    std::fs::create_dir_all(dir)?;
    render_charts(dir, &ReportMeta::from_scenario(&s, &outcome.effective), cells, &PlotOptions::default())?;
    std::fs::write(dir.join("summary.csv"), dsa_recall::run::output::summary_csv(cells))?;

    println!("{:<50} {:>5}  recall at 1913 3611 5294 8K 16K  likelihood of 3/3, 3/3, 0/3, 0/3, 0/3", "variant", "depth");
    for p in VARIANTS {
        for &d in &s.depths {
            let r: Vec<f64> = s
                .contexts
                .iter()
                .map(|&l| {
                    cells.iter().find(|c| c.precision == *p && c.depth_percent == d && c.context_tokens == l).map_or(f64::NAN, |c| c.recall)
                })
                .collect();
            let likelihood = r[0].powi(3) * r[1].powi(3) * r[2..].iter().map(|x| (1.0 - x).powi(3)).product::<f64>();
            let shown: Vec<String> = r.iter().map(|x| format!("{x:.2}")).collect();
            println!("{p:<50} {d:>5}  {}  {likelihood:.3e}", shown.join(" "));
        }
    }
    println!("wrote {}", dir.display());
    Ok(())
}

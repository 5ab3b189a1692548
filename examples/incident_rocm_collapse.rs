//! vLLM #52109 (docs/FINDINGS.md, "2"): V4-Flash on ROCm with the AITER
//! sparse indexer found the needle 3/3 times at 1,913 and 3,611 tokens and
//! 0/3 from 5,294 tokens up (to 506K).
//!
//! Simulates each candidate hypothesis at those lengths (and 8K, 16K for
//! "from 5,294 up"), then the likelihood of exactly what was seen:
//! r(1913)³ · r(3611)³ · Π_{L ≥ 5294} (1 − r(L))³, with r read three ways,
//! side by side: per-layer selection recall, whole-model recall with the
//! catalogue's fault spread (every hypothesis here is "shared": the same in
//! every layer) and whole-model recall with `[stack] fault_layers =
//! "independent"` (docs/MODEL.md, "Whole-model recall"). Beside each
//! likelihood, the largest it gets with every r anywhere in its Wilson 95 %
//! interval (a recall of exactly 1 or 0 gives a point likelihood of 0 that
//! 300 trials cannot prove). One sweep per spread; the per-layer numbers do
//! not depend on the spread, and the program checks that they agree cell
//! for cell. Writes the charts (of the shared sweep) to
//! `plots/incident_rocm_collapse/`.
//!
//! `cargo run --release --example incident_rocm_collapse` (160 s on 2 otherwise idle cores, 2026-12-06)

use dsa_recall::report::{render_charts, PlotOptions, ReportMeta};
use std::path::Path;

#[path = "common/incident.rs"]
mod incident;
use incident::{Reading, READINGS};

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

fn scenario_toml(spread: &str) -> String {
    format!(
        r#"
preset = "deepseek-v4-flash"
[physics]
rope = "v4"
pooling = "on"
gate_bias_std = 0.0
needle_gate_boost = 2.0
[stack]
fault_layers = "{spread}"
[sweep]
contexts = "1913,3611,5294,8192,16384"
depths = "25,50,75"
topk = "512"
precisions = "{}"
trials = 300
"#,
        VARIANTS.join(",")
    )
}

/// 3/3 found at the first two lengths, 0/3 at the rest.
fn likelihood(r: &[f64]) -> f64 {
    r[0].powi(3) * r[1].powi(3) * r[2..].iter().map(|x| (1.0 - x).powi(3)).product::<f64>()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (s, outcome, independent) = incident::sweep_both_spreads(VARIANTS, scenario_toml)?;
    let cells = &outcome.cells;
    let dir = Path::new("plots/incident_rocm_collapse");
    std::fs::create_dir_all(dir)?;
    render_charts(dir, &ReportMeta::from_scenario(&s, &outcome.effective), cells, &PlotOptions::default())?;
    std::fs::write(dir.join("summary.csv"), dsa_recall::run::output::summary_csv(cells))?;
    std::fs::write(dir.join("summary_independent.csv"), dsa_recall::run::output::summary_csv(&independent))?;

    // Best likelihood (point) per variant and reading, over the depths.
    let mut best: Vec<[(f64, f64, f64); 3]> = vec![[(0.0, 0.0, f64::NAN); 3]; VARIANTS.len()];
    for (ri, r) in READINGS.into_iter().enumerate() {
        let cells = if r == Reading::Independent { &independent } else { cells };
        println!();
        println!(
            "{}: recall at 1913 3611 5294 8K 16K; likelihood of 3/3, 3/3, 0/3, 0/3, 0/3 (point; largest within the 95 % intervals)",
            r.label()
        );
        for (vi, p) in VARIANTS.iter().enumerate() {
            for &d in &s.depths {
                let rs: Vec<(f64, f64, f64)> = s
                    .contexts
                    .iter()
                    .map(|&l| {
                        cells
                            .iter()
                            .find(|c| c.precision == *p && c.depth_percent == d && c.context_tokens == l)
                            .map_or((f64::NAN, f64::NAN, f64::NAN), |c| r.of(c))
                    })
                    .collect();
                let point: Vec<f64> = rs.iter().map(|x| x.0).collect();
                // The report's favourable end of each interval: high where found, low where lost.
                let favourable: Vec<f64> = rs.iter().enumerate().map(|(i, x)| if i < 2 { x.2 } else { x.1 }).collect();
                let (lp, lf) = (likelihood(&point), likelihood(&favourable));
                if lp > best[vi][ri].0 || (lp == best[vi][ri].0 && lf > best[vi][ri].1) || best[vi][ri].2.is_nan() {
                    best[vi][ri] = (lp, lf, d);
                }
                let shown: Vec<String> = point.iter().map(|x| format!("{x:.2}")).collect();
                println!("{p:<50} {d:>5}  {}  {lp:.1e} ({lf:.1e})", shown.join(" "));
            }
        }
    }
    println!();
    println!("best depth per variant: likelihood (largest within the 95 % intervals) [depth]");
    print!("{:<50}", "variant");
    for r in READINGS {
        print!(" | {:<28}", r.label());
    }
    println!();
    for (vi, p) in VARIANTS.iter().enumerate() {
        print!("{p:<50}");
        for b in &best[vi] {
            print!(" | {:>8.1e} ({:>8.1e}) [{:>2}]   ", b.0, b.1, b.2);
        }
        println!();
    }
    println!("wrote {}", dir.display());
    Ok(())
}

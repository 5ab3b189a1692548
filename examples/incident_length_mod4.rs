//! vLLM #55927 (docs/FINDINGS.md, "3"): with a needle at ~28K of a ~57K
//! prompt, V4-Flash answers a wrong digit whenever the prompt length is 3
//! mod 4, in several engines.
//!
//! Simulates every candidate hypothesis at 57,344 + m tokens for m = 0 … 3
//! (`length_mods = "all"`) and needle offsets 0 … 3 inside its 4-token
//! stride, and prints recall by length mod 4, read three ways side by side:
//! per-layer selection recall, whole-model recall with the catalogue's fault
//! spread (every hypothesis here is "shared": the same in every layer) and
//! whole-model recall with `[stack] fault_layers = "independent"`
//! (docs/MODEL.md, "Whole-model recall"). A hypothesis that explains the
//! report must fail at m = 3 and hold at m = 0, 1, 2. One sweep per spread;
//! the per-layer numbers do not depend on the spread, and the program checks
//! that they agree cell for cell. Writes the charts (of the shared sweep) to
//! `plots/incident_length_mod4/`.
//!
//! `cargo run --release --example incident_length_mod4` (66 s on 2 otherwise idle cores, 2026-12-06)

use dsa_recall::report::{render_charts, PlotOptions, ReportMeta};
use dsa_recall::run::cell::CellResult;
use std::path::Path;

#[path = "common/incident.rs"]
mod incident;

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
contexts = "57344"
length_mods = "all"
depths = "49"
needle_offsets = "all"
topk = "512"
precisions = "{}"
trials = 200
"#,
        VARIANTS.join(",")
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (s, outcome, independent) = incident::sweep_both_spreads(VARIANTS, scenario_toml)?;
    let cells = &outcome.cells;
    let dir = Path::new("plots/incident_length_mod4");
    std::fs::create_dir_all(dir)?;
    render_charts(dir, &ReportMeta::from_scenario(&s, &outcome.effective), cells, &PlotOptions::default())?;
    std::fs::write(dir.join("summary.csv"), dsa_recall::run::output::summary_csv(cells))?;
    std::fs::write(dir.join("summary_independent.csv"), dsa_recall::run::output::summary_csv(&independent))?;

    type Read = fn(&CellResult) -> f64;
    let readings: [(&str, &[CellResult], Read); 3] = [
        ("per-layer", cells, |c| c.recall),
        ("model, shared", cells, |c| c.model_recall.unwrap_or(f64::NAN)),
        ("model, independent", &independent, |c| c.model_recall.unwrap_or(f64::NAN)),
    ];
    println!("recall by prompt length mod 4 (mean over needle offsets 0 … 3, {} trials each)", s.trials);
    print!("{:<34}", "variant");
    for (label, _, _) in &readings {
        print!(" | {label:<18} m=0   m=1   m=2   m=3   spread");
    }
    println!();
    for p in VARIANTS {
        print!("{p:<34}");
        for (_, cells, read) in &readings {
            let by_mod: Vec<f64> = (0..4u64)
                .map(|m| {
                    let rs: Vec<f64> = cells.iter().filter(|c| c.precision == *p && c.context_tokens % 4 == m).map(read).collect();
                    rs.iter().sum::<f64>() / rs.len() as f64
                })
                .collect();
            let spread = by_mod.iter().cloned().fold(f64::MIN, f64::max) - by_mod.iter().cloned().fold(f64::MAX, f64::min);
            print!(" | {:<18} {:.3} {:.3} {:.3} {:.3} {spread:.3} ", "", by_mod[0], by_mod[1], by_mod[2], by_mod[3]);
        }
        println!();
    }
    println!("wrote {}", dir.display());
    Ok(())
}

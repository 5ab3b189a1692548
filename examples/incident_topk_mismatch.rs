//! ROCm/ATOM PR #1591 (docs/FINDINGS.md, "4"): a bridge hard-coded
//! index_topk 1024 while V4-Flash was trained with 512; invisible below ~2K
//! tokens.
//!
//! Runs the model's selection (`fp8-fp32scale`, k = 512) beside the bridge's
//! (`fp8-fp32scale+topk=1024`) over 1K … 32K tokens and prints, per context,
//! how many rows each attends and the recall of each, read three ways side
//! by side: per-layer selection recall, whole-model recall with the
//! catalogue's fault spread (`topk=N` is "shared": the same setting in every
//! layer) and whole-model recall with `[stack] fault_layers = "independent"`
//! (docs/MODEL.md, "Whole-model recall"; for a configuration value that
//! reading is a bound, not a plausible mechanism). One sweep per spread; the
//! per-layer numbers do not depend on the spread, and the program checks
//! that they agree cell for cell. Writes the charts (of the shared sweep) to
//! `plots/incident_topk_mismatch/`.
//!
//! `cargo run --release --example incident_topk_mismatch` (7 s on 2 otherwise idle cores, 2026-12-06)

use dsa_recall::report::{render_charts, PlotOptions, ReportMeta};
use dsa_recall::run::cell::CellResult;
use std::path::Path;

#[path = "common/incident.rs"]
mod incident;

const MODEL: &str = "fp8-fp32scale";
const BRIDGE: &str = "fp8-fp32scale+topk=1024";

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
contexts = "1024,1536,2048,2176,2560,3072,4096,8192,16384,32768"
depths = "50"
topk = "512"
precisions = "{MODEL},{BRIDGE}"
trials = 300
"#
    )
}

/// `0.963 [0.936, 0.979]`: whole-model recall with its Wilson 95 % interval.
fn model(c: &CellResult) -> String {
    format!(
        "{:.3} [{:.3}, {:.3}]",
        c.model_recall.unwrap_or(f64::NAN),
        c.model_ci_low.unwrap_or(f64::NAN),
        c.model_ci_high.unwrap_or(f64::NAN)
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (s, outcome, independent) = incident::sweep_both_spreads(&[BRIDGE], scenario_toml)?;
    let cells = &outcome.cells;
    let dir = Path::new("plots/incident_topk_mismatch");
    std::fs::create_dir_all(dir)?;
    render_charts(dir, &ReportMeta::from_scenario(&s, &outcome.effective), cells, &PlotOptions::default())?;
    std::fs::write(dir.join("summary.csv"), dsa_recall::run::output::summary_csv(cells))?;
    std::fs::write(dir.join("summary_independent.csv"), dsa_recall::run::output::summary_csv(&independent))?;

    println!(
        "{:>8} {:>6}  {:>6} {:>6}  | {:>9} {:>9} {:>9}  | {:>22} {:>22} {:>22}",
        "tokens", "rows", "k_eff", "k_eff", "per-layer", "per-layer", "McNemar", "model", "model 1024", "model 1024"
    );
    println!(
        "{:>8} {:>6}  {:>6} {:>6}  | {:>9} {:>9} {:>9}  | {:>22} {:>22} {:>22}",
        "", "", "512", "1024", "512", "1024", "p", "512 (95 %)", "shared (95 %)", "independent (95 %)"
    );
    for &l in &s.contexts {
        let find = |v: &[CellResult], p: &str| v.iter().find(|c| c.context_tokens == l && c.precision == p).cloned().expect("cell");
        let (a, b, bi) = (find(cells, MODEL), find(cells, BRIDGE), find(&independent, BRIDGE));
        // Without a hypothesis the model's own selection reads the same in both sweeps.
        assert_eq!(a.model_recall, find(&independent, MODEL).model_recall, "{MODEL} at {l}: model recall depends on the spread");
        println!(
            "{l:>8} {:>6}  {:>6} {:>6}  | {:>9.3} {:>9.3} {:>9.3}  | {:>22} {:>22} {:>22}",
            a.candidate_rows,
            a.k_eff,
            b.k_eff,
            a.recall,
            b.recall,
            b.mcnemar_p.unwrap_or(f64::NAN),
            model(&a),
            model(&b),
            model(&bi)
        );
    }
    println!("wrote {}", dir.display());
    Ok(())
}

//! Regenerates `plots/model_reach.png`, the README's "which model keeps a
//! needle how far": every preset side by side at its shipped k
//! (`index_topk`) and its shipped index-key format, whole-model recall
//! over its own layer plan against context, under the `hard` needle (median
//! rank 16 of 13,801 rows where the default `niah` one has 4, and a wider
//! spread over prompts: docs/MODEL.md, "The needle's unit"). Under the
//! default needle whole-model recall stays ≥ 0.95 (docs/FINDINGS.md §9,
//! docs/CALIBRATION.md), so this chart uses the needle at which they differ. Each legend entry gives the
//! preset's coverage limit k·c + W of its simulated layer, below which
//! every token is reachable.
//!
//! `cargo run --release --example model_reach` (about 8 minutes on 2 cores;
//! `DSA_REACH_TRIALS=N` for another trial count, default 100)

use dsa_recall::base::units::tokens_label;
use dsa_recall::config::{self, params::parse_scenario_toml, Scenario};
use dsa_recall::report::chart::{render_recall_vs_context, RecallChart, RecallPoint, RecallSeries};
use dsa_recall::run::sweep::run_sweep;
use std::path::Path;

/// (preset, shipped index-key format, longest context of the model).
const MODELS: &[(&str, &str, &str)] = &[
    ("deepseek-v3.2", "fp8", "128K"),
    ("deepseek-v4-flash", "fp4", "1M"),
    ("deepseek-v4-pro", "fp4", "1M"),
    ("deepseek-v4.1-flash", "fp8-fp32scale", "1M"),
    ("glm-5.2", "fp8-fp32scale", "1M"),
    ("glm-5.3-flash", "fp8", "1M"),
];

fn scenario(text: &str) -> Result<Scenario, Box<dyn std::error::Error>> {
    Ok(config::check(config::resolve(parse_scenario_toml(text)?)?)?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let trials: u64 = std::env::var("DSA_REACH_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let mut series = Vec::new();
    for &(preset, format, longest) in MODELS {
        let k = scenario(&format!("preset = \"{preset}\"\n"))?.index_topk;
        let text = format!(
            "preset = \"{preset}\"\n[needle]\nprofile = \"hard\"\n[sweep]\ncontexts = \"4K..{longest}\"\ndepths = \"50\"\n\
             topk = \"{k}\"\nprecisions = \"{format}\"\ntrials = {trials}\nseed = 42\n"
        );
        let s = scenario(&text)?;
        let cells = run_sweep(&s, &|| {})?.cells;
        let point = |c: u64, r: f64, lo: f64, hi: f64| RecallPoint { context_tokens: c, recall: r, ci_low: lo, ci_high: hi };
        let limit = s.geometry.coverage_limit(k);
        println!("{preset:<20} {format:<14} k {k:<5} limit {limit}");
        for c in &cells {
            println!(
                "  {:>8}  per layer {:.3}  whole model {:.3} [{:.3}, {:.3}]",
                c.context_tokens,
                c.recall,
                c.model_recall.unwrap_or(f64::NAN),
                c.model_ci_low.unwrap_or(f64::NAN),
                c.model_ci_high.unwrap_or(f64::NAN)
            );
        }
        series.push(RecallSeries {
            topk: k as u32,
            precision: format!("{preset} {format} · limit {}", tokens_label(limit)),
            points: cells.iter().map(|c| point(c.context_tokens, c.recall, c.ci_low, c.ci_high)).collect(),
            predicted: Vec::new(),
            model: cells
                .iter()
                .map(|c| {
                    point(c.context_tokens, c.model_recall.unwrap_or(0.0), c.model_ci_low.unwrap_or(0.0), c.model_ci_high.unwrap_or(0.0))
                })
                .collect(),
            model_band: cells.iter().filter_map(|c| Some((c.context_tokens, c.model_band_low?, c.model_band_high?))).collect(),
        });
    }
    let chart = RecallChart {
        title: "Which model keeps a needle how far: whole-model recall, hard needle".into(),
        subtitle: format!(
            "each preset at its shipped k and index-key format, depth 50 %, {trials} trials a point, Wilson 95 % bands; under the default niah needle all stay ≥ 0.95"
        ),
        series,
        coverage_limits: Vec::new(),
        effective_threshold: Some(0.9),
        effective: Vec::new(),
        effective_at: None,
        whole_model_only: true,
    };
    std::fs::create_dir_all("plots")?;
    let path = Path::new("plots/model_reach.png");
    render_recall_vs_context(&chart, path, 1100, 640)?;
    println!("wrote {}", path.display());
    Ok(())
}

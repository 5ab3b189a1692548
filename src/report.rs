//! Turning simulation outcomes into files and text: a sweep's output
//! directory, and `run`'s single-cell report.

use crate::chart::{render_recall_vs_context, RecallChart, RecallPoint, RecallSeries};
use crate::config::Scenario;
use crate::error::Error;
use crate::montecarlo::{run_trials, tally_cells};
use crate::output::{self, write_atomic, MANIFEST_FILE, RECALL_CHART_FILE, RESULTS_FILE, SUMMARY_FILE};
use crate::sweep::{cells_for, spec_for, CellResult, SweepOutcome};
use std::fmt::Write as _;
use std::path::Path;

/// Writes the derived files of a finished sweep into `dir` (results.jsonl
/// and the manifest are the store's): returns every file the directory holds.
pub fn write_sweep(dir: &Path, s: &Scenario, outcome: &SweepOutcome) -> Result<Vec<&'static str>, Error> {
    write_atomic(&dir.join(SUMMARY_FILE), output::summary_csv(&outcome.cells).as_bytes())?;
    render_recall_chart(s, &outcome.cells, &dir.join(RECALL_CHART_FILE))?;
    Ok(vec![MANIFEST_FILE, RESULTS_FILE, SUMMARY_FILE, RECALL_CHART_FILE])
}

/// Recall vs context, one line per (k, precision), one chart per depth
/// (`recall_vs_context.png` for the first depth, `recall_vs_context_depthD.png`
/// for the others).
pub fn render_recall_chart(s: &Scenario, cells: &[CellResult], path: &Path) -> Result<(), Error> {
    for (i, &depth) in s.depths.iter().enumerate() {
        let mut series = Vec::new();
        for &k in &s.topks {
            for p in &s.precisions {
                let points = cells
                    .iter()
                    .filter(|c| c.depth_percent == depth && c.topk == k && c.precision == p.name)
                    .map(|c| RecallPoint { context_tokens: c.context_tokens, recall: c.recall, ci_low: c.ci_low, ci_high: c.ci_high })
                    .collect();
                series.push(RecallSeries { topk: k as u32, precision: p.name.clone(), points });
            }
        }
        let chart = RecallChart {
            title: format!("Needle recall vs context · {}", s.preset),
            subtitle: format!(
                "needle depth {depth} %, strength {} sd, {} tokens · {} trials per point · Wilson 95 % bands · seed {}",
                s.model.needle_strength, s.needle_tokens, s.trials, s.seed
            ),
            series,
            coverage_limits: s.topks.iter().map(|&k| (k as u32, s.geometry.coverage_limit(k))).collect(),
            effective_threshold: Some(s.threshold),
        };
        let target = if i == 0 {
            path.to_path_buf()
        } else {
            let stem = path.file_stem().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
            path.with_file_name(format!("{stem}_depth{depth}.png"))
        };
        render_recall_vs_context(&chart, &target, 1600, 1000).map_err(|e| Error::Chart(e.to_string()))?;
    }
    Ok(())
}

/// A single simulated cell and its text report.
pub struct SingleCell {
    pub result: CellResult,
    pub text: String,
}

/// Runs the one cell of `s` (one context, depth, k and precision).
pub fn run_single_cell(s: &Scenario, print_trials: bool) -> Result<SingleCell, Error> {
    let depth = s.depths.first().copied().unwrap_or(50.0);
    let spec = spec_for(s, depth);
    let outcomes = run_trials(&spec, s.seed, s.trials, &|| {})?;
    let tallies = tally_cells(&spec, &outcomes);
    let result = cells_for(s, &spec, &tallies).into_iter().next().ok_or_else(|| Error::Chart("no cell".into()))?;
    let mut text = String::new();
    if print_trials {
        let _ = writeln!(text, "{:>7}  {:>8}  {:>10}  {:>14}  {:>12}", "trial", "survived", "rank (>)", "rank (≥, ties)", "margin (sd)");
        for (t, o) in outcomes.iter().enumerate() {
            let c = &o.cells[0];
            let rank = |f: fn(&crate::selection::NeedleRank) -> u64| c.rank.as_ref().map_or("-".to_string(), |r| f(r).to_string());
            let margin = c.margin_sd.map_or("-".to_string(), |m| format!("{m:+.3}"));
            let _ = writeln!(
                text,
                "{t:>7}  {:>8}  {:>10}  {:>14}  {:>12}",
                if c.survived { "yes" } else { "no" },
                rank(|r| r.above),
                rank(|r| r.above_or_equal),
                margin
            );
        }
        text.push('\n');
    }
    let r = &result;
    let _ = writeln!(
        text,
        "{} tokens, depth {} %, k={} (k_eff {}), {}: recall {:.4} [{:.4}, {:.4}] ({} of {} trials)",
        r.context_tokens, r.depth_percent, r.topk, r.k_eff, r.precision, r.recall, r.ci_low, r.ci_high, r.survived, r.trials
    );
    let _ = writeln!(
        text,
        "needle rows {} (first token {}, in raw window: {}), candidate rows {}, coverage limit k·c+W = {}",
        r.needle_rows, r.needle_start_token, r.needle_in_window, r.candidate_rows, r.coverage_limit
    );
    if let (Some(mean), Some(median)) = (r.mean_rank, r.median_rank) {
        let _ = writeln!(
            text,
            "needle rank: mean {mean:.1}, median {median}, mean counting ties {:.1}, trials with ties {}; mean margin {} sd",
            r.mean_rank_ties.unwrap_or(mean),
            r.trials_with_ties,
            r.mean_margin_sd.map_or("-".to_string(), |m| format!("{m:+.3}"))
        );
    }
    Ok(SingleCell { result, text })
}

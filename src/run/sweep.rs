//! A sweep: the grid of cells (depth × context × k × precision), simulated
//! one haystack group (depth) at a time, and the effective context of each
//! (k, precision).

use crate::base::stats::mcnemar_exact_p;
use crate::config::Scenario;
use crate::error::SimError;
use crate::estimate::full::{simulate, CellTally};
use crate::estimate::predict::{predict_cells, CellPrediction};
use crate::estimate::settings::EstimatorMode;
use crate::score::trial::TrialSpec;
use serde::{Deserialize, Serialize};

/// Selection fidelity is measured against this variant when a sweep has it.
pub const FIDELITY_REFERENCE: &str = "fp32";

/// Everything known about one cell: its inputs and its outcome. This is one
/// line of `results.jsonl` and one row of `summary.csv`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    pub context_tokens: u64,
    pub depth_percent: f64,
    /// Needle offset inside its row stride, when the sweep has that axis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle_offset: Option<u64>,
    pub topk: u64,
    pub precision: String,
    pub trials: u64,
    pub survived: u64,
    pub recall: f64,
    /// Wilson 95 % interval.
    pub ci_low: f64,
    pub ci_high: f64,
    /// Analytic prediction of the recall (`crate::estimate::predict`); absent when
    /// switched off (`--predict off`) or for variants it does not model.
    #[serde(default)]
    pub predicted_recall: Option<f64>,
    /// Mean over ranked trials of the competitors scoring strictly above the best needle row.
    pub mean_rank: Option<f64>,
    /// Same, counting ties as above.
    pub mean_rank_ties: Option<f64>,
    pub median_rank: Option<f64>,
    pub trials_with_ties: u64,
    /// Mean margin to the k-th competitor score, in competitor standard deviations.
    pub mean_margin_sd: Option<f64>,
    pub needle_rows: u64,
    pub needle_start_token: u64,
    pub needle_in_window: bool,
    pub survived_via_window: u64,
    pub visible_rows: u64,
    pub candidate_rows: u64,
    pub k_eff: u64,
    pub coverage_limit: u64,
    /// Quantiles (5, 25, 50, 75, 95 %) of the best needle row's rank as a share of k_eff.
    pub rank_share_quantiles: Option<[f64; 5]>,
    /// Quantiles (5, 25, 50, 75, 95 %) of the margin in competitor standard deviations.
    pub margin_sd_quantiles: Option<[f64; 5]>,
    /// Selection fidelity reference (`fp32` when in the sweep; absent for the reference itself).
    pub fidelity_reference: Option<String>,
    /// Share of the reference's top-k_eff rows this variant also selects: mean and 95 % interval.
    pub selection_recall: Option<f64>,
    pub selection_recall_ci_low: Option<f64>,
    pub selection_recall_ci_high: Option<f64>,
    /// Jaccard overlap of the two top-k_eff sets: mean and 95 % interval.
    pub jaccard: Option<f64>,
    pub jaccard_ci_low: Option<f64>,
    pub jaccard_ci_high: Option<f64>,
    /// Paired comparison with the sweep's first precision (absent for that one).
    pub baseline: Option<String>,
    /// recall − baseline recall, on the same haystacks.
    pub recall_diff: Option<f64>,
    /// Trials kept by this variant and lost by the baseline, and the reverse.
    pub discordant_gained: Option<u64>,
    pub discordant_lost: Option<u64>,
    /// Exact two-sided McNemar p-value of the discordant pairs.
    pub mcnemar_p: Option<f64>,
}

/// The longest context at which recall stays at or above the threshold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EffectiveContext {
    pub topk: u64,
    pub precision: String,
    pub threshold: f64,
    /// None when recall is below the threshold already at the shortest context.
    pub effective_context: Option<u64>,
    /// True when recall held at every context tested: the true value may be longer.
    pub held_at_longest: bool,
    pub coverage_limit: u64,
}

/// A finished sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepOutcome {
    pub cells: Vec<CellResult>,
    pub effective: Vec<EffectiveContext>,
}

/// Number of trials a sweep runs (for progress bars).
pub fn total_trials(s: &Scenario) -> u64 {
    s.trials * s.depths.len() as u64
}

/// The trial specification of the haystack group at `depth`.
pub fn spec_for(s: &Scenario, depth: f64) -> TrialSpec<'_> {
    TrialSpec {
        model: &s.model,
        physics: &s.physics,
        geometry: s.geometry,
        needle_offsets: &s.needle_offsets,
        contexts: &s.contexts,
        depth_percent: depth,
        needle_tokens: s.needle_tokens,
        topks: &s.topks,
        variants: &s.precisions,
        tie_rule: s.tie_rule,
        fidelity_reference: s.precisions.iter().position(|p| p.name == FIDELITY_REFERENCE),
    }
}

/// Cell results of one haystack group from its tallies.
pub fn cells_for(s: &Scenario, spec: &TrialSpec<'_>, tallies: &[CellTally]) -> Vec<CellResult> {
    let mut cells = Vec::with_capacity(tallies.len());
    let reference = spec.fidelity_reference.map(|r| s.precisions[r].name.clone());
    for (ci, &context) in s.contexts.iter().enumerate() {
        for (oi, &needle_offset) in s.needle_offsets.iter().enumerate() {
            let placement = spec.placement(context, needle_offset);
            let candidates = s.geometry.candidate_rows(context);
            for (ki, &k) in s.topks.iter().enumerate() {
                for (vi, variant) in s.precisions.iter().enumerate() {
                    let t = &tallies[spec.cell_index(ci, oi, ki, vi)];
                    let (ci_low, ci_high) = t.interval();
                    let base = &tallies[spec.cell_index(ci, oi, ki, 0)];
                    let paired = vi > 0;
                    let fidelity = t.selection_recall();
                    let jaccard = t.jaccard();
                    cells.push(CellResult {
                        context_tokens: context,
                        depth_percent: spec.depth_percent,
                        needle_offset,
                        topk: k,
                        precision: variant.name.clone(),
                        trials: t.trials,
                        survived: t.survived,
                        recall: t.recall(),
                        ci_low,
                        ci_high,
                        predicted_recall: None,
                        mean_rank: t.mean_rank(),
                        mean_rank_ties: t.mean_rank_ties(),
                        median_rank: t.median_rank(),
                        trials_with_ties: t.trials_with_ties,
                        mean_margin_sd: t.mean_margin_sd(),
                        needle_rows: placement.rows.end - placement.rows.start,
                        needle_start_token: placement.tokens.start,
                        needle_in_window: placement.tokens.start >= context.saturating_sub(variant.selection.window_for(s.geometry.window)),
                        survived_via_window: t.survived_via_window,
                        visible_rows: s.geometry.visible_rows(context),
                        candidate_rows: candidates,
                        k_eff: variant.selection.topk_for(k).min(candidates),
                        coverage_limit: s.geometry.coverage_limit(k),
                        rank_share_quantiles: t.rank_share_quantiles(),
                        margin_sd_quantiles: t.margin_sd_quantiles(),
                        fidelity_reference: reference.clone().filter(|_| fidelity.is_some()),
                        selection_recall: fidelity.map(|f| f.0),
                        selection_recall_ci_low: fidelity.map(|f| f.1),
                        selection_recall_ci_high: fidelity.map(|f| f.2),
                        jaccard: jaccard.map(|f| f.0),
                        jaccard_ci_low: jaccard.map(|f| f.1),
                        jaccard_ci_high: jaccard.map(|f| f.2),
                        baseline: paired.then(|| s.precisions[0].name.clone()),
                        recall_diff: paired.then(|| t.recall() - base.recall()),
                        discordant_gained: paired.then_some(t.gained_vs_baseline),
                        discordant_lost: paired.then_some(t.lost_vs_baseline),
                        mcnemar_p: paired.then(|| mcnemar_exact_p(t.gained_vs_baseline, t.lost_vs_baseline)),
                    });
                }
            }
        }
    }
    cells
}

/// Sets each cell's predicted recall (cells in [`TrialSpec::cell_index`] order).
pub fn attach_predictions(cells: &mut [CellResult], predictions: &[Option<CellPrediction>]) {
    for (cell, p) in cells.iter_mut().zip(predictions) {
        cell.predicted_recall = p.map(|p| p.recall);
    }
}

/// The cells of one haystack group under the scenario's estimator, with the
/// analytic prediction when it is switched on.
pub fn group_cells(s: &Scenario, spec: &TrialSpec<'_>, on_trial: &(dyn Fn() + Sync)) -> Result<Vec<CellResult>, SimError> {
    let mut cells = match s.estimator.mode {
        EstimatorMode::Full => cells_for(s, spec, &simulate(spec, s.seed, s.trials, on_trial)?),
        EstimatorMode::Tail => crate::estimate::tail::cells_for_tail(s, spec, on_trial)?,
    };
    if s.estimator.predict {
        attach_predictions(&mut cells, &predict_cells(spec, s.seed, s.trials)?);
    }
    Ok(cells)
}

/// Runs every cell of the scenario. Cells come out ordered by depth,
/// context, k, precision.
pub fn run_sweep(s: &Scenario, on_trial: &(dyn Fn() + Sync)) -> Result<SweepOutcome, SimError> {
    let mut cells = Vec::new();
    for &depth in &s.depths {
        let spec = spec_for(s, depth);
        cells.extend(group_cells(s, &spec, on_trial)?);
    }
    let effective = effective_contexts(s, &cells);
    Ok(SweepOutcome { cells, effective })
}

/// For each (k, precision): the longest context L such that recall is at or
/// above the threshold at every depth for every tested context ≤ L.
pub fn effective_contexts(s: &Scenario, cells: &[CellResult]) -> Vec<EffectiveContext> {
    let mut out = Vec::new();
    for &k in &s.topks {
        for variant in &s.precisions {
            let mut effective = None;
            let mut held = true;
            for &context in &s.contexts {
                let ok = cells
                    .iter()
                    .filter(|c| c.topk == k && c.precision == variant.name && c.context_tokens == context)
                    .all(|c| c.recall >= s.threshold);
                if !ok {
                    held = false;
                    break;
                }
                effective = Some(context);
            }
            out.push(EffectiveContext {
                topk: k,
                precision: variant.name.clone(),
                threshold: s.threshold,
                effective_context: effective,
                held_at_longest: held,
                coverage_limit: s.geometry.coverage_limit(k),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::variant::PrecisionVariant;

    fn cell(context: u64, depth: f64, k: u64, p: &str, recall: f64) -> CellResult {
        CellResult {
            context_tokens: context,
            depth_percent: depth,
            needle_offset: None,
            topk: k,
            precision: p.into(),
            trials: 100,
            survived: (recall * 100.0).round() as u64,
            recall,
            ci_low: recall,
            ci_high: recall,
            predicted_recall: None,
            mean_rank: None,
            mean_rank_ties: None,
            median_rank: None,
            trials_with_ties: 0,
            mean_margin_sd: None,
            needle_rows: 2,
            needle_start_token: 0,
            needle_in_window: false,
            survived_via_window: 0,
            visible_rows: context / 4,
            candidate_rows: context / 4,
            k_eff: k.min(context / 4),
            coverage_limit: k * 4 + 128,
            rank_share_quantiles: None,
            margin_sd_quantiles: None,
            fidelity_reference: None,
            selection_recall: None,
            selection_recall_ci_low: None,
            selection_recall_ci_high: None,
            jaccard: None,
            jaccard_ci_low: None,
            jaccard_ci_high: None,
            baseline: None,
            recall_diff: None,
            discordant_gained: None,
            discordant_lost: None,
            mcnemar_p: None,
        }
    }

    #[test]
    fn effective_context_against_a_hand_made_grid() {
        let base = crate::config::check(crate::config::resolve(Default::default()).unwrap()).unwrap();
        let s = Scenario {
            contexts: vec![1024, 2048, 4096],
            depths: vec![0.0, 100.0],
            topks: vec![64, 128],
            precisions: vec![PrecisionVariant::builtin("fp32").unwrap(), PrecisionVariant::builtin("bf16").unwrap()],
            threshold: 0.9,
            ..base
        };
        // recall[context index] at depth 0 and at depth 100
        let grid: [(u64, &str, [f64; 3], [f64; 3]); 4] = [
            // held at every context, 0.9 exactly counts as held → "≥ 4K"
            (64, "fp32", [1.0, 0.95, 0.9], [1.0, 1.0, 0.92]),
            // fails at the shortest context (depth 100 only) → "< 1K"
            (64, "bf16", [1.0, 1.0, 1.0], [0.85, 1.0, 1.0]),
            // fails at 4K at one depth → 2K
            (128, "fp32", [1.0, 0.99, 0.89], [1.0, 1.0, 1.0]),
            // recovers at 4K after failing at 2K: a later pass does not count → 1K
            (128, "bf16", [1.0, 0.5, 1.0], [1.0, 1.0, 1.0]),
        ];
        let mut cells = Vec::new();
        for (k, p, d0, d100) in grid {
            for (i, &c) in s.contexts.iter().enumerate() {
                cells.push(cell(c, 0.0, k, p, d0[i]));
                cells.push(cell(c, 100.0, k, p, d100[i]));
            }
        }
        let eff = effective_contexts(&s, &cells);
        let got: Vec<(u64, &str, Option<u64>, bool, u64)> =
            eff.iter().map(|e| (e.topk, e.precision.as_str(), e.effective_context, e.held_at_longest, e.coverage_limit)).collect();
        assert_eq!(
            got,
            vec![
                (64, "fp32", Some(4096), true, 64 * 4 + 128),
                (64, "bf16", None, false, 64 * 4 + 128),
                (128, "fp32", Some(2048), false, 128 * 4 + 128),
                (128, "bf16", Some(1024), false, 128 * 4 + 128),
            ]
        );
        assert!(eff.iter().all(|e| e.threshold == 0.9));
    }
}

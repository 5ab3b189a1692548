//! A sweep: the grid of cells (depth × context × k × precision), simulated
//! one haystack group (depth) at a time by the one loop every sweep runs
//! ([`execute`]: durable or in memory, whole or sharded, resumed or not),
//! and the effective context of each (k, precision).

use crate::base::observe::{Observer, Standing};
use crate::base::units::{Reach, ReachRange};
use crate::config::Scenario;
use crate::error::{Error, SimError};
use crate::estimate::driver::{Checkpoint, NoCheckpoint};
use crate::estimate::grid;
use crate::estimate::predict::CellPrediction;
use crate::estimate::{predictions, recall_estimates, CellEstimate};
use crate::run::cell::CellResult;
use crate::run::plan::Plan;
use crate::score::trial::{NeedleOutcome, TrialSpec};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Selection fidelity is measured against this variant when a sweep has it.
pub const FIDELITY_REFERENCE: &str = "fp32";

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
    /// The same read from whole-model recall; absent without a stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Reach>,
    /// Per-layer reach read from the Wilson intervals' ends (absent in
    /// manifests written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_range: Option<ReachRange>,
    /// Whole-model reach read from the Wilson intervals' ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_range: Option<ReachRange>,
}

impl EffectiveContext {
    /// The reach of per-layer recall.
    pub fn layer(&self) -> Reach {
        Reach { effective_context: self.effective_context, held_at_longest: self.held_at_longest }
    }
}

/// The reach of the recall `recall_of` gives each of `cells` (those of one
/// (k, precision)); None when a cell has no such recall.
fn reach_of(s: &Scenario, cells: &[&CellResult], recall_of: impl Fn(&CellResult) -> Option<f64>) -> Option<Reach> {
    let mut reach = Reach { effective_context: None, held_at_longest: true };
    for &context in &s.contexts {
        let mut ok = true;
        for c in cells.iter().filter(|c| c.context_tokens == context) {
            ok &= recall_of(c)? >= s.threshold;
        }
        if !ok {
            reach.held_at_longest = false;
            break;
        }
        reach.effective_context = Some(context);
    }
    Some(reach)
}

/// The reach read from each cell's interval ends, `interval_of` giving
/// (low, high); None when a cell has no interval.
fn range_of(s: &Scenario, cells: &[&CellResult], interval_of: impl Fn(&CellResult) -> Option<(f64, f64)>) -> Option<ReachRange> {
    Some(ReachRange {
        low: reach_of(s, cells, |c| interval_of(c).map(|i| i.0))?,
        high: reach_of(s, cells, |c| interval_of(c).map(|i| i.1))?,
    })
}

/// A finished sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepOutcome {
    pub cells: Vec<CellResult>,
    pub effective: Vec<EffectiveContext>,
}

/// Trials a haystack group runs: the scenario's trials, twice when the
/// prediction is on (it runs its own pass over the same trial seeds).
pub fn group_trial_runs(s: &Scenario) -> u64 {
    s.trials * (1 + u64::from(s.estimator.predict))
}

/// Trials a sweep runs (for progress bars), counted as in [`group_trial_runs`].
pub fn total_trials(s: &Scenario) -> u64 {
    group_trial_runs(s) * s.depths.len() as u64
}

/// The trial specification of the haystack group at `depths` (one in a
/// sweep; several share the trials, seeded by the first).
pub fn spec_for<'a>(s: &'a Scenario, depths: &'a [f64]) -> TrialSpec<'a> {
    TrialSpec {
        model: &s.model,
        physics: &s.physics,
        geometry: s.geometry,
        needle_offsets: &s.needle_offsets,
        contexts: &s.contexts,
        depths,
        needle_tokens: s.needle_tokens,
        topks: &s.topks,
        variants: &s.precisions,
        tie_rule: s.tie_rule,
        fidelity_reference: s.precisions.iter().position(|p| p.name == FIDELITY_REFERENCE),
        stack: s.stack.as_ref(),
        prefill_chunk: s.prefill_chunk,
        tie_audit: s.estimator.tie_audit,
        margin_threshold: s.estimator.margin.then_some(s.threshold),
        rank_margins: s.estimator.rank_margins,
        agreement: &s.agreement,
    }
}

/// The cells of one haystack group under the scenario's estimator, with the
/// prediction beside them when it is switched on (its trials count in the
/// observer too), every trial run in chunks `checkpoint` keeps. With
/// `first_cell`, the first cell's per-trial outcomes go there too.
pub fn group_cells(
    s: &Scenario,
    spec: &TrialSpec<'_>,
    observer: &dyn Observer,
    checkpoint: &dyn Checkpoint,
    first_cell: Option<&mut Vec<NeedleOutcome>>,
) -> Result<Vec<CellResult>, SimError> {
    let estimates = recall_estimates(&s.estimator, spec, s.seed, s.trials, observer, checkpoint, first_cell)?;
    let predicted = predictions(&s.estimator, spec, s.seed, s.trials, observer, checkpoint)?;
    Ok(combine(spec, &estimates, predicted.as_deref(), s.threshold))
}

fn combine(
    spec: &TrialSpec<'_>,
    estimates: &[CellEstimate],
    predicted: Option<&[Option<CellPrediction>]>,
    threshold: f64,
) -> Vec<CellResult> {
    grid::cells(spec)
        .map(|g| {
            let prediction = predicted.and_then(|p| p[g.index]).map(|p| p.recall);
            CellResult::new(spec, &g, &estimates[g.index], prediction, threshold)
        })
        .collect()
}

/// Where a sweep's cells go as each haystack group finishes (before the
/// group's checkpoint is dropped).
pub trait Sink {
    fn write_group(&mut self, cells: &[CellResult]) -> Result<(), Error>;
}

/// A sink that keeps nothing: the cells live in the returned outcome only.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSink;

impl Sink for NoSink {
    fn write_group(&mut self, _cells: &[CellResult]) -> Result<(), Error> {
        Ok(())
    }
}

/// Runs the plan's groups not yet done, in sweep order: each group's trials
/// in chunks `checkpoint` keeps, its cells to `sink`, then its checkpoint
/// dropped. Returns every cell of the plan (those done earlier first), in
/// sweep order, with the effective contexts unless the plan is a shard's.
/// When `observer` asks to stop, returns [`SimError::Interrupted`] with
/// everything finished in `sink` and `checkpoint`. Any partition of the
/// grid, chunking or interruption gives the same cells: a cell depends only
/// on its coordinates and a trial only on its index.
pub fn execute(
    mut plan: Plan<'_>,
    checkpoint: &dyn Checkpoint,
    observer: &dyn Observer,
    sink: &mut dyn Sink,
) -> Result<SweepOutcome, Error> {
    let s = plan.scenario;
    let runs = group_trial_runs(s);
    let held = plan.groups.get(plan.groups_done).map_or(0, |g| checkpoint.trials_held(g, s.trials));
    observer.started(&Standing {
        trials_done: plan.groups_done as u64 * runs + held,
        trials_total: plan.groups.len() as u64 * runs,
        cells_done: plan.done.len(),
        cells_total: plan.cells_total(),
        rows_to_score: plan.rows_to_score(),
    });
    let mut cells = std::mem::take(&mut plan.done);
    for group in &plan.groups[plan.groups_done..] {
        let part = plan.group_scenario(group);
        let spec = spec_for(&part, &part.depths);
        let new = group_cells(&part, &spec, observer, checkpoint, None)?;
        sink.write_group(&new)?;
        checkpoint.group_done(group)?;
        cells.extend(new);
        observer.cells_written(cells.len());
    }
    let effective = if plan.shard.is_none() { effective_contexts(s, &cells) } else { Vec::new() };
    Ok(SweepOutcome { cells, effective })
}

/// Runs every cell of the scenario in memory ([`execute`] with no
/// checkpoint and no sink). Cells come out ordered by depth, context, k,
/// precision.
pub fn run_sweep(s: &Scenario, observer: &dyn Observer) -> Result<SweepOutcome, Error> {
    execute(Plan::new(s, None), &NoCheckpoint, observer, &mut NoSink)
}

/// [`run_sweep`] with every depth on the same trials
/// ([`Plan::sharing_depths`]): one haystack scored for all depths. Cells
/// come out ordered by context, depth, k, precision.
pub fn run_sweep_sharing_depths(s: &Scenario, observer: &dyn Observer) -> Result<SweepOutcome, Error> {
    execute(Plan::sharing_depths(s), &NoCheckpoint, observer, &mut NoSink)
}

/// For each (k, precision): the longest context L such that recall is at or
/// above the threshold at every depth for every tested context ≤ L.
pub fn effective_contexts(s: &Scenario, cells: &[CellResult]) -> Vec<EffectiveContext> {
    // The cells of each (k, precision), in their order: one pass, not one
    // per pair (a diagnosis has hundreds of variants).
    let mut by_pair: HashMap<(u64, &str), Vec<&CellResult>> = HashMap::new();
    for c in cells {
        by_pair.entry((c.topk, c.precision.as_str())).or_default().push(c);
    }
    let mut out = Vec::new();
    for &k in &s.topks {
        for variant in &s.precisions {
            let cells = by_pair.get(&(k, variant.name.as_str())).map_or(&[][..], Vec::as_slice);
            let layer = reach_of(s, cells, |c| Some(c.recall)).unwrap_or(Reach { effective_context: None, held_at_longest: false });
            out.push(EffectiveContext {
                topk: k,
                precision: variant.name.clone(),
                threshold: s.threshold,
                effective_context: layer.effective_context,
                held_at_longest: layer.held_at_longest,
                coverage_limit: s.geometry.coverage_limit(k),
                model: reach_of(s, cells, |c| c.model_recall),
                layer_range: range_of(s, cells, |c| Some((c.ci_low, c.ci_high))),
                model_range: range_of(s, cells, |c| c.model_ci_low.zip(c.model_ci_high)),
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
            indexed_layers: None,
            model_survived: None,
            model_recall: None,
            model_ci_low: None,
            model_ci_high: None,
            layers_reached: None,
            layers_reached_ci_low: None,
            layers_reached_ci_high: None,
            layers_reached_quantiles: None,
            k_baseline: None,
            k_recall_diff: None,
            k_discordant_gained: None,
            k_discordant_lost: None,
            k_mcnemar_p: None,
            k_model_recall_diff: None,
            model_band_low: None,
            model_band_high: None,
            needle_capped: None,
            needle_margin: None,
            needle_margin_ci_low: None,
            needle_margin_ci_high: None,
            needle_margin_exceedance: None,
            needle_margin_unbounded: None,
            model_needle_margin: None,
            model_needle_margin_ci_low: None,
            model_needle_margin_ci_high: None,
            model_needle_margin_unbounded: None,
            ties: None,
            agreement: Vec::new(),
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
        // Whole-model recall for (64, fp32) only: 1 except 0.5 at 2K, depth 0.
        for c in cells.iter_mut().filter(|c| c.topk == 64 && c.precision == "fp32") {
            c.model_recall = Some(if c.context_tokens == 2048 && c.depth_percent == 0.0 { 0.5 } else { 1.0 });
        }
        let eff = effective_contexts(&s, &cells);
        assert_eq!(eff[0].model, Some(Reach { effective_context: Some(1024), held_at_longest: false }));
        assert!(eff[1..].iter().all(|e| e.model.is_none()), "no model recall, no model reach");
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

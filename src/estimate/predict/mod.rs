//! The prediction: each cell's recall computed from the score distributions
//! instead of ranking every row, reported beside the simulated recall
//! (`--predict on`). Under the null model the closed forms
//! ([`crate::estimate::predict::closed`]) serve the variants they model;
//! every other variant, and every variant under physics, gets the sampled
//! prediction ([`crate::estimate::predict::sampled`]). docs/MODEL.md,
//! "Analytic prediction".

pub mod closed;
pub mod sampled;

use crate::base::special::binomial_cdf_below;
use crate::error::SimError;
use crate::estimate::estimator::Estimator;
use crate::estimate::grid;
use crate::estimate::predict::closed::{closed_form_trial, prediction_applies};
use crate::estimate::predict::sampled::predict_trial_sampled;
use crate::estimate::sample::{models_variant, NEEDS_INDEPENDENT_ROWS};
use crate::estimate::survival::SurvivalEstimate;
use crate::model::needle::{exceedance_of, QuantileNeedle};
use crate::model::physics::Physics;
use crate::score::trial::TrialSpec;

/// A cell's predicted recall: the mean over trials of P(survive | trial),
/// and the standard error of that mean from the needle-score sampling alone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellPrediction {
    pub recall: f64,
    pub sampling_se: f64,
}

/// Predictions of one trial, per cell index of `spec` (None where the
/// prediction does not model the variant).
pub fn predict_trial(spec: &TrialSpec<'_>, trial_seed: u64) -> Result<Vec<Option<SurvivalEstimate>>, SimError> {
    if let Some(q) = spec.model.needle_unit.quantile() {
        return Ok(quantile_trial(spec, q, trial_seed));
    }
    let closed_form = spec.is_null_model();
    let mut out = if closed_form { closed_form_trial(spec, trial_seed)? } else { vec![None; spec.cell_count()] };
    let wanted: Vec<bool> = spec.variants.iter().map(|v| !(closed_form && prediction_applies(v)) && models_variant(v)).collect();
    let sampled = predict_trial_sampled(spec, trial_seed, &wanted)?;
    for (o, s) in out.iter_mut().zip(sampled) {
        if s.is_some() {
            *o = s;
        }
    }
    Ok(out)
}

/// The quantile needle's prediction for one trial: in the exact reference
/// its best row has Binomial(N, u) of the N other candidate rows above it
/// (docs/MODEL.md, "The quantile needle"), so the trial keeps it with
/// P(Bin(N, u) < k_eff), or always when it lies in the raw window. Exact for
/// fp32 under any haystack, as long as the needle reaches its exceedance
/// (`needle_capped` counts the trials where it does not) and no distractor,
/// recency or sink row outranks it; it leaves out how a variant's rounding
/// moves the needle across the cut, so every variant it models gets the
/// reference's value.
fn quantile_trial(spec: &TrialSpec<'_>, q: &QuantileNeedle, trial_seed: u64) -> Vec<Option<SurvivalEstimate>> {
    let u = exceedance_of(q.draw(trial_seed).log10_exceedance);
    grid::cells(spec)
        .map(|g| {
            if !models_variant(g.variant) {
                return None;
            }
            let in_window = g.placement.tokens.start >= g.context.saturating_sub(spec.geometry.window);
            let needle_rows = g.placement.rows.end.min(g.candidates).saturating_sub(g.placement.rows.start.min(g.candidates));
            let probability = if in_window {
                1.0
            } else if needle_rows == 0 {
                0.0
            } else {
                binomial_cdf_below(g.candidates - needle_rows, u, g.k_eff())
            };
            Some(SurvivalEstimate { probability, variance: 0.0 })
        })
        .collect()
}

/// The prediction as an estimator. It uses the simulation's trial seeds, so
/// prediction and simulation share each trial's query, weights and common
/// direction.
#[derive(Clone, Copy, Debug, Default)]
pub struct Predict;

impl Estimator for Predict {
    const NAME: &'static str = "predict";
    type Trial = Vec<Option<SurvivalEstimate>>;
    type Cell = Option<CellPrediction>;

    fn trial(&self, spec: &TrialSpec<'_>, trial_seed: u64) -> Result<Self::Trial, SimError> {
        predict_trial(spec, trial_seed)
    }

    fn cells(&self, spec: &TrialSpec<'_>, per_trial: &[Self::Trial]) -> Vec<Option<CellPrediction>> {
        let trials = per_trial.len();
        let n = trials as f64;
        (0..spec.cell_count())
            .map(|i| {
                let mut sum = 0.0;
                let mut var = 0.0;
                for trial in per_trial {
                    let e = trial[i]?;
                    sum += e.probability;
                    var += e.variance;
                }
                (trials > 0).then(|| CellPrediction { recall: sum / n, sampling_se: var.sqrt() / n })
            })
            .collect()
    }
}

/// Why the prediction cannot serve this physics (at row stride `ratio`):
/// the alternative to name in the error, or None. Variants it does not
/// model get no prediction rather than a refusal.
pub fn refuses(physics: &Physics, ratio: u64) -> Option<String> {
    (!physics.rows_are_independent(ratio))
        .then(|| format!("false, or {NEEDS_INDEPENDENT_ROWS}: the prediction counts rows as independent draws"))
}

//! The one loop that runs an estimator's trials: seeds derived per trial,
//! trials in parallel with rayon, results kept in trial order so every
//! reduction is identical whatever the thread count.

use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::estimate::Estimator;
use crate::score::trial::TrialSpec;
use rayon::prelude::*;

/// Seed of trial `trial` of the haystack group at `depth_percent`. Depends on
/// the depth's value (not its position in a list), so a cell's result does
/// not change when other depths are added to a sweep.
pub fn trial_seed(seed: u64, depth_percent: f64, trial: u64) -> u64 {
    rng::derive(seed, &[tag::TRIAL, depth_percent.to_bits(), trial])
}

/// Runs `trials` trials of one haystack group, in trial order. `on_trial`
/// is called once per finished trial (for progress bars).
pub fn run_trials<E: Estimator>(
    estimator: &E,
    spec: &TrialSpec<'_>,
    seed: u64,
    trials: u64,
    on_trial: &(dyn Fn() + Sync),
) -> Result<Vec<E::Trial>, SimError> {
    (0..trials)
        .into_par_iter()
        .map(|t| {
            let out = estimator.trial(spec, trial_seed(seed, spec.depth_percent, t));
            on_trial();
            out
        })
        .collect()
}

/// Runs and reduces one haystack group: the estimator's cells in
/// [`TrialSpec::cell_index`] order.
pub fn estimate<E: Estimator>(
    estimator: &E,
    spec: &TrialSpec<'_>,
    seed: u64,
    trials: u64,
    on_trial: &(dyn Fn() + Sync),
) -> Result<Vec<E::Cell>, SimError> {
    Ok(estimator.cells(spec, &run_trials(estimator, spec, seed, trials, on_trial)?))
}

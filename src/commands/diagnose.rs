//! `diagnose` and `calibrate`: observations against simulated recall.

use crate::config::{self, Overlay, ScenarioParams};
use crate::error::Error;

/// Trials per cell of a diagnosis unless the scenario says otherwise.
pub const DIAGNOSIS_TRIALS: u64 = 200;

/// The scenario of `diagnose` and `calibrate --observations`: `params`
/// over their defaults ([`DIAGNOSIS_TRIALS`] per cell, no analytic
/// prediction), resolved, and checked once so that a bad value is reported
/// before anything is read or simulated.
pub fn diagnosis_params(params: ScenarioParams) -> Result<ScenarioParams, Error> {
    let mut p = ScenarioParams::default();
    p.sweep.trials = Some(DIAGNOSIS_TRIALS);
    p.estimator.predict = Some(false);
    p.overlay(params);
    let p = config::resolve(p)?;
    config::check(p.clone())?;
    Ok(p)
}

//! The knob a diagnosis or a fit moves: which field, its value in a
//! scenario, and the scenario with it set (shared by `fit` and the needle
//! profile of `diagnose`).

use crate::config::params::ScenarioParams;
use crate::config::vary::VaryAxis;
use crate::error::ConfigError;

/// The knob fitted when `--fit` is not given, under the strength unit …
pub const DEFAULT_FIELD: &str = "needle.strength";
/// … and under the quantile needle (its median exceedance).
pub const DEFAULT_QUANTILE_FIELD: &str = "needle.exceedance";

/// The knob `calibrate` fits by default for resolved `params`: the needle's
/// median exceedance under the quantile unit, its strength otherwise.
pub fn default_field(params: &ScenarioParams) -> &'static str {
    if params.needle.unit.as_deref() == Some("quantile") {
        DEFAULT_QUANTILE_FIELD
    } else {
        DEFAULT_FIELD
    }
}

/// The knob's value in `params`, when it is a number.
pub fn current_value(params: &ScenarioParams, field: &str) -> Option<f64> {
    let (section, key) = field.split_once('.')?;
    serde_json::to_value(params).ok()?.get(section)?.get(key)?.as_f64()
}

/// `params` with the knob at `value`.
pub fn with_value(params: &ScenarioParams, field: &str, value: f64) -> Result<ScenarioParams, ConfigError> {
    VaryAxis { field: field.to_string(), values: vec![value] }.overlay(0, params.clone())
}

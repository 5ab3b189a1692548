//! The limits of a scenario's numbers and the checks of one value, each
//! naming the field (and its flag) in its error.

use super::params::field_name;
use crate::error::ConfigError;

use super::limits::whole_range;
pub use super::limits::{MAX_CONTEXT, MAX_TRIALS};

pub(super) fn require<T>(value: Option<T>, path: &str) -> Result<T, ConfigError> {
    value.ok_or_else(|| {
        ConfigError::new(field_name(path), "(missing)", "a value is required: set it in the scenario file or pick a preset that has it")
    })
}

pub(super) fn finite_at_least(value: f64, min: f64, path: &str) -> Result<f64, ConfigError> {
    if value.is_finite() && value >= min {
        Ok(value)
    } else {
        Err(ConfigError::new(field_name(path), value, format!("a finite number ≥ {min}")))
    }
}

/// A number from `lo` to `hi`.
pub(super) fn number_in(value: f64, lo: f64, hi: f64, path: &str) -> Result<f64, ConfigError> {
    if value.is_finite() && (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(field_name(path), value, format!("a number from {lo} to {hi}")))
    }
}

/// An optional knob that is off (0) when left out, else [`number_in`].
pub(super) fn bounded(value: Option<f64>, lo: f64, hi: f64, path: &str) -> Result<f64, ConfigError> {
    value.map_or(Ok(0.0), |x| number_in(x, lo, hi, path))
}

/// The knob at `path` checked against its fixed range ([`whole_range`]).
pub(super) fn whole_in(value: u64, path: &str) -> Result<u64, ConfigError> {
    let (lo, hi) = whole_range(path).unwrap_or((0, u64::MAX));
    int_in(value, lo, hi, path)
}

pub(super) fn int_in(value: u64, lo: u64, hi: u64, path: &str) -> Result<u64, ConfigError> {
    if (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(field_name(path), value, format!("an integer from {lo} to {hi}")))
    }
}

//! A model knob as a sweep axis: `--vary SECTION.FIELD=V1,V2,…` (or a list
//! given to `--needle-strength`). Each value is laid over the scenario's
//! parameters as if the scenario file had set it, then the whole scenario is
//! checked, so a value out of range is refused with the knob's own message.
//! The sweep runs once per value on the same seed: the same haystacks, so
//! neighbouring values differ by the knob alone (docs/MODEL.md, "A knob as a
//! sweep axis").

use super::params::{field_name, ScenarioParams};
use super::{check, resolve, Overlay, Scenario};
use crate::error::ConfigError;
use serde::{Deserialize, Serialize};

/// The flag an error names.
const FLAG: &str = "--vary";
/// Values per axis; each is a whole sweep.
pub const MAX_VALUES: usize = 64;

/// A knob and the values a sweep takes it through, ascending.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VaryAxis {
    /// TOML path, `section.field` (e.g. `needle.strength`).
    pub field: String,
    pub values: Vec<f64>,
}

impl VaryAxis {
    /// Parses `section.field=V1,V2,…`.
    pub fn parse(text: &str) -> Result<VaryAxis, ConfigError> {
        let (field, list) = text.split_once('=').ok_or_else(|| {
            ConfigError::new(FLAG, format!("{text:?}"), "FIELD=V1,V2,… with FIELD a scenario knob, e.g. needle.strength=0.5,1,2,4")
        })?;
        VaryAxis::new(field.trim(), list)
    }

    /// The axis of `field` over the comma-separated `list`: finite numbers,
    /// at least two distinct ones, sorted ascending. The field must be a
    /// numeric knob outside `[sweep]` (whose lists are the grid's own axes).
    pub fn new(field: &str, list: &str) -> Result<VaryAxis, ConfigError> {
        let (section, key) = field.split_once('.').unwrap_or(("", ""));
        if section.is_empty() || key.is_empty() || key.contains('.') {
            return Err(ConfigError::new(FLAG, format!("{field:?}"), "a scenario knob as section.field, e.g. needle.strength"));
        }
        if section == "sweep" {
            return Err(ConfigError::new(
                FLAG,
                field,
                "a model knob: [sweep] settings are the grid's own axes (--contexts, --depths, --topk, --precisions) or fixed per sweep",
            ));
        }
        let label = field_name(field);
        let mut values = Vec::new();
        for item in list.split(',') {
            let v: f64 =
                item.trim().parse().ok().filter(|v: &f64| v.is_finite()).ok_or_else(|| {
                    ConfigError::new(&label, format!("{list:?}"), "a comma-separated list of finite numbers, e.g. 0.5,1,2,4")
                })?;
            // -0 and 0 are one value, and one directory name.
            values.push(if v == 0.0 { 0.0 } else { v });
        }
        values.sort_by(f64::total_cmp);
        values.dedup();
        if values.len() < 2 || values.len() > MAX_VALUES {
            return Err(ConfigError::new(
                &label,
                format!("{list:?}"),
                format!("2 to {MAX_VALUES} distinct values to sweep over (give one value without a list to fix it)"),
            ));
        }
        let axis = VaryAxis { field: field.to_string(), values };
        // Refuses unknown and non-numeric fields before anything runs.
        for i in 0..axis.values.len() {
            axis.overlay(i, ScenarioParams::default())?;
        }
        Ok(axis)
    }

    /// The field and its flag, for messages: `needle.strength (--needle-strength)`.
    pub fn label(&self) -> String {
        field_name(&self.field)
    }

    /// Value `i` as written in tables, directory names and CSV: the
    /// shortest text that parses back to it.
    pub fn value_text(&self, i: usize) -> String {
        format!("{}", self.values[i])
    }

    /// The output subdirectory of value `i`: `needle.strength=0.5`.
    pub fn dir_name(&self, i: usize) -> String {
        format!("{}={}", self.field, self.value_text(i))
    }

    /// `params` with value `i` laid over them. An integer knob takes only
    /// whole values; a knob that is not a number is refused.
    pub fn overlay(&self, i: usize, mut params: ScenarioParams) -> Result<ScenarioParams, ConfigError> {
        let (section, key) = self.field.split_once('.').unwrap_or_default();
        let v = self.values[i];
        let refuse = |allowed: &str| ConfigError::new(FLAG, format!("{}={}", self.field, self.value_text(i)), allowed.to_string());
        let known =
            serde_json::to_value(ScenarioParams::default()).ok().and_then(|json| json.get(section).map(|s| s.is_object())).unwrap_or(false);
        if !known {
            return Err(refuse("a knob of the scenario file's sections (indexer, geometry, keys, haystack, needle, physics, stack, …)"));
        }
        // Integers first, so that an integer knob given 2 takes it; a float
        // knob reads an integer too.
        let numbers: Vec<serde_json::Value> = if v.fract() == 0.0 && v.abs() < 9.0e15 {
            vec![serde_json::json!(v as i64), serde_json::json!(v)]
        } else {
            vec![serde_json::json!(v)]
        };
        let mut last = String::new();
        for number in numbers {
            let mut patch = serde_json::json!({});
            patch[section] = serde_json::json!({ key: number });
            match serde_json::from_value::<ScenarioParams>(patch) {
                Ok(top) => {
                    params.overlay(top);
                    return Ok(params);
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(refuse(&if last.contains("unknown field") {
            format!("a numeric knob of [{section}] ({})", last.split(", expected").nth(1).unwrap_or("see docs/MODEL.md").trim())
        } else {
            format!("a numeric knob ({last})")
        }))
    }

    /// The checked scenario of every value, in order: `params` (the command
    /// line over the scenario file) with each value on top. Refuses a field
    /// the command line or file also sets, which the axis would override.
    pub fn scenarios(&self, params: &ScenarioParams) -> Result<Vec<Scenario>, ConfigError> {
        let (section, key) = self.field.split_once('.').unwrap_or_default();
        let given = serde_json::to_value(params).ok().and_then(|json| json.get(section)?.get(key).cloned());
        if let Some(given) = given {
            return Err(ConfigError::new(
                self.label(),
                given,
                format!("one value or a list, not both: it is also varied over {}", self.values_text()),
            ));
        }
        (0..self.values.len()).map(|i| check(resolve(self.overlay(i, params.clone())?)?)).collect()
    }

    /// The values as a comma-separated list.
    pub fn values_text(&self) -> String {
        (0..self.values.len()).map(|i| self.value_text(i)).collect::<Vec<_>>().join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sorts_and_dedups() {
        let a = VaryAxis::parse("needle.strength=4, 1,0.5,2,1").unwrap();
        assert_eq!(a.field, "needle.strength");
        assert_eq!(a.values, vec![0.5, 1.0, 2.0, 4.0]);
        assert_eq!(a.dir_name(0), "needle.strength=0.5");
        assert_eq!(a.values_text(), "0.5,1,2,4");
    }

    #[test]
    fn each_value_reaches_the_checked_scenario() {
        let a = VaryAxis::parse("needle.strength=0.5,2").unwrap();
        let mut stress = ScenarioParams::default();
        stress.needle.profile = Some("stress".into());
        let s = a.scenarios(&stress).unwrap();
        assert_eq!(s.iter().map(|s| s.model.needle_strength).collect::<Vec<_>>(), vec![0.5, 2.0]);
        // The quantile needle's median exceedance, log-spaced like any knob.
        let a = VaryAxis::parse("needle.exceedance=1e-4,1e-3").unwrap();
        let s = a.scenarios(&ScenarioParams::default()).unwrap();
        assert_eq!(s.iter().map(|s| s.model.needle_unit.quantile().unwrap().exceedance).collect::<Vec<_>>(), vec![1e-4, 1e-3]);
        // An integer knob.
        let a = VaryAxis::parse("needle.tokens=4,8").unwrap();
        assert_eq!(a.scenarios(&ScenarioParams::default()).unwrap().iter().map(|s| s.needle_tokens).collect::<Vec<_>>(), vec![4, 8]);
    }

    #[test]
    fn refusals_name_the_field_and_what_is_allowed() {
        let cases: [(&str, &[&str]); 8] = [
            ("needle.strength", &["--vary", "FIELD=V1,V2"]),
            ("strength=1,2", &["--vary", "section.field"]),
            ("sweep.trials=10,20", &["--vary", "grid's own axes"]),
            ("needle.strength=1,x", &["needle.strength (--needle-strength)", "finite numbers"]),
            ("needle.strength=1,1", &["needle.strength (--needle-strength)", "2 to 64 distinct"]),
            ("needle.colour=1,2", &["--vary", "numeric knob of [needle]"]),
            ("nosuch.field=1,2", &["--vary", "knob of the scenario file's sections"]),
            ("needle.geometry=1,2", &["--vary", "numeric knob"]),
        ];
        for (text, words) in cases {
            let e = VaryAxis::parse(text).unwrap_err().to_string();
            for w in words {
                assert!(e.contains(w), "{text}: {e} lacks {w}");
            }
            assert!(!e.contains('\n'), "{e}");
        }
        // A whole knob given 2.5: refused at parse time.
        let e = VaryAxis::parse("needle.tokens=2.5,4").unwrap_err().to_string();
        assert!(e.contains("needle.tokens=2.5") && e.contains("numeric knob"), "{e}");
        // A value the knob's own check refuses names the knob.
        let e = VaryAxis::parse("needle.strength=-1,2").unwrap().scenarios(&ScenarioParams::default()).unwrap_err().to_string();
        assert!(e.contains("needle.strength (--needle-strength) = -1"), "{e}");
        // Set and varied at once.
        let mut p = ScenarioParams::default();
        p.needle.strength = Some(3.0);
        let e = VaryAxis::parse("needle.strength=1,2").unwrap().scenarios(&p).unwrap_err().to_string();
        assert!(e.contains("needle.strength (--needle-strength) = 3") && e.contains("not both"), "{e}");
    }
}

//! Presets embedded in the binary (the files live in `presets/`).

use super::params::{parse_scenario_toml, ScenarioParams};
use crate::error::ConfigError;

/// The preset used when none is named.
pub const DEFAULT_PRESET: &str = "deepseek-v4-flash";

/// (name, TOML text) of every embedded preset.
pub const PRESETS: &[(&str, &str)] = &[
    ("deepseek-v4-flash", include_str!("../../presets/deepseek-v4-flash.toml")),
    ("deepseek-v4-pro", include_str!("../../presets/deepseek-v4-pro.toml")),
    ("deepseek-v3.2", include_str!("../../presets/deepseek-v3.2.toml")),
    ("deepseek-v4.1-flash", include_str!("../../presets/deepseek-v4.1-flash.toml")),
    ("glm-5.2", include_str!("../../presets/glm-5.2.toml")),
    ("glm-5.3-flash", include_str!("../../presets/glm-5.3-flash.toml")),
];

pub fn preset_names() -> String {
    PRESETS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// A preset's TOML text.
pub fn preset_text(name: &str) -> Result<&'static str, ConfigError> {
    PRESETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| ConfigError::new("preset (--preset)", format!("{name:?}"), format!("one of {}", preset_names())))
}

/// A preset's parameters.
pub fn preset_params(name: &str) -> Result<ScenarioParams, ConfigError> {
    let text = preset_text(name)?;
    // Embedded presets are tested to parse; a failure here is a build defect,
    // reported as an error rather than a panic all the same.
    parse_scenario_toml(text).map_err(|e| ConfigError::new("preset", name, format!("embedded preset does not parse: {e}")))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_and_is_complete() {
        for (name, _) in PRESETS {
            let p = preset_params(name).unwrap();
            let s = super::super::check(super::super::resolve(ScenarioParams { preset: Some(name.to_string()), ..p }).unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.preset, *name);
        }
        assert!(preset_params("deepseek-v9").unwrap_err().to_string().contains("one of deepseek-v4-flash"));
    }

    #[test]
    fn presets_switch_on_their_model_physics() {
        use crate::model::physics::{KeyNorm, Physics, Pooling, RopeChoice};
        let physics = |name: &str| super::super::check(super::super::resolve(preset_params(name).unwrap()).unwrap()).unwrap().physics;
        // Gate spread and needle boost: assumptions (docs/MODEL.md, "Physics in a trial").
        // Norm weight spread and bias: assumptions (docs/MODEL.md, "Key norms").
        let v4 = Physics {
            rope: RopeChoice::V4,
            pooling: Pooling::On,
            gate_bias_std: 1.0,
            needle_gate_boost: 2.0,
            norm_weight_spread: 0.3,
            ..Physics::NULL
        };
        assert_eq!(physics("deepseek-v4-flash"), v4);
        assert_eq!(physics("deepseek-v4-pro"), v4);
        // Token-level rows (ratio 1): nothing to pool; the keys' LayerNorm.
        assert_eq!(
            physics("deepseek-v3.2"),
            Physics { rope: RopeChoice::V32, key_norm: KeyNorm::LayerNorm, norm_weight_spread: 0.3, norm_bias: 0.2, ..Physics::NULL }
        );
    }
}

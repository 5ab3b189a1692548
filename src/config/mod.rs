//! Scenario configuration in two layers: unchecked [`ScenarioParams`] from
//! presets, TOML files and the command line, merged and then validated once
//! by [`check`] into a [`Scenario`] before any work starts.

pub mod flags;
pub mod limits;
pub mod lists;
pub mod origin;
pub mod params;
pub mod precision;
pub mod preset;
pub mod profile;
pub mod vary;

// The checks, one file per role; `check` below calls them in order.
mod model_sections;
mod stack;
mod sweep;
mod values;
mod variants;

pub use params::field_name;
pub use params::{ListSpec, Overlay, ScenarioParams};
pub use preset::{preset_names, preset_params, preset_text, DEFAULT_PRESET, PRESETS};
pub use values::{MAX_CONTEXT, MAX_TRIALS};

use crate::error::{ConfigError, Error};
use crate::estimate::settings::EstimatorSettings;
use crate::model::geometry::CompressionGeometry;
use crate::model::haystack::GenerativeModel;
use crate::model::physics::Physics;
use crate::model::stack::WholeModel;
use crate::score::selection::TieRule;
use crate::score::variant::PrecisionVariant;
use model_sections::{
    check_geometry, check_haystack, check_indexer, check_keys, check_needle, check_physics, check_selection, needle_geometry,
};
use serde::Serialize;
use stack::{check_simulated_ratio, check_stack};
use sweep::{check_agreement, check_estimator, check_grid, check_monte_carlo, check_variant_topks};
use variants::{check_layer_subsets, check_length_gates, check_needle_multiples, check_precisions, check_prefill_chunk};

/// A validated scenario: every field present and within range.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Scenario {
    pub preset: String,
    pub description: String,
    pub model: GenerativeModel,
    pub geometry: CompressionGeometry,
    /// The model's configured top-k.
    pub index_topk: u64,
    pub needle_tokens: u64,
    /// The needle profile, when the needle's knobs are the profile's own
    /// (None: set by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle_profile: Option<String>,
    pub tie_rule: TieRule,
    pub physics: Physics,
    /// Ascending, without duplicates (after `sweep.length_mods`).
    pub contexts: Vec<u64>,
    /// Ascending, without duplicates.
    pub depths: Vec<f64>,
    /// Needle offsets inside a row stride; `[None]` places the needle where its depth falls.
    pub needle_offsets: Vec<Option<u64>>,
    /// Ascending, without duplicates.
    pub topks: Vec<u64>,
    pub precisions: Vec<PrecisionVariant>,
    pub trials: u64,
    pub seed: u64,
    pub threshold: f64,
    /// `[estimator]`; absent in manifests written before it existed.
    #[serde(default)]
    pub estimator: EstimatorSettings,
    /// `[geometry] prefill_chunk`: tokens per prefill chunk (0: one chunk);
    /// read by chunk faults only, left out of manifests when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prefill_chunk: u64,
    /// `[stack]`: the layers whole-model recall reads; None reports
    /// per-layer recall only (and in manifests written before it existed).
    #[serde(default)]
    pub stack: Option<WholeModel>,
    /// `sweep.agreement`: pairs (A, B) of indices into `precisions` whose
    /// top-k sets are compared; left out of manifests when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agreement: Vec<(usize, usize)>,
}

impl Scenario {
    /// The needle in a few words ([`crate::model::needle::needle_label`]).
    pub fn needle_label(&self) -> String {
        crate::model::needle::needle_label(&self.model.needle_unit, self.model.needle_strength, self.needle_profile.as_deref())
    }
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// Resolves the base preset (the params' own `preset`, or the default) and
/// overlays `params` on it.
pub fn resolve(params: ScenarioParams) -> Result<ScenarioParams, ConfigError> {
    let name = params.preset.clone().unwrap_or_else(|| DEFAULT_PRESET.to_string());
    let mut base = preset_params(&name)?;
    // The needle profile sits between the preset and the scenario's own values.
    let needle = params.needle.profile.as_deref().or(base.needle.profile.as_deref()).unwrap_or(profile::DEFAULT_PROFILE).to_string();
    base.needle.overlay(profile::profile(&needle)?.params());
    refuse_other_unit(&params.needle, base.needle.unit.as_deref())?;
    base.overlay(params);
    base.preset = Some(name);
    Ok(base)
}

/// A knob of the other needle unit, set by the scenario itself (not its
/// preset or profile), would be silently ignored: refused instead.
fn refuse_other_unit(own: &params::NeedleParams, profile_unit: Option<&str>) -> Result<(), ConfigError> {
    let unit = own.unit.as_deref().or(profile_unit).unwrap_or("quantile");
    let quantile_knobs = [
        ("needle.exceedance", own.exceedance),
        ("needle.prompt_spread", own.prompt_spread),
        ("needle.layer_spread", own.layer_spread),
        ("needle.token_spread", own.token_spread),
    ];
    match unit {
        "quantile" => match own.strength {
            Some(v) => Err(ConfigError::new(
                field_name("needle.strength"),
                v,
                "only with needle.unit = \"strength\" (--needle-profile stress or --needle-unit strength); the quantile needle is set by --needle-exceedance and the spreads",
            )),
            None => Ok(()),
        },
        "strength" => match quantile_knobs.iter().find(|(_, v)| v.is_some()) {
            Some((path, v)) => Err(ConfigError::new(
                field_name(path),
                v.unwrap_or_default(),
                "only with needle.unit = \"quantile\" (the niah and hard profiles); the strength unit is set by --needle-strength",
            )),
            None => Ok(()),
        },
        // An unknown unit is reported by the check, with the allowed names.
        _ => Ok(()),
    }
}

/// Validates merged parameters (no preset lookup; see [`resolve`]): one
/// check per section, in this order, so that the first bad value reported
/// is always the same one.
pub fn check(p: ScenarioParams) -> Result<Scenario, ConfigError> {
    check_with(p, TopkRange::Rows)
}

/// As [`check`], with any top-k from 1 allowed: a k at or above the
/// candidate rows selects every row (the dense regime), which an observed
/// deployment may run and a diagnosis must simulate. A sweep asked for by
/// hand refuses it ([`check`]): there it is a mistake more often than not.
pub fn check_dense_topk(p: ScenarioParams) -> Result<Scenario, ConfigError> {
    check_with(p, TopkRange::Dense)
}

/// Which top-k [`check_with`] allows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TopkRange {
    /// 1 to the candidate rows of the longest context.
    Rows,
    /// Any k from 1.
    Dense,
}

fn check_with(p: ScenarioParams, topk_range: TopkRange) -> Result<Scenario, ConfigError> {
    let indexer = check_indexer(&p.indexer)?;
    let head_dim = indexer.shape.head_dim;
    let (ratio, overlap, window) = check_geometry(&p.geometry)?;
    let keys = check_keys(&p.keys, head_dim)?;
    let structure = check_haystack(&p.haystack, head_dim)?;
    let needle = check_needle(&p.needle, indexer.shape)?;
    let (tie_rule, window_rows_compete) = check_selection(&p.selection)?;
    let geometry = CompressionGeometry { ratio, overlap, window, window_rows_compete };
    let physics = check_physics(&p.physics, head_dim, ratio)?;
    let grid = check_grid(&p.sweep, &geometry, indexer.index_topk, needle.tokens, topk_range == TopkRange::Dense)?;
    let needle_geometry = needle_geometry(&needle, &physics, indexer.shape)?;
    let precisions = check_precisions(&p.precision, p.sweep.precisions.as_ref(), head_dim, physics.rope)?;
    check_variant_topks(&precisions, &geometry, &grid.contexts, topk_range == TopkRange::Dense)?;
    let (trials, seed, threshold) = check_monte_carlo(&p.sweep)?;
    let estimator = check_estimator(&p.estimator, &needle.unit, &physics, &structure, ratio, &precisions)?;
    let agreement = check_agreement(&p.sweep, &precisions, &estimator)?;
    let stack = check_stack(&p.stack)?;
    check_simulated_ratio(stack.as_ref(), &p.stack, ratio)?;
    check_layer_subsets(&precisions, stack.as_ref(), &needle.unit)?;
    check_length_gates(&precisions)?;
    if stack.as_ref().is_some_and(|w| w.candidates.is_some()) && needle.unit.is_strength() {
        return Err(ConfigError::new(
            field_name("stack.candidate_source_layer"),
            stack.as_ref().and_then(|w| w.candidates).map_or(0, |c| c.source_layer),
            "a candidate stage needs the quantile needle (its per-layer draws); not with needle.unit = \"strength\"",
        ));
    }
    if let Some(w) = stack.as_ref().filter(|w| (w.plan.needs_words() || w.harm.high > 0.0) && needle.unit.is_strength()) {
        let (path, value) = if w.plan.needs_words() {
            ("stack.layers", format!("{:?}", w.plan.to_words()))
        } else {
            ("stack.lost_layer_harm", w.harm.central.to_string())
        };
        return Err(ConfigError::new(
            field_name(path),
            value,
            "reused selections, mixed ratios, linear layers and lost-layer harm need the quantile needle (its per-layer draws); not with needle.unit = \"strength\"",
        ));
    }
    check_needle_multiples(&precisions, &needle.unit)?;
    let prefill_chunk = check_prefill_chunk(&p.geometry, &precisions)?;

    Ok(Scenario {
        preset: p.preset.unwrap_or_else(|| "custom".into()),
        description: p.description.unwrap_or_default(),
        model: GenerativeModel {
            shape: indexer.shape,
            key_common: keys.common,
            outlier_channels: keys.outlier_channels,
            outlier_scale: keys.outlier_scale,
            weight_mean: indexer.weight_mean,
            weight_std: indexer.weight_std,
            needle_strength: needle.strength,
            needle_unit: needle.unit.clone(),
            needle_heads: needle.heads,
            needle_geometry,
            head_coherence: needle.head_coherence,
            structure,
        },
        geometry,
        index_topk: indexer.index_topk,
        needle_tokens: needle.tokens,
        needle_profile: needle.profile,
        tie_rule,
        physics,
        contexts: grid.contexts,
        depths: grid.depths,
        needle_offsets: grid.needle_offsets,
        topks: grid.topks,
        precisions,
        trials,
        seed,
        threshold,
        estimator,
        prefill_chunk,
        stack,
        agreement,
    })
}

/// Reads and parses a scenario file.
pub fn load_scenario_file(path: &std::path::Path) -> Result<ScenarioParams, Error> {
    // An unreadable scenario file is bad usage (exit 2), like a malformed one.
    let text = crate::base::files::read_text_capped(path, crate::base::files::SCENARIO_FILE_CAP)
        .map_err(|e| Error::ScenarioFile { path: path.display().to_string(), message: format!("cannot read the scenario file: {e}") })?;
    params::parse_scenario_toml(&text).map_err(|message| Error::ScenarioFile { path: path.display().to_string(), message })
}

/// A scenario as every scenario command builds it: the preset (named in
/// `overlay`, or the default) ← the scenario file, if any ← `overlay`, then
/// one validation. `sweep` on the command line and the Python binding's
/// `sweep` both come through here, so the same inputs give the same scenario.
pub fn layered_scenario(file: Option<&std::path::Path>, overlay: ScenarioParams) -> Result<Scenario, Error> {
    let params = layered_params(file, overlay.clone())?;
    resolve(params).and_then(check).map_err(|e| origin::blame(e, file, &overlay))
}

/// The scenario file with `overlay` over it, unchecked and unresolved.
pub fn layered_params(file: Option<&std::path::Path>, overlay: ScenarioParams) -> Result<ScenarioParams, Error> {
    let mut params = ScenarioParams::default();
    if let Some(path) = file {
        params.overlay(load_scenario_file(path)?);
    }
    params.overlay(overlay);
    Ok(params)
}

#[cfg(test)]
mod tests;

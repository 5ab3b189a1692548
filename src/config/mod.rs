//! Scenario configuration in two layers: unchecked [`ScenarioParams`] from
//! presets, TOML files and the command line, merged and then validated once
//! by [`check`] into a [`Scenario`] before any work starts.

pub mod flags;
pub mod lists;
pub mod origin;
pub mod params;
pub mod precision;
pub mod preset;
pub mod profile;
pub mod vary;

pub use params::field_name;
pub use params::{ListSpec, Overlay, ScenarioParams};
pub use preset::{preset_names, preset_params, preset_text, DEFAULT_PRESET, PRESETS};

use crate::error::{ConfigError, Error};
use crate::estimate::refusal;
use crate::estimate::settings::{EstimatorMode, EstimatorSettings};
use crate::model::geometry::CompressionGeometry;
use crate::model::haystack::{GenerativeModel, HaystackStructure, IndexerShape, NeedleGeometry};
use crate::model::needle::{NeedleUnit, QuantileNeedle};
use crate::model::physics::{KeyNorm, Physics, Pooling, RopeChoice};
use crate::model::plan::LayerPlan;
use crate::model::stack::{CandidateStage, FaultSpreadChoice, HcaReading, LayerKind, LostLayerHarm, WholeModel};
use crate::score::selection::{check_topk, TieRule};
use crate::score::variant::PrecisionVariant;
use serde::Serialize;

/// Largest context the simulator accepts (tokens): 16M.
pub const MAX_CONTEXT: u64 = 1 << 24;
/// Largest number of trials per cell.
pub const MAX_TRIALS: u64 = 10_000_000;

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

fn require<T>(value: Option<T>, path: &str) -> Result<T, ConfigError> {
    value.ok_or_else(|| {
        ConfigError::new(field_name(path), "(missing)", "a value is required: set it in the scenario file or pick a preset that has it")
    })
}

fn finite_at_least(value: f64, min: f64, path: &str) -> Result<f64, ConfigError> {
    if value.is_finite() && value >= min {
        Ok(value)
    } else {
        Err(ConfigError::new(field_name(path), value, format!("a finite number ≥ {min}")))
    }
}

/// A number from `lo` to `hi`.
fn number_in(value: f64, lo: f64, hi: f64, path: &str) -> Result<f64, ConfigError> {
    if value.is_finite() && (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(field_name(path), value, format!("a number from {lo} to {hi}")))
    }
}

/// An optional knob that is off (0) when left out, else [`number_in`].
fn bounded(value: Option<f64>, lo: f64, hi: f64, path: &str) -> Result<f64, ConfigError> {
    value.map_or(Ok(0.0), |x| number_in(x, lo, hi, path))
}

fn int_in(value: u64, lo: u64, hi: u64, path: &str) -> Result<u64, ConfigError> {
    if (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(field_name(path), value, format!("an integer from {lo} to {hi}")))
    }
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
    let indexer = check_indexer(&p.indexer)?;
    let head_dim = indexer.shape.head_dim;
    let (ratio, overlap, window) = check_geometry(&p.geometry)?;
    let keys = check_keys(&p.keys, head_dim)?;
    let structure = check_haystack(&p.haystack, head_dim)?;
    let needle = check_needle(&p.needle, indexer.shape)?;
    let (tie_rule, window_rows_compete) = check_selection(&p.selection)?;
    let geometry = CompressionGeometry { ratio, overlap, window, window_rows_compete };
    let physics = check_physics(&p.physics, head_dim, ratio)?;
    let grid = check_grid(&p.sweep, &geometry, indexer.index_topk, needle.tokens)?;
    let needle_geometry = needle_geometry(&needle, &physics, indexer.shape)?;
    let precisions = check_precisions(&p.precision, p.sweep.precisions.as_ref(), head_dim, physics.rope)?;
    check_variant_topks(&precisions, &geometry, &grid.contexts)?;
    let (trials, seed, threshold) = check_monte_carlo(&p.sweep)?;
    let estimator = check_estimator(&p.estimator, &needle.unit, &physics, &structure, ratio, &precisions)?;
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
    })
}

/// Validates `[stack]`: None when neither `layers` nor `compress_ratios`
/// is given, or the one given is `none`.
fn check_stack(p: &params::StackParams) -> Result<Option<WholeModel>, ConfigError> {
    let (field, text) = match (&p.layers, &p.compress_ratios) {
        (Some(words), _) => ("stack.layers", words.clone()),
        (None, Some(list)) => ("stack.compress_ratios", list.to_text()),
        (None, None) => ("stack.compress_ratios", "none".into()),
    };
    if text.trim() == "none" {
        let given = [(p.candidate_source_layer, "stack.candidate_source_layer")].into_iter().chain(stage_fields(p));
        if let Some((v, path)) = given.into_iter().find_map(|(v, path)| Some((v?, path))) {
            return Err(ConfigError::new(
                field_name(path),
                v,
                "only with a stack (stack.layers or stack.compress_ratios): a candidate stage acts across its layers",
            ));
        }
        return Ok(None);
    }
    let plan = if field == "stack.layers" {
        LayerPlan::parse(&text).map_err(|e| {
            ConfigError::new(field_name(field), format!("{text:?}"), format!("{e}; e.g. \"w*2, (i4, h128)*20, i4\" or none"))
        })?
    } else {
        let ratio = int_in(require(p.indexer_ratio, "stack.indexer_ratio")?, 1, 1 << 16, "stack.indexer_ratio")?;
        LayerPlan::from_compress_ratios(&text, ratio)
            .map_err(|e| ConfigError::new(field_name(field), format!("{text:?}"), format!("{e}; e.g. \"0*2, (4, 128)*20, 4\" or none")))?
    };
    let correlation = |v: Option<f64>, path: &str| number_in(require(v, path)?, 0.0, 0.9999, path);
    let tokens = |v: Option<u64>, path: &str| int_in(require(v, path)?, 0, 1 << 16, path);
    let hca_text = require(p.hca.as_deref(), "stack.hca")?;
    let spread_text = require(p.fault_layers.as_deref(), "stack.fault_layers")?;
    let whole = WholeModel {
        plan,
        layer_correlation: correlation(p.layer_correlation, "stack.layer_correlation")?,
        token_correlation: correlation(p.token_correlation, "stack.token_correlation")?,
        question_tokens: tokens(p.question_tokens, "stack.question_tokens")?,
        answer_tokens: tokens(p.answer_tokens, "stack.answer_tokens")?,
        quorum: require(p.quorum, "stack.quorum")?,
        hca: HcaReading::parse(hca_text)
            .ok_or_else(|| ConfigError::new(field_name("stack.hca"), format!("{hca_text:?}"), format!("one of {}", HcaReading::NAMES)))?,
        fault_spread: FaultSpreadChoice::parse(spread_text).ok_or_else(|| {
            ConfigError::new(field_name("stack.fault_layers"), format!("{spread_text:?}"), format!("one of {}", FaultSpreadChoice::NAMES))
        })?,
        candidates: None,
        harm: check_harm(p)?,
    };
    let whole = WholeModel { candidates: check_candidates(p, &whole)?, ..whole };
    if whole.indexed_layers() == 0 {
        let why = if field == "stack.layers" {
            "at least one indexer layer (iR)".to_string()
        } else {
            format!("at least one indexer layer: a layer at stack.indexer_ratio = {}", p.indexer_ratio.unwrap_or(0))
        };
        return Err(ConfigError::new(field_name(field), format!("{text:?}"), why));
    }
    if whole.query_tokens() == 0 {
        return Err(ConfigError::new(
            field_name("stack.question_tokens"),
            whole.question_tokens,
            "at least 1 question or answer token (stack.answer_tokens is 0)",
        ));
    }
    int_in(whole.quorum, 1, whole.selecting_layers() as u64, "stack.quorum")?;
    Ok(Some(whole))
}

/// A plan in words simulates its first indexer layer: that layer's ratio
/// must be the simulated geometry's (with the shorthand, the simulated
/// layer stands for every indexer layer whatever its ratio, as before).
fn check_simulated_ratio(stack: Option<&WholeModel>, p: &params::StackParams, ratio: u64) -> Result<(), ConfigError> {
    let (Some(w), Some(words)) = (stack, &p.layers) else { return Ok(()) };
    let first = w.layers_of(LayerKind::Indexed)[0];
    match w.simulated_ratio() {
        Some(r) if r != ratio => Err(ConfigError::new(
            field_name("stack.layers"),
            format!("{words:?}"),
            format!("the first indexer layer (layer {first}, ratio {r}) is the simulated one: geometry.compress_ratio is {ratio}; make them equal"),
        )),
        _ => Ok(()),
    }
}

/// `stack.lost_layer_harm` and its band: 0 when left out.
fn check_harm(p: &params::StackParams) -> Result<LostLayerHarm, ConfigError> {
    let path = "stack.lost_layer_harm";
    let central = number_in(p.lost_layer_harm.unwrap_or(0.0), 0.0, 1.0, path)?;
    let Some(band) = p.lost_layer_harm_band.as_deref() else { return Ok(LostLayerHarm { central, low: central, high: central }) };
    let bad = || {
        ConfigError::new(
            field_name("stack.lost_layer_harm_band"),
            format!("{band:?}"),
            format!("LOW..HIGH with 0 ≤ LOW ≤ {central} ≤ HIGH ≤ 1 (stack.lost_layer_harm = {central})"),
        )
    };
    let (low, high) = band.split_once("..").ok_or_else(bad)?;
    let (low, high): (f64, f64) = (low.trim().parse().map_err(|_| bad())?, high.trim().parse().map_err(|_| bad())?);
    if !(0.0..=central).contains(&low) || !(central..=1.0).contains(&high) {
        return Err(bad());
    }
    Ok(LostLayerHarm { central, low, high })
}

/// The candidate stage's fields besides its source, with their paths.
fn stage_fields(p: &params::StackParams) -> [(Option<u64>, &'static str); 2] {
    [(p.candidate_blocks, "stack.candidate_blocks"), (p.candidate_block_rows, "stack.candidate_block_rows")]
}

/// `[stack]`'s candidate stage (V4.1's two-level indexer): None when
/// `candidate_source_layer` is left out; then the other two must be too.
fn check_candidates(p: &params::StackParams, whole: &WholeModel) -> Result<Option<CandidateStage>, ConfigError> {
    let Some(source_layer) = p.candidate_source_layer else {
        if let Some((v, path)) = stage_fields(p).into_iter().find_map(|(v, path)| Some((v?, path))) {
            return Err(ConfigError::new(field_name(path), v, "only with stack.candidate_source_layer (--candidate-source-layer)"));
        }
        return Ok(None);
    };
    if whole.indexer_number(source_layer).is_none() {
        return Err(ConfigError::new(
            field_name("stack.candidate_source_layer"),
            source_layer,
            format!("an indexer layer of the stack: {}", whole.layer_list(LayerKind::Indexed)),
        ));
    }
    let blocks = int_in(require(p.candidate_blocks, "stack.candidate_blocks")?, 1, 1 << 24, "stack.candidate_blocks")?;
    let block_rows = int_in(require(p.candidate_block_rows, "stack.candidate_block_rows")?, 1, 4096, "stack.candidate_block_rows")?;
    Ok(Some(CandidateStage { source_layer, blocks, block_rows }))
}

/// `[indexer]`, checked.
struct Indexer {
    shape: IndexerShape,
    index_topk: u64,
    weight_mean: f64,
    weight_std: f64,
}

fn check_indexer(p: &params::IndexerParams) -> Result<Indexer, ConfigError> {
    let heads = int_in(require(p.heads, "indexer.heads")? as u64, 1, 1024, "indexer.heads")? as usize;
    let head_dim = int_in(require(p.head_dim, "indexer.head_dim")? as u64, 1, 4096, "indexer.head_dim")? as usize;
    let index_topk = int_in(require(p.index_topk, "indexer.index_topk")?, 1, MAX_CONTEXT, "indexer.index_topk")?;
    let weight_mean = finite_at_least(require(p.weight_mean, "indexer.weight_mean")?, f64::MIN, "indexer.weight_mean")?;
    let weight_std = finite_at_least(require(p.weight_std, "indexer.weight_std")?, 0.0, "indexer.weight_std")?;
    Ok(Indexer { shape: IndexerShape { heads, head_dim }, index_topk, weight_mean, weight_std })
}

/// `[geometry]`: (compress ratio, overlap, window); `[selection]` adds
/// whether window rows compete.
fn check_geometry(p: &params::GeometryParams) -> Result<(u64, bool, u64), ConfigError> {
    let ratio = int_in(require(p.compress_ratio, "geometry.compress_ratio")?, 1, 1 << 16, "geometry.compress_ratio")?;
    let overlap = require(p.overlap, "geometry.overlap")?;
    if overlap && ratio < 2 {
        return Err(ConfigError::new(field_name("geometry.overlap"), true, "overlapping windows need geometry.compress_ratio ≥ 2"));
    }
    let window = int_in(require(p.window, "geometry.window")?, 0, MAX_CONTEXT, "geometry.window")?;
    Ok((ratio, overlap, window))
}

/// `[keys]`, checked.
struct Keys {
    common: f64,
    outlier_channels: usize,
    outlier_scale: f64,
}

fn check_keys(p: &params::KeyParams, head_dim: usize) -> Result<Keys, ConfigError> {
    let common = finite_at_least(require(p.common, "keys.common")?, 0.0, "keys.common")?;
    let outlier_channels =
        int_in(require(p.outlier_channels, "keys.outlier_channels")? as u64, 0, head_dim as u64, "keys.outlier_channels")? as usize;
    let outlier_scale = require(p.outlier_scale, "keys.outlier_scale")?;
    if !(outlier_scale.is_finite() && outlier_scale > 0.0) {
        return Err(ConfigError::new(field_name("keys.outlier_scale"), outlier_scale, "a finite number > 0"));
    }
    Ok(Keys { common, outlier_channels, outlier_scale })
}

/// `[needle]`, checked.
struct Needle {
    unit: NeedleUnit,
    /// The profile's name when the needle's knobs are the profile's own.
    profile: Option<String>,
    strength: f64,
    tokens: u64,
    heads: usize,
    geometry: String,
    rope_share: f64,
    rope_min_wavelength: u64,
    head_coherence: f64,
}

fn check_needle(p: &params::NeedleParams, shape: IndexerShape) -> Result<Needle, ConfigError> {
    let unit_name = require(p.unit.clone(), "needle.unit")?;
    let strength = finite_at_least(require(p.strength, "needle.strength")?, 0.0, "needle.strength")?;
    let unit = match unit_name.as_str() {
        "strength" => NeedleUnit::Strength,
        "quantile" => {
            let exceedance = require(p.exceedance, "needle.exceedance")?;
            if !(exceedance.is_finite() && exceedance > 0.0 && exceedance < 1.0) {
                return Err(ConfigError::new(field_name("needle.exceedance"), exceedance, "a share above 0 and below 1"));
            }
            let spread = |value: Option<f64>, path: &str| number_in(require(value, path)?, 0.0, 3.0, path);
            NeedleUnit::Quantile(QuantileNeedle {
                exceedance,
                prompt_spread: spread(p.prompt_spread, "needle.prompt_spread")?,
                layer_spread: spread(p.layer_spread, "needle.layer_spread")?,
                token_spread: spread(p.token_spread, "needle.token_spread")?,
            })
        }
        _ => return Err(ConfigError::new(field_name("needle.unit"), format!("{unit_name:?}"), "one of quantile, strength")),
    };
    let tokens = int_in(require(p.tokens, "needle.tokens")?, 1, 1 << 20, "needle.tokens")?;
    let heads = int_in(require(p.heads, "needle.heads")? as u64, 0, shape.heads as u64, "needle.heads")? as usize;
    if heads == 0 && !unit.is_strength() {
        return Err(ConfigError::new(
            field_name("needle.heads"),
            heads,
            "at least 1 with needle.unit = quantile (the needle's offset is solved along the looking heads' direction)",
        ));
    }
    // The profile names the needle only while none of its knobs is changed.
    let profile = p.profile.as_deref().and_then(|name| profile::profile(name).ok()).filter(|named| {
        let own = named.params();
        own.unit == p.unit
            && match unit {
                NeedleUnit::Strength => own.strength == Some(strength),
                NeedleUnit::Quantile(_) => {
                    (own.exceedance, own.prompt_spread, own.layer_spread, own.token_spread)
                        == (p.exceedance, p.prompt_spread, p.layer_spread, p.token_spread)
                }
            }
    });
    let geometry = require(p.geometry.clone(), "needle.geometry")?;
    if !matches!(geometry.as_str(), "content" | "isotropic") {
        return Err(ConfigError::new(field_name("needle.geometry"), format!("{geometry:?}"), "one of content, isotropic"));
    }
    if geometry == "isotropic" && (strength > 0.0 || !unit.is_strength()) && heads > 0 && shape.heads > shape.head_dim {
        return Err(ConfigError::new(
            field_name("indexer.heads"),
            shape.heads,
            format!(
                "at most indexer.head_dim = {} heads with the isotropic needle geometry (its offset solves one equation per head)",
                shape.head_dim
            ),
        ));
    }
    let rope_share = number_in(require(p.rope_share, "needle.rope_share")?, 0.0, 1.0, "needle.rope_share")?;
    let rope_min_wavelength =
        int_in(require(p.rope_min_wavelength, "needle.rope_min_wavelength")?, 1, 1 << 48, "needle.rope_min_wavelength")?;
    let head_coherence = number_in(require(p.head_coherence, "needle.head_coherence")?, 0.0, 0.95, "needle.head_coherence")?;
    let profile = profile.map(|named| named.name.to_string());
    Ok(Needle { unit, profile, strength, tokens, heads, geometry, rope_share, rope_min_wavelength, head_coherence })
}

/// Validates `[haystack]`; fields left out are off.
fn check_haystack(p: &params::HaystackParams, head_dim: usize) -> Result<HaystackStructure, ConfigError> {
    let content_rank = int_in(p.content_rank.unwrap_or(0) as u64, 0, head_dim as u64, "haystack.content_rank")? as usize;
    let at_least_0 = |v: Option<f64>, path| finite_at_least(v.unwrap_or(0.0), 0.0, path);
    let s = HaystackStructure {
        content_rank,
        key_content_share: bounded(p.key_content_share, 0.0, 0.95, "haystack.key_content_share")?,
        query_content_share: bounded(p.query_content_share, 0.0, 0.95, "haystack.query_content_share")?,
        relevance_scale: at_least_0(p.relevance_scale, "haystack.relevance_scale")?,
        relevance_sigma: bounded(p.relevance_sigma, 0.0, 4.0, "haystack.relevance_sigma")?,
        block_rows: int_in(p.block_rows.unwrap_or(0), 0, MAX_CONTEXT, "haystack.block_rows")?,
        block_sigma: bounded(p.block_sigma, 0.0, 4.0, "haystack.block_sigma")?,
        sink_rows: int_in(p.sink_rows.unwrap_or(0), 0, MAX_CONTEXT, "haystack.sink_rows")?,
        sink_relevance: at_least_0(p.sink_relevance, "haystack.sink_relevance")?,
        recency_rows: bounded(p.recency_rows, 0.0, 1e6, "haystack.recency_rows")?,
        recency_relevance: at_least_0(p.recency_relevance, "haystack.recency_relevance")?,
    };
    if content_rank == 0 && (s.key_content_share > 0.0 || s.query_content_share > 0.0) {
        return Err(ConfigError::new(field_name("haystack.content_rank"), 0, "at least 1 when a content share is set"));
    }
    Ok(s)
}

/// The needle geometry of a checked `[needle]` under the checked physics:
/// which dims are rope-free and which rotary pairs turn slowly enough.
fn needle_geometry(needle: &Needle, physics: &Physics, shape: IndexerShape) -> Result<NeedleGeometry, ConfigError> {
    if needle.geometry == "isotropic" {
        return Ok(NeedleGeometry::Isotropic);
    }
    let d = shape.head_dim;
    let (free_dims, band_dims) = match physics.rope.config() {
        None => ((0..d).collect::<Vec<_>>(), Vec::new()),
        Some(rope) => {
            let span = rope.dims();
            let free = (0..d).filter(|j| !(span.offset..span.offset + span.len).contains(j)).collect();
            let mut band = Vec::new();
            for (m, &f) in rope.frequencies().iter().enumerate() {
                if std::f64::consts::TAU / f64::from(f) >= needle.rope_min_wavelength as f64 {
                    let (a, b) = rope.pair_dims(m);
                    band.extend([a, b]);
                }
            }
            band.sort_unstable();
            (free, band)
        }
    };
    let looking = needle.heads;
    if (needle.strength > 0.0 || !needle.unit.is_strength()) && looking > 0 {
        if needle.rope_share < 1.0 && free_dims.len() < looking {
            return Err(ConfigError::new(
                field_name("needle.heads"),
                looking,
                format!("at most {} looking heads: the rope-free dims (one equation per looking head)", free_dims.len()),
            ));
        }
        if needle.rope_share > 0.0 && band_dims.len() < looking {
            return Err(ConfigError::new(
                field_name("needle.rope_share"),
                needle.rope_share,
                format!(
                    "0, or lower needle.rope_min_wavelength (--needle-rope-min-wavelength) = {}: its band has {} rotary dims under --rope {}, fewer than needle.heads = {looking}",
                    needle.rope_min_wavelength,
                    band_dims.len(),
                    physics.rope.name()
                ),
            ));
        }
    }
    Ok(NeedleGeometry::Content { free_dims, band_dims, rope_share: needle.rope_share })
}

/// `[selection]`: (tie rule, whether window rows compete).
fn check_selection(p: &params::SelectionParams) -> Result<(TieRule, bool), ConfigError> {
    let text = require(p.tie_rule.as_deref(), "selection.tie_rule")?;
    let tie_rule = text
        .parse::<TieRule>()
        .map_err(|()| ConfigError::new(field_name("selection.tie_rule"), format!("{text:?}"), format!("one of {}", TieRule::NAMES)))?;
    let window_rows_compete = require(p.window_rows_compete, "selection.window_rows_compete")?;
    Ok((tie_rule, window_rows_compete))
}

/// Validates `[physics]`; fields left out are off.
fn check_physics(p: &params::PhysicsParams, head_dim: usize, ratio: u64) -> Result<Physics, ConfigError> {
    let mut physics = Physics::NULL;
    if let Some(text) = &p.rope {
        physics.rope = RopeChoice::parse(text)
            .ok_or_else(|| ConfigError::new(field_name("physics.rope"), format!("{text:?}"), format!("one of {}", RopeChoice::NAMES)))?;
        if physics.rope != RopeChoice::Off && head_dim < 128 {
            return Err(ConfigError::new(
                field_name("physics.rope"),
                format!("{text:?}"),
                format!("off with indexer.head_dim = {head_dim}: the DeepSeek layouts rotate 64 of 128 dims"),
            ));
        }
    }
    if let Some(text) = &p.pooling {
        physics.pooling = Pooling::parse(text)
            .ok_or_else(|| ConfigError::new(field_name("physics.pooling"), format!("{text:?}"), format!("one of {}", Pooling::NAMES)))?;
    }
    physics.gate_bias_std = bounded(p.gate_bias_std, 0.0, 20.0, "physics.gate_bias_std")?;
    physics.gate_noise_std = bounded(p.gate_noise_std, 0.0, 20.0, "physics.gate_noise_std")?;
    physics.needle_gate_boost = bounded(p.needle_gate_boost, -50.0, 50.0, "physics.needle_gate_boost")?;
    physics.correlation_length = bounded(p.correlation_length, 0.0, 1e6, "physics.correlation_length")?;
    physics.distractors = int_in(p.distractors.unwrap_or(0), 0, 1000, "physics.distractors")?;
    physics.distractor_similarity = bounded(p.distractor_similarity, 0.0, 1.0, "physics.distractor_similarity")?;
    if let Some(text) = &p.key_norm {
        physics.key_norm = KeyNorm::parse(text)
            .ok_or_else(|| ConfigError::new(field_name("physics.key_norm"), format!("{text:?}"), format!("one of {}", KeyNorm::NAMES)))?;
        if physics.key_norm != KeyNorm::Off && physics.pools(ratio) {
            return Err(ConfigError::new(
                field_name("physics.key_norm"),
                format!("{text:?}"),
                "off while rows are pooled (physics.pooling on or full, geometry.compress_ratio > 1): the compressor's RMSNorm normalises them",
            ));
        }
    }
    // The weight and bias act only through a norm, so they may stay set
    // when it is off (like the gate fields without pooling).
    physics.norm_weight_spread = bounded(p.norm_weight_spread, 0.0, 3.0, "physics.norm_weight_spread")?;
    physics.norm_bias = bounded(p.norm_bias, 0.0, 10.0, "physics.norm_bias")?;
    Ok(physics)
}

/// The cell grid of `[sweep]`, checked: every list sorted, without duplicates.
struct Grid {
    contexts: Vec<u64>,
    depths: Vec<f64>,
    needle_offsets: Vec<Option<u64>>,
    topks: Vec<u64>,
}

/// `[sweep]`'s lists: contexts (with length_mods), needle offsets, depths and k.
fn check_grid(p: &params::SweepParams, geometry: &CompressionGeometry, index_topk: u64, needle_tokens: u64) -> Result<Grid, ConfigError> {
    let ratio = geometry.ratio;
    let contexts_spec = require(p.contexts.as_ref(), "sweep.contexts")?;
    let mut contexts = lists::parse_sizes(&field_name("sweep.contexts"), &contexts_spec.to_text())?;
    if let Some(spec) = &p.length_mods {
        let mods = stride_positions(&spec.to_text(), ratio, "sweep.length_mods")?;
        if let Some(mods) = mods {
            contexts = contexts.iter().flat_map(|&l| mods.iter().map(move |&m| l / ratio * ratio + m)).collect();
        }
    }
    let needle_offsets: Vec<Option<u64>> = match &p.needle_offsets {
        Some(spec) => match stride_positions(&spec.to_text(), ratio, "sweep.needle_offsets")? {
            Some(offsets) => offsets.into_iter().map(Some).collect(),
            None => vec![None],
        },
        None => vec![None],
    };
    for &c in &contexts {
        if !(needle_tokens..=MAX_CONTEXT).contains(&c) {
            return Err(ConfigError::new(
                field_name("sweep.contexts"),
                c,
                format!("context lengths from needle.tokens = {needle_tokens} to {MAX_CONTEXT} (16M) tokens"),
            ));
        }
    }
    contexts.sort_unstable();
    contexts.dedup();

    let depth_spec = require(p.depths.as_ref(), "sweep.depths")?;
    let mut depths = lists::parse_numbers(&field_name("sweep.depths"), &depth_spec.to_text())?;
    for &d in &depths {
        if !(0.0..=100.0).contains(&d) {
            return Err(ConfigError::new(field_name("sweep.depths"), d, "depths in percent from 0 (start of the context) to 100 (end)"));
        }
    }
    depths.sort_by(f64::total_cmp);
    depths.dedup();
    // +0.0 and -0.0 are the same depth but seed differently; keep one spelling.
    for d in &mut depths {
        *d += 0.0;
    }

    let mut topks = match &p.topk {
        Some(spec) => lists::parse_sizes(&field_name("sweep.topk"), &spec.to_text())?,
        None => vec![index_topk, index_topk * 2],
    };
    topks.sort_unstable();
    topks.dedup();
    let most_rows = most_candidate_rows(geometry, &contexts);
    if p.topk.is_some() {
        for &k in &topks {
            check_topk(&field_name("sweep.topk"), k, k, most_rows, &longest_context_rows(&contexts))?;
        }
    }
    if let Some(&k) = topks.iter().find(|&&k| k > most_rows) {
        let longest = contexts.last().copied().unwrap_or(0);
        // The default k (index_topk and twice it) was not written: blame the
        // contexts that leave it too few rows.
        return Err(ConfigError::new(
            field_name("sweep.contexts"),
            format!("{:?}", contexts_spec.to_text()),
            format!(
                "a longest context with at least {} candidate rows for the default k (index_topk and twice it: {}), \
                     or sweep.topk (--topk) at most {most_rows}, the candidate rows of {longest} tokens",
                topks.last().copied().unwrap_or(k),
                topks.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(Grid { contexts, depths, needle_offsets, topks })
}

/// The candidate rows of the longest of `contexts`: the most any top-k can select.
fn most_candidate_rows(geometry: &CompressionGeometry, contexts: &[u64]) -> u64 {
    contexts.iter().map(|&c| geometry.candidate_rows(c)).max().unwrap_or(0)
}

/// What [`most_candidate_rows`] counts, for [`check_topk`]'s message.
fn longest_context_rows(contexts: &[u64]) -> String {
    format!("the candidate rows of the longest context ({} tokens)", contexts.last().copied().unwrap_or(0))
}

/// `topk=N` in a variant meets the rule of `--topk` ([`check_topk`]).
fn check_variant_topks(precisions: &[PrecisionVariant], geometry: &CompressionGeometry, contexts: &[u64]) -> Result<(), ConfigError> {
    let most_rows = most_candidate_rows(geometry, contexts);
    for v in precisions {
        if let Some(k) = v.selection.topk {
            check_topk(&field_name("sweep.precisions"), format!("{:?}", v.name), k, most_rows, &longest_context_rows(contexts))?;
        }
    }
    Ok(())
}

/// `[[precision]]` definitions, then `sweep.precisions` naming built-in or
/// custom variants (duplicates dropped).
fn check_precisions(
    defs: &[params::PrecisionParams],
    list: Option<&ListSpec>,
    head_dim: usize,
    rope: RopeChoice,
) -> Result<Vec<PrecisionVariant>, ConfigError> {
    let mut custom: Vec<PrecisionVariant> = Vec::new();
    for (i, def) in defs.iter().enumerate() {
        let v = precision::custom_variant(i, def, head_dim, &custom)?;
        custom.push(v);
    }
    let precision_spec = require(list, "sweep.precisions")?;
    let names = lists::parse_names(&field_name("sweep.precisions"), &precision_spec.to_text())?;
    let mut precisions: Vec<PrecisionVariant> = Vec::new();
    for name in names {
        if name == "all" {
            // Every built-in, then every custom variant, in definition order;
            // those that cannot run at this head_dim are left out, not refused.
            let every = PrecisionVariant::builtin_names().into_iter().map(String::from).chain(custom.iter().map(|v| v.name.clone()));
            for name in every {
                let v = precision::named_variant(&field_name("sweep.precisions"), &name, &custom)?;
                if v.unsupported(head_dim).is_none() && !precisions.iter().any(|p| p.name == v.name) {
                    precisions.push(v);
                }
            }
            continue;
        }
        let v = precision::named_variant(&field_name("sweep.precisions"), &name, &custom)?;
        if let Some(reason) = v.unsupported(head_dim) {
            return Err(ConfigError::new(
                field_name("sweep.precisions"),
                format!("{name:?}"),
                format!("not with indexer.head_dim = {head_dim}: {reason}"),
            ));
        }
        if !precisions.iter().any(|p| p.name == v.name) {
            precisions.push(v);
        }
    }

    if rope == RopeChoice::Off {
        if let Some(v) = precisions.iter().find(|v| v.position != crate::score::variant::PositionOverride::default()) {
            return Err(ConfigError::new(
                field_name("sweep.precisions"),
                format!("{:?}", v.name),
                "rope-swap-q / rope-swap-k only with physics.rope (--rope) v3.2 or v4: without RoPE there is no layout to swap",
            ));
        }
    }
    Ok(precisions)
}

/// Variants whose faults act in some layers only (`layers=…`,
/// `layer-share=F`) need the whole-model stack, the quantile needle's
/// per-layer draws, and layers that exist.
fn check_layer_subsets(
    precisions: &[PrecisionVariant],
    stack: Option<&WholeModel>,
    unit: &crate::model::needle::NeedleUnit,
) -> Result<(), ConfigError> {
    for v in precisions.iter().filter(|v| !v.layers.is_all()) {
        let refuse = |why: String| ConfigError::new(field_name("sweep.precisions"), format!("{:?}", v.name), why);
        if !v.chunk.is_all() {
            // The whole-model estimate reads a needle with no visible row as
            // absent in every layer, so a partial chunk fault would be read
            // as a total one.
            return Err(refuse("a chunk fault (chunk-local) acts in every layer; not with layers=SET or layer-share=F".into()));
        }
        let Some(stack) = stack else {
            return Err(refuse("a fault in some layers needs the whole-model stack ([stack], --compress-ratios)".into()));
        };
        if unit.is_strength() {
            return Err(refuse(
                "a fault in some layers needs the quantile needle (its per-layer draws); not with needle.unit = \"strength\"".into(),
            ));
        }
        if let Some(why) = v.layers.unsupported(stack.indexed_layers()) {
            return Err(refuse(why));
        }
        if v.layers == crate::score::variant::LayerSubset::Reusers && stack.count(LayerKind::Reused) == 0 {
            return Err(refuse("layers=reusers needs a plan with layers that reuse a selection (s, sN in stack.layers)".into()));
        }
    }
    Ok(())
}

/// Variants whose faults act only in longer prompts (`longer-than=T`)
/// take their base's outcomes in shorter ones: the base must be in the
/// sweep, with the same needle.
fn check_length_gates(precisions: &[PrecisionVariant]) -> Result<(), ConfigError> {
    for v in precisions.iter().filter(|v| v.longer_than > 0) {
        let refuse = |why: String| ConfigError::new(field_name("sweep.precisions"), format!("{:?}", v.name), why);
        if v.needle_multiple != 1.0 {
            return Err(refuse("longer-than=T not with needle=M (its base would need the same needle)".into()));
        }
        let base = v.base_name();
        if !precisions.iter().any(|p| p.name == base) {
            return Err(refuse(format!("longer-than=T runs its base in shorter prompts: add {base} to --precisions")));
        }
    }
    Ok(())
}

/// Variants with another needle (`needle=M`) need the quantile needle, and
/// M times its median exceedance must stay a share below 1.
fn check_needle_multiples(precisions: &[PrecisionVariant], unit: &crate::model::needle::NeedleUnit) -> Result<(), ConfigError> {
    for v in precisions.iter().filter(|v| v.needle_multiple != 1.0) {
        let refuse = |why: String| ConfigError::new(field_name("sweep.precisions"), format!("{:?}", v.name), why);
        let Some(q) = unit.quantile() else {
            return Err(refuse("needle=M scales the quantile needle's median exceedance; not with needle.unit = \"strength\"".into()));
        };
        if q.exceedance * v.needle_multiple >= 1.0 {
            return Err(refuse(format!(
                "needle=M with M below {} (M times the median exceedance {:e} must stay below 1)",
                1.0 / q.exceedance,
                q.exceedance
            )));
        }
    }
    Ok(())
}

/// `[geometry] prefill_chunk` (0 when left out), which a chunk fault
/// (`chunk-local`) needs: without it the fault has no boundary to act at.
fn check_prefill_chunk(p: &params::GeometryParams, precisions: &[PrecisionVariant]) -> Result<u64, ConfigError> {
    let chunk = int_in(p.prefill_chunk.unwrap_or(0), 0, MAX_CONTEXT, "geometry.prefill_chunk")?;
    if chunk == 0 {
        if let Some(v) = precisions.iter().find(|v| !v.chunk.is_all()) {
            return Err(ConfigError::new(
                field_name("sweep.precisions"),
                format!("{:?}", v.name),
                "a chunk fault needs a prefill chunk: give geometry.prefill_chunk (--prefill-chunk N, N ≥ 1 tokens)",
            ));
        }
    }
    Ok(chunk)
}

/// `[sweep]`'s Monte Carlo: (trials per cell, seed, recall threshold).
fn check_monte_carlo(p: &params::SweepParams) -> Result<(u64, u64, f64), ConfigError> {
    let trials = int_in(require(p.trials, "sweep.trials")?, 1, MAX_TRIALS, "sweep.trials")?;
    let seed = require(p.seed, "sweep.seed")?;
    let threshold = require(p.threshold, "sweep.threshold")?;
    if !(threshold > 0.0 && threshold <= 1.0) {
        return Err(ConfigError::new(field_name("sweep.threshold"), threshold, "a recall threshold in (0, 1]"));
    }
    Ok((trials, seed, threshold))
}

/// `[estimator]`, an optional section: defaults keep older scenario files and
/// presets valid.
fn check_estimator(
    p: &params::EstimatorParams,
    needle: &NeedleUnit,
    physics: &Physics,
    structure: &HaystackStructure,
    ratio: u64,
    precisions: &[PrecisionVariant],
) -> Result<EstimatorSettings, ConfigError> {
    let mut estimator = EstimatorSettings::default();
    if let Some(text) = &p.mode {
        estimator.mode = EstimatorMode::parse(text).ok_or_else(|| {
            ConfigError::new(field_name("estimator.mode"), format!("{text:?}"), format!("one of {}", EstimatorMode::NAMES))
        })?;
    }
    if let Some(rows) = p.tail_rows {
        estimator.tail_rows = int_in(rows, 64, 1 << 22, "estimator.tail_rows")?;
    }
    if let Some(predict) = p.predict {
        estimator.predict = predict;
    }
    if let Some(audit) = p.tie_audit {
        if audit && estimator.mode != EstimatorMode::Full {
            return Err(ConfigError::new(
                field_name("estimator.tie_audit"),
                audit,
                "off unless estimator.mode is full: only it scores every row",
            ));
        }
        estimator.tie_audit = audit;
    }
    // Each estimator says which scenarios it serves (src/estimate/).
    if let Some(r) = refusal(&estimator, physics, structure, ratio, precisions, needle) {
        return Err(ConfigError::new(field_name(r.field), r.value, r.allowed));
    }
    Ok(estimator)
}

/// Positions inside a row stride (0 … c−1): a list of integers, `all`, or
/// `natural` (None: no such axis).
fn stride_positions(text: &str, ratio: u64, path: &str) -> Result<Option<Vec<u64>>, ConfigError> {
    let words = lists::parse_names(&field_name(path), text)?;
    if words.len() == 1 && words[0] == "natural" {
        return Ok(None);
    }
    if words.len() == 1 && words[0] == "all" {
        return Ok(Some((0..ratio).collect()));
    }
    let mut out = Vec::with_capacity(words.len());
    for w in words {
        match w.parse::<u64>() {
            Ok(v) if v < ratio => out.push(v),
            _ => {
                return Err(ConfigError::new(
                    field_name(path),
                    format!("{w:?}"),
                    format!("integers from 0 to {} (geometry.compress_ratio − 1), `all` or `natural`", ratio - 1),
                ))
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(Some(out))
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

//! The checks of the sections that describe the model and the trial:
//! `[indexer]`, `[geometry]`, `[keys]`, `[needle]`, `[haystack]`,
//! `[selection]` and `[physics]`, and the needle geometry they imply.

use super::params::{self, field_name};
use super::profile;
use super::values::{bounded, finite_at_least, int_in, number_in, require, whole_in, MAX_CONTEXT};
use crate::error::ConfigError;
use crate::model::haystack::{HaystackStructure, IndexerShape, NeedleGeometry};
use crate::model::needle::{NeedleUnit, QuantileNeedle};
use crate::model::physics::{KeyNorm, Physics, Pooling, RopeChoice};
use crate::score::selection::TieRule;

/// `[indexer]`, checked.
pub(super) struct Indexer {
    pub(super) shape: IndexerShape,
    pub(super) index_topk: u64,
    pub(super) weight_mean: f64,
    pub(super) weight_std: f64,
}

pub(super) fn check_indexer(p: &params::IndexerParams) -> Result<Indexer, ConfigError> {
    let heads = int_in(require(p.heads, "indexer.heads")? as u64, 1, 1024, "indexer.heads")? as usize;
    let head_dim = int_in(require(p.head_dim, "indexer.head_dim")? as u64, 1, 4096, "indexer.head_dim")? as usize;
    let index_topk = int_in(require(p.index_topk, "indexer.index_topk")?, 1, MAX_CONTEXT, "indexer.index_topk")?;
    let weight_mean = finite_at_least(require(p.weight_mean, "indexer.weight_mean")?, f64::MIN, "indexer.weight_mean")?;
    let weight_std = finite_at_least(require(p.weight_std, "indexer.weight_std")?, 0.0, "indexer.weight_std")?;
    Ok(Indexer { shape: IndexerShape { heads, head_dim }, index_topk, weight_mean, weight_std })
}

/// `[geometry]`: (compress ratio, overlap, window); `[selection]` adds
/// whether window rows compete.
pub(super) fn check_geometry(p: &params::GeometryParams) -> Result<(u64, bool, u64), ConfigError> {
    let ratio = whole_in(require(p.compress_ratio, "geometry.compress_ratio")?, "geometry.compress_ratio")?;
    let overlap = require(p.overlap, "geometry.overlap")?;
    if overlap && ratio < 2 {
        return Err(ConfigError::new(field_name("geometry.overlap"), true, "overlapping windows need geometry.compress_ratio ≥ 2"));
    }
    let window = whole_in(require(p.window, "geometry.window")?, "geometry.window")?;
    Ok((ratio, overlap, window))
}

/// `[keys]`, checked.
pub(super) struct Keys {
    pub(super) common: f64,
    pub(super) outlier_channels: usize,
    pub(super) outlier_scale: f64,
}

pub(super) fn check_keys(p: &params::KeyParams, head_dim: usize) -> Result<Keys, ConfigError> {
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
pub(super) struct Needle {
    pub(super) unit: NeedleUnit,
    /// The profile's name when the needle's knobs are the profile's own.
    pub(super) profile: Option<String>,
    pub(super) strength: f64,
    pub(super) tokens: u64,
    pub(super) heads: usize,
    pub(super) geometry: String,
    pub(super) rope_share: f64,
    pub(super) rope_min_wavelength: u64,
    pub(super) head_coherence: f64,
}

pub(super) fn check_needle(p: &params::NeedleParams, shape: IndexerShape) -> Result<Needle, ConfigError> {
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
    let tokens = whole_in(require(p.tokens, "needle.tokens")?, "needle.tokens")?;
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
    let rope_min_wavelength = whole_in(require(p.rope_min_wavelength, "needle.rope_min_wavelength")?, "needle.rope_min_wavelength")?;
    let head_coherence = number_in(require(p.head_coherence, "needle.head_coherence")?, 0.0, 0.95, "needle.head_coherence")?;
    let profile = profile.map(|named| named.name.to_string());
    Ok(Needle { unit, profile, strength, tokens, heads, geometry, rope_share, rope_min_wavelength, head_coherence })
}

/// Validates `[haystack]`; fields left out are off.
pub(super) fn check_haystack(p: &params::HaystackParams, head_dim: usize) -> Result<HaystackStructure, ConfigError> {
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
pub(super) fn needle_geometry(needle: &Needle, physics: &Physics, shape: IndexerShape) -> Result<NeedleGeometry, ConfigError> {
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
pub(super) fn check_selection(p: &params::SelectionParams) -> Result<(TieRule, bool), ConfigError> {
    let text = require(p.tie_rule.as_deref(), "selection.tie_rule")?;
    let tie_rule = text
        .parse::<TieRule>()
        .map_err(|()| ConfigError::new(field_name("selection.tie_rule"), format!("{text:?}"), format!("one of {}", TieRule::NAMES)))?;
    let window_rows_compete = require(p.window_rows_compete, "selection.window_rows_compete")?;
    Ok((tie_rule, window_rows_compete))
}

/// Validates `[physics]`; fields left out are off.
pub(super) fn check_physics(p: &params::PhysicsParams, head_dim: usize, ratio: u64) -> Result<Physics, ConfigError> {
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
    physics.distractors = whole_in(p.distractors.unwrap_or(0), "physics.distractors")?;
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

//! Precision variants: how queries and keys are quantized before scoring,
//! and in what formats head weights and logits are kept.
//!
//! A variant applies one [`QuantPipeline`] to the queries and one to the keys
//! (rotation → block scale → element format) and scores them with
//! [`ScoreNumerics`]. Scoring follows the reference kernel's order (see
//! `docs/NUMERICS.md`, "Scoring"): when a side has one scale per row (per
//! head for q, per key row for k), its values stay unscaled element values
//! and the scale is applied where the kernel applies it (the query's folded
//! into the head weight, the key's after the head sum); otherwise that side
//! is dequantized before the products.

use crate::error::SimError;
use crate::format::{
    hadamard_rows_in_place, quantize_dequantize, quantize_to_elements, BlockScaling, BlockShape, ElementFormat, FormatError, Overflow,
};
use crate::key_cache::KeyCacheFaults;
use crate::selection::SelectionOverride;
use serde::{Deserialize, Serialize};

/// Orthogonal rotation applied to each head_dim-vector before quantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rotation {
    None,
    /// Orthonormal Walsh–Hadamard, natural order, scale d^-1/2.
    Hadamard,
}

/// Format the logits are rounded to after the head sum and the key scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogitFormat {
    #[serde(alias = "fp32")]
    F32,
    Bf16,
    #[serde(alias = "fp16")]
    F16,
}

impl LogitFormat {
    pub const NAMES: &'static str = "f32, bf16, f16";

    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            LogitFormat::F32 => x,
            LogitFormat::Bf16 => half::bf16::from_f32(x).to_f32(),
            LogitFormat::F16 => half::f16::from_f32(x).to_f32(),
        }
    }

    /// Parses `f32`/`fp32`, `bf16`, `f16`/`fp16`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Some(LogitFormat::F32),
            "bf16" => Some(LogitFormat::Bf16),
            "f16" | "fp16" => Some(LogitFormat::F16),
            _ => None,
        }
    }
}

/// Format of the head weights w'_h (after the constant factor and any
/// folded query scale).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WeightFormat {
    #[serde(alias = "fp32")]
    F32,
    Bf16,
}

impl WeightFormat {
    pub const NAMES: &'static str = "f32, bf16";

    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            WeightFormat::F32 => x,
            WeightFormat::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }

    /// Parses `f32`/`fp32`, `bf16`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Some(WeightFormat::F32),
            "bf16" => Some(WeightFormat::Bf16),
            _ => None,
        }
    }
}

/// The formats of the scoring arithmetic that is not element storage.
/// Products and sums are always f32 (see [`crate::indexer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreNumerics {
    pub weights: WeightFormat,
    pub logits: LogitFormat,
}

impl ScoreNumerics {
    pub const F32: ScoreNumerics = ScoreNumerics { weights: WeightFormat::F32, logits: LogitFormat::F32 };
}

/// Rows of values ready to score and one scale per row: value j of row r
/// stands for `values[r·d + j] · row_scales[r]`. When the pipeline cannot
/// keep one scale per row the values are dequantized and every scale is 1.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuantizedRows {
    pub values: Vec<f32>,
    pub row_scales: Vec<f32>,
}

impl QuantizedRows {
    /// Rows that carry no scale (every row scale 1). `dim` must be positive.
    pub fn unscaled(values: Vec<f32>, dim: usize) -> Self {
        let rows = values.len() / dim.max(1);
        QuantizedRows { values, row_scales: vec![1.0; rows] }
    }

    /// Buffers for `rows` rows of `dim`.
    pub fn with_capacity(rows: usize, dim: usize) -> Self {
        QuantizedRows { values: Vec::with_capacity(rows * dim), row_scales: Vec::with_capacity(rows) }
    }

    /// The dequantized values, `values · row_scale` (for tests and tools).
    pub fn dequantized(&self, dim: usize) -> Vec<f32> {
        self.values
            .chunks(dim.max(1))
            .zip(&self.row_scales)
            .flat_map(|(row, &s)| row.iter().map(move |&v| if s == 0.0 { 0f32.copysign(v) } else { v * s }))
            .collect()
    }
}

/// rotation → block scale → element format, for one side (q or k).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantPipeline {
    pub rotation: Rotation,
    pub element: ElementFormat,
    /// None: a plain cast with no scale.
    pub scaling: Option<BlockScaling>,
}

impl QuantPipeline {
    pub const EXACT: QuantPipeline = QuantPipeline { rotation: Rotation::None, element: ElementFormat::F32, scaling: None };

    /// Quantizes and dequantizes `values` (rows of `dim`) in place.
    pub fn apply(&self, values: &mut [f32], dim: usize) -> Result<(), FormatError> {
        if self.rotation == Rotation::Hadamard {
            hadamard_rows_in_place(values, dim)?;
        }
        match &self.scaling {
            Some(scaling) => quantize_dequantize(values, dim, self.element, scaling, None),
            None => {
                self.element.round_trip_slice(values, Overflow::Cast);
                Ok(())
            }
        }
    }

    /// True when every row of `dim` values shares one scale (a block of
    /// `dim`, a row or a tensor scale, or no scale), so scoring can apply it
    /// once per row instead of per value.
    pub fn has_row_scale(&self, dim: usize) -> bool {
        match self.scaling.map(|s| s.shape) {
            None | Some(BlockShape::Row | BlockShape::Tensor) => true,
            Some(BlockShape::Block(b)) => b == dim,
        }
    }

    /// Quantizes `input` (rows of `dim`) into `out` for scoring: with one
    /// scale per row ([`Self::has_row_scale`]) `out.values` are the element
    /// values and `out.row_scales` the row scales; otherwise the values are
    /// dequantized and every row scale is 1. `out`'s buffers are reused.
    pub fn quantize_rows_into(&self, input: &[f32], dim: usize, out: &mut QuantizedRows) -> Result<(), FormatError> {
        if dim == 0 {
            return Err(FormatError::ZeroRowLength);
        }
        if !input.len().is_multiple_of(dim) {
            return Err(FormatError::LengthNotMultipleOfRow { len: input.len(), d: dim });
        }
        let rows = input.len() / dim;
        if self.rotation == Rotation::Hadamard {
            crate::format::hadamard_rows_into(input, &mut out.values, dim)?;
        } else {
            out.values.clear();
            out.values.extend_from_slice(input);
        }
        match &self.scaling {
            Some(scaling) if self.has_row_scale(dim) => {
                let block_len = quantize_to_elements(&mut out.values, dim, self.element, scaling, &mut out.row_scales)?;
                if block_len != dim {
                    // A tensor scale: one scale shared by every row.
                    let s = out.row_scales.first().copied().unwrap_or(1.0);
                    out.row_scales.clear();
                    out.row_scales.resize(rows, s);
                }
            }
            Some(scaling) => {
                quantize_dequantize(&mut out.values, dim, self.element, scaling, None)?;
                out.row_scales.clear();
                out.row_scales.resize(rows, 1.0);
            }
            None => {
                self.element.round_trip_slice(&mut out.values, Overflow::Cast);
                out.row_scales.clear();
                out.row_scales.resize(rows, 1.0);
            }
        }
        Ok(())
    }

    /// [`Self::quantize_rows_into`] into new buffers.
    pub fn quantize_rows(&self, input: &[f32], dim: usize) -> Result<QuantizedRows, FormatError> {
        let mut out = QuantizedRows::default();
        self.quantize_rows_into(input, dim, &mut out)?;
        Ok(out)
    }

    pub fn is_identity(&self) -> bool {
        *self == Self::EXACT
    }

    /// Why this pipeline cannot run on vectors of `dim`, if it cannot.
    pub fn unsupported(&self, dim: usize) -> Option<String> {
        if self.rotation == Rotation::Hadamard && !dim.is_power_of_two() {
            return Some(format!("the Hadamard rotation needs a power-of-two head_dim, not {dim}"));
        }
        match self.scaling.map(|s| s.shape) {
            Some(BlockShape::Block(b)) if b == 0 || !dim.is_multiple_of(b) => {
                Some(format!("block size {b} does not divide head_dim {dim}"))
            }
            _ => None,
        }
    }
}

/// What a variant changes about RoPE (hypotheses `rope-swap-q`,
/// `rope-swap-k`): the side whose pairing layout is the other one
/// (interleaved pairs ↔ first-half/second-half pairs) than the model's.
/// Applied by the RoPE stage; meaningless with RoPE off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct PositionOverride {
    pub query_rope_layout_swapped: bool,
    pub key_rope_layout_swapped: bool,
}

impl PositionOverride {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A named way of storing queries and keys and scoring them, with the
/// hypotheses applied on top of it (docs/HYPOTHESES.md). The hypothesis
/// fields are left out of serialized scenarios when they change nothing, so
/// manifests of plain variants keep their bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrecisionVariant {
    pub name: String,
    pub query: QuantPipeline,
    pub key: QuantPipeline,
    pub scoring: ScoreNumerics,
    /// Faults between writing keys to the paged cache and reading them back.
    #[serde(default, skip_serializing_if = "KeyCacheFaults::is_default")]
    pub cache: KeyCacheFaults,
    #[serde(default, skip_serializing_if = "SelectionOverride::is_default")]
    pub selection: SelectionOverride,
    #[serde(default, skip_serializing_if = "PositionOverride::is_default")]
    pub position: PositionOverride,
}

/// Built-in variants: (name, what it stands for). Sources and the reasons
/// for each choice in docs/NUMERICS.md.
pub const BUILTIN: &[(&str, &str)] = &[
    ("fp32", "fp32 queries, keys, head weights and logits: the exact reference"),
    ("bf16", "bf16 queries and keys (round to nearest even, no scale); fp32 weights and logits"),
    ("fp8", "DeepSeek-V3.2 reference: Hadamard, e4m3fn, blocks of 128, ue8m0 scales rounded up, q and k; fp32 weights and logits"),
    ("fp8-fp32scale", "sglang/vLLM/DeepGEMM indexer cache: Hadamard, e4m3fn with an fp32 scale per 128, q and k; fp32 weights and logits"),
    ("fp4", "DeepSeek-V4 reference: Hadamard, e2m1, blocks of 32, ue8m0 scales rounded up, q and k; bf16 weights and logits"),
    ("mxfp4", "MXFP4: Hadamard, e2m1 with an OCP MX ue8m0 scale per 32, q and k; fp32 weights and logits"),
    ("nvfp4", "NVFP4: Hadamard, e2m1 with an e4m3 scale per 16 (no per-tensor scale), q and k; fp32 weights and logits"),
];

impl PrecisionVariant {
    /// A variant with no hypothesis applied.
    pub fn new(name: &str, query: QuantPipeline, key: QuantPipeline, scoring: ScoreNumerics) -> Self {
        PrecisionVariant {
            name: name.to_string(),
            query,
            key,
            scoring,
            cache: KeyCacheFaults::default(),
            selection: SelectionOverride::default(),
            position: PositionOverride::default(),
        }
    }

    /// Quantizes a chunk of raw keys (rows `first_row …`, rows of `d`;
    /// `first_row` a multiple of 256) as they are written to the paged key
    /// cache, and gives in `out` what the scorer reads back, with this
    /// variant's cache faults (see [`crate::key_cache`]). Without faults this
    /// is exactly `self.key.quantize_rows_into(raw, d, out)`.
    pub fn store_keys(&self, raw: &[f32], first_row: u64, d: usize, out: &mut QuantizedRows) -> Result<(), SimError> {
        self.cache.store(&self.key, raw, first_row, d, out)
    }

    /// Looks a built-in variant up by name.
    pub fn builtin(name: &str) -> Option<PrecisionVariant> {
        let plain = |element| QuantPipeline { rotation: Rotation::None, element, scaling: None };
        let rotated = |element, scaling: BlockScaling| QuantPipeline { rotation: Rotation::Hadamard, element, scaling: Some(scaling) };
        let fp32_scale = BlockScaling { scale: crate::format::ScaleFormat::Fp32, ..BlockScaling::DEEPSEEK_FP8 };
        // V4 reference: q and k are stored as bf16 after the fp4 round trip
        // (exact: e2m1 values times a power of two fit bf16) and the score is
        // computed in bf16 tensors; we model that as bf16 head weights and
        // bf16 logits (see docs/NUMERICS.md for what is not modelled).
        let bf16_scoring = ScoreNumerics { weights: WeightFormat::Bf16, logits: LogitFormat::Bf16 };
        let (side, scoring) = match name {
            "fp32" => (plain(ElementFormat::F32), ScoreNumerics::F32),
            "bf16" => (plain(ElementFormat::Bf16), ScoreNumerics::F32),
            "fp8" => (rotated(ElementFormat::E4m3fn, BlockScaling::DEEPSEEK_FP8), ScoreNumerics::F32),
            "fp8-fp32scale" => (rotated(ElementFormat::E4m3fn, fp32_scale), ScoreNumerics::F32),
            "fp4" => (rotated(ElementFormat::E2m1, BlockScaling::DEEPSEEK_FP4), bf16_scoring),
            "mxfp4" => (rotated(ElementFormat::E2m1, BlockScaling::OCP_MX), ScoreNumerics::F32),
            "nvfp4" => (rotated(ElementFormat::E2m1, BlockScaling::NVFP4), ScoreNumerics::F32),
            _ => return None,
        };
        Some(PrecisionVariant::new(name, side.clone(), side, scoring))
    }

    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// Why this variant cannot run on vectors of `dim`, if it cannot.
    pub fn unsupported(&self, dim: usize) -> Option<String> {
        self.query.unsupported(dim).or_else(|| self.key.unsupported(dim)).or_else(|| self.cache.unsupported(&self.key, dim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::indexer::IndexerQuery;

    #[test]
    fn every_listed_builtin_resolves() {
        for name in PrecisionVariant::builtin_names() {
            assert_eq!(PrecisionVariant::builtin(name).unwrap().name, name);
        }
        assert!(PrecisionVariant::builtin("fp7").is_none());
    }

    /// Scores of every key under `variant`, kernel order (scales folded
    /// where a side has one scale per row) and dequantize-first.
    fn folded_and_dequantized(variant: &PrecisionVariant, q: &[f32], w: &[f32], keys: &[f32], d: usize) -> (Vec<f32>, Vec<f32>) {
        let n = keys.len() / d;
        let folded_q = IndexerQuery::new(variant.query.quantize_rows(q, d).unwrap(), w, d, variant.scoring);
        let mut folded = vec![0.0; n];
        folded_q.score_quantized_rows(&variant.key.quantize_rows(keys, d).unwrap(), &mut folded);
        let mut dq = q.to_vec();
        variant.query.apply(&mut dq, d).unwrap();
        let mut dk = keys.to_vec();
        variant.key.apply(&mut dk, d).unwrap();
        let plain_q = IndexerQuery::new(QuantizedRows::unscaled(dq, d), w, d, variant.scoring);
        let mut plain = vec![0.0; n];
        plain_q.score_rows(&dk, &mut plain);
        (folded, plain)
    }

    fn test_data(heads: usize, d: usize, n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let wave = |i: usize, a: f32| ((i as f32) * a).sin() * (1.0 + (i % 7) as f32);
        let q = (0..heads * d).map(|i| wave(i, 0.37)).collect();
        let w = (0..heads).map(|h| wave(h, 1.3)).collect();
        let k = (0..n * d).map(|i| wave(i, 0.91) * 0.01).collect();
        (q, w, k)
    }

    #[test]
    fn folded_scales_equal_dequantize_first_for_power_of_two_scales() {
        let (q, w, k) = test_data(8, 128, 37);
        let fp8 = PrecisionVariant::builtin("fp8").unwrap();
        assert!(fp8.query.has_row_scale(128) && fp8.key.has_row_scale(128));
        let (folded, plain) = folded_and_dequantized(&fp8, &q, &w, &k, 128);
        assert_eq!(folded, plain);
        // fp4's blocks of 32 cannot be folded: both paths are the same code.
        let fp4 = PrecisionVariant::builtin("fp4").unwrap();
        assert!(!fp4.key.has_row_scale(128));
        let (folded, plain) = folded_and_dequantized(&fp4, &q, &w, &k, 128);
        assert_eq!(folded, plain);
    }

    #[test]
    fn folded_fp32_scales_agree_to_a_few_ulps() {
        let (q, w, k) = test_data(8, 128, 37);
        let v = PrecisionVariant::builtin("fp8-fp32scale").unwrap();
        let (folded, plain) = folded_and_dequantized(&v, &q, &w, &k, 128);
        for (a, b) in folded.iter().zip(&plain) {
            assert!((a - b).abs() <= 1e-5 * a.abs().max(b.abs()) + 1e-30, "{a} vs {b}");
        }
    }

    #[test]
    fn bf16_pipeline_rounds_to_nearest_even() {
        let v = PrecisionVariant::builtin("bf16").unwrap();
        // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even → 1.
        let mut x = vec![1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8)];
        v.key.apply(&mut x, 2).unwrap();
        assert_eq!(x, vec![1.0, 1.0 + 2.0 * 2f32.powi(-7)]);
    }
}

//! Quantization pipelines: how queries and keys are quantized before
//! scoring, and in what formats head weights and logits are kept.
//!
//! A precision variant ([`crate::score::variant`]) applies one [`QuantPipeline`] to the queries and one to the keys
//! (rotation → block scale → element format) and scores them with
//! [`ScoreNumerics`]. Scoring follows the reference kernel's order (see
//! `docs/NUMERICS.md`, "Scoring"): when a side has one scale per row (per
//! head for q, per key row for k), its values stay unscaled element values
//! and the scale is applied where the kernel applies it (the query's folded
//! into the head weight, the key's after the head sum); otherwise that side
//! is dequantized before the products.

use crate::numerics::format::{
    hadamard_rows_in_place, quantize_dequantize, quantize_to_elements, BlockScaling, BlockShape, ElementFormat, FormatError, Overflow,
};
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
/// Products and sums are always f32 (see [`crate::score::indexer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreNumerics {
    pub weights: WeightFormat,
    pub logits: LogitFormat,
    /// Each head's dot product goes through ReLU before the weighted sum
    /// (the indexer's design); false: the signed sum (hypothesis `no-relu`).
    /// Left out of serialized scenarios when true, so manifests keep their bytes.
    #[serde(default = "relu_on", skip_serializing_if = "is_relu_on")]
    pub relu: bool,
}

fn relu_on() -> bool {
    true
}

fn is_relu_on(relu: &bool) -> bool {
    *relu
}

impl ScoreNumerics {
    pub const F32: ScoreNumerics = ScoreNumerics { weights: WeightFormat::F32, logits: LogitFormat::F32, relu: true };
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
    /// The pipeline (the same for queries and keys) and scoring numerics of
    /// the built-in variant `name` ([`crate::score::variant`]).
    pub fn builtin(name: &str) -> Option<(QuantPipeline, ScoreNumerics)> {
        let plain = |element| QuantPipeline { rotation: Rotation::None, element, scaling: None };
        let rotated = |element, scaling: BlockScaling| QuantPipeline { rotation: Rotation::Hadamard, element, scaling: Some(scaling) };
        let fp32_scale = BlockScaling { scale: crate::numerics::format::ScaleFormat::Fp32, ..BlockScaling::DEEPSEEK_FP8 };
        // V4 reference: q and k are stored as bf16 after the fp4 round trip
        // (exact: e2m1 values times a power of two fit bf16) and the score is
        // computed in bf16 tensors; we model that as bf16 head weights and
        // bf16 logits (see docs/NUMERICS.md for what is not modelled).
        let bf16_scoring = ScoreNumerics { weights: WeightFormat::Bf16, logits: LogitFormat::Bf16, relu: true };
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
        Some((side, scoring))
    }

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
            crate::numerics::format::hadamard_rows_into(input, &mut out.values, dim)?;
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

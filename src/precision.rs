//! Precision variants: how queries and keys are quantized before scoring,
//! and in what format logits are kept.
//!
//! A variant applies one [`QuantPipeline`] to the queries and one to the keys:
//! rotation → element format (with block scaling, once the number-format
//! module provides it) → dequantize. Scoring then always sees dequantized f32
//! values, which is exact for every format we model because every element
//! value times a power-of-two or fp32 scale is representable in f32.

use crate::format::{hadamard_rows_in_place, quantize_dequantize, BlockScaling, BlockShape, ElementFormat, FormatError, Overflow};
use serde::{Deserialize, Serialize};

/// Orthogonal rotation applied to each head_dim-vector before quantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rotation {
    None,
    /// Orthonormal Walsh–Hadamard, natural order, scale d^-1/2.
    Hadamard,
}

/// Format the logits are rounded to after the head sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogitFormat {
    F32,
    Bf16,
}

impl LogitFormat {
    #[inline]
    pub fn round(self, x: f32) -> f32 {
        match self {
            LogitFormat::F32 => x,
            LogitFormat::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }
}

/// rotation → block scale → element format → dequantize, for one side (q or k).
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

    pub fn is_identity(&self) -> bool {
        *self == Self::EXACT
    }

    /// Why this pipeline cannot run on vectors of `dim`, if it cannot.
    pub fn unsupported(&self, dim: usize) -> Option<String> {
        if self.rotation == Rotation::Hadamard && !dim.is_power_of_two() {
            return Some(format!("the Hadamard rotation needs a power-of-two head_dim, not {dim}"));
        }
        match self.scaling.map(|s| s.shape) {
            Some(BlockShape::Block(b)) if b == 0 || dim % b != 0 => Some(format!("block size {b} does not divide head_dim {dim}")),
            _ => None,
        }
    }
}

/// A named way of storing queries and keys and scoring them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrecisionVariant {
    pub name: String,
    pub query: QuantPipeline,
    pub key: QuantPipeline,
    pub logits: LogitFormat,
}

/// Built-in variants: (name, what it stands for). Sources in docs/MODEL.md.
pub const BUILTIN: &[(&str, &str)] = &[
    ("fp32", "fp32 queries, keys and logits: the exact reference"),
    ("bf16", "bf16 queries and keys (round to nearest even), fp32 accumulation and logits"),
    ("fp8", "DeepSeek-V3.2 reference: Hadamard, e4m3fn, blocks of 128, ue8m0 scales rounded up, q and k; fp32 logits"),
    ("fp8-fp32scale", "sglang/vLLM/DeepGEMM indexer cache: Hadamard, e4m3fn with an fp32 scale per 128; fp32 logits"),
    ("fp4", "DeepSeek-V4 reference: Hadamard, e2m1, blocks of 32, ue8m0 scales rounded up, q and k; bf16 logits"),
    ("mxfp4", "MXFP4: Hadamard, e2m1 with an OCP MX ue8m0 scale per 32; fp32 logits"),
    ("nvfp4", "NVFP4: Hadamard, e2m1 with an e4m3 scale per 16 (no per-tensor scale); fp32 logits"),
];

impl PrecisionVariant {
    /// Looks a built-in variant up by name.
    pub fn builtin(name: &str) -> Option<PrecisionVariant> {
        let plain = |element| QuantPipeline { rotation: Rotation::None, element, scaling: None };
        let rotated = |element, scaling: BlockScaling| QuantPipeline { rotation: Rotation::Hadamard, element, scaling: Some(scaling) };
        let fp32_scale = BlockScaling { scale: crate::format::ScaleFormat::Fp32, ..BlockScaling::DEEPSEEK_FP8 };
        let (side, logits) = match name {
            "fp32" => (plain(ElementFormat::F32), LogitFormat::F32),
            "bf16" => (plain(ElementFormat::Bf16), LogitFormat::F32),
            "fp8" => (rotated(ElementFormat::E4m3fn, BlockScaling::DEEPSEEK_FP8), LogitFormat::F32),
            "fp8-fp32scale" => (rotated(ElementFormat::E4m3fn, fp32_scale), LogitFormat::F32),
            "fp4" => (rotated(ElementFormat::E2m1, BlockScaling::DEEPSEEK_FP4), LogitFormat::Bf16),
            "mxfp4" => (rotated(ElementFormat::E2m1, BlockScaling::OCP_MX), LogitFormat::F32),
            "nvfp4" => (rotated(ElementFormat::E2m1, BlockScaling::NVFP4), LogitFormat::F32),
            _ => return None,
        };
        Some(PrecisionVariant { name: name.to_string(), query: side.clone(), key: side, logits })
    }

    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// Why this variant cannot run on vectors of `dim`, if it cannot.
    pub fn unsupported(&self, dim: usize) -> Option<String> {
        self.query.unsupported(dim).or_else(|| self.key.unsupported(dim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_builtin_resolves() {
        for name in PrecisionVariant::builtin_names() {
            assert_eq!(PrecisionVariant::builtin(name).unwrap().name, name);
        }
        assert!(PrecisionVariant::builtin("fp7").is_none());
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

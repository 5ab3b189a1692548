//! Precision variants: how queries and keys are quantized before scoring,
//! and in what format logits are kept.
//!
//! A variant applies one [`QuantPipeline`] to the queries and one to the keys:
//! rotation → element format (with block scaling, once the number-format
//! module provides it) → dequantize. Scoring then always sees dequantized f32
//! values, which is exact for every format we model because every element
//! value times a power-of-two or fp32 scale is representable in f32.

use crate::format::{hadamard_in_place, ElementFormat, Overflow};
use serde::{Deserialize, Serialize};

/// Orthogonal rotation applied to each 128-vector before quantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rotation {
    None,
    /// Orthonormal Walsh–Hadamard, natural order.
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

/// rotation → element format → dequantize, for one side (q or k).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantPipeline {
    pub rotation: Rotation,
    pub element: ElementFormat,
}

impl QuantPipeline {
    pub const EXACT: QuantPipeline = QuantPipeline { rotation: Rotation::None, element: ElementFormat::F32 };

    /// Quantizes and dequantizes `values` (rows of `dim`) in place.
    pub fn apply(&self, values: &mut [f32], dim: usize) {
        if self.rotation == Rotation::Hadamard {
            for row in values.chunks_exact_mut(dim) {
                hadamard_in_place(row);
            }
        }
        self.element.round_trip_slice(values, Overflow::Cast);
    }

    pub fn is_identity(&self) -> bool {
        *self == Self::EXACT
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

/// Built-in variants: (name, what it stands for).
pub const BUILTIN: &[(&str, &str)] = &[
    ("fp32", "fp32 queries, keys and logits: the exact reference"),
    ("bf16", "bf16 queries and keys (round to nearest even), fp32 accumulation and logits"),
];

impl PrecisionVariant {
    /// Looks a built-in variant up by name.
    pub fn builtin(name: &str) -> Option<PrecisionVariant> {
        let side = |element| QuantPipeline { rotation: Rotation::None, element };
        let (q, k, logits) = match name {
            "fp32" => (side(ElementFormat::F32), side(ElementFormat::F32), LogitFormat::F32),
            "bf16" => (side(ElementFormat::Bf16), side(ElementFormat::Bf16), LogitFormat::F32),
            _ => return None,
        };
        Some(PrecisionVariant { name: name.to_string(), query: q, key: k, logits })
    }

    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
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
        v.key.apply(&mut x, 2);
        assert_eq!(x, vec![1.0, 1.0 + 2.0 * 2f32.powi(-7)]);
    }
}

//! `dsa-recall quantize`: casts or block-scales a list of numbers and prints
//! the dequantized values, one per line.
//!
//! Output is Rust's shortest round-trip formatting of the f32 (`{}`), so
//! parsing a printed value as f32 gives back the exact dequantized value:
//! `-0` keeps its sign; infinities print as `inf` and `-inf`; NaN prints as
//! `NaN` (its sign and payload are not printed: `--codes` shows the bits).

use crate::numerics::format::{
    default_amax_floor, quantize_dequantize, BlockScaling, BlockShape, ElementFormat, Overflow, QuantizedBlocks, ScaleFormat,
};

/// How the values are scaled before the cast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleRule {
    /// A plain cast.
    None,
    Scaled(ScaleFormat),
}

impl ScaleRule {
    pub const NAMES: &'static str = "none, fp32, ue8m0, ue8m0-floor, e4m3";

    /// `none`, `fp32`, `ue8m0` (DeepSeek, rounded up), `ue8m0-floor` (OCP MX), `e4m3` (NVFP4).
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "none" => ScaleRule::None,
            "fp32" | "f32" => ScaleRule::Scaled(ScaleFormat::Fp32),
            "ue8m0" | "ue8m0-ceil" => ScaleRule::Scaled(ScaleFormat::Ue8m0Ceil),
            "ue8m0-floor" => ScaleRule::Scaled(ScaleFormat::Ue8m0Floor),
            "e4m3" => ScaleRule::Scaled(ScaleFormat::E4m3),
            _ => return None,
        })
    }
}

/// What `quantize` does to its inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantizeSpec {
    pub format: ElementFormat,
    /// Inputs per scale; None with a scale: one scale for all inputs.
    pub block: Option<usize>,
    pub scale: ScaleRule,
    /// Plain casts only: clamp to ±max instead of the format's overflow.
    pub saturate: bool,
    /// Overrides [`default_amax_floor`].
    pub amax_floor: Option<f32>,
}

/// What [`QuantizeSpec::quantize_blocks`] gives: per input its dequantized
/// value and code, and the scale of each block.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantized {
    pub values: Vec<f32>,
    pub codes: Vec<u32>,
    pub scales: Vec<f32>,
}

/// Whether `quantize --format` takes `format`: every element format but f32,
/// which would be the identity.
fn is_cast_format(format: ElementFormat) -> bool {
    format != ElementFormat::F32
}

/// The names `quantize --format` takes, for its help and errors.
pub fn cast_format_names() -> String {
    let formats: Vec<ElementFormat> = ElementFormat::ALL.into_iter().filter(|f| is_cast_format(*f)).collect();
    ElementFormat::names(&formats, ", ")
}

/// Every spelling `quantize --format` takes, names and aliases, in table
/// order (Python's `ELEMENT_FORMATS`).
pub fn cast_format_spellings() -> Vec<&'static str> {
    ElementFormat::ALL
        .into_iter()
        .filter(|f| is_cast_format(*f))
        .flat_map(|f| std::iter::once(f.name()).chain(f.aliases().iter().copied()))
        .collect()
}

/// A bad `quantize` invocation or input. One line each.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum QuantizeError {
    #[error("invalid --format = {0:?}: one of {names}", names = cast_format_names())]
    Format(String),
    #[error("invalid --scale = {0:?}: one of {names}", names = ScaleRule::NAMES)]
    Scale(String),
    #[error("invalid --block = {0}: a positive number of values per scale")]
    Block(usize),
    #[error("--block needs a --scale other than none (a plain cast has no blocks)")]
    BlockWithoutScale,
    #[error("--amax-floor needs a --scale other than none")]
    FloorWithoutScale,
    #[error("invalid --amax-floor = {0}: a finite number ≥ 0")]
    AmaxFloor(f32),
    /// `text` is quoted and shortened (a line of junk stays a short message).
    #[error("invalid value {text} ({place}): a number such as 1.5, -2e-3, inf or nan")]
    Value { text: String, place: String },
}

impl From<QuantizeError> for crate::error::Error {
    fn from(e: QuantizeError) -> Self {
        crate::error::Error::Quantize(e.to_string())
    }
}

impl QuantizeSpec {
    /// Validates the flags as typed on the command line.
    pub fn from_flags(
        format: &str,
        block: Option<usize>,
        scale: Option<&str>,
        saturate: bool,
        amax_floor: Option<f32>,
    ) -> Result<Self, QuantizeError> {
        let format =
            format.parse::<ElementFormat>().ok().filter(|f| is_cast_format(*f)).ok_or_else(|| QuantizeError::Format(format.to_string()))?;
        let scale = match scale {
            Some(text) => ScaleRule::parse(text).ok_or_else(|| QuantizeError::Scale(text.to_string()))?,
            None => ScaleRule::None,
        };
        match (block, scale) {
            (Some(0), _) => return Err(QuantizeError::Block(0)),
            (Some(_), ScaleRule::None) => return Err(QuantizeError::BlockWithoutScale),
            _ => {}
        }
        match amax_floor {
            Some(_) if scale == ScaleRule::None => return Err(QuantizeError::FloorWithoutScale),
            Some(f) if !(f.is_finite() && f >= 0.0) => return Err(QuantizeError::AmaxFloor(f)),
            _ => {}
        }
        Ok(QuantizeSpec { format, block, scale, saturate, amax_floor })
    }

    /// Dequantized value and code of every input. With a scale, each run of
    /// `block` consecutive inputs shares one scale (the last run may be
    /// shorter); values are clamped to ±max before the cast, as the
    /// reference does, so `saturate` changes nothing there.
    pub fn quantize(&self, inputs: &[f32]) -> Vec<(f32, u32)> {
        let q = self.quantize_blocks(inputs);
        q.values.into_iter().zip(q.codes).collect()
    }

    /// [`Self::quantize`] with the block scales kept: one per run of `block`
    /// inputs (none for a plain cast). The Python binding returns all three.
    pub fn quantize_blocks(&self, inputs: &[f32]) -> Quantized {
        let ScaleRule::Scaled(scale) = self.scale else {
            let overflow = if self.saturate { Overflow::Saturate } else { Overflow::Cast };
            let codes: Vec<u32> = inputs.iter().map(|&x| self.format.encode(x, overflow)).collect();
            let values = codes.iter().map(|&c| self.format.decode(c)).collect();
            return Quantized { values, codes, scales: Vec::new() };
        };
        let scaling = BlockScaling {
            shape: BlockShape::Row,
            scale,
            amax_floor: self.amax_floor.unwrap_or_else(|| default_amax_floor(self.format, scale)),
        };
        let group = self.block.unwrap_or(inputs.len()).max(1);
        let mut out = Quantized { values: Vec::with_capacity(inputs.len()), codes: Vec::with_capacity(inputs.len()), scales: Vec::new() };
        let mut blocks = QuantizedBlocks::default();
        for chunk in inputs.chunks(group) {
            let mut values = chunk.to_vec();
            // One row per group: cannot fail (positive length, valid floor).
            let len = values.len();
            if quantize_dequantize(&mut values, len, self.format, &scaling, Some(&mut blocks)).is_ok() {
                out.values.extend(values);
                out.codes.extend(blocks.codes.iter().copied());
                out.scales.extend(blocks.scales.iter().copied());
            }
        }
        out
    }

    /// Hex digits of a code of this format.
    pub fn code_digits(&self) -> usize {
        (self.format.bits() as usize).div_ceil(4)
    }
}

/// Parses one input number (trimmed; Rust's f32 syntax, which takes `inf`,
/// `-inf`, `nan` and exponents, rounded once to nearest f32).
pub fn parse_value(text: &str, place: impl FnOnce() -> String) -> Result<f32, QuantizeError> {
    let quoted = |t: &str| crate::error::shorten(&format!("{t:?}"), crate::error::VALUE_CHARS);
    text.trim().parse::<f32>().map_err(|_| QuantizeError::Value { text: quoted(text.trim()), place: place() })
}

/// Shortest text that parses back to exactly `x` (NaN: `NaN`).
pub fn format_value(x: f32) -> String {
    format!("{x}")
}

/// One output line: the value, and with `codes` the bit pattern in hex.
pub fn format_line(spec: &QuantizeSpec, value: f32, code: u32, codes: bool) -> String {
    if codes {
        format!("{} 0x{:0width$x}", format_value(value), code, width = spec.code_digits())
    } else {
        format_value(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_validated() {
        assert!(matches!(QuantizeSpec::from_flags("fp8", None, None, false, None), Err(QuantizeError::Format(_))));
        assert!(matches!(QuantizeSpec::from_flags("f32", None, None, false, None), Err(QuantizeError::Format(_))));
        assert_eq!(QuantizeSpec::from_flags("e2m1", Some(32), None, false, None), Err(QuantizeError::BlockWithoutScale));
        assert_eq!(QuantizeSpec::from_flags("e2m1", Some(0), Some("ue8m0"), false, None), Err(QuantizeError::Block(0)));
        assert_eq!(QuantizeSpec::from_flags("e2m1", None, None, false, Some(1.0)), Err(QuantizeError::FloorWithoutScale));
        assert!(matches!(QuantizeSpec::from_flags("e2m1", None, Some("ue8m0"), false, Some(-1.0)), Err(QuantizeError::AmaxFloor(_))));
        assert!(matches!(QuantizeSpec::from_flags("e2m1", None, Some("ue9"), false, None), Err(QuantizeError::Scale(_))));
    }

    #[test]
    fn plain_casts_follow_ml_dtypes() {
        let spec = QuantizeSpec::from_flags("e4m3fn", None, None, false, None).unwrap();
        let out = spec.quantize(&[1.0, 500.0, -0.0]);
        assert_eq!(out[0], (1.0, 0x38));
        assert!(out[1].0.is_nan());
        assert_eq!(format_line(&spec, out[2].0, out[2].1, true), "-0 0x80");
        let saturating = QuantizeSpec { saturate: true, ..spec };
        assert_eq!(saturating.quantize(&[500.0])[0].0, 448.0);
        let e2m1 = QuantizeSpec::from_flags("e2m1", None, None, false, None).unwrap();
        assert_eq!(format_line(&e2m1, 6.0, 0x7, true), "6 0x7");
    }

    #[test]
    fn blocks_share_a_scale() {
        // ue8m0 (DeepSeek): amax 12 → scale 2^ceil(log2(12/6)) = 2; 1 → 1/2 → 0.5·2 = 1.
        let spec = QuantizeSpec::from_flags("e2m1", Some(2), Some("ue8m0"), false, None).unwrap();
        let values: Vec<f32> = spec.quantize(&[12.0, 1.0, 0.2, 0.1, 5.0]).iter().map(|v| v.0).collect();
        assert_eq!(values[..2], [12.0, 1.0]);
        // Block 2: amax 0.2 → scale 2^ceil(log2(0.2/6)) = 2^-4; 0.2·16 = 3.2 → 3; 0.1·16 = 1.6 → 1.5.
        assert_eq!(values[2..4], [3.0 / 16.0, 1.5 / 16.0]);
        // The last, shorter block has its own scale: amax 5 → scale 1; 5 ties between 4 and 6 → even 4.
        assert_eq!(values[4], 4.0);
        // One scale per block, the shorter last one included (issue 19: the
        // binding returns them beside codes and values).
        let q = spec.quantize_blocks(&[12.0, 1.0, 0.2, 0.1, 5.0]);
        assert_eq!(q.scales, [2.0, 1.0 / 16.0, 1.0]);
        assert!(spec.quantize_blocks(&[]).scales.is_empty());
        let cast = QuantizeSpec::from_flags("bf16", None, None, false, None).unwrap();
        assert!(cast.quantize_blocks(&[1.0, 2.0]).scales.is_empty());
    }
}

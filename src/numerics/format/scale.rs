//! Block scaling: one scale per block of values, elements stored in a narrow
//! [`ElementFormat`].
//!
//! # How a block is quantized
//!
//! For each block (see [`BlockShape`]):
//!
//! 1. `amax = max(max |v| over the block, amax_floor)`. NaN values are
//!    ignored when taking the maximum.
//! 2. The scale `s = block_scale(amax, element, scale_format)` (see
//!    [`block_scale`]; the only rounding here is in the `Fp32` and `E4m3`
//!    rules).
//! 3. Each value: `q = v / s` (an f32 division: exact for power-of-two
//!    scales unless it underflows), clamped to `±element.max_finite()`
//!    (NaN stays NaN), then cast with [`Overflow::Cast`], rounding to
//!    nearest even. Clamping before the cast is what the DeepSeek reference
//!    does; it makes the cast's overflow rule irrelevant.
//! 4. The dequantized value is `decode(code) * s`, an f32 product (exact for
//!    power-of-two scales unless it leaves the f32 range).
//!
//! If `s` is zero (the `E4m3` rule when `amax / max` rounds to zero, or the
//! `Fp32` rule when it underflows), every value of the block becomes a zero
//! of its own sign: that is what storing a zero scale means.

use super::element::{ElementFormat, Overflow};
use super::FormatError;

/// DeepSeek's floor on a block's amax for its fp8 (e4m3fn) activation
/// quantization (`act_quant`).
pub const DEEPSEEK_FP8_AMAX_FLOOR: f32 = 1e-4;

/// DeepSeek V4's floor on a block's amax for its fp4 (e2m1) indexer
/// quantization: `6 · 2^-126`, so the scale never falls below 2^-126.
pub const DEEPSEEK_FP4_AMAX_FLOOR: f32 = 6.0 * f32::MIN_POSITIVE;

/// How the scale of a block is derived from its amax. `max` below is the
/// element format's largest finite value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleFormat {
    /// `s = amax / max` in f32 (one rounding).
    Fp32,
    /// DeepSeek's ue8m0 rule: `s = 2^ceil(log2(amax / max))`, the smallest
    /// power of two with `amax / s <= max`, so nothing is clipped.
    Ue8m0Ceil,
    /// OCP MX rule: `s = 2^(floor(log2 amax) - emax(element))`; values
    /// beyond `max` after dividing are clamped.
    Ue8m0Floor,
    /// NVFP4 rule: `s = amax / max` rounded (nearest even, saturating) to
    /// e4m3fn. NVFP4's second, per-tensor fp32 scale is not modelled.
    E4m3,
}

/// Which values share one scale, for row-major data with rows of length `d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockShape {
    /// Consecutive runs of this many values along a row (16, 32, 64, 128…);
    /// must divide `d`.
    Block(usize),
    /// One scale per row.
    Row,
    /// One scale for everything.
    Tensor,
}

/// A complete block-scaling scheme.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BlockScaling {
    pub shape: BlockShape,
    pub scale: ScaleFormat,
    /// Lower bound on a block's amax before the scale is computed; keeps
    /// all-zero or tiny blocks from producing zero or subnormal scales.
    pub amax_floor: f32,
}

impl BlockScaling {
    /// DeepSeek V3.2 indexer keys and queries (with e4m3fn elements): blocks
    /// of 128, ue8m0 scale rounded up, amax floor 1e-4.
    pub const DEEPSEEK_FP8: BlockScaling =
        BlockScaling { shape: BlockShape::Block(128), scale: ScaleFormat::Ue8m0Ceil, amax_floor: DEEPSEEK_FP8_AMAX_FLOOR };
    /// DeepSeek V4 reference indexer (with e2m1 elements): blocks of 32,
    /// ue8m0 scale rounded up, amax floor 6·2^-126.
    pub const DEEPSEEK_FP4: BlockScaling =
        BlockScaling { shape: BlockShape::Block(32), scale: ScaleFormat::Ue8m0Ceil, amax_floor: DEEPSEEK_FP4_AMAX_FLOOR };
    /// OCP MX (MXFP4 with e2m1, MXFP8 with e4m3fn): blocks of 32, ue8m0
    /// scale from `floor(log2 amax)`.
    pub const OCP_MX: BlockScaling = BlockScaling { shape: BlockShape::Block(32), scale: ScaleFormat::Ue8m0Floor, amax_floor: 0.0 };
    /// NVFP4 (with e2m1 elements): blocks of 16, e4m3fn scale.
    pub const NVFP4: BlockScaling = BlockScaling { shape: BlockShape::Block(16), scale: ScaleFormat::E4m3, amax_floor: 0.0 };
}

/// Codes and scales of a quantized tensor: value `i` is
/// `element.decode(codes[i]) * scales[i / block_len]`.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedBlocks {
    pub element: ElementFormat,
    /// Values per scale.
    pub block_len: usize,
    /// One code per value, in the low `element.bits()` bits.
    pub codes: Vec<u32>,
    /// One scale per block, as the f32 value it stands for.
    pub scales: Vec<f32>,
}

impl Default for QuantizedBlocks {
    fn default() -> Self {
        QuantizedBlocks { element: ElementFormat::F32, block_len: 0, codes: Vec::new(), scales: Vec::new() }
    }
}

impl QuantizedBlocks {
    /// The dequantized values, recomputed from codes and scales.
    pub fn dequantized(&self) -> Vec<f32> {
        if self.block_len == 0 {
            return Vec::new();
        }
        self.codes
            .chunks(self.block_len)
            .zip(&self.scales)
            .flat_map(|(codes, &s)| codes.iter().map(move |&c| dequantize_one(self.element, c, s)))
            .collect()
    }
}

/// `decode(code) * s`, where a zero scale yields a signed zero even for
/// infinite or NaN codes (the value was never stored).
#[inline]
fn dequantize_one(element: ElementFormat, code: u32, s: f32) -> f32 {
    scale_element_value(element.decode(code), s)
}

/// `2^n` as an f32 for `n` in the ue8m0 range `-127..=127` (2^-127 is an
/// f32 subnormal), built from its bits so it is exact.
fn exact_power_of_two(n: i32) -> f32 {
    let n = n.clamp(-127, 127);
    if n >= -126 {
        f32::from_bits(((n + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << 22)
    }
}

/// `(significand, exponent)` of a positive finite f32 with
/// `x = significand · 2^(exponent - 23)` and `significand` in `[2^23, 2^24)`
/// (subnormals normalised), so `exponent = floor(log2 x)` exactly.
fn normalised_parts(x: f32) -> (u32, i32) {
    let bits = x.to_bits() & 0x7fff_ffff;
    let biased = (bits >> 23) as i32;
    let fraction = bits & 0x007f_ffff;
    if biased == 0 {
        // Subnormal: shift the leading one up to bit 23.
        let shift = fraction.leading_zeros() - 8;
        (fraction << shift, -126 - shift as i32)
    } else {
        (fraction | 0x0080_0000, biased - 127)
    }
}

/// `ceil(log2(amax / max))` computed exactly for positive finite arguments:
/// with `amax = a·2^ea` and `max = m·2^em` (`a`, `m` significands of equal
/// width), the ratio lies in `(2^(ea-em-1), 2^(ea-em)]` when `a <= m` and in
/// `(2^(ea-em), 2^(ea-em+1))` otherwise. `f32::log2` could be off by one
/// when the ratio is (nearly) a power of two.
fn ceil_log2_ratio(amax: f32, max: f32) -> i32 {
    let (a, ea) = normalised_parts(amax);
    let (m, em) = normalised_parts(max);
    ea - em + i32::from(a > m)
}

/// The scale of a block whose (already floored) amax is `amax`.
///
/// - `Fp32`: `amax / max` (f32 division).
/// - `Ue8m0Ceil`: `2^ceil(log2(amax / max))`, computed exactly from the bit
///   patterns (by comparing significands, not with `f32::log2`); for
///   `amax = max·2^n` exactly this is `2^n`. DeepSeek's kernel instead takes
///   the exponent of the f32 product `amax · fl(1/max)`; for max 448 and 6
///   that product is exactly `2^n` at `amax = max·2^n`, and the two rules
///   agree there and on the neighbouring f32 values (checked with
///   `tools/golden_formats.py`'s exact rationals).
/// - `Ue8m0Floor`: `2^(floor(log2 amax) - emax)`, floor taken from the
///   exponent bits.
/// - `E4m3`: `amax / max` in f32, then rounded to e4m3fn (saturating at 448).
///
/// Both ue8m0 rules clamp the exponent to ue8m0's range `[-127, 127]`, so
/// `amax = inf` gives 2^127 (and 448 for `E4m3`, inf for `Fp32`).
/// `amax <= 0` gives scale 1 (the block is all zeros); NaN gives NaN
/// (callers taking amax with `f32::max` never pass NaN).
#[inline]
pub fn block_scale(amax: f32, element: ElementFormat, scale_format: ScaleFormat) -> f32 {
    if amax.is_nan() {
        return f32::NAN;
    }
    if amax <= 0.0 {
        return 1.0;
    }
    let max = element.max_finite();
    match scale_format {
        ScaleFormat::Fp32 => amax / max,
        // Saturating e4m3fn cast of a positive, non-NaN ratio: clamp, then
        // round (the same bits as the encoder's saturating cast; see
        // `fast_round_matches_encoder` and `e4m3_scale_matches_the_encoder`).
        ScaleFormat::E4m3 => ClampedRounding::of(ElementFormat::E4m3fn).round((amax / max).min(ElementFormat::E4m3fn.max_finite())),
        ScaleFormat::Ue8m0Ceil if amax.is_infinite() => exact_power_of_two(127),
        ScaleFormat::Ue8m0Floor if amax.is_infinite() => exact_power_of_two(127),
        ScaleFormat::Ue8m0Ceil => exact_power_of_two(ceil_log2_ratio(amax, max)),
        ScaleFormat::Ue8m0Floor => {
            let (_, floor_log2_amax) = normalised_parts(amax);
            exact_power_of_two(floor_log2_amax - element.emax())
        }
    }
}

/// Number of values sharing one scale, after checking the arguments.
fn block_len(len: usize, d: usize, scaling: &BlockScaling) -> Result<usize, FormatError> {
    if d == 0 {
        return Err(FormatError::ZeroRowLength);
    }
    if !len.is_multiple_of(d) {
        return Err(FormatError::LengthNotMultipleOfRow { len, d });
    }
    if !(scaling.amax_floor.is_finite() && scaling.amax_floor >= 0.0) {
        return Err(FormatError::InvalidAmaxFloor { floor: scaling.amax_floor });
    }
    match scaling.shape {
        BlockShape::Block(block) if block == 0 || !d.is_multiple_of(block) => Err(FormatError::InvalidBlockSize { block, d }),
        BlockShape::Block(block) => Ok(block),
        BlockShape::Row => Ok(d),
        BlockShape::Tensor => Ok(len.max(1)),
    }
}

/// The amax floor of the reference rule that matches an element format and
/// scale rule, used when a scheme does not give one:
///
/// - `Ue8m0Ceil` (DeepSeek's rule) with e2m1: the V4 indexer's `6·2^-126`;
///   with any other element: the V3.2 `act_quant` floor 1e-4.
/// - `Fp32`: 1e-4, the same per-128 activation rule (assumed for the
///   sglang/vLLM cache, which the reference notes do not pin down).
/// - `Ue8m0Floor` (OCP MX) and `E4m3` (NVFP4): none (0); an all-zero block
///   then gets scale 1 (see [`block_scale`]).
pub fn default_amax_floor(element: ElementFormat, scale: ScaleFormat) -> f32 {
    match (scale, element) {
        (ScaleFormat::Ue8m0Ceil, ElementFormat::E2m1) => DEEPSEEK_FP4_AMAX_FLOOR,
        (ScaleFormat::Ue8m0Ceil | ScaleFormat::Fp32, _) => DEEPSEEK_FP8_AMAX_FLOOR,
        (ScaleFormat::Ue8m0Floor | ScaleFormat::E4m3, _) => 0.0,
    }
}

/// Quantize one block: returns its scale `s` and replaces each value by its
/// *element value* `decode(code)` (the scale not multiplied back), pushing
/// the codes when asked. A zero scale stores signed zeros.
#[inline(always)]
fn quantize_block(block: &mut [f32], element: ElementFormat, scaling: &BlockScaling, mut codes: Option<&mut Vec<u32>>) -> f32 {
    let (amax, has_nan) = abs_max_and_nan(block);
    let amax = amax.max(scaling.amax_floor);
    let s = block_scale(amax, element, scaling.scale);
    let max = element.max_finite();
    // For a power-of-two scale whose reciprocal is an f32 (every ue8m0
    // scale), v·(1/s) and v/s are the same exactly scaled real rounded
    // once, so the cheaper multiply gives identical bits.
    let reciprocal = if is_power_of_two(s) { Some(1.0 / s) } else { None };
    match (reciprocal, element) {
        // The hot case of a trial: no codes wanted, a power-of-two scale,
        // no NaN. Rounding by float arithmetic vectorises; it is checked
        // bit for bit against the encoder (see `fast_round_matches_encoder`).
        (Some(r), _) if codes.is_none() && !has_nan && element != ElementFormat::F32 => {
            let rounding = ClampedRounding::of(element);
            for v in block.iter_mut() {
                *v = rounding.round((*v * r).clamp(-max, max));
            }
        }
        // Other scales (fp32, e4m3) need the division, but round the same way.
        (None, _) if codes.is_none() && !has_nan && element != ElementFormat::F32 && s.is_finite() && s > 0.0 => {
            let rounding = ClampedRounding::of(element);
            for v in block.iter_mut() {
                *v = rounding.round((*v / s).clamp(-max, max));
            }
        }
        (Some(r), _) => {
            for v in block.iter_mut() {
                let code = element.encode((*v * r).clamp(-max, max), Overflow::Cast);
                if let Some(c) = codes.as_deref_mut() {
                    c.push(code);
                }
                *v = element.decode(code);
            }
        }
        (None, _) => {
            for v in block.iter_mut() {
                let scaled = if s == 0.0 { 0f32.copysign(*v) } else { *v / s };
                let code = element.encode(scaled.clamp(-max, max), Overflow::Cast);
                if let Some(c) = codes.as_deref_mut() {
                    c.push(code);
                }
                *v = element.decode(code);
            }
        }
    }
    s
}

/// Quantizes every block of `values` (blocks of `block_len`, a multiple of
/// 8) without codes, with AVX2, pushing each scale to `scales`: amax by
/// vector max (exact and order-free), the scale by [`block_scale`], then per
/// value the same `v·(1/s)` (power-of-two `s`) or `v/s`, clamp and
/// [`ClampedRounding`] as the scalar fast paths of [`quantize_block`], and,
/// when `dequantize`, the product by `s`. A block the vector path does not
/// cover (a NaN value, a scale that is zero, negative or not finite) goes
/// through the scalar [`quantize_block`].
///
/// # Safety
/// The CPU must support AVX2 and `block_len` must be a multiple of 8 (each
/// block is read and written 8 values at a time through a raw pointer).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_blocks_avx2(
    values: &mut [f32],
    block_len: usize,
    element: ElementFormat,
    scaling: &BlockScaling,
    dequantize: bool,
    scales: &mut Vec<f32>,
) {
    use std::arch::x86_64::*;
    let max = element.max_finite();
    let rounding = ClampedRounding::of(element);
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let (hi, lo) = (_mm256_set1_ps(max), _mm256_set1_ps(-max));
    let sign_mask = _mm256_set1_epi32(0x8000_0000u32 as i32);
    let abs_bits = _mm256_set1_epi32(0x7fff_ffff);
    let one = _mm256_set1_epi32(1);
    let drop = _mm_cvtsi32_si128(rounding.drop_bits as i32);
    let half = _mm256_set1_epi32(((1u32 << (rounding.drop_bits - 1)) - 1) as i32);
    let keep = _mm256_set1_epi32(!((1u32 << rounding.drop_bits) - 1) as i32);
    let magic = _mm256_set1_ps(rounding.magic);
    let min_normal = _mm256_set1_ps(rounding.min_normal);
    for block in values.chunks_exact_mut(block_len) {
        let p = block.as_mut_ptr();
        let mut amax = _mm256_setzero_ps();
        let mut nan = _mm256_setzero_ps();
        for i in (0..block_len).step_by(8) {
            let v = _mm256_loadu_ps(p.add(i));
            amax = _mm256_max_ps(amax, _mm256_and_ps(v, abs_mask));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
        }
        // Horizontal max: exact whatever the order.
        let m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps::<1>(amax));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
        let amax = _mm_cvtss_f32(m).max(scaling.amax_floor);
        let s = block_scale(amax, element, scaling.scale);
        if _mm256_movemask_ps(nan) != 0 || !(s.is_finite() && s > 0.0) {
            let s = quantize_block(block, element, scaling, None);
            if dequantize {
                for v in block.iter_mut() {
                    *v = scale_element_value(*v, s);
                }
            }
            scales.push(s);
            continue;
        }
        let power_of_two = is_power_of_two(s);
        let divisor = _mm256_set1_ps(s);
        let reciprocal = _mm256_set1_ps(1.0 / s);
        for i in (0..block_len).step_by(8) {
            let v = _mm256_loadu_ps(p.add(i));
            let scaled = if power_of_two { _mm256_mul_ps(v, reciprocal) } else { _mm256_div_ps(v, divisor) };
            // f32::clamp(-max, max) of a non-NaN value.
            let x = _mm256_min_ps(_mm256_max_ps(scaled, lo), hi);
            let bits = _mm256_castps_si256(x);
            let sign = _mm256_and_si256(bits, sign_mask);
            let abs = _mm256_and_si256(bits, abs_bits);
            let odd = _mm256_and_si256(_mm256_srl_epi32(abs, drop), one);
            let normal = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(abs, half), odd), keep);
            let a = _mm256_castsi256_ps(abs);
            let subnormal = _mm256_sub_ps(_mm256_add_ps(a, magic), magic);
            let is_sub = _mm256_cmp_ps::<_CMP_LT_OQ>(a, min_normal);
            let magnitude = _mm256_blendv_ps(_mm256_castsi256_ps(normal), subnormal, is_sub);
            let mut r = _mm256_or_ps(magnitude, _mm256_castsi256_ps(sign));
            if dequantize {
                r = _mm256_mul_ps(r, divisor);
            }
            _mm256_storeu_ps(p.add(i), r);
        }
        scales.push(s);
    }
}

/// Quantizes every block without codes (through [`quantize_blocks_avx2`]
/// when the CPU and the block length allow), leaving element values
/// (`dequantize` false) or dequantized values, pushing the scales.
fn quantize_blocks_fast(
    values: &mut [f32],
    block_len: usize,
    element: ElementFormat,
    scaling: &BlockScaling,
    dequantize: bool,
    scales: &mut Vec<f32>,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::base::simd::level().avx2() && element != ElementFormat::F32 && block_len.is_multiple_of(8) {
        // SAFETY: the level is at least AVX2 and block_len a multiple of 8,
        // both checked just above; blocks are exact chunks of block_len.
        unsafe { quantize_blocks_avx2(values, block_len, element, scaling, dequantize, scales) };
        return;
    }
    for block in values.chunks_exact_mut(block_len) {
        let s = quantize_block(block, element, scaling, None);
        if dequantize {
            for v in block.iter_mut() {
                *v = scale_element_value(*v, s);
            }
        }
        scales.push(s);
    }
}

thread_local! {
    /// Scales of [`quantize_dequantize`] when nobody asked for them.
    static SCRATCH_SCALES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Round-to-nearest-even into a binary format with `mantissa_bits` and
/// smallest normal exponent, for finite inputs already within ±max (so
/// nothing overflows), returning the rounded value as an f32. Normal range:
/// the integer round-half-even on the f32 bits (a carry bumps the exponent,
/// which is right). Subnormal range: adding `magic`, whose f32 ulp is the
/// format's subnormal step, makes the f32 adder round half-even; subtracting
/// it again is exact.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClampedRounding {
    drop_bits: u32,
    min_normal: f32,
    magic: f32,
}

impl ClampedRounding {
    pub(crate) fn of(element: ElementFormat) -> Self {
        let mantissa_bits = element.mantissa_bits();
        let min_normal = element.min_normal();
        let min_exponent = min_normal.to_bits() as i32 >> 23; // biased
        let magic_biased = min_exponent - mantissa_bits as i32 + 23;
        ClampedRounding { drop_bits: 23 - mantissa_bits, min_normal, magic: f32::from_bits((magic_biased.clamp(1, 254) as u32) << 23) }
    }

    #[inline(always)]
    pub(crate) fn round(self, x: f32) -> f32 {
        if self.drop_bits == 0 {
            return x;
        }
        let bits = x.to_bits();
        let sign = bits & 0x8000_0000;
        let abs = bits & 0x7fff_ffff;
        let odd = (abs >> self.drop_bits) & 1;
        let half = (1u32 << (self.drop_bits - 1)) - 1;
        let normal = (abs + half + odd) & !((1u32 << self.drop_bits) - 1);
        let a = f32::from_bits(abs);
        let subnormal = ((a + self.magic) - self.magic).to_bits();
        let magnitude = if a < self.min_normal { subnormal } else { normal };
        f32::from_bits(sign | magnitude)
    }
}

/// The largest |v| ignoring NaN (0 for an empty block), and whether any
/// value is NaN. Eight independent lanes instead of one serial chain: max
/// is exact and order-free, so the result is the same.
#[inline(always)]
fn abs_max_and_nan(block: &[f32]) -> (f32, bool) {
    let mut lanes = [0f32; 8];
    let mut nan = [false; 8];
    let mut chunks = block.chunks_exact(8);
    for chunk in &mut chunks {
        for l in 0..8 {
            // f32::max ignores NaN, so a NaN value cannot poison the scale.
            lanes[l] = lanes[l].max(chunk[l].abs());
            nan[l] |= chunk[l].is_nan();
        }
    }
    for &v in chunks.remainder() {
        lanes[0] = lanes[0].max(v.abs());
        nan[0] |= v.is_nan();
    }
    (lanes.iter().fold(0f32, |a, &b| a.max(b)), nan.iter().any(|&n| n))
}

/// True for positive normal powers of two and for the ue8m0 scale 2^-127
/// (subnormal), whose reciprocals 2^127 are exact.
#[inline]
fn is_power_of_two(s: f32) -> bool {
    let bits = s.to_bits();
    (s.is_normal() && s > 0.0 && bits & 0x007f_ffff == 0) || bits == 1 << 22
}

/// Quantize row-major `values` (rows of length `d`) block by block and
/// replace each value by its dequantized value `decode(code) * s`. When `out`
/// is given, its codes and scales are replaced by this tensor's. The steps
/// and where they round are in the module documentation.
///
/// Errors (leaving `values` and `out` untouched) if `d` is zero, does not
/// divide `values.len()`, the block size is zero or does not divide `d`, or
/// the amax floor is negative or not finite.
pub fn quantize_dequantize(
    values: &mut [f32],
    d: usize,
    element: ElementFormat,
    scaling: &BlockScaling,
    mut out: Option<&mut QuantizedBlocks>,
) -> Result<(), FormatError> {
    let block_len = block_len(values.len(), d, scaling)?;
    if let Some(out) = out.as_deref_mut() {
        out.element = element;
        out.block_len = block_len;
        out.codes.clear();
        out.codes.reserve(values.len());
        out.scales.clear();
        out.scales.reserve(values.len() / block_len);
    }
    if out.is_none() {
        SCRATCH_SCALES.with_borrow_mut(|scales| {
            scales.clear();
            quantize_blocks_fast(values, block_len, element, scaling, true, scales);
        });
        return Ok(());
    }
    super::with_widest_simd(
        #[inline(always)]
        || {
            for block in values.chunks_exact_mut(block_len) {
                let codes = out.as_deref_mut().map(|o| &mut o.codes);
                let s = quantize_block(block, element, scaling, codes);
                for v in block.iter_mut() {
                    *v = scale_element_value(*v, s);
                }
                if let Some(out) = out.as_deref_mut() {
                    out.scales.push(s);
                }
            }
        },
    );
    Ok(())
}

/// `value * s`, a signed zero when `s` is zero (the value was never stored).
#[inline(always)]
fn scale_element_value(value: f32, s: f32) -> f32 {
    if s == 0.0 {
        0f32.copysign(value)
    } else {
        value * s
    }
}

/// Like [`quantize_dequantize`], but leaves each value as its element value
/// `decode(code)` (no scale) and writes one scale per block to `scales`
/// (cleared first), so a caller can apply the scale later, as the indexer
/// kernels do. Returns the block length. `decode(code) * s` (signed zero for
/// `s = 0`) is exactly what [`quantize_dequantize`] gives.
pub fn quantize_to_elements(
    values: &mut [f32],
    d: usize,
    element: ElementFormat,
    scaling: &BlockScaling,
    scales: &mut Vec<f32>,
) -> Result<usize, FormatError> {
    let block_len = block_len(values.len(), d, scaling)?;
    scales.clear();
    quantize_blocks_fast(values, block_len, element, scaling, false, scales);
    Ok(block_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_round_matches_encoder() {
        // Every f32 bit pattern on a stride, clamped like a block's values.
        for element in ElementFormat::ALL {
            let rounding = ClampedRounding::of(element);
            let max = element.max_finite();
            for bits in (0..=u32::MAX).step_by(997).chain([0, 0x8000_0000, 1, 0x8000_0001]) {
                let x = f32::from_bits(bits);
                if x.is_nan() {
                    continue;
                }
                let x = x.clamp(-max, max);
                let want = element.round_trip(x, Overflow::Cast);
                assert_eq!(rounding.round(x).to_bits(), want.to_bits(), "{element} {x:e}");
            }
        }
    }

    /// The vectorised block path (no codes) gives the bits of the scalar
    /// path with codes, on values spanning subnormals to overflow.
    #[test]
    fn simd_blocks_match_the_scalar_path() -> Result<(), FormatError> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for element in ElementFormat::ALL {
            for scale in [ScaleFormat::Fp32, ScaleFormat::Ue8m0Ceil, ScaleFormat::Ue8m0Floor, ScaleFormat::E4m3] {
                for block in [8, 16, 32, 128] {
                    for floor in [0.0, default_amax_floor(element, scale)] {
                        let scaling = BlockScaling { shape: BlockShape::Block(block), scale, amax_floor: floor };
                        let values: Vec<f32> = (0..1024)
                            .map(|i| {
                                let r = next();
                                let mantissa = (r >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                                // Blocks of very different magnitudes, some tiny.
                                let exponent = ((r >> 8) % 5) as i32 * 8 - 20 - ((i / block) % 4) as i32 * 30;
                                mantissa * 2f32.powi(exponent)
                            })
                            .collect();
                        let mut fast = values.clone();
                        quantize_dequantize(&mut fast, 128, element, &scaling, None)?;
                        let mut slow = values.clone();
                        let mut q = QuantizedBlocks::default();
                        quantize_dequantize(&mut slow, 128, element, &scaling, Some(&mut q))?;
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&fast), bits(&slow), "{element} {scale:?} {block}");
                        let mut elements = values.clone();
                        let mut scales = Vec::new();
                        quantize_to_elements(&mut elements, 128, element, &scaling, &mut scales)?;
                        assert_eq!(bits(&scales), bits(&q.scales), "{element} {scale:?} {block}");
                        let codes: Vec<f32> = q.codes.iter().map(|&c| element.decode(c)).collect();
                        let zero_scale: Vec<bool> = q.scales.iter().flat_map(|&s| std::iter::repeat_n(s == 0.0, block)).collect();
                        for ((e, c), z) in elements.iter().zip(&codes).zip(&zero_scale) {
                            if !z {
                                assert_eq!(e.to_bits(), c.to_bits(), "{element} {scale:?} {block}");
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn e4m3_scale_matches_the_encoder() {
        // Every positive f32 on a stride, plus the saturation boundary.
        for bits in (1..0x7f80_0000u32).step_by(101).chain([
            0x7f80_0000,
            448f32.to_bits(),
            464f32.to_bits(),
            (6.0f32 * 448.0).to_bits(),
            (6.0f32 * 464.0).to_bits(),
            (6.0f32 * 464.0).to_bits() - 1,
        ]) {
            let amax = f32::from_bits(bits);
            for element in [ElementFormat::E2m1, ElementFormat::E4m3fn] {
                let want = ElementFormat::E4m3fn.round_trip(amax / element.max_finite(), Overflow::Saturate);
                assert_eq!(block_scale(amax, element, ScaleFormat::E4m3).to_bits(), want.to_bits(), "{amax:e}");
            }
        }
    }

    #[test]
    fn ue8m0_ceil_is_exact_at_powers_of_two() {
        for element in [ElementFormat::E4m3fn, ElementFormat::E2m1, ElementFormat::E5m2] {
            let max = element.max_finite();
            for n in -100..=100 {
                let at = max * 2f32.powi(n);
                let s = block_scale(at, element, ScaleFormat::Ue8m0Ceil);
                assert_eq!(s, 2f32.powi(n), "{element} amax = max·2^{n}");
                let above = f32::from_bits(at.to_bits() + 1);
                assert_eq!(block_scale(above, element, ScaleFormat::Ue8m0Ceil), 2f32.powi(n + 1));
                let below = f32::from_bits(at.to_bits() - 1);
                assert_eq!(block_scale(below, element, ScaleFormat::Ue8m0Ceil), 2f32.powi(n));
            }
        }
    }

    #[test]
    fn ue8m0_floor_follows_the_mx_rule() {
        let e2m1 = ElementFormat::E2m1;
        // amax 6 → floor(log2 6) = 2, emax 2 → scale 1.
        assert_eq!(block_scale(6.0, e2m1, ScaleFormat::Ue8m0Floor), 1.0);
        assert_eq!(block_scale(7.99, e2m1, ScaleFormat::Ue8m0Floor), 1.0);
        assert_eq!(block_scale(8.0, e2m1, ScaleFormat::Ue8m0Floor), 2.0);
        assert_eq!(block_scale(448.0, ElementFormat::E4m3fn, ScaleFormat::Ue8m0Floor), 1.0);
        // Subnormal amax: floor(log2 2^-140) = -140, clamped to the ue8m0 range.
        assert_eq!(block_scale(2f32.powi(-140), e2m1, ScaleFormat::Ue8m0Floor), 2f32.powi(-127));
    }

    #[test]
    fn scales_of_degenerate_amax_do_not_panic() {
        for scale in [ScaleFormat::Fp32, ScaleFormat::Ue8m0Ceil, ScaleFormat::Ue8m0Floor, ScaleFormat::E4m3] {
            for element in ElementFormat::ALL {
                for amax in [0.0, f32::from_bits(1), f32::MIN_POSITIVE, f32::MAX, f32::INFINITY, f32::NAN] {
                    let _ = block_scale(amax, element, scale);
                }
            }
        }
        assert_eq!(block_scale(f32::INFINITY, ElementFormat::E4m3fn, ScaleFormat::E4m3), 448.0);
    }

    #[test]
    fn deepseek_fp8_block_round_trip() -> Result<(), FormatError> {
        // amax 104 → s = 2^ceil(log2(104/448)) = 2^-2; 104/0.25 = 416 is representable.
        let mut values: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) * 0.5).collect();
        values[3] = 104.0;
        let mut q = QuantizedBlocks::default();
        let original = values.clone();
        quantize_dequantize(&mut values, 256, ElementFormat::E4m3fn, &BlockScaling::DEEPSEEK_FP8, Some(&mut q))?;
        assert_eq!(q.scales, vec![0.25, 0.25]);
        assert_eq!(q.codes.len(), 256);
        assert_eq!(q.dequantized(), values);
        assert_eq!(values[3], 104.0);
        for (a, b) in original.iter().zip(&values) {
            assert!((a - b).abs() <= a.abs() / 16.0 + 2f32.powi(-9) * 0.25, "{a} → {b}");
        }
        Ok(())
    }

    #[test]
    fn shapes_pick_the_block_length() -> Result<(), FormatError> {
        let base: Vec<f32> = (0..64).map(|i| i as f32).collect();
        for (shape, blocks) in [(BlockShape::Block(16), 4), (BlockShape::Row, 2), (BlockShape::Tensor, 1)] {
            let scaling = BlockScaling { shape, scale: ScaleFormat::Fp32, amax_floor: 0.0 };
            let mut q = QuantizedBlocks::default();
            quantize_dequantize(&mut base.clone(), 32, ElementFormat::E4m3fn, &scaling, Some(&mut q))?;
            assert_eq!(q.scales.len(), blocks, "{shape:?}");
        }
        Ok(())
    }

    #[test]
    fn bad_arguments_are_errors() {
        let mut v = vec![1.0; 64];
        let fp8 = BlockScaling::DEEPSEEK_FP8;
        let e = ElementFormat::E4m3fn;
        assert_eq!(quantize_dequantize(&mut v, 0, e, &fp8, None), Err(FormatError::ZeroRowLength));
        assert!(matches!(quantize_dequantize(&mut v, 48, e, &fp8, None), Err(FormatError::LengthNotMultipleOfRow { .. })));
        assert!(matches!(quantize_dequantize(&mut v, 64, e, &fp8, None), Err(FormatError::InvalidBlockSize { .. })));
        let zero_block = BlockScaling { shape: BlockShape::Block(0), ..fp8 };
        assert!(matches!(quantize_dequantize(&mut v, 64, e, &zero_block, None), Err(FormatError::InvalidBlockSize { .. })));
        let nan_floor = BlockScaling { amax_floor: f32::NAN, ..fp8 };
        assert!(matches!(quantize_dequantize(&mut v, 64, e, &nan_floor, None), Err(FormatError::InvalidAmaxFloor { .. })));
        assert_eq!(v, vec![1.0; 64]);
        assert_eq!(quantize_dequantize(&mut [], 4, e, &BlockScaling { shape: BlockShape::Tensor, ..fp8 }, None), Ok(()));
    }

    #[test]
    fn special_values_do_not_panic() -> Result<(), FormatError> {
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, f32::from_bits(1), f32::MAX, 1.0];
        for element in ElementFormat::ALL {
            for scale in [ScaleFormat::Fp32, ScaleFormat::Ue8m0Ceil, ScaleFormat::Ue8m0Floor, ScaleFormat::E4m3] {
                let scaling = BlockScaling { shape: BlockShape::Block(8), scale, amax_floor: 0.0 };
                let mut v = specials.to_vec();
                quantize_dequantize(&mut v, 8, element, &scaling, None)?;
            }
        }
        Ok(())
    }

    #[test]
    fn zero_e4m3_scale_zeroes_the_block() -> Result<(), FormatError> {
        // amax/6 = 1e-5 rounds to zero in e4m3fn (smallest subnormal 2^-9).
        let mut v = vec![6e-5, -3e-5, 0.0, 1e-5];
        let mut q = QuantizedBlocks::default();
        quantize_dequantize(&mut v, 4, ElementFormat::E2m1, &BlockScaling { shape: BlockShape::Row, ..BlockScaling::NVFP4 }, Some(&mut q))?;
        assert_eq!(q.scales, vec![0.0]);
        assert_eq!(v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), [0, 0x8000_0000, 0, 0]);
        Ok(())
    }
}

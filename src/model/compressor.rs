//! How DeepSeek-V4 builds one compressed row from its tokens: a per-channel
//! softmax over the tokens' gate logits weights their value vectors, then
//! RMSNorm. RoPE (at the row's first position) is the caller's next step.
//! Sources and assumptions: docs/MODEL.md, "Compression (pooling)".
//!
//! * HCA (ratio c = 128, no overlap): row i pools tokens c·i … c·i+c−1.
//! * CSA (c = 4, overlap): row i pools its own c tokens, projected by the
//!   "current" half, and the c tokens before them, projected by the
//!   "previous" half; one softmax over all 2c gates per channel. Row 0 has no
//!   previous tokens.
//!
//! **Reproducibility.** Everything is f32 with a fixed order: per channel,
//! the max over the gates, e_j = exp(g_j − max) (our own exp, computed in f64
//! and rounded once, so no libm and no CPU-dependent paths), S = Σ e_j in
//! token order (previous half first, then current), a_j = e_j / S, and the
//! row value Σ a_j·x_j in token order. Channels are independent, so loops
//! over channels may be vectorized without changing any bit.
//!
//! **Shortcut for haystack rows.** With gate logits that are the same for
//! every window (a per-(slot, channel) bias, no token-dependent part) and
//! token values drawn iid N(m, diag σ²) independently across tokens and
//! halves, the pooled row (before RMSNorm) is exactly N(m·Σa, diag σ²·Σa²)
//! per channel, Σa = 1 up to f32 rounding: [`pooled_std_factors`] gives
//! √(Σ_j a_j²). It is not exact when gates depend on the tokens (the row is
//! then a Gaussian scale mixture), when tokens are correlated, when the two
//! halves have different (m, σ), or for windows holding needle tokens.
//! RMSNorm is applied to both paths in the same way, so it does not change
//! the exactness.

use thiserror::Error;

/// RMSNorm epsilon of the V4 compressor.
pub const RMS_NORM_EPS: f32 = 1e-6;

/// LayerNorm epsilon of the V3.2 indexer's key norm (`LayerNorm(128)`,
/// default eps, DeepSeek-V3.2-Exp `inference/model.py`).
pub const LAYER_NORM_EPS: f32 = 1e-6;

/// The tokens one half of the projection pools: `tokens × dim` values and
/// `tokens × dim` gate logits (projection plus the slot's bias), token-major.
#[derive(Clone, Copy, Debug)]
pub struct TokenHalf<'a> {
    pub values: &'a [f32],
    pub gate_logits: &'a [f32],
}

/// Inputs of the wrong shape or value. Nothing here panics on bad input.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum CompressorError {
    #[error("channel count (dim) must be positive")]
    ZeroDim,
    #[error("{what}: {len} values do not form one or more whole tokens of {dim} channels")]
    NotWholeTokens { what: &'static str, len: usize, dim: usize },
    #[error("{what}: {len} values, expected {expected}")]
    Length { what: &'static str, len: usize, expected: usize },
    #[error("the previous half has {previous} tokens, the current half {current}; both halves pool the same count")]
    HalvesDiffer { current: usize, previous: usize },
    #[error("gate logit {value} of token {token}, channel {channel} is not finite")]
    NonFiniteGate { token: usize, channel: usize, value: f32 },
    #[error("norm eps = {0} must be finite and > 0")]
    Eps(f32),
}

impl From<CompressorError> for crate::error::SimError {
    fn from(e: CompressorError) -> Self {
        crate::error::SimError::Compressor(e.to_string())
    }
}

/// Pools one compressed row into `out` (length `dim`), before RMSNorm.
/// `previous` is `None` for HCA and for CSA row 0.
pub fn pool_row(current: TokenHalf<'_>, previous: Option<TokenHalf<'_>>, dim: usize, out: &mut [f32]) -> Result<(), CompressorError> {
    let tokens = check_half(current, dim, "current")?;
    if let Some(prev) = previous {
        let previous_tokens = check_half(prev, dim, "previous")?;
        if previous_tokens != tokens {
            return Err(CompressorError::HalvesDiffer { current: tokens, previous: previous_tokens });
        }
    }
    if out.len() != dim {
        return Err(CompressorError::Length { what: "output row", len: out.len(), expected: dim });
    }
    let gates: Vec<&[f32]> = previous.iter().map(|h| h.gate_logits).chain([current.gate_logits]).collect();
    let values: Vec<&[f32]> = previous.iter().map(|h| h.values).chain([current.values]).collect();
    let mut weights = Vec::new();
    softmax_over_tokens_into(&gates, dim, &mut weights)?;
    weighted_sum(values.iter().flat_map(|v| v.chunks_exact(dim)), &weights, dim, out);
    Ok(())
}

/// The softmax weights [`pool_row`] gives every window whose gate logits
/// are these (`c × dim` per half, previous optional as in [`pool_row`]):
/// `tokens × dim`, token-major, previous half first. With them,
/// [`pool_with_weights`] pools bit for bit as [`pool_row`] does.
pub fn pool_weights(gates_current: &[f32], gates_previous: Option<&[f32]>, dim: usize) -> Result<Vec<f32>, CompressorError> {
    if dim == 0 {
        return Err(CompressorError::ZeroDim);
    }
    let tokens = whole_tokens(gates_current, dim, "current gate logits")?;
    if let Some(prev) = gates_previous {
        let previous_tokens = whole_tokens(prev, dim, "previous gate logits")?;
        if previous_tokens != tokens {
            return Err(CompressorError::HalvesDiffer { current: tokens, previous: previous_tokens });
        }
    }
    let gates: Vec<&[f32]> = gates_previous.into_iter().chain([gates_current]).collect();
    let mut weights = Vec::new();
    softmax_over_tokens_into(&gates, dim, &mut weights)?;
    Ok(weights)
}

/// Σ_j a_j·x_j per channel in token order, `out` zeroed first: the last step
/// of [`pool_row`]. `tokens` yields the window's value rows (previous half
/// first), `weights` is [`pool_weights`]'s output for the window's gates.
pub fn pool_with_weights<'a>(tokens: impl Iterator<Item = &'a [f32]>, weights: &[f32], dim: usize, out: &mut [f32]) {
    weighted_sum(tokens, weights, dim, out);
}

#[inline]
fn weighted_sum<'a>(tokens: impl Iterator<Item = &'a [f32]>, weights: &[f32], dim: usize, out: &mut [f32]) {
    out.fill(0.0);
    for (x, a) in tokens.zip(weights.chunks_exact(dim)) {
        for ((o, &x), &a) in out.iter_mut().zip(x).zip(a) {
            *o += a * x;
        }
    }
}

/// RMSNorm with unit weight: x / √(mean(x²) + eps), in f32 (sum of squares
/// in index order, then one reciprocal square root multiplied into every value).
pub fn rms_norm(row: &mut [f32], eps: f32) -> Result<(), CompressorError> {
    if !(eps.is_finite() && eps > 0.0) {
        return Err(CompressorError::Eps(eps));
    }
    if row.is_empty() {
        return Err(CompressorError::ZeroDim);
    }
    let sum_sq = row.iter().fold(0.0f32, |s, &x| s + x * x);
    let scale = 1.0 / (sum_sq / row.len() as f32 + eps).sqrt();
    row.iter_mut().for_each(|x| *x *= scale);
    Ok(())
}

/// [`rms_norm`] of every `dim`-value row of `rows`, the same bits: each
/// row's sum of squares is still taken in index order, but several rows'
/// sums run side by side (16 rows in the lanes of one AVX-512 register, the
/// rows transposed 16 × 16 at a time; otherwise 8 rows in scalar chains),
/// so the additions of one row no longer wait for each other.
pub fn rms_norm_rows(rows: &mut [f32], dim: usize, eps: f32) -> Result<(), CompressorError> {
    const ROWS: usize = 8;
    if !(eps.is_finite() && eps > 0.0) {
        return Err(CompressorError::Eps(eps));
    }
    if dim == 0 {
        return Err(CompressorError::ZeroDim);
    }
    #[cfg(target_arch = "x86_64")]
    let rows = in_blocks_of_16(rows, dim, eps, rms_norm_16_rows_avx512);
    let mut blocks = rows.chunks_exact_mut(ROWS * dim);
    for block in &mut blocks {
        let mut sum_sq = [0.0f32; ROWS];
        for j in 0..dim {
            for (r, s) in sum_sq.iter_mut().enumerate() {
                let x = block[r * dim + j];
                *s += x * x;
            }
        }
        for (row, &s) in block.chunks_exact_mut(dim).zip(&sum_sq) {
            let scale = 1.0 / (s / dim as f32 + eps).sqrt();
            row.iter_mut().for_each(|x| *x *= scale);
        }
    }
    for row in blocks.into_remainder().chunks_exact_mut(dim) {
        rms_norm(row, eps)?;
    }
    Ok(())
}

/// Normalises the whole blocks of 16 rows of `rows` (rows of `dim` > 0
/// values) with `kernel` when the level is AVX-512 and `dim` a multiple
/// of 16; returns the rows left for the portable code (all of them
/// otherwise).
#[cfg(target_arch = "x86_64")]
fn in_blocks_of_16(rows: &mut [f32], dim: usize, eps: f32, kernel: unsafe fn(&mut [f32], usize, f32)) -> &mut [f32] {
    if !(dim.is_multiple_of(16) && crate::base::simd::level().avx512()) {
        return rows;
    }
    let whole = rows.len() / (16 * dim) * (16 * dim);
    let (blocks, rest) = rows.split_at_mut(whole);
    for block in blocks.chunks_exact_mut(16 * dim) {
        // SAFETY: the level is AVX-512 (the CPU has AVX-512F), all the
        // kernels need; `block` is exactly 16 rows of `dim`, a positive
        // multiple of 16 (the callers refuse dim 0).
        unsafe { kernel(block, dim, eps) };
    }
    rest
}

/// LayerNorm without weight and bias: (x − μ)/√(v + eps), with μ the
/// row's mean and v its biased variance (mean of (x − μ)²), in f32: μ from
/// the sum in index order, v from the squared deviations summed in index
/// order, then one reciprocal square root multiplied into every centred
/// value. The weight and bias are the caller's next step.
pub fn layer_norm(row: &mut [f32], eps: f32) -> Result<(), CompressorError> {
    if !(eps.is_finite() && eps > 0.0) {
        return Err(CompressorError::Eps(eps));
    }
    if row.is_empty() {
        return Err(CompressorError::ZeroDim);
    }
    let n = row.len() as f32;
    let mean = row.iter().fold(0.0f32, |s, &x| s + x) / n;
    row.iter_mut().for_each(|x| *x -= mean);
    let var = row.iter().fold(0.0f32, |s, &x| s + x * x) / n;
    let scale = 1.0 / (var + eps).sqrt();
    row.iter_mut().for_each(|x| *x *= scale);
    Ok(())
}

/// [`layer_norm`] of every `dim`-value row of `rows`, the same bits: 16
/// rows at a time under AVX-512, each lane summing its row in index order
/// (the scalar folds are one long chain of dependent adds per row).
pub fn layer_norm_rows(rows: &mut [f32], dim: usize, eps: f32) -> Result<(), CompressorError> {
    if !(eps.is_finite() && eps > 0.0) {
        return Err(CompressorError::Eps(eps));
    }
    if dim == 0 {
        return Err(CompressorError::ZeroDim);
    }
    #[cfg(target_arch = "x86_64")]
    let rows = in_blocks_of_16(rows, dim, eps, layer_norm_16_rows_avx512);
    for row in rows.chunks_exact_mut(dim) {
        layer_norm(row, eps)?;
    }
    Ok(())
}

/// [`layer_norm`] of 16 rows of `dim` (a multiple of 16) values: lane r
/// folds row r in index order, as the scalar code does, for the mean and
/// then for the squared deviations; the centring and scaling are
/// element-wise, the same in any order.
///
/// # Safety
/// The CPU must support AVX-512F; `block.len()` must be `16 · dim` and `dim`
/// a multiple of 16 (the loads read 16 values at `r · dim + j`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn layer_norm_16_rows_avx512(block: &mut [f32], dim: usize, eps: f32) {
    use std::arch::x86_64::*;
    debug_assert_eq!(block.len(), 16 * dim);
    let n = _mm512_set1_ps(dim as f32);
    // SAFETY (both folds): rows r < 16 and columns j … j + 15 < dim lie in
    // the block (its length and dim's multiple of 16 are the caller's contract).
    let mut sum = _mm512_setzero_ps();
    for j in (0..dim).step_by(16) {
        for c in transpose_16x16(std::array::from_fn(|r| unsafe { _mm512_loadu_ps(block.as_ptr().add(r * dim + j)) })) {
            sum = _mm512_add_ps(sum, c);
        }
    }
    let mut means = [0.0f32; 16];
    // SAFETY: [f32; 16] is 64 bytes, the width of an unaligned store.
    unsafe { _mm512_storeu_ps(means.as_mut_ptr(), _mm512_div_ps(sum, n)) };
    for (row, &mean) in block.chunks_exact_mut(dim).zip(&means) {
        row.iter_mut().for_each(|x| *x -= mean);
    }
    let mut sum_sq = _mm512_setzero_ps();
    for j in (0..dim).step_by(16) {
        for c in transpose_16x16(std::array::from_fn(|r| unsafe { _mm512_loadu_ps(block.as_ptr().add(r * dim + j)) })) {
            sum_sq = _mm512_add_ps(sum_sq, _mm512_mul_ps(c, c));
        }
    }
    let var = _mm512_div_ps(sum_sq, n);
    let scale = _mm512_div_ps(_mm512_set1_ps(1.0), _mm512_sqrt_ps(_mm512_add_ps(var, _mm512_set1_ps(eps))));
    let mut scales = [0.0f32; 16];
    // SAFETY: as above.
    unsafe { _mm512_storeu_ps(scales.as_mut_ptr(), scale) };
    for (row, &scale) in block.chunks_exact_mut(dim).zip(&scales) {
        row.iter_mut().for_each(|x| *x *= scale);
    }
}

/// [`rms_norm`] of 16 rows of `dim` (a multiple of 16) values: lane r sums
/// row r's squares in index order (the same f32 operations as the scalar
/// fold), then the same scale, computed 16 lanes at a time.
///
/// # Safety
/// The CPU must support AVX-512F; `block.len()` must be `16 · dim` and `dim`
/// a multiple of 16 (the loads read 16 values at `r · dim + j`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rms_norm_16_rows_avx512(block: &mut [f32], dim: usize, eps: f32) {
    use std::arch::x86_64::*;
    debug_assert_eq!(block.len(), 16 * dim);
    let mut sum_sq = _mm512_setzero_ps();
    for j in (0..dim).step_by(16) {
        // SAFETY: rows r < 16 and columns j … j + 15 < dim lie in the block
        // (its length and dim's multiple of 16 are the caller's contract).
        let columns = transpose_16x16(std::array::from_fn(|r| unsafe { _mm512_loadu_ps(block.as_ptr().add(r * dim + j)) }));
        for c in columns {
            sum_sq = _mm512_add_ps(sum_sq, _mm512_mul_ps(c, c));
        }
    }
    let mean = _mm512_div_ps(sum_sq, _mm512_set1_ps(dim as f32));
    let scale = _mm512_div_ps(_mm512_set1_ps(1.0), _mm512_sqrt_ps(_mm512_add_ps(mean, _mm512_set1_ps(eps))));
    let mut scales = [0.0f32; 16];
    // SAFETY: [f32; 16] is 64 bytes, the width of an unaligned store.
    unsafe { _mm512_storeu_ps(scales.as_mut_ptr(), scale) };
    for (row, &scale) in block.chunks_exact_mut(dim).zip(&scales) {
        row.iter_mut().for_each(|x| *x *= scale);
    }
}

/// The 16 × 16 transpose: lane r of output k is lane k of input r.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose_16x16(r: [std::arch::x86_64::__m512; 16]) -> [std::arch::x86_64::__m512; 16] {
    use std::arch::x86_64::*;
    // Pairs of rows interleaved by element, then by element pair: each
    // 128-bit lane of u[4i + k] holds element 4l + k of rows 4i … 4i + 3.
    let t: [__m512; 16] =
        std::array::from_fn(|i| if i % 2 == 0 { _mm512_unpacklo_ps(r[i], r[i + 1]) } else { _mm512_unpackhi_ps(r[i - 1], r[i]) });
    let u: [__m512; 16] = std::array::from_fn(|i| {
        let (q, k) = (i / 4 * 4, i % 4);
        let (a, b) = (_mm512_castps_pd(t[q + k / 2]), _mm512_castps_pd(t[q + 2 + k / 2]));
        _mm512_castpd_ps(if k % 2 == 0 { _mm512_unpacklo_pd(a, b) } else { _mm512_unpackhi_pd(a, b) })
    });
    // Then the 128-bit lanes: v[k + 4h] (h = 0, 1) takes lanes h and h + 2
    // of row groups 0/1 and 2/3 …
    let v: [__m512; 16] = std::array::from_fn(|i| {
        let (h, k, g) = (i / 4 % 2, i % 4, i / 8);
        let (a, b) = (u[8 * g + k], u[8 * g + 4 + k]);
        if h == 0 {
            _mm512_shuffle_f32x4::<0x88>(a, b)
        } else {
            _mm512_shuffle_f32x4::<0xDD>(a, b)
        }
    });
    // … and output column 4l + k is lane l of each group's v, l = 2·h2 + h.
    std::array::from_fn(|i| {
        let (l, k) = (i / 4, i % 4);
        let (h, h2) = (l % 2, l / 2);
        let (a, b) = (v[4 * h + k], v[8 + 4 * h + k]);
        if h2 == 0 {
            _mm512_shuffle_f32x4::<0x88>(a, b)
        } else {
            _mm512_shuffle_f32x4::<0xDD>(a, b)
        }
    })
}

/// √(Σ_j a_j²) per channel for fixed gate logits (`c × dim` per half,
/// previous optional as in [`pool_row`]): the factor by which pooling shrinks
/// the standard deviation of iid token values (see the module note for when
/// this is exact). The weights a_j are the f32 weights [`pool_row`] uses; the
/// sum of squares is taken in f64.
pub fn pooled_std_factors(gate_bias_current: &[f32], gate_bias_previous: Option<&[f32]>, dim: usize) -> Result<Vec<f32>, CompressorError> {
    if dim == 0 {
        return Err(CompressorError::ZeroDim);
    }
    let tokens = whole_tokens(gate_bias_current, dim, "current gate bias")?;
    if let Some(prev) = gate_bias_previous {
        let previous_tokens = whole_tokens(prev, dim, "previous gate bias")?;
        if previous_tokens != tokens {
            return Err(CompressorError::HalvesDiffer { current: tokens, previous: previous_tokens });
        }
    }
    let gates: Vec<&[f32]> = gate_bias_previous.into_iter().chain([gate_bias_current]).collect();
    let weights = softmax_over_tokens(&gates, dim)?;
    let mut sum_sq = vec![0.0f64; dim];
    for a in weights.chunks_exact(dim) {
        for (s, &a) in sum_sq.iter_mut().zip(a) {
            *s += (a as f64) * (a as f64);
        }
    }
    Ok(sum_sq.into_iter().map(|s| s.sqrt() as f32).collect())
}

fn whole_tokens(values: &[f32], dim: usize, what: &'static str) -> Result<usize, CompressorError> {
    if values.is_empty() || !values.len().is_multiple_of(dim) {
        return Err(CompressorError::NotWholeTokens { what, len: values.len(), dim });
    }
    Ok(values.len() / dim)
}

fn check_half(half: TokenHalf<'_>, dim: usize, what: &'static str) -> Result<usize, CompressorError> {
    if dim == 0 {
        return Err(CompressorError::ZeroDim);
    }
    let tokens = whole_tokens(half.values, dim, what)?;
    if half.gate_logits.len() != half.values.len() {
        return Err(CompressorError::Length { what: "gate logits", len: half.gate_logits.len(), expected: half.values.len() });
    }
    Ok(tokens)
}

/// Softmax weights per channel over all tokens of the halves, in order;
/// returns `tokens × dim` weights, token-major.
fn softmax_over_tokens(halves: &[&[f32]], dim: usize) -> Result<Vec<f32>, CompressorError> {
    let mut weights = Vec::new();
    softmax_over_tokens_into(halves, dim, &mut weights)?;
    Ok(weights)
}

/// [`softmax_over_tokens`] into a reused buffer.
fn softmax_over_tokens_into(halves: &[&[f32]], dim: usize, weights: &mut Vec<f32>) -> Result<(), CompressorError> {
    let token_rows = || halves.iter().flat_map(|g| g.chunks_exact(dim));
    let mut max = vec![f32::NEG_INFINITY; dim];
    for (token, g) in token_rows().enumerate() {
        for (channel, (m, &g)) in max.iter_mut().zip(g).enumerate() {
            if !g.is_finite() {
                return Err(CompressorError::NonFiniteGate { token, channel, value: g });
            }
            *m = m.max(g);
        }
    }
    weights.clear();
    weights.resize(token_rows().count() * dim, 0.0);
    let mut sum = vec![0.0f32; dim];
    exponentials(halves, dim, &max, &mut sum, weights);
    // S ≥ 1 (the largest gate contributes exp(0) = 1), so the division is safe.
    for a in weights.chunks_exact_mut(dim) {
        a.iter_mut().zip(&sum).for_each(|(a, &s)| *a /= s);
    }
    Ok(())
}

/// e_j = exp(g_j − max) into `weights` and S = Σ e_j in token order, per
/// channel; channels run in SIMD lanes where the CPU has them (the same
/// IEEE operations per lane, so the same bits).
fn exponentials(halves: &[&[f32]], dim: usize, max: &[f32], sum: &mut [f32], weights: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        let level = crate::base::simd::level();
        if level.avx512() {
            // SAFETY: the level is AVX-512, so the CPU has AVX-512F; the
            // kernel accesses memory through slices only.
            unsafe { exponentials_avx512(halves, dim, max, sum, weights) };
            return;
        }
        if level.avx2() {
            // SAFETY: the level is at least AVX2; slices only, as above.
            unsafe { exponentials_avx2(halves, dim, max, sum, weights) };
            return;
        }
    }
    exponentials_lanes(halves, dim, max, sum, weights);
}

/// [`exponentials_lanes`] compiled for AVX-512.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exponentials_avx512(halves: &[&[f32]], dim: usize, max: &[f32], sum: &mut [f32], weights: &mut [f32]) {
    exponentials_lanes(halves, dim, max, sum, weights);
}

/// [`exponentials_lanes`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn exponentials_avx2(halves: &[&[f32]], dim: usize, max: &[f32], sum: &mut [f32], weights: &mut [f32]) {
    exponentials_lanes(halves, dim, max, sum, weights);
}

#[inline(always)]
fn exponentials_lanes(halves: &[&[f32]], dim: usize, max: &[f32], sum: &mut [f32], weights: &mut [f32]) {
    let token_rows = halves.iter().flat_map(|g| g.chunks_exact(dim));
    let (sum, max) = (&mut sum[..dim], &max[..dim]);
    for (g, w) in token_rows.zip(weights.chunks_exact_mut(dim)) {
        let (g, w) = (&g[..dim], &mut w[..dim]);
        for j in 0..dim {
            let e = exp_nonpositive_lanes(g[j] - max[j]);
            sum[j] += e;
            w[j] = e;
        }
    }
}

/// ln 2 split so that k·LN2_HI is exact for |k| < 2²⁰ (LN2_HI has 32
/// trailing zero bits); LN2_LO is the rest.
const LN2_HI: f64 = 6.931_471_803_691_238e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;

/// exp(x) for x ≤ 0 (NaN maps to NaN), computed in f64 and rounded to f32
/// once; only IEEE basic operations, so identical on every machine.
#[cfg_attr(not(test), allow(dead_code))]
fn exp_nonpositive(x: f32) -> f32 {
    // e^-104 is below half the smallest f32 subnormal: the result rounds to 0.
    if x < -104.0 {
        return 0.0;
    }
    let x = x as f64;
    let k = (x * std::f64::consts::LOG2_E).round();
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // Taylor series to r¹⁴/14! for |r| ≤ ½ ln 2: the omitted r¹⁵/15! < 10⁻¹⁸.
    let mut e = 1.0;
    for n in (1..=14u32).rev() {
        e = 1.0 + r / f64::from(n) * e;
    }
    let two_k = f64::from_bits(((k as i64 + 1023) as u64) << 52);
    (e * two_k) as f32
}

/// [`exp_nonpositive`] without branches or integer conversions, so that a
/// loop over channels vectorizes: the same value for every input. k is the
/// same integer (round half away from zero, done as trunc and a correction:
/// y − trunc(y) is exact), and 2^k is built from the bits of k + 1023 + 2⁵²
/// (exact for |k| < 2⁵¹) instead of an integer conversion; r, the series
/// and the final product are the same operations in the same order.
#[inline(always)]
fn exp_nonpositive_lanes(x: f32) -> f32 {
    let xd = x as f64;
    let y = xd * std::f64::consts::LOG2_E;
    let t = y.trunc();
    let k = if (y - t).abs() >= 0.5 { t + 1.0f64.copysign(y) } else { t };
    let r = (xd - k * LN2_HI) - k * LN2_LO;
    // The series of `exp_nonpositive`, n = 14 … 1, written out so that it
    // unrolls and the channel loop around it vectorizes.
    let mut e = 1.0;
    e = 1.0 + r / 14.0 * e;
    e = 1.0 + r / 13.0 * e;
    e = 1.0 + r / 12.0 * e;
    e = 1.0 + r / 11.0 * e;
    e = 1.0 + r / 10.0 * e;
    e = 1.0 + r / 9.0 * e;
    e = 1.0 + r / 8.0 * e;
    e = 1.0 + r / 7.0 * e;
    e = 1.0 + r / 6.0 * e;
    e = 1.0 + r / 5.0 * e;
    e = 1.0 + r / 4.0 * e;
    e = 1.0 + r / 3.0 * e;
    e = 1.0 + r / 2.0 * e;
    e = 1.0 + r / 1.0 * e;
    // 2⁵² + 1023: its low mantissa bits hold k + 1023 for the k that occur.
    let two_k = f64::from_bits((k + 4_503_599_627_371_519.0).to_bits() << 52);
    let v = (e * two_k) as f32;
    if x < -104.0 {
        0.0
    } else {
        v
    }
}

#[cfg(test)]
mod tests;

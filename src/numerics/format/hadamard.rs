//! The orthonormal Walsh–Hadamard transform DeepSeek applies to indexer
//! queries and keys before quantizing them (it spreads outliers over all
//! dimensions, so one block scale fits them better).

use super::FormatError;

/// Orthonormal Walsh–Hadamard transform of `x` in place: natural (Sylvester)
/// order, no random signs, scaled by `n^-1/2` so that applying it twice gives
/// back the input (up to f32 rounding).
///
/// Row `i` of the (unscaled) Sylvester matrix has entry `(-1)^popcount(i & j)`
/// in column `j`. Errors unless `x.len()` is a power of two (1 included);
/// `x` is left untouched on error.
pub fn hadamard_in_place(x: &mut [f32]) -> Result<(), FormatError> {
    let n = x.len();
    if !n.is_power_of_two() {
        return Err(FormatError::NotPowerOfTwo { len: n });
    }
    super::with_widest_simd(
        #[inline(always)]
        || hadamard_row(x),
    );
    Ok(())
}

/// The transform of one row whose length is a power of two (checked by the
/// callers), inlined into each SIMD-dispatched caller.
#[inline(always)]
fn hadamard_row(x: &mut [f32]) {
    let n = x.len();
    debug_assert!(n.is_power_of_two());
    #[cfg(target_arch = "x86_64")]
    if n >= 8 && n.is_power_of_two() && crate::base::simd::level().avx2() {
        // SAFETY: the level is at least AVX2; n is a power of two ≥ 8 (checked
        // here, once per row), the kernel's contract.
        unsafe { hadamard_row_avx2(x) };
        return;
    }
    // Butterflies of doubling span; each stage is one Kronecker factor [[1,1],[1,-1]].
    let mut span = 1;
    if n >= 8 {
        // Spans 1, 2 and 4 stay inside groups of 8: run them on a local
        // array the compiler unrolls, with the same operations in the same
        // order as the loop below (so the same bits), instead of slices of
        // one, two and four values.
        for group in x.chunks_exact_mut(8) {
            let mut v = [0f32; 8];
            v.copy_from_slice(group);
            for stage_span in [1, 2, 4] {
                for base in (0..8).step_by(2 * stage_span) {
                    for i in base..base + stage_span {
                        let (a, b) = (v[i], v[i + stage_span]);
                        v[i] = a + b;
                        v[i + stage_span] = a - b;
                    }
                }
            }
            group.copy_from_slice(&v);
        }
        span = 8;
    }
    while span < n {
        for pair_block in x.chunks_exact_mut(2 * span) {
            let (low, high) = pair_block.split_at_mut(span);
            for (a, b) in low.iter_mut().zip(high.iter_mut()) {
                let (sum, difference) = (*a + *b, *a - *b);
                *a = sum;
                *b = difference;
            }
        }
        span *= 2;
    }
    // Scale computed in f64 so that the only f32 rounding is the final one.
    let scale = (1.0 / (n as f64).sqrt()) as f32;
    x.iter_mut().for_each(|v| *v *= scale);
}

/// [`hadamard_row`] with AVX2, for a power-of-two length ≥ 8: the same
/// butterflies (`a + b` to the low index, `a - b` to the high one, spans 1,
/// 2, 4 by in-register permutes and a blend, then spans 8, 16, … between
/// registers) and the same final scaling, so the same bits (tested against
/// the portable loop).
///
/// # Safety
/// The CPU must support AVX2 and `x.len()` must be a power of two ≥ 8 (the
/// kernel reads and writes 8 values at a time through a raw pointer).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn hadamard_row_avx2(x: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = x.len();
    let p = x.as_mut_ptr();
    if n == 128 {
        hadamard_128_avx2(p, p);
        return;
    }
    for g in (0..n).step_by(8) {
        let mut v = _mm256_loadu_ps(p.add(g));
        // span 1: lanes (i, i+1) → (a_i + a_i+1, a_i − a_i+1)
        let t = _mm256_permute_ps::<0xB1>(v);
        v = _mm256_blend_ps::<0xAA>(_mm256_add_ps(v, t), _mm256_sub_ps(t, v));
        // span 2
        let t = _mm256_permute_ps::<0x4E>(v);
        v = _mm256_blend_ps::<0xCC>(_mm256_add_ps(v, t), _mm256_sub_ps(t, v));
        // span 4
        let t = _mm256_permute2f128_ps::<0x01>(v, v);
        v = _mm256_blend_ps::<0xF0>(_mm256_add_ps(v, t), _mm256_sub_ps(t, v));
        _mm256_storeu_ps(p.add(g), v);
    }
    let mut span = 8;
    while span < n {
        for base in (0..n).step_by(2 * span) {
            for i in (base..base + span).step_by(8) {
                let a = _mm256_loadu_ps(p.add(i));
                let b = _mm256_loadu_ps(p.add(i + span));
                _mm256_storeu_ps(p.add(i), _mm256_add_ps(a, b));
                _mm256_storeu_ps(p.add(i + span), _mm256_sub_ps(a, b));
            }
        }
        span *= 2;
    }
    let scale = _mm256_set1_ps((1.0 / (n as f64).sqrt()) as f32);
    for g in (0..n).step_by(8) {
        _mm256_storeu_ps(p.add(g), _mm256_mul_ps(_mm256_loadu_ps(p.add(g)), scale));
    }
}

/// The 128-point transform of `src` into `dst` (which may be `src`), all
/// 16 registers' worth in registers: the butterflies of [`hadamard_row_avx2`].
///
/// # Safety
/// The CPU must support AVX2; `src` must be valid for reading and `dst` for
/// writing 128 values (they may be equal, not otherwise overlap).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn hadamard_128_avx2(src: *const f32, dst: *mut f32) {
    use std::arch::x86_64::*;
    let mut v: [__m256; 16] = std::array::from_fn(|g| _mm256_loadu_ps(src.add(8 * g)));
    for r in v.iter_mut() {
        let t = _mm256_permute_ps::<0xB1>(*r);
        *r = _mm256_blend_ps::<0xAA>(_mm256_add_ps(*r, t), _mm256_sub_ps(t, *r));
        let t = _mm256_permute_ps::<0x4E>(*r);
        *r = _mm256_blend_ps::<0xCC>(_mm256_add_ps(*r, t), _mm256_sub_ps(t, *r));
        let t = _mm256_permute2f128_ps::<0x01>(*r, *r);
        *r = _mm256_blend_ps::<0xF0>(_mm256_add_ps(*r, t), _mm256_sub_ps(t, *r));
    }
    for stride in [1, 2, 4, 8] {
        // span 8·stride values = `stride` registers
        for base in (0..16).step_by(2 * stride) {
            for i in base..base + stride {
                let (a, b) = (v[i], v[i + stride]);
                v[i] = _mm256_add_ps(a, b);
                v[i + stride] = _mm256_sub_ps(a, b);
            }
        }
    }
    let scale = _mm256_set1_ps((1.0 / 128f64.sqrt()) as f32);
    for (g, r) in v.iter().enumerate() {
        _mm256_storeu_ps(dst.add(8 * g), _mm256_mul_ps(*r, scale));
    }
}

/// Writes the transform of every row of `input` (rows of `d`, a power of
/// two) to `out` (resized to `input.len()`): the same bits as copying and
/// [`hadamard_rows_in_place`], without the copy where the SIMD path applies.
pub(crate) fn hadamard_rows_into(input: &[f32], out: &mut Vec<f32>, d: usize) -> Result<(), FormatError> {
    if !d.is_power_of_two() {
        return Err(FormatError::NotPowerOfTwo { len: d });
    }
    if !input.len().is_multiple_of(d) {
        return Err(FormatError::LengthNotMultipleOfRow { len: input.len(), d });
    }
    #[cfg(target_arch = "x86_64")]
    if d == 128 && crate::base::simd::level().avx2() {
        if out.len() != input.len() {
            out.clear();
            out.resize(input.len(), 0.0);
        }
        for (src, dst) in input.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
            // SAFETY: the level is at least AVX2 (checked above); both rows
            // hold 128 values (exact chunks of d = 128, out resized to input).
            unsafe { hadamard_128_avx2(src.as_ptr(), dst.as_mut_ptr()) };
        }
        return Ok(());
    }
    out.clear();
    out.extend_from_slice(input);
    hadamard_rows_in_place(out, d)
}

/// [`hadamard_in_place`] on every row of a row-major matrix with rows of
/// length `d`. Errors if `d` is not a power of two or does not divide
/// `x.len()`.
pub fn hadamard_rows_in_place(x: &mut [f32], d: usize) -> Result<(), FormatError> {
    if !d.is_power_of_two() {
        return Err(FormatError::NotPowerOfTwo { len: d });
    }
    if !x.len().is_multiple_of(d) {
        return Err(FormatError::LengthNotMultipleOfRow { len: x.len(), d });
    }
    super::with_widest_simd(
        #[inline(always)]
        || x.chunks_exact_mut(d).for_each(hadamard_row),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_four_point_case() -> Result<(), FormatError> {
        let mut x = [1.0, 2.0, 3.0, 4.0];
        hadamard_in_place(&mut x)?;
        // H4 · [1,2,3,4] = [10, -2, -4, 0], scaled by 1/2.
        assert_eq!(x, [5.0, -1.0, -2.0, 0.0]);
        Ok(())
    }

    #[test]
    fn matches_the_sylvester_definition() -> Result<(), FormatError> {
        let n = 16;
        let input: Vec<f32> = (0..n).map(|i| ((i * 7 + 3) % 11) as f32 - 5.0).collect();
        let mut fast = input.clone();
        hadamard_in_place(&mut fast)?;
        for (row, &got) in fast.iter().enumerate() {
            let expected: f32 =
                input.iter().enumerate().map(|(col, &v)| if (row & col).count_ones() % 2 == 0 { v } else { -v }).sum::<f32>()
                    / (n as f32).sqrt();
            assert!((got - expected).abs() < 1e-5, "row {row}: {got} vs {expected}");
        }
        Ok(())
    }

    #[test]
    fn applying_twice_is_the_identity() -> Result<(), FormatError> {
        let input: Vec<f32> = (0..128).map(|i| ((i as f32) * 0.37).sin()).collect();
        let mut x = input.clone();
        hadamard_in_place(&mut x)?;
        let norm_in: f32 = input.iter().map(|v| v * v).sum();
        let norm_mid: f32 = x.iter().map(|v| v * v).sum();
        assert!((norm_in - norm_mid).abs() < 1e-4 * norm_in, "not norm preserving");
        hadamard_in_place(&mut x)?;
        for (a, b) in input.iter().zip(&x) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        Ok(())
    }

    /// The AVX2 butterflies give the bits of the portable loop.
    #[test]
    fn simd_path_matches_the_portable_loop() {
        for n in [8usize, 16, 64, 128, 256] {
            let input: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.731).sin() * (1.0 + (i % 5) as f32)).collect();
            let mut portable = input.clone();
            // The portable loop: the same code with the SIMD path skipped.
            let mut span = 1;
            while span < n {
                for pair_block in portable.chunks_exact_mut(2 * span) {
                    let (low, high) = pair_block.split_at_mut(span);
                    for (a, b) in low.iter_mut().zip(high.iter_mut()) {
                        let (s, d) = (*a + *b, *a - *b);
                        *a = s;
                        *b = d;
                    }
                }
                span *= 2;
            }
            let scale = (1.0 / (n as f64).sqrt()) as f32;
            portable.iter_mut().for_each(|v| *v *= scale);
            let mut fast = input.clone();
            hadamard_in_place(&mut fast).unwrap();
            let mut into = vec![1.0; 3];
            hadamard_rows_into(&input, &mut into, n).unwrap();
            assert_eq!(
                into.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "n = {n}"
            );
            assert_eq!(
                fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "n = {n}"
            );
        }
    }

    #[test]
    fn rejects_non_powers_of_two() {
        let mut x = [1.0; 6];
        assert!(matches!(hadamard_in_place(&mut x), Err(FormatError::NotPowerOfTwo { len: 6 })));
        assert_eq!(x, [1.0; 6]);
        assert!(hadamard_in_place(&mut []).is_err());
        let mut one = [3.0];
        assert!(hadamard_in_place(&mut one).is_ok());
        assert_eq!(one, [3.0]);
        assert!(hadamard_rows_in_place(&mut [0.0; 12], 4).is_ok());
        assert!(hadamard_rows_in_place(&mut [0.0; 10], 4).is_err());
    }
}

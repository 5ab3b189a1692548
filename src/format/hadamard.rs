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
    Ok(())
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
    x.chunks_exact_mut(d).try_for_each(hadamard_in_place)
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
            let expected: f32 = input
                .iter()
                .enumerate()
                .map(|(col, &v)| {
                    if (row & col).count_ones() % 2 == 0 {
                        v
                    } else {
                        -v
                    }
                })
                .sum::<f32>()
                / (n as f32).sqrt();
            assert!(
                (got - expected).abs() < 1e-5,
                "row {row}: {got} vs {expected}"
            );
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
        assert!(
            (norm_in - norm_mid).abs() < 1e-4 * norm_in,
            "not norm preserving"
        );
        hadamard_in_place(&mut x)?;
        for (a, b) in input.iter().zip(&x) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        Ok(())
    }

    #[test]
    fn rejects_non_powers_of_two() {
        let mut x = [1.0; 6];
        assert!(matches!(
            hadamard_in_place(&mut x),
            Err(FormatError::NotPowerOfTwo { len: 6 })
        ));
        assert_eq!(x, [1.0; 6]);
        assert!(hadamard_in_place(&mut []).is_err());
        let mut one = [3.0];
        assert!(hadamard_in_place(&mut one).is_ok());
        assert_eq!(one, [3.0]);
        assert!(hadamard_rows_in_place(&mut [0.0; 12], 4).is_ok());
        assert!(hadamard_rows_in_place(&mut [0.0; 10], 4).is_err());
    }
}

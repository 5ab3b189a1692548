//! The lightning indexer's score, in the reference kernel's order:
//!
//! I = round_logits( s_k · Σ_h w'_h · ReLU(q_h · k) ),
//! w'_h = round_weights( w_h · (H·d)^-1/2 · s_q,h ),
//!
//! where q_h and k are the values as stored (element values when their side
//! keeps one scale per row, dequantized values otherwise, with scale 1), s_q,h
//! the query's per-head scale and s_k the key's per-row scale.
//!
//! Products are accumulated in f32 with a fixed lane structure (8 partial
//! sums over d, then a fixed pairwise reduction), so a score is a pure
//! function of its inputs whatever the CPU's vector width or thread count.

use crate::precision::{LogitFormat, QuantizedRows, ScoreNumerics};

const LANES: usize = 8;

/// A quantized query ready to score keys: q [H × d] as stored and head
/// weights with the constant factor and the query's scales folded in.
#[derive(Clone, Debug)]
pub struct IndexerQuery {
    queries: Vec<f32>,
    weights: Vec<f32>,
    dim: usize,
    logits: LogitFormat,
}

impl IndexerQuery {
    /// `queries` are [heads × dim] with one scale per head (see
    /// [`QuantizedRows`]); `weights` are the raw signed head weights. Head
    /// weight h becomes `round(w_h · (H·d)^-1/2 · s_q,h)` in
    /// `scoring.weights`.
    pub fn new(queries: QuantizedRows, weights: &[f32], dim: usize, scoring: ScoreNumerics) -> Self {
        let heads = weights.len();
        debug_assert_eq!(queries.values.len(), heads * dim);
        debug_assert_eq!(queries.row_scales.len(), heads);
        let scale = 1.0 / ((heads * dim) as f32).sqrt();
        let weights = weights
            .iter()
            .zip(&queries.row_scales)
            .map(|(&w, &s_q)| scoring.weights.round(w * scale * s_q))
            .collect();
        Self { queries: queries.values, weights, dim, logits: scoring.logits }
    }

    /// The head weights as scored (for tests and tools).
    pub fn head_weights(&self) -> &[f32] {
        &self.weights
    }

    /// Scores rows of `keys` (row-major [n × dim], dequantized: key scale 1)
    /// into `out` (length n).
    pub fn score_rows(&self, keys: &[f32], out: &mut [f32]) {
        self.score_rows_dispatch(keys, None, out);
    }

    /// Scores quantized key rows: row r's head sum is multiplied by
    /// `keys.row_scales[r]` before the logit rounding.
    pub fn score_quantized_rows(&self, keys: &QuantizedRows, out: &mut [f32]) {
        debug_assert_eq!(keys.row_scales.len(), out.len());
        self.score_rows_dispatch(&keys.values, Some(&keys.row_scales), out);
    }

    fn score_rows_dispatch(&self, keys: &[f32], row_scales: Option<&[f32]>, out: &mut [f32]) {
        debug_assert_eq!(keys.len(), out.len() * self.dim);
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                unsafe { self.score_rows_avx2(keys, row_scales, out) };
                return;
            }
        }
        self.score_rows_portable(keys, row_scales, out);
    }

    /// The same code compiled for AVX2: one 8-lane partial-sum array maps to
    /// one register. No FMA, so results are bit-identical to the portable path.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn score_rows_avx2(&self, keys: &[f32], row_scales: Option<&[f32]>, out: &mut [f32]) {
        self.score_rows_portable(keys, row_scales, out);
    }

    #[inline(always)]
    fn score_rows_portable(&self, keys: &[f32], row_scales: Option<&[f32]>, out: &mut [f32]) {
        let d = self.dim;
        let scale_of = |row: usize| row_scales.map_or(1.0, |s| s[row]);
        let mut key_blocks = keys.chunks_exact(BLOCK_ROWS * d);
        let mut out_blocks = out.chunks_exact_mut(BLOCK_ROWS);
        let mut row = 0;
        for (kb, ob) in (&mut key_blocks).zip(&mut out_blocks) {
            let scales: [f32; BLOCK_ROWS] = std::array::from_fn(|r| scale_of(row + r));
            let scores = self.score_block::<BLOCK_ROWS>(kb, scales);
            ob.copy_from_slice(&scores);
            row += BLOCK_ROWS;
        }
        for (k, o) in key_blocks.remainder().chunks_exact(d).zip(out_blocks.into_remainder()) {
            *o = self.score_block::<1>(k, [scale_of(row)])[0];
            row += 1;
        }
    }

    /// Scores a single dequantized key; identical numerics to [`Self::score_rows`].
    pub fn score_one(&self, key: &[f32]) -> f32 {
        self.score_block::<1>(key, [1.0])[0]
    }

    /// Scores one key row of element values with its scale `key_scale`;
    /// identical numerics to [`Self::score_quantized_rows`].
    pub fn score_one_scaled(&self, key: &[f32], key_scale: f32) -> f32 {
        self.score_block::<1>(key, [key_scale])[0]
    }

    /// Scores `R` consecutive rows. Each row's arithmetic is the same for any
    /// `R`: lane l of a dot product sums q[j]·k[j] over j ≡ l (mod 8) in
    /// ascending j, the lanes are reduced in a fixed tree, the tail (d mod 8)
    /// is added in order, then heads are summed in order, then the key
    /// scale multiplies the sum (an exact no-op for scale 1).
    #[inline(always)]
    fn score_block<const R: usize>(&self, rows: &[f32], key_scales: [f32; R]) -> [f32; R] {
        let d = self.dim;
        let full = d / LANES * LANES;
        let row: [&[f32]; R] = std::array::from_fn(|r| &rows[r * d..(r + 1) * d]);
        let chunks: [&[[f32; LANES]]; R] = std::array::from_fn(|r| row[r][..full].as_chunks::<LANES>().0);
        let mut acc = [0.0f32; R];
        for (h, &w) in self.weights.iter().enumerate() {
            let q = &self.queries[h * d..(h + 1) * d];
            let q_chunks = q[..full].as_chunks::<LANES>().0;
            let mut lanes = [[0.0f32; LANES]; R];
            for (j, qc) in q_chunks.iter().enumerate() {
                for r in 0..R {
                    let kc = &chunks[r][j];
                    for l in 0..LANES {
                        lanes[r][l] += qc[l] * kc[l];
                    }
                }
            }
            for r in 0..R {
                let a = &lanes[r];
                let mut dot = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
                for j in full..d {
                    dot += q[j] * row[r][j];
                }
                acc[r] += w * dot.max(0.0);
            }
        }
        std::array::from_fn(|r| self.logits.round(key_scales[r] * acc[r]))
    }
}

/// Rows scored together: their 8-lane partial sums stay in registers while
/// each query chunk is loaded once.
const BLOCK_ROWS: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(q: &[f32], w: &[f32], k: &[f32], d: usize) -> f64 {
        let h = w.len();
        let s: f64 = (0..h)
            .map(|i| {
                let dot: f64 = (0..d).map(|j| f64::from(q[i * d + j]) * f64::from(k[j])).sum();
                f64::from(w[i]) * dot.max(0.0)
            })
            .sum();
        s / ((h * d) as f64).sqrt()
    }

    #[test]
    fn matches_a_naive_f64_evaluation() {
        let (h, d) = (5, 20); // d not a multiple of 8 exercises the tail
        let q: Vec<f32> = (0..h * d).map(|i| ((i * 37 % 17) as f32 - 8.0) / 5.0).collect();
        let w = vec![1.0, -0.5, 2.0, 0.25, -1.5];
        let keys: Vec<f32> = (0..7 * d).map(|i| ((i * 13 % 11) as f32 - 5.0) / 3.0).collect();
        let iq = IndexerQuery::new(QuantizedRows::unscaled(q.clone(), d), &w, d, ScoreNumerics::F32);
        let mut out = vec![0.0; 7];
        iq.score_rows(&keys, &mut out);
        for r in 0..7 {
            let want = naive(&q, &w, &keys[r * d..(r + 1) * d], d);
            assert!((f64::from(out[r]) - want).abs() < 1e-4 * want.abs().max(1.0), "row {r}: {} vs {want}", out[r]);
            assert_eq!(out[r].to_bits(), iq.score_one(&keys[r * d..(r + 1) * d]).to_bits());
        }
    }

    #[test]
    fn relu_drops_negative_heads() {
        let d = 8;
        let q = vec![1.0; d];
        let iq = IndexerQuery::new(QuantizedRows::unscaled(q, d), &[1.0], d, ScoreNumerics::F32);
        assert_eq!(iq.score_one(&[-1.0; 8]), 0.0);
        assert!(iq.score_one(&[1.0; 8]) > 0.0);
    }
}

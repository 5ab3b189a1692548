//! The lightning indexer's score: I = (H·d)^-1/2 · Σ_h w_h · ReLU(q_h · k).
//!
//! Products are accumulated in f32 with a fixed lane structure (8 partial
//! sums over d, then a fixed pairwise reduction), so a score is a pure
//! function of its inputs whatever the CPU's vector width or thread count.

use crate::precision::LogitFormat;

const LANES: usize = 8;

/// A quantized query ready to score keys: dequantized q [H × d] and head
/// weights with the reference's scale folded in.
#[derive(Clone, Debug)]
pub struct IndexerQuery {
    queries: Vec<f32>,
    weights: Vec<f32>,
    heads: usize,
    dim: usize,
    logits: LogitFormat,
}

impl IndexerQuery {
    /// `queries` are dequantized [heads × dim]; `weights` are the raw signed
    /// head weights; the (H·d)^-1/2 factor is folded into them.
    pub fn new(queries: Vec<f32>, weights: &[f32], dim: usize, logits: LogitFormat) -> Self {
        let heads = weights.len();
        debug_assert_eq!(queries.len(), heads * dim);
        let scale = 1.0 / ((heads * dim) as f32).sqrt();
        let weights = weights.iter().map(|&w| w * scale).collect();
        Self { queries, weights, heads, dim, logits }
    }

    /// Scores rows of `keys` (row-major [n × dim]) into `out` (length n).
    pub fn score_rows(&self, keys: &[f32], out: &mut [f32]) {
        let d = self.dim;
        debug_assert_eq!(keys.len(), out.len() * d);
        let mut blocks = keys.chunks_exact(4 * d);
        let mut out_blocks = out.chunks_exact_mut(4);
        for (kb, ob) in (&mut blocks).zip(&mut out_blocks) {
            let rows = [&kb[..d], &kb[d..2 * d], &kb[2 * d..3 * d], &kb[3 * d..]];
            let mut acc = [0.0f32; 4];
            for h in 0..self.heads {
                let q = &self.queries[h * d..(h + 1) * d];
                let dots = dot4(q, rows);
                let w = self.weights[h];
                for r in 0..4 {
                    acc[r] += w * dots[r].max(0.0);
                }
            }
            for r in 0..4 {
                ob[r] = self.logits.round(acc[r]);
            }
        }
        for (k, o) in blocks.remainder().chunks_exact(d).zip(out_blocks.into_remainder()) {
            *o = self.score_one(k);
        }
    }

    /// Scores a single key; identical numerics to [`Self::score_rows`].
    pub fn score_one(&self, key: &[f32]) -> f32 {
        let d = self.dim;
        let mut acc = 0.0f32;
        for h in 0..self.heads {
            let dot = dot4(&self.queries[h * d..(h + 1) * d], [key, key, key, key])[0];
            acc += self.weights[h] * dot.max(0.0);
        }
        self.logits.round(acc)
    }
}

/// Four dot products of `q` with four rows, each with 8 lane partial sums.
#[inline(always)]
fn dot4(q: &[f32], rows: [&[f32]; 4]) -> [f32; 4] {
    let d = q.len();
    let mut lanes = [[0.0f32; LANES]; 4];
    let full = d / LANES * LANES;
    for j in (0..full).step_by(LANES) {
        let qv: &[f32; LANES] = q[j..j + LANES].try_into().unwrap_or(&[0.0; LANES]);
        for r in 0..4 {
            let kv: &[f32; LANES] = rows[r][j..j + LANES].try_into().unwrap_or(&[0.0; LANES]);
            for l in 0..LANES {
                lanes[r][l] += qv[l] * kv[l];
            }
        }
    }
    let mut out = [0.0f32; 4];
    for r in 0..4 {
        let a = &lanes[r];
        let mut s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
        for j in full..d {
            s += q[j] * rows[r][j];
        }
        out[r] = s;
    }
    out
}

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
        let iq = IndexerQuery::new(q.clone(), &w, d, LogitFormat::F32);
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
        let iq = IndexerQuery::new(q, &[1.0], d, LogitFormat::F32);
        assert_eq!(iq.score_one(&[-1.0; 8]), 0.0);
        assert!(iq.score_one(&[1.0; 8]) > 0.0);
    }
}

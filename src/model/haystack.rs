//! The synthetic generative model for indexer queries, head weights and keys.
//!
//! Everything here is documented, with its reasoning, in docs/MODEL.md
//! ("Generative model"). In short, for one trial:
//!
//! * queries `q_h ~ N(0, I_d)` for each of the H heads;
//! * head weights `w_h ~ N(μ_w, σ_w)`, signed, except that the heads that look
//!   for the needle take `|w_h|`;
//! * a haystack key `k = a·u + σ ⊙ z`, `z ~ N(0, I_d)`, with a common unit
//!   direction `u` shared by every row of the trial, `a = common·‖σ‖`, and
//!   `σ_j = outlier_scale` on the outlier channels, 1 elsewhere;
//! * a needle key is a haystack key plus `δ`, the smallest vector that moves
//!   each looking head's dot product by `strength` haystack standard
//!   deviations of that head, and every other head's by exactly zero.

use crate::base::rng::{self, tag};
use crate::error::SimError;
use rand::Rng;
use rand_distr::{Distribution, Normal, StandardNormal};
use serde::{Deserialize, Serialize};

/// Indexer dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexerShape {
    pub heads: usize,
    pub head_dim: usize,
}

/// Knobs of the synthetic keys, queries and weights (validated by config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenerativeModel {
    pub shape: IndexerShape,
    /// Norm of the common key component relative to the random part's RMS norm.
    pub key_common: f64,
    /// Number of outlier channels (the first ones of the key).
    pub outlier_channels: usize,
    /// Standard deviation of the outlier channels (the others have 1).
    pub outlier_scale: f64,
    pub weight_mean: f64,
    pub weight_std: f64,
    /// Needle strength in haystack standard deviations of each looking head's
    /// pre-ReLU dot product.
    pub needle_strength: f64,
    /// Heads that look for the needle (the first `needle_heads` heads).
    pub needle_heads: usize,
}

/// One trial's draws: everything except the per-row noise, which is drawn on
/// demand from a per-row stream so any row can be regenerated alone.
#[derive(Clone, Debug)]
pub struct TrialHaystack {
    pub shape: IndexerShape,
    /// Queries, row-major [heads × head_dim], fp32 before any quantization.
    pub queries: Vec<f32>,
    /// Signed head weights [heads], before the (H·d)^-1/2 scale.
    pub weights: Vec<f32>,
    /// `a·u`, the component every key shares.
    common: Vec<f32>,
    /// Per-channel standard deviation σ.
    channel_std: Vec<f32>,
    /// `δ`, added to a needle row's key.
    needle_offset: Vec<f32>,
    row_seed: u64,
}

impl TrialHaystack {
    /// Draws a trial from `trial_seed`.
    pub fn draw(model: &GenerativeModel, trial_seed: u64) -> Result<Self, SimError> {
        let IndexerShape { heads, head_dim: d } = model.shape;
        let mut rng = rng::stream(trial_seed, &[tag::QUERY]);

        let queries: Vec<f32> = (0..heads * d).map(|_| rng.sample::<f32, _>(StandardNormal)).collect();

        let weight_dist =
            Normal::new(model.weight_mean, model.weight_std).map_err(|e| SimError::Model(format!("head weight distribution: {e}")))?;
        let weights: Vec<f32> = (0..heads)
            .map(|h| {
                let w = weight_dist.sample(&mut rng);
                // A head that looks for the needle must vote for it.
                if h < model.needle_heads {
                    w.abs() as f32
                } else {
                    w as f32
                }
            })
            .collect();

        let channel_std: Vec<f32> = (0..d).map(|j| if j < model.outlier_channels { model.outlier_scale as f32 } else { 1.0 }).collect();
        let random_norm = channel_std.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>().sqrt();
        let mut direction: Vec<f64> = (0..d).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
        let dir_norm = direction.iter().map(|x| x * x).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
        for x in &mut direction {
            *x /= dir_norm;
        }
        let common: Vec<f32> = direction.iter().map(|&u| (model.key_common * random_norm * u) as f32).collect();

        let needle_offset = needle_offset(model, &queries, &channel_std)?;
        // Key of this trial's Philox row stream: row i's normals are Philox
        // blocks with counter (·, 0, i) under this key.
        let row_seed = rng::derive(trial_seed, &[tag::ROW]);
        Ok(Self { shape: model.shape, queries, weights, common, channel_std, needle_offset, row_seed })
    }

    /// Writes haystack row `row`'s key into `out` (length head_dim).
    pub fn fill_haystack_row(&self, row: u64, out: &mut [f32]) {
        self.fill_haystack_rows(row, out);
    }

    /// Writes the keys of haystack rows `first_row`, `first_row + 1`, … into
    /// `out` (row-major, a whole number of rows). Row i's key is
    /// `common + σ ⊙ z` with z the first head_dim normals of Philox row i of
    /// this trial's row stream ([`rng::normal_group`]), the same bits whatever
    /// the batch, the order or the CPU (the AVX2 build runs the same f32 code).
    pub fn fill_haystack_rows(&self, first_row: u64, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            let level = crate::base::simd::level();
            if level.avx512() {
                // SAFETY: the level is AVX-512, so the CPU has AVX-512F and AVX2.
                unsafe { self.fill_rows_avx512(first_row, out) };
                return;
            }
            if level.avx2() {
                // SAFETY: the level is at least AVX2.
                unsafe { self.fill_rows_avx2(first_row, out) };
                return;
            }
        }
        self.fill_rows_portable(first_row, out);
    }

    /// The same code compiled for AVX2: no FMA, so bit-identical to the portable path.
    ///
    /// # Safety
    /// The CPU must support AVX2 (memory is accessed through slices only).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn fill_rows_avx2(&self, first_row: u64, out: &mut [f32]) {
        self.fill_rows::<true>(first_row, out);
    }

    /// The normals of each row block by block from the AVX-512 generator
    /// ([`rng::for_each_normal_block_avx512`]), the same bits as the other
    /// paths (tested).
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX2 (memory is accessed through
    /// slices only).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn fill_rows_avx512(&self, first_row: u64, out: &mut [f32]) {
        let d = self.shape.head_dim;
        let rows = first_row..first_row + (out.len() / d) as u64;
        let fill = |row: u64, start: usize, z: &[f32]| {
            let at = (row - first_row) as usize * d + start;
            let span = start..start + z.len();
            for (((o, &c), &s), &z) in out[at..at + z.len()].iter_mut().zip(&self.common[span.clone()]).zip(&self.channel_std[span]).zip(z)
            {
                *o = c + s * z;
            }
        };
        // SAFETY: our caller guarantees AVX-512F and AVX2.
        unsafe { rng::for_each_normal_block_avx512(self.row_seed, rows, 0, d, fill) };
    }

    pub(crate) fn fill_rows_portable(&self, first_row: u64, out: &mut [f32]) {
        self.fill_rows::<false>(first_row, out);
    }

    /// With `AVX2`, only ever inlined into [`Self::fill_rows_avx2`].
    #[inline(always)]
    fn fill_rows<const AVX2: bool>(&self, first_row: u64, out: &mut [f32]) {
        let d = self.shape.head_dim;
        debug_assert_eq!(out.len() % d, 0);
        let mut z = [0.0f32; rng::NORMAL_GROUP];
        for (r, key) in out.chunks_exact_mut(d).enumerate() {
            let row = first_row + r as u64;
            for (g, ((o, c), s)) in key
                .chunks_mut(rng::NORMAL_GROUP)
                .zip(self.common.chunks(rng::NORMAL_GROUP))
                .zip(self.channel_std.chunks(rng::NORMAL_GROUP))
                .enumerate()
            {
                #[cfg(target_arch = "x86_64")]
                if AVX2 {
                    // SAFETY: AVX2 is true only inside `fill_rows_avx2`, called only at level AVX2 or above.
                    unsafe { rng::normal_group_avx2(self.row_seed, row, g as u32, &mut z) };
                } else {
                    rng::normal_group(self.row_seed, row, g as u32, &mut z);
                }
                #[cfg(not(target_arch = "x86_64"))]
                rng::normal_group(self.row_seed, row, g as u32, &mut z);
                for (((o, &c), &s), &z) in o.iter_mut().zip(c).zip(s).zip(&z) {
                    *o = c + s * z;
                }
            }
        }
    }

    /// Writes the key of row `row` when it holds the needle: the haystack key
    /// that row would have had, plus `δ`. With strength 0 the two are equal.
    pub fn fill_needle_row(&self, row: u64, out: &mut [f32]) {
        self.fill_haystack_row(row, out);
        for (o, &dv) in out.iter_mut().zip(&self.needle_offset) {
            *o += dv;
        }
    }

    /// The needle offset δ (for tests and dumps).
    pub fn needle_offset(&self) -> &[f32] {
        &self.needle_offset
    }

    /// `a·u`, the component every key shares.
    pub fn common(&self) -> &[f32] {
        &self.common
    }

    /// Per-channel standard deviation σ of a key's random part.
    pub fn channel_std(&self) -> &[f32] {
        &self.channel_std
    }
}

/// Minimum-norm δ with `q_h·δ = strength·σ_h` for looking heads and
/// `q_h·δ = 0` for the others, where σ_h² = Σ_j q_hj² σ_j² is the variance of
/// head h's dot product over haystack rows. Solved in f64 through the
/// Cholesky factor of the H×H Gram matrix Q·Qᵀ (full rank when H ≤ d).
fn needle_offset(model: &GenerativeModel, queries: &[f32], channel_std: &[f32]) -> Result<Vec<f32>, SimError> {
    let IndexerShape { heads, head_dim: d } = model.shape;
    if model.needle_strength == 0.0 || model.needle_heads == 0 {
        return Ok(vec![0.0; d]);
    }
    let q = |h: usize, j: usize| f64::from(queries[h * d + j]);
    let mut target = vec![0.0f64; heads];
    for (h, t) in target.iter_mut().enumerate().take(model.needle_heads) {
        let var: f64 = (0..d).map(|j| (q(h, j) * f64::from(channel_std[j])).powi(2)).sum();
        *t = model.needle_strength * var.sqrt();
    }
    // Gram entries, each summed over j in ascending order as `Iterator::sum`
    // would (from −0.0), but a whole row of them side by side: one long
    // serial chain of f64 adds per entry was most of a trial's setup.
    let q_by_dim: Vec<f64> = (0..d).flat_map(|j| (0..heads).map(move |h| q(h, j))).collect();
    let mut gram = vec![0.0f64; heads * heads];
    let mut row = vec![0.0f64; heads];
    for a in 0..heads {
        let g = &mut row[..=a];
        g.fill(-0.0);
        for j in 0..d {
            let qa = q(a, j);
            for (gb, &qb) in g.iter_mut().zip(&q_by_dim[j * heads..j * heads + a + 1]) {
                *gb += qa * qb;
            }
        }
        for (b, &v) in g.iter().enumerate() {
            gram[a * heads + b] = v;
            gram[b * heads + a] = v;
        }
    }
    let alpha = cholesky_solve(&mut gram, heads, &target)
        .ok_or_else(|| SimError::Model("the query Gram matrix is singular; use indexer.heads ≤ indexer.head_dim".into()))?;
    Ok((0..d).map(|j| (0..heads).map(|h| alpha[h] * q(h, j)).sum::<f64>() as f32).collect())
}

/// Solves A·x = b for symmetric positive definite A (row-major n×n, overwritten
/// by its Cholesky factor). None when A is not numerically positive definite.
fn cholesky_solve(a: &mut [f64], n: usize, b: &[f64]) -> Option<Vec<f64>> {
    for i in 0..n {
        for j in 0..=i {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            if i == j {
                if !(s > 1e-12 * a[i * n + i].abs().max(1.0)) {
                    return None;
                }
                a[i * n + i] = s.sqrt();
            } else {
                a[i * n + j] = s / a[j * n + j];
            }
        }
    }
    let mut y = vec![0.0; n];
    for i in 0..n {
        let s: f64 = (0..i).map(|k| a[i * n + k] * y[k]).sum();
        y[i] = (b[i] - s) / a[i * n + i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|k| a[k * n + i] * x[k]).sum();
        x[i] = (y[i] - s) / a[i * n + i];
    }
    Some(x)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The V4-Flash preset's generative model (64 heads × 128 dims).
    pub(crate) fn model(strength: f64) -> GenerativeModel {
        GenerativeModel {
            shape: IndexerShape { heads: 64, head_dim: 128 },
            key_common: 0.5,
            outlier_channels: 4,
            outlier_scale: 8.0,
            weight_mean: 0.0,
            weight_std: 1.0,
            needle_strength: strength,
            needle_heads: 16,
        }
    }

    fn dot(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum()
    }

    #[test]
    fn needle_offset_shifts_looking_heads_by_strength_sd_and_others_by_zero() {
        let m = model(2.5);
        let t = TrialHaystack::draw(&m, 7).unwrap();
        let d = 128;
        for h in 0..64 {
            let q = &t.queries[h * d..(h + 1) * d];
            let shift = dot(q, t.needle_offset());
            let sd: f64 = (0..d).map(|j| (f64::from(q[j]) * f64::from(t.channel_std[j])).powi(2)).sum::<f64>().sqrt();
            let want = if h < 16 { 2.5 * sd } else { 0.0 };
            assert!((shift - want).abs() < 1e-3 * sd, "head {h}: shift {shift}, want {want}");
        }
    }

    #[test]
    fn strength_zero_makes_needle_rows_identical_to_haystack_rows() {
        let t = TrialHaystack::draw(&model(0.0), 3).unwrap();
        let (mut a, mut b) = (vec![0.0; 128], vec![0.0; 128]);
        t.fill_haystack_row(99, &mut a);
        t.fill_needle_row(99, &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn looking_heads_have_positive_weights_and_rows_are_reproducible() {
        let t = TrialHaystack::draw(&model(1.0), 11).unwrap();
        assert!(t.weights[..16].iter().all(|&w| w >= 0.0));
        assert!(t.weights[16..].iter().any(|&w| w < 0.0));
        let (mut a, mut b) = (vec![0.0; 128], vec![0.0; 128]);
        t.fill_haystack_row(5, &mut a);
        t.fill_haystack_row(5, &mut b);
        assert_eq!(a, b);
        t.fill_haystack_row(6, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn haystack_channels_have_the_documented_spread() {
        // Sample variance of an outlier channel vs a normal one, over 4000 rows:
        // the ratio's standard error is about 2·sqrt(2/4000) ≈ 4.5 %; allow 5 SE.
        let m = model(0.0);
        let t = TrialHaystack::draw(&m, 1).unwrap();
        let mut row = vec![0.0; 128];
        let (mut s0, mut s0sq, mut s9, mut s9sq) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        let n = 4000;
        for i in 0..n {
            t.fill_haystack_row(i, &mut row);
            s0 += f64::from(row[0]);
            s0sq += f64::from(row[0]).powi(2);
            s9 += f64::from(row[9]);
            s9sq += f64::from(row[9]).powi(2);
        }
        let var = |s: f64, sq: f64| sq / n as f64 - (s / n as f64).powi(2);
        let ratio = var(s0, s0sq) / var(s9, s9sq);
        assert!((ratio / 64.0 - 1.0).abs() < 0.225, "variance ratio {ratio}, want 64");
    }

    #[test]
    fn batched_rows_equal_single_rows_and_the_portable_path() {
        // 128, 256: group quads; 192: a quad and a pair; 96, 40: pairs,
        // single groups and a cut group.
        for d in [128usize, 256, 192, 96, 40] {
            let mut m = model(1.0);
            m.shape.head_dim = d;
            m.shape.heads = 8;
            m.needle_heads = 2;
            let t = TrialHaystack::draw(&m, 21).unwrap();
            let rows = 37;
            let mut batch = vec![0.0f32; rows * d];
            t.fill_haystack_rows(1000, &mut batch);
            let mut portable = vec![0.0f32; rows * d];
            t.fill_rows_portable(1000, &mut portable);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&batch), bits(&portable), "d = {d}");
            let mut one = vec![0.0f32; d];
            for r in (0..rows).rev() {
                t.fill_haystack_row(1000 + r as u64, &mut one);
                assert_eq!(bits(&one), bits(&batch[r * d..(r + 1) * d]), "d = {d}, row {r}");
            }
        }
    }

    #[test]
    fn cholesky_solves_a_known_system() {
        let mut a = vec![4.0, 2.0, 2.0, 3.0];
        let x = cholesky_solve(&mut a, 2, &[2.0, 1.0]).unwrap();
        // [[4,2],[2,3]] x = [2,1] → x = [0.5, 0]
        assert!((x[0] - 0.5).abs() < 1e-12 && x[1].abs() < 1e-12);
        let mut singular = vec![1.0, 1.0, 1.0, 1.0];
        assert!(cholesky_solve(&mut singular, 2, &[1.0, 1.0]).is_none());
    }
}

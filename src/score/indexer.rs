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

use crate::base::rng::CacheLines;
use crate::base::simd;
use crate::numerics::pipeline::{LogitFormat, QuantizedRows, ScoreNumerics};

const LANES: usize = 8;

/// A quantized query ready to score keys: q [H × d] as stored and head
/// weights with the constant factor and the query's scales folded in.
#[derive(Clone, Debug)]
pub struct IndexerQuery {
    queries: Vec<f32>,
    weights: Vec<f32>,
    dim: usize,
    logits: LogitFormat,
    /// The queries of head pairs interleaved by 8-lane chunk for the AVX-512
    /// kernel: `[pair][chunk][q_2p chunk (8), q_2p+1 chunk (8)]`. Empty when
    /// the shape has no blocked kernel (see [`Self::blocked_shape`]). One
    /// cache line per (pair, chunk), so the kernel's loads never split.
    paired: Vec<CacheLines<[f32; 2 * LANES]>>,
    /// Without ReLU (hypothesis `no-relu`): the signed head sum is this
    /// query's ReLU sum (scored with f32 logits) less the negated query's,
    /// Σ_h w_h·x_h = Σ_h w_h·ReLU(x_h) − Σ_h w_h·ReLU(−x_h), then rounded
    /// to these logits.
    signed: Option<(Box<IndexerQuery>, LogitFormat)>,
}

impl IndexerQuery {
    /// `queries` are [heads × dim] with one scale per head (see
    /// [`QuantizedRows`]); `weights` are the raw signed head weights. Head
    /// weight h becomes `round(w_h · (H·d)^-1/2 · s_q,h)` in
    /// `scoring.weights`.
    ///
    /// # Panics
    /// Unless `queries` holds exactly `weights.len()` rows of `dim` values
    /// and one scale per row. The SIMD kernels read the queries through raw
    /// pointers and rely on this shape.
    pub fn new(queries: QuantizedRows, weights: &[f32], dim: usize, scoring: ScoreNumerics) -> Self {
        let heads = weights.len();
        assert_eq!(Some(queries.values.len()), heads.checked_mul(dim), "indexer queries: {heads} heads × {dim} values expected");
        assert_eq!(queries.row_scales.len(), heads, "indexer queries: one scale per head expected");
        if !scoring.relu {
            let negated = QuantizedRows { values: queries.values.iter().map(|&x| -x).collect(), row_scales: queries.row_scales.clone() };
            let plain = ScoreNumerics { logits: LogitFormat::F32, relu: true, ..scoring };
            let mut iq = IndexerQuery::new(queries, weights, dim, plain);
            iq.signed = Some((Box::new(IndexerQuery::new(negated, weights, dim, plain)), scoring.logits));
            return iq;
        }
        let weights = Self::scaled_head_weights(weights, &queries.row_scales, dim, scoring);
        Self::from_head_weights(queries.values, weights, dim, scoring.logits)
    }

    /// Head weight h as [`Self::new`] scores it: `round(w_h · (H·d)^-1/2 · s_q,h)`
    /// in `scoring.weights`, with H = `weights.len()`.
    pub fn scaled_head_weights(weights: &[f32], query_scales: &[f32], dim: usize, scoring: ScoreNumerics) -> Vec<f32> {
        let scale = 1.0 / ((weights.len() * dim) as f32).sqrt();
        weights.iter().zip(query_scales).map(|(&w, &s_q)| scoring.weights.round(w * scale * s_q)).collect()
    }

    /// A query whose head weights are already final (every factor folded
    /// in, as an engine's logits kernel receives them): `queries` are
    /// [heads × dim] values scored as they are, logit
    /// `round(s_k · Σ_h w_h · ReLU(q_h · k))` in `logits`.
    ///
    /// # Panics
    /// Unless `queries` holds exactly `weights.len()` rows of `dim` values.
    pub fn from_head_weights(queries: Vec<f32>, weights: Vec<f32>, dim: usize, logits: LogitFormat) -> Self {
        let heads = weights.len();
        assert_eq!(Some(queries.len()), heads.checked_mul(dim), "indexer queries: {heads} heads × {dim} values expected");
        let mut iq = Self { queries, weights, dim, logits, paired: Vec::new(), signed: None };
        if iq.blocked_shape() {
            let chunks = dim / LANES;
            iq.paired = (0..heads / 2)
                .flat_map(|p| (0..chunks).map(move |j| (p, j)))
                .map(|(p, j)| {
                    let (a, b) = (2 * p * dim + j * LANES, (2 * p + 1) * dim + j * LANES);
                    CacheLines(std::array::from_fn(|l| if l < LANES { iq.queries[a + l] } else { iq.queries[b + l - LANES] }))
                })
                .collect();
        }
        iq
    }

    /// The head weights as scored (for tests and tools).
    pub fn head_weights(&self) -> &[f32] {
        &self.weights
    }

    /// For this (exact, f32) query: F such that a variant whose query–key
    /// products carry relative error ε ≥ 2⁻⁸
    /// ([`crate::score::variant::PrecisionVariant::rounding_bound`]), scored
    /// with the same f32 weights, gives every key k a score within
    /// ε·F·‖k‖ of this query's. With P_h = Σ_j |q_hj·k_j| ≤ ‖q_h‖·‖k‖, each
    /// head's f32 dot product of the cast values is within
    /// [ε + γ_d(2 + ε)]·P_h of the exact one (γ_n = n·u/(1 − n·u), u = 2⁻²⁴,
    /// for any summation order); ReLU moves it no further; the f32 weight
    /// products and the head sum add γ_{H+1}(1 + γ_d)(2 + ε)·Σ_h |w_h|·P_h.
    /// F is Σ_h |w_h|·‖q_h‖ times the sum of those terms per unit ε, taken at
    /// ε = 2⁻⁸ (the f32 terms weigh most there), plus 2 % for the rounding
    /// of this computation.
    pub fn bound_factor(&self) -> f64 {
        let (heads, d) = (self.weights.len(), self.dim);
        let gamma = |n: usize| {
            let nu = n as f64 * 2f64.powi(-24);
            nu / (1.0 - nu)
        };
        let a: f64 = self
            .weights
            .iter()
            .zip(self.queries.chunks_exact(d.max(1)))
            .map(|(&w, q)| f64::from(w).abs() * q.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt())
            .sum();
        let eps = 2f64.powi(-8);
        let per_eps = (eps + gamma(d) * (2.0 + eps) + gamma(heads + 1) * (1.0 + gamma(d)) * (2.0 + eps)) / eps;
        1.02 * a * per_eps
    }

    /// Scores rows of `keys` (row-major [n × dim], dequantized: key scale 1)
    /// into `out` (length n).
    ///
    /// # Panics
    /// Unless `keys.len()` is `out.len() · dim`.
    pub fn score_rows(&self, keys: &[f32], out: &mut [f32]) {
        self.score_rows_dispatch(keys, None, out);
    }

    /// Scores quantized key rows: row r's head sum is multiplied by
    /// `keys.row_scales[r]` before the logit rounding.
    ///
    /// # Panics
    /// Unless `keys` holds `out.len()` rows of `dim` values and one scale per row.
    pub fn score_quantized_rows(&self, keys: &QuantizedRows, out: &mut [f32]) {
        self.score_rows_dispatch(&keys.values, Some(&keys.row_scales), out);
    }

    /// True when the register-blocked SIMD kernels apply: `dim` a positive
    /// multiple of 8 and the head count a positive multiple of 8.
    fn blocked_shape(&self) -> bool {
        let heads = self.weights.len();
        self.dim > 0 && self.dim.is_multiple_of(LANES) && heads > 0 && heads.is_multiple_of(8)
    }

    /// The one entry of every kernel: checks the shapes the kernels' raw
    /// pointer reads rely on (once per call), then picks the kernel.
    fn score_rows_dispatch(&self, keys: &[f32], row_scales: Option<&[f32]>, out: &mut [f32]) {
        assert_eq!(Some(keys.len()), out.len().checked_mul(self.dim), "indexer keys: {} rows × {} values expected", out.len(), self.dim);
        if let Some(scales) = row_scales {
            assert_eq!(scales.len(), out.len(), "indexer keys: one scale per row expected");
        }
        if let Some((negated, logits)) = &self.signed {
            self.score_rows_kernel(keys, row_scales, out);
            let mut minus = vec![0f32; out.len()];
            negated.score_rows_kernel(keys, row_scales, &mut minus);
            for (o, m) in out.iter_mut().zip(minus) {
                *o = logits.round(*o - m);
            }
            return;
        }
        self.score_rows_kernel(keys, row_scales, out);
    }

    /// The kernel for shapes checked by [`Self::score_rows_dispatch`].
    fn score_rows_kernel(&self, keys: &[f32], row_scales: Option<&[f32]>, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            let level = simd::level();
            let mut done = 0;
            if self.blocked_shape() && level.avx512() {
                // SAFETY: the level is AVX-512, so the CPU has AVX-512F/DQ and
                // AVX2; keys hold out.len() rows of dim (asserted above), and the
                // queries heads rows of dim (asserted in `new`); the rows from
                // `done` on are within keys.
                unsafe {
                    let done = self.score_blocks_avx512(keys, row_scales, out);
                    self.score_single_rows_avx512(&keys[done * self.dim..], row_scales.map(|s| &s[done..]), &mut out[done..]);
                }
                return;
            }
            if self.blocked_shape() && level.avx2() {
                // SAFETY: the level is at least AVX2; shapes as above.
                done = unsafe { self.score_blocks_avx2(keys, row_scales, out) };
            }
            if level.avx2() {
                // SAFETY: the level is at least AVX2 (this kernel reads through slices only).
                unsafe { self.score_rows_avx2(&keys[done * self.dim..], row_scales.map(|s| &s[done..]), &mut out[done..]) };
                return;
            }
            self.score_rows_portable(&keys[done * self.dim..], row_scales.map(|s| &s[done..]), &mut out[done..]);
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.score_rows_portable(keys, row_scales, out);
    }

    /// Head sum of one block of rows from their dots `[head][R]`, then the
    /// key scale and the logit rounding, exactly as [`Self::score_block`].
    #[inline(always)]
    fn finish_rows(&self, sums: &[f32], first_row: usize, row_scales: Option<&[f32]>, out: &mut [f32]) {
        for (r, (o, &sum)) in out.iter_mut().zip(sums).enumerate() {
            let scale = row_scales.map_or(1.0, |s| s[first_row + r]);
            *o = self.logits.round(scale * sum);
        }
    }

    /// Register-blocked AVX-512 kernel for whole blocks of 16 rows; returns
    /// the number of rows scored. One zmm accumulates one row against a pair
    /// of heads (lanes 0–7 head 2p, 8–15 head 2p+1: the same 8 lanes per
    /// head as [`Self::score_block`], each summed over its j ≡ l (mod 8) in
    /// ascending j); 4 rows × 4 pairs stay in registers while each key chunk
    /// is loaded (from a doubled copy) once per 8 heads and each query chunk
    /// once per 4 rows. The
    /// 8 lanes of each (row, head) are then reduced with the same tree,
    /// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), 16 at a time by
    /// shuffles, and the heads are summed in order with the rows across
    /// lanes. Same operations, same order: the same bits (tested).
    ///
    /// # Safety
    /// The CPU must support AVX-512F/DQ and AVX2 (level AVX-512), `keys`
    /// must hold at least `out.len()` rows of `dim` values and `row_scales`
    /// (when given) `out.len()` scales; the query shape is checked in `new`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq,avx2")]
    // The register block is written as index loops over (row i, pair p),
    // mirroring acc[i][p]'s layout; the loops are what the kernel compiles to.
    #[allow(clippy::needless_range_loop)]
    unsafe fn score_blocks_avx512(&self, keys: &[f32], row_scales: Option<&[f32]>, out: &mut [f32]) -> usize {
        use std::arch::x86_64::*;
        const BLOCK: usize = 16;
        let (d, heads) = (self.dim, self.weights.len());
        let chunks = d / LANES;
        let blocks = out.len() / BLOCK;
        let mut dots = vec![0f32; heads * BLOCK];
        #[inline(always)]
        unsafe fn step1(x: __m512, y: __m512) -> __m512 {
            _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(x, y), _mm512_shuffle_f32x4::<0xDD>(x, y))
        }
        #[inline(always)]
        unsafe fn step2(u: __m512, v: __m512) -> __m512 {
            _mm512_add_ps(_mm512_shuffle_ps::<0x44>(u, v), _mm512_shuffle_ps::<0xEE>(u, v))
        }
        #[inline(always)]
        unsafe fn step3(s: __m512, t: __m512) -> __m512 {
            _mm512_add_ps(_mm512_shuffle_ps::<0x88>(s, t), _mm512_shuffle_ps::<0xDD>(s, t))
        }
        #[inline(always)]
        unsafe fn store_lanes(o: __m512, dst: *mut f32) {
            // 128-bit lane k (head k of the group) holds rows 0..4.
            _mm_storeu_ps(dst, _mm512_extractf32x4_ps::<0>(o));
            _mm_storeu_ps(dst.add(BLOCK), _mm512_extractf32x4_ps::<1>(o));
            _mm_storeu_ps(dst.add(2 * BLOCK), _mm512_extractf32x4_ps::<2>(o));
            _mm_storeu_ps(dst.add(3 * BLOCK), _mm512_extractf32x4_ps::<3>(o));
        }
        // The 4 rows of a group with every 8-value chunk written twice, so the
        // inner loop loads each (chunk | chunk) with a plain 512-bit load: a
        // broadcast load costs an extra µop in the FP pipes, which on Zen 4
        // competes with the adds (the loop alone: 40 G products/s with
        // broadcast loads, 45–50 G with plain ones; docs/performance-history.md, stop 12).
        let mut doubled = vec![CacheLines([0f32; 16]); 4 * chunks];
        let doubled_ptr = doubled.as_mut_ptr().cast::<f32>();
        // Pointer reads below stay in bounds: key rows < blocks · 16 ≤ out.len()
        // (keys hold out.len() rows of d), chunks j · 8 + 8 ≤ d, query pairs
        // (hg · 4 + p) · chunks + j < heads / 2 · chunks = paired.len(), dots
        // rows h < heads of 16, doubled rows i · chunks + j < 4 · chunks.
        for b in 0..blocks {
            let base = b * BLOCK;
            for g in 0..BLOCK / 4 {
                for i in 0..4 {
                    let row = keys.as_ptr().add((base + 4 * g + i) * d);
                    for j in 0..chunks {
                        let chunk = _mm512_broadcast_f32x8(_mm256_loadu_ps(row.add(j * LANES)));
                        _mm512_storeu_ps(doubled_ptr.add((i * chunks + j) * 16), chunk);
                    }
                }
                let kp = doubled_ptr.cast_const();
                for hg in 0..heads / 8 {
                    let qp = self.paired.as_ptr().cast::<f32>().add(hg * 4 * chunks * 16);
                    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
                    for j in 0..chunks {
                        let k: [__m512; 4] = std::array::from_fn(|i| _mm512_loadu_ps(kp.add((i * chunks + j) * 16)));
                        for p in 0..4 {
                            let q = _mm512_loadu_ps(qp.add((p * chunks + j) * 16));
                            for i in 0..4 {
                                acc[i][p] = _mm512_add_ps(acc[i][p], _mm512_mul_ps(q, k[i]));
                            }
                        }
                    }
                    let za: [__m512; 4] = std::array::from_fn(|i| step1(acc[i][0], acc[i][1]));
                    let zb: [__m512; 4] = std::array::from_fn(|i| step1(acc[i][2], acc[i][3]));
                    let oa = step3(step2(za[0], za[1]), step2(za[2], za[3]));
                    let ob = step3(step2(zb[0], zb[1]), step2(zb[2], zb[3]));
                    store_lanes(oa, dots.as_mut_ptr().add(8 * hg * BLOCK + 4 * g));
                    store_lanes(ob, dots.as_mut_ptr().add((8 * hg + 4) * BLOCK + 4 * g));
                }
            }
            let zero = _mm512_setzero_ps();
            let mut sum = _mm512_setzero_ps();
            for (h, &w) in self.weights.iter().enumerate() {
                let relu = _mm512_max_ps(_mm512_loadu_ps(dots.as_ptr().add(h * BLOCK)), zero);
                sum = _mm512_add_ps(sum, _mm512_mul_ps(_mm512_set1_ps(w), relu));
            }
            let mut sums = [0f32; BLOCK];
            _mm512_storeu_ps(sums.as_mut_ptr(), sum);
            self.finish_rows(&sums, base, row_scales, &mut out[base..base + BLOCK]);
        }
        blocks * BLOCK
    }

    /// AVX-512 kernel for rows one at a time (a remainder below 16 rows, the
    /// few rows a fault patch changes): per row, 4 zmm hold 8 heads (the
    /// pairs of [`Self::score_blocks_avx512`]), each lane summed over its
    /// j ≡ l (mod 8) in ascending j, then each head's 8 lanes reduced with
    /// [`Self::score_block`]'s tree and the heads summed in order: the same
    /// operations in the same order, so the same bits (tested). Four
    /// independent chains keep the adds busy where the portable one-row
    /// code waits on one (a patch's rows were 10 % of a diagnosis's CPU).
    ///
    /// # Safety
    /// The CPU must support AVX-512F/DQ and AVX2 (level AVX-512), the query
    /// must have the blocked shape, `keys` must hold at least `out.len()`
    /// rows of `dim` values and `row_scales` (when given) `out.len()` scales.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq,avx2")]
    unsafe fn score_single_rows_avx512(&self, keys: &[f32], row_scales: Option<&[f32]>, out: &mut [f32]) {
        use std::arch::x86_64::*;
        let (d, heads) = (self.dim, self.weights.len());
        let chunks = d / LANES;
        for (r, o) in out.iter_mut().enumerate() {
            let row = keys.as_ptr().add(r * d);
            let mut total = 0.0f32;
            for group in 0..heads / 8 {
                // Pointer reads stay in bounds: chunk j · 8 + 8 ≤ d of row r <
                // out.len(); pairs (group · 4 + p) · chunks + j < paired.len().
                let qp = self.paired.as_ptr().cast::<f32>().add(group * 4 * chunks * 16);
                let mut acc = [_mm512_setzero_ps(); 4];
                for j in 0..chunks {
                    let k = _mm512_broadcast_f32x8(_mm256_loadu_ps(row.add(j * LANES)));
                    for (p, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_add_ps(*a, _mm512_mul_ps(_mm512_loadu_ps(qp.add((p * chunks + j) * 16)), k));
                    }
                }
                for (p, a) in acc.iter().enumerate() {
                    let mut lanes = [0f32; 16];
                    _mm512_storeu_ps(lanes.as_mut_ptr(), *a);
                    for half in 0..2 {
                        let a = &lanes[half * LANES..(half + 1) * LANES];
                        let dot = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
                        total += self.weights[8 * group + 2 * p + half] * dot.max(0.0);
                    }
                }
            }
            *o = self.logits.round(row_scales.map_or(1.0, |s| s[r]) * total);
        }
    }

    /// The AVX2 version of [`Self::score_blocks_avx512`] for whole blocks of
    /// 8 rows: one ymm per (row, head), 4 rows × 2 heads in registers, the
    /// same lane reduction tree 8 at a time, heads summed in order with the
    /// rows across lanes.
    ///
    /// # Safety
    /// The CPU must support AVX2, and the shapes must be as for
    /// [`Self::score_blocks_avx512`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn score_blocks_avx2(&self, keys: &[f32], row_scales: Option<&[f32]>, out: &mut [f32]) -> usize {
        use std::arch::x86_64::*;
        const BLOCK: usize = 8;
        let (d, heads) = (self.dim, self.weights.len());
        let chunks = d / LANES;
        let blocks = out.len() / BLOCK;
        let mut dots = vec![0f32; heads * BLOCK];
        #[inline(always)]
        unsafe fn step1(x: __m256, y: __m256) -> __m256 {
            _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(x, y), _mm256_permute2f128_ps::<0x31>(x, y))
        }
        #[inline(always)]
        unsafe fn step2(u: __m256, v: __m256) -> __m256 {
            _mm256_add_ps(_mm256_shuffle_ps::<0x44>(u, v), _mm256_shuffle_ps::<0xEE>(u, v))
        }
        #[inline(always)]
        unsafe fn step3(s: __m256, t: __m256) -> __m256 {
            _mm256_add_ps(_mm256_shuffle_ps::<0x88>(s, t), _mm256_shuffle_ps::<0xDD>(s, t))
        }
        let qp = self.queries.as_ptr();
        // Pointer reads below stay in bounds: key rows < blocks · 8 ≤ out.len()
        // (keys hold out.len() rows of d), query rows < heads (queries hold
        // heads rows of d), chunks j · 8 + 8 ≤ d, dots rows h < heads of 8.
        for b in 0..blocks {
            let base = b * BLOCK;
            for g in 0..BLOCK / 4 {
                let kp: [*const f32; 4] = std::array::from_fn(|i| keys.as_ptr().add((base + 4 * g + i) * d));
                for hp in 0..heads / 2 {
                    let (q0, q1) = (qp.add(2 * hp * d), qp.add((2 * hp + 1) * d));
                    let mut acc = [[_mm256_setzero_ps(); 2]; 4];
                    for j in 0..chunks {
                        let (a, c) = (_mm256_loadu_ps(q0.add(j * LANES)), _mm256_loadu_ps(q1.add(j * LANES)));
                        for i in 0..4 {
                            let k = _mm256_loadu_ps(kp[i].add(j * LANES));
                            acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_mul_ps(a, k));
                            acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_mul_ps(c, k));
                        }
                    }
                    let z: [__m256; 4] = std::array::from_fn(|i| step1(acc[i][0], acc[i][1]));
                    // 128-bit lane k: head 2hp + k, rows 4g..4g+4.
                    let o = step3(step2(z[0], z[1]), step2(z[2], z[3]));
                    let dst = dots.as_mut_ptr().add(2 * hp * BLOCK + 4 * g);
                    _mm_storeu_ps(dst, _mm256_castps256_ps128(o));
                    _mm_storeu_ps(dst.add(BLOCK), _mm256_extractf128_ps::<1>(o));
                }
            }
            let zero = _mm256_setzero_ps();
            let mut sum = _mm256_setzero_ps();
            for (h, &w) in self.weights.iter().enumerate() {
                let relu = _mm256_max_ps(_mm256_loadu_ps(dots.as_ptr().add(h * BLOCK)), zero);
                sum = _mm256_add_ps(sum, _mm256_mul_ps(_mm256_set1_ps(w), relu));
            }
            let mut sums = [0f32; BLOCK];
            _mm256_storeu_ps(sums.as_mut_ptr(), sum);
            self.finish_rows(&sums, base, row_scales, &mut out[base..base + BLOCK]);
        }
        blocks * BLOCK
    }

    /// The portable code compiled for AVX2 (the rows the blocked kernels
    /// leave over). No FMA, so results are bit-identical to the portable path.
    ///
    /// # Safety
    /// The CPU must support AVX2.
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

    /// Every path (the blocked AVX-512 and AVX2 kernels where the CPU has
    /// them, the portable code) gives the bits of the one-row reference.
    #[test]
    fn blocked_kernels_are_bit_identical_to_the_row_reference() {
        let (h, d, n) = (64, 128, 53); // 3 blocks of 16 (6 of 8) and a remainder
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
        };
        let q: Vec<f32> = (0..h * d).map(|_| next()).collect();
        let w: Vec<f32> = (0..h).map(|_| next()).collect();
        let mut keys: Vec<f32> = (0..n * d).map(|_| next()).collect();
        keys[5 * d..6 * d].fill(0.0); // every dot zero
        keys[7 * d + 3] = -0.0;
        let scales: Vec<f32> = (0..n).map(|r| 0.5 + r as f32 / 16.0).collect();
        for numerics in [
            ScoreNumerics::F32,
            ScoreNumerics { weights: crate::numerics::pipeline::WeightFormat::Bf16, logits: LogitFormat::Bf16, relu: true },
        ] {
            let iq = IndexerQuery::new(QuantizedRows::unscaled(q.clone(), d), &w, d, numerics);
            let want: Vec<u32> = keys.chunks(d).zip(&scales).map(|(k, &s)| iq.score_one_scaled(k, s).to_bits()).collect();
            let rows = QuantizedRows { values: keys.clone(), row_scales: scales.clone() };
            let mut out = vec![0.0; n];
            iq.score_quantized_rows(&rows, &mut out);
            assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
            let mut portable = vec![0.0; n];
            iq.score_rows_portable(&keys, Some(&scales), &mut portable);
            assert_eq!(portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
            #[cfg(target_arch = "x86_64")]
            {
                let tail =
                    |done: usize, out: &mut [f32]| iq.score_rows_portable(&keys[done * d..], Some(&scales[done..]), &mut out[done..]);
                if simd::level().avx2() {
                    let mut out = vec![0.0; n];
                    // SAFETY: level AVX2; keys and scales hold n rows, out n values.
                    let done = unsafe { iq.score_blocks_avx2(&keys, Some(&scales), &mut out) };
                    assert_eq!(done, 48);
                    tail(done, &mut out);
                    assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "avx2");
                }
                if simd::level().avx512() {
                    let mut out = vec![0.0; n];
                    // SAFETY: level AVX-512; keys and scales hold n rows, out n values.
                    let done = unsafe { iq.score_blocks_avx512(&keys, Some(&scales), &mut out) };
                    assert_eq!(done, 48);
                    tail(done, &mut out);
                    assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "avx512");
                    // Every row alone, the kernel of remainders and patches.
                    let mut single = vec![0.0; n];
                    // SAFETY: level AVX-512, the blocked shape; keys and scales hold n rows.
                    unsafe { iq.score_single_rows_avx512(&keys, Some(&scales), &mut single) };
                    assert_eq!(single.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want, "avx512, one row at a time");
                }
            }
        }
    }

    /// A query of the blocked shape (8 heads × 16), so the SIMD kernels
    /// would read `keys` through raw pointers.
    fn blocked_query() -> IndexerQuery {
        let (h, d) = (8, 16);
        let q: Vec<f32> = (0..h * d).map(|i| (i % 7) as f32 - 3.0).collect();
        IndexerQuery::new(QuantizedRows::unscaled(q, d), &[1.0; 8], d, ScoreNumerics::F32)
    }

    #[test]
    #[should_panic(expected = "indexer keys")]
    fn short_keys_are_refused() {
        let mut out = vec![0.0; 32];
        blocked_query().score_rows(&vec![1.0; 31 * 16], &mut out);
    }

    #[test]
    #[should_panic(expected = "indexer keys")]
    fn a_key_buffer_much_shorter_than_the_output_is_refused() {
        let mut out = vec![0.0; 64];
        blocked_query().score_rows(&[1.0; 16], &mut out);
    }

    #[test]
    #[should_panic(expected = "indexer keys")]
    fn long_keys_are_refused() {
        let mut out = vec![0.0; 16];
        blocked_query().score_rows(&vec![1.0; 16 * 16 + 1], &mut out);
    }

    #[test]
    #[should_panic(expected = "indexer keys")]
    fn short_quantized_keys_are_refused() {
        let mut out = vec![0.0; 32];
        let keys = QuantizedRows { values: vec![1.0; 16 * 16], row_scales: vec![1.0; 32] };
        blocked_query().score_quantized_rows(&keys, &mut out);
    }

    #[test]
    #[should_panic(expected = "one scale per row")]
    fn short_row_scales_are_refused() {
        let mut out = vec![0.0; 32];
        let keys = QuantizedRows { values: vec![1.0; 32 * 16], row_scales: vec![1.0; 17] };
        blocked_query().score_quantized_rows(&keys, &mut out);
    }

    #[test]
    #[should_panic(expected = "one scale per row")]
    fn long_row_scales_are_refused() {
        let mut out = vec![0.0; 16];
        let keys = QuantizedRows { values: vec![1.0; 16 * 16], row_scales: vec![1.0; 17] };
        blocked_query().score_quantized_rows(&keys, &mut out);
    }

    #[test]
    #[should_panic(expected = "indexer queries")]
    fn short_queries_are_refused() {
        let q = QuantizedRows { values: vec![1.0; 7 * 16], row_scales: vec![1.0; 8] };
        IndexerQuery::new(q, &[1.0; 8], 16, ScoreNumerics::F32);
    }

    #[test]
    #[should_panic(expected = "indexer queries")]
    fn queries_of_another_dim_are_refused() {
        let q = QuantizedRows { values: vec![1.0; 8 * 16], row_scales: vec![1.0; 8] };
        IndexerQuery::new(q, &[1.0; 8], 32, ScoreNumerics::F32);
    }

    #[test]
    #[should_panic(expected = "one scale per head")]
    fn mismatched_query_scales_are_refused() {
        let q = QuantizedRows { values: vec![1.0; 8 * 16], row_scales: vec![1.0; 7] };
        IndexerQuery::new(q, &[1.0; 8], 16, ScoreNumerics::F32);
    }

    #[test]
    #[should_panic(expected = "indexer queries")]
    fn an_overflowing_query_shape_is_refused() {
        let q = QuantizedRows { values: vec![1.0; 16], row_scales: vec![1.0; 8] };
        IndexerQuery::new(q, &[1.0; 8], usize::MAX / 4, ScoreNumerics::F32);
    }

    #[test]
    fn matching_shapes_score_on_every_path() {
        let iq = blocked_query();
        let keys: Vec<f32> = (0..37 * 16).map(|i| (i % 5) as f32 - 2.0).collect();
        let mut out = vec![0.0; 37];
        iq.score_rows(&keys, &mut out);
        for (r, &o) in out.iter().enumerate() {
            assert_eq!(o.to_bits(), iq.score_one(&keys[r * 16..(r + 1) * 16]).to_bits(), "row {r}");
        }
        let mut none: [f32; 0] = [];
        iq.score_rows(&[], &mut none);
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

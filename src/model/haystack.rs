//! The synthetic generative model for indexer queries, head weights and keys.
//!
//! Everything here is documented, with its reasoning, in docs/MODEL.md
//! ("Generative model"). In short, for one trial:
//!
//! * queries `q_h ~ N(0, I_d)` for each of the H heads;
//! * head weights `w_h = μ_w + σ_w·z_h`, `z_h ~ N(0, 1)`, signed, except that
//!   the heads that look for the needle take `σ_w·|z_h|` (`|w_h|` at μ_w = 0);
//! * a haystack key `k = a·u + σ ⊙ z`, `z ~ N(0, I_d)`, with a common unit
//!   direction `u` shared by every row of the trial, `a = common·‖σ‖`, and
//!   `σ_j = outlier_scale` on the outlier channels, 1 elsewhere;
//! * a needle key is a haystack key plus `δ`, the smallest vector that moves
//!   each looking head's dot product by `strength` haystack standard
//!   deviations of that head, and every other head's by exactly zero.

use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::model::needle::NeedleUnit;
use rand::Rng;
use rand_distr::{Normal, StandardNormal};
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
    /// pre-ReLU dot product (the strength unit).
    pub needle_strength: f64,
    /// How the needle's signal is set: a fixed strength, or solved per trial
    /// to a drawn haystack exceedance (docs/MODEL.md, "The needle's unit").
    /// Left out of serialized scenarios under the strength unit, so their
    /// manifests keep their bytes.
    #[serde(default, skip_serializing_if = "NeedleUnit::is_strength")]
    pub needle_unit: NeedleUnit,
    /// Heads that look for the needle (the first `needle_heads` heads).
    pub needle_heads: usize,
    /// Where the needle's match lives (docs/MODEL.md, "Needle geometry").
    pub needle_geometry: NeedleGeometry,
    /// Share of each looking head's query variance in a retrieval direction
    /// the looking heads share (0: independent heads).
    pub head_coherence: f64,
    /// How rows differ beyond exchangeable Gaussian draws.
    pub structure: HaystackStructure,
}

/// The haystack's structure (docs/MODEL.md, "Structured haystack"): a
/// content subspace that keys and queries share, and a per-row relevance
/// along the direction that raises the query's score. All zero: the
/// exchangeable Gaussian rows of the null model, bit for bit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HaystackStructure {
    /// Dimension r of the content subspace (0: none).
    pub content_rank: usize,
    /// Share of a key's random variance that lies in the content subspace.
    pub key_content_share: f64,
    /// Share of each query's variance that lies in the content subspace.
    pub query_content_share: f64,
    /// Median relevance, in units of ‖σ‖ (the random part's norm).
    pub relevance_scale: f64,
    /// Log-normal spread of relevance over rows.
    pub relevance_sigma: f64,
    /// Rows per related block (0: no blocks): rows of a block share a
    /// log-normal relevance factor …
    pub block_rows: u64,
    /// … of this spread.
    pub block_sigma: f64,
    /// The first rows of the context (attention sinks) …
    pub sink_rows: u64,
    /// … add this relevance, in units of ‖σ‖.
    pub sink_relevance: f64,
    /// Recency: the newest candidate rows add relevance
    /// `recency_relevance · ‖σ‖ · exp(−distance / recency_rows)`, distance
    /// in rows from the newest candidate row (0 = off) …
    pub recency_rows: f64,
    /// … with this amplitude, in units of ‖σ‖.
    pub recency_relevance: f64,
}

/// Rows farther than this many e-folds from the newest candidate row get
/// no recency relevance (exp(−8) ≈ 3·10⁻⁴ of its amplitude: a truncation).
const RECENCY_EFOLDS: f64 = 8.0;

impl HaystackStructure {
    /// Rows are the null model's exchangeable Gaussian draws.
    pub fn is_null(&self) -> bool {
        !self.has_content() && !self.has_relevance()
    }

    fn has_content(&self) -> bool {
        self.content_rank > 0 && (self.key_content_share > 0.0 || self.query_content_share > 0.0)
    }

    fn has_relevance(&self) -> bool {
        self.relevance_scale > 0.0 || (self.sink_rows > 0 && self.sink_relevance > 0.0) || self.has_recency()
    }

    fn has_recency(&self) -> bool {
        self.recency_rows > 0.0 && self.recency_relevance > 0.0
    }

    /// The rows of a context with `candidates` candidate rows that get
    /// recency relevance: they depend on the context, so a trial treats them
    /// like needle rows (one key per context).
    pub fn recency_span(&self, candidates: u64) -> std::ops::Range<u64> {
        if !self.has_recency() {
            return candidates..candidates;
        }
        let span = (RECENCY_EFOLDS * self.recency_rows).ceil() as u64;
        candidates.saturating_sub(span)..candidates
    }

    /// The attention-sink rows (empty when sinks are off): they always
    /// outrank ordinary rows, so the quantile needle's exceedance leaves them out.
    pub fn sink_span(&self) -> std::ops::Range<u64> {
        if self.sink_rows > 0 && self.sink_relevance > 0.0 {
            0..self.sink_rows
        } else {
            0..0
        }
    }

    /// Whether a row's distribution depends on its index (sinks, blocks):
    /// then rows are not exchangeable, which the sampling estimators assume.
    pub fn depends_on_row_index(&self) -> bool {
        (self.sink_rows > 0 && self.sink_relevance > 0.0)
            || (self.relevance_scale > 0.0 && self.block_rows > 0 && self.block_sigma > 0.0)
            || self.has_recency()
    }
}

/// One trial's draws of the structure: what [`TrialHaystack::add_structure`] adds.
#[derive(Clone, Debug)]
struct TrialStructure {
    rank: usize,
    /// Orthonormal basis of the content subspace, [r × d].
    basis: Vec<f32>,
    /// Standard deviation of a key's coordinate along each basis vector.
    key_scale: f32,
    /// Unit direction of relevance: the gradient of the linear score Σ_h w_h q_h.
    relevance_dir: Vec<f32>,
    /// `relevance_scale · ‖σ‖`, `sink_relevance · ‖σ‖`, `recency_relevance · ‖σ‖`.
    relevance_unit: f64,
    sink_unit: f64,
    recency_unit: f64,
    spec: HaystackStructure,
    row_seed: u64,
    block_seed: u64,
}

/// Which dims of a key carry the needle's match with the looking heads
/// (docs/MODEL.md, "Needle geometry").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum NeedleGeometry {
    /// The pessimistic setting: δ is the minimum-norm vector over all dims
    /// that moves each looking head by `strength` SD and pins every other
    /// head to exactly zero, solved against the unrotated queries, so about
    /// half of the match sits in the rotary dims and turns away with distance.
    Isotropic,
    /// What a trained indexer can do: a share `1 − rope_share` of each looking
    /// head's shift comes from the rope-free dims, `rope_share` from the
    /// rotary pairs in `band_dims` (slowly turning ones); heads that do not
    /// look are left free.
    Content {
        /// Dims RoPE never rotates (every dim when RoPE is off), ascending.
        free_dims: Vec<usize>,
        /// Both dims of each rotary pair in the band, ascending.
        band_dims: Vec<usize>,
        rope_share: f64,
    },
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
    structure: Option<TrialStructure>,
}

/// The content subspace's basis (empty without one), with a share of each
/// query moved into it: q_h ← √(1−f)·q_h + √f·√(d/r)·U·x_h, the same
/// expected norm. Own streams, so that a null structure leaves every other
/// draw as it was.
fn content_subspace(st: &HaystackStructure, trial_seed: u64, queries: &mut [f32], d: usize) -> Vec<f32> {
    if !st.has_content() {
        return Vec::new();
    }
    let mut srng = rng::stream(trial_seed, &[tag::STRUCTURE]);
    let basis = orthonormal_basis(&mut srng, st.content_rank, d);
    if st.query_content_share > 0.0 {
        let (a, b) = ((1.0 - st.query_content_share).sqrt(), (st.query_content_share * d as f64 / st.content_rank as f64).sqrt());
        for q in queries.chunks_exact_mut(d) {
            let x: Vec<f64> = (0..st.content_rank).map(|_| srng.sample::<f64, _>(StandardNormal)).collect();
            for (j, v) in q.iter_mut().enumerate() {
                let content: f64 = x.iter().enumerate().map(|(m, &xm)| xm * f64::from(basis[m * d + j])).sum();
                *v = (a * f64::from(*v) + b * content) as f32;
            }
        }
    }
    basis
}

/// Pulls the needle heads' queries towards one shared direction (head
/// coherence). Its own stream, so that coherence 0 leaves every other draw
/// as it was.
fn share_retrieval_direction(model: &GenerativeModel, trial_seed: u64, queries: &mut [f32], d: usize) {
    if model.head_coherence > 0.0 && model.needle_heads > 0 {
        let mut shared_rng = rng::stream(trial_seed, &[tag::RETRIEVAL]);
        let shared: Vec<f64> = (0..d).map(|_| shared_rng.sample::<f64, _>(StandardNormal)).collect();
        let (a, b) = (model.head_coherence.sqrt(), (1.0 - model.head_coherence).sqrt());
        for q in queries.chunks_exact_mut(d).take(model.needle_heads) {
            for (x, &r) in q.iter_mut().zip(&shared) {
                *x = (a * r + b * f64::from(*x)) as f32;
            }
        }
    }
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
                let z: f64 = rng.sample(StandardNormal);
                // A head that looks for the needle must vote for it: σ_w·|z|.
                // The mean is the other heads' net vote against the bulk of
                // rows (docs/MODEL.md, "Generative model"), so it does not
                // enlarge the looking heads' votes. At μ_w = 0 this is |w|.
                if h < model.needle_heads {
                    (model.weight_std * z.abs()) as f32
                } else {
                    weight_dist.from_zscore(z) as f32
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

        let mut queries = queries;
        let st = &model.structure;
        let basis = content_subspace(st, trial_seed, &mut queries, d);
        share_retrieval_direction(model, trial_seed, &mut queries, d);
        let needle_offset = needle_offset(model, &queries, &channel_std)?;
        // Key of this trial's Philox row stream: row i's normals are Philox
        // blocks with counter (·, 0, i) under this key.
        let row_seed = rng::derive(trial_seed, &[tag::ROW]);
        let structure = (!st.is_null()).then(|| {
            let random_var: f64 = channel_std.iter().map(|&s| f64::from(s).powi(2)).sum();
            let key_scale = if st.has_content() && st.key_content_share > 0.0 {
                // r·s² / (r·s² + ‖σ‖²) = f
                (st.key_content_share / (1.0 - st.key_content_share) * random_var / st.content_rank as f64).sqrt() as f32
            } else {
                0.0
            };
            let mut g = vec![0.0f64; d];
            for (q, &w) in queries.chunks_exact(d).zip(&weights) {
                for (gj, &qj) in g.iter_mut().zip(q) {
                    *gj += f64::from(w) * f64::from(qj);
                }
            }
            let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
            TrialStructure {
                rank: if key_scale > 0.0 { st.content_rank } else { 0 },
                basis,
                key_scale,
                relevance_dir: g.iter().map(|x| (x / norm) as f32).collect(),
                relevance_unit: st.relevance_scale * random_var.sqrt(),
                sink_unit: st.sink_relevance * random_var.sqrt(),
                recency_unit: st.recency_relevance * random_var.sqrt(),
                spec: st.clone(),
                row_seed: rng::derive(trial_seed, &[tag::STRUCTURE, tag::ROW]),
                block_seed: rng::derive(trial_seed, &[tag::STRUCTURE, tag::TRIAL]),
            }
        });
        Ok(Self { shape: model.shape, queries, weights, common, channel_std, needle_offset, row_seed, structure })
    }

    /// The rows that get recency relevance in a context of `candidates`
    /// candidate rows ([`HaystackStructure::recency_span`]).
    pub fn recency_span(&self, candidates: u64) -> std::ops::Range<u64> {
        self.structure.as_ref().map_or(candidates..candidates, |st| st.spec.recency_span(candidates))
    }

    /// Adds the recency relevance of `row` in a context of `candidates`
    /// candidate rows to its key (before any normalisation); nothing outside
    /// [`HaystackStructure::recency_span`].
    pub fn add_recency(&self, row: u64, candidates: u64, key: &mut [f32]) {
        let Some(st) = &self.structure else { return };
        if !st.spec.recency_span(candidates).contains(&row) {
            return;
        }
        let distance = (candidates - 1 - row) as f64;
        let rho = (st.recency_unit * (-distance / st.spec.recency_rows).exp()) as f32;
        for (k, &g) in key.iter_mut().zip(&st.relevance_dir) {
            *k += rho * g;
        }
    }

    /// Whether [`Self::add_structure`] changes rows.
    pub fn has_structure(&self) -> bool {
        self.structure.is_some()
    }

    /// Adds the structure of rows `first_row`, `first_row + 1`, … (before any
    /// normalisation): `U·y_i` in the content subspace and `ρ_i·g` along the
    /// relevance direction, each a pure function of (trial, row).
    pub fn add_structure(&self, first_row: u64, rows: &mut [f32]) {
        let d = self.shape.head_dim;
        self.add_structure_each(rows.chunks_exact_mut(d).enumerate().map(|(r, key)| (first_row + r as u64, key)));
    }

    /// Dispatches to the widest SIMD level: the same code compiled wider
    /// (no FMA: Rust never contracts a·b + c), so the same bits on every path.
    fn add_structure_each<'k>(&self, rows: impl Iterator<Item = (u64, &'k mut [f32])>) {
        if self.structure.is_none() {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let level = crate::base::simd::level();
            if level.avx512() {
                // SAFETY: the level is AVX-512, so the CPU has AVX-512F.
                unsafe { self.add_structure_avx512(rows) };
                return;
            }
            if level.avx2() {
                // SAFETY: the level is at least AVX2.
                unsafe { self.add_structure_avx2(rows) };
                return;
            }
        }
        for (row, key) in rows {
            self.add_row_structure(row, key);
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F (memory is accessed through slices only).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn add_structure_avx512<'k>(&self, rows: impl Iterator<Item = (u64, &'k mut [f32])>) {
        for (row, key) in rows {
            self.add_row_structure(row, key);
        }
    }

    /// # Safety
    /// The CPU must support AVX2 (memory is accessed through slices only).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn add_structure_avx2<'k>(&self, rows: impl Iterator<Item = (u64, &'k mut [f32])>) {
        for (row, key) in rows {
            self.add_row_structure(row, key);
        }
    }

    /// [`Self::add_structure`] for rows that are not consecutive.
    pub fn add_structure_at(&self, rows: &mut [f32], row_indices: &[u64]) {
        let d = self.shape.head_dim;
        self.add_structure_each(row_indices.iter().copied().zip(rows.chunks_exact_mut(d)));
    }

    /// Only ever inlined into [`Self::add_structure_each`]'s paths.
    #[inline(always)]
    fn add_row_structure(&self, row: u64, key: &mut [f32]) {
        let Some(st) = &self.structure else { return };
        let d = self.shape.head_dim;
        // Whole pairs of normal groups: the fast path of `fill_normals` (the
        // values do not depend on how many are drawn). Draw `rank` for the
        // content and one more for the relevance only when it is on.
        let relevance = usize::from(st.relevance_unit > 0.0);
        let needed = (st.rank + relevance).next_multiple_of(2 * rng::NORMAL_GROUP);
        let mut stack = [0.0f32; 2 * 2 * rng::NORMAL_GROUP];
        let mut heap;
        let draws: &mut [f32] = if needed <= stack.len() {
            &mut stack[..needed]
        } else {
            heap = vec![0.0f32; needed];
            &mut heap
        };
        rng::fill_normals(st.row_seed, row, 0, draws);
        // key_j += Σ_m y_m·U_mj, summed over m in order for each j: blocks
        // of 16 channels stay in registers across the basis (the same
        // operations in the same order as a loop over m outside, so the
        // same bits, without reloading the key once per basis vector).
        let ys = &mut draws[..st.rank];
        for z in ys.iter_mut() {
            *z *= st.key_scale;
        }
        // 128 channels at a time: eight independent vector accumulators, so
        // the adds of one basis vector do not wait on each other.
        const SPAN: usize = 128;
        let spans = d / SPAN;
        for b in 0..spans {
            let at = b * SPAN;
            let mut acc = [0.0f32; SPAN];
            acc.copy_from_slice(&key[at..at + SPAN]);
            for (&y, u_m) in ys.iter().zip(st.basis.chunks_exact(d)) {
                let u: &[f32; SPAN] = u_m[at..at + SPAN].try_into().expect("a span of the basis");
                for l in 0..SPAN {
                    acc[l] += y * u[l];
                }
            }
            key[at..at + SPAN].copy_from_slice(&acc);
        }
        for j in spans * SPAN..d {
            for (&y, u_m) in ys.iter().zip(st.basis.chunks_exact(d)) {
                key[j] += y * u_m[j];
            }
        }
        let spec = &st.spec;
        let mut rho = 0.0f64;
        if st.relevance_unit > 0.0 {
            let mut log = spec.relevance_sigma * f64::from(draws[st.rank]);
            if spec.block_rows > 0 && spec.block_sigma > 0.0 {
                let mut z = [0.0f32; rng::NORMAL_GROUP];
                rng::fill_normals(st.block_seed, row / spec.block_rows, 0, &mut z);
                log += spec.block_sigma * f64::from(z[0]);
            }
            rho += st.relevance_unit * log.exp();
        }
        if row < spec.sink_rows {
            rho += st.sink_unit;
        }
        if rho != 0.0 {
            let rho = rho as f32;
            for (k, &g) in key.iter_mut().zip(&st.relevance_dir) {
                *k += rho * g;
            }
        }
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

/// The needle offset δ: each looking head's dot product moves by
/// `strength·σ_h`, where σ_h² = Σ_j q_hj² σ_j² is the variance of head h's
/// dot product over haystack rows; where in the key that happens is the
/// model's [`NeedleGeometry`].
fn needle_offset(model: &GenerativeModel, queries: &[f32], channel_std: &[f32]) -> Result<Vec<f32>, SimError> {
    let IndexerShape { heads, head_dim: d } = model.shape;
    // The quantile needle scales this direction per context (`score::needle`).
    let strength = if model.needle_unit.is_strength() { model.needle_strength } else { 1.0 };
    if strength == 0.0 || model.needle_heads == 0 {
        return Ok(vec![0.0; d]);
    }
    let q = |h: usize, j: usize| f64::from(queries[h * d + j]);
    let mut target = vec![0.0f64; heads];
    for (h, t) in target.iter_mut().enumerate().take(model.needle_heads) {
        let var: f64 = (0..d).map(|j| (q(h, j) * f64::from(channel_std[j])).powi(2)).sum();
        *t = strength * var.sqrt();
    }
    match &model.needle_geometry {
        // Every dim, every head: zero for heads that do not look (full rank when H ≤ d).
        NeedleGeometry::Isotropic => {
            let all: Vec<usize> = (0..d).collect();
            let delta = min_norm_on(queries, d, &target, &all)
                .ok_or_else(|| SimError::Model("the query Gram matrix is singular; use indexer.heads ≤ indexer.head_dim".into()))?;
            Ok(delta.into_iter().map(|x| x as f32).collect())
        }
        NeedleGeometry::Content { free_dims, band_dims, rope_share } => {
            let looking = model.needle_heads;
            let mut delta = vec![0.0f64; d];
            for (dims, share) in [(free_dims, 1.0 - rope_share), (band_dims, *rope_share)] {
                if share == 0.0 {
                    continue;
                }
                let part: Vec<f64> = target[..looking].iter().map(|t| share * t).collect();
                let values = min_norm_on(queries, d, &part, dims).ok_or_else(|| {
                    SimError::Model("the looking heads' queries are linearly dependent on the needle's match dims".into())
                })?;
                for (&j, v) in dims.iter().zip(values) {
                    delta[j] += v;
                }
            }
            Ok(delta.into_iter().map(|x| x as f32).collect())
        }
    }
}

/// The minimum-norm vector supported on `dims` that moves head h
/// (h < target.len()) by `target[h]`, one value per entry of `dims`; solved
/// in f64 through the Cholesky factor of the heads' Gram matrix over `dims`.
/// None when those queries restricted to `dims` are linearly dependent.
fn min_norm_on(queries: &[f32], d: usize, target: &[f64], dims: &[usize]) -> Option<Vec<f64>> {
    let n = target.len();
    let q = |h: usize, j: usize| f64::from(queries[h * d + j]);
    // Gram entries, each summed over `dims` in order as `Iterator::sum`
    // would (from −0.0), but a whole row of them side by side: one long
    // serial chain of f64 adds per entry was most of a trial's setup.
    let q_by_dim: Vec<f64> = dims.iter().flat_map(|&j| (0..n).map(move |h| q(h, j))).collect();
    let mut gram = vec![0.0f64; n * n];
    let mut row = vec![0.0f64; n];
    for a in 0..n {
        let g = &mut row[..=a];
        g.fill(-0.0);
        for (i, &j) in dims.iter().enumerate() {
            let qa = q(a, j);
            for (gb, &qb) in g.iter_mut().zip(&q_by_dim[i * n..i * n + a + 1]) {
                *gb += qa * qb;
            }
        }
        for (b, &v) in g.iter().enumerate() {
            gram[a * n + b] = v;
            gram[b * n + a] = v;
        }
    }
    let alpha = cholesky_solve(&mut gram, n, target)?;
    Some(dims.iter().map(|&j| (0..n).map(|h| alpha[h] * q(h, j)).sum::<f64>()).collect())
}

/// `r` orthonormal vectors of length `d` ([r × d]), by Gram–Schmidt on
/// Gaussian draws (full rank with probability 1 for r ≤ d).
fn orthonormal_basis(rng: &mut impl Rng, r: usize, d: usize) -> Vec<f32> {
    let mut basis: Vec<Vec<f64>> = Vec::with_capacity(r);
    while basis.len() < r {
        let mut v: Vec<f64> = (0..d).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
        for _ in 0..2 {
            for b in &basis {
                let p: f64 = v.iter().zip(b).map(|(x, y)| x * y).sum();
                for (x, y) in v.iter_mut().zip(b) {
                    *x -= p * y;
                }
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm > 1e-6 {
            basis.push(v.iter().map(|x| x / norm).collect());
        }
    }
    basis.into_iter().flatten().map(|x| x as f32).collect()
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
pub(crate) mod tests;

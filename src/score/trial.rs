//! One trial: one decode query at the end of a context, one haystack, one
//! needle, scored under every precision variant and ranked for every k.
//!
//! One trial serves every context length of a sweep: haystack row `i` is a
//! pure function of (trial seed, i), so the first N rows of the longest
//! haystack *are* the haystack of a shorter context. Every cell therefore
//! sees an exact draw from the model, and its result does not depend on
//! which other contexts are in the sweep (see docs/MODEL.md, "Sharing").

use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::model::geometry::{CompressionGeometry, NeedlePlacement};
use crate::model::haystack::{GenerativeModel, TrialHaystack};
use crate::model::needle::{exceedance_of, rank_quantile, NeedleDraw};
use crate::model::physics::{Physics, RopeChoice};
use crate::model::row_source::{scaled_key, Item, TrialRows};
use crate::model::stack::WholeModel;
use crate::numerics::pipeline::{QuantPipeline, QuantizedRows};
use crate::score::indexer::IndexerQuery;
use crate::score::needle::{solve_scale, target_interval, NeedleSolve};
use crate::score::selection::{
    best_needle, kth_largest_many_with, selection_overlap_with, tie_key, tied_ahead_of_best, NeedleRank, TieAudit, TieCut, TieRule,
};
use crate::score::variant::{ChunkVisibility, PrecisionVariant};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Rows generated, quantized and scored together: small enough to stay in
/// L2 cache (256 rows × 128 dims × 4 bytes = 128 KiB).
const CHUNK_ROWS: usize = 256;

/// What a trial simulates.
#[derive(Clone, Debug)]
pub struct TrialSpec<'a> {
    pub model: &'a GenerativeModel,
    pub physics: &'a Physics,
    pub geometry: CompressionGeometry,
    /// Context lengths in tokens, ascending.
    pub contexts: &'a [u64],
    /// Needle depths, each in percent of the context. A sweep gives one
    /// per haystack group; diagnose's next experiment gives several, which
    /// then share the trials (seeded by the first: [`Self::seed_depth`]).
    pub depths: &'a [f64],
    /// Needle offsets inside a row stride (None: wherever the depth puts it).
    /// With the depths they make the needle spots ([`Self::spot`]).
    pub needle_offsets: &'a [Option<u64>],
    pub needle_tokens: u64,
    /// Top-k values, ascending.
    pub topks: &'a [u64],
    pub variants: &'a [PrecisionVariant],
    pub tie_rule: TieRule,
    /// Variant whose top-k set the others are compared with (selection
    /// fidelity); the exact `fp32` variant when the sweep has it.
    pub fidelity_reference: Option<usize>,
    /// The model's layer stack, when whole-model recall is read.
    pub stack: Option<&'a WholeModel>,
    /// Prefill chunk in tokens (0: the prompt in one chunk); only
    /// variants with a chunk fault (`chunk-local`) read it.
    pub prefill_chunk: u64,
    /// Audit every cell's cut for ties ([`NeedleOutcome::ties`]).
    pub tie_audit: bool,
}

/// The needle's fate in one cell of one trial.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NeedleOutcome {
    pub survived: bool,
    /// Survived because the whole needle lies in the raw window.
    pub via_window: bool,
    /// Rank of the best needle row; None when the needle has no candidate row.
    pub rank: Option<NeedleRank>,
    /// Best needle score minus the k_eff-th competitor score; None when
    /// there are fewer competitors than k_eff (the needle cannot be displaced).
    pub margin: Option<f32>,
    /// `margin` in standard deviations of the competitors' scores.
    pub margin_sd: Option<f64>,
    /// Selection fidelity against the reference variant's top-k_eff set over
    /// the same rows: the share of its rows this variant also selects …
    pub selection_recall: Option<f64>,
    /// … and the Jaccard overlap |A ∩ B| / |A ∪ B| of the two sets.
    pub jaccard: Option<f64>,
    /// The tie audit of this cell's cut, when the sweep asks for it
    /// (`--tie-audit on`; left out of checkpoints otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ties: Option<TieCut>,
}

impl NeedleOutcome {
    const LOST: NeedleOutcome = NeedleOutcome {
        survived: false,
        via_window: false,
        rank: None,
        margin: None,
        margin_sd: None,
        selection_recall: None,
        jaccard: None,
        ties: None,
    };
}

/// Outcomes of one trial, indexed by [`TrialSpec::cell_index`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialOutcome {
    pub cells: Vec<NeedleOutcome>,
    /// The trial's seed (whole-model recall draws its chains from it).
    pub seed: u64,
    /// The quantile needle's placement per (needle multiple, context, needle
    /// offset) ([`TrialSpec::needle_index`]); empty under the strength unit, and then
    /// left out of checkpoints, which keep their bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needle: Vec<NeedleSolve>,
}

/// One (context, needle spot) pair of a trial: where the needle and the
/// distractors sit, and the scores of the rows that hold them.
struct Case {
    ci: usize,
    si: usize,
    placement: NeedlePlacement,
    candidates: usize,
    items: Vec<Item>,
    /// Rows holding needle or distractor tokens, ascending.
    special: Vec<u64>,
    /// Scores that replace the shared ones: [variant] → (row, score).
    patches: Vec<Vec<(u32, f32)>>,
}

/// Chunks per rayon job at least, when a trial's chunks are scored in
/// parallel (2048 rows: a job's setup is small beside its work).
const CHUNKS_PER_JOB: usize = 8;

/// The variants a trial scores and where the quantile needle's exact
/// scores come from.
struct ScoredSet {
    variants: Vec<PrecisionVariant>,
    /// The exact variant among the spec's (its count: none).
    reference: usize,
    /// A variant that screens the rows for the exact reference, with its rounding bound.
    screen: Option<(usize, f64)>,
}

/// A trial's queries per group ([group][scored variant]), how many key
/// layouts its variants read, and the candidate rows each group scores.
struct QueryGroups {
    queries: Vec<Vec<IndexerQuery>>,
    key_layouts: usize,
    rows: Vec<usize>,
}

/// Buffers reused while judging a trial's cases.
struct JudgeBuffers {
    scratch: Vec<f32>,
    kth: Vec<f32>,
    row_order: Vec<u32>,
}

/// One chunk's rows of one (query group, variant) score array.
struct ScorePiece<'s> {
    group: usize,
    variant: usize,
    scores: &'s mut [f32],
}

/// A score that replaces the shared one in one case (a row holding needle
/// or distractor tokens, or any row of a chunk whose stored keys they change).
struct Patch {
    case: usize,
    variant: usize,
    row: u32,
    score: f32,
}

/// A case's special row in one chunk, before finalizing: its key with the
/// items' full offsets and, for the quantile needle, without them (the
/// needle's key at scale α lies between, [`scaled_key`]).
struct SpecialPre {
    row: u64,
    full: Vec<f32>,
    bare: Vec<f32>,
}

/// What a chunk leaves for the needle pass: each case's special rows in it,
/// and the chunk's finalized rows per key layout when a cache-fault variant
/// must store the whole chunk with the special rows in.
struct ChunkSpecials {
    start: u64,
    n: usize,
    /// Per case (empty for most chunks).
    cases: Vec<Vec<SpecialPre>>,
    /// [layout][n · d]; empty unless needed.
    fin: Vec<Vec<f32>>,
    /// ‖k‖ of each finalized row (layout 0); empty unless needed.
    norms: Vec<f32>,
}

/// What scoring a chunk reads: the trial's queries and cases.
struct ChunkWork<'w, 'a> {
    spec: &'w TrialSpec<'a>,
    /// The trial's seed: the request whose cache pages the faults draw.
    request: u64,
    /// The variants scored: the spec's, and the exact reference after them
    /// when the quantile needle needs one and the spec has none.
    variants: &'w [PrecisionVariant],
    /// 2 when some variant reads keys rotated with the swapped RoPE layout.
    key_layouts: usize,
    /// [query group][variant].
    queries: &'w [Vec<IndexerQuery>],
    cases: &'w [Case],
    /// Per variant: an earlier variant whose scores it shares (see [`TrialSpec::score_twins`]).
    twins: Vec<Option<usize>>,
    /// … and whose needle rows' scores too: a twin with the same needle multiple.
    patch_twins: Vec<Option<usize>>,
    /// Per variant: its needle multiple's slot ([`TrialSpec::needle_multiples`]).
    needle_slots: Vec<usize>,
    /// Keep each special row's key without offsets (the quantile needle).
    keep_bare: bool,
    /// Keep finalized chunks that hold special rows (a cache-fault variant).
    keep_fin: bool,
    /// Keep every row's key norm (the screened exact reference).
    keep_norms: bool,
}

/// Buffers of the chunk loop, one set per thread.
struct ChunkScratch {
    /// The chunk's rows; finalized in place (layout 0).
    pre: Vec<f32>,
    /// The same rows finalized with the swapped RoPE layout (layout 1).
    swapped_fin: Vec<f32>,
    chunk_scores: Vec<f32>,
    quantized: QuantizedRows,
    /// Each key pipeline's quantization of the chunk, shared by its variants.
    plain: Vec<QuantizedRows>,
}

impl ChunkScratch {
    fn new(work: &ChunkWork) -> Self {
        let d = work.spec.model.shape.head_dim;
        ChunkScratch {
            pre: vec![0.0; CHUNK_ROWS * d],
            swapped_fin: if work.key_layouts == 2 { vec![0.0; CHUNK_ROWS * d] } else { Vec::new() },
            chunk_scores: vec![0.0; CHUNK_ROWS],
            quantized: QuantizedRows::with_capacity(CHUNK_ROWS, d),
            plain: Vec::new(),
        }
    }
}

impl ChunkWork<'_, '_> {
    fn layout_of(&self, v: &PrecisionVariant) -> usize {
        usize::from(v.position.key_rope_layout_swapped && self.key_layouts == 2)
    }

    /// Scores every chunk of rows (up to `max_rows`) into `scores`
    /// ([group][variant][row]); returns each chunk's special rows.
    fn score_all(&self, source: &mut TrialRows, scores: &mut [Vec<Vec<f32>>], max_rows: usize) -> Result<Vec<ChunkSpecials>, SimError> {
        // Each chunk's piece of every (group, variant) score array.
        let chunk_count = max_rows.div_ceil(CHUNK_ROWS);
        let mut pieces: Vec<Vec<ScorePiece>> = (0..chunk_count).map(|_| Vec::new()).collect();
        for (g, group) in scores.iter_mut().enumerate() {
            for (v, variant_scores) in group.iter_mut().enumerate() {
                for (c, piece) in variant_scores.chunks_mut(CHUNK_ROWS).enumerate() {
                    pieces[c].push(ScorePiece { group: g, variant: v, scores: piece });
                }
            }
        }
        let score_chunk = |source: &mut TrialRows, scratch: &mut ChunkScratch, (c, mut pieces): (usize, Vec<ScorePiece>)| {
            self.score_chunk(source, scratch, c * CHUNK_ROWS, &mut pieces)
        };
        // Every row is a pure function of its position when chunks are
        // independent: then chunks may be scored on several threads (one
        // source clone and one scratch per rayon job) with the same bits.
        if source.chunks_are_independent() && rayon::current_num_threads() > 1 && chunk_count >= 2 * CHUNKS_PER_JOB {
            pieces
                .into_par_iter()
                .enumerate()
                .with_min_len(CHUNKS_PER_JOB)
                .map_init(|| (source.clone(), ChunkScratch::new(self)), |(source, scratch), chunk| score_chunk(source, scratch, chunk))
                .collect::<Result<_, _>>()
        } else {
            let mut scratch = ChunkScratch::new(self);
            pieces.into_iter().enumerate().map(|chunk| score_chunk(source, &mut scratch, chunk)).collect::<Result<_, _>>()
        }
    }

    /// Generates, finalizes, stores and scores the chunk of rows from
    /// `start` into `pieces`; returns the cases' special rows in it.
    fn score_chunk(
        &self,
        source: &mut TrialRows,
        scratch: &mut ChunkScratch,
        start: usize,
        pieces: &mut [ScorePiece],
    ) -> Result<ChunkSpecials, SimError> {
        let (d, key_layouts) = (self.spec.model.shape.head_dim, self.key_layouts);
        let n = pieces.iter().map(|p| p.scores.len()).max().unwrap_or(0);
        let rows = start as u64..(start + n) as u64;
        let ChunkScratch { pre, swapped_fin, chunk_scores, quantized, plain } = scratch;
        source.next_chunk(rows.start, &mut pre[..n * d])?;
        let cases = self.special_rows(source, &pre[..n * d], &rows)?;
        let mut specials = ChunkSpecials { start: rows.start, n, cases, fin: Vec::new(), norms: Vec::new() };
        if key_layouts == 2 {
            swapped_fin[..n * d].copy_from_slice(&pre[..n * d]);
            source.finalize_with(rows.start, &mut swapped_fin[..n * d], true)?;
        }
        // Finalizing (RMSNorm, RoPE) does nothing without pooling and RoPE:
        // then the generated rows are scored as they are.
        if source.finalizes() {
            source.finalize_with(rows.start, &mut pre[..n * d], false)?;
        }
        if self.keep_norms {
            specials.norms =
                pre[..n * d].chunks_exact(d).map(|k| k.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt() as f32).collect();
        }
        if self.keep_fin && specials.cases.iter().any(|c| !c.is_empty()) {
            specials.fin.push(pre[..n * d].to_vec());
            if key_layouts == 2 {
                specials.fin.push(swapped_fin[..n * d].to_vec());
            }
        }
        let fins: [&[f32]; 2] = [&pre[..n * d], &swapped_fin[..]];
        self.score_variants(fins, rows.start, n, (quantized, plain), &mut chunk_scores[..n], pieces)?;
        self.copy_twin_scores(pieces);
        Ok(specials)
    }

    /// Each case's special rows among the chunk's generated rows `pre`
    /// (rows `rows`), before finalizing.
    fn special_rows(&self, source: &mut TrialRows, pre: &[f32], rows: &std::ops::Range<u64>) -> Result<Vec<Vec<SpecialPre>>, SimError> {
        let d = self.spec.model.shape.head_dim;
        let mut cases = Vec::with_capacity(self.cases.len());
        for case in self.cases {
            // `special` is ascending: the rows of this chunk are one run.
            let first = case.special.partition_point(|&r| r < rows.start);
            let last = case.special.partition_point(|&r| r < rows.end);
            let mut here = Vec::with_capacity(last - first);
            for &row in &case.special[first..last] {
                let at = (row - rows.start) as usize * d;
                let mut full = vec![0.0; d];
                source.special_row(row, &case.items, &pre[at..at + d], &mut full)?;
                source.add_recency(row, case.candidates as u64, &mut full);
                let mut bare = Vec::new();
                if self.keep_bare {
                    bare.resize(d, 0.0);
                    source.special_row_scaled(row, &case.items, &pre[at..at + d], 0.0, &mut bare)?;
                    source.add_recency(row, case.candidates as u64, &mut bare);
                }
                here.push(SpecialPre { row, full, bare });
            }
            cases.push(here);
        }
        Ok(cases)
    }

    /// Stores the chunk's `n` finalized rows (per key layout, `fins`) as each
    /// variant keeps them and scores them into its pieces; twins are skipped.
    fn score_variants(
        &self,
        fins: [&[f32]; 2],
        start: u64,
        n: usize,
        (quantized, plain): (&mut QuantizedRows, &mut Vec<QuantizedRows>),
        chunk_scores: &mut [f32],
        pieces: &mut [ScorePiece],
    ) -> Result<(), SimError> {
        let d = self.spec.model.shape.head_dim;
        // A chunk holds a piece per (group, variant): found by index, not by
        // a scan per variant (hundreds of variants in a diagnosis).
        let mut of_variant: Vec<Vec<usize>> = vec![Vec::new(); self.variants.len()];
        for (i, p) in pieces.iter().enumerate() {
            of_variant[p.variant].push(i);
        }
        // The key pipelines quantized so far in this chunk, by (key layout,
        // pipeline), their rows in `plain` at the same index.
        let mut shared: Vec<(usize, &QuantPipeline)> = Vec::new();
        for (v, variant) in self.variants.iter().enumerate() {
            if self.twins[v].is_some() {
                continue;
            }
            let layout = self.layout_of(variant);
            let fin: &[f32] = fins[layout];
            // Exact keys in a fault-free cache are what was generated:
            // scored in place, without a copy (the same bits: their
            // row scales would be 1). A key pipeline's quantization is done
            // once per chunk and shared by every variant that starts from
            // it (a fault-free cache reads it as it is).
            let stored = if variant.key.is_identity() && variant.cache.is_default() {
                None
            } else if variant.cache.starts_from_quantized() {
                let i = match shared.iter().position(|&(l, k)| l == layout && *k == variant.key) {
                    Some(i) => i,
                    None => {
                        if plain.len() == shared.len() {
                            plain.push(QuantizedRows::with_capacity(n, d));
                        }
                        variant.key.quantize_rows_into(&fin[..n * d], d, &mut plain[shared.len()])?;
                        shared.push((layout, &variant.key));
                        shared.len() - 1
                    }
                };
                if variant.cache.is_default() {
                    Some(&plain[i])
                } else {
                    variant.cache.store_quantized(&variant.key, &plain[i], start, d, quantized)?;
                    Some(&*quantized)
                }
            } else {
                variant.store_keys(&fin[..n * d], start, self.request, d, quantized)?;
                Some(&*quantized)
            };
            let score = |q: &IndexerQuery, out: &mut [f32]| match stored {
                Some(keys) => q.score_quantized_rows(keys, out),
                None => q.score_rows(&fin[..n * d], out),
            };
            for &i in &of_variant[v] {
                let piece = &mut pieces[i];
                let q = &self.queries[piece.group][v];
                if piece.scores.len() == n {
                    score(q, piece.scores);
                } else {
                    score(q, chunk_scores);
                    let m = piece.scores.len();
                    piece.scores.copy_from_slice(&chunk_scores[..m]);
                }
            }
        }
        Ok(())
    }

    /// A twin's scores are its original's, bit for bit: copied, not recomputed.
    fn copy_twin_scores(&self, pieces: &mut [ScorePiece]) {
        let at = piece_index(pieces, self.twins.len());
        for i in 0..pieces.len() {
            let (g, v) = (pieces[i].group, pieces[i].variant);
            let Some(j) = self.twins[v].and_then(|u| at[g * self.twins.len() + u]) else { continue };
            let (to, from) = if i < j {
                let (a, b) = pieces.split_at_mut(j);
                (&mut a[i], &b[0])
            } else {
                let (a, b) = pieces.split_at_mut(i);
                (&mut b[0], &a[j])
            };
            to.scores.copy_from_slice(from.scores);
        }
    }

    /// The finalized keys, per key layout, of case `c`'s special rows in
    /// `chunk`, with the needle's offset at `scale` (None: the full
    /// offsets, the strength unit's keys).
    fn special_keys(&self, source: &TrialRows, c: usize, chunk: &ChunkSpecials, scale: Option<f32>) -> Result<[Vec<f32>; 2], SimError> {
        let d = self.spec.model.shape.head_dim;
        let pres = &chunk.cases[c];
        let mut keys = [Vec::new(), Vec::new()];
        for (layout, layout_keys) in keys.iter_mut().enumerate().take(self.key_layouts) {
            layout_keys.resize(pres.len() * d, 0.0);
            for (pre, key) in pres.iter().zip(layout_keys.chunks_exact_mut(d)) {
                match scale {
                    Some(s) => scaled_key(&pre.bare, &pre.full, s, key),
                    None => key.copy_from_slice(&pre.full),
                }
                source.finalize_with(pre.row, key, layout == 1)?;
            }
        }
        Ok(keys)
    }

    /// Every scored variant's scores of case `c`'s special rows in `chunk`
    /// (or, for a cache-fault variant, of the whole chunk with them in).
    fn case_patches(
        &self,
        source: &TrialRows,
        c: usize,
        chunk: &ChunkSpecials,
        scales: &[Option<f32>],
        quantized: &mut QuantizedRows,
        patches: &mut Vec<Patch>,
    ) -> Result<(), SimError> {
        let pres = &chunk.cases[c];
        if pres.is_empty() {
            return Ok(());
        }
        let d = self.spec.model.shape.head_dim;
        let (n, start) = (chunk.n, chunk.start);
        // The special rows' keys per needle slot (its scale).
        let keys_of_slot: Vec<[Vec<f32>; 2]> =
            scales.iter().map(|&scale| self.special_keys(source, c, chunk, scale)).collect::<Result<_, _>>()?;
        let case = &self.cases[c];
        let mut scores = vec![0.0f32; n.max(pres.len())];
        let first = patches.len();
        for (v, variant) in self.variants.iter().enumerate() {
            if self.patch_twins[v].is_some() {
                continue;
            }
            let keys = &keys_of_slot[self.needle_slots[v]];
            let layout = self.layout_of(variant);
            let q = &self.queries[self.spec.query_group(case.ci)][v];
            if variant.cache.is_default() {
                // Each row's stored key depends on that row alone:
                // store and score just the rows that changed.
                variant.store_keys(&keys[layout], start, self.request, d, quantized)?;
                q.score_quantized_rows(quantized, &mut scores[..pres.len()]);
                for (pre, &score) in pres.iter().zip(scores.iter()) {
                    patches.push(Patch { case: c, variant: v, row: pre.row as u32, score });
                }
            } else {
                // Pages and neighbours matter: store the whole chunk with the special rows in.
                let mut patched = chunk.fin[layout].clone();
                for (j, pre) in pres.iter().enumerate() {
                    let at = (pre.row - start) as usize * d;
                    patched[at..at + d].copy_from_slice(&keys[layout][j * d..(j + 1) * d]);
                }
                variant.store_keys(&patched, start, self.request, d, quantized)?;
                q.score_quantized_rows(quantized, &mut scores[..n]);
                patches.extend((0..n).map(|r| Patch { case: c, variant: v, row: (start as usize + r) as u32, score: scores[r] }));
            }
        }
        for (v, u) in self.patch_twins.iter().enumerate().filter_map(|(v, u)| u.map(|u| (v, u))) {
            let copies: Vec<Patch> = patches[first..].iter().filter(|p| p.variant == u).map(|p| Patch { variant: v, ..*p }).collect();
            patches.extend(copies);
        }
        Ok(())
    }

    /// The exact scores of case `c`'s special rows in `chunks` with the
    /// needle's offset at `scale`, as `exact` with query `q` scores them:
    /// (row, score), needle rows only when `needle_rows`, else the others.
    #[allow(clippy::too_many_arguments)]
    fn special_exact(
        &self,
        source: &TrialRows,
        c: usize,
        chunks: &[&ChunkSpecials],
        (exact, q): (&PrecisionVariant, &IndexerQuery),
        scale: f32,
        needle_rows: bool,
        quantized: &mut QuantizedRows,
    ) -> Result<Vec<(u64, f32)>, SimError> {
        let d = self.spec.model.shape.head_dim;
        let case = &self.cases[c];
        let mut out = Vec::new();
        let mut key = vec![0.0f32; d];
        let mut score = [0.0f32];
        for chunk in chunks {
            for pre in chunk.cases[c].iter().filter(|p| case.placement.rows.contains(&p.row) == needle_rows) {
                scaled_key(&pre.bare, &pre.full, scale, &mut key);
                source.finalize_with(pre.row, &mut key, false)?;
                exact.store_keys(&key, chunk.start, self.request, d, quantized)?;
                q.score_quantized_rows(quantized, &mut score);
                out.push((pre.row, score[0]));
            }
        }
        Ok(out)
    }
}

thread_local! {
    /// Set by [`with_full_reference`]: score the quantile needle's exact
    /// reference over every row instead of screening (tests compare both).
    static FULL_REFERENCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the quantile needle's exact reference scored over every
/// row on this thread, never screened (for tests of the screen).
pub fn with_full_reference<T>(f: impl FnOnce() -> T) -> T {
    FULL_REFERENCE.with(|c| c.set(true));
    let out = f();
    FULL_REFERENCE.with(|c| c.set(false));
    out
}

/// Where the quantile needle's exact (fp32) scores come from.
enum Exact<'a> {
    /// Scored over every row like a variant: its index among the scored ones.
    Scored(usize),
    /// Screened by a variant whose scores are provably close to exact.
    Screened(Box<Screen<'a>>),
}

/// The screened exact reference: a variant v whose score of a row with key
/// k is within `factors[g]·‖k‖` of the exact one (plain bf16 or fp32 casts
/// of q and k, fp32 weights and logits: [`PrecisionVariant::rounding_bound`]
/// and [`IndexerQuery::bound_factor`]). Only rows whose v-score, widened by
/// that bound, can reach the needle's neighbourhood are regenerated and
/// scored exactly; each such row checks the bound, and a row outside it
/// makes the case score every row exactly.
struct Screen<'a> {
    variant: usize,
    factors: Vec<f64>,
    /// ‖k‖ of every row (the trial's longest context).
    norms: Vec<f32>,
    /// A copy of the trial's row source: rows regenerate alone when chunks are independent.
    source: TrialRows<'a>,
    /// Finalized keys regenerated so far.
    keys: std::collections::HashMap<u64, Vec<f32>>,
}

impl Screen<'_> {
    /// Row `row`'s exact score under the exact query `q`.
    fn exact(&mut self, q: &IndexerQuery, row: u64, d: usize) -> Result<f32, SimError> {
        if !self.keys.contains_key(&row) {
            let mut key = vec![0.0f32; d];
            self.source.next_chunk(row, &mut key)?;
            self.source.finalize_with(row, &mut key, false)?;
            self.keys.insert(row, key);
        }
        let mut score = [0.0f32];
        q.score_rows(&self.keys[&row], &mut score);
        Ok(score[0])
    }

    /// The bound on |v-score − exact score| of `row` under group `g`.
    fn bound(&self, g: usize, row: u64) -> f64 {
        self.factors[g] * f64::from(self.norms[row as usize]) + 1e-30
    }
}

/// Places the quantile needle in each case of a trial.
struct Placer<'p, 'w, 'a> {
    work: &'p ChunkWork<'w, 'a>,
    exact: Exact<'a>,
    /// The exact variant and its query per group, when screened (else the
    /// scored reference's own).
    fp32: &'p PrecisionVariant,
    exact_queries: &'p [IndexerQuery],
    /// [group][scored variant][row]
    scores: &'p [Vec<Vec<f32>>],
    source: &'p TrialRows<'a>,
    quantized: &'p mut QuantizedRows,
}

impl Placer<'_, '_, '_> {
    /// Case `c`: its rank drawn, its scale solved, and where it then ranks.
    fn place(&mut self, c: usize, chunk_specials: &[ChunkSpecials], draw: &NeedleDraw) -> Result<NeedleSolve, SimError> {
        let spec = self.work.spec;
        let d = spec.model.shape.head_dim;
        let case = &self.work.cases[c];
        let g = spec.query_group(case.ci);
        let sinks = spec.model.structure.sink_span();
        let population: Vec<u64> =
            (0..case.candidates as u64).filter(|r| case.special.binary_search(r).is_err() && !sinks.contains(r)).collect();
        let hay_rows = population.len() as u64;
        let target_rank = rank_quantile(hay_rows, exceedance_of(draw.log10_exceedance), draw.rank_uniform);
        let chunks: Vec<&ChunkSpecials> = chunk_specials.iter().filter(|ch| !ch.cases[c].is_empty()).collect();
        let has_needle_row = chunks.iter().any(|ch| ch.cases[c].iter().any(|p| case.placement.rows.contains(&p.row)));
        let unplaced = NeedleSolve { scale: 1.0, hay_rows, target_rank, hay_above: 0, fixed_above: 0, capped: false };
        if !has_needle_row {
            return Ok(unplaced);
        }
        // Exact scores of the haystack rows that decide the target: every
        // row, or (screened) those that can reach it.
        let mut known: Vec<(u64, f32)> = match &mut self.exact {
            Exact::Scored(r) => {
                let exact = &self.scores[g][*r];
                population.iter().map(|&row| (row, exact[row as usize])).collect()
            }
            Exact::Screened(screen) => {
                let v = &self.scores[g][screen.variant];
                let mut lower: Vec<f64> = population.iter().map(|&row| f64::from(v[row as usize]) - screen.bound(g, row)).collect();
                let m = target_rank as usize;
                let floor = if m < lower.len() { *lower.select_nth_unstable_by(m, |a, b| b.total_cmp(a)).1 } else { f64::NEG_INFINITY };
                screened(screen, &self.exact_queries[g], g, &population, v, floor, d)?
            }
        };
        let mut values: Vec<f32> = known.iter().map(|&(_, s)| s).collect();
        let (lo, hi, target) = target_interval(&mut values, target_rank);
        let work = self.work;
        let source = self.source;
        let (exact_variant, exact_query) = match &self.exact {
            Exact::Scored(r) => (&work.variants[*r], &work.queries[g][*r]),
            Exact::Screened(_) => (self.fp32, &self.exact_queries[g]),
        };
        let quantized = &mut *self.quantized;
        let mut score_at = |s: f64| -> Result<f32, SimError> {
            let rows = work.special_exact(source, c, &chunks, (exact_variant, exact_query), s as f32, true, quantized)?;
            Ok(rows.iter().map(|&(_, x)| x).fold(f32::NEG_INFINITY, f32::max))
        };
        let (scale, capped) = solve_scale(lo, hi, target, &mut score_at)?;
        let scale = scale as f32;
        let best = score_at(f64::from(scale))?;
        // Where it ranks: haystack rows above it (the drawn rank unless the
        // norm capped it), then the other competitors.
        if let Exact::Screened(screen) = &mut self.exact {
            let v = &self.scores[g][screen.variant];
            // Below the screen's floor (capped), more rows may beat it.
            known = screened(screen, exact_query, g, &population, v, f64::from(best), d)?;
        }
        let hay_above = known.iter().filter(|&&(_, x)| x > best).count() as u64;
        let others = self.work.special_exact(source, c, &chunks, (exact_variant, exact_query), scale, false, &mut *self.quantized)?;
        let mut fixed_above = others.iter().filter(|&&(_, x)| x > best).count() as u64;
        for row in sinks.clone().filter(|&r| r < case.candidates as u64 && case.special.binary_search(&r).is_err()) {
            let x = match &mut self.exact {
                Exact::Scored(r) => self.scores[g][*r][row as usize],
                Exact::Screened(screen) => screen.exact(exact_query, row, d)?,
            };
            fixed_above += u64::from(x > best);
        }
        Ok(NeedleSolve { scale, hay_above, fixed_above, capped, ..unplaced })
    }
}

/// The exact scores of the rows of `population` whose v-score `v`, plus
/// its bound, reaches `floor` (every row whose exact score can); every one
/// checks the bound, and a row outside it (never seen) makes the whole
/// population scored exactly instead.
fn screened(
    screen: &mut Screen<'_>,
    q: &IndexerQuery,
    g: usize,
    population: &[u64],
    v: &[f32],
    floor: f64,
    d: usize,
) -> Result<Vec<(u64, f32)>, SimError> {
    let mut out = Vec::new();
    for &row in population {
        let (score, bound) = (f64::from(v[row as usize]), screen.bound(g, row));
        if score + bound < floor {
            continue;
        }
        let exact = screen.exact(q, row, d)?;
        if (f64::from(exact) - score).abs() > bound {
            return population.iter().map(|&r| Ok((r, screen.exact(q, r, d)?))).collect();
        }
        out.push((row, exact));
    }
    Ok(out)
}

/// The index in `pieces` of each (group, variant) piece, at `group ×
/// variants + variant` (None where the chunk has none).
fn piece_index(pieces: &[ScorePiece], variants: usize) -> Vec<Option<usize>> {
    let groups = pieces.iter().map(|p| p.group + 1).max().unwrap_or(0);
    let mut at = vec![None; groups * variants];
    for (i, p) in pieces.iter().enumerate() {
        at[p.group * variants + p.variant] = Some(i);
    }
    at
}

/// Per variant, its scores (first `candidates`) moved to the lower edges
/// of its selector's bins when it has a coarse selector, else None.
fn scored_selection_copies(scores: &[Vec<f32>], variants: &[PrecisionVariant], candidates: usize) -> Vec<Option<Vec<f32>>> {
    variants
        .iter()
        .zip(scores)
        .map(|(v, s)| {
            v.selection.coarse_bits.map(|b| s[..candidates].iter().map(|&x| crate::score::selection::coarse_score(x, b)).collect())
        })
        .collect()
}

/// [`TrialSpec::score_twins`] of any list of variants.
fn score_twins_of(v: &[PrecisionVariant]) -> Vec<Option<usize>> {
    let same = |a: &PrecisionVariant, b: &PrecisionVariant| {
        (&a.query, &a.key, &a.scoring, &a.cache, &a.position) == (&b.query, &b.key, &b.scoring, &b.cache, &b.position)
    };
    (0..v.len()).map(|i| (0..i).find(|&j| same(&v[i], &v[j]))).collect()
}

/// Every variant's query for a context of `context` tokens: rotated to the
/// decode position `context − 1` when RoPE is on (with the variant's pair
/// layout), then quantized.
pub fn context_queries(
    hay: &TrialHaystack,
    source: &TrialRows<'_>,
    variants: &[PrecisionVariant],
    context: u64,
) -> Result<Vec<IndexerQuery>, SimError> {
    shifted_context_queries(hay, None, source, variants, context)
}

/// [`context_queries`], with `shifted` the other query (and head weights)
/// that `row-shift` variants select by; such a variant without one is an
/// error.
pub fn shifted_context_queries(
    hay: &TrialHaystack,
    shifted: Option<&TrialHaystack>,
    source: &TrialRows<'_>,
    variants: &[PrecisionVariant],
    context: u64,
) -> Result<Vec<IndexerQuery>, SimError> {
    let d = hay.shape.head_dim;
    variants
        .iter()
        .map(|v| {
            let own = if v.position.query_row_shifted {
                shifted
                    .ok_or_else(|| SimError::Hypothesis(format!("{}: row-shift needs another query; this estimator has none", v.name)))?
            } else {
                hay
            };
            let mut q = own.queries.clone();
            source.rotate_queries(&mut q, context.saturating_sub(1), v.position.query_rope_layout_swapped)?;
            Ok(IndexerQuery::new(v.query.quantize_rows(&q, d)?, &own.weights, d, v.scoring))
        })
        .collect()
}

/// The other query a `row-shift` variant selects by: a fresh draw of the
/// model's query and head weights from the trial's seed (its own stream),
/// None when no variant shifts.
pub fn shifted_query(model: &GenerativeModel, trial_seed: u64, variants: &[PrecisionVariant]) -> Result<Option<TrialHaystack>, SimError> {
    if !variants.iter().any(|v| v.position.query_row_shifted) {
        return Ok(None);
    }
    let seed = rng::derive(trial_seed, &[tag::ROW_SHIFT]);
    TrialHaystack::draw(model, seed).map(Some)
}

/// The position of `multiple` among `multiples` (0 when absent: the
/// exact reference a trial adds has multiple 1).
fn slot_of(multiples: &[f64], multiple: f64) -> usize {
    multiples.iter().position(|&m| m == multiple).unwrap_or(0)
}

impl TrialSpec<'_> {
    /// The variants' needle multiples (`needle=M`), each once, in order of
    /// first appearance: `[1.0]` when none has one.
    pub fn needle_multiples(&self) -> Vec<f64> {
        let mut out: Vec<f64> = Vec::new();
        for v in self.variants {
            if !out.contains(&v.needle_multiple) {
                out.push(v.needle_multiple);
            }
        }
        if out.is_empty() {
            out.push(1.0);
        }
        out
    }

    /// Index in [`TrialOutcome::needle`] of the placement that needle slot
    /// `slot` ([`Self::needle_slots`]) reads in (context, needle spot):
    /// slot-major, then context-major cases.
    pub fn needle_index(&self, slot: usize, context: usize, spot: usize) -> usize {
        (slot * self.contexts.len() + context) * self.spot_count() + spot
    }

    /// Per variant, the position of its needle multiple in
    /// [`Self::needle_multiples`] (computed once per spec by its readers).
    pub fn needle_slots(&self) -> Vec<usize> {
        let multiples = self.needle_multiples();
        self.variants.iter().map(|v| slot_of(&multiples, v.needle_multiple)).collect()
    }

    /// Index of (context, needle spot, topk, variant) in [`TrialOutcome::cells`].
    pub fn cell_index(&self, context: usize, spot: usize, topk: usize, variant: usize) -> usize {
        ((context * self.spot_count() + spot) * self.topks.len() + topk) * self.variants.len() + variant
    }

    /// Needle spots: (depth, offset) pairs, depth-major.
    pub fn spot_count(&self) -> usize {
        self.depths.len() * self.needle_offsets.len()
    }

    /// Spot `spot`'s (depth in percent, needle offset).
    pub fn spot(&self, spot: usize) -> (f64, Option<u64>) {
        let n = self.needle_offsets.len().max(1);
        (self.depths[spot / n], self.needle_offsets[spot % n])
    }

    /// The depth whose value seeds the trials: the first (the group's own
    /// in a sweep).
    pub fn seed_depth(&self) -> f64 {
        self.depths.first().copied().unwrap_or(0.0)
    }

    /// Per variant, the first earlier variant that scores every row the
    /// same way (same query and key pipelines, scoring, cache and RoPE
    /// layout; only the selection differs, e.g. `fp8+ties-lowest` beside
    /// `fp8`): its scores are copied instead of computed again.
    pub fn score_twins(&self) -> Vec<Option<usize>> {
        score_twins_of(self.variants)
    }

    pub fn cell_count(&self) -> usize {
        self.contexts.len() * self.spot_count() * self.topks.len() * self.variants.len()
    }

    /// Whether every row is the null model's (no physics at this ratio) and
    /// the needle sits where its one depth puts it: what the closed-form
    /// estimators assume.
    pub fn is_null_model(&self) -> bool {
        self.physics.is_null(self.geometry.ratio)
            && self.model.structure.is_null()
            && self.needle_offsets == [None]
            && self.depths.len() == 1
    }

    /// Which query scores context `ci`: with RoPE the query sits at position
    /// L−1 of each context, so each context has its own; otherwise one
    /// query serves all.
    fn query_group(&self, ci: usize) -> usize {
        if self.physics.rope != RopeChoice::Off {
            ci
        } else {
            0
        }
    }

    /// Where the needle sits in context `context` at spot `spot`.
    pub fn placement(&self, context: u64, spot: usize) -> NeedlePlacement {
        let (depth, offset) = self.spot(spot);
        self.geometry.place_needle_at(context, self.needle_tokens, depth, offset)
    }

    /// Index of the variant `run` scores as the exact reference for the
    /// quantile needle: the spec's first exact variant, else one past the
    /// spec's variants (an `fp32` added for the purpose).
    fn reference_variant(&self) -> usize {
        self.variants.iter().position(PrecisionVariant::is_exact).unwrap_or(self.variants.len())
    }

    /// Runs the trial seeded by `trial_seed`.
    pub fn run(&self, trial_seed: u64) -> Result<TrialOutcome, SimError> {
        self.run_with_needle(trial_seed, None)
    }

    /// [`Self::run`] with the quantile needle's draws given instead of drawn
    /// from the trial seed (to simulate another layer or query token of the
    /// same prompt in full; ignored under the strength unit).
    pub fn run_with_needle(&self, trial_seed: u64, draw: Option<NeedleDraw>) -> Result<TrialOutcome, SimError> {
        let haystack = TrialHaystack::draw(self.model, trial_seed)?;
        let mut source = TrialRows::new(self.model, self.physics, self.geometry, &haystack, trial_seed)?;
        let quantile = self.model.needle_unit.quantile().copied();
        let ScoredSet { variants: scored, reference, screen } = self.scored_set(quantile.is_some(), &source)?;
        let scored = &scored[..];

        let shifted = shifted_query(self.model, trial_seed, scored)?;
        let QueryGroups { queries, key_layouts, rows: group_rows } = self.query_groups(&haystack, shifted.as_ref(), &source, scored)?;
        let groups = queries.len();
        let max_rows = group_rows.iter().copied().max().unwrap_or(0);
        let mut cases = self.cases(&source, scored.len());

        // Score every row once per (query group, variant), chunk by chunk;
        // rows that hold needle or distractor tokens are keyed per case
        // afterwards, once the needle's scale is known.
        let mut scores: Vec<Vec<Vec<f32>>> = group_rows.iter().map(|&n| vec![vec![0.0; n]; scored.len()]).collect();
        let twins = score_twins_of(scored);
        let multiples = self.needle_multiples();
        let needle_slots: Vec<usize> = scored.iter().map(|v| slot_of(&multiples, v.needle_multiple)).collect();
        let patch_twins: Vec<Option<usize>> =
            twins.iter().enumerate().map(|(v, t)| t.filter(|&u| needle_slots[u] == needle_slots[v])).collect();
        let keep_fin = scored.iter().zip(&patch_twins).any(|(v, t)| t.is_none() && !v.cache.is_default());
        let work = ChunkWork {
            spec: self,
            request: trial_seed,
            variants: scored,
            key_layouts,
            queries: &queries,
            cases: &cases,
            twins,
            patch_twins,
            needle_slots,
            keep_bare: quantile.is_some(),
            keep_fin,
            keep_norms: screen.is_some(),
        };
        let chunk_specials = work.score_all(&mut source, &mut scores, max_rows)?;
        let norms: Vec<f32> = chunk_specials.iter().flat_map(|c| c.norms.iter().copied()).collect();
        // Only chunks that hold special rows matter from here on.
        let chunk_specials: Vec<ChunkSpecials> = chunk_specials.into_iter().filter(|c| c.cases.iter().any(|p| !p.is_empty())).collect();

        // The needle's scale per case: 1 under the strength unit, solved to
        // the drawn exceedance under the quantile unit.
        let mut quantized = QuantizedRows::with_capacity(CHUNK_ROWS, self.model.shape.head_dim);
        let mut needle = Vec::new();
        if let Some(q) = quantile {
            let draw = draw.unwrap_or_else(|| q.draw(trial_seed));
            let exact_variant = PrecisionVariant::builtin("fp32").ok_or_else(|| SimError::Model("the fp32 variant is missing".into()))?;
            let mut exact_queries: Vec<IndexerQuery> = Vec::new();
            let exact = match screen {
                None => Exact::Scored(reference),
                Some((variant, rounding)) => {
                    for &context in &self.contexts[..groups] {
                        exact_queries.extend(context_queries(&haystack, &source, std::slice::from_ref(&exact_variant), context)?);
                    }
                    let factors = exact_queries.iter().map(|q| rounding * q.bound_factor()).collect();
                    Exact::Screened(Box::new(Screen { variant, factors, norms, source: source.clone(), keys: Default::default() }))
                }
            };
            let mut placer = Placer {
                work: &work,
                exact,
                fp32: &exact_variant,
                exact_queries: &exact_queries,
                scores: &scores,
                source: &source,
                quantized: &mut quantized,
            };
            // One placement per needle multiple (slot-major): the same draws,
            // the median exceedance scaled.
            for &m in &multiples {
                let q_m = q.scaled(m);
                let draw = if m == 1.0 {
                    draw
                } else {
                    NeedleDraw { log10_exceedance: q_m.log10_exceedance(draw.prompt, draw.layer, draw.token), ..draw }
                };
                for c in 0..cases.len() {
                    needle.push(placer.place(c, &chunk_specials, &draw)?);
                }
            }
        }

        // Each case's special rows, keyed at each slot's scale, scored by every variant.
        let mut patches = Vec::new();
        for chunk in &chunk_specials {
            for c in 0..cases.len() {
                let scales: Vec<Option<f32>> = (0..multiples.len()).map(|s| needle.get(s * cases.len() + c).map(|n| n.scale)).collect();
                work.case_patches(&source, c, chunk, &scales, &mut quantized, &mut patches)?;
            }
        }
        for patch in patches {
            cases[patch.case].patches[patch.variant].push((patch.row, patch.score));
        }
        let mut cells = self.judge_cases(&cases, &mut scores, max_rows, trial_seed);
        self.gate_by_length(&mut cells)?;
        Ok(TrialOutcome { cells, seed: trial_seed, needle })
    }

    /// A variant whose faults act only in longer prompts (`longer-than=T`)
    /// takes its base variant's outcomes in every context of at most T
    /// tokens: there it is the base, on the same haystacks.
    fn gate_by_length(&self, cells: &mut [NeedleOutcome]) -> Result<(), SimError> {
        for (v, variant) in self.variants.iter().enumerate().filter(|(_, x)| x.longer_than > 0) {
            let base = variant.base_name();
            let b = self.variants.iter().position(|x| x.name == base).ok_or_else(|| {
                SimError::Model(format!("{} acts only in longer prompts: its base {base} must be scored beside it", variant.name))
            })?;
            for ci in (0..self.contexts.len()).filter(|&ci| self.contexts[ci] <= variant.longer_than) {
                for si in 0..self.spot_count() {
                    for ki in 0..self.topks.len() {
                        cells[self.cell_index(ci, si, ki, v)] = cells[self.cell_index(ci, si, ki, b)];
                    }
                }
            }
        }
        Ok(())
    }

    /// The trial's query groups: one per context with RoPE (see
    /// `query_group`), else one for all.
    fn query_groups(
        &self,
        haystack: &TrialHaystack,
        shifted: Option<&TrialHaystack>,
        source: &TrialRows,
        scored: &[PrecisionVariant],
    ) -> Result<QueryGroups, SimError> {
        let positional = self.physics.rope != RopeChoice::Off;
        let groups = if positional { self.contexts.len() } else { 1 };
        let queries: Vec<Vec<IndexerQuery>> =
            (0..groups).map(|g| shifted_context_queries(haystack, shifted, source, scored, self.contexts[g])).collect::<Result<_, _>>()?;
        // Keys rotated with the other pair layout, for `rope-swap-k` variants.
        let key_layouts = if positional && scored.iter().any(|v| v.position.key_rope_layout_swapped) { 2 } else { 1 };
        let candidates_of = |ci: usize| self.geometry.candidate_rows(self.contexts[ci]) as usize;
        let rows: Vec<usize> = (0..groups)
            .map(|g| if positional { candidates_of(g) } else { (0..self.contexts.len()).map(candidates_of).max().unwrap_or(0) })
            .collect();
        Ok(QueryGroups { queries, key_layouts, rows })
    }

    /// The variants a trial scores: the spec's, and an fp32 after them
    /// when the quantile needle needs exact scores and neither an exact
    /// variant nor a screening one is there.
    fn scored_set(&self, quantile: bool, source: &TrialRows) -> Result<ScoredSet, SimError> {
        // The quantile needle is placed by exact scores: score an fp32 beside
        // the spec's variants when none of them is exact.
        let reference = self.reference_variant();
        // Without an exact variant, a bf16-like one screens the rows when rows
        // can be regenerated alone; else an fp32 is scored beside the rest.
        let screen = if quantile && reference == self.variants.len() && source.chunks_are_independent() && !FULL_REFERENCE.with(|f| f.get())
        {
            self.variants.iter().enumerate().find_map(|(i, v)| v.rounding_bound().map(|e| (i, e)))
        } else {
            None
        };
        let mut variants: Vec<PrecisionVariant> = self.variants.to_vec();
        if quantile && reference == self.variants.len() && screen.is_none() {
            variants.push(PrecisionVariant::builtin("fp32").ok_or_else(|| SimError::Model("the fp32 variant is missing".into()))?);
        }
        Ok(ScoredSet { variants, reference, screen })
    }

    /// One case per (context, needle spot), context-major, with its
    /// placement, items and special rows.
    fn cases(&self, source: &TrialRows, scored: usize) -> Vec<Case> {
        let mut cases: Vec<Case> = Vec::with_capacity(self.contexts.len() * self.spot_count());
        for ci in 0..self.contexts.len() {
            for si in 0..self.spot_count() {
                let placement = self.placement(self.contexts[ci], si);
                let candidates = self.geometry.candidate_rows(self.contexts[ci]) as usize;
                let items = source.items(self.contexts[ci], placement.tokens.clone());
                let special = source.special_rows(&items, candidates as u64);
                cases.push(Case { ci, si, placement, candidates, items, special, patches: vec![Vec::new(); scored] });
            }
        }
        cases
    }

    /// Every cell of the trial: each case's scores (the shared ones with
    /// its patches written in place, put back after the case) judged per
    /// variant, top-k and, with a fidelity reference, against it.
    fn judge_cases(&self, cases: &[Case], scores: &mut [Vec<Vec<f32>>], max_rows: usize, trial_seed: u64) -> Vec<NeedleOutcome> {
        let mut cells = vec![NeedleOutcome::LOST; self.cell_count()];
        let mut bufs = JudgeBuffers { scratch: Vec::with_capacity(max_rows), kth: Vec::new(), row_order: Vec::new() };
        let priority = |row: usize| rng::derive(trial_seed, &[tag::TIE, row as u64]);
        // Fidelity compares whole top-k sets, so it needs every row's place in
        // the tie order, and each variant's scores with the needle rows in.
        let tie_keys: Vec<u64> = match self.fidelity_reference {
            Some(_) if self.variants.len() > 1 => (0..max_rows).map(|i| tie_key(self.tie_rule, i, priority)).collect(),
            _ => Vec::new(),
        };
        // The originals of the patched scores, put back after the case.
        let mut saved: Vec<(usize, usize, f32)> = Vec::new();
        for case in cases {
            let candidates = case.candidates;
            let g = self.query_group(case.ci);
            saved.clear();
            for (v, patches) in case.patches.iter().enumerate() {
                let shared = &mut scores[g][v];
                for &(row, score) in patches.iter().filter(|&&(row, _)| (row as usize) < candidates) {
                    let row = row as usize;
                    saved.push((v, row, shared[row]));
                    shared[row] = score;
                }
            }
            // A coarse selector (`tie-truncate=B`) compares bins, not scores.
            let coarse: Vec<Option<Vec<f32>>> = scored_selection_copies(&scores[g], self.variants, candidates);
            let assembled: Vec<&[f32]> =
                scores[g].iter().enumerate().map(|(v, s)| coarse.get(v).and_then(Option::as_deref).unwrap_or(&s[..candidates])).collect();
            for (v, visible) in assembled.iter().enumerate().take(self.variants.len()) {
                self.judge_variant(case, v, visible, trial_seed, &mut bufs, &mut cells);
            }
            if let Some(r) = self.fidelity_reference.filter(|_| !tie_keys.is_empty()) {
                self.judge_fidelity(case, r, &assembled, &tie_keys[..candidates], &mut bufs.row_order, &mut cells);
            }
            drop(assembled);
            for &(v, row, old) in saved.iter().rev() {
                scores[g][v][row] = old;
            }
        }
        cells
    }

    /// The cells of variant `v` in `case`, from its scores `visible` (rows
    /// 0..candidates, with the case's patches in).
    fn judge_variant(&self, case: &Case, v: usize, visible: &[f32], trial_seed: u64, bufs: &mut JudgeBuffers, cells: &mut [NeedleOutcome]) {
        let (ci, si) = (case.ci, case.si);
        let placement = &case.placement;
        // A chunk fault hides the rows before the query's prefill chunk:
        // the candidates are rows `first …` of `visible`, renumbered from 0
        // (tie priorities keep each row's own number).
        let first = self.first_candidate_row(v, ci).min(case.candidates);
        let visible = &visible[first..];
        let candidates = case.candidates - first;
        let clip = |r: u64| (r as usize).clamp(first, case.candidates) - first;
        let skip = clip(placement.rows.start)..clip(placement.rows.end).max(clip(placement.rows.start));
        let priority = |row: usize| rng::derive(trial_seed, &[tag::TIE, (row + first) as u64]);
        // What this variant's engine selects with (hypotheses may change it).
        let sel = &self.variants[v].selection;
        let nan = sel.nan_order;
        let rule = sel.tie_rule_for(self.tie_rule);
        let window = sel.window_for(self.geometry.window);
        let in_window = placement.tokens.start >= self.contexts[ci].saturating_sub(window);
        let k_effs: Vec<usize> = self.topks.iter().map(|&k| (sel.topk_for(k) as usize).min(candidates)).collect();
        // The tie audit re-picks each cut under every tie rule (docs/MODEL.md, "Tie audit").
        let cuts: Option<Vec<TieCut>> = self
            .tie_audit
            .then(|| TieAudit::new(visible, skip.clone(), nan, priority).cuts(&k_effs, in_window, &mut bufs.scratch, &mut bufs.kth));
        let audit_cut = |ki: usize| cuts.as_ref().map(|c| c[ki]);
        // Best needle row: highest score in the engine's order, first on ties.
        let Some((best, t)) = best_needle(visible, skip.clone(), nan) else {
            for ki in 0..self.topks.len() {
                let ties = audit_cut(ki);
                cells[self.cell_index(ci, si, ki, v)] =
                    NeedleOutcome { survived: in_window, via_window: in_window, ties, ..NeedleOutcome::LOST };
            }
            return;
        };
        // Tied competitors the tie rule puts ahead of the best needle row.
        let tied = tied_ahead_of_best(visible, skip.clone(), best, &t, rule, priority);

        let competitors = candidates - skip.len();
        let ks_with_margin: Vec<usize> = k_effs.iter().copied().filter(|&k| k >= 1 && k <= competitors).collect();
        let JudgeBuffers { scratch, kth, .. } = bufs;
        if !ks_with_margin.is_empty() {
            scratch.clear();
            scratch.extend_from_slice(&visible[..skip.start]);
            scratch.extend_from_slice(&visible[skip.end..]);
            kth_largest_many_with(scratch, &ks_with_margin, kth, nan);
        }
        for (ki, &k_eff) in k_effs.iter().enumerate() {
            let by_rank = (t.rank.above + tied) < k_eff as u64;
            let margin = ks_with_margin.iter().position(|&k| k == k_eff).map(|p| best - kth[p]);
            let margin_sd = margin.filter(|_| t.std > 0.0).map(|m| f64::from(m) / t.std);
            cells[self.cell_index(ci, si, ki, v)] = NeedleOutcome {
                survived: in_window || by_rank,
                via_window: in_window,
                rank: Some(t.rank),
                margin,
                margin_sd,
                ties: audit_cut(ki),
                ..NeedleOutcome::LOST
            };
        }
    }

    /// The first row variant `v`'s query sees in context `ci` (0 unless a
    /// chunk fault hides earlier rows).
    fn first_candidate_row(&self, v: usize, ci: usize) -> usize {
        self.hidden_rows(&self.variants[v], self.contexts[ci]) as usize
    }

    /// Rows a chunk fault of `variant` hides from the query in a context
    /// of `context` tokens: those before its prefill chunk (0 without one).
    pub fn hidden_rows(&self, variant: &PrecisionVariant, context: u64) -> u64 {
        match variant.chunk {
            ChunkVisibility::All => 0,
            ChunkVisibility::OwnChunk => self.geometry.chunk_first_row(context, self.prefill_chunk),
        }
    }

    /// Selection fidelity of every variant against the reference `r` in
    /// `case`: the share of r's top-k_eff rows each also selects, and the
    /// Jaccard overlap.
    fn judge_fidelity(
        &self,
        case: &Case,
        r: usize,
        assembled: &[&[f32]],
        tie_keys: &[u64],
        row_order: &mut Vec<u32>,
        cells: &mut [NeedleOutcome],
    ) {
        let k_effs: Vec<usize> = self.topks.iter().map(|&k| (k as usize).min(case.candidates)).collect();
        // A variant with hidden rows selects from fewer rows than the
        // reference: its fidelity is left out (None), not compared.
        for v in (0..self.variants.len()).filter(|&v| v != r && self.variants[v].chunk.is_all()) {
            for (ki, &k_eff) in k_effs.iter().enumerate().filter(|(_, &k)| k > 0) {
                let (nan_r, nan_v) = (self.variants[r].selection.nan_order, self.variants[v].selection.nan_order);
                let both = selection_overlap_with(assembled[r], assembled[v], tie_keys, k_eff, row_order, nan_r, nan_v);
                let cell = &mut cells[self.cell_index(case.ci, case.si, ki, v)];
                cell.selection_recall = Some(both as f64 / k_eff as f64);
                cell.jaccard = Some(both as f64 / (2 * k_eff as u64 - both) as f64);
            }
        }
    }
}

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
use crate::model::physics::{Physics, RopeChoice};
use crate::model::row_source::{Item, TrialRows};
use crate::model::stack::WholeModel;
use crate::numerics::pipeline::QuantizedRows;
use crate::score::indexer::IndexerQuery;
use crate::score::selection::{kth_largest_many_with, selection_overlap_with, tally_with, tie_key, tied_ahead, NeedleRank, TieRule};
use crate::score::variant::PrecisionVariant;
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
    pub depth_percent: f64,
    /// Needle offsets inside a row stride (None: wherever the depth puts it).
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
    };
}

/// Outcomes of one trial, indexed by [`TrialSpec::cell_index`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialOutcome {
    pub cells: Vec<NeedleOutcome>,
    /// The trial's seed (whole-model recall draws its chains from it).
    pub seed: u64,
}

/// One (context, needle offset) pair of a trial: where the needle and the
/// distractors sit, and the scores of the rows that hold them.
struct Case {
    ci: usize,
    oi: usize,
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

/// What scoring a chunk reads: the trial's queries and cases.
struct ChunkWork<'w, 'a> {
    spec: &'w TrialSpec<'a>,
    /// 2 when some variant reads keys rotated with the swapped RoPE layout.
    key_layouts: usize,
    /// [query group][variant].
    queries: &'w [Vec<IndexerQuery>],
    cases: &'w [Case],
    /// Per variant: an earlier variant whose scores it shares (see [`TrialSpec::score_twins`]).
    twins: Vec<Option<usize>>,
}

/// Buffers of the chunk loop, one set per thread.
struct ChunkScratch {
    /// The chunk's rows; finalized in place (layout 0).
    pre: Vec<f32>,
    /// The same rows finalized with the swapped RoPE layout (layout 1).
    swapped_fin: Vec<f32>,
    special_pre: Vec<f32>,
    /// Per case and key layout: its special rows in this chunk, finalized.
    special_keys: Vec<[Vec<f32>; 2]>,
    /// Per case: which of its special rows lie in this chunk.
    in_chunk: Vec<std::ops::Range<usize>>,
    /// A chunk with a case's special rows in (variants with cache faults).
    patched: Vec<f32>,
    chunk_scores: Vec<f32>,
    quantized: QuantizedRows,
}

impl ChunkScratch {
    fn new(work: &ChunkWork) -> Self {
        let d = work.spec.model.shape.head_dim;
        ChunkScratch {
            pre: vec![0.0; CHUNK_ROWS * d],
            swapped_fin: if work.key_layouts == 2 { vec![0.0; CHUNK_ROWS * d] } else { Vec::new() },
            special_pre: vec![0.0; d],
            special_keys: vec![[Vec::new(), Vec::new()]; work.cases.len()],
            in_chunk: vec![0..0; work.cases.len()],
            patched: Vec::new(),
            chunk_scores: vec![0.0; CHUNK_ROWS],
            quantized: QuantizedRows::with_capacity(CHUNK_ROWS, d),
        }
    }
}

impl ChunkWork<'_, '_> {
    /// Generates, finalizes, stores and scores the chunk of rows from
    /// `start` into `pieces`; returns the scores of the cases' special rows.
    fn score_chunk(
        &self,
        source: &mut TrialRows,
        scratch: &mut ChunkScratch,
        start: usize,
        pieces: &mut [ScorePiece],
    ) -> Result<Vec<Patch>, SimError> {
        let (d, key_layouts) = (self.spec.model.shape.head_dim, self.key_layouts);
        let mut patches = Vec::new();
        let layout_of = |v: &PrecisionVariant| usize::from(v.position.key_rope_layout_swapped && key_layouts == 2);
        let n = pieces.iter().map(|p| p.scores.len()).max().unwrap_or(0);
        let rows = start as u64..(start + n) as u64;
        let ChunkScratch { pre, swapped_fin, special_pre, special_keys, in_chunk, patched, chunk_scores, quantized } = scratch;
        source.next_chunk(rows.start, &mut pre[..n * d])?;
        for ((case, range), keys) in self.cases.iter().zip(in_chunk.iter_mut()).zip(special_keys.iter_mut()) {
            // `special` is ascending: the rows of this chunk are one run.
            let first = case.special.partition_point(|&r| r < rows.start);
            let last = case.special.partition_point(|&r| r < rows.end);
            *range = first..last;
            for layout_keys in keys.iter_mut().take(key_layouts) {
                layout_keys.resize(range.len() * d, 0.0);
            }
            for (j, &row) in case.special[range.clone()].iter().enumerate() {
                let at = (row - rows.start) as usize * d;
                source.special_row(row, &case.items, &pre[at..at + d], special_pre)?;
                source.add_recency(row, case.candidates as u64, special_pre);
                for (layout, layout_keys) in keys.iter_mut().enumerate().take(key_layouts) {
                    let key = &mut layout_keys[j * d..(j + 1) * d];
                    key.copy_from_slice(special_pre);
                    source.finalize_with(row, key, layout == 1)?;
                }
            }
        }
        if key_layouts == 2 {
            swapped_fin[..n * d].copy_from_slice(&pre[..n * d]);
            source.finalize_with(rows.start, &mut swapped_fin[..n * d], true)?;
        }
        // Finalizing (RMSNorm, RoPE) does nothing without pooling and RoPE:
        // then the generated rows are scored as they are.
        if source.finalizes() {
            source.finalize_with(rows.start, &mut pre[..n * d], false)?;
        }

        for (v, variant) in self.spec.variants.iter().enumerate() {
            if self.twins[v].is_some() {
                continue;
            }
            let layout = layout_of(variant);
            let fin: &[f32] = if layout == 1 { swapped_fin } else { pre };
            // Exact keys in a fault-free cache are what was generated:
            // scored in place, without a copy (the same bits: their
            // row scales would be 1).
            let stored = if variant.key.is_identity() && variant.cache.is_default() {
                None
            } else {
                variant.store_keys(&fin[..n * d], rows.start, d, quantized)?;
                Some(&*quantized)
            };
            let score = |q: &IndexerQuery, out: &mut [f32]| match stored {
                Some(keys) => q.score_quantized_rows(keys, out),
                None => q.score_rows(&fin[..n * d], out),
            };
            for piece in pieces.iter_mut().filter(|p| p.variant == v) {
                let q = &self.queries[piece.group][v];
                if piece.scores.len() == n {
                    score(q, piece.scores);
                } else {
                    score(q, &mut chunk_scores[..n]);
                    let m = piece.scores.len();
                    piece.scores.copy_from_slice(&chunk_scores[..m]);
                }
            }
            for (c, (case, range)) in self.cases.iter().zip(in_chunk.iter()).enumerate() {
                if range.is_empty() {
                    continue;
                }
                let q = &self.queries[self.spec.query_group(case.ci)][v];
                let keys = &special_keys[c][layout];
                if variant.cache.is_default() {
                    // Each row's stored key depends on that row alone:
                    // store and score just the rows that changed.
                    variant.store_keys(keys, rows.start, d, quantized)?;
                    q.score_quantized_rows(quantized, &mut chunk_scores[..range.len()]);
                    for (&row, &score) in case.special[range.clone()].iter().zip(chunk_scores.iter()) {
                        patches.push(Patch { case: c, variant: v, row: row as u32, score });
                    }
                } else {
                    // Pages and neighbours matter: store the whole chunk with the special rows in.
                    patched.resize(CHUNK_ROWS * d, 0.0);
                    patched[..n * d].copy_from_slice(&fin[..n * d]);
                    for (j, &row) in case.special[range.clone()].iter().enumerate() {
                        let at = (row - rows.start) as usize * d;
                        patched[at..at + d].copy_from_slice(&keys[j * d..(j + 1) * d]);
                    }
                    variant.store_keys(&patched[..n * d], rows.start, d, quantized)?;
                    q.score_quantized_rows(quantized, &mut chunk_scores[..n]);
                    patches.extend((0..n).map(|r| Patch { case: c, variant: v, row: (start + r) as u32, score: chunk_scores[r] }));
                }
            }
        }
        // A twin's scores are its original's, bit for bit: copied, not recomputed.
        for (v, u) in self.twins.iter().enumerate().filter_map(|(v, u)| u.map(|u| (v, u))) {
            for i in 0..pieces.len() {
                let Some(j) = pieces.iter().position(|p| p.group == pieces[i].group && p.variant == u).filter(|_| pieces[i].variant == v)
                else {
                    continue;
                };
                let (to, from) = if i < j {
                    let (a, b) = pieces.split_at_mut(j);
                    (&mut a[i], &b[0])
                } else {
                    let (a, b) = pieces.split_at_mut(i);
                    (&mut b[0], &a[j])
                };
                to.scores.copy_from_slice(from.scores);
            }
            let copies: Vec<Patch> = patches.iter().filter(|p| p.variant == u).map(|p| Patch { variant: v, ..*p }).collect();
            patches.extend(copies);
        }
        Ok(patches)
    }
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
    let d = hay.shape.head_dim;
    variants
        .iter()
        .map(|v| {
            let mut q = hay.queries.clone();
            source.rotate_queries(&mut q, context.saturating_sub(1), v.position.query_rope_layout_swapped)?;
            Ok(IndexerQuery::new(v.query.quantize_rows(&q, d)?, &hay.weights, d, v.scoring))
        })
        .collect()
}

impl TrialSpec<'_> {
    /// Index of (context, needle offset, topk, variant) in [`TrialOutcome::cells`].
    pub fn cell_index(&self, context: usize, offset: usize, topk: usize, variant: usize) -> usize {
        ((context * self.needle_offsets.len() + offset) * self.topks.len() + topk) * self.variants.len() + variant
    }

    /// Per variant, the first earlier variant that scores every row the
    /// same way (same query and key pipelines, scoring, cache and RoPE
    /// layout; only the selection differs, e.g. `fp8+ties-lowest` beside
    /// `fp8`): its scores are copied instead of computed again.
    pub fn score_twins(&self) -> Vec<Option<usize>> {
        let same = |a: &PrecisionVariant, b: &PrecisionVariant| {
            (&a.query, &a.key, &a.scoring, &a.cache, &a.position) == (&b.query, &b.key, &b.scoring, &b.cache, &b.position)
        };
        let v = self.variants;
        (0..v.len()).map(|i| (0..i).find(|&j| same(&v[i], &v[j]))).collect()
    }

    pub fn cell_count(&self) -> usize {
        self.contexts.len() * self.needle_offsets.len() * self.topks.len() * self.variants.len()
    }

    /// Whether every row is the null model's (no physics at this ratio) and
    /// the needle sits where the depth puts it: what the closed-form
    /// estimators assume.
    pub fn is_null_model(&self) -> bool {
        self.physics.is_null(self.geometry.ratio) && self.model.structure.is_null() && self.needle_offsets == [None]
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

    pub fn placement(&self, context: u64, offset: Option<u64>) -> NeedlePlacement {
        self.geometry.place_needle_at(context, self.needle_tokens, self.depth_percent, offset)
    }

    /// Runs the trial seeded by `trial_seed`.
    pub fn run(&self, trial_seed: u64) -> Result<TrialOutcome, SimError> {
        let haystack = TrialHaystack::draw(self.model, trial_seed)?;
        let mut source = TrialRows::new(self.model, self.physics, self.geometry, &haystack, trial_seed)?;

        // One query per context with RoPE (see `query_group`).
        let positional = self.physics.rope != RopeChoice::Off;
        let groups = if positional { self.contexts.len() } else { 1 };
        let queries: Vec<Vec<IndexerQuery>> =
            (0..groups).map(|g| context_queries(&haystack, &source, self.variants, self.contexts[g])).collect::<Result<_, _>>()?;
        // Keys rotated with the other pair layout, for `rope-swap-k` variants.
        let key_layouts = if positional && self.variants.iter().any(|v| v.position.key_rope_layout_swapped) { 2 } else { 1 };
        let candidates_of = |ci: usize| self.geometry.candidate_rows(self.contexts[ci]) as usize;
        let group_rows: Vec<usize> = (0..groups)
            .map(|g| if positional { candidates_of(g) } else { (0..self.contexts.len()).map(candidates_of).max().unwrap_or(0) })
            .collect();
        let max_rows = group_rows.iter().copied().max().unwrap_or(0);

        let mut cases: Vec<Case> = Vec::with_capacity(self.contexts.len() * self.needle_offsets.len());
        for ci in 0..self.contexts.len() {
            for (oi, &offset) in self.needle_offsets.iter().enumerate() {
                let placement = self.placement(self.contexts[ci], offset);
                let candidates = candidates_of(ci);
                let items = source.items(self.contexts[ci], placement.tokens.clone());
                let special = source.special_rows(&items, candidates as u64);
                cases.push(Case { ci, oi, placement, candidates, items, special, patches: vec![Vec::new(); self.variants.len()] });
            }
        }

        // Score every row once per (query group, variant), chunk by chunk;
        // rows that hold needle or distractor tokens are keyed per case.
        let mut scores: Vec<Vec<Vec<f32>>> = group_rows.iter().map(|&n| vec![vec![0.0; n]; self.variants.len()]).collect();
        let work = ChunkWork { spec: self, key_layouts, queries: &queries, cases: &cases, twins: self.score_twins() };
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
            work.score_chunk(source, scratch, c * CHUNK_ROWS, &mut pieces)
        };
        // Every row is a pure function of its position when chunks are
        // independent: then chunks may be scored on several threads (one
        // source clone and one scratch per rayon job) with the same bits.
        let chunk_patches: Vec<Vec<Patch>> =
            if source.chunks_are_independent() && rayon::current_num_threads() > 1 && chunk_count >= 2 * CHUNKS_PER_JOB {
                pieces
                    .into_par_iter()
                    .enumerate()
                    .with_min_len(CHUNKS_PER_JOB)
                    .map_init(|| (source.clone(), ChunkScratch::new(&work)), |(source, scratch), chunk| score_chunk(source, scratch, chunk))
                    .collect::<Result<_, _>>()?
            } else {
                let mut scratch = ChunkScratch::new(&work);
                pieces.into_iter().enumerate().map(|chunk| score_chunk(&mut source, &mut scratch, chunk)).collect::<Result<_, _>>()?
            };
        for patch in chunk_patches.into_iter().flatten() {
            cases[patch.case].patches[patch.variant].push((patch.row, patch.score));
        }

        let mut cells = vec![NeedleOutcome::LOST; self.cell_count()];
        let mut scratch: Vec<f32> = Vec::with_capacity(max_rows);
        let mut kth = Vec::new();
        let priority = |row: usize| rng::derive(trial_seed, &[tag::TIE, row as u64]);
        // Fidelity compares whole top-k sets, so it needs every row's place in
        // the tie order, and each variant's scores with the needle rows in.
        let tie_keys: Vec<u64> = match self.fidelity_reference {
            Some(_) if self.variants.len() > 1 => (0..max_rows).map(|i| tie_key(self.tie_rule, i, priority)).collect(),
            _ => Vec::new(),
        };
        let mut row_order: Vec<u32> = Vec::new();
        // The case's scores are the shared ones with its patches written in
        // place (originals saved here and put back after the case).
        let mut saved: Vec<(usize, usize, f32)> = Vec::new();

        for case in &cases {
            let (ci, oi, candidates) = (case.ci, case.oi, case.candidates);
            let placement = &case.placement;
            let skip = placement.rows.start as usize..placement.rows.end as usize;
            let k_effs: Vec<usize> = self.topks.iter().map(|&k| (k as usize).min(candidates)).collect();
            let g = self.query_group(ci);
            saved.clear();
            for (v, patches) in case.patches.iter().enumerate() {
                let shared = &mut scores[g][v];
                for &(row, score) in patches.iter().filter(|&&(row, _)| (row as usize) < candidates) {
                    let row = row as usize;
                    saved.push((v, row, shared[row]));
                    shared[row] = score;
                }
            }
            let assembled: Vec<&[f32]> = scores[g].iter().map(|s| &s[..candidates]).collect();

            for (v, variant) in self.variants.iter().enumerate() {
                // What this variant's engine selects with (hypotheses may change it).
                let sel = &variant.selection;
                let nan = sel.nan_order;
                let rule = sel.tie_rule_for(self.tie_rule);
                let window = sel.window_for(self.geometry.window);
                let in_window = placement.tokens.start >= self.contexts[ci].saturating_sub(window);
                let k_effs: Vec<usize> = self.topks.iter().map(|&k| (sel.topk_for(k) as usize).min(candidates)).collect();
                let visible = assembled[v];
                let needle_scores = &visible[skip.clone()];
                // Best needle row: highest score in the engine's order, first on ties.
                let best =
                    needle_scores.iter().copied().reduce(|a, b| if nan.compare(b, a, |x, y| x.total_cmp(&y)).is_gt() { b } else { a });
                let Some(best) = best else {
                    for ki in 0..self.topks.len() {
                        cells[self.cell_index(ci, oi, ki, v)] =
                            NeedleOutcome { survived: in_window, via_window: in_window, ..NeedleOutcome::LOST };
                    }
                    continue;
                };
                let t = tally_with(visible, skip.clone(), best, nan);
                // Tied competitors the tie rule puts ahead of the best needle
                // row; if several needle rows tie for best, the luckiest counts.
                let tied = if t.rank.above_or_equal > t.rank.above {
                    needle_scores
                        .iter()
                        .enumerate()
                        .filter(|(_, &s)| s == best || (s.is_nan() && best.is_nan()))
                        .map(|(j, _)| tied_ahead(visible, skip.clone(), skip.start + j, best, rule, priority))
                        .min()
                        .unwrap_or(0)
                } else {
                    0
                };

                let competitors = candidates - skip.len();
                let ks_with_margin: Vec<usize> = k_effs.iter().copied().filter(|&k| k >= 1 && k <= competitors).collect();
                if !ks_with_margin.is_empty() {
                    scratch.clear();
                    scratch.extend_from_slice(&visible[..skip.start]);
                    scratch.extend_from_slice(&visible[skip.end..]);
                    kth_largest_many_with(&mut scratch, &ks_with_margin, &mut kth, nan);
                }
                for (ki, &k_eff) in k_effs.iter().enumerate() {
                    let by_rank = (t.rank.above + tied) < k_eff as u64;
                    let margin = ks_with_margin.iter().position(|&k| k == k_eff).map(|p| best - kth[p]);
                    let margin_sd = margin.filter(|_| t.std > 0.0).map(|m| f64::from(m) / t.std);
                    cells[self.cell_index(ci, oi, ki, v)] = NeedleOutcome {
                        survived: in_window || by_rank,
                        via_window: in_window,
                        rank: Some(t.rank),
                        margin,
                        margin_sd,
                        ..NeedleOutcome::LOST
                    };
                }
            }
            if let Some(r) = self.fidelity_reference.filter(|_| !tie_keys.is_empty()) {
                for v in (0..self.variants.len()).filter(|&v| v != r) {
                    for (ki, &k_eff) in k_effs.iter().enumerate().filter(|(_, &k)| k > 0) {
                        let (nan_r, nan_v) = (self.variants[r].selection.nan_order, self.variants[v].selection.nan_order);
                        let both = selection_overlap_with(
                            assembled[r],
                            assembled[v],
                            &tie_keys[..candidates],
                            k_eff,
                            &mut row_order,
                            nan_r,
                            nan_v,
                        );
                        let cell = &mut cells[self.cell_index(ci, oi, ki, v)];
                        cell.selection_recall = Some(both as f64 / k_eff as f64);
                        cell.jaccard = Some(both as f64 / (2 * k_eff as u64 - both) as f64);
                    }
                }
            }
            drop(assembled);
            for &(v, row, old) in saved.iter().rev() {
                scores[g][v][row] = old;
            }
        }
        Ok(TrialOutcome { cells, seed: trial_seed })
    }
}

//! Scoring a trial's rows chunk by chunk: generated, quantized and scored
//! together, with the rows that hold needle or distractor tokens kept for
//! the needle pass.

use super::spec::{Case, TrialSpec};
use crate::error::SimError;
use crate::model::row_source::{scaled_key, TrialRows};
use crate::numerics::pipeline::{QuantPipeline, QuantizedRows};
use crate::score::indexer::IndexerQuery;
use crate::score::variant::PrecisionVariant;
use rayon::prelude::*;

/// Rows generated, quantized and scored together: small enough to stay in
/// L2 cache (256 rows × 128 dims × 4 bytes = 128 KiB).
pub(super) const CHUNK_ROWS: usize = 256;

/// Chunks per rayon job at least, when a trial's chunks are scored in
/// parallel (2048 rows: a job's setup is small beside its work).
pub(super) const CHUNKS_PER_JOB: usize = 8;

/// One chunk's rows of one (query group, variant) score array.
pub(super) struct ScorePiece<'s> {
    pub(super) group: usize,
    pub(super) variant: usize,
    pub(super) scores: &'s mut [f32],
}

/// A score that replaces the shared one in one case (a row holding needle
/// or distractor tokens, or any row of a chunk whose stored keys they change).
pub(super) struct Patch {
    pub(super) case: usize,
    pub(super) variant: usize,
    pub(super) row: u32,
    pub(super) score: f32,
}

/// A case's special row in one chunk, before finalizing: its key with the
/// items' full offsets and, for the quantile needle, without them (the
/// needle's key at scale α lies between, [`scaled_key`]).
pub(super) struct SpecialPre {
    pub(super) row: u64,
    pub(super) full: Vec<f32>,
    pub(super) bare: Vec<f32>,
}

/// What a chunk leaves for the needle pass: each case's special rows in it,
/// and the chunk's finalized rows per key layout when a cache-fault variant
/// must store the whole chunk with the special rows in.
pub(super) struct ChunkSpecials {
    pub(super) start: u64,
    pub(super) n: usize,
    /// Per case (empty for most chunks).
    pub(super) cases: Vec<Vec<SpecialPre>>,
    /// [layout][n · d]; empty unless needed.
    pub(super) fin: Vec<Vec<f32>>,
    /// ‖k‖ of each finalized row (layout 0); empty unless needed.
    pub(super) norms: Vec<f32>,
}

/// What scoring a chunk reads: the trial's queries and cases.
pub(super) struct ChunkWork<'w, 'a> {
    pub(super) spec: &'w TrialSpec<'a>,
    /// The trial's seed: the request whose cache pages the faults draw.
    pub(super) request: u64,
    /// The variants scored: the spec's, and the exact reference after them
    /// when the quantile needle needs one and the spec has none.
    pub(super) variants: &'w [PrecisionVariant],
    /// 2 when some variant reads keys rotated with the swapped RoPE layout.
    pub(super) key_layouts: usize,
    /// [query group][variant].
    pub(super) queries: &'w [Vec<std::sync::Arc<IndexerQuery>>],
    pub(super) cases: &'w [Case],
    /// Per variant: an earlier variant whose scores it shares (see [`TrialSpec::score_twins`]).
    pub(super) twins: Vec<Option<usize>>,
    /// Per variant: an earlier one whose scores it reads, rounded to its
    /// logits format ([`super::spec::logit_twins_of`]).
    pub(super) logit_twins: Vec<Option<usize>>,
    /// Per variant: an earlier one with a fault-free cache whose rows its
    /// cache only moves ([`super::spec::row_map_twins_of`]).
    pub(super) row_map_twins: Vec<Option<usize>>,
    /// … and whose needle rows' scores too: a twin with the same needle multiple.
    pub(super) patch_twins: Vec<Option<usize>>,
    /// Per variant: its needle multiple's slot ([`TrialSpec::needle_multiples`]).
    pub(super) needle_slots: Vec<usize>,
    /// Keep each special row's key without offsets (the quantile needle).
    pub(super) keep_bare: bool,
    /// Keep finalized chunks that hold special rows (a cache-fault variant).
    pub(super) keep_fin: bool,
    /// Keep every row's key norm (the screened exact reference).
    pub(super) keep_norms: bool,
}

/// Buffers of the chunk loop, one set per thread.
pub(super) struct ChunkScratch {
    /// The chunk's rows; finalized in place (layout 0).
    pub(super) pre: Vec<f32>,
    /// The same rows finalized with the swapped RoPE layout (layout 1).
    pub(super) swapped_fin: Vec<f32>,
    pub(super) chunk_scores: Vec<f32>,
    pub(super) quantized: QuantizedRows,
    /// Each key pipeline's quantization of the chunk, shared by its variants.
    pub(super) plain: Vec<QuantizedRows>,
}

impl ChunkScratch {
    pub(super) fn new(work: &ChunkWork) -> Self {
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
    pub(super) fn layout_of(&self, v: &PrecisionVariant) -> usize {
        usize::from(v.position.key_rope_layout_swapped && self.key_layouts == 2)
    }

    /// Scores every chunk of rows (up to `max_rows`) into `scores`
    /// ([group][variant][row]); returns each chunk's special rows.
    pub(super) fn score_all(
        &self,
        source: &mut TrialRows,
        scores: &mut [Vec<Vec<f32>>],
        max_rows: usize,
    ) -> Result<Vec<ChunkSpecials>, SimError> {
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
    pub(super) fn score_chunk(
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
        // Finalizing (structure, norm, RoPE) does nothing without them: then
        // the generated rows are scored as they are. With both RoPE layouts,
        // what comes before the rotation is done once for both.
        let finalizes = source.finalizes();
        if finalizes || key_layouts == 2 {
            source.finalize_before_rope(rows.start, &mut pre[..n * d])?;
        }
        if key_layouts == 2 {
            swapped_fin[..n * d].copy_from_slice(&pre[..n * d]);
            source.rotate_keys(rows.start, &mut swapped_fin[..n * d], true)?;
        }
        if finalizes {
            source.rotate_keys(rows.start, &mut pre[..n * d], false)?;
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
    pub(super) fn special_rows(
        &self,
        source: &mut TrialRows,
        pre: &[f32],
        rows: &std::ops::Range<u64>,
    ) -> Result<Vec<Vec<SpecialPre>>, SimError> {
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
    pub(super) fn score_variants(
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
            if self.twins[v].is_some()
                || self.rounded_from_logit_twin(v, &of_variant, pieces)
                || self.moved_from_row_map_twin(v, start, n, &of_variant, pieces)?
            {
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

    /// Variant `v`'s scores as its logit twin's, rounded to its logits
    /// format, when it has one whose pieces (scored earlier in this chunk,
    /// so earlier in `pieces`) match its own; false (nothing written)
    /// otherwise.
    fn rounded_from_logit_twin(&self, v: usize, of_variant: &[Vec<usize>], pieces: &mut [ScorePiece]) -> bool {
        let Some(pairs) = self.logit_twins[v].and_then(|u| source_pieces(v, u, of_variant, pieces)) else { return false };
        let logits = self.variants[v].scoring.logits;
        for (i, j) in pairs {
            let (before, from_i) = pieces.split_at_mut(i);
            for (to, &from) in from_i[0].scores.iter_mut().zip(before[j].scores.iter()) {
                *to = logits.round(from);
            }
        }
        true
    }

    /// Variant `v`'s scores read off its row-map twin's pieces (scored
    /// earlier in this chunk): row r scores as the written row its cache
    /// reads in r's place, a row read past the chunk's `n` rows as a zero
    /// row with scale 0 does. False (nothing written) without a twin, or
    /// when a row of a shorter piece reads a row past that piece, whose
    /// score the twin's piece lacks.
    fn moved_from_row_map_twin(
        &self,
        v: usize,
        start: u64,
        n: usize,
        of_variant: &[Vec<usize>],
        pieces: &mut [ScorePiece],
    ) -> Result<bool, SimError> {
        let Some(u) = self.row_map_twins[v] else { return Ok(false) };
        let cache = &self.variants[v].cache;
        // A chunk the cache would refuse (not at a tensor span) takes the
        // full path, which says so.
        if !start.is_multiple_of(crate::numerics::key_cache::TENSOR_SPAN_ROWS as u64) {
            return Ok(false);
        }
        let Some(pairs) = source_pieces(v, u, of_variant, pieces) else { return Ok(false) };
        let read: Vec<usize> = (0..n).map(|r| cache.read_row(r)).collect();
        if pairs.iter().any(|&(i, _)| {
            let m = pieces[i].scores.len();
            read[..m].iter().any(|&src| src >= m && src < n)
        }) {
            return Ok(false);
        }
        let d = self.spec.model.shape.head_dim;
        let zero_row = QuantizedRows { values: vec![0.0; d], row_scales: vec![0.0] };
        for (i, j) in pairs {
            let m = pieces[i].scores.len();
            let mut past = None;
            if read[..m].iter().any(|&src| src >= n) {
                let mut score = [0.0f32];
                self.queries[pieces[i].group][v].score_quantized_rows(&zero_row, &mut score);
                past = Some(score[0]);
            }
            let (before, from_i) = pieces.split_at_mut(i);
            let base = &before[j].scores;
            for (to, &src) in from_i[0].scores.iter_mut().zip(&read[..m]) {
                *to = if src < m { base[src] } else { past.unwrap_or_default() };
            }
        }
        Ok(true)
    }

    /// A twin's scores are its original's, bit for bit: copied, not recomputed.
    pub(super) fn copy_twin_scores(&self, pieces: &mut [ScorePiece]) {
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
    pub(super) fn special_keys(
        &self,
        source: &TrialRows,
        c: usize,
        chunk: &ChunkSpecials,
        scale: Option<f32>,
    ) -> Result<[Vec<f32>; 2], SimError> {
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

    /// Variant `v`'s scores of case `c`'s needle rows (ascending) with the
    /// needle's offset at `scale`, stored and scored as
    /// [`Self::case_patches`] does (per row, or the whole chunk for a cache-fault variant); the other rows keep their scores.
    pub(super) fn needle_scores(
        &self,
        source: &TrialRows,
        c: usize,
        chunks: &[&ChunkSpecials],
        v: usize,
        scale: f32,
        quantized: &mut QuantizedRows,
    ) -> Result<Vec<(u64, f32)>, SimError> {
        let d = self.spec.model.shape.head_dim;
        let case = &self.cases[c];
        let variant = &self.variants[v];
        let layout = self.layout_of(variant);
        let q = &self.queries[self.spec.query_group(case.ci)][v];
        let is_needle = |row: u64| case.placement.rows.contains(&row);
        let mut out = Vec::new();
        for chunk in chunks {
            let pres = &chunk.cases[c];
            if !pres.iter().any(|p| is_needle(p.row)) {
                continue;
            }
            let keys = self.special_keys(source, c, chunk, Some(scale))?;
            if variant.cache.is_default() {
                variant.store_keys(&keys[layout], chunk.start, self.request, d, quantized)?;
                let mut scores = vec![0.0f32; pres.len()];
                q.score_quantized_rows(quantized, &mut scores);
                out.extend(pres.iter().zip(scores).filter(|(p, _)| is_needle(p.row)).map(|(p, s)| (p.row, s)));
            } else {
                let mut patched = chunk.fin[layout].clone();
                for (j, pre) in pres.iter().enumerate() {
                    let at = (pre.row - chunk.start) as usize * d;
                    patched[at..at + d].copy_from_slice(&keys[layout][j * d..(j + 1) * d]);
                }
                variant.store_keys(&patched, chunk.start, self.request, d, quantized)?;
                let mut scores = vec![0.0f32; chunk.n];
                q.score_quantized_rows(quantized, &mut scores);
                out.extend(pres.iter().filter(|p| is_needle(p.row)).map(|p| (p.row, scores[(p.row - chunk.start) as usize])));
            }
        }
        out.sort_unstable_by_key(|&(row, _)| row);
        Ok(out)
    }

    /// The exact scores of case `c`'s special rows in `chunks` with the
    /// needle's offset at `scale`, as `exact` with query `q` scores them:
    /// (row, score), needle rows only when `needle_rows`, else the others.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn special_exact(
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

/// Per piece of variant `v`, the piece of variant `u` for the same query
/// group and rows, earlier in `pieces` (scored before it in the chunk):
/// (v's piece, u's piece); None when one has no such piece.
fn source_pieces(v: usize, u: usize, of_variant: &[Vec<usize>], pieces: &[ScorePiece]) -> Option<Vec<(usize, usize)>> {
    let source_of = |i: usize| {
        let (group, len) = (pieces[i].group, pieces[i].scores.len());
        of_variant[u].iter().copied().find(|&j| j < i && pieces[j].group == group && pieces[j].scores.len() == len)
    };
    of_variant[v].iter().map(|&i| source_of(i).map(|j| (i, j))).collect()
}

/// The index in `pieces` of each (group, variant) piece, at `group ×
/// variants + variant` (None where the chunk has none).
pub(super) fn piece_index(pieces: &[ScorePiece], variants: usize) -> Vec<Option<usize>> {
    let groups = pieces.iter().map(|p| p.group + 1).max().unwrap_or(0);
    let mut at = vec![None; groups * variants];
    for (i, p) in pieces.iter().enumerate() {
        at[p.group * variants + p.variant] = Some(i);
    }
    at
}

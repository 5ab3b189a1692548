//! Each case's patches: the scores of its special rows (needle and
//! distractor tokens) per variant; for a variant whose cache faults store
//! the chunk as a whole (pages and neighbours matter), of the rows of the
//! chunk that the special rows change as it is read back. What the
//! variants of one chunk and case share is kept, so that each variant
//! stores the chunk once and scores only the rows that changed. Where the
//! faults keep each row's read-back within its page or pair of pages, only
//! the pages the special rows change are stored again
//! ([`crate::numerics::key_cache::KeyCacheFaults::parts_reading`]): the same bits for less work.

use super::chunk::{ChunkSpecials, ChunkWork, Patch};
use crate::error::SimError;
use crate::model::row_source::TrialRows;
use crate::numerics::key_cache::ChunkPart;
use crate::numerics::pipeline::QuantizedRows;
use crate::score::indexer::IndexerQuery;
use crate::score::variant::PrecisionVariant;

thread_local! {
    /// Set by [`with_stored_patches`]: every cache-fault variant's patches
    /// from the pages stored again (tests compare both ways).
    static STORED_PATCHES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every cache-fault variant's needle patches found by
/// storing the pages again on this thread, never read off the moved rows
/// (for tests of [`ChunkWork::moved_patches`]).
pub fn with_stored_patches<T>(f: impl FnOnce() -> T) -> T {
    STORED_PATCHES.with(|c| c.set(true));
    let out = f();
    STORED_PATCHES.with(|c| c.set(false));
    out
}

/// Which rows a key pipeline quantized (the special rows at a needle
/// slot's scale), and the layout.
type Rows = (Which, usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    /// The chunk as scored.
    Chunk,
    /// The chunk with the case's special rows in.
    Patched(usize),
    /// The case's special rows alone.
    Specials(usize),
}

/// What the cache-fault variants of one (chunk, case) share.
pub(super) struct FaultedChunk<'c> {
    chunk: &'c ChunkSpecials,
    /// [slot][layout]: the chunk's finalized rows with the case's special rows in.
    patched: Vec<[Option<Vec<f32>>; 2]>,
    /// Each key pipeline's quantization of some rows: (rows, a variant
    /// with that pipeline, the quantized rows).
    quantized: Vec<(Rows, usize, QuantizedRows)>,
    /// Per score-twin root: the chunk as scored, read back.
    base: Vec<Option<QuantizedRows>>,
    /// The rows to score, gathered.
    gathered: QuantizedRows,
    /// A part of the chunk with the special rows in, before it is stored.
    part_rows: QuantizedRows,
}

impl<'c> FaultedChunk<'c> {
    pub(super) fn new(chunk: &'c ChunkSpecials, variants: usize, slots: usize) -> Self {
        FaultedChunk {
            chunk,
            patched: (0..slots).map(|_| [None, None]).collect(),
            quantized: Vec::new(),
            base: vec![None; variants],
            gathered: QuantizedRows::default(),
            part_rows: QuantizedRows::default(),
        }
    }
}

impl ChunkWork<'_, '_> {
    /// Every scored variant's scores of case `c`'s special rows in `chunk`
    /// (or, for a cache-fault variant, of the rows of the chunk that they
    /// change as it is read back: [`Self::fault_patches`]).
    pub(super) fn case_patches(
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
        let start = chunk.start;
        // The special rows' keys per needle slot (its scale).
        let keys_of_slot: Vec<[Vec<f32>; 2]> =
            scales.iter().map(|&scale| self.special_keys(source, c, chunk, scale)).collect::<Result<_, _>>()?;
        let case = &self.cases[c];
        let mut scores = vec![0.0f32; pres.len()];
        let mut faulted = FaultedChunk::new(chunk, self.variants.len(), scales.len());
        let first = patches.len();
        for (v, variant) in self.variants.iter().enumerate() {
            if self.patch_twins[v].is_some() {
                continue;
            }
            let keys = &keys_of_slot[self.needle_slots[v]];
            let q = &self.queries[self.spec.query_group(case.ci)][v];
            if variant.cache.is_default() {
                // Each row's stored key depends on that row alone:
                // store and score just the rows that changed.
                variant.store_keys(&keys[self.layout_of(variant)], start, self.request, d, quantized)?;
                q.score_quantized_rows(quantized, &mut scores);
                for (pre, &score) in pres.iter().zip(scores.iter()) {
                    patches.push(Patch { case: c, variant: v, row: pre.row as u32, score });
                }
            } else {
                // Pages and neighbours matter: store the whole chunk with the special rows in.
                self.fault_patches((c, v), keys, self.needle_slots[v], q, &mut faulted, quantized, patches)?;
            }
        }
        for (v, u) in self.patch_twins.iter().enumerate().filter_map(|(v, u)| u.map(|u| (v, u))) {
            let copies: Vec<Patch> = patches[first..].iter().filter(|p| p.variant == u).map(|p| Patch { variant: v, ..*p }).collect();
            patches.extend(copies);
        }
        Ok(())
    }

    /// Variant `v`'s read-back of the chunk `rows` (from row `start`): a key
    /// pipeline's quantization is shared by every variant that starts from
    /// it, as [`Self::score_variants`] shares it (the same bits as storing
    /// the raw rows).
    fn store_chunk(
        &self,
        v: usize,
        (rows, start): (&[f32], u64),
        which: Rows,
        quantized: &mut Vec<(Rows, usize, QuantizedRows)>,
        out: &mut QuantizedRows,
    ) -> Result<(), SimError> {
        let variant: &PrecisionVariant = &self.variants[v];
        let d = self.spec.model.shape.head_dim;
        if !variant.cache.starts_from_quantized() {
            return variant.store_keys(rows, start, self.request, d, out);
        }
        let i = self.quantization(v, rows, which, quantized)?;
        variant.cache.store_quantized(&variant.key, &quantized[i].2, start, d, out)
    }

    /// Where in `quantized` variant `v`'s key pipeline's quantization of
    /// `rows` (which are `which`) is, made if missing.
    fn quantization(
        &self,
        v: usize,
        rows: &[f32],
        which: Rows,
        quantized: &mut Vec<(Rows, usize, QuantizedRows)>,
    ) -> Result<usize, SimError> {
        let key = &self.variants[v].key;
        if let Some(i) = quantized.iter().position(|(w, u, _)| *w == which && self.variants[*u].key == *key) {
            return Ok(i);
        }
        let mut q = QuantizedRows::default();
        key.quantize_rows_into(rows, self.spec.model.shape.head_dim, &mut q)?;
        quantized.push((which, v, q));
        Ok(quantized.len() - 1)
    }

    /// Variant `v`'s read-back of `part` of `chunk` with case `c`'s special
    /// rows' keys `keys` (at needle slot `slot`) in. Each row of the key
    /// pipeline's quantization depends on that row alone (a part is only
    /// made where it does: [`crate::numerics::key_cache::KeyCacheFaults::parts_reading`]), so the
    /// chunk's quantization with the special rows' own in is the patched
    /// chunk's, bit for bit.
    #[allow(clippy::too_many_arguments)]
    fn store_part(
        &self,
        (c, v, slot): (usize, usize, usize),
        chunk: &ChunkSpecials,
        keys: &[Vec<f32>; 2],
        part: &ChunkPart,
        quantized: &mut Vec<(Rows, usize, QuantizedRows)>,
        scratch: &mut QuantizedRows,
        out: &mut QuantizedRows,
    ) -> Result<(), SimError> {
        let variant = &self.variants[v];
        let (layout, d) = (self.layout_of(variant), self.spec.model.shape.head_dim);
        let rows = part.rows.clone();
        // (special row j, its row in the part)
        let specials: Vec<(usize, usize)> = chunk.cases[c]
            .iter()
            .enumerate()
            .map(|(j, p)| (j, (p.row - chunk.start) as usize))
            .filter(|(_, r)| rows.contains(r))
            .map(|(j, r)| (j, r - rows.start))
            .collect();
        if !variant.cache.starts_from_quantized() {
            scratch.values.clear();
            scratch.values.extend_from_slice(&chunk.fin[layout][rows.start * d..rows.end * d]);
            for &(j, i) in &specials {
                scratch.values[i * d..(i + 1) * d].copy_from_slice(&keys[layout][j * d..(j + 1) * d]);
            }
            return variant.cache.store_part(&variant.key, &scratch.values, part, self.request, d, out);
        }
        let whole = self.quantization(v, &chunk.fin[layout], (Which::Chunk, layout), quantized)?;
        let own = self.quantization(v, &keys[layout], (Which::Specials(slot), layout), quantized)?;
        let (whole, own) = (&quantized[whole].2, &quantized[own].2);
        scratch.values.clear();
        scratch.values.extend_from_slice(&whole.values[rows.start * d..rows.end * d]);
        scratch.row_scales.clear();
        scratch.row_scales.extend_from_slice(&whole.row_scales[rows.clone()]);
        for &(j, i) in &specials {
            scratch.values[i * d..(i + 1) * d].copy_from_slice(&own.values[j * d..(j + 1) * d]);
            scratch.row_scales[i] = own.row_scales[j];
        }
        variant.cache.store_quantized_part(&variant.key, scratch, part, d, out)
    }

    /// Variant `v`'s patches of case `c` in `faulted`'s chunk, with the
    /// case's special rows' finalized keys `keys` (per layout) at needle
    /// slot `slot`: the chunk stored with them in, compared with the chunk
    /// as scored, read back. Only rows read back differently are scored:
    /// a row's score depends on its read-back values and scale alone, so
    /// the others' scores are the shared ones, bit for bit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fault_patches(
        &self,
        (c, v): (usize, usize),
        keys: &[Vec<f32>; 2],
        slot: usize,
        q: &IndexerQuery,
        faulted: &mut FaultedChunk,
        out: &mut QuantizedRows,
        patches: &mut Vec<Patch>,
    ) -> Result<(), SimError> {
        let variant = &self.variants[v];
        let (start, n) = (faulted.chunk.start, faulted.chunk.n);
        let written: Vec<usize> = faulted.chunk.cases[c].iter().map(|p| (p.row - start) as usize).collect();
        let parts = variant.cache.parts_reading(&variant.key, &written, n);
        // A cache that only moves whole rows, of keys quantized row by row:
        // the special rows' own keys say which rows change.
        if parts.is_some()
            && variant.cache.moves_rows_only()
            && start.is_multiple_of(crate::numerics::key_cache::TENSOR_SPAN_ROWS as u64)
            && !STORED_PATCHES.with(|f| f.get())
        {
            return self.moved_patches((c, v, slot), &written, keys, q, faulted, patches);
        }
        let FaultedChunk { chunk, patched, quantized, base, gathered, part_rows } = faulted;
        let layout = self.layout_of(variant);
        let d = self.spec.model.shape.head_dim;
        let root = self.twins[v].unwrap_or(v);
        if base[root].is_none() {
            let mut b = QuantizedRows::default();
            self.store_chunk(v, (&chunk.fin[layout], start), (Which::Chunk, layout), quantized, &mut b)?;
            base[root] = Some(b);
        }
        let base = base[root].as_ref().expect("stored above");
        let mut changed = Vec::new();
        gathered.values.clear();
        gathered.row_scales.clear();
        match parts {
            // Only the pages the special rows change, stored again.
            Some(parts) => {
                for rows in parts {
                    let part = ChunkPart { first_row: start, n_rows: n, rows };
                    self.store_part((c, v, slot), chunk, keys, &part, quantized, part_rows, out)?;
                    gather_changed(base, out, part.rows, d, (&mut changed, gathered))?;
                }
            }
            None => {
                let rows = patched[slot][layout].get_or_insert_with(|| {
                    let mut rows = chunk.fin[layout].clone();
                    for (j, pre) in chunk.cases[c].iter().enumerate() {
                        let at = (pre.row - start) as usize * d;
                        rows[at..at + d].copy_from_slice(&keys[layout][j * d..(j + 1) * d]);
                    }
                    rows
                });
                self.store_chunk(v, (rows, start), (Which::Patched(slot), layout), quantized, out)?;
                gather_changed(base, out, 0..n, d, (&mut changed, gathered))?;
            }
        }
        if changed.is_empty() {
            return Ok(());
        }
        let mut scores = vec![0.0f32; changed.len()];
        q.score_quantized_rows(gathered, &mut scores);
        patches.extend(changed.iter().zip(scores).map(|(&r, score)| Patch {
            case: c,
            variant: v,
            row: (start as usize + r) as u32,
            score,
        }));
        Ok(())
    }
}

impl ChunkWork<'_, '_> {
    /// [`Self::fault_patches`] for a cache that only moves whole rows
    /// ([`crate::numerics::key_cache::KeyCacheFaults::moves_rows_only`])
    /// under a key pipeline that quantizes each row alone: row r reads
    /// written row `read_row(r)`, so it changes exactly where that is a
    /// special row (chunk rows `written`) whose quantized key differs from
    /// the chunk's there, and then scores as that special row does. The
    /// same patches, ascending, without storing pages again.
    fn moved_patches(
        &self,
        (c, v, slot): (usize, usize, usize),
        written: &[usize],
        keys: &[Vec<f32>; 2],
        q: &IndexerQuery,
        faulted: &mut FaultedChunk,
        patches: &mut Vec<Patch>,
    ) -> Result<(), SimError> {
        let FaultedChunk { chunk, quantized, gathered, .. } = faulted;
        let variant = &self.variants[v];
        let (start, n) = (chunk.start, chunk.n);
        let (layout, d) = (self.layout_of(variant), self.spec.model.shape.head_dim);
        let whole = self.quantization(v, &chunk.fin[layout], (Which::Chunk, layout), quantized)?;
        let own = self.quantization(v, &keys[layout], (Which::Specials(slot), layout), quantized)?;
        let (whole, own) = (&quantized[whole].2, &quantized[own].2);
        let row_bits = |q: &QuantizedRows, r: usize| {
            (q.row_scales[r].to_bits(), q.values[r * d..(r + 1) * d].iter().map(|x| x.to_bits()).collect::<Vec<u32>>())
        };
        // (written row, special row) where the special row's key is new there.
        let mut new_at: Vec<(usize, usize)> =
            written.iter().enumerate().map(|(j, &w)| (w, j)).filter(|&(w, j)| row_bits(own, j) != row_bits(whole, w)).collect();
        if new_at.is_empty() {
            return Ok(());
        }
        new_at.sort_unstable();
        gathered.values.clear();
        gathered.row_scales.clear();
        for &(_, j) in &new_at {
            gathered.values.extend_from_slice(&own.values[j * d..(j + 1) * d]);
            gathered.row_scales.push(own.row_scales[j]);
        }
        let mut scores = vec![0.0f32; new_at.len()];
        q.score_quantized_rows(gathered, &mut scores);
        for r in 0..n {
            if let Ok(i) = new_at.binary_search_by_key(&variant.cache.read_row(r), |&(w, _)| w) {
                patches.push(Patch { case: c, variant: v, row: (start as usize + r) as u32, score: scores[i] });
            }
        }
        Ok(())
    }
}

/// Appends to `changed` the rows `rows` of a chunk (`out`, read back from
/// row `rows.start`) whose values or scale differ from the chunk as scored
/// (`base`), ascending, and their read-back to `gathered`.
fn gather_changed(
    base: &QuantizedRows,
    out: &QuantizedRows,
    rows: std::ops::Range<usize>,
    d: usize,
    (changed, gathered): (&mut Vec<usize>, &mut QuantizedRows),
) -> Result<(), SimError> {
    let n = rows.len();
    if base.row_scales.len() < rows.end || base.values.len() < rows.end * d || out.row_scales.len() != n || out.values.len() != n * d {
        return Err(SimError::Hypothesis(format!("the key cache read back {} rows where {n} were stored", out.row_scales.len())));
    }
    for (i, r) in rows.enumerate() {
        let (mine, theirs) = (&out.values[i * d..(i + 1) * d], &base.values[r * d..(r + 1) * d]);
        // Bits, not values (NaN, ±0); folded without an early exit, which vectorizes.
        let differs = base.row_scales[r].to_bits() != out.row_scales[i].to_bits()
            || mine.iter().zip(theirs).fold(0, |acc, (a, b)| acc | (a.to_bits() ^ b.to_bits())) != 0;
        if differs {
            changed.push(r);
            gathered.values.extend_from_slice(mine);
            gathered.row_scales.push(out.row_scales[i]);
        }
    }
    Ok(())
}

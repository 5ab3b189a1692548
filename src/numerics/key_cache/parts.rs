//! Which rows of a chunk read back differently when some of its rows are
//! written with other values, and storing only the part of the chunk that
//! holds them. The scorer stores a chunk as scored, then with each needle's
//! rows in, and rescores only the rows read back differently: storing the
//! part they lie in instead of the chunk gives the same bits for less work.
//!
//! Every fault but a scale spanning more than a page keeps a row's
//! read-back within its page, or its pair of pages (`pages-swapped`): the
//! writer's scale spans a row or a page (a stale scale is the previous
//! row's, of the same page), a scale word is read from the next slot of
//! the page, a page's bytes are relaid within the page, and a reader
//! fetches a slot of its own page or of the other page of its pair. Zeroed
//! pages, the mixed cache's split and the flavour codes are decoded in act
//! row by row, by position. So a part made of whole page groups reads back
//! as its rows do in the whole chunk.

use super::{At, KeyCacheFaults, PageLayoutFault, ScaleSpan, ScaleWordFault, PAGE_ROWS, TENSOR_SPAN_ROWS};
use crate::error::SimError;
use crate::numerics::format::BlockShape;
use crate::numerics::pipeline::{QuantPipeline, QuantizedRows};
use std::ops::Range;

/// Rows `rows` (chunk-relative) of a chunk of `n_rows` rows stored from
/// cache row `first_row` (a multiple of [`TENSOR_SPAN_ROWS`]), stored on
/// their own ([`KeyCacheFaults::store_part`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkPart {
    pub first_row: u64,
    pub n_rows: usize,
    pub rows: Range<usize>,
}

impl KeyCacheFaults {
    /// Aligned rows within which every row's read-back stays: a page, or a
    /// pair of pages when pages are read in each other's place.
    fn group_rows(&self) -> usize {
        if self.pages_swapped {
            2 * PAGE_ROWS
        } else {
            PAGE_ROWS
        }
    }

    /// Whether every row's read-back depends on its group's rows alone: not
    /// with a scale spanning more than a page, the writer's or the key
    /// pipeline's.
    fn reads_within_groups(&self, key: &QuantPipeline) -> bool {
        self.scale_span != ScaleSpan::Tensor && key.scaling.is_none_or(|s| s.shape != BlockShape::Tensor)
    }

    /// The rows of a chunk of `n_rows` rows whose read-back (values or
    /// scale) can change when the rows `written` (chunk-relative) are
    /// written through `key` with other values, ascending; None when any
    /// row can (a scale spanning the chunk). It follows the steps of
    /// [`Self::store`] whatever the values: it may name rows that read back
    /// the same, never leaves out one that does not.
    pub fn readers_of(&self, key: &QuantPipeline, written: &[usize], n_rows: usize) -> Option<Vec<usize>> {
        if !self.reads_within_groups(key) {
            return None;
        }
        let page_of = |r: usize| (r / PAGE_ROWS * PAGE_ROWS)..((r / PAGE_ROWS + 1) * PAGE_ROWS).min(n_rows);
        // Step 1, write: the rows written differently.
        let mut changed = vec![false; n_rows];
        for &r in written.iter().filter(|&&r| r < n_rows) {
            if self.scale_span == ScaleSpan::Page {
                changed[page_of(r)].fill(true);
            } else {
                changed[r] = true;
                // The next row of the page takes this row's scale.
                if self.stale_scale && (r + 1) % PAGE_ROWS != 0 && r + 1 < n_rows {
                    changed[r + 1] = true;
                }
            }
        }
        // Step 2, memory: a slot reads the next slot's scale word (mod the page).
        if self.scale_word == ScaleWordFault::NextSlot {
            let own = changed.clone();
            for r in (0..n_rows).filter(|&r| own[r]) {
                let reader = r / PAGE_ROWS * PAGE_ROWS + (r + PAGE_ROWS - 1) % PAGE_ROWS;
                if reader < n_rows {
                    changed[reader] = true;
                }
            }
        }
        // Step 3, read: a page's bytes relaid mix its rows; each row is
        // fetched from its source row (past the chunk: zeros, whatever was written).
        if self.page_layout != PageLayoutFault::None {
            for first in (0..n_rows).step_by(PAGE_ROWS) {
                let page = page_of(first);
                if changed[page.clone()].contains(&true) {
                    changed[page].fill(true);
                }
            }
        }
        Some(
            (0..n_rows)
                .filter(|&r| {
                    let s = self.source_row(r);
                    s < n_rows && changed[s]
                })
                .collect(),
        )
    }

    /// The parts of a chunk of `n_rows` rows to store again when the rows
    /// `written` change: runs of whole page groups, ascending, holding every
    /// row [`Self::readers_of`] names and every row those rows read; None
    /// when the whole chunk must be stored again.
    pub fn parts_reading(&self, key: &QuantPipeline, written: &[usize], n_rows: usize) -> Option<Vec<Range<usize>>> {
        let g = self.group_rows();
        let mut parts: Vec<Range<usize>> = Vec::new();
        for r in self.readers_of(key, written, n_rows)? {
            let group = (r / g * g)..((r / g + 1) * g).min(n_rows);
            match parts.last_mut() {
                Some(last) if last.end >= group.start => last.end = last.end.max(group.end),
                _ => parts.push(group),
            }
        }
        Some(parts)
    }

    /// [`Self::store`] of `part` of a chunk alone, from the part's rows
    /// `raw`: the same bits as those rows of the whole chunk stored, for a
    /// part of whole page groups ([`Self::parts_reading`]).
    pub fn store_part(
        &self,
        key: &QuantPipeline,
        raw: &[f32],
        part: &ChunkPart,
        request: u64,
        d: usize,
        out: &mut QuantizedRows,
    ) -> Result<(), SimError> {
        self.check_part(key, part, raw.len(), d)?;
        self.store_at(key, raw, part_at(part, request), d, out)
    }

    /// [`Self::store_quantized`] of `part` of a chunk alone, from the part's
    /// rows as `key` quantizes them: the same bits as those rows of the
    /// whole chunk stored, for a part of whole page groups.
    pub fn store_quantized_part(
        &self,
        key: &QuantPipeline,
        quantized: &QuantizedRows,
        part: &ChunkPart,
        d: usize,
        out: &mut QuantizedRows,
    ) -> Result<(), SimError> {
        self.check_part(key, part, quantized.values.len(), d)?;
        if quantized.row_scales.len() != part.rows.len() {
            return Err(SimError::Hypothesis(format!(
                "a part of {} rows needs {} row scales, not {}",
                part.rows.len(),
                part.rows.len(),
                quantized.row_scales.len()
            )));
        }
        self.store_quantized_at(key, quantized, part_at(part, 0), d, out)
    }

    /// Refuses a part that is not whole page groups of an aligned chunk,
    /// or faults whose rows read beyond their group.
    fn check_part(&self, key: &QuantPipeline, part: &ChunkPart, values: usize, d: usize) -> Result<(), SimError> {
        let g = self.group_rows();
        let ChunkPart { first_row, n_rows, rows } = part;
        let whole_groups = rows.start.is_multiple_of(g)
            && rows.start < rows.end
            && rows.end <= *n_rows
            && (rows.end == *n_rows || rows.end.is_multiple_of(g));
        if !self.reads_within_groups(key) {
            return Err(SimError::Hypothesis(format!("key cache faults {self:?} read rows across the chunk: store it whole")));
        }
        if !first_row.is_multiple_of(TENSOR_SPAN_ROWS as u64) || !whole_groups || values != rows.len() * d {
            return Err(SimError::Hypothesis(format!(
                "rows {rows:?} ({values} values of {d}) of a chunk of {n_rows} rows from row {first_row} are not whole {g}-row page groups of a chunk starting at a multiple of {TENSOR_SPAN_ROWS}"
            )));
        }
        Ok(())
    }
}

fn part_at(part: &ChunkPart, request: u64) -> At {
    At { first_row: part.first_row + part.rows.start as u64, request, whole_chunk: false }
}

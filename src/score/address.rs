//! Address-space faults of a compressed or pooled indexer (hypotheses
//! `visible-cap=P`, `block0-repeat=S`, `slot-stride-half`,
//! `workspace-clamp=W`, `chunk-stale`; docs/HYPOTHESES.md): the indexer
//! reads the keys of other rows than the ones it scores under, or none,
//! from a row set by an absolute position or the deployment's geometry.
//!
//! They act on the scores the indexer assembles before its top-k: row j's
//! score is the score of the row its address reaches (the same query
//! against that row's key is that row's score), 0 where it reaches a zero
//! scale or unwritten memory, or the row is no candidate at all. The
//! needle's rows are judged under their own numbers, so a needle whose key
//! is read under another row's number is selected there and lost. Scores
//! are computed as the base variant's, so a variant with such a fault
//! shares them with its base.

use serde::{Deserialize, Serialize};

/// Rows of a page of the paged indexer cache (as the cache faults').
const PAGE_ROWS: usize = crate::numerics::key_cache::PAGE_ROWS;

/// What lies past a visible-range bound (`visible-cap*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Beyond {
    /// Never selected: the rows are no candidates.
    Unreachable,
    /// A zero scale is gathered: every such row scores exactly 0.
    ZeroScale,
    /// The table's columns wrap: row j reads row j mod R.
    WrongPages,
}

/// Which rows the indexer's addresses reach; the default reaches every row
/// it scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AddressFault {
    #[default]
    None,
    /// Only positions below `tokens` are addressable (rows below
    /// ⌊tokens / c⌋); the rest as `beyond` says.
    VisibleCap { tokens: u64, beyond: Beyond },
    /// Rows past a slot capacity of `tokens` (⌊tokens / c⌋ rows) are clamped
    /// to physical block 0: row j reads row j mod 64.
    Block0Repeat { tokens: u64 },
    /// The writer's slot mapping steps half a page per table column: the
    /// reader's row 64q + s holds written row 32q + s for s < 32 and
    /// unwritten memory (score 0) for the rest.
    StrideHalf,
    /// A workspace of `tokens` (⌊tokens / c⌋ rows) clamps every later row
    /// to its last one.
    WorkspaceClamp { tokens: u64 },
    /// Rows completed in prefill chunks before the query's are scored from
    /// a stale state: row i < F reads row (i + ⌈F/2⌉) mod F.
    ChunkStale,
}

impl AddressFault {
    pub fn is_none(&self) -> bool {
        *self == AddressFault::None
    }

    /// Whether it needs the scenario's prefill chunk.
    pub fn needs_chunk(&self) -> bool {
        *self == AddressFault::ChunkStale
    }

    /// The first row that is no candidate among `rows`, with `ratio` tokens
    /// a row (`rows` when every row is one).
    pub fn candidate_end(&self, rows: usize, ratio: u64) -> usize {
        match *self {
            AddressFault::VisibleCap { tokens, beyond: Beyond::Unreachable } => rows.min(bound_rows(tokens, ratio)),
            _ => rows,
        }
    }

    /// The row whose score row `j` takes (None: a score of 0), among `rows`
    /// candidate rows; `bound` is the fault's bound in rows
    /// ([`Self::bound`]). Identity where the fault leaves the row alone.
    fn source(&self, j: usize, bound: usize) -> Option<usize> {
        match *self {
            AddressFault::None => Some(j),
            AddressFault::VisibleCap { beyond, .. } => match beyond {
                _ if j < bound => Some(j),
                Beyond::Unreachable => Some(j),
                Beyond::ZeroScale => None,
                Beyond::WrongPages => Some(j % bound.max(1)),
            },
            AddressFault::Block0Repeat { .. } if j >= bound => Some(j % PAGE_ROWS),
            AddressFault::WorkspaceClamp { .. } if j >= bound => Some(bound.saturating_sub(1)),
            AddressFault::Block0Repeat { .. } | AddressFault::WorkspaceClamp { .. } => Some(j),
            AddressFault::StrideHalf => {
                let (page, slot) = (j / PAGE_ROWS, j % PAGE_ROWS);
                (slot < PAGE_ROWS / 2).then_some(page * PAGE_ROWS / 2 + slot)
            }
            AddressFault::ChunkStale if j < bound => Some((j + bound.div_ceil(2)) % bound),
            AddressFault::ChunkStale => Some(j),
        }
    }

    /// The fault's bound in rows: the first row past the addressable
    /// range, or the first row of the query's prefill chunk
    /// (`chunk_first_row`) for `chunk-stale`.
    fn bound(&self, ratio: u64, chunk_first_row: usize) -> usize {
        match *self {
            AddressFault::VisibleCap { tokens, .. } | AddressFault::Block0Repeat { tokens } | AddressFault::WorkspaceClamp { tokens } => {
                bound_rows(tokens, ratio)
            }
            AddressFault::ChunkStale => chunk_first_row,
            AddressFault::None | AddressFault::StrideHalf => usize::MAX,
        }
    }

    /// `scores` (rows 0 …, the candidates) as the faulty indexer assembles
    /// them, with `ratio` tokens a row and the query's prefill chunk
    /// starting at row `chunk_first_row`; None when the fault changes none
    /// of these rows (a context within the bound), so that the variant is
    /// its base there, bit for bit.
    pub fn read_scores(&self, scores: &[f32], ratio: u64, chunk_first_row: usize) -> Option<Vec<f32>> {
        let bound = self.bound(ratio, chunk_first_row);
        let untouched = match *self {
            AddressFault::None | AddressFault::VisibleCap { beyond: Beyond::Unreachable, .. } => true,
            AddressFault::StrideHalf => scores.len() <= PAGE_ROWS / 2,
            AddressFault::ChunkStale => bound < 2,
            _ => scores.len() <= bound,
        };
        if untouched {
            return None;
        }
        Some((0..scores.len()).map(|j| self.source(j, bound).map_or(0.0, |s| scores[s])).collect())
    }
}

/// Rows wholly below position `tokens` at `ratio` tokens a row.
fn bound_rows(tokens: u64, ratio: u64) -> usize {
    usize::try_from(tokens / ratio.max(1)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32 + 1.0).collect()
    }

    #[test]
    fn a_visible_cap_leaves_rows_below_it_and_acts_past_it() {
        let s = rows(10);
        let cap = |beyond| AddressFault::VisibleCap { tokens: 24, beyond };
        // 24 tokens at ratio 4: rows 0 … 5 addressable.
        assert_eq!(cap(Beyond::Unreachable).candidate_end(10, 4), 6);
        assert_eq!(cap(Beyond::Unreachable).read_scores(&s, 4, 0), None);
        assert_eq!(cap(Beyond::ZeroScale).read_scores(&s, 4, 0).unwrap(), [1., 2., 3., 4., 5., 6., 0., 0., 0., 0.]);
        assert_eq!(cap(Beyond::WrongPages).read_scores(&s, 4, 0).unwrap(), [1., 2., 3., 4., 5., 6., 1., 2., 3., 4.]);
        // A context within the cap is untouched.
        assert_eq!(cap(Beyond::ZeroScale).read_scores(&s[..6], 4, 0), None);
        assert_eq!(cap(Beyond::ZeroScale).candidate_end(6, 4), 6);
    }

    #[test]
    fn block0_repeat_stride_clamp_and_stale_chunks_read_the_rows_their_addresses_reach() {
        let s = rows(200);
        let b0 = AddressFault::Block0Repeat { tokens: 4 * 128 }.read_scores(&s, 4, 0).unwrap();
        assert_eq!(&b0[..128], &s[..128]);
        assert_eq!((b0[128], b0[191], b0[192]), (1.0, 64.0, 1.0), "rows past 128 read page 0's slots");
        let half = AddressFault::StrideHalf.read_scores(&s, 4, 0).unwrap();
        assert_eq!((half[0], half[31], half[32], half[63]), (1.0, 32.0, 0.0, 0.0));
        assert_eq!((half[64], half[95], half[96]), (33.0, 64.0, 0.0), "page 1 holds written rows 32 … 63");
        assert_eq!(AddressFault::StrideHalf.read_scores(&s[..32], 4, 0), None);
        let clamp = AddressFault::WorkspaceClamp { tokens: 400 }.read_scores(&s, 4, 0).unwrap();
        assert_eq!((clamp[99], clamp[100], clamp[199]), (100.0, 100.0, 100.0));
        let stale = AddressFault::ChunkStale.read_scores(&s[..10], 4, 5).unwrap();
        assert_eq!(stale, [4., 5., 1., 2., 3., 6., 7., 8., 9., 10.], "rows 0 … 4 rotated by 3, the query's chunk intact");
        assert_eq!(AddressFault::ChunkStale.read_scores(&s[..10], 4, 0), None);
        // No row reads itself in the stale chunks: the needle's own score never stays.
        let stale = AddressFault::ChunkStale.read_scores(&s, 4, 7).unwrap();
        assert!((0..7).all(|i| stale[i] != s[i]));
    }
}

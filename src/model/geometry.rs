//! Where tokens land: compressed rows, the raw window, and the needle's rows.
//!
//! Token positions are 0-based; a context of `L` tokens is positions
//! 0 … L−1 and the decoding query sits at position L−1.

use serde::{Deserialize, Serialize};
use std::ops::Range;

/// How the KV cache is compressed into indexer rows and what is always seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressionGeometry {
    /// Tokens per row stride `c` (1 = token-level as V3.2, 4 = V4 CSA, 128 = HCA).
    pub ratio: u64,
    /// V4 CSA: row `i` also pools the `c` tokens before its own (an 8-token window for c = 4).
    pub overlap: bool,
    /// Raw window: the `W` most recent tokens, always attended.
    pub window: u64,
    /// Whether rows whose own tokens all lie inside the raw window still
    /// compete in the top-k (true in the DeepSeek reference; see docs/MODEL.md).
    pub window_rows_compete: bool,
}

/// The needle's place in one context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeedlePlacement {
    /// Needle tokens, `start .. start + len`.
    pub tokens: Range<u64>,
    /// Visible rows whose window holds at least one needle token.
    pub rows: Range<u64>,
    /// Every needle token lies in the raw window.
    pub in_window: bool,
}

impl CompressionGeometry {
    /// Rows complete for a query at position L−1: row i exists iff i < L div c.
    pub fn visible_rows(&self, context: u64) -> u64 {
        context / self.ratio
    }

    /// Rows that take part in the top-k. Rows form a prefix because rows are
    /// ordered by position and the excluded ones (if any) are the newest.
    pub fn candidate_rows(&self, context: u64) -> u64 {
        let visible = self.visible_rows(context);
        if self.window_rows_compete {
            return visible;
        }
        // Row i's own tokens c·i … c·i+c−1 all lie in the window iff c·i ≥ L−W.
        let outside = context.saturating_sub(self.window);
        visible.min(outside.div_ceil(self.ratio))
    }

    /// The first row a query at position L−1 sees when its indexer sees
    /// only rows completed within its own prefill chunk of `chunk` tokens
    /// (0: one chunk, row 0). The query's chunk starts at
    /// C = ⌊(L−1)/N⌋·N; row i completes with token c(i+1)−1, so it is
    /// the chunk's when c(i+1) > C, i.e. i ≥ ⌊C/c⌋.
    pub fn chunk_first_row(&self, context: u64, chunk: u64) -> u64 {
        if chunk == 0 {
            return 0;
        }
        (context.saturating_sub(1) / chunk * chunk) / self.ratio
    }

    /// Tokens pooled by row `i`.
    pub fn row_tokens(&self, row: u64) -> Range<u64> {
        let own = row * self.ratio;
        let start = if self.overlap { own.saturating_sub(self.ratio) } else { own };
        start..own + self.ratio
    }

    /// Coverage limit k·c + W: the longest context in which every token can
    /// still be reached by k rows plus the window.
    pub fn coverage_limit(&self, topk: u64) -> u64 {
        topk * self.ratio + self.window
    }

    /// First needle token for a needle of `len` tokens at `depth_percent`
    /// (0 = first token of the context, 100 = ends at the last token).
    pub fn needle_start(context: u64, len: u64, depth_percent: f64) -> u64 {
        let span = context.saturating_sub(len) as f64;
        // Round half away from zero; depth is validated to lie in 0 … 100.
        ((depth_percent / 100.0) * span).round() as u64
    }

    /// Places a needle of `len` tokens at `depth_percent` in a context.
    pub fn place_needle(&self, context: u64, len: u64, depth_percent: f64) -> NeedlePlacement {
        self.place_needle_at(context, len, depth_percent, None)
    }

    /// Like [`Self::place_needle`], but with `offset` the needle starts at
    /// token `offset` of the row stride its depth falls in (`offset < ratio`),
    /// one stride earlier if it would not fit.
    pub fn place_needle_at(&self, context: u64, len: u64, depth_percent: f64, offset: Option<u64>) -> NeedlePlacement {
        let mut start = Self::needle_start(context, len, depth_percent);
        if let Some(o) = offset {
            start = start / self.ratio * self.ratio + o;
            while start + len > context && start >= self.ratio {
                start -= self.ratio;
            }
        }
        self.placement_from(context, start.min(context.saturating_sub(len)), len)
    }

    /// The placement of `len` tokens from token `start`: another layer's
    /// rows for a needle placed by the simulated layer.
    pub fn place_tokens(&self, context: u64, start: u64, len: u64) -> NeedlePlacement {
        self.placement_from(context, start, len)
    }

    fn placement_from(&self, context: u64, start: u64, len: u64) -> NeedlePlacement {
        let end = (start + len).min(context);
        let first_row = start / self.ratio;
        let last_token = end.saturating_sub(1);
        let mut last_row = last_token / self.ratio;
        if self.overlap {
            // The next row pools this row's tokens as its "previous" half.
            last_row += 1;
        }
        let visible = self.candidate_rows(context);
        let rows = first_row.min(visible)..(last_row + 1).min(visible);
        NeedlePlacement { tokens: start..end, rows, in_window: start >= context.saturating_sub(self.window) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csa() -> CompressionGeometry {
        CompressionGeometry { ratio: 4, overlap: true, window: 128, window_rows_compete: true }
    }

    #[test]
    fn a_chunk_sees_the_rows_completed_in_it() {
        let g = csa();
        // ml-explore/mlx-lm #1189: 6,042 tokens, chunks of 2,048: the last
        // chunk (tokens 4096 …) emitted 486 of 1,510 rows.
        assert_eq!((g.chunk_first_row(6042, 2048), g.visible_rows(6042)), (1024, 1510));
        assert_eq!(g.visible_rows(6042) - g.chunk_first_row(6042, 2048), 486);
        // The query is token L−1: a context of exactly 2·N is still in chunk 1.
        assert_eq!(g.chunk_first_row(4096, 2048), 512);
        assert_eq!(g.chunk_first_row(4097, 2048), 1024);
        // A chunk that is not a multiple of the ratio: row 1024 (tokens
        // 4092 … 4099 with overlap) completes at token 4099 ≥ 4097.
        assert_eq!(g.chunk_first_row(5000, 4097), 1024);
        assert_eq!(g.chunk_first_row(6042, 0), 0);
        assert_eq!(g.chunk_first_row(100, 2048), 0);
    }

    #[test]
    fn rows_exist_only_once_complete() {
        let g = csa();
        assert_eq!(g.visible_rows(3), 0);
        assert_eq!(g.visible_rows(4), 1);
        assert_eq!(g.visible_rows(4099), 1024);
    }

    #[test]
    fn overlapping_rows_pool_eight_tokens() {
        let g = csa();
        assert_eq!(g.row_tokens(0), 0..4);
        assert_eq!(g.row_tokens(1), 0..8);
        assert_eq!(g.row_tokens(10), 36..44);
    }

    #[test]
    fn needle_rows_are_exactly_rows_whose_window_holds_a_needle_token() {
        for overlap in [false, true] {
            for ratio in [1, 4, 128] {
                let g = CompressionGeometry { ratio, overlap: overlap && ratio > 1, window: 128, window_rows_compete: true };
                for context in [1000u64, 4096, 5003] {
                    for len in [1u64, 3, 4, 9] {
                        for depth in [0.0, 13.0, 50.0, 99.0, 100.0] {
                            let p = g.place_needle(context, len, depth);
                            let brute: Vec<u64> = (0..g.candidate_rows(context))
                                .filter(|&i| {
                                    let t = g.row_tokens(i);
                                    t.start < p.tokens.end && p.tokens.start < t.end
                                })
                                .collect();
                            let got: Vec<u64> = p.rows.clone().collect();
                            assert_eq!(got, brute, "ratio {ratio} overlap {overlap} L {context} len {len} depth {depth}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn offsets_put_the_needle_at_that_token_of_its_stride() {
        let g = csa();
        for o in 0..4 {
            let p = g.place_needle_at(1000, 4, 50.0, Some(o));
            assert_eq!(p.tokens.start % 4, o);
            assert!(p.tokens.start.abs_diff(498) < 4, "{:?}", p.tokens);
            // At the very end the needle moves one stride back to fit.
            let end = g.place_needle_at(1000, 4, 100.0, Some(o));
            assert_eq!(end.tokens.start % 4, o);
            assert!(end.tokens.end <= 1000);
        }
        assert_eq!(g.place_needle_at(1000, 4, 50.0, None), g.place_needle(1000, 4, 50.0));
    }

    #[test]
    fn depth_maps_to_start_and_end() {
        assert_eq!(CompressionGeometry::needle_start(1000, 4, 0.0), 0);
        assert_eq!(CompressionGeometry::needle_start(1000, 4, 100.0), 996);
        let g = csa();
        assert!(g.place_needle(1000, 4, 100.0).in_window);
        assert!(!g.place_needle(1000, 4, 50.0).in_window);
    }

    #[test]
    fn excluding_window_rows_leaves_exactly_k_candidates_at_the_coverage_limit() {
        let g = CompressionGeometry { window_rows_compete: false, ..csa() };
        for k in [1u64, 64, 512, 1024] {
            let limit = g.coverage_limit(k);
            assert_eq!(g.candidate_rows(limit), k);
            assert_eq!(g.candidate_rows(limit + 1), k + 1);
        }
        assert_eq!(csa().coverage_limit(512), 2176);
    }
}

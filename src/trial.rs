//! One trial: one decode query at the end of a context, one haystack, one
//! needle, scored under every precision variant and ranked for every k.
//!
//! One trial serves every context length of a sweep: haystack row `i` is a
//! pure function of (trial seed, i), so the first N rows of the longest
//! haystack *are* the haystack of a shorter context. Every cell therefore
//! sees an exact draw from the model, and its result does not depend on
//! which other contexts are in the sweep (see docs/MODEL.md, "Sharing").

use crate::error::SimError;
use crate::geometry::{CompressionGeometry, NeedlePlacement};
use crate::haystack::{GenerativeModel, TrialHaystack};
use crate::indexer::IndexerQuery;
use crate::precision::{PrecisionVariant, QuantizedRows};
use crate::rng::{self, tag};
use crate::selection::{kth_largest_many, selection_overlap, tally, tie_key, tied_ahead, NeedleRank, TieRule};
use serde::Serialize;

/// Rows generated, quantized and scored together: small enough to stay in
/// L2 cache (256 rows × 128 dims × 4 bytes = 128 KiB).
const CHUNK_ROWS: usize = 256;

/// What a trial simulates.
#[derive(Clone, Debug)]
pub struct TrialSpec<'a> {
    pub model: &'a GenerativeModel,
    pub geometry: CompressionGeometry,
    /// Context lengths in tokens, ascending.
    pub contexts: &'a [u64],
    pub depth_percent: f64,
    pub needle_tokens: u64,
    /// Top-k values, ascending.
    pub topks: &'a [u64],
    pub variants: &'a [PrecisionVariant],
    pub tie_rule: TieRule,
    /// Variant whose top-k set the others are compared with (selection
    /// fidelity); the exact `fp32` variant when the sweep has it.
    pub fidelity_reference: Option<usize>,
}

/// The needle's fate in one cell of one trial.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
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
    const LOST: NeedleOutcome =
        NeedleOutcome { survived: false, via_window: false, rank: None, margin: None, margin_sd: None, selection_recall: None, jaccard: None };
}

/// Outcomes of one trial, indexed by [`TrialSpec::cell_index`].
#[derive(Clone, Debug, PartialEq)]
pub struct TrialOutcome {
    pub cells: Vec<NeedleOutcome>,
}

impl TrialSpec<'_> {
    /// Index of (context, topk, variant) in [`TrialOutcome::cells`].
    pub fn cell_index(&self, context: usize, topk: usize, variant: usize) -> usize {
        (context * self.topks.len() + topk) * self.variants.len() + variant
    }

    pub fn cell_count(&self) -> usize {
        self.contexts.len() * self.topks.len() * self.variants.len()
    }

    pub fn placement(&self, context: u64) -> NeedlePlacement {
        self.geometry.place_needle(context, self.needle_tokens, self.depth_percent)
    }

    /// Runs the trial seeded by `trial_seed`.
    pub fn run(&self, trial_seed: u64) -> Result<TrialOutcome, SimError> {
        let d = self.model.shape.head_dim;
        let haystack = TrialHaystack::draw(self.model, trial_seed)?;
        let queries: Vec<IndexerQuery> = self
            .variants
            .iter()
            .map(|v| {
                let q = v.query.quantize_rows(&haystack.queries, d)?;
                Ok(IndexerQuery::new(q, &haystack.weights, d, v.scoring))
            })
            .collect::<Result<_, SimError>>()?;

        // Score every candidate row of the longest context once per variant.
        let max_rows = self.contexts.iter().map(|&l| self.geometry.candidate_rows(l)).max().unwrap_or(0) as usize;
        let mut scores: Vec<Vec<f32>> = vec![vec![0.0; max_rows]; self.variants.len()];
        let mut raw = vec![0.0f32; CHUNK_ROWS * d];
        let mut quantized = QuantizedRows::with_capacity(CHUNK_ROWS, d);
        for start in (0..max_rows).step_by(CHUNK_ROWS) {
            let n = CHUNK_ROWS.min(max_rows - start);
            haystack.fill_haystack_rows(start as u64, &mut raw[..n * d]);
            for (v, variant) in self.variants.iter().enumerate() {
                let out = &mut scores[v][start..start + n];
                if variant.key.is_identity() {
                    queries[v].score_rows(&raw[..n * d], out);
                } else {
                    variant.key.quantize_rows_into(&raw[..n * d], d, &mut quantized)?;
                    queries[v].score_quantized_rows(&quantized, out);
                }
            }
        }

        let mut cells = vec![NeedleOutcome::LOST; self.cell_count()];
        let mut key = vec![0.0f32; d];
        let mut quantized_key = QuantizedRows::with_capacity(1, d);
        let mut scratch: Vec<f32> = Vec::with_capacity(max_rows);
        let mut kth = Vec::new();
        let priority = |row: usize| rng::derive(trial_seed, &[tag::TIE, row as u64]);
        // Fidelity compares whole top-k sets, so it needs every row's place in
        // the tie order, and each variant's scores with the needle rows in.
        let tie_keys: Vec<u64> = match self.fidelity_reference {
            Some(_) if self.variants.len() > 1 => (0..max_rows).map(|i| tie_key(self.tie_rule, i, priority)).collect(),
            _ => Vec::new(),
        };
        let mut with_needle: Vec<Vec<f32>> = vec![Vec::new(); if tie_keys.is_empty() { 0 } else { self.variants.len() }];
        let mut row_order: Vec<u32> = Vec::new();

        for (ci, &context) in self.contexts.iter().enumerate() {
            let placement = self.placement(context);
            let candidates = self.geometry.candidate_rows(context) as usize;
            let skip = placement.rows.start as usize..placement.rows.end as usize;
            let k_effs: Vec<usize> = self.topks.iter().map(|&k| (k as usize).min(candidates)).collect();

            // Needle rows' scores: [variant][needle row].
            let mut needle_scores = vec![Vec::with_capacity(skip.len()); self.variants.len()];
            for row in placement.rows.clone() {
                haystack.fill_needle_row(row, &mut key);
                for (v, variant) in self.variants.iter().enumerate() {
                    variant.key.quantize_rows_into(&key, d, &mut quantized_key)?;
                    needle_scores[v].push(queries[v].score_one_scaled(&quantized_key.values, quantized_key.row_scales[0]));
                }
            }

            if !tie_keys.is_empty() {
                for (v, buf) in with_needle.iter_mut().enumerate() {
                    buf.clear();
                    buf.extend_from_slice(&scores[v][..candidates]);
                    buf[skip.clone()].copy_from_slice(&needle_scores[v]);
                }
            }

            for v in 0..self.variants.len() {
                let visible = &scores[v][..candidates];
                // Best needle row: highest score (NaN-safe total order), first on ties.
                let best = needle_scores[v]
                    .iter()
                    .copied()
                    .reduce(|a, b| if b.total_cmp(&a).is_gt() { b } else { a });
                let Some(best) = best else {
                    for ki in 0..self.topks.len() {
                        let via_window = placement.in_window;
                        cells[self.cell_index(ci, ki, v)] = NeedleOutcome { survived: via_window, via_window, ..NeedleOutcome::LOST };
                    }
                    continue;
                };
                let t = tally(visible, skip.clone(), best);
                // Tied competitors the tie rule puts ahead of the best needle
                // row; if several needle rows tie for best, the luckiest counts.
                let tied = if t.rank.above_or_equal > t.rank.above {
                    needle_scores[v]
                        .iter()
                        .enumerate()
                        .filter(|(_, &s)| s == best)
                        .map(|(j, _)| tied_ahead(visible, skip.clone(), skip.start + j, best, self.tie_rule, priority))
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
                    kth_largest_many(&mut scratch, &ks_with_margin, &mut kth);
                }
                for (ki, &k_eff) in k_effs.iter().enumerate() {
                    let by_rank = (t.rank.above + tied) < k_eff as u64;
                    let margin = ks_with_margin.iter().position(|&k| k == k_eff).map(|p| best - kth[p]);
                    let margin_sd = margin.filter(|_| t.std > 0.0).map(|m| f64::from(m) / t.std);
                    cells[self.cell_index(ci, ki, v)] = NeedleOutcome {
                        survived: placement.in_window || by_rank,
                        via_window: placement.in_window,
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
                        let both = selection_overlap(&with_needle[r], &with_needle[v], &tie_keys[..candidates], k_eff, &mut row_order);
                        let cell = &mut cells[self.cell_index(ci, ki, v)];
                        cell.selection_recall = Some(both as f64 / k_eff as f64);
                        cell.jaccard = Some(both as f64 / (2 * k_eff as u64 - both) as f64);
                    }
                }
            }
        }
        Ok(TrialOutcome { cells })
    }
}

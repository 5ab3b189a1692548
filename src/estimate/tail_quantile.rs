//! Tail sampling under the quantile needle (docs/MODEL.md, "Tail sampling
//! under the quantile needle"): a trial's outcome in every cell without
//! scoring every row.
//!
//! The full simulation draws the needle's rank m in the exact (fp32)
//! reference and places the needle between the m-th and (m+1)-th exact
//! haystack scores; a variant then ranks it among the same rows, some of
//! which its rounding moves across the needle. Here the trial's weighted
//! sample (the tail estimator's rows, scored exactly and by every variant)
//! stands in for the rows: the needle is placed where the sample puts m
//! rows above it in expectation, and, given that exactly m rows beat it
//! exactly, the variant's rank is m − D + R, D ~ Binomial(m, P(a row above
//! falls behind | above)) and R ~ Binomial(N − m, P(a row below gets ahead
//! | below)), both shares read from the sample (ties by the tie rule's
//! share). The result is a [`TrialOutcome`] like the full simulation's, so
//! recall, paired comparisons, the margin and whole-model recall reduce
//! as they do there.

use super::full::Full;
use super::sample::score_keys;
use super::survival::tie_share;
use super::tail::{positional_sample, tilt};
use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::estimate::estimator::{CellEstimate, Estimator};
use crate::model::geometry::NeedlePlacement;
use crate::model::haystack::TrialHaystack;
use crate::model::needle::{exceedance_of, open_uniform, rank_quantile, NeedleDraw};
use crate::model::row_source::{scaled_key, Item, TrialRows};
use crate::numerics::pipeline::QuantizedRows;
use crate::score::indexer::IndexerQuery;
use crate::score::needle::{solve_scale, NeedleSolve};
use crate::score::selection::NeedleRank;
use crate::score::trial::{context_queries, NeedleOutcome, TrialOutcome, TrialSpec};
use crate::score::variant::PrecisionVariant;
use rand::Rng;
use std::collections::HashMap;

/// The tail-sampling estimator under the quantile needle: `rows` rows
/// drawn per trial, context and needle spot.
#[derive(Clone, Copy, Debug)]
pub struct TailQuantile {
    pub rows: u64,
}

impl Estimator for TailQuantile {
    const NAME: &'static str = "tail-quantile";
    type Trial = TrialOutcome;
    type Cell = CellEstimate;

    fn trial(&self, spec: &TrialSpec<'_>, trial_seed: u64) -> Result<TrialOutcome, SimError> {
        sampled_trial(spec, trial_seed, self.rows)
    }

    /// Reduced as the full simulation's trials are.
    fn cells(&self, spec: &TrialSpec<'_>, trials: &[TrialOutcome]) -> Vec<CellEstimate> {
        Full.cells(spec, trials)
    }

    fn first_cell_outcomes(&self, trials: &[TrialOutcome]) -> Vec<NeedleOutcome> {
        Full.first_cell_outcomes(trials)
    }
}

/// One context and needle spot's weighted sample: every row's importance
/// weight, exact score and score under each variant.
struct Sample {
    /// N: the haystack rows the sample stands for.
    hay_rows: u64,
    weights: Vec<f64>,
    exact: Vec<f32>,
    variants: Vec<Vec<f32>>,
    /// Row indices by descending exact score, and the running sums of their weights.
    order: Vec<usize>,
    cum_weight: Vec<f64>,
}

impl Sample {
    fn new(hay_rows: u64, weights: Vec<f64>, exact: Vec<f32>, variants: Vec<Vec<f32>>) -> Self {
        let mut order: Vec<usize> = (0..exact.len()).collect();
        order.sort_by(|&a, &b| exact[b].total_cmp(&exact[a]));
        let mut w = 0.0;
        let cum_weight = order
            .iter()
            .map(|&i| {
                w += weights[i];
                w
            })
            .collect();
        Sample { hay_rows, weights, exact, variants, order, cum_weight }
    }

    /// The sample `keys` with their `weights`, standing for `hay_rows`
    /// rows, scored by the exact variant and by each variant.
    fn scored(
        hay_rows: u64,
        (keys, weights): (&[f32], &[f64]),
        (exact_variant, exact_query): (&PrecisionVariant, &IndexerQuery),
        (variants, queries): (&[PrecisionVariant], &[IndexerQuery]),
        quantized: &mut QuantizedRows,
    ) -> Result<Self, SimError> {
        let d = keys.len() / weights.len().max(1);
        let mut exact = vec![0.0f32; weights.len()];
        score_keys(exact_variant, exact_query, keys, d, quantized, &mut exact)?;
        let mut scored = Vec::with_capacity(variants.len());
        for (variant, query) in variants.iter().zip(queries) {
            let mut s = vec![0.0f32; weights.len()];
            score_keys(variant, query, keys, d, quantized, &mut s)?;
            scored.push(s);
        }
        Ok(Sample::new(hay_rows, weights.to_vec(), exact, scored))
    }

    /// N · p̂(S > s): the haystack rows expected to beat exact score `s`.
    fn expected_above(&self, s: f32) -> f64 {
        let m = self.order.len();
        let above = self.order.partition_point(|&i| self.exact[i] > s);
        if above == 0 || m == 0 {
            return 0.0;
        }
        self.hay_rows as f64 * self.cum_weight[above - 1] / m as f64
    }

    /// The exact scores a needle with `rank` haystack rows above it lies
    /// between, as the sample sees it: the gap between two sample rows
    /// where the expected count above is nearest rank + ½ (the middle of
    /// the m-th and (m+1)-th order statistics), and its midpoint.
    fn interval(&self, rank: u64) -> (f32, f32, f32) {
        let m = self.order.len();
        if m == 0 {
            return (f32::NEG_INFINITY, f32::INFINITY, 0.0);
        }
        let count = |j: usize| if j == 0 { 0.0 } else { self.hay_rows as f64 * self.cum_weight[j - 1] / m as f64 };
        let target = rank as f64 + 0.5;
        // The first j (sample rows above the needle) whose count reaches
        // the target, or the one before when that is nearer.
        let (mut a, mut b) = (0usize, m + 1);
        while a < b {
            let mid = (a + b) / 2;
            if count(mid) < target {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        let j = if a > m || (a > 0 && target - count(a - 1) < count(a) - target) { a - 1 } else { a };
        let score = |j: usize| self.exact[self.order[j]];
        match (j, j == m) {
            (0, _) => {
                let top = score(0);
                let gap = if m > 1 { top - score(1) } else { 0.0 };
                let gap = gap.max(top.abs() * 1e-3).max(1e-6);
                (top, f32::INFINITY, top + gap)
            }
            (_, true) => {
                let low = score(m - 1);
                let gap = (score(0) - low).max(low.abs() * 1e-3).max(1e-6);
                (f32::NEG_INFINITY, low, low - gap)
            }
            _ => {
                let (lo, hi) = (score(j), score(j - 1));
                (lo, hi, lo + 0.5 * (hi - lo))
            }
        }
    }

    /// For a needle at exact score `s_exact` and variant `v` score
    /// `s_variant`: the share of the rows above it exactly that the variant
    /// keeps ahead of it, and of the rows below that it puts ahead (a row
    /// tied in the variant counts `share`).
    fn crossings(&self, v: usize, s_exact: f32, s_variant: f32, share: f64) -> (f64, f64) {
        let (mut above, mut above_ahead, mut below, mut below_ahead) = (0.0, 0.0, 0.0, 0.0);
        for ((&w, &e), &x) in self.weights.iter().zip(&self.exact).zip(&self.variants[v]) {
            let ahead = if x > s_variant {
                1.0
            } else if x == s_variant {
                share
            } else {
                0.0
            };
            if e > s_exact {
                above += w;
                above_ahead += w * ahead;
            } else {
                below += w;
                below_ahead += w * ahead;
            }
        }
        let stay = if above > 0.0 { above_ahead / above } else { 1.0 };
        let rise = if below > 0.0 { below_ahead / below } else { 0.0 };
        (stay, rise)
    }
}

/// The needle's rows of one context and spot, before finalizing: bare
/// (no offset) and at strength 1, so that scale α gives bare + α·(full − bare).
struct NeedleRows {
    rows: Vec<u64>,
    bare: Vec<f32>,
    full: Vec<f32>,
}

impl NeedleRows {
    /// The trial's own needle rows `rows` holding `items`.
    fn of(source: &mut TrialRows<'_>, items: &[Item], rows: Vec<u64>, d: usize) -> Result<Self, SimError> {
        let (mut bare, mut full) = (vec![0.0f32; rows.len() * d], vec![0.0f32; rows.len() * d]);
        for (i, &row) in rows.iter().enumerate() {
            source.sampled_special_row_scaled(row, items, None, 0.0, &mut bare[i * d..(i + 1) * d])?;
            source.sampled_special_row_scaled(row, items, None, 1.0, &mut full[i * d..(i + 1) * d])?;
        }
        Ok(NeedleRows { rows, bare, full })
    }

    fn keys_at(&self, source: &TrialRows<'_>, scale: f32, d: usize) -> Result<Vec<f32>, SimError> {
        let mut keys = vec![0.0f32; self.full.len()];
        for ((out, bare), full) in keys.chunks_exact_mut(d).zip(self.bare.chunks_exact(d)).zip(self.full.chunks_exact(d)) {
            scaled_key(bare, full, scale, out);
        }
        source.finalize_at(&mut keys, &self.rows)?;
        Ok(keys)
    }
}

/// The best of some scores, NaN last.
fn best_of(scores: &[f32]) -> f32 {
    scores.iter().copied().fold(f32::NEG_INFINITY, |a, b| if b.total_cmp(&a).is_gt() && !b.is_nan() { b } else { a })
}

/// Where the needle sits when placed at one exact rank.
#[derive(Clone)]
struct Placed {
    solve: NeedleSolve,
    keys: Vec<f32>,
    exact_best: f32,
}

/// One context and spot of a trial: its sample, needle rows and queries,
/// with the placements and variant ranks found so far.
struct Case<'s, 'a> {
    source: &'s TrialRows<'a>,
    d: usize,
    sample: Sample,
    needle: NeedleRows,
    exact: (&'s PrecisionVariant, &'s IndexerQuery),
    variants: &'s [PrecisionVariant],
    queries: &'s [IndexerQuery],
    share: f64,
    /// The uniforms that draw D and R, shared by every variant and rank.
    uniforms: (f64, f64),
    placed: HashMap<u64, Placed>,
    quantized: QuantizedRows,
}

impl Case<'_, '_> {
    fn score(&mut self, variant: &PrecisionVariant, query: &IndexerQuery, keys: &[f32]) -> Result<f32, SimError> {
        let mut scores = vec![0.0f32; keys.len() / self.d];
        score_keys(variant, query, keys, self.d, &mut self.quantized, &mut scores)?;
        Ok(best_of(&scores))
    }

    /// The needle placed with `rank` haystack rows above it exactly.
    fn place(&mut self, rank: u64) -> Result<Placed, SimError> {
        if let Some(p) = self.placed.get(&rank) {
            return Ok(p.clone());
        }
        let (lo, hi, target) = self.sample.interval(rank);
        let (variant, query) = self.exact;
        let (scale, capped) = solve_scale(lo, hi, target, |s| {
            let keys = self.needle.keys_at(self.source, s as f32, self.d)?;
            self.score(variant, query, &keys)
        })?;
        let scale = scale as f32;
        let keys = self.needle.keys_at(self.source, scale, self.d)?;
        let exact_best = self.score(variant, query, &keys)?;
        // Outside the gap (the bare row above it, or the norm's cap below
        // it) the needle has the rows the sample puts above its score.
        let expected = self.sample.expected_above(exact_best).round() as u64;
        let hay_above = if exact_best >= hi {
            expected.min(rank)
        } else if exact_best <= lo {
            expected.max(rank)
        } else {
            rank
        };
        let solve = NeedleSolve { scale, hay_rows: self.sample.hay_rows, target_rank: rank, hay_above, fixed_above: 0, capped };
        let placed = Placed { solve, keys, exact_best };
        self.placed.insert(rank, placed.clone());
        Ok(placed)
    }

    /// Haystack rows ahead of the needle in variant `v` when `rank` rows
    /// beat it exactly: m − D + R.
    fn variant_rank(&mut self, v: usize, rank: u64) -> Result<u64, SimError> {
        let placed = self.place(rank)?;
        let (variants, queries) = (self.variants, self.queries);
        let s_variant = self.score(&variants[v], &queries[v], &placed.keys)?;
        let (stay, rise) = self.sample.crossings(v, placed.exact_best, s_variant, self.share);
        let m = placed.solve.hay_above;
        let n = self.sample.hay_rows;
        let fall = rank_quantile(m, 1.0 - stay, self.uniforms.0);
        let rise = rank_quantile(n.saturating_sub(m), rise, self.uniforms.1);
        Ok(m - fall + rise)
    }

    /// The variant's critical rank at `k_eff`: the least exact rank at
    /// which it no longer keeps the needle (u64::MAX when it keeps it at
    /// every rank the placement reaches), searched by bisection from the
    /// drawn rank `drawn`, whose outcome `kept` settles that rank.
    fn keep_below(&mut self, v: usize, k_eff: u64, drawn: u64, kept: bool) -> Result<u64, SimError> {
        let n = self.sample.hay_rows;
        let (mut lo, mut hi) = if kept {
            if self.variant_rank(v, n)? < k_eff {
                return Ok(u64::MAX);
            }
            (drawn, n)
        } else {
            if drawn == 0 || self.variant_rank(v, 0)? >= k_eff {
                return Ok(0);
            }
            (0, drawn)
        };
        // Kept at lo, lost at hi.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.variant_rank(v, mid)? < k_eff {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(hi)
    }
}

impl Case<'_, '_> {
    /// Every cell of context `ci` and spot `oi`: per needle multiple (the
    /// trial's `draws`), the needle placed at its drawn rank, then each
    /// variant's rank, outcome per k and critical rank.
    fn judge(
        &mut self,
        spec: &TrialSpec<'_>,
        (ci, oi): (usize, usize),
        (candidates, in_window): (u64, bool),
        draws: &[NeedleDraw],
        cells: &mut [NeedleOutcome],
        needle: &mut [NeedleSolve],
    ) -> Result<(), SimError> {
        let slots = spec.needle_slots();
        for (slot, draw) in draws.iter().enumerate() {
            let rank = rank_quantile(self.sample.hay_rows, exceedance_of(draw.log10_exceedance), draw.rank_uniform);
            let placed = self.place(rank)?;
            needle[spec.needle_index(slot, ci, oi)] = placed.solve;
            for v in (0..spec.variants.len()).filter(|&v| slots[v] == slot) {
                let ahead = self.variant_rank(v, rank)?;
                for (ki, &k) in spec.topks.iter().enumerate() {
                    let k_eff = k.min(candidates);
                    let survived = in_window || ahead < k_eff;
                    let keep_below = match spec.margin_threshold {
                        Some(_) if in_window => Some(u64::MAX),
                        Some(_) => Some(self.keep_below(v, k_eff, rank, survived)?),
                        None => None,
                    };
                    let rank = Some(NeedleRank { above: ahead, above_or_equal: ahead });
                    cells[spec.cell_index(ci, oi, ki, v)] =
                        NeedleOutcome { survived, via_window: in_window, rank, keep_below, ..NeedleOutcome::LOST };
                }
            }
        }
        Ok(())
    }
}

/// One trial's outcome in every cell of `spec`, from `tail_rows` sampled
/// rows per context and spot.
pub fn sampled_trial(spec: &TrialSpec<'_>, trial_seed: u64, tail_rows: u64) -> Result<TrialOutcome, SimError> {
    let q = spec
        .model
        .needle_unit
        .quantile()
        .ok_or_else(|| SimError::Model("tail sampling of the quantile needle under the strength unit".into()))?;
    let d = spec.model.shape.head_dim;
    let haystack = TrialHaystack::draw(spec.model, trial_seed)?;
    let mut source = TrialRows::new(spec.model, spec.physics, spec.geometry, &haystack, trial_seed)?;
    let exact_variant = PrecisionVariant::builtin("fp32").ok_or_else(|| SimError::Model("the fp32 variant is missing".into()))?;
    let theta = tilt(&haystack);
    let half = (tail_rows / 2) as usize;
    let multiples = spec.needle_multiples();
    let draw = q.draw(trial_seed);
    let draws: Vec<NeedleDraw> = multiples
        .iter()
        .map(|&m| {
            if m == 1.0 {
                draw
            } else {
                NeedleDraw { log10_exceedance: q.scaled(m).log10_exceedance(draw.prompt, draw.layer, draw.token), ..draw }
            }
        })
        .collect();
    let mut cells = vec![NeedleOutcome::LOST; spec.cell_count()];
    let mut needle = vec![NeedleSolve::default(); multiples.len() * spec.contexts.len() * spec.spot_count()];
    let mut keys = vec![0.0f32; 2 * half * d];
    let mut weights = vec![0.0f64; 2 * half];
    for (ci, &context) in spec.contexts.iter().enumerate() {
        let queries = context_queries(&haystack, &source, spec.variants, context)?;
        let exact_query = context_queries(&haystack, &source, std::slice::from_ref(&exact_variant), context)?.remove(0);
        let candidates = spec.geometry.candidate_rows(context);
        for oi in 0..spec.spot_count() {
            let placement = spec.placement(context, oi);
            let competitors = candidates - (placement.rows.end - placement.rows.start);
            if settle(spec, &placement, (ci, oi), &mut cells) {
                continue;
            }
            positional_sample(&source, &theta, (trial_seed, ci, oi), (candidates, placement.rows.clone()), &mut keys, &mut weights)?;
            let mut quantized = QuantizedRows::with_capacity(256, d);
            let sample =
                Sample::scored(competitors, (&keys, &weights), (&exact_variant, &exact_query), (spec.variants, &queries), &mut quantized)?;
            let items = source.items(context, placement.tokens.clone());
            let needle_rows = NeedleRows::of(&mut source, &items, placement.rows.clone().collect(), d)?;
            let mut rng = rng::stream(trial_seed, &[tag::TAIL, tag::NEEDLE, ci as u64, oi as u64]);
            let uniforms = (open_uniform(rng.random::<u64>()), open_uniform(rng.random::<u64>()));
            let mut case = Case {
                source: &source,
                d,
                sample,
                needle: needle_rows,
                exact: (&exact_variant, &exact_query),
                variants: spec.variants,
                queries: &queries,
                share: tie_share(spec.tie_rule, placement.rows.start, competitors),
                uniforms,
                placed: HashMap::new(),
                quantized,
            };
            let in_window = placement.in_window;
            case.judge(spec, (ci, oi), (candidates, in_window), &draws, &mut cells, &mut needle)?;
        }
    }
    Ok(TrialOutcome { cells, seed: trial_seed, needle, agreement: Vec::new() })
}

/// The cells of a spot whose needle has no candidate row: kept only by
/// the raw window; true when it has none.
fn settle(spec: &TrialSpec<'_>, placement: &NeedlePlacement, (ci, oi): (usize, usize), cells: &mut [NeedleOutcome]) -> bool {
    if !placement.rows.is_empty() {
        return false;
    }
    let in_window = placement.in_window;
    for ki in 0..spec.topks.len() {
        for v in 0..spec.variants.len() {
            let keep_below = spec.margin_threshold.map(|_| if in_window { u64::MAX } else { 0 });
            cells[spec.cell_index(ci, oi, ki, v)] =
                NeedleOutcome { survived: in_window, via_window: in_window, keep_below, ..NeedleOutcome::LOST };
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten rows of weight 1 scoring 9, 8, …, 0 standing for 100 rows: each
    /// stands for ten.
    fn sample(variant: Vec<f32>) -> Sample {
        let exact: Vec<f32> = (0..10).rev().map(|x| x as f32).collect();
        Sample::new(100, vec![1.0; 10], exact, vec![variant])
    }

    #[test]
    fn the_needle_is_placed_in_the_gap_nearest_rank_plus_a_half() {
        let s = sample(vec![0.0; 10]);
        // 25 rows above: between 2.5 and 3 sample rows, nearest to 30 (3 rows above).
        assert_eq!(s.interval(25), (6.0, 7.0, 6.5));
        // 0 rows above: above the top row, one gap up.
        assert_eq!(s.interval(0), (9.0, f32::INFINITY, 10.0));
        // Every row above: below the lowest.
        let (lo, hi, target) = s.interval(100);
        assert_eq!((lo, hi), (f32::NEG_INFINITY, 0.0));
        assert!(target < 0.0);
        assert_eq!(s.expected_above(6.5), 30.0);
    }

    #[test]
    fn crossings_count_the_rows_a_variant_moves_across_the_needle() {
        // The exact variant moves nothing.
        let exact: Vec<f32> = (0..10).rev().map(|x| x as f32).collect();
        assert_eq!(sample(exact.clone()).crossings(0, 6.5, 6.5, 0.5), (1.0, 0.0));
        // A variant that swaps the rows at 7 and 6: one of three above falls
        // behind, one of seven below gets ahead; a tie counts its share.
        let mut swapped = exact.clone();
        swapped.swap(2, 3);
        assert_eq!(sample(swapped).crossings(0, 6.5, 6.5, 0.5), (2.0 / 3.0, 1.0 / 7.0));
        let mut tied = exact;
        tied[3] = 6.5;
        assert_eq!(sample(tied).crossings(0, 6.5, 6.5, 0.25), (1.0, 0.25 / 7.0));
    }
}

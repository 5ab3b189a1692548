//! Placing the quantile needle: its drawn rank, the scale that puts it
//! there under exact scores, and where it then ranks.

use super::chunk::{ChunkSpecials, ChunkWork};
use crate::error::SimError;
use crate::model::needle::{exceedance_of, rank_quantile, NeedleDraw};
use crate::model::row_source::TrialRows;
use crate::numerics::pipeline::QuantizedRows;
use crate::score::indexer::IndexerQuery;
use crate::score::needle::{solve_scale, target_interval, NeedleSolve};
use crate::score::variant::PrecisionVariant;

thread_local! {
    /// Set by [`with_full_reference`]: score the quantile needle's exact
    /// reference over every row instead of screening (tests compare both).
    pub(super) static FULL_REFERENCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
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
pub(super) enum Exact<'a> {
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
pub(super) struct Screen<'a> {
    pub(super) variant: usize,
    pub(super) factors: Vec<f64>,
    /// ‖k‖ of every row (the trial's longest context).
    pub(super) norms: Vec<f32>,
    /// A copy of the trial's row source: rows regenerate alone when chunks are independent.
    pub(super) source: TrialRows<'a>,
    /// Finalized keys regenerated so far.
    pub(super) keys: std::collections::HashMap<u64, Vec<f32>>,
}

impl Screen<'_> {
    /// Row `row`'s exact score under the exact query `q`.
    pub(super) fn exact(&mut self, q: &IndexerQuery, row: u64, d: usize) -> Result<f32, SimError> {
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
    pub(super) fn bound(&self, g: usize, row: u64) -> f64 {
        self.factors[g] * f64::from(self.norms[row as usize]) + 1e-30
    }
}

/// Places the quantile needle in each case of a trial.
pub(super) struct Placer<'p, 'w, 'a> {
    pub(super) work: &'p ChunkWork<'w, 'a>,
    pub(super) exact: Exact<'a>,
    /// The exact variant and its query per group, when screened (else the
    /// scored reference's own).
    pub(super) fp32: &'p PrecisionVariant,
    pub(super) exact_queries: &'p [IndexerQuery],
    /// [group][scored variant][row]
    pub(super) scores: &'p [Vec<Vec<f32>>],
    pub(super) source: &'p TrialRows<'a>,
    pub(super) quantized: &'p mut QuantizedRows,
}

impl Placer<'_, '_, '_> {
    /// Case `c`: its rank drawn, its scale solved, and where it then ranks.
    pub(super) fn place(&mut self, c: usize, chunk_specials: &[ChunkSpecials], draw: &NeedleDraw) -> Result<NeedleSolve, SimError> {
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
            Exact::Scored(r) => (&work.variants[*r], &*work.queries[g][*r]),
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

    /// The haystack rows of case `c` (candidates less special and sink rows).
    pub(super) fn population(&self, c: usize) -> Vec<u64> {
        let case = &self.work.cases[c];
        let sinks = self.work.spec.model.structure.sink_span();
        (0..case.candidates as u64).filter(|r| case.special.binary_search(r).is_err() && !sinks.contains(r)).collect()
    }

    /// Haystack rows of `population` whose exact score beats case `c`'s
    /// best needle row with the needle's offset at `scale`: the rank the
    /// needle would have been drawn at to sit there.
    pub(super) fn hay_above_at(
        &mut self,
        c: usize,
        chunk_specials: &[ChunkSpecials],
        population: &[u64],
        scale: f32,
    ) -> Result<u64, SimError> {
        let spec = self.work.spec;
        let d = spec.model.shape.head_dim;
        let g = spec.query_group(self.work.cases[c].ci);
        let chunks: Vec<&ChunkSpecials> = chunk_specials.iter().filter(|ch| !ch.cases[c].is_empty()).collect();
        let (exact_variant, exact_query) = match &self.exact {
            Exact::Scored(r) => (&self.work.variants[*r], &*self.work.queries[g][*r]),
            Exact::Screened(_) => (self.fp32, &self.exact_queries[g]),
        };
        let rows = self.work.special_exact(self.source, c, &chunks, (exact_variant, exact_query), scale, true, &mut *self.quantized)?;
        let best = rows.iter().map(|&(_, x)| x).fold(f32::NEG_INFINITY, f32::max);
        match &mut self.exact {
            Exact::Scored(r) => {
                let exact = &self.scores[g][*r];
                Ok(population.iter().filter(|&&row| exact[row as usize] > best).count() as u64)
            }
            Exact::Screened(screen) => count_above(screen, exact_query, g, population, &self.scores[g][screen.variant], best, d),
        }
    }
}

/// Rows the critical-rank count regenerates at most; past it the rows the
/// bound cannot decide are counted by their screened score (an error of a
/// few rows among the hundreds or thousands above a critical needle).
const MAX_UNDECIDED: usize = 4;

/// Rows of `population` whose exact score beats `best`: those the screen's
/// bound puts surely above are counted from their v-score `v`; those it
/// cannot decide are scored exactly when there are at most
/// [`MAX_UNDECIDED`] (a row outside its bound, never seen, makes every row
/// scored exactly), else counted by their v-score.
fn count_above(
    screen: &mut Screen<'_>,
    q: &IndexerQuery,
    g: usize,
    population: &[u64],
    v: &[f32],
    best: f32,
    d: usize,
) -> Result<u64, SimError> {
    let t = f64::from(best);
    let mut above = 0u64;
    let mut undecided: Vec<u64> = Vec::new();
    for &row in population {
        let (score, bound) = (f64::from(v[row as usize]), screen.bound(g, row));
        if score - bound > t {
            above += 1;
        } else if score + bound >= t {
            undecided.push(row);
        }
    }
    if undecided.len() > MAX_UNDECIDED {
        return Ok(above + undecided.iter().filter(|&&row| f64::from(v[row as usize]) > t).count() as u64);
    }
    for &row in &undecided {
        let exact = screen.exact(q, row, d)?;
        if (f64::from(exact) - f64::from(v[row as usize])).abs() > screen.bound(g, row) {
            let mut all = 0u64;
            for &r in population {
                all += u64::from(screen.exact(q, r, d)? > best);
            }
            return Ok(all);
        }
        above += u64::from(exact > best);
    }
    Ok(above)
}

/// The exact scores of the rows of `population` whose v-score `v`, plus
/// its bound, reaches `floor` (every row whose exact score can); every one
/// checks the bound, and a row outside it (never seen) makes the whole
/// population scored exactly instead.
pub(super) fn screened(
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

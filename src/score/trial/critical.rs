//! The needle's critical rank in each cell of a trial (docs/MODEL.md, "The
//! needle margin"): how many haystack rows could have outscored the needle
//! in the exact reference with this variant still selecting it.
//!
//! The needle's offset scale is searched along the solved direction until
//! the variant's best needle row meets its k-th competitor (ties by the
//! variant's rule); only the needle's rows are scored again, every other
//! row keeps its score. The exact reference then says how many haystack
//! rows beat the needle at that scale.

use super::chunk::ChunkSpecials;
use super::place::Placer;
use super::spec::{Case, CasePatches, NeedleOutcome, TrialSpec};
use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::score::address::AddressFault;
use crate::score::needle::{NeedleSolve, MAX_SCALE};
use crate::score::selection::{best_needle_rank, coarse_score, tied_ahead_of_best, NanOrder, TieRule};
use std::cmp::Ordering;

/// Halvings of the scale bracket after it is found: its ends then differ
/// by 2^-12 of the scale.
const BISECTIONS: usize = 12;

/// What the search reads besides the spec: the placer (exact scores and
/// the needle's rows) and the chunks that hold special rows.
pub(super) struct Probe<'p, 'w, 'a> {
    pub(super) placer: Placer<'p, 'w, 'a>,
    pub(super) chunk_specials: &'p [ChunkSpecials],
}

/// One variant's view of one case: its scores as it selects with them
/// (patches in, coarse bins applied, hidden rows cut off), and its best
/// competitors in its order.
struct View {
    visible: Vec<f32>,
    /// First visible row's number (a chunk fault hides the rows before it).
    first: usize,
    skip: std::ops::Range<usize>,
    /// The best competitors, best first (at least `max k_eff + 1` when there are).
    top: Vec<(f32, u32)>,
    competitors: usize,
    coarse: Option<u32>,
    nan: NanOrder,
    rule: TieRule,
    /// With an address fault: the scores before it acts, and how it acts
    /// (the fault, tokens a row, the query's chunk's first row); the needle
    /// is then judged on the whole assembled row ([`View::kept_full`]).
    unaddressed: Option<(Vec<f32>, AddressFault, u64, usize)>,
}

impl View {
    /// Whether needle rows scoring `needle` (visible row, score) are kept at
    /// `k_eff`, as [`TrialSpec::judge_variant`] decides.
    fn kept(&self, needle: &[(usize, f32)], k_eff: usize, priority: impl Fn(usize) -> u64 + Copy) -> bool {
        if self.unaddressed.is_some() {
            return self.kept_full(needle, k_eff, priority);
        }
        let Some(best) =
            needle.iter().map(|&(_, s)| s).reduce(|a, b| if self.nan.compare(b, a, |x, y| x.total_cmp(&y)).is_gt() { b } else { a })
        else {
            return false;
        };
        let by_value = |a: f32, b: f32| a.partial_cmp(&b).unwrap_or(Ordering::Equal);
        let above = self.top.partition_point(|&(s, _)| self.nan.compare(s, best, by_value).is_gt());
        if above >= k_eff {
            return false;
        }
        let tied = |s: f32| s == best || (s.is_nan() && best.is_nan());
        let run = self.top[above..].iter().take_while(|&&(s, _)| tied(s)).count();
        if run == 0 {
            return true;
        }
        if above + run == self.top.len() && self.top.len() < self.competitors {
            return self.kept_full(needle, k_eff, priority);
        }
        let ahead = |needle_row: usize| {
            self.top[above..above + run]
                .iter()
                .filter(|&&(_, row)| {
                    let row = row as usize;
                    match self.rule {
                        TieRule::LowestIndex => row < needle_row,
                        TieRule::HighestIndex => row > needle_row,
                        TieRule::Random => (priority(row), row) < (priority(needle_row), needle_row),
                    }
                })
                .count()
        };
        let least = needle.iter().filter(|&&(_, s)| tied(s)).map(|&(row, _)| ahead(row)).min().unwrap_or(0);
        above + least < k_eff
    }

    /// [`Self::kept`] over every row, for a tie the short list cannot settle.
    fn kept_full(&self, needle: &[(usize, f32)], k_eff: usize, priority: impl Fn(usize) -> u64 + Copy) -> bool {
        let mut scores = self.unaddressed.as_ref().map_or_else(|| self.visible.clone(), |u| u.0.clone());
        for &(row, s) in needle {
            scores[row] = s;
        }
        if let Some(read) = self.unaddressed.as_ref().and_then(|&(_, a, ratio, first)| a.read_scores(&scores, ratio, first)) {
            scores = read;
        }
        let Some((best, rank)) = best_needle_rank(&scores, self.skip.clone(), self.nan) else { return false };
        let tied = tied_ahead_of_best(&scores, self.skip.clone(), best, &rank, self.rule, priority);
        rank.above + tied < k_eff as u64
    }
}

impl TrialSpec<'_> {
    /// Variant `v`'s view of `case` from its shared scores `shared`.
    fn view(&self, case: &Case, patches: &[(u32, f32)], v: usize, shared: &[f32], max_k: usize) -> View {
        let sel = &self.variants[v].selection;
        let mut all: Vec<f32> = shared[..case.candidates].to_vec();
        for &(row, score) in patches.iter().filter(|&&(row, _)| (row as usize) < case.candidates) {
            all[row as usize] = score;
        }
        if let Some(bits) = sel.coarse_bits {
            all.iter_mut().for_each(|x| *x = coarse_score(*x, bits));
        }
        let first = self.first_candidate_row(v, case.ci).min(case.candidates);
        let end = self.candidate_end(&self.variants[v], case.candidates).max(first);
        all.truncate(end);
        let unaddressed = self.addressed_scores(v, case.ci, &all).map(|read| {
            let chunk_first = self.geometry.chunk_first_row(self.contexts[case.ci], self.prefill_chunk) as usize;
            (std::mem::replace(&mut all, read), self.variants[v].address, self.geometry.ratio, chunk_first)
        });
        let visible = all.split_off(first);
        let clip = |r: u64| (r as usize).clamp(first, end) - first;
        let skip = clip(case.placement.rows.start)..clip(case.placement.rows.end).max(clip(case.placement.rows.start));
        let nan = sel.nan_order;
        let mut top: Vec<(f32, u32)> = visible.iter().enumerate().filter(|(i, _)| !skip.contains(i)).map(|(i, &s)| (s, i as u32)).collect();
        let competitors = top.len();
        let order = |a: &(f32, u32), b: &(f32, u32)| nan.compare(b.0, a.0, |x, y| x.total_cmp(&y));
        let keep = (max_k + 1).min(competitors);
        if keep < competitors && keep > 0 {
            top.select_nth_unstable_by(keep - 1, order);
            top.truncate(keep);
        }
        top.sort_unstable_by(order);
        View { visible, first, skip, top, competitors, coarse: sel.coarse_bits, nan, rule: sel.tie_rule_for(self.tie_rule), unaddressed }
    }

    /// Sets every cell's [`NeedleOutcome::keep_below`]: with the needle in
    /// the raw window, every rank; without a visible needle row, none;
    /// else the critical rank found along the needle's scale. A cell's
    /// value agrees with its outcome at the drawn rank.
    pub(super) fn keep_ranks(
        &self,
        cases: &[Case],
        case_patches: &CasePatches,
        needle: &[NeedleSolve],
        cells: &mut [NeedleOutcome],
        trial_seed: u64,
        probe: &mut Probe,
    ) -> Result<(), SimError> {
        let slots = self.needle_slots();
        for (c, case) in cases.iter().enumerate() {
            let g = self.query_group(case.ci);
            let mut population: Option<Vec<u64>> = None;
            for v in 0..self.variants.len() {
                let solve = needle[self.needle_index(slots[v], case.ci, case.si)];
                let sel = &self.variants[v].selection;
                let undecided: Vec<usize> = (0..self.topks.len())
                    .filter(|&ki| {
                        let cell = &mut cells[self.cell_index(case.ci, case.si, ki, v)];
                        cell.keep_below = Some(if cell.via_window { u64::MAX } else { 0 });
                        !cell.via_window && cell.rank.is_some()
                    })
                    .collect();
                if undecided.is_empty() {
                    continue;
                }
                let k_effs: Vec<usize> = self.topks.iter().map(|&k| sel.topk_for(k) as usize).collect();
                let max_k = undecided.iter().map(|&ki| k_effs[ki]).max().unwrap_or(0);
                let view = self.view(case, &case_patches[c][v], v, &probe.placer.scores[g][v], max_k);
                let population = population.get_or_insert_with(|| probe.placer.population(c));
                let priority = |row: usize| rng::derive(trial_seed, &[tag::TIE, (row + view.first) as u64]);
                let chunks: Vec<&ChunkSpecials> = probe.chunk_specials.iter().filter(|ch| !ch.cases[c].is_empty()).collect();
                // The needle's rows as this variant scores them, per scale
                // tried: the searches of different k start from the same
                // placed scale and share their first steps.
                let mut scored: Vec<(u32, Vec<(usize, f32)>)> = Vec::new();
                for ki in undecided {
                    let k_eff = k_effs[ki].min(view.visible.len());
                    let placer = &mut probe.placer;
                    let mut kept_at = |scale: f64| -> Result<bool, SimError> {
                        let scale = scale as f32;
                        if let Some((_, needle)) = scored.iter().find(|(bits, _)| *bits == scale.to_bits()) {
                            return Ok(view.kept(needle, k_eff, priority));
                        }
                        let rows = placer.work.needle_scores(placer.source, c, &chunks, v, scale, &mut *placer.quantized)?;
                        let needle: Vec<(usize, f32)> = rows
                            .iter()
                            .filter(|&&(row, _)| row as usize >= view.first)
                            .map(|&(row, s)| (row as usize - view.first, view.coarse.map_or(s, |b| coarse_score(s, b))))
                            .filter(|&(row, _)| view.skip.contains(&row))
                            .collect();
                        let kept = view.kept(&needle, k_eff, priority);
                        scored.push((scale.to_bits(), needle));
                        Ok(kept)
                    };
                    let cell = &mut cells[self.cell_index(case.ci, case.si, ki, v)];
                    let critical = critical_scale(f64::from(solve.scale), cell.survived, &mut kept_at)?;
                    // Kept at scale 0 (the needle's bare rows): kept at any
                    // rank, since the placement never goes below its bare
                    // rows (docs/MODEL.md, "The needle margin").
                    let below = match critical {
                        None => 0,
                        Some(scale) if scale <= 0.0 => u64::MAX,
                        Some(scale) => placer.hay_above_at(c, probe.chunk_specials, population, scale as f32)?,
                    };
                    // The drawn rank's own outcome settles the one rank the
                    // search cannot (the needle's exact score is only known
                    // to lie between two haystack rows there).
                    let drawn = solve.target_rank;
                    cell.keep_below = Some(if cell.survived { below.max(drawn.saturating_add(1)) } else { below.min(drawn) });
                }
            }
        }
        Ok(())
    }
}

/// The least offset scale at which `kept` holds, to within 2^-12 of
/// itself, searched from the placed scale `placed` whose outcome is `kept_there`:
/// None when no scale up to [`MAX_SCALE`] keeps the needle. `kept` is taken
/// to grow with the scale, as the placement's solve takes the score to.
fn critical_scale(placed: f64, kept_there: bool, kept: &mut impl FnMut(f64) -> Result<bool, SimError>) -> Result<Option<f64>, SimError> {
    let (mut lo, mut hi);
    if kept_there {
        hi = placed;
        lo = placed / 2.0;
        loop {
            if hi == 0.0 || lo < placed * 1e-9 {
                if kept(0.0)? {
                    return Ok(Some(0.0));
                }
                lo = 0.0;
                break;
            }
            if !kept(lo)? {
                break;
            }
            hi = lo;
            lo /= 2.0;
        }
    } else {
        lo = placed;
        hi = if placed > 0.0 { placed * 2.0 } else { 1.0 };
        loop {
            if hi > MAX_SCALE {
                return Ok(None);
            }
            if kept(hi)? {
                break;
            }
            lo = hi;
            hi *= 2.0;
        }
    }
    for _ in 0..BISECTIONS {
        let mid = if lo > 0.0 { (lo * hi).sqrt() } else { hi / 2.0 };
        if !(mid > lo && mid < hi) {
            break;
        }
        if kept(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(hi))
}

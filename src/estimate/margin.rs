//! The needle margin (docs/MODEL.md, "The needle margin"): how much rarer
//! than the profile's median the needle may be and still be kept.
//!
//! Each trial's critical rank ([`NeedleOutcome::keep_below`]) turns into
//! its critical multiple c_t: the largest factor on the needle's median
//! exceedance (the trial's spreads kept) at which the needle's drawn rank,
//! Binomial(N, c·u) inverted at the trial's uniform, stays below it. A
//! cell's recall at multiple c is the share of trials with c_t ≥ c, and
//! its margin m* the largest c at which that share stays at or above the
//! recall threshold.

use crate::base::special::uniform_below_binomial_cdf;
use crate::base::stats::{wilson_interval, Z95};
use crate::model::needle::{exceedance_of, QuantileNeedle};
use crate::score::trial::{NeedleOutcome, TrialOutcome, TrialSpec};

/// One cell's recall as a function of the needle's median exceedance.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MarginCurve {
    /// Each trial's critical multiple, descending (∞: kept at any exceedance).
    pub multiples: Vec<f64>,
    /// The cell's median exceedance (the profile's, times the variant's
    /// `needle=M`): the multiple 1/median puts the median at 1.
    pub median: f64,
}

/// Bisections of a whole-model margin's bracket (a factor 2) in log c
/// (docs/MODEL.md, "The needle margin").
pub const MODEL_MARGIN_BISECTIONS: u32 = 4;

/// What a whole-model margin's bisection leaves: each reported end (the
/// margin and both ends of its interval) is the low end of a bracket this
/// factor wide, 2^(1/16) ≈ 1.044, which holds the true crossing.
pub fn model_margin_resolution() -> f64 {
    2f64.powf(1.0 / f64::from(1u32 << MODEL_MARGIN_BISECTIONS))
}

/// The margin at one recall threshold, with its 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Margin {
    /// The largest multiple of the median exceedance keeping recall ≥ the threshold …
    pub multiple: f64,
    /// … and where the recall's 95 % interval puts it (the curve read at
    /// its Wilson bounds), lower first.
    pub low: f64,
    pub high: f64,
    /// The multiple reached exceedance 1 (every haystack row outscores the
    /// median needle) with recall still above the threshold: the margin is
    /// at least `multiple`.
    pub unbounded: bool,
}

impl MarginCurve {
    /// Recall at multiple `c` of the median exceedance.
    pub fn recall_at(&self, c: f64) -> f64 {
        let n = self.multiples.len();
        if n == 0 {
            return 0.0;
        }
        self.multiples.iter().filter(|&&m| m >= c).count() as f64 / n as f64
    }

    /// The margin at recall `threshold` (None without trials).
    pub fn margin(&self, threshold: f64) -> Option<Margin> {
        let n = self.multiples.len() as u64;
        if n == 0 {
            return None;
        }
        let cap = 1.0 / self.median;
        // The curve at s trials kept is the s-th largest multiple.
        let at = |kept: Option<u64>| -> f64 {
            match kept {
                Some(s) if s >= 1 => self.multiples[(s - 1) as usize].min(cap),
                Some(_) => cap,
                None => 0.0,
            }
        };
        let least = |ok: &dyn Fn(u64) -> bool| (0..=n).find(|&s| ok(s));
        let point = least(&|s| s as f64 >= threshold * n as f64);
        let low = least(&|s| wilson_interval(s, n, Z95).0 >= threshold);
        let high = least(&|s| wilson_interval(s, n, Z95).1 >= threshold);
        let multiple = at(point);
        Some(Margin { multiple, low: at(low), high: at(high), unbounded: multiple >= cap })
    }
}

/// The multiple c at which Binomial(n, c·u) inverted at `uniform` first
/// reaches `keep_below` (∞ when it never does, 0 when it always does).
pub fn critical_multiple(n: u64, u: f64, uniform: f64, keep_below: u64) -> f64 {
    if keep_below == 0 {
        return 0.0;
    }
    if keep_below > n {
        return f64::INFINITY;
    }
    // Kept at p while P(Bin(n, p) < keep_below) ≥ uniform (the inversion's
    // rank is below keep_below); that probability falls as p grows.
    let kept = |log10_p: f64| uniform_below_binomial_cdf(uniform, n, exceedance_of(log10_p), keep_below);
    let (mut lo, mut hi) = (u.log10() - 40.0, 0.0f64);
    if !kept(lo) {
        return 0.0;
    }
    // Whether hi has been tested (and found not kept); 0 has not.
    let mut hi_tested = false;
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        // lo and hi adjacent doubles: mid is one of them and its test
        // would repeat, leaving lo where it is for every further step.
        if mid == lo || (mid == hi && hi_tested) {
            break;
        }
        if kept(mid) {
            lo = mid;
        } else {
            (hi, hi_tested) = (mid, true);
        }
    }
    10f64.powf(lo) / u
}

/// Per needle multiple ([`TrialSpec::needle_multiples`]), each trial's
/// draw in the simulated layer: (exceedance u, the rank's uniform).
pub fn simulated_draws(spec: &TrialSpec<'_>, q: &QuantileNeedle, trials: &[TrialOutcome]) -> Vec<Vec<(f64, f64)>> {
    let draw = |m: f64, seed: u64| {
        let d = q.scaled(m).draw(seed);
        (exceedance_of(d.log10_exceedance), d.rank_uniform)
    };
    spec.needle_multiples().iter().map(|&m| trials.iter().map(|t| draw(m, t.seed)).collect()).collect()
}

/// Every cell's margin curve, in [`TrialSpec::cell_index`] order; None
/// under the strength unit or for trials run before the margin existed.
pub fn margin_curves(spec: &TrialSpec<'_>, q: &QuantileNeedle, trials: &[TrialOutcome]) -> Vec<Option<MarginCurve>> {
    let multiples = spec.needle_multiples();
    let slots = spec.needle_slots();
    let draws = simulated_draws(spec, q, trials);
    let mut out = Vec::with_capacity(spec.cell_count());
    for ci in 0..spec.contexts.len() {
        for si in 0..spec.spot_count() {
            for ki in 0..spec.topks.len() {
                for (v, &slot) in slots.iter().enumerate() {
                    let index = spec.cell_index(ci, si, ki, v);
                    let at = spec.needle_index(slot, ci, si);
                    let mut curve = MarginCurve { multiples: Vec::with_capacity(trials.len()), median: q.exceedance * multiples[slot] };
                    let mut complete = true;
                    for (t, &(u, uniform)) in trials.iter().zip(&draws[slot]) {
                        let o: &NeedleOutcome = &t.cells[index];
                        let (Some(keep_below), Some(solve)) = (o.keep_below, t.needle.get(at)) else {
                            complete = false;
                            break;
                        };
                        curve.multiples.push(critical_multiple(solve.hay_rows, u, uniform, keep_below));
                    }
                    curve.multiples.sort_unstable_by(|a, b| b.total_cmp(a));
                    out.push(complete.then_some(curve));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::needle::rank_quantile;

    #[test]
    fn critical_multiple_is_where_the_drawn_rank_reaches_the_critical_rank() {
        let (n, u, uniform) = (60_000u64, 3e-4, 0.37);
        for keep_below in [1u64, 5, 40, 700, 5000] {
            let c = critical_multiple(n, u, uniform, keep_below);
            assert!(c > 0.0 && c.is_finite(), "{keep_below}: {c}");
            // Just below the multiple the rank is kept, just above it is not.
            assert!(rank_quantile(n, c * u * (1.0 - 1e-6), uniform) < keep_below, "{keep_below}");
            assert!(rank_quantile(n, c * u * (1.0 + 1e-3), uniform) >= keep_below, "{keep_below}");
        }
        assert_eq!(critical_multiple(n, u, uniform, 0), 0.0);
        assert_eq!(critical_multiple(n, u, uniform, n + 1), f64::INFINITY);
    }

    #[test]
    fn margin_reads_the_curve_at_the_threshold_and_its_wilson_bounds() {
        // 100 trials with multiples 100, 99, …, 1: recall at c is (101 − c)/100.
        let curve = MarginCurve { multiples: (1..=100).rev().map(f64::from).collect(), median: 1e-4 };
        assert_eq!(curve.recall_at(10.0), 0.91);
        let m = curve.margin(0.9).unwrap();
        // 90 trials must keep it: the 90th largest multiple is 11.
        assert_eq!(m.multiple, 11.0);
        assert!(m.low < m.multiple && m.multiple < m.high, "{m:?}");
        assert!(!m.unbounded);
        // Every trial kept at any exceedance: the margin reaches exceedance 1.
        let always = MarginCurve { multiples: vec![f64::INFINITY; 10], median: 1e-3 };
        let m = always.margin(0.9).unwrap();
        assert_eq!((m.multiple, m.unbounded), (1000.0, true));
        // No trial kept: the margin is 0.
        let never = MarginCurve { multiples: vec![0.0; 10], median: 1e-3 };
        assert_eq!(never.margin(0.9).unwrap().multiple, 0.0);
    }
}

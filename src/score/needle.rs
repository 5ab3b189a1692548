//! Placing the quantile needle in a trial (docs/MODEL.md, "The quantile
//! needle"): its rank m among the haystack rows is drawn, and the scale of
//! its offset is solved so that its best row's exact score falls strictly
//! between the m-th and (m+1)-th highest exact haystack scores. Every
//! variant then scores the needle rows built at that scale like any other
//! row.

use crate::error::SimError;
use serde::{Deserialize, Serialize};

/// Largest offset scale tried, in units of the strength-1 offset: beyond
/// it the needle's row points along its offset and its score no longer
/// grows (the norm caps it).
pub const MAX_SCALE: f64 = 65_536.0;

/// Evaluations of the needle's score a solve may spend.
const MAX_EVALUATIONS: usize = 80;

/// How the needle was placed in one case (context, needle offset) of a trial.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NeedleSolve {
    /// The offset's scale, in units of the strength-1 offset.
    pub scale: f32,
    /// Haystack rows the exceedance counts (candidates less needle,
    /// distractor, recency and sink rows).
    pub hay_rows: u64,
    /// The drawn number of haystack rows above the needle.
    pub target_rank: u64,
    /// Haystack rows whose exact score beats the needle's best row: the
    /// target unless the solve was capped or the bare row already ranked higher.
    pub hay_above: u64,
    /// Other competitors (distractors, recency and sink rows) above it.
    pub fixed_above: u64,
    /// No scale up to [`MAX_SCALE`] reached the target (the norm caps the
    /// needle below it): the needle sits as high as it can.
    pub capped: bool,
}

/// The exact scores the needle must fall between to have `rank` haystack
/// rows above it: (the (rank+1)-th highest, the rank-th highest) of
/// `population`, ±∞ past its ends, and a score to aim at inside. Reorders
/// `population`.
pub fn target_interval(population: &mut [f32], rank: u64) -> (f32, f32, f32) {
    let n = population.len();
    let m = (rank as usize).min(n);
    let desc = |a: &f32, b: &f32| b.total_cmp(a);
    if n == 0 {
        return (f32::NEG_INFINITY, f32::INFINITY, 0.0);
    }
    if m == n {
        // Below every row: aim one spread below the lowest.
        let low = population.iter().copied().fold(f32::INFINITY, f32::min);
        let high = population.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        return (f32::NEG_INFINITY, low, low - (high - low).max(low.abs() * 1e-3).max(1e-6));
    }
    let (above, lo, _) = population.select_nth_unstable_by(m, desc);
    let lo = *lo;
    if m == 0 {
        // Above every row: aim one gap above the highest, as far above it
        // as the second is below it.
        let second = if n > 1 { population[1..].iter().copied().fold(f32::NEG_INFINITY, f32::max) } else { lo };
        let gap = (lo - second).max(lo.abs() * 1e-3).max(1e-6);
        return (lo, f32::INFINITY, lo + gap);
    }
    let hi = above.iter().copied().fold(f32::INFINITY, f32::min);
    (lo, hi, lo + 0.5 * (hi - lo))
}

/// The smallest scale ≥ 0 it finds whose needle score `score(scale)` lies
/// strictly inside (`lo`, `hi`), aiming at `target`; and whether it was
/// capped. The score is taken to grow with the scale (the needle's offset
/// raises every looking head): the bracket doubles from 1 until the score
/// passes `lo`, then false position (Illinois) narrows it.
pub fn solve_scale(lo: f32, hi: f32, target: f32, mut score: impl FnMut(f64) -> Result<f32, SimError>) -> Result<(f64, bool), SimError> {
    let inside = |s: f32| s > lo && s < hi;
    let s0 = score(0.0)?;
    if s0 > lo {
        // The bare row already beats the (m+1)-th: it stays as it is.
        return Ok((0.0, false));
    }
    let (mut a, mut fa) = (0.0f64, f64::from(s0) - f64::from(target));
    let (mut b, mut sb) = (1.0f64, score(1.0)?);
    let mut evaluations = 2;
    let mut best = (b, sb);
    while sb <= lo {
        if b >= MAX_SCALE || evaluations >= MAX_EVALUATIONS {
            return Ok((best.0, true));
        }
        (a, fa) = (b, f64::from(sb) - f64::from(target));
        b *= 2.0;
        sb = score(b)?;
        evaluations += 1;
        if sb > best.1 {
            best = (b, sb);
        }
    }
    if inside(sb) {
        return Ok((b, false));
    }
    let mut fb = f64::from(sb) - f64::from(target);
    let mut side = 0i8;
    let mut last_inside: Option<f64> = None;
    while evaluations < MAX_EVALUATIONS {
        // False position, halving the stale end's value (Illinois).
        let mut c = if fb != fa { b - fb * (b - a) / (fb - fa) } else { 0.5 * (a + b) };
        if !(c > a.min(b) && c < a.max(b)) {
            c = 0.5 * (a + b);
        }
        let sc = score(c)?;
        evaluations += 1;
        if inside(sc) {
            return Ok((c, false));
        }
        let fc = f64::from(sc) - f64::from(target);
        if (fc > 0.0) == (fb > 0.0) {
            (b, fb) = (c, fc);
            if side == 1 {
                fa *= 0.5;
            }
            side = 1;
        } else {
            (a, fa) = (c, fc);
            if side == -1 {
                fb *= 0.5;
            }
            side = -1;
        }
        if sc > lo {
            last_inside = Some(c);
        }
    }
    // The interval is narrower than the score's rounding: take the lowest
    // scale seen above `lo` (the needle then ranks m or higher).
    Ok((last_inside.unwrap_or(b), false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_brackets_the_rank() {
        let scores: Vec<f32> = (0..100).map(|i| i as f32).collect();
        for rank in [0u64, 1, 5, 50, 99, 100] {
            let mut p = scores.clone();
            let (lo, hi, target) = target_interval(&mut p, rank);
            assert!(lo < target && target < hi, "{rank}: {lo} {target} {hi}");
            let above = scores.iter().filter(|&&s| s > target).count() as u64;
            assert_eq!(above, rank);
        }
        assert_eq!(target_interval(&mut [], 3).0, f32::NEG_INFINITY);
    }

    #[test]
    fn the_solve_lands_inside_for_a_growing_score_and_reports_a_cap() {
        // A saturating score, like a needle row under RMSNorm.
        let f = |cap: f64| move |s: f64| Ok::<f32, SimError>((cap * s / (1.0 + s)) as f32);
        for (lo, hi) in [(0.1f32, 0.2f32), (0.9, 0.95), (0.5, 0.5000001)] {
            let (s, capped) = solve_scale(lo, hi, 0.5 * (lo + hi), f(1.0)).unwrap();
            let v = f(1.0)(s).unwrap();
            assert!(!capped && v > lo && (v < hi || hi - lo < 1e-6), "{lo} {hi}: {s} {v}");
        }
        // Out of reach: capped at the largest score seen.
        let (s, capped) = solve_scale(2.0, 3.0, 2.5, f(1.0)).unwrap();
        assert!(capped && s >= 1.0);
        // Already above: scale 0.
        assert_eq!(solve_scale(-1.0, 0.5, 0.0, f(1.0)).unwrap(), (0.0, false));
    }
}

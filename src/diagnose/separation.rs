//! How far apart two candidates lie in the observed cells: whether their
//! simulated recalls differ beyond simulation error at all, and if so how
//! many prompts per row would tell them apart. What an "inconclusive" or a
//! close "healthy" verdict owes its reader: more prompts of the same rows,
//! or another experiment (docs/OBSERVATIONS.md, "When the data cannot decide").

use crate::base::special::upper_regularized_gamma;
use serde::Serialize;

/// Below this p the χ² test says two candidates' recalls differ beyond
/// simulation error.
pub const SIMULATION_ERROR_P: f64 = 0.01;

/// Two close candidates compared row by row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Separation {
    /// The best candidate (taken as true for `prompts_per_row`) …
    pub leader: String,
    /// … and the best candidate of the runner-up class (or healthy's runner-up).
    pub runner: String,
    /// Σ over rows of (p_a − p_b)² / (2 p̄ (1 − p̄) / trials): the rows'
    /// differences against the error of two independent simulations.
    pub chi_square: f64,
    /// Rows where either recall lies strictly between 0 and 1 (its degrees of freedom).
    pub rows: usize,
    /// P(χ²_rows ≥ chi_square): small when the recalls really differ.
    pub p_value: f64,
    /// Prompts per row for an expected Bayes factor of 20:1 for the leader
    /// when it is true: ⌈ln 20 / Σ_r KL(p_a ‖ p_b)⌉; None when the recalls
    /// do not differ beyond simulation error (p ≥ [`SIMULATION_ERROR_P`]).
    pub prompts_per_row: Option<u64>,
}

impl Separation {
    /// Compares recalls `a` and `b` (unclamped, one per row) simulated from `trials` trials per cell.
    pub fn of(leader: &str, runner: &str, a: &[f64], b: &[f64], trials: u64) -> Separation {
        let t = trials.max(1) as f64;
        let (mut chi_square, mut rows) = (0.0, 0usize);
        for (&pa, &pb) in a.iter().zip(b) {
            let mean = 0.5 * (pa + pb);
            let variance = 2.0 * mean * (1.0 - mean) / t;
            if variance > 0.0 {
                chi_square += (pa - pb) * (pa - pb) / variance;
                rows += 1;
            }
        }
        let kl = kl_per_prompt(a, b, trials);
        let p_value = if rows == 0 { 1.0 } else { upper_regularized_gamma(rows as f64 / 2.0, chi_square / 2.0) };
        let prompts_per_row = (p_value < SIMULATION_ERROR_P && kl > 0.0).then(|| (20f64.ln() / kl).ceil().min(u64::MAX as f64) as u64);
        Separation { leader: leader.to_string(), runner: runner.to_string(), chi_square, rows, p_value, prompts_per_row }
    }

    /// The sentence a verdict gains; `prompts_now` is the median prompts per observed row.
    pub fn sentence(&self, prompts_now: u64) -> String {
        let rows = |n: usize| if n == 1 { "1 row".to_string() } else { format!("{n} rows") };
        match self.prompts_per_row {
            Some(n) => format!(
                "in these cells {} and {} predict different recalls (χ² {:.1} on {}); were {} true, about {n} prompts per row would give 20:1 between them (the rows hold a median of {prompts_now})",
                self.leader, self.runner, self.chi_square, rows(self.rows), self.leader
            ),
            None if self.chi_square == 0.0 => format!(
                "in these cells {} and {} simulate the same recall in every row, so more prompts of the same rows cannot separate them; the next experiment, a per-layer capture or `dsa-recall check` can",
                self.leader, self.runner
            ),
            None => format!(
                "in these cells {} and {} predict the same recall within simulation error (χ² {:.1} on {}, p {:.2}), so more prompts of the same rows cannot separate them; the next experiment, a per-layer capture or `dsa-recall check` can",
                self.leader, self.runner, self.chi_square, rows(self.rows), self.p_value
            ),
        }
    }
}

/// A simulated recall from `n_sim` trials kept inside [1/(2n), 1 − 1/(2n)]:
/// 0 of n simulated cannot prove a probability of exactly 0.
pub fn clamped(p: f64, n_sim: u64) -> f64 {
    let e = 0.5 / n_sim.max(1) as f64;
    p.clamp(e, 1.0 - e)
}

/// KL(Bernoulli(pa) ‖ Bernoulli(pb)) in nats: the expected log Bayes factor
/// of one prompt for a true `pa` against `pb`.
pub fn kl_bernoulli(pa: f64, pb: f64) -> f64 {
    let term = |x: f64, y: f64| if x > 0.0 { x * (x / y).ln() } else { 0.0 };
    term(pa, pb) + term(1.0 - pa, 1.0 - pb)
}

/// Σ over rows of [`kl_bernoulli`] of recalls `a` (true) against `b`, each
/// clamped as the likelihood clamps recalls simulated from `trials` trials:
/// the expected log Bayes factor of one prompt in every row.
pub fn kl_per_prompt(a: &[f64], b: &[f64], trials: u64) -> f64 {
    a.iter().zip(b).map(|(&pa, &pb)| kl_bernoulli(clamped(pa, trials), clamped(pb, trials))).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_recalls_are_within_simulation_error() {
        let a = [0.5, 0.2, 1.0, 0.0];
        let s = Separation::of("a", "b", &a, &a, 200);
        assert_eq!((s.chi_square, s.rows, s.p_value, s.prompts_per_row), (0.0, 2, 1.0, None));
        assert!(s.sentence(3).contains("simulate the same recall in every row"));
        let near = Separation::of("a", "b", &[0.5], &[0.52], 200);
        assert_eq!((near.rows, near.prompts_per_row), (1, None));
        assert!(near.sentence(3).contains("within simulation error (χ² 0.2 on 1 row, p 0.69)"), "{}", near.sentence(3));
    }

    #[test]
    fn chi_square_and_prompts_by_hand() {
        // One row, 0.6 against 0.4 from 200 trials: variance 2·0.25/200 =
        // 0.0025, χ² = 0.04/0.0025 = 16 on 1 row, p ≈ 6.3e-5; KL(0.6‖0.4) =
        // 0.2·ln 1.5 ≈ 0.081093, ln 20 / KL ≈ 36.94 → 37 prompts.
        let s = Separation::of("a", "b", &[0.6], &[0.4], 200);
        assert!((s.chi_square - 16.0).abs() < 1e-9, "{}", s.chi_square);
        assert_eq!(s.rows, 1);
        assert!((s.p_value - 6.334e-5).abs() < 1e-7, "{}", s.p_value);
        assert_eq!(s.prompts_per_row, Some(37));
        assert!(s.sentence(5).ends_with("about 37 prompts per row would give 20:1 between them (the rows hold a median of 5)"));
        // The same difference from 20 trials is noise: χ² 1.6, p ≈ 0.21.
        let noisy = Separation::of("a", "b", &[0.6], &[0.4], 20);
        assert!((noisy.p_value - 0.2059).abs() < 1e-3, "{}", noisy.p_value);
        assert_eq!(noisy.prompts_per_row, None);
    }

    #[test]
    fn recalls_at_zero_against_one_separate_in_one_prompt() {
        // Clamped at 1/400 and 1 − 1/400: KL ≈ 5.98 per row > ln 20.
        let s = Separation::of("a", "b", &[1.0], &[0.0], 200);
        assert_eq!(s.prompts_per_row, Some(1));
    }
}

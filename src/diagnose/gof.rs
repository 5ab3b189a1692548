//! Goodness of fit: does the best candidate explain the counts at all, or
//! only better than the others? A deviance against the saturated model
//! (each row at its own observed recall), its p-value by a parametric
//! bootstrap from the best candidate's recalls.

use super::observations::Observation;
use super::rank::{log_binomial, Ranked};
use super::separation::clamped;
use rand_distr::{Binomial, Distribution};
use serde::Serialize;

/// Below this p the best candidate fits the rows badly: the verdict is
/// "outside the catalogue".
pub const OUTSIDE_P: f64 = 0.01;
/// Bootstrap draws at most …
pub const GOF_DRAWS: u64 = 2000;
/// … stopping once this many reach the observed deviance (Besag and
/// Clifford's sequential p-value: a good fit is known after a few dozen).
pub const GOF_EXCEEDANCES: u64 = 20;
/// The bootstrap's seed: the same rows give the same p.
const GOF_SEED: u64 = 0x60f_1e55;

/// The test's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GoodnessOfFit {
    /// The candidate tested (the best).
    pub hypothesis: String,
    /// 2 Σ_rows [log L(found | observed recall) − log L(found | its recall)].
    pub deviance: f64,
    /// Share of bootstrap draws whose deviance reaches the observed one.
    pub p_value: f64,
    /// Bootstrap draws made.
    pub draws: u64,
}

/// One row's deviance term under recall `p` (clamped by the caller).
fn deviance_term(found: u64, total: u64, p: f64) -> f64 {
    let own = found as f64 / total as f64;
    2.0 * (log_binomial(found, total, own) - log_binomial(found, total, p)).max(0.0)
}

/// Tests the best candidate of `ranking` (recalls simulated at `trials`
/// per cell) on `rows`. Each draw takes each row's true recall as the
/// simulated one plus its simulation error (Binomial(trials, p) / trials),
/// then the counts from it, so that a few hundred trials per cell do not
/// read as a misfit at many prompts per row.
pub fn goodness_of_fit(rows: &[Observation], ranking: &[Ranked], trials: u64) -> Option<GoodnessOfFit> {
    let best = ranking.first()?;
    if rows.is_empty() || best.recalls.len() != rows.len() {
        return None;
    }
    let p: Vec<f64> = best.recalls.iter().map(|&q| clamped(q, trials)).collect();
    let observed: f64 = rows.iter().zip(&p).map(|(r, &q)| deviance_term(r.found, r.total, q)).sum();
    let mut rng = crate::base::rng::stream(GOF_SEED, &[]);
    let (mut reached, mut draws) = (0u64, 0u64);
    while draws < GOF_DRAWS && reached < GOF_EXCEEDANCES {
        draws += 1;
        let mut d = 0.0;
        for (r, &q) in rows.iter().zip(&p) {
            let truth = match Binomial::new(trials.max(1), q) {
                Ok(b) => b.sample(&mut rng) as f64 / trials.max(1) as f64,
                Err(_) => q,
            };
            let found = Binomial::new(r.total, truth).map_or(0, |b| b.sample(&mut rng));
            d += deviance_term(found, r.total, q);
        }
        reached += u64::from(d >= observed - 1e-9);
    }
    // Sequential: h/L when stopped at h exceedances, else (h + 1)/(B + 1).
    let p_value = if reached >= GOF_EXCEEDANCES { reached as f64 / draws as f64 } else { (reached + 1) as f64 / (draws + 1) as f64 };
    Some(GoodnessOfFit { hypothesis: best.hypothesis.clone(), deviance: observed, p_value, draws })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::hypothesis::FaultClass;

    fn rows(counts: &[(u64, u64)]) -> Vec<Observation> {
        let mut csv = String::from("context_tokens,depth_percent,topk,config,found,total\n");
        for (i, (f, t)) in counts.iter().enumerate() {
            csv.push_str(&format!("{}K,50,512,fp8,{f},{t}\n", 4 * (i + 1)));
        }
        super::super::observations::parse("t.csv", &csv, &|_| Ok(())).unwrap().rows
    }

    fn best(recalls: Vec<f64>) -> Vec<Ranked> {
        vec![Ranked {
            hypothesis: "healthy".into(),
            log_likelihood: 0.0,
            posterior: 1.0,
            log10_bayes_factor: 0.0,
            rows_changed: 0,
            recalls,
            class: FaultClass::Healthy,
            needle_multiplier: 1.0,
            needle_gain_log10: 0.0,
            loss: None,
            gate: None,
        }]
    }

    #[test]
    fn counts_near_the_prediction_fit_and_a_valley_does_not() {
        let fit = goodness_of_fit(&rows(&[(18, 20), (17, 20), (19, 20), (18, 20)]), &best(vec![0.9; 4]), 1000).unwrap();
        assert!(fit.p_value > 0.1 && fit.draws < GOF_DRAWS, "{fit:?}");
        // Recall falling then rising where 0.9 is predicted throughout.
        let fit = goodness_of_fit(&rows(&[(20, 20), (2, 20), (0, 20), (19, 20)]), &best(vec![0.9; 4]), 1000).unwrap();
        assert!(fit.p_value < OUTSIDE_P && fit.deviance > 50.0, "{fit:?}");
        assert_eq!(fit.draws, GOF_DRAWS);
        // The same rows give the same p.
        assert_eq!(
            goodness_of_fit(&rows(&[(18, 20), (12, 20)]), &best(vec![0.9; 2]), 1000),
            goodness_of_fit(&rows(&[(18, 20), (12, 20)]), &best(vec![0.9; 2]), 1000)
        );
    }

    #[test]
    fn simulation_error_is_not_a_misfit() {
        // 400 prompts at 0.875 where 200 trials simulated 0.9: within the
        // simulation's error (± 0.021), though not the counts' (± 0.015).
        let fit = goodness_of_fit(&rows(&[(350, 400), (352, 400)]), &best(vec![0.9, 0.9]), 200).unwrap();
        assert!(fit.p_value > OUTSIDE_P, "{fit:?}");
    }
}

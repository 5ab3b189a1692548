//! The needle's survival of top-k, in one place for every estimator
//! (docs/MODEL.md, "Estimators"): it survives when it lies in the raw window,
//! or when fewer than k_eff of the N competitor rows are ahead of its best
//! row. With each competitor ahead independently with probability p, that
//! count is Binomial(N, p), so survival is P(Bin(N, p) < k_eff); the
//! estimators differ only in how they get p (a weighted sample of rows, a
//! fitted tail) and how they average over the needle's own score.

use crate::base::special::binomial_cdf_below;
use crate::model::geometry::NeedlePlacement;
use crate::score::selection::TieRule;

/// The needle's survival when no sample is needed: 1 when it lies in the
/// raw window, 0 when none of its rows is a candidate; None otherwise.
pub fn settled_survival(placement: &NeedlePlacement) -> Option<f64> {
    if placement.in_window {
        Some(1.0)
    } else if placement.rows.is_empty() {
        Some(0.0)
    } else {
        None
    }
}

/// Share of tied competitors the tie rule puts ahead of a needle whose
/// first row is `first_row`, among `competitors` rows.
pub fn tie_share(rule: TieRule, first_row: u64, competitors: u64) -> f64 {
    let before = first_row as f64 / competitors.max(1) as f64;
    match rule {
        TieRule::Random => 0.5,
        TieRule::LowestIndex => before,
        TieRule::HighestIndex => 1.0 - before,
    }
}

/// Survival when each of `competitors` rows is ahead with probability `p`.
pub fn binomial_survival(competitors: u64, p: f64, k_eff: u64) -> f64 {
    binomial_cdf_below(competitors, p, k_eff)
}

/// p̂(s) and its standard error.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exceedance {
    pub p: f64,
    pub se: f64,
}

/// P(Bin(n, p̂) < k) corrected for the noise in p̂: with p̂ ≈ p + ε,
/// E[G(p̂)] ≈ G(p) + ½G''(p)·se², so G(p̂) − ½G''·se² with G'' from the
/// central difference at step se: 2G(p̂) − ½(G(p̂ − se) + G(p̂ + se)).
pub fn survival_with_noisy_p(n: u64, k: u64, e: Exceedance) -> f64 {
    let g = |p: f64| binomial_survival(n, p.clamp(0.0, 1.0), k);
    let centre = g(e.p);
    if e.se == 0.0 {
        return centre;
    }
    (2.0 * centre - 0.5 * (g(e.p - e.se) + g(e.p + e.se))).clamp(0.0, 1.0)
}

/// P(survive) for one cell of one trial, and the variance of that estimate
/// from the needle-score sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SurvivalEstimate {
    pub probability: f64,
    pub variance: f64,
}

/// Survival of a needle whose best of `needle_rows` rows beats fewer than
/// `k_eff` of `competitors` haystack rows, averaged over the sorted needle
/// scores `sorted` (each row's score is one draw of this distribution, so the
/// best of R has CDF F^R: draw i of M carries weight (i/M)^R − ((i−1)/M)^R).
pub fn survival_from_samples(
    sorted: &[f64],
    exceedance: impl Fn(f64) -> f64,
    needle_rows: u64,
    competitors: u64,
    k_eff: u64,
) -> SurvivalEstimate {
    let m = sorted.len();
    if m == 0 || needle_rows == 0 {
        return SurvivalEstimate::default();
    }
    let r = needle_rows as i32;
    let (mut e, mut e2) = (0.0, 0.0);
    let mut below = 0.0;
    for (i, &s) in sorted.iter().enumerate() {
        let upto = ((i + 1) as f64 / m as f64).powi(r);
        let w = upto - below;
        below = upto;
        if w == 0.0 {
            continue;
        }
        let g = binomial_survival(competitors, exceedance(s), k_eff);
        e += w * g;
        e2 += w * g * g;
    }
    // The estimate weighs about M/R independent maxima.
    let variance = (e2 - e * e).max(0.0) * f64::from(r) / m as f64;
    SurvivalEstimate { probability: e.clamp(0.0, 1.0), variance }
}

/// Survival averaged over equally likely draws of the needle's best row,
/// each given as the share `p` of competitors ahead of it; the variance is
/// that of the mean over the draws.
pub fn survival_over_draws(ahead: &[f64], competitors: u64, k_eff: u64) -> SurvivalEstimate {
    let (mut e, mut e2) = (0.0, 0.0);
    for &p in ahead {
        let g = binomial_survival(competitors, p, k_eff);
        e += g;
        e2 += g * g;
    }
    let m = ahead.len() as f64;
    let (mean, var) = (e / m, (e2 / m - (e / m).powi(2)).max(0.0) / m);
    SurvivalEstimate { probability: mean.clamp(0.0, 1.0), variance: var }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(rows: std::ops::Range<u64>, in_window: bool) -> NeedlePlacement {
        NeedlePlacement { tokens: rows.start * 4..rows.end * 4, rows, in_window }
    }

    #[test]
    fn settled_cases_are_the_window_and_the_missing_needle() {
        assert_eq!(settled_survival(&placement(10..12, true)), Some(1.0));
        assert_eq!(settled_survival(&placement(10..10, false)), Some(0.0));
        assert_eq!(settled_survival(&placement(10..12, false)), None);
    }

    #[test]
    fn tie_share_follows_the_rule() {
        assert_eq!(tie_share(TieRule::Random, 30, 100), 0.5);
        assert_eq!(tie_share(TieRule::LowestIndex, 30, 100), 0.3);
        assert_eq!(tie_share(TieRule::HighestIndex, 30, 100), 0.7);
        assert_eq!(tie_share(TieRule::LowestIndex, 0, 0), 0.0);
    }

    #[test]
    fn the_noise_correction_removes_most_of_the_bias() {
        // p̂ = p ± se with equal weight has mean p and variance se²: the plain
        // G(p̂) is biased by about ½G''se², the corrected one by O(se⁴). With
        // se a fifth of G's transition width in p (√(np)/n ≈ 0.0011 here) the
        // residual is a few % of the plain bias; 25 % leaves room.
        let (n, k) = (4000, 20);
        for (p, se) in [(0.003, 0.0002), (0.004, 0.0002), (0.0045, 0.0002), (0.0065, 0.0001)] {
            let exact = binomial_survival(n, p, k);
            let plain = 0.5 * (binomial_survival(n, p + se, k) + binomial_survival(n, p - se, k));
            let corrected = 0.5
                * (survival_with_noisy_p(n, k, Exceedance { p: p + se, se }) + survival_with_noisy_p(n, k, Exceedance { p: p - se, se }));
            assert!((corrected - exact).abs() < 0.25 * (plain - exact).abs(), "p {p}: exact {exact}, plain {plain}, corrected {corrected}");
        }
        assert_eq!(survival_with_noisy_p(n, k, Exceedance { p: 0.005, se: 0.0 }), binomial_survival(n, 0.005, k));
    }

    #[test]
    fn averages_over_draws_weigh_to_one() {
        let (n, k, p) = (1000, 10, 0.008);
        let want = binomial_survival(n, p, k);
        let over = survival_over_draws(&[p; 64], n, k);
        assert!((over.probability - want).abs() < 1e-15 && over.variance < 1e-30);
        // Order-statistic weights of the best of 3 rows sum to one.
        let sorted: Vec<f64> = (0..200).map(|i| i as f64).collect();
        let best_of_3 = survival_from_samples(&sorted, |_| p, 3, n, k);
        assert!((best_of_3.probability - want).abs() < 1e-12 && best_of_3.variance < 1e-20);
        assert_eq!(survival_from_samples(&sorted, |_| p, 0, n, k), SurvivalEstimate::default());
    }
}

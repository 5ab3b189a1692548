//! Interval estimates and exact reference probabilities.

/// Two-sided 95 % normal quantile.
pub const Z95: f64 = 1.959_963_984_540_054;

/// Wilson score interval for `successes` out of `n` at normal quantile `z`.
/// Returns (low, high); for n = 0 the uninformative (0, 1).
pub fn wilson_interval(successes: u64, n: u64, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let n_f = n as f64;
    let p = successes as f64 / n_f;
    let z2 = z * z;
    let denom = 1.0 + z2 / n_f;
    let centre = (p + z2 / (2.0 * n_f)) / denom;
    let half = z * (p * (1.0 - p) / n_f + z2 / (4.0 * n_f * n_f)).sqrt() / denom;
    // Exact endpoints at p = 0 and p = 1 (rounding could leave 1e-17 residue).
    let low = if successes == 0 { 0.0 } else { (centre - half).max(0.0) };
    let high = if successes == n { 1.0 } else { (centre + half).min(1.0) };
    (low, high)
}

/// Probability that a uniformly random `k`-subset of `n` items contains at
/// least one of `m` marked items: 1 − C(n−m, k)/C(n, k).
///
/// Computed as a product of ratios so it neither overflows nor loses
/// precision for n in the millions.
pub fn chance_of_hit(n: u64, m: u64, k: u64) -> f64 {
    if m == 0 {
        return 0.0;
    }
    if k >= n || m > n || k + m > n {
        return 1.0;
    }
    // C(n−m, k)/C(n, k) = Π_{i=0}^{m−1} (n−k−i)/(n−i)
    let mut miss = 1.0f64;
    for i in 0..m {
        miss *= (n - k - i) as f64 / (n - i) as f64;
    }
    1.0 - miss
}

/// Exact two-sided McNemar test: the p-value of `gained` vs `lost` discordant
/// pairs under H0 (each discordant pair is a fair coin), i.e.
/// min(1, 2·P[Binomial(n, ½) ≤ min(gained, lost)]), n = gained + lost.
/// Summed in log space so n in the millions neither underflows nor overflows.
pub fn mcnemar_exact_p(gained: u64, lost: u64) -> f64 {
    let n = gained + lost;
    if n == 0 {
        return 1.0;
    }
    let m = gained.min(lost);
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    // log pmf(i), built up from pmf(0) = 2^-n by the ratio (n−i+1)/i.
    let mut log_pmf = ln_half_n;
    let mut logs = Vec::with_capacity(m as usize + 1);
    logs.push(log_pmf);
    for i in 1..=m {
        log_pmf += ((n - i + 1) as f64).ln() - (i as f64).ln();
        logs.push(log_pmf);
    }
    let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log_tail = top + logs.iter().map(|l| (l - top).exp()).sum::<f64>().ln();
    (2.0 * log_tail.exp()).min(1.0)
}

/// Holm–Bonferroni step-down adjustment of a family of p-values, in the
/// input's order: sorted ascending, the i-th (from 0) becomes
/// min(1, max over j ≤ i of (m − j)·p_(j)). Rejecting where the adjusted
/// value is below α keeps the family-wise error rate at α. NaN inputs stay
/// NaN and do not count toward m.
pub fn holm_adjust(p: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| !p[i].is_nan()).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let m = order.len();
    let mut out = vec![f64::NAN; p.len()];
    let mut running = 0.0f64;
    for (j, &i) in order.iter().enumerate() {
        running = running.max(((m - j) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

/// Mean and normal-approximation 95 % interval (mean ± z·s/√n) from a sum
/// and a sum of squares. None for n = 0; a zero-width interval for n = 1.
pub fn mean_interval(sum: f64, sum_sq: f64, n: u64) -> Option<(f64, f64, f64)> {
    if n == 0 {
        return None;
    }
    let nf = n as f64;
    let mean = sum / nf;
    let var = if n > 1 { ((sum_sq - nf * mean * mean) / (nf - 1.0)).max(0.0) } else { 0.0 };
    let half = Z95 * (var / nf).sqrt();
    Some((mean, mean - half, mean + half))
}

/// Probabilities of the quantiles stored per cell.
pub const QUANTILE_PROBS: [f64; 5] = [0.05, 0.25, 0.5, 0.75, 0.95];

/// Quantiles of `values` at [`QUANTILE_PROBS`] by linear interpolation
/// between order statistics (Hyndman–Fan type 7, as numpy's default).
pub fn quantiles(values: &mut [f64]) -> Option<[f64; 5]> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(QUANTILE_PROBS.map(|p| {
        let h = (n - 1) as f64 * p;
        let (lo, frac) = (h.floor() as usize, h - h.floor());
        let hi = (lo + 1).min(n - 1);
        values[lo] + frac * (values[hi] - values[lo])
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn holm_matches_a_hand_computed_family() {
        // Sorted 0.01, 0.02, 0.03, 0.5 with m = 4: 0.04, 0.06, 0.06 (the
        // running maximum over 2·0.03), 0.5; returned in input order.
        let got = holm_adjust(&[0.03, 0.5, 0.01, 0.02]);
        let want = [0.06, 0.5, 0.04, 0.06];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{got:?}");
        }
        assert!(holm_adjust(&[]).is_empty());
        let with_nan = holm_adjust(&[f64::NAN, 0.4, 0.9]);
        assert!(with_nan[0].is_nan());
        assert_eq!(&with_nan[1..], &[0.8, 0.9]);
        assert_eq!(holm_adjust(&[0.9, 0.9]), vec![1.0, 1.0]);
    }

    use super::*;

    #[test]
    fn mcnemar_matches_hand_computed_binomial_tails() {
        // n = 10, min 2: P[X ≤ 2] = (1 + 10 + 45)/1024 = 56/1024; two-sided 0.109375.
        assert!((mcnemar_exact_p(2, 8) - 0.109375).abs() < 1e-12);
        assert!((mcnemar_exact_p(8, 2) - 0.109375).abs() < 1e-12);
        // n = 5, min 0: 2·(1/32) = 0.0625.
        assert!((mcnemar_exact_p(0, 5) - 0.0625).abs() < 1e-12);
        assert_eq!(mcnemar_exact_p(3, 3), 1.0);
        assert_eq!(mcnemar_exact_p(0, 0), 1.0);
        // Huge n stays finite: 5000 vs 5200 discordant pairs, z ≈ 1.99 → p ≈ 0.047.
        let p = mcnemar_exact_p(5000, 5200);
        assert!(p > 0.04 && p < 0.055, "{p}");
    }

    #[test]
    fn quantiles_match_numpy_type_7() {
        // numpy.quantile([1,2,3,4,10], [.05,.25,.5,.75,.95]) = [1.2, 2, 3, 4, 8.8]
        let q = quantiles(&mut [10.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        let want = [1.2, 2.0, 3.0, 4.0, 8.8];
        for (a, b) in q.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{q:?}");
        }
        assert!(quantiles(&mut []).is_none());
    }

    #[test]
    fn mean_interval_by_hand() {
        // values 1, 2, 3: mean 2, s = 1, half-width 1.96/√3.
        let (m, lo, hi) = mean_interval(6.0, 14.0, 3).unwrap();
        assert!((m - 2.0).abs() < 1e-12);
        assert!((hi - m - Z95 / 3f64.sqrt()).abs() < 1e-12 && (m - lo - Z95 / 3f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn wilson_matches_published_values() {
        // Newcombe (1998), table I: 81/263 → 0.2553 to 0.3662 (95 %).
        let (lo, hi) = wilson_interval(81, 263, Z95);
        assert!((lo - 0.2553).abs() < 5e-5, "{lo}");
        assert!((hi - 0.3662).abs() < 5e-5, "{hi}");
        // 15/148 → 0.0624 to 0.1605.
        let (lo, hi) = wilson_interval(15, 148, Z95);
        assert!((lo - 0.0624).abs() < 5e-5, "{lo}");
        assert!((hi - 0.1605).abs() < 5e-5, "{hi}");
    }

    #[test]
    fn wilson_edges() {
        assert_eq!(wilson_interval(0, 10, Z95).0, 0.0);
        assert_eq!(wilson_interval(10, 10, Z95).1, 1.0);
        assert_eq!(wilson_interval(0, 0, Z95), (0.0, 1.0));
        let (lo, hi) = wilson_interval(0, 10, Z95);
        assert!(hi > 0.2 && hi < 0.35 && lo == 0.0);
    }

    #[test]
    fn chance_of_hit_small_cases_by_enumeration() {
        // n = 6, m = 2, k = 3: subsets of size 3 avoiding both marked = C(4,3) = 4 of C(6,3) = 20.
        assert!((chance_of_hit(6, 2, 3) - (1.0 - 4.0 / 20.0)).abs() < 1e-12);
        assert!((chance_of_hit(100, 1, 7) - 0.07).abs() < 1e-12);
        assert_eq!(chance_of_hit(5, 1, 5), 1.0);
        assert_eq!(chance_of_hit(5, 3, 3), 1.0);
        assert_eq!(chance_of_hit(5, 0, 3), 0.0);
    }
}

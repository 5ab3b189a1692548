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

#[cfg(test)]
mod tests {
    use super::*;

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

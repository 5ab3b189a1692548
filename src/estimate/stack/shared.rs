//! What both ways of reading the stack share: a cell's whole-model result,
//! the overlap a latent correlation implies, and the key of a cell's draws.

use crate::base::special::{bivariate_normal_cdf, normal_quantile};
use crate::score::trial::TrialSpec;

/// Whole-model recall of one cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StackEstimate {
    /// Indexed layers in the stack.
    pub indexed_layers: u64,
    pub trials: u64,
    /// Trials in which the model retrieved the needle: at least `quorum`
    /// indexed layers selected it for at least one query token (or HCA
    /// retrieves, when assumed).
    pub survived: u64,
    pub recall: f64,
    /// Wilson 95 % interval of `recall`.
    pub ci_low: f64,
    pub ci_high: f64,
    /// Indexed layers that select the needle for at least one query token:
    /// (mean, 95 % low, 95 % high) …
    pub layers_reached: Option<(f64, f64, f64)>,
    /// … and its quantiles (5, 25, 50, 75, 95 %).
    pub layers_reached_quantiles: Option<[f64; 5]>,
    /// Whole-model recall at the two ends of the least-known assumptions
    /// (how much the needle's difficulty and the fault's randomness are
    /// shared between layers: docs/MODEL.md, "The band"), lower first;
    /// quantile needle only.
    pub band: Option<(f64, f64)>,
    /// The whole-model needle margin at the sweep's recall threshold, when
    /// the trials carry critical ranks (docs/MODEL.md, "The needle margin").
    pub margin: Option<crate::estimate::margin::Margin>,
}

/// Share of one layer's top-`share` rows that the adjacent layer also
/// selects, when a row's latents in the two layers have correlation
/// `correlation`: P(g′ > z | g > z) with z = Φ⁻¹(1 − share).
/// 1 when every row is selected (`share` ≥ 1); NaN for a share ≤ 0.
pub fn adjacent_overlap(correlation: f64, share: f64) -> f64 {
    if share >= 1.0 {
        return 1.0;
    }
    if share.is_nan() || share <= 0.0 {
        return f64::NAN;
    }
    let z = normal_quantile(1.0 - share);
    bivariate_normal_cdf(-z, -z, correlation) / share
}

/// The latent correlation whose [`adjacent_overlap`] at `share` is
/// `overlap` (bisection; `overlap` from `share` to 1).
pub fn correlation_for_overlap(overlap: f64, share: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 0.999_999);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if adjacent_overlap(mid, share) < overlap {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Tetrachoric correlation of two binary outcomes with marginals `pa`, `pb`
/// and joint success share `both`: the latent correlation r with
/// P(ga > za, gb > zb) = `both`. None when either outcome never varies.
pub fn tetrachoric(both: f64, pa: f64, pb: f64) -> Option<f64> {
    if !(pa > 0.0 && pa < 1.0 && pb > 0.0 && pb < 1.0) {
        return None;
    }
    let (za, zb) = (normal_quantile(1.0 - pa), normal_quantile(1.0 - pb));
    let (mut lo, mut hi) = (-0.999_999, 0.999_999);
    for _ in 0..50 {
        let mid = 0.5 * (lo + hi);
        if bivariate_normal_cdf(-za, -zb, mid) < both {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(0.5 * (lo + hi))
}

/// What a cell's draws are keyed by: its values (context, needle offset,
/// k), not its place in this sweep's lists, so that the same cell draws the
/// same chains in any sweep, shard or resumed run (depths that share trials
/// share draws too: the trial seed is the depth's own in a sweep).
pub(super) fn cell_key(spec: &TrialSpec<'_>, ci: usize, si: usize, ki: usize) -> [u64; 3] {
    [spec.contexts[ci], spec.spot(si).1.unwrap_or(u64::MAX), spec.topks[ki]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_runs_from_chance_to_one_and_inverts() {
        let share = 1.0 / 16.0;
        assert!((adjacent_overlap(0.0, share) - share).abs() < 1e-9);
        assert!(adjacent_overlap(0.999_999, share) > 0.99);
        assert_eq!(adjacent_overlap(0.5, 1.0), 1.0);
        assert!(adjacent_overlap(0.5, 0.0).is_nan() && adjacent_overlap(0.5, f64::NAN).is_nan());
        for target in [0.3, 0.7, 0.85, 0.95] {
            let rho = correlation_for_overlap(target, share);
            assert!((adjacent_overlap(rho, share) - target).abs() < 1e-9, "{target}: {rho}");
        }
    }

    #[test]
    fn tetrachoric_recovers_a_known_latent_correlation() {
        // Joint share from the bivariate normal itself, then back.
        let (pa, pb, r) = (0.3, 0.6, 0.55);
        let both = bivariate_normal_cdf(-normal_quantile(1.0 - pa), -normal_quantile(1.0 - pb), r);
        assert!((tetrachoric(both, pa, pb).unwrap() - r).abs() < 1e-9);
        assert_eq!(tetrachoric(0.5, 1.0, 0.5), None);
        // Independent outcomes: r = 0.
        assert!(tetrachoric(pa * pb, pa, pb).unwrap().abs() < 1e-9);
    }
}

//! The quantile needle (docs/MODEL.md, "The quantile needle"): how hard a
//! needle is, stated as its haystack exceedance u, the share of haystack
//! rows whose exact score beats the needle's.
//!
//! log10 u = log10(median) + τ_p·Z_prompt + τ_l·Z_layer + τ_t·Z_token, with
//! independent standard normals: a trial is one prompt (Z_prompt), each
//! indexer layer of the model its own Z_layer and each query token its own
//! Z_token. The simulated layer and query take the first of each. The
//! needle's rank among the N haystack rows of a context is then
//! Binomial(N, u), drawn by inversion at one uniform per trial so that a
//! longer context never ranks the needle higher.

use crate::base::rng::{self, tag};
use crate::base::special::uniform_below_binomial_cdf;
use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

/// How the needle's signal is set (docs/MODEL.md, "The needle's unit").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum NeedleUnit {
    /// `needle.strength` haystack standard deviations of each looking
    /// head's dot product, the same in every prompt (the stress unit).
    #[default]
    Strength,
    /// The needle's exact score is placed at a drawn haystack exceedance.
    Quantile(QuantileNeedle),
}

impl NeedleUnit {
    pub fn is_strength(&self) -> bool {
        matches!(self, NeedleUnit::Strength)
    }

    pub fn quantile(&self) -> Option<&QuantileNeedle> {
        match self {
            NeedleUnit::Quantile(q) => Some(q),
            NeedleUnit::Strength => None,
        }
    }
}

/// The exceedance distribution of the quantile needle.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantileNeedle {
    /// Median exceedance u (0 < u < 1).
    pub exceedance: f64,
    /// Standard deviations of log10 u over prompts, layers and query tokens, in decades.
    pub prompt_spread: f64,
    pub layer_spread: f64,
    pub token_spread: f64,
}

/// One trial's draws for the simulated layer and query token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NeedleDraw {
    /// The prompt's standard normal, shared by every layer and token …
    pub prompt: f64,
    /// … the simulated layer's and the simulated query token's.
    pub layer: f64,
    pub token: f64,
    /// log10 u of the simulated layer and query token.
    pub log10_exceedance: f64,
    /// Uniform in (0, 1) that inverts the rank's binomial distribution.
    pub rank_uniform: f64,
}

/// A uniform in (0, 1) from 53 random bits, centred in their interval.
pub fn open_uniform(bits: u64) -> f64 {
    ((bits >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

impl QuantileNeedle {
    /// The same needle with its median exceedance times `multiple` (a
    /// `needle=M` variant's): the spreads, and so the draws, unchanged.
    pub fn scaled(&self, multiple: f64) -> QuantileNeedle {
        QuantileNeedle { exceedance: self.exceedance * multiple, ..*self }
    }

    /// Standard deviation of log10 u for one layer and token.
    pub fn total_spread(&self) -> f64 {
        (self.prompt_spread.powi(2) + self.layer_spread.powi(2) + self.token_spread.powi(2)).sqrt()
    }

    /// The needle's own token correlation ρ_N (docs/MODEL.md, "The needle's
    /// token correlation"): of the spread of log10 u within one layer, the
    /// prompt and layer parts persist over that layer's query tokens and
    /// the token part churns like any row, at the rows' correlation
    /// `row_token_correlation` (ρ_T), so
    /// ρ_N = (σ_p² + σ_l² + ρ_T·σ_t²) / (σ_p² + σ_l² + σ_t²).
    /// A needle with no spread at all is a row like any: ρ_T.
    pub fn token_correlation(&self, row_token_correlation: f64) -> f64 {
        let persist = self.prompt_spread.powi(2) + self.layer_spread.powi(2);
        let token = self.token_spread.powi(2);
        if persist + token <= 0.0 {
            return row_token_correlation;
        }
        (persist + row_token_correlation * token) / (persist + token)
    }

    /// log10 u for the prompt's normal and a layer's and a token's.
    pub fn log10_exceedance(&self, prompt: f64, layer: f64, token: f64) -> f64 {
        self.exceedance.log10() + self.prompt_spread * prompt + self.layer_spread * layer + self.token_spread * token
    }

    /// The trial's draws (its own stream: the strength unit draws nothing here).
    pub fn draw(&self, trial_seed: u64) -> NeedleDraw {
        let mut rng = rng::stream(trial_seed, &[tag::NEEDLE]);
        let prompt: f64 = rng.sample(StandardNormal);
        let layer: f64 = rng.sample(StandardNormal);
        let token: f64 = rng.sample(StandardNormal);
        let rank_uniform = open_uniform(rng.random::<u64>());
        NeedleDraw { prompt, layer, token, log10_exceedance: self.log10_exceedance(prompt, layer, token), rank_uniform }
    }
}

/// The needle in a few words, for titles and table headers: "strength 1
/// sd" under the strength unit (as before needle profiles), "niah profile
/// (median exceedance 2.90e-4)" under the quantile unit, "quantile (median
/// exceedance …, spread 0.37 decades)" when its knobs were set by hand.
pub fn needle_label(unit: &NeedleUnit, strength: f64, profile: Option<&str>) -> String {
    match unit {
        NeedleUnit::Strength => format!("strength {strength} sd"),
        NeedleUnit::Quantile(q) => match profile {
            Some(name) => format!("{name} profile (median exceedance {:.2e})", q.exceedance),
            None => format!("quantile (median exceedance {:.2e}, spread {:.2} decades)", q.exceedance, q.total_spread()),
        },
    }
}

/// u = 10^log10 u, kept inside (0, 1) (a draw above 1 means every row beats the needle).
pub fn exceedance_of(log10_exceedance: f64) -> f64 {
    10f64.powf(log10_exceedance.min(0.0)).clamp(f64::MIN_POSITIVE, 1.0)
}

/// The smallest m with P(Bin(n, u) ≤ m) ≥ `uniform`: the number of
/// haystack rows that outscore the needle.
pub fn rank_quantile(n: u64, u: f64, uniform: f64) -> u64 {
    if n == 0 || !(u > 0.0) {
        return 0;
    }
    if u >= 1.0 {
        return n;
    }
    // P(X ≤ m) = binomial_cdf_below(n, u, m + 1), non-decreasing in m.
    let (mut lo, mut hi) = (0u64, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if uniform_below_binomial_cdf(uniform, n, u, mid + 1) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// Whether the rank `rank_quantile(n, u, uniform) + above` is below `k`:
/// one CDF evaluation instead of the whole inversion (the whole-model
/// stack asks this for every layer and token).
pub fn ranks_below(n: u64, u: f64, uniform: f64, above: u64, k: u64) -> bool {
    if k <= above {
        return false;
    }
    let k = k - above;
    if k > n {
        return true;
    }
    let mean = n as f64 * u;
    let sd = (mean * (1.0 - u)).sqrt();
    // Far from the cut the answer is certain to double precision.
    if (k as f64) > mean + 40.0 * sd + 40.0 {
        return true;
    }
    if (k as f64) < mean - 40.0 * sd - 40.0 {
        return false;
    }
    uniform_below_binomial_cdf(uniform, n, u, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::special::binomial_cdf_below;

    #[test]
    fn rank_quantile_inverts_the_binomial_and_agrees_with_ranks_below() {
        for &(n, u) in &[(100u64, 0.05), (13_801, 2.9e-4), (262_144, 1e-3), (5, 0.9)] {
            for i in 0..200 {
                let v = (i as f64 + 0.5) / 200.0;
                let m = rank_quantile(n, u, v);
                assert!(binomial_cdf_below(n, u, m + 1) >= v, "{n} {u} {v}");
                assert!(m == 0 || binomial_cdf_below(n, u, m) < v, "{n} {u} {v}");
                for k in [m, m + 1, m + 2] {
                    assert_eq!(ranks_below(n, u, v, 0, k), m < k, "{n} {u} {v} {k}");
                    assert_eq!(ranks_below(n, u, v, 3, k + 3), m < k);
                }
            }
        }
        assert_eq!(rank_quantile(0, 0.5, 0.5), 0);
        assert_eq!(rank_quantile(10, 1.0, 0.5), 10);
        assert!(!ranks_below(10, 0.1, 0.5, 4, 4));
    }

    #[test]
    fn a_longer_context_never_ranks_the_needle_higher() {
        // Inversion at one uniform: Bin(n, u) quantiles grow with n.
        let u = 3e-4;
        for i in 0..100 {
            let v = (i as f64 + 0.5) / 100.0;
            let ranks: Vec<u64> = [1024u64, 4096, 16_384, 65_536, 262_144].iter().map(|&n| rank_quantile(n, u, v)).collect();
            assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{ranks:?}");
        }
    }

    #[test]
    fn the_needle_token_correlation_weighs_its_persistent_part() {
        // niah: 0.125 of 0.135 decades² persist, so ρ_N = (0.125 + ρ_T·0.01)/0.135.
        let niah = QuantileNeedle { exceedance: 2.9e-4, prompt_spread: 0.25, layer_spread: 0.25, token_spread: 0.1 };
        assert!((niah.token_correlation(0.7791) - (0.125 + 0.7791 * 0.01) / 0.135).abs() < 1e-12);
        assert!((niah.token_correlation(0.0) - 0.125 / 0.135).abs() < 1e-12);
        // The ends: all persistent → 1, all churn → the rows' ρ_T, none → ρ_T.
        assert_eq!(QuantileNeedle { token_spread: 0.0, ..niah }.token_correlation(0.5), 1.0);
        let churn = QuantileNeedle { prompt_spread: 0.0, layer_spread: 0.0, ..niah };
        assert!((churn.token_correlation(0.5) - 0.5).abs() < 1e-12);
        assert_eq!(QuantileNeedle { token_spread: 0.0, ..churn }.token_correlation(0.5), 0.5);
        // A wider prompt spread (hard) persists more.
        let hard = QuantileNeedle { prompt_spread: 0.6, ..niah };
        assert!(hard.token_correlation(0.7791) > niah.token_correlation(0.7791));
    }

    #[test]
    fn draws_have_the_set_median_and_spread() {
        // log10 u over 20 000 trials: mean log10(median), sd the total spread.
        // The mean's 99.9 % half-width is 3.29·σ/√n; the sd's ≈ 3.29·σ/√(2n).
        let q = QuantileNeedle { exceedance: 2.9e-4, prompt_spread: 0.25, layer_spread: 0.25, token_spread: 0.1 };
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|i| q.draw(rng::derive(5, &[i])).log10_exceedance).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
        let s = q.total_spread();
        assert!((mean - q.exceedance.log10()).abs() < 3.29 * s / (n as f64).sqrt(), "{mean}");
        assert!((sd - s).abs() < 3.29 * s / (2.0 * n as f64).sqrt(), "{sd} vs {s}");
    }
}

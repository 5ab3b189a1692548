//! Analytic prediction of recall, without generating the haystack.
//!
//! Given one trial (queries q, head weights w, common part c, channel
//! scales σ), haystack rows are iid, so head h's pre-activation
//! u_h = q_h·k is Gaussian with mean m_h = q_h·c and covariance
//! C = Q·diag(σ²)·Qᵀ, and a row's score is S = Σ_h w'_h ReLU(u_h). The
//! needle row's pre-activations are the same Gaussian shifted by
//! Δ_h = q_h·δ. The needle survives top-k iff fewer than k_eff of the N
//! competitors beat its best row: a Binomial(N, p(s*)) count with
//! p(s) = P(S > s). This module computes, per trial:
//!
//! * the exact mean and variance of S (closed forms for E[ReLU X] and
//!   E[ReLU X · ReLU Y] of Gaussians, below);
//! * a moment-matched tail for p(s) (see [`TailFit`]);
//! * the needle's best score by sampling its Gaussian pre-activations;
//! * P(Bin(N, p) < k) with [`binomial_cdf_below`].
//!
//! Formulas, assumptions and where they break: docs/MODEL.md, "Analytic
//! prediction".

use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::estimate::full::trial_seed;
use crate::estimate::predict_sampled::{predict_trial_sampled, sampled_prediction_applies};
use crate::model::haystack::TrialHaystack;
use crate::numerics::format::hadamard_rows_in_place;
use crate::numerics::format::ElementFormat;
use crate::numerics::pipeline::{LogitFormat, Rotation};
use crate::score::indexer::IndexerQuery;
use crate::score::trial::TrialSpec;
use crate::score::variant::PrecisionVariant;
use rand::Rng;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use std::f64::consts::PI;
use std::sync::OnceLock;

/// 1/√(2π).
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// Standard normal density.
pub fn normal_pdf(x: f64) -> f64 {
    INV_SQRT_2PI * (-0.5 * x * x).exp()
}

/// Standard normal upper tail Q(x) = P(Z > x), to ~1e-14 relative error.
pub fn normal_sf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 1.0 - normal_sf(-x);
    }
    if x <= 3.0 {
        // Φ(x) = ½ + φ(x)·Σ x^(2n+1)/(2n+1)!! (all terms positive, no cancellation
        // inside the sum; the ½ − … loses at most 3 digits at x = 3).
        let (mut term, mut sum, x2) = (x, x, x * x);
        let mut n = 1.0;
        while term > 1e-17 * sum {
            n += 2.0;
            term *= x2 / n;
            sum += term;
        }
        return 0.5 - normal_pdf(x) * sum;
    }
    if x > 40.0 {
        return 0.0;
    }
    // Laplace's continued fraction Q(x) = φ(x) / (x + 1/(x + 2/(x + 3/(x + …)))),
    // evaluated bottom-up; 60 levels are far beyond convergence for x > 3.
    let mut t = x;
    for k in (1..=60).rev() {
        t = x + f64::from(k) / t;
    }
    normal_pdf(x) / t
}

/// Standard normal CDF Φ(x).
pub fn normal_cdf(x: f64) -> f64 {
    normal_sf(-x)
}

/// Nodes and weights of n-point Gauss–Legendre quadrature on [−1, 1]:
/// Newton's method on the Legendre polynomial P_n from the usual cosine guesses.
fn gauss_legendre(n: usize) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(n);
    for i in 1..=n {
        let mut x = (PI * (i as f64 - 0.25) / (n as f64 + 0.5)).cos();
        let mut dp = 1.0;
        for _ in 0..100 {
            // P_n(x) and P_n'(x) by the three-term recurrence.
            let (mut p0, mut p1) = (1.0, x);
            for k in 2..=n {
                let p2 = ((2 * k - 1) as f64 * x * p1 - (k - 1) as f64 * p0) / k as f64;
                p0 = p1;
                p1 = p2;
            }
            dp = n as f64 * (x * p1 - p0) / (x * x - 1.0);
            let step = p1 / dp;
            x -= step;
            if step.abs() < 1e-15 {
                break;
            }
        }
        out.push((x, 2.0 / ((1.0 - x * x) * dp * dp)));
    }
    out
}

fn legendre_20() -> &'static [(f64, f64)] {
    static NODES: OnceLock<Vec<(f64, f64)>> = OnceLock::new();
    NODES.get_or_init(|| gauss_legendre(20))
}

/// Bivariate standard normal CDF P(Z₁ < a, Z₂ < b) with correlation ρ.
///
/// Uses Φ₂ = Φ(a)Φ(b) + (1/2π)∫₀^{asin ρ} exp(−(a² + b² − 2ab·sin θ)/(2cos²θ)) dθ
/// (the derivative of Φ₂ in ρ is the bivariate density; substituting ρ = sin θ
/// removes the 1/√(1−ρ²) singularity), integrated by 4 panels of 20-point
/// Gauss–Legendre. Accurate to ~1e-12 for |ρ| ≤ 0.99 (tested); ρ is clamped
/// to ±0.999 999.
pub fn bivariate_normal_cdf(a: f64, b: f64, rho: f64) -> f64 {
    let rho = rho.clamp(-0.999_999, 0.999_999);
    let top = rho.asin();
    const PANELS: usize = 4;
    let width = top / PANELS as f64;
    let mut integral = 0.0;
    for p in 0..PANELS {
        let mid = (p as f64 + 0.5) * width;
        for &(x, w) in legendre_20() {
            let theta = mid + 0.5 * width * x;
            let (s, c) = theta.sin_cos();
            integral += w * (-(a * a + b * b - 2.0 * a * b * s) / (2.0 * c * c)).exp();
        }
    }
    integral *= 0.5 * width;
    (normal_cdf(a) * normal_cdf(b) + integral / (2.0 * PI)).clamp(0.0, 1.0)
}

/// E[ReLU(X)] for X ~ N(m, s²): m·Φ(m/s) + s·φ(m/s).
pub fn relu_mean(m: f64, s: f64) -> f64 {
    if s <= 0.0 {
        return m.max(0.0);
    }
    let a = m / s;
    m * normal_cdf(a) + s * normal_pdf(a)
}

/// E[ReLU(X)²] for X ~ N(m, s²): (m² + s²)·Φ(m/s) + m·s·φ(m/s).
pub fn relu_second_moment(m: f64, s: f64) -> f64 {
    if s <= 0.0 {
        return m.max(0.0).powi(2);
    }
    let a = m / s;
    (m * m + s * s) * normal_cdf(a) + m * s * normal_pdf(a)
}

/// E[ReLU(X)·ReLU(Y)] for (X, Y) jointly Gaussian with means m₁, m₂,
/// standard deviations s₁, s₂ and correlation ρ.
///
/// With a = m₁/s₁, b = m₂/s₂, r = √(1−ρ²) and A = {Z₁ > −a, Z₂ > −b} for the
/// standardized pair, X⁺Y⁺ = s₁s₂(Z₁ + a)(Z₂ + b)·1_A, and the truncated
/// moments of a bivariate normal orthant are
/// * P(A) = Φ₂(a, b; ρ),
/// * E[Z₁; A] = φ(a)Φ((b − ρa)/r) + ρφ(b)Φ((a − ρb)/r) (and symmetrically),
/// * E[Z₁Z₂; A] = ρP(A) − ρaφ(a)Φ((b − ρa)/r) − ρbφ(b)Φ((a − ρb)/r) + rφ(a)φ((b − ρa)/r)
///
/// (derived by integrating by parts in each coordinate; tested against
/// quadrature and the independent and ρ → 1 limits).
pub fn relu_cross_moment(m1: f64, s1: f64, m2: f64, s2: f64, rho: f64) -> f64 {
    if s1 <= 0.0 {
        return m1.max(0.0) * relu_mean(m2, s2);
    }
    if s2 <= 0.0 {
        return m2.max(0.0) * relu_mean(m1, s1);
    }
    let rho = rho.clamp(-0.999_999, 0.999_999);
    let (a, b) = (m1 / s1, m2 / s2);
    let r = (1.0 - rho * rho).sqrt();
    let p = bivariate_normal_cdf(a, b, rho);
    let (pa, pb) = (normal_pdf(a), normal_pdf(b));
    let cb = normal_cdf((b - rho * a) / r);
    let ca = normal_cdf((a - rho * b) / r);
    let e1 = pa * cb + rho * pb * ca;
    let e2 = pb * ca + rho * pa * cb;
    let e12 = rho * p - rho * a * pa * cb - rho * b * pb * ca + r * pa * normal_pdf((b - rho * a) / r);
    (s1 * s2 * (e12 + b * e1 + a * e2 + a * b * p)).max(0.0)
}

/// ln Γ(x) for x > 0: the recurrence Γ(x) = Γ(x+n)/(x(x+1)…) up to x ≥ 10,
/// then Stirling's series to the x⁻⁹ term (error below 1e-15 there).
pub fn ln_gamma(x: f64) -> f64 {
    let mut x = x;
    let mut shift = 0.0;
    while x < 10.0 {
        shift -= x.ln();
        x += 1.0;
    }
    let x2 = 1.0 / (x * x);
    let series = (1.0 / 12.0 - x2 * (1.0 / 360.0 - x2 * (1.0 / 1260.0 - x2 * (1.0 / 1680.0 - x2 / 1188.0)))) / x;
    shift + (x - 0.5) * x.ln() - x + 0.5 * (2.0 * PI).ln() + series
}

/// P(Bin(n, p) < k): the probability that fewer than k of n independent
/// trials succeed.
///
/// Summed in log space from the end nearer the tail that is smaller: the
/// lower sum runs down from k−1 when k−1 is below the mean, otherwise the
/// upper sum runs up from k and is subtracted from 1. Terms are built by the
/// pmf ratio from one lgamma evaluation and the sum stops once a term adds
/// less than 1e-17 of it, so n in the millions costs O(√(np) + tail) terms
/// (and one when the first term underflows: the rest are smaller).
pub fn binomial_cdf_below(n: u64, p: f64, k: u64) -> f64 {
    if k == 0 {
        return 0.0;
    }
    if k > n {
        return 1.0;
    }
    if !(p > 0.0) {
        return 1.0;
    }
    if p >= 1.0 {
        return 0.0;
    }
    let nf = n as f64;
    let ln_pmf = |i: u64| {
        let i_f = i as f64;
        ln_gamma(nf + 1.0) - ln_gamma(i_f + 1.0) - ln_gamma(nf - i_f + 1.0) + i_f * p.ln() + (nf - i_f) * (-p).ln_1p()
    };
    let odds = p / (1.0 - p);
    let mean = nf * p;
    if ((k - 1) as f64) < mean {
        // Lower tail P(X ≤ k−1), terms decreasing downward.
        let mut i = k - 1;
        let mut term = ln_pmf(i).exp();
        if term == 0.0 {
            // Every further term is smaller: they all underflow too.
            return 0.0;
        }
        let mut sum = term;
        while i > 0 {
            term *= i as f64 / ((nf - i as f64 + 1.0) * odds);
            i -= 1;
            sum += term;
            if term < 1e-17 * sum {
                break;
            }
        }
        sum.min(1.0)
    } else {
        // 1 − P(X ≥ k), terms decreasing upward.
        let mut i = k;
        let mut term = ln_pmf(i).exp();
        if term == 0.0 {
            return 1.0;
        }
        let mut sum = term;
        while i < n {
            term *= (nf - i as f64) / (i as f64 + 1.0) * odds;
            i += 1;
            sum += term;
            if term < 1e-17 * sum {
                break;
            }
        }
        (1.0 - sum).clamp(0.0, 1.0)
    }
}

/// Draws of the row noise per trial (shared by every variant): each gives
/// one haystack score (for the skewness) and one needle score. The
/// prediction's own Monte Carlo error comes from these.
pub const NEEDLE_SAMPLES: usize = 512;

/// Whether the prediction models a variant: its key side must keep ≥ 7
/// mantissa bits (f32, bf16, f16: the rounding error is far below the
/// haystack's spread, so ignoring it changes nothing visible) and its logits
/// must be f32 (coarser logits make ties, which the prediction ignores). The
/// query side may be anything: the prediction scores the quantized query.
pub fn prediction_applies(variant: &PrecisionVariant) -> bool {
    variant.cache.is_default()
        && variant.selection.is_default()
        && matches!(variant.key.element, ElementFormat::F32 | ElementFormat::Bf16 | ElementFormat::F16)
        && variant.scoring.logits == LogitFormat::F32
}

/// One trial's score distribution under one precision variant: head h's
/// pre-activation over haystack rows is u_h = mean_h + Σ_j noise_hj·z_j with
/// z ~ N(0, I_d), on a needle row u_h + shift_h; the score is Σ_h w'_h ReLU(u_h).
#[derive(Clone, Debug)]
pub struct TrialScoreModel {
    heads: usize,
    dim: usize,
    /// w'_h as scored (constant factor and query scale folded in).
    weights: Vec<f64>,
    /// m_h = q_h·c.
    mean: Vec<f64>,
    /// Δ_h = q_h·δ.
    shift: Vec<f64>,
    /// q_hj·σ_j, row-major [heads × dim].
    noise: Vec<f64>,
}

impl TrialScoreModel {
    /// The model of `haystack` scored by `variant`'s quantized query; the key
    /// side is taken as exact (see [`prediction_applies`]).
    pub fn new(haystack: &TrialHaystack, variant: &PrecisionVariant) -> Result<Self, SimError> {
        let d = haystack.shape.head_dim;
        let heads = haystack.shape.heads;
        let q = variant.query.quantize_rows(&haystack.queries, d)?;
        let weights: Vec<f64> =
            IndexerQuery::new(q.clone(), &haystack.weights, d, variant.scoring).head_weights().iter().map(|&w| f64::from(w)).collect();
        // The stored query meets the key after the key's rotation: in the
        // key's own basis the effective query is Rᵀ·q, and the natural-order
        // Hadamard is symmetric and orthonormal, so Rᵀ = R.
        let mut stored = q.values;
        if variant.key.rotation == Rotation::Hadamard {
            hadamard_rows_in_place(&mut stored, d)?;
        }
        let (common, channel_std, offset) = (haystack.common(), haystack.channel_std(), haystack.needle_offset());
        let dot = |h: usize, v: &[f32]| (0..d).map(|j| f64::from(stored[h * d + j]) * f64::from(v[j])).sum::<f64>();
        let mean = (0..heads).map(|h| dot(h, common)).collect();
        let shift = (0..heads).map(|h| dot(h, offset)).collect();
        let noise = (0..heads * d).map(|i| f64::from(stored[i]) * f64::from(channel_std[i % d])).collect();
        Ok(Self { heads, dim: d, weights, mean, shift, noise })
    }

    /// Covariance of the pre-activations, C = Q·diag(σ²)·Qᵀ, row-major [H × H].
    pub fn covariance(&self) -> Vec<f64> {
        let (h, d) = (self.heads, self.dim);
        let mut c = vec![0.0; h * h];
        for a in 0..h {
            for b in 0..=a {
                let v: f64 = (0..d).map(|j| self.noise[a * d + j] * self.noise[b * d + j]).sum();
                c[a * h + b] = v;
                c[b * h + a] = v;
            }
        }
        c
    }

    /// Exact mean and variance of a haystack row's score.
    pub fn score_moments(&self) -> (f64, f64) {
        let h = self.heads;
        let c = self.covariance();
        let sd: Vec<f64> = (0..h).map(|a| c[a * h + a].sqrt()).collect();
        let relu: Vec<f64> = (0..h).map(|a| relu_mean(self.mean[a], sd[a])).collect();
        let mean = (0..h).map(|a| self.weights[a] * relu[a]).sum();
        let mut var = 0.0;
        for a in 0..h {
            let (wa, ma) = (self.weights[a], self.mean[a]);
            if wa == 0.0 {
                continue;
            }
            var += wa * wa * (relu_second_moment(ma, sd[a]) - relu[a] * relu[a]);
            for b in 0..a {
                let wb = self.weights[b];
                if wb == 0.0 || sd[a] == 0.0 || sd[b] == 0.0 {
                    continue;
                }
                let rho = c[a * h + b] / (sd[a] * sd[b]);
                let cross = relu_cross_moment(ma, sd[a], self.mean[b], sd[b], rho) - relu[a] * relu[b];
                var += 2.0 * wa * wb * cross;
            }
        }
        (mean, var.max(0.0))
    }

    /// The scores of one row with noise `z` (length dim): (haystack, needle).
    pub fn scores_for_noise(&self, z: &[f64]) -> (f64, f64) {
        let d = self.dim;
        let (mut hay, mut needle) = (0.0, 0.0);
        for h in 0..self.heads {
            let u = self.mean[h] + (0..d).map(|j| self.noise[h * d + j] * z[j]).sum::<f64>();
            hay += self.weights[h] * u.max(0.0);
            needle += self.weights[h] * (u + self.shift[h]).max(0.0);
        }
        (hay, needle)
    }
}

/// Moment-matched model of the haystack score's upper tail: p(s) = P(S > s)
/// from the exact mean μ and standard deviation σ and the skewness γ
/// (estimated from a sample: the third moment of a sum of correlated ReLUs
/// has no handy closed form). A shifted gamma with the same three moments:
/// S ≈ μ + σ(G − α)/√α, G ~ Gamma(α), α = 4/γ² (mirrored for γ < 0), so
/// p = Q(α, α + √α·x) with x = (s − μ)/σ; the Gaussian tail when |γ| < 10⁻³.
/// S is a weighted sum of ReLUs, right-skewed for the presets, and the
/// Gaussian tail alone overstates recall at long contexts (measured in
/// docs/MODEL.md, "Analytic prediction").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TailFit {
    pub mean: f64,
    pub sd: f64,
    pub skewness: f64,
}

impl TailFit {
    pub fn exceedance(&self, s: f64) -> f64 {
        if self.sd <= 0.0 {
            return if s < self.mean { 1.0 } else { 0.0 };
        }
        let x = (s - self.mean) / self.sd;
        let g = self.skewness;
        if g.abs() < 1e-3 {
            return normal_sf(x);
        }
        let alpha = 4.0 / (g * g);
        if g > 0.0 {
            upper_regularized_gamma(alpha, alpha + alpha.sqrt() * x)
        } else {
            1.0 - upper_regularized_gamma(alpha, alpha - alpha.sqrt() * x)
        }
    }
}

/// Q(a, x) = Γ(a, x)/Γ(a), the upper regularized incomplete gamma function
/// (1 for x ≤ 0). The power series of P = 1 − Q below x = a + 1, the
/// Legendre continued fraction of Q above it (evaluated by the modified
/// Lentz method), each to ~1e-14.
pub fn upper_regularized_gamma(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let log_prefactor = a * x.ln() - x - ln_gamma(a);
    if x < a + 1.0 {
        // P(a, x) = x^a e^−x / Γ(a+1) · Σ_n x^n / ((a+1)…(a+n)).
        let (mut term, mut sum, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term < 1e-16 * sum {
                break;
            }
        }
        return (1.0 - sum * log_prefactor.exp()).clamp(0.0, 1.0);
    }
    // Q(a, x) = x^a e^−x / Γ(a) · 1/(x+1−a− 1·(1−a)/(x+3−a− 2·(2−a)/(x+5−a− …))).
    let tiny = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / tiny;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..10_000 {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < tiny {
            d = tiny;
        }
        c = b + an / c;
        if c.abs() < tiny {
            c = tiny;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < 1e-15 {
            break;
        }
    }
    (h * log_prefactor.exp()).clamp(0.0, 1.0)
}

/// P(survive) for one cell of one trial, and the variance of that estimate
/// from the needle-score sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SurvivalEstimate {
    pub probability: f64,
    pub variance: f64,
}

/// Survival of a needle whose best of `needle_rows` rows beats fewer than
/// `k_eff` of `competitors` haystack rows, averaged over the sorted needle
/// scores `sorted` (each row's score is one draw of this distribution, so the
/// best of R has CDF F^R: draw i of M carries weight (i/M)^R − ((i−1)/M)^R).
pub fn survival_from_samples(sorted: &[f64], tail: &TailFit, needle_rows: u64, competitors: u64, k_eff: u64) -> SurvivalEstimate {
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
        let g = binomial_cdf_below(competitors, tail.exceedance(s), k_eff);
        e += w * g;
        e2 += w * g * g;
    }
    // The estimate weighs about M/R independent maxima.
    let variance = (e2 - e * e).max(0.0) * f64::from(r) / m as f64;
    SurvivalEstimate { probability: e.clamp(0.0, 1.0), variance }
}

/// A cell's predicted recall: the mean over trials of P(survive | trial),
/// and the standard error of that mean from the needle-score sampling alone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellPrediction {
    pub recall: f64,
    pub sampling_se: f64,
}

/// Predictions of one trial, per cell index of `spec` (None where the
/// prediction does not model the variant).
///
/// Under the null model the closed forms serve the variants they model
/// ([`prediction_applies`]); every other variant, and every variant under
/// physics, gets the sampled prediction ([`crate::estimate::predict_sampled`]).
pub fn predict_trial(spec: &TrialSpec<'_>, trial_seed: u64) -> Result<Vec<Option<SurvivalEstimate>>, SimError> {
    let closed_form = spec.is_null_model();
    let mut out = if closed_form { predict_trial_closed_form(spec, trial_seed)? } else { vec![None; spec.cell_count()] };
    let wanted: Vec<bool> =
        spec.variants.iter().map(|v| !(closed_form && prediction_applies(v)) && sampled_prediction_applies(v)).collect();
    let sampled = predict_trial_sampled(spec, trial_seed, &wanted)?;
    for (o, s) in out.iter_mut().zip(sampled) {
        if s.is_some() {
            *o = s;
        }
    }
    Ok(out)
}

/// [`predict_trial`] by the closed forms (null model only).
fn predict_trial_closed_form(spec: &TrialSpec<'_>, trial_seed: u64) -> Result<Vec<Option<SurvivalEstimate>>, SimError> {
    let haystack = TrialHaystack::draw(spec.model, trial_seed)?;
    let d = spec.model.shape.head_dim;
    let mut rng = rng::stream(trial_seed, &[tag::PREDICT]);
    let noise: Vec<f64> = (0..NEEDLE_SAMPLES * d).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
    let mut out = vec![None; spec.cell_count()];
    for (v, variant) in spec.variants.iter().enumerate() {
        if !prediction_applies(variant) {
            continue;
        }
        let model = TrialScoreModel::new(&haystack, variant)?;
        let (mean, var) = model.score_moments();
        let draws: Vec<(f64, f64)> = noise.chunks_exact(d).map(|z| model.scores_for_noise(z)).collect();
        let sd = var.sqrt();
        let third = draws.iter().map(|(h, _)| (h - mean).powi(3)).sum::<f64>() / draws.len() as f64;
        let skewness = if sd > 0.0 { third / (sd * sd * sd) } else { 0.0 };
        let tail = TailFit { mean, sd, skewness };
        let mut needle: Vec<f64> = draws.iter().map(|d| d.1).collect();
        needle.sort_by(f64::total_cmp);
        for (ci, &context) in spec.contexts.iter().enumerate() {
            let placement = spec.placement(context, None);
            let candidates = spec.geometry.candidate_rows(context);
            let rows = placement.rows.end - placement.rows.start;
            for (ki, &k) in spec.topks.iter().enumerate() {
                let estimate = if placement.in_window {
                    SurvivalEstimate { probability: 1.0, variance: 0.0 }
                } else {
                    survival_from_samples(&needle, &tail, rows, candidates - rows, k.min(candidates))
                };
                out[spec.cell_index(ci, 0, ki, v)] = Some(estimate);
            }
        }
    }
    Ok(out)
}

/// Predicted recall of every cell of one haystack group (same trial seeds as
/// the simulation, so prediction and simulation share each trial's query,
/// weights and common direction). Reduced in trial order: identical for any
/// thread count.
pub fn predict_cells(spec: &TrialSpec<'_>, seed: u64, trials: u64) -> Result<Vec<Option<CellPrediction>>, SimError> {
    let per_trial: Vec<Vec<Option<SurvivalEstimate>>> =
        (0..trials).into_par_iter().map(|t| predict_trial(spec, trial_seed(seed, spec.depth_percent, t))).collect::<Result<_, _>>()?;
    let n = trials as f64;
    Ok((0..spec.cell_count())
        .map(|i| {
            let mut sum = 0.0;
            let mut var = 0.0;
            for trial in &per_trial {
                let e = trial[i]?;
                sum += e.probability;
                var += e.variance;
            }
            (trials > 0).then(|| CellPrediction { recall: sum / n, sampling_se: var.sqrt() / n })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The V4-Flash preset's generative model (64 heads × 128 dims).
    pub(crate) fn v4_model(strength: f64) -> crate::model::haystack::GenerativeModel {
        crate::model::haystack::GenerativeModel {
            shape: crate::model::haystack::IndexerShape { heads: 64, head_dim: 128 },
            key_common: 0.5,
            outlier_channels: 4,
            outlier_scale: 8.0,
            weight_mean: 0.0,
            weight_std: 1.0,
            needle_strength: strength,
            needle_heads: 16,
        }
    }

    /// Composite Simpson on [lo, hi] with `n` (even) intervals.
    fn simpson(f: impl Fn(f64) -> f64, lo: f64, hi: f64, n: usize) -> f64 {
        let h = (hi - lo) / n as f64;
        let mut s = f(lo) + f(hi);
        for i in 1..n {
            s += f(lo + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        s * h / 3.0
    }

    #[test]
    fn normal_tail_matches_published_values() {
        // Abramowitz & Stegun table 26.1 / any Q-function table, 15 digits.
        for (x, q) in [
            (0.0, 0.5),
            (1.0, 0.158_655_253_931_457_05),
            (2.0, 0.022_750_131_948_179_2),
            (3.0, 0.001_349_898_031_630_094_6),
            (5.0, 2.866_515_718_791_939e-7),
            (8.0, 6.220_960_574_271_785e-16),
        ] {
            assert!((normal_sf(x) - q).abs() <= 1e-13 * q, "Q({x}) = {} want {q}", normal_sf(x));
            assert!((normal_cdf(-x) - q).abs() <= 1e-13 * q);
        }
        // Continuity where the series hands over to the continued fraction.
        assert!((normal_sf(3.0 - 1e-12) - normal_sf(3.0 + 1e-12)).abs() < 1e-14);
    }

    #[test]
    fn gauss_legendre_integrates_polynomials_exactly() {
        let nodes = gauss_legendre(20);
        let sum_w: f64 = nodes.iter().map(|n| n.1).sum();
        assert!((sum_w - 2.0).abs() < 1e-13);
        // ∫ x^38 over [−1, 1] = 2/39 (degree 2n − 1 = 39 is exact).
        let x38: f64 = nodes.iter().map(|&(x, w)| w * x.powi(38)).sum();
        assert!((x38 - 2.0 / 39.0).abs() < 1e-13, "{x38}");
    }

    #[test]
    fn bivariate_cdf_matches_the_orthant_formula_and_a_direct_integral() {
        // Φ₂(0, 0; ρ) = ¼ + asin(ρ)/(2π) exactly.
        for rho in [-0.99, -0.9, -0.3, 0.0, 0.5, 0.95, 0.99] {
            let want = 0.25 + f64::asin(rho) / (2.0 * PI);
            assert!((bivariate_normal_cdf(0.0, 0.0, rho) - want).abs() < 1e-12, "ρ = {rho}");
        }
        // Against ∫_{−∞}^{a} φ(x) Φ((b − ρx)/√(1−ρ²)) dx.
        for (a, b, rho) in [(1.0, -0.5, 0.3), (-1.2, 0.7, -0.8), (2.0, 1.5, 0.95), (0.3, 0.4, 0.99), (-2.5, -2.0, 0.6)] {
            let r = f64::sqrt(1.0 - rho * rho);
            let direct = simpson(|x| normal_pdf(x) * normal_cdf((b - rho * x) / r), -12.0, a, 20_000);
            let got = bivariate_normal_cdf(a, b, rho);
            assert!((got - direct).abs() < 1e-10, "({a}, {b}, {rho}): {got} vs {direct}");
        }
    }

    #[test]
    fn relu_moments_match_direct_integrals() {
        for (m, s) in [(0.0f64, 1.0f64), (1.5, 0.7), (-2.0, 1.3), (0.3, 5.0)] {
            let dens = |x: f64| normal_pdf((x - m) / s) / s;
            let mean = simpson(|x| x * dens(x), 0.0, m.max(0.0) + 12.0 * s, 20_000);
            let second = simpson(|x| x * x * dens(x), 0.0, m.max(0.0) + 12.0 * s, 20_000);
            assert!((relu_mean(m, s) - mean).abs() < 1e-10 * s, "E ReLU N({m}, {s}²)");
            assert!((relu_second_moment(m, s) - second).abs() < 1e-9 * s * s);
        }
        assert_eq!(relu_mean(2.0, 0.0), 2.0);
        assert_eq!(relu_mean(-2.0, 0.0), 0.0);
    }

    #[test]
    fn relu_cross_moment_matches_conditioning_and_its_limits() {
        // E[X⁺Y⁺] = ∫_{x>0} x · E[Y⁺ | X = x] φ-density(x) dx, Y | X = x Gaussian.
        for (m1, s1, m2, s2, rho) in
            [(0.5f64, 1.0f64, -0.3f64, 2.0f64, 0.4f64), (-1.0, 0.8, 1.2, 1.1, -0.7), (2.0, 3.0, 1.0, 0.5, 0.9), (0.0, 1.0, 0.0, 1.0, 0.98)]
        {
            let r = f64::sqrt(1.0 - rho * rho);
            let direct = simpson(
                |x| {
                    let cond_mean = m2 + rho * s2 * (x - m1) / s1;
                    x * relu_mean(cond_mean, s2 * r) * normal_pdf((x - m1) / s1) / s1
                },
                0.0,
                m1.max(0.0) + 14.0 * s1,
                40_000,
            );
            let got = relu_cross_moment(m1, s1, m2, s2, rho);
            assert!((got - direct).abs() < 1e-9 * s1 * s2, "{got} vs {direct}");
        }
        // Independent: the product of the means; ρ → 1 with equal pairs: E[(X⁺)²].
        let got = relu_cross_moment(0.4, 1.3, -0.2, 0.9, 0.0);
        assert!((got - relu_mean(0.4, 1.3) * relu_mean(-0.2, 0.9)).abs() < 1e-12);
        let got = relu_cross_moment(0.4, 1.3, 0.4, 1.3, 0.999_999);
        assert!((got - relu_second_moment(0.4, 1.3)).abs() < 2e-3, "{got}");
    }

    #[test]
    fn incomplete_gamma_matches_closed_forms() {
        // Q(1, x) = e^−x; Q(n, x) = e^−x Σ_{i<n} x^i/i! for integer n; both branches.
        // Relative 1e-12: the prefactor exp(a ln x − x − lnΓ(a)) carries lnΓ's
        // ~1e-14 absolute error and x·ε rounding of the exponent (measured 3e-14).
        for x in [0.3f64, 1.0, 2.5, 7.0, 30.0] {
            assert!((upper_regularized_gamma(1.0, x) - (-x).exp()).abs() < 1e-12 * (-x).exp(), "Q(1, {x})");
            let mut want = 0.0;
            let mut t = 1.0;
            for i in 0..5 {
                if i > 0 {
                    t *= x / i as f64;
                }
                want += t;
            }
            want *= (-x).exp();
            assert!((upper_regularized_gamma(5.0, x) - want).abs() < 1e-12 * want, "Q(5, {x})");
        }
        // Q(½, x) = 2·Q_normal(√(2x)).
        for x in [0.1f64, 0.8, 4.0] {
            let want = 2.0 * normal_sf((2.0 * x).sqrt());
            assert!((upper_regularized_gamma(0.5, x) - want).abs() < 1e-12 * want, "Q(½, {x})");
        }
        // The gamma tail tends to the Gaussian as the skew vanishes.
        let fit = |g| TailFit { mean: 0.0, sd: 1.0, skewness: g };
        assert!((fit(0.002).exceedance(2.0) - normal_sf(2.0)).abs() < 1e-3);
        assert!(fit(0.5).exceedance(2.0) > normal_sf(2.0) && fit(-0.5).exceedance(2.0) < normal_sf(2.0));
    }

    #[test]
    fn ln_gamma_known_values() {
        // Python math.lgamma.
        for (x, want) in [(0.5, 0.572_364_942_924_700_4), (3.7, 1.428_072_326_665_388_3), (100.5, 361.435_540_467_777_6), (1.0, 0.0)] {
            assert!((ln_gamma(x) - want).abs() < 1e-12 * want.abs().max(1.0), "lnΓ({x}) = {}", ln_gamma(x));
        }
        // Γ(11) = 10!
        assert!((ln_gamma(11.0) - (3_628_800f64).ln()).abs() < 1e-12);
    }

    #[test]
    fn binomial_cdf_far_tails_are_exactly_zero_and_one() {
        // First terms that underflow (ln pmf ≈ −6900 and −7·10⁴): nothing to add.
        assert_eq!(binomial_cdf_below(1_000_000, 0.5, 10), 0.0);
        assert_eq!(binomial_cdf_below(1_000_000, 1e-4, 10_000), 1.0);
        // Just inside: small but not zero, and monotone in k.
        let a = binomial_cdf_below(10_000, 0.5, 4_700);
        let b = binomial_cdf_below(10_000, 0.5, 4_800);
        assert!(a > 0.0 && a < 1e-8 && b > a, "{a} {b}");
    }

    #[test]
    fn binomial_cdf_matches_exact_rational_sums() {
        // Exact sums in rational arithmetic (Python fractions), both branches.
        for (n, p, k, want) in [
            (10, 0.3, 4, 0.649_610_718_4),
            (1000, 0.5, 500, 0.487_387_490_910_819_6),
            (2000, 0.01, 12, 0.020_912_431_496_986_66),
            (5000, 0.02, 120, 0.973_034_138_327_836_6),
        ] {
            let got = binomial_cdf_below(n, p, k);
            assert!((got - want).abs() < 1e-11, "Bin({n}, {p}) < {k}: {got} vs {want}");
        }
        assert_eq!(binomial_cdf_below(10, 0.3, 0), 0.0);
        assert_eq!(binomial_cdf_below(10, 0.3, 11), 1.0);
        assert_eq!(binomial_cdf_below(10, 0.0, 1), 1.0);
        assert_eq!(binomial_cdf_below(10, 1.0, 10), 0.0);
        // Millions of trials stay finite and monotone in p.
        let (a, b) = (binomial_cdf_below(4_000_000, 1e-4, 400), binomial_cdf_below(4_000_000, 1.01e-4, 400));
        assert!(a > b && a > 0.45 && a < 0.55, "{a} {b}");
    }

    #[test]
    fn score_moments_match_the_simulated_rows_of_a_trial() {
        // Mean and variance of 40 000 fp32-scored haystack rows of one trial,
        // against the closed forms. Tolerances: 4 standard errors of the
        // sample mean (sd/√n) and variance (√((m₄ − σ⁴)/n)).
        let model = v4_model(1.0);
        let fp32 = PrecisionVariant::builtin("fp32").unwrap();
        for seed in [3u64, 8] {
            let t = TrialHaystack::draw(&model, seed).unwrap();
            let m = TrialScoreModel::new(&t, &fp32).unwrap();
            let (mean, var) = m.score_moments();
            let d = model.shape.head_dim;
            let q = fp32.query.quantize_rows(&t.queries, d).unwrap();
            let iq = IndexerQuery::new(q, &t.weights, d, fp32.scoring);
            let n = 40_000usize;
            let mut keys = vec![0.0f32; n * d];
            t.fill_haystack_rows(0, &mut keys);
            let mut s = vec![0.0f32; n];
            iq.score_rows(&keys, &mut s);
            let nf = n as f64;
            let sm = s.iter().map(|&x| f64::from(x)).sum::<f64>() / nf;
            let sv = s.iter().map(|&x| (f64::from(x) - sm).powi(2)).sum::<f64>() / (nf - 1.0);
            let m4 = s.iter().map(|&x| (f64::from(x) - sm).powi(4)).sum::<f64>() / nf;
            assert!((sm - mean).abs() < 4.0 * (sv / nf).sqrt(), "seed {seed}: mean {sm} vs {mean}");
            assert!((sv - var).abs() < 4.0 * ((m4 - sv * sv) / nf).sqrt(), "seed {seed}: var {sv} vs {var}");
            // Needle rows: the model's shift reproduces the needle's mean score.
            let mut needle = vec![0.0f32; d];
            let mut ns = 0.0;
            let rows = 4000;
            for i in 0..rows {
                t.fill_needle_row(i, &mut needle);
                ns += f64::from(iq.score_one(&needle));
            }
            let mut rng = rng::stream(seed, &[99]);
            let draws = 4000;
            let mut ms = Vec::with_capacity(draws);
            for _ in 0..draws {
                let z: Vec<f64> = (0..d).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
                ms.push(m.scores_for_noise(&z).1);
            }
            let mm = ms.iter().sum::<f64>() / draws as f64;
            let mv = ms.iter().map(|x| (x - mm).powi(2)).sum::<f64>() / (draws as f64 - 1.0);
            // Difference of two independent means of 4000: SE √(2·var/4000).
            assert!((ns / rows as f64 - mm).abs() < 4.0 * (2.0 * mv / 4000.0).sqrt(), "needle mean {} vs {mm}", ns / rows as f64);
        }
    }
}

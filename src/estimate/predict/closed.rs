//! The prediction's closed forms (null model): recall without generating
//! the haystack.
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
//! * P(Bin(N, p) < k) ([`crate::estimate::survival`]).
//!
//! Formulas, assumptions and where they break: docs/MODEL.md, "Analytic
//! prediction".

use crate::base::rng::{self, tag};
use crate::base::special::{bivariate_normal_cdf, normal_cdf, normal_pdf, normal_sf, upper_regularized_gamma};
use crate::error::SimError;
use crate::estimate::survival::{settled_survival, survival_from_samples, SurvivalEstimate};
use crate::model::haystack::TrialHaystack;
use crate::numerics::format::hadamard_rows_in_place;
use crate::numerics::format::ElementFormat;
use crate::numerics::pipeline::{LogitFormat, Rotation};
use crate::score::indexer::IndexerQuery;
use crate::score::trial::TrialSpec;
use crate::score::variant::PrecisionVariant;
use rand::Rng;
use rand_distr::StandardNormal;

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
    variant.keeps_rows_in_place()
        && !variant.position.query_row_shifted
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

/// One trial's predictions by the closed forms (null model only), per cell
/// index of `spec`; None for the variants they do not model.
pub fn closed_form_trial(spec: &TrialSpec<'_>, trial_seed: u64) -> Result<Vec<Option<SurvivalEstimate>>, SimError> {
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
            let placement = spec.placement(context, 0);
            let candidates = spec.geometry.candidate_rows(context);
            let rows = placement.rows.end - placement.rows.start;
            for (ki, &k) in spec.topks.iter().enumerate() {
                let estimate = match settled_survival(&placement) {
                    Some(probability) => SurvivalEstimate { probability, variance: 0.0 },
                    None => survival_from_samples(&needle, |s| tail.exceedance(s), rows, candidates - rows, k.min(candidates)),
                };
                out[spec.cell_index(ci, 0, ki, v)] = Some(estimate);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::special::simpson;
    use crate::model::haystack::tests::model as v4_model;

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
    fn gamma_tail_tends_to_the_gaussian_as_the_skew_vanishes() {
        let fit = |g| TailFit { mean: 0.0, sd: 1.0, skewness: g };
        assert!((fit(0.002).exceedance(2.0) - normal_sf(2.0)).abs() < 1e-3);
        assert!(fit(0.5).exceedance(2.0) > normal_sf(2.0) && fit(-0.5).exceedance(2.0) < normal_sf(2.0));
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

//! Special functions the estimators share: the standard normal density and
//! tails, the bivariate normal CDF, ln Γ, the regularized incomplete gamma
//! function and the binomial CDF. Each is tested against published values
//! or exact sums below.

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

/// Standard normal quantile Φ⁻¹(p) for 0 < p < 1 (±∞ at 0 and 1, NaN
/// outside): Acklam's rational approximation (relative error 1.2e-9), then
/// two Halley steps on [`normal_sf`], which leave ~1e-15.
pub fn normal_quantile(p: f64) -> f64 {
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    const A: [f64; 6] = [
        -39.696_830_286_653_76,
        220.946_098_424_520_5,
        -275.928_510_446_968_7,
        138.357_751_867_269,
        -30.664_798_066_147_16,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] =
        [-54.476_098_798_224_06, 161.585_836_858_040_9, -155.698_979_859_886_6, 66.801_311_887_719_72, -13.280_681_552_885_72];
    const C: [f64; 6] = [
        -0.007_784_894_002_430_293,
        -0.322_396_458_041_136_5,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [0.007_784_695_709_041_462, 0.322_467_129_070_039_8, 2.445_134_137_142_996, 3.754_408_661_907_416];
    let tail = |q: f64| {
        let r = (-2.0 * q.ln()).sqrt();
        (((((C[0] * r + C[1]) * r + C[2]) * r + C[3]) * r + C[4]) * r + C[5]) / ((((D[0] * r + D[1]) * r + D[2]) * r + D[3]) * r + 1.0)
    };
    let mut x = if p < 0.024_25 {
        tail(p)
    } else if p > 1.0 - 0.024_25 {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    // Halley on the side whose tail is small, so that p near 1 keeps its digits.
    for _ in 0..2 {
        let e = if x < 0.0 { normal_cdf(x) - p } else { (1.0 - p) - normal_sf(x) };
        let u = e / normal_pdf(x);
        x -= u / (1.0 + 0.5 * x * u);
    }
    x
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

/// Berry–Esseen's constant for sums of identically distributed summands,
/// C ≤ 0.4748 (I. G. Shevtsova, "On the absolute constants in the
/// Berry–Esseen type inequalities for identically distributed summands",
/// arXiv:1111.6554, 2011).
const BERRY_ESSEEN: f64 = 0.4748;

/// Slack on the normal bracket below for the rounding of
/// [`binomial_cdf_below`] (its ln Γ terms lose ~1e-7 relative at n in the
/// millions) and the error of [`normal_cdf_coarse`] (≤ 7.5e-8): far above both.
const BRACKET_SLACK: f64 = 1e-6;

/// Φ(x) to within 7.5e-8 absolute, cheaply: Abramowitz & Stegun 7.1.26
/// (erf to within 1.5e-7, one exponential), for brackets that allow for
/// its error. [`normal_cdf`] is the accurate one.
fn normal_cdf_coarse(x: f64) -> f64 {
    const P: f64 = 0.327_591_1;
    const A: [f64; 5] = [0.254_829_592, -0.284_496_736, 1.421_413_741, -1.453_152_027, 1.061_405_429];
    let z = x.abs() * std::f64::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    // ½·erfc(|x|/√2), the tail beyond |x|.
    let tail = 0.5 * poly * (-z * z).exp();
    if x >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// Whether `uniform ≤ P(Bin(n, p) < k)`: the same answer as comparing
/// with [`binomial_cdf_below`], which is only evaluated when `uniform`
/// falls inside the normal approximation's Berry–Esseen bracket. With
/// z₁ = (k − 1 − np)/σ and z₂ = (k − np)/σ, P(X < k) = P(X ≤ x) for every
/// standardized x in [z₁, z₂), so it lies in [Φ(z₂) − B, Φ(z₁) + B] with
/// B = C·(p² + q²)/√(npq). A uniform outside that band (most of them
/// once npq is in the tens) is decided by two coarse Φ instead of three
/// ln Γ and the O(√(np)) terms of the sum.
pub fn uniform_below_binomial_cdf(uniform: f64, n: u64, p: f64, k: u64) -> bool {
    match binomial_cdf_bracket(n, p, k, BRACKET_SLACK) {
        Some((low, _)) if uniform <= low => true,
        Some((_, high)) if uniform > high => false,
        _ => uniform <= binomial_cdf_below(n, p, k),
    }
}

/// The band [Φ(z₂) − B − slack, Φ(z₁) + B + slack] that holds P(Bin(n, p) < k)
/// (see [`uniform_below_binomial_cdf`]); None where it would say nothing
/// (B ≥ ½) or the CDF is trivial (k = 0, k > n, p outside (0, 1)).
fn binomial_cdf_bracket(n: u64, p: f64, k: u64, slack: f64) -> Option<(f64, f64)> {
    if k == 0 || k > n || !(p > 0.0 && p < 1.0) {
        return None;
    }
    let (nf, q) = (n as f64, 1.0 - p);
    let sd = (nf * p * q).sqrt();
    let bound = BERRY_ESSEEN * (p * p + q * q) / sd + slack;
    if !(bound < 0.5) {
        return None;
    }
    let mean = nf * p;
    Some((normal_cdf_coarse((k as f64 - mean) / sd) - bound, normal_cdf_coarse((k as f64 - 1.0 - mean) / sd) + bound))
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

/// Composite Simpson on [lo, hi] with `n` (even) intervals: the reference
/// integral of the tests here and of the estimators' moment tests.
#[cfg(test)]
pub(crate) fn simpson(f: impl Fn(f64) -> f64, lo: f64, hi: f64, n: usize) -> f64 {
    let h = (hi - lo) / n as f64;
    let mut s = f(lo) + f(hi);
    for i in 1..n {
        s += f(lo + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    s * h / 3.0
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn normal_quantile_inverts_the_cdf_and_matches_published_values() {
        // Φ⁻¹(0.975) = 1.959963984540054, Φ⁻¹(0.999) = 3.090232306167814,
        // Φ⁻¹(1e-10) = −6.361340902404056 (Wichura 1988, AS 241 test values).
        for (p, x) in [(0.975, 1.959_963_984_540_054), (0.999, 3.090_232_306_167_814), (1e-10, -6.361_340_902_404_056), (0.5, 0.0)] {
            assert!((normal_quantile(p) - x).abs() < 1e-12, "{p}: {}", normal_quantile(p));
        }
        for i in 1..1000 {
            let p = i as f64 / 1000.0;
            assert!((normal_cdf(normal_quantile(p)) - p).abs() < 1e-14, "{p}");
        }
        assert_eq!(normal_quantile(0.0), f64::NEG_INFINITY);
        assert_eq!(normal_quantile(1.0), f64::INFINITY);
        assert!(normal_quantile(1.5).is_nan() && normal_quantile(f64::NAN).is_nan());
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

    /// (n, p) from a handful of rows to millions, npq from below 1 to 10⁵.
    const BRACKET_GRID: [(u64, f64); 9] = [
        (5, 0.5),
        (100, 0.05),
        (1_000, 0.3),
        (13_801, 2.9e-4),
        (65_536, 0.01),
        (262_144, 1e-3),
        (262_144, 0.4),
        (2_000_000, 5e-5),
        (2_000_000, 0.02),
    ];

    /// k over the mean ± 6 sd, about 60 values.
    fn bracket_ks(n: u64, p: f64) -> Vec<u64> {
        let (mean, sd) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
        let mut ks: Vec<u64> = (-30..=30).map(|j| (mean + f64::from(j) * sd / 5.0).round().clamp(0.0, n as f64 + 1.0) as u64).collect();
        ks.dedup();
        ks
    }

    #[test]
    fn the_coarse_normal_cdf_is_within_its_stated_error() {
        let mut worst = 0.0f64;
        for i in -4000..=4000 {
            let x = f64::from(i) / 400.0;
            worst = worst.max((normal_cdf_coarse(x) - normal_cdf(x)).abs());
        }
        assert!(worst <= 7.5e-8, "{worst}");
        assert!(worst > 1e-9, "an approximation, not the accurate one: {worst}");
    }

    #[test]
    fn the_berry_esseen_bracket_holds_the_binomial_cdf() {
        let mut decided = 0;
        for &(n, p) in &BRACKET_GRID {
            for k in bracket_ks(n, p) {
                let exact = binomial_cdf_below(n, p, k);
                // Without the slack: the Berry–Esseen bound alone holds the sum.
                if let Some((low, high)) = binomial_cdf_bracket(n, p, k, 0.0) {
                    assert!(low <= exact && exact <= high, "{n} {p} {k}: {low} {exact} {high}");
                    decided += 1;
                }
            }
        }
        assert!(decided > 300, "the bracket applies to most of the grid: {decided}");
    }

    #[test]
    fn the_bracketed_comparison_is_the_exact_one() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut shortcut = 0;
        for &(n, p) in &BRACKET_GRID {
            for k in bracket_ks(n, p) {
                let exact = binomial_cdf_below(n, p, k);
                let bracket = binomial_cdf_bracket(n, p, k, BRACKET_SLACK);
                // Uniforms at the CDF, a hair either side, at the bracket's
                // ends and either side of them, and at random.
                let mut uniforms = vec![exact, exact - 1e-15, exact + 1e-15, next(), next(), next()];
                if let Some((low, high)) = bracket {
                    uniforms.extend([low, low - 1e-12, low + 1e-12, high, high - 1e-12, high + 1e-12]);
                }
                for u in uniforms.into_iter().filter(|u| (0.0..1.0).contains(u) && *u > 0.0) {
                    assert_eq!(uniform_below_binomial_cdf(u, n, p, k), u <= exact, "{n} {p} {k} {u} {exact}");
                    shortcut += usize::from(bracket.is_some_and(|(low, high)| u <= low || u > high));
                }
            }
        }
        assert!(shortcut > 500, "most random uniforms skip the sum: {shortcut}");
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
}

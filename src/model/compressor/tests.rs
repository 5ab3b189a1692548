use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

const U: f64 = 1.0 / (1u64 << 24) as f64; // f32 unit roundoff

fn random(rng: &mut ChaCha8Rng, n: usize, spread: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-spread..spread)).collect()
}

/// Naive f64 pooling, and the rounding bound of the f32 path for each
/// channel (derivation in `pooling_matches_a_naive_f64_computation`).
fn naive(gates: &[&[f32]], values: &[&[f32]], dim: usize) -> (Vec<f64>, Vec<f64>) {
    let g: Vec<f32> = gates.concat();
    let x: Vec<f32> = values.concat();
    let n = g.len() / dim;
    let mut exact = vec![0.0; dim];
    let mut bound = vec![0.0; dim];
    for c in 0..dim {
        let max = (0..n).map(|j| g[j * dim + c] as f64).fold(f64::NEG_INFINITY, f64::max);
        let d: Vec<f64> = (0..n).map(|j| g[j * dim + c] as f64 - max).collect();
        let s: f64 = d.iter().map(|d| d.exp()).sum();
        let a: Vec<f64> = d.iter().map(|d| d.exp() / s).collect();
        exact[c] = (0..n).map(|j| a[j] * x[j * dim + c] as f64).sum();
        let big_d: f64 = (0..n).map(|j| a[j] * (1.0 + d[j].abs())).sum();
        bound[c] =
            1.01 * U * (0..n).map(|j| (a[j] * x[j * dim + c] as f64).abs() * (d[j].abs() + 2.0 * n as f64 + 2.0 + big_d)).sum::<f64>();
    }
    (exact, bound)
}

/// Rounding bound, per channel, with u = 2⁻²⁴ and n tokens: fl(g − max)
/// has relative error u, so e_j is off by ≤ (1 + |d_j|)u relative (our exp
/// adds ≤ u); S = Σe_j sums n terms in order (≤ (n−1)u plus the e_j
/// errors, ≤ D·u with D = Σ a_j(1 + |d_j|)); a_j = e_j/S adds u; the
/// products a_j·x_j add u and their sum (n−1)u. Altogether
/// |out − exact| ≤ u·Σ_j |a_j x_j|·(|d_j| + 2n + 2 + D), times 1.01 for
/// second-order terms.
#[test]
fn pooling_matches_a_naive_f64_computation() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let dim = 64;
    for (c, overlap) in [(4usize, true), (4, false), (128, false)] {
        for spread in [0.1f32, 3.0, 30.0] {
            let (g_cur, x_cur) = (random(&mut rng, c * dim, spread), random(&mut rng, c * dim, 5.0));
            let (g_prev, x_prev) = (random(&mut rng, c * dim, spread), random(&mut rng, c * dim, 5.0));
            let current = TokenHalf { values: &x_cur, gate_logits: &g_cur };
            let previous = overlap.then_some(TokenHalf { values: &x_prev, gate_logits: &g_prev });
            let mut out = vec![0.0; dim];
            pool_row(current, previous, dim, &mut out).unwrap();
            let (exact, bound) =
                if overlap { naive(&[&g_prev, &g_cur], &[&x_prev, &x_cur], dim) } else { naive(&[&g_cur], &[&x_cur], dim) };
            for ch in 0..dim {
                let err = (out[ch] as f64 - exact[ch]).abs();
                assert!(err <= bound[ch], "c {c} spread {spread} ch {ch}: err {err:e} > {:e}", bound[ch]);
            }
        }
    }
}

#[test]
fn equal_gates_give_the_plain_average() {
    let dim = 3;
    let x = [1.0f32, 10.0, -4.0, 3.0, 20.0, 0.0, 5.0, 30.0, 4.0, 7.0, 40.0, 8.0];
    let g = [0.7f32; 12];
    let mut out = [0.0; 3];
    pool_row(TokenHalf { values: &x, gate_logits: &g }, None, dim, &mut out).unwrap();
    // Each weight is exactly 1/4 (e = 1, S = 4), so the sums are exact.
    assert_eq!(out, [4.0, 25.0, 2.0]);
}

#[test]
fn a_dominant_gate_selects_its_token() {
    let dim = 2;
    let x_prev = [9.0f32, -9.0, 8.0, -8.0];
    let g_prev = [0.0f32, 0.0, 0.0, 200.0];
    let x_cur = [1.0f32, 2.0, 3.0, 4.0];
    let g_cur = [200.0f32, 0.0, 0.0, 0.0];
    let mut out = [0.0; 2];
    let prev = TokenHalf { values: &x_prev, gate_logits: &g_prev };
    pool_row(TokenHalf { values: &x_cur, gate_logits: &g_cur }, Some(prev), dim, &mut out).unwrap();
    // Others get exp(−200) = 0 in f32: channel 0 takes current token 0, channel 1 previous token 1.
    assert_eq!(out, [1.0, -8.0]);
}

#[test]
fn softmax_is_stable_for_huge_and_equal_logits() {
    let dim = 1;
    let x = [2.0f32, 6.0];
    let mut out = [0.0];
    pool_row(TokenHalf { values: &x, gate_logits: &[1e4, 1e4] }, None, dim, &mut out).unwrap();
    assert_eq!(out, [4.0]);
    // 1e4 and 1e4 − 1: weights 1/(1+e⁻¹) and e⁻¹/(1+e⁻¹), finite.
    pool_row(TokenHalf { values: &x, gate_logits: &[1e4, 1e4 - 1.0] }, None, dim, &mut out).unwrap();
    let w = 1.0 / (1.0 + (-1.0f64).exp());
    assert!((out[0] as f64 - (2.0 * w + 6.0 * (1.0 - w))).abs() < 1e-5);
    pool_row(TokenHalf { values: &x, gate_logits: &[-1e4, -1e4] }, None, dim, &mut out).unwrap();
    assert_eq!(out, [4.0]);
}

#[test]
fn csa_row_zero_pools_only_its_own_tokens() {
    // Without a previous half the softmax runs over the 4 current tokens only.
    let dim = 1;
    let x = [1.0f32, 2.0, 3.0, 4.0];
    let mut out = [0.0];
    pool_row(TokenHalf { values: &x, gate_logits: &[0.0; 4] }, None, dim, &mut out).unwrap();
    assert_eq!(out, [2.5]);
    // With a previous half of zeros the same gates give half the weight to zeros.
    let zeros = [0.0f32; 4];
    let prev = TokenHalf { values: &zeros, gate_logits: &[0.0; 4] };
    pool_row(TokenHalf { values: &x, gate_logits: &[0.0; 4] }, Some(prev), dim, &mut out).unwrap();
    assert_eq!(out, [1.25]);
}

/// The vectorizable loops must give the bits of a plain per-channel loop
/// with the same operation order.
#[test]
fn pooling_equals_a_scalar_per_channel_loop_bit_for_bit() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let (c, dim) = (4, 128);
    let (g_prev, g_cur) = (random(&mut rng, c * dim, 8.0), random(&mut rng, c * dim, 8.0));
    let (x_prev, x_cur) = (random(&mut rng, c * dim, 3.0), random(&mut rng, c * dim, 3.0));
    let mut out = vec![0.0; dim];
    let prev = TokenHalf { values: &x_prev, gate_logits: &g_prev };
    pool_row(TokenHalf { values: &x_cur, gate_logits: &g_cur }, Some(prev), dim, &mut out).unwrap();
    let (g, x) = ([g_prev, g_cur].concat(), [x_prev, x_cur].concat());
    for ch in 0..dim {
        let col = |v: &[f32], j: usize| v[j * dim + ch];
        let max = (0..2 * c).map(|j| col(&g, j)).fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = (0..2 * c).map(|j| exp_nonpositive(col(&g, j) - max)).collect();
        let s = e.iter().fold(0.0f32, |s, &e| s + e);
        let v = (0..2 * c).fold(0.0f32, |acc, j| acc + e[j] / s * col(&x, j));
        assert_eq!(v.to_bits(), out[ch].to_bits(), "channel {ch}");
    }
}

/// Our exp against libm over its whole domain: within ½ ulp plus the f64
/// evaluation error (10⁻¹⁵ relative) — i.e. at most 1 ulp, and 0 below −104.
#[test]
fn own_exp_is_accurate() {
    let mut x = 0.0f32;
    while x > -110.0 {
        let (ours, exact) = (exp_nonpositive(x) as f64, (x as f64).exp());
        let half_ulp = 0.5 * (f32::from_bits((exact as f32).to_bits() + 1) as f64 - exact as f32 as f64);
        assert!((ours - exact).abs() <= half_ulp + 1e-15 * exact, "x {x}: {ours:e} vs {exact:e}");
        x -= 0.0137;
    }
    assert_eq!(exp_nonpositive(0.0), 1.0);
    assert_eq!(exp_nonpositive(-1e4), 0.0);
}

#[test]
fn lane_exp_equals_the_scalar_exp_bit_for_bit() {
    let check = |x: f32| {
        let (a, b) = (exp_nonpositive(x), exp_nonpositive_lanes(x));
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "x {x:e} ({:#x}): {a:e} vs {b:e}", x.to_bits());
    };
    // Every 61st f32 from -0 down past -110 …
    let mut bits = (-0.0f32).to_bits();
    while f32::from_bits(bits) > -120.0 {
        check(f32::from_bits(bits));
        bits += 61;
    }
    // … every f32 near the points where k changes (y = x·log2 e = −(n + ½)) …
    for n in 0..160u32 {
        let x = (-(f64::from(n) + 0.5) / std::f64::consts::LOG2_E) as f32;
        for step in 0..400u32 {
            check(f32::from_bits(x.to_bits() - 200 + step));
        }
    }
    // … and the edges.
    for x in [0.0, -0.0, -104.0, -103.999_99, -104.000_01, -1e4, f32::MIN, -f32::MIN_POSITIVE, -1e-45, f32::NAN] {
        check(x);
    }
}

#[test]
fn the_16_by_16_transpose_moves_lane_k_of_row_r_to_lane_r_of_column_k() {
    #[cfg(target_arch = "x86_64")]
    if crate::base::simd::level().avx512() {
        use std::arch::x86_64::*;
        let m: Vec<f32> = (0..256).map(|i| i as f32).collect();
        let mut out = [[0.0f32; 16]; 16];
        // SAFETY: the level is AVX-512 (checked above); every load and store is 16 f32 in bounds.
        unsafe {
            let rows = std::array::from_fn(|r| _mm512_loadu_ps(m.as_ptr().add(16 * r)));
            for (o, c) in out.iter_mut().zip(transpose_16x16(rows)) {
                _mm512_storeu_ps(o.as_mut_ptr(), c);
            }
        }
        for (k, column) in out.iter().enumerate() {
            for (r, &x) in column.iter().enumerate() {
                assert_eq!(x, (16 * r + k) as f32, "column {k}, row {r}");
            }
        }
    }
}

#[test]
fn layer_norm_rows_equals_layer_norm_row_by_row() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    for (rows, dim) in [(1usize, 128usize), (15, 128), (16, 128), (17, 128), (40, 128), (256, 128), (9, 3), (35, 48), (33, 16)] {
        // Offsets per row, so the means are far from 0 and the centring matters.
        let mut data = random(&mut rng, rows * dim, 3.0);
        for (r, row) in data.chunks_exact_mut(dim).enumerate() {
            row.iter_mut().for_each(|x| *x += (r as f32 - 7.0) * 10.5);
        }
        let mut a = data.clone();
        for row in a.chunks_exact_mut(dim) {
            layer_norm(row, LAYER_NORM_EPS).unwrap();
        }
        let mut b = data;
        layer_norm_rows(&mut b, dim, LAYER_NORM_EPS).unwrap();
        assert_eq!(a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "{rows} × {dim}");
    }
    assert!(matches!(layer_norm_rows(&mut [1.0; 16], 16, f32::NAN), Err(CompressorError::Eps(_))));
    assert!(matches!(layer_norm_rows(&mut [1.0; 16], 0, LAYER_NORM_EPS), Err(CompressorError::ZeroDim)));
}

#[test]
fn rms_norm_rows_equals_rms_norm_row_by_row() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for (rows, dim) in [(1usize, 128usize), (7, 128), (8, 128), (16, 128), (19, 128), (41, 128), (256, 128), (9, 3), (35, 48), (16, 16)] {
        let data = random(&mut rng, rows * dim, 3.0);
        let mut a = data.clone();
        for row in a.chunks_exact_mut(dim) {
            rms_norm(row, RMS_NORM_EPS).unwrap();
        }
        let mut b = data;
        rms_norm_rows(&mut b, dim, RMS_NORM_EPS).unwrap();
        assert_eq!(a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "{rows} × {dim}");
    }
}

#[test]
fn layer_norm_gives_zero_mean_and_unit_variance() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let normal = Normal::new(0.0f32, 1.0).unwrap();
    for scale in [1e-2f32, 1.0, 300.0] {
        let mut row: Vec<f32> = (0..128).map(|j| scale * (normal.sample(&mut rng) + 0.3 * j as f32)).collect();
        let raw = row.clone();
        layer_norm(&mut row, LAYER_NORM_EPS).unwrap();
        let mean = row.iter().map(|&x| f64::from(x)).sum::<f64>() / 128.0;
        let var = row.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / 128.0;
        let mu = raw.iter().map(|&x| f64::from(x)).sum::<f64>() / 128.0;
        let v = raw.iter().map(|&x| (f64::from(x) - mu).powi(2)).sum::<f64>() / 128.0;
        assert!(mean.abs() < 1e-6, "scale {scale}: mean {mean}");
        // Exactly v/(v + eps) in real numbers; f32 rounding well below 1e-5.
        assert!((var - v / (v + f64::from(LAYER_NORM_EPS))).abs() < 1e-5, "scale {scale}: variance {var}");
    }
    let mut rows: Vec<f32> = (0..5 * 128).map(|i| (i % 17) as f32 - 3.0).collect();
    let mut one = rows[128..256].to_vec();
    layer_norm_rows(&mut rows, 128, LAYER_NORM_EPS).unwrap();
    layer_norm(&mut one, LAYER_NORM_EPS).unwrap();
    assert_eq!(&rows[128..256], &one[..]);
    let mut constant = vec![2.5f32; 128];
    layer_norm(&mut constant, LAYER_NORM_EPS).unwrap();
    assert!(constant.iter().all(|&x| x == 0.0));
    assert!(matches!(layer_norm(&mut constant, -1.0), Err(CompressorError::Eps(_))));
}

/// Mean square after RMSNorm: exactly ms/(ms + eps) in real numbers. In
/// f32 the sum of squares is off by ≤ d·u relative, the mean and + eps add
/// u each, the square root halves that and adds u, the reciprocal and the
/// product add u each: each output is within (d/2 + 4)u, its square within
/// (d + 8)u (times 1.01 for second-order terms).
#[test]
fn rms_norm_gives_unit_mean_square() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for spread in [1e-2f32, 1.0, 1e3] {
        let mut row = random(&mut rng, 128, spread);
        let ms = row.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / 128.0;
        rms_norm(&mut row, RMS_NORM_EPS).unwrap();
        let out_ms = row.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / 128.0;
        let expected = ms / (ms + RMS_NORM_EPS as f64);
        assert!((out_ms - expected).abs() <= 1.01 * (128.0 + 8.0) * U * expected, "spread {spread}: {out_ms}");
        assert!((out_ms - 1.0).abs() <= 1.01 * (128.0 + 8.0) * U + RMS_NORM_EPS as f64 / ms);
    }
    let mut zeros = [0.0f32; 4];
    rms_norm(&mut zeros, RMS_NORM_EPS).unwrap();
    assert_eq!(zeros, [0.0; 4]);
}

#[test]
fn std_factors_of_simple_gates() {
    // Equal gates over n tokens: √(n · (1/n)²) = 1/√n.
    let f = pooled_std_factors(&[0.0; 4 * 2], Some(&[0.0; 4 * 2]), 2).unwrap();
    assert_eq!(f, vec![(1.0f64 / 8.0).sqrt() as f32; 2]);
    // One dominant gate: a single token, factor 1.
    let f = pooled_std_factors(&[500.0, 0.0, 0.0, 0.0], None, 1).unwrap();
    assert_eq!(f, vec![1.0]);
}

/// Monte Carlo check of the shortcut: N = 20000 rows of iid N(m, σ²)
/// tokens under fixed gates. Per channel, (N−1)·s²/(σ²f²) is χ² with
/// N − 1 = 19999 degrees of freedom; we test 16 channels with a Bonferroni
/// split of a 99.9 % family-wise level (two-sided 0.1 %/16 per channel,
/// z = 4.0032), Wilson–Hilferty quantiles: s²/(σ²f²) ∈ [0.96047, 1.04054].
#[test]
fn shortcut_variance_matches_monte_carlo() {
    let (c, dim, n) = (4usize, 16usize, 20_000usize);
    let mut rng = ChaCha8Rng::seed_from_u64(20_260_101);
    let bias_cur = random(&mut rng, c * dim, 2.5);
    let bias_prev = random(&mut rng, c * dim, 2.5);
    let factors = pooled_std_factors(&bias_cur, Some(&bias_prev), dim).unwrap();
    let (mean, sigma) = (0.3f64, 1.7f64);
    let normal = Normal::new(mean as f32, sigma as f32).unwrap();
    let (mut sum, mut sum_sq) = (vec![0.0f64; dim], vec![0.0f64; dim]);
    let mut out = vec![0.0f32; dim];
    for _ in 0..n {
        let x_cur: Vec<f32> = (0..c * dim).map(|_| normal.sample(&mut rng)).collect();
        let x_prev: Vec<f32> = (0..c * dim).map(|_| normal.sample(&mut rng)).collect();
        let prev = TokenHalf { values: &x_prev, gate_logits: &bias_prev };
        pool_row(TokenHalf { values: &x_cur, gate_logits: &bias_cur }, Some(prev), dim, &mut out).unwrap();
        for ch in 0..dim {
            sum[ch] += out[ch] as f64;
            sum_sq[ch] += (out[ch] as f64).powi(2);
        }
    }
    let k = (n - 1) as f64;
    let z = 4.0032;
    let wh = |z: f64| (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3);
    let (lo, hi) = (wh(-z), wh(z));
    assert!((lo - 0.96047).abs() < 1e-5 && (hi - 1.04054).abs() < 1e-5, "[{lo}, {hi}]");
    for ch in 0..dim {
        let m = sum[ch] / n as f64;
        let s2 = (sum_sq[ch] - n as f64 * m * m) / k;
        let ratio = s2 / (sigma * factors[ch] as f64).powi(2);
        assert!(ratio >= lo && ratio <= hi, "channel {ch}: variance ratio {ratio}, factor {}", factors[ch]);
    }
    // Gate spread makes the factors differ from 1/√8 = 0.354: the check is not vacuous.
    assert!(factors.iter().any(|&f| f > 0.45));
}

#[test]
fn bad_shapes_are_typed_errors() {
    let x = [0.0f32; 8];
    let half = TokenHalf { values: &x, gate_logits: &x };
    let mut out = [0.0f32; 2];
    assert_eq!(pool_row(half, None, 0, &mut out), Err(CompressorError::ZeroDim));
    assert!(matches!(pool_row(half, None, 3, &mut [0.0; 3]), Err(CompressorError::NotWholeTokens { .. })));
    assert!(matches!(pool_row(half, None, 2, &mut [0.0; 3]), Err(CompressorError::Length { .. })));
    let short = TokenHalf { values: &x, gate_logits: &x[..6] };
    assert!(matches!(pool_row(short, None, 2, &mut out), Err(CompressorError::Length { .. })));
    let prev = TokenHalf { values: &x[..4], gate_logits: &x[..4] };
    assert!(matches!(pool_row(half, Some(prev), 2, &mut out), Err(CompressorError::HalvesDiffer { .. })));
    let empty = TokenHalf { values: &[], gate_logits: &[] };
    assert!(matches!(pool_row(empty, None, 2, &mut out), Err(CompressorError::NotWholeTokens { .. })));
    let g = [0.0f32, f32::NAN, 0.0, 0.0];
    let nan = TokenHalf { values: &x[..4], gate_logits: &g };
    assert!(matches!(pool_row(nan, None, 2, &mut out), Err(CompressorError::NonFiniteGate { token: 0, channel: 1, .. })));
    assert!(matches!(rms_norm(&mut out, 0.0), Err(CompressorError::Eps(_))));
    assert!(matches!(rms_norm(&mut [], 1e-6), Err(CompressorError::ZeroDim)));
    assert!(matches!(pooled_std_factors(&[0.0; 4], Some(&[0.0; 2]), 2), Err(CompressorError::HalvesDiffer { .. })));
    assert!(matches!(pooled_std_factors(&[f32::INFINITY], None, 1), Err(CompressorError::NonFiniteGate { .. })));
}

use super::*;
use crate::model::haystack::IndexerShape;
use crate::model::physics::Pooling;

fn model() -> GenerativeModel {
    GenerativeModel {
        shape: IndexerShape { heads: 16, head_dim: 128 },
        key_common: 0.5,
        outlier_channels: 4,
        outlier_scale: 8.0,
        weight_mean: 0.0,
        weight_std: 1.0,
        needle_strength: 1.0,
        needle_unit: Default::default(),
        needle_heads: 4,
        needle_geometry: crate::model::haystack::NeedleGeometry::Isotropic,
        head_coherence: 0.0,
        structure: Default::default(),
    }
}

fn csa() -> CompressionGeometry {
    CompressionGeometry { ratio: 4, overlap: true, window: 128, window_rows_compete: true }
}

#[test]
fn physics_off_gives_the_null_model_rows_bit_for_bit() {
    let m = model();
    let hay = TrialHaystack::draw(&m, 5).unwrap();
    let mut rows = TrialRows::new(&m, &Physics::NULL, csa(), &hay, 5).unwrap();
    let mut a = vec![0.0f32; 300 * 128];
    let mut b = vec![0.0f32; 300 * 128];
    rows.next_chunk(0, &mut a[..256 * 128]).unwrap();
    rows.next_chunk(256, &mut a[256 * 128..]).unwrap();
    rows.finalize(0, &mut a).unwrap();
    hay.fill_haystack_rows(0, &mut b);
    assert_eq!(a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), b.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
}

fn token_level_geometry() -> CompressionGeometry {
    CompressionGeometry { ratio: 1, overlap: false, window: 0, window_rows_compete: true }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn null_norm_settings_give_the_old_rows_bit_for_bit() {
    use crate::model::physics::{KeyNorm, RopeChoice};
    let m = model();
    let hay = TrialHaystack::draw(&m, 8).unwrap();
    let (context, needle) = (1500u64, 700..704);
    // V3.2 rows (ratio 1, RoPE): key norm off leaves the weight and bias
    // knobs without effect, whatever they say.
    let v32 = Physics { rope: RopeChoice::V32, ..Physics::NULL };
    let v32_set = Physics { norm_weight_spread: 0.7, norm_bias: 0.4, ..v32.clone() };
    assert!(v32_set.is_null(1) == v32.is_null(1));
    let g = token_level_geometry();
    let (a, qa) = context_keys(&m, &v32, g, &hay, 8, context, needle.clone(), None).unwrap();
    let (b, qb) = context_keys(&m, &v32_set, g, &hay, 8, context, needle.clone(), None).unwrap();
    assert_eq!(bits(&a), bits(&b));
    assert_eq!(bits(&qa), bits(&qb));
    // The null model stays null with the weight and bias set.
    assert!(Physics { norm_weight_spread: 0.7, norm_bias: 0.4, ..Physics::NULL }.is_null(1));
    assert!(!Physics { key_norm: KeyNorm::LayerNorm, ..Physics::NULL }.is_null(1));
    // V4 pooled rows: spread 0 is the plain RMSNorm (the old finalize),
    // and the bias acts only through LayerNorm.
    let v4 = Physics { rope: RopeChoice::V4, pooling: Pooling::On, gate_bias_std: 1.0, needle_gate_boost: 2.0, ..Physics::NULL };
    let v4_bias = Physics { norm_bias: 0.5, ..v4.clone() };
    let (a, _) = context_keys(&m, &v4, csa(), &hay, 8, context, needle.clone(), None).unwrap();
    let (b, _) = context_keys(&m, &v4_bias, csa(), &hay, 8, context, needle.clone(), None).unwrap();
    assert_eq!(bits(&a), bits(&b));
    let unrotated = Physics { rope: RopeChoice::Off, ..v4.clone() };
    let mut src = TrialRows::new(&m, &unrotated, csa(), &hay, 8).unwrap();
    let rows = csa().candidate_rows(context) as usize;
    let mut raw = vec![0.0f32; rows * 128];
    src.next_chunk(0, &mut raw).unwrap();
    let mut old = raw.clone();
    compressor::rms_norm_rows(&mut old, 128, compressor::RMS_NORM_EPS).unwrap();
    src.finalize(0, &mut raw).unwrap();
    assert_eq!(bits(&raw), bits(&old));
}

#[test]
fn layer_norm_keys_are_gamma_times_the_standardised_row_plus_beta() {
    use crate::model::physics::KeyNorm;
    let m = model();
    let hay = TrialHaystack::draw(&m, 12).unwrap();
    let g = token_level_geometry();
    let (context, needle) = (600u64, 300..304);
    let raw_physics = Physics::NULL;
    let ln = Physics { key_norm: KeyNorm::LayerNorm, ..Physics::NULL };
    let ln_wb = Physics { norm_weight_spread: 0.5, norm_bias: 0.3, ..ln.clone() };
    let (raw, _) = context_keys(&m, &raw_physics, g, &hay, 12, context, needle.clone(), None).unwrap();
    let (plain, _) = context_keys(&m, &ln, g, &hay, 12, context, needle.clone(), None).unwrap();
    let (full, _) = context_keys(&m, &ln_wb, g, &hay, 12, context, needle.clone(), None).unwrap();
    let src = TrialRows::new(&m, &ln_wb, g, &hay, 12).unwrap();
    let (gamma, beta) = (src.norm_weight.clone().unwrap(), src.norm_bias.clone().unwrap());
    for (r, ((x, y), z)) in raw.chunks_exact(128).zip(plain.chunks_exact(128)).zip(full.chunks_exact(128)).enumerate() {
        // Before γ and β: mean 0, variance 1 (up to eps and f32 rounding).
        let mean = y.iter().map(|&v| f64::from(v)).sum::<f64>() / 128.0;
        let var = y.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / 128.0;
        assert!(mean.abs() < 1e-6, "row {r}: mean {mean}");
        assert!((var - 1.0).abs() < 1e-5, "row {r}: variance {var}");
        // Against LayerNorm in f64 of the same raw row.
        let mu = x.iter().map(|&v| f64::from(v)).sum::<f64>() / 128.0;
        let v = x.iter().map(|&v| (f64::from(v) - mu).powi(2)).sum::<f64>() / 128.0;
        let rs = 1.0 / (v + f64::from(compressor::LAYER_NORM_EPS)).sqrt();
        for j in 0..128 {
            let xhat = (f64::from(x[j]) - mu) * rs;
            assert!((f64::from(y[j]) - xhat).abs() < 1e-5 * (1.0 + xhat.abs()), "row {r} channel {j}");
            let want = f64::from(gamma[j]) * xhat + f64::from(beta[j]);
            assert!((f64::from(z[j]) - want).abs() < 2e-5 * (1.0 + want.abs()), "row {r} channel {j}: {} vs {want}", z[j]);
            // After γ and β: exactly γ·x̂ + β in f32.
            assert_eq!(z[j].to_bits(), (y[j] * gamma[j] + beta[j]).to_bits());
        }
    }
    // The needle's rows are normalised too: the needle row's LayerNorm
    // output has the same unit variance as a haystack row's.
    let row = &plain[301 * 128..302 * 128];
    let var = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / 128.0;
    assert!((var - 1.0).abs() < 1e-5);
}

#[test]
fn norm_weight_and_bias_have_the_set_spread_and_length() {
    use crate::model::physics::KeyNorm;
    let m = model();
    let hay = TrialHaystack::draw(&m, 2).unwrap();
    let ln = Physics { key_norm: KeyNorm::LayerNorm, norm_weight_spread: 0.5, norm_bias: 0.25, ..Physics::NULL };
    let mut ln_sq = 0.0;
    let trials = 40;
    for seed in 0..trials {
        let src = TrialRows::new(&m, &ln, token_level_geometry(), &hay, seed).unwrap();
        let gamma = src.norm_weight.as_ref().unwrap();
        let beta = src.norm_bias.as_ref().unwrap();
        ln_sq += gamma.iter().map(|&g| f64::from(g).ln().powi(2)).sum::<f64>();
        let norm = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        assert!((norm(beta) / norm(gamma) - 0.25).abs() < 1e-5);
    }
    // Sample variance of 5120 N(0, 0.25) draws: relative SE sqrt(2/n) = 0.02; 5 SE.
    let var = ln_sq / (128 * trials) as f64;
    assert!((var / 0.25 - 1.0).abs() < 0.1, "ln γ variance {var}");
    // Pooled rows: the weight multiplies the RMS-normalised rows, and the
    // rows drawn by the shortcut get it too; RMSNorm has no bias.
    let v4 = Physics { pooling: Pooling::On, gate_bias_std: 1.0, ..Physics::NULL };
    let v4_w = Physics { norm_weight_spread: 0.5, norm_bias: 0.25, ..v4.clone() };
    let src = TrialRows::new(&m, &v4_w, csa(), &hay, 2).unwrap();
    assert!(src.norm_bias.is_none());
    let gamma = src.norm_weight.clone().unwrap();
    let (a, _) = context_keys(&m, &v4, csa(), &hay, 2, 3000, 1000..1004, None).unwrap();
    let (b, _) = context_keys(&m, &v4_w, csa(), &hay, 2, 3000, 1000..1004, None).unwrap();
    for (x, y) in a.chunks_exact(128).zip(b.chunks_exact(128)) {
        for j in 0..128 {
            assert_eq!(y[j].to_bits(), (x[j] * gamma[j]).to_bits());
        }
    }
}

#[test]
fn sampled_rows_with_their_own_noise_are_the_trial_rows_bit_for_bit() {
    use crate::model::physics::RopeChoice;
    let m = model();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let v4 = Physics { rope: RopeChoice::V4, pooling: Pooling::On, gate_bias_std: 1.0, needle_gate_boost: 2.0, ..Physics::NULL };
    let rope_only = Physics { rope: RopeChoice::V32, ..Physics::NULL };
    for physics in [v4, rope_only] {
        assert!(physics.rows_are_independent(4));
        let hay = TrialHaystack::draw(&m, 21).unwrap();
        let (context, needle) = (2000u64, 1001..1005);
        let (keys, _) = context_keys(&m, &physics, csa(), &hay, 21, context, needle.clone(), None).unwrap();
        let mut src = TrialRows::new(&m, &physics, csa(), &hay, 21).unwrap();
        let rows = csa().candidate_rows(context);
        let items = src.items(context, needle);
        let special = src.special_rows(&items, rows);
        assert_eq!(special, vec![250, 251, 252]);
        let mut out = vec![0.0f32; 128];
        for row in [0u64, 1, 7, 249, 253, 256, 300, rows - 1] {
            let tz = src.sampled_haystack_row(row, row, &[], false, &mut out);
            assert_eq!(tz, 0.0);
            src.finalize_at(&mut out, &[row]).unwrap();
            assert_eq!(bits(&out), bits(&keys[row as usize * 128..(row as usize + 1) * 128]), "{physics:?} row {row}");
        }
        // Finalizing scattered rows together gives each row's bits.
        let scattered = [3u64, 90, 249, 400];
        let mut batch = vec![0.0f32; scattered.len() * 128];
        for (i, &row) in scattered.iter().enumerate() {
            src.sampled_haystack_row(row, row, &[], false, &mut batch[i * 128..(i + 1) * 128]);
        }
        src.finalize_at(&mut batch, &scattered).unwrap();
        for (i, &row) in scattered.iter().enumerate() {
            assert_eq!(bits(&batch[i * 128..(i + 1) * 128]), bits(&keys[row as usize * 128..(row as usize + 1) * 128]));
        }
        let mut redraws = Vec::new();
        for &row in &special {
            src.sampled_special_row(row, &items, None, &mut out).unwrap();
            src.finalize_at(&mut out, &[row]).unwrap();
            assert_eq!(bits(&out), bits(&keys[row as usize * 128..(row as usize + 1) * 128]), "{physics:?} needle row {row}");
            for draw in 0..2 {
                src.sampled_special_row(row, &items, Some(draw), &mut out).unwrap();
                src.finalize_at(&mut out, &[row]).unwrap();
                redraws.push(bits(&out));
            }
        }
        // The rows of one redraw are drawn independently of each other
        // (not one noise vector shared by all rows of the redraw).
        let (mut a, mut b) = (vec![0.0f32; 128], vec![0.0f32; 128]);
        src.sampled_special_row(special[0], &items, Some(0), &mut a).unwrap();
        src.sampled_special_row(special[1], &items, Some(0), &mut b).unwrap();
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!(same < 8, "{physics:?}: {same} of 128 values shared by two rows of one redraw");
        // Every redraw is new: none equals the trial's row or another redraw.
        let mut unique = redraws.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), redraws.len());
        assert!(special.iter().all(|&r| !redraws.contains(&bits(&keys[r as usize * 128..(r as usize + 1) * 128]))));
    }
}

#[test]
fn a_tilted_haystack_draw_moves_by_sigma_theta_and_reports_its_likelihood_term() {
    let m = model();
    let hay = TrialHaystack::draw(&m, 3).unwrap();
    let src = TrialRows::new(&m, &Physics::NULL, csa(), &hay, 3).unwrap();
    let theta: Vec<f64> = (0..128).map(|j| 0.01 * j as f64 - 0.5).collect();
    let (mut plain, mut tilted) = (vec![0.0f32; 128], vec![0.0f32; 128]);
    let tz_plain = src.sampled_haystack_row(5, 77, &theta, false, &mut plain);
    let tz_tilted = src.sampled_haystack_row(5, 77, &theta, true, &mut tilted);
    let (common, sigma) = (hay.common(), hay.channel_std());
    let z: Vec<f64> = (0..128).map(|j| f64::from((plain[j] - common[j]) / sigma[j])).collect();
    let dot: f64 = theta.iter().zip(&z).map(|(t, z)| t * z).sum();
    let theta_sq: f64 = theta.iter().map(|t| t * t).sum();
    // f32 keys: the standardised noise is recovered to ~1e-6 per channel.
    assert!((tz_plain - dot).abs() < 1e-4, "{tz_plain} vs {dot}");
    assert!((tz_tilted - (dot + theta_sq)).abs() < 1e-4, "{tz_tilted} vs {}", dot + theta_sq);
    for j in 0..128 {
        let want = f64::from(plain[j]) + theta[j] * f64::from(sigma[j]);
        assert!((f64::from(tilted[j]) - want).abs() < 1e-5, "channel {j}");
    }
}

/// Lag-1 correlation of channel `j`'s standardised values over rows.
fn lag1(rows: &[f32], d: usize, j: usize, common: f32, sd: f32) -> f64 {
    let z: Vec<f64> = rows.chunks_exact(d).map(|r| f64::from((r[j] - common) / sd)).collect();
    let n = z.len() - 1;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for i in 0..n {
        sxy += z[i] * z[i + 1];
        sxx += z[i] * z[i];
    }
    sxy / sxx
}

#[test]
fn correlated_rows_follow_an_ar1_over_rows() {
    // Pooling off, ratio 4, ℓ = 16 tokens: ρ_row = exp(−4/16) ≈ 0.7788.
    let m = model();
    let physics = Physics { correlation_length: 16.0, ..Physics::NULL };
    let hay = TrialHaystack::draw(&m, 9).unwrap();
    let mut src = TrialRows::new(&m, &physics, csa(), &hay, 9).unwrap();
    let n = 8192;
    let mut rows = vec![0.0f32; n * 128];
    for start in (0..n).step_by(256) {
        src.next_chunk(start as u64, &mut rows[start * 128..(start + 256) * 128]).unwrap();
    }
    let want = (-0.25f64).exp();
    // The lag-1 estimate of an AR(1) has standard error ≈ sqrt((1 − ρ²)/n) ≈ 0.0069
    // at n = 8192; 5 standard errors.
    let tol = 5.0 * ((1.0 - want * want) / n as f64).sqrt();
    for j in [0usize, 10, 100] {
        let got = lag1(&rows, 128, j, hay.common()[j], hay.channel_std()[j]);
        assert!((got - want).abs() < tol, "channel {j}: lag-1 {got}, want {want} ± {tol}");
    }
}

/// Per-channel variance of rows (before normalisation) over `n` rows.
fn variances(physics: &Physics, n: usize, seed: u64) -> (Vec<f64>, Vec<f32>) {
    let m = model();
    let hay = TrialHaystack::draw(&m, seed).unwrap();
    let mut src = TrialRows::new(&m, physics, csa(), &hay, seed).unwrap();
    let mut rows = vec![0.0f32; n * 128];
    for start in (0..n).step_by(256) {
        src.next_chunk(start as u64, &mut rows[start * 128..(start + 256).min(n) * 128]).unwrap();
    }
    let common = hay.common();
    // Skip row 0 (it pools only its own tokens).
    let var = (0..128)
        .map(|j| rows.chunks_exact(128).skip(1).map(|r| f64::from(r[j] - common[j]).powi(2)).sum::<f64>() / (n - 1) as f64)
        .collect();
    (var, hay.channel_std().to_vec())
}

#[test]
fn token_level_pooling_has_the_shortcut_distribution() {
    // Token values are scaled so that a full window under the trial's
    // gate biases has the null row spread σ: check token by token pooling
    // against that. Var estimate of n iid normals has relative SE sqrt(2/n)
    // = 0.0221 at n = 4096; 5 SE.
    let physics = Physics { pooling: Pooling::Full, gate_bias_std: 1.0, ..Physics::NULL };
    let n = 4096;
    let (var, sigma) = variances(&physics, n, 3);
    let tol = 5.0 * (2.0 / (n - 1) as f64).sqrt();
    for j in [0usize, 3, 7, 64, 127] {
        let ratio = var[j] / f64::from(sigma[j]).powi(2);
        assert!((ratio - 1.0).abs() < tol, "channel {j}: variance ratio {ratio} ± {tol}");
    }
}

#[test]
fn distractor_offsets_have_the_needle_norm_and_the_set_similarity() {
    let m = model();
    let hay = TrialHaystack::draw(&m, 4).unwrap();
    for s in [0.0, 0.5, 0.9, 1.0] {
        let physics = Physics { distractors: 3, distractor_similarity: s, ..Physics::NULL };
        let src = TrialRows::new(&m, &physics, csa(), &hay, 4).unwrap();
        let norm = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        let needle = &src.offsets[0];
        for dis in &src.offsets[1..] {
            let cos = needle.iter().zip(dis).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>() / (norm(needle) * norm(dis));
            // f32 storage of 128 values: relative error well under 1e-5.
            assert!((cos - s).abs() < 1e-5, "similarity {s}: cosine {cos}");
            assert!((norm(dis) / norm(needle) - 1.0).abs() < 1e-5);
        }
    }
}

#[test]
fn special_rows_are_the_rows_whose_window_holds_an_item_token() {
    let m = model();
    let hay = TrialHaystack::draw(&m, 4).unwrap();
    let physics = Physics { distractors: 5, ..Physics::NULL };
    let g = csa();
    let src = TrialRows::new(&m, &physics, g, &hay, 4).unwrap();
    for context in [1000u64, 4099, 70_001] {
        let p = g.place_needle(context, 6, 37.0);
        let items = src.items(context, p.tokens.clone());
        assert_eq!(items.len(), 6);
        let candidates = g.candidate_rows(context);
        let brute: Vec<u64> = (0..candidates)
            .filter(|&r| {
                let w = g.row_tokens(r);
                items.iter().any(|i| i.tokens.start < w.end && w.start < i.tokens.end)
            })
            .collect();
        assert_eq!(src.special_rows(&items, candidates), brute, "context {context}");
    }
}

//! Property tests of the number formats, block scaling and the scoring order.

use dsa_recall::numerics::format::{quantize_dequantize, BlockScaling, BlockShape, ElementFormat, Overflow, ScaleFormat};
use dsa_recall::numerics::pipeline::QuantizedRows;
use dsa_recall::score::indexer::IndexerQuery;
use dsa_recall::score::variant::PrecisionVariant;
use proptest::prelude::*;

const NARROW: [ElementFormat; 5] =
    [ElementFormat::Bf16, ElementFormat::F16, ElementFormat::E4m3fn, ElementFormat::E5m2, ElementFormat::E2m1];

fn mantissa_bits(f: ElementFormat) -> i32 {
    match f {
        ElementFormat::F32 => 23,
        ElementFormat::Bf16 => 7,
        ElementFormat::F16 => 10,
        ElementFormat::E4m3fn => 3,
        ElementFormat::E5m2 => 2,
        ElementFormat::E2m1 => 1,
    }
}

/// Half the spacing of `f`'s values around |x| (x within range).
fn half_ulp(f: ElementFormat, x: f32) -> f64 {
    let a = f64::from(x.abs()).max(f64::from(f.min_normal()));
    2f64.powi(a.log2().floor() as i32 - mantissa_bits(f)) / 2.0
}

fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![any::<u32>().prop_map(f32::from_bits), -1000f32..1000f32, -8f32..8f32, -0.05f32..0.05f32]
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

proptest! {
    // A fixed seed: CI runs are reproducible (a new seed is a code change).
    #![proptest_config(ProptestConfig {
        cases: 2000,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x05ee_dd5a),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn round_trip_is_idempotent(x in any_f32()) {
        for f in NARROW {
            for o in [Overflow::Cast, Overflow::Saturate] {
                let once = f.round_trip(x, o);
                prop_assert!(same(f.round_trip(once, o), once), "{f} {o:?} {x:e}");
            }
        }
    }

    #[test]
    fn round_trip_is_monotonic(x in any_f32(), y in any_f32()) {
        prop_assume!(!x.is_nan() && !y.is_nan());
        let (x, y) = if x <= y { (x, y) } else { (y, x) };
        for f in NARROW {
            for o in [Overflow::Cast, Overflow::Saturate] {
                let (a, b) = (f.round_trip(x, o), f.round_trip(y, o));
                // e4m3fn's plain cast makes overflow NaN: not ordered.
                if a.is_nan() || b.is_nan() {
                    prop_assert!(f == ElementFormat::E4m3fn && o == Overflow::Cast);
                    continue;
                }
                prop_assert!(a <= b, "{f} {o:?}: {x:e} → {a:e}, {y:e} → {b:e}");
            }
        }
    }

    #[test]
    fn in_range_error_is_at_most_half_an_ulp(x in any_f32()) {
        for f in NARROW {
            prop_assume!(x.is_finite());
            if x.abs() > f.max_finite() {
                continue;
            }
            let r = f.round_trip(x, Overflow::Cast);
            let err = (f64::from(r) - f64::from(x)).abs();
            prop_assert!(err <= half_ulp(f, x), "{f}: {x:e} → {r:e}, error {err:e}");
        }
    }

    #[test]
    fn saturating_cast_of_finite_input_is_finite(x in any_f32()) {
        prop_assume!(x.is_finite());
        for f in NARROW {
            let r = f.round_trip(x, Overflow::Saturate);
            prop_assert!(r.is_finite() && r.abs() <= f.max_finite(), "{f}: {x:e} → {r:e}");
        }
    }

    /// With a scale that never clips (DeepSeek's ue8m0 rounded up, fp32),
    /// each dequantized value is within s · (half the element step at max).
    #[test]
    fn block_scaled_error_is_bounded(values in prop::collection::vec(-1f32..1f32, 64), exponent in -30i32..30) {
        let scale_in = 2f32.powi(exponent);
        let input: Vec<f32> = values.iter().map(|v| v * scale_in).collect();
        for element in [ElementFormat::E4m3fn, ElementFormat::E2m1, ElementFormat::E5m2] {
            for scale in [ScaleFormat::Ue8m0Ceil, ScaleFormat::Fp32] {
                let scaling = BlockScaling { shape: BlockShape::Block(32), scale, amax_floor: 0.0 };
                let mut out = input.clone();
                let mut q = dsa_recall::numerics::format::QuantizedBlocks::default();
                quantize_dequantize(&mut out, 64, element, &scaling, Some(&mut q)).unwrap();
                let step_at_max = half_ulp(element, element.max_finite());
                for (i, (x, y)) in input.iter().zip(&out).enumerate() {
                    let s = f64::from(q.scales[i / 32]);
                    let err = (f64::from(*x) - f64::from(*y)).abs();
                    prop_assert!(err <= s * step_at_max * (1.0 + 1e-6), "{element} {scale:?}: {x:e} → {y:e} (s {s:e})");
                }
            }
        }
    }

    /// The kernel order (q scale in the head weight, k scale after the head
    /// sum) against dequantize-first: identical bits with power-of-two
    /// scales; with fp32 scales, within the standard worst-case bound of two
    /// f32 evaluations of the same sum of products: each is within
    /// γ_n·Σ|terms| of the exact value (Higham, γ_n = nε/(1−nε), n = d + H +
    /// 4 roundings in sequence), so they differ by at most 2γ_n·Σ|terms|.
    #[test]
    fn folded_scores_match_dequantize_first(
        q in prop::collection::vec(-4f32..4f32, 4 * 128),
        w in prop::collection::vec(-2f32..2f32, 4),
        k in prop::collection::vec(-1f32..1f32, 3 * 128),
        key_exponent in -12i32..12,
    ) {
        let k: Vec<f32> = k.iter().map(|v| v * 2f32.powi(key_exponent)).collect();
        for name in ["fp8", "fp8-fp32scale"] {
            let v = PrecisionVariant::builtin(name).unwrap();
            let folded = IndexerQuery::new(v.query.quantize_rows(&q, 128).unwrap(), &w, 128, v.scoring);
            let mut a = vec![0.0; 3];
            folded.score_quantized_rows(&v.key.quantize_rows(&k, 128).unwrap(), &mut a);
            let (mut dq, mut dk) = (q.clone(), k.clone());
            v.query.apply(&mut dq, 128).unwrap();
            v.key.apply(&mut dk, 128).unwrap();
            let plain = IndexerQuery::new(QuantizedRows::unscaled(dq.clone(), 128), &w, 128, v.scoring);
            let mut b = vec![0.0; 3];
            plain.score_rows(&dk, &mut b);
            for r in 0..3 {
                if name == "fp8" {
                    prop_assert_eq!(a[r].to_bits(), b[r].to_bits(), "row {}", r);
                } else {
                    let weights = plain.head_weights();
                    let magnitude: f64 = (0..4)
                        .map(|h| {
                            let terms: f64 = (0..128).map(|j| f64::from(dq[h * 128 + j] * dk[r * 128 + j]).abs()).sum();
                            f64::from(weights[h]).abs() * terms
                        })
                        .sum();
                    let n = (128 + 4 + 4) as f64;
                    let eps = f64::from(f32::EPSILON) / 2.0;
                    let gamma = n * eps / (1.0 - n * eps);
                    let bound = 2.0 * gamma * magnitude + f64::from(f32::MIN_POSITIVE);
                    prop_assert!(f64::from((a[r] - b[r]).abs()) <= bound, "row {}: {} vs {} (bound {:e})", r, a[r], b[r], bound);
                }
            }
        }
    }
}

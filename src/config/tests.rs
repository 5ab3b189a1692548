use super::*;
use crate::model::physics::KeyNorm;

fn with(toml: &str) -> Result<Scenario, ConfigError> {
    check(resolve(params::parse_scenario_toml(toml).unwrap())?)
}

#[test]
fn default_preset_resolves_with_derived_topk() {
    let s = with("").unwrap();
    assert_eq!(s.preset, "deepseek-v4-flash");
    assert_eq!(s.topks, vec![512, 1024]);
    assert_eq!(s.contexts.first(), Some(&1024));
    assert_eq!(s.contexts.last(), Some(&(128 * 1024)));
}

#[test]
fn every_preset_parses_and_is_complete() {
    for (name, _) in PRESETS {
        let p = preset_params(name).unwrap();
        let s = check(resolve(ScenarioParams { preset: Some(name.to_string()), ..p }).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.preset, *name);
    }
    assert!(preset_params("deepseek-v9").unwrap_err().to_string().contains("one of deepseek-v4-flash"));
}

#[test]
fn presets_switch_on_their_model_physics() {
    use crate::model::physics::{KeyNorm, Physics, Pooling, RopeChoice};
    let physics = |name: &str| check(resolve(preset_params(name).unwrap()).unwrap()).unwrap().physics;
    // Gate spread and needle boost: assumptions (docs/MODEL.md, "Physics in a trial").
    // Norm weight spread and bias: assumptions (docs/MODEL.md, "Key norms").
    let v4 = Physics {
        rope: RopeChoice::V4,
        pooling: Pooling::On,
        gate_bias_std: 1.0,
        needle_gate_boost: 2.0,
        norm_weight_spread: 0.3,
        ..Physics::NULL
    };
    assert_eq!(physics("deepseek-v4-flash"), v4);
    assert_eq!(physics("deepseek-v4-pro"), v4);
    // Token-level rows (ratio 1): nothing to pool; the keys' LayerNorm.
    assert_eq!(
        physics("deepseek-v3.2"),
        Physics { rope: RopeChoice::V32, key_norm: KeyNorm::LayerNorm, norm_weight_spread: 0.3, norm_bias: 0.2, ..Physics::NULL }
    );
}

#[test]
fn bad_values_name_their_field() {
    let cases = [
        ("[sweep]\ntopk = \"0\"", "sweep.topk (--topk)"),
        ("[geometry]\ncompress_ratio = 0", "geometry.compress_ratio (--compress-ratio)"),
        ("[sweep]\ndepths = \"101\"", "sweep.depths (--depths)"),
        ("[sweep]\nprecisions = \"fp7\"", "sweep.precisions (--precisions)"),
        ("[sweep]\ntrials = 0", "sweep.trials (--trials)"),
        ("[needle]\nstrength = -1.0", "needle.strength (--needle-strength)"),
        ("[needle]\nstrength = nan", "needle.strength (--needle-strength)"),
        ("[sweep]\ncontexts = \"1K..x\"", "sweep.contexts (--contexts)"),
        ("[selection]\ntie_rule = \"first\"", "selection.tie_rule (--tie-rule)"),
        ("[sweep]\nthreshold = 1.5", "sweep.threshold (--threshold)"),
        ("[keys]\noutlier_channels = 999", "keys.outlier_channels"),
        ("[indexer]\nheads = 256\n[needle]\ngeometry = \"isotropic\"", "indexer.heads"),
        ("[needle]\ngeometry = \"round\"", "needle.geometry (--needle-geometry)"),
        ("[needle]\nrope_share = 1.5", "needle.rope_share (--needle-rope-share)"),
        ("[needle]\nrope_share = 0.5\nrope_min_wavelength = 1000000000000", "needle.rope_share (--needle-rope-share)"),
        ("[needle]\nhead_coherence = 0.99", "needle.head_coherence (--head-coherence)"),
        ("[haystack]\ncontent_rank = 999", "haystack.content_rank (--content-rank)"),
        ("[haystack]\nrelevance_sigma = -1.0", "haystack.relevance_sigma (--relevance-sigma)"),
        ("[haystack]\nsink_relevance = nan", "haystack.sink_relevance"),
        ("[physics]\nkey_norm = \"batchnorm\"", "physics.key_norm (--key-norm)"),
        ("[physics]\nnorm_weight_spread = -0.1", "physics.norm_weight_spread (--norm-weight-spread)"),
        ("[physics]\nnorm_bias = nan", "physics.norm_bias (--norm-bias)"),
    ];
    for (toml, field) in cases {
        let err = with(toml).unwrap_err().to_string();
        assert!(err.starts_with(&format!("invalid {field} = ")), "{toml}: {err}");
        assert!(!err.contains('\n'));
    }
}

#[test]
fn key_norm_values_and_the_pooled_rows_refusal() {
    let err = with("[physics]\nkey_norm = \"batchnorm\"").unwrap_err().to_string();
    assert_eq!(err, "invalid physics.key_norm (--key-norm) = \"batchnorm\": one of off, layernorm, rmsnorm");
    let err = with("[physics]\nnorm_bias = 11.0").unwrap_err().to_string();
    assert_eq!(err, "invalid physics.norm_bias (--norm-bias) = 11: a number from 0 to 10");
    let err = with("[physics]\nnorm_weight_spread = 3.5").unwrap_err().to_string();
    assert_eq!(err, "invalid physics.norm_weight_spread (--norm-weight-spread) = 3.5: a number from 0 to 3");
    // Pooled rows (the V4 presets) already get the compressor's RMSNorm.
    let err = with("[physics]\nkey_norm = \"layernorm\"").unwrap_err().to_string();
    assert!(err.starts_with("invalid physics.key_norm (--key-norm) = \"layernorm\": off while rows are pooled"), "{err}");
    assert!(!err.contains('\n'));
    // Without pooling, or at ratio 1, any norm is accepted.
    let s = with("[physics]\nkey_norm = \"layernorm\"\npooling = \"off\"").unwrap();
    assert_eq!(s.physics.key_norm, KeyNorm::LayerNorm);
    assert!(!s.physics.is_null(s.geometry.ratio));
    let s = with("preset = \"deepseek-v3.2\"\n[physics]\nkey_norm = \"rmsnorm\"\npooling = \"on\"").unwrap();
    assert_eq!(s.physics.row_norm(1), KeyNorm::RmsNorm);
}

#[test]
fn custom_precisions_are_usable_by_name() {
    let s =
        with("[sweep]\nprecisions = \"bf16,kq\"\n[[precision]]\nname = \"kq\"\nlogits = \"f16\"\n[precision.key]\nelement = \"e5m2\"\n")
            .unwrap();
    assert_eq!(s.precisions.len(), 2);
    assert_eq!(s.precisions[1].name, "kq");
    assert_eq!(s.precisions[1].key.element, crate::numerics::format::ElementFormat::E5m2);
    let err = with("[sweep]\nprecisions = \"kq\"\n").unwrap_err().to_string();
    assert!(err.starts_with("invalid sweep.precisions (--precisions) = \"kq\""), "{err}");
}

#[test]
fn hypotheses_compose_on_builtin_and_custom_variants() {
    let s =
        with("[sweep]\nprecisions = \"fp8-fp32scale,fp8-fp32scale+stale-scale,kq+topk=1024+ties-lowest\"\n[[precision]]\nname = \"kq\"\n")
            .unwrap();
    let names: Vec<&str> = s.precisions.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["fp8-fp32scale", "fp8-fp32scale+stale-scale", "kq+topk=1024+ties-lowest"]);
    assert!(s.precisions[1].cache.stale_scale);
    let err = with("[sweep]\nprecisions = \"fp8+nope\"\n").unwrap_err().to_string();
    assert!(
        err.starts_with("invalid sweep.precisions (--precisions) = \"fp8+nope\": unknown hypothesis \"nope\"; known: no-hadamard,"),
        "{err}"
    );
    assert!(!err.contains('\n'));
    // Scale hypotheses need one e4m3fn scale per row: fp4 has blocks of 32.
    let err = with("[sweep]\nprecisions = \"fp4+stale-scale\"\n").unwrap_err().to_string();
    assert!(err.contains("e4m3fn keys with one scale per row"), "{err}");
}

#[test]
fn prediction_and_tail_need_independent_rows() {
    // The presets' physics (RoPE, pooling through the exact shortcut) keep
    // rows independent given the trial: accepted, as is the null model.
    // Both serve the strength unit (the stress needle) here.
    for estimator in ["predict = true", "mode = \"tail\""] {
        let estimator = &format!("{estimator}\n[needle]\nprofile = \"stress\"");
        for preset in ["deepseek-v4-flash", "deepseek-v3.2"] {
            assert!(with(&format!("preset = \"{preset}\"\n[estimator]\n{estimator}\n")).is_ok(), "{preset} {estimator}");
        }
        let s = with(&format!("[estimator]\n{estimator}\n[physics]\nrope = \"off\"\npooling = \"off\"\n")).unwrap();
        assert!(s.physics.gate_bias_std > 0.0 && s.physics.is_null(s.geometry.ratio));
        assert!(with(&format!("[estimator]\n{estimator}\n[sweep]\nneedle_offsets = [0, 1]\n")).is_ok());
        if estimator.starts_with("mode") {
            let err =
                with(&format!("[estimator]\n{estimator}\n[sweep]\nprecisions = \"bf16,bf16+rope-swap-q\"\n")).unwrap_err().to_string();
            assert!(err.contains("rope-swap-q"), "{err}");
        }
        // Correlated tokens, distractors, gate noise and token-level pooling make rows depend on each other.
        for physics in ["distractors = 1", "correlation_length = 8.0", "gate_noise_std = 0.5", "pooling = \"full\""] {
            let err = with(&format!("[estimator]\n{estimator}\n[physics]\n{physics}\n")).unwrap_err().to_string();
            assert!(err.contains("independent rows") && err.contains("estimator."), "{physics}: {err}");
        }
    }
}

/// The quantile needle's prediction holds under any haystack (its
/// reference rank is binomial by construction); tail sampling serves it
/// where rows are independent and refuses it, in one line, where not.
#[test]
fn the_quantile_needle_takes_the_prediction_and_tail_sampling() {
    for physics in ["distractors = 1", "correlation_length = 8.0", "pooling = \"full\""] {
        assert!(with(&format!("[estimator]\npredict = true\n[physics]\n{physics}\n")).is_ok(), "{physics}");
    }
    assert!(with("[estimator]\nmode = \"tail\"\n").is_ok());
    let err = with("[estimator]\nmode = \"tail\"\n[physics]\ndistractors = 1\n").unwrap_err().to_string();
    assert!(err.starts_with("invalid estimator.mode (--mode) = \"tail\": full"), "{err}");
    assert!(!err.contains('\n'));
}

/// Issue 26: every new needle knob refuses a bad value with one line
/// naming the field and what is allowed; a knob of the other unit is
/// refused rather than ignored.
#[test]
fn bad_needle_unit_knobs_are_one_line_errors() {
    for (toml, field, allowed) in [
        ("[needle]\nprofile = \"easy\"", "needle.profile (--needle-profile)", "one of niah, hard, stress"),
        ("[needle]\nunit = \"sd\"", "needle.unit (--needle-unit)", "one of quantile, strength"),
        ("[needle]\nexceedance = 0.0", "needle.exceedance (--needle-exceedance)", "above 0 and below 1"),
        ("[needle]\nexceedance = 1.0", "needle.exceedance (--needle-exceedance)", "above 0 and below 1"),
        ("[needle]\nexceedance = nan", "needle.exceedance (--needle-exceedance)", "above 0 and below 1"),
        ("[needle]\nprompt_spread = -0.1", "needle.prompt_spread (--needle-prompt-spread)", "from 0 to 3"),
        ("[needle]\nlayer_spread = 4.0", "needle.layer_spread (--needle-layer-spread)", "from 0 to 3"),
        ("[needle]\ntoken_spread = -1.0", "needle.token_spread (--needle-token-spread)", "from 0 to 3"),
        ("[needle]\nheads = 0", "needle.heads (--needle-heads)", "quantile"),
        ("[needle]\nstrength = 2.0", "needle.strength (--needle-strength)", "only with needle.unit = \"strength\""),
        (
            "[needle]\nprofile = \"stress\"\nexceedance = 0.01",
            "needle.exceedance (--needle-exceedance)",
            "only with needle.unit = \"quantile\"",
        ),
    ] {
        let err = with(toml).unwrap_err().to_string();
        assert!(err.starts_with(&format!("invalid {field} = ")) && err.contains(allowed) && !err.contains('\n'), "{toml}: {err}");
    }
    // The profile names the needle while its knobs are its own.
    assert_eq!(with("").unwrap().needle_profile.as_deref(), Some("niah"));
    assert_eq!(with("[needle]\nprofile = \"hard\"").unwrap().needle_profile.as_deref(), Some("hard"));
    assert_eq!(with("[needle]\nexceedance = 0.001").unwrap().needle_profile, None);
    let stress = with("[needle]\nprofile = \"stress\"").unwrap();
    assert!(stress.model.needle_unit.is_strength() && stress.model.needle_strength == 1.0);
    assert_eq!(with("[needle]\nunit = \"strength\"\nstrength = 3.0").unwrap().model.needle_strength, 3.0);
}

#[test]
fn lists_are_sorted_and_deduplicated() {
    let s = with("[sweep]\ncontexts = \"8K,1K,8K\"\ndepths = [100, 0, 0]\ntopk = [64, 32]").unwrap();
    assert_eq!(s.contexts, vec![1024, 8192]);
    assert_eq!(s.depths, vec![0.0, 100.0]);
    assert_eq!(s.topks, vec![32, 64]);
}

#[test]
fn a_variant_topk_past_the_rows_is_refused_unless_the_grid_is_dense() {
    // 1K tokens are 256 candidate rows at ratio 4: topk=1024 selects them all.
    let toml = "[sweep]\ncontexts = [1024]\ntopk = [128]\nprecisions = \"fp8-fp32scale+topk=1024\"\n";
    let err = with(toml).unwrap_err().to_string();
    assert!(err.contains("a larger k selects every row"), "{err}");
    let dense = check_dense_topk(resolve(params::parse_scenario_toml(toml).unwrap()).unwrap()).unwrap();
    assert_eq!(dense.precisions[0].selection.topk, Some(1024));
}

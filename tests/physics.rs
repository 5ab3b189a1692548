//! Scenario physics and hypotheses through the whole trial: each one changes
//! what it claims to change, and nothing else. Statistical checks use 99.9 %
//! Wilson intervals (z = 3.29) with fixed seeds.

use dsa_recall::base::stats::{chance_of_hit, wilson_interval};
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::{run_sweep, SweepOutcome};

use crate::common::scenario;

const Z999: f64 = 3.290_526_731_491_926;

fn sweep(toml: &str) -> SweepOutcome {
    run_sweep(&scenario(toml), &|| {}).unwrap()
}

fn find<'a>(o: &'a SweepOutcome, context: u64, depth: f64, precision: &str) -> &'a CellResult {
    o.cells.iter().find(|c| c.context_tokens == context && c.depth_percent == depth && c.precision == precision).expect("cell")
}

/// Every `[physics]` field of the null model, off.
const NULL_PHYSICS: [(&str, &str); 11] = [
    ("rope", "\"off\""),
    ("pooling", "\"off\""),
    ("gate_bias_std", "0.0"),
    ("gate_noise_std", "0.0"),
    ("needle_gate_boost", "0.0"),
    ("correlation_length", "0.0"),
    ("distractors", "0"),
    ("distractor_similarity", "0.0"),
    ("key_norm", "\"off\""),
    ("norm_weight_spread", "0.0"),
    ("norm_bias", "0.0"),
];

/// A `[physics]` table: the null model with the `key = value` lines of `on` replacing its fields.
fn physics_table(on: &str) -> String {
    let mut out = String::from("[physics]\n");
    for (key, value) in NULL_PHYSICS {
        let line = on.lines().find(|l| l.split('=').next().map(str::trim) == Some(key));
        out += &line.map_or_else(|| format!("{key} = {value}"), str::to_string);
        out.push('\n');
    }
    out
}

#[test]
fn physics_switched_off_is_the_null_model_bit_for_bit() {
    // The presets switch RoPE and pooling on (with gate settings); `--rope off
    // --pooling off` leaves the gate settings, which act only through pooling.
    let base = "[sweep]\ncontexts = \"4K,16K\"\ndepths = \"50\"\ntopk = \"512\"\nprecisions = \"fp32,fp8\"\ntrials = 40\n";
    let switched_off = scenario(&format!("{base}[physics]\nrope = \"off\"\npooling = \"off\"\n"));
    assert!(switched_off.physics.gate_bias_std > 0.0, "the preset sets a gate spread: {:?}", switched_off.physics);
    assert!(switched_off.physics.is_null(switched_off.geometry.ratio));
    let every_field_off = format!("{base}{}", physics_table(""));
    assert_eq!(run_sweep(&switched_off, &|| {}).unwrap().cells, sweep(&every_field_off).cells);
}

/// Issue 26: the quantile needle is placed by the exact scores of each
/// trial's own haystack, so its exact rank is the drawn one under any
/// physics (RoPE, pooling, correlated tokens, key norms), wherever the norm
/// does not cap it.
#[test]
fn the_quantile_needle_keeps_its_drawn_rank_under_every_physics() {
    use dsa_recall::run::sweep::spec_for;
    for physics in ["", "rope = \"v4\"\npooling = \"on\"", "correlation_length = 32.0", "key_norm = \"layernorm\"", "rope = \"v3.2\""] {
        let s = scenario(&format!(
            "[sweep]\ncontexts = \"4K,16K\"\ndepths = \"30\"\ntopk = \"256\"\nprecisions = \"bf16\"\ntrials = 1\n{}",
            physics_table(physics)
        ));
        let spec = spec_for(&s, &[30.0]);
        for t in 0..20 {
            let o = spec.run(dsa_recall::estimate::driver::trial_seed(s.seed, 30.0, t)).unwrap();
            for n in o.needle.iter().filter(|n| !n.capped) {
                assert_eq!(n.hay_above, n.target_rank, "{physics}: trial {t}: {n:?}");
            }
        }
    }
}

#[test]
fn every_physics_component_changes_the_outcome() {
    // The strength needle: under the quantile needle the exact reference's
    // rank is drawn, whatever the physics (the next test).
    let base = "[needle]\nprofile = \"stress\"\n[sweep]\ncontexts = \"16K\"\ndepths = \"50\"\ntopk = \"256\"\nprecisions = \"fp32\"\ntrials = 40\nseed = 3\n";
    let null = sweep(&format!("{base}{}", physics_table("")));
    for physics in [
        "rope = \"v4\"",
        "rope = \"v3.2\"",
        "pooling = \"on\"",
        "correlation_length = 32.0",
        "distractors = 50\ndistractor_similarity = 1.0",
        "key_norm = \"layernorm\"",
        "key_norm = \"rmsnorm\"",
    ] {
        let o = sweep(&format!("{base}{}", physics_table(physics)));
        let (a, b) = (&null.cells[0], &o.cells[0]);
        assert!(a.mean_rank != b.mean_rank, "{physics}: same mean rank {:?}", a.mean_rank);
    }
}

#[test]
fn zero_logits_with_lowest_index_ties_select_the_first_k_rows() {
    // Unwritten (zero) key scales make every logit 0; with lowest-index ties
    // the engine selects rows 0 … k−1: the needle survives exactly when its
    // first row is below k, whatever the trial.
    let o = sweep(
        "[sweep]\ncontexts = \"8K\"\ndepths = \"10,50\"\ntopk = \"512\"\n\
         precisions = \"fp8-fp32scale+scale-unwritten-zero+ties-lowest\"\ntrials = 30\n",
    );
    let name = "fp8-fp32scale+scale-unwritten-zero+ties-lowest";
    assert_eq!(find(&o, 8192, 10.0, name).recall, 1.0); // rows ~205: selected
    assert_eq!(find(&o, 8192, 50.0, name).recall, 0.0); // rows ~1024: not
}

/// Seed 11's first 2000 trials land 4.1 SD low (0.5335 against 0.578); a
/// Python re-implementation of the tie priorities alone gives the same
/// 0.5335, and over 80 other seeds the z-scores have SD 0.95: a fluke of
/// that seed, not of the simulator. 4000 trials are used.
#[test]
fn zero_logits_with_random_ties_give_the_hypergeometric_chance() {
    let o = sweep(
        "[sweep]\ncontexts = \"8K\"\ndepths = \"50\"\ntopk = \"512\"\n\
         precisions = \"fp8-fp32scale+scale-unwritten-zero\"\ntrials = 4000\nseed = 11\n",
    );
    let c = find(&o, 8192, 50.0, "fp8-fp32scale+scale-unwritten-zero");
    let want = chance_of_hit(c.candidate_rows, c.needle_rows, c.k_eff);
    let (lo, hi) = wilson_interval(c.survived, c.trials, Z999);
    assert!(lo <= want && want <= hi, "recall {} [{lo}, {hi}], chance {want}", c.recall);
}

#[test]
fn a_topk_override_changes_k_eff_and_only_above_the_coverage_limit() {
    let o = sweep(
        "[sweep]\ncontexts = \"2K,8K\"\ndepths = \"50\"\ntopk = \"512\"\n\
         precisions = \"fp8-fp32scale,fp8-fp32scale+topk=1024\"\ntrials = 100\n",
    );
    let (a, b) = (find(&o, 2048, 50.0, "fp8-fp32scale"), find(&o, 2048, 50.0, "fp8-fp32scale+topk=1024"));
    assert_eq!((a.k_eff, b.k_eff), (512, 512));
    assert_eq!(a.survived, b.survived);
    let (a, b) = (find(&o, 8192, 50.0, "fp8-fp32scale"), find(&o, 8192, 50.0, "fp8-fp32scale+topk=1024"));
    assert_eq!((a.k_eff, b.k_eff), (512, 1024));
    // Same scores, more rows kept: never fewer survivors, trial by trial.
    assert_eq!(b.discordant_lost, Some(0));
}

#[test]
fn swapping_the_rope_layout_on_one_side_hurts_recall() {
    // Only where the needle's match uses the rotary dims (the isotropic
    // geometry; under the content geometry with rope_share 0 it does not),
    // with the strength-2 needle on the haystack it was written for (the
    // presets' before issue 26).
    let o = sweep(
        "[physics]\nrope = \"v4\"\npooling = \"off\"\n[haystack]\ncontent_rank = 16\nrelevance_scale = 0.03\n\
         [needle]\nunit = \"strength\"\nstrength = 2.0\ngeometry = \"isotropic\"\nhead_coherence = 0.5\n[sweep]\ncontexts = \"16K\"\ndepths = \"90\"\ntopk = \"512\"\n\
         precisions = \"fp32,fp32+rope-swap-k\"\ntrials = 200\n",
    );
    let (a, b) = (find(&o, 16384, 90.0, "fp32"), find(&o, 16384, 90.0, "fp32+rope-swap-k"));
    assert!(b.recall < a.recall, "swap {} vs {}", b.recall, a.recall);
    assert!(b.mcnemar_p.unwrap() < 1e-3, "p = {:?}", b.mcnemar_p);
}

#[test]
fn chunks_scored_in_parallel_give_the_sequential_bits() {
    // With more than one thread, a long context's chunks are scored side by
    // side (independent rows only); with one thread, in order. Every kind of
    // row and key handling must come out the same: needle and distractor
    // rows at every offset, both RoPE layouts, cache faults that store whole
    // chunks, and (sequential either way) correlated and token-level rows.
    let base = "[sweep]\ncontexts = \"2K,32K\"\ndepths = \"0,70\"\ntopk = \"256\"\ntrials = 3\nseed = 5\nneedle_offsets = \"all\"\n";
    let cases = [
        format!("{base}precisions = \"fp32,bf16\"\n"),
        format!("{base}precisions = \"fp32,fp8+scale-per-page,fp8+slot-shift,bf16+rope-swap-k\"\n[physics]\ndistractors = 3\n"),
        format!("{base}precisions = \"fp32,fp8\"\n[physics]\nrope = \"off\"\npooling = \"off\"\n"),
        format!("{base}precisions = \"fp32\"\n[physics]\ncorrelation_length = 8.0\n"),
        format!("{base}precisions = \"fp32\"\n[physics]\npooling = \"full\"\n"),
    ];
    for toml in &cases {
        let s = scenario(toml);
        let run = |threads| {
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| run_sweep(&s, &|| {}).unwrap().cells)
        };
        assert_eq!(run(1), run(4), "{toml}");
    }
}

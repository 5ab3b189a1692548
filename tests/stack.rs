//! Whole-model recall through the library: what the fault spread changes
//! and what it must leave alone (docs/MODEL.md, "Whole-model recall").
//!
//! Statistical checks use 99.9 % Wilson intervals (z = 3.29); seeds are
//! fixed, so a run is reproducible.

use dsa_recall::base::stats::wilson_interval;
use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::run_sweep;

use crate::common::scenario;

const Z999: f64 = 3.290_526_731_491_926;

/// bf16 and a scrambling fault (queries rotated, keys not: scores unrelated
/// to the needle) at 8K, k 512, under one fault spread. The query tokens
/// select nearly alike (ρ_T 0.998, the band's "share more" end): at the
/// default 0.7791 they rescue the shared fault too (1.0 at strength 30),
/// and the layers' spread no longer shows.
fn cells(spread: &str, strength: f64) -> Vec<CellResult> {
    let s = scenario(&format!(
        "[needle]\nunit = \"strength\"\nstrength = {strength:?}\n[stack]\nfault_layers = \"{spread}\"\ntoken_correlation = 0.998\n\
         [sweep]\ncontexts = \"8K\"\ntopk = \"512\"\nprecisions = \"bf16,fp8-fp32scale+hadamard-q-only\"\ntrials = 150\nseed = 5\n"
    ));
    run_sweep(&s, &|| {}).unwrap().cells
}

#[test]
fn the_fault_spread_moves_only_the_faults_whole_model_recall() {
    for strength in [1.5, 30.0] {
        let (shared, independent) = (cells("shared", strength), cells("independent", strength));
        for (a, b) in shared.iter().zip(&independent) {
            // Per-layer numbers do not depend on the stack at all.
            assert_eq!((a.survived, a.mean_rank, a.recall_diff), (b.survived, b.mean_rank, b.recall_diff), "{strength}");
        }
        // bf16 carries no hypothesis: the spread does not touch it.
        assert_eq!(shared[0].model_survived, independent[0].model_survived, "{strength}");

        // An independent scrambling fault is drawn afresh in each of the 21
        // layers: at least the union of 21 independent layers of its own
        // per-layer recall p (tokens only add), up to the 99.9 % interval.
        let fault = &independent[1];
        let p = fault.recall;
        let union = 1.0 - (1.0 - p).powi(21);
        let (_, high) = wilson_interval(fault.model_survived.unwrap(), fault.trials, Z999);
        assert!(high >= union, "strength {strength}: model recall {:?} below the union {union} of p = {p}", fault.model_recall);
        // Shared, its layers correlate like the fault-free model's, and the
        // union rescues less: at strength 30 (shared about 0.73, independent
        // 1.0 over 150 trials) the two 99.9 % intervals do not overlap; at
        // 1.5 the gap (about 0.87 against 1.0) is within them.
        if strength < 30.0 {
            continue;
        }
        let f = &shared[1];
        let (_, shared_high) = wilson_interval(f.model_survived.unwrap(), f.trials, Z999);
        let (independent_low, _) = wilson_interval(fault.model_survived.unwrap(), fault.trials, Z999);
        assert!(shared_high < independent_low, "strength {strength}: shared {:?} vs independent {:?}", f.model_recall, fault.model_recall);
    }
}

#[test]
fn a_quorum_of_every_layer_is_at_most_the_layer_recall_and_one_layer_at_least() {
    // Quorum 21 of 21: the needle must be selected in every indexer layer;
    // the simulated layer is one of them, so model ≤ layer trial by trial.
    // One query token: with more, another token of the simulated layer may
    // select the needle where the simulated one did not (at ρ_T 0.7791 the
    // model then reads 0.58 against the layer's 0.44).
    let base = "question_tokens = 1\nanswer_tokens = 0\n[needle]\nprofile = \"stress\"\n\
                [sweep]\ncontexts = \"16K\"\ntopk = \"512\"\nprecisions = \"bf16\"\ntrials = 100\nseed = 6\n";
    let all = run_sweep(&scenario(&format!("[stack]\nquorum = 21\n{base}")), &|| {}).unwrap().cells;
    let one = run_sweep(&scenario(&format!("[stack]\n{base}")), &|| {}).unwrap().cells;
    assert!(all[0].model_survived.unwrap() <= all[0].survived, "{:?}", all[0]);
    assert!(one[0].model_survived.unwrap() >= one[0].survived, "{:?}", one[0]);
    assert!(all[0].model_survived < one[0].model_survived);
}

#[test]
fn tail_sampling_reads_the_stack_like_full_simulation() {
    // The same cells under both estimators: whole-model recall estimates the
    // same quantity, so the two 99.9 % Wilson intervals must overlap.
    let base =
        "[needle]\nprofile = \"stress\"\n[sweep]\ncontexts = \"32K\"\ntopk = \"512\"\nprecisions = \"bf16\"\ntrials = 200\nseed = 8\n";
    let full = run_sweep(&scenario(base), &|| {}).unwrap().cells;
    let tail = run_sweep(&scenario(&format!("[estimator]\nmode = \"tail\"\n{base}")), &|| {}).unwrap().cells;
    let (f, t) = (&full[0], &tail[0]);
    let (f_low, f_high) = wilson_interval(f.model_survived.unwrap(), f.trials, Z999);
    let (t_low, t_high) = wilson_interval(t.model_survived.unwrap(), t.trials, Z999);
    assert!(f_low <= t_high && t_low <= f_high, "full {:?} vs tail {:?}", f.model_recall, t.model_recall);
}

/// Issue 26: under the quantile needle the stack reads every other layer
/// from the survival model of the simulated one (the exact reference's rank
/// is Binomial(N, u_ℓ) by construction) plus what the variant does beyond
/// it; simulating three layers in full (each its own haystack, its own
/// layer draw, the prompt's draw shared) must give the same whole-model
/// recall. k 8 at 24K keeps a layer's recall near one half under the hard
/// profile, where the union over layers is most sensitive. Layer
/// correlation 0: full layers have independent haystacks. Tolerance: the
/// 99.9 % interval of a difference of two independent shares,
/// 3.29·√(2·p(1−p)/n).
#[test]
fn the_quantile_stack_matches_a_full_simulation_of_every_layer() {
    use dsa_recall::base::rng;
    use dsa_recall::estimate::driver::trial_seed;
    use dsa_recall::model::needle::{open_uniform, NeedleDraw};
    use dsa_recall::run::sweep::spec_for;
    use rand::Rng;
    use rand_distr::StandardNormal;

    let trials = 400u64;
    let s = scenario(&format!(
        "[needle]\nprofile = \"hard\"\n[stack]\ncompress_ratios = \"4, 4, 4\"\nlayer_correlation = 0.0\nquestion_tokens = 1\nanswer_tokens = 0\n\
         [sweep]\ncontexts = \"24K\"\ntopk = \"8\"\nprecisions = \"fp32,fp4\"\ntrials = {trials}\nseed = 11\n"
    ));
    let stacked = run_sweep(&s, &|| {}).unwrap().cells;
    let q = *s.model.needle_unit.quantile().unwrap();
    let spec = spec_for(&s, &s.depths[..1]);
    let mut full = [0u64; 2];
    for t in 0..trials {
        let seed = trial_seed(s.seed, s.depths[0], t);
        let own = q.draw(seed);
        let mut rng = rng::stream(seed, &[0xfeed]);
        let mut kept = [false; 2];
        for layer in 0..3u64 {
            let (draw, layer_seed) = if layer == 0 {
                (own, seed)
            } else {
                let (l, tok): (f64, f64) = (rng.sample(StandardNormal), rng.sample(StandardNormal));
                let draw = NeedleDraw {
                    prompt: own.prompt,
                    layer: l,
                    token: tok,
                    log10_exceedance: q.log10_exceedance(own.prompt, l, tok),
                    rank_uniform: open_uniform(rng.random()),
                };
                (draw, rng::derive(seed, &[0xfeed, layer]))
            };
            let outcome = spec.run_with_needle(layer_seed, Some(draw)).unwrap();
            for (v, k) in kept.iter_mut().enumerate() {
                *k |= outcome.cells[spec.cell_index(0, 0, 0, v)].survived;
            }
        }
        for (f, k) in full.iter_mut().zip(kept) {
            *f += u64::from(k);
        }
    }
    for (v, cell) in stacked.iter().enumerate() {
        let layer = cell.recall;
        assert!(layer > 0.2 && layer < 0.8, "{}: per-layer recall {layer} is not informative", cell.precision);
        let (a, b) = (cell.model_recall.unwrap(), full[v] as f64 / trials as f64);
        let p = 0.5 * (a + b);
        let tol = Z999 * (2.0 * p * (1.0 - p) / trials as f64).sqrt();
        assert!((a - b).abs() <= tol, "{}: stack {a} vs three layers in full {b} (tolerance {tol})", cell.precision);
        // And the union rescues: three layers keep more than one.
        assert!(b > layer, "{}", cell.precision);
    }
}

// Issue 28, item 2: a fault in some layers only. Constant logits with
// index-ordered ties keep rows 0 … k−1 in every faulty layer, so at 16K,
// depth 50 %, k 512 a faulty layer never keeps the needle. In every layer
// it loses it in every trial; in all layers but the first, or in the first
// only, the healthy layers find it as the healthy cache does; at k ≥ the
// context's rows every layer selects everything and the fault is cured.
#[test]
fn a_fault_in_some_layers_is_rescued_by_the_healthy_ones() {
    let fault = "fp8-fp32scale+scale-unwritten-zero+ties-lowest";
    let s = scenario(&format!(
        "[sweep]\ncontexts = \"16K\"\ndepths = \"50\"\ntopk = \"512,4096\"\n\
         precisions = \"fp8-fp32scale,{fault},{fault}+layers=1..,{fault}+layers=0,{fault}+layer-share=0.5\"\ntrials = 100\nseed = 9\n"
    ));
    let o = run_sweep(&s, &|| {}).unwrap();
    let cell = |k: u64, p: &str| o.cells.iter().find(|c| c.topk == k && c.precision == p).expect("cell");
    let healthy = cell(512, "fp8-fp32scale");
    assert_eq!(healthy.model_survived, Some(100));
    assert_eq!(cell(512, fault).model_survived, Some(0));
    for subset in ["+layers=1..", "+layers=0", "+layer-share=0.5"] {
        let c = cell(512, &format!("{fault}{subset}"));
        // Per-layer recall is a faulty layer's.
        assert_eq!(c.survived, 0, "{subset}");
        assert_eq!(c.model_survived, healthy.model_survived, "{subset}: the healthy layers find it");
        assert_eq!(cell(4096, &format!("{fault}{subset}")).survived, 100, "{subset}: k ≥ rows cures it");
    }
    // Refused where it cannot work: past the stack, under the strength unit.
    for (toml, needle) in [
        (format!("[sweep]\nprecisions = \"{fault}+layers=21\"\n"), "past the stack's 21"),
        (format!("[needle]\nprofile = \"stress\"\n[sweep]\nprecisions = \"{fault}+layers=1..\"\n"), "quantile needle"),
        (format!("[stack]\ncompress_ratios = \"none\"\n[sweep]\nprecisions = \"{fault}+layers=1..\"\n"), "whole-model stack"),
    ] {
        let e = config::check(config::resolve(parse_scenario_toml(&toml).unwrap()).unwrap()).unwrap_err().to_string();
        assert!(e.contains(needle) && !e.contains('\n'), "{e}");
    }
}

// Issue 28 (V4.1's two-level candidate indexer, docs/MODEL.md "Two-level
// candidate indexer"): the candidate source is V4-Flash's model layer 20,
// indexer layer 9. Constant logits with index-ordered ties in that layer
// alone keep blocks 0 … 2046 and the newest, rows 0 … 16375 and the last,
// so at 128K (32,768 rows), depth 50 % (row 16,384) its blocks lose the
// needle and the 11 indexer layers from it on cannot select it: 9 layers
// reach the needle where 20 did without the stage. The same fault in
// layer 0, before the source, costs one layer either way. At 64K the 2,048
// blocks of 8 hold every row and the stage changes nothing at all.
#[test]
fn a_fault_in_the_candidate_source_reaches_every_later_layer() {
    let fault = "fp8-fp32scale+scale-unwritten-zero+ties-lowest";
    let run = |context: &str, stage: &str| {
        let s = scenario(&format!(
            "[stack]\n{stage}[sweep]\ncontexts = \"{context}\"\ndepths = \"50\"\ntopk = \"512\"\n\
             precisions = \"fp8-fp32scale,{fault}+layers=9,{fault}+layers=0\"\ntrials = 40\nseed = 3\n"
        ));
        run_sweep(&s, &|| {}).unwrap().cells
    };
    let stage = "candidate_source_layer = 20\ncandidate_blocks = 2048\ncandidate_block_rows = 8\n";
    let reached = |cells: &[CellResult]| -> Vec<f64> { cells.iter().map(|c| c.layers_reached.unwrap()).collect() };
    let (without, with) = (run("128K", ""), run("128K", stage));
    assert_eq!(reached(&without), vec![21.0, 20.0, 20.0]);
    assert_eq!(reached(&with), vec![21.0, 9.0, 20.0]);
    assert_eq!(run("64K", ""), run("64K", stage), "2,048 blocks of 8 hold all 16,384 rows");
}

#[test]
fn a_candidate_stage_is_refused_where_it_cannot_be_read() {
    let stage = |source: &str, blocks: &str| {
        format!("[stack]\ncandidate_source_layer = {source}\ncandidate_blocks = {blocks}\ncandidate_block_rows = 8\n")
    };
    for (toml, field, needle) in [
        (stage("3", "2048"), "stack.candidate_source_layer", "an indexer layer of the stack"),
        (stage("99", "2048"), "stack.candidate_source_layer", "2, 4, …, 42"),
        (stage("20", "0"), "stack.candidate_blocks", "1"),
        ("[stack]\ncandidate_blocks = 2048\n".to_string(), "stack.candidate_blocks", "only with stack.candidate_source_layer"),
        (format!("[needle]\nprofile = \"stress\"\n{}", stage("20", "2048")), "stack.candidate_source_layer", "quantile needle"),
        (format!("{}compress_ratios = \"none\"\n", stage("20", "2048")), "stack.candidate_source_layer", "only with a stack"),
    ] {
        let e = config::check(config::resolve(parse_scenario_toml(&toml).unwrap()).unwrap()).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(needle) && !e.contains('\n'), "{e}");
    }
}

/// A fault that loses every needle (constant logits, index-ordered ties)
/// on GLM-5.2's plan (21 indexer layers, the 57 others reusing the one
/// before them) at 16K, depth 50 %, k 2048: the healthy model reaches the
/// needle in all 78 selecting layers. In indexer layer 3 (model layer 6,
/// reused by 7, 8 and 9) the fault costs those four layers; in indexer
/// layer 0 (model layer 0, which nobody reuses) it costs that layer alone;
/// in the reusing layers (`layers=reusers`: each selects on its own with
/// the fault) it leaves only the 21 indexer layers. Under the any-layer
/// rule (lost-layer harm 0) the answer survives each; under GLM-5.2's
/// default rule (harm 1: a faulty layer that loses the needle a correct
/// selection keeps costs the answer) none does.
#[test]
fn a_fault_in_a_reused_layer_reaches_every_layer_that_reuses_it() {
    let fault = "fp8-fp32scale+scale-unwritten-zero+ties-lowest";
    let run = |harm: &str| {
        let s = scenario(&format!(
            "preset = \"glm-5.2\"\n[stack]\n{harm}[sweep]\ncontexts = \"16K\"\ndepths = \"50\"\ntopk = \"2048\"\n\
             precisions = \"fp8-fp32scale,{fault}+layers=3,{fault}+layers=0,{fault}+layers=reusers\"\ntrials = 40\nseed = 3\n"
        ));
        run_sweep(&s, &|| {}).unwrap().cells
    };
    let any_layer = run("lost_layer_harm = 0\nlost_layer_harm_band = \"0..0\"\n");
    let reached: Vec<f64> = any_layer.iter().map(|c| c.layers_reached.unwrap()).collect();
    assert_eq!(reached, vec![78.0, 74.0, 77.0, 21.0]);
    assert!(any_layer.iter().all(|c| c.model_survived == Some(40) && c.indexed_layers == Some(78)), "{any_layer:?}");
    assert!(any_layer[1..].iter().all(|c| c.survived == 0), "per-layer recall is a faulty layer's");
    let glm = run("");
    assert_eq!(glm.iter().map(|c| c.layers_reached.unwrap()).collect::<Vec<_>>(), reached, "the rule leaves the layers alone");
    assert_eq!(glm.iter().map(|c| c.model_survived.unwrap()).collect::<Vec<_>>(), vec![40, 0, 0, 0]);
    // The band spans the harm's own band (0.1 … 1): at 0.1, four lost layers
    // leave the answer intact in 0.9⁴ = 66 % of trials.
    let (low, high) = (glm[1].model_band_low.unwrap(), glm[1].model_band_high.unwrap());
    assert!(low == 0.0 && high > 0.3 && high < 0.95, "band {low} … {high}");
}

/// An indexer layer at another compress ratio is read on its own rows.
/// On V4-Flash's calibration with a needle that half the haystack
/// outscores, at 2K tokens: a ratio-4 layer has 512 rows, all selected at
/// k 512, so it always keeps the needle; a ratio-1 layer has 2,048 rows
/// and keeps it only when its rank falls below 512 for some query token.
#[test]
fn an_indexer_layer_at_another_ratio_is_read_on_its_own_rows() {
    let run = |layers: &str| {
        let s = scenario(&format!(
            "[needle]\nexceedance = 0.5\n[stack]\nlayers = \"{layers}\"\n[sweep]\ncontexts = \"2K\"\ndepths = \"50\"\ntopk = \"512\"\n\
             precisions = \"bf16\"\ntrials = 200\nseed = 4\n"
        ));
        run_sweep(&s, &|| {}).unwrap().cells.remove(0)
    };
    let same = run("w, i4, i4");
    assert_eq!((same.survived, same.layers_reached), (200, Some(2.0)));
    let mixed = run("w, i4, i1");
    assert_eq!(mixed.survived, 200, "the simulated layer is the ratio-4 one");
    let extra = mixed.layers_reached.unwrap() - 1.0;
    // Read on the simulated layer's rows it would keep the needle in every
    // trial (1.0); on its own 2,048 rows, each of the twenty query tokens
    // ranks it around the 1,024th, so it keeps it only sometimes.
    assert!(extra > 0.0 && extra < 1.0, "the ratio-1 layer kept it in {extra} of trials");
    // A plan whose first indexer is not at the simulated ratio is refused.
    let toml = "[stack]\nlayers = \"w, i1, i4\"\n";
    let e = config::check(config::resolve(parse_scenario_toml(toml).unwrap()).unwrap()).unwrap_err().to_string();
    assert!(e.contains("stack.layers") && e.contains("layer 1, ratio 1") && !e.contains('\n'), "{e}");
}

/// The new presets run their released plans.
#[test]
fn the_new_presets_describe_their_plans() {
    let plan = |name: &str| scenario(&format!("preset = \"{name}\"\n")).stack.expect("a stack");
    let v41 = plan("deepseek-v4.1-flash");
    assert_eq!((v41.plan.len(), v41.indexed_layers(), v41.selecting_layers()), (40, 8, 38));
    assert_eq!(v41.indexer_ratios(), vec![2, 2, 2, 1, 1, 1, 1, 1]);
    assert_eq!(v41.candidate_source(), Some(3));
    let glm = plan("glm-5.2");
    assert_eq!((glm.plan.len(), glm.indexed_layers(), glm.selecting_layers()), (78, 21, 78));
    assert_eq!(glm.plan.indexers()[..5], [0, 1, 2, 6, 10]);
    let flash = plan("glm-5.3-flash");
    assert_eq!((flash.plan.len(), flash.indexed_layers(), flash.selecting_layers()), (45, 11, 11));
    assert_eq!(flash.plan.indexers(), (3..45).step_by(4).collect::<Vec<_>>());
    // The early profile (model layers 0-1, docs/MODEL.md "Per-layer
    // profiles") holds indexer layers only where those layers have one.
    for (name, early) in [
        ("deepseek-v3.2", 2),
        ("glm-5.2", 2),
        ("deepseek-v4-flash", 0),
        ("deepseek-v4-pro", 0),
        ("deepseek-v4.1-flash", 0),
        ("glm-5.3-flash", 0),
    ] {
        let s = plan(name);
        assert_eq!((s.early_layers, s.early_indexers()), (2, early), "{name}");
        assert!(s.token_correlation_of(early) > s.token_correlation_of(0) || early == 0, "{name}");
    }
}

/// A fault's token correlation (docs/MODEL.md, "A fault's token
/// correlation"): unwritten key scales with random ties select rows at
/// random, so each query token keeps the needle by chance. Its tokens read
/// ρ_F (0.998), not the measured ρ_T: the old default (ρ_T 0.998 for every
/// latent) gives the fault the same bits, and ρ_F = ρ_T (0.7791, the fault
/// churning as healthy selections do) lets the 20 query tokens rescue it
/// far more often. bf16 has no fault part and does not move with ρ_F.
#[test]
fn a_fault_s_query_tokens_take_the_fault_token_correlation() {
    let run = |token: &str| {
        let s = scenario(&format!(
            "[stack]\n{token}[sweep]\ncontexts = \"16K\"\ndepths = \"50\"\ntopk = \"512\"\n\
             precisions = \"bf16,fp8-fp32scale+scale-unwritten-zero\"\ntrials = 100\nseed = 11\n"
        ));
        run_sweep(&s, &|| {}).unwrap().cells
    };
    let (default, churning, old) = (run(""), run("fault_token_correlation = 0.7791\n"), run("token_correlation = 0.998\n"));
    for (a, b) in default.iter().zip(&churning).chain(default.iter().zip(&old)) {
        assert_eq!((a.survived, a.mean_rank), (b.survived, b.mean_rank), "per-layer numbers do not read the stack");
    }
    assert_eq!(default[0].model_survived, churning[0].model_survived, "bf16 has no fault part");
    assert_eq!(default[1].model_survived, old[1].model_survived, "a fault's tokens read ρ_F, not ρ_T");
    let (fault, fault_churning) = (&default[1], &churning[1]);
    let (_, high) = wilson_interval(fault.model_survived.unwrap(), fault.trials, Z999);
    let (churning_low, _) = wilson_interval(fault_churning.model_survived.unwrap(), fault_churning.trials, Z999);
    assert!(high < churning_low, "ρ_F 0.998 {:?} vs ρ_F = ρ_T {:?}", fault.model_recall, fault_churning.model_recall);
    // The band's "share less" end takes ρ_F = ρ_T: it reaches the churning reading.
    let (low, band_high) = (fault.model_band_low.unwrap(), fault.model_band_high.unwrap());
    let recall = fault.model_recall.unwrap();
    assert!(low <= recall && band_high >= fault_churning.model_recall.unwrap(), "band {low}–{band_high}, recall {recall}");
}

/// The needle's own token correlation (docs/MODEL.md, "The needle's token
/// correlation ρ_N"): at the measured ρ_T a number format's latent follows
/// the needle (ρ_N 0.98 for `niah`), so the whole-model margin of bf16 at
/// 64K is bounded, as it was at ρ_T 0.998, and the same order; with the
/// rows' ρ_T on that latent it read "≥ 3450×" in every cell of the main job.
/// The per-layer margin does not read the stack.
#[test]
fn a_format_s_query_tokens_follow_the_needle_and_the_margin_stays_bounded() {
    let run = |token: &str| {
        let s = scenario(&format!(
            "[stack]\n{token}[sweep]\ncontexts = \"64K\"\ndepths = \"50\"\ntopk = \"512\"\nprecisions = \"bf16\"\ntrials = 100\nseed = 3\n"
        ));
        run_sweep(&s, &|| {}).unwrap().cells.remove(0)
    };
    let (measured, asserted) = (run(""), run("token_correlation = 0.998\n"));
    assert_eq!(measured.needle_margin, asserted.needle_margin);
    for c in [&measured, &asserted] {
        assert_eq!(c.model_needle_margin_unbounded, Some(false), "{:?}", c.model_needle_margin);
    }
    let (m, a) = (measured.model_needle_margin.unwrap(), asserted.model_needle_margin.unwrap());
    // Tokens that churn a little more rescue a little more, within a factor 3.
    assert!(a <= m && m <= 3.0 * a, "measured ρ_T {m}× vs 0.998 {a}×");
}

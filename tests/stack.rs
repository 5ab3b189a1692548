//! Whole-model recall through the library: what the fault spread changes
//! and what it must leave alone (docs/MODEL.md, "Whole-model recall").
//!
//! Statistical checks use 99.9 % Wilson intervals (z = 3.29); seeds are
//! fixed, so a run is reproducible.

use dsa_recall::base::stats::wilson_interval;
use dsa_recall::config::{self, params::parse_scenario_toml, Scenario};
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::run_sweep;

const Z999: f64 = 3.290_526_731_491_926;

fn scenario(toml: &str) -> Scenario {
    let params = parse_scenario_toml(toml).unwrap_or_else(|e| panic!("{e}"));
    config::check(config::resolve(params).unwrap()).unwrap()
}

/// bf16 and a scrambling fault (queries rotated, keys not: scores unrelated
/// to the needle) at 8K, k 512, under one fault spread.
fn cells(spread: &str, strength: f64) -> Vec<CellResult> {
    let s = scenario(&format!(
        "[needle]\nstrength = {strength:?}\n[stack]\nfault_layers = \"{spread}\"\n\
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
    let base = "[sweep]\ncontexts = \"16K\"\ntopk = \"512\"\nprecisions = \"bf16\"\ntrials = 100\nseed = 6\n";
    let all = run_sweep(&scenario(&format!("[stack]\nquorum = 21\n{base}")), &|| {}).unwrap().cells;
    let one = run_sweep(&scenario(base), &|| {}).unwrap().cells;
    assert!(all[0].model_survived.unwrap() <= all[0].survived, "{:?}", all[0]);
    assert!(one[0].model_survived.unwrap() >= one[0].survived, "{:?}", one[0]);
    assert!(all[0].model_survived < one[0].model_survived);
}

#[test]
fn tail_sampling_reads_the_stack_like_full_simulation() {
    // The same cells under both estimators: whole-model recall estimates the
    // same quantity, so the two 99.9 % Wilson intervals must overlap.
    let base = "[sweep]\ncontexts = \"32K\"\ntopk = \"512\"\nprecisions = \"bf16\"\ntrials = 200\nseed = 8\n";
    let full = run_sweep(&scenario(base), &|| {}).unwrap().cells;
    let tail = run_sweep(&scenario(&format!("[estimator]\nmode = \"tail\"\n{base}")), &|| {}).unwrap().cells;
    let (f, t) = (&full[0], &tail[0]);
    let (f_low, f_high) = wilson_interval(f.model_survived.unwrap(), f.trials, Z999);
    let (t_low, t_high) = wilson_interval(t.model_survived.unwrap(), t.trials, Z999);
    assert!(f_low <= t_high && t_low <= f_high, "full {:?} vs tail {:?}", f.model_recall, t.model_recall);
}

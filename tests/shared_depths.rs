//! Depths on shared trials (issue 28, diagnose's cost): diagnose scores one
//! haystack per trial for every depth of its rows. A depth's cells must not
//! depend on which other depths share its trials: seeded alike, a depth
//! gives bit for bit what it gives alone, and the first depth's cells are a
//! sweep's.

use dsa_recall::config::{self, params::parse_scenario_toml, ListSpec, Scenario, ScenarioParams};
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::{run_sweep, run_sweep_sharing_depths, spec_for};

fn findings(depths: &str) -> Scenario {
    let toml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/incidents/findings.toml")).unwrap();
    let mut p: ScenarioParams = config::resolve(parse_scenario_toml(&toml).unwrap()).unwrap();
    p.sweep.contexts = Some(ListSpec::Text("2048,6144".into()));
    p.sweep.depths = Some(ListSpec::Text(depths.into()));
    p.sweep.topk = Some(ListSpec::Text("128,512".into()));
    p.sweep.precisions =
        Some(ListSpec::Text("fp8-fp32scale,fp8-fp32scale+block-row0,fp8-fp32scale+needle=2,bf16,fp8-fp32scale+chunk-local".into()));
    p.geometry.prefill_chunk = Some(2048);
    p.sweep.trials = Some(16);
    p.estimator.predict = Some(false);
    config::check(p).unwrap()
}

/// The cells at `depth`, as JSON, keyed so that order does not matter.
fn at(cells: &[CellResult], depth: f64) -> Vec<String> {
    let mut out: Vec<String> = cells.iter().filter(|c| c.depth_percent == depth).map(|c| serde_json::to_string(c).unwrap()).collect();
    out.sort();
    out
}

#[test]
fn the_first_shared_depth_is_the_sweeps_bit_for_bit() {
    let sweep = run_sweep(&findings("10,50,90"), &|| {}).unwrap().cells;
    // Each depth in turn leads (and so seeds the trials) with the others beside it.
    // (A scenario's depths are sorted; the order is set after the check.)
    for order in [[10.0, 50.0, 90.0], [50.0, 90.0, 10.0], [90.0, 10.0, 50.0]] {
        let s = Scenario { depths: order.to_vec(), ..findings("10,50,90") };
        let shared = run_sweep_sharing_depths(&s, &|| {}).unwrap().cells;
        assert_eq!(shared.len(), sweep.len(), "{order:?}");
        let first = order[0];
        let want = at(&sweep, first);
        assert_eq!(want.len(), 2 * 2 * 5);
        assert!(at(&shared, first) == want, "depth {first} leading {order:?} is not the sweep's");
        // The others are draws on the leader's seeds: not the sweep's.
        assert!(at(&shared, order[1]) != at(&sweep, order[1]), "depth {} in {order:?} is the sweep's", order[1]);
    }
}

#[test]
fn a_depth_on_shared_trials_is_the_depth_alone_on_those_seeds() {
    let s = findings("10,50,90");
    let spec = spec_for(&s, &s.depths);
    assert_eq!(spec.spot_count(), 3);
    let slots = spec.needle_slots();
    for seed in [7u64, 1 << 40] {
        let together = spec.run(seed).unwrap();
        for (si, &depth) in s.depths.iter().enumerate() {
            let alone = spec_for(&s, std::slice::from_ref(&depth)).run(seed).unwrap();
            for ci in 0..s.contexts.len() {
                for ki in 0..s.topks.len() {
                    for (v, &slot) in slots.iter().enumerate() {
                        assert_eq!(
                            together.cells[spec.cell_index(ci, si, ki, v)],
                            alone.cells[alone_index(&s, ci, ki, v)],
                            "depth {depth}, context {ci}, k {ki}, variant {v}"
                        );
                        assert_eq!(
                            together.needle[spec.needle_index(slot, ci, si)],
                            alone.needle[spec_for(&s, std::slice::from_ref(&depth)).needle_index(slot, ci, 0)],
                            "the needle's placement at depth {depth}"
                        );
                    }
                }
            }
        }
    }
}

fn alone_index(s: &Scenario, ci: usize, ki: usize, v: usize) -> usize {
    spec_for(s, &s.depths[..1]).cell_index(ci, 0, ki, v)
}

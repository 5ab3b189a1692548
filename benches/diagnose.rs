//! `diagnose` end to end, with divan (`cargo bench --bench diagnose`;
//! docs/PERFORMANCE.md quotes it): the whole catalogue (31 candidates) on
//! the fixed ten-row file `benches/diagnose_rows.csv` (five lengths from
//! 1,913 to 16K tokens at two depths), the scenario of
//! `examples/incidents/findings.toml`, 200 trials per cell, on 2 threads —
//! the ranking alone (`--no-next`) and with the next experiment. Issue 18,
//! item 7: the target is under a minute on 2 cores. Few samples: one
//! sample is tens of seconds; DSA_BENCH_QUICK=1 takes one.

use divan::Bencher;
use dsa_recall::config::{self, params::parse_scenario_toml, ScenarioParams};
use dsa_recall::diagnose::{self, observations, Options, Reading};
use std::path::Path;

fn main() {
    divan::main();
}

fn samples() -> u32 {
    if std::env::var_os("DSA_BENCH_QUICK").is_some() {
        1
    } else {
        3
    }
}

fn setup() -> (ScenarioParams, observations::Observations) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let toml = std::fs::read_to_string(root.join("examples/incidents/findings.toml")).expect("findings.toml");
    let mut p = config::resolve(parse_scenario_toml(&toml).expect("toml")).expect("scenario");
    // What the CLI defaults to for diagnose.
    p.sweep.trials = Some(200);
    p.estimator.predict = Some(false);
    let obs = observations::read(&root.join("benches/diagnose_rows.csv"), &|v| diagnose::variant_ok(&p, v)).expect("rows");
    assert_eq!(obs.rows.len(), 10);
    (p, obs)
}

fn run(bencher: Bencher, next: bool) {
    let (params, obs) = setup();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    bencher.bench_local(|| {
        let opts = Options {
            hypotheses: diagnose::candidates("all").expect("all"),
            reading: Reading::Model,
            next,
            needle_multipliers: diagnose::NUISANCE_MULTIPLIERS.to_vec(),
            observer: &dsa_recall::base::observe::Silent,
        };
        let d = pool.install(|| diagnose::diagnose(&params, &obs, &opts)).expect("diagnose");
        divan::black_box(d)
    });
}

#[divan::bench(sample_count = samples(), sample_size = 1)]
fn ranking_only(bencher: Bencher) {
    run(bencher, false);
}

#[divan::bench(sample_count = samples(), sample_size = 1)]
fn with_next_experiment(bencher: Bencher) {
    run(bencher, true);
}

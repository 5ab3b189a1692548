//! `diagnose` end to end, with divan (`cargo bench --bench diagnose`;
//! docs/PERFORMANCE.md quotes it): the whole catalogue with the needle
//! profiled (× 0.5, 1, 2), the scenario of
//! `examples/incidents/findings.toml`, 200 trials per cell, on 2 threads,
//! on two fixed files: `benches/diagnose_rows.csv` (ten rows, five lengths
//! from 1,913 to 16K tokens at two depths; issue 18, item 7: under a minute
//! on 2 cores), the ranking alone (`--no-next`) and with the next
//! experiment; and `benches/diagnose_rows48.csv` (48 rows: 2K–16K × depths
//! 10, 50, 90 × k 512, 1024 × two configurations; issue 28: ≤ 60 s on 2
//! cores) with the next experiment. Few samples: one sample is tens of
//! seconds; DSA_BENCH_QUICK=1 takes one.

use divan::Bencher;
use dsa_recall::config::{self, params::parse_scenario_toml, ScenarioParams};
use dsa_recall::diagnose::{self, observations, Options, Reading};
use std::path::Path;

fn main() {
    divan::main();
}

const TEN_ROWS: (&str, usize) = ("benches/diagnose_rows.csv", 10);

fn samples() -> u32 {
    if std::env::var_os("DSA_BENCH_QUICK").is_some() {
        1
    } else {
        3
    }
}

fn setup(file: &str, rows: usize) -> (ScenarioParams, observations::Observations) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let toml = std::fs::read_to_string(root.join("examples/incidents/findings.toml")).expect("findings.toml");
    let mut p = config::resolve(parse_scenario_toml(&toml).expect("toml")).expect("scenario");
    // What the CLI defaults to for diagnose.
    p.sweep.trials = Some(200);
    p.estimator.predict = Some(false);
    let obs = observations::read(&root.join(file), &|v| diagnose::variant_ok(&p, v)).expect("rows");
    assert_eq!(obs.rows.len(), rows);
    (p, obs)
}

fn run(bencher: Bencher, (file, rows): (&str, usize), next: bool) {
    let (params, obs) = setup(file, rows);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    bencher.bench_local(|| {
        let opts = Options {
            hypotheses: diagnose::candidates("all").expect("all"),
            reading: Reading::Model,
            next,
            needle_multipliers: diagnose::default_needle_multipliers(&params),
            observer: &dsa_recall::base::observe::Silent,
        };
        let d = pool.install(|| diagnose::diagnose(&params, &obs, &opts)).expect("diagnose");
        divan::black_box(d)
    });
}

#[divan::bench(sample_count = samples(), sample_size = 1)]
fn ranking_only(bencher: Bencher) {
    run(bencher, TEN_ROWS, false);
}

#[divan::bench(sample_count = samples(), sample_size = 1)]
fn with_next_experiment(bencher: Bencher) {
    run(bencher, TEN_ROWS, true);
}

#[divan::bench(sample_count = samples(), sample_size = 1)]
fn rows48_with_next_experiment(bencher: Bencher) {
    run(bencher, ("benches/diagnose_rows48.csv", 48), true);
}

//! Trials per second of one V4-Flash trial (default preset: bf16 and fp4,
//! k 512 and 1024) at 32K and 128K tokens, on one thread and on all cores.
//!
//! `cargo bench --bench trial`. Prints the median of repeated timings; each
//! timing runs a batch of real trials (nothing is cached between them).

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::sweep::run_sweep;
use std::time::Instant;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    for (context, trials) in [("32K", 40u64), ("128K", 12)] {
        for threads in [1usize, 0] {
            let text = format!("[sweep]\ncontexts = \"{context}\"\ntrials = {trials}\n");
            let s = config::check(config::resolve(parse_scenario_toml(&text).expect("toml")).expect("preset")).expect("scenario");
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            let timings: Vec<f64> = (0..5)
                .map(|_| {
                    let start = Instant::now();
                    pool.install(|| run_sweep(&s, &|| {})).expect("sweep");
                    start.elapsed().as_secs_f64()
                })
                .collect();
            let t = median(timings);
            println!(
                "v4-flash trial at {context:>5}, {} thread(s): median {:.1} ms per trial, {:.1} trials/s ({} precisions × {} k per trial)",
                pool.current_num_threads(),
                1e3 * t / trials as f64,
                trials as f64 / t,
                s.precisions.len(),
                s.topks.len()
            );
        }
    }
}

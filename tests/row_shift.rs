//! `row-shift` through the library: a query that selects by another
//! query's logits row ranks the needle as a haystack row
//! (docs/HYPOTHESES.md). 99.9 % Wilson intervals (z = 3.29), fixed seeds.

use dsa_recall::base::stats::wilson_interval;
use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::run_sweep;

const Z999: f64 = 3.290_526_731_491_926;

/// bf16 and bf16+row-shift at 8K, k 512, under the strength unit.
fn cells(strength: f64) -> Vec<CellResult> {
    let toml = format!(
        "[needle]\nunit = \"strength\"\nstrength = {strength:?}\n\
         [sweep]\ncontexts = \"8K\"\ntopk = \"512\"\nprecisions = \"bf16,bf16+row-shift\"\ntrials = 200\nseed = 11\n"
    );
    let params = parse_scenario_toml(&toml).unwrap_or_else(|e| panic!("{e}"));
    let s = config::check(config::resolve(params).unwrap()).unwrap();
    run_sweep(&s, &|| {}).unwrap().cells
}

fn interval(c: &CellResult) -> (f64, f64) {
    wilson_interval(c.survived, c.trials, Z999)
}

#[test]
fn row_shift_ranks_the_needle_as_a_haystack_row() {
    // Strength 0: the needle row is a haystack row. The other query is
    // drawn as the model draws queries, so it keeps that row as often as
    // the trial's own query does.
    let plain = cells(0.0);
    let ((lo_a, hi_a), (lo_b, hi_b)) = (interval(&plain[0]), interval(&plain[1]));
    assert!(lo_a <= hi_b && lo_b <= hi_a, "strength 0: {} vs {}", plain[0].recall, plain[1].recall);
    // A strong needle: the healthy query finds it; the other query does not
    // look for it, so its recall stays far below.
    let strong = cells(30.0);
    let (healthy_low, _) = interval(&strong[0]);
    let (_, shifted_high) = interval(&strong[1]);
    assert!(healthy_low > 0.9, "healthy {}", strong[0].recall);
    assert!(shifted_high < healthy_low - 0.3, "row-shift {} vs healthy {}", strong[1].recall, strong[0].recall);
}

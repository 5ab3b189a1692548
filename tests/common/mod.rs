//! Fixtures the integration tests share: scenarios from TOML, sweeps run
//! through the library, cells picked out of them, and the binary.
//! Each test binary uses a part of this module.
#![allow(dead_code)]

pub mod capture_writer;

use dsa_recall::config::{self, params::parse_scenario_toml, Scenario};
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::{run_sweep, SweepOutcome};

/// The null model of docs/MODEL.md: no RoPE, no pooling and exchangeable
/// Gaussian rows (no [haystack] structure). The presets switch physics on,
/// so tests of the null model's own properties say so.
pub const NULL_MODEL: &str = "[physics]\nrope = \"off\"\npooling = \"off\"\n\
    [haystack]\ncontent_rank = 0\nkey_content_share = 0.0\nquery_content_share = 0.0\nrelevance_scale = 0.0\n";

/// A checked scenario from scenario-file TOML; a bad one panics with its error.
pub fn scenario(toml: &str) -> Scenario {
    let params = parse_scenario_toml(toml).unwrap_or_else(|e| panic!("{e}"));
    config::check(config::resolve(params).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"))
}

/// The sweep of a scenario, run through the library.
pub fn sweep(s: &Scenario) -> SweepOutcome {
    run_sweep(s, &|| {}).unwrap_or_else(|e| panic!("{e}"))
}

/// The sweep of scenario-file TOML.
pub fn sweep_toml(toml: &str) -> SweepOutcome {
    sweep(&scenario(toml))
}

/// The cell of a sweep at (context, depth, k, precision).
pub fn cell<'a>(o: &'a SweepOutcome, context: u64, depth: f64, k: u64, precision: &str) -> &'a CellResult {
    o.cells
        .iter()
        .find(|c| c.context_tokens == context && c.depth_percent == depth && c.topk == k && c.precision == precision)
        .unwrap_or_else(|| panic!("no cell {context} tokens, depth {depth}, k {k}, {precision}"))
}

/// The dsa-recall binary, ready for arguments (assert_cmd's command:
/// `.assert()` as well as `.output()`).
pub fn bin() -> assert_cmd::Command {
    assert_cmd::Command::new(assert_cmd::cargo::cargo_bin!("dsa-recall"))
}

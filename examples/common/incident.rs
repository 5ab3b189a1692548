//! What the four incident programs share: one scenario swept under both
//! fault spreads (docs/MODEL.md, "Faults across layers"), with the checks
//! that make the comparison valid.

// Each program uses part of this module.
#![allow(dead_code)]

use dsa_recall::config::{self, params::parse_scenario_toml, Scenario};
use dsa_recall::model::stack::FaultSpread;
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::{run_sweep, SweepOutcome};
use dsa_recall::score::hypothesis::variant_spread;

/// The scenario `toml(spread)` swept with `[stack] fault_layers` at
/// "catalogue" (every hypothesis the programs use is shared: checked) and
/// at "independent": the first scenario, its outcome, and the second
/// sweep's cells. Per-layer recall must not depend on the spread: checked
/// cell for cell.
pub fn sweep_both_spreads(
    precisions: &[&str],
    toml: impl Fn(&str) -> String,
) -> Result<(Scenario, SweepOutcome, Vec<CellResult>), Box<dyn std::error::Error>> {
    for p in precisions {
        if let Some(spread) = variant_spread(p) {
            assert_eq!(spread, FaultSpread::Shared, "{p}: the catalogue no longer marks it shared; update docs/FINDINGS.md");
        }
    }
    let s = config::check(config::resolve(parse_scenario_toml(&toml("catalogue"))?)?)?;
    let outcome = run_sweep(&s, &|| {})?;
    let s_ind = config::check(config::resolve(parse_scenario_toml(&toml("independent"))?)?)?;
    let independent = run_sweep(&s_ind, &|| {})?.cells;
    check_same_per_layer(&outcome.cells, &independent)?;
    println!("per-layer recall identical in the shared and the independent sweep ({} cells)", independent.len());
    Ok((s, outcome, independent))
}

/// The per-layer outputs of two sweeps that differ only in how faults spread
/// over the layers must agree cell for cell.
fn check_same_per_layer(a: &[CellResult], b: &[CellResult]) -> Result<(), String> {
    let key = |c: &CellResult| {
        (c.precision.clone(), c.context_tokens, c.depth_percent.to_bits(), c.needle_offset, c.topk, c.survived, c.recall.to_bits())
    };
    if a.len() != b.len() {
        return Err(format!("{} cells against {}", a.len(), b.len()));
    }
    match a.iter().zip(b).find(|(x, y)| key(x) != key(y)) {
        Some((x, y)) => Err(format!("per-layer recall differs between the spreads: {:?} vs {:?}", key(x), key(y))),
        None => Ok(()),
    }
}

/// Which recall a verdict reads: per-layer selection recall, or whole-model
/// recall with faults shared by every layer or striking each afresh.
#[derive(Clone, Copy, PartialEq)]
pub enum Reading {
    Layer,
    Shared,
    Independent,
}

pub const READINGS: [Reading; 3] = [Reading::Layer, Reading::Shared, Reading::Independent];

impl Reading {
    pub fn label(self) -> &'static str {
        match self {
            Reading::Layer => "per-layer",
            Reading::Shared => "model, shared",
            Reading::Independent => "model, independent",
        }
    }

    /// (recall, Wilson 95 % low, high) of a cell.
    pub fn of(self, c: &CellResult) -> (f64, f64, f64) {
        match self {
            Reading::Layer => (c.recall, c.ci_low, c.ci_high),
            _ => (c.model_recall.unwrap_or(f64::NAN), c.model_ci_low.unwrap_or(f64::NAN), c.model_ci_high.unwrap_or(f64::NAN)),
        }
    }
}

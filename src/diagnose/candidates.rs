//! The candidates a diagnosis ranks, how observed counts are read, the
//! needle multiples it tries, and the thresholds its verdict uses.

use super::knob;
use crate::config::ScenarioParams;
use crate::error::ConfigError;
use crate::score::hypothesis::{after_selection, tie_makers, Hypothesis, CATALOGUE};
use serde::Serialize;

/// The name of the no-fault candidate.
pub const HEALTHY: &str = "healthy";

/// log10 of the Bayes factor below which a candidate is said to be ruled
/// out against another (10:1); within it, the data cannot tell them apart.
pub const DECISIVE_LOG10: f64 = 1.0;

/// The needle's difficulty is not known: each candidate's likelihood is
/// averaged over multiples of the scenario's needle knob (a uniform prior
/// on them; a factor 2 apart, log-uniform on the multiple), each simulated
/// on the same seed (docs/OBSERVATIONS.md, "What diagnose does not
/// know"). Under the strength unit, these multiples of the strength.
pub const NUISANCE_MULTIPLIERS: [f64; 3] = [0.5, 1.0, 2.0];

/// Under the quantile needle, these multiples of the median exceedance:
/// from 2× easier than the scenario's needle to 128× rarer, so that a
/// deployment's own needle test (paraphrased, multi-key, another haystack)
/// is inside the profile; `hard` is × 4 of `niah`. A factor 2 between
/// neighbours, as the recall curves move about one context doubling per
/// factor 2 or less.
pub const EXCEEDANCE_MULTIPLIERS: [f64; 9] = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// The largest median exceedance profiled: beyond it a "needle" outranks
/// too few haystack rows to be one.
const MAX_PROFILED_EXCEEDANCE: f64 = 0.5;

/// The multiples diagnose profiles the needle over by default: the
/// quantile needle's [`EXCEEDANCE_MULTIPLIERS`] that keep its median
/// exceedance at most 0.5, else [`NUISANCE_MULTIPLIERS`].
pub fn default_needle_multipliers(params: &ScenarioParams) -> Vec<f64> {
    let field = needle_knob(params);
    match knob::current_value(params, field) {
        Some(u) if field == "needle.exceedance" => {
            EXCEEDANCE_MULTIPLIERS.iter().copied().filter(|&m| m == 1.0 || u * m <= MAX_PROFILED_EXCEEDANCE).collect()
        }
        _ => NUISANCE_MULTIPLIERS.to_vec(),
    }
}

/// The next experiment is sought among candidates with at least this
/// posterior, the best `LIVE_MAX` of them (at least the best two).
pub const LIVE_POSTERIOR: f64 = 1e-3;

pub const LIVE_MAX: usize = 8;

/// Which simulated recall a row without a `layer` is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reading {
    /// Whole-model recall (`model_recall`): what a needle test measures.
    Model,
    /// Per-layer selection recall (`recall`).
    Layer,
}

impl Reading {
    pub fn parse(text: &str) -> Result<Reading, ConfigError> {
        match text {
            "model" => Ok(Reading::Model),
            "layer" => Ok(Reading::Layer),
            _ => Err(ConfigError::new("--recall", format!("{text:?}"), "model (whole-model recall, the default) or layer")),
        }
    }
}

/// The candidate hypotheses `list` names: a comma-separated list of `all`
/// (every catalogue entry without a parameter, and each tie maker with
/// `ties-lowest` and `ties-highest`), `H` or `H1+H2` (parametrized ones with
/// their value: `topk=1024`), so `all,topk=1024` is the catalogue and one
/// more. "healthy" is always a candidate, and at least one other is needed.
pub fn candidates(list: &str) -> Result<Vec<String>, ConfigError> {
    let mut out = vec![HEALTHY.to_string()];
    if list.split(',').any(|i| i.trim() == "all") {
        // Losses after the selection are tried only when named: a fitted
        // curve of loss against length outranks sharp simulated faults on
        // few prompts per row (docs/OBSERVATIONS.md, "Not a selection fault").
        for h in CATALOGUE.iter().filter(|h| !h.name.contains('=') && !after_selection(h.name)) {
            out.push(h.name.to_string());
        }
        for t in tie_makers().map(|h| h.name) {
            out.push(format!("{t}+ties-lowest"));
            out.push(format!("{t}+ties-highest"));
        }
    }
    for item in list.split(',').map(str::trim) {
        if item.is_empty() || item == HEALTHY || item == "all" {
            continue;
        }
        for part in item.split('+') {
            Hypothesis::parse(part.trim()).map_err(|why| ConfigError::new("--hypotheses", format!("{item:?}"), why))?;
            if item.contains('+') && after_selection(part) {
                return Err(ConfigError::new(
                    "--hypotheses",
                    format!("{item:?}"),
                    format!("{} alone: a loss after the selection is not composed with another hypothesis", part.trim()),
                ));
            }
        }
        if !out.iter().any(|o| o == item) {
            out.push(item.to_string());
        }
    }
    if out.len() == 1 {
        // Healthy alone would win with posterior 1 whatever the data say.
        return Err(ConfigError::new(
            "--hypotheses",
            format!("{list:?}"),
            "at least one hypothesis besides healthy: all, or a comma-separated list such as slot-shift,no-hadamard",
        ));
    }
    Ok(out)
}

/// The bounded address-space hypotheses (`visible-cap=P`, …) that `all`
/// profiles over a few bounds taken from the observed contexts: their
/// onset is an absolute position the file does not state.
pub const BOUNDED: [&str; 5] = ["visible-cap", "visible-cap-zero", "visible-cap-wrap", "block0-repeat", "workspace-clamp"];

/// Most bounds tried per bounded hypothesis (each is one more variant per
/// configuration to judge).
pub const BOUNDS_MAX: usize = 3;

/// The bounds (tokens) tried for the observed `contexts`: each observed
/// context but the longest (a bound there leaves prompts up to it healthy
/// and acts on every longer one), at most [`BOUNDS_MAX`], spread evenly
/// over them.
pub fn address_bounds(contexts: &[u64]) -> Vec<u64> {
    let mut c: Vec<u64> = contexts.to_vec();
    c.sort_unstable();
    c.dedup();
    c.pop();
    if c.len() <= BOUNDS_MAX {
        return c;
    }
    (0..BOUNDS_MAX).map(|i| c[(i * (c.len() - 1)).div_ceil(BOUNDS_MAX - 1)]).collect()
}

/// `hypotheses` with, when `list` names `all`, each bounded address-space
/// hypothesis at every bound the rows state (column `address_bound`), or
/// when none does at every bound of [`address_bounds`] over the contexts
/// of `rows` (none when every row has one context).
pub fn with_address_bounds(list: &str, mut hypotheses: Vec<String>, rows: &[super::observations::Observation]) -> Vec<String> {
    if !list.split(',').any(|i| i.trim() == "all") {
        return hypotheses;
    }
    let mut stated: Vec<u64> = rows.iter().filter_map(|r| r.address_bound).collect();
    stated.sort_unstable();
    stated.dedup();
    let bounds = if stated.is_empty() { address_bounds(&rows.iter().map(|r| r.context_tokens).collect::<Vec<_>>()) } else { stated };
    for name in BOUNDED {
        for &bound in &bounds {
            let h = format!("{name}={bound}");
            if !hypotheses.contains(&h) {
                hypotheses.push(h);
            }
        }
    }
    hypotheses
}

/// `--needle-multipliers`: positive numbers, comma-separated, `off` (the
/// scenario's needle, as known: `[1]`) or `auto` (the scenario's
/// [`default_needle_multipliers`]).
pub fn parse_needle_multipliers(text: &str, params: &ScenarioParams) -> Result<Vec<f64>, ConfigError> {
    let field = "--needle-multipliers";
    match text.trim() {
        "off" => return Ok(vec![1.0]),
        "auto" => return Ok(default_needle_multipliers(params)),
        _ => {}
    }
    let mut out: Vec<f64> = Vec::new();
    for item in text.split(',').map(str::trim) {
        match item.parse::<f64>() {
            Ok(m) if m.is_finite() && m > 0.0 && m <= 1e6 => {
                if !out.contains(&m) {
                    out.push(m);
                }
            }
            _ => {
                return Err(ConfigError::new(
                    field,
                    format!("{item:?}"),
                    "positive numbers up to 1e6, comma-separated (e.g. 0.5,1,2), auto or off",
                ))
            }
        }
    }
    Ok(out)
}

/// The scenario's needle knob: the median exceedance under the quantile
/// needle, the strength otherwise.
pub fn needle_knob(params: &ScenarioParams) -> &'static str {
    knob::default_field(params)
}

/// `params` with the needle knob at `multiplier` times its value.
pub fn with_needle_multiple(params: &ScenarioParams, multiplier: f64) -> Result<ScenarioParams, ConfigError> {
    if multiplier == 1.0 {
        return Ok(params.clone());
    }
    let field = needle_knob(params);
    let value = knob::current_value(params, field)
        .ok_or_else(|| ConfigError::new("--needle-multipliers", field, "a scenario whose needle knob is a number"))?;
    knob::with_value(params, field, value * multiplier)
}

/// Said once when rows carry `query_position` (docs/OBSERVATIONS.md).
pub const QUERY_POSITION_NOTE: &str = "query_position is recorded but not used: the simulator scores the decoding query at the end of the context (with its RoPE position there), so a row is compared with the recall of that query";

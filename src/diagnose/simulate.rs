//! Simulating the observed configurations under each hypothesis: the
//! sweeps a diagnosis runs and the recalls it reads from them.

use super::candidates::*;
use super::observations::Observation;
use crate::base::observe::Observer;
use crate::config::{self, ListSpec, Scenario, ScenarioParams};
use crate::error::{ConfigError, Error};
use crate::run::cell::CellResult;
use crate::run::sweep::run_sweep_sharing_depths;
use serde::Serialize;
use std::collections::BTreeMap;

/// A simulated cell's recall, and the trials behind it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Simulated {
    pub layer: f64,
    pub model: Option<f64>,
    pub trials: u64,
}

impl Simulated {
    /// The recall an observation row is compared with: per layer for a row
    /// with a `layer` (a capture) or under `Reading::Layer`, else whole-model.
    pub fn recall_for(&self, layer: Option<u64>, reading: Reading) -> Result<f64, Error> {
        match (layer, reading) {
            (Some(_), _) | (None, Reading::Layer) => Ok(self.layer),
            (None, Reading::Model) => self.model.ok_or_else(|| {
                Error::Config(ConfigError::new(
                    "--recall",
                    "model",
                    "whole-model recall needs a [stack] in the scenario; give one or use --recall layer",
                ))
            }),
        }
    }
}

type CellKey = (u64, u64, u64, String);

/// One needle multiple's simulated cells, by (prefill chunk, cell).
pub(super) type ChunkSims = BTreeMap<(u64, CellKey), Simulated>;

pub(super) fn key(context: u64, depth: f64, k: u64, variant: &str) -> CellKey {
    (context, depth.to_bits(), k, variant.to_string())
}

/// The base scenario with the sweep lists replaced, validated.
pub(super) fn scenario_with(
    params: &ScenarioParams,
    contexts: &[u64],
    depths: &[f64],
    topks: &[u64],
    variants: &[String],
) -> Result<Scenario, ConfigError> {
    let mut p = params.clone();
    let list = |v: Vec<String>| Some(ListSpec::Text(v.join(",")));
    p.sweep.contexts = list(contexts.iter().map(u64::to_string).collect());
    p.sweep.depths = list(depths.iter().map(|d| format!("{d}")).collect());
    p.sweep.topk = list(topks.iter().map(u64::to_string).collect());
    p.sweep.precisions = list(variants.to_vec());
    p.sweep.length_mods = None;
    // A diagnosis reads recall alone: the needle margin's search (some 25
    // rescorings of the needle's rows per cell and trial, about 4/5 of the
    // CPU time of a diagnosis) changes no recall, so it is not run.
    p.estimator.margin = Some(false);
    // Observed rows may select every row (k at or above the candidate rows).
    let mut s = config::check_dense_topk(p)?;
    // Nor does it read the rank margins (a partial sort of every cell's
    // competitors per variant, 7 % of a diagnosis's CPU).
    s.estimator.rank_margins = false;
    Ok(s)
}

/// Whether the scenario `params` can simulate variant `name`, or why not.
pub fn variant_ok(params: &ScenarioParams, name: &str) -> Result<(), String> {
    let mut p = params.clone();
    // Beside its base, as every simulation runs it (healthy is always a
    // candidate): a length-gated variant needs it.
    let base = crate::score::variant::base_of(name);
    p.sweep.precisions = Some(ListSpec::Text(format!("{base},{name}")));
    config::check(p).map(|_| ()).map_err(|e| e.allowed)
}

/// How the depths of a simulation draw their trials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepthTrials {
    /// Each depth on trials of its own, as a sweep runs it: the simulation
    /// error of one depth's recall is independent of another's, so a sum of
    /// log-likelihoods over rows at several depths errs least. What the
    /// ranking and calibrate use.
    Own,
    /// Every depth on the same trials, one haystack scored for all
    /// ([`run_sweep_sharing_depths`]): common random numbers, so the
    /// *differences* between depths are sharper and the cost is about one
    /// depth's. What the next experiment uses, which compares cells.
    Shared,
}

/// One sweep's depths, contexts and k.
type SweepLists = (Vec<f64>, Vec<u64>, Vec<u64>);

/// Simulates every (context, depth, k) of `cells` under every variant of
/// `variants` and returns the recalls by cell (mean over the scenario's
/// needle offsets when it has several). With [`DepthTrials::Own`], one
/// sweep per depth over that depth's contexts and k; with
/// [`DepthTrials::Shared`], one sweep over every pairing of the cells'
/// contexts, depths and k.
pub fn simulate(
    params: &ScenarioParams,
    cells: &[(u64, f64, u64)],
    variants: &[String],
    depth_trials: DepthTrials,
    observer: &dyn Observer,
) -> Result<BTreeMap<CellKey, Simulated>, Error> {
    // A sweep per depth, or one for all.
    let mut groups: BTreeMap<u64, SweepLists> = BTreeMap::new();
    for &(c, d, k) in cells {
        let group = if depth_trials == DepthTrials::Own { d.to_bits() } else { 0 };
        let e = groups.entry(group).or_default();
        if !e.0.iter().any(|x| x.to_bits() == d.to_bits()) {
            e.0.push(d);
        }
        e.1.push(c);
        e.2.push(k);
    }
    let mut out = BTreeMap::new();
    for (_, (depths, mut contexts, mut topks)) in groups {
        contexts.sort_unstable();
        contexts.dedup();
        topks.sort_unstable();
        topks.dedup();
        let s = scenario_with(params, &contexts, &depths, &topks, variants)?;
        // One depth alone is the same group as a sweep runs.
        let outcome = run_sweep_sharing_depths(&s, observer)?;
        let mut sums: BTreeMap<CellKey, Vec<&CellResult>> = BTreeMap::new();
        for c in &outcome.cells {
            sums.entry(key(c.context_tokens, c.depth_percent, c.topk, &c.precision)).or_default().push(c);
        }
        for (k, cs) in sums {
            let n = cs.len() as f64;
            let layer = cs.iter().map(|c| c.recall).sum::<f64>() / n;
            let model = cs.iter().map(|c| c.model_recall).sum::<Option<f64>>().map(|m| m / n);
            let trials = cs.iter().map(|c| c.trials).sum();
            out.insert(k, Simulated { layer, model, trials });
        }
    }
    Ok(out)
}

/// The variant that simulates configuration `config` under hypothesis `h`:
/// `config+h`, or `config` itself where the hypothesis cannot act on it
/// (`bf16` has no key scales to lose); None for "healthy".
pub(super) fn variant_under(params: &ScenarioParams, config: &str, h: &str, ok: &mut BTreeMap<String, bool>) -> Option<String> {
    if h == HEALTHY {
        return None;
    }
    let name = format!("{config}+{h}");
    let applies = *ok.entry(name.clone()).or_insert_with(|| variant_ok(params, &name).is_ok());
    applies.then_some(name)
}

/// Every variant in the cells of each prefill chunk of `by_chunk`, under
/// each needle multiple: per multiple, the recalls by (chunk, cell).
pub(super) fn simulate_multiples(
    params: &ScenarioParams,
    by_chunk: &BTreeMap<u64, Vec<(u64, f64, u64)>>,
    variants: &[String],
    needle_multipliers: &[f64],
    observer: &dyn Observer,
) -> Result<Vec<ChunkSims>, Error> {
    let mut sims: Vec<ChunkSims> = vec![BTreeMap::new(); needle_multipliers.len()];
    match in_trial_multiples(params, variants, needle_multipliers) {
        // Every multiple in the same trials (`needle=M`): the haystacks are
        // scored once, the same bits as one simulation per multiple.
        Some(expanded) => {
            for (&chunk, cells) in by_chunk {
                let chunked = with_prefill_chunk(params, chunk);
                for ((context, depth, k, name), s) in simulate(&chunked, cells, &expanded.names, DepthTrials::Own, observer)? {
                    // (A cell under another name would be missing below: Prepared::recall_at says so.)
                    if let Some((j, variant)) = expanded.of.get(&name) {
                        sims[*j].insert((chunk, (context, depth, k, variant.clone())), s);
                    }
                }
            }
        }
        None => {
            for (sim, &m) in sims.iter_mut().zip(needle_multipliers) {
                for (&chunk, cells) in by_chunk {
                    let chunked = with_prefill_chunk(&with_needle_multiple(params, m)?, chunk);
                    sim.extend(simulate(&chunked, cells, variants, DepthTrials::Own, observer)?.into_iter().map(|(k, v)| ((chunk, k), v)));
                }
            }
        }
    }
    Ok(sims)
}

/// The variants of a diagnosis with every needle multiple as `needle=M`.
struct Expanded {
    /// The simulated names, multiple by multiple in the variants' order …
    names: Vec<String>,
    /// … and each one's (multiple's index, the variant without it).
    of: BTreeMap<String, (usize, String)>,
}

/// `variants` under every multiple of `multiples` in one simulation, when
/// the scenario can (the quantile needle and the full estimator: see
/// `needle=M`); None otherwise (one simulation per multiple).
fn in_trial_multiples(params: &ScenarioParams, variants: &[String], multiples: &[f64]) -> Option<Expanded> {
    if multiples.len() < 2 {
        return None;
    }
    let (mut names, mut of) = (Vec::new(), BTreeMap::new());
    for (j, &m) in multiples.iter().enumerate() {
        for v in variants {
            let name = if m == 1.0 { v.clone() } else { format!("{v}+needle={m}") };
            names.push(name.clone());
            of.insert(name, (j, v.clone()));
        }
    }
    variant_ok(params, &names.join(",")).is_ok().then_some(Expanded { names, of })
}

/// `params` with the prefill chunk set to `chunk` (0 leaves it out: one chunk).
fn with_prefill_chunk(params: &ScenarioParams, chunk: u64) -> ScenarioParams {
    let mut p = params.clone();
    p.geometry.prefill_chunk = (chunk > 0).then_some(chunk);
    p
}

/// The params a candidate is checked against: with the rows' prefill chunk
/// when the scenario has none, so that a chunk fault applies where the
/// observation file gives the chunk (a row with neither is refused by
/// [`prepare`] when a chunk fault is a candidate).
pub(super) fn params_for_rows(params: &ScenarioParams, rows: &[Observation]) -> ScenarioParams {
    match (params.geometry.prefill_chunk.filter(|&c| c > 0), rows.iter().find_map(|r| r.prefill_chunk.filter(|&c| c > 0))) {
        (None, Some(c)) => with_prefill_chunk(params, c),
        _ => params.clone(),
    }
}

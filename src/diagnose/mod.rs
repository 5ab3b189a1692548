//! Diagnose an incident: for every candidate hypothesis of the catalogue,
//! the likelihood of the observed counts under the recall the simulator
//! gives each observed configuration, the posterior ranking, and the next
//! experiment that best tells the leaders apart. Definitions and the format
//! of the observation file: docs/OBSERVATIONS.md.

pub mod fit;
pub mod knob;
mod next;
pub mod observations;
mod rank;
pub mod separation;
mod simulate;
mod text;
mod verdict;

use crate::base::observe::Observer;
use crate::config::{self, ListSpec, Scenario, ScenarioParams};
use crate::error::{ConfigError, Error};
use crate::run::cell::CellResult;
use crate::run::sweep::run_sweep_sharing_depths;
use crate::score::hypothesis::{candidate_class, candidate_summary, tie_makers, FaultClass, Hypothesis, CATALOGUE};
use observations::Observation;
pub use separation::clamped;
use serde::Serialize;
use std::collections::BTreeMap;

use next::next_experiment;
pub use next::{draw_counts, information, prompts_for_odds, recovered, NextExperiment, NEAR_END_TOKENS};
pub use rank::{
    binomial_two_sided_p, class_standings, log_binomial, rank, unexplained_rows, ClassStanding, Ranked, Unexplained, UNEXPLAINED_P,
};
use simulate::{key, params_for_rows, scenario_with, simulate_multiples, variant_under, ChunkSims};
pub use simulate::{simulate, variant_ok, DepthTrials, Simulated};
pub use text::{format_table, QUERY_POSITION_NOTE};
pub use verdict::{open_pair, verdict, Verdict};

/// The name of the no-fault candidate.
pub const HEALTHY: &str = "healthy";

/// log10 of the Bayes factor below which a candidate is said to be ruled
/// out against another (10:1); within it, the data cannot tell them apart.
pub const DECISIVE_LOG10: f64 = 1.0;

/// The needle's difficulty is not known: each candidate's likelihood is
/// profiled over these multiples of the scenario's needle knob (its
/// exceedance under the quantile needle, its strength otherwise), each
/// simulated on the same seed (docs/OBSERVATIONS.md, "What diagnose does
/// not know").
pub const NUISANCE_MULTIPLIERS: [f64; 3] = [0.5, 1.0, 2.0];

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
        for h in CATALOGUE.iter().filter(|h| !h.name.contains('=')) {
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

/// The full answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diagnosis {
    pub observations: String,
    pub reading: Reading,
    pub trials: u64,
    pub ranking: Vec<Ranked>,
    /// The classes, best first.
    pub classes: Vec<ClassStanding>,
    pub verdict: Verdict,
    /// Rows the best candidate cannot explain (two-sided p < 0.01): where
    /// the catalogue may lack the fault, or the scenario the deployment.
    pub unexplained: Vec<Unexplained>,
    /// The needle knob profiled over, and its multiples.
    pub needle_knob: String,
    pub needle_multipliers: Vec<f64>,
    /// Candidates that change no observed configuration (the same as healthy): left out.
    pub not_applicable: Vec<String>,
    pub next: Option<NextExperiment>,
    /// The best cell for a per-layer capture of the indexer's top-k instead
    /// (one layer's selection per prompt, `dsa-recall observe`), when it
    /// carries more information per prompt than the best needle test.
    pub next_capture: Option<NextExperiment>,
    /// The two candidates the verdict leaves open, compared row by row
    /// (None when it leaves none open).
    pub separation: Option<separation::Separation>,
    /// What the reader should know about the rows (e.g. an ignored column); left out of JSON when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Settings of one diagnosis.
pub struct Options<'a> {
    pub hypotheses: Vec<String>,
    pub reading: Reading,
    /// Also pick the next experiment (one more simulation over a small grid).
    pub next: bool,
    /// Multiples of the needle knob to profile each candidate's likelihood
    /// over ([`NUISANCE_MULTIPLIERS`]; `[1.0]`: the scenario's needle, known).
    pub needle_multipliers: Vec<f64>,
    pub observer: &'a dyn Observer,
}

/// The candidates' simulated recalls in the observed cells: what a
/// diagnosis computes before it looks at the counts. [`Prepared::rank`]
/// scores any counts in the same cells (the recovery study, item 5(b) of
/// issue 18, draws many).
pub struct Prepared {
    /// Per candidate, the variant it simulates for each configuration.
    pub plan: Vec<(String, BTreeMap<String, String>)>,
    /// Candidates that change no observed configuration.
    pub not_applicable: Vec<String>,
    /// The needle knob and its multiples (in one simulation where `needle=M` serves).
    pub needle_knob: String,
    pub needle_multipliers: Vec<f64>,
    /// Per needle multiple, by (prefill chunk, cell).
    sims: Vec<ChunkSims>,
    /// The scenario's prefill chunk (0: one chunk), for rows without their own.
    scenario_chunk: u64,
    reading: Reading,
    path: String,
}

/// `--needle-multipliers`: positive numbers, comma-separated, or `off` (the
/// scenario's needle, as known: `[1]`).
pub fn parse_needle_multipliers(text: &str) -> Result<Vec<f64>, ConfigError> {
    let field = "--needle-multipliers";
    if text.trim() == "off" {
        return Ok(vec![1.0]);
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
                    "positive numbers up to 1e6, comma-separated (e.g. 0.5,1,2), or off",
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

/// Simulates every candidate of `opts.hypotheses` in the cells of `rows`
/// (file `path`) with scenario `params` (resolved, unchecked).
pub fn prepare(params: &ScenarioParams, path: &str, rows: &[Observation], opts: &Options<'_>) -> Result<Prepared, Error> {
    let mut ok = BTreeMap::new();
    let checked = params_for_rows(params, rows);
    // A chunk fault needs every row's chunk once any row has one.
    if checked.geometry.prefill_chunk.is_some() {
        let chunk_fault = opts.hypotheses.iter().find(|h| h.split('+').any(|p| p.trim() == "chunk-local"));
        let lacking = rows.iter().find(|r| r.prefill_chunk.or(params.geometry.prefill_chunk).is_none_or(|c| c == 0));
        if let (Some(h), Some(r)) = (chunk_fault, lacking) {
            return Err(Error::Input {
                location: format!("{path}:{}", r.line),
                message: format!(
                    "prefill_chunk is missing: candidate {h} needs every row's prefill chunk (a prefill_chunk column, or --prefill-chunk N for rows without one)"
                ),
            });
        }
    }
    let params = &checked;
    let configs: Vec<String> = {
        let mut c: Vec<String> = rows.iter().map(|r| r.config.clone()).collect();
        c.sort();
        c.dedup();
        c
    };
    // Variant each candidate simulates for each configuration.
    let plan: Vec<(String, BTreeMap<String, String>)> = opts
        .hypotheses
        .iter()
        .map(|h| {
            let m = configs.iter().map(|c| (c.clone(), variant_under(params, c, h, &mut ok).unwrap_or_else(|| c.clone()))).collect();
            (h.clone(), m)
        })
        .collect();
    let (plan, not_applicable): (Vec<_>, Vec<_>) = plan.into_iter().partition(|(h, m)| h == HEALTHY || m.iter().any(|(c, v)| c != v));
    let not_applicable: Vec<String> = not_applicable.into_iter().map(|(h, _)| h).collect();
    let mut variants: Vec<String> = configs.clone();
    for (_, m) in &plan {
        for v in m.values() {
            if !variants.contains(v) {
                variants.push(v.clone());
            }
        }
    }
    // Rows are simulated with their own prefill chunk (the column), else the scenario's.
    let scenario_chunk = params.geometry.prefill_chunk.unwrap_or(0);
    let mut by_chunk: BTreeMap<u64, Vec<(u64, f64, u64)>> = BTreeMap::new();
    for r in rows {
        by_chunk.entry(r.prefill_chunk.unwrap_or(scenario_chunk)).or_default().push((r.context_tokens, r.depth_percent, r.topk));
    }
    let needle_multipliers = if opts.needle_multipliers.is_empty() { vec![1.0] } else { opts.needle_multipliers.clone() };
    let sims = simulate_multiples(params, &by_chunk, &variants, &needle_multipliers, opts.observer)?;
    let needle_knob = needle_knob(params).to_string();
    Ok(Prepared {
        plan,
        not_applicable,
        needle_knob,
        needle_multipliers,
        sims,
        scenario_chunk,
        reading: opts.reading,
        path: path.to_string(),
    })
}

impl Prepared {
    /// The index of multiple 1 (the scenario's own needle), else the middle one.
    pub fn central(&self) -> usize {
        self.needle_multipliers.iter().position(|&m| m == 1.0).unwrap_or(self.needle_multipliers.len() / 2)
    }

    /// Candidate `h`'s simulated recall (unclamped) and trials in row `r`'s
    /// cell, with the scenario's own needle.
    pub fn recall(&self, h: &str, r: &Observation) -> Result<(f64, u64), Error> {
        self.recall_at(h, r, self.central())
    }

    /// As [`Self::recall`], with the needle knob at multiple `j` of the grid.
    pub fn recall_at(&self, h: &str, r: &Observation, j: usize) -> Result<(f64, u64), Error> {
        let missing = |what: String| Error::Input { location: format!("{}:{}", self.path, r.line), message: what };
        let m =
            self.plan.iter().find(|(n, _)| n == h).map(|(_, m)| m).ok_or_else(|| missing(format!("{h} is not a prepared candidate")))?;
        let v = m.get(&r.config).ok_or_else(|| missing(format!("no variant of {h} for {}", r.config)))?;
        let s = self
            .sims
            .get(j)
            .and_then(|sim| sim.get(&(r.prefill_chunk.unwrap_or(self.scenario_chunk), key(r.context_tokens, r.depth_percent, r.topk, v))))
            .ok_or_else(|| missing(format!("no simulated cell for {v} here")))?;
        Ok((s.recall_for(r.layer, self.reading)?, s.trials))
    }

    /// The ranking of the prepared candidates on the counts of `rows` (in
    /// the prepared cells), and the simulated trials per cell. A
    /// candidate's likelihood is its profile likelihood over the needle
    /// multiples: the counts' likelihood at the multiple that fits it best.
    pub fn rank(&self, rows: &[Observation]) -> Result<(Vec<Ranked>, u64), Error> {
        let mut ranked = Vec::new();
        let mut trials = 0;
        for (h, m) in &self.plan {
            let changed = rows.iter().filter(|r| m.get(&r.config).is_some_and(|v| *v != r.config)).count();
            let mut lls = Vec::with_capacity(self.needle_multipliers.len());
            let mut recalls_at = Vec::with_capacity(self.needle_multipliers.len());
            for j in 0..self.needle_multipliers.len() {
                let mut ll = 0.0;
                let mut recalls = Vec::new();
                for r in rows {
                    let (p, n) = self.recall_at(h, r, j)?;
                    trials = n;
                    ll += log_binomial(r.found, r.total, clamped(p, n));
                    recalls.push(p);
                }
                lls.push(ll);
                recalls_at.push(recalls);
            }
            // On a tie the scenario's own needle is reported: the counts do
            // not prefer another multiple.
            let central = self.central();
            let top = (0..lls.len()).max_by(|&a, &b| lls[a].total_cmp(&lls[b]).then(b.cmp(&a))).unwrap_or(0);
            let best = if lls.get(central).is_some_and(|&c| c >= lls[top]) { central } else { top };
            let needle_gain_log10 = lls.get(central).map_or(0.0, |&c| (lls[best] - c) / std::f64::consts::LN_10);
            ranked.push(Ranked {
                hypothesis: h.clone(),
                log_likelihood: lls[best],
                posterior: 0.0,
                log10_bayes_factor: 0.0,
                rows_changed: changed,
                recalls: recalls_at.swap_remove(best),
                class: candidate_class(h),
                needle_multiplier: self.needle_multipliers[best],
                needle_gain_log10,
            });
        }
        Ok((rank(ranked), trials))
    }
}

impl Prepared {
    /// The verdict on the counts of `rows`: [`Self::rank`], the classes and
    /// [`verdict`] (without the unexplained rows).
    pub fn verdict(&self, rows: &[Observation]) -> Result<Verdict, Error> {
        let (ranking, _) = self.rank(rows)?;
        Ok(verdict(&ranking, &class_standings(&ranking)))
    }
}

/// Ranks `opts.hypotheses` on the observations, simulated with scenario
/// `params` (resolved, unchecked).
pub fn diagnose(params: &ScenarioParams, obs: &observations::Observations, opts: &Options<'_>) -> Result<Diagnosis, Error> {
    let rows = &obs.rows;
    let prepared = prepare(params, &obs.path, rows, opts)?;
    let (ranking, trials) = prepared.rank(rows)?;
    // The next experiment is simulated with the best candidate's needle.
    let next_params = with_needle_multiple(&params_for_rows(params, rows), ranking.first().map_or(1.0, |r| r.needle_multiplier))?;
    let (next, next_capture) =
        if opts.next && ranking.len() >= 2 { next_experiment(&next_params, rows, &prepared.plan, &ranking, opts)? } else { (None, None) };
    let mut notes = if rows.iter().any(|r| r.query_position.is_some()) { vec![QUERY_POSITION_NOTE.to_string()] } else { Vec::new() };
    notes.extend(calibrate_first(&ranking, &prepared.needle_knob, &prepared.needle_multipliers));
    let classes = class_standings(&ranking);
    let mut verdict = verdict(&ranking, &classes);
    let separation = open_pair(&ranking, &classes)
        .map(|(a, b)| separation::Separation::of(&a.hypothesis, &b.hypothesis, &a.recalls, &b.recalls, trials));
    if let Some(s) = &separation {
        let mut totals: Vec<u64> = rows.iter().map(|r| r.total).collect();
        totals.sort_unstable();
        verdict.text.push_str(&format!("; {}", s.sentence(totals.get(totals.len() / 2).copied().unwrap_or(0))));
    }
    let unexplained = unexplained_rows(rows, &ranking, trials);
    if !unexplained.is_empty() {
        verdict.text.push_str(&format!(
            "; but even {} leaves {} of {} rows unexplained (p < {UNEXPLAINED_P}): the fault may not be in the catalogue, or the scenario may not match the deployment (calibrate first: docs/CALIBRATION.md)",
            ranking[0].hypothesis,
            unexplained.len(),
            rows.len()
        ));
    }
    Ok(Diagnosis {
        observations: obs.path.clone(),
        reading: opts.reading,
        trials,
        ranking,
        classes,
        verdict,
        unexplained,
        needle_knob: prepared.needle_knob,
        needle_multipliers: prepared.needle_multipliers,
        not_applicable: prepared.not_applicable,
        next,
        next_capture,
        separation,
        notes,
    })
}

/// When the best candidate fits at least 10:1 better at the easiest or
/// hardest needle profiled than at the scenario's own, the scenario's needle likely differs from the user's prompts
/// by more than the profile spans: a calibration on rows from a healthy
/// configuration pins it (docs/CALIBRATION.md) before faults are compared.
fn calibrate_first(ranking: &[Ranked], knob: &str, multipliers: &[f64]) -> Option<String> {
    let best = ranking.first()?;
    let (lo, hi) = multipliers.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &m| (lo.min(m), hi.max(m)));
    let at_edge = best.needle_multiplier == lo || best.needle_multiplier == hi;
    if multipliers.len() < 2 || !at_edge || best.needle_gain_log10 < DECISIVE_LOG10 {
        return None;
    }
    Some(format!(
        "{} fits at least 10:1 better at {knob} × {} (the edge of the profile {}) than with the scenario's own needle: your prompts' needle may differ from it by more than the profile spans; \
         calibrate first (dsa-recall calibrate with rows from a configuration you know is healthy, docs/CALIBRATION.md) and diagnose against the calibrated scenario",
        best.hypothesis,
        best.needle_multiplier,
        multipliers.iter().map(|m| format!("{m}")).collect::<Vec<_>>().join(", ")
    ))
}

#[cfg(test)]
mod tests;

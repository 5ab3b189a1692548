//! Diagnose an incident: for every candidate hypothesis of the catalogue,
//! the likelihood of the observed counts under the recall the simulator
//! gives each observed configuration, the posterior ranking, and the next
//! experiment that best tells the leaders apart. Definitions and the format
//! of the observation file: docs/OBSERVATIONS.md.

pub mod fit;
pub mod knob;
pub mod observations;
pub mod separation;

use crate::base::observe::Observer;
use crate::config::{self, ListSpec, Scenario, ScenarioParams};
use crate::error::{ConfigError, Error};
use crate::run::cell::CellResult;
use crate::run::sweep::run_sweep_sharing_depths;
use crate::score::hypothesis::{candidate_class, candidate_summary, FaultClass, Hypothesis, CATALOGUE};
use observations::Observation;
pub use separation::clamped;
use serde::Serialize;
use std::collections::BTreeMap;

/// The name of the no-fault candidate.
pub const HEALTHY: &str = "healthy";

/// Hypotheses that make logits tie; `all` adds each with both index tie
/// orders, since a tie rule decides what they select (docs/OBSERVATIONS.md).
pub const TIE_MAKERS: &[&str] = &["scale-unwritten-zero", "scale-unwritten-nan", "e4m3fn-read", "logits-bf16"];

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
        for t in TIE_MAKERS {
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

/// log P(found | total, p) for a binomial.
pub fn log_binomial(found: u64, total: u64, p: f64) -> f64 {
    let (k, n) = (found as f64, total as f64);
    let choose =
        crate::base::special::ln_gamma(n + 1.0) - crate::base::special::ln_gamma(k + 1.0) - crate::base::special::ln_gamma(n - k + 1.0);
    let mut ll = choose;
    if found > 0 {
        ll += k * p.ln();
    }
    if found < total {
        ll += (n - k) * (1.0 - p).ln();
    }
    ll
}

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
type ChunkSims = BTreeMap<(u64, CellKey), Simulated>;

fn key(context: u64, depth: f64, k: u64, variant: &str) -> CellKey {
    (context, depth.to_bits(), k, variant.to_string())
}

/// The base scenario with the sweep lists replaced, validated.
fn scenario_with(
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
    config::check(p)
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
fn variant_under(params: &ScenarioParams, config: &str, h: &str, ok: &mut BTreeMap<String, bool>) -> Option<String> {
    if h == HEALTHY {
        return None;
    }
    let name = format!("{config}+{h}");
    let applies = *ok.entry(name.clone()).or_insert_with(|| variant_ok(params, &name).is_ok());
    applies.then_some(name)
}

/// One candidate's standing.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ranked {
    pub hypothesis: String,
    pub log_likelihood: f64,
    /// Under a uniform prior over the candidates.
    pub posterior: f64,
    /// log10 of the Bayes factor against the best candidate (≤ 0).
    pub log10_bayes_factor: f64,
    /// Observation rows whose configuration it changes.
    pub rows_changed: usize,
    /// The simulated recall (unclamped) it gives each observation row, at
    /// its best multiple of the needle knob.
    pub recalls: Vec<f64>,
    /// Its class (docs/OBSERVATIONS.md, "Classes").
    pub class: FaultClass,
    /// The multiple of the needle knob that fits it best (1 without a nuisance grid).
    pub needle_multiplier: f64,
    /// log10 of how much better that multiple fits than the scenario's own needle (≥ 0).
    pub needle_gain_log10: f64,
}

/// One class's standing: the candidates of a class pooled under a prior
/// that is uniform over the classes present and uniform within each.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassStanding {
    pub class: FaultClass,
    pub about: String,
    pub posterior: f64,
    /// log10 Bayes factor of the class's best candidate against the best overall (≤ 0).
    pub log10_bayes_factor: f64,
    pub best: String,
    pub candidates: usize,
}

/// A row the best candidate cannot explain: its count is in the 1 % tails
/// of Binomial(total, recall) under that candidate (two-sided).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unexplained {
    /// The row's line in the observation file.
    pub line: usize,
    pub context_tokens: u64,
    pub depth_percent: f64,
    pub topk: u64,
    pub config: String,
    /// The row's own label for `config`.
    pub label: String,
    pub found: u64,
    pub total: u64,
    /// The best candidate's recall there, and the two-sided p of the count.
    pub recall: f64,
    pub p_value: f64,
}

/// Below this two-sided p a row is flagged as unexplained.
pub const UNEXPLAINED_P: f64 = 0.01;

/// Two-sided p of `found` of `total` under Binomial(total, p): the
/// probability of a count no more likely than it.
pub fn binomial_two_sided_p(found: u64, total: u64, p: f64) -> f64 {
    let at = log_binomial(found, total, p);
    let sum: f64 = (0..=total).map(|j| log_binomial(j, total, p)).filter(|&l| l <= at + 1e-9).map(f64::exp).sum();
    sum.min(1.0)
}

/// The rows whose counts the best candidate of `ranking` cannot explain.
pub fn unexplained_rows(rows: &[Observation], ranking: &[Ranked], trials: u64) -> Vec<Unexplained> {
    let Some(best) = ranking.first() else { return Vec::new() };
    rows.iter()
        .zip(&best.recalls)
        .filter_map(|(r, &p)| {
            let p_value = binomial_two_sided_p(r.found, r.total, clamped(p, trials));
            (p_value < UNEXPLAINED_P).then(|| Unexplained {
                line: r.line,
                context_tokens: r.context_tokens,
                depth_percent: r.depth_percent,
                topk: r.topk,
                config: r.config.clone(),
                label: r.label.clone(),
                found: r.found,
                total: r.total,
                recall: p,
                p_value,
            })
        })
        .collect()
}

/// What the counts say, in words.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// `healthy` (consistent with a healthy indexer), `inconclusive` (two
    /// classes within 10:1) or `fault` (one class ahead of every other by
    /// at least 10:1).
    pub kind: String,
    pub text: String,
}

/// The next experiment: one cell of the candidate grid.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NextExperiment {
    pub context_tokens: u64,
    pub depth_percent: f64,
    pub topk: u64,
    pub config: String,
    /// The observation file's own label for that configuration.
    pub label: String,
    /// Mutual information (nats) between the posterior and one prompt's outcome.
    pub information_per_prompt: f64,
    /// The two leading hypotheses and their simulated recall in this cell.
    pub leaders: [String; 2],
    pub leader_recalls: [f64; 2],
    /// Prompts for the leader's expected log Bayes factor against the
    /// runner-up to reach log 20; None when this cell cannot tell them apart.
    pub prompts_for_20_to_1: Option<u64>,
    /// How the cell leaves the observed grid, if it does (a longer context,
    /// the needle in the last 2K tokens, k covering every row); empty inside it.
    pub beyond_observed: Vec<String>,
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

/// Said once when rows carry `query_position` (docs/OBSERVATIONS.md).
pub const QUERY_POSITION_NOTE: &str = "query_position is recorded but not used: the simulator scores the decoding query at the end of the context (with its RoPE position there), so a row is compared with the recall of that query";

/// Sorts candidates by log-likelihood (stable: ties keep the candidate
/// order) and fills in posteriors and Bayes factors.
pub fn rank(mut ranked: Vec<Ranked>) -> Vec<Ranked> {
    ranked.sort_by(|a, b| b.log_likelihood.total_cmp(&a.log_likelihood));
    let best = ranked.first().map_or(0.0, |r| r.log_likelihood);
    let z: f64 = ranked.iter().map(|r| (r.log_likelihood - best).exp()).sum();
    for r in &mut ranked {
        r.posterior = (r.log_likelihood - best).exp() / z;
        r.log10_bayes_factor = (r.log_likelihood - best) / std::f64::consts::LN_10;
    }
    ranked
}

/// The classes of a ranking (filled by [`rank`]), best first, under a
/// prior uniform over the classes present and uniform within each.
pub fn class_standings(ranking: &[Ranked]) -> Vec<ClassStanding> {
    let best = ranking.first().map_or(0.0, |r| r.log_likelihood);
    let mut out: Vec<ClassStanding> = Vec::new();
    let mut mass: Vec<f64> = Vec::new();
    for r in ranking {
        let w = (r.log_likelihood - best).exp();
        match out.iter().position(|c| c.class == r.class) {
            Some(i) => {
                out[i].candidates += 1;
                mass[i] += w;
            }
            None => {
                out.push(ClassStanding {
                    class: r.class,
                    about: r.class.about().to_string(),
                    posterior: 0.0,
                    log10_bayes_factor: r.log10_bayes_factor,
                    best: r.hypothesis.clone(),
                    candidates: 1,
                });
                mass.push(w);
            }
        }
    }
    let pooled: Vec<f64> = out.iter().zip(&mass).map(|(c, m)| m / c.candidates as f64).collect();
    let z: f64 = pooled.iter().sum();
    for (c, p) in out.iter_mut().zip(pooled) {
        c.posterior = if z > 0.0 { p / z } else { 0.0 };
    }
    out
}

/// The verdict on a ranking and its classes: consistent with a healthy
/// indexer when no candidate beats healthy by 10:1; inconclusive when a
/// second class comes within 10:1 of the best; else the best class.
pub fn verdict(ranking: &[Ranked], classes: &[ClassStanding]) -> Verdict {
    let Some(best) = ranking.first() else {
        return Verdict { kind: "inconclusive".into(), text: "no candidate to rank".into() };
    };
    let close = |bf: f64| bf > -DECISIVE_LOG10;
    let healthy = ranking.iter().find(|r| r.class == FaultClass::Healthy);
    if let Some(h) = healthy.filter(|h| close(h.log10_bayes_factor)) {
        let text = if h.hypothesis == best.hypothesis {
            let runner = ranking.get(1).filter(|r| close(r.log10_bayes_factor));
            match runner {
                Some(r) => format!(
                    "consistent with a healthy indexer: healthy fits best, though {} ({}) is within 10:1 of it (log10 BF {:.2})",
                    r.hypothesis, r.class, r.log10_bayes_factor
                ),
                None => "consistent with a healthy indexer: healthy fits best, every fault at least 10:1 behind".into(),
            }
        } else {
            format!(
                "consistent with a healthy indexer: the best candidate, {} ({}), beats healthy by less than 10:1 (healthy at log10 BF {:.2}); more prompts or the next experiment would tell",
                best.hypothesis, best.class, h.log10_bayes_factor
            )
        };
        return Verdict { kind: "healthy".into(), text };
    }
    let top = &classes[0];
    let runner = classes.iter().skip(1).find(|c| close(c.log10_bayes_factor));
    match runner {
        Some(r) => Verdict {
            kind: "inconclusive".into(),
            text: format!(
                "inconclusive between {} ({}: {}) and {} ({}: {}, log10 BF {:.2}); healthy is ruled out (log10 BF {:.2})",
                top.class,
                top.about,
                top.best,
                r.class,
                r.about,
                r.best,
                r.log10_bayes_factor,
                healthy.map_or(f64::NEG_INFINITY, |h| h.log10_bayes_factor)
            ),
        },
        None => {
            let within: Vec<&str> = ranking
                .iter()
                .skip(1)
                .filter(|r| r.class == top.class && close(r.log10_bayes_factor))
                .map(|r| r.hypothesis.as_str())
                .collect();
            let also =
                if within.is_empty() { String::new() } else { format!("; within the class, {} cannot be told from it", within.join(", ")) };
            Verdict {
                kind: "fault".into(),
                text: format!(
                    "{} ({}): best explained by {}, every other class at least 10:1 behind{}",
                    top.class, top.about, top.best, also
                ),
            }
        }
    }
}

/// The pair a verdict leaves open, if any, as [`verdict`] reads the
/// ranking: healthy and the best fault when healthy is first and a fault
/// within 10:1; the best candidate and healthy when healthy is within 10:1
/// of it; else the best candidates of the two leading classes when the
/// second is within 10:1.
pub fn open_pair<'a>(ranking: &'a [Ranked], classes: &[ClassStanding]) -> Option<(&'a Ranked, &'a Ranked)> {
    let close = |bf: f64| bf > -DECISIVE_LOG10;
    let best = ranking.first()?;
    let healthy = ranking.iter().find(|r| r.class == FaultClass::Healthy).filter(|h| close(h.log10_bayes_factor));
    let runner = match healthy {
        Some(h) if h.hypothesis == best.hypothesis => ranking.get(1),
        Some(h) => Some(h),
        None => {
            let class = classes.iter().skip(1).find(|c| close(c.log10_bayes_factor))?;
            ranking.iter().find(|r| r.hypothesis == class.best)
        }
    };
    runner.filter(|r| close(r.log10_bayes_factor)).map(|r| (best, r))
}

/// Binary entropy in nats.
fn entropy(p: f64) -> f64 {
    let h = |x: f64| if x > 0.0 { -x * x.ln() } else { 0.0 };
    h(p) + h(1.0 - p)
}

/// Mutual information (nats) between a hypothesis drawn from `weights` and
/// one prompt's outcome, found with probability `recalls[i]` under hypothesis i.
pub fn information(weights: &[f64], recalls: &[f64]) -> f64 {
    let mix: f64 = weights.iter().zip(recalls).map(|(w, p)| w * p).sum();
    entropy(mix) - weights.iter().zip(recalls).map(|(w, p)| w * entropy(*p)).sum::<f64>()
}

/// Prompts for the expected log Bayes factor of hypothesis a (recall `pa`,
/// true) against b (`pb`) to reach log 20: ⌈log 20 / KL(a‖b)⌉.
pub fn prompts_for_odds(pa: f64, pb: f64) -> Option<u64> {
    let kl = separation::kl_bernoulli(pa, pb);
    (kl > 1e-9).then(|| (20f64.ln() / kl).ceil() as u64)
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

/// Every variant in the cells of each prefill chunk of `by_chunk`, under
/// each needle multiple: per multiple, the recalls by (chunk, cell).
fn simulate_multiples(
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
fn params_for_rows(params: &ScenarioParams, rows: &[Observation]) -> ScenarioParams {
    match (params.geometry.prefill_chunk.filter(|&c| c > 0), rows.iter().find_map(|r| r.prefill_chunk.filter(|&c| c > 0))) {
        (None, Some(c)) => with_prefill_chunk(params, c),
        _ => params.clone(),
    }
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

/// Counts drawn for a recovery study: row i gets Binomial(`prompts`, `recalls[i]`) found, from `seed`.
pub fn draw_counts(recalls: &[f64], prompts: u64, seed: u64) -> Vec<u64> {
    use rand::Rng;
    let mut rng = crate::base::rng::stream(seed, &[]);
    recalls.iter().map(|&p| (0..prompts).filter(|_| rng.random::<f64>() < p).count() as u64).collect()
}

/// Of `replicates` observation sets drawn under `truth` (its recalls in
/// `truth_sim`, `prompts` per row, replicate j from seed `derive(seed, j)`),
/// how many `diagnosis` (simulated at another seed, same cells) ranks
/// `truth` strictly first (a tie for first does not count).
pub fn recovered(
    truth_sim: &Prepared,
    diagnosis: &Prepared,
    rows: &[Observation],
    truth: &str,
    prompts: u64,
    replicates: u64,
    seed: u64,
) -> Result<u64, Error> {
    let p: Vec<f64> = rows.iter().map(|r| truth_sim.recall(truth, r).map(|(p, _)| p)).collect::<Result<_, _>>()?;
    let mut hits = 0;
    let mut drawn = rows.to_vec();
    for j in 0..replicates {
        for (r, found) in drawn.iter_mut().zip(draw_counts(&p, prompts, crate::base::rng::derive(seed, &[j]))) {
            r.found = found;
            r.total = prompts;
        }
        let (ranking, _) = diagnosis.rank(&drawn)?;
        let first = ranking.first().filter(|r| r.hypothesis == truth);
        let alone = ranking.get(1).is_none_or(|second| second.log_likelihood < ranking[0].log_likelihood);
        hits += u64::from(first.is_some() && alone);
    }
    Ok(hits)
}

/// Cells (context, depth, k), and by (context, depth bits, k) how each
/// leaves the observed grid (empty inside it).
type NextGrid = (Vec<(u64, f64, u64)>, BTreeMap<(u64, u64, u64), Vec<String>>);

/// The next experiment's grid (see [`next_experiment`]) for `rows`.
fn next_grid(params: &ScenarioParams, rows: &[Observation]) -> NextGrid {
    let (lo, hi) = rows.iter().fold((u64::MAX, 0), |(lo, hi), r| (lo.min(r.context_tokens), hi.max(r.context_tokens)));
    let mut contexts = vec![lo, ((lo as f64 * hi as f64).sqrt().round() as u64), hi];
    contexts.dedup();
    let k0 = rows.iter().map(|r| r.topk).min().unwrap_or(1);
    let probe: Vec<String> = rows.iter().take(1).map(|r| r.config.clone()).collect();
    let accepts = |contexts: &[u64], depths: &[f64], topks: &[u64]| scenario_with(params, contexts, depths, topks, &probe).ok();
    if accepts(&[2 * hi], &[50.0], &[k0]).is_some() {
        contexts.push(2 * hi);
    }
    // Twice the least k only where the longest context has that many rows to select.
    let mut topks = if accepts(&contexts, &[50.0], &[k0, 2 * k0]).is_some() { vec![k0, 2 * k0] } else { vec![k0] };
    let geometry = accepts(&[hi], &[50.0], &[k0]).map(|s| s.geometry);
    let rows_of = |c: u64| geometry.map_or(0, |g| g.candidate_rows(c));
    let every_row = rows_of(hi);
    if every_row > *topks.last().unwrap_or(&0) && accepts(&contexts, &[50.0], &[every_row]).is_some() {
        topks.push(every_row);
    }
    let near_end = |c: u64| (c > 2 * NEAR_END_TOKENS).then(|| ((c - NEAR_END_TOKENS) as f64 / c as f64 * 1e4).floor() / 100.0);
    let mut cells = Vec::new();
    for &c in &contexts {
        for d in [10.0, 50.0, 90.0].into_iter().chain(near_end(c).filter(|&d| accepts(&[c], &[d], &[k0]).is_some())) {
            for &k in &topks {
                cells.push((c, d, k));
            }
        }
    }
    let beyond_of = |c: u64, d: f64, k: u64| {
        let mut why = Vec::new();
        if c > hi {
            why.push(format!("a longer context than observed ({c} tokens)"));
        }
        if near_end(c) == Some(d) {
            why.push(format!("the needle {NEAR_END_TOKENS} tokens before the end"));
        }
        if k == every_row && k >= rows_of(c) {
            why.push(format!("k = {k}, every candidate row (mlx-lm #1453's cure)"));
        }
        why
    };
    let beyond = cells.iter().map(|&(c, d, k)| ((c, d.to_bits(), k), beyond_of(c, d, k))).collect();
    (cells, beyond)
}

/// The needle's place, in tokens before the end, of the "last 2K tokens"
/// cells of the next experiment: inside the last 2K, outside V4's raw
/// window of 128 tokens.
pub const NEAR_END_TOKENS: u64 = 1024;

/// The cell of a grid where one prompt's outcome carries the most
/// information about the posterior (the leaders are the two best), and the
/// best cell for a per-layer capture when that carries more. The grid: the
/// observed contexts' least, geometric middle and greatest, and twice the
/// greatest (a longer context); depths 10, 50, 90 % and, per context, the
/// needle [`NEAR_END_TOKENS`] before the end; the least observed k, twice
/// it, and every candidate row of the greatest observed context (k ≥ the
/// context, the cure of ml-explore/mlx-lm #1453); the observed
/// configurations. Each addition only where the scenario accepts it.
fn next_experiment(
    params: &ScenarioParams,
    rows: &[Observation],
    plan: &[(String, BTreeMap<String, String>)],
    ranking: &[Ranked],
    opts: &Options<'_>,
) -> Result<(Option<NextExperiment>, Option<NextExperiment>), Error> {
    let (cells, beyond) = next_grid(params, rows);
    // Only candidates with weight are worth simulating again: the others
    // change the information of a cell by less than their weight.
    let live: Vec<&Ranked> = ranking.iter().filter(|r| r.posterior >= LIVE_POSTERIOR).take(LIVE_MAX).collect();
    let live = if live.len() >= 2 { live } else { ranking.iter().take(2).collect() };
    let plan_of = |h: &str| plan.iter().find(|(n, _)| n == h).map(|(_, m)| m);
    let mut variants: Vec<String> = Vec::new();
    for r in &live {
        for v in plan_of(&r.hypothesis).into_iter().flat_map(|m| m.values()) {
            if !variants.contains(v) {
                variants.push(v.clone());
            }
        }
    }
    let sim = simulate(params, &cells, &variants, DepthTrials::Shared, opts.observer)?;
    let weights: Vec<f64> = {
        let z: f64 = live.iter().map(|r| r.posterior).sum();
        live.iter().map(|r| r.posterior / z).collect()
    };
    // Best needle test, best per-layer capture (the latter only under the whole-model reading).
    let mut best: [Option<NextExperiment>; 2] = [None, None];
    let configs: Vec<&String> = plan.first().map(|(_, m)| m.keys().collect()).unwrap_or_default();
    for &(c, d, k) in &cells {
        for config in &configs {
            let mut recalls = [Vec::new(), Vec::new()];
            for r in &live {
                let v = &plan_of(&r.hypothesis).expect("planned")[config.as_str()];
                let s = sim.get(&key(c, d, k, v)).copied();
                let test = match (s, opts.reading) {
                    (Some(s), Reading::Model) => s.model.unwrap_or(s.layer),
                    (Some(s), Reading::Layer) => s.layer,
                    (None, _) => f64::NAN,
                };
                let trials = s.map_or(1, |s| s.trials);
                recalls[0].push(clamped(test, trials));
                recalls[1].push(clamped(s.map_or(f64::NAN, |s| s.layer), trials));
            }
            let kinds = if opts.reading == Reading::Model { 2 } else { 1 };
            for (slot, recalls) in best.iter_mut().zip(&recalls).take(kinds) {
                if recalls.iter().any(|p| p.is_nan()) {
                    continue;
                }
                let info = information(&weights, recalls);
                if slot.as_ref().is_none_or(|b| info > b.information_per_prompt + 1e-12) {
                    *slot = Some(NextExperiment {
                        context_tokens: c,
                        depth_percent: d,
                        topk: k,
                        config: (*config).clone(),
                        label: rows.iter().find(|r| &r.config == *config).map_or_else(|| (*config).clone(), |r| r.label.clone()),
                        information_per_prompt: info,
                        leaders: [live[0].hypothesis.clone(), live[1].hypothesis.clone()],
                        leader_recalls: [recalls[0], recalls[1]],
                        prompts_for_20_to_1: prompts_for_odds(recalls[0], recalls[1]),
                        beyond_observed: beyond.get(&(c, d.to_bits(), k)).cloned().unwrap_or_default(),
                    });
                }
            }
        }
    }
    let [test, capture] = best;
    let capture = capture.filter(|cap| test.as_ref().is_none_or(|t| cap.information_per_prompt > t.information_per_prompt + 1e-12));
    Ok((test, capture))
}

/// The ranking as a table, the classes and the verdict under it, then the next experiment.
pub fn format_table(d: &Diagnosis) -> String {
    let knob = if d.needle_multipliers.len() > 1 {
        format!(
            "; likelihoods profiled over {} × {} (the needle's difficulty is not known)",
            d.needle_knob,
            d.needle_multipliers.iter().map(|m| format!("{m}")).collect::<Vec<_>>().join(", ")
        )
    } else {
        String::new()
    };
    let mut out = format!(
        "{} rows of {} against {} candidates ({} recall, {} simulated trials per cell{knob})\n",
        d.ranking.first().map_or(0, |r| r.recalls.len()),
        d.observations,
        d.ranking.len(),
        if d.reading == Reading::Model { "whole-model" } else { "per-layer" },
        d.trials
    );
    let multi = d.needle_multipliers.len() > 1;
    out.push_str(&format!(
        "{:>4}  {:<44} {:<12} {:>12} {:>10} {:>10} {:>8}{}  {}\n",
        "rank",
        "hypothesis",
        "class",
        "log-lik",
        "posterior",
        "log10 BF",
        "changes",
        if multi { "  needle ×" } else { "" },
        "what it is"
    ));
    for (i, r) in d.ranking.iter().enumerate() {
        out.push_str(&format!(
            "{:>4}  {:<44} {:<12} {:>12.3} {:>10.4} {:>10.2} {:>8}{}  {}\n",
            i + 1,
            r.hypothesis,
            r.class.name(),
            r.log_likelihood,
            r.posterior,
            r.log10_bayes_factor,
            format!("{} rows", r.rows_changed),
            if multi { format!("  {:>8}", r.needle_multiplier) } else { String::new() },
            candidate_summary(&r.hypothesis)
        ));
    }
    push_classes_and_verdict(d, &mut out);
    out
}

/// The class table, the rows no candidate explains, the verdict, notes and
/// the next experiment, under the ranking.
fn push_classes_and_verdict(d: &Diagnosis, out: &mut String) {
    out.push_str("\nclasses (prior uniform over the classes, then over each class's candidates)\n");
    out.push_str(&format!("{:<14} {:>10} {:>10}  {:<44} {}\n", "class", "posterior", "log10 BF", "best candidate", "what it means"));
    for c in &d.classes {
        out.push_str(&format!("{:<14} {:>10.4} {:>10.2}  {:<44} {}\n", c.class.name(), c.posterior, c.log10_bayes_factor, c.best, c.about));
    }
    if !d.unexplained.is_empty() {
        out.push_str(&format!("\nrows {} cannot explain (two-sided p < {UNEXPLAINED_P}):\n", d.ranking[0].hypothesis));
        for u in &d.unexplained {
            out.push_str(&format!(
                "  line {}: {} tokens, depth {} %, k {}, {}: {} of {} found where it gives recall {:.3} (p {:.1e})\n",
                u.line, u.context_tokens, u.depth_percent, u.topk, u.label, u.found, u.total, u.recall, u.p_value
            ));
        }
    }
    out.push_str(&format!("\nverdict: {}\n", d.verdict.text));
    if !d.not_applicable.is_empty() {
        out.push_str(&format!("not applicable to any observed configuration (same as healthy): {}\n", d.not_applicable.join(", ")));
    }
    for note in &d.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    if let Some(n) = d.next.as_ref().filter(|n| n.information_per_prompt < 1e-6) {
        out.push_str(&format!(
            "next experiment: none in the grid: {} and {} predict the same recall in every cell simulated\n",
            n.leaders[0], n.leaders[1]
        ));
    } else if let Some(n) = &d.next {
        out.push_str(&format!("next experiment: {}\n", n.describe()));
    }
    if let Some(n) = &d.next_capture {
        out.push_str(&format!(
            "or a per-layer capture of the indexer's top-k (sglang --enable-return-indexer-topk, then dsa-recall observe), one layer per prompt: {}\n",
            n.describe()
        ));
    }
}

impl NextExperiment {
    /// The cell, what it carries, the leaders' recalls and how the cell
    /// leaves the observed grid, in one line.
    pub fn describe(&self) -> String {
        let beyond = if self.beyond_observed.is_empty() { String::new() } else { format!(" [{}]", self.beyond_observed.join("; ")) };
        format!(
            "{} tokens, depth {} %, k {}, {}{beyond}: {:.3} nats per prompt; {} {:.3} vs {} {:.3}, {}",
            self.context_tokens,
            self.depth_percent,
            self.topk,
            if self.label == self.config { self.label.clone() } else { format!("{} ({})", self.label, self.config) },
            self.information_per_prompt,
            self.leaders[0],
            self.leader_recalls[0],
            self.leaders[1],
            self.leader_recalls[1],
            match self.prompts_for_20_to_1 {
                Some(p) => format!("{p} prompt(s) for 20:1 odds between them"),
                None => "this cell does not tell them apart".into(),
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 18, item 4: the likelihood of a 2-row file, by hand.
    #[test]
    fn likelihood_of_two_rows_by_hand() {
        // 2 of 3 at p = 0.5: C(3,2)·0.5³ = 0.375; 0 of 4 at p = 0.1: 0.9⁴ = 0.6561.
        let ll = log_binomial(2, 3, 0.5) + log_binomial(0, 4, 0.1);
        assert!((ll - (0.375f64 * 0.6561).ln()).abs() < 1e-12, "{ll}");
        // A simulated recall of 0 from 200 trials is read as 1/400, not 0.
        assert_eq!(clamped(0.0, 200), 1.0 / 400.0);
        assert_eq!(clamped(1.0, 200), 1.0 - 1.0 / 400.0);
        assert!(log_binomial(3, 3, clamped(0.0, 200)).is_finite());
    }

    #[test]
    fn ranking_posteriors_and_bayes_factors() {
        let ranked = ranked(&[("a", -3.0), ("b", -3.0 + 20f64.ln()), ("c", f64::NEG_INFINITY)]);
        assert_eq!(ranked[0].hypothesis, "b");
        assert!((ranked[0].posterior - 20.0 / 21.0).abs() < 1e-12);
        assert!((ranked[1].log10_bayes_factor + 20f64.log10()).abs() < 1e-12);
        assert_eq!(ranked[2].posterior, 0.0);
    }

    fn ranked(entries: &[(&str, f64)]) -> Vec<Ranked> {
        rank(
            entries
                .iter()
                .map(|&(h, ll)| Ranked {
                    hypothesis: h.into(),
                    log_likelihood: ll,
                    posterior: 0.0,
                    log10_bayes_factor: 0.0,
                    rows_changed: 0,
                    recalls: vec![],
                    class: candidate_class(if h == HEALTHY { "" } else { h }),
                    needle_multiplier: 1.0,
                    needle_gain_log10: 0.0,
                })
                .collect(),
        )
    }

    // Issue 30, item 14: "calibrate first" only when the best candidate
    // fits 10:1 better at an edge of the needle profile than at ×1.
    #[test]
    fn calibrate_first_needs_a_decisive_edge() {
        let mut r = ranked(&[("block-row0", -3.0), (HEALTHY, -9.0)]);
        let grid = [0.5, 1.0, 2.0];
        assert_eq!(calibrate_first(&r, "needle.exceedance", &grid), None, "at ×1");
        r[0].needle_multiplier = 0.5;
        r[0].needle_gain_log10 = 0.9;
        assert_eq!(calibrate_first(&r, "needle.exceedance", &grid), None, "under 10:1");
        r[0].needle_gain_log10 = 1.2;
        let note = calibrate_first(&r, "needle.exceedance", &grid).unwrap();
        assert!(note.contains("block-row0") && note.contains("× 0.5") && note.contains("calibrate first"), "{note}");
        r[0].needle_multiplier = 1.0;
        assert_eq!(calibrate_first(&r, "needle.exceedance", &grid), None, "inside the profile");
        assert_eq!(calibrate_first(&r, "needle.exceedance", &[1.0]), None, "no profile");
    }

    #[test]
    fn classes_pool_their_candidates_under_a_uniform_class_prior() {
        // Two partial candidates at likelihood 1 each, one random-loss at 1:
        // the partial class gets the mean of its two (1), so the classes tie.
        let r = ranked(&[("slot-shift", 0.0), ("scale-per-page", 0.0), ("stale-scale", 0.0), ("hadamard-q-only", 0.0)]);
        let c = class_standings(&r);
        let get = |k: FaultClass| c.iter().find(|s| s.class == k).unwrap();
        assert_eq!(get(FaultClass::Partial).candidates, 2);
        assert!((get(FaultClass::Partial).posterior - 1.0 / 3.0).abs() < 1e-12);
        assert!((get(FaultClass::RandomLoss).posterior - 1.0 / 3.0).abs() < 1e-12);
        let total: f64 = c.iter().map(|s| s.posterior).sum();
        assert!((total - 1.0).abs() < 1e-12);
    }

    #[test]
    fn composite_candidates_take_the_class_of_what_they_do() {
        assert_eq!(candidate_class(""), FaultClass::Healthy);
        assert_eq!(candidate_class("scale-unwritten-zero"), FaultClass::RandomLoss);
        assert_eq!(candidate_class("scale-unwritten-zero+ties-lowest"), FaultClass::IndexTies);
        assert_eq!(candidate_class("scale-unwritten-nan+ties-highest"), FaultClass::IndexTies);
        assert_eq!(candidate_class("logits-bf16+ties-lowest"), FaultClass::Partial);
        assert_eq!(candidate_class("slot-shift+scale-floor"), FaultClass::Layout);
        // Every page read as zeros destroys all information (issue 28, the
        // all-zero scores of ml-explore/mlx-lm#1454); a share of pages is layout.
        assert_eq!(candidate_class("zero-blocks=1"), FaultClass::RandomLoss);
        assert_eq!(candidate_class("zero-blocks=1+ties-highest"), FaultClass::IndexTies);
        assert_eq!(candidate_class("zero-blocks=0.5"), FaultClass::Layout);
        assert_eq!(candidate_class("zero-blocks=0.5+ties-highest"), FaultClass::Layout);
    }

    #[test]
    fn the_verdict_says_healthy_inconclusive_or_the_class() {
        let ln10 = std::f64::consts::LN_10;
        // Healthy within 10:1 of the best fault: consistent with healthy.
        let r = ranked(&[(HEALTHY, -0.5 * ln10), ("slot-shift", 0.0)]);
        assert_eq!(verdict(&r, &class_standings(&r)).kind, "healthy");
        // Two classes within 10:1, healthy far behind: inconclusive.
        let r = ranked(&[(HEALTHY, -5.0 * ln10), ("slot-shift", 0.0), ("hadamard-q-only", -0.5 * ln10)]);
        let v = verdict(&r, &class_standings(&r));
        assert_eq!(v.kind, "inconclusive", "{}", v.text);
        assert!(v.text.contains("layout") && v.text.contains("random-loss"), "{}", v.text);
        // One class ahead of every other by 10:1 or more: the fault.
        let r = ranked(&[(HEALTHY, -5.0 * ln10), ("slot-shift", 0.0), ("pages-swapped", -0.2 * ln10), ("hadamard-q-only", -2.0 * ln10)]);
        let v = verdict(&r, &class_standings(&r));
        assert_eq!(v.kind, "fault", "{}", v.text);
        assert!(v.text.contains("pages-swapped cannot be told"), "{}", v.text);
    }

    // Issue 28, item 5: the pair an open verdict compares is the pair it names.
    #[test]
    fn the_open_pair_is_the_one_the_verdict_leaves_open() {
        let ln10 = std::f64::consts::LN_10;
        let names = |r: &[Ranked]| open_pair(r, &class_standings(r)).map(|(a, b)| (a.hypothesis.clone(), b.hypothesis.clone()));
        let pair = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
        let r = ranked(&[(HEALTHY, 0.0), ("slot-shift", -0.5 * ln10)]);
        assert_eq!(names(&r), pair(HEALTHY, "slot-shift"), "healthy first, a fault within 10:1");
        let r = ranked(&[(HEALTHY, -0.5 * ln10), ("slot-shift", 0.0), ("hadamard-q-only", -0.2 * ln10)]);
        assert_eq!(names(&r), pair("slot-shift", HEALTHY), "healthy within 10:1 of the best: the verdict names healthy");
        let r = ranked(&[(HEALTHY, -5.0 * ln10), ("slot-shift", 0.0), ("pages-swapped", -0.1 * ln10), ("hadamard-q-only", -0.5 * ln10)]);
        assert_eq!(names(&r), pair("slot-shift", "hadamard-q-only"), "inconclusive: the runner class's best");
        let r = ranked(&[(HEALTHY, -5.0 * ln10), ("slot-shift", 0.0), ("hadamard-q-only", -2.0 * ln10)]);
        assert_eq!(names(&r), None, "a decisive fault leaves nothing open");
        let r = ranked(&[(HEALTHY, 0.0), ("slot-shift", -2.0 * ln10)]);
        assert_eq!(names(&r), None, "healthy ahead of every fault by 10:1");
    }

    #[test]
    fn two_sided_binomial_p() {
        // 0 of 10 at p = 0.5: P(0) + P(10) = 2/1024.
        assert!((binomial_two_sided_p(0, 10, 0.5) - 2.0 / 1024.0).abs() < 1e-12);
        assert!((binomial_two_sided_p(5, 10, 0.5) - 1.0).abs() < 1e-12);
        // 3 of 3 at p = 0.999: likely.
        assert!(binomial_two_sided_p(3, 3, 0.999) > 0.99);
        assert!(binomial_two_sided_p(0, 3, 0.999) < 1e-8);
    }

    #[test]
    fn needle_multipliers_parse() {
        assert_eq!(parse_needle_multipliers("0.5, 1,2,1").unwrap(), [0.5, 1.0, 2.0]);
        assert_eq!(parse_needle_multipliers("off").unwrap(), [1.0]);
        for bad in ["", "0", "-1", "x", "nan", "inf"] {
            let e = parse_needle_multipliers(bad).unwrap_err().to_string();
            assert!(e.contains("--needle-multipliers"), "{bad}: {e}");
        }
    }

    #[test]
    fn information_and_prompts() {
        // Two equally likely hypotheses that answer 1 and 0: one prompt settles it (log 2 nats).
        assert!((information(&[0.5, 0.5], &[1.0, 0.0]) - 2f64.ln()).abs() < 1e-12);
        assert_eq!(information(&[0.5, 0.5], &[0.3, 0.3]), 0.0);
        assert_eq!(prompts_for_odds(0.3, 0.3), None);
        // KL(0.9‖0.5) = 0.368 nats: log 20 = 3.0 nats needs 9 prompts.
        assert_eq!(prompts_for_odds(0.9, 0.5), Some(9));
    }

    #[test]
    fn candidate_lists() {
        let all = candidates("all").unwrap();
        assert_eq!(all[0], HEALTHY);
        assert!(all.iter().any(|h| h == "scale-unwritten-zero+ties-lowest"));
        assert!(!all.iter().any(|h| h.contains('=')));
        assert_eq!(candidates("slot-shift, topk=1024").unwrap(), ["healthy", "slot-shift", "topk=1024"]);
        let more = candidates("all,topk=1024,slot-shift").unwrap();
        assert_eq!(more.len(), all.len() + 1);
        assert_eq!(more.last().unwrap(), "topk=1024");
        for nothing in ["", " , ", "healthy"] {
            let err = candidates(nothing).unwrap_err().to_string();
            assert!(err.contains("at least one hypothesis besides healthy"), "{nothing:?}: {err}");
        }
        let err = candidates("slot-shift,nope").unwrap_err().to_string();
        assert!(err.contains("--hypotheses") && err.contains("nope"), "{err}");
    }
}

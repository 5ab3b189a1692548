//! The next experiment: the cell that best tells the leaders apart, and
//! how many prompts it needs.

use super::candidates::*;
use super::observations::Observation;
use super::prepare::*;
use super::rank::*;
use super::separation;
use super::separation::clamped;
use super::simulate::*;
use crate::config::ScenarioParams;
use crate::error::Error;
use serde::Serialize;
use std::collections::BTreeMap;

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

/// Information per prompt as text: three decimals down to 0.01, then two
/// significant digits (`4.1e-4`), so that a small value does not read as 0.000.
pub fn information_text(nats: f64) -> String {
    if nats >= 0.01 || nats == 0.0 {
        format!("{nats:.3}")
    } else {
        format!("{nats:.1e}")
    }
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

/// The plan candidate `r` simulates as: an after-selection loss selects as
/// healthy does; a gated form as its base beyond its onset (and as healthy
/// below, see [`live_variants`]).
fn plan_of<'a>(plan: &'a [(String, BTreeMap<String, String>)], r: &Ranked) -> Option<&'a BTreeMap<String, String>> {
    let h = if r.loss.is_some() { HEALTHY } else { super::gate::gated_base(&r.hypothesis).unwrap_or(&r.hypothesis) };
    plan.iter().find(|(n, _)| n == h).map(|(_, m)| m)
}

/// Every variant the live candidates need simulated, each once.
fn live_variants(plan: &[(String, BTreeMap<String, String>)], live: &[&Ranked]) -> Vec<String> {
    let healthy = plan.iter().find(|(n, _)| n == HEALTHY).map(|(_, m)| m);
    let mut variants: Vec<String> = Vec::new();
    for r in live {
        for v in plan_of(plan, r).into_iter().chain(r.gate.and(healthy)).flat_map(|m| m.values()) {
            if !variants.contains(v) {
                variants.push(v.clone());
            }
        }
    }
    variants
}

/// The cell of a grid where one prompt's outcome carries the most
/// information about the posterior (the leaders are the two best), and the
/// best cell for a per-layer capture when that carries more. The grid: the
/// observed contexts' least, geometric middle and greatest, and twice the
/// greatest (a longer context); depths 10, 50, 90 % and, per context, the
/// needle [`NEAR_END_TOKENS`] before the end; the least observed k, twice
/// it, and every candidate row of the greatest observed context (k ≥ the
/// context, the cure of ml-explore/mlx-lm #1453); the observed
/// configurations. Each addition only where the scenario accepts it.
pub(super) fn next_experiment(
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
    let plan_of = |r: &Ranked| plan_of(plan, r);
    let sim = simulate(params, &cells, &live_variants(plan, &live), DepthTrials::Shared, opts.observer)?;
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
                let gated_off = r.gate.is_some_and(|t| c <= t);
                let v = if gated_off { *config } else { &plan_of(r).expect("planned")[config.as_str()] };
                let s = sim.get(&key(c, d, k, v)).copied();
                let test = match (s, opts.reading) {
                    (Some(s), Reading::Model) => s.model.unwrap_or(s.layer),
                    (Some(s), Reading::Layer) => s.layer,
                    (None, _) => f64::NAN,
                };
                // A loss after the selection costs the needle test, never the capture.
                let test = match (&r.loss, opts.reading) {
                    (Some(loss), Reading::Model) => test * (1.0 - loss.share_at(c)),
                    _ => test,
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

impl NextExperiment {
    /// The cell, what it carries, the leaders' recalls and how the cell
    /// leaves the observed grid, in one line.
    pub fn describe(&self) -> String {
        let beyond = if self.beyond_observed.is_empty() { String::new() } else { format!(" [{}]", self.beyond_observed.join("; ")) };
        format!(
            "{} tokens, depth {} %, k {}, {}{beyond}: {} nats per prompt; {} {:.3} vs {} {:.3}, {}",
            self.context_tokens,
            self.depth_percent,
            self.topk,
            if self.label == self.config { self.label.clone() } else { format!("{} ({})", self.label, self.config) },
            information_text(self.information_per_prompt),
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

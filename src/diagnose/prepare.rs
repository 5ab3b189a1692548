//! A prepared diagnosis: the simulations of every candidate on the
//! observed configurations, and the recall each gives an observed row.

use super::candidates::*;
use super::observations::Observation;
use super::rank::*;
use super::separation::clamped;
use super::simulate::*;
use super::verdict::*;
use crate::base::observe::Observer;
use crate::config::ScenarioParams;
use crate::error::Error;
use crate::score::hypothesis::{after_selection, candidate_class};
use std::collections::BTreeMap;

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
    /// After-selection losses: scored on healthy's simulation ([`super::loss`]).
    after_selection: Vec<String>,
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
    // Variant each candidate simulates for each configuration (an
    // after-selection loss simulates none: it reads healthy's).
    let (after_selection, simulated): (Vec<String>, Vec<String>) = opts.hypotheses.iter().cloned().partition(|h| after_selection(h));
    let plan: Vec<(String, BTreeMap<String, String>)> = simulated
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
        after_selection,
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
                loss: None,
            });
        }
        if !self.after_selection.is_empty() {
            // Healthy's recalls, which an after-selection loss scales.
            let healthy = (0..self.needle_multipliers.len())
                .map(|j| rows.iter().map(|r| self.recall_at(HEALTHY, r, j).map(|(p, _)| p)).collect())
                .collect::<Result<Vec<Vec<f64>>, Error>>()?;
            let (multiples, central) = (&self.needle_multipliers, self.central());
            ranked.extend(rank_losses(rows, &self.after_selection, &healthy, trials, multiples, central, self.reading));
        }
        Ok((rank(ranked), trials))
    }
}

impl Prepared {
    /// The verdict on the counts of `rows`: [`Self::rank`], the classes and
    /// [`judge`] (outside the catalogue when the best fits badly).
    pub fn verdict(&self, rows: &[Observation]) -> Result<Verdict, Error> {
        let (ranking, trials) = self.rank(rows)?;
        Ok(judge(rows, &ranking, &class_standings(&ranking), trials).0)
    }
}

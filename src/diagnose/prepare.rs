//! A prepared diagnosis: the simulations of every candidate on the
//! observed configurations, and the recall each gives an observed row.

use super::candidates::*;
use super::observations::Observation;
use super::rank::*;
use super::repeats::{repeats_may_differ, row_log_likelihood};
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
    /// Multiples of the needle knob each candidate's likelihood is marginal
    /// over, under a uniform prior on them ([`NUISANCE_MULTIPLIERS`];
    /// `[1.0]`: the scenario's needle, known).
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
    /// The chunk a row of chunk 0 is simulated with ([`row_chunk`]).
    one_chunk: u64,
    reading: Reading,
    path: String,
    /// After-selection losses: scored on healthy's simulation ([`super::loss`]).
    after_selection: Vec<String>,
    /// Whether the ranking adds each fault's length-gated form ([`super::gate`]).
    gates: bool,
}

/// A chunk fault needs every row's chunk once any row has one (`checked`:
/// `params` with the rows' chunk).
fn check_chunks(
    checked: &ScenarioParams,
    params: &ScenarioParams,
    path: &str,
    rows: &[Observation],
    opts: &Options<'_>,
) -> Result<(), Error> {
    if checked.geometry.prefill_chunk.is_none() {
        return Ok(());
    }
    let chunk_fault = opts.hypotheses.iter().find(|h| h.split('+').any(is_chunk_fault));
    // 0 is a chunk too: the prompt in one chunk (see `one_chunk` in [`prepare`]).
    let lacking = rows.iter().find(|r| r.prefill_chunk.or(params.geometry.prefill_chunk).is_none());
    match (chunk_fault, lacking) {
        (Some(h), Some(r)) => Err(Error::Input {
            location: format!("{path}:{}", r.line),
            message: format!(
                "prefill_chunk is missing: candidate {h} needs every row's prefill chunk (a prefill_chunk column, or --prefill-chunk N for rows without one)"
            ),
        }),
        _ => Ok(()),
    }
}

/// Simulates every candidate of `opts.hypotheses` in the cells of `rows`
/// (file `path`) with scenario `params` (resolved, unchecked).
pub fn prepare(params: &ScenarioParams, path: &str, rows: &[Observation], opts: &Options<'_>) -> Result<Prepared, Error> {
    let mut ok = BTreeMap::new();
    let checked = params_for_rows(params, rows);
    check_chunks(&checked, params, path, rows, opts)?;
    let params = &checked;
    let configs: Vec<String> = {
        let mut c: Vec<String> = rows.iter().map(|r| r.config.clone()).collect();
        c.sort();
        c.dedup();
        c
    };
    // Variant each candidate simulates for each configuration: a fault of
    // the quantized cache's reader acts only on configurations that use it
    // (an after-selection loss simulates none: it reads healthy's).
    let unquantized = unquantized_configs(params, &configs);
    let (after_selection, simulated): (Vec<String>, Vec<String>) = opts.hypotheses.iter().cloned().partition(|h| after_selection(h));
    let plan: Vec<(String, BTreeMap<String, String>)> = simulated
        .iter()
        .map(|h| {
            let m = configs
                .iter()
                .map(|c| {
                    let acting = if unquantized.contains(c) { without_cache_layout(h) } else { h.clone() };
                    let v = if acting.is_empty() { None } else { variant_under(params, c, &acting, &mut ok) };
                    (c.clone(), v.unwrap_or_else(|| c.clone()))
                })
                .collect();
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
    // Rows are simulated with their own prefill chunk (the column), else the
    // scenario's. A chunk fault cannot be simulated without a chunk, so
    // where one is planned, chunk 0 (the prompt in one chunk) is simulated
    // as one chunk longer than any prompt: the same rows are visible.
    let scenario_chunk = params.geometry.prefill_chunk.unwrap_or(0);
    let chunk_planned = variants.iter().any(|v| v.split('+').any(is_chunk_fault));
    let one_chunk = if chunk_planned { crate::config::MAX_CONTEXT } else { 0 };
    let mut by_chunk: BTreeMap<u64, Vec<(u64, f64, u64)>> = BTreeMap::new();
    for r in rows {
        let chunk = row_chunk(r, scenario_chunk, one_chunk);
        by_chunk.entry(chunk).or_default().push((r.context_tokens, r.depth_percent, r.topk));
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
        one_chunk,
        reading: opts.reading,
        path: path.to_string(),
        after_selection,
        gates: true,
    })
}

/// Whether a candidate's part needs each row's prefill chunk.
fn is_chunk_fault(part: &str) -> bool {
    matches!(part.trim(), "chunk-local" | "chunk-stale")
}

/// The prefill chunk row `r` is simulated with: its own, else the
/// scenario's; `one_chunk` for a chunk of 0 (the prompt in one chunk).
fn row_chunk(r: &Observation, scenario_chunk: u64, one_chunk: u64) -> u64 {
    match r.prefill_chunk.unwrap_or(scenario_chunk) {
        0 => one_chunk,
        c => c,
    }
}

/// The configurations of `configs` whose keys are stored unquantized (no
/// scale: bf16, fp32), when some other configuration's keys are quantized:
/// those read another cache than the quantized one whose byte layout the
/// cache-layout hypotheses break. Empty when every configuration is of one
/// kind (the fault then lives in the cache they all use).
pub(super) fn unquantized_configs(params: &ScenarioParams, configs: &[String]) -> Vec<String> {
    let quantized = |c: &String| {
        let mut p = params.clone();
        p.sweep.precisions = Some(crate::config::ListSpec::Text(c.clone()));
        // A configuration that does not check is left as it was (quantized).
        crate::config::check(p).ok().and_then(|s| s.precisions.first().map(|v| v.key.scaling.is_some())).unwrap_or(true)
    };
    let (q, u): (Vec<&String>, Vec<&String>) = configs.iter().partition(|c| quantized(c));
    if q.is_empty() {
        return Vec::new();
    }
    u.into_iter().cloned().collect()
}

/// Candidate `h` without its cache-layout parts (`block-row0+ties-lowest`
/// → `ties-lowest`); empty when no fault is left (`block-row0+layers=0..3`:
/// a layer set, length gate or needle multiple only qualifies a fault).
pub(super) fn without_cache_layout(h: &str) -> String {
    use crate::score::hypothesis::{Group, Hypothesis, Role};
    const QUALIFIERS: [&str; 3] = ["layers=SET", "layer-share=F", "needle=M"];
    let parts: Vec<(&str, Option<Hypothesis>)> = h.split('+').map(str::trim).map(|p| (p, Hypothesis::parse(p).ok())).collect();
    let kept: Vec<&(&str, Option<Hypothesis>)> =
        parts.iter().filter(|(_, x)| x.as_ref().is_none_or(|x| x.info.group != Group::CacheLayout)).collect();
    let qualifier =
        |x: &Option<Hypothesis>| x.as_ref().is_some_and(|x| QUALIFIERS.contains(&x.info.name) || matches!(x.info.role, Role::LengthGate));
    if kept.iter().all(|(_, x)| qualifier(x)) {
        return String::new();
    }
    kept.iter().map(|(p, _)| *p).collect::<Vec<_>>().join("+")
}

impl Prepared {
    /// The same, ranking the candidates as named, without their
    /// length-gated forms (what diagnose did before it tried them; the
    /// recovery studies of fixed candidate sets).
    pub fn without_gates(mut self) -> Self {
        self.gates = false;
        self
    }

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
            .and_then(|sim| {
                sim.get(&(row_chunk(r, self.scenario_chunk, self.one_chunk), key(r.context_tokens, r.depth_percent, r.topk, v)))
            })
            .ok_or_else(|| missing(format!("no simulated cell for {v} here")))?;
        Ok((s.recall_for(r.layer, self.reading)?, s.trials))
    }

    /// The ranking of the prepared candidates on the counts of `rows` (in
    /// the prepared cells), and the simulated trials per cell. A
    /// candidate's likelihood is marginal over the needle multiples (a
    /// uniform prior on the grid, `rank::over_needle`); its recalls are
    /// those at the multiple that fits it best.
    pub fn rank(&self, rows: &[Observation]) -> Result<(Vec<Ranked>, u64), Error> {
        let every: Vec<usize> = (0..self.needle_multipliers.len()).collect();
        self.rank_over(rows, &every)
    }

    /// As [`Self::rank`], with the needle fixed at the scenario's own
    /// (multiple 1): how much of the answer hangs on the unknown needle.
    pub fn rank_at_own_needle(&self, rows: &[Observation]) -> Result<(Vec<Ranked>, u64), Error> {
        self.rank_over(rows, &[self.central()])
    }

    /// The ranking over the needle multiples at indices `slots`
    /// (which hold [`Self::central`]).
    fn rank_over(&self, rows: &[Observation], slots: &[usize]) -> Result<(Vec<Ranked>, u64), Error> {
        let central = self.central();
        let at_central = slots.iter().position(|&j| j == central).unwrap_or(0);
        let mut ranked = Vec::new();
        let mut trials = 0;
        for (h, m) in &self.plan {
            let changed = rows.iter().filter(|r| m.get(&r.config).is_some_and(|v| *v != r.config)).count();
            let may_differ = repeats_may_differ(h);
            let mut lls = Vec::with_capacity(slots.len());
            let mut recalls_at = Vec::with_capacity(slots.len());
            for &j in slots {
                let mut ll = 0.0;
                let mut recalls = Vec::new();
                for r in rows {
                    let (p, n) = self.recall_at(h, r, j)?;
                    trials = n;
                    ll += row_log_likelihood(r, p, n, may_differ);
                    recalls.push(p);
                }
                lls.push(ll);
                recalls_at.push(recalls);
            }
            // Marginal over the needle; read at the best multiple, the
            // scenario's own on a tie (the counts do not prefer another).
            let needle = over_needle(&lls, at_central);
            ranked.push(Ranked {
                hypothesis: h.clone(),
                log_likelihood: needle.log_likelihood,
                posterior: 0.0,
                log10_bayes_factor: 0.0,
                rows_changed: changed,
                recalls: recalls_at.swap_remove(needle.best),
                class: candidate_class(h),
                needle_multiplier: self.needle_multipliers[slots[needle.best]],
                needle_gain_log10: needle.gain_log10,
                loss: None,
                gate: None,
            });
        }
        let mut ranked = pool_bounds(ranked);
        if !self.after_selection.is_empty() {
            // Healthy's recalls, which an after-selection loss scales.
            let healthy = slots
                .iter()
                .map(|&j| rows.iter().map(|r| self.recall_at(HEALTHY, r, j).map(|(p, _)| p)).collect())
                .collect::<Result<Vec<Vec<f64>>, Error>>()?;
            let multiples: Vec<f64> = slots.iter().map(|&j| self.needle_multipliers[j]).collect();
            ranked.extend(rank_losses(rows, &self.after_selection, &healthy, trials, &multiples, at_central, self.reading));
        }
        if self.gates {
            let recall_at = |h: &str, r: &Observation, j: usize| self.recall_at(h, r, j);
            ranked.extend(super::gate::rank_gated(&self.plan, &self.needle_multipliers, &recall_at, rows, (slots, at_central))?);
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

//! A whole diagnosis: ranking, classes, verdict, unexplained rows and the
//! next experiment, in one result.

use super::candidates::*;
use super::gof::GoodnessOfFit;
use super::next::*;
use super::observations::{self};
use super::prepare::*;
use super::rank::*;
use super::separation;
use super::simulate::*;
use super::verdict::*;
use crate::config::ScenarioParams;
use crate::error::Error;
use serde::Serialize;

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
    /// The best candidate's goodness of fit (None without rows).
    pub fit: Option<GoodnessOfFit>,
    /// The needle knob the likelihoods are averaged over, and its multiples.
    pub needle_knob: String,
    pub needle_multipliers: Vec<f64>,
    /// How much of the verdict hangs on the unknown needle (None when the
    /// needle is known): the best fit's multiple, and what the verdict
    /// would be with the scenario's own needle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needle_dependence: Option<String>,
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
    notes.extend(weak_evidence(rows));
    let classes = class_standings(&ranking);
    let (mut verdict, unexplained, fit) = judge(rows, &ranking, &classes, trials);
    // Outside the catalogue, no pair is open: every candidate fails.
    let separation = open_pair(&ranking, &classes)
        .filter(|_| verdict.kind != "outside")
        .map(|(a, b)| separation::Separation::of(&a.hypothesis, &b.hypothesis, &a.recalls, &b.recalls, trials));
    if let Some(s) = &separation {
        let mut totals: Vec<u64> = rows.iter().map(|r| r.total).collect();
        totals.sort_unstable();
        verdict.text.push_str(&format!("; {}", s.sentence(totals.get(totals.len() / 2).copied().unwrap_or(0))));
    }
    if !unexplained.is_empty() && verdict.kind != "outside" {
        verdict.text.push_str(&format!(
            "; but even {} leaves {} of {} rows unexplained (p < {UNEXPLAINED_P}): the fault may not be in the catalogue, or the scenario may not match the deployment (calibrate first: docs/CALIBRATION.md)",
            ranking[0].hypothesis,
            unexplained.len(),
            rows.len()
        ));
    }
    let needle_dependence = needle_dependence(&prepared, rows, &ranking, &classes)?;
    Ok(Diagnosis {
        observations: obs.path.clone(),
        reading: opts.reading,
        trials,
        ranking,
        classes,
        verdict,
        unexplained,
        fit,
        needle_knob: prepared.needle_knob,
        needle_multipliers: prepared.needle_multipliers,
        needle_dependence,
        not_applicable: prepared.not_applicable,
        next,
        next_capture,
        separation,
        notes,
    })
}

/// Fewer prompts than this per row (the median row) is flagged as weak
/// evidence: an assumption, not a test. Below it a row's observed recall
/// takes so few values (0 or 1 for one prompt) that one prompt more or
/// less can reorder candidates that are close.
pub const WEAK_EVIDENCE_PROMPTS: u64 = 5;

/// The note for observations with few prompts per row (see [`WEAK_EVIDENCE_PROMPTS`]).
pub(super) fn weak_evidence(rows: &[observations::Observation]) -> Option<String> {
    let mut totals: Vec<u64> = rows.iter().map(|r| r.total).collect();
    totals.sort_unstable();
    let median = *totals.get(totals.len() / 2)?;
    (median < WEAK_EVIDENCE_PROMPTS).then(|| {
        format!(
            "weak evidence: the median row has {median} prompt(s) (fewer than {WEAK_EVIDENCE_PROMPTS} is taken as weak here), \
             so each row's recall is seen only coarsely{}; read the ranking as a lead and repeat the prompts of the rows that matter before acting on it",
            if median == 1 { " (0 or 1)" } else { "" }
        )
    })
}

/// The easiest and hardest needle multiples tried.
fn profile_ends(multipliers: &[f64]) -> (f64, f64) {
    multipliers.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &m| (lo.min(m), hi.max(m)))
}

/// When the best candidate fits at least 10:1 better at the easiest or
/// hardest needle tried than at the scenario's own, the scenario's needle likely differs from the user's prompts
/// by more than the grid spans: a calibration on rows from a healthy
/// configuration pins it (docs/CALIBRATION.md) before faults are compared.
pub(super) fn calibrate_first(ranking: &[Ranked], knob: &str, multipliers: &[f64]) -> Option<String> {
    let best = ranking.first()?;
    let (lo, hi) = profile_ends(multipliers);
    let at_edge = best.needle_multiplier == lo || best.needle_multiplier == hi;
    if multipliers.len() < 2 || !at_edge || best.needle_gain_log10 < DECISIVE_LOG10 {
        return None;
    }
    Some(format!(
        "{} fits at least 10:1 better at {knob} × {} (the edge of the needle grid {}) than with the scenario's own needle: your prompts' needle may differ from it by more than the grid spans; \
         calibrate first (dsa-recall calibrate with rows from a configuration you know is healthy, docs/CALIBRATION.md) and diagnose against the calibrated scenario",
        best.hypothesis,
        best.needle_multiplier,
        multipliers.iter().map(|m| format!("{m}")).collect::<Vec<_>>().join(", ")
    ))
}

/// The verdict in a few words: its kind and, for a fault, the class and
/// best candidate.
fn verdict_gist(v: &Verdict, classes: &[ClassStanding], ranking: &[Ranked]) -> String {
    let first = |i: usize| classes.get(i).map_or(String::from("?"), |c| format!("{} ({})", c.class, c.best));
    match v.kind.as_str() {
        "healthy" => "consistent with a healthy indexer".into(),
        "fault" => format!("a fault of class {}", first(0)),
        "inconclusive" => format!("inconclusive between {} and {}", first(0), first(1)),
        "not-selection" => format!("not a selection fault ({})", ranking.first().map_or("?", |r| r.hypothesis.as_str())),
        other => other.to_string(),
    }
}

/// How much of the answer hangs on the needle (docs/OBSERVATIONS.md,
/// "What diagnose does not know"): the best candidate's needle multiple,
/// and the verdict with the needle fixed at the scenario's own, from the
/// same simulations (the goodness of fit aside on both sides). None when
/// diagnose tries one needle only.
pub(super) fn needle_dependence(
    prepared: &Prepared,
    rows: &[observations::Observation],
    ranking: &[Ranked],
    classes: &[ClassStanding],
) -> Result<Option<String>, Error> {
    let multiples = &prepared.needle_multipliers;
    let (Some(best), true) = (ranking.first(), multiples.len() >= 2) else { return Ok(None) };
    let (fixed, _) = prepared.rank_at_own_needle(rows)?;
    let fixed_classes = class_standings(&fixed);
    let averaged = verdict(ranking, classes);
    let at_own = verdict(&fixed, &fixed_classes);
    let (gist, own_gist) = (verdict_gist(&averaged, classes, ranking), verdict_gist(&at_own, &fixed_classes, &fixed));
    let (lo, hi) = profile_ends(multiples);
    let span = format!("{} × {lo}–{hi}", prepared.needle_knob);
    let fit = if best.needle_multiplier == 1.0 {
        format!("{} fits best with the scenario's own needle (averaged over {span})", best.hypothesis)
    } else {
        format!(
            "{} fits best at × {} of the scenario's needle (averaged over {span}; 10^{:.1} better than at × 1)",
            best.hypothesis, best.needle_multiplier, best.needle_gain_log10
        )
    };
    Ok(Some(if gist == own_gist {
        format!("{fit}; with the needle fixed at × 1 the verdict is the same: it does not hang on the needle")
    } else {
        format!("{fit}; the answer hangs on the needle: fixed at × 1 it would be {own_gist}, averaged over the needle it is {gist}")
    }))
}

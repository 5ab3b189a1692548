//! Length-gated forms of the candidates (`H+longer-than=T`), tried by
//! diagnose itself: the fault acts only in prompts longer than T tokens and
//! the selection is healthy's below (docs/HYPOTHESES.md, `longer-than=T`).
//! They need no simulation of their own: a gated variant is its base, trial
//! by trial, up to T and the fault beyond (`TrialSpec::gate_by_length`), so
//! a row's recall is healthy's or the fault's as already simulated. T is
//! marginal over the steps between the observed prompt lengths (a uniform
//! prior over them: a fault with a free onset pays for that freedom, as a
//! fitted loss does), and over the needle multiples as every candidate's
//! is (`rank::over_needle`); the onset and recalls reported are the best
//! onset's at the best multiple.

use super::candidates::HEALTHY;
use super::observations::Observation;
use super::rank::{log_mean_exp, over_needle, Ranked};
use super::repeats::{repeats_may_differ, row_log_likelihood};
use crate::error::Error;
use crate::score::hypothesis::{candidate_class, FaultClass, Hypothesis, Role};
use std::collections::BTreeMap;

/// A candidate's simulated recall (unclamped) and trials in a row's cell at
/// needle multiple `j` (`Prepared::recall_at`).
pub(super) type RecallAt<'a> = &'a dyn Fn(&str, &Observation, usize) -> Result<(f64, u64), Error>;

/// The gate's name in a candidate.
const GATE: &str = "longer-than";

/// The onsets a gated form is tried at: every observed prompt length but
/// the longest (the fault acts in the rows longer than it), ascending;
/// empty when the rows have fewer than two lengths.
pub(super) fn onsets(rows: &[Observation]) -> Vec<u64> {
    let mut lengths: Vec<u64> = rows.iter().map(|r| r.context_tokens).collect();
    lengths.sort_unstable();
    lengths.dedup();
    lengths.pop();
    lengths
}

/// Whether candidate `h` gets a gated form: a fault that is not gated
/// already, has no onset of its own (an address-space fault's bound is
/// one: a gate on it would count the onset twice) and is not a loss
/// after the selection (which the plan does not hold).
pub(super) fn gateable(h: &str) -> bool {
    h != HEALTHY
        && candidate_class(h) != FaultClass::AddressSpace
        && !h.split('+').filter_map(|p| Hypothesis::parse(p.trim()).ok()).any(|p| matches!(p.info.role, Role::LengthGate))
}

/// `h` acting only in prompts longer than `t` tokens.
pub fn gated_name(h: &str, t: u64) -> String {
    format!("{h}+{GATE}={t}")
}

/// The candidate a gated form gates (None for any other name).
pub fn gated_base(name: &str) -> Option<&str> {
    name.rsplit_once(&format!("+{GATE}=")).map(|(base, _)| base)
}

/// Each gateable candidate of `plan` in gated form, ranked on the counts
/// of `rows` over the needle multiples at `slots` of `multiples`
/// (`at_central`: the position of the scenario's own needle among them);
/// unsorted, posteriors unset. Empty when the rows have one length.
pub(super) fn rank_gated(
    plan: &[(String, BTreeMap<String, String>)],
    multiples: &[f64],
    recall_at: RecallAt<'_>,
    rows: &[Observation],
    (slots, at_central): (&[usize], usize),
) -> Result<Vec<Ranked>, Error> {
    let onsets = onsets(rows);
    if onsets.is_empty() {
        return Ok(Vec::new());
    }
    // Healthy's recall per slot and row: a gated form's below its onset.
    let healthy = slots
        .iter()
        .map(|&j| rows.iter().map(|r| recall_at(HEALTHY, r, j)).collect::<Result<Vec<_>, _>>())
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    for (h, m) in plan.iter().filter(|(h, _)| gateable(h)) {
        let may_differ = repeats_may_differ(h);
        // Per slot: the marginal log-likelihood over the onsets, the best
        // onset and its recalls.
        let mut at_slot: Vec<(f64, u64, Vec<f64>)> = Vec::with_capacity(slots.len());
        for (s, &j) in slots.iter().enumerate() {
            let fault = rows.iter().map(|r| recall_at(h, r, j)).collect::<Result<Vec<_>, _>>()?;
            let mut best: Option<(f64, u64, Vec<f64>)> = None;
            let mut lls = Vec::with_capacity(onsets.len());
            for &t in &onsets {
                let mut ll = 0.0;
                let mut recalls = Vec::with_capacity(rows.len());
                for (i, r) in rows.iter().enumerate() {
                    let (p, n) = if r.context_tokens > t { fault[i] } else { healthy[s][i] };
                    ll += row_log_likelihood(r, p, n, may_differ);
                    recalls.push(p);
                }
                lls.push(ll);
                if best.as_ref().is_none_or(|b| ll > b.0) {
                    best = Some((ll, t, recalls));
                }
            }
            let Some((top, t, recalls)) = best else { continue };
            at_slot.push((log_mean_exp(lls.iter().copied(), top), t, recalls));
        }
        if at_slot.len() != slots.len() {
            continue;
        }
        let needle = over_needle(&at_slot.iter().map(|a| a.0).collect::<Vec<_>>(), at_central);
        let best = needle.best;
        let (_, t, recalls) = at_slot.swap_remove(best);
        let name = gated_name(h, t);
        out.push(Ranked {
            log_likelihood: needle.log_likelihood,
            posterior: 0.0,
            log10_bayes_factor: 0.0,
            rows_changed: rows.iter().filter(|r| r.context_tokens > t && m.get(&r.config).is_some_and(|v| *v != r.config)).count(),
            recalls,
            // The gate says when, H what: H's class (a named composite
            // with a gate is `schedule`, a prefill schedule fault).
            class: candidate_class(h),
            needle_multiplier: multiples[slots[best]],
            needle_gain_log10: needle.gain_log10,
            loss: None,
            gate: Some(t),
            hypothesis: name,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onsets_names_and_what_is_gated() {
        let csv = "context_tokens,depth_percent,topk,config,found,total\n8K,50,512,fp8,1,2\n4K,50,512,fp8,1,2\n8K,90,512,fp8,1,2\n";
        let rows = super::super::observations::parse("t.csv", csv, &|_| Ok(())).unwrap().rows;
        assert_eq!(onsets(&rows), [4096]);
        assert!(onsets(&rows[..1]).is_empty(), "one length: nothing to gate");
        assert_eq!(gated_name("slot-shift", 4096), "slot-shift+longer-than=4096");
        assert_eq!(gated_base("slot-shift+longer-than=4096"), Some("slot-shift"));
        assert_eq!(gated_base("slot-shift"), None);
        assert!(gateable("slot-shift") && gateable("scale-unwritten-zero+ties-lowest"));
        assert!(!gateable(HEALTHY) && !gateable("row-shift+longer-than=20K"));
        assert!(!gateable("visible-cap=2048"), "an address bound is an onset already");
        // Named with a gate, a composite is a schedule fault; diagnose's own
        // gated forms keep their base's class (rank_gated).
        assert_eq!(candidate_class(&gated_name("slot-shift", 4096)).to_string(), "schedule");
    }
}

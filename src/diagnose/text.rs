//! The diagnosis as a text table.

use super::candidates::*;
use super::gof::OUTSIDE_P;
use super::outcome::*;
use super::rank::*;
use crate::score::hypothesis::{candidate_summary, FaultClass};

/// Candidates tied on likelihood folded into one line from this many on
/// (fewer are listed: a fold of two saves no space).
pub const FOLD_TIES_FROM: usize = 3;

/// The ranking as a table (runs of tied candidates folded into one line),
/// the classes and the verdict under it, then the next experiment.
pub fn format_table(d: &Diagnosis) -> String {
    table(d, false)
}

/// [`format_table`] with every candidate on its own line.
pub fn format_full_table(d: &Diagnosis) -> String {
    table(d, true)
}

/// Runs of candidates with the same log-likelihood, in ranking order: (first index, length).
pub(super) fn tied_runs(ranking: &[Ranked]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, r) in ranking.iter().enumerate() {
        match runs.last_mut() {
            // The same counts under the same recalls: equal to the last bits, or nearly.
            Some((start, len)) if (ranking[*start].log_likelihood - r.log_likelihood).abs() <= 1e-9 * r.log_likelihood.abs().max(1.0) => {
                *len += 1
            }
            _ => runs.push((i, 1)),
        }
    }
    runs
}

fn table(d: &Diagnosis, all: bool) -> String {
    let knob = if d.needle_multipliers.len() > 1 {
        format!(
            "; likelihoods averaged over {} × {} (the needle's difficulty is not known)",
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
    let folded: Vec<(usize, usize)> = if all { Vec::new() } else { tied_runs(&d.ranking) };
    let folded: Vec<(usize, usize)> = folded.into_iter().filter(|&(_, len)| len >= FOLD_TIES_FROM).collect();
    for (i, r) in d.ranking.iter().enumerate() {
        if let Some(&(start, len)) = folded.iter().find(|&&(start, len)| i > start && i < start + len) {
            if i == start + 1 {
                push_fold(&mut out, &d.ranking[start + 1..start + len], start + 2);
            }
            continue;
        }
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
            match &r.loss {
                Some(loss) => format!("{} (fitted: {})", candidate_summary(&r.hypothesis), loss.describe()),
                None => candidate_summary(&r.hypothesis),
            }
        ));
    }
    push_legend(d, &mut out);
    push_classes_and_verdict(d, &mut out);
    out
}

/// One line for `rest`, the candidates tied with the row above it (ranks from `first_rank`).
fn push_fold(out: &mut String, rest: &[Ranked], first_rank: usize) {
    const NAMED: usize = 4;
    let mut names: Vec<&str> = rest.iter().take(NAMED).map(|r| r.hypothesis.as_str()).collect();
    if rest.len() > NAMED {
        names.push("…");
    }
    out.push_str(&format!(
        "{:>4}  … and {} more tied with it at log-lik {:.3} (ranks {}–{}): {}; --all lists each\n",
        "",
        rest.len(),
        rest[0].log_likelihood,
        first_rank,
        first_rank + rest.len() - 1,
        names.join(", ")
    ));
}

/// What the columns of the ranking mean, under it.
fn push_legend(d: &Diagnosis, out: &mut String) {
    out.push_str(
        "columns: log-lik = natural log of the probability of the observed counts under the candidate;\n  \
         posterior = its probability given them (prior uniform over the candidates);\n  \
         log10 BF = log10 of its Bayes factor against the best; changes = observed rows whose configuration it alters\n",
    );
    if d.needle_multipliers.len() > 1 {
        out.push_str(&format!(
            "  needle × = the multiple of {} at which it fits best (the needle's difficulty is not known: its likelihood is averaged over the multiples, this is the best one)\n",
            d.needle_knob
        ));
    }
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
    if let Some(f) = &d.fit {
        out.push_str(&format!(
            "\ngoodness of fit of {}: deviance {:.1} over {} rows, {} ({} parametric bootstrap draws; below {OUTSIDE_P}: outside the catalogue)\n",
            f.hypothesis,
            f.deviance,
            d.ranking.first().map_or(0, |r| r.recalls.len()),
            super::verdict::p_text(f.p_value),
            f.draws
        ));
    }
    out.push_str(&format!("\nverdict: {}\n", d.verdict.text));
    for c in verdict_classes(&d.verdict, &d.classes) {
        out.push_str(&format!("  {c}: {}\n", c.meaning()));
    }
    if let Some(n) = &d.needle_dependence {
        out.push_str(&format!("needle: {n}\n"));
    }
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
        if let Some(why) = small_information(&d.ranking, n) {
            out.push_str(&format!("  ({why})\n"));
        }
    }
    if let Some(n) = &d.next_capture {
        out.push_str(&format!(
            "or a per-layer capture of the indexer's top-k (sglang --enable-return-indexer-topk, then dsa-recall observe), one layer per prompt: {}\n",
            n.describe()
        ));
    }
}

/// The classes the verdict names, for their plain sentences: healthy; the
/// best class of a fault; the best two of an inconclusive verdict.
pub(super) fn verdict_classes(verdict: &super::verdict::Verdict, classes: &[ClassStanding]) -> Vec<FaultClass> {
    let named = match verdict.kind.as_str() {
        "healthy" => return vec![FaultClass::Healthy],
        "not-selection" => return vec![FaultClass::NotSelection],
        "fault" => 1,
        "inconclusive" => 2,
        _ => 0,
    };
    classes.iter().take(named).map(|c| c.class).collect()
}

/// Why a next experiment carries little information per prompt while a
/// few prompts would still give 20:1 between the leaders (it reads as a
/// contradiction otherwise): the posterior already favours the leader, so
/// the average prompt teaches little, though it would settle the pair.
pub(super) fn small_information(ranking: &[Ranked], n: &super::next::NextExperiment) -> Option<String> {
    let leader = ranking.first().filter(|r| r.posterior >= 0.9 && n.information_per_prompt < 1e-3)?;
    n.prompts_for_20_to_1?;
    Some(format!(
        "little information per prompt because the posterior already favours {} at {:.3}; plan by the prompts for 20:1",
        leader.hypothesis, leader.posterior
    ))
}

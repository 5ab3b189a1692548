//! The diagnosis as a text table.

use super::candidates::*;
use super::outcome::*;
use super::rank::*;
use crate::score::hypothesis::candidate_summary;

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

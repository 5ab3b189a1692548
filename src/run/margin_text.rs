//! The needle margin as the sweep's table prints it (docs/MODEL.md, "The
//! needle margin"): per depth, each cell's margin with its interval, then
//! what each k and each precision keeps of the baseline's margin at the
//! longest context.

use crate::base::units::tokens_label;
use crate::config::Scenario;
use crate::run::cell::CellResult;
use crate::run::sweep::SweepOutcome;
use std::fmt::Write as _;

/// The cell at (depth, context, needle offset, k, precision).
type FindCell<'c> = dyn Fn(f64, u64, Option<u64>, u64, &str) -> Option<&'c CellResult> + 'c;

/// A margin as tables print it: "12.3× [9.8, 14.1]", "≥ 3448×" when it
/// reached exceedance 1, "-" without one.
pub fn margin_text(c: &CellResult) -> String {
    interval_text((c.needle_margin, c.needle_margin_ci_low, c.needle_margin_ci_high), c.needle_margin_unbounded)
}

/// The whole-model margin as tables print it.
pub fn model_margin_text(c: &CellResult) -> String {
    interval_text((c.model_needle_margin, c.model_needle_margin_ci_low, c.model_needle_margin_ci_high), c.model_needle_margin_unbounded)
}

fn interval_text(m: (Option<f64>, Option<f64>, Option<f64>), unbounded: Option<bool>) -> String {
    match m {
        (Some(m), _, _) if unbounded == Some(true) => format!("≥ {}×", short(m)),
        (Some(m), Some(lo), Some(hi)) => format!("{}× [{}, {}]", short(m), short(lo), short(hi)),
        _ => "-".into(),
    }
}

/// Three significant digits, no exponent below 10⁵.
fn short(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x >= 1e5 {
        format!("{x:.2e}")
    } else {
        let digits = (2 - x.abs().log10().floor() as i32).clamp(0, 6) as usize;
        format!("{x:.digits$}")
    }
}

/// The margin tables of a sweep, empty when no cell has a margin; one row
/// per cell when `narrow` (the sweep's tables are printed narrow).
pub fn margin_tables(s: &Scenario, outcome: &SweepOutcome, narrow: bool) -> String {
    let mut out = String::new();
    if !outcome.cells.iter().any(|c| c.needle_margin.is_some()) {
        return out;
    }
    let series: Vec<(u64, &str)> = s.topks.iter().flat_map(|&k| s.precisions.iter().map(move |p| (k, p.name.as_str()))).collect();
    let find = |depth: f64, context: u64, offset: Option<u64>, k: u64, p: &str| {
        outcome.cells.iter().find(|c| {
            c.depth_percent == depth && c.context_tokens == context && c.needle_offset == offset && c.topk == k && c.precision == p
        })
    };
    let _ = writeln!(
        out,
        "\nneedle margin: how many times the profile's median exceedance the needle may have (how many times more haystack rows\n\
         may outscore it) with recall still ≥ {} (95 % interval; ≥ where it holds up to exceedance 1)",
        s.threshold
    );
    let whole = outcome.cells.iter().any(|c| c.model_needle_margin.is_some());
    if narrow {
        narrow_table(&mut out, s, outcome, whole);
        ratios(&mut out, s, &series, &find);
        return out;
    }
    for (title, text) in [("per layer", margin_text as fn(&CellResult) -> String), ("whole model", model_margin_text)] {
        if title == "whole model" && !whole {
            continue;
        }
        grid(&mut out, s, &series, &find, title, text);
    }
    ratios(&mut out, s, &series, &find);
    out
}

/// The narrow layout: one row per cell, per-layer and whole-model margins.
fn narrow_table(out: &mut String, s: &Scenario, outcome: &SweepOutcome, whole: bool) {
    let width = s.precisions.iter().map(|p| p.name.chars().count()).max().unwrap_or(0).max(9);
    let model = |text: &str| if whole { format!("  {text:>24}") } else { String::new() };
    let _ =
        writeln!(out, "{:>8}  {:>7}  {:>6}  {:<width$}  {:>24}{}", "context", "depth", "k", "precision", "per layer", model("whole model"));
    for c in &outcome.cells {
        let label = match c.needle_offset {
            Some(o) if s.needle_offsets.len() > 1 => format!("{} @{o}", tokens_label(c.context_tokens)),
            _ => tokens_label(c.context_tokens),
        };
        let line = format!(
            "{label:>8}  {:>7}  {:>6}  {:<width$}  {:>24}{}",
            format!("{} %", c.depth_percent),
            c.topk,
            c.precision,
            margin_text(c),
            model(&model_margin_text(c))
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// One margin table per depth: contexts by (k, precision).
fn grid<'c>(out: &mut String, s: &Scenario, series: &[(u64, &str)], find: &FindCell<'c>, title: &str, text: fn(&CellResult) -> String) {
    for &depth in &s.depths {
        let _ = write!(out, "{title}, depth {depth} %\n{:>8}", "context");
        for (k, p) in series {
            let _ = write!(out, "  {:>24}", format!("k={k} {p}"));
        }
        out.push('\n');
        for &context in &s.contexts {
            for &offset in &s.needle_offsets {
                let label = match offset {
                    Some(o) if s.needle_offsets.len() > 1 => format!("{} @{o}", tokens_label(context)),
                    _ => tokens_label(context),
                };
                let _ = write!(out, "{label:>8}");
                for (k, p) in series {
                    let _ = write!(out, "  {:>24}", find(depth, context, offset, *k, p).map_or_else(String::new, text));
                }
                out.push('\n');
            }
        }
    }
}

/// What each precision keeps of the first precision's margin and each k of
/// the smallest k's, at the longest context, first depth and offset.
fn ratios<'c>(out: &mut String, s: &Scenario, series: &[(u64, &str)], find: &FindCell<'c>) {
    let (Some(&longest), Some(&depth), Some(&offset)) = (s.contexts.last(), s.depths.first(), s.needle_offsets.first()) else {
        return;
    };
    if series.len() < 2 {
        return;
    }
    let base = s.precisions[0].name.as_str();
    let k0 = s.topks.iter().copied().min().unwrap_or(0);
    let margin = |k: u64, p: &str| find(depth, longest, offset, k, p).and_then(|c| c.needle_margin.filter(|&m| m > 0.0));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{}×", short(a / b)),
        _ => "-".into(),
    };
    let _ = writeln!(
        out,
        "margin kept at {} (depth {depth} %): against {base} at the same k, and against k={k0} with the same precision",
        tokens_label(longest)
    );
    let _ = writeln!(out, "{:>8}  {:<14}  {:>12}  {:>12}", "k", "precision", format!("vs {base}"), format!("vs k={k0}"));
    for &(k, p) in series {
        let m = margin(k, p);
        let vs_base = if p == base { "-".into() } else { ratio(m, margin(k, base)) };
        let vs_k = if k == k0 { "-".into() } else { ratio(m, margin(k0, p)) };
        let _ = writeln!(out, "{k:>8}  {p:<14}  {vs_base:>12}  {vs_k:>12}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margins_print_with_three_digits_and_their_bounds() {
        let c = CellResult {
            needle_margin: Some(10.514),
            needle_margin_ci_low: Some(8.43),
            needle_margin_ci_high: Some(11.5),
            needle_margin_unbounded: Some(false),
            ..Default::default()
        };
        assert_eq!(margin_text(&c), "10.5× [8.43, 11.5]");
        let unbounded = CellResult { needle_margin: Some(3448.27), needle_margin_unbounded: Some(true), ..c.clone() };
        assert_eq!(margin_text(&unbounded), "≥ 3448×");
        assert_eq!(margin_text(&CellResult::default()), "-");
        assert_eq!(short(0.8163), "0.816");
    }
}

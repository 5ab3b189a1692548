//! Top-k agreement as the sweep's table prints it (docs/MODEL.md, "Top-k
//! agreement"): per depth, one row per (context, k, pair A:B).

use crate::config::Scenario;
use crate::estimate::estimator::PairAgreement;
use crate::run::sweep::SweepOutcome;
use std::fmt::Write as _;

/// The agreement tables of a sweep run with `--agreement`; empty without
/// pairs. `row_label` labels a row by context and needle offset, as the
/// recall tables do.
pub fn agreement_tables(s: &Scenario, outcome: &SweepOutcome, row_label: fn(u64, Option<u64>, usize) -> String) -> String {
    let mut out = String::new();
    if s.agreement.is_empty() {
        return out;
    }
    let pairs: Vec<String> = s.agreement.iter().map(|&(a, b)| format!("{}:{}", s.precisions[a].name, s.precisions[b].name)).collect();
    let width = pairs.iter().map(|p| p.chars().count()).max().unwrap_or(0).max(9);
    for &depth in &s.depths {
        let _ = writeln!(
            out,
            "\ntop-k agreement at depth {depth} %: share of A's top-k that B also selects (95 % interval), and the share B leaves out\n\
             only through a tie at a cut (either choice correct) or for real; tie share = tie / (tie + real)"
        );
        let _ = writeln!(
            out,
            "{:>8}  {:>6}  {:<width$}  {:>24}  {:>7}  {:>7}  {:>9}",
            "context", "k", "A:B", "agreement", "tie", "real", "tie share"
        );
        for c in outcome.cells.iter().filter(|c| c.depth_percent == depth) {
            for a in &c.agreement {
                let pair = format!("{}:{}", c.precision, a.with);
                let _ = writeln!(
                    out,
                    "{:>8}  {:>6}  {:<width$}  {:>24}  {:>7.4}  {:>7.4}  {:>9}",
                    row_label(c.context_tokens, c.needle_offset, s.needle_offsets.len()),
                    c.topk,
                    pair,
                    agreement_text(a),
                    a.tie_disagreement,
                    a.real_disagreement,
                    a.tie_share.map_or_else(|| "-".into(), |t| format!("{:.1} %", 100.0 * t))
                );
            }
        }
    }
    out
}

/// "0.9712 [0.9701, 0.9723]".
fn agreement_text(a: &PairAgreement) -> String {
    format!("{:.4} [{:.4}, {:.4}]", a.agreement, a.agreement_ci_low.max(0.0), a.agreement_ci_high.min(1.0))
}

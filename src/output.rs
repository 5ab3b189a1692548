//! What a sweep leaves behind: `results.jsonl`, `summary.csv`,
//! `manifest.json`, charts, and the table on stdout.
//!
//! Files are written to a temporary name in the output directory and renamed
//! into place, so a failure never leaves a half-written file.

use crate::config::Scenario;
use crate::error::Error;
use crate::sweep::{CellResult, EffectiveContext, SweepOutcome};
use serde::Serialize;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::Path;

pub const RESULTS_FILE: &str = "results.jsonl";
pub const SUMMARY_FILE: &str = "summary.csv";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const RECALL_CHART_FILE: &str = "recall_vs_context.png";

/// Creates `dir`, refusing a non-empty existing one unless `force`.
pub fn prepare_output_dir(dir: &Path, force: bool) -> Result<(), Error> {
    if dir.exists() {
        let mut entries = fs::read_dir(dir).map_err(|e| Error::io(format!("reading output directory {}", dir.display()), e))?;
        if entries.next().is_some() && !force {
            return Err(Error::OutputNotEmpty(dir.display().to_string()));
        }
    }
    fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating output directory {}", dir.display()), e))
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let io = |e| Error::io(format!("writing {}", path.display()), e);
    let mut f = fs::File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    fs::rename(&tmp, path).map_err(io)
}

/// One JSON object per cell, in sweep order.
pub fn results_jsonl(cells: &[CellResult]) -> String {
    let mut out = String::new();
    for c in cells {
        // Serializing plain numbers, strings and options cannot fail.
        out.push_str(&serde_json::to_string(c).unwrap_or_default());
        out.push('\n');
    }
    out
}

fn opt(x: Option<f64>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

/// The same cells as a tidy CSV, one row each.
pub fn summary_csv(cells: &[CellResult]) -> String {
    let mut out = String::from(
        "context_tokens,depth_percent,topk,precision,trials,survived,recall,ci_low,ci_high,mean_rank,mean_rank_ties,median_rank,trials_with_ties,mean_margin_sd,needle_rows,needle_start_token,needle_in_window,survived_via_window,visible_rows,candidate_rows,k_eff,coverage_limit\n",
    );
    for c in cells {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            c.context_tokens,
            c.depth_percent,
            c.topk,
            c.precision,
            c.trials,
            c.survived,
            c.recall,
            c.ci_low,
            c.ci_high,
            opt(c.mean_rank),
            opt(c.mean_rank_ties),
            opt(c.median_rank),
            c.trials_with_ties,
            opt(c.mean_margin_sd),
            c.needle_rows,
            c.needle_start_token,
            c.needle_in_window,
            c.survived_via_window,
            c.visible_rows,
            c.candidate_rows,
            c.k_eff,
            c.coverage_limit
        );
    }
    out
}

#[derive(Serialize)]
struct Manifest<'a> {
    tool: &'static str,
    version: &'static str,
    seed: u64,
    scenario: &'a Scenario,
    effective_context: &'a [EffectiveContext],
    files: Vec<&'static str>,
}

/// The resolved configuration, seed and crate version.
pub fn manifest_json(scenario: &Scenario, outcome: &SweepOutcome) -> String {
    let m = Manifest {
        tool: "dsa-recall",
        version: env!("CARGO_PKG_VERSION"),
        seed: scenario.seed,
        scenario,
        effective_context: &outcome.effective,
        files: vec![RESULTS_FILE, SUMMARY_FILE, MANIFEST_FILE, RECALL_CHART_FILE],
    };
    serde_json::to_string_pretty(&m).unwrap_or_default() + "\n"
}

/// Token counts as people say them: 1024 → "1K", 1536 → "1.5K", 1048576 → "1M".
pub fn tokens_label(n: u64) -> String {
    const K: u64 = 1024;
    const M: u64 = 1024 * 1024;
    let fmt = |v: f64, unit: &str| {
        let s = format!("{v:.2}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{s}{unit}")
    };
    if n >= M && (n * 100) % M == 0 {
        fmt(n as f64 / M as f64, "M")
    } else if n >= K && (n * 100) % K == 0 {
        fmt(n as f64 / K as f64, "K")
    } else {
        n.to_string()
    }
}

/// The table printed on stdout after a sweep.
pub fn format_table(s: &Scenario, outcome: &SweepOutcome) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "dsa-recall sweep · {} · needle strength {} · {} trials per cell · seed {}",
        s.preset, s.model.needle_strength, s.trials, s.seed
    );
    let series: Vec<(u64, &str)> =
        s.topks.iter().flat_map(|&k| s.precisions.iter().map(move |p| (k, p.name.as_str()))).collect();
    for &depth in &s.depths {
        let _ = writeln!(out, "\nneedle recall at depth {depth} % (95 % Wilson interval)");
        let _ = write!(out, "{:>8}", "context");
        for (k, p) in &series {
            let _ = write!(out, "  {:>22}", format!("k={k} {p}"));
        }
        out.push('\n');
        for &context in &s.contexts {
            let _ = write!(out, "{:>8}", tokens_label(context));
            for (k, p) in &series {
                let cell = outcome
                    .cells
                    .iter()
                    .find(|c| c.depth_percent == depth && c.context_tokens == context && c.topk == *k && c.precision == *p);
                let text = cell.map_or_else(String::new, |c| format!("{:.3} [{:.3}, {:.3}]", c.recall, c.ci_low, c.ci_high));
                let _ = write!(out, "  {text:>22}");
            }
            out.push('\n');
        }
    }
    let _ = writeln!(out, "\neffective context (longest context with recall ≥ {} at every depth and every shorter context)", s.threshold);
    let _ = writeln!(out, "{:>8}  {:<14}  {:>18}  {:>22}", "k", "precision", "effective context", "coverage limit k·c+W");
    for e in &outcome.effective {
        let eff = match (e.effective_context, e.held_at_longest) {
            (None, _) => format!("< {}", tokens_label(s.contexts[0])),
            (Some(c), true) => format!("≥ {}", tokens_label(c)),
            (Some(c), false) => tokens_label(c),
        };
        let _ = writeln!(out, "{:>8}  {:<14}  {:>18}  {:>22}", e.topk, e.precision, eff, e.coverage_limit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_labels() {
        assert_eq!(tokens_label(1024), "1K");
        assert_eq!(tokens_label(1536), "1.5K");
        assert_eq!(tokens_label(131072), "128K");
        assert_eq!(tokens_label(1 << 20), "1M");
        assert_eq!(tokens_label(2176), "2176");
        assert_eq!(tokens_label(1000), "1000");
    }
}

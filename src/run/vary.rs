//! A sweep over a knob's values (`--vary`, docs/MODEL.md "A knob as a sweep
//! axis"): one ordinary sweep directory per value under `--out`, each
//! durable and resumable on its own, and the combined results at the top
//! with the knob as their first column.
//!
//! ```text
//! OUT/manifest.json               the axis, the values, status
//! OUT/results.jsonl, summary.csv  every value's cells, knob first
//! OUT/needle.strength=0.5/        a whole sweep directory per value
//! ```

use crate::base::files::write_file;
use crate::base::observe::Observer;
use crate::config::vary::VaryAxis;
use crate::config::Scenario;
use crate::error::{ConfigError, Error};
use crate::run::cell::CellResult;
use crate::run::output::{self, row_label, MANIFEST_FILE, RESULTS_FILE, SUMMARY_FILE};
use crate::run::store::{self, StoreOptions};
use crate::run::sweep::SweepOutcome;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// `manifest.json` of a knob sweep's top directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VaryManifest {
    pub tool: String,
    pub version: String,
    pub seed: u64,
    /// "running" until every value's sweep is complete, then "complete".
    pub status: String,
    pub vary: VaryAxis,
    /// Each value's sweep directory, in value order.
    pub sweeps: Vec<String>,
    #[serde(default)]
    pub files: Vec<String>,
}

impl VaryManifest {
    fn new(axis: &VaryAxis, seed: u64) -> Self {
        VaryManifest {
            tool: "dsa-recall".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            seed,
            status: "running".into(),
            vary: axis.clone(),
            sweeps: (0..axis.values.len()).map(|i| axis.dir_name(i)).collect(),
            files: vec![MANIFEST_FILE.into()],
        }
    }

    fn write(&self, dir: &Path) -> Result<(), Error> {
        write_file(&dir.join(MANIFEST_FILE), (serde_json::to_string_pretty(self).unwrap_or_default() + "\n").as_bytes())
    }

    /// The knob sweep manifest in `dir`, or None when `dir` holds an
    /// ordinary sweep (its manifest has no `vary`).
    pub fn read(dir: &Path) -> Result<Option<VaryManifest>, Error> {
        let path = dir.join(MANIFEST_FILE);
        let text = match crate::base::files::read_text_capped(&path, crate::base::files::JSON_FILE_CAP) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        };
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::Corrupt { path: path.display().to_string(), message: e.to_string() })?;
        if json.get("vary").is_none() {
            return Ok(None);
        }
        serde_json::from_value(json).map(Some).map_err(|e| Error::Corrupt { path: path.display().to_string(), message: e.to_string() })
    }
}

/// A finished knob sweep: each value's scenario and outcome, in value order.
pub struct VaryOutcome {
    pub axis: VaryAxis,
    pub sweeps: Vec<(Scenario, SweepOutcome)>,
}

/// Runs every value's sweep into its subdirectory of `dir`, durably. A
/// value's directory gets its charts and report from `finish_value` (the
/// report layer) as soon as its sweep is done, so an interruption keeps the
/// values already finished whole. `--shard` is refused: shard one value's
/// sweep at a time (`--needle-strength X --shard I/N`). `observer` sees each
/// value's sweep in turn (its progress starts over at each value).
pub fn sweep_vary(
    dir: &Path,
    axis: &VaryAxis,
    scenarios: &[Scenario],
    opts: StoreOptions,
    observer: &dyn Observer,
    finish_value: &dyn Fn(&Path, &Scenario, &SweepOutcome) -> Result<(), Error>,
) -> Result<VaryOutcome, Error> {
    if opts.shard.is_some() {
        return Err(ConfigError::new(
            "--shard",
            "with --vary",
            "one value at a time: shard each value's sweep (e.g. --needle-strength 2 --shard 1/4) and merge it",
        )
        .into());
    }
    let seed = scenarios.first().map_or(0, |s| s.seed);
    let manifest = VaryManifest::new(axis, seed);
    if opts.resume {
        output::check_output_entries(dir)?;
        match VaryManifest::read(dir)? {
            Some(old) if old.vary == manifest.vary && old.seed == seed => {}
            Some(old) => {
                return Err(Error::Mismatch(format!(
                    "{} was written by a different --vary ({}={} vs {}={}); resume with the same settings, or use a new --out",
                    dir.display(),
                    old.vary.field,
                    old.vary.values_text(),
                    axis.field,
                    axis.values_text()
                )))
            }
            None => {
                return Err(Error::Mismatch(format!(
                    "{} holds no knob sweep (no vary in its {MANIFEST_FILE}); resume it without --vary, or use a new --out",
                    dir.display()
                )))
            }
        }
    } else {
        output::prepare_output_dir(dir, opts.force)?;
    }
    manifest.write(dir)?;
    let mut sweeps = Vec::new();
    for (i, s) in scenarios.iter().enumerate() {
        let sub = dir.join(axis.dir_name(i));
        // A value never started (or killed before its manifest) starts afresh.
        let resume = opts.resume && sub.join(MANIFEST_FILE).exists();
        // Every other option (one added later too) holds for each value's sweep.
        let sub_opts = StoreOptions { force: opts.force || opts.resume, resume, shard: None, ..opts };
        let outcome = store::sweep_into(&sub, s, sub_opts, observer)?;
        finish_value(&sub, s, &outcome)?;
        sweeps.push((s.clone(), outcome));
    }
    let outcome = VaryOutcome { axis: axis.clone(), sweeps };
    write_file(&dir.join(RESULTS_FILE), results_jsonl(&outcome).as_bytes())?;
    write_file(&dir.join(SUMMARY_FILE), summary_csv(&outcome).as_bytes())?;
    Ok(outcome)
}

/// Marks the top directory complete, listing its files.
pub fn finish(dir: &Path, outcome: &VaryOutcome, files: &[String]) -> Result<(), Error> {
    let mut m = VaryManifest::new(&outcome.axis, outcome.sweeps.first().map_or(0, |(s, _)| s.seed));
    m.status = "complete".into();
    m.files = [MANIFEST_FILE, RESULTS_FILE, SUMMARY_FILE].iter().map(|f| f.to_string()).chain(files.iter().cloned()).collect();
    m.write(dir)
}

/// Reads a finished knob sweep back from `dir` (for `plot`): each value's
/// scenario from its manifest and its cells from its results.
pub fn read_vary(dir: &Path, m: &VaryManifest) -> Result<VaryOutcome, Error> {
    let mut sweeps = Vec::new();
    for name in &m.sweeps {
        let sub = dir.join(name);
        let s = store::scenario_from_manifest(&store::Manifest::read(&sub)?)?;
        let path = sub.join(RESULTS_FILE);
        let text = crate::base::files::read_text_capped(&path, crate::base::files::GRID_FILE_CAP)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let mut cells = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let c: CellResult = serde_json::from_str(line)
                .map_err(|e| Error::Corrupt { path: format!("{}:{}", path.display(), n + 1), message: e.to_string() })?;
            cells.push(c);
        }
        let effective = crate::run::sweep::effective_contexts(&s, &cells);
        sweeps.push((s, SweepOutcome { cells, effective }));
    }
    Ok(VaryOutcome { axis: m.vary.clone(), sweeps })
}

/// The value as JSON writes it (`0.5`, `2.0`).
fn json_number(v: f64) -> String {
    serde_json::to_string(&v).unwrap_or_default()
}

/// Every value's cells, one JSON object each, the knob's value first:
/// `{"needle.strength":0.5,"context_tokens":…}`.
pub fn results_jsonl(outcome: &VaryOutcome) -> String {
    let mut out = String::new();
    for (i, (_, sweep)) in outcome.sweeps.iter().enumerate() {
        let key = serde_json::to_string(&outcome.axis.field).unwrap_or_default();
        for line in output::results_jsonl(&sweep.cells).lines() {
            let _ = writeln!(out, "{{{key}:{},{}", json_number(outcome.axis.values[i]), &line[1..]);
        }
    }
    out
}

/// The same as a CSV: `summary.csv`'s columns after the knob's.
pub fn summary_csv(outcome: &VaryOutcome) -> String {
    let mut out = format!("{},{}\n", outcome.axis.field, output::summary_header());
    for (i, (_, sweep)) in outcome.sweeps.iter().enumerate() {
        for line in output::summary_csv(&sweep.cells).lines().skip(1) {
            let _ = writeln!(out, "{},{line}", outcome.axis.value_text(i));
        }
    }
    out
}

/// The table printed after a knob sweep: recall per context and value for
/// each (k, precision) and depth (whole-model with per-layer in
/// parentheses, when there is a stack), then each value's effective context.
pub fn format_table(outcome: &VaryOutcome) -> String {
    let mut out = String::new();
    let Some((first, first_sweep)) = outcome.sweeps.first() else { return out };
    let axis = &outcome.axis;
    let _ = writeln!(
        out,
        "dsa-recall sweep · {} · {} over {} · {} trials per cell · seed {}",
        first.preset,
        axis.label(),
        axis.values_text(),
        first.trials,
        first.seed
    );
    let whole = first_sweep.cells.iter().any(|c| c.model_recall.is_some());
    let width = if whole { 15 } else { 7 };
    let header = |out: &mut String| {
        let _ = write!(out, "{:>9}", "context");
        for i in 0..axis.values.len() {
            let _ = write!(out, " {:>width$}", axis.value_text(i));
        }
        out.push('\n');
    };
    for &depth in &first.depths {
        let _ = writeln!(
            out,
            "\n{} by {} at depth {depth} % (columns: its values)",
            if whole { "whole-model recall (per-layer recall)" } else { "per-layer selection recall" },
            axis.label()
        );
        for &k in &first.topks {
            for p in &first.precisions {
                let _ = writeln!(out, "k={k} {}", p.name);
                header(&mut out);
                for &context in &first.contexts {
                    for &offset in &first.needle_offsets {
                        let _ = write!(out, "{:>9}", row_label(context, offset, first.needle_offsets.len()));
                        for (_, sweep) in &outcome.sweeps {
                            let cell = sweep.cells.iter().find(|c| {
                                c.depth_percent == depth
                                    && c.context_tokens == context
                                    && c.needle_offset == offset
                                    && c.topk == k
                                    && c.precision == p.name
                            });
                            let text = match cell {
                                None => "-".to_string(),
                                Some(c) => match c.model_recall {
                                    Some(m) if whole => format!("{m:.3} ({:.3})", c.recall),
                                    _ => format!("{:.3}", c.recall),
                                },
                            };
                            let _ = write!(out, " {text:>width$}");
                        }
                        out.push('\n');
                    }
                }
            }
        }
    }
    push_effective_table(outcome, whole, &mut out);
    out
}

/// The effective-context table of a vary table: one row per (k, precision),
/// one column per value of the axis.
fn push_effective_table(outcome: &VaryOutcome, whole: bool, out: &mut String) {
    let Some((first, first_sweep)) = outcome.sweeps.first() else { return };
    let axis = &outcome.axis;
    let width = if whole { 15 } else { 7 };
    let _ = writeln!(
        out,
        "\neffective context (recall ≥ {} at every depth and every shorter context){} by {}",
        first.threshold,
        if whole { ": whole model / per layer" } else { "" },
        axis.label()
    );
    let _ = write!(out, "{:>8}  {:<14}", "k", "precision");
    for i in 0..axis.values.len() {
        let _ = write!(out, " {:>width$}", axis.value_text(i));
    }
    out.push('\n');
    for (e_index, e) in first_sweep.effective.iter().enumerate() {
        let _ = write!(out, "{:>8}  {:<14}", e.topk, e.precision);
        for (s, sweep) in &outcome.sweeps {
            let shortest = s.contexts.first().copied().unwrap_or(0);
            let text = match sweep.effective.get(e_index) {
                None => "-".to_string(),
                Some(e) => {
                    let layer = e.layer().label(shortest);
                    match e.model {
                        Some(m) if whole => format!("{} / {layer}", m.label(shortest)),
                        _ => layer,
                    }
                }
            };
            let _ = write!(out, " {text:>width$}");
        }
        out.push('\n');
    }
}

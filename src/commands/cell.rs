//! `run` and `trial`: one cell of the grid (one context, depth and k; `run`
//! one precision, `trial` a list of them).

use crate::base::observe::{Observer, Standing};
use crate::commands::request::ScenarioRequest;
use crate::config::flags::Command;
use crate::config::{params, Scenario};
use crate::error::{ConfigError, Error};
use crate::estimate::driver::NoCheckpoint;
use crate::run::cell::CellResult;
use crate::run::sweep::{group_cells, group_trial_runs, spec_for};
use crate::score::selection::{NeedleRank, AUDIT_RULES};
use crate::score::trial::NeedleOutcome;
use crate::tensors::dump::{self, DumpSummary};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Which one-cell command a request is for: their messages name it, and
/// `run` takes one precision where `trial` takes a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellCommand {
    Run,
    Trial,
}

impl CellCommand {
    /// The command as the knob table knows it (its spellings, the knobs it
    /// does not use).
    fn knobs(self) -> Command {
        match self {
            CellCommand::Run => Command::Run,
            CellCommand::Trial => Command::Trial,
        }
    }
}

/// The cell of `run` or `trial`: the scenario request whose overlay carries
/// the coordinates given (`sweep.contexts` from `--context`, …; a coordinate
/// not given counts only if the scenario's list holds one value).
#[derive(Clone, Debug, PartialEq)]
pub struct CellRequest {
    pub command: CellCommand,
    pub scenario: ScenarioRequest,
}

impl CellRequest {
    /// The checked scenario of the cell: no knob the command does not use,
    /// and every list of the grid holds one value (`trial` may list
    /// precisions). Errors name the command's own flags.
    pub fn scenario(&self) -> Result<Scenario, Error> {
        let command = self.command.knobs();
        params::refuse_unused(&self.scenario.overlay, command)?;
        let s = self.scenario.scenario().map_err(|e| match e {
            Error::Config(c) => Error::Config(params::in_spelling(c, command)),
            e => e,
        })?;
        self.one_cell(&s)?;
        Ok(s)
    }

    /// Every axis of the scenario holds one value (`trial` may list
    /// precisions). A list the user never typed (the preset's) is reported
    /// as a missing flag.
    fn one_cell(&self, s: &Scenario) -> Result<(), ConfigError> {
        let command = self.command.knobs();
        let given = &self.scenario.overlay.sweep;
        let mut axes = vec![
            (s.contexts.len(), "sweep.contexts", given.contexts.is_some()),
            (s.depths.len(), "sweep.depths", given.depths.is_some()),
            (s.topks.len(), "sweep.topk", given.topk.is_some()),
            // Offsets have no one-cell flag: a list is reported as given.
            (s.needle_offsets.len(), "sweep.needle_offsets", true),
        ];
        if self.command == CellCommand::Run {
            axes.push((s.precisions.len(), "sweep.precisions", given.precisions.is_some()));
        }
        let Some((n, path, typed)) = axes.into_iter().find(|&(n, _, _)| n != 1) else { return Ok(()) };
        let field = params::spelling(path, command).map_or(path, |s| s.long);
        let command = command.name();
        Err(if typed {
            ConfigError::new(
                field,
                format!("{n} values"),
                format!("`{command}` simulates one cell: give one value (use `sweep` for lists)"),
            )
        } else {
            ConfigError::new(
                field,
                "(not given)",
                format!("one value: `{command}` simulates one cell, and the scenario's sweep has {n} (use `sweep` for lists)"),
            )
        })
    }
}

/// A single simulated cell and its text report.
pub struct SingleCell {
    pub result: CellResult,
    pub text: String,
}

/// `run`: the one cell of the request's scenario, simulated on its pool;
/// with `print_trials`, the text starts with one line per trial (full
/// simulation only: tail sampling has no single outcomes). `observer`
/// hears of each finished trial, the prediction's too.
pub fn run(request: &CellRequest, print_trials: bool, observer: &dyn Observer) -> Result<SingleCell, Error> {
    let s = request.scenario()?;
    let pool = request.scenario.thread_pool()?;
    pool.install(|| single_cell(&s, print_trials, observer))
}

fn single_cell(s: &Scenario, print_trials: bool, observer: &dyn Observer) -> Result<SingleCell, Error> {
    observer.started(&Standing { trials_total: group_trial_runs(s), ..Standing::default() });
    let spec = spec_for(s, &s.depths[..1]);
    let mut outcomes = Vec::new();
    let cells = group_cells(s, &spec, observer, &NoCheckpoint, print_trials.then_some(&mut outcomes))?;
    let result = cells.into_iter().next().ok_or_else(|| Error::Chart("no cell".into()))?;
    let mut text = String::new();
    if print_trials {
        text.push_str(&trial_lines(&outcomes));
    }
    text.push_str(&cell_text(&result));
    Ok(SingleCell { result, text })
}

/// `run --print-trials`: one line per trial of the cell.
fn trial_lines(outcomes: &[NeedleOutcome]) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "{:>7}  {:>8}  {:>10}  {:>14}  {:>12}", "trial", "survived", "rank (>)", "rank (≥, ties)", "margin (sd)");
    for (t, c) in outcomes.iter().enumerate() {
        let rank = |f: fn(&NeedleRank) -> u64| c.rank.as_ref().map_or("-".to_string(), |r| f(r).to_string());
        let margin = c.margin_sd.map_or("-".to_string(), |m| format!("{m:+.3}"));
        let _ = writeln!(
            text,
            "{t:>7}  {:>8}  {:>10}  {:>14}  {:>12}",
            if c.survived { "yes" } else { "no" },
            rank(|r| r.above),
            rank(|r| r.above_or_equal),
            margin
        );
    }
    text.push('\n');
    text
}

/// The cell's recall, whole-model recall, needle placement and rank.
fn cell_text(r: &CellResult) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{} tokens, depth {} %, k={} (k_eff {}), {}: per-layer selection recall {:.4} [{:.4}, {:.4}] ({} of {} trials)",
        r.context_tokens, r.depth_percent, r.topk, r.k_eff, r.precision, r.recall, r.ci_low, r.ci_high, r.survived, r.trials
    );
    if let Some(p) = r.predicted_recall {
        let _ = writeln!(text, "analytic prediction: per-layer selection recall {p:.4}");
    }
    if let (Some(m), Some(lo), Some(hi), Some(kept), Some(layers)) =
        (r.model_recall, r.model_ci_low, r.model_ci_high, r.model_survived, r.indexed_layers)
    {
        let reached =
            r.layers_reached.map_or_else(String::new, |l| format!("; indexer layers that select it: {l:.2} of {layers} on average"));
        let _ = writeln!(text, "whole-model recall {m:.4} [{lo:.4}, {hi:.4}] ({kept} of {} trials){reached}", r.trials);
    }
    let _ = writeln!(
        text,
        "needle rows {} (first token {}, in raw window: {}), candidate rows {}, coverage limit k·c+W = {}",
        r.needle_rows, r.needle_start_token, r.needle_in_window, r.candidate_rows, r.coverage_limit
    );
    if let (Some(mean), Some(median)) = (r.mean_rank, r.median_rank) {
        let _ = writeln!(
            text,
            "needle rank: mean {mean:.1}, median {median}, mean counting ties {:.1}, trials with ties {}; mean margin {} sd",
            r.mean_rank_ties.unwrap_or(mean),
            r.trials_with_ties,
            r.mean_margin_sd.map_or("-".to_string(), |m| format!("{m:+.3}"))
        );
    }
    if let Some(t) = r.ties.as_ref().filter(|t| t.trials > 0) {
        let kept: Vec<String> = AUDIT_RULES.iter().zip(t.kept).map(|(rule, n)| format!("{rule} {n}")).collect();
        let _ = writeln!(
            text,
            "ties at the cut (--tie-audit): tied rows mean {:.1}, max {}; trials tied {}, split {}, needle at the cut {}; kept by rule: {} of {}",
            t.tied_rows_mean(),
            t.tied_rows_max,
            t.tied,
            t.split,
            t.needle_at_cut,
            kept.join(", "),
            t.trials
        );
    }
    text
}

/// A dumped trial: its scenario and what each variant did.
pub struct Dumped {
    pub scenario: Box<Scenario>,
    pub trial: u64,
    pub path: PathBuf,
    pub summary: DumpSummary,
}

impl Dumped {
    /// What the command line prints: the cell, then one line per variant.
    pub fn text(&self) -> String {
        let s = &self.scenario;
        let mut text = format!(
            "trial {} of {} tokens, depth {} %, k={} (k_eff {} of {} rows) → {}\n",
            self.trial,
            s.contexts[0],
            s.depths[0],
            s.topks[0],
            self.summary.k_eff,
            self.summary.rows,
            self.path.display()
        );
        let _ = writeln!(text, "{:<16} {:>9} {:>12} {:>18}", "precision", "survived", "needle rank", "overlap with fp32");
        for (name, survived, rank, overlap) in &self.summary.variants {
            let rank = rank.map_or("-".to_string(), |r| r.to_string());
            let _ = writeln!(text, "{name:<16} {:>9} {rank:>12} {overlap:>18.4}", if *survived { "yes" } else { "no" });
        }
        text
    }
}

/// `trial --dump`: trial `trial` of the cell with every variant of the
/// request, its tensors written to `path` (safetensors); over
/// [`dump::MAX_DUMP_BYTES`] only with `allow_large`. `on_step` names each
/// step as it starts.
pub fn trial(request: &CellRequest, trial: u64, path: &Path, allow_large: bool, on_step: &dyn Fn(&str)) -> Result<Dumped, Error> {
    let s = request.scenario()?;
    let summary = dump::dump_trial(&s, trial, path, allow_large, on_step)?;
    Ok(Dumped { scenario: Box::new(s), trial, path: path.to_path_buf(), summary })
}

/// The tensors of [`trial`] in memory (the Python binding's `trial`).
pub fn trial_tensors(request: &CellRequest, trial: u64) -> Result<dump::TrialTensors, Error> {
    dump::trial_tensors(&request.scenario()?, trial, &|_| {})
}

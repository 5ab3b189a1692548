//! `sweep` (a grid, a shard of one, or one grid per value of a knob),
//! `merge` (shards back into one directory) and `plot` (a finished
//! directory's charts drawn again). Each holds its directory's lock
//! ([`DirLock`]) while it writes there: a second process on the same
//! directory is refused, naming the holder. Shards write one directory
//! each, so they never contend.

use crate::base::files::DirLock;
use crate::base::observe::Observer;
use crate::commands::request::{ChartRequest, ScenarioRequest};
use crate::config::vary::VaryAxis;
use crate::config::Scenario;
use crate::error::{Error, SimError};
use crate::report::{self, PlotOptions};
use crate::run::output::{self, MANIFEST_FILE, RESULTS_FILE};
use crate::run::plan::Shard;
use crate::run::store::{self, StoreOptions};
use crate::run::sweep::{self, SweepOutcome};
use crate::run::vary::{self, VaryOutcome};
use std::path::{Path, PathBuf};

/// A sweep as asked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepRequest {
    pub scenario: ScenarioRequest,
    /// The output directory; None keeps the sweep in memory (nothing
    /// written, and no resume, shard or knob axis).
    pub out: Option<PathBuf>,
    /// Overwrite a non-empty output directory.
    pub force: bool,
    /// Continue an interrupted sweep in `out`.
    pub resume: bool,
    /// `I/N`: run only that part of the grid.
    pub shard: Option<String>,
    /// A knob swept too, one whole sweep per value.
    pub vary: Option<VaryAxis>,
    pub charts: ChartRequest,
    /// Trials per checkpoint chunk, fixed (a testing knob).
    pub chunk_trials: Option<u64>,
}

/// What a sweep made.
pub enum Swept {
    /// A whole grid (in `out`, when given): the scenario and its cells.
    Grid { out: Option<PathBuf>, scenario: Box<Scenario>, outcome: SweepOutcome },
    /// One shard's part of the grid (`merge` makes the tables and charts).
    Shard { out: PathBuf, shard: String, outcome: SweepOutcome },
    /// One grid per value of a knob, each in its subdirectory of `out`.
    Vary { out: PathBuf, outcome: VaryOutcome },
}

impl Swept {
    /// What the command line prints: the tables and where they went.
    pub fn text(&self) -> String {
        match self {
            Swept::Grid { out, scenario, outcome } => {
                let table = output::format_table(scenario, outcome);
                match out {
                    Some(dir) => format!("{table}\nwrote {}\n", dir.display()),
                    None => table,
                }
            }
            Swept::Shard { out, shard, outcome } => format!("wrote shard {shard} ({} cells) to {}\n", outcome.cells.len(), out.display()),
            Swept::Vary { out, outcome } => {
                format!("{}\nwrote {} (one sweep per value in {}=…/)\n", vary::format_table(outcome), out.display(), outcome.axis.field)
            }
        }
    }

    /// What `--json` prints: one JSON object per cell, the lines of the
    /// directory's `results.jsonl` (a knob sweep's with the knob's value first).
    pub fn json_lines(&self) -> String {
        match self {
            Swept::Grid { outcome, .. } | Swept::Shard { outcome, .. } => output::results_jsonl(&outcome.cells),
            Swept::Vary { outcome, .. } => vary::results_jsonl(outcome),
        }
    }
}

/// Runs a sweep: checks the request, simulates, and writes the directory's
/// files (results as they finish, then tables, charts and `report.html`).
/// When `observer` asks to stop, returns [`SimError::Interrupted`]; a
/// durable sweep can then be resumed.
pub fn sweep(request: &SweepRequest, observer: &dyn Observer) -> Result<Swept, Error> {
    if let Some(axis) = &request.vary {
        return sweep_vary(request, axis, observer);
    }
    let s = request.scenario.scenario()?;
    let shard = request.shard.as_deref().map(Shard::parse).transpose()?;
    let plot = plot_options(&request.charts, &s)?;
    let pool = request.scenario.thread_pool()?;
    store::check_memory(&s, pool.current_num_threads())?;
    let Some(dir) = &request.out else {
        let outcome = pool.install(|| sweep::run_sweep(&s, observer))?;
        return Ok(Swept::Grid { out: None, scenario: Box::new(s), outcome });
    };
    let opts = StoreOptions { force: request.force, resume: request.resume, shard, chunk_trials: request.chunk_trials };
    check_out(dir, request)?;
    // Held until the charts and the final manifest are written.
    let _lock = DirLock::create(dir)?;
    let outcome = pool.install(|| store::sweep_into(dir, &s, opts, observer))?;
    if observer.stop_requested() {
        // The stop came after the last chunk: every cell is on disk, and a
        // resume writes the tables and charts.
        return Err(SimError::Interrupted.into());
    }
    if let (Some(shard), Some(text)) = (shard, &request.shard) {
        store::finish(dir, &s, Some(shard), &outcome, &[MANIFEST_FILE.to_string(), RESULTS_FILE.to_string()])?;
        return Ok(Swept::Shard { out: dir.clone(), shard: text.clone(), outcome });
    }
    complete(dir, &s, &outcome, &plot)?;
    Ok(Swept::Grid { out: Some(dir.clone()), scenario: Box::new(s), outcome })
}

/// The chart options, the detail context checked against the sweep's
/// contexts before anything is simulated.
fn plot_options(charts: &ChartRequest, s: &Scenario) -> Result<PlotOptions, Error> {
    let plot = charts.options()?;
    if plot.detail_context.is_some() {
        report::detail_context(&s.contexts, plot.detail_context)?;
    }
    if plot.whole_model_only && s.stack.is_none() {
        return Err(report::whole_model_only_refused().into());
    }
    Ok(plot)
}

/// `sweep` over a knob's values: one sweep directory per value under the
/// output directory, the combined results, chart and table at the top.
fn sweep_vary(request: &SweepRequest, axis: &VaryAxis, observer: &dyn Observer) -> Result<Swept, Error> {
    let scenarios = axis.scenarios(&request.scenario.params()?).map_err(|e| request.scenario.blame(e))?;
    let shard = request.shard.as_deref().map(Shard::parse).transpose()?;
    let plot = plot_options(&request.charts, &scenarios[0])?;
    let pool = request.scenario.thread_pool()?;
    store::check_memory(&scenarios[0], pool.current_num_threads())?;
    let dir = request.out.as_deref().ok_or_else(|| {
        crate::error::ConfigError::new("vary", axis.field.clone(), "an output directory: each value's sweep is written to its own")
    })?;
    let opts = StoreOptions { force: request.force, resume: request.resume, shard, chunk_trials: request.chunk_trials };
    check_out(dir, request)?;
    // One lock on the top directory covers every value's subdirectory.
    let _lock = DirLock::create(dir)?;
    let finish_value = |dir: &Path, s: &Scenario, o: &SweepOutcome| report::vary::complete_value(dir, s, o, &plot);
    let outcome = pool.install(|| vary::sweep_vary(dir, axis, &scenarios, opts, observer, &finish_value))?;
    if observer.stop_requested() {
        return Err(SimError::Interrupted.into());
    }
    let files = report::vary::write_vary(dir, &outcome, &plot)?;
    vary::finish(dir, &outcome, &files)?;
    Ok(Swept::Vary { out: dir.to_path_buf(), outcome })
}

/// The output directory checked whole before it is created, locked or
/// written (the store checks it again under the lock): a refused run
/// leaves it as it was.
fn check_out(dir: &Path, request: &SweepRequest) -> Result<(), Error> {
    if request.resume {
        output::check_output_entries(dir)
    } else {
        output::check_output_dir(dir, request.force)
    }
}

/// Derived files and the final manifest of a whole grid (a finished sweep,
/// or merged shards).
fn complete(dir: &Path, s: &Scenario, outcome: &SweepOutcome, plot: &PlotOptions) -> Result<(), Error> {
    let files = report::write_sweep(dir, s, outcome, plot)?;
    store::finish(dir, s, None, outcome, &files)
}

/// Shard directories to combine into `out`.
#[derive(Clone, Debug, PartialEq)]
pub struct MergeRequest {
    pub shards: Vec<PathBuf>,
    pub out: PathBuf,
    pub force: bool,
}

/// Merged shards: the whole grid, and how many shards made it.
pub struct Merged {
    pub out: PathBuf,
    pub scenario: Box<Scenario>,
    pub outcome: SweepOutcome,
    pub shards: usize,
}

impl Merged {
    /// What the command line prints: the table and where it went.
    pub fn text(&self) -> String {
        format!("{}\nmerged {} shards into {}\n", output::format_table(&self.scenario, &self.outcome), self.shards, self.out.display())
    }
}

/// `merge`: reads complete shard directories, checks that they come from
/// one configuration and cover the grid once, and writes the whole grid's
/// directory as an unsharded sweep would.
pub fn merge(request: &MergeRequest) -> Result<Merged, Error> {
    let merged = store::merge_shards(&request.shards)?;
    let s: Scenario = store::scenario_from_manifest(&merged.manifest)?;
    let (lines, cells) = store::order_cells(&s, merged.lines, merged.cells)?;
    output::check_output_dir(&request.out, request.force)?;
    let _lock = DirLock::create(&request.out)?;
    output::prepare_output_dir(&request.out, request.force)?;
    store::write_result_lines(&request.out.join(RESULTS_FILE), &lines)?;
    let effective = sweep::effective_contexts(&s, &cells);
    let outcome = SweepOutcome { cells, effective };
    complete(&request.out, &s, &outcome, &PlotOptions::default())?;
    Ok(Merged { out: request.out.clone(), scenario: Box::new(s), outcome, shards: request.shards.len() })
}

/// A sweep directory read back, a whole grid's or one shard's: the scenario
/// of its manifest and the cells of its `results.jsonl`, as the sweep that
/// wrote them returned them (Python's handle on a directory).
pub fn load(dir: &Path) -> Result<(Scenario, SweepOutcome), Error> {
    let manifest = store::Manifest::read(dir)?;
    let s = store::scenario_from_manifest(&manifest)?;
    let path = dir.join(RESULTS_FILE);
    let location = path.display().to_string();
    let text = crate::base::files::read_text_capped(&path, crate::base::files::GRID_FILE_CAP)
        .map_err(|e| Error::Input { location: location.clone(), message: format!("cannot read: {e}") })?;
    let cells = report::parse_results(&text, &location)?;
    let effective = sweep::effective_contexts(&s, &cells);
    Ok((s, SweepOutcome { cells, effective }))
}

/// `plot DIR`: every chart and `report.html` of a finished sweep directory
/// (or knob sweep) drawn again from its results, without simulating.
/// Returns the files written.
pub fn plot(dir: &Path, charts: &ChartRequest) -> Result<Vec<String>, Error> {
    let opts = charts.options()?;
    // A missing directory is plot_dir's error to report.
    let _lock = if dir.is_dir() { Some(DirLock::acquire(dir)?) } else { None };
    if dir.is_dir() {
        output::check_chart_entries(dir)?;
    }
    match vary::VaryManifest::read(dir)? {
        Some(m) if dir.is_dir() => report::vary::plot_vary(dir, &m, &opts),
        _ => report::plot_dir(dir, &opts),
    }
}

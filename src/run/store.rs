//! The output directory as durable state: a manifest written before any
//! work, one `results.jsonl` line per finished cell appended and synced
//! before the next unit starts, resume after an interruption, shards of the
//! cell grid, and merging shards back into one directory.
//!
//! The grid is dealt in units of one (depth, context) pair (shards own
//! units); the units of one depth form a haystack group, whose trials all
//! its contexts share. A group's trials run in chunks saved to a checkpoint
//! file, so an interruption loses at most the chunk in flight (about a
//! second or two); its cells are written when the group is done. A cell's
//! result depends only on its own coordinates (tested in `tests/model.rs`)
//! and a trial only on its index, so any partition of the units and any
//! chunking gives the same cells.

use crate::base::observe::{Observer, Standing};
use crate::config::Scenario;
use crate::error::{ConfigError, Error, SimError};
use crate::estimate::driver::TrialLog;
use crate::run::cell::CellResult;
use crate::run::output::{self, write_atomic, MANIFEST_FILE, RESULTS_FILE};
use crate::run::sweep::{self, EffectiveContext, SweepOutcome};
use serde::{Deserialize, Serialize};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The I-th (1-based) of N disjoint parts of a sweep's grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Parses `I/N` with 1 ≤ I ≤ N ≤ 100000.
    pub fn parse(text: &str) -> Result<Shard, ConfigError> {
        let bad = || ConfigError::new("--shard", format!("{text:?}"), "I/N with 1 ≤ I ≤ N ≤ 100000, e.g. 2/8");
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if index == 0 || index > count || count > 100_000 {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether this shard owns work unit `unit` (units dealt round-robin in
    /// sweep order, which spreads long and short contexts evenly).
    pub fn owns(&self, unit: usize) -> bool {
        unit % self.count as usize == (self.index - 1) as usize
    }
}

/// `manifest.json`: what produced a directory and how far it got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub tool: String,
    pub version: String,
    pub seed: u64,
    /// "running" until the last cell is written, then "complete".
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// The resolved scenario, as JSON (compared field by field on resume and merge).
    pub scenario: serde_json::Value,
    #[serde(default)]
    pub effective_context: Vec<EffectiveContext>,
    #[serde(default)]
    pub files: Vec<String>,
}

impl Manifest {
    fn new(s: &Scenario, shard: Option<Shard>) -> Manifest {
        Manifest {
            tool: "dsa-recall".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            seed: s.seed,
            status: "running".into(),
            shard,
            scenario: serde_json::to_value(s).unwrap_or(serde_json::Value::Null),
            effective_context: Vec::new(),
            files: vec![MANIFEST_FILE.into(), RESULTS_FILE.into()],
        }
    }

    fn write(&self, dir: &Path) -> Result<(), Error> {
        let text = serde_json::to_string_pretty(self).unwrap_or_default() + "\n";
        write_atomic(&dir.join(MANIFEST_FILE), text.as_bytes())
    }

    pub fn read(dir: &Path) -> Result<Manifest, Error> {
        let path = dir.join(MANIFEST_FILE);
        let text = fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::Mismatch(format!("{} has no {MANIFEST_FILE}: it is not a dsa-recall output directory", dir.display()))
            }
            _ => Error::io(format!("reading {}", path.display()), e),
        })?;
        serde_json::from_str(&text).map_err(|e| Error::Corrupt { path: path.display().to_string(), message: e.to_string() })
    }
}

/// The first place two JSON values differ, as a dotted path (for messages).
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value::Object;
    match (a, b) {
        (Object(x), Object(y)) => {
            for (k, va) in x {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                match y.get(k) {
                    Some(vb) => {
                        if let Some(d) = first_difference(va, vb, &p) {
                            return Some(d);
                        }
                    }
                    None => return Some(p),
                }
            }
            y.keys().find(|k| !x.contains_key(*k)).map(|k| format!("{path}.{k}"))
        }
        _ if a != b => Some(format!("{} ({a} vs {b})", if path.is_empty() { "scenario" } else { path })),
        _ => None,
    }
}

/// How a sweep treats its output directory.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreOptions {
    pub force: bool,
    pub resume: bool,
    pub shard: Option<Shard>,
    /// Trials per checkpoint chunk, fixed; None sizes chunks to about
    /// [`crate::estimate::driver::CHUNK_TARGET`]. A testing knob.
    pub chunk_trials: Option<u64>,
}

/// The checkpoint: finished chunks of trials of the haystack group in
/// progress, one JSON line each, removed once the group's cells are in
/// `results.jsonl`.
pub const CHECKPOINT_FILE: &str = "checkpoint.jsonl";

/// Which haystack group a checkpoint line belongs to. Trials depend only on
/// the scenario (checked through the manifest), the depth and the trial
/// index, and cell indices on the group's contexts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct GroupKey {
    depth_percent: f64,
    contexts: Vec<u64>,
}

/// One checkpoint line: `count` trials of estimator `estimator` from trial
/// `first` on.
#[derive(Debug, Serialize, Deserialize)]
struct ChunkRecord {
    group: GroupKey,
    estimator: String,
    first: u64,
    count: u64,
    trials: Box<serde_json::value::RawValue>,
}

/// Reads the checkpoint, dropping a torn last line and cutting it from the
/// file too (a line appended after it would otherwise be glued to it).
fn read_checkpoint(path: &Path) -> Result<Vec<ChunkRecord>, Error> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    let complete = text.rfind('\n').map_or("", |i| &text[..=i]);
    if complete.len() < text.len() {
        let cut = OpenOptions::new().write(true).open(path).and_then(|f| {
            f.set_len(complete.len() as u64)?;
            f.sync_data()
        });
        cut.map_err(|e| Error::io(format!("truncating {}", path.display()), e))?;
    }
    complete
        .lines()
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|e| Error::Corrupt {
                path: format!("{}:{}", path.display(), n + 1),
                message: format!("{e}; delete the file to simulate its trials again"),
            })
        })
        .collect()
}

/// Trials of `group` the records hold, without double counting overlaps.
fn trials_held(records: &[ChunkRecord], group: &GroupKey, trials: u64) -> u64 {
    let mut names: Vec<&str> = records.iter().map(|r| r.estimator.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut held = 0;
    for name in names {
        let mut seen = vec![false; trials as usize];
        for r in records.iter().filter(|r| r.estimator == name && r.group == *group) {
            for slot in seen.iter_mut().skip(r.first as usize).take(r.count as usize) {
                *slot = true;
            }
        }
        held += seen.iter().filter(|&&s| s).count() as u64;
    }
    held
}

/// The checkpoint of one haystack group as the trial driver sees it.
struct GroupLog<'a> {
    path: &'a Path,
    key: GroupKey,
    saved: Vec<ChunkRecord>,
    file: Mutex<Option<fs::File>>,
    chunk_trials: Option<u64>,
}

impl TrialLog for GroupLog<'_> {
    fn saved(&self, name: &str) -> Vec<(u64, &str)> {
        self.saved.iter().filter(|r| r.estimator == name).map(|r| (r.first, r.trials.get())).collect()
    }

    fn save(&self, name: &str, first: u64, count: u64, trials: &str) -> Result<(), SimError> {
        let fail = |e: &dyn std::fmt::Display| SimError::Checkpoint(format!("writing {}: {e}", self.path.display()));
        let trials = serde_json::value::RawValue::from_string(trials.to_string()).map_err(|e| fail(&e))?;
        let record = ChunkRecord { group: self.key.clone(), estimator: name.to_string(), first, count, trials };
        let line = serde_json::to_string(&record).map_err(|e| fail(&e))? + "\n";
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if file.is_none() {
            *file = Some(OpenOptions::new().create(true).append(true).open(self.path).map_err(|e| fail(&e))?);
        }
        let f = file.as_mut().ok_or_else(|| fail(&"not open"))?;
        f.write_all(line.as_bytes()).and_then(|()| f.sync_data()).map_err(|e| fail(&e))
    }

    fn chunk_trials(&self) -> Option<u64> {
        self.chunk_trials
    }
}

fn remove_checkpoint(path: &Path) -> Result<(), Error> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(format!("removing {}", path.display()), e)),
        _ => Ok(()),
    }
}

/// The units of work of a scenario in sweep order: (depth, context).
pub fn work_units(s: &Scenario) -> Vec<(f64, u64)> {
    s.depths.iter().flat_map(|&d| s.contexts.iter().map(move |&c| (d, c))).collect()
}

/// Consecutive units of one depth: a haystack group, whose trials are shared
/// by all its contexts.
fn haystack_groups(units: &[(f64, u64)]) -> Vec<GroupKey> {
    let mut groups: Vec<GroupKey> = Vec::new();
    for &(depth, context) in units {
        match groups.last_mut() {
            Some(g) if g.depth_percent == depth => g.contexts.push(context),
            _ => groups.push(GroupKey { depth_percent: depth, contexts: vec![context] }),
        }
    }
    groups
}

/// Cells already on disk, as raw lines (kept byte for byte) and parsed.
struct StoredCells {
    lines: Vec<String>,
    cells: Vec<CellResult>,
}

/// Reads `results.jsonl`, dropping a torn last line (a write cut short by a
/// kill). Any other unparsable line is an error naming its number.
fn read_results(path: &Path) -> Result<StoredCells, Error> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    let mut stored = StoredCells { lines: Vec::new(), cells: Vec::new() };
    for (n, line) in complete.lines().enumerate() {
        let cell: CellResult = serde_json::from_str(line)
            .map_err(|e| Error::Corrupt { path: format!("{}:{}", path.display(), n + 1), message: e.to_string() })?;
        stored.lines.push(line.to_string());
        stored.cells.push(cell);
    }
    Ok(stored)
}

/// Cells of one (depth, context) unit: every needle offset, k and precision.
fn cells_per_unit(s: &Scenario) -> usize {
    s.needle_offsets.len() * s.topks.len() * s.precisions.len()
}

/// Rewrites `results.jsonl` atomically from whole lines (kept byte for byte).
pub fn write_result_lines(path: &Path, lines: &[String]) -> Result<(), Error> {
    let text: String = lines.iter().flat_map(|l| [l.as_str(), "\n"]).collect();
    write_atomic(path, text.as_bytes())
}

/// Runs the scenario into `dir` durably. Returns every cell of the
/// directory's part of the grid (all of it unless sharded), in sweep order.
///
/// Each haystack group's trials run in chunks saved to [`CHECKPOINT_FILE`];
/// its cells are appended to `results.jsonl` when the group is done. With
/// `resume`, whole groups already in `results.jsonl` are kept and the
/// checkpoint's trials are taken back. When `observer` asks to stop, the
/// sweep returns [`SimError::Interrupted`] and the directory can be resumed.
pub fn sweep_into(dir: &Path, s: &Scenario, opts: StoreOptions, observer: &dyn Observer) -> Result<SweepOutcome, Error> {
    let results_path = dir.join(RESULTS_FILE);
    let checkpoint_path = dir.join(CHECKPOINT_FILE);
    let manifest = Manifest::new(s, opts.shard);
    let mut done = StoredCells { lines: Vec::new(), cells: Vec::new() };
    let mut checkpoint = Vec::new();
    if opts.resume {
        let old = Manifest::read(dir)?;
        if let Some(field) = first_difference(&old.scenario, &manifest.scenario, "") {
            return Err(Error::Mismatch(format!(
                "{} was written by a different configuration ({field}); resume with the same settings, or use a new --out",
                dir.display()
            )));
        }
        if old.shard != opts.shard {
            return Err(Error::Mismatch(format!("{} holds a different --shard than the one given", dir.display())));
        }
        done = read_results(&results_path)?;
        checkpoint = read_checkpoint(&checkpoint_path)?;
    } else {
        output::prepare_output_dir(dir, opts.force)?;
        remove_checkpoint(&checkpoint_path)?;
        write_atomic(&results_path, b"")?;
    }

    let units: Vec<(f64, u64)> =
        work_units(s).into_iter().enumerate().filter(|(i, _)| opts.shard.is_none_or(|sh| sh.owns(*i))).map(|(_, u)| u).collect();
    let groups = haystack_groups(&units);
    let per_unit = cells_per_unit(s);
    if done.cells.len() > units.len() * per_unit {
        return Err(Error::Mismatch(format!("{} holds more cells than this sweep has", results_path.display())));
    }
    // Keep whole groups only, as a prefix of the sweep order (a kill while a
    // group's lines were being appended leaves part of one).
    let (mut groups_done, mut kept) = (0, 0);
    while groups_done < groups.len() && kept + groups[groups_done].contexts.len() * per_unit <= done.cells.len() {
        kept += groups[groups_done].contexts.len() * per_unit;
        groups_done += 1;
    }
    if opts.resume {
        done.lines.truncate(kept);
        done.cells.truncate(kept);
        write_result_lines(&results_path, &done.lines)?;
    }
    manifest.write(dir)?;

    let runs = sweep::group_trial_runs(s);
    let held = groups.get(groups_done).map_or(0, |g| trials_held(&checkpoint, g, s.trials));
    observer.started(&Standing {
        trials_done: groups_done as u64 * runs + held,
        trials_total: groups.len() as u64 * runs,
        cells_done: kept,
        cells_total: units.len() * per_unit,
    });

    let mut file =
        OpenOptions::new().append(true).open(&results_path).map_err(|e| Error::io(format!("opening {}", results_path.display()), e))?;
    let mut cells = done.cells;
    for key in &groups[groups_done..] {
        let part = Scenario { contexts: key.contexts.clone(), depths: vec![key.depth_percent], ..s.clone() };
        let spec = sweep::spec_for(&part, key.depth_percent);
        let (mine, rest): (Vec<ChunkRecord>, Vec<ChunkRecord>) = checkpoint.into_iter().partition(|r| r.group == *key);
        checkpoint = rest;
        let log =
            GroupLog { path: &checkpoint_path, key: key.clone(), saved: mine, file: Mutex::new(None), chunk_trials: opts.chunk_trials };
        let new = sweep::group_cells_logged(&part, &spec, observer, &log)?;
        drop(log);
        let text = output::results_jsonl(&new);
        let io = |e| Error::io(format!("appending to {}", results_path.display()), e);
        file.write_all(text.as_bytes()).map_err(io)?;
        file.sync_data().map_err(io)?;
        // Only once the cells are safe: a kill in between leaves lines of a
        // finished group, which a resume ignores.
        remove_checkpoint(&checkpoint_path)?;
        cells.extend(new);
        observer.cells_written(cells.len());
    }
    remove_checkpoint(&checkpoint_path)?;
    let effective = if opts.shard.is_none() { sweep::effective_contexts(s, &cells) } else { Vec::new() };
    Ok(SweepOutcome { cells, effective })
}

/// A trial log that keeps nothing: the trials of an in-memory sweep.
struct NoLog;

impl TrialLog for NoLog {
    fn saved(&self, _name: &str) -> Vec<(u64, &str)> {
        Vec::new()
    }
    fn save(&self, _name: &str, _first: u64, _count: u64, _trials: &str) -> Result<(), SimError> {
        Ok(())
    }
    fn chunk_trials(&self) -> Option<u64> {
        None
    }
}

/// [`sweep_into`] without a directory (the Python binding's `sweep`): the
/// same haystack groups, trial chunks and observer calls, nothing written.
/// Gives the same cells as [`sweep_into`] and [`sweep::run_sweep`], bit for
/// bit; when `observer` asks to stop, returns [`SimError::Interrupted`] and
/// the finished trials are lost.
pub fn sweep_in_memory(s: &Scenario, observer: &dyn Observer) -> Result<SweepOutcome, Error> {
    let groups = haystack_groups(&work_units(s));
    let runs = sweep::group_trial_runs(s);
    let per_unit = cells_per_unit(s);
    observer.started(&Standing {
        trials_done: 0,
        trials_total: groups.len() as u64 * runs,
        cells_done: 0,
        cells_total: groups.iter().map(|g| g.contexts.len()).sum::<usize>() * per_unit,
    });
    let log = NoLog;
    let mut cells = Vec::new();
    for key in &groups {
        let part = Scenario { contexts: key.contexts.clone(), depths: vec![key.depth_percent], ..s.clone() };
        let spec = sweep::spec_for(&part, key.depth_percent);
        cells.extend(sweep::group_cells_logged(&part, &spec, observer, &log)?);
        observer.cells_written(cells.len());
    }
    let effective = sweep::effective_contexts(s, &cells);
    Ok(SweepOutcome { cells, effective })
}

/// Marks a directory complete: its manifest gets the effective contexts and
/// the list of files written.
pub fn finish(dir: &Path, s: &Scenario, shard: Option<Shard>, outcome: &SweepOutcome, files: &[String]) -> Result<(), Error> {
    let mut m = Manifest::new(s, shard);
    m.status = "complete".into();
    m.effective_context = outcome.effective.clone();
    m.files = files.to_vec();
    m.write(dir)
}

/// Shards read back for merging.
pub struct MergedShards {
    pub manifest: Manifest,
    pub lines: Vec<String>,
    pub cells: Vec<CellResult>,
}

/// Reads shard directories and checks that they come from one configuration
/// and cover the grid exactly once. Returns the cells in sweep order.
pub fn merge_shards(dirs: &[PathBuf]) -> Result<MergedShards, Error> {
    let first = dirs.first().ok_or_else(|| Error::Mismatch("merge needs at least one shard directory".into()))?;
    let mut manifests = Vec::new();
    for d in dirs {
        let m = Manifest::read(d)?;
        if m.status != "complete" {
            return Err(Error::Mismatch(format!("{} is not complete (status {:?}); finish it with --resume first", d.display(), m.status)));
        }
        manifests.push(m);
    }
    let base = &manifests[0];
    let count = base.shard.map_or(1, |s| s.count);
    let mut seen = vec![false; count as usize];
    for (d, m) in dirs.iter().zip(&manifests) {
        if let Some(field) = first_difference(&base.scenario, &m.scenario, "") {
            return Err(Error::Mismatch(format!("{} and {} come from different configurations ({field})", first.display(), d.display())));
        }
        if m.version != base.version {
            return Err(Error::Mismatch(format!(
                "{} was written by dsa-recall {}, {} by {}",
                first.display(),
                base.version,
                d.display(),
                m.version
            )));
        }
        let shard = m.shard.unwrap_or(Shard { index: 1, count: 1 });
        if shard.count != count {
            return Err(Error::Mismatch(format!(
                "{} is shard {}/{} but {} is one of {count}",
                d.display(),
                shard.index,
                shard.count,
                first.display()
            )));
        }
        let slot = &mut seen[(shard.index - 1) as usize];
        if *slot {
            return Err(Error::Mismatch(format!("shard {}/{count} is given twice ({})", shard.index, d.display())));
        }
        *slot = true;
    }
    if let Some(missing) = seen.iter().position(|&s| !s) {
        return Err(Error::Mismatch(format!("shard {}/{count} is missing", missing + 1)));
    }
    let mut all: Vec<(String, CellResult)> = Vec::new();
    for d in dirs {
        let stored = read_results(&d.join(RESULTS_FILE))?;
        all.extend(stored.lines.into_iter().zip(stored.cells));
    }
    Ok(MergedShards {
        manifest: base.clone(),
        lines: all.iter().map(|(l, _)| l.clone()).collect(),
        cells: all.into_iter().map(|(_, c)| c).collect(),
    })
}

/// Orders merged cells as an unsharded sweep of `s` would, checking that
/// every cell of the grid is there exactly once.
pub fn order_cells(s: &Scenario, lines: Vec<String>, cells: Vec<CellResult>) -> Result<(Vec<String>, Vec<CellResult>), Error> {
    let key = |c: &CellResult| {
        let d = s.depths.iter().position(|&x| x == c.depth_percent);
        let ctx = s.contexts.iter().position(|&x| x == c.context_tokens);
        let o = s.needle_offsets.iter().position(|&x| x == c.needle_offset);
        let k = s.topks.iter().position(|&x| x == c.topk);
        let p = s.precisions.iter().position(|x| x.name == c.precision);
        match (d, ctx, o, k, p) {
            (Some(d), Some(ctx), Some(o), Some(k), Some(p)) => {
                Some((((d * s.contexts.len() + ctx) * s.needle_offsets.len() + o) * s.topks.len() + k) * s.precisions.len() + p)
            }
            _ => None,
        }
    };
    let total = s.depths.len() * s.contexts.len() * cells_per_unit(s);
    let mut slots: Vec<Option<(String, CellResult)>> = vec![None; total];
    for (line, cell) in lines.into_iter().zip(cells) {
        let i = key(&cell).ok_or_else(|| Error::Mismatch(format!("a shard holds a cell outside the grid: {line}")))?;
        if slots[i].is_some() {
            return Err(Error::Mismatch(format!("a cell is in more than one shard: {line}")));
        }
        slots[i] = Some((line, cell));
    }
    if let Some(i) = slots.iter().position(Option::is_none) {
        let per_depth = s.contexts.len() * cells_per_unit(s);
        return Err(Error::Mismatch(format!(
            "the shards miss cells (the first at depth {} %, context {})",
            s.depths[i / per_depth],
            s.contexts[(i % per_depth) / cells_per_unit(s)]
        )));
    }
    Ok(slots.into_iter().flatten().unzip())
}

/// The scenario a manifest records.
pub fn scenario_from_manifest(m: &Manifest) -> Result<Scenario, Error> {
    serde_json::from_value(m.scenario.clone()).map_err(|e| Error::Corrupt { path: MANIFEST_FILE.into(), message: format!("scenario: {e}") })
}

/// Bytes a sweep needs at its peak: per worker thread, the scores of the
/// longest context for every precision (twice when selection fidelity is
/// measured) plus tie keys and scratch; and one depth's trial outcomes.
pub fn memory_estimate(s: &Scenario, threads: usize) -> u64 {
    let rows = s.contexts.iter().map(|&c| s.geometry.candidate_rows(c)).max().unwrap_or(0);
    let variants = s.precisions.len() as u64;
    let per_row = 4 * 2 * variants + 8 + 4 + 4;
    let chunk = 2 * 256 * s.model.shape.head_dim as u64 * 4;
    let cells = (s.contexts.len() * s.topks.len() * s.precisions.len()) as u64;
    threads as u64 * (rows * per_row + chunk) + s.trials * cells * std::mem::size_of::<crate::score::trial::NeedleOutcome>() as u64
}

fn available_memory() -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuses a run that would need more memory than is available.
pub fn check_memory(s: &Scenario, threads: usize) -> Result<(), Error> {
    let need = memory_estimate(s, threads);
    match available_memory() {
        Some(have) if need > have => Err(Error::Resources(format!(
            "this sweep needs about {:.1} GiB ({} threads, longest context {} tokens, {} trials) but {:.1} GiB is available; \
             use fewer --threads, shorter --contexts, fewer --trials per run (--shard), or fewer precisions",
            need as f64 / (1u64 << 30) as f64,
            threads,
            s.contexts.last().copied().unwrap_or(0),
            s.trials,
            have as f64 / (1u64 << 30) as f64
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_parsing_and_ownership() {
        assert_eq!(Shard::parse("2/3").unwrap(), Shard { index: 2, count: 3 });
        for bad in ["0/3", "4/3", "3", "a/b", "1/0", ""] {
            assert!(Shard::parse(bad).unwrap_err().to_string().starts_with("invalid --shard"), "{bad}");
        }
        let shards: Vec<Shard> = (1..=3).map(|i| Shard { index: i, count: 3 }).collect();
        for unit in 0..20 {
            assert_eq!(shards.iter().filter(|s| s.owns(unit)).count(), 1);
        }
    }

    #[test]
    fn first_difference_names_the_field() {
        let a = serde_json::json!({"sweep": {"trials": 10, "seed": 1}});
        let b = serde_json::json!({"sweep": {"trials": 12, "seed": 1}});
        assert_eq!(first_difference(&a, &b, "").unwrap(), "sweep.trials (10 vs 12)");
        assert!(first_difference(&a, &a, "").is_none());
    }
}

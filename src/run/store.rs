//! The output directory as durable state: a manifest written before any
//! work, one `results.jsonl` line per finished cell appended and synced
//! before the next haystack group starts, resume after an interruption,
//! and merging shards back into one directory. The work itself is the one
//! sweep loop's ([`sweep::execute`], over a [`Plan`]); its trials go in
//! chunks to the directory's checkpoint ([`FileCheckpoint`]), so an
//! interruption loses at most the chunk in flight (about a second or two).

use crate::base::files::write_file;
use crate::base::observe::Observer;
use crate::config::Scenario;
use crate::error::Error;
use crate::run::cell::CellResult;
use crate::run::checkpoint::FileCheckpoint;
use crate::run::output::{self, MANIFEST_FILE, RESULTS_FILE};
use crate::run::plan::{cells_per_unit, Plan, Shard};
use crate::run::sweep::{self, EffectiveContext, Sink, SweepOutcome};
use serde::{Deserialize, Serialize};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

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
        write_file(&dir.join(MANIFEST_FILE), text.as_bytes())
    }

    pub fn read(dir: &Path) -> Result<Manifest, Error> {
        let path = dir.join(MANIFEST_FILE);
        let text = crate::base::files::read_text_capped(&path, crate::base::files::JSON_FILE_CAP).map_err(|e| match e.kind() {
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

/// Cells already on disk, as raw lines (kept byte for byte) and parsed.
struct StoredCells {
    lines: Vec<String>,
    cells: Vec<CellResult>,
}

/// Reads `results.jsonl`, dropping a torn last line (a write cut short by a
/// kill). Any other unparsable line is an error naming its number.
fn read_results(path: &Path) -> Result<StoredCells, Error> {
    let text = match crate::base::files::read_text_capped(path, crate::base::files::GRID_FILE_CAP) {
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

/// Rewrites `results.jsonl` atomically from whole lines (kept byte for byte).
pub fn write_result_lines(path: &Path, lines: &[String]) -> Result<(), Error> {
    let text: String = lines.iter().flat_map(|l| [l.as_str(), "\n"]).collect();
    write_file(path, text.as_bytes())
}

/// Runs the scenario into `dir` durably. Returns every cell of the
/// directory's part of the grid (all of it unless sharded), in sweep order.
///
/// Each haystack group's trials run in chunks saved to the checkpoint
/// ([`FileCheckpoint`]); its cells are appended to `results.jsonl` when the
/// group is done. With `resume`, whole groups already in `results.jsonl`
/// are kept and the checkpoint's trials are taken back. When `observer`
/// asks to stop, the sweep returns [`crate::SimError::Interrupted`] and the
/// directory can be resumed.
pub fn sweep_into(dir: &Path, s: &Scenario, opts: StoreOptions, observer: &dyn Observer) -> Result<SweepOutcome, Error> {
    let results_path = dir.join(RESULTS_FILE);
    let manifest = Manifest::new(s, opts.shard);
    let mut plan = Plan::new(s, opts.shard);
    let checkpoint = if opts.resume {
        output::check_output_entries(dir)?;
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
        let mut done = read_results(&results_path)?;
        let checkpoint = FileCheckpoint::resumed(dir, opts.chunk_trials)?;
        if done.cells.len() > plan.cells_total() {
            return Err(Error::Mismatch(format!("{} holds more cells than this sweep has", results_path.display())));
        }
        let kept = plan.resume_from(done.cells);
        done.lines.truncate(kept);
        write_result_lines(&results_path, &done.lines)?;
        checkpoint
    } else {
        output::prepare_output_dir(dir, opts.force)?;
        let checkpoint = FileCheckpoint::fresh(dir, opts.chunk_trials)?;
        write_file(&results_path, b"")?;
        checkpoint
    };
    manifest.write(dir)?;
    let mut sink = ResultsFile::open(&results_path)?;
    let outcome = sweep::execute(plan, &checkpoint, observer, &mut sink)?;
    checkpoint.finish()?;
    Ok(outcome)
}

/// `results.jsonl`, open for appending: each group's lines are synced
/// before its checkpoint is dropped.
struct ResultsFile<'a> {
    path: &'a Path,
    file: fs::File,
}

impl<'a> ResultsFile<'a> {
    fn open(path: &'a Path) -> Result<Self, Error> {
        let file = OpenOptions::new().append(true).open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        Ok(ResultsFile { path, file })
    }
}

impl Sink for ResultsFile<'_> {
    fn write_group(&mut self, cells: &[CellResult]) -> Result<(), Error> {
        let io = |e| Error::io(format!("appending to {}", self.path.display()), e);
        self.file.write_all(output::results_jsonl(cells).as_bytes()).map_err(io)?;
        self.file.sync_data().map_err(io)
    }
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
    fn first_difference_names_the_field() {
        let a = serde_json::json!({"sweep": {"trials": 10, "seed": 1}});
        let b = serde_json::json!({"sweep": {"trials": 12, "seed": 1}});
        assert_eq!(first_difference(&a, &b, "").unwrap(), "sweep.trials (10 vs 12)");
        assert!(first_difference(&a, &a, "").is_none());
    }
}

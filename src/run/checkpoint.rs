//! The checkpoint file of a durable sweep: finished chunks of trials of the
//! haystack group in progress, one JSON line each, removed once the group's
//! cells are in `results.jsonl`. A resumed sweep takes them back.
//!
//! Each line carries the CRC-32 of its chunk (`{"crc32":"…","chunk":{…}}`),
//! so a line changed after it was written (by hand, or by a disk) is refused
//! on resume, naming the file and line, instead of changing the results.
//! A checkpoint from before the checksum is refused the same way: deleting
//! it costs only the trials of the one group in progress.

use crate::error::{Error, SimError};
use crate::estimate::driver::{Checkpoint, GroupKey};
use serde::{Deserialize, Serialize};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The checkpoint's file name in an output directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.jsonl";

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

/// A checkpoint line as stored: the chunk's JSON exactly as written, and
/// its CRC-32 (8 hex digits).
#[derive(Deserialize)]
struct CheckedLine<'a> {
    crc32: String,
    #[serde(borrow)]
    chunk: &'a serde_json::value::RawValue,
}

/// One stored line for `record`.
fn checked_line(record: &ChunkRecord) -> serde_json::Result<String> {
    let chunk = serde_json::to_string(record)?;
    Ok(format!("{{\"crc32\":\"{:08x}\",\"chunk\":{chunk}}}\n", crc32fast::hash(chunk.as_bytes())))
}

/// The record a stored line holds, or why it cannot be trusted.
fn parse_line(line: &str) -> Result<ChunkRecord, String> {
    let checked: CheckedLine = match serde_json::from_str(line) {
        Ok(c) => c,
        Err(e) if serde_json::from_str::<ChunkRecord>(line).is_ok() => {
            return Err(format!("no checksum: written by an older dsa-recall ({e})"));
        }
        Err(e) => return Err(e.to_string()),
    };
    let want = format!("{:08x}", crc32fast::hash(checked.chunk.get().as_bytes()));
    if checked.crc32 != want {
        return Err(format!("checksum {} does not match the line's {want}: the line was changed after it was written", checked.crc32));
    }
    serde_json::from_str(checked.chunk.get()).map_err(|e| e.to_string())
}

/// [`CHECKPOINT_FILE`] in an output directory: the records read back when a
/// sweep resumes, and the file each finished chunk is appended to.
pub struct FileCheckpoint {
    path: PathBuf,
    records: Mutex<Vec<ChunkRecord>>,
    file: Mutex<Option<fs::File>>,
    chunk_trials: Option<u64>,
}

impl FileCheckpoint {
    /// A new checkpoint in `dir` (an earlier one is removed).
    pub fn fresh(dir: &Path, chunk_trials: Option<u64>) -> Result<FileCheckpoint, Error> {
        let path = dir.join(CHECKPOINT_FILE);
        remove(&path)?;
        Ok(FileCheckpoint { path, records: Mutex::new(Vec::new()), file: Mutex::new(None), chunk_trials })
    }

    /// The checkpoint `dir` holds, read back (a torn last line is dropped).
    pub fn resumed(dir: &Path, chunk_trials: Option<u64>) -> Result<FileCheckpoint, Error> {
        let path = dir.join(CHECKPOINT_FILE);
        let records = read(&path)?;
        Ok(FileCheckpoint { path, records: Mutex::new(records), file: Mutex::new(None), chunk_trials })
    }

    /// Removes the file (the sweep is over).
    pub fn finish(self) -> Result<(), Error> {
        remove(&self.path)
    }
}

impl Checkpoint for FileCheckpoint {
    fn saved(&self, group: &GroupKey, estimator: &str) -> Vec<(u64, String)> {
        let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        records.iter().filter(|r| r.estimator == estimator && r.group == *group).map(|r| (r.first, r.trials.get().to_string())).collect()
    }

    fn save(&self, group: &GroupKey, estimator: &str, first: u64, count: u64, trials: &str) -> Result<(), SimError> {
        let fail = |e: &dyn std::fmt::Display| SimError::Checkpoint(format!("writing {}: {e}", self.path.display()));
        let trials = serde_json::value::RawValue::from_string(trials.to_string()).map_err(|e| fail(&e))?;
        let record = ChunkRecord { group: group.clone(), estimator: estimator.to_string(), first, count, trials };
        let line = checked_line(&record).map_err(|e| fail(&e))?;
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if file.is_none() {
            *file = Some(OpenOptions::new().create(true).append(true).open(&self.path).map_err(|e| fail(&e))?);
        }
        let f = file.as_mut().ok_or_else(|| fail(&"not open"))?;
        f.write_all(line.as_bytes()).and_then(|()| f.sync_data()).map_err(|e| fail(&e))
    }

    /// Trials of `group` the records hold, without double counting overlaps.
    fn trials_held(&self, group: &GroupKey, trials: u64) -> u64 {
        let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
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

    /// Only once the group's cells are safe: a kill in between leaves lines
    /// of a finished group, which a resume ignores.
    fn group_done(&self, group: &GroupKey) -> Result<(), Error> {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).retain(|r| r.group != *group);
        // The next group's first chunk creates the file again.
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = None;
        remove(&self.path)
    }

    fn chunk_trials(&self) -> Option<u64> {
        self.chunk_trials
    }
}

/// Reads the checkpoint, dropping a torn last line and cutting it from the
/// file too (a line appended after it would otherwise be glued to it).
fn read(path: &Path) -> Result<Vec<ChunkRecord>, Error> {
    const HINT: &str = "delete the file to simulate its trials again (finished cells in results.jsonl are kept)";
    let bytes = match crate::base::files::read_capped(path, crate::base::files::GRID_FILE_CAP) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
        Error::Corrupt { path: format!("{}:{line}", path.display()), message: format!("not UTF-8 text; {HINT}") }
    })?;
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
            parse_line(line).map_err(|e| Error::Corrupt { path: format!("{}:{}", path.display(), n + 1), message: format!("{e}; {HINT}") })
        })
        .collect()
}

fn remove(path: &Path) -> Result<(), Error> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(format!("removing {}", path.display()), e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(first: u64) -> ChunkRecord {
        let trials = serde_json::value::RawValue::from_string("[[true,3]]".into()).unwrap();
        ChunkRecord {
            group: GroupKey { depth_percent: 50.0, contexts: vec![1024], shared_depths: Vec::new() },
            estimator: "full".into(),
            first,
            count: 1,
            trials,
        }
    }

    #[test]
    fn a_line_reads_back_and_any_change_is_refused() {
        let line = checked_line(&record(4)).unwrap();
        assert!(line.starts_with("{\"crc32\":\"") && line.ends_with("}\n"), "{line}");
        assert_eq!(parse_line(line.trim_end()).unwrap().first, 4);
        for (from, to) in [("true", "false"), ("\"first\":4", "\"first\":5"), ("\"first\":4", "\"first\":-7")] {
            let edited = line.replacen(from, to, 1);
            assert_ne!(edited, line);
            let e = parse_line(edited.trim_end()).unwrap_err();
            assert!(e.contains("checksum"), "{from} → {to}: {e}");
        }
        let old = serde_json::to_string(&record(4)).unwrap();
        assert!(parse_line(&old).unwrap_err().starts_with("no checksum"));
    }

    #[test]
    fn a_corrupt_file_names_its_line_and_exits_2() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(CHECKPOINT_FILE);
        let good = checked_line(&record(0)).unwrap();
        fs::write(&path, format!("{good}{}", good.replace("true", "false"))).unwrap();
        let e = read(&path).unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("checkpoint.jsonl:2: "), "{e}");
        fs::write(&path, [good.as_bytes(), b"\xff\n"].concat()).unwrap();
        assert!(read(&path).unwrap_err().to_string().contains("checkpoint.jsonl:2: not a valid dsa-recall file: not UTF-8"));
        // A torn last line (a kill mid-write) is dropped, not refused.
        fs::write(&path, format!("{good}{}", &good[..20])).unwrap();
        assert_eq!(read(&path).unwrap().len(), 1);
    }
}

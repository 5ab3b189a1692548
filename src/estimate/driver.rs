//! The one loop that runs an estimator's trials: seeds derived per trial,
//! trials in parallel with rayon, results kept in trial order so every
//! reduction is identical whatever the thread count.
//!
//! A sweep runs the trials in chunks ([`run_chunked`]): before each chunk
//! the observer may stop it, and each finished chunk goes to a
//! [`Checkpoint`] (the output directory's, or [`NoCheckpoint`] for a run
//! kept in memory), so an interruption loses at most the chunk in flight,
//! and a resumed run takes the saved trials back instead of simulating them
//! again. A trial depends only on its index, so chunk sizes cannot change a
//! result.

use crate::base::observe::Observer;
use crate::base::rng::{self, tag};
use crate::error::{Error, SimError};
use crate::estimate::estimator::Estimator;
use crate::score::trial::TrialSpec;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Seed of trial `trial` of the haystack group at `depth_percent`. Depends on
/// the depth's value (not its position in a list), so a cell's result does
/// not change when other depths are added to a sweep.
pub fn trial_seed(seed: u64, depth_percent: f64, trial: u64) -> u64 {
    rng::derive(seed, &[tag::TRIAL, depth_percent.to_bits(), trial])
}

/// Runs `trials` trials of one haystack group, in trial order. `observer`
/// hears of each finished trial (for progress bars).
pub fn run_trials<E: Estimator>(
    estimator: &E,
    spec: &TrialSpec<'_>,
    seed: u64,
    trials: u64,
    observer: &dyn Observer,
) -> Result<Vec<E::Trial>, SimError> {
    run_range(estimator, spec, seed, 0..trials, observer)
}

fn run_range<E: Estimator>(
    estimator: &E,
    spec: &TrialSpec<'_>,
    seed: u64,
    range: std::ops::Range<u64>,
    observer: &dyn Observer,
) -> Result<Vec<E::Trial>, SimError> {
    range
        .into_par_iter()
        .map(|t| {
            let out = estimator.trial(spec, trial_seed(seed, spec.seed_depth(), t));
            observer.trial_done();
            out
        })
        .collect()
}

/// Runs and reduces one haystack group: the estimator's cells in
/// [`TrialSpec::cell_index`] order.
pub fn estimate<E: Estimator>(
    estimator: &E,
    spec: &TrialSpec<'_>,
    seed: u64,
    trials: u64,
    observer: &dyn Observer,
) -> Result<Vec<E::Cell>, SimError> {
    Ok(estimator.cells(spec, &run_trials(estimator, spec, seed, trials, observer)?))
}

/// A haystack group as a checkpoint names it: trials depend only on the
/// scenario (which the caller checks), the depth and the trial index, and
/// cell indices on the group's contexts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupKey {
    /// The depth whose value seeds the trials.
    pub depth_percent: f64,
    pub contexts: Vec<u64>,
    /// Further depths simulated on the same trials (diagnose's next experiment);
    /// empty in a sweep, and then left out of checkpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_depths: Vec<f64>,
}

impl GroupKey {
    /// The group `spec` simulates.
    pub fn of(spec: &TrialSpec<'_>) -> GroupKey {
        GroupKey {
            depth_percent: spec.seed_depth(),
            contexts: spec.contexts.to_vec(),
            shared_depths: spec.depths.get(1..).unwrap_or_default().to_vec(),
        }
    }

    /// Every depth of the group, the seeding one first.
    pub fn depths(&self) -> Vec<f64> {
        std::iter::once(self.depth_percent).chain(self.shared_depths.iter().copied()).collect()
    }
}

/// Where finished trials are kept across interruptions, per haystack group
/// and estimator ([`Estimator::NAME`]). Trials travel as JSON arrays.
pub trait Checkpoint: Sync {
    /// Trials of `estimator` in `group` saved earlier: (first trial index,
    /// the trials from there on as a JSON array), in any order.
    fn saved(&self, group: &GroupKey, estimator: &str) -> Vec<(u64, String)>;
    /// Keeps `trials` (a JSON array of `count` trials from `first` on) of
    /// `estimator` in `group` durably before returning.
    fn save(&self, group: &GroupKey, estimator: &str, first: u64, count: u64, trials: &str) -> Result<(), SimError>;
    /// Trials of `group` held, every estimator's counted (for progress).
    fn trials_held(&self, group: &GroupKey, trials: u64) -> u64;
    /// The group's cells are safe elsewhere: its trials may go.
    fn group_done(&self, group: &GroupKey) -> Result<(), Error>;
    /// A fixed number of trials per chunk (a testing knob); None adapts the
    /// size to [`CHUNK_TARGET`].
    fn chunk_trials(&self) -> Option<u64>;
}

/// A checkpoint that keeps nothing: a run whose trials live in memory only.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCheckpoint;

impl Checkpoint for NoCheckpoint {
    fn saved(&self, _group: &GroupKey, _estimator: &str) -> Vec<(u64, String)> {
        Vec::new()
    }
    fn save(&self, _group: &GroupKey, _estimator: &str, _first: u64, _count: u64, _trials: &str) -> Result<(), SimError> {
        Ok(())
    }
    fn trials_held(&self, _group: &GroupKey, _trials: u64) -> u64 {
        0
    }
    fn group_done(&self, _group: &GroupKey) -> Result<(), Error> {
        Ok(())
    }
    fn chunk_trials(&self) -> Option<u64> {
        None
    }
}

/// What one chunk of trials should take: long enough that the pause between
/// chunks (workers waiting for the last trial, the checkpoint write) costs
/// little, short enough that a kill loses little.
pub const CHUNK_TARGET: Duration = Duration::from_millis(1500);

/// Chunk sizes: a few trials per worker first, then sized from the measured
/// time per trial to take about [`CHUNK_TARGET`], a multiple of the worker
/// count so that every worker is busy until the chunk's end.
struct Pacer {
    fixed: Option<u64>,
    workers: u64,
    size: u64,
}

impl Pacer {
    fn new(fixed: Option<u64>) -> Self {
        let workers = rayon::current_num_threads().max(1) as u64;
        Pacer { fixed, workers, size: 2 * workers }
    }

    fn size(&self) -> u64 {
        self.fixed.unwrap_or(self.size).max(1)
    }

    fn record(&mut self, trials: u64, took: Duration) {
        let per_trial = took.as_secs_f64() / trials.max(1) as f64;
        let wanted = if per_trial > 0.0 { CHUNK_TARGET.as_secs_f64() / per_trial } else { f64::INFINITY };
        // Grow at most fourfold per chunk: one fast chunk is weak evidence.
        let wanted = wanted.min(4.0 * self.size as f64).max(1.0) as u64;
        self.size = wanted.div_ceil(self.workers).max(1) * self.workers;
    }
}

/// Runs trials `0..trials` of one haystack group in chunks, taking back the
/// trials `checkpoint` saved earlier for this estimator and saving each
/// finished chunk. Returns the trials in trial order, or
/// [`SimError::Interrupted`] when the observer asks to stop (everything
/// finished is saved by then).
pub fn run_chunked<E: Estimator>(
    estimator: &E,
    spec: &TrialSpec<'_>,
    seed: u64,
    trials: u64,
    observer: &dyn Observer,
    checkpoint: &dyn Checkpoint,
) -> Result<Vec<E::Trial>, SimError> {
    let group = GroupKey::of(spec);
    let mut slots: Vec<Option<E::Trial>> = (0..trials).map(|_| None).collect();
    for (first, text) in checkpoint.saved(&group, E::NAME) {
        // A piece that does not parse as this estimator's trials is simulated again.
        let Ok(pieces) = serde_json::from_str::<Vec<E::Trial>>(&text) else { continue };
        for (t, trial) in (first..).zip(pieces) {
            if let Some(slot @ None) = slots.get_mut(t as usize) {
                *slot = Some(trial);
            }
        }
    }
    let mut pacer = Pacer::new(checkpoint.chunk_trials());
    let mut t = 0u64;
    while t < trials {
        if slots[t as usize].is_some() {
            t += 1;
            continue;
        }
        if observer.stop_requested() {
            return Err(SimError::Interrupted);
        }
        let gap_end = (t..trials).find(|&u| slots[u as usize].is_some()).unwrap_or(trials);
        let end = gap_end.min(t + pacer.size());
        let started = Instant::now();
        let chunk = run_range(estimator, spec, seed, t..end, observer)?;
        pacer.record(end - t, started.elapsed());
        // Save only what reads back bit for bit (a NaN would come back as
        // null); a chunk that does not is simply not kept.
        if let Ok(text) = serde_json::to_string(&chunk) {
            if serde_json::from_str::<Vec<E::Trial>>(&text).is_ok_and(|back| back == chunk) {
                checkpoint.save(&group, E::NAME, t, end - t, &text)?;
            }
        }
        for (slot, trial) in slots[t as usize..end as usize].iter_mut().zip(chunk) {
            *slot = Some(trial);
        }
        t = end;
    }
    Ok(slots.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A trial is its seed and a float derived from it: cheap, and enough to
    /// see which trial landed where.
    struct Seeds;
    impl Estimator for Seeds {
        const NAME: &'static str = "seeds";
        type Trial = (u64, f64);
        type Cell = (u64, f64);
        fn trial(&self, _: &TrialSpec<'_>, seed: u64) -> Result<(u64, f64), SimError> {
            Ok((seed, (seed % 1000) as f64 / 7.0))
        }
        fn cells(&self, _: &TrialSpec<'_>, trials: &[(u64, f64)]) -> Vec<(u64, f64)> {
            trials.to_vec()
        }
    }

    /// Saved pieces of an earlier run, and what this run saves.
    struct MemoryLog {
        earlier: Vec<(u64, String)>,
        saved: Mutex<Vec<(u64, u64, String)>>,
        chunk: u64,
        stop_after: usize,
    }
    impl Checkpoint for MemoryLog {
        fn saved(&self, _: &GroupKey, _: &str) -> Vec<(u64, String)> {
            self.earlier.clone()
        }
        fn save(&self, _: &GroupKey, _: &str, first: u64, count: u64, trials: &str) -> Result<(), SimError> {
            self.saved.lock().unwrap().push((first, count, trials.to_string()));
            Ok(())
        }
        fn trials_held(&self, _: &GroupKey, _: u64) -> u64 {
            0
        }
        fn group_done(&self, _: &GroupKey) -> Result<(), Error> {
            Ok(())
        }
        fn chunk_trials(&self) -> Option<u64> {
            Some(self.chunk)
        }
    }

    /// Asks to stop once the log holds `stop_after` chunks.
    struct StopAfterSaves<'a>(&'a MemoryLog);
    impl Observer for StopAfterSaves<'_> {
        fn stop_requested(&self) -> bool {
            self.0.saved.lock().unwrap().len() >= self.0.stop_after
        }
    }

    // Issue 17, bug 5: an interrupted group resumes from its saved chunks and
    // gives the trials of an uninterrupted run, in trial order.
    #[test]
    fn chunked_runs_resume_to_the_same_trials() {
        let tiny = crate::estimate::grid::fixture::Tiny::new();
        let spec = tiny.spec();
        let whole = run_trials(&Seeds, &spec, 9, 23, &|| {}).unwrap();
        let log = MemoryLog { earlier: Vec::new(), saved: Mutex::new(Vec::new()), chunk: 5, stop_after: 2 };
        let stopped = run_chunked(&Seeds, &spec, 9, 23, &StopAfterSaves(&log), &log);
        assert!(matches!(stopped, Err(SimError::Interrupted)));
        let saved = log.saved.into_inner().unwrap();
        let ranges: Vec<(u64, u64)> = saved.iter().map(|(f, c, _)| (*f, *c)).collect();
        assert_eq!(ranges, vec![(0, 5), (5, 5)]);
        // Resume: only trials 10..23 run (counted by the observer).
        let ran = std::sync::atomic::AtomicU64::new(0);
        let earlier = saved.into_iter().map(|(f, _, t)| (f, t)).collect();
        let log = MemoryLog { earlier, saved: Mutex::new(Vec::new()), chunk: 5, stop_after: usize::MAX };
        let resumed = run_chunked(&Seeds, &spec, 9, 23, &|| _ = ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed), &log);
        assert_eq!(resumed.unwrap(), whole);
        assert_eq!(ran.into_inner(), 13);
    }

    #[test]
    fn the_pacer_aims_at_the_target_in_whole_rounds_of_workers() {
        let mut p = Pacer { fixed: None, workers: 4, size: 8 };
        p.record(8, Duration::from_millis(100));
        assert_eq!(p.size(), 32, "growth is capped at 4× per chunk");
        p.record(32, Duration::from_millis(32 * 150));
        assert_eq!(p.size(), 12, "1.5 s / 150 ms = 10 trials, rounded up to 3 rounds of 4");
        p.record(12, Duration::from_secs(60));
        assert_eq!(p.size(), 4, "never below one trial per worker");
    }
}

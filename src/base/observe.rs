//! Watching a long run: what it reports as it goes (its standing at the
//! start, each finished trial, cells written) and the one question it asks
//! (whether to stop before the next chunk of trials). One trait for every
//! command; the command line's progress bar, the Python binding and
//! [`Silent`] implement it.

/// Where a run stands, for progress displays: trials and cells finished
/// (a resumed sweep's earlier work included) out of the whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    /// Trials finished: those of the cells on disk and those in the checkpoint.
    pub trials_done: u64,
    pub trials_total: u64,
    pub cells_done: usize,
    pub cells_total: usize,
    /// Key rows the rest of the run scores (trials × candidate rows ×
    /// precisions, saturating): its cost, for a warning before a long run.
    pub rows_to_score: u64,
}

/// What a run reports as it goes, and asks before each chunk of trials.
/// Every method has a default that ignores the report; a plain closure
/// `Fn()` is an observer that is called once per finished trial.
pub trait Observer: Sync {
    /// Once, before any work: how much is done already (a resumed sweep).
    fn started(&self, _standing: &Standing) {}
    /// A trial finished (the prediction's trials count too).
    fn trial_done(&self) {}
    /// A haystack group's cells were written: `cells_done` in all.
    fn cells_written(&self, _cells_done: usize) {}
    /// Whether to stop before the next chunk of trials; the run then
    /// returns `SimError::Interrupted` with everything finished saved.
    fn stop_requested(&self) -> bool {
        false
    }
}

impl<F: Fn() + Sync> Observer for F {
    fn trial_done(&self) {
        self()
    }
}

/// An observer that watches nothing and never stops a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Observer for Silent {}

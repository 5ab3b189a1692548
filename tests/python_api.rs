//! The library functions the Python binding (python/, issue 19) stands on:
//! each must give what the command line's path gives, bit for bit.

use dsa_recall::base::observe::Observer;
use dsa_recall::run::output::results_jsonl;
use dsa_recall::run::store::{self, StoreOptions};
use dsa_recall::run::sweep::run_sweep;
use dsa_recall::tensors::dump::{dump_trial, trial_tensors};
use dsa_recall::tensors::replay::{capture_from_arrays, replay, Capture};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::common::scenario;

const SMALL: &str = "[sweep]\ncontexts = \"1K,4K\"\ndepths = \"0,60\"\ntopk = \"512\"\nprecisions = \"fp32,fp8\"\ntrials = 24\nseed = 5\n";

/// Counts trials and asks to stop after `stop_after` of them.
struct Counting {
    trials: AtomicU64,
    stop_after: u64,
}

impl Observer for Counting {
    fn trial_done(&self) {
        self.trials.fetch_add(1, Ordering::Relaxed);
    }
    fn stop_requested(&self) -> bool {
        self.trials.load(Ordering::Relaxed) >= self.stop_after
    }
}

/// Issue 19: `dsa_recall.sweep` (in memory) gives the cells `sweep --out` writes.
#[test]
fn in_memory_sweep_gives_the_cells_of_the_durable_one() {
    let s = scenario(SMALL);
    let observer = Counting { trials: AtomicU64::new(0), stop_after: u64::MAX };
    let memory = run_sweep(&s, &observer).unwrap();
    assert_eq!(observer.trials.load(Ordering::Relaxed), s.trials * s.depths.len() as u64);
    let dir = tempfile::tempdir().unwrap();
    let durable = store::sweep_into(dir.path(), &s, StoreOptions::default(), &|| {}).unwrap();
    assert_eq!(results_jsonl(&memory.cells), results_jsonl(&durable.cells));
    assert_eq!(memory.effective, durable.effective);
}

/// Issue 19: Ctrl-C in a notebook reaches the sweep as the observer's stop.
#[test]
fn in_memory_sweep_stops_when_asked() {
    let s = scenario(SMALL);
    let observer = Counting { trials: AtomicU64::new(0), stop_after: 1 };
    let err = run_sweep(&s, &observer).unwrap_err();
    assert!(matches!(err, dsa_recall::Error::Sim(dsa_recall::SimError::Interrupted)), "{err}");
    assert!(observer.trials.load(Ordering::Relaxed) < s.trials * s.depths.len() as u64);
}

/// Issue 19: `dsa_recall.trial` returns exactly the tensors of `trial --dump`.
#[test]
fn trial_tensors_are_the_dump_files_tensors() {
    let s = scenario("[sweep]\ncontexts = \"4K\"\ndepths = \"30\"\ntopk = \"512\"\nprecisions = \"fp32,fp8,nvfp4\"\nseed = 9\n");
    let t = trial_tensors(&s, 2, &|_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.safetensors");
    dump_trial(&s, 2, &path, false, &|_| {}).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(file.len(), t.tensors.len());
    for (name, x) in &t.tensors {
        let y = file.tensor(name).unwrap();
        assert_eq!((y.shape(), y.data()), (x.shape(), x.bytes()), "{name}");
    }
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(meta.metadata().as_ref().unwrap()["dsa_recall"], t.metadata);
    assert_eq!(t.tensors.iter().find(|(n, _)| n == "fp8.k_codes").unwrap().1.numpy_dtype(), "|u1");
}

/// Issue 19: arrays handed over in memory are checked like a file's tensors.
#[test]
fn arrays_are_checked_like_files() {
    let (h, d, n) = (2usize, 8usize, 6usize);
    let q: Vec<f32> = (0..h * d).map(|i| (i as f32 * 0.37).sin()).collect();
    let k: Vec<f32> = (0..n * d).map(|i| (i as f32 * 0.91).cos()).collect();
    let w = vec![1.0, 0.5];
    let cap = capture_from_arrays("arrays", (vec![h, d], q.clone()), (vec![n, d], k.clone()), (vec![h], w.clone())).unwrap();
    let Capture::Single(rec) = cap else { panic!("one layer") };
    let fp32 = dsa_recall::score::variant::PrecisionVariant::builtin("fp32").unwrap();
    let rows = replay(&rec, &[fp32], &[3]).unwrap();
    assert_eq!(rows[0].selection_recall, 1.0);
    let err = capture_from_arrays("arrays", (vec![h, d], q.clone()), (vec![n, d + 1], k.clone()), (vec![h], w.clone())).unwrap_err();
    assert_eq!(err.to_string(), "arrays: keys have shape [6, 9] but 48 values");
    let mut bad = k;
    bad[5] = f32::NAN;
    let err = capture_from_arrays("arrays", (vec![h, d], q), (vec![n, d], bad), (vec![h], w)).unwrap_err();
    assert_eq!(err.to_string(), "arrays: tensors hold NaN or infinite values");
}

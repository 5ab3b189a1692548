//! `dsa-recall check` on a V3.2-sized capture (`cargo bench --bench check`;
//! docs/PERFORMANCE.md quotes it). Issue 29: a 61-layer capture, 64K rows
//! per layer, k 2048, one query per layer (64 heads × 128 dims, sglang's
//! V3.2 fp8 layout, 528 MiB of cache) checks in ≤ 10 s on 2 cores with peak
//! memory ≤ 2× the capture's size.
//!
//! The capture is written once by the project's writer (under
//! target/check-bench/, reused while its name matches the spec), healthy
//! (the engine's selection is the reference's). Each round runs the check
//! in a fresh child process on 2 threads (this bench re-executed with
//! `--child`), which reports the wall time of `check_path` (reading the
//! file included) and its VmHWM; the release CLI runs once more under
//! `/usr/bin/time -v` when that exists. Medians of the rounds are printed.
//! DSA_BENCH_QUICK=1 runs one round; DSA_BENCH_LAYERS=N writes fewer layers.

// The tests' capture writer; the bench uses a part of it.
#[allow(dead_code)]
#[path = "../tests/common/capture_writer.rs"]
mod capture_writer;
use capture_writer::{SyntheticCapture, SyntheticSpec};
use dsa_recall::tensors::check::{check_path, CheckOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const ROWS: usize = 65_536;
const TOPK: usize = 2048;
const HEADS: usize = 64;

fn layers() -> usize {
    std::env::var("DSA_BENCH_LAYERS").ok().and_then(|v| v.parse().ok()).unwrap_or(61)
}

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
}

fn capture_path() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/check-bench");
    dir.join(format!("v32-{}l-{ROWS}r-k{TOPK}-h{HEADS}.safetensors", layers()))
}

fn write_capture(path: &Path) {
    let mut spec = SyntheticSpec::small("sglang-v32-fp8", 29);
    spec.layers = layers();
    spec.queries_per_layer = 1;
    spec.seq_len = ROWS;
    spec.heads = HEADS;
    spec.topk = TOPK;
    spec.spare_blocks = 16;
    let start = Instant::now();
    let c = SyntheticCapture::generate(spec).expect("generate");
    std::fs::create_dir_all(path.parent().unwrap()).expect("mkdir");
    c.write_safetensors(path).expect("write");
    eprintln!("wrote {} ({:.0} MiB) in {:.1} s", path.display(), bytes(path) as f64 / (1 << 20) as f64, start.elapsed().as_secs_f64());
}

fn bytes(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn child(path: &Path) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    let start = Instant::now();
    let report = pool.install(|| check_path(path, &CheckOptions::default())).expect("check");
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(report.exit_code, 0, "the bench capture is healthy");
    assert_eq!(report.pairs, layers());
    println!("seconds {seconds} vmhwm_kib {} ties {} near {}", vm_hwm_kib(), report.ties_at_cut, report.within_bound_of_cut);
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = capture_path();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(Path::new(&args[i + 1]));
        return;
    }
    if !path.exists() {
        write_capture(&path);
    }
    let size = bytes(&path);
    let rounds = if std::env::var_os("DSA_BENCH_QUICK").is_some() { 1 } else { 5 };
    let exe = std::env::current_exe().expect("exe");
    let (mut times, mut peaks) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let out = Command::new(&exe).arg("--child").arg(&path).output().expect("child");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stderr));
        let words: Vec<&str> = text.split_whitespace().collect();
        let field =
            |name: &str| words.iter().position(|w| *w == name).and_then(|i| words.get(i + 1)?.parse::<f64>().ok()).unwrap_or(f64::NAN);
        times.push(field("seconds"));
        peaks.push(field("vmhwm_kib") * 1024.0);
        eprintln!("round: {text}");
    }
    let mib = |b: f64| b / (1u64 << 20) as f64;
    println!("check, {} layers × {ROWS} rows, k {TOPK}, {HEADS} heads, sglang-v32-fp8, 2 threads, {rounds} rounds", layers());
    println!("  capture            {:>9.1} MiB", mib(size as f64));
    println!("  check_path median  {:>9.3} s   (min {:.3} s)", median(times.clone()), times.iter().copied().fold(f64::INFINITY, f64::min));
    let peak = peaks.iter().copied().fold(0.0, f64::max);
    println!("  peak RSS (VmHWM)   {:>9.1} MiB = {:.2} × the capture", mib(peak), peak / size as f64);
    // The CLI, once, under /usr/bin/time -v.
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/dsa-recall");
    if Path::new("/usr/bin/time").exists() && cli.exists() {
        let start = Instant::now();
        let out =
            Command::new("/usr/bin/time").arg("-v").arg(&cli).arg("check").arg(&path).env("RAYON_NUM_THREADS", "2").output().expect("time");
        let wall = start.elapsed().as_secs_f64();
        let err = String::from_utf8_lossy(&out.stderr);
        let rss =
            err.lines().find(|l| l.contains("Maximum resident set size")).and_then(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok());
        println!(
            "  release CLI        {:>9.3} s wall, max RSS {} (/usr/bin/time -v; exit {:?})",
            wall,
            rss.map_or("?".into(), |kib| format!("{:.1} MiB = {:.2} ×", mib(kib * 1024.0), kib * 1024.0 / size as f64)),
            out.status.code()
        );
    } else {
        println!("  release CLI        (skipped: needs /usr/bin/time and target/release/dsa-recall)");
    }
}

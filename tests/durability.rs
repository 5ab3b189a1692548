//! Long sweeps never lose or mix work: interruption and resume, shards and
//! merge, and the checks that refuse to combine what does not belong together.

use assert_cmd::cargo::cargo_bin;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FILES: [&str; 11] = [
    "results.jsonl",
    "summary.csv",
    "effective_context.csv",
    "manifest.json",
    "recall_vs_context.png",
    "heatmap.png",
    "heatmap_model.png",
    "heatmap_diff.png",
    "fidelity.png",
    "rank_margin.png",
    "report.html",
];

fn grid() -> Vec<String> {
    "--contexts 1K..16K --depths 0,20,40,60,80,100 --topk 64,128 --precisions bf16,fp32".split(' ').map(String::from).collect()
}

fn sweep(args: &[String], extra: &[&str]) -> std::process::Output {
    Command::new(cargo_bin("dsa-recall")).arg("sweep").args(args).args(extra).output().expect("run dsa-recall")
}

fn ok(out: std::process::Output) {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
}

fn same_files(a: &Path, b: &Path) {
    for f in FILES {
        let (x, y) = (std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap());
        assert!(x == y, "{f} differs between {} and {}", a.display(), b.display());
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|t| t.lines().count()).unwrap_or(0)
}

fn one_line_error(out: &std::process::Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.contains(needle), "{err}");
}

#[test]
fn a_killed_sweep_resumes_to_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, killed) = (tmp.path().join("full"), tmp.path().join("killed"));
    let mut args = grid();
    args.extend(["--trials", "150", "--threads", "1"].map(String::from));
    ok(sweep(&args, &["--out", full.to_str().unwrap()]));
    let total = lines(&full.join("results.jsonl"));
    assert_eq!(total, 5 * 6 * 2 * 2);

    // Kill (SIGKILL) as soon as some but not all cells are on disk.
    let mut child = Command::new(cargo_bin("dsa-recall"))
        .arg("sweep")
        .args(&args)
        .args(["--out", killed.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while lines(&killed.join("results.jsonl")) == 0 && start.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let at_kill = lines(&killed.join("results.jsonl"));
    assert!(at_kill > 0 && at_kill < total, "killed with {at_kill} of {total} cells written");
    assert!(std::fs::read_to_string(killed.join("manifest.json")).unwrap().contains("\"running\""));

    // A torn last line (a write cut short) is dropped on resume too.
    let mut f = std::fs::OpenOptions::new().append(true).open(killed.join("results.jsonl")).unwrap();
    std::io::Write::write_all(&mut f, b"{\"context_tokens\":10").unwrap();
    drop(f);

    ok(sweep(&args, &["--out", killed.to_str().unwrap(), "--resume"]));
    same_files(&full, &killed);
}

#[test]
fn three_shards_merge_to_the_same_bytes_as_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    let d = |n: &str| tmp.path().join(n);
    let mut args = grid();
    args.extend(["--trials", "20"].map(String::from));
    ok(sweep(&args, &["--out", d("full").to_str().unwrap()]));
    for i in 1..=3 {
        ok(sweep(&args, &["--shard", &format!("{i}/3"), "--out", d(&format!("s{i}")).to_str().unwrap()]));
    }
    let merge = |dirs: &[&str], out: &str| {
        Command::new(cargo_bin("dsa-recall"))
            .arg("merge")
            .args(dirs.iter().map(|x| d(x)))
            .args(["--out", d(out).to_str().unwrap()])
            .output()
            .unwrap()
    };
    ok(merge(&["s2", "s3", "s1"], "merged"));
    same_files(&d("full"), &d("merged"));

    // Refusals: a missing shard, a shard given twice, a different configuration, an unfinished shard.
    one_line_error(&merge(&["s1", "s2"], "x1"), "shard 3/3 is missing");
    one_line_error(&merge(&["s1", "s2", "s2"], "x2"), "given twice");
    let mut other = grid();
    other.extend(["--trials", "21", "--shard", "3/3", "--out", d("s3-other").to_str().unwrap()].map(String::from));
    ok(sweep(&other, &[]));
    one_line_error(&merge(&["s1", "s2", "s3-other"], "x3"), "trials (20 vs 21)");
    let manifest = d("s3").join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap().replace("\"complete\"", "\"running\"");
    std::fs::write(&manifest, text).unwrap();
    one_line_error(&merge(&["s1", "s2", "s3"], "x4"), "not complete");
    for x in ["x1", "x2", "x3", "x4"] {
        assert!(!d(x).exists(), "{x} was created by a refused merge");
    }
}

#[test]
fn resume_refuses_what_it_cannot_continue() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut args = grid();
    args.extend(["--trials", "10"].map(String::from));
    ok(sweep(&args, &["--out", dir.to_str().unwrap()]));
    let mut changed = grid();
    changed.extend(["--trials", "10", "--seed", "7"].map(String::from));
    one_line_error(&sweep(&changed, &["--out", dir.to_str().unwrap(), "--resume"]), "seed (42 vs 7)");
    one_line_error(&sweep(&args, &["--out", dir.to_str().unwrap(), "--resume", "--shard", "1/2"]), "different --shard");
    one_line_error(&sweep(&args, &["--out", tmp.path().join("none").to_str().unwrap(), "--resume"]), "not a dsa-recall output directory");
    one_line_error(&sweep(&args, &["--out", dir.to_str().unwrap(), "--resume", "--force"]), "--force");
    // Resuming a finished sweep changes nothing.
    let before: Vec<Vec<u8>> = FILES.iter().map(|f| std::fs::read(dir.join(f)).unwrap()).collect();
    ok(sweep(&args, &["--out", dir.to_str().unwrap(), "--resume"]));
    let after: Vec<Vec<u8>> = FILES.iter().map(|f| std::fs::read(dir.join(f)).unwrap()).collect();
    assert!(before == after);
}

#[test]
fn validation_refuses_impossible_runs_before_writing_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never");
    let o = out.to_str().unwrap();
    let s = |extra: &[&str]| sweep(&[], &[&["--out", o], extra].concat());
    one_line_error(&s(&["--shard", "0/3"]), "--shard");
    one_line_error(&s(&["--shard", "4/3"]), "--shard");
    one_line_error(&s(&["--contexts", "1K", "--topk", "512"]), "sweep.topk");
    one_line_error(&s(&["--trials", "10000000"]), "GiB");
    assert!(!out.exists());
}

// ---- Issue 17, bug 5: a kill loses at most a chunk of trials ----

/// One haystack group (one depth), so before the checkpoint the whole sweep
/// was one unit of work and a kill lost all of it.
fn one_depth() -> Vec<String> {
    "--contexts 8K,32K --depths 50 --topk 64,256 --precisions bf16,fp32 --trials 240 --threads 1".split(' ').map(String::from).collect()
}

/// Checkpoint chunks of 6 trials (a testing knob), so that a sweep can be
/// caught between chunks.
const CHUNK: (&str, &str) = ("DSA_RECALL_CHUNK_TRIALS", "6");

fn spawn_sweep(args: &[String], out: &Path, extra_env: &[(&str, &str)]) -> std::process::Child {
    Command::new(cargo_bin("dsa-recall"))
        .arg("sweep")
        .args(args)
        .args(["--out", out.to_str().unwrap()])
        .envs([CHUNK].iter().chain(extra_env).copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the checkpoint holds a whole chunk line.
fn wait_for_checkpoint(dir: &Path) {
    let start = Instant::now();
    let chunk_line = |t: String| t.split_inclusive('\n').any(|l| l.starts_with("{\"crc32\"") && l.ends_with('\n'));
    while !std::fs::read_to_string(dir.join("checkpoint.jsonl")).is_ok_and(chunk_line) {
        assert!(start.elapsed() < Duration::from_secs(120), "no checkpoint chunk within 2 minutes");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every file of `a` is in `b` with the same bytes, and `b` has no others.
fn same_dirs(a: &Path, b: &Path) {
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    };
    assert_eq!(names(a), names(b));
    for f in names(a) {
        assert!(std::fs::read(a.join(&f)).unwrap() == std::fs::read(b.join(&f)).unwrap(), "{f} differs");
    }
}

fn resuming_line(stderr: &str) -> (u64, u64) {
    let line = stderr.lines().find(|l| l.starts_with("resuming: ")).unwrap_or_else(|| panic!("no resuming line: {stderr}"));
    let words: Vec<&str> = line.split(' ').collect();
    assert_eq!(words[2], "of", "{line}");
    (words[1].parse().unwrap(), words[3].parse().unwrap())
}

#[test]
fn a_one_depth_sweep_killed_mid_group_resumes_from_its_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, killed) = (tmp.path().join("full"), tmp.path().join("killed"));
    let args = one_depth();
    ok(sweep(&args, &["--out", full.to_str().unwrap()]));
    assert!(!full.join("checkpoint.jsonl").exists(), "a finished sweep leaves no checkpoint");

    let mut child = spawn_sweep(&args, &killed, &[]);
    wait_for_checkpoint(&killed);
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    assert_eq!(lines(&killed.join("results.jsonl")), 0, "the group was still running");
    // A torn last line (a write cut short) is dropped.
    let mut f = std::fs::OpenOptions::new().append(true).open(killed.join("checkpoint.jsonl")).unwrap();
    std::io::Write::write_all(&mut f, b"{\"group\":{\"depth_percent\":50.0,\"contex").unwrap();
    drop(f);

    // A checkpoint of another configuration is refused with the manifest,
    // and left as it was.
    let before = std::fs::read(killed.join("checkpoint.jsonl")).unwrap();
    let mut other = one_depth();
    other.extend(["--seed", "7"].map(String::from));
    one_line_error(&sweep(&other, &["--out", killed.to_str().unwrap(), "--resume"]), "seed (42 vs 7)");
    assert!(std::fs::read(killed.join("checkpoint.jsonl")).unwrap() == before);

    // The resume takes the checkpointed trials back and simulates only the
    // rest: with a progress line per trial (period 0, one worker), it prints
    // one line per trial it runs and a last one.
    let out = Command::new(cargo_bin("dsa-recall"))
        .arg("sweep")
        .args(&args)
        .args(["--out", killed.to_str().unwrap(), "--resume"])
        .env("DSA_RECALL_PROGRESS_EVERY", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let (done, total) = resuming_line(&err);
    assert_eq!(total, 240);
    assert!(done >= 6 && done % 6 == 0 && done < total, "{err}");
    assert!(err.contains(&format!("resuming: {done} of 240 trials done (0 of 8 cells complete)")), "{err}");
    let progress_lines = err.lines().filter(|l| l.starts_with("progress: ")).count() as u64;
    assert_eq!(progress_lines, total - done + 1, "only the missing trials ran");
    same_dirs(&full, &killed);
}

#[test]
fn sigint_and_sigterm_stop_cleanly_and_say_how_to_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, dir) = (tmp.path().join("full"), tmp.path().join("dir"));
    let args = one_depth();
    ok(sweep(&args, &["--out", full.to_str().unwrap()]));
    let quiet = [("DSA_RECALL_PROGRESS_EVERY", "1000")];
    for (signal, code, force) in [("-INT", 130, false), ("-TERM", 143, true)] {
        // The second run starts over with --force in a directory whose
        // checkpoint is garbage: a fresh run must remove it, or the resume
        // below would refuse it.
        let mut a = args.clone();
        if force {
            std::fs::write(dir.join("checkpoint.jsonl"), "not a checkpoint line\n").unwrap();
            a.push("--force".into());
        }
        let child = spawn_sweep(&a, &dir, &quiet);
        wait_for_checkpoint(&dir);
        let sent = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
        assert!(sent.success());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let line = err.lines().next().unwrap();
        assert!(line.starts_with("interrupted: rerun with --resume ("), "{err}");
        assert!(line.ends_with(&format!("--out {} --resume)", dir.display())) && !line.contains("--force"), "{err}");
        assert!(std::fs::read_to_string(dir.join("manifest.json")).unwrap().contains("\"running\""));
        assert!(lines(&dir.join("checkpoint.jsonl")) >= 1);
    }
    let out = sweep(&args, &["--out", dir.to_str().unwrap(), "--resume"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(resuming_line(&err).0 > 0, "{err}");
    same_dirs(&full, &dir);
}

#[test]
fn progress_is_plain_lines_when_stderr_is_not_a_terminal() {
    // Issue 17, progress: no escape codes in logs, and cells counted.
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(cargo_bin("dsa-recall"))
        .args(["sweep", "--contexts", "1K,2K", "--depths", "0,100", "--topk", "64", "--trials", "10", "--threads", "1", "--out"])
        .arg(tmp.path().join("s"))
        .env("DSA_RECALL_PROGRESS_EVERY", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(!err.contains('\x1b') && !err.contains('\r'), "escape codes in {err:?}");
    let progress: Vec<&str> = err.lines().filter(|l| l.starts_with("progress: ")).collect();
    assert_eq!(progress.len(), 21, "one line per trial and a last one: {err}");
    assert!(progress[4].starts_with("progress: 25 % (5/20 trials, 0/"), "{err}");
    assert!(progress[14].contains("(15/20 trials, 4/8 cells written) · "), "cells of the first depth are done: {err}");
    assert!(
        progress[20].starts_with("progress: 100 % (20/20 trials, 8/8 cells written) · ") && progress[20].contains(" elapsed · ETA "),
        "{err}"
    );

    // `run` shows its trials too (a long run no longer sits silent).
    let out = Command::new(cargo_bin("dsa-recall"))
        .args(["run", "--context", "4K", "--depth", "50", "--topk", "64", "--precision", "bf16", "--trials", "8", "--threads", "1"])
        .env("DSA_RECALL_PROGRESS_EVERY", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(err.lines().any(|l| l.starts_with("progress: 50 % (4/8 trials) · ")), "{err}");
    // Without the knob, short runs print nothing on stderr.
    let out = Command::new(cargo_bin("dsa-recall"))
        .args(["run", "--context", "4K", "--depth", "50", "--topk", "64", "--precision", "bf16", "--trials", "8"])
        .output()
        .unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn shards_and_resume_keep_every_needle_offset() {
    // With several needle offsets a unit holds offsets × k × precisions
    // cells; resume and merge counted k × precisions only.
    let tmp = tempfile::tempdir().unwrap();
    let d = |n: &str| tmp.path().join(n);
    let args: Vec<String> =
        "--contexts 1K,4K --depths 0,100 --topk 64 --needle-offsets all --trials 10".split(' ').map(String::from).collect();
    ok(sweep(&args, &["--out", d("full").to_str().unwrap()]));
    let before = std::fs::read(d("full").join("results.jsonl")).unwrap();
    ok(sweep(&args, &["--out", d("full").to_str().unwrap(), "--resume"]));
    assert!(std::fs::read(d("full").join("results.jsonl")).unwrap() == before, "resuming a finished sweep changes nothing");
    for i in 1..=2 {
        ok(sweep(&args, &["--shard", &format!("{i}/2"), "--out", d(&format!("s{i}")).to_str().unwrap()]));
    }
    ok(Command::new(cargo_bin("dsa-recall")).arg("merge").args([d("s2"), d("s1")]).arg("--out").arg(d("merged")).output().unwrap());
    same_dirs(&d("full"), &d("merged"));
}

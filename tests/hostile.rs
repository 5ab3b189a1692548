//! The hostile inputs a new user met, each run
//! through the CLI: outputs onto devices, FIFOs and symlinks, two processes
//! on one directory, edited checkpoints, endless or huge inputs and
//! outputs, a weight map that leaves its directory, and the exit codes of
//! faults that are the input's or the environment's (2, one line).

#![cfg(unix)]

use assert_cmd::cargo::cargo_bin;
use dsa_recall::base::files::{DirLock, LOCK_FILE};
use dsa_recall::estimate::driver::{Checkpoint, GroupKey};
use dsa_recall::run::checkpoint::{FileCheckpoint, CHECKPOINT_FILE};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn run(args: &[&str]) -> Output {
    Command::new(cargo_bin("dsa-recall")).args(args).output().expect("run dsa-recall")
}

fn ok(out: &Output) {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
}

/// Exit 2 with one line on stderr that contains every one of `needles`.
fn refused(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "no {n:?} in: {err}");
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

const SMALL_TRIAL: [&str; 9] = ["trial", "--context", "4K", "--depth", "50", "--topk", "64", "--precisions", "fp32,fp8"];
const SMALL_SWEEP: [&str; 7] = ["sweep", "--contexts", "2K,4K", "--depths", "50", "--trials", "8"];

fn trial_to(path: &Path) -> Output {
    run(&[&SMALL_TRIAL[..], &["--dump", s(path)]].concat())
}

fn sweep_into(dir: &Path, extra: &[&str]) -> Output {
    run(&[&SMALL_SWEEP[..], &["--out", s(dir)], extra].concat())
}

// ---- item 1: outputs replace only regular files ----

#[test]
fn a_device_or_fifo_output_is_refused_and_left_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    // /dev/null stands in for /dev/full: refused before any write.
    refused(&trial_to(Path::new("/dev/null")), &["/dev/null: is a character device"]);
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    let fifo = tmp.path().join("pipe.safetensors");
    mkfifo(&fifo);
    refused(&trial_to(&fifo), &["pipe.safetensors: is a FIFO"]);
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    refused(&trial_to(tmp.path()), &["is a directory"]);
    // observe --out and calibrate --out: refused before their inputs are read.
    let observe = run(&["observe", "--capture", "missing.json", "--needle-tokens", "1000..1016", "--config", "fp8", "--out", s(&fifo)]);
    refused(&observe, &["is a FIFO"]);
    refused(&run(&["calibrate", "--checkpoint", "missing", "--out", "/dev/null"]), &["/dev/null: is a character device"]);
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
}

#[test]
fn a_symlink_output_is_refused_and_its_target_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real.safetensors");
    let link = tmp.path().join("link.safetensors");
    std::fs::write(&real, b"old").unwrap();
    std::os::unix::fs::symlink("real.safetensors", &link).unwrap();
    refused(&trial_to(&link), &["link.safetensors: is a symlink", "remove the link"]);
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), b"old", "never written through");
    // A link to a device is refused as a link.
    let to_null = tmp.path().join("null.safetensors");
    std::os::unix::fs::symlink("/dev/null", &to_null).unwrap();
    refused(&trial_to(&to_null), &["is a symlink"]);
    // Nothing but the file and two links: no temporary left.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 3);
}

#[test]
fn a_chart_path_that_is_a_fifo_is_refused_by_plot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("o");
    ok(&sweep_into(&dir, &[]));
    let chart = dir.join("recall_vs_context.png");
    std::fs::remove_file(&chart).unwrap();
    mkfifo(&chart);
    refused(&run(&["plot", s(&dir)]), &["recall_vs_context.png: is a FIFO"]);
    assert!(std::fs::metadata(&chart).unwrap().file_type().is_fifo());
}

// ---- item 2: one process per output directory ----

#[test]
fn a_held_directory_is_refused_with_the_holders_pid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("o9");
    ok(&sweep_into(&dir, &[]));
    let results = std::fs::read(dir.join("results.jsonl")).unwrap();
    // The library's own lock, taken here as a running sweep holds it.
    let lock = DirLock::acquire(&dir).unwrap();
    let pid = format!("pid {}", std::process::id());
    refused(&sweep_into(&dir, &["--force", "--precisions", "bf16"]), &["o9: in use by another dsa-recall process", &pid]);
    refused(&sweep_into(&dir, &["--resume"]), &[&pid]);
    refused(&run(&["plot", s(&dir)]), &[&pid]);
    refused(&run(&["merge", s(&dir), "--out", s(&dir), "--force"]), &[&pid]);
    assert!(std::fs::read(dir.join("results.jsonl")).unwrap() == results, "the holder's results are untouched");
    drop(lock);
    ok(&sweep_into(&dir, &["--resume"]));
    assert!(!dir.join(LOCK_FILE).exists(), "a finished run removes its lock file");
}

#[test]
fn a_second_sweep_is_refused_while_the_first_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("o");
    let mut first = Command::new(cargo_bin("dsa-recall"))
        .args(["sweep", "--contexts", "4K..64K", "--trials", "300", "--threads", "1", "--out", s(&dir)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !std::fs::read_to_string(dir.join(LOCK_FILE)).is_ok_and(|t| t.ends_with('\n')) {
        assert!(start.elapsed() < Duration::from_secs(60), "no lock file within a minute");
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = sweep_into(&dir, &["--force"]);
    first.kill().unwrap();
    first.wait().unwrap();
    refused(&second, &[&format!("pid {}", first.id())]);
}

// ---- item 3: an edited checkpoint is refused on resume ----

/// A finished small sweep in `dir` with `line` as its checkpoint.
fn with_checkpoint_line(dir: &Path, edit: impl Fn(&str) -> String) {
    ok(&sweep_into(dir, &[]));
    let cp = FileCheckpoint::fresh(dir, None).unwrap();
    let group = GroupKey { depth_percent: 50.0, contexts: vec![2048, 4096], shared_depths: Vec::new() };
    cp.save(&group, "full", 0, 1, "[{\"cells\":[]}]").unwrap();
    let path = dir.join(CHECKPOINT_FILE);
    let line = std::fs::read_to_string(&path).unwrap();
    assert!(line.starts_with("{\"crc32\":"), "{line}");
    std::fs::write(&path, edit(&line)).unwrap();
}

#[test]
fn an_edited_or_old_checkpoint_is_refused_naming_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    type Edit = fn(&str) -> String;
    let cases: [(&str, Edit, &str); 3] = [
        ("edited", |l| l.replace("\"first\":0", "\"first\":-7"), "checksum"),
        ("flipped", |l| format!("{l}{}", l.replace("\"count\":1", "\"count\":400")), "checksum"),
        ("old", |l| l[l.find("\"chunk\":").unwrap() + 8..l.len() - 2].to_string() + "\n", "no checksum"),
    ];
    for (name, edit, why) in cases {
        let dir = tmp.path().join(name);
        with_checkpoint_line(&dir, edit);
        let line = if name == "flipped" { ":2: " } else { ":1: " };
        refused(&sweep_into(&dir, &["--resume"]), &[&format!("{CHECKPOINT_FILE}{line}"), why, "delete the file"]);
    }
}

// ---- item 4: bounded inputs, threads and outputs ----

#[test]
fn endless_inputs_fail_fast() {
    let start = Instant::now();
    // A device is refused before it is read; a regular file by its size.
    refused(&run(&["sweep", "--config", "/dev/zero", "--trials", "5"]), &["/dev/zero", "is a character device"]);
    refused(&run(&["diagnose", "--observations", "/dev/zero"]), &["/dev/zero", "is a character device"]);
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("big.toml");
    std::fs::File::create(&big).unwrap().set_len(5 << 20).unwrap();
    refused(&run(&["sweep", "--config", s(&big), "--trials", "5"]), &["big.toml", "larger than 4 MiB"]);
    std::os::unix::fs::symlink("/dev/zero", tmp.path().join("model.safetensors.index.json")).unwrap();
    let index = tmp.path().join("model.safetensors.index.json");
    refused(&run(&["calibrate", "--checkpoint", s(&index), "--out", s(&tmp.path().join("c.toml"))]), &["is a character device"]);
    assert!(start.elapsed() < Duration::from_secs(30), "took {:?}", start.elapsed());
}

#[test]
fn thread_counts_past_1024_are_refused() {
    for n in ["1025", "100000"] {
        refused(&run(&["sweep", "--contexts", "4K", "--trials", "5", "--threads", n]), &["--threads", n, "from 1 to 1024"]);
    }
    let tmp = tempfile::tempdir().unwrap();
    ok(&run(&["sweep", "--contexts", "4K", "--depths", "50", "--trials", "2", "--threads", "64", "--out", s(&tmp.path().join("o"))]));
}

#[test]
fn a_dump_over_1_gib_needs_the_flag_and_is_refused_before_simulating() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("big.safetensors");
    let start = Instant::now();
    refused(
        &run(&["trial", "--context", "16M", "--depth", "50", "--topk", "512", "--precisions", "fp8,bf16", "--dump", s(&out)]),
        &["GiB", "--allow-large-output"],
    );
    assert!(start.elapsed() < Duration::from_secs(10), "simulated first: {:?}", start.elapsed());
    assert!(!out.exists());
}

// ---- item 5: a weight map stays inside its checkpoint directory ----

#[test]
fn weight_map_entries_outside_the_checkpoint_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, file) in [("up", "../../../../etc/passwd"), ("abs", "/etc/passwd"), ("mid", "a/../../x.safetensors")] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let index = format!("{{\"weight_map\":{{\"layers.2.attn.indexer.wq_b.weight\":{file:?}}}}}");
        std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
        let out = run(&["calibrate", "--checkpoint", s(&dir), "--out", s(&tmp.path().join("c.toml"))]);
        refused(&out, &["layers.2.attn.indexer.wq_b.weight", file, "inside the index's directory"]);
    }
}

// ---- item 6: a diagnosis needs a hypothesis to weigh ----

#[test]
fn diagnose_refuses_an_empty_hypothesis_list() {
    for list in ["", "healthy"] {
        refused(&run(&["diagnose", "--observations", "missing.csv", "--hypotheses", list]), &["--hypotheses", "besides healthy"]);
    }
}

// ---- item 7: exit 2 for the input's and the environment's faults ----

#[test]
fn bad_files_in_an_output_directory_exit_2_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("o");
    ok(&sweep_into(&dir, &[]));
    // recall 1.5 in results.jsonl: plot names file and line.
    let results = dir.join("results.jsonl");
    let text = std::fs::read_to_string(&results).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let at = lines[1].find("\"recall\":").unwrap() + 9;
    let end = at + lines[1][at..].find(',').unwrap();
    lines[1].replace_range(at..end, "1.5");
    std::fs::write(&results, lines.join("\n") + "\n").unwrap();
    refused(&run(&["plot", s(&dir)]), &["results.jsonl line 2", "recall = 1.5"]);
    std::fs::write(&results, text).unwrap();
    // A truncated manifest on --resume.
    let manifest = dir.join("manifest.json");
    let m = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, &m[..m.len() / 2]).unwrap();
    refused(&sweep_into(&dir, &["--resume"]), &["manifest.json: not a valid dsa-recall file"]);
}

/// A tmpfs of `size` at `dir`, when this process may mount one (root in a
/// container); None elsewhere, where the full-disk cases are skipped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", s(dir)]).output().ok()?;
        status.status.success().then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_while_checkpointing_or_plotting_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(tiny) = Tmpfs::mount(&tmp.path().join("tiny"), "64k") else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    let out = run(&["sweep", "--trials", "50", "--out", s(&tiny.0.join("out"))]);
    refused(&out, &["checkpoint.jsonl", "No space left on device"]);
    drop(tiny);
    let dir = tmp.path().join("o");
    ok(&sweep_into(&dir, &[]));
    let Some(small) = Tmpfs::mount(&tmp.path().join("small"), "2m") else { return };
    let copy = small.0.join("o");
    std::fs::create_dir(&copy).unwrap();
    for f in ["results.jsonl", "manifest.json"] {
        std::fs::copy(dir.join(f), copy.join(f)).unwrap();
    }
    // Fill the rest of the disk.
    let mut fill = std::fs::File::create(small.0.join("fill")).unwrap();
    while std::io::Write::write_all(&mut fill, &[0; 65536]).is_ok() {}
    drop(fill);
    refused(&run(&["plot", s(&copy)]), &["No space left on device"]);
}

//! Inputs read with a cap and outputs checked whole, through the CLI:
//! stdin, devices and FIFOs end at once with one short line; a refused
//! `--out` leaves its directory byte for byte as it was; a symlink inside
//! `--out` is refused, never written through; and the small messages a
//! new user met (an interrupted sweep, ranges, the catalogue's header).

#![cfg(unix)]

use assert_cmd::cargo::cargo_bin;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where a test must end, and where it is killed so that CI never hangs.
const FAST: Duration = Duration::from_secs(5);
const KILL: Duration = Duration::from_secs(60);

enum Input<'a> {
    Null,
    File(&'a Path),
    Bytes(Vec<u8>),
}

/// Runs dsa-recall in `dir` with `input` on stdin; kills it after [`KILL`].
fn run_in(dir: &Path, args: &[&str], input: Input) -> (Output, Duration) {
    let mut cmd = Command::new(cargo_bin("dsa-recall"));
    cmd.args(args).current_dir(dir).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(match &input {
        Input::Null => Stdio::null(),
        Input::File(p) => Stdio::from(std::fs::File::open(p).unwrap()),
        Input::Bytes(_) => Stdio::piped(),
    });
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let feeder = match input {
        // A refusal may close stdin early: a broken pipe is expected.
        Input::Bytes(bytes) => {
            let mut stdin = child.stdin.take().unwrap();
            Some(std::thread::spawn(move || drop(stdin.write_all(&bytes))))
        }
        _ => None,
    };
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > KILL {
            child.kill().unwrap();
            panic!("dsa-recall {args:?} still running after {KILL:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let elapsed = start.elapsed();
    let out = child.wait_with_output().unwrap();
    if let Some(f) = feeder {
        f.join().unwrap();
    }
    (out, elapsed)
}

fn run(args: &[&str]) -> Output {
    run_in(Path::new("."), args, Input::Null).0
}

/// Exit 2, one line of at most 300 characters containing each of `needles`.
fn refused(out: &Output, needles: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.trim_end().chars().count() <= 300, "{} chars: {err}", err.len());
    for n in needles {
        assert!(err.contains(n), "no {n:?} in: {err}");
    }
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

// ---- inputs: capped, and only regular files ----

#[test]
fn endless_and_special_inputs_end_within_5_s_with_one_short_line() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("p");
    mkfifo(&fifo);
    let zero = Path::new("/dev/zero");
    let cases: Vec<(Vec<&str>, Input, Vec<&str>)> = vec![
        (vec!["quantize", "--format", "e4m3fn"], Input::File(zero), vec!["stdin", "longer than 64 MiB"]),
        // One 50 MB line of junk: the value is quoted shortened.
        (vec!["quantize", "--format", "e4m3fn"], Input::Bytes(vec![0; 50_000_000]), vec!["invalid value", "…", "(line 1)"]),
        (vec!["check", "/dev/zero"], Input::Null, vec!["/dev/zero", "is a character device", "regular file"]),
        (vec!["check", "p"], Input::Null, vec!["p: cannot read: is a FIFO"]),
        (vec!["sweep", "--config", "p", "--trials", "5"], Input::Null, vec!["p: cannot read the scenario file: is a FIFO"]),
        (vec!["replay", "/dev/zero"], Input::Null, vec!["/dev/zero", "is a character device"]),
        (
            vec!["observe", "--capture", "/dev/zero", "--needle-tokens", "10..20", "--config", "fp8", "--out", "obs.csv"],
            Input::Null,
            vec!["/dev/zero", "is a character device"],
        ),
    ];
    for (args, input, needles) in cases {
        let (out, took) = run_in(tmp.path(), &args, input);
        refused(&out, &needles);
        assert!(took < FAST, "{args:?} took {took:?}");
    }
    // Nothing was written, and the FIFO is still one.
    let names: Vec<String> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(names, ["p"]);
}

// A pipe whose writer neither writes nor closes (`sleep 100 | dsa-recall
// quantize …`) is given up after the idle timeout, here 1 s; a bad timeout
// is refused naming the variable.
#[test]
fn a_stdin_that_never_sends_ends_after_the_idle_timeout() {
    let start = Instant::now();
    let mut child = Command::new(cargo_bin("dsa-recall"))
        .args(["quantize", "--format", "e4m3fn"])
        .env("DSA_RECALL_STDIN_TIMEOUT", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held open, never written, until the child is done.
    let stdin = child.stdin.take().unwrap();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > KILL {
            child.kill().unwrap();
            panic!("quantize still waiting on a silent stdin after {KILL:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = start.elapsed();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    refused(&out, &["stdin", "nothing arrived for 1 s", "DSA_RECALL_STDIN_TIMEOUT"]);
    assert!(took >= Duration::from_secs(1) && took < FAST, "{took:?}");
    // Numbers that do arrive are read as before, timeout or not.
    let (out, _) = run_in(Path::new("."), &["quantize", "--format", "e4m3fn"], Input::Bytes(b"1.5\n".to_vec()));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1.5", "{out:?}");
    for bad in ["-1", "soon", "1e9"] {
        let out = Command::new(cargo_bin("dsa-recall"))
            .args(["quantize", "--format", "e4m3fn"])
            .env("DSA_RECALL_STDIN_TIMEOUT", bad)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        refused(&out, &["DSA_RECALL_STDIN_TIMEOUT", bad, "seconds"]);
    }
}

// ---- outputs: checked whole before anything is written ----

/// Every entry under `dir` (not following links): its kind, a link's
/// target, a file's bytes.
fn listing(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link to {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                "dir".into()
            } else if m.is_file() {
                format!("file {:?}", std::fs::read(&p).unwrap())
            } else {
                "special".into()
            };
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), what);
        }
    }
    out
}

const SWEEP: [&str; 9] = ["sweep", "--contexts", "2K,4K", "--depths", "50", "--trials", "8", "--precisions", "bf16"];

/// A finished small sweep in `dir`.
fn swept(dir: &Path) {
    let out = run(&[&SWEEP[..], &["--out", s(dir)]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn replace_with_link(path: &Path, to: &Path) {
    std::fs::remove_file(path).unwrap();
    std::os::unix::fs::symlink(to, path).unwrap();
}

#[test]
fn a_refused_out_leaves_the_directory_exactly_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, b"VICTIM").unwrap();
    let base = tmp.path().join("base");
    swept(&base);
    type Edit = fn(&Path, &Path);
    let cases: [(&str, Edit, &[&str], &[&str]); 7] = [
        ("full", |o, _| replace_with_link(&o.join("summary.csv"), Path::new("/dev/full")), &["--force"], &["summary.csv: is a symlink"]),
        (
            "outside",
            |o, v| replace_with_link(&o.join("results.jsonl"), v),
            &["--force"],
            &["results.jsonl: is a symlink", "remove the link"],
        ),
        (
            "dir",
            |o, _| {
                std::fs::remove_file(o.join("report.html")).unwrap();
                std::fs::create_dir(o.join("report.html")).unwrap();
            },
            &["--force"],
            &["report.html: is a directory"],
        ),
        ("fifo", |o, _| mkfifo(&o.join("checkpoint.jsonl")), &["--resume"], &["checkpoint.jsonl: is a FIFO"]),
        (
            "lock",
            |o, v| std::os::unix::fs::symlink(v, o.join(".dsa-recall.lock")).unwrap(),
            &["--force"],
            &[".dsa-recall.lock: is a symlink"],
        ),
        ("chart", |o, v| replace_with_link(&o.join("recall_vs_context.png"), v), &["--resume"], &["recall_vs_context.png: is a symlink"]),
        ("plain", |_, _| {}, &[], &["is not empty; pass --force"]),
    ];
    for (name, edit, flags, needles) in cases {
        let o = tmp.path().join(name);
        std::fs::create_dir(&o).unwrap();
        for e in std::fs::read_dir(&base).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), o.join(e.file_name())).unwrap();
        }
        edit(&o, &victim);
        let before = listing(&o);
        refused(&run(&[&SWEEP[..], &["--out", s(&o)], flags].concat()), needles);
        assert_eq!(listing(&o), before, "{name}: the directory changed");
        assert_eq!(std::fs::read(&victim).unwrap(), b"VICTIM", "{name}: written through a link");
    }
    // merge, plot and diagnose check their directory the same way.
    let o = tmp.path().join("full");
    let before = listing(&o);
    refused(&run(&["merge", s(&base), "--out", s(&o), "--force"]), &["summary.csv: is a symlink"]);
    refused(&run(&["plot", s(&tmp.path().join("chart"))]), &["recall_vs_context.png: is a symlink"]);
    let incidents = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/incidents");
    let (config, observations) = (incidents.join("findings.toml"), incidents.join("rocm_collapse.csv"));
    let diagnose = ["diagnose", "--config", s(&config), "--observations", s(&observations), "--out", s(&o), "--force"];
    refused(&run(&diagnose), &["summary.csv: is a symlink"]);
    assert_eq!(listing(&o), before);
    assert_eq!(std::fs::read(&victim).unwrap(), b"VICTIM");
}

#[test]
fn an_out_that_is_no_directory_is_refused_naming_out_and_what_is_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    mkfifo(&fifo);
    let file = tmp.path().join("file");
    std::fs::write(&file, b"mine").unwrap();
    let dangling = tmp.path().join("dangling");
    std::os::unix::fs::symlink(tmp.path().join("gone"), &dangling).unwrap();
    let before = listing(tmp.path());
    for (out, what) in [
        (Path::new("/dev/null"), "is a character device"),
        (fifo.as_path(), "is a FIFO"),
        (file.as_path(), "is a regular file"),
        (dangling.as_path(), "is a dangling symlink"),
    ] {
        let needles = ["(--out)", what, "an output directory is a directory, or a path where one can be made"];
        refused(&run(&[&SWEEP[..], &["--out", s(out)]].concat()), &needles);
        refused(&run(&[&SWEEP[..], &["--out", s(out), "--force"]].concat()), &needles);
    }
    assert_eq!(listing(tmp.path()), before);
}

#[test]
fn an_interrupted_sweep_rerun_without_resume_is_pointed_to_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("o");
    swept(&o);
    let manifest = o.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(text.contains("\"status\": \"complete\""), "{text}");
    std::fs::write(&manifest, text.replace("\"status\": \"complete\"", "\"status\": \"running\"")).unwrap();
    let e = refused(&run(&[&SWEEP[..], &["--out", s(&o)]].concat()), &["holds an interrupted sweep", "pass --resume to finish it"]);
    assert!(e.contains("--force to discard it"), "{e}");
    // A finished one is only not empty.
    std::fs::write(&manifest, text).unwrap();
    let e = refused(&run(&[&SWEEP[..], &["--out", s(&o)]].concat()), &["is not empty; pass --force"]);
    assert!(!e.contains("--resume"), "{e}");
}

// ---- small messages ----

#[test]
fn ranges_are_the_same_whatever_the_bad_value() {
    let minus = refused(&run(&["sweep", "--trials", "-1"]), &["--trials", "an integer from 1 to 10000000"]);
    refused(&run(&["sweep", "--trials", "0"]), &["--trials", "an integer from 1 to 10000000"]);
    assert!(!minus.contains("18446744073709551615"), "{minus}");
    refused(&run(&["sweep", "--contexts", "1G"]), &["--contexts", "\"1G\"", "up to 16777216 (16M) tokens"]);
    // A bad value is quoted shortened.
    let long = "x".repeat(5000);
    let e = refused(&run(&["sweep", "--contexts", &long]), &["--contexts", "…"]);
    assert!(e.len() < 400, "{e}");
}

#[test]
fn the_hypothesis_catalogue_has_a_header() {
    let out = run(&["hypotheses"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[..3], ["group", "class", "name"], "{text}");
    assert!(text.lines().nth(1).unwrap().contains("no-hadamard"), "{text}");
}

#[test]
fn progress_says_what_it_counts_and_a_long_sweep_is_announced() {
    let tmp = tempfile::tempdir().unwrap();
    // Plain lines at once (DSA_RECALL_PROGRESS_EVERY=0): the legend first.
    let out = Command::new(cargo_bin("dsa-recall"))
        .args([&SWEEP[..], &["--out", s(&tmp.path().join("o"))]].concat())
        .env("DSA_RECALL_PROGRESS_EVERY", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let first = err.lines().next().unwrap();
    assert!(first.starts_with("progress counts trials: each draws one haystack at one needle depth"), "{err}");
    assert_eq!(err.matches("progress counts trials").count(), 1, "{err}");
    assert!(err.contains(" cells written)"), "{err}");
    // A sweep of days says so before it starts, and what shortens it.
    let mut child = Command::new(cargo_bin("dsa-recall"))
        .args(["sweep", "--contexts", "16M", "--trials", "1000000", "--threads", "1", "--out", s(&tmp.path().join("big"))])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stderr.take().unwrap()), &mut line).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(line.starts_with("warning: this sweep scores about") && line.contains(" h ") && line.contains("--shard"), "{line}");
}

#[test]
fn no_error_line_floods_a_log() {
    // A 1 MB field of an observations file: the line is cut, whatever
    // quoted it.
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("obs.csv");
    std::fs::write(&csv, format!("context_tokens,depth_percent,topk,config,found,total\n{},50,512,fp8,1,3\n", "9".repeat(1 << 20)))
        .unwrap();
    let out = run(&["diagnose", "--observations", s(&csv)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1);
    assert!(err.contains("obs.csv:2") && err.trim_end().ends_with('…') && err.chars().count() < 2100, "{} chars", err.len());
}

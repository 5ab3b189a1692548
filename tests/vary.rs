//! A model knob as a sweep axis (issue 17): `sweep --needle-strength LIST`
//! and `sweep --vary FIELD=LIST` through the binary.

use std::path::Path;
use std::process::Output;

use tempfile::TempDir;

use crate::common::bin;

const TINY: &[&str] =
    &["--needle-profile", "stress", "--trials", "20", "--contexts", "1K,4K", "--depths", "50", "--topk", "64", "--precisions", "fp32,bf16"];

fn sweep(out: &Path, extra: &[&str]) -> Output {
    bin().arg("sweep").args(TINY).args(extra).arg("--out").arg(out).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn one_line_error(o: &Output, words: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    for w in words {
        assert!(err.contains(w), "{err} lacks {w}");
    }
}

#[test]
fn a_strength_list_runs_one_paired_sweep_per_value() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("v");
    let o = sweep(&out, &["--needle-strength", "2,0.5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("needle.strength (--needle-strength) over 0.5,2"), "{text}");
    assert!(out.join("recall_vs_needle_strength.png").is_file());
    assert!(read(&out.join("report.html")).contains("needle.strength=2/report.html"));

    // Each value's directory is the plain sweep at that value, byte for byte.
    let plain = tmp.path().join("plain");
    let o = sweep(&plain, &["--needle-strength", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let value_dir = out.join("needle.strength=2");
    assert_eq!(read(&value_dir.join("results.jsonl")), read(&plain.join("results.jsonl")));
    assert_eq!(read(&value_dir.join("summary.csv")), read(&plain.join("summary.csv")));

    // The top results carry the knob first, in value order, and are the
    // values' own lines otherwise.
    let top = read(&out.join("results.jsonl"));
    let lines: Vec<&str> = top.lines().collect();
    let per_value = read(&plain.join("results.jsonl")).lines().count();
    assert_eq!(lines.len(), 2 * per_value);
    for (i, line) in lines.iter().enumerate() {
        let (prefix, value_dir) = if i < per_value { ("0.5", "needle.strength=0.5") } else { ("2.0", "needle.strength=2") };
        assert!(line.starts_with(&format!("{{\"needle.strength\":{prefix},")), "{line}");
        let own = read(&out.join(value_dir).join("results.jsonl"));
        let own_line = own.lines().nth(i % per_value).unwrap();
        assert_eq!(&line[line.find(',').unwrap() + 1..], &own_line[1..]);
    }
    let csv = read(&out.join("summary.csv"));
    assert!(csv.starts_with("needle.strength,context_tokens,"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 2 * per_value);
}

#[test]
fn any_numeric_knob_varies_and_plot_redraws_it_byte_identically() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("v");
    let o = sweep(&out, &["--vary", "needle.tokens=4,8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let manifest: serde_json::Value = serde_json::from_str(&read(&out.join("manifest.json"))).unwrap();
    assert_eq!(manifest["status"], "complete");
    assert_eq!(manifest["vary"]["field"], "needle.tokens");
    let inner: serde_json::Value = serde_json::from_str(&read(&out.join("needle.tokens=8/manifest.json"))).unwrap();
    assert_eq!(inner["scenario"]["needle_tokens"], 8);

    let copy = tmp.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for entry in walk(&out) {
        let rel = entry.strip_prefix(&out).unwrap();
        let to = copy.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &to).unwrap();
    }
    let o = bin().arg("plot").arg(&copy).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for entry in walk(&out) {
        let rel = entry.strip_prefix(&out).unwrap();
        assert_eq!(std::fs::read(&entry).unwrap(), std::fs::read(copy.join(rel)).unwrap(), "{} differs after plot", rel.display());
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn resume_finishes_the_values_left_and_refuses_another_axis() {
    let tmp = TempDir::new().unwrap();
    let whole = tmp.path().join("whole");
    assert!(sweep(&whole, &["--needle-strength", "1,2,4"]).status.success());
    // Interrupted after the first value: the later ones never started.
    let cut = tmp.path().join("cut");
    assert!(sweep(&cut, &["--needle-strength", "1,2,4"]).status.success());
    std::fs::remove_dir_all(cut.join("needle.strength=4")).unwrap();
    std::fs::remove_file(cut.join("needle.strength=2/results.jsonl")).unwrap();
    std::fs::remove_file(cut.join("results.jsonl")).unwrap();
    let o = sweep(&cut, &["--needle-strength", "1,2,4", "--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["results.jsonl", "summary.csv", "needle.strength=4/results.jsonl", "needle.strength=2/summary.csv"] {
        assert_eq!(read(&cut.join(f)), read(&whole.join(f)), "{f}");
    }
    let o = sweep(&cut, &["--needle-strength", "1,2", "--resume"]);
    one_line_error(&o, &["different --vary", "needle.strength=1,2,4"]);
    let plain = tmp.path().join("plain");
    assert!(sweep(&plain, &[]).status.success());
    let o = sweep(&plain, &["--needle-strength", "1,2", "--resume"]);
    one_line_error(&o, &["holds no knob sweep"]);
}

#[test]
fn bad_axes_are_one_line_errors_and_write_nothing() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("never");
    let cases: [(&[&str], &[&str]); 7] = [
        (&["--vary", "needle.strength"], &["--vary", "FIELD=V1,V2"]),
        (&["--vary", "needle.colour=1,2"], &["--vary", "numeric knob of [needle]"]),
        (&["--vary", "needle.geometry=1,2"], &["--vary", "numeric knob"]),
        (&["--vary", "sweep.trials=1,2"], &["--vary", "grid's own axes"]),
        (&["--needle-strength", "-1,2"], &["needle.strength (--needle-strength) = -1"]),
        (&["--needle-strength", "1,2", "--vary", "needle.tokens=4,8"], &["one knob axis per sweep"]),
        (&["--needle-strength", "1,2", "--shard", "1/2"], &["--shard", "one value at a time"]),
    ];
    for (extra, words) in cases {
        let o = sweep(&out, extra);
        one_line_error(&o, words);
        assert!(!out.exists(), "{extra:?} wrote {}", out.display());
    }
    let o = sweep(&out, &["--vary", "needle.strength=1,2", "--needle-strength", "3"]);
    one_line_error(&o, &["needle.strength (--needle-strength) = 3", "not both"]);
    for cmd in [&["run", "--context", "4K", "--depth", "50", "--topk", "64", "--precision", "fp32"][..], &["trial", "--context", "4K"][..]]
    {
        let mut c = bin();
        c.args(cmd).args(["--needle-strength", "1,2"]);
        if cmd[0] == "trial" {
            c.arg("--dump").arg(tmp.path().join("t.safetensors"));
        }
        one_line_error(&c.output().unwrap(), &["needle.strength (--needle-strength) = \"1,2\"", "`sweep` takes a list"]);
    }
}

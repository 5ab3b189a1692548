//! The command-line contract of the `dsa-recall` binary: subcommands, output
//! files, exit codes and one-line errors. Every simulation here is tiny
//! (a few cells of 20–30 trials) so the whole file runs in seconds.

use predicates::prelude::*;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use tempfile::TempDir;

use crate::common::bin;

/// A tiny sweep grid: 2 contexts × 2 depths × 1 k × 1 precision = 4 cells.
const TINY: &[&str] = &["--trials", "20", "--contexts", "1K,4K", "--depths", "0,50", "--topk", "64", "--precisions", "fp32"];
const TINY_CELLS: usize = 2 * 2;

/// Keys every line of results.jsonl must carry.
const RESULT_KEYS: &[&str] = &[
    "context_tokens",
    "depth_percent",
    "topk",
    "precision",
    "trials",
    "survived",
    "recall",
    "ci_low",
    "ci_high",
    "predicted_recall",
    "mean_rank",
    "needle_rows",
    "model_recall",
    "model_ci_low",
    "model_ci_high",
    "layers_reached",
];

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `dsa-recall sweep <TINY> <extra…> --out <out>`.
fn sweep(out: &Path, extra: &[&str]) -> Output {
    bin().arg("sweep").args(TINY).args(extra).arg("--out").arg(out).output().expect("spawn dsa-recall")
}

/// A failure with exit code 2, no panic, and exactly one line on stderr that
/// starts with `error: ` and contains every string of `must_contain`.
fn assert_one_line_error(output: &Output, must_contain: &[&str]) {
    assert_one_line_error_code(output, Some(2), must_contain);
}

/// As [`assert_one_line_error`]; `code` None accepts any non-zero exit code.
fn assert_one_line_error_code(output: &Output, code: Option<i32>, must_contain: &[&str]) {
    let err = stderr(output);
    assert!(!output.status.success(), "expected a failure, got success; stderr: {err:?}");
    match code {
        Some(c) => assert_eq!(output.status.code(), Some(c), "exit code; stderr: {err:?}"),
        None => assert!(output.status.code().is_some_and(|c| c != 0), "exit code {:?}; stderr: {err:?}", output.status.code()),
    }
    assert!(!err.contains("panicked"), "the binary panicked: {err:?}");
    assert!(!err.contains("RUST_BACKTRACE"), "the binary panicked: {err:?}");
    assert!(err.ends_with('\n'), "stderr should end with a newline: {err:?}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "stderr should be exactly one line: {err:?}");
    assert!(lines[0].starts_with("error: "), "stderr should start with `error: `: {err:?}");
    for s in must_contain {
        assert!(err.contains(s), "stderr should contain {s:?}: {err:?}");
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn results(dir: &Path) -> Vec<Value> {
    read(&dir.join("results.jsonl"))
        .lines()
        .enumerate()
        .map(|(i, line)| serde_json::from_str(line).unwrap_or_else(|e| panic!("results.jsonl line {}: {e}: {line}", i + 1)))
        .collect()
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_str(&read(&dir.join("manifest.json"))).expect("manifest.json parses")
}

fn write_file(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    fs::write(&p, text).unwrap();
    p
}

/// Snapshot of a directory: file name → bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), fs::read(e.path()).unwrap())
        })
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------- presets --

#[test]
fn presets_lists_every_preset() {
    let o = bin().arg("presets").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for name in ["deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v3.2", "deepseek-v4.1-flash", "glm-5.2", "glm-5.3-flash"] {
        assert!(out.lines().any(|l| l.split_whitespace().next() == Some(name)), "missing preset {name}:\n{out}");
    }
}

#[test]
fn presets_show_prints_parseable_toml() {
    let o = bin().args(["presets", "show", "deepseek-v3.2"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let v: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("not TOML: {e}\n{out}"));
    assert!(out.contains("index_topk = 2048"), "{out}");
    assert_eq!(v.get("indexer").and_then(|i| i.get("index_topk")).and_then(toml::Value::as_integer), Some(2048));
}

#[test]
fn presets_show_every_preset_is_toml() {
    for (name, rope, pooling) in [
        ("deepseek-v4-flash", "v4", "on"),
        ("deepseek-v4-pro", "v4", "on"),
        ("deepseek-v3.2", "v3.2", "off"),
        ("deepseek-v4.1-flash", "v4", "on"),
        ("glm-5.2", "v4", "off"),
        ("glm-5.3-flash", "off", "on"),
    ] {
        let o = bin().args(["presets", "show", name]).output().unwrap();
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let v = toml::from_str::<toml::Value>(&stdout(&o)).unwrap_or_else(|e| panic!("{name}: not TOML: {e}"));
        let physics = v.get("physics").unwrap_or_else(|| panic!("{name}: no [physics]"));
        assert_eq!(physics.get("rope").and_then(toml::Value::as_str), Some(rope), "{name}");
        assert_eq!(physics.get("pooling").and_then(toml::Value::as_str), Some(pooling), "{name}");
        // The key norm knobs are shown with their values.
        let key_norm = if name == "deepseek-v3.2" || name == "glm-5.2" { "layernorm" } else { "off" };
        assert_eq!(physics.get("key_norm").and_then(toml::Value::as_str), Some(key_norm), "{name}");
        assert!(physics.get("norm_weight_spread").and_then(toml::Value::as_float).is_some(), "{name}");
        assert!(physics.get("norm_bias").and_then(toml::Value::as_float).is_some(), "{name}");
    }
}

#[test]
fn presets_show_round_trips_through_config() {
    // `presets show NAME` as a scenario file gives the preset's results, physics included.
    let tmp = TempDir::new().unwrap();
    let shown = bin().args(["presets", "show", "deepseek-v4-flash"]).output().unwrap();
    assert!(shown.status.success(), "{}", stderr(&shown));
    let config = write_file(&tmp, "flash.toml", &stdout(&shown));
    let (a, b) = (tmp.path().join("preset"), tmp.path().join("config"));
    let o = sweep(&a, &["--preset", "deepseek-v4-flash"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = sweep(&b, &["--config", config.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(read(&a.join("results.jsonl")), read(&b.join("results.jsonl")));
    assert_eq!(manifest(&a)["scenario"]["physics"], manifest(&b)["scenario"]["physics"]);
    assert_eq!(manifest(&a)["scenario"]["physics"]["rope"], "v4");
}

#[test]
fn presets_show_unknown_fails() {
    let o = bin().args(["presets", "show", "nope"]).output().unwrap();
    assert_one_line_error(&o, &["preset", "nope"]);
}

// ------------------------------------------------------------- hypotheses --

#[test]
fn hypotheses_lists_every_group_one_per_line() {
    let o = bin().arg("hypotheses").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    // A header line names the columns, then one line per hypothesis.
    assert!(lines[0].starts_with("group") && lines[0].contains("name"), "{out}");
    assert_eq!(lines.len(), 1 + dsa_recall::score::hypothesis::CATALOGUE.len());
    for (name, group, class) in [
        ("no-hadamard", "numerics", "partial"),
        ("hadamard-q-only", "numerics", "random-loss"),
        ("slot-shift", "cache-layout", "layout"),
        ("topk=N", "selection", "partial"),
        ("layers=SET", "selection", "layer-subset"),
        ("rope-swap-q", "position", "partial"),
        ("visible-cap=P", "address-space", "address-space"),
        ("slot-stride-half", "address-space", "layout"),
        ("chunk-stale", "address-space", "schedule"),
        ("loss", "after-selection", "not-selection"),
        ("loss-by-length", "after-selection", "not-selection"),
    ] {
        let line = lines.iter().find(|l| l.split_whitespace().nth(2) == Some(name)).unwrap_or_else(|| panic!("{name} missing:\n{out}"));
        assert!(line.starts_with(group), "{line}");
        assert_eq!(line.split_whitespace().nth(1), Some(class), "{line}");
    }
}

#[test]
fn hypotheses_show_and_long_print_the_full_text() {
    let o = bin().args(["hypotheses", "show", "e4m3fnuz-read"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for part in ["e4m3fnuz-read (cache-layout)", "changes:", "stands for:", "expected:", "0x80"] {
        assert!(out.contains(part), "{part} missing:\n{out}");
    }
    let long = stdout(&bin().args(["hypotheses", "--long"]).output().unwrap());
    assert_eq!(long.matches("stands for:").count(), dsa_recall::score::hypothesis::CATALOGUE.len());
    assert!(long.contains("requires: --rope on"));
    let o = bin().args(["hypotheses", "show", "nope"]).output().unwrap();
    assert_one_line_error(&o, &["\"nope\"", "no-hadamard", "window=N"]);
}

#[test]
fn unknown_hypothesis_in_precisions_is_a_one_line_error() {
    let o = bin()
        .args(["run", "--trials", "2", "--context", "1K", "--depth", "50", "--topk", "64", "--precision", "fp8+stale-scales"])
        .output()
        .unwrap();
    assert_one_line_error(&o, &["--precision)", "\"fp8+stale-scales\"", "unknown hypothesis", "stale-scale,"]);
}

// ------------------------------------------------------------------ sweep --

#[test]
fn sweep_writes_all_outputs() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("out");
    let o = sweep(&out, &[]);
    assert!(o.status.success(), "sweep failed: {}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
    assert!(stdout(&o).contains("effective context"), "{}", stdout(&o));

    for f in ["results.jsonl", "summary.csv", "effective_context.csv", "manifest.json", "recall_vs_context.png"] {
        assert!(out.join(f).is_file(), "missing {f}");
    }
    let png = fs::read(out.join("recall_vs_context.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "recall_vs_context.png is not a PNG");

    let rows = results(&out);
    assert_eq!(rows.len(), TINY_CELLS, "one results.jsonl line per cell");
    for (i, row) in rows.iter().enumerate() {
        let obj = row.as_object().unwrap_or_else(|| panic!("line {} is not an object", i + 1));
        for k in RESULT_KEYS {
            assert!(obj.contains_key(*k), "line {} lacks {k}: {row}", i + 1);
        }
        assert_eq!(row["trials"], 20);
        assert_eq!(row["topk"], 64);
        assert_eq!(row["precision"], "fp32");
        let recall = row["recall"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&recall));
        assert!(row["ci_low"].as_f64().unwrap() <= recall && recall <= row["ci_high"].as_f64().unwrap());
    }
    let mut cells: Vec<(u64, String)> =
        rows.iter().map(|r| (r["context_tokens"].as_u64().unwrap(), r["depth_percent"].to_string())).collect();
    cells.sort();
    cells.dedup();
    assert_eq!(cells.len(), TINY_CELLS, "cells are distinct");

    let csv = read(&out.join("summary.csv"));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + TINY_CELLS, "header plus one row per cell:\n{csv}");
    let header: Vec<&str> = lines[0].split(',').collect();
    for k in RESULT_KEYS {
        assert!(header.contains(k), "summary.csv header lacks {k}");
    }
    for l in &lines[1..] {
        assert_eq!(l.split(',').count(), header.len(), "row width: {l}");
    }

    let m = manifest(&out);
    assert!(m.get("version").and_then(Value::as_str).is_some(), "manifest lacks version");
    assert_eq!(m["scenario"]["seed"], 42, "manifest scenario.seed");
}

#[test]
fn sweep_refuses_non_empty_output_without_force() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("out");
    let o = sweep(&out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let before = snapshot(&out);

    // A different seed would change the results if anything were rewritten.
    let o = sweep(&out, &["--seed", "7"]);
    assert_one_line_error(&o, &["--force"]);
    assert_eq!(snapshot(&out), before, "a refused sweep must leave the files untouched");

    let o = sweep(&out, &["--seed", "7", "--force"]);
    assert!(o.status.success(), "with --force: {}", stderr(&o));
    assert_eq!(manifest(&out)["scenario"]["seed"], 7);
    assert_eq!(results(&out).len(), TINY_CELLS);
}

#[test]
fn sweep_into_existing_empty_dir_is_fine() {
    let tmp = TempDir::new().unwrap();
    let o = sweep(tmp.path(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(tmp.path().join("results.jsonl").is_file());
}

#[test]
fn sweep_results_do_not_depend_on_threads() {
    let tmp = TempDir::new().unwrap();
    let a = tmp.path().join("t1");
    let b = tmp.path().join("t2");
    let oa = sweep(&a, &["--threads", "1"]);
    assert!(oa.status.success(), "{}", stderr(&oa));
    let ob = sweep(&b, &["--threads", "2"]);
    assert!(ob.status.success(), "{}", stderr(&ob));
    for f in ["results.jsonl", "summary.csv"] {
        assert_eq!(fs::read(a.join(f)).unwrap(), fs::read(b.join(f)).unwrap(), "{f} differs between --threads 1 and 2");
    }
}

// -------------------------------------------------------------------- run --

const RUN: &[&str] = &["run", "--context", "4K", "--depth", "50", "--topk", "64", "--precision", "fp32", "--trials", "30"];

#[test]
fn run_prints_trials_and_summary() {
    let o = bin().args(RUN).arg("--print-trials").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let trial_lines: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok()))
        .filter(|l| !l.contains("recall"))
        .collect();
    assert_eq!(trial_lines.len(), 30, "one line per trial:\n{out}");
    let indices: Vec<u64> = trial_lines.iter().map(|l| l.split_whitespace().next().unwrap().parse().unwrap()).collect();
    assert_eq!(indices, (0..30).collect::<Vec<_>>(), "trial lines numbered 0..30");
    assert!(out.lines().any(|l| l.contains("recall")), "no summary line with recall:\n{out}");
}

#[test]
fn run_without_print_trials_prints_only_summary() {
    let o = bin().args(RUN).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("recall"), "{out}");
    assert!(out.lines().count() < 30, "no trial lines without --print-trials:\n{out}");
}

#[test]
fn run_prints_the_tie_audit_only_when_asked() {
    let line = "ties at the cut (--tie-audit)";
    let args = ["run", "--context", "8K", "--depth", "50", "--topk", "512", "--precision", "fp8+logits-bf16", "--trials", "20"];
    let plain = bin().args(args).output().unwrap();
    assert!(plain.status.success() && !stdout(&plain).contains(line), "{}", stdout(&plain));
    let audited = bin().args(args).args(["--tie-audit", "on"]).output().unwrap();
    let out = stdout(&audited);
    assert!(audited.status.success(), "{}", stderr(&audited));
    // The audit adds its line and changes nothing else.
    assert_eq!(out.lines().filter(|l| !l.starts_with(line)).collect::<Vec<_>>(), stdout(&plain).lines().collect::<Vec<_>>());
    let audit = out.lines().find(|l| l.starts_with(line)).unwrap_or_else(|| panic!("{out}"));
    assert!(audit.contains("kept by rule: lowest_index") && audit.ends_with("of 20"), "{audit}");
}

#[test]
fn run_json_prints_one_object() {
    let o = bin().args(RUN).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.trim_end().lines().count(), 1, "one JSON line:\n{out}");
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON: {e}\n{out}"));
    let recall = v.get("recall").and_then(Value::as_f64).expect("recall");
    assert!((0.0..=1.0).contains(&recall));
    assert_eq!(v["trials"], 30);
    assert_eq!(v["context_tokens"], 4096);
}

#[test]
fn run_json_is_deterministic() {
    let a = bin().args(RUN).arg("--json").output().unwrap();
    let b = bin().args(RUN).args(["--json", "--threads", "1"]).output().unwrap();
    assert!(a.status.success() && b.status.success());
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn run_rejects_a_list_of_contexts() {
    let o = bin()
        .args(["run", "--context", "1K..4K", "--depth", "50", "--topk", "64", "--precision", "fp32", "--trials", "5"])
        .output()
        .unwrap();
    assert_one_line_error(&o, &["--context"]);
    let o = bin()
        .args(["run", "--context", "1K,4K", "--depth", "50", "--topk", "64", "--precision", "fp32", "--trials", "5"])
        .output()
        .unwrap();
    assert_one_line_error(&o, &["--context"]);
}

#[test]
fn run_rejects_lists_of_depths_topk_precisions() {
    let base = ["run", "--context", "1K", "--trials", "5"];
    for (extra, field) in [
        (["--depth", "0,50", "--topk", "64", "--precision", "fp32"], "--depth"),
        (["--depth", "50", "--topk", "32,64", "--precision", "fp32"], "--topk"),
        (["--depth", "50", "--topk", "64", "--precision", "fp32,bf16"], "--precision"),
    ] {
        let o = bin().args(base).args(extra).output().unwrap();
        assert_one_line_error(&o, &[field]);
    }
}

// -------------------------------------------------------------- bad input --

/// Runs a tiny sweep with `bad` appended (later flags replace TINY's) into a
/// not-yet-existing directory; asserts a one-line error naming `must_contain`
/// and that the directory was not created.
fn assert_bad_sweep(bad: &[&str], must_contain: &[&str]) {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("never");
    // Drop TINY's flags that `bad` sets again (clap refuses a repeated flag).
    let mut args: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < TINY.len() {
        if !bad.iter().any(|b| b.split('=').next() == Some(TINY[i])) {
            args.push(TINY[i]);
            args.push(TINY[i + 1]);
        }
        i += 2;
    }
    let o = bin().arg("sweep").args(&args).args(bad).arg("--out").arg(&out).output().unwrap();
    let ctx = format!("sweep {}", bad.join(" "));
    let err = stderr(&o);
    assert!(!out.exists(), "{ctx}: output directory created on bad input (stderr {err:?})");
    assert!(!err.contains("panicked"), "{ctx}: panicked: {err}");
    eprintln!("case: {ctx}");
    assert_one_line_error(&o, must_contain);
}

#[test]
fn bad_topk() {
    assert_bad_sweep(&["--topk", "0"], &["--topk"]);
}

#[test]
fn bad_compress_ratio() {
    assert_bad_sweep(&["--compress-ratio", "0"], &["--compress-ratio"]);
}

#[test]
fn bad_depth_over_100() {
    assert_bad_sweep(&["--depths", "101"], &["--depths"]);
}

#[test]
fn bad_depth_negative() {
    assert_bad_sweep(&["--depths", "-5"], &["--depths"]);
}

#[test]
fn bad_depth_negative_with_equals() {
    assert_bad_sweep(&["--depths=-5"], &["--depths"]);
}

/// A negative value for a numeric flag must be reported against that flag,
/// not as an "unexpected argument '-1'".
#[test]
fn bad_negative_numbers_name_their_flag() {
    let mut failures = Vec::new();
    for (flag, value) in [("--topk", "-1"), ("--contexts", "-1K"), ("--trials", "-1"), ("--threshold", "-0.5"), ("--window", "-1")] {
        let result = std::panic::catch_unwind(|| assert_bad_sweep(&[flag, value], &[flag]));
        if result.is_err() {
            failures.push(format!("{flag} {value}"));
        }
    }
    assert!(failures.is_empty(), "errors that do not name their flag: {failures:?}");
}

/// `--prefill-chunk` takes a whole number of tokens; a chunk fault without
/// one has no boundary to act at (issue 28, item 3).
#[test]
fn bad_prefill_chunks_say_what_is_allowed() {
    for value in ["-1", "0.5", "x"] {
        // The range the check states too (below).
        assert_bad_sweep(&["--prefill-chunk", value], &["--prefill-chunk", &format!("'{value}'"), "an integer from 0 to 16777216"]);
    }
    assert_bad_sweep(&["--prefill-chunk", "99999999"], &["--prefill-chunk", "99999999", "an integer from 0 to 16777216"]);
    assert_bad_sweep(
        &["--precisions", "fp8+chunk-local"],
        &["--precisions", "fp8+chunk-local", "needs a prefill chunk", "--prefill-chunk"],
    );
    assert_bad_sweep(&["--precisions", "fp8+chunk-local", "--prefill-chunk", "0"], &["needs a prefill chunk"]);
    assert_bad_sweep(
        &["--precisions", "bf16+chunk-local", "--prefill-chunk", "2048", "--mode", "tail", "--needle-profile", "stress"],
        &["--mode", "tail", "bf16+chunk-local"],
    );
    assert_bad_sweep(&["--precisions", "bf16+chunk-local+layers=1..", "--prefill-chunk", "2048"], &["--precisions", "acts in every layer"]);
}

#[test]
fn bad_preset() {
    assert_bad_sweep(&["--preset", "nope"], &["preset", "nope"]);
}

#[test]
fn bad_precision() {
    assert_bad_sweep(&["--precisions", "fp7"], &["--precisions", "fp7"]);
}

#[test]
fn bad_trials_zero() {
    assert_bad_sweep(&["--trials", "0"], &["--trials"]);
}

#[test]
fn bad_contexts_range() {
    assert_bad_sweep(&["--contexts", "1K..x"], &["--contexts"]);
}

#[test]
fn bad_contexts_word() {
    assert_bad_sweep(&["--contexts", "abc"], &["--contexts"]);
}

#[test]
fn bad_needle_strength_negative() {
    assert_bad_sweep(&["--needle-strength", "-1"], &["--needle-strength"]);
}

#[test]
fn bad_needle_strength_nan() {
    assert_bad_sweep(&["--needle-strength", "nan"], &["--needle-strength"]);
}

#[test]
fn bad_needle_strength_inf() {
    assert_bad_sweep(&["--needle-strength", "inf"], &["--needle-strength"]);
}

#[test]
fn bad_needle_strength_word() {
    assert_bad_sweep(&["--needle-strength", "abc"], &["--needle-strength"]);
}

#[test]
fn bad_tie_rule() {
    assert_bad_sweep(&["--tie-rule", "first"], &["--tie-rule"]);
}

#[test]
fn bad_threshold() {
    assert_bad_sweep(&["--threshold", "2"], &["--threshold"]);
}

#[test]
fn bad_threads() {
    assert_bad_sweep(&["--threads", "0"], &["--threads"]);
}

#[test]
fn bad_trials_not_a_number() {
    assert_bad_sweep(&["--trials", "abc"], &["--trials"]);
}

#[test]
fn bad_unknown_flag() {
    assert_bad_sweep(&["--bogus"], &["--bogus"]);
}

#[test]
fn bad_no_subcommand_or_unknown_subcommand() {
    let o = bin().arg("frobnicate").output().unwrap();
    assert_one_line_error(&o, &["frobnicate"]);
}

#[test]
fn bad_config_malformed_toml() {
    let tmp = TempDir::new().unwrap();
    let f = write_file(&tmp, "bad.toml", "[needle\nstrength = 1\n");
    let fname = f.display().to_string();
    assert_bad_sweep(&["--config", &fname], &["bad.toml", "line 1"]);
}

#[test]
fn bad_config_misspelled_key() {
    let tmp = TempDir::new().unwrap();
    let f = write_file(&tmp, "typo.toml", "[needle]\nstrenght = 2.0\n");
    let fname = f.display().to_string();
    assert_bad_sweep(&["--config", &fname], &["typo.toml", "strenght", "line 2", "column"]);
}

#[test]
fn bad_config_misspelled_section() {
    let tmp = TempDir::new().unwrap();
    let f = write_file(&tmp, "section.toml", "[neddle]\nstrength = 2.0\n");
    let fname = f.display().to_string();
    assert_bad_sweep(&["--config", &fname], &["section.toml", "neddle", "line 1"]);
}

#[test]
fn bad_config_value_names_field() {
    let tmp = TempDir::new().unwrap();
    let f = write_file(&tmp, "value.toml", "[sweep]\ntrials = 0\n");
    let fname = f.display().to_string();
    let tmp2 = TempDir::new().unwrap();
    let out = tmp2.path().join("never");
    let o = bin()
        .args(["sweep", "--contexts", "1K", "--depths", "50", "--topk", "64", "--precisions", "fp32", "--config", &fname, "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_one_line_error(&o, &["sweep.trials"]);
    assert!(!out.exists());
}

#[test]
fn bad_config_missing_file() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("never");
    let o = bin().arg("sweep").args(TINY).args(["--config", "/nonexistent/file.toml", "--out"]).arg(&out).output().unwrap();
    assert_one_line_error_code(&o, None, &["/nonexistent/file.toml"]);
    assert!(!out.exists(), "output directory created on bad input");
}

#[test]
fn bad_run_input_is_one_line() {
    for bad in [["--depth", "101"], ["--precision", "fp7"], ["--context", "abc"], ["--topk", "0"]] {
        let mut args: Vec<&str> = vec!["run", "--trials", "5"];
        for (flag, val) in [("--context", "1K"), ("--depth", "50"), ("--topk", "64"), ("--precision", "fp32")] {
            if flag != bad[0] {
                args.extend([flag, val]);
            }
        }
        args.extend(bad);
        let o = bin().args(&args).output().unwrap();
        assert_one_line_error(&o, &[bad[0]]);
    }
}

#[test]
fn help_and_version_succeed() {
    bin().arg("--help").assert().success().stdout(predicate::str::contains("sweep"));
    bin().args(["sweep", "--help"]).assert().success().stdout(predicate::str::contains("--contexts"));
    bin().args(["run", "--help"]).assert().success().stdout(predicate::str::contains("--print-trials"));
    bin().arg("--version").assert().success().stdout(predicate::str::contains(env!("CARGO_PKG_VERSION")));
}

// ------------------------------------------------------------ valid config --

#[test]
fn config_file_is_honoured() {
    let tmp = TempDir::new().unwrap();
    let f = write_file(&tmp, "ok.toml", "[sweep]\ntrials = 15\n\n[needle]\nunit = \"strength\"\nstrength = 0.0\n");
    let out = tmp.path().join("out");
    let o = bin()
        .args(["sweep", "--contexts", "1K,4K", "--depths", "50", "--topk", "64", "--precisions", "fp32", "--config"])
        .arg(&f)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = results(&out);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["trials"], 15, "{r}");
    }
    let m = manifest(&out);
    assert_eq!(m["scenario"]["model"]["needle_strength"].as_f64(), Some(0.0));
    assert_eq!(m["scenario"]["trials"], 15);
}

#[test]
fn command_line_overrides_config_file() {
    let tmp = TempDir::new().unwrap();
    let f = write_file(&tmp, "ok.toml", "[sweep]\ntrials = 15\n");
    let out = tmp.path().join("out");
    let o = bin()
        .args(["sweep", "--contexts", "1K", "--depths", "50", "--topk", "64", "--precisions", "fp32", "--trials", "12", "--config"])
        .arg(&f)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(results(&out).iter().all(|r| r["trials"] == 12));
}

#[test]
fn bad_physics_values_name_their_flag() {
    assert_bad_sweep(&["--rope", "v5"], &["--rope", "v5", "v3.2"]);
    assert_bad_sweep(&["--pooling", "maybe"], &["--pooling", "full"]);
    assert_bad_sweep(&["--needle-offsets", "4"], &["--needle-offsets", "0 to 3"]);
    assert_bad_sweep(&["--length-mods", "x"], &["--length-mods"]);
    assert_bad_sweep(&["--distractor-similarity", "1.5"], &["--distractor-similarity"]);
    assert_bad_sweep(&["--correlation-length", "-1"], &["--correlation-length"]);
    assert_bad_sweep(&["--key-norm", "batchnorm"], &["--key-norm", "layernorm"]);
    assert_bad_sweep(&["--key-norm", "layernorm"], &["--key-norm", "pooled"]);
    assert_bad_sweep(&["--norm-weight-spread", "-1"], &["--norm-weight-spread"]);
    assert_bad_sweep(&["--norm-bias", "x"], &["--norm-bias"]);
}

#[test]
fn needle_offsets_and_length_mods_become_cells() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("r");
    let o = bin()
        .args(["sweep", "--trials", "10", "--contexts", "4K", "--depths", "50", "--topk", "64", "--precisions", "fp32"])
        .args(["--needle-offsets", "all", "--length-mods", "0,3", "--rope", "v4", "--pooling", "on", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let cells = results(&out);
    assert_eq!(cells.len(), 4 * 2);
    let mut seen: Vec<(u64, u64)> =
        cells.iter().map(|c| (c["context_tokens"].as_u64().unwrap(), c["needle_offset"].as_u64().unwrap())).collect();
    seen.sort_unstable();
    let want: Vec<(u64, u64)> = [4096u64, 4099].iter().flat_map(|&l| (0..4).map(move |o| (l, o))).collect();
    assert_eq!(seen, want);
    for c in &cells {
        assert_eq!(c["needle_start_token"].as_u64().unwrap() % 4, c["needle_offset"].as_u64().unwrap());
    }
}

// ------------------------------------------------------------- estimators --

#[test]
fn prediction_and_tail_mode_run_on_the_default_preset_with_its_physics() {
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("pred");
    let o = sweep(&out, &["--predict", "on"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cells = results(&out);
    assert!(!cells.is_empty());
    for c in &cells {
        let p = c["predicted_recall"].as_f64().unwrap_or_else(|| panic!("no prediction: {c}"));
        assert!((0.0..=1.0).contains(&p), "{c}");
    }
    let out = dir.path().join("tail");
    let o = sweep(&out, &["--mode", "tail", "--needle-profile", "stress"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(results(&out).len(), cells.len());
}

#[test]
fn tail_mode_paired_tables_show_no_discordant_pairs() {
    // Tail sampling has no per-trial outcomes, so no discordant pairs and no
    // McNemar test: the tables say "-", not "0/0" and p = 1.
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("tail");
    let o = bin()
        .args([
            "sweep",
            "--mode",
            "tail",
            "--needle-profile",
            "stress",
            "--trials",
            "20",
            "--contexts",
            "4K,16K",
            "--precisions",
            "bf16,fp4",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let cells = results(&out);
    assert!(cells.iter().any(|c| c["recall_diff"].as_f64().is_some_and(|d| d != 0.0) && c["discordant_gained"].is_null()));
    let text = String::from_utf8_lossy(&o.stdout);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(!text.contains("0/0") && !html.contains("<td>0/0</td>"), "{text}");
    assert!(text.lines().any(|l| l.contains("fp4") && l.trim_end().ends_with('-')), "{text}");
}

#[test]
fn tail_mode_runs_a_1m_cell_under_the_default_needle_with_its_margin() {
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("tail1m");
    let args = ["sweep", "--mode", "tail", "--contexts", "1M", "--depths", "50", "--topk", "512", "--precisions", "bf16", "--trials", "20"];
    let o = bin().args(args).arg("--out").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let cells = results(&out);
    assert_eq!(cells.len(), 1);
    let c = &cells[0];
    assert!(c["needle_margin"].as_f64().is_some_and(|m| m > 0.0), "{c}");
    assert!(c["model_recall"].as_f64().is_some() && c["median_rank"].as_f64().is_some(), "{c}");
}

#[test]
fn estimators_that_need_independent_rows_refuse_dependent_ones() {
    let dir = TempDir::new().unwrap();
    for (flag, value, physics) in [("--predict", "on", "--distractors"), ("--mode", "tail", "--correlation-length")] {
        let out = dir.path().join(flag.trim_start_matches('-'));
        let o = sweep(&out, &[flag, value, physics, "2", "--needle-profile", "stress"]);
        assert_one_line_error(&o, &["independent rows", "correlation_length = 0"]);
        assert!(!out.exists(), "no output directory after a refused configuration");
    }
}

#[test]
fn missing_required_arguments_are_named() {
    for (args, name) in [
        (&["replay"][..], "<FILE>"),
        (&["quantize"][..], "--format <F>"),
        (&["merge"][..], "--out <DIR>"),
        (&["trial"][..], "--dump <FILE>"),
        (&["presets", "show"][..], "<NAME>"),
        (&["hypotheses", "show"][..], "<NAME>"),
    ] {
        let o = bin().args(args).output().unwrap();
        assert_one_line_error(&o, &["required arguments were not provided", name]);
    }
}

#[test]
fn unusable_output_paths_are_usage_errors() {
    // /proc refuses new files even to root, so these fail wherever CI runs.
    let dir = TempDir::new().unwrap();
    let o = sweep(Path::new("/proc/dsa-recall-out"), &[]);
    assert_one_line_error(&o, &["/proc/dsa-recall-out"]);
    let dump = dir.path().join("t.safetensors");
    let o = bin()
        .args(["trial", "--context", "4K", "--depth", "50", "--topk", "64", "--precisions", "fp32", "--dump"])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let gif = dir.path().join("x.gif");
    for (chart, words) in
        [(Path::new("/proc/x.png"), &["writing chart /proc/x.png"][..]), (gif.as_path(), &["x.gif", "use .png or .svg"][..])]
    {
        let o = bin().arg("replay").arg(&dump).args(["--topk", "64", "--precisions", "bf16", "--chart"]).arg(chart).output().unwrap();
        assert_one_line_error(&o, words);
        assert!(!stderr(&o).contains("Os {"), "{}", stderr(&o));
    }
}

// `trial --dump` and `replay` score the rows as given: a variant whose
// fault lives in the cache, the RoPE layout, the selection or the needle
// was silently scored as its base (the same survival and overlap); it is
// refused, before anything is written.
#[test]
fn rows_as_given_refuse_faults_they_cannot_follow() {
    let dir = TempDir::new().unwrap();
    let dump = dir.path().join("t.safetensors");
    let cell = ["trial", "--context", "4K", "--depth", "50", "--topk", "64", "--precisions"];
    for v in ["fp8-fp32scale+slot-shift", "fp8-fp32scale+ties-lowest", "fp8-fp32scale+rope-swap-k", "fp8-fp32scale+needle=2"] {
        let o = bin().args(cell).arg(format!("fp8-fp32scale,{v}")).arg("--dump").arg(&dump).output().unwrap();
        assert_one_line_error(&o, &["--precisions", v, "without cache faults"]);
        assert!(!dump.exists(), "{v}: a refused dump wrote {}", dump.display());
    }
    let o = bin().args(cell).arg("fp8-fp32scale+hadamard-q-only,bf16+logits-bf16,fp8+no-relu").arg("--dump").arg(&dump).output().unwrap();
    assert!(o.status.success(), "formats and scoring are dumped: {}", stderr(&o));
    // replay takes the number formats alone (its parser refuses faults; the
    // library's replay refuses them too, for callers that build variants).
    let o = bin().arg("replay").arg(&dump).args(["--topk", "64", "--precisions", "fp8+block-row0"]).output().unwrap();
    assert_one_line_error(&o, &["--precisions", "fp8+block-row0"]);
}

#[test]
fn recall_tables_show_every_needle_offset() {
    // Issue 17, bug 3: with --needle-offsets all the tables showed offset 0 only.
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("offsets");
    let o = sweep(&out, &["--needle-offsets", "all"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let first_depth = text.split("per-layer selection recall at depth 50").next().unwrap();
    let cells = results(&out);
    assert_eq!(cells.len(), TINY_CELLS * 4);
    for c in cells.iter().filter(|c| c["depth_percent"].as_f64() == Some(0.0)) {
        let label = format!("{} @{}", if c["context_tokens"] == 1024 { "1K" } else { "4K" }, c["needle_offset"]);
        let value =
            format!("{:.3} [{:.3}, {:.3}]", c["recall"].as_f64().unwrap(), c["ci_low"].as_f64().unwrap(), c["ci_high"].as_f64().unwrap());
        let row = first_depth.lines().find(|l| l.trim_start().starts_with(&label)).unwrap_or_else(|| panic!("no row {label}: {text}"));
        assert!(row.contains(&value), "{label}: {row} lacks {value}");
        assert!(html.contains(&format!("<tr><td>{label}</td>")), "{label} not in report.html");
    }
    // Issue 30, item 13: the header counts in words, and the long resolved
    // scenario is collapsed.
    assert!(html.contains("2 contexts (1K … 4K) × 2 depths × k"), "report.html header");
    assert!(html.contains("<details><summary>The resolved scenario"), "configuration not collapsed");
}

#[test]
fn a_default_k_too_large_for_the_contexts_blames_the_contexts() {
    // Issue 17, bug 2: `--contexts 1K` alone failed on `sweep.topk (--topk)`,
    // a flag never typed. It now names the contexts and the k that fits.
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("o");
    let o = bin().args(["sweep", "--contexts", "1K", "--out"]).arg(&out).output().unwrap();
    assert_one_line_error(&o, &["sweep.contexts (--contexts) = \"1K\"", "512, 1024", "--topk) at most 256"]);
    assert!(!stderr(&o).contains("sweep.topk (--topk) = "), "{}", stderr(&o));
    let o = bin().args(["sweep", "--contexts", "1K", "--topk", "512", "--out"]).arg(&out).output().unwrap();
    assert_one_line_error(&o, &["sweep.topk (--topk) = 512", "a top-k from 1 to 256"]);
    assert!(!out.exists());
}

#[test]
fn run_and_trial_name_a_missing_cell_flag_not_the_presets_list() {
    // No --context: the preset's 8 contexts are not the user's; say the flag is missing.
    let o = bin().args(["run"]).output().unwrap();
    assert_one_line_error(&o, &["--context = (not given)", "simulates one cell", "has 8"]);
    // A context but no --topk: the default k list (512 and 1024) is not typed either.
    let o = bin().args(["run", "--context", "32K"]).output().unwrap();
    assert_one_line_error(&o, &["--topk = (not given)", "has 2"]);
    // A typed list is blamed as typed.
    let o = bin().args(["run", "--context", "32K,64K", "--topk", "512"]).output().unwrap();
    assert_one_line_error(&o, &["--context = 2 values"]);
    let tmp = tempfile::tempdir().unwrap();
    let o = bin().args(["trial", "--context", "32K", "--dump"]).arg(tmp.path().join("t.safetensors")).output().unwrap();
    assert_one_line_error(&o, &["--topk = (not given)", "`trial` simulates one cell"]);
    assert!(!tmp.path().join("t.safetensors").exists());
}

#[test]
fn bad_stack_values_name_their_flag() {
    assert_bad_sweep(&["--compress-ratios", "4,,4"], &["stack.compress_ratios (--compress-ratios)", "\"4,,4\"", "character 3"]);
    assert_bad_sweep(&["--quorum", "22"], &["stack.quorum (--quorum) = 22", "from 1 to 21"]);
    assert_bad_sweep(&["--layer-correlation", "1.5"], &["--layer-correlation", "from 0 to 0.9999"]);
    assert_bad_sweep(&["--hca", "maybe"], &["--hca", "blind, retrieves"]);
    assert_bad_sweep(&["--fault-layers", "some"], &["--fault-layers", "catalogue, shared, independent"]);
    assert_bad_sweep(&["--candidate-source-layer", "3"], &["--candidate-source-layer", "an indexer layer of the stack"]);
    assert_bad_sweep(&["--candidate-blocks", "2048"], &["--candidate-blocks", "only with stack.candidate_source_layer"]);
    assert_bad_sweep(&["--question-tokens", "0", "--answer-tokens", "0"], &["--question-tokens", "at least 1"]);
    assert_bad_sweep(&["--indexer-ratio", "8"], &["--compress-ratios", "stack.indexer_ratio = 8"]);
}

#[test]
fn whole_model_recall_is_reported_and_can_be_switched_off() {
    let tmp = TempDir::new().unwrap();
    let (on, off, hca) = (tmp.path().join("on"), tmp.path().join("off"), tmp.path().join("hca"));
    let o = sweep(&on, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("whole-model recall (1 of 21 indexer layers, 20 query tokens)"), "{}", stdout(&o));
    for r in results(&on) {
        assert_eq!(r["indexed_layers"], 21);
        // Quorum 1: the model keeps the needle in every trial the simulated layer keeps it.
        assert!(r["model_survived"].as_u64().unwrap() >= r["survived"].as_u64().unwrap(), "{r}");
    }
    let o = sweep(&off, &["--compress-ratios", "none"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains("whole-model"), "{}", stdout(&o));
    let (a, b) = (results(&on), results(&off));
    for (x, y) in a.iter().zip(&b) {
        assert!(y["model_recall"].is_null());
        // The per-layer numbers do not depend on the stack.
        assert_eq!((&x["recall"], &x["survived"], &x["mean_rank"]), (&y["recall"], &y["survived"], &y["mean_rank"]));
    }
    // HCA assumed to retrieve: every trial retrieves.
    let o = sweep(&hca, &["--hca", "retrieves"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(results(&hca).iter().all(|r| r["model_recall"] == 1.0));
}

/// A malformed layer plan is refused in one line naming the layer, exit 2,
/// before anything is written.
#[test]
fn bad_layer_plans_name_the_layer() {
    assert_bad_sweep(&["--layers", "i4, s3, i4, i4"], &["--layers", "layer 1 reuses layer 3, a later layer"]);
    assert_bad_sweep(&["--layers", "w, i0"], &["--layers", "layer 1: an indexer at ratio 0"]);
    assert_bad_sweep(&["--layers", "i4, s1"], &["--layers", "layer 1 reuses its own selection (a cycle)"]);
    assert_bad_sweep(&["--layers", "w, lin"], &["--layers", "at least one indexer layer"]);
    assert_bad_sweep(&["--layers", "w, i1, i4"], &["--layers", "the first indexer layer (layer 1, ratio 1) is the simulated one"]);
    assert_bad_sweep(&["--lost-layer-harm", "0.5", "--lost-layer-harm-band", "0.6..1"], &["--lost-layer-harm-band", "LOW..HIGH"]);
}

/// `run` and `trial` take the 2026 presets: run reads the plan's selecting
/// layers, trial simulates (and dumps) the first indexer layer.
#[test]
fn the_2026_presets_run_and_dump_a_trial() {
    let tmp = TempDir::new().unwrap();
    for (preset, layers, k) in [("deepseek-v4.1-flash", 38, "512"), ("glm-5.2", 78, "2048"), ("glm-5.3-flash", 11, "512")] {
        let cell = ["--context", "8K", "--depth", "50", "--topk", k];
        let o = bin().args(["run", "--preset", preset, "--trials", "8", "--json", "--precision", "bf16"]).args(cell).output().unwrap();
        assert!(o.status.success(), "{preset}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{preset}: {e}: {}", stdout(&o)));
        assert_eq!(v["indexed_layers"], layers, "{preset}: {v}");
        let dump = tmp.path().join(format!("{preset}.safetensors"));
        let o = bin().args(["trial", "--preset", preset, "--precisions", "bf16", "--dump"]).arg(&dump).args(cell).output().unwrap();
        assert!(o.status.success() && dump.exists(), "{preset}: {}", stderr(&o));
    }
}

/// report.html draws a plan in words as a strip, one cell per layer.
#[test]
fn the_report_draws_the_layer_plan() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("flash");
    let o = sweep(&out, &["--preset", "glm-5.3-flash"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = read(&out.join("report.html"));
    assert_eq!(html.matches("<span title=\"layer ").count(), 45, "one cell per layer");
    assert_eq!(html.matches(": an indexer at ratio 4\"").count(), 11);
    assert_eq!(html.matches(": linear attention\"").count(), 34);
    // A plan the ratio shorthand says (V4-Flash's) keeps its report as before.
    let out = tmp.path().join("v4");
    assert!(sweep(&out, &[]).status.success());
    assert!(!read(&out.join("report.html")).contains("<span title=\"layer "));
}

#[test]
fn presets_show_prints_the_layer_plan() {
    let o = bin().args(["presets", "show", "glm-5.2"]).output().unwrap();
    let out = stdout(&o);
    assert!(out.contains("layers = \"i1*3, (s, s, s, i1)*18, s, s, s\""), "{out}");
    assert!(out.contains("#  21 indexed, ratio 1: 0, 1, 2, 6, …, 74\n#  57 reusing a selection, ratio 1: 3, 4, 5, 7,"), "{out}");
    assert!(out.contains("selections reused: 2 → 3, 4, 5; 6 → 7, 8, 9;"), "{out}");
    let o = bin().args(["presets", "show", "deepseek-v4.1-flash"]).output().unwrap();
    let out = stdout(&o);
    assert!(out.contains("#  5 indexed, ratio 1: 20, 24, …, 36\n#  3 indexed, ratio 2: 2, 8, 14"), "{out}");
    assert!(out.contains("candidate stage: layer 20 keeps 2048 blocks of 8 rows"), "{out}");
}

#[test]
fn presets_show_describes_the_stack() {
    let o = bin().args(["presets", "show", "deepseek-v4-flash"]).output().unwrap();
    let out = stdout(&o);
    assert!(out.contains("# The stack: 43 layers\n#  2 raw window only, ratio 0: 0, 1\n#  21 indexed, ratio 4: 2, 4, …, 42"), "{out}");
    assert!(out.contains("carry 19.2 % of"), "{out}");
    let o = bin().args(["hypotheses", "show", "slot-shift"]).output().unwrap();
    assert!(stdout(&o).contains("across layers: shared"), "{}", stdout(&o));
}

#[test]
fn precisions_all_expands_to_every_variant_once() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("all");
    let o = bin()
        .arg("sweep")
        .args(["--trials", "5", "--contexts", "1K", "--depths", "50", "--topk", "64", "--precisions", "bf16,all"])
        .args(["--precision-def", "name=kfp8;q=bf16;k=e4m3fn/128/ue8m0/hadamard", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let mut seen: Vec<String> = Vec::new();
    for r in results(&out) {
        let p = r["precision"].as_str().unwrap().to_string();
        if !seen.contains(&p) {
            seen.push(p);
        }
    }
    // The baseline stays first; the built-ins follow in their order, then the custom one.
    assert_eq!(seen, ["bf16", "fp32", "fp8", "fp8-fp32scale", "fp4", "mxfp4", "nvfp4", "kfp8"]);
    // `run` simulates one cell: "all" is a list.
    let o =
        bin().args(["run", "--context", "1K", "--depth", "50", "--topk", "64", "--trials", "5", "--precision", "all"]).output().unwrap();
    assert_one_line_error(&o, &["--precision"]);
}

/// summary.csv as rows of column name → text.
fn csv_rows(dir: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let csv = read(&dir.join("summary.csv"));
    let mut lines = csv.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines.map(|l| header.iter().cloned().zip(l.split(',').map(String::from)).collect()).collect()
}

/// The p-value as the tables print it (three decimals, or 1.2e-4 below 0.001).
fn p_text(p: f64) -> String {
    if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

#[test]
fn one_context_prints_a_narrow_table_with_paired_k_and_holm_columns() {
    // Issue 17, "compare all precisions (and k) at one context", "what does
    // k = 1024 buy over 512" and "statistics that do not invite over-reading":
    // one row per (k, precision) holding the CSV's values, a k-paired section
    // consistent with the cells, and Holm-adjusted p ≥ raw p everywhere.
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("one");
    let o = bin()
        .args([
            "sweep",
            "--trials",
            "30",
            "--contexts",
            "4K",
            "--depths",
            "50",
            "--topk",
            "32,128",
            "--precisions",
            "fp32,bf16,fp4",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("per-layer selection recall at 4K tokens, depth 50 %"), "{text}");
    assert!(text.lines().filter(|l| l.contains(" [")).all(|l| l.chars().count() <= 130), "a row wider than the narrow layout: {text}");
    let (table, k_section) = text.split_once("paired comparison with k=32 on the same haystacks").expect("k-paired section");
    let cells = results(&out);
    let csv = csv_rows(&out);
    assert_eq!(csv.len(), 6);
    let ci = |c: &Value, r: &str, lo: &str, hi: &str| {
        format!("{:.3} [{:.3}, {:.3}]", c[r].as_f64().unwrap(), c[lo].as_f64().unwrap(), c[hi].as_f64().unwrap())
    };
    let mut family = 0;
    for (c, row) in cells.iter().zip(&csv) {
        let (k, p) = (c["topk"].as_u64().unwrap(), c["precision"].as_str().unwrap());
        let line = table
            .lines()
            .find(|l| l.split_whitespace().take(2).eq([k.to_string().as_str(), p]))
            .unwrap_or_else(|| panic!("no narrow row for k={k} {p}: {table}"));
        assert!(line.contains(&ci(c, "recall", "ci_low", "ci_high")), "{line}");
        assert!(line.contains(&ci(c, "model_recall", "model_ci_low", "model_ci_high")), "{line}");
        if let Some(raw) = c["mcnemar_p"].as_f64() {
            let holm: f64 = row["mcnemar_p_holm"].parse().unwrap();
            assert!(holm >= raw && holm <= 1.0, "{holm} < {raw}");
            assert!(line.trim_end().ends_with(&format!("{}  {:>8}", p_text(raw), p_text(holm))), "{line}");
            family += 1;
        } else {
            assert_eq!(row["mcnemar_p_holm"], "");
        }
        // k pairs: against the same precision at k = 32.
        let base = cells.iter().find(|b| b["topk"] == 32 && b["precision"] == c["precision"]).unwrap();
        if k == 32 {
            assert!(c.get("k_recall_diff").is_none() && row["k_mcnemar_p_holm"].is_empty());
            continue;
        }
        family += 1;
        assert_eq!(c["k_baseline"], 32);
        let diff = c["k_recall_diff"].as_f64().unwrap();
        assert!((diff - (c["recall"].as_f64().unwrap() - base["recall"].as_f64().unwrap())).abs() < 1e-12);
        let (gained, lost) = (c["k_discordant_gained"].as_i64().unwrap(), c["k_discordant_lost"].as_i64().unwrap());
        assert_eq!(gained - lost, (diff * 30.0).round() as i64);
        let raw = c["k_mcnemar_p"].as_f64().unwrap();
        let holm: f64 = row["k_mcnemar_p_holm"].parse().unwrap();
        assert!(holm >= raw, "{holm} < {raw}");
        let line = k_section.lines().find(|l| l.split_whitespace().nth(4) == Some(p)).unwrap_or_else(|| panic!("{k_section}"));
        assert!(line.contains(&format!("{gained}/{lost}")) && line.trim_end().ends_with(&p_text(holm)), "{line}");
        let model = c["k_model_recall_diff"].as_f64().unwrap();
        assert!((model - (c["model_recall"].as_f64().unwrap() - base["model_recall"].as_f64().unwrap())).abs() < 1e-12);
    }
    assert_eq!(family, 4 + 3, "bf16 and fp4 at two k, and three precisions at the larger k");
    let note = format!("{family} paired tests (precision and k pairs)");
    assert_eq!(text.matches(&note).count(), 2, "one note under each paired table: {text}");
}

#[test]
fn effective_context_csv_and_the_reports_paired_k_tables() {
    // Issue 17: the effective-context CSV (one row per k and precision, the
    // manifest's values), and report.html's narrow table, k-paired table and
    // Holm column when (k, precision) columns would not fit.
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("wide");
    let o = bin()
        .args([
            "sweep",
            "--trials",
            "20",
            "--contexts",
            "1K,4K",
            "--depths",
            "50",
            "--topk",
            "32,64",
            "--precisions",
            "fp32,bf16,fp4",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    // Six (k, precision) columns would pass 120 characters: narrow, with a context column.
    assert!(text.lines().any(|l| l.split_whitespace().take(3).eq(["4K", "64", "fp4"])), "{text}");

    let csv = read(&out.join("effective_context.csv"));
    let m = manifest(&out);
    assert!(m["files"].as_array().unwrap().iter().any(|f| f == "effective_context.csv"), "{}", m["files"]);
    let effective = m["effective_context"].as_array().unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some(
            "topk,precision,threshold,effective_context,held_at_longest,model_effective_context,model_held_at_longest,coverage_limit,\
             effective_context_low,effective_context_high,model_effective_context_low,model_effective_context_high"
        )
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 6);
    let text_of = |v: &Value| if v.is_null() { String::new() } else { v.to_string() };
    for (row, e) in rows.iter().zip(effective) {
        let want = [
            e["topk"].to_string(),
            e["precision"].as_str().unwrap().to_string(),
            e["threshold"].to_string(),
            text_of(&e["effective_context"]),
            e["held_at_longest"].to_string(),
            text_of(&e["model"]["effective_context"]),
            e["model"]["held_at_longest"].to_string(),
            e["coverage_limit"].to_string(),
            text_of(&e["layer_range"]["low"]["effective_context"]),
            text_of(&e["layer_range"]["high"]["effective_context"]),
            text_of(&e["model_range"]["low"]["effective_context"]),
            text_of(&e["model_range"]["high"]["effective_context"]),
        ];
        assert_eq!(row, &want, "{csv}");
        // the range brackets the point: low ≤ point ≤ high (absent = below the shortest context)
        let at = |v: &Value| v.as_u64().unwrap_or(0);
        let (lo, mid, hi) = (
            at(&e["layer_range"]["low"]["effective_context"]),
            at(&e["effective_context"]),
            at(&e["layer_range"]["high"]["effective_context"]),
        );
        assert!(lo <= mid && mid <= hi, "{lo} {mid} {hi}");
    }

    let html = read(&out.join("report.html"));
    for needle in
        ["<h2>Recall per cell</h2>", "<td>4K</td><td>64</td><td class=\"l\">fp4</td>", "Paired comparison with k=32", "<th>Holm p</th>"]
    {
        assert!(html.contains(needle), "report.html lacks {needle:?}");
    }
    let family =
        csv_rows(&out).iter().map(|r| usize::from(!r["mcnemar_p"].is_empty()) + usize::from(!r["k_mcnemar_p"].is_empty())).sum::<usize>();
    assert_eq!(family, 2 * 2 * 2 + 2 * 3);
    assert_eq!(html.matches(&format!("{family} paired tests (precision and k pairs)")).count(), 2);

    // `plot` redraws charts and the report; it leaves the data files as they are.
    let before = fs::read(out.join("effective_context.csv")).unwrap();
    bin().arg("plot").arg(&out).assert().success();
    assert_eq!(fs::read(out.join("effective_context.csv")).unwrap(), before);
}

/// A command's `--help` text.
fn help(args: &[&str]) -> String {
    let o = bin().args(args).arg("--help").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

/// The long flags a help text lists (hidden ones are absent).
fn listed_flags(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.trim_start().strip_prefix("--")).map(|l| l.split([' ', '<']).next().unwrap().to_string()).collect()
}

#[test]
fn help_shows_defaults_presets_examples_and_only_used_flags() {
    // Issue 17, --help: the presets' defaults, the preset names, examples,
    // and no flag a subcommand ignores.
    let top = help(&[]);
    assert!(top.contains("Examples:") && top.contains("dsa-recall sweep --contexts 32K --precisions all"), "{top}");
    assert!(top.contains("--topk 512,1024"), "{top}");

    let sweep = help(&["sweep"]);
    // A flag's help, as one line whatever the wrapping: up to the next flag.
    let line = |text: &str, flag: &str| {
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let at = flat.find(&format!("--{flag} ")).unwrap_or_else(|| panic!("no --{flag}: {text}"));
        let rest = &flat[at + 2..];
        rest[..rest.find(" --").unwrap_or(rest.len())].to_string()
    };
    // The shipped presets all run 400 trials from seed 42; k is index_topk and twice it.
    assert!(line(&sweep, "trials").contains("[default: the preset's: 400 in each preset]"), "{}", line(&sweep, "trials"));
    assert!(line(&sweep, "seed").contains("[default: the preset's: 42 in each preset]"));
    assert!(line(&sweep, "topk").contains("512,1024 for deepseek-v4-flash, 1024,2048 for deepseek-v4-pro"), "{}", line(&sweep, "topk"));
    let presets = stdout(&bin().arg("presets").output().unwrap());
    let preset_line = line(&sweep, "preset");
    for name in presets.lines().map(|l| l.split_whitespace().next().unwrap()) {
        assert!(preset_line.contains(name), "--preset help lacks {name}: {preset_line}");
    }
    assert!(preset_line.contains("deepseek-v4-flash (default)"));
    let sweep_flags = listed_flags(&sweep);
    for f in ["trials", "threshold", "mode", "predict", "quorum"] {
        assert!(sweep_flags.iter().any(|x| x == f), "sweep --help lacks --{f}");
    }

    // `run` reports one cell: no effective context, so no --threshold.
    let run = listed_flags(&help(&["run"]));
    assert!(run.iter().any(|f| f == "trials") && run.iter().any(|f| f == "mode") && run.iter().any(|f| f == "quorum"));
    assert!(!run.iter().any(|f| f == "threshold"), "{run:?}");
    // `trial` writes one trial: no trial count, estimator, threshold or stack.
    let trial = listed_flags(&help(&["trial"]));
    for f in ["trials", "threshold", "mode", "tail-rows", "predict", "quorum", "compress-ratios"] {
        assert!(!trial.iter().any(|x| x == f), "trial --help lists --{f}");
    }
    assert!(trial.iter().any(|f| f == "seed") && trial.iter().any(|f| f == "rope"));

    // Given anyway, they are refused in one line rather than ignored.
    let tmp = TempDir::new().unwrap();
    let dump = tmp.path().join("t.safetensors");
    let cell = ["--context", "4K", "--depth", "50", "--topk", "64", "--precisions", "fp32", "--dump"];
    let o = bin().arg("trial").args(["--trials", "5"]).args(cell).arg(&dump).output().unwrap();
    assert_one_line_error(&o, &["sweep.trials (--trials) = 5", "`trial` does not use --trials"]);
    let o = bin().arg("trial").args(["--quorum", "2"]).args(cell).arg(&dump).output().unwrap();
    assert_one_line_error(&o, &["--quorum", "`trial` does not use"]);
    assert!(!dump.exists());
    let o = bin()
        .args(["run", "--context", "4K", "--topk", "64", "--precision", "fp32", "--trials", "5", "--threshold", "0.5"])
        .output()
        .unwrap();
    assert_one_line_error(&o, &["sweep.threshold (--threshold) = 0.5", "`run` does not use --threshold"]);
}

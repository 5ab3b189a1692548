//! `--agreement A:B` on `sweep` and `replay`: top-k agreement between two
//! precisions (docs/MODEL.md, "Top-k agreement").

use crate::common::bin;
use serde_json::Value;
use std::process::Output;
use tempfile::TempDir;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_one_line_error(o: &Output, must: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err:?}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    for m in must {
        assert!(err.contains(m), "stderr should contain {m:?}: {err:?}");
    }
    assert!(o.stdout.is_empty(), "nothing on stdout: {:?}", String::from_utf8_lossy(&o.stdout));
}

const SWEEP: [&str; 10] = ["sweep", "--contexts", "8K", "--topk", "256", "--precisions", "fp32,bf16,fp8", "--trials", "6", "--force"];

fn lines(dir: &TempDir) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.path().join("results.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn cell<'a>(cells: &'a [Value], precision: &str) -> &'a Value {
    cells.iter().find(|c| c["precision"] == precision).unwrap_or_else(|| panic!("no {precision} cell"))
}

#[test]
fn sweep_agreement_is_one_with_itself_and_fidelity_against_fp32() {
    let dir = TempDir::new().unwrap();
    let o = bin().args(SWEEP).args(["--agreement", "fp32:bf16, bf16:fp8,fp8:fp8", "--out"]).arg(dir.path()).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("top-k agreement at depth 50 %") && out.contains("bf16:fp8"), "{out}");
    let cells = lines(&dir);
    let pair = |a: &str| cell(&cells, a)["agreement"][0].clone();
    // A variant agrees with itself on every row.
    let same = pair("fp8");
    assert_eq!((same["with"].as_str(), same["agreement"].as_f64()), (Some("fp8"), Some(1.0)), "{same}");
    assert_eq!(same["tie_disagreement"].as_f64(), Some(0.0));
    assert!(same["tie_share"].is_null());
    // Against fp32, agreement is selection fidelity: the share of fp32's top-k bf16 keeps.
    let exact = pair("fp32");
    let fidelity = cell(&cells, "bf16")["selection_recall"].as_f64().unwrap();
    assert!((exact["agreement"].as_f64().unwrap() - fidelity).abs() < 1e-12, "{exact} vs {fidelity}");
    // The shares add up to one, and a pair shows up on its A's cell only.
    let b = pair("bf16");
    let total: f64 = ["agreement", "tie_disagreement", "real_disagreement"].iter().map(|f| b[f].as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 1e-9 && b["with"] == "fp8" && b["trials"] == 6, "{b}");
    assert_eq!(cell(&cells, "fp8")["agreement"].as_array().map(Vec::len), Some(1));
    // agreement.csv holds the same pairs, one line each, listed in the manifest.
    let csv = std::fs::read_to_string(dir.path().join("agreement.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows[0][4..8], ["a", "b", "trials", "agreement"], "{csv}");
    assert_eq!(rows.len(), 1 + 3, "{csv}");
    let bf16_fp8 = rows.iter().find(|r| r[4] == "bf16").unwrap();
    assert_eq!((bf16_fp8[5], bf16_fp8[7].parse::<f64>().unwrap()), ("fp8", b["agreement"].as_f64().unwrap()), "{csv}");
    assert_eq!(rows.iter().find(|r| r[4] == "fp8").unwrap()[12], "", "no tie share when they always agree");
    let manifest = std::fs::read_to_string(dir.path().join("manifest.json")).unwrap();
    assert!(manifest.contains("\"agreement.csv\""), "{manifest}");
}

#[test]
fn sweep_without_agreement_writes_no_field_and_refuses_bad_pairs() {
    let dir = TempDir::new().unwrap();
    let o = bin().args(SWEEP).arg("--out").arg(dir.path()).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(lines(&dir).iter().all(|c| c.get("agreement").is_none()));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("top-k agreement"));
    let manifest = std::fs::read_to_string(dir.path().join("manifest.json")).unwrap();
    assert!(!manifest.contains("agreement"), "{manifest}");
    assert!(!dir.path().join("agreement.csv").exists(), "no pairs, no agreement.csv");
    for (value, words) in [
        ("bf16:fp4", &["--agreement", "\"bf16:fp4\"", "fp32, bf16, fp8"][..]),
        ("bf16", &["--agreement", "\"bf16\"", "pairs A:B"][..]),
        ("bf16:fp8,", &["--agreement", "\"\""][..]),
    ] {
        let bad = TempDir::new().unwrap();
        let o = bin().args(SWEEP).args(["--agreement", value, "--out"]).arg(bad.path()).output().unwrap();
        assert_one_line_error(&o, words);
        assert!(!bad.path().join("results.jsonl").exists(), "no output after a refusal");
    }
    let o = bin().args(SWEEP).args(["--agreement", "bf16:fp8", "--mode", "tail", "--out"]).arg(dir.path()).output().unwrap();
    assert_one_line_error(&o, &["--agreement", "estimator.mode is full"]);
}

#[test]
fn replay_agreement_against_fp32_is_the_overlap() {
    let dir = TempDir::new().unwrap();
    let dump = dir.path().join("t.safetensors");
    let o = bin()
        .args(["trial", "--context", "8K", "--depth", "50", "--topk", "256", "--precisions", "fp32", "--dump"])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let replay = |extra: &[&str]| {
        bin().arg("replay").arg(&dump).args(["--topk", "64,256", "--precisions", "bf16,fp8"]).args(extra).output().unwrap()
    };
    let o = replay(&["--agreement", "fp32:bf16,bf16:fp8,fp8:fp8", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let all: Vec<Value> = String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let agreement = |a: &str, b: &str, k: u64| {
        all.iter().find(|v| v["summary"] == "agreement" && v["a"] == a && v["b"] == b && v["topk"] == k).cloned().unwrap()
    };
    for k in [64, 256] {
        let overlap = all.iter().find(|v| v["precision"] == "bf16" && v["topk"] == k).unwrap()["selection_recall"].as_f64().unwrap();
        assert_eq!(agreement("fp32", "bf16", k)["agreement"].as_f64(), Some(overlap), "k={k}");
        assert_eq!(agreement("fp8", "fp8", k)["agreement"].as_f64(), Some(1.0));
        assert_eq!(agreement("bf16", "fp8", k)["queries"], 1);
    }
    let text = replay(&["--agreement", "bf16:fp8"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("top-k agreement"), "{}", stderr(&text));
    let plain = replay(&[]);
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("agreement"));
    assert_one_line_error(&replay(&["--agreement", "bf16:fp4"]), &["--agreement", "\"bf16:fp4\"", "fp32 and --precisions (bf16, fp8)"]);
}

//! The tie audit (`--tie-audit on`, `ties.csv`; docs/MODEL.md, "Tie
//! audit"): its per-rule recall is the recall of the variants that select
//! by that rule, it changes no other number, it keeps its bits across
//! thread counts, and bf16 logits tie at a long context where f32 logits
//! do not.

use assert_cmd::Command;
use dsa_recall::base::stats::wilson_interval;
use std::collections::HashMap;
use std::fs;
use std::path::Path;
use tempfile::TempDir;

/// Wilson 99.9 % (the repository's tolerance for statistical tests).
const Z999: f64 = 3.29;

fn sweep(out: &Path, args: &[&str]) {
    let o = Command::new(assert_cmd::cargo::cargo_bin!("dsa-recall")).arg("sweep").args(args).arg("--out").arg(out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A CSV file as one map (column → field) per row.
fn rows(path: &Path) -> Vec<HashMap<String, String>> {
    let text = fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines.map(|l| header.iter().cloned().zip(l.split(',').map(String::from)).collect()).collect()
}

fn find<'a>(rows: &'a [HashMap<String, String>], pairs: &[(&str, &str)]) -> &'a HashMap<String, String> {
    rows.iter().find(|r| pairs.iter().all(|(k, v)| r[*k] == *v)).unwrap_or_else(|| panic!("no row {pairs:?}"))
}

/// Half the cache pages read as zeros at k = 1536 of 2048 rows: about 1024
/// zero logits straddle the cut, so the tie rule decides many needles.
const ZERO_PAGES: &[&str] = &["--contexts", "8K", "--topk", "1536", "--depths", "10,90", "--trials", "40"];
const BASE: &str = "fp8+zero-blocks=0.5";

#[test]
fn each_rules_recall_is_that_of_the_variant_selecting_by_it() {
    let dir = TempDir::new().unwrap();
    let precisions = [BASE, &format!("{BASE}+ties-lowest"), &format!("{BASE}+ties-highest"), &format!("{BASE}+tie-truncate=15")].join(",");
    let mut args = ZERO_PAGES.to_vec();
    args.extend(["--precisions", &precisions, "--tie-audit", "on", "--threads", "2"]);
    sweep(dir.path(), &args);
    let ties = rows(&dir.path().join("ties.csv"));
    let summary = rows(&dir.path().join("summary.csv"));
    let manifest = fs::read_to_string(dir.path().join("manifest.json")).unwrap();
    assert!(manifest.contains("\"ties.csv\""), "the manifest lists ties.csv");
    let mut decided = 0.0;
    for depth in ["10", "90"] {
        let audit = find(&ties, &[("depth_percent", depth), ("precision", BASE)]);
        let recall_of = |p: &str| find(&summary, &[("depth_percent", depth), ("precision", p)])["recall"].clone();
        assert_eq!(audit["recall_random"], recall_of(BASE), "the scenario's rule is random");
        assert_eq!(audit["recall_lowest_index"], recall_of(&format!("{BASE}+ties-lowest")));
        assert_eq!(audit["recall_highest_index"], recall_of(&format!("{BASE}+ties-highest")));
        assert_eq!(audit["recall_truncated"], recall_of(&format!("{BASE}+tie-truncate=15")));
        assert!(audit["tied_rows_mean"].parse::<f64>().unwrap() > 100.0, "{audit:?}");
        decided += audit["share_needle_at_cut"].parse::<f64>().unwrap();
    }
    // The rules disagree where ties decide: a deep needle loses under
    // lowest-index, a shallow one under highest-index.
    assert!(decided > 0.0);
    let at = |depth: &str, column: &str| find(&ties, &[("depth_percent", depth), ("precision", BASE)])[column].parse::<f64>().unwrap();
    assert!(at("90", "recall_lowest_index") < at("90", "recall_highest_index"));
    assert!(at("10", "recall_highest_index") < at("10", "recall_lowest_index"));
}

#[test]
fn the_audit_changes_no_other_number_and_keeps_its_bits_across_threads() {
    let dir = TempDir::new().unwrap();
    let (plain, one, two) = (dir.path().join("plain"), dir.path().join("one"), dir.path().join("two"));
    let mut args = ZERO_PAGES.to_vec();
    args.extend(["--precisions", "fp32,fp4,fp8+zero-blocks=0.5"]);
    sweep(&plain, &[&args[..], &["--threads", "2"]].concat());
    sweep(&one, &[&args[..], &["--tie-audit", "on", "--threads", "1"]].concat());
    sweep(&two, &[&args[..], &["--tie-audit", "on", "--threads", "2"]].concat());
    assert!(!plain.join("ties.csv").exists(), "no audit, no ties.csv");
    let report = |dir: &Path| fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(report(&two).contains("Ties at the cut") && !report(&plain).contains("Ties at the cut"));
    for file in ["summary.csv", "effective_context.csv"] {
        assert_eq!(fs::read(plain.join(file)).unwrap(), fs::read(two.join(file)).unwrap(), "{file}");
    }
    for file in ["ties.csv", "results.jsonl", "summary.csv"] {
        assert_eq!(fs::read(one.join(file)).unwrap(), fs::read(two.join(file)).unwrap(), "{file}");
    }
    // results.jsonl differs only by each cell's `ties` counts.
    let strip = |dir: &Path| -> Vec<serde_json::Value> {
        fs::read_to_string(dir.join("results.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("ties");
                v
            })
            .collect()
    };
    assert_eq!(strip(&plain), strip(&two));
}

#[test]
fn bf16_logits_tie_at_the_cut_where_f32_logits_do_not() {
    // V3.2 (token-level rows, k = 2048) at 32K tokens: fp8 keys scored into
    // f32 logits, and the same rounded to bf16 (measured: every bf16 trial
    // tied, no f32 trial; docs/MODEL.md, "Tie audit").
    let dir = TempDir::new().unwrap();
    let args = [
        "--preset",
        "deepseek-v3.2",
        "--contexts",
        "32K",
        "--topk",
        "2048",
        "--trials",
        "30",
        "--precisions",
        "fp8,fp8+logits-bf16",
        "--tie-audit",
        "on",
    ];
    sweep(dir.path(), &args);
    let ties = rows(&dir.path().join("ties.csv"));
    let count = |p: &str, column: &str| {
        let r = find(&ties, &[("precision", p)]);
        let trials: u64 = r["trials"].parse().unwrap();
        ((r[column].parse::<f64>().unwrap() * trials as f64).round() as u64, trials)
    };
    let (f32_tied, n) = count("fp8", "share_tied");
    let (bf16_tied, m) = count("fp8+logits-bf16", "share_tied");
    let (_, f32_high) = wilson_interval(f32_tied, n, Z999);
    let (bf16_low, _) = wilson_interval(bf16_tied, m, Z999);
    assert!(bf16_low > f32_high, "bf16 ties {bf16_tied}/{m}, f32 {f32_tied}/{n}");
    assert_eq!(find(&ties, &[("precision", "fp8+logits-bf16")])["logits"], "bf16");
    assert_eq!(find(&ties, &[("precision", "fp8")])["logits"], "f32");
    let mean = |p: &str| find(&ties, &[("precision", p)])["tied_rows_mean"].parse::<f64>().unwrap();
    assert!(mean("fp8+logits-bf16") > 2.0 * mean("fp8"), "{} vs {}", mean("fp8+logits-bf16"), mean("fp8"));
}

#[test]
fn the_tail_estimator_refuses_the_audit() {
    let dir = TempDir::new().unwrap();
    let o = Command::new(assert_cmd::cargo::cargo_bin!("dsa-recall"))
        .args(["sweep", "--needle-profile", "stress", "--mode", "tail", "--tie-audit", "on", "--out"])
        .arg(dir.path().join("x"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("tie_audit") && err.contains("full"), "{err}");
    assert!(!dir.path().join("x").exists());
}

//! What users of other command-line tools expect: shell completions and a
//! man page from the clap definition, working examples under each
//! subcommand's `--help`, `--json` cells on stdout for jq or pandas, and
//! progress on stderr during a long `diagnose`.

use crate::common::bin;
use std::fs;
use std::process::Command as Process;
use tempfile::TempDir;

/// The subcommands `dsa-recall --help` lists (without `help`).
fn subcommands() -> Vec<String> {
    let o = bin().arg("--help").output().unwrap();
    let help = String::from_utf8(o.stdout).unwrap();
    let list = help.split("Commands:\n").nth(1).unwrap().split("\n\n").next().unwrap();
    let names: Vec<String> =
        // A name is indented by two spaces; a wrapped description by more.
        list.lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| *n != "help")
            .map(str::to_string)
            .collect();
    assert!(names.len() >= 15 && names.iter().any(|n| n == "completions"), "{names:?}");
    names
}

fn stdout_of(args: &[&str]) -> String {
    let o = bin().args(args).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn have(program: &str) -> bool {
    Process::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success())
}

#[test]
fn completions_name_every_subcommand_and_load_in_bash() {
    let names = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout_of(&["completions", shell]);
        for name in &names {
            assert!(script.contains(name.as_str()), "{shell} completions lack {name}");
        }
        // Flags too (fish spells them `-l contexts`).
        assert!(script.contains("contexts") && script.contains("observations") && script.contains("needle-multipliers"), "{shell}");
    }
    let o = bin().args(["completions", "tcsh"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!((o.status.code(), err.lines().count()), (Some(2), 1), "{err}");
    assert!(err.contains("tcsh") && err.contains("bash"), "{err}");
    if have("bash") {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("dsa-recall.bash");
        fs::write(&path, stdout_of(&["completions", "bash"])).unwrap();
        // Sourced, it registers a completion for the command.
        let o = Process::new("bash").args(["-c", &format!("source {} && complete -p dsa-recall", path.display())]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("dsa-recall"));
    }
}

#[test]
fn man_page_has_a_title_and_every_subcommand_and_renders() {
    let page = stdout_of(&["man"]);
    assert!(page.lines().any(|l| l.starts_with(".TH dsa-recall 1")), "{}", &page[..200.min(page.len())]);
    for name in subcommands() {
        let heading = format!(".SH \"DSA\\-RECALL {}\"", name.to_uppercase());
        assert!(page.contains(&heading), "no section {heading}");
    }
    assert!(page.contains(".SS EXAMPLES") && !page.contains("EXTRA"), "examples have their own heading");
    // No links to separate subcommand pages: they are sections of this one.
    assert!(!page.contains("dsa\\-recall\\-sweep(1)"));
    if have("man") {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("dsa-recall.1");
        fs::write(&path, &page).unwrap();
        let o = Process::new("man").arg("-l").arg(&path).env("MANPAGER", "cat").env("MANWIDTH", "100").output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(text.contains("DSA-RECALL SWEEP") && text.contains("--observations"), "{}", &text[..300.min(text.len())]);
    }
}

/// The example command lines of `SUB --help`.
fn examples_of(sub: &str) -> Vec<Vec<String>> {
    let help = stdout_of(&[sub, "--help"]);
    let block = help.split("Examples:\n").nth(1).unwrap_or_else(|| panic!("{sub} --help has no examples"));
    // A long command goes on after ` \`, as in a shell.
    let kinds = ["  # ", "  dsa-recall ", "  source <(dsa-recall ", "      "];
    assert!(block.lines().all(|l| kinds.iter().any(|k| l.starts_with(k))), "clap wrapped an example: {block}");
    block
        .replace(" \\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("dsa-recall "))
        .map(|l| l.split_whitespace().skip(1).map(str::to_string).collect())
        .collect()
}

// The cheap examples run as printed: no input file or redirection, under a second each.
#[test]
fn help_examples_run_as_printed() {
    for sub in subcommands() {
        assert!(!examples_of(&sub).is_empty(), "{sub}");
    }
    let mut ran = 0;
    for sub in ["presets", "hypotheses", "quantize", "check"] {
        let needs_input = |a: &Vec<String>| a.iter().any(|w| w.contains(['<', '>']) || w.ends_with(".safetensors"));
        for args in examples_of(sub).into_iter().filter(|a| !needs_input(a)) {
            let o = bin().args(&args).output().unwrap();
            assert!(o.status.success(), "dsa-recall {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr));
            assert!(!o.stdout.is_empty(), "{args:?}");
            ran += 1;
        }
    }
    assert!(ran >= 7, "{ran}");
}

const CELL_KEYS: [&str; 8] = ["context_tokens", "depth_percent", "topk", "precision", "trials", "survived", "recall", "ci_low"];

// `sweep --json`: one object per cell on stdout, the lines of results.jsonl;
// `run --json` has the same keys.
#[test]
fn sweep_and_run_json_lines_parse() {
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("o");
    let grid = ["--contexts", "1K,2K", "--depths", "50", "--topk", "64", "--precisions", "fp8,bf16", "--trials", "8"];
    let o = bin().arg("sweep").args(grid).arg("--out").arg(&out).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "2 contexts × 2 precisions: {stdout}");
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for key in CELL_KEYS {
            assert!(v.get(key).is_some(), "{key} missing: {line}");
        }
    }
    assert_eq!(stdout, fs::read_to_string(out.join("results.jsonl")).unwrap());
    assert!(String::from_utf8_lossy(&o.stderr).contains("wrote "), "where it wrote goes to stderr");
    let o = bin()
        .args(["run", "--context", "1K", "--depth", "50", "--topk", "64", "--precision", "fp8", "--trials", "8", "--json"])
        .output()
        .unwrap();
    let run = String::from_utf8(o.stdout).unwrap();
    assert_eq!(run.lines().count(), 1, "{run}");
    let v: serde_json::Value = serde_json::from_str(run.trim()).unwrap();
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&v), keys(&serde_json::from_str(lines[0]).unwrap()), "run and sweep cells have the same keys");
}

/// The hypotheses of the ranking's own lines (`rank  hypothesis  class …`).
fn ranked_rows(table: &str) -> Vec<&str> {
    table
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (rank, name) = (words.next()?, words.next()?);
            (rank.parse::<usize>().is_ok() && name != "rows").then_some(name)
        })
        .collect()
}

const HEADER: &str = "context_tokens,depth_percent,topk,config,found,total\n";

fn diagnose(dir: &TempDir, body: &str, extra: &[&str]) -> (String, String) {
    let path = dir.path().join("obs.csv");
    fs::write(&path, body).unwrap();
    let o = bin()
        .args(["diagnose", "--observations", path.to_str().unwrap(), "--trials", "10", "--no-next"])
        .args(["--hypotheses", "slot-shift,no-hadamard,hadamard-q-only,hadamard-k-only"])
        .args(extra)
        .env("DSA_RECALL_PROGRESS_EVERY", "0")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (String::from_utf8(o.stdout).unwrap(), String::from_utf8(o.stderr).unwrap())
}

// In a pipe, diagnose reports progress on stderr as sweep does; ties fold
// into one line (all of them with --all), the columns are explained, and
// one prompt a row is flagged as weak evidence.
#[test]
fn diagnose_reports_progress_folds_ties_and_flags_weak_evidence() {
    let dir = TempDir::new().unwrap();
    // k 512 keeps every row of 1K and 2K tokens: every candidate gives the same recall.
    let body = format!("{HEADER}1K,50,512,fp8,1,1\n2K,50,512,fp8,1,1\n");
    let (table, progress) = diagnose(&dir, &body, &[]);
    assert!(progress.lines().any(|l| l.starts_with("progress: simulation 1: ") && l.contains(" trials) · ")), "{progress}");
    assert!(!progress.contains('\r') && !progress.contains('\x1b'), "plain lines in a pipe: {progress:?}");
    // Four faults and their forms gated beyond 1K.
    assert!(table.contains("… and 8 more tied with it at log-lik") && table.contains("--all lists each"), "{table}");
    assert_eq!(ranked_rows(&table), ["healthy"], "the tied rest folded: {table}");
    assert!(table.contains("columns: log-lik = ") && table.contains("needle × = the multiple of"), "{table}");
    assert!(table.contains("note: weak evidence: the median row has 1 prompt(s)"), "{table}");
    let (all, _) = diagnose(&dir, &body, &["--all"]);
    assert!(!all.contains("more tied") && ranked_rows(&all).len() == 9, "{all}");
    let (enough, _) = diagnose(&dir, &format!("{HEADER}1K,50,512,fp8,5,5\n2K,50,512,fp8,5,5\n"), &[]);
    assert!(!enough.contains("weak evidence"), "{enough}");
}

//! The field incidents shipped in `examples/incidents/` (issue 28, item 6):
//! each file says, in its header, how to run it (`# run:`) and what
//! `diagnose` concludes on it (`# diagnose:`); these tests hold it to that.
//!
//! The conclusions are of three kinds, and a file claims only one:
//! - `CLASS first`: the true class leads the class table;
//! - `consistent with healthy`: the verdict is healthy (for a healthy
//!   deployment, or a fault the rows cannot show);
//! - `fault, CLASS among the first two`: healthy is ruled out but the rows
//!   do not single out the true class (the file says why).
//!
//! Each run simulates the whole catalogue (or the file's `--hypotheses`)
//! with the needle profiled as the CLI does (× 0.5 … 128), at the
//! file's `--trials` or 60 trials per cell instead of 200 to keep CI
//! short; the conclusions in the headers were read off CLI runs with the
//! same settings (seed 42).

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::diagnose::{self, observations, Options, Reading};
use std::fs;
use std::path::{Path, PathBuf};

const TRIALS: u64 = 60;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/incidents")
}

/// The header's value for `key` (`# key: value`), if any.
fn header(text: &str, key: &str) -> Option<String> {
    let tag = format!("# {key}:");
    text.lines().take_while(|l| l.starts_with('#')).find_map(|l| l.strip_prefix(&tag).map(|v| v.trim().to_string()))
}

/// The value of `--flag` on the header's `# run:` line.
fn run_flag(text: &str, flag: &str) -> Option<String> {
    let run = header(text, "run")?;
    let mut words = run.split_whitespace();
    words.by_ref().find(|w| *w == flag)?;
    words.next().map(str::to_string)
}

/// The scenario file an incident runs against: `--config` on its `# run:` line, else findings.toml.
fn scenario(text: &str) -> dsa_recall::ScenarioParams {
    let config = run_flag(text, "--config").map_or_else(|| root().join("findings.toml"), |c| Path::new(env!("CARGO_MANIFEST_DIR")).join(c));
    let toml = fs::read_to_string(&config).unwrap_or_else(|e| panic!("{}: {e}", config.display()));
    config::resolve(parse_scenario_toml(&toml).unwrap()).unwrap()
}

fn incident_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        fs::read_dir(root()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "csv")).collect();
    files.sort();
    files
}

// Every shipped incident names its source and its transcription, parses
// against its own scenario (every label maps to a variant), and a file
// with a `# run:` line also says what diagnose concludes on it.
#[test]
fn shipped_incident_files_parse_with_a_source() {
    let files = incident_files();
    for path in &files {
        let text = fs::read_to_string(path).unwrap();
        let head: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
        assert!(head.iter().any(|l| l.contains("FINDINGS.md")), "{}: no source", path.display());
        assert!(head.iter().any(|l| l.contains("Transcribed")), "{}: no transcription note", path.display());
        let params = scenario(&text);
        let obs = observations::read(path, &|v| diagnose::variant_ok(&params, v)).unwrap();
        assert!(!obs.rows.is_empty(), "{}", path.display());
        if header(&text, "run").is_some() {
            assert!(header(&text, "diagnose").is_some(), "{}: a `# run:` line needs a `# diagnose:` line", path.display());
            assert!(head.iter().any(|l| l.contains("True root cause")), "{}: no root cause", path.display());
        }
    }
    assert!(files.len() >= 10, "{} incident files", files.len());
}

fn check_incident(name: &str) {
    let path = root().join(name);
    let text = fs::read_to_string(&path).unwrap();
    let mut params = scenario(&text);
    params.sweep.trials = Some(run_flag(&text, "--trials").map_or(TRIALS, |t| t.parse().unwrap()));
    let obs = observations::read(&path, &|v| diagnose::variant_ok(&params, v)).unwrap();
    let hypotheses = run_flag(&text, "--hypotheses").unwrap_or_else(|| "all".into());
    let opts = Options {
        // As the command: `all` adds the address bounds taken from the rows.
        hypotheses: diagnose::with_address_bounds(&hypotheses, diagnose::candidates(&hypotheses).unwrap(), &obs.rows),
        reading: Reading::Model,
        next: false,
        needle_multipliers: diagnose::default_needle_multipliers(&params),
        observer: &dsa_recall::base::observe::Silent,
    };
    let d = diagnose::diagnose(&params, &obs, &opts).unwrap();
    let table = diagnose::format_table(&d);
    let claim = header(&text, "diagnose").unwrap_or_else(|| panic!("{name}: no `# diagnose:` line"));
    // An open verdict compares the pair it leaves open, row by row (issue 28, item 5).
    match &d.separation {
        Some(s) => {
            assert_eq!(s.leader, d.ranking[0].hypothesis, "{name}:\n{table}");
            assert!(d.verdict.text.contains(&format!("in these cells {} and {}", s.leader, s.runner)), "{name}:\n{table}");
        }
        None => assert_ne!(d.verdict.kind, "inconclusive", "{name}:\n{table}"),
    }
    let class_rank = |class: &str| d.classes.iter().position(|c| c.class.to_string() == class);
    if claim == "consistent with healthy" {
        assert_eq!(d.verdict.kind, "healthy", "{name}:\n{table}");
    } else if let Some(class) = claim.strip_prefix("fault, ").and_then(|c| c.strip_suffix(" among the first two")) {
        assert_ne!(d.verdict.kind, "healthy", "{name}:\n{table}");
        assert!(class_rank(class).is_some_and(|r| r < 2), "{name}: {class} not among the first two classes:\n{table}");
    } else if let Some(class) = claim.strip_suffix(" first") {
        assert_eq!(class_rank(class), Some(0), "{name}: {class} is not first:\n{table}");
        assert_ne!(d.verdict.kind, "healthy", "{name}:\n{table}");
    } else {
        panic!("{name}: unknown claim {claim:?}");
    }
}

#[test]
fn healthy_sglang_33194() {
    check_incident("healthy_sglang_33194.csv");
}

#[test]
fn healthy_vllm_52696() {
    check_incident("healthy_vllm_52696.csv");
}

#[test]
fn rocm_collapse_pro() {
    check_incident("rocm_collapse_pro.csv");
}

#[test]
fn mlx_all_zero_scores() {
    check_incident("mlx_all_zero_scores.csv");
}

#[test]
fn sglang_rope_pairing() {
    check_incident("sglang_rope_pairing.csv");
}

#[test]
fn atom_hadamard_q_only() {
    check_incident("atom_hadamard_q_only.csv");
}

#[test]
fn mlx_chunked_prefill() {
    check_incident("mlx_chunked_prefill.csv");
}

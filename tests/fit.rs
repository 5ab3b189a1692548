//! `calibrate --observations` (issue 18, item 3): a knob fitted to healthy
//! rows simulated at a known value on another seed is covered by its 95 %
//! interval; the CLI writes a loadable scenario and the curve; refusals are
//! one line, exit 2, nothing written.

use assert_cmd::Command;
use dsa_recall::config::{self, params::parse_scenario_toml, ListSpec};
use dsa_recall::diagnose::fit::{self, FitOptions};
use dsa_recall::diagnose::{observations, variant_ok, Reading};
use std::fs;
use std::path::Path;
use std::process::Output;
use tempfile::TempDir;

fn bin() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin!("dsa-recall"))
}

/// V4-Flash at `strength`, bf16 keys, k 512, depth 50 %, on `seed`.
fn params(seed: u64, strength: f64) -> dsa_recall::ScenarioParams {
    let text = format!(
        "preset = \"deepseek-v4-flash\"\n[needle]\nunit = \"strength\"\nstrength = {strength}\n[sweep]\ntrials = 200\nseed = {seed}\n[estimator]\npredict = false\n"
    );
    config::resolve(parse_scenario_toml(&text).unwrap()).unwrap()
}

// Issue 18, item 3: per-layer counts of 200 prompts at 2K and 8K simulated
// at strength 2 on seed 7 (the "deployment"), fitted on seed 42. The
// tolerance is the fit's own 95 % interval, not a tuned margin: the test
// asserts that it holds the truth, and that the data bound it on both sides.
#[test]
fn fitted_interval_covers_the_strength_the_counts_were_simulated_at() {
    let truth = 2.0;
    let mut p = params(7, truth);
    p.sweep.contexts = Some(ListSpec::Text("2048,8192".into()));
    p.sweep.depths = Some(ListSpec::Text("50".into()));
    p.sweep.topk = Some(ListSpec::Text("512".into()));
    p.sweep.precisions = Some(ListSpec::Text("bf16".into()));
    let cells = dsa_recall::run::sweep::run_sweep(&config::check(p).unwrap(), &|| {}).unwrap().cells;
    let mut csv =
        String::from("# synthetic: simulated at strength 2, seed 7\ncontext_tokens,depth_percent,topk,config,found,total,layer,healthy\n");
    for c in &cells {
        csv.push_str(&format!("{},50,512,bf16,{},{},0,true\n", c.context_tokens, c.survived, c.trials));
    }
    let base = params(42, 1.0);
    let obs = observations::parse("sim.csv", &csv, &|v| variant_ok(&base, v)).unwrap();
    let opts = FitOptions {
        field: "needle.strength".into(),
        range: Some((0.25, 16.0)),
        reading: Reading::Layer,
        observer: &dsa_recall::base::observe::Silent,
    };
    let f = fit::fit(&base, &obs, &opts).unwrap();
    let table = fit::format_table(&f);
    eprintln!("{table}");
    assert!(f.interval.0 <= truth && truth <= f.interval.1, "{table}");
    assert!(!f.open_low && !f.open_high, "{table}");
    assert!(f.interval.0 <= f.estimate && f.estimate <= f.interval.1, "{table}");
    // Every row healthy: each is predicted from a fit to the other.
    assert_eq!(f.held_out.len(), 2, "{table}");
    assert!(f.held_out.iter().all(|h| h.kind == "left out"), "{table}");
    // The curve is ascending in value and its maximum is the estimate.
    assert!(f.curve.windows(2).all(|w| w[0].value < w[1].value));
    let best = f.curve.iter().map(|g| g.log_likelihood).fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(best, f.log_likelihood);
}

fn calibrate(dir: &Path, body: &str, extra: &[&str]) -> (Output, std::path::PathBuf) {
    let obs = dir.join("obs.csv");
    fs::write(&obs, body).unwrap();
    let out = dir.join("fitted.toml");
    let o = bin()
        .args(["calibrate", "--observations", obs.to_str().unwrap(), "--out", out.to_str().unwrap(), "--trials", "20"])
        .args(extra)
        .output()
        .unwrap();
    (o, out)
}

const HEADER: &str = "context_tokens,depth_percent,topk,config,found,total,layer,healthy\n";

// Issue 26: the quantile needle's median exceedance is the knob fitted by
// default under it. Per-layer counts of 200 prompts at 16K and 64K, k 16
// (recall far from 0 and 1), simulated at exceedance 2·10⁻³ on seed 7 and
// fitted on seed 42; the tolerance is the fit's own 95 % interval.
#[test]
fn fitted_interval_covers_the_exceedance_the_counts_were_simulated_at() {
    let truth = 2e-3;
    let text = |seed: u64, u: Option<f64>| {
        format!(
            "preset = \"deepseek-v4-flash\"\n[needle]\n{}[sweep]\ntrials = 200\nseed = {seed}\ncontexts = \"16K,64K\"\ndepths = \"50\"\n\
             topk = \"16\"\nprecisions = \"bf16\"\n[estimator]\npredict = false\n",
            u.map_or(String::new(), |u| format!("exceedance = {u}\n"))
        )
    };
    let truth_params = config::resolve(parse_scenario_toml(&text(7, Some(truth))).unwrap()).unwrap();
    let cells = dsa_recall::run::sweep::run_sweep(&config::check(truth_params).unwrap(), &|| {}).unwrap().cells;
    let mut csv = String::from(
        "# synthetic: simulated at exceedance 2e-3, seed 7\ncontext_tokens,depth_percent,topk,config,found,total,layer,healthy\n",
    );
    for c in &cells {
        assert!(c.recall > 0.05 && c.recall < 0.95, "{} tokens: recall {} is not informative", c.context_tokens, c.recall);
        csv.push_str(&format!("{},50,16,bf16,{},{},0,true\n", c.context_tokens, c.survived, c.trials));
    }
    let base = config::resolve(parse_scenario_toml(&text(42, None)).unwrap()).unwrap();
    assert_eq!(fit::default_field(&base), "needle.exceedance");
    let obs = observations::parse("sim.csv", &csv, &|v| variant_ok(&base, v)).unwrap();
    let opts = FitOptions {
        field: fit::default_field(&base).into(),
        range: None,
        reading: Reading::Layer,
        observer: &dsa_recall::base::observe::Silent,
    };
    let f = fit::fit(&base, &obs, &opts).unwrap();
    let table = fit::format_table(&f);
    eprintln!("{table}");
    assert!(f.interval.0 <= truth && truth <= f.interval.1, "{table}");
    assert!(!f.open_low && !f.open_high, "{table}");
}

// Issue 18, item 3: the CLI end to end on a tiny file: the TOML loads as a
// scenario with the fitted value and says the interval; the curve CSV has
// one row per value tried; the unhealthy row is checked.
#[test]
fn cli_writes_a_loadable_scenario_and_the_curve() {
    let dir = TempDir::new().unwrap();
    let body =
        format!("# synthetic\n{HEADER}1K,50,512,bf16,15,20,0,true\n2K,50,512,bf16,12,20,0,true\n2K,50,512,fp8-fp32scale,0,5,0,false\n");
    let (o, out) = calibrate(dir.path(), &body, &["--fit-range", "0.5..8", "--recall", "layer", "--needle-profile", "stress"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("← max") && stdout.contains("95 % interval") && stdout.contains("line 5"), "{stdout}");
    let text = fs::read_to_string(&out).unwrap();
    assert!(text.contains("95 % interval") && text.contains("lines 3, 4") && text.contains("predicted"), "{text}");
    let s = config::check(config::resolve(parse_scenario_toml(&text).unwrap()).unwrap()).unwrap();
    let fitted = text.lines().find_map(|l| l.strip_prefix("strength = ")).unwrap().parse::<f64>().unwrap();
    assert_eq!(s.model.needle_strength, fitted);
    assert!((0.5..=8.0).contains(&fitted), "{text}");
    let curve = fs::read_to_string(dir.path().join("fitted.fit.csv")).unwrap();
    let rows: Vec<&str> = curve.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows[0], "value,log_likelihood,delta,in_95");
    assert!(rows.len() > fit::COARSE_POINTS, "{curve}");
    assert!(rows[1..].iter().any(|r| r.contains(",0,true")), "the maximum has delta 0: {curve}");
}

/// Exit 2, one line naming each of `must`, and neither output file.
fn assert_refused(o: &Output, out: &Path, must: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && !err.contains("panicked"), "{err}");
    for m in must {
        assert!(err.contains(m), "stderr should name {m:?}: {err}");
    }
    assert!(!out.exists() && !out.with_extension("fit.csv").exists(), "nothing written");
}

// Issue 18, items 3 and 6: refusals.
#[test]
fn refusals_are_one_line_and_write_nothing() {
    let dir = TempDir::new().unwrap();
    let row = "1K,50,512,bf16,15,20,0";
    for (body, extra, must) in [
        (format!("context_tokens,depth_percent,topk,config,found,total,layer\n{row}\n"), vec![], vec!["obs.csv", "no healthy column"]),
        (format!("{HEADER}{row},false\n"), vec![], vec!["obs.csv", "no row has healthy = true"]),
        (format!("{HEADER}1K,50,512,bf16,21,20,0,true\n"), vec![], vec!["obs.csv:2", "found = 21", "at most total (20)"]),
        (format!("{HEADER}{row},true\n"), vec!["--fit", "needle.colour"], vec!["--fit", "needle.colour"]),
        (format!("{HEADER}{row},true\n"), vec!["--fit", "sweep.trials"], vec!["--fit", "sweep.trials"]),
        (format!("{HEADER}{row},true\n"), vec!["--fit-range", "4..1"], vec!["--fit-range", "\"4..1\""]),
        (format!("{HEADER}{row},true\n"), vec!["--recall", "both"], vec!["--recall", "\"both\""]),
        (format!("{HEADER}1K,50,512,fp9,15,20,0,true\n"), vec![], vec!["obs.csv:2", "config = \"fp9\""]),
    ] {
        let (o, out) = calibrate(dir.path(), &body, &extra);
        assert_refused(&o, &out, &must);
    }
    // Scenario flags without --observations serve nothing: refused.
    let out = dir.path().join("x.toml");
    let o = bin()
        .args(["calibrate", "--checkpoint", "/nonexistent", "--needle-strength", "2", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_refused(&o, &out, &["--observations"]);
    let o = bin().args(["calibrate", "--out", out.to_str().unwrap()]).output().unwrap();
    assert_refused(&o, &out, &["--checkpoint", "--observations"]);
}

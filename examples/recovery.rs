//! Does `diagnose` find a fault it is shown? (issue 18, item 5(b))
//!
//! For each true hypothesis H of a small set: H's recall is simulated in
//! nine cells (2K, 4K, 8K tokens × depths 10, 50, 90 % × k 512, the
//! engines' fp8 cache) at seed A = 7; observation counts are drawn from it,
//! n prompts per row, R times at seeds derived from B = 1000; each draw is
//! ranked by `diagnose` over six candidates simulated at seed C = 42 (the
//! same cells, other haystacks). The share of draws where H comes strictly
//! first, with its Wilson 95 % interval, as a function of n, is printed and
//! drawn to `plots/diagnose_recovery.png`. Whole-model recall (what a needle
//! test measures), the scenario of docs/FINDINGS.md, 200 trials per cell,
//! with the query tokens tied as before the measured decode overlap
//! (`[stack] token_correlation = 0.998`): under the strength needle a
//! shared fault's latent churns over tokens like the content's
//! (docs/MODEL.md, "A fault's token correlation"), so at the measured
//! 0.7791 every scrambler here keeps the needle at 2K–8K in the whole
//! model, ties with healthy, and the study would measure nothing.
//!
//! `cargo run --release --example recovery [R]` (R = 1000 by default;
//! about 40 s on 2 shared cores, nearly all of it the two simulations).

use dsa_recall::base::stats::{wilson_interval, Z95};
use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::diagnose::{self, observations, Options, Reading};
use dsa_recall::report::chart::knob::{render_knob, KnobChart, KnobPanel, KnobSeries};

/// The candidates `diagnose` ranks; every true hypothesis is one of them.
pub const CANDIDATES: &str = "slot-shift,pages-swapped,hadamard-q-only,scale-unwritten-zero+ties-lowest,scale-unwritten-zero+ties-highest";
const TRUTHS: [&str; 5] = ["healthy", "slot-shift", "pages-swapped", "hadamard-q-only", "scale-unwritten-zero+ties-lowest"];
const PROMPTS: [u64; 6] = [3, 5, 10, 20, 40, 80];
const SEED_TRUTH: u64 = 7;
const SEED_DRAWS: u64 = 1000;
const SEED_DIAGNOSE: u64 = 42;

fn params(seed: u64) -> dsa_recall::ScenarioParams {
    let text = format!(
        "preset = \"deepseek-v4-flash\"\n[needle]\nunit = \"strength\"\nstrength = 1.5\n[physics]\nrope = \"v4\"\npooling = \"on\"\n\
         gate_bias_std = 0.0\nneedle_gate_boost = 2.0\n[sweep]\ntrials = 200\nseed = {seed}\n[estimator]\npredict = false\n\
         [stack]\ntoken_correlation = 0.998\n"
    );
    config::resolve(parse_scenario_toml(&text).expect("the scenario parses")).expect("the scenario resolves")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let replicates: u64 = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let mut csv = String::from("context_tokens,depth_percent,topk,config,found,total\n");
    for c in ["2K", "4K", "8K"] {
        for d in [10, 50, 90] {
            csv.push_str(&format!("{c},{d},512,fp8-fp32scale,0,1\n"));
        }
    }
    let (truth_params, diag_params) = (params(SEED_TRUTH), params(SEED_DIAGNOSE));
    let obs = observations::parse("recovery.csv", &csv, &|v| diagnose::variant_ok(&diag_params, v))?;
    let opts = Options {
        hypotheses: diagnose::candidates(CANDIDATES)?,
        reading: Reading::Model,
        next: false,
        needle_multipliers: vec![1.0],
        observer: &dsa_recall::base::observe::Silent,
    };
    let started = std::time::Instant::now();
    let truth = diagnose::prepare(&truth_params, &obs.path, &obs.rows, &opts)?;
    let diag = diagnose::prepare(&diag_params, &obs.path, &obs.rows, &opts)?.without_gates();
    println!(
        "{} cells, {} candidates, simulated at seeds {SEED_TRUTH} (truth) and {SEED_DIAGNOSE} (diagnosis) in {:.1} s; {replicates} draws per setting",
        obs.rows.len(),
        truth.plan.len(),
        started.elapsed().as_secs_f64()
    );
    println!("{:<36} {}", "true hypothesis", PROMPTS.map(|n| format!("{:>22}", format!("n = {n}"))).join(""));
    let mut series = Vec::new();
    for (i, h) in TRUTHS.iter().enumerate() {
        let mut points = Vec::new();
        let mut line = format!("{h:<36} ");
        for n in PROMPTS {
            let hits = diagnose::recovered(&truth, &diag, &obs.rows, h, n, replicates, SEED_DRAWS + n)?;
            let share = hits as f64 / replicates as f64;
            let (lo, hi) = wilson_interval(hits, replicates, Z95);
            line.push_str(&format!("{:>22}", format!("{share:.3} [{lo:.3}, {hi:.3}]")));
            points.push((n as f64, share, lo, hi));
        }
        println!("{line}");
        series.push(KnobSeries { label: h.to_string(), color: i, points, whole_model: true });
    }
    let chart = KnobChart {
        title: "diagnose recovers the hypothesis that made the counts".into(),
        subtitle: format!(
            "share ranked strictly first among {} candidates, Wilson 95 %; {replicates} draws per point; 9 cells 2K–8K × depth 10/50/90 %, k 512, whole-model recall",
            truth.plan.len()
        ),
        x_label: "prompts per observation row".into(),
        y_label: "share ranked first".into(),
        key: Some("— share of draws (Wilson 95 % band)".into()),
        panels: vec![KnobPanel { title: "truth simulated at seed 7, diagnosed at seed 42".into(), series }],
    };
    std::fs::create_dir_all("plots")?;
    render_knob(&chart, std::path::Path::new("plots/diagnose_recovery.png"), 1600, 1000)?;
    println!("wrote plots/diagnose_recovery.png ({:.1} s in all)", started.elapsed().as_secs_f64());
    Ok(())
}

//! Does `diagnose` name the right *class* of fault? (issue 28, item 7)
//!
//! Every candidate of the catalogue (`--hypotheses all`, the needle
//! averaged over × 0.5 … 128, as `diagnose` runs by default) is in turn the
//! truth: its whole-model recall is simulated in twelve cells (4K and 16K
//! tokens × depths 10, 50, 90 % × k 512 × the fp8 cache and bf16 keys) at
//! seed A = 7 with the scenario's own needle; observation counts are drawn
//! from it, n prompts per row, R times at seeds derived from B = 3000 + n;
//! each draw is ranked by `diagnose` over the whole catalogue simulated at
//! seed C = 42 (other haystacks). A draw counts when the class with the
//! greatest posterior is the truth's, strictly. Beside them, healthy truths
//! whose needle is 2× easier (median exceedance × 0.5), 2× harder (× 2),
//! 10× and 100× rarer than the scenario's, counted when the verdict is
//! "consistent with a healthy indexer". Per truth, what its class's recovery can be: the
//! prompts per row for an expected 20:1 of the nearest candidate of its
//! class against the nearest of any other class (nearest: the least
//! Σ_rows KL from the truth's recalls, over the diagnosis's candidates and
//! needle multiples); a truth that needs more than 20 is not identifiable
//! at n = 20 on these rows, and one whose nearest other-class candidate is
//! nearer than its own class is not identifiable at any n. The scenario is `examples/incidents/findings.toml`
//! (V4-Flash, the niah needle), 200 trials per cell. Prints a table per
//! truth and per class and draws `plots/diagnose_recovery_classes.png`.
//!
//! Also draws `plots/diagnose_identifiability.png`: each truth's share at
//! n = 20 against the prompts per row it needs.
//!
//! Then the verdicts beyond the catalogue's faults ([`outcomes`]): truths of
//! selection-independent loss should read "not-selection", a deterministic
//! valley in length "outside"; the share of draws of each verdict kind.
//!
//! `cargo run --release --example recovery_classes [R] [outcomes]` (R = 200
//! by default; a few minutes on 2 free cores, nearly all of it the
//! simulations; `outcomes` runs only the verdicts beyond the catalogue's faults).

use dsa_recall::base::stats::{wilson_interval, Z95};
use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::diagnose::separation::kl_per_prompt;
use dsa_recall::diagnose::{self, observations, Options, Prepared, Reading, HEALTHY};
use dsa_recall::report::chart::knob::{render_knob, KnobChart, KnobPanel, KnobSeries};
use dsa_recall::score::hypothesis::{candidate_class, FaultClass};
use std::collections::BTreeMap;

const PROMPTS: [u64; 3] = [5, 20, 80];
const SEED_TRUTH: u64 = 7;
const SEED_DRAWS: u64 = 3000;
const SEED_DIAGNOSE: u64 = 42;
/// Where a truth that never separates is drawn on the identifiability chart.
const NEVER_DRAWN_AT: f64 = 10_000.0;

fn params(seed: u64) -> dsa_recall::ScenarioParams {
    let toml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/incidents/findings.toml"))
        .expect("examples/incidents/findings.toml");
    let mut p = config::resolve(parse_scenario_toml(&toml).expect("the scenario parses")).expect("the scenario resolves");
    p.sweep.seed = Some(seed);
    p.sweep.trials = Some(200);
    p.estimator.predict = Some(false);
    p
}

/// The class with the greatest posterior, if it is alone there.
fn first_class(d: &Prepared, rows: &[observations::Observation]) -> Option<FaultClass> {
    let (ranking, _) = d.rank(rows).ok()?;
    let mut classes = diagnose::class_standings(&ranking);
    classes.sort_by(|a, b| b.posterior.total_cmp(&a.posterior));
    let alone = classes.get(1).is_none_or(|second| second.posterior < classes[0].posterior);
    alone.then(|| classes[0].class)
}

/// What diagnose's verdict says of a draw whose truth is of class `truth`:
/// 0 the truth's class (a fault verdict naming it, or healthy for a healthy
/// truth), 1 inconclusive, 2 consistent with healthy (for a fault), 3 a
/// fault of another class.
fn verdict_outcome(d: &Prepared, rows: &[observations::Observation], truth: FaultClass) -> usize {
    let Ok((ranking, _)) = d.rank(rows) else { return 1 };
    let classes = diagnose::class_standings(&ranking);
    let v = diagnose::verdict(&ranking, &classes);
    match v.kind.as_str() {
        "healthy" if truth == FaultClass::Healthy => 0,
        "healthy" => 2,
        "fault" if classes.first().is_some_and(|c| c.class == truth) => 0,
        "fault" => 3,
        _ => 1,
    }
}

/// Of `replicates` draws of `prompts` per row from `recalls`, how many
/// `judge` accepts.
fn share(
    rows: &[observations::Observation],
    recalls: &[f64],
    prompts: u64,
    replicates: u64,
    judge: impl Fn(&[observations::Observation]) -> bool,
) -> u64 {
    let mut drawn = rows.to_vec();
    (0..replicates)
        .filter(|&j| {
            let counts = diagnose::draw_counts(recalls, prompts, dsa_recall::base::rng::derive(SEED_DRAWS + prompts, &[j]));
            for (r, found) in drawn.iter_mut().zip(counts) {
                r.found = found;
                r.total = prompts;
            }
            judge(&drawn)
        })
        .count() as u64
}

/// One truth's draws whose class came first, at each n of [`PROMPTS`], and
/// the prompts per row it needs ([`prompts_to_identify`]; None: never).
struct Truth {
    hits: [u64; 3],
    need: Option<u64>,
}

/// Prompts per row for an expected 20:1 of the truth's class over every
/// other (its nearest candidate against the nearest other-class one, by
/// Σ_rows KL from `truth`'s recalls over `d`'s candidates and multiples),
/// with the nearest other-class candidate; None when that one is nearer.
fn prompts_to_identify(
    d: &Prepared,
    rows: &[observations::Observation],
    truth: &[f64],
    class: FaultClass,
) -> Result<(Option<u64>, String), dsa_recall::Error> {
    let (mut own, mut other, mut nearest) = (f64::INFINITY, f64::INFINITY, String::new());
    for (g, _) in &d.plan {
        for j in 0..d.needle_multipliers.len() {
            let mut recalls = Vec::with_capacity(rows.len());
            let mut trials = 0;
            for r in rows {
                let (p, n) = d.recall_at(g, r, j)?;
                recalls.push(p);
                trials = n;
            }
            let kl = kl_per_prompt(truth, &recalls, trials);
            if candidate_class(g) == class {
                own = own.min(kl);
            } else if kl < other {
                (other, nearest) = (kl, g.clone());
            }
        }
    }
    let gap = other - own;
    Ok(((gap > 0.0).then(|| (20f64.ln() / gap).ceil() as u64), nearest))
}

/// Verdicts beyond the catalogue's faults: truths of selection-independent
/// loss (the healthy truth's recalls × (1 − loss): 10 % at every row, and
/// a loss rising linearly with length, 7.5 % at 4K to 30 % at 16K) should
/// read "not-selection"; a deterministic valley in length (every prompt
/// found at 4K and 16K, none at 8K: no catalogue entry) "outside". Prints
/// the share of draws of each verdict kind.
fn outcomes(
    diag: &Prepared,
    rows: &[observations::Observation],
    healthy: &[f64],
    replicates: u64,
    opts: &dyn Fn(Vec<String>, Vec<f64>) -> Options<'static>,
) -> Result<(), Box<dyn std::error::Error>> {
    const KINDS: [&str; 5] = ["not-selection", "outside", "healthy", "fault", "inconclusive"];
    let header = PROMPTS.iter().map(|n| format!("{:>44}", format!("n = {n}: {}", KINDS.map(|k| &k[..4]).join(" ")))).collect::<String>();
    println!("\nverdicts beyond the catalogue's faults: share of draws of each verdict kind ({})", KINDS.join(", "));
    println!("{:<40}{header}", "truth");
    let judge = |name: &str, d: &Prepared, rows: &[observations::Observation], recalls: &[f64]| {
        let mut line = format!("{name:<40}");
        for &n in &PROMPTS {
            let shares: Vec<String> = KINDS
                .iter()
                .map(|k| share(rows, recalls, n, replicates, |drawn| d.verdict(drawn).is_ok_and(|v| v.kind == *k)))
                .map(|hits| format!("{:.2}", hits as f64 / replicates as f64))
                .collect();
            line.push_str(&format!("{:>44}", shares.join(" ")));
        }
        println!("{line}");
    };
    let constant: Vec<f64> = healthy.iter().map(|p| p * 0.9).collect();
    judge("loss 10 %, every row", diag, rows, &constant);
    let rising: Vec<f64> = rows.iter().zip(healthy).map(|(r, p)| p * (1.0 - 0.3 * r.context_tokens as f64 / 16384.0)).collect();
    judge("loss rising with length (7.5 % to 30 %)", diag, rows, &rising);
    // The valley needs three contexts: its own rows and simulation.
    let mut csv = String::from("context_tokens,depth_percent,topk,config,found,total\n");
    for c in ["4K", "8K", "16K"] {
        csv.push_str(&format!("{c},50,512,fp8-fp32scale,0,1\n"));
    }
    let diag_params = params(SEED_DIAGNOSE);
    let valley_obs = observations::parse("valley.csv", &csv, &|v| diagnose::variant_ok(&diag_params, v))?;
    let valley_diag = diagnose::prepare(
        &diag_params,
        &valley_obs.path,
        &valley_obs.rows,
        &opts(diagnose::candidates(WITH_LOSSES)?, diagnose::default_needle_multipliers(&diag_params)),
    )?;
    judge("valley in length (1, 0, 1 at 4K, 8K, 16K)", &valley_diag, &valley_obs.rows, &[1.0, 0.0, 1.0]);
    Ok(())
}

/// The catalogue with the losses after the selection, which `all` leaves out.
const WITH_LOSSES: &str = "all,loss,loss-by-length";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let replicates: u64 = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(200);
    // `outcomes`: only the verdicts beyond the catalogue's faults.
    let only_outcomes = std::env::args().nth(2).is_some_and(|a| a == "outcomes");
    let mut csv = String::from("context_tokens,depth_percent,topk,config,found,total\n");
    for c in ["4K", "16K"] {
        for d in [10, 50, 90] {
            for config in ["fp8-fp32scale", "bf16"] {
                csv.push_str(&format!("{c},{d},512,{config},0,1\n"));
            }
        }
    }
    let (truth_params, diag_params) = (params(SEED_TRUTH), params(SEED_DIAGNOSE));
    let obs = observations::parse("recovery_classes.csv", &csv, &|v| diagnose::variant_ok(&diag_params, v))?;
    let silent: &'static dsa_recall::base::observe::Silent = &dsa_recall::base::observe::Silent;
    let opts = |hypotheses: Vec<String>, multipliers: Vec<f64>| Options {
        hypotheses,
        reading: Reading::Model,
        next: false,
        needle_multipliers: multipliers,
        observer: silent,
    };
    let all = diagnose::candidates(WITH_LOSSES)?;
    let started = std::time::Instant::now();
    let diag =
        diagnose::prepare(&diag_params, &obs.path, &obs.rows, &opts(all.clone(), diagnose::default_needle_multipliers(&diag_params)))?;
    let truth = diagnose::prepare(&truth_params, &obs.path, &obs.rows, &opts(all.clone(), vec![1.0]))?;
    println!(
        "{} rows, {} candidates ({} change no row), simulated at seeds {SEED_TRUTH} (truth) and {SEED_DIAGNOSE} (diagnosis) in {:.1} s; {replicates} draws per point",
        obs.rows.len(),
        diag.plan.len(),
        diag.not_applicable.len(),
        started.elapsed().as_secs_f64()
    );
    let recalls_of =
        |h: &str| -> Result<Vec<f64>, dsa_recall::Error> { obs.rows.iter().map(|r| truth.recall(h, r).map(|(p, _)| p)).collect() };
    let healthy_recalls = recalls_of(HEALTHY)?;
    outcomes(&diag, &obs.rows, &healthy_recalls, replicates, &opts)?;
    if only_outcomes {
        return Ok(());
    }
    let header = PROMPTS.map(|n| format!("{:>22}", format!("n = {n}"))).join("");
    println!("\nshare of draws whose true class has the greatest posterior, strictly (Wilson 95 %); the last column, the");
    println!("share whose verdict is \"consistent with a healthy indexer\" at n = 20; \"= healthy\": the truth's simulated");
    println!("recall is healthy's in every row (the same trials), so no count can tell them apart here; \"n 20:1\": prompts");
    println!("per row for an expected 20:1 of the truth's class over the nearest other-class candidate (named; \"never\": that");
    println!("candidate lies nearer the truth than any of its own class)");
    println!("{:<36} {:<13}{header}{:>10}{:>8}  nearest other class", "true hypothesis", "class", "healthy", "n 20:1");
    let mut by_class: BTreeMap<&'static str, (FaultClass, Vec<Truth>)> = BTreeMap::new();
    let mut unidentifiable: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (h, _) in &diag.plan {
        let class = candidate_class(h);
        let recalls = recalls_of(h)?;
        let as_healthy = recalls == healthy_recalls;
        let reads_healthy = share(&obs.rows, &recalls, 20, replicates, |rows| diag.verdict(rows).is_ok_and(|v| v.kind == "healthy"));
        if class != FaultClass::Healthy && as_healthy {
            *unidentifiable.entry(class.name()).or_default() += 1;
            println!("{h:<36} {:<13}{:>66}{:>10.3}", class.name(), "= healthy", reads_healthy as f64 / replicates as f64);
            continue;
        }
        let mut hits = [0u64; 3];
        let mut line = format!("{h:<36} {:<13}", class.name());
        for (i, &n) in PROMPTS.iter().enumerate() {
            hits[i] = if class == FaultClass::Healthy {
                // Healthy shares its recall with every benign candidate: its
                // criterion is the verdict (issue 28).
                share(&obs.rows, &recalls, n, replicates, |rows| diag.verdict(rows).is_ok_and(|v| v.kind == "healthy"))
            } else {
                share(&obs.rows, &recalls, n, replicates, |rows| first_class(&diag, rows) == Some(class))
            };
            let (lo, hi) = wilson_interval(hits[i], replicates, Z95);
            line.push_str(&format!("{:>22}", format!("{:.3} [{lo:.3}, {hi:.3}]", hits[i] as f64 / replicates as f64)));
        }
        let (need, nearest) = if class == FaultClass::Healthy {
            (Some(0), String::from("(the verdict)"))
        } else {
            prompts_to_identify(&diag, &obs.rows, &recalls, class)?
        };
        let need_text = need.map_or_else(|| "never".to_string(), |n| n.to_string());
        println!("{line}{:>10.3}{need_text:>8}  {nearest}", reads_healthy as f64 / replicates as f64);
        by_class.entry(class.name()).or_insert((class, Vec::new())).1.push(Truth { hits, need });
    }
    println!("\nby class: the mean share over its truths that change recall here (each weighs the same; healthy: the verdict)");
    let mut series = Vec::new();
    for (i, (name, (_, truths))) in by_class.iter().enumerate() {
        let left_out = unidentifiable.get(name).copied().unwrap_or(0);
        let mut line = format!("{name:<13} {:>2} truths ({left_out:>2} = healthy)  ", truths.len());
        let mut points = Vec::new();
        for (j, &n) in PROMPTS.iter().enumerate() {
            let total = truths.len() as u64 * replicates;
            let hits: u64 = truths.iter().map(|t| t.hits[j]).sum();
            let (lo, hi) = wilson_interval(hits, total, Z95);
            let mean = hits as f64 / total as f64;
            line.push_str(&format!("{:>22}", format!("{mean:.3} [{lo:.3}, {hi:.3}]")));
            points.push((n as f64, mean, lo, hi));
        }
        println!("{line}");
        series.push(KnobSeries { label: format!("{name} ({} truths)", truths.len()), color: i, points, whole_model: true });
    }
    println!("\nby class, the truths identifiable at n = 20 on these rows (n 20:1 ≤ 20) and their share at n = 20");
    for (name, (_, truths)) in by_class.iter().filter(|(_, (c, _))| *c != FaultClass::Healthy) {
        let able: Vec<u64> = truths.iter().filter(|t| t.need.is_some_and(|n| n <= 20)).map(|t| t.hits[1]).collect();
        let never = truths.iter().filter(|t| t.need.is_none()).count();
        let total = able.len() as u64 * replicates;
        let hits: u64 = able.iter().sum();
        let (lo, hi) = wilson_interval(hits, total.max(1), Z95);
        println!(
            "{name:<13} {:>2} of {:>2} identifiable at n = 20 ({never} never){:>24}",
            able.len(),
            truths.len(),
            if able.is_empty() { "-".to_string() } else { format!("{:.3} [{lo:.3}, {hi:.3}]", hits as f64 / total as f64) }
        );
    }
    for (name, n) in unidentifiable.iter().filter(|(name, _)| !by_class.contains_key(*name)) {
        println!("{name:<13}  0 truths ({n:>2} = healthy)  not identifiable from needle counts in these rows");
    }
    println!("\nwhat the verdict says at n = 20, by class (truths that change recall here): shares of draws");
    println!("{:<13} {:>10} {:>13} {:>10} {:>12}", "class", "its class", "inconclusive", "healthy", "other class");
    for (name, (class, _)) in &by_class {
        let mut counts = [0u64; 4];
        let mut total = 0u64;
        for (h, _) in diag.plan.iter().filter(|(h, _)| candidate_class(h) == *class) {
            let recalls = recalls_of(h)?;
            if *class != FaultClass::Healthy && recalls == healthy_recalls {
                continue;
            }
            for (i, c) in counts.iter_mut().enumerate() {
                *c += share(&obs.rows, &recalls, 20, replicates, |rows| verdict_outcome(&diag, rows, *class) == i);
            }
            total += replicates;
        }
        let f = |c: u64| c as f64 / total.max(1) as f64;
        println!("{name:<13} {:>10.3} {:>13.3} {:>10.3} {:>12.3}", f(counts[0]), f(counts[1]), f(counts[2]), f(counts[3]));
    }
    println!("\nhealthy truths with another needle: share of draws whose verdict is \"consistent with a healthy indexer\"");
    let mut healthy_series = Vec::new();
    for (i, (label, multiple)) in [
        ("2x easier (exceedance x 0.5)", 0.5),
        ("as assumed", 1.0),
        ("2x harder (exceedance x 2)", 2.0),
        ("10x rarer (exceedance x 10)", 10.0),
        ("100x rarer (exceedance x 100)", 100.0),
    ]
    .iter()
    .enumerate()
    {
        let p = diagnose::with_needle_multiple(&truth_params, *multiple)?;
        let sim = diagnose::prepare(&p, &obs.path, &obs.rows, &opts(vec![HEALTHY.to_string()], vec![1.0]))?;
        let recalls: Vec<f64> = obs.rows.iter().map(|r| sim.recall(HEALTHY, r).map(|(p, _)| p)).collect::<Result<_, _>>()?;
        let mut line = format!("{label:<36} {:<13}", "");
        let mut points = Vec::new();
        for &n in &PROMPTS {
            let hits = share(&obs.rows, &recalls, n, replicates, |rows| diag.verdict(rows).is_ok_and(|v| v.kind == "healthy"));
            let (lo, hi) = wilson_interval(hits, replicates, Z95);
            let mean = hits as f64 / replicates as f64;
            line.push_str(&format!("{:>22}", format!("{mean:.3} [{lo:.3}, {hi:.3}]")));
            points.push((n as f64, mean, lo, hi));
        }
        println!(
            "{line}   (recalls {:.3}–{:.3})",
            recalls.iter().copied().fold(1.0, f64::min),
            recalls.iter().copied().fold(0.0, f64::max)
        );
        healthy_series.push(KnobSeries { label: format!("healthy, needle {label}"), color: i, points, whole_model: true });
    }
    let chart = KnobChart {
        title: "diagnose names the class of the fault that made the counts".into(),
        subtitle: format!(
            "{replicates} draws per point, Wilson 95 %; 12 rows: 4K, 16K × depth 10/50/90 % × k 512 × fp8 cache, bf16; {} candidates, likelihoods averaged over the needle; truth at seed 7, diagnosis at seed 42",
            diag.plan.len()
        ),
        x_label: "prompts per observation row".into(),
        y_label: "share of draws".into(),
        key: Some("— share of draws (Wilson 95 % band)".into()),
        panels: vec![
            KnobPanel { title: "true class first (healthy: verdict healthy), mean over truths that change recall".into(), series },
            KnobPanel { title: "a healthy truth reads as healthy".into(), series: healthy_series },
        ],
    };
    std::fs::create_dir_all("plots")?;
    render_knob(&chart, std::path::Path::new("plots/diagnose_recovery_classes.png"), 1600, 1000)?;
    // Each truth's share at n = 20 against the prompts it needs, per class
    // (the colours of the chart above).
    let mut needed = Vec::new();
    for (i, (name, (_, truths))) in by_class.iter().enumerate().filter(|(_, (_, (c, _)))| *c != FaultClass::Healthy) {
        let mut points: Vec<(f64, f64, f64, f64)> = truths
            .iter()
            .map(|t| {
                let (lo, hi) = wilson_interval(t.hits[1], replicates, Z95);
                (t.need.map_or(NEVER_DRAWN_AT, |n| n.max(1) as f64), t.hits[1] as f64 / replicates as f64, lo, hi)
            })
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        needed.push(KnobSeries { label: format!("{name} ({} truths)", truths.len()), color: i, points, whole_model: true });
    }
    let identifiability = KnobChart {
        title: "a truth's class is named when few prompts separate it".into(),
        subtitle: format!(
            "each point one true hypothesis, the rows and simulations of diagnose_recovery_classes.png; {replicates} draws at n = 20, Wilson 95 %; \"never\" drawn at {NEVER_DRAWN_AT}"
        ),
        x_label: "prompts per row for an expected 20:1 of its class over the nearest other-class candidate".into(),
        y_label: "share of draws, its class first at n = 20".into(),
        key: Some("— one class's truths, by the prompts they need (Wilson 95 % band)".into()),
        panels: vec![KnobPanel { title: "computed from the simulations before any draw".into(), series: needed }],
    };
    render_knob(&identifiability, std::path::Path::new("plots/diagnose_identifiability.png"), 1200, 800)?;
    println!(
        "\nwrote plots/diagnose_recovery_classes.png, plots/diagnose_identifiability.png ({:.1} s in all)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

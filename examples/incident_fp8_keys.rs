//! The incident this project was born from (docs/FINDINGS.md, "1"): V4-Flash,
//! index_topk 512, fp8 indexer keys. Reported: the needle is found within
//! ~2K tokens and lost beyond ~4K; index_topk 1024 moves the reliable range
//! from ~2.5K to ~5K; 10K+ still fails; bf16 keys fix it.
//!
//! Runs bf16, the engines' fp8 cache (`fp8-fp32scale`) and fp8 with each
//! candidate hypothesis over contexts 1K … 16K, three needle depths and
//! k = 512 and 1024, checks every reported symptom per hypothesis against
//! three readings of each cell, side by side: per-layer selection recall,
//! whole-model recall with the catalogue's fault spread (every hypothesis
//! here acts the same in every layer: "shared") and whole-model recall with
//! `[stack] fault_layers = "independent"` (docs/MODEL.md, "Whole-model
//! recall"). One sweep per spread; the per-layer numbers do not depend on
//! the spread, and the program checks that they agree cell for cell. Writes
//! the charts (of the shared sweep) to `plots/incident_fp8_keys/`.
//!
//! `cargo run --release --example incident_fp8_keys` (370 s on 2 otherwise idle cores, 2026-12-06)
//!
//! The needle is the preset's (the `niah` profile). An optional argument
//! replaces it with a fixed-strength needle (the strength unit), e.g.
//! `cargo run --release --example incident_fp8_keys -- 1.5`, to check how
//! the verdicts depend on it; its charts then go to
//! `target/incident_fp8_keys_strength_S/` and `plots/` is left alone.

use dsa_recall::report::{render_charts, PlotOptions, ReportMeta};
use dsa_recall::run::cell::CellResult;
use std::path::Path;

#[path = "common/incident.rs"]
mod incident;
use incident::{Reading, READINGS};

const HYPOTHESES: &[&str] = &[
    "",
    "+stale-scale",
    "+scale-offset",
    "+scale-per-page",
    "+no-hadamard",
    "+hadamard-q-only",
    "+slot-shift",
    "+pages-swapped",
    "+e4m3fnuz-read",
    "+scale-unwritten-zero",
    "+scale-unwritten-zero+ties-lowest",
    "+scale-unwritten-zero+ties-highest",
    "+scale-unwritten-nan+ties-lowest",
];

/// The two sweeps, identical but for `[stack] fault_layers`.
struct Runs {
    shared: Vec<CellResult>,
    independent: Vec<CellResult>,
}

impl Runs {
    fn recall(&self, r: Reading, p: &str, k: u64, depth: f64, context: u64) -> f64 {
        let cells = if r == Reading::Independent { &self.independent } else { &self.shared };
        cells.iter().find(|c| c.precision == p && c.topk == k && c.depth_percent == depth && c.context_tokens == context).map_or(
            f64::NAN,
            |c| match r {
                Reading::Layer => c.recall,
                _ => c.model_recall.unwrap_or(f64::NAN),
            },
        )
    }

    /// Longest context with recall ≥ 0.9 at it and every shorter context.
    fn reliable(&self, r: Reading, contexts: &[u64], p: &str, k: u64, depth: f64) -> u64 {
        contexts.iter().take_while(|&&c| self.recall(r, p, k, depth, c) >= 0.9).last().copied().unwrap_or(0)
    }
}

fn scenario_toml(strength: Option<f64>, precisions: &[String], spread: &str) -> String {
    let needle = strength.map_or_else(String::new, |s| format!("[needle]\nunit = \"strength\"\nstrength = {s:?}\n"));
    format!(
        r#"
preset = "deepseek-v4-flash"
{needle}[physics]
rope = "v4"
pooling = "on"
gate_bias_std = 0.0
needle_gate_boost = 2.0
[stack]
fault_layers = "{spread}"
[sweep]
contexts = "1024,2048,2560,3072,4096,5120,6144,8192,10240,12288,16384"
depths = "10,50,80"
topk = "512,1024"
precisions = "{}"
trials = 200
"#,
        precisions.join(",")
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let precisions: Vec<String> =
        std::iter::once("bf16".to_string()).chain(HYPOTHESES.iter().map(|h| format!("fp8-fp32scale{h}"))).collect();
    let strength: Option<f64> = match std::env::args().nth(1) {
        Some(a) => Some(a.parse().map_err(|_| format!("needle strength, a number: {a}"))?),
        None => None,
    };
    // The catalogue's spread: every hypothesis of this program is "shared".
    let (s, outcome, independent) = incident::sweep_both_spreads(&precisions.iter().map(String::as_str).collect::<Vec<_>>(), |spread| {
        scenario_toml(strength, &precisions, spread)
    })?;
    let runs = Runs { shared: outcome.cells, independent };
    let cells = &runs.shared;
    let dir_name = match strength {
        Some(s) => format!("target/incident_fp8_keys_strength_{s}"),
        None => "plots/incident_fp8_keys".to_string(),
    };
    let dir = Path::new(&dir_name);
    std::fs::create_dir_all(dir)?;
    let meta = ReportMeta::from_scenario(&s, &outcome.effective);
    render_charts(dir, &meta, cells, &PlotOptions::default())?;
    std::fs::write(dir.join("summary.csv"), dsa_recall::run::output::summary_csv(cells))?;
    std::fs::write(dir.join("summary_independent.csv"), dsa_recall::run::output::summary_csv(&runs.independent))?;

    // The symptoms, at each depth (the report gives none), with thresholds of
    // our choosing: reliable (recall ≥ 0.9) up to 2K and lost (≤ 0.5) from 4K
    // at k = 512; k = 1024 reliable to 4K … 6K; both k lost (≤ 0.5) from 10K;
    // bf16 keeps ≥ 0.8 at 10K (k = 1024) at that depth. Each is read on each
    // of the three recalls.
    let ctx = &s.contexts;
    println!("needle: {}", meta.needle);
    for r in READINGS {
        for &d in &s.depths {
            println!(
                "bf16, {:<18} depth {d:>2} %: recall at 10K {:.2} (k 512) and {:.2} (k 1024); reliable to {} (k 512), {} (k 1024)",
                r.label(),
                runs.recall(r, "bf16", 512, d, 10240),
                runs.recall(r, "bf16", 1024, d, 10240),
                runs.reliable(r, ctx, "bf16", 512, d),
                runs.reliable(r, ctx, "bf16", 1024, d)
            );
        }
    }
    println!();
    println!("symptoms: a = reliable to 2K (k 512), b = lost from 4K (k 512), c = k 1024 reliable to 4K…6K,");
    println!(
        "          d = lost from 10K (both k), e = bf16 keeps ≥ 0.8 at 10K (k 1024); Y holds, . fails; then reliable to (k 512 / 1024)"
    );
    print!("{:<50} {:>5}", "variant", "depth");
    for r in READINGS {
        print!(" | {:<27}", r.label());
    }
    println!();
    for p in &precisions[1..] {
        for &d in &s.depths {
            print!("{p:<50} {d:>5}");
            for r in READINGS {
                let at = |k: u64, c: u64| runs.recall(r, p, k, d, c);
                let ok_2k = ctx.iter().filter(|&&c| c <= 2048).all(|&c| at(512, c) >= 0.9);
                let lost_4k = ctx.iter().filter(|&&c| c >= 4096).all(|&c| at(512, c) <= 0.5);
                let r1024 = runs.reliable(r, ctx, p, 1024, d);
                let moved = (4096..=6144).contains(&r1024);
                let lost_10k = ctx.iter().filter(|&&c| c >= 10240).all(|&c| at(512, c) <= 0.5 && at(1024, c) <= 0.5);
                // "bf16 fixes it": the same depth under bf16 keeps ≥ 0.8 at 10K with k 1024.
                let bf16_holds = runs.recall(r, "bf16", 1024, d, 10240) >= 0.8;
                let all = ok_2k && lost_4k && moved && lost_10k && bf16_holds;
                let marks: String = [ok_2k, lost_4k, moved, lost_10k, bf16_holds].iter().map(|&b| if b { 'Y' } else { '.' }).collect();
                print!(" | {marks} {:<3} {:>6} / {:>6}   ", if all { "ALL" } else { "" }, runs.reliable(r, ctx, p, 512, d), r1024);
            }
            println!();
        }
    }

    // The cheapest measurement (docs/FINDINGS.md, 1): a depth sweep at one
    // context past the coverage limit, and how many of the indexed layers
    // select the needle there (what a per-layer top-k capture shows).
    let at = 8192;
    println!();
    println!(
        "at {at} tokens, k 512: recall per depth (per-layer / model shared / model independent) and indexed layers reaching the needle"
    );
    println!(
        "(L: mean (5 %, median, 95 %), shared / independent; of {} indexed layers)",
        cells.iter().find_map(|c| c.indexed_layers).unwrap_or(0)
    );
    for p in &precisions {
        print!("{p:<50}");
        for &d in &s.depths {
            let find = |v: &[CellResult]| {
                v.iter().find(|c| c.precision == *p && c.topk == 512 && c.depth_percent == d && c.context_tokens == at).cloned()
            };
            let (a, b) = (find(&runs.shared), find(&runs.independent));
            // Mean and 5 / 50 / 95 % quantiles of the layers reached.
            let layers = |c: &Option<CellResult>| {
                let q = c.as_ref().and_then(|c| c.layers_reached_quantiles).unwrap_or([f64::NAN; 5]);
                let mean = c.as_ref().and_then(|c| c.layers_reached).unwrap_or(f64::NAN);
                format!("{mean:>4.1} ({:.0},{:.0},{:.0})", q[0], q[2], q[4])
            };
            print!(
                "  {d:>2} %: {:.2}/{:.2}/{:.2} L {:<15}/ {:<15}",
                runs.recall(Reading::Layer, p, 512, d, at),
                runs.recall(Reading::Shared, p, 512, d, at),
                runs.recall(Reading::Independent, p, 512, d, at),
                layers(&a),
                layers(&b)
            );
        }
        println!();
    }
    println!("wrote {}", dir.display());
    Ok(())
}

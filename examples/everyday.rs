//! Regenerates the charts of README's "Everyday questions": each recipe is
//! the `dsa-recall sweep` command the README shows, run through the same
//! library calls, into `target/everyday/<name>/`; the chart that answers
//! the question is copied to `plots/everyday_<name>.png` and the table
//! printed.
//!
//! `cargo run --release --example everyday` (or `-- NAME…` for some recipes)

use dsa_recall::config::vary::VaryAxis;
use dsa_recall::config::{self, ListSpec, ScenarioParams};
use dsa_recall::report::{self, PlotOptions};
use dsa_recall::run::output::{format_table, prepare_output_dir};
use dsa_recall::run::sweep::run_sweep;
use dsa_recall::run::vary::{self, VaryOutcome};
use std::path::{Path, PathBuf};

/// One README recipe: its sweep flags, and the chart that answers it.
struct Recipe {
    name: &'static str,
    contexts: &'static str,
    depths: Option<&'static str>,
    topk: Option<&'static str>,
    precisions: Option<&'static str>,
    /// `--needle-profile`, when not the preset's.
    profile: Option<&'static str>,
    /// `--vary FIELD=LIST`.
    vary: Option<(&'static str, &'static str)>,
    chart: &'static str,
}

const RECIPES: &[Recipe] = &[
    // dsa-recall sweep --contexts 32K --precisions all --out compare
    Recipe {
        name: "compare",
        contexts: "32K",
        depths: None,
        topk: None,
        precisions: Some("all"),
        profile: None,
        vary: None,
        chart: "compare.png",
    },
    // dsa-recall sweep --contexts 8K..512K --topk 512,1024,2048 --precisions bf16 --needle-profile hard --out topk
    Recipe {
        name: "topk",
        contexts: "8K..512K",
        depths: None,
        topk: Some("512,1024,2048"),
        precisions: Some("bf16"),
        profile: Some("hard"),
        vary: None,
        chart: "recall_vs_context.png",
    },
    // dsa-recall sweep --contexts 16K,64K,256K --depths 0..100:10 --precisions bf16 --needle-profile hard --out depth
    Recipe {
        name: "depth",
        contexts: "16K,64K,256K",
        depths: Some("0..100:10"),
        topk: None,
        precisions: Some("bf16"),
        profile: Some("hard"),
        vary: None,
        chart: "recall_vs_depth.png",
    },
    // dsa-recall sweep --contexts 8K..256K --vary needle.exceedance=0.0003,0.001,0.003,0.01 --out exceedance
    Recipe {
        name: "exceedance",
        contexts: "8K..256K",
        depths: None,
        topk: None,
        precisions: None,
        profile: None,
        vary: Some(("needle.exceedance", "0.0003,0.001,0.003,0.01")),
        chart: "recall_vs_needle_exceedance.png",
    },
    // dsa-recall sweep --contexts 4K..64K --depths 0..100:25 --precisions bf16,fp8,fp4 --out diff
    Recipe {
        name: "diff",
        contexts: "4K..64K",
        depths: Some("0..100:25"),
        topk: None,
        precisions: Some("bf16,fp8,fp4"),
        profile: None,
        vary: None,
        chart: "heatmap_diff.png",
    },
];

fn text(t: &str) -> Option<ListSpec> {
    Some(ListSpec::Text(t.to_string()))
}

fn params(r: &Recipe) -> ScenarioParams {
    let mut p = ScenarioParams::default();
    p.sweep.contexts = text(r.contexts);
    p.sweep.depths = r.depths.and_then(text);
    p.sweep.topk = r.topk.and_then(text);
    p.sweep.precisions = r.precisions.and_then(text);
    p.needle.profile = r.profile.map(str::to_string);
    p
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all("plots")?;
    let plot = PlotOptions::default();
    let only: Vec<String> = std::env::args().skip(1).collect();
    for r in RECIPES.iter().filter(|r| only.is_empty() || only.iter().any(|o| o == r.name)) {
        let dir = PathBuf::from("target/everyday").join(r.name);
        prepare_output_dir(&dir, true)?;
        let p = params(r);
        match r.vary {
            Some((field, list)) => {
                let axis = VaryAxis::new(field, list)?;
                let mut sweeps = Vec::new();
                for s in axis.scenarios(&p)? {
                    let outcome = run_sweep(&s, &|| {})?;
                    sweeps.push((s, outcome));
                }
                let outcome = VaryOutcome { axis, sweeps };
                report::vary::write_vary(&dir, &outcome, &plot)?;
                print!("{}", vary::format_table(&outcome));
            }
            None => {
                let s = config::check(config::resolve(p)?)?;
                let outcome = run_sweep(&s, &|| {})?;
                report::write_sweep(&dir, &s, &outcome, &plot)?;
                print!("{}", format_table(&s, &outcome));
            }
        }
        let to = Path::new("plots").join(format!("everyday_{}.png", r.name));
        std::fs::copy(dir.join(r.chart), &to)?;
        println!("wrote {}\n", to.display());
    }
    Ok(())
}

//! Regenerates `plots/v4_flash_fidelity.png`: how much of the exact (fp32)
//! top-k set each quantized indexer keeps (recall@k and Jaccard overlap) on
//! DeepSeek-V4-Flash, k 512 and 1024, contexts 1K … 32K, against the 0.99
//! pass rule; also `plots/v4_flash_rank_margin.png`, the needle's rank and
//! margin at 32K.
//!
//! `cargo run --release --example v4_flash_fidelity` (about half a minute on 2 cores)

use dsa_recall::config::{self, ListSpec, ScenarioParams};
use dsa_recall::report::chart::{render_fidelity, render_rank_margin};
use dsa_recall::report::{fidelity_chart, rank_margin_chart, ReportMeta};
use dsa_recall::run::sweep::run_sweep;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut p = ScenarioParams::default();
    p.sweep.contexts = Some(ListSpec::Text("1K..32K".into()));
    p.sweep.precisions = Some(ListSpec::Text("fp32,bf16,fp8,fp4,mxfp4,nvfp4".into()));
    p.sweep.trials = Some(100);
    let s = config::check(config::resolve(p)?)?;
    let outcome = run_sweep(&s, &|| {})?;
    let meta = ReportMeta::from_scenario(&s, &outcome.effective);
    std::fs::create_dir_all("plots")?;

    let chart = fidelity_chart(&meta, &outcome.cells).ok_or("no fidelity reference in the sweep")?;
    let path = Path::new("plots/v4_flash_fidelity.png");
    render_fidelity(&chart, path, 1600, 1000)?;
    println!("wrote {}", path.display());

    let rm = rank_margin_chart(&meta, &outcome.cells, 32 * 1024);
    let path = Path::new("plots/v4_flash_rank_margin.png");
    render_rank_margin(&rm, path, 1600, 1100)?;
    println!("wrote {}", path.display());
    Ok(())
}

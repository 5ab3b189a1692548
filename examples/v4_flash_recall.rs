//! Regenerates `plots/v4_flash_recall_vs_context.png`, the chart the README
//! shows: the default preset (DeepSeek-V4-Flash, k 512 and 1024, bf16 vs the
//! fp4 reference indexer) over 1K … 128K tokens; whole-model recall over the
//! preset's stack as solid lines, per-layer selection recall as thin dashed
//! lines, and its prediction from the score distributions (`--predict on`)
//! dotted.
//!
//! `cargo run --release --example v4_flash_recall`

use dsa_recall::config::{self, ScenarioParams};
use dsa_recall::report::render_recall_chart;
use dsa_recall::run::sweep::run_sweep;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut s = config::check(config::resolve(ScenarioParams::default())?)?;
    s.estimator.predict = true;
    let outcome = run_sweep(&s, &|| {})?;
    std::fs::create_dir_all("plots")?;
    let path = Path::new("plots/v4_flash_recall_vs_context.png");
    render_recall_chart(&s, &outcome.cells, path)?;
    print!("{}", dsa_recall::run::output::format_table(&s, &outcome));
    println!("wrote {}", path.display());
    Ok(())
}

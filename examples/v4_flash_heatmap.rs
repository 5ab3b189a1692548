//! Regenerates `plots/v4_flash_heatmap.png` and `plots/v4_flash_heatmap_diff.png`:
//! DeepSeek-V4-Flash (k 512 and 1024), needle depth on a sigmoid grid (packed
//! near 0 % and 100 %) × context 1K … 64K, bf16 and the fp8 indexer, and the
//! fp8 − bf16 difference on the same haystacks.
//!
//! `cargo run --release --example v4_flash_heatmap` (about half a minute on 2 cores)

use dsa_recall::config::{self, ListSpec, ScenarioParams};
use dsa_recall::report::chart::render_heatmap;
use dsa_recall::report::{heatmap, heatmap_diff, heatmap_size, Grid, ReportMeta};
use dsa_recall::run::sweep::run_sweep;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut p = ScenarioParams::default();
    p.sweep.contexts = Some(ListSpec::Text("1K..64K".into()));
    p.sweep.depths = Some(ListSpec::Text("sigmoid:7".into()));
    p.sweep.precisions = Some(ListSpec::Text("bf16,fp8".into()));
    p.sweep.trials = Some(200);
    let s = config::check(config::resolve(p)?)?;
    let outcome = run_sweep(&s, &|| {})?;
    let meta = ReportMeta::from_scenario(&s, &outcome.effective);
    let g = Grid::of(&outcome.cells);
    std::fs::create_dir_all("plots")?;

    let hm = heatmap(&meta, &outcome.cells);
    let (w, h) = heatmap_size(hm.panels.len(), g.depths.len(), g.contexts.len());
    let path = Path::new("plots/v4_flash_heatmap.png");
    render_heatmap(&hm, path, w, h)?;
    println!("wrote {}", path.display());

    if let Some(diff) = heatmap_diff(&meta, &outcome.cells) {
        let (w, h) = heatmap_size(diff.panels.len(), g.depths.len(), g.contexts.len());
        let path = Path::new("plots/v4_flash_heatmap_diff.png");
        render_heatmap(&diff, path, w, h)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

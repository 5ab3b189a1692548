//! Regenerates `plots/v4_flash_recall_vs_context.png`, the README's first
//! chart: the seed question. DeepSeek-V4-Flash (the default preset, its
//! `niah` needle) at k 512 and 1024, with correct bf16, fp8 (the engines'
//! fp32-scaled cache) and fp4 keys beside the seed incident's fault (scale
//! never written, so every logit is 0, with index-ordered ties), over 1K …
//! 256K tokens at depth 80 %. Whole-model recall over the preset's stack is
//! the solid line with its Wilson band and, dotted, its band over the
//! least-known assumptions (how much layers share); per-layer selection
//! recall is thin and dashed.
//!
//! `cargo run --release --example v4_flash_recall` (about 2 minutes on 2 cores)

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::report::render_recall_chart;
use dsa_recall::run::sweep::run_sweep;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text = "[sweep]\ncontexts = \"1K,2K,2560,3K,4K,5K,6K,8K,16K,32K,64K,128K,256K\"\ndepths = \"80\"\n\
                precisions = \"bf16,fp8-fp32scale,fp4,fp8-fp32scale+scale-unwritten-zero+ties-lowest\"\ntrials = 200\n";
    let s = config::check(config::resolve(parse_scenario_toml(text)?)?)?;
    let outcome = run_sweep(&s, &|| {})?;
    std::fs::create_dir_all("plots")?;
    let path = Path::new("plots/v4_flash_recall_vs_context.png");
    render_recall_chart(&s, &outcome.cells, path)?;
    print!("{}", dsa_recall::run::output::format_table(&s, &outcome));
    println!("wrote {}", path.display());
    Ok(())
}

//! Regenerates `plots/v4_flash_margin.png`: how much rarer than the `niah`
//! needle a fact may be and still be kept, for DeepSeek-V4-Flash as
//! shipped (bf16 and fp4 keys, k 512 and 1024, depth 50 %) from 4K to 1M
//! tokens. Tail mode (docs/MODEL.md, "Tail sampling under the quantile
//! needle") makes the 1M-token cells cost about what the short ones do.
//! The whole-model margin is the main line with its 95 % band, the
//! per-layer margin dashed; the grey bands are the `niah` and `hard`
//! profiles' needles.
//!
//! `cargo run --release --example v4_flash_margin` (about 2 minutes on 2 cores)

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::report::chart::margin::{margin_chart, render_margin};
use dsa_recall::report::ReportMeta;
use dsa_recall::run::sweep::run_sweep;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text = "[sweep]\ncontexts = \"4K,8K,16K,32K,64K,128K,256K,512K,1M\"\ndepths = \"50\"\ntopk = \"512,1024\"\n\
                precisions = \"bf16,fp4\"\ntrials = 200\n[estimator]\nmode = \"tail\"\n";
    let s = config::check(config::resolve(parse_scenario_toml(text)?)?)?;
    let outcome = run_sweep(&s, &|| {})?;
    let meta = ReportMeta::from_scenario(&s, &outcome.effective);
    let chart = margin_chart(&meta, &outcome.cells, false).ok_or("no margin in the sweep")?;
    std::fs::create_dir_all("plots")?;
    let path = Path::new("plots/v4_flash_margin.png");
    render_margin(&chart, path, 1600, 1000)?;
    print!("{}", dsa_recall::run::output::format_table(&s, &outcome));
    println!("wrote {}", path.display());
    Ok(())
}

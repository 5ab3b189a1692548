//! A sweep's output directory: its derived files written after a sweep
//! (tables, charts, `report.html`), and `plot`'s drawing them again from
//! `results.jsonl` and `manifest.json` without simulating.

use crate::base::files::write_file;
use crate::config::Scenario;
use crate::error::Error;
use crate::report::html::report_html;
use crate::report::meta::{PlotOptions, ReportMeta};
use crate::report::outputs::{render_charts, AGREEMENT_FILE, DATA_FILES, REPORT_FILE, TIES_FILE};
use crate::run::cell::CellResult;
use crate::run::output::{self, EFFECTIVE_CONTEXT_FILE, MANIFEST_FILE, RESULTS_FILE, SUMMARY_FILE};
use crate::run::sweep::SweepOutcome;
use std::path::Path;

/// Renders the charts and `report.html` (which embeds them); returns every file name written.
pub fn render_all(dir: &Path, meta: &ReportMeta, cells: &[CellResult], opts: &PlotOptions) -> Result<Vec<String>, Error> {
    let mut files = render_charts(dir, meta, cells, opts)?;
    let html = report_html(dir, meta, cells, &files, opts.whole_model_only)?;
    write_file(&dir.join(REPORT_FILE), html.as_bytes())?;
    files.push(REPORT_FILE.to_string());
    Ok(files)
}

/// Writes every output file of a sweep into `dir` (which must exist).
/// The manifest goes last: its presence marks a complete output directory.
/// results.jsonl and the manifest are the store's (`crate::run::store`): returns
/// every file the directory holds, for the manifest's list.
pub fn write_sweep(dir: &Path, s: &Scenario, outcome: &SweepOutcome, opts: &PlotOptions) -> Result<Vec<String>, Error> {
    write_file(&dir.join(SUMMARY_FILE), output::summary_csv(&outcome.cells).as_bytes())?;
    write_file(&dir.join(EFFECTIVE_CONTEXT_FILE), output::effective_context_csv(&outcome.effective).as_bytes())?;
    let meta = ReportMeta::from_scenario(s, &outcome.effective);
    let mut files: Vec<String> = DATA_FILES.iter().map(|f| f.to_string()).collect();
    if let Some(ties) = output::ties_csv(s, &outcome.cells) {
        write_file(&dir.join(TIES_FILE), ties.as_bytes())?;
        files.insert(files.len() - 1, TIES_FILE.to_string());
    }
    if let Some(agreement) = output::agreement_csv(&outcome.cells) {
        write_file(&dir.join(AGREEMENT_FILE), agreement.as_bytes())?;
        files.insert(files.len() - 1, AGREEMENT_FILE.to_string());
    }
    files.extend(render_all(dir, &meta, &outcome.cells, opts)?);
    Ok(files)
}

/// The first of a cell's recalls, intervals and overlaps outside 0..=1 (or
/// not a number), which no chart can draw.
fn fraction_out_of_range(c: &CellResult) -> Option<(&'static str, f64)> {
    let fractions = [
        ("recall", Some(c.recall)),
        ("ci_low", Some(c.ci_low)),
        ("ci_high", Some(c.ci_high)),
        ("predicted_recall", c.predicted_recall),
        ("selection_recall", c.selection_recall),
        ("jaccard", c.jaccard),
        ("model_recall", c.model_recall),
        ("model_ci_low", c.model_ci_low),
        ("model_ci_high", c.model_ci_high),
    ];
    fractions.into_iter().find_map(|(name, v)| v.filter(|x| !(0.0..=1.0).contains(x)).map(|x| (name, x)))
}

/// Reads `results.jsonl` (one cell per line; `location` names the file).
pub fn parse_results(text: &str, location: &str) -> Result<Vec<CellResult>, Error> {
    let mut cells = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{location} line {}", i + 1);
        let cell: CellResult =
            serde_json::from_str(line).map_err(|e| Error::Input { location: at(), message: format!("not a result cell: {e}") })?;
        if let Some((field, value)) = fraction_out_of_range(&cell) {
            return Err(Error::Input { location: at(), message: format!("{field} = {value}: a fraction from 0 to 1 (file edited?)") });
        }
        if cell.survived > cell.trials || cell.trials == 0 {
            return Err(Error::Input {
                location: at(),
                message: format!(
                    "survived = {} of trials = {}: at most the trials, of at least one (file edited?)",
                    cell.survived, cell.trials
                ),
            });
        }
        cells.push(cell);
    }
    if cells.is_empty() {
        return Err(Error::Input { location: location.to_string(), message: "no result cells".into() });
    }
    Ok(cells)
}

/// `dsa-recall plot DIR` on a sweep directory: re-renders every chart and
/// `report.html` from `results.jsonl` and `manifest.json` (a knob sweep's
/// top directory is [`crate::report::vary::plot_vary`]'s).
pub fn plot_dir(dir: &Path, opts: &PlotOptions) -> Result<Vec<String>, Error> {
    if !dir.is_dir() {
        return Err(Error::Input {
            location: dir.display().to_string(),
            message: "no such directory (give a sweep's output directory)".into(),
        });
    }
    let read = |name: &str, cap: u64| {
        let path = dir.join(name);
        crate::base::files::read_text_capped(&path, cap)
            .map_err(|e| Error::Input { location: path.display().to_string(), message: format!("cannot read: {e}") })
            .map(|t| (t, path.display().to_string()))
    };
    // results.jsonl grows with the grid; the manifest is small.
    let (results, results_loc) = read(RESULTS_FILE, crate::base::files::GRID_FILE_CAP)?;
    let cells = parse_results(&results, &results_loc)?;
    let (manifest, manifest_loc) = read(MANIFEST_FILE, crate::base::files::JSON_FILE_CAP)?;
    let meta = ReportMeta::from_manifest(&manifest, &manifest_loc)?;
    render_all(dir, &meta, &cells, opts)
}

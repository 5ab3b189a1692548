//! Every file of a sweep's directory, declared once: the data files and
//! the charts, each chart with its stem, when it applies, how it is built
//! from the cells and drawn, and its caption in `report.html`
//! ([`SWEEP_CHARTS`]). Drawing a sweep's charts, `report.html`'s captions,
//! `plot`, the Python binding's `plot` kinds and the tests read it.
//!
//! Adding a chart: its painter in `chart/` (one file) and one entry in
//! [`SWEEP_CHARTS`] here, with the function that builds it from the cells.

use crate::error::{ConfigError, Error};
use crate::report::chart::{chart_of, SWEEP_CHARTS};
use crate::report::meta::{ChartInputs, PlotOptions, ReportMeta};
use crate::run::cell::CellResult;
use crate::run::output::{EFFECTIVE_CONTEXT_FILE, MANIFEST_FILE, RESULTS_FILE, SUMMARY_FILE};
use std::path::Path;

/// The self-contained HTML report.
pub const REPORT_FILE: &str = "report.html";
/// The data files of a sweep directory, in the manifest's order: the cells
/// (written as they finish, [`crate::run::store`]), the summary table, the
/// effective contexts and the manifest (last: it marks the directory complete).
pub const DATA_FILES: [&str; 4] = [RESULTS_FILE, SUMMARY_FILE, EFFECTIVE_CONTEXT_FILE, MANIFEST_FILE];
/// The tie audit's table: a data file written, before the manifest, only
/// when the sweep ran with `--tie-audit on` ([`crate::run::output::ties_csv`]).
pub const TIES_FILE: &str = crate::run::output::TIES_FILE;
/// The top-k agreement's table: a data file written, before the manifest,
/// only when the sweep compared pairs (`--agreement A:B`,
/// [`crate::run::output::agreement_csv`]).
pub const AGREEMENT_FILE: &str = crate::run::output::AGREEMENT_FILE;
/// Renders every chart of [`SWEEP_CHARTS`] that applies into `dir`, in each
/// of `opts.formats`; returns the file names written, in a stable order.
pub fn render_charts(dir: &Path, meta: &ReportMeta, cells: &[CellResult], opts: &PlotOptions) -> Result<Vec<String>, Error> {
    let inputs = ChartInputs::new(meta, cells, opts)?;
    let mut files = Vec::new();
    for format in &opts.formats {
        for chart in &SWEEP_CHARTS {
            files.extend((chart.render)(&inputs, dir, format.extension())?);
        }
    }
    Ok(files)
}

/// Renders one chart of [`SWEEP_CHARTS`], the one `kind` names (a stem, or
/// a file name it owns), as PNG; returns the files written (none when it
/// does not apply to this sweep).
pub fn render_chart(dir: &Path, meta: &ReportMeta, cells: &[CellResult], kind: &str) -> Result<Vec<String>, Error> {
    let chart = chart_of(kind)
        .ok_or_else(|| ConfigError::new("kind", format!("{kind:?}"), format!("one of {}", SWEEP_CHARTS.map(|c| c.stem).join(", "))))?;
    (chart.render)(&ChartInputs::new(meta, cells, &PlotOptions::default())?, dir, "png")
}

/// A sweep's charts drawn as PNG in memory, without touching the disk:
/// with `kind`, the one chart it names ([`render_chart`]; none when it does
/// not apply), else every chart that applies. Returns (file name, PNG bytes),
/// the bytes a sweep directory's files hold.
pub fn chart_pngs(meta: &ReportMeta, cells: &[CellResult], kind: Option<&str>) -> Result<crate::report::chart::canvas::Images, Error> {
    let (drawn, images) = crate::report::chart::canvas::in_memory(|| match kind {
        Some(k) => render_chart(Path::new(""), meta, cells, k),
        None => render_charts(Path::new(""), meta, cells, &PlotOptions::default()),
    });
    drawn?;
    Ok(images)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Scenario;
    use crate::report::chart::compare::compare_chart;
    use crate::report::chart::depth::recall_vs_depth_chart;
    use crate::report::chart::heatmap::{diff_scale, heatmap, heatmap_diff_marked, heatmap_model};
    use crate::report::chart::recall_vs_context::recall_chart;
    use crate::report::meta::{find, Grid};

    /// A tiny default-preset sweep (with its stack): scenario, meta and cells.
    fn tiny_sweep() -> (Scenario, ReportMeta, Vec<CellResult>) {
        let s = crate::config::check(crate::config::resolve(Default::default()).unwrap()).unwrap();
        let s = Scenario { contexts: vec![1024, 8192], depths: vec![0.0, 100.0], topks: vec![64], trials: 6, ..s };
        let out = crate::run::sweep::run_sweep(&s, &|| {}).unwrap();
        (s.clone(), ReportMeta::from_scenario(&s, &out.effective), out.cells)
    }

    fn without_whole_model(cells: &[CellResult]) -> Vec<CellResult> {
        cells.iter().map(|c| CellResult { model_recall: None, model_ci_low: None, model_ci_high: None, ..c.clone() }).collect()
    }

    #[test]
    fn whole_model_recall_reaches_the_recall_chart_and_its_heatmap() {
        let (_, meta, cells) = tiny_sweep();
        assert!(meta.stack_label().is_some_and(|l| l.contains("indexer layers")));
        let chart = recall_chart(&meta, &cells, 0.0, false);
        assert!(chart.title.starts_with("Whole-model recall (solid)"), "{}", chart.title);
        for sr in &chart.series {
            assert_eq!(sr.model.len(), sr.points.len());
        }
        assert!(chart.effective.iter().all(|e| e.model.is_some()));
        let hm = heatmap_model(&meta, &cells).expect("whole-model heatmap");
        let g = Grid::of(&cells);
        for (panel, (k, p)) in hm.panels.iter().zip(g.topks.iter().flat_map(|&k| g.precisions.iter().map(move |p| (k, p)))) {
            for (di, &d) in g.depths.iter().enumerate() {
                for (ci, &c) in g.contexts.iter().enumerate() {
                    assert_eq!(panel.recall[di][ci], find(&cells, d, c, k, p).unwrap().model_recall);
                }
            }
        }
        // the per-layer heatmap keeps per-layer recall
        assert_eq!(heatmap(&meta, &cells).panels[0].recall[0][0], Some(find(&cells, 0.0, 1024, 64, &g.precisions[0]).unwrap().recall));

        // Without whole-model recall: no heatmap, and the chart is the per-layer one.
        let plain = without_whole_model(&cells);
        assert!(heatmap_model(&meta, &plain).is_none());
        let chart = recall_chart(&meta, &plain, 0.0, false);
        assert!(chart.title.starts_with("Per-layer selection recall vs context"));
        assert!(chart.series.iter().all(|s| s.model.is_empty()));
    }

    #[test]
    fn difference_heatmap_marks_holm_significant_cells_and_takes_a_span() {
        // Issue 17 (statistics): a ring on exactly the cells whose adjusted p
        // is below 0.05; the span option sets the colour scale.
        let (_, meta, cells) = tiny_sweep();
        let first = cells[0].precision.clone();
        let alt: Vec<CellResult> = cells
            .iter()
            .filter(|c| c.precision == first)
            .map(|c| CellResult { precision: "alt".into(), recall_diff: Some(0.02), mcnemar_p: Some(0.5), ..c.clone() })
            .collect();
        let all: Vec<CellResult> = cells.iter().cloned().chain(alt).collect();
        let target = cells.len() + 1; // the second "alt" cell
        let adjusted: Vec<Option<f64>> =
            (0..all.len()).map(|i| (i >= cells.len()).then_some(if i == target { 0.01 } else { 0.3 })).collect();
        let hm = heatmap_diff_marked(&meta, &all, &adjusted, 7, None).unwrap();
        assert_eq!(hm.diverging_limit, Some(0.1), "±0.02 differences get the 0.1 floor");
        let note = hm.note.clone().unwrap();
        assert!(note.contains("Holm") && note.contains("all 7 paired tests"), "{note}");
        let panel = hm.panels.iter().find(|p| p.title.contains("alt")).unwrap();
        let g = Grid::of(&all);
        let t = &all[target];
        let (di, ci) =
            (g.depths.iter().position(|&d| d == t.depth_percent).unwrap(), g.contexts.iter().position(|&c| c == t.context_tokens).unwrap());
        let marked: Vec<(usize, usize)> =
            (0..g.depths.len()).flat_map(|d| (0..g.contexts.len()).map(move |c| (d, c))).filter(|&(d, c)| panel.marked[d][c]).collect();
        assert_eq!(marked, vec![(di, ci)]);
        let wide = heatmap_diff_marked(&meta, &all, &adjusted, 7, Some(0.5)).unwrap();
        assert_eq!(wide.diverging_limit, Some(0.5));
        assert!(wide.note.unwrap().contains("±0.5 (--diff-span)"));
    }

    #[test]
    fn compare_and_depth_charts_read_the_detail_cells() {
        // Issue 17 (compare, recall vs depth): one row per (k, precision) at
        // the context and detail depth; one depth panel per context.
        let (_, meta, cells) = tiny_sweep();
        let g = Grid::of(&cells);
        let cmp = compare_chart(&meta, &cells, 8192, false);
        assert_eq!(cmp.rows.len(), g.topks.len() * g.precisions.len());
        let c = find(&cells, g.detail_depth(), 8192, g.topks[0], &g.precisions[0]).unwrap();
        assert_eq!(cmp.rows[0].layer.value, c.recall);
        assert_eq!(cmp.rows[0].model.map(|m| m.value), c.model_recall);
        assert!(cmp.subtitle.contains("--detail-context"));
        let depth = recall_vs_depth_chart(&meta, &cells);
        assert_eq!(depth.panels.len(), 2);
        assert_eq!(depth.panels[1].series[0].points.len(), g.depths.len());
        assert!(depth.subtitle.starts_with("every context"));
    }

    #[test]
    fn charts_drawn_in_memory_are_the_files_bytes() {
        let (_, meta, cells) = tiny_sweep();
        let dir = tempfile::tempdir().unwrap();
        let written = render_chart(dir.path(), &meta, &cells, "heatmap").unwrap();
        let images = chart_pngs(&meta, &cells, Some("heatmap")).unwrap();
        assert_eq!(images.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), written);
        assert_eq!(images[0].1, std::fs::read(dir.path().join(&written[0])).unwrap());
        // Every chart that applies, each a PNG.
        let all = chart_pngs(&meta, &cells, None).unwrap();
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert!(all.len() >= 3 && all.iter().all(|(n, b)| n.ends_with(".png") && b.starts_with(b"\x89PNG")), "{names:?}");
        assert!(chart_pngs(&meta, &cells, Some("no_such_chart")).is_err());
        let again = render_chart(dir.path(), &meta, &cells, "compare").unwrap();
        assert!(dir.path().join(&again[0]).is_file(), "after chart_pngs, charts go to files again");
    }

    #[test]
    fn difference_scale_holds_the_largest_difference() {
        // Issue 17 (colour span): never below 0.1, so ±0.02 noise stays pale.
        assert_eq!(diff_scale(0.0), 0.1);
        assert_eq!(diff_scale(0.02), 0.1);
        assert_eq!(diff_scale(0.06), 0.1);
        assert_eq!(diff_scale(0.11), 0.25);
        assert_eq!(diff_scale(0.3), 0.5);
        assert_eq!(diff_scale(0.9), 1.0);
    }
}

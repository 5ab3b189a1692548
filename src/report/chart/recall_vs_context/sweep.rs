//! The chart in a sweep: built from the cells, and its entry in the registry.

use std::path::Path;

use super::data::{EffectiveMark, RecallChart, RecallPoint, RecallSeries};
use super::paint::render_recall_vs_context;
use crate::config::Scenario;
use crate::error::Error;
use crate::report::meta::{file_name, needle_offsets, Grid, ReportMeta, SweepChart, RECALL_VS_CONTEXT};
use crate::run::cell::CellResult;
use crate::run::sweep::effective_contexts;

/// One series per (k, precision, needle offset) at `depth`: per-layer and
/// whole-model recall, the prediction and the assumption band.
fn recall_series(cells: &[CellResult], g: &Grid, depth: f64) -> Vec<RecallSeries> {
    let mut series = Vec::new();
    let offsets = needle_offsets(cells);
    for &k in &g.topks {
        for p in &g.precisions {
            for &offset in &offsets {
                let of_series = |c: &&CellResult| c.depth_percent == depth && c.topk == k && c.precision == *p && c.needle_offset == offset;
                let points: Vec<RecallPoint> = cells
                    .iter()
                    .filter(of_series)
                    .map(|c| RecallPoint { context_tokens: c.context_tokens, recall: c.recall, ci_low: c.ci_low, ci_high: c.ci_high })
                    .collect();
                let model: Vec<RecallPoint> = cells
                    .iter()
                    .filter(of_series)
                    .filter_map(|c| {
                        Some(RecallPoint {
                            context_tokens: c.context_tokens,
                            recall: c.model_recall?,
                            ci_low: c.model_ci_low?,
                            ci_high: c.model_ci_high?,
                        })
                    })
                    .collect();
                let predicted: Vec<(u64, f64)> =
                    cells.iter().filter(of_series).filter_map(|c| c.predicted_recall.map(|r| (c.context_tokens, r))).collect();
                let model_band: Vec<(u64, f64, f64)> = cells
                    .iter()
                    .filter(of_series)
                    .filter_map(|c| Some((c.context_tokens, c.model_band_low?, c.model_band_high?)))
                    .collect();
                // One line per needle offset when the sweep has that axis.
                let label = match offset {
                    Some(o) if offsets.len() > 1 => format!("{p} @ offset {o}"),
                    _ => p.clone(),
                };
                if !points.is_empty() {
                    series.push(RecallSeries { topk: k as u32, precision: label, points, predicted, model, model_band });
                }
            }
        }
    }
    series
}

/// The recall-vs-context chart of one depth (per-layer selection recall:
/// docs/MODEL.md, "What is measured").
pub fn recall_chart(meta: &ReportMeta, cells: &[CellResult], depth: f64, whole_model_only: bool) -> RecallChart {
    let g = Grid::of(cells);
    let trials = cells.first().map_or(0, |c| c.trials);
    let series = recall_series(cells, &g, depth);
    let coverage_limits =
        g.topks.iter().filter_map(|&k| cells.iter().find(|c| c.topk == k).map(|c| (k as u32, c.coverage_limit))).collect();
    let whole = series.iter().any(|s| !s.model.is_empty());
    let (title, stack) = match meta.stack_label() {
        Some(stack) if whole && whole_model_only => {
            (format!("Whole-model recall vs context · {} · {}", meta.preset, meta.physics_label()), format!(" · whole model: {stack}"))
        }
        Some(stack) if whole => (
            format!(
                "Whole-model recall (solid) and per-layer selection recall (dashed) vs context · {} · {}",
                meta.preset,
                meta.physics_label()
            ),
            format!(" · whole model: {stack}"),
        ),
        _ => (format!("Per-layer selection recall vs context · {} · {}", meta.preset, meta.physics_label()), String::new()),
    };
    // Read from the drawn depth's lines, not the sweep's all-depth
    // effective contexts: a line held to 4K must not be labelled 2K because
    // another depth failed earlier.
    let effective = series.iter().map(|sr| EffectiveMark::of_series(sr, meta.threshold)).collect();
    RecallChart {
        title,
        subtitle: format!(
            "needle depth {depth} %, {}, {} tokens · {trials} trials per point · Wilson 95 % bands · seed {}{stack}",
            meta.needle, meta.needle_tokens, meta.seed
        ),
        effective,
        series,
        coverage_limits,
        effective_threshold: Some(meta.threshold),
        effective_at: Some(format!("depth {depth} %")),
        whole_model_only,
    }
}

/// Recall vs context, one line per (k, precision), one chart per depth
/// (`recall_vs_context.png` for the first depth, `recall_vs_context_depthD.png`
/// for the others); effective contexts are computed from `cells`.
pub fn render_recall_chart(s: &Scenario, cells: &[CellResult], path: &Path) -> Result<(), Error> {
    let meta = ReportMeta::from_scenario(s, &effective_contexts(s, cells));
    render_recall_charts(&meta, cells, path, false).map(|_| ())
}

fn recall_chart_path(first: &Path, index: usize, depth: f64) -> std::path::PathBuf {
    if index == 0 {
        return first.to_path_buf();
    }
    let stem = first.file_stem().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = first.extension().map(|x| x.to_string_lossy().into_owned()).unwrap_or_else(|| "png".into());
    first.with_file_name(format!("{stem}_depth{depth}.{ext}"))
}

fn render_recall_charts(
    meta: &ReportMeta,
    cells: &[CellResult],
    path: &Path,
    whole_model_only: bool,
) -> Result<Vec<std::path::PathBuf>, Error> {
    let g = Grid::of(cells);
    let mut written = Vec::new();
    for (i, &depth) in g.depths.iter().enumerate() {
        let target = recall_chart_path(path, i, depth);
        render_recall_vs_context(&recall_chart(meta, cells, depth, whole_model_only), &target, 1600, 1000)?;
        written.push(target);
    }
    Ok(written)
}

pub const CHART: SweepChart = SweepChart {
    stem: RECALL_VS_CONTEXT,
    when: "several contexts: one per depth with up to two depths, else one at the detail depth beside recall_vs_depth",
    caption: "Per-layer selection recall vs context (log2 axis), one line per (k, precision), Wilson 95 % bands; thin solid verticals mark the coverage limit k·c+W, the dotted line the recall threshold; the legend gives each series' effective context at the drawn depth, with the range read from the intervals' ends in brackets when it differs.",
    caption_whole: Some("Whole-model recall (solid lines, Wilson 95 % bands) and per-layer selection recall (thin dashed lines, smaller markers) vs context (log2 axis), one colour per k, one marker per precision; thin solid verticals mark the coverage limit k·c+W, the dotted grey line the recall threshold; the legend gives each series' effective context at the drawn depth read from both, with the range read from the intervals' ends in brackets when it differs."),
    predicted: Some("Lines in each series' colour, long-dashed (dotted beside whole-model recall), are the analytic prediction of per-layer recall."),
    whole_model_only: true,
    render: |c, dir, ext| {
        let first = dir.join(format!("{RECALL_VS_CONTEXT}.{ext}"));
        if c.grid.contexts.len() < 2 {
            return Ok(Vec::new());
        }
        if c.by_depth() {
            render_recall_vs_context(&recall_chart(c.meta, c.all_cells, c.grid.detail_depth(), c.whole_model_only), &first, 1600, 1000)?;
            return Ok(vec![file_name(&first)]);
        }
        Ok(render_recall_charts(c.meta, c.all_cells, &first, c.whole_model_only)?.iter().map(|p| file_name(p)).collect())
    },
};

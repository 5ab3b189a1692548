//! Selection fidelity: how much of the reference (fp32) top-k set a quantized
//! selection keeps, against context length. Two panels side by side —
//! recall@k (share of the reference rows kept) and Jaccard overlap of the two
//! sets — one line per (top-k, precision) with its 95 % band, and an optional
//! horizontal reference line (the engines' 0.99 pass rule).
//!
//! The encoding matches the recall chart: colour = top-k, dash and marker =
//! precision.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::recall_vs_context::{draw_dashed, draw_marker, Encoding};

use super::canvas::{check_log2_contexts, draw_err, render_atomically, ChartError, Painter};
use super::style::{log2_context_range, log2_token_tick, text, text_at, ui_scale, Dash, TickedAxis, TickedChart, GRID, INK, INK_SOFT};

/// One measured value with its 95 % interval.
#[derive(Debug, Clone, PartialEq)]
pub struct FidelityPoint {
    pub context_tokens: u64,
    pub mean: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

/// Fidelity of one (top-k, precision) against the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct FidelitySeries {
    pub topk: u32,
    pub precision: String,
    /// Share of the reference's top-k rows also selected; ascending contexts.
    pub selection_recall: Vec<FidelityPoint>,
    /// Jaccard overlap of the two top-k sets; ascending contexts.
    pub jaccard: Vec<FidelityPoint>,
}

/// Everything drawn on a fidelity chart.
#[derive(Debug, Clone, PartialEq)]
pub struct FidelityChart {
    pub title: String,
    pub subtitle: String,
    /// Name of the reference variant, e.g. "fp32".
    pub reference: String,
    pub series: Vec<FidelitySeries>,
    /// Horizontal reference line, e.g. 0.99 ("engines' pass rule").
    pub pass_rule: Option<f64>,
}

/// Renders `chart` to `path` (`.png` or `.svg`), atomically.
pub fn render_fidelity(chart: &FidelityChart, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    validate(chart)?;
    render_atomically(chart, path, width, height)
}

const EPS: f64 = 1e-9;

fn validate(chart: &FidelityChart) -> Result<(), ChartError> {
    let bad = |m: String| Err(ChartError::InvalidInput(m));
    if chart.series.is_empty() {
        return bad("fidelity chart has no series".into());
    }
    for s in &chart.series {
        let name = format!("series k={} {}", s.topk, s.precision);
        if s.selection_recall.is_empty() && s.jaccard.is_empty() {
            return bad(format!("{name} has no points"));
        }
        for (metric, pts) in [("recall@k", &s.selection_recall), ("jaccard", &s.jaccard)] {
            check_log2_contexts(&format!("{name} {metric}"), pts.iter().map(|p| p.context_tokens))?;
            for p in pts {
                for v in [p.mean, p.ci_low, p.ci_high] {
                    if !v.is_finite() || !(-EPS..=1.0 + EPS).contains(&v) {
                        return bad(format!("{name} {metric}: value {v} outside 0..1 at context {}", p.context_tokens));
                    }
                }
                if p.ci_low > p.mean + EPS || p.mean > p.ci_high + EPS {
                    return bad(format!("{name} {metric}: interval does not contain the mean at context {}", p.context_tokens));
                }
            }
        }
    }
    if let Some(r) = chart.pass_rule {
        if !r.is_finite() || !(0.0..=1.0).contains(&r) {
            return bad(format!("pass rule {r} is not in 0..1"));
        }
    }
    Ok(())
}

/// A "nice" tick step giving at most about ten ticks over `span`.
fn nice_step(span: f64) -> f64 {
    for step in [0.01, 0.02, 0.05, 0.1, 0.2, 0.25] {
        if span / step <= 10.0 + 1e-9 {
            return step;
        }
    }
    0.5
}

/// Lower y limit: just below the smallest interval end (and the pass rule),
/// on a 0.05 grid, never below 0.
fn y_floor(chart: &FidelityChart) -> f64 {
    let lo = chart
        .series
        .iter()
        .flat_map(|s| s.selection_recall.iter().chain(&s.jaccard))
        .map(|p| p.ci_low)
        .chain(chart.pass_rule)
        .fold(1.0f64, f64::min);
    (((lo - 0.01) * 20.0).floor() / 20.0).clamp(0.0, 0.95)
}

impl FidelityChart {
    fn paint_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        enc: &Encoding,
        metric: Metric,
        (x_lo, x_hi, ticks): (f64, f64, &[f64]),
        y_lo: f64,
        s: f64,
    ) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let y_hi = 1.0 + (1.0 - y_lo) * 0.04;
        let step = nice_step(1.0 - y_lo);
        let first = (y_lo / step).ceil() as i64;
        let y_ticks: Vec<f64> = (first..=(1.0 / step).round() as i64).map(|i| i as f64 * step).collect();
        let e_first = ticks.first().copied().unwrap_or(0.0) as i64;
        let label_every = if ticks.len() > 8 { 2 } else { 1 };
        let (title, desc) = match metric {
            Metric::SelectionRecall => (format!("recall@k: share of the {} top-k kept", self.reference), "recall@k"),
            Metric::Jaccard => (format!("Jaccard overlap with the {} top-k", self.reference), "Jaccard overlap"),
        };
        let mut chart = ChartBuilder::on(area)
            .caption(title, text(19.0 * s, INK))
            .margin(px(12.0))
            .x_label_area_size(px(58.0))
            .y_label_area_size(px(70.0))
            .build_cartesian_2d(TickedAxis { lo: x_lo, hi: x_hi, ticks: ticks.to_vec() }, TickedAxis { lo: y_lo, hi: y_hi, ticks: y_ticks })
            .map_err(draw_err)?;
        let decimals = if step < 0.1 { 2 } else { 1 };
        chart
            .configure_mesh()
            .bold_line_style(GRID.stroke_width(1))
            .light_line_style(TRANSPARENT)
            .axis_style(INK_SOFT.stroke_width(1))
            .x_desc("context length (tokens, log2 scale)")
            .y_desc(desc)
            .axis_desc_style(text(17.0 * s, INK))
            .label_style(text(15.0 * s, INK))
            .x_label_formatter(&|v: &f64| log2_token_tick(*v, e_first, label_every))
            .y_label_formatter(&|v: &f64| format!("{v:.decimals$}"))
            .draw()
            .map_err(draw_err)?;
        // backend_coord is in root pixels; `area` draws in its own
        let (ox, oy) = area.get_base_pixel();
        let (xr, _) = chart.plotting_area().get_pixel_range();
        let xr = (xr.start - ox)..(xr.end - ox);
        if let Some(r) = self.pass_rule {
            let y = (chart.backend_coord(&(x_lo, r)).1 - oy) as f64;
            draw_dashed(
                area,
                &[(xr.start as f64, y), (xr.end as f64, y)],
                Dash::Dashed,
                s,
                INK.stroke_width((2.0 * s).round().max(1.0) as u32),
            )?;
            area.draw(&Text::new(
                format!("{r} pass rule"),
                (xr.start + px(8.0), y as i32 + px(4.0)),
                text_at(14.0 * s, INK, HPos::Left, VPos::Top),
            ))
            .map_err(draw_err)?;
        }
        self.draw_metric_series(area, &mut chart, enc, metric, (x_lo, x_hi), s)
    }

    /// Each series' band, then its line and markers, of one metric.
    fn draw_metric_series<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        chart: &mut TickedChart<'_, DB>,
        enc: &Encoding,
        metric: Metric,
        (x_lo, x_hi): (f64, f64),
        s: f64,
    ) -> Result<(), ChartError> {
        // backend_coord is in root pixels; `area` draws in its own
        let (ox, oy) = area.get_base_pixel();
        let pts_of = |sr: &FidelitySeries| -> Vec<FidelityPoint> {
            match metric {
                Metric::SelectionRecall => sr.selection_recall.clone(),
                Metric::Jaccard => sr.jaccard.clone(),
            }
        };
        for sr in &self.series {
            let look = enc.look_of(sr.topk, &sr.precision);
            let pts = pts_of(sr);
            if pts.is_empty() {
                continue;
            }
            let mut poly: Vec<(f64, f64)> = pts.iter().map(|p| ((p.context_tokens as f64).log2(), p.ci_high)).collect();
            poly.extend(pts.iter().rev().map(|p| ((p.context_tokens as f64).log2(), p.ci_low)));
            if pts.len() == 1 {
                let x = (pts[0].context_tokens as f64).log2();
                let dx = 0.04 * (x_hi - x_lo);
                poly = vec![(x - dx, pts[0].ci_high), (x + dx, pts[0].ci_high), (x + dx, pts[0].ci_low), (x - dx, pts[0].ci_low)];
            }
            chart.draw_series(std::iter::once(Polygon::new(poly, look.color.mix(0.14).filled()))).map_err(draw_err)?;
        }
        let line_w = (2.4 * s).round().max(1.0) as u32;
        for sr in &self.series {
            let look = enc.look_of(sr.topk, &sr.precision);
            let pts: Vec<(f64, f64)> = pts_of(sr)
                .iter()
                .map(|p| {
                    let (x, y) = chart.backend_coord(&((p.context_tokens as f64).log2(), p.mean));
                    ((x - ox) as f64, (y - oy) as f64)
                })
                .collect();
            draw_dashed(area, &pts, look.dash, s, look.color.stroke_width(line_w))?;
            for &(x, y) in &pts {
                draw_marker(area, look.marker, (x as i32, y as i32), 5.0 * s, look.color, s)?;
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Metric {
    SelectionRecall,
    Jaccard,
}

impl Painter for FidelityChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        let (w, h) = root.dim_in_pixel();
        let s = ui_scale(w, h);
        let px = |v: f64| (v * s).round() as i32;
        root.fill(&WHITE).map_err(draw_err)?;
        let enc = Encoding::from_pairs(self.series.iter().map(|sr| (sr.topk, sr.precision.as_str())), &[]);

        let margin = px(24.0);
        let title_style = text_at(30.0 * s, INK, HPos::Left, VPos::Top);
        let subtitle_style = text_at(18.0 * s, INK_SOFT, HPos::Left, VPos::Top);
        let legend_style = text_at(16.0 * s, INK, HPos::Left, VPos::Center);
        let title_h = root.estimate_text_size("Ag", &title_style).map_err(draw_err)?.1 as i32;
        let sub_h = root.estimate_text_size("Ag", &subtitle_style).map_err(draw_err)?.1 as i32;
        root.draw(&Text::new(self.title.clone(), (margin, margin), title_style)).map_err(draw_err)?;
        root.draw(&Text::new(self.subtitle.clone(), (margin, margin + title_h + px(10.0)), subtitle_style)).map_err(draw_err)?;
        let top = margin + title_h + px(10.0) + sub_h + px(16.0);

        // legend: series sorted by (k, precision order)
        let mut order: Vec<&FidelitySeries> = self.series.iter().collect();
        order.sort_by_key(|sr| (sr.topk, enc.precisions.iter().position(|p| *p == sr.precision)));
        let labels: Vec<String> = order.iter().map(|sr| format!("k={}, {}", sr.topk, sr.precision)).collect();
        let swatch_w = px(48.0);
        let mut text_w = 0;
        for l in labels.iter().map(String::as_str).chain(["95 % interval", "series (k, precision)"]) {
            text_w = text_w.max(root.estimate_text_size(l, &legend_style).map_err(draw_err)?.0 as i32);
        }
        let legend_w = swatch_w + px(12.0) + text_w + px(36.0);

        // x range (log2 tokens)
        let (x_lo, x_hi, ticks) =
            log2_context_range(self.series.iter().flat_map(|sr| sr.selection_recall.iter().chain(&sr.jaccard)).map(|p| p.context_tokens));
        let y_lo = y_floor(self);

        let body = root.margin(top, margin, margin, margin / 2);
        let (panels, legend) = body.split_horizontally(body.dim_in_pixel().0 as i32 - legend_w);
        let halves = panels.split_evenly((1, 2));
        self.paint_panel(&halves[0], &enc, Metric::SelectionRecall, (x_lo, x_hi, &ticks), y_lo, s)?;
        self.paint_panel(&halves[1], &enc, Metric::Jaccard, (x_lo, x_hi, &ticks), y_lo, s)?;

        self.draw_legend(&legend, &enc, &order, &labels, s)
    }
}

impl FidelityChart {
    /// The legend beside the panels: one entry per series (`order`,
    /// `labels`), the interval and the engines' pass rule.
    fn draw_legend<DB: DrawingBackend>(
        &self,
        legend: &DrawingArea<DB, Shift>,
        enc: &Encoding,
        order: &[&FidelitySeries],
        labels: &[String],
        s: f64,
    ) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let legend_style = text_at(16.0 * s, INK, HPos::Left, VPos::Center);
        let swatch_w = px(48.0);
        let line_w = (2.4 * s).round().max(1.0) as u32;
        let lx = px(12.0);
        let entry_h = px(30.0);
        let mut y = px(56.0);
        legend
            .draw(&Text::new("series (k, precision)", (lx, y), text_at(17.0 * s, INK_SOFT, HPos::Left, VPos::Center)))
            .map_err(draw_err)?;
        y += entry_h;
        for (sr, label) in order.iter().zip(labels) {
            let look = enc.look_of(sr.topk, &sr.precision);
            legend
                .draw(&Rectangle::new([(lx, y - px(8.0)), (lx + swatch_w, y + px(8.0))], look.color.mix(0.14).filled()))
                .map_err(draw_err)?;
            draw_dashed(
                legend,
                &[(lx as f64, y as f64), ((lx + swatch_w) as f64, y as f64)],
                look.dash,
                s,
                look.color.stroke_width(line_w),
            )?;
            draw_marker(legend, look.marker, (lx + swatch_w / 2, y), 5.0 * s, look.color, s)?;
            legend.draw(&Text::new(label.clone(), (lx + swatch_w + px(12.0), y), legend_style.clone())).map_err(draw_err)?;
            y += entry_h;
        }
        y += px(10.0);
        legend.draw(&Rectangle::new([(lx, y - px(8.0)), (lx + swatch_w, y + px(8.0))], INK_SOFT.mix(0.2).filled())).map_err(draw_err)?;
        legend.draw(&Text::new("95 % interval", (lx + swatch_w + px(12.0), y), legend_style.clone())).map_err(draw_err)?;
        y += entry_h;
        if let Some(r) = self.pass_rule {
            draw_dashed(
                legend,
                &[(lx as f64, y as f64), ((lx + swatch_w) as f64, y as f64)],
                Dash::Dashed,
                s,
                INK.stroke_width((2.0 * s).round().max(1.0) as u32),
            )?;
            legend
                .draw(&Text::new(format!("{r}: engines' pass rule"), (lx + swatch_w + px(12.0), y), legend_style.clone()))
                .map_err(draw_err)?;
        }
        Ok(())
    }
}

// The chart in a sweep: built from the cells, and its entry in the registry.

use crate::report::meta::{draw, find, Grid, ReportMeta, SweepChart};
use crate::run::cell::CellResult;

/// The engines' pass rule for top-k overlap, drawn on the fidelity chart.
pub const FIDELITY_PASS_RULE: f64 = 0.99;

/// A cell's (mean, 95 % interval low, high) of one fidelity measure.
type MeanAndInterval = (Option<f64>, Option<f64>, Option<f64>);

/// Selection fidelity against the reference at the detail depth. None
/// when no cell has a fidelity reference.
pub fn fidelity_chart(meta: &ReportMeta, cells: &[CellResult]) -> Option<FidelityChart> {
    let g = Grid::of(cells);
    let depth = g.detail_depth();
    let reference = cells.iter().find_map(|c| c.fidelity_reference.clone())?;
    let trials = cells.first().map_or(0, |c| c.trials);
    let mut series = Vec::new();
    for &k in &g.topks {
        for p in &g.precisions {
            let mine: Vec<&CellResult> = g.contexts.iter().filter_map(|&c| find(cells, depth, c, k, p)).collect();
            let pick = |f: fn(&CellResult) -> MeanAndInterval| -> Vec<FidelityPoint> {
                mine.iter()
                    .filter_map(|c| match f(c) {
                        (Some(mean), Some(lo), Some(hi)) => Some(FidelityPoint {
                            context_tokens: c.context_tokens,
                            mean: mean.clamp(0.0, 1.0),
                            ci_low: lo.clamp(0.0, 1.0),
                            ci_high: hi.clamp(0.0, 1.0),
                        }),
                        _ => None,
                    })
                    .collect()
            };
            let selection_recall = pick(|c| (c.selection_recall, c.selection_recall_ci_low, c.selection_recall_ci_high));
            let jaccard = pick(|c| (c.jaccard, c.jaccard_ci_low, c.jaccard_ci_high));
            if !selection_recall.is_empty() || !jaccard.is_empty() {
                series.push(FidelitySeries { topk: k as u32, precision: p.clone(), selection_recall, jaccard });
            }
        }
    }
    (!series.is_empty()).then(|| FidelityChart {
        title: format!("Selection fidelity against the {reference} top-k · {}", meta.preset),
        subtitle: format!("needle depth {depth} % · {trials} trials per point · mean and 95 % interval over trials · seed {}", meta.seed),
        reference,
        series,
        pass_rule: Some(FIDELITY_PASS_RULE),
    })
}

pub const CHART: SweepChart = SweepChart {
    stem: "fidelity",
    when: "with a reference precision (fp32)",
    caption: "Selection fidelity: the share of the exact top-k kept by each quantized selection (recall@k) and the Jaccard overlap of the two sets, with 95 % intervals; the dashed line is the 0.99 pass rule.",
    caption_whole: None,
    predicted: None,
    whole_model_only: false,
    render: |c, dir, ext| match fidelity_chart(c.meta, &c.cells) {
        Some(f) => draw(dir, "fidelity", ext, |path| Ok(render_fidelity(&f, path, 1600, 1000)?)),
        None => Ok(Vec::new()),
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn demo() -> FidelityChart {
        let pts = |base: f64| -> Vec<FidelityPoint> {
            (10..=15)
                .map(|e| {
                    let m = 1.0 - base * (e - 10) as f64;
                    FidelityPoint { context_tokens: 1 << e, mean: m, ci_low: m - 0.01, ci_high: (m + 0.01).min(1.0) }
                })
                .collect()
        };
        FidelityChart {
            title: "t".into(),
            subtitle: "s".into(),
            reference: "fp32".into(),
            series: vec![
                FidelitySeries { topk: 512, precision: "bf16".into(), selection_recall: pts(0.002), jaccard: pts(0.004) },
                FidelitySeries { topk: 512, precision: "fp4".into(), selection_recall: pts(0.04), jaccard: pts(0.07) },
            ],
            pass_rule: Some(0.99),
        }
    }

    #[test]
    fn renders_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("f.png");
        render_fidelity(&demo(), &png, 1000, 600).unwrap();
        let b = std::fs::read(&png).unwrap();
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(u32::from_be_bytes([b[16], b[17], b[18], b[19]]), 1000);
        let svg = dir.path().join("f.svg");
        render_fidelity(&demo(), &svg, 1000, 600).unwrap();
        assert!(std::fs::read_to_string(&svg).unwrap().contains("Jaccard"));
    }

    #[test]
    fn invalid_inputs_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.png");
        let mut c = demo();
        c.series.clear();
        assert!(render_fidelity(&c, &path, 1000, 600).is_err());
        let mut c = demo();
        c.series[0].jaccard[2].mean = f64::NAN;
        assert!(render_fidelity(&c, &path, 1000, 600).is_err());
        let mut c = demo();
        c.series[0].jaccard[2].ci_low = 1.0;
        assert!(render_fidelity(&c, &path, 1000, 600).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn axis_helpers() {
        assert_eq!(nice_step(0.05), 0.01);
        assert_eq!(nice_step(0.5), 0.05);
        assert_eq!(nice_step(1.0), 0.1);
        // lowest interval end: fp4 Jaccard at 32K, 1 − 5·0.07 − 0.01 = 0.64 → 0.60
        assert_eq!(y_floor(&demo()), 0.6);
    }
}

//! Recall against needle depth, one panel per context, one line per
//! (top-k, precision), drawn as the recall-vs-context chart draws its lines:
//! colour per k, marker per precision; with whole-model recall it is the
//! solid banded line and per-layer recall the thin dashed one, without it
//! per-layer recall is the banded line with the precision's dash.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::canvas::{draw_err, render_atomically, ChartError, Painter};
use super::recall_vs_context::{draw_dashed, draw_marker, Encoding};
use super::style::{covered_by_later, text_at, text_vertical, ui_scale, wrap_at_separators, Dash, Marker, GRID, INK, INK_SOFT};

/// Recall at one depth with its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DepthPoint {
    pub depth_percent: f64,
    pub recall: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

/// One (top-k, precision) line of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct DepthSeries {
    pub topk: u32,
    pub precision: String,
    /// Per-layer selection recall, depths ascending.
    pub points: Vec<DepthPoint>,
    /// Whole-model recall, depths ascending (empty: none).
    pub model: Vec<DepthPoint>,
}

/// One context's panel.
#[derive(Debug, Clone, PartialEq)]
pub struct DepthPanel {
    /// e.g. "32K tokens"
    pub title: String,
    pub series: Vec<DepthSeries>,
}

/// Everything drawn on the recall-vs-depth chart.
#[derive(Debug, Clone, PartialEq)]
pub struct DepthChart {
    pub title: String,
    pub subtitle: String,
    pub panels: Vec<DepthPanel>,
    /// Drawn as a horizontal dotted line.
    pub threshold: Option<f64>,
}

/// Renders `chart` to `path` (`.png` or `.svg`), atomically.
pub fn render_recall_vs_depth(chart: &DepthChart, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    validate(chart)?;
    render_atomically(chart, path, width, height)
}

fn validate(chart: &DepthChart) -> Result<(), ChartError> {
    let bad = |m: String| Err(ChartError::InvalidInput(m));
    if chart.panels.is_empty() || chart.panels.iter().any(|p| p.series.is_empty()) {
        return bad("recall-vs-depth chart has no panels or an empty panel".into());
    }
    for p in &chart.panels {
        for sr in &p.series {
            for line in [&sr.points, &sr.model] {
                if line.windows(2).any(|w| w[0].depth_percent >= w[1].depth_percent) {
                    return bad(format!("{} k={} {}: depths must be strictly ascending", p.title, sr.topk, sr.precision));
                }
                for d in line {
                    let finite = [d.depth_percent, d.recall, d.ci_low, d.ci_high].iter().all(|v| v.is_finite());
                    let inside = (0.0..=100.0).contains(&d.depth_percent)
                        && [d.recall, d.ci_low, d.ci_high].iter().all(|v| (-1e-9..=1.0 + 1e-9).contains(v))
                        && d.ci_low <= d.recall + 1e-9
                        && d.recall <= d.ci_high + 1e-9;
                    if !finite || !inside {
                        return bad(format!("{} k={} {}: bad point at depth {}", p.title, sr.topk, sr.precision, d.depth_percent));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Rows × columns of `n` panels: side by side up to three, else two columns.
fn grid_shape(n: usize) -> (usize, usize) {
    if n <= 3 {
        (1, n.max(1))
    } else {
        (n.div_ceil(2), 2)
    }
}

impl DepthChart {
    /// Whole-model recall present: it is the main line.
    fn whole(&self) -> bool {
        self.panels.iter().flat_map(|p| &p.series).any(|sr| !sr.model.is_empty())
    }

    /// One depth panel in the box `[x0, x1, y0, y1]`: title, grid, ticks,
    /// the threshold, then bands and lines; the y axis name on the first column.
    fn draw_panel<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        p: &DepthPanel,
        [x0, x1, y0, y1]: [i32; 4],
        first_column: bool,
        enc: &Encoding,
        s: f64,
    ) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let whole = self.whole();
        let line_w = (2.6 * s).round().max(1.0) as u32;
        let layer_w = (1.6 * s).round().max(1.0) as u32;
        let tick_x = text_at(15.0 * s, INK, HPos::Center, VPos::Top);
        let tick_y = text_at(15.0 * s, INK, HPos::Right, VPos::Center);
        let panel_title = text_at(19.0 * s, INK, HPos::Center, VPos::Bottom);
        let desc = text_at(17.0 * s, INK_SOFT, HPos::Center, VPos::Top);
        let xm = |d: f64| x0 + ((d / 100.0) * (x1 - x0) as f64).round() as i32;
        let (ylo, yhi) = (-0.02, 1.04);
        let ym = |v: f64| y1 - (((v - ylo) / (yhi - ylo)) * (y1 - y0) as f64).round() as i32;
        root.draw(&Text::new(p.title.clone(), ((x0 + x1) / 2, y0 - px(8.0)), panel_title.clone())).map_err(draw_err)?;
        for j in 0..=5 {
            let v = j as f64 * 0.2;
            root.draw(&PathElement::new(vec![(x0, ym(v)), (x1, ym(v))], GRID.stroke_width(1))).map_err(draw_err)?;
            root.draw(&Text::new(format!("{v:.1}"), (x0 - px(6.0), ym(v)), tick_y.clone())).map_err(draw_err)?;
        }
        for j in 0..=5 {
            let d = j as f64 * 20.0;
            root.draw(&PathElement::new(vec![(xm(d), y0), (xm(d), y1)], GRID.stroke_width(1))).map_err(draw_err)?;
            root.draw(&Text::new(format!("{d:.0} %"), (xm(d), y1 + px(6.0)), tick_x.clone())).map_err(draw_err)?;
        }
        root.draw(&Rectangle::new([(x0, y0), (x1, y1)], INK_SOFT.stroke_width(1))).map_err(draw_err)?;
        root.draw(&Text::new("needle depth", ((x0 + x1) / 2, y1 + px(30.0)), desc.clone())).map_err(draw_err)?;
        if first_column {
            let label = if whole { "recall (solid: whole model, dashed: per layer)" } else { "per-layer selection recall" };
            root.draw(&Text::new(label, (x0 - px(54.0), (y0 + y1) / 2), text_vertical(16.0 * s, INK_SOFT))).map_err(draw_err)?;
        }
        if let Some(t) = self.threshold {
            let y = ym(t) as f64;
            draw_dashed(root, &[(x0 as f64, y), (x1 as f64, y)], Dash::Dotted, s * 1.2, INK_SOFT.stroke_width(layer_w))?;
        }
        let to_px = |pts: &[DepthPoint]| pts.iter().map(|d| (xm(d.depth_percent) as f64, ym(d.recall) as f64)).collect::<Vec<_>>();
        // bands first, then lines
        for sr in &p.series {
            let look = enc.look_of(sr.topk, &sr.precision);
            let banded = if whole { &sr.model } else { &sr.points };
            if banded.len() >= 2 {
                let mut poly: Vec<(i32, i32)> = banded.iter().map(|d| (xm(d.depth_percent), ym(d.ci_high))).collect();
                poly.extend(banded.iter().rev().map(|d| (xm(d.depth_percent), ym(d.ci_low))));
                root.draw(&Polygon::new(poly, look.color.mix(0.16).filled())).map_err(draw_err)?;
            }
        }
        // A main line under identical later ones is drawn wider, so it shows.
        let mains: Vec<(u32, Vec<(f64, f64)>)> =
            p.series.iter().map(|sr| (sr.topk, to_px(if whole { &sr.model } else { &sr.points }))).collect();
        let covered = covered_by_later(&mains, 1.5 * s);
        for ((sr, (_, pts)), &under) in p.series.iter().zip(&mains).zip(&covered) {
            let look = enc.look_of(sr.topk, &sr.precision);
            let wider = 3.0 * s * under as f64;
            if whole {
                let pts = to_px(&sr.points);
                draw_dashed(root, &pts, Dash::Dashed, s, look.color.stroke_width(layer_w))?;
                for &(x, y) in &pts {
                    draw_marker(root, look.marker, (x as i32, y as i32), 3.5 * s, look.color, s)?;
                }
            }
            let dash = if whole { Dash::Solid } else { look.dash };
            draw_dashed(root, pts, dash, s, look.color.stroke_width(line_w + wider.round() as u32))?;
            for &(x, y) in pts {
                draw_marker(root, look.marker, (x as i32, y as i32), 5.5 * s + wider / 2.0, look.color, s)?;
            }
        }
        Ok(())
    }

    /// The legend column from (lx, y): one entry per (k, precision) in
    /// `pairs`, then the line keys and the threshold.
    fn draw_legend<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        enc: &Encoding,
        pairs: &[(u32, String)],
        (lx, mut y): (i32, i32),
        s: f64,
    ) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let whole = self.whole();
        let line_w = (2.6 * s).round().max(1.0) as u32;
        let layer_w = (1.6 * s).round().max(1.0) as u32;
        let legend_style = text_at(16.0 * s, INK, HPos::Left, VPos::Center);
        let swatch = px(52.0);
        let line_keys: Vec<&str> =
            if whole { vec!["whole-model recall, 95 % band", "per-layer selection recall"] } else { vec!["95 % confidence band"] };
        let entry = px(30.0);
        for (k, p) in pairs {
            let look = enc.look_of(*k, p);
            let dash = if whole { Dash::Solid } else { look.dash };
            draw_dashed(root, &[(lx as f64, y as f64), ((lx + swatch) as f64, y as f64)], dash, s, look.color.stroke_width(line_w))?;
            draw_marker(root, look.marker, (lx + swatch / 2, y), 5.5 * s, look.color, s)?;
            root.draw(&Text::new(format!("k={k}, {p}"), (lx + swatch + px(12.0), y), legend_style.clone())).map_err(draw_err)?;
            y += entry;
        }
        y += px(10.0);
        for (i, key) in line_keys.iter().enumerate() {
            if i == 0 {
                root.draw(&Rectangle::new([(lx, y - px(8.0)), (lx + swatch, y + px(8.0))], INK_SOFT.mix(0.2).filled()))
                    .map_err(draw_err)?;
            }
            if whole {
                let (dash, width) = if i == 0 { (Dash::Solid, line_w) } else { (Dash::Dashed, layer_w) };
                draw_dashed(root, &[(lx as f64, y as f64), ((lx + swatch) as f64, y as f64)], dash, s, INK_SOFT.stroke_width(width))?;
                if i == 1 {
                    draw_marker(root, Marker::Circle, (lx + swatch / 2, y), 3.5 * s, INK_SOFT, s)?;
                }
            }
            root.draw(&Text::new(key.to_string(), (lx + swatch + px(12.0), y), legend_style.clone())).map_err(draw_err)?;
            y += entry;
        }
        if let Some(t) = self.threshold {
            draw_dashed(
                root,
                &[(lx as f64, y as f64), ((lx + swatch) as f64, y as f64)],
                Dash::Dotted,
                s * 1.2,
                INK_SOFT.stroke_width(layer_w),
            )?;
            root.draw(&Text::new(format!("recall threshold {t:.2}"), (lx + swatch + px(12.0), y), legend_style.clone()))
                .map_err(draw_err)?;
        }
        Ok(())
    }
}

impl Painter for DepthChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        let (w, h) = root.dim_in_pixel();
        let s = ui_scale(w, h);
        let px = |v: f64| (v * s).round() as i32;
        root.fill(&WHITE).map_err(draw_err)?;
        let all = self.panels.iter().flat_map(|p| &p.series);
        let enc = Encoding::from_pairs(all.clone().map(|sr| (sr.topk, sr.precision.as_str())), &[]);
        let whole = all.clone().any(|sr| !sr.model.is_empty());

        let title_style = text_at(30.0 * s, INK, HPos::Left, VPos::Top);
        let subtitle_style = text_at(18.0 * s, INK_SOFT, HPos::Left, VPos::Top);
        let legend_style = text_at(16.0 * s, INK, HPos::Left, VPos::Center);
        let margin = px(24.0);
        let title_h = root.estimate_text_size("Ag", &title_style).map_err(draw_err)?.1 as i32;
        root.draw(&Text::new(self.title.clone(), (margin, margin), title_style)).map_err(draw_err)?;
        // A subtitle wider than the image wraps at its separators.
        let line_h = root.estimate_text_size("Ag", &subtitle_style).map_err(draw_err)?.1 as i32 + px(6.0);
        let fit = w as i32 - 2 * margin;
        let lines = wrap_at_separators(&self.subtitle, fit, |t| root.estimate_text_size(t, &subtitle_style).map_or(0, |(tw, _)| tw as i32));
        for (i, line) in lines.iter().enumerate() {
            let y = margin + title_h + px(10.0) + i as i32 * line_h;
            root.draw(&Text::new(line.clone(), (margin, y), subtitle_style.clone())).map_err(draw_err)?;
        }

        // ---- legend entries (right column): one per (k, precision), then line keys
        let mut pairs: Vec<(u32, String)> = Vec::new();
        for sr in all.clone() {
            if !pairs.iter().any(|(k, p)| *k == sr.topk && *p == sr.precision) {
                pairs.push((sr.topk, sr.precision.clone()));
            }
        }
        pairs.sort_by_key(|(k, p)| (*k, enc.precisions.iter().position(|q| q == p)));
        let mut keys: Vec<String> = pairs.iter().map(|(k, p)| format!("k={k}, {p}")).collect();
        let line_keys: Vec<&str> =
            if whole { vec!["whole-model recall, 95 % band", "per-layer selection recall"] } else { vec!["95 % confidence band"] };
        keys.extend(line_keys.iter().map(|k| k.to_string()));
        if let Some(t) = self.threshold {
            keys.push(format!("recall threshold {t:.2}"));
        }
        let swatch = px(52.0);
        let mut text_w = 0;
        for k in &keys {
            text_w = text_w.max(root.estimate_text_size(k, &legend_style).map_err(draw_err)?.0 as i32);
        }
        let legend_w = swatch + px(12.0) + text_w + px(30.0);

        // ---- panels
        let top = margin + title_h + px(10.0) + px(40.0) + (lines.len() as i32 - 1).max(0) * line_h;
        let (rows, cols) = grid_shape(self.panels.len());
        let area_right = w as i32 - margin - legend_w;
        let cell_w = (area_right - margin) / cols as i32;
        let cell_h = (h as i32 - margin - top) / rows as i32;
        for (i, p) in self.panels.iter().enumerate() {
            let (r, c) = ((i / cols) as i32, (i % cols) as i32);
            let x0 = margin + c * cell_w + px(70.0);
            let x1 = margin + (c + 1) * cell_w - px(20.0);
            let y0 = top + r * cell_h + px(34.0);
            let y1 = top + (r + 1) * cell_h - px(64.0);
            if x1 - x0 < 20 || y1 - y0 < 20 {
                return Err(ChartError::InvalidInput("image too small for this many depth panels".into()));
            }
            self.draw_panel(root, p, [x0, x1, y0, y1], c == 0, &enc, s)?;
        }

        self.draw_legend(root, &enc, &pairs, (area_right + px(16.0), top + px(40.0)), s)
    }
}

// The chart in a sweep: built from the cells, and its entry in the registry.

use super::compare::estimate;
use crate::base::units::tokens_label;
use crate::report::meta::{draw, find, Grid, ReportMeta, SweepChart};
use crate::run::cell::CellResult;

/// Panels of the recall-vs-depth chart: the longest contexts.
pub const DEPTH_CHART_MAX_PANELS: usize = 4;

/// Recall vs depth, one panel per context (the longest
/// [`DEPTH_CHART_MAX_PANELS`]), one line per (k, precision).
pub fn recall_vs_depth_chart(meta: &ReportMeta, cells: &[CellResult]) -> DepthChart {
    let g = Grid::of(cells);
    let trials = cells.first().map_or(0, |c| c.trials);
    let shown = &g.contexts[g.contexts.len().saturating_sub(DEPTH_CHART_MAX_PANELS)..];
    let point = |d: f64, r: Option<f64>, lo: Option<f64>, hi: Option<f64>| {
        let e = estimate(r?, lo?, hi?);
        Some(DepthPoint { depth_percent: d, recall: e.value, ci_low: e.low, ci_high: e.high })
    };
    let panels = shown
        .iter()
        .map(|&ctx| {
            let mut series = Vec::new();
            for &k in &g.topks {
                for p in &g.precisions {
                    let mine: Vec<&CellResult> = g.depths.iter().filter_map(|&d| find(cells, d, ctx, k, p)).collect();
                    let points: Vec<DepthPoint> =
                        mine.iter().filter_map(|c| point(c.depth_percent, Some(c.recall), Some(c.ci_low), Some(c.ci_high))).collect();
                    let model =
                        mine.iter().filter_map(|c| point(c.depth_percent, c.model_recall, c.model_ci_low, c.model_ci_high)).collect();
                    if !points.is_empty() {
                        series.push(DepthSeries { topk: k as u32, precision: p.clone(), points, model });
                    }
                }
            }
            DepthPanel { title: format!("{} tokens", tokens_label(ctx)), series }
        })
        .collect::<Vec<_>>();
    let whole = panels.iter().flat_map(|p| &p.series).any(|s| !s.model.is_empty());
    let which = if shown.len() < g.contexts.len() {
        format!("the longest {} of {} contexts", shown.len(), g.contexts.len())
    } else {
        "every context".to_string()
    };
    let title = if whole {
        "Whole-model recall (solid) and per-layer selection recall (dashed) vs needle depth"
    } else {
        "Per-layer selection recall vs needle depth"
    };
    let stack = meta.stack_label().filter(|_| whole).map_or_else(String::new, |s| format!(" · whole model: {s}"));
    DepthChart {
        title: format!("{title} · {}", meta.preset),
        subtitle: format!(
            "{which} · {} · {}, {} tokens · {trials} trials per point · Wilson 95 % bands · seed {}{stack}",
            meta.physics_label(),
            meta.needle,
            meta.needle_tokens,
            meta.seed
        ),
        panels,
        threshold: Some(meta.threshold),
    }
}

pub const CHART: SweepChart = SweepChart {
    stem: "recall_vs_depth",
    when: "three depths or more",
    caption: "Per-layer selection recall vs needle depth (0 % = start of the context), one panel per context (the longest four at most), one line per (k, precision) with Wilson 95 % bands; the dotted line is the recall threshold.",
    caption_whole: Some("Whole-model recall (solid lines, Wilson 95 % bands) and per-layer selection recall (dashed) vs needle depth (0 % = start of the context), one panel per context (the longest four at most), one colour per k, one marker per precision; the dotted line is the recall threshold."),
    predicted: None,
    whole_model_only: false,
    render: |c, dir, ext| {
        if !c.by_depth() {
            return Ok(Vec::new());
        }
        let chart = recall_vs_depth_chart(c.meta, &c.cells);
        let h = if chart.panels.len() > 3 { 1400 } else { 1000 };
        draw(dir, "recall_vs_depth", ext, |path| Ok(render_recall_vs_depth(&chart, path, 1600, h)?))
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    fn line(shift: f64) -> Vec<DepthPoint> {
        (0..=10)
            .map(|i| {
                let r: f64 = (0.9 - shift - 0.03 * (i as f64 - 5.0).abs()).clamp(0.0, 1.0);
                DepthPoint { depth_percent: i as f64 * 10.0, recall: r, ci_low: (r - 0.05).max(0.0), ci_high: (r + 0.05).min(1.0) }
            })
            .collect()
    }

    #[test]
    fn renders_panels_and_refuses_bad_points() {
        let dir = tempfile::tempdir().unwrap();
        let panel = |t: &str| DepthPanel {
            title: t.into(),
            series: vec![
                DepthSeries { topk: 512, precision: "bf16".into(), points: line(0.1), model: line(0.0) },
                DepthSeries { topk: 512, precision: "fp8".into(), points: line(0.2), model: line(0.05) },
            ],
        };
        let mut c = DepthChart {
            title: "t".into(),
            subtitle: "s".into(),
            panels: vec![panel("8K"), panel("16K"), panel("32K"), panel("64K")],
            threshold: Some(0.9),
        };
        render_recall_vs_depth(&c, &dir.path().join("d.png"), 1600, 1000).unwrap();
        // A subtitle wider than the image wraps (it ran off the right edge).
        let long = DepthChart { subtitle: ["RoPE v4, pooling on"; 12].join(" · "), ..c.clone() };
        render_recall_vs_depth(&long, &dir.path().join("long.svg"), 1600, 1000).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("long.svg")).unwrap();
        assert!(svg.lines().filter(|l| l.contains("RoPE v4, pooling on")).count() >= 2, "the subtitle is one line");
        c.panels[0].series[0].points.swap(0, 1);
        assert!(matches!(render_recall_vs_depth(&c, &dir.path().join("e.png"), 1600, 1000), Err(ChartError::InvalidInput(_))));
        assert!(!dir.path().join("e.png").exists());
    }
}

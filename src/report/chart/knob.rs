//! Recall against a model knob's value (`sweep --vary`): one panel per
//! context, one colour per (k, precision); whole-model recall as a solid
//! line with its Wilson band, per-layer recall dashed, as on the recall
//! chart. The x axis is logarithmic when every value is positive and they
//! span a factor of 4 or more (needle strengths 0.5, 1, 2, 4).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::canvas::{draw_err, render_atomically, ChartError, Painter};
use super::style::{covered_by_later, dash_polyline, palette_color, text, text_at, ui_scale, Dash, GRID, INK, INK_SOFT};

/// One line: a (k, precision) across the knob's values.
#[derive(Debug, Clone, PartialEq)]
pub struct KnobSeries {
    pub label: String,
    /// Palette index (the same (k, precision) keeps its colour across panels).
    pub color: usize,
    /// (value, recall, Wilson low, high) in value order.
    pub points: Vec<(f64, f64, f64, f64)>,
    /// Whole-model recall (solid, banded) or per-layer recall (dashed).
    pub whole_model: bool,
}

/// One context's panel.
#[derive(Debug, Clone, PartialEq)]
pub struct KnobPanel {
    pub title: String,
    pub series: Vec<KnobSeries>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KnobChart {
    pub title: String,
    pub subtitle: String,
    /// The knob as the x axis names it.
    pub x_label: String,
    /// What the y axis shows ("recall" for a knob sweep).
    pub y_label: String,
    /// The line-style key after the legend; None: whole model vs per layer.
    pub key: Option<String>,
    pub panels: Vec<KnobPanel>,
}

impl KnobChart {
    fn values(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self.panels.iter().flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0))).collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }

    fn log_x(&self) -> bool {
        let v = self.values();
        matches!((v.first(), v.last()), (Some(&lo), Some(&hi)) if lo > 0.0 && hi / lo >= 4.0)
    }
}

/// Renders `chart` to `path` (`.png` or `.svg`), atomically.
pub fn render_knob(chart: &KnobChart, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    if chart.panels.is_empty() || chart.panels.iter().any(|p| p.series.is_empty()) {
        return Err(ChartError::InvalidInput("knob chart has an empty panel".into()));
    }
    for s in chart.panels.iter().flat_map(|p| &p.series) {
        for &(x, r, lo, hi) in &s.points {
            if !x.is_finite() || [r, lo, hi].iter().any(|v| !v.is_finite() || !(0.0..=1.0).contains(v)) {
                return Err(ChartError::InvalidInput(format!("{}: a point outside the chart ({x}, {r})", s.label)));
            }
        }
    }
    if chart.values().len() < 2 {
        return Err(ChartError::InvalidInput("knob chart needs two or more values".into()));
    }
    render_atomically(chart, path, width, height)
}

/// Tick label of a knob value: three significant digits, trailing zeros
/// dropped (0.0003 stays "0.0003": three decimals printed it "0").
fn value_label(v: f64) -> String {
    let decimals = if v == 0.0 || !v.is_finite() { 0 } else { (2 - v.abs().log10().floor() as i64).clamp(0, 12) as usize };
    let t = format!("{v:.decimals$}");
    if t.contains('.') {
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        t
    }
}

/// Which tick labels to print, ticks given as (pixel x, label width) in
/// ascending x: greedily from the left, a label only where it clears the
/// last one printed by `gap` pixels (values may crowd: 73, 82, 94).
fn printed_ticks(ticks: &[(i32, i32)], gap: i32) -> Vec<bool> {
    let mut right_end = i32::MIN;
    ticks
        .iter()
        .map(|&(x, w)| {
            let left = x - w / 2;
            let fits = right_end == i32::MIN || left >= right_end + gap;
            if fits {
                right_end = x + w - w / 2;
            }
            fits
        })
        .collect()
}

impl Painter for KnobChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        let (w, h) = root.dim_in_pixel();
        let s = ui_scale(w, h);
        let px = |v: f64| (v * s).round() as i32;
        root.fill(&WHITE).map_err(draw_err)?;
        root.draw(&Text::new(self.title.clone(), (px(20.0), px(16.0)), text(26.0 * s, INK))).map_err(draw_err)?;
        root.draw(&Text::new(self.subtitle.clone(), (px(20.0), px(52.0)), text(16.0 * s, INK_SOFT))).map_err(draw_err)?;
        let legend_h = px(34.0);
        let body = root.margin(px(90.0) as u32, legend_h as u32 + px(10.0) as u32, px(10.0) as u32, px(20.0) as u32);
        let panels = body.split_evenly((1, self.panels.len()));
        for (panel, area) in self.panels.iter().zip(&panels) {
            self.paint_panel(root, area, panel, s)?;
        }
        self.paint_legend(root, h as i32 - legend_h, s)
    }
}

impl KnobChart {
    fn paint_panel<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        area: &DrawingArea<DB, Shift>,
        panel: &KnobPanel,
        s: f64,
    ) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let log_x = self.log_x();
        let values = self.values();
        let fx = |v: f64| if log_x { v.log2() } else { v };
        let (x_lo, x_hi) = (fx(values[0]), fx(values[values.len() - 1]));
        let pad = (x_hi - x_lo) * 0.04;
        let mut c = ChartBuilder::on(area)
            .caption(&panel.title, text(20.0 * s, INK))
            .margin(px(8.0) as u32)
            .x_label_area_size(px(56.0) as u32)
            .y_label_area_size(px(64.0) as u32)
            .build_cartesian_2d((x_lo - pad)..(x_hi + pad), 0.0..1.02)
            .map_err(draw_err)?;
        c.configure_mesh()
            .x_labels(0)
            .y_labels(6)
            .y_label_formatter(&|y| format!("{y:.1}"))
            .x_desc(self.x_label.clone())
            .y_desc(self.y_label.clone())
            .label_style(text(15.0 * s, INK))
            .axis_desc_style(text(16.0 * s, INK))
            .light_line_style(GRID.mix(0.0))
            .bold_line_style(GRID)
            .draw()
            .map_err(draw_err)?;
        // The knob's own values as ticks (log axes get no round numbers),
        // labelled where the labels do not run together.
        let (_, y0) = c.backend_coord(&(x_lo, 0.0));
        let tick_style = text_at(14.0 * s, INK, HPos::Center, VPos::Top);
        let mut ticks = Vec::new();
        for &v in &values {
            let (x, _) = c.backend_coord(&(fx(v), 0.0));
            let (tw, _) = root.estimate_text_size(&value_label(v), &tick_style).map_err(draw_err)?;
            ticks.push((x, tw as i32));
        }
        for ((&v, &(x, _)), print) in values.iter().zip(&ticks).zip(printed_ticks(&ticks, px(8.0))) {
            root.draw(&PathElement::new(vec![(x, y0), (x, y0 + px(6.0))], INK.stroke_width(1))).map_err(draw_err)?;
            if print {
                root.draw(&Text::new(value_label(v), (x, y0 + px(9.0)), tick_style.clone())).map_err(draw_err)?;
            }
        }
        let lines: Vec<(usize, Vec<(f64, f64)>)> = panel
            .series
            .iter()
            .map(|sr| {
                let pts = sr.points.iter().map(|p| {
                    let (x, y) = c.backend_coord(&(fx(p.0), p.1));
                    (x as f64, y as f64)
                });
                (sr.color, pts.collect())
            })
            .collect();
        // Only the main lines (whole model where there is one) widen.
        let any_whole = panel.series.iter().any(|sr| sr.whole_model);
        let main: Vec<(usize, Vec<(f64, f64)>)> =
            lines.iter().zip(&panel.series).filter(|(_, sr)| sr.whole_model || !any_whole).map(|(l, _)| l.clone()).collect();
        let mut main_covered = covered_by_later(&main, 1.5 * s).into_iter();
        let covered: Vec<usize> =
            panel.series.iter().map(|sr| if sr.whole_model || !any_whole { main_covered.next().unwrap_or(0) } else { 0 }).collect();
        for sr in &panel.series {
            if sr.whole_model {
                let color = palette_color(sr.color);
                let mut band: Vec<(f64, f64)> = sr.points.iter().map(|p| (fx(p.0), p.3)).collect();
                band.extend(sr.points.iter().rev().map(|p| (fx(p.0), p.2)));
                c.draw_series(std::iter::once(Polygon::new(band, color.mix(0.14).filled()))).map_err(draw_err)?;
            }
        }
        for ((sr, (_, pts)), &under) in panel.series.iter().zip(&lines).zip(&covered) {
            let color = palette_color(sr.color);
            // Wider by 3 px for each colour drawn over it.
            let wider = 3.0 * under as f64;
            let (dash, width) = if sr.whole_model { (Dash::Solid, 3.0) } else { (Dash::Dashed, 2.0) };
            for seg in dash_polyline(pts, dash.pattern(), s) {
                if seg.len() >= 2 {
                    root.draw(&PathElement::new(seg, color.stroke_width(((width + wider) * s).round().max(1.0) as u32)))
                        .map_err(draw_err)?;
                }
            }
            for &(x, y) in pts {
                let marker = (x.round() as i32, y.round() as i32);
                let r = px(if sr.whole_model { 4.5 } else { 3.0 } + wider / 2.0);
                if sr.whole_model {
                    root.draw(&Circle::new(marker, r, color.filled())).map_err(draw_err)?;
                } else {
                    root.draw(&Circle::new(marker, r, color.stroke_width(2))).map_err(draw_err)?;
                }
            }
        }
        Ok(())
    }

    /// One entry per colour along the bottom at `y`, then the line styles.
    fn paint_legend<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, y: i32, s: f64) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let mut legend: Vec<(usize, &str)> = Vec::new();
        for sr in self.panels.iter().flat_map(|p| &p.series) {
            if !legend.iter().any(|(c, _)| *c == sr.color) {
                legend.push((sr.color, &sr.label));
            }
        }
        let mut x = px(24.0);
        for (color, label) in &legend {
            root.draw(&Rectangle::new([(x, y + px(4.0)), (x + px(22.0), y + px(18.0))], palette_color(*color).filled()))
                .map_err(draw_err)?;
            root.draw(&Text::new(label.to_string(), (x + px(30.0), y + px(2.0)), text(15.0 * s, INK))).map_err(draw_err)?;
            let (tw, _) = root.estimate_text_size(label, &text(15.0 * s, INK)).map_err(draw_err)?;
            x += px(50.0) + tw as i32;
        }
        let whole = self.panels.iter().flat_map(|p| &p.series).any(|s| s.whole_model);
        let key = match &self.key {
            Some(k) => k.as_str(),
            None if whole => "— whole model (95 % band)   - - per layer",
            None => "- - per-layer selection recall",
        };
        root.draw(&Text::new(key, (x + px(20.0), y + px(2.0)), text(15.0 * s, INK_SOFT))).map_err(draw_err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(values: &[f64]) -> KnobChart {
        let series = |whole: bool, shift: f64| KnobSeries {
            label: "k=512 bf16".into(),
            color: 0,
            points: values.iter().enumerate().map(|(i, &v)| (v, (0.2 + 0.2 * i as f64 - shift).max(0.0), 0.0, 1.0)).collect(),
            whole_model: whole,
        };
        KnobChart {
            title: "t".into(),
            subtitle: "s".into(),
            x_label: "needle.strength".into(),
            y_label: "recall".into(),
            key: None,
            panels: vec![
                KnobPanel { title: "8K".into(), series: vec![series(true, 0.0), series(false, 0.1)] },
                KnobPanel { title: "32K".into(), series: vec![series(true, 0.1), series(false, 0.2)] },
            ],
        }
    }

    // Crowded values (the identifiability chart's 73, 82, 94) keep only
    // labels that clear each other; spread ones keep all.
    #[test]
    fn tick_labels_do_not_run_together() {
        assert_eq!(printed_ticks(&[(100, 20), (200, 20), (300, 20)], 8), [true, true, true]);
        assert_eq!(printed_ticks(&[(100, 20), (115, 20), (135, 20), (200, 20)], 8), [true, false, true, true]);
        assert_eq!(printed_ticks(&[], 8), Vec::<bool>::new());
    }

    #[test]
    fn value_labels_keep_small_values() {
        for (v, label) in
            [(0.0003, "0.0003"), (0.00116, "0.00116"), (0.01, "0.01"), (0.5, "0.5"), (2.0, "2"), (10000.0, "10000"), (0.0, "0")]
        {
            assert_eq!(value_label(v), label, "{v}");
        }
    }

    #[test]
    fn axis_is_logarithmic_only_for_wide_positive_ranges() {
        assert!(chart(&[0.5, 1.0, 2.0, 4.0]).log_x());
        assert!(!chart(&[1.0, 2.0, 3.0]).log_x());
        assert!(!chart(&[0.0, 1.0, 8.0]).log_x());
    }

    #[test]
    fn renders_png_and_svg_and_refuses_bad_points() {
        let dir = tempfile::tempdir().unwrap();
        let c = chart(&[0.5, 1.0, 2.0, 4.0]);
        for name in ["k.png", "k.svg"] {
            let path = dir.path().join(name);
            render_knob(&c, &path, 1600, 900).unwrap();
            assert!(std::fs::metadata(&path).unwrap().len() > 1000);
        }
        let mut bad = c.clone();
        bad.panels[0].series[0].points[0].1 = 1.5;
        assert!(render_knob(&bad, &dir.path().join("b.png"), 1600, 900).is_err());
        assert!(render_knob(&chart(&[1.0]), &dir.path().join("one.png"), 1600, 900).is_err());
    }
}

//! The recall-vs-context painter: frame, context axis, legend, coverage
//! labels, guides, bands and lines.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::data::{validate, RecallChart, RecallPoint};
use super::look::{draw_dashed, draw_marker, text_color, Encoding, SeriesLook};
use crate::report::chart::canvas::{draw_err, render_atomically, ChartError, Painter};
use crate::report::chart::style::{
    format_thousands, log2_context_range, log2_token_tick, text, text_at, ui_scale, Dash, Marker, TickedAxis, TickedChart, GRID, INK,
    INK_SOFT,
};

const Y_MIN: f64 = -0.02;
const Y_MAX: f64 = 1.06;
/// Label every other power of two above this many ticks.
const MAX_LABELLED_TICKS: usize = 12;

/// A coverage-limit label placed in the header strip above the plot.
pub(super) struct CoverageLabel {
    pub(super) k: u32,
    pub(super) x: i32,
    pub(super) text: String,
    pub(super) width: i32,
    /// 0 = row right above the plot, increasing upwards.
    pub(super) row: usize,
}

/// Assigns rows to left-aligned labels (text starts at the line and runs
/// right) so that no two labels overlap and no leader line (running down
/// from a label to the plot) crosses a label in a lower row.
///
/// Processing right-to-left, a label must sit above every already placed
/// label whose line falls inside its own text span.
pub(super) fn assign_label_rows(labels: &mut [CoverageLabel], gap: i32) {
    labels.sort_by_key(|l| std::cmp::Reverse(l.x));
    for i in 0..labels.len() {
        let (placed, rest) = labels.split_at_mut(i);
        let cur = &mut rest[0];
        let right = cur.x + cur.width + gap;
        cur.row = placed.iter().filter(|p| p.x <= right).map(|p| p.row + 1).max().unwrap_or(0);
    }
}

/// Scale, encoding, fonts and strokes shared by every part of one recall chart.
struct Frame {
    s: f64,
    enc: Encoding,
    /// Whole-model recall present: it is the main line (module docs).
    whole: bool,
    /// Per-layer lines (and predictions) drawn: always without whole-model
    /// recall, and beside it unless it is drawn alone.
    layers: bool,
    title_style: TextStyle<'static>,
    subtitle_style: TextStyle<'static>,
    legend_style: TextStyle<'static>,
    legend_head_style: TextStyle<'static>,
    cov_size: f64,
    line_w: u32,
    marker_r: f64,
    predicted_w: u32,
    layer_w: u32,
    layer_marker_r: f64,
    edge_w: u32,
    cov_w: u32,
    swatch_w: i32,
    entry_h: i32,
    row_h: i32,
}

impl Frame {
    fn new(chart: &RecallChart, s: f64) -> Self {
        let width = |v: f64| (v * s).round().max(1.0) as u32;
        Frame {
            s,
            enc: Encoding::new(chart),
            whole: chart.series.iter().any(|sr| !sr.model.is_empty()),
            layers: !chart.whole_model_only || chart.series.iter().all(|sr| sr.model.is_empty()),
            title_style: text_at(30.0 * s, INK, HPos::Left, VPos::Top),
            subtitle_style: text_at(18.0 * s, INK_SOFT, HPos::Left, VPos::Top),
            legend_style: text_at(16.0 * s, INK, HPos::Left, VPos::Center),
            legend_head_style: text_at(17.0 * s, INK_SOFT, HPos::Left, VPos::Center),
            cov_size: 15.0 * s,
            line_w: width(2.6),
            marker_r: 5.5 * s,
            predicted_w: width(1.4),
            layer_w: width(1.6),
            layer_marker_r: 3.5 * s,
            edge_w: width(1.2),
            cov_w: width(1.8),
            swatch_w: (52.0 * s).round() as i32,
            entry_h: (30.0 * s).round() as i32,
            row_h: (24.0 * s).round() as i32,
        }
    }

    fn px(&self, v: f64) -> i32 {
        (v * self.s).round() as i32
    }

    /// Sets the legend `k` times its size (text and spacing).
    fn shrink_legend(&mut self, k: f64) {
        let s = self.s * k;
        self.legend_style = text_at(16.0 * s, INK, HPos::Left, VPos::Center);
        self.legend_head_style = text_at(17.0 * s, INK_SOFT, HPos::Left, VPos::Center);
        self.entry_h = (30.0 * s).round() as i32;
    }
}

/// The log2 context axis: its range, ticks and which ticks carry labels.
struct ContextAxis {
    /// The shortest context of any point.
    shortest: u64,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    e_first: i64,
    label_every: usize,
}

impl ContextAxis {
    fn new(chart: &RecallChart) -> Self {
        let contexts = chart.series.iter().flat_map(|s| s.points.iter().chain(&s.model)).map(|p| p.context_tokens);
        let shortest = contexts.clone().min().unwrap_or(u64::MAX);
        let (lo, hi, ticks) = log2_context_range(contexts);
        let e_first = lo.ceil() as i64;
        let label_every = if ticks.len() > MAX_LABELLED_TICKS { 2 } else { 1 };
        ContextAxis { shortest, lo, hi, ticks, e_first, label_every }
    }

    fn shows(&self, c: u64) -> bool {
        let l = (c as f64).log2();
        l >= self.lo && l <= self.hi
    }
}

/// The legend's entries (outside the plot, right) and the width they need.
struct Legend {
    head: String,
    /// Series indices in legend order (by k, then precision).
    order: Vec<usize>,
    series_labels: Vec<String>,
    /// Line and band keys first (`line_keys` of them), then coverage and threshold.
    extra_labels: Vec<String>,
    line_keys: usize,
    assumption_band: bool,
    predicted_label: &'static str,
    off_axis: Vec<String>,
    width: i32,
}

impl Legend {
    /// Its entries at most: head, series, keys (the prediction's counted), off-axis notes.
    fn rows(&self) -> usize {
        1 + self.series_labels.len() + self.extra_labels.len() + 1 + self.off_axis.len()
    }
}

impl RecallChart {
    /// The legend's series entries in legend order (by k, then precision):
    /// the series' index and its label, with its effective context.
    pub(super) fn legend_entries(&self) -> Vec<(usize, String)> {
        let f = Frame::new(self, 1.0);
        let shortest = ContextAxis::new(self).shortest;
        let mut order: Vec<usize> = (0..self.series.len()).collect();
        order.sort_by_key(|&i| {
            let sr = &self.series[i];
            (sr.topk, f.enc.precisions.iter().position(|p| *p == sr.precision))
        });
        order
            .into_iter()
            .map(|i| {
                let sr = &self.series[i];
                let base = format!("k={}, {}", sr.topk, sr.precision);
                let label = match self.effective.iter().find(|e| e.topk == sr.topk && e.precision == sr.precision) {
                    Some(e) if f.whole && !f.layers => format!("{base} · {}", e.model_only_label(shortest)),
                    Some(e) if f.whole => format!("{base} · {}", e.model_label(shortest)),
                    Some(e) => format!("{base} · {}", e.label(shortest)),
                    None => base,
                };
                (i, label)
            })
            .collect()
    }

    fn legend<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, f: &Frame, axis: &ContextAxis) -> Result<Legend, ChartError> {
        let whole = f.whole;
        let (order, series_labels): (Vec<usize>, Vec<String>) = self.legend_entries().into_iter().unzip();
        let off_axis: Vec<String> = self
            .coverage_limits
            .iter()
            .filter(|&&(_, c)| !axis.shows(c))
            .map(|&(k, c)| format!("k={k}: {} (off axis)", format_thousands(c)))
            .collect();
        let assumption_band = whole && self.series.iter().any(|sr| sr.model_band.len() > 1);
        let mut extra_labels = if whole {
            let mut labels = vec!["whole-model recall, 95 % band".to_string()];
            if f.layers {
                labels.push("per-layer selection recall".to_string());
            }
            if assumption_band {
                labels.push("dotted: whole model as layers share more / less".to_string());
            }
            labels
        } else {
            vec!["95 % confidence band".to_string()]
        };
        let line_keys = extra_labels.len();
        if !self.coverage_limits.is_empty() {
            extra_labels.push("coverage limit k·c+W".to_string());
        }
        if let Some(t) = self.effective_threshold {
            extra_labels.push(format!("recall threshold {t:.2}"));
        }
        let predicted_label = if whole { "predicted per-layer (analytic)" } else { "predicted (analytic)" };
        let mut text_w = 0i32;
        // (The short prediction label never set the width before whole-model recall.)
        let measured_predicted = whole.then(|| predicted_label.to_string());
        for l in series_labels.iter().chain(&extra_labels).chain(&off_axis).chain(&measured_predicted) {
            let (tw, _) = root.estimate_text_size(l, &f.legend_style).map_err(draw_err)?;
            text_w = text_w.max(tw as i32);
        }
        let head = match &self.effective_at {
            _ if self.effective.is_empty() => "series (k, precision)".to_string(),
            Some(at) => format!("series (k, precision) · effective context at {at}"),
            None => "series (k, precision) · effective context".to_string(),
        };
        let (head_w, _) = root.estimate_text_size(&head, &f.legend_head_style).map_err(draw_err)?;
        text_w = text_w.max(head_w as i32 - f.swatch_w - f.px(12.0));
        let width = f.swatch_w + f.px(12.0) + text_w + f.px(40.0);
        Ok(Legend { head, order, series_labels, extra_labels, line_keys, assumption_band, predicted_label, off_axis, width })
    }

    /// The labels of the coverage limits on the axis, with rows assigned;
    /// they need the x mapping only, which does not depend on the top margin.
    fn coverage_labels<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        probe: &TickedChart<'_, DB>,
        f: &Frame,
        axis: &ContextAxis,
    ) -> Result<Vec<CoverageLabel>, ChartError> {
        let mut labels: Vec<CoverageLabel> = Vec::new();
        let cov_style = text(f.cov_size, INK);
        for &(k, c) in &self.coverage_limits {
            if !axis.shows(c) {
                continue;
            }
            let x = probe.backend_coord(&((c as f64).log2(), 0.0)).0;
            let text = format!("k={k} coverage {} tokens", format_thousands(c));
            let (tw, _) = root.estimate_text_size(&text, &cov_style).map_err(draw_err)?;
            labels.push(CoverageLabel { k, x, text, width: tw as i32 + f.px(8.0), row: 0 });
        }
        assign_label_rows(&mut labels, f.px(6.0));
        Ok(labels)
    }

    /// The effective threshold and the coverage limits, under the data.
    fn draw_guides<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        chart: &TickedChart<'_, DB>,
        f: &Frame,
        cov_labels: &[CoverageLabel],
    ) -> Result<(), ChartError> {
        let s = f.s;
        let (px_range_x, px_range_y) = chart.plotting_area().get_pixel_range();
        let (plot_left, plot_right) = (px_range_x.start, px_range_x.end);
        let (plot_top, plot_bottom) = (px_range_y.start, px_range_y.end);
        if let Some(t) = self.effective_threshold {
            let y = chart.backend_coord(&(chart.x_range().start, t)).1 as f64;
            draw_dashed(
                root,
                &[(plot_left as f64, y), (plot_right as f64, y)],
                Dash::Dotted,
                s * 1.2,
                INK_SOFT.stroke_width((2.0 * s).round().max(1.0) as u32),
            )?;
        }
        // thin solid verticals (dashes belong to recall lines), leaders and labels
        let row_h = f.row_h;
        for l in cov_labels {
            let color = f.enc.topk_color(l.k);
            let label_mid_y = plot_top - f.px(6.0) - (l.row as i32) * row_h - row_h / 2;
            draw_dashed(
                root,
                &[(l.x as f64, plot_bottom as f64), (l.x as f64, (label_mid_y + row_h / 2 - f.px(2.0)) as f64)],
                Dash::Solid,
                s,
                color.mix(0.55).stroke_width(f.cov_w),
            )?;
            root.draw(&Text::new(
                l.text.clone(),
                (l.x + f.px(4.0), label_mid_y),
                text_at(f.cov_size, text_color(color), HPos::Left, VPos::Center),
            ))
            .map_err(draw_err)?;
        }
        Ok(())
    }

    /// Assumption bands, lightest and first, then the confidence bands (all
    /// before any line, so lines are never hidden under another band).
    fn draw_bands<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        chart: &mut TickedChart<'_, DB>,
        f: &Frame,
        axis: &ContextAxis,
    ) -> Result<(), ChartError> {
        let whole = f.whole;
        for sr in self.series.iter().filter(|sr| whole && sr.model_band.len() > 1) {
            let look = f.enc.look(sr);
            let mut poly: Vec<(f64, f64)> = sr.model_band.iter().map(|&(c, _, hi)| ((c as f64).log2(), hi)).collect();
            poly.extend(sr.model_band.iter().rev().map(|&(c, lo, _)| ((c as f64).log2(), lo)));
            chart.draw_series(std::iter::once(Polygon::new(poly, look.color.mix(0.07).filled()))).map_err(draw_err)?;
            for edge in [0usize, 1] {
                let pts: Vec<(f64, f64)> = sr
                    .model_band
                    .iter()
                    .map(|&(c, lo, hi)| {
                        let (x, y) = chart.backend_coord(&((c as f64).log2(), if edge == 0 { lo } else { hi }));
                        (x as f64, y as f64)
                    })
                    .collect();
                draw_dashed(root, &pts, Dash::Dotted, f.s * 0.7, look.color.mix(0.6).stroke_width(f.edge_w))?;
            }
        }
        for sr in &self.series {
            let look = f.enc.look(sr);
            // With whole-model recall only its line carries a band.
            let banded = if whole { &sr.model } else { &sr.points };
            if banded.is_empty() {
                continue;
            }
            let mut poly: Vec<(f64, f64)> = banded.iter().map(|p| ((p.context_tokens as f64).log2(), p.ci_high)).collect();
            poly.extend(banded.iter().rev().map(|p| ((p.context_tokens as f64).log2(), p.ci_low)));
            if banded.len() == 1 {
                // a single point: show its interval as a narrow bar
                let p = &banded[0];
                let x = (p.context_tokens as f64).log2();
                let dx = 0.04 * (axis.hi - axis.lo);
                poly = vec![(x - dx, p.ci_high), (x + dx, p.ci_high), (x + dx, p.ci_low), (x - dx, p.ci_low)];
            }
            chart.draw_series(std::iter::once(Polygon::new(poly, look.color.mix(0.16).filled()))).map_err(draw_err)?;
        }
        Ok(())
    }

    /// Lines and markers: with whole-model recall, per-layer lines and
    /// predictions first and whole-model lines on top.
    fn draw_lines<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        chart: &TickedChart<'_, DB>,
        f: &Frame,
    ) -> Result<(), ChartError> {
        let s = f.s;
        let to_px = |pts: &mut dyn Iterator<Item = (u64, f64)>| -> Vec<(f64, f64)> {
            pts.map(|(c, r)| {
                let (x, y) = chart.backend_coord(&((c as f64).log2(), r));
                (x as f64, y as f64)
            })
            .collect()
        };
        let recall_px = |pts: &[RecallPoint]| to_px(&mut pts.iter().map(|p| (p.context_tokens, p.recall)));
        let draw_markers = |pts: &[(f64, f64)], look: SeriesLook, r: f64| -> Result<(), ChartError> {
            for &(x, y) in pts {
                draw_marker(root, look.marker, (x as i32, y as i32), r, look.color, s)?;
            }
            Ok(())
        };
        if f.whole {
            for sr in self.series.iter().filter(|_| f.layers) {
                let look = f.enc.look(sr);
                let pts = recall_px(&sr.points);
                draw_dashed(root, &pts, Dash::Dashed, s, look.color.stroke_width(f.layer_w))?;
                let predicted = to_px(&mut sr.predicted.iter().copied());
                if predicted.len() > 1 {
                    draw_dashed(root, &predicted, Dash::Dotted, s, look.color.mix(0.75).stroke_width(f.predicted_w))?;
                }
                draw_markers(&pts, look, f.layer_marker_r)?;
            }
            for sr in &self.series {
                let look = f.enc.look(sr);
                let pts = recall_px(&sr.model);
                draw_dashed(root, &pts, Dash::Solid, s, look.color.stroke_width(f.line_w))?;
                draw_markers(&pts, look, f.marker_r)?;
            }
        } else {
            for sr in &self.series {
                let look = f.enc.look(sr);
                let pts = recall_px(&sr.points);
                draw_dashed(root, &pts, look.dash, s, look.color.stroke_width(f.line_w))?;
                let predicted = to_px(&mut sr.predicted.iter().copied());
                if predicted.len() > 1 {
                    draw_dashed(root, &predicted, Dash::LongDash, s * 0.8, look.color.mix(0.75).stroke_width(f.predicted_w))?;
                }
                draw_markers(&pts, look, f.marker_r)?;
            }
        }
        Ok(())
    }

    /// The legend's head and one entry per series, from (lx, y); returns the next y.
    fn draw_series_legend<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        f: &Frame,
        legend: &Legend,
        (lx, mut y): (i32, i32),
    ) -> Result<i32, ChartError> {
        let (s, swatch_w) = (f.s, f.swatch_w);
        root.draw(&Text::new(legend.head.clone(), (lx, y), f.legend_head_style.clone())).map_err(draw_err)?;
        y += f.entry_h;
        for (&i, label) in legend.order.iter().zip(&legend.series_labels) {
            let sr = &self.series[i];
            let look = f.enc.look(sr);
            let (x0, x1) = (lx as f64, (lx + swatch_w) as f64);
            let yf = y as f64;
            root.draw(&Rectangle::new([(lx, y - f.px(8.0)), (lx + swatch_w, y + f.px(8.0))], look.color.mix(0.16).filled()))
                .map_err(draw_err)?;
            let dash = if f.whole { Dash::Solid } else { look.dash };
            draw_dashed(root, &[(x0, yf), (x1, yf)], dash, s, look.color.stroke_width(f.line_w))?;
            draw_marker(root, look.marker, (lx + swatch_w / 2, y), f.marker_r, look.color, s)?;
            root.draw(&Text::new(label.clone(), (lx + swatch_w + f.px(12.0), y), f.legend_style.clone())).map_err(draw_err)?;
            y += f.entry_h;
        }
        Ok(y)
    }

    /// The legend's keys to bands, lines, guides and predictions, then the
    /// off-axis coverage limits, from (lx, y).
    fn draw_key_legend<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        f: &Frame,
        legend: &Legend,
        (lx, mut y): (i32, i32),
    ) -> Result<i32, ChartError> {
        let (s, swatch_w, whole) = (f.s, f.swatch_w, f.whole);
        let px = |v: f64| f.px(v);
        let label =
            |l: &str, y: i32| root.draw(&Text::new(l.to_string(), (lx + swatch_w + px(12.0), y), f.legend_style.clone())).map_err(draw_err);
        let swatch_line = |yf: f64| [(lx as f64, yf), ((lx + swatch_w) as f64, yf)];
        let extra_labels = &legend.extra_labels;
        // band explanation (and, with whole-model recall, which line is which)
        root.draw(&Rectangle::new([(lx, y - px(8.0)), (lx + swatch_w, y + px(8.0))], INK_SOFT.mix(0.2).filled())).map_err(draw_err)?;
        if whole {
            draw_dashed(root, &swatch_line(y as f64), Dash::Solid, s, INK_SOFT.stroke_width(f.line_w))?;
        }
        label(&extra_labels[0], y)?;
        y += f.entry_h;
        if whole && f.layers {
            draw_dashed(root, &swatch_line(y as f64), Dash::Dashed, s, INK_SOFT.stroke_width(f.layer_w))?;
            draw_marker(root, Marker::Circle, (lx + swatch_w / 2, y), f.layer_marker_r, INK_SOFT, s)?;
            label(&extra_labels[1], y)?;
            y += f.entry_h;
        }
        if legend.assumption_band {
            root.draw(&Rectangle::new([(lx, y - px(8.0)), (lx + swatch_w, y + px(8.0))], INK_SOFT.mix(0.08).filled())).map_err(draw_err)?;
            for dy in [-8.0, 8.0] {
                let yf = (y as f64) + px(dy) as f64;
                draw_dashed(root, &swatch_line(yf), Dash::Dotted, s * 0.7, INK_SOFT.stroke_width(f.edge_w))?;
            }
            label(&extra_labels[legend.line_keys - 1], y)?;
            y += f.entry_h;
        }
        let mut extra = extra_labels.iter().skip(legend.line_keys);
        if !self.coverage_limits.is_empty() {
            let xm = (lx + swatch_w / 2) as f64;
            draw_dashed(
                root,
                &[(xm, (y - px(11.0)) as f64), (xm, (y + px(11.0)) as f64)],
                Dash::Solid,
                s,
                INK_SOFT.mix(0.55).stroke_width(f.cov_w),
            )?;
            if let Some(l) = extra.next() {
                label(l, y)?;
            }
            y += f.entry_h;
        }
        if self.effective_threshold.is_some() {
            draw_dashed(root, &swatch_line(y as f64), Dash::Dotted, s * 1.2, INK_SOFT.stroke_width((2.0 * s).round().max(1.0) as u32))?;
            if let Some(l) = extra.next() {
                label(l, y)?;
            }
            y += f.entry_h;
        }
        if f.layers && self.series.iter().any(|sr| sr.predicted.len() > 1) {
            let (dash, scale) = if whole { (Dash::Dotted, s) } else { (Dash::LongDash, s * 0.8) };
            draw_dashed(root, &swatch_line(y as f64), dash, scale, INK_SOFT.stroke_width(f.predicted_w))?;
            label(legend.predicted_label, y)?;
            y += f.entry_h;
        }
        for l in &legend.off_axis {
            root.draw(&Text::new(l.clone(), (lx, y), f.legend_style.clone().color(&INK_SOFT))).map_err(draw_err)?;
            y += f.entry_h;
        }
        Ok(y)
    }
}

impl Painter for RecallChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        self.paint_to_legend_end(root).map(|_| ())
    }
}

impl RecallChart {
    /// Paints the chart; returns where the legend ends (y, pixels).
    pub(super) fn paint_to_legend_end<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<i32, ChartError> {
        let (w, h) = root.dim_in_pixel();
        let s = ui_scale(w, h);
        root.fill(&WHITE).map_err(draw_err)?;
        let mut f = Frame::new(self, s);
        let px = |v: f64| (v * s).round() as i32;
        let axis = ContextAxis::new(self);
        let y_ticks: Vec<f64> = (0..=10).map(|i| i as f64 / 10.0).collect();

        // ---- vertical layout
        let margin = px(24.0);
        let title_h = root.estimate_text_size("Ag", &f.title_style).map_err(draw_err)?.1 as i32;
        let sub_h = root.estimate_text_size("Ag", &f.subtitle_style).map_err(draw_err)?.1 as i32;
        let header_top = margin + title_h + px(10.0) + sub_h + px(18.0);
        let mut legend = self.legend(root, &f, &axis)?;
        // A legend taller than the room beside the plot (two rows of
        // coverage labels allowed for) is set smaller, to 55 % at least.
        let room = h as i32 - header_top - 2 * f.row_h - px(20.0);
        let need = legend.rows() as i32 * f.entry_h;
        if need > room {
            f.shrink_legend((room as f64 / need as f64).max(0.55));
            legend = self.legend(root, &f, &axis)?;
        }
        let (main, legend_area) = root.split_horizontally(w as i32 - legend.width);
        let build = |top: i32| {
            ChartBuilder::on(&main)
                .margin_top(top)
                .margin_left(margin)
                .margin_right(px(16.0))
                .margin_bottom(margin)
                .x_label_area_size(px(62.0))
                .y_label_area_size(px(80.0))
                .build_cartesian_2d(
                    TickedAxis { lo: axis.lo, hi: axis.hi, ticks: axis.ticks.clone() },
                    TickedAxis { lo: Y_MIN, hi: Y_MAX, ticks: y_ticks.clone() },
                )
                .map_err(draw_err)
        };
        let cov_labels = self.coverage_labels(root, &build(header_top)?, &f, &axis)?;
        let rows = cov_labels.iter().map(|l| l.row + 1).max().unwrap_or(0) as i32;
        let plot_top_margin = header_top + rows * f.row_h + if rows > 0 { px(6.0) } else { 0 };

        let mut chart = build(plot_top_margin)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID.stroke_width(1))
            .light_line_style(TRANSPARENT)
            .axis_style(INK_SOFT.stroke_width(1))
            .x_desc("context length (tokens, log2 scale)")
            .y_desc(match (f.whole, f.layers) {
                (true, true) => "recall (solid: whole model, dashed: per layer)",
                (true, false) => "whole-model recall",
                _ => "per-layer selection recall",
            })
            .axis_desc_style(text(19.0 * s, INK))
            .label_style(text(16.0 * s, INK))
            .x_label_formatter(&|v: &f64| log2_token_tick(*v, axis.e_first, axis.label_every))
            .y_label_formatter(&|v: &f64| format!("{v:.1}"))
            .draw()
            .map_err(draw_err)?;
        let plot_top = chart.plotting_area().get_pixel_range().1.start;

        root.draw(&Text::new(self.title.clone(), (margin, margin), f.title_style.clone())).map_err(draw_err)?;
        root.draw(&Text::new(self.subtitle.clone(), (margin, margin + title_h + px(10.0)), f.subtitle_style.clone())).map_err(draw_err)?;
        self.draw_guides(root, &chart, &f, &cov_labels)?;
        self.draw_bands(root, &mut chart, &f, &axis)?;
        self.draw_lines(root, &chart, &f)?;
        let lx = legend_area.get_base_pixel().0 + px(8.0);
        let y = self.draw_series_legend(root, &f, &legend, (lx, plot_top + px(4.0)))?;
        self.draw_key_legend(root, &f, &legend, (lx, y + px(10.0)))
    }
}

/// Renders `chart` to `path` (`.png` or `.svg`, chosen from the extension),
/// atomically (temporary file + rename).
pub fn render_recall_vs_context(chart: &RecallChart, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    validate(chart)?;
    render_atomically(chart, path, width, height)
}

//! The needle margin against context length (docs/MODEL.md, "The needle
//! margin"): the weakest needle — the largest exceedance, the share of
//! haystack rows that outscore it — each configuration still keeps at recall
//! ≥ the threshold, on a log10 axis, one line per (top-k, precision) with its
//! 95 % band. Horizontal bands mark where the needle profiles' needles lie
//! (from the median exceedance to the one 90 % of needles stay under): a
//! line above a band keeps such needles with room to spare.
//!
//! The encoding matches the recall chart: colour = top-k, dash and marker =
//! precision; with whole-model margins they are the main (solid) lines and
//! the per-layer ones thin and dashed. A margin that reached exceedance 1
//! (k covers every haystack row) is "at least": drawn at 1 with an arrow up.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::canvas::{check_log2_contexts, draw_err, render_atomically, ChartError, Painter};
use super::recall_vs_context::{draw_dashed, draw_marker, text_color, Encoding};
use super::style::{log2_context_range, log2_token_tick, text, text_at, ui_scale, Dash, TickedAxis, TickedChart, GRID, INK, INK_SOFT};

/// One margin as an exceedance, with its 95 % interval.
#[derive(Debug, Clone, PartialEq)]
pub struct MarginPoint {
    pub context_tokens: u64,
    /// The largest exceedance kept at recall ≥ the threshold (0 < e ≤ 1) …
    pub exceedance: f64,
    /// … read at the recall's 95 % bounds (the low end may be 0: drawn to
    /// the axis floor) …
    pub ci_low: f64,
    pub ci_high: f64,
    /// … and whether it reached exceedance 1, so the margin is at least that.
    pub unbounded: bool,
}

/// The margins of one (top-k, precision), ascending contexts.
#[derive(Debug, Clone, PartialEq)]
pub struct MarginSeries {
    pub topk: u32,
    pub precision: String,
    /// Per-layer selection recall's margin.
    pub layer: Vec<MarginPoint>,
    /// Whole-model recall's margin (empty without a stack).
    pub model: Vec<MarginPoint>,
}

/// Where a needle profile's needles lie: from its median exceedance to the
/// exceedance 90 % of them stay under.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileBand {
    pub name: String,
    pub median: f64,
    pub p90: f64,
}

/// Everything drawn on a margin chart.
#[derive(Debug, Clone, PartialEq)]
pub struct MarginChart {
    pub title: String,
    pub subtitle: String,
    /// The recall threshold the margins are read at.
    pub threshold: f64,
    pub series: Vec<MarginSeries>,
    pub profiles: Vec<ProfileBand>,
    /// (k, coverage limit k·c+W in tokens).
    pub coverage_limits: Vec<(u32, u64)>,
}

/// Renders `chart` to `path` (`.png` or `.svg`), atomically.
pub fn render_margin(chart: &MarginChart, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    validate(chart)?;
    render_atomically(chart, path, width, height)
}

const EPS: f64 = 1e-9;

fn validate_points(name: &str, pts: &[MarginPoint]) -> Result<(), ChartError> {
    let bad = |m: String| Err(ChartError::InvalidInput(m));
    check_log2_contexts(name, pts.iter().map(|p| p.context_tokens))?;
    for p in pts {
        let at = p.context_tokens;
        if !p.exceedance.is_finite() || p.exceedance <= 0.0 || p.exceedance > 1.0 + EPS {
            return bad(format!("{name}: exceedance {} at context {at} is not in (0, 1]", p.exceedance));
        }
        for v in [p.ci_low, p.ci_high] {
            if !v.is_finite() || !(0.0..=1.0 + EPS).contains(&v) {
                return bad(format!("{name}: interval end {v} at context {at} is not in 0..1"));
            }
        }
        if p.ci_low > p.exceedance * (1.0 + EPS) || p.exceedance > p.ci_high * (1.0 + EPS) {
            return bad(format!("{name}: interval does not contain the margin at context {at}"));
        }
    }
    Ok(())
}

fn validate(chart: &MarginChart) -> Result<(), ChartError> {
    let bad = |m: String| Err(ChartError::InvalidInput(m));
    if chart.series.iter().all(|s| s.layer.is_empty() && s.model.is_empty()) {
        return bad("margin chart has no points".into());
    }
    if !chart.threshold.is_finite() || !(0.0..=1.0).contains(&chart.threshold) {
        return bad(format!("recall threshold {} is not in 0..1", chart.threshold));
    }
    for s in &chart.series {
        validate_points(&format!("series k={} {} per layer", s.topk, s.precision), &s.layer)?;
        validate_points(&format!("series k={} {} whole model", s.topk, s.precision), &s.model)?;
    }
    for b in &chart.profiles {
        if !(b.median.is_finite() && b.p90.is_finite() && 0.0 < b.median && b.median <= b.p90 && b.p90 <= 1.0) {
            return bad(format!("profile {} band {}..{} is not 0 < median ≤ p90 ≤ 1", b.name, b.median, b.p90));
        }
    }
    if chart.coverage_limits.iter().any(|&(_, c)| c == 0) {
        return bad("a coverage limit is 0 tokens".into());
    }
    Ok(())
}

impl MarginChart {
    fn points(&self) -> impl Iterator<Item = &MarginPoint> {
        self.series.iter().flat_map(|s| s.layer.iter().chain(&s.model))
    }

    fn whole(&self) -> bool {
        self.series.iter().any(|s| !s.model.is_empty())
    }
}

/// The y range in log10 exceedance: every drawn margin, positive interval
/// end and profile band, with room above for the "at least" arrows; at
/// least one decade tall.
fn y_range(chart: &MarginChart) -> (f64, f64) {
    let logs = chart
        .points()
        .flat_map(|p| [p.exceedance, p.ci_low, p.ci_high])
        .chain(chart.profiles.iter().flat_map(|b| [b.median, b.p90]))
        .filter(|&v| v > 0.0)
        .map(f64::log10);
    let (lo, hi) = logs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let arrow = if chart.points().any(|p| p.unbounded) { 0.3 } else { 0.12 };
    let (lo, hi) = (lo - 0.12, hi + arrow);
    if hi - lo < 1.0 {
        let mid = (lo + hi) / 2.0;
        (mid - 0.5, mid + 0.5)
    } else {
        (lo, hi)
    }
}

/// The x range in log2 tokens (padded) and its ticks at whole powers of two.
fn x_range(chart: &MarginChart) -> (f64, f64, Vec<f64>) {
    log2_context_range(chart.points().map(|p| p.context_tokens))
}

/// A decade tick's label: "1", "0.1", "1e-3" ….
fn decade_label(v: f64) -> String {
    match v.round() as i32 {
        0 => "1".into(),
        -1 => "0.1".into(),
        -2 => "0.01".into(),
        e => format!("1e{e}"),
    }
}

/// A log10 exceedance axis's sizes and the chart's scale.
struct Frame {
    s: f64,
    whole: bool,
    layer_w: u32,
    model_w: u32,
}

impl Frame {
    fn px(&self, v: f64) -> i32 {
        (v * self.s).round() as i32
    }
}

impl Painter for MarginChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        let (w, h) = root.dim_in_pixel();
        let s = ui_scale(w, h);
        let whole = self.whole();
        let f = Frame {
            s,
            whole,
            layer_w: (if whole { 1.4 } else { 2.4 } * s).round().max(1.0) as u32,
            model_w: (2.6 * s).round().max(1.0) as u32,
        };
        root.fill(&WHITE).map_err(draw_err)?;
        let enc = Encoding::from_pairs(
            self.series.iter().map(|sr| (sr.topk, sr.precision.as_str())),
            &self.coverage_limits.iter().map(|&(k, _)| k).collect::<Vec<_>>(),
        );
        let margin = f.px(24.0);
        let title_style = text_at(30.0 * s, INK, HPos::Left, VPos::Top);
        let subtitle_style = text_at(18.0 * s, INK_SOFT, HPos::Left, VPos::Top);
        let title_h = root.estimate_text_size("Ag", &title_style).map_err(draw_err)?.1 as i32;
        let sub_h = root.estimate_text_size("Ag", &subtitle_style).map_err(draw_err)?.1 as i32;
        root.draw(&Text::new(self.title.clone(), (margin, margin), title_style)).map_err(draw_err)?;
        root.draw(&Text::new(self.subtitle.clone(), (margin, margin + title_h + f.px(10.0)), subtitle_style)).map_err(draw_err)?;
        let top = margin + title_h + f.px(10.0) + sub_h + f.px(16.0);

        let mut order: Vec<&MarginSeries> = self.series.iter().collect();
        order.sort_by_key(|sr| (sr.topk, enc.precisions.iter().position(|p| *p == sr.precision)));
        let labels: Vec<String> = order.iter().map(|sr| format!("k={}, {}", sr.topk, sr.precision)).collect();
        let keys = self.legend_keys();
        let legend_style = text_at(16.0 * s, INK, HPos::Left, VPos::Center);
        let mut text_w = 0;
        for l in labels.iter().chain(&keys).map(String::as_str).chain(["series (k, precision)"]) {
            text_w = text_w.max(root.estimate_text_size(l, &legend_style).map_err(draw_err)?.0 as i32);
        }
        let legend_w = f.px(48.0) + f.px(12.0) + text_w + f.px(36.0);
        let body = root.margin(top, margin, margin, margin / 2);
        let (plot, legend) = body.split_horizontally(body.dim_in_pixel().0 as i32 - legend_w);
        self.paint_plot(&plot, &enc, &f)?;
        self.draw_legend(&legend, &enc, &f, &order, &labels, &keys)
    }
}

impl MarginChart {
    /// The frame, axes and grid; then the profile bands, coverage limits,
    /// interval bands and lines, in that order (lines on top).
    fn paint_plot<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, enc: &Encoding, f: &Frame) -> Result<(), ChartError> {
        let s = f.s;
        let (x_lo, x_hi, ticks) = x_range(self);
        let (y_lo, y_hi) = y_range(self);
        let y_ticks: Vec<f64> = ((y_lo.ceil() as i64)..=(y_hi.floor() as i64)).map(|e| e as f64).collect();
        let e_first = ticks.first().copied().unwrap_or(0.0) as i64;
        let label_every = if ticks.len() > 8 { 2 } else { 1 };
        let y_desc = format!("needle exceedance still kept at recall ≥ {} (log): how weak a needle may be", self.threshold);
        let mut chart = ChartBuilder::on(area)
            .margin(f.px(12.0))
            .x_label_area_size(f.px(58.0))
            .y_label_area_size(f.px(84.0))
            .build_cartesian_2d(TickedAxis { lo: x_lo, hi: x_hi, ticks: ticks.clone() }, TickedAxis { lo: y_lo, hi: y_hi, ticks: y_ticks })
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID.stroke_width(1))
            .light_line_style(TRANSPARENT)
            .axis_style(INK_SOFT.stroke_width(1))
            .x_desc("context length (tokens, log2 scale)")
            .y_desc(y_desc)
            .axis_desc_style(text(17.0 * s, INK))
            .label_style(text(15.0 * s, INK))
            .x_label_formatter(&|v: &f64| log2_token_tick(*v, e_first, label_every))
            .y_label_formatter(&|v: &f64| decade_label(*v))
            .draw()
            .map_err(draw_err)?;
        self.draw_profiles(area, &mut chart, (x_lo, x_hi), f)?;
        self.draw_coverage(area, &chart, enc, (x_lo, x_hi), f)?;
        self.draw_bands(&mut chart, enc, (x_lo, x_hi), y_lo, f)?;
        self.draw_lines(area, &chart, enc, f)
    }

    /// The profiles' bands across the plot, each labelled at its left end.
    fn draw_profiles<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        chart: &mut TickedChart<'_, DB>,
        (x_lo, x_hi): (f64, f64),
        f: &Frame,
    ) -> Result<(), ChartError> {
        let (ox, oy) = area.get_base_pixel();
        for (i, b) in self.profiles.iter().enumerate() {
            let fill = INK.mix(if i % 2 == 0 { 0.07 } else { 0.12 });
            let (lo, hi) = (b.median.log10(), b.p90.log10());
            chart.draw_series(std::iter::once(Rectangle::new([(x_lo, lo), (x_hi, hi)], fill.filled()))).map_err(draw_err)?;
            let (x, y) = chart.backend_coord(&(x_lo, hi));
            let label = format!("{} needles: median {:.1e} … 90 % under {:.1e}", b.name, b.median, b.p90);
            area.draw(&Text::new(label, (x - ox + f.px(8.0), y - oy + f.px(3.0)), text_at(14.0 * f.s, INK_SOFT, HPos::Left, VPos::Top)))
                .map_err(draw_err)?;
        }
        Ok(())
    }

    /// Each k's coverage limit on the axis, a thin dashed vertical in its colour.
    fn draw_coverage<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        chart: &TickedChart<'_, DB>,
        enc: &Encoding,
        (x_lo, x_hi): (f64, f64),
        f: &Frame,
    ) -> Result<(), ChartError> {
        let (ox, oy) = area.get_base_pixel();
        let (_, yr) = chart.plotting_area().get_pixel_range();
        let (top, bottom) = ((yr.start - oy) as f64, (yr.end - oy) as f64);
        for (i, &(k, c)) in self.coverage_limits.iter().enumerate() {
            let x = (c as f64).log2();
            if !(x_lo..=x_hi).contains(&x) {
                continue;
            }
            let color = enc.topk_color(k);
            let xp = (chart.backend_coord(&(x, 0.0)).0 - ox) as f64;
            draw_dashed(
                area,
                &[(xp, bottom), (xp, top)],
                Dash::Dashed,
                f.s,
                color.mix(0.6).stroke_width((1.5 * f.s).round().max(1.0) as u32),
            )?;
            let y = top as i32 + f.px(4.0) + i as i32 * f.px(18.0);
            area.draw(&Text::new(
                format!("k={k} coverage"),
                (xp as i32 + f.px(4.0), y),
                text_at(13.0 * f.s, text_color(color), HPos::Left, VPos::Top),
            ))
            .map_err(draw_err)?;
        }
        Ok(())
    }

    /// The 95 % bands (whole-model only when there is one, else per layer),
    /// a zero low end drawn to the axis floor.
    fn draw_bands<DB: DrawingBackend>(
        &self,
        chart: &mut TickedChart<'_, DB>,
        enc: &Encoding,
        (x_lo, x_hi): (f64, f64),
        y_lo: f64,
        f: &Frame,
    ) -> Result<(), ChartError> {
        let log = |v: f64| if v > 0.0 { v.log10().max(y_lo) } else { y_lo };
        for sr in &self.series {
            let pts = if f.whole { &sr.model } else { &sr.layer };
            if pts.is_empty() {
                continue;
            }
            let look = enc.look_of(sr.topk, &sr.precision);
            let x_of = |p: &MarginPoint| (p.context_tokens as f64).log2();
            let mut poly: Vec<(f64, f64)> = pts.iter().map(|p| (x_of(p), log(p.ci_high))).collect();
            poly.extend(pts.iter().rev().map(|p| (x_of(p), log(p.ci_low))));
            if pts.len() == 1 {
                let (x, dx) = (x_of(&pts[0]), 0.04 * (x_hi - x_lo));
                let (lo, hi) = (log(pts[0].ci_low), log(pts[0].ci_high));
                poly = vec![(x - dx, hi), (x + dx, hi), (x + dx, lo), (x - dx, lo)];
            }
            chart.draw_series(std::iter::once(Polygon::new(poly, look.color.mix(0.14).filled()))).map_err(draw_err)?;
        }
        Ok(())
    }

    /// Per-layer lines (thin and dashed under whole-model ones), then the
    /// whole-model lines; markers, and an arrow up on "at least" points.
    fn draw_lines<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        chart: &TickedChart<'_, DB>,
        enc: &Encoding,
        f: &Frame,
    ) -> Result<(), ChartError> {
        let (ox, oy) = area.get_base_pixel();
        let to_px = |p: &MarginPoint| {
            let (x, y) = chart.backend_coord(&((p.context_tokens as f64).log2(), p.exceedance.min(1.0).log10()));
            ((x - ox) as f64, (y - oy) as f64)
        };
        for main in [false, true] {
            for sr in &self.series {
                let pts = if main { &sr.model } else { &sr.layer };
                let look = enc.look_of(sr.topk, &sr.precision);
                let (dash, w, r) = match (f.whole, main) {
                    (true, false) => (Dash::Dashed, f.layer_w, 3.5 * f.s),
                    (true, true) => (Dash::Solid, f.model_w, 5.0 * f.s),
                    _ => (look.dash, f.layer_w, 5.0 * f.s),
                };
                let xy: Vec<(f64, f64)> = pts.iter().map(to_px).collect();
                draw_dashed(area, &xy, dash, f.s, look.color.stroke_width(w))?;
                for (p, &(x, y)) in pts.iter().zip(&xy) {
                    draw_marker(area, look.marker, (x as i32, y as i32), r, look.color, f.s)?;
                    if p.unbounded {
                        draw_up_arrow(area, (x as i32, y as i32 - r.round() as i32 - f.px(2.0)), f.px(16.0), look.color, f)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The legend's keys after the series: line roles, band, "at least",
    /// coverage limit (and the profiles' bands are labelled in the plot).
    fn legend_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        if self.whole() {
            keys.push("whole-model recall's margin, 95 % band".to_string());
            if self.series.iter().any(|s| !s.layer.is_empty()) {
                keys.push("per-layer selection recall's margin".to_string());
            }
        } else {
            keys.push("per-layer recall's margin, 95 % band".to_string());
        }
        if self.points().any(|p| p.unbounded) {
            keys.push("at least: kept even at exceedance 1".to_string());
        }
        if !self.coverage_limits.is_empty() {
            keys.push("coverage limit k·c+W".to_string());
        }
        if !self.profiles.is_empty() {
            keys.push("profile: median … 90 % of its needles".to_string());
        }
        keys
    }
}

/// An arrow pointing up from `(x, y)` (its foot), `len` pixels tall.
fn draw_up_arrow<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    len: i32,
    color: RGBColor,
    f: &Frame,
) -> Result<(), ChartError> {
    let tip = y - len;
    let head = f.px(5.0);
    area.draw(&PathElement::new(vec![(x, y), (x, tip + head)], color.stroke_width((2.0 * f.s).round().max(1.0) as u32)))
        .map_err(draw_err)?;
    area.draw(&Polygon::new(vec![(x, tip), (x + head, tip + head + f.px(2.0)), (x - head, tip + head + f.px(2.0))], color.filled()))
        .map_err(draw_err)
}

impl MarginChart {
    /// The legend beside the plot: one entry per series (`order`,
    /// `labels`), then `keys` (see [`MarginChart::legend_keys`]).
    fn draw_legend<DB: DrawingBackend>(
        &self,
        legend: &DrawingArea<DB, Shift>,
        enc: &Encoding,
        f: &Frame,
        order: &[&MarginSeries],
        labels: &[String],
        keys: &[String],
    ) -> Result<(), ChartError> {
        let s = f.s;
        let style = text_at(16.0 * s, INK, HPos::Left, VPos::Center);
        let (lx, sw, entry_h) = (f.px(12.0), f.px(48.0), f.px(30.0));
        let mut y = f.px(56.0);
        legend
            .draw(&Text::new("series (k, precision)", (lx, y), text_at(17.0 * s, INK_SOFT, HPos::Left, VPos::Center)))
            .map_err(draw_err)?;
        y += entry_h;
        let main_w = if f.whole { f.model_w } else { f.layer_w };
        for (sr, label) in order.iter().zip(labels) {
            let look = enc.look_of(sr.topk, &sr.precision);
            let dash = if f.whole { Dash::Solid } else { look.dash };
            legend
                .draw(&Rectangle::new([(lx, y - f.px(8.0)), (lx + sw, y + f.px(8.0))], look.color.mix(0.14).filled()))
                .map_err(draw_err)?;
            draw_dashed(legend, &[(lx as f64, y as f64), ((lx + sw) as f64, y as f64)], dash, s, look.color.stroke_width(main_w))?;
            draw_marker(legend, look.marker, (lx + sw / 2, y), 5.0 * s, look.color, s)?;
            legend.draw(&Text::new(label.clone(), (lx + sw + f.px(12.0), y), style.clone())).map_err(draw_err)?;
            y += entry_h;
        }
        y += f.px(10.0);
        for key in keys {
            self.draw_key(legend, key, (lx, y, sw), f)?;
            legend.draw(&Text::new(key.clone(), (lx + sw + f.px(12.0), y), style.clone())).map_err(draw_err)?;
            y += entry_h;
        }
        Ok(())
    }

    /// The swatch of one legend key (by the key's text, as `legend_keys` words it).
    fn draw_key<DB: DrawingBackend>(
        &self,
        legend: &DrawingArea<DB, Shift>,
        key: &str,
        (lx, y, sw): (i32, i32, i32),
        f: &Frame,
    ) -> Result<(), ChartError> {
        let line = |dash: Dash, w: u32| {
            draw_dashed(legend, &[(lx as f64, y as f64), ((lx + sw) as f64, y as f64)], dash, f.s, INK_SOFT.stroke_width(w))
        };
        let band = |fill: RGBAColor| {
            legend.draw(&Rectangle::new([(lx, y - f.px(8.0)), (lx + sw, y + f.px(8.0))], fill.filled())).map_err(draw_err)
        };
        if key.starts_with("whole-model") {
            band(INK_SOFT.mix(0.2))?;
            line(Dash::Solid, f.model_w)
        } else if key.starts_with("per-layer selection") {
            line(Dash::Dashed, f.layer_w)
        } else if key.starts_with("per-layer recall") {
            band(INK_SOFT.mix(0.2))?;
            line(Dash::Solid, f.layer_w)
        } else if key.starts_with("at least") {
            draw_up_arrow(legend, (lx + sw / 2, y + f.px(9.0)), f.px(18.0), INK_SOFT, f)
        } else if key.starts_with("coverage") {
            let x = (lx + sw / 2) as f64;
            draw_dashed(
                legend,
                &[(x, (y - f.px(10.0)) as f64), (x, (y + f.px(10.0)) as f64)],
                Dash::Dashed,
                f.s,
                INK_SOFT.stroke_width((1.5 * f.s).round().max(1.0) as u32),
            )
        } else {
            band(INK.mix(0.09))
        }
    }
}

// The chart in a sweep: built from the cells, and its entry in the registry.

use crate::config::profile::PROFILES;
use crate::model::needle::QuantileNeedle;
use crate::report::meta::{draw, find, Grid, ReportMeta, SweepChart};
use crate::run::cell::CellResult;

/// The standard normal's 90th percentile: 90 % of a profile's needles have
/// log10 exceedance under the median's plus this many total spreads.
const Z90: f64 = 1.281_551_565_544_600_5;

/// Every quantile-unit needle profile's band.
pub fn profile_bands() -> Vec<ProfileBand> {
    PROFILES
        .iter()
        .filter(|p| p.unit == "quantile")
        .map(|p| {
            let q = QuantileNeedle {
                exceedance: p.exceedance,
                prompt_spread: p.prompt_spread,
                layer_spread: p.layer_spread,
                token_spread: p.token_spread,
            };
            ProfileBand {
                name: p.name.to_string(),
                median: p.exceedance,
                p90: (p.exceedance * 10f64.powf(Z90 * q.total_spread())).min(1.0),
            }
        })
        .collect()
}

/// A cell's margin as an exceedance: (multiple, low, high, unbounded) times
/// the cell's median exceedance; None without one, or at margin 0 (no
/// needle kept: nothing to draw on a log axis).
fn margin_point(
    c: &CellResult,
    median: f64,
    (m, lo, hi, unbounded): (Option<f64>, Option<f64>, Option<f64>, Option<bool>),
) -> Option<MarginPoint> {
    let (m, lo, hi) = (m?, lo?, hi?);
    (m > 0.0).then(|| MarginPoint {
        context_tokens: c.context_tokens,
        exceedance: (m * median).min(1.0),
        ci_low: (lo * median).clamp(0.0, 1.0),
        ci_high: (hi * median).clamp(0.0, 1.0),
        unbounded: unbounded.unwrap_or(false),
    })
}

/// The needle margin against context at the detail depth. None when no
/// cell has a margin.
pub fn margin_chart(meta: &ReportMeta, cells: &[CellResult], whole_model_only: bool) -> Option<MarginChart> {
    let g = Grid::of(cells);
    let depth = g.detail_depth();
    let mut series = Vec::new();
    let mut none_kept = 0usize;
    for &k in &g.topks {
        for p in &g.precisions {
            let (mut layer, mut model) = (Vec::new(), Vec::new());
            for c in g.contexts.iter().filter_map(|&c| find(cells, depth, c, k, p)) {
                let (Some(m), Some(e)) = (c.needle_margin, c.needle_margin_exceedance) else { continue };
                if m <= 0.0 {
                    none_kept += 1;
                    continue;
                }
                let median = e / m;
                layer.extend(margin_point(
                    c,
                    median,
                    (Some(m), c.needle_margin_ci_low, c.needle_margin_ci_high, c.needle_margin_unbounded),
                ));
                model.extend(margin_point(
                    c,
                    median,
                    (c.model_needle_margin, c.model_needle_margin_ci_low, c.model_needle_margin_ci_high, c.model_needle_margin_unbounded),
                ));
            }
            if whole_model_only && !model.is_empty() {
                layer.clear();
            }
            if !layer.is_empty() || !model.is_empty() {
                series.push(MarginSeries { topk: k as u32, precision: p.clone(), layer, model });
            }
        }
    }
    if series.is_empty() {
        return None;
    }
    let coverage_limits =
        g.topks.iter().filter_map(|&k| cells.iter().find(|c| c.topk == k).map(|c| (k as u32, c.coverage_limit))).collect();
    let trials = cells.first().map_or(0, |c| c.trials);
    let whole = series.iter().any(|s| !s.model.is_empty());
    let which = if whole { "whole model solid, per layer thin dashed" } else { "per-layer selection recall" };
    let lost = if none_kept > 0 { format!(" · {none_kept} cells keep no needle at the threshold (not drawn)") } else { String::new() };
    Some(MarginChart {
        title: format!("Needle margin vs context · {}", meta.preset),
        subtitle: format!(
            "the weakest needle kept at recall ≥ {} · {which} · needle depth {depth} % · {trials} trials per point · 95 % interval · seed {}{lost}",
            meta.threshold, meta.seed
        ),
        threshold: meta.threshold,
        series,
        profiles: profile_bands(),
        coverage_limits,
    })
}

pub const CHART: SweepChart = SweepChart {
    stem: "margin",
    when: "when the cells have a needle margin (quantile needle, full simulation)",
    caption: "Needle margin: the largest needle exceedance (share of haystack rows outscoring the needle) each configuration still keeps at recall ≥ the threshold, against context, with 95 % intervals; an arrow marks “at least” (kept even at exceedance 1). Grey bands: where the niah and hard profiles' needles lie (median to 90th percentile); a line above a band keeps such needles with margin. Dashed verticals: coverage limits k·c+W.",
    caption_whole: Some("Needle margin: the largest needle exceedance (share of haystack rows outscoring the needle) each configuration still keeps at recall ≥ the threshold, against context — whole-model recall solid with 95 % bands, per-layer selection recall thin and dashed; an arrow marks “at least” (kept even at exceedance 1). Grey bands: where the niah and hard profiles' needles lie (median to 90th percentile); a line above a band keeps such needles with margin. Dashed verticals: coverage limits k·c+W."),
    predicted: None,
    whole_model_only: true,
    render: |c, dir, ext| match margin_chart(c.meta, &c.cells, c.whole_model_only) {
        Some(m) => draw(dir, "margin", ext, |path| Ok(render_margin(&m, path, 1600, 1000)?)),
        None => Ok(Vec::new()),
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    fn point(context_tokens: u64, exceedance: f64) -> MarginPoint {
        MarginPoint {
            context_tokens,
            exceedance,
            ci_low: exceedance / 2.0,
            ci_high: (exceedance * 2.0).min(1.0),
            unbounded: exceedance >= 1.0,
        }
    }

    pub(crate) fn demo() -> MarginChart {
        let line = |start: f64| -> Vec<MarginPoint> { (10..=15).map(|e| point(1 << e, (start / 4f64.powi(e - 10)).min(1.0))).collect() };
        MarginChart {
            title: "t".into(),
            subtitle: "s".into(),
            threshold: 0.9,
            series: vec![
                MarginSeries { topk: 512, precision: "bf16".into(), layer: line(4.0), model: line(1.0) },
                MarginSeries { topk: 512, precision: "fp8".into(), layer: line(0.5), model: line(0.05) },
                MarginSeries { topk: 1024, precision: "bf16".into(), layer: line(8.0), model: Vec::new() },
            ],
            profiles: profile_bands(),
            coverage_limits: vec![(512, 2176), (1024, 4224)],
        }
    }

    #[test]
    fn renders_png_of_the_requested_size_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("m.png");
        render_margin(&demo(), &png, 1200, 750).unwrap();
        let b = std::fs::read(&png).unwrap();
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
        let be = |x: &[u8]| u32::from_be_bytes([x[0], x[1], x[2], x[3]]);
        assert_eq!((be(&b[16..20]), be(&b[20..24])), (1200, 750));
        let mut per_layer = demo();
        per_layer.series.iter_mut().for_each(|s| s.model.clear());
        let svg = dir.path().join("m.svg");
        render_margin(&per_layer, &svg, 1000, 600).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("niah needles") && text.contains("hard needles"), "profile bands are labelled");
    }

    #[test]
    fn invalid_inputs_are_errors_and_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.png");
        let invalid = |c: &MarginChart| matches!(render_margin(c, &path, 1000, 600), Err(ChartError::InvalidInput(_)));
        let mut c = demo();
        c.series.clear();
        assert!(invalid(&c));
        for bad in [0.0, -1e-3, f64::NAN, 1.5] {
            let mut c = demo();
            c.series[0].layer[2].exceedance = bad;
            assert!(invalid(&c), "exceedance {bad}");
        }
        let mut c = demo();
        c.series[1].model[1].ci_high = c.series[1].model[1].exceedance / 2.0;
        assert!(invalid(&c), "interval must contain the margin");
        let mut c = demo();
        c.series[0].model.swap(0, 1);
        assert!(invalid(&c), "contexts must ascend");
        let mut c = demo();
        c.profiles[0].p90 = c.profiles[0].median / 2.0;
        assert!(invalid(&c), "band must ascend");
        assert!(!path.exists());
    }

    #[test]
    fn the_y_range_covers_every_drawn_value() {
        for c in [demo(), MarginChart { profiles: Vec::new(), ..demo() }] {
            let (lo, hi) = y_range(&c);
            assert!(hi - lo >= 1.0);
            let drawn =
                c.points().flat_map(|p| [p.exceedance, p.ci_low, p.ci_high]).chain(c.profiles.iter().flat_map(|b| [b.median, b.p90]));
            for v in drawn.filter(|&v| v > 0.0) {
                assert!((lo..=hi).contains(&v.log10()), "{v} outside 1e{lo}..1e{hi}");
            }
            // room above exceedance 1 for the "at least" arrows
            assert!(hi >= 0.3, "{hi}");
        }
        // a narrow set still spans a decade
        let mut c = demo();
        c.profiles.clear();
        c.series = vec![MarginSeries { topk: 64, precision: "bf16".into(), layer: vec![point(1024, 0.01)], model: Vec::new() }];
        let (lo, hi) = y_range(&c);
        assert!((hi - lo - 1.0).abs() < 1e-12 && lo < 0.005f64.log10() && hi > 0.02f64.log10(), "{lo} {hi}");
    }

    #[test]
    fn profile_bands_span_the_90th_percentile() {
        let bands = profile_bands();
        let names: Vec<&str> = bands.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["niah", "hard"]);
        // niah: 4/13801, total spread √(0.25² + 0.25² + 0.1²) = 0.367 decades
        let niah = &bands[0];
        let factor = niah.p90 / niah.median;
        assert!((factor.log10() - 1.2816 * 0.3674).abs() < 1e-3, "{factor}");
        assert!(bands[1].median > niah.median && bands[1].p90 / bands[1].median > factor);
    }
}

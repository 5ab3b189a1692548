//! Heatmaps of per-layer selection recall (docs/MODEL.md, "What is
//! measured"; not a model's needle-in-a-haystack accuracy): needle depth
//! (rows) × context length (columns), one panel per configuration, sharing
//! one colour bar.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use crate::base::units::tokens_label;

use super::canvas::{draw_err, render_atomically, ChartError, Painter};
use super::style::{
    contrast_text_color, dash_polyline, diverging_color, format_thousands, recall_color, text_at, text_vertical, ui_scale, Dash, INK,
    INK_SOFT, MISSING_CELL,
};

/// One depth × context grid.
#[derive(Debug, Clone, PartialEq)]
pub struct HeatmapPanel {
    /// e.g. "k=512, fp8"
    pub title: String,
    /// Row labels, first row drawn at the top (0 % = start of the context).
    pub depths_percent: Vec<f64>,
    /// Column labels, ascending (normally powers of two).
    pub contexts: Vec<u64>,
    /// `recall[depth][context]`; `None` = not measured (grey cell).
    pub recall: Vec<Vec<Option<f64>>>,
    /// k·c+W tokens: a vertical line is drawn where the columns cross it.
    pub coverage_limit: Option<u64>,
    /// `marked[depth][context]`: cells drawn with a significance mark (a
    /// ring around the value; empty = none marked). What the mark means is
    /// the heatmap's `note`.
    pub marked: Vec<Vec<bool>>,
}

/// A set of panels drawn side by side (grid when more than three).
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    pub title: String,
    pub panels: Vec<HeatmapPanel>,
    /// Difference heatmap: values in −1..1 on a diverging scale.
    pub diverging: bool,
    /// Diverging scale only: the colour scale and bar span −limit..+limit
    /// (values beyond it take the end colours); None = ±1. A small limit
    /// makes differences of a few points visible.
    pub diverging_limit: Option<f64>,
    /// A line under the title (e.g. what the marks mean); None = none.
    pub note: Option<String>,
}

impl Heatmap {
    fn limit(&self) -> f64 {
        match self.diverging_limit {
            Some(l) if l.is_finite() && l > 0.0 && self.diverging => l.min(1.0),
            _ => 1.0,
        }
    }
}

/// Renders `h` to `path` (`.png` or `.svg`), atomically.
pub fn render_heatmap(h: &Heatmap, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    validate(h)?;
    render_atomically(h, path, width, height)
}

fn validate(h: &Heatmap) -> Result<(), ChartError> {
    let bad = |m: String| Err(ChartError::InvalidInput(m));
    if h.panels.is_empty() {
        return bad("heatmap has no panels".into());
    }
    let (lo, hi) = if h.diverging { (-1.0, 1.0) } else { (0.0, 1.0) };
    for p in &h.panels {
        let name = format!("panel {:?}", p.title);
        if p.depths_percent.is_empty() || p.contexts.is_empty() {
            return bad(format!("{name} has no rows or no columns"));
        }
        if p.depths_percent.iter().any(|d| !d.is_finite()) {
            return bad(format!("{name}: non-finite depth"));
        }
        if p.contexts.windows(2).any(|w| w[0] >= w[1]) {
            return bad(format!("{name}: contexts must be strictly ascending"));
        }
        if p.recall.len() != p.depths_percent.len() {
            return bad(format!("{name}: {} recall rows for {} depths", p.recall.len(), p.depths_percent.len()));
        }
        for (i, row) in p.recall.iter().enumerate() {
            if row.len() != p.contexts.len() {
                return bad(format!("{name}: row {i} has {} values for {} contexts", row.len(), p.contexts.len()));
            }
            for v in row.iter().flatten() {
                if !v.is_finite() {
                    return bad(format!("{name}: non-finite value in row {i}"));
                }
                if *v < lo - 1e-9 || *v > hi + 1e-9 {
                    return bad(format!("{name}: value {v} outside {lo}..{hi} in row {i}"));
                }
            }
        }
    }
    Ok(())
}

impl Heatmap {
    fn color(&self, v: f64) -> RGBColor {
        if self.diverging {
            diverging_color(v / self.limit())
        } else {
            recall_color(v)
        }
    }

    fn format_value(&self, v: f64) -> String {
        if self.diverging {
            // avoid "-0.00"
            let r = (v * 100.0).round() / 100.0;
            if r == 0.0 {
                "0.00".into()
            } else {
                format!("{r:+.2}")
            }
        } else {
            format!("{v:.2}")
        }
    }
}

fn format_depth(d: f64) -> String {
    let s = format!("{d:.1}");
    format!("{} %", s.strip_suffix(".0").unwrap_or(&s))
}

/// Rows × columns for `n` panels: side by side up to three, else a grid.
fn grid_shape(n: usize) -> (usize, usize) {
    if n <= 3 {
        return (1, n.max(1));
    }
    let cols = (n as f64).sqrt().ceil() as usize;
    (n.div_ceil(cols), cols)
}

/// Index of the first column whose context exceeds `limit`: the coverage
/// line sits on the left edge of that column. `None` when the limit is at or
/// beyond the last column.
fn coverage_boundary(contexts: &[u64], limit: u64) -> Option<usize> {
    contexts.iter().position(|&c| c > limit)
}

impl Painter for Heatmap {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        let (w, h) = root.dim_in_pixel();
        let s = ui_scale(w, h);
        let px = |v: f64| (v * s).round() as i32;
        root.fill(&WHITE).map_err(draw_err)?;

        let margin = px(24.0);
        let title_style = text_at(30.0 * s, INK, HPos::Left, VPos::Top);
        let title_h = root.estimate_text_size("Ag", &title_style).map_err(draw_err)?.1 as i32;
        root.draw(&Text::new(self.title.clone(), (margin, margin), title_style)).map_err(draw_err)?;
        let mut top = margin + title_h + px(16.0);
        if let Some(note) = &self.note {
            let note_style = text_at(18.0 * s, INK_SOFT, HPos::Left, VPos::Top);
            root.draw(&Text::new(note.clone(), (margin, top - px(6.0)), note_style.clone())).map_err(draw_err)?;
            top += root.estimate_text_size("Ag", &note_style).map_err(draw_err)?.1 as i32 + px(8.0);
        }

        // ---- regions
        let bar_col_w = px(120.0);
        // room for the rotated "needle depth" label left of the first column
        let (left, right, bottom) = (margin + px(26.0), w as i32 - margin - bar_col_w, h as i32 - margin);
        let (grid_rows, grid_cols) = grid_shape(self.panels.len());
        let cell_w = (right - left) / grid_cols as i32;
        let cell_h = (bottom - top) / grid_rows as i32;

        for (i, p) in self.panels.iter().enumerate() {
            let (r, c) = (i / grid_cols, i % grid_cols);
            let x0 = left + c as i32 * cell_w;
            let y0 = top + r as i32 * cell_h;
            self.paint_panel(root, p, (x0, y0, x0 + cell_w, y0 + cell_h), s, c == 0, r + 1 == grid_rows)?;
        }

        // ---- colour bar
        let bar_x0 = w as i32 - margin - bar_col_w + px(30.0);
        let bar_x1 = bar_x0 + px(24.0);
        let bar_y0 = top + px(60.0);
        let bar_y1 = bottom - px(90.0);
        // Two lines, to fit the bar's column: the quantity the title names,
        // whole-model recall or per-layer selection recall.
        let whole = self.title.starts_with("Whole-model");
        let label = [
            match (self.diverging, whole) {
                (true, _) => "Δ selection",
                (false, true) => "whole-model",
                (false, false) => "selection",
            },
            "recall",
        ];
        let label_style = text_at(17.0 * s, INK, HPos::Center, VPos::Bottom);
        let line_h = root.estimate_text_size("Ag", &label_style).map_err(draw_err)?.1 as i32 + px(3.0);
        for (i, line) in label.iter().enumerate() {
            let y = bar_y0 - px(14.0) - (label.len() - 1 - i) as i32 * line_h;
            root.draw(&Text::new(*line, ((bar_x0 + bar_x1) / 2, y), label_style.clone())).map_err(draw_err)?;
        }
        let (vlo, vhi) = if self.diverging { (-self.limit(), self.limit()) } else { (0.0, 1.0) };
        let span = (bar_y1 - bar_y0).max(1);
        // One rectangle per run of equal colour: the same pixels as one per
        // row, far fewer SVG elements.
        let row_color = |y: i32| self.color(vlo + (1.0 - (y - bar_y0) as f64 / span as f64) * (vhi - vlo));
        let mut run_start = bar_y0;
        for y in bar_y0..bar_y1 {
            let color = row_color(y);
            if y + 1 == bar_y1 || row_color(y + 1) != color {
                root.draw(&Rectangle::new([(bar_x0, run_start), (bar_x1, y + 1)], color.filled())).map_err(draw_err)?;
                run_start = y + 1;
            }
        }
        root.draw(&Rectangle::new([(bar_x0, bar_y0), (bar_x1, bar_y1)], INK_SOFT.stroke_width(1))).map_err(draw_err)?;
        let tick_style = text_at(15.0 * s, INK, HPos::Left, VPos::Center);
        for i in 0..=4 {
            let v = vlo + (vhi - vlo) * i as f64 / 4.0;
            let y = bar_y1 - ((span as f64) * i as f64 / 4.0).round() as i32;
            root.draw(&PathElement::new(vec![(bar_x1, y), (bar_x1 + px(6.0), y)], INK_SOFT.stroke_width(1))).map_err(draw_err)?;
            // 0.025 needs three decimals, 0.25 two
            let d = if ((v * 100.0).round() - v * 100.0).abs() > 1e-9 { 3 } else { 2 };
            let txt = if self.diverging && v > 0.0 { format!("+{v:.d$}") } else { format!("{v:.d$}") };
            root.draw(&Text::new(txt, (bar_x1 + px(9.0), y), tick_style.clone())).map_err(draw_err)?;
        }
        // missing-value swatch
        let sw_y = bar_y1 + px(34.0);
        root.draw(&Rectangle::new([(bar_x0, sw_y), (bar_x1, sw_y + px(18.0))], MISSING_CELL.filled())).map_err(draw_err)?;
        root.draw(&Text::new("no data", (bar_x1 + px(9.0), sw_y + px(9.0)), tick_style.clone())).map_err(draw_err)?;
        Ok(())
    }
}

impl Heatmap {
    #[allow(clippy::too_many_arguments)]
    fn paint_panel<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        p: &HeatmapPanel,
        (x0, y0, x1, y1): (i32, i32, i32, i32),
        s: f64,
        first_col: bool,
        last_row: bool,
    ) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let panel_title = text_at(19.0 * s, INK, HPos::Center, VPos::Top);
        let tick_style_x = text_at(14.0 * s, INK, HPos::Center, VPos::Top);
        let tick_style_y = text_at(14.0 * s, INK, HPos::Right, VPos::Center);
        let desc_style = text_at(16.0 * s, INK_SOFT, HPos::Center, VPos::Top);

        let gx0 = x0 + px(62.0);
        let gx1 = x1 - px(18.0);
        let gy0 = y0 + px(62.0); // title + coverage label row
        let gy1 = y1 - if last_row { px(66.0) } else { px(34.0) };
        if gx1 - gx0 < 10 || gy1 - gy0 < 10 {
            return Err(ChartError::InvalidInput("image too small for this many heatmap panels".into()));
        }
        let ncols = p.contexts.len() as i32;
        let nrows = p.depths_percent.len() as i32;
        let grid = CellGrid { gx0, gx1, gy0, gy1, ncols, nrows };
        let col_x = |j: i32| grid.col_x(j);
        let row_y = |i: i32| grid.row_y(i);

        root.draw(&Text::new(p.title.clone(), ((gx0 + gx1) / 2, y0 + px(4.0)), panel_title)).map_err(draw_err)?;

        self.draw_cells(root, p, &grid, s)?;

        // axes ticks
        let label_every = if ncols as f64 * 40.0 * s > (gx1 - gx0) as f64 { 2 } else { 1 };
        for (j, c) in p.contexts.iter().enumerate() {
            if j % label_every != 0 {
                continue;
            }
            let cx = (col_x(j as i32) + col_x(j as i32 + 1)) / 2;
            root.draw(&Text::new(tokens_label(*c), (cx, gy1 + px(6.0)), tick_style_x.clone())).map_err(draw_err)?;
        }
        let depth_every = if nrows as f64 * 20.0 * s > (gy1 - gy0) as f64 { 2 } else { 1 };
        for (i, d) in p.depths_percent.iter().enumerate() {
            if i % depth_every != 0 {
                continue;
            }
            let cy = (row_y(i as i32) + row_y(i as i32 + 1)) / 2;
            root.draw(&Text::new(format_depth(*d), (gx0 - px(6.0), cy), tick_style_y.clone())).map_err(draw_err)?;
        }
        if last_row {
            root.draw(&Text::new("context length (tokens)", ((gx0 + gx1) / 2, gy1 + px(30.0)), desc_style.clone())).map_err(draw_err)?;
        }
        if first_col {
            root.draw(&Text::new("needle depth", (x0 - px(12.0), (gy0 + gy1) / 2), text_vertical(16.0 * s, INK_SOFT))).map_err(draw_err)?;
        }

        self.draw_coverage(root, p, &grid, (x0, x1), s)
    }
}

/// The cell grid of one heatmap panel: its pixel extent and shape.
#[derive(Clone, Copy)]
struct CellGrid {
    gx0: i32,
    gx1: i32,
    gy0: i32,
    gy1: i32,
    ncols: i32,
    nrows: i32,
}

impl CellGrid {
    fn col_x(&self, j: i32) -> i32 {
        self.gx0 + ((self.gx1 - self.gx0) as i64 * j as i64 / self.ncols as i64) as i32
    }

    fn row_y(&self, i: i32) -> i32 {
        self.gy0 + ((self.gy1 - self.gy0) as i64 * i as i64 / self.nrows as i64) as i32
    }
}

impl Heatmap {
    /// The cells: fill, marks and values (fitted into the cell: "0.97" / "+0.25").
    fn draw_cells<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        p: &HeatmapPanel,
        grid: &CellGrid,
        s: f64,
    ) -> Result<(), ChartError> {
        let CellGrid { gx0, gx1, gy0, gy1, ncols, nrows } = *grid;
        let col_x = |j: i32| grid.col_x(j);
        let row_y = |i: i32| grid.row_y(i);
        let cw = (gx1 - gx0) as f64 / ncols as f64;
        let ch = (gy1 - gy0) as f64 / nrows as f64;
        let chars = if self.diverging { 2.9 } else { 2.3 };
        let ann_size = (ch * 0.42).min(cw * 0.82 / chars).min(20.0 * s);
        for (i, row) in p.recall.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                let (cx0, cx1) = (col_x(j as i32), col_x(j as i32 + 1));
                let (cy0, cy1) = (row_y(i as i32), row_y(i as i32 + 1));
                let fill = v.map(|v| self.color(v)).unwrap_or(MISSING_CELL);
                root.draw(&Rectangle::new([(cx0, cy0), (cx1, cy1)], fill.filled())).map_err(draw_err)?;
                root.draw(&Rectangle::new([(cx0, cy0), (cx1, cy1)], WHITE.stroke_width(1))).map_err(draw_err)?;
                if p.marked.get(i).and_then(|r| r.get(j)).copied().unwrap_or(false) {
                    // A ring inside the cell, in the text's colour: visible on any fill.
                    let r = ((cx1 - cx0).min(cy1 - cy0) as f64 * 0.42).max(3.0) as i32;
                    let ring = contrast_text_color(fill).stroke_width((2.0 * s).round().max(1.0) as u32);
                    root.draw(&Circle::new(((cx0 + cx1) / 2, (cy0 + cy1) / 2), r, ring)).map_err(draw_err)?;
                }
                if ann_size >= 7.0 {
                    let txt = match v {
                        Some(v) => self.format_value(*v),
                        None => "–".to_string(),
                    };
                    root.draw(&Text::new(
                        txt,
                        ((cx0 + cx1) / 2, (cy0 + cy1) / 2),
                        text_at(ann_size, contrast_text_color(fill), HPos::Center, VPos::Center),
                    ))
                    .map_err(draw_err)?;
                }
            }
        }

        Ok(())
    }

    /// The coverage limit k·c+W: a dashed line at its column boundary with
    /// its label, or a note when it lies beyond the contexts.
    fn draw_coverage<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        p: &HeatmapPanel,
        grid: &CellGrid,
        (x0, x1): (i32, i32),
        s: f64,
    ) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let CellGrid { gx0, gx1, gy0, gy1, .. } = *grid;
        let col_x = |j: i32| grid.col_x(j);
        if let Some(limit) = p.coverage_limit {
            let label = format!("k·c+W = {}", format_thousands(limit));
            let label_style = text_at(14.0 * s, INK, HPos::Center, VPos::Bottom);
            match coverage_boundary(&p.contexts, limit) {
                Some(j) => {
                    let x = col_x(j as i32);
                    let halo = WHITE.stroke_width((6.0 * s).round().max(3.0) as u32);
                    let line = INK.stroke_width((3.0 * s).round().max(2.0) as u32);
                    root.draw(&PathElement::new(vec![(x, gy0 - px(8.0)), (x, gy1 + px(2.0))], halo)).map_err(draw_err)?;
                    for seg in dash_polyline(
                        &[(x as f64, (gy0 - px(8.0)) as f64), (x as f64, (gy1 + px(2.0)) as f64)],
                        Dash::LongDash.pattern(),
                        s * 0.7,
                    ) {
                        root.draw(&PathElement::new(seg, line)).map_err(draw_err)?;
                    }
                    let (tw, _) = root.estimate_text_size(&label, &label_style).map_err(draw_err)?;
                    let half = tw as i32 / 2;
                    let lx = x.clamp(x0 + half, x1 - half);
                    root.draw(&Text::new(label, (lx, gy0 - px(10.0)), label_style)).map_err(draw_err)?;
                }
                None => {
                    root.draw(&Text::new(
                        format!("{label} (beyond range)"),
                        ((gx0 + gx1) / 2, gy0 - px(10.0)),
                        label_style.color(&INK_SOFT),
                    ))
                    .map_err(draw_err)?;
                }
            }
        }
        Ok(())
    }
}

// The chart in a sweep: built from the cells, and its entry in the registry.

use crate::base::units::Reach;
use crate::report::meta::DiffSpan;
use crate::report::meta::{draw, find, Grid, ReportMeta, SweepChart};
use crate::run::cell::{CellResult, HolmFamily};
use crate::run::sweep::EffectiveContext;

/// Pixel size of a heatmap with `panels` panels of `depths` × `contexts` cells.
pub fn heatmap_size(panels: usize, depths: usize, contexts: usize) -> (u32, u32) {
    let cols = if panels <= 3 { panels.max(1) } else { (panels as f64).sqrt().ceil() as usize };
    let rows = panels.div_ceil(cols);
    let w = 260 + cols * (90 + 78 * contexts);
    let h = 140 + rows * (110 + 36 * depths.max(3));
    (w.clamp(1600, 6000) as u32, h.clamp(1000, 6000) as u32)
}

/// Depth × context per-layer selection recall, one panel per (k, precision).
pub fn heatmap(meta: &ReportMeta, cells: &[CellResult]) -> Heatmap {
    let trials = cells.first().map_or(0, |c| c.trials);
    let title =
        format!("Per-layer selection recall by depth and context · {} · {} · {trials} trials per cell", meta.preset, meta.physics_label());
    let layer = |e: &EffectiveContext| Some(e.layer());
    recall_heatmap(meta, cells, title, |c| Some(c.recall), layer)
}

/// Depth × context whole-model recall, one panel per (k, precision); None
/// when no cell has it (no `[stack]`).
pub fn heatmap_model(meta: &ReportMeta, cells: &[CellResult]) -> Option<Heatmap> {
    if cells.iter().all(|c| c.model_recall.is_none()) {
        return None;
    }
    let trials = cells.first().map_or(0, |c| c.trials);
    // As long as the per-layer title: the stack is in the recall charts' subtitle.
    let title = format!("Whole-model recall by depth and context · {} · {} · {trials} trials per cell", meta.preset, meta.physics_label());
    let model = |e: &EffectiveContext| e.model;
    Some(recall_heatmap(meta, cells, title, |c| c.model_recall, model))
}

/// Depth × context of the recall `value` reads from a cell, one panel per
/// (k, precision), each titled with the effective context `reach` reads.
fn recall_heatmap(
    meta: &ReportMeta,
    cells: &[CellResult],
    title: String,
    value: impl Fn(&CellResult) -> Option<f64>,
    reach: impl Fn(&EffectiveContext) -> Option<Reach>,
) -> Heatmap {
    let g = Grid::of(cells);
    let mut panels = Vec::new();
    for &k in &g.topks {
        for p in &g.precisions {
            let recall = g.depths.iter().map(|&d| g.contexts.iter().map(|&c| find(cells, d, c, k, p).and_then(&value)).collect()).collect();
            let eff = meta.effective.iter().find(|e| e.topk == k && e.precision == *p).and_then(&reach);
            let title = match eff {
                Some(e) => format!("k={k}, {p} · eff. {}", e.label(g.contexts[0])),
                None => format!("k={k}, {p}"),
            };
            panels.push(HeatmapPanel {
                title,
                depths_percent: g.depths.clone(),
                contexts: g.contexts.clone(),
                recall,
                coverage_limit: cells.iter().find(|c| c.topk == k).map(|c| c.coverage_limit),
                marked: Vec::new(),
            });
        }
    }
    Heatmap { title, panels, diverging: false, diverging_limit: None, note: None }
}

/// The diverging colour scale's default half-width for differences up to
/// `largest`: the smallest of 0.1, 0.25, 0.5 and 1 that holds it. Never
/// below 0.1, so that a few points of noise stay pale instead of saturated.
pub fn diff_scale(largest: f64) -> f64 {
    [0.1, 0.25, 0.5].into_iter().find(|&l| largest <= l + 1e-12).unwrap_or(1.0)
}

/// Significance level of the difference heatmap's marks (Holm-adjusted).
pub const DIFF_MARK_ALPHA: f64 = 0.05;

/// Recall difference of every other precision against the baseline (the
/// first precision), per k, on the same haystacks, marked where the
/// Holm-adjusted McNemar p over `cells` is below [`DIFF_MARK_ALPHA`], with
/// the default colour span. None with one precision.
pub fn heatmap_diff(meta: &ReportMeta, cells: &[CellResult]) -> Option<Heatmap> {
    let holm = HolmFamily::of(cells);
    heatmap_diff_marked(meta, cells, &holm.precision, holm.size, None)
}

/// [`heatmap_diff`] with the adjusted p given and a colour span.
/// `adjusted[i]` is `cells[i]`'s Holm-adjusted McNemar p over the sweep's
/// `family` paired tests ([`HolmFamily`], precision and k pairs): cells
/// below [`DIFF_MARK_ALPHA`] are marked. `span`: the colour span (None:
/// [`diff_scale`]).
pub fn heatmap_diff_marked(
    meta: &ReportMeta,
    cells: &[CellResult],
    adjusted: &[Option<f64>],
    family: usize,
    span: Option<f64>,
) -> Option<Heatmap> {
    let g = Grid::of(cells);
    let baseline = g.precisions.first()?.clone();
    let at = |d: f64, c: u64, k: u64, p: &str| {
        cells.iter().position(|x| x.depth_percent == d && x.context_tokens == c && x.topk == k && x.precision == p)
    };
    let significant = |i: usize| adjusted.get(i).copied().flatten().is_some_and(|p| p < DIFF_MARK_ALPHA);
    let mut panels = Vec::new();
    let mut tests = 0;
    for &k in &g.topks {
        for p in g.precisions.iter().skip(1) {
            let index: Vec<Vec<Option<usize>>> = g.depths.iter().map(|&d| g.contexts.iter().map(|&c| at(d, c, k, p)).collect()).collect();
            tests += index.iter().flatten().flatten().filter(|&&i| adjusted.get(i).copied().flatten().is_some()).count();
            panels.push(HeatmapPanel {
                title: format!("k={k}: {p} − {baseline}"),
                depths_percent: g.depths.clone(),
                contexts: g.contexts.clone(),
                recall: index.iter().map(|r| r.iter().map(|i| i.and_then(|i| cells[i].recall_diff)).collect()).collect(),
                coverage_limit: cells.iter().find(|c| c.topk == k).map(|c| c.coverage_limit),
                marked: index.iter().map(|r| r.iter().map(|i| i.is_some_and(significant)).collect()).collect(),
            });
        }
    }
    let largest = panels.iter().flat_map(|p| p.recall.iter().flatten().flatten()).fold(0.0f64, |m, v| m.max(v.abs()));
    let limit = span.unwrap_or_else(|| diff_scale(largest));
    let note = format!(
        "ring: McNemar p < {DIFF_MARK_ALPHA} after Holm adjustment over all {family} paired tests of the sweep ({tests} shown) · colour span ±{limit}{}",
        if span.is_some() { " (--diff-span)" } else { "" }
    );
    (!panels.is_empty()).then(|| Heatmap {
        title: format!("Per-layer selection recall difference against {baseline} on the same haystacks · {}", meta.preset),
        panels,
        diverging: true,
        diverging_limit: Some(limit),
        note: Some(note),
    })
}

pub const CHART: SweepChart = SweepChart {
    stem: "heatmap",
    when: "two depths or more",
    caption: "Per-layer selection recall by depth (0 % = start of the context, at the top) and context length; the dashed line marks the coverage limit k·c+W.",
    caption_whole: None,
    predicted: None,
    whole_model_only: false,
    render: |c, dir, ext| {
        if c.grid.depths.len() < 2 {
            return Ok(Vec::new());
        }
        let hm = heatmap(c.meta, &c.cells);
        let (w, h) = heatmap_size(hm.panels.len(), c.grid.depths.len(), c.grid.contexts.len());
        draw(dir, "heatmap", ext, |path| Ok(render_heatmap(&hm, path, w, h)?))
    },
};

pub const MODEL_CHART: SweepChart = SweepChart {
    stem: "heatmap_model",
    when: "two depths or more, with whole-model recall",
    caption: "Whole-model recall by depth (0 % = start of the context, at the top) and context length; the dashed line marks the coverage limit k·c+W of the indexed layers.",
    caption_whole: None,
    predicted: None,
    whole_model_only: false,
    render: |c, dir, ext| {
        let Some(model) = heatmap_model(c.meta, &c.cells).filter(|_| c.grid.depths.len() >= 2) else { return Ok(Vec::new()) };
        // Sized as the per-layer heatmap, which it sits beside.
        let (w, h) = heatmap_size(heatmap(c.meta, &c.cells).panels.len(), c.grid.depths.len(), c.grid.contexts.len());
        draw(dir, "heatmap_model", ext, |path| Ok(render_heatmap(&model, path, w, h)?))
    },
};

pub const DIFF_CHART: SweepChart = SweepChart {
    stem: "heatmap_diff",
    when: "two depths or more, and two precisions or more",
    caption: "Per-layer selection recall difference against the baseline precision on the same haystacks (blue: better than the baseline, red: worse); a ring marks a cell whose McNemar p, Holm-adjusted over every paired test of the sweep, is below 0.05; the colour span is ±the largest difference rounded up (at least 0.1) unless --diff-span sets it.",
    caption_whole: None,
    predicted: None,
    whole_model_only: false,
    render: |c, dir, ext| {
        if c.grid.depths.len() < 2 {
            return Ok(Vec::new());
        }
        let Some(diff) = heatmap_diff_marked(c.meta, &c.cells, &c.adjusted, c.family_size, c.diff_span.map(DiffSpan::get)) else {
            return Ok(Vec::new());
        };
        let (w, h) = heatmap_size(diff.panels.len(), c.grid.depths.len(), c.grid.contexts.len());
        draw(dir, "heatmap_diff", ext, |path| Ok(render_heatmap(&diff, path, w, h)?))
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    fn demo(n: usize, diverging: bool) -> Heatmap {
        let contexts: Vec<u64> = (10..=17).map(|e| 1u64 << e).collect();
        let depths: Vec<f64> = (0..=10).map(|i| i as f64 * 10.0).collect();
        let panels = (0..n)
            .map(|k| HeatmapPanel {
                title: format!("panel {k}"),
                depths_percent: depths.clone(),
                contexts: contexts.clone(),
                recall: depths
                    .iter()
                    .enumerate()
                    .map(|(i, _)| {
                        (0..contexts.len())
                            .map(|j| {
                                if i == 3 && j == 2 {
                                    None
                                } else {
                                    let v = 1.0 - j as f64 / contexts.len() as f64;
                                    Some(if diverging { v * 2.0 - 1.0 } else { v })
                                }
                            })
                            .collect()
                    })
                    .collect(),
                coverage_limit: Some(2176),
                marked: vec![vec![true; contexts.len()]; 2],
            })
            .collect();
        Heatmap { title: "t".into(), panels, diverging, diverging_limit: None, note: diverging.then(|| "ring: significant".into()) }
    }

    #[test]
    fn renders_png_with_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        for (n, div) in [(1, false), (2, true), (5, false)] {
            let path = dir.path().join(format!("hm{n}.png"));
            render_heatmap(&demo(n, div), &path, 900, 600).unwrap();
            let b = std::fs::read(&path).unwrap();
            assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
            assert_eq!(u32::from_be_bytes([b[16], b[17], b[18], b[19]]), 900);
            assert_eq!(u32::from_be_bytes([b[20], b[21], b[22], b[23]]), 600);
        }
    }

    #[test]
    fn invalid_inputs_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.png");
        let mut h = demo(1, false);
        h.panels.clear();
        assert!(matches!(render_heatmap(&h, &path, 900, 600), Err(ChartError::InvalidInput(_))));
        let mut h = demo(1, false);
        h.panels[0].recall[0][0] = Some(f64::NAN);
        assert!(matches!(render_heatmap(&h, &path, 900, 600), Err(ChartError::InvalidInput(_))));
        let mut h = demo(1, false);
        h.panels[0].recall[1].pop();
        assert!(matches!(render_heatmap(&h, &path, 900, 600), Err(ChartError::InvalidInput(_))));
        let mut h = demo(1, false);
        h.panels[0].recall[0][0] = Some(-0.5); // negative only allowed when diverging
        assert!(matches!(render_heatmap(&h, &path, 900, 600), Err(ChartError::InvalidInput(_))));
        assert!(!path.exists());
    }

    #[test]
    fn layout_helpers() {
        assert_eq!(grid_shape(1), (1, 1));
        assert_eq!(grid_shape(3), (1, 3));
        assert_eq!(grid_shape(4), (2, 2));
        assert_eq!(grid_shape(5), (2, 3));
        let ctx = [1024, 2048, 4096, 8192];
        assert_eq!(coverage_boundary(&ctx, 2176), Some(2));
        assert_eq!(coverage_boundary(&ctx, 512), Some(0));
        assert_eq!(coverage_boundary(&ctx, 8192), None);
    }
}

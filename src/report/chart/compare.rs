//! Dot-and-interval comparison of every (top-k, precision) at one context
//! and depth: per-layer selection recall and, when present, whole-model
//! recall with their Wilson intervals; and in a second panel the selection
//! recall against the reference top-k (fp32) when the sweep has one.
//!
//! One row per precision, grouped by k (a header row per k). Colour is the
//! k (as on the recall chart), marker shape the precision; whole-model
//! recall is the large marker on the thick interval, per-layer recall the
//! small one below it.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::canvas::{draw_err, render_atomically, ChartError, Painter};
use super::recall_vs_context::{draw_dashed, draw_marker, text_color, Encoding};
use super::style::{text_at, ui_scale, wrap_at_separators, Dash, Marker, GRID, INK, INK_SOFT};

/// A share with its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// One (top-k, precision) row.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareRow {
    pub topk: u32,
    pub precision: String,
    /// Per-layer selection recall.
    pub layer: Estimate,
    /// Whole-model recall (None: no stack).
    pub model: Option<Estimate>,
    /// Selection recall against the reference top-k (None: no reference).
    pub selection: Option<Estimate>,
}

/// Everything drawn on the comparison chart.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareChart {
    pub title: String,
    pub subtitle: String,
    /// Rows in drawing order (grouped by k: a header is drawn where k changes).
    pub rows: Vec<CompareRow>,
    /// Name of the selection panel's reference (e.g. "fp32").
    pub reference: Option<String>,
    /// Recall threshold, drawn as a dotted vertical line in the recall panel.
    pub threshold: Option<f64>,
    /// Draw whole-model recall alone (no per-layer markers) where rows have it.
    pub whole_model_only: bool,
}

impl CompareChart {
    /// Pixel height that gives each row room: header, rows, legend.
    pub fn height(&self) -> u32 {
        let groups = self.rows.iter().map(|r| r.topk).collect::<std::collections::BTreeSet<_>>().len();
        (300 + 46 * (self.rows.len() + groups)).clamp(480, 6000) as u32
    }

    fn whole(&self) -> bool {
        self.rows.iter().any(|r| r.model.is_some())
    }

    /// Whether per-layer recall is drawn beside whole-model recall.
    fn both(&self) -> bool {
        self.whole() && !self.whole_model_only
    }

    fn selection(&self) -> bool {
        self.rows.iter().any(|r| r.selection.is_some())
    }
}

/// Renders `chart` to `path` (`.png` or `.svg`), atomically.
pub fn render_compare(chart: &CompareChart, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    validate(chart)?;
    render_atomically(chart, path, width, height)
}

fn validate(chart: &CompareChart) -> Result<(), ChartError> {
    if chart.rows.is_empty() {
        return Err(ChartError::InvalidInput("comparison chart has no rows".into()));
    }
    for r in &chart.rows {
        for e in [Some(r.layer), r.model, r.selection].into_iter().flatten() {
            let ok = [e.value, e.low, e.high].iter().all(|v| v.is_finite() && (-1e-9..=1.0 + 1e-9).contains(v))
                && e.low <= e.value + 1e-9
                && e.value <= e.high + 1e-9;
            if !ok {
                return Err(ChartError::InvalidInput(format!(
                    "row k={} {}: estimate {} [{}, {}] is not a share inside its interval",
                    r.topk, r.precision, e.value, e.low, e.high
                )));
            }
        }
    }
    Ok(())
}

/// The selection panel's lower bound: the lowest interval end, rounded
/// down to a tenth, so selections near 1 are not squeezed against the edge.
fn selection_floor(rows: &[CompareRow]) -> f64 {
    let lo = rows.iter().filter_map(|r| r.selection.map(|e| e.low)).fold(1.0f64, f64::min);
    ((lo * 10.0).floor() / 10.0).clamp(0.0, 0.9)
}

/// Where the parts of a compare chart go: columns (labels | recall panel |
/// values | selection panel), rows and the legend strip.
struct CompareLayout {
    s: f64,
    margin: i32,
    x_labels: i32,
    right: i32,
    /// 1, or 2 with the selection panel.
    panels: i32,
    /// The recall panel's and the selection panel's x extents.
    a: (i32, i32),
    b: (i32, i32),
    /// The selection panel's lower bound.
    sel_lo: f64,
    top: i32,
    row_h: i32,
    /// Rows plus one head row per k.
    lines: i32,
    /// The legend strip's centre line.
    legend_y: i32,
}

impl CompareLayout {
    fn px(&self, v: f64) -> i32 {
        (v * self.s).round() as i32
    }

    fn axis_y(&self) -> i32 {
        self.top + self.lines * self.row_h
    }
}

/// x of value `v` on a panel from `x0` to `x1` whose axis starts at `lo`.
fn panel_x(x0: i32, x1: i32, lo: f64, v: f64) -> i32 {
    x0 + (((v - lo) / (1.0 - lo)).clamp(0.0, 1.0) * (x1 - x0) as f64).round() as i32
}

impl CompareChart {
    fn layout<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, s: f64, title_h: i32) -> Result<CompareLayout, ChartError> {
        let (w, h) = root.dim_in_pixel();
        let px = |v: f64| (v * s).round() as i32;
        let label_style = text_at(17.0 * s, INK, HPos::Right, VPos::Center);
        let value_style = text_at(15.0 * s, INK_SOFT, HPos::Left, VPos::Center);
        let margin = px(24.0);
        let mut label_w = 0;
        for r in &self.rows {
            label_w = label_w.max(root.estimate_text_size(&r.precision, &label_style).map_err(draw_err)?.0 as i32);
        }
        let value_w = root.estimate_text_size("0.000 [0.000, 0.000]", &value_style).map_err(draw_err)?.0 as i32 + px(20.0);
        let x_labels = margin + px(40.0) + label_w;
        let right = w as i32 - margin;
        let panels = if self.selection() { 2 } else { 1 };
        let gap = px(40.0);
        let panel_w = (right - x_labels - px(16.0) - panels * value_w - (panels - 1) * gap) / panels;
        let a0 = x_labels + px(16.0);
        let a1 = a0 + panel_w;
        let b0 = a1 + value_w + gap;
        let b1 = b0 + panel_w;

        let top = margin + title_h + px(80.0);
        let legend_h = px(70.0);
        let bottom = h as i32 - margin - legend_h - px(56.0);
        let mut lines = 0;
        let mut prev = None;
        for r in &self.rows {
            lines += 1 + (prev != Some(r.topk)) as i32;
            prev = Some(r.topk);
        }
        let row_h = ((bottom - top) / lines.max(1)).max(4);
        Ok(CompareLayout {
            s,
            margin,
            x_labels,
            right,
            panels,
            a: (a0, a1),
            b: (b0, b1),
            sel_lo: selection_floor(&self.rows),
            top,
            row_h,
            lines,
            legend_y: h as i32 - margin - legend_h / 2,
        })
    }

    /// Row shading (every other row) under the grid.
    fn draw_shading<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, l: &CompareLayout) -> Result<(), ChartError> {
        let mut y = l.top;
        let mut prev = None;
        for (i, r) in self.rows.iter().enumerate() {
            y += l.row_h * (prev != Some(r.topk)) as i32;
            prev = Some(r.topk);
            if i % 2 == 0 {
                root.draw(&Rectangle::new([(l.x_labels + l.px(4.0), y), (l.right, y + l.row_h)], RGBColor(246, 246, 246).filled()))
                    .map_err(draw_err)?;
            }
            y += l.row_h;
        }
        Ok(())
    }

    /// Panel grids, ticks, axis names and the threshold line.
    fn draw_axes<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, l: &CompareLayout) -> Result<(), ChartError> {
        let s = l.s;
        let px = |v: f64| l.px(v);
        let tick_style = text_at(15.0 * s, INK, HPos::Center, VPos::Top);
        let axis_style = text_at(18.0 * s, INK, HPos::Center, VPos::Top);
        let ((a0, a1), (b0, b1), top) = (l.a, l.b, l.top);
        let panel_defs: Vec<(i32, i32, f64, String)> = {
            let mut v = vec![(
                a0,
                a1,
                0.0,
                match (self.whole(), self.both()) {
                    (true, true) => "recall (large: whole model, small: per layer)".into(),
                    (true, false) => "whole-model recall".into(),
                    _ => "per-layer selection recall".into(),
                },
            )];
            if l.panels == 2 {
                let reference = self.reference.clone().unwrap_or_else(|| "the reference".into());
                v.push((b0, b1, l.sel_lo, format!("selection recall against the {reference} top-k")));
            }
            v
        };
        let axis_y = l.axis_y();
        for (x0, x1, lo, name) in &panel_defs {
            for i in 0..=5 {
                let v = lo + (1.0 - lo) * i as f64 / 5.0;
                let x = panel_x(*x0, *x1, *lo, v);
                root.draw(&PathElement::new(vec![(x, top - px(6.0)), (x, axis_y)], GRID.stroke_width(1))).map_err(draw_err)?;
                let d = if (1.0 - lo) < 0.5 { 2 } else { 1 };
                root.draw(&Text::new(format!("{v:.d$}"), (x, axis_y + px(6.0)), tick_style.clone())).map_err(draw_err)?;
            }
            root.draw(&PathElement::new(vec![(*x0, axis_y), (*x1, axis_y)], INK_SOFT.stroke_width(1))).map_err(draw_err)?;
            root.draw(&Text::new(name.clone(), ((x0 + x1) / 2, axis_y + px(30.0)), axis_style.clone())).map_err(draw_err)?;
        }
        if let Some(t) = self.threshold {
            let x = panel_x(a0, a1, 0.0, t) as f64;
            draw_dashed(
                root,
                &[(x, (top - px(6.0)) as f64), (x, axis_y as f64)],
                Dash::Dotted,
                s * 1.2,
                INK_SOFT.stroke_width((2.0 * s).round().max(1.0) as u32),
            )?;
        }
        Ok(())
    }

    /// Each row: its label, intervals and values, under a head per k.
    fn draw_rows<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, l: &CompareLayout, enc: &Encoding) -> Result<(), ChartError> {
        let s = l.s;
        let px = |v: f64| l.px(v);
        let both = self.both();
        let ((a0, a1), (b0, b1), row_h) = (l.a, l.b, l.row_h);
        let label_style = text_at(17.0 * s, INK, HPos::Right, VPos::Center);
        let head_style = text_at(17.0 * s, INK_SOFT, HPos::Left, VPos::Center);
        let value_style = text_at(15.0 * s, INK_SOFT, HPos::Left, VPos::Center);
        let (big, small) = (6.5 * s, 4.2 * s);
        let (thick, thin) = ((3.0 * s).round().max(1.0) as u32, (1.6 * s).round().max(1.0) as u32);
        let mut y = l.top;
        let mut prev = None;
        for r in &self.rows {
            let look = enc.look_of(r.topk, &r.precision);
            if prev != Some(r.topk) {
                let yc = y + row_h / 2;
                root.draw(&Text::new(format!("k = {}", r.topk), (l.margin, yc), head_style.clone().color(&text_color(look.color))))
                    .map_err(draw_err)?;
                y += row_h;
                prev = Some(r.topk);
            }
            let yc = y + row_h / 2;
            root.draw(&Text::new(r.precision.clone(), (l.x_labels, yc), label_style.clone())).map_err(draw_err)?;
            let off = if both { (row_h as f64 * 0.17).round() as i32 } else { 0 };
            let interval = |x0: i32, x1: i32, lo: f64, e: Estimate, yy: i32, width: u32, r: f64, m: Marker| {
                root.draw(&PathElement::new(
                    vec![(panel_x(x0, x1, lo, e.low), yy), (panel_x(x0, x1, lo, e.high), yy)],
                    look.color.stroke_width(width),
                ))
                .map_err(draw_err)?;
                draw_marker(root, m, (panel_x(x0, x1, lo, e.value), yy), r, look.color, s)
            };
            // recall panel: whole model above (large), per layer below (small)
            if let Some(m) = r.model.filter(|_| self.whole_model_only) {
                interval(a0, a1, 0.0, m, yc, thick, big, look.marker)?;
            } else if let Some(m) = r.model {
                interval(a0, a1, 0.0, m, yc - off, thick, big, look.marker)?;
                interval(a0, a1, 0.0, r.layer, yc + off, thin, small, look.marker)?;
            } else {
                interval(a0, a1, 0.0, r.layer, yc, thick, big, look.marker)?;
            }
            let main = r.model.unwrap_or(r.layer);
            let txt = format!("{:.3} [{:.3}, {:.3}]", main.value, main.low, main.high);
            root.draw(&Text::new(txt, (a1 + px(12.0), yc), value_style.clone())).map_err(draw_err)?;
            if l.panels == 2 {
                if let Some(e) = r.selection {
                    interval(b0, b1, l.sel_lo, e, yc, thick, big, look.marker)?;
                    let txt = format!("{:.3} [{:.3}, {:.3}]", e.value, e.low, e.high);
                    root.draw(&Text::new(txt, (b1 + px(12.0), yc), value_style.clone())).map_err(draw_err)?;
                } else {
                    // say why the row is empty rather than leave a gap
                    let why = if self.reference.as_deref() == Some(r.precision.as_str()) {
                        "the reference itself (recall 1 by definition)"
                    } else {
                        "no selection against the reference"
                    };
                    root.draw(&Text::new(why, (b0 + px(8.0), yc), value_style.clone())).map_err(draw_err)?;
                }
            }
            y += row_h;
        }
        Ok(())
    }

    /// The legend strip under the panels.
    fn draw_legend<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, l: &CompareLayout) -> Result<(), ChartError> {
        let s = l.s;
        let px = |v: f64| l.px(v);
        let (big, small) = (6.5 * s, 4.2 * s);
        let (thick, thin) = ((3.0 * s).round().max(1.0) as u32, (1.6 * s).round().max(1.0) as u32);
        let ly = l.legend_y;
        let mut lx = l.margin;
        let key_style = text_at(16.0 * s, INK, HPos::Left, VPos::Center);
        let key = |lx: &mut i32, text: String, draw: &dyn Fn(i32) -> Result<(), ChartError>| -> Result<(), ChartError> {
            draw(*lx)?;
            root.draw(&Text::new(text.clone(), (*lx + px(50.0), ly), key_style.clone())).map_err(draw_err)?;
            *lx += px(50.0) + root.estimate_text_size(&text, &key_style).map_err(draw_err)?.0 as i32 + px(36.0);
            Ok(())
        };
        let seg = |x: i32, width: u32, r: f64| -> Result<(), ChartError> {
            root.draw(&PathElement::new(vec![(x, ly), (x + px(40.0), ly)], INK_SOFT.stroke_width(width))).map_err(draw_err)?;
            draw_marker(root, Marker::Circle, (x + px(20.0), ly), r, INK_SOFT, s)
        };
        if self.both() {
            key(&mut lx, "whole-model recall, Wilson 95 % interval".into(), &|x| seg(x, thick, big))?;
            key(&mut lx, "per-layer selection recall, Wilson 95 % interval".into(), &|x| seg(x, thin, small))?;
        } else if self.whole() {
            key(&mut lx, "whole-model recall, Wilson 95 % interval".into(), &|x| seg(x, thick, big))?;
        } else {
            key(&mut lx, "per-layer selection recall, Wilson 95 % interval".into(), &|x| seg(x, thick, big))?;
        }
        if l.panels == 2 {
            key(&mut lx, "right: selection recall, mean and 95 % interval over trials".into(), &|x| seg(x, thick, big))?;
        }
        if let Some(t) = self.threshold {
            key(&mut lx, format!("recall threshold {t:.2}"), &|x| {
                draw_dashed(
                    root,
                    &[(x as f64, (ly - px(11.0)) as f64), (x as f64, (ly + px(11.0)) as f64)],
                    Dash::Dotted,
                    s * 1.2,
                    INK_SOFT.stroke_width((2.0 * s).round().max(1.0) as u32),
                )
            })?;
        }
        Ok(())
    }
}

impl Painter for CompareChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        let (w, _) = root.dim_in_pixel();
        let s = ui_scale(w, 1000);
        let px = |v: f64| (v * s).round() as i32;
        root.fill(&WHITE).map_err(draw_err)?;
        let enc = Encoding::from_pairs(self.rows.iter().map(|r| (r.topk, r.precision.as_str())), &[]);
        let title_style = text_at(30.0 * s, INK, HPos::Left, VPos::Top);
        let subtitle_style = text_at(18.0 * s, INK_SOFT, HPos::Left, VPos::Top);
        let margin = px(24.0);
        let title_h = root.estimate_text_size("Ag", &title_style).map_err(draw_err)?.1 as i32;
        root.draw(&Text::new(self.title.clone(), (margin, margin), title_style)).map_err(draw_err)?;
        let line_h = root.estimate_text_size("Ag", &subtitle_style).map_err(draw_err)?.1 as i32 + px(6.0);
        let fit = w as i32 - 2 * margin;
        let lines = wrap_at_separators(&self.subtitle, fit, |t| root.estimate_text_size(t, &subtitle_style).map_or(0, |(tw, _)| tw as i32));
        for (i, line) in lines.iter().enumerate() {
            let y = margin + title_h + px(10.0) + i as i32 * line_h;
            root.draw(&Text::new(line.clone(), (margin, y), subtitle_style.clone())).map_err(draw_err)?;
        }
        // the panels start below the subtitle's further lines
        let layout = self.layout(root, s, title_h + (lines.len() as i32 - 1).max(0) * line_h)?;
        self.draw_shading(root, &layout)?;
        self.draw_axes(root, &layout)?;
        self.draw_rows(root, &layout, &enc)?;
        self.draw_legend(root, &layout)
    }
}

// The chart in a sweep: built from the cells, and its entry in the registry.

use crate::base::units::tokens_label;
use crate::report::meta::{draw, find, Grid, ReportMeta, SweepChart};
use crate::run::cell::CellResult;

pub(crate) fn estimate(value: f64, low: f64, high: f64) -> Estimate {
    let value = value.clamp(0.0, 1.0);
    Estimate { value, low: low.clamp(0.0, value), high: high.clamp(value, 1.0) }
}

/// Every (k, precision) at `context` and the detail depth: per-layer and
/// whole-model recall, and selection recall against the reference.
pub fn compare_chart(meta: &ReportMeta, cells: &[CellResult], context: u64, whole_model_only: bool) -> CompareChart {
    let g = Grid::of(cells);
    let depth = g.detail_depth();
    let trials = cells.first().map_or(0, |c| c.trials);
    let mut rows = Vec::new();
    for &k in &g.topks {
        for p in &g.precisions {
            let Some(c) = find(cells, depth, context, k, p) else { continue };
            let model = match (c.model_recall, c.model_ci_low, c.model_ci_high) {
                (Some(v), Some(lo), Some(hi)) => Some(estimate(v, lo, hi)),
                _ => None,
            };
            let selection = match (c.selection_recall, c.selection_recall_ci_low, c.selection_recall_ci_high) {
                (Some(v), Some(lo), Some(hi)) => Some(estimate(v, lo, hi)),
                _ => None,
            };
            rows.push(CompareRow {
                topk: k as u32,
                precision: p.clone(),
                layer: estimate(c.recall, c.ci_low, c.ci_high),
                model,
                selection,
            });
        }
    }
    let whole = rows.iter().any(|r| r.model.is_some());
    let what = match (whole, whole_model_only) {
        (true, false) => "Whole-model and per-layer selection recall",
        (true, true) => "Whole-model recall",
        _ => "Per-layer selection recall",
    };
    let stack = meta.stack_label().filter(|_| whole).map_or_else(String::new, |s| format!(" · whole model: {s}"));
    let chosen = if g.contexts.len() > 1 { " (detail context: --detail-context picks another)" } else { "" };
    CompareChart {
        title: format!("{what} by precision and k at {} tokens · {}", tokens_label(context), meta.preset),
        subtitle: format!(
            "{}{chosen} · needle depth {depth} %, {} · {trials} trials per row · seed {}{stack}",
            meta.physics_label(),
            meta.needle,
            meta.seed
        ),
        reference: cells.iter().find_map(|c| c.fidelity_reference.clone()),
        rows,
        threshold: Some(meta.threshold),
        whole_model_only,
    }
}

pub const CHART: SweepChart = SweepChart {
    stem: "compare",
    when: "always, at the detail context and depth (with one context it replaces recall_vs_context, whose one x position would overlap every marker)",
    caption: "Every precision and k at one context and the detail depth: per-layer selection recall with its Wilson 95 % interval, printed beside it; with a reference precision, the second panel is each selection's recall@k against the reference top-k; the dotted line is the recall threshold.",
    caption_whole: Some("Every precision and k at one context and the detail depth: whole-model recall (large marker, thick line) and per-layer selection recall (small marker, thin line) with Wilson 95 % intervals, whole-model recall printed beside them; with a reference precision, the second panel is each selection's recall@k against the reference top-k; the dotted line is the recall threshold."),
    predicted: None,
    whole_model_only: true,
    render: |c, dir, ext| {
        let chart = compare_chart(c.meta, &c.cells, c.context, c.whole_model_only);
        draw(dir, "compare", ext, |path| Ok(render_compare(&chart, path, 1600, chart.height())?))
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    fn e(v: f64) -> Estimate {
        Estimate { value: v, low: (v - 0.05).max(0.0), high: (v + 0.05).min(1.0) }
    }

    fn demo() -> CompareChart {
        let rows = [(512, "fp32", 0.8), (512, "fp8", 0.7), (1024, "fp32", 0.9), (1024, "fp8", 0.85)]
            .iter()
            .map(|&(k, p, v)| CompareRow {
                topk: k,
                precision: p.into(),
                layer: e(v),
                model: Some(e(v * 0.9)),
                selection: (p != "fp32").then(|| e(0.97)),
            })
            .collect();
        CompareChart {
            title: "t".into(),
            subtitle: "s".into(),
            rows,
            reference: Some("fp32".into()),
            threshold: Some(0.9),
            whole_model_only: false,
        }
    }

    #[test]
    fn renders_and_refuses_bad_rows() {
        let dir = tempfile::tempdir().unwrap();
        let c = demo();
        render_compare(&c, &dir.path().join("c.png"), 1600, c.height()).unwrap();
        render_compare(&c, &dir.path().join("c.svg"), 1600, c.height()).unwrap();
        let mut bad = demo();
        bad.rows[1].layer.value = 0.99; // outside its interval
        assert!(matches!(render_compare(&bad, &dir.path().join("b.png"), 1600, 900), Err(ChartError::InvalidInput(_))));
        bad.rows.clear();
        assert!(render_compare(&bad, &dir.path().join("b.png"), 1600, 900).is_err());
        assert!(!dir.path().join("b.png").exists());
    }

    fn svg(c: &CompareChart) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        render_compare(c, &path, 1600, c.height()).unwrap();
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn empty_reference_rows_say_why_and_whole_model_only_drops_per_layer() {
        let both = svg(&demo());
        assert_eq!(both.matches("the reference itself").count(), 2, "one note per fp32 row");
        assert!(both.contains("per-layer selection recall"));
        let alone = svg(&CompareChart { whole_model_only: true, ..demo() });
        assert!(!alone.contains("per-layer") && !alone.contains("per layer"), "no per-layer key, axis or marker note");
        assert!(alone.contains("whole-model recall"));
    }

    #[test]
    fn a_long_subtitle_wraps_inside_the_chart() {
        let long = CompareChart { subtitle: ["RoPE v4, pooling on"; 12].join(" · "), ..demo() };
        let text = svg(&long);
        // two lines, each a run of whole parts
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("RoPE v4, pooling on")).collect();
        assert!(lines.len() >= 2, "{lines:?}");
    }

    #[test]
    fn selection_floor_rounds_down_to_a_tenth() {
        let mut c = demo();
        assert_eq!(selection_floor(&c.rows), 0.9);
        c.rows[1].selection = Some(e(0.4));
        assert_eq!(selection_floor(&c.rows), 0.3);
    }
}

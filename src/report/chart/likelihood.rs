//! `diagnose`'s chart: how likely each candidate hypothesis makes the
//! observations (one horizontal bar per candidate, best at the top and
//! longest: its support, the log10 likelihood above the axis floor, the
//! posterior and the log10 Bayes factor against the best printed by each
//! bar), and, below, each observation row's measured recall with its Wilson
//! 95 % interval beside the recall the leading hypotheses simulate for it.
//! What every row shares (k, configuration) is said once above the rows;
//! each row's label keeps what tells it apart, turned upright when the rows
//! are too close for it to lie flat.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::canvas::{draw_err, render_atomically, ChartError, Painter};
use super::style::{palette_color, text, text_at, ui_scale, GRID, INK, INK_SOFT};
use crate::base::stats::{wilson_interval, Z95};

/// One candidate, in rank order.
#[derive(Debug, Clone, PartialEq)]
pub struct LikelihoodBar {
    pub hypothesis: String,
    /// log10 of the Bayes factor against the best (≤ 0).
    pub log10_bayes_factor: f64,
    pub posterior: f64,
}

/// One observation row: what was measured and what each leader simulates.
#[derive(Debug, Clone, PartialEq)]
pub struct RowRecall {
    /// Printed under the row, one line per `\n`-separated part.
    pub label: String,
    pub found: u64,
    pub total: u64,
    /// One per leader, in [`LikelihoodChart::leaders`] order.
    pub simulated: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LikelihoodChart {
    pub title: String,
    pub subtitle: String,
    pub bars: Vec<LikelihoodBar>,
    /// Printed under the bars (the candidates left out as not applicable).
    pub note: Option<String>,
    /// The hypotheses whose simulated recall the second panel shows.
    pub leaders: Vec<String>,
    pub rows: Vec<RowRecall>,
}

/// Bars end here (log10 BF); a longer one is cut and marked with its value.
pub const FLOOR: f64 = -30.0;

/// Image size that fits `bars` candidates and `rows` observation rows.
pub fn likelihood_size(bars: usize, rows: usize) -> (u32, u32) {
    let bars_h = 150 + 30 * bars as u32;
    let rows_h = if rows == 0 { 0 } else { 600 };
    (1600, (bars_h + rows_h + 60).clamp(600, 16_000))
}

/// Renders `chart` to `path` (`.png` or `.svg`), atomically.
pub fn render_likelihood(chart: &LikelihoodChart, path: &Path) -> Result<(), ChartError> {
    if chart.bars.is_empty() {
        return Err(ChartError::InvalidInput("likelihood chart has no candidates".into()));
    }
    for b in &chart.bars {
        if b.log10_bayes_factor.is_nan() || b.log10_bayes_factor > 1e-9 || !(0.0..=1.0).contains(&b.posterior) {
            return Err(ChartError::InvalidInput(format!("{}: Bayes factor or posterior out of range", b.hypothesis)));
        }
    }
    for r in &chart.rows {
        if r.total == 0 || r.found > r.total || r.simulated.len() != chart.leaders.len() {
            return Err(ChartError::InvalidInput(format!("row {}: counts or simulated recalls do not fit", r.label)));
        }
        if r.simulated.iter().any(|p| !(0.0..=1.0).contains(p)) {
            return Err(ChartError::InvalidInput(format!("row {}: simulated recall outside 0..1", r.label)));
        }
    }
    let (w, h) = likelihood_size(chart.bars.len(), chart.rows.len());
    render_atomically(chart, path, w, h)
}

/// The support axis: bars start at `floor` (log10 Bayes factor against the
/// best: the weakest shown, rounded down to a multiple of 5, at least 5 and
/// at most [`FLOOR`] below the best), and each bar's length is its log10
/// likelihood above it, so the best is the longest and 1.3 shorter is 20:1
/// against.
#[derive(Debug, Clone, PartialEq)]
struct Support {
    floor: f64,
    /// Per bar, in order: its length, 0 ..= `-floor`.
    lengths: Vec<f64>,
}

impl Support {
    fn of(bars: &[LikelihoodBar]) -> Self {
        let worst = bars.iter().map(|b| b.log10_bayes_factor).fold(0.0f64, f64::min).max(FLOOR);
        let floor = (worst / 5.0).floor().min(-1.0) * 5.0;
        Support { floor, lengths: bars.iter().map(|b| b.log10_bayes_factor.max(floor) - floor).collect() }
    }

    fn span(&self) -> f64 {
        -self.floor
    }
}

/// The bar's printed value: the posterior, and the log10 Bayes factor
/// against the best where it is not the best (floored bars say so).
fn bar_label(b: &LikelihoodBar, floor: f64) -> String {
    let post = match b.posterior {
        p if p >= 0.001 => format!("{p:.3}"),
        p if p > 0.0 => format!("{p:.0e}"),
        _ => "0".to_string(),
    };
    if b.log10_bayes_factor > -1e-9 {
        format!("posterior {post} · best")
    } else if b.log10_bayes_factor < floor {
        format!("posterior {post} · log10 BF {:.0}, below the axis", b.log10_bayes_factor)
    } else {
        format!("posterior {post} · log10 BF {:.1}", b.log10_bayes_factor)
    }
}

impl Painter for LikelihoodChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        self.paint_labelled(root).map(|_| ())
    }
}

impl LikelihoodChart {
    /// Paints the chart; returns the boxes of the row labels drawn (to check them).
    fn paint_labelled<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<Vec<LabelBox>, ChartError> {
        let (w, _) = root.dim_in_pixel();
        let s = ui_scale(w, 1000);
        root.fill(&WHITE).map_err(draw_err)?;
        root.draw(&Text::new(self.title.clone(), ((20.0 * s) as i32, (16.0 * s) as i32), text(26.0 * s, INK))).map_err(draw_err)?;
        root.draw(&Text::new(self.subtitle.clone(), ((20.0 * s) as i32, (50.0 * s) as i32), text(16.0 * s, INK_SOFT))).map_err(draw_err)?;
        let n = self.bars.len();
        let bars_h = 150 + 30 * n as u32;
        let (top, bottom) = root.split_vertically(bars_h + 40);
        self.paint_bars(root, &top.margin(80, 40, 20, 40), s)?;
        if self.rows.is_empty() {
            return Ok(Vec::new());
        }
        self.paint_rows(root, &bottom.margin(10, 20, 20, 40), s)
    }

    fn paint_bars<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        area: &DrawingArea<DB, Shift>,
        s: f64,
    ) -> Result<(), ChartError> {
        let n = self.bars.len();
        let support = Support::of(&self.bars);
        let span = support.span();
        let label_w = (440.0 * s) as u32;
        let mut c = ChartBuilder::on(area)
            .x_label_area_size((50.0 * s) as u32)
            .y_label_area_size(label_w)
            .build_cartesian_2d(0.0..span, 0.0..n as f64)
            .map_err(draw_err)?;
        let x_desc = format!(
            "support: log10 likelihood, counted from {} below the best's (longest = best; 1.3 shorter = 20:1 against)",
            support.span()
        );
        c.configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc(x_desc)
            .label_style(text(15.0 * s, INK))
            .axis_desc_style(text(16.0 * s, INK))
            .light_line_style(GRID.mix(0.0))
            .bold_line_style(GRID)
            .draw()
            .map_err(draw_err)?;
        for (r, (b, &len)) in self.bars.iter().zip(&support.lengths).enumerate() {
            let y = (n - r) as f64;
            let color = if b.posterior >= 0.01 { palette_color(0) } else { INK_SOFT };
            c.draw_series(std::iter::once(Rectangle::new([(0.0, y - 0.82), (len, y - 0.18)], color.mix(0.8).filled())))
                .map_err(draw_err)?;
            let (px, py) = c.backend_coord(&(0.0, y - 0.5));
            root.draw(&Text::new(b.hypothesis.clone(), (px - (10.0 * s) as i32, py), text_at(15.0 * s, INK, HPos::Right, VPos::Center)))
                .map_err(draw_err)?;
            // The value sits inside the bar's end, or right of it when the bar is short.
            let (bx, _) = c.backend_coord(&(len, y - 0.5));
            let inside = bx - px > (260.0 * s) as i32;
            let (tx, anchor, ink) =
                if inside { (bx - (6.0 * s) as i32, HPos::Right, WHITE) } else { (bx + (6.0 * s) as i32, HPos::Left, INK) };
            root.draw(&Text::new(bar_label(b, support.floor), (tx, py), text_at(13.0 * s, ink, anchor, VPos::Center))).map_err(draw_err)?;
        }
        if let Some(note) = &self.note {
            let (px, py) = c.backend_coord(&(0.0, 0.0));
            root.draw(&Text::new(
                note.clone(),
                (px - label_w as i32 + (10.0 * s) as i32, py + (58.0 * s) as i32),
                text(14.0 * s, INK_SOFT),
            ))
            .map_err(draw_err)?;
        }
        Ok(())
    }

    /// The recall panel; returns the boxes of the row labels it drew.
    fn paint_rows<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        area: &DrawingArea<DB, Shift>,
        s: f64,
    ) -> Result<Vec<LabelBox>, ChartError> {
        let m = self.rows.len();
        let legend_w = (360.0 * s) as u32;
        let (plot, legend) = area.split_horizontally(area.dim_in_pixel().0.saturating_sub(legend_w));
        let labels = RowLabels::of(&self.rows);
        let caption_h = if labels.shared.is_empty() { 0 } else { (28.0 * s) as u32 };
        let build = |label_h: u32| {
            ChartBuilder::on(&plot)
                .margin_top(caption_h)
                .x_label_area_size(label_h)
                .y_label_area_size((80.0 * s) as u32)
                .build_cartesian_2d(0.0..m as f64, 0.0..1.0)
                .map_err(draw_err)
        };
        // The x mapping does not depend on the label area's height: place
        // the labels on a probe, then build the chart with the room they take.
        let probe = build((80.0 * s) as u32)?;
        let mids: Vec<i32> = (0..m).map(|i| probe.backend_coord(&(i as f64 + 0.5, 0.0)).0).collect();
        let measure =
            |t: &str| root.estimate_text_size(t, &text(ROW_LABEL_PX * s, INK)).map(|(w, h)| (w as i32, h as i32)).unwrap_or((0, 0));
        let layout = place_row_labels(&labels.lines, &mids, s, measure);
        let mut c = build(layout.height)?;
        c.configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc("recall: found / total")
            .label_style(text(15.0 * s, INK))
            .axis_desc_style(text(16.0 * s, INK))
            .light_line_style(GRID.mix(0.0))
            .bold_line_style(GRID)
            .draw()
            .map_err(draw_err)?;
        let leaders = self.leaders.len();
        for (i, r) in self.rows.iter().enumerate() {
            let mid = i as f64 + 0.5;
            let (lo, hi) = wilson_interval(r.found, r.total, Z95);
            let obs_x = mid - 0.15 * leaders.min(1) as f64;
            c.draw_series(std::iter::once(PathElement::new(vec![(obs_x, lo), (obs_x, hi)], INK.stroke_width((2.0 * s) as u32))))
                .map_err(draw_err)?;
            let p = r.found as f64 / r.total as f64;
            c.draw_series(std::iter::once(Circle::new((obs_x, p), (6.0 * s) as i32, INK.filled()))).map_err(draw_err)?;
            for (j, &q) in r.simulated.iter().enumerate() {
                let x = mid + 0.1 * (j as f64 + 0.5 - leaders as f64 / 2.0) + 0.1;
                let style = palette_color(j + 1).filled();
                let half = (6.0 * s) as i32;
                let (px, py) = c.backend_coord(&(x, q));
                root.draw(&Rectangle::new([(px - half, py - half), (px + half, py + half)], style)).map_err(draw_err)?;
            }
        }
        let (left, axis_y) = c.backend_coord(&(0.0, 0.0));
        if !labels.shared.is_empty() {
            let top = c.plotting_area().get_pixel_range().1.start;
            let caption = format!("every row: {}", labels.shared.join(" · "));
            root.draw(&Text::new(caption, (left, top - (8.0 * s) as i32), text_at(14.0 * s, INK_SOFT, HPos::Left, VPos::Bottom)))
                .map_err(draw_err)?;
        }
        let boxes = layout.draw(root, axis_y, s)?;
        self.paint_rows_legend(&legend, s)?;
        Ok(boxes)
    }

    fn paint_rows_legend<DB: DrawingBackend>(&self, legend: &DrawingArea<DB, Shift>, s: f64) -> Result<(), ChartError> {
        let leaders = self.leaders.len();
        let line = (26.0 * s) as i32;
        let x0 = (10.0 * s) as i32;
        legend.draw(&Circle::new((x0 + (12.0 * s) as i32, line), (6.0 * s) as i32, INK.filled())).map_err(draw_err)?;
        legend
            .draw(&Text::new("observed, Wilson 95 %", (x0 + (30.0 * s) as i32, line), text_at(15.0 * s, INK, HPos::Left, VPos::Center)))
            .map_err(draw_err)?;
        for (j, name) in self.leaders.iter().enumerate() {
            let y = line * (j as i32 + 2);
            let half = (6.0 * s) as i32;
            let cx = x0 + (12.0 * s) as i32;
            legend
                .draw(&Rectangle::new([(cx - half, y - half), (cx + half, y + half)], palette_color(j + 1).filled()))
                .map_err(draw_err)?;
            legend
                .draw(&Text::new(
                    format!("#{} {name}", j + 1),
                    (x0 + (30.0 * s) as i32, y),
                    text_at(14.0 * s, INK, HPos::Left, VPos::Center),
                ))
                .map_err(draw_err)?;
        }
        legend
            .draw(&Text::new("simulated recall", (x0, line * (leaders as i32 + 2)), text_at(14.0 * s, INK_SOFT, HPos::Left, VPos::Center)))
            .map_err(draw_err)?;
        Ok(())
    }
}

/// Row labels' size, in pixels at the reference scale.
const ROW_LABEL_PX: f64 = 13.0;
/// An upright label longer than this (reference pixels) is cut with "…".
const UPRIGHT_MAX_PX: f64 = 240.0;

/// A label's box: (left, top, right, bottom) in pixels, on the image (or,
/// while placed, with y measured down from the x axis).
pub(crate) type LabelBox = (i32, i32, i32, i32);

/// The rows' labels: what every row shares (said once), and per row its
/// lines without it.
#[derive(Debug, Clone, PartialEq)]
struct RowLabels {
    shared: Vec<String>,
    lines: Vec<Vec<String>>,
}

impl RowLabels {
    /// Parts are a label's " · "-separated pieces of its `\n`-separated
    /// lines; a part every row has is shared (with two rows or more).
    fn of(rows: &[RowRecall]) -> Self {
        let parts: Vec<Vec<Vec<&str>>> = rows.iter().map(|r| r.label.split('\n').map(|l| l.split(" · ").collect()).collect()).collect();
        let mut shared: Vec<String> = Vec::new();
        if let (Some(first), true) = (parts.first(), rows.len() > 1) {
            for &p in first.iter().flatten() {
                if !p.is_empty() && !shared.iter().any(|x| x == p) && parts.iter().all(|q| q.iter().flatten().any(|x| *x == p)) {
                    shared.push(p.to_string());
                }
            }
        }
        let lines = parts
            .iter()
            .map(|lines| {
                lines
                    .iter()
                    .map(|ps| ps.iter().filter(|p| !shared.iter().any(|x| x == *p)).copied().collect::<Vec<_>>().join(" · "))
                    .filter(|l| !l.is_empty())
                    .collect()
            })
            .collect();
        RowLabels { shared, lines }
    }
}

/// One label to draw: its text, anchor (x, y below the axis) and box.
struct PlacedLabel {
    text: String,
    at: (i32, i32),
    bounds: LabelBox,
}

/// The row labels placed under the axis: flat (each line centred under its
/// row) when every line fits between its neighbours, else upright (one
/// line reading upwards, hanging from the axis, cut at [`UPRIGHT_MAX_PX`]),
/// every `step`-th row labelled when even that is too close.
struct RowLabelLayout {
    upright: bool,
    labels: Vec<PlacedLabel>,
    /// The room the labels take below the axis.
    height: u32,
}

fn place_row_labels(lines: &[Vec<String>], mids: &[i32], s: f64, measure: impl Fn(&str) -> (i32, i32)) -> RowLabelLayout {
    let pitch = match mids {
        [a, b, ..] => b - a,
        _ => i32::MAX,
    };
    let gap = (10.0 * s) as i32;
    let (top, line_h) = ((12.0 * s) as i32, (18.0 * s) as i32);
    let fits_flat = lines.iter().flatten().all(|l| measure(l).0 + gap <= pitch);
    let mut labels = Vec::new();
    if fits_flat {
        let rows = lines.iter().map(Vec::len).max().unwrap_or(0) as i32;
        for (ls, &x) in lines.iter().zip(mids) {
            for (l, line) in ls.iter().enumerate() {
                let (w, h) = measure(line);
                let y = top + line_h * l as i32;
                labels.push(PlacedLabel { text: line.clone(), at: (x, y), bounds: (x - w / 2, y, x + w - w / 2, y + h) });
            }
        }
        return RowLabelLayout { upright: false, labels, height: (top + line_h * rows + gap).max((40.0 * s) as i32) as u32 };
    }
    let max_w = (UPRIGHT_MAX_PX * s) as i32;
    let (_, text_h) = measure("Ag");
    let step = ((text_h + gap) as f64 / pitch.max(1) as f64).ceil().max(1.0) as usize;
    let mut longest = 0;
    for (ls, &x) in lines.iter().zip(mids).step_by(step) {
        let full = ls.join(" · ");
        let (mut t, mut n) = (full.clone(), full.chars().count());
        while measure(&t).0 > max_w && n > 1 {
            n -= 1;
            t = format!("{}…", full.chars().take(n).collect::<String>());
        }
        let (w, h) = measure(&t);
        longest = longest.max(w);
        labels.push(PlacedLabel { text: t, at: (x, top), bounds: (x - h / 2, top, x + h - h / 2, top + w) });
    }
    RowLabelLayout { upright: true, labels, height: (top + longest + gap) as u32 }
}

impl RowLabelLayout {
    /// Draws the labels under the axis at `axis_y`; returns their boxes on the image.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, axis_y: i32, s: f64) -> Result<Vec<LabelBox>, ChartError> {
        let style = if self.upright {
            // Reading upwards, its end at the anchor: it hangs from the axis.
            text(ROW_LABEL_PX * s, INK).transform(FontTransform::Rotate270).pos(Pos::new(HPos::Right, VPos::Center))
        } else {
            text_at(ROW_LABEL_PX * s, INK, HPos::Center, VPos::Top)
        };
        let mut boxes = Vec::new();
        for l in &self.labels {
            root.draw(&Text::new(l.text.clone(), (l.at.0, axis_y + l.at.1), style.clone())).map_err(draw_err)?;
            let (x0, y0, x1, y1) = l.bounds;
            boxes.push((x0, axis_y + y0, x1, axis_y + y1));
        }
        Ok(boxes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(h: &str, bf: f64, p: f64) -> LikelihoodBar {
        LikelihoodBar { hypothesis: h.into(), log10_bayes_factor: bf, posterior: p }
    }

    /// `rows` observation rows labelled as `diagnose` labels them, the
    /// configuration of row i from `config(i)`.
    fn chart_with_rows(rows: usize, config: impl Fn(usize) -> String) -> LikelihoodChart {
        let contexts = ["1.87K", "3.53K", "5.17K", "6.84K", "10.17K", "11.78K"];
        LikelihoodChart {
            title: "t".into(),
            subtitle: "s".into(),
            bars: (0..34).map(|i| bar(&format!("scale-unwritten-zero+ties-lowest-{i}"), -(i as f64), 0.0)).collect(),
            note: None,
            leaders: vec!["a".into(), "b".into(), "c".into()],
            rows: (0..rows)
                .map(|i| RowRecall {
                    label: format!("{}\n{} % · k 512\n{}", contexts[i / 3 % 6], [10, 50, 90][i % 3], config(i)),
                    found: 1,
                    total: 1,
                    simulated: vec![0.5, 0.5, 0.5],
                })
                .collect(),
        }
    }

    /// The row labels' boxes as painted at the size `render_likelihood` draws.
    fn label_boxes(chart: &LikelihoodChart) -> (Vec<LabelBox>, (u32, u32)) {
        crate::report::chart::font::ensure_font_registered().unwrap();
        let (w, h) = likelihood_size(chart.bars.len(), chart.rows.len());
        let mut pixels = vec![0u8; w as usize * h as usize * 3];
        let root = BitMapBackend::with_buffer(&mut pixels, (w, h)).into_drawing_area();
        (chart.paint_labelled(&root).unwrap(), (w, h))
    }

    // The rows' labels never run into each other, flat or upright, and stay on the image.
    #[test]
    fn row_labels_do_not_collide() {
        let cases = [
            ("the incident's 18 rows", chart_with_rows(18, |_| "rocm-fp8".into()), false),
            ("18 rows, each its own long configuration", chart_with_rows(18, |i| format!("fp8-fp32scale+scale-unwritten-{i}")), true),
            ("200 rows", chart_with_rows(200, |i| format!("config-{i}")), true),
        ];
        for (what, chart, upright) in cases {
            let (boxes, (w, h)) = label_boxes(&chart);
            assert!(boxes.len() >= chart.rows.len().min(18), "{what}: {} labels", boxes.len());
            for (i, a) in boxes.iter().enumerate() {
                assert!(a.0 >= 0 && a.2 <= w as i32 && a.1 >= 0 && a.3 <= h as i32, "{what}: label {i} {a:?} off the {w}×{h} image");
                for b in &boxes[i + 1..] {
                    let apart = a.2 <= b.0 || b.2 <= a.0 || a.3 <= b.1 || b.3 <= a.1;
                    assert!(apart, "{what}: labels {a:?} and {b:?} overlap");
                }
            }
            // Upright boxes are taller than wide.
            let tall = boxes.iter().all(|b| b.3 - b.1 > b.2 - b.0);
            assert_eq!(tall, upright, "{what}");
        }
        // What every row shares is said once, not under each row.
        let labels = RowLabels::of(&chart_with_rows(18, |_| "rocm-fp8".into()).rows);
        assert_eq!(labels.shared, ["k 512", "rocm-fp8"]);
        assert_eq!(labels.lines[4], ["3.53K", "50 %"]);
    }

    // The best candidate's bar is the longest, the full axis; the rest in
    // order of their Bayes factors, none negative.
    #[test]
    fn the_best_bar_is_the_longest() {
        let bars = vec![bar("a", 0.0, 0.9), bar("b", -1.0, 0.09), bar("c", -7.5, 0.0), bar("healthy", -250.0, 0.0)];
        let support = Support::of(&bars[..3]);
        assert_eq!(support.floor, -10.0, "the weakest, rounded down to a multiple of 5");
        assert_eq!(support.lengths, [10.0, 9.0, 2.5]);
        assert_eq!(support.lengths[0], support.span(), "the best fills the axis");
        let support = Support::of(&bars);
        assert_eq!(support.floor, FLOOR, "the axis stops at the floor");
        assert_eq!(support.lengths, [30.0, 29.0, 22.5, 0.0]);
        assert_eq!(bar_label(&bars[0], support.floor), "posterior 0.900 · best");
        assert_eq!(bar_label(&bars[3], support.floor), "posterior 0 · log10 BF -250, below the axis");
    }

    // Issue 18, item 4: the chart renders, and refuses what it cannot draw.
    #[test]
    fn renders_png_and_svg_and_rejects_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let bar = |h: &str, bf: f64, p: f64| LikelihoodBar { hypothesis: h.into(), log10_bayes_factor: bf, posterior: p };
        let chart = LikelihoodChart {
            title: "t".into(),
            subtitle: "s".into(),
            bars: vec![bar("a", 0.0, 0.9), bar("b", -1.0, 0.09), bar("healthy", -250.0, 0.0)],
            note: Some("not applicable: c".into()),
            leaders: vec!["a".into(), "b".into()],
            rows: vec![RowRecall { label: "4K · 50 % · k 512".into(), found: 1, total: 3, simulated: vec![0.3, 0.9] }],
        };
        for ext in ["png", "svg"] {
            let path = dir.path().join(format!("l.{ext}"));
            render_likelihood(&chart, &path).unwrap();
            assert!(std::fs::metadata(&path).unwrap().len() > 1000);
        }
        let bad = LikelihoodChart { bars: vec![bar("a", 0.5, 0.9)], ..chart.clone() };
        assert!(render_likelihood(&bad, &dir.path().join("x.png")).is_err());
        let bad = LikelihoodChart { rows: vec![RowRecall { label: "r".into(), found: 4, total: 3, simulated: vec![0.1, 0.2] }], ..chart };
        assert!(render_likelihood(&bad, &dir.path().join("x.png")).is_err());
        assert!(!dir.path().join("x.png").exists());
    }
}

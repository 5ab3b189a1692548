//! `diagnose`'s chart: how likely each candidate hypothesis makes the
//! observations (one horizontal bar per candidate, best at the top, the
//! log10 Bayes factor against the best, the posterior printed by each bar),
//! and, below, each observation row's measured recall with its Wilson 95 %
//! interval beside the recall the leading hypotheses simulate for it.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

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
    let rows_h = if rows == 0 { 0 } else { 520 };
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

/// The bar's printed value: the posterior, and the Bayes factor where it is not the best.
fn bar_label(b: &LikelihoodBar) -> String {
    let post = if b.posterior >= 0.001 { format!("{:.3}", b.posterior) } else { format!("{:.0e}", b.posterior) };
    if b.log10_bayes_factor > -1e-9 {
        format!("posterior {post}")
    } else if b.log10_bayes_factor < FLOOR {
        format!("{post} · log10 BF {:.0} (cut)", b.log10_bayes_factor)
    } else {
        format!("{post} · {:.1}", b.log10_bayes_factor)
    }
}

impl Painter for LikelihoodChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        let (w, _) = root.dim_in_pixel();
        let s = ui_scale(w, 1000);
        root.fill(&WHITE).map_err(draw_err)?;
        root.draw(&Text::new(self.title.clone(), ((20.0 * s) as i32, (16.0 * s) as i32), text(26.0 * s, INK))).map_err(draw_err)?;
        root.draw(&Text::new(self.subtitle.clone(), ((20.0 * s) as i32, (50.0 * s) as i32), text(16.0 * s, INK_SOFT))).map_err(draw_err)?;
        let n = self.bars.len();
        let bars_h = 150 + 30 * n as u32;
        let (top, bottom) = root.split_vertically(bars_h + 40);
        self.paint_bars(root, &top.margin(80, 40, 20, 40), s)?;
        if !self.rows.is_empty() {
            self.paint_rows(root, &bottom.margin(10, 20, 20, 40), s)?;
        }
        Ok(())
    }
}

impl LikelihoodChart {
    fn paint_bars<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        area: &DrawingArea<DB, Shift>,
        s: f64,
    ) -> Result<(), ChartError> {
        let n = self.bars.len();
        let worst = self.bars.iter().map(|b| b.log10_bayes_factor).fold(0.0f64, f64::min).max(FLOOR);
        let x_lo = (worst / 5.0).floor().min(-1.0) * 5.0;
        let label_w = (440.0 * s) as u32;
        let mut c = ChartBuilder::on(area)
            .x_label_area_size((50.0 * s) as u32)
            .y_label_area_size(label_w)
            .build_cartesian_2d(x_lo..0.0, 0.0..n as f64)
            .map_err(draw_err)?;
        c.configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("log10 Bayes factor against the best (0 = best; −1.3 = 20:1 against)")
            .label_style(text(15.0 * s, INK))
            .axis_desc_style(text(16.0 * s, INK))
            .light_line_style(GRID.mix(0.0))
            .bold_line_style(GRID)
            .draw()
            .map_err(draw_err)?;
        for (r, b) in self.bars.iter().enumerate() {
            let y = (n - r) as f64;
            let x = b.log10_bayes_factor.max(x_lo);
            // A zero-width bar (the best) still shows as a sliver.
            let x = if x > -0.02 * -x_lo { -0.02 * -x_lo } else { x };
            let color = if b.posterior >= 0.01 { palette_color(0) } else { INK_SOFT };
            c.draw_series(std::iter::once(Rectangle::new([(x, y - 0.82), (0.0, y - 0.18)], color.mix(0.8).filled()))).map_err(draw_err)?;
            let (px, py) = c.backend_coord(&(x_lo, y - 0.5));
            root.draw(&Text::new(b.hypothesis.clone(), (px - (10.0 * s) as i32, py), text_at(15.0 * s, INK, HPos::Right, VPos::Center)))
                .map_err(draw_err)?;
            // The value sits left of the bar's end, or right of it when the bar is short.
            let (bx, _) = c.backend_coord(&(x, y - 0.5));
            let (zx, _) = c.backend_coord(&(0.0, y - 0.5));
            let inside = zx - bx > (260.0 * s) as i32;
            let (tx, anchor, ink) =
                if inside { (bx + (6.0 * s) as i32, HPos::Left, WHITE) } else { (bx - (6.0 * s) as i32, HPos::Right, INK) };
            root.draw(&Text::new(bar_label(b), (tx, py), text_at(13.0 * s, ink, anchor, VPos::Center))).map_err(draw_err)?;
        }
        if let Some(note) = &self.note {
            let (px, py) = c.backend_coord(&(x_lo, 0.0));
            root.draw(&Text::new(
                note.clone(),
                (px - label_w as i32 + (10.0 * s) as i32, py + (58.0 * s) as i32),
                text(14.0 * s, INK_SOFT),
            ))
            .map_err(draw_err)?;
        }
        Ok(())
    }

    fn paint_rows<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        area: &DrawingArea<DB, Shift>,
        s: f64,
    ) -> Result<(), ChartError> {
        let m = self.rows.len();
        let legend_w = (360.0 * s) as u32;
        let (plot, legend) = area.split_horizontally(area.dim_in_pixel().0.saturating_sub(legend_w));
        let mut c = ChartBuilder::on(&plot)
            .x_label_area_size((80.0 * s) as u32)
            .y_label_area_size((80.0 * s) as u32)
            .build_cartesian_2d(0.0..m as f64, 0.0..1.0)
            .map_err(draw_err)?;
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
            // The label's lines (context, depth and k, configuration) under the row.
            let (px, py) = c.backend_coord(&(mid, 0.0));
            for (l, line) in r.label.split('\n').enumerate() {
                let y = py + ((14.0 + 18.0 * l as f64) * s) as i32;
                root.draw(&Text::new(line.to_string(), (px, y), text_at(13.0 * s, INK, HPos::Center, VPos::Top))).map_err(draw_err)?;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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

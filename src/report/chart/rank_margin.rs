//! Why a needle is lost: the distribution of the best needle row's rank (as a
//! share of k_eff) and of its score margin, one horizontal box per
//! (top-k, precision), from the 5/25/50/75/95 % quantiles.
//!
//! Left panel: rank ÷ k_eff, with a vertical line at 1 (the k-th row: beyond
//! it the needle is lost). Right panel: margin to the k-th competitor in
//! competitor standard deviations, with a line at 0 (below it the needle is
//! lost). The "lost" side of each panel is tinted. Whiskers span 5–95 %, the
//! box 25–75 %, the dark bar is the median.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::canvas::{draw_err, render_atomically, ChartError, Painter};
use super::recall_vs_context::{draw_dashed, Encoding};
use super::style::{text, text_at, ui_scale, Dash, TickedAxis, TickedChart, GRID, INK, INK_SOFT, RECALL_LOW};

/// Quantiles of one (top-k, precision) at one context.
#[derive(Debug, Clone, PartialEq)]
pub struct DistributionRow {
    pub topk: u32,
    pub precision: String,
    /// 5, 25, 50, 75, 95 % of rank ÷ k_eff (None: no ranked trial).
    pub rank_share: Option<[f64; 5]>,
    /// 5, 25, 50, 75, 95 % of the margin in standard deviations (None: fewer competitors than k).
    pub margin_sd: Option<[f64; 5]>,
    /// The cell's per-layer selection recall, printed next to the row label.
    pub recall: Option<f64>,
}

/// Everything drawn on a rank/margin chart.
#[derive(Debug, Clone, PartialEq)]
pub struct RankMarginChart {
    pub title: String,
    pub subtitle: String,
    /// Drawn top to bottom in this order.
    pub rows: Vec<DistributionRow>,
}

/// Renders `chart` to `path` (`.png` or `.svg`), atomically.
pub fn render_rank_margin(chart: &RankMarginChart, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    validate(chart)?;
    render_atomically(chart, path, width, height)
}

fn validate(chart: &RankMarginChart) -> Result<(), ChartError> {
    let bad = |m: String| Err(ChartError::InvalidInput(m));
    if chart.rows.is_empty() {
        return bad("rank/margin chart has no rows".into());
    }
    for r in &chart.rows {
        for (what, q) in [("rank share", r.rank_share), ("margin", r.margin_sd)] {
            if let Some(q) = q {
                if q.iter().any(|v| !v.is_finite()) {
                    return bad(format!("k={} {}: non-finite {what} quantile", r.topk, r.precision));
                }
                if q.windows(2).any(|w| w[0] > w[1] + 1e-12) {
                    return bad(format!("k={} {}: {what} quantiles are not ascending", r.topk, r.precision));
                }
            }
        }
        if let Some(q) = r.rank_share {
            if q[0] < -1e-12 {
                return bad(format!("k={} {}: negative rank share", r.topk, r.precision));
            }
        }
    }
    Ok(())
}

/// A tick step from {1, 2, 2.5, 5} × 10^n giving at most `max_ticks` ticks over `span`.
pub(crate) fn nice_step(span: f64, max_ticks: f64) -> f64 {
    let span = if span > 0.0 && span.is_finite() { span } else { 1.0 };
    let raw = span / max_ticks;
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= raw - 1e-12 {
            return m * mag;
        }
    }
    10.0 * mag
}

fn ticks(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

fn tick_label(v: f64, step: f64) -> String {
    // as many decimals as the step needs (0.25 → 2, 0.5 → 1, 2 → 0)
    let decimals = (0..4usize)
        .find(|&d| {
            let x = step * 10f64.powi(d as i32);
            (x - x.round()).abs() < 1e-9
        })
        .unwrap_or(3);
    let r = format!("{v:.decimals$}");
    if r.trim_start_matches('-').chars().all(|c| c == '0' || c == '.') {
        format!("{:.decimals$}", 0.0)
    } else {
        r
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Panel {
    Rank,
    Margin,
}

impl RankMarginChart {
    fn row_label(&self, r: &DistributionRow) -> String {
        match r.recall {
            Some(v) => format!("k={}, {} · recall {v:.2}", r.topk, r.precision),
            None => format!("k={}, {}", r.topk, r.precision),
        }
    }

    /// x range of a panel.
    fn range(&self, panel: Panel) -> (f64, f64) {
        let qs = self.rows.iter().filter_map(|r| if panel == Panel::Rank { r.rank_share } else { r.margin_sd });
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for q in qs {
            lo = lo.min(q[0]);
            hi = hi.max(q[4]);
        }
        match panel {
            Panel::Rank => {
                let hi = if hi.is_finite() { hi.max(1.25) } else { 2.0 };
                (0.0, hi * 1.06)
            }
            Panel::Margin => {
                let (lo, hi) = if lo.is_finite() { (lo.min(-0.5), hi.max(0.5)) } else { (-1.0, 1.0) };
                let pad = (hi - lo) * 0.06;
                (lo - pad, hi + pad)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn paint_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        enc: &Encoding,
        panel: Panel,
        label_w: i32,
        s: f64,
    ) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let n = self.rows.len();
        let (lo, hi) = self.range(panel);
        let step = nice_step(hi - lo, 8.0);
        let row_ticks: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
        let (caption, desc) = match panel {
            Panel::Rank => ("needle rank ÷ k_eff", "rank of the best needle row as a share of k_eff"),
            Panel::Margin => ("needle score margin", "margin to the k-th competitor (competitor SDs)"),
        };
        let labels: Vec<String> = self.rows.iter().map(|r| self.row_label(r)).collect();
        let mut chart = ChartBuilder::on(area)
            .caption(caption, text(20.0 * s, INK))
            .margin(px(12.0))
            .margin_top(px(8.0))
            .x_label_area_size(px(60.0))
            .y_label_area_size(if panel == Panel::Rank { label_w } else { px(10.0) })
            .build_cartesian_2d(
                TickedAxis { lo, hi, ticks: ticks(lo, hi, step) },
                // headroom above the rows for the limit note
                TickedAxis { lo: 0.0, hi: n as f64 + 0.55, ticks: row_ticks },
            )
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID.stroke_width(1))
            .light_line_style(TRANSPARENT)
            .axis_style(INK_SOFT.stroke_width(1))
            .x_desc(desc)
            .axis_desc_style(text(17.0 * s, INK))
            .label_style(text(15.0 * s, INK))
            .x_label_formatter(&|v: &f64| tick_label(*v, step))
            .y_label_formatter(&|v: &f64| {
                // row i (from the top) sits at n − i − 0.5
                let i = n as i64 - (v - 0.5).round() as i64 - 1;
                if panel == Panel::Rank && (0..n as i64).contains(&i) {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(draw_err)?;

        self.draw_limit(area, &mut chart, panel, (lo, hi), s)?;
        self.draw_boxes(area, &mut chart, enc, panel, (lo, hi), s)
    }

    /// The side where the needle is lost, tinted; the line at the limit
    /// and its note on the kept side.
    fn draw_limit<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        chart: &mut TickedChart<'_, DB>,
        panel: Panel,
        (lo, hi): (f64, f64),
        s: f64,
    ) -> Result<(), ChartError> {
        let px = |v: f64| (v * s).round() as i32;
        let n = self.rows.len();
        let (lost_lo, lost_hi, limit) = match panel {
            Panel::Rank => (1.0, hi, 1.0),
            Panel::Margin => (lo, 0.0, 0.0),
        };
        if lost_hi > lost_lo {
            chart
                .draw_series(std::iter::once(Rectangle::new([(lost_lo, 0.0), (lost_hi, n as f64)], RECALL_LOW.mix(0.07).filled())))
                .map_err(draw_err)?;
        }
        // backend_coord is in root pixels; `area` draws in its own
        let (ox, oy) = area.get_base_pixel();
        let (x, y_top) = chart.backend_coord(&(limit, n as f64 + 0.5));
        let (x, y_top) = (x - ox, y_top - oy);
        let y_bottom = chart.backend_coord(&(limit, 0.0)).1 - oy;
        draw_dashed(
            area,
            &[(x as f64, y_top as f64), (x as f64, y_bottom as f64)],
            Dash::Dashed,
            s,
            INK.stroke_width((2.0 * s).round().max(1.0) as u32),
        )?;
        let (plot_x, _) = chart.plotting_area().get_pixel_range();
        let (note_x, note, hpos) = limit_note(
            panel,
            x,
            (plot_x.start - ox, plot_x.end - ox),
            |t| area.estimate_text_size(t, &text_at(14.0 * s, INK, HPos::Left, VPos::Top)).map_or(0, |(w, _)| w as i32),
            px(6.0),
        );
        area.draw(&Text::new(note, (note_x, y_top + px(4.0)), text_at(14.0 * s, INK, hpos, VPos::Top))).map_err(draw_err)?;
        Ok(())
    }

    /// One box per row: whiskers from the lowest to the highest value,
    /// the box between the quartiles, the median as a bar.
    fn draw_boxes<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        chart: &mut TickedChart<'_, DB>,
        enc: &Encoding,
        panel: Panel,
        (lo, hi): (f64, f64),
        s: f64,
    ) -> Result<(), ChartError> {
        let n = self.rows.len();
        // backend_coord is in root pixels; `area` draws in its own
        let (ox, oy) = area.get_base_pixel();
        let whisker_w = (2.0 * s).round().max(1.0) as u32;
        for (i, r) in self.rows.iter().enumerate() {
            let yc = n as f64 - i as f64 - 0.5;
            let look = enc.look_of(r.topk, &r.precision);
            let q = if panel == Panel::Rank { r.rank_share } else { r.margin_sd };
            let Some(q) = q else {
                let why = if panel == Panel::Rank { "no ranked trials" } else { "no margin: fewer competitors than k" };
                let (xc, yc_px) = chart.backend_coord(&((lo + hi) / 2.0, yc));
                let (xc, yc_px) = (xc - ox, yc_px - oy);
                area.draw(&Text::new(why, (xc, yc_px), text_at(14.0 * s, INK_SOFT, HPos::Center, VPos::Center))).map_err(draw_err)?;
                continue;
            };
            let half_box = 0.26;
            let cap = 0.14;
            chart
                .draw_series(std::iter::once(PathElement::new(vec![(q[0], yc), (q[4], yc)], look.color.stroke_width(whisker_w))))
                .map_err(draw_err)?;
            for v in [q[0], q[4]] {
                chart
                    .draw_series(std::iter::once(PathElement::new(vec![(v, yc - cap), (v, yc + cap)], look.color.stroke_width(whisker_w))))
                    .map_err(draw_err)?;
            }
            chart
                .draw_series(std::iter::once(Rectangle::new([(q[1], yc - half_box), (q[3], yc + half_box)], look.color.mix(0.45).filled())))
                .map_err(draw_err)?;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(q[1], yc - half_box), (q[3], yc + half_box)],
                    look.color.stroke_width(whisker_w),
                )))
                .map_err(draw_err)?;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(q[2], yc - half_box), (q[2], yc + half_box)],
                    INK.stroke_width((3.5 * s).round().max(2.0) as u32),
                )))
                .map_err(draw_err)?;
        }
        Ok(())
    }
}

impl Painter for RankMarginChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        let (w, h) = root.dim_in_pixel();
        let s = ui_scale(w, h);
        let px = |v: f64| (v * s).round() as i32;
        root.fill(&WHITE).map_err(draw_err)?;
        let enc = Encoding::from_pairs(self.rows.iter().map(|r| (r.topk, r.precision.as_str())), &[]);

        let margin = px(24.0);
        let title_style = text_at(30.0 * s, INK, HPos::Left, VPos::Top);
        let subtitle_style = text_at(18.0 * s, INK_SOFT, HPos::Left, VPos::Top);
        let title_h = root.estimate_text_size("Ag", &title_style).map_err(draw_err)?.1 as i32;
        let sub_h = root.estimate_text_size("Ag", &subtitle_style).map_err(draw_err)?.1 as i32;
        root.draw(&Text::new(self.title.clone(), (margin, margin), title_style)).map_err(draw_err)?;
        root.draw(&Text::new(self.subtitle.clone(), (margin, margin + title_h + px(10.0)), subtitle_style.clone())).map_err(draw_err)?;
        let key = "whiskers 5–95 %, box 25–75 %, bar = median; tinted side: needle lost";
        root.draw(&Text::new(key, (margin, margin + title_h + px(10.0) + sub_h + px(6.0)), subtitle_style)).map_err(draw_err)?;
        let top = margin + title_h + px(10.0) + 2 * sub_h + px(22.0);

        let label_style = text(15.0 * s, INK);
        let mut label_w = 0;
        for r in &self.rows {
            label_w = label_w.max(root.estimate_text_size(&self.row_label(r), &label_style).map_err(draw_err)?.0 as i32);
        }
        let label_w = label_w + px(16.0);

        let body = root.margin(top, margin, margin, margin / 2);
        let (bw, _) = body.dim_in_pixel();
        // the left panel also carries the row labels
        let plot_w = (bw as i32 - label_w) / 2;
        let (left, right) = body.split_horizontally(label_w + plot_w);
        self.paint_panel(&left, &enc, Panel::Rank, label_w, s)?;
        self.paint_panel(&right, &enc, Panel::Margin, label_w, s)?;
        Ok(())
    }
}

// The chart in a sweep: built from the cells, and its entry in the registry.

use crate::base::units::tokens_label;
use crate::report::meta::{draw, find, Grid, ReportMeta, SweepChart};
use crate::run::cell::CellResult;

/// Needle rank ÷ k_eff and margin quantiles per (k, precision) at `context`
/// and the detail depth.
pub fn rank_margin_chart(meta: &ReportMeta, cells: &[CellResult], context: u64) -> RankMarginChart {
    let g = Grid::of(cells);
    let depth = g.detail_depth();
    let trials = cells.first().map_or(0, |c| c.trials);
    let mut rows = Vec::new();
    for &k in &g.topks {
        for p in &g.precisions {
            if let Some(c) = find(cells, depth, context, k, p) {
                rows.push(DistributionRow {
                    topk: k as u32,
                    precision: p.clone(),
                    rank_share: c.rank_share_quantiles,
                    margin_sd: c.margin_sd_quantiles,
                    recall: Some(c.recall),
                });
            }
        }
    }
    RankMarginChart {
        title: format!("Why needles miss one layer's top-k: rank and margin at {} tokens · {}", tokens_label(context), meta.preset),
        subtitle: format!(
            "needle depth {depth} %, {} · {trials} trials per row · rank = competitors scoring above the best needle row",
            meta.needle
        ),
        rows,
    }
}

pub const CHART: SweepChart = SweepChart {
    stem: "rank_margin",
    when: "always, at the detail context and depth",
    caption: "Why needles miss one layer's top-k: rank of the best needle row as a share of k_eff (beyond 1 it is lost) and its score margin to the k-th competitor (below 0 it is lost); whiskers 5–95 %, box 25–75 %, bar = median.",
    caption_whole: None,
    predicted: None,
    whole_model_only: false,
    render: |c, dir, ext| {
        let rm = rank_margin_chart(c.meta, &c.cells, c.context);
        let h = (300 + 70 * rm.rows.len()).clamp(1000, 4000) as u32;
        draw(dir, "rank_margin", ext, |path| Ok(render_rank_margin(&rm, path, 1600, h)?))
    },
};

/// Where the note at a panel's limit line (at `x`, the plot spanning
/// `plot` in the same pixels) goes: on the kept side of the line when it
/// fits there, else on the lost side with its arrow turned, else against
/// the plot's edge; never outside the plot (`width` measures a text).
fn limit_note(panel: Panel, x: i32, plot: (i32, i32), width: impl Fn(&str) -> i32, gap: i32) -> (i32, &'static str, HPos) {
    // (text, anchor, x) for the note on the kept side and on the lost side
    let (kept, lost) = match panel {
        Panel::Rank => (
            ("k-th row: beyond it the needle is lost →", HPos::Right, x - gap),
            ("← k-th row: beyond it the needle is lost", HPos::Left, x + gap),
        ),
        Panel::Margin => (("← below 0 the needle is lost", HPos::Left, x + gap), ("below 0 the needle is lost →", HPos::Right, x - gap)),
    };
    let fits = |(t, h, at): (&'static str, HPos, i32)| match h {
        HPos::Right => at - width(t) >= plot.0,
        _ => at + width(t) <= plot.1,
    };
    for side in [kept, lost] {
        if fits(side) {
            return (side.2, side.0, side.1);
        }
    }
    // neither side has room: the kept side's text, inside the plot
    let (t, h, _) = kept;
    match h {
        HPos::Right => (plot.1 - gap, t, HPos::Right),
        _ => (plot.0 + gap, t, HPos::Left),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> RankMarginChart {
        RankMarginChart {
            title: "t".into(),
            subtitle: "s".into(),
            rows: vec![
                DistributionRow {
                    topk: 512,
                    precision: "bf16".into(),
                    rank_share: Some([0.0, 0.05, 0.2, 0.6, 1.8]),
                    margin_sd: Some([-0.8, 0.1, 0.6, 1.1, 1.9]),
                    recall: Some(0.86),
                },
                DistributionRow { topk: 1024, precision: "fp4".into(), rank_share: None, margin_sd: None, recall: Some(1.0) },
            ],
        }
    }

    #[test]
    fn renders_png_of_the_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rm.png");
        render_rank_margin(&demo(), &path, 1200, 700).unwrap();
        let b = std::fs::read(&path).unwrap();
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(u32::from_be_bytes([b[20], b[21], b[22], b[23]]), 700);
    }

    #[test]
    fn invalid_inputs_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.png");
        let mut c = demo();
        c.rows.clear();
        assert!(render_rank_margin(&c, &path, 1200, 700).is_err());
        let mut c = demo();
        c.rows[0].margin_sd = Some([0.0, 1.0, 0.5, 2.0, 3.0]);
        assert!(render_rank_margin(&c, &path, 1200, 700).is_err());
        let mut c = demo();
        c.rows[0].rank_share = Some([f64::NAN; 5]);
        assert!(render_rank_margin(&c, &path, 1200, 700).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn limit_notes_stay_inside_the_plot() {
        // 10 px per character; the plot spans 100..900
        let width = |t: &str| 10 * t.chars().count() as i32;
        let inside = |(x, t, h): (i32, &str, HPos)| match h {
            HPos::Right => x - width(t) >= 100 && x <= 900,
            _ => x >= 100 && x + width(t) <= 900,
        };
        for panel in [Panel::Rank, Panel::Margin] {
            for x in [100, 105, 300, 500, 700, 895, 900] {
                let note = limit_note(panel, x, (100, 900), width, 6);
                let (at, t) = (note.0, note.1);
                assert!(inside(note), "x = {x}: {t:?} at {at}");
            }
        }
        // room on the kept side: the kept side's note, arrow pointing at the lost side
        assert_eq!(limit_note(Panel::Rank, 800, (100, 900), width, 6).1, "k-th row: beyond it the needle is lost →");
        // the limit near the left edge: the note turns to the right of the line
        let at = |panel, x| {
            let (x, t, h) = limit_note(panel, x, (100, 900), width, 6);
            (x, t, matches!(h, HPos::Left))
        };
        assert_eq!(at(Panel::Rank, 120), (126, "← k-th row: beyond it the needle is lost", true));
        assert_eq!(at(Panel::Margin, 880), (874, "below 0 the needle is lost →", false));
    }

    #[test]
    fn tick_steps() {
        assert_eq!(nice_step(2.0, 8.0), 0.25);
        assert_eq!(nice_step(16.0, 8.0), 2.0);
        assert_eq!(nice_step(3.0, 8.0), 0.5);
        assert_eq!(tick_label(-0.0, 0.5), "0.0");
        assert_eq!(tick_label(0.25, 0.25), "0.25");
        assert_eq!(tick_label(4.0, 2.0), "4");
        assert_eq!(ticks(-0.3, 1.1, 0.5), vec![0.0, 0.5, 1.0]);
    }
}

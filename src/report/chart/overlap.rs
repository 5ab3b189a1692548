//! Replayed tensors: how much of the exact (fp32) top-k each precision
//! variant keeps. One group of bars per k, one bar per variant (mean
//! recall@k over query tokens, with the min–max range over tokens as a
//! whisker); a dot marks the mean Jaccard overlap; a dashed line marks the
//! engines' 0.99 pass rule.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::canvas::{draw_err, render_atomically, ChartError, Painter};
use super::style::{palette_color, text, ui_scale, GRID, INK, INK_SOFT};

/// One bar: a (k, precision) summarised over query tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct OverlapBar {
    pub topk: u64,
    pub precision: String,
    pub mean_recall: f64,
    pub min_recall: f64,
    pub max_recall: f64,
    pub mean_jaccard: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OverlapChart {
    pub title: String,
    pub subtitle: String,
    pub bars: Vec<OverlapBar>,
}

/// Renders `chart` to `path` (`.png` or `.svg`), atomically.
pub fn render_overlap(chart: &OverlapChart, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    if chart.bars.is_empty() {
        return Err(ChartError::InvalidInput("overlap chart has no bars".into()));
    }
    for b in &chart.bars {
        let v = [b.mean_recall, b.min_recall, b.max_recall, b.mean_jaccard];
        if v.iter().any(|x| !x.is_finite() || !(0.0..=1.0).contains(x)) {
            return Err(ChartError::InvalidInput(format!("k={} {}: values outside 0..1", b.topk, b.precision)));
        }
    }
    render_atomically(chart, path, width, height)
}

impl Painter for OverlapChart {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError> {
        let (w, h) = root.dim_in_pixel();
        let s = ui_scale(w, h);
        root.fill(&WHITE).map_err(draw_err)?;
        let mut topks: Vec<u64> = self.bars.iter().map(|b| b.topk).collect();
        topks.dedup();
        let mut precisions: Vec<&str> = Vec::new();
        for b in &self.bars {
            if !precisions.contains(&b.precision.as_str()) {
                precisions.push(&b.precision);
            }
        }
        let lo = self.bars.iter().map(|b| b.min_recall.min(b.mean_jaccard)).fold(1.0f64, f64::min);
        let y_min = ((lo - 0.05) * 20.0).floor().max(0.0) / 20.0;
        let slots = topks.len() * (precisions.len() + 1);
        let (top, legend_w) = ((90.0 * s) as u32, (230.0 * s) as u32);
        root.draw(&Text::new(self.title.clone(), ((20.0 * s) as i32, (16.0 * s) as i32), text(26.0 * s, INK))).map_err(draw_err)?;
        root.draw(&Text::new(self.subtitle.clone(), ((20.0 * s) as i32, (50.0 * s) as i32), text(16.0 * s, INK_SOFT))).map_err(draw_err)?;
        let (plot, legend) = root.margin(top, 10, 10, 10).split_horizontally(w.saturating_sub(legend_w + 20));
        let mut c = ChartBuilder::on(&plot)
            .x_label_area_size((60.0 * s) as u32)
            .y_label_area_size((80.0 * s) as u32)
            .build_cartesian_2d(0.0..slots as f64, y_min..1.005)
            .map_err(draw_err)?;
        let label = |x: &f64| {
            let group = (*x / (precisions.len() + 1) as f64).floor() as usize;
            let within = *x - (group * (precisions.len() + 1)) as f64;
            if (within - precisions.len() as f64 / 2.0).abs() < 0.5 {
                topks.get(group).map_or(String::new(), |k| format!("k = {k}"))
            } else {
                String::new()
            }
        };
        c.configure_mesh()
            .disable_x_mesh()
            .x_labels(slots * 2)
            .x_label_formatter(&label)
            .y_desc("share of the fp32 top-k kept (recall@k)")
            .label_style(text(16.0 * s, INK))
            .axis_desc_style(text(18.0 * s, INK))
            .light_line_style(GRID.mix(0.0))
            .bold_line_style(GRID)
            .draw()
            .map_err(draw_err)?;
        for (i, b) in self.bars.iter().enumerate() {
            let group = topks.iter().position(|&k| k == b.topk).unwrap_or(0);
            let p = precisions.iter().position(|&n| n == b.precision).unwrap_or(i);
            let x0 = (group * (precisions.len() + 1) + p) as f64 + 0.5;
            let color = palette_color(p);
            c.draw_series(std::iter::once(Rectangle::new([(x0 + 0.08, y_min), (x0 + 0.92, b.mean_recall)], color.mix(0.85).filled())))
                .map_err(draw_err)?;
            let mid = x0 + 0.5;
            c.draw_series(std::iter::once(PathElement::new(
                vec![(mid, b.min_recall), (mid, b.max_recall)],
                INK.stroke_width((2.0 * s) as u32),
            )))
            .map_err(draw_err)?;
            c.draw_series(std::iter::once(Circle::new((mid, b.mean_jaccard), (5.0 * s) as i32, INK.filled()))).map_err(draw_err)?;
        }
        let rule: Vec<(f64, f64)> = (0..=40).map(|i| (slots as f64 * i as f64 / 40.0, 0.99)).collect();
        for seg in rule.chunks(2) {
            c.draw_series(std::iter::once(PathElement::new(seg.to_vec(), INK_SOFT.stroke_width((2.0 * s) as u32)))).map_err(draw_err)?;
        }
        let line = (26.0 * s) as i32;
        for (p, name) in precisions.iter().enumerate() {
            let y = (40.0 * s) as i32 + line * p as i32;
            legend
                .draw(&Rectangle::new([((10.0 * s) as i32, y), ((34.0 * s) as i32, y + (16.0 * s) as i32)], palette_color(p).filled()))
                .map_err(draw_err)?;
            legend.draw(&Text::new(name.to_string(), ((44.0 * s) as i32, y), text(16.0 * s, INK))).map_err(draw_err)?;
        }
        let y = (40.0 * s) as i32 + line * precisions.len() as i32 + line / 2;
        legend.draw(&Circle::new(((22.0 * s) as i32, y + (8.0 * s) as i32), (5.0 * s) as i32, INK.filled())).map_err(draw_err)?;
        legend.draw(&Text::new("mean Jaccard", ((44.0 * s) as i32, y), text(16.0 * s, INK))).map_err(draw_err)?;
        legend.draw(&Text::new("| min–max over tokens", ((16.0 * s) as i32, y + line), text(16.0 * s, INK))).map_err(draw_err)?;
        legend.draw(&Text::new("- - 0.99 pass rule", ((10.0 * s) as i32, y + 2 * line), text(16.0 * s, INK_SOFT))).map_err(draw_err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_png_and_rejects_bad_values() {
        let dir = tempfile::tempdir().unwrap();
        let bar = |k, p: &str, r| OverlapBar {
            topk: k,
            precision: p.into(),
            mean_recall: r,
            min_recall: r - 0.01,
            max_recall: r,
            mean_jaccard: r * r,
        };
        let chart = OverlapChart {
            title: "t".into(),
            subtitle: "s".into(),
            bars: vec![bar(512, "fp8", 0.97), bar(512, "fp4", 0.86), bar(1024, "fp8", 0.98), bar(1024, "fp4", 0.9)],
        };
        let path = dir.path().join("o.png");
        render_overlap(&chart, &path, 1200, 700).unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[1..4], b"PNG");
        let bad = OverlapChart { bars: vec![bar(512, "fp8", 1.5)], ..chart };
        assert!(render_overlap(&bad, &path, 1200, 700).is_err());
    }
}

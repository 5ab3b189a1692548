//! How a series looks (colour per top-k, dash and marker per precision)
//! and the marker and dashed-line primitives the other charts share.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::data::{RecallChart, RecallSeries};
use crate::report::chart::canvas::{draw_err, ChartError};
use crate::report::chart::style::{dash_polyline, lerp_color, palette_color, Dash, Marker};

/// Visual encoding of one series.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeriesLook {
    pub color: RGBColor,
    pub dash: Dash,
    pub marker: Marker,
}

/// Colour per top-k (ascending k), dash + marker per precision (first appearance).
pub(crate) struct Encoding {
    pub topks: Vec<u32>,
    pub precisions: Vec<String>,
}

impl Encoding {
    /// From (top-k, precision) pairs, plus extra top-k values that only own a colour.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (u32, &'a str)>, extra_topks: &[u32]) -> Self {
        let mut topks: Vec<u32> = extra_topks.to_vec();
        let mut precisions: Vec<String> = Vec::new();
        for (k, p) in pairs {
            topks.push(k);
            if !precisions.iter().any(|q| q == p) {
                precisions.push(p.to_string());
            }
        }
        topks.sort_unstable();
        topks.dedup();
        Encoding { topks, precisions }
    }

    /// Look of the series (topk, precision).
    pub fn look_of(&self, topk: u32, precision: &str) -> SeriesLook {
        let p = self.precisions.iter().position(|q| q == precision).unwrap_or(0);
        SeriesLook {
            color: self.topk_color(topk),
            dash: Dash::CYCLE[p % Dash::CYCLE.len()],
            marker: Marker::CYCLE[p % Marker::CYCLE.len()],
        }
    }

    pub(super) fn new(chart: &RecallChart) -> Self {
        let mut topks: Vec<u32> = chart.series.iter().map(|s| s.topk).chain(chart.coverage_limits.iter().map(|&(k, _)| k)).collect();
        topks.sort_unstable();
        topks.dedup();
        let mut precisions: Vec<String> = Vec::new();
        for s in &chart.series {
            if !precisions.contains(&s.precision) {
                precisions.push(s.precision.clone());
            }
        }
        Encoding { topks, precisions }
    }

    pub fn topk_color(&self, k: u32) -> RGBColor {
        palette_color(self.topks.iter().position(|&t| t == k).unwrap_or(0))
    }

    pub(super) fn look(&self, s: &RecallSeries) -> SeriesLook {
        let p = self.precisions.iter().position(|p| *p == s.precision).unwrap_or(0);
        SeriesLook {
            color: self.topk_color(s.topk),
            dash: Dash::CYCLE[p % Dash::CYCLE.len()],
            marker: Marker::CYCLE[p % Marker::CYCLE.len()],
        }
    }
}

/// Darkens light palette colours so text in them stays legible on white.
pub(crate) fn text_color(c: RGBColor) -> RGBColor {
    lerp_color(c, RGBColor(0, 0, 0), 0.25)
}

pub(crate) fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    m: Marker,
    (x, y): (i32, i32),
    r: f64,
    color: RGBColor,
    s: f64,
) -> Result<(), ChartError> {
    let fill = color.filled();
    let outline = WHITE.stroke_width((1.2 * s).round().max(1.0) as u32);
    let f = |dx: f64, dy: f64| (x + dx.round() as i32, y + dy.round() as i32);
    let ri = r.round() as i32;
    match m {
        Marker::Circle => {
            area.draw(&Circle::new((x, y), ri, fill)).map_err(draw_err)?;
            area.draw(&Circle::new((x, y), ri, outline)).map_err(draw_err)?;
        }
        Marker::Square => {
            let q = r * 0.9;
            area.draw(&Rectangle::new([f(-q, -q), f(q, q)], fill)).map_err(draw_err)?;
            area.draw(&Rectangle::new([f(-q, -q), f(q, q)], outline)).map_err(draw_err)?;
        }
        Marker::Triangle | Marker::Diamond => {
            let pts = if m == Marker::Triangle {
                vec![f(0.0, -1.25 * r), f(1.15 * r, 0.85 * r), f(-1.15 * r, 0.85 * r)]
            } else {
                vec![f(0.0, -1.3 * r), f(1.1 * r, 0.0), f(0.0, 1.3 * r), f(-1.1 * r, 0.0)]
            };
            area.draw(&Polygon::new(pts.clone(), fill)).map_err(draw_err)?;
            let mut closed = pts.clone();
            closed.push(pts[0]);
            area.draw(&PathElement::new(closed, outline)).map_err(draw_err)?;
        }
        Marker::Cross => {
            let w = color.stroke_width((2.5 * s).round().max(1.0) as u32);
            area.draw(&PathElement::new(vec![f(-r, -r), f(r, r)], w)).map_err(draw_err)?;
            area.draw(&PathElement::new(vec![f(-r, r), f(r, -r)], w)).map_err(draw_err)?;
        }
    }
    Ok(())
}

pub(crate) fn draw_dashed<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pts: &[(f64, f64)],
    dash: Dash,
    scale: f64,
    style: ShapeStyle,
) -> Result<(), ChartError> {
    for seg in dash_polyline(pts, dash.pattern(), scale) {
        if seg.len() >= 2 {
            area.draw(&PathElement::new(seg, style)).map_err(draw_err)?;
        }
    }
    Ok(())
}

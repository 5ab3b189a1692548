//! Shared chart helpers: axis tick formatting, colour scales, palettes,
//! dash patterns and text styles.

use plotters::chart::ChartContext;
use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontTransform, IntoFont, RGBColor, TextStyle};

use super::font::FONT_FAMILY;

/// Formats an integer with thousands separators: `2176` → `"2,176"`.
pub fn format_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Parses `#RRGGBB` at compile time.
pub const fn hex(rgb: u32) -> RGBColor {
    RGBColor((rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8)
}

/// Recall colour stops: 0 → red-pink, 0.5 → amber, 1 → green.
pub const RECALL_LOW: RGBColor = hex(0xF0496E);
pub const RECALL_MID: RGBColor = hex(0xEBB839);
pub const RECALL_HIGH: RGBColor = hex(0x0CD79F);

/// Diverging stops (ColorBrewer RdBu, colour-blind safe): −1 → red, 0 → near
/// white, +1 → blue.
pub const DIVERGING_NEG: RGBColor = hex(0xB2182B);
pub const DIVERGING_ZERO: RGBColor = hex(0xF7F7F7);
pub const DIVERGING_POS: RGBColor = hex(0x2166AC);

/// Colour for missing heatmap cells.
pub const MISSING_CELL: RGBColor = hex(0xBDBDBD);
/// Dark grey used for axes, reference lines and secondary text.
pub const INK: RGBColor = hex(0x222222);
pub const INK_SOFT: RGBColor = hex(0x555555);
pub const GRID: RGBColor = hex(0xE3E3E3);

/// Linear interpolation between two colours in sRGB, `t` clamped to 0..=1.
pub fn lerp_color(a: RGBColor, b: RGBColor, t: f64) -> RGBColor {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let ch = |x: u8, y: u8| (x as f64 + (y as f64 - x as f64) * t).round() as u8;
    RGBColor(ch(a.0, b.0), ch(a.1, b.1), ch(a.2, b.2))
}

/// Three-stop scale: `lo` at 0, `mid` at 0.5, `hi` at 1 (`t` clamped).
fn three_stop(lo: RGBColor, mid: RGBColor, hi: RGBColor, t: f64) -> RGBColor {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    if t <= 0.5 {
        lerp_color(lo, mid, t * 2.0)
    } else {
        lerp_color(mid, hi, (t - 0.5) * 2.0)
    }
}

/// Recall colour for a value in 0..=1: #F0496E → #EBB839 → #0CD79F.
pub fn recall_color(recall: f64) -> RGBColor {
    three_stop(RECALL_LOW, RECALL_MID, RECALL_HIGH, recall)
}

/// Diverging colour for a value in −1..=1: red → white → blue.
pub fn diverging_color(delta: f64) -> RGBColor {
    three_stop(DIVERGING_NEG, DIVERGING_ZERO, DIVERGING_POS, (delta + 1.0) / 2.0)
}

/// WCAG relative luminance of an sRGB colour.
pub fn relative_luminance(c: RGBColor) -> f64 {
    let lin = |v: u8| {
        let v = v as f64 / 255.0;
        if v <= 0.04045 {
            v / 12.92
        } else {
            ((v + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * lin(c.0) + 0.7152 * lin(c.1) + 0.0722 * lin(c.2)
}

/// Black or white, whichever contrasts more with `background`.
pub fn contrast_text_color(background: RGBColor) -> RGBColor {
    let l = relative_luminance(background);
    let vs_black = (l + 0.05) / 0.05;
    let vs_white = 1.05 / (l + 0.05);
    if vs_black >= vs_white {
        hex(0x111111)
    } else {
        RGBColor(255, 255, 255)
    }
}

/// Okabe–Ito palette, ordered so that neighbours also differ in lightness
/// (helps in greyscale).
pub const SERIES_PALETTE: [RGBColor; 7] = [
    hex(0x0072B2), // blue
    hex(0xE69F00), // orange
    hex(0x009E73), // bluish green
    hex(0xCC79A7), // reddish purple
    hex(0xD55E00), // vermillion
    hex(0x56B4E9), // sky blue
    hex(0x000000), // black
];

pub fn palette_color(i: usize) -> RGBColor {
    SERIES_PALETTE[i % SERIES_PALETTE.len()]
}

/// Line dash pattern, in pixels at scale 1 (on, off, on, off, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dash {
    Solid,
    Dashed,
    Dotted,
    DashDot,
    LongDash,
}

impl Dash {
    pub const CYCLE: [Dash; 4] = [Dash::Solid, Dash::Dashed, Dash::DashDot, Dash::Dotted];

    pub fn pattern(self) -> &'static [f64] {
        match self {
            Dash::Solid => &[],
            Dash::Dashed => &[12.0, 7.0],
            Dash::Dotted => &[2.5, 5.0],
            Dash::DashDot => &[12.0, 5.0, 2.5, 5.0],
            Dash::LongDash => &[18.0, 8.0],
        }
    }
}

/// Point marker shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
    Cross,
}

impl Marker {
    pub const CYCLE: [Marker; 5] = [Marker::Circle, Marker::Square, Marker::Triangle, Marker::Diamond, Marker::Cross];
}

/// Splits a pixel polyline into dashes following `pattern` (scaled by
/// `scale`). An empty pattern returns the polyline unchanged. The dash phase
/// continues across vertices so corners do not restart the pattern.
pub fn dash_polyline(points: &[(f64, f64)], pattern: &[f64], scale: f64) -> Vec<Vec<(i32, i32)>> {
    let to_px = |p: (f64, f64)| (p.0.round() as i32, p.1.round() as i32);
    if points.len() < 2 || pattern.is_empty() || pattern.iter().all(|&p| p <= 0.0) {
        return vec![points.iter().copied().map(to_px).collect()];
    }
    let pattern: Vec<f64> = pattern.iter().map(|p| (p * scale).max(0.5)).collect();
    let mut out = Vec::new();
    let mut idx = 0usize; // index into pattern; even = on, odd = off
    let mut left = pattern[0]; // length left in the current pattern element
    let mut current: Vec<(f64, f64)> = vec![points[0]];
    for w in points.windows(2) {
        let (a, b) = (w[0], w[1]);
        let seg_len = ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt();
        if seg_len == 0.0 {
            continue;
        }
        let mut pos = 0.0;
        while seg_len - pos > left {
            pos += left;
            let t = pos / seg_len;
            let p = (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
            if idx.is_multiple_of(2) {
                current.push(p);
                out.push(std::mem::take(&mut current));
            } else {
                current = vec![p];
            }
            idx = (idx + 1) % pattern.len();
            left = pattern[idx];
        }
        left -= seg_len - pos;
        if idx.is_multiple_of(2) {
            current.push(b);
        }
    }
    if idx.is_multiple_of(2) && current.len() >= 2 {
        out.push(current);
    }
    out.into_iter().map(|seg| seg.into_iter().map(to_px).collect()).collect()
}

/// A log2 token axis spanning `contexts`: its range (padded by a quarter
/// power of two, half when they span less than one) and its ticks at whole
/// powers of two.
pub fn log2_context_range(contexts: impl Iterator<Item = u64>) -> (f64, f64, Vec<f64>) {
    let (cmin, cmax) = contexts.fold((u64::MAX, 0u64), |(a, b), c| (a.min(c), b.max(c)));
    let (lmin, lmax) = ((cmin as f64).log2(), (cmax as f64).log2());
    let pad = if lmax - lmin < 1.0 { 0.5 } else { 0.25 };
    let (lo, hi) = (lmin - pad, lmax + pad);
    let ticks = ((lo.ceil() as i64)..=(hi.floor() as i64)).map(|e| e as f64).collect();
    (lo, hi, ticks)
}

/// A tick's label on a log2 token axis (ticks at whole exponents): every
/// `label_every`-th power of two from `2^e_first`, in tokens ("32K"); the
/// others blank.
pub fn log2_token_tick(v: f64, e_first: i64, label_every: usize) -> String {
    let e = v.round() as i64;
    if (e - e_first) % label_every.max(1) as i64 != 0 || !(0..63).contains(&e) {
        String::new()
    } else {
        crate::base::units::tokens_label(1u64 << e)
    }
}

/// Text style in the embedded font.
pub fn text(size: f64, color: RGBColor) -> TextStyle<'static> {
    (FONT_FAMILY, size).into_font().color(&color)
}

/// Text style with an anchor.
pub fn text_at(size: f64, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    text(size, color).pos(Pos::new(h, v))
}

/// Rotated (bottom-to-top) text style, for y axis labels.
pub fn text_vertical(size: f64, color: RGBColor) -> TextStyle<'static> {
    (FONT_FAMILY, size).into_font().transform(FontTransform::Rotate270).color(&color).pos(Pos::new(HPos::Center, VPos::Center))
}

/// Size scale factor relative to the 1600×1000 reference layout.
pub fn ui_scale(width: u32, height: u32) -> f64 {
    (width as f64 / 1600.0).min(height as f64 / 1000.0).clamp(0.45, 4.0)
}

/// A linear f64 axis whose grid lines and labels sit exactly at `ticks`
/// (used with log2-transformed values so ticks land on powers of two).
#[derive(Debug, Clone)]
pub(crate) struct TickedAxis {
    pub lo: f64,
    pub hi: f64,
    pub ticks: Vec<f64>,
}

/// A chart whose two axes are [`TickedAxis`] (log2 contexts, shares, rows).
pub(crate) type TickedChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<TickedAxis, TickedAxis>>;

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = self.hi - self.lo;
        if span <= 0.0 || !v.is_finite() {
            return (limit.0 + limit.1) / 2;
        }
        let t = (v - self.lo) / span;
        limit.0 + ((limit.1 - limit.0) as f64 * t).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// `text` broken into lines no wider than `max_w` (as `width` measures
/// them), only at its " · " separators; a part wider than `max_w` on its
/// own stays one line.
pub fn wrap_at_separators(text: &str, max_w: i32, width: impl Fn(&str) -> i32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for part in text.split(" · ") {
        match lines.last_mut() {
            Some(line) if width(&format!("{line} · {part}")) <= max_w => {
                line.push_str(" · ");
                line.push_str(part);
            }
            _ => lines.push(part.to_string()),
        }
    }
    lines
}

/// Per line (colour, pixel points; in drawing order), how many colours
/// other than its own the later lines running over it have (a point within
/// `tol` pixels of one of theirs), at most [`MAX_COVERING`]. A line drawn
/// that much wider still shows at the edges of the lines on top (two truths
/// both at 1.0 no longer leave one colour invisible); a line under lines of
/// its own colour only is left as it is.
pub fn covered_by_later<C: PartialEq>(lines: &[(C, Vec<(f64, f64)>)], tol: f64) -> Vec<usize> {
    let meets =
        |a: &[(f64, f64)], b: &[(f64, f64)]| a.iter().any(|p| b.iter().any(|q| (p.0 - q.0).abs() <= tol && (p.1 - q.1).abs() <= tol));
    (0..lines.len())
        .map(|i| {
            let mut colours: Vec<&C> = Vec::new();
            for (c, l) in &lines[i + 1..] {
                if *c != lines[i].0 && !colours.contains(&c) && meets(&lines[i].1, l) {
                    colours.push(c);
                }
            }
            colours.len().min(MAX_COVERING)
        })
        .collect()
}

/// Covering colours counted at most (so a line is never more than this many steps wider).
pub const MAX_COVERING: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_breaks_only_at_separators() {
        let width = |t: &str| t.chars().count() as i32;
        assert_eq!(wrap_at_separators("a · b · c", 20, width), ["a · b · c"]);
        assert_eq!(wrap_at_separators("aaaa · bbbb · cc", 11, width), ["aaaa · bbbb", "cc"]);
        assert_eq!(wrap_at_separators("a very long part · b", 5, width), ["a very long part", "b"]);
        assert_eq!(wrap_at_separators("", 5, width), [""]);
    }

    // A line under an identical later one is drawn wider, so it shows.
    #[test]
    fn a_line_under_a_later_one_is_marked_covered() {
        let flat = vec![(0.0, 10.0), (100.0, 10.0)];
        let other = vec![(0.0, 50.0), (100.0, 90.0)];
        let l = |c: u8, p: &Vec<(f64, f64)>| (c, p.clone());
        assert_eq!(covered_by_later(&[l(0, &flat), l(1, &other), l(2, &flat)], 1.0), [1, 0, 0]);
        assert_eq!(covered_by_later(&[l(0, &flat), l(1, &flat), l(2, &flat)], 1.0), [2, 1, 0]);
        // lines of its own colour on top do not count, nor a colour twice
        assert_eq!(covered_by_later(&[l(0, &flat), l(0, &flat), l(1, &flat), l(1, &flat)], 1.0), [1, 1, 0, 0]);
        assert_eq!(covered_by_later(&[l(0, &other), l(1, &vec![(0.0, 52.0)])], 1.0), [0, 0]);
        let many: Vec<(u8, Vec<(f64, f64)>)> = (0..8).map(|c| l(c, &flat)).collect();
        assert_eq!(covered_by_later(&many, 1.0)[0], MAX_COVERING);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(format_thousands(0), "0");
        assert_eq!(format_thousands(999), "999");
        assert_eq!(format_thousands(2176), "2,176");
        assert_eq!(format_thousands(1_048_576), "1,048,576");
    }

    #[test]
    fn recall_scale_endpoints_and_midpoint() {
        assert_eq!(recall_color(0.0), hex(0xF0496E));
        assert_eq!(recall_color(0.5), hex(0xEBB839));
        assert_eq!(recall_color(1.0), hex(0x0CD79F));
        // clamped outside the domain
        assert_eq!(recall_color(-3.0), hex(0xF0496E));
        assert_eq!(recall_color(7.0), hex(0x0CD79F));
        // a quarter of the way is the channel-wise average of the first two stops
        assert_eq!(recall_color(0.25), RGBColor(0xEE, 0x81, 0x54));
    }

    #[test]
    fn lerp_endpoints_and_midpoint() {
        let a = RGBColor(0, 100, 200);
        let b = RGBColor(200, 100, 0);
        assert_eq!(lerp_color(a, b, 0.0), a);
        assert_eq!(lerp_color(a, b, 1.0), b);
        assert_eq!(lerp_color(a, b, 0.5), RGBColor(100, 100, 100));
    }

    #[test]
    fn diverging_scale_endpoints_and_midpoint() {
        assert_eq!(diverging_color(-1.0), DIVERGING_NEG);
        assert_eq!(diverging_color(0.0), DIVERGING_ZERO);
        assert_eq!(diverging_color(1.0), DIVERGING_POS);
    }

    #[test]
    fn contrast_text_picks_readable_colour() {
        assert_eq!(contrast_text_color(RGBColor(255, 255, 255)), hex(0x111111));
        assert_eq!(contrast_text_color(RGBColor(0, 0, 0)), RGBColor(255, 255, 255));
        assert_eq!(contrast_text_color(RECALL_MID), hex(0x111111));
        assert_eq!(contrast_text_color(DIVERGING_POS), RGBColor(255, 255, 255));
    }

    #[test]
    fn dashing_splits_a_line() {
        let dashes = dash_polyline(&[(0.0, 0.0), (100.0, 0.0)], &[10.0, 10.0], 1.0);
        assert_eq!(dashes.len(), 5);
        assert_eq!(dashes[0], vec![(0, 0), (10, 0)]);
        assert_eq!(dashes[4], vec![(80, 0), (90, 0)]);
        let solid = dash_polyline(&[(0.0, 0.0), (5.0, 5.0)], &[], 1.0);
        assert_eq!(solid, vec![vec![(0, 0), (5, 5)]]);
    }
}

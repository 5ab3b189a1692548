//! Charts of per-layer selection recall results (docs/MODEL.md, "What is
//! measured"), rendered with plotters.
//!
//! * [`render_recall_vs_context`]: recall against context length (log2 axis)
//!   per (top-k, precision) series, with Wilson bands and coverage limits;
//!   whole-model recall, when present, as the main line.
//! * [`render_compare`]: every (top-k, precision) at one context as dots
//!   with intervals, beside selection recall against the reference.
//! * [`render_recall_vs_depth`]: recall against needle depth, a panel per context.
//! * [`render_heatmap`]: needle depth × context length recall grids.
//! * [`render_fidelity`]: recall@k and Jaccard overlap of the quantized top-k
//!   with the exact one, against context length.
//! * [`render_rank_margin`]: box plots of the needle's rank ÷ k and score
//!   margin per (top-k, precision) at one context.
//! * [`render_margin`]: the needle margin (the weakest needle kept at the
//!   recall threshold) against context, with the needle profiles' bands.
//!
//! The output format follows the file extension (`.png` or `.svg`). Files
//! are written atomically: the chart is rendered into a hidden temporary
//! file in the destination directory and renamed into place, so a failure
//! never leaves a half-written chart behind. All text uses the embedded
//! DejaVu Sans font (see [`font`]); an SVG embeds only the glyphs it uses
//! (see [`subset`]).

pub mod canvas;
pub mod compare;
pub mod depth;
pub mod fidelity;
pub mod font;
pub mod heatmap;
pub mod knob;
pub mod likelihood;
pub mod margin;
pub mod overlap;
pub mod rank_margin;
pub mod recall_vs_context;
pub mod style;
pub mod subset;

use crate::report::meta::SweepChart;
pub use canvas::{ChartError, ImageFormat, MAX_SIDE_PX, MIN_SIDE_PX};
pub use compare::{render_compare, CompareChart, CompareRow, Estimate};
pub use depth::{render_recall_vs_depth, DepthChart, DepthPanel, DepthPoint, DepthSeries};
pub use fidelity::{render_fidelity, FidelityChart, FidelityPoint, FidelitySeries};
pub use font::{ensure_font_registered, FONT_FAMILY};
pub use heatmap::{render_heatmap, Heatmap, HeatmapPanel};
pub use margin::{render_margin, MarginChart, MarginPoint, MarginSeries, ProfileBand};
pub use rank_margin::{render_rank_margin, DistributionRow, RankMarginChart};
pub use recall_vs_context::{render_recall_vs_context, EffectiveMark, RecallChart, RecallPoint, RecallSeries};

/// Every chart of a sweep, in the order they are drawn, listed in the
/// manifest and shown in `report.html`: each chart's file declares its
/// entry (stem, when it applies, caption, how it is built and drawn).
pub const SWEEP_CHARTS: [SweepChart; 9] = [
    recall_vs_context::CHART,
    compare::CHART,
    depth::CHART,
    heatmap::CHART,
    heatmap::MODEL_CHART,
    heatmap::DIFF_CHART,
    fidelity::CHART,
    rank_margin::CHART,
    margin::CHART,
];

/// The chart `file` (a name in a sweep directory) belongs to.
pub fn chart_of(file: &str) -> Option<&'static SweepChart> {
    SWEEP_CHARTS.iter().find(|c| c.owns(file))
}

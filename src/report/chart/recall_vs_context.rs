//! Per-layer selection recall (one decode query, one indexer layer:
//! docs/MODEL.md, "What is measured") against context length, one line per
//! (top-k, precision).
//!
//! Encoding: colour identifies the top-k (so a series and the vertical
//! coverage-limit line of the same k share a colour); line dash pattern and
//! marker shape identify the precision (so precisions stay distinguishable in
//! greyscale). Each series carries a translucent confidence band.
//!
//! With whole-model recall (any series with `model` points), it is the main
//! line: solid, with its band and the precision's marker; per-layer recall
//! is a thinner dashed line of the same colour with smaller markers, and the
//! analytic prediction turns dotted so the two dashed lines stay apart.
//! Without it, the chart is drawn exactly as before it existed.
//!
//! The code, by role: the chart's data and its checks (`data.rs`); the
//! encoding of a series and the drawing primitives the other charts share
//! (`look.rs`); the painter (`paint.rs`); the chart in a sweep, built from
//! the cells, and its registry entry (`sweep.rs`).

mod data;
mod look;
mod paint;
mod sweep;

pub use data::{EffectiveMark, RecallChart, RecallPoint, RecallSeries};
pub(crate) use look::{draw_dashed, draw_marker, text_color, Encoding};
pub use paint::render_recall_vs_context;
pub use sweep::{recall_chart, render_recall_chart, CHART};

#[cfg(test)]
mod tests;

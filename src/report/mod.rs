//! Turning simulation outcomes into files and text: a sweep's output
//! directory (data, charts, `report.html`) and `plot`'s re-rendering of a
//! finished one ([`directory`]), every file and chart of it declared once
//! ([`outputs`]), what they are drawn from ([`meta`]), the chart kinds
//! ([`chart`]), the HTML pages ([`html`], a knob sweep's in [`vary`],
//! diagnose's in [`diagnose`]).
//!
//! Every chart is drawn from the cells and a [`ReportMeta`] alone, which a
//! sweep builds from its scenario and `plot` reads back from `manifest.json`,
//! so `plot` redraws byte-identical files without simulating.

pub mod chart;
pub mod diagnose;
pub mod directory;
pub mod html;
pub mod meta;
pub mod outputs;
pub mod vary;

pub use chart::compare::compare_chart;
pub use chart::depth::{recall_vs_depth_chart, DEPTH_CHART_MAX_PANELS};
pub use chart::fidelity::{fidelity_chart, FIDELITY_PASS_RULE};
pub use chart::heatmap::{diff_scale, heatmap, heatmap_diff, heatmap_diff_marked, heatmap_model, heatmap_size, DIFF_MARK_ALPHA};
pub use chart::rank_margin::rank_margin_chart;
pub use chart::recall_vs_context::{recall_chart, render_recall_chart};
pub use directory::{parse_results, plot_dir, render_all, write_sweep};
pub use meta::DEPTH_CHART_MIN_DEPTHS;
pub use meta::{detail_context, parse_detail_context, whole_model_only_refused, DiffSpan, Grid, PlotOptions, ReportMeta};
pub use outputs::{chart_pngs, render_chart, render_charts, REPORT_FILE};

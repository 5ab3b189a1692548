//! dsa-recall: a CPU simulator of how DeepSeek sparse attention's lightning
//! indexer selects compressed KV rows, and how often a needle survives.
//!
//! The layers, each a folder; a layer uses only those above it in this list:
//! - [`base`]: random streams, the SIMD level, special functions, statistics.
//! - [`model`]: the generative model: geometry, haystack, RoPE, compressor, rows.
//! - [`numerics`]: number formats, quantization pipelines, the paged key cache.
//! - [`score`]: indexer logits, top-k selection, precision variants, hypotheses, one trial.
//! - [`estimate`]: estimators of a cell's recall (full, tail, predicted).
//! - [`config`]: presets, scenario files and their validation.
//! - [`run`]: the sweep, its durable store, its output files.
//! - [`diagnose`]: observations in, hypotheses ranked, the next experiment out.
//! - [`report`]: tables, charts and the HTML report.
//! - [`tensors`]: tensor dumps and replay of recorded tensors.
//! - [`commands`]: every command as a library function over a typed
//!   request; the command line and the Python binding are its adapters.
//!
//! [`error`] holds the crate's error types, below every layer (it names no
//! module of the crate; each layer's own errors convert into them). No
//! module cycles, parent and child included: `python3 tools/import_graph.py`.
//! Definitions of every modelled quantity: docs/MODEL.md.

// `!(x > y)` is this crate's NaN guard: true when x is NaN, which the
// rewrites clippy suggests (x <= y, partial_cmp) would change or obscure.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod base;
pub mod commands;
pub mod config;
pub mod diagnose;
pub mod error;
pub mod estimate;
pub mod model;
pub mod numerics;
pub mod report;
pub mod run;
pub mod score;
pub mod tensors;

pub use config::{Scenario, ScenarioParams};
pub use error::{ConfigError, Error, SimError};

//! dsa-recall: a CPU simulator of how DeepSeek sparse attention's lightning
//! indexer selects compressed KV rows, and how often a needle survives.
//!
//! The pipeline, one module per concept:
//! [`config`] (presets, scenario files, validation) →
//! [`geometry`] (compression into rows, raw window, needle rows) →
//! [`haystack`] (synthetic keys, queries, weights) →
//! [`precision`] / [`format`] (quantization of q and k) →
//! [`indexer`] (scores) → [`selection`] (top-k, ranks) →
//! [`trial`] → [`montecarlo`] → [`sweep`] → [`output`] and [`chart`].

pub mod analytic;
pub mod chart;
pub mod compressor;
pub mod config;
pub mod error;
pub mod estimator;
pub mod format;
pub mod geometry;
pub mod haystack;
pub mod html;
pub mod hypothesis;
pub mod indexer;
pub mod key_cache;
pub mod montecarlo;
pub mod output;
pub mod physics;
pub mod precision;
pub mod quantize;
pub mod report;
pub mod rng;
pub mod rope;
pub mod row_sample;
pub mod row_source;
pub mod sampled_prediction;
pub mod selection;
pub mod stats;
pub mod store;
pub mod sweep;
pub mod tail;
pub mod tensors;
pub mod trial;

pub use config::{Scenario, ScenarioParams};
pub use error::{ConfigError, Error, SimError};

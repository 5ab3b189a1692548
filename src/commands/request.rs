//! What every command is asked, as typed values, and the checks that all
//! of them share: the scenario's layers, the worker threads and the chart
//! options. The command line and the Python binding build these from their
//! own spelling of the same things and check nothing themselves.

use crate::config::params::PrecisionParams;
use crate::config::precision::parse_compact;
use crate::config::{self, Scenario, ScenarioParams};
use crate::error::{ConfigError, Error};
use crate::report::chart::ImageFormat;
use crate::report::{parse_detail_context, DiffSpan, PlotOptions};
use std::path::PathBuf;

/// The scenario of a command: the preset (named in `overlay`, or the
/// default) ← the scenario file, if any ← `overlay` (flags or keyword
/// arguments), then one validation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScenarioRequest {
    /// The TOML scenario file (`--config`).
    pub config: Option<PathBuf>,
    /// The knobs given, the preset's name and custom variants.
    pub overlay: ScenarioParams,
    /// Worker threads; None uses every core. Results do not depend on it.
    pub threads: Option<usize>,
}

impl ScenarioRequest {
    /// The scenario file with the overlay over it, unchecked.
    pub fn params(&self) -> Result<ScenarioParams, Error> {
        config::layered_params(self.config.as_deref(), self.overlay.clone())
    }

    /// The checked scenario.
    pub fn scenario(&self) -> Result<Scenario, Error> {
        config::layered_scenario(self.config.as_deref(), self.overlay.clone())
    }

    /// `error` about a scenario value, blamed on the scenario file's key
    /// when the file set it ([`config::origin::blame`]).
    pub fn blame(&self, error: ConfigError) -> Error {
        config::origin::blame(error, self.config.as_deref(), &self.overlay)
    }

    /// The pool the command's trials run on.
    pub fn thread_pool(&self) -> Result<rayon::ThreadPool, Error> {
        thread_pool(self.threads)
    }
}

/// Custom variant definitions as `--precision-def` takes them
/// (`name=N;q=SIDE;k=SIDE;…`), in order.
pub fn precision_definitions(defs: &[String]) -> Result<Vec<PrecisionParams>, ConfigError> {
    defs.iter().map(|d| parse_compact(d)).collect()
}

/// Most worker threads a run may ask for: far past any machine's useful
/// count, and still quick to start (a thousand threads start in under a
/// second; a hundred thousand take minutes before the first trial).
pub const MAX_THREADS: usize = 1024;

/// A pool of `threads` workers (None: one per core); 0 and more than
/// [`MAX_THREADS`] are refused.
pub fn thread_pool(threads: Option<usize>) -> Result<rayon::ThreadPool, Error> {
    if let Some(n) = threads.filter(|&n| n == 0 || n > MAX_THREADS) {
        return Err(ConfigError::new("--threads", n, format!("from 1 to {MAX_THREADS} (leave it out to use every core)")).into());
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .map_err(|e| Error::io("starting worker threads", std::io::Error::other(e.to_string())))
}

/// How a sweep's charts are drawn, as typed: `--format`, `--detail-context`
/// and `--diff-span`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChartRequest {
    pub formats: Vec<ImageFormat>,
    pub detail_context: Option<String>,
    pub diff_span: Option<String>,
    pub whole_model_only: bool,
}

impl Default for ChartRequest {
    fn default() -> Self {
        ChartRequest { formats: vec![ImageFormat::Png], detail_context: None, diff_span: None, whole_model_only: false }
    }
}

impl ChartRequest {
    /// The chart options, each value parsed and checked. Whether the detail
    /// context is one of the sweep's is [`crate::report::detail_context`]'s
    /// question, asked before a sweep simulates.
    pub fn options(&self) -> Result<PlotOptions, ConfigError> {
        Ok(PlotOptions {
            formats: self.formats.clone(),
            detail_context: self.detail_context.as_deref().map(parse_detail_context).transpose()?,
            diff_span: self.diff_span.as_deref().map(DiffSpan::parse).transpose()?,
            whole_model_only: self.whole_model_only,
        })
    }
}

/// `png`, `svg` or `both`, as `--format` names them.
pub fn image_formats(name: &str) -> Vec<ImageFormat> {
    match name {
        "svg" => vec![ImageFormat::Svg],
        "both" => vec![ImageFormat::Png, ImageFormat::Svg],
        _ => vec![ImageFormat::Png],
    }
}

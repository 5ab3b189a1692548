//! Library error types, at the bottom of the layers: they name no module
//! of the crate. A layer's own errors (a number format's, RoPE's, the
//! compressor's, a chart's) live beside it and convert into these there,
//! keeping their message.

use thiserror::Error;

/// A configuration value that is not allowed. Displays as one line naming
/// the field, the value and what is allowed.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("invalid {field} = {value}: {allowed}")]
pub struct ConfigError {
    pub field: String,
    pub value: String,
    pub allowed: String,
}

impl ConfigError {
    /// The value is shortened ([`shorten`]): an error line stays one
    /// readable line whatever was typed or piped in.
    pub fn new(field: impl Into<String>, value: impl ToString, allowed: impl Into<String>) -> Self {
        Self { field: field.into(), value: shorten(&value.to_string(), VALUE_CHARS), allowed: allowed.into() }
    }
}

/// Most characters of an offending value an error message quotes.
pub const VALUE_CHARS: usize = 60;

/// `text` cut to its first `max` characters and "…" when longer.
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Failures inside a simulation.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("generative model: {0}")]
    Model(String),
    /// A number format refused its arguments (`numerics::format::FormatError`).
    #[error("quantization: {0}")]
    Format(String),
    /// Invalid RoPE settings or arguments (`model::rope::RopeError`).
    #[error("RoPE: {0}")]
    Rope(String),
    /// The compressor refused its input (`model::compressor::CompressorError`).
    #[error("compressor: {0}")]
    Compressor(String),
    /// A hypothesis that cannot apply to the data it met (config validation
    /// normally refuses it first).
    #[error("hypothesis: {0}")]
    Hypothesis(String),
    /// The caller asked the run to stop (a signal); finished work is saved.
    #[error("interrupted")]
    Interrupted,
    /// Finished trials could not be saved to the checkpoint file.
    #[error("{0}")]
    Checkpoint(String),
}

/// Everything the library can fail with.
#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A scenario file that does not parse (message carries line and column).
    #[error("{path}: {message}")]
    ScenarioFile { path: String, message: String },
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// An output directory that holds files already: the directory and
    /// what to pass (`o is not empty; pass --force …`).
    #[error("output directory {0}")]
    OutputNotEmpty(String),
    #[error("chart: {0}")]
    Chart(String),
    /// A file this tool wrote that no longer parses.
    #[error("{path}: not a valid dsa-recall file: {message}")]
    Corrupt { path: String, message: String },
    /// Directories that cannot be resumed or merged together.
    #[error("{0}")]
    Mismatch(String),
    /// The run would need more memory than the machine has.
    #[error("{0}")]
    Resources(String),
    /// A bad `quantize` invocation or input (`numerics::quantize::QuantizeError`).
    #[error("{0}")]
    Quantize(String),
    /// A missing or unreadable input file of `plot` (`location` names the
    /// file, and the line when there is one).
    #[error("{location}: {message}")]
    Input { location: String, message: String },
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    /// Whether the error lies in what the user asked for or in the user's
    /// environment (arguments, input files, a corrupt or edited file, paths
    /// that cannot be read or written, a full disk, the checkpoint file that
    /// cannot be written): exit code 2, against 1 for failures of the run
    /// itself (a bug or a model that cannot apply).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::Config(_)
                | Error::ScenarioFile { .. }
                | Error::OutputNotEmpty(_)
                | Error::Mismatch(_)
                | Error::Resources(_)
                | Error::Quantize(_)
                | Error::Input { .. }
                | Error::Io { .. }
                | Error::Corrupt { .. }
                | Error::Sim(SimError::Checkpoint(_))
        )
    }
}

//! Library error types.

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
    pub fn new(field: impl Into<String>, value: impl ToString, allowed: impl Into<String>) -> Self {
        Self { field: field.into(), value: value.to_string(), allowed: allowed.into() }
    }
}

/// Failures inside a simulation.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("generative model: {0}")]
    Model(String),
    #[error("quantization: {0}")]
    Format(#[from] crate::numerics::format::FormatError),
    #[error("RoPE: {0}")]
    Rope(#[from] crate::model::rope::RopeError),
    #[error("compressor: {0}")]
    Compressor(#[from] crate::model::compressor::CompressorError),
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
    #[error("output directory {0} is not empty; pass --force to overwrite it")]
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
    #[error(transparent)]
    Quantize(#[from] crate::numerics::quantize::QuantizeError),
    /// A missing or unreadable input file of `plot` (`location` names the
    /// file, and the line when there is one).
    #[error("{location}: {message}")]
    Input { location: String, message: String },
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    /// Whether the error lies in what the user asked for (arguments, input
    /// files, paths that cannot be read or written): exit code 2, against 1
    /// for failures of the run itself.
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
        )
    }
}

impl From<crate::report::chart::ChartError> for Error {
    /// A chart's file name and folder are the user's: a wrong extension or a
    /// folder that cannot be written is a usage error; drawing failures are not.
    fn from(e: crate::report::chart::ChartError) -> Self {
        use crate::report::chart::ChartError;
        match e {
            ChartError::UnsupportedFormat(path) => {
                Error::Input { location: path.display().to_string(), message: "unsupported chart file extension: use .png or .svg".into() }
            }
            ChartError::Io { path, source } => Error::io(format!("writing chart {}", path.display()), source),
            other => Error::Chart(other.to_string()),
        }
    }
}

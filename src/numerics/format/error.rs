//! The error type of the `format` module.

/// Invalid arguments to a format operation. Nothing in the module panics on
/// bad input; it returns one of these instead.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FormatError {
    #[error("unknown element format {name:?}; expected one of: {allowed}")]
    UnknownElementFormat { name: String, allowed: String },
    #[error("row length d must be positive")]
    ZeroRowLength,
    #[error("{len} values do not form whole rows of length {d}")]
    LengthNotMultipleOfRow { len: usize, d: usize },
    #[error("block size {block} must be positive and divide the row length {d}")]
    InvalidBlockSize { block: usize, d: usize },
    #[error("length {len} is not a power of two")]
    NotPowerOfTwo { len: usize },
    #[error("amax floor {floor} must be finite and non-negative")]
    InvalidAmaxFloor { floor: f32 },
}

impl From<FormatError> for crate::error::SimError {
    fn from(e: FormatError) -> Self {
        crate::error::SimError::Format(e.to_string())
    }
}

//! What a check is asked: the command line's settings over the capture's.

/// What the command line (or the capture's metadata) sets; None defers to
/// the capture's metadata, then the layout's defaults.
#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// A built-in layout's name, a `.toml` file, or TOML text.
    pub layout: Option<String>,
    pub pipeline: Option<String>,
    pub topk: Option<usize>,
    /// `kernel` or `raw`.
    pub weights: Option<String>,
    pub rows_per_block: Option<usize>,
    pub q_format: Option<String>,
    pub block_stride_bytes: Option<u64>,
    /// Logits must match bit for bit (no evaluation-order bound).
    pub exact: bool,
    /// Significant bits of the engine's accumulation (default 24, f32).
    pub rounding_bits: Option<u32>,
    /// Skip the fault transforms.
    pub no_transforms: bool,
}

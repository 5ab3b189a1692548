//! Number formats and quantization: element and scale formats bit-exact
//! against ml_dtypes ([`format`]), the query/key quantization pipelines
//! ([`pipeline`]), the paged key cache and its faults ([`key_cache`]), and
//! the `quantize` command's operation ([`quantize`]). docs/NUMERICS.md.

pub mod format;
pub mod key_cache;
pub mod pipeline;
pub mod quantize;

#[cfg(test)]
mod golden_tests;

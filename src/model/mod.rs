//! The generative model of a trial: where rows and the needle sit
//! ([`geometry`]), the synthetic keys, queries and weights ([`haystack`]),
//! position and compression ([`physics`], [`rope`], [`compressor`]), and the
//! rows they make ([`row_source`]), and the layer stack that whole-model
//! recall reads ([`stack`]). Definitions: docs/MODEL.md.

pub mod compressor;
pub mod geometry;
pub mod haystack;
pub mod needle;
pub mod physics;
pub mod plan;
pub mod rope;
pub mod row_source;
pub mod stack;

//! The commands, as library functions: each takes a typed request, checks
//! it once, runs, and returns what it made (with the text the command line
//! prints). The command line (`main.rs`) and the Python binding
//! (`python/src`) only translate their own spelling into a request and the
//! result back.
//!
//! Shared parts of the requests: [`request`]. One file per command family:
//! [`sweep`] (`sweep`, `merge`, `plot`), [`cell`] (`run`, `trial`),
//! [`replay`], [`diagnose`] (`diagnose`, `calibrate`), [`observe`],
//! [`quantize`], [`check`], [`catalogue`] (`presets`, `hypotheses`).

pub mod catalogue;
pub mod cell;
pub mod check;
pub mod diagnose;
pub mod observe;
pub mod quantize;
pub mod replay;
pub mod request;
pub mod sweep;

//! The commands, as library functions: each takes a typed request, checks
//! it once, runs, and returns what it made. The command line (`main.rs`)
//! and the Python binding (`python/src`) only translate their own spelling
//! into a request and the result back.
//!
//! Shared parts of the requests: [`request`]. One file per command family:
//! [`cell`] (`run`, `trial`), [`replay`], [`diagnose`] (`diagnose`,
//! `calibrate`).

pub mod cell;
pub mod diagnose;
pub mod replay;
pub mod request;

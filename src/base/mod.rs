//! Foundations every layer uses: counter-based random streams ([`rng`]),
//! the SIMD level every kernel dispatches on, detected once and lowered by
//! `DSA_RECALL_SIMD` ([`simd`]), special functions ([`special`]), interval
//! estimates and tests ([`stats`]), sizes with K/M suffixes ([`units`]),
//! the observer every long run reports to ([`observe`]), and the user's
//! files: safe output writes, capped reads, directory locks ([`files`]).

pub mod files;
pub mod observe;
pub mod rng;
pub mod simd;
pub mod special;
pub mod stats;
pub mod units;

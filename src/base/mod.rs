//! Foundations every layer uses: counter-based random streams ([`rng`]),
//! the SIMD level every kernel dispatches on, detected once and lowered by
//! `DSA_RECALL_SIMD` ([`simd`]), special functions ([`special`]), interval
//! estimates and tests ([`stats`]), sizes with K/M suffixes ([`units`]),
//! and the observer every long run reports to ([`observe`]).

pub mod observe;
pub mod rng;
pub mod simd;
pub mod special;
pub mod stats;
pub mod units;

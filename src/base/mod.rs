//! Foundations every layer uses: counter-based random streams ([`rng`]),
//! interval estimates and tests ([`stats`]), sizes with
//! K/M suffixes ([`units`]).

pub mod rng;
pub mod stats;
pub mod units;

//! Foundations every layer uses: counter-based random streams ([`rng`]),
//! interval estimates and tests ([`stats`]), special functions ([`special`]), sizes with
//! K/M suffixes ([`units`]).

pub mod rng;
pub mod special;
pub mod stats;
pub mod units;

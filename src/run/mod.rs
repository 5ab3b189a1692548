//! Running a scenario: the sweep over cells ([`sweep`]) and their results
//! ([`cell`]), its durable store
//! with resume and shards ([`store`]), and the files it writes ([`output`]).

pub mod cell;
pub mod output;
pub mod store;
pub mod sweep;

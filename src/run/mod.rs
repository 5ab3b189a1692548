//! Running a scenario: the sweep over cells ([`sweep`]), its durable store
//! with resume and shards ([`store`]), and the files it writes ([`output`]).

pub mod output;
pub mod store;
pub mod sweep;

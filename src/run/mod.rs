//! Running a scenario: the sweep over cells ([`sweep`]) and their results
//! ([`cell`]), its durable store
//! with resume and shards ([`store`]), the files it writes ([`output`]), and
//! a sweep over a model knob's values ([`vary`]).

pub mod cell;
pub mod output;
pub mod store;
pub mod sweep;
pub mod vary;

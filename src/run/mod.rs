//! Running a scenario: what a sweep runs ([`plan`]: work units, shards,
//! haystack groups), the one loop that runs it ([`sweep::execute`]) and
//! its cells ([`cell`]), the checkpoint of its trials ([`checkpoint`]), its
//! durable store with resume and merge ([`store`]), the files it writes
//! ([`output`]), and a sweep over a model knob's values ([`vary`]).

pub mod cell;
pub mod checkpoint;
pub mod output;
pub mod plan;
pub mod store;
pub mod sweep;
pub mod vary;

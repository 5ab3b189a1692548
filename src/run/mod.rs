//! Running a scenario: what a sweep runs ([`plan`]: work units, shards,
//! haystack groups), the one loop that runs it ([`sweep::execute`]) and
//! its cells ([`cell`]), the checkpoint of its trials ([`checkpoint`]), its
//! durable store with resume and merge ([`store`]), the files it writes
//! ([`output`], the needle margin's table in [`margin_text`], top-k
//! agreement's in [`agreement_text`]), and a sweep over a model knob's values ([`vary`]).

pub mod agreement_text;
pub mod cell;
pub mod checkpoint;
pub mod margin_text;
pub mod output;
pub mod plan;
pub mod store;
pub mod sweep;
pub mod vary;

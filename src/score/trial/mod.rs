//! One trial: one decode query at the end of a context, one haystack, one
//! needle, scored under every precision variant and ranked for every k.
//!
//! One trial serves every context length of a sweep: haystack row `i` is a
//! pure function of (trial seed, i), so the first N rows of the longest
//! haystack *are* the haystack of a shorter context. Every cell therefore
//! sees an exact draw from the model, and its result does not depend on
//! which other contexts are in the sweep (see docs/MODEL.md, "Sharing").

mod chunk;
mod critical;
mod fault_chunk;
mod judge;
mod place;
mod query;
mod run;
mod spec;

pub use fault_chunk::with_stored_patches;
pub use place::with_full_reference;
pub use query::{context_queries, shifted_context_queries, shifted_query};
pub use spec::{NeedleOutcome, TrialOutcome, TrialSpec};

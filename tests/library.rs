//! Cross-module tests through the library API, one module per file of
//! tests/. One test binary (with `commands`) instead of one per file: the
//! library is linked twice, not 28 times (docs/CONTRIBUTING.md, "Tests").

#[path = "common/mod.rs"]
mod common;

#[path = "address_space.rs"]
mod address_space;
#[path = "analytic.rs"]
mod analytic;
#[path = "chunked_prefill.rs"]
mod chunked_prefill;
#[path = "diagnose_inputs.rs"]
mod diagnose_inputs;
#[path = "fuzz_parsers.rs"]
mod fuzz_parsers;
#[path = "incidents.rs"]
mod incidents;
#[path = "margin.rs"]
mod margin;
#[path = "model.rs"]
mod model;
#[path = "needle.rs"]
mod needle;
#[path = "needle_multiple.rs"]
mod needle_multiple;
#[path = "numerics_props.rs"]
mod numerics_props;
#[path = "physics.rs"]
mod physics;
#[path = "python_api.rs"]
mod python_api;
#[path = "row_shift.rs"]
mod row_shift;
#[path = "shared_depths.rs"]
mod shared_depths;
#[path = "stack.rs"]
mod stack;
#[path = "tail_quantile.rs"]
mod tail_quantile;
#[path = "tensors.rs"]
mod tensors;
#[path = "value_stability.rs"]
mod value_stability;

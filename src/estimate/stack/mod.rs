//! Whole-model recall from one simulated layer: each trial's outcome in the
//! simulated indexer layer is spread over the stack's indexed layers and the
//! query tokens through a Gaussian copula whose correlations are calibrated
//! to measured top-k overlaps. Definitions, assumptions and sources:
//! docs/MODEL.md, "Whole-model recall".
//!
//! Every indexed layer and query token has the simulated cell's per-layer
//! recall p as its marginal; a latent g per (layer ℓ, token t) selects the
//! needle when g > Φ⁻¹(1 − p). Latents follow AR(1) chains, ρ_L over layers
//! and ρ_T over tokens, and the simulated outcome pins g at (0, 0). A fault
//! the same in every layer (shared code applied to each layer's data)
//! follows the chains like the fault-free model; an independent fault
//! splits the latent into the part the baseline variant explains, which
//! the chains carry, and the fault's own draw, fresh in every layer.
//!
//! Under the quantile needle ([`quantile`]) the needle's own difficulty is
//! drawn per layer and token instead, and only what a variant does beyond
//! the exact reference goes through latent chains.

mod copula;
mod quantile;
mod shared;

pub use copula::whole_model_sampled;
pub use quantile::{DECODE_CAPTURE_SHARE, OVERLAP_ENDS, TOKEN_OVERLAP_ENDS};
pub use shared::{adjacent_overlap, correlation_for_overlap, tetrachoric, StackEstimate};

use crate::model::stack::WholeModel;
use crate::score::trial::{TrialOutcome, TrialSpec};

/// Whole-model recall of every cell of `spec`, in
/// [`TrialSpec::cell_index`] order, from the full simulation's trials:
/// through the quantile needle's own layer and token draws under that
/// unit ([`quantile::whole_model`]), else through the copula.
pub fn whole_model(spec: &TrialSpec<'_>, whole: &WholeModel, trials: &[TrialOutcome]) -> Vec<StackEstimate> {
    if let Some(q) = spec.model.needle_unit.quantile() {
        return quantile::whole_model(spec, whole, q, trials);
    }
    let outcomes: Vec<(u64, Vec<bool>)> = trials.iter().map(|t| (t.seed, t.cells.iter().map(|c| c.survived).collect())).collect();
    copula::whole_model_of(spec, whole, &outcomes)
}

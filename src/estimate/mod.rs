//! Estimators of a cell's recall, behind one shape ([`Estimator`]): full
//! simulation ([`full`]), tail sampling ([`tail`]) and the prediction
//! ([`predict`]: closed forms and sampled distributions).
//!
//! Every estimator runs through the same driver ([`driver`]: per-trial
//! seeds, rayon, reduction in trial order), walks the same cell grid
//! ([`grid`]), computes survival the same way ([`survival`]), and says in
//! one place which scenarios it serves (its `refuses` function, which the
//! configuration asks). Definitions: docs/MODEL.md, "Estimators".
//!
//! Adding an estimator: a file with a type implementing [`Estimator`] and a
//! `refuses` function, a variant of [`settings::EstimatorMode`], and one arm
//! in [`recall_estimates`] and [`refusal`]. Every sweep, checkpointed or
//! not, and `run` reach the estimators through [`recall_estimates`] and
//! [`predictions`] alone.

pub mod driver;
pub mod estimator;
pub mod full;
pub mod grid;
pub mod margin;
pub mod predict;
pub mod sample;
pub mod settings;
pub mod stack;
pub mod survival;
pub mod tail;
pub mod tail_quantile;

use crate::base::observe::Observer;
use crate::error::SimError;
use crate::model::haystack::HaystackStructure;
use crate::model::needle::NeedleUnit;
use crate::model::physics::Physics;
use crate::score::trial::{NeedleOutcome, TrialSpec};
use crate::score::variant::PrecisionVariant;
use driver::Checkpoint;
pub use estimator::{CellEstimate, Estimator, RankSummary};
use settings::{EstimatorMode, EstimatorSettings};

/// Every cell's recall under the scenario's estimator, in
/// [`TrialSpec::cell_index`] order, its trials run in chunks that
/// `checkpoint` keeps ([`driver::run_chunked`]). With `first_cell`, the
/// per-trial outcomes of the first cell go there too (full simulation only).
pub fn recall_estimates(
    settings: &EstimatorSettings,
    spec: &TrialSpec<'_>,
    seed: u64,
    trials: u64,
    observer: &dyn Observer,
    checkpoint: &dyn Checkpoint,
    first_cell: Option<&mut Vec<NeedleOutcome>>,
) -> Result<Vec<CellEstimate>, SimError> {
    let run = Run { spec, seed, trials, observer, checkpoint };
    match settings.mode {
        EstimatorMode::Full => run.cells(&full::Full, first_cell),
        EstimatorMode::Tail if spec.model.needle_unit.quantile().is_some() => {
            run.cells(&tail_quantile::TailQuantile { rows: settings.tail_rows }, first_cell)
        }
        EstimatorMode::Tail => run.cells(&tail::Tail { rows: settings.tail_rows }, first_cell),
    }
}

/// Every cell's predicted recall when the prediction is switched on (None
/// where it does not model the cell's variant); its trials count in the
/// observer too (the prediction costs about as much as the simulation).
pub fn predictions(
    settings: &EstimatorSettings,
    spec: &TrialSpec<'_>,
    seed: u64,
    trials: u64,
    observer: &dyn Observer,
    checkpoint: &dyn Checkpoint,
) -> Result<Option<Vec<Option<predict::CellPrediction>>>, SimError> {
    if !settings.predict {
        return Ok(None);
    }
    Run { spec, seed, trials, observer, checkpoint }.cells(&predict::Predict, None).map(Some)
}

/// One haystack group's trials, as both dispatch functions run them.
struct Run<'a, 'b> {
    spec: &'a TrialSpec<'b>,
    seed: u64,
    trials: u64,
    observer: &'a dyn Observer,
    checkpoint: &'a dyn Checkpoint,
}

impl Run<'_, '_> {
    fn cells<E: Estimator>(&self, estimator: &E, first_cell: Option<&mut Vec<NeedleOutcome>>) -> Result<Vec<E::Cell>, SimError> {
        let per_trial = driver::run_chunked(estimator, self.spec, self.seed, self.trials, self.observer, self.checkpoint)?;
        if let Some(out) = first_cell {
            *out = estimator.first_cell_outcomes(&per_trial);
        }
        Ok(estimator.cells(self.spec, &per_trial))
    }
}

/// Why the estimator settings cannot serve a scenario, for a one-line error.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The setting refused: `estimator.mode` or `estimator.predict`.
    pub field: &'static str,
    /// Its value as written in TOML.
    pub value: &'static str,
    /// What would be accepted instead.
    pub allowed: String,
}

/// Asks each estimator the settings switch on whether it serves this
/// physics (at row stride `ratio`) and these variants.
pub fn refusal(
    settings: &EstimatorSettings,
    physics: &Physics,
    structure: &HaystackStructure,
    ratio: u64,
    variants: &[PrecisionVariant],
    needle: &NeedleUnit,
) -> Option<Refusal> {
    let mode = match settings.mode {
        EstimatorMode::Full => None,
        EstimatorMode::Tail => tail::refuses(physics, ratio, variants).or_else(|| sample::refuses(structure, "full", "tail sampling")),
    };
    if let Some(allowed) = mode {
        return Some(Refusal { field: "estimator.mode", value: settings.mode.toml_value(), allowed });
    }
    // The quantile needle's prediction holds under any haystack (its rank
    // in the exact reference is binomial by construction).
    let predict = if settings.predict && !needle.is_strength() {
        None
    } else if settings.predict {
        predict::refuses(physics, ratio).or_else(|| sample::refuses(structure, "false", "the prediction"))
    } else {
        None
    };
    predict.map(|allowed| Refusal { field: "estimator.predict", value: "true", allowed })
}

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
pub mod full;
pub mod grid;
pub mod predict;
pub mod sample;
pub mod settings;
pub mod stack;
pub mod survival;
pub mod tail;

use crate::base::observe::Observer;
use crate::error::SimError;
use crate::model::haystack::HaystackStructure;
use crate::model::needle::NeedleUnit;
use crate::model::physics::Physics;
use crate::score::trial::{NeedleOutcome, TrialSpec};
use crate::score::variant::PrecisionVariant;
use driver::Checkpoint;
use settings::{EstimatorMode, EstimatorSettings};

/// An estimator: what one trial yields for every cell of a haystack group,
/// and how the trials (in trial order) reduce to one result per cell.
pub trait Estimator: Sync {
    /// The name of its trials in a checkpoint.
    const NAME: &'static str;
    /// One trial's result for every cell of the group. Serializable so that
    /// a sweep can checkpoint finished trials ([`driver::run_chunked`]).
    type Trial: Send + PartialEq + serde::Serialize + serde::de::DeserializeOwned;
    /// One cell's result over all trials.
    type Cell;

    fn trial(&self, spec: &TrialSpec<'_>, trial_seed: u64) -> Result<Self::Trial, SimError>;

    /// One result per cell, in [`TrialSpec::cell_index`] order.
    fn cells(&self, spec: &TrialSpec<'_>, trials: &[Self::Trial]) -> Vec<Self::Cell>;

    /// Each trial's needle outcome in the group's first cell, in trial
    /// order (`run --print-trials`); empty for estimators that do not see
    /// single outcomes.
    fn first_cell_outcomes(&self, _trials: &[Self::Trial]) -> Vec<NeedleOutcome> {
        Vec::new()
    }
}

/// The needle's rank and margin over the ranked trials of a cell; empty for
/// estimators that do not generate every row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankSummary {
    pub mean_rank: Option<f64>,
    pub mean_rank_ties: Option<f64>,
    pub median_rank: Option<f64>,
    pub trials_with_ties: u64,
    pub mean_margin_sd: Option<f64>,
    pub rank_share_quantiles: Option<[f64; 5]>,
    pub margin_sd_quantiles: Option<[f64; 5]>,
}

/// A recall estimator's result for one cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellEstimate {
    pub trials: u64,
    /// Trials survived (full simulation), or the rounded sum of the
    /// per-trial survival probabilities (sampling estimators).
    pub survived: u64,
    /// Per-layer selection recall (docs/MODEL.md, "What is measured").
    pub recall: f64,
    /// 95 % interval of the recall.
    pub ci_low: f64,
    pub ci_high: f64,
    pub survived_via_window: u64,
    pub ranks: RankSummary,
    /// Selection fidelity against this variant, when measured.
    pub fidelity_reference: Option<String>,
    /// Share of the reference's top-k set kept, and the Jaccard overlap:
    /// (mean, 95 % low, 95 % high).
    pub selection_recall: Option<(f64, f64, f64)>,
    pub jaccard: Option<(f64, f64, f64)>,
    /// recall − the baseline variant's recall on the same trials (absent for
    /// the baseline itself).
    pub recall_diff: Option<f64>,
    /// Trials this variant kept and the baseline lost, and the reverse, when
    /// the estimator sees each trial's outcome.
    pub discordant: Option<(u64, u64)>,
    /// recall − the recall of the same variant at the sweep's smallest k on
    /// the same trials (absent at that k) …
    pub k_recall_diff: Option<f64>,
    /// … trials kept at this k and lost at the smallest, and the reverse,
    /// when the estimator sees each trial's outcome …
    pub k_discordant: Option<(u64, u64)>,
    /// … and the same difference of whole-model recall, when there is one.
    pub k_model_recall_diff: Option<f64>,
    /// Whole-model recall (docs/MODEL.md, "Whole-model recall"), when the
    /// scenario has a stack and the estimator sees each trial's outcome.
    pub whole_model: Option<stack::StackEstimate>,
    /// Quantile needle: trials in which no offset scale reached the drawn
    /// exceedance (the norm caps the needle below it); None under the strength unit.
    pub needle_capped: Option<u64>,
}

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
        EstimatorMode::Tail => tail::refuses_needle(needle)
            .or_else(|| tail::refuses(physics, ratio, variants))
            .or_else(|| sample::refuses(structure, "full", "tail sampling")),
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

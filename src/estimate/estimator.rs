//! The shape every estimator has ([`Estimator`]: one trial for every cell
//! of a haystack group, then the reduction to cells) and what a recall
//! estimator gives per cell ([`CellEstimate`]).

use crate::error::SimError;
use crate::estimate::margin::MarginCurve;
use crate::estimate::stack;
use crate::score::selection::TieCut;
use crate::score::trial::{NeedleOutcome, TrialSpec};

/// An estimator: what one trial yields for every cell of a haystack group,
/// and how the trials (in trial order) reduce to one result per cell.
pub trait Estimator: Sync {
    /// The name of its trials in a checkpoint.
    const NAME: &'static str;
    /// One trial's result for every cell of the group. Serializable so that
    /// a sweep can checkpoint finished trials ([`crate::estimate::driver::run_chunked`]).
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
    /// The tie audit over the cell's trials, when the sweep asks for it.
    pub ties: Option<TieCounts>,
    /// Quantile needle, full simulation: recall as a function of the
    /// needle's median exceedance ([`crate::estimate::margin`]).
    pub margin: Option<MarginCurve>,
    /// Top-k agreement of this variant (A) with each B it is paired with
    /// (`--agreement A:B`), in the order of the pairs.
    pub agreement: Vec<PairAgreement>,
}

/// One pair's top-k agreement over a cell's trials, on the cell of its A
/// (docs/MODEL.md, "Top-k agreement"): shares of A's top-k, averaged over
/// trials, with `agreement + tie_disagreement + real_disagreement = 1`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PairAgreement {
    /// B: the variant whose top-k is compared with this cell's.
    pub with: String,
    /// Trials compared.
    pub trials: u64,
    /// Share of A's top-k that B also selects, and its 95 % interval.
    pub agreement: f64,
    pub agreement_ci_low: f64,
    pub agreement_ci_high: f64,
    /// Share that B leaves out only through a tie at a cut (either choice
    /// is correct) …
    pub tie_disagreement: f64,
    /// … and that B leaves out with the scores ordered otherwise.
    pub real_disagreement: f64,
    /// The tie share of the disagreement, tie / (tie + real); None when
    /// the two always agree.
    pub tie_share: Option<f64>,
}

/// A cell's tie audit summed over its trials (docs/MODEL.md, "Tie audit"):
/// `ties.csv` reads its means and shares from these counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TieCounts {
    pub trials: u64,
    /// Rows tied at the k-th score, summed over trials, and the most in one.
    pub tied_rows_sum: u64,
    pub tied_rows_max: u64,
    /// Trials whose k-th score is tied (two rows or more) …
    pub tied: u64,
    /// … whose cut splits the tied rows …
    pub split: u64,
    /// … and whose needle the tie order decides.
    pub needle_at_cut: u64,
    /// Trials kept under each rule of [`crate::score::selection::AUDIT_RULES`].
    pub kept: [u64; 4],
}

impl TieCounts {
    /// Rows tied at the k-th score, on average over the trials.
    pub fn tied_rows_mean(&self) -> f64 {
        self.tied_rows_sum as f64 / self.trials.max(1) as f64
    }

    /// `count` (one of the trial counts) as a share of the trials.
    pub fn share(&self, count: u64) -> f64 {
        count as f64 / self.trials.max(1) as f64
    }

    pub fn add(&mut self, c: &TieCut) {
        self.trials += 1;
        self.tied_rows_sum += c.tied_rows;
        self.tied_rows_max = self.tied_rows_max.max(c.tied_rows);
        self.tied += u64::from(c.tied_rows >= 2);
        self.split += u64::from(c.split);
        self.needle_at_cut += u64::from(c.needle_at_cut);
        for (n, &k) in self.kept.iter_mut().zip(&c.kept) {
            *n += u64::from(k);
        }
    }
}

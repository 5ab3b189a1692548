//! One line of `results.jsonl` and one row of `summary.csv`: a cell's
//! inputs, the fields every estimator shares, and its estimate.

use crate::base::stats::{holm_adjust, mcnemar_exact_p};
use crate::estimate::estimator::{PairAgreement, TieCounts};
use crate::estimate::grid::GridCell;
use crate::estimate::CellEstimate;
use crate::score::trial::TrialSpec;
use serde::{Deserialize, Serialize};

/// Everything known about one cell: its inputs and its outcome. This is one
/// line of `results.jsonl` and one row of `summary.csv`.
///
/// Every "recall" here but `model_recall` (`recall`, `predicted_recall`,
/// `recall_diff`) is *per-layer selection recall*: over trials, the share in which one decoding
/// query at the end of the context, in one indexer layer, keeps the needle (a
/// row holding a needle token in its top-k, or the whole needle in the raw
/// window; docs/MODEL.md, "What is measured"). It is not a model's
/// needle-in-a-haystack accuracy. `selection_recall` is another quantity: the
/// share of the reference's top-k this variant keeps. Field names stay as they
/// are: other tools read them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    pub context_tokens: u64,
    pub depth_percent: f64,
    /// Needle offset inside its row stride, when the sweep has that axis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle_offset: Option<u64>,
    pub topk: u64,
    pub precision: String,
    pub trials: u64,
    /// Trials in which the needle survived the layer's selection (sampling
    /// estimators: the rounded sum of the per-trial survival probabilities).
    pub survived: u64,
    /// Per-layer selection recall: the share of trials whose needle survived.
    pub recall: f64,
    /// Wilson 95 % interval of `recall`.
    pub ci_low: f64,
    pub ci_high: f64,
    /// Analytic prediction of the per-layer selection recall (`crate::estimate::predict`); absent when
    /// switched off (`--predict off`) or for variants it does not model.
    #[serde(default)]
    pub predicted_recall: Option<f64>,
    /// Mean over ranked trials of the competitors scoring strictly above the best needle row.
    pub mean_rank: Option<f64>,
    /// Same, counting ties as above.
    pub mean_rank_ties: Option<f64>,
    pub median_rank: Option<f64>,
    pub trials_with_ties: u64,
    /// Mean margin to the k-th competitor score, in competitor standard deviations.
    pub mean_margin_sd: Option<f64>,
    pub needle_rows: u64,
    pub needle_start_token: u64,
    pub needle_in_window: bool,
    pub survived_via_window: u64,
    pub visible_rows: u64,
    pub candidate_rows: u64,
    pub k_eff: u64,
    pub coverage_limit: u64,
    /// Quantiles (5, 25, 50, 75, 95 %) of the best needle row's rank as a share of k_eff.
    pub rank_share_quantiles: Option<[f64; 5]>,
    /// Quantiles (5, 25, 50, 75, 95 %) of the margin in competitor standard deviations.
    pub margin_sd_quantiles: Option<[f64; 5]>,
    /// Selection fidelity reference (`fp32` when in the sweep; absent for the reference itself).
    pub fidelity_reference: Option<String>,
    /// Share of the reference's top-k_eff rows this variant also selects: mean and 95 % interval.
    pub selection_recall: Option<f64>,
    pub selection_recall_ci_low: Option<f64>,
    pub selection_recall_ci_high: Option<f64>,
    /// Jaccard overlap of the two top-k_eff sets: mean and 95 % interval.
    pub jaccard: Option<f64>,
    pub jaccard_ci_low: Option<f64>,
    pub jaccard_ci_high: Option<f64>,
    /// Paired comparison with the sweep's first precision (absent for that one).
    pub baseline: Option<String>,
    /// recall − baseline recall (per-layer selection recall), on the same haystacks.
    pub recall_diff: Option<f64>,
    /// Trials kept by this variant and lost by the baseline, and the reverse.
    pub discordant_gained: Option<u64>,
    pub discordant_lost: Option<u64>,
    /// Exact two-sided McNemar p-value of the discordant pairs.
    pub mcnemar_p: Option<f64>,
    /// Whole-model recall (docs/MODEL.md, "Whole-model recall"): absent
    /// without a `[stack]`. Indexer layers in the stack …
    #[serde(default)]
    pub indexed_layers: Option<u64>,
    /// … trials in which at least `stack.quorum` of them select the needle
    /// for at least one query token, their share and its Wilson 95 % interval …
    #[serde(default)]
    pub model_survived: Option<u64>,
    #[serde(default)]
    pub model_recall: Option<f64>,
    #[serde(default)]
    pub model_ci_low: Option<f64>,
    #[serde(default)]
    pub model_ci_high: Option<f64>,
    /// … and how many of them do: mean, its 95 % interval, and quantiles
    /// (5, 25, 50, 75, 95 %).
    #[serde(default)]
    pub layers_reached: Option<f64>,
    #[serde(default)]
    pub layers_reached_ci_low: Option<f64>,
    #[serde(default)]
    pub layers_reached_ci_high: Option<f64>,
    #[serde(default)]
    pub layers_reached_quantiles: Option<[f64; 5]>,
    /// Paired comparison with the same precision at the sweep's smallest k,
    /// on the same haystacks (absent at that k, and in results written
    /// before it existed): that k …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k_baseline: Option<u64>,
    /// … recall − its recall (per-layer selection recall) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k_recall_diff: Option<f64>,
    /// … trials kept at this k and lost at that one, and the reverse (absent
    /// for estimators without per-trial outcomes) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k_discordant_gained: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k_discordant_lost: Option<u64>,
    /// … their exact two-sided McNemar p-value …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k_mcnemar_p: Option<f64>,
    /// … and the whole-model recall difference, when there is a stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k_model_recall_diff: Option<f64>,
    /// Quantile needle only (absent under the strength unit): whole-model
    /// recall at the two ends of the least-known assumptions, lower first
    /// (docs/MODEL.md, "The band") …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_band_low: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_band_high: Option<f64>,
    /// … and trials in which the needle could not reach its drawn
    /// exceedance (the norm caps it below; it sits as high as it can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle_capped: Option<u64>,
    /// The needle margin at the recall threshold (quantile needle, full
    /// simulation; docs/MODEL.md, "The needle margin"): the largest multiple
    /// of the median exceedance at which per-layer recall stays at or above
    /// the threshold …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle_margin: Option<f64>,
    /// … read at the recall's 95 % bounds …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle_margin_ci_low: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle_margin_ci_high: Option<f64>,
    /// … as an exceedance (the multiple times the cell's median) …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle_margin_exceedance: Option<f64>,
    /// … and whether it reached exceedance 1, so that the margin is at least
    /// that (k covers every haystack row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needle_margin_unbounded: Option<bool>,
    /// The same for whole-model recall, when the scenario has a stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_needle_margin: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_needle_margin_ci_low: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_needle_margin_ci_high: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_needle_margin_unbounded: Option<bool>,
    /// The tie audit (`--tie-audit on`, docs/MODEL.md, "Tie audit"): the
    /// counts `ties.csv` is read from; absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ties: Option<TieCounts>,
    /// Top-k agreement of this precision (A) with each B of `--agreement
    /// A:B` (docs/MODEL.md, "Top-k agreement"); absent without pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agreement: Vec<PairAgreement>,
}

impl CellResult {
    /// The cell `g` of `spec` with the estimator's result `e` and, when the
    /// prediction is on, its predicted recall.
    pub fn new(spec: &TrialSpec<'_>, g: &GridCell<'_>, e: &CellEstimate, predicted_recall: Option<f64>, threshold: f64) -> Self {
        let margin = e.margin.as_ref().and_then(|m| m.margin(threshold).map(|x| (x, m.median)));
        let model_margin = e.whole_model.as_ref().and_then(|w| w.margin);
        let geometry = spec.geometry;
        let window = g.variant.selection.window_for(geometry.window);
        let paired = !g.is_baseline();
        CellResult {
            context_tokens: g.context,
            depth_percent: g.depth_percent,
            needle_offset: g.needle_offset,
            topk: g.topk,
            precision: g.variant.name.clone(),
            trials: e.trials,
            survived: e.survived,
            recall: e.recall,
            ci_low: e.ci_low,
            ci_high: e.ci_high,
            predicted_recall,
            mean_rank: e.ranks.mean_rank,
            mean_rank_ties: e.ranks.mean_rank_ties,
            median_rank: e.ranks.median_rank,
            trials_with_ties: e.ranks.trials_with_ties,
            mean_margin_sd: e.ranks.mean_margin_sd,
            needle_rows: g.placement.rows.end - g.placement.rows.start,
            needle_start_token: g.placement.tokens.start,
            needle_in_window: g.placement.tokens.start >= g.context.saturating_sub(window),
            survived_via_window: e.survived_via_window,
            visible_rows: geometry.visible_rows(g.context),
            candidate_rows: g.candidates,
            k_eff: g.k_eff(),
            coverage_limit: geometry.coverage_limit(g.topk),
            rank_share_quantiles: e.ranks.rank_share_quantiles,
            margin_sd_quantiles: e.ranks.margin_sd_quantiles,
            fidelity_reference: e.fidelity_reference.clone(),
            selection_recall: e.selection_recall.map(|f| f.0),
            selection_recall_ci_low: e.selection_recall.map(|f| f.1),
            selection_recall_ci_high: e.selection_recall.map(|f| f.2),
            jaccard: e.jaccard.map(|f| f.0),
            jaccard_ci_low: e.jaccard.map(|f| f.1),
            jaccard_ci_high: e.jaccard.map(|f| f.2),
            baseline: paired.then(|| spec.variants[0].name.clone()),
            recall_diff: e.recall_diff,
            discordant_gained: e.discordant.map(|d| d.0),
            discordant_lost: e.discordant.map(|d| d.1),
            mcnemar_p: e.discordant.map(|(gained, lost)| mcnemar_exact_p(gained, lost)),
            indexed_layers: e.whole_model.as_ref().map(|w| w.indexed_layers),
            model_survived: e.whole_model.as_ref().map(|w| w.survived),
            model_recall: e.whole_model.as_ref().map(|w| w.recall),
            model_ci_low: e.whole_model.as_ref().map(|w| w.ci_low),
            model_ci_high: e.whole_model.as_ref().map(|w| w.ci_high),
            layers_reached: e.whole_model.as_ref().and_then(|w| w.layers_reached).map(|r| r.0),
            layers_reached_ci_low: e.whole_model.as_ref().and_then(|w| w.layers_reached).map(|r| r.1),
            layers_reached_ci_high: e.whole_model.as_ref().and_then(|w| w.layers_reached).map(|r| r.2),
            layers_reached_quantiles: e.whole_model.as_ref().and_then(|w| w.layers_reached_quantiles),
            k_baseline: e.k_recall_diff.map(|_| spec.topks.iter().copied().min().unwrap_or(g.topk)),
            k_recall_diff: e.k_recall_diff,
            k_discordant_gained: e.k_discordant.map(|d| d.0),
            k_discordant_lost: e.k_discordant.map(|d| d.1),
            k_mcnemar_p: e.k_discordant.map(|(gained, lost)| mcnemar_exact_p(gained, lost)),
            k_model_recall_diff: e.k_model_recall_diff,
            model_band_low: e.whole_model.as_ref().and_then(|w| w.band).map(|b| b.0),
            model_band_high: e.whole_model.as_ref().and_then(|w| w.band).map(|b| b.1),
            needle_capped: e.needle_capped,
            needle_margin: margin.map(|(m, _)| m.multiple),
            needle_margin_ci_low: margin.map(|(m, _)| m.low),
            needle_margin_ci_high: margin.map(|(m, _)| m.high),
            needle_margin_exceedance: margin.map(|(m, median)| m.multiple * median),
            needle_margin_unbounded: margin.map(|(m, _)| m.unbounded),
            model_needle_margin: model_margin.map(|m| m.multiple),
            model_needle_margin_ci_low: model_margin.map(|m| m.low),
            model_needle_margin_ci_high: model_margin.map(|m| m.high),
            model_needle_margin_unbounded: model_margin.map(|m| m.unbounded),
            ties: e.ties,
            agreement: e.agreement.clone(),
        }
    }
}

/// The Holm–Bonferroni adjustment of every paired test of a sweep as one
/// family (docs/MODEL.md, "Paired comparisons"): each cell's precision-paired
/// `mcnemar_p` and its k-paired `k_mcnemar_p`. A sweep of 40 comparisons
/// finds about two unadjusted p < 0.05 by chance; an adjusted value below
/// 0.05 keeps the chance of any false call in the whole family at 5 %.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HolmFamily {
    /// Per cell: the adjusted value of its precision-paired test, if any.
    pub precision: Vec<Option<f64>>,
    /// Per cell: the adjusted value of its k-paired test, if any.
    pub topk: Vec<Option<f64>>,
    /// Tests in the family.
    pub size: usize,
}

impl HolmFamily {
    pub fn of(cells: &[CellResult]) -> Self {
        let raw: Vec<f64> =
            cells.iter().map(|c| c.mcnemar_p).chain(cells.iter().map(|c| c.k_mcnemar_p)).map(|p| p.unwrap_or(f64::NAN)).collect();
        let size = raw.iter().filter(|p| !p.is_nan()).count();
        let mut adjusted: Vec<Option<f64>> = holm_adjust(&raw).into_iter().map(|p| (!p.is_nan()).then_some(p)).collect();
        let topk = adjusted.split_off(cells.len());
        HolmFamily { precision: adjusted, topk, size }
    }
}

/// Which baseline a cell is paired with: the sweep's first precision, or its
/// smallest k (same context, depth, offset and precision).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairing {
    Precision,
    TopK,
}

/// One cell's paired comparison with its baseline, as the tables show it.
#[derive(Clone, Debug, PartialEq)]
pub struct PairedTest<'a> {
    pub cell: &'a CellResult,
    /// Per-layer recall minus the baseline's.
    pub diff: f64,
    /// Whole-model recall minus the baseline's (k pairs only; untested).
    pub model_diff: Option<f64>,
    pub gained: Option<u64>,
    pub lost: Option<u64>,
    pub p: Option<f64>,
    /// `p` adjusted over the whole family.
    pub holm: Option<f64>,
}

impl HolmFamily {
    /// The paired comparisons of `cells` (the cells this family was made
    /// of) under `pairing`, in cell order; cells without one are left out.
    pub fn tests<'a>(&self, cells: &'a [CellResult], pairing: Pairing) -> Vec<PairedTest<'a>> {
        cells
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match pairing {
                Pairing::Precision => c.baseline.as_ref().map(|_| PairedTest {
                    cell: c,
                    diff: c.recall_diff.unwrap_or(0.0),
                    model_diff: None,
                    gained: c.discordant_gained,
                    lost: c.discordant_lost,
                    p: c.mcnemar_p,
                    holm: self.precision[i],
                }),
                Pairing::TopK => c.k_baseline.map(|_| PairedTest {
                    cell: c,
                    diff: c.k_recall_diff.unwrap_or(0.0),
                    model_diff: c.k_model_recall_diff,
                    gained: c.k_discordant_gained,
                    lost: c.k_discordant_lost,
                    p: c.k_mcnemar_p,
                    holm: self.topk[i],
                }),
            })
            .collect()
    }
}

/// Each cell's precision-paired McNemar p adjusted by Holm–Bonferroni over
/// the sweep's whole family of paired tests ([`HolmFamily`]: precision- and
/// k-paired). None where a cell has no precision-paired test.
pub fn holm_adjusted_p(cells: &[CellResult]) -> Vec<Option<f64>> {
    HolmFamily::of(cells).precision
}

/// The same for each cell's k-paired test (`k_mcnemar_p`), in the same family.
pub fn holm_adjusted_k_p(cells: &[CellResult]) -> Vec<Option<f64>> {
    HolmFamily::of(cells).topk
}

//! Full simulation: every row of every context is generated, quantized and
//! scored ([`TrialSpec::run`]), and each cell's trials are tallied: survival
//! with its Wilson interval, the needle's rank and margin, selection
//! fidelity against the reference variant, and the paired comparison with
//! the baseline variant.

use crate::base::stats::{mean_interval, quantiles, wilson_interval, Z95};
use crate::error::SimError;
use crate::estimate::estimator::{CellEstimate, Estimator, PairAgreement, RankSummary, TieCounts};
use crate::estimate::{grid, margin, stack};
use crate::score::trial::NeedleOutcome;
use crate::score::trial::{TrialOutcome, TrialSpec};

/// Per-cell totals over trials.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellTally {
    pub trials: u64,
    pub survived: u64,
    pub survived_via_window: u64,
    /// Ranks of the best needle row (strictly above), one per ranked trial.
    ranks_above: Vec<u64>,
    ranks_above_or_equal_sum: u128,
    /// Trials in which a competitor tied the best needle row.
    pub trials_with_ties: u64,
    margins_sd: Vec<f64>,
    /// Rank (strictly above) as a share of k_eff, one per ranked trial.
    rank_shares: Vec<f64>,
    selection_recall: Moments,
    jaccard: Moments,
    /// Paired with the sweep's first (baseline) precision on the same trials:
    /// trials this variant kept and the baseline lost, and the reverse.
    pub gained_vs_baseline: u64,
    pub lost_vs_baseline: u64,
    /// Paired with the same variant at the sweep's smallest k on the same
    /// trials: trials kept at this k and lost at the smallest, and the reverse.
    pub gained_vs_smallest_k: u64,
    pub lost_vs_smallest_k: u64,
    /// The tie audit, when the trials carry one.
    pub ties: Option<TieCounts>,
}

/// Running sum and sum of squares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Moments {
    pub n: u64,
    pub sum: f64,
    pub sum_sq: f64,
}

impl Moments {
    fn add(&mut self, x: f64) {
        self.n += 1;
        self.sum += x;
        self.sum_sq += x * x;
    }

    /// (mean, low, high) with a normal 95 % interval.
    pub fn interval(&self) -> Option<(f64, f64, f64)> {
        mean_interval(self.sum, self.sum_sq, self.n)
    }
}

impl CellTally {
    pub fn recall(&self) -> f64 {
        if self.trials == 0 {
            0.0
        } else {
            self.survived as f64 / self.trials as f64
        }
    }

    /// Wilson 95 % interval of the recall.
    pub fn interval(&self) -> (f64, f64) {
        wilson_interval(self.survived, self.trials, Z95)
    }

    pub fn ranked_trials(&self) -> u64 {
        self.ranks_above.len() as u64
    }

    pub fn mean_rank(&self) -> Option<f64> {
        let n = self.ranks_above.len();
        (n > 0).then(|| self.ranks_above.iter().map(|&r| r as f64).sum::<f64>() / n as f64)
    }

    pub fn mean_rank_ties(&self) -> Option<f64> {
        let n = self.ranks_above.len();
        (n > 0).then(|| self.ranks_above_or_equal_sum as f64 / n as f64)
    }

    pub fn median_rank(&self) -> Option<f64> {
        let mut r = self.ranks_above.clone();
        r.sort_unstable();
        let n = r.len();
        match n {
            0 => None,
            _ if n % 2 == 1 => Some(r[n / 2] as f64),
            _ => Some((r[n / 2 - 1] as f64 + r[n / 2] as f64) / 2.0),
        }
    }

    pub fn mean_margin_sd(&self) -> Option<f64> {
        let n = self.margins_sd.len();
        (n > 0).then(|| self.margins_sd.iter().sum::<f64>() / n as f64)
    }

    /// Quantiles ([`crate::base::stats::QUANTILE_PROBS`]) of the margin in competitor SDs.
    pub fn margin_sd_quantiles(&self) -> Option<[f64; 5]> {
        quantiles(&mut self.margins_sd.clone())
    }

    /// Quantiles of the rank as a share of k_eff (< 1 means kept by rank).
    pub fn rank_share_quantiles(&self) -> Option<[f64; 5]> {
        quantiles(&mut self.rank_shares.clone())
    }

    pub fn selection_recall(&self) -> Option<(f64, f64, f64)> {
        self.selection_recall.interval()
    }

    pub fn jaccard(&self) -> Option<(f64, f64, f64)> {
        self.jaccard.interval()
    }

    fn add(&mut self, o: &NeedleOutcome, k_eff: u64, baseline: Option<&NeedleOutcome>, smallest_k: Option<&NeedleOutcome>) {
        if let Some(b) = baseline {
            self.gained_vs_baseline += u64::from(o.survived && !b.survived);
            self.lost_vs_baseline += u64::from(!o.survived && b.survived);
        }
        if let Some(b) = smallest_k {
            self.gained_vs_smallest_k += u64::from(o.survived && !b.survived);
            self.lost_vs_smallest_k += u64::from(!o.survived && b.survived);
        }
        if let (Some(r), true) = (o.rank, k_eff > 0) {
            self.rank_shares.push(r.above as f64 / k_eff as f64);
        }
        if let Some(x) = o.selection_recall {
            self.selection_recall.add(x);
        }
        if let Some(x) = o.jaccard {
            self.jaccard.add(x);
        }
        self.trials += 1;
        self.survived += u64::from(o.survived);
        self.survived_via_window += u64::from(o.via_window);
        if let Some(r) = o.rank {
            self.ranks_above.push(r.above);
            self.ranks_above_or_equal_sum += u128::from(r.above_or_equal);
            self.trials_with_ties += u64::from(r.above_or_equal > r.above);
        }
        if let Some(m) = o.margin_sd {
            self.margins_sd.push(m);
        }
        if let Some(c) = &o.ties {
            self.ties.get_or_insert_with(TieCounts::default).add(c);
        }
    }
}

/// Tallies every cell over trials, in trial order. Variants after the first
/// are also paired with the first (the baseline) trial by trial, and k
/// above the smallest with the smallest.
pub fn tally_cells(spec: &TrialSpec<'_>, outcomes: &[TrialOutcome]) -> Vec<CellTally> {
    let grid: Vec<_> = grid::cells(spec).map(|g| (g.k_baseline_index(spec), g)).collect();
    let mut cells = vec![CellTally::default(); spec.cell_count()];
    for outcome in outcomes {
        for (k_baseline, g) in &grid {
            let baseline = (!g.is_baseline()).then(|| &outcome.cells[g.baseline_index]);
            let smallest_k = k_baseline.map(|i| &outcome.cells[i]);
            cells[g.index].add(&outcome.cells[g.index], g.k_eff(), baseline, smallest_k);
        }
    }
    cells
}

/// Per (context, needle spot, k, pair) ([`TrialSpec::pair_index`]): the
/// pair's agreement and tie disagreement over the trials that compared it.
fn tally_pairs(spec: &TrialSpec<'_>, outcomes: &[TrialOutcome]) -> Vec<(Moments, Moments)> {
    let mut pairs = vec![(Moments::default(), Moments::default()); spec.pair_index(spec.contexts.len(), 0, 0, 0)];
    for outcome in outcomes {
        // A checkpoint written without pairs has none to add.
        for (tally, found) in pairs.iter_mut().zip(&outcome.agreement) {
            if let Some(a) = found {
                tally.0.add(a.share());
                tally.1.add(a.tied_share());
            }
        }
    }
    pairs
}

/// The agreements of cell `g`'s variant as A of its pairs.
fn cell_agreements(spec: &TrialSpec<'_>, g: &grid::GridCell<'_>, pairs: &[(Moments, Moments)]) -> Vec<PairAgreement> {
    let mut out = Vec::new();
    for (p, &(_, b)) in spec.agreement.iter().enumerate().filter(|(_, &(a, _))| a == g.variant_index) {
        let (share, tied) = &pairs[spec.pair_index(g.context_index, g.spot_index, g.topk_index, p)];
        let (Some((mean, low, high)), Some((tie, _, _))) = (share.interval(), tied.interval()) else { continue };
        let real = (1.0 - mean - tie).max(0.0);
        out.push(PairAgreement {
            with: spec.variants[b].name.clone(),
            trials: share.n,
            agreement: mean,
            agreement_ci_low: low,
            agreement_ci_high: high,
            tie_disagreement: tie,
            real_disagreement: real,
            tie_share: (tie + real > 0.0).then(|| tie / (tie + real)),
        });
    }
    out
}

/// The full-simulation estimator.
#[derive(Clone, Copy, Debug, Default)]
pub struct Full;

impl Estimator for Full {
    const NAME: &'static str = "full";
    type Trial = TrialOutcome;
    type Cell = CellEstimate;

    fn first_cell_outcomes(&self, trials: &[TrialOutcome]) -> Vec<NeedleOutcome> {
        trials.iter().filter_map(|t| t.cells.first().copied()).collect()
    }

    fn trial(&self, spec: &TrialSpec<'_>, trial_seed: u64) -> Result<TrialOutcome, SimError> {
        spec.run(trial_seed)
    }

    fn cells(&self, spec: &TrialSpec<'_>, trials: &[TrialOutcome]) -> Vec<CellEstimate> {
        let tallies = tally_cells(spec, trials);
        let reference = spec.fidelity_reference.map(|r| spec.variants[r].name.clone());
        let mut whole_model = spec.stack.map(|w| stack::whole_model(spec, w, trials));
        let model_recall: Option<Vec<f64>> = whole_model.as_ref().map(|w| w.iter().map(|e| e.recall).collect());
        let needle_slots = spec.needle_slots();
        let mut margins = spec.model.needle_unit.quantile().map(|q| margin::margin_curves(spec, q, trials));
        let pairs = tally_pairs(spec, trials);
        grid::cells(spec)
            .map(|g| {
                let t = &tallies[g.index];
                let k_baseline = g.k_baseline_index(spec);
                let (ci_low, ci_high) = t.interval();
                let selection_recall = t.selection_recall();
                let paired = !g.is_baseline();
                CellEstimate {
                    trials: t.trials,
                    survived: t.survived,
                    recall: t.recall(),
                    ci_low,
                    ci_high,
                    survived_via_window: t.survived_via_window,
                    ranks: RankSummary {
                        mean_rank: t.mean_rank(),
                        mean_rank_ties: t.mean_rank_ties(),
                        median_rank: t.median_rank(),
                        trials_with_ties: t.trials_with_ties,
                        mean_margin_sd: t.mean_margin_sd(),
                        rank_share_quantiles: t.rank_share_quantiles(),
                        margin_sd_quantiles: t.margin_sd_quantiles(),
                    },
                    fidelity_reference: reference.clone().filter(|_| selection_recall.is_some()),
                    selection_recall,
                    jaccard: t.jaccard(),
                    recall_diff: paired.then(|| t.recall() - tallies[g.baseline_index].recall()),
                    discordant: paired.then_some((t.gained_vs_baseline, t.lost_vs_baseline)),
                    k_recall_diff: k_baseline.map(|b| t.recall() - tallies[b].recall()),
                    k_discordant: k_baseline.map(|_| (t.gained_vs_smallest_k, t.lost_vs_smallest_k)),
                    k_model_recall_diff: k_baseline.and_then(|b| model_recall.as_ref().map(|m| m[g.index] - m[b])),
                    whole_model: whole_model.as_mut().map(|w| std::mem::take(&mut w[g.index])),
                    needle_capped: spec.model.needle_unit.quantile().map(|_| {
                        let at = spec.needle_index(needle_slots[g.variant_index], g.context_index, g.spot_index);
                        trials.iter().filter(|t| t.needle.get(at).is_some_and(|n| n.capped)).count() as u64
                    }),
                    ties: t.ties,
                    margin: margins.as_mut().and_then(|m| m[g.index].take()),
                    agreement: cell_agreements(spec, &g, &pairs),
                }
            })
            .collect()
    }
}

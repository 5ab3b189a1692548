//! Ranking the hypotheses: the likelihood of the observed counts, the
//! posterior ranking, class standings and the rows no hypothesis explains.

use super::candidates::Reading;
use super::loss::{with_loss, Loss};
use super::observations::Observation;
use super::separation::clamped;
use crate::score::hypothesis::{candidate_class, FaultClass};
use serde::Serialize;

/// log P(found | total, p) for a binomial.
pub fn log_binomial(found: u64, total: u64, p: f64) -> f64 {
    let (k, n) = (found as f64, total as f64);
    let choose =
        crate::base::special::ln_gamma(n + 1.0) - crate::base::special::ln_gamma(k + 1.0) - crate::base::special::ln_gamma(n - k + 1.0);
    let mut ll = choose;
    if found > 0 {
        ll += k * p.ln();
    }
    if found < total {
        ll += (n - k) * (1.0 - p).ln();
    }
    ll
}

/// log of the mean of exp(ℓ) over `lls`, computed about their largest, `top`:
/// the marginal log-likelihood under a uniform prior on a grid.
pub(super) fn log_mean_exp(lls: impl ExactSizeIterator<Item = f64>, top: f64) -> f64 {
    let n = lls.len() as f64;
    let mean = lls.map(|ll| (ll - top).exp()).sum::<f64>() / n;
    top + mean.ln()
}

/// The needle slot a candidate is read at: the best-fitting one, the
/// scenario's own (`central`) when it fits as well. The lowest slot wins
/// ties among the others.
pub(super) fn preferred_slot(lls: &[f64], central: usize) -> usize {
    let top = (0..lls.len()).max_by(|&a, &b| lls[a].total_cmp(&lls[b]).then(b.cmp(&a))).unwrap_or(0);
    if lls.get(central).is_some_and(|&c| c >= lls[top]) {
        central
    } else {
        top
    }
}

/// A candidate over the needle grid, from its log-likelihood at each slot
/// (`central`: the scenario's own needle among them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct OverNeedle {
    /// The marginal log-likelihood: the mean likelihood over the slots, a
    /// uniform prior on the grid. The default grids step by a factor 2, so
    /// this is a log-uniform prior on the needle's multiple. The needle is
    /// a nuisance parameter like a loss's share or a gate's onset, and is
    /// treated alike for every candidate: a candidate that fits only at
    /// one multiple pays for the freedom (an Occam factor) against one
    /// that fits at every multiple, rather than being read at its best.
    pub log_likelihood: f64,
    /// The slot it fits best at ([`preferred_slot`]): its recalls, the
    /// goodness of fit and the unexplained rows are read there (a fit test
    /// needs a point estimate).
    pub best: usize,
    /// log10 of how much better that slot fits than `central` (≥ 0).
    pub gain_log10: f64,
}

/// The candidate whose log-likelihood at each needle slot is `lls`.
pub(super) fn over_needle(lls: &[f64], central: usize) -> OverNeedle {
    let best = preferred_slot(lls, central);
    let top = lls.get(best).copied().unwrap_or(f64::NEG_INFINITY);
    let log_likelihood = if top.is_finite() { log_mean_exp(lls.iter().copied(), top) } else { top };
    let gain_log10 = lls.get(central).map_or(0.0, |&c| (top - c) / std::f64::consts::LN_10);
    OverNeedle { log_likelihood, best, gain_log10 }
}

/// One candidate's standing.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ranked {
    pub hypothesis: String,
    pub log_likelihood: f64,
    /// Under a uniform prior over the candidates.
    pub posterior: f64,
    /// log10 of the Bayes factor against the best candidate (≤ 0).
    pub log10_bayes_factor: f64,
    /// Observation rows whose configuration it changes.
    pub rows_changed: usize,
    /// The simulated recall (unclamped) it gives each observation row, at
    /// its best multiple of the needle knob.
    pub recalls: Vec<f64>,
    /// Its class (docs/OBSERVATIONS.md, "Classes").
    pub class: FaultClass,
    /// The multiple of the needle knob that fits it best (1 without a nuisance grid).
    pub needle_multiplier: f64,
    /// log10 of how much better that multiple fits than the scenario's own needle (≥ 0).
    pub needle_gain_log10: f64,
    /// An after-selection loss's fitted value (None for every other candidate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<Loss>,
    /// A length-gated form's onset: the fault acts in prompts longer than
    /// this many tokens (None for every other candidate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<u64>,
}

/// One class's standing: the candidates of a class pooled under a prior
/// that is uniform over the classes present and uniform within each.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassStanding {
    pub class: FaultClass,
    pub about: String,
    pub posterior: f64,
    /// log10 Bayes factor of the class's best candidate against the best overall (≤ 0).
    pub log10_bayes_factor: f64,
    pub best: String,
    pub candidates: usize,
}

/// A row the best candidate cannot explain: its count is in the 1 % tails
/// of Binomial(total, recall) under that candidate (two-sided).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unexplained {
    /// The row's line in the observation file.
    pub line: usize,
    pub context_tokens: u64,
    pub depth_percent: f64,
    pub topk: u64,
    pub config: String,
    /// The row's own label for `config`.
    pub label: String,
    pub found: u64,
    pub total: u64,
    /// The best candidate's recall there, and the two-sided p of the count.
    pub recall: f64,
    pub p_value: f64,
}

/// Below this two-sided p a row is flagged as unexplained.
pub const UNEXPLAINED_P: f64 = 0.01;

/// Two-sided p of `found` of `total` under Binomial(total, p): the
/// probability of a count no more likely than it.
pub fn binomial_two_sided_p(found: u64, total: u64, p: f64) -> f64 {
    let at = log_binomial(found, total, p);
    let sum: f64 = (0..=total).map(|j| log_binomial(j, total, p)).filter(|&l| l <= at + 1e-9).map(f64::exp).sum();
    sum.min(1.0)
}

/// The rows whose counts the best candidate of `ranking` cannot explain.
pub fn unexplained_rows(rows: &[Observation], ranking: &[Ranked], trials: u64) -> Vec<Unexplained> {
    let Some(best) = ranking.first() else { return Vec::new() };
    rows.iter()
        .zip(&best.recalls)
        .filter_map(|(r, &p)| {
            let p_value = binomial_two_sided_p(r.found, r.total, clamped(p, trials));
            (p_value < UNEXPLAINED_P).then(|| Unexplained {
                line: r.line,
                context_tokens: r.context_tokens,
                depth_percent: r.depth_percent,
                topk: r.topk,
                config: r.config.clone(),
                label: r.label.clone(),
                found: r.found,
                total: r.total,
                recall: p,
                p_value,
            })
        })
        .collect()
}

/// Sorts candidates by log-likelihood (stable: ties keep the candidate
/// order) and fills in posteriors and Bayes factors.
pub fn rank(mut ranked: Vec<Ranked>) -> Vec<Ranked> {
    ranked.sort_by(|a, b| b.log_likelihood.total_cmp(&a.log_likelihood));
    let best = ranked.first().map_or(0.0, |r| r.log_likelihood);
    let z: f64 = ranked.iter().map(|r| (r.log_likelihood - best).exp()).sum();
    for r in &mut ranked {
        r.posterior = (r.log_likelihood - best).exp() / z;
        r.log10_bayes_factor = (r.log_likelihood - best) / std::f64::consts::LN_10;
    }
    ranked
}

/// `ranked` with each bounded address-space hypothesis alone at several
/// bounds pooled into one: named and read at the bound that fits best (the
/// first on a tie), its likelihood marginal over the bounds tried (a
/// uniform prior on them: an onset the file does not state is a nuisance
/// parameter, as the needle's multiple and a gate's onset are).
pub(super) fn pool_bounds(ranked: Vec<Ranked>) -> Vec<Ranked> {
    fn family(h: &str) -> Option<&str> {
        let (bare, _) = h.split_once('=')?;
        (super::candidates::BOUNDED.contains(&bare) && !h.contains('+')).then_some(bare)
    }
    // Each kept candidate, and the log-likelihoods of its family's bounds.
    let mut out: Vec<(Ranked, Vec<f64>)> = Vec::with_capacity(ranked.len());
    for r in ranked {
        let same = family(&r.hypothesis).and_then(|f| out.iter().position(|(o, _)| family(&o.hypothesis) == Some(f)));
        match same {
            Some(i) => {
                out[i].1.push(r.log_likelihood);
                if r.log_likelihood > out[i].0.log_likelihood {
                    out[i].0 = r;
                }
            }
            None => {
                let ll = r.log_likelihood;
                out.push((r, vec![ll]));
            }
        }
    }
    out.into_iter()
        .map(|(mut r, lls)| {
            if lls.len() > 1 && r.log_likelihood.is_finite() {
                r.log_likelihood = log_mean_exp(lls.into_iter(), r.log_likelihood);
            }
            r
        })
        .collect()
}

/// The classes of a ranking (filled by [`rank`]), best first, under a
/// prior uniform over the classes present and uniform within each.
pub fn class_standings(ranking: &[Ranked]) -> Vec<ClassStanding> {
    let best = ranking.first().map_or(0.0, |r| r.log_likelihood);
    let mut out: Vec<ClassStanding> = Vec::new();
    let mut mass: Vec<f64> = Vec::new();
    for r in ranking {
        let w = (r.log_likelihood - best).exp();
        match out.iter().position(|c| c.class == r.class) {
            Some(i) => {
                out[i].candidates += 1;
                mass[i] += w;
            }
            None => {
                out.push(ClassStanding {
                    class: r.class,
                    about: r.class.about().to_string(),
                    posterior: 0.0,
                    log10_bayes_factor: r.log10_bayes_factor,
                    best: r.hypothesis.clone(),
                    candidates: 1,
                });
                mass.push(w);
            }
        }
    }
    let pooled: Vec<f64> = out.iter().zip(&mass).map(|(c, m)| m / c.candidates as f64).collect();
    let z: f64 = pooled.iter().sum();
    for (c, p) in out.iter_mut().zip(pooled) {
        c.posterior = if z > 0.0 { p / z } else { 0.0 };
    }
    out
}

/// Each after-selection candidate of `names` ranked on the counts of `rows`
/// (unsorted, posteriors unset), on `healthy`'s simulated recalls (per
/// multiple of `multipliers`, per row; `trials` per cell). Its likelihood
/// is marginal over its loss grid (a uniform prior on the grid: a fitted
/// curve pays for the freedom a simulated fault does not have) and over
/// the needle multiples, as every candidate's is ([`over_needle`]); the
/// loss reported is the best at the best multiple, the scenario's own
/// needle (`central`) on a tie.
pub fn rank_losses(
    rows: &[Observation],
    names: &[String],
    healthy: &[Vec<f64>],
    trials: u64,
    multipliers: &[f64],
    central: usize,
    reading: Reading,
) -> Vec<Ranked> {
    let mut out = Vec::new();
    for h in names {
        let grid = Loss::grid(h);
        // At each multiple: the marginal log-likelihood over the grid, and the best loss.
        let best_at: Vec<(f64, Loss)> = healthy
            .iter()
            .filter_map(|recalls| {
                let lls: Vec<(f64, Loss)> = grid
                    .iter()
                    .map(|loss| {
                        let terms = rows.iter().zip(recalls);
                        let ll = terms.map(|(r, &p)| log_binomial(r.found, r.total, clamped(with_loss(p, loss, r, reading), trials))).sum();
                        (ll, *loss)
                    })
                    .collect();
                let (top, loss) =
                    lls.iter().copied().fold(None, |b: Option<(f64, Loss)>, x| if b.is_none_or(|b| x.0 > b.0) { Some(x) } else { b })?;
                Some((log_mean_exp(lls.iter().map(|(ll, _)| *ll), top), loss))
            })
            .collect();
        if best_at.len() != multipliers.len() || central >= best_at.len() {
            continue;
        }
        let needle = over_needle(&best_at.iter().map(|b| b.0).collect::<Vec<_>>(), central);
        let (j, loss) = (needle.best, best_at[needle.best].1);
        out.push(Ranked {
            hypothesis: h.clone(),
            log_likelihood: needle.log_likelihood,
            posterior: 0.0,
            log10_bayes_factor: 0.0,
            rows_changed: rows.iter().filter(|r| with_loss(1.0, &loss, r, reading) < 1.0).count(),
            recalls: rows.iter().zip(&healthy[j]).map(|(r, &p)| with_loss(p, &loss, r, reading)).collect(),
            class: candidate_class(h),
            needle_multiplier: multipliers[j],
            needle_gain_log10: needle.gain_log10,
            loss: Some(loss),
            gate: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fit_at_one_needle_multiple_loses_to_one_at_every_multiple() {
        // Equal best likelihoods: profiled, the two would tie; marginal, the
        // candidate that needs one particular needle pays for it.
        let everywhere = over_needle(&[-5.0, -5.0, -5.0], 1);
        let one_only = over_needle(&[-60.0, -60.0, -5.0], 1);
        assert!((everywhere.log_likelihood + 5.0).abs() < 1e-12);
        assert!((one_only.log_likelihood - (-5.0 - 3f64.ln())).abs() < 1e-9, "{one_only:?}");
        assert!(everywhere.log_likelihood - one_only.log_likelihood > 1.0);
        // Read at the best multiple, the scenario's own on a tie.
        assert_eq!((everywhere.best, everywhere.gain_log10), (1, 0.0));
        assert_eq!(one_only.best, 2);
        assert!((one_only.gain_log10 - 55.0 / std::f64::consts::LN_10).abs() < 1e-9);
        // One multiple (the needle known): the likelihood as it is.
        assert_eq!(over_needle(&[-7.5], 0), OverNeedle { log_likelihood: -7.5, best: 0, gain_log10: 0.0 });
    }

    #[test]
    fn a_loss_is_marginal_over_the_needle_too() {
        let csv = "context_tokens,depth_percent,topk,config,found,total\n4K,50,512,fp8,18,20\n16K,50,512,fp8,18,20\n";
        let rows = super::super::observations::parse("t.csv", csv, &|_| Ok(())).unwrap().rows;
        let names = vec![super::super::loss::CONSTANT.to_string()];
        let rank_at =
            |healthy: &[Vec<f64>], multipliers: &[f64]| rank_losses(&rows, &names, healthy, 1000, multipliers, 0, Reading::Model).remove(0);
        let one = rank_at(&[vec![1.0, 1.0]], &[1.0]);
        // A second multiple at which healthy finds nothing: no loss fits
        // there, so the mean likelihood over the two halves.
        let two = rank_at(&[vec![1.0, 1.0], vec![0.01, 0.01]], &[1.0, 2.0]);
        assert!((one.log_likelihood - two.log_likelihood - 2f64.ln()).abs() < 1e-6, "{} {}", one.log_likelihood, two.log_likelihood);
        assert_eq!((two.needle_multiplier, two.loss), (1.0, Some(Loss::Constant { share: 0.1 })));
        assert_eq!(two.recalls, [0.9, 0.9]);
    }
}

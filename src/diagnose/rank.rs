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
/// bounds kept at the bound that fits best (the first on a tie): its
/// profile likelihood over the bound, as the needle's.
pub(super) fn profile_bounds(ranked: Vec<Ranked>) -> Vec<Ranked> {
    fn family(h: &str) -> Option<&str> {
        let (bare, _) = h.split_once('=')?;
        (super::candidates::BOUNDED.contains(&bare) && !h.contains('+')).then_some(bare)
    }
    let mut out: Vec<Ranked> = Vec::with_capacity(ranked.len());
    for r in ranked {
        let same = family(&r.hypothesis).and_then(|f| out.iter().position(|o| family(&o.hypothesis) == Some(f)));
        match same {
            Some(i) if r.log_likelihood > out[i].log_likelihood => out[i] = r,
            Some(_) => {}
            None => out.push(r),
        }
    }
    out
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
/// curve pays for the freedom a simulated fault does not have) and
/// profiled over the needle multiples, as every candidate's is; the loss
/// reported is the grid's best. On a tie the multiple `central` (the
/// scenario's own needle), as for the other candidates.
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
                let mean = lls.iter().map(|(ll, _)| (ll - top).exp()).sum::<f64>() / lls.len() as f64;
                Some((top + mean.ln(), loss))
            })
            .collect();
        if best_at.len() != multipliers.len() || central >= best_at.len() {
            continue;
        }
        let top = (0..best_at.len()).max_by(|&a, &b| best_at[a].0.total_cmp(&best_at[b].0).then(b.cmp(&a))).unwrap_or(0);
        let j = if best_at[central].0 >= best_at[top].0 { central } else { top };
        let (ll, loss) = best_at[j];
        out.push(Ranked {
            hypothesis: h.clone(),
            log_likelihood: ll,
            posterior: 0.0,
            log10_bayes_factor: 0.0,
            rows_changed: rows.iter().filter(|r| with_loss(1.0, &loss, r, reading) < 1.0).count(),
            recalls: rows.iter().zip(&healthy[j]).map(|(r, &p)| with_loss(p, &loss, r, reading)).collect(),
            class: candidate_class(h),
            needle_multiplier: multipliers[j],
            needle_gain_log10: (ll - best_at[central].0) / std::f64::consts::LN_10,
            loss: Some(loss),
            gate: None,
        });
    }
    out
}

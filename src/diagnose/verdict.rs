//! The verdict a ranking supports, and the pair of leaders it leaves open.

use super::candidates::*;
use super::gof::*;
use super::observations::Observation;
use super::rank::*;
use crate::score::hypothesis::FaultClass;
use serde::Serialize;

/// What the counts say, in words.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// `healthy` (consistent with a healthy indexer), `inconclusive` (two
    /// classes within 10:1), `fault` (one class ahead of every other by
    /// at least 10:1), `not-selection` (a loss after a healthy selection
    /// ahead of every selection fault and healthy by at least 10:1) or
    /// `outside` (even the best candidate fits the rows badly).
    pub kind: String,
    pub text: String,
}

/// The verdict on a ranking and its classes: consistent with a healthy
/// indexer when no candidate beats healthy by 10:1; inconclusive when a
/// second class comes within 10:1 of the best; else the best class.
pub fn verdict(ranking: &[Ranked], classes: &[ClassStanding]) -> Verdict {
    let Some(best) = ranking.first() else {
        return Verdict { kind: "inconclusive".into(), text: "no candidate to rank".into() };
    };
    let close = |bf: f64| bf > -DECISIVE_LOG10;
    let healthy = ranking.iter().find(|r| r.class == FaultClass::Healthy);
    if let Some(h) = healthy.filter(|h| close(h.log10_bayes_factor)) {
        let text = if h.hypothesis == best.hypothesis {
            let runner = ranking.get(1).filter(|r| close(r.log10_bayes_factor));
            match runner {
                Some(r) => format!(
                    "consistent with a healthy indexer: healthy fits best, though {} ({}) is within 10:1 of it (log10 BF {:.2})",
                    r.hypothesis, r.class, r.log10_bayes_factor
                ),
                None => "consistent with a healthy indexer: healthy fits best, every fault at least 10:1 behind".into(),
            }
        } else {
            format!(
                "consistent with a healthy indexer: the best candidate, {} ({}), beats healthy by less than 10:1 (healthy at log10 BF {:.2}); more prompts or the next experiment would tell",
                best.hypothesis, best.class, h.log10_bayes_factor
            )
        };
        return Verdict { kind: "healthy".into(), text };
    }
    let top = &classes[0];
    let runner = classes.iter().skip(1).find(|c| close(c.log10_bayes_factor));
    if let (None, FaultClass::NotSelection) = (runner, top.class) {
        return not_selection(ranking, classes);
    }
    match runner {
        Some(r) => Verdict {
            kind: "inconclusive".into(),
            text: format!(
                "inconclusive between {} ({}: {}) and {} ({}: {}, log10 BF {:.2}); healthy is ruled out (log10 BF {:.2})",
                top.class,
                top.about,
                top.best,
                r.class,
                r.about,
                r.best,
                r.log10_bayes_factor,
                healthy.map_or(f64::NEG_INFINITY, |h| h.log10_bayes_factor)
            ),
        },
        None => {
            let within: Vec<&str> = ranking
                .iter()
                .skip(1)
                .filter(|r| r.class == top.class && close(r.log10_bayes_factor))
                .map(|r| r.hypothesis.as_str())
                .collect();
            let also =
                if within.is_empty() { String::new() } else { format!("; within the class, {} cannot be told from it", within.join(", ")) };
            Verdict {
                kind: "fault".into(),
                text: format!(
                    "{} ({}): best explained by {}, every other class at least 10:1 behind{}",
                    top.class, top.about, top.best, also
                ),
            }
        }
    }
}

/// The pair a verdict leaves open, if any, as [`verdict`] reads the
/// ranking: healthy and the best fault when healthy is first and a fault
/// within 10:1; the best candidate and healthy when healthy is within 10:1
/// of it; else the best candidates of the two leading classes when the
/// second is within 10:1.
pub fn open_pair<'a>(ranking: &'a [Ranked], classes: &[ClassStanding]) -> Option<(&'a Ranked, &'a Ranked)> {
    let close = |bf: f64| bf > -DECISIVE_LOG10;
    let best = ranking.first()?;
    let healthy = ranking.iter().find(|r| r.class == FaultClass::Healthy).filter(|h| close(h.log10_bayes_factor));
    let runner = match healthy {
        Some(h) if h.hypothesis == best.hypothesis => ranking.get(1),
        Some(h) => Some(h),
        None => {
            let class = classes.iter().skip(1).find(|c| close(c.log10_bayes_factor))?;
            ranking.iter().find(|r| r.hypothesis == class.best)
        }
    };
    runner.filter(|r| close(r.log10_bayes_factor)).map(|r| (best, r))
}

/// Where to look when the selection is healthy and the answer is lost anyway.
pub const LOOK_ELSEWHERE: &str = "look where the needle is used after it is selected: the MoE router (NaN or overflow in long prompts), the sparse-attention decode kernel (nondeterministic or wrong reductions; repeat one prompt at temperature 0), and sampling or answer parsing";

/// Odds as "N:1": whole numbers up to 10⁴, then a power of ten.
pub fn odds_text(log10: f64) -> String {
    if log10 < 4.0 {
        format!("{:.0}:1", 10f64.powf(log10))
    } else if log10.is_finite() {
        format!("10^{:.0}:1", log10.floor())
    } else {
        "∞:1".into()
    }
}

/// The verdict when an after-selection loss leads every other class,
/// healthy included, by at least 10:1.
fn not_selection(ranking: &[Ranked], classes: &[ClassStanding]) -> Verdict {
    let top = &classes[0];
    let best = ranking.iter().find(|r| r.hypothesis == top.best);
    let runner = classes.get(1);
    let against = runner.map_or(f64::INFINITY, |r| top.log10_bayes_factor - r.log10_bayes_factor);
    let fitted = best.and_then(|b| b.loss).map_or(String::new(), |l| format!(", {}", l.describe()));
    Verdict {
        kind: "not-selection".into(),
        text: format!(
            "selection healthy: the losses are not explained by the indexer's selection ({} against {}); best explained by {}{fitted}, a loss that does not depend on whether the needle was selected; {LOOK_ELSEWHERE}",
            odds_text(against),
            runner.map_or("any other".to_string(), |r| format!("the next class, {} ({})", r.class, r.best)),
            top.best
        ),
    }
}

/// The verdict when the best candidate does not explain the rows (its
/// goodness of fit below [`OUTSIDE_P`], or a quarter of the rows or more
/// unexplained, at least two): "outside the catalogue", leading with the
/// misfit; None when it fits.
pub fn outside(ranking: &[Ranked], rows: usize, unexplained: &[Unexplained], fit: Option<&GoodnessOfFit>) -> Option<Verdict> {
    let best = ranking.first()?;
    let misfit = fit.is_some_and(|f| f.p_value < OUTSIDE_P);
    let many = unexplained.len() >= 2 && 4 * unexplained.len() >= rows;
    if !misfit && !many {
        return None;
    }
    let test = fit.map_or(String::new(), |f| {
        format!(" (goodness of fit {}: deviance {:.1} over {rows} rows, {} bootstrap draws)", p_text(f.p_value), f.deviance, f.draws)
    });
    Some(Verdict {
        kind: "outside".into(),
        text: format!(
            "outside the catalogue: {} of {rows} rows unexplained; even the best candidate, {} ({}), fits the rows badly{test}, so the ranking compares candidates that all fail: \
             the fault may not be in the catalogue, or the scenario may not match the deployment (calibrate first: docs/CALIBRATION.md)",
            unexplained.len(),
            best.hypothesis,
            best.class
        ),
    })
}

/// A p-value in words: "p < 0.001" below it, else "p = " and three decimals.
pub(super) fn p_text(p: f64) -> String {
    if p < 1e-3 {
        "p < 0.001".into()
    } else {
        format!("p = {p:.3}")
    }
}

/// The verdict on counts `rows` and their `ranking` (recalls simulated at
/// `trials`): [`outside`] first, else [`verdict`]; with the rows the best
/// candidate leaves unexplained and its goodness of fit.
pub fn judge(
    rows: &[Observation],
    ranking: &[Ranked],
    classes: &[ClassStanding],
    trials: u64,
) -> (Verdict, Vec<Unexplained>, Option<GoodnessOfFit>) {
    let unexplained = unexplained_rows(rows, ranking, trials);
    let fit = goodness_of_fit(rows, ranking, trials);
    let v = outside(ranking, rows.len(), &unexplained, fit.as_ref()).unwrap_or_else(|| verdict(ranking, classes));
    (v, unexplained, fit)
}

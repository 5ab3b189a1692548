//! The verdict a ranking supports, and the pair of leaders it leaves open.

use super::candidates::*;
use super::rank::*;
use crate::score::hypothesis::FaultClass;
use serde::Serialize;

/// What the counts say, in words.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// `healthy` (consistent with a healthy indexer), `inconclusive` (two
    /// classes within 10:1) or `fault` (one class ahead of every other by
    /// at least 10:1).
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

//! Repeated prompts (the observation column `prompt`): a row whose prompts
//! are repeats of one named prompt is one haystack asked `total` times.
//! What that says depends on whether the candidate's selection can differ
//! between repeats (docs/OBSERVATIONS.md, "Repeated prompts").

use super::observations::Observation;
use super::rank::log_binomial;
use super::separation::clamped;
use crate::score::hypothesis::{Hypothesis, Role};

/// The log-likelihood a candidate whose selection cannot differ between
/// repeats gives a prompt answered both ways: ln 10⁻⁶, not −∞, so that a
/// file where every candidate is contradicted still ranks (the penalty is
/// the same for each such candidate).
pub const MIXED_REPEATS_LOG: f64 = -13.815_510_557_964_274;

/// Whether the selection of candidate `h` may differ between repeats of one
/// prompt: when it makes every logit tie and leaves the tie order random (a
/// kernel whose order among equal scores changes from run to run). Every
/// other candidate selects from the same bytes the same way each time (its
/// scores may be wrong, even unrelated to the needle, but they are the same
/// scores): one outcome per prompt.
pub fn repeats_may_differ(h: &str) -> bool {
    let parts: Vec<Hypothesis> = h.split('+').filter_map(|p| Hypothesis::parse(p.trim()).ok()).collect();
    parts.iter().any(Hypothesis::every_logit_ties) && !parts.iter().any(|x| matches!(x.info.role, Role::TieOrder))
}

/// The log-likelihood of row `r`'s counts when a candidate gives recall
/// `p` there (simulated over `trials`). Distinct prompts (no `prompt`) and
/// candidates whose repeats may differ: Binomial(total, p). Repeats of one
/// prompt under a candidate whose selection is the same each time: one
/// draw, found (all repeats found: ln p), lost (none: ln(1 − p)) or
/// contradicted (both: [`MIXED_REPEATS_LOG`]).
pub fn row_log_likelihood(r: &Observation, p: f64, trials: u64, may_differ: bool) -> f64 {
    let p = clamped(p, trials);
    if r.prompt.is_none() || may_differ || r.total <= 1 {
        return log_binomial(r.found, r.total, p);
    }
    match r.found {
        0 => (1.0 - p).ln(),
        f if f == r.total => p.ln(),
        _ => MIXED_REPEATS_LOG,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(found: u64, total: u64, prompt: Option<&str>) -> Observation {
        Observation {
            line: 2,
            context_tokens: 4096,
            depth_percent: 50.0,
            topk: 64,
            label: "fp8".into(),
            config: "fp8".into(),
            found,
            total,
            layer: None,
            query_position: None,
            healthy: None,
            prefill_chunk: None,
            address_bound: None,
            prompt: prompt.map(str::to_string),
        }
    }

    #[test]
    fn repeats_of_one_prompt_are_one_draw_unless_the_candidate_may_differ() {
        let trials = 200;
        // Distinct prompts: the binomial, whatever the candidate.
        assert_eq!(row_log_likelihood(&row(3, 5, None), 0.5, trials, false), log_binomial(3, 5, 0.5));
        // Five repeats all found: one draw at p for a deterministic candidate …
        assert!((row_log_likelihood(&row(5, 5, Some("a")), 0.5, trials, false) - 0.5f64.ln()).abs() < 1e-12);
        assert!((row_log_likelihood(&row(0, 5, Some("a")), 0.8, trials, false) - 0.2f64.ln()).abs() < 1e-9);
        // … five independent draws for one whose ties fall in random order.
        assert_eq!(row_log_likelihood(&row(5, 5, Some("a")), 0.5, trials, true), log_binomial(5, 5, 0.5));
        // Both outcomes: contradicts the deterministic candidate, not the other.
        let mixed = row(2, 5, Some("a"));
        assert_eq!(row_log_likelihood(&mixed, 0.5, trials, false), MIXED_REPEATS_LOG);
        assert!(row_log_likelihood(&mixed, 0.5, trials, true) > MIXED_REPEATS_LOG + 10.0);
        assert!((MIXED_REPEATS_LOG - 1e-6f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn only_ties_in_random_order_may_differ_between_repeats() {
        assert!(!repeats_may_differ("healthy"));
        assert!(!repeats_may_differ("block-row0"));
        // Scores unrelated to the needle, but the same scores each time.
        assert!(!repeats_may_differ("hadamard-k-only"));
        // Every logit 0: the tie order decides, random unless a part fixes it.
        assert!(repeats_may_differ("scale-unwritten-zero"));
        assert!(!repeats_may_differ("scale-unwritten-zero+ties-lowest"));
    }
}

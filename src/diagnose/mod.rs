//! Diagnose an incident: for every candidate hypothesis of the catalogue,
//! the likelihood of the observed counts under the recall the simulator
//! gives each observed configuration, the posterior ranking, and the next
//! experiment that best tells the leaders apart. Definitions and the format
//! of the observation file: docs/OBSERVATIONS.md.

mod candidates;
pub mod fit;
mod gate;
pub mod gof;
pub mod knob;
pub mod loss;
mod next;
pub mod observations;
mod outcome;
mod prepare;
mod rank;
pub mod repeats;
pub mod separation;
mod simulate;
mod text;
mod verdict;

pub use candidates::{
    address_bounds, candidates, default_needle_multipliers, needle_knob, parse_needle_multipliers, with_address_bounds,
    with_needle_multiple, Reading, DECISIVE_LOG10, EXCEEDANCE_MULTIPLIERS, HEALTHY, LIVE_MAX, LIVE_POSTERIOR, NUISANCE_MULTIPLIERS,
    QUERY_POSITION_NOTE,
};
pub use gate::{gated_base, gated_name};
pub use gof::{goodness_of_fit, GoodnessOfFit, OUTSIDE_P};
pub use next::{draw_counts, information, information_text, prompts_for_odds, recovered, NextExperiment, NEAR_END_TOKENS};
pub use outcome::{diagnose, Diagnosis, WEAK_EVIDENCE_PROMPTS};
pub use prepare::{prepare, Options, Prepared};
pub use rank::{
    binomial_two_sided_p, class_standings, log_binomial, rank, unexplained_rows, ClassStanding, Ranked, Unexplained, UNEXPLAINED_P,
};
pub use separation::clamped;
pub use simulate::{simulate, variant_ok, DepthTrials, Simulated};
pub use text::{format_full_table, format_table, FOLD_TIES_FROM};
pub use verdict::{judge, odds_text, open_pair, outside, verdict, Verdict, LOOK_ELSEWHERE};

#[cfg(test)]
mod tests;

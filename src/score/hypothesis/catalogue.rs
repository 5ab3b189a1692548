//! The catalogue: every group's entries in one list, and lookups in it.

use super::entry::{HypothesisInfo, Role};
use super::{address, after, cache, numerics, position, selection};

/// The entries of every group, one after another.
const fn concat<const N: usize>(groups: [&[HypothesisInfo]; 6]) -> [HypothesisInfo; N] {
    let mut out = [groups[0][0]; N];
    let (mut g, mut at) = (0, 0);
    while g < groups.len() {
        let mut i = 0;
        while i < groups[g].len() {
            out[at] = groups[g][i];
            (i, at) = (i + 1, at + 1);
        }
        g += 1;
    }
    assert!(at == N, "the catalogue's length is the sum of its groups'");
    out
}

const GROUPS: [&[HypothesisInfo]; 6] =
    [numerics::ENTRIES, cache::ENTRIES, selection::ENTRIES, position::ENTRIES, address::ENTRIES, after::ENTRIES];
const COUNT: usize = numerics::ENTRIES.len()
    + cache::ENTRIES.len()
    + selection::ENTRIES.len()
    + position::ENTRIES.len()
    + address::ENTRIES.len()
    + after::ENTRIES.len();
const ALL_ENTRIES: [HypothesisInfo; COUNT] = concat(GROUPS);

/// Every hypothesis, in listing order (group by group).
pub const CATALOGUE: &[HypothesisInfo] = &ALL_ENTRIES;

/// Names of every hypothesis, comma-separated, for error messages.
pub fn names() -> String {
    CATALOGUE.iter().map(|h| h.name).collect::<Vec<_>>().join(", ")
}

/// The catalogue entry named `name` (`topk=N` and `topk` both find `topk=N`).
pub fn info(name: &str) -> Option<&'static HypothesisInfo> {
    let bare = name.split('=').next().unwrap_or(name);
    CATALOGUE.iter().find(|h| h.name == name || h.bare_name() == bare)
}

/// Hypotheses that make logits tie (diagnose's `all` tries each with both
/// index tie orders, since the tie rule decides what they select).
pub fn tie_makers() -> impl Iterator<Item = &'static HypothesisInfo> {
    CATALOGUE.iter().filter(|h| matches!(h.role, Role::SomeTies | Role::EveryTie))
}

//! Top-k selection over indexer scores: tie rules, the needle's rank, and
//! the k-th score.
//!
//! The simulator never materialises the selected set: whether a needle row is
//! selected follows from how many competitors are ahead of it, which is an
//! exact statement about top-k with a total order (score, then tie rule).

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// Order among rows with equal scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TieRule {
    /// The row nearer the start of the context wins.
    LowestIndex,
    /// The row nearer the end of the context wins.
    HighestIndex,
    /// A random priority per row and trial (the default: kernels document no order).
    #[default]
    Random,
}

impl TieRule {
    pub const NAMES: &'static str = "lowest-index, highest-index, random";
}

impl fmt::Display for TieRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TieRule::LowestIndex => "lowest-index",
            TieRule::HighestIndex => "highest-index",
            TieRule::Random => "random",
        })
    }
}

impl FromStr for TieRule {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "lowest-index" => Ok(TieRule::LowestIndex),
            "highest-index" => Ok(TieRule::HighestIndex),
            "random" => Ok(TieRule::Random),
            _ => Err(()),
        }
    }
}

/// The best needle row's rank among competing (non-needle) rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeedleRank {
    /// Competitors scoring strictly higher.
    pub above: u64,
    /// Competitors scoring higher or equal (ties made visible).
    pub above_or_equal: u64,
}

/// Result of one pass over the competitors' scores.
#[derive(Clone, Copy, Debug)]
pub struct CompetitorTally {
    pub rank: NeedleRank,
    /// Mean and standard deviation of the competitors' scores.
    pub mean: f64,
    pub std: f64,
}

/// Counts competitors above / tied with `needle_score` and their spread.
/// `skip` is the needle's row range, which is not a competitor.
pub fn tally(scores: &[f32], skip: std::ops::Range<usize>, needle_score: f32) -> CompetitorTally {
    let (mut above, mut equal) = (0u64, 0u64);
    let (mut sum, mut sum_sq) = (0.0f64, 0.0f64);
    let mut visit = |part: &[f32]| {
        for &s in part {
            above += u64::from(s > needle_score);
            equal += u64::from(s == needle_score);
            let x = f64::from(s);
            sum += x;
            sum_sq += x * x;
        }
    };
    visit(&scores[..skip.start]);
    visit(&scores[skip.end..]);
    let n = (scores.len() - skip.len()) as f64;
    let mean = if n > 0.0 { sum / n } else { 0.0 };
    let var = if n > 1.0 { ((sum_sq - n * mean * mean) / (n - 1.0)).max(0.0) } else { 0.0 };
    CompetitorTally { rank: NeedleRank { above, above_or_equal: above + equal }, mean, std: var.sqrt() }
}

/// Competitors tied with the needle row `needle_row` that the tie rule puts
/// ahead of it. `priority(i)` is the random rule's per-row priority (lower wins).
pub fn tied_ahead(
    scores: &[f32],
    skip: std::ops::Range<usize>,
    needle_row: usize,
    needle_score: f32,
    rule: TieRule,
    priority: impl Fn(usize) -> u64,
) -> u64 {
    let needle_priority = priority(needle_row);
    let mut n = 0;
    for (i, &s) in scores.iter().enumerate() {
        if s != needle_score || skip.contains(&i) {
            continue;
        }
        let ahead = match rule {
            TieRule::LowestIndex => i < needle_row,
            TieRule::HighestIndex => i > needle_row,
            TieRule::Random => (priority(i), i) < (needle_priority, needle_row),
        };
        n += u64::from(ahead);
    }
    n
}

/// A row's place among equal scores as one number: a larger key wins. Rows
/// are then totally ordered by (score, tie key), as a top-k kernel orders them.
pub fn tie_key(rule: TieRule, row: usize, priority: impl Fn(usize) -> u64) -> u64 {
    match rule {
        TieRule::LowestIndex => u64::MAX - row as u64,
        TieRule::HighestIndex => row as u64,
        // Lower priority wins; equal priorities (2^-64 odds) fall back to the index.
        TieRule::Random => u64::MAX - priority(row),
    }
}

#[inline]
fn ahead(a: (f32, u64), b: (f32, u64)) -> Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// The k-th best (score, tie key) of the rows (1 ≤ k ≤ rows): a row is in
/// the top k iff its own pair is at least this one.
pub fn kth_best(scores: &[f32], tie_keys: &[u64], k: usize, rows: &mut Vec<u32>) -> (f32, u64) {
    rows.clear();
    rows.extend(0..scores.len() as u32);
    let key = |i: &u32| (scores[*i as usize], tie_keys[*i as usize]);
    let (_, kth, _) = rows.select_nth_unstable_by(k - 1, |a, b| ahead(key(b), key(a)));
    key(kth)
}

/// Rows selected both by `a` and by `b` (two score vectors over the same
/// rows), each taking its top k under the same tie keys.
pub fn selection_overlap(a: &[f32], b: &[f32], tie_keys: &[u64], k: usize, rows: &mut Vec<u32>) -> u64 {
    if k >= a.len() {
        return a.len() as u64;
    }
    let (ka, kb) = (kth_best(a, tie_keys, k, rows), kth_best(b, tie_keys, k, rows));
    let mut both = 0;
    for i in 0..a.len() {
        let in_a = ahead((a[i], tie_keys[i]), ka).is_ge();
        let in_b = ahead((b[i], tie_keys[i]), kb).is_ge();
        both += u64::from(in_a && in_b);
    }
    both
}

/// Descending total order on scores (NaN above +inf, as `total_cmp` puts it).
#[inline]
fn descending(a: &f32, b: &f32) -> Ordering {
    b.total_cmp(a)
}

/// k-th largest values of `scratch` for several k at once, for k ascending
/// in `ks` (1-based, each ≤ scratch.len()). Reorders `scratch`.
pub fn kth_largest_many(scratch: &mut [f32], ks: &[usize], out: &mut Vec<f32>) {
    out.clear();
    out.resize(ks.len(), f32::NAN);
    // Largest k first: afterwards the top k_max values sit in the prefix, so
    // each smaller k only needs to search that prefix.
    let mut limit = scratch.len();
    for (slot, &k) in ks.iter().enumerate().rev() {
        debug_assert!(k >= 1 && k <= limit);
        let (_, kth, _) = scratch[..limit].select_nth_unstable_by(k - 1, descending);
        out[slot] = *kth;
        limit = k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_strict_and_tied_competitors() {
        let s = [5.0, 1.0, 3.0, 3.0, 9.0, 3.0];
        // Needle occupies row 2 (score 3); competitors: 5, 1, 3, 9, 3.
        let t = tally(&s, 2..3, 3.0);
        assert_eq!(t.rank, NeedleRank { above: 2, above_or_equal: 4 });
        assert!((t.mean - 4.2).abs() < 1e-12);
    }

    #[test]
    fn tie_rules_order_equal_scores() {
        let s = [3.0, 3.0, 3.0, 3.0];
        let none = 0..0;
        assert_eq!(tied_ahead(&s, 2..3, 2, 3.0, TieRule::LowestIndex, |_| 0), 2);
        assert_eq!(tied_ahead(&s, 2..3, 2, 3.0, TieRule::HighestIndex, |_| 0), 1);
        let prio = [9u64, 1, 5, 7];
        assert_eq!(tied_ahead(&s, none, 2, 3.0, TieRule::Random, |i| prio[i]), 1);
    }

    #[test]
    fn kth_largest_many_matches_sorting() {
        let base: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1009) as f32 * 0.5).collect();
        let mut sorted = base.clone();
        sorted.sort_by(descending);
        let ks = [1, 2, 64, 500, 1000];
        let mut scratch = base.clone();
        let mut out = Vec::new();
        kth_largest_many(&mut scratch, &ks, &mut out);
        for (i, &k) in ks.iter().enumerate() {
            assert_eq!(out[i], sorted[k - 1], "k = {k}");
        }
    }

    #[test]
    fn overlap_of_top_k_sets_matches_brute_force() {
        let a: Vec<f32> = (0..200).map(|i| ((i * 37) % 101) as f32).collect(); // many ties
        let b: Vec<f32> = (0..200).map(|i| ((i * 53) % 89) as f32).collect();
        for rule in [TieRule::LowestIndex, TieRule::HighestIndex, TieRule::Random] {
            let keys: Vec<u64> = (0..200).map(|i| tie_key(rule, i, |r| crate::rng::mix64(r as u64))).collect();
            let top = |s: &[f32], k: usize| {
                let mut idx: Vec<usize> = (0..200).collect();
                idx.sort_by(|&x, &y| ahead((s[y], keys[y]), (s[x], keys[x])));
                idx.truncate(k);
                idx
            };
            let mut rows = Vec::new();
            for k in [1, 7, 50, 199, 200, 250] {
                let (ta, tb) = (top(&a, k), top(&b, k));
                let want = ta.iter().filter(|i| tb.contains(i)).count() as u64;
                assert_eq!(selection_overlap(&a, &b, &keys, k, &mut rows), want, "{rule} k={k}");
            }
        }
    }

    #[test]
    fn tie_rule_round_trips_through_text() {
        for r in [TieRule::LowestIndex, TieRule::HighestIndex, TieRule::Random] {
            assert_eq!(r.to_string().parse::<TieRule>(), Ok(r));
        }
    }
}

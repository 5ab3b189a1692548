//! Top-k selection over indexer scores: tie rules, the needle's rank, and
//! the k-th score.
//!
//! The simulator never materialises the selected set: whether a needle row is
//! selected follows from how many competitors are ahead of it, which is an
//! exact statement about top-k with a total order (score, then tie rule).

use crate::error::ConfigError;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// The one rule for a top-k size, whichever command it comes to (`sweep
/// --topk`, `topk=N` in a precision variant, `replay --topk`, Python's
/// `replay(topk=…)`): from 1 to `rows`, the rows the selection picks from
/// (`rows_are` says which). A larger k keeps every row, so every precision
/// would score recall 1 and the comparison would say nothing.
pub fn check_topk(field: &str, value: impl ToString, k: u64, rows: u64, rows_are: &str) -> Result<(), ConfigError> {
    if (1..=rows).contains(&k) {
        return Ok(());
    }
    Err(ConfigError::new(field, value, format!("a top-k from 1 to {rows}, {rows_are}: a larger k selects every row")))
}

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

/// Where NaN scores rank. Every NaN ranks the same whatever its sign bit or
/// payload (the sign of a NaN made by arithmetic differs between x86 and
/// ARM, and results must not); NaNs tie with each other, so the tie rule
/// orders them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum NanOrder {
    /// NaN above every number, +inf included: what `torch.topk`, which the
    /// DeepSeek reference selects with, does (the default; docs/HYPOTHESES.md).
    #[default]
    First,
    /// NaN below every number, −inf included: a kernel comparing with `>`
    /// never lets a NaN displace anything.
    Last,
}

impl NanOrder {
    /// `a` against `b` ("Greater" = ranks higher). Two NaNs are Equal; other
    /// pairs follow `numbers` (which never sees a NaN).
    #[inline]
    pub fn compare(self, a: f32, b: f32, numbers: impl Fn(f32, f32) -> Ordering) -> Ordering {
        match (a.is_nan(), b.is_nan(), self) {
            (false, false, _) => numbers(a, b),
            (true, true, _) => Ordering::Equal,
            (true, false, NanOrder::First) | (false, true, NanOrder::Last) => Ordering::Greater,
            (true, false, NanOrder::Last) | (false, true, NanOrder::First) => Ordering::Less,
        }
    }
}

/// What a precision variant changes about selection, on top of the
/// scenario's settings (hypotheses `topk=N`, `topk-round64`, `window=N`,
/// `ties-*`, `nan-*`; docs/HYPOTHESES.md). The default changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SelectionOverride {
    /// The engine selects this many rows whatever k the sweep configures.
    pub topk: Option<u64>,
    /// The kernel rounds k down to a multiple of this (64 for `topk-round64`).
    pub topk_multiple: Option<u64>,
    /// The raw window the engine keeps, whatever the scenario configures.
    pub window: Option<u64>,
    /// Tie order for this variant instead of the scenario's.
    pub tie_rule: Option<TieRule>,
    pub nan_order: NanOrder,
    /// The selector compares only the top this-many bits of each score's
    /// order key (a coarse histogram bin), so rows of one bin tie and fall
    /// in the tie order (hypothesis `tie-truncate=B`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coarse_bits: Option<u32>,
}

impl SelectionOverride {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The k the engine uses when `configured` is asked for: the override's
    /// k if any, then rounded down to the kernel's multiple (possibly 0:
    /// a kernel that rounds 63 down selects nothing).
    pub fn topk_for(&self, configured: u64) -> u64 {
        let k = self.topk.unwrap_or(configured);
        match self.topk_multiple {
            Some(m) if m > 0 => k / m * m,
            _ => k,
        }
    }

    /// The raw window the engine keeps when `configured` is asked for.
    pub fn window_for(&self, configured: u64) -> u64 {
        self.window.unwrap_or(configured)
    }

    /// The tie rule in force when the scenario says `configured`.
    pub fn tie_rule_for(&self, configured: TieRule) -> TieRule {
        self.tie_rule.unwrap_or(configured)
    }
}

/// `x` at the lower edge of its bin when only the top `bits` (1–32) bits of
/// its order key are kept: the key is the f32 bit pattern with the sign bit
/// set for x ≥ +0 and every bit flipped for x < 0, so keys sort as values;
/// clearing its low bits moves x down to its bin's least value. NaN stays NaN.
pub fn coarse_score(x: f32, bits: u32) -> f32 {
    if x.is_nan() || bits >= 32 {
        return x;
    }
    let b = x.to_bits();
    let key = if b >> 31 == 0 { b | 0x8000_0000 } else { !b };
    let kept = key & !(u32::MAX >> bits.max(1));
    if kept >> 31 == 1 {
        f32::from_bits(kept & 0x7fff_ffff)
    } else {
        // The floor of a negative bin can land on a NaN pattern; -inf is
        // below every finite score, so order and idempotence still hold.
        let y = f32::from_bits(!kept);
        if y.is_nan() {
            f32::NEG_INFINITY
        } else {
            y
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
/// `skip` is the needle's row range, which is not a competitor. NaN scores
/// rank by [`NanOrder::default`]; see [`tally_with`].
pub fn tally(scores: &[f32], skip: std::ops::Range<usize>, needle_score: f32) -> CompetitorTally {
    tally_with(scores, skip, needle_score, NanOrder::default())
}

/// [`tally`] with NaN scores ranked by `nan` (a NaN needle ties with NaN
/// competitors). Numbers compare as `>` / `==` do (−0 ties +0). NaN
/// competitors are left out of the mean and spread.
pub fn tally_with(scores: &[f32], skip: std::ops::Range<usize>, needle_score: f32, nan: NanOrder) -> CompetitorTally {
    let (sum, sum_sq, numbers) = moments(&scores[..skip.start], &scores[skip.end..]);
    let n = numbers as f64;
    let mean = if n > 0.0 { sum / n } else { 0.0 };
    let var = if n > 1.0 { ((sum_sq - n * mean * mean) / (n - 1.0)).max(0.0) } else { 0.0 };
    CompetitorTally { rank: rank_among(scores, skip, needle_score, nan), mean, std: var.sqrt() }
}

/// The sum, sum of squares and count of the numbers (not NaN) in `a` then
/// `b`, in order.
fn moments(a: &[f32], b: &[f32]) -> (f64, f64, u64) {
    let (mut sum, mut sum_sq, mut numbers) = (0.0f64, 0.0f64, 0u64);
    for &s in a.iter().chain(b) {
        if !s.is_nan() {
            let x = f64::from(s);
            sum += x;
            sum_sq += x * x;
            numbers += 1;
        }
    }
    (sum, sum_sq, numbers)
}

/// The needle's rank among the competitors (every row outside `skip`), as
/// [`tally_with`] counts it, without their spread.
pub fn rank_among(scores: &[f32], skip: std::ops::Range<usize>, needle_score: f32, nan: NanOrder) -> NeedleRank {
    let parts = [&scores[..skip.start], &scores[skip.end..]];
    if !needle_score.is_nan() {
        // Branch-free counts (vectorized); NaN competitors are counted
        // apart and, if any, the slow path below orders them.
        let (mut above, mut equal, mut nans) = (0u64, 0u64, 0u64);
        for part in parts {
            for &s in part {
                above += u64::from(s > needle_score);
                equal += u64::from(s == needle_score);
                nans += u64::from(s.is_nan());
            }
        }
        if nans == 0 {
            return NeedleRank { above, above_or_equal: above + equal };
        }
    }
    let (mut above, mut equal) = (0u64, 0u64);
    let by_value = |a: f32, b: f32| a.partial_cmp(&b).unwrap_or(Ordering::Equal);
    let any_nan = needle_score.is_nan();
    for part in parts {
        for &s in part {
            if any_nan || s.is_nan() {
                let o = nan.compare(s, needle_score, by_value);
                above += u64::from(o.is_gt());
                equal += u64::from(o.is_eq());
            } else {
                above += u64::from(s > needle_score);
                equal += u64::from(s == needle_score);
            }
        }
    }
    NeedleRank { above, above_or_equal: above + equal }
}

/// Competitors tied with the needle row `needle_row` that the tie rule puts
/// ahead of it. `priority(i)` is the random rule's per-row priority (lower
/// wins). A NaN needle ties with every NaN competitor (as in [`tally_with`]).
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
    let tied = |s: f32| s == needle_score || (s.is_nan() && needle_score.is_nan());
    for (i, &s) in scores.iter().enumerate() {
        if !tied(s) || skip.contains(&i) {
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

/// Where the best needle row of `scores` stands (rows `needle` hold the
/// needle, every other row is a competitor): best in the engine's order,
/// first on ties. None without a needle row.
pub fn best_needle(scores: &[f32], needle: std::ops::Range<usize>, nan: NanOrder) -> Option<(f32, CompetitorTally)> {
    let best = best_needle_score(&scores[needle.clone()], nan)?;
    Some((best, tally_with(scores, needle, best, nan)))
}

/// [`best_needle`]'s score and rank alone, without the competitors' spread.
pub fn best_needle_rank(scores: &[f32], needle: std::ops::Range<usize>, nan: NanOrder) -> Option<(f32, NeedleRank)> {
    let best = best_needle_score(&scores[needle.clone()], nan)?;
    Some((best, rank_among(scores, needle, best, nan)))
}

/// The highest of the needle rows' scores in the engine's order, the first on ties.
fn best_needle_score(needle_scores: &[f32], nan: NanOrder) -> Option<f32> {
    needle_scores.iter().copied().reduce(|a, b| if nan.compare(b, a, |x, y| x.total_cmp(&y)).is_gt() { b } else { a })
}

/// Tied competitors that `rule` puts ahead of the best needle row (score
/// `best`, rank `t`); if several needle rows tie for best, the luckiest
/// counts. Scans the rows only when a competitor ties the needle, and
/// once under an index rule: the needle's rows are one run, skipped, so
/// every competitor lies before all of them or after all of them and each
/// tied needle row has the same count ahead.
pub fn tied_ahead_of_best(
    scores: &[f32],
    needle: std::ops::Range<usize>,
    best: f32,
    rank: &NeedleRank,
    rule: TieRule,
    priority: impl Fn(usize) -> u64 + Copy,
) -> u64 {
    if rank.above_or_equal == rank.above {
        return 0;
    }
    let mut tied_rows = scores[needle.clone()]
        .iter()
        .enumerate()
        .filter(|(_, &s)| s == best || (s.is_nan() && best.is_nan()))
        .map(|(j, _)| needle.start + j);
    let ahead_of = |row: usize| tied_ahead(scores, needle.clone(), row, best, rule, priority);
    match rule {
        TieRule::LowestIndex | TieRule::HighestIndex => tied_rows.next().map_or(0, ahead_of),
        TieRule::Random => tied_rows.map(ahead_of).min().unwrap_or(0),
    }
}

/// The tie rules the tie audit re-picks each cut under, in `ties.csv`'s
/// column order (docs/MODEL.md, "Tie audit").
pub const AUDIT_RULES: [&str; 4] = ["lowest_index", "highest_index", "random", "truncated"];

/// Bits of each score's order key the audit's `truncated` rule compares:
/// sglang's fused top-k v2 bins by the top 12 bits of the fp16 order key
/// (16 fp16 codes a bin: sign, 5 exponent and 6 mantissa bits), which within
/// fp16's normal range is the f32 key cut to sign, 8 exponent and 6
/// mantissa bits ([`coarse_score`]; docs/MODEL.md, "Tie audit").
pub const TRUNCATE_BITS: u32 = 15;

/// One selection's cut, audited (docs/MODEL.md, "Tie audit").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TieCut {
    /// Rows whose score equals the k-th score, the k-th row included (1: no
    /// tie; 0: no cut, k keeps every row).
    pub tied_rows: u64,
    /// More rows reach the k-th score than k: the tie order picks which of
    /// the tied rows are kept.
    pub split: bool,
    /// The best needle row is among those tied rows and the tie order
    /// decides whether it is kept (outside the raw window).
    pub needle_at_cut: bool,
    /// The needle kept (raw window included) under each of [`AUDIT_RULES`].
    pub kept: [bool; 4],
}

/// The needle's standing once per score vector, for auditing every k:
/// the exact scores under the three index rules, and the coarse bins in
/// arrival (random) order.
pub struct TieAudit<'s> {
    scores: &'s [f32],
    nan: NanOrder,
    /// Per rule of [`AUDIT_RULES`]: competitors strictly ahead plus tied
    /// competitors the rule puts ahead; None without a needle row.
    ahead: [Option<u64>; 4],
    /// The exact scores' rank of the best needle row.
    rank: Option<NeedleRank>,
}

impl<'s> TieAudit<'s> {
    /// The audit of `scores` (the selector's, in its logits format) with the
    /// needle in rows `needle`; `priority` is the random rule's.
    pub fn new(scores: &'s [f32], needle: std::ops::Range<usize>, nan: NanOrder, priority: impl Fn(usize) -> u64 + Copy) -> Self {
        let mut ahead = [None; 4];
        let mut rank = None;
        if let Some((best, t)) = best_needle_rank(scores, needle.clone(), nan) {
            rank = Some(t);
            for (slot, rule) in [TieRule::LowestIndex, TieRule::HighestIndex, TieRule::Random].into_iter().enumerate() {
                ahead[slot] = Some(t.above + tied_ahead_of_best(scores, needle.clone(), best, &t, rule, priority));
            }
            let coarse: Vec<f32> = scores.iter().map(|&x| coarse_score(x, TRUNCATE_BITS)).collect();
            if let Some((best, t)) = best_needle_rank(&coarse, needle.clone(), nan) {
                ahead[3] = Some(t.above + tied_ahead_of_best(&coarse, needle, best, &t, TieRule::Random, priority));
            }
        }
        TieAudit { scores, nan, ahead, rank }
    }

    /// The cut at the top `k` (0 keeps none), with the needle kept anyway
    /// when `in_window`. `scratch` is reused.
    pub fn at(&self, k: usize, in_window: bool, scratch: &mut Vec<f32>) -> TieCut {
        self.cuts(&[k], in_window, scratch, &mut Vec::with_capacity(1))[0]
    }

    /// [`Self::at`] for every k of `ks`, in their order, from one copy of
    /// the scores (`scratch` and `kth` are reused).
    pub fn cuts(&self, ks: &[usize], in_window: bool, scratch: &mut Vec<f32>, kth: &mut Vec<f32>) -> Vec<TieCut> {
        let mut selected: Vec<usize> = ks.iter().copied().filter(|&k| k > 0 && k < self.scores.len()).collect();
        selected.sort_unstable();
        selected.dedup();
        if !selected.is_empty() {
            scratch.clear();
            scratch.extend_from_slice(self.scores);
            kth_largest_many_with(scratch, &selected, kth, self.nan);
        }
        ks.iter()
            .map(|&k| {
                let kept = self.ahead.map(|a| in_window || a.is_some_and(|a| a < k as u64));
                let mut cut = TieCut { tied_rows: 0, split: false, needle_at_cut: false, kept };
                let Ok(i) = selected.binary_search(&k) else { return cut };
                let at_cut = tally_with(self.scores, 0..0, kth[i], self.nan).rank;
                cut.tied_rows = at_cut.above_or_equal - at_cut.above;
                cut.split = at_cut.above_or_equal > k as u64;
                cut.needle_at_cut = !in_window && self.rank.is_some_and(|r| r.above < k as u64 && r.above_or_equal >= k as u64);
                cut
            })
            .collect()
    }
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

/// (score, tie key) pairs in rank order: numbers by `total_cmp` (−0 below
/// +0), NaNs by `nan`, then the tie key.
#[inline]
fn ahead_with(a: (f32, u64), b: (f32, u64), nan: NanOrder) -> Ordering {
    nan.compare(a.0, b.0, |x, y| x.total_cmp(&y)).then(a.1.cmp(&b.1))
}

/// The k-th best (score, tie key) of the rows (1 ≤ k ≤ rows): a row is in
/// the top k iff its own pair is at least this one. NaN ranks by
/// [`NanOrder::default`]; see [`kth_best_with`].
pub fn kth_best(scores: &[f32], tie_keys: &[u64], k: usize, rows: &mut Vec<u32>) -> (f32, u64) {
    kth_best_with(scores, tie_keys, k, rows, NanOrder::default())
}

/// [`kth_best`] with NaN scores ranked by `nan`.
pub fn kth_best_with(scores: &[f32], tie_keys: &[u64], k: usize, rows: &mut Vec<u32>, nan: NanOrder) -> (f32, u64) {
    rows.clear();
    rows.extend(0..scores.len() as u32);
    let key = |i: &u32| (scores[*i as usize], tie_keys[*i as usize]);
    let (_, kth, _) = rows.select_nth_unstable_by(k - 1, |a, b| ahead_with(key(b), key(a), nan));
    key(kth)
}

/// Rows selected both by `a` and by `b` (two score vectors over the same
/// rows), each taking its top k under the same tie keys.
pub fn selection_overlap(a: &[f32], b: &[f32], tie_keys: &[u64], k: usize, rows: &mut Vec<u32>) -> u64 {
    selection_overlap_with(a, b, tie_keys, k, rows, NanOrder::default(), NanOrder::default())
}

/// [`selection_overlap`] where `a` ranks NaN by `nan_a` and `b` by `nan_b`
/// (two variants may order NaN differently).
pub fn selection_overlap_with(
    a: &[f32],
    b: &[f32],
    tie_keys: &[u64],
    k: usize,
    rows: &mut Vec<u32>,
    nan_a: NanOrder,
    nan_b: NanOrder,
) -> u64 {
    if k >= a.len() {
        return a.len() as u64;
    }
    let (ka, kb) = (kth_best_with(a, tie_keys, k, rows, nan_a), kth_best_with(b, tie_keys, k, rows, nan_b));
    let mut both = 0;
    for i in 0..a.len() {
        let in_a = ahead_with((a[i], tie_keys[i]), ka, nan_a).is_ge();
        let in_b = ahead_with((b[i], tie_keys[i]), kb, nan_b).is_ge();
        both += u64::from(in_a && in_b);
    }
    both
}

/// k-th largest values of `scratch` for several k at once, for k ascending
/// in `ks` (1-based, each ≤ scratch.len()). Reorders `scratch`. NaN ranks by
/// [`NanOrder::default`]; see [`kth_largest_many_with`].
pub fn kth_largest_many(scratch: &mut [f32], ks: &[usize], out: &mut Vec<f32>) {
    kth_largest_many_with(scratch, ks, out, NanOrder::default())
}

/// [`kth_largest_many`] with NaN scores ranked by `nan`.
pub fn kth_largest_many_with(scratch: &mut [f32], ks: &[usize], out: &mut Vec<f32>, nan: NanOrder) {
    let descending = |a: &f32, b: &f32| nan.compare(*b, *a, |x, y| x.total_cmp(&y));
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
    fn the_luckiest_tied_needle_row_is_the_scan_over_all_of_them() {
        // Scores from {0, 1, 2, NaN}: ties everywhere, needle rows among them.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..400 {
            let n = 3 + (next() % 40) as usize;
            let scores: Vec<f32> = (0..n).map(|_| [0.0, 1.0, 2.0, f32::NAN][(next() % 4) as usize]).collect();
            let start = (next() as usize) % (n - 1);
            let needle = start..(start + 1 + (next() as usize) % 4).min(n);
            let nan = if next() % 2 == 0 { NanOrder::First } else { NanOrder::Last };
            let Some((best, rank)) = best_needle_rank(&scores, needle.clone(), nan) else { continue };
            let seed = next();
            let priority = move |i: usize| crate::base::rng::mix64(seed ^ i as u64);
            for rule in [TieRule::LowestIndex, TieRule::HighestIndex, TieRule::Random] {
                let every = needle
                    .clone()
                    .filter(|&r| scores[r] == best || (scores[r].is_nan() && best.is_nan()))
                    .map(|r| tied_ahead(&scores, needle.clone(), r, best, rule, priority))
                    .min()
                    .unwrap_or(0);
                let want = if rank.above_or_equal == rank.above { 0 } else { every };
                assert_eq!(
                    tied_ahead_of_best(&scores, needle.clone(), best, &rank, rule, priority),
                    want,
                    "{scores:?} {needle:?} {rule:?}"
                );
            }
        }
    }

    #[test]
    fn coarse_scores_keep_order_and_tie_within_a_bin() {
        let xs = [-3.5f32, -1.0, -0.001, -0.0, 0.0, 1e-30, 0.3, 0.30001, 1.0, 1.0000001, 7.25, f32::INFINITY];
        for bits in [1u32, 8, 12, 16, 24, 31, 32] {
            let c: Vec<f32> = xs.iter().map(|&x| coarse_score(x, bits)).collect();
            for (&x, &y) in xs.iter().zip(&c) {
                assert!(y <= x, "{bits}: {x} -> {y}");
                assert_eq!(coarse_score(y, bits), y, "{bits}: idempotent at {y}");
            }
            assert!(c.windows(2).all(|w| w[0] <= w[1]), "{bits}: order kept {c:?}");
        }
        // 16 bits of the key: sign, exponent and 7 mantissa bits, a bf16 bin.
        assert_eq!(coarse_score(1.0000001, 16), 1.0);
        assert_eq!(coarse_score(0.30001, 16), coarse_score(0.3, 16));
        assert_ne!(coarse_score(0.3, 16), coarse_score(1.0, 16));
        assert_eq!(coarse_score(1.0000001, 32), 1.0000001);
        assert!(coarse_score(f32::NAN, 8).is_nan());
    }

    #[test]
    fn tally_counts_strict_and_tied_competitors() {
        let s = [5.0, 1.0, 3.0, 3.0, 9.0, 3.0];
        // Needle occupies row 2 (score 3); competitors: 5, 1, 3, 9, 3.
        let t = tally(&s, 2..3, 3.0);
        assert_eq!(t.rank, NeedleRank { above: 2, above_or_equal: 4 });
        assert!((t.mean - 4.2).abs() < 1e-12);
    }

    /// The branch-free count gives the ordered count's rank, NaN
    /// competitors, a NaN needle, ±0 and infinities included.
    #[test]
    fn rank_among_counts_as_the_ordered_comparison_does() {
        let by_value = |a: f32, b: f32| a.partial_cmp(&b).unwrap_or(Ordering::Equal);
        let rows = [
            vec![5.0, 1.0, 3.0, 3.0, 9.0, 3.0],
            vec![0.0, -0.0, 2.0, f32::NAN, -1.0, 0.0, f32::INFINITY],
            vec![f32::NAN, f32::NAN, 1.0, f32::NEG_INFINITY, 1.0],
        ];
        for scores in &rows {
            for skip in [0..1, 2..3, 1..3] {
                for nan in [NanOrder::First, NanOrder::Last] {
                    for needle in scores[skip.clone()].iter().copied().chain([0.0, f32::NAN]) {
                        let (mut above, mut equal) = (0, 0);
                        for (_, &s) in scores.iter().enumerate().filter(|(i, _)| !skip.contains(i)) {
                            let o = nan.compare(s, needle, by_value);
                            above += u64::from(o.is_gt());
                            equal += u64::from(o.is_eq());
                        }
                        let want = NeedleRank { above, above_or_equal: above + equal };
                        assert_eq!(rank_among(scores, skip.clone(), needle, nan), want, "{scores:?} {skip:?} {needle} {nan:?}");
                        assert_eq!(tally_with(scores, skip.clone(), needle, nan).rank, want);
                    }
                    let best = best_needle(scores, skip.clone(), nan).map(|(b, t)| (b.to_bits(), t.rank));
                    assert_eq!(best_needle_rank(scores, skip.clone(), nan).map(|(b, r)| (b.to_bits(), r)), best);
                }
            }
        }
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
    fn tie_audit_counts_the_cut_and_repicks_it_under_every_rule() {
        // Row 6 holds the needle; rows 1, 2, 4, 7 tie it at 3.0; k = 3.
        let s = [5.0, 3.0, 3.0, 1.0, 3.0, 0.5, 3.0, 3.0];
        let prio = [9u64, 9, 1, 9, 8, 9, 5, 7];
        let mut scratch = Vec::new();
        let audit = TieAudit::new(&s, 6..7, NanOrder::First, |i| prio[i]);
        let cut = audit.at(3, false, &mut scratch);
        assert_eq!(cut.tied_rows, 5, "rows 1, 2, 4, 6, 7 share the 3rd score");
        assert!(cut.split && cut.needle_at_cut);
        // lowest: rows 1, 2, 4 ahead (1 + 3 ≥ 3, lost); highest: row 7 (1 + 1 < 3);
        // random: row 2 (priority 1 < 5) ahead, kept; truncated: the same bins.
        assert_eq!(cut.kept, [false, true, true, true]);
        assert_eq!(audit.at(3, true, &mut scratch).kept, [true; 4], "the raw window keeps it");
        assert!(!audit.at(3, true, &mut scratch).needle_at_cut);
        // k = 6 takes every row at 3.0: tied, not split, the needle kept.
        let wide = audit.at(6, false, &mut scratch);
        assert_eq!((wide.tied_rows, wide.split, wide.needle_at_cut, wide.kept), (5, false, false, [true; 4]));
        // No cut when k keeps every row; none kept at k = 0.
        assert_eq!(audit.at(8, false, &mut scratch).tied_rows, 0);
        assert_eq!(audit.at(0, false, &mut scratch).kept, [false; 4]);

        // A needle at 3.01 beats the 3.0 rows exactly but shares their
        // 15-bit bin: the truncated rule ties it, and arrival order loses it.
        let mut s2 = s;
        s2[6] = 3.01;
        assert_eq!(coarse_score(3.01, TRUNCATE_BITS), 3.0);
        let prio2 = [9u64, 0, 1, 9, 2, 9, 5, 7];
        let cut = TieAudit::new(&s2, 6..7, NanOrder::First, |i| prio2[i]).at(3, false, &mut scratch);
        assert_eq!((cut.tied_rows, cut.split, cut.needle_at_cut), (4, true, false));
        assert_eq!(cut.kept, [true, true, true, false]);
        // Exact f32-like scores: one row at the cut, no tie.
        let distinct: Vec<f32> = (0..50).map(|i| i as f32 * 0.37).collect();
        let cut = TieAudit::new(&distinct, 10..11, NanOrder::First, |i| i as u64).at(7, false, &mut scratch);
        assert_eq!((cut.tied_rows, cut.split, cut.kept), (1, false, [false; 4]));
    }

    #[test]
    fn kth_largest_many_matches_sorting() {
        let base: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1009) as f32 * 0.5).collect();
        let mut sorted = base.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
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
            let keys: Vec<u64> = (0..200).map(|i| tie_key(rule, i, |r| crate::base::rng::mix64(r as u64))).collect();
            let top = |s: &[f32], k: usize| {
                let mut idx: Vec<usize> = (0..200).collect();
                idx.sort_by(|&x, &y| ahead_with((s[y], keys[y]), (s[x], keys[x]), NanOrder::First));
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
    fn nan_ranks_first_or_last_whatever_its_sign() {
        let neg_nan = f32::from_bits(0xffc0_0000);
        let s = [1.0, f32::NAN, 5.0, neg_nan, f32::INFINITY];
        // Needle (row 0, score 1.0) against NaN, 5, NaN, +inf.
        let first = tally_with(&s, 0..1, 1.0, NanOrder::First);
        assert_eq!(first.rank, NeedleRank { above: 4, above_or_equal: 4 });
        let last = tally_with(&s, 0..1, 1.0, NanOrder::Last);
        assert_eq!(last.rank, NeedleRank { above: 2, above_or_equal: 2 });
        // NaN competitors stay out of the spread.
        assert_eq!(last.mean, f64::INFINITY);
        // A NaN needle ties with both NaN competitors, whatever their signs.
        let t = tally_with(&s, 1..2, neg_nan, NanOrder::First);
        assert_eq!(t.rank, NeedleRank { above: 0, above_or_equal: 1 });
        let t = tally_with(&s, 1..2, f32::NAN, NanOrder::Last);
        assert_eq!(t.rank, NeedleRank { above: 3, above_or_equal: 4 });
        assert_eq!(tied_ahead(&s, 1..2, 1, f32::NAN, TieRule::HighestIndex, |_| 0), 1);
        // The default is First, for tally and the k-th score alike.
        assert_eq!(tally(&s, 0..1, 1.0).rank, first.rank);
        let mut out = Vec::new();
        kth_largest_many(&mut s.to_vec(), &[2, 3], &mut out);
        assert!(out[0].is_nan() && out[1] == f32::INFINITY, "{out:?}");
        kth_largest_many_with(&mut s.to_vec(), &[1, 4], &mut out, NanOrder::Last);
        assert_eq!(out[0], f32::INFINITY);
        assert!(out[1].is_nan());
    }

    #[test]
    fn nan_order_changes_which_rows_are_selected() {
        let a = [f32::NAN, 1.0, 2.0, f32::from_bits(0xffc0_0000)];
        let keys: Vec<u64> = (0..4).map(|i| tie_key(TieRule::LowestIndex, i, |_| 0)).collect();
        let mut rows = Vec::new();
        // Top 2: NaN-first keeps rows 0 and 3, NaN-last rows 2 and 1.
        assert_eq!(selection_overlap_with(&a, &a, &keys, 2, &mut rows, NanOrder::First, NanOrder::Last), 0);
        assert_eq!(selection_overlap_with(&a, &a, &keys, 2, &mut rows, NanOrder::First, NanOrder::First), 2);
        assert_eq!(kth_best_with(&a, &keys, 2, &mut rows, NanOrder::Last), (1.0, u64::MAX - 1));
    }

    #[test]
    fn selection_override_maps_k_and_window() {
        let none = SelectionOverride::default();
        assert_eq!((none.topk_for(512), none.window_for(128)), (512, 128));
        let round = SelectionOverride { topk_multiple: Some(64), ..none };
        assert_eq!((round.topk_for(100), round.topk_for(512), round.topk_for(63)), (64, 512, 0));
        let fixed = SelectionOverride { topk: Some(1000), topk_multiple: Some(64), window: Some(64), ..none };
        assert_eq!((fixed.topk_for(512), fixed.window_for(128)), (960, 64));
        let ties = SelectionOverride { tie_rule: Some(TieRule::HighestIndex), ..none };
        assert_eq!(ties.tie_rule_for(TieRule::Random), TieRule::HighestIndex);
        assert_eq!(none.tie_rule_for(TieRule::Random), TieRule::Random);
    }

    #[test]
    fn tie_rule_round_trips_through_text() {
        for r in [TieRule::LowestIndex, TieRule::HighestIndex, TieRule::Random] {
            assert_eq!(r.to_string().parse::<TieRule>(), Ok(r));
        }
    }
}

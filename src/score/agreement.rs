//! Top-k agreement between two paths that score the same rows (a bf16
//! training path and an fp8 inference path, say): how many of A's rows B
//! also selects, and how much of the rest is only a tie at a cut
//! (docs/MODEL.md, "Top-k agreement").

use crate::score::selection::{kth_best_with, NanOrder};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Two top-k selections of the same rows compared: of A's `k` rows, `both`
/// B selects too and `tied` B leaves out only by the order among equal
/// scores; the rest (`k − both − tied`) are real disagreements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreement {
    /// Rows each selection keeps (k, or every row when k is larger).
    pub k: u64,
    /// Rows A selects that B selects too.
    pub both: u64,
    /// Rows A selects and B does not whose score, in A or in B, equals that
    /// path's k-th score where more rows reach it than the cut keeps: the
    /// tie order alone put the row on its side of that cut.
    pub tied: u64,
}

impl Agreement {
    /// Share of A's top-k that B also selects (1 with nothing selected).
    pub fn share(&self) -> f64 {
        if self.k == 0 {
            return 1.0;
        }
        self.fraction(self.both)
    }

    /// Share of A's top-k that B leaves out only through a tie at a cut.
    pub fn tied_share(&self) -> f64 {
        self.fraction(self.tied)
    }

    /// Share of A's top-k that B leaves out with the scores themselves
    /// ordered otherwise (1 − share − tied share).
    pub fn real_share(&self) -> f64 {
        self.fraction(self.k - self.both - self.tied)
    }

    /// `n` of the k rows as a share (0 with nothing selected).
    fn fraction(&self, n: u64) -> f64 {
        n as f64 / self.k.max(1) as f64
    }
}

/// One path's cut: its k-th score and whether the tie there is split.
struct Cut {
    score: f32,
    nan: NanOrder,
    /// More rows reach the k-th score than the cut keeps.
    split: bool,
}

impl Cut {
    fn of(scores: &[f32], tie_keys: &[u64], k: usize, rows: &mut Vec<u32>, nan: NanOrder) -> (Self, (f32, u64)) {
        let kth = kth_best_with(scores, tie_keys, k, rows, nan);
        let reach = scores.iter().filter(|&&s| nan.compare(s, kth.0, |x, y| x.total_cmp(&y)).is_ge()).count();
        (Cut { score: kth.0, nan, split: reach > k }, kth)
    }

    /// `s` ties this cut and the tie order decides which side it falls on.
    fn ties(&self, s: f32) -> bool {
        self.split && self.nan.compare(s, self.score, |x, y| x.total_cmp(&y)) == Ordering::Equal
    }
}

/// The agreement of A's top-k (scores `a`, NaN ranked by `nan_a`) with B's
/// (`b`, `nan_b`) over the same rows, both ordered among equal scores by
/// the same `tie_keys` (a larger key wins, [`crate::score::selection::tie_key`]).
/// Scores compare as the selection does: by `total_cmp`, NaN by its order.
pub fn agreement(a: &[f32], b: &[f32], tie_keys: &[u64], k: usize, rows: &mut Vec<u32>, nan_a: NanOrder, nan_b: NanOrder) -> Agreement {
    let n = a.len();
    if k >= n {
        return Agreement { k: n as u64, both: n as u64, tied: 0 };
    }
    if k == 0 {
        return Agreement::default();
    }
    let (cut_a, ka) = Cut::of(a, tie_keys, k, rows, nan_a);
    let (cut_b, kb) = Cut::of(b, tie_keys, k, rows, nan_b);
    let ahead =
        |s: f32, key: u64, kth: (f32, u64), nan: NanOrder| nan.compare(s, kth.0, |x, y| x.total_cmp(&y)).then(key.cmp(&kth.1)).is_ge();
    let mut out = Agreement { k: k as u64, both: 0, tied: 0 };
    for i in 0..n {
        if !ahead(a[i], tie_keys[i], ka, nan_a) {
            continue;
        }
        if ahead(b[i], tie_keys[i], kb, nan_b) {
            out.both += 1;
        } else if cut_a.ties(a[i]) || cut_b.ties(b[i]) {
            out.tied += 1;
        }
    }
    out
}

/// `A:B` (one item of `--agreement`) as indices into `names`; a name may
/// hold a colon itself, so every colon is tried as the split.
pub fn parse_pair(item: &str, names: &[&str]) -> Option<(usize, usize)> {
    let find = |n: &str| names.iter().position(|x| *x == n.trim());
    item.match_indices(':').find_map(|(at, _)| Some((find(&item[..at])?, find(&item[at + 1..])?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::selection::{selection_overlap_with, tie_key, TieRule};

    /// Brute force: sort every row, take the top k of each, and classify A's
    /// rows that B misses by counting, per path, the rows at the k-th score.
    fn brute(a: &[f32], b: &[f32], keys: &[u64], k: usize) -> Agreement {
        let n = a.len();
        let order = |s: &[f32]| {
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by(|&x, &y| s[y].total_cmp(&s[x]).then(keys[y].cmp(&keys[x])));
            idx
        };
        let k = k.min(n);
        let (oa, ob) = (order(a), order(b));
        let (top_a, top_b) = (&oa[..k], &ob[..k]);
        let split_tie =
            |s: &[f32], o: &[usize], i: usize| k > 0 && s[i] == s[o[k - 1]] && s.iter().filter(|&&x| x >= s[o[k - 1]]).count() > k;
        let mut out = Agreement { k: k as u64, both: 0, tied: 0 };
        for &i in top_a {
            if top_b.contains(&i) {
                out.both += 1;
            } else if split_tie(a, &oa, i) || split_tie(b, &ob, i) {
                out.tied += 1;
            }
        }
        out
    }

    #[test]
    fn agreement_matches_brute_force_with_ties() {
        let n = 240;
        // Coarse grids: many equal scores, some across the cut.
        let a: Vec<f32> = (0..n).map(|i| ((i * 37) % 31) as f32 * 0.5).collect();
        let b: Vec<f32> = (0..n).map(|i| ((i * 37) % 31) as f32 * 0.5 + if i % 7 == 0 { 0.5 } else { 0.0 }).collect();
        let distinct: Vec<f32> = (0..n).map(|i| ((i * 53) % 241) as f32 * 0.01).collect();
        let mut rows = Vec::new();
        let mut saw = (false, false);
        for rule in [TieRule::LowestIndex, TieRule::HighestIndex, TieRule::Random] {
            let keys: Vec<u64> = (0..n).map(|i| tie_key(rule, i, |r| crate::base::rng::mix64(r as u64))).collect();
            for (x, y) in [(&a, &b), (&b, &a), (&a, &distinct), (&distinct, &b), (&a, &a)] {
                for k in [0, 1, 5, 17, 64, 100, 239, 240, 300] {
                    let got = agreement(x, y, &keys, k, &mut rows, NanOrder::First, NanOrder::First);
                    assert_eq!(got, brute(x, y, &keys, k), "{rule} k={k}");
                    let overlap = selection_overlap_with(x, y, &keys, k.max(1), &mut rows, NanOrder::First, NanOrder::First);
                    if k > 0 {
                        assert_eq!(got.both, overlap, "{rule} k={k}: both is the overlap");
                    }
                    assert!((got.share() + got.tied_share() + got.real_share() - 1.0).abs() < 1e-12);
                    saw.0 |= got.tied > 0;
                    saw.1 |= got.k > got.both + got.tied;
                }
            }
        }
        assert!(saw.0 && saw.1, "the cases hold both tied and real disagreements: {saw:?}");
    }

    #[test]
    fn pairs_parse_at_any_colon() {
        let names = ["fp32", "bf16", "fp8+a:b"];
        assert_eq!(parse_pair("bf16:fp32", &names), Some((1, 0)));
        assert_eq!(parse_pair(" fp8+a:b : bf16", &names), Some((2, 1)));
        assert_eq!(parse_pair("bf16:fp8+a:b", &names), Some((1, 2)));
        assert_eq!(parse_pair("bf16:bf16", &names), Some((1, 1)));
        for bad in ["bf16", "bf16:fp4", ":bf16", "bf16:", ""] {
            assert_eq!(parse_pair(bad, &names), None, "{bad:?}");
        }
    }

    #[test]
    fn a_path_agrees_with_itself_and_a_lone_tie_is_no_choice() {
        let keys: Vec<u64> = (0..6).map(|i| tie_key(TieRule::LowestIndex, i, |_| 0)).collect();
        let mut rows = Vec::new();
        let s = [3.0, 1.0, 3.0, 2.0, 3.0, 0.0];
        let same = agreement(&s, &s, &keys, 2, &mut rows, NanOrder::First, NanOrder::First);
        assert_eq!((same.share(), same.tied_share(), same.real_share()), (1.0, 0.0, 0.0));
        // B's cut at 2.0 (rows 0, 3 kept) leaves out row 2, tied in A at 3.0
        // with row 4: a tie of A's cut.
        let b = [3.0, 1.0, 1.5, 2.0, 1.5, 0.0];
        assert_eq!(agreement(&s, &b, &keys, 2, &mut rows, NanOrder::First, NanOrder::First), Agreement { k: 2, both: 1, tied: 1 });
        // k = 3: B's cut at 1.5 splits rows 2 and 4 (lowest index keeps 2),
        // so B missing row 4 is a tie of B's cut.
        assert_eq!(agreement(&s, &b, &keys, 3, &mut rows, NanOrder::First, NanOrder::First), Agreement { k: 3, both: 2, tied: 1 });
        // A's three 3.0 rows fit whole under its cut at k = 3: no choice, so
        // B (cut at 1.0) missing rows 2 and 4 is real.
        let far = [3.0, 1.0, 0.5, 2.0, 0.4, 0.0];
        assert_eq!(agreement(&s, &far, &keys, 3, &mut rows, NanOrder::First, NanOrder::First), Agreement { k: 3, both: 1, tied: 0 });
        // NaN ranks first in A, last in B: a real disagreement.
        let nan = [f32::NAN, 1.0, 2.0, 0.5, 0.1, 0.0];
        let d = agreement(&nan, &nan, &keys, 1, &mut rows, NanOrder::First, NanOrder::Last);
        assert_eq!(d, Agreement { k: 1, both: 0, tied: 0 });
    }
}

//! The whole-model needle margin of one cell (docs/MODEL.md, "The needle
//! margin"): the cell's trials rerun at multiples of the needle's median
//! exceedance, bracketed and bisected.

use crate::estimate::margin::{Margin, MODEL_MARGIN_BISECTIONS};

/// The whole-model margin of one cell (docs/MODEL.md, "The needle
/// margin"): the largest multiple c of the median exceedance at which the
/// whole-model recall, and its Wilson bounds, stay at or above `threshold`.
/// Each bound is bracketed by doubling or halving from 1 and narrowed by
/// bisection in log c; the recall is taken to fall as c grows.
/// `at_one` and `at_multiple(c)` give (recall, Wilson low, Wilson high).
pub(super) fn model_margin(
    threshold: f64,
    median: f64,
    at_one: (f64, f64, f64),
    at_multiple: &mut impl FnMut(f64) -> (f64, f64, f64),
) -> Margin {
    let cap = 1.0 / median;
    let mut memo: Vec<(f64, (f64, f64, f64))> = vec![(1.0, at_one)];
    let mut eval = |c: f64| -> (f64, f64, f64) {
        if let Some(&(_, e)) = memo.iter().find(|m| m.0 == c) {
            return e;
        }
        let e = at_multiple(c);
        memo.push((c, e));
        e
    };
    let mut largest = |pick: fn((f64, f64, f64)) -> f64| -> f64 {
        let ok = |x: (f64, f64, f64)| pick(x) >= threshold;
        let (mut lo, mut hi);
        if ok(eval(1.0)) {
            (lo, hi) = (1.0, 2.0);
            while hi < cap && ok(eval(hi)) {
                (lo, hi) = (hi, hi * 2.0);
            }
            if hi >= cap {
                if ok(eval(cap)) {
                    return cap;
                }
                hi = cap;
            }
        } else {
            (lo, hi) = (0.5, 1.0);
            while !ok(eval(lo)) {
                if lo < 1e-3 {
                    return 0.0;
                }
                (lo, hi) = (lo / 2.0, lo);
            }
        }
        for _ in 0..MODEL_MARGIN_BISECTIONS {
            let mid = (lo * hi).sqrt();
            if ok(eval(mid)) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let multiple = largest(|x| x.0);
    let low = largest(|x| x.1);
    let high = largest(|x| x.2);
    Margin { multiple, low, high, unbounded: multiple >= cap }
}

//! The reference logits of a pair, recomputed from the captured bytes, their
//! rounding bounds, and the comparison of an engine's selection with them
//! up to ties (docs/TENSORS.md, "What check compares").

use super::capture::{Capture, PairInput, QueryInput, WeightsForm};
use super::layout::{ReadFault, RowReader};
use crate::error::Error;
use crate::numerics::pipeline::{LogitFormat, QuantizedRows, Rotation};
use crate::score::indexer::IndexerQuery;
use serde::Serialize;

/// Rows listed per pair in a report (the counts are complete).
pub const LISTED_ROWS: usize = 16;

/// How far an engine's logit may lie from ours and still count as the
/// same number: none (`--exact`), or the bound of any evaluation order in a
/// floating-point format with `bits` significant bits (24: f32).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tolerance {
    /// None: bit-exact.
    pub bits: Option<u32>,
}

impl Tolerance {
    /// γ_n = n·u / (1 − n·u) with u = 2^-bits, doubled: ours and the
    /// engine's evaluation may each be that far from the exact value.
    pub fn factor(&self, terms: usize) -> f64 {
        match self.bits {
            None => 0.0,
            Some(bits) => {
                let nu = terms as f64 * 2f64.powi(-(bits as i32));
                2.0 * nu / (1.0 - nu).max(1e-9)
            }
        }
    }
}

/// What a transform changes about the scoring (on top of the reader).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScoreChange {
    pub no_relu: bool,
    /// Round the logits to this format instead of the pipeline's.
    pub logits: Option<LogitFormat>,
    /// The engine skipped the query's rotation (a float query only).
    pub query_unrotated: bool,
    /// Logical blocks 2p and 2p + 1 read in each other's place.
    pub pages_swapped: bool,
    /// Physical blocks whose byte offset (block · stride) reaches 2^31 read as zero.
    pub offset_32bit: bool,
    /// Every scale reads zero.
    pub zero_scales: bool,
}

/// The logits of a pair's visible rows and how far another correct
/// evaluation order could move each.
#[derive(Clone, Debug, Default)]
pub struct Scored {
    pub logits: Vec<f32>,
    pub bounds: Vec<f64>,
}

/// The query side ready to score: values [heads × dim] as scored, final
/// head weights.
fn query_side(cap: &Capture, pair: &PairInput, change: &ScoreChange) -> Result<(Vec<f32>, Vec<f32>), Error> {
    let d = cap.layout.dim;
    let scoring = cap.variant.scoring;
    let sim = |e: crate::numerics::format::FormatError| Error::from(crate::SimError::from(e));
    match &pair.q {
        QueryInput::Float(q) => {
            let mut pipeline = cap.variant.query.clone();
            if change.query_unrotated {
                pipeline.rotation = Rotation::None;
            }
            let rows = pipeline.quantize_rows(q, d).map_err(sim)?;
            let weights = IndexerQuery::scaled_head_weights(&pair.weights, &rows.row_scales, d, scoring);
            Ok((rows.values, weights))
        }
        QueryInput::Codes { values, scales, scales_per_head } => {
            let per = d / scales_per_head;
            if *scales_per_head == 1 {
                let weights = match cap.weights_form {
                    // The query's scale is already in the kernel's weights.
                    WeightsForm::Kernel => pair.weights.iter().map(|&w| scoring.weights.round(w)).collect(),
                    WeightsForm::Raw => IndexerQuery::scaled_head_weights(&pair.weights, scales, d, scoring),
                };
                Ok((values.clone(), weights))
            } else {
                let deq: Vec<f32> = values.iter().enumerate().map(|(i, &v)| super::capture::scaled(v, scales[i / per])).collect();
                let ones = vec![1.0; pair.weights.len()];
                let weights = match cap.weights_form {
                    WeightsForm::Kernel => pair.weights.iter().map(|&w| scoring.weights.round(w)).collect(),
                    WeightsForm::Raw => IndexerQuery::scaled_head_weights(&pair.weights, &ones, d, scoring),
                };
                Ok((deq, weights))
            }
        }
    }
}

/// One unit in the last place of `x` in `format` (0 for f32, whose
/// rounding the order bound already covers).
fn ulp(x: f32, format: LogitFormat) -> f64 {
    let a = f64::from(x.abs());
    match format {
        LogitFormat::F32 => 0.0,
        LogitFormat::Bf16 => (a * 2f64.powi(-7)).max(2f64.powi(-133)),
        LogitFormat::F16 => (a * 2f64.powi(-10)).max(2f64.powi(-24)),
    }
}

/// The logits of `pair` read through `fault` with `change`, and their bounds.
/// `strict` refuses bad scales (the declared reading). `keys` is scratch
/// (its buffers are reused; it holds absolute values afterwards).
pub fn score_pair(
    cap: &Capture,
    pair: &PairInput,
    fault: ReadFault,
    change: &ScoreChange,
    tolerance: Tolerance,
    strict: bool,
    keys: &mut QuantizedRows,
) -> Result<Scored, Error> {
    let l = &cap.layout;
    let d = l.dim;
    let reader = RowReader::new(l, fault);
    let remap = |b: usize| if change.pages_swapped { b ^ 1 } else { b };
    let stride = cap.block_stride_bytes;
    let zero = |physical: i64| change.offset_32bit && (physical as u64).saturating_mul(stride) >= 1 << 31;
    cap.gather(pair, &reader, &remap, &zero, strict, keys)?;
    if change.zero_scales {
        keys.row_scales.fill(0.0);
        if !l.one_scale_per_row() {
            let scaled = l.scaled_dim();
            for row in keys.values.chunks_exact_mut(d) {
                row[..scaled].iter_mut().for_each(|v| *v = 0f32.copysign(*v));
            }
        }
    }
    let (q, w) = query_side(cap, pair, change)?;
    let format = change.logits.unwrap_or(cap.variant.scoring.logits);
    let n = pair.seq_len;
    let mut logits = vec![0f32; n];
    if change.no_relu {
        score_signed(&q, &w, d, keys, format, &mut logits);
    } else {
        IndexerQuery::from_head_weights(q.clone(), w.clone(), d, format).score_quantized_rows(keys, &mut logits);
    }
    let bounds = if tolerance.bits.is_none() {
        logits.iter().map(|x| if x.is_finite() { 0.0 } else { f64::INFINITY }).collect()
    } else {
        // T_r = |s_k| · Σ_h |w_h| · Σ_j |q_hj·k_j|: every evaluation order of the
        // logit in f32 lies within γ_n·T_r of the exact value (n = d + H + 4
        // covers the dot, the head sum and the scale multiplications).
        let heads = w.len();
        let abs_q: Vec<f32> = q.iter().map(|x| x.abs()).collect();
        let abs_w: Vec<f32> = w.iter().map(|x| x.abs()).collect();
        // The keys are scratch once scored: take their absolute values in place.
        let signed = keys.row_scales.clone();
        keys.values.iter_mut().for_each(|x| *x = x.abs());
        keys.row_scales.iter_mut().for_each(|x| *x = x.abs());
        let mut terms = vec![0f32; n];
        IndexerQuery::from_head_weights(abs_q, abs_w, d, LogitFormat::F32).score_quantized_rows(keys, &mut terms);
        // The largest |Σ_j q_hj·k_j·s| any association could form, per unit |s|·max|k|.
        let q1 = q.chunks_exact(d).map(|qh| qh.iter().map(|&x| f64::from(x.abs())).sum::<f64>()).fold(0.0, f64::max);
        let factor = tolerance.factor(d + heads + 4);
        let limit = f64::from(f32::MAX) / 16.0;
        keys.values
            .chunks_exact(d)
            .zip(signed.iter())
            .zip(terms.iter().zip(&logits))
            .map(|((k, &signed), (&t, &x))| {
                let s = signed.abs();
                let largest = k.iter().fold(0f32, |a, &b| a.max(b));
                let t = f64::from(t) * (1.0 + 1e-4);
                // A row that is not finite, whose terms could overflow f32 in
                // some order, or whose scale is negative (the ReLU then depends
                // on whether the scale comes before it) could land anywhere:
                // left to the engine.
                if !x.is_finite()
                    || !t.is_finite()
                    || t >= limit
                    || f64::from(s) * f64::from(largest) * q1.max(1.0) >= limit
                    || !(signed >= 0.0)
                {
                    return f64::INFINITY;
                }
                factor * t + ulp(x, format)
            })
            .collect()
    };
    Ok(Scored { logits, bounds })
}

/// Σ_h w_h · (q_h · k) without the ReLU (the `no-relu` fault), in f32.
fn score_signed(q: &[f32], w: &[f32], d: usize, keys: &QuantizedRows, format: LogitFormat, out: &mut [f32]) {
    for ((k, &s), o) in keys.values.chunks_exact(d).zip(&keys.row_scales).zip(out.iter_mut()) {
        let mut acc = 0f32;
        for (qh, &wh) in q.chunks_exact(d).zip(w) {
            let dot: f32 = qh.iter().zip(k).map(|(a, b)| a * b).sum();
            acc += wh * dot;
        }
        *o = format.round(s * acc);
    }
}

/// A logit as a rank: NaN above everything (torch.topk's order), +inf
/// below NaN, then the numbers.
#[inline]
pub fn rank(x: f32) -> f64 {
    if x.is_nan() {
        f64::INFINITY
    } else if x == f32::INFINITY {
        f64::MAX
    } else {
        f64::from(x)
    }
}

/// A row's interval of ranks: an infinite bound leaves the row anywhere.
#[inline]
fn interval(x: f32, b: f64) -> (f64, f64) {
    if b.is_infinite() {
        (f64::NEG_INFINITY, f64::INFINITY)
    } else {
        let r = rank(x);
        (r - b, r + b)
    }
}

/// How an engine's selection compares with a pair's reference.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Comparison {
    /// Equal up to ties: some logits within the bounds make the engine's
    /// selection a top-k (with B = 0: equal as multisets of scores).
    pub equal: bool,
    pub k_eff: usize,
    pub selected: usize,
    /// Reference rows sharing the k-th largest logit exactly (0 when no
    /// other row equals it).
    pub ties_at_cut: usize,
    /// Rows whose interval [L − B, L + B] holds the k-th largest logit.
    pub within_bound_of_cut: usize,
    /// Share of the reference top-k the engine kept, ties at the cut
    /// counted in the engine's favour.
    pub recall: f64,
    /// Selected rows strictly below every unselected row's lowest bound
    /// (first few, ascending).
    pub engine_only: Vec<usize>,
    /// Unselected rows strictly above every selected row's highest bound.
    pub reference_only: Vec<usize>,
    pub engine_only_count: usize,
    pub reference_only_count: usize,
    /// Selected rows the query cannot see (≥ seq_len), and repeats.
    pub invisible: Vec<i64>,
    pub duplicates: usize,
    /// The lowest row where the engine's set and the reference top-k differ
    /// beyond doubt: selected below the cut, or left out above it, by more
    /// than the row's bound (or missing, past seq_len, repeated).
    pub first_row: Option<i64>,
    /// What `first_row` is: `engine-only`, `reference-only`, `invisible` or `repeated`.
    #[serde(skip)]
    pub first_side: Option<&'static str>,
    /// The k-th largest reference logit.
    pub cut: f64,
    /// How the engine broke exact ties at the cut, when it had to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tie_order: Option<&'static str>,
}

/// The rows `selected` marks among `n` (each once), the entries outside
/// 0..n, and how many entries repeat a row.
fn selection_mask(selected: &[i64], n: usize) -> (Vec<bool>, Vec<i64>, usize) {
    let mut in_sel = vec![false; n];
    let mut invisible = Vec::new();
    let mut duplicates = 0;
    for &r in selected {
        if r < 0 || r as usize >= n {
            invisible.push(r);
        } else if in_sel[r as usize] {
            duplicates += 1;
        } else {
            in_sel[r as usize] = true;
        }
    }
    (in_sel, invisible, duplicates)
}

/// The lowest upper bound of a selected row's logit and the highest lower
/// bound of an unselected one: the selection is a top-k when the first is
/// at least the second.
fn selection_extremes(scored: &Scored, in_sel: &[bool]) -> (f64, f64) {
    let (mut sel_min_hi, mut out_max_lo) = (f64::INFINITY, f64::NEG_INFINITY);
    for (r, &selected) in in_sel.iter().enumerate() {
        let (lo, hi) = interval(scored.logits[r], scored.bounds[r]);
        if selected {
            sel_min_hi = sel_min_hi.min(hi);
        } else {
            out_max_lo = out_max_lo.max(lo);
        }
    }
    (sel_min_hi, out_max_lo)
}

/// Which of the rows tied at the cut the engine kept (`sel_at` of them):
/// the lowest-index ones, the highest-index ones, or others.
fn tie_order(logits: &[f32], in_sel: &[bool], cut: f64, sel_at: usize) -> &'static str {
    let tied: Vec<usize> = (0..logits.len()).filter(|&r| rank(logits[r]) == cut).collect();
    let kept: Vec<bool> = tied.iter().map(|&r| in_sel[r]).collect();
    let lowest = kept.iter().take(sel_at).all(|&k| k);
    let highest = kept.iter().rev().take(sel_at).all(|&k| k);
    if lowest {
        "lowest-index"
    } else if highest {
        "highest-index"
    } else {
        "other"
    }
}

/// The lowest row where the sets differ beyond doubt: a selected row whose
/// whole interval lies below the cut, or a left-out one wholly above it.
fn first_beyond_cut(scored: &Scored, in_sel: &[bool], cut: f64) -> Option<(i64, &'static str)> {
    (0..in_sel.len()).find_map(|r| {
        let (lo, hi) = interval(scored.logits[r], scored.bounds[r]);
        if in_sel[r] && hi < cut {
            Some((r as i64, "engine-only"))
        } else if !in_sel[r] && lo > cut {
            Some((r as i64, "reference-only"))
        } else {
            None
        }
    })
}

/// The first entry of `selected` that repeats an earlier one (rows 0..n).
fn first_repeat(selected: &[i64], n: usize) -> Option<i64> {
    let mut seen = vec![false; n];
    selected.iter().copied().find(|&r| r >= 0 && (r as usize) < n && std::mem::replace(&mut seen[r as usize], true))
}

/// Compares `selected` (logical rows) with the top `topk` of `scored`.
pub fn compare(scored: &Scored, selected: &[i64], topk: usize) -> Comparison {
    let (logits, bounds) = (&scored.logits, &scored.bounds);
    let n = logits.len();
    let k_eff = topk.min(n);
    let (in_sel, invisible, duplicates) = selection_mask(selected, n);
    let count = in_sel.iter().filter(|&&s| s).count();
    let (sel_min_hi, out_max_lo) = selection_extremes(scored, &in_sel);
    let mut ranks: Vec<f64> = logits.iter().map(|&x| rank(x)).collect();
    let cut = if k_eff == 0 { f64::INFINITY } else { *ranks.select_nth_unstable_by(k_eff - 1, |a, b| b.total_cmp(a)).1 };
    let (mut ties, mut near, mut above, mut sel_above, mut sel_at) = (0, 0, 0, 0, 0);
    for r in 0..n {
        let x = rank(logits[r]);
        ties += usize::from(x == cut);
        let (lo, hi) = interval(logits[r], bounds[r]);
        near += usize::from(lo <= cut && cut <= hi);
        above += usize::from(x > cut);
        sel_above += usize::from(in_sel[r] && x > cut);
        sel_at += usize::from(in_sel[r] && x == cut);
    }
    // The k-th row always equals itself: a tie needs a second row.
    if ties < 2 {
        ties = 0;
    }
    let recall = if k_eff == 0 { 1.0 } else { (sel_above + sel_at.min(k_eff - above)) as f64 / k_eff as f64 };
    let ordered = sel_min_hi >= out_max_lo;
    let equal = ordered && count == k_eff && invisible.is_empty() && duplicates == 0;
    let mut c = Comparison {
        equal,
        k_eff,
        selected: count,
        ties_at_cut: ties,
        within_bound_of_cut: near,
        recall,
        invisible: invisible.iter().copied().take(LISTED_ROWS).collect(),
        duplicates,
        cut,
        ..Default::default()
    };
    if !equal {
        let mut engine_only: Vec<usize> = Vec::new();
        let mut reference_only: Vec<usize> = Vec::new();
        if !ordered {
            for r in 0..n {
                let (lo, hi) = interval(logits[r], bounds[r]);
                if in_sel[r] && hi < out_max_lo {
                    engine_only.push(r);
                } else if !in_sel[r] && lo > sel_min_hi {
                    reference_only.push(r);
                }
            }
        }
        let mut firsts: Vec<(i64, &'static str)> = first_beyond_cut(scored, &in_sel, cut).into_iter().collect();
        if count < k_eff {
            // Too few rows: the best unselected ones are missing.
            let mut best: Vec<usize> = (0..n).filter(|&r| !in_sel[r]).collect();
            best.sort_by(|&a, &b| rank(logits[b]).total_cmp(&rank(logits[a])).then(a.cmp(&b)));
            best.truncate(k_eff - count);
            firsts.extend(best.iter().min().map(|&r| (r as i64, "reference-only")));
            reference_only.extend(best);
            reference_only.sort_unstable();
            reference_only.dedup();
        }
        firsts.extend(invisible.iter().copied().filter(|&r| r >= 0).min().map(|r| (r, "invisible")));
        if firsts.is_empty() {
            // More rows than k selected: the lists' own first rows.
            firsts.extend(engine_only.first().map(|&r| (r as i64, "engine-only")));
            firsts.extend(reference_only.first().map(|&r| (r as i64, "reference-only")));
        }
        c.engine_only_count = engine_only.len();
        c.reference_only_count = reference_only.len();
        let first = firsts.into_iter().min_by_key(|&(r, _)| r).or_else(|| first_repeat(selected, n).map(|r| (r, "repeated")));
        (c.first_row, c.first_side) = (first.map(|f| f.0), first.map(|f| f.1));
        c.engine_only = engine_only.into_iter().take(LISTED_ROWS).collect();
        c.reference_only = reference_only.into_iter().take(LISTED_ROWS).collect();
    } else if sel_at > 0 && sel_at < ties {
        c.tie_order = Some(tie_order(logits, &in_sel, cut, sel_at));
    }
    c
}

/// How an engine's logits compare with the reference's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LogitsError {
    pub max_abs: f64,
    /// Largest error over its row's bound.
    pub max_over_bound: f64,
    pub beyond: usize,
    pub first_beyond: Option<usize>,
}

/// The engine's logits against the reference: NaN against NaN is no error,
/// NaN against a number infinite; rows with an infinite bound never count.
pub fn logits_error(scored: &Scored, engine: &[f32]) -> LogitsError {
    let mut e = LogitsError::default();
    for (r, ((&ours, &b), &theirs)) in scored.logits.iter().zip(&scored.bounds).zip(engine).enumerate() {
        if b.is_infinite() {
            continue;
        }
        let err = if ours.is_nan() && theirs.is_nan() || ours == theirs {
            0.0
        } else if ours.is_nan() || theirs.is_nan() {
            f64::INFINITY
        } else {
            (f64::from(ours) - f64::from(theirs)).abs()
        };
        e.max_abs = e.max_abs.max(err);
        let ratio = if err == 0.0 {
            0.0
        } else if b > 0.0 {
            err / b
        } else {
            f64::INFINITY
        };
        e.max_over_bound = e.max_over_bound.max(ratio);
        if err > b {
            e.beyond += 1;
            e.first_beyond.get_or_insert(r);
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(logits: &[f32]) -> Scored {
        Scored { logits: logits.to_vec(), bounds: vec![0.0; logits.len()] }
    }

    #[test]
    fn ties_at_the_cut_are_not_a_failure_but_a_strict_swap_is() {
        let s = scored(&[5.0, 3.0, 3.0, 3.0, 1.0]);
        // k = 2: row 0 and any one of the three 3.0 rows.
        for pick in [1, 2, 3] {
            let c = compare(&s, &[0, pick], 2);
            assert!(c.equal && c.ties_at_cut == 3 && c.recall == 1.0, "{c:?}");
        }
        assert_eq!(compare(&s, &[0, 1], 2).tie_order, Some("lowest-index"));
        assert_eq!(compare(&s, &[3, 0], 2).tie_order, Some("highest-index"));
        let c = compare(&s, &[0, 4], 2);
        assert!(!c.equal);
        // Rows 1-3 tie at the cut (either may be the reference's); row 4 is
        // in the engine's set only, for certain: the first divergence.
        assert_eq!((c.engine_only.clone(), c.first_row, c.first_side, c.recall), (vec![4], Some(4), Some("engine-only"), 0.5));
        assert_eq!(c.reference_only, vec![1, 2, 3]);
    }

    #[test]
    fn bounds_forgive_near_ties_only() {
        let mut s = scored(&[5.0, 3.0, 2.999, 1.0]);
        assert!(!compare(&s, &[0, 2], 2).equal);
        s.bounds = vec![0.001; 4];
        let c = compare(&s, &[0, 2], 2);
        assert!(c.equal && c.within_bound_of_cut == 2, "{c:?}");
        assert!(!compare(&s, &[0, 3], 2).equal);
    }

    #[test]
    fn counts_repeats_and_invisible_rows_are_mismatches() {
        let s = scored(&[5.0, 3.0, 1.0]);
        assert!(!compare(&s, &[0], 2).equal);
        assert_eq!(compare(&s, &[0], 2).reference_only, vec![1]);
        let c = compare(&s, &[0, 0], 2);
        assert!(!c.equal && c.duplicates == 1 && c.first_row == Some(1), "{c:?}");
        let c = compare(&s, &[0, 7], 2);
        assert!(!c.equal && c.invisible == vec![7]);
        // Short sequences select everything.
        assert!(compare(&s, &[2, 1, 0], 8).equal);
    }

    #[test]
    fn nan_ranks_first() {
        let s = scored(&[1.0, f32::NAN, 2.0]);
        assert!(compare(&s, &[1], 1).equal);
        assert!(!compare(&s, &[2], 1).equal);
        let e = logits_error(&s, &[1.0, f32::NAN, 2.5]);
        assert_eq!((e.max_abs, e.max_over_bound, e.beyond, e.first_beyond), (0.5, f64::INFINITY, 1, Some(2)));
    }
}

//! A sample of one context's haystack rows at spread-out positions, for the
//! estimators that look at a sample instead of every row (tail sampling and
//! the prediction, when physics makes a row's distribution depend on its
//! position).
//!
//! With RoPE a haystack row's score distribution depends on its distance to
//! the query, so a context's exceedance p(s) is the average over its rows of
//! P(S_i > s). The sample estimates that average with one row in each of M
//! equal slices of the competitor rows (stratified: lower variance than M
//! uniform positions, and still unbiased).

use crate::error::SimError;
use crate::model::haystack::HaystackStructure;
use crate::numerics::pipeline::{LogitFormat, QuantizedRows};
use crate::score::indexer::IndexerQuery;
use crate::score::variant::PrecisionVariant;
use rand::Rng;
use std::ops::Range;

/// Rows scored together.
const CHUNK_ROWS: usize = 256;

/// What the sampling estimators (tail sampling, the prediction) need of the
/// physics, as the alternative named in the error when it is missing.
/// Why a sampling estimator (`who`) cannot serve this haystack structure,
/// with `instead` the setting to name first: rows whose distribution depends
/// on their index (sinks, related blocks) are not the exchangeable draws it
/// samples.
pub fn refuses(structure: &HaystackStructure, instead: &str, who: &str) -> Option<String> {
    structure.depends_on_row_index().then(|| {
        format!(
            "{instead}, or haystack.sink_rows, block_rows and recency_rows 0: {who} draws rows as exchangeable, and sinks, related blocks and recency depend on where a row sits"
        )
    })
}

pub const NEEDS_INDEPENDENT_ROWS: &str =
    "[physics] with independent rows: correlation_length = 0, distractors = 0, and pooling \"on\" without gate noise (or off)";

/// Whether the sampling estimators model a variant: every number format is
/// sampled through the real pipeline, but hypotheses that change how rows
/// are stored together, how they are selected, which rows chunked prefill
/// hides, how RoPE is laid out, or where the needle is placed act on the
/// whole context and are not
/// modelled.
pub fn models_variant(variant: &PrecisionVariant) -> bool {
    variant.changes_only_numbers()
}

/// `m` rows of `0 … candidates − 1` without `skip` (the needle's rows): row
/// j lies uniformly in the j-th of m equal slices of the competitors, so the
/// rows are ascending. Empty when there are no competitors.
pub fn stratified_rows(candidates: u64, skip: Range<u64>, m: usize, rng: &mut impl Rng) -> Vec<u64> {
    let skipped = skip.end.min(candidates).saturating_sub(skip.start.min(candidates));
    let competitors = candidates - skipped;
    if competitors == 0 {
        return Vec::new();
    }
    (0..m)
        .map(|j| {
            let u: f64 = rng.random();
            let at = (((j as f64 + u) / m as f64) * competitors as f64) as u64;
            let at = at.min(competitors - 1);
            if at < skip.start {
                at
            } else {
                at + skipped
            }
        })
        .collect()
}

/// Scores finalized `keys` ([rows × d]) as `variant` stores them (default
/// cache layout: each row's stored key depends on that row alone).
pub fn score_keys(
    variant: &PrecisionVariant,
    query: &IndexerQuery,
    keys: &[f32],
    d: usize,
    quantized: &mut QuantizedRows,
    out: &mut [f32],
) -> Result<(), SimError> {
    let rows = keys.len() / d;
    for start in (0..rows).step_by(CHUNK_ROWS) {
        let n = CHUNK_ROWS.min(rows - start);
        variant.store_keys(&keys[start * d..(start + n) * d], 0, 0, d, quantized)?;
        query.score_quantized_rows(quantized, &mut out[start..start + n]);
    }
    Ok(())
}

/// The scores that round to `s` in logit format `format`: the interval
/// [lo, hi] of exact scores between the midpoints to `s`'s neighbours (a
/// point for f32 logits, which the prediction treats as continuous).
pub fn rounding_interval(format: LogitFormat, s: f64) -> (f64, f64) {
    let mantissa_bits = match format {
        LogitFormat::F32 => return (s, s),
        LogitFormat::Bf16 => 7,
        LogitFormat::F16 => 10,
    };
    if s == 0.0 || !s.is_finite() {
        return (s, s);
    }
    let exponent = s.abs().log2().floor();
    let ulp = (exponent - f64::from(mantissa_bits)).exp2();
    // Below a power of two the spacing halves.
    let ulp_toward_zero = if s.abs() == exponent.exp2() { ulp / 2.0 } else { ulp };
    if s > 0.0 {
        (s - ulp_toward_zero / 2.0, s + ulp / 2.0)
    } else {
        (s - ulp / 2.0, s + ulp_toward_zero / 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stratified_rows_skip_the_needle_and_cover_every_slice() {
        let mut rng = crate::base::rng::stream(7, &[]);
        let rows = stratified_rows(1000, 400..403, 100, &mut rng);
        assert_eq!(rows.len(), 100);
        assert!(rows.windows(2).all(|w| w[0] <= w[1]));
        assert!(rows.iter().all(|&r| r < 1000 && !(400..403).contains(&r)));
        // Row j's competitor index lies in slice j, [j·997/100, (j+1)·997/100), floored.
        for (j, &r) in rows.iter().enumerate() {
            let competitor = (if r < 400 { r } else { r - 3 }) as f64;
            let (lo, hi) = ((j as f64 * 9.97).floor(), (j as f64 + 1.0) * 9.97);
            assert!(competitor >= lo && competitor < hi, "row {r} in slice {j}");
        }
        assert!(stratified_rows(3, 0..3, 10, &mut rng).is_empty());
    }

    #[test]
    fn rounding_interval_brackets_exactly_the_scores_that_round_to_s() {
        for format in [LogitFormat::Bf16, LogitFormat::F16] {
            for &s in &[1.0f32, 1.5, 3.0, -2.0, 0.3, 17.25, -0.75] {
                let s = format.round(s);
                let (lo, hi) = rounding_interval(format, f64::from(s));
                let inside = |x: f64| format.round(x as f32) == s;
                let eps = (hi - lo) * 1e-3;
                assert!(inside(lo + eps) && inside(hi - eps) && inside(f64::from(s)), "{format:?} {s}: [{lo}, {hi}]");
                assert!(!inside(lo - eps) && !inside(hi + eps), "{format:?} {s}: [{lo}, {hi}]");
            }
        }
        assert_eq!(rounding_interval(LogitFormat::F32, 2.5), (2.5, 2.5));
    }
}

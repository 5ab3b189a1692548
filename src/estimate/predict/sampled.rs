//! The prediction where the closed forms of [`crate::estimate::predict`] do not
//! reach: physics that make a row's distribution depend on its position
//! (RoPE, pooling with RMSNorm), and keys or logits in coarse formats.
//!
//! Rows are still independent given the trial's draws, so the needle's fate
//! is the count of haystack rows that beat its best row. Per trial, context
//! and needle offset, and per precision variant:
//!
//! * the **haystack score distribution** is estimated from a sample of
//!   [`HAYSTACK_SAMPLES`] rows at stratified positions (fresh noise, the
//!   real pipeline: pooled, normalised, rotated at the row's position,
//!   quantized, scored): its mean, standard deviation and skewness fix the
//!   shifted-gamma tail [`TailFit`] of the position-averaged exceedance p̄(s);
//! * the **needle score distribution** is sampled: [`NEEDLE_SAMPLES`]
//!   independent redraws of the needle's rows (fresh tokens, same gates,
//!   same positions), each draw's best row scored;
//! * survival per draw is P(Bin(N, p̄(s)) < k_eff), with a coarse logit
//!   format's ties counted through the interval of scores that round to s.
//!
//! The cell's prediction is the mean over the simulation's own trials (same
//! seeds: same query, weights, common direction and gate biases), but no row
//! of the simulation is reused. Where it breaks: docs/MODEL.md, "Analytic
//! prediction".

use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::estimate::predict::closed::{TailFit, NEEDLE_SAMPLES};
use crate::estimate::sample::{rounding_interval, score_keys, stratified_rows};
use crate::estimate::survival::{settled_survival, survival_over_draws, tie_share, SurvivalEstimate};
use crate::model::haystack::TrialHaystack;
use crate::model::row_source::TrialRows;
use crate::numerics::pipeline::QuantizedRows;
use crate::score::trial::TrialSpec;
use crate::score::trial::{shifted_context_queries, shifted_query};

/// Haystack rows sampled per trial, context and needle offset.
pub const HAYSTACK_SAMPLES: usize = 2048;

/// Noise rows of the haystack sample: beyond any context, and apart from
/// the tail sampler's proposal rows (2^40) and the needle redraws (2^44).
const SAMPLE_FIRST_ROW: u64 = 1 << 42;

/// Mean, standard deviation and skewness of `scores`.
fn sample_moments(scores: &[f32]) -> TailFit {
    let n = scores.len().max(1) as f64;
    let mean = scores.iter().map(|&s| f64::from(s)).sum::<f64>() / n;
    let (mut m2, mut m3) = (0.0, 0.0);
    for &s in scores {
        let x = f64::from(s) - mean;
        m2 += x * x;
        m3 += x * x * x;
    }
    let var = m2 / n;
    let sd = var.sqrt();
    let skewness = if sd > 0.0 { m3 / n / (var * sd) } else { 0.0 };
    TailFit { mean, sd, skewness }
}

/// Predictions of one trial per cell index of `spec`, for the variants
/// where `wanted` is true (None elsewhere).
pub fn predict_trial_sampled(spec: &TrialSpec<'_>, trial_seed: u64, wanted: &[bool]) -> Result<Vec<Option<SurvivalEstimate>>, SimError> {
    let d = spec.model.shape.head_dim;
    let mut out = vec![None; spec.cell_count()];
    if !wanted.iter().any(|&w| w) {
        return Ok(out);
    }
    let haystack = TrialHaystack::draw(spec.model, trial_seed)?;
    let mut source = TrialRows::new(spec.model, spec.physics, spec.geometry, &haystack, trial_seed)?;
    let mut keys = vec![0.0f32; HAYSTACK_SAMPLES * d];
    let mut scores = vec![0.0f32; HAYSTACK_SAMPLES];
    let mut quantized = QuantizedRows::with_capacity(256, d);
    // Variants it does not model still get their queries (unused).
    let shifted = shifted_query(spec.model, trial_seed, spec.variants)?;
    for (ci, &context) in spec.contexts.iter().enumerate() {
        let queries = shifted_context_queries(&haystack, shifted.as_ref(), &source, spec.variants, context)?;
        let candidates = spec.geometry.candidate_rows(context);
        for oi in 0..spec.spot_count() {
            let placement = spec.placement(context, oi);
            let needle_rows = (placement.rows.end - placement.rows.start) as usize;
            let competitors = candidates - needle_rows as u64;
            if let Some(probability) = settled_survival(&placement) {
                for ki in 0..spec.topks.len() {
                    for v in (0..spec.variants.len()).filter(|&v| wanted[v]) {
                        out[spec.cell_index(ci, oi, ki, v)] = Some(SurvivalEstimate { probability, variance: 0.0 });
                    }
                }
                continue;
            }
            let mut rng = rng::stream(trial_seed, &[tag::PREDICT, ci as u64, oi as u64]);
            let rows = stratified_rows(candidates, placement.rows.clone(), HAYSTACK_SAMPLES, &mut rng);
            for (j, &row) in rows.iter().enumerate() {
                source.sampled_haystack_row(row, SAMPLE_FIRST_ROW + j as u64, &[], false, &mut keys[j * d..(j + 1) * d]);
            }
            source.finalize_at(&mut keys[..rows.len() * d], &rows)?;
            let items = source.items(context, placement.tokens.clone());
            // Redraw j's rows are rows j·R … j·R + R − 1, positioned like the needle's.
            let mut needle_keys = vec![0.0f32; NEEDLE_SAMPLES * needle_rows * d];
            let mut needle_positions = Vec::with_capacity(NEEDLE_SAMPLES * needle_rows);
            for (j, draw) in needle_keys.chunks_exact_mut(needle_rows * d).enumerate() {
                for (i, row) in placement.rows.clone().enumerate() {
                    source.sampled_special_row(row, &items, Some(j as u64), &mut draw[i * d..(i + 1) * d])?;
                    needle_positions.push(row);
                }
            }
            source.finalize_at(&mut needle_keys, &needle_positions)?;
            let mut needle_scores = vec![0.0f32; NEEDLE_SAMPLES * needle_rows];
            let share = tie_share(spec.tie_rule, placement.rows.start, competitors);
            for (v, variant) in spec.variants.iter().enumerate().filter(|&(v, _)| wanted[v]) {
                score_keys(variant, &queries[v], &keys[..rows.len() * d], d, &mut quantized, &mut scores[..rows.len()])?;
                let tail = sample_moments(&scores[..rows.len()]);
                score_keys(variant, &queries[v], &needle_keys, d, &mut quantized, &mut needle_scores)?;
                // Per draw: the best row's survival given the haystack tail.
                let exceedance = |s: f32| {
                    let (lo, hi) = rounding_interval(variant.scoring.logits, f64::from(s));
                    let (above, at_or_above) = (tail.exceedance(hi), tail.exceedance(lo));
                    above + share * (at_or_above - above)
                };
                // Each redraw's best row, and the share of haystack rows ahead of it.
                let ahead: Vec<f64> = needle_scores
                    .chunks_exact(needle_rows)
                    .map(|draw| exceedance(draw.iter().copied().fold(f32::NEG_INFINITY, f32::max)).clamp(0.0, 1.0))
                    .collect();
                for (ki, &k) in spec.topks.iter().enumerate() {
                    out[spec.cell_index(ci, oi, ki, v)] = Some(survival_over_draws(&ahead, competitors, k.min(candidates)));
                }
            }
        }
    }
    Ok(out)
}

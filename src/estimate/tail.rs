//! Tail sampling: a cell's recall from a sample of rows per trial instead of
//! every row of the context.
//!
//! Haystack rows are iid given the trial, so the needle's fate depends only
//! on how many of the N competitors beat its best row s*: Binomial(N, p(s*)),
//! p(s) = P(S > s | trial). Per trial and precision variant we draw M rows,
//! half from the haystack distribution and half from a proposal shifted
//! toward high scores (z → z + θ in the keys' noise), quantize and score them
//! exactly as the full simulation does, and estimate p(s*) by importance
//! sampling with the balance-heuristic weights of the 50/50 mixture,
//! w = f/(½f + ½g) ≤ 2. The needle rows themselves are the real ones.
//! Survival P(Bin(N, p̂) < k_eff) is corrected to second order for the noise
//! in p̂, and the cell's interval comes from the spread of the per-trial
//! survival probabilities, which contains that noise (it is independent
//! across trials). Formulas and limits: docs/MODEL.md, "Tail sampling".

use crate::base::rng::{self, tag};
use crate::base::stats::mean_interval;
use crate::error::SimError;
use crate::estimate::estimator::{CellEstimate, Estimator};
use crate::estimate::sample::{models_variant, score_keys, stratified_rows, NEEDS_INDEPENDENT_ROWS};
use crate::estimate::survival::{settled_survival, survival_with_noisy_p, tie_share, Exceedance};
use crate::estimate::{grid, stack};
use crate::model::haystack::TrialHaystack;
use crate::model::needle::NeedleUnit;
use crate::model::physics::Physics;
use crate::model::row_source::TrialRows;
use crate::numerics::pipeline::QuantizedRows;
use crate::score::indexer::IndexerQuery;
use crate::score::trial::context_queries;
use crate::score::trial::TrialSpec;
use crate::score::variant::PrecisionVariant;

/// Rows scored together (as in the full simulation's chunks).
const CHUNK_ROWS: usize = 256;

/// First row index of the proposal draws: far beyond any context, so they
/// are independent of the haystack rows 0 … M/2 − 1 drawn alongside.
const PROPOSAL_FIRST_ROW: u64 = 1 << 40;

/// Norm of the tilt θ when the needle has no offset to tilt along.
const FALLBACK_TILT: f64 = 2.0;

/// The weighted sample of one trial and variant, sorted by descending score,
/// with running sums of the weights and squared weights.
#[derive(Clone, Debug, Default)]
pub struct TailSample {
    scores: Vec<f32>,
    cum_weight: Vec<f64>,
    cum_weight_sq: Vec<f64>,
}

impl TailSample {
    /// `scores[i]` with importance weight `weights[i]` (f/q of the sampling density).
    pub fn new(scores: &[f32], weights: &[f64]) -> Self {
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        let mut out = TailSample::default();
        let (mut w, mut w2) = (0.0, 0.0);
        for i in order {
            w += weights[i];
            w2 += weights[i] * weights[i];
            out.scores.push(scores[i]);
            out.cum_weight.push(w);
            out.cum_weight_sq.push(w2);
        }
        out
    }

    fn sums_above(&self, count: usize) -> (f64, f64) {
        if count == 0 {
            (0.0, 0.0)
        } else {
            (self.cum_weight[count - 1], self.cum_weight_sq[count - 1])
        }
    }

    /// P(S > s) + tie_share·P(S = s): the chance a haystack row is ahead of
    /// a needle row scoring `s` when a tied row is ahead with probability
    /// `tie_share`.
    pub fn exceedance(&self, s: f32, tie_share: f64) -> Exceedance {
        let m = self.scores.len() as f64;
        if m == 0.0 {
            return Exceedance { p: 0.0, se: 0.0 };
        }
        // scores are descending: rows strictly above, then rows equal.
        let above = self.scores.partition_point(|&x| x > s);
        let at_or_above = self.scores.partition_point(|&x| x >= s);
        let (w_gt, w2_gt) = self.sums_above(above);
        let (w_ge, w2_ge) = self.sums_above(at_or_above);
        let w = w_gt + tie_share * (w_ge - w_gt);
        let w2 = w2_gt + tie_share * tie_share * (w2_ge - w2_gt);
        let p = w / m;
        let var = (w2 / m - p * p).max(0.0) / m;
        Exceedance { p: p.clamp(0.0, 1.0), se: var.sqrt() }
    }
}

/// The tilt θ in the keys' standardized noise z (k = c + σ⊙z): the needle's
/// own offset, θ = δ/σ, so proposal rows score like needle rows, which is
/// where p(s*) is needed; with no needle offset, the direction that raises
/// the positively weighted heads' dot products, with norm [`FALLBACK_TILT`].
pub(super) fn tilt(haystack: &TrialHaystack) -> Vec<f64> {
    let sigma = haystack.channel_std();
    let delta = haystack.needle_offset();
    let theta: Vec<f64> = delta.iter().zip(sigma).map(|(&dv, &s)| f64::from(dv) / f64::from(s)).collect();
    if theta.iter().any(|&t| t != 0.0) {
        return theta;
    }
    let d = sigma.len();
    let mut g = vec![0.0f64; d];
    for (h, &w) in haystack.weights.iter().enumerate() {
        if w > 0.0 {
            for j in 0..d {
                g[j] += f64::from(w) * f64::from(haystack.queries[h * d + j]) * f64::from(sigma[j]);
            }
        }
    }
    let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm == 0.0 {
        return g;
    }
    g.iter().map(|x| x * FALLBACK_TILT / norm).collect()
}

/// One trial's survival probability per cell index of `spec`.
pub fn tail_trial(spec: &TrialSpec<'_>, trial_seed: u64, tail_rows: u64) -> Result<Vec<f64>, SimError> {
    if spec.is_null_model() {
        tail_trial_null(spec, trial_seed, tail_rows)
    } else {
        tail_trial_positional(spec, trial_seed, tail_rows)
    }
}

/// Under physics (RoPE, pooling through the exact shortcut) rows are still
/// independent given the trial, but a row's distribution depends on its
/// position: per context (its query sits at the context's end) and needle
/// offset, M/2 positions spread over the competitors
/// ([`stratified_rows`]) each get one haystack draw and one proposal draw
/// (noise z + θ), finalized at that position; p̄(s*) = (1/N) Σ_i P(S_i > s*)
/// is estimated with the same balance-heuristic weights, and the count of
/// rows above the needle is taken as Binomial(N, p̄) (docs/MODEL.md,
/// "Tail sampling", says what that neglects). The needle rows are the
/// trial's own, bit for bit.
fn tail_trial_positional(spec: &TrialSpec<'_>, trial_seed: u64, tail_rows: u64) -> Result<Vec<f64>, SimError> {
    let d = spec.model.shape.head_dim;
    let haystack = TrialHaystack::draw(spec.model, trial_seed)?;
    let mut source = TrialRows::new(spec.model, spec.physics, spec.geometry, &haystack, trial_seed)?;
    let half = (tail_rows / 2) as usize;
    let theta = tilt(&haystack);
    let mut out = vec![0.0; spec.cell_count()];
    let mut keys = vec![0.0f32; 2 * half * d];
    let mut weights = vec![0.0f64; 2 * half];
    let mut scores = vec![0.0f32; 2 * half];
    let mut quantized = QuantizedRows::with_capacity(CHUNK_ROWS, d);
    for (ci, &context) in spec.contexts.iter().enumerate() {
        let queries = context_queries(&haystack, &source, spec.variants, context)?;
        let candidates = spec.geometry.candidate_rows(context);
        for oi in 0..spec.spot_count() {
            let placement = spec.placement(context, oi);
            let needle_rows = placement.rows.end - placement.rows.start;
            let competitors = candidates - needle_rows;
            if let Some(value) = settled_survival(&placement) {
                for ki in 0..spec.topks.len() {
                    for v in 0..spec.variants.len() {
                        out[spec.cell_index(ci, oi, ki, v)] = value;
                    }
                }
                continue;
            }
            positional_sample(&source, &theta, (trial_seed, ci, oi), (candidates, placement.rows.clone()), &mut keys, &mut weights)?;
            let items = source.items(context, placement.tokens.clone());
            let needle: Vec<u64> = placement.rows.clone().collect();
            let mut needle_keys = vec![0.0f32; needle.len() * d];
            for (&row, key) in needle.iter().zip(needle_keys.chunks_exact_mut(d)) {
                source.sampled_special_row(row, &items, None, key)?;
            }
            source.finalize_at(&mut needle_keys, &needle)?;
            let mut needle_scores = vec![0.0f32; needle.len()];
            let share = tie_share(spec.tie_rule, placement.rows.start, competitors);
            for (v, variant) in spec.variants.iter().enumerate() {
                score_keys(variant, &queries[v], &needle_keys, d, &mut quantized, &mut needle_scores)?;
                let best = needle_scores.iter().copied().fold(f32::NEG_INFINITY, |a, b| if b.total_cmp(&a).is_gt() { b } else { a });
                score_keys(variant, &queries[v], &keys, d, &mut quantized, &mut scores)?;
                let sample = TailSample::new(&scores, &weights);
                let e = sample.exceedance(best, share);
                for (ki, &k) in spec.topks.iter().enumerate() {
                    out[spec.cell_index(ci, oi, ki, v)] = survival_with_noisy_p(competitors, k.min(candidates), e);
                }
            }
        }
    }
    Ok(out)
}

/// The weighted sample of one context and needle spot under physics:
/// `weights.len()` / 2 positions spread over the competitors (the rows
/// below `candidates` outside `needle`), each with one haystack draw (the
/// first half of `keys`) and one proposal draw z + θ (the second half),
/// finalized at that position, and each row's balance-heuristic weight.
pub(super) fn positional_sample(
    source: &TrialRows<'_>,
    theta: &[f64],
    (trial_seed, ci, oi): (u64, usize, usize),
    (candidates, needle): (u64, std::ops::Range<u64>),
    keys: &mut [f32],
    weights: &mut [f64],
) -> Result<(), SimError> {
    let half = weights.len() / 2;
    let d = keys.len() / weights.len().max(1);
    let theta_sq: f64 = theta.iter().map(|t| t * t).sum();
    let mut rng = rng::stream(trial_seed, &[tag::TAIL, ci as u64, oi as u64]);
    let rows = stratified_rows(candidates, needle, half, &mut rng);
    for (j, &row) in rows.iter().enumerate() {
        for (slot, shifted) in [(j, false), (half + j, true)] {
            let tz =
                source.sampled_haystack_row(row, PROPOSAL_FIRST_ROW + slot as u64, theta, shifted, &mut keys[slot * d..(slot + 1) * d]);
            weights[slot] = 1.0 / (0.5 + 0.5 * (tz - 0.5 * theta_sq).exp());
        }
    }
    source.finalize_at(&mut keys[..half * d], &rows)?;
    source.finalize_at(&mut keys[half * d..], &rows)?;
    Ok(())
}

/// The null model's tail sample: M/2 haystack rows, then M/2 proposal
/// rows z + θ, with each row's importance weight.
fn null_sample_rows(haystack: &TrialHaystack, tail_rows: u64, d: usize) -> (Vec<f32>, Vec<f64>) {
    let half = (tail_rows / 2) as usize;
    let rows = 2 * half;
    let theta = tilt(haystack);
    let theta_sq: f64 = theta.iter().map(|t| t * t).sum();
    let shift: Vec<f32> = theta.iter().zip(haystack.channel_std()).map(|(&t, &s)| (t * f64::from(s)) as f32).collect();
    let (common, sigma) = (haystack.common(), haystack.channel_std());
    let mut keys = vec![0.0f32; rows * d];
    haystack.fill_haystack_rows(0, &mut keys[..half * d]);
    haystack.fill_haystack_rows(PROPOSAL_FIRST_ROW, &mut keys[half * d..]);
    for key in keys[half * d..].chunks_exact_mut(d) {
        for (k, &s) in key.iter_mut().zip(&shift) {
            *k += s;
        }
    }
    // Balance-heuristic weight f/(½f + ½g), g/f = exp(θ·z − |θ|²/2) at the
    // row's standardized noise z = (k − c)/σ.
    let weights: Vec<f64> = keys
        .chunks_exact(d)
        .map(|key| {
            let tz: f64 = (0..d).map(|j| theta[j] * (f64::from(key[j]) - f64::from(common[j])) / f64::from(sigma[j])).sum();
            1.0 / (0.5 + 0.5 * (tz - 0.5 * theta_sq).exp())
        })
        .collect();
    (keys, weights)
}

/// [`tail_trial`] for the null model: no position, one query for every
/// context, and the sample's haystack half is the trial's own first rows.
fn tail_trial_null(spec: &TrialSpec<'_>, trial_seed: u64, tail_rows: u64) -> Result<Vec<f64>, SimError> {
    let d = spec.model.shape.head_dim;
    let haystack = TrialHaystack::draw(spec.model, trial_seed)?;
    let queries: Vec<IndexerQuery> = spec
        .variants
        .iter()
        .map(|v| {
            let q = v.query.quantize_rows(&haystack.queries, d)?;
            Ok(IndexerQuery::new(q, &haystack.weights, d, v.scoring))
        })
        .collect::<Result<_, SimError>>()?;

    let (keys, weights) = null_sample_rows(&haystack, tail_rows, d);
    let rows = weights.len();

    let mut samples = Vec::with_capacity(spec.variants.len());
    let mut scores = vec![0.0f32; rows];
    let mut quantized = QuantizedRows::with_capacity(CHUNK_ROWS, d);
    for (v, variant) in spec.variants.iter().enumerate() {
        for start in (0..rows).step_by(CHUNK_ROWS) {
            let n = CHUNK_ROWS.min(rows - start);
            let chunk = &keys[start * d..(start + n) * d];
            let out = &mut scores[start..start + n];
            if variant.key.is_identity() {
                queries[v].score_rows(chunk, out);
            } else {
                variant.key.quantize_rows_into(chunk, d, &mut quantized)?;
                queries[v].score_quantized_rows(&quantized, out);
            }
        }
        samples.push(TailSample::new(&scores, &weights));
    }

    let mut out = vec![0.0; spec.cell_count()];
    let mut key = vec![0.0f32; d];
    let mut quantized_key = QuantizedRows::with_capacity(1, d);
    for (ci, &context) in spec.contexts.iter().enumerate() {
        let placement = spec.placement(context, 0);
        let candidates = spec.geometry.candidate_rows(context);
        let needle_rows = placement.rows.end - placement.rows.start;
        let competitors = candidates - needle_rows;
        let tie_share = tie_share(spec.tie_rule, placement.rows.start, competitors);
        let mut best = vec![f32::NEG_INFINITY; spec.variants.len()];
        for row in placement.rows.clone() {
            haystack.fill_needle_row(row, &mut key);
            for (v, variant) in spec.variants.iter().enumerate() {
                variant.key.quantize_rows_into(&key, d, &mut quantized_key)?;
                let s = queries[v].score_one_scaled(&quantized_key.values, quantized_key.row_scales[0]);
                if s.total_cmp(&best[v]).is_gt() {
                    best[v] = s;
                }
            }
        }
        for (ki, &k) in spec.topks.iter().enumerate() {
            let k_eff = k.min(candidates);
            for v in 0..spec.variants.len() {
                out[spec.cell_index(ci, 0, ki, v)] = settled_survival(&placement)
                    .unwrap_or_else(|| survival_with_noisy_p(competitors, k_eff, samples[v].exceedance(best[v], tie_share)));
            }
        }
    }
    Ok(out)
}

/// The tail-sampling estimator: `rows` rows drawn per trial and variant.
/// Recall is the mean over trials of the survival probability, its interval
/// the normal 95 % interval of that mean (clamped to [0, 1]). Rank, margin
/// and fidelity are absent: the rows they need are not generated.
#[derive(Clone, Copy, Debug)]
pub struct Tail {
    pub rows: u64,
}

impl Estimator for Tail {
    const NAME: &'static str = "tail";
    /// The trial's seed and each cell's survival probability.
    type Trial = (u64, Vec<f64>);
    type Cell = CellEstimate;

    fn trial(&self, spec: &TrialSpec<'_>, trial_seed: u64) -> Result<(u64, Vec<f64>), SimError> {
        if let Some(why) = refuses_needle(&spec.model.needle_unit) {
            return Err(SimError::Model(format!("tail sampling: {why}")));
        }
        Ok((trial_seed, tail_trial(spec, trial_seed, self.rows)?))
    }

    fn cells(&self, spec: &TrialSpec<'_>, seeded: &[(u64, Vec<f64>)]) -> Vec<CellEstimate> {
        let mut whole_model = spec.stack.map(|w| stack::whole_model_sampled(spec, w, seeded));
        let per_trial: Vec<&Vec<f64>> = seeded.iter().map(|(_, p)| p).collect();
        let trials = per_trial.len() as u64;
        let model_recall: Option<Vec<f64>> = whole_model.as_ref().map(|w| w.iter().map(|e| e.recall).collect());
        let mean = |i: usize| per_trial.iter().map(|t| t[i]).sum::<f64>() / trials.max(1) as f64;
        grid::cells(spec)
            .map(|g| {
                let i = g.index;
                let (sum, sum_sq) = per_trial.iter().fold((0.0, 0.0), |(a, b), t| (a + t[i], b + t[i] * t[i]));
                let (recall, low, high) = mean_interval(sum, sum_sq, trials).unwrap_or((0.0, 0.0, 1.0));
                let base = g.baseline_index;
                let base_recall = mean(base);
                // Paired with the smallest k: the difference of the means over the same trials.
                let k_baseline = g.k_baseline_index(spec);
                CellEstimate {
                    trials,
                    survived: sum.round() as u64,
                    recall,
                    ci_low: low.max(0.0),
                    ci_high: high.min(1.0),
                    survived_via_window: if g.placement.in_window { trials } else { 0 },
                    recall_diff: (!g.is_baseline()).then_some(recall - base_recall),
                    k_recall_diff: k_baseline.map(|b| recall - mean(b)),
                    k_model_recall_diff: k_baseline.and_then(|b| model_recall.as_ref().map(|m| m[i] - m[b])),
                    whole_model: whole_model.as_mut().map(|w| std::mem::take(&mut w[g.index])),
                    ..CellEstimate::default()
                }
            })
            .collect()
    }
}

/// Tail sampling estimates the needle's exceedance from a sample of rows;
/// the quantile needle's is drawn instead and placed with every row's exact
/// score, which a sample does not have (not implemented).
pub fn refuses_needle(needle: &NeedleUnit) -> Option<String> {
    (!needle.is_strength()).then(|| {
        "full, or needle.unit = \"strength\" (--needle-profile stress): tail sampling estimates the needle's exceedance from a sample, and the quantile needle is placed with every row's exact score; --predict on gives the quantile needle's exact-reference recall without simulating rows".to_string()
    })
}

/// Why tail sampling cannot serve this physics (at row stride `ratio`) and
/// these variants: the alternative to name in the error, or None.
pub fn refuses(physics: &Physics, ratio: u64, variants: &[PrecisionVariant]) -> Option<String> {
    if !physics.rows_are_independent(ratio) {
        return Some(format!("full, or {NEEDS_INDEPENDENT_ROWS}: tail sampling counts rows as independent draws"));
    }
    // Position hypotheses (RoPE layout swapped on one side) matter now that
    // tail sampling runs with RoPE on; it does not model them either.
    let v = variants.iter().find(|v| !models_variant(v))?;
    Some(format!("full with hypothesis variant {:?}: tail sampling stores rows one at a time", v.name))
}

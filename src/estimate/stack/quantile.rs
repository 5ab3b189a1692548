//! Whole-model recall under the quantile needle (docs/MODEL.md, "The whole
//! model under the quantile needle").
//!
//! Every indexer layer ℓ and query token t of a trial has its own needle
//! exceedance u_ℓt (the prompt's draw, the layer's, the token's); the
//! simulated layer and query are (0, 0). In the exact reference a layer
//! keeps the needle when its rank, Binomial(N, u_ℓt) plus the fixed rows
//! above it, is below k_eff: the survival model of the simulated layer,
//! exact in fp32, evaluated without simulating the layer. What a variant
//! does beyond the reference is read from the simulated layer: the share of
//! trials it keeps among those the reference keeps (q₁) and among those the
//! reference loses (q₀). Its own randomness is a latent f per (layer,
//! token) on AR(1) chains, pinned at (0, 0) by the simulated outcome, and a
//! layer keeps the needle when f > Φ⁻¹(1 − q) for the reference's outcome
//! there.

use super::shared::{correlation_for_overlap, StackEstimate};
use crate::base::rng::{self, tag};
use crate::base::special::normal_quantile;
use crate::base::stats::{mean_interval, quantiles, wilson_interval, Z95};
use crate::model::needle::{exceedance_of, open_uniform, ranks_below, QuantileNeedle};
use crate::model::stack::CandidateStage;
use crate::model::stack::{FaultSpread, WholeModel};
use crate::score::hypothesis::{candidate_class, variant_spread, FaultClass};
use crate::score::trial::{TrialOutcome, TrialSpec};
use crate::score::variant::LayerSubset;
use rand::Rng;
use rand_distr::StandardNormal;

/// Adjacent-layer top-k overlaps measured at the two ends (docs/MODEL.md,
/// "The band"): ~0.38 on V4-Flash prefill (vllm PR #41834) and up to 1.0
/// (THUDM IndexCache README), read at a top share of 1/16.
pub const OVERLAP_ENDS: (f64, f64) = (0.38, 1.0);
const OVERLAP_SHARE: f64 = 1.0 / 16.0;

/// How the spread of log10 u over prompts and layers is shared between layers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Split {
    /// The profile's: τ_p shared by every layer, τ_l each layer's own.
    Profile,
    /// Both shared: every layer repeats the simulated layer's difficulty.
    Shared,
    /// Both each layer's own: only the token part is left to the query.
    Independent,
}

/// One trial's needle draws for every layer and token: u_ℓt under each split.
struct TrialNeedle {
    /// [split][ℓ · T + t]
    exceedance: [Vec<f64>; 3],
    /// Uniform that inverts the rank's binomial, per (ℓ, t).
    uniform: Vec<f64>,
}

impl TrialNeedle {
    fn draw(q: &QuantileNeedle, seed: u64, layers: usize, tokens: usize) -> Self {
        let own = q.draw(seed);
        let mut rng = rng::stream(seed, &[tag::NEEDLE, tag::STACK]);
        let layer: Vec<f64> = (0..layers).map(|l| if l == 0 { own.layer } else { rng.sample(StandardNormal) }).collect();
        let mut token = vec![own.token; layers * tokens];
        let mut uniform = vec![own.rank_uniform; layers * tokens];
        for i in 1..layers * tokens {
            token[i] = rng.sample(StandardNormal);
            uniform[i] = open_uniform(rng.random::<u64>());
        }
        // The prompt and layer parts merged, as the simulated layer drew them.
        let shared_sd = (q.prompt_spread.powi(2) + q.layer_spread.powi(2)).sqrt();
        let merged = q.prompt_spread * own.prompt + q.layer_spread * own.layer;
        let log10_median = q.exceedance.log10();
        let mut exceedance =
            [Vec::with_capacity(layers * tokens), Vec::with_capacity(layers * tokens), Vec::with_capacity(layers * tokens)];
        for l in 0..layers {
            let profile = q.prompt_spread * own.prompt + q.layer_spread * layer[l];
            let independent = if l == 0 { merged } else { shared_sd * layer[l] };
            for t in 0..tokens {
                let tok = q.token_spread * token[l * tokens + t];
                exceedance[0].push(exceedance_of(log10_median + profile + tok));
                exceedance[1].push(exceedance_of(log10_median + merged + tok));
                exceedance[2].push(exceedance_of(log10_median + independent + tok));
            }
        }
        TrialNeedle { exceedance, uniform }
    }
}

/// A variant's behaviour beyond the reference in one cell.
struct Transfer {
    /// P(the variant keeps the needle | the reference keeps it), and | loses it.
    keep_if_kept: f64,
    keep_if_lost: f64,
    /// The variant's own latent: correlation of adjacent layers and tokens.
    rho_layer: f64,
    rho_token: f64,
}

impl Transfer {
    fn threshold(q: f64) -> f64 {
        if q <= 0.0 {
            f64::INFINITY
        } else if q >= 1.0 {
            f64::NEG_INFINITY
        } else {
            normal_quantile(1.0 - q)
        }
    }
}

/// The stack's candidate stage as one variant's cell reads it.
struct Stage<'a> {
    /// The source's number among the indexer layers.
    source: usize,
    rule: CandidateStage,
    /// Whether the variant is a fault: in the source layer its block
    /// choice is then bounded below by its own row choice.
    fault: bool,
    /// Two uniforms per query token ([`CandidateStage::keeps_needle_block`]).
    draws: &'a [f64],
}

impl Stage<'_> {
    /// Whether the source keeps the needle's block for token `tok`, given
    /// whether it keeps the row: a kept row has its block kept (the block's
    /// score is at least the row's); otherwise the block draw at exceedance
    /// `u`, which a fault acting in the source is not credited with.
    fn keeps_block(&self, c: &CellTrial, row_kept: bool, faulty: bool, u: f64, tok: usize) -> bool {
        row_kept
            || if faulty && self.fault {
                self.rule.always_keeps(c.rows, c.needle_row)
            } else {
                let (own, uniform) = (self.draws[2 * tok], self.draws[2 * tok + 1]);
                self.rule.keeps_needle_block(c.rows, c.needle_row, u, c.fixed_above, own, uniform)
            }
    }
}

/// What one cell of one trial fixes for every layer.
struct CellTrial {
    /// The needle is in the raw window (kept everywhere) …
    in_window: bool,
    /// … or has no candidate row (lost everywhere but the window).
    has_rows: bool,
    hay_rows: u64,
    fixed_above: u64,
    k_eff: u64,
    /// Candidate rows, and the needle's (first) row among them.
    rows: u64,
    needle_row: u64,
    /// The reference's and the variant's outcome in the simulated layer.
    reference: bool,
    variant: bool,
}

/// Indexer layers that keep the needle for some query token. Layers
/// outside `faulty` select as the exact reference does; with a candidate
/// `stage`, a layer after its source keeps the needle for a token only when
/// the source kept the needle's block for that token.
#[allow(clippy::too_many_arguments)]
fn layers_reached(
    c: &CellTrial,
    needle: &TrialNeedle,
    split: Split,
    t: &Transfer,
    faulty: LayerSubset,
    draws: &[f64],
    layers: usize,
    tokens: usize,
    stage: Option<&Stage>,
) -> u64 {
    if c.in_window {
        return layers as u64;
    }
    if !c.has_rows {
        return 0;
    }
    let exceedance = &needle.exceedance[split as usize];
    let (z_kept, z_lost) = (Transfer::threshold(t.keep_if_kept), Transfer::threshold(t.keep_if_lost));
    // Pin the simulated latent within the interval its outcome allows.
    let q = if c.reference { t.keep_if_kept } else { t.keep_if_lost };
    let pin = draws[0];
    let simulated_faulty = faulty.contains(0, layers);
    let f00 = if !simulated_faulty {
        // The simulated layer is healthy here: the fault's latent is free.
        normal_quantile(pin)
    } else if !(q > 0.0 && q < 1.0) {
        0.0
    } else if c.variant {
        normal_quantile(1.0 - q + pin * q)
    } else {
        normal_quantile(pin * (1.0 - q))
    };
    let (a, sa) = (t.rho_layer, (1.0 - t.rho_layer * t.rho_layer).max(0.0).sqrt());
    let (b, sb) = (t.rho_token, (1.0 - t.rho_token * t.rho_token).max(0.0).sqrt());
    let (layer_draws, token_draws) = draws[1..].split_at(layers);
    let mut reached = 0;
    let mut layer_f = f00;
    // Per query token: whether the candidate source kept the needle's block.
    let mut blocks = vec![true; if stage.is_some() { tokens } else { 0 }];
    for (l, &layer_draw) in layer_draws.iter().enumerate() {
        if l > 0 {
            layer_f = a * layer_f + sa * layer_draw;
        }
        let mut f = layer_f;
        let layer_faulty = faulty.contains(l, layers);
        let source = stage.filter(|s| s.source == l);
        let consumer = stage.is_some_and(|s| l > s.source);
        let mut layer_kept = false;
        for tok in 0..tokens {
            let i = l * tokens + tok;
            if tok > 0 {
                f = b * f + sb * token_draws[i];
            }
            let reference =
                if i == 0 { c.reference } else { ranks_below(c.hay_rows, exceedance[i], needle.uniform[i], c.fixed_above, c.k_eff) };
            let kept = if !layer_faulty {
                reference
            } else if i == 0 {
                c.variant
            } else {
                f > if reference { z_kept } else { z_lost }
            };
            if let (Some(s), Some(block)) = (source, blocks.get_mut(tok)) {
                *block = s.keeps_block(c, kept, layer_faulty, exceedance[i], tok);
            }
            if kept && (!consumer || blocks.get(tok) == Some(&true)) {
                layer_kept = true;
                if source.is_none() {
                    break;
                }
            }
        }
        reached += u64::from(layer_kept);
    }
    reached
}

/// Each trial of one cell, as the layer stack reads it: whether the
/// reference and the variant kept the needle, and where it ranked.
fn cell_trials(trials: &[TrialOutcome], index: usize, case: usize, in_window: bool, k_eff: u64, rows: (u64, u64)) -> Vec<CellTrial> {
    trials
        .iter()
        .map(|t| {
            let o = &t.cells[index];
            let solve = t.needle.get(case).copied().unwrap_or_default();
            let exact_rank = solve.hay_above + solve.fixed_above;
            CellTrial {
                in_window,
                has_rows: o.rank.is_some(),
                hay_rows: solve.hay_rows,
                fixed_above: solve.fixed_above,
                k_eff,
                rows: rows.0,
                needle_row: rows.1,
                reference: in_window || (o.rank.is_some() && exact_rank < k_eff),
                variant: o.survived,
            }
        })
        .collect()
}

/// The variant's keep rate where the reference kept the needle, and where
/// it lost it (`n` trials).
fn keep_rates(cell_trials: &[CellTrial], n: usize) -> (f64, f64) {
    let count = |f: &dyn Fn(&CellTrial) -> bool| cell_trials.iter().filter(|c| f(c)).count() as f64;
    let (kept_ref, lost_ref) = (count(&|c| c.reference), count(&|c| !c.reference));
    let p = count(&|c| c.variant) / n.max(1) as f64;
    // Without trials on one side, the variant's keep rate there
    // is taken to be its overall rate (no evidence of dependence).
    let keep_if_kept = if kept_ref > 0.0 { count(&|c| c.reference && c.variant) / kept_ref } else { p };
    let keep_if_lost = if lost_ref > 0.0 { count(&|c| !c.reference && c.variant) / lost_ref } else { p };
    (keep_if_kept, keep_if_lost)
}

/// One trial's draws for one cell (keyed by its context and needle
/// offset, not by k: the same draws at every k keep k pairs paired): the
/// pin and the chains' innovations, and the candidate stage's uniforms
/// from a stream of their own, so a stack without one draws what it
/// always did.
fn fill_draws(draws: &mut [f64], stage_draws: &mut [f64], seed: u64, [context, spot]: [u64; 2]) {
    let mut rng = rng::stream(seed, &[tag::STACK, tag::NEEDLE, context, spot]);
    draws[0] = open_uniform(rng.random::<u64>());
    for x in &mut draws[1..] {
        *x = rng.sample(StandardNormal);
    }
    if !stage_draws.is_empty() {
        let mut rng = rng::stream(seed, &[tag::STACK, tag::CANDIDATE, context, spot]);
        for x in stage_draws {
            *x = open_uniform(rng.random::<u64>());
        }
    }
}

/// A cell's estimate from the layers reached in each trial, under the
/// default split and at the band's two ends.
fn estimate(whole: &WholeModel, mut reached: [Vec<f64>; 3]) -> StackEstimate {
    let n = reached[0].len();
    let recall_of = |r: &[f64]| {
        let survived = if whole.hca_retrieves() { n } else { r.iter().filter(|&&x| x >= whole.quorum as f64).count() };
        (survived as u64, if n == 0 { 0.0 } else { survived as f64 / n as f64 })
    };
    let (survived, recall) = recall_of(&reached[0]);
    let (ends_a, ends_b) = (recall_of(&reached[1]).1, recall_of(&reached[2]).1);
    let (ci_low, ci_high) = wilson_interval(survived, n as u64, Z95);
    let (sum, sum_sq) = reached[0].iter().fold((0.0, 0.0), |(s, q), &x| (s + x, q + x * x));
    StackEstimate {
        indexed_layers: whole.indexed_layers() as u64,
        trials: n as u64,
        survived,
        recall,
        ci_low,
        ci_high,
        layers_reached: mean_interval(sum, sum_sq, n as u64),
        layers_reached_quantiles: quantiles(&mut reached[0]),
        band: Some((recall.min(ends_a).min(ends_b), recall.max(ends_a).max(ends_b))),
    }
}

/// Whole-model recall of every cell of `spec` ([`TrialSpec::cell_index`]
/// order), with the band.
pub(super) fn whole_model(spec: &TrialSpec<'_>, whole: &WholeModel, q: &QuantileNeedle, trials: &[TrialOutcome]) -> Vec<StackEstimate> {
    let layers = whole.indexed_layers();
    let tokens = whole.query_tokens().max(1) as usize;
    let n = trials.len();
    // Per needle multiple (`needle=M`), every trial's draws with the median scaled.
    let needles: Vec<Vec<TrialNeedle>> = spec
        .needle_multiples()
        .iter()
        .map(|&m| {
            let q_m = q.scaled(m);
            trials.iter().map(|t| TrialNeedle::draw(&q_m, t.seed, layers, tokens)).collect()
        })
        .collect();
    let (rho_low, rho_high) =
        (correlation_for_overlap(OVERLAP_ENDS.0, OVERLAP_SHARE), correlation_for_overlap(OVERLAP_ENDS.1, OVERLAP_SHARE));
    let mut out = vec![StackEstimate::default(); spec.cell_count()];
    let mut draws = vec![0.0; 1 + layers + layers * tokens];
    let stage_rule = whole.candidate_source().zip(whole.candidates);
    let mut stage_draws = vec![0.0; if stage_rule.is_some() { 2 * tokens } else { 0 }];
    let needle_slots = spec.needle_slots();
    for ci in 0..spec.contexts.len() {
        for oi in 0..spec.spot_count() {
            let context = spec.contexts[ci];
            let placement = spec.placement(context, oi);
            let candidates = spec.geometry.candidate_rows(context);
            for ki in 0..spec.topks.len() {
                for (v, variant) in spec.variants.iter().enumerate() {
                    let index = spec.cell_index(ci, oi, ki, v);
                    let sel = &variant.selection;
                    let k_eff = sel.topk_for(spec.topks[ki]).min(candidates);
                    let in_window = placement.tokens.start >= context.saturating_sub(sel.window_for(spec.geometry.window));
                    let at = spec.needle_index(needle_slots[v], ci, oi);
                    let cell_trials = cell_trials(trials, index, at, in_window, k_eff, (candidates, placement.rows.start));
                    let needles = &needles[needle_slots[v]];
                    let (keep_if_kept, keep_if_lost) = keep_rates(&cell_trials, n);
                    let independent = variant_spread(&variant.name).map(|s| whole.fault_spread.pick(s)) == Some(FaultSpread::Independent);
                    let rho = |shared: f64| if independent { 0.0 } else { shared };
                    let transfer = |rho_layer: f64| Transfer { keep_if_kept, keep_if_lost, rho_layer, rho_token: whole.token_correlation };
                    let runs = [
                        (Split::Profile, transfer(rho(whole.layer_correlation))),
                        (Split::Shared, transfer(rho(rho_high))),
                        (Split::Independent, transfer(rho(rho_low))),
                    ];
                    let mut reached: [Vec<f64>; 3] = [Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n)];
                    let fault = candidate_class(&variant.name) != FaultClass::Healthy;
                    for (t, (trial, c)) in trials.iter().zip(&cell_trials).enumerate() {
                        fill_draws(&mut draws, &mut stage_draws, trial.seed, [context, spec.spot(oi).1.unwrap_or(u64::MAX)]);
                        let stage = stage_rule.map(|(source, rule)| Stage { source, rule, fault, draws: &stage_draws });
                        for (r, (split, transfer)) in reached.iter_mut().zip(&runs) {
                            r.push(
                                layers_reached(c, &needles[t], *split, transfer, variant.layers, &draws, layers, tokens, stage.as_ref())
                                    as f64,
                            );
                        }
                    }
                    out[index] = estimate(whole, reached);
                }
            }
        }
    }
    out
}

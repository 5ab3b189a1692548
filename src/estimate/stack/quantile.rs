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
//! there. The content's churn over tokens is in the reference's own draws,
//! so a fault's f is all the fault's part (its tokens tied by ρ_F); a
//! number format's rounding follows the needle over the query (ρ_N of the
//! layer's ρ_T: its persistent difficulty and its rows' churn).

use super::shared::{correlation_for_overlap, StackEstimate};
use crate::base::rng::{self, tag};
use crate::base::special::normal_quantile;
use crate::base::stats::{mean_interval, quantiles, wilson_interval, Z95};
use crate::estimate::margin::simulated_draws;
use crate::model::geometry::{CompressionGeometry, NeedlePlacement};
use crate::model::needle::{exceedance_of, open_uniform, ranks_below, QuantileNeedle};
use crate::model::stack::CandidateStage;
use crate::model::stack::{FaultSpread, LostLayerHarm, WholeModel};
use crate::score::hypothesis::{candidate_class, variant_spread, FaultClass};
use crate::score::trial::{TrialOutcome, TrialSpec};
use crate::score::variant::LayerSubset;
use rand::Rng;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use std::sync::OnceLock;
use whole_margin::model_margin;

mod whole_margin;

/// Adjacent-layer top-k overlaps measured at the two ends (docs/MODEL.md,
/// "The band"): ~0.38 on V4-Flash prefill (vllm PR #41834) and up to 1.0
/// (THUDM IndexCache README), read at a top share of 1/16.
pub const OVERLAP_ENDS: (f64, f64) = (0.38, 1.0);
const OVERLAP_SHARE: f64 = 1.0 / 16.0;

/// Adjacent query-token (decode-step) top-k overlaps at the band's two
/// ends, each at its own top share (docs/MODEL.md, "Per-layer profiles"):
/// 35 % of the top-2048 of 70,690 rows, the lowest deep-layer mean of real
/// DeepSeek-V3.2 decode (TensorRT-LLM tech blog 19, NVIDIA/TensorRT-LLM PR
/// #12684), and ≥ 95 % asserted for a V4-Flash deployment without a method
/// (GDzhu01/vllm-ascend-deepseekv4 PR #134), read at 1/16.
pub const TOKEN_OVERLAP_ENDS: [(f64, f64); 2] = [(0.35, DECODE_CAPTURE_SHARE), (0.95, OVERLAP_SHARE)];

/// The top share of the decode capture: top-2048 of 70,690 rows.
pub const DECODE_CAPTURE_SHARE: f64 = 2048.0 / 70_690.0;

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

/// One trial's needle draws for every layer and token: log10 u_ℓt under each split.
struct TrialNeedle {
    /// [split][ℓ · T + t]
    log10: [Vec<f64>; 3],
    /// [split][ℓ · T + t]: `exceedance_of(log10)`, once per draw rather than
    /// per variant and cell (a `powf` each: 4 % of a diagnosis's CPU).
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
        let mut log10 = [Vec::with_capacity(layers * tokens), Vec::with_capacity(layers * tokens), Vec::with_capacity(layers * tokens)];
        for l in 0..layers {
            let profile = q.prompt_spread * own.prompt + q.layer_spread * layer[l];
            let independent = if l == 0 { merged } else { shared_sd * layer[l] };
            for t in 0..tokens {
                let tok = q.token_spread * token[l * tokens + t];
                log10[0].push(log10_median + profile + tok);
                log10[1].push(log10_median + merged + tok);
                log10[2].push(log10_median + independent + tok);
            }
        }
        let exceedance = log10.each_ref().map(|l| l.iter().map(|&x| exceedance_of(x)).collect());
        TrialNeedle { log10, exceedance, uniform }
    }
}

/// A variant's behaviour beyond the reference in one cell.
struct Transfer {
    /// P(the variant keeps the needle | the reference keeps it), and | loses it.
    keep_if_kept: f64,
    keep_if_lost: f64,
    /// The variant's own latent: correlation of adjacent layers, and the
    /// rows' correlation of adjacent tokens (ρ_T), in the first `early`
    /// indexer layers (the early profile) and the others.
    rho_layer: f64,
    rho_token: f64,
    early: usize,
    rho_token_early: f64,
    /// The needle, whose persistent part lifts a number format's token
    /// correlation from the rows' ρ_T to its own ρ_N.
    needle: QuantileNeedle,
    /// A fault's latent over tokens, every layer: ρ_F, and whether it is
    /// capped by the layer's ρ_T (the band's "shares less" end). None for a
    /// variant that is no fault, whose latent takes ρ_N.
    fault_token: Option<(f64, bool)>,
}

impl Transfer {
    /// The latent's correlation between adjacent tokens in indexer layer `l`.
    fn token_correlation(&self, l: usize) -> f64 {
        let content = if l < self.early { self.rho_token_early } else { self.rho_token };
        match self.fault_token {
            None => self.needle.token_correlation(content),
            Some((rho, capped)) => {
                if capped {
                    rho.min(content)
                } else {
                    rho
                }
            }
        }
    }

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
    fn keeps_block(&self, v: &LayerView, row_kept: bool, faulty: bool, u: f64, tok: usize) -> bool {
        row_kept
            || if faulty && self.fault {
                self.rule.always_keeps(v.rows, v.needle_row)
            } else {
                let (own, uniform) = (self.draws[2 * tok], self.draws[2 * tok + 1]);
                self.rule.keeps_needle_block(v.rows, v.needle_row, u, v.fixed_above, own, uniform)
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
    /// Rows that are neither haystack nor needle (distractors, sinks,
    /// recency rows), when the simulated layer solved the needle's rank.
    fixed_rows: u64,
    k_eff: u64,
    /// Candidate rows, and the needle's (first) row among them.
    rows: u64,
    needle_row: u64,
    /// The reference's and the variant's outcome in the simulated layer.
    reference: bool,
    variant: bool,
}

/// An indexer layer at another compress ratio than the simulated one, in
/// one cell: its own rows, top-k and needle row (docs/MODEL.md, "Layer
/// plans"). Its haystack is its rows less the needle's and the simulated
/// layer's fixed competitors (distractors, sink and recency rows), which
/// it shares.
#[derive(Clone, Copy, Debug)]
struct OwnRows {
    rows: u64,
    needle_row: u64,
    has_rows: bool,
    k_eff: u64,
    /// Its candidate rows less the needle's.
    hay_rows: u64,
}

/// One indexer layer's rows in one trial of one cell.
struct LayerView {
    has_rows: bool,
    hay_rows: u64,
    fixed_above: u64,
    k_eff: u64,
    rows: u64,
    needle_row: u64,
}

impl LayerView {
    fn of(c: &CellTrial, own: Option<&OwnRows>) -> Self {
        match own {
            None => LayerView {
                has_rows: c.has_rows,
                hay_rows: c.hay_rows,
                fixed_above: c.fixed_above,
                k_eff: c.k_eff,
                rows: c.rows,
                needle_row: c.needle_row,
            },
            Some(o) => LayerView {
                has_rows: o.has_rows,
                hay_rows: o.hay_rows.saturating_sub(c.fixed_rows),
                fixed_above: c.fixed_above,
                k_eff: o.k_eff,
                rows: o.rows,
                needle_row: o.needle_row,
            },
        }
    }
}

/// What the layer plan adds to one variant's cell: per indexer layer, its
/// own rows where its ratio is not the simulated one (empty: every layer
/// at the simulated ratio) and the layers that reuse its selection.
struct PlanCell<'a> {
    own: &'a [Option<OwnRows>],
    reusers: &'a [u64],
    /// The reusing layers select on their own with the fault
    /// (`layers=reusers`): one normal per (reusing layer, token).
    alone: Option<&'a [f64]>,
    /// Count the faulty layers that lose the needle where the reference
    /// keeps it (the lost-layer harm is on and the variant is a fault).
    count_lost: bool,
    /// Stop once this many selecting layers keep the needle: the caller
    /// reads recall alone (the margin's search), and with no harm counted a
    /// layer past the quorum cannot change whether the trial retrieves.
    stop_at: Option<u64>,
}

/// What a trial's layers did with the needle.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Reached {
    /// Selecting layers that keep it for some query token.
    layers: u64,
    /// Faulty selecting layers that lose it where the reference keeps it.
    lost: u64,
}

/// The fault's latent in the simulated layer and query, pinned within the
/// interval its outcome allows (free when that layer is healthy here).
fn pinned_latent(c: &CellTrial, t: &Transfer, simulated_faulty: bool, pin: f64) -> f64 {
    let q = if c.reference { t.keep_if_kept } else { t.keep_if_lost };
    if !simulated_faulty {
        normal_quantile(pin)
    } else if !(q > 0.0 && q < 1.0) {
        0.0
    } else if c.variant {
        normal_quantile(1.0 - q + pin * q)
    } else {
        normal_quantile(pin * (1.0 - q))
    }
}

/// `count` reusing layers that each select alone with the fault: a latent
/// tied to their indexer layer's (`layer`: ρ_L, its innovation's sd, the
/// layer's latent) and over the tokens (ρ_T, sd), kept where it clears the
/// threshold for the reference's outcome per token. `lost` counts those
/// that keep it for no token.
fn reusers_alone<'a>(
    count: u64,
    normals: &mut impl Iterator<Item = &'a f64>,
    (a, sa, layer_f): (f64, f64, f64),
    (b, sb): (f64, f64),
    references: &[bool],
    (z_kept, z_lost): (f64, f64),
    has_rows: bool,
) -> Reached {
    let mut out = Reached::default();
    for _ in 0..count {
        let mut g = a * layer_f + sa * normals.next().copied().unwrap_or(0.0);
        let mut kept = false;
        for (tok, &reference) in references.iter().enumerate() {
            if tok > 0 {
                g = b * g + sb * normals.next().copied().unwrap_or(0.0);
            }
            kept |= has_rows && g > if reference { z_kept } else { z_lost };
        }
        out.layers += u64::from(kept);
        out.lost += u64::from(!kept);
    }
    out
}

/// Indexer layers that keep the needle for some query token, each
/// counted with the layers that reuse its selection. Layers outside
/// `faulty` select as the exact reference does; with a candidate `stage`,
/// a layer after its source keeps the needle for a token only when the
/// source kept the needle's block for that token.
#[allow(clippy::too_many_arguments)]
fn layers_reached(
    c: &CellTrial,
    needle: &TrialNeedle,
    split: Split,
    t: &Transfer,
    faulty: LayerSubset,
    draws: &[f64],
    (layers, tokens): (usize, usize),
    stage: Option<&Stage>,
    plan: &PlanCell,
    shift: f64,
) -> Reached {
    let weight = |l: usize| 1 + plan.reusers.get(l).copied().unwrap_or(0);
    if c.in_window {
        return Reached { layers: (0..layers).map(weight).sum(), lost: 0 };
    }
    if !c.has_rows && plan.own.is_empty() {
        return Reached::default();
    }
    // The needle's median times 10^shift (the margin's multiple; 0 as drawn).
    let log10 = &needle.log10[split as usize];
    let drawn = &needle.exceedance[split as usize];
    // x + 0.0 is x (−0.0 becomes +0.0, and 10^±0 = 1): the drawn values.
    let exceedance = |i: usize| if shift == 0.0 { drawn[i] } else { exceedance_of(log10[i] + shift) };
    let (z_kept, z_lost) = (Transfer::threshold(t.keep_if_kept), Transfer::threshold(t.keep_if_lost));
    let f00 = pinned_latent(c, t, faulty.contains(0, layers), draws[0]);
    let (a, sa) = (t.rho_layer, (1.0 - t.rho_layer * t.rho_layer).max(0.0).sqrt());
    let token_chain = |rho: f64| (rho, (1.0 - rho * rho).max(0.0).sqrt());
    let (layer_draws, token_draws) = draws[1..].split_at(layers);
    let mut out = Reached::default();
    let mut layer_f = f00;
    // Per query token: whether the candidate source kept the needle's block.
    let mut blocks = vec![true; if stage.is_some() { tokens } else { 0 }];
    // Per query token of the current layer: the reference's outcome, which
    // reusing layers that select alone are measured against.
    let mut references = vec![false; if plan.alone.is_some() || plan.count_lost { tokens } else { 0 }];
    let mut alone = plan.alone.map(|d| d.iter());
    for (l, &layer_draw) in layer_draws.iter().enumerate() {
        if l > 0 {
            layer_f = a * layer_f + sa * layer_draw;
        }
        let (b, sb) = token_chain(t.token_correlation(l));
        let view = LayerView::of(c, plan.own.get(l).and_then(Option::as_ref));
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
            let reference = view.has_rows
                && if i == 0 {
                    c.reference
                } else {
                    ranks_below(view.hay_rows, exceedance(i), needle.uniform[i], view.fixed_above, view.k_eff)
                };
            let kept = view.has_rows
                && if !layer_faulty {
                    reference
                } else if i == 0 {
                    c.variant
                } else {
                    f > if reference { z_kept } else { z_lost }
                };
            if let Some(r) = references.get_mut(tok) {
                *r = reference && (!consumer || blocks.get(tok) == Some(&true));
            }
            if let (Some(s), Some(block)) = (source, blocks.get_mut(tok)) {
                *block = s.keeps_block(&view, kept, layer_faulty, exceedance(i), tok);
            }
            if kept && (!consumer || blocks.get(tok) == Some(&true)) {
                layer_kept = true;
                if source.is_none() && references.is_empty() {
                    break;
                }
            }
        }
        let reference_kept = references.iter().any(|&r| r);
        let shared = plan.reusers.get(l).copied().unwrap_or(0);
        match alone.as_mut() {
            None => {
                out.layers += u64::from(layer_kept) * (1 + shared);
                if layer_faulty && plan.count_lost && reference_kept && !layer_kept {
                    out.lost += 1 + shared;
                }
            }
            Some(normals) => {
                // The indexer layer is healthy; each reusing layer selects
                // alone with the fault.
                out.layers += u64::from(layer_kept);
                let lone = reusers_alone(shared, normals, (a, sa, layer_f), (b, sb), &references, (z_kept, z_lost), view.has_rows);
                out.layers += lone.layers;
                out.lost += if plan.count_lost && reference_kept { lone.lost } else { 0 };
            }
        }
        if plan.stop_at.is_some_and(|q| out.layers >= q) {
            break;
        }
    }
    out
}

/// Each trial of one cell, as the layer stack reads it: whether the
/// reference and the variant kept the needle, and where it ranked.
fn cell_trials(trials: &[TrialOutcome], index: usize, case: usize, in_window: bool, k_eff: u64, rows: (u64, u64, u64)) -> Vec<CellTrial> {
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
                fixed_rows: if solve.hay_rows > 0 { rows.0.saturating_sub(solve.hay_rows + rows.2) } else { 0 },
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
/// it lost it (`n` trials). `format` is set for a variant that is no fault
/// (a number format) in a plan with indexer layers at other ratios, whose
/// reference may lose where the simulated layer's never did.
fn keep_rates(cell_trials: &[CellTrial], n: usize, format: bool) -> (f64, f64) {
    let count = |f: &dyn Fn(&CellTrial) -> bool| cell_trials.iter().filter(|c| f(c)).count() as f64;
    let (kept_ref, lost_ref) = (count(&|c| c.reference), count(&|c| !c.reference));
    let p = count(&|c| c.variant) / n.max(1) as f64;
    // Without trials on one side, the variant's keep rate there is taken
    // to be its overall rate (no evidence of dependence); a number format
    // rounds the exact scores, so there it selects as the reference does.
    let unseen = |rate: f64| if format { rate } else { p };
    let keep_if_kept = if kept_ref > 0.0 { count(&|c| c.reference && c.variant) / kept_ref } else { unseen(1.0) };
    let keep_if_lost = if lost_ref > 0.0 { count(&|c| !c.reference && c.variant) / lost_ref } else { unseen(0.0) };
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

/// Normals for the reusing layers that select alone (`layers=reusers`),
/// from a stream of their own, so other variants draw what they did.
fn fill_normals(normals: &mut [f64], seed: u64, [context, spot]: [u64; 2]) {
    let mut rng = rng::stream(seed, &[tag::STACK, tag::PLAN, 0, context, spot]);
    for x in normals {
        *x = rng.sample(StandardNormal);
    }
}

/// The uniform a trial's lost-layer harm is decided by, shared by the
/// variants of a cell's context and needle offset.
fn harm_uniform(seed: u64, [context, spot]: [u64; 2]) -> f64 {
    open_uniform(rng::stream(seed, &[tag::STACK, tag::PLAN, 1, context, spot]).random::<u64>())
}

/// A cell's estimate from the layers reached in each trial, under the
/// default split and at the band's two ends; with the lost-layer harm on,
/// a trial whose faulty layers lost the needle keeps it only when its
/// uniform in `harm_uniforms` falls below (1 − c)^lost, and the band also
/// spans the harm's own band.
fn estimate(whole: &WholeModel, reached: [Vec<Reached>; 3], harm_uniforms: &[f64]) -> StackEstimate {
    let n = reached[0].len();
    let recall_of = |r: &[Reached], c: f64| {
        let survived = if whole.hca_retrieves() {
            n
        } else {
            r.iter()
                .enumerate()
                .filter(|(t, x)| x.layers >= whole.quorum && (x.lost == 0 || harm_uniforms[*t] < LostLayerHarm::intact(c, x.lost)))
                .count()
        };
        (survived as u64, if n == 0 { 0.0 } else { survived as f64 / n as f64 })
    };
    let h = whole.harm;
    let (survived, recall) = recall_of(&reached[0], h.central);
    let mut band = (recall, recall);
    for (split, c) in [(1, h.central), (2, h.central), (0, h.low), (0, h.high), (1, h.low), (1, h.high), (2, h.low), (2, h.high)] {
        if c != h.central && harm_uniforms.is_empty() {
            continue;
        }
        if reached[split].is_empty() {
            continue;
        }
        let r = recall_of(&reached[split], c).1;
        band = (band.0.min(r), band.1.max(r));
    }
    let (ci_low, ci_high) = wilson_interval(survived, n as u64, Z95);
    let mut layers: Vec<f64> = reached[0].iter().map(|x| x.layers as f64).collect();
    let (sum, sum_sq) = layers.iter().fold((0.0, 0.0), |(s, q), &x| (s + x, q + x * x));
    StackEstimate {
        indexed_layers: whole.selecting_layers() as u64,
        trials: n as u64,
        survived,
        recall,
        ci_low,
        ci_high,
        layers_reached: mean_interval(sum, sum_sq, n as u64),
        layers_reached_quantiles: quantiles(&mut layers),
        band: Some(band),
        margin: None,
    }
}

/// Per indexer layer, its own rows in the cell where its compress ratio is
/// not the simulated layer's; empty when every indexer layer has the
/// simulated ratio (then each is read on the simulated layer's rows).
fn own_rows(
    whole: &WholeModel,
    geometry: &CompressionGeometry,
    window: u64,
    k: u64,
    placement: &NeedlePlacement,
    context: u64,
) -> Vec<Option<OwnRows>> {
    let ratios = whole.indexer_ratios();
    let simulated = ratios[0];
    if ratios.iter().all(|&r| r == simulated) {
        return Vec::new();
    }
    ratios
        .iter()
        .map(|&r| {
            (r != simulated).then(|| {
                // Overlapping windows are a property of V4's ratio-4 CSA; a
                // token-level layer has none.
                let g = CompressionGeometry { ratio: r, overlap: geometry.overlap && r > 1, window, ..*geometry };
                let rows = g.candidate_rows(context);
                let len = placement.tokens.end - placement.tokens.start;
                let needle_rows = g.place_tokens(context, placement.tokens.start, len).rows;
                OwnRows {
                    rows,
                    needle_row: needle_rows.start,
                    has_rows: !needle_rows.is_empty(),
                    k_eff: k.min(rows),
                    hay_rows: rows.saturating_sub(needle_rows.end - needle_rows.start),
                }
            })
        })
        .collect()
}

/// One variant's cell as the stack reads it.
struct VariantCell<'a> {
    cell_trials: &'a [CellTrial],
    own: &'a [Option<OwnRows>],
    /// Any hypothesis but `needle=M`.
    fault: bool,
    layers: LayerSubset,
}

/// Every trial's draws for one (context, needle offset), shared read-only
/// by the k and variants of that key (each variant drew the same streams),
/// and what the stack fixes for every cell.
struct CellBuffers {
    layers: usize,
    tokens: usize,
    /// Per trial, `per_trial` values: the needle's uniform, then the normals.
    draws: Vec<f64>,
    per_trial: usize,
    stage_rule: Option<(usize, CandidateStage)>,
    /// Per trial, two uniforms per query token (empty without a stage).
    stage_draws: Vec<f64>,
    /// Per indexer layer, the layers that reuse it (empty without any).
    reusers: Vec<u64>,
    /// Per trial, one normal per (reusing layer, token), when some variant
    /// selects alone in the reusing layers.
    alone_draws: Vec<f64>,
    alone_per_trial: usize,
    /// Per trial, when the lost-layer harm is on.
    harm_uniforms: Vec<f64>,
}

impl CellBuffers {
    fn new(whole: &WholeModel, layers: usize, tokens: usize) -> Self {
        let stage_rule = whole.candidate_source().zip(whole.candidates);
        let reusers: Vec<u64> = whole.plan.reusers().iter().map(|r| r.len() as u64).collect();
        let reusing: u64 = reusers.iter().sum();
        CellBuffers {
            layers,
            tokens,
            draws: Vec::new(),
            per_trial: 1 + layers + layers * tokens,
            stage_rule,
            stage_draws: Vec::new(),
            reusers: if reusing == 0 { Vec::new() } else { reusers },
            alone_draws: Vec::new(),
            alone_per_trial: reusing as usize * tokens,
            harm_uniforms: Vec::new(),
        }
    }

    /// Draws every trial's values for `key` (alone normals and harm
    /// uniforms only where `alone` and `harm` ask for them).
    fn fill(&mut self, trials: &[TrialOutcome], key: [u64; 2], alone: bool, harm: bool) {
        let n = trials.len();
        let stage = if self.stage_rule.is_some() { 2 * self.tokens } else { 0 };
        self.draws.resize(n * self.per_trial, 0.0);
        self.stage_draws.resize(n * stage, 0.0);
        let alone_len = if alone { self.alone_per_trial } else { 0 };
        self.alone_draws.resize(n * alone_len, 0.0);
        self.harm_uniforms.clear();
        for (t, trial) in trials.iter().enumerate() {
            let draws = &mut self.draws[t * self.per_trial..(t + 1) * self.per_trial];
            fill_draws(draws, &mut self.stage_draws[t * stage..(t + 1) * stage], trial.seed, key);
            if alone_len > 0 {
                fill_normals(&mut self.alone_draws[t * alone_len..(t + 1) * alone_len], trial.seed, key);
            }
            if harm {
                self.harm_uniforms.push(harm_uniform(trial.seed, key));
            }
        }
    }

    /// One variant's whole-model estimate in one cell, under each split
    /// (recall alone, its layer walk cut at the quorum, when `recall_only`),
    /// on the draws [`Self::fill`] made for the cell's key.
    fn estimate_cell(
        &self,
        whole: &WholeModel,
        cell: &VariantCell,
        needles: &[TrialNeedle],
        runs: &[(Split, Transfer)],
        trials: &[TrialOutcome],
        (shift, recall_only): (f64, bool),
    ) -> StackEstimate {
        let n = trials.len();
        let mut reached: [Vec<Reached>; 3] = [Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n)];
        let alone = cell.layers == LayerSubset::Reusers && self.alone_per_trial > 0;
        let count_lost = cell.fault && whole.harm.high > 0.0;
        let stage_len = if self.stage_rule.is_some() { 2 * self.tokens } else { 0 };
        for (t, c) in cell.cell_trials.iter().enumerate().take(n) {
            let draws = &self.draws[t * self.per_trial..(t + 1) * self.per_trial];
            let stage_draws = &self.stage_draws[t * stage_len..(t + 1) * stage_len];
            let stage = self.stage_rule.map(|(source, rule)| Stage { source, rule, fault: cell.fault, draws: stage_draws });
            let stop_at = (recall_only && !count_lost).then_some(whole.quorum);
            let alone = alone.then(|| &self.alone_draws[t * self.alone_per_trial..(t + 1) * self.alone_per_trial]);
            let plan = PlanCell { own: cell.own, reusers: &self.reusers, alone, count_lost, stop_at };
            for (r, (split, transfer)) in reached.iter_mut().zip(runs) {
                let layers = (self.layers, self.tokens);
                r.push(layers_reached(c, &needles[t], *split, transfer, cell.layers, draws, layers, stage.as_ref(), &plan, shift));
            }
        }
        estimate(whole, reached, if count_lost { &self.harm_uniforms } else { &[] })
    }
}

/// Whole-model recall of every cell of `spec` ([`TrialSpec::cell_index`]
/// order), with the band.
pub(super) fn whole_model(spec: &TrialSpec<'_>, whole: &WholeModel, q: &QuantileNeedle, trials: &[TrialOutcome]) -> Vec<StackEstimate> {
    let layers = whole.indexed_layers();
    let tokens = whole.query_tokens().max(1) as usize;
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
    let needle_slots = spec.needle_slots();
    let mut bufs = CellBuffers::new(whole, layers, tokens);
    // Per indexer layer reusing selections alone, and the lost-layer harm:
    // drawn only where some variant reads them.
    let any_alone = spec.variants.iter().any(|v| v.layers == LayerSubset::Reusers);
    let any_harm = whole.harm.high > 0.0 && spec.variants.iter().any(|v| candidate_class(&v.name) != FaultClass::Healthy);
    let with_margin = spec.margin_threshold.is_some() && trials.iter().all(|t| t.cells.iter().all(|c| c.keep_below.is_some()));
    let margin_draws = if with_margin { simulated_draws(spec, q, trials) } else { Vec::new() };
    for ci in 0..spec.contexts.len() {
        for oi in 0..spec.spot_count() {
            let context = spec.contexts[ci];
            let key = [context, spec.spot(oi).1.unwrap_or(u64::MAX)];
            bufs.fill(trials, key, any_alone, any_harm);
            let bufs = &bufs;
            // Each (k, variant) reads the key's draws alone: in parallel,
            // each estimate into its own slot (the same bits as in turn).
            let pairs: Vec<(usize, usize)> = (0..spec.topks.len()).flat_map(|ki| (0..spec.variants.len()).map(move |v| (ki, v))).collect();
            let estimates: Vec<(usize, StackEstimate)> = pairs
                .into_par_iter()
                .map(|(ki, v)| {
                    let inputs = CellInputs {
                        spec,
                        whole,
                        q,
                        trials,
                        needles: &needles,
                        margin_draws: &margin_draws,
                        rho_ends: (rho_low, rho_high),
                    };
                    inputs.estimate(bufs, (ci, oi, ki, v), &needle_slots)
                })
                .collect();
            for (index, estimate) in estimates {
                out[index] = estimate;
            }
        }
    }
    out
}

/// A cell's transfer under the default split and at the band's two ends,
/// given the variant's keep rates and the layer correlation of each
/// (`[default, shares more, shares less]`). A number format's latent
/// follows the needle over tokens: ρ_N of the layer's ρ_T (docs/MODEL.md,
/// "The needle's token correlation"). Layers share more: one token profile
/// at the asserted decode-step overlap, and a fault's tokens at least
/// that; less: the measured low end past the early layers, which keep
/// theirs, and a fault's tokens churning at most as the rows' do there
/// (ρ_F = ρ_T: a fault that leaves the needle nothing persistent; what the
/// assumption of ρ_F is worth).
fn band_runs(
    whole: &WholeModel,
    q: &QuantileNeedle,
    (keep_if_kept, keep_if_lost): (f64, f64),
    layer: [f64; 3],
    fault: bool,
) -> [(Split, Transfer); 3] {
    // Constants: solved once (120 bivariate normal CDFs each), not per cell.
    static TOKEN_RHO_ENDS: OnceLock<[f64; 2]> = OnceLock::new();
    let [token_low, token_high] =
        *TOKEN_RHO_ENDS.get_or_init(|| TOKEN_OVERLAP_ENDS.map(|(overlap, share)| correlation_for_overlap(overlap, share)));
    let early = whole.early_indexers();
    let rho_fault = whole.fault_token_correlation;
    let transfer = |rho_layer: f64, rho_token: f64, rho_token_early: f64, early: usize, fault_token: (f64, bool)| Transfer {
        keep_if_kept,
        keep_if_lost,
        rho_layer,
        rho_token,
        early,
        rho_token_early,
        needle: *q,
        fault_token: fault.then_some(fault_token),
    };
    [
        (Split::Profile, transfer(layer[0], whole.token_correlation, whole.early_token_correlation, early, (rho_fault, false))),
        (Split::Shared, transfer(layer[1], token_high, token_high, 0, (rho_fault.max(token_high), false))),
        (Split::Independent, transfer(layer[2], token_low, whole.early_token_correlation, early, (rho_fault, true))),
    ]
}

/// What every cell of [`whole_model`] reads.
struct CellInputs<'a, 's> {
    spec: &'a TrialSpec<'s>,
    whole: &'a WholeModel,
    q: &'a QuantileNeedle,
    trials: &'a [TrialOutcome],
    /// Per needle multiple, every trial's needle.
    needles: &'a [Vec<TrialNeedle>],
    /// Per needle slot, the margin's draws (empty without the margin).
    margin_draws: &'a [Vec<(f64, f64)>],
    /// The band's token-overlap ends as latent correlations (low, high).
    rho_ends: (f64, f64),
}

impl CellInputs<'_, '_> {
    /// The whole-model estimate of cell (ci, oi, ki, v) and its index, on
    /// the draws `bufs` holds for the cell's key.
    fn estimate(
        &self,
        bufs: &CellBuffers,
        (ci, oi, ki, v): (usize, usize, usize, usize),
        needle_slots: &[usize],
    ) -> (usize, StackEstimate) {
        let CellInputs { spec, whole, q, trials, needles, margin_draws, rho_ends: (rho_low, rho_high) } = *self;
        let n = trials.len();
        let context = spec.contexts[ci];
        let placement = spec.placement(context, oi);
        let candidates = spec.geometry.candidate_rows(context);
        let variant = &spec.variants[v];
        let index = spec.cell_index(ci, oi, ki, v);
        let sel = &variant.selection;
        let k_eff = sel.topk_for(spec.topks[ki]).min(candidates);
        let in_window = placement.tokens.start >= context.saturating_sub(sel.window_for(spec.geometry.window));
        let at = spec.needle_index(needle_slots[v], ci, oi);
        let rows = (candidates, placement.rows.start, placement.rows.end - placement.rows.start);
        let observed = cell_trials(trials, index, at, in_window, k_eff, rows);
        let window = sel.window_for(spec.geometry.window);
        let own = own_rows(whole, &spec.geometry, window, sel.topk_for(spec.topks[ki]), &placement, context);
        let fault = candidate_class(&variant.name) != FaultClass::Healthy;
        let independent = variant_spread(&variant.name).map(|s| whole.fault_spread.pick(s)) == Some(FaultSpread::Independent);
        let rho = |shared: f64| if independent { 0.0 } else { shared };
        let slot_needles = &needles[needle_slots[v]];
        // The cell at multiple c of the median exceedance: its trials'
        // outcomes there (as observed at c = 1), the keep rates they give,
        // and every layer's draw shifted.
        let at_multiple = |c: f64, cell_trials: &[CellTrial]| {
            let (keep_if_kept, keep_if_lost) = keep_rates(cell_trials, n, !fault && !own.is_empty());
            let layer = [rho(whole.layer_correlation), rho(rho_high), rho(rho_low)];
            let runs = band_runs(whole, q, (keep_if_kept, keep_if_lost), layer, fault);
            let cell = VariantCell { cell_trials, own: &own, fault, layers: variant.layers };
            // The margin reads the default split's recall alone (no band,
            // no layers reached).
            let margin_only = c != 1.0;
            let runs = if margin_only { &runs[..1] } else { &runs[..] };
            bufs.estimate_cell(whole, &cell, slot_needles, runs, trials, (c.log10(), margin_only))
        };
        let mut estimate = at_multiple(1.0, &observed);
        if let (Some(threshold), Some(draws)) = (spec.margin_threshold, margin_draws.get(needle_slots[v])) {
            let median = q.exceedance * spec.needle_multiples()[needle_slots[v]];
            let at_one = (estimate.recall, estimate.ci_low, estimate.ci_high);
            let mut at = |c: f64| {
                let e = at_multiple(c, &cell_trials_at(&observed, trials, index, draws, c));
                (e.recall, e.ci_low, e.ci_high)
            };
            estimate.margin = (!trials.is_empty()).then(|| model_margin(threshold, median, at_one, &mut at));
        }
        (index, estimate)
    }
}

/// The cell's trials at multiple `c` of the median exceedance: in the
/// simulated layer the needle's rank is its binomial draw at c·u (`draws`:
/// each trial's u and uniform); the reference keeps it below k_eff less the
/// fixed rows above, the variant below its critical rank.
fn cell_trials_at(observed: &[CellTrial], trials: &[TrialOutcome], index: usize, draws: &[(f64, f64)], c: f64) -> Vec<CellTrial> {
    observed
        .iter()
        .zip(trials)
        .zip(draws)
        .map(|((o, t), &(u, uniform))| {
            if o.in_window || !o.has_rows {
                return CellTrial { ..*o };
            }
            let u = (c * u).min(1.0);
            let keep_below = t.cells[index].keep_below.unwrap_or(0);
            CellTrial {
                reference: ranks_below(o.hay_rows, u, uniform, o.fixed_above, o.k_eff),
                variant: ranks_below(o.hay_rows, u, uniform, 0, keep_below),
                ..*o
            }
        })
        .collect()
}

//! The Gaussian copula over layers and query tokens (docs/MODEL.md,
//! "Correlated layers and tokens: a Gaussian copula"): each trial's outcome
//! in the simulated layer pins one latent of AR(1) chains over layers and
//! tokens, and every layer keeps the cell's per-layer recall as its marginal.

use super::shared::{cell_key, tetrachoric, StackEstimate};
use crate::base::rng::{self, tag};
use crate::base::special::normal_quantile;
use crate::base::stats::{mean_interval, quantiles, wilson_interval, Z95};
use crate::model::stack::{FaultSpread, WholeModel};
use crate::score::hypothesis::variant_spread;
use crate::score::trial::TrialSpec;
use rand::Rng;
use rand_distr::StandardNormal;

/// One trial's draws for one (context, offset, k), shared by every variant
/// (common random numbers: paired comparisons stay paired).
struct Draws {
    /// Where the simulated outcome's latent falls inside its interval, in (0, 1).
    u0: f64,
    /// Splits the pinned latent into content and fault.
    split: f64,
    /// Per layer: the layer chain's innovation (unused at layer 0) and an
    /// independent fault's draw.
    layer: Vec<f64>,
    fault: Vec<f64>,
    /// Per layer and token: the token chain's innovation (unused at token 0).
    token: Vec<f64>,
    /// Per layer and token: the fault chain's innovation (unused at token
    /// 0), drawn after the others, and only for a cell with a fault part.
    fault_token: Vec<f64>,
}

impl Draws {
    fn new(layers: usize, tokens: usize) -> Self {
        Draws {
            u0: 0.5,
            split: 0.0,
            layer: vec![0.0; layers],
            fault: vec![0.0; layers],
            token: vec![0.0; layers * tokens],
            fault_token: Vec::new(),
        }
    }

    /// `fault_tokens`: whether a chain of the cell has a fault part (the
    /// other draws keep their values either way).
    fn fill(&mut self, trial_seed: u64, cell: [u64; 3], fault_tokens: bool) {
        let mut rng = rng::stream(trial_seed, &[tag::STACK, cell[0], cell[1], cell[2]]);
        // 53 random bits, centred in their interval: never 0 or 1.
        self.u0 = ((rng.random::<u64>() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        self.split = rng.sample(StandardNormal);
        for x in self.layer.iter_mut().chain(self.fault.iter_mut()).chain(self.token.iter_mut()) {
            *x = rng.sample(StandardNormal);
        }
        self.fault_token.resize(if fault_tokens { self.token.len() } else { 0 }, 0.0);
        for x in &mut self.fault_token {
            *x = rng.sample(StandardNormal);
        }
    }
}

/// What one variant's chains need besides the draws.
struct Chain {
    /// Per-layer recall of the cell, and its latent threshold Φ⁻¹(1 − p).
    p: f64,
    threshold: f64,
    /// Share of the latent's standard deviation the chains carry: 1, or for
    /// an independent fault its tetrachoric correlation with the baseline;
    /// the rest, the fault's part, is drawn afresh in each layer.
    content: f64,
    layers: usize,
    tokens: usize,
    rho_layer: f64,
    rho_token: f64,
    /// The early profile: indexer layers below `early` take `rho_token_early`.
    early: usize,
    rho_token_early: f64,
    /// The fault's part over adjacent tokens, in every layer.
    rho_fault_token: f64,
}

impl Chain {
    /// Layer `l`'s token correlation and its innovation's sd.
    fn token_chain(&self, l: usize) -> (f64, f64) {
        let b = if l < self.early { self.rho_token_early } else { self.rho_token };
        (b, (1.0 - b * b).sqrt())
    }

    /// The weights of the content's and the fault's parts, k² + s² = 1.
    fn weights(&self) -> (f64, f64) {
        (self.content, (1.0 - self.content * self.content).max(0.0).sqrt())
    }

    /// The simulated (layer, token)'s content and fault parts, pinned by its
    /// outcome: independent N(0, 1) whose k·c + s·f is the pinned latent.
    fn start(&self, d: &Draws, survived: bool) -> (f64, f64) {
        let p = self.p;
        let pinned = normal_quantile(if survived { 1.0 - p + d.u0 * p } else { d.u0 * (1.0 - p) });
        let (k, s) = self.weights();
        // g = k·c + s·f, pinned at (0, 0): draw c given g; f is what is left.
        let content0 = if s > 0.0 { k * pinned + s * d.split } else { pinned };
        let fault0 = if s > 0.0 { (pinned - k * content0) / s } else { 0.0 };
        (content0, fault0)
    }

    /// Walks layer `l`'s query tokens from the content part `c` and fault
    /// part `f` of its token 0 (layer 0 reads from token 1: token 0 is the
    /// simulated one): the content's chain at the layer's ρ_T, the fault's at
    /// ρ_F, so each latent k·c + s·f stays N(0, 1). `each` sees every
    /// token's outcome; with `stop` the walk ends at the first that keeps
    /// the needle. Whether any did.
    fn layer_hits(&self, d: &Draws, l: usize, (mut c, mut f): (f64, f64), stop: bool, each: &mut impl FnMut(bool)) -> bool {
        let (k, s) = self.weights();
        let (b, sb) = self.token_chain(l);
        let (bf, sf) = (self.rho_fault_token, (1.0 - self.rho_fault_token * self.rho_fault_token).max(0.0).sqrt());
        let mut hit = false;
        for t in 0..self.tokens {
            let i = l * self.tokens + t;
            if t > 0 {
                c = b * c + sb * d.token[i];
                if s > 0.0 {
                    f = bf * f + sf * d.fault_token[i];
                }
            }
            if l == 0 && t == 0 {
                continue;
            }
            let kept = k * c + s * f > self.threshold;
            each(kept);
            hit |= kept;
            if hit && stop {
                break;
            }
        }
        hit
    }

    /// Indexed layers that select the needle for at least one query token,
    /// given the simulated layer's outcome.
    fn layers_reached(&self, d: &Draws, survived: bool) -> u64 {
        if self.p <= 0.0 {
            return 0;
        }
        if self.p >= 1.0 {
            return self.layers as u64;
        }
        let (content0, fault0) = self.start(d, survived);
        let (a, sa) = (self.rho_layer, (1.0 - self.rho_layer * self.rho_layer).sqrt());
        let mut reached = u64::from(survived);
        let mut layer_content = content0;
        for l in 1..self.layers {
            layer_content = a * layer_content + sa * d.layer[l];
            reached += u64::from(self.layer_hits(d, l, (layer_content, d.fault[l]), true, &mut |_| {}));
        }
        // Layer 0: the simulated token, then the others.
        if !survived {
            reached += u64::from(self.layer_hits(d, 0, (content0, fault0), true, &mut |_| {}));
        }
        reached
    }
}

/// The same from sampling estimators' trials: (seed, per-cell survival
/// probability). Each trial's outcome in a cell is drawn from its
/// probability (a uniform keyed by the trial seed and the cell's values,
/// shared by the variants), then read as a simulated one.
pub fn whole_model_sampled(spec: &TrialSpec<'_>, whole: &WholeModel, trials: &[(u64, Vec<f64>)]) -> Vec<StackEstimate> {
    let outcomes: Vec<(u64, Vec<bool>)> = trials
        .iter()
        .map(|(seed, survival)| {
            let mut kept = vec![false; survival.len()];
            for ci in 0..spec.contexts.len() {
                for oi in 0..spec.spot_count() {
                    for ki in 0..spec.topks.len() {
                        let [context, offset, topk] = cell_key(spec, ci, oi, ki);
                        let u =
                            ((rng::derive(*seed, &[tag::STACK, u64::MAX, context, offset, topk]) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                        for v in 0..spec.variants.len() {
                            let i = spec.cell_index(ci, oi, ki, v);
                            kept[i] = u < survival[i];
                        }
                    }
                }
            }
            (*seed, kept)
        })
        .collect();
    whole_model_of(spec, whole, &outcomes)
}

/// Whole-model recall from each trial's (seed, per-cell outcome in the
/// simulated layer).
pub(super) fn whole_model_of(spec: &TrialSpec<'_>, whole: &WholeModel, trials: &[(u64, Vec<bool>)]) -> Vec<StackEstimate> {
    let layers = whole.indexed_layers();
    let tokens = whole.query_tokens().max(1) as usize;
    let variants = spec.variants.len();
    let spreads: Vec<Option<FaultSpread>> =
        spec.variants.iter().map(|v| variant_spread(&v.name).map(|s| whole.fault_spread.pick(s))).collect();
    let n = trials.len();
    let mut out = vec![StackEstimate::default(); spec.cell_count()];
    let mut draws = Draws::new(layers, tokens);
    let mut reached: Vec<Vec<f64>> = vec![Vec::with_capacity(n); variants];
    for ci in 0..spec.contexts.len() {
        for oi in 0..spec.spot_count() {
            for ki in 0..spec.topks.len() {
                let index = |v: usize| spec.cell_index(ci, oi, ki, v);
                let kept = |v: usize| trials.iter().filter(|t| t.1[index(v)]).count();
                let share = |count: usize| if n == 0 { 0.0 } else { count as f64 / n as f64 };
                let chains: Vec<Chain> = (0..variants)
                    .map(|v| {
                        let p = share(kept(v));
                        // An independent fault: the share of the variant's latent
                        // that the baseline explains. A baseline that never
                        // varies explains none of it; a variant that never
                        // varies has nothing to split (its chains give 0 or all).
                        let content = if spreads[v] == Some(FaultSpread::Independent) && p > 0.0 && p < 1.0 {
                            let both = trials.iter().filter(|t| t.1[index(v)] && t.1[index(0)]).count();
                            tetrachoric(share(both), share(kept(0)), p).map_or(0.0, |r| r.max(0.0))
                        } else {
                            1.0
                        };
                        Chain {
                            p,
                            threshold: normal_quantile(1.0 - p),
                            content,
                            layers,
                            tokens,
                            rho_layer: whole.layer_correlation,
                            rho_token: whole.token_correlation,
                            early: whole.early_indexers(),
                            rho_token_early: whole.early_token_correlation,
                            rho_fault_token: whole.fault_token_correlation,
                        }
                    })
                    .collect();
                reached.iter_mut().for_each(Vec::clear);
                let key = cell_key(spec, ci, oi, ki);
                let fault_tokens = chains.iter().any(|c| c.weights().1 > 0.0);
                for (seed, kept) in trials {
                    draws.fill(*seed, key, fault_tokens);
                    for (v, chain) in chains.iter().enumerate() {
                        reached[v].push(chain.layers_reached(&draws, kept[index(v)]) as f64);
                    }
                }
                for (v, r) in reached.iter_mut().enumerate() {
                    let survived = if whole.hca_retrieves() { n } else { r.iter().filter(|&&x| x >= whole.quorum as f64).count() } as u64;
                    let (ci_low, ci_high) = wilson_interval(survived, n as u64, Z95);
                    let (sum, sum_sq) = r.iter().fold((0.0, 0.0), |(s, q), &x| (s + x, q + x * x));
                    out[index(v)] = StackEstimate {
                        indexed_layers: layers as u64,
                        trials: n as u64,
                        survived,
                        recall: share(survived as usize),
                        ci_low,
                        ci_high,
                        layers_reached: mean_interval(sum, sum_sq, n as u64),
                        layers_reached_quantiles: quantiles(r),
                        band: None,
                        margin: None,
                    };
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::rng;

    fn chain(p: f64, layers: usize, tokens: usize, rho_layer: f64, rho_token: f64) -> Chain {
        Chain {
            p,
            threshold: normal_quantile(1.0 - p),
            content: 1.0,
            layers,
            tokens,
            rho_layer,
            rho_token,
            early: 0,
            rho_token_early: 0.0,
            rho_fault_token: 0.998,
        }
    }

    /// Model recall over `n` trials whose simulated outcomes are Bernoulli(p).
    fn any_layer(c: &Chain, n: u64) -> f64 {
        let mut draws = Draws::new(c.layers, c.tokens);
        let mut hits = 0;
        for i in 0..n {
            draws.fill(rng::derive(7, &[i]), [0, 0, 0], true);
            let survived = (rng::derive(8, &[i]) >> 11) as f64 / (1u64 << 53) as f64 <= c.p;
            hits += u64::from(c.layers_reached(&draws, survived) >= 1);
        }
        hits as f64 / n as f64
    }

    #[test]
    fn independent_layers_give_the_union_and_identical_layers_the_layer() {
        // ρ = 0: layers are independent Bernoulli(p): 1 − (1 − p)^L.
        // With n = 20000 the binomial 99.9 % half-width is ≤ 3.29·√(0.25/n) = 0.0116.
        let n = 20_000;
        let tol = 3.29 * (0.25 / n as f64).sqrt();
        for (p, layers) in [(0.1, 5), (0.25, 21), (0.03, 21)] {
            let got = any_layer(&chain(p, layers, 1, 0.0, 0.0), n);
            let want = 1.0 - (1.0f64 - p).powi(layers as i32);
            assert!((got - want).abs() < tol, "p {p}, {layers} layers: {got} vs {want}");
        }
        // ρ → 1: every layer and token repeats the simulated outcome.
        let got = any_layer(&chain(0.25, 21, 4, 0.999_999, 0.999_999), n);
        assert!((got - 0.25).abs() < tol, "{got}");
        // Tokens add draws too: 1 layer × 5 independent tokens.
        let got = any_layer(&chain(0.1, 1, 5, 0.0, 0.0), n);
        assert!((got - (1.0 - 0.9f64.powi(5))).abs() < tol, "{got}");
    }

    #[test]
    fn early_layers_take_their_own_token_correlation() {
        // 2 layers × 5 tokens, layers nearly identical: with the simulated
        // layer early at ρ_T 0 its 5 tokens are independent draws (the union
        // 1 − (1 − p)^5, the second layer repeating the first's token 0); as
        // a late layer at ρ_T → 1 they repeat the simulated outcome.
        let n = 20_000;
        let tol = 3.29 * (0.25 / n as f64).sqrt();
        let p = 0.1;
        let late = chain(p, 2, 5, 0.999_999, 0.999_999);
        let early = Chain { early: 1, rho_token_early: 0.0, ..chain(p, 2, 5, 0.999_999, 0.999_999) };
        let (got_late, got_early) = (any_layer(&late, n), any_layer(&early, n));
        assert!((got_late - p).abs() < tol, "{got_late}");
        assert!((got_early - (1.0 - 0.9f64.powi(5))).abs() < tol, "{got_early}");
    }

    #[test]
    fn each_layer_keeps_the_simulated_marginal() {
        // Mean layers reached = L·p whatever the correlations (every layer's
        // marginal is p). Sd of layers reached ≤ L/2, so the 99.9 % half-width
        // of the mean over n trials is ≤ 3.29·(L/2)/√n.
        let n = 20_000;
        let (p, layers) = (0.2, 21);
        let c = chain(p, layers, 1, 0.8, 0.9);
        let mut draws = Draws::new(layers, 1);
        let mut sum = 0.0;
        for i in 0..n {
            draws.fill(rng::derive(9, &[i]), [0, 0, 0], true);
            let survived = (rng::derive(10, &[i]) >> 11) as f64 / (1u64 << 53) as f64 <= p;
            sum += c.layers_reached(&draws, survived) as f64;
        }
        let tol = 3.29 * (layers as f64 / 2.0) / (n as f64).sqrt();
        assert!((sum / n as f64 - layers as f64 * p).abs() < tol, "{}", sum / n as f64);
    }

    #[test]
    fn an_independent_fault_decouples_layers() {
        // Correlated layers rescue little; a fault whose outcome the baseline
        // does not explain at all (content 0), drawn afresh per layer, gives
        // the union of independent layers; half explained lies between.
        let n = 20_000;
        let tol = 3.29 * (0.25 / n as f64).sqrt();
        let (p, layers) = (0.1, 21);
        let shared = any_layer(&chain(p, layers, 1, 0.98, 0.99), n);
        let half = any_layer(&Chain { content: 0.5f64.sqrt(), ..chain(p, layers, 1, 0.98, 0.99) }, n);
        let scrambled = any_layer(&Chain { content: 0.0, ..chain(p, layers, 1, 0.98, 0.99) }, n);
        let union = 1.0 - (1.0f64 - p).powi(layers as i32);
        assert!((scrambled - union).abs() < tol, "{scrambled} vs {union}");
        assert!(shared + 2.0 * tol < half && half + 2.0 * tol < scrambled, "{shared} {half} {scrambled}");
    }

    #[test]
    fn the_fault_token_correlation_moves_only_the_fault_part() {
        // A cell without a fault part (content 1) gives the same bits at any
        // ρ_F; a fault that is all its own part (content 0, ρ_T irrelevant)
        // gives the union of its layers at ρ_F → 1 and of its (layer, token)
        // draws at ρ_F = 0.
        let n = 20_000;
        let tol = 3.29 * (0.25 / n as f64).sqrt();
        let (p, layers, tokens) = (0.02, 21, 5);
        let with = |content: f64, rho_fault_token: f64| Chain { content, rho_fault_token, ..chain(p, layers, tokens, 0.98, 0.78) };
        let healthy = [0.0, 0.5, 0.999_999].map(|rho| any_layer(&with(1.0, rho), n).to_bits());
        assert!(healthy.iter().all(|&b| b == healthy[0]), "{healthy:?}");
        let (repeats, afresh) = (any_layer(&with(0.0, 0.999_999), n), any_layer(&with(0.0, 0.0), n));
        let by_layer = 1.0 - (1.0 - p).powi(layers as i32);
        let by_token = 1.0 - (1.0 - p).powi((layers * tokens) as i32);
        assert!((repeats - by_layer).abs() < tol, "{repeats} vs {by_layer}");
        assert!((afresh - by_token).abs() < tol, "{afresh} vs {by_token}");
    }

    #[test]
    fn every_layer_and_token_keeps_the_marginal_with_a_fault_part() {
        // Each (layer, token) latent k·c + s·f is N(0, 1) whatever ρ_T and
        // ρ_F: the share of all L·T cells that keep the needle is p. Cells
        // of one trial are correlated, so the tolerance takes the worst case,
        // every cell of a trial alike: 3.29·√(p(1 − p)/n).
        let n = 20_000;
        let (p, layers, tokens) = (0.2, 6, 5);
        let tol = 3.29 * (p * (1.0 - p) / n as f64).sqrt();
        for (content, rho_token, rho_fault_token) in [(0.6, 0.5, 0.9), (0.3, 0.0, 0.998), (0.8, 0.95, 0.0)] {
            let c = Chain { content, rho_fault_token, ..chain(p, layers, tokens, 0.7, rho_token) };
            let mut draws = Draws::new(layers, tokens);
            let (mut kept, mut cells) = (0u64, 0u64);
            for i in 0..n {
                draws.fill(rng::derive(11, &[i]), [0, 0, 0], true);
                let survived = (rng::derive(12, &[i]) >> 11) as f64 / (1u64 << 53) as f64 <= p;
                let mut count = |hit: bool| {
                    kept += u64::from(hit);
                    cells += 1;
                };
                count(survived);
                let (content0, fault0) = c.start(&draws, survived);
                c.layer_hits(&draws, 0, (content0, fault0), false, &mut count);
                let mut layer_content = content0;
                for l in 1..layers {
                    layer_content = 0.7 * layer_content + (1.0 - 0.49f64).sqrt() * draws.layer[l];
                    c.layer_hits(&draws, l, (layer_content, draws.fault[l]), false, &mut count);
                }
            }
            assert_eq!(cells, n * (layers * tokens) as u64);
            let share = kept as f64 / cells as f64;
            assert!((share - p).abs() < tol, "content {content}, ρ_T {rho_token}, ρ_F {rho_fault_token}: {share}");
        }
    }
}

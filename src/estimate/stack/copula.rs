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
}

impl Draws {
    fn new(layers: usize, tokens: usize) -> Self {
        Draws { u0: 0.5, split: 0.0, layer: vec![0.0; layers], fault: vec![0.0; layers], token: vec![0.0; layers * tokens] }
    }

    fn fill(&mut self, trial_seed: u64, cell: [u64; 3]) {
        let mut rng = rng::stream(trial_seed, &[tag::STACK, cell[0], cell[1], cell[2]]);
        // 53 random bits, centred in their interval: never 0 or 1.
        self.u0 = ((rng.random::<u64>() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        self.split = rng.sample(StandardNormal);
        for x in self.layer.iter_mut().chain(self.fault.iter_mut()).chain(self.token.iter_mut()) {
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
    /// the rest is drawn afresh in each layer.
    content: f64,
    layers: usize,
    tokens: usize,
    rho_layer: f64,
    rho_token: f64,
}

impl Chain {
    /// Indexed layers that select the needle for at least one query token,
    /// given the simulated layer's outcome.
    fn layers_reached(&self, d: &Draws, survived: bool) -> u64 {
        if self.p <= 0.0 {
            return 0;
        }
        if self.p >= 1.0 {
            return self.layers as u64;
        }
        let p = self.p;
        let pinned = normal_quantile(if survived { 1.0 - p + d.u0 * p } else { d.u0 * (1.0 - p) });
        let (k, s) = (self.content, (1.0 - self.content * self.content).max(0.0).sqrt());
        // g = k·c + s·f, pinned at (0, 0): draw c given g; f is what is left.
        let content0 = if s > 0.0 { k * pinned + s * d.split } else { pinned };
        let fault0 = if s > 0.0 { (pinned - k * content0) / s } else { 0.0 };
        let (a, sa) = (self.rho_layer, (1.0 - self.rho_layer * self.rho_layer).sqrt());
        let (b, sb) = (self.rho_token, (1.0 - self.rho_token * self.rho_token).sqrt());
        let mut reached = u64::from(survived);
        let mut layer_content = content0;
        for l in 1..self.layers {
            layer_content = a * layer_content + sa * d.layer[l];
            let fault = d.fault[l];
            let mut c = layer_content;
            for t in 0..self.tokens {
                if t > 0 {
                    c = b * c + sb * d.token[l * self.tokens + t];
                }
                if k * c + s * fault > self.threshold {
                    reached += 1;
                    break;
                }
            }
        }
        // Layer 0: the simulated token, then the others.
        if !survived {
            let mut c = content0;
            for t in 1..self.tokens {
                c = b * c + sb * d.token[t];
                if k * c + s * fault0 > self.threshold {
                    reached += 1;
                    break;
                }
            }
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
                        }
                    })
                    .collect();
                reached.iter_mut().for_each(Vec::clear);
                let key = cell_key(spec, ci, oi, ki);
                for (seed, kept) in trials {
                    draws.fill(*seed, key);
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
        Chain { p, threshold: normal_quantile(1.0 - p), content: 1.0, layers, tokens, rho_layer, rho_token }
    }

    /// Model recall over `n` trials whose simulated outcomes are Bernoulli(p).
    fn any_layer(c: &Chain, n: u64) -> f64 {
        let mut draws = Draws::new(c.layers, c.tokens);
        let mut hits = 0;
        for i in 0..n {
            draws.fill(rng::derive(7, &[i]), [0, 0, 0]);
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
            draws.fill(rng::derive(9, &[i]), [0, 0, 0]);
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
}

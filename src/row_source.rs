//! Where a trial's key rows come from, chunk by chunk, under the scenario's
//! physics (docs/MODEL.md, "Physics"):
//!
//! * **row level** (pooling off, or one token per row): each row is a
//!   haystack key `common + σ ⊙ z`, with `z` an AR(1) sequence over rows when
//!   tokens are correlated; a row holding needle tokens adds the whole offset;
//! * **pooled shortcut** (pooling on, gates the same in every window,
//!   independent tokens): rows without needle or distractor tokens have
//!   exactly the pooled distribution, which token values are scaled to make
//!   equal to the null model's row distribution, so they are drawn as rows;
//!   rows that hold needle or distractor tokens are pooled from their own
//!   tokens;
//! * **token level**: every token's two projection halves (values and gate
//!   logits) are drawn, correlated over tokens if asked, and pooled.
//!
//! Pooled rows are RMS-normalised; with RoPE every row is then rotated at
//! its position `ratio · row` ([`TrialRows::finalize`]).

use crate::compressor;
use crate::error::SimError;
use crate::geometry::CompressionGeometry;
use crate::haystack::{GenerativeModel, TrialHaystack};
use crate::physics::Physics;
use crate::rng::{self, tag};
use crate::rope::RopeConfig;
use rand::Rng;
use rand_distr::StandardNormal;
use std::ops::Range;

/// RMSNorm epsilon of the reference compressor.
const RMS_EPS: f32 = 1e-6;

/// A needle or a distractor in one context: its tokens and which key offset it adds.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub tokens: Range<u64>,
    /// 0: the needle; 1 … n: distractor n.
    pub offset: usize,
}

/// A trial's row generator (one per trial, used by one thread, chunks in order).
pub struct TrialRows<'a> {
    hay: &'a TrialHaystack,
    geometry: CompressionGeometry,
    d: usize,
    rope: Option<RopeConfig>,
    pools: bool,
    token_level: bool,
    /// Gate bias per half (0: the row's own tokens, 1: the previous tokens)
    /// and slot (token position mod ratio): [half][slot · d + channel].
    gate_bias: [Vec<f32>; 2],
    gate_noise: f32,
    boost: f32,
    /// Standard deviation of a token value's random part per channel.
    token_std: Vec<f32>,
    /// Shortcut only: row 0 (no previous tokens) has this many times the
    /// standard deviation of a full window's row, per channel.
    first_row_factor: Vec<f32>,
    /// Key offsets: [0] the needle's δ, then one per distractor.
    offsets: Vec<Vec<f32>>,
    /// Where each distractor sits, as a share of the context's span.
    distractor_fractions: Vec<f64>,
    token_seed: u64,
    special_seed: u64,
    rho: f32,
    /// AR(1) state: the previous row's (or each half's previous token's) z.
    ar_state: Vec<f32>,
    ar_started: bool,
    chunk: TokenChunk,
}

/// Token values and gates of the current chunk, both halves, starting one
/// row's worth of tokens before the chunk (the previous half of its first row).
#[derive(Default)]
struct TokenChunk {
    first_token: u64,
    tokens: usize,
    /// [half][token · d]
    values: [Vec<f32>; 2],
    gates: [Vec<f32>; 2],
}

impl<'a> TrialRows<'a> {
    pub fn new(
        model: &GenerativeModel,
        physics: &Physics,
        geometry: CompressionGeometry,
        hay: &'a TrialHaystack,
        trial_seed: u64,
    ) -> Result<Self, SimError> {
        let d = model.shape.head_dim;
        let c = geometry.ratio as usize;
        let pools = physics.pools(geometry.ratio);
        let mut rng = rng::stream(trial_seed, &[tag::PHYSICS]);
        let mut gate_bias = [Vec::new(), Vec::new()];
        if pools {
            for half in gate_bias.iter_mut() {
                *half = (0..c * d).map(|_| (physics.gate_bias_std * rng.sample::<f64, _>(StandardNormal)) as f32).collect();
            }
        }
        let sigma = hay.channel_std();
        let (token_std, first_row_factor) = if pools {
            let full = pooled_std_factors(&gate_bias, c, d, geometry.overlap);
            let first = pooled_std_factors(&gate_bias, c, d, false);
            let token_std = sigma.iter().zip(&full).map(|(&s, &f)| s / f).collect();
            let first_row_factor = first.iter().zip(&full).map(|(&a, &b)| a / b).collect();
            (token_std, first_row_factor)
        } else {
            (sigma.to_vec(), vec![1.0; d])
        };

        let needle = hay.needle_offset().to_vec();
        let norm = needle.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        let mut offsets = vec![needle.clone()];
        let mut distractor_fractions = Vec::new();
        for _ in 0..physics.distractors {
            distractor_fractions.push(rng.random::<f64>());
            offsets.push(distractor_offset(&needle, norm, physics.distractor_similarity, &mut rng));
        }

        let token_level = physics.token_level(geometry.ratio);
        let rho = if token_level { physics.token_correlation() } else { physics.token_correlation().powf(geometry.ratio as f64) };
        Ok(TrialRows {
            hay,
            geometry,
            d,
            rope: physics.rope.config(),
            pools,
            token_level,
            gate_bias,
            gate_noise: physics.gate_noise_std as f32,
            boost: physics.needle_gate_boost as f32,
            token_std,
            first_row_factor,
            offsets,
            distractor_fractions,
            token_seed: rng::derive(trial_seed, &[tag::TOKEN]),
            special_seed: rng::derive(trial_seed, &[tag::SPECIAL]),
            rho: rho as f32,
            ar_state: vec![0.0; 2 * d],
            ar_started: false,
            chunk: TokenChunk::default(),
        })
    }

    /// The needle and distractors of a context of `context` tokens whose
    /// needle occupies `needle`; each distractor has the needle's length.
    pub fn items(&self, context: u64, needle: Range<u64>) -> Vec<Item> {
        let len = needle.end - needle.start;
        let span = context.saturating_sub(len) as f64;
        let mut items = vec![Item { tokens: needle, offset: 0 }];
        for (j, &u) in self.distractor_fractions.iter().enumerate() {
            let start = (u * span).round() as u64;
            items.push(Item { tokens: start..(start + len).min(context), offset: j + 1 });
        }
        items
    }

    /// Rows whose window holds a token of some item, below `candidates`, ascending.
    pub fn special_rows(&self, items: &[Item], candidates: u64) -> Vec<u64> {
        let mut rows: Vec<u64> = Vec::new();
        for item in items.iter().filter(|i| !i.tokens.is_empty()) {
            let first = item.tokens.start / self.geometry.ratio;
            let mut last = (item.tokens.end - 1) / self.geometry.ratio;
            if self.geometry.overlap {
                last += 1;
            }
            rows.extend(first..(last + 1).min(candidates));
        }
        rows.sort_unstable();
        rows.dedup();
        rows
    }

    /// Generates rows `start …` into `out` (a whole number of rows) before
    /// normalisation and rotation. Chunks must come in order from row 0.
    pub fn next_chunk(&mut self, start: u64, out: &mut [f32]) {
        let d = self.d;
        let n = out.len() / d;
        if self.token_level {
            self.fill_tokens(start, n);
            let mut scratch = PoolScratch::new(self.window_len(), d);
            for (r, row) in out.chunks_exact_mut(d).enumerate() {
                self.pool_row(start + r as u64, &[], &mut scratch, row);
            }
            return;
        }
        self.hay.fill_haystack_rows(start, out);
        if self.rho > 0.0 {
            // z_i = ρ z_{i−1} + sqrt(1 − ρ²) ε_i over rows, ε_i the null model's draw.
            let (common, sigma) = (self.hay.common(), self.hay.channel_std());
            let keep = (1.0 - self.rho * self.rho).sqrt();
            for row in out.chunks_exact_mut(d) {
                for j in 0..d {
                    let eps = (row[j] - common[j]) / sigma[j];
                    let z = if self.ar_started { self.rho * self.ar_state[j] + keep * eps } else { eps };
                    self.ar_state[j] = z;
                    row[j] = common[j] + sigma[j] * z;
                }
                self.ar_started = true;
            }
        }
        if self.pools && self.geometry.overlap && start == 0 && n > 0 {
            // Row 0 pools only its own tokens: a different spread.
            let common = self.hay.common();
            for j in 0..d {
                out[j] = common[j] + (out[j] - common[j]) * self.first_row_factor[j];
            }
        }
    }

    /// Key of `row` with the given items' tokens in it, before normalisation
    /// and rotation. `base` is the row's key from [`Self::next_chunk`]; with
    /// token-level generation the row must lie in the last chunk.
    pub fn special_row(&self, row: u64, items: &[Item], base: &[f32], out: &mut [f32]) {
        let window = self.geometry.row_tokens(row);
        if !self.pools {
            out.copy_from_slice(base);
            for item in items.iter().filter(|i| i.tokens.start < window.end && window.start < i.tokens.end) {
                for (o, &x) in out.iter_mut().zip(&self.offsets[item.offset]) {
                    *o += x;
                }
            }
            return;
        }
        let mut scratch = PoolScratch::new(self.window_len(), self.d);
        if !self.token_level {
            self.draw_window(row, &mut scratch);
        }
        self.pool_row(row, items, &mut scratch, out);
    }

    /// RMS-normalises pooled rows and rotates every row at its position.
    pub fn finalize(&self, first_row: u64, rows: &mut [f32]) {
        if self.pools {
            for row in rows.chunks_exact_mut(self.d) {
                compressor::rms_norm(row, RMS_EPS);
            }
        }
        if let Some(rope) = &self.rope {
            rope.rotate_rows(rows, self.d, first_row * self.geometry.ratio, self.geometry.ratio);
        }
    }

    /// The query's rotation for a decode step at position `position`.
    pub fn rotate_queries(&self, queries: &mut [f32], position: u64) {
        if let Some(rope) = &self.rope {
            for q in queries.chunks_exact_mut(self.d) {
                rope.rotate(q, position);
            }
        }
    }

    fn window_len(&self) -> usize {
        let c = self.geometry.ratio as usize;
        if self.geometry.overlap { 2 * c } else { c }
    }

    /// Shortcut: draws the independent tokens of `row`'s window into `scratch`.
    fn draw_window(&self, row: u64, scratch: &mut PoolScratch) {
        let d = self.d;
        let groups = d.div_ceil(rng::NORMAL_GROUP) as u32;
        let common = self.hay.common();
        let window = self.geometry.row_tokens(row);
        for slot in 0..(window.end - window.start) as usize {
            let v = &mut scratch.tokens[slot * d..(slot + 1) * d];
            rng::fill_normals(self.special_seed, row, slot as u32 * groups, v);
            for ((x, &m), &s) in v.iter_mut().zip(common).zip(&self.token_std) {
                *x = m + s * *x;
            }
        }
    }

    /// Draws token values and gates for the tokens rows `start … start+n−1` pool.
    fn fill_tokens(&mut self, start: u64, n: usize) {
        let d = self.d;
        let c = self.geometry.ratio;
        let groups = d.div_ceil(rng::NORMAL_GROUP) as u32;
        let carry = if self.geometry.overlap && start > 0 { c as usize } else { 0 };
        let first_new = start * c;
        let new_tokens = n * c as usize;
        let chunk = &mut self.chunk;
        for h in 0..2 {
            // Keep the previous chunk's last `carry` tokens in front.
            if carry > 0 {
                let from = (chunk.tokens - carry) * d;
                chunk.values[h].copy_within(from..from + carry * d, 0);
                chunk.gates[h].copy_within(from..from + carry * d, 0);
            }
            chunk.values[h].resize((carry + new_tokens) * d, 0.0);
            chunk.gates[h].resize((carry + new_tokens) * d, 0.0);
        }
        chunk.first_token = first_new - carry as u64;
        chunk.tokens = carry + new_tokens;
        let keep = (1.0 - self.rho * self.rho).sqrt();
        let common = self.hay.common();
        let mut eps = vec![0.0f32; d];
        for k in 0..new_tokens {
            let t = first_new + k as u64;
            let slot = (t % c) as usize;
            for h in 0..2 {
                rng::fill_normals(self.token_seed, t, h as u32 * groups, &mut eps);
                let state = &mut self.ar_state[h * d..(h + 1) * d];
                let values = &mut chunk.values[h][(carry + k) * d..(carry + k + 1) * d];
                for j in 0..d {
                    let z = if self.ar_started && self.rho > 0.0 { self.rho * state[j] + keep * eps[j] } else { eps[j] };
                    state[j] = z;
                    values[j] = common[j] + self.token_std[j] * z;
                }
                let gates = &mut chunk.gates[h][(carry + k) * d..(carry + k + 1) * d];
                gates.copy_from_slice(&self.gate_bias[h][slot * d..(slot + 1) * d]);
                if self.gate_noise > 0.0 {
                    rng::fill_normals(self.token_seed, t, (2 + h as u32) * groups, &mut eps);
                    for (g, &e) in gates.iter_mut().zip(&eps) {
                        *g += self.gate_noise * e;
                    }
                }
            }
            self.ar_started = true;
        }
    }

    /// Pools `row` from its window's tokens (the chunk's, or `scratch.tokens`
    /// already drawn by the shortcut), adding item offsets and gate boosts.
    fn pool_row(&self, row: u64, items: &[Item], scratch: &mut PoolScratch, out: &mut [f32]) {
        let d = self.d;
        let c = self.geometry.ratio;
        let window = self.geometry.row_tokens(row);
        let own = row * c;
        let slots = (window.end - window.start) as usize;
        for (slot, t) in window.enumerate() {
            let half = usize::from(t < own);
            let range = slot * d..(slot + 1) * d;
            if self.token_level {
                let k = (t - self.chunk.first_token) as usize;
                scratch.tokens[range.clone()].copy_from_slice(&self.chunk.values[half][k * d..(k + 1) * d]);
                scratch.gates[range.clone()].copy_from_slice(&self.chunk.gates[half][k * d..(k + 1) * d]);
            } else {
                let s = (t % c) as usize;
                scratch.gates[range.clone()].copy_from_slice(&self.gate_bias[half][s * d..(s + 1) * d]);
            }
            for item in items.iter().filter(|i| i.tokens.contains(&t)) {
                for (x, &o) in scratch.tokens[range.clone()].iter_mut().zip(&self.offsets[item.offset]) {
                    *x += o;
                }
                for g in &mut scratch.gates[range.clone()] {
                    *g += self.boost;
                }
            }
        }
        compressor::pool_window(&scratch.tokens[..slots * d], &scratch.gates[..slots * d], slots, d, out);
    }
}

struct PoolScratch {
    tokens: Vec<f32>,
    gates: Vec<f32>,
}

impl PoolScratch {
    fn new(slots: usize, d: usize) -> Self {
        PoolScratch { tokens: vec![0.0; slots * d], gates: vec![0.0; slots * d] }
    }
}

/// sqrt(Σ_j a_j²) per channel for softmax weights a over a window's gate
/// biases (the own half, and the previous half when `overlap`).
fn pooled_std_factors(gate_bias: &[Vec<f32>; 2], c: usize, d: usize, overlap: bool) -> Vec<f32> {
    (0..d)
        .map(|ch| {
            let mut logits: Vec<f64> = (0..c).map(|s| f64::from(gate_bias[0][s * d + ch])).collect();
            if overlap {
                logits.extend((0..c).map(|s| f64::from(gate_bias[1][s * d + ch])));
            }
            let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = logits.iter().map(|&l| (l - m).exp()).collect();
            let sum: f64 = e.iter().sum();
            (e.iter().map(|&x| (x / sum).powi(2)).sum::<f64>()).sqrt() as f32
        })
        .collect()
}

/// An offset of the needle's norm at cosine similarity `similarity` to it:
/// `‖δ‖ (s·δ̂ + sqrt(1 − s²)·ê)` with ê a random unit vector orthogonal to δ.
fn distractor_offset(needle: &[f32], norm: f64, similarity: f64, rng: &mut impl Rng) -> Vec<f32> {
    let unit: Vec<f64> = needle.iter().map(|&x| if norm > 0.0 { f64::from(x) / norm } else { 0.0 }).collect();
    let mut e: Vec<f64> = (0..needle.len()).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
    let along: f64 = e.iter().zip(&unit).map(|(a, b)| a * b).sum();
    for (x, u) in e.iter_mut().zip(&unit) {
        *x -= along * u;
    }
    let e_norm = e.iter().map(|x| x * x).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
    let orth = (1.0 - similarity * similarity).max(0.0).sqrt();
    unit.iter().zip(&e).map(|(&u, &x)| (norm * (similarity * u + orth * x / e_norm)) as f32).collect()
}

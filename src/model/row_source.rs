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
//! Every row then gets the haystack's structure (content and relevance,
//! [`TrialHaystack::add_structure`]); pooled rows are RMS-normalised, other
//! rows get the scenario's key norm (V3.2's LayerNorm) if any, then the
//! norm's learned weight and bias; with RoPE every row is then rotated at
//! its position `ratio · row`
//! ([`TrialRows::finalize`]).

use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::model::compressor;
use crate::model::geometry::CompressionGeometry;
use crate::model::haystack::{GenerativeModel, TrialHaystack};
use crate::model::physics::{KeyNorm, Physics};
use crate::model::rope::{Pairing, RopeConfig};
use rand::Rng;
use rand_distr::StandardNormal;
use std::ops::Range;

/// Noise rows of [`TrialRows::sampled_special_row`]'s redraws: far beyond any
/// context (and beyond the tail sampler's proposal rows at 2^40).
const REDRAW_FIRST_ROW: u64 = 1 << 44;

/// A needle or a distractor in one context: its tokens and which key offset it adds.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub tokens: Range<u64>,
    /// 0: the needle; 1 … n: distractor n.
    pub offset: usize,
}

/// A trial's row generator. Chunks come in order from row 0, or in any order
/// on clones when [`TrialRows::chunks_are_independent`].
#[derive(Clone)]
pub struct TrialRows<'a> {
    hay: &'a TrialHaystack,
    geometry: CompressionGeometry,
    d: usize,
    rope: Option<RopeConfig>,
    /// The same rotation with the other pair layout (the `rope-swap-*` hypotheses).
    rope_swapped: Option<RopeConfig>,
    pools: bool,
    /// The norm every row gets in [`Self::finalize`] (RMSNorm when pooled).
    row_norm: KeyNorm,
    /// The norm's learned per-channel weight γ (None: all ones) and bias β
    /// (None: zero), drawn per trial.
    norm_weight: Option<Vec<f32>>,
    norm_bias: Option<Vec<f32>>,
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
    /// Softmax weights of a window when the gates are the same for every
    /// window (pooling, no gate noise): [0] a full window (previous half
    /// first), [1] a window of the row's own tokens only (row 0 with overlap).
    /// Pooling with them gives [`compressor::pool_row`]'s bits.
    fixed_weights: Option<[Vec<f32>; 2]>,
    /// Reused by [`Self::pool_row`].
    scratch: PoolScratch,
    /// Normals of one token, [values of half 0 | half 1 | gate noise of half 0 | half 1].
    normals: Vec<f32>,
    /// Softmax weights of the windows redrawn by [`Self::sampled_special_row`],
    /// per (row, items).
    redraw_weights: Vec<(u64, Vec<Item>, Vec<f32>)>,
}

/// Token values and gates of the current chunk, both halves, starting one
/// row's worth of tokens before the chunk (the previous half of its first row).
#[derive(Clone, Default)]
struct TokenChunk {
    first_token: u64,
    tokens: usize,
    /// [half][token · d]
    values: [Vec<f32>; 2],
    gates: [Vec<f32>; 2],
}

/// The pooling weights when no gate noise redraws them per row: [with the
/// overlapping half, own half only].
fn fixed_pool_weights(gate_bias: &[Vec<f32>; 2], overlap: bool, d: usize) -> Result<[Vec<f32>; 2], compressor::CompressorError> {
    let full = compressor::pool_weights(&gate_bias[0], overlap.then_some(&gate_bias[1][..]), d)?;
    let own = compressor::pool_weights(&gate_bias[0], None, d)?;
    Ok([full, own])
}

/// The same RoPE with the other pair layout (`rope-swap-k`).
fn with_other_pairing(r: RopeConfig) -> RopeConfig {
    let other = match r.pairing() {
        Pairing::Interleaved => Pairing::Halves,
        Pairing::Halves => Pairing::Interleaved,
    };
    r.with_pairing(other)
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
            let full = compressor::pooled_std_factors(&gate_bias[0], geometry.overlap.then_some(&gate_bias[1][..]), d)?;
            let first = compressor::pooled_std_factors(&gate_bias[0], None, d)?;
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

        let gate_noise = physics.gate_noise_std as f32;
        // A bad bias (not finite) is left to pool_row, which reports it.
        let fixed_weights =
            (pools && !(gate_noise > 0.0)).then(|| fixed_pool_weights(&gate_bias, geometry.overlap, d)).and_then(Result::ok);
        let token_level = physics.token_level(geometry.ratio);
        let row_norm = physics.row_norm(geometry.ratio);
        let (norm_weight, norm_bias) = norm_parameters(physics, row_norm, d, trial_seed);
        let rho = if token_level { physics.token_correlation() } else { physics.token_correlation().powf(geometry.ratio as f64) };
        Ok(TrialRows {
            hay,
            geometry,
            d,
            rope: physics.rope.config(),
            rope_swapped: physics.rope.config().map(with_other_pairing),
            pools,
            row_norm,
            norm_weight,
            norm_bias,
            token_level,
            gate_bias,
            gate_noise,
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
            fixed_weights,
            scratch: PoolScratch::new(if geometry.overlap { 2 * c } else { c }, d),
            normals: vec![0.0; 4 * d],
            redraw_weights: Vec::new(),
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
        rows.extend(self.hay.recency_span(candidates));
        rows.sort_unstable();
        rows.dedup();
        rows
    }

    /// Adds the recency relevance of `row` in a context of `candidates` rows
    /// ([`TrialHaystack::add_recency`]); call it on a special row's key
    /// before [`Self::finalize_with`].
    pub fn add_recency(&self, row: u64, candidates: u64, key: &mut [f32]) {
        self.hay.add_recency(row, candidates, key);
    }

    /// Whether a chunk's rows depend on nothing but their own positions (no
    /// AR(1) state, no tokens carried over from the previous chunk): then
    /// [`Self::next_chunk`] may start anywhere, and clones of this source
    /// may generate different chunks side by side with the same bits.
    pub fn chunks_are_independent(&self) -> bool {
        self.rho == 0.0 && !self.token_level
    }

    /// Generates rows `start …` into `out` (a whole number of rows) before
    /// normalisation and rotation. Chunks must come in order from row 0
    /// unless [`Self::chunks_are_independent`].
    pub fn next_chunk(&mut self, start: u64, out: &mut [f32]) -> Result<(), SimError> {
        let d = self.d;
        let n = out.len() / d;
        if self.token_level {
            self.fill_tokens(start, n);
            if let Some(weights) = &self.fixed_weights {
                // The same weights for every window: only the values differ.
                let c = self.geometry.ratio;
                let chunk = &self.chunk;
                for (r, out_row) in out.chunks_exact_mut(d).enumerate() {
                    let row = start + r as u64;
                    let window = self.geometry.row_tokens(row);
                    let own = row * c;
                    let w = if window.start < own { &weights[0] } else { &weights[1] };
                    let tokens = window.map(|t| {
                        let k = (t - chunk.first_token) as usize;
                        &chunk.values[usize::from(t < own)][k * d..(k + 1) * d]
                    });
                    compressor::pool_with_weights(tokens, w, d, out_row);
                }
                return Ok(());
            }
            let mut scratch = std::mem::take(&mut self.scratch);
            for (r, row) in out.chunks_exact_mut(d).enumerate() {
                self.pool_row(start + r as u64, &[], 1.0, &mut scratch, row)?;
            }
            self.scratch = scratch;
            return Ok(());
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
        if start == 0 && n > 0 {
            self.spread_first_row(&mut out[..d]);
        }
        Ok(())
    }

    /// Key of `row` with the given items' tokens in it, before normalisation
    /// and rotation. `base` is the row's key from [`Self::next_chunk`]; with
    /// token-level generation the row must lie in the last chunk.
    pub fn special_row(&mut self, row: u64, items: &[Item], base: &[f32], out: &mut [f32]) -> Result<(), SimError> {
        self.special_row_scaled(row, items, base, 1.0, out)
    }

    /// [`Self::special_row`] with every item's key offset multiplied by
    /// `scale` (the gate boosts stay: they are the items' salience, not
    /// their content). Scale 1 gives [`Self::special_row`]'s bits.
    pub fn special_row_scaled(&mut self, row: u64, items: &[Item], base: &[f32], scale: f32, out: &mut [f32]) -> Result<(), SimError> {
        let window = self.geometry.row_tokens(row);
        let holds_item = items.iter().any(|i| i.tokens.start < window.end && window.start < i.tokens.end);
        if !self.pools || !holds_item {
            // A row special only through recency is the shared row itself.
            out.copy_from_slice(base);
            for item in items.iter().filter(|i| i.tokens.start < window.end && window.start < i.tokens.end) {
                for (o, &x) in out.iter_mut().zip(&self.offsets[item.offset]) {
                    *o += x * scale;
                }
            }
            return Ok(());
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        if !self.token_level {
            self.draw_window(row, &mut scratch);
        }
        let pooled = self.pool_row(row, items, scale, &mut scratch, out);
        self.scratch = scratch;
        pooled
    }

    /// A haystack key of `row` before normalisation and rotation (see
    /// [`Self::finalize_at`]), drawn with the noise z of
    /// haystack row `noise_row`, moved by `tilt` (in units of the channel
    /// spread σ) when `shifted`: key = common + σ ⊙ x, x = z (+ tilt). With
    /// `noise_row` beyond every context it is a draw of row `row`'s
    /// distribution independent of the trial's rows. Returns tilt · x, the
    /// data term of the tilted density's log-likelihood ratio (0 for an
    /// empty tilt). Only for independent rows
    /// ([`Physics::rows_are_independent`]): no AR(1) state, no token chunk.
    pub fn sampled_haystack_row(&self, row: u64, noise_row: u64, tilt: &[f64], shifted: bool, out: &mut [f32]) -> f64 {
        self.hay.fill_haystack_row(noise_row, out);
        let (common, sigma) = (self.hay.common(), self.hay.channel_std());
        let mut tz = 0.0;
        for (j, &theta) in tilt.iter().enumerate() {
            if shifted {
                out[j] += (theta * f64::from(sigma[j])) as f32;
            }
            tz += theta * (f64::from(out[j]) - f64::from(common[j])) / f64::from(sigma[j]);
        }
        if row == 0 {
            self.spread_first_row(out);
        }
        tz
    }

    /// Row 0 of an overlapping pooled geometry pools only its own tokens: a
    /// different spread around the common part (nothing to do otherwise).
    fn spread_first_row(&self, key: &mut [f32]) {
        if self.pools && self.geometry.overlap {
            let common = self.hay.common();
            for j in 0..self.d {
                key[j] = common[j] + (key[j] - common[j]) * self.first_row_factor[j];
            }
        }
    }

    /// The key of special row `row` holding `items`, before normalisation
    /// and rotation (see [`Self::finalize_at`]): the trial's
    /// own (`draw` None, the same bits as the full simulation) or an
    /// independent redraw of its tokens (`draw` Some(j), j = 0, 1, …).
    /// Only for independent rows ([`Physics::rows_are_independent`]).
    pub fn sampled_special_row(&mut self, row: u64, items: &[Item], draw: Option<u64>, out: &mut [f32]) -> Result<(), SimError> {
        self.sampled_special_row_scaled(row, items, draw, 1.0, out)
    }

    /// [`Self::sampled_special_row`] with every item's key offset
    /// multiplied by `scale`, as [`Self::special_row_scaled`] does (scale 0:
    /// the needle's bare row, its gate boost kept).
    pub fn sampled_special_row_scaled(
        &mut self,
        row: u64,
        items: &[Item],
        draw: Option<u64>,
        scale: f32,
        out: &mut [f32],
    ) -> Result<(), SimError> {
        let d = self.d;
        if self.pools {
            let mut scratch = std::mem::take(&mut self.scratch);
            let seed = match draw {
                None => self.special_seed,
                Some(j) => rng::derive(self.special_seed, &[tag::PREDICT, j]),
            };
            self.draw_window_seeded(seed, row, &mut scratch);
            let pooled = if draw.is_some() && self.gate_noise <= 0.0 && scale == 1.0 {
                self.pool_redraw(row, items, &mut scratch, out)
            } else {
                self.pool_row(row, items, scale, &mut scratch, out)
            };
            self.scratch = scratch;
            pooled?;
        } else {
            // Fresh draws take their noise from rows no context reaches, one
            // per (draw, row): a draw's rows are as independent as the trial's.
            // Without pooling the scratch is free to hold the base row.
            let mut scratch = std::mem::take(&mut self.scratch);
            let base = &mut scratch.tokens[..d];
            self.hay.fill_haystack_row(draw.map_or(row, |j| REDRAW_FIRST_ROW + (j << 24) + (row & 0xff_ffff)), base);
            let added = self.special_row_scaled(row, items, base, scale, out);
            self.scratch = scratch;
            added?;
        }
        Ok(())
    }

    /// [`Self::finalize`] for rows that are not consecutive: row r of `rows`
    /// is row `row_indices[r]` of the context (the same bits as finalizing
    /// it in its chunk). Cheapest with ascending indices.
    pub fn finalize_at(&self, rows: &mut [f32], row_indices: &[u64]) -> Result<(), SimError> {
        self.hay.add_structure_at(rows, row_indices);
        self.normalise(rows)?;
        if let Some(rope) = &self.rope {
            let positions: Vec<u64> = row_indices.iter().map(|&r| r * self.geometry.ratio).collect();
            rope.rotate_rows_at(rows, &positions)?;
        }
        Ok(())
    }

    /// Whether [`Self::finalize`] changes rows (a norm or RoPE on).
    pub fn finalizes(&self) -> bool {
        self.row_norm != KeyNorm::Off || self.rope.is_some() || self.hay.has_structure()
    }

    /// Normalises every row with the rows' norm (RMSNorm when pooled, the
    /// key norm otherwise), then applies its weight and bias. Unit weight and
    /// zero bias are skipped, so the bits are those of the plain norm.
    fn normalise(&self, rows: &mut [f32]) -> Result<(), SimError> {
        let d = self.d;
        match self.row_norm {
            KeyNorm::Off => return Ok(()),
            KeyNorm::RmsNorm => compressor::rms_norm_rows(rows, d, compressor::RMS_NORM_EPS)?,
            KeyNorm::LayerNorm => compressor::layer_norm_rows(rows, d, compressor::LAYER_NORM_EPS)?,
        }
        if let Some(weight) = &self.norm_weight {
            for row in rows.chunks_exact_mut(d) {
                row.iter_mut().zip(weight).for_each(|(x, &g)| *x *= g);
            }
        }
        if let Some(bias) = &self.norm_bias {
            for row in rows.chunks_exact_mut(d) {
                row.iter_mut().zip(bias).for_each(|(x, &b)| *x += b);
            }
        }
        Ok(())
    }

    /// Adds the haystack's structure, normalises every row
    /// ([`Self::normalise`]) and rotates it at its position.
    pub fn finalize(&self, first_row: u64, rows: &mut [f32]) -> Result<(), SimError> {
        self.finalize_with(first_row, rows, false)
    }

    /// [`Self::finalize`], with the RoPE pair layout swapped when `swapped`.
    pub fn finalize_with(&self, first_row: u64, rows: &mut [f32], swapped: bool) -> Result<(), SimError> {
        self.finalize_before_rope(first_row, rows)?;
        self.rotate_keys(first_row, rows, swapped)
    }

    /// The part of [`Self::finalize_with`] that does not depend on the RoPE
    /// pair layout (structure, norm): done once for both layouts.
    pub fn finalize_before_rope(&self, first_row: u64, rows: &mut [f32]) -> Result<(), SimError> {
        self.hay.add_structure(first_row, rows);
        self.normalise(rows)
    }

    /// The rest of [`Self::finalize_with`]: rotates rows from `first_row`
    /// at their positions, the pair layout swapped when `swapped`.
    pub fn rotate_keys(&self, first_row: u64, rows: &mut [f32], swapped: bool) -> Result<(), SimError> {
        if let Some(rope) = if swapped { &self.rope_swapped } else { &self.rope } {
            rope.rotate_rows(rows, first_row * self.geometry.ratio, self.geometry.ratio)?;
        }
        Ok(())
    }

    /// Rotates every head's query to the decode position `position`, with
    /// the RoPE pair layout swapped when `swapped`.
    pub fn rotate_queries(&self, queries: &mut [f32], position: u64, swapped: bool) -> Result<(), SimError> {
        if let Some(rope) = if swapped { &self.rope_swapped } else { &self.rope } {
            rope.rotate_rows(queries, position, 0)?;
        }
        Ok(())
    }

    /// Shortcut: draws the independent tokens of `row`'s window into `scratch`.
    fn draw_window(&self, row: u64, scratch: &mut PoolScratch) {
        self.draw_window_seeded(self.special_seed, row, scratch);
    }

    /// [`Self::draw_window`] from the token stream `seed`.
    fn draw_window_seeded(&self, seed: u64, row: u64, scratch: &mut PoolScratch) {
        let d = self.d;
        let groups = d.div_ceil(rng::NORMAL_GROUP) as u32;
        let common = self.hay.common();
        let window = self.geometry.row_tokens(row);
        let slots = (window.end - window.start) as usize;
        if d.is_multiple_of(rng::NORMAL_GROUP) {
            // Slot s is groups s·groups …: one call draws them all.
            rng::fill_normals(seed, row, 0, &mut scratch.tokens[..slots * d]);
        }
        for slot in 0..slots {
            let v = &mut scratch.tokens[slot * d..(slot + 1) * d];
            if !d.is_multiple_of(rng::NORMAL_GROUP) {
                rng::fill_normals(seed, row, slot as u32 * groups, v);
            }
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
        // Without gate noise every token's gates are its slot's bias: read from there.
        let noisy = self.gate_noise > 0.0;
        for h in 0..2 {
            // Keep the previous chunk's last `carry` tokens in front.
            if carry > 0 {
                let from = (chunk.tokens - carry) * d;
                chunk.values[h].copy_within(from..from + carry * d, 0);
                if noisy {
                    chunk.gates[h].copy_within(from..from + carry * d, 0);
                }
            }
            chunk.values[h].resize((carry + new_tokens) * d, 0.0);
            if noisy {
                chunk.gates[h].resize((carry + new_tokens) * d, 0.0);
            }
        }
        chunk.first_token = first_new - carry as u64;
        chunk.tokens = carry + new_tokens;
        let keep = (1.0 - self.rho * self.rho).sqrt();
        let common = self.hay.common();
        // Token t's normals: values of half h are groups h·groups …, gate
        // noise of half h groups (2 + h)·groups …; drawn in one call when
        // head_dim is a whole number of groups (the same numbers).
        let drawn = if noisy { 4 } else { 2 };
        let batch = d.is_multiple_of(rng::NORMAL_GROUP);
        let normals = &mut self.normals;
        for k in 0..new_tokens {
            let t = first_new + k as u64;
            let slot = (t % c) as usize;
            if batch {
                rng::fill_normals(self.token_seed, t, 0, &mut normals[..drawn * d]);
            } else {
                for part in 0..drawn {
                    rng::fill_normals(self.token_seed, t, part as u32 * groups, &mut normals[part * d..(part + 1) * d]);
                }
            }
            for h in 0..2 {
                let eps = &normals[h * d..(h + 1) * d];
                let state = &mut self.ar_state[h * d..(h + 1) * d];
                let values = &mut chunk.values[h][(carry + k) * d..(carry + k + 1) * d];
                if self.ar_started && self.rho > 0.0 {
                    for j in 0..d {
                        let z = self.rho * state[j] + keep * eps[j];
                        state[j] = z;
                        values[j] = common[j] + self.token_std[j] * z;
                    }
                } else {
                    for j in 0..d {
                        let z = eps[j];
                        state[j] = z;
                        values[j] = common[j] + self.token_std[j] * z;
                    }
                }
                if noisy {
                    let gates = &mut chunk.gates[h][(carry + k) * d..(carry + k + 1) * d];
                    gates.copy_from_slice(&self.gate_bias[h][slot * d..(slot + 1) * d]);
                    for (g, &e) in gates.iter_mut().zip(&normals[(2 + h) * d..(3 + h) * d]) {
                        *g += self.gate_noise * e;
                    }
                }
            }
            self.ar_started = true;
        }
    }

    /// Pools `row` from its window's tokens (the chunk's, or `scratch.tokens`
    /// already drawn by the shortcut), adding item offsets and gate boosts.
    fn pool_row(&self, row: u64, items: &[Item], scale: f32, scratch: &mut PoolScratch, out: &mut [f32]) -> Result<(), SimError> {
        let d = self.d;
        let prev = self.prepare_window(row, items, scale, scratch);
        let slots = prev + self.geometry.ratio as usize;
        let half = |from: usize, to: usize| compressor::TokenHalf {
            values: &scratch.tokens[from * d..to * d],
            gate_logits: &scratch.gates[from * d..to * d],
        };
        let previous = (prev > 0).then(|| half(0, prev));
        compressor::pool_row(half(prev, slots), previous, d, out)?;
        Ok(())
    }

    /// [`Self::pool_row`] for the shortcut's redraws: without gate noise the
    /// gates of a (row, items) window are the same in every redraw, so its
    /// softmax weights are computed once and kept (the same bits as
    /// [`compressor::pool_row`], which uses the same two steps).
    fn pool_redraw(&mut self, row: u64, items: &[Item], scratch: &mut PoolScratch, out: &mut [f32]) -> Result<(), SimError> {
        let d = self.d;
        let prev = self.prepare_window(row, items, 1.0, scratch);
        let slots = prev + self.geometry.ratio as usize;
        let cached = self.redraw_weights.iter().position(|(r, it, _)| *r == row && it.as_slice() == items);
        let at = match cached {
            Some(at) => at,
            None => {
                let previous = (prev > 0).then(|| &scratch.gates[..prev * d]);
                let weights = compressor::pool_weights(&scratch.gates[prev * d..slots * d], previous, d)?;
                if self.redraw_weights.len() >= 16 {
                    self.redraw_weights.clear();
                }
                self.redraw_weights.push((row, items.to_vec(), weights));
                self.redraw_weights.len() - 1
            }
        };
        compressor::pool_with_weights(scratch.tokens[..slots * d].chunks_exact(d), &self.redraw_weights[at].2, d, out);
        Ok(())
    }

    /// Writes `row`'s window into `scratch` (token values with item offsets
    /// added, gate logits with item boosts), previous half first; returns
    /// the number of previous-half slots. Offsets are multiplied by `scale`.
    fn prepare_window(&self, row: u64, items: &[Item], scale: f32, scratch: &mut PoolScratch) -> usize {
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
                if self.gate_noise > 0.0 {
                    scratch.gates[range.clone()].copy_from_slice(&self.chunk.gates[half][k * d..(k + 1) * d]);
                } else {
                    let s = (t % c) as usize;
                    scratch.gates[range.clone()].copy_from_slice(&self.gate_bias[half][s * d..(s + 1) * d]);
                }
            } else {
                let s = (t % c) as usize;
                scratch.gates[range.clone()].copy_from_slice(&self.gate_bias[half][s * d..(s + 1) * d]);
            }
            for item in items.iter().filter(|i| i.tokens.contains(&t)) {
                for (x, &o) in scratch.tokens[range.clone()].iter_mut().zip(&self.offsets[item.offset]) {
                    *x += o * scale;
                }
                for g in &mut scratch.gates[range.clone()] {
                    *g += self.boost;
                }
            }
        }
        // Slots run previous half first, then the row's own tokens.
        slots - c as usize
    }
}

/// Every candidate row's key of one context, as scored (pooled, normalised,
/// rotated, with the needle and distractors in), and the query rotated to
/// the context's last position: for dumps and checks, not the hot path
/// (it holds a whole context).
#[allow(clippy::too_many_arguments)]
pub fn context_keys(
    model: &GenerativeModel,
    physics: &Physics,
    geometry: CompressionGeometry,
    hay: &TrialHaystack,
    trial_seed: u64,
    context: u64,
    needle: Range<u64>,
    needle_scale: Option<f32>,
) -> Result<(Vec<f32>, Vec<f32>), SimError> {
    let d = model.shape.head_dim;
    let mut src = TrialRows::new(model, physics, geometry, hay, trial_seed)?;
    let rows = geometry.candidate_rows(context) as usize;
    let items = src.items(context, needle);
    let special = src.special_rows(&items, rows as u64);
    let mut keys = vec![0.0f32; rows * d];
    let (mut key, mut bare) = (vec![0.0f32; d], vec![0.0f32; d]);
    const CHUNK: usize = 256;
    for start in (0..rows).step_by(CHUNK) {
        let n = CHUNK.min(rows - start);
        let chunk = &mut keys[start * d..(start + n) * d];
        src.next_chunk(start as u64, chunk)?;
        for &row in special.iter().filter(|&&r| (start..start + n).contains(&(r as usize))) {
            let at = (row as usize - start) * d;
            src.special_row(row, &items, &chunk[at..at + d], &mut key)?;
            src.add_recency(row, rows as u64, &mut key);
            if let Some(scale) = needle_scale {
                // As the trial builds it: both ends with their recency in.
                src.special_row_scaled(row, &items, &chunk[at..at + d], 0.0, &mut bare)?;
                src.add_recency(row, rows as u64, &mut bare);
                let full = key.clone();
                scaled_key(&bare, &full, scale, &mut key);
            }
            chunk[at..at + d].copy_from_slice(&key);
        }
        src.finalize(start as u64, chunk)?;
    }
    let mut queries = hay.queries.clone();
    src.rotate_queries(&mut queries, context.saturating_sub(1), false)?;
    Ok((keys, queries))
}

/// The quantile needle's key before normalisation at offset scale α:
/// bare + α·(full − bare), with `bare` the row at scale 0 (the gate boosts
/// kept) and `full` at scale 1. Pooling is linear in the token values, so
/// this is the row pooled with α·δ, up to rounding; it is the definition
/// the trial and the dump share.
pub fn scaled_key(bare: &[f32], full: &[f32], scale: f32, out: &mut [f32]) {
    for ((o, &b), &f) in out.iter_mut().zip(bare).zip(full) {
        *o = b + scale * (f - b);
    }
}

#[derive(Clone, Default)]
struct PoolScratch {
    tokens: Vec<f32>,
    gates: Vec<f32>,
}

impl PoolScratch {
    fn new(slots: usize, d: usize) -> Self {
        PoolScratch { tokens: vec![0.0; slots * d], gates: vec![0.0; slots * d] }
    }
}

/// A trial's learned norm parameters for rows normalised by `norm`: the
/// weight γ with ln γ_j ~ N(0, s²) (None when s = 0: γ = 1), and for
/// LayerNorm the bias β = b·‖γ‖·v̂, v̂ a uniformly random unit vector (None
/// when b = 0). Each comes from its own stream (tag `KEY_NORM`), so no other
/// draw of the trial changes with them, nor one with the other.
fn norm_parameters(physics: &Physics, norm: KeyNorm, d: usize, trial_seed: u64) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
    if norm == KeyNorm::Off {
        return (None, None);
    }
    let spread = physics.norm_weight_spread;
    let weight: Option<Vec<f32>> = (spread > 0.0).then(|| {
        let mut rng = rng::stream(trial_seed, &[tag::KEY_NORM, 0]);
        (0..d).map(|_| (spread * rng.sample::<f64, _>(StandardNormal)).exp() as f32).collect()
    });
    let bias = (norm == KeyNorm::LayerNorm && physics.norm_bias > 0.0).then(|| {
        let mut rng = rng::stream(trial_seed, &[tag::KEY_NORM, 1]);
        let dir: Vec<f64> = (0..d).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
        let len = dir.iter().map(|x| x * x).sum::<f64>().sqrt().max(f64::MIN_POSITIVE);
        let gamma = weight.as_ref().map_or((d as f64).sqrt(), |w| w.iter().map(|&g| f64::from(g).powi(2)).sum::<f64>().sqrt());
        dir.iter().map(|&x| (physics.norm_bias * gamma * x / len) as f32).collect()
    });
    (weight, bias)
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

#[cfg(test)]
mod tests;

//! Rotary position embedding (RoPE) of the indexer's query and key vectors,
//! laid out as DeepSeek-V3.2 and DeepSeek-V4 lay it out, with YaRN's
//! frequency correction. Sources and assumptions: docs/MODEL.md, "Position
//! (RoPE)".
//!
//! A rotary span of `len` dims holds `len / 2` pairs; pair m turns by the
//! angle `position · f_m`. Which dims form pair m is the [`Pairing`]:
//! adjacent dims (V4) or dims m and m + len/2 (V3.2 indexer).
//!
//! **Accuracy.** Frequencies are the reference's f32 table (see
//! [`RopeConfig::frequencies`]). Given them, the angle `position · f_m` is
//! taken exactly (a double-double product), reduced modulo π/2 with a
//! double-double π/2, and its cosine and sine come from our own series in
//! f64 (no libm, so every machine gives the same bits). The rotated pair is
//! computed in f64 and rounded to f32 once. For every position up to
//! [`MAX_POSITION`], each output value `out` satisfies
//! `|out − exact| ≤ ½·ulp_f32(exact) + 2⁻⁴⁴·(|x| + |y|)`, where `exact` is the
//! real-number rotation of the pair (x, y) by `position · f_m` (tested against
//! libm with an exact angle, positions up to 2⁴⁰).
//!
//! **Speed.** cos and sin of `p · f_m` are composed from three parts of p
//! (bits 0–7 and 8–15 from tables built once per configuration, bits 16 and
//! up computed when they change), with the angle-addition formula in f64.
//! The composition depends on the position only, so one vector rotated alone
//! and the same vector inside any batch get identical bits.

use std::fmt;
use std::sync::{Arc, OnceLock};
use thiserror::Error;

/// Largest position accepted (2⁴⁸): the exact-angle reduction keeps its error
/// far below f32 resolution well beyond this.
pub const MAX_POSITION: u64 = 1 << 48;

/// Bits of the position covered by each of the two tables.
const TABLE_BITS: u32 = 8;
const TABLE_LEN: usize = 1 << TABLE_BITS;

/// The dims of a head that carry rotary position: `offset .. offset + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeDims {
    pub offset: usize,
    pub len: usize,
}

impl RopeDims {
    /// The first `len` dims (DeepSeek-V3.2 indexer: first 64 of 128).
    pub const fn first(len: usize) -> Self {
        Self { offset: 0, len }
    }

    /// The last `len` dims of a `head_dim` head (DeepSeek-V4: last 64 of 128).
    pub const fn last(len: usize, head_dim: usize) -> Self {
        Self { offset: head_dim.saturating_sub(len), len }
    }
}

/// Which two dims of the rotary span form pair m.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pairing {
    /// Dims 2m and 2m + 1 of the span (DeepSeek-V4; V3.2's MLA).
    Interleaved,
    /// Dims m and m + len/2 of the span (the DeepSeek-V3.2 indexer).
    Halves,
}

/// YaRN's frequency correction: fast-turning pairs keep their frequency,
/// slow-turning pairs are divided by `factor`, a linear ramp in between.
/// (YaRN's `mscale` multiplies the attention softmax scale only; the indexer
/// does not use it, so it is not here.)
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    pub factor: f64,
    /// The context length the model was first trained at.
    pub original_max_position: u64,
    /// Pairs that turn at least `beta_fast` times over the original length keep their frequency.
    pub beta_fast: f64,
    /// Pairs that turn at most `beta_slow` times over it are divided by `factor`.
    pub beta_slow: f64,
}

impl Yarn {
    /// The ramp's ends (low, high) in pair index, as the DeepSeek reference
    /// computes them: the fractional pair index at which a pair turns
    /// `beta_fast` (floored) and `beta_slow` (ceiled) times over the original
    /// length, clamped to 0 … rope_len − 1. (The reference clamps with the
    /// span length rather than the pair count; kept for fidelity, it has no
    /// effect once the ramp is clamped to 0 … 1.)
    pub fn correction_range(&self, rope_len: usize, theta: f64) -> (i64, i64) {
        let dim_for = |turns: f64| {
            let original = self.original_max_position as f64;
            rope_len as f64 * (original / (turns * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln())
        };
        let low = dim_for(self.beta_fast).floor() as i64;
        let high = dim_for(self.beta_slow).ceil() as i64;
        (low.max(0), high.min(rope_len as i64 - 1))
    }
}

/// Invalid RoPE settings or arguments. Nothing in this module panics on bad
/// input; it returns one of these.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum RopeError {
    #[error("rope dims {offset}..{offset}+{len} must be a non-empty, even-length range inside the head's {head_dim} dims")]
    Dims { offset: usize, len: usize, head_dim: usize },
    #[error("rope theta = {0} must be finite and > 1")]
    Theta(f64),
    #[error("YaRN factor = {0} must be finite and ≥ 1")]
    YarnFactor(f64),
    #[error("YaRN original_max_position must be ≥ 1")]
    YarnOriginal,
    #[error("YaRN beta_fast = {fast}, beta_slow = {slow}: need finite beta_fast ≥ beta_slow > 0")]
    YarnBetas { fast: f64, slow: f64 },
    #[error("vector of {len} values, expected the head dim {head_dim}")]
    VectorLength { len: usize, head_dim: usize },
    #[error("{len} values do not form whole rows of the head dim {head_dim}")]
    RowsLength { len: usize, head_dim: usize },
    #[error("position {position} is beyond the largest supported, {max}")]
    Position { position: u128, max: u64 },
}

impl From<RopeError> for crate::error::SimError {
    fn from(e: RopeError) -> Self {
        crate::error::SimError::Rope(e.to_string())
    }
}

/// A validated RoPE layout with its frequencies and angle tables.
#[derive(Clone)]
pub struct RopeConfig {
    head_dim: usize,
    dims: RopeDims,
    pairing: Pairing,
    theta: f64,
    yarn: Option<Yarn>,
    freqs: Vec<f32>,
    /// cos and sin of `b · 2^(8·level) · f_m`, index `[level]`, then `b · pairs + m`.
    tables: Arc<[AngleTable; 2]>,
}

impl fmt::Debug for RopeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RopeConfig")
            .field("head_dim", &self.head_dim)
            .field("dims", &self.dims)
            .field("pairing", &self.pairing)
            .field("theta", &self.theta)
            .field("yarn", &self.yarn)
            .finish_non_exhaustive()
    }
}

/// Equal settings give equal frequencies and tables, so those are not compared.
impl PartialEq for RopeConfig {
    fn eq(&self, other: &Self) -> bool {
        self.head_dim == other.head_dim
            && self.dims == other.dims
            && self.pairing == other.pairing
            && self.theta == other.theta
            && self.yarn == other.yarn
    }
}

impl RopeConfig {
    /// Checks the settings and precomputes frequencies and tables.
    pub fn new(head_dim: usize, dims: RopeDims, pairing: Pairing, theta: f64, yarn: Option<Yarn>) -> Result<Self, RopeError> {
        let inside = dims.offset.checked_add(dims.len).is_some_and(|end| end <= head_dim);
        if dims.len == 0 || !dims.len.is_multiple_of(2) || !inside {
            return Err(RopeError::Dims { offset: dims.offset, len: dims.len, head_dim });
        }
        if !(theta.is_finite() && theta > 1.0) {
            return Err(RopeError::Theta(theta));
        }
        if let Some(y) = yarn {
            if !(y.factor.is_finite() && y.factor >= 1.0) {
                return Err(RopeError::YarnFactor(y.factor));
            }
            if y.original_max_position == 0 {
                return Err(RopeError::YarnOriginal);
            }
            if !(y.beta_fast.is_finite() && y.beta_slow > 0.0 && y.beta_fast >= y.beta_slow) {
                return Err(RopeError::YarnBetas { fast: y.beta_fast, slow: y.beta_slow });
            }
        }
        let freqs = reference_frequencies(dims.len, theta, yarn);
        let tables = Arc::new([0u32, 1].map(|level| {
            let mut table =
                AngleTable { cos: Vec::with_capacity(TABLE_LEN * freqs.len()), sin: Vec::with_capacity(TABLE_LEN * freqs.len()) };
            for b in 0..TABLE_LEN as u64 {
                let position = b << (TABLE_BITS * level);
                for &f in &freqs {
                    let [c, s] = cos_sin_of_product(position, f as f64);
                    table.cos.push(c);
                    table.sin.push(s);
                }
            }
            table
        }));
        Ok(Self { head_dim, dims, pairing, theta, yarn, freqs, tables })
    }

    /// DeepSeek-V3.2 indexer: 128 dims, rope on the first 64, halves pairing,
    /// theta 10000, YaRN factor 40 over an original 4096 (betas 32 and 1).
    /// Built once per process (a trial asks for it, and its tables are
    /// 16K cos/sin evaluations); clones share the tables.
    pub fn deepseek_v32() -> Self {
        static V32: OnceLock<RopeConfig> = OnceLock::new();
        V32.get_or_init(|| {
            let yarn = Yarn { factor: 40.0, original_max_position: 4096, beta_fast: 32.0, beta_slow: 1.0 };
            Self::new(128, RopeDims::first(64), Pairing::Halves, 10_000.0, Some(yarn)).expect("valid built-in layout")
        })
        .clone()
    }

    /// DeepSeek-V4 compressed layers (where the indexer lives): 128 dims,
    /// rope on the last 64, interleaved, theta 160000, YaRN factor 16 over an
    /// original 65536 (betas 32 and 1).
    /// Built once per process, like [`Self::deepseek_v32`].
    pub fn deepseek_v4() -> Self {
        static V4: OnceLock<RopeConfig> = OnceLock::new();
        V4.get_or_init(|| {
            let yarn = Yarn { factor: 16.0, original_max_position: 65_536, beta_fast: 32.0, beta_slow: 1.0 };
            Self::new(128, RopeDims::last(64, 128), Pairing::Interleaved, 160_000.0, Some(yarn)).expect("valid built-in layout")
        })
        .clone()
    }

    /// The same layout with another pairing (every pairing fits any valid span).
    pub fn with_pairing(&self, pairing: Pairing) -> Self {
        Self { pairing, ..self.clone() }
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    pub fn dims(&self) -> RopeDims {
        self.dims
    }

    pub fn pairing(&self) -> Pairing {
        self.pairing
    }

    pub fn theta(&self) -> f64 {
        self.theta
    }

    pub fn yarn(&self) -> Option<Yarn> {
        self.yarn
    }

    /// Radians per position of pair m, m = 0 … len/2 − 1, as the DeepSeek
    /// reference computes them in f32: f_m = 1 / theta^(2m/len), then YaRN's
    /// blend `f/factor·(1 − smooth) + f·smooth` in f32 in that order.
    pub fn frequencies(&self) -> &[f32] {
        &self.freqs
    }

    /// The two dims (within the head) of pair m.
    pub fn pair_dims(&self, m: usize) -> (usize, usize) {
        let o = self.dims.offset;
        match self.pairing {
            Pairing::Interleaved => (o + 2 * m, o + 2 * m + 1),
            Pairing::Halves => (o + m, o + m + self.dims.len / 2),
        }
    }

    /// Rotates one head vector to `position`.
    pub fn rotate(&self, v: &mut [f32], position: u64) -> Result<(), RopeError> {
        if v.len() != self.head_dim {
            return Err(RopeError::VectorLength { len: v.len(), head_dim: self.head_dim });
        }
        self.rotate_rows(v, position, 0)
    }

    /// Rotates consecutive head vectors; row r sits at position
    /// `first_position + r · position_stride` (compressed row i at ratio·i:
    /// stride = ratio; all heads of one query: stride 0).
    pub fn rotate_rows(&self, rows: &mut [f32], first_position: u64, position_stride: u64) -> Result<(), RopeError> {
        if !rows.len().is_multiple_of(self.head_dim) {
            return Err(RopeError::RowsLength { len: rows.len(), head_dim: self.head_dim });
        }
        let n = rows.len() / self.head_dim;
        if n == 0 {
            return Ok(());
        }
        let last = first_position as u128 + (n as u128 - 1) * position_stride as u128;
        if last > MAX_POSITION as u128 {
            return Err(RopeError::Position { position: last, max: MAX_POSITION });
        }
        self.rotate_checked(rows, (0..n as u64).map(|r| first_position + r * position_stride));
        Ok(())
    }

    /// Rotates row r of `rows` (row-major, head_dim wide) at `positions[r]`:
    /// the same bits as [`Self::rotate_rows`] for each row. Cheapest when
    /// positions come in ascending order (the coarse angles are reused).
    pub fn rotate_rows_at(&self, rows: &mut [f32], positions: &[u64]) -> Result<(), RopeError> {
        if rows.len() != positions.len() * self.head_dim {
            return Err(RopeError::RowsLength { len: rows.len(), head_dim: self.head_dim });
        }
        if let Some(&last) = positions.iter().max().filter(|&&p| p > MAX_POSITION) {
            return Err(RopeError::Position { position: u128::from(last), max: MAX_POSITION });
        }
        self.rotate_checked(rows, positions.iter().copied());
        Ok(())
    }

    /// The rotation itself, positions already checked. Each pair's angle is
    /// (high ⊕ mid) ⊕ low in that order, so the bits do not depend on how
    /// rows are batched; high ⊕ mid is kept while positions share their bits
    /// from 8 up (a chunk's rows at stride 4 share them 64 rows at a time).
    /// Cosines and sines sit in separate arrays so that the angle sums and
    /// the rotation run 8 pairs to a vector (plain f64 operations, no FMA:
    /// the same bits on every path).
    fn rotate_checked(&self, rows: &mut [f32], positions: impl Iterator<Item = u64>) {
        #[cfg(target_arch = "x86_64")]
        if crate::base::simd::level().avx512() {
            // SAFETY: the level is AVX-512, so the CPU has AVX-512F; the
            // rotation accesses memory through slices only.
            return unsafe { self.rotate_checked_avx512(rows, positions) };
        }
        self.rotate_checked_inline(rows, positions)
    }

    /// The same code compiled for AVX-512 (no FMA is formed: the same bits).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn rotate_checked_avx512(&self, rows: &mut [f32], positions: impl Iterator<Item = u64>) {
        self.rotate_checked_inline(rows, positions)
    }

    #[inline(always)]
    fn rotate_checked_inline(&self, rows: &mut [f32], positions: impl Iterator<Item = u64>) {
        let pairs = self.freqs.len();
        let (offset, len) = (self.dims.offset, self.dims.len);
        let mut high = vec![[1.0, 0.0]; pairs];
        let mut high_key = 0u64;
        let (mut hm_cos, mut hm_sin) = (vec![1.0f64; pairs], vec![0.0f64; pairs]);
        let mut mid_key = u64::MAX;
        let [low_table, mid_table] = &*self.tables;
        for (row, p) in rows.chunks_exact_mut(self.head_dim).zip(positions) {
            let key = p >> (2 * TABLE_BITS);
            if key != high_key {
                let base = key << (2 * TABLE_BITS);
                for (h, &f) in high.iter_mut().zip(&self.freqs) {
                    *h = cos_sin_of_product(base, f as f64);
                }
                high_key = key;
                mid_key = u64::MAX;
            }
            if p >> TABLE_BITS != mid_key {
                mid_key = p >> TABLE_BITS;
                let (mid_cos, mid_sin) = mid_table.at(mid_key as usize % TABLE_LEN, pairs);
                for m in 0..pairs {
                    [hm_cos[m], hm_sin[m]] = add_angles(high[m], [mid_cos[m], mid_sin[m]]);
                }
            }
            let (low_cos, low_sin) = low_table.at(p as usize % TABLE_LEN, pairs);
            let part = &mut row[offset..offset + len];
            let angle = |m: usize| add_angles([hm_cos[m], hm_sin[m]], [low_cos[m], low_sin[m]]);
            match self.pairing {
                Pairing::Interleaved => {
                    for (m, xy) in part.chunks_exact_mut(2).enumerate() {
                        let [c, s] = angle(m);
                        let (x, y) = (xy[0] as f64, xy[1] as f64);
                        xy[0] = (x * c - y * s) as f32;
                        xy[1] = (x * s + y * c) as f32;
                    }
                }
                Pairing::Halves => {
                    let (xs, ys) = part.split_at_mut(len / 2);
                    for (m, (x, y)) in xs.iter_mut().zip(ys.iter_mut()).enumerate() {
                        let [c, s] = angle(m);
                        let (xv, yv) = (*x as f64, *y as f64);
                        *x = (xv * c - yv * s) as f32;
                        *y = (xv * s + yv * c) as f32;
                    }
                }
            }
        }
    }
}

/// cos and sin of one table's angles, `[b · pairs + m]`.
struct AngleTable {
    cos: Vec<f64>,
    sin: Vec<f64>,
}

impl AngleTable {
    /// The cosines and sines of entry `b` (all pairs).
    fn at(&self, b: usize, pairs: usize) -> (&[f64], &[f64]) {
        let span = b * pairs..(b + 1) * pairs;
        (&self.cos[span.clone()], &self.sin[span])
    }
}

/// The reference's frequency table (f32 arithmetic, same operation order).
fn reference_frequencies(len: usize, theta: f64, yarn: Option<Yarn>) -> Vec<f32> {
    let mut freqs: Vec<f32> = (0..len / 2)
        .map(|m| {
            let exponent = (2 * m) as f32 / len as f32;
            // An f32 power, as the reference's `base ** f32_tensor`.
            let power = theta.powf(exponent as f64) as f32;
            1.0 / power
        })
        .collect();
    if let Some(y) = yarn {
        let (low, high) = y.correction_range(len, theta);
        // The reference widens an empty ramp by 0.001.
        let width = if low == high { 0.001 } else { (high - low) as f64 } as f32;
        let factor = y.factor as f32;
        for (m, f) in freqs.iter_mut().enumerate() {
            let ramp = ((m as f32 - low as f32) / width).clamp(0.0, 1.0);
            let smooth = 1.0 - ramp;
            *f = *f / factor * (1.0 - smooth) + *f * smooth;
        }
    }
    freqs
}

/// (cos, sin) of a + b from (cos, sin) of a and of b.
#[inline(always)]
fn add_angles([c1, s1]: [f64; 2], [c2, s2]: [f64; 2]) -> [f64; 2] {
    [c1 * c2 - s1 * s2, s1 * c2 + c1 * s2]
}

/// π/2 as a double-double: HI is the f64 nearest π/2, LO the rest.
const FRAC_PI_2_HI: f64 = std::f64::consts::FRAC_PI_2;
const FRAC_PI_2_LO: f64 = 6.123_233_995_736_766e-17;

/// a·b exactly as hi + lo (`mul_add` is a correctly rounded fused
/// operation on every platform, so this is deterministic).
fn two_product(a: f64, b: f64) -> (f64, f64) {
    let hi = a * b;
    (hi, a.mul_add(b, -hi))
}

/// cos and sin of `position · freq` (the real product), for position ≤ 2⁵³.
fn cos_sin_of_product(position: u64, freq: f64) -> [f64; 2] {
    let (h, l) = two_product(position as f64, freq);
    let k = (h / FRAC_PI_2_HI).round();
    let (p, e) = two_product(k, FRAC_PI_2_HI);
    // h − p is exact (Sterbenz: p/2 ≤ h ≤ 2p once k ≥ 1); the rest is tiny.
    let r = (h - p) + (l - e - k * FRAC_PI_2_LO);
    let (s, c) = sin_cos_small(r);
    match (k as u64) % 4 {
        0 => [c, s],
        1 => [-s, c],
        2 => [-c, -s],
        _ => [s, -c],
    }
}

/// Taylor series of sin and cos, Horner form, for |r| ≤ 0.8 (we use it on
/// |r| ≤ π/4 + ε): the first omitted terms, r²¹/21! and r²⁰/20!, are below
/// 10⁻²⁰.
fn sin_cos_small(r: f64) -> (f64, f64) {
    let r2 = r * r;
    let (mut s, mut c) = (1.0, 1.0);
    for n in (1..=9u32).rev() {
        s = 1.0 - r2 / f64::from((2 * n) * (2 * n + 1)) * s;
        c = 1.0 - r2 / f64::from((2 * n - 1) * (2 * n)) * c;
    }
    (r * s, c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn ulp_f32(x: f64) -> f64 {
        let a = (x.abs() as f32).max(f32::MIN_POSITIVE);
        (f32::from_bits(a.to_bits() + 1) - a) as f64
    }

    /// Independent reference: the exact angle as h + l (two_product is exact),
    /// cos/sin from libm with its own argument reduction, the addition
    /// formula for h + l.
    fn libm_rotation(x: f32, y: f32, position: u64, freq: f32) -> (f64, f64) {
        let h = position as f64 * freq as f64;
        let l = (position as f64).mul_add(freq as f64, -h);
        let (sh, ch) = h.sin_cos();
        let (sl, cl) = l.sin_cos();
        let (c, s) = (ch * cl - sh * sl, sh * cl + ch * sl);
        let (x, y) = (x as f64, y as f64);
        (x * c - y * s, x * s + y * c)
    }

    fn assert_within_guarantee(out: f32, exact: f64, x: f32, y: f32, what: &str) {
        let bound = 0.5 * ulp_f32(exact) + 2f64.powi(-44) * (x.abs() as f64 + y.abs() as f64);
        let err = (out as f64 - exact).abs();
        assert!(err <= bound, "{what}: out {out} exact {exact} err {err:e} > bound {bound:e}");
    }

    fn one_pair(theta: f64) -> RopeConfig {
        RopeConfig::new(2, RopeDims::first(2), Pairing::Interleaved, theta, None).unwrap()
    }

    #[test]
    fn position_zero_is_the_identity_bit_for_bit() {
        for cfg in [RopeConfig::deepseek_v32(), RopeConfig::deepseek_v4()] {
            let v: Vec<f32> = (0..128).map(|i| (i as f32 - 60.5) * 0.37).collect();
            let mut w = v.clone();
            cfg.rotate(&mut w, 0).unwrap();
            assert_eq!(v, w);
        }
    }

    #[test]
    fn pair_zero_turns_by_the_position_in_radians() {
        // f_0 = theta^0 = 1 for every theta, so position p turns pair 0 by p rad.
        let cfg = one_pair(10_000.0);
        let mut v = [1.0f32, 0.0];
        cfg.rotate(&mut v, 1).unwrap();
        // cos 1, sin 1 to 16 digits.
        assert_eq!(v, [0.540_302_305_868_139_8_f64 as f32, 0.841_470_984_807_896_5_f64 as f32]);
        // 355 = 113π + 3.0144353388e-5: half a turn plus a tiny angle, a test of
        // the exact reduction (a naive f32 angle would be off by ~1e-5).
        let mut v = [1.0f32, 0.0];
        cfg.rotate(&mut v, 355).unwrap();
        assert_eq!(v, [-1.0, -3.014_435_338_855e-5_f64 as f32]);
        // 33 = 5·2π + π/2 + 0.01327: nearly a quarter turn, (0, 1) → (−sin 33, cos 33).
        let mut v = [0.0f32, 1.0];
        cfg.rotate(&mut v, 33).unwrap();
        let (c, s) = (33.0f64.cos(), 33.0f64.sin());
        assert_eq!(v, [(-s) as f32, c as f32]);
    }

    #[test]
    fn v32_rotates_pairs_j_and_j_plus_32_of_the_first_64_dims() {
        let cfg = RopeConfig::deepseek_v32();
        for j in [0usize, 5, 31] {
            let mut v = vec![0.0f32; 128];
            v[j] = 1.0;
            v[100] = 2.0; // a no-rope dim
            cfg.rotate(&mut v, 777).unwrap();
            for (i, &x) in v.iter().enumerate() {
                let may_move = i == j || i == j + 32;
                if i == 100 {
                    assert_eq!(x, 2.0);
                } else if !may_move {
                    assert_eq!(x, 0.0, "dim {i} touched by pair {j}");
                }
            }
            let angle = 777.0 * cfg.frequencies()[j] as f64;
            assert!((v[j] as f64 - angle.cos()).abs() < 1e-6);
            assert!((v[j + 32] as f64 - angle.sin()).abs() < 1e-6);
        }
    }

    #[test]
    fn v4_rotates_adjacent_pairs_of_the_last_64_dims() {
        let cfg = RopeConfig::deepseek_v4();
        for m in [0usize, 7, 31] {
            let mut v = vec![0.0f32; 128];
            v[64 + 2 * m] = 1.0;
            v[3] = -1.5; // a no-rope dim
            cfg.rotate(&mut v, 12_345).unwrap();
            for (i, &x) in v.iter().enumerate() {
                if i == 3 {
                    assert_eq!(x, -1.5);
                } else if i != 64 + 2 * m && i != 64 + 2 * m + 1 {
                    assert_eq!(x, 0.0, "dim {i} touched by pair {m}");
                }
            }
            let angle = 12_345.0 * cfg.frequencies()[m] as f64;
            assert!((v[64 + 2 * m] as f64 - angle.cos()).abs() < 1e-6);
            assert!((v[64 + 2 * m + 1] as f64 - angle.sin()).abs() < 1e-6);
        }
    }

    #[test]
    fn swapping_the_pairing_changes_which_dims_move() {
        let v4 = RopeConfig::deepseek_v4();
        let halves = v4.with_pairing(Pairing::Halves);
        assert_eq!(halves.pair_dims(3), (67, 99));
        assert_eq!(v4.pair_dims(3), (70, 71));
        assert_eq!(RopeConfig::deepseek_v32().with_pairing(Pairing::Interleaved).pair_dims(3), (6, 7));
        assert_eq!(halves.frequencies(), v4.frequencies());
    }

    #[test]
    fn rotations_match_an_exact_angle_reference_up_to_16m_and_beyond() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut positions: Vec<u64> = vec![0, 1, 255, 256, 65_535, 65_536, 65_537, (1 << 24) - 1, 1 << 24, 16_000_000];
        positions.extend((0..200).map(|_| rng.random_range(0..=1u64 << 24)));
        positions.extend((0..20).map(|_| rng.random_range(0..=1u64 << 40)));
        for cfg in [RopeConfig::deepseek_v32(), RopeConfig::deepseek_v4()] {
            for &p in &positions {
                let v: Vec<f32> = (0..128).map(|_| rng.random_range(-4.0f32..4.0)).collect();
                let mut w = v.clone();
                cfg.rotate(&mut w, p).unwrap();
                for (m, &f) in cfg.frequencies().iter().enumerate() {
                    let (i, j) = cfg.pair_dims(m);
                    let (ex, ey) = libm_rotation(v[i], v[j], p, f);
                    assert_within_guarantee(w[i], ex, v[i], v[j], &format!("p {p} pair {m} x"));
                    assert_within_guarantee(w[j], ey, v[i], v[j], &format!("p {p} pair {m} y"));
                }
            }
        }
    }

    #[test]
    fn batch_and_single_rotations_give_identical_bits_whatever_the_chunking() {
        let cfg = RopeConfig::deepseek_v4();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let rows = 300;
        let original: Vec<f32> = (0..rows * 128).map(|_| rng.random_range(-3.0f32..3.0)).collect();
        // Start just below a 2^16 boundary so the high part changes mid-batch.
        let (first, stride) = (65_536 - 4 * 100, 4);
        let mut whole = original.clone();
        cfg.rotate_rows(&mut whole, first, stride).unwrap();
        for chunk in [1usize, 7, 64, 256] {
            let mut pieces = original.clone();
            for (c, part) in pieces.chunks_mut(chunk * 128).enumerate() {
                cfg.rotate_rows(part, first + (c * chunk) as u64 * stride, stride).unwrap();
            }
            assert!(pieces.iter().zip(&whole).all(|(a, b)| a.to_bits() == b.to_bits()), "chunk {chunk}");
        }
        for r in [0usize, 99, 100, 299] {
            let mut one = original[r * 128..(r + 1) * 128].to_vec();
            cfg.rotate(&mut one, first + r as u64 * stride).unwrap();
            assert!(one.iter().zip(&whole[r * 128..]).all(|(a, b)| a.to_bits() == b.to_bits()), "row {r}");
        }
    }

    /// f32 rounding of each output is ≤ 2⁻²⁴ relative (plus the 2⁻⁴⁴ term), so
    /// a squared norm moves by at most about 2·2⁻²⁴ of itself; 2⁻²² allows that twice.
    #[test]
    fn rotation_preserves_the_norm() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for cfg in [RopeConfig::deepseek_v32(), RopeConfig::deepseek_v4()] {
            for _ in 0..50 {
                let v: Vec<f32> = (0..128).map(|_| rng.random_range(-2.0f32..2.0)).collect();
                let mut w = v.clone();
                cfg.rotate(&mut w, rng.random_range(0..1u64 << 24)).unwrap();
                let n = |u: &[f32]| u.iter().map(|&x| (x as f64).powi(2)).sum::<f64>();
                assert!((n(&w) - n(&v)).abs() <= 2f64.powi(-22) * n(&v));
            }
        }
    }

    /// ⟨R_p q, R_p' k⟩ depends only on p − p'. Each rotated value carries at most
    /// 2⁻²⁴ relative rounding (+2⁻⁴⁴ absolute terms), so two such dot products
    /// differ by at most 4·2⁻²⁴·Σ|q_i||k_i| over the rotated dims; we allow 2⁻²¹.
    #[test]
    fn dot_products_depend_only_on_the_relative_position() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for cfg in [RopeConfig::deepseek_v32(), RopeConfig::deepseek_v4()] {
            for _ in 0..30 {
                let q: Vec<f32> = (0..128).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                let k: Vec<f32> = (0..128).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                let (p, pk) = (rng.random_range(0..1u64 << 23), rng.random_range(0..1u64 << 23));
                let shift = rng.random_range(0..1u64 << 23);
                let dot_at = |a: u64, b: u64| {
                    let (mut qq, mut kk) = (q.clone(), k.clone());
                    cfg.rotate(&mut qq, a).unwrap();
                    cfg.rotate(&mut kk, b).unwrap();
                    qq.iter().zip(&kk).map(|(&x, &y)| x as f64 * y as f64).sum::<f64>()
                };
                let scale: f64 = q.iter().zip(&k).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum::<f64>() * 2.0;
                let (d0, d1) = (dot_at(p, pk), dot_at(p + shift, pk + shift));
                assert!((d0 - d1).abs() <= 2f64.powi(-21) * scale, "{d0} vs {d1}");
            }
        }
    }

    #[test]
    fn yarn_correction_ranges_match_hand_computation() {
        // 64·ln(4096/(32·2π)) / (2 ln 10000) = 10.47, 64·ln(4096/2π)/(2 ln 10000) = 22.51.
        let v32 = RopeConfig::deepseek_v32();
        assert_eq!(v32.yarn().unwrap().correction_range(64, 10_000.0), (10, 23));
        // Same with 65536 and 160000: 15.45 and 24.71.
        let v4 = RopeConfig::deepseek_v4();
        assert_eq!(v4.yarn().unwrap().correction_range(64, 160_000.0), (15, 25));
    }

    #[test]
    fn yarn_keeps_fast_pairs_and_divides_slow_pairs_by_the_factor() {
        for (cfg, low, high) in [(RopeConfig::deepseek_v32(), 10, 23), (RopeConfig::deepseek_v4(), 15, 25)] {
            let plain = RopeConfig::new(128, cfg.dims(), cfg.pairing(), cfg.theta(), None).unwrap();
            let factor = cfg.yarn().unwrap().factor as f32;
            for m in 0..32 {
                let (f, f0) = (cfg.frequencies()[m], plain.frequencies()[m]);
                if m <= low {
                    assert_eq!(f, f0, "pair {m}");
                } else if m >= high {
                    assert_eq!(f, f0 / factor, "pair {m}");
                } else {
                    assert!(f < f0 && f > f0 / factor, "pair {m} inside the ramp");
                }
            }
            // plain: f_m = theta^(-2m/64), checked at m = 16 (theta^-1/2).
            assert!((plain.frequencies()[16] as f64 - cfg.theta().powf(-0.5)).abs() <= 1e-7 * cfg.theta().powf(-0.5));
        }
    }

    /// With factor 1 the blend is f·(1−s) + f·s in f32, which may round one
    /// way or the other inside the ramp: within 1 ulp there, exact outside.
    #[test]
    fn yarn_with_factor_one_gives_the_plain_frequencies() {
        let y = Yarn { factor: 1.0, original_max_position: 4096, beta_fast: 32.0, beta_slow: 1.0 };
        let with = RopeConfig::new(128, RopeDims::first(64), Pairing::Halves, 10_000.0, Some(y)).unwrap();
        let plain = RopeConfig::new(128, RopeDims::first(64), Pairing::Halves, 10_000.0, None).unwrap();
        for (&a, &b) in with.frequencies().iter().zip(plain.frequencies()) {
            assert!((a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1, "{a} vs {b}");
        }
    }

    #[test]
    fn invalid_settings_are_typed_errors() {
        let ok_yarn = Yarn { factor: 16.0, original_max_position: 65_536, beta_fast: 32.0, beta_slow: 1.0 };
        let new = |dims, theta, yarn| RopeConfig::new(128, dims, Pairing::Interleaved, theta, yarn);
        assert!(matches!(new(RopeDims::first(63), 1e4, None), Err(RopeError::Dims { .. })));
        assert!(matches!(new(RopeDims::first(0), 1e4, None), Err(RopeError::Dims { .. })));
        assert!(matches!(new(RopeDims { offset: 96, len: 64 }, 1e4, None), Err(RopeError::Dims { .. })));
        assert!(matches!(new(RopeDims { offset: usize::MAX, len: 2 }, 1e4, None), Err(RopeError::Dims { .. })));
        assert!(matches!(new(RopeDims::first(64), 1.0, None), Err(RopeError::Theta(_))));
        assert!(matches!(new(RopeDims::first(64), f64::NAN, None), Err(RopeError::Theta(_))));
        let bad = |y: Yarn| new(RopeDims::first(64), 1e4, Some(y)).unwrap_err();
        assert!(matches!(bad(Yarn { factor: 0.5, ..ok_yarn }), RopeError::YarnFactor(_)));
        assert!(matches!(bad(Yarn { original_max_position: 0, ..ok_yarn }), RopeError::YarnOriginal));
        assert!(matches!(bad(Yarn { beta_fast: 0.5, ..ok_yarn }), RopeError::YarnBetas { .. }));
        assert!(matches!(bad(Yarn { beta_slow: 0.0, beta_fast: 0.0, ..ok_yarn }), RopeError::YarnBetas { .. }));

        let cfg = RopeConfig::deepseek_v4();
        assert!(matches!(cfg.rotate(&mut [0.0; 64], 1), Err(RopeError::VectorLength { .. })));
        assert!(matches!(cfg.rotate_rows(&mut [0.0; 130], 1, 4), Err(RopeError::RowsLength { .. })));
        assert!(matches!(cfg.rotate(&mut [0.0; 128], MAX_POSITION + 1), Err(RopeError::Position { .. })));
        assert!(matches!(cfg.rotate_rows(&mut [0.0; 256], u64::MAX, u64::MAX), Err(RopeError::Position { .. })));
        assert!(cfg.rotate_rows(&mut [], u64::MAX, 4).is_ok());
    }

    /// Prints the table in docs/MODEL.md ("Position (RoPE)"):
    /// `cargo test --lib rope::tests::print_wavelengths -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn print_wavelengths() {
        for (name, cfg) in [("V3.2", RopeConfig::deepseek_v32()), ("V4", RopeConfig::deepseek_v4())] {
            let plain = RopeConfig::new(128, cfg.dims(), cfg.pairing(), cfg.theta(), None).unwrap();
            let (low, high) = cfg.yarn().unwrap().correction_range(64, cfg.theta());
            println!("{name}: ramp {low} … {high}");
            for m in [0, 8, low as usize, 16, 20, high as usize, 31] {
                let tau = std::f64::consts::TAU;
                println!(
                    "| {name} | {m} | {:.4e} | {:.1} | {:.1} |",
                    cfg.frequencies()[m],
                    tau / plain.frequencies()[m] as f64,
                    tau / cfg.frequencies()[m] as f64
                );
            }
        }
    }
}

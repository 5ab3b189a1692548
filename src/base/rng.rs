//! Counter-based seeding: every random stream is a pure function of
//! (seed, tags…), so a result never depends on thread count, shard layout or
//! which other cells share the run.
//!
//! Two generators:
//! * [`stream`]: a ChaCha8 stream, for the few per-trial draws (queries, head
//!   weights, the common direction);
//! * [`normal_group`]: the bulk haystack Gaussians, Philox4x32-10 (Salmon et
//!   al., SC'11; the Random123 reference, checked against its known answers)
//!   turned into normals by a Box–Muller transform written in plain f32
//!   arithmetic (no FMA, no libm), so the portable and the AVX2 builds of it
//!   give the same bits. Any 32 Gaussians of any row can be drawn alone.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::simd;

/// Stream tags. Changing one changes every result: they are part of the
/// reproducibility contract and are written down in docs/MODEL.md.
pub mod tag {
    pub const TRIAL: u64 = 0x7472_6961_6c00_0001; // per (seed, depth, trial)
    pub const QUERY: u64 = 0x7175_6572_7900_0002; // query, head weights, common direction
    pub const ROW: u64 = 0x726f_7700_0000_0003; // one haystack key row
    pub const TIE: u64 = 0x7469_6500_0000_0004; // random tie-break priority of a row
    pub const PHYSICS: u64 = 0x7068_7973_0000_0005; // gate biases, distractors (physics on)
    pub const TOKEN: u64 = 0x746f_6b00_0000_0006; // token-level values and gates
    pub const SPECIAL: u64 = 0x7370_6563_0000_0007; // tokens of a needle or distractor row (shortcut)
    pub const PREDICT: u64 = 0x7072_6564_0000_0008; // the analytic prediction's needle-score draws
    pub const TAIL: u64 = 0x7461_696c_0000_0009; // tail sampling's proposal rows
    pub const KEY_NORM: u64 = 0x6e6f_726d_0000_000a; // the key norm's learned weight and bias
    pub const RETRIEVAL: u64 = 0x7265_7472_0000_000c; // the looking heads' shared retrieval direction
    pub const STRUCTURE: u64 = 0x7374_7275_0000_000b; // content subspace, per-row content and relevance
    pub const STACK: u64 = 0x7374_6163_6b00_000d; // whole-model recall: the layer and token chains
    pub const NEEDLE: u64 = 0x6e65_6564_6c65_000e; // the quantile needle's exceedance and rank draws
    pub const CACHE: u64 = 0x6361_6368_6500_000f; // a request's physical cache pages (zero-pages faults)
    pub const ROW_SHIFT: u64 = 0x7368_6966_7400_0010; // the other query whose logits row-shift reads
    pub const CANDIDATE: u64 = 0x6361_6e64_0000_0011; // the candidate stage's block draws (whole-model stack)
    pub const PLAN: u64 = 0x706c_616e_0000_0012; // the layer plan's draws: reusers selecting alone, lost-layer harm
}

/// SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Derives a child seed from a parent seed and a list of words. Order matters.
pub fn derive(parent: u64, words: &[u64]) -> u64 {
    let mut h = mix64(parent ^ 0x9e37_79b9_7f4a_7c15);
    for &w in words {
        h = mix64(h ^ mix64(w.wrapping_add(0x9e37_79b9_7f4a_7c15)));
    }
    h
}

/// A ChaCha8 generator for the stream named by (parent, words). ChaCha8's
/// output for a given seed is fixed by the rand_chacha crate's contract.
pub fn stream(parent: u64, words: &[u64]) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(derive(parent, words))
}

/// Philox4x32 multipliers and Weyl key increments (Random123).
const PHILOX_M0: u32 = 0xD251_1F53;
const PHILOX_M1: u32 = 0xCD9E_8D57;
const PHILOX_W0: u32 = 0x9E37_79B9;
const PHILOX_W1: u32 = 0xBB67_AE85;

/// Philox4x32-10 of one counter under one key (the Random123 reference).
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = ctr;
    let [mut k0, mut k1] = key;
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(PHILOX_W0);
            k1 = k1.wrapping_add(PHILOX_W1);
        }
        let p0 = u64::from(PHILOX_M0) * u64::from(c0);
        let p1 = u64::from(PHILOX_M1) * u64::from(c2);
        (c0, c1, c2, c3) = ((p1 >> 32) as u32 ^ c1 ^ k0, p1 as u32, (p0 >> 32) as u32 ^ c3 ^ k1, p0 as u32);
    }
    [c0, c1, c2, c3]
}

/// Lanes of the Gaussian generator: 8 Philox blocks side by side (one AVX2
/// register per counter word).
const NORMAL_LANES: usize = 8;

/// Gaussians per [`normal_group`] call: 8 Philox blocks × 4 words, two words
/// per Box–Muller pair.
pub const NORMAL_GROUP: usize = 4 * NORMAL_LANES;

/// Largest |z| the generator can return: sqrt(−2·ln 2⁻³²) · max|cos θ|
/// ≈ 6.660 (the smallest radius uniform is 2⁻³², see [`box_muller`]).
pub const NORMAL_MAX_ABS: f64 = 6.660_437;

/// Group `group` (32 standard normals) of row `row` of the stream `key`.
///
/// Lane l of the group is Philox block b = 8·group + l with counter
/// (b, 0, row mod 2³², row div 2³²) and key (key mod 2³², key div 2³²). Its
/// words (x0, x1) give `out[l]` and `out[8 + l]`, (x2, x3) give `out[16 + l]`
/// and `out[24 + l]`. A pure function of (key, row, group): rows and groups
/// can be drawn in any order, on any thread, with the same bits.
#[inline(always)]
pub fn normal_group(key: u64, row: u64, group: u32, out: &mut [f32; NORMAL_GROUP]) {
    let [c0, c1, c2, c3] = philox8(key, row, group);
    let (a, b) = out.split_at_mut(2 * NORMAL_LANES);
    box_muller(&c0, &c1, a);
    box_muller(&c2, &c3, b);
}

/// Fills `out` with the normals of groups `first_group`, `first_group + 1`, …
/// of row `row` of the stream `key` (the last group may be cut short):
/// the same bits on every CPU path.
pub fn fill_normals(key: u64, row: u64, first_group: u32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    let level = simd::level();
    #[cfg(target_arch = "x86_64")]
    if out.len() >= 2 * NORMAL_GROUP && level.avx512() {
        // SAFETY: the level is AVX-512, so the CPU has AVX-512F (and AVX2).
        unsafe { fill_normals_avx512(key, row, first_group, out) };
        return;
    }
    let mut z = [0.0f32; NORMAL_GROUP];
    for (g, chunk) in out.chunks_mut(NORMAL_GROUP).enumerate() {
        #[cfg(target_arch = "x86_64")]
        {
            if level.avx2() {
                // SAFETY: the level is at least AVX2.
                unsafe { normal_group_avx2(key, row, first_group + g as u32, &mut z) };
            } else {
                normal_group(key, row, first_group + g as u32, &mut z);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        normal_group(key, row, first_group + g as u32, &mut z);
        chunk.copy_from_slice(&z[..chunk.len()]);
    }
}

/// [`fill_normals`] through [`for_each_normal_block_avx512`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX2 (level AVX-512).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fill_normals_avx512(key: u64, row: u64, first_group: u32, out: &mut [f32]) {
    // SAFETY: our caller guarantees AVX-512F and AVX2; `out` is written through slices only.
    unsafe { for_each_normal_block_avx512(key, row..row + 1, first_group, out.len(), |_, at, z| out[at..at + z.len()].copy_from_slice(z)) };
}

/// For each row of `rows`, its first `len` normals from group `first_group`
/// on, handed to `f(row, offset, normals)` block by block in order: four
/// groups at a time ([`normal_group_pairs_avx512`], two pairs interleaved),
/// then a pair, then a trailing odd or partial group through the AVX2 path.
/// The same bits as [`normal_group`]. Inlined into its AVX-512 callers, which
/// fill keys or plain buffers from the blocks without another copy; the
/// block buffers are set up once for all rows.
///
/// # Safety
/// The CPU must support AVX-512F and AVX2 ([`simd::level`] at AVX-512).
/// Memory safety does not depend on the arguments: the blocks are local
/// buffers handed to `f` as slices.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn for_each_normal_block_avx512(
    key: u64,
    rows: std::ops::Range<u64>,
    first_group: u32,
    len: usize,
    mut f: impl FnMut(u64, usize, &[f32]),
) {
    let mut quad = CacheLines([[[0.0f32; NORMAL_GROUP]; 2]; 2]);
    let mut pair = CacheLines([[[0.0f32; NORMAL_GROUP]; 2]; 1]);
    let mut z = [0.0f32; NORMAL_GROUP];
    for row in rows {
        let mut at = 0;
        let mut group = first_group;
        while len - at >= 4 * NORMAL_GROUP {
            // SAFETY: the caller guarantees AVX-512F.
            unsafe { normal_group_pairs_avx512::<2>(key, row, group, &mut quad.0) };
            f(row, at, quad.0.as_flattened().as_flattened());
            (at, group) = (at + 4 * NORMAL_GROUP, group.wrapping_add(4));
        }
        if len - at >= 2 * NORMAL_GROUP {
            // SAFETY: the caller guarantees AVX-512F.
            unsafe { normal_group_pairs_avx512::<1>(key, row, group, &mut pair.0) };
            f(row, at, pair.0.as_flattened().as_flattened());
            (at, group) = (at + 2 * NORMAL_GROUP, group.wrapping_add(2));
        }
        while at < len {
            let n = NORMAL_GROUP.min(len - at);
            // SAFETY: the caller guarantees AVX2 (part of the AVX-512 level).
            unsafe { normal_group_avx2(key, row, group, &mut z) };
            f(row, at, &z[..n]);
            (at, group) = (at + n, group.wrapping_add(1));
        }
    }
}

/// [`normal_group`] with the Philox rounds in AVX2 integer intrinsics (exact
/// integer arithmetic, so the same words) and the same f32 Box–Muller code
/// compiled for AVX2 (no FMA: the same bits).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub unsafe fn normal_group_avx2(key: u64, row: u64, group: u32, out: &mut [f32; NORMAL_GROUP]) {
    let [c0, c1, c2, c3] = philox8_avx2(key, row, group);
    let (a, b) = out.split_at_mut(2 * NORMAL_LANES);
    box_muller(&c0, &c1, a);
    box_muller(&c2, &c3, b);
}

/// `S` consecutive pairs of groups of a row (groups `group` …
/// `group + 2S − 1`) in 16 AVX-512 lanes per pair: exactly the numbers
/// [`normal_group`] gives for each (integer Philox, then the same f32
/// Box–Muller lane by lane; no FMA is ever formed). The Philox rounds of the
/// S pairs are interleaved so their multiply chains overlap.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn normal_group_pairs_avx512<const S: usize>(key: u64, row: u64, group: u32, out: &mut [[[f32; NORMAL_GROUP]; 2]; S]) {
    let words = philox16_avx512::<S>(key, row, group);
    for (pair, [c0, c1, c2, c3]) in out.iter_mut().zip(&words.0) {
        let mut a = CacheLines([0.0f32; 4 * NORMAL_LANES]);
        let mut b = CacheLines([0.0f32; 4 * NORMAL_LANES]);
        let (a, b) = (&mut a.0, &mut b.0);
        box_muller(c0, c1, a);
        box_muller(c2, c3, b);
        // a = [z1 of lanes 0..16 | z2 of lanes 0..16]; lanes 0..8 are the pair's first group, 8..16 its second.
        for (h, o) in pair.iter_mut().enumerate() {
            let lanes = h * NORMAL_LANES..(h + 1) * NORMAL_LANES;
            o[..8].copy_from_slice(&a[lanes.clone()]);
            o[8..16].copy_from_slice(&a[16 + lanes.start..16 + lanes.end]);
            o[16..24].copy_from_slice(&b[lanes.clone()]);
            o[24..32].copy_from_slice(&b[16 + lanes.start..16 + lanes.end]);
        }
    }
}

/// The Philox words of `S` group pairs of one row, pair s covering groups
/// `group + 2s` and `group + 2s + 1` in 16 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn philox16_avx512<const S: usize>(key: u64, row: u64, group: u32) -> CacheLines<[[[u32; 2 * NORMAL_LANES]; 4]; S]> {
    use std::arch::x86_64::*;
    // Each block's words sit in the low halves of 64-bit lanes, 8 blocks per
    // register, so one `vpmuludq` gives a whole 32×32→64 product: hi is
    // that product shifted down, lo is the product itself (its high half is
    // junk that nothing reads: the multiplies use only low halves, the xors
    // act lane-wise, and the words are narrowed at the end).
    let mut c0 = [[_mm512_setzero_si512(); 2]; S];
    let mut c1 = [[_mm512_setzero_si512(); 2]; S];
    let mut c2 = [[_mm512_setzero_si512(); 2]; S];
    let mut c3 = [[_mm512_setzero_si512(); 2]; S];
    for s in 0..S {
        let base = group.wrapping_add(2 * s as u32).wrapping_mul(NORMAL_LANES as u32);
        for half in 0..2 {
            let first: [u64; NORMAL_LANES] = std::array::from_fn(|l| u64::from(base.wrapping_add((NORMAL_LANES * half + l) as u32)));
            // SAFETY: 64 bytes read from a [u64; 8].
            c0[s][half] = unsafe { _mm512_loadu_si512(first.as_ptr().cast()) };
            c2[s][half] = _mm512_set1_epi64(i64::from(row as u32));
            c3[s][half] = _mm512_set1_epi64(i64::from((row >> 32) as u32));
        }
    }
    let (m0, m1) = (_mm512_set1_epi64(i64::from(PHILOX_M0)), _mm512_set1_epi64(i64::from(PHILOX_M1)));
    let (mut k0, mut k1) = (key as u32, (key >> 32) as u32);
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(PHILOX_W0);
            k1 = k1.wrapping_add(PHILOX_W1);
        }
        let (kv0, kv1) = (_mm512_set1_epi32(k0 as i32), _mm512_set1_epi32(k1 as i32));
        for s in 0..S {
            for half in 0..2 {
                let p0 = _mm512_mul_epu32(c0[s][half], m0);
                let p1 = _mm512_mul_epu32(c2[s][half], m1);
                let n0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64::<32>(p1), c1[s][half]), kv0);
                let n2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64::<32>(p0), c3[s][half]), kv1);
                (c0[s][half], c1[s][half], c2[s][half], c3[s][half]) = (n0, p1, n2, p0);
            }
        }
    }
    let mut words = CacheLines([[[0u32; 2 * NORMAL_LANES]; 4]; S]);
    for (s, set) in words.0.iter_mut().enumerate() {
        for (w, c) in set.iter_mut().zip([c0[s], c1[s], c2[s], c3[s]]) {
            let packed = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(c[0])), _mm512_cvtepi64_epi32(c[1]));
            // SAFETY: [u32; 16] is 64 bytes, the width of an unaligned store.
            unsafe { _mm512_storeu_si512(w.as_mut_ptr().cast(), packed) };
        }
    }
    words
}

/// A value on its own 64-byte cache lines, so that full-width vector loads
/// and stores of it never split across two lines.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(64))]
pub struct CacheLines<T>(pub T);

/// Words of the 8 Philox blocks of one group, as 4 arrays of 8 lanes.
#[inline(always)]
fn philox8(key: u64, row: u64, group: u32) -> [[u32; NORMAL_LANES]; 4] {
    let base = group.wrapping_mul(NORMAL_LANES as u32);
    let mut c0: [u32; NORMAL_LANES] = std::array::from_fn(|l| base.wrapping_add(l as u32));
    let mut c1 = [0u32; NORMAL_LANES];
    let mut c2 = [row as u32; NORMAL_LANES];
    let mut c3 = [(row >> 32) as u32; NORMAL_LANES];
    let (mut k0, mut k1) = (key as u32, (key >> 32) as u32);
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(PHILOX_W0);
            k1 = k1.wrapping_add(PHILOX_W1);
        }
        for l in 0..NORMAL_LANES {
            let p0 = u64::from(PHILOX_M0) * u64::from(c0[l]);
            let p1 = u64::from(PHILOX_M1) * u64::from(c2[l]);
            let (n0, n1, n2, n3) = ((p1 >> 32) as u32 ^ c1[l] ^ k0, p1 as u32, (p0 >> 32) as u32 ^ c3[l] ^ k1, p0 as u32);
            c0[l] = n0;
            c1[l] = n1;
            c2[l] = n2;
            c3[l] = n3;
        }
    }
    [c0, c1, c2, c3]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn philox8_avx2(key: u64, row: u64, group: u32) -> [[u32; NORMAL_LANES]; 4] {
    use std::arch::x86_64::*;
    // (hi, lo) of the 32×32→64-bit products of each lane with m.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn mulhilo(a: __m256i, m: __m256i) -> (__m256i, __m256i) {
        let even = _mm256_mul_epu32(a, m);
        let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), m);
        let lo = _mm256_blend_epi32::<0b1010_1010>(even, _mm256_slli_epi64::<32>(odd));
        let hi = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd);
        (hi, lo)
    }
    let base = group.wrapping_mul(NORMAL_LANES as u32) as i32;
    let mut c0 = _mm256_add_epi32(_mm256_set1_epi32(base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    let mut c1 = _mm256_setzero_si256();
    let mut c2 = _mm256_set1_epi32(row as u32 as i32);
    let mut c3 = _mm256_set1_epi32((row >> 32) as u32 as i32);
    let (m0, m1) = (_mm256_set1_epi32(PHILOX_M0 as i32), _mm256_set1_epi32(PHILOX_M1 as i32));
    let (mut k0, mut k1) = (key as u32, (key >> 32) as u32);
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(PHILOX_W0);
            k1 = k1.wrapping_add(PHILOX_W1);
        }
        let (hi0, lo0) = mulhilo(c0, m0);
        let (hi1, lo1) = mulhilo(c2, m1);
        let n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(k0 as i32));
        let n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(k1 as i32));
        (c0, c1, c2, c3) = (n0, lo1, n2, lo0);
    }
    let mut words = [[0u32; NORMAL_LANES]; 4];
    for (w, c) in words.iter_mut().zip([c0, c1, c2, c3]) {
        // SAFETY: [u32; 8] is 32 bytes, the width of an unaligned store.
        unsafe { _mm256_storeu_si256(w.as_mut_ptr().cast(), c) };
    }
    words
}

/// Box–Muller on 8 pairs of words (u, v) → 16 normals (first 8: one of each
/// pair, next 8: the other).
///
/// * radius: u1 = ((u >> 1) + ½)·2⁻³¹ ∈ [2⁻³², 1] (rounded to f32), R = √(−2 ln u1);
/// * angle: θ = π/4 + t with t uniform on (−π/4, π/4) from the low 22 bits of v,
///   then bits 31 and 30 of v flip the signs of the two outputs. Reflections
///   of a uniform angle in the first quadrant are uniform on the circle.
/// * With cos θ = (cos t − sin t)/√2 and sin θ = (cos t + sin t)/√2, the pair
///   is √(−ln u1)·(cos t ∓ sin t).
#[inline(always)]
fn box_muller<const N: usize>(u: &[u32; N], v: &[u32; N], out: &mut [f32]) {
    const TWO_POW_M31: f32 = 1.0 / 2_147_483_648.0;
    const TWO_POW_M22: f32 = 1.0 / 4_194_304.0;
    let (first, second) = out.split_at_mut(N);
    for l in 0..N {
        let u1 = (((u[l] >> 1) as i32) as f32 + 0.5) * TWO_POW_M31;
        let radius = (-ln_unit(u1)).sqrt();
        let f = (((v[l] & 0x3F_FFFF) as i32) as f32 + 0.5) * TWO_POW_M22;
        let t = f * std::f32::consts::FRAC_PI_2 - std::f32::consts::FRAC_PI_4;
        let (s, c) = sin_cos_quarter(t);
        let z1 = radius * (c - s);
        let z2 = radius * (c + s);
        first[l] = f32::from_bits(z1.to_bits() ^ (v[l] & 0x8000_0000));
        second[l] = f32::from_bits(z2.to_bits() ^ ((v[l] << 1) & 0x8000_0000));
    }
}

/// ln x for positive normal f32 x, in plain f32 arithmetic: x = m·2^e with
/// m ∈ [√½, √2), ln m = 2·atanh(s), s = (m − 1)/(m + 1), |s| ≤ 0.1716, series
/// to s⁹ (truncation < 3·10⁻¹⁰ relative). Error within a few f32 ulps.
#[inline(always)]
pub(crate) fn ln_unit(x: f32) -> f32 {
    const SQRT2_BITS: u32 = 0x3FB5_04F3;
    let bits = x.to_bits();
    let mut e = ((bits >> 23) as i32) - 127;
    let mut mant = (bits & 0x007F_FFFF) | 0x3F80_0000;
    let adjust = u32::from(mant > SQRT2_BITS);
    mant -= adjust << 23;
    e += adjust as i32;
    let m = f32::from_bits(mant);
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let p = s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0))));
    let ln_m = 2.0 * s + 2.0 * (s * p);
    // ln 2 split so e·LN2_HI is exact for |e| < 2⁹.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let ef = e as f32;
    ef * LN2_HI + (ln_m + ef * LN2_LO)
}

/// (sin t, cos t) for |t| ≤ π/4, Taylor series to t⁹ and t¹⁰ (truncation
/// below 2·10⁻⁹), plain f32 arithmetic.
#[inline(always)]
pub(crate) fn sin_cos_quarter(t: f32) -> (f32, f32) {
    let t2 = t * t;
    let s = t + t * (t2 * (-1.0 / 6.0 + t2 * (1.0 / 120.0 + t2 * (-1.0 / 5040.0 + t2 * (1.0 / 362_880.0)))));
    let c = 1.0 + t2 * (-0.5 + t2 * (1.0 / 24.0 + t2 * (-1.0 / 720.0 + t2 * (1.0 / 40_320.0 + t2 * (-1.0 / 3_628_800.0)))));
    (s, c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::special::normal_cdf;
    use rand::Rng;

    #[test]
    fn philox_matches_the_random123_known_answers() {
        let kat: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            ([0; 4], [0; 2], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
            ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (ctr, key, want) in kat {
            assert_eq!(philox4x32_10(ctr, key), want);
        }
    }

    #[test]
    fn ln_and_sin_cos_are_accurate() {
        let mut x = 2.0f32.powi(-32);
        while x < 1.0 {
            let want = f64::from(x).ln();
            let got = f64::from(ln_unit(x));
            assert!((got - want).abs() <= 4e-7 * want.abs().max(1e-30) + 1e-9, "ln {x}: {got} vs {want}");
            x *= 1.000_37;
        }
        assert_eq!(ln_unit(1.0), 0.0);
        for i in 0..=10_000 {
            let t = (i as f32 / 10_000.0 - 0.5) * std::f32::consts::FRAC_PI_2;
            let (s, c) = sin_cos_quarter(t);
            assert!((f64::from(s) - f64::from(t).sin()).abs() < 2e-7);
            assert!((f64::from(c) - f64::from(t).cos()).abs() < 2e-7);
        }
    }

    #[test]
    fn normal_groups_follow_the_documented_layout() {
        let (key, row) = (0x0123_4567_89ab_cdef_u64, 0x1_0000_0007_u64);
        let mut out = [0.0f32; NORMAL_GROUP];
        normal_group(key, row, 3, &mut out);
        for l in 0..NORMAL_LANES {
            let w = philox4x32_10([24 + l as u32, 0, row as u32, (row >> 32) as u32], [key as u32, (key >> 32) as u32]);
            let mut pair = [0.0f32; 2 * NORMAL_LANES];
            box_muller(&[w[0]; NORMAL_LANES], &[w[1]; NORMAL_LANES], &mut pair);
            assert_eq!((out[l].to_bits(), out[8 + l].to_bits()), (pair[0].to_bits(), pair[8].to_bits()));
            box_muller(&[w[2]; NORMAL_LANES], &[w[3]; NORMAL_LANES], &mut pair);
            assert_eq!((out[16 + l].to_bits(), out[24 + l].to_bits()), (pair[0].to_bits(), pair[8].to_bits()));
        }
    }

    #[test]
    fn extreme_words_give_the_documented_largest_normal() {
        let mut out = [0.0f32; 16];
        // u = 0 → smallest radius uniform; v = 0 → t at −π/4 (+½ step), the largest |cos t − sin t|.
        box_muller(&[0; NORMAL_LANES], &[0; NORMAL_LANES], &mut out);
        let largest = out.iter().map(|z| f64::from(z.abs())).fold(0.0, f64::max);
        assert!(largest >= 6.0, "largest |z| {largest}");
        assert!((largest - NORMAL_MAX_ABS).abs() < 1e-5, "largest |z| {largest} vs documented {NORMAL_MAX_ABS}");
        box_muller(&[u32::MAX; NORMAL_LANES], &[u32::MAX; NORMAL_LANES], &mut out);
        assert!(out.iter().all(|z| z.abs() < 1e-3));
    }

    #[test]
    fn derive_depends_on_every_word_and_order() {
        let a = derive(1, &[2, 3]);
        assert_ne!(a, derive(1, &[3, 2]));
        assert_ne!(a, derive(2, &[2, 3]));
        assert_ne!(a, derive(1, &[2, 4]));
        assert_eq!(a, derive(1, &[2, 3]));
    }

    #[test]
    fn streams_are_reproducible() {
        let x: u64 = stream(42, &[tag::ROW, 7]).random();
        let y: u64 = stream(42, &[tag::ROW, 7]).random();
        let z: u64 = stream(42, &[tag::ROW, 8]).random();
        assert_eq!(x, y);
        assert_ne!(x, z);
    }

    /// `rows` rows of 128 normals from one key, row-major.
    fn sample(key: u64, rows: u64) -> Vec<f32> {
        let mut out = vec![0.0f32; rows as usize * 128];
        let mut z = [0.0f32; NORMAL_GROUP];
        for (r, row) in out.chunks_exact_mut(128).enumerate() {
            for (g, o) in row.chunks_exact_mut(NORMAL_GROUP).enumerate() {
                normal_group(key, r as u64, g as u32, &mut z);
                o.copy_from_slice(&z);
            }
        }
        out
    }

    // Statistical checks below use 4-standard-error bounds (two-sided
    // 6·10⁻⁵ each) or the KS critical value at α = 0.001, with fixed keys:
    // reproducible, and a correct generator fails one by chance with
    // probability well under 1 %.

    #[test]
    fn normals_have_the_moments_of_n01() {
        let z = sample(11, 1 << 14); // 2^21 normals
        let n = z.len() as f64;
        let m = |p: i32| z.iter().map(|&x| f64::from(x).powi(p)).sum::<f64>() / n;
        let (m1, m2, m3, m4) = (m(1), m(2), m(3), m(4));
        assert!(m1.abs() < 4.0 / n.sqrt(), "mean {m1}");
        assert!((m2 - 1.0).abs() < 4.0 * (2.0 / n).sqrt(), "variance {m2}");
        assert!(m3.abs() < 4.0 * (15.0 / n).sqrt(), "third moment {m3}");
        assert!((m4 - 3.0).abs() < 4.0 * (96.0 / n).sqrt(), "fourth moment {m4}");
    }

    #[test]
    fn normals_pass_a_kolmogorov_smirnov_test_against_n01() {
        let mut z: Vec<f64> = sample(12, 1 << 13).iter().map(|&x| f64::from(x)).collect(); // 2^20
        z.sort_by(f64::total_cmp);
        let n = z.len() as f64;
        let d = z
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = normal_cdf(x);
                (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
            })
            .fold(0.0, f64::max);
        // Asymptotic KS critical value at α = 0.001: sqrt(−ln(α/2)/2)/sqrt(n).
        let critical = (-(0.001f64 / 2.0).ln() / 2.0).sqrt() / n.sqrt();
        assert!(d < critical, "KS D = {d}, critical {critical} at n = {n}");
    }

    #[test]
    fn tails_beyond_3_and_4_sd_have_the_normal_frequency() {
        let z = sample(13, 1 << 15); // 2^22 normals
        let n = z.len() as f64;
        for (k, p) in [(3.0f32, 2.0 * (1.0 - normal_cdf(3.0))), (4.0, 2.0 * (1.0 - normal_cdf(4.0)))] {
            let hits = z.iter().filter(|x| x.abs() > k).count() as f64;
            // Binomial(n, p): mean n·p, sd sqrt(n·p·(1−p)).
            let (mean, sd) = (n * p, (n * p * (1.0 - p)).sqrt());
            assert!((hits - mean).abs() < 4.0 * sd, "beyond {k} sd: {hits} vs {mean:.1} ± {sd:.1}");
        }
        let largest = z.iter().map(|x| x.abs()).fold(0.0f32, f32::max);
        assert!(f64::from(largest) <= NORMAL_MAX_ABS + 1e-5);
    }

    #[test]
    fn neighbouring_normals_are_uncorrelated() {
        let rows = 1usize << 13;
        let z = sample(14, rows as u64);
        let corr = |pairs: &mut dyn Iterator<Item = (f32, f32)>, square: bool| {
            let (mut sxy, mut sx, mut sy, mut sxx, mut syy, mut n) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0f64);
            for (a, b) in pairs {
                let (x, y) = if square { (f64::from(a * a), f64::from(b * b)) } else { (f64::from(a), f64::from(b)) };
                sxy += x * y;
                sx += x;
                sy += y;
                sxx += x * x;
                syy += y * y;
                n += 1.0;
            }
            let cov = sxy / n - sx / n * sy / n;
            (cov / ((sxx / n - (sx / n).powi(2)) * (syy / n - (sy / n).powi(2))).sqrt(), n)
        };
        let at = |r: usize, j: usize| z[r * 128 + j];
        // (name, offset in channels, offset in rows): the next channel, the
        // Box–Muller partner (j, j + 8), the next Philox block's lane, the next row.
        for (name, dj, dr) in [("next channel", 1, 0), ("Box–Muller partner", 8, 0), ("pair word", 16, 0), ("next row", 0, 1)] {
            for square in [false, true] {
                let mut it = (0..rows - dr)
                    .flat_map(|r| (0..128 - dj).filter(move |j| dj != 8 || j % 32 < 8).map(move |j| (at(r, j), at(r + dr, j + dj))));
                let (r, n) = corr(&mut it, square);
                assert!(r.abs() < 4.0 / n.sqrt(), "{name} (squared: {square}): correlation {r}, n {n}");
            }
        }
    }

    #[test]
    fn avx2_groups_equal_portable_groups() {
        #[cfg(target_arch = "x86_64")]
        if simd::level().avx2() {
            let (mut a, mut b) = ([0.0f32; NORMAL_GROUP], [0.0f32; NORMAL_GROUP]);
            for i in 0..20_000u64 {
                let (key, row, group) = (mix64(i), mix64(i ^ 0xabc) >> (i % 64), (i % 7) as u32 + (i as u32) * 977);
                normal_group(key, row, group, &mut a);
                // SAFETY: the level is at least AVX2 (checked above).
                unsafe { normal_group_avx2(key, row, group, &mut b) };
                assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits), "key {key} row {row} group {group}");
            }
        }
    }

    #[test]
    fn avx512_group_pairs_equal_portable_groups() {
        #[cfg(target_arch = "x86_64")]
        if simd::level().avx512() {
            let (mut a, mut b) = ([0.0f32; NORMAL_GROUP], [[[0.0f32; NORMAL_GROUP]; 2]; 1]);
            for i in 0..20_000u64 {
                let (key, row, group) = (mix64(i), mix64(i ^ 0xabc) >> (i % 64), (i % 7) as u32 + (i as u32) * 977);
                // SAFETY: the level is AVX-512 (checked above).
                unsafe { normal_group_pairs_avx512::<1>(key, row, group, &mut b) };
                for (h, bh) in b[0].iter().enumerate() {
                    normal_group(key, row, group.wrapping_add(h as u32), &mut a);
                    assert_eq!(a.map(f32::to_bits), bh.map(f32::to_bits), "key {key} row {row} group {group}+{h}");
                }
            }
        }
    }

    #[test]
    fn interleaved_avx512_group_pairs_equal_portable_groups() {
        #[cfg(target_arch = "x86_64")]
        if simd::level().avx512() {
            let mut a = [0.0f32; NORMAL_GROUP];
            let mut b = [[[0.0f32; NORMAL_GROUP]; 2]; 3];
            for i in 0..5_000u64 {
                // Group numbers near 2³² check the wrap of the block counter.
                let (key, row, group) =
                    (mix64(i), mix64(i ^ 0x51) >> (i % 64), (mix64(i + 7) as u32) | (u32::from(i % 5 == 0) * 0xFFFF_FFF8));
                // SAFETY: the level is AVX-512 (checked above).
                unsafe { normal_group_pairs_avx512::<3>(key, row, group, &mut b) };
                for (h, bh) in b.as_flattened().iter().enumerate() {
                    normal_group(key, row, group.wrapping_add(h as u32), &mut a);
                    assert_eq!(a.map(f32::to_bits), bh.map(f32::to_bits), "key {key} row {row} group {group}+{h}");
                }
            }
        }
    }

    #[test]
    fn fill_normals_equals_portable_groups_for_any_length() {
        let mut z = [0.0f32; NORMAL_GROUP];
        for len in [1usize, 31, 32, 33, 63, 64, 65, 96, 128, 200, 256, 512] {
            for (key, row, first) in [(1u64, 0u64, 0u32), (mix64(7), 123_456, 3), (mix64(9), 1 << 40, 17)] {
                let mut out = vec![0.0f32; len];
                fill_normals(key, row, first, &mut out);
                for (g, chunk) in out.chunks(NORMAL_GROUP).enumerate() {
                    normal_group(key, row, first + g as u32, &mut z);
                    assert_eq!(
                        chunk.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        z[..chunk.len()].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        "len {len} group {g}"
                    );
                }
            }
        }
    }

    #[test]
    fn normal_groups_are_pure_functions_of_key_row_and_group() {
        let mut a = [0.0f32; NORMAL_GROUP];
        let mut b = [0.0f32; NORMAL_GROUP];
        normal_group(5, 9, 2, &mut a);
        normal_group(5, 10, 2, &mut b);
        normal_group(5, 9, 2, &mut b);
        assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
        for (key, row, group) in [(6, 9, 2), (5, 9, 3), (5, 9 + (1 << 32), 2)] {
            normal_group(key, row, group, &mut b);
            assert_ne!(a.map(f32::to_bits), b.map(f32::to_bits));
        }
    }
}

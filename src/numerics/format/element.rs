//! Element formats: bit-exact encoders and decoders for the number formats the
//! indexer may store its keys and queries in.
//!
//! The reference for every bit is the Python `ml_dtypes` package (0.7.0) and,
//! for fp16, numpy's `float16`; `tests/data/golden_formats.csv` pins it (see
//! `tools/golden_formats.py`). All casts round to nearest, ties to even,
//! directly from f32 (never through an intermediate format, which would round
//! twice).
//!
//! Behaviours of `ml_dtypes` reproduced here that are easy to get wrong:
//! - e4m3fn has no infinity: a plain cast of anything that rounds above 448
//!   (|x| > 464, the midpoint to the would-be 480) or of ±inf gives NaN
//!   (`0x7f`/`0xff`, sign kept).
//! - e5m2, fp16 and bf16 overflow to ±inf.
//! - e2m1 has neither NaN nor infinity: a plain cast *saturates* overflow
//!   (and ±inf) to ±6, and turns NaN into a zero of the **opposite** sign
//!   (+NaN → `0x8` = −0, −NaN → `0x0` = +0).
//! - NaN payloads: e4m3fn, e5m2 and bf16 encode any NaN as the canonical
//!   quiet NaN with the input's sign (`0x7f`, `0x7e`, `0x7fc0`); decoding an
//!   8-bit NaN gives the f32 quiet NaN `0x7fc00000` with the code's sign,
//!   while decoding bf16 is the exact 16-bit shift (payload kept). numpy's
//!   fp16 keeps the top ten payload bits without quieting (a payload that
//!   would vanish becomes 1), and widens fp16 NaNs by a plain shift.

use std::fmt;
use std::str::FromStr;

use super::FormatError;

/// A number format for individual elements (no block scale).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElementFormat {
    /// IEEE binary32: the identity.
    #[serde(alias = "fp32")]
    F32,
    /// bfloat16: 1 sign, 8 exponent, 7 mantissa bits.
    Bf16,
    /// IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits. Serialized as
    /// "fp16" like [`ElementFormat::name`] ("f16" is accepted too).
    #[serde(rename = "fp16", alias = "f16")]
    F16,
    /// OCP float8 e4m3fn: bias 7, no infinity, NaN = S.1111.111, max 448.
    E4m3fn,
    /// OCP float8 e5m2: bias 15, IEEE-like with infinities, max 57344.
    E5m2,
    /// OCP float4 e2m1: bias 1, no infinity or NaN, max 6.
    E2m1,
}

/// What a cast does with values beyond the largest finite value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Overflow {
    /// The plain `ml_dtypes` cast: NaN for e4m3fn, ±inf for e5m2, fp16 and
    /// bf16, and ±6 (saturation) for e2m1, which has neither. NaN inputs give
    /// NaN, except e2m1 where they give a zero of the opposite sign.
    #[default]
    Cast,
    /// Clamp to ±max finite, then cast (what `np.clip` followed by a cast
    /// does). ±inf become ±max; NaN is handled exactly as by [`Overflow::Cast`].
    /// For `F32` this maps ±inf to ±`f32::MAX`.
    Saturate,
}

/// Layout of a small binary floating-point format, enough to round into it.
#[derive(Clone, Copy, Debug)]
struct Minifloat {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    specials: Specials,
}

/// How a minifloat spends its top exponent code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Specials {
    /// IEEE style: top exponent is ±inf (mantissa 0) or NaN (e5m2).
    Ieee,
    /// "fn" style: only S.1…1.1…1 is NaN, no infinity (e4m3fn).
    NanOnly,
    /// Every code is finite (e2m1).
    None,
    /// "fnuz" style: the negative-zero code S=1, all else 0 is the only NaN;
    /// no infinity and no −0 (AMD's e4m3fnuz).
    NegativeZeroNan,
}

const E4M3FN: Minifloat = Minifloat { exponent_bits: 4, mantissa_bits: 3, bias: 7, specials: Specials::NanOnly };
const E5M2: Minifloat = Minifloat { exponent_bits: 5, mantissa_bits: 2, bias: 15, specials: Specials::Ieee };
const E2M1: Minifloat = Minifloat { exponent_bits: 2, mantissa_bits: 1, bias: 1, specials: Specials::None };

/// AMD/graphcore float8 e4m3fnuz: bias 8, max 240, 0x80 is NaN, no −0.
const E4M3FNUZ: Minifloat = Minifloat { exponent_bits: 4, mantissa_bits: 3, bias: 8, specials: Specials::NegativeZeroNan };

const F32_SIGN: u32 = 0x8000_0000;
const F32_ABS: u32 = 0x7fff_ffff;
const F32_INF: u32 = 0x7f80_0000;
const F32_QUIET_NAN: u32 = 0x7fc0_0000;

impl Minifloat {
    /// Bit position of the sign in a code.
    const fn sign_shift(self) -> u32 {
        self.exponent_bits + self.mantissa_bits
    }

    /// Smallest unbiased exponent of a normal value.
    const fn min_exponent(self) -> i32 {
        1 - self.bias
    }

    /// Magnitude code of the largest finite value.
    const fn max_finite_code(self) -> u32 {
        let all_ones = (1 << self.sign_shift()) - 1;
        match self.specials {
            Specials::Ieee => all_ones - (1 << self.mantissa_bits), // exponent one below all-ones, mantissa all ones
            Specials::NanOnly => all_ones - 1,
            Specials::None | Specials::NegativeZeroNan => all_ones,
        }
    }

    /// Magnitude code of the canonical NaN `ml_dtypes` writes (quiet NaN).
    const fn nan_code(self) -> u32 {
        let exponent_all_ones = ((1 << self.exponent_bits) - 1) << self.mantissa_bits;
        match self.specials {
            Specials::Ieee => exponent_all_ones | (1 << (self.mantissa_bits - 1)),
            Specials::NanOnly => exponent_all_ones | ((1 << self.mantissa_bits) - 1),
            Specials::None => 0, // unused: e2m1 NaN handling is special-cased
            Specials::NegativeZeroNan => 1 << (self.exponent_bits + self.mantissa_bits),
        }
    }

    /// Magnitude code of infinity for [`Specials::Ieee`] formats.
    const fn inf_code(self) -> u32 {
        ((1 << self.exponent_bits) - 1) << self.mantissa_bits
    }

    /// Round `x` to nearest even into this format.
    ///
    /// Two candidate roundings are computed without branching on the input
    /// and one is selected: the normal range uses the integer
    /// round-half-even trick on the f32 bits (a mantissa carry correctly
    /// bumps the exponent), the subnormal range adds a power of two whose f32
    /// ulp equals the target's subnormal step, so the hardware f32 addition
    /// does the round-half-even for us and the low bits are the code.
    #[inline(always)]
    fn encode(self, x: f32, overflow: Overflow) -> u32 {
        let bits = x.to_bits();
        let sign = (bits & F32_SIGN) >> (31 - self.sign_shift());
        let abs = bits & F32_ABS;

        if abs > F32_INF {
            return match self.specials {
                // ml_dtypes maps NaN to a zero of the opposite sign for e2m1.
                Specials::None => sign ^ (1 << self.sign_shift()),
                // The NaN code already carries the sign bit; NaN has no sign.
                Specials::NegativeZeroNan => self.nan_code(),
                _ => sign | self.nan_code(),
            };
        }

        let mantissa_shift = 23 - self.mantissa_bits;
        // Normal range: re-bias the exponent, then round the dropped bits.
        let rebias = ((127 - self.bias) as u32) << 23;
        let odd = (abs >> mantissa_shift) & 1;
        let round_increment = (1 << (mantissa_shift - 1)) - 1 + odd;
        let normal = abs.wrapping_sub(rebias).wrapping_add(round_increment) >> mantissa_shift;

        // Subnormal range: the f32 ulp of `magic` is 2^(min_exponent - mantissa_bits).
        let magic_exponent = self.min_exponent() - self.mantissa_bits as i32 + 23;
        let magic_bits = ((magic_exponent + 127) as u32) << 23;
        let sum = f32::from_bits(abs) + f32::from_bits(magic_bits);
        let subnormal = sum.to_bits().wrapping_sub(magic_bits);

        let min_normal_bits = ((self.min_exponent() + 127) as u32) << 23;
        let magnitude = if abs < min_normal_bits { subnormal } else { normal };

        let max_code = self.max_finite_code();
        let magnitude = if magnitude > max_code {
            match (overflow, self.specials) {
                (Overflow::Saturate, _) | (_, Specials::None) => max_code,
                (Overflow::Cast, Specials::NanOnly) => self.nan_code(),
                (Overflow::Cast, Specials::Ieee) => self.inf_code(),
                (Overflow::Cast, Specials::NegativeZeroNan) => return self.nan_code(),
            }
        } else {
            magnitude
        };
        // fnuz has no −0: the sign of a zero is dropped (its code is NaN).
        if self.specials == Specials::NegativeZeroNan && magnitude == 0 {
            return 0;
        }
        sign | magnitude
    }

    /// f32 bit pattern of a code, as `ml_dtypes` widens it. `const` so the
    /// decode tables are built at compile time.
    const fn decode_bits(self, code: u32) -> u32 {
        let sign = ((code >> self.sign_shift()) & 1) << 31;
        let exponent_field = (code >> self.mantissa_bits) & ((1 << self.exponent_bits) - 1);
        let mantissa = code & ((1 << self.mantissa_bits) - 1);
        let exponent_all_ones = (1 << self.exponent_bits) - 1;

        let is_top = exponent_field == exponent_all_ones;
        match self.specials {
            Specials::Ieee if is_top && mantissa == 0 => return sign | F32_INF,
            Specials::Ieee if is_top => return sign | F32_QUIET_NAN,
            Specials::NanOnly if is_top && mantissa == (1 << self.mantissa_bits) - 1 => return sign | F32_QUIET_NAN,
            // ml_dtypes widens the fnuz NaN to the negative quiet NaN.
            Specials::NegativeZeroNan if code == self.nan_code() => return F32_SIGN | F32_QUIET_NAN,
            _ => {}
        }

        if exponent_field == 0 {
            if mantissa == 0 {
                return sign;
            }
            // Subnormal: mantissa · 2^(min_exponent - mantissa_bits); normalise
            // around the mantissa's leading one.
            let leading = 31 - mantissa.leading_zeros();
            let exponent = self.min_exponent() - self.mantissa_bits as i32 + leading as i32;
            let fraction = (mantissa ^ (1 << leading)) << (23 - leading);
            return sign | (((exponent + 127) as u32) << 23) | fraction;
        }
        let exponent = exponent_field as i32 - self.bias;
        sign | (((exponent + 127) as u32) << 23) | (mantissa << (23 - self.mantissa_bits))
    }

    const fn decode_table<const N: usize>(self) -> [u32; N] {
        let mut table = [0u32; N];
        let mut code = 0;
        while code < N {
            table[code] = self.decode_bits(code as u32);
            code += 1;
        }
        table
    }
}

/// f32 bit patterns of every code, built at compile time.
static E4M3FN_DECODE: [u32; 256] = E4M3FN.decode_table::<256>();
static E5M2_DECODE: [u32; 256] = E5M2.decode_table::<256>();
static E2M1_DECODE: [u32; 16] = E2M1.decode_table::<16>();
static E4M3FNUZ_DECODE: [u32; 256] = E4M3FNUZ.decode_table::<256>();

/// float8 e4m3fnuz (AMD MI300's fp8): bias 8, largest finite 240, no
/// infinity, no −0; the code 0x80 (−0 in e4m3fn) is its only NaN. Kept out
/// of [`ElementFormat`] because no pipeline stores in it: the simulator only
/// reads e4m3fn codes as fnuz and the reverse (cache-layout hypotheses, see
/// docs/HYPOTHESES.md). Matches `ml_dtypes.float8_e4m3fnuz` bit for bit
/// (`tests/data/golden_e4m3fnuz.csv`).
pub mod e4m3fnuz {
    use super::{Overflow, E4M3FNUZ, E4M3FNUZ_DECODE};

    /// Largest finite value.
    pub const MAX_FINITE: f32 = 240.0;
    /// The only NaN code (the bit pattern of −0 in e4m3fn).
    pub const NAN_CODE: u32 = 0x80;

    /// Code of `x` rounded to nearest even: overflow gives NaN with
    /// [`Overflow::Cast`], ±240 with [`Overflow::Saturate`]; −0 gives +0.
    pub fn encode(x: f32, overflow: Overflow) -> u32 {
        let x = match overflow {
            Overflow::Cast => x,
            Overflow::Saturate => x.clamp(-MAX_FINITE, MAX_FINITE),
        };
        E4M3FNUZ.encode(x, overflow)
    }

    /// Value of a code (bits above the low 8 ignored).
    pub fn decode(code: u32) -> f32 {
        f32::from_bits(E4M3FNUZ_DECODE[(code & 0xff) as usize])
    }
}

fn f16_encode(x: f32) -> u32 {
    let bits = x.to_bits();
    if bits & F32_ABS > F32_INF {
        // numpy keeps the top ten payload bits unquieted; an all-zero result
        // would read as infinity, so it becomes 1.
        let sign = (bits & F32_SIGN) >> 16;
        let payload = ((bits & 0x007f_ffff) >> 13).max(1);
        return sign | 0x7c00 | payload;
    }
    u32::from(half::f16::from_f32(x).to_bits())
}

fn f16_decode(code: u32) -> f32 {
    let code = code & 0xffff;
    if code & 0x7fff > 0x7c00 {
        // numpy widens NaN by a plain shift (no quiet bit forced).
        let sign = (code & 0x8000) << 16;
        return f32::from_bits(sign | F32_INF | ((code & 0x03ff) << 13));
    }
    half::f16::from_bits(code as u16).to_f32()
}

fn bf16_encode(x: f32) -> u32 {
    let bits = x.to_bits();
    if bits & F32_ABS > F32_INF {
        // ml_dtypes writes the canonical quiet NaN, keeping only the sign.
        return ((bits & F32_SIGN) >> 16) | 0x7fc0;
    }
    u32::from(half::bf16::from_f32(x).to_bits())
}

/// Every fact of one element format, in one place: its names and its bit
/// layout, from which width, range and exponent limits are derived at compile
/// time (see [`FormatFacts::new`]). Adding a format is one row of [`FACTS`]
/// plus its `encode`/`decode` arms (the fast paths).
#[derive(Clone, Copy, Debug)]
struct FormatFacts {
    format: ElementFormat,
    /// Canonical name: written in reports, accepted by `FromStr`.
    name: &'static str,
    /// Other accepted spellings.
    aliases: &'static [&'static str],
    layout: Minifloat,
    // Derived from `layout` by `new`, so never written by hand.
    bits: u32,
    max_finite: f32,
    min_normal: f32,
    emax: i32,
}

impl FormatFacts {
    const fn new(format: ElementFormat, name: &'static str, aliases: &'static [&'static str], layout: Minifloat) -> Self {
        FormatFacts {
            format,
            name,
            aliases,
            layout,
            bits: layout.sign_shift() + 1,
            max_finite: f32::from_bits(layout.decode_bits(layout.max_finite_code())),
            min_normal: f32::from_bits(((layout.min_exponent() + 127) as u32) << 23),
            emax: (layout.max_finite_code() >> layout.mantissa_bits) as i32 - layout.bias,
        }
    }
}

const F32_LAYOUT: Minifloat = Minifloat { exponent_bits: 8, mantissa_bits: 23, bias: 127, specials: Specials::Ieee };
const BF16: Minifloat = Minifloat { exponent_bits: 8, mantissa_bits: 7, bias: 127, specials: Specials::Ieee };
const FP16: Minifloat = Minifloat { exponent_bits: 5, mantissa_bits: 10, bias: 15, specials: Specials::Ieee };

/// One row per [`ElementFormat`], in declaration order, narrowest last.
const FACTS: [FormatFacts; 6] = [
    FormatFacts::new(ElementFormat::F32, "f32", &["fp32"], F32_LAYOUT),
    FormatFacts::new(ElementFormat::Bf16, "bf16", &[], BF16),
    FormatFacts::new(ElementFormat::F16, "fp16", &["f16"], FP16),
    FormatFacts::new(ElementFormat::E4m3fn, "e4m3fn", &[], E4M3FN),
    FormatFacts::new(ElementFormat::E5m2, "e5m2", &[], E5M2),
    FormatFacts::new(ElementFormat::E2m1, "e2m1", &[], E2M1),
];

// `facts` indexes FACTS by discriminant: a row out of order fails the build.
const _: () = {
    let mut i = 0;
    while i < FACTS.len() {
        assert!(FACTS[i].format as usize == i);
        i += 1;
    }
};

/// One field of every row of [`FACTS`], as an array: the per-block
/// accessors then load from a 4-byte-stride table, as the `match`es they
/// replace compiled to.
macro_rules! column {
    ($field:ident) => {{
        let mut column = [FACTS[0].$field; FACTS.len()];
        let mut i = 0;
        while i < FACTS.len() {
            column[i] = FACTS[i].$field;
            i += 1;
        }
        column
    }};
}

impl ElementFormat {
    /// Every format, narrowest last (the order of [`FACTS`]).
    pub const ALL: [ElementFormat; FACTS.len()] = {
        let mut all = [ElementFormat::F32; FACTS.len()];
        let mut i = 0;
        while i < FACTS.len() {
            all[i] = FACTS[i].format;
            i += 1;
        }
        all
    };

    const fn facts(self) -> &'static FormatFacts {
        &FACTS[self as usize]
    }

    /// Canonical name, as accepted by [`FromStr`] and written in reports.
    pub const fn name(self) -> &'static str {
        self.facts().name
    }

    /// Other spellings [`FromStr`] accepts.
    pub const fn aliases(self) -> &'static [&'static str] {
        self.facts().aliases
    }

    /// Storage width in bits (the code occupies the low `bits()` bits).
    pub const fn bits(self) -> u32 {
        self.facts().bits
    }

    /// Explicitly stored mantissa (fraction) bits.
    pub const fn mantissa_bits(self) -> u32 {
        self.facts().layout.mantissa_bits
    }

    /// Largest finite value.
    pub const fn max_finite(self) -> f32 {
        const COLUMN: [f32; FACTS.len()] = column!(max_finite);
        COLUMN[self as usize]
    }

    /// Smallest positive normal value, 2^(1 - bias).
    pub const fn min_normal(self) -> f32 {
        const COLUMN: [f32; FACTS.len()] = column!(min_normal);
        COLUMN[self as usize]
    }

    /// Largest unbiased exponent of a finite value (`floor(log2(max_finite))`),
    /// the `emax` of the OCP MX scale rule.
    pub const fn emax(self) -> i32 {
        const COLUMN: [i32; FACTS.len()] = column!(emax);
        COLUMN[self as usize]
    }

    /// The canonical names of `formats` joined by `separator`, for help and
    /// error texts (e.g. `names(&ElementFormat::ALL, ", ")`).
    pub fn names(formats: &[ElementFormat], separator: &str) -> String {
        formats.iter().map(|f| f.name()).collect::<Vec<_>>().join(separator)
    }

    /// Every accepted name, aliases in brackets: "f32 (fp32), bf16, …".
    pub fn names_with_aliases() -> String {
        let each = ElementFormat::ALL.iter().map(|f| match f.aliases() {
            [] => f.name().to_string(),
            aliases => format!("{} ({})", f.name(), aliases.join(", ")),
        });
        each.collect::<Vec<_>>().join(", ")
    }

    /// Code of `x` rounded to nearest even, in the low [`bits`](Self::bits)
    /// bits. Never panics; see the module doc for NaN and overflow results.
    #[inline]
    pub fn encode(self, x: f32, overflow: Overflow) -> u32 {
        let x = match overflow {
            Overflow::Cast => x,
            // NaN passes through `clamp` unchanged, as through `np.clip`.
            Overflow::Saturate => x.clamp(-self.max_finite(), self.max_finite()),
        };
        match self {
            ElementFormat::F32 => x.to_bits(),
            ElementFormat::Bf16 => bf16_encode(x),
            ElementFormat::F16 => f16_encode(x),
            ElementFormat::E4m3fn => E4M3FN.encode(x, overflow),
            ElementFormat::E5m2 => E5M2.encode(x, overflow),
            ElementFormat::E2m1 => E2M1.encode(x, overflow),
        }
    }

    /// Value of a code; bits above [`bits`](Self::bits) are ignored.
    #[inline]
    pub fn decode(self, code: u32) -> f32 {
        match self {
            ElementFormat::F32 => f32::from_bits(code),
            // Exact: bf16 is the top half of an f32 (NaN payload kept, as ml_dtypes does).
            ElementFormat::Bf16 => f32::from_bits((code & 0xffff) << 16),
            ElementFormat::F16 => f16_decode(code),
            ElementFormat::E4m3fn => f32::from_bits(E4M3FN_DECODE[(code & 0xff) as usize]),
            ElementFormat::E5m2 => f32::from_bits(E5M2_DECODE[(code & 0xff) as usize]),
            ElementFormat::E2m1 => f32::from_bits(E2M1_DECODE[(code & 0xf) as usize]),
        }
    }

    /// `decode(encode(x, overflow))`: the value `x` becomes once stored in this
    /// format. For `F32` with [`Overflow::Cast`] this is the identity.
    #[inline]
    pub fn round_trip(self, x: f32, overflow: Overflow) -> f32 {
        self.decode(self.encode(x, overflow))
    }

    /// [`round_trip`](Self::round_trip) over a slice, in place.
    pub fn round_trip_slice(self, xs: &mut [f32], overflow: Overflow) {
        if self == ElementFormat::F32 && overflow == Overflow::Cast {
            return;
        }
        super::with_widest_simd(
            #[inline(always)]
            || self.round_trip_slice_inline(xs, overflow),
        );
    }

    #[inline(always)]
    fn round_trip_slice_inline(self, xs: &mut [f32], overflow: Overflow) {
        // One match outside the loop so each loop body is monomorphic.
        match self {
            // Without NaN (whose canonical form needs the encoder), the bf16
            // cast is the integer round-half-even on the f32 bits, which also
            // overflows to ±inf exactly as the encoder does; it vectorises.
            ElementFormat::Bf16 if !xs.iter().fold(false, |nan, x| nan | x.is_nan()) => {
                let max = self.max_finite();
                xs.iter_mut().for_each(|x| {
                    let v = if overflow == Overflow::Saturate { x.clamp(-max, max) } else { *x };
                    let bits = v.to_bits();
                    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000;
                    *x = f32::from_bits(rounded);
                })
            }
            ElementFormat::E4m3fn => xs.iter_mut().for_each(|x| *x = Self::E4m3fn.round_trip(*x, overflow)),
            ElementFormat::E2m1 => xs.iter_mut().for_each(|x| *x = Self::E2m1.round_trip(*x, overflow)),
            other => xs.iter_mut().for_each(|x| *x = other.round_trip(*x, overflow)),
        }
    }
}

impl fmt::Display for ElementFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ElementFormat {
    type Err = FormatError;

    /// Accepts [`ElementFormat::name`] values and [`ElementFormat::aliases`]
    /// (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        ElementFormat::ALL
            .into_iter()
            .find(|f| f.name() == lower || f.aliases().contains(&lower.as_str()))
            .ok_or_else(|| FormatError::UnknownElementFormat { name: s.to_string(), allowed: ElementFormat::names_with_aliases() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_slice_fast_path_matches_the_encoder() {
        let inputs: Vec<f32> = (0..=u32::MAX)
            .step_by(1009)
            .map(f32::from_bits)
            .filter(|x| !x.is_nan())
            .chain([f32::MAX, f32::MIN, f32::INFINITY, -0.0])
            .collect();
        for overflow in [Overflow::Cast, Overflow::Saturate] {
            let mut fast = inputs.clone();
            ElementFormat::Bf16.round_trip_slice(&mut fast, overflow);
            for (x, got) in inputs.iter().zip(&fast) {
                let want = ElementFormat::Bf16.round_trip(*x, overflow);
                assert_eq!(got.to_bits(), want.to_bits(), "{x:e} {overflow:?}");
            }
        }
    }

    #[test]
    fn e2m1_decodes_to_the_documented_magnitudes() {
        let magnitudes: Vec<f32> = (0..8).map(|c| ElementFormat::E2m1.decode(c)).collect();
        assert_eq!(magnitudes, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(ElementFormat::E2m1.decode(0xf), -6.0);
    }

    #[test]
    fn max_finite_and_min_normal_match_the_codes() {
        for format in ElementFormat::ALL {
            let max = format.max_finite();
            assert_eq!(format.round_trip(max, Overflow::Cast), max, "{format}");
            assert_eq!(format.round_trip(-max, Overflow::Cast), -max, "{format}");
            let min_normal = format.min_normal();
            assert_eq!(format.round_trip(min_normal, Overflow::Cast), min_normal, "{format}");
            let (max, emax) = (f64::from(max), format.emax());
            assert!(2f64.powi(emax) <= max && max < 2f64.powi(emax + 1), "{format}");
        }
    }

    #[test]
    fn e4m3fn_ties_to_even_and_overflow_threshold() {
        let f = ElementFormat::E4m3fn;
        assert_eq!(f.encode(464.0, Overflow::Cast), 0x7e); // tie between 448 and 480 goes to even 448
        assert_eq!(f.encode(f32::from_bits(464f32.to_bits() + 1), Overflow::Cast), 0x7f);
        assert_eq!(f.encode(f32::INFINITY, Overflow::Saturate), 0x7e);
        assert_eq!(f.encode(f32::NEG_INFINITY, Overflow::Cast), 0xff);
        assert_eq!(f.encode(-0.0, Overflow::Cast), 0x80);
        // Smallest subnormal is 2^-9; half of it ties to even (zero), a hair more rounds up.
        assert_eq!(f.encode(2f32.powi(-10), Overflow::Cast), 0);
        assert_eq!(f.encode(f32::from_bits(2f32.powi(-10).to_bits() + 1), Overflow::Cast), 1);
        assert_eq!(f.encode(3.0 * 2f32.powi(-10), Overflow::Cast), 2);
    }

    #[test]
    fn no_panic_on_special_inputs() {
        let specials = [
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            0.0,
            -0.0,
        ];
        for format in ElementFormat::ALL {
            for overflow in [Overflow::Cast, Overflow::Saturate] {
                for &x in &specials {
                    let code = format.encode(x, overflow);
                    assert!(format.bits() == 32 || code >> format.bits() == 0);
                    let _ = format.decode(code);
                }
            }
        }
    }

    #[test]
    fn derived_facts_equal_the_former_literals_bit_for_bit() {
        // The values each format spelled out by hand before they were derived.
        let literals = |f: ElementFormat| -> (&str, u32, u32, f32, f32, i32) {
            match f {
                ElementFormat::F32 => ("f32", 32, 23, f32::MAX, f32::MIN_POSITIVE, 127),
                ElementFormat::Bf16 => ("bf16", 16, 7, f32::from_bits(0x7f7f_0000), f32::MIN_POSITIVE, 127),
                ElementFormat::F16 => ("fp16", 16, 10, 65504.0, f32::from_bits(0x3880_0000), 15),
                ElementFormat::E4m3fn => ("e4m3fn", 8, 3, 448.0, 0.015625, 8),
                ElementFormat::E5m2 => ("e5m2", 8, 2, 57344.0, f32::from_bits(0x3880_0000), 15),
                ElementFormat::E2m1 => ("e2m1", 4, 1, 6.0, 1.0, 2),
            }
        };
        for f in ElementFormat::ALL {
            let (name, bits, mantissa_bits, max_finite, min_normal, emax) = literals(f);
            assert_eq!(f.name(), name);
            assert_eq!(f.bits(), bits, "{f}");
            assert_eq!(f.mantissa_bits(), mantissa_bits, "{f}");
            assert_eq!(f.max_finite().to_bits(), max_finite.to_bits(), "{f}");
            assert_eq!(f.min_normal().to_bits(), min_normal.to_bits(), "{f}");
            assert_eq!(f.emax(), emax, "{f}");
        }
        assert_eq!(ElementFormat::ALL.len(), 6);
        assert_eq!(ElementFormat::names_with_aliases(), "f32 (fp32), bf16, fp16 (f16), e4m3fn, e5m2, e2m1");
    }

    #[test]
    fn names_parse_back() {
        for format in ElementFormat::ALL {
            assert_eq!(format.name().parse::<ElementFormat>().ok(), Some(format));
        }
        assert_eq!("FP32".parse::<ElementFormat>().ok(), Some(ElementFormat::F32));
        assert_eq!("f16".parse::<ElementFormat>().ok(), Some(ElementFormat::F16));
        let err = "fp8".parse::<ElementFormat>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("e4m3fn"), "{err}");
    }

    #[test]
    fn serde_names_match_name() {
        for format in ElementFormat::ALL {
            let json = serde_json::to_string(&format).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", format.name()));
            let back: Option<ElementFormat> = serde_json::from_str(&json).ok();
            assert_eq!(back, Some(format));
        }
        // The serde attributes spell the aliases again; this ties them to `aliases`.
        for format in ElementFormat::ALL {
            for alias in format.aliases() {
                assert_eq!(serde_json::from_str::<ElementFormat>(&format!("\"{alias}\"")).ok(), Some(format), "{alias}");
            }
        }
    }
}

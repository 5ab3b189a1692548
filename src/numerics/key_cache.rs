//! The paged indexer key cache between the quantizer and the scorer, and the
//! faults a hypothesis can put into it (docs/HYPOTHESES.md).
//!
//! Engines store indexer keys in pages of [`PAGE_ROWS`] rows: the rows' fp8
//! codes, then their scales (sglang/vLLM: 64 × 128 code bytes followed by 64
//! fp32 scales, 132 bytes per token; docs/NUMERICS.md). Without a fault the
//! cache returns exactly what the key pipeline quantized. With faults, a
//! chunk goes through three fixed steps:
//!
//! 1. **write**: codes and scales as the writer makes them (which rows a
//!    scale spans, how it is rounded, a stale scale, the fp8 flavour);
//! 2. **memory**: what the scale words hold when read (a neighbour's word,
//!    never written);
//! 3. **read**: the byte layout the page is read with (codes and scales
//!    encoded to a page's bytes and read back, [`PageLayoutFault`]), which
//!    slot a row is read from, and the fp8 flavour its codes are decoded as.
//!
//! Rows the reader asks for that were never written (past the last row of a
//! partial page) read as zero-filled memory: zero codes and a zero scale
//! (assumption: caches are allocated zeroed).

use crate::error::SimError;
use crate::numerics::format::element::e4m3fnuz;
use crate::numerics::format::{block_scale, hadamard_rows_in_place, ElementFormat, Overflow, ScaleFormat};
use crate::numerics::pipeline::{QuantPipeline, QuantizedRows, Rotation};
use serde::{Deserialize, Serialize};

mod parts;
pub use parts::ChunkPart;

/// Rows per page of the paged indexer cache (sglang, vLLM, FlashMLA).
pub const PAGE_ROWS: usize = 64;

/// Rows one "per-tensor" scale spans: the simulator writes keys in chunks of
/// 256 aligned rows, so one scale per 256 rows is the widest scale computable
/// when a row is written (see docs/HYPOTHESES.md, `scale-per-tensor`).
pub const TENSOR_SPAN_ROWS: usize = 256;

/// Which rows share one key scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleSpan {
    /// One scale per row, as the key pipeline computes it.
    #[default]
    Row,
    /// One scale per page: the amax over the page's rows.
    Page,
    /// One scale per [`TENSOR_SPAN_ROWS`] aligned rows.
    Tensor,
}

/// The fp8 flavour codes are written or decoded in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Fp8Flavour {
    /// OCP e4m3fn: bias 7, max 448 (what every key pipeline writes).
    #[default]
    E4m3fn,
    /// AMD e4m3fnuz: bias 8, max 240, 0x80 is NaN.
    E4m3fnuz,
}

impl Fp8Flavour {
    fn max_finite(self) -> f32 {
        match self {
            Fp8Flavour::E4m3fn => ElementFormat::E4m3fn.max_finite(),
            Fp8Flavour::E4m3fnuz => e4m3fnuz::MAX_FINITE,
        }
    }

    /// Cast of an already clamped value into this flavour, as its value.
    fn round(self, x: f32) -> f32 {
        match self {
            Fp8Flavour::E4m3fn => ElementFormat::E4m3fn.round_trip(x, Overflow::Cast),
            Fp8Flavour::E4m3fnuz => e4m3fnuz::decode(e4m3fnuz::encode(x, Overflow::Cast)),
        }
    }

    fn encode(self, x: f32) -> u32 {
        match self {
            Fp8Flavour::E4m3fn => ElementFormat::E4m3fn.encode(x, Overflow::Cast),
            Fp8Flavour::E4m3fnuz => e4m3fnuz::encode(x, Overflow::Cast),
        }
    }

    fn decode(self, code: u32) -> f32 {
        match self {
            Fp8Flavour::E4m3fn => ElementFormat::E4m3fn.decode(code),
            Fp8Flavour::E4m3fnuz => e4m3fnuz::decode(code),
        }
    }
}

/// What the reader finds in the scale words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleWordFault {
    /// The row's own scale.
    #[default]
    None,
    /// The next slot's scale (slot 63 wraps to slot 0 of its page).
    NextSlot,
    /// Never written, zero-filled: every logit is 0.
    UnwrittenZero,
    /// Never written, NaN-filled (e.g. a NaN-poisoned allocator): every logit NaN.
    UnwrittenNan,
}

/// How the reader lays a page's bytes out when the writer laid them out as
/// the engines do (planar, flat: 64 × 128 code bytes, then 64 fp32 scale
/// words; docs/NUMERICS.md), or the reverse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PageLayoutFault {
    /// Writer and reader agree.
    #[default]
    None,
    /// `layout-interleaved-read`: written planar, read as records of d + 4
    /// bytes (the row's codes, then its scale word).
    InterleavedRead,
    /// `layout-planar-read`: written as interleaved records, read planar.
    PlanarRead,
    /// `layout-tile16`: codes written flat, read through 16 × 16 tiles
    /// (AITER's preshuffled indexer cache); scales unaffected.
    Tile16Read,
}

/// Side of a tile of AITER's preshuffled indexer cache (rows × code bytes).
pub const PRESHUFFLE_TILE: usize = 16;

/// Bytes of one page of the fp8 indexer cache per token at head_dim 128:
/// 128 code bytes and one fp32 scale word (sglang/vLLM; docs/NUMERICS.md).
pub const INDEXER_TOKEN_BYTES: u64 = 132;

/// The physical block whose byte offset, block × 64 × 132, first reaches
/// 2^31 (`offset-32bit`): ⌈2^31 / 8448⌉.
pub const FIRST_BLOCK_PAST_2_31: u64 = (1u64 << 31).div_ceil(PAGE_ROWS as u64 * INDEXER_TOKEN_BYTES);

/// Where one page's bytes live, as a writer or a reader addresses them
/// (rows of `d` one-byte codes and one 4-byte scale word each).
#[derive(Clone, Copy, Debug)]
struct PageAddressing {
    d: usize,
    /// Records of d + 4 bytes (codes then scale) instead of all codes,
    /// then all scales.
    interleaved: bool,
    /// Planar codes stored in tiles of this many rows × bytes.
    tile: Option<usize>,
}

impl PageAddressing {
    fn page_bytes(&self) -> usize {
        PAGE_ROWS * (self.d + 4)
    }

    /// Byte of code `c` of slot `slot`.
    fn code(&self, slot: usize, c: usize) -> usize {
        let d = self.d;
        match (self.interleaved, self.tile) {
            (true, _) => slot * (d + 4) + c,
            (false, None) => slot * d + c,
            (false, Some(t)) => (slot / t) * (t * d) + (c / t) * (t * t) + (slot % t) * t + c % t,
        }
    }

    /// First byte of slot `slot`'s scale word (little-endian f32).
    fn scale(&self, slot: usize) -> usize {
        if self.interleaved {
            slot * (self.d + 4) + self.d
        } else {
            PAGE_ROWS * self.d + slot * 4
        }
    }
}

impl PageLayoutFault {
    /// (writer, reader) addressing for rows of `d` codes.
    fn addressing(self, d: usize) -> (PageAddressing, PageAddressing) {
        let planar = PageAddressing { d, interleaved: false, tile: None };
        let interleaved = PageAddressing { interleaved: true, ..planar };
        let tiled = PageAddressing { tile: Some(PRESHUFFLE_TILE), ..planar };
        match self {
            PageLayoutFault::None => (planar, planar),
            PageLayoutFault::InterleavedRead => (planar, interleaved),
            PageLayoutFault::PlanarRead => (interleaved, planar),
            PageLayoutFault::Tile16Read => (planar, tiled),
        }
    }
}

/// Faults of the key cache; the default has none. Each field is set by one
/// hypothesis (docs/HYPOTHESES.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct KeyCacheFaults {
    /// `scale-per-page`, `scale-per-tensor`.
    pub scale_span: ScaleSpan,
    /// `scale-floor`: the power-of-two scale rounded down, not up.
    pub scale_rounded_down: bool,
    /// `stale-scale`: each row quantized with the previous row's scale.
    pub stale_scale: bool,
    /// `e4m3fn-read`: the writer's flavour (default e4m3fn).
    pub written_as: Fp8Flavour,
    /// `e4m3fnuz-read`: the reader's flavour (default e4m3fn).
    pub read_as: Fp8Flavour,
    /// `scale-offset`, `scale-unwritten-zero`, `scale-unwritten-nan`.
    pub scale_word: ScaleWordFault,
    /// `slot-shift`: the row in slot s is read from slot (s + 1) mod 64.
    pub slot_shift: bool,
    /// `pages-swapped`: pages 2p and 2p + 1 are read in each other's place.
    pub pages_swapped: bool,
    /// `block-row0`: every row of a page is read (codes and scale) from the
    /// page's row 0.
    #[serde(skip_serializing_if = "is_false")]
    pub block_row0: bool,
    /// `zero-pages=P`: each page of a request is read as all-zero keys
    /// (every logit 0) with this probability, in parts per million, drawn
    /// per request and page (physically high blocks past a 32-bit offset).
    #[serde(skip_serializing_if = "is_zero")]
    pub zero_pages_ppm: u32,
    /// `rotated-before=R`: rows before cache row R were written rotated,
    /// the rest unrotated (a mixed cache); queries stay rotated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotated_before: Option<u64>,
    /// `layout-interleaved-read`, `layout-planar-read`, `layout-tile16`:
    /// the page's bytes read with another layout than written.
    #[serde(skip_serializing_if = "is_default_layout")]
    pub page_layout: PageLayoutFault,
    /// `offset-32bit=POOL`: each page of a request lies in a physical block
    /// drawn uniformly from a pool of this many blocks; blocks whose byte
    /// offset (block × 64 × 132) reaches 2^31 read as all-zero keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset_32bit_blocks: Option<u64>,
}

/// Where rows are stored: from cache row `first_row` of the request seeded
/// `request`, as a whole chunk (`first_row` checked to be a multiple of
/// [`TENSOR_SPAN_ROWS`]) or a part of one ([`KeyCacheFaults::store_part`]).
#[derive(Clone, Copy, Debug)]
struct At {
    first_row: u64,
    request: u64,
    whole_chunk: bool,
}

fn is_default_layout(x: &PageLayoutFault) -> bool {
    *x == PageLayoutFault::None
}

fn is_zero(x: &u32) -> bool {
    *x == 0
}

fn is_false(x: &bool) -> bool {
    !*x
}

/// Whether page `page` of the request seeded `request` reads as zeros
/// under a share of `ppm` parts per million.
pub fn page_zeroed(request: u64, page: u64, ppm: u32) -> bool {
    ppm > 0 && crate::base::rng::derive(request, &[crate::base::rng::tag::CACHE, page]) % 1_000_000 < u64::from(ppm)
}

/// The physical block that page `page` of the request seeded `request`
/// lands in, from a pool of `pool_blocks` blocks (uniform, each page drawn
/// on its own: an allocator that hands out blocks in no particular order).
pub fn physical_block(request: u64, page: u64, pool_blocks: u64) -> u64 {
    crate::base::rng::derive(request, &[crate::base::rng::tag::CACHE, page]) % pool_blocks.max(1)
}

/// Whether page `page` of the request seeded `request` lies past 2^31 bytes
/// in a pool of `pool_blocks` blocks of the fp8 indexer cache.
pub fn page_past_32bit(request: u64, page: u64, pool_blocks: u64) -> bool {
    physical_block(request, page, pool_blocks) >= FIRST_BLOCK_PAST_2_31
}

impl KeyCacheFaults {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Whether these faults only move whole written rows (codes and scale
    /// together) into other rows' places, `pages-swapped`, `slot-shift` and
    /// `block-row0` alone or together: row r of a chunk then reads written
    /// row [`Self::read_row`] as it is (a zero row with scale 0 past the
    /// chunk's rows), so it scores as that row does.
    pub fn moves_rows_only(&self) -> bool {
        let rest = KeyCacheFaults { slot_shift: false, pages_swapped: false, block_row0: false, ..*self };
        rest.is_default() && !self.is_default()
    }

    /// The written row (chunk-relative) a reader of row `r` fetches.
    pub fn read_row(&self, r: usize) -> usize {
        self.source_row(r)
    }

    fn write_changed(&self) -> bool {
        self.scale_span != ScaleSpan::Row || self.scale_rounded_down || self.stale_scale || self.written_as != Fp8Flavour::E4m3fn
    }

    /// Faults that need the keys as fp8 element values with one scale per row.
    fn need_row_scaled_fp8(&self) -> bool {
        self.write_changed()
            || self.read_as != self.written_as
            || self.scale_word != ScaleWordFault::None
            || self.page_layout != PageLayoutFault::None
            || self.offset_32bit_blocks.is_some()
    }

    /// Why `key` (rows of `d`) cannot carry these faults, if it cannot.
    pub fn unsupported(&self, key: &QuantPipeline, d: usize) -> Option<String> {
        if !self.need_row_scaled_fp8() {
            return None;
        }
        let Some(scaling) = key.scaling.filter(|_| key.has_row_scale(d) && key.element == ElementFormat::E4m3fn) else {
            return Some("it needs e4m3fn keys with one scale per row (fp8, fp8-fp32scale or a custom variant like them)".into());
        };
        if self.page_layout == PageLayoutFault::Tile16Read && !d.is_multiple_of(PRESHUFFLE_TILE) {
            return Some(format!("layout-tile16 needs rows of a multiple of {PRESHUFFLE_TILE} code bytes, not {d}"));
        }
        if self.scale_rounded_down && scaling.scale != ScaleFormat::Ue8m0Ceil {
            return Some("scale-floor needs a power-of-two scale rounded up (ue8m0, as in fp8) to round down instead".into());
        }
        if self.written_as == Fp8Flavour::E4m3fnuz && !matches!(scaling.scale, ScaleFormat::Ue8m0Ceil | ScaleFormat::Fp32) {
            return Some("e4m3fn-read needs an fp32 or ue8m0 key scale".into());
        }
        None
    }

    /// Keys `raw` (rows `first_row …`, `first_row` a multiple of
    /// [`TENSOR_SPAN_ROWS`]) written through `key` into the cache of the
    /// request seeded `request` with these faults, as the scorer reads them
    /// back into `out`.
    pub fn store(
        &self,
        key: &QuantPipeline,
        raw: &[f32],
        first_row: u64,
        request: u64,
        d: usize,
        out: &mut QuantizedRows,
    ) -> Result<(), SimError> {
        self.store_at(key, raw, At { first_row, request, whole_chunk: true }, d, out)
    }

    /// [`Self::store`] of a whole chunk, or of a part of one ([`Self::store_part`]).
    fn store_at(&self, key: &QuantPipeline, raw: &[f32], at: At, d: usize, out: &mut QuantizedRows) -> Result<(), SimError> {
        if self.is_default() {
            return Ok(key.quantize_rows_into(raw, d, out)?);
        }
        self.check_keys(key, d)?;
        if self.without_mixed() != *self {
            return self.store_mixed(key, raw, at, d, out);
        }
        let mut written = QuantizedRows::default();
        if self.write_changed() {
            self.write(key, raw, d, &mut written)?;
        } else {
            key.quantize_rows_into(raw, d, &mut written)?;
        }
        self.read_back(written, at, d, out)
    }

    /// These faults without the mixed-cache and zero-page ones ([`Self::store_mixed`]).
    fn without_mixed(&self) -> KeyCacheFaults {
        KeyCacheFaults { zero_pages_ppm: 0, rotated_before: None, offset_32bit_blocks: None, ..*self }
    }

    /// Refuses keys these faults cannot apply to ([`Self::unsupported`]).
    fn check_keys(&self, key: &QuantPipeline, d: usize) -> Result<(), SimError> {
        match self.unsupported(key, d) {
            Some(why) => Err(SimError::Hypothesis(format!("key cache faults {self:?} cannot apply to these keys: {why}"))),
            None => Ok(()),
        }
    }

    /// Whether [`Self::store`] starts from `key`'s own quantization of the
    /// rows, which several faults may then share ([`Self::store_quantized`]).
    pub fn starts_from_quantized(&self) -> bool {
        self.is_default() || (self.without_mixed() == *self && !self.write_changed())
    }

    /// [`Self::store`] from `quantized`, the rows as `key` quantizes them
    /// (`key.quantize_rows_into`), for faults that
    /// [`Self::starts_from_quantized`]: the same bits as `store` on the raw rows.
    pub fn store_quantized(
        &self,
        key: &QuantPipeline,
        quantized: &QuantizedRows,
        first_row: u64,
        d: usize,
        out: &mut QuantizedRows,
    ) -> Result<(), SimError> {
        self.store_quantized_at(key, quantized, At { first_row, request: 0, whole_chunk: true }, d, out)
    }

    /// [`Self::store_quantized`] of a whole chunk or a part of one.
    fn store_quantized_at(
        &self,
        key: &QuantPipeline,
        quantized: &QuantizedRows,
        at: At,
        d: usize,
        out: &mut QuantizedRows,
    ) -> Result<(), SimError> {
        if self.is_default() {
            out.clone_from(quantized);
            return Ok(());
        }
        if !self.starts_from_quantized() {
            return Err(SimError::Hypothesis(format!(
                "key cache faults {self:?} write their own quantization: store them from the raw keys"
            )));
        }
        self.check_keys(key, d)?;
        self.read_back(quantized.clone(), at, d, out)
    }

    /// The rows `written` from `at.first_row` (of a whole chunk: a
    /// multiple of [`TENSOR_SPAN_ROWS`]) as the scorer reads them back.
    fn read_back(&self, written: QuantizedRows, at: At, d: usize, out: &mut QuantizedRows) -> Result<(), SimError> {
        let first_row = at.first_row;
        if at.whole_chunk && !first_row.is_multiple_of(TENSOR_SPAN_ROWS as u64) {
            return Err(SimError::Hypothesis(format!("key chunks must start at a multiple of {TENSOR_SPAN_ROWS} rows, not {first_row}")));
        }
        self.corrupt_relay_read(written, d, out);
        Ok(())
    }

    /// What the reader makes of the rows as written: scale words corrupted,
    /// pages relaid, codes read.
    fn corrupt_relay_read(&self, mut written: QuantizedRows, d: usize, out: &mut QuantizedRows) {
        self.corrupt_scale_words(&mut written.row_scales);
        if self.page_layout != PageLayoutFault::None {
            written = self.relay_pages(&written, d);
        }
        self.read(&written, d, out);
    }

    /// The mixed-cache and zero-page faults on top of the others: rows from
    /// `rotated_before` on are written without the key pipeline's rotation,
    /// then pages drawn zero read as zero keys.
    fn store_mixed(&self, key: &QuantPipeline, raw: &[f32], at: At, d: usize, out: &mut QuantizedRows) -> Result<(), SimError> {
        let At { first_row, request, .. } = at;
        let rest = self.without_mixed();
        match self.rotated_before {
            Some(r) if d > 0 && r < first_row + (raw.len() / d) as u64 => {
                if key.rotation != Rotation::Hadamard {
                    return Err(SimError::Hypothesis("rotated-before needs keys with a Hadamard rotation".into()));
                }
                let unrotated = QuantPipeline { rotation: Rotation::None, ..key.clone() };
                let split = (r.saturating_sub(first_row) as usize).min(raw.len() / d);
                // Rows before the split as written; the rest as if unrotated.
                rest.store_at(key, raw, at, d, out)?;
                if split < raw.len() / d {
                    let mut tail = QuantizedRows::default();
                    rest.store_at(&unrotated, raw, at, d, &mut tail)?;
                    out.values[split * d..].copy_from_slice(&tail.values[split * d..]);
                    out.row_scales[split..].copy_from_slice(&tail.row_scales[split..]);
                }
            }
            _ => rest.store_at(key, raw, at, d, out)?,
        }
        let zeroed = |page: u64| match self.offset_32bit_blocks {
            Some(pool) => page_past_32bit(request, page, pool),
            None => page_zeroed(request, page, self.zero_pages_ppm),
        };
        if self.zero_pages_ppm > 0 || self.offset_32bit_blocks.is_some() {
            for (r, row) in out.values.chunks_exact_mut(d.max(1)).enumerate() {
                if zeroed((first_row + r as u64) / PAGE_ROWS as u64) {
                    row.fill(0.0);
                }
            }
        }
        Ok(())
    }

    /// Step 1 with a changed writer (the key pipeline is row-scaled e4m3fn,
    /// checked by [`Self::unsupported`]).
    fn write(&self, key: &QuantPipeline, raw: &[f32], d: usize, out: &mut QuantizedRows) -> Result<(), SimError> {
        let Some(scaling) = key.scaling else {
            return Err(SimError::Hypothesis("a changed key scale needs a scaled key pipeline".into()));
        };
        if d == 0 || !raw.len().is_multiple_of(d) {
            return Err(crate::numerics::format::FormatError::LengthNotMultipleOfRow { len: raw.len(), d }.into());
        }
        let rows = raw.len() / d;
        out.values.clear();
        out.values.extend_from_slice(raw);
        if key.rotation == Rotation::Hadamard {
            hadamard_rows_in_place(&mut out.values, d)?;
        }
        // amax per row (NaN ignored, as the pipeline's), then over the span.
        let row_amax: Vec<f32> = out.values.chunks_exact(d).map(|r| r.iter().fold(0f32, |a, v| a.max(v.abs()))).collect();
        let span = match self.scale_span {
            ScaleSpan::Row => 1,
            ScaleSpan::Page => PAGE_ROWS,
            ScaleSpan::Tensor => TENSOR_SPAN_ROWS,
        };
        let max = self.written_as.max_finite();
        let natural: Vec<f32> = row_amax
            .chunks(span)
            .flat_map(|group| {
                let amax = group.iter().fold(0f32, |a, &b| a.max(b)).max(scaling.amax_floor);
                let s = self.scale_of(amax, scaling.scale, max);
                std::iter::repeat_n(s, group.len())
            })
            .collect();
        out.row_scales.clear();
        out.row_scales.extend((0..rows).map(|r| if self.stale_scale && r % PAGE_ROWS != 0 { natural[r - 1] } else { natural[r] }));
        for (row, &s) in out.values.chunks_exact_mut(d).zip(&out.row_scales) {
            for v in row.iter_mut() {
                // As the reference: divide, clamp to the format's range, cast.
                let scaled = if s == 0.0 { 0f32.copysign(*v) } else { *v / s };
                *v = self.written_as.round(scaled.clamp(-max, max));
            }
        }
        Ok(())
    }

    /// The scale a writer with these faults gives a span whose floored amax
    /// is `amax`, for a flavour whose largest value is `max`.
    fn scale_of(&self, amax: f32, rule: ScaleFormat, max: f32) -> f32 {
        let s = match self.written_as {
            Fp8Flavour::E4m3fn => block_scale(amax, ElementFormat::E4m3fn, rule),
            Fp8Flavour::E4m3fnuz => fnuz_scale(amax, rule),
        };
        if !self.scale_rounded_down || !s.is_finite() || s <= 0.0 {
            return s;
        }
        // s = 2^ceil(log2(amax/max)); the floor is s itself when amax/max is
        // a power of two, else s/2 (not below ue8m0's smallest, 2^-127).
        let exact = f64::from(max) * f64::from(s) == f64::from(amax);
        if exact || s <= f32::from_bits(1 << 22) {
            s
        } else {
            s / 2.0
        }
    }

    /// Step 2: what the reader finds in the scale words.
    fn corrupt_scale_words(&self, scales: &mut [f32]) {
        match self.scale_word {
            ScaleWordFault::None => {}
            ScaleWordFault::UnwrittenZero => scales.fill(0.0),
            ScaleWordFault::UnwrittenNan => scales.fill(f32::NAN),
            ScaleWordFault::NextSlot => {
                for page in scales.chunks_mut(PAGE_ROWS) {
                    let own: Vec<f32> = page.to_vec();
                    for (slot, s) in page.iter_mut().enumerate() {
                        let next = (slot + 1) % PAGE_ROWS;
                        // A slot of a partial page never written reads zero.
                        *s = own.get(next).copied().unwrap_or(0.0);
                    }
                }
            }
        }
    }

    /// Written rows (element values exactly codes of the writer's flavour,
    /// one scale each) laid into page bytes by the writer's layout and read
    /// back by the reader's: codes and scale words as the reader finds them,
    /// still in the writer's flavour (step 3 decodes). Bytes of a partial
    /// page past its last row are zero (allocated zeroed).
    fn relay_pages(&self, written: &QuantizedRows, d: usize) -> QuantizedRows {
        let (writer, reader) = self.page_layout.addressing(d);
        let rows = written.row_scales.len();
        let mut out = QuantizedRows { values: Vec::with_capacity(rows * d), row_scales: Vec::with_capacity(rows) };
        let mut bytes = vec![0u8; writer.page_bytes()];
        for first in (0..rows).step_by(PAGE_ROWS) {
            let here = (rows - first).min(PAGE_ROWS);
            bytes.fill(0);
            for slot in 0..here {
                let r = first + slot;
                for (c, &v) in written.values[r * d..(r + 1) * d].iter().enumerate() {
                    bytes[writer.code(slot, c)] = self.written_as.encode(v) as u8;
                }
                let at = writer.scale(slot);
                bytes[at..at + 4].copy_from_slice(&written.row_scales[r].to_le_bytes());
            }
            for slot in 0..here {
                out.values.extend((0..d).map(|c| self.written_as.decode(u32::from(bytes[reader.code(slot, c)]))));
                let at = reader.scale(slot);
                out.row_scales.push(f32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]));
            }
        }
        out
    }

    /// The written row a reader of row `r` (chunk-relative) fetches.
    fn source_row(&self, r: usize) -> usize {
        let (mut page, mut slot) = (r / PAGE_ROWS, r % PAGE_ROWS);
        if self.pages_swapped {
            page ^= 1;
        }
        if self.slot_shift {
            slot = (slot + 1) % PAGE_ROWS;
        }
        if self.block_row0 {
            slot = 0;
        }
        page * PAGE_ROWS + slot
    }

    /// Step 3: rows fetched from their (possibly wrong) slots and decoded in
    /// the reader's flavour.
    fn read(&self, written: &QuantizedRows, d: usize, out: &mut QuantizedRows) {
        let rows = written.row_scales.len();
        out.values.clear();
        out.row_scales.clear();
        for r in 0..rows {
            let src = self.source_row(r);
            match written.row_scales.get(src) {
                Some(&s) => {
                    out.values.extend_from_slice(&written.values[src * d..(src + 1) * d]);
                    out.row_scales.push(s);
                }
                None => {
                    out.values.extend(std::iter::repeat_n(0.0, d));
                    out.row_scales.push(0.0);
                }
            }
        }
        if self.read_as != self.written_as {
            // Exact: every value is a code of the writer's flavour.
            for v in &mut out.values {
                *v = self.read_as.decode(self.written_as.encode(*v));
            }
        }
    }
}

/// The scale an e4m3fnuz writer (max 240) computes from a floored amax:
/// `amax / 240` (fp32 rule) or the smallest power of two `s` with
/// `amax / s ≤ 240` (ue8m0 rule). The f64 quotient of an f32 by 240 is a
/// power of two only when the real quotient is (f32 neighbours differ by
/// 2^-24 relatively, far more than f64's rounding), so the ceiling is exact.
fn fnuz_scale(amax: f32, rule: ScaleFormat) -> f32 {
    if amax.is_nan() {
        return f32::NAN;
    }
    if amax <= 0.0 {
        return 1.0;
    }
    match rule {
        ScaleFormat::Ue8m0Ceil => {
            let ratio = f64::from(amax) / f64::from(e4m3fnuz::MAX_FINITE);
            let bits = ratio.to_bits();
            let exponent = ((bits >> 52) & 0x7ff) as i32 - 1023;
            let n = if bits & ((1u64 << 52) - 1) == 0 { exponent } else { exponent + 1 };
            2f64.powi(n.clamp(-127, 127)) as f32
        }
        _ => amax / e4m3fnuz::MAX_FINITE,
    }
}

#[cfg(test)]
mod tests;

//! Declared key-cache layouts: where an engine puts each row's codes and
//! scales in the bytes of a cache block, as data (a small TOML table), and a
//! reader that follows the declaration, or a wrong reader that follows one of
//! the layout faults of the field (docs/TENSORS.md, "Layouts").

use crate::numerics::format::element::e4m3fnuz;
use crate::numerics::format::{BlockScaling, BlockShape, ElementFormat, ScaleFormat};
use serde::{Deserialize, Serialize};

/// Element format of the codes in a cache (one more than the simulator
/// stores: AMD's e4m3fnuz, which ROCm engines write).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodeFormat {
    E4m3fn,
    E4m3fnuz,
    E5m2,
    E2m1,
    Bf16,
    F16,
    F32,
}

impl CodeFormat {
    pub const NAMES: &'static str = "e4m3fn, e4m3fnuz, e5m2, e2m1, bf16, f16, f32";

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "e4m3fn" | "fp8" | "f8_e4m3" => CodeFormat::E4m3fn,
            "e4m3fnuz" | "f8_e4m3fnuz" => CodeFormat::E4m3fnuz,
            "e5m2" | "f8_e5m2" => CodeFormat::E5m2,
            "e2m1" | "fp4" => CodeFormat::E2m1,
            "bf16" => CodeFormat::Bf16,
            "f16" | "fp16" => CodeFormat::F16,
            "f32" | "fp32" => CodeFormat::F32,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CodeFormat::E4m3fn => "e4m3fn",
            CodeFormat::E4m3fnuz => "e4m3fnuz",
            CodeFormat::E5m2 => "e5m2",
            CodeFormat::E2m1 => "e2m1",
            CodeFormat::Bf16 => "bf16",
            CodeFormat::F16 => "f16",
            CodeFormat::F32 => "f32",
        }
    }

    pub fn bits(self) -> usize {
        match self {
            CodeFormat::E2m1 => 4,
            CodeFormat::E4m3fn | CodeFormat::E4m3fnuz | CodeFormat::E5m2 => 8,
            CodeFormat::Bf16 | CodeFormat::F16 => 16,
            CodeFormat::F32 => 32,
        }
    }

    /// The simulator's element format for these codes (None for e4m3fnuz).
    pub fn element(self) -> Option<ElementFormat> {
        Some(match self {
            CodeFormat::E4m3fn => ElementFormat::E4m3fn,
            CodeFormat::E4m3fnuz => return None,
            CodeFormat::E5m2 => ElementFormat::E5m2,
            CodeFormat::E2m1 => ElementFormat::E2m1,
            CodeFormat::Bf16 => ElementFormat::Bf16,
            CodeFormat::F16 => ElementFormat::F16,
            CodeFormat::F32 => ElementFormat::F32,
        })
    }

    /// Bytes holding `values` codes (rounded up for nibbles).
    pub fn bytes_for(self, values: usize) -> usize {
        (values * self.bits()).div_ceil(8)
    }

    /// Value of code `i` of a run of codes that starts at `bytes[0]`; for
    /// e2m1 the even code is the low nibble when `low_first`.
    #[inline]
    pub fn decode_at(self, bytes: &[u8], i: usize, low_first: bool) -> f32 {
        match self {
            CodeFormat::E4m3fn => ElementFormat::E4m3fn.decode(u32::from(bytes[i])),
            CodeFormat::E4m3fnuz => e4m3fnuz::decode(u32::from(bytes[i])),
            CodeFormat::E5m2 => ElementFormat::E5m2.decode(u32::from(bytes[i])),
            CodeFormat::E2m1 => {
                let b = bytes[i / 2];
                let nibble = if i.is_multiple_of(2) == low_first { b & 0xf } else { b >> 4 };
                ElementFormat::E2m1.decode(u32::from(nibble))
            }
            CodeFormat::Bf16 => ElementFormat::Bf16.decode(u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))),
            CodeFormat::F16 => ElementFormat::F16.decode(u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))),
            CodeFormat::F32 => f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]),
        }
    }

    /// The 256 values of a one-byte code (None for other widths).
    pub fn byte_table(self) -> Option<[f32; 256]> {
        match self {
            CodeFormat::E4m3fn | CodeFormat::E4m3fnuz | CodeFormat::E5m2 => {
                Some(std::array::from_fn(|b| self.decode_at(&[b as u8], 0, true)))
            }
            _ => None,
        }
    }

    /// Writes code `code` (low bits) as value `i` of a run starting at `bytes[0]`.
    pub fn put(self, bytes: &mut [u8], i: usize, code: u32, low_first: bool) {
        match self.bits() {
            4 => {
                let b = &mut bytes[i / 2];
                let nibble = (code & 0xf) as u8;
                if i.is_multiple_of(2) == low_first {
                    *b = (*b & 0xf0) | nibble;
                } else {
                    *b = (*b & 0x0f) | (nibble << 4);
                }
            }
            8 => bytes[i] = code as u8,
            16 => bytes[2 * i..2 * i + 2].copy_from_slice(&(code as u16).to_le_bytes()),
            _ => bytes[4 * i..4 * i + 4].copy_from_slice(&code.to_le_bytes()),
        }
    }
}

/// How a scale is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleDtype {
    /// A little-endian f32.
    F32,
    /// One byte, the exponent e of 2^(e − 127); 255 is NaN (OCP MX).
    Ue8m0,
    /// One e4m3fn byte (NVFP4).
    E4m3,
}

impl ScaleDtype {
    pub fn bytes(self) -> usize {
        match self {
            ScaleDtype::F32 => 4,
            ScaleDtype::Ue8m0 | ScaleDtype::E4m3 => 1,
        }
    }

    #[inline]
    pub fn decode(self, b: &[u8]) -> f32 {
        match self {
            ScaleDtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            ScaleDtype::Ue8m0 => ue8m0_value(b[0]),
            ScaleDtype::E4m3 => ElementFormat::E4m3fn.decode(u32::from(b[0])),
        }
    }

    /// The stored bytes of scale `s` (a ue8m0 scale must be a power of two
    /// in 2^-127..2^127; the writer's rules only give such).
    pub fn encode(self, s: f32, out: &mut [u8]) {
        match self {
            ScaleDtype::F32 => out[..4].copy_from_slice(&s.to_le_bytes()),
            ScaleDtype::Ue8m0 => out[0] = ue8m0_code(s),
            ScaleDtype::E4m3 => out[0] = ElementFormat::E4m3fn.encode(s, crate::numerics::format::Overflow::Saturate) as u8,
        }
    }
}

/// 2^(e − 127) built from bits (2^-127 is an f32 subnormal); 255 is NaN.
pub fn ue8m0_value(e: u8) -> f32 {
    match e {
        255 => f32::NAN,
        0 => f32::from_bits(1 << 22),
        e => f32::from_bits(u32::from(e) << 23),
    }
}

/// The exponent byte of a power of two `s` (NaN and non-powers give 255).
pub fn ue8m0_code(s: f32) -> u8 {
    if s == f32::from_bits(1 << 22) {
        return 0;
    }
    let bits = s.to_bits();
    if s > 0.0 && bits & 0x007f_ffff == 0 && bits >> 23 < 255 {
        (bits >> 23) as u8
    } else {
        255
    }
}

/// Where a row's codes or scales sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Every row of a block in turn in one region of the block: row s at
    /// `offset + s · (bytes per row)` from the block's start.
    Planar,
    /// In the row's own record: at `offset` from the start of row s's
    /// record, which starts at `s · row_bytes`.
    Interleaved,
}

/// The rule the writer computes a scale with (only used to write captures
/// and to quantize a float query; a check reads stored scales).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleRule {
    Fp32,
    Ue8m0,
    Ue8m0Floor,
    E4m3,
}

impl ScaleRule {
    pub fn format(self) -> ScaleFormat {
        match self {
            ScaleRule::Fp32 => ScaleFormat::Fp32,
            ScaleRule::Ue8m0 => ScaleFormat::Ue8m0Ceil,
            ScaleRule::Ue8m0Floor => ScaleFormat::Ue8m0Floor,
            ScaleRule::E4m3 => ScaleFormat::E4m3,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeSpec {
    pub format: CodeFormat,
    pub placement: Placement,
    #[serde(default)]
    pub offset: usize,
    /// Codes of a block stored in tiles of `tile` rows × `tile` bytes (AITER's
    /// preshuffled indexer cache: 16); planar only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile: Option<usize>,
    /// e2m1: the even value of a pair is the byte's low nibble (true) or high.
    #[serde(default = "yes")]
    pub low_nibble_first: bool,
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleSpec {
    pub dtype: ScaleDtype,
    /// Consecutive values of a row sharing one scale.
    pub values_per_scale: usize,
    pub placement: Placement,
    #[serde(default)]
    pub offset: usize,
    /// Scale bytes each row occupies (default: scales × dtype bytes; more
    /// when the engine pads, e.g. DeepGEMM packs four ue8m0 bytes in an int32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_bytes: Option<usize>,
    pub rule: ScaleRule,
    /// Floor on a block's amax before the scale (the writer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amax_floor: Option<f32>,
}

/// Unscaled values after the scaled ones (fp8_ds_mla's bf16 RoPE part).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TailSpec {
    pub values: usize,
    pub format: CodeFormat,
    /// Offset in the row's record (interleaved layouts only).
    pub offset: usize,
}

/// How logical blocks of a sequence map to physical blocks of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PageTable {
    /// A per-query block table (`block_table` tensor).
    #[default]
    Block,
    /// Logical block b is physical block b (no table).
    Identity,
}

/// Where a layout's facts come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LayoutSource {
    #[serde(default)]
    pub repo: String,
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub commit: String,
    /// "verified" (read in the engine's source) or "inferred".
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub note: String,
}

/// A declared cache layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheLayout {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Values per row (scaled values plus any tail).
    pub dim: usize,
    pub rows_per_block: usize,
    pub codes: CodeSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scales: Option<ScaleSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<TailSpec>,
    /// Bytes of one row's record (interleaved placements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_bytes: Option<usize>,
    /// Bytes from one block to the next (default: what the rows need).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_bytes: Option<usize>,
    #[serde(default)]
    pub page_table: PageTable,
    /// The precision variant a check scores with by default (its query
    /// pipeline quantizes a float query; its weight and logit formats score).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<LayoutSource>,
}

/// Built-in layouts (TOML), docs/TENSORS.md has their sources.
pub const BUILTIN: &[(&str, &str)] = &[
    ("sglang-v32-fp8", include_str!("layouts/sglang-v32-fp8.toml")),
    ("sglang-v4-fp8", include_str!("layouts/sglang-v4-fp8.toml")),
    ("vllm-indexer-fp8", include_str!("layouts/vllm-indexer-fp8.toml")),
    ("vllm-fp8-ds-mla", include_str!("layouts/vllm-fp8-ds-mla.toml")),
    ("trtllm-indexer-fp4", include_str!("layouts/trtllm-indexer-fp4.toml")),
    ("aiter-indexer-fp8-preshuffle", include_str!("layouts/aiter-indexer-fp8-preshuffle.toml")),
    ("vllm-kpool-fp8", include_str!("layouts/vllm-kpool-fp8.toml")),
];

impl CacheLayout {
    /// The layout `text` names: a built-in's name, TOML, or a `.toml`
    /// file (`source`: where it was given, for messages).
    pub fn resolve(text: &str, source: &str) -> Result<CacheLayout, String> {
        if let Some(l) = CacheLayout::builtin(text.trim()) {
            return Ok(l);
        }
        if text.contains('=') {
            return CacheLayout::from_toml(text).map_err(|e| format!("{source} (layout TOML), {e}"));
        }
        let path = std::path::Path::new(text.trim());
        if path.extension().is_some_and(|e| e == "toml") {
            let bytes = crate::base::files::read_capped(path, crate::base::files::SCENARIO_FILE_CAP)
                .map_err(|e| format!("invalid layout = {text}: cannot read: {e}"))?;
            let s = String::from_utf8(bytes).map_err(|_| format!("invalid layout = {text}: not UTF-8"))?;
            return CacheLayout::from_toml(&s).map_err(|e| format!("{text}: {e}"));
        }
        Err(format!(
            "invalid layout = {}: a built-in layout ({}) or a .toml file",
            crate::error::shorten(&format!("{text:?}"), crate::error::VALUE_CHARS),
            CacheLayout::builtin_names()
        ))
    }

    pub fn builtin(name: &str) -> Option<CacheLayout> {
        BUILTIN.iter().find(|(n, _)| *n == name).and_then(|(_, text)| Self::from_toml(text).ok())
    }

    pub fn builtin_names() -> String {
        BUILTIN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    }

    /// Parses and checks a layout; errors are one line naming the field.
    pub fn from_toml(text: &str) -> Result<CacheLayout, String> {
        let layout: CacheLayout = toml::from_str(text).map_err(|e| crate::config::params::toml_error_at(text, &e))?;
        layout.validate()?;
        Ok(layout)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Values that carry a scale (all but the tail).
    pub fn scaled_dim(&self) -> usize {
        self.dim - self.tail.as_ref().map_or(0, |t| t.values)
    }

    pub fn scales_per_row(&self) -> usize {
        self.scales.as_ref().map_or(0, |s| self.scaled_dim() / s.values_per_scale)
    }

    pub fn code_bytes_per_row(&self) -> usize {
        self.codes.format.bytes_for(self.scaled_dim())
    }

    pub fn scale_bytes_per_row(&self) -> usize {
        self.scales.as_ref().map_or(0, |s| s.row_bytes.unwrap_or(self.scales_per_row() * s.dtype.bytes()))
    }

    /// Bytes of one row's record for interleaved placements.
    pub fn record_bytes(&self) -> usize {
        self.row_bytes.unwrap_or_else(|| {
            let tail = self.tail.as_ref().map_or(0, |t| t.format.bytes_for(t.values));
            self.code_bytes_per_row() + self.scale_bytes_per_row() + tail
        })
    }

    /// Bytes the rows of one block need.
    fn needed_block_bytes(&self) -> usize {
        let rows = self.rows_per_block;
        let mut end = 0;
        let interleaved = rows * self.record_bytes();
        match self.codes.placement {
            Placement::Planar => end = end.max(self.codes.offset + rows * self.code_bytes_per_row()),
            Placement::Interleaved => end = end.max(interleaved),
        }
        if let Some(s) = &self.scales {
            match s.placement {
                Placement::Planar => end = end.max(s.offset + rows * self.scale_bytes_per_row()),
                Placement::Interleaved => end = end.max(interleaved),
            }
        }
        if self.tail.is_some() {
            end = end.max(interleaved);
        }
        end
    }

    /// Bytes from one block to the next.
    pub fn block_stride(&self) -> usize {
        self.block_bytes.unwrap_or_else(|| self.needed_block_bytes())
    }

    /// Whether each row has exactly one scale over all its values, which a
    /// score applies after the head sum.
    pub fn one_scale_per_row(&self) -> bool {
        self.tail.is_none() && self.scales_per_row() == 1
    }

    fn validate(&self) -> Result<(), String> {
        let bad = |field: &str, value: String, allowed: &str| Err(format!("invalid layout.{field} = {value}: {allowed}"));
        if self.dim == 0 {
            return bad("dim", "0".into(), "a positive number of values per row");
        }
        if self.rows_per_block == 0 {
            return bad("rows_per_block", "0".into(), "a positive number of rows");
        }
        if let Some(t) = &self.tail {
            if t.values >= self.dim {
                return bad("tail.values", t.values.to_string(), "fewer than dim");
            }
            if self.codes.placement != Placement::Interleaved {
                return bad("tail", "(planar codes)".into(), "a tail needs interleaved codes");
            }
        }
        if self.codes.format.bits() == 4 && !self.scaled_dim().is_multiple_of(2) {
            return bad("dim", self.dim.to_string(), "an even number of e2m1 values");
        }
        if let Some(s) = &self.scales {
            if s.values_per_scale == 0 || !self.scaled_dim().is_multiple_of(s.values_per_scale) {
                return bad("scales.values_per_scale", s.values_per_scale.to_string(), "a positive divisor of the scaled values per row");
            }
            if let Some(rb) = s.row_bytes {
                if rb < self.scales_per_row() * s.dtype.bytes() {
                    return bad("scales.row_bytes", rb.to_string(), "at least the scales' bytes");
                }
            }
            if s.amax_floor.is_some_and(|f| !f.is_finite() || f < 0.0) {
                return bad("scales.amax_floor", format!("{:?}", s.amax_floor), "a finite number ≥ 0");
            }
            if s.placement == Placement::Interleaved && s.offset + self.scale_bytes_per_row() > self.record_bytes() {
                return bad("scales.offset", s.offset.to_string(), "scales inside the row's record");
            }
        }
        if let Some(tile) = self.codes.tile {
            if tile == 0
                || self.codes.placement != Placement::Planar
                || !self.rows_per_block.is_multiple_of(tile)
                || !self.code_bytes_per_row().is_multiple_of(tile)
            {
                return bad("codes.tile", tile.to_string(), "a tile that divides rows_per_block and the code bytes per row (planar codes)");
            }
        }
        if self.codes.placement == Placement::Interleaved && self.codes.offset + self.code_bytes_per_row() > self.record_bytes() {
            return bad("codes.offset", self.codes.offset.to_string(), "codes inside the row's record");
        }
        if let Some(t) = &self.tail {
            if t.offset + t.format.bytes_for(t.values) > self.record_bytes() {
                return bad("tail.offset", t.offset.to_string(), "the tail inside the row's record");
            }
        }
        if let Some(b) = self.block_bytes {
            if b < self.needed_block_bytes() {
                return bad("block_bytes", b.to_string(), &format!("at least the {} bytes the rows need", self.needed_block_bytes()));
            }
        }
        Ok(())
    }

    /// The writer's quantization of the scaled values (rotation not
    /// included), when the codes have a simulator element format.
    pub fn key_scaling(&self) -> Option<(ElementFormat, Option<BlockScaling>)> {
        let element = self.codes.format.element()?;
        let scaling = self.scales.as_ref().map(|s| BlockScaling {
            shape: BlockShape::Block(s.values_per_scale),
            scale: s.rule.format(),
            amax_floor: s.amax_floor.unwrap_or_else(|| crate::numerics::format::default_amax_floor(element, s.rule.format())),
        });
        Some((element, scaling))
    }
}

/// A wrong reader: one of the layout faults of the field (issue 28's names;
/// docs/TENSORS.md lists the incidents behind each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReadFault {
    /// Records read interleaved (codes then scales per row) from a planar
    /// block, or planar from an interleaved one.
    pub swap_placement: bool,
    /// Codes read through 16×16 tiles from a flat block, or flat from a tiled one.
    pub swap_tiling: bool,
    /// Every row of a block reads row 0.
    pub row0: bool,
    /// Row s of a block reads row (s + 1) mod rows.
    pub slot_shift: bool,
    /// Each row's scale read from the next row's scale.
    pub scale_next: bool,
    /// Codes decoded as the other e4m3 flavour (fn ↔ fnuz).
    pub other_fp8: bool,
}

/// Tile size of AITER's preshuffled indexer cache.
pub const PRESHUFFLE_TILE: usize = 16;

/// Reads rows out of cache blocks as a declared layout (with an optional
/// fault) says.
pub struct RowReader<'a> {
    pub layout: &'a CacheLayout,
    fault: ReadFault,
    codes_format: CodeFormat,
    table: Option<[f32; 256]>,
    tile: Option<usize>,
    codes_planar: bool,
    scales_planar: bool,
}

impl<'a> RowReader<'a> {
    pub fn new(layout: &'a CacheLayout, fault: ReadFault) -> Self {
        let codes_format = match (fault.other_fp8, layout.codes.format) {
            (true, CodeFormat::E4m3fn) => CodeFormat::E4m3fnuz,
            (true, CodeFormat::E4m3fnuz) => CodeFormat::E4m3fn,
            (_, f) => f,
        };
        let tile = match (fault.swap_tiling, layout.codes.tile) {
            (false, t) => t,
            (true, Some(_)) => None,
            (true, None) => Some(PRESHUFFLE_TILE),
        };
        let flip = |p: Placement| (p == Placement::Planar) != fault.swap_placement;
        RowReader {
            layout,
            fault,
            codes_format,
            table: codes_format.byte_table(),
            tile,
            codes_planar: flip(layout.codes.placement),
            scales_planar: layout.scales.as_ref().is_some_and(|s| flip(s.placement)),
        }
    }

    /// The record size a reader uses when it reads interleaved: the
    /// layout's own, or for a planar layout read interleaved, codes then
    /// scales back to back.
    fn record(&self) -> usize {
        self.layout.record_bytes()
    }

    fn slot(&self, slot: usize) -> usize {
        let rows = self.layout.rows_per_block;
        if self.fault.row0 {
            0
        } else if self.fault.slot_shift {
            (slot + 1) % rows
        } else {
            slot
        }
    }

    /// Byte offset in the block of code byte `c` of row `slot`.
    #[inline]
    fn code_byte(&self, slot: usize, c: usize) -> usize {
        let l = self.layout;
        if !self.codes_planar {
            let offset = if l.codes.placement == Placement::Interleaved { l.codes.offset } else { 0 };
            return slot * self.record() + offset + c;
        }
        let base = if l.codes.placement == Placement::Planar { l.codes.offset } else { 0 };
        let per_row = l.code_bytes_per_row();
        match self.tile {
            None => base + slot * per_row + c,
            Some(t) => base + (slot / t) * (t * per_row) + (c / t) * (t * t) + (slot % t) * t + c % t,
        }
    }

    /// Byte offset in the block of scale `i` of row `slot` (scale words of
    /// a planar region, or the scale field of an interleaved record).
    #[inline]
    fn scale_byte(&self, slot: usize, i: usize) -> usize {
        let l = self.layout;
        let Some(s) = &l.scales else { return 0 };
        let within = i * s.dtype.bytes();
        if self.scales_planar {
            let base = if s.placement == Placement::Planar { s.offset } else { l.rows_per_block * l.code_bytes_per_row() };
            base + slot * l.scale_bytes_per_row() + within
        } else {
            let offset = if s.placement == Placement::Interleaved { s.offset } else { l.code_bytes_per_row() };
            slot * self.record() + offset + within
        }
    }

    /// Decodes row `slot` of `block` into `values` (dim values: scaled values
    /// as element values, then the tail) and `scales` (scales_per_row).
    /// Bytes outside the block read as zero.
    pub fn read(&self, block: &[u8], slot: usize, values: &mut [f32], scales: &mut [f32]) {
        let l = self.layout;
        let slot_codes = self.slot(slot);
        let at = |off: usize| block.get(off).copied().unwrap_or(0);
        let scaled = l.scaled_dim();
        let low_first = l.codes.low_nibble_first;
        match (self.codes_format.bits(), &self.table) {
            (8, Some(table)) => {
                let start = self.code_byte(slot_codes, 0);
                let contiguous = self.tile.is_none() && start + scaled <= block.len();
                if contiguous {
                    for (v, &b) in values[..scaled].iter_mut().zip(&block[start..start + scaled]) {
                        *v = table[b as usize];
                    }
                } else {
                    for (j, v) in values[..scaled].iter_mut().enumerate() {
                        *v = table[at(self.code_byte(slot_codes, j)) as usize];
                    }
                }
            }
            (bits, _) => {
                let width = bits.div_ceil(8);
                for (j, v) in values[..scaled].iter_mut().enumerate() {
                    if bits == 4 {
                        let byte = [at(self.code_byte(slot_codes, j / 2))];
                        *v = self.codes_format.decode_at(&byte, j % 2, low_first);
                    } else {
                        let bytes: Vec<u8> = (0..width).map(|b| at(self.code_byte(slot_codes, j * width + b))).collect();
                        *v = self.codes_format.decode_at(&bytes, 0, low_first);
                    }
                }
            }
        }
        if let Some(t) = &l.tail {
            let base = self.slot(slot) * self.record() + t.offset;
            let width = t.format.bits().div_ceil(8);
            for (j, v) in values[scaled..].iter_mut().enumerate() {
                let bytes: Vec<u8> = (0..width).map(|b| at(base + j * width + b)).collect();
                *v = t.format.decode_at(&bytes, 0, true);
            }
        }
        if let Some(s) = &l.scales {
            let mut slot_scale = self.slot(slot);
            if self.fault.scale_next {
                slot_scale = (slot_scale + 1) % l.rows_per_block;
            }
            for (i, out) in scales.iter_mut().enumerate() {
                let off = self.scale_byte(slot_scale, i);
                let bytes: [u8; 4] = std::array::from_fn(|b| at(off + b));
                *out = s.dtype.decode(&bytes);
            }
        }
    }

    /// Where row `slot`'s code bytes and scale bytes are written (the
    /// writer's side of the declared layout; never faulted).
    pub fn code_offset(&self, slot: usize, c: usize) -> usize {
        self.code_byte(slot, c)
    }

    pub fn scale_offset(&self, slot: usize, i: usize) -> usize {
        self.scale_byte(slot, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_has_a_source() {
        for (name, text) in BUILTIN {
            let l = CacheLayout::from_toml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&l.name, name);
            let src = l.source.as_ref().expect("source");
            assert!(src.status == "verified" || src.status == "inferred", "{name}: {}", src.status);
            assert!(!src.repo.is_empty() && !src.file.is_empty(), "{name}");
            assert_eq!(CacheLayout::from_toml(&l.to_toml()).unwrap(), l, "{name} round trip");
        }
    }

    #[test]
    fn byte_counts_match_the_engines() {
        let l = CacheLayout::builtin("sglang-v32-fp8").unwrap();
        assert_eq!((l.block_stride(), l.code_bytes_per_row(), l.scale_bytes_per_row()), (64 * 132, 128, 4));
        let l = CacheLayout::builtin("trtllm-indexer-fp4").unwrap();
        assert_eq!((l.block_stride(), l.code_bytes_per_row(), l.scale_bytes_per_row()), (64 * 68, 64, 4));
        let l = CacheLayout::builtin("vllm-fp8-ds-mla").unwrap();
        assert_eq!((l.block_stride(), l.record_bytes(), l.scaled_dim()), (64 * 656, 656, 512));
    }

    #[test]
    fn bad_layouts_name_the_field() {
        let base = CacheLayout::builtin("sglang-v32-fp8").unwrap().to_toml();
        for (from, to, field) in [
            ("values_per_scale = 128", "values_per_scale = 48", "scales.values_per_scale"),
            ("rows_per_block = 64", "rows_per_block = 0", "rows_per_block"),
            ("dim = 128", "dim = 0", "dim"),
        ] {
            assert!(base.contains(from), "{from}");
            let err = CacheLayout::from_toml(&base.replace(from, to)).unwrap_err();
            assert!(err.contains(field) && !err.contains('\n'), "{err}");
        }
        let err = CacheLayout::from_toml(&format!("{base}\nblock_bytes = 100\n")).unwrap_err();
        assert!(err.contains("block_bytes"), "{err}");
        assert!(CacheLayout::from_toml("name = 1").is_err());
    }

    #[test]
    fn preshuffled_offsets_are_aiter_tiles() {
        let l = CacheLayout::builtin("aiter-indexer-fp8-preshuffle").unwrap();
        let r = RowReader::new(&l, ReadFault::default());
        // token 17, dim 35: tile (1, 2), within (1, 3).
        assert_eq!(r.code_offset(17, 35), 16 * 128 + 2 * 256 + 16 + 3);
        let flat = CacheLayout::builtin("sglang-v32-fp8").unwrap();
        let r = RowReader::new(&flat, ReadFault { swap_tiling: true, ..Default::default() });
        assert_eq!(r.code_offset(17, 35), 16 * 128 + 2 * 256 + 16 + 3);
        let r = RowReader::new(&flat, ReadFault::default());
        assert_eq!((r.code_offset(17, 35), r.scale_offset(17, 0)), (17 * 128 + 35, 64 * 128 + 17 * 4));
        let r = RowReader::new(&flat, ReadFault { swap_placement: true, ..Default::default() });
        assert_eq!((r.code_offset(17, 35), r.scale_offset(17, 0)), (17 * 132 + 35, 17 * 132 + 128));
    }

    #[test]
    fn ue8m0_bytes_round_trip() {
        for e in 0..255u8 {
            assert_eq!(ue8m0_code(ue8m0_value(e)), e);
        }
        assert!(ue8m0_value(255).is_nan());
        assert_eq!(ue8m0_value(127), 1.0);
    }
}

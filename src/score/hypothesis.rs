//! The hypothesis catalogue: named changes to the pipeline that stand for a
//! real bug or a design choice, applied on top of a precision variant
//! (`fp8+no-hadamard`, `fp8+topk=1024+ties-lowest`). A hypothesis changes
//! how the pipeline computes, never a recall number; the result is an
//! ordinary [`PrecisionVariant`] with its own name, so every output works
//! unchanged. Full text, sources and expected symptoms: docs/HYPOTHESES.md.

use crate::model::stack::FaultSpread;
use crate::numerics::key_cache::{Fp8Flavour, PageLayoutFault, ScaleSpan, ScaleWordFault, FIRST_BLOCK_PAST_2_31, PAGE_ROWS};
use crate::numerics::pipeline::{LogitFormat, Rotation};
use crate::score::selection::{NanOrder, TieRule};
use crate::score::variant::PrecisionVariant;
use std::fmt;

/// Which part of the pipeline a hypothesis changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Numerics,
    CacheLayout,
    Selection,
    Position,
}

impl Group {
    pub fn name(self) -> &'static str {
        match self {
            Group::Numerics => "numerics",
            Group::CacheLayout => "cache-layout",
            Group::Selection => "selection",
            Group::Position => "position",
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kind of failure a hypothesis stands for, as `diagnose` reports it
/// (docs/OBSERVATIONS.md, "Classes"): what the fault does to the
/// information the indexer has about the needle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultClass {
    /// No fault.
    Healthy,
    /// Scores carry no information about the needle and ties fall in random
    /// order: the needle is kept about k times in N.
    RandomLoss,
    /// Scores tie and the tie order is by row index: kept or lost by depth.
    IndexTies,
    /// Scores keep part of the information (a coarser scale, a format, a
    /// partly wrong position): recall falls below healthy, smoothly.
    Partial,
    /// The cache's writer and reader disagree about where codes and scales
    /// live, or which rows are read.
    Layout,
    /// The fault acts in some indexer layers only.
    LayerSubset,
    /// Chunked prefill hides rows from the indexer.
    Schedule,
}

impl FaultClass {
    pub const ALL: [FaultClass; 7] = [
        FaultClass::Healthy,
        FaultClass::RandomLoss,
        FaultClass::IndexTies,
        FaultClass::Partial,
        FaultClass::Layout,
        FaultClass::LayerSubset,
        FaultClass::Schedule,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultClass::Healthy => "healthy",
            FaultClass::RandomLoss => "random-loss",
            FaultClass::IndexTies => "index-ties",
            FaultClass::Partial => "partial",
            FaultClass::Layout => "layout",
            FaultClass::LayerSubset => "layer-subset",
            FaultClass::Schedule => "schedule",
        }
    }

    /// One line for tables.
    pub fn about(self) -> &'static str {
        match self {
            FaultClass::Healthy => "a healthy indexer",
            FaultClass::RandomLoss => "information destroyed, ties in random order",
            FaultClass::IndexTies => "information destroyed, ties in row-index order",
            FaultClass::Partial => "information partly kept",
            FaultClass::Layout => "cache writer and reader disagree",
            FaultClass::LayerSubset => "a fault in some layers only",
            FaultClass::Schedule => "chunked prefill hides or garbles rows",
        }
    }

    /// How severe, for a composite: the most severe part names it.
    fn severity(self) -> u8 {
        match self {
            FaultClass::Healthy => 0,
            FaultClass::Partial => 1,
            FaultClass::Layout => 2,
            FaultClass::Schedule => 3,
            FaultClass::RandomLoss => 4,
            FaultClass::IndexTies => 5,
            FaultClass::LayerSubset => 6,
        }
    }
}

impl fmt::Display for FaultClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The class of a candidate `h1+h2…` (hypotheses only, no base variant):
/// a tie maker that makes every logit equal with an index tie order is
/// `IndexTies`; otherwise the most severe part's class.
pub fn candidate_class(candidate: &str) -> FaultClass {
    let parts: Vec<&str> = candidate.split('+').map(str::trim).filter(|p| !p.is_empty()).collect();
    let infos: Vec<&HypothesisInfo> = parts.iter().filter_map(|p| info(p)).collect();
    if infos.is_empty() {
        return FaultClass::Healthy;
    }
    // Makers of ties in every logit (e4m3fn-read: every row's amax code is
    // NaN under fp32 scales, docs/HYPOTHESES.md).
    // zero-blocks=1 reads every page as zeros: every logit 0, a tie too.
    let every_page_zero = |p: &str| p.strip_prefix("zero-blocks=").and_then(|v| v.trim().parse::<f64>().ok()).is_some_and(|v| v >= 1.0);
    let all_tie = parts.iter().any(|p| matches!(*p, "scale-unwritten-zero" | "scale-unwritten-nan" | "e4m3fn-read") || every_page_zero(p));
    let index_order = parts.iter().any(|p| matches!(*p, "ties-lowest" | "ties-highest"));
    // Every page zero is not a layout scramble but no information at all,
    // as the unwritten-scale makers are (random-loss).
    let classes = parts.iter().filter_map(|p| info(p).map(|h| if every_page_zero(p) { FaultClass::RandomLoss } else { h.class }));
    let base = classes.max_by_key(|c| c.severity()).unwrap_or(FaultClass::Healthy);
    // A length gate (longer-than=T) says when the rest acts: the composite
    // is a prefill schedule fault, whatever its content.
    let gated = parts.iter().any(|p| p.starts_with("longer-than="));
    if gated && base != FaultClass::LayerSubset {
        return FaultClass::Schedule;
    }
    if all_tie && index_order && base != FaultClass::LayerSubset {
        FaultClass::IndexTies
    } else {
        base
    }
}

/// One catalogue entry.
#[derive(Clone, Copy, Debug)]
pub struct HypothesisInfo {
    /// As written after `+` (`topk=N` for a parametrized one).
    pub name: &'static str,
    pub group: Group,
    /// One line for listings.
    pub summary: &'static str,
    /// What exactly the pipeline does differently.
    pub changes: &'static str,
    /// The real bug or choice it stands for, with its source, or "hypothetical".
    pub stands_for: &'static str,
    /// The symptom we expect (to be checked by simulation).
    pub expected: &'static str,
    /// A scenario setting it needs, if any.
    pub requires: Option<&'static str>,
    /// Whether it acts identically in every layer (shared code, cache layout
    /// or kernel) or independently in each; `--fault-layers` overrides
    /// (docs/MODEL.md, "Faults across layers").
    pub layers: FaultSpread,
    /// What kind of failure it is (`diagnose` reports classes).
    pub class: FaultClass,
}

/// Every hypothesis, in listing order.
pub const CATALOGUE: &[HypothesisInfo] = &[
    HypothesisInfo {
        name: "no-hadamard",
        group: Group::Numerics,
        summary: "no Hadamard rotation before quantizing, on q and k",
        changes: "Queries and keys are quantized as they are, without the orthonormal Walsh-Hadamard rotation.",
        stands_for: "A port that drops the reference's rotation (DeepSeek-V3.2-Exp inference/model.py rotates q and k before fp8, and the V4 reference before fp4). Hypothetical.",
        expected: "With e4m3fn (a float format) small: channels far below an outlier keep their relative precision until they fall into subnormals (a range of about 2^15 within a row). With e2m1 blocks of 32, an outlier zeroes the rest of its block: scores lose the signal carried by those channels, recall falls at long contexts.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "hadamard-q-only",
        group: Group::Numerics,
        summary: "queries rotated, keys not",
        changes: "The rotation is applied to queries only; keys are quantized unrotated.",
        stands_for: "Query and cache-writer paths implemented separately, one of them missing the rotation. Hypothetical.",
        expected: "q·k is no longer the unrotated dot product (H is orthonormal only when both sides turn): scores are unrelated to the needle, recall drops to about k over the candidate rows.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::RandomLoss,
    },
    HypothesisInfo {
        name: "hadamard-k-only",
        group: Group::Numerics,
        summary: "keys rotated, queries not",
        changes: "The rotation is applied to keys only; queries are quantized unrotated.",
        stands_for: "As hadamard-q-only, the other side. Hypothetical.",
        expected: "As hadamard-q-only: near-random selection.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::RandomLoss,
    },
    HypothesisInfo {
        name: "scale-per-page",
        group: Group::Numerics,
        summary: "one key scale per page of 64 rows",
        changes: "Each key row is quantized with one scale computed from the amax over its whole page (64 rows x head_dim values) instead of its own row; a partial last page uses the rows present.",
        stands_for: "A cache that keeps one scale per page. The reference keeps one per token and 128 values (act_quant); sglang/vLLM one fp32 scale per token. Hypothetical.",
        expected: "Rows with a small amax next to a large one lose resolution; needle rows next to outlier rows suffer, so recall depends on the needle's neighbours.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "scale-per-tensor",
        group: Group::Numerics,
        summary: "one key scale per 256 aligned rows (stand-in for a per-tensor scale)",
        changes: "Each key row is quantized with one scale from the amax over its aligned span of 256 rows (a partial last span uses the rows present).",
        stands_for: "A per-tensor key scale. One scale over the whole context does not exist when a row is written, so the widest honest stand-in is the chunk written together; a static scale calibrated elsewhere can only fit worse. Hypothetical.",
        expected: "As scale-per-page, stronger: rows far below the span's largest get few fp8 levels; small-norm needles are hurt most.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "scale-floor",
        group: Group::Numerics,
        summary: "power-of-two key scale rounded down instead of up",
        changes: "The ue8m0 key scale is 2^floor(log2(amax/448)) instead of 2^ceil(...); values beyond 448 after dividing are clamped to +-448 before the cast (the reference clamps before casting).",
        stands_for: "Mixing up DeepSeek's rule (round up, nothing clipped) with OCP MX's (floor). Source of both rules: DeepSeek-V3.2 act_quant_kernel; OCP MX spec. The mix-up is hypothetical.",
        expected: "Each row's largest values saturate at 448 while the rest gain one bit; mild score distortion, small recall change. Needs ue8m0 key scales (fp8).",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "stale-scale",
        group: Group::Numerics,
        summary: "each key row quantized with the previous row's scale",
        changes: "Row r (slot s > 0 of its page) is divided by, clamped against, and stored with the scale computed for row r-1; slot 0 uses its own.",
        stands_for: "A fused quantize-and-store kernel that reuses a scale register one row too long. Hypothetical.",
        expected: "Rows larger than their predecessor clip, smaller ones lose resolution; a needle row after a small row loses its peaks, so its score drops.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "logits-bf16",
        group: Group::Numerics,
        summary: "logits rounded to bf16",
        changes: "Each logit is rounded to bf16 after the head sum and key scale.",
        stands_for: "The V4 reference computes the score in bf16 tensors (inferred from its dtypes); an engine keeping bf16 logits.",
        expected: "Many exact ties among haystack rows (8 significant bits): the tie rule starts to matter near the k-th score.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "logits-fp16",
        group: Group::Numerics,
        summary: "logits rounded to fp16",
        changes: "Each logit is rounded to fp16 after the head sum and key scale.",
        stands_for: "An engine keeping fp16 logits. Hypothetical.",
        expected: "Fewer ties than bf16; overflow to inf only for logits beyond 65504.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "slot-shift",
        group: Group::CacheLayout,
        summary: "rows read from the next slot of their page",
        changes: "The row in slot s of a page is read (codes and scale) from slot (s+1) mod 64 of the same page; a slot past the last written row of a partial page reads zero-filled memory.",
        stands_for: "An off-by-one in the reader's slot index of the paged indexer cache (pages of 64 rows: codes then scales). Hypothetical.",
        expected: "The needle's score is read at its predecessor's position: recall stays high when the needle spans several rows, falls for one-row needles at slot 0 of a page; depth-dependent at page granularity.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "pages-swapped",
        group: Group::CacheLayout,
        summary: "pairs of pages read in each other's place",
        changes: "Pages 2p and 2p+1 are read in each other's place (same slot); a slot of a missing or partial page reads zero-filled memory.",
        stands_for: "A wrong page-table entry order (block table permuted). Hypothetical.",
        expected: "The needle is scored correctly but selected at the wrong position: the attention reads another page, so recall collapses beyond the coverage of the raw window and full selection.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "block-row0",
        group: Group::CacheLayout,
        summary: "every row of a page read from the page's row 0 (codes and scale)",
        changes: "The reader fetches each row of a page of 64 rows from the page's first slot: all 64 rows of a page score alike, so the page's rows tie and the tie rule orders them.",
        stands_for: "ROCm/aiter #5591 and #5614 (a paged logits kernel whose row offset is dropped: every token of a block reads token 0), 1Cat-vLLM #250 (only token 0 of each block read the right values).",
        expected: "Scores are constant within each page: a needle is found only through its page's row 0, so recall falls to about what a page-level selection of random rows keeps; bf16 keys are hit as much as fp8. A capture shows it at once: block-constant logits (dsa-recall check's block-row0 transform).",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "scale-offset",
        group: Group::CacheLayout,
        summary: "each row's scale read from the next slot's scale word",
        changes: "Codes are read correctly; the scale of slot s is read from the word of slot (s+1) mod 64 (a never-written slot of a partial page reads 0).",
        stands_for: "An off-by-one in the scale offset of the page (64 x 128 code bytes, then 64 scale words). Hypothetical.",
        expected: "Each row's score is multiplied by its neighbour's scale over its own: with row scales that vary, scores get a random factor; the needle survives only if its neighbour's scale is not much smaller.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "e4m3fnuz-read",
        group: Group::CacheLayout,
        summary: "keys written as e4m3fn, decoded as e4m3fnuz",
        changes: "Every key code is decoded as e4m3fnuz (bias 8): nonzero values halve, and the code 0x80 (-0 in e4m3fn) becomes NaN.",
        stands_for: "An fp8 flavour mismatch between writer and reader (AMD MI300 fp8 is fnuz, OCP e4m3fn elsewhere); motivated by the ROCm-only collapse of vLLM #52109. The mismatch itself is hypothetical.",
        expected: "Halving is a uniform factor (ranking unchanged), but every -0 code turns into NaN; with ReLU as fmax(x, 0) a NaN dot product counts as 0, so heads whose key has a -0 lose their contribution. Ranking noise grows with the share of -0 codes.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "e4m3fn-read",
        group: Group::CacheLayout,
        summary: "keys written as e4m3fnuz (max 240), decoded as e4m3fn",
        changes: "The writer scales to e4m3fnuz's range (amax/240, or the ue8m0 power of two) and stores fnuz codes; the reader decodes them as e4m3fn: values double and the code 0x7f/0xff (+-240) becomes NaN.",
        stands_for: "The reverse flavour mismatch (fnuz writer, fn reader). Hypothetical.",
        expected: "With fp32 scales every row's amax code is 0x7f, so every row carries a NaN: the head holding it drops out (fmax ReLU), scores shrink irregularly; with ue8m0 scales only rows whose amax lands near 240 are hit.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "scale-unwritten-zero",
        group: Group::CacheLayout,
        summary: "key scale words never written, zero-filled",
        changes: "Every key row reads scale 0, so every logit is 0.",
        stands_for: "Scales not transferred or not written (e.g. a prefill/decode transfer that copies codes only; the motivating incident used a prefill/decode split). Hypothetical.",
        expected: "All scores tie at 0: selection is decided by the tie rule alone, recall is about k over the candidate rows (or 0/1 by depth with a deterministic tie rule).",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::RandomLoss,
    },
    HypothesisInfo {
        name: "scale-unwritten-nan",
        group: Group::CacheLayout,
        summary: "key scale words never written, NaN-filled",
        changes: "Every key row reads scale NaN, so every logit is NaN.",
        stands_for: "As scale-unwritten-zero with NaN-poisoned memory. Hypothetical.",
        expected: "All scores NaN: they tie, so the tie rule alone decides, as with zero-filled scales.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::RandomLoss,
    },
    HypothesisInfo {
        name: "zero-blocks=P",
        group: Group::CacheLayout,
        summary: "a share P of the request's cache pages read as zeros (every logit there 0)",
        changes: "Each page of 64 rows of the request's key cache reads as all-zero keys with probability P, drawn per request (trial) and page; a zero key scores exactly 0.",
        stands_for: "Block offsets formed in 32 bits: ROCm/aiter #4774 (deepgemm_fp8_paged_mqa_logits: every block >= 2143 scores exactly 0.0), vllm #46222 (ROCm insert/gather past 32 bits), aiter #5614. Which pages is allocation-dependent, so random per request.",
        expected: "A needle whose page is zeroed is lost unless ties or the window save it: recall about 1 - P, the same at every depth, varying from request to request; zeroed rows tie at 0 and crowd the cut only when many scores are negative.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "layout-interleaved-read",
        group: Group::CacheLayout,
        summary: "page written planar (codes, then scales), read as interleaved records of 132 bytes",
        changes: "The writer lays each page of 64 rows out planar (64 x 128 e4m3fn code bytes, then 64 fp32 scale words); the reader takes row r's codes from bytes [132r, 132r+128) and its scale from the little-endian f32 in [132r+128, 132r+132): codes drift 4 bytes a row into the next rows and, for slots 62 and up, into the scale words; scales are bit-casts of four code bytes (either sign, up to about 2^126), real scale words only for the last slots.",
        stands_for: "vllm #40991 (SM120 Triton fallback reads interleaved what the compressor wrote packed), vllm #50576 (SM80 fork: writer block-planar, reader token-interleaved; 'scale' = four fp8 bytes bit-cast), 1Cat-vLLM #250 (SM70 decode kernels: 6,943 of 13,802 scales negative, +-1e36...1e38), DeepGEMM #311 (fused cache strides).",
        expected: "Every row but the last slots of a page is scored with a garbage scale: negative scales push rows to the bottom, huge ones to the top (or to +-inf, whose ties the tie rule orders); the needle is kept about as often as a random row, at every depth and context beyond k + window, so recall collapses to about k over the candidate rows. Contexts whose rows all fit in k are unaffected. Only row-scaled e4m3fn keys (fp8, fp8-fp32scale) have the bytes; bf16 and fp4 are refused.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "layout-planar-read",
        group: Group::CacheLayout,
        summary: "page written as interleaved records of 132 bytes, read planar",
        changes: "The writer stores each row as a record of its 128 code bytes then its fp32 scale; the reader takes row r's codes from bytes [128r, 128r+128) and its scale from the f32 at byte 8192+4r: codes lag 4 bytes a row with the scale words of earlier rows among them, and every scale but the last slots' is a bit-cast of code bytes of rows 62 and 63.",
        stands_for: "The reverse of layout-interleaved-read (the same incidents with writer and reader exchanged: vllm #40991, vllm #50576); DeepGEMM #311.",
        expected: "As layout-interleaved-read: scales are garbage for almost every row, recall collapses to about k over the candidate rows; contexts within k + window unaffected; bf16 and fp4 refused.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "layout-tile16",
        group: Group::CacheLayout,
        summary: "codes written flat, read through AITER's 16x16 preshuffle tiles",
        changes: "Codes are written flat (row r, byte c at 128r + c) and read as AITER's preshuffled layout: row r, byte c from (r/16)*2048 + (c/16)*256 + (r%16)*16 + c%16, so each row reads 16-byte pieces of 8 rows of its band of 16; scales are read correctly.",
        stands_for: "vllm #52109 (V4 on gfx942: indexer K written flat, read in the 16x16 shuffle layout; fixed by vllm #50455), sglang #37685 (k-pool writers and readers must share the AITER tile order), aiter #2879.",
        expected: "A row's codes are pieces of its band's rows under its own scale: scores are unrelated to the row, the needle's score spreads over its band's rows, so recall falls to about what random selection keeps beyond k + window, at every depth; bf16 and fp4 refused (no tiled fp8 bytes).",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "offset-32bit=POOL",
        group: Group::CacheLayout,
        summary: "pages in physical blocks past 2^31 bytes read as zeros (32-bit offsets), pool of POOL tokens",
        changes: "Each page of 64 rows of the request's cache lies in a physical block drawn uniformly from a pool of POOL/64 blocks, per request (trial) and page; a block whose byte offset, block x 8448 (64 x 132 bytes), reaches 2^31 reads as all-zero keys (every logit 0). The share zeroed is 1 - 254201/(POOL/64), about 1 - 2^31/(pool bytes).",
        stands_for: "ROCm/aiter #4774 (deepgemm_fp8_paged_mqa_logits formed block_id*stride in 32 bits: every block >= 2143 scored exactly 0.0), vllm #46222 (ROCm insert/gather block_id*stride past 32 bits). The mechanism behind zero-blocks=P, with P derived from the pool size.",
        expected: "As zero-blocks=P with P = 1 - 2^31/(pool bytes): recall about 1 - P at every depth, varying per request; a pool below 16268928 tokens never overflows (refused). bf16 and fp4 are refused: the block stride is the fp8 indexer cache's.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "rotated-before=R",
        group: Group::CacheLayout,
        summary: "cache rows before row R written rotated, the rest unrotated (a mixed cache)",
        changes: "Keys of cache rows 0 … R-1 go through the Hadamard rotation as the pipeline says; rows from R on are written without it; queries are rotated. R counts cache rows (tokens / 4 in V4's CSA layers).",
        stands_for: "sglang #27705 (review): with fusion on, short prefills store rotated indexer K while decode stores unrotated K, so one cache mixes both.",
        expected: "Rows before R score correctly, rows after R as with hadamard-q-only (unrelated to the needle): a needle before R is kept while the unrotated rows do not crowd it out; a needle after R is lost at random.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
    },
    HypothesisInfo {
        name: "layers=SET",
        group: Group::Selection,
        summary: "the other hypotheses act only in these indexer layers (N, A..B, A..) or in the reusing layers (reusers)",
        changes: "Whole-model recall: the variant's faults act in the named indexer layers of the stack (numbered 0 … L-1, 0 the simulated one; A..B excludes B, A.. runs to the last), and reach the layers that reuse their selections; every other layer selects as the fault-free reference does. `reusers`: the layers that should reuse another layer's selection select on their own with the fault instead (IndexShare done wrong), the indexer layers healthy. Per-layer recall is that of a faulty layer.",
        stands_for: "ROCm/ATOM #1466 (per-layer scale views all aliased onto layer 0's: layers >= 1 read zero scales; layers=1..), tenstorrent/tt-metal #53637 (wrong on every rank but the first); reusers: ml-explore/mlx-lm #1453 with exo-explore/exo #2208 (randomly initialised indexers on GLM-5.2's 57 shared layers), ikawrakow/ik_llama.cpp #2063 (an independent top-k on every layer).",
        expected: "A fault in all but one layer is rescued by the healthy layer wherever it keeps the needle: whole-model recall follows the healthy layer's per-layer recall, not the fault's; at k >= the context's rows every layer selects everything and the fault is cured.",
        requires: Some("a [stack] and the quantile needle"),
        layers: FaultSpread::Shared,
        class: FaultClass::LayerSubset,
    },
    HypothesisInfo {
        name: "layer-share=F",
        group: Group::Selection,
        summary: "the other hypotheses act in a share F of the indexer layers, spread evenly",
        changes: "Whole-model recall: layer l of the stack is faulty when floor((l+1)·F) > floor(l·F), a share F spread evenly over the layers; the others select as the fault-free reference does.",
        stands_for: "ml-explore/mlx-lm #1453 + exo #2208: GLM-5.2's 57 'shared' layers of 78 ran randomly initialised indexers (F = 0.73); the corruption threshold tracked index_topk exactly, and index_topk 32768 cured it.",
        expected: "The healthy layers keep what they keep: whole-model recall stays near the healthy model's wherever one healthy layer finds the needle, so the fault shows only when the healthy layers are few or the needle is hard.",
        requires: Some("a [stack] and the quantile needle"),
        layers: FaultSpread::Shared,
        class: FaultClass::LayerSubset,
    },
    HypothesisInfo {
        name: "row-shift",
        group: Group::Selection,
        summary: "the query's top-k taken from another query's logits row",
        changes: "The variant selects by the scores of another query over the same keys: a fresh draw of the model's query and head weights from the trial's seed (tag ROW_SHIFT), with no alignment to this trial's needle. Assumption: the other row is another token's, drawn as the model draws queries.",
        stands_for: "vllm #42169 (persistent top-k read DeepGEMM's padded logits with the unpadded stride: rows read with the wrong stride), sglang #12457 (seqlens_expanded), aiter #1815 (stride(0) vs stride(1), batch > 64). Usually seen as MTP acceptance drops, not lost needles.",
        expected: "The needle is ranked as a haystack row: kept about k over the candidate rows beyond k + window, at every depth; contexts within k + window unaffected. Acts on every key format (bf16 included).",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::RandomLoss,
    },
    HypothesisInfo {
        name: "chunk-local",
        group: Group::Selection,
        summary: "the query's indexer sees only rows compressed in its own prefill chunk",
        changes: "With a prefill chunk of N tokens (--prefill-chunk N), the query at position L-1 belongs to the chunk starting at C = floor((L-1)/N)*N; only compressed rows completed within that chunk (row i with c(i+1) > C, i.e. i >= floor(C/c)) are candidates for its top-k, and k is capped at their count. Scores are unchanged; the raw window still applies. Assumption: the compressor carries its partial row across chunks, so a row is emitted by the chunk in which its last token arrives.",
        stands_for: "ml-explore/mlx-lm #1189 (V4-Flash on MLX, comment 2026-08-16): the indexer's compressed pool was not kept in the cache, so on each prefill chunk (prefill_step_size 2048) the indexer scored only that chunk's rows (486 of 1510 on the last chunk of a 6,042-token prompt; needle at pool row ~755 found 0 of 42; survivals only where the needle lay in the last chunk).",
        expected: "Depth- and length-dependent, not random: the needle survives when it lies in the query's chunk (the last (L-1) mod N + 1 tokens) or the raw window, and is lost otherwise at any k; when the last chunk is short (L just past a multiple of N) almost nothing survives. bf16 keys are hit as much as fp8. Cheapest test: a needle in the last chunk against one in the first, at one context above N.",
        requires: Some("a prefill chunk (--prefill-chunk N, or an observation column prefill_chunk)"),
        layers: FaultSpread::Shared,
        class: FaultClass::Schedule,
    },
    HypothesisInfo {
        name: "longer-than=T",
        group: Group::Selection,
        summary: "the other hypotheses act only in prompts longer than T tokens (a split prefill)",
        changes: "In a context of at most T tokens the variant is its base (the name before the first +): the same outcomes, trial by trial; in longer contexts its other hypotheses act as written. It says when a fault acts, not what it does: the content is the other hypotheses' (keys unrelated to the prompt: row-shift; keys read as zeros: zero-blocks=1).",
        stands_for: "vllm #40018 (GLM-5.1-FP8, ROCM_AITER_MLA_SPARSE): prefill garbage only above ~20K prompt tokens; the indexer's prefill split into sub-chunks, and the sub-chunks after the first scored keys gathered into a workspace that did not hold this prompt's keys (fix PRs #46478, #40049 disagree on what it held).",
        expected: "Healthy up to T, then the other hypotheses' signature at every depth (row-shift: kept about k in the candidate rows; zero-blocks=1: every logit 0, kept as the tie rule says). bf16 keys are hit as much as fp8. Cheapest test: two prompts straddling T.",
        requires: Some("the full estimator; its base variant in the same sweep; not with needle=M"),
        layers: FaultSpread::Shared,
        class: FaultClass::Schedule,
    },
    HypothesisInfo {
        name: "needle=M",
        group: Group::Selection,
        summary: "the needle's median exceedance times M (not a fault: how hard the needle is)",
        changes: "Under the quantile needle, the needle is placed at a drawn exceedance whose median is M times the scenario's (the same draws, shifted by log10 M), on the same haystacks as the variant without it; every other part of the variant is unchanged.",
        stands_for: "Not a fault: how hard the tested needle was is not known (docs/OBSERVATIONS.md, \"What diagnose does not know\"); diagnose profiles each candidate over needle=0.5 and needle=2 beside the scenario's own needle, in one simulation.",
        expected: "M < 1 makes the needle easier (recall up), M > 1 harder; identical, bit for bit, to the variant without it in a scenario whose needle.exceedance is M times larger.",
        requires: Some("the quantile needle (needle.unit = \"quantile\") and the full estimator; M times the median exceedance below 1"),
        layers: FaultSpread::Shared,
        class: FaultClass::Healthy,
    },
    HypothesisInfo {
        name: "ties-lowest",
        group: Group::Selection,
        summary: "top-k ties go to the lowest row index",
        changes: "This variant orders equal scores by lowest row index, whatever the scenario's tie rule.",
        stands_for: "Tie order is undocumented in every top-k kernel (reference notes, section 1); a kernel that scans rows in order.",
        expected: "Matters only with ties (bf16 logits, zero scales): needles near the start win ties, recall falls with depth.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "ties-highest",
        group: Group::Selection,
        summary: "top-k ties go to the highest row index",
        changes: "This variant orders equal scores by highest row index.",
        stands_for: "As ties-lowest, a kernel scanning from the end.",
        expected: "Mirror of ties-lowest: recall rises with depth when ties decide.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "nan-first",
        group: Group::Selection,
        summary: "NaN logits ranked above every number (the default)",
        changes: "NaN logits rank above +inf (all NaNs alike, whatever their sign). Same as the default; listed so a comparison can name it.",
        stands_for: "torch.topk, which the DeepSeek reference selects with, ranks NaN as the largest value.",
        expected: "Rows with NaN logits crowd out real rows, up to k of them.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "nan-last",
        group: Group::Selection,
        summary: "NaN logits ranked below every number",
        changes: "NaN logits rank below -inf.",
        stands_for: "A top-k kernel comparing with > (a NaN never wins). Hypothetical.",
        expected: "NaN rows are never selected; a needle whose logit is NaN is lost.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "topk-round64",
        group: Group::Selection,
        summary: "k rounded down to a multiple of 64",
        changes: "The engine selects floor(k/64)*64 rows (100 -> 64, 512 -> 512, 63 -> 0).",
        stands_for: "FlashMLA's Blackwell kernels require top-k to be a multiple of 64 (reference notes, section 2); an engine rounding down to satisfy it is hypothetical.",
        expected: "No effect for k = 512 or 1024; for other k, recall of k rounded down.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "topk=N",
        group: Group::Selection,
        summary: "the engine selects N rows whatever k is configured",
        changes: "The engine's index_topk is N instead of the sweep's k.",
        stands_for: "ROCm/ATOM PR #1591: a bridge hard-coded index_topk 1024 while V4-Flash uses 512; the incident's config override to 1024.",
        expected: "Identical results while every row is selected (context <= k*ratio + window); beyond, recall of k = N.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "window=N",
        group: Group::Selection,
        summary: "the engine keeps a raw window of N tokens",
        changes: "The raw sliding window the query always attends is N tokens instead of the scenario's.",
        stands_for: "A window size mismatch (V4 uses 128 tokens, reference code). Hypothetical.",
        expected: "Needles in the last tokens are found or lost by the window; a smaller window shifts the end of the recall curve.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "rope-swap-q",
        group: Group::Position,
        summary: "query RoPE pairing layout swapped (interleaved <-> halves)",
        changes: "The query's RoPE uses the other pairing layout than the model's (interleaved pairs vs first-half/second-half pairs); keys keep the model's.",
        stands_for: "sglang #13530: the first V3.2 release rotated the indexer with interleaved pairs where the model uses halves, a real bug.",
        expected: "q·k loses its relative-position structure on the rope dims: scores depend on absolute positions, recall varies with depth.",
        requires: Some("--rope on"),
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "rope-swap-k",
        group: Group::Position,
        summary: "key RoPE pairing layout swapped (interleaved <-> halves)",
        changes: "The keys' RoPE uses the other pairing layout than the model's; the query keeps the model's.",
        stands_for: "As rope-swap-q (sglang #13530), on the cache-writer side.",
        expected: "As rope-swap-q.",
        requires: Some("--rope on"),
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "rope-swap-both",
        group: Group::Position,
        summary: "query and key RoPE pairing both swapped (interleaved <-> halves)",
        changes: "The query's and the keys' RoPE both use the other pairing layout than the model's.",
        stands_for: "sglang #13530/#13495 (the first V3.2 release rotated the indexer's q and k with interleaved pairs where the model uses halves), vllm-ascend #4641/#7341/#7859, sglang #30111 (fused kernels hard-coded GPT-J pairing), mlx-lm #1431: five occurrences in three engines.",
        expected: "Relative position stays consistent (both sides turn alike), so with a needle match in the rope-free dims nothing changes; only a match the model learned in specific rotary pairs (needle.rope_share > 0, the isotropic geometry) is moved, and then recall falls with distance.",
        requires: Some("--rope on"),
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "no-relu",
        group: Group::Numerics,
        summary: "no ReLU on the per-head dot products (signed head sum)",
        changes: "The score is Σ_h w_h·(q_h·k) instead of Σ_h w_h·ReLU(q_h·k); computed as the ReLU sum of q less that of −q, then rounded to the variant's logits.",
        stands_for: "1Cat-vLLM #250: the SM70 V4 port's decode kernels dropped the per-head ReLU (with a layout bug beside it).",
        expected: "About half the per-head products are negative (sglang PR #33271), so the ranking moves: the ReLU-vs-linear top-512 overlap is 0.55-0.88 there. A needle whose heads look for it keeps positive products and mostly survives; the haystack's order near the cut changes.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
    HypothesisInfo {
        name: "tie-truncate=B",
        group: Group::Selection,
        summary: "the selector compares only the top B bits of each score (a coarse bin)",
        changes: "Selection compares each score's order key cut to its top B bits (B = 16: sign, exponent and 7 mantissa bits, a bf16 bin), so rows of the bin holding the k-th score tie and fall in the tie order (the scenario's, random by default: the kernel's arrival order), not by their exact score.",
        stands_for: "sglang #35257: the DSA top-k v2 kernel keeps whichever elements of the threshold's coarse bin arrive first when more share it than fit; jundot/omlx #2243 counts 47-180 exact bf16 ties at the 2048th score at 131K.",
        expected: "Harmless while the needle sits bins above the cut; a needle in the threshold bin is kept by chance. Fewer bits, wider bins, more loss near the cut; B = 32 changes nothing.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Partial,
    },
];

/// Names of every hypothesis, comma-separated, for error messages.
pub fn names() -> String {
    CATALOGUE.iter().map(|h| h.name).collect::<Vec<_>>().join(", ")
}

/// Every field of an entry, one per paragraph (`dsa-recall hypotheses show`).
pub fn long_text(h: &HypothesisInfo) -> String {
    let mut text = format!(
        "{} ({})\n  {}\n  changes: {}\n  stands for: {}\n  expected: {}\n",
        h.name, h.group, h.summary, h.changes, h.stands_for, h.expected
    );
    if let Some(r) = h.requires {
        text.push_str(&format!("  requires: {r}\n"));
    }
    text.push_str(&format!("  class: {} ({})\n", h.class.name(), h.class.about()));
    text.push_str(&format!("  across layers: {} (--fault-layers overrides)\n", h.layers.name()));
    text.push_str("  use: --precisions fp8,fp8+NAME (docs/HYPOTHESES.md)\n".replace("NAME", h.name).as_str());
    text
}

/// One line a person reads beside a candidate's code name: each part's
/// catalogue summary, joined by "; " (healthy for the empty candidate).
pub fn candidate_summary(candidate: &str) -> String {
    let parts: Vec<&str> = candidate.split('+').map(str::trim).filter(|p| !p.is_empty()).collect();
    let lines: Vec<&str> = parts.iter().filter_map(|p| info(p)).map(|h| h.summary).collect();
    if lines.is_empty() {
        FaultClass::Healthy.about().to_string()
    } else {
        lines.join("; ")
    }
}

/// The catalogue entry named `name` (`topk=N` and `topk` both find `topk=N`).
pub fn info(name: &str) -> Option<&'static HypothesisInfo> {
    let bare = name.split('=').next().unwrap_or(name);
    CATALOGUE.iter().find(|h| h.name == name || h.name.split('=').next() == Some(bare))
}

/// The smallest cache pool (tokens) of `offset-32bit=POOL` with a block
/// past 2^31 bytes: one block more than the first such block.
pub const MIN_32BIT_POOL: u64 = (FIRST_BLOCK_PAST_2_31 + 1) * PAGE_ROWS as u64;
/// The largest pool accepted (2^40 tokens, 8.4 PiB of indexer cache).
pub const MAX_32BIT_POOL: u64 = 1 << 40;

/// A parsed hypothesis, parameters included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hypothesis {
    NoHadamard,
    HadamardQOnly,
    HadamardKOnly,
    ScalePerPage,
    ScalePerTensor,
    ScaleFloor,
    StaleScale,
    LogitsBf16,
    LogitsFp16,
    SlotShift,
    PagesSwapped,
    BlockRow0,
    ScaleOffset,
    E4m3fnuzRead,
    E4m3fnRead,
    ScaleUnwrittenZero,
    ScaleUnwrittenNan,
    TiesLowest,
    TiesHighest,
    NanFirst,
    NanLast,
    TopkRound64,
    Topk(u64),
    Window(u64),
    RopeSwapQ,
    RopeSwapK,
    RopeSwapBoth,
    NoRelu,
    TieTruncate(u32),
    /// Parts per million.
    ZeroBlocks(u32),
    RotatedBefore(u64),
    LayoutInterleavedRead,
    LayoutPlanarRead,
    LayoutTile16,
    /// Blocks in the pool.
    Offset32bit(u64),
    RowShift,
    ChunkLocal,
    Layers(crate::score::variant::LayerSubset),
    /// The needle's median exceedance times M (f64 bits).
    NeedleMultiple(u64),
    /// Tokens: the faults act only in longer prompts.
    LongerThan(u64),
}

impl Hypothesis {
    /// Parses one `+`-separated part: a catalogue name, or `topk=N` /
    /// `window=N` (N with K/M suffixes). The error says what is allowed.
    pub fn parse(text: &str) -> Result<Hypothesis, String> {
        let text = text.trim();
        if let Some((key, value)) = text.split_once('=') {
            let n = crate::base::units::parse_size(value.trim());
            return match (key.trim(), n) {
                ("topk", Some(n)) if n >= 1 => Ok(Hypothesis::Topk(n)),
                ("window", Some(n)) => Ok(Hypothesis::Window(n)),
                ("zero-blocks", _) => match value.trim().parse::<f64>() {
                    Ok(p) if p > 0.0 && p <= 1.0 && (p * 1e6).round() >= 1.0 => Ok(Hypothesis::ZeroBlocks((p * 1e6).round() as u32)),
                    _ => Err(format!("zero-blocks=P needs a share of pages above 0 (at least 1e-6) and at most 1, not {value:?}")),
                },
                ("rotated-before", Some(r)) => Ok(Hypothesis::RotatedBefore(r)),
                ("longer-than", Some(t)) if t >= 1 => Ok(Hypothesis::LongerThan(t)),
                ("longer-than", _) => Err(format!("longer-than=T needs a prompt length of at least 1 token (K/M allowed), not {value:?}")),
                ("offset-32bit", Some(tokens)) if (MIN_32BIT_POOL..=MAX_32BIT_POOL).contains(&tokens) => {
                    Ok(Hypothesis::Offset32bit(tokens / PAGE_ROWS as u64))
                }
                ("offset-32bit", _) => Err(format!(
                    "offset-32bit=POOL needs a cache pool of {MIN_32BIT_POOL} to {MAX_32BIT_POOL} tokens (K/M allowed; a smaller pool keeps every block offset below 2^31 at 64 x 132 bytes a block), not {value:?}"
                )),
                ("rotated-before", None) => Err(format!("rotated-before=R needs a number of cache rows ≥ 0, not {value:?}")),
                ("layers", _) => crate::score::variant::LayerSubset::parse_range(value).map(Hypothesis::Layers),
                ("layer-share", _) => match value.trim().parse::<f64>() {
                    Ok(f) if f > 0.0 && f <= 1.0 => {
                        Ok(Hypothesis::Layers(crate::score::variant::LayerSubset::Share { ppm: (f * 1e6).round() as u32 }))
                    }
                    _ => Err(format!("layer-share=F needs a share of layers above 0 and at most 1, not {value:?}")),
                },
                ("tie-truncate", _) => match value.trim().parse::<u32>() {
                    Ok(b) if (1..=32).contains(&b) => Ok(Hypothesis::TieTruncate(b)),
                    _ => Err(format!("tie-truncate=B needs a number of bits from 1 to 32, not {value:?}")),
                },
                ("needle", _) => match value.trim().parse::<f64>() {
                    Ok(m) if m.is_finite() && m > 0.0 && m <= 1e6 => Ok(Hypothesis::NeedleMultiple(m.to_bits())),
                    _ => Err(format!("needle=M needs a positive multiple of the needle's median exceedance, at most 1e6, not {value:?}")),
                },
                ("topk", _) => Err(format!("topk=N needs a positive number of rows, not {value:?}")),
                ("window", _) => Err(format!("window=N needs a number of tokens ≥ 0, not {value:?}")),
                _ => Err(format!("unknown hypothesis {text:?}; known: {}", names())),
            };
        }
        Ok(match text {
            "no-hadamard" => Hypothesis::NoHadamard,
            "hadamard-q-only" => Hypothesis::HadamardQOnly,
            "hadamard-k-only" => Hypothesis::HadamardKOnly,
            "scale-per-page" => Hypothesis::ScalePerPage,
            "scale-per-tensor" => Hypothesis::ScalePerTensor,
            "scale-floor" => Hypothesis::ScaleFloor,
            "stale-scale" => Hypothesis::StaleScale,
            "logits-bf16" => Hypothesis::LogitsBf16,
            "logits-fp16" => Hypothesis::LogitsFp16,
            "slot-shift" => Hypothesis::SlotShift,
            "pages-swapped" => Hypothesis::PagesSwapped,
            "block-row0" => Hypothesis::BlockRow0,
            "scale-offset" => Hypothesis::ScaleOffset,
            "e4m3fnuz-read" => Hypothesis::E4m3fnuzRead,
            "e4m3fn-read" => Hypothesis::E4m3fnRead,
            "scale-unwritten-zero" => Hypothesis::ScaleUnwrittenZero,
            "scale-unwritten-nan" => Hypothesis::ScaleUnwrittenNan,
            "ties-lowest" => Hypothesis::TiesLowest,
            "ties-highest" => Hypothesis::TiesHighest,
            "nan-first" => Hypothesis::NanFirst,
            "nan-last" => Hypothesis::NanLast,
            "topk-round64" => Hypothesis::TopkRound64,
            "rope-swap-q" => Hypothesis::RopeSwapQ,
            "rope-swap-k" => Hypothesis::RopeSwapK,
            "rope-swap-both" => Hypothesis::RopeSwapBoth,
            "no-relu" => Hypothesis::NoRelu,
            "layout-interleaved-read" => Hypothesis::LayoutInterleavedRead,
            "layout-planar-read" => Hypothesis::LayoutPlanarRead,
            "layout-tile16" => Hypothesis::LayoutTile16,
            "row-shift" => Hypothesis::RowShift,
            "chunk-local" => Hypothesis::ChunkLocal,
            "topk" | "window" | "tie-truncate" | "zero-blocks" | "rotated-before" | "layers" | "layer-share" | "offset-32bit"
            | "needle" | "longer-than" => return Err(format!("{text} needs a value: {text}=N")),
            _ => return Err(format!("unknown hypothesis {text:?}; known: {}", names())),
        })
    }

    /// The setting this hypothesis decides; two hypotheses deciding the same
    /// setting cannot be combined.
    pub fn setting(self) -> &'static str {
        use Hypothesis::*;
        match self {
            NoHadamard | HadamardQOnly | HadamardKOnly => "the rotation",
            ScalePerPage | ScalePerTensor => "which rows share a key scale",
            ScaleFloor => "the key scale's rounding",
            StaleScale => "which row's scale a row is quantized with",
            LogitsBf16 | LogitsFp16 => "the logit format",
            SlotShift | BlockRow0 => "the slot a row is read from",
            PagesSwapped => "the page a row is read from",
            ScaleOffset | ScaleUnwrittenZero | ScaleUnwrittenNan => "what the scale words hold",
            E4m3fnuzRead | E4m3fnRead => "the fp8 flavour of the cache",
            TiesLowest | TiesHighest => "the tie rule",
            NanFirst | NanLast => "the NaN order",
            TopkRound64 => "the multiple k is rounded to",
            Topk(_) => "the engine's k",
            Window(_) => "the engine's window",
            RopeSwapQ => "the query's RoPE layout",
            RopeSwapK => "the keys' RoPE layout",
            RopeSwapBoth => "the query's and the keys' RoPE layout",
            NoRelu => "the head activation",
            TieTruncate(_) => "the bits the selector compares",
            ZeroBlocks(_) | Offset32bit(_) => "which pages read as zeros",
            LayoutInterleavedRead | LayoutPlanarRead | LayoutTile16 => "the byte layout the cache is read with",
            RowShift => "the logits row a query selects from",
            ChunkLocal => "which rows chunked prefill lets the query see",
            RotatedBefore(_) => "which rows the writer rotates",
            Layers(_) => "the layers the faults act in",
            NeedleMultiple(_) => "the needle's median exceedance",
            LongerThan(_) => "the prompts the faults act in",
        }
    }

    /// Changes `variant` as this hypothesis says, or says why it cannot
    /// (when it would change nothing about this variant).
    pub fn apply(self, v: &mut PrecisionVariant) -> Result<(), String> {
        use Hypothesis::*;
        let rotated = v.query.rotation == Rotation::Hadamard || v.key.rotation == Rotation::Hadamard;
        match self {
            NoHadamard | HadamardQOnly | HadamardKOnly if !rotated => {
                return Err(format!("{} has no Hadamard rotation to change", v.name));
            }
            NoHadamard => (v.query.rotation, v.key.rotation) = (Rotation::None, Rotation::None),
            HadamardQOnly => (v.query.rotation, v.key.rotation) = (Rotation::Hadamard, Rotation::None),
            HadamardKOnly => (v.query.rotation, v.key.rotation) = (Rotation::None, Rotation::Hadamard),
            ScalePerPage => v.cache.scale_span = ScaleSpan::Page,
            ScalePerTensor => v.cache.scale_span = ScaleSpan::Tensor,
            ScaleFloor => v.cache.scale_rounded_down = true,
            StaleScale => v.cache.stale_scale = true,
            LogitsBf16 | LogitsFp16 => {
                let f = if self == LogitsBf16 { LogitFormat::Bf16 } else { LogitFormat::F16 };
                if v.scoring.logits == f {
                    return Err(format!("{} already rounds its logits to {f:?}", v.name));
                }
                v.scoring.logits = f;
            }
            SlotShift => v.cache.slot_shift = true,
            PagesSwapped => v.cache.pages_swapped = true,
            BlockRow0 => v.cache.block_row0 = true,
            ScaleOffset => v.cache.scale_word = ScaleWordFault::NextSlot,
            ScaleUnwrittenZero => v.cache.scale_word = ScaleWordFault::UnwrittenZero,
            ScaleUnwrittenNan => v.cache.scale_word = ScaleWordFault::UnwrittenNan,
            E4m3fnuzRead => v.cache.read_as = Fp8Flavour::E4m3fnuz,
            E4m3fnRead => v.cache.written_as = Fp8Flavour::E4m3fnuz,
            TiesLowest => v.selection.tie_rule = Some(TieRule::LowestIndex),
            TiesHighest => v.selection.tie_rule = Some(TieRule::HighestIndex),
            NanFirst => v.selection.nan_order = NanOrder::First,
            NanLast => v.selection.nan_order = NanOrder::Last,
            TopkRound64 => v.selection.topk_multiple = Some(64),
            Topk(n) => v.selection.topk = Some(n),
            Window(n) => v.selection.window = Some(n),
            RopeSwapQ | RopeSwapK | RopeSwapBoth => {
                let (q, k) = (self != RopeSwapK, self != RopeSwapQ);
                if (!q || v.position.query_rope_layout_swapped) && (!k || v.position.key_rope_layout_swapped) {
                    return Err(format!("{} already has that RoPE layout swapped", v.name));
                }
                v.position.query_rope_layout_swapped |= q;
                v.position.key_rope_layout_swapped |= k;
            }
            NoRelu => v.scoring.relu = false,
            Layers(set) => v.layers = set,
            ZeroBlocks(ppm) => v.cache.zero_pages_ppm = ppm,
            Offset32bit(blocks) => v.cache.offset_32bit_blocks = Some(blocks),
            LayoutInterleavedRead => v.cache.page_layout = PageLayoutFault::InterleavedRead,
            LayoutPlanarRead => v.cache.page_layout = PageLayoutFault::PlanarRead,
            LayoutTile16 => v.cache.page_layout = PageLayoutFault::Tile16Read,
            RowShift => v.position.query_row_shifted = true,
            ChunkLocal => v.chunk = crate::score::variant::ChunkVisibility::OwnChunk,
            NeedleMultiple(bits) => {
                let m = f64::from_bits(bits);
                if m == 1.0 {
                    return Err("needle=1 changes nothing".to_string());
                }
                v.needle_multiple = m;
            }
            RotatedBefore(r) => {
                if v.key.rotation != Rotation::Hadamard {
                    return Err(format!("{} writes its keys without a Hadamard rotation: nothing to mix", v.name));
                }
                v.cache.rotated_before = Some(r);
            }
            TieTruncate(b) => v.selection.coarse_bits = Some(b),
            LongerThan(t) => v.longer_than = t,
        }
        Ok(())
    }
}

/// How the faults of the variant named `name` (`base+h1+h2…`) act across
/// layers: None without a hypothesis, Independent when any of them is.
pub fn variant_spread(name: &str) -> Option<FaultSpread> {
    let spreads: Vec<FaultSpread> = name.split('+').skip(1).filter_map(|part| info(part.trim())).map(|h| h.layers).collect();
    if spreads.is_empty() {
        None
    } else if spreads.contains(&FaultSpread::Independent) {
        Some(FaultSpread::Independent)
    } else {
        Some(FaultSpread::Shared)
    }
}

/// `base+h1+h2…`: `base` with each hypothesis applied in order, named
/// `text`. `lookup` finds a base variant by name. Errors are one line.
pub fn compose(text: &str, lookup: impl Fn(&str) -> Option<PrecisionVariant>) -> Result<PrecisionVariant, String> {
    let mut parts = text.split('+').map(str::trim);
    let base_name = parts.next().unwrap_or_default();
    let mut v = lookup(base_name).ok_or_else(|| format!("unknown precision variant {base_name:?} before the first +"))?;
    let mut applied: Vec<(Hypothesis, &str)> = Vec::new();
    for part in parts {
        let h = Hypothesis::parse(part)?;
        if let Some((_, earlier)) = applied.iter().find(|(e, _)| e.setting() == h.setting()) {
            return Err(format!("{earlier} and {part} both set {}: give one", h.setting()));
        }
        h.apply(&mut v)?;
        applied.push((h, part));
    }
    v.name = text.trim().to_string();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 30, item 14: a person reads what a candidate is beside its name.
    #[test]
    fn candidate_summaries_join_their_parts() {
        assert_eq!(candidate_summary(""), "a healthy indexer");
        assert_eq!(candidate_summary("block-row0"), info("block-row0").unwrap().summary);
        let both = candidate_summary("scale-unwritten-zero+ties-highest");
        assert_eq!(both, format!("{}; {}", info("scale-unwritten-zero").unwrap().summary, info("ties-highest").unwrap().summary));
        assert_eq!(candidate_summary("topk=1024"), info("topk=N").unwrap().summary);
    }
    use crate::numerics::pipeline::{QuantizedRows, ScoreNumerics};
    use crate::score::indexer::IndexerQuery;

    const D: usize = 128;

    fn variant(text: &str) -> Result<PrecisionVariant, String> {
        compose(text, PrecisionVariant::builtin)
    }

    /// `raw` stored through `v`'s cache and scored against a fixed query.
    fn scores(v: &PrecisionVariant, raw: &[f32]) -> Vec<f32> {
        let heads = 4;
        let q: Vec<f32> = (0..heads * D).map(|i| ((i as f32) * 0.37).sin()).collect();
        let w = vec![1.0; heads];
        let query = IndexerQuery::new(v.query.quantize_rows(&q, D).unwrap(), &w, D, v.scoring);
        let mut keys = QuantizedRows::default();
        v.store_keys(raw, 0, 0, D, &mut keys).unwrap();
        let mut out = vec![0.0; raw.len() / D];
        query.score_quantized_rows(&keys, &mut out);
        out
    }

    fn keys(rows: usize, outlier: f32) -> Vec<f32> {
        (0..rows * D).map(|i| ((i as f32) * 0.91).sin() + if i % D == 3 { outlier } else { 0.0 }).collect()
    }

    #[test]
    fn catalogue_names_are_unique_and_all_parse() {
        for (i, h) in CATALOGUE.iter().enumerate() {
            assert!(CATALOGUE[..i].iter().all(|e| e.name != h.name), "{}", h.name);
            let text = h
                .name
                .replace("=N", "=100")
                .replace("=B", "=16")
                .replace("=POOL", "=64M")
                .replace("=P", "=0.25")
                .replace("=R", "=100")
                .replace("=SET", "=1..")
                .replace("=F", "=0.5")
                .replace("=M", "=2")
                .replace("=T", "=20K");
            let parsed = Hypothesis::parse(&text).unwrap();
            assert_eq!(info(&text).map(|e| e.name), Some(h.name));
            // Every hypothesis changes fp8 except nan-first, the default spelled out.
            let base = PrecisionVariant::builtin("fp8").unwrap();
            let mut v = base.clone();
            parsed.apply(&mut v).unwrap();
            assert_eq!(v == base, h.name == "nan-first", "{}", h.name);
        }
    }

    #[test]
    fn composed_names_parse_into_one_variant() {
        let v = variant("fp8+topk=1024+ties-lowest").unwrap();
        assert_eq!(v.name, "fp8+topk=1024+ties-lowest");
        assert_eq!(v.selection.topk_for(512), 1024);
        assert_eq!(v.selection.tie_rule, Some(TieRule::LowestIndex));
        assert_eq!((v.query.clone(), v.key.clone()), {
            let b = PrecisionVariant::builtin("fp8").unwrap();
            (b.query, b.key)
        });
        let v = variant("fp8+no-hadamard+scale-floor+topk=2K").unwrap();
        assert_eq!((v.key.rotation, v.cache.scale_rounded_down, v.selection.topk), (Rotation::None, true, Some(2048)));
        let v = variant("fp8-fp32scale+window=64+rope-swap-k").unwrap();
        assert_eq!((v.selection.window_for(128), v.position.key_rope_layout_swapped), (64, true));
    }

    #[test]
    fn bad_compositions_say_why_in_one_line() {
        for (text, needle) in [
            ("fp8+foo", "no-hadamard, hadamard-q-only"),
            ("fp8+topk=0", "positive"),
            ("fp8+topk", "topk=N"),
            ("fp8+window=x", "window=N"),
            ("fp9+no-hadamard", "fp9"),
            ("fp8+ties-lowest+ties-highest", "both set the tie rule"),
            ("bf16+no-hadamard", "no Hadamard rotation"),
            ("fp4+logits-bf16", "already"),
        ] {
            let err = variant(text).unwrap_err();
            assert!(err.contains(needle) && !err.contains('\n'), "{text}: {err}");
        }
    }

    #[test]
    fn no_hadamard_hurts_outlier_rows_and_is_exact_without_them() {
        let error = |v: &PrecisionVariant, raw: &[f32]| {
            let mut k = QuantizedRows::default();
            v.store_keys(raw, 0, 0, D, &mut k).unwrap();
            let mut deq = k.dequantized(D);
            if v.key.rotation == Rotation::Hadamard {
                crate::numerics::format::hadamard_rows_in_place(&mut deq, D).unwrap();
                // H is its own inverse
            }
            raw.iter().zip(&deq).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>()
        };
        let (fp8, plain) = (variant("fp8").unwrap(), variant("fp8+no-hadamard").unwrap());
        let outliers = keys(8, 200.0);
        assert_ne!(error(&plain, &outliers), error(&fp8, &outliers));
        // An outlier of 3e4 sets a scale of 2^7: the other channels (|v| ≤ 1)
        // fall to e4m3fn subnormals or zero without the rotation that spreads it.
        let huge = keys(8, 3e4);
        let small_channel_error = |v: &PrecisionVariant| {
            let mut k = QuantizedRows::default();
            v.store_keys(&huge, 0, 0, D, &mut k).unwrap();
            let mut deq = k.dequantized(D);
            if v.key.rotation == Rotation::Hadamard {
                crate::numerics::format::hadamard_rows_in_place(&mut deq, D).unwrap();
            }
            huge.iter().zip(&deq).enumerate().filter(|(i, _)| i % D != 3).map(|(_, (a, b))| f64::from(a - b).powi(2)).sum::<f64>()
        };
        assert!(small_channel_error(&plain) > 0.0);
        // ±1 everywhere is exact in e4m3fn with scale 2^-8: no rotation, no error.
        let flat: Vec<f32> = (0..8 * D).map(|i| if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
        assert_eq!(error(&plain, &flat), 0.0);
        assert!(error(&fp8, &flat) > 0.0);
    }

    #[test]
    fn one_sided_rotation_scrambles_scores() {
        let raw = keys(64, 0.0);
        let exact = scores(&variant("fp32").unwrap(), &raw);
        let fp8 = scores(&variant("fp8").unwrap(), &raw);
        let q_only = scores(&variant("fp8+hadamard-q-only").unwrap(), &raw);
        let gap = |a: &[f32]| a.iter().zip(&exact).map(|(x, y)| (x - y).abs()).sum::<f32>();
        assert!(gap(&q_only) > 20.0 * gap(&fp8), "{} vs {}", gap(&q_only), gap(&fp8));
    }

    #[test]
    fn unwritten_scales_make_every_logit_zero_or_nan() {
        let raw = keys(70, 5.0);
        assert!(scores(&variant("fp8+scale-unwritten-zero").unwrap(), &raw).iter().all(|&s| s == 0.0));
        assert!(scores(&variant("fp8-fp32scale+scale-unwritten-nan").unwrap(), &raw).iter().all(|s| s.is_nan()));
        assert!(scores(&variant("fp8").unwrap(), &raw).iter().any(|&s| s != 0.0));
    }

    #[test]
    fn no_relu_scores_the_signed_head_sum() {
        let raw = keys(40, 2.0);
        let heads = 4;
        let q: Vec<f32> = (0..heads * D).map(|i| ((i as f32) * 0.37).sin()).collect();
        let scale = 1.0 / ((heads * D) as f64).sqrt();
        let signed: Vec<f64> = raw
            .chunks_exact(D)
            .map(|k| q.chunks_exact(D).map(|qh| scale * qh.iter().zip(k).map(|(a, b)| f64::from(a * b)).sum::<f64>()).sum())
            .collect();
        let relu = scores(&variant("fp32").unwrap(), &raw);
        let plain = scores(&variant("fp32+no-relu").unwrap(), &raw);
        for ((&p, &s), &r) in plain.iter().zip(&signed).zip(&relu) {
            assert!((f64::from(p) - s).abs() < 1e-4 * (1.0 + s.abs()), "{p} vs {s}");
            assert!(r >= p - 1e-5, "ReLU can only raise a score: {r} < {p}");
        }
        assert!(plain.iter().zip(&relu).any(|(p, r)| (p - r).abs() > 1e-3), "some head product is negative");
        // bf16 logits round the difference, not each half.
        let bf16 = scores(&variant("fp32+logits-bf16+no-relu").unwrap(), &raw);
        for (b, p) in bf16.iter().zip(&plain) {
            assert_eq!(*b, half::bf16::from_f32(*p).to_f32());
        }
    }

    #[test]
    fn block_row0_makes_scores_page_constant_in_every_format() {
        let raw = keys(200, 3.0);
        for base in ["fp8", "bf16", "fp4"] {
            let (own, read) = (scores(&variant(base).unwrap(), &raw), scores(&variant(&format!("{base}+block-row0")).unwrap(), &raw));
            for (r, &s) in read.iter().enumerate() {
                assert_eq!(s.to_bits(), own[r / 64 * 64].to_bits(), "{base} row {r}");
            }
            assert!(own[..64].iter().any(|&s| s != own[0]), "{base}: the keys differ within a page");
        }
        assert!(variant("fp8+block-row0+slot-shift").unwrap_err().contains("both set the slot"));
    }

    #[test]
    fn zero_blocks_and_a_mixed_cache_change_the_rows_they_name() {
        let raw = keys(256, 3.0);
        // Every page zeroed: every logit 0.
        assert!(scores(&variant("fp8+zero-blocks=1").unwrap(), &raw).iter().all(|&s| s == 0.0));
        // A share: whole pages of 64 rows, chosen per request.
        let v = variant("fp8+zero-blocks=0.5").unwrap();
        let (fp8, zeroed) = (scores(&variant("fp8").unwrap(), &raw), scores(&v, &raw));
        for page in 0..4 {
            let rows = page * 64..(page + 1) * 64;
            let zero = crate::numerics::key_cache::page_zeroed(0, page as u64, 500_000);
            assert_eq!(zeroed[rows.clone()].iter().all(|&s| s == 0.0), zero, "page {page}");
            if !zero {
                assert_eq!(zeroed[rows.clone()], fp8[rows], "page {page}");
            }
        }
        // Rotated before row 100: rows before it as fp8 writes them, rows after as without the rotation.
        let mixed = scores(&variant("fp8+rotated-before=100").unwrap(), &raw);
        let q_only = scores(&variant("fp8+hadamard-q-only").unwrap(), &raw);
        assert_eq!(mixed[..100], fp8[..100]);
        assert_eq!(mixed[100..], q_only[100..]);
        assert!(variant("bf16+rotated-before=100").unwrap_err().contains("nothing to mix"));
    }

    #[test]
    fn position_and_selection_parameters_are_checked() {
        let both = variant("fp8+rope-swap-both").unwrap();
        assert!(both.position.query_rope_layout_swapped && both.position.key_rope_layout_swapped);
        assert_eq!(variant("fp8+rope-swap-q+rope-swap-k").unwrap().position, both.position);
        assert!(variant("fp8+rope-swap-both+rope-swap-k").unwrap_err().contains("already"));
        assert_eq!(variant("fp8+tie-truncate=16").unwrap().selection.coarse_bits, Some(16));
        for (text, needle) in [
            ("fp8+tie-truncate=0", "from 1 to 32"),
            ("fp8+tie-truncate=33", "from 1 to 32"),
            ("fp8+zero-blocks=1.5", "at most 1"),
            ("fp8+zero-blocks=0", "above 0"),
            ("fp8+rotated-before=x", "cache rows"),
            ("fp8+offset-32bit=1M", "16268928 to"),
            ("fp8+offset-32bit=16268927", "16268928 to"),
            ("fp8+offset-32bit=x", "cache pool"),
            ("fp8+offset-32bit", "needs a value"),
            ("fp8+offset-32bit=64M+zero-blocks=0.5", "both set which pages read as zeros"),
            ("fp8+layout-tile16+layout-interleaved-read", "both set the byte layout"),
        ] {
            let err = variant(text).unwrap_err();
            assert!(err.contains(needle) && !err.contains('\n'), "{text}: {err}");
        }
    }

    #[test]
    fn byte_layout_faults_scramble_scores_and_refuse_other_keys() {
        let raw = keys(256, 3.0);
        let fp8 = scores(&variant("fp8").unwrap(), &raw);
        for h in ["layout-interleaved-read", "layout-planar-read", "layout-tile16"] {
            let read = scores(&variant(&format!("fp8+{h}")).unwrap(), &raw);
            let changed = read.iter().zip(&fp8).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert!(changed > 200, "{h}: {changed} of 256 scores changed");
            // The writer never stores the NaN codes 0x7f/0xff, so no bit-cast scale is NaN or inf.
            assert!(read.iter().all(|s| !s.is_nan()), "{h}");
            for base in ["bf16", "fp4"] {
                let v = variant(&format!("{base}+{h}")).unwrap();
                assert!(v.unsupported(D).is_some_and(|w| w.contains("e4m3fn")), "{base}+{h}");
            }
        }
        // offset-32bit=64M: 2^20 blocks; the smallest pool gives one overflowing block in 254202.
        assert_eq!(variant("fp8+offset-32bit=64M").unwrap().cache.offset_32bit_blocks, Some(1 << 20));
        assert_eq!(variant("fp8+offset-32bit=16268928").unwrap().cache.offset_32bit_blocks, Some(FIRST_BLOCK_PAST_2_31 + 1));
        assert!(variant("fp8+row-shift").unwrap().position.query_row_shifted);
    }

    #[test]
    fn store_keys_without_hypotheses_is_the_key_pipeline() {
        let raw = keys(300, 30.0);
        for name in PrecisionVariant::builtin_names() {
            let v = PrecisionVariant::builtin(name).unwrap();
            let mut out = QuantizedRows::default();
            v.store_keys(&raw, 256, 0, D, &mut out).unwrap();
            assert_eq!(out, v.key.quantize_rows(&raw, D).unwrap(), "{name}");
        }
    }

    #[test]
    fn fnuz_read_through_the_variant_halves_scores() {
        // Halving every key value halves every logit exactly (power of two),
        // as long as no code is the −0 that fnuz reads as NaN.
        let raw: Vec<f32> = keys(16, 3.0).iter().map(|v| v + 0.5f32.copysign(*v)).collect();
        let v = variant("fp8+e4m3fnuz-read").unwrap();
        let (plain, fnuz) = (scores(&variant("fp8").unwrap(), &raw), scores(&v, &raw));
        for (a, b) in plain.iter().zip(&fnuz) {
            assert_eq!(*b, a / 2.0);
        }
    }

    #[test]
    fn selection_hypotheses_set_the_override() {
        assert_eq!(variant("fp8+topk-round64").unwrap().selection.topk_for(100), 64);
        assert_eq!(variant("fp8+topk-round64").unwrap().selection.topk_for(512), 512);
        assert_eq!(variant("fp8+nan-last").unwrap().selection.nan_order, NanOrder::Last);
        assert_eq!(variant("fp8+ties-highest").unwrap().selection.tie_rule, Some(TieRule::HighestIndex));
        let v = variant("fp32+logits-fp16").unwrap();
        assert_eq!(v.scoring, ScoreNumerics { logits: LogitFormat::F16, ..ScoreNumerics::F32 });
        assert!(variant("fp8+rope-swap-q").unwrap().position.query_rope_layout_swapped);
    }

    #[test]
    fn hypotheses_survive_a_manifest_round_trip_and_plain_variants_keep_their_bytes() {
        let v = variant("fp8+slot-shift+topk=1024+rope-swap-q").unwrap();
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(serde_json::from_str::<PrecisionVariant>(&json).unwrap(), v);
        let plain = serde_json::to_string(&PrecisionVariant::builtin("fp8").unwrap()).unwrap();
        assert!(!plain.contains("cache") && !plain.contains("selection") && !plain.contains("position"), "{plain}");
    }
}

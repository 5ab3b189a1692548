//! The cache-layout hypotheses: where the paged indexer cache's writer and
//! reader put codes, scales and rows.

use super::entry::{FaultClass, Group, HypothesisInfo, Role, Value};
use crate::base::units::parse_size;
use crate::model::stack::FaultSpread;
use crate::numerics::key_cache::{Fp8Flavour, PageLayoutFault, ScaleWordFault, FIRST_BLOCK_PAST_2_31, PAGE_ROWS};
use crate::numerics::pipeline::Rotation;

pub(super) const ENTRIES: &[HypothesisInfo] = &[
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
        class_of: None,
        setting: "the slot a row is read from",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.slot_shift = true;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the row in slot s of a page is read (codes and scale) from slot
(s + 1) mod 64 of the same page. The last written row of a partial page reads
an unwritten slot: zeros, logit 0.
**Stands for:** an off-by-one in the reader's slot index. Hypothetical.
**Expected:** each row's score is its successor's, so a needle is selected
under its predecessor's row index: a one-row needle is "found" one row early
and the attention reads the wrong tokens. In the simulator the needle's own
rows get their neighbours' scores, so recall collapses for needles of one row
and survives partly when the needle spans several rows (the successor of one
needle row is another). Page-periodic: a sweep of the needle across the 64
slots of a page is the signature."#,
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
        class_of: None,
        setting: "the page a row is read from",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.pages_swapped = true;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** pages 2p and 2p + 1 are read in each other's place (same slot);
a row whose partner page is missing or partial reads zeros.
**Stands for:** a permuted block table. Hypothetical.
**Expected:** rows are scored correctly but under the wrong index: a needle
lost whenever its pair page is not itself a needle page; recall near the
random baseline beyond the window, with a period of 128 rows in depth."#,
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
        class_of: None,
        setting: "the slot a row is read from",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.block_row0 = true;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the reader fetches every row of a page of 64 rows (codes and
scale) from the page's row 0, so the page's rows score alike and tie.
**Stands for:** ROCm/aiter #5591 and #5614 (a paged logits kernel that
drops the row offset within a block), 1Cat-vLLM #250 ("only token 0 of each
block read the right values").
**Expected:** scores constant within each page: the needle's row is scored
as its page's row 0, so it survives only when that row ranks (or the tie
order picks the needle's rows from a selected page); bf16 keys suffer as
fp8 do. The cheapest test is one capture: block-constant logits, which
`dsa-recall check` names (its `block-row0` transform). Tested:
`block_row0_makes_scores_page_constant_in_every_format` (fp8, bf16, fp4)."#,
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
        class_of: None,
        setting: "what the scale words hold",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.scale_word = ScaleWordFault::NextSlot;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** codes are read correctly; the scale of slot s is read from slot
(s + 1) mod 64's word (a never-written word reads 0).
**Stands for:** an off-by-one in the offset of the scale region of a page
(64 × 128 code bytes, then 64 scale words). We chose a neighbour's scale over
reinterpreting code bytes as a scale because it needs no assumption about
byte order or the scale's width; the code-bytes variant would give wild
scales (NaN and negative included) and is a stronger version of
`scale-unwritten-nan`. Hypothetical.
**Expected:** each row's logit is multiplied by the ratio of its neighbour's
scale to its own: with ue8m0 scales a factor 1/2, 1 or 2 most of the time,
with fp32 scales a continuous factor. The needle survives when its
neighbour's scale is not smaller than its own: roughly half the trials at
long contexts."#,
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
        class_of: None,
        setting: "the fp8 flavour of the cache",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.read_as = Fp8Flavour::E4m3fnuz;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** keys are written as e4m3fn and decoded as e4m3fnuz: bias 8
instead of 7, so every nonzero value halves (subnormals too), and the code
0x80 (−0 in e4m3fn) is fnuz's only NaN. The fnuz codec
(`format::element::e4m3fnuz`) matches `ml_dtypes.float8_e4m3fnuz` bit for bit
(`tests/data/golden_e4m3fnuz.csv`).
**Stands for:** an fp8 flavour mismatch between cache writer and reader:
AMD MI300 uses fnuz, OCP e4m3fn elsewhere. Motivated by the ROCm-only
collapse of vLLM #52109; the mismatch itself is hypothetical.
**Expected:** halving every key value halves every logit exactly, which does
not change the ranking; the damage is the −0 codes (negative values that
round to zero), each of which turns the head's dot product into NaN, which
ReLU-as-fmax turns into 0. Heads drop out of rows at random, more often for
keys with many tiny negative values. A unit test checks the halving and the
NaN."#,
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
        class_of: None,
        setting: "the fp8 flavour of the cache",
        role: Role::EveryTie,
        parse: None,
        apply: |_, v| {
            v.cache.written_as = Fp8Flavour::E4m3fnuz;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the reverse: the writer scales to fnuz's range (amax/240 with an
fp32 scale, or the smallest power of two with amax/s ≤ 240) and stores fnuz
codes; the reader decodes them as e4m3fn: values double, and the codes
0x7f/0xff (±240 in fnuz) are e4m3fn's NaN.
**Stands for:** an fnuz writer and an fn reader. Hypothetical.
**Expected:** with an fp32 scale every row's largest value lands on 240
exactly, so every row carries a NaN and loses the head(s) where it sits; with
ue8m0 scales only rows whose amax rounds to 240 are hit. Scores shrink
irregularly; recall falls at long contexts."#,
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
        class_of: None,
        setting: "what the scale words hold",
        role: Role::EveryTie,
        parse: None,
        apply: |_, v| {
            v.cache.scale_word = ScaleWordFault::UnwrittenZero;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** every key scale word reads 0 (zero-filled memory) or NaN
(NaN-filled memory): every logit is 0, or NaN.
**Stands for:** scale words never written or never transferred, e.g. a
prefill/decode transfer that copies the codes and not the scales (the
motivating incident ran with a prefill/decode split). Hypothetical.
**Expected:** every score ties (NaNs tie with each other, see below), so the
tie rule alone selects: recall about k over the candidate rows with random
ties, and a step in depth with `ties-lowest`/`ties-highest`."#,
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
        class_of: None,
        setting: "what the scale words hold",
        role: Role::EveryTie,
        parse: None,
        apply: |_, v| {
            v.cache.scale_word = ScaleWordFault::UnwrittenNan;
            Ok(())
        },
        documented_with: Some("scale-unwritten-zero"),
        doc: "",
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
        class_of: Some(|x| if every_page_zero(x) { FaultClass::RandomLoss } else { FaultClass::Layout }),
        setting: "which pages read as zeros",
        role: Role::EveryTieWhen(every_page_zero),
        parse: Some(|value| {
            match value.parse::<f64>() {
                Ok(p) if p > 0.0 && p <= 1.0 && (p * 1e6).round() >= 1.0 => Ok(Value::Count((p * 1e6).round() as u64)),
                _ => Err(format!("zero-blocks=P needs a share of pages above 0 (at least 1e-6) and at most 1, not {value:?}")),
            }
        }),
        apply: |x, v| {
            v.cache.zero_pages_ppm = x.count() as u32;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** each page of 64 rows of the request's key cache reads as
all-zero keys with probability P (a share, 1e-6 … 1), drawn per request
(trial) and page from its own stream (`tag::CACHE`); a zeroed row scores
exactly 0.
**Stands for:** block offsets formed in 32 bits: ROCm/aiter #4774
(`deepgemm_fp8_paged_mqa_logits`: every block ≥ 2143 scores exactly 0.0, one
of the two defects of vllm #52109), vllm #46222, aiter #5614. Which physical
blocks a request gets is the allocator's business, so the zeroed pages are
random per request; `scale-unwritten-zero` is the whole-cache case.
**Expected:** a needle on a zeroed page is lost unless the window saves it:
recall about 1 − P at every depth, varying between requests."#,
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
        class_of: None,
        setting: "the byte layout the cache is read with",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.page_layout = PageLayoutFault::InterleavedRead;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the step between memory and read works on the page's actual
bytes (`KeyCacheFaults::relay_pages`): each written row's element values
(exact e4m3fn codes) are encoded to their code bytes and its scale to a
little-endian fp32 word, laid into a page of 64 × 132 bytes by the writer's
layout, and read back by the reader's.
`layout-interleaved-read`: written planar as sglang/vLLM do (64 × 128 code
bytes, then 64 scale words; docs/NUMERICS.md, `src/tensors/check/layouts/sglang-v32-fp8.toml`),
read as records of 132 bytes: row r's codes are bytes [132r, 132r + 128),
its scale the f32 bit-cast of bytes [132r + 128, 132r + 132). Codes drift 4
bytes a row into the next row (row 0's are right); slots 62 and 63 read
scale words among their codes; the scale of slots 0 … 61 is four code bytes
of a later row, slot 62 reads slot 30's real scale word and slot 63 its own.
`layout-planar-read` is the reverse (written as interleaved records, read
planar): row r's codes from [128r, 128r + 128), its scale from byte
8192 + 4r, which holds code bytes of records 62 and 63 except for slots 30
and 63 (the real scale words of records 62 and 63). A partial page's bytes
past its last row are zero.
**What a garbage scale does to the logits (decided here):** the bit-cast
scale goes through the scorer as it is, multiplying the head sum (as the
engines' kernels do). An e4m3fn writer never stores the NaN codes
0x7f/0xff, so the f32 exponent built from code bytes is at most 253: a
bit-cast scale is finite, of either sign (the code's sign bit), and of any
magnitude from 0 to about 2^126 (the "±1e36…1e38" and negative scales of
1Cat-vLLM #250). A negative scale puts its row at the bottom; a huge one at
the top, and a head sum above about 4 under a scale near 2^126 overflows to
+inf, whose ties the tie rule orders. A NaN logit cannot arise from these
scales (tested); code bytes that are scale-word bytes can decode to e4m3fn
NaN, which silences that head for that row (ReLU as `fmax`, above). So
`nan-first`, the default, never comes into play for these two.
**Stands for:** vllm-project/vllm #40991 (SM120 Triton fallback: packed
layout written by the compressor, interleaved read; scales read from value
bytes), vllm-project/vllm #50576 (SM80 fork: writer block-planar
`value = base + pos·D`, `scale = base + bs·D + pos·4`, reader
token-interleaved `pos·(D + 4)`: "K drifts 4 B per token", the scale "four
fp8 bytes of a neighbour bit-cast to fp32"), 1CatAI/1Cat-vLLM #250 (SM70
decode kernels: 6,943 of 13,802 scales negative, ±1e36…1e38),
deepseek-ai/DeepGEMM #311 (fused KV-cache strides). The byte addressing is
`check`'s (`src/tensors/check/layout.rs`, `RowReader` with `swap_placement`),
written again in numerics, which sits below `tensors`.
**Signature:** every row but a few slots per page is scored with a garbage
scale, so scores no longer carry the needle: recall falls towards what a
random choice of k rows keeps, at every depth and every context longer than
k·c + window (shorter contexts select every row and are unaffected); more
k, more recall. Only row-scaled e4m3fn keys (`fp8`, `fp8-fp32scale`) have
these bytes: bf16, fp32 and fp4 keys are refused with a one-line reason.
Measured (32K, depth 50 %, 100 trials, niah needle): per-layer recall 0.15
(interleaved) and 0.13 (planar) at k 512, 0.28 and 0.28 at k 1024, against
1.00 for fp8. The random share would be 512/8192 = 0.06; why recall stays
above it is not established here.
**Cheapest discriminating test:** one capture of the cache page and the
engine's logits: `dsa-recall check` with its `layout-interleaved-read`
transform reproduces the logits; without a capture, the scales read back
(negative or beyond 1e30) are the tell, and a needle in the last 128 tokens
(the window) or a context within k·c + window survives.
Tested: `interleaved_read_of_a_planar_page_bit_casts_code_bytes_into_scales`,
`planar_read_of_interleaved_records_reads_scales_from_the_last_records`
(`src/numerics/key_cache.rs`), `byte_layout_faults_scramble_scores_and_refuse_other_keys`
(`src/score/hypothesis/tests.rs`)."#,
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
        class_of: None,
        setting: "the byte layout the cache is read with",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.page_layout = PageLayoutFault::PlanarRead;
            Ok(())
        },
        documented_with: Some("layout-interleaved-read"),
        doc: "",
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
        class_of: None,
        setting: "the byte layout the cache is read with",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.page_layout = PageLayoutFault::Tile16Read;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** codes written flat (row r, byte c at 128r + c of the page) and
read through AITER's 16 × 16 preshuffle tiles: row r, byte c from
(r / 16)·2048 + (c / 16)·256 + (r mod 16)·16 + c mod 16, the formula of
`check`'s `aiter-indexer-fp8-preshuffle` layout (`src/tensors/check/layouts/`,
ROCm/aiter `indexer_k_quant_and_cache` preshuffle branch, status inferred
there). Row r reads 16-byte pieces of eight rows of its band of 16
(r = 17, c = 35 reads flat row 20, byte 19); scale words are untouched, so
each row keeps its own scale. Same page bytes as above.
**Stands for:** vllm-project/vllm #52109 (V4 on 8×MI325X gfx942: indexer K
written flat, read in the 16×16 shuffle layout; fixing it alone moved the
healthy window from about 2K to 7K tokens; fix vllm-project/vllm #50455),
sgl-project/sglang #37685 (k-pool writers and readers must share the AITER
tile order), ROCm/aiter #2879.
**Signature:** each row's codes are pieces of its band's rows under its own
scale: scores keep little of the needle, recall falls at every depth for
contexts beyond k·c + window, less deep than the interleaved read (scales
stay right, and the needle's pieces still land in its band). Measured (32K,
50 %, 100 trials): 0.32 at k 512, 0.51 at k 1024. bf16 and fp4 keys are
refused (no tiled fp8 bytes); the simulator's writer is flat, so the reverse
direction (tiled written, flat read) is a permutation of the same kind and
not a separate entry.
**Cheapest discriminating test:** a capture read by `dsa-recall check`
(`layout-tile16` transform); without one, the healthy window: a context
within k·c + window is unaffected, a longer one is hit at every depth.
Tested: `tile16_read_of_a_flat_page_takes_row_pieces_of_its_band`."#,
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
        class_of: None,
        setting: "which pages read as zeros",
        role: Role::None,
        parse: Some(|value| {
            match parse_size(value) {
                Some(tokens) if (MIN_32BIT_POOL..=MAX_32BIT_POOL).contains(&tokens) => Ok(Value::Count(tokens / PAGE_ROWS as u64)),
                _ => Err(format!(
                    "offset-32bit=POOL needs a cache pool of {MIN_32BIT_POOL} to {MAX_32BIT_POOL} tokens (K/M allowed; a smaller pool keeps every block offset below 2^31 at 64 x 132 bytes a block), not {value:?}"
                )),
            }
        }),
        apply: |x, v| {
            v.cache.offset_32bit_blocks = Some(x.count());
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the mechanism behind `zero-blocks=P`, with P derived from the
cache pool instead of given. Each page of 64 rows of the request's cache
lies in a physical block drawn uniformly from a pool of POOL / 64 blocks
(POOL in tokens, K/M suffixes), per request (trial) and page from the
request's seed (`tag::CACHE`, as `zero-blocks`); a block whose byte offset,
block × 8448 (64 rows × 132 bytes, the fp8 indexer cache), reaches 2^31
reads as all-zero keys, so every logit there is 0. The first such block is
254201, so the zeroed share is 1 − 254201 / (POOL / 64), about
1 − 2^31 / (pool bytes): 0.758 for `offset-32bit=64M`. A pool below
16268928 tokens keeps every offset below 2^31 and is refused (one line,
exit 2), as is one above 2^40 tokens.
**Assumptions:** the allocator hands a request's pages blocks in no
particular order, each uniform over the pool and drawn independently (a
real allocator gives distinct blocks, which changes nothing about each
page's chance); the stride is the indexer cache's. ROCm/aiter #4774's kernel
indexed the full MLA cache (stride 1,002,240 bytes, so every block from 2143
on overflowed): a pool of that cache overflows at a smaller POOL, so read
POOL as the pool that gives the same share at 132 bytes a token.
**Stands for:** ROCm/aiter #4774 (`deepgemm_fp8_paged_mqa_logits` formed
`block_id * stride` in 32 bits: every block ≥ 2143 scored exactly 0.0, one of
the two defects of vllm #52109; fixed with 64-bit addressing in aiter
v0.1.20), vllm-project/vllm #46222 (ROCm insert/gather `block_id * stride`
past 32 bits).
**Signature:** as `zero-blocks=P` with that P: depth-independent, varies from
request to request, and grows with the pool, so a deployment with a larger
cache (more GPU memory given to KV, or a longer max-model-len) fails more;
bf16, fp32 and fp4 keys are refused (the stride is the fp8 cache's).
Measured (32K, 50 %, 100 trials): `offset-32bit=64M` 0.43 at k 512 and 0.44
at k 1024; `zero-blocks=0.7576`, the same share, 0.53 and 0.53 (the two
intervals overlap). Both stay above 1 − P = 0.24; why (a needle spanning two
pages, or zero logits ranking above negative ones) is not established here.
**Cheapest discriminating test:** rerun one failing prompt with a smaller
KV pool (`--gpu-memory-utilization` lower, or fewer blocks): the failure
share drops to zero below 16M tokens; or read the block table of a failing
request (its pages at blocks ≥ 254201 are the zero-logit ones).
Tested: `offset_32bit_zeroes_the_share_of_pages_past_2_31_bytes` (the share
over 20,000 draws within its 99.9 % Wilson interval, z = 3.29; zeroed pages
all zero, the rest as written)."#,
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
        class_of: None,
        setting: "which rows the writer rotates",
        role: Role::None,
        parse: Some(|value| {
            parse_size(value).map(Value::Count).ok_or_else(|| format!("rotated-before=R needs a number of cache rows ≥ 0, not {value:?}"))
        }),
        apply: |x, v| {
            if v.key.rotation != Rotation::Hadamard {
                return Err(format!("{} writes its keys without a Hadamard rotation: nothing to mix", v.name));
            }
            v.cache.rotated_before = Some(x.count());
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** cache rows 0 … R−1 are written with the Hadamard rotation, rows
from R on without it; queries are rotated. R counts cache rows (tokens / 4 in
V4's CSA layers). Needs a variant with a rotation.
**Stands for:** sgl-project/sglang #27705 (review): with fusion on, short
prefills store rotated indexer K and decode stores unrotated K, so one cache
mixes both.
**Expected:** rows before R score correctly, rows after R as under
`hadamard-q-only`: a needle before R survives while the unrotated rows do not
crowd it out, one after R is kept at random."#,
    },
];

/// `zero-blocks=1`: every page reads as zeros, so every logit is 0 (no
/// information at all, as the unwritten-scale makers; random-loss).
fn every_page_zero(x: Value) -> bool {
    x == Value::Count(1_000_000)
}

/// The smallest cache pool (tokens) of `offset-32bit=POOL` with a block
/// past 2^31 bytes: one block more than the first such block.
pub const MIN_32BIT_POOL: u64 = (FIRST_BLOCK_PAST_2_31 + 1) * PAGE_ROWS as u64;
/// The largest pool accepted (2^40 tokens, 8.4 PiB of indexer cache).
pub const MAX_32BIT_POOL: u64 = 1 << 40;

//! The address-space hypotheses: a compressed or pooled indexer whose
//! addresses do not reach every row it scores, from a bound set by an
//! absolute position or the deployment's geometry
//! ([`crate::score::address`]).

use super::entry::{FaultClass, Group, HypothesisInfo, Role, Value};
use crate::base::units::parse_size;
use crate::model::stack::FaultSpread;
use crate::score::address::{AddressFault, Beyond};
use crate::score::variant::PrecisionVariant;

/// The setting every address fault decides (one at a time).
const SETTING: &str = "the rows the indexer's addresses reach";

/// A bound in tokens (K/M allowed), at least 1.
fn tokens(name: &str, value: &str) -> Result<Value, String> {
    match parse_size(value) {
        Some(t) if t >= 1 => Ok(Value::Count(t)),
        _ => Err(format!("{name} needs a token position of at least 1 (K/M allowed), not {value:?}")),
    }
}

/// Sets `v`'s address fault, or says why it cannot.
fn set(v: &mut PrecisionVariant, fault: AddressFault) -> Result<(), String> {
    if !v.chunk.is_all() {
        return Err(format!("{} already hides rows by its prefill chunk (chunk-local): not with an address fault", v.name));
    }
    v.address = fault;
    Ok(())
}

pub(super) const ENTRIES: &[HypothesisInfo] = &[
    HypothesisInfo {
        name: "visible-cap=P",
        group: Group::AddressSpace,
        summary: "the indexer addresses only positions below P: rows past it never selected",
        changes: "Compressed rows wholly at or past token position P (row i with c(i+1) > P) are no candidates of the top-k; rows below P are scored and selected as before. P in tokens (K/M allowed).",
        stands_for: "vllm #56380 (GLM-5.3-Flash on gfx942: a 410-column block table at manager-block granularity addresses 410 x 32 x 4 = 52,480 token positions, max selected index 52,479 while the query sits at 160,639; recall near the end degraded); fix vllm #56381 (block tables matched to the storage page size).",
        expected: "A step in absolute position: a needle below P is kept as by a healthy indexer (fewer competitors, so at least as often), a needle past P is lost at every k unless it is in the raw window; prompts shorter than P are healthy. The onset moves with P (max_model_len, block geometry), not with k or depth alone.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::AddressSpace,
        class_of: None,
        setting: SETTING,
        role: Role::None,
        parse: Some(|value| tokens("visible-cap=P", value)),
        apply: |x, v| set(v, AddressFault::VisibleCap { tokens: x.count(), beyond: Beyond::Unreachable }),
        documented_with: None,
        doc: r#"**Changes:** the indexer can address compressed positions below token
position P only. Row i (tokens up to c·(i+1)−1) is addressable when
c·(i+1) ≤ P. What lies past P is the entry's choice:
`visible-cap=P` never selects those rows (they are no candidates, k is
capped at the addressable rows); `visible-cap-zero=P` gathers a zero scale
for them, so each scores exactly 0 and they tie (the tie rule orders them
against the rest); `visible-cap-wrap=P` reads them from the wrong pages:
row j ≥ R = ⌊P/c⌋ takes row j mod R's key, as a table whose columns wrap
would. The fault acts on the assembled scores before the top-k
(`src/score/address.rs`), so scores are the base's; the needle's rows are
judged under their own numbers, and a needle whose key is read under
another row's number is selected there and lost. A prompt of at most P
tokens is its base's, cell for cell. Acts on any key format (bf16 as fp8):
it is the table's, not the cache bytes'.
**Stands for:** vllm-project/vllm #56380 (GLM-5.3-Flash, MI325X/MI308X
gfx942): the block table was built at manager-block granularity where the
pooled-index consumer needs 128-token storage pages, so "the 410-column
table can address only 410 · 32 · 4 = 52480 token positions": the largest
selected index was 52,479 while the query sat at position 160,639;
"outside the table width, the gather masks the block-ID read and writes a
zero scale; inside the width, manager block IDs can name the wrong
physical pages". Fix vllm-project/vllm #56381 ("Match MLA block tables to
storage page size").
**Assumptions:** P counts tokens of the prompt (positions), and the
simulated query sits at the end of the context; the three choices are the
report's two mechanisms (zero scale outside, wrong pages inside) and the
clean bound (a kernel that stops at the table width). Which one a
deployment has is not pinned by the report, so each is its own entry.
**Signature:** recall falls at a context and needle position set by P,
independent of k: prompts up to P tokens healthy at every depth; in longer
prompts a needle at a position below P is kept (as healthy or better), one
past P lost at every k outside the raw window. So at a fixed context above
P recall steps in depth at P/L, and the onset moves with P (a larger
`max_model_len` or another block size moves it), not with k. Under
`visible-cap-zero` the rows past P tie at 0, so with scores mostly below 0
they crowd the cut and the needle below P is lost too.
**Cheapest discriminating test:** two needles in one long prompt, one below
and one above the suspected P, at two k: only this fault keeps the first
and loses the second at both k. Or read the largest index the indexer
returns for a long prompt: it never reaches P/c.
Tested: `src/score/address.rs` (the rows each choice reads),
`tests/address_space.rs` (healthy within P, a step at P in depth at two k,
the same at the base's contexts below P)."#,
    },
    HypothesisInfo {
        name: "visible-cap-zero=P",
        group: Group::AddressSpace,
        summary: "positions past P gathered with a zero scale: rows past it score 0",
        changes: "Compressed rows wholly at or past token position P score exactly 0 (a zero scale gathered for them) and tie with each other; rows below P as before.",
        stands_for: "vllm #56380: outside the table width the gather masks the block-ID read and writes a zero scale.",
        expected: "As visible-cap=P, except that the rows past P stay candidates at score 0: where many scores are negative they fill the top-k by the tie rule and the needle below P is lost too.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::AddressSpace,
        class_of: None,
        setting: SETTING,
        role: Role::None,
        parse: Some(|value| tokens("visible-cap-zero=P", value)),
        apply: |x, v| set(v, AddressFault::VisibleCap { tokens: x.count(), beyond: Beyond::ZeroScale }),
        documented_with: Some("visible-cap=P"),
        doc: "",
    },
    HypothesisInfo {
        name: "visible-cap-wrap=P",
        group: Group::AddressSpace,
        summary: "positions past P read from the wrong pages: row j past it reads row j mod P/c",
        changes: "Compressed row j at or past R = floor(P/c) takes the score of row j mod R (its key read from a page below P); rows below R as before.",
        stands_for: "vllm #56380: inside the table width, manager block IDs can name the wrong physical pages.",
        expected: "A needle past P is lost (its index reads another row's key); a needle below P is also read at every index congruent to it past P, so its copies compete with it and the tie rule decides.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::AddressSpace,
        class_of: None,
        setting: SETTING,
        role: Role::None,
        parse: Some(|value| tokens("visible-cap-wrap=P", value)),
        apply: |x, v| set(v, AddressFault::VisibleCap { tokens: x.count(), beyond: Beyond::WrongPages }),
        documented_with: Some("visible-cap=P"),
        doc: "",
    },
    HypothesisInfo {
        name: "block0-repeat=S",
        group: Group::AddressSpace,
        summary: "rows past a slot capacity of S tokens read physical block 0 over and over",
        changes: "Compressed rows past R = floor(S/c) (S tokens, K/M allowed) are clamped to physical block 0: row j >= R takes the score of row j mod 64 (page 0's slot); rows below R as before.",
        stands_for: "vllm #54359 and a vllm #53906 comment (GLM-5.3-Flash fp8, MI350X gfx950: 4096 pool entries written into 864 distinct slots, the gather clamps the invalid entries to block 0, so it reads physical block 0 over and over; needle missed at ~40K); fix vllm #57536.",
        expected: "Healthy up to S tokens; past S a needle is lost at every k (its index reads a block-0 row), and block 0's rows appear many times, so a needle in the first 64 rows competes with its own copies. Onset at the slot capacity, not k.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::AddressSpace,
        class_of: None,
        setting: SETTING,
        role: Role::None,
        parse: Some(|value| tokens("block0-repeat=S", value)),
        apply: |x, v| set(v, AddressFault::Block0Repeat { tokens: x.count() }),
        documented_with: None,
        doc: r#"**Changes:** the cache holds fewer slots than the request writes: rows past
R = ⌊S/c⌋ (S in tokens, K/M allowed) have no valid slot and are clamped to
physical block 0, so row j ≥ R takes the score of row j mod 64 (page 0's
slot). Rows below R are read as written. Acts on the assembled scores
(`src/score/address.rs`), any key format.
**Stands for:** vllm-project/vllm #54359 and the vllm-project/vllm #53906
comment of 2026-08-29 (GLM-5.3-Flash fp8, 8×MI350X gfx950): the ROCm
indexer backend advertised a block size the kernels do not read, so "4096
pool entries are written into 864 distinct slots — the indexer cache
overwrites itself, and `cp_gather` clamps the resulting invalid entries to
`safe_block_id = 0`, so it reads physical block 0 over and over"; needle
retrieval missed at ~40K before the fix (vllm-project/vllm #57536).
**Assumptions:** the overwriting within the capacity is left out (the
rows below R are read as written); S is the capacity in prompt tokens
(slots × ratio).
**Signature:** an onset at the slot capacity: prompts up to S tokens
healthy; past it a needle beyond S is lost at every k outside the raw
window, and block 0's 64 rows appear again every 64 rows, so a needle in
the first 64 rows ties with its own copies. Recall at a fixed context
steps in depth at S/L, like `visible-cap`, but block 0's repeated rows
crowd the cut, so a needle below S is lost more often than under
`visible-cap`.
**Cheapest discriminating test:** the selected indices of one long
prompt: every index past S/c reads a key equal to one in block 0 (a
capture's logits repeat with period 64 past S/c).
Tested: `src/score/address.rs`, `tests/address_space.rs`."#,
    },
    HypothesisInfo {
        name: "slot-stride-half",
        group: Group::AddressSpace,
        summary: "compressed rows written with half the slot stride: half the slots unwritten, rows read at twice their index",
        changes: "The writer steps half a page per table column: written row 32q+s lands in reader row 64q+s (s < 32), so reader slots 32 ... 63 of every page hold unwritten memory (score 0) and each written row is read at about twice its index.",
        stands_for: "Lvllm #109 (GLM-5.3-Flash NVFP4, A100 TP4): get_compressed_slot_mapping used kernel_block_size // compress_ratio = 16 as the column spacing where the sliced table needs 32; write coordinates wrong but no crash below ~131K tokens, every multi-chunk request silently degraded.",
        expected: "Beyond the first 32 rows every needle is read under another index: lost at every depth and k outside the raw window once the context exceeds k·c + W, while half the rows tie at 0. No onset position but 32 rows.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::Layout,
        class_of: None,
        setting: SETTING,
        role: Role::None,
        parse: None,
        apply: |_, v| set(v, AddressFault::StrideHalf),
        documented_with: None,
        doc: r#"**Changes:** the writer's compressed slot mapping steps half a page per
block-table column: written row i lands in page ⌊i/32⌋, slot i mod 32, so
reader row 64q + s holds written row 32q + s for s < 32 and unwritten
memory (score 0) for s ≥ 32. Rows written past the table's width would land
outside the request (the incident's crash); the reader never reaches them.
Acts on the assembled scores (`src/score/address.rs`), any key format.
**Stands for:** guqiong96/Lvllm #109 (GLM-5.3-Flash NVFP4, 4×A100, TP4):
`get_compressed_slot_mapping` used `kernel_block_size // compress_ratio`
= 64 // 4 = 16 as the column spacing where the sliced table needs
128 // 4 = 32; below about 131K tokens the write coordinates were wrong
without a crash ("DSA index silently degraded for all multi-chunk
requests > 1,024 tokens"), above it a crash. The simulator's pages hold 64
rows, so half a page is 32.
**Signature:** every row past the first 32 is read under about twice its
index: a needle is lost at every depth and every k once the context
exceeds k·c + W (shorter contexts select every row), half the rows tie at
0; the first 128 tokens and the raw window are unaffected. Looks like a
layout fault (`pages-swapped`) but acts on bf16 keys too.
**Cheapest discriminating test:** a capture of the indexer's logits for a
prompt of a few pages: every second run of 32 rows reads exactly 0.
Tested: `src/score/address.rs`, `tests/address_space.rs`."#,
    },
    HypothesisInfo {
        name: "workspace-clamp=W",
        group: Group::AddressSpace,
        summary: "candidate rows past a workspace of W tokens clamped to its last row",
        changes: "Compressed rows past R = floor(W/c) (W tokens, K/M allowed) are clamped to the workspace's last row: row j >= R takes row R-1's score; rows below R as before.",
        stands_for: "vllm #55221 (GLM-5.3-Flash NVFP4, H200): the indexer prefill workspace was sized in tokens, not compressed states; when a chunk's compressed total exceeded it, k_quant_full[: chunk.total_seq_lens] clamped silently.",
        expected: "Healthy up to W tokens; past W a needle beyond W is lost (its index reads row R-1) and the rows past R tie at row R-1's score: where that score is high they fill the top-k by the tie rule.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::AddressSpace,
        class_of: None,
        setting: SETTING,
        role: Role::None,
        parse: Some(|value| tokens("workspace-clamp=W", value)),
        apply: |x, v| set(v, AddressFault::WorkspaceClamp { tokens: x.count() }),
        documented_with: None,
        doc: r#"**Changes:** the candidate rows are gathered into a workspace of W tokens'
worth of rows (R = ⌊W/c⌋); rows past it are clamped silently to its last
row, so row j ≥ R takes row R − 1's score. Rows below R as written. Acts on
the assembled scores (`src/score/address.rs`), any key format.
**Stands for:** vllm-project/vllm #55221 (comment of 2026-09-06;
GLM-5.3-Flash NVFP4, 2×H200 NVL): the indexer prefill workspace was sized
in tokens instead of compressed states, and "if a chunk's compressed total
exceeded the buffer, `k_quant_full[: chunk.total_seq_lens]` clamps
silently"; fixed by dividing by the pool ratio.
**Assumptions:** a clamp of the index (the last row repeated), not a
truncation; `visible-cap=P` is the truncation.
**Signature:** onset at W: prompts up to W healthy; past W a needle beyond
W is lost at every k outside the raw window, and the rows past W all tie
at row R − 1's score: when that row scores high they crowd the cut and
the needle below W is lost too, so at one context the loss depends on row
R − 1's score, from trial to trial.
**Cheapest discriminating test:** the logits of one long prompt: a run of
identical scores from row W/c to the end.
Tested: `src/score/address.rs`, `tests/address_space.rs`."#,
    },
    HypothesisInfo {
        name: "chunk-stale",
        group: Group::AddressSpace,
        summary: "rows of earlier prefill chunks scored from a stale state (other rows' scores)",
        changes: "With a prefill chunk of N tokens, in a prompt that straddles a chunk boundary the rows completed in chunks before the query's (rows i < F, F the query chunk's first row) take the scores of other earlier rows: row i reads row (i + ceil(F/2)) mod F; the query's own chunk is scored as before.",
        stands_for: "ds4 #923 (GLM-5.3-Flash, gfx1151: the selected-multihead kernel's output differs once it fires for a second consecutive chunk, context above ~6144 with 2048-token chunks, diffs up to ~1.5) and vllm #55270 (two decompositions of the paged logits differ whenever a request's rows straddle a split boundary).",
        expected: "Prompts within one chunk healthy; in longer prompts a needle in an earlier chunk is kept about as often as a random row (its index reads another row), one in the query's chunk as healthy: the onset follows the chunk size, not P or k.",
        requires: Some("a prefill chunk (--prefill-chunk N, or an observation column prefill_chunk)"),
        layers: FaultSpread::Shared,
        class: FaultClass::Schedule,
        class_of: None,
        setting: SETTING,
        role: Role::None,
        parse: None,
        apply: |_, v| set(v, AddressFault::ChunkStale),
        documented_with: None,
        doc: r#"**Changes:** with a prefill chunk of N tokens (`--prefill-chunk N`, or a
row's `prefill_chunk` column in `diagnose`), a prompt longer than N
straddles a chunk boundary: the rows completed in chunks before the
query's (rows i < F, F = ⌊(L−1)/N⌋·N / c as `chunk-local` computes it) are
scored from a stale state. What the stale state holds is not in the
reports; the simulator's choice keeps the score distribution and breaks
the link to the row: row i takes row (i + ⌈F/2⌉) mod F's score (no row
keeps its own). The query's own chunk is scored as before. Unlike
`chunk-local` the earlier rows stay candidates.
**Stands for:** antirez/ds4 #923 (comment of 2026-09-06; GLM-5.3-Flash,
gfx1151): the selected-multihead kernel's output "is non-deterministic
once it fires for a 2nd consecutive chunk (i.e. context above ~6144 with
the default 2048-token chunk) … diffs up to ~1.5"; vllm-project/vllm
#55270 (GLM-5.3-Flash, SM100, MTP): paged logits launched without the
varlen indices, and "the two decompositions differ whenever a request's
rows straddle a 256-state split boundary (1024 tokens at `index_kpool=4`)".
Both are selection differences at a boundary; neither report measured
recall.
**Signature:** prompts within one chunk healthy; in longer ones a needle
before the query's chunk is kept about as often as a random row (about k
over the candidate rows), one inside it as by a healthy indexer. The onset
follows the chunk size (change `prefill_step_size` alone and it moves),
not k; against `chunk-local` the earlier needle is kept now and then
(it is a competitor read elsewhere, not hidden) and the last chunk's
needle has the full set of competitors.
**Cheapest discriminating test:** one prompt above N with the needle in
the first chunk, run with two chunk sizes (one above the prompt): only a
chunk fault moves with the chunk size; then a k large enough to keep a
random row's share tells `chunk-stale` (recall about k over the rows) from
`chunk-local` (0).
Tested: `src/score/address.rs`, `tests/address_space.rs`."#,
    },
];

//! The selection hypotheses: which rows the top-k sees and how it breaks
//! ties, in which layers and prompts the faults act.

use super::entry::{FaultClass, Group, HypothesisInfo, Role, Value};
use crate::base::units::parse_size;
use crate::model::stack::FaultSpread;
use crate::score::selection::{NanOrder, TieRule};
use crate::score::variant::{ChunkVisibility, LayerSubset};

pub(super) const ENTRIES: &[HypothesisInfo] = &[
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
        class_of: None,
        setting: "the layers the faults act in",
        role: Role::None,
        parse: Some(|value| {
            LayerSubset::parse_range(value).map(Value::Layers)
        }),
        apply: |x, v| {
            v.layers = x.layers();
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** whole-model recall only: the variant's other hypotheses act in
some indexer layers of the stack, every other layer selects as the
fault-free reference does. `layers=` takes a layer `N`, a range `A..B` (B
excluded) or `A..` (to the last); layers are numbered 0 … L−1, 0 the
simulated one. `layer-share=F` marks a share F of the layers, spread evenly
(layer l is faulty when ⌊(l+1)F⌋ > ⌊lF⌋). Needs a `[stack]` and the quantile
needle (refused otherwise); per-layer recall is that of a faulty layer.
**Stands for:** ROCm/ATOM #1466 (per-layer scale views aliased onto layer
0's, so layers ≥ 1 read zero scales: `layers=1..`); ml-explore/mlx-lm #1453
with exo #2208 (GLM-5.2's 57 "shared" layers of 78 ran randomly initialised
indexers: `layer-share=0.73`); tenstorrent/tt-metal #53637 (wrong on every
rank but the first).
**Expected:** a healthy layer that keeps the needle rescues the model, so a
fault in all but one layer shows only where the healthy layers' own recall
falls; `tests/stack.rs`,
`a_fault_in_some_layers_is_rescued_by_the_healthy_ones`, checks this against
the all-layer fault and the healthy model. How the layers combine:
[MODEL.md, "Faults in some layers"](MODEL.md#faults-in-some-layers-layersset-layer-sharef).
**`layers=reusers`** puts the fault in the layers of the plan that should
reuse another layer's selection (`s`, `sN` in `stack.layers`): each selects
on its own with the fault, the indexer layers stay healthy. It stands for
IndexShare done wrong: ml-explore/mlx-lm #1453 with exo-explore/exo #2208
(randomly initialised indexers on GLM-5.2's 57 shared layers, which ship
no indexer weights: `row-shift+layers=reusers`) and ikawrakow/ik_llama.cpp
#2063 (an independent top-k on every layer). A fault in an indexer layer
reaches every layer that reuses its selection
(`tests/stack.rs::a_fault_in_a_reused_layer_reaches_every_layer_that_reuses_it`).
**What a faulty layer does to the answer** is the plan's lost-layer harm
(MODEL.md, "What a faulty layer does to the answer"): with c = 0 (the
DeepSeek presets) a healthy layer that keeps the needle rescues the model
as above; with GLM-5.2's c = 1 every faulty layer that loses the needle
where a correct selection keeps it costs the answer. Fitted to mlx-lm
#1453's rows, the rule reproduces the loss growing with length from 4K on
but not its onset at 2.1K–2.6K: a random selection of 2,048 of 2,649 rows
rarely drops all four rows of the needle, and the damage it does to the
local context has no row in the simulator."#,
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
        class_of: None,
        setting: "the layers the faults act in",
        role: Role::None,
        parse: Some(|value| {
            match value.parse::<f64>() {
                Ok(f) if f > 0.0 && f <= 1.0 => Ok(Value::Layers(LayerSubset::Share { ppm: (f * 1e6).round() as u32 })),
                _ => Err(format!("layer-share=F needs a share of layers above 0 and at most 1, not {value:?}")),
            }
        }),
        apply: |x, v| {
            v.layers = x.layers();
            Ok(())
        },
        documented_with: Some("layers=SET"),
        doc: "",
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
        class_of: None,
        setting: "the logits row a query selects from",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.position.query_row_shifted = true;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the variant selects by another query's logits row: the scores
of the same keys under a different query and head weights, a fresh draw of
the generative model's query (`TrialHaystack::draw` from the trial seed
derived with `tag::ROW_SHIFT`), with none of the alignment the needle has
with the trial's own query. Set in `PositionOverride::query_row_shifted`
(which query position's row is read).
**Assumption:** the row read is another token's query drawn as the model
draws queries (its own head weights, and its own content subspace when
`[haystack]` structure is on, as for another request). That is the smallest
mechanism that the field reports fit; a row of the same prompt one token
later would share more with the needle's query, so this is the pessimistic
end. The closed-form prediction and the sampling estimators do not model it
(they fall back to or refuse as for other selection faults).
**Stands for:** vllm-project/vllm #42169 (DeepGEMM pads logits to 256 columns
and slices; the persistent top-k used `logits.size(1)` as the stride, so rows
were read with the wrong stride), sgl-project/sglang #12457
(`seqlens_expanded`), ROCm/aiter #1815 (`stride(0)` vs `stride(1)`, out of
bounds for batch > 64). In the field it shows mostly as MTP acceptance drops
and shifted output lengths, not as lost needles.
**Signature:** the needle is ranked as a haystack row, at every depth, for
every key format (bf16 included); contexts within k·c + window select every
row and are unaffected. Measured (32K, 50 %, 100 trials): 0.21 (fp8) and 0.22
(bf16) at k 512, 0.35 and 0.36 at k 1024. Above the random share
(512/8192 = 0.06); a likely reason, not verified, is that the needle's key is
longer than a haystack row's, so any query ranks it high more often.
**Cheapest discriminating test:** batch size 1 and no MTP: the wrong stride
needs other rows to read from; or compare the selected indices of two
queries of one batch (`check`'s `row-shift` transform on a capture).
Tested: `tests/row_shift.rs` (at strength 0, where the needle row is a
haystack row, the other query keeps it as often as the trial's own within
99.9 % intervals; at strength 30 the healthy query finds it and the other
does not)."#,
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
        class_of: None,
        setting: "which rows chunked prefill lets the query see",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            if !v.address.is_none() {
                return Err(format!("{} already has an address fault: chunk-local not with it", v.name));
            }
            v.chunk = ChunkVisibility::OwnChunk;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** with a prefill chunk of N tokens (`--prefill-chunk N`, TOML
`[geometry] prefill_chunk`, or a row's `prefill_chunk` column in
`diagnose`), the query at position L−1 belongs to the chunk that starts at
C = ⌊(L−1)/N⌋·N, and only rows completed within that chunk are candidates:
row i (tokens up to c·(i+1)−1) when c·(i+1) > C, i.e. i ≥ ⌊C/c⌋
(`CompressionGeometry::chunk_first_row`). Earlier rows are not scored low;
they are not there: k is capped at the chunk's row count, ties keep each
row's own number, and the raw window still applies. Scores are unchanged,
so the variant shares them with its base (`PrecisionVariant::chunk`,
applied in `TrialSpec::judge_variant`). Selection fidelity is left out for
such variants (their top-k is over fewer rows than the reference's).
**Assumptions:** (1) the compressor carries its partial row (and, with
overlap, the previous half) across chunks, so a row belongs to the chunk in
which its last token arrives; the incident's instrumented counts agree (486
rows on a last chunk of 1,945 tokens from offset 4096: rows 1024 … 1509).
Hence N need not be a multiple of the compress ratio. (2) The simulated
query is the last prompt token's, in the last chunk; in mlx-lm the prompt's
last token ran as a one-token decode step whose compressor emitted no rows,
so the real indexer was inert there and the question's tokens (last prefill
chunk) carried the selection.
**Stands for:** ml-explore/mlx-lm PR #1189 (DeepSeek-V4 support; comment of
2026-08-16 by its author, instrumenting `generate_step` with
`prefill_step_size=2048` on a 6,042-token prompt: `S=2048 offset=2048
indexer_rows=512 pool_rows=1024`, `S=1945 offset=4096 indexer_rows=486
pool_rows=1510`, `S=1 offset=6041 indexer_rows=0`): the indexer's pool was
not kept in the cache, so on the final chunk it could emit only indices
below 486 while the needle sat at pool row ~755 ("0 of 42"), and runs that
survived had the needle in the last chunk. Fixed by moving the indexer pool
into the cache with unconditional accumulation. Read from the PR thread
(its public text), not from mlx-lm's code.
**Signature:** not random and not smooth: recall is 0 for a needle before
the query's chunk and outside the raw window, at every k and every key
format (bf16 as much as fp8), and at least the healthy recall for a needle
inside it (fewer competitors; at k ≥ the chunk's rows, 1). So recall
jumps with depth at 1 − ((L−1) mod N + 1)/L, and at a fixed depth it
saw-tooths with L: just past a multiple of N the query's chunk is a few
tokens and almost every needle is lost. Measured (default preset,
`--precisions bf16,bf16+chunk-local --prefill-chunk 2048 --contexts
6042,8192 --depths 10,50,75,95 --topk 512,1024 --trials 40`): bf16 40/40
everywhere; chunk-local 0/40 at depths 10 and 50, 40/40 at 75 and 95 for
6,042 tokens (the chunk starts at 4096, 68 % of the context); at 8,192
tokens (the query's chunk starts at 6144, 75 %) 0/40 at 10 and 50. At k 1,
depth 95, seed 5: chunk-local keeps 26/30, healthy 16/30.
**Cheapest discriminating test:** one context above N with the needle in
the last chunk and again in the first: chunk-local keeps the first and
loses the second at any k; a scramble or random loss loses both alike, and
all-zero logits with trailing rows kept (mlx-lm #1454) keep only the last
k rows. Or change the chunk size (`prefill_step_size`) alone: nothing else
moves with it. Instrumented: the indexer's row count per call against the
pool's (`indexer_rows` vs `pool_rows`).
Tested: `tests/chunked_prefill.rs` (healthy cells identical with and
without chunks; earlier chunks 0, last chunk ≥ healthy and 1 at k 512; the
window reaching into the previous chunk), `tests/cli.rs`
(`bad_prefill_chunks_say_what_is_allowed`), `tests/incidents.rs`
(`mlx_chunked_prefill`). Not modelled by the prediction or tail sampling
(refused there, as row-shift is). Outputs report the chunk's rows as
`candidate_rows` and k_eff ≤ them. Whole-model recall treats it as acting
in every layer (a needle with no visible row is absent in all of them), so
`layers=SET` / `layer-share=F` with it are refused."#,
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
        class_of: None,
        setting: "the prompts the faults act in",
        role: Role::LengthGate,
        parse: Some(|value| {
            match parse_size(value) {
                Some(t) if t >= 1 => Ok(Value::Count(t)),
                _ => Err(format!("longer-than=T needs a prompt length of at least 1 token (K/M allowed), not {value:?}")),
            }
        }),
        apply: |x, v| {
            v.longer_than = x.count();
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** in a context of at most T tokens (K/M allowed) the variant is
its base, the name before the first `+`: it takes the base's outcome in
every cell, trial by trial, on the same haystacks
(`TrialSpec::gate_by_length`); in longer contexts its other hypotheses act
as written. It says *when* a fault acts, not *what* it does: the content is
the other hypotheses'. `diagnose` tries the gated form of every fault by
itself where the rows have two or more prompt lengths, T marginal over the
observed lengths (OBSERVATIONS.md, "Gated forms"). The base must be in the same sweep (refused with one
line otherwise), as must the full estimator (tail sampling and the
prediction refuse it, as they refuse row-shift); not with `needle=M`.
**Stands for:** the stale sub-chunk gather of vllm-project/vllm #40018
(GLM-5.1-FP8 on gfx950, `ROCM_AITER_MLA_SPARSE`): garbage only above ~20K
prompt tokens, because the indexer's prefill split into sub-chunks and the
sub-chunks after the first scored keys from a workspace that no longer held
this prompt's keys. What the keys were is not pinned (the fix PRs #46478
and #40049 disagree), so the content is a choice the user makes and can
compare: `+row-shift+longer-than=20K` (keys unrelated to the prompt: the
needle ranked as noise) or `+zero-blocks=1+longer-than=20K` (keys read as
zeros: every logit ties, kept as the tie rule says). Where the split falls
is not pinned either (see "Field classes expressed only in part" below
for the arithmetic that does not fit): T is the user's, e.g. the shortest
prompt seen to fail.
**Class:** `schedule` for any composite with it (unless it is also a layer
subset).
**Signature:** a step in context length: healthy up to T, then the gated
fault's signature at every depth; bf16 keys are hit as much as fp8.
Measured (default preset, `--contexts 8K,16K --topk 512 --precisions
fp8-fp32scale,fp8-fp32scale+row-shift,fp8-fp32scale+row-shift+longer-than=12K
--trials 60`, depth 50 %): per-layer recall 1.000/1.000 (base),
0.567/0.350 (row-shift), 1.000/0.350 (gated), whole-model 1.000/0.767 for
the gated variant.
**Cheapest discriminating test:** two prompts straddling the suspected T
with the same needle: everything else in the catalogue moves smoothly
with length. Or change the engine's split budget
(`VLLM_SPARSE_INDEXER_MAX_LOGITS_MB`) alone.
Tested: `tests/chunked_prefill.rs::a_length_gate_is_the_base_up_to_t_and_the_fault_beyond`
(cells equal to the base's at 8K and to the fault's at 16K, field by
field; the refusals)."#,
    },
    HypothesisInfo {
        name: "needle=M",
        group: Group::Selection,
        summary: "the needle's median exceedance times M (not a fault: how hard the needle is)",
        changes: "Under the quantile needle, the needle is placed at a drawn exceedance whose median is M times the scenario's (the same draws, shifted by log10 M), on the same haystacks as the variant without it; every other part of the variant is unchanged.",
        stands_for: "Not a fault: how hard the tested needle was is not known (docs/OBSERVATIONS.md, \"What diagnose does not know\"); diagnose averages each candidate over needle=0.5, needle=2 and more beside the scenario's own needle, in one simulation.",
        expected: "M < 1 makes the needle easier (recall up), M > 1 harder; identical, bit for bit, to the variant without it in a scenario whose needle.exceedance is M times larger.",
        requires: Some("the quantile needle (needle.unit = \"quantile\") and the full estimator; M times the median exceedance below 1"),
        layers: FaultSpread::Shared,
        class: FaultClass::Healthy,
        class_of: None,
        setting: "the needle's median exceedance",
        role: Role::None,
        parse: Some(|value| {
            match value.parse::<f64>() {
                Ok(m) if m.is_finite() && m > 0.0 && m <= 1e6 => Ok(Value::Real(m)),
                _ => Err(format!("needle=M needs a positive multiple of the needle's median exceedance, at most 1e6, not {value:?}")),
            }
        }),
        apply: |x, v| {
            let m = x.real();
            if m == 1.0 {
                return Err("needle=1 changes nothing".to_string());
            }
            v.needle_multiple = m;
            Ok(())
        },
        documented_with: None,
        doc: r#"Not a fault: the variant's needle, M times harder (M > 1) or easier than
the scenario's, on the same haystacks.
**Changes:** under the quantile needle (docs/MODEL.md, "The quantile
needle"), the needle's drawn exceedance has median M·u instead of u: the
same prompt, layer and token draws, shifted by log10 M, so its placement
(and, in whole-model recall, every layer's and token's draw) moves; the
haystack, the queries and every other part of the variant are unchanged.
The haystack is scored once for a variant with and without it (their
scores are shared as twins); only the needle's rows are keyed again.
Refused under the strength unit and where M·u ≥ 1; the prediction and tail
sampling do not model it.
**Stands for:** how hard the tested needle was, which diagnose does not
know (OBSERVATIONS.md, "What diagnose does not know"): it averages each
candidate's likelihood over `needle=0.5`, `needle=2` and the other
multiples beside the scenario's own needle, in one simulation.
**Expected:** a variant with `needle=M` gives, bit for bit, what the
variant without it gives in a scenario whose `needle.exceedance` is M
times larger (`tests/needle_multiple.rs`); recall falls as M grows."#,
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
        class_of: None,
        setting: "the tie rule",
        role: Role::TieOrder,
        parse: None,
        apply: |_, v| {
            v.selection.tie_rule = Some(TieRule::LowestIndex);
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** this variant orders equal scores by lowest (highest) row index,
whatever the scenario's `--tie-rule`.
**Stands for:** the tie order of every top-k kernel is undocumented (reference
notes, section 1); kernels that scan rows from the start or from the end.
**Expected:** no effect without ties; with ties (bf16 logits, unwritten
scales) recall falls (rises) with depth. `--tie-audit on` reports, on the
same trials, recall under both rules beside random and truncated, and how
many rows tie at the cut (`ties.csv`; MODEL.md, "Tie audit")."#,
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
        class_of: None,
        setting: "the tie rule",
        role: Role::TieOrder,
        parse: None,
        apply: |_, v| {
            v.selection.tie_rule = Some(TieRule::HighestIndex);
            Ok(())
        },
        documented_with: Some("ties-lowest"),
        doc: "",
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
        class_of: None,
        setting: "the NaN order",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.selection.nan_order = NanOrder::First;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** NaN logits rank above every number (nan-first) or below every
number (nan-last), whatever their sign bit; NaNs tie with each other and the
tie rule orders them.
**Default:** nan-first, what `torch.topk` does (it treats NaN as the largest
value), and the DeepSeek reference selects with `torch.topk`. The sign of a
NaN produced by arithmetic differs between x86 and ARM, so no rule may depend
on it if results are to be the same on every machine; `total_cmp` (NaN by
sign) is therefore not used for NaN.
**Stands for:** nan-last: a kernel comparing with `>`, where a NaN never wins.
Hypothetical.
**Expected:** with NaN logits (unwritten NaN scales), nan-first fills the
top-k with NaN rows (ordered by the tie rule), nan-last never selects them."#,
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
        class_of: None,
        setting: "the NaN order",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.selection.nan_order = NanOrder::Last;
            Ok(())
        },
        documented_with: Some("nan-first"),
        doc: "",
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
        class_of: None,
        setting: "the multiple k is rounded to",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.selection.topk_multiple = Some(64);
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the engine selects floor(k/64)·64 rows (100 → 64, 512 → 512,
63 → 0: nothing).
**Stands for:** FlashMLA's Blackwell kernels require top-k to be a multiple
of 64 (reference notes, section 2); an engine rounding down to satisfy it is
hypothetical.
**Expected:** no effect for the models' k (512, 1024, 2048); for other k, the
recall of the rounded k."#,
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
        class_of: None,
        setting: "the engine's k",
        role: Role::None,
        parse: Some(|value| {
            match parse_size(value) {
                Some(n) if n >= 1 => Ok(Value::Count(n)),
                _ => Err(format!("topk=N needs a positive number of rows, not {value:?}")),
            }
        }),
        apply: |x, v| {
            v.selection.topk = Some(x.count());
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the engine selects N rows whatever k the sweep configures.
**Stands for:** ROCm/ATOM PR #1591, a bridge that hard-coded index_topk 1024
while V4-Flash uses 512 (invisible below about 2K tokens); the motivating
incident's index_topk override to 1024.
**Expected:** identical to the base while every row is selected (context ≤
k·ratio + window, 2,176 tokens for k 512 in V4-Flash), then the recall of
k = N."#,
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
        class_of: None,
        setting: "the engine's window",
        role: Role::None,
        parse: Some(|value| {
            parse_size(value).map(Value::Count).ok_or_else(|| format!("window=N needs a number of tokens ≥ 0, not {value:?}"))
        }),
        apply: |x, v| {
            v.selection.window = Some(x.count());
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the raw sliding window the query always attends is N tokens
instead of the scenario's.
**Stands for:** a window size mismatch (V4 uses 128, reference code).
Hypothetical.
**Expected:** only needles in the last tokens are affected: a smaller window
loses those that lay in the window; the coverage limit k·ratio + window moves."#,
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
        class_of: None,
        setting: "the bits the selector compares",
        role: Role::None,
        parse: Some(|value| {
            match value.parse::<u32>() {
                Ok(b) if (1..=32).contains(&b) => Ok(Value::Count(u64::from(b))),
                _ => Err(format!("tie-truncate=B needs a number of bits from 1 to 32, not {value:?}")),
            }
        }),
        apply: |x, v| {
            v.selection.coarse_bits = Some(x.count() as u32);
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the selector compares each score's order key cut to its top B
bits (1 … 32; 16 = sign, exponent and 7 mantissa bits, a bf16 bin), so the
rows of the bin that holds the k-th score tie and fall in the tie order (the
scenario's; random by default, the kernel's arrival order).
**Stands for:** sgl-project/sglang #35257 (the DSA top-k v2 kernel keeps
whichever elements of the threshold's coarse bin arrive first); jundot/omlx
#2243 counts 47–180 exact bf16 ties at the 2048th score at 131K.
**Expected:** harmless while the needle sits bins above the cut; a needle in
the threshold bin is kept by chance; B = 32 changes nothing. The tie audit's
`recall_truncated` is this hypothesis at B = 15 (sglang's 12-bit fp16 bins)
on every variant of a sweep, and its tied-row counts are the exact-tie side
of the same question (MODEL.md, "Tie audit")."#,
    },
];

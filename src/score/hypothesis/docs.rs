//! docs/HYPOTHESES.md, generated from the catalogue: the text around the
//! entries lives here, each entry's section in its entry.

use super::catalogue::CATALOGUE;
use super::entry::{FaultClass, Group, HypothesisInfo};
use crate::model::stack::FaultSpread;

/// What comes before the groups: how hypotheses are written and composed,
/// and the paged key cache they act on.
const PREAMBLE: &str = r#"A hypothesis is a named change to the pipeline, applied on top of a precision
variant with `+`: `--precisions fp8-fp32scale,fp8-fp32scale+stale-scale,bf16`.
Several compose (`fp8+no-hadamard+scale-floor`); parametrized ones take `=`
(`fp8+topk=1024`, `fp8+window=64`, with K/M suffixes). The result is an
ordinary precision variant named as written, so every output, chart and the
paired comparison against the sweep's first variant work unchanged.
`dsa-recall hypotheses` lists them; `dsa-recall hypotheses show NAME` (or
`--long`) prints the full entry. This file is generated from the
catalogue's entries in `src/score/hypothesis/` (`dsa-recall hypotheses
--markdown`); edit the entries, not this file. `dsa-recall diagnose` ranks the whole catalogue
on measured counts ([OBSERVATIONS.md](OBSERVATIONS.md)).

A hypothesis changes how the pipeline computes, never a recall number: what
it does to recall (per-layer selection recall: one decoding query, one
indexer layer; [MODEL.md, "What is measured"](MODEL.md#what-is-measured))
is for the simulation to show. The "expected" paragraphs
below are our predictions, written before running the sweeps; they are to be
checked, not quoted as results. What the sweeps then showed, hypothesis by
hypothesis against four public incidents, is in [FINDINGS.md](FINDINGS.md);
every hypothesis is also checked to change what it claims through a whole
trial in `tests/physics.rs` and `src/numerics/key_cache.rs`'s tests.

**Across layers.** Each entry also says whether the fault acts identically
in every layer of the model (shared code, cache layout or kernel) or
independently in each (a race, per-layer memory); whole-model recall
treats the two differently ([MODEL.md, "Faults across
layers"](MODEL.md#faults-across-layers-stackfault_layers)). Every entry
below is **shared**: each is a deterministic change to code that every
layer runs. `--fault-layers independent` (or `[stack] fault_layers`)
treats them all as independent, to see which conclusions depend on it;
`hypotheses show NAME` prints the entry's setting.

Rules of composition:

- A name that is a built-in or custom variant as a whole is that variant
  (custom names may contain `+`); otherwise the part before the first `+` is
  the base variant and every later part a hypothesis.
- Two hypotheses that decide the same setting (e.g. `ties-lowest` and
  `ties-highest`, or `scale-offset` and `scale-unwritten-zero`) are refused.
- A hypothesis that would change nothing about its base is refused
  (`bf16+no-hadamard`: bf16 has no rotation; `fp4+logits-bf16`: fp4 already
  has bf16 logits), except `nan-first`, which spells the default out.
- The numerics and cache hypotheses that touch scales or fp8 codes need e4m3fn
  keys with one scale per row (`fp8`, `fp8-fp32scale`, or a custom variant
  like them); other bases are refused with a one-line error.

Sources are the public reference code and engines behind docs/NUMERICS.md
(its *numerics §N*) unless named; **hypothetical** marks a
mechanism nobody has reported, which we model because it is plausible and
would be cheap to rule out.

## The paged key cache (`src/numerics/key_cache.rs`)

Engines keep indexer keys in pages of 64 rows: the rows' fp8 codes, then
their scales (sglang/vLLM: 64 × 128 code bytes, then 64 fp32 scales, 132
bytes per token). The cache hypotheses act in three fixed steps on each chunk
of keys as it is written (`PrecisionVariant::store_keys`):

1. **write**: which rows share a scale, how the scale is rounded, a stale
   scale, and the fp8 flavour of the writer;
2. **memory**: what the scale words hold when read;
3. **read**: the byte layout the page is read with (`layout-*`: codes and
   scales encoded to the page's bytes and read back), which slot a row is
   read from, and the flavour its codes are decoded as.

Needle rows are written like any other row, so every fault hits them too.
Without a fault `store_keys` returns exactly what the key pipeline returns
(tested bit for bit for every built-in variant).

Assumptions shared by the cache hypotheses:

- **assumption**: memory never written reads as zero (codes 0, scale 0), as
  a zero-initialised allocation does. It matters where a reader reaches past
  the last written row of a partial page (the last page of a context).
- **assumption**: ReLU is `fmax(x, 0)` as in the scorer (`src/score/indexer.rs`),
  which returns 0 for a NaN dot product, as CUDA's `fmaxf` does. So a NaN key
  element silences that head for that row rather than poisoning the logit,
  while a NaN scale (applied after the head sum) makes the logit NaN.
  `torch.relu` would propagate the NaN instead; a kernel that does that turns
  `e4m3fnuz-read` into a NaN-logit hypothesis."#;

/// What comes after the groups: architectures and field classes that are
/// not one hypothesis.
const EPILOGUE: &str = r#"## Field architectures: the two-level candidate indexer

**V4.1's two-level candidate indexer** (vllm-project/vllm #56254,
sgl-project/sglang #38944, tokenspeed #1689) is an architecture, not a
fault, so it is a setting of the whole-model stack rather than a
variant: `--candidate-source-layer 20 --candidate-blocks 2048
--candidate-block-rows 8` (docs/MODEL.md, "Two-level candidate indexer",
with the config it is read from). Its signature: nothing changes while
2,048 blocks of 8 hold every row (64K tokens at ratio 4); beyond, a fault
in the source layer alone (`layers=N`, N the source's indexer-layer
number) takes every later indexer layer with it, where without the stage
the other layers rescue the needle. Cheapest test: per-layer captures of
a source and a later layer at a context above 64K; a later layer whose
picks fall outside the source's blocks is not running the stage.

## Field classes expressed only in part

Every class of the field's public incidents (the threads cited in this
file and in FINDINGS.md) can now be written: chunked-prefill visibility
(ml-explore/mlx-lm #1189) is `chunk-local` above, V4.1's two-level
indexer a stack setting (above). One is expressed only in part, and
what the simulator leaves to the user is said here rather than guessed.

- **Stale sub-chunk gathers** (vllm-project/vllm #40018, fix PR #46478:
  the ROCm `ROCM_AITER_MLA_SPARSE` prefill loop over indexer sub-chunks
  ignored `skip_kv_gather` and re-gathered fp8 keys into a freshly sliced
  workspace view, so the sub-chunks after the first scored stale or
  uninitialised keys; garbage above ~20K prompt tokens) can now be written
  as a length-gated composite (`longer-than=T` above), with the two things
  no report pins left to the user: what the stale keys hold (`row-shift`:
  unrelated to the prompt; `zero-blocks=1`: zeros) and where the split
  falls (T). What the simulator does not do is derive T: the sub-chunk
  split depends on `VLLM_SPARSE_INDEXER_MAX_LOGITS_MB` and the query
  count, which `split_indexer_prefill_chunks` decides and the project has
  not read. If that budget caps queries × keys × 4 bytes (an unverified
  reading), one L-token prompt splits once 4 L² exceeds 512 MiB, from about
  11.6K tokens, where the report sees garbage from ~20K; and the
  reporter's 8 GiB budget made it worse (23K), which a sub-chunk split
  cannot explain. The two fix PRs also disagree on what the keys were:
  #46478 says each later sub-chunk re-gathered into a freshly sliced view
  "with a different size"; #40049 says the path gathered into fresh
  `torch.empty` buffers that other work reused during CUDA graph replay (so
  the keys are whatever that memory then held); the path later moved to
  shared workspace slices (#41002). So the gate is built, the incident's
  own numbers are not reproduced, and `diagnose` does not propose it by
  itself (name it with `--hypotheses`). (ml-explore/mlx-lm #1454, all-zero
  scores that keep the trailing positions, is `zero-blocks=1+ties-highest`
  or `scale-unwritten-zero+ties-highest` today.)"#;

/// A group's heading and the text before its first entry.
fn group_heading(g: Group) -> (&'static str, &'static str) {
    match g {
        Group::Numerics => ("Numerics", r#""#),
        Group::CacheLayout => ("Cache layout", r#""#),
        Group::Selection => (
            "Selection",
            r#"These set `PrecisionVariant::selection` (`SelectionOverride` in
`src/score/selection.rs`)."#,
        ),
        Group::Position => (
            "Position",
            r#"These set `PrecisionVariant::position` (`PositionOverride` in
`src/score/variant.rs`) and need RoPE in the pipeline (`--rope v3.2` or
`--rope v4`; refused with a one-line error when RoPE is off). The trial
rotates the query (`rope-swap-q`) or the keys (`rope-swap-k`) of that variant
with the other pairing, every other variant with the model's."#,
        ),
        Group::AddressSpace => (
            "Address space",
            r#"These set `PrecisionVariant::address` (`AddressFault` in
`src/score/address.rs`): a compressed or pooled indexer whose addresses do
not reach every row it scores. Each acts on the scores the indexer
assembles before its top-k, from a bound set by an absolute position or the
deployment's geometry (block-table width, slot capacity, workspace size,
prefill chunk), so its onset moves with that bound, not with k or depth;
a prompt the bound does not reach is the base's, cell for cell. The
scores are the base's (shared with it), any key format is hit alike, and
they act in every layer (not with `layers=SET`, `layer-share=F` or
`chunk-local`; one at a time). `diagnose` names the parameterless ones
with `all` and averages each bounded one over a few bounds taken from the
observed contexts ([OBSERVATIONS.md, "What `diagnose` computes"](OBSERVATIONS.md#what-diagnose-computes)).
Not modelled by the prediction or tail sampling (refused there, as
`chunk-local` is)."#,
        ),
        Group::AfterSelection => (
            "After the selection: losses that are not the indexer's",
            r#"These change nothing the indexer computes: the selection is a healthy
one's, and the answer is lost afterwards with a probability that does not
depend on whether the needle was selected (an MoE router, a sparse-attention
decode kernel, sampling). A sweep refuses them (`--precisions
fp8+loss` has nothing to simulate); `diagnose` ranks them beside the
catalogue's other entries, each row's likelihood taken at the healthy
simulated recall times (1 − the loss there), the likelihood averaged over
a grid of the loss and over the needle's multiples ([OBSERVATIONS.md, "What `diagnose` computes"](OBSERVATIONS.md#what-diagnose-computes)). They are
never composed with another hypothesis."#,
        ),
    }
}

/// docs/HYPOTHESES.md: the preamble, a table of every entry, then each
/// group's entries in catalogue order, an entry documented with another
/// under that one's heading.
pub fn markdown() -> String {
    let mut out = String::from("# Failure hypotheses\n\n<!-- Generated by `dsa-recall hypotheses --markdown` from src/score/hypothesis/: edit the entries there. -->\n\n");
    out.push_str(PREAMBLE);
    out.push_str(
        "\n\n## The catalogue at a glance\n\n| hypothesis | group | class | across layers | what it changes |\n|---|---|---|---|---|\n",
    );
    for h in CATALOGUE {
        out.push_str(&format!("| `{}` | {} | {} | {} | {} |\n", h.name, h.group, h.class.name(), h.layers.name(), h.summary));
    }
    for g in Group::ALL {
        let (title, intro) = group_heading(g);
        out.push_str(&format!("\n## {title}\n\n"));
        if !intro.is_empty() {
            out.push_str(intro);
            out.push_str("\n\n");
        }
        for h in CATALOGUE.iter().filter(|h| h.group == g && h.documented_with.is_none()) {
            section(h, &mut out);
        }
    }
    out.push('\n');
    out.push_str(EPILOGUE);
    out.push('\n');
    out
}

/// One entry's section (with the entries documented with it).
fn section(h: &HypothesisInfo, out: &mut String) {
    let with: Vec<&HypothesisInfo> = CATALOGUE.iter().filter(|o| o.documented_with == Some(h.name)).collect();
    let names: Vec<&str> = std::iter::once(h.name).chain(with.iter().map(|o| o.name)).collect();
    out.push_str(&format!("### {}\n\n", names.join(", ")));
    let classes: Vec<FaultClass> = std::iter::once(h.class).chain(with.iter().map(|o| o.class)).collect();
    let class = if classes.iter().all(|&c| c == h.class) {
        format!("class `{}`", h.class.name())
    } else {
        let each: Vec<String> =
            std::iter::once(h).chain(with.iter().copied()).map(|o| format!("`{}` {}", o.class.name(), o.name)).collect();
        format!("classes {}", each.join(", "))
    };
    let layers = if h.layers == FaultSpread::Shared { "shared across layers" } else { "independent in each layer" };
    let requires = h.requires.map(|r| format!("; requires {r}")).unwrap_or_default();
    out.push_str(&format!("*{class}; {layers}{requires}.*\n\n"));
    out.push_str(h.doc);
    out.push_str("\n\n");
}

#[cfg(test)]
mod tests {
    #[test]
    fn docs_hypotheses_md_is_generated_from_the_catalogue() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/HYPOTHESES.md");
        let written = std::fs::read_to_string(path).expect("docs/HYPOTHESES.md");
        assert!(
            written == super::markdown(),
            "docs/HYPOTHESES.md is stale: regenerate it with `cargo run --release -- hypotheses --markdown > docs/HYPOTHESES.md`"
        );
    }
}

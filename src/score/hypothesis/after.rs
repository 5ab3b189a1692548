//! The after-selection hypotheses: the indexer selects as a healthy one
//! does, and the answer is lost later, whether or not the needle was
//! selected. They change nothing a sweep simulates, so `diagnose` scores
//! them on the healthy simulation (`src/diagnose/loss.rs`).

use super::entry::{FaultClass, Group, HypothesisInfo, Role, Value};
use crate::model::stack::FaultSpread;
use crate::score::variant::PrecisionVariant;

/// Why a sweep refuses an after-selection hypothesis.
fn refuse(name: &str, v: &PrecisionVariant) -> Result<(), String> {
    Err(format!(
        "{}+{name}: {name} acts after the indexer's selection, which stays healthy, so a sweep has nothing to simulate; \
         name it to diagnose (--hypotheses {name}), which scores it on the healthy simulation",
        v.name
    ))
}

pub(super) const ENTRIES: &[HypothesisInfo] = &[
    HypothesisInfo {
        name: "loss",
        group: Group::AfterSelection,
        summary: "a constant share of answers lost after a healthy selection",
        changes: "Nothing in the indexer: the selection is healthy's, and a share of the answers is lost afterwards whether or not the needle was selected (recall = healthy recall × (1 − share)); diagnose averages its likelihood over the share.",
        stands_for: "Failures that are not the indexer's but read like one: nondeterministic sparse-MLA decode kernels (ROCm/aiter #4638, #5108), losses far below index_topk (sgl-project/sglang #36390), sampling.",
        expected: "Recall below healthy by the same factor in every row: at every context, depth and k, with the fp8 cache and with bf16 keys alike, and no loss in a per-layer capture of the selection.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::NotSelection,
        class_of: None,
        setting: "the answer after the selection",
        role: Role::None,
        parse: None,
        apply: |_: Value, v| refuse("loss", v),
        documented_with: None,
        doc: r#"**Changes:** nothing the indexer computes. The selection is a healthy
one's; afterwards the answer is lost with a probability that does not depend
on whether the needle was selected, so a row's recall is the healthy recall
times (1 − share). `diagnose` averages the likelihood over a grid of shares from 1 % to
99 % (the best share is printed beside the candidate) on the healthy
simulation, with no trials of its own.
**Stands for:** the failures of 2026 that are not the indexer's but look
like one: nondeterministic sparse-MLA decode kernels (ROCm/aiter #4638,
#5108), answers lost far below `index_topk` (sgl-project/sglang #36390),
sampling or answer parsing. A loss that varies between identical repeats
of one prompt (a nondeterministic kernel) has this likelihood too on rows of
distinct prompts: its mean is the share.
**Expected:** every row below healthy by the same factor: the bf16 rows as
much as the fp8 ones, short contexts as much as long ones, whatever k.
Selection faults leave the rows they cannot act on (bf16 keys, contexts
that fit in k) healthy; this does not.
**Verdict:** when this class leads every other, healthy included, by 10:1,
`diagnose` says "selection healthy: the losses are not explained by the
indexer's selection (N:1)" and where to look instead.
**Cheapest test:** a per-layer capture of the indexer's top-k
(`dsa-recall observe`): the needle is selected in the prompts whose answer
was lost."#,
    },
    HypothesisInfo {
        name: "loss-by-length",
        group: Group::AfterSelection,
        summary: "a share of answers lost after a healthy selection, growing with the prompt's length",
        changes: "Nothing in the indexer: the selection is healthy's, and 1 − 2^(−n/H) of the answers is lost at n prompt tokens whether or not the needle was selected; diagnose averages its likelihood over the half-length H.",
        stands_for: "An MoE router that returns NaN above ~6.5K tokens (GLM-5.2-NVFP4 on Blackwell, sgl-project/sglang #30989, #31001): the seed incident's shape, in another component.",
        expected: "Recall below healthy by a factor that falls with the context only, alike for the fp8 cache and bf16 keys, at every depth and k; no loss in a per-layer capture of the selection.",
        requires: None,
        layers: FaultSpread::Shared,
        class: FaultClass::NotSelection,
        class_of: None,
        setting: "the answer after the selection",
        role: Role::None,
        parse: None,
        apply: |_: Value, v| refuse("loss-by-length", v),
        documented_with: None,
        doc: r#"**Changes:** nothing the indexer computes. The selection is a healthy
one's; afterwards 1 − 2^(−n/H) of the answers is lost at a prompt of n
tokens, whether or not the needle was selected: none at short prompts, half
at n = H, nearly all well beyond. `diagnose` averages the likelihood over the half-length H,
powers of two from 1K to 1M tokens on the healthy simulation, with no
trials of its own.
**Stands for:** an MoE router that returns NaN above ~6.5K prompt tokens
(GLM-5.2-NVFP4 on Blackwell, sgl-project/sglang #30989, #31001): recall
that falls with length, the signature of an indexer fault, from a component
that does not select.
**Expected:** the loss depends on the context only: the same at every
depth and k, and with bf16 keys as much as with the fp8 cache, where a
selection fault that grows with length acts through the cache or the
selection and spares what it cannot reach.
**Cheapest test:** a per-layer capture of the indexer's top-k at the longest
context: the needle is selected in the prompts whose answer was lost."#,
    },
];

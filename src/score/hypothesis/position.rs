//! The position hypotheses: RoPE pair layouts of the query and the keys.

use super::entry::{FaultClass, Group, HypothesisInfo, Role};
use crate::model::stack::FaultSpread;
use crate::score::variant::PrecisionVariant;

pub(super) const ENTRIES: &[HypothesisInfo] = &[
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
        class_of: None,
        setting: "the query's RoPE layout",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            swap_rope(v, true, false)
        },
        documented_with: None,
        doc: r#"**Changes:** one side's RoPE uses the other pairing layout than the model's:
interleaved pairs (0,1), (2,3), … instead of halves (i, i + 32), or the
reverse; the other side keeps the model's.
**Stands for:** sglang #13530: the first V3.2 release rotated the indexer
with interleaved pairs where the model uses halves, a real bug.
**Expected:** the rope dims no longer encode relative position consistently,
so the needle's match on those dims depends on its absolute position: recall
varies with depth, and the 64 rope-free dims carry what signal remains.
**Seen:** V4 layout, needle strength 2, 16K tokens, depth 90 %: recall drops
against the correct layout with McNemar p < 10⁻³ (`tests/physics.rs`).
**Only under a needle geometry that uses the rotary dims.** The swap can
only hurt a match that lives in the rotary dims. Under the default `content`
geometry with `needle.rope_share` 0 the needle's match is in the 64
rope-free dims, so swapping either side's layout changes nothing measurable;
it shows with `needle.geometry = "isotropic"` or `needle.rope_share > 0`.
Measured (2026-12-03; V4-Flash, `--rope v4 --pooling off --needle-strength 2
--contexts 16K --depths 90 --topk 512 --precisions
fp32,fp32+rope-swap-k,fp32+rope-swap-q --trials 200`): default geometry
0.730 / 0.740 / 0.725 (McNemar p 0.88, 1.0); with `--needle-geometry
isotropic` 0.695 / 0.560 / 0.570 (p < 10⁻³); the model before the content geometry
(isotropic, coherence 0, null haystack, norm spread 0) 1.000 / 0.940 /
0.925 (p < 10⁻³). `tests/physics.rs` runs the isotropic case, on the
haystack of those measurements (content rank 16, relevance 0.03, coherence
0.5: the presets' haystack before the quantile needle) with the strength unit.
**Not represented: the real bug was two-sided.** The first V3.2 release
rotated *both* the indexer's query and its keys with the same interleaved
pairing against a model trained with halves (sglang #13530; fix commit
8631a81). These hypotheses swap one side only. With the same wrong pairing
on both sides, relative position stays consistent, so with random isotropic
vectors the change is statistically invisible; only trained structure (a
match that the model learned in specific rotary pairs) would make it
visible, and the catalogue has no variant for it."#,
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
        class_of: None,
        setting: "the keys' RoPE layout",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            swap_rope(v, false, true)
        },
        documented_with: Some("rope-swap-q"),
        doc: "",
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
        class_of: None,
        setting: "the query's and the keys' RoPE layout",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            swap_rope(v, true, true)
        },
        documented_with: None,
        doc: r#"**Changes:** the query's and the keys' RoPE both use the other pairing
layout than the model's.
**Stands for:** the most reported indexer fault: sgl-project/sglang
#13530/#13495 (the first V3.2 release rotated the indexer's q and k with
interleaved pairs where the model uses halves; RULER niah_multikey_3 16K
87.5 against ~100 on the API), vllm-ascend #4641/#7341/#7859, sglang #30111
(fused kernels hard-coded GPT-J pairing), ml-explore/mlx-lm #1431.
**Expected:** both sides turn alike, so relative position stays consistent
per pair and a needle match in the rope-free dims is untouched; a match that
lives in specific rotary pairs (`needle.rope_share` > 0, the isotropic
geometry) is moved to other frequencies and falls with distance. That the
default geometry shows almost nothing is itself a finding: the incidents'
losses say the real indexer uses its rotary dims for the needle."#,
    },
];

/// `rope-swap-*`: the query's (`q`) and/or the keys' (`k`) RoPE pairing swapped.
fn swap_rope(v: &mut PrecisionVariant, q: bool, k: bool) -> Result<(), String> {
    if (!q || v.position.query_rope_layout_swapped) && (!k || v.position.key_rope_layout_swapped) {
        return Err(format!("{} already has that RoPE layout swapped", v.name));
    }
    v.position.query_rope_layout_swapped |= q;
    v.position.key_rope_layout_swapped |= k;
    Ok(())
}

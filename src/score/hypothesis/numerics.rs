//! The numerics hypotheses: how queries and keys are rotated, scaled and
//! rounded, and how logits are formed.

use super::entry::{FaultClass, Group, HypothesisInfo, Role};
use crate::model::stack::FaultSpread;
use crate::numerics::key_cache::ScaleSpan;
use crate::numerics::pipeline::{LogitFormat, Rotation};
use crate::score::variant::PrecisionVariant;

pub(super) const ENTRIES: &[HypothesisInfo] = &[
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
        class_of: None,
        setting: "the rotation",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            let rotated = v.query.rotation == Rotation::Hadamard || v.key.rotation == Rotation::Hadamard;
            if !rotated {
                return Err(format!("{} has no Hadamard rotation to change", v.name));
            }
            (v.query.rotation, v.key.rotation) = (Rotation::None, Rotation::None);
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** queries and keys are quantized without the orthonormal
Walsh–Hadamard rotation.
**Stands for:** a port that drops the rotation the reference applies before
quantizing (V3.2 `rotate_activation` before fp8; the V4 reference before
fp4). Hypothetical.
**Expected:** with e4m3fn, little: it is a float format, so channels far below
an outlier keep their relative precision until they fall below its normal
range (a spread of about 2^15 within one row, then subnormals and zeros).
With e2m1 in blocks of 32 (`fp4+no-hadamard`) an outlier sets its block's
scale and the rest of the block rounds to 0: scores lose the signal those
channels carry, recall falls at long contexts. A unit test checks that the
rotation's absence changes the stored keys and that a row of ±1 (no outlier)
is stored exactly without it."#,
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
        class_of: None,
        setting: "the rotation",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            let rotated = v.query.rotation == Rotation::Hadamard || v.key.rotation == Rotation::Hadamard;
            if !rotated {
                return Err(format!("{} has no Hadamard rotation to change", v.name));
            }
            (v.query.rotation, v.key.rotation) = (Rotation::Hadamard, Rotation::None);
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the rotation is applied to one side only.
**Stands for:** query path and cache-writer path implemented separately, one
of them missing the rotation: ROCm/ATOM #1507 (V4-Pro, fp8 indexer: q
rotated, the fused compressor never reads its `rotate=True` flag, so K is
not; "cannot reliably recall a verbatim line" beyond ~18K tokens).
`hadamard-k-only` remains hypothetical.
**Expected:** H is orthonormal, so (Hq)·(Hk) = q·k only when both sides turn;
with one side turned the score is unrelated to the needle and recall falls to
about k over the candidate rows. A unit test checks that scores move far more
than fp8's own error."#,
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
        class_of: None,
        setting: "the rotation",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            let rotated = v.query.rotation == Rotation::Hadamard || v.key.rotation == Rotation::Hadamard;
            if !rotated {
                return Err(format!("{} has no Hadamard rotation to change", v.name));
            }
            (v.query.rotation, v.key.rotation) = (Rotation::None, Rotation::Hadamard);
            Ok(())
        },
        documented_with: Some("hadamard-q-only"),
        doc: "",
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
        class_of: None,
        setting: "which rows share a key scale",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.scale_span = ScaleSpan::Page;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** every key row of a page is quantized with one scale, from the
amax over the page's 64 rows × head_dim values (a partial last page: the rows
written so far, **assumption**).
**Stands for:** a cache storing one scale per page. The reference keeps one
scale per token and 128 values (`act_quant`), sglang/vLLM one fp32 scale per
token. Hypothetical.
**Expected:** rows much smaller than their page's largest lose resolution;
recall depends on the needle's neighbours, so it varies with the haystack's
outlier rows rather than with depth."#,
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
        class_of: None,
        setting: "which rows share a key scale",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.scale_span = ScaleSpan::Tensor;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** one scale per aligned span of 256 rows (the amax over the span).
**Why not a true per-tensor scale:** a scale over the whole context does not
exist when a row is written (the cache is written as the prompt streams in),
and a static scale calibrated on other data is a free parameter we would have
to invent. The chunk written together is the widest scale computable at write
time; a static calibrated scale can only fit the data worse, so this is the
optimistic end of "per tensor". Hypothetical.
**Expected:** as scale-per-page, stronger."#,
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
        class_of: None,
        setting: "the key scale's rounding",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.scale_rounded_down = true;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the ue8m0 key scale is 2^floor(log2(amax/448)) instead of
2^ceil(…). After dividing, values beyond ±448 are clamped before the cast,
as the reference does (`act_quant`: divide, clamp to ±448, cast), so they
saturate instead of overflowing to NaN. Needs ue8m0 key scales (`fp8`).
**Stands for:** DeepSeek rounds the power-of-two scale up (nothing clipped),
OCP MX takes a floor; a port mixing the two. The mix-up is hypothetical.
**Expected:** each row's few largest values saturate at 448 and the rest
gain one bit of resolution: a small, systematic distortion of the keys with
large peaks; small effect on recall unless the needle's signal sits in its
peaks."#,
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
        class_of: None,
        setting: "which row's scale a row is quantized with",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.cache.stale_scale = true;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the row in slot s > 0 of a page is divided by, clamped against
and stored with the scale computed for the row before it (slot s − 1); slot 0
uses its own. Codes and stored scale stay consistent; the row is just
quantized with a scale that does not fit it.
**Stands for:** a fused quantize-and-store kernel reusing a scale register
one row too long. Hypothetical.
**Expected:** a row larger than its predecessor clips (peaks saturate), a
smaller one loses resolution; the needle's score drops when its row follows a
smaller row. Varies from trial to trial, not with depth."#,
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
        class_of: None,
        setting: "the logit format",
        role: Role::SomeTies,
        parse: None,
        apply: |_, v| {
            set_logits(v, LogitFormat::Bf16)
        },
        documented_with: None,
        doc: r#"**Changes:** each logit is rounded to bf16 (or fp16) after the head sum and
the key scale (`ScoreNumerics.logits`).
**Stands for:** bf16: the V4 reference computes the score in bf16 tensors
(inferred from its dtypes; the `fp4` built-in already does this). fp16: an
engine keeping fp16 logits, hypothetical.
**Expected:** bf16 keeps 8 significant bits, so many haystack rows tie near
the k-th score and the tie rule starts to matter; fp16 ties less. Recall
changes little unless the needle's margin is within a bf16 ulp."#,
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
        class_of: None,
        setting: "the logit format",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            set_logits(v, LogitFormat::F16)
        },
        documented_with: Some("logits-bf16"),
        doc: "",
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
        class_of: None,
        setting: "the head activation",
        role: Role::None,
        parse: None,
        apply: |_, v| {
            v.scoring.relu = false;
            Ok(())
        },
        documented_with: None,
        doc: r#"**Changes:** the score is Σ_h w_h·(q_h·k), without the per-head ReLU;
computed as the ReLU sum of q less the ReLU sum of −q, then rounded to the
variant's logits.
**Stands for:** 1Cat-vLLM #250: the SM70 V4 port's decode kernels dropped the
per-head ReLU (beside a layout bug).
**Expected:** about half the per-head products are negative (sgl-project/sglang
#33271), so the haystack's order near the cut changes; a needle whose heads
look for it keeps positive products and mostly survives."#,
    },
];

/// `logits-bf16`, `logits-fp16`: round the logits to `f`.
fn set_logits(v: &mut PrecisionVariant, f: LogitFormat) -> Result<(), String> {
    if v.scoring.logits == f {
        return Err(format!("{} already rounds its logits to {f:?}", v.name));
    }
    v.scoring.logits = f;
    Ok(())
}

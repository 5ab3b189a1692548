//! Precision variants: a quantization pipeline for queries and one for
//! keys, the scoring numerics, and the hypotheses applied on top
//! (paged-cache faults, selection and RoPE overrides; docs/HYPOTHESES.md).

use crate::error::SimError;
use crate::numerics::key_cache::KeyCacheFaults;
use crate::numerics::pipeline::{QuantPipeline, QuantizedRows, ScoreNumerics};
use crate::score::address::AddressFault;
use crate::score::selection::SelectionOverride;
use serde::{Deserialize, Serialize};

/// What a variant changes about RoPE (hypotheses `rope-swap-q`,
/// `rope-swap-k`): the side whose pairing layout is the other one
/// (interleaved pairs ↔ first-half/second-half pairs) than the model's.
/// Applied by the RoPE stage; meaningless with RoPE off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct PositionOverride {
    pub query_rope_layout_swapped: bool,
    pub key_rope_layout_swapped: bool,
    /// `row-shift`: the query selects from another query position's logits
    /// row (a fresh query, [`crate::score::trial::context_queries`]).
    #[serde(skip_serializing_if = "is_false")]
    pub query_row_shifted: bool,
}

fn is_false(x: &bool) -> bool {
    !*x
}

impl PositionOverride {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// What chunked prefill hides from the query's indexer (hypothesis
/// `chunk-local`; docs/HYPOTHESES.md): which compressed rows are candidates.
/// Needs the scenario's prefill chunk (`--prefill-chunk N`); acts at
/// selection, so a variant's scores are unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ChunkVisibility {
    /// Every complete row (no fault).
    #[default]
    All,
    /// Only rows completed within the query's own prefill chunk
    /// (ml-explore/mlx-lm #1189).
    OwnChunk,
}

impl ChunkVisibility {
    pub fn is_all(&self) -> bool {
        *self == ChunkVisibility::All
    }
}

/// The indexer layers a fault acts in (hypotheses `layers=…`,
/// `layer-share=F`); the others run the variant's healthy base. Layers are
/// numbered 0 … L − 1 in the whole-model stack's order, 0 the simulated
/// one (docs/MODEL.md, "Faults in some layers").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(into = "String", try_from = "String")]
pub enum LayerSubset {
    /// Every layer (no subset).
    #[default]
    All,
    /// Layers first … last (inclusive; `last` u32::MAX: to the end).
    Range { first: u32, last: u32 },
    /// A share of the layers, spread evenly: layer l is faulty when
    /// ⌊(l + 1)·F⌋ > ⌊l·F⌋, F in parts per million.
    Share { ppm: u32 },
    /// The layers of the plan that should reuse another layer's selection
    /// run the fault as a selection of their own instead (IndexShare done
    /// wrong: ml-explore/mlx-lm #1453, ikawrakow/ik_llama.cpp #2063); the
    /// indexer layers are healthy.
    Reusers,
}

impl LayerSubset {
    pub fn is_all(&self) -> bool {
        *self == LayerSubset::All
    }

    /// `N`, `A..B` (B excluded), `A..` (to the last layer), `reusers`.
    pub fn parse_range(text: &str) -> Result<LayerSubset, String> {
        if text.trim() == "reusers" {
            return Ok(LayerSubset::Reusers);
        }
        let why = || format!("layers=SET needs a layer N, a range A..B (B excluded), A.. (to the last) or reusers, not {text:?}");
        let num = |t: &str| t.trim().parse::<u32>().map_err(|_| why());
        match text.split_once("..") {
            None => {
                let n = num(text)?;
                Ok(LayerSubset::Range { first: n, last: n })
            }
            Some((a, b)) if b.trim().is_empty() => Ok(LayerSubset::Range { first: num(a)?, last: u32::MAX }),
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if b <= a {
                    return Err(format!("layers=A..B needs B above A, not {text:?}"));
                }
                Ok(LayerSubset::Range { first: a, last: b - 1 })
            }
        }
    }

    /// Whether layer `l` of `layers` is faulty.
    pub fn contains(&self, l: usize, layers: usize) -> bool {
        match *self {
            LayerSubset::All => true,
            LayerSubset::Range { first, last } => (first as usize..=last as usize).contains(&l) && l < layers,
            LayerSubset::Share { ppm } => {
                let f = |x: usize| (x as u64 * u64::from(ppm)) / 1_000_000;
                f(l + 1) > f(l)
            }
            LayerSubset::Reusers => false,
        }
    }

    /// Why it cannot apply to a stack of `layers` indexer layers, if it cannot.
    pub fn unsupported(&self, layers: usize) -> Option<String> {
        match *self {
            LayerSubset::Range { first, .. } if first as usize >= layers => {
                Some(format!("layer {first} is past the stack's {layers} indexer layers (0 … {})", layers.saturating_sub(1)))
            }
            _ => None,
        }
    }
}

impl From<LayerSubset> for String {
    fn from(s: LayerSubset) -> String {
        match s {
            LayerSubset::All => "all".into(),
            LayerSubset::Range { first, last } if first == last => format!("{first}"),
            LayerSubset::Range { first, last: u32::MAX } => format!("{first}.."),
            LayerSubset::Range { first, last } => format!("{first}..{}", last + 1),
            LayerSubset::Share { ppm } => format!("share {}", f64::from(ppm) / 1e6),
            LayerSubset::Reusers => "reusers".into(),
        }
    }
}

impl TryFrom<String> for LayerSubset {
    type Error = String;
    fn try_from(s: String) -> Result<LayerSubset, String> {
        if s == "all" {
            return Ok(LayerSubset::All);
        }
        if let Some(f) = s.strip_prefix("share ") {
            let f: f64 = f.parse().map_err(|_| format!("bad layer share {s:?}"))?;
            return Ok(LayerSubset::Share { ppm: (f * 1e6).round() as u32 });
        }
        LayerSubset::parse_range(&s)
    }
}

/// A named way of storing queries and keys and scoring them, with the
/// hypotheses applied on top of it (docs/HYPOTHESES.md). The hypothesis
/// fields are left out of serialized scenarios when they change nothing, so
/// manifests of plain variants keep their bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrecisionVariant {
    pub name: String,
    pub query: QuantPipeline,
    pub key: QuantPipeline,
    pub scoring: ScoreNumerics,
    /// Faults between writing keys to the paged cache and reading them back.
    #[serde(default, skip_serializing_if = "KeyCacheFaults::is_default")]
    pub cache: KeyCacheFaults,
    #[serde(default, skip_serializing_if = "SelectionOverride::is_default")]
    pub selection: SelectionOverride,
    #[serde(default, skip_serializing_if = "PositionOverride::is_default")]
    pub position: PositionOverride,
    /// The layers its faults act in (whole-model recall); every layer by default.
    #[serde(default, skip_serializing_if = "LayerSubset::is_all")]
    pub layers: LayerSubset,
    /// Which rows chunked prefill lets the query's indexer see.
    #[serde(default, skip_serializing_if = "ChunkVisibility::is_all")]
    pub chunk: ChunkVisibility,
    /// The needle's median exceedance times this (`needle=M`, the quantile
    /// needle): a nuisance axis on the same haystacks, not a fault.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub needle_multiple: f64,
    /// Its faults act only in prompts longer than this many tokens
    /// (`longer-than=T`); shorter prompts run its base. 0: in every prompt.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub longer_than: u64,
    /// Which rows the indexer's addresses reach (`visible-cap=P`,
    /// `block0-repeat=S`, …): acts on the assembled scores at selection,
    /// so the variant's scores are its base's.
    #[serde(default, skip_serializing_if = "AddressFault::is_none")]
    pub address: AddressFault,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// The variant a name `base+h1+h2…` starts from: `base`.
pub fn base_of(name: &str) -> &str {
    name.split('+').next().unwrap_or(name).trim()
}

fn one() -> f64 {
    1.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

/// Built-in variants: (name, what it stands for). Sources and the reasons
/// for each choice in docs/NUMERICS.md.
pub const BUILTIN: &[(&str, &str)] = &[
    ("fp32", "fp32 queries, keys, head weights and logits: the exact reference"),
    ("bf16", "bf16 queries and keys (round to nearest even, no scale); fp32 weights and logits"),
    ("fp8", "DeepSeek-V3.2 reference: Hadamard, e4m3fn, blocks of 128, ue8m0 scales rounded up, q and k; fp32 weights and logits"),
    ("fp8-fp32scale", "sglang/vLLM/DeepGEMM indexer cache: Hadamard, e4m3fn with an fp32 scale per 128, q and k; fp32 weights and logits"),
    ("fp4", "DeepSeek-V4 reference: Hadamard, e2m1, blocks of 32, ue8m0 scales rounded up, q and k; bf16 weights and logits"),
    ("mxfp4", "MXFP4: Hadamard, e2m1 with an OCP MX ue8m0 scale per 32, q and k; fp32 weights and logits"),
    ("nvfp4", "NVFP4: Hadamard, e2m1 with an e4m3 scale per 16 (no per-tensor scale), q and k; fp32 weights and logits"),
];

impl PrecisionVariant {
    /// A variant with no hypothesis applied.
    pub fn new(name: &str, query: QuantPipeline, key: QuantPipeline, scoring: ScoreNumerics) -> Self {
        PrecisionVariant {
            name: name.to_string(),
            query,
            key,
            scoring,
            cache: KeyCacheFaults::default(),
            selection: SelectionOverride::default(),
            position: PositionOverride::default(),
            layers: LayerSubset::All,
            chunk: ChunkVisibility::All,
            needle_multiple: 1.0,
            longer_than: 0,
            address: AddressFault::None,
        }
    }

    /// Whether the variant leaves the cache layout, the selection, the rows
    /// chunked prefill hides and the needle's placement as a healthy
    /// deployment has them: what estimators that sample rows one at a time
    /// (and the closed-form prediction) can follow.
    pub fn keeps_rows_in_place(&self) -> bool {
        self.cache.is_default()
            && self.selection.is_default()
            && self.chunk.is_all()
            && self.needle_multiple == 1.0
            && self.longer_than == 0
            && self.address.is_none()
    }

    /// The variant its name starts from (`fp8` of `fp8+row-shift`): what a
    /// length-gated variant runs in the prompts its faults spare.
    pub fn base_name(&self) -> &str {
        base_of(&self.name)
    }

    /// Whether the variant changes only number formats and scoring (the
    /// query and key pipelines, weights and logits, ReLU): rows in place and
    /// the model's RoPE layout. What rows scored one at a time (the tail
    /// estimator, the sampled prediction) or as given (`trial --dump`,
    /// `replay`) can follow.
    pub fn changes_only_numbers(&self) -> bool {
        self.keeps_rows_in_place() && self.position.is_default()
    }

    /// Quantizes a chunk of raw keys (rows `first_row …`, rows of `d`;
    /// `first_row` a multiple of 256) as they are written to the paged key
    /// cache of the request seeded `request` (the trial), and gives in
    /// `out` what the scorer reads back, with this variant's cache faults (see [`crate::numerics::key_cache`]). Without faults this
    /// is exactly `self.key.quantize_rows_into(raw, d, out)`.
    pub fn store_keys(&self, raw: &[f32], first_row: u64, request: u64, d: usize, out: &mut QuantizedRows) -> Result<(), SimError> {
        self.cache.store(&self.key, raw, first_row, request, d, out)
    }

    /// Looks a built-in variant up by name.
    pub fn builtin(name: &str) -> Option<PrecisionVariant> {
        let (side, scoring) = QuantPipeline::builtin(name)?;
        Some(PrecisionVariant::new(name, side.clone(), side, scoring))
    }

    /// Whether this variant scores exactly as the fp32 reference: no
    /// quantization, f32 weights and logits, a fault-free cache and the
    /// model's RoPE layout (its selection may differ).
    pub fn is_exact(&self) -> bool {
        self.query.is_identity()
            && self.key.is_identity()
            && self.scoring == ScoreNumerics::F32
            && self.cache.is_default()
            && self.position.is_default()
    }

    /// For a variant that scores like the exact reference up to casting
    /// queries and keys to a narrower float (no rotation, no scale: plain
    /// bf16 or fp32 casts; fp32 weights and logits; a fault-free cache and
    /// the model's RoPE layout), the relative error ε of its query–key
    /// products, (1 + u_q)(1 + u_k) − 1 with u the cast's unit roundoff;
    /// None for any other variant. With it, a score is within
    /// ε'·‖k‖·Σ_h |w_h|·‖q_h‖ of the exact one ([`crate::score::indexer::IndexerQuery::bound_factor`]).
    pub fn rounding_bound(&self) -> Option<f64> {
        use crate::numerics::format::ElementFormat;
        use crate::numerics::pipeline::Rotation;
        let unit = |p: &QuantPipeline| match (p.rotation, p.element, p.scaling) {
            (Rotation::None, ElementFormat::F32, None) => Some(0.0),
            // bfloat16 keeps 8 significant bits and f32's exponent range.
            (Rotation::None, ElementFormat::Bf16, None) => Some(2f64.powi(-8)),
            _ => None,
        };
        let exact_elsewhere = self.scoring == ScoreNumerics::F32 && self.cache.is_default() && self.position.is_default();
        match (unit(&self.query), unit(&self.key)) {
            (Some(a), Some(b)) if exact_elsewhere => Some((1.0 + a) * (1.0 + b) - 1.0),
            _ => None,
        }
    }

    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// Why this variant cannot run on vectors of `dim`, if it cannot.
    pub fn unsupported(&self, dim: usize) -> Option<String> {
        self.query.unsupported(dim).or_else(|| self.key.unsupported(dim)).or_else(|| self.cache.unsupported(&self.key, dim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::indexer::IndexerQuery;

    #[test]
    fn every_listed_builtin_resolves() {
        for name in PrecisionVariant::builtin_names() {
            assert_eq!(PrecisionVariant::builtin(name).unwrap().name, name);
        }
        assert!(PrecisionVariant::builtin("fp7").is_none());
    }

    /// Scores of every key under `variant`, kernel order (scales folded
    /// where a side has one scale per row) and dequantize-first.
    fn folded_and_dequantized(variant: &PrecisionVariant, q: &[f32], w: &[f32], keys: &[f32], d: usize) -> (Vec<f32>, Vec<f32>) {
        let n = keys.len() / d;
        let folded_q = IndexerQuery::new(variant.query.quantize_rows(q, d).unwrap(), w, d, variant.scoring);
        let mut folded = vec![0.0; n];
        folded_q.score_quantized_rows(&variant.key.quantize_rows(keys, d).unwrap(), &mut folded);
        let mut dq = q.to_vec();
        variant.query.apply(&mut dq, d).unwrap();
        let mut dk = keys.to_vec();
        variant.key.apply(&mut dk, d).unwrap();
        let plain_q = IndexerQuery::new(QuantizedRows::unscaled(dq, d), w, d, variant.scoring);
        let mut plain = vec![0.0; n];
        plain_q.score_rows(&dk, &mut plain);
        (folded, plain)
    }

    fn test_data(heads: usize, d: usize, n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let wave = |i: usize, a: f32| ((i as f32) * a).sin() * (1.0 + (i % 7) as f32);
        let q = (0..heads * d).map(|i| wave(i, 0.37)).collect();
        let w = (0..heads).map(|h| wave(h, 1.3)).collect();
        let k = (0..n * d).map(|i| wave(i, 0.91) * 0.01).collect();
        (q, w, k)
    }

    #[test]
    fn folded_scales_equal_dequantize_first_for_power_of_two_scales() {
        let (q, w, k) = test_data(8, 128, 37);
        let fp8 = PrecisionVariant::builtin("fp8").unwrap();
        assert!(fp8.query.has_row_scale(128) && fp8.key.has_row_scale(128));
        let (folded, plain) = folded_and_dequantized(&fp8, &q, &w, &k, 128);
        assert_eq!(folded, plain);
        // fp4's blocks of 32 cannot be folded: both paths are the same code.
        let fp4 = PrecisionVariant::builtin("fp4").unwrap();
        assert!(!fp4.key.has_row_scale(128));
        let (folded, plain) = folded_and_dequantized(&fp4, &q, &w, &k, 128);
        assert_eq!(folded, plain);
    }

    #[test]
    fn folded_fp32_scales_agree_to_a_few_ulps() {
        let (q, w, k) = test_data(8, 128, 37);
        let v = PrecisionVariant::builtin("fp8-fp32scale").unwrap();
        let (folded, plain) = folded_and_dequantized(&v, &q, &w, &k, 128);
        for (a, b) in folded.iter().zip(&plain) {
            assert!((a - b).abs() <= 1e-5 * a.abs().max(b.abs()) + 1e-30, "{a} vs {b}");
        }
    }

    #[test]
    fn bf16_pipeline_rounds_to_nearest_even() {
        let v = PrecisionVariant::builtin("bf16").unwrap();
        // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even → 1.
        let mut x = vec![1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8)];
        v.key.apply(&mut x, 2).unwrap();
        assert_eq!(x, vec![1.0, 1.0 + 2.0 * 2f32.powi(-7)]);
    }
}

//! `dsa-recall trial … --dump FILE.safetensors`: one trial, completely.

use super::bad_file;
use crate::base::rng::{self, tag};
use crate::config::Scenario;
use crate::error::Error;
use crate::estimate::driver::trial_seed;
use crate::model::haystack::TrialHaystack;
use crate::numerics::format::{hadamard_rows_in_place, quantize_dequantize, Overflow, QuantizedBlocks};
use crate::numerics::pipeline::{QuantPipeline, Rotation};
use crate::score::indexer::IndexerQuery;
use crate::score::selection::{tie_key, TieRule};
use crate::score::variant::PrecisionVariant;
use safetensors::{Dtype, View};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// One side (q or k) of a variant as stored: element codes and block scales.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedSide {
    /// One code per value (bit pattern in the low bits).
    pub codes: Vec<u32>,
    /// One scale per block of `block_len` values; empty for a plain cast.
    pub scales: Vec<f32>,
    pub block_len: usize,
}

/// rotation → block scale → element codes, the stored form of a pipeline.
pub fn encode_side(p: &QuantPipeline, input: &[f32], dim: usize) -> Result<EncodedSide, Error> {
    let mut values = input.to_vec();
    if p.rotation == Rotation::Hadamard {
        hadamard_rows_in_place(&mut values, dim).map_err(crate::SimError::from)?;
    }
    match &p.scaling {
        Some(scaling) => {
            let mut blocks = QuantizedBlocks::default();
            quantize_dequantize(&mut values, dim, p.element, scaling, Some(&mut blocks)).map_err(crate::SimError::from)?;
            Ok(EncodedSide { codes: blocks.codes, scales: blocks.scales, block_len: blocks.block_len })
        }
        None => {
            Ok(EncodedSide { codes: values.iter().map(|&x| p.element.encode(x, Overflow::Cast)).collect(), scales: vec![], block_len: 0 })
        }
    }
}

/// Refuses a variant these rows-as-given paths (`trial --dump`, `replay`,
/// the Python `trial` and `logits`) cannot follow: they score the keys as
/// the variant's key pipeline quantizes them, with its query pipeline and
/// scoring, and select with the scenario's tie rule; a cache fault, a RoPE
/// layout, a selection fault, chunk visibility or a needle multiple would
/// be silently left out, so the variant is refused instead.
pub fn scores_rows_as_given(variants: &[PrecisionVariant]) -> Result<(), Error> {
    match variants.iter().find(|v| !v.changes_only_numbers()) {
        None => Ok(()),
        Some(v) => Err(Error::Config(crate::error::ConfigError::new(
            "--precisions",
            &v.name,
            "variants of number formats and scoring only here (the key and query pipelines, logits dtype, ReLU): trial --dump and replay score the rows as given, without cache faults, RoPE layouts, selection faults, chunk visibility or needle multiples; run or sweep simulate those",
        ))),
    }
}

/// Scores of every row of `keys` under `variant`, exactly as a sweep
/// computes them; refused for a variant [`scores_rows_as_given`] refuses.
pub fn variant_logits(v: &PrecisionVariant, queries: &[f32], weights: &[f32], keys: &[f32], dim: usize) -> Result<Vec<f32>, Error> {
    scores_rows_as_given(std::slice::from_ref(v))?;
    let q = v.query.quantize_rows(queries, dim).map_err(crate::SimError::from)?;
    let k = v.key.quantize_rows(keys, dim).map_err(crate::SimError::from)?;
    let iq = IndexerQuery::new(q, weights, dim, v.scoring);
    let mut out = vec![0.0; keys.len() / dim.max(1)];
    iq.score_quantized_rows(&k, &mut out);
    Ok(out)
}

/// Indices (ascending) of the top `k` rows by (logit, tie key), as a kernel
/// with this tie order would select them.
pub fn select_top_k(logits: &[f32], k: usize, rule: TieRule, seed: Option<u64>) -> Vec<u64> {
    let priority = |i: usize| seed.map_or(i as u64, |s| rng::derive(s, &[tag::TIE, i as u64]));
    let keys: Vec<u64> = (0..logits.len()).map(|i| tie_key(rule, i, priority)).collect();
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(keys[b].cmp(&keys[a])));
    let mut top: Vec<u64> = idx.into_iter().take(k).map(|i| i as u64).collect();
    top.sort_unstable();
    top
}

/// A tensor to write: dtype, shape and little-endian bytes.
pub struct OwnedTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl OwnedTensor {
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The values, little-endian, row-major.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The dtype as NumPy spells it (`<f4`, `<i8`, `|u1`, `<u2`, `<u4`).
    pub fn numpy_dtype(&self) -> &'static str {
        match self.dtype {
            Dtype::F32 => "<f4",
            Dtype::I64 => "<i8",
            Dtype::U8 => "|u1",
            Dtype::U16 => "<u2",
            _ => "<u4",
        }
    }
}

impl View for &OwnedTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn f32s(v: &[f32], shape: Vec<usize>) -> OwnedTensor {
    OwnedTensor { dtype: Dtype::F32, shape, bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect() }
}

fn i64s(v: &[u64], shape: Vec<usize>) -> OwnedTensor {
    OwnedTensor { dtype: Dtype::I64, shape, bytes: v.iter().flat_map(|&x| (x as i64).to_le_bytes()).collect() }
}

/// Codes in the narrowest unsigned type that holds the element format.
fn codes(v: &[u32], bits: u32, shape: Vec<usize>) -> OwnedTensor {
    match bits {
        0..=8 => OwnedTensor { dtype: Dtype::U8, shape, bytes: v.iter().map(|&c| c as u8).collect() },
        9..=16 => OwnedTensor { dtype: Dtype::U16, shape, bytes: v.iter().flat_map(|&c| (c as u16).to_le_bytes()).collect() },
        _ => OwnedTensor { dtype: Dtype::U32, shape, bytes: v.iter().flat_map(|&c| c.to_le_bytes()).collect() },
    }
}

/// What the dump's metadata says about the trial (JSON under key `dsa_recall`).
#[derive(Serialize)]
struct DumpMeta<'a> {
    tool: &'static str,
    version: &'static str,
    scenario: &'a Scenario,
    trial: u64,
    trial_seed: u64,
    context_tokens: u64,
    depth_percent: f64,
    topk: u64,
    k_eff: u64,
    needle_tokens: [u64; 2],
    tie_rule: TieRule,
    variants: &'a [PrecisionVariant],
}

/// What a dump found, per variant: (name, needle survived, best needle rank, overlap with fp32).
pub struct DumpSummary {
    pub rows: usize,
    pub k_eff: usize,
    pub variants: Vec<(String, bool, Option<u64>, f64)>,
}

/// One trial in memory: the tensors `trial --dump` writes, in file order,
/// the JSON of its metadata (key `dsa_recall`) and the summary.
pub struct TrialTensors {
    pub tensors: Vec<(String, OwnedTensor)>,
    pub metadata: String,
    pub summary: DumpSummary,
}

/// The quantile needle's scale, solved in the trial itself: the trial's
/// one cell run with the exact reference only (None: the strength needle).
fn quantile_needle_scale(s: &Scenario, seed: u64, depth: f64, on_step: &dyn Fn(&str)) -> Result<Option<f32>, Error> {
    Ok(match s.model.needle_unit.quantile() {
        None => None,
        Some(_) => {
            on_step("placing the needle at its quantile");
            let exact = [PrecisionVariant::builtin("fp32").ok_or_else(|| bad_file(Path::new("fp32"), "variant missing"))?];
            let spec = crate::score::trial::TrialSpec {
                model: &s.model,
                physics: &s.physics,
                geometry: s.geometry,
                contexts: &s.contexts[..1],
                depths: std::slice::from_ref(&depth),
                needle_offsets: &s.needle_offsets[..1],
                needle_tokens: s.needle_tokens,
                topks: &s.topks[..1],
                variants: &exact,
                tie_rule: s.tie_rule,
                fidelity_reference: None,
                stack: None,
                prefill_chunk: s.prefill_chunk,
                tie_audit: false,
                margin_threshold: None,
                rank_margins: true,
                agreement: &[],
            };
            spec.run(seed)?.needle.first().map(|n| n.scale)
        }
    })
}

/// Trial `trial` of the scenario's single cell (its first context, depth
/// and k) with every precision variant of the scenario, in memory: what
/// [`dump_trial`] writes, and the Python binding's `trial` returns.
/// `on_step` names each step as it starts (for a progress display).
pub fn trial_tensors(s: &Scenario, trial: u64, on_step: &dyn Fn(&str)) -> Result<TrialTensors, Error> {
    scores_rows_as_given(&s.precisions)?;
    let (context, depth, k) = (s.contexts[0], s.depths[0], s.topks[0]);
    let d = s.model.shape.head_dim;
    let seed = trial_seed(s.seed, depth, trial);
    on_step("drawing the haystack");
    let hay = TrialHaystack::draw(&s.model, seed)?;
    let placement = s.geometry.place_needle_at(context, s.needle_tokens, depth, s.needle_offsets[0]);
    let rows = s.geometry.candidate_rows(context) as usize;
    let k_eff = (k as usize).min(rows);
    on_step(&format!("generating {rows} key rows"));
    let needle_scale = quantile_needle_scale(s, seed, depth, on_step)?;
    // Keys and query as scored: with the scenario's physics (RoPE, pooling,
    // distractors) when it has any, else exactly the null model's rows.
    let (keys, queries) = crate::model::row_source::context_keys(
        &s.model,
        &s.physics,
        s.geometry,
        &hay,
        seed,
        context,
        placement.tokens.clone(),
        needle_scale,
    )?;
    let heads = s.model.shape.heads;
    let mut tensors: Vec<(String, OwnedTensor)> = vec![
        ("queries".into(), f32s(&queries, vec![heads, d])),
        ("weights".into(), f32s(&hay.weights, vec![heads])),
        ("keys".into(), f32s(&keys, vec![rows, d])),
        ("needle_rows".into(), i64s(&placement.rows.clone().collect::<Vec<_>>(), vec![placement.rows.clone().count()])),
    ];
    on_step("scoring fp32 (the reference)");
    let exact = PrecisionVariant::builtin("fp32").ok_or_else(|| bad_file(Path::new("fp32"), "variant missing"))?;
    let reference = select_top_k(&variant_logits(&exact, &queries, &hay.weights, &keys, d)?, k_eff, s.tie_rule, Some(seed));
    let mut summary = DumpSummary { rows, k_eff, variants: Vec::new() };
    for v in &s.precisions {
        on_step(&format!("scoring {}", v.name));
        let q = encode_side(&v.query, &queries, d)?;
        let kk = encode_side(&v.key, &keys, d)?;
        let logits = variant_logits(v, &queries, &hay.weights, &keys, d)?;
        let selected = select_top_k(&logits, k_eff, s.tie_rule, Some(seed));
        tensors.push((format!("{}.q_codes", v.name), codes(&q.codes, v.query.element.bits(), vec![heads, d])));
        if !q.scales.is_empty() {
            tensors.push((format!("{}.q_scales", v.name), f32s(&q.scales, vec![heads, q.scales.len() / heads])));
        }
        tensors.push((format!("{}.k_codes", v.name), codes(&kk.codes, v.key.element.bits(), vec![rows, d])));
        if !kk.scales.is_empty() {
            tensors.push((format!("{}.k_scales", v.name), f32s(&kk.scales, vec![rows, kk.scales.len() / rows.max(1)])));
        }
        tensors.push((format!("{}.logits", v.name), f32s(&logits, vec![rows])));
        tensors.push((format!("{}.selected", v.name), i64s(&selected, vec![selected.len()])));
        let best = placement.rows.clone().map(|r| logits[r as usize]).reduce(f32::max);
        let rank = best.map(|b| (0..rows).filter(|i| !placement.rows.contains(&(*i as u64)) && logits[*i] > b).count() as u64);
        let survived = placement.in_window || placement.rows.clone().any(|r| selected.binary_search(&r).is_ok());
        let overlap = selected.iter().filter(|i| reference.binary_search(i).is_ok()).count() as f64 / k_eff.max(1) as f64;
        summary.variants.push((v.name.clone(), survived, rank, overlap));
    }
    let meta = DumpMeta {
        tool: "dsa-recall",
        version: env!("CARGO_PKG_VERSION"),
        scenario: s,
        trial,
        trial_seed: seed,
        context_tokens: context,
        depth_percent: depth,
        topk: k,
        k_eff: k_eff as u64,
        needle_tokens: [placement.tokens.start, placement.tokens.end],
        tie_rule: s.tie_rule,
        variants: &s.precisions,
    };
    let metadata = serde_json::to_string(&meta).unwrap_or_default();
    Ok(TrialTensors { tensors, metadata, summary })
}

/// Largest dump written without `allow_large` (`--allow-large-output`): 1 GiB.
pub const MAX_DUMP_BYTES: u64 = 1 << 30;

/// Bytes a dump of the scenario's first cell holds at least: its f32 query,
/// weights and keys, and per variant the element codes (narrowest unsigned
/// type), logits and selected indices (block scales left out).
pub fn dump_size_estimate(s: &Scenario) -> u64 {
    let rows = s.geometry.candidate_rows(s.contexts[0]);
    let (d, heads) = (s.model.shape.head_dim as u64, s.model.shape.heads as u64);
    let k = s.topks[0].min(rows);
    let code_bytes = |bits: u32| match bits {
        0..=8 => 1,
        9..=16 => 2,
        _ => 4,
    };
    let per_variant: u64 = s
        .precisions
        .iter()
        .map(|v| heads * d * code_bytes(v.query.element.bits()) + rows * d * code_bytes(v.key.element.bits()) + rows * 4 + k * 8)
        .sum();
    heads * d * 4 + heads * 4 + rows * d * 4 + per_variant
}

/// Writes trial `trial` of the scenario's single cell (its first context,
/// depth and k) to `path`, with every precision variant of the scenario.
/// A dump over [`MAX_DUMP_BYTES`] is refused before anything is simulated
/// unless `allow_large`. `on_step` names each step as it starts (for a
/// progress display).
pub fn dump_trial(s: &Scenario, trial: u64, path: &Path, allow_large: bool, on_step: &dyn Fn(&str)) -> Result<DumpSummary, Error> {
    crate::base::files::output_target(path)?;
    let size = dump_size_estimate(s);
    if size > MAX_DUMP_BYTES && !allow_large {
        use crate::base::files::size_label;
        return Err(bad_file(
            path,
            format!(
                "the trial's tensors would take at least {:.1} GiB (context {} tokens, {} precisions), more than {}; \
                 pass --allow-large-output to write it anyway, or use a shorter --context",
                size as f64 / (1u64 << 30) as f64,
                s.contexts[0],
                s.precisions.len(),
                size_label(MAX_DUMP_BYTES)
            ),
        ));
    }
    let TrialTensors { tensors, metadata, summary } = trial_tensors(s, trial, on_step)?;
    let info: HashMap<String, String> = [("dsa_recall".to_string(), metadata)].into_iter().collect();
    on_step(&format!("writing {}", path.display()));
    let bytes = safetensors::serialize(tensors.iter().map(|(n, t)| (n.clone(), t)), Some(info))
        .map_err(|e| bad_file(path, format!("cannot serialize: {e}")))?;
    crate::base::files::write_file(path, &bytes)?;
    Ok(summary)
}

//! The project's own capture writer (test and bench code, not the
//! library's API): synthetic key caches laid out byte for
//! byte as a declared layout says, with queries, head weights, a block table
//! and an engine's selection, written as a safetensors file or a folder of
//! `.npy` files that `check` reads. Used by the tests (healthy captures and
//! injected faults in every built-in layout) and the bench.

use dsa_recall::error::Error;
use dsa_recall::numerics::format::{hadamard_rows_in_place, quantize_dequantize, ElementFormat, Overflow, QuantizedBlocks};
use dsa_recall::numerics::pipeline::{QuantPipeline, QuantizedRows, Rotation};
use dsa_recall::score::indexer::IndexerQuery;
use dsa_recall::score::variant::PrecisionVariant;
use dsa_recall::tensors::check::capture::{CaptureMeta, META_FILE, META_KEY};
use dsa_recall::tensors::check::layout::{CacheLayout, CodeFormat, Placement};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use safetensors::{Dtype, View};
use std::borrow::Cow;
use std::path::Path;

/// How the query is captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryForm {
    /// Element codes and scales as the engine quantized them, with the
    /// kernel's head weights (every factor folded in).
    Codes,
    /// The query before rotation and quantization, with raw head weights.
    Float,
}

/// What to generate.
#[derive(Clone, Debug)]
pub struct SyntheticSpec {
    pub layout: CacheLayout,
    /// Precision variant spec (the pipeline): its query side quantizes the
    /// query, its key rotation is applied before the layout's quantization.
    pub pipeline: String,
    pub layers: usize,
    pub queries_per_layer: usize,
    pub seq_len: usize,
    pub heads: usize,
    pub topk: usize,
    pub seed: u64,
    /// Physical blocks beyond those used, filled with random bytes.
    pub spare_blocks: usize,
    pub query_form: QueryForm,
    /// Rows `first + 1 … first + count` get row `first`'s key: exact ties.
    pub tied_rows: Option<(usize, usize)>,
    pub with_logits: bool,
    /// Written into the metadata (the 32-bit offset fault reads it).
    pub block_stride_bytes: Option<u64>,
}

impl SyntheticSpec {
    /// A small capture in `layout` with its default pipeline.
    pub fn small(layout: &str, seed: u64) -> SyntheticSpec {
        let layout = CacheLayout::builtin(layout).expect("a built-in layout");
        let pipeline = layout.pipeline.clone().unwrap_or_else(|| "fp32".into());
        SyntheticSpec {
            layout,
            pipeline,
            layers: 2,
            queries_per_layer: 2,
            seq_len: 1000,
            heads: 8,
            topk: 64,
            seed,
            spare_blocks: 3,
            query_form: QueryForm::Codes,
            tied_rows: None,
            with_logits: false,
            block_stride_bytes: None,
        }
    }
}

/// A generated capture, in memory.
pub struct SyntheticCapture {
    pub spec: SyntheticSpec,
    pub variant: PrecisionVariant,
    /// `[layers, blocks, stride]` bytes.
    pub cache: Vec<u8>,
    pub blocks_per_layer: usize,
    pub pairs: usize,
    /// `[pairs, max_blocks]` physical block of each logical block.
    pub block_table: Vec<i32>,
    pub max_blocks: usize,
    pub layer: Vec<i64>,
    pub query: Vec<i64>,
    /// `[pairs, heads, dim]` before quantization.
    pub q_float: Vec<f32>,
    /// `[pairs, heads, code bytes]`, element format `q_format`.
    pub q_codes: Vec<u8>,
    pub q_format: CodeFormat,
    /// `[pairs, heads, scales_per_head]` (empty for an unscaled query).
    pub q_scales: Vec<f32>,
    pub q_scales_per_head: usize,
    /// `[pairs, heads]` raw w_h.
    pub weights_raw: Vec<f32>,
    /// `[pairs, heads]` as the kernel multiplies them.
    pub weights_kernel: Vec<f32>,
    /// `[pairs, topk]` logical rows, −1 padded.
    pub selected: Vec<i64>,
    /// `[pairs, seq_len]` the engine's logits.
    pub logits: Vec<f32>,
    /// Per pair, the reference logits.
    reference: Vec<Vec<f32>>,
    /// Per pair, the query values and final head weights as scored.
    scored_queries: Vec<(Vec<f32>, Vec<f32>)>,
}

fn sim(e: dsa_recall::numerics::format::FormatError) -> Error {
    dsa_recall::SimError::from(e).into()
}

fn config(e: impl std::fmt::Display) -> Error {
    dsa_recall::ConfigError::new("synthetic capture", "", e.to_string()).into()
}

impl SyntheticCapture {
    /// Generates keys, queries and weights, writes the cache bytes and
    /// selects with the reference (exact, lowest index among ties).
    pub fn generate(spec: SyntheticSpec) -> Result<SyntheticCapture, Error> {
        let l = spec.layout.clone();
        let d = l.dim;
        let variant = resolve(&spec.pipeline, d)?;
        let (element, scaling) = l.key_scaling().ok_or_else(|| config(format!("layout {} has codes the writer cannot encode", l.name)))?;
        let key_pipeline = QuantPipeline { rotation: variant.key.rotation, element, scaling };
        let rpb = l.rows_per_block;
        let used = spec.seq_len.div_ceil(rpb);
        let blocks = used + spec.spare_blocks;
        let stride = l.block_stride();
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let mut cache = vec![0u8; spec.layers * blocks * stride];
        rng.fill_bytes(&mut cache);
        // One block table for the request, shared by every layer and query.
        let mut physical: Vec<usize> = (0..blocks).collect();
        for i in (1..blocks).rev() {
            physical.swap(i, rng.random_range(0..=i));
        }
        let table: Vec<i32> = physical[..used].iter().map(|&b| b as i32).collect();
        // Queries and weights.
        let pairs = spec.layers * spec.queries_per_layer;
        let heads = spec.heads;
        let q_format = code_format_of(variant.query.element);
        let mut q_float = Vec::with_capacity(pairs * heads * d);
        let mut q_codes = Vec::new();
        let mut q_scales = Vec::new();
        let mut q_scales_per_head = 0;
        let mut weights_raw = Vec::new();
        let mut weights_kernel = Vec::new();
        let mut scored_queries = Vec::new();
        for _ in 0..pairs {
            let q: Vec<f32> = (0..heads * d).map(|_| rng.sample::<f32, _>(StandardNormal)).collect();
            let w: Vec<f32> = (0..heads).map(|_| rng.sample::<f32, _>(StandardNormal)).collect();
            let mut rotated = q.clone();
            if variant.query.rotation == Rotation::Hadamard {
                hadamard_rows_in_place(&mut rotated, d).map_err(sim)?;
            }
            let (codes, scales, per_head) = match &variant.query.scaling {
                Some(s) => {
                    let mut blocks_q = QuantizedBlocks::default();
                    let mut v = rotated.clone();
                    quantize_dequantize(&mut v, d, variant.query.element, s, Some(&mut blocks_q)).map_err(sim)?;
                    let per_head = blocks_q.scales.len() / heads;
                    (blocks_q.codes, blocks_q.scales, per_head)
                }
                None => (rotated.iter().map(|&x| variant.query.element.encode(x, Overflow::Cast)).collect(), vec![1.0; heads], 1),
            };
            q_scales_per_head = per_head;
            let elements: Vec<f32> = codes.iter().map(|&c| variant.query.element.decode(c)).collect();
            let kernel: Vec<f32>;
            let scored: Vec<f32>;
            if per_head == 1 {
                kernel = IndexerQuery::scaled_head_weights(&w, &scales, d, variant.scoring);
                scored = elements.clone();
            } else {
                kernel = IndexerQuery::scaled_head_weights(&w, &vec![1.0; heads], d, variant.scoring);
                let per = d / per_head;
                scored =
                    elements.iter().enumerate().map(|(i, &v)| dsa_recall::tensors::check::capture::scaled(v, scales[i / per])).collect();
            }
            for head in codes.chunks_exact(d) {
                let mut b = vec![0u8; q_format.bytes_for(d)];
                for (j, &c) in head.iter().enumerate() {
                    q_format.put(&mut b, j, c, l.codes.low_nibble_first);
                }
                q_codes.extend(b);
            }
            if variant.query.scaling.is_some() {
                q_scales.extend_from_slice(&scales);
            }
            q_float.extend_from_slice(&q);
            weights_raw.extend_from_slice(&w);
            weights_kernel.extend_from_slice(&kernel);
            scored_queries.push((scored, kernel));
        }
        // Layers in parallel, each from its own stream: the same bytes
        // whatever the thread count.
        let seed = spec.seed;
        let per_layer: Vec<Vec<Vec<f32>>> = {
            use rayon::prelude::*;
            let spec_ref = &spec;
            let queries_ref = &scored_queries;
            let (kp, tb) = (&key_pipeline, &table);
            let scoring = variant.scoring.logits;
            cache
                .par_chunks_mut(blocks * stride)
                .enumerate()
                .map(|(layer, bytes)| -> Result<Vec<Vec<f32>>, Error> {
                    let mut rng = ChaCha8Rng::seed_from_u64(dsa_recall::base::rng::mix64(seed ^ (layer as u64 + 1)));
                    let keys = write_layer(spec_ref, kp, tb, bytes, &mut rng)?;
                    Ok((0..spec_ref.queries_per_layer)
                        .map(|i| {
                            let (q, w) = &queries_ref[layer * spec_ref.queries_per_layer + i];
                            let mut out = vec![0f32; spec_ref.seq_len];
                            IndexerQuery::from_head_weights(q.clone(), w.clone(), d, scoring).score_quantized_rows(&keys, &mut out);
                            out
                        })
                        .collect())
                })
                .collect::<Result<_, Error>>()?
        };
        let reference: Vec<Vec<f32>> = per_layer.into_iter().flatten().collect();
        let layer: Vec<i64> = (0..pairs).map(|p| (p / spec.queries_per_layer) as i64).collect();
        let query: Vec<i64> = (0..pairs).map(|p| (spec.seq_len - spec.queries_per_layer + p % spec.queries_per_layer) as i64).collect();
        let max_blocks = used;
        let block_table: Vec<i32> = (0..pairs).flat_map(|_| table.iter().copied()).collect();
        let mut out = SyntheticCapture {
            spec,
            variant,
            cache,
            blocks_per_layer: blocks,
            pairs,
            block_table,
            max_blocks,
            layer,
            query,
            q_float,
            q_codes,
            q_format,
            q_scales,
            q_scales_per_head,
            weights_raw,
            weights_kernel,
            selected: Vec::new(),
            logits: Vec::new(),
            reference,
            scored_queries,
        };
        for p in 0..out.pairs {
            let logits = std::mem::take(&mut out.reference[p]);
            out.set_selection(p, &logits, TieOrder::Lowest);
            out.reference[p] = logits;
        }
        Ok(out)
    }

    /// The reference logits of pair `p` (exactly what `check` computes).
    pub fn reference_logits(&self, p: usize) -> Vec<f32> {
        self.reference[p].clone()
    }

    /// An engine's logits of pair `p` computed naively from bytes: every
    /// key dequantized first (`read_row` fills values already multiplied by
    /// their scales), f32 sums in index order, heads in order, then the
    /// pipeline's logit rounding; `relu` false drops the ReLU.
    pub fn naive_logits(&self, p: usize, relu: bool, read_row: &dyn Fn(usize, &mut [f32])) -> Vec<f32> {
        let d = self.spec.layout.dim;
        let (q, w) = &self.scored_queries[p];
        let mut k = vec![0f32; d];
        (0..self.spec.seq_len)
            .map(|r| {
                read_row(r, &mut k);
                let mut acc = 0f32;
                for (qh, &wh) in q.chunks_exact(d).zip(w) {
                    let mut dot = 0f32;
                    for j in 0..d {
                        dot += qh[j] * k[j];
                    }
                    acc += wh * if relu { dot.max(0.0) } else { dot };
                }
                self.variant.scoring.logits.round(acc)
            })
            .collect()
    }

    /// Physical block of logical block `b` (the request's table).
    pub fn physical(&self, b: usize) -> usize {
        self.block_table[b] as usize
    }

    /// The bytes of `layer`'s physical block `b`.
    pub fn block(&self, layer: usize, b: usize) -> &[u8] {
        let stride = self.spec.layout.block_stride();
        &self.cache[(layer * self.blocks_per_layer + b) * stride..][..stride]
    }

    /// Sets pair `p`'s selection to the top k of `logits` (NaN first), ties
    /// broken by `tie`, and records the logits.
    pub fn set_selection(&mut self, p: usize, logits: &[f32], tie: TieOrder) {
        let n = self.spec.seq_len;
        let k = self.spec.topk;
        if self.selected.len() != self.pairs * k {
            self.selected = vec![-1; self.pairs * k];
            self.logits = vec![0.0; self.pairs * n];
        }
        let mut idx: Vec<usize> = (0..n).collect();
        let rank = |x: f32| dsa_recall::tensors::check::engine::rank(x);
        idx.sort_by(|&a, &b| {
            rank(logits[b]).total_cmp(&rank(logits[a])).then(match tie {
                TieOrder::Lowest => a.cmp(&b),
                TieOrder::Highest => b.cmp(&a),
            })
        });
        let row = &mut self.selected[p * k..(p + 1) * k];
        row.fill(-1);
        for (slot, &r) in row.iter_mut().zip(idx.iter().take(k)) {
            *slot = r as i64;
        }
        self.logits[p * n..(p + 1) * n].copy_from_slice(logits);
    }

    /// Sets pair `p`'s selection directly (logical rows, −1 padded).
    pub fn set_rows(&mut self, p: usize, rows: &[i64]) {
        let k = self.spec.topk;
        let row = &mut self.selected[p * k..(p + 1) * k];
        row.fill(-1);
        for (slot, &r) in row.iter_mut().zip(rows) {
            *slot = r;
        }
    }

    /// The tensors and metadata, named as docs/TENSORS.md says.
    pub fn tensors(&self) -> (Vec<(String, RawOut<'_>)>, String) {
        let s = &self.spec;
        let l = &s.layout;
        let stride = l.block_stride();
        let (pairs, heads) = (self.pairs, s.heads);
        let mut t: Vec<(String, RawOut)> = Vec::new();
        let kv_shape = if s.layers == 1 { vec![self.blocks_per_layer, stride] } else { vec![s.layers, self.blocks_per_layer, stride] };
        t.push(("kv_cache".into(), RawOut::bytes(Dtype::U8, kv_shape, &self.cache)));
        t.push(("block_table".into(), RawOut::i32s(&self.block_table, vec![pairs, self.max_blocks])));
        t.push(("seq_len".into(), RawOut::i64s(&vec![s.seq_len as i64; pairs], vec![pairs])));
        t.push(("layer".into(), RawOut::i64s(&self.layer, vec![pairs])));
        t.push(("query".into(), RawOut::i64s(&self.query, vec![pairs])));
        match s.query_form {
            QueryForm::Codes => {
                let per_head = self.q_codes.len() / (pairs * heads);
                t.push(("q_codes".into(), RawOut::bytes(Dtype::U8, vec![pairs, heads, per_head], &self.q_codes)));
                if !self.q_scales.is_empty() {
                    t.push(("q_scales".into(), RawOut::f32s(&self.q_scales, vec![pairs, heads, self.q_scales_per_head])));
                }
                t.push(("weights".into(), RawOut::f32s(&self.weights_kernel, vec![pairs, heads])));
            }
            QueryForm::Float => {
                t.push(("q".into(), RawOut::f32s(&self.q_float, vec![pairs, heads, l.dim])));
                t.push(("weights".into(), RawOut::f32s(&self.weights_raw, vec![pairs, heads])));
            }
        }
        let selected: Vec<i32> = self.selected.iter().map(|&x| x as i32).collect();
        t.push(("topk_indices".into(), RawOut::i32s(&selected, vec![pairs, s.topk])));
        if s.with_logits {
            t.push(("logits".into(), RawOut::f32s(&self.logits, vec![pairs, s.seq_len])));
        }
        let meta = CaptureMeta {
            layout: Some(l.to_toml()),
            pipeline: Some(s.pipeline.clone()),
            weights: Some(if s.query_form == QueryForm::Codes { "kernel" } else { "raw" }.into()),
            topk: Some(s.topk),
            index_space: Some("logical".into()),
            q_format: Some(self.q_format.name().into()),
            block_stride_bytes: s.block_stride_bytes,
            note: Some(format!("dsa-recall synthetic capture, seed {}", s.seed)),
            ..Default::default()
        };
        (t, serde_json::to_string(&meta).unwrap_or_default())
    }

    /// The capture as one safetensors file.
    pub fn to_safetensors(&self) -> Result<Vec<u8>, Error> {
        let (tensors, meta) = self.tensors();
        let info = std::collections::HashMap::from([(META_KEY.to_string(), meta)]);
        safetensors::serialize(tensors.iter().map(|(n, t)| (n.clone(), t)), Some(info)).map_err(config)
    }

    /// Streams the capture to `path` (through a temporary file renamed at
    /// the end), never holding a second copy of the cache.
    pub fn write_safetensors(&self, path: &Path) -> Result<(), Error> {
        let (tensors, meta) = self.tensors();
        let info = std::collections::HashMap::from([(META_KEY.to_string(), meta)]);
        dsa_recall::base::files::write_file_with(path, |_, tmp| {
            safetensors::serialize_to_file(tensors.iter().map(|(n, t)| (n.clone(), t)), Some(info), tmp).map_err(config)
        })
    }

    /// The capture as a folder of `NAME.npy` files and `meta.json`.
    pub fn write_npy_dir(&self, dir: &Path) -> Result<(), Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let (tensors, meta) = self.tensors();
        for (name, t) in &tensors {
            dsa_recall::base::files::write_file(&dir.join(format!("{name}.npy")), &t.to_npy())?;
        }
        dsa_recall::base::files::write_file(&dir.join(META_FILE), meta.as_bytes())
    }
}

/// A layer's raw keys: rows of varied size (so row scales differ), the
/// tied rows copied; split into the scaled part and the unscaled tail.
fn raw_keys(spec: &SyntheticSpec, rng: &mut ChaCha8Rng) -> (Vec<f32>, Vec<f32>) {
    let l = &spec.layout;
    let (d, scaled) = (l.dim, l.scaled_dim());
    let mut raw: Vec<f32> = Vec::with_capacity(spec.seq_len * d);
    for _ in 0..spec.seq_len {
        let size = (0.5 * rng.sample::<f32, _>(StandardNormal)).exp();
        raw.extend((0..d).map(|_| size * rng.sample::<f32, _>(StandardNormal)));
    }
    if let Some((first, count)) = spec.tied_rows {
        let src: Vec<f32> = raw[first * d..(first + 1) * d].to_vec();
        for r in first + 1..=(first + count).min(spec.seq_len - 1) {
            raw[r * d..(r + 1) * d].copy_from_slice(&src);
        }
    }
    if l.tail.is_some() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for row in raw.chunks_exact(d) {
            a.extend_from_slice(&row[..scaled]);
            b.extend_from_slice(&row[scaled..]);
        }
        (a, b)
    } else {
        (raw, Vec::new())
    }
}

/// The scaled parts of the keys through the key pipeline: rotated when it
/// rotates, then one block of `scaled` values per row.
fn quantize_keys(key_pipeline: &QuantPipeline, scaled_raw: &[f32], scaled: usize, seq_len: usize) -> Result<QuantizedBlocks, Error> {
    let element = key_pipeline.element;
    let mut values = scaled_raw.to_vec();
    if key_pipeline.rotation == Rotation::Hadamard {
        hadamard_rows_in_place(&mut values, scaled).map_err(sim)?;
    }
    Ok(match &key_pipeline.scaling {
        Some(s) => {
            let mut q = QuantizedBlocks::default();
            quantize_dequantize(&mut values, scaled, element, s, Some(&mut q)).map_err(sim)?;
            q
        }
        None => QuantizedBlocks {
            element,
            block_len: scaled,
            codes: values.iter().map(|&x| element.encode(x, Overflow::Cast)).collect(),
            scales: vec![1.0; seq_len],
        },
    })
}

/// Writes one layer's keys into its cache bytes (`layer_bytes`, every block
/// of the layer) and gives the rows as the reference scores them.
fn write_layer(
    spec: &SyntheticSpec,
    key_pipeline: &QuantPipeline,
    table: &[i32],
    layer_bytes: &mut [u8],
    rng: &mut ChaCha8Rng,
) -> Result<QuantizedRows, Error> {
    let l = &spec.layout;
    let (d, rpb, stride, scaled) = (l.dim, l.rows_per_block, l.block_stride(), l.scaled_dim());
    let element = key_pipeline.element;
    let (scaled_raw, tail_raw) = raw_keys(spec, rng);
    let blocks_q = quantize_keys(key_pipeline, &scaled_raw, scaled, spec.seq_len)?;
    let per_row = l.scales_per_row();
    let tail_format = l.tail.as_ref().map(|t| t.format);
    let mut rows = QuantizedRows::with_capacity(spec.seq_len, d);
    for r in 0..spec.seq_len {
        let block = &mut layer_bytes[table[r / rpb] as usize * stride..][..stride];
        let slot = r % rpb;
        let codes = &blocks_q.codes[r * scaled..(r + 1) * scaled];
        let mut code_bytes = vec![0u8; l.code_bytes_per_row()];
        for (j, &c) in codes.iter().enumerate() {
            l.codes.format.put(&mut code_bytes, j, c, l.codes.low_nibble_first);
        }
        for (c, &b) in code_bytes.iter().enumerate() {
            block[code_offset(l, slot, c)] = b;
        }
        let row_scales = if per_row > 0 { &blocks_q.scales[r * per_row..(r + 1) * per_row] } else { &[][..] };
        if let Some(s) = &l.scales {
            for (i, &sc) in row_scales.iter().enumerate() {
                let off = scale_offset(l, slot, i);
                s.dtype.encode(sc, &mut block[off..off + s.dtype.bytes()]);
            }
        }
        // The reference's view of the row: element values and one
        // scale, or dequantized values.
        let elements: Vec<f32> = codes.iter().map(|&c| element.decode(c)).collect();
        if l.one_scale_per_row() {
            rows.values.extend_from_slice(&elements);
            rows.row_scales.push(row_scales[0]);
        } else {
            let vps = l.scales.as_ref().map_or(scaled, |s| s.values_per_scale);
            rows.values.extend(elements.iter().enumerate().map(|(j, &v)| {
                if per_row == 0 {
                    v
                } else {
                    dsa_recall::tensors::check::capture::scaled(v, row_scales[j / vps])
                }
            }));
            rows.row_scales.push(1.0);
        }
        if let (Some(t), Some(format)) = (&l.tail, tail_format) {
            let tail = &tail_raw[r * t.values..(r + 1) * t.values];
            let e = format.element().ok_or_else(|| config("tail format"))?;
            let w = format.bytes_for(1);
            for (j, &x) in tail.iter().enumerate() {
                let code = e.encode(x, Overflow::Cast);
                let mut b = vec![0u8; w];
                format.put(&mut b, 0, code, true);
                let off = slot * l.record_bytes() + t.offset + j * w;
                block[off..off + w].copy_from_slice(&b);
                rows.values.push(e.decode(code));
            }
        }
    }
    Ok(rows)
}

/// How a synthetic engine orders tied rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TieOrder {
    Lowest,
    Highest,
}

fn resolve(text: &str, dim: usize) -> Result<PrecisionVariant, Error> {
    use dsa_recall::config::precision::{custom_variant, named_variant, parse_compact};
    if text.contains(';') {
        let p = parse_compact(text).map_err(config)?;
        Ok(custom_variant(0, &p, dim, &[]).map_err(config)?)
    } else {
        Ok(named_variant("pipeline", text, &[]).map_err(config)?)
    }
}

fn code_format_of(e: ElementFormat) -> CodeFormat {
    match e {
        ElementFormat::E4m3fn => CodeFormat::E4m3fn,
        ElementFormat::E5m2 => CodeFormat::E5m2,
        ElementFormat::E2m1 => CodeFormat::E2m1,
        ElementFormat::Bf16 => CodeFormat::Bf16,
        ElementFormat::F16 => CodeFormat::F16,
        ElementFormat::F32 => CodeFormat::F32,
    }
}

/// The writer's own addressing of the declared layout (written apart from
/// the reader so that each checks the other).
pub fn code_offset(l: &CacheLayout, slot: usize, c: usize) -> usize {
    let per_row = l.code_bytes_per_row();
    match (l.codes.placement, l.codes.tile) {
        (Placement::Interleaved, _) => slot * l.record_bytes() + l.codes.offset + c,
        (Placement::Planar, None) => l.codes.offset + slot * per_row + c,
        (Placement::Planar, Some(t)) => {
            let (row_tile, row_in) = (slot / t, slot % t);
            let (col_tile, col_in) = (c / t, c % t);
            l.codes.offset + row_tile * t * per_row + col_tile * t * t + row_in * t + col_in
        }
    }
}

/// Byte of scale `i` of row `slot` in its block.
pub fn scale_offset(l: &CacheLayout, slot: usize, i: usize) -> usize {
    let s = l.scales.as_ref().expect("a layout with scales");
    match s.placement {
        Placement::Interleaved => slot * l.record_bytes() + s.offset + i * s.dtype.bytes(),
        Placement::Planar => s.offset + slot * l.scale_bytes_per_row() + i * s.dtype.bytes(),
    }
}

/// Row `slot` of a block dequantized as the declared layout says (codes
/// times their scales, tail as is): a naive engine's reader.
pub fn dequantize_row(l: &CacheLayout, block: &[u8], slot: usize, out: &mut [f32]) {
    let scaled = l.scaled_dim();
    let per_row = l.code_bytes_per_row();
    let code_bytes: Vec<u8> = (0..per_row).map(|c| block[code_offset(l, slot, c)]).collect();
    for (j, v) in out[..scaled].iter_mut().enumerate() {
        *v = l.codes.format.decode_at(&code_bytes, j, l.codes.low_nibble_first);
    }
    if let Some(s) = &l.scales {
        for (j, v) in out[..scaled].iter_mut().enumerate() {
            let off = scale_offset(l, slot, j / s.values_per_scale);
            *v = dsa_recall::tensors::check::capture::scaled(*v, s.dtype.decode(&block[off..off + s.dtype.bytes()]));
        }
    }
    if let Some(t) = &l.tail {
        let w = t.format.bytes_for(1);
        for (j, v) in out[scaled..].iter_mut().enumerate() {
            let off = slot * l.record_bytes() + t.offset + j * w;
            *v = t.format.decode_at(&block[off..off + w], 0, true);
        }
    }
}

/// A tensor to write (the key cache borrowed, the rest owned).
pub struct RawOut<'a> {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Cow<'a, [u8]>,
}

impl<'a> RawOut<'a> {
    fn bytes(dtype: Dtype, shape: Vec<usize>, data: &'a [u8]) -> RawOut<'a> {
        RawOut { dtype, shape, data: Cow::Borrowed(data) }
    }
    fn f32s(v: &[f32], shape: Vec<usize>) -> RawOut<'a> {
        RawOut { dtype: Dtype::F32, shape, data: Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()) }
    }
    fn i32s(v: &[i32], shape: Vec<usize>) -> RawOut<'a> {
        RawOut { dtype: Dtype::I32, shape, data: Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()) }
    }
    fn i64s(v: &[i64], shape: Vec<usize>) -> RawOut<'a> {
        RawOut { dtype: Dtype::I64, shape, data: Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()) }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Replaces the data (for tests that corrupt a tensor).
    pub fn data_mut(&mut self) -> &mut Vec<u8> {
        self.data.to_mut()
    }

    pub fn set_shape(&mut self, shape: Vec<usize>) {
        self.shape = shape;
    }

    /// As a `.npy` file.
    pub fn to_npy(&self) -> Vec<u8> {
        let descr = match self.dtype {
            Dtype::U8 => "|u1",
            Dtype::I32 => "<i4",
            Dtype::I64 => "<i8",
            _ => "<f4",
        };
        let mut out = dsa_recall::tensors::npy::npy_header(descr, &self.shape);
        out.extend_from_slice(&self.data);
        out
    }
}

impl View for &RawOut<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.data.as_ref())
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Serializes tensors (e.g. a corrupted copy of [`SyntheticCapture::tensors`]) with metadata.
pub fn serialize(tensors: &[(String, RawOut<'_>)], meta: &str) -> Result<Vec<u8>, Error> {
    let info = std::collections::HashMap::from([(META_KEY.to_string(), meta.to_string())]);
    safetensors::serialize(tensors.iter().map(|(n, t)| (n.clone(), t)), Some(info)).map_err(config)
}

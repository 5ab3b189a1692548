//! `dsa-recall replay`: recorded indexer tensors through every precision
//! variant, compared with the exact fp32 selection.

use super::dump::{select_top_k, variant_logits};
use super::npy::read_npy;
use super::{bad_file, read_bounded};
use crate::base::rng::{self, tag};
use crate::error::Error;
use crate::score::agreement::{agreement, Agreement};
use crate::score::selection::TieRule;
use crate::score::selection::{tie_key, NanOrder};
use crate::score::variant::PrecisionVariant;
#[cfg(test)]
use ndarray::s;
use ndarray::{Array2, Array3, Array4, ArrayView2, ArrayView3, Axis};
use safetensors::{Dtype, SafeTensors};
use serde::Serialize;
use std::path::Path;

/// Tensor names to look up in a safetensors file.
#[derive(Clone, Debug)]
pub struct TensorNames {
    pub queries: String,
    pub keys: String,
    pub weights: String,
    /// Optional: rows holding the needle.
    pub needle_rows: String,
}

impl Default for TensorNames {
    fn default() -> Self {
        TensorNames { queries: "queries".into(), keys: "keys".into(), weights: "weights".into(), needle_rows: "needle_rows".into() }
    }
}

/// Recorded tensors, validated: `tokens` queries of [heads × dim], their
/// head weights, and the keys [rows × dim].
#[derive(Clone, Debug)]
pub struct Recorded {
    pub heads: usize,
    pub dim: usize,
    pub tokens: usize,
    pub rows: usize,
    pub queries: Vec<f32>,
    pub weights: Vec<f32>,
    pub keys: Vec<f32>,
    pub needle_rows: Vec<u64>,
    /// Tie order of the selection (a dsa-recall dump's own; lowest index otherwise).
    pub tie_rule: TieRule,
    pub tie_seed: Option<u64>,
}

fn to_f32(path: &Path, name: &str, dtype: Dtype, data: &[u8]) -> Result<Vec<f32>, Error> {
    Ok(match dtype {
        Dtype::F32 => data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        Dtype::F16 => data.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::BF16 => data.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::F64 => data.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).collect(),
        other => return Err(bad_file(path, format!("tensor {name:?} has dtype {other:?}; use F32, F16, BF16 or F64"))),
    })
}

/// Where each tensor came from, for errors: one file for all three (a
/// safetensors file, arrays) or one file each (.npy).
#[derive(Clone, Copy)]
struct Sources<'a> {
    queries: &'a Path,
    keys: &'a Path,
    weights: &'a Path,
}

impl<'a> Sources<'a> {
    fn one(path: &'a Path) -> Self {
        Sources { queries: path, keys: path, weights: path }
    }

    /// Refuses a tensor with no values, naming its file.
    fn refuse_empty(&self, q: &[usize], k: &[usize], w: &[usize]) -> Result<(), Error> {
        let named = [(self.queries, q), (self.keys, k), (self.weights, w)];
        match named.iter().find(|(_, shape)| shape.contains(&0)) {
            Some((path, _)) => Err(bad_file(path, "empty tensors")),
            None => Ok(()),
        }
    }

    /// Refuses NaN or infinite values, naming the file that holds them.
    fn refuse_non_finite(&self, q: &[f32], k: &[f32], w: &[f32]) -> Result<(), Error> {
        let named = [(self.queries, q), (self.keys, k), (self.weights, w)];
        match named.iter().find(|(_, values)| values.iter().any(|x| !x.is_finite())) {
            Some((path, _)) => Err(bad_file(path, "tensors hold NaN or infinite values")),
            None => Ok(()),
        }
    }
}

/// Checks shapes and assembles the recorded tensors.
fn assemble(src: Sources, q: (Vec<usize>, Vec<f32>), k: (Vec<usize>, Vec<f32>), w: (Vec<usize>, Vec<f32>)) -> Result<Recorded, Error> {
    let (tokens, heads, dim) = match q.0.as_slice() {
        [h, d] => (1, *h, *d),
        [t, h, d] => (*t, *h, *d),
        s => return Err(bad_file(src.queries, format!("queries have shape {s:?}; expected [heads, dim] or [tokens, heads, dim]"))),
    };
    let rows = match k.0.as_slice() {
        [n, d] if *d == dim => *n,
        s => return Err(bad_file(src.keys, format!("keys have shape {s:?}; expected [rows, {dim}] to match the queries"))),
    };
    match w.0.as_slice() {
        [h] if *h == heads && tokens == 1 => {}
        [t, h] if *t == tokens && *h == heads => {}
        [h] if *h == heads => {}
        s => return Err(bad_file(src.weights, format!("weights have shape {s:?}; expected [{heads}] or [{tokens}, {heads}]"))),
    }
    src.refuse_empty(&q.0, &k.0, &w.0)?;
    // One weight vector for all tokens when only [heads] is given.
    let weights = if w.1.len() == heads { w.1.repeat(tokens) } else { w.1 };
    src.refuse_non_finite(&q.1, &k.1, &weights)?;
    Ok(Recorded {
        heads,
        dim,
        tokens,
        rows,
        queries: q.1,
        weights,
        keys: k.1,
        needle_rows: vec![],
        tie_rule: TieRule::LowestIndex,
        tie_seed: None,
    })
}

/// Per-layer recorded tensors, validated: a leading layer axis on every
/// tensor (docs/TENSORS.md). Needle rows are the same row indices in every layer.
#[derive(Clone, Debug)]
pub struct Layered {
    /// `[layers, tokens, heads, dim]`
    pub queries: Array4<f32>,
    /// `[layers, tokens, heads]`: raw head weights w_h, one vector per token.
    pub weights: Array3<f32>,
    /// `[layers, rows, dim]`
    pub keys: Array3<f32>,
    pub needle_rows: Vec<u64>,
    pub tie_rule: TieRule,
    pub tie_seed: Option<u64>,
}

/// Sizes of a capture's axes; `layers` is None without a layer axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureShape {
    pub layers: Option<usize>,
    pub tokens: usize,
    pub heads: usize,
    pub dim: usize,
    pub rows: usize,
}

/// What a replay reads: one layer's tensors, or many layers'.
#[derive(Clone, Debug)]
pub enum Capture {
    Single(Recorded),
    Layered(Layered),
}

impl Capture {
    pub fn shape(&self) -> CaptureShape {
        match self {
            Capture::Single(r) => CaptureShape { layers: None, tokens: r.tokens, heads: r.heads, dim: r.dim, rows: r.rows },
            Capture::Layered(l) => {
                let (layers, tokens, heads, dim) = l.queries.dim();
                CaptureShape { layers: Some(layers), tokens, heads, dim, rows: l.keys.dim().1 }
            }
        }
    }

    pub fn needle_rows_mut(&mut self) -> &mut Vec<u64> {
        match self {
            Capture::Single(r) => &mut r.needle_rows,
            Capture::Layered(l) => &mut l.needle_rows,
        }
    }

    fn set_tie_order(&mut self, rule: TieRule, seed: Option<u64>) {
        match self {
            Capture::Single(r) => (r.tie_rule, r.tie_seed) = (rule, seed),
            Capture::Layered(l) => (l.tie_rule, l.tie_seed) = (rule, seed),
        }
    }

    /// The one-layer tensors, or an error naming the keys' layer axis.
    fn single(self, path: &Path) -> Result<Recorded, Error> {
        match self {
            Capture::Single(r) => Ok(r),
            Capture::Layered(l) => Err(bad_file(
                path,
                format!("keys have shape {:?}; expected [rows, dim] (per-layer tensors are read by load_capture_*)", l.keys.shape()),
            )),
        }
    }
}

/// Checks shapes and assembles the tensors: keys with three axes
/// `[layers, rows, dim]` make a per-layer capture, otherwise [`assemble`].
fn assemble_capture(
    src: Sources,
    q: (Vec<usize>, Vec<f32>),
    k: (Vec<usize>, Vec<f32>),
    w: (Vec<usize>, Vec<f32>),
) -> Result<Capture, Error> {
    let (layers, rows, dim) = match k.0.as_slice() {
        [l, n, d] => (*l, *n, *d),
        _ => {
            if q.0.len() == 4 {
                return Err(bad_file(
                    src.keys,
                    format!(
                        "queries have shape {:?} (a layer axis) but keys have shape {:?}; per-layer keys are [layers, rows, dim]",
                        q.0, k.0
                    ),
                ));
            }
            return assemble(src, q, k, w).map(Capture::Single);
        }
    };
    let (q_layers, tokens, heads, q_dim) = match q.0.as_slice() {
        [l, h, d] => (*l, 1, *h, *d),
        [l, t, h, d] => (*l, *t, *h, *d),
        s => {
            return Err(bad_file(
                src.queries,
                format!("queries have shape {s:?}; expected [layers, heads, dim] or [layers, tokens, heads, dim] with keys {:?}", k.0),
            ))
        }
    };
    if q_layers != layers {
        return Err(bad_file(
            src.keys,
            format!("queries have shape {:?} but keys have shape {:?}: layers {q_layers} against {layers}", q.0, k.0),
        ));
    }
    if q_dim != dim {
        return Err(bad_file(src.keys, format!("queries have shape {:?} but keys have shape {:?}: dim {q_dim} against {dim}", q.0, k.0)));
    }
    let expected = format!("[{layers}, {heads}] or [{layers}, {tokens}, {heads}] to match queries {:?}", q.0);
    let shared = match w.0.as_slice() {
        [l, h] if *l == layers && *h == heads => true,
        [l, t, h] if *l == layers && *t == tokens && *h == heads => false,
        s => {
            let axis = match s {
                [l, _] | [l, _, _] if *l != layers => format!(": layers {l} against {layers}"),
                [_, h] | [_, _, h] if *h != heads => format!(": heads {h} against {heads}"),
                [_, t, _] if *t != tokens => format!(": tokens {t} against {tokens}"),
                _ => String::new(),
            };
            return Err(bad_file(src.weights, format!("weights have shape {s:?}{axis}; expected {expected}")));
        }
    };
    src.refuse_empty(&q.0, &k.0, &w.0)?;
    src.refuse_non_finite(&q.1, &k.1, &w.1)?;
    let shape_error = |e: ndarray::ShapeError| bad_file(src.keys, format!("tensor data do not fill their shape: {e}"));
    let queries = Array4::from_shape_vec((layers, tokens, heads, dim), q.1).map_err(shape_error)?;
    let keys = Array3::from_shape_vec((layers, rows, dim), k.1).map_err(shape_error)?;
    let weights = if shared {
        // One weight vector per layer, for all of its tokens.
        let w = Array2::from_shape_vec((layers, heads), w.1).map_err(shape_error)?;
        w.insert_axis(Axis(1))
            .broadcast((layers, tokens, heads))
            .map(|v| v.to_owned())
            .ok_or_else(|| bad_file(src.weights, "weights do not broadcast"))?
    } else {
        Array3::from_shape_vec((layers, tokens, heads), w.1).map_err(shape_error)?
    };
    Ok(Capture::Layered(Layered { queries, weights, keys, needle_rows: vec![], tie_rule: TieRule::LowestIndex, tie_seed: None }))
}

/// Reads recorded tensors from a safetensors file (one layer: keys `[rows, dim]`).
pub fn load_safetensors(path: &Path, names: &TensorNames) -> Result<Recorded, Error> {
    load_capture_safetensors(path, names)?.single(path)
}

/// Reads recorded tensors from a safetensors file, with or without a
/// leading layer axis (keys `[layers, rows, dim]` make it per-layer).
pub fn load_capture_safetensors(path: &Path, names: &TensorNames) -> Result<Capture, Error> {
    let bytes = read_bounded(path)?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| bad_file(path, format!("not a valid safetensors file: {e}")))?;
    let get = |name: &str| -> Result<(Vec<usize>, Vec<f32>), Error> {
        let t = st.tensor(name).map_err(|_| {
            let mut have: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
            have.sort();
            bad_file(
                path,
                format!("no tensor {name:?} (the file has {}); set the name with --q-name/--k-name/--weights-name", have.join(", ")),
            )
        })?;
        Ok((t.shape().to_vec(), to_f32(path, name, t.dtype(), t.data())?))
    };
    let mut cap = assemble_capture(Sources::one(path), get(&names.queries)?, get(&names.keys)?, get(&names.weights)?)?;
    if let Ok(t) = st.tensor(&names.needle_rows) {
        if t.dtype() != Dtype::I64 || t.shape().len() != 1 {
            return Err(bad_file(path, format!("{:?} must be a 1-D I64 tensor", names.needle_rows)));
        }
        let needle_rows: Vec<u64> = t.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as u64).collect();
        if needle_rows.iter().any(|&r| r as usize >= cap.shape().rows) {
            return Err(bad_file(path, "needle_rows point past the last key row"));
        }
        *cap.needle_rows_mut() = needle_rows;
    }
    // A dsa-recall dump carries its tie order, so its selections replay exactly.
    if let Ok((_, meta)) = SafeTensors::read_metadata(&bytes) {
        if let Some(json) = meta.metadata().as_ref().and_then(|m| m.get("dsa_recall")) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(json) {
                let rule = serde_json::from_value(v["tie_rule"].clone()).unwrap_or(TieRule::LowestIndex);
                cap.set_tie_order(rule, v["trial_seed"].as_u64());
            }
        }
    }
    Ok(cap)
}

/// Recorded tensors handed over in memory (the Python binding's arrays),
/// each as (shape, values in row-major order), checked as a file's would be;
/// errors name `location`.
pub fn capture_from_arrays(
    location: &str,
    queries: (Vec<usize>, Vec<f32>),
    keys: (Vec<usize>, Vec<f32>),
    weights: (Vec<usize>, Vec<f32>),
) -> Result<Capture, Error> {
    let path = Path::new(location);
    for (name, (shape, data)) in [("queries", &queries), ("keys", &keys), ("weights", &weights)] {
        if shape.iter().product::<usize>() != data.len() {
            return Err(bad_file(path, format!("{name} have shape {shape:?} but {} values", data.len())));
        }
    }
    assemble_capture(Sources::one(path), queries, keys, weights)
}

/// Reads recorded tensors from three `.npy` files (one layer).
pub fn load_npy(q: &Path, k: &Path, w: &Path) -> Result<Recorded, Error> {
    load_capture_npy(q, k, w)?.single(k)
}

/// Reads recorded tensors from three `.npy` files, with or without a
/// leading layer axis.
pub fn load_capture_npy(q: &Path, k: &Path, w: &Path) -> Result<Capture, Error> {
    let (qa, ka, wa) = (read_npy(q)?, read_npy(k)?, read_npy(w)?);
    assemble_capture(Sources { queries: q, keys: k, weights: w }, (qa.shape, qa.data), (ka.shape, ka.data), (wa.shape, wa.data))
}

/// One line of a replay: a query token, a k and a variant (and a layer,
/// for per-layer inputs).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayRow {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<usize>,
    pub token: usize,
    pub topk: u64,
    pub k_eff: u64,
    pub precision: String,
    /// Share of the fp32 top-k_eff rows this variant also selects.
    pub selection_recall: f64,
    pub jaccard: f64,
    /// With needle rows: whether one is selected, and the best one's rank
    /// (rows scoring strictly higher).
    pub needle_survived: Option<bool>,
    pub needle_rank: Option<u64>,
}

/// One layer's tensors: queries `[tokens, heads, dim]`, weights
/// `[tokens, heads]`, keys `[rows, dim]`.
struct LayerViews<'a> {
    queries: ArrayView3<'a, f32>,
    weights: ArrayView2<'a, f32>,
    keys: ArrayView2<'a, f32>,
    needle_rows: &'a [u64],
    tie_rule: TieRule,
    tie_seed: Option<u64>,
}

fn internal(message: String) -> Error {
    Error::Input { location: "recorded tensors".into(), message }
}

/// The values of a standard-layout array, in order.
fn values<'a, D: ndarray::Dimension>(a: &'a ndarray::CowArray<'_, f32, D>) -> Result<&'a [f32], Error> {
    a.as_slice().ok_or_else(|| internal("not in row-major order".into()))
}

/// One layer's exact fp32 selections, `[token][k index]`.
type ExactSets = Vec<Vec<Vec<u64>>>;

/// Replays every token × k × variant of one layer; also returns the exact
/// fp32 selections, `[token][k index]`.
fn replay_layer(
    x: &LayerViews,
    variants: &[PrecisionVariant],
    topks: &[u64],
    layer: Option<usize>,
) -> Result<(Vec<ReplayRow>, ExactSets), Error> {
    let exact = PrecisionVariant::builtin("fp32").ok_or_else(|| Error::Chart("fp32 variant missing".into()))?;
    let (tokens, _, d) = x.queries.dim();
    let rows = x.keys.nrows();
    let keys = x.keys.as_standard_layout();
    let keys = values(&keys)?;
    let mut out = Vec::new();
    let mut exact_sets = Vec::with_capacity(tokens);
    for t in 0..tokens {
        let (q, w) = (x.queries.index_axis_move(Axis(0), t), x.weights.index_axis_move(Axis(0), t));
        let (q, w) = (q.as_standard_layout(), w.as_standard_layout());
        let (q, w) = (values(&q)?, values(&w)?);
        let reference = variant_logits(&exact, q, w, keys, d)?;
        let mut token_sets = Vec::with_capacity(topks.len());
        for &k in topks {
            let k_eff = (k as usize).min(rows);
            let ref_set = select_top_k(&reference, k_eff, x.tie_rule, x.tie_seed);
            for v in variants {
                let logits = variant_logits(v, q, w, keys, d)?;
                let set = select_top_k(&logits, k_eff, x.tie_rule, x.tie_seed);
                let both = set.iter().filter(|i| ref_set.binary_search(i).is_ok()).count() as f64;
                let (survived, rank) = if x.needle_rows.is_empty() {
                    (None, None)
                } else {
                    let best = x.needle_rows.iter().map(|&r| logits[r as usize]).fold(f32::NEG_INFINITY, f32::max);
                    let rank = (0..rows).filter(|i| !x.needle_rows.contains(&(*i as u64)) && logits[*i] > best).count() as u64;
                    (Some(x.needle_rows.iter().any(|r| set.binary_search(r).is_ok())), Some(rank))
                };
                out.push(ReplayRow {
                    layer,
                    token: t,
                    topk: k,
                    k_eff: k_eff as u64,
                    precision: v.name.clone(),
                    selection_recall: if k_eff == 0 { 1.0 } else { both / k_eff as f64 },
                    jaccard: if k_eff == 0 { 1.0 } else { both / (2.0 * k_eff as f64 - both) },
                    needle_survived: survived,
                    needle_rank: rank,
                });
            }
            token_sets.push(ref_set);
        }
        exact_sets.push(token_sets);
    }
    Ok((out, exact_sets))
}

/// Replays every token × k × variant.
pub fn replay(rec: &Recorded, variants: &[PrecisionVariant], topks: &[u64]) -> Result<Vec<ReplayRow>, Error> {
    super::dump::scores_rows_as_given(variants)?;
    Ok(replay_layer(&single_views(rec)?, variants, topks, None)?.0)
}

/// The tensors of a capture without a layer axis, as one layer's views.
fn single_views(rec: &Recorded) -> Result<LayerViews<'_>, Error> {
    let shape = |e: ndarray::ShapeError| internal(format!("sizes do not match the data: {e}"));
    Ok(LayerViews {
        queries: ArrayView3::from_shape((rec.tokens, rec.heads, rec.dim), &rec.queries).map_err(shape)?,
        weights: ArrayView2::from_shape((rec.tokens, rec.heads), &rec.weights).map_err(shape)?,
        keys: ArrayView2::from_shape((rec.rows, rec.dim), &rec.keys).map_err(shape)?,
        needle_rows: &rec.needle_rows,
        tie_rule: rec.tie_rule,
        tie_seed: rec.tie_seed,
    })
}

/// What a replay reports across layers (per-layer captures,
/// docs/TENSORS.md) and query tokens, one JSON line each, tagged by `summary`. Overlaps are of the exact fp32
/// top-k_eff sets; an overlap of sets A and B is |A ∩ B| / k_eff.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "summary", rename_all = "snake_case")]
pub enum Summary {
    /// Share of layer ℓ's top-k also in layer ℓ+1's, the same query token,
    /// averaged over tokens: `per_pair[ℓ]` for layers ℓ and ℓ+1, and their mean.
    AdjacentLayers { topk: u64, k_eff: u64, mean: f64, per_pair: Vec<f64> },
    /// Share of token t's top-k also in token t+1's, the same layer,
    /// averaged over token pairs: `per_layer[ℓ]`, and their mean.
    AdjacentTokens { topk: u64, k_eff: u64, mean: f64, per_layer: Vec<f64> },
    /// With needle rows: the layers in which at least one token's selection
    /// under `precision` holds a needle row, and whether there is one (the
    /// capture's whole-model retrieval, quorum 1).
    NeedleLayers {
        topk: u64,
        k_eff: u64,
        precision: String,
        layers: usize,
        layers_reached: usize,
        reached: bool,
        reached_layers: Vec<usize>,
    },
    /// With `--agreement A:B`, per pair and k over every (layer,) query
    /// token: the mean share of A's top-k that B also selects, the shares B
    /// leaves out only through a tie at a cut or for real, the tie share of
    /// the disagreement (None when they always agree), and the least agreement
    /// of one query (docs/MODEL.md, "Top-k agreement").
    Agreement {
        topk: u64,
        k_eff: u64,
        a: String,
        b: String,
        queries: usize,
        agreement: f64,
        tie_disagreement: f64,
        real_disagreement: f64,
        tie_share: Option<f64>,
        min_agreement: f64,
    },
}

/// A per-layer replay: every layer's rows, then the summaries across layers.
#[derive(Clone, Debug, PartialEq)]
pub struct LayeredReplay {
    pub rows: Vec<ReplayRow>,
    pub summaries: Vec<Summary>,
}

/// |a ∩ b| of two ascending index lists.
fn shared(a: &[u64], b: &[u64]) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => (i, j, n) = (i + 1, j + 1, n + 1),
        }
    }
    n
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Replays every layer × token × k × variant and summarises across layers.
pub fn replay_layered(cap: &Layered, variants: &[PrecisionVariant], topks: &[u64]) -> Result<LayeredReplay, Error> {
    super::dump::scores_rows_as_given(variants)?;
    let (layers, tokens, _, _) = cap.queries.dim();
    let rows = cap.keys.dim().1;
    let mut out = Vec::new();
    // sets[layer][token][k index]: the exact fp32 selections.
    let mut sets = Vec::with_capacity(layers);
    // hits[layer][k index][variant]: some token of the layer selects a needle row.
    let mut hits = Vec::with_capacity(layers);
    for l in 0..layers {
        let views = LayerViews {
            queries: cap.queries.index_axis(Axis(0), l),
            weights: cap.weights.index_axis(Axis(0), l),
            keys: cap.keys.index_axis(Axis(0), l),
            needle_rows: &cap.needle_rows,
            tie_rule: cap.tie_rule,
            tie_seed: cap.tie_seed,
        };
        let (layer_rows, layer_sets) = replay_layer(&views, variants, topks, Some(l))?;
        // Rows run token → k → variant.
        let mut layer_hits = vec![vec![false; variants.len()]; topks.len()];
        for (i, r) in layer_rows.iter().enumerate() {
            if r.needle_survived == Some(true) {
                layer_hits[(i / variants.len()) % topks.len()][i % variants.len()] = true;
            }
        }
        hits.push(layer_hits);
        out.extend(layer_rows);
        sets.push(layer_sets);
    }
    // Grouped by kind, each in the order of the k values.
    let (mut summaries, mut token_summaries) = (Vec::new(), Vec::new());
    for (ki, &k) in topks.iter().enumerate() {
        let k_eff = (k as usize).min(rows);
        let share = |a: &[u64], b: &[u64]| if k_eff == 0 { 1.0 } else { shared(a, b) as f64 / k_eff as f64 };
        if layers >= 2 {
            let per_pair: Vec<f64> = (0..layers - 1)
                .map(|l| mean(&(0..tokens).map(|t| share(&sets[l][t][ki], &sets[l + 1][t][ki])).collect::<Vec<_>>()))
                .collect();
            summaries.push(Summary::AdjacentLayers { topk: k, k_eff: k_eff as u64, mean: mean(&per_pair), per_pair });
        }
        if tokens >= 2 {
            let per_layer: Vec<f64> = (0..layers)
                .map(|l| mean(&(0..tokens - 1).map(|t| share(&sets[l][t][ki], &sets[l][t + 1][ki])).collect::<Vec<_>>()))
                .collect();
            token_summaries.push(Summary::AdjacentTokens { topk: k, k_eff: k_eff as u64, mean: mean(&per_layer), per_layer });
        }
    }
    summaries.append(&mut token_summaries);
    if !cap.needle_rows.is_empty() {
        for (ki, &k) in topks.iter().enumerate() {
            for (vi, v) in variants.iter().enumerate() {
                let reached_layers: Vec<usize> = (0..layers).filter(|&l| hits[l][ki][vi]).collect();
                summaries.push(Summary::NeedleLayers {
                    topk: k,
                    k_eff: (k as usize).min(rows) as u64,
                    precision: v.name.clone(),
                    layers,
                    layers_reached: reached_layers.len(),
                    reached: !reached_layers.is_empty(),
                    reached_layers,
                });
            }
        }
    }
    Ok(LayeredReplay { rows: out, summaries })
}

/// Every layer's tensors of a capture (one without a layer axis).
fn layer_views(cap: &Capture) -> Result<Vec<LayerViews<'_>>, Error> {
    Ok(match cap {
        Capture::Single(rec) => vec![single_views(rec)?],
        Capture::Layered(l) => (0..l.queries.dim().0)
            .map(|i| LayerViews {
                queries: l.queries.index_axis(Axis(0), i),
                weights: l.weights.index_axis(Axis(0), i),
                keys: l.keys.index_axis(Axis(0), i),
                needle_rows: &l.needle_rows,
                tie_rule: l.tie_rule,
                tie_seed: l.tie_seed,
            })
            .collect(),
    })
}

/// Top-k agreement of each pair (A, B) per k over every (layer,) query
/// token of `cap`, in the capture's tie order: one [`Summary::Agreement`]
/// per pair and k, pair-major (docs/MODEL.md, "Top-k agreement").
pub fn replay_agreement(cap: &Capture, pairs: &[(PrecisionVariant, PrecisionVariant)], topks: &[u64]) -> Result<Vec<Summary>, Error> {
    let rows = cap.shape().rows;
    // Per pair and k: the agreement of every query.
    let mut found: Vec<Vec<Vec<Agreement>>> = vec![vec![Vec::new(); topks.len()]; pairs.len()];
    let mut order = Vec::new();
    for x in layer_views(cap)? {
        let priority = |i: usize| x.tie_seed.map_or(i as u64, |s| rng::derive(s, &[tag::TIE, i as u64]));
        let tie_keys: Vec<u64> = (0..rows).map(|i| tie_key(x.tie_rule, i, priority)).collect();
        let keys = x.keys.as_standard_layout();
        let keys = values(&keys)?;
        for t in 0..x.queries.dim().0 {
            let (q, w) = (x.queries.index_axis(Axis(0), t), x.weights.index_axis(Axis(0), t));
            let (q, w) = (q.as_standard_layout(), w.as_standard_layout());
            let (q, w) = (values(&q)?, values(&w)?);
            for ((a, b), per_k) in pairs.iter().zip(&mut found) {
                let (la, lb) = (variant_logits(a, q, w, keys, x.queries.dim().2)?, variant_logits(b, q, w, keys, x.queries.dim().2)?);
                for (&k, out) in topks.iter().zip(per_k.iter_mut()) {
                    let k_eff = (k as usize).min(rows);
                    out.push(agreement(&la, &lb, &tie_keys, k_eff, &mut order, NanOrder::First, NanOrder::First));
                }
            }
        }
    }
    let mut summaries = Vec::new();
    for ((a, b), per_k) in pairs.iter().zip(found) {
        for (&k, all) in topks.iter().zip(per_k) {
            let n = all.len().max(1) as f64;
            let mean = |f: fn(&Agreement) -> f64| all.iter().map(f).sum::<f64>() / n;
            let (share, tie, real) = (mean(Agreement::share), mean(Agreement::tied_share), mean(Agreement::real_share));
            summaries.push(Summary::Agreement {
                topk: k,
                k_eff: (k as usize).min(rows) as u64,
                a: a.name.clone(),
                b: b.name.clone(),
                queries: all.len(),
                agreement: share,
                tie_disagreement: tie,
                real_disagreement: real,
                tie_share: (tie + real > 0.0).then(|| tie / (tie + real)),
                min_agreement: all.iter().map(Agreement::share).fold(1.0, f64::min),
            });
        }
    }
    Ok(summaries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;
    use rand_distr::StandardNormal;

    /// Gaussian queries and keys, positive head weights, from a fixed seed.
    fn random_capture(seed: u64, layers: usize, tokens: usize, heads: usize, dim: usize, rows: usize) -> Layered {
        let mut rng = crate::base::rng::stream(seed, &[]);
        let mut normal = |n: usize| (0..n).map(|_| rng.sample::<f32, _>(StandardNormal)).collect::<Vec<f32>>();
        let queries = Array4::from_shape_vec((layers, tokens, heads, dim), normal(layers * tokens * heads * dim)).unwrap();
        let keys = Array3::from_shape_vec((layers, rows, dim), normal(layers * rows * dim)).unwrap();
        let weights = Array3::from_shape_vec((layers, tokens, heads), normal(layers * tokens * heads)).unwrap().mapv(|w| w.abs() + 0.1);
        Layered { queries, weights, keys, needle_rows: vec![], tie_rule: TieRule::LowestIndex, tie_seed: None }
    }

    fn variants(names: &[&str]) -> Vec<PrecisionVariant> {
        names.iter().map(|n| PrecisionVariant::builtin(n).unwrap()).collect()
    }

    fn adjacent_layers(r: &LayeredReplay, k: u64) -> (f64, Vec<f64>) {
        r.summaries
            .iter()
            .find_map(|s| match s {
                Summary::AdjacentLayers { topk, mean, per_pair, .. } if *topk == k => Some((*mean, per_pair.clone())),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn identical_layers_overlap_exactly() {
        let mut cap = random_capture(1, 1, 3, 4, 32, 200);
        // Four copies of layer 0.
        cap.queries = cap.queries.broadcast((4, 3, 4, 32)).unwrap().to_owned();
        cap.weights = cap.weights.broadcast((4, 3, 4)).unwrap().to_owned();
        cap.keys = cap.keys.broadcast((4, 200, 32)).unwrap().to_owned();
        let r = replay_layered(&cap, &variants(&["bf16"]), &[16, 64]).unwrap();
        assert_eq!(r.rows.len(), 4 * 3 * 2);
        for k in [16, 64] {
            let (mean, pairs) = adjacent_layers(&r, k);
            assert_eq!(pairs, vec![1.0; 3]);
            assert_eq!(mean, 1.0);
        }
        // Three different query tokens per layer: their overlap is reported, the same in every layer.
        let tokens: Vec<&Summary> = r.summaries.iter().filter(|s| matches!(s, Summary::AdjacentTokens { .. })).collect();
        assert_eq!(tokens.len(), 2);
        for s in tokens {
            let Summary::AdjacentTokens { mean, per_layer, .. } = s else { unreachable!() };
            assert!(per_layer.iter().all(|x| x == mean) && *mean > 0.0 && *mean < 1.0, "{per_layer:?}");
        }
        // Rows carry their layer; every layer replays the same.
        assert_eq!(r.rows.iter().map(|x| x.layer.unwrap()).collect::<Vec<_>>(), (0..4).flat_map(|l| [l; 6]).collect::<Vec<_>>());
        assert!(r.rows.chunks(6).all(|c| c.iter().zip(&r.rows[..6]).all(|(a, b)| a.selection_recall == b.selection_recall)));
    }

    /// With independent layers of i.i.d. Gaussian keys, the rows are
    /// exchangeable, so each layer's top-k is a uniform random k-subset of
    /// the N rows, independent of the next layer's. The overlap count of two
    /// such sets is hypergeometric: mean k²/N, variance
    /// k·p·(1−p)·(N−k)/(N−1) ≤ k·p·(1−p) with p = k/N (the binomial's). So
    /// the overlap share of one pair has mean p and sd ≤ √(p(1−p)/k). The
    /// pairs (ℓ, ℓ+1) and (ℓ+1, ℓ+2) share layer ℓ+1, but given it each
    /// overlap's law does not depend on it, so the pairs' overlaps are
    /// independent and their mean over P pairs has sd ≤ √(p(1−p)/(k·P)).
    /// N = 512, k = 64, P = 8: p = 0.125, sd ≤ 0.0413 per pair and ≤ 0.0146
    /// for the mean. The test allows 4 sd on the mean (0.058) and 5 sd on
    /// each pair (0.207).
    #[test]
    fn independent_layers_overlap_near_k_over_rows() {
        let (layers, rows, k) = (9, 512, 64u64);
        let cap = random_capture(16, layers, 1, 4, 32, rows);
        let r = replay_layered(&cap, &variants(&["fp32"]), &[k]).unwrap();
        let (mean, pairs) = adjacent_layers(&r, k);
        let p = k as f64 / rows as f64;
        let sd_pair = (p * (1.0 - p) / k as f64).sqrt();
        let sd_mean = sd_pair / ((layers - 1) as f64).sqrt();
        assert_eq!(pairs.len(), layers - 1);
        assert!((mean - p).abs() <= 4.0 * sd_mean, "mean overlap {mean} vs {p} ± {}", 4.0 * sd_mean);
        for x in &pairs {
            assert!((x - p).abs() <= 5.0 * sd_pair, "pair overlap {x} vs {p} ± {}", 5.0 * sd_pair);
        }
        // One token: no adjacent-token summary, no needle summary.
        assert_eq!(r.summaries.len(), 1);
    }

    #[test]
    fn a_needle_that_wins_in_one_layer_is_reached_in_one() {
        let (layers, tokens, heads, dim, rows) = (5, 2, 4, 32, 300);
        let mut cap = random_capture(3, layers, tokens, heads, dim, rows);
        cap.needle_rows = vec![7];
        for l in 0..layers {
            // Layer 3: row 7 is 100 × token 0's first head (the top score for that token,
            // weights being positive); elsewhere zero, which scores 0 while most rows score above it.
            let needle: Vec<f32> = if l == 3 { cap.queries.slice(s![l, 0, 0, ..]).mapv(|x| 100.0 * x).to_vec() } else { vec![0.0; dim] };
            cap.keys.slice_mut(s![l, 7, ..]).assign(&ndarray::aview1(&needle));
        }
        let r = replay_layered(&cap, &variants(&["fp32", "bf16"]), &[16, 32]).unwrap();
        let needles: Vec<&Summary> = r.summaries.iter().filter(|s| matches!(s, Summary::NeedleLayers { .. })).collect();
        assert_eq!(needles.len(), 2 * 2);
        for s in needles {
            let Summary::NeedleLayers { layers: n, layers_reached, reached, reached_layers, .. } = s else { unreachable!() };
            assert_eq!((*n, *layers_reached, *reached, reached_layers.as_slice()), (layers, 1, true, &[3][..]));
        }
        let kept = |l: usize, t: usize| r.rows.iter().any(|x| x.layer == Some(l) && x.token == t && x.needle_survived == Some(true));
        assert!(kept(3, 0));
        assert!((0..layers).filter(|&l| l != 3).all(|l| !kept(l, 0) && !kept(l, 1)));
    }

    #[test]
    fn one_layer_with_a_layer_axis_replays_like_without() {
        let cap = random_capture(5, 1, 2, 4, 128, 100);
        let rec = Recorded {
            heads: 4,
            dim: 128,
            tokens: 2,
            rows: 100,
            queries: cap.queries.iter().copied().collect(),
            weights: cap.weights.iter().copied().collect(),
            keys: cap.keys.iter().copied().collect(),
            needle_rows: vec![],
            tie_rule: TieRule::LowestIndex,
            tie_seed: None,
        };
        let v = variants(&["fp8", "fp4"]);
        let single = replay(&rec, &v, &[8, 50]).unwrap();
        let layered = replay_layered(&cap, &v, &[8, 50]).unwrap();
        let unlayered: Vec<ReplayRow> = layered.rows.into_iter().map(|r| ReplayRow { layer: None, ..r }).collect();
        assert_eq!(single, unlayered);
        // One layer: no adjacent-layer overlap; two tokens: their overlap.
        assert!(matches!(layered.summaries.as_slice(), [Summary::AdjacentTokens { .. }, Summary::AdjacentTokens { .. }]));
    }

    #[test]
    fn shared_weights_broadcast_over_tokens_and_shapes_are_checked() {
        let p = Path::new("cap");
        let q = (vec![2, 3, 4, 8], vec![0.5; 2 * 3 * 4 * 8]);
        let k = (vec![2, 10, 8], vec![0.25; 2 * 10 * 8]);
        let w: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let Capture::Layered(c) = assemble_capture(Sources::one(p), q.clone(), k.clone(), (vec![2, 4], w.clone())).unwrap() else {
            panic!()
        };
        assert_eq!(c.weights.dim(), (2, 3, 4));
        assert_eq!(c.weights.slice(s![1, 2, ..]).to_vec(), vec![4.0, 5.0, 6.0, 7.0]);
        let err = |q: &(Vec<usize>, Vec<f32>), k: &(Vec<usize>, Vec<f32>), w: (Vec<usize>, Vec<f32>)| {
            assemble_capture(Sources::one(p), q.clone(), k.clone(), w).unwrap_err().to_string()
        };
        let w3 = |shape: Vec<usize>| {
            let n = shape.iter().product();
            (shape, vec![1.0; n])
        };
        let e = err(&(vec![3, 3, 4, 8], vec![0.5; 3 * 3 * 4 * 8]), &k, w3(vec![2, 4]));
        assert!(e.contains("queries have shape [3, 3, 4, 8] but keys have shape [2, 10, 8]: layers 3 against 2"), "{e}");
        let e = err(&(vec![2, 3, 4, 16], vec![0.5; 2 * 3 * 4 * 16]), &k, w3(vec![2, 4]));
        assert!(e.contains("dim 16 against 8"), "{e}");
        let e = err(&q, &k, w3(vec![2, 5, 4]));
        assert!(e.contains("weights have shape [2, 5, 4]: tokens 5 against 3; expected [2, 4] or [2, 3, 4]"), "{e}");
        let e = err(&q, &k, w3(vec![2, 5]));
        assert!(e.contains("heads 5 against 4"), "{e}");
        let e = err(&q, &k, w3(vec![1, 3, 4]));
        assert!(e.contains("layers 1 against 2"), "{e}");
        let e = err(&q, &k, w3(vec![4]));
        assert!(e.contains("weights have shape [4]; expected [2, 4] or [2, 3, 4]"), "{e}");
        let e = err(&q, &(vec![10, 8], vec![0.25; 80]), w3(vec![2, 4]));
        assert!(e.contains("queries have shape [2, 3, 4, 8] (a layer axis) but keys have shape [10, 8]"), "{e}");
    }
}

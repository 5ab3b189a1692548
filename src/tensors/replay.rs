//! `dsa-recall replay`: recorded indexer tensors through every precision
//! variant, compared with the exact fp32 selection.

use super::dump::{select_top_k, variant_logits};
use super::npy::read_npy;
use super::{bad_file, read_bounded};
use crate::error::Error;
use crate::score::selection::TieRule;
use crate::score::variant::PrecisionVariant;
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

/// Checks shapes and assembles the recorded tensors.
fn assemble(path: &Path, q: (Vec<usize>, Vec<f32>), k: (Vec<usize>, Vec<f32>), w: (Vec<usize>, Vec<f32>)) -> Result<Recorded, Error> {
    let (tokens, heads, dim) = match q.0.as_slice() {
        [h, d] => (1, *h, *d),
        [t, h, d] => (*t, *h, *d),
        s => return Err(bad_file(path, format!("queries have shape {s:?}; expected [heads, dim] or [tokens, heads, dim]"))),
    };
    let rows = match k.0.as_slice() {
        [n, d] if *d == dim => *n,
        s => return Err(bad_file(path, format!("keys have shape {s:?}; expected [rows, {dim}] to match the queries"))),
    };
    match w.0.as_slice() {
        [h] if *h == heads && tokens == 1 => {}
        [t, h] if *t == tokens && *h == heads => {}
        [h] if *h == heads => {}
        s => return Err(bad_file(path, format!("weights have shape {s:?}; expected [{heads}] or [{tokens}, {heads}]"))),
    }
    if heads == 0 || dim == 0 || rows == 0 || tokens == 0 {
        return Err(bad_file(path, "empty tensors"));
    }
    // One weight vector for all tokens when only [heads] is given.
    let weights = if w.1.len() == heads { w.1.repeat(tokens) } else { w.1 };
    if q.1.iter().chain(&k.1).chain(&weights).any(|x| !x.is_finite()) {
        return Err(bad_file(path, "tensors hold NaN or infinite values"));
    }
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

/// Reads recorded tensors from a safetensors file.
pub fn load_safetensors(path: &Path, names: &TensorNames) -> Result<Recorded, Error> {
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
    let mut rec = assemble(path, get(&names.queries)?, get(&names.keys)?, get(&names.weights)?)?;
    if let Ok(t) = st.tensor(&names.needle_rows) {
        if t.dtype() != Dtype::I64 || t.shape().len() != 1 {
            return Err(bad_file(path, format!("{:?} must be a 1-D I64 tensor", names.needle_rows)));
        }
        rec.needle_rows = t.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as u64).collect();
        if rec.needle_rows.iter().any(|&r| r as usize >= rec.rows) {
            return Err(bad_file(path, "needle_rows point past the last key row"));
        }
    }
    // A dsa-recall dump carries its tie order, so its selections replay exactly.
    if let Ok((_, meta)) = SafeTensors::read_metadata(&bytes) {
        if let Some(json) = meta.metadata().as_ref().and_then(|m| m.get("dsa_recall")) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(json) {
                rec.tie_rule = serde_json::from_value(v["tie_rule"].clone()).unwrap_or(TieRule::LowestIndex);
                rec.tie_seed = v["trial_seed"].as_u64();
            }
        }
    }
    Ok(rec)
}

/// Reads recorded tensors from three `.npy` files.
pub fn load_npy(q: &Path, k: &Path, w: &Path) -> Result<Recorded, Error> {
    let (qa, ka, wa) = (read_npy(q)?, read_npy(k)?, read_npy(w)?);
    assemble(q, (qa.shape, qa.data), (ka.shape, ka.data), (wa.shape, wa.data))
}

/// One line of a replay: a query token, a k and a variant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayRow {
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

/// Replays every token × k × variant.
pub fn replay(rec: &Recorded, variants: &[PrecisionVariant], topks: &[u64]) -> Result<Vec<ReplayRow>, Error> {
    let exact = PrecisionVariant::builtin("fp32").ok_or_else(|| Error::Chart("fp32 variant missing".into()))?;
    let (h, d) = (rec.heads, rec.dim);
    let mut out = Vec::new();
    for t in 0..rec.tokens {
        let q = &rec.queries[t * h * d..(t + 1) * h * d];
        let w = &rec.weights[t * h..(t + 1) * h];
        let reference = variant_logits(&exact, q, w, &rec.keys, d)?;
        for &k in topks {
            let k_eff = (k as usize).min(rec.rows);
            let ref_set = select_top_k(&reference, k_eff, rec.tie_rule, rec.tie_seed);
            for v in variants {
                let logits = variant_logits(v, q, w, &rec.keys, d)?;
                let set = select_top_k(&logits, k_eff, rec.tie_rule, rec.tie_seed);
                let both = set.iter().filter(|i| ref_set.binary_search(i).is_ok()).count() as f64;
                let (survived, rank) = if rec.needle_rows.is_empty() {
                    (None, None)
                } else {
                    let best = rec.needle_rows.iter().map(|&r| logits[r as usize]).fold(f32::NEG_INFINITY, f32::max);
                    let rank = (0..rec.rows).filter(|i| !rec.needle_rows.contains(&(*i as u64)) && logits[*i] > best).count() as u64;
                    (Some(rec.needle_rows.iter().any(|r| set.binary_search(r).is_ok())), Some(rank))
                };
                out.push(ReplayRow {
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
        }
    }
    Ok(out)
}

/// The replay summarised per (k, variant) over query tokens, for the chart.
pub fn overlap_bars(rows: &[ReplayRow]) -> Vec<crate::report::chart::overlap::OverlapBar> {
    let mut bars: Vec<crate::report::chart::overlap::OverlapBar> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    for r in rows {
        match bars.iter().position(|b| b.topk == r.topk && b.precision == r.precision) {
            Some(i) => {
                let b = &mut bars[i];
                b.mean_recall += r.selection_recall;
                b.mean_jaccard += r.jaccard;
                b.min_recall = b.min_recall.min(r.selection_recall);
                b.max_recall = b.max_recall.max(r.selection_recall);
                counts[i] += 1;
            }
            None => {
                bars.push(crate::report::chart::overlap::OverlapBar {
                    topk: r.topk,
                    precision: r.precision.clone(),
                    mean_recall: r.selection_recall,
                    min_recall: r.selection_recall,
                    max_recall: r.selection_recall,
                    mean_jaccard: r.jaccard,
                });
                counts.push(1);
            }
        }
    }
    for (b, n) in bars.iter_mut().zip(counts) {
        b.mean_recall /= n as f64;
        b.mean_jaccard /= n as f64;
    }
    bars
}

//! Numbers in, numbers out: quantize, score, select, replay.

use crate::convert::{json_to_py, to_py_objects};
use crate::{config_err, input_err, to_py};
use dsa_recall::commands::replay::{replay as replay_command, ReplayInput, ReplayRequest};
use dsa_recall::config::precision::{custom_variant, named_variant, parse_compact};
use dsa_recall::numerics::quantize::{self, QuantizeSpec};
use dsa_recall::score::selection::TieRule;
use dsa_recall::score::variant::PrecisionVariant;
use dsa_recall::tensors::dump::{encode_side, select_top_k, variant_logits};
use dsa_recall::tensors::replay::capture_from_arrays;
use dsa_recall::ConfigError;
use numpy::{PyArray1, PyReadonlyArrayDyn};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quantize_spec, m)?)?;
    m.add_function(wrap_pyfunction!(quantize_variant, m)?)?;
    m.add_function(wrap_pyfunction!(score, m)?)?;
    m.add_function(wrap_pyfunction!(select, m)?)?;
    m.add_class::<Replayed>()?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    // Lists the package exports, from the tables the CLI reads.
    m.add("ELEMENT_FORMATS", PyTuple::new(m.py(), quantize::cast_format_spellings())?)?;
    m.add("DEFAULT_REPLAY_VARIANTS", PyTuple::new(m.py(), dsa_recall::commands::replay::DEFAULT_VARIANTS.split(',').collect::<Vec<_>>())?)?;
    Ok(())
}

/// The values of a C-contiguous array, borrowed (zero-copy).
fn values<'a>(a: &'a PyReadonlyArrayDyn<'_, f32>, name: &str) -> PyResult<&'a [f32]> {
    a.as_slice().map_err(|_| input_err(format!("{name}: not a C-contiguous float32 array")))
}

fn all_finite(xs: &[f32], name: &str) -> PyResult<()> {
    match xs.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(i) => Err(input_err(format!("{name} holds NaN or infinite values (first at flat index {i}, {})", xs[i]))),
    }
}

/// A variant by name (built-in, `BASE+HYPOTHESIS…`) or a compact definition
/// (`name=N;q=SIDE;k=SIDE;…`, as `--precision-def`), checked against `dim`.
pub(crate) fn resolve_variant(field: &str, text: &str, dim: usize) -> PyResult<PrecisionVariant> {
    let v = if text.contains('=') && text.contains(';') || text.starts_with("name=") {
        let p = parse_compact(text).map_err(config_err)?;
        custom_variant(0, &p, dim, &[]).map_err(config_err)?
    } else {
        named_variant(field, text, &[]).map_err(config_err)?
    };
    if let Some(reason) = v.unsupported(dim) {
        return Err(config_err(ConfigError::new(field, &v.name, format!("not with head_dim {dim}: {reason}"))));
    }
    Ok(v)
}

/// `dsa-recall quantize`'s cast or block scaling of a flat list: values,
/// codes and one scale per block.
#[pyfunction]
#[pyo3(signature = (x, format, block=None, scale=None, saturate=false, amax_floor=None))]
#[allow(clippy::type_complexity)]
fn quantize_spec<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
    format: &str,
    block: Option<usize>,
    scale: Option<&str>,
    saturate: bool,
    amax_floor: Option<f32>,
) -> PyResult<(Bound<'py, PyArray1<f32>>, Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f32>>, u32)> {
    let spec = QuantizeSpec::from_flags(format, block, scale, saturate, amax_floor).map_err(|e| to_py(e.into()))?;
    let xs = values(&x, "x")?;
    let q = py.detach(|| spec.quantize_blocks(xs));
    Ok((PyArray1::from_vec(py, q.values), PyArray1::from_vec(py, q.codes), PyArray1::from_vec(py, q.scales), spec.format.bits()))
}

/// One side (query or key) of a variant's pipeline applied to rows of
/// `dim`: the dequantized values as scored, the codes, the block scales,
/// values per scale (0: no scale) and bits per code.
#[pyfunction]
#[pyo3(signature = (x, variant, side, dim))]
#[allow(clippy::type_complexity)]
fn quantize_variant<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
    variant: &str,
    side: &str,
    dim: usize,
) -> PyResult<(Bound<'py, PyArray1<f32>>, Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f32>>, usize, u32)> {
    let v = resolve_variant("variant", variant, dim)?;
    let pipeline = match side {
        "key" | "k" => v.key,
        "query" | "q" => v.query,
        other => return Err(config_err(ConfigError::new("side", format!("{other:?}"), "key or query"))),
    };
    let xs = values(&x, "x")?;
    let (out, encoded) = py
        .detach(|| {
            let mut out = xs.to_vec();
            pipeline.apply(&mut out, dim).map_err(|e| dsa_recall::Error::from(dsa_recall::SimError::from(e)))?;
            Ok::<_, dsa_recall::Error>((out, encode_side(&pipeline, xs, dim)?))
        })
        .map_err(to_py)?;
    Ok((
        PyArray1::from_vec(py, out),
        PyArray1::from_vec(py, encoded.codes),
        PyArray1::from_vec(py, encoded.scales),
        encoded.block_len,
        pipeline.element.bits(),
    ))
}

/// Indexer logits of `tokens` queries `[tokens, heads, dim]` with weights
/// `[tokens, heads]` against keys `[rows, dim]`: `[tokens × rows]`, flat.
#[pyfunction]
#[pyo3(signature = (q, k, w, tokens, heads, dim, variant))]
#[allow(clippy::too_many_arguments)]
fn score<'py>(
    py: Python<'py>,
    q: PyReadonlyArrayDyn<'py, f32>,
    k: PyReadonlyArrayDyn<'py, f32>,
    w: PyReadonlyArrayDyn<'py, f32>,
    tokens: usize,
    heads: usize,
    dim: usize,
    variant: &str,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let v = resolve_variant("variant", variant, dim)?;
    let (qs, ks, ws) = (values(&q, "q")?, values(&k, "k")?, values(&w, "w")?);
    if qs.len() != tokens * heads * dim || ws.len() != tokens * heads || dim == 0 || ks.len() % dim != 0 {
        return Err(input_err("q, k and w do not have the sizes their shapes say"));
    }
    all_finite(qs, "q")?;
    all_finite(ks, "k")?;
    all_finite(ws, "w")?;
    let out = py
        .detach(|| {
            let mut out = Vec::with_capacity(tokens * ks.len() / dim);
            for t in 0..tokens {
                let qt = &qs[t * heads * dim..(t + 1) * heads * dim];
                out.extend(variant_logits(&v, qt, &ws[t * heads..(t + 1) * heads], ks, dim)?);
            }
            Ok::<_, dsa_recall::Error>(out)
        })
        .map_err(to_py)?;
    Ok(PyArray1::from_vec(py, out))
}

/// The top `k` rows of each of `tokens` rows of logits, ascending, flat
/// (`[tokens × min(k, rows)]`).
#[pyfunction]
#[pyo3(signature = (logits, tokens, k, tie_rule="lowest-index", seed=None))]
fn select<'py>(
    py: Python<'py>,
    logits: PyReadonlyArrayDyn<'py, f32>,
    tokens: usize,
    k: usize,
    tie_rule: &str,
    seed: Option<u64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let rule: TieRule = tie_rule
        .parse()
        .map_err(|_| config_err(ConfigError::new("tie_rule", format!("{tie_rule:?}"), "lowest-index, highest-index or random")))?;
    let xs = values(&logits, "logits")?;
    if tokens == 0 || xs.len() % tokens != 0 {
        return Err(input_err("logits do not have the size their shape says"));
    }
    if let Some(i) = xs.iter().position(|x| x.is_nan()) {
        return Err(input_err(format!("logits hold NaN (first at flat index {i}): a selection of NaN scores is not defined")));
    }
    let rows = xs.len() / tokens;
    let out = py.detach(|| {
        let mut out = Vec::with_capacity(tokens * k.min(rows));
        for t in 0..tokens {
            out.extend(select_top_k(&xs[t * rows..(t + 1) * rows], k.min(rows), rule, seed).into_iter().map(|i| i as i64));
        }
        out
    });
    Ok(PyArray1::from_vec(py, out))
}

/// What `replay` found: one row per (layer,) token, k and variant, and
/// per-layer summaries (per-layer inputs only).
#[pyclass(frozen, get_all, module = "dsa_recall._native")]
struct Replayed {
    /// The rows as dicts (the fields of `replay --json`'s row lines).
    rows: Vec<Py<PyAny>>,
    /// The same rows as `replay --json` prints them.
    json_lines: Vec<String>,
    /// The summaries as dicts (`replay --json`'s summary lines).
    summaries: Vec<Py<PyAny>>,
}

/// `dsa-recall replay --json` on arrays.
#[pyfunction]
#[pyo3(signature = (q, q_shape, k, k_shape, w, w_shape, needle_rows, topks, variants, agreement=None))]
#[allow(clippy::too_many_arguments)]
fn replay<'py>(
    py: Python<'py>,
    q: PyReadonlyArrayDyn<'py, f32>,
    q_shape: Vec<usize>,
    k: PyReadonlyArrayDyn<'py, f32>,
    k_shape: Vec<usize>,
    w: PyReadonlyArrayDyn<'py, f32>,
    w_shape: Vec<usize>,
    needle_rows: Option<Vec<u64>>,
    topks: Vec<u64>,
    variants: Vec<String>,
    agreement: Option<String>,
) -> PyResult<Replayed> {
    let request = ReplayRequest { topks, precisions: variants, needle_rows, agreement };
    let (qs, ks, ws) = (values(&q, "q")?.to_vec(), values(&k, "k")?.to_vec(), values(&w, "w")?.to_vec());
    let cap = capture_from_arrays("arrays", (q_shape, qs), (k_shape, ks), (w_shape, ws)).map_err(to_py)?;
    let replayed = py.detach(|| replay_command(&request, ReplayInput::Capture(cap), None)).map_err(to_py)?;
    let json_lines: Vec<String> = replayed.rows.iter().map(|r| serde_json::to_string(r).unwrap_or_default()).collect();
    let rows = json_lines.iter().map(|line| json_to_py(py, line)).collect::<PyResult<_>>()?;
    let summaries = replayed.summaries.iter().map(|s| to_py_objects(py, s)).collect::<PyResult<_>>()?;
    Ok(Replayed { rows, json_lines, summaries })
}

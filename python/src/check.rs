//! `dsa-recall check` from Python: the library's check of a capture on
//! disk, its report as JSON and as the CLI's text.

use crate::to_py;
use dsa_recall::tensors::check::{check_path, render_text, CheckOptions};
use pyo3::prelude::*;
use std::path::PathBuf;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check_capture, m)?)?;
    m.add_function(wrap_pyfunction!(check_layouts, m)?)?;
    Ok(())
}

/// (report JSON, report text, exit code) of checking the capture at `path`.
#[pyfunction]
#[pyo3(signature = (path, layout=None, pipeline=None, topk=None, weights=None, rows_per_block=None, exact=false, rounding_bits=None, transforms=true))]
#[allow(clippy::too_many_arguments)]
fn check_capture(
    py: Python<'_>,
    path: PathBuf,
    layout: Option<String>,
    pipeline: Option<String>,
    topk: Option<usize>,
    weights: Option<String>,
    rows_per_block: Option<usize>,
    exact: bool,
    rounding_bits: Option<u32>,
    transforms: bool,
) -> PyResult<(String, String, u8)> {
    let opts = CheckOptions {
        layout,
        pipeline,
        topk,
        weights,
        rows_per_block,
        exact,
        rounding_bits,
        no_transforms: !transforms,
        ..Default::default()
    };
    let report = py.detach(|| check_path(&path, &opts)).map_err(to_py)?;
    let json = serde_json::to_string(&report).unwrap_or_default();
    Ok((json, render_text(&report), report.exit_code))
}

/// The built-in layouts: (name, TOML text).
#[pyfunction]
fn check_layouts() -> Vec<(String, String)> {
    dsa_recall::tensors::check::layout::BUILTIN.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect()
}

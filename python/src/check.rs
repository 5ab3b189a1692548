//! `dsa-recall check` from Python: the check command (`commands::check`)
//! on a capture on disk, its report as JSON and as the CLI's text.

use crate::convert::to_py_objects;
use crate::to_py;
use dsa_recall::commands::check::{self, CheckRequest};
use dsa_recall::tensors::check::CheckOptions;
use pyo3::prelude::*;
use std::path::PathBuf;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CheckReport>()?;
    m.add_function(wrap_pyfunction!(check_capture, m)?)?;
    m.add_function(wrap_pyfunction!(check_layouts, m)?)?;
    Ok(())
}

/// What checking a capture found.
#[pyclass(frozen, get_all, module = "dsa_recall._native")]
struct CheckReport {
    /// The report as a dict (the fields of `check --json`).
    report: Py<PyAny>,
    /// The report as the CLI prints it.
    text: String,
    /// 0 when equal up to ties, 1 on a mismatch (as the CLI's).
    exit_code: u8,
}

/// Checks the capture at `path`.
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
) -> PyResult<CheckReport> {
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
    let request = CheckRequest { capture: path, options: opts, out: None };
    let checked = py.detach(|| check::check(&request)).map_err(to_py)?;
    Ok(CheckReport { report: to_py_objects(py, &checked.report)?, text: checked.text(), exit_code: checked.exit_code() })
}

/// The built-in layouts: (name, TOML text).
#[pyfunction]
fn check_layouts() -> Vec<(String, String)> {
    check::builtin_layouts()
}

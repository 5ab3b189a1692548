//! A sweep's result as a handle: the library's scenario and cells stay on
//! the Rust side, and tables, text and charts are made from them when asked
//! (the Python `SweepResult` wraps this, as polars wraps its `_df`).

use crate::convert::columns_dict;
use crate::{config_err, to_py};
use dsa_recall::commands::sweep::{self as sweep_command, MergeRequest};
use dsa_recall::config::Scenario;
use dsa_recall::report::{self, chart::chart_of, ReportMeta};
use dsa_recall::run::output;
use dsa_recall::run::sweep::{self as run_sweep, SweepOutcome};
use dsa_recall::ConfigError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::path::PathBuf;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SweepResult>()?;
    m.add_function(wrap_pyfunction!(load_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(merge_shards, m)?)?;
    Ok(())
}

/// What a sweep gives: its scenario and cells, kept as the library's, with
/// the tables, files' text and charts made from them on demand.
#[pyclass(frozen, module = "dsa_recall._native")]
pub(crate) struct SweepResult {
    scenario: Scenario,
    outcome: SweepOutcome,
    out: Option<PathBuf>,
}

impl SweepResult {
    pub(crate) fn new(scenario: Scenario, outcome: SweepOutcome, out: Option<PathBuf>) -> Self {
        SweepResult { scenario, outcome, out }
    }

    fn meta(&self) -> ReportMeta {
        ReportMeta::from_scenario(&self.scenario, &self.outcome.effective)
    }
}

#[pymethods]
impl SweepResult {
    /// Column name → NumPy array, in summary.csv's order, with the dtypes
    /// reading that file infers (int64, float64 with NaN, bool, or objects
    /// with None for empty text).
    #[getter]
    fn columns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        columns_dict(py, &output::summary_columns(&self.outcome.cells))
    }

    /// The resolved scenario (manifest.json's `scenario`) as a dict.
    #[getter]
    fn scenario(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        crate::sim::scenario_dict(py, &self.scenario)
    }

    /// summary.csv's text.
    #[getter]
    fn summary_csv(&self) -> String {
        output::summary_csv(&self.outcome.cells)
    }

    /// results.jsonl's text.
    #[getter]
    fn results_jsonl(&self) -> String {
        output::results_jsonl(&self.outcome.cells)
    }

    /// effective_context.csv's text.
    #[getter]
    fn effective_context_csv(&self) -> String {
        output::effective_context_csv(&self.outcome.effective)
    }

    /// The output directory the sweep wrote (None: kept in memory).
    #[getter]
    fn out(&self) -> Option<PathBuf> {
        self.out.clone()
    }

    /// The chart `kind` (a file stem of a sweep directory: `recall_vs_context`,
    /// `heatmap`, …) as PNG bytes, drawn from the cells in memory: the bytes
    /// the command line writes to `KIND.png`.
    fn chart<'py>(&self, py: Python<'py>, kind: &str) -> PyResult<Bound<'py, PyBytes>> {
        let stem = kind.strip_suffix(".png").unwrap_or(kind);
        let file = format!("{stem}.png");
        let images = if chart_of(stem).is_some() {
            py.detach(|| report::chart_pngs(&self.meta(), &self.outcome.cells, Some(stem))).map_err(to_py)?
        } else {
            Vec::new()
        };
        match images.into_iter().find(|(name, _)| *name == file) {
            Some((_, png)) => Ok(PyBytes::new(py, &png)),
            None => {
                let kinds = self.chart_kinds(py)?;
                Err(config_err(ConfigError::new("kind", format!("{kind:?}"), format!("one of {}", kinds.join(", ")))))
            }
        }
    }

    /// The charts this sweep draws (the stems `chart` takes), in the order
    /// a sweep directory lists them.
    fn chart_kinds(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let images = py.detach(|| report::chart_pngs(&self.meta(), &self.outcome.cells, None)).map_err(to_py)?;
        Ok(images.into_iter().filter_map(|(name, _)| name.strip_suffix(".png").map(str::to_string)).collect())
    }

    /// A result from a sweep's scenario (JSON, as a manifest holds it) and
    /// results.jsonl text.
    #[staticmethod]
    fn from_text(scenario_json: &str, results_jsonl: &str) -> PyResult<SweepResult> {
        let s: Scenario = serde_json::from_str(scenario_json)
            .map_err(|e| config_err(ConfigError::new("scenario", "(JSON)", format!("the scenario of a sweep's manifest ({e})"))))?;
        let cells = report::parse_results(results_jsonl, "results").map_err(to_py)?;
        let effective = run_sweep::effective_contexts(&s, &cells);
        Ok(SweepResult::new(s, SweepOutcome { cells, effective }, None))
    }

    fn __len__(&self) -> usize {
        self.outcome.cells.len()
    }

    fn __repr__(&self) -> String {
        let s = &self.scenario;
        let at = self.out.as_ref().map_or(String::new(), |d| format!(", in {}", d.display()));
        format!(
            "SweepResult({} cells: {} contexts × {} depths × {} k × {} precisions, {} trials each, preset {}{at})",
            self.outcome.cells.len(),
            s.contexts.len(),
            s.depths.len(),
            s.topks.len(),
            s.precisions.len(),
            s.trials,
            s.preset
        )
    }
}

/// A sweep directory (a whole grid's or one shard's) read back.
#[pyfunction]
fn load_sweep(py: Python<'_>, dir: PathBuf) -> PyResult<SweepResult> {
    let (s, outcome) = py.detach(|| sweep_command::load(&dir)).map_err(to_py)?;
    Ok(SweepResult::new(s, outcome, Some(dir)))
}

/// `dsa-recall merge`: shard directories into `out`, as an unsharded sweep
/// writes it.
#[pyfunction]
#[pyo3(signature = (shards, out, force=false))]
fn merge_shards(py: Python<'_>, shards: Vec<PathBuf>, out: PathBuf, force: bool) -> PyResult<SweepResult> {
    let request = MergeRequest { shards, out, force };
    let merged = py.detach(|| sweep_command::merge(&request)).map_err(to_py)?;
    Ok(SweepResult::new(*merged.scenario, merged.outcome, Some(merged.out)))
}

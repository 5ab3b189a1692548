//! The simulator: sweeps, single trials, charts, and the catalogues
//! (presets, hypotheses, built-in variants).

use crate::{config_err, to_py};
use dsa_recall::base::observe::{Observer, Standing};
use dsa_recall::commands::cell::{trial_tensors, CellCommand, CellRequest};
use dsa_recall::commands::request::{precision_definitions, ScenarioRequest};
use dsa_recall::commands::sweep::{sweep, SweepRequest, Swept};
use dsa_recall::config::params::overlay_from_flags;
use dsa_recall::config::{self, Scenario, ScenarioParams};
use dsa_recall::report::{self, chart::chart_of};
use dsa_recall::run::output;
use dsa_recall::run::sweep;
use dsa_recall::ConfigError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scenario_json, m)?)?;
    m.add_function(wrap_pyfunction!(run_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(run_trial, m)?)?;
    m.add_function(wrap_pyfunction!(render_charts, m)?)?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(hypotheses, m)?)?;
    m.add_function(wrap_pyfunction!(variants, m)?)?;
    m.add_function(wrap_pyfunction!(knobs, m)?)?;
    m.add_function(wrap_pyfunction!(switch_knobs, m)?)?;
    Ok(())
}

/// Preset ← scenario file ← knobs (flag name without dashes, value as
/// typed) ← custom variant definitions: exactly the request `sweep` builds
/// from the same command line.
fn scenario_request(
    preset: Option<String>,
    config: Option<PathBuf>,
    knobs: &[(String, String)],
    defs: &[String],
    threads: Option<usize>,
) -> PyResult<ScenarioRequest> {
    let mut overlay: ScenarioParams = overlay_from_flags(knobs).map_err(config_err)?;
    overlay.preset = preset;
    overlay.precision = precision_definitions(defs).map_err(config_err)?;
    Ok(ScenarioRequest { config, overlay, threads })
}

/// The checked scenario of [`scenario_request`].
fn build_scenario(preset: Option<String>, config: Option<PathBuf>, knobs: &[(String, String)], defs: &[String]) -> PyResult<Scenario> {
    scenario_request(preset, config, knobs, defs, None)?.scenario().map_err(to_py)
}

/// The scenario as JSON, as a manifest holds it (through `serde_json::Value`,
/// so that f32 fields print as the manifest prints them).
fn scenario_text(s: &Scenario) -> String {
    serde_json::to_value(s).map(|v| v.to_string()).unwrap_or_default()
}

/// The resolved scenario as JSON (what a sweep's manifest holds).
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, knobs=vec![], precision_defs=vec![]))]
fn scenario_json(
    preset: Option<String>,
    config: Option<PathBuf>,
    knobs: Vec<(String, String)>,
    precision_defs: Vec<String>,
) -> PyResult<String> {
    let s = build_scenario(preset, config, &knobs, &precision_defs)?;
    Ok(scenario_text(&s))
}

/// Progress and stopping between the Python thread and the sweep's.
#[derive(Default)]
struct Shared {
    done: AtomicU64,
    total: AtomicU64,
    stop: AtomicBool,
}

impl Observer for Shared {
    fn started(&self, standing: &Standing) {
        self.done.store(standing.trials_done, Ordering::Relaxed);
        self.total.store(standing.trials_total, Ordering::Relaxed);
    }
    fn trial_done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
    fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Runs `work` on a thread of its own while this (the calling Python)
/// thread, without the GIL, wakes every 100 ms to call `progress(done,
/// total)` and check for signals: Python runs signal handlers on its main
/// thread only, so Ctrl-C reaches a sweep through here. An exception from
/// either asks the sweep to stop and is raised once it has.
fn run_watched<T: Send>(
    py: Python<'_>,
    shared: &Shared,
    progress: Option<&Py<PyAny>>,
    work: impl FnOnce() -> Result<T, dsa_recall::Error> + Send,
) -> PyResult<T> {
    let report = |py: Python<'_>| -> PyResult<()> {
        py.check_signals()?;
        if let Some(cb) = progress {
            cb.call1(py, (shared.done.load(Ordering::Relaxed), shared.total.load(Ordering::Relaxed)))?;
        }
        Ok(())
    };
    let (result, pending) = py.detach(|| {
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::channel();
            scope.spawn(move || {
                let _ = tx.send(work());
            });
            let mut pending: Option<PyErr> = None;
            loop {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(result) => return (Some(result), pending),
                    Err(mpsc::RecvTimeoutError::Disconnected) => return (None, pending),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if pending.is_none() {
                            if let Err(e) = Python::attach(report) {
                                shared.stop.store(true, Ordering::Relaxed);
                                pending = Some(e);
                            }
                        }
                    }
                }
            }
        })
    });
    if let Some(e) = pending {
        return Err(e);
    }
    let result = result.ok_or_else(|| crate::SimulationError::new_err("the sweep's thread ended without a result"))?;
    let value = result.map_err(to_py)?;
    // The final count, so that a bar ends full.
    report(py)?;
    Ok(value)
}

/// A sweep: (summary.csv text, results.jsonl text, effective_context.csv
/// text, scenario JSON). With `out`, the sweep is the command line's durable
/// one into that directory, every file and chart written.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, knobs=vec![], precision_defs=vec![], threads=None, progress=None, out=None, force=false, resume=false))]
#[allow(clippy::too_many_arguments)]
fn run_sweep(
    py: Python<'_>,
    preset: Option<String>,
    config: Option<PathBuf>,
    knobs: Vec<(String, String)>,
    precision_defs: Vec<String>,
    threads: Option<usize>,
    progress: Option<Py<PyAny>>,
    out: Option<PathBuf>,
    force: bool,
    resume: bool,
) -> PyResult<(String, String, String, String)> {
    let request = SweepRequest {
        scenario: scenario_request(preset, config, &knobs, &precision_defs, threads)?,
        out,
        force,
        resume,
        ..SweepRequest::default()
    };
    let shared = Shared::default();
    let Swept::Grid { scenario: s, outcome, .. } = run_watched(py, &shared, progress.as_ref(), || sweep(&request, &shared))? else {
        return Err(crate::SimulationError::new_err("a sweep without a knob axis or shard made something else than a grid"));
    };
    Ok((
        output::summary_csv(&outcome.cells),
        output::results_jsonl(&outcome.cells),
        output::effective_context_csv(&outcome.effective),
        scenario_text(&s),
    ))
}

/// One tensor of a trial: (name, NumPy dtype, shape, little-endian bytes).
type Tensor<'py> = (String, &'static str, Vec<usize>, Bound<'py, PyBytes>);

/// One trial's tensors as `trial --dump` writes them, its metadata JSON
/// and per variant (name, survived, best needle rank, overlap with fp32).
/// The cell's coordinates as `trial`'s flags take them.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, knobs=vec![], precision_defs=vec![], trial=0, context=None, depth=None, topk=None, precisions=None))]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn run_trial<'py>(
    py: Python<'py>,
    preset: Option<String>,
    config: Option<PathBuf>,
    knobs: Vec<(String, String)>,
    precision_defs: Vec<String>,
    trial: u64,
    context: Option<String>,
    depth: Option<String>,
    topk: Option<String>,
    precisions: Option<String>,
) -> PyResult<(Vec<Tensor<'py>>, String, Vec<(String, bool, Option<u64>, f64)>)> {
    let scenario = scenario_request(preset, config, &knobs, &precision_defs, None)?;
    let request = CellRequest { command: CellCommand::Trial, scenario, context, depth, topk, precisions };
    let t = py.detach(|| trial_tensors(&request, trial)).map_err(to_py)?;
    let tensors =
        t.tensors.iter().map(|(name, x)| (name.clone(), x.numpy_dtype(), x.shape().to_vec(), PyBytes::new(py, x.bytes()))).collect();
    Ok((tensors, t.metadata, t.summary.variants))
}

/// Writes a sweep's charts (PNG) into `dir` from its scenario JSON and
/// results.jsonl text: every chart, or with `kind` only the chart of the
/// registry (`dsa_recall::report::outputs`) that owns that name (nothing
/// when none does). Returns the file names.
#[pyfunction]
#[pyo3(signature = (scenario_json, results_jsonl, dir, kind=None))]
fn render_charts(py: Python<'_>, scenario_json: &str, results_jsonl: &str, dir: PathBuf, kind: Option<&str>) -> PyResult<Vec<String>> {
    let s: Scenario = serde_json::from_str(scenario_json)
        .map_err(|e| config_err(ConfigError::new("scenario", "(JSON)", format!("the scenario of a sweep from this package ({e})"))))?;
    let cells = report::parse_results(results_jsonl, "results").map_err(to_py)?;
    py.detach(|| {
        let meta = report::ReportMeta::from_scenario(&s, &sweep::effective_contexts(&s, &cells));
        match kind {
            Some(k) if chart_of(k).is_none() => Ok(Vec::new()),
            Some(k) => report::render_chart(&dir, &meta, &cells, k),
            None => report::render_charts(&dir, &meta, &cells, &report::PlotOptions::default()),
        }
    })
    .map_err(to_py)
}

/// (name, description, TOML text) of every embedded preset.
#[pyfunction]
fn presets() -> Vec<(String, String, String)> {
    config::PRESETS
        .iter()
        .map(|(name, text)| {
            let description = config::params::parse_scenario_toml(text).ok().and_then(|p| p.description).unwrap_or_default();
            (name.to_string(), description, text.to_string())
        })
        .collect()
}

/// Every catalogue entry: (name, group, summary, changes, stands for,
/// expected, requires, across layers, the long text of `hypotheses show`).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn hypotheses() -> Vec<(String, String, String, String, String, String, Option<String>, String, String)> {
    use dsa_recall::score::hypothesis::{long_text, CATALOGUE};
    CATALOGUE
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                h.group.name().to_string(),
                h.summary.to_string(),
                h.changes.to_string(),
                h.stands_for.to_string(),
                h.expected.to_string(),
                h.requires.map(str::to_string),
                h.layers.name().to_string(),
                long_text(h),
            )
        })
        .collect()
}

/// Built-in variants, or the one named / defined by `spec` for vectors of
/// `dim`: (name, description, definition as JSON).
#[pyfunction]
#[pyo3(signature = (spec=None, dim=128))]
fn variants(spec: Option<&str>, dim: usize) -> PyResult<Vec<(String, String, String)>> {
    use dsa_recall::score::variant::BUILTIN;
    let describe = |name: &str| BUILTIN.iter().find(|(n, _)| *n == name).map_or(String::new(), |(_, d)| d.to_string());
    match spec {
        Some(text) => {
            let v = crate::numerics::resolve_variant("variant", text, dim)?;
            Ok(vec![(v.name.clone(), describe(&v.name), serde_json::to_string(&v).unwrap_or_default())])
        }
        None => Ok(BUILTIN
            .iter()
            .filter_map(|(name, description)| {
                let v = dsa_recall::score::variant::PrecisionVariant::builtin(name)?;
                Some((name.to_string(), description.to_string(), serde_json::to_string(&v).unwrap_or_default()))
            })
            .collect()),
    }
}

/// Every knob a sweep takes as a keyword: (flag without dashes, TOML path, help).
#[pyfunction]
fn knobs() -> Vec<(String, String, String)> {
    ScenarioParams::flags().map(|f| (f.long.trim_start_matches('-').to_string(), f.path.to_string(), f.help.to_string())).collect()
}

/// The knobs that are switches (`on|off` flags), which a Python bool may set.
#[pyfunction]
fn switch_knobs() -> Vec<String> {
    ScenarioParams::flags()
        .filter(|f| {
            let values: Vec<String> = f.arg().get_possible_values().iter().map(|v| v.get_name().to_string()).collect();
            values == ["on", "off"]
        })
        .map(|f| f.long.trim_start_matches('-').to_string())
        .collect()
}

//! The simulator: sweeps (their results are `result.rs`'s), single trials,
//! and the catalogues (presets, hypotheses, built-in variants).

use crate::convert::{json_to_py, tensor_array, to_py_objects};
use crate::result::SweepResult;
use crate::{config_err, to_py};
use dsa_recall::base::observe::{Observer, Standing};
use dsa_recall::commands::cell::{trial_tensors, CellCommand, CellRequest};
use dsa_recall::commands::request::{precision_definitions, ScenarioRequest};
use dsa_recall::commands::sweep::{sweep, SweepRequest, Swept};
use dsa_recall::config::params::overlay_from_flags;
use dsa_recall::config::{self, ListSpec, Scenario, ScenarioParams};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Trial>()?;
    m.add_class::<TrialVariant>()?;
    m.add_class::<Preset>()?;
    m.add_class::<Hypothesis>()?;
    m.add_class::<Variant>()?;
    m.add_class::<Knob>()?;
    m.add_function(wrap_pyfunction!(scenario, m)?)?;
    m.add_function(wrap_pyfunction!(run_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(run_trial, m)?)?;
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

/// The scenario as a dict, as a manifest holds it (through
/// `serde_json::Value`, so that f32 fields read as the manifest prints them).
pub(crate) fn scenario_dict(py: Python<'_>, s: &Scenario) -> PyResult<Py<PyAny>> {
    json_to_py(py, &serde_json::to_value(s).unwrap_or_default().to_string())
}

/// The resolved scenario as a dict (what a sweep's manifest holds).
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, knobs=vec![], precision_defs=vec![]))]
fn scenario(
    py: Python<'_>,
    preset: Option<String>,
    config: Option<PathBuf>,
    knobs: Vec<(String, String)>,
    precision_defs: Vec<String>,
) -> PyResult<Py<PyAny>> {
    let s = build_scenario(preset, config, &knobs, &precision_defs)?;
    scenario_dict(py, &s)
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

/// A sweep. With `out`, the sweep is the command line's durable one into
/// that directory, every file and chart written; with `shard` (`I/N`, which
/// needs `out`) only that part of the grid, as `sweep --shard I/N` writes it.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, knobs=vec![], precision_defs=vec![], threads=None, progress=None, out=None, force=false, resume=false, shard=None))]
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
    shard: Option<String>,
) -> PyResult<SweepResult> {
    let request = SweepRequest {
        scenario: scenario_request(preset, config, &knobs, &precision_defs, threads)?,
        out,
        force,
        resume,
        shard,
        ..SweepRequest::default()
    };
    let shared = Shared::default();
    match run_watched(py, &shared, progress.as_ref(), || sweep(&request, &shared))? {
        Swept::Grid { out, scenario, outcome } => Ok(SweepResult::new(*scenario, outcome, out)),
        // A shard's cells are on disk only in its directory's results.
        Swept::Shard { out, .. } => {
            let (s, outcome) = py.detach(|| dsa_recall::commands::sweep::load(&out)).map_err(to_py)?;
            Ok(SweepResult::new(s, outcome, Some(out)))
        }
        Swept::Vary { .. } => Err(crate::SimulationError::new_err("a sweep without a knob axis made a knob sweep")),
    }
}

/// One trial: its tensors as `trial --dump` writes them, the file's
/// metadata and what each variant did.
#[pyclass(frozen, get_all, module = "dsa_recall._native")]
struct Trial {
    /// Tensor name → NumPy array, in file order.
    tensors: Py<PyDict>,
    /// The file's `dsa_recall` metadata.
    meta: Py<PyAny>,
    variants: Vec<Py<TrialVariant>>,
}

/// What one variant did in a trial.
#[pyclass(frozen, get_all, module = "dsa_recall._native")]
struct TrialVariant {
    name: String,
    /// Whether a needle row was selected.
    survived: bool,
    /// The best needle row's rank (None: no needle row scored).
    needle_rank: Option<u64>,
    /// Overlap of its selection with the exact fp32 one.
    overlap: f64,
}

/// One trial of one cell, whose coordinates are given as `trial`'s flags
/// take them.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, knobs=vec![], precision_defs=vec![], trial=0, context=None, depth=None, topk=None, precisions=None))]
#[allow(clippy::too_many_arguments)]
fn run_trial(
    py: Python<'_>,
    preset: Option<String>,
    config: Option<PathBuf>,
    knobs: Vec<(String, String)>,
    precision_defs: Vec<String>,
    trial: u64,
    context: Option<String>,
    depth: Option<String>,
    topk: Option<String>,
    precisions: Option<String>,
) -> PyResult<Trial> {
    let mut scenario = scenario_request(preset, config, &knobs, &precision_defs, None)?;
    // The cell's coordinates, where `trial`'s flags put them.
    let grid = &mut scenario.overlay.sweep;
    for (field, value) in
        [(&mut grid.contexts, context), (&mut grid.depths, depth), (&mut grid.topk, topk), (&mut grid.precisions, precisions)]
    {
        if value.is_some() {
            *field = value.map(ListSpec::Text);
        }
    }
    let request = CellRequest { command: CellCommand::Trial, scenario };
    let t = py.detach(|| trial_tensors(&request, trial)).map_err(to_py)?;
    let tensors = PyDict::new(py);
    for (name, x) in &t.tensors {
        tensors.set_item(name, tensor_array(py, x.numpy_dtype(), x.shape(), x.bytes())?)?;
    }
    let variants = t
        .summary
        .variants
        .into_iter()
        .map(|(name, survived, needle_rank, overlap)| Py::new(py, TrialVariant { name, survived, needle_rank, overlap }))
        .collect::<PyResult<_>>()?;
    Ok(Trial { tensors: tensors.unbind(), meta: json_to_py(py, &t.metadata)?, variants })
}

/// An embedded preset: its name, one-line description and TOML text.
#[pyclass(frozen, get_all, module = "dsa_recall._native")]
struct Preset {
    name: String,
    /// Its one-line description.
    description: String,
    /// Its TOML text.
    toml: String,
}

#[pymethods]
impl Preset {
    /// The preset resolved and checked (as a sweep's manifest holds it).
    fn scenario(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let s = build_scenario(Some(self.name.clone()), None, &[], &[])?;
        scenario_dict(py, &s)
    }

    /// The fields as a dict (name, description, toml).
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        fields_dict(py, [("name", &self.name), ("description", &self.description), ("toml", &self.toml)])
    }

    fn __repr__(&self) -> String {
        format!("Preset('{}': {})", self.name, self.description)
    }
}

/// Text fields as a dict, in order.
fn fields_dict<'py, 'a>(py: Python<'py>, fields: impl IntoIterator<Item = (&'a str, &'a String)>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in fields {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Every embedded preset.
#[pyfunction]
fn presets() -> Vec<Preset> {
    config::PRESETS
        .iter()
        .map(|(name, text)| {
            let description = config::params::parse_scenario_toml(text).ok().and_then(|p| p.description).unwrap_or_default();
            Preset { name: name.to_string(), description, toml: text.to_string() }
        })
        .collect()
}

/// A hypothesis of the catalogue (`dsa-recall hypotheses`): use as `fp8+NAME`.
#[pyclass(frozen, get_all, module = "dsa_recall._native")]
struct Hypothesis {
    name: String,
    /// Its group's name.
    group: String,
    summary: String,
    /// What it changes.
    changes: String,
    /// What it stands for.
    stands_for: String,
    /// What it is expected to do.
    expected: String,
    /// What it needs to apply, if anything.
    requires: Option<String>,
    /// Across which layers it acts.
    layers: String,
    /// The long text of `hypotheses show NAME`.
    text: String,
}

#[pymethods]
impl Hypothesis {
    /// The fields as a dict, in order.
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = fields_dict(
            py,
            [("name", &self.name), ("group", &self.group), ("summary", &self.summary), ("changes", &self.changes)]
                .into_iter()
                .chain([("stands_for", &self.stands_for), ("expected", &self.expected)]),
        )?;
        d.set_item("requires", &self.requires)?;
        d.set_item("layers", &self.layers)?;
        d.set_item("text", &self.text)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("Hypothesis('{}', {}: {})", self.name, self.group, self.summary)
    }
}

/// Every catalogue entry.
#[pyfunction]
fn hypotheses() -> Vec<Hypothesis> {
    use dsa_recall::score::hypothesis::{long_text, CATALOGUE};
    CATALOGUE
        .iter()
        .map(|h| Hypothesis {
            name: h.name.to_string(),
            group: h.group.name().to_string(),
            summary: h.summary.to_string(),
            changes: h.changes.to_string(),
            stands_for: h.stands_for.to_string(),
            expected: h.expected.to_string(),
            requires: h.requires.map(str::to_string),
            layers: h.layers.name().to_string(),
            text: long_text(h),
        })
        .collect()
}

/// A precision variant: name, description and its definition (query and
/// key pipelines, scoring numerics, hypotheses applied) as a dict.
#[pyclass(frozen, module = "dsa_recall._native")]
struct Variant {
    #[pyo3(get)]
    name: String,
    /// The built-in's description (empty for others).
    #[pyo3(get)]
    description: String,
    /// Its definition (query and key pipelines, scoring numerics,
    /// hypotheses applied) as a dict.
    #[pyo3(get)]
    definition: Py<PyAny>,
    /// The same, for the repr.
    json: serde_json::Value,
}

#[pymethods]
impl Variant {
    /// The fields as a dict (name, description, definition).
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = fields_dict(py, [("name", &self.name), ("description", &self.description)])?;
        d.set_item("definition", &self.definition)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        variant_repr(&self.name, &self.json)
    }
}

/// `Variant('fp8': q e4m3fn/128/ue8m0_ceil/hadamard, k …, weights f32, logits f32)`.
fn variant_repr(name: &str, d: &serde_json::Value) -> String {
    use serde_json::Value;
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "None".to_string(),
        other => other.to_string(),
    };
    let side = |p: &Value| {
        let mut s = p.get("element").map_or("?".to_string(), text);
        if let Some(sc) = p.get("scaling").filter(|sc| !sc.is_null()) {
            let shape = match sc.get("shape") {
                Some(Value::Object(m)) => m.values().next().map_or(String::new(), text),
                Some(v) => text(v),
                None => String::new(),
            };
            s += &format!("/{shape}/{}", sc.get("scale").map_or(String::new(), text));
        }
        match p.get("rotation") {
            None | Some(Value::Null) => {}
            Some(r) if text(r) == "none" => {}
            Some(r) => s += &format!("/{}", text(r)),
        }
        s
    };
    let none = Value::Null;
    let sc = d.get("scoring").unwrap_or(&none);
    let extra: Vec<&str> = ["cache", "selection", "position", "address"].into_iter().filter(|k| d.get(k).is_some()).collect();
    let more = if extra.is_empty() { String::new() } else { format!(", with {} changes", extra.join(" ")) };
    format!(
        "Variant('{name}': q {}, k {}, weights {}, logits {}{more})",
        side(d.get("query").unwrap_or(&none)),
        side(d.get("key").unwrap_or(&none)),
        sc.get("weights").map_or("None".to_string(), text),
        sc.get("logits").map_or("None".to_string(), text),
    )
}

/// Built-in variants, or the one named / defined by `spec` for vectors of
/// `dim`.
#[pyfunction]
#[pyo3(signature = (spec=None, dim=128))]
fn variants(py: Python<'_>, spec: Option<&str>, dim: usize) -> PyResult<Vec<Variant>> {
    use dsa_recall::score::variant::{PrecisionVariant, BUILTIN};
    let describe = |name: &str| BUILTIN.iter().find(|(n, _)| *n == name).map_or(String::new(), |(_, d)| d.to_string());
    let variant = |v: &PrecisionVariant| -> PyResult<Variant> {
        let json = serde_json::to_value(v).map_err(|e| crate::SimulationError::new_err(format!("JSON from the library: {e}")))?;
        Ok(Variant { name: v.name.clone(), description: describe(&v.name), definition: to_py_objects(py, v)?, json })
    };
    match spec {
        Some(text) => Ok(vec![variant(&crate::numerics::resolve_variant("variant", text, dim)?)?]),
        None => BUILTIN.iter().filter_map(|(name, _)| PrecisionVariant::builtin(name)).map(|v| variant(&v)).collect(),
    }
}

/// A knob a sweep takes as a keyword.
#[pyclass(frozen, get_all, module = "dsa_recall._native")]
struct Knob {
    /// The flag without its dashes (`needle-strength`).
    flag: String,
    /// Its path in a scenario TOML file (`needle.strength`).
    path: String,
    help: String,
}

/// Every knob a sweep takes as a keyword.
#[pyfunction]
fn knobs() -> Vec<Knob> {
    ScenarioParams::flags()
        .map(|f| Knob { flag: f.long.trim_start_matches('-').to_string(), path: f.path.to_string(), help: f.help.to_string() })
        .collect()
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

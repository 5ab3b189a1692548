//! `diagnose` and `calibrate`: observations against simulated recall.

use crate::base::observe::Observer;
use crate::commands::request::ScenarioRequest;
use crate::config::{self, Overlay, ScenarioParams};
use crate::diagnose::{self, fit, observations, Diagnosis, Reading};
use crate::error::{ConfigError, Error};
use crate::report::{self, chart::ImageFormat};
use crate::run::output;
use crate::tensors::calibrate;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Trials per cell of a diagnosis unless the scenario says otherwise.
pub const DIAGNOSIS_TRIALS: u64 = 200;

/// The scenario of `diagnose` and `calibrate --observations`: `params`
/// over their defaults ([`DIAGNOSIS_TRIALS`] per cell, no analytic
/// prediction), resolved, and checked once so that a bad value is reported
/// before anything is read or simulated.
pub fn diagnosis_params(params: ScenarioParams) -> Result<ScenarioParams, Error> {
    let mut p = ScenarioParams::default();
    p.sweep.trials = Some(DIAGNOSIS_TRIALS);
    p.estimator.predict = Some(false);
    p.overlay(params);
    let p = config::resolve(p)?;
    config::check(p.clone())?;
    Ok(p)
}

/// `diagnose` as asked.
#[derive(Clone, Debug, PartialEq)]
pub struct DiagnoseRequest {
    pub scenario: ScenarioRequest,
    /// The observation file (docs/OBSERVATIONS.md).
    pub observations: PathBuf,
    /// Candidate hypotheses, as `--hypotheses` lists them.
    pub hypotheses: String,
    /// `model` or `layer`: the recall a row without a layer is compared with.
    pub recall: String,
    /// Also pick the next experiment.
    pub next: bool,
    /// Multiples of the needle knob to profile over, as
    /// `--needle-multipliers` lists them (`off`: the needle as known).
    pub needle_multipliers: String,
    /// Where to write diagnosis.json, the chart and report.html.
    pub out: Option<PathBuf>,
    pub force: bool,
    pub formats: Vec<ImageFormat>,
}

/// A diagnosis and the files written with it.
pub struct Diagnosed {
    pub diagnosis: Diagnosis,
    /// With `out`: the files written there.
    pub written: Option<(PathBuf, Vec<String>)>,
}

impl Diagnosed {
    /// What the command line prints: the table (or JSON) and the files;
    /// `all` lists tied candidates one per line instead of folding them.
    pub fn text(&self, json: bool, all: bool) -> String {
        if json {
            return serde_json::to_string_pretty(&self.diagnosis).unwrap_or_default() + "\n";
        }
        let mut text = if all { diagnose::format_full_table(&self.diagnosis) } else { diagnose::format_table(&self.diagnosis) };
        if let Some((dir, files)) = &self.written {
            let _ = writeln!(text, "wrote {} into {}", files.join(", "), dir.display());
        }
        text
    }
}

/// `diagnose`: the hypotheses ranked on the observations. With `out`, the
/// directory is checked before simulating and written only after
/// everything is computed (and removed again if writing fails and it did
/// not exist before).
pub fn diagnose(request: &DiagnoseRequest, observer: &dyn Observer) -> Result<Diagnosed, Error> {
    let params = diagnosis_params(request.scenario.params()?)?;
    let reading = Reading::parse(&request.recall)?;
    let hypotheses = diagnose::candidates(&request.hypotheses)?;
    let obs = observations::read(&request.observations, &|v| diagnose::variant_ok(&params, v))?;
    let hypotheses = diagnose::with_address_bounds(&request.hypotheses, hypotheses, &obs.rows);
    if let Some(dir) = &request.out {
        output::check_output_dir(dir, request.force)?;
    }
    let pool = request.scenario.thread_pool()?;
    let needle_multipliers = diagnose::parse_needle_multipliers(&request.needle_multipliers, &params)?;
    for &m in &needle_multipliers {
        config::check(diagnose::with_needle_multiple(&params, m)?)?;
    }
    let opts = diagnose::Options { hypotheses, reading, next: request.next, needle_multipliers, observer };
    let diagnosis = pool.install(|| diagnose::diagnose(&params, &obs, &opts))?;
    let written = match &request.out {
        Some(dir) => {
            let existed = dir.exists();
            let _lock = crate::base::files::DirLock::create(dir)?;
            output::prepare_output_dir(dir, request.force)?;
            let files = report::diagnose::write_diagnosis(dir, &diagnosis, &obs, &request.formats);
            if files.is_err() && !existed {
                let _ = std::fs::remove_dir(dir);
            }
            Some((dir.clone(), files?))
        }
        None => None,
    };
    Ok(Diagnosed { diagnosis, written })
}

/// `calibrate` as asked.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrateRequest {
    /// The scenario the fit starts from (its preset also names the checkpoint's model).
    pub scenario: ScenarioRequest,
    /// Checkpoint inputs: shards, an index JSON or a directory.
    pub checkpoint: Vec<PathBuf>,
    /// Observations to fit a knob to (rows marked healthy).
    pub observations: Option<PathBuf>,
    /// The knob fitted, `section.field`; None: the needle's default.
    pub fit: Option<String>,
    /// `LO..HI`, the values tried.
    pub fit_range: Option<String>,
    /// `model` or `layer`.
    pub recall: String,
    /// Where the scenario TOML goes (a fit's curve to NAME.fit.csv beside it).
    pub out: PathBuf,
    /// The command line that asked, written into the TOML's header.
    pub command: String,
}

/// `calibrate`: reads the sources given and writes the scenario: the
/// checkpoint's knobs, then (with observations) the scenario file and flags
/// over them and the fitted knob on top. Returns the text to print.
pub fn calibrate(request: &CalibrateRequest, observer: &dyn Observer) -> Result<String, Error> {
    if request.checkpoint.is_empty() && request.observations.is_none() {
        return Err(ConfigError::new(
            "calibrate",
            "(no source)",
            "--checkpoint FILE… (a checkpoint's shards, index JSON or directory) and/or --observations FILE",
        )
        .into());
    }
    let preset = request.scenario.overlay.preset.as_deref();
    if let Some(p) = preset {
        config::preset_params(p)?;
    }
    let Some(observations) = &request.observations else {
        // The scenario flags and the fit's own serve the fit alone.
        let flags = &request.scenario.overlay;
        let given = request.scenario.config.is_some()
            || ScenarioParams { preset: None, ..flags.clone() } != ScenarioParams::default()
            || request.fit_range.is_some()
            || request.fit.is_some();
        if given {
            return Err(ConfigError::new(
                "calibrate",
                "(scenario or fit flags)",
                "--observations FILE: without it calibrate reads the checkpoint alone, and takes only --preset",
            )
            .into());
        }
        crate::base::files::output_target(&request.out)?;
        let text = calibrate::run_calibrate(&request.checkpoint, preset, &request.out)?;
        return Ok(format!("{text}# → {}\n", request.out.display()));
    };
    calibrate_from_observations(request, observations, observer)
}

/// `calibrate --observations`: the fit, its scenario TOML and curve CSV
/// (both through temporary files: nothing is written on error).
fn calibrate_from_observations(request: &CalibrateRequest, observations: &Path, observer: &dyn Observer) -> Result<String, Error> {
    for p in [request.out.clone(), request.out.with_extension("fit.csv")] {
        crate::base::files::output_target(&p)?;
    }
    let mut base = ScenarioParams::default();
    let mut notes = String::new();
    if !request.checkpoint.is_empty() {
        let cal = calibrate::calibrate_checkpoint(&request.checkpoint, request.scenario.overlay.preset.as_deref())?;
        notes = cal.to_toml();
        base.overlay(
            config::params::parse_scenario_toml(&notes).map_err(|m| Error::ScenarioFile { path: "checkpoint".into(), message: m })?,
        );
    }
    base.overlay(request.scenario.params()?);
    if base.preset.is_none() {
        base.preset = Some(config::DEFAULT_PRESET.to_string());
    }
    let params = diagnosis_params(base.clone())?;
    let reading = Reading::parse(&request.recall)?;
    let range = request.fit_range.as_deref().map(parse_fit_range).transpose()?;
    let obs = observations::read(observations, &|v| diagnose::variant_ok(&params, v))?;
    let pool = request.scenario.thread_pool()?;
    let field = request.fit.as_deref().map_or_else(|| fit::default_field(&params).to_string(), |f| f.trim().to_string());
    let opts = fit::FitOptions { field, range, reading, observer };
    let f = pool.install(|| fit::fit(&params, &obs, &opts))?;
    let mut text = fit::scenario_toml(&base, &f, &request.command)?;
    if !notes.is_empty() {
        text.push_str("\n# From the checkpoint (its values are in the sections above):\n");
        for line in notes.lines() {
            text.push_str(&if line.starts_with('#') { format!("{line}\n") } else { format!("# | {line}\n") });
        }
    }
    let out = &request.out;
    let loaded = config::params::parse_scenario_toml(&text).map_err(|m| Error::ScenarioFile {
        path: out.display().to_string(),
        message: format!("calibrated scenario does not parse: {m}"),
    })?;
    config::check(config::resolve(loaded)?)?;
    let csv_path = out.with_extension("fit.csv");
    let writes = [(out, text.as_str()), (&csv_path, fit::curve_csv(&f).as_str())].map(|(p, t)| (p.clone(), t.to_string()));
    for (p, t) in &writes {
        crate::base::files::write_file(p, t.as_bytes())?;
    }
    Ok(format!("{}wrote {} and {}\n", fit::format_table(&f), out.display(), csv_path.display()))
}

/// `--fit-range LO..HI`: two finite positive numbers, LO < HI.
fn parse_fit_range(text: &str) -> Result<(f64, f64), Error> {
    let refuse = || ConfigError::new("--fit-range", format!("{text:?}"), "LO..HI, two positive numbers with LO < HI, e.g. 0.5..32");
    let (a, b) = text.split_once("..").ok_or_else(refuse)?;
    let (a, b): (f64, f64) = (a.trim().parse().map_err(|_| refuse())?, b.trim().parse().map_err(|_| refuse())?);
    if !(a.is_finite() && b.is_finite() && a > 0.0 && a < b) {
        return Err(refuse().into());
    }
    Ok((a, b))
}

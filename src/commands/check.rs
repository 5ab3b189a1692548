//! `check`: does an engine's indexer agree with the bit-exact reference of
//! its own declared cache layout? (docs/TENSORS.md, "dsa-recall check").

use crate::error::Error;
use crate::tensors::check::layout::{CacheLayout, BUILTIN};
use crate::tensors::check::{check_path, render_text, CheckOptions, CheckReport};
use std::path::PathBuf;

/// What `check` is asked.
#[derive(Clone, Debug, Default)]
pub struct CheckRequest {
    /// A capture file (`.safetensors`) or folder (`NAME.npy`, `meta.json`).
    pub capture: PathBuf,
    pub options: CheckOptions,
    /// Also write the report as JSON here, atomically, once the check ran.
    pub out: Option<PathBuf>,
}

/// What checking a capture found.
#[derive(Clone, Debug)]
pub struct Checked {
    pub report: CheckReport,
}

impl Checked {
    /// 0 when equal up to ties, 1 on a mismatch (the CLI's exit code).
    pub fn exit_code(&self) -> u8 {
        self.report.exit_code
    }

    /// The report as the CLI prints it.
    pub fn text(&self) -> String {
        render_text(&self.report)
    }

    /// The report as JSON (`check --json`, `--out`).
    pub fn json(&self) -> Result<String, Error> {
        serde_json::to_string_pretty(&self.report).map_err(|e| Error::Chart(e.to_string()))
    }
}

/// `dsa-recall check CAPTURE`: the capture checked; with `out`, the report
/// written there as JSON.
pub fn check(request: &CheckRequest) -> Result<Checked, Error> {
    let checked = Checked { report: check_path(&request.capture, &request.options)? };
    if let Some(out) = &request.out {
        crate::base::files::write_file(out, checked.json()?.as_bytes())?;
    }
    Ok(checked)
}

/// `dsa-recall check --layouts [NAME]`: the built-in layouts, one line
/// each, or one as TOML.
pub fn layouts(name: Option<&str>) -> Result<String, Error> {
    match name {
        None => Ok(BUILTIN
            .iter()
            .filter_map(|(n, _)| CacheLayout::builtin(n))
            .map(|l| {
                let status = l.source.as_ref().map_or("", |s| s.status.as_str()).to_string();
                format!("{:<30} {:<9} {}\n", l.name, status, l.description)
            })
            .collect()),
        Some(n) => BUILTIN.iter().find(|(b, _)| *b == n).map(|(_, text)| text.to_string()).ok_or_else(|| {
            crate::ConfigError::new("--layouts", format!("{n:?}"), format!("one of {}", CacheLayout::builtin_names())).into()
        }),
    }
}

/// The built-in layouts as (name, TOML) pairs.
pub fn builtin_layouts() -> Vec<(String, String)> {
    BUILTIN.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect()
}

//! `run` and `trial`: one cell of the grid (one context, depth and k; `run`
//! one precision, `trial` a list of them).

use crate::commands::request::ScenarioRequest;
use crate::config::{ListSpec, Scenario};
use crate::error::{ConfigError, Error};

/// Which one-cell command a request is for: their messages name it, and
/// `run` takes one precision where `trial` takes a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellCommand {
    Run,
    Trial,
}

impl CellCommand {
    fn name(self) -> &'static str {
        match self {
            CellCommand::Run => "run",
            CellCommand::Trial => "trial",
        }
    }

    /// The precision flag: `run --precision NAME`, `trial --precisions LIST`.
    fn precision_flag(self) -> &'static str {
        match self {
            CellCommand::Run => "--precision",
            CellCommand::Trial => "--precisions",
        }
    }
}

/// The cell of `run` or `trial`, each coordinate as typed (None: not given,
/// the scenario's value then counts only if it is a single one).
#[derive(Clone, Debug, PartialEq)]
pub struct CellRequest {
    pub command: CellCommand,
    pub scenario: ScenarioRequest,
    pub context: Option<String>,
    pub depth: Option<String>,
    pub topk: Option<String>,
    /// `run`: one precision variant; `trial`: a list.
    pub precisions: Option<String>,
}

impl CellRequest {
    /// The checked scenario of the cell: the coordinates given replace the
    /// sweep's lists, and every list must hold one value (`trial` may list
    /// precisions).
    pub fn scenario(&self) -> Result<Scenario, Error> {
        let text = |v: &Option<String>| v.as_ref().map(|s| ListSpec::Text(s.clone()));
        let mut overlay = self.scenario.overlay.clone();
        overlay.sweep.contexts = text(&self.context);
        overlay.sweep.depths = text(&self.depth);
        overlay.sweep.topk = text(&self.topk);
        overlay.sweep.precisions = text(&self.precisions);
        let request = ScenarioRequest { overlay, ..self.scenario.clone() };
        let s = request.scenario().map_err(|e| self.singular_fields(e))?;
        self.one_cell(&s)?;
        Ok(s)
    }

    /// Errors of the grid's lists in this command's spelling: `run` and
    /// `trial` give `--context`, `--depth` (and `run` `--precision`) where
    /// `sweep` gives `--contexts`, `--depths` and `--precisions`.
    fn singular_fields(&self, e: Error) -> Error {
        let Error::Config(mut c) = e else { return e };
        for (path, flag) in
            [("sweep.contexts", "--context"), ("sweep.depths", "--depth"), ("sweep.precisions", self.command.precision_flag())]
        {
            if c.field == crate::config::field_name(path) {
                c.field = format!("{path} ({flag})");
            }
        }
        Error::Config(c)
    }

    /// Every axis of the scenario holds one value (`trial` may list
    /// precisions). A list the user never typed (the preset's) is reported
    /// as a missing flag.
    fn one_cell(&self, s: &Scenario) -> Result<(), ConfigError> {
        let command = self.command.name();
        let mut axes = vec![
            (s.contexts.len(), "--context", Some(self.context.is_some())),
            (s.depths.len(), "--depth", Some(self.depth.is_some())),
            (s.topks.len(), "--topk", Some(self.topk.is_some())),
            (s.needle_offsets.len(), "--needle-offsets", None),
        ];
        if self.command == CellCommand::Run {
            axes.push((s.precisions.len(), self.command.precision_flag(), Some(self.precisions.is_some())));
        }
        match axes.into_iter().find(|&(n, _, _)| n != 1) {
            Some((n, field, Some(false))) => Err(ConfigError::new(
                field,
                "(not given)",
                format!("one value: `{command}` simulates one cell, and the scenario's sweep has {n} (use `sweep` for lists)"),
            )),
            Some((n, field, _)) => Err(ConfigError::new(
                field,
                format!("{n} values"),
                format!("`{command}` simulates one cell: give one value (use `sweep` for lists)"),
            )),
            None => Ok(()),
        }
    }
}

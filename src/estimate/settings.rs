//! How a cell's recall is estimated: by simulating every row (`full`), or by
//! tail sampling (`tail`, see [`crate::estimate::tail`]); and whether the analytic
//! prediction ([`crate::estimate::predict`]) is reported beside it.

use serde::{Deserialize, Serialize};

/// The estimator of a cell's recall.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EstimatorMode {
    /// Generate, quantize and score every row of every context.
    #[default]
    Full,
    /// Estimate each trial's exceedance probability from a sample of rows
    /// with importance sampling of the upper tail.
    Tail,
}

impl EstimatorMode {
    pub const NAMES: &'static str = "full, tail";

    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "full" => Some(EstimatorMode::Full),
            "tail" => Some(EstimatorMode::Tail),
            _ => None,
        }
    }

    /// The value as written in a scenario file, quoted.
    pub fn toml_value(self) -> &'static str {
        match self {
            EstimatorMode::Full => "\"full\"",
            EstimatorMode::Tail => "\"tail\"",
        }
    }
}

/// Default rows drawn per trial in tail mode.
pub const DEFAULT_TAIL_ROWS: u64 = 4096;

/// `[estimator]`, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EstimatorSettings {
    pub mode: EstimatorMode,
    /// Rows drawn per trial in tail mode (half from the haystack, half from
    /// the tilted proposal).
    pub tail_rows: u64,
    /// Report the analytic prediction beside each cell's recall. Off by
    /// default: it costs ~13 ms per trial on one core, more than a 32K-token
    /// trial (docs/MODEL.md, "Analytic prediction").
    pub predict: bool,
    /// Audit every cell's cut for ties and re-pick it under each tie rule
    /// (`ties.csv`; docs/MODEL.md, "Tie audit"). Off by default, and then
    /// left out of manifests, which keep their bytes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tie_audit: bool,
    /// Search each trial's critical needle rank under the quantile needle
    /// and report the needle margin (docs/MODEL.md, "The needle margin").
    /// On by default, and then left out of manifests, which keep their bytes.
    #[serde(default = "on", skip_serializing_if = "is_true")]
    pub margin: bool,
    /// Measure each cell's rank margin, the best needle row's lead over the
    /// k-th competitor (`margin_sd`, the rank-margin chart). Not a setting:
    /// on wherever a scenario is read; `diagnose`, which reads recall
    /// alone, switches it off (a partial sort per cell and variant).
    #[serde(skip, default = "on")]
    pub rank_margins: bool,
}

fn is_false(x: &bool) -> bool {
    !*x
}

fn is_true(x: &bool) -> bool {
    *x
}

fn on() -> bool {
    true
}

impl Default for EstimatorSettings {
    fn default() -> Self {
        Self { mode: EstimatorMode::Full, tail_rows: DEFAULT_TAIL_ROWS, predict: false, tie_audit: false, margin: true, rank_margins: true }
    }
}

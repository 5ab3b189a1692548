//! `replay`: recorded indexer tensors through precision variants, each
//! selection compared with the exact fp32 one.

use crate::error::ConfigError;
use crate::score::variant::PrecisionVariant;
use crate::tensors::replay::Capture;

/// What to replay a capture under.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayRequest {
    /// Top-k sizes, each positive.
    pub topks: Vec<u64>,
    /// Built-in precision variants (a replay has no scenario to define others in).
    pub precisions: Vec<String>,
    /// Needle rows, replacing the capture's own.
    pub needle_rows: Option<Vec<u64>>,
}

impl ReplayRequest {
    /// The sizes and variants, checked before any tensor is read.
    pub fn variants(&self) -> Result<Vec<PrecisionVariant>, ConfigError> {
        if self.topks.is_empty() || self.topks.contains(&0) {
            return Err(ConfigError::new("--topk", format!("{:?}", self.topks), "one or more positive sizes"));
        }
        self.precisions
            .iter()
            .map(|name| {
                PrecisionVariant::builtin(name).ok_or_else(|| {
                    ConfigError::new(
                        "--precisions",
                        format!("{name:?}"),
                        format!("one of {}", PrecisionVariant::builtin_names().join(", ")),
                    )
                })
            })
            .collect()
    }

    /// Checks `variants` and the needle rows against the capture read; the
    /// needle rows given replace the capture's.
    pub fn fit(&self, cap: &mut Capture, variants: &[PrecisionVariant]) -> Result<(), ConfigError> {
        let shape = cap.shape();
        for v in variants {
            if let Some(reason) = v.unsupported(shape.dim) {
                return Err(ConfigError::new("--precisions", &v.name, format!("not with head_dim {}: {reason}", shape.dim)));
            }
        }
        if let Some(rows) = &self.needle_rows {
            if let Some(&bad) = rows.iter().find(|&&r| r as usize >= shape.rows) {
                return Err(ConfigError::new("--needle-rows", bad, format!("row indices below {}", shape.rows)));
            }
            *cap.needle_rows_mut() = rows.clone();
        }
        Ok(())
    }
}

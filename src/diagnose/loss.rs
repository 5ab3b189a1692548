//! Selection-independent loss (`loss`, `loss-by-length`): the selection is
//! healthy's and the answer is lost afterwards with a probability that does
//! not depend on whether the needle was selected. A row's likelihood is
//! taken at the healthy simulated recall × (1 − the loss there), with the
//! likelihood marginal over a grid of the loss, as over the needle's
//! multiples: no trials of their own.

use super::candidates::Reading;
use super::observations::Observation;
use serde::Serialize;

/// The constant loss's candidate name.
pub const CONSTANT: &str = "loss";
/// The loss growing with length.
pub const BY_LENGTH: &str = "loss-by-length";

/// Shares tried for the constant loss.
pub const SHARES: [f64; 15] = [0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99];

/// Half-lengths (tokens) tried for the loss growing with length: powers of two from 1K to 1M.
pub fn half_lengths() -> impl Iterator<Item = u64> {
    (10..=20).map(|e| 1u64 << e)
}

/// A loss after the selection, at its fitted value.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "form", rename_all = "kebab-case")]
pub enum Loss {
    /// This share of the answers is lost at every row.
    Constant { share: f64 },
    /// 1 − 2^(−n/half_tokens) of the answers is lost at n prompt tokens.
    ByLength { half_tokens: u64 },
}

impl Loss {
    /// The share lost at a prompt of `context_tokens`.
    pub fn share_at(&self, context_tokens: u64) -> f64 {
        match *self {
            Loss::Constant { share } => share,
            Loss::ByLength { half_tokens } => 1.0 - 0.5f64.powf(context_tokens as f64 / half_tokens as f64),
        }
    }

    /// The grid candidate `h`'s likelihood is averaged over (empty for any other candidate).
    pub fn grid(h: &str) -> Vec<Loss> {
        match h.trim() {
            CONSTANT => SHARES.iter().map(|&share| Loss::Constant { share }).collect(),
            BY_LENGTH => half_lengths().map(|half_tokens| Loss::ByLength { half_tokens }).collect(),
            _ => Vec::new(),
        }
    }

    /// In words, for the ranking and the verdict.
    pub fn describe(&self) -> String {
        match *self {
            Loss::Constant { share } => format!("{} % of answers lost", round(share * 100.0)),
            Loss::ByLength { half_tokens } => format!("half of answers lost at {}K tokens", half_tokens / 1024),
        }
    }
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The recall a row is compared with under `loss`, from healthy's `p`: a
/// per-layer reading (a capture, or `Reading::Layer`) sees the selection
/// only, which the loss leaves healthy.
pub fn with_loss(p: f64, loss: &Loss, row: &Observation, reading: Reading) -> f64 {
    if row.layer.is_some() || reading == Reading::Layer {
        p
    } else {
        p * (1.0 - loss.share_at(row.context_tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_act_on_whole_model_rows_only() {
        let constant = Loss::Constant { share: 0.1 };
        let growing = Loss::ByLength { half_tokens: 16 * 1024 };
        assert_eq!(constant.share_at(1), 0.1);
        assert!((growing.share_at(16 * 1024) - 0.5).abs() < 1e-12);
        assert!((growing.share_at(32 * 1024) - 0.75).abs() < 1e-12);
        assert!(growing.share_at(1024) < growing.share_at(4096));
        let csv = "context_tokens,depth_percent,topk,config,found,total\n16K,50,512,fp8,1,2\n";
        let mut row = super::super::observations::parse("t.csv", csv, &|_| Ok(())).unwrap().rows.remove(0);
        assert!((with_loss(0.8, &constant, &row, Reading::Model) - 0.72).abs() < 1e-12);
        assert!((with_loss(0.8, &growing, &row, Reading::Model) - 0.4).abs() < 1e-12);
        // A capture sees the selection, which the loss leaves healthy.
        assert_eq!(with_loss(0.8, &constant, &row, Reading::Layer), 0.8);
        row.layer = Some(3);
        assert_eq!(with_loss(0.8, &growing, &row, Reading::Model), 0.8);
        assert_eq!(Loss::grid(CONSTANT).len(), SHARES.len());
        assert_eq!(Loss::grid(BY_LENGTH).first(), Some(&Loss::ByLength { half_tokens: 1024 }));
        assert!(Loss::grid("slot-shift").is_empty());
        assert_eq!(constant.describe(), "10 % of answers lost");
        assert_eq!(growing.describe(), "half of answers lost at 16K tokens");
    }
}

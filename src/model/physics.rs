//! Switchable scenario physics beyond the null model of docs/MODEL.md:
//! position (RoPE), compression of tokens into rows (gated pooling and
//! RMSNorm), the key norm of rows that are not pooled (V3.2's LayerNorm) and
//! the norms' learned weight and bias, correlated neighbouring tokens and
//! distractor needles.
//!
//! Every component can be switched off; with all of them off a trial is the
//! null model exactly (same bits), which keeps the core tests meaningful.

use serde::{Deserialize, Serialize};

/// Which rotary embedding layout the indexer's keys and query carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RopeChoice {
    #[serde(rename = "off")]
    Off,
    /// DeepSeek-V3.2: first 64 dims, pairs (j, j+32), YaRN-scaled.
    #[serde(rename = "v3.2")]
    V32,
    /// DeepSeek-V4: last 64 dims, interleaved pairs, theta 160000, YaRN.
    #[serde(rename = "v4")]
    V4,
}

impl RopeChoice {
    pub const NAMES: &'static str = "off, v3.2, v4";

    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Some(RopeChoice::Off),
            "v3.2" | "v32" => Some(RopeChoice::V32),
            "v4" => Some(RopeChoice::V4),
            _ => None,
        }
    }

    /// The name `--rope` takes.
    pub fn name(self) -> &'static str {
        match self {
            RopeChoice::Off => "off",
            RopeChoice::V32 => "v3.2",
            RopeChoice::V4 => "v4",
        }
    }

    /// The rotary embedding this choice stands for, None when off.
    pub fn config(self) -> Option<crate::model::rope::RopeConfig> {
        match self {
            RopeChoice::Off => None,
            RopeChoice::V32 => Some(crate::model::rope::RopeConfig::deepseek_v32()),
            RopeChoice::V4 => Some(crate::model::rope::RopeConfig::deepseek_v4()),
        }
    }
}

/// How rows are built from tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pooling {
    /// The null model: each row is one Gaussian key and every row that holds
    /// a needle token carries the whole needle offset.
    Off,
    /// Rows pooled from tokens with gated softmax and RMSNorm. Rows without
    /// needle or distractor tokens are drawn from the pooled distribution
    /// directly when that is exact (deterministic gates, independent tokens),
    /// and token by token otherwise.
    On,
    /// Every row pooled token by token, even where the shortcut is exact
    /// (to check the shortcut; slower).
    Full,
}

impl Pooling {
    pub const NAMES: &'static str = "off, on, full";

    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" => Some(Pooling::Off),
            "on" => Some(Pooling::On),
            "full" => Some(Pooling::Full),
            _ => None,
        }
    }
}

/// The norm applied to key rows that are not pooled (pooled rows always get
/// the compressor's RMSNorm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyNorm {
    /// Rows are used as drawn (the null model).
    Off,
    /// LayerNorm, eps 1e-6, then weight and bias: the V3.2 indexer's
    /// `k_norm(wk(x))` (DeepSeek-V3.2-Exp `inference/model.py`, class
    /// `LayerNorm` and `Indexer.forward`).
    #[serde(rename = "layernorm")]
    LayerNorm,
    /// RMSNorm, eps 1e-6, then weight: the V4 compressor's norm, on rows
    /// that are not pooled (to compare the norms on equal terms).
    #[serde(rename = "rmsnorm")]
    RmsNorm,
}

impl KeyNorm {
    pub const NAMES: &'static str = "off, layernorm, rmsnorm";

    fn off() -> Self {
        KeyNorm::Off
    }

    fn is_off(&self) -> bool {
        *self == KeyNorm::Off
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Some(KeyNorm::Off),
            "layernorm" | "layer-norm" => Some(KeyNorm::LayerNorm),
            "rmsnorm" | "rms-norm" => Some(KeyNorm::RmsNorm),
            _ => None,
        }
    }
}

/// The physics of one scenario (validated by config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Physics {
    pub rope: RopeChoice,
    pub pooling: Pooling,
    /// Spread of the learned per-(slot, channel) gate bias, drawn per trial.
    pub gate_bias_std: f64,
    /// Spread of the token-dependent part of the gate logits.
    pub gate_noise_std: f64,
    /// Added to the gate logits of needle and distractor tokens: how much the
    /// compressor favours them over their window's other tokens.
    pub needle_gate_boost: f64,
    /// Correlation length of neighbouring tokens' keys, in tokens (0 = independent).
    pub correlation_length: f64,
    /// Near-copies of the needle placed at random positions.
    pub distractors: u64,
    /// Cosine similarity of each distractor's offset to the needle's.
    pub distractor_similarity: f64,
    // The three norm fields are left out of manifests at their null values,
    // so that a scenario without them records what it did before they existed.
    /// Norm of rows that are not pooled (ratio 1 or pooling off).
    #[serde(default = "KeyNorm::off", skip_serializing_if = "KeyNorm::is_off")]
    pub key_norm: KeyNorm,
    /// Spread of the norm's learned per-channel weight γ: ln γ_j ~ N(0, s²),
    /// drawn per trial; 0 gives γ = 1. Acts on whichever norm the rows get
    /// (the compressor's RMSNorm or `key_norm`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub norm_weight_spread: f64,
    /// LayerNorm bias β: ‖β‖ = norm_bias · ‖γ‖, in a random direction drawn
    /// per trial; only with `key_norm = layernorm` (RMSNorm has no bias).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub norm_bias: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Physics {
    /// Everything off: the null model.
    pub const NULL: Physics = Physics {
        rope: RopeChoice::Off,
        pooling: Pooling::Off,
        gate_bias_std: 0.0,
        gate_noise_std: 0.0,
        needle_gate_boost: 0.0,
        correlation_length: 0.0,
        distractors: 0,
        distractor_similarity: 0.0,
        key_norm: KeyNorm::Off,
        norm_weight_spread: 0.0,
        norm_bias: 0.0,
    };

    /// Whether a trial with this physics is the null model, bit for bit: no
    /// RoPE, no pooling at this ratio, no key norm, independent tokens and no
    /// distractors. The gate and norm-weight fields only act through pooling
    /// or a norm, so they may be left set (a preset's `--rope off --pooling
    /// off --key-norm off` is the null model).
    pub fn is_null(&self, ratio: u64) -> bool {
        self.rope == RopeChoice::Off
            && !self.pools(ratio)
            && self.row_norm(ratio) == KeyNorm::Off
            && self.correlation_length == 0.0
            && self.distractors == 0
    }

    /// The norm rows get at this ratio: the compressor's RMSNorm when they
    /// are pooled, `key_norm` otherwise.
    pub fn row_norm(&self, ratio: u64) -> KeyNorm {
        if self.pools(ratio) {
            KeyNorm::RmsNorm
        } else {
            self.key_norm
        }
    }

    /// Whether rows come from pooled tokens (pooling on and more than one token per row).
    pub fn pools(&self, ratio: u64) -> bool {
        self.pooling != Pooling::Off && ratio > 1
    }

    /// Whether rows without special tokens may be drawn from the pooled
    /// distribution directly: exact when the gates are the same for every
    /// window and tokens are independent (docs/MODEL.md, "Compression").
    pub fn shortcut_is_exact(&self) -> bool {
        self.gate_noise_std == 0.0 && self.correlation_length == 0.0
    }

    /// Whether rows are independent given the trial's draws and haystack
    /// rows come straight from the row distribution (no token-level
    /// generation, no correlated tokens, no distractors): what the sampling
    /// estimators (tail mode, the prediction) need. Position may still
    /// matter (RoPE), and pooling may be on through the exact shortcut.
    pub fn rows_are_independent(&self, ratio: u64) -> bool {
        !self.token_level(ratio) && self.correlation_length == 0.0 && self.distractors == 0
    }

    /// Token-by-token generation of every row.
    pub fn token_level(&self, ratio: u64) -> bool {
        self.pools(ratio) && (self.pooling == Pooling::Full || !self.shortcut_is_exact())
    }

    /// AR(1) coefficient between neighbouring tokens, exp(−1/ℓ).
    pub fn token_correlation(&self) -> f64 {
        if self.correlation_length > 0.0 {
            (-1.0 / self.correlation_length).exp()
        } else {
            0.0
        }
    }
}

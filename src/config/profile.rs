//! Needle profiles: named settings of the `[needle]` knobs that say how hard
//! a needle is (docs/MODEL.md, "The needle's unit"; sources in
//! docs/CALIBRATION.md, "Needle profiles"). A profile is laid over the
//! preset and under the scenario file and flags, so every knob it sets can
//! still be set on its own.

use super::params::NeedleParams;
use crate::error::ConfigError;

/// One profile: its name, what it stands for, and the knobs it sets.
#[derive(Debug)]
pub struct NeedleProfile {
    pub name: &'static str,
    pub about: &'static str,
    /// `quantile` or `strength`.
    pub unit: &'static str,
    /// Quantile unit: median exceedance and the spreads of log10 u (decades).
    pub exceedance: f64,
    pub prompt_spread: f64,
    pub layer_spread: f64,
    pub token_spread: f64,
    /// Strength unit: haystack SDs of each looking head.
    pub strength: f64,
}

/// The profile a preset starts from.
pub const DEFAULT_PROFILE: &str = "niah";

/// Every profile. `niah`: 1CatAI/1Cat-vLLM PR #250 put a correct V4 prefill
/// path's needle at rank 0–16 of 13,801 compressed rows; read as a median
/// rank of 4 (u = 4/13801) and a 95th percentile of 16, log10 u has a spread
/// of 0.37 decades; its split between prompts, layers and tokens (0.25,
/// 0.25, 0.1) is an assumption. `hard`: a labelled pessimistic setting, a
/// median rank of 16 at 13,801 rows and a wide spread over prompts, for
/// paraphrased or multi-key needles. `stress`: the fixed strength-1 needle
/// that was the default before the quantile unit.
pub const PROFILES: &[NeedleProfile] = &[
    NeedleProfile {
        name: "niah",
        about: "a needle-in-a-haystack fact as a real indexer ranks it: median rank 4 of 13,801 rows (1Cat-vLLM PR #250)",
        unit: "quantile",
        exceedance: 4.0 / 13_801.0,
        prompt_spread: 0.25,
        layer_spread: 0.25,
        token_spread: 0.1,
        strength: 1.0,
    },
    NeedleProfile {
        name: "hard",
        about: "a pessimistic needle (paraphrased, multi-key): median rank 16 of 13,801 rows, prompts spread 0.6 decades (assumption)",
        unit: "quantile",
        exceedance: 16.0 / 13_801.0,
        prompt_spread: 0.6,
        layer_spread: 0.25,
        token_spread: 0.1,
        strength: 1.0,
    },
    NeedleProfile {
        name: "stress",
        about: "a fixed one-SD nudge of each looking head in every prompt (the default before needle profiles)",
        unit: "strength",
        exceedance: 4.0 / 13_801.0,
        prompt_spread: 0.25,
        layer_spread: 0.25,
        token_spread: 0.1,
        strength: 1.0,
    },
];

pub fn profile_names() -> String {
    PROFILES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// The profile named `name`.
pub fn profile(name: &str) -> Result<&'static NeedleProfile, ConfigError> {
    PROFILES.iter().find(|p| p.name == name).ok_or_else(|| {
        ConfigError::new(super::params::field_name("needle.profile"), format!("{name:?}"), format!("one of {}", profile_names()))
    })
}

impl NeedleProfile {
    /// The `[needle]` knobs this profile sets, as an overlay.
    pub fn params(&self) -> NeedleParams {
        NeedleParams {
            profile: Some(self.name.to_string()),
            unit: Some(self.unit.to_string()),
            strength: Some(self.strength),
            exceedance: Some(self.exceedance),
            prompt_spread: Some(self.prompt_spread),
            layer_spread: Some(self.layer_spread),
            token_spread: Some(self.token_spread),
            ..NeedleParams::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_are_unique_and_the_default_exists() {
        for (i, p) in PROFILES.iter().enumerate() {
            assert!(PROFILES[..i].iter().all(|q| q.name != p.name), "{}", p.name);
            assert!(p.exceedance > 0.0 && p.exceedance < 1.0);
        }
        assert!(profile(DEFAULT_PROFILE).is_ok());
        let e = profile("easy").unwrap_err().to_string();
        assert_eq!(e, "invalid needle.profile (--needle-profile) = \"easy\": one of niah, hard, stress");
    }

    #[test]
    fn the_niah_profile_reads_the_rank_capture() {
        // Median rank 4 of 13,801 rows; the 95th percentile at rank 16:
        // log10(16/13801) = log10 u + 1.645·σ.
        let p = profile("niah").unwrap();
        let sigma = (p.prompt_spread.powi(2) + p.layer_spread.powi(2) + p.token_spread.powi(2)).sqrt();
        let p95 = 10f64.powf(p.exceedance.log10() + 1.645 * sigma) * 13_801.0;
        assert!((p95 - 16.0).abs() < 0.5, "{p95}");
    }
}

//! `presets` and `hypotheses`: the embedded catalogues, as text.

use crate::config::{self, ScenarioParams};
use crate::error::{ConfigError, Error};
use crate::score::hypothesis;

/// `presets`: one line per embedded preset, its name and description.
pub fn presets() -> String {
    let mut text = String::new();
    for (name, toml) in config::PRESETS {
        let params = config::params::parse_scenario_toml(toml).unwrap_or_default();
        text.push_str(&format!("{name:<20} {}\n", params.description.unwrap_or_default()));
    }
    text
}

/// `presets show NAME`: the preset's TOML, then its layer stack's reading.
pub fn preset(name: &str) -> Result<String, Error> {
    let mut text = config::preset_text(name)?.to_string();
    let s = config::check(config::resolve(ScenarioParams { preset: Some(name.to_string()), ..Default::default() })?)?;
    if let Some(stack) = &s.stack {
        text.push_str(&format!("\n{}", stack.toml_comment(s.needle_tokens, s.physics.needle_gate_boost)));
    }
    Ok(text)
}

/// `hypotheses`: one line per hypothesis, or each in full with `long`.
pub fn hypotheses(long: bool) -> String {
    let mut text = String::new();
    // each column as wide as its longest entry, so summaries line up
    let widest =
        |f: fn(&hypothesis::HypothesisInfo) -> &'static str| hypothesis::CATALOGUE.iter().map(|h| f(h).chars().count()).max().unwrap_or(0);
    let (g, c, width) = (widest(|h| h.group.name()), widest(|h| h.class.name()), widest(|h| h.name));
    if !long {
        text.push_str(&format!("{:<g$} {:<c$} {:<width$} {}\n", "group", "class", "name", "what it simulates"));
    }
    for h in hypothesis::CATALOGUE {
        if long {
            text.push_str(&format!("{}\n", hypothesis::long_text(h)));
        } else {
            text.push_str(&format!("{:<g$} {:<c$} {:<width$} {}\n", h.group.name(), h.class.name(), h.name, h.summary));
        }
    }
    text
}

/// `hypotheses show NAME`: one hypothesis in full.
pub fn hypothesis(name: &str) -> Result<String, ConfigError> {
    let h = hypothesis::info(name)
        .ok_or_else(|| ConfigError::new("hypotheses show", format!("{name:?}"), format!("one of {}", hypothesis::names())))?;
    Ok(hypothesis::long_text(h))
}

/// `hypotheses --markdown`: docs/HYPOTHESES.md, generated from the catalogue.
pub fn hypotheses_markdown() -> String {
    hypothesis::markdown()
}

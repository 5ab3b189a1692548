//! Unchecked scenario parameters: what presets, scenario files and the
//! command line say, every field optional. [`super::check`] turns a merged set
//! into a validated [`super::Scenario`].

use serde::{Deserialize, Serialize};

/// A list given either as one string ("1K..128K") or as a TOML array.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ListSpec {
    Text(String),
    Items(Vec<ListItem>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ListItem {
    Int(i64),
    Float(f64),
    Text(String),
}

impl ListSpec {
    /// The list as the comma-separated text the list parsers read.
    pub fn to_text(&self) -> String {
        match self {
            ListSpec::Text(s) => s.clone(),
            ListSpec::Items(items) => items
                .iter()
                .map(|i| match i {
                    ListItem::Int(v) => v.to_string(),
                    ListItem::Float(v) => v.to_string(),
                    ListItem::Text(v) => v.clone(),
                })
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// Fields overlay: `self` keeps its values, `other` fills the gaps.
pub trait Overlay {
    /// Values of `top` win over values of `self`.
    fn overlay(&mut self, top: Self);
}

macro_rules! section {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$fmeta])* #[serde(skip_serializing_if = "Option::is_none")] pub $field: Option<$ty>,)*
        }
        impl Overlay for $name {
            fn overlay(&mut self, top: Self) {
                $(if top.$field.is_some() { self.$field = top.$field; })*
            }
        }
    };
}

section!(
    /// `[indexer]`: the lightning indexer's shape and head weights.
    IndexerParams {
        heads: usize,
        head_dim: usize,
        /// The model's configured top-k (index_topk).
        index_topk: u64,
        weight_mean: f64,
        weight_std: f64,
    }
);

section!(
    /// `[geometry]`: compression into rows and the raw window.
    GeometryParams {
        compress_ratio: u64,
        overlap: bool,
        window: u64,
    }
);

section!(
    /// `[keys]`: the synthetic haystack keys.
    KeyParams {
        common: f64,
        outlier_channels: usize,
        outlier_scale: f64,
    }
);

section!(
    /// `[needle]`
    NeedleParams {
        strength: f64,
        tokens: u64,
        heads: usize,
    }
);

section!(
    /// `[selection]`
    SelectionParams {
        tie_rule: String,
        window_rows_compete: bool,
    }
);

section!(
    /// `[physics]`: position, pooling, correlated tokens, distractors (docs/MODEL.md, "Physics").
    PhysicsParams {
        /// off | v3.2 | v4
        rope: String,
        /// off | on | full
        pooling: String,
        gate_bias_std: f64,
        gate_noise_std: f64,
        needle_gate_boost: f64,
        /// In tokens; 0 = independent tokens.
        correlation_length: f64,
        distractors: u64,
        distractor_similarity: f64,
    }
);

section!(
    /// `[sweep]`: the cell grid and the Monte Carlo.
    SweepParams {
        contexts: ListSpec,
        /// Added to every context: each context L becomes ⌊L/c⌋·c + m for each m (prompt length mod the ratio).
        length_mods: ListSpec,
        depths: ListSpec,
        /// Needle offsets inside a row stride, 0 … c−1, or "natural".
        needle_offsets: ListSpec,
        topk: ListSpec,
        precisions: ListSpec,
        trials: u64,
        seed: u64,
        threshold: f64,
    }
);

section!(
    /// `[precision.query]` / `[precision.key]`: one side of a custom variant.
    PrecisionSideParams {
        /// none | hadamard (default none).
        rotation: String,
        /// f32 | bf16 | fp16 | e4m3fn | e5m2 | e2m1 (default f32).
        element: String,
        /// 16, 32, 64, 128 … (must divide head_dim), "row" or "tensor"; absent: no scale.
        block: ListItem,
        /// fp32 | ue8m0 | ue8m0-floor | e4m3; required with `block`.
        scale: String,
        /// Floor on a block's amax (default: the matching reference rule's).
        amax_floor: f64,
    }
);

section!(
    /// `[[precision]]`: a custom precision variant, usable by name in
    /// `sweep.precisions`.
    PrecisionParams {
        name: String,
        /// f32 | bf16 | f16 (default f32).
        logits: String,
        /// f32 | bf16 (default f32).
        weights: String,
        query: PrecisionSideParams,
        key: PrecisionSideParams,
    }
);

section!(
    /// `[estimator]`: how recall is estimated (see `crate::estimate::settings`).
    EstimatorParams {
        /// full | tail (default full).
        mode: String,
        /// Rows drawn per trial in tail mode (default 4096).
        tail_rows: u64,
        /// Report the analytic prediction (default false).
        predict: bool,
    }
);

/// A whole scenario, every field optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioParams {
    /// The preset this scenario starts from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub indexer: IndexerParams,
    #[serde(default)]
    pub geometry: GeometryParams,
    #[serde(default)]
    pub keys: KeyParams,
    #[serde(default)]
    pub needle: NeedleParams,
    #[serde(default)]
    pub selection: SelectionParams,
    #[serde(default)]
    pub physics: PhysicsParams,
    #[serde(default)]
    pub sweep: SweepParams,
    #[serde(default)]
    pub estimator: EstimatorParams,
    /// Custom precision variants (`[[precision]]`). Layers add to the list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub precision: Vec<PrecisionParams>,
}

impl Overlay for ScenarioParams {
    fn overlay(&mut self, top: Self) {
        if top.preset.is_some() {
            self.preset = top.preset;
        }
        if top.description.is_some() {
            self.description = top.description;
        }
        self.indexer.overlay(top.indexer);
        self.geometry.overlay(top.geometry);
        self.keys.overlay(top.keys);
        self.needle.overlay(top.needle);
        self.selection.overlay(top.selection);
        self.physics.overlay(top.physics);
        self.sweep.overlay(top.sweep);
        self.estimator.overlay(top.estimator);
        self.precision.extend(top.precision);
    }
}

/// Parses a scenario file's text. Errors are one line: `line L, column C: message`.
pub fn parse_scenario_toml(text: &str) -> Result<ScenarioParams, String> {
    toml::from_str(text).map_err(|e| {
        let message = e.message().trim().replace('\n', " ");
        match e.span() {
            Some(span) => {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!("line {line}, column {column}: {message}")
            }
            None => message,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_keeps_base_values_the_top_leaves_out() {
        let mut base = parse_scenario_toml("[needle]\nstrength = 1.0\ntokens = 4\n").unwrap();
        let top = parse_scenario_toml("[needle]\nstrength = 2.0\n").unwrap();
        base.overlay(top);
        assert_eq!(base.needle.strength, Some(2.0));
        assert_eq!(base.needle.tokens, Some(4));
    }

    #[test]
    fn unknown_keys_are_reported_with_line_and_column() {
        let err = parse_scenario_toml("[needle]\nstrength = 1.0\nstrenght = 2.0\n").unwrap_err();
        assert!(err.starts_with("line 3, column 1: unknown field `strenght`"), "{err}");
        let err = parse_scenario_toml("[needl]\n").unwrap_err();
        assert!(err.contains("line 1") && err.contains("unknown field `needl`"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn lists_accept_text_or_arrays() {
        let p = parse_scenario_toml("[sweep]\ncontexts = [1024, \"4K\"]\ndepths = \"0..100:50\"\n").unwrap();
        assert_eq!(p.sweep.contexts.unwrap().to_text(), "1024,4K");
        assert_eq!(p.sweep.depths.unwrap().to_text(), "0..100:50");
    }
}

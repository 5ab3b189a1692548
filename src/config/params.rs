//! Unchecked scenario parameters: what presets, scenario files and the
//! command line say, every field optional. [`super::check`] turns a merged set
//! into a validated [`super::Scenario`].
//!
//! # The knob table
//!
//! The `section!` invocations below define every scenario parameter once: its
//! TOML path (`[physics]` + `gate_noise_std`), its type and, if it has a flag,
//! the flag, its value name and its `--help` line. From them come the section
//! structs (serde, unknown keys refused), their [`Overlay`], the clap
//! arguments of `sweep`, `run` and `trial` ([`super::flags`]), the command
//! line read back as an overlay ([`ScenarioParams::from_flags`]) and the
//! `FIELD (--flag)` names of error messages ([`super::field_name`]). Flags
//! appear in `--help` in table order.
//!
//! ## Adding a knob
//!
//! 1. One row in its section below, e.g.
//!    `gate_noise_std: f64 = flag("--gate-noise-std", "X", "Spread of …")`
//!    (no `= flag(…)` for a knob set only in TOML).
//! 2. One line in that section's check in `config/mod.rs` (`check_physics`
//!    for `[physics]`, …): its range, and where the checked value goes in
//!    the [`super::Scenario`].
//!
//! Beyond the configuration, the model code that uses the value (for a
//! physics knob, a field of `model::physics::Physics`), its row in the
//! docs/MODEL.md table, and a value in the presets if the check has no
//! default for it.

use super::flags::{self, text_arg, Command, Flag, FlagValue, Scope, Spelling};
use crate::error::ConfigError;
use clap::Arg;
use clap::ArgMatches;
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

/// Declares a section: a struct of optional fields (deserialized from its
/// TOML table, unknown keys refused) and its [`Overlay`].
///
/// A section with a TOML path (`Name = "path" { … }`) is part of the knob
/// table: a field may add `= flag(FLAG, VALUE_NAME, HELP)` for a flag of every
/// scenario command, or `= sweep_flag(…)` for a list of the grid, which
/// `sweep` takes as spelled and `run` and `trial` in the spelling of
/// `.one(FLAG, VALUE_NAME, HELP)` (or per command, `.run(…)`, `.trial(…)`;
/// a command left out takes the list). `.unused_by(run, trial)` on a row, or
/// `, unused_by(trial)` after a section's path, names the commands that read
/// no value from it. The field's type says how the flag is parsed
/// ([`FlagValue`]); `parse = FN` reads it as text through `FN` instead. From
/// those rows come `Name::FLAGS` (clap arguments, and the TOML path → flag
/// map of error messages, see [`super::flags`]) and `Name::from_flags` (the
/// command line as an overlay).
macro_rules! section {
    (@scope flag) => { Scope::Scenario };
    (@scope sweep_flag) => { Scope::Sweep };
    (@heading) => { None };
    (@heading $heading:literal) => { Some($heading) };
    (@command run) => { Command::Run };
    (@command trial) => { Command::Trial };
    (@unused $section:expr) => { $section };
    (@unused $section:expr, $($command:ident),+) => { &[$(section!(@command $command)),+] };
    (@configure $ty:ty) => { <$ty as FlagValue>::configure };
    (@configure $ty:ty, $parse:path) => { flags::text_arg };
    (@read $m:ident, $path:expr, $ty:ty) => { Ok::<_, ConfigError>(<$ty as FlagValue>::read($m, $path)) };
    (@read $m:ident, $path:expr, $ty:ty, $parse:path) => { read_parsed($m, $path, $parse) };

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

    (
        $(#[$meta:meta])* $name:ident = $section:literal $(, heading $heading:literal)?
            $(, unused_by($($section_unused:ident),+))? {
            $($(#[$fmeta:meta])* $field:ident : $ty:ty
                $(= $scope:ident($long:literal, $value_name:literal, $help:literal $(, parse = $parse:path)?)
                    $(.one($one_long:literal, $one_value:literal, $one_help:literal))?
                    $(.run($run_long:literal, $run_value:literal, $run_help:literal))?
                    $(.trial($trial_long:literal, $trial_value:literal, $trial_help:literal))?
                    $(.unused_by($($unused:ident),+))?
                )?),* $(,)?
        }
    ) => {
        section!($(#[$meta])* $name { $($(#[$fmeta])* $field: $ty),* });
        impl $name {
            #[allow(dead_code)] // in sections without flags
            const HEADING: Option<&'static str> = section!(@heading $($heading)?);
            #[allow(dead_code)] // in sections without flags
            const UNUSED_BY: &'static [Command] = &[$($(section!(@command $section_unused)),+)?];
            /// This section's rows of the knob table that have a flag.
            pub const FLAGS: &'static [Flag] = &[$($(Flag {
                path: concat!($section, ".", stringify!($field)),
                long: $long,
                value_name: $value_name,
                help: $help,
                heading: Self::HEADING,
                scope: section!(@scope $scope),
                cell: &[
                    $((Command::Run, Spelling { long: $one_long, value_name: $one_value, help: $one_help }),
                      (Command::Trial, Spelling { long: $one_long, value_name: $one_value, help: $one_help }),)?
                    $((Command::Run, Spelling { long: $run_long, value_name: $run_value, help: $run_help }),)?
                    $((Command::Trial, Spelling { long: $trial_long, value_name: $trial_value, help: $trial_help }),)?
                ],
                unused_by: section!(@unused Self::UNUSED_BY $($(, $unused)+)?),
                configure: section!(@configure $ty $(, $parse)?),
            },)?)*];
            /// The flags of `scope` that the command line gave, as an overlay.
            pub fn from_flags(m: &ArgMatches, scope: Scope) -> Result<Self, ConfigError> {
                let _ = (m, scope);
                #[allow(unused_mut)]
                let mut out = Self::default();
                $($(if section!(@scope $scope) == scope {
                    out.$field = section!(@read m, concat!($section, ".", stringify!($field)), $ty $(, $parse)?)?;
                })?)*
                Ok(out)
            }
        }
    };
}

/// `--needle-strength` is read as text, so that a word is reported against
/// the field like a bad value.
fn needle_strength(text: &str) -> Result<f64, &'static str> {
    text.trim().parse().map_err(|_| "a finite number ≥ 0")
}

/// A size in tokens: 4096, 4K or 4M.
fn size(text: &str) -> Result<u64, &'static str> {
    crate::base::units::parse_size(text).ok_or("a whole number of tokens, e.g. 65536, 64K or 4M")
}

// The knob table (see the module documentation). Sections are checked by
// `check_SECTION` in config/mod.rs; `[[precision]]` by config/precision.rs.

section! {
    /// `[indexer]`: the lightning indexer's shape and head weights.
    IndexerParams = "indexer" {
        heads: usize,
        head_dim: usize,
        /// The model's configured top-k (index_topk).
        index_topk: u64,
        weight_mean: f64,
        weight_std: f64,
    }
}

section! {
    /// `[geometry]`: compression into rows and the raw window.
    GeometryParams = "geometry" {
        compress_ratio: u64 = flag("--compress-ratio", "C", "Tokens per compressed row"),
        overlap: bool,
        window: u64 = flag("--window", "W", "Raw window of most recent tokens always attended"),
        /// Tokens per prefill chunk; absent or 0: the prompt in one chunk.
        prefill_chunk: u64 = flag("--prefill-chunk", "N", "Prefill chunk in tokens, where chunk faults (chunk-local) put its boundaries (0 = one chunk)"),
    }
}

section! {
    /// `[keys]`: the synthetic haystack keys.
    KeyParams = "keys" {
        common: f64,
        outlier_channels: usize,
        outlier_scale: f64,
    }
}

section! {
    /// `[haystack]`: structure beyond exchangeable Gaussian rows (docs/MODEL.md,
    /// "Structured haystack"); fields left out are off.
    HaystackParams = "haystack" {
        content_rank: usize = flag("--content-rank", "R", "Dimension of the content subspace keys and queries share (0 = none)"),
        key_content_share: f64 = flag("--key-content-share", "F", "Share of a key's random variance in the content subspace (0 … 0.95)"),
        query_content_share: f64 = flag("--query-content-share", "F", "Share of a query's variance in the content subspace (0 … 0.95)"),
        relevance_scale: f64 = flag("--relevance-scale", "X", "Median per-row relevance along the score's gradient, in units of the key noise norm"),
        relevance_sigma: f64 = flag("--relevance-sigma", "S", "Log-normal spread of per-row relevance"),
        block_rows: u64,
        block_sigma: f64,
        sink_rows: u64,
        sink_relevance: f64,
        recency_rows: f64,
        recency_relevance: f64,
    }
}

section! {
    /// `[needle]`
    NeedleParams = "needle" {
        /// A named setting of the needle's knobs (config/profile.rs).
        profile: String = flag(
            "--needle-profile",
            "NAME",
            "How hard the needle is: niah (the default, a real NIAH needle's rank), hard (a pessimistic one) or stress (the fixed strength-1 needle)"
        ),
        /// quantile | strength (docs/MODEL.md, "The needle's unit").
        unit: String = flag(
            "--needle-unit",
            "UNIT",
            "How the needle's signal is set: quantile (placed at a drawn haystack exceedance) or strength (--needle-strength SDs)"
        ),
        /// Quantile unit: the median share of haystack rows that outscore the needle.
        exceedance: f64 = flag(
            "--needle-exceedance",
            "U",
            "Median share of haystack rows whose exact score beats the needle's (quantile unit; 0 < U < 1)"
        ),
        /// Standard deviations of log10 exceedance over prompts, layers and query tokens (decades).
        prompt_spread: f64 = flag("--needle-prompt-spread", "DECADES", "Spread of the needle's log10 exceedance over prompts (quantile unit)"),
        layer_spread: f64 = flag(
            "--needle-layer-spread",
            "DECADES",
            "Spread of the needle's log10 exceedance over indexer layers (quantile unit)"
        ),
        token_spread: f64 = flag(
            "--needle-token-spread",
            "DECADES",
            "Spread of the needle's log10 exceedance over query tokens (quantile unit)"
        ),
        strength: f64 = flag(
            "--needle-strength",
            "X",
            "Needle strength (strength unit): shift of each looking head's dot product, in haystack standard deviations",
            parse = needle_strength
        ),
        tokens: u64 = flag("--needle-tokens", "N", "Needle length in tokens"),
        heads: usize = flag("--needle-heads", "N", "Indexer heads that look for the needle"),
        /// content | isotropic (docs/MODEL.md, "Needle geometry").
        geometry: String = flag(
            "--needle-geometry",
            "G",
            "Where the needle's match lives: content (rope-free dims and slow rotary pairs) or isotropic (all dims, the pessimistic bound)"
        ),
        /// Share of the match in the slow rotary pairs (content geometry).
        rope_share: f64 = flag(
            "--needle-rope-share",
            "S",
            "Share of the needle's match in rotary pairs whose wavelength reaches --needle-rope-min-wavelength (0 … 1)"
        ),
        /// Shortest wavelength, in tokens, of a rotary pair that may carry the match.
        rope_min_wavelength: u64 = flag(
            "--needle-rope-min-wavelength",
            "TOKENS",
            "Shortest wavelength of a rotary pair that carries the needle's match (e.g. 4M)",
            parse = size
        ),
        /// Share of each looking head's query variance in a direction they share.
        head_coherence: f64 = flag(
            "--head-coherence",
            "C",
            "Share of each looking head's query variance in a retrieval direction the looking heads share (0 … 0.95)"
        ),
    }
}

section! {
    /// `[selection]`
    SelectionParams = "selection" {
        tie_rule: String = flag("--tie-rule", "RULE", "Order among equal scores: lowest-index, highest-index or random"),
        window_rows_compete: bool,
    }
}

section! {
    /// `[physics]`: position, pooling, correlated tokens, distractors (docs/MODEL.md, "Physics").
    PhysicsParams = "physics", heading "Physics" {
        /// off | v3.2 | v4
        rope: String = flag(
            "--rope",
            "LAYOUT",
            "RoPE on the indexer's keys and query: off, v3.2 (first 64 dims, halves) or v4 (last 64, interleaved)"
        ),
        /// off | on | full
        pooling: String = flag(
            "--pooling",
            "MODE",
            "Rows pooled from tokens with softmax gates and RMSNorm: off, on, or full (token by token everywhere)"
        ),
        gate_bias_std: f64 = flag("--gate-bias-std", "X", "Spread of the learned per-slot gate bias"),
        gate_noise_std: f64 = flag(
            "--gate-noise-std",
            "X",
            "Spread of the token-dependent part of the gates (> 0 generates every token)"
        ),
        needle_gate_boost: f64 = flag("--needle-gate-boost", "X", "Gate logit added to needle and distractor tokens"),
        /// In tokens; 0 = independent tokens.
        correlation_length: f64 = flag(
            "--correlation-length",
            "TOKENS",
            "Correlation length of neighbouring tokens, in tokens (0 = independent)"
        ),
        distractors: u64 = flag("--distractors", "N", "Near-copies of the needle at random positions"),
        distractor_similarity: f64 = flag(
            "--distractor-similarity",
            "S",
            "Cosine similarity of each distractor's key offset to the needle's (0 … 1)"
        ),
        /// off | layernorm | rmsnorm: the norm of rows that are not pooled.
        key_norm: String = flag(
            "--key-norm",
            "NORM",
            "Norm of key rows that are not pooled: off, layernorm (V3.2's k_norm) or rmsnorm; pooled rows always get RMSNorm"
        ),
        /// Spread of ln γ, the norm's learned per-channel weight (0: γ = 1).
        norm_weight_spread: f64 = flag(
            "--norm-weight-spread",
            "S",
            "Spread of the key norm's learned per-channel weight: ln γ ~ N(0, S²) per trial (0 = unit weight)"
        ),
        /// ‖β‖ / ‖γ‖ of the LayerNorm bias (0: no bias).
        norm_bias: f64 = flag(
            "--norm-bias",
            "B",
            "LayerNorm bias: a shared key offset of length B·‖γ‖ in a random direction per trial (0 = none)"
        ),
    }
}

section! {
    /// `[stack]`: the model's layers and what counts as the model retrieving
    /// the needle (docs/MODEL.md, "Whole-model recall").
    StackParams = "stack", heading "Whole model", unused_by(trial) {
        /// Per layer: 0 = raw window only, the indexed ratio = an indexer layer, other = every row attended (HCA); "none" = no stack.
        compress_ratios: ListSpec = flag(
            "--compress-ratios",
            "LIST",
            "The model's layers by compress ratio: 0 raw window only, --indexer-ratio an indexer layer, other every row (HCA); R*N and (A,B)*N repeat; none = per-layer recall only"
        ),
        /// The layer plan in words (w, lin, iR, hR, s, sN); replaces compress_ratios and indexer_ratio.
        layers: String = flag(
            "--layers",
            "PLAN",
            "The model's layers in words: w raw window, lin linear attention, iR an indexer at ratio R, hR every row (HCA), sN reuse layer N's selection, s the last indexer's; X*N and (A,B)*N repeat (replaces --compress-ratios)"
        ),
        indexer_ratio: u64 = flag(
            "--indexer-ratio",
            "C",
            "Compress ratio of the stack's indexer layers, each of which the simulated layer stands for"
        ),
        layer_correlation: f64 = flag(
            "--layer-correlation",
            "R",
            "Latent correlation of a row's selection in adjacent indexer layers (0 … 0.9999)"
        ),
        token_correlation: f64 = flag(
            "--token-correlation",
            "R",
            "Latent correlation of a row's selection for adjacent query tokens, past the early layers (0 … 0.9999)"
        ),
        /// Model layers 0 … N−1 whose indexers take early_token_correlation (left out: 0, one profile).
        early_layers: u64 = flag(
            "--early-layers",
            "N",
            "Per-layer profile: indexer layers among model layers 0 … N−1 take --early-token-correlation (0 = none)"
        ),
        early_token_correlation: f64 = flag(
            "--early-token-correlation",
            "R",
            "Latent correlation of a row's selection for adjacent query tokens in the early layers (0 … 0.9999)"
        ),
        /// A fault's own part of the latent, every layer (left out: 0.998).
        fault_token_correlation: f64 = flag(
            "--fault-token-correlation",
            "R",
            "Latent correlation of a fault's own part of a layer's selection for adjacent query tokens, every layer (0 … 0.9999; default 0.998)"
        ),
        question_tokens: u64 = flag("--question-tokens", "N", "Question tokens whose selections may read the needle (prefill)"),
        answer_tokens: u64 = flag("--answer-tokens", "N", "First answer tokens whose selections may read the needle (decode)"),
        quorum: u64 = flag("--quorum", "N", "Selecting layers (indexer layers and those reusing their selections) that must select the needle for the model to retrieve it"),
        /// Probability that a faulty layer losing the needle corrupts the answer (left out: 0).
        lost_layer_harm: f64 = flag(
            "--lost-layer-harm",
            "P",
            "Whole-model rule: a layer whose fault loses the needle where a correct selection keeps it corrupts the answer with probability P (0: any one layer suffices)"
        ),
        /// The band of lost_layer_harm, "LOW..HIGH" (left out: the central value alone).
        lost_layer_harm_band: String = flag(
            "--lost-layer-harm-band",
            "LOW..HIGH",
            "The assumption band of --lost-layer-harm, reported beside the layer-overlap band"
        ),
        /// blind | retrieves
        hca: String = flag(
            "--hca",
            "READING",
            "What seeing the needle's pooled row in an HCA layer does: blind (nothing, the default assumption) or retrieves"
        ),
        /// catalogue | shared | independent
        fault_layers: String = flag(
            "--fault-layers",
            "SPREAD",
            "How hypotheses act across layers: catalogue (each entry's), shared (identical in every layer) or independent"
        ),
        /// V4.1's two-level indexer: the model layer whose candidate blocks the later indexer layers select inside (left out: none).
        candidate_source_layer: u64 = flag(
            "--candidate-source-layer",
            "LAYER",
            "Two-level indexer (DeepSeek-V4.1: 20): this indexer layer keeps the best --candidate-blocks blocks and every later indexer layer selects inside them"
        ),
        candidate_blocks: u64 = flag(
            "--candidate-blocks",
            "B",
            "Blocks the candidate source keeps per query, the newest included (V4.1: 2048)"
        ),
        candidate_block_rows: u64 = flag("--candidate-block-rows", "R", "Compressed rows per candidate block (V4.1: 8)"),
    }
}

section! {
    /// `[sweep]`: the cell grid and the Monte Carlo.
    SweepParams = "sweep" {
        contexts: ListSpec = sweep_flag(
            "--contexts",
            "LIST",
            "Context lengths: 1K,4K,… or a doubling range 1K..128K (K = 1024, M = 1048576)"
        )
        .one("--context", "TOKENS", "Context length in tokens (K/M suffixes allowed)"),
        /// Added to every context: each context L becomes ⌊L/c⌋·c + m for each m (prompt length mod the ratio).
        length_mods: ListSpec = flag(
            "--length-mods",
            "LIST",
            "Prompt length mod the ratio: each context L becomes ⌊L/c⌋·c + m for each m (0,1,2,3 or all)"
        ),
        depths: ListSpec = sweep_flag(
            "--depths",
            "LIST",
            "Needle depths in percent (0 = start, 100 = end): 0,50,100, 0..100:10, linear:11 or sigmoid:11 (packed near 0 and 100)"
        )
        .one("--depth", "PERCENT", "Needle depth in percent"),
        /// Needle offsets inside a row stride, 0 … c−1, or "natural".
        needle_offsets: ListSpec = flag(
            "--needle-offsets",
            "LIST",
            "Needle offsets inside a row stride: 0,1,2,3, all, or natural (where the depth puts it)"
        ),
        topk: ListSpec =
            sweep_flag("--topk", "LIST", "Top-k values (default: the preset's index_topk and twice it)").one("--topk", "K", "Top-k"),
        precisions: ListSpec = sweep_flag(
            "--precisions",
            "LIST",
            "Precision variants, e.g. fp32,bf16,fp8; all = every built-in and custom variant that fits head_dim"
        )
        .run("--precision", "NAME", "Precision variant")
        .trial("--precisions", "LIST", "Precision variants to dump"),
        trials: u64 = flag("--trials", "TRIALS", "Trials per cell").unused_by(trial),
        seed: u64 = flag("--seed", "SEED", "Master seed"),
        threshold: f64 = flag("--threshold", "R", "Recall threshold for the effective context").unused_by(run, trial),
        /// Pairs A:B of precisions whose top-k sets are compared (none by default).
        agreement: String = flag(
            "--agreement",
            "A:B,…",
            "Top-k agreement of pairs of precisions, e.g. bf16:fp8: share of A's top-k that B also selects, and how much of the rest is ties at the cut (docs/MODEL.md, Top-k agreement)"
        )
        .unused_by(run, trial),
    }
}

section! {
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
}

section! {
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
}

section! {
    /// `[estimator]`: how recall is estimated (see `crate::estimate::settings`).
    EstimatorParams = "estimator", unused_by(trial) {
        /// full | tail (default full).
        mode: String = flag(
            "--mode",
            "MODE",
            "Recall estimator: full (simulate every row) or tail (a sample of rows per trial, importance-sampled toward high scores; docs/MODEL.md, Tail sampling)"
        ),
        /// Rows drawn per trial in tail mode (default 4096).
        tail_rows: u64 = flag("--tail-rows", "M", "Rows drawn per trial in --mode tail (default 4096)"),
        /// Report the analytic prediction (default false).
        predict: bool = flag(
            "--predict",
            "on|off",
            "Report the analytic prediction beside each recall (docs/MODEL.md): on or off (default)"
        ),
        /// Audit each cell's top-k cut for ties (default false).
        tie_audit: bool = flag(
            "--tie-audit",
            "on|off",
            "Write ties.csv: rows tied at each cell's k-th score and recall under every tie rule (docs/MODEL.md, Tie audit): on or off (default)"
        ),
        /// Search each trial's critical needle rank for the needle margin (default true).
        margin: bool = flag(
            "--margin",
            "on|off",
            "Needle margin under the quantile needle: how much rarer the needle may be and still be kept (docs/MODEL.md, The needle margin): on (default) or off"
        ),
    }
}

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
    pub haystack: HaystackParams,
    #[serde(default)]
    pub needle: NeedleParams,
    #[serde(default)]
    pub selection: SelectionParams,
    #[serde(default)]
    pub physics: PhysicsParams,
    #[serde(default)]
    pub stack: StackParams,
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
        self.haystack.overlay(top.haystack);
        self.needle.overlay(top.needle);
        self.selection.overlay(top.selection);
        self.physics.overlay(top.physics);
        // A plan in words and the ratio shorthand say the same thing: the
        // one a higher layer gives replaces the other.
        if top.stack.layers.is_some() {
            self.stack.compress_ratios = None;
        } else if top.stack.compress_ratios.is_some() {
            self.stack.layers = None;
        }
        self.stack.overlay(top.stack);
        self.sweep.overlay(top.sweep);
        self.estimator.overlay(top.estimator);
        self.precision.extend(top.precision);
    }
}

impl ScenarioParams {
    /// Every row of the knob table that has a flag, section by section: the
    /// order of `--help`.
    pub fn flags() -> impl Iterator<Item = &'static Flag> {
        [
            IndexerParams::FLAGS,
            GeometryParams::FLAGS,
            KeyParams::FLAGS,
            HaystackParams::FLAGS,
            NeedleParams::FLAGS,
            SelectionParams::FLAGS,
            PhysicsParams::FLAGS,
            StackParams::FLAGS,
            SweepParams::FLAGS,
            EstimatorParams::FLAGS,
        ]
        .into_iter()
        .flatten()
    }

    /// The flags of `scope` that the command line gave, as an overlay.
    pub fn from_flags(m: &ArgMatches, scope: Scope) -> Result<Self, ConfigError> {
        Ok(Self {
            indexer: IndexerParams::from_flags(m, scope)?,
            geometry: GeometryParams::from_flags(m, scope)?,
            keys: KeyParams::from_flags(m, scope)?,
            haystack: HaystackParams::from_flags(m, scope)?,
            needle: NeedleParams::from_flags(m, scope)?,
            selection: SelectionParams::from_flags(m, scope)?,
            physics: PhysicsParams::from_flags(m, scope)?,
            stack: StackParams::from_flags(m, scope)?,
            sweep: SweepParams::from_flags(m, scope)?,
            estimator: EstimatorParams::from_flags(m, scope)?,
            ..Self::default()
        })
    }
}

/// Parses a scenario file's text. Errors are one line: `line L, column C: message`.
pub fn parse_scenario_toml(text: &str) -> Result<ScenarioParams, String> {
    toml::from_str(text).map_err(|e| toml_error_at(text, &e))
}

/// A TOML error of `text` as one line: `line L, column C: message` (the
/// message names the key when the error is about one).
pub fn toml_error_at(text: &str, e: &toml::de::Error) -> String {
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
}

impl FlagValue for ListSpec {
    fn configure(arg: Arg) -> Arg {
        text_arg(arg)
    }
    fn read(m: &ArgMatches, id: &str) -> Option<Self> {
        String::read(m, id).map(ListSpec::Text)
    }
}

/// A text flag turned into its field by `parse`, whose error is what is
/// allowed: `invalid FIELD (--flag) = "TEXT": ALLOWED`.
pub fn read_parsed<T>(m: &ArgMatches, id: &str, parse: fn(&str) -> Result<T, &'static str>) -> Result<Option<T>, ConfigError> {
    match m.get_one::<String>(id) {
        None => Ok(None),
        Some(text) => parse(text).map(Some).map_err(|allowed| ConfigError::new(field_name(id), format!("{text:?}"), allowed)),
    }
}

/// The clap arguments of the knobs in `scope`, in table order.
pub fn args(scope: Scope) -> impl Iterator<Item = Arg> {
    ScenarioParams::flags().filter(move |f| f.scope == scope).map(Flag::arg)
}

/// The clap arguments of the knobs in `scope` as `command` spells them
/// (hidden where it reads no value from them), in table order.
pub fn args_for(scope: Scope, command: Command) -> impl Iterator<Item = Arg> {
    ScenarioParams::flags().filter(move |f| f.scope == scope).map(move |f| f.arg_for(command))
}

/// Refuses a knob `command` reads no value from ([`Flag::unused_by`]): a
/// value that changes nothing would mislead.
pub fn refuse_unused(given: &ScenarioParams, command: Command) -> Result<(), ConfigError> {
    let given = serde_json::to_value(given).unwrap_or_default();
    for f in ScenarioParams::flags().filter(|f| !f.used_by(command)) {
        let Some((section, field)) = f.path.split_once('.') else { continue };
        if let Some(v) = given.get(section).and_then(|s| s.get(field)) {
            let value = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            return Err(ConfigError::new(
                field_name(f.path),
                value,
                format!("no value: `{}` does not use {} ({})", command.name(), f.long, command.why_unused()),
            ));
        }
    }
    Ok(())
}

/// A check's error in `command`'s spelling: `run` and `trial` name
/// `sweep.contexts (--context)` where the check, which knows no command,
/// names `--contexts`.
pub fn in_spelling(mut e: ConfigError, command: Command) -> ConfigError {
    if let Some(f) = ScenarioParams::flags().find(|f| e.field == field_name(f.path)) {
        e.field = f.field_name(command);
    }
    e
}

/// The flag that sets a scenario field (`sweep.topk` → `--topk`).
pub fn flag(path: &str) -> Option<&'static str> {
    ScenarioParams::flags().find(|f| f.path == path).map(|f| f.long)
}

/// How `command` spells the flag that sets a scenario field.
pub fn spelling(path: &str, command: Command) -> Option<Spelling> {
    ScenarioParams::flags().find(|f| f.path == path).map(|f| f.spelling(command))
}

/// "sweep.topk (--topk)": the name errors use for a field.
pub fn field_name(path: &str) -> String {
    match flag(path) {
        Some(f) => format!("{path} ({f})"),
        None => path.to_string(),
    }
}

/// Knob flags given as (name, value) pairs instead of a command line (the
/// Python binding's keyword arguments): `name` is a flag of `sweep` without
/// its dashes (`gate-noise-std`, `contexts`), `value` its text as typed.
/// Read exactly as `sweep` reads its command line, so values get the same
/// parsing and, later in [`super::check`], the same errors.
pub fn overlay_from_flags(pairs: &[(String, String)]) -> Result<ScenarioParams, ConfigError> {
    let mut argv = Vec::with_capacity(pairs.len());
    for (name, value) in pairs {
        let long = format!("--{name}");
        let Some(f) = ScenarioParams::flags().find(|f| f.long == long) else {
            let mut names: Vec<&str> = ScenarioParams::flags().map(|f| f.long.trim_start_matches('-')).collect();
            names.sort_unstable();
            return Err(ConfigError::new("knob", format!("{name:?}"), format!("one of {}", names.join(", "))));
        };
        argv.push(format!("{}={value}", f.long));
    }
    let cmd = clap::Command::new("dsa-recall").no_binary_name(true).args(args(Scope::Scenario)).args(args(Scope::Sweep));
    let m = cmd.try_get_matches_from(&argv).map_err(|e| {
        // Which pair clap refused: the one its message quotes.
        let text = e.to_string();
        let bad = pairs.iter().find(|(n, _)| text.contains(&format!("--{n} "))).or(pairs.first());
        let detail = text.lines().next().unwrap_or("").trim_start_matches("error: ");
        let detail = detail.rsplit_once(": ").map_or(detail, |(_, why)| why).to_string();
        match bad {
            Some((n, v)) => ConfigError::new(
                ScenarioParams::flags().find(|f| f.long == format!("--{n}")).map_or(n.clone(), |f| field_name(f.path)),
                format!("{v:?}"),
                detail,
            ),
            None => ConfigError::new("knob", "(none)", detail),
        }
    })?;
    let mut p = ScenarioParams::from_flags(&m, Scope::Scenario)?;
    p.overlay(ScenarioParams::from_flags(&m, Scope::Sweep)?);
    Ok(p)
}

#[cfg(test)]
mod tests;

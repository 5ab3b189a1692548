//! Command-line arguments, first layer: raw strings and numbers as typed.
//! They become a `ScenarioParams` overlay here; validation happens once, in
//! `dsa_recall::config::check`.

use clap::{Args, Parser, Subcommand};
use dsa_recall::config::{self, ListSpec, ScenarioParams};
use dsa_recall::ConfigError;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "dsa-recall", version, about = "Simulates DeepSeek sparse attention's top-k selection and needle recall on a CPU")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Sweep a grid of contexts × depths × k × precisions; write results and charts.
    Sweep(SweepArgs),
    /// Simulate a single cell, optionally printing every trial.
    Run(RunArgs),
    /// List the embedded presets, or print one as TOML.
    Presets(PresetsArgs),
    /// Combine the output directories of `sweep --shard I/N` runs into one.
    Merge(MergeArgs),
    /// Simulate one trial of one cell and write all its tensors (--dump FILE.safetensors).
    Trial(TrialArgs),
    /// Replay recorded indexer tensors through each precision variant against fp32.
    Replay(ReplayArgs),
    /// Quantize numbers and print each dequantized value, one per line.
    Quantize(QuantizeArgs),
    /// Re-render every chart and report.html of a sweep directory from its results.jsonl, without simulating.
    Plot(PlotArgs),
    /// List the failure hypotheses usable as VARIANT+NAME in --precisions, or show one in full.
    Hypotheses(HypothesesArgs),
}

#[derive(Args, Debug)]
pub struct HypothesesArgs {
    #[command(subcommand)]
    pub action: Option<HypothesesAction>,
    /// Print every hypothesis in full.
    #[arg(long)]
    pub long: bool,
}

#[derive(Subcommand, Debug)]
pub enum HypothesesAction {
    /// Print one hypothesis in full (topk=N may be written topk).
    Show { name: String },
}

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// A sweep's output directory (holding results.jsonl and manifest.json).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Chart format.
    #[arg(long, value_parser = ["png", "svg", "both"], default_value = "png")]
    pub format: String,
    /// Context of the needle rank/margin chart (default: the longest in the sweep).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "TOKENS")]
    pub detail_context: Option<String>,
}

/// Parses `--detail-context` (K/M suffixes allowed).
pub fn detail_context(text: &Option<String>) -> Result<Option<u64>, ConfigError> {
    match text {
        None => Ok(None),
        Some(t) => dsa_recall::base::units::parse_size(t)
            .filter(|&v| v > 0)
            .map(Some)
            .ok_or_else(|| ConfigError::new("--detail-context", format!("{t:?}"), "a context length of the sweep, e.g. 32K")),
    }
}

#[derive(Args, Debug)]
pub struct TrialArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Context length in tokens (K/M suffixes allowed).
    #[arg(long, allow_hyphen_values = true, value_name = "TOKENS")]
    pub context: Option<String>,
    /// Needle depth in percent.
    #[arg(long, allow_hyphen_values = true, value_name = "PERCENT")]
    pub depth: Option<String>,
    /// Top-k.
    #[arg(long, allow_hyphen_values = true, value_name = "K")]
    pub topk: Option<String>,
    /// Precision variants to dump (default: the preset's).
    #[arg(long, allow_hyphen_values = true, value_name = "LIST")]
    pub precisions: Option<String>,
    /// Which trial of the cell (its seed is the sweep's trial seed).
    #[arg(long, default_value_t = 0)]
    pub trial: u64,
    /// Write the trial's tensors to this safetensors file.
    #[arg(long, value_name = "FILE")]
    pub dump: PathBuf,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A safetensors file (a `trial --dump` or recorded tensors).
    #[arg(value_name = "FILE", required_unless_present = "q_npy")]
    pub file: Option<PathBuf>,
    /// Queries as .npy ([heads, dim] or [tokens, heads, dim]), instead of FILE.
    #[arg(long, value_name = "FILE", requires_all = ["k_npy", "weights_npy"], conflicts_with = "file")]
    pub q_npy: Option<PathBuf>,
    /// Keys as .npy ([rows, dim]).
    #[arg(long, value_name = "FILE")]
    pub k_npy: Option<PathBuf>,
    /// Head weights as .npy ([heads] or [tokens, heads]).
    #[arg(long, value_name = "FILE")]
    pub weights_npy: Option<PathBuf>,
    #[arg(long, default_value = "queries", value_name = "NAME")]
    pub q_name: String,
    #[arg(long, default_value = "keys", value_name = "NAME")]
    pub k_name: String,
    #[arg(long, default_value = "weights", value_name = "NAME")]
    pub weights_name: String,
    /// Tensor of needle row indices (I64), if the file has one.
    #[arg(long, default_value = "needle_rows", value_name = "NAME")]
    pub needle_rows_name: String,
    /// Needle rows given directly (overrides the tensor).
    #[arg(long, value_name = "LIST")]
    pub needle_rows: Option<String>,
    /// Top-k values.
    #[arg(long, allow_hyphen_values = true, value_name = "LIST", default_value = "512")]
    pub topk: String,
    /// Precision variants to compare with fp32.
    #[arg(long, allow_hyphen_values = true, value_name = "LIST", default_value = "bf16,fp8,fp8-fp32scale,fp4,mxfp4,nvfp4")]
    pub precisions: String,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also draw the overlap with fp32 per k and variant (.png or .svg).
    #[arg(long, value_name = "FILE")]
    pub chart: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// Shard output directories (all N of them, any order).
    #[arg(required = true, value_name = "DIR")]
    pub shards: Vec<PathBuf>,
    /// Output directory for the merged sweep.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Overwrite a non-empty output directory.
    #[arg(long)]
    pub force: bool,
}

/// `dsa-recall quantize --format F [--block B] [--scale S] [--saturate] [VALUES…]`
#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// Element format: bf16, fp16, e4m3fn, e5m2, e2m1.
    #[arg(long, value_name = "F")]
    pub format: String,
    /// Values per scale: each run of B consecutive inputs is scaled together (needs --scale; without it one scale covers all inputs).
    #[arg(long, value_name = "B")]
    pub block: Option<usize>,
    /// Scale rule: none (default: a plain cast), fp32 (amax/max), ue8m0 (DeepSeek: power of two rounded up), ue8m0-floor (OCP MX), e4m3 (NVFP4).
    #[arg(long, value_name = "S")]
    pub scale: Option<String>,
    /// Plain casts: clamp overflow to ±max instead of giving NaN (e4m3fn) or ±inf. Scaled values are always clamped.
    #[arg(long)]
    pub saturate: bool,
    /// Floor on a block's amax (default: that of the matching reference rule, see docs/NUMERICS.md).
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub amax_floor: Option<f32>,
    /// Print each code's bit pattern in hex after its value: `value 0xHH`.
    #[arg(long)]
    pub codes: bool,
    /// Numbers to quantize; without any, one per line is read from stdin (blank lines skipped).
    /// Negative numbers are fine; put `--` before the values if one is -inf or -nan.
    /// Printed values parse back to the exact f32 (infinities print as inf/-inf, NaN as NaN).
    #[arg(value_name = "VALUES", allow_negative_numbers = true)]
    pub values: Vec<String>,
}

/// Knobs shared by `sweep` and `run`.
#[derive(Args, Debug, Default)]
pub struct ScenarioArgs {
    /// Preset to start from (see `dsa-recall presets`).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true)]
    pub preset: Option<String>,
    /// TOML scenario file; its values override the preset's.
    #[arg(long, allow_negative_numbers = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Trials per cell.
    #[arg(long, allow_negative_numbers = true)]
    pub trials: Option<u64>,
    /// Master seed.
    #[arg(long, allow_negative_numbers = true)]
    pub seed: Option<u64>,
    /// Needle strength: shift of each looking head's dot product, in haystack standard deviations.
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "X")]
    pub needle_strength: Option<String>,
    /// Needle length in tokens.
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub needle_tokens: Option<u64>,
    /// Indexer heads that look for the needle.
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub needle_heads: Option<usize>,
    /// Tokens per compressed row.
    #[arg(long, allow_negative_numbers = true, value_name = "C")]
    pub compress_ratio: Option<u64>,
    /// Raw window of most recent tokens always attended.
    #[arg(long, allow_negative_numbers = true, value_name = "W")]
    pub window: Option<u64>,
    /// Order among equal scores: lowest-index, highest-index or random.
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "RULE")]
    pub tie_rule: Option<String>,
    /// Recall threshold for the effective context.
    #[arg(long, allow_negative_numbers = true, value_name = "R")]
    pub threshold: Option<f64>,
    /// Define a custom precision variant (repeatable), usable by name in --precisions:
    /// 'name=N;q=SIDE;k=SIDE;logits=f32|bf16|f16;weights=f32|bf16', where SIDE is
    /// ELEMENT[/BLOCK][/SCALE][/hadamard][/floor=X] (ELEMENT f32|bf16|fp16|e4m3fn|e5m2|e2m1;
    /// BLOCK a size dividing head_dim, row or tensor; SCALE fp32|ue8m0|ue8m0-floor|e4m3);
    /// a side left out is exact f32. Example: 'name=kfp8;q=bf16;k=e4m3fn/128/ue8m0/hadamard'.
    #[arg(long = "precision-def", value_name = "SPEC")]
    pub precision_def: Vec<String>,
    /// Recall estimator: full (simulate every row) or tail (a sample of rows per trial, importance-sampled toward high scores; docs/PERFORMANCE.md).
    #[arg(long, allow_hyphen_values = true, value_name = "MODE")]
    pub mode: Option<String>,
    /// Rows drawn per trial in --mode tail (default 4096).
    #[arg(long, allow_negative_numbers = true, value_name = "M")]
    pub tail_rows: Option<u64>,
    /// Report the analytic prediction beside each recall (docs/MODEL.md): on or off (default).
    #[arg(long, value_parser = ["on", "off"], value_name = "on|off")]
    pub predict: Option<String>,
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub threads: Option<usize>,
    /// RoPE on the indexer's keys and query: off, v3.2 (first 64 dims, halves) or v4 (last 64, interleaved).
    #[arg(long, allow_hyphen_values = true, value_name = "LAYOUT", help_heading = "Physics")]
    pub rope: Option<String>,
    /// Rows pooled from tokens with softmax gates and RMSNorm: off, on, or full (token by token everywhere).
    #[arg(long, allow_hyphen_values = true, value_name = "MODE", help_heading = "Physics")]
    pub pooling: Option<String>,
    /// Spread of the learned per-slot gate bias.
    #[arg(long, allow_negative_numbers = true, value_name = "X", help_heading = "Physics")]
    pub gate_bias_std: Option<f64>,
    /// Spread of the token-dependent part of the gates (> 0 generates every token).
    #[arg(long, allow_negative_numbers = true, value_name = "X", help_heading = "Physics")]
    pub gate_noise_std: Option<f64>,
    /// Gate logit added to needle and distractor tokens.
    #[arg(long, allow_negative_numbers = true, value_name = "X", help_heading = "Physics")]
    pub needle_gate_boost: Option<f64>,
    /// Correlation length of neighbouring tokens, in tokens (0 = independent).
    #[arg(long, allow_negative_numbers = true, value_name = "TOKENS", help_heading = "Physics")]
    pub correlation_length: Option<f64>,
    /// Near-copies of the needle at random positions.
    #[arg(long, allow_negative_numbers = true, value_name = "N", help_heading = "Physics")]
    pub distractors: Option<u64>,
    /// Cosine similarity of each distractor's key offset to the needle's (0 … 1).
    #[arg(long, allow_negative_numbers = true, value_name = "S", help_heading = "Physics")]
    pub distractor_similarity: Option<f64>,
    /// Needle offsets inside a row stride: 0,1,2,3, all, or natural (where the depth puts it).
    #[arg(long, allow_hyphen_values = true, value_name = "LIST")]
    pub needle_offsets: Option<String>,
    /// Prompt length mod the ratio: each context L becomes ⌊L/c⌋·c + m for each m (0,1,2,3 or all).
    #[arg(long, allow_hyphen_values = true, value_name = "LIST")]
    pub length_mods: Option<String>,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Context lengths: 1K,4K,… or a doubling range 1K..128K (K = 1024, M = 1048576).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "LIST")]
    pub contexts: Option<String>,
    /// Needle depths in percent (0 = start, 100 = end): 0,50,100, 0..100:10, linear:11 or sigmoid:11 (packed near 0 and 100).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "LIST")]
    pub depths: Option<String>,
    /// Top-k values (default: the preset's index_topk and twice it).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "LIST")]
    pub topk: Option<String>,
    /// Precision variants, e.g. fp32,bf16,fp8.
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "LIST")]
    pub precisions: Option<String>,
    /// Output directory.
    #[arg(long, allow_negative_numbers = true, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Overwrite a non-empty output directory.
    #[arg(long)]
    pub force: bool,
    /// Continue an interrupted sweep in --out (refused if the configuration differs).
    #[arg(long, conflicts_with = "force")]
    pub resume: bool,
    /// Run only the I-th of N disjoint parts of the grid (combine them with `merge`).
    #[arg(long, value_name = "I/N", allow_hyphen_values = true)]
    pub shard: Option<String>,
    /// Context of the needle rank/margin chart (default: the longest).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "TOKENS")]
    pub detail_context: Option<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Context length in tokens (K/M suffixes allowed).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "TOKENS")]
    pub context: Option<String>,
    /// Needle depth in percent.
    #[arg(long, allow_hyphen_values = true, value_name = "PERCENT", allow_negative_numbers = true)]
    pub depth: Option<String>,
    /// Top-k.
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "K")]
    pub topk: Option<String>,
    /// Precision variant.
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "NAME")]
    pub precision: Option<String>,
    /// Print one line per trial.
    #[arg(long)]
    pub print_trials: bool,
    /// Print the cell as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct PresetsArgs {
    #[command(subcommand)]
    pub action: Option<PresetsAction>,
}

#[derive(Subcommand, Debug)]
pub enum PresetsAction {
    /// Print a preset as TOML.
    Show { name: String },
}

fn text(v: &Option<String>) -> Option<ListSpec> {
    v.as_ref().map(|s| ListSpec::Text(s.clone()))
}

impl ScenarioArgs {
    /// The command line's values as an overlay (absent flags leave gaps).
    pub fn overlay(&self) -> Result<ScenarioParams, ConfigError> {
        let mut p = ScenarioParams { preset: self.preset.clone(), ..Default::default() };
        p.sweep.trials = self.trials;
        p.sweep.seed = self.seed;
        p.sweep.threshold = self.threshold;
        if let Some(text) = &self.needle_strength {
            let x = text
                .trim()
                .parse::<f64>()
                .map_err(|_| ConfigError::new(config::field_name("needle.strength"), format!("{text:?}"), "a finite number ≥ 0"))?;
            p.needle.strength = Some(x);
        }
        p.needle.tokens = self.needle_tokens;
        p.needle.heads = self.needle_heads;
        p.geometry.compress_ratio = self.compress_ratio;
        p.geometry.window = self.window;
        p.selection.tie_rule = self.tie_rule.clone();
        p.physics.rope = self.rope.clone();
        p.physics.pooling = self.pooling.clone();
        p.physics.gate_bias_std = self.gate_bias_std;
        p.physics.gate_noise_std = self.gate_noise_std;
        p.physics.needle_gate_boost = self.needle_gate_boost;
        p.physics.correlation_length = self.correlation_length;
        p.physics.distractors = self.distractors;
        p.physics.distractor_similarity = self.distractor_similarity;
        p.sweep.needle_offsets = text(&self.needle_offsets);
        p.sweep.length_mods = text(&self.length_mods);
        p.estimator.mode = self.mode.clone();
        p.estimator.tail_rows = self.tail_rows;
        p.estimator.predict = self.predict.as_deref().map(|v| v == "on");
        p.precision = self.precision_def.iter().map(|d| config::precision::parse_compact(d)).collect::<Result<_, _>>()?;
        Ok(p)
    }
}

impl ScenarioArgs {
    /// The overlay plus the grid's four lists (each as typed, or absent).
    fn with_grid(&self, grid: [&Option<String>; 4]) -> Result<ScenarioParams, ConfigError> {
        let mut p = self.overlay()?;
        let [contexts, depths, topk, precisions] = grid;
        p.sweep.contexts = text(contexts);
        p.sweep.depths = text(depths);
        p.sweep.topk = text(topk);
        p.sweep.precisions = text(precisions);
        Ok(p)
    }
}

impl SweepArgs {
    pub fn overlay(&self) -> Result<ScenarioParams, ConfigError> {
        self.scenario.with_grid([&self.contexts, &self.depths, &self.topk, &self.precisions])
    }
}

impl TrialArgs {
    pub fn overlay(&self) -> Result<ScenarioParams, ConfigError> {
        self.scenario.with_grid([&self.context, &self.depth, &self.topk, &self.precisions])
    }
}

impl RunArgs {
    pub fn overlay(&self) -> Result<ScenarioParams, ConfigError> {
        self.scenario.with_grid([&self.context, &self.depth, &self.topk, &self.precision])
    }
}

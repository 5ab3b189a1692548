//! Command-line arguments, first layer: raw strings and numbers as typed.
//! Each command's become its request (`dsa_recall::commands`), which checks
//! them once; the scenario knobs become a `ScenarioParams` overlay here and
//! are validated in `dsa_recall::config::check`.

pub mod help;
pub mod progress;

use clap::{ArgMatches, Args, FromArgMatches, Parser, Subcommand};
use dsa_recall::commands::cell::{CellCommand, CellRequest};
use dsa_recall::commands::diagnose::{CalibrateRequest, DiagnoseRequest};
use dsa_recall::commands::observe::ObserveRequest;
use dsa_recall::commands::quantize::QuantizeRequest;
use dsa_recall::commands::replay::{self, ReplayInput, ReplayRequest};
use dsa_recall::commands::request::{image_formats, precision_definitions, ChartRequest, ScenarioRequest};
use dsa_recall::commands::sweep::{MergeRequest, SweepRequest};
use dsa_recall::config::flags::{Command as KnobCommand, Flag, Scope};
use dsa_recall::config::params;
use dsa_recall::config::vary::VaryAxis;
use dsa_recall::config::{self, ListSpec, Overlay, ScenarioParams};
use dsa_recall::numerics::format::ElementFormat;
use dsa_recall::numerics::quantize;
use dsa_recall::tensors::replay::TensorNames;
use dsa_recall::ConfigError;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "dsa-recall",
    version,
    about = "Simulates DeepSeek sparse attention's top-k selection and per-layer needle selection recall on a CPU",
    after_help = EXAMPLES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The top-level help's examples: one command per everyday question.
const EXAMPLES: &str = "\
Examples:
  dsa-recall sweep --out results                      the preset's grid: recall vs context, charts, report.html
  dsa-recall sweep --contexts 32K --precisions all --out cmp
                                                      every precision and k at one context (narrow table)
  dsa-recall sweep --contexts 8K..64K --topk 512,1024 --out k
                                                      what k = 1024 buys over 512 (paired on the same haystacks)
  dsa-recall sweep --needle-strength 0.5,1,2,4 --contexts 32K --out strength
                                                      a model knob as a sweep axis
  dsa-recall run --context 32K --depth 50 --topk 512 --precision fp4 --print-trials
                                                      one cell, trial by trial
  dsa-recall presets show deepseek-v4-pro             a preset's every setting, as TOML
  dsa-recall plot results --format svg                redraw a sweep's charts without simulating";

/// Every preset's value of a setting, as help text says it: "400 in each
/// preset", or "512 for deepseek-v4-flash, 1024 for deepseek-v4-pro, …".
/// Read from the embedded presets, so help follows them.
fn preset_values(value: impl Fn(&ScenarioParams) -> Option<String>) -> Option<String> {
    let values: Vec<(&str, String)> =
        config::PRESETS.iter().filter_map(|(name, _)| Some((*name, value(&config::preset_params(name).ok()?)?))).collect();
    let first = values.first()?.1.clone();
    if values.len() == config::PRESETS.len() && values.iter().all(|(_, v)| *v == first) {
        return Some(format!("{first} in each preset"));
    }
    Some(values.iter().map(|(name, v)| format!("{v} for {name}")).collect::<Vec<_>>().join(", "))
}

/// The default a knob flag takes from the preset, for its help line.
fn preset_default(path: &str) -> Option<String> {
    let list = |l: &Option<ListSpec>| l.as_ref().map(ListSpec::to_text);
    let values = match path {
        "sweep.trials" => preset_values(|p| p.sweep.trials.map(|v| v.to_string())),
        "sweep.seed" => preset_values(|p| p.sweep.seed.map(|v| v.to_string())),
        "sweep.threshold" => preset_values(|p| p.sweep.threshold.map(|v| v.to_string())),
        "sweep.contexts" => preset_values(|p| list(&p.sweep.contexts)),
        "sweep.depths" => preset_values(|p| list(&p.sweep.depths)),
        "sweep.precisions" => preset_values(|p| list(&p.sweep.precisions)),
        // check_grid's default: index_topk and twice it.
        "sweep.topk" => {
            let values = preset_values(|p| list(&p.sweep.topk).or(p.indexer.index_topk.map(|k| format!("{k},{}", 2 * k))))?;
            return Some(format!("[default: the preset's index_topk and twice it: {values}]"));
        }
        _ => None,
    }?;
    Some(format!("[default: the preset's: {values}]"))
}

/// A knob flag's help with the preset's default appended.
fn with_preset_default(arg: clap::Arg, command: KnobCommand) -> clap::Arg {
    let id = arg.get_id().as_str();
    let default = match ScenarioParams::flags().find(|f| f.path == id) {
        Some(f) if f.spelling(command) != f.spelling(KnobCommand::Sweep) => cell_default(f, command),
        _ => preset_default(id),
    };
    match default {
        Some(default) => {
            // The table's own "(default: …)" in words gives way to the values.
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let help = help.split(" (default:").next().unwrap_or_default().to_string();
            arg.help(format!("{help} {default}"))
        }
        None => arg,
    }
}

/// `--preset`'s help: the embedded presets by name.
fn preset_help() -> String {
    let names: Vec<String> = config::PRESETS
        .iter()
        .map(|(name, _)| if *name == config::DEFAULT_PRESET { format!("{name} (default)") } else { name.to_string() })
        .collect();
    format!("Preset to start from: {} (`dsa-recall presets` describes them)", names.join(", "))
}

/// Help of `--precision-def`, with the element formats from `ElementFormat::ALL`.
fn precision_def_help() -> String {
    format!(
        "Define a custom precision variant (repeatable), usable by name in --precisions: \
         'name=N;q=SIDE;k=SIDE;logits=f32|bf16|f16;weights=f32|bf16', where SIDE is \
         ELEMENT[/BLOCK][/SCALE][/hadamard][/floor=X] (ELEMENT {}; \
         BLOCK a size dividing head_dim, row or tensor; SCALE fp32|ue8m0|ue8m0-floor|e4m3); \
         a side left out is exact f32. Example: 'name=kfp8;q=bf16;k=e4m3fn/128/ue8m0/hadamard'",
        ElementFormat::names(&ElementFormat::ALL, "|")
    )
}

/// The preset's value in the help of a grid list as `run` or `trial` spells
/// it: shown where it is a value the flag takes (one depth; `trial`'s list
/// of precisions), and for `--topk` the index_topk the preset's two-value
/// default starts from.
fn cell_default(flag: &Flag, command: KnobCommand) -> Option<String> {
    if flag.path == "sweep.topk" {
        let values = preset_values(|p| p.indexer.index_topk.map(|k| k.to_string()))?;
        return Some(format!("(the preset's index_topk: {values})"));
    }
    let takes_list = flag.spelling(command).long == flag.long;
    // One value in every preset: a list's text with no separator or range.
    let one_each = config::PRESETS.iter().all(|(name, _)| {
        let sweep = config::preset_params(name).ok().and_then(|p| serde_json::to_value(p.sweep).ok());
        let list = sweep.and_then(|v| serde_json::from_value::<ListSpec>(v.get(flag.path.strip_prefix("sweep.")?)?.clone()).ok());
        let text = list.map(|l| l.to_text()).unwrap_or_default();
        !text.is_empty() && !text.contains(',') && !text.contains("..") && !text.contains(':')
    });
    (takes_list || one_each).then(|| preset_default(flag.path)).flatten()
}

/// Hides the knobs `command` reads no value from (the knob table's
/// `unused_by`); they are refused in `config::params::refuse_unused`.
fn hide_unused(arg: clap::Arg, command: KnobCommand) -> clap::Arg {
    let unused = ScenarioParams::flags().any(|f| f.path == arg.get_id().as_str() && !f.used_by(command));
    if unused {
        arg.hide(true)
    } else {
        arg
    }
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
    /// Write a scenario TOML whose knobs come from real data: a checkpoint's indexer weights, and/or a fit to healthy observations.
    Calibrate(CalibrateArgs),
    /// Rank the failure hypotheses on an observation file (docs/OBSERVATIONS.md) and pick the next experiment. Simulates 200 trials per cell unless --trials or the scenario file sets them (the --trials default below is for sweeps).
    Diagnose(DiagnoseArgs),
    /// Turn an engine's capture of the indexer's top-k (sglang --enable-return-indexer-topk) into an observation file.
    Observe(ObserveArgs),
    /// Check an engine's indexer capture against the bit-exact reference of its declared cache layout (exit 0 equal up to ties, 1 mismatch, 2 bad input).
    Check(CheckArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) for these commands.
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of dsa-recall and every subcommand.
    Man,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The capture: a safetensors file, or a folder of NAME.npy files and meta.json (docs/TENSORS.md).
    #[arg(value_name = "CAPTURE", required_unless_present = "layouts")]
    pub capture: Option<PathBuf>,
    /// Cache layout: a built-in name or a .toml file (default: the capture's metadata).
    #[arg(long, value_name = "NAME|FILE")]
    pub layout: Option<String>,
    /// Precision variant for the query and the logit/weight formats (default: the capture's, else the layout's).
    #[arg(long, value_name = "VARIANT")]
    pub pipeline: Option<String>,
    /// Rows the engine selects (default: the capture's, else topk_indices' width).
    #[arg(long, value_name = "K")]
    pub topk: Option<usize>,
    /// Head weights as captured: kernel (every factor folded in) or raw.
    #[arg(long, value_name = "kernel|raw")]
    pub weights: Option<String>,
    /// Rows per cache block, when the engine's differs from the layout's.
    #[arg(long, value_name = "N")]
    pub rows_per_block: Option<usize>,
    /// Logits must agree bit for bit (no evaluation-order bound).
    #[arg(long)]
    pub exact: bool,
    /// Significant bits of the engine's accumulation for the bound (default 24, f32).
    #[arg(long, value_name = "BITS", conflicts_with = "exact")]
    pub rounding_bits: Option<u32>,
    /// Skip the fault transforms on a mismatch.
    #[arg(long)]
    pub no_transforms: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report here (only after the check ran).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// List the built-in layouts, or print one as TOML.
    #[arg(long, value_name = "NAME", num_args = 0..=1, default_missing_value = "")]
    pub layouts: Option<String>,
}

#[derive(Args, Debug)]
pub struct ObserveArgs {
    /// Capture files, one request each (or a JSON array of responses): sglang's /generate response JSON
    /// (meta_info.indexer_topk), or a .npy of int32/int64 indices [tokens, layers, topk]. Counts add up.
    #[arg(long, value_name = "FILE", num_args = 1.., required = true)]
    pub capture: Vec<PathBuf>,
    /// The needle's token positions A..B, half-open: A its first token, B one past its last.
    #[arg(long, value_name = "A..B")]
    pub needle_tokens: String,
    /// Preset giving the compress ratio of the indices and the default --topk.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Tokens per row the indices count in (default: the preset's geometry.compress_ratio; 1 = token positions).
    #[arg(long, value_name = "R")]
    pub compress_ratio: Option<u64>,
    /// Capture width, the engine's index_topk (default: the preset's; a .npy gives its own).
    #[arg(long, value_name = "K")]
    pub topk: Option<u64>,
    /// Indexer layers in a JSON capture whose meta_info lacks prompt_tokens and completion_tokens.
    #[arg(long, value_name = "N")]
    pub layers: Option<u64>,
    /// Prompt length in tokens (default: meta_info.prompt_tokens, or a .npy's rows).
    #[arg(long, value_name = "TOKENS")]
    pub context: Option<String>,
    /// Needle depth in percent for the rows (default: from --needle-tokens and the context).
    #[arg(long, value_name = "PERCENT", allow_negative_numbers = true)]
    pub depth: Option<f64>,
    /// Queries that count: last (the last prompt token, default), all (every query that sees the needle), or a token position.
    #[arg(long, value_name = "last|all|POS", default_value = "last")]
    pub query: String,
    /// The configuration the engine ran, for the config column: a precision variant (fp8-fp32scale, bf16, …) or a label to `# map`.
    #[arg(long = "config", value_name = "LABEL")]
    pub label: String,
    /// Mark the rows as a healthy configuration (for calibrate --observations).
    #[arg(long, value_name = "true|false")]
    pub healthy: Option<bool>,
    /// Where to write the observation CSV.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Checkpoint inputs: safetensors shards, a model.safetensors.index.json, or a checkpoint directory.
    /// Only the indexer's tensors are read (docs/CALIBRATION.md "Calibrating from a checkpoint").
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub checkpoint: Vec<PathBuf>,
    /// Observation file (docs/OBSERVATIONS.md): fit a knob to its rows marked healthy = true
    /// (docs/CALIBRATION.md "Calibrating from observations"). With --checkpoint, its knobs are set first.
    #[arg(long, value_name = "FILE")]
    pub observations: Option<PathBuf>,
    /// The knob fitted to the observations, as section.field (default: needle.exceedance under the quantile needle, needle.strength under the strength unit).
    #[arg(long, value_name = "FIELD")]
    pub fit: Option<String>,
    /// Values tried, LO..HI, log-spaced (default: 1e-6..0.1 for needle.exceedance, 0.125..64 for needle.strength, else a tenth to ten times the scenario's value).
    #[arg(long, value_name = "LO..HI")]
    pub fit_range: Option<String>,
    /// Recall a row without a layer is compared with: model (whole-model, what a needle test measures) or layer.
    #[arg(long, allow_hyphen_values = true, value_name = "model|layer", default_value = "model")]
    pub recall: String,
    /// The scenario the fit starts from (--preset also names the checkpoint's model; default: inferred from it).
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Where to write the scenario TOML (loadable with --config); a fit also writes the curve to NAME.fit.csv beside it.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct DiagnoseArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Observation file: CSV, one row per measured configuration (docs/OBSERVATIONS.md).
    #[arg(long, allow_negative_numbers = true, value_name = "FILE")]
    pub observations: PathBuf,
    /// Candidate hypotheses: a list of all, NAME or NAME+NAME, e.g. all,topk=1024 (healthy is always one).
    #[arg(long, allow_hyphen_values = true, value_name = "LIST", default_value = "all")]
    pub hypotheses: String,
    /// Recall a row without a layer is compared with: model (whole-model, what a needle test measures) or layer.
    #[arg(long, allow_hyphen_values = true, value_name = "model|layer", default_value = "model")]
    pub recall: String,
    /// Skip the search for the next experiment (it simulates a second, small grid).
    #[arg(long)]
    pub no_next: bool,
    /// Multiples of the needle knob (exceedance, or strength) each candidate's likelihood is averaged over (a uniform prior on them), since how hard the tested needle was is not known; auto: 0.5 to 128 of the exceedance (0.5,1,2 of a strength); off: the scenario's needle, as known.
    #[arg(long, allow_hyphen_values = true, value_name = "LIST|auto|off", default_value = "auto")]
    pub needle_multipliers: String,
    /// Print the diagnosis as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// List every candidate on its own line (candidates tied on likelihood are otherwise folded into one).
    #[arg(long)]
    pub all: bool,
    /// Also write diagnosis.json, the likelihood chart and report.html into DIR (refused if not empty, unless --force).
    #[arg(long, allow_negative_numbers = true, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Overwrite a non-empty --out directory.
    #[arg(long, requires = "out")]
    pub force: bool,
    /// Chart format with --out.
    #[arg(long, value_parser = ["png", "svg", "both"], default_value = "png", requires = "out")]
    pub format: String,
}

impl CheckArgs {
    pub fn request(&self) -> dsa_recall::commands::check::CheckRequest {
        let options = dsa_recall::tensors::check::CheckOptions {
            layout: self.layout.clone(),
            pipeline: self.pipeline.clone(),
            topk: self.topk,
            weights: self.weights.clone(),
            rows_per_block: self.rows_per_block,
            exact: self.exact,
            rounding_bits: self.rounding_bits,
            no_transforms: self.no_transforms,
            ..Default::default()
        };
        dsa_recall::commands::check::CheckRequest { capture: self.capture.clone().unwrap_or_default(), options, out: self.out.clone() }
    }
}

impl DiagnoseArgs {
    pub fn request(&self) -> Result<DiagnoseRequest, ConfigError> {
        Ok(DiagnoseRequest {
            scenario: self.scenario.request()?,
            observations: self.observations.clone(),
            hypotheses: self.hypotheses.clone(),
            recall: self.recall.clone(),
            next: !self.no_next,
            needle_multipliers: self.needle_multipliers.clone(),
            out: self.out.clone(),
            force: self.force,
            formats: image_formats(&self.format),
        })
    }
}

impl CalibrateArgs {
    /// `command` is the command line, for the scenario file's header.
    pub fn request(&self, command: String) -> Result<CalibrateRequest, ConfigError> {
        Ok(CalibrateRequest {
            scenario: self.scenario.request()?,
            checkpoint: self.checkpoint.clone(),
            observations: self.observations.clone(),
            fit: self.fit.clone(),
            fit_range: self.fit_range.clone(),
            recall: self.recall.clone(),
            out: self.out.clone(),
            command,
        })
    }
}

impl ObserveArgs {
    pub fn request(&self) -> ObserveRequest {
        ObserveRequest {
            capture: self.capture.clone(),
            needle_tokens: self.needle_tokens.clone(),
            preset: self.preset.clone(),
            compress_ratio: self.compress_ratio,
            topk: self.topk,
            layers: self.layers,
            context: self.context.clone(),
            depth: self.depth,
            query: self.query.clone(),
            label: self.label.clone(),
            healthy: self.healthy,
            out: self.out.clone(),
        }
    }
}

impl ReplayArgs {
    /// The request and where its tensors come from.
    pub fn request(&self) -> Result<(ReplayRequest, ReplayInput), ConfigError> {
        let needle_rows = match &self.needle_rows {
            None => None,
            Some(list) => Some(
                list.split(',')
                    .map(|x| {
                        x.trim()
                            .parse::<u64>()
                            .map_err(|_| ConfigError::new("--needle-rows", format!("{list:?}"), "row indices, e.g. 12,13"))
                    })
                    .collect::<Result<Vec<u64>, _>>()?,
            ),
        };
        let request = ReplayRequest {
            topks: config::lists::parse_sizes("--topk", &self.topk)?,
            precisions: config::lists::parse_names("--precisions", &self.precisions)?,
            needle_rows,
            agreement: self.agreement.clone(),
        };
        let input = match (&self.file, &self.q_npy, &self.k_npy, &self.weights_npy) {
            (Some(file), None, _, _) => ReplayInput::Safetensors {
                file: file.clone(),
                names: TensorNames {
                    queries: self.q_name.clone(),
                    keys: self.k_name.clone(),
                    weights: self.weights_name.clone(),
                    needle_rows: self.needle_rows_name.clone(),
                },
            },
            (None, Some(q), Some(k), Some(w)) => ReplayInput::Npy { queries: q.clone(), keys: k.clone(), weights: w.clone() },
            _ => return Err(ConfigError::new("replay", "(inputs)", "a safetensors FILE, or --q-npy, --k-npy and --weights-npy")),
        };
        Ok((request, input))
    }
}

impl MergeArgs {
    pub fn request(&self) -> MergeRequest {
        MergeRequest { shards: self.shards.clone(), out: self.out.clone(), force: self.force }
    }
}

impl QuantizeArgs {
    pub fn request(&self) -> QuantizeRequest {
        QuantizeRequest {
            format: self.format.clone(),
            block: self.block,
            scale: self.scale.clone(),
            saturate: self.saturate,
            amax_floor: self.amax_floor,
            codes: self.codes,
        }
    }
}

#[derive(Args, Debug)]
pub struct HypothesesArgs {
    #[command(subcommand)]
    pub action: Option<HypothesesAction>,
    /// Print every hypothesis in full.
    #[arg(long, conflicts_with = "markdown")]
    pub long: bool,
    /// Print docs/HYPOTHESES.md, generated from the catalogue.
    #[arg(long)]
    pub markdown: bool,
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
    #[command(flatten)]
    pub chart: ChartArgs,
    /// Context of the rank/margin and comparison charts (default: the longest in the sweep).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "TOKENS")]
    pub detail_context: Option<String>,
}

/// Chart flags shared by `sweep` and `plot`.
#[derive(Args, Debug)]
pub struct ChartArgs {
    /// Chart format.
    #[arg(long, value_parser = ["png", "svg", "both"], default_value = "png")]
    pub format: String,
    /// Colour span of the difference heatmap: ±X (default: the largest
    /// difference rounded up, at least 0.1).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "X")]
    pub diff_span: Option<String>,
    /// Recall and comparison charts show whole-model recall alone, without
    /// the per-layer series (needs a sweep with whole-model recall).
    #[arg(long)]
    pub whole_model_only: bool,
}

impl ChartArgs {
    /// The chart options as typed, `--detail-context` being the command's.
    pub fn request(&self, detail_context: &Option<String>) -> ChartRequest {
        ChartRequest {
            formats: image_formats(&self.format),
            detail_context: detail_context.clone(),
            diff_span: self.diff_span.clone(),
            whole_model_only: self.whole_model_only,
        }
    }
}

#[derive(Args, Debug)]
#[command(mut_args(|a| hide_unused(a, KnobCommand::Trial)))]
pub struct TrialArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// `--context`, `--depth`, `--topk` and `--precisions`, from the knob table.
    #[command(flatten)]
    pub cell: KnobFlags<TRIAL>,
    /// Which trial of the cell (its seed is the sweep's trial seed).
    #[arg(long, default_value_t = 0)]
    pub trial: u64,
    /// Write the trial's tensors to this safetensors file.
    #[arg(long, value_name = "FILE")]
    pub dump: PathBuf,
    /// Write the dump even when it would exceed 1 GiB (refused otherwise).
    #[arg(long)]
    pub allow_large_output: bool,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A safetensors file (a `trial --dump` or recorded tensors).
    #[arg(value_name = "FILE", required_unless_present = "q_npy")]
    pub file: Option<PathBuf>,
    /// Queries as .npy ([heads, dim] or [tokens, heads, dim]; per layer [layers, heads, dim] or [layers, tokens, heads, dim]), instead of FILE.
    #[arg(long, value_name = "FILE", requires_all = ["k_npy", "weights_npy"], conflicts_with = "file")]
    pub q_npy: Option<PathBuf>,
    /// Keys as .npy ([rows, dim], or [layers, rows, dim] for per-layer inputs).
    #[arg(long, value_name = "FILE")]
    pub k_npy: Option<PathBuf>,
    /// Head weights as .npy ([heads] or [tokens, heads]; per layer [layers, heads] or [layers, tokens, heads]).
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
    #[arg(long, allow_hyphen_values = true, value_name = "LIST", default_value = replay::DEFAULT_VARIANTS)]
    pub precisions: String,
    /// Top-k agreement of pairs of fp32 and the variants, e.g. bf16:fp8: share of A's top-k that B also selects, and how much of the rest is ties at the cut (docs/MODEL.md, Top-k agreement).
    #[arg(long, allow_hyphen_values = true, value_name = "A:B,…")]
    pub agreement: Option<String>,
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
    #[arg(long, value_name = "F", help = format!("Element format: {}", quantize::cast_format_names()))]
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

/// Knobs shared by `sweep`, `run` and `trial`.
#[derive(Args, Debug)]
pub struct ScenarioArgs {
    // Help from the embedded presets' names.
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, help = preset_help())]
    pub preset: Option<String>,
    /// TOML scenario file; its values override the preset's.
    #[arg(long, allow_negative_numbers = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// One flag per scenario parameter, from the knob table in `dsa_recall::config::params`.
    #[command(flatten)]
    pub knobs: KnobFlags<SCENARIO>,
    #[arg(long = "precision-def", value_name = "SPEC", help = precision_def_help())]
    pub precision_def: Vec<String>,
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub threads: Option<usize>,
}

/// The flags of the knob table (`dsa_recall::config::params`): with
/// `SET = SCENARIO` those of every scenario command, else the grid's lists as
/// `sweep` (`SWEEP`), `run` (`RUN`) or `trial` (`TRIAL`) spells them. Holds
/// the overlay they make, or the error of a flag read as text (reported after
/// clap's own checks, as a config error). Boxed: a `ScenarioParams` is large
/// and `Command` holds two.
#[derive(Clone, Debug)]
pub struct KnobFlags<const SET: u8>(Box<Result<ScenarioParams, ConfigError>>, Option<String>);

/// The sets of knob flags a [`KnobFlags`] can hold.
pub const SCENARIO: u8 = 0;
pub const SWEEP: u8 = 1;
pub const RUN: u8 = 2;
pub const TRIAL: u8 = 3;

impl<const SET: u8> KnobFlags<SET> {
    const SCOPE: Scope = if SET == SCENARIO { Scope::Scenario } else { Scope::Sweep };
    const COMMAND: KnobCommand = match SET {
        RUN => KnobCommand::Run,
        TRIAL => KnobCommand::Trial,
        _ => KnobCommand::Sweep,
    };

    /// The flags given, as an overlay (absent flags leave gaps).
    pub fn params(&self) -> Result<ScenarioParams, ConfigError> {
        (*self.0).clone()
    }

    /// `--needle-strength` given a list (`0.5,1,2,4`): a knob axis for
    /// `sweep`, refused by the one-cell commands.
    pub fn strength_list(&self) -> Option<&str> {
        self.1.as_deref()
    }
}

/// The knob a list on `--needle-strength` sweeps.
const STRENGTH: &str = "needle.strength";

impl<const SET: u8> FromArgMatches for KnobFlags<SET> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        // A list on --needle-strength is taken out before the knob reads
        // one number (see `strength_list`).
        let listed = |t: &String| t.contains(',');
        match m.try_get_one::<String>(STRENGTH).ok().flatten() {
            Some(text) if Self::SCOPE == Scope::Scenario && listed(text) => {
                let mut m = m.clone();
                let list = m.remove_one::<String>(STRENGTH);
                Ok(Self(Box::new(ScenarioParams::from_flags(&m, Self::SCOPE)), list))
            }
            _ => Ok(Self(Box::new(ScenarioParams::from_flags(m, Self::SCOPE)), None)),
        }
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<const SET: u8> Args for KnobFlags<SET> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.args(params::args_for(Self::SCOPE, Self::COMMAND).map(|a| with_preset_default(a, Self::COMMAND)))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// `--contexts`, `--depths`, `--topk` and `--precisions`, from the knob table.
    #[command(flatten)]
    pub lists: KnobFlags<SWEEP>,
    /// Output directory.
    #[arg(long, allow_negative_numbers = true, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Overwrite a non-empty output directory.
    #[arg(long)]
    pub force: bool,
    /// Continue an interrupted sweep in --out (refused if the configuration differs).
    #[arg(long, conflicts_with = "force")]
    pub resume: bool,
    /// Print one JSON object per cell on stdout (the lines of results.jsonl) instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Run only the I-th of N disjoint parts of the grid (combine them with `merge`).
    #[arg(long, value_name = "I/N", allow_hyphen_values = true)]
    pub shard: Option<String>,
    /// Context of the rank/margin and comparison charts (default: the longest).
    #[arg(long, allow_hyphen_values = true, allow_negative_numbers = true, value_name = "TOKENS")]
    pub detail_context: Option<String>,
    /// Sweep a model knob too: FIELD=V1,V2,… with FIELD a numeric scenario knob as section.field, e.g.
    /// needle.strength=0.5,1,2,4 (or give --needle-strength a list). Each value is a whole sweep on the
    /// same seed, in its own subdirectory of --out; the top holds the combined results and a chart.
    #[arg(long, value_name = "FIELD=LIST", allow_hyphen_values = true)]
    pub vary: Option<String>,
    #[command(flatten)]
    pub chart: ChartArgs,
}

#[derive(Args, Debug)]
#[command(mut_args(|a| hide_unused(a, KnobCommand::Run)))]
pub struct RunArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// `--context`, `--depth`, `--topk` and `--precision`, from the knob table.
    #[command(flatten)]
    pub cell: KnobFlags<RUN>,
    /// Print one line per trial.
    #[arg(long)]
    pub print_trials: bool,
    /// Print the cell as one JSON object (the keys of a sweep's results.jsonl) instead of text.
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

impl ScenarioArgs {
    /// The command line's values as an overlay (absent flags leave gaps).
    /// A list on --needle-strength is `sweep`'s alone.
    pub fn overlay(&self) -> Result<ScenarioParams, ConfigError> {
        if let Some(list) = self.knobs.strength_list() {
            return Err(ConfigError::new(
                config::field_name(STRENGTH),
                format!("{list:?}"),
                "one number ≥ 0: this command simulates one cell (`sweep` takes a list and runs once per value)",
            ));
        }
        self.overlay_without_axis()
    }

    fn overlay_without_axis(&self) -> Result<ScenarioParams, ConfigError> {
        let mut p = self.knobs.params()?;
        p.preset = self.preset.clone();
        p.precision = precision_definitions(&self.precision_def)?;
        Ok(p)
    }

    /// The scenario request of a one-value command (its overlay checked as
    /// in [`ScenarioArgs::overlay`]).
    pub fn request(&self) -> Result<ScenarioRequest, ConfigError> {
        Ok(ScenarioRequest { config: self.config.clone(), overlay: self.overlay()?, threads: self.threads })
    }

    /// [`ScenarioArgs::request`] with the command's grid flags on top.
    pub fn request_with(&self, grid: ScenarioParams) -> Result<ScenarioRequest, ConfigError> {
        let mut request = self.request()?;
        request.overlay.overlay(grid);
        Ok(request)
    }
}

impl SweepArgs {
    pub fn overlay(&self) -> Result<ScenarioParams, ConfigError> {
        let mut p = self.scenario.overlay_without_axis()?;
        p.overlay(self.lists.params()?);
        Ok(p)
    }

    pub fn request(&self) -> Result<SweepRequest, ConfigError> {
        Ok(SweepRequest {
            vary: self.vary_axis()?,
            scenario: ScenarioRequest { config: self.scenario.config.clone(), overlay: self.overlay()?, threads: self.scenario.threads },
            out: Some(self.out.clone()),
            force: self.force,
            resume: self.resume,
            shard: self.shard.clone(),
            charts: self.chart.request(&self.detail_context),
            chunk_trials: progress::chunk_trials_knob()?,
        })
    }

    /// The knob axis: `--vary FIELD=LIST`, or a list on `--needle-strength`.
    pub fn vary_axis(&self) -> Result<Option<VaryAxis>, ConfigError> {
        match (&self.vary, self.scenario.knobs.strength_list()) {
            (Some(v), Some(list)) => Err(ConfigError::new(
                "--vary",
                format!("{v:?}"),
                format!("one knob axis per sweep, and --needle-strength {list} is one already"),
            )),
            (Some(v), None) => VaryAxis::parse(v).map(Some),
            (None, Some(list)) => VaryAxis::new(STRENGTH, list).map(Some),
            (None, None) => Ok(None),
        }
    }
}

impl TrialArgs {
    pub fn request(&self) -> Result<CellRequest, ConfigError> {
        Ok(CellRequest { command: CellCommand::Trial, scenario: self.scenario.request_with(self.cell.params()?)? })
    }
}

impl RunArgs {
    pub fn request(&self) -> Result<CellRequest, ConfigError> {
        Ok(CellRequest { command: CellCommand::Run, scenario: self.scenario.request_with(self.cell.params()?)? })
    }
}

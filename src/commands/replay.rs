//! `replay`: recorded indexer tensors through precision variants, each
//! selection compared with the exact fp32 one.

use crate::error::{ConfigError, Error};
use crate::report::chart::overlap::{render_overlap, OverlapBar, OverlapChart};
use crate::score::agreement::parse_pair;
use crate::score::selection::check_topk;
use crate::score::variant::PrecisionVariant;
use crate::tensors::replay::{
    load_capture_npy, load_capture_safetensors, replay as replay_single, replay_agreement, replay_layered, Capture, CaptureShape,
    ReplayRow, Summary, TensorNames,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The variants `replay` compares with fp32 when none are given.
pub const DEFAULT_VARIANTS: &str = "bf16,fp8,fp8-fp32scale,fp4,mxfp4,nvfp4";

/// What to replay a capture under.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayRequest {
    /// Top-k sizes, each positive.
    pub topks: Vec<u64>,
    /// Built-in precision variants (a replay has no scenario to define others in).
    pub precisions: Vec<String>,
    /// Needle rows, replacing the capture's own.
    pub needle_rows: Option<Vec<u64>>,
    /// `--agreement A:B,…`: pairs of fp32 and the variants whose top-k sets
    /// are compared with each other (docs/MODEL.md, "Top-k agreement").
    pub agreement: Option<String>,
}

impl ReplayRequest {
    /// The sizes and variants, checked before any tensor is read.
    pub fn variants(&self) -> Result<Vec<PrecisionVariant>, ConfigError> {
        if self.topks.is_empty() || self.topks.contains(&0) {
            return Err(ConfigError::new("--topk", format!("{:?}", self.topks), "one or more positive sizes"));
        }
        if self.precisions.is_empty() {
            return Err(ConfigError::new(
                "--precisions",
                "(none)",
                format!("one or more of {} to compare with fp32", PrecisionVariant::builtin_names().join(", ")),
            ));
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

    /// The pairs of `--agreement` among fp32 and `variants`, checked; none
    /// without the flag.
    pub fn pairs(&self, variants: &[PrecisionVariant]) -> Result<Vec<(PrecisionVariant, PrecisionVariant)>, ConfigError> {
        let Some(text) = &self.agreement else { return Ok(Vec::new()) };
        let exact = PrecisionVariant::builtin("fp32").into_iter();
        let known: Vec<PrecisionVariant> = exact.chain(variants.iter().cloned()).collect();
        let names: Vec<&str> = known.iter().map(|v| v.name.as_str()).collect();
        let mut out: Vec<(PrecisionVariant, PrecisionVariant)> = Vec::new();
        for item in text.split(',').map(str::trim) {
            let Some((a, b)) = parse_pair(item, &names) else {
                let allowed = format!("comma-separated pairs A:B of fp32 and --precisions ({}), e.g. bf16:fp8", names[1..].join(", "));
                return Err(ConfigError::new("--agreement", format!("{item:?}"), allowed));
            };
            if !out.iter().any(|(x, y)| (x.name.as_str(), y.name.as_str()) == (names[a], names[b])) {
                out.push((known[a].clone(), known[b].clone()));
            }
        }
        Ok(out)
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
        }
        for &k in &self.topks {
            check_topk("--topk", k, k, shape.rows as u64, "the key rows of the capture")?;
        }
        if let Some(rows) = &self.needle_rows {
            *cap.needle_rows_mut() = rows.clone();
        }
        Ok(())
    }
}

/// Where a replay's tensors come from.
pub enum ReplayInput {
    /// A safetensors file (a `trial --dump` or recorded tensors) and the
    /// names of its tensors.
    Safetensors { file: PathBuf, names: TensorNames },
    /// Queries, keys and head weights as .npy files.
    Npy { queries: PathBuf, keys: PathBuf, weights: PathBuf },
    /// Tensors already in memory (the Python binding's arrays).
    Capture(Capture),
}

/// A finished replay: the capture's shape, one row per (layer,) token × k ×
/// variant, and for per-layer captures the summaries across layers.
pub struct Replayed {
    pub shape: CaptureShape,
    pub rows: Vec<ReplayRow>,
    pub summaries: Vec<Summary>,
}

/// `replay`: the capture through each variant of the request, every
/// selection compared with the exact fp32 one; with `chart`, the overlap per
/// k and variant drawn there too (.png or .svg).
pub fn replay(request: &ReplayRequest, input: ReplayInput, chart: Option<&Path>) -> Result<Replayed, Error> {
    let variants = request.variants()?;
    let pairs = request.pairs(&variants)?;
    let mut cap = match input {
        ReplayInput::Safetensors { file, names } => load_capture_safetensors(&file, &names)?,
        ReplayInput::Npy { queries, keys, weights } => load_capture_npy(&queries, &keys, &weights)?,
        ReplayInput::Capture(cap) => cap,
    };
    request.fit(&mut cap, &variants)?;
    let shape = cap.shape();
    let (rows, mut summaries) = match &cap {
        Capture::Single(rec) => (replay_single(rec, &variants, &request.topks)?, vec![]),
        Capture::Layered(layered) => {
            let r = replay_layered(layered, &variants, &request.topks)?;
            (r.rows, r.summaries)
        }
    };
    if !pairs.is_empty() {
        summaries.extend(replay_agreement(&cap, &pairs, &request.topks)?);
    }
    let replayed = Replayed { shape, rows, summaries };
    if let Some(path) = chart {
        render_overlap(&replayed.overlap_chart(), path, 1400, 800)?;
    }
    Ok(replayed)
}

impl Replayed {
    /// `replay --json`: one line per row, then one per summary.
    pub fn json_lines(&self) -> Vec<String> {
        let rows = self.rows.iter().map(|r| serde_json::to_string(r).unwrap_or_default());
        rows.chain(self.summaries.iter().map(|s| serde_json::to_string(s).unwrap_or_default())).collect()
    }

    /// The overlap with fp32 per k and variant, over query tokens (and layers).
    pub fn overlap_chart(&self) -> OverlapChart {
        let shape = &self.shape;
        OverlapChart {
            title: "Top-k kept under each precision, against fp32".into(),
            subtitle: format!(
                "replayed tensors: {}{} query token(s), {} heads × {} dims, {} key rows",
                shape.layers.map_or(String::new(), |l| format!("{l} layers × ")),
                shape.tokens,
                shape.heads,
                shape.dim,
                shape.rows
            ),
            bars: overlap_bars(&self.rows),
        }
    }

    /// The table `replay` prints: one line per row; per layer, then the
    /// overlaps and the needle across layers.
    pub fn table(&self) -> String {
        let shape = &self.shape;
        let mut out = String::new();
        let layer_column = shape.layers.is_some();
        match shape.layers {
            Some(layers) => {
                let _ = writeln!(
                    out,
                    "{layers} layers × {} tokens × {} heads × {} dims against {} key rows per layer; selection compared with fp32",
                    shape.tokens, shape.heads, shape.dim, shape.rows
                );
                let _ = writeln!(
                    out,
                    "{:>6} {:>6} {:>7} {:<14} {:>16} {:>9} {:>9} {:>12}",
                    "layer", "token", "k", "precision", "recall@k vs fp32", "jaccard", "needle", "needle rank"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "{} tokens × {} heads × {} dims against {} key rows; selection compared with fp32",
                    shape.tokens, shape.heads, shape.dim, shape.rows
                );
                let _ = writeln!(
                    out,
                    "{:>6} {:>7} {:<14} {:>16} {:>9} {:>9} {:>12}",
                    "token", "k", "precision", "recall@k vs fp32", "jaccard", "needle", "needle rank"
                );
            }
        }
        for r in &self.rows {
            let needle = r.needle_survived.map_or("-", |s| if s { "kept" } else { "lost" });
            let rank = r.needle_rank.map_or("-".to_string(), |x| x.to_string());
            if layer_column {
                let _ = write!(out, "{:>6} ", r.layer.unwrap_or(0));
            }
            let _ = writeln!(
                out,
                "{:>6} {:>7} {:<14} {:>16.4} {:>9.4} {:>9} {:>12}",
                r.token, r.topk, r.precision, r.selection_recall, r.jaccard, needle, rank
            );
        }
        out.push_str(&summaries_text(&self.summaries));
        out
    }
}

/// The overlaps and the needle across layers of a per-layer replay, and
/// the top-k agreement of the pairs asked for.
fn summaries_text(summaries: &[Summary]) -> String {
    let list = |xs: &[f64]| xs.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>().join(" ");
    let mut out = String::new();
    let mut heading = None;
    for s in summaries {
        let (title, columns, line) = match s {
            Summary::AdjacentLayers { topk, mean, per_pair, .. } => (
                "adjacent-layer overlap of the fp32 top-k: share of layer l's also in layer l+1's (mean over tokens)",
                format!("{:>7} {:>7}  per pair (l, l+1) from l = 0", "k", "mean"),
                format!("{topk:>7} {mean:>7.4}  {}", list(per_pair)),
            ),
            Summary::AdjacentTokens { topk, mean, per_layer, .. } => (
                "adjacent-token overlap of the fp32 top-k: share of token t's also in token t+1's (mean over pairs)",
                format!("{:>7} {:>7}  per layer from l = 0", "k", "mean"),
                format!("{topk:>7} {mean:>7.4}  {}", list(per_layer)),
            ),
            Summary::NeedleLayers { topk, precision, layers, layers_reached, reached, .. } => (
                "needle across layers: a layer reaches it when one of its tokens selects a needle row",
                format!("{:>7} {:<14} {:>15} {:>22}", "k", "precision", "layers reached", "whole model (quorum 1)"),
                format!(
                    "{topk:>7} {precision:<14} {:>15} {:>22}",
                    format!("{layers_reached} of {layers}"),
                    if *reached { "reached" } else { "missed" }
                ),
            ),
            Summary::Agreement { topk, a, b, queries, agreement, tie_disagreement, real_disagreement, tie_share, min_agreement, .. } => (
                "top-k agreement: share of A's top-k that B also selects (mean and least over queries), and the share B leaves out\n\
                 only through a tie at a cut (either choice correct) or for real; tie share = tie / (tie + real)",
                format!("{:>7} {:<20} {:>9} {:>9} {:>7} {:>7} {:>9} {:>7}", "k", "A:B", "agreement", "least", "tie", "real", "tie share", "queries"),
                format!(
                    "{topk:>7} {:<20} {agreement:>9.4} {min_agreement:>9.4} {tie_disagreement:>7.4} {real_disagreement:>7.4} {:>9} {queries:>7}",
                    format!("{a}:{b}"),
                    tie_share.map_or_else(|| "-".into(), |t| format!("{:.1} %", 100.0 * t))
                ),
            ),
        };
        if heading != Some(title) {
            let _ = write!(out, "\n{title}\n{columns}\n");
            heading = Some(title);
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The replay summarised per (k, variant) over query tokens, for the chart.
pub fn overlap_bars(rows: &[ReplayRow]) -> Vec<OverlapBar> {
    let mut bars: Vec<OverlapBar> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    for r in rows {
        match bars.iter().position(|b| b.topk == r.topk && b.precision == r.precision) {
            Some(i) => {
                let b = &mut bars[i];
                b.mean_recall += r.selection_recall;
                b.mean_jaccard += r.jaccard;
                b.min_recall = b.min_recall.min(r.selection_recall);
                b.max_recall = b.max_recall.max(r.selection_recall);
                counts[i] += 1;
            }
            None => {
                bars.push(OverlapBar {
                    topk: r.topk,
                    precision: r.precision.clone(),
                    mean_recall: r.selection_recall,
                    min_recall: r.selection_recall,
                    max_recall: r.selection_recall,
                    mean_jaccard: r.jaccard,
                });
                counts.push(1);
            }
        }
    }
    for (b, n) in bars.iter_mut().zip(counts) {
        b.mean_recall /= n as f64;
        b.mean_jaccard /= n as f64;
    }
    bars
}

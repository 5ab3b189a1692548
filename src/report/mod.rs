//! Turning simulation outcomes into files and text: a sweep's output
//! directory (data, charts, `report.html`), `plot`'s re-rendering of a
//! finished directory, and `run`'s single-cell report.
//!
//! Every chart is drawn from the cells and a [`ReportMeta`] alone, which a
//! sweep builds from its scenario and `plot` reads back from `manifest.json`,
//! so `plot` redraws byte-identical files without simulating.

pub mod chart;
pub mod diagnose;
pub mod html;
pub mod vary;

use crate::config::Scenario;
use crate::error::{ConfigError, Error};
use crate::model::stack::WholeModel;
use crate::report::chart::{
    render_compare, render_fidelity, render_heatmap, render_rank_margin, render_recall_vs_context, render_recall_vs_depth, CompareChart,
    CompareRow, DepthChart, DepthPanel, DepthPoint, DepthSeries, DistributionRow, EffectiveMark, Estimate, FidelityChart, FidelityPoint,
    FidelitySeries, Heatmap, HeatmapPanel, ImageFormat, RankMarginChart, Reach, RecallChart, RecallPoint, RecallSeries,
};
use crate::run::cell::{CellResult, HolmFamily};
use crate::run::output::{self, tokens_label, write_atomic, MANIFEST_FILE, RECALL_CHART_FILE, RESULTS_FILE, SUMMARY_FILE};
use crate::run::sweep::{effective_contexts, EffectiveContext, SweepOutcome};
use std::path::Path;

/// The self-contained HTML report.
pub const REPORT_FILE: &str = "report.html";
/// Chart stems (the extension follows the format).
pub const HEATMAP_STEM: &str = "heatmap";
pub const HEATMAP_MODEL_STEM: &str = "heatmap_model";
pub const HEATMAP_DIFF_STEM: &str = "heatmap_diff";
pub const FIDELITY_STEM: &str = "fidelity";
pub const RANK_MARGIN_STEM: &str = "rank_margin";
pub const COMPARE_STEM: &str = "compare";
pub const RECALL_VS_DEPTH_STEM: &str = "recall_vs_depth";
/// Depths from which a sweep draws recall vs depth (and one recall-vs-context
/// chart, at the detail depth, instead of one per depth).
pub const DEPTH_CHART_MIN_DEPTHS: usize = 3;
/// Panels of the recall-vs-depth chart: the longest contexts.
pub const DEPTH_CHART_MAX_PANELS: usize = 4;
/// The engines' pass rule for top-k overlap, drawn on the fidelity chart.
pub const FIDELITY_PASS_RULE: f64 = 0.99;

/// How charts are drawn: formats, the context of the single-context charts
/// and the difference heatmap's colour span.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotOptions {
    pub formats: Vec<ImageFormat>,
    /// Context of the rank/margin and comparison charts; None = the longest in the sweep.
    pub detail_context: Option<u64>,
    /// The difference heatmap's colour span ±X; None = [`diff_scale`] of
    /// the largest difference.
    pub diff_span: Option<DiffSpan>,
}

/// The difference heatmap's colour span ±X: a recall difference in (0, 1].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DiffSpan(f64);

impl DiffSpan {
    /// `x` if it lies in (0, 1].
    pub fn new(x: f64) -> Result<DiffSpan, ConfigError> {
        DiffSpan::checked(x).ok_or_else(|| ConfigError::new("--diff-span", x, DiffSpan::ALLOWED))
    }

    /// `--diff-span` as typed.
    pub fn parse(text: &str) -> Result<DiffSpan, ConfigError> {
        text.trim()
            .parse()
            .ok()
            .and_then(DiffSpan::checked)
            .ok_or_else(|| ConfigError::new("--diff-span", format!("{text:?}"), DiffSpan::ALLOWED))
    }

    pub fn get(self) -> f64 {
        self.0
    }

    const ALLOWED: &'static str = "a recall difference in (0, 1], e.g. 0.1";

    fn checked(x: f64) -> Option<DiffSpan> {
        (x > 0.0 && x <= 1.0).then_some(DiffSpan(x))
    }
}

impl Default for PlotOptions {
    fn default() -> Self {
        PlotOptions { formats: vec![ImageFormat::Png], detail_context: None, diff_span: None }
    }
}

/// What charts and the report need beyond the cells.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportMeta {
    pub preset: String,
    pub needle_strength: f64,
    /// The needle in a few words ("strength 1 sd", "niah needle (…)").
    pub needle: String,
    pub needle_tokens: u64,
    pub seed: u64,
    pub threshold: f64,
    pub version: String,
    pub effective: Vec<EffectiveContext>,
    /// The resolved scenario, as in `manifest.json`.
    pub scenario: serde_json::Value,
}

impl ReportMeta {
    pub fn from_scenario(s: &Scenario, effective: &[EffectiveContext]) -> Self {
        ReportMeta {
            preset: s.preset.clone(),
            needle_strength: s.model.needle_strength,
            needle: s.needle_label(),
            needle_tokens: s.needle_tokens,
            seed: s.seed,
            threshold: s.threshold,
            version: env!("CARGO_PKG_VERSION").to_string(),
            effective: effective.to_vec(),
            scenario: serde_json::to_value(s).unwrap_or_default(),
        }
    }

    /// The scenario's physics in a few words ("null model" when all of it is
    /// off, as in sweeps made before it existed), for chart titles.
    pub fn physics_label(&self) -> String {
        let p = &self.scenario["physics"];
        let mut parts = Vec::new();
        match p["rope"].as_str() {
            Some("off") | None => {}
            Some(r) => parts.push(format!("RoPE {r}")),
        }
        match p["pooling"].as_str() {
            Some("off") | None => {}
            Some(mode) => parts.push(format!("pooling {mode}")),
        }
        if p["correlation_length"].as_f64().unwrap_or(0.0) > 0.0 {
            parts.push(format!("correlation {} tokens", p["correlation_length"]));
        }
        if p["distractors"].as_u64().unwrap_or(0) > 0 {
            parts.push(format!("{} distractors at similarity {}", p["distractors"], p["distractor_similarity"]));
        }
        if parts.is_empty() {
            "null model".to_string()
        } else {
            parts.join(", ")
        }
    }

    /// The scenario's layer stack (`[stack]`), None without one.
    pub fn stack(&self) -> Option<WholeModel> {
        serde_json::from_value(self.scenario.get("stack")?.clone()).ok()
    }

    /// The stack's reading of whole-model recall in a few words ("1 of 21
    /// indexer layers, 20 query tokens"), None without a stack.
    pub fn stack_label(&self) -> Option<String> {
        let w = self.stack()?;
        Some(format!("{} of {} indexer layers, {} query tokens", w.quorum, w.indexed_layers(), w.query_tokens()))
    }

    /// Reads the fields back from a `manifest.json` text (`location` names the file in errors).
    pub fn from_manifest(text: &str, location: &str) -> Result<Self, Error> {
        let bad = |message: String| Error::Input { location: location.to_string(), message };
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let sc = &v["scenario"];
        let num = |x: &serde_json::Value, what: &str| x.as_f64().ok_or_else(|| bad(format!("missing number {what}")));
        let int = |x: &serde_json::Value, what: &str| x.as_u64().ok_or_else(|| bad(format!("missing integer {what}")));
        let effective: Vec<EffectiveContext> =
            serde_json::from_value(v["effective_context"].clone()).map_err(|e| bad(format!("effective_context: {e}")))?;
        let needle_strength = num(&sc["model"]["needle_strength"], "scenario.model.needle_strength")?;
        // Manifests written before the quantile unit have no `needle_unit`: the strength unit.
        let unit: crate::model::needle::NeedleUnit = match sc["model"].get("needle_unit") {
            Some(u) => serde_json::from_value(u.clone()).map_err(|e| bad(format!("scenario.model.needle_unit: {e}")))?,
            None => Default::default(),
        };
        let needle = crate::model::needle::needle_label(&unit, needle_strength, sc["needle_profile"].as_str());
        Ok(ReportMeta {
            preset: sc["preset"].as_str().ok_or_else(|| bad("missing scenario.preset".into()))?.to_string(),
            needle_strength,
            needle,
            needle_tokens: int(&sc["needle_tokens"], "scenario.needle_tokens")?,
            seed: int(&v["seed"], "seed")?,
            threshold: num(&sc["threshold"], "scenario.threshold")?,
            version: v["version"].as_str().unwrap_or("unknown").to_string(),
            effective,
            scenario: sc.clone(),
        })
    }
}

/// The axes of a sweep, read from its cells: depths, contexts and k
/// ascending, precisions in sweep order (the first is the paired baseline).
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    pub depths: Vec<f64>,
    pub contexts: Vec<u64>,
    /// Needle offsets, ascending (`[None]` without that axis).
    pub offsets: Vec<Option<u64>>,
    pub topks: Vec<u64>,
    pub precisions: Vec<String>,
}

impl Grid {
    pub fn of(cells: &[CellResult]) -> Self {
        let mut g = Grid { depths: vec![], contexts: vec![], offsets: needle_offsets(cells), topks: vec![], precisions: vec![] };
        for c in cells {
            if !g.depths.contains(&c.depth_percent) {
                g.depths.push(c.depth_percent);
            }
            if !g.contexts.contains(&c.context_tokens) {
                g.contexts.push(c.context_tokens);
            }
            if !g.topks.contains(&c.topk) {
                g.topks.push(c.topk);
            }
            if !g.precisions.contains(&c.precision) {
                g.precisions.push(c.precision.clone());
            }
        }
        g.depths.sort_by(f64::total_cmp);
        g.contexts.sort_unstable();
        g.topks.sort_unstable();
        g
    }

    /// The depth the single-depth charts (fidelity, rank/margin) use: the one closest to 50 %.
    pub fn detail_depth(&self) -> f64 {
        self.depths.iter().copied().min_by(|a, b| (a - 50.0).abs().total_cmp(&(b - 50.0).abs())).unwrap_or(50.0)
    }
}

fn find<'a>(cells: &'a [CellResult], depth: f64, context: u64, k: u64, p: &str) -> Option<&'a CellResult> {
    cells.iter().find(|c| c.depth_percent == depth && c.context_tokens == context && c.topk == k && c.precision == p)
}

/// "16K", "≥ 128K" or "< 1K", in the tables' token labels.
pub(crate) fn effective_label(e: &Reach, shortest: u64) -> String {
    output::reach_label(e.context_tokens, e.held_at_longest, shortest)
}

impl From<crate::run::sweep::Reach> for Reach {
    fn from(r: crate::run::sweep::Reach) -> Self {
        Reach { context_tokens: r.effective_context, held_at_longest: r.held_at_longest }
    }
}

impl From<&EffectiveContext> for Reach {
    fn from(e: &EffectiveContext) -> Self {
        Reach { context_tokens: e.effective_context, held_at_longest: e.held_at_longest }
    }
}

/// The recall-vs-context chart of one depth (per-layer selection recall:
/// docs/MODEL.md, "What is measured").
pub fn recall_chart(meta: &ReportMeta, cells: &[CellResult], depth: f64) -> RecallChart {
    let g = Grid::of(cells);
    let trials = cells.first().map_or(0, |c| c.trials);
    let mut series = Vec::new();
    let offsets = needle_offsets(cells);
    for &k in &g.topks {
        for p in &g.precisions {
            for &offset in &offsets {
                let of_series = |c: &&CellResult| c.depth_percent == depth && c.topk == k && c.precision == *p && c.needle_offset == offset;
                let points: Vec<RecallPoint> = cells
                    .iter()
                    .filter(of_series)
                    .map(|c| RecallPoint { context_tokens: c.context_tokens, recall: c.recall, ci_low: c.ci_low, ci_high: c.ci_high })
                    .collect();
                let model: Vec<RecallPoint> = cells
                    .iter()
                    .filter(of_series)
                    .filter_map(|c| {
                        Some(RecallPoint {
                            context_tokens: c.context_tokens,
                            recall: c.model_recall?,
                            ci_low: c.model_ci_low?,
                            ci_high: c.model_ci_high?,
                        })
                    })
                    .collect();
                let predicted: Vec<(u64, f64)> =
                    cells.iter().filter(of_series).filter_map(|c| c.predicted_recall.map(|r| (c.context_tokens, r))).collect();
                let model_band: Vec<(u64, f64, f64)> = cells
                    .iter()
                    .filter(of_series)
                    .filter_map(|c| Some((c.context_tokens, c.model_band_low?, c.model_band_high?)))
                    .collect();
                // One line per needle offset when the sweep has that axis.
                let label = match offset {
                    Some(o) if offsets.len() > 1 => format!("{p} @ offset {o}"),
                    _ => p.clone(),
                };
                if !points.is_empty() {
                    series.push(RecallSeries { topk: k as u32, precision: label, points, predicted, model, model_band });
                }
            }
        }
    }
    let coverage_limits =
        g.topks.iter().filter_map(|&k| cells.iter().find(|c| c.topk == k).map(|c| (k as u32, c.coverage_limit))).collect();
    let whole = series.iter().any(|s| !s.model.is_empty());
    let (title, stack) = match meta.stack_label() {
        Some(stack) if whole => (
            format!(
                "Whole-model recall (solid) and per-layer selection recall (dashed) vs context · {} · {}",
                meta.preset,
                meta.physics_label()
            ),
            format!(" · whole model: {stack}"),
        ),
        _ => (format!("Per-layer selection recall vs context · {} · {}", meta.preset, meta.physics_label()), String::new()),
    };
    RecallChart {
        title,
        subtitle: format!(
            "needle depth {depth} %, {}, {} tokens · {trials} trials per point · Wilson 95 % bands · seed {}{stack}",
            meta.needle, meta.needle_tokens, meta.seed
        ),
        series,
        coverage_limits,
        effective_threshold: Some(meta.threshold),
        effective: meta
            .effective
            .iter()
            .map(|e| EffectiveMark {
                topk: e.topk as u32,
                precision: e.precision.clone(),
                context_tokens: e.effective_context,
                held_at_longest: e.held_at_longest,
                model: e.model.map(Reach::from),
            })
            .collect(),
    }
}

/// Recall vs context, one line per (k, precision), one chart per depth
/// (`recall_vs_context.png` for the first depth, `recall_vs_context_depthD.png`
/// for the others); effective contexts are computed from `cells`.
pub fn render_recall_chart(s: &Scenario, cells: &[CellResult], path: &Path) -> Result<(), Error> {
    let meta = ReportMeta::from_scenario(s, &effective_contexts(s, cells));
    render_recall_charts(&meta, cells, path).map(|_| ())
}

fn recall_chart_path(first: &Path, index: usize, depth: f64) -> std::path::PathBuf {
    if index == 0 {
        return first.to_path_buf();
    }
    let stem = first.file_stem().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = first.extension().map(|x| x.to_string_lossy().into_owned()).unwrap_or_else(|| "png".into());
    first.with_file_name(format!("{stem}_depth{depth}.{ext}"))
}

fn render_recall_charts(meta: &ReportMeta, cells: &[CellResult], path: &Path) -> Result<Vec<std::path::PathBuf>, Error> {
    let g = Grid::of(cells);
    let mut written = Vec::new();
    for (i, &depth) in g.depths.iter().enumerate() {
        let target = recall_chart_path(path, i, depth);
        render_recall_vs_context(&recall_chart(meta, cells, depth), &target, 1600, 1000)?;
        written.push(target);
    }
    Ok(written)
}

/// Pixel size of a heatmap with `panels` panels of `depths` × `contexts` cells.
pub fn heatmap_size(panels: usize, depths: usize, contexts: usize) -> (u32, u32) {
    let cols = if panels <= 3 { panels.max(1) } else { (panels as f64).sqrt().ceil() as usize };
    let rows = panels.div_ceil(cols);
    let w = 260 + cols * (90 + 78 * contexts);
    let h = 140 + rows * (110 + 36 * depths.max(3));
    (w.clamp(1600, 6000) as u32, h.clamp(1000, 6000) as u32)
}

/// Depth × context per-layer selection recall, one panel per (k, precision).
pub fn heatmap(meta: &ReportMeta, cells: &[CellResult]) -> Heatmap {
    let trials = cells.first().map_or(0, |c| c.trials);
    let title =
        format!("Per-layer selection recall by depth and context · {} · {} · {trials} trials per cell", meta.preset, meta.physics_label());
    let layer = |e: &EffectiveContext| Some(Reach::from(e));
    recall_heatmap(meta, cells, title, |c| Some(c.recall), layer)
}

/// Depth × context whole-model recall, one panel per (k, precision); None
/// when no cell has it (no `[stack]`).
pub fn heatmap_model(meta: &ReportMeta, cells: &[CellResult]) -> Option<Heatmap> {
    if cells.iter().all(|c| c.model_recall.is_none()) {
        return None;
    }
    let trials = cells.first().map_or(0, |c| c.trials);
    // As long as the per-layer title: the stack is in the recall charts' subtitle.
    let title = format!("Whole-model recall by depth and context · {} · {} · {trials} trials per cell", meta.preset, meta.physics_label());
    let model = |e: &EffectiveContext| e.model.map(Reach::from);
    Some(recall_heatmap(meta, cells, title, |c| c.model_recall, model))
}

/// Depth × context of the recall `value` reads from a cell, one panel per
/// (k, precision), each titled with the effective context `reach` reads.
fn recall_heatmap(
    meta: &ReportMeta,
    cells: &[CellResult],
    title: String,
    value: impl Fn(&CellResult) -> Option<f64>,
    reach: impl Fn(&EffectiveContext) -> Option<Reach>,
) -> Heatmap {
    let g = Grid::of(cells);
    let mut panels = Vec::new();
    for &k in &g.topks {
        for p in &g.precisions {
            let recall = g.depths.iter().map(|&d| g.contexts.iter().map(|&c| find(cells, d, c, k, p).and_then(&value)).collect()).collect();
            let eff = meta.effective.iter().find(|e| e.topk == k && e.precision == *p).and_then(&reach);
            let title = match eff {
                Some(e) => format!("k={k}, {p} · eff. {}", effective_label(&e, g.contexts[0])),
                None => format!("k={k}, {p}"),
            };
            panels.push(HeatmapPanel {
                title,
                depths_percent: g.depths.clone(),
                contexts: g.contexts.clone(),
                recall,
                coverage_limit: cells.iter().find(|c| c.topk == k).map(|c| c.coverage_limit),
                marked: Vec::new(),
            });
        }
    }
    Heatmap { title, panels, diverging: false, diverging_limit: None, note: None }
}

/// The diverging colour scale's default half-width for differences up to
/// `largest`: the smallest of 0.1, 0.25, 0.5 and 1 that holds it. Never
/// below 0.1, so that a few points of noise stay pale instead of saturated.
pub fn diff_scale(largest: f64) -> f64 {
    [0.1, 0.25, 0.5].into_iter().find(|&l| largest <= l + 1e-12).unwrap_or(1.0)
}

/// Significance level of the difference heatmap's marks (Holm-adjusted).
pub const DIFF_MARK_ALPHA: f64 = 0.05;

/// Recall difference of every other precision against the baseline (the
/// first precision), per k, on the same haystacks, marked where the
/// Holm-adjusted McNemar p over `cells` is below [`DIFF_MARK_ALPHA`], with
/// the default colour span. None with one precision.
pub fn heatmap_diff(meta: &ReportMeta, cells: &[CellResult]) -> Option<Heatmap> {
    let holm = HolmFamily::of(cells);
    heatmap_diff_marked(meta, cells, &holm.precision, holm.size, None)
}

/// [`heatmap_diff`] with the adjusted p given and a colour span.
/// `adjusted[i]` is `cells[i]`'s Holm-adjusted McNemar p over the sweep's
/// `family` paired tests ([`HolmFamily`], precision and k pairs): cells
/// below [`DIFF_MARK_ALPHA`] are marked. `span`: the colour span (None:
/// [`diff_scale`]).
pub fn heatmap_diff_marked(
    meta: &ReportMeta,
    cells: &[CellResult],
    adjusted: &[Option<f64>],
    family: usize,
    span: Option<f64>,
) -> Option<Heatmap> {
    let g = Grid::of(cells);
    let baseline = g.precisions.first()?.clone();
    let at = |d: f64, c: u64, k: u64, p: &str| {
        cells.iter().position(|x| x.depth_percent == d && x.context_tokens == c && x.topk == k && x.precision == p)
    };
    let significant = |i: usize| adjusted.get(i).copied().flatten().is_some_and(|p| p < DIFF_MARK_ALPHA);
    let mut panels = Vec::new();
    let mut tests = 0;
    for &k in &g.topks {
        for p in g.precisions.iter().skip(1) {
            let index: Vec<Vec<Option<usize>>> = g.depths.iter().map(|&d| g.contexts.iter().map(|&c| at(d, c, k, p)).collect()).collect();
            tests += index.iter().flatten().flatten().filter(|&&i| adjusted.get(i).copied().flatten().is_some()).count();
            panels.push(HeatmapPanel {
                title: format!("k={k}: {p} − {baseline}"),
                depths_percent: g.depths.clone(),
                contexts: g.contexts.clone(),
                recall: index.iter().map(|r| r.iter().map(|i| i.and_then(|i| cells[i].recall_diff)).collect()).collect(),
                coverage_limit: cells.iter().find(|c| c.topk == k).map(|c| c.coverage_limit),
                marked: index.iter().map(|r| r.iter().map(|i| i.is_some_and(significant)).collect()).collect(),
            });
        }
    }
    let largest = panels.iter().flat_map(|p| p.recall.iter().flatten().flatten()).fold(0.0f64, |m, v| m.max(v.abs()));
    let limit = span.unwrap_or_else(|| diff_scale(largest));
    let note = format!(
        "ring: McNemar p < {DIFF_MARK_ALPHA} after Holm adjustment over all {family} paired tests of the sweep ({tests} shown) · colour span ±{limit}{}",
        if span.is_some() { " (--diff-span)" } else { "" }
    );
    (!panels.is_empty()).then(|| Heatmap {
        title: format!("Per-layer selection recall difference against {baseline} on the same haystacks · {}", meta.preset),
        panels,
        diverging: true,
        diverging_limit: Some(limit),
        note: Some(note),
    })
}

/// A cell's (mean, 95 % interval low, high) of one fidelity measure.
type MeanAndInterval = (Option<f64>, Option<f64>, Option<f64>);

/// Selection fidelity against the reference at the detail depth. None
/// when no cell has a fidelity reference.
pub fn fidelity_chart(meta: &ReportMeta, cells: &[CellResult]) -> Option<FidelityChart> {
    let g = Grid::of(cells);
    let depth = g.detail_depth();
    let reference = cells.iter().find_map(|c| c.fidelity_reference.clone())?;
    let trials = cells.first().map_or(0, |c| c.trials);
    let mut series = Vec::new();
    for &k in &g.topks {
        for p in &g.precisions {
            let mine: Vec<&CellResult> = g.contexts.iter().filter_map(|&c| find(cells, depth, c, k, p)).collect();
            let pick = |f: fn(&CellResult) -> MeanAndInterval| -> Vec<FidelityPoint> {
                mine.iter()
                    .filter_map(|c| match f(c) {
                        (Some(mean), Some(lo), Some(hi)) => Some(FidelityPoint {
                            context_tokens: c.context_tokens,
                            mean: mean.clamp(0.0, 1.0),
                            ci_low: lo.clamp(0.0, 1.0),
                            ci_high: hi.clamp(0.0, 1.0),
                        }),
                        _ => None,
                    })
                    .collect()
            };
            let selection_recall = pick(|c| (c.selection_recall, c.selection_recall_ci_low, c.selection_recall_ci_high));
            let jaccard = pick(|c| (c.jaccard, c.jaccard_ci_low, c.jaccard_ci_high));
            if !selection_recall.is_empty() || !jaccard.is_empty() {
                series.push(FidelitySeries { topk: k as u32, precision: p.clone(), selection_recall, jaccard });
            }
        }
    }
    (!series.is_empty()).then(|| FidelityChart {
        title: format!("Selection fidelity against the {reference} top-k · {}", meta.preset),
        subtitle: format!("needle depth {depth} % · {trials} trials per point · mean and 95 % interval over trials · seed {}", meta.seed),
        reference,
        series,
        pass_rule: Some(FIDELITY_PASS_RULE),
    })
}

/// The context the rank/margin and comparison charts show: `requested`
/// (which must be one of the sweep's `contexts`, ascending) or the longest.
/// A sweep asks before it simulates, `plot` before it draws.
pub fn detail_context(contexts: &[u64], requested: Option<u64>) -> Result<u64, Error> {
    match requested {
        None => contexts.last().copied().ok_or_else(|| Error::Chart("no cells".into())),
        Some(c) if contexts.contains(&c) => Ok(c),
        Some(c) => Err(ConfigError::new(
            "--detail-context",
            c,
            format!("one of the sweep's contexts: {}", contexts.iter().map(|&c| tokens_label(c)).collect::<Vec<_>>().join(", ")),
        )
        .into()),
    }
}

/// Parses `--detail-context` as typed (K/M suffixes allowed).
pub fn parse_detail_context(text: &str) -> Result<u64, ConfigError> {
    crate::base::units::parse_size(text)
        .filter(|&v| v > 0)
        .ok_or_else(|| ConfigError::new("--detail-context", format!("{text:?}"), "a context length of the sweep, e.g. 32K"))
}

/// Needle rank ÷ k_eff and margin quantiles per (k, precision) at `context`
/// and the detail depth.
pub fn rank_margin_chart(meta: &ReportMeta, cells: &[CellResult], context: u64) -> RankMarginChart {
    let g = Grid::of(cells);
    let depth = g.detail_depth();
    let trials = cells.first().map_or(0, |c| c.trials);
    let mut rows = Vec::new();
    for &k in &g.topks {
        for p in &g.precisions {
            if let Some(c) = find(cells, depth, context, k, p) {
                rows.push(DistributionRow {
                    topk: k as u32,
                    precision: p.clone(),
                    rank_share: c.rank_share_quantiles,
                    margin_sd: c.margin_sd_quantiles,
                    recall: Some(c.recall),
                });
            }
        }
    }
    RankMarginChart {
        title: format!("Why needles miss one layer's top-k: rank and margin at {} tokens · {}", tokens_label(context), meta.preset),
        subtitle: format!(
            "needle depth {depth} %, {} · {trials} trials per row · rank = competitors scoring above the best needle row",
            meta.needle
        ),
        rows,
    }
}

fn estimate(value: f64, low: f64, high: f64) -> Estimate {
    let value = value.clamp(0.0, 1.0);
    Estimate { value, low: low.clamp(0.0, value), high: high.clamp(value, 1.0) }
}

/// Every (k, precision) at `context` and the detail depth: per-layer and
/// whole-model recall, and selection recall against the reference.
pub fn compare_chart(meta: &ReportMeta, cells: &[CellResult], context: u64) -> CompareChart {
    let g = Grid::of(cells);
    let depth = g.detail_depth();
    let trials = cells.first().map_or(0, |c| c.trials);
    let mut rows = Vec::new();
    for &k in &g.topks {
        for p in &g.precisions {
            let Some(c) = find(cells, depth, context, k, p) else { continue };
            let model = match (c.model_recall, c.model_ci_low, c.model_ci_high) {
                (Some(v), Some(lo), Some(hi)) => Some(estimate(v, lo, hi)),
                _ => None,
            };
            let selection = match (c.selection_recall, c.selection_recall_ci_low, c.selection_recall_ci_high) {
                (Some(v), Some(lo), Some(hi)) => Some(estimate(v, lo, hi)),
                _ => None,
            };
            rows.push(CompareRow {
                topk: k as u32,
                precision: p.clone(),
                layer: estimate(c.recall, c.ci_low, c.ci_high),
                model,
                selection,
            });
        }
    }
    let whole = rows.iter().any(|r| r.model.is_some());
    let what = if whole { "Whole-model and per-layer selection recall" } else { "Per-layer selection recall" };
    let stack = meta.stack_label().filter(|_| whole).map_or_else(String::new, |s| format!(" · whole model: {s}"));
    let chosen = if g.contexts.len() > 1 { " (detail context: --detail-context picks another)" } else { "" };
    CompareChart {
        title: format!("{what} by precision and k at {} tokens · {}", tokens_label(context), meta.preset),
        subtitle: format!(
            "{}{chosen} · needle depth {depth} %, {} · {trials} trials per row · seed {}{stack}",
            meta.physics_label(),
            meta.needle,
            meta.seed
        ),
        reference: cells.iter().find_map(|c| c.fidelity_reference.clone()),
        rows,
        threshold: Some(meta.threshold),
    }
}

/// Recall vs depth, one panel per context (the longest
/// [`DEPTH_CHART_MAX_PANELS`]), one line per (k, precision).
pub fn recall_vs_depth_chart(meta: &ReportMeta, cells: &[CellResult]) -> DepthChart {
    let g = Grid::of(cells);
    let trials = cells.first().map_or(0, |c| c.trials);
    let shown = &g.contexts[g.contexts.len().saturating_sub(DEPTH_CHART_MAX_PANELS)..];
    let point = |d: f64, r: Option<f64>, lo: Option<f64>, hi: Option<f64>| {
        let e = estimate(r?, lo?, hi?);
        Some(DepthPoint { depth_percent: d, recall: e.value, ci_low: e.low, ci_high: e.high })
    };
    let panels = shown
        .iter()
        .map(|&ctx| {
            let mut series = Vec::new();
            for &k in &g.topks {
                for p in &g.precisions {
                    let mine: Vec<&CellResult> = g.depths.iter().filter_map(|&d| find(cells, d, ctx, k, p)).collect();
                    let points: Vec<DepthPoint> =
                        mine.iter().filter_map(|c| point(c.depth_percent, Some(c.recall), Some(c.ci_low), Some(c.ci_high))).collect();
                    let model =
                        mine.iter().filter_map(|c| point(c.depth_percent, c.model_recall, c.model_ci_low, c.model_ci_high)).collect();
                    if !points.is_empty() {
                        series.push(DepthSeries { topk: k as u32, precision: p.clone(), points, model });
                    }
                }
            }
            DepthPanel { title: format!("{} tokens", tokens_label(ctx)), series }
        })
        .collect::<Vec<_>>();
    let whole = panels.iter().flat_map(|p| &p.series).any(|s| !s.model.is_empty());
    let which = if shown.len() < g.contexts.len() {
        format!("the longest {} of {} contexts", shown.len(), g.contexts.len())
    } else {
        "every context".to_string()
    };
    let title = if whole {
        "Whole-model recall (solid) and per-layer selection recall (dashed) vs needle depth"
    } else {
        "Per-layer selection recall vs needle depth"
    };
    let stack = meta.stack_label().filter(|_| whole).map_or_else(String::new, |s| format!(" · whole model: {s}"));
    DepthChart {
        title: format!("{title} · {}", meta.preset),
        subtitle: format!(
            "{which} · {} · {}, {} tokens · {trials} trials per point · Wilson 95 % bands · seed {}{stack}",
            meta.physics_label(),
            meta.needle,
            meta.needle_tokens,
            meta.seed
        ),
        panels,
        threshold: Some(meta.threshold),
    }
}

/// The needle offsets of the cells, ascending (`[None]` without that axis).
fn needle_offsets(cells: &[CellResult]) -> Vec<Option<u64>> {
    let mut offsets: Vec<Option<u64>> = cells.iter().map(|c| c.needle_offset).collect();
    offsets.sort_unstable();
    offsets.dedup();
    offsets
}

/// Renders every chart into `dir` in each of `opts.formats`; returns the
/// file names written, in a stable order. The recall charts draw a line per
/// needle offset; the other charts show the first offset's cells.
///
/// Which charts: `recall_vs_context` with several contexts (one per depth
/// with up to two depths, else one at the detail depth beside
/// `recall_vs_depth`); `compare` always (at the single or detail context:
/// with one context it replaces recall_vs_context, whose one x position
/// would overlap every marker); heatmaps with ≥ 2 depths; `fidelity` with a
/// reference; `rank_margin` always.
pub fn render_charts(dir: &Path, meta: &ReportMeta, cells: &[CellResult], opts: &PlotOptions) -> Result<Vec<String>, Error> {
    if cells.is_empty() {
        return Err(Error::Chart("no cells to draw".into()));
    }
    let all_cells = cells;
    let first_offset = needle_offsets(cells)[0];
    // The Holm family is every paired test of the sweep, all offsets included.
    let family = HolmFamily::of(all_cells);
    let holm = family.precision;
    let (first, adjusted): (Vec<CellResult>, Vec<Option<f64>>) =
        cells.iter().zip(holm).filter(|(c, _)| c.needle_offset == first_offset).map(|(c, p)| (c.clone(), p)).unzip();
    let cells = &first[..];
    let g = Grid::of(cells);
    let context = detail_context(&g.contexts, opts.detail_context)?;
    let by_depth = g.depths.len() >= DEPTH_CHART_MIN_DEPTHS;
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut files = Vec::new();
    for &format in &opts.formats {
        let ext = format.extension();
        let recall_first = dir.join(RECALL_CHART_FILE).with_extension(ext);
        if g.contexts.len() > 1 && by_depth {
            render_recall_vs_context(&recall_chart(meta, all_cells, g.detail_depth()), &recall_first, 1600, 1000)?;
            files.push(name(&recall_first));
        } else if g.contexts.len() > 1 {
            files.extend(render_recall_charts(meta, all_cells, &recall_first)?.iter().map(|p| name(p)));
        }
        let cmp = compare_chart(meta, cells, context);
        let path = dir.join(format!("{COMPARE_STEM}.{ext}"));
        render_compare(&cmp, &path, 1600, cmp.height())?;
        files.push(name(&path));
        if by_depth {
            let path = dir.join(format!("{RECALL_VS_DEPTH_STEM}.{ext}"));
            let chart = recall_vs_depth_chart(meta, cells);
            let h = if chart.panels.len() > 3 { 1400 } else { 1000 };
            render_recall_vs_depth(&chart, &path, 1600, h)?;
            files.push(name(&path));
        }
        if g.depths.len() >= 2 {
            let hm = heatmap(meta, cells);
            let (w, h) = heatmap_size(hm.panels.len(), g.depths.len(), g.contexts.len());
            let path = dir.join(format!("{HEATMAP_STEM}.{ext}"));
            render_heatmap(&hm, &path, w, h)?;
            files.push(name(&path));
            if let Some(model) = heatmap_model(meta, cells) {
                let path = dir.join(format!("{HEATMAP_MODEL_STEM}.{ext}"));
                render_heatmap(&model, &path, w, h)?;
                files.push(name(&path));
            }
            if let Some(diff) = heatmap_diff_marked(meta, cells, &adjusted, family.size, opts.diff_span.map(DiffSpan::get)) {
                let (w, h) = heatmap_size(diff.panels.len(), g.depths.len(), g.contexts.len());
                let path = dir.join(format!("{HEATMAP_DIFF_STEM}.{ext}"));
                render_heatmap(&diff, &path, w, h)?;
                files.push(name(&path));
            }
        }
        if let Some(f) = fidelity_chart(meta, cells) {
            let path = dir.join(format!("{FIDELITY_STEM}.{ext}"));
            render_fidelity(&f, &path, 1600, 1000)?;
            files.push(name(&path));
        }
        let rm = rank_margin_chart(meta, cells, context);
        let h = (300 + 70 * rm.rows.len()).clamp(1000, 4000) as u32;
        let path = dir.join(format!("{RANK_MARGIN_STEM}.{ext}"));
        render_rank_margin(&rm, &path, 1600, h)?;
        files.push(name(&path));
    }
    Ok(files)
}

/// Renders the charts and `report.html` (which embeds them); returns every file name written.
pub fn render_all(dir: &Path, meta: &ReportMeta, cells: &[CellResult], opts: &PlotOptions) -> Result<Vec<String>, Error> {
    let mut files = render_charts(dir, meta, cells, opts)?;
    let html = crate::report::html::report_html(dir, meta, cells, &files)?;
    write_atomic(&dir.join(REPORT_FILE), html.as_bytes())?;
    files.push(REPORT_FILE.to_string());
    Ok(files)
}

/// Writes every output file of a sweep into `dir` (which must exist).
/// The manifest goes last: its presence marks a complete output directory.
/// results.jsonl and the manifest are the store's (`crate::run::store`): returns
/// every file the directory holds, for the manifest's list.
pub fn write_sweep(dir: &Path, s: &Scenario, outcome: &SweepOutcome, opts: &PlotOptions) -> Result<Vec<String>, Error> {
    write_atomic(&dir.join(SUMMARY_FILE), output::summary_csv(&outcome.cells).as_bytes())?;
    write_atomic(&dir.join(output::EFFECTIVE_CONTEXT_FILE), output::effective_context_csv(&outcome.effective).as_bytes())?;
    let meta = ReportMeta::from_scenario(s, &outcome.effective);
    let mut files =
        vec![RESULTS_FILE.to_string(), SUMMARY_FILE.to_string(), output::EFFECTIVE_CONTEXT_FILE.to_string(), MANIFEST_FILE.to_string()];
    files.extend(render_all(dir, &meta, &outcome.cells, opts)?);
    Ok(files)
}

/// Reads `results.jsonl` (one cell per line; `location` names the file).
pub fn parse_results(text: &str, location: &str) -> Result<Vec<CellResult>, Error> {
    let mut cells = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let cell: CellResult = serde_json::from_str(line)
            .map_err(|e| Error::Input { location: format!("{location} line {}", i + 1), message: format!("not a result cell: {e}") })?;
        cells.push(cell);
    }
    if cells.is_empty() {
        return Err(Error::Input { location: location.to_string(), message: "no result cells".into() });
    }
    Ok(cells)
}

/// `dsa-recall plot DIR`: re-renders every chart and `report.html` of a
/// finished sweep directory from `results.jsonl` and `manifest.json`.
pub fn plot_dir(dir: &Path, opts: &PlotOptions) -> Result<Vec<String>, Error> {
    if !dir.is_dir() {
        return Err(Error::Input {
            location: dir.display().to_string(),
            message: "no such directory (give a sweep's output directory)".into(),
        });
    }
    if let Some(m) = crate::run::vary::VaryManifest::read(dir)? {
        return vary::plot_vary(dir, &m, opts);
    }
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path)
            .map_err(|e| Error::Input { location: path.display().to_string(), message: format!("cannot read: {e}") })
            .map(|t| (t, path.display().to_string()))
    };
    let (results, results_loc) = read(RESULTS_FILE)?;
    let cells = parse_results(&results, &results_loc)?;
    let (manifest, manifest_loc) = read(MANIFEST_FILE)?;
    let meta = ReportMeta::from_manifest(&manifest, &manifest_loc)?;
    render_all(dir, &meta, &cells, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny default-preset sweep (with its stack): scenario, meta and cells.
    fn tiny_sweep() -> (Scenario, ReportMeta, Vec<CellResult>) {
        let s = crate::config::check(crate::config::resolve(Default::default()).unwrap()).unwrap();
        let s = Scenario { contexts: vec![1024, 8192], depths: vec![0.0, 100.0], topks: vec![64], trials: 6, ..s };
        let out = crate::run::sweep::run_sweep(&s, &|| {}).unwrap();
        (s.clone(), ReportMeta::from_scenario(&s, &out.effective), out.cells)
    }

    fn without_whole_model(cells: &[CellResult]) -> Vec<CellResult> {
        cells.iter().map(|c| CellResult { model_recall: None, model_ci_low: None, model_ci_high: None, ..c.clone() }).collect()
    }

    #[test]
    fn whole_model_recall_reaches_the_recall_chart_and_its_heatmap() {
        let (_, meta, cells) = tiny_sweep();
        assert!(meta.stack_label().is_some_and(|l| l.contains("indexer layers")));
        let chart = recall_chart(&meta, &cells, 0.0);
        assert!(chart.title.starts_with("Whole-model recall (solid)"), "{}", chart.title);
        for sr in &chart.series {
            assert_eq!(sr.model.len(), sr.points.len());
        }
        assert!(chart.effective.iter().all(|e| e.model.is_some()));
        let hm = heatmap_model(&meta, &cells).expect("whole-model heatmap");
        let g = Grid::of(&cells);
        for (panel, (k, p)) in hm.panels.iter().zip(g.topks.iter().flat_map(|&k| g.precisions.iter().map(move |p| (k, p)))) {
            for (di, &d) in g.depths.iter().enumerate() {
                for (ci, &c) in g.contexts.iter().enumerate() {
                    assert_eq!(panel.recall[di][ci], find(&cells, d, c, k, p).unwrap().model_recall);
                }
            }
        }
        // the per-layer heatmap keeps per-layer recall
        assert_eq!(heatmap(&meta, &cells).panels[0].recall[0][0], Some(find(&cells, 0.0, 1024, 64, &g.precisions[0]).unwrap().recall));

        // Without whole-model recall: no heatmap, and the chart is the per-layer one.
        let plain = without_whole_model(&cells);
        assert!(heatmap_model(&meta, &plain).is_none());
        let chart = recall_chart(&meta, &plain, 0.0);
        assert!(chart.title.starts_with("Per-layer selection recall vs context"));
        assert!(chart.series.iter().all(|s| s.model.is_empty()));
    }

    #[test]
    fn difference_heatmap_marks_holm_significant_cells_and_takes_a_span() {
        // Issue 17 (statistics): a ring on exactly the cells whose adjusted p
        // is below 0.05; the span option sets the colour scale.
        let (_, meta, cells) = tiny_sweep();
        let first = cells[0].precision.clone();
        let alt: Vec<CellResult> = cells
            .iter()
            .filter(|c| c.precision == first)
            .map(|c| CellResult { precision: "alt".into(), recall_diff: Some(0.02), mcnemar_p: Some(0.5), ..c.clone() })
            .collect();
        let all: Vec<CellResult> = cells.iter().cloned().chain(alt).collect();
        let target = cells.len() + 1; // the second "alt" cell
        let adjusted: Vec<Option<f64>> =
            (0..all.len()).map(|i| (i >= cells.len()).then_some(if i == target { 0.01 } else { 0.3 })).collect();
        let hm = heatmap_diff_marked(&meta, &all, &adjusted, 7, None).unwrap();
        assert_eq!(hm.diverging_limit, Some(0.1), "±0.02 differences get the 0.1 floor");
        let note = hm.note.clone().unwrap();
        assert!(note.contains("Holm") && note.contains("all 7 paired tests"), "{note}");
        let panel = hm.panels.iter().find(|p| p.title.contains("alt")).unwrap();
        let g = Grid::of(&all);
        let t = &all[target];
        let (di, ci) =
            (g.depths.iter().position(|&d| d == t.depth_percent).unwrap(), g.contexts.iter().position(|&c| c == t.context_tokens).unwrap());
        let marked: Vec<(usize, usize)> =
            (0..g.depths.len()).flat_map(|d| (0..g.contexts.len()).map(move |c| (d, c))).filter(|&(d, c)| panel.marked[d][c]).collect();
        assert_eq!(marked, vec![(di, ci)]);
        let wide = heatmap_diff_marked(&meta, &all, &adjusted, 7, Some(0.5)).unwrap();
        assert_eq!(wide.diverging_limit, Some(0.5));
        assert!(wide.note.unwrap().contains("±0.5 (--diff-span)"));
    }

    #[test]
    fn compare_and_depth_charts_read_the_detail_cells() {
        // Issue 17 (compare, recall vs depth): one row per (k, precision) at
        // the context and detail depth; one depth panel per context.
        let (_, meta, cells) = tiny_sweep();
        let g = Grid::of(&cells);
        let cmp = compare_chart(&meta, &cells, 8192);
        assert_eq!(cmp.rows.len(), g.topks.len() * g.precisions.len());
        let c = find(&cells, g.detail_depth(), 8192, g.topks[0], &g.precisions[0]).unwrap();
        assert_eq!(cmp.rows[0].layer.value, c.recall);
        assert_eq!(cmp.rows[0].model.map(|m| m.value), c.model_recall);
        assert!(cmp.subtitle.contains("--detail-context"));
        let depth = recall_vs_depth_chart(&meta, &cells);
        assert_eq!(depth.panels.len(), 2);
        assert_eq!(depth.panels[1].series[0].points.len(), g.depths.len());
        assert!(depth.subtitle.starts_with("every context"));
    }

    #[test]
    fn difference_scale_holds_the_largest_difference() {
        // Issue 17 (colour span): never below 0.1, so ±0.02 noise stays pale.
        assert_eq!(diff_scale(0.0), 0.1);
        assert_eq!(diff_scale(0.02), 0.1);
        assert_eq!(diff_scale(0.06), 0.1);
        assert_eq!(diff_scale(0.11), 0.25);
        assert_eq!(diff_scale(0.3), 0.5);
        assert_eq!(diff_scale(0.9), 1.0);
    }
}

//! What every chart and page of a sweep is drawn from beside its cells:
//! the sweep's facts ([`ReportMeta`], from its scenario or read back from
//! `manifest.json`), its axes ([`Grid`]) and the drawing options
//! ([`PlotOptions`]).

use crate::base::units::tokens_label;
use crate::config::Scenario;
use crate::error::{ConfigError, Error};
use crate::model::stack::WholeModel;
use crate::report::chart::canvas::ImageFormat;
use crate::run::cell::{CellResult, HolmFamily};
use crate::run::sweep::EffectiveContext;
use std::path::Path;

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
    /// Draw whole-model recall alone on the recall and comparison charts
    /// (`--whole-model-only`; the sweep must have whole-model recall).
    pub whole_model_only: bool,
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
        PlotOptions { formats: vec![ImageFormat::Png], detail_context: None, diff_span: None, whole_model_only: false }
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

    /// The stack's reading of whole-model recall ([`WholeModel::label`]),
    /// None without a stack.
    pub fn stack_label(&self) -> Option<String> {
        Some(self.stack()?.label())
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

pub(crate) fn find<'a>(cells: &'a [CellResult], depth: f64, context: u64, k: u64, p: &str) -> Option<&'a CellResult> {
    cells.iter().find(|c| c.depth_percent == depth && c.context_tokens == context && c.topk == k && c.precision == p)
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

/// Why `--whole-model-only` cannot apply: the sweep has no whole-model recall.
pub fn whole_model_only_refused() -> ConfigError {
    ConfigError::new(
        "--whole-model-only",
        "on",
        "a sweep with whole-model recall (a scenario with a [stack]); this one has per-layer recall only",
    )
}

/// Parses `--detail-context` as typed (K/M suffixes allowed).
pub fn parse_detail_context(text: &str) -> Result<u64, ConfigError> {
    crate::base::units::parse_size(text)
        .filter(|&v| v > 0)
        .ok_or_else(|| ConfigError::new("--detail-context", format!("{text:?}"), "a context length of the sweep, e.g. 32K"))
}

/// The needle offsets of the cells, ascending (`[None]` without that axis).
pub(crate) fn needle_offsets(cells: &[CellResult]) -> Vec<Option<u64>> {
    let mut offsets: Vec<Option<u64>> = cells.iter().map(|c| c.needle_offset).collect();
    offsets.sort_unstable();
    offsets.dedup();
    offsets
}

/// Depths from which a sweep draws recall vs depth (and one recall-vs-context
/// chart, at the detail depth, instead of one per depth).
pub const DEPTH_CHART_MIN_DEPTHS: usize = 3;

/// What every chart of a sweep is drawn from: the report's facts, the
/// cells, and what the charts share (the first needle offset's cells, the
/// Holm family, the axes, the detail context).
pub struct ChartInputs<'a> {
    pub meta: &'a ReportMeta,
    /// Every cell, all needle offsets (the recall charts draw a line per offset).
    pub all_cells: &'a [CellResult],
    /// The first needle offset's cells: what the other charts show.
    pub cells: Vec<CellResult>,
    /// Each of `cells`' Holm-adjusted McNemar p over every paired test of
    /// the sweep (all offsets included), and that family's size.
    pub adjusted: Vec<Option<f64>>,
    pub family_size: usize,
    pub grid: Grid,
    /// The rank/margin and comparison charts' context.
    pub context: u64,
    pub diff_span: Option<DiffSpan>,
    /// Whole-model recall alone on the recall and comparison charts.
    pub whole_model_only: bool,
}

impl<'a> ChartInputs<'a> {
    pub fn new(meta: &'a ReportMeta, cells: &'a [CellResult], opts: &PlotOptions) -> Result<Self, Error> {
        if cells.is_empty() {
            return Err(Error::Chart("no cells to draw".into()));
        }
        let first_offset = needle_offsets(cells)[0];
        let family = HolmFamily::of(cells);
        let (first, adjusted): (Vec<CellResult>, Vec<Option<f64>>) =
            cells.iter().zip(family.precision).filter(|(c, _)| c.needle_offset == first_offset).map(|(c, p)| (c.clone(), p)).unzip();
        let grid = Grid::of(&first);
        let context = detail_context(&grid.contexts, opts.detail_context)?;
        if opts.whole_model_only && cells.iter().all(|c| c.model_recall.is_none()) {
            return Err(whole_model_only_refused().into());
        }
        Ok(ChartInputs {
            meta,
            all_cells: cells,
            cells: first,
            adjusted,
            family_size: family.size,
            grid,
            context,
            diff_span: opts.diff_span,
            whole_model_only: opts.whole_model_only,
        })
    }

    /// Whether recall vs depth is drawn (and one recall-vs-context chart,
    /// at the detail depth, instead of one per depth).
    pub fn by_depth(&self) -> bool {
        self.grid.depths.len() >= DEPTH_CHART_MIN_DEPTHS
    }
}

/// One chart of a sweep.
pub struct SweepChart {
    /// File stem; the extension follows the format. `recall_vs_context`
    /// also draws `recall_vs_context_depthD` for the sweep's further depths.
    pub stem: &'static str,
    /// When it is drawn, in words (the registry's documentation).
    pub when: &'static str,
    /// `report.html`'s caption …
    pub caption: &'static str,
    /// … and the one when the sweep has whole-model recall, if different;
    pub caption_whole: Option<&'static str>,
    /// a sentence added when the sweep has analytic predictions drawn;
    pub predicted: Option<&'static str>,
    /// whether `--whole-model-only` leaves its per-layer series out (its
    /// caption then says so, and mentions no predictions).
    pub whole_model_only: bool,
    /// Builds and draws the chart into a directory in one format (`png`,
    /// `svg`); returns the file names written, none when it does not apply.
    pub render: fn(&ChartInputs<'_>, &Path, &str) -> Result<Vec<String>, Error>,
}

/// What a chart's caption depends on beyond the chart: whether the sweep
/// has whole-model recall and analytic predictions, and whether the charts
/// were drawn with `--whole-model-only`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CaptionFacts {
    pub whole: bool,
    pub predicted: bool,
    pub whole_model_only: bool,
}

impl SweepChart {
    /// The caption under the sweep's facts.
    pub fn caption(&self, f: CaptionFacts) -> String {
        let base = match self.caption_whole {
            Some(c) if f.whole => c,
            _ => self.caption,
        };
        let model_only = f.whole_model_only && self.whole_model_only;
        let mut text = match self.predicted {
            Some(p) if f.predicted && !model_only => format!("{base} {p}"),
            _ => base.to_string(),
        };
        if model_only {
            text.push_str(" Drawn with --whole-model-only: the per-layer series are left out.");
        }
        text
    }

    /// Whether `file` (a name in a sweep directory) is this chart's.
    pub fn owns(&self, file: &str) -> bool {
        let stem = file.rsplit_once('.').map_or(file, |(stem, _)| stem);
        stem == self.stem || (self.stem == RECALL_VS_CONTEXT && stem.strip_prefix(self.stem).is_some_and(|r| r.starts_with("_depth")))
    }
}

pub(crate) const RECALL_VS_CONTEXT: &str = "recall_vs_context";

pub(crate) fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Draws one file `STEM.EXT` in `dir` with `paint`; returns its name.
pub(crate) fn draw(dir: &Path, stem: &str, ext: &str, paint: impl FnOnce(&Path) -> Result<(), Error>) -> Result<Vec<String>, Error> {
    let name = format!("{stem}.{ext}");
    paint(&dir.join(&name))?;
    Ok(vec![name])
}

//! The recall-vs-context chart's data, and the checks it must pass before
//! it is drawn.

use crate::base::units::{Reach, ReachRange};
use crate::report::chart::canvas::{check_log2_contexts, ChartError};

/// One measured point: recall at a context length with its confidence interval.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallPoint {
    pub context_tokens: u64,
    pub recall: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

/// Recall curve for one (top-k, precision) configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallSeries {
    pub topk: u32,
    pub precision: String,
    /// Strictly ascending `context_tokens`.
    pub points: Vec<RecallPoint>,
    /// `(context_tokens, predicted recall)` of the analytic prediction, drawn
    /// as a thin long-dashed line in the series' colour (empty: none).
    pub predicted: Vec<(u64, f64)>,
    /// Whole-model recall with its interval, strictly ascending
    /// `context_tokens` (empty: none). When any series has it, it is the
    /// solid main line and `points` the thin dashed per-layer line.
    pub model: Vec<RecallPoint>,
    /// `(context_tokens, low, high)`: whole-model recall at the two ends of
    /// the least-known assumptions (docs/MODEL.md, "The band"), drawn as a
    /// light region with dotted edges behind the whole-model line (empty: none).
    pub model_band: Vec<(u64, f64, f64)>,
}

/// Everything drawn on a recall-vs-context chart.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallChart {
    pub title: String,
    /// e.g. "needle depth 50 %, 400 trials per point, Wilson 95 % bands"
    pub subtitle: String,
    pub series: Vec<RecallSeries>,
    /// `(topk, k·c+W tokens)`: drawn as labelled vertical dashed lines.
    pub coverage_limits: Vec<(u32, u64)>,
    /// Drawn as a horizontal dotted line, e.g. 0.9.
    pub effective_threshold: Option<f64>,
    /// Effective-context notes, appended to the matching series' legend
    /// entry ("k=512, bf16 · eff. 16K"), outside the plot so no data is covered.
    pub effective: Vec<EffectiveMark>,
    /// Where the effective contexts were read, named in the legend's head
    /// ("depth 50 %": "… · effective context at depth 50 %"); None: not said.
    pub effective_at: Option<String>,
    /// With whole-model recall, draw it alone: no per-layer lines or
    /// predictions (`--whole-model-only`).
    pub whole_model_only: bool,
}

/// The effective context of one (top-k, precision) series.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectiveMark {
    pub topk: u32,
    pub precision: String,
    /// The longest context that held (None: failed at the shortest).
    pub context_tokens: Option<u64>,
    /// Recall held at every tested context: the true value may be longer.
    pub held_at_longest: bool,
    /// The effective context read from whole-model recall (None: not known).
    pub model: Option<Reach>,
    /// Per-layer and whole-model reach from the Wilson intervals' ends
    /// (None: not known), shown in brackets when wider than the point.
    pub layer_range: Option<ReachRange>,
    pub model_range: Option<ReachRange>,
}

impl EffectiveMark {
    /// The effective context of `series` read from its own points (the line
    /// drawn), so the legend says what the line shows: per-layer from
    /// `points`, whole-model from `model` (None unless it has every point's
    /// context), each with the range read from its intervals' ends.
    pub fn of_series(series: &RecallSeries, threshold: f64) -> EffectiveMark {
        let reach = |pts: &[RecallPoint], value: fn(&RecallPoint) -> f64| {
            Reach::of_held(pts.iter().map(|p| (p.context_tokens, value(p) >= threshold)))
        };
        let range = |pts: &[RecallPoint]| ReachRange { low: reach(pts, |p| p.ci_low), high: reach(pts, |p| p.ci_high) };
        let layer = reach(&series.points, |p| p.recall);
        let whole = series.model.len() == series.points.len()
            && series.model.iter().zip(&series.points).all(|(m, p)| m.context_tokens == p.context_tokens);
        EffectiveMark {
            topk: series.topk,
            precision: series.precision.clone(),
            context_tokens: layer.effective_context,
            held_at_longest: layer.held_at_longest,
            model: whole.then(|| reach(&series.model, |p| p.recall)),
            layer_range: Some(range(&series.points)),
            model_range: whole.then(|| range(&series.model)),
        }
    }

    /// "eff. 16K", "eff. ≥ 128K", "eff. < 1K" (`shortest` = the shortest
    /// tested context) or, when the interval ends read differently,
    /// "eff. 16K [8K, 32K]".
    pub fn label(&self, shortest: u64) -> String {
        format!("eff. {}", self.layer().label_with(self.layer_range, shortest))
    }

    /// With whole-model recall: "model ≥ 128K, layer 2K [1K, 4K]" ("model
    /// –" when its model reach is not known).
    pub fn model_label(&self, shortest: u64) -> String {
        let model = self.model.map_or_else(|| "–".to_string(), |m| m.label_with(self.model_range, shortest));
        format!("model {model}, layer {}", self.layer().label_with(self.layer_range, shortest))
    }

    /// With whole-model recall drawn alone: "model ≥ 128K".
    pub fn model_only_label(&self, shortest: u64) -> String {
        format!("model {}", self.model.map_or_else(|| "–".to_string(), |m| m.label_with(self.model_range, shortest)))
    }

    fn layer(&self) -> Reach {
        Reach { effective_context: self.context_tokens, held_at_longest: self.held_at_longest }
    }
}

/// Probability values may exceed 0..1 by this much (rounding in producers).
const EPS: f64 = 1e-9;

pub(super) fn validate(chart: &RecallChart) -> Result<(), ChartError> {
    let bad = |m: String| Err(ChartError::InvalidInput(m));
    if chart.series.is_empty() {
        return bad("recall chart has no series".into());
    }
    for s in &chart.series {
        let name = format!("series k={} {}", s.topk, s.precision);
        if s.points.is_empty() {
            return bad(format!("{name} has no points"));
        }
        validate_points(&name, &s.points)?;
        validate_points(&format!("{name} (whole-model)"), &s.model)?;
        for &(c, r) in &s.predicted {
            if c == 0 {
                return bad(format!("{name}: predicted context length 0 cannot go on a log axis"));
            }
            if !r.is_finite() || !(-EPS..=1.0 + EPS).contains(&r) {
                return bad(format!("{name}: predicted recall {r} outside 0..1 at context {c}"));
            }
        }
    }
    for &(k, c) in &chart.coverage_limits {
        if c == 0 {
            return bad(format!("coverage limit for k={k} is 0"));
        }
    }
    if let Some(t) = chart.effective_threshold {
        if !t.is_finite() || !(0.0..=1.0).contains(&t) {
            return bad(format!("effective threshold {t} is not in 0..1"));
        }
    }
    Ok(())
}

/// Checks one line's points: positive, strictly ascending contexts; finite
/// values in 0..1; an interval holding its recall.
fn validate_points(name: &str, points: &[RecallPoint]) -> Result<(), ChartError> {
    let bad = |m: String| Err(ChartError::InvalidInput(m));
    check_log2_contexts(name, points.iter().map(|p| p.context_tokens))?;
    for p in points {
        for (what, v) in [("recall", p.recall), ("ci_low", p.ci_low), ("ci_high", p.ci_high)] {
            if !v.is_finite() {
                return bad(format!("{name}: non-finite {what} at context {}", p.context_tokens));
            }
            if !(-EPS..=1.0 + EPS).contains(&v) {
                return bad(format!("{name}: {what} {v} outside 0..1 at context {}", p.context_tokens));
            }
        }
        if p.ci_low > p.recall + EPS || p.recall > p.ci_high + EPS {
            return bad(format!(
                "{name}: interval [{}, {}] does not contain recall {} at context {}",
                p.ci_low, p.ci_high, p.recall, p.context_tokens
            ));
        }
    }
    Ok(())
}

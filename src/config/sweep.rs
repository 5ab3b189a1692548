//! The checks of what a sweep runs: `[sweep]`'s cell grid (contexts,
//! needle offsets, depths, k) and Monte Carlo settings, and `[estimator]`.

use super::lists;
use super::params::{self, field_name, ListSpec};
use super::values::{require, whole_in, MAX_CONTEXT};
use crate::error::ConfigError;
use crate::estimate::refusal;
use crate::estimate::settings::{EstimatorMode, EstimatorSettings};
use crate::model::geometry::CompressionGeometry;
use crate::model::haystack::HaystackStructure;
use crate::model::needle::NeedleUnit;
use crate::model::physics::Physics;
use crate::score::agreement::parse_pair;
use crate::score::selection::check_topk;
use crate::score::variant::PrecisionVariant;

/// The cell grid of `[sweep]`, checked: every list sorted, without duplicates.
pub(super) struct Grid {
    pub(super) contexts: Vec<u64>,
    pub(super) depths: Vec<f64>,
    pub(super) needle_offsets: Vec<Option<u64>>,
    pub(super) topks: Vec<u64>,
}

/// `[sweep]`'s lists: contexts (with length_mods), needle offsets, depths and k.
pub(super) fn check_grid(
    p: &params::SweepParams,
    geometry: &CompressionGeometry,
    index_topk: u64,
    needle_tokens: u64,
    dense_topk: bool,
) -> Result<Grid, ConfigError> {
    let ratio = geometry.ratio;
    let contexts_spec = require(p.contexts.as_ref(), "sweep.contexts")?;
    // A list that does not parse (`1G`) learns the longest context too.
    let mut contexts = lists::parse_sizes(&field_name("sweep.contexts"), &contexts_spec.to_text())
        .map_err(|e| ConfigError { allowed: format!("{}; contexts run up to {MAX_CONTEXT} (16M) tokens", e.allowed), ..e })?;
    if let Some(spec) = &p.length_mods {
        let mods = stride_positions(&spec.to_text(), ratio, "sweep.length_mods")?;
        if let Some(mods) = mods {
            contexts = contexts.iter().flat_map(|&l| mods.iter().map(move |&m| l / ratio * ratio + m)).collect();
        }
    }
    let needle_offsets: Vec<Option<u64>> = match &p.needle_offsets {
        Some(spec) => match stride_positions(&spec.to_text(), ratio, "sweep.needle_offsets")? {
            Some(offsets) => offsets.into_iter().map(Some).collect(),
            None => vec![None],
        },
        None => vec![None],
    };
    for &c in &contexts {
        if !(needle_tokens..=MAX_CONTEXT).contains(&c) {
            return Err(ConfigError::new(
                field_name("sweep.contexts"),
                c,
                format!("context lengths from needle.tokens = {needle_tokens} to {MAX_CONTEXT} (16M) tokens"),
            ));
        }
    }
    contexts.sort_unstable();
    contexts.dedup();

    let depth_spec = require(p.depths.as_ref(), "sweep.depths")?;
    let mut depths = lists::parse_numbers(&field_name("sweep.depths"), &depth_spec.to_text())?;
    for &d in &depths {
        if !(0.0..=100.0).contains(&d) {
            return Err(ConfigError::new(field_name("sweep.depths"), d, "depths in percent from 0 (start of the context) to 100 (end)"));
        }
    }
    depths.sort_by(f64::total_cmp);
    depths.dedup();
    // +0.0 and -0.0 are the same depth but seed differently; keep one spelling.
    for d in &mut depths {
        *d += 0.0;
    }

    let mut topks = match &p.topk {
        Some(spec) => lists::parse_sizes(&field_name("sweep.topk"), &spec.to_text())?,
        None => vec![index_topk, index_topk * 2],
    };
    topks.sort_unstable();
    topks.dedup();
    check_topks(p, &topks, geometry, &contexts, contexts_spec, dense_topk)?;
    Ok(Grid { contexts, depths, needle_offsets, topks })
}

/// The k of `[sweep]` against the candidate rows of the longest context
/// (any k from 1 when `dense_topk`: every row selected).
fn check_topks(
    p: &params::SweepParams,
    topks: &[u64],
    geometry: &CompressionGeometry,
    contexts: &[u64],
    contexts_spec: &ListSpec,
    dense_topk: bool,
) -> Result<(), ConfigError> {
    // Dense k (every row selected) only where the caller allows it.
    let most_rows = if dense_topk { u64::MAX } else { most_candidate_rows(geometry, contexts) };
    if p.topk.is_some() {
        for &k in topks {
            check_topk(&field_name("sweep.topk"), k, k, most_rows, &longest_context_rows(contexts))?;
        }
    }
    if let Some(&k) = topks.iter().find(|&&k| k > most_rows) {
        let longest = contexts.last().copied().unwrap_or(0);
        // The default k (index_topk and twice it) was not written: blame the
        // contexts that leave it too few rows.
        return Err(ConfigError::new(
            field_name("sweep.contexts"),
            format!("{:?}", contexts_spec.to_text()),
            format!(
                "a longest context with at least {} candidate rows for the default k (index_topk and twice it: {}), \
                     or sweep.topk (--topk) at most {most_rows}, the candidate rows of {longest} tokens",
                topks.last().copied().unwrap_or(k),
                topks.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    Ok(())
}

/// The candidate rows of the longest of `contexts`: the most any top-k can select.
pub(super) fn most_candidate_rows(geometry: &CompressionGeometry, contexts: &[u64]) -> u64 {
    contexts.iter().map(|&c| geometry.candidate_rows(c)).max().unwrap_or(0)
}

/// What [`most_candidate_rows`] counts, for [`check_topk`]'s message.
pub(super) fn longest_context_rows(contexts: &[u64]) -> String {
    format!("the candidate rows of the longest context ({} tokens)", contexts.last().copied().unwrap_or(0))
}

/// `topk=N` in a variant meets the rule of `--topk` ([`check_topk`]):
/// any k from 1 when `dense_topk`, as the grid's k (a hypothesis such as
/// `topk=1024` on a context of fewer rows selects every row there).
pub(super) fn check_variant_topks(
    precisions: &[PrecisionVariant],
    geometry: &CompressionGeometry,
    contexts: &[u64],
    dense_topk: bool,
) -> Result<(), ConfigError> {
    let most_rows = if dense_topk { u64::MAX } else { most_candidate_rows(geometry, contexts) };
    for v in precisions {
        if let Some(k) = v.selection.topk {
            check_topk(&field_name("sweep.precisions"), format!("{:?}", v.name), k, most_rows, &longest_context_rows(contexts))?;
        }
    }
    Ok(())
}

/// `[sweep]`'s Monte Carlo: (trials per cell, seed, recall threshold).
pub(super) fn check_monte_carlo(p: &params::SweepParams) -> Result<(u64, u64, f64), ConfigError> {
    let trials = whole_in(require(p.trials, "sweep.trials")?, "sweep.trials")?;
    let seed = require(p.seed, "sweep.seed")?;
    let threshold = require(p.threshold, "sweep.threshold")?;
    if !(threshold > 0.0 && threshold <= 1.0) {
        return Err(ConfigError::new(field_name("sweep.threshold"), threshold, "a recall threshold in (0, 1]"));
    }
    Ok((trials, seed, threshold))
}

/// `[estimator]`, an optional section: defaults keep older scenario files and
/// presets valid.
pub(super) fn check_estimator(
    p: &params::EstimatorParams,
    needle: &NeedleUnit,
    physics: &Physics,
    structure: &HaystackStructure,
    ratio: u64,
    precisions: &[PrecisionVariant],
) -> Result<EstimatorSettings, ConfigError> {
    let mut estimator = EstimatorSettings::default();
    if let Some(text) = &p.mode {
        estimator.mode = EstimatorMode::parse(text).ok_or_else(|| {
            ConfigError::new(field_name("estimator.mode"), format!("{text:?}"), format!("one of {}", EstimatorMode::NAMES))
        })?;
    }
    if let Some(rows) = p.tail_rows {
        estimator.tail_rows = whole_in(rows, "estimator.tail_rows")?;
    }
    if let Some(predict) = p.predict {
        estimator.predict = predict;
    }
    if let Some(audit) = p.tie_audit {
        if audit && estimator.mode != EstimatorMode::Full {
            return Err(ConfigError::new(
                field_name("estimator.tie_audit"),
                audit,
                "off unless estimator.mode is full: only it scores every row",
            ));
        }
        estimator.tie_audit = audit;
    }
    if let Some(margin) = p.margin {
        estimator.margin = margin;
    }
    // Each estimator says which scenarios it serves (src/estimate/).
    if let Some(r) = refusal(&estimator, physics, structure, ratio, precisions, needle) {
        return Err(ConfigError::new(field_name(r.field), r.value, r.allowed));
    }
    Ok(estimator)
}

/// `sweep.agreement` (`--agreement A:B,…`): the pairs of the sweep's
/// precisions whose top-k sets are compared, as indices into `precisions`,
/// each once in the order given (docs/MODEL.md, "Top-k agreement").
pub(super) fn check_agreement(
    p: &params::SweepParams,
    precisions: &[PrecisionVariant],
    estimator: &EstimatorSettings,
) -> Result<Vec<(usize, usize)>, ConfigError> {
    let Some(text) = &p.agreement else { return Ok(Vec::new()) };
    let names: Vec<&str> = precisions.iter().map(|v| v.name.as_str()).collect();
    let field = field_name("sweep.agreement");
    let mut pairs = Vec::new();
    for item in text.split(',').map(str::trim) {
        let Some(pair) = parse_pair(item, &names) else {
            let allowed = format!("comma-separated pairs A:B of this sweep's precisions ({}), e.g. bf16:fp8", names.join(", "));
            return Err(ConfigError::new(field, format!("{item:?}"), allowed));
        };
        if !pairs.contains(&pair) {
            pairs.push(pair);
        }
    }
    if estimator.mode != EstimatorMode::Full {
        return Err(ConfigError::new(field, format!("{text:?}"), "none unless estimator.mode is full: only it scores every row"));
    }
    Ok(pairs)
}

/// Positions inside a row stride (0 … c−1): a list of integers, `all`, or
/// `natural` (None: no such axis).
pub(super) fn stride_positions(text: &str, ratio: u64, path: &str) -> Result<Option<Vec<u64>>, ConfigError> {
    let words = lists::parse_names(&field_name(path), text)?;
    if words.len() == 1 && words[0] == "natural" {
        return Ok(None);
    }
    if words.len() == 1 && words[0] == "all" {
        return Ok(Some((0..ratio).collect()));
    }
    let mut out = Vec::with_capacity(words.len());
    for w in words {
        match w.parse::<u64>() {
            Ok(v) if v < ratio => out.push(v),
            _ => {
                return Err(ConfigError::new(
                    field_name(path),
                    format!("{w:?}"),
                    format!("integers from 0 to {} (geometry.compress_ratio − 1), `all` or `natural`", ratio - 1),
                ))
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(Some(out))
}

//! The check of `[stack]`: the layer plan whole-model recall reads, its
//! correlations, quorum, lost-layer harm and candidate stage.

use super::params::{self, field_name};
use super::values::{int_in, number_in, require, whole_in};
use crate::error::ConfigError;
use crate::model::plan::LayerPlan;
use crate::model::stack::{
    CandidateStage, FaultSpreadChoice, HcaReading, LayerKind, LostLayerHarm, WholeModel, DEFAULT_FAULT_TOKEN_CORRELATION,
};

/// Validates `[stack]`: None when neither `layers` nor `compress_ratios`
/// is given, or the one given is `none`.
pub(super) fn check_stack(p: &params::StackParams) -> Result<Option<WholeModel>, ConfigError> {
    let (field, text) = match (&p.layers, &p.compress_ratios) {
        (Some(words), _) => ("stack.layers", words.clone()),
        (None, Some(list)) => ("stack.compress_ratios", list.to_text()),
        (None, None) => ("stack.compress_ratios", "none".into()),
    };
    if text.trim() == "none" {
        let given = [(p.candidate_source_layer, "stack.candidate_source_layer")].into_iter().chain(stage_fields(p));
        if let Some((v, path)) = given.into_iter().find_map(|(v, path)| Some((v?, path))) {
            return Err(ConfigError::new(
                field_name(path),
                v,
                "only with a stack (stack.layers or stack.compress_ratios): a candidate stage acts across its layers",
            ));
        }
        return Ok(None);
    }
    let plan = if field == "stack.layers" {
        LayerPlan::parse(&text).map_err(|e| {
            ConfigError::new(field_name(field), format!("{text:?}"), format!("{e}; e.g. \"w*2, (i4, h128)*20, i4\" or none"))
        })?
    } else {
        let ratio = whole_in(require(p.indexer_ratio, "stack.indexer_ratio")?, "stack.indexer_ratio")?;
        LayerPlan::from_compress_ratios(&text, ratio)
            .map_err(|e| ConfigError::new(field_name(field), format!("{text:?}"), format!("{e}; e.g. \"0*2, (4, 128)*20, 4\" or none")))?
    };
    let correlation = |v: Option<f64>, path: &str| number_in(require(v, path)?, 0.0, 0.9999, path);
    let tokens = |v: Option<u64>, path: &str| whole_in(require(v, path)?, path);
    let hca_text = require(p.hca.as_deref(), "stack.hca")?;
    let spread_text = require(p.fault_layers.as_deref(), "stack.fault_layers")?;
    let whole = WholeModel {
        plan,
        layer_correlation: correlation(p.layer_correlation, "stack.layer_correlation")?,
        token_correlation: correlation(p.token_correlation, "stack.token_correlation")?,
        early_layers: int_in(p.early_layers.unwrap_or(0), 0, 4096, "stack.early_layers")?,
        early_token_correlation: number_in(p.early_token_correlation.unwrap_or(0.0), 0.0, 0.9999, "stack.early_token_correlation")?,
        fault_token_correlation: correlation(
            Some(p.fault_token_correlation.unwrap_or(DEFAULT_FAULT_TOKEN_CORRELATION)),
            "stack.fault_token_correlation",
        )?,
        question_tokens: tokens(p.question_tokens, "stack.question_tokens")?,
        answer_tokens: tokens(p.answer_tokens, "stack.answer_tokens")?,
        quorum: require(p.quorum, "stack.quorum")?,
        hca: HcaReading::parse(hca_text)
            .ok_or_else(|| ConfigError::new(field_name("stack.hca"), format!("{hca_text:?}"), format!("one of {}", HcaReading::NAMES)))?,
        fault_spread: FaultSpreadChoice::parse(spread_text).ok_or_else(|| {
            ConfigError::new(field_name("stack.fault_layers"), format!("{spread_text:?}"), format!("one of {}", FaultSpreadChoice::NAMES))
        })?,
        candidates: None,
        harm: check_harm(p)?,
    };
    let whole = WholeModel { candidates: check_candidates(p, &whole)?, ..whole };
    if whole.indexed_layers() == 0 {
        let why = if field == "stack.layers" {
            "at least one indexer layer (iR)".to_string()
        } else {
            format!("at least one indexer layer: a layer at stack.indexer_ratio = {}", p.indexer_ratio.unwrap_or(0))
        };
        return Err(ConfigError::new(field_name(field), format!("{text:?}"), why));
    }
    if whole.query_tokens() == 0 {
        return Err(ConfigError::new(
            field_name("stack.question_tokens"),
            whole.question_tokens,
            "at least 1 question or answer token (stack.answer_tokens is 0)",
        ));
    }
    int_in(whole.quorum, 1, whole.selecting_layers() as u64, "stack.quorum")?;
    Ok(Some(whole))
}

/// A plan in words simulates its first indexer layer: that layer's ratio
/// must be the simulated geometry's (with the shorthand, the simulated
/// layer stands for every indexer layer whatever its ratio, as before).
pub(super) fn check_simulated_ratio(stack: Option<&WholeModel>, p: &params::StackParams, ratio: u64) -> Result<(), ConfigError> {
    let (Some(w), Some(words)) = (stack, &p.layers) else { return Ok(()) };
    let first = w.layers_of(LayerKind::Indexed)[0];
    match w.simulated_ratio() {
        Some(r) if r != ratio => Err(ConfigError::new(
            field_name("stack.layers"),
            format!("{words:?}"),
            format!("the first indexer layer (layer {first}, ratio {r}) is the simulated one: geometry.compress_ratio is {ratio}; make them equal"),
        )),
        _ => Ok(()),
    }
}

/// `stack.lost_layer_harm` and its band: 0 when left out.
pub(super) fn check_harm(p: &params::StackParams) -> Result<LostLayerHarm, ConfigError> {
    let path = "stack.lost_layer_harm";
    let central = number_in(p.lost_layer_harm.unwrap_or(0.0), 0.0, 1.0, path)?;
    let Some(band) = p.lost_layer_harm_band.as_deref() else { return Ok(LostLayerHarm { central, low: central, high: central }) };
    let bad = || {
        ConfigError::new(
            field_name("stack.lost_layer_harm_band"),
            format!("{band:?}"),
            format!("LOW..HIGH with 0 ≤ LOW ≤ {central} ≤ HIGH ≤ 1 (stack.lost_layer_harm = {central})"),
        )
    };
    let (low, high) = band.split_once("..").ok_or_else(bad)?;
    let (low, high): (f64, f64) = (low.trim().parse().map_err(|_| bad())?, high.trim().parse().map_err(|_| bad())?);
    if !(0.0..=central).contains(&low) || !(central..=1.0).contains(&high) {
        return Err(bad());
    }
    Ok(LostLayerHarm { central, low, high })
}

/// The candidate stage's fields besides its source, with their paths.
pub(super) fn stage_fields(p: &params::StackParams) -> [(Option<u64>, &'static str); 2] {
    [(p.candidate_blocks, "stack.candidate_blocks"), (p.candidate_block_rows, "stack.candidate_block_rows")]
}

/// `[stack]`'s candidate stage (V4.1's two-level indexer): None when
/// `candidate_source_layer` is left out; then the other two must be too.
pub(super) fn check_candidates(p: &params::StackParams, whole: &WholeModel) -> Result<Option<CandidateStage>, ConfigError> {
    let Some(source_layer) = p.candidate_source_layer else {
        if let Some((v, path)) = stage_fields(p).into_iter().find_map(|(v, path)| Some((v?, path))) {
            return Err(ConfigError::new(field_name(path), v, "only with stack.candidate_source_layer (--candidate-source-layer)"));
        }
        return Ok(None);
    };
    if whole.indexer_number(source_layer).is_none() {
        return Err(ConfigError::new(
            field_name("stack.candidate_source_layer"),
            source_layer,
            format!("an indexer layer of the stack: {}", whole.layer_list(LayerKind::Indexed)),
        ));
    }
    let blocks = whole_in(require(p.candidate_blocks, "stack.candidate_blocks")?, "stack.candidate_blocks")?;
    let block_rows = whole_in(require(p.candidate_block_rows, "stack.candidate_block_rows")?, "stack.candidate_block_rows")?;
    Ok(Some(CandidateStage { source_layer, blocks, block_rows }))
}

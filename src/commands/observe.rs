//! `observe`: an engine's capture of the indexer's top-k (sglang's
//! `--enable-return-indexer-topk`) turned into observation rows.

use crate::base::units::parse_size;
use crate::config;
use crate::error::{ConfigError, Error};
use crate::tensors::capture::{self, Query, Spec};
use std::path::PathBuf;

/// `observe` as asked, each value as typed.
#[derive(Clone, Debug, PartialEq)]
pub struct ObserveRequest {
    pub capture: Vec<PathBuf>,
    /// `A..B`: the needle's token positions, half-open.
    pub needle_tokens: String,
    /// The preset giving the compress ratio and the default top-k.
    pub preset: Option<String>,
    pub compress_ratio: Option<u64>,
    pub topk: Option<u64>,
    pub layers: Option<u64>,
    /// Prompt length (K/M suffixes allowed).
    pub context: Option<String>,
    pub depth: Option<f64>,
    /// `last`, `all` or a token position.
    pub query: String,
    pub label: String,
    pub healthy: Option<bool>,
    pub out: PathBuf,
}

/// `observe`: reads the captures, writes the observation CSV to `out`, and
/// returns the text to print (the rows, then where they went).
pub fn observe(request: &ObserveRequest) -> Result<String, Error> {
    let preset = config::preset_params(request.preset.as_deref().unwrap_or(config::DEFAULT_PRESET))?;
    let positive = |flag: &str, v: Option<u64>| -> Result<Option<u64>, ConfigError> {
        match v {
            Some(0) => Err(ConfigError::new(flag, 0, "a positive whole number")),
            v => Ok(v),
        }
    };
    let context = match &request.context {
        None => None,
        Some(t) => Some(
            parse_size(t)
                .filter(|&n| n > 0)
                .ok_or_else(|| ConfigError::new("--context", format!("{t:?}"), "a positive number of tokens (K/M suffixes allowed)"))?,
        ),
    };
    if let Some(d) = request.depth.filter(|d| !(0.0..=100.0).contains(d)) {
        return Err(ConfigError::new("--depth", d, "a number from 0 to 100").into());
    }
    let spec = Spec {
        needle: capture::parse_needle_tokens(&request.needle_tokens)?,
        ratio: positive("--compress-ratio", request.compress_ratio)?.or(preset.geometry.compress_ratio).unwrap_or(1),
        topk: positive("--topk", request.topk)?,
        default_topk: preset.indexer.index_topk,
        layers: positive("--layers", request.layers)?,
        context,
        depth: request.depth,
        query: Query::parse(&request.query)?,
        label: request.label.trim().to_string(),
        healthy: request.healthy,
    };
    refuse_repeated_captures(&request.capture)?;
    let text = capture::observe(&request.capture, &spec, &request.out)?;
    Ok(format!("{text}# → {}\n", request.out.display()))
}

/// One capture file given twice would count each of its prompts twice: the
/// same file (after resolving `.`, `..` and links) is refused.
fn refuse_repeated_captures(paths: &[PathBuf]) -> Result<(), ConfigError> {
    for (i, p) in paths.iter().enumerate() {
        let same = |q: &PathBuf| q == p || matches!((q.canonicalize(), p.canonicalize()), (Ok(a), Ok(b)) if a == b);
        if let Some(earlier) = paths[..i].iter().find(|q| same(q)) {
            return Err(ConfigError::new(
                "--capture",
                format!("{:?}", p.display().to_string()),
                format!(
                    "each capture file once: it is the same file as {:?}, and its prompts would count twice",
                    earlier.display().to_string()
                ),
            ));
        }
    }
    Ok(())
}

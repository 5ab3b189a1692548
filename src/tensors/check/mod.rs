//! `dsa-recall check`: does an engine's indexer agree with the bit-exact
//! reference of its own declared layout? From a capture of (layer, query)
//! pairs (the query as stored, head weights, the key-cache bytes with the
//! block table, the engine's selection and optionally its logits), the
//! reference logits are recomputed from the bytes ([`engine`]), the engine's
//! top-k is compared with them up to ties, and, on a mismatch, the fault
//! transforms that reproduce the engine are named ([`transforms`]).
//! Formats and sources: docs/TENSORS.md, "dsa-recall check".

pub mod capture;
pub mod engine;
pub mod layout;
pub mod options;
pub mod transforms;

use crate::error::Error;
use capture::{Capture, CaptureFiles, PairInput, WeightsForm};
use engine::{compare, logits_error, score_pair, Comparison, ScoreChange, Scored, Tolerance};
use layout::ReadFault;
pub use options::CheckOptions;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use transforms::TransformResult;

impl CheckOptions {
    fn tolerance(&self) -> Result<Tolerance, Error> {
        if self.exact {
            return Ok(Tolerance { bits: None });
        }
        let bits = self.rounding_bits.unwrap_or(24);
        if !(8..=52).contains(&bits) {
            return Err(crate::ConfigError::new("--rounding-bits", bits, "8 to 52 significant bits (24: f32)").into());
        }
        Ok(Tolerance { bits: Some(bits) })
    }
}

/// One pair's result.
#[derive(Clone, Debug, Serialize)]
pub struct PairReport {
    pub pair: usize,
    pub layer: usize,
    pub query: i64,
    pub seq_len: usize,
    #[serde(flatten)]
    pub comparison: Comparison,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logits_max_error: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logits_error_over_bound: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logits_rows_beyond_bound: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logits_first_row_beyond_bound: Option<usize>,
    /// Whether the engine's selection is a top-k of its own logits (ties allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selection_is_top_k_of_engine_logits: Option<bool>,
}

/// The first place the engine and the reference part.
#[derive(Clone, Debug, Serialize)]
pub struct Divergence {
    pub pair: usize,
    pub layer: usize,
    pub query: i64,
    pub row: i64,
    /// `engine-only` (selected, strictly below the cut), `reference-only`
    /// (left out, strictly above), `invisible` (past seq_len), `repeated`,
    /// or `logits` (selections agree; the engine's logit leaves its bound).
    pub side: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_logit: Option<f32>,
    pub cut: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LogitsSummary {
    pub pairs: usize,
    pub max_abs_error: f64,
    pub max_error_over_bound: f64,
    pub rows_beyond_bound: usize,
    pub pairs_selection_not_top_k_of_own_logits: usize,
}

/// Everything `check` found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub capture: String,
    pub layout: String,
    pub layout_status: String,
    pub pipeline: String,
    pub weights: WeightsForm,
    pub topk: usize,
    pub tolerance: Tolerance,
    /// `equal-up-to-ties` or `mismatch`.
    pub verdict: &'static str,
    pub exit_code: u8,
    pub pairs: usize,
    pub pairs_equal: usize,
    pub pairs_differing: usize,
    pub ties_at_cut: usize,
    pub max_ties_at_cut: usize,
    pub within_bound_of_cut: usize,
    pub recall_min: f64,
    pub recall_mean: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_divergence: Option<Divergence>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logits: Option<LogitsSummary>,
    /// How the engine broke exact ties at the cut, counted over pairs.
    pub tie_orders: BTreeMap<String, usize>,
    /// Transforms that reproduce the engine in every differing pair, most specific first.
    pub reproduced_by: Vec<&'static str>,
    pub transforms: Vec<TransformResult>,
    pub not_applicable: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub capture_bytes: u64,
    pub per_pair: Vec<PairReport>,
}

impl CheckReport {
    /// 0: equal up to ties; 1: a mismatch.
    pub fn exit_code(&self) -> u8 {
        self.exit_code
    }
}

/// Reads and checks the capture at `path` (a safetensors file or a folder
/// of `.npy` files).
pub fn check_path(path: &Path, opts: &CheckOptions) -> Result<CheckReport, Error> {
    let tolerance = opts.tolerance()?;
    let files = CaptureFiles::read(path)?;
    let cap = Capture::assemble(&files, opts)?;
    check_capture(&cap, tolerance, !opts.no_transforms)
}

/// Pair `i`: the reference scores and how the engine's selection (and
/// logits, when captured) compare with them.
fn check_pair(
    cap: &Capture,
    i: usize,
    pair: &PairInput,
    tolerance: Tolerance,
    keys: &mut crate::numerics::pipeline::QuantizedRows,
) -> Result<(Scored, PairReport), Error> {
    let scored = score_pair(cap, pair, ReadFault::default(), &ScoreChange::default(), tolerance, true, keys)?;

    let comparison = compare(&scored, &pair.selected, cap.topk);
    let mut report = PairReport {
        pair: i,
        layer: pair.layer,
        query: pair.query,
        seq_len: pair.seq_len,
        comparison,
        logits_max_error: None,
        logits_error_over_bound: None,
        logits_rows_beyond_bound: None,
        logits_first_row_beyond_bound: None,
        selection_is_top_k_of_engine_logits: None,
    };
    if let Some(engine) = &pair.logits {
        let e = logits_error(&scored, engine);
        report.logits_max_error = Some(e.max_abs);
        report.logits_error_over_bound = Some(e.max_over_bound);
        report.logits_rows_beyond_bound = Some(e.beyond);
        report.logits_first_row_beyond_bound = e.first_beyond;
        let own = Scored { logits: engine.clone(), bounds: vec![0.0; engine.len()] };
        report.selection_is_top_k_of_engine_logits = Some(compare(&own, &pair.selected, cap.topk).equal);
    }
    Ok((scored, report))
}

/// The first differing row by (layer, query, pair); when selections agree,
/// the first logit beyond its bound.
fn first_divergence(per_pair: &[PairReport], reference: &[Scored]) -> Option<Divergence> {
    per_pair
        .iter()
        .filter(|p| !p.comparison.equal)
        .min_by_key(|p| (p.layer, p.query, p.pair))
        .and_then(|p| divergence(p, &reference[p.pair]))
        .or_else(|| {
            // Selections agree: the first logit beyond its bound.
            let p = per_pair.iter().filter(|p| p.logits_first_row_beyond_bound.is_some()).min_by_key(|p| (p.layer, p.query, p.pair))?;
            let row = p.logits_first_row_beyond_bound?;
            Some(Divergence {
                pair: p.pair,
                layer: p.layer,
                query: p.query,
                row: row as i64,
                side: "logits",
                reference_logit: reference[p.pair].logits.get(row).copied(),
                cut: p.comparison.cut,
            })
        })
}

/// The engine logits' errors over every pair that captured them (None: no pair did).
fn logits_summary(cap: &Capture, per_pair: &[PairReport]) -> Option<LogitsSummary> {
    if cap.pairs.iter().any(|p| p.logits.is_some()) {
        let with: Vec<&PairReport> = per_pair.iter().filter(|p| p.logits_max_error.is_some()).collect();
        Some(LogitsSummary {
            pairs: with.len(),
            max_abs_error: with.iter().filter_map(|p| p.logits_max_error).fold(0.0, f64::max),
            max_error_over_bound: with.iter().filter_map(|p| p.logits_error_over_bound).fold(0.0, f64::max),
            rows_beyond_bound: with.iter().filter_map(|p| p.logits_rows_beyond_bound).sum(),
            pairs_selection_not_top_k_of_own_logits: with.iter().filter(|p| p.selection_is_top_k_of_engine_logits == Some(false)).count(),
        })
    } else {
        None
    }
}

/// Checks an assembled capture.
pub fn check_capture(cap: &Capture, tolerance: Tolerance, with_transforms: bool) -> Result<CheckReport, Error> {
    use rayon::prelude::*;
    let results: Vec<(Scored, PairReport)> = cap
        .pairs
        .par_iter()
        .enumerate()
        .map_init(crate::numerics::pipeline::QuantizedRows::default, |keys, (i, pair)| check_pair(cap, i, pair, tolerance, keys))
        .collect::<Result<_, Error>>()?;
    let (reference, per_pair): (Vec<Scored>, Vec<PairReport>) = results.into_iter().unzip();
    let differing: Vec<usize> = per_pair.iter().filter(|p| !p.comparison.equal).map(|p| p.pair).collect();
    // Transforms explain selections and logits alike.
    let to_explain: Vec<usize> =
        per_pair.iter().filter(|p| !p.comparison.equal || p.logits_rows_beyond_bound.is_some_and(|n| n > 0)).map(|p| p.pair).collect();
    let logits = logits_summary(cap, &per_pair);
    let mismatch = !differing.is_empty() || logits.as_ref().is_some_and(|l| l.rows_beyond_bound > 0);
    let transforms =
        if with_transforms && !to_explain.is_empty() { transforms::evaluate(cap, &to_explain, &reference, tolerance)? } else { Vec::new() };
    let first_divergence = first_divergence(&per_pair, &reference);
    let mut tie_orders = BTreeMap::new();
    for p in &per_pair {
        if let Some(order) = p.comparison.tie_order {
            *tie_orders.entry(order.to_string()).or_insert(0) += 1;
        }
    }
    let recalls: Vec<f64> = per_pair.iter().map(|p| p.comparison.recall).collect();
    let source = cap.layout.source.as_ref().map(|s| s.status.clone()).unwrap_or_else(|| "user".into());
    Ok(CheckReport {
        capture: cap.path.display().to_string(),
        layout: cap.layout.name.clone(),
        layout_status: source,
        pipeline: cap.variant.name.clone(),
        weights: cap.weights_form,
        topk: cap.topk,
        tolerance,
        verdict: if mismatch { "mismatch" } else { "equal-up-to-ties" },
        exit_code: u8::from(mismatch),
        pairs: per_pair.len(),
        pairs_equal: per_pair.len() - differing.len(),
        pairs_differing: differing.len(),
        ties_at_cut: per_pair.iter().map(|p| p.comparison.ties_at_cut).sum(),
        max_ties_at_cut: per_pair.iter().map(|p| p.comparison.ties_at_cut).max().unwrap_or(0),
        within_bound_of_cut: per_pair.iter().map(|p| p.comparison.within_bound_of_cut).sum(),
        recall_min: recalls.iter().copied().fold(1.0, f64::min),
        recall_mean: recalls.iter().sum::<f64>() / recalls.len().max(1) as f64,
        first_divergence,
        logits,
        tie_orders,
        reproduced_by: transforms.iter().filter(|t| t.reproduces).map(|t| t.name).collect(),
        transforms,
        not_applicable: if to_explain.is_empty() { Vec::new() } else { transforms::not_applicable(cap) },
        note: cap.note.clone(),
        capture_bytes: cap.bytes,
        per_pair,
    })
}

fn divergence(p: &PairReport, scored: &Scored) -> Option<Divergence> {
    let c = &p.comparison;
    let row = c.first_row?;
    let side = c.first_side.unwrap_or("repeated");
    Some(Divergence {
        pair: p.pair,
        layer: p.layer,
        query: p.query,
        row,
        side,
        reference_logit: usize::try_from(row).ok().and_then(|r| scored.logits.get(r).copied()),
        cut: c.cut,
    })
}

fn rows_list(rows: &[usize], count: usize) -> String {
    let mut s = rows.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(",");
    if count > rows.len() {
        let _ = write!(s, ",… ({count})");
    }
    if s.is_empty() {
        s.push('-');
    }
    s
}

/// The report as text for a terminal.
pub fn render_text(r: &CheckReport) -> String {
    let mut s = String::new();
    let tolerance = match r.tolerance.bits {
        None => "exact (bit for bit)".to_string(),
        Some(24) => "any f32 evaluation order (2·γ bound per row)".to_string(),
        Some(b) => format!("any evaluation order with {b}-bit accumulation (2·γ bound per row)"),
    };
    let _ = writeln!(s, "check {}", r.capture);
    let _ = writeln!(
        s,
        "  layout {} ({}), pipeline {}, weights {:?}, k {}, logits compared: {tolerance}",
        r.layout, r.layout_status, r.pipeline, r.weights, r.topk
    );
    let rows: Vec<usize> = r.per_pair.iter().map(|p| p.seq_len).collect();
    let layers: std::collections::BTreeSet<usize> = r.per_pair.iter().map(|p| p.layer).collect();
    let _ = writeln!(
        s,
        "  {} (layer, query) pairs over {} layer(s), {} to {} rows",
        r.pairs,
        layers.len(),
        rows.iter().min().unwrap_or(&0),
        rows.iter().max().unwrap_or(&0)
    );
    if let Some(note) = &r.note {
        let _ = writeln!(s, "  note: {note}");
    }
    if r.exit_code == 0 {
        let _ = writeln!(s, "verdict: EQUAL up to ties (exit 0): {} of {} pairs", r.pairs_equal, r.pairs);
    } else if r.pairs_differing > 0 {
        let _ = writeln!(s, "verdict: MISMATCH (exit 1): {} of {} pairs select differently", r.pairs_differing, r.pairs);
    } else {
        let _ = writeln!(s, "verdict: MISMATCH (exit 1): selections agree, but engine logits leave the bound");
    }
    let _ = writeln!(
        s,
        "  rows tied at the cut (sharing the k-th score exactly): {} (at most {} in a pair); rows within the rounding bound of the cut: {}",
        r.ties_at_cut, r.max_ties_at_cut, r.within_bound_of_cut
    );
    if !r.tie_orders.is_empty() {
        let orders: Vec<String> = r.tie_orders.iter().map(|(k, v)| format!("{k} in {v}")).collect();
        let _ = writeln!(s, "  engine's order among exact ties at the cut: {}", orders.join(", "));
    }
    let _ =
        writeln!(s, "  recall of the reference top-k (ties counted for the engine): min {:.4}, mean {:.4}", r.recall_min, r.recall_mean);
    if let Some(l) = &r.logits {
        let _ = writeln!(
            s,
            "  engine logits ({} pairs): max |error| {:.3e}, {:.3} of the bound; {} rows beyond it; selection not a top-k of its own logits in {} pairs",
            l.pairs, l.max_abs_error, l.max_error_over_bound, l.rows_beyond_bound, l.pairs_selection_not_top_k_of_own_logits
        );
    }
    if let Some(d) = &r.first_divergence {
        let what = match d.side {
            "engine-only" => "selected by the engine, below the reference top-k's cut by more than its rounding bound",
            "reference-only" => "left out by the engine, in the reference top-k",
            "invisible" => "selected by the engine but past seq_len",
            "logits" => "the engine's logit leaves the bound",
            _ => "selected twice",
        };
        // Both as f32 (the logits' own type; the cut is one of them), so
        // they print alike.
        let logit = d.reference_logit.map_or(String::new(), |x| format!(", reference logit {x:e} against the cut {:e}", d.cut as f32));
        let _ = writeln!(s, "  first divergence: layer {}, query {}, row {}: {what}{logit}", d.layer, d.query, d.row);
    }
    if r.exit_code != 0 {
        push_transforms_text(&mut s, r);
        push_differing_pairs(&mut s, r);
    }
    s
}

/// The first 20 differing pairs as a table.
fn push_differing_pairs(s: &mut String, r: &CheckReport) {
    if r.pairs_differing > 0 {
        let _ = writeln!(s, "differing pairs (first 20):");
        let _ = writeln!(
            s,
            "  {:>5} {:>5} {:>7} {:>8} {:>6} {:>6} {:>8}  engine-only / reference-only rows",
            "pair", "layer", "query", "rows", "k", "ties", "recall"
        );
        for p in r.per_pair.iter().filter(|p| !p.comparison.equal).take(20) {
            let c = &p.comparison;
            let _ = writeln!(
                s,
                "  {:>5} {:>5} {:>7} {:>8} {:>6} {:>6} {:>8.4}  {} / {}",
                p.pair,
                p.layer,
                p.query,
                p.seq_len,
                c.k_eff,
                c.ties_at_cut,
                c.recall,
                rows_list(&c.engine_only, c.engine_only_count),
                rows_list(&c.reference_only, c.reference_only_count)
            );
        }
    }
}

/// Which fault transforms reproduce the engine's selection, which do not,
/// and which do not apply.
fn push_transforms_text(s: &mut String, r: &CheckReport) {
    if r.transforms.is_empty() {
        let _ = writeln!(s, "fault transforms: not run");
    } else {
        let found: Vec<&TransformResult> = r.transforms.iter().filter(|t| t.reproduces).collect();
        if found.is_empty() {
            let _ = writeln!(s, "no catalogue transform reproduces the engine's selection");
        } else {
            let _ = writeln!(s, "reproduced by (every differing pair; logits too where captured; most specific first):");
            for t in found {
                let share = 100.0 * t.rows_decided_by_ties as f64 / t.rows_scored.max(1) as f64;
                let note = if t.note.is_empty() { String::new() } else { format!(" ({})", t.note) };
                let _ = writeln!(s, "  {:<24} {} pairs, {share:.2} % of rows at the cut: {}{note}", t.name, t.pairs_reproduced, t.summary);
            }
        }
        let others: Vec<String> =
            r.transforms.iter().filter(|t| !t.reproduces).map(|t| format!("{} {}/{}", t.name, t.pairs_reproduced, t.pairs_tried)).collect();
        if !others.is_empty() {
            let _ = writeln!(s, "  not reproducing (pairs reproduced / tried): {}", others.join(", "));
        }
        let na: Vec<&str> = r.not_applicable.iter().map(|(n, _)| n.as_str()).collect();
        if !na.is_empty() {
            let _ = writeln!(s, "  not applicable to this capture: {} (--json says why)", na.join("; "));
        }
    }
}

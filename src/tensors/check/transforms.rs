//! The fault transforms `check` applies to a capture's bytes to explain a
//! mismatch: each reads or scores the captured cache the way a known field
//! fault would (issue 28's catalogue names), and a transform "reproduces"
//! the engine when the engine's selection equals its top-k up to ties in
//! every differing pair (docs/TENSORS.md, "Which fault reproduces it").

use super::capture::{Capture, QueryInput};
use super::engine::{compare, logits_error, score_pair, ScoreChange, Scored, Tolerance};
use super::layout::{CodeFormat, Placement, ReadFault};
use crate::error::Error;
use crate::numerics::pipeline::{LogitFormat, QuantizedRows, Rotation};
use serde::Serialize;

/// What a transform changes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Change {
    Read(ReadFault),
    Score(ScoreChange),
    /// The query's selection is another query's (same layer) top-k.
    RowShift,
    /// The top-k keeps the rows above the threshold's fp16 bin and any of
    /// the bin (the truncating collect pass of sglang #35257).
    TieTruncate,
}

/// A transform of the catalogue.
#[derive(Clone, Copy, Debug)]
pub struct Transform {
    pub name: &'static str,
    pub group: &'static str,
    pub summary: &'static str,
    pub change: Change,
}

/// Every transform `check` knows, in report order; [`applicable`] says
/// which a capture can carry.
pub fn catalogue(cap: &Capture) -> Vec<Transform> {
    let l = &cap.layout;
    let planar = l.codes.placement == Placement::Planar;
    let read = |f: ReadFault| Change::Read(f);
    let score = |s: ScoreChange| Change::Score(s);
    let mut out = vec![
        Transform {
            name: if planar { "layout-interleaved-read" } else { "layout-planar-read" },
            group: "layout",
            summary: if planar {
                "rows read as records of codes then scales (interleaved) from a block written planar"
            } else {
                "rows read planar (all codes, then all scales) from a block written as interleaved records"
            },
            change: read(ReadFault { swap_placement: true, ..Default::default() }),
        },
        Transform {
            name: "layout-tile16",
            group: "layout",
            summary: if l.codes.tile.is_some() {
                "codes read flat from a block written in 16x16 tiles"
            } else {
                "codes read through 16x16 tiles (preshuffle) from a block written flat"
            },
            change: read(ReadFault { swap_tiling: true, ..Default::default() }),
        },
        Transform {
            name: "block-row0",
            group: "layout",
            summary: "every row of a block reads row 0",
            change: read(ReadFault { row0: true, ..Default::default() }),
        },
        Transform {
            name: "slot-shift",
            group: "layout",
            summary: "row s of a block reads row (s + 1) mod rows_per_block",
            change: read(ReadFault { slot_shift: true, ..Default::default() }),
        },
        Transform {
            name: "pages-swapped",
            group: "layout",
            summary: "logical blocks 2p and 2p + 1 read in each other's place",
            change: score(ScoreChange { pages_swapped: true, ..Default::default() }),
        },
        Transform {
            name: "offset-32bit",
            group: "layout",
            summary: "blocks whose byte offset (block x stride) reaches 2^31 read as zero (32-bit addressing)",
            change: score(ScoreChange { offset_32bit: true, ..Default::default() }),
        },
        Transform {
            name: "scale-offset",
            group: "scale",
            summary: "each row's scale read from the next row's scale word",
            change: read(ReadFault { scale_next: true, ..Default::default() }),
        },
        Transform {
            name: "scale-unwritten-zero",
            group: "scale",
            summary: "every scale reads zero, so every logit is zero",
            change: score(ScoreChange { zero_scales: true, ..Default::default() }),
        },
        Transform {
            name: if l.codes.format == CodeFormat::E4m3fnuz { "e4m3fn-read" } else { "e4m3fnuz-read" },
            group: "scale",
            summary: "codes decoded as the other e4m3 flavour (fn <-> fnuz)",
            change: read(ReadFault { other_fp8: true, ..Default::default() }),
        },
        Transform {
            name: "hadamard-k-only",
            group: "hadamard",
            summary: "the query scored without its Hadamard rotation (keys rotated)",
            change: score(ScoreChange { query_unrotated: true, ..Default::default() }),
        },
        Transform {
            name: "no-relu",
            group: "relu",
            summary: "heads summed without the ReLU",
            change: score(ScoreChange { no_relu: true, ..Default::default() }),
        },
        Transform {
            name: "logits-bf16",
            group: "numerics",
            summary: "logits rounded to bf16",
            change: score(ScoreChange { logits: Some(LogitFormat::Bf16), ..Default::default() }),
        },
        Transform {
            name: "logits-fp16",
            group: "numerics",
            summary: "logits rounded to fp16",
            change: score(ScoreChange { logits: Some(LogitFormat::F16), ..Default::default() }),
        },
        Transform {
            name: "tie-truncate",
            group: "tie",
            summary: "top-k keeps the rows above the k-th score's fp16 bin, then any rows of that bin",
            change: Change::TieTruncate,
        },
        Transform {
            name: "row-shift",
            group: "row-shift",
            summary: "the query's selection is the top-k of another query of its layer (the next or previous)",
            change: Change::RowShift,
        },
    ];
    out.retain(|t| applicable(cap, t).is_ok());
    out
}

/// Every transform with why it cannot apply to this capture, for the report.
pub fn not_applicable(cap: &Capture) -> Vec<(String, String)> {
    let all = [
        "layout-interleaved-read",
        "layout-tile16",
        "block-row0",
        "slot-shift",
        "pages-swapped",
        "offset-32bit",
        "scale-offset",
        "scale-unwritten-zero",
        "e4m3fnuz-read",
        "hadamard-k-only",
        "row-shift",
    ];
    let present: Vec<&str> = catalogue(cap).iter().map(|t| t.name).collect();
    let mut out = Vec::new();
    for name in all {
        if present.contains(&name) || (name == "layout-interleaved-read" && present.contains(&"layout-planar-read")) {
            continue;
        }
        if name == "e4m3fnuz-read" && present.contains(&"e4m3fn-read") {
            continue;
        }
        out.push((name.to_string(), why_not(cap, name)));
    }
    out.push((
        "rope-swap-q/-k, hadamard-q-only, scale-per-page, stale-scale, scale-floor".into(),
        "writer-side faults: the captured bytes already carry them, so the engine's reader agrees with them; they need the keys before quantization and RoPE (not captured)".into(),
    ));
    out
}

fn why_not(cap: &Capture, name: &str) -> String {
    let l = &cap.layout;
    match name {
        "layout-interleaved-read" => "the layout has no scales to interleave".into(),
        "layout-tile16" => "needs one-byte codes, rows_per_block and code bytes per row divisible by 16".into(),
        "block-row0" | "slot-shift" | "scale-offset" => format!("blocks of {} row(s)", l.rows_per_block),
        "pages-swapped" => "no pair reads two or more blocks".into(),
        "offset-32bit" => {
            format!("no block a pair reads lies at 2^31 bytes or beyond (stride {} bytes; set block_stride_bytes)", cap.block_stride_bytes)
        }
        "scale-unwritten-zero" => "the layout stores no scales".into(),
        "e4m3fnuz-read" => format!("codes are {}", l.codes.format.name()),
        "hadamard-k-only" => "needs a float query and a pipeline that rotates it".into(),
        "row-shift" => "needs two or more queries of one layer".into(),
        _ => String::new(),
    }
}

fn applicable(cap: &Capture, t: &Transform) -> Result<(), ()> {
    let l = &cap.layout;
    let ok = |b: bool| if b { Ok(()) } else { Err(()) };
    match t.change {
        Change::Read(f) if f.swap_placement => ok(l.scales.is_some() && l.tail.is_none()),
        Change::Read(f) if f.swap_tiling => ok(l.codes.format.bits() == 8
            && l.codes.placement == Placement::Planar
            && l.rows_per_block.is_multiple_of(16)
            && l.code_bytes_per_row().is_multiple_of(16)),
        Change::Read(f) if f.row0 || f.slot_shift => ok(l.rows_per_block > 1),
        Change::Read(f) if f.scale_next => ok(l.scales.is_some() && l.rows_per_block > 1),
        Change::Read(f) if f.other_fp8 => ok(matches!(l.codes.format, CodeFormat::E4m3fn | CodeFormat::E4m3fnuz)),
        Change::Read(_) => Ok(()),
        Change::Score(s) if s.pages_swapped => ok(cap.pairs.iter().any(|p| p.seq_len > l.rows_per_block)),
        Change::Score(s) if s.offset_32bit => ok(cap.pairs.iter().any(|p| {
            p.blocks[..p.seq_len.div_ceil(l.rows_per_block)].iter().any(|&b| (b as u64).saturating_mul(cap.block_stride_bytes) >= 1 << 31)
        })),
        Change::Score(s) if s.zero_scales => ok(l.scales.is_some()),
        Change::Score(s) if s.query_unrotated => {
            ok(cap.variant.query.rotation == Rotation::Hadamard && cap.pairs.iter().all(|p| matches!(p.q, QueryInput::Float(_))))
        }
        Change::Score(s) if s.logits.is_some() => ok(s.logits != Some(cap.variant.scoring.logits)),
        Change::Score(_) => Ok(()),
        Change::TieTruncate => ok(cap.variant.scoring.logits != LogitFormat::F16),
        Change::RowShift => {
            let mut layers: Vec<usize> = cap.pairs.iter().map(|p| p.layer).collect();
            layers.sort_unstable();
            ok(layers.windows(2).any(|w| w[0] == w[1]))
        }
    }
}

/// How one transform fared.
#[derive(Clone, Debug, Serialize)]
pub struct TransformResult {
    pub name: &'static str,
    pub group: &'static str,
    pub summary: &'static str,
    /// Reproduces the engine's selection in every differing pair.
    pub reproduces: bool,
    /// Differing pairs tried (a transform stops at its first failure) and reproduced.
    pub pairs_tried: usize,
    pub pairs_reproduced: usize,
    /// Rows, summed over the pairs reproduced, whose transformed logit lies
    /// within its bound of the transformed cut: how much tie order decided.
    pub rows_decided_by_ties: usize,
    /// Rows those pairs score (to read the line above as a share).
    pub rows_scored: usize,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Tries each transform on the differing pairs (indices into `cap.pairs`),
/// stopping a transform at the first pair it does not reproduce.
/// `reference` holds every pair's reference logits (row-shift reads its
/// neighbours').
pub fn evaluate(cap: &Capture, differing: &[usize], reference: &[Scored], tolerance: Tolerance) -> Result<Vec<TransformResult>, Error> {
    use rayon::prelude::*;
    let transforms = catalogue(cap);
    let mut results: Vec<TransformResult> =
        transforms.par_iter().map(|t| evaluate_one(cap, t, differing, reference, tolerance)).collect::<Result<_, Error>>()?;
    // Most specific first: reproducing, then fewest rows left to tie order.
    results.sort_by(|a, b| {
        b.reproduces.cmp(&a.reproduces).then_with(|| {
            let share = |r: &TransformResult| r.rows_decided_by_ties as f64 / r.rows_scored.max(1) as f64;
            share(a).total_cmp(&share(b))
        })
    });
    Ok(results)
}

fn evaluate_one(
    cap: &Capture,
    t: &Transform,
    differing: &[usize],
    reference: &[Scored],
    tolerance: Tolerance,
) -> Result<TransformResult, Error> {
    let mut keys = QuantizedRows::default();
    let mut r = TransformResult {
        name: t.name,
        group: t.group,
        summary: t.summary,
        reproduces: false,
        pairs_tried: 0,
        pairs_reproduced: 0,
        rows_decided_by_ties: 0,
        rows_scored: 0,
        note: String::new(),
    };
    for &p in differing {
        let pair = &cap.pairs[p];
        r.pairs_tried += 1;
        // (what the selection is compared with, what the engine's logits are compared with)
        let candidates: Vec<(Scored, Option<&Scored>)> = match t.change {
            Change::Read(f) => vec![(score_pair(cap, pair, f, &ScoreChange::default(), tolerance, false, &mut keys)?, None)],
            Change::Score(s) => vec![(score_pair(cap, pair, ReadFault::default(), &s, tolerance, false, &mut keys)?, None)],
            // The fault is in the top-k: the engine's logits are the reference's.
            Change::TieTruncate => vec![(fp16_bins(&reference[p]), Some(&reference[p]))],
            Change::RowShift => neighbours(cap, p).into_iter().map(|q| (reference[q].clone(), None)).collect(),
        };
        let found = candidates.iter().find_map(|(scored, logits_ref)| {
            let c = compare(scored, &pair.selected, cap.topk);
            let logits_ok = pair.logits.as_ref().is_none_or(|engine| logits_error(logits_ref.unwrap_or(scored), engine).beyond == 0);
            (c.equal && logits_ok).then_some(c)
        });
        match found {
            Some(c) => {
                r.pairs_reproduced += 1;
                r.rows_decided_by_ties += c.within_bound_of_cut.max(c.ties_at_cut);
                r.rows_scored += pair.seq_len;
            }
            None => break,
        }
    }
    r.reproduces = !differing.is_empty() && r.pairs_reproduced == differing.len();
    if r.reproduces && t.name == "logits-fp16" {
        let exact_fp16 =
            cap.pairs.iter().filter_map(|p| p.logits.as_ref()).all(|l| l.iter().all(|&x| x.is_nan() || LogitFormat::F16.round(x) == x));
        if !exact_fp16 {
            r.reproduces = false;
            r.note = "the engine's logits are not fp16 values".into();
        }
    }
    if r.reproduces && r.rows_decided_by_ties * 2 > r.rows_scored {
        r.note = "most rows tie under this transform: it is consistent with almost any selection".into();
    }
    Ok(r)
}

/// The reference with every logit replaced by its fp16 bin and the bound
/// widened to the bin.
fn fp16_bins(s: &Scored) -> Scored {
    let logits: Vec<f32> = s.logits.iter().map(|&x| LogitFormat::F16.round(x)).collect();
    let bounds = s.bounds.iter().zip(&logits).map(|(&b, &x)| b + (f64::from(x.abs()) * 2f64.powi(-11)).max(2f64.powi(-25))).collect();
    Scored { logits, bounds }
}

/// Pairs of the same layer adjacent to `p` in query order.
fn neighbours(cap: &Capture, p: usize) -> Vec<usize> {
    let me = &cap.pairs[p];
    let mut same: Vec<(i64, usize)> =
        cap.pairs.iter().enumerate().filter(|(_, q)| q.layer == me.layer).map(|(i, q)| (q.query, i)).collect();
    same.sort_unstable();
    let at = same.iter().position(|&(_, i)| i == p).unwrap_or(0);
    let mut out = Vec::new();
    if at > 0 {
        out.push(same[at - 1].1);
    }
    if at + 1 < same.len() {
        out.push(same[at + 1].1);
    }
    out
}

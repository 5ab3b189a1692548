//! What a trial simulates and what it finds: the spec, its cells and
//! needle spots, and the outcomes.

use crate::model::geometry::{CompressionGeometry, NeedlePlacement};
use crate::model::haystack::GenerativeModel;
use crate::model::physics::{Physics, RopeChoice};
use crate::model::row_source::Item;
use crate::model::stack::WholeModel;
use crate::numerics::pipeline::{LogitFormat, ScoreNumerics};
use crate::score::agreement::Agreement;
use crate::score::needle::NeedleSolve;
use crate::score::selection::{NeedleRank, TieCut, TieRule};
use crate::score::variant::PrecisionVariant;
use serde::{Deserialize, Serialize};

/// What a trial simulates.
#[derive(Clone, Debug)]
pub struct TrialSpec<'a> {
    pub model: &'a GenerativeModel,
    pub physics: &'a Physics,
    pub geometry: CompressionGeometry,
    /// Context lengths in tokens, ascending.
    pub contexts: &'a [u64],
    /// Needle depths, each in percent of the context. A sweep gives one
    /// per haystack group; diagnose's next experiment gives several, which
    /// then share the trials (seeded by the first: [`Self::seed_depth`]).
    pub depths: &'a [f64],
    /// Needle offsets inside a row stride (None: wherever the depth puts it).
    /// With the depths they make the needle spots ([`Self::spot`]).
    pub needle_offsets: &'a [Option<u64>],
    pub needle_tokens: u64,
    /// Top-k values, ascending.
    pub topks: &'a [u64],
    pub variants: &'a [PrecisionVariant],
    pub tie_rule: TieRule,
    /// Variant whose top-k set the others are compared with (selection
    /// fidelity); the exact `fp32` variant when the sweep has it.
    pub fidelity_reference: Option<usize>,
    /// The model's layer stack, when whole-model recall is read.
    pub stack: Option<&'a WholeModel>,
    /// Prefill chunk in tokens (0: the prompt in one chunk); only
    /// variants with a chunk fault (`chunk-local`) read it.
    pub prefill_chunk: u64,
    /// Audit every cell's cut for ties ([`NeedleOutcome::ties`]).
    pub tie_audit: bool,
    /// Under the quantile needle, the recall threshold of the needle
    /// margin: every cell's critical needle rank is searched
    /// ([`NeedleOutcome::keep_below`]) and the whole-model margin read at
    /// it. None: no margin.
    pub margin_threshold: Option<f64>,
    /// Measure each cell's rank margin ([`NeedleOutcome::margin`]); off,
    /// the margins are None and every other outcome the same.
    pub rank_margins: bool,
    /// Pairs (A, B) of variants whose top-k sets are compared, B's with A's
    /// ([`TrialOutcome::agreement`]; docs/MODEL.md, "Top-k agreement").
    pub agreement: &'a [(usize, usize)],
}

/// The needle's fate in one cell of one trial.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NeedleOutcome {
    pub survived: bool,
    /// Survived because the whole needle lies in the raw window.
    pub via_window: bool,
    /// Rank of the best needle row; None when the needle has no candidate row.
    pub rank: Option<NeedleRank>,
    /// Best needle score minus the k_eff-th competitor score; None when
    /// there are fewer competitors than k_eff (the needle cannot be displaced).
    pub margin: Option<f32>,
    /// `margin` in standard deviations of the competitors' scores.
    pub margin_sd: Option<f64>,
    /// Selection fidelity against the reference variant's top-k_eff set over
    /// the same rows: the share of its rows this variant also selects …
    pub selection_recall: Option<f64>,
    /// … and the Jaccard overlap |A ∩ B| / |A ∪ B| of the two sets.
    pub jaccard: Option<f64>,
    /// The tie audit of this cell's cut, when the sweep asks for it
    /// (`--tie-audit on`; left out of checkpoints otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ties: Option<TieCut>,
    /// Quantile needle: the variant keeps the needle exactly when fewer
    /// than this many haystack rows outscore it in the exact reference
    /// (its critical rank; `u64::MAX` in the raw window, 0 when no rank
    /// keeps it). None under the strength unit, whose checkpoints keep
    /// their bytes (docs/MODEL.md, "The needle margin").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_below: Option<u64>,
}

impl NeedleOutcome {
    /// Not kept, nothing measured: the base every outcome is built on.
    pub const LOST: NeedleOutcome = NeedleOutcome {
        survived: false,
        via_window: false,
        rank: None,
        margin: None,
        margin_sd: None,
        selection_recall: None,
        jaccard: None,
        ties: None,
        keep_below: None,
    };
}

/// Outcomes of one trial, indexed by [`TrialSpec::cell_index`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialOutcome {
    pub cells: Vec<NeedleOutcome>,
    /// The trial's seed (whole-model recall draws its chains from it).
    pub seed: u64,
    /// The quantile needle's placement per (needle multiple, context, needle
    /// offset) ([`TrialSpec::needle_index`]); empty under the strength unit, and then
    /// left out of checkpoints, which keep their bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needle: Vec<NeedleSolve>,
    /// Per (context, needle spot, k, pair of [`TrialSpec::agreement`])
    /// ([`TrialSpec::pair_index`]): the pair's top-k agreement; None where
    /// a variant selects from other rows (hidden or misaddressed ones).
    /// Empty without pairs, and then left out of checkpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agreement: Vec<Option<Agreement>>,
}

/// One (context, needle spot) pair of a trial: where the needle and the
/// distractors sit, and the scores of the rows that hold them.
pub(super) struct Case {
    pub(super) ci: usize,
    pub(super) si: usize,
    pub(super) placement: NeedlePlacement,
    pub(super) candidates: usize,
    pub(super) items: Vec<Item>,
    /// Rows holding needle or distractor tokens, ascending.
    pub(super) special: Vec<u64>,
}

/// Per case, per variant: scores that replace the shared ones, (row, score).
pub(super) type CasePatches = Vec<Vec<Vec<(u32, f32)>>>;

/// The position of `multiple` among `multiples` (0 when absent: the
/// exact reference a trial adds has multiple 1).
pub(super) fn slot_of(multiples: &[f64], multiple: f64) -> usize {
    multiples.iter().position(|&m| m == multiple).unwrap_or(0)
}

impl TrialSpec<'_> {
    /// The variants' needle multiples (`needle=M`), each once, in order of
    /// first appearance: `[1.0]` when none has one.
    pub fn needle_multiples(&self) -> Vec<f64> {
        let mut out: Vec<f64> = Vec::new();
        for v in self.variants {
            if !out.contains(&v.needle_multiple) {
                out.push(v.needle_multiple);
            }
        }
        if out.is_empty() {
            out.push(1.0);
        }
        out
    }

    /// Index in [`TrialOutcome::needle`] of the placement that needle slot
    /// `slot` ([`Self::needle_slots`]) reads in (context, needle spot):
    /// slot-major, then context-major cases.
    pub fn needle_index(&self, slot: usize, context: usize, spot: usize) -> usize {
        (slot * self.contexts.len() + context) * self.spot_count() + spot
    }

    /// Per variant, the position of its needle multiple in
    /// [`Self::needle_multiples`] (computed once per spec by its readers).
    pub fn needle_slots(&self) -> Vec<usize> {
        let multiples = self.needle_multiples();
        self.variants.iter().map(|v| slot_of(&multiples, v.needle_multiple)).collect()
    }

    /// Index of (context, needle spot, topk, variant) in [`TrialOutcome::cells`].
    pub fn cell_index(&self, context: usize, spot: usize, topk: usize, variant: usize) -> usize {
        ((context * self.spot_count() + spot) * self.topks.len() + topk) * self.variants.len() + variant
    }

    /// Needle spots: (depth, offset) pairs, depth-major.
    pub fn spot_count(&self) -> usize {
        self.depths.len() * self.needle_offsets.len()
    }

    /// Spot `spot`'s (depth in percent, needle offset).
    pub fn spot(&self, spot: usize) -> (f64, Option<u64>) {
        let n = self.needle_offsets.len().max(1);
        (self.depths[spot / n], self.needle_offsets[spot % n])
    }

    /// The depth whose value seeds the trials: the first (the group's own
    /// in a sweep).
    pub fn seed_depth(&self) -> f64 {
        self.depths.first().copied().unwrap_or(0.0)
    }

    /// Per variant, the first earlier variant that scores every row the
    /// same way (same query and key pipelines, scoring, cache and RoPE
    /// layout; only the selection differs, e.g. `fp8+ties-lowest` beside
    /// `fp8`): its scores are copied instead of computed again.
    pub fn score_twins(&self) -> Vec<Option<usize>> {
        score_twins_of(self.variants)
    }

    /// Index of (context, needle spot, topk, pair) in [`TrialOutcome::agreement`].
    pub fn pair_index(&self, context: usize, spot: usize, topk: usize, pair: usize) -> usize {
        ((context * self.spot_count() + spot) * self.topks.len() + topk) * self.agreement.len() + pair
    }

    pub fn cell_count(&self) -> usize {
        self.contexts.len() * self.spot_count() * self.topks.len() * self.variants.len()
    }

    /// Whether every row is the null model's (no physics at this ratio) and
    /// the needle sits where its one depth puts it: what the closed-form
    /// estimators assume.
    pub fn is_null_model(&self) -> bool {
        self.physics.is_null(self.geometry.ratio)
            && self.model.structure.is_null()
            && self.needle_offsets == [None]
            && self.depths.len() == 1
    }

    /// Which query scores context `ci`: with RoPE the query sits at position
    /// L−1 of each context, so each context has its own; otherwise one
    /// query serves all.
    pub(super) fn query_group(&self, ci: usize) -> usize {
        if self.physics.rope != RopeChoice::Off {
            ci
        } else {
            0
        }
    }

    /// Where the needle sits in context `context` at spot `spot`.
    pub fn placement(&self, context: u64, spot: usize) -> NeedlePlacement {
        let (depth, offset) = self.spot(spot);
        self.geometry.place_needle_at(context, self.needle_tokens, depth, offset)
    }

    /// Index of the variant `run` scores as the exact reference for the
    /// quantile needle: the spec's first exact variant, else one past the
    /// spec's variants (an `fp32` added for the purpose).
    pub(super) fn reference_variant(&self) -> usize {
        self.variants.iter().position(PrecisionVariant::is_exact).unwrap_or(self.variants.len())
    }
}

/// Whether two variants score the same query against the same stored
/// keys at the same positions (their scoring numerics aside).
fn same_rows(a: &PrecisionVariant, b: &PrecisionVariant) -> bool {
    (&a.query, &a.key, &a.cache, &a.position) == (&b.query, &b.key, &b.cache, &b.position)
}

/// Per variant (neither a score twin nor a logit twin), an earlier variant
/// scored in full that is the same but for a fault-free cache, when its
/// own cache fault only moves whole rows
/// ([`crate::numerics::key_cache::KeyCacheFaults::moves_rows_only`]): a
/// row's score depends on that row's codes and scale alone, so each row
/// scores as the written row read in its place (`pages-swapped`,
/// `slot-shift`, `block-row0` beside their base).
pub(super) fn row_map_twins_of(v: &[PrecisionVariant], twins: &[Option<usize>], logit_twins: &[Option<usize>]) -> Vec<Option<usize>> {
    let full = |j: usize| twins[j].is_none() && logit_twins[j].is_none();
    (0..v.len())
        .map(|i| {
            if !full(i) || !v[i].cache.moves_rows_only() {
                return None;
            }
            let clean = PrecisionVariant { cache: Default::default(), ..v[i].clone() };
            (0..i).find(|&j| full(j) && v[j].scoring == v[i].scoring && same_rows(&clean, &v[j]))
        })
        .collect()
}

/// [`TrialSpec::score_twins`] of any list of variants.
pub(super) fn score_twins_of(v: &[PrecisionVariant]) -> Vec<Option<usize>> {
    (0..v.len()).map(|i| (0..i).find(|&j| v[i].scoring == v[j].scoring && same_rows(&v[i], &v[j]))).collect()
}

/// Per variant (not itself a score twin, `twins`), an earlier variant
/// scored in full whose scores it reads rounded to its own logits format:
/// the same query, keys, cache and positions, ReLU on, scoring that
/// differs only in the logits format and the earlier one's f32 (no
/// rounding). Every kernel ends in `logits.round(s)` of the same f32 `s`
/// for both, so the rounded copy is the same bits (`logits-bf16`,
/// `logits-fp16` beside their base).
pub(super) fn logit_twins_of(v: &[PrecisionVariant], twins: &[Option<usize>]) -> Vec<Option<usize>> {
    (0..v.len())
        .map(|i| {
            let own = v[i].scoring;
            if twins[i].is_some() || own.logits == LogitFormat::F32 || !own.relu {
                return None;
            }
            let base = ScoreNumerics { logits: LogitFormat::F32, ..own };
            (0..i).find(|&j| twins[j].is_none() && v[j].scoring == base && same_rows(&v[i], &v[j]))
        })
        .collect()
}

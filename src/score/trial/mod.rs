//! One trial: one decode query at the end of a context, one haystack, one
//! needle, scored under every precision variant and ranked for every k.
//!
//! One trial serves every context length of a sweep: haystack row `i` is a
//! pure function of (trial seed, i), so the first N rows of the longest
//! haystack *are* the haystack of a shorter context. Every cell therefore
//! sees an exact draw from the model, and its result does not depend on
//! which other contexts are in the sweep (see docs/MODEL.md, "Sharing").

use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::model::geometry::{CompressionGeometry, NeedlePlacement};
use crate::model::haystack::{GenerativeModel, TrialHaystack};
use crate::model::needle::{exceedance_of, rank_quantile, NeedleDraw};
use crate::model::physics::{Physics, RopeChoice};
use crate::model::row_source::{scaled_key, Item, TrialRows};
use crate::model::stack::WholeModel;
use crate::numerics::pipeline::{QuantPipeline, QuantizedRows};
use crate::score::indexer::IndexerQuery;
use crate::score::needle::{solve_scale, target_interval, NeedleSolve};
use crate::score::selection::{
    best_needle, kth_largest_many_with, selection_overlap_with, tie_key, tied_ahead_of_best, NeedleRank, TieAudit, TieCut, TieRule,
};
use crate::score::variant::{ChunkVisibility, PrecisionVariant};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

mod chunk;
mod judge;
mod place;
mod query;

use chunk::{ChunkSpecials, ChunkWork, CHUNK_ROWS};
use judge::score_twins_of;
pub use place::with_full_reference;
use place::{Exact, Placer, Screen, FULL_REFERENCE};
pub use query::{context_queries, shifted_context_queries, shifted_query};
use query::{QueryGroups, ScoredSet};

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
}

impl NeedleOutcome {
    const LOST: NeedleOutcome = NeedleOutcome {
        survived: false,
        via_window: false,
        rank: None,
        margin: None,
        margin_sd: None,
        selection_recall: None,
        jaccard: None,
        ties: None,
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
}

/// One (context, needle spot) pair of a trial: where the needle and the
/// distractors sit, and the scores of the rows that hold them.
struct Case {
    ci: usize,
    si: usize,
    placement: NeedlePlacement,
    candidates: usize,
    items: Vec<Item>,
    /// Rows holding needle or distractor tokens, ascending.
    special: Vec<u64>,
    /// Scores that replace the shared ones: [variant] → (row, score).
    patches: Vec<Vec<(u32, f32)>>,
}

/// The position of `multiple` among `multiples` (0 when absent: the
/// exact reference a trial adds has multiple 1).
fn slot_of(multiples: &[f64], multiple: f64) -> usize {
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
    fn query_group(&self, ci: usize) -> usize {
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
    fn reference_variant(&self) -> usize {
        self.variants.iter().position(PrecisionVariant::is_exact).unwrap_or(self.variants.len())
    }

    /// Runs the trial seeded by `trial_seed`.
    pub fn run(&self, trial_seed: u64) -> Result<TrialOutcome, SimError> {
        self.run_with_needle(trial_seed, None)
    }

    /// [`Self::run`] with the quantile needle's draws given instead of drawn
    /// from the trial seed (to simulate another layer or query token of the
    /// same prompt in full; ignored under the strength unit).
    pub fn run_with_needle(&self, trial_seed: u64, draw: Option<NeedleDraw>) -> Result<TrialOutcome, SimError> {
        let haystack = TrialHaystack::draw(self.model, trial_seed)?;
        let mut source = TrialRows::new(self.model, self.physics, self.geometry, &haystack, trial_seed)?;
        let quantile = self.model.needle_unit.quantile().copied();
        let ScoredSet { variants: scored, reference, screen } = self.scored_set(quantile.is_some(), &source)?;
        let scored = &scored[..];

        let shifted = shifted_query(self.model, trial_seed, scored)?;
        let QueryGroups { queries, key_layouts, rows: group_rows } = self.query_groups(&haystack, shifted.as_ref(), &source, scored)?;
        let groups = queries.len();
        let max_rows = group_rows.iter().copied().max().unwrap_or(0);
        let mut cases = self.cases(&source, scored.len());

        // Score every row once per (query group, variant), chunk by chunk;
        // rows that hold needle or distractor tokens are keyed per case
        // afterwards, once the needle's scale is known.
        let mut scores: Vec<Vec<Vec<f32>>> = group_rows.iter().map(|&n| vec![vec![0.0; n]; scored.len()]).collect();
        let twins = score_twins_of(scored);
        let multiples = self.needle_multiples();
        let needle_slots: Vec<usize> = scored.iter().map(|v| slot_of(&multiples, v.needle_multiple)).collect();
        let patch_twins: Vec<Option<usize>> =
            twins.iter().enumerate().map(|(v, t)| t.filter(|&u| needle_slots[u] == needle_slots[v])).collect();
        let keep_fin = scored.iter().zip(&patch_twins).any(|(v, t)| t.is_none() && !v.cache.is_default());
        let work = ChunkWork {
            spec: self,
            request: trial_seed,
            variants: scored,
            key_layouts,
            queries: &queries,
            cases: &cases,
            twins,
            patch_twins,
            needle_slots,
            keep_bare: quantile.is_some(),
            keep_fin,
            keep_norms: screen.is_some(),
        };
        let chunk_specials = work.score_all(&mut source, &mut scores, max_rows)?;
        let norms: Vec<f32> = chunk_specials.iter().flat_map(|c| c.norms.iter().copied()).collect();
        // Only chunks that hold special rows matter from here on.
        let chunk_specials: Vec<ChunkSpecials> = chunk_specials.into_iter().filter(|c| c.cases.iter().any(|p| !p.is_empty())).collect();

        // The needle's scale per case: 1 under the strength unit, solved to
        // the drawn exceedance under the quantile unit.
        let mut quantized = QuantizedRows::with_capacity(CHUNK_ROWS, self.model.shape.head_dim);
        let mut needle = Vec::new();
        if let Some(q) = quantile {
            let draw = draw.unwrap_or_else(|| q.draw(trial_seed));
            let exact_variant = PrecisionVariant::builtin("fp32").ok_or_else(|| SimError::Model("the fp32 variant is missing".into()))?;
            let mut exact_queries: Vec<IndexerQuery> = Vec::new();
            let exact = match screen {
                None => Exact::Scored(reference),
                Some((variant, rounding)) => {
                    for &context in &self.contexts[..groups] {
                        exact_queries.extend(context_queries(&haystack, &source, std::slice::from_ref(&exact_variant), context)?);
                    }
                    let factors = exact_queries.iter().map(|q| rounding * q.bound_factor()).collect();
                    Exact::Screened(Box::new(Screen { variant, factors, norms, source: source.clone(), keys: Default::default() }))
                }
            };
            let mut placer = Placer {
                work: &work,
                exact,
                fp32: &exact_variant,
                exact_queries: &exact_queries,
                scores: &scores,
                source: &source,
                quantized: &mut quantized,
            };
            // One placement per needle multiple (slot-major): the same draws,
            // the median exceedance scaled.
            for &m in &multiples {
                let q_m = q.scaled(m);
                let draw = if m == 1.0 {
                    draw
                } else {
                    NeedleDraw { log10_exceedance: q_m.log10_exceedance(draw.prompt, draw.layer, draw.token), ..draw }
                };
                for c in 0..cases.len() {
                    needle.push(placer.place(c, &chunk_specials, &draw)?);
                }
            }
        }

        // Each case's special rows, keyed at each slot's scale, scored by every variant.
        let mut patches = Vec::new();
        for chunk in &chunk_specials {
            for c in 0..cases.len() {
                let scales: Vec<Option<f32>> = (0..multiples.len()).map(|s| needle.get(s * cases.len() + c).map(|n| n.scale)).collect();
                work.case_patches(&source, c, chunk, &scales, &mut quantized, &mut patches)?;
            }
        }
        for patch in patches {
            cases[patch.case].patches[patch.variant].push((patch.row, patch.score));
        }
        let mut cells = self.judge_cases(&cases, &mut scores, max_rows, trial_seed);
        self.gate_by_length(&mut cells)?;
        Ok(TrialOutcome { cells, seed: trial_seed, needle })
    }

    /// A variant whose faults act only in longer prompts (`longer-than=T`)
    /// takes its base variant's outcomes in every context of at most T
    /// tokens: there it is the base, on the same haystacks.
    fn gate_by_length(&self, cells: &mut [NeedleOutcome]) -> Result<(), SimError> {
        for (v, variant) in self.variants.iter().enumerate().filter(|(_, x)| x.longer_than > 0) {
            let base = variant.base_name();
            let b = self.variants.iter().position(|x| x.name == base).ok_or_else(|| {
                SimError::Model(format!("{} acts only in longer prompts: its base {base} must be scored beside it", variant.name))
            })?;
            for ci in (0..self.contexts.len()).filter(|&ci| self.contexts[ci] <= variant.longer_than) {
                for si in 0..self.spot_count() {
                    for ki in 0..self.topks.len() {
                        cells[self.cell_index(ci, si, ki, v)] = cells[self.cell_index(ci, si, ki, b)];
                    }
                }
            }
        }
        Ok(())
    }
}

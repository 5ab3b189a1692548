//! A trial's queries per context and the variants and cases it scores.

use super::place::FULL_REFERENCE;
use super::spec::{Case, TrialSpec};
use crate::base::rng::{self, tag};
use crate::error::SimError;
use crate::model::haystack::{GenerativeModel, TrialHaystack};
use crate::model::physics::RopeChoice;
use crate::model::row_source::TrialRows;
use crate::score::indexer::IndexerQuery;
use crate::score::variant::PrecisionVariant;
use std::sync::Arc;

/// The variants a trial scores and where the quantile needle's exact
/// scores come from.
pub(super) struct ScoredSet {
    pub(super) variants: Vec<PrecisionVariant>,
    /// The exact variant among the spec's (its count: none).
    pub(super) reference: usize,
    /// A variant that screens the rows for the exact reference, with its rounding bound.
    pub(super) screen: Option<(usize, f64)>,
}

/// A trial's queries per group ([group][scored variant]), how many key
/// layouts its variants read, and the candidate rows each group scores.
pub(super) struct QueryGroups {
    pub(super) queries: Vec<Vec<Arc<IndexerQuery>>>,
    pub(super) key_layouts: usize,
    pub(super) rows: Vec<usize>,
}

/// Every variant's query for a context of `context` tokens: rotated to the
/// decode position `context − 1` when RoPE is on (with the variant's pair
/// layout), then quantized.
pub fn context_queries(
    hay: &TrialHaystack,
    source: &TrialRows<'_>,
    variants: &[PrecisionVariant],
    context: u64,
) -> Result<Vec<IndexerQuery>, SimError> {
    shifted_context_queries(hay, None, source, variants, context)
}

/// [`context_queries`], with `shifted` the other query (and head weights)
/// that `row-shift` variants select by; such a variant without one is an
/// error.
pub fn shifted_context_queries(
    hay: &TrialHaystack,
    shifted: Option<&TrialHaystack>,
    source: &TrialRows<'_>,
    variants: &[PrecisionVariant],
    context: u64,
) -> Result<Vec<IndexerQuery>, SimError> {
    let twins = super::spec::score_twins_of(variants);
    let shared = queries_sharing(hay, shifted, source, variants, context, &twins)?;
    Ok(shared.into_iter().map(Arc::unwrap_or_clone).collect())
}

/// [`shifted_context_queries`] with each score twin (`twins`: an earlier
/// variant with the same query pipeline, scoring and RoPE choices, e.g.
/// `fp8+needle=4` beside `fp8`) taking its original's query, bit for bit,
/// instead of rotating and quantizing it again.
fn queries_sharing(
    hay: &TrialHaystack,
    shifted: Option<&TrialHaystack>,
    source: &TrialRows<'_>,
    variants: &[PrecisionVariant],
    context: u64,
    twins: &[Option<usize>],
) -> Result<Vec<Arc<IndexerQuery>>, SimError> {
    let d = hay.shape.head_dim;
    // A twin shares its original's query (a query and its block layout are
    // 64 KiB at 64 heads: copying them was 6 % of a diagnosis's CPU).
    let mut out: Vec<Arc<IndexerQuery>> = Vec::with_capacity(variants.len());
    for (i, v) in variants.iter().enumerate() {
        if let Some(u) = twins.get(i).copied().flatten().filter(|&u| u < i) {
            out.push(Arc::clone(&out[u]));
            continue;
        }
        let own = if v.position.query_row_shifted {
            shifted.ok_or_else(|| SimError::Hypothesis(format!("{}: row-shift needs another query; this estimator has none", v.name)))?
        } else {
            hay
        };
        let mut q = own.queries.clone();
        source.rotate_queries(&mut q, context.saturating_sub(1), v.position.query_rope_layout_swapped)?;
        out.push(Arc::new(IndexerQuery::new(v.query.quantize_rows(&q, d)?, &own.weights, d, v.scoring)));
    }
    Ok(out)
}

/// The other query a `row-shift` variant selects by: a fresh draw of the
/// model's query and head weights from the trial's seed (its own stream),
/// None when no variant shifts.
pub fn shifted_query(model: &GenerativeModel, trial_seed: u64, variants: &[PrecisionVariant]) -> Result<Option<TrialHaystack>, SimError> {
    if !variants.iter().any(|v| v.position.query_row_shifted) {
        return Ok(None);
    }
    let seed = rng::derive(trial_seed, &[tag::ROW_SHIFT]);
    TrialHaystack::draw(model, seed).map(Some)
}

impl TrialSpec<'_> {
    /// The trial's query groups: one per context with RoPE (see
    /// `query_group`), else one for all.
    pub(super) fn query_groups(
        &self,
        haystack: &TrialHaystack,
        shifted: Option<&TrialHaystack>,
        source: &TrialRows,
        scored: &[PrecisionVariant],
        twins: &[Option<usize>],
    ) -> Result<QueryGroups, SimError> {
        let positional = self.physics.rope != RopeChoice::Off;
        let groups = if positional { self.contexts.len() } else { 1 };
        let queries: Vec<Vec<Arc<IndexerQuery>>> =
            (0..groups).map(|g| queries_sharing(haystack, shifted, source, scored, self.contexts[g], twins)).collect::<Result<_, _>>()?;
        // Keys rotated with the other pair layout, for `rope-swap-k` variants.
        let key_layouts = if positional && scored.iter().any(|v| v.position.key_rope_layout_swapped) { 2 } else { 1 };
        let candidates_of = |ci: usize| self.geometry.candidate_rows(self.contexts[ci]) as usize;
        let rows: Vec<usize> = (0..groups)
            .map(|g| if positional { candidates_of(g) } else { (0..self.contexts.len()).map(candidates_of).max().unwrap_or(0) })
            .collect();
        Ok(QueryGroups { queries, key_layouts, rows })
    }

    /// The variants a trial scores: the spec's, and an fp32 after them
    /// when the quantile needle needs exact scores and neither an exact
    /// variant nor a screening one is there.
    pub(super) fn scored_set(&self, quantile: bool, source: &TrialRows) -> Result<ScoredSet, SimError> {
        // The quantile needle is placed by exact scores: score an fp32 beside
        // the spec's variants when none of them is exact.
        let reference = self.reference_variant();
        // Without an exact variant, a bf16-like one screens the rows when rows
        // can be regenerated alone; else an fp32 is scored beside the rest.
        let screen = if quantile && reference == self.variants.len() && source.chunks_are_independent() && !FULL_REFERENCE.with(|f| f.get())
        {
            self.variants.iter().enumerate().find_map(|(i, v)| v.rounding_bound().map(|e| (i, e)))
        } else {
            None
        };
        let mut variants: Vec<PrecisionVariant> = self.variants.to_vec();
        if quantile && reference == self.variants.len() && screen.is_none() {
            variants.push(PrecisionVariant::builtin("fp32").ok_or_else(|| SimError::Model("the fp32 variant is missing".into()))?);
        }
        Ok(ScoredSet { variants, reference, screen })
    }

    /// One case per (context, needle spot), context-major, with its
    /// placement, items and special rows.
    pub(super) fn cases(&self, source: &TrialRows) -> Vec<Case> {
        let mut cases: Vec<Case> = Vec::with_capacity(self.contexts.len() * self.spot_count());
        for ci in 0..self.contexts.len() {
            for si in 0..self.spot_count() {
                let placement = self.placement(self.contexts[ci], si);
                let candidates = self.geometry.candidate_rows(self.contexts[ci]) as usize;
                let items = source.items(self.contexts[ci], placement.tokens.clone());
                let special = source.special_rows(&items, candidates as u64);
                cases.push(Case { ci, si, placement, candidates, items, special });
            }
        }
        cases
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::geometry::CompressionGeometry;
    use crate::model::haystack::IndexerShape;
    use crate::model::physics::{Physics, RopeChoice};

    #[test]
    fn a_score_twin_takes_its_originals_query_bit_for_bit() {
        let model = GenerativeModel {
            shape: IndexerShape { heads: 8, head_dim: 128 },
            key_common: 0.5,
            outlier_channels: 4,
            outlier_scale: 8.0,
            weight_mean: 0.0,
            weight_std: 1.0,
            needle_strength: 1.0,
            needle_unit: Default::default(),
            needle_heads: 4,
            needle_geometry: crate::model::haystack::NeedleGeometry::Isotropic,
            head_coherence: 0.0,
            structure: Default::default(),
        };
        let physics = Physics { rope: RopeChoice::V32, ..Physics::NULL };
        let geometry = CompressionGeometry { ratio: 1, overlap: false, window: 128, window_rows_compete: true };
        let hay = TrialHaystack::draw(&model, 3).unwrap();
        let source = TrialRows::new(&model, &physics, geometry, &hay, 3).unwrap();
        let fp8 = PrecisionVariant::builtin("fp8").unwrap();
        let harder = PrecisionVariant { needle_multiple: 4.0, ..fp8.clone() };
        let variants = [fp8, PrecisionVariant::builtin("bf16").unwrap(), harder];
        let twins = super::super::spec::score_twins_of(&variants);
        assert_eq!(twins, [None, None, Some(0)]);
        let shared = queries_sharing(&hay, None, &source, &variants, 4096, &twins).unwrap();
        let each = queries_sharing(&hay, None, &source, &variants, 4096, &[None, None, None]).unwrap();
        let keys: Vec<f32> = (0..16 * 128).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
        let scores = |q: &IndexerQuery| {
            let mut out = vec![0.0f32; 16];
            q.score_rows(&keys, &mut out);
            out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        for (a, b) in shared.iter().zip(&each) {
            assert_eq!(scores(a), scores(b));
        }
        // Not vacuous: the twin's query is fp8's, not bf16's.
        assert_ne!(scores(&shared[2]), scores(&shared[1]));
    }
}

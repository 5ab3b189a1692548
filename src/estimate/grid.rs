//! The cells of one haystack group (context × needle offset × k × variant),
//! walked in [`TrialSpec::cell_index`] order with what every estimator and
//! every output needs to know about a cell.

use crate::model::geometry::NeedlePlacement;
use crate::score::trial::TrialSpec;
use crate::score::variant::PrecisionVariant;

/// One cell of a haystack group.
#[derive(Clone, Debug)]
pub struct GridCell<'a> {
    /// Position in [`TrialSpec::cell_index`] order.
    pub index: usize,
    /// Index of the same cell under the first (baseline) variant.
    pub baseline_index: usize,
    pub context_index: usize,
    /// The needle spot's index ([`TrialSpec::spot`]).
    pub spot_index: usize,
    pub topk_index: usize,
    pub variant_index: usize,
    pub context: u64,
    pub depth_percent: f64,
    pub needle_offset: Option<u64>,
    pub topk: u64,
    pub variant: &'a PrecisionVariant,
    pub placement: NeedlePlacement,
    /// Rows that compete for selection: visible, outside the raw window
    /// (unless window rows compete) and not hidden by a chunk fault.
    pub candidates: u64,
}

impl GridCell<'_> {
    /// Rows the variant's engine selects, at most the candidates.
    pub fn k_eff(&self) -> u64 {
        self.variant.selection.topk_for(self.topk).min(self.candidates)
    }

    /// Whether this is the baseline variant (the first), which the others
    /// are paired with.
    pub fn is_baseline(&self) -> bool {
        self.variant_index == 0
    }

    /// Index of the same cell at the sweep's smallest k, which the other k
    /// are paired with on the same trials; None at that k.
    pub fn k_baseline_index(&self, spec: &TrialSpec<'_>) -> Option<usize> {
        let smallest = (0..spec.topks.len()).min_by_key(|&i| spec.topks[i])?;
        (self.topk_index != smallest).then(|| spec.cell_index(self.context_index, self.spot_index, smallest, self.variant_index))
    }
}

/// Every cell of `spec`, in [`TrialSpec::cell_index`] order.
pub fn cells<'a>(spec: &'a TrialSpec<'a>) -> impl Iterator<Item = GridCell<'a>> + 'a {
    spec.contexts.iter().enumerate().flat_map(move |(ci, &context)| {
        let candidates = spec.geometry.candidate_rows(context);
        (0..spec.spot_count()).flat_map(move |si| {
            let (depth_percent, needle_offset) = spec.spot(si);
            let placement = spec.placement(context, si);
            spec.topks.iter().enumerate().flat_map(move |(ki, &topk)| {
                let placement = placement.clone();
                spec.variants.iter().enumerate().map(move |(vi, variant)| GridCell {
                    index: spec.cell_index(ci, si, ki, vi),
                    baseline_index: spec.cell_index(ci, si, ki, 0),
                    context_index: ci,
                    spot_index: si,
                    topk_index: ki,
                    variant_index: vi,
                    context,
                    depth_percent,
                    needle_offset,
                    topk,
                    variant,
                    placement: placement.clone(),
                    candidates: (spec.candidate_end(variant, candidates as usize) as u64)
                        .saturating_sub(spec.hidden_rows(variant, context)),
                })
            })
        })
    })
}

/// A small null-model grid for unit tests of the estimate layer, built
/// without the configuration (which sits above this layer).
#[cfg(test)]
pub(crate) mod fixture {
    use crate::model::geometry::CompressionGeometry;
    use crate::model::haystack::{GenerativeModel, IndexerShape, NeedleGeometry};
    use crate::model::physics::Physics;
    use crate::score::selection::TieRule;
    use crate::score::trial::TrialSpec;
    use crate::score::variant::PrecisionVariant;

    /// The owned parts a [`TrialSpec`] borrows.
    pub(crate) struct Tiny {
        pub model: GenerativeModel,
        pub variants: Vec<PrecisionVariant>,
        pub offsets: Vec<Option<u64>>,
    }

    impl Tiny {
        pub(crate) fn new() -> Tiny {
            Tiny {
                model: GenerativeModel {
                    shape: IndexerShape { heads: 4, head_dim: 16 },
                    key_common: 0.5,
                    outlier_channels: 0,
                    outlier_scale: 1.0,
                    weight_mean: 0.0,
                    weight_std: 1.0,
                    needle_strength: 1.0,
                    needle_unit: Default::default(),
                    needle_heads: 2,
                    needle_geometry: NeedleGeometry::Isotropic,
                    head_coherence: 0.0,
                    structure: Default::default(),
                },
                variants: ["fp32", "bf16", "fp8"].map(|n| PrecisionVariant::builtin(n).unwrap()).to_vec(),
                offsets: vec![Some(0), Some(3)],
            }
        }

        pub(crate) fn spec(&self) -> TrialSpec<'_> {
            TrialSpec {
                model: &self.model,
                physics: &Physics::NULL,
                geometry: CompressionGeometry { ratio: 4, overlap: true, window: 128, window_rows_compete: true },
                contexts: &[512, 1024, 4096],
                depths: &[50.0],
                needle_offsets: &self.offsets,
                needle_tokens: 8,
                topks: &[64, 128],
                variants: &self.variants,
                tie_rule: TieRule::LowestIndex,
                fidelity_reference: Some(0),
                stack: None,
                prefill_chunk: 0,
                tie_audit: false,
                margin_threshold: None,
                rank_margins: true,
                agreement: &[],
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_come_in_index_order_and_cover_the_grid() {
        let tiny = fixture::Tiny::new();
        let spec = tiny.spec();
        let offsets = &tiny.offsets;
        let all: Vec<_> = cells(&spec).collect();
        assert_eq!(all.len(), spec.cell_count());
        for (i, c) in all.iter().enumerate() {
            assert_eq!(c.index, i);
            assert_eq!(c.index, spec.cell_index(c.context_index, c.spot_index, c.topk_index, c.variant_index));
            assert_eq!(c.baseline_index, spec.cell_index(c.context_index, c.spot_index, c.topk_index, 0));
            assert_eq!(c.context, spec.contexts[c.context_index]);
            assert_eq!((c.depth_percent, c.needle_offset), spec.spot(c.spot_index));
            assert_eq!(c.needle_offset, offsets[c.spot_index]);
            assert_eq!(c.topk, spec.topks[c.topk_index]);
            assert_eq!(c.placement, spec.placement(c.context, c.spot_index));
            assert!(c.k_eff() <= c.candidates);
        }
    }
}

//! Running a trial: its rows scored chunk by chunk, the needle placed,
//! each case's special rows keyed and every cell judged.

use super::chunk::{ChunkSpecials, ChunkWork, CHUNK_ROWS};
use super::critical::Probe;
use super::place::{Exact, Placer, Screen};
use super::query::{context_queries, shifted_query, QueryGroups, ScoredSet};
use super::spec::{logit_twins_of, row_map_twins_of, score_twins_of, slot_of, CasePatches, NeedleOutcome, TrialOutcome, TrialSpec};
use crate::error::SimError;
use crate::model::haystack::TrialHaystack;
use crate::model::needle::NeedleDraw;
use crate::model::row_source::TrialRows;
use crate::numerics::pipeline::QuantizedRows;
use crate::score::indexer::IndexerQuery;
use crate::score::variant::PrecisionVariant;

impl TrialSpec<'_> {
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
        let twins = score_twins_of(scored);
        let logit_twins = logit_twins_of(scored, &twins);
        let row_map_twins = row_map_twins_of(scored, &twins, &logit_twins);
        let QueryGroups { queries, key_layouts, rows: group_rows } =
            self.query_groups(&haystack, shifted.as_ref(), &source, scored, &twins)?;
        let groups = queries.len();
        let max_rows = group_rows.iter().copied().max().unwrap_or(0);
        let cases = self.cases(&source);

        // Score every row once per (query group, variant), chunk by chunk;
        // rows that hold needle or distractor tokens are keyed per case
        // afterwards, once the needle's scale is known.
        let mut scores: Vec<Vec<Vec<f32>>> = group_rows.iter().map(|&n| vec![vec![0.0; n]; scored.len()]).collect();
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
            logit_twins,
            row_map_twins,
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
        let exact_variant = PrecisionVariant::builtin("fp32").ok_or_else(|| SimError::Model("the fp32 variant is missing".into()))?;
        let mut exact_queries: Vec<IndexerQuery> = Vec::new();
        let mut exact_kept = None;
        if let Some(q) = quantile {
            let draw = draw.unwrap_or_else(|| q.draw(trial_seed));
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
            exact_kept = Some(placer.exact);
        }

        // Each case's special rows, keyed at each slot's scale, scored by every variant.
        let mut patches = Vec::new();
        for chunk in &chunk_specials {
            for c in 0..cases.len() {
                let scales: Vec<Option<f32>> = (0..multiples.len()).map(|s| needle.get(s * cases.len() + c).map(|n| n.scale)).collect();
                work.case_patches(&source, c, chunk, &scales, &mut quantized, &mut patches)?;
            }
        }
        let mut case_patches: CasePatches = vec![vec![Vec::new(); scored.len()]; cases.len()];
        for patch in patches {
            case_patches[patch.case][patch.variant].push((patch.row, patch.score));
        }
        let (mut cells, agreement) = self.judge_cases(&cases, &case_patches, &mut scores, max_rows, trial_seed);
        if let Some(exact) = exact_kept.filter(|_| self.margin_threshold.is_some()) {
            let placer = Placer {
                work: &work,
                exact,
                fp32: &exact_variant,
                exact_queries: &exact_queries,
                scores: &scores,
                source: &source,
                quantized: &mut quantized,
            };
            let mut probe = Probe { placer, chunk_specials: &chunk_specials };
            self.keep_ranks(&cases, &case_patches, &needle, &mut cells, trial_seed, &mut probe)?;
        }
        self.gate_by_length(&mut cells)?;
        Ok(TrialOutcome { cells, seed: trial_seed, needle, agreement })
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

//! Judging a trial's cells: each case's scores ranked per variant and
//! top-k, and compared with the fidelity reference.

use super::spec::{Case, CasePatches, NeedleOutcome, TrialSpec};
use crate::base::rng::{self, tag};
use crate::score::agreement::{agreement, Agreement};
use crate::score::selection::{
    best_needle, best_needle_rank, kth_largest_many_with, selection_overlap_with, tie_key, tied_ahead_of_best, TieAudit, TieCut,
};
use crate::score::variant::{ChunkVisibility, PrecisionVariant};

/// Buffers reused while judging a trial's cases.
pub(super) struct JudgeBuffers {
    pub(super) scratch: Vec<f32>,
    pub(super) kth: Vec<f32>,
    pub(super) row_order: Vec<u32>,
}

/// Per variant, its scores (first `candidates`) moved to the lower edges
/// of its selector's bins when it has a coarse selector, else None.
pub(super) fn scored_selection_copies(scores: &[Vec<f32>], variants: &[PrecisionVariant], candidates: usize) -> Vec<Option<Vec<f32>>> {
    variants
        .iter()
        .zip(scores)
        .map(|(v, s)| {
            v.selection.coarse_bits.map(|b| s[..candidates].iter().map(|&x| crate::score::selection::coarse_score(x, b)).collect())
        })
        .collect()
}

impl TrialSpec<'_> {
    /// Every cell of the trial: each case's scores (the shared ones with
    /// its patches written in place, put back after the case) judged per
    /// variant, top-k and, with a fidelity reference, against it.
    pub(super) fn judge_cases(
        &self,
        cases: &[Case],
        case_patches: &CasePatches,
        scores: &mut [Vec<Vec<f32>>],
        max_rows: usize,
        trial_seed: u64,
    ) -> (Vec<NeedleOutcome>, Vec<Option<Agreement>>) {
        let mut cells = vec![NeedleOutcome::LOST; self.cell_count()];
        let mut agreements = vec![None; self.pair_index(self.contexts.len(), 0, 0, 0)];
        let mut bufs = JudgeBuffers { scratch: Vec::with_capacity(max_rows), kth: Vec::new(), row_order: Vec::new() };
        let priority = |row: usize| rng::derive(trial_seed, &[tag::TIE, row as u64]);
        // Fidelity and agreement compare whole top-k sets, so they need every
        // row's place in the tie order, and each variant's scores with the
        // needle rows in.
        let compares = (self.fidelity_reference.is_some() && self.variants.len() > 1) || !self.agreement.is_empty();
        let tie_keys: Vec<u64> = if compares { (0..max_rows).map(|i| tie_key(self.tie_rule, i, priority)).collect() } else { Vec::new() };
        // The originals of the patched scores, put back after the case.
        let mut saved: Vec<(usize, usize, f32)> = Vec::new();
        for (case, patches_of_case) in cases.iter().zip(case_patches) {
            let candidates = case.candidates;
            let g = self.query_group(case.ci);
            saved.clear();
            for (v, patches) in patches_of_case.iter().enumerate() {
                let shared = &mut scores[g][v];
                for &(row, score) in patches.iter().filter(|&&(row, _)| (row as usize) < candidates) {
                    let row = row as usize;
                    saved.push((v, row, shared[row]));
                    shared[row] = score;
                }
            }
            // A coarse selector (`tie-truncate=B`) compares bins, not scores.
            let coarse: Vec<Option<Vec<f32>>> = scored_selection_copies(&scores[g], self.variants, candidates);
            let assembled: Vec<&[f32]> =
                scores[g].iter().enumerate().map(|(v, s)| coarse.get(v).and_then(Option::as_deref).unwrap_or(&s[..candidates])).collect();
            for (v, visible) in assembled.iter().enumerate().take(self.variants.len()) {
                self.judge_variant(case, v, visible, trial_seed, &mut bufs, &mut cells);
            }
            if let Some(r) = self.fidelity_reference.filter(|_| !tie_keys.is_empty()) {
                self.judge_fidelity(case, r, &assembled, &tie_keys[..candidates], &mut bufs.row_order, &mut cells);
            }
            if !self.agreement.is_empty() {
                self.judge_agreement(case, &assembled, &tie_keys[..candidates], &mut bufs.row_order, &mut agreements);
            }
            drop(assembled);
            for &(v, row, old) in saved.iter().rev() {
                scores[g][v][row] = old;
            }
        }
        (cells, agreements)
    }

    /// The cells of variant `v` in `case`, from its scores `visible` (rows
    /// 0..candidates, with the case's patches in).
    pub(super) fn judge_variant(
        &self,
        case: &Case,
        v: usize,
        visible: &[f32],
        trial_seed: u64,
        bufs: &mut JudgeBuffers,
        cells: &mut [NeedleOutcome],
    ) {
        let (ci, si) = (case.ci, case.si);
        let placement = &case.placement;
        // A chunk fault hides the rows before the query's prefill chunk:
        // the candidates are rows `first …` of `visible`, renumbered from 0
        // (tie priorities keep each row's own number).
        let first = self.first_candidate_row(v, ci).min(case.candidates);
        // An address fault cuts the rows past its bound off, or reads
        // other rows' scores in their place (`crate::score::address`).
        let end = self.candidate_end(&self.variants[v], case.candidates).max(first);
        let addressed = self.addressed_scores(v, ci, &visible[..end]);
        let visible = &addressed.as_deref().unwrap_or(&visible[..end])[first..];
        let candidates = end - first;
        let clip = |r: u64| (r as usize).clamp(first, end) - first;
        let skip = clip(placement.rows.start)..clip(placement.rows.end).max(clip(placement.rows.start));
        let priority = |row: usize| rng::derive(trial_seed, &[tag::TIE, (row + first) as u64]);
        // What this variant's engine selects with (hypotheses may change it).
        let sel = &self.variants[v].selection;
        let nan = sel.nan_order;
        let rule = sel.tie_rule_for(self.tie_rule);
        let window = sel.window_for(self.geometry.window);
        let in_window = placement.tokens.start >= self.contexts[ci].saturating_sub(window);
        let k_effs: Vec<usize> = self.topks.iter().map(|&k| (sel.topk_for(k) as usize).min(candidates)).collect();
        // The tie audit re-picks each cut under every tie rule (docs/MODEL.md, "Tie audit").
        let cuts: Option<Vec<TieCut>> = self
            .tie_audit
            .then(|| TieAudit::new(visible, skip.clone(), nan, priority).cuts(&k_effs, in_window, &mut bufs.scratch, &mut bufs.kth));
        let audit_cut = |ki: usize| cuts.as_ref().map(|c| c[ki]);
        // Best needle row: highest score in the engine's order, first on ties.
        // The competitors' spread only for the rank margins (a serial pass).
        let ranked = if self.rank_margins {
            best_needle(visible, skip.clone(), nan).map(|(best, t)| (best, t.rank, t.std))
        } else {
            best_needle_rank(visible, skip.clone(), nan).map(|(best, rank)| (best, rank, f64::NAN))
        };
        let Some((best, rank, std)) = ranked else {
            for ki in 0..self.topks.len() {
                let ties = audit_cut(ki);
                cells[self.cell_index(ci, si, ki, v)] =
                    NeedleOutcome { survived: in_window, via_window: in_window, ties, ..NeedleOutcome::LOST };
            }
            return;
        };
        // Tied competitors the tie rule puts ahead of the best needle row.
        let tied = tied_ahead_of_best(visible, skip.clone(), best, &rank, rule, priority);

        let competitors = candidates - skip.len();
        let ks_with_margin: Vec<usize> =
            if self.rank_margins { k_effs.iter().copied().filter(|&k| k >= 1 && k <= competitors).collect() } else { Vec::new() };
        let JudgeBuffers { scratch, kth, .. } = bufs;
        if !ks_with_margin.is_empty() {
            scratch.clear();
            scratch.extend_from_slice(&visible[..skip.start]);
            scratch.extend_from_slice(&visible[skip.end..]);
            kth_largest_many_with(scratch, &ks_with_margin, kth, nan);
        }
        for (ki, &k_eff) in k_effs.iter().enumerate() {
            let by_rank = (rank.above + tied) < k_eff as u64;
            let margin = ks_with_margin.iter().position(|&k| k == k_eff).map(|p| best - kth[p]);
            let margin_sd = margin.filter(|_| std > 0.0).map(|m| f64::from(m) / std);
            cells[self.cell_index(ci, si, ki, v)] = NeedleOutcome {
                survived: in_window || by_rank,
                via_window: in_window,
                rank: Some(rank),
                margin,
                margin_sd,
                ties: audit_cut(ki),
                ..NeedleOutcome::LOST
            };
        }
    }

    /// The first row variant `v`'s query sees in context `ci` (0 unless a
    /// chunk fault hides earlier rows).
    pub(super) fn first_candidate_row(&self, v: usize, ci: usize) -> usize {
        self.hidden_rows(&self.variants[v], self.contexts[ci]) as usize
    }

    /// Rows a chunk fault of `variant` hides from the query in a context
    /// of `context` tokens: those before its prefill chunk (0 without one).
    pub fn hidden_rows(&self, variant: &PrecisionVariant, context: u64) -> u64 {
        match variant.chunk {
            ChunkVisibility::All => 0,
            ChunkVisibility::OwnChunk => self.geometry.chunk_first_row(context, self.prefill_chunk),
        }
    }

    /// The first of `candidates` rows that variant `variant` cannot
    /// address (`candidates` unless a visible-range cap cuts them off).
    pub fn candidate_end(&self, variant: &PrecisionVariant, candidates: usize) -> usize {
        variant.address.candidate_end(candidates, self.geometry.ratio)
    }

    /// Variant `v`'s scores `scores` (rows 0 …) in context `ci` as its
    /// address fault assembles them; None when they are as given.
    pub(super) fn addressed_scores(&self, v: usize, ci: usize, scores: &[f32]) -> Option<Vec<f32>> {
        let address = self.variants[v].address;
        if address.is_none() {
            return None;
        }
        let chunk_first = self.geometry.chunk_first_row(self.contexts[ci], self.prefill_chunk) as usize;
        address.read_scores(scores, self.geometry.ratio, chunk_first)
    }

    /// Selection fidelity of every variant against the reference `r` in
    /// `case`: the share of r's top-k_eff rows each also selects, and the
    /// Jaccard overlap.
    pub(super) fn judge_fidelity(
        &self,
        case: &Case,
        r: usize,
        assembled: &[&[f32]],
        tie_keys: &[u64],
        row_order: &mut Vec<u32>,
        cells: &mut [NeedleOutcome],
    ) {
        let k_effs: Vec<usize> = self.topks.iter().map(|&k| (k as usize).min(case.candidates)).collect();
        // A variant with hidden rows selects from fewer rows than the
        // reference, one with an address fault from other rows' scores:
        // its fidelity is left out (None), not compared.
        let in_place = |v: &PrecisionVariant| v.chunk.is_all() && v.address.is_none();
        for v in (0..self.variants.len()).filter(|&v| v != r && in_place(&self.variants[v])) {
            for (ki, &k_eff) in k_effs.iter().enumerate().filter(|(_, &k)| k > 0) {
                let (nan_r, nan_v) = (self.variants[r].selection.nan_order, self.variants[v].selection.nan_order);
                let both = selection_overlap_with(assembled[r], assembled[v], tie_keys, k_eff, row_order, nan_r, nan_v);
                let cell = &mut cells[self.cell_index(case.ci, case.si, ki, v)];
                cell.selection_recall = Some(both as f64 / k_eff as f64);
                cell.jaccard = Some(both as f64 / (2 * k_eff as u64 - both) as f64);
            }
        }
    }

    /// Top-k agreement of every pair of [`Self::agreement`] in `case`
    /// (docs/MODEL.md, "Top-k agreement"): like selection fidelity, over the
    /// same rows at the sweep's k, so a pair with a variant that selects
    /// from other rows (hidden or misaddressed) is left out (None).
    fn judge_agreement(
        &self,
        case: &Case,
        assembled: &[&[f32]],
        tie_keys: &[u64],
        row_order: &mut Vec<u32>,
        out: &mut [Option<Agreement>],
    ) {
        let in_place = |v: usize| self.variants[v].chunk.is_all() && self.variants[v].address.is_none();
        let nan = |v: usize| self.variants[v].selection.nan_order;
        for (p, &(a, b)) in self.agreement.iter().enumerate() {
            let (a, b) = (self.length_gated(a, case.ci), self.length_gated(b, case.ci));
            if !(in_place(a) && in_place(b)) {
                continue;
            }
            for (ki, &k) in self.topks.iter().enumerate() {
                let k_eff = (k as usize).min(case.candidates);
                let found = agreement(assembled[a], assembled[b], tie_keys, k_eff, row_order, nan(a), nan(b));
                out[self.pair_index(case.ci, case.si, ki, p)] = Some(found);
            }
        }
    }

    /// The variant whose scores stand for `v` in context `ci`: its base
    /// where a fault that acts only in longer prompts (`longer-than=T`)
    /// is off, else `v` itself.
    fn length_gated(&self, v: usize, ci: usize) -> usize {
        let variant = &self.variants[v];
        if variant.longer_than == 0 || self.contexts[ci] > variant.longer_than {
            return v;
        }
        let base = variant.base_name();
        self.variants.iter().position(|x| x.name == base).unwrap_or(v)
    }
}

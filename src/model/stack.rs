//! The model's layer stack and how its layers and query tokens are tied
//! together: what whole-model recall reads (docs/MODEL.md, "Whole-model
//! recall"). A trial simulates one indexer layer for one query; the
//! estimators spread that layer's outcome over the stack
//! (`crate::estimate::stack`).

use crate::model::needle::ranks_below;
use crate::model::plan::{LayerPlan, PlanLayer};
use serde::{Deserialize, Serialize};

/// What a layer of the stack attends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// The raw window only (compress ratio 0).
    WindowOnly,
    /// Linear attention (a recurrent state): no rows selected.
    Linear,
    /// An indexer of its own picks the top-k rows (CSA, V3.2's token-level
    /// DSA, a pooled indexer).
    Indexed,
    /// Another layer's selection, reused (IndexShare).
    Reused,
    /// Compressed rows, every visible row attended, no indexer (V4's HCA,
    /// ratio 128).
    Dense,
}

/// How HCA layers count for whole-model recall (docs/MODEL.md, "HCA layers").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HcaReading {
    /// Seeing the needle's pooled row does not retrieve it (the default
    /// assumption): only indexed layers count.
    Blind,
    /// Seeing the needle's pooled row retrieves it: a stack with an HCA layer
    /// always finds the needle.
    Retrieves,
}

impl HcaReading {
    pub const NAMES: &'static str = "blind, retrieves";

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "blind" => Some(HcaReading::Blind),
            "retrieves" => Some(HcaReading::Retrieves),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HcaReading::Blind => "blind",
            HcaReading::Retrieves => "retrieves",
        }
    }
}

/// Whether a fault acts identically in every layer or afresh in each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultSpread {
    /// The same code, cache layout or kernel in every layer: the fault's own
    /// randomness is the same draw in each layer.
    Shared,
    /// The fault strikes each layer independently (a race, per-layer memory).
    Independent,
}

impl FaultSpread {
    pub fn name(self) -> &'static str {
        match self {
            FaultSpread::Shared => "shared",
            FaultSpread::Independent => "independent",
        }
    }
}

/// Which spread the faults of a sweep get: each hypothesis's catalogue
/// entry, or one for all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultSpreadChoice {
    Catalogue,
    Shared,
    Independent,
}

impl FaultSpreadChoice {
    pub const NAMES: &'static str = "catalogue, shared, independent";

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "catalogue" => Some(FaultSpreadChoice::Catalogue),
            "shared" => Some(FaultSpreadChoice::Shared),
            "independent" => Some(FaultSpreadChoice::Independent),
            _ => None,
        }
    }

    /// The spread of a fault whose catalogue entry says `catalogue`.
    pub fn pick(self, catalogue: FaultSpread) -> FaultSpread {
        match self {
            FaultSpreadChoice::Catalogue => catalogue,
            FaultSpreadChoice::Shared => FaultSpread::Shared,
            FaultSpreadChoice::Independent => FaultSpread::Independent,
        }
    }
}

/// `stack.fault_token_correlation` where a scenario leaves it out, and in
/// every preset: an **assumption** fitted to the verdicts of the shipped
/// incidents (docs/MODEL.md, "A fault's token correlation").
pub const DEFAULT_FAULT_TOKEN_CORRELATION: f64 = 0.998;

/// The whole model a cell's recall is read through: its layers, how alike
/// its layers and query tokens select, and what counts as retrieved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "WholeModelRecord", try_from = "WholeModelRecord")]
pub struct WholeModel {
    /// What each layer attends (docs/MODEL.md, "Layer plans"). The first
    /// indexer layer is the simulated one; every indexer layer at its ratio
    /// is simulated as it is, one at another ratio on its own rows.
    pub plan: LayerPlan,
    /// Latent correlation of a row's selection in adjacent indexed layers.
    pub layer_correlation: f64,
    /// Latent correlation of a row's selection for adjacent query tokens,
    /// in every indexer layer but the early ones.
    pub token_correlation: f64,
    /// The per-layer profile (docs/MODEL.md, "Per-layer profiles"): indexer
    /// layers whose model layer number is below `early_layers` take
    /// `early_token_correlation` instead (0 early layers: one profile).
    pub early_layers: u64,
    pub early_token_correlation: f64,
    /// Latent correlation, between adjacent query tokens, of a fault's own
    /// part of a layer's latent (docs/MODEL.md, "A fault's token
    /// correlation"): every layer, early or not.
    pub fault_token_correlation: f64,
    /// Question tokens (prefill) and first answer tokens (decode) whose
    /// selections may read the needle.
    pub question_tokens: u64,
    pub answer_tokens: u64,
    /// Selecting layers (indexer layers and the layers that reuse their
    /// selections) that must select the needle.
    pub quorum: u64,
    pub hca: HcaReading,
    pub fault_spread: FaultSpreadChoice,
    /// V4.1's candidate stage, if the model has one.
    pub candidates: Option<CandidateStage>,
    /// What a faulty layer that loses the needle does to the answer.
    pub harm: LostLayerHarm,
}

/// The whole-model rule for faulty layers (docs/MODEL.md, "What a faulty
/// layer does to the answer"): a selecting layer whose fault loses the
/// needle where a correct selection keeps it corrupts the answer with
/// probability `central` (an assumption; `low` … `high` is its band). 0
/// everywhere: any one layer that keeps the needle suffices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LostLayerHarm {
    pub central: f64,
    pub low: f64,
    pub high: f64,
}

impl LostLayerHarm {
    pub fn is_none(&self) -> bool {
        self.central == 0.0 && self.low == 0.0 && self.high == 0.0
    }

    /// The probability that `lost` faulty layers leave the answer intact at
    /// harm `c`.
    pub fn intact(c: f64, lost: u64) -> f64 {
        (1.0 - c).powi(lost.min(i32::MAX as u64) as i32)
    }
}

/// [`WholeModel`] as scenario manifests store it: a plan the
/// `compress_ratios` shorthand can say is stored so (the manifests of
/// earlier versions read back), any other in `layers`.
#[derive(Serialize, Deserialize)]
struct WholeModelRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compress_ratios: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    indexed_ratio: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    layers: Option<String>,
    layer_correlation: f64,
    token_correlation: f64,
    #[serde(default, skip_serializing_if = "is_zero")]
    early_layers: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    early_token_correlation: f64,
    /// Absent from manifests written before it: their faults' tokens took
    /// token_correlation.
    #[serde(default)]
    fault_token_correlation: Option<f64>,
    question_tokens: u64,
    answer_tokens: u64,
    quorum: u64,
    hca: HcaReading,
    fault_spread: FaultSpreadChoice,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    candidates: Option<CandidateStage>,
    #[serde(default, skip_serializing_if = "LostLayerHarm::is_none")]
    lost_layer_harm: LostLayerHarm,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

impl From<WholeModel> for WholeModelRecord {
    fn from(w: WholeModel) -> Self {
        let ratios = w.plan.compress_ratios();
        let short = ratios.is_some();
        WholeModelRecord {
            compress_ratios: ratios,
            indexed_ratio: if short { w.simulated_ratio() } else { None },
            layers: (!short).then(|| w.plan.to_words()),
            layer_correlation: w.layer_correlation,
            token_correlation: w.token_correlation,
            early_layers: w.early_layers,
            early_token_correlation: w.early_token_correlation,
            fault_token_correlation: Some(w.fault_token_correlation),
            question_tokens: w.question_tokens,
            answer_tokens: w.answer_tokens,
            quorum: w.quorum,
            hca: w.hca,
            fault_spread: w.fault_spread,
            candidates: w.candidates,
            lost_layer_harm: w.harm,
        }
    }
}

impl TryFrom<WholeModelRecord> for WholeModel {
    type Error = String;

    fn try_from(r: WholeModelRecord) -> Result<Self, String> {
        let plan = match (r.layers, r.compress_ratios) {
            (Some(words), _) => LayerPlan::parse(&words)?,
            (None, Some(ratios)) => {
                let text = ratios.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
                LayerPlan::from_compress_ratios(&text, r.indexed_ratio.unwrap_or(0))?
            }
            (None, None) => return Err("a stack needs layers or compress_ratios".into()),
        };
        Ok(WholeModel {
            plan,
            layer_correlation: r.layer_correlation,
            token_correlation: r.token_correlation,
            early_layers: r.early_layers,
            early_token_correlation: r.early_token_correlation,
            fault_token_correlation: r.fault_token_correlation.unwrap_or(r.token_correlation),
            question_tokens: r.question_tokens,
            answer_tokens: r.answer_tokens,
            quorum: r.quorum,
            hca: r.hca,
            fault_spread: r.fault_spread,
            candidates: r.candidates,
            harm: r.lost_layer_harm,
        })
    }
}

/// DeepSeek-V4.1's two-level candidate indexer (docs/MODEL.md, "Two-level
/// candidate indexer"): the candidate-source layer keeps, per query, the
/// `blocks` blocks of `block_rows` consecutive compressed rows with the
/// highest block score (the greatest row score in the block), the newest
/// block always among them; from that layer on, every indexer layer
/// selects its top-k only among the rows of those blocks. V4.1's config:
/// `candidate_source_layer_id` 20, `candidate_topk_blocks` 2048,
/// `candidate_block_size` 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandidateStage {
    /// The source's layer number in the model (0 = the first layer).
    pub source_layer: u64,
    pub blocks: u64,
    pub block_rows: u64,
}

impl CandidateStage {
    /// Whether the source layer keeps the block of a needle in row
    /// `needle_row` of `rows` candidate rows, for a needle that a share `u`
    /// of haystack rows outscores (its exceedance), with `fixed_above` rows
    /// certain to outscore it. `own` and `uniform` are uniforms in (0, 1):
    /// `own` draws the best of the needle block's other rows, `uniform`
    /// inverts the binomial count of blocks above it.
    ///
    /// Exact for a haystack of independent rows (the assumption the
    /// quantile needle's rank already makes): another row of the needle's
    /// block beats the needle with probability u each, so the block's score
    /// has exceedance u_B = min(u, V), V the least of `block_rows` − 1
    /// uniforms; every other block beats it with probability
    /// 1 − (1 − u_B)^block_rows. Each fixed row is counted as a block above
    /// (a bound: it may share a block or fall below the block's score).
    pub fn keeps_needle_block(&self, rows: u64, needle_row: u64, u: f64, fixed_above: u64, own: f64, uniform: f64) -> bool {
        if self.always_keeps(rows, needle_row) {
            return true;
        }
        let r = self.block_rows.max(1);
        let total = rows.div_ceil(r);
        let block_u = if r > 1 { u.min(1.0 - own.powf(1.0 / (r - 1) as f64)) } else { u };
        let beats = -(r as f64 * (-block_u).ln_1p()).exp_m1();
        // The needle's block and the newest one are not among the others.
        ranks_below(total.saturating_sub(2), beats, uniform, fixed_above, self.blocks.saturating_sub(1))
    }

    /// Whether row `needle_row` of `rows` is a candidate whatever the
    /// scores: every block is kept, or the row is in the newest block.
    pub fn always_keeps(&self, rows: u64, needle_row: u64) -> bool {
        let r = self.block_rows.max(1);
        rows.div_ceil(r) <= self.blocks || needle_row / r >= rows.saturating_sub(1) / r
    }
}

impl WholeModel {
    /// What layer `l` of the model is.
    pub fn kind_of(&self, l: usize) -> LayerKind {
        match self.plan.layers()[l] {
            PlanLayer::Window => LayerKind::WindowOnly,
            PlanLayer::Linear => LayerKind::Linear,
            PlanLayer::Indexer { .. } => LayerKind::Indexed,
            PlanLayer::Dense { .. } => LayerKind::Dense,
            PlanLayer::Reuse { .. } => LayerKind::Reused,
        }
    }

    pub fn count(&self, kind: LayerKind) -> usize {
        (0..self.plan.len()).filter(|&l| self.kind_of(l) == kind).count()
    }

    /// Layers with an indexer of their own.
    pub fn indexed_layers(&self) -> usize {
        self.count(LayerKind::Indexed)
    }

    /// Layers whose attention reads a selection: the indexer layers and
    /// the layers that reuse theirs. Whole-model recall counts these.
    pub fn selecting_layers(&self) -> usize {
        self.indexed_layers() + self.count(LayerKind::Reused)
    }

    /// Per indexer layer, its compress ratio, in order.
    pub fn indexer_ratios(&self) -> Vec<u64> {
        self.plan
            .layers()
            .iter()
            .filter_map(|l| match *l {
                PlanLayer::Indexer { ratio } => Some(ratio),
                _ => None,
            })
            .collect()
    }

    /// The compress ratio of the first indexer layer: the simulated one.
    pub fn simulated_ratio(&self) -> Option<u64> {
        self.indexer_ratios().first().copied()
    }

    /// How whole-model recall is read, in a few words: "1 of 21 indexer
    /// layers, 20 query tokens", and ", candidates from layer 20" with a
    /// candidate stage.
    pub fn label(&self) -> String {
        let stage = self.candidates.map_or_else(String::new, |c| format!(", candidates from layer {}", c.source_layer));
        let reused = self.count(LayerKind::Reused);
        let layers = if reused == 0 {
            format!("{} indexer layers", self.indexed_layers())
        } else {
            format!("{} selecting layers ({} with an indexer)", self.selecting_layers(), self.indexed_layers())
        };
        let harm = if self.harm.central > 0.0 { format!(", lost-layer harm {}", self.harm.central) } else { String::new() };
        format!("{} of {layers}, {} query tokens{stage}{harm}", self.quorum, self.query_tokens())
    }

    /// Indexer layers of the early profile: those whose model layer number
    /// is below `early_layers`. They lead the indexer layers, so indexer
    /// numbers below this count are the early ones.
    pub fn early_indexers(&self) -> usize {
        self.layers_of(LayerKind::Indexed).iter().filter(|&&l| (l as u64) < self.early_layers).count()
    }

    /// The token correlation of indexer layer number `l` (0 = the simulated
    /// one) under the default profile.
    pub fn token_correlation_of(&self, l: usize) -> f64 {
        if l < self.early_indexers() {
            self.early_token_correlation
        } else {
            self.token_correlation
        }
    }

    /// Query tokens whose selections are read.
    pub fn query_tokens(&self) -> u64 {
        self.question_tokens + self.answer_tokens
    }

    /// The candidate source's number among the indexer layers (0 = the
    /// first, the simulated one), when the stack has a candidate stage;
    /// the indexer layers after it select inside its blocks.
    pub fn candidate_source(&self) -> Option<usize> {
        self.indexer_number(self.candidates?.source_layer)
    }

    /// Model layer `layer`'s number among the indexer layers, None when it
    /// is not one.
    pub fn indexer_number(&self, layer: u64) -> Option<usize> {
        self.layers_of(LayerKind::Indexed).iter().position(|&l| l as u64 == layer)
    }

    /// Whether HCA alone retrieves the needle in this stack.
    pub fn hca_retrieves(&self) -> bool {
        self.hca == HcaReading::Retrieves && self.count(LayerKind::Dense) > 0
    }

    /// The share of a dense (HCA) row's softmax gate weight that a needle of
    /// `needle_tokens` tokens carries when its gate logits are raised by
    /// `gate_boost` over the row's other tokens (equal gate biases): n·e^b /
    /// (n·e^b + r − n) for ratio r. None without dense layers.
    pub fn dense_needle_share(&self, needle_tokens: u64, gate_boost: f64) -> Option<f64> {
        let ratio = self.dense_ratio()?;
        let n = needle_tokens.min(ratio) as f64;
        let boosted = n * gate_boost.exp();
        Some(boosted / (boosted + ratio as f64 - n))
    }

    /// [`Self::describe`] and the needle's share of an HCA row as TOML
    /// comments (what `presets show` appends: the output still parses).
    pub fn toml_comment(&self, needle_tokens: u64, gate_boost: f64) -> String {
        let mut out = format!("# The stack: {}\n", self.describe().replace('\n', "\n#"));
        if let Some(share) = self.dense_needle_share(needle_tokens, gate_boost) {
            out.push_str(&format!(
                "# An HCA row pools its tokens by softmax gates: the needle's {needle_tokens} tokens carry {:.1} % of\n\
                 # their row's gate weight (needle_gate_boost {gate_boost}; stack.hca = {}).\n",
                100.0 * share,
                self.hca.name()
            ));
        }
        out
    }

    /// The ratio of the first HCA layer, None without one.
    pub fn dense_ratio(&self) -> Option<u64> {
        self.plan.layers().iter().find_map(|l| match *l {
            PlanLayer::Dense { ratio } => Some(ratio),
            _ => None,
        })
    }

    /// The compress ratio of layer `l` (0 for a layer without rows; a
    /// reusing layer's is its source's).
    pub fn ratio_of(&self, l: usize) -> u64 {
        self.plan.ratio_of(l)
    }

    /// The model's layers of one kind, by layer number.
    pub fn layers_of(&self, kind: LayerKind) -> Vec<usize> {
        (0..self.plan.len()).filter(|&l| self.kind_of(l) == kind).collect()
    }

    /// [`Self::layers_of`] as text: `2, 4, …, 42`.
    pub fn layer_list(&self, kind: LayerKind) -> String {
        layer_numbers(&self.layers_of(kind))
    }

    /// One paragraph per kind of layer, with the layer numbers:
    /// `21 indexed (ratio 4): 2, 4, …, 42`.
    pub fn describe(&self) -> String {
        let mut out = format!("{} layers", self.plan.len());
        for (kind, label) in [
            (LayerKind::WindowOnly, "raw window only"),
            (LayerKind::Linear, "linear attention"),
            (LayerKind::Indexed, "indexed"),
            (LayerKind::Reused, "reusing a selection"),
            (LayerKind::Dense, "dense (HCA)"),
        ] {
            let layers = self.layers_of(kind);
            if layers.is_empty() {
                continue;
            }
            let ratios: Vec<u64> = layers.iter().map(|&l| self.ratio_of(l)).collect();
            let mut by_ratio: Vec<u64> = ratios.clone();
            by_ratio.sort_unstable();
            by_ratio.dedup();
            if kind == LayerKind::Linear {
                out.push_str(&format!("\n  {} {label}: {}", layers.len(), layer_numbers(&layers)));
            } else if by_ratio.len() == 1 {
                out.push_str(&format!("\n  {} {label}, ratio {}: {}", layers.len(), by_ratio[0], layer_numbers(&layers)));
            } else {
                for r in by_ratio {
                    let at: Vec<usize> = layers.iter().zip(&ratios).filter(|(_, &x)| x == r).map(|(&l, _)| l).collect();
                    out.push_str(&format!("\n  {} {label}, ratio {r}: {}", at.len(), layer_numbers(&at)));
                }
            }
        }
        let reusers = self.plan.reusers();
        if reusers.iter().any(|r| !r.is_empty()) {
            let parts: Vec<String> = self
                .plan
                .indexers()
                .iter()
                .zip(&reusers)
                .filter(|(_, r)| !r.is_empty())
                .map(|(i, r)| format!("{i} → {}", layer_numbers(r)))
                .collect();
            out.push_str(&format!("\n  selections reused: {}", parts.join("; ")));
        }
        let early = self.early_indexers();
        if early > 0 {
            let layers = &self.layers_of(LayerKind::Indexed)[..early];
            out.push_str(&format!(
                "\n  early profile, token correlation {} (the others {}): indexer layers {}",
                self.early_token_correlation,
                self.token_correlation,
                layer_numbers(layers)
            ));
        }
        if let (Some(c), Some(source)) = (self.candidates, self.candidate_source()) {
            let consumers = self.indexed_layers() - source - 1;
            out.push_str(&format!(
                "\n  candidate stage: layer {} keeps {} blocks of {} rows; the {consumers} indexer layers after it select inside them",
                c.source_layer, c.blocks, c.block_rows
            ));
        }
        out
    }
}

/// `0, 1` or `0, 1, 3, 5, …, 59`: arithmetic runs of more than three
/// numbers shortened to their first two and last.
fn layer_numbers(layers: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut end = i + 1;
        if i + 1 < layers.len() {
            let step = layers[i + 1] - layers[i];
            while end < layers.len() && layers[end] - layers[end - 1] == step {
                end += 1;
            }
        }
        if end - i > 3 {
            parts.push(format!("{}, {}, …, {}", layers[i], layers[i + 1], layers[end - 1]));
            i = end;
        } else {
            parts.push(layers[i].to_string());
            i += 1;
        }
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(text: &str, indexed_ratio: u64) -> WholeModel {
        WholeModel {
            plan: LayerPlan::from_compress_ratios(text, indexed_ratio).unwrap(),
            layer_correlation: 0.9,
            token_correlation: 0.98,
            early_layers: 0,
            early_token_correlation: 0.0,
            fault_token_correlation: DEFAULT_FAULT_TOKEN_CORRELATION,
            question_tokens: 16,
            answer_tokens: 4,
            quorum: 1,
            hca: HcaReading::Blind,
            fault_spread: FaultSpreadChoice::Catalogue,
            candidates: None,
            harm: LostLayerHarm::default(),
        }
    }

    /// The candidate stage's block rule against blocks of explicit uniform
    /// row scores: 201 rows in 26 blocks of 8 (the newest one partial and
    /// always kept), the needle in row 50, a needle that a share u of rows
    /// outscores. Both sides are Monte Carlo over 40,000 draws; the
    /// tolerance is the 99.9 % interval of the difference of two binomial
    /// shares.
    #[test]
    fn the_needle_block_rule_matches_blocks_of_explicit_rows() {
        use crate::base::rng;
        use rand::Rng;
        let (rows, needle_row, n) = (201u64, 50u64, 40_000usize);
        let stage = CandidateStage { source_layer: 0, blocks: 12, block_rows: 8 };
        for (case, &u) in [0.06, 0.075, 0.09].iter().enumerate() {
            let mut r = rng::stream(7, &[case as u64]);
            let (mut explicit, mut rule) = (0usize, 0usize);
            for _ in 0..n {
                let needle = 1.0 - u;
                let scores: Vec<f64> = (0..rows).map(|i| if i == needle_row { needle } else { r.random::<f64>() }).collect();
                let best: Vec<f64> = scores.chunks(8).map(|b| b.iter().copied().fold(f64::MIN, f64::max)).collect();
                let (own, last) = (best[(needle_row / 8) as usize], best.len() - 1);
                let above = (0..last).filter(|&b| b != (needle_row / 8) as usize && best[b] > own).count() as u64;
                explicit += usize::from(above < stage.blocks - 1);
                rule += usize::from(stage.keeps_needle_block(rows, needle_row, u, 0, r.random(), r.random()));
            }
            let (a, b) = (explicit as f64 / n as f64, rule as f64 / n as f64);
            let p = 0.5 * (a + b);
            let tol = 3.29 * (2.0 * p * (1.0 - p) / n as f64).sqrt();
            assert!(p > 0.05 && p < 0.95, "u {u}: kept {p} is not informative");
            assert!((a - b).abs() <= tol, "u {u}: explicit {a} vs rule {b} (tolerance {tol})");
        }
        // Every block a candidate, the newest block, a certain loss.
        assert!(stage.keeps_needle_block(96, 0, 1.0, 0, 0.5, 0.5));
        assert!(stage.keeps_needle_block(rows, 200, 1.0, 0, 0.5, 0.5));
        assert!(!stage.keeps_needle_block(rows, 0, 1.0, 0, 0.5, 0.5));
        assert!(!stage.keeps_needle_block(rows, 0, 1e-9, 11, 0.5, 0.5));
        assert!(stage.keeps_needle_block(rows, 0, 1e-9, 10, 0.5, 0.5));
        // Sound for degenerate stages.
        let none = CandidateStage { source_layer: 0, blocks: 0, block_rows: 0 };
        assert!(!none.keeps_needle_block(rows, 0, 0.5, 0, 0.5, 0.5));
    }

    #[test]
    fn the_v4_flash_stack_parses_to_its_configuration() {
        // V4-Flash: layers 0-1 window only, CSA on even layers 2…42, HCA on odd 3…41.
        let s = stack("0*2, (4, 128)*20, 4", 4);
        assert_eq!(s.plan.len(), 43);
        assert_eq!(s.indexed_layers(), 21);
        assert_eq!(s.count(LayerKind::Dense), 20);
        assert_eq!(s.count(LayerKind::WindowOnly), 2);
        assert!((2..43).step_by(2).all(|l| s.ratio_of(l) == 4));
        assert!((3..43).step_by(2).all(|l| s.ratio_of(l) == 128));
        assert_eq!(
            s.describe(),
            "43 layers\n  2 raw window only, ratio 0: 0, 1\n  21 indexed, ratio 4: 2, 4, …, 42\n  20 dense (HCA), ratio 128: 3, 5, …, 41"
        );
        assert_eq!(layer_numbers(&[0, 1, 3, 5, 7, 9]), "0, 1, 3, …, 9");
        assert_eq!(layer_numbers(&[0, 1, 2, 5]), "0, 1, 2, 5");
        assert!(!s.hca_retrieves());
        // 4 tokens, boost 2: 4e² / (4e² + 124) = 0.1925…
        let share = s.dense_needle_share(4, 2.0).unwrap();
        assert!((share - 4.0 * 2f64.exp() / (4.0 * 2f64.exp() + 124.0)).abs() < 1e-12 && (share - 0.1925).abs() < 1e-3, "{share}");
        assert_eq!(stack("1*61", 1).dense_needle_share(4, 2.0), None);
        assert!(WholeModel { hca: HcaReading::Retrieves, ..s.clone() }.hca_retrieves());
        assert!(!WholeModel { hca: HcaReading::Retrieves, ..stack("1*61", 1) }.hca_retrieves());
    }

    #[test]
    fn the_early_profile_maps_by_model_layer() {
        // V3.2: indexers in every layer, so layers 0 and 1 are early; V4-Flash:
        // layers 0-1 are raw window only, so no indexer layer is.
        let early = |text: &str, ratio: u64| WholeModel { early_layers: 2, early_token_correlation: 0.1, ..stack(text, ratio) };
        let v32 = early("1*61", 1);
        assert_eq!(v32.early_indexers(), 2);
        assert_eq!((v32.token_correlation_of(0), v32.token_correlation_of(1), v32.token_correlation_of(2)), (0.1, 0.1, 0.98));
        assert!(
            v32.describe().ends_with("early profile, token correlation 0.1 (the others 0.98): indexer layers 0, 1"),
            "{}",
            v32.describe()
        );
        let flash = early("0*2, (4, 128)*20, 4", 4);
        assert_eq!(flash.early_indexers(), 0);
        assert_eq!(flash.token_correlation_of(0), 0.98);
        assert!(!flash.describe().contains("early"));
        // One profile without early layers.
        assert_eq!(stack("1*61", 1).early_indexers(), 0);
    }

    #[test]
    fn bad_stacks_say_what_is_wrong() {
        let ratios =
            |t: &str| LayerPlan::from_compress_ratios(t, 4).map(|p| (0..p.len()).map(|l| stack(t, 4).ratio_of(l)).collect::<Vec<u64>>());
        assert_eq!(ratios(" 0 * 2 , ( 4 , 128 ) * 2 ").unwrap(), vec![0, 0, 4, 128, 4, 128]);
        assert_eq!(ratios("4,,4").unwrap_err(), "expected a number at character 3, found ','");
        assert_eq!(ratios("(4,128*2").unwrap_err(), "missing ) at the end");
        assert_eq!(ratios("(4 128)").unwrap_err(), "expected ) at character 4, found '1'");
        assert_eq!(ratios("4*0").unwrap_err(), "repeat count 0: from 1 to 4096 layers in all");
        assert!(ratios("4*99999999999999999999").unwrap_err().starts_with("number too large"));
        assert!(ratios("(4*4096,4)").unwrap_err().starts_with("more than 4096"));
        assert_eq!(ratios("4)").unwrap_err(), "unexpected ')' at character 2");
        assert_eq!(ratios("").unwrap_err(), "expected a number at the end");
        assert_eq!(ratios("((((((4))))))").unwrap_err(), "groups nested more than 4 deep");
        assert_eq!(ratios("1, 2 ,3").unwrap(), vec![1, 2, 3]);
    }
}

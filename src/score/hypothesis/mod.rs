//! The hypothesis catalogue: named changes to the pipeline that stand for a
//! real bug or a design choice, applied on top of a precision variant
//! (`fp8+no-hadamard`, `fp8+topk=1024+ties-lowest`). A hypothesis changes
//! how the pipeline computes, never a recall number; the result is an
//! ordinary [`PrecisionVariant`] with its own name, so every output works
//! unchanged.
//!
//! Each hypothesis is one [`HypothesisInfo`] entry in the file of its group
//! (`numerics`, `cache`, `selection`, `position`): its name, class, the
//! setting it decides, how its value is read, how it changes a variant and
//! its long documentation. The listing, `hypotheses show`, Python and
//! docs/HYPOTHESES.md ([`markdown`]) are all derived from the entries.

mod cache;
mod docs;
mod numerics;
mod position;
mod selection;

pub use docs::markdown;

use crate::base::units::parse_size;
use crate::model::stack::FaultSpread;
use crate::numerics::key_cache::{Fp8Flavour, PageLayoutFault, ScaleSpan, ScaleWordFault, FIRST_BLOCK_PAST_2_31, PAGE_ROWS};
use crate::numerics::pipeline::{LogitFormat, Rotation};
use crate::score::selection::{NanOrder, TieRule};
use crate::score::variant::{ChunkVisibility, LayerSubset, PrecisionVariant};
use std::fmt;

/// Which part of the pipeline a hypothesis changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Numerics,
    CacheLayout,
    Selection,
    Position,
}

impl Group {
    /// In the order of the catalogue and of docs/HYPOTHESES.md.
    pub const ALL: [Group; 4] = [Group::Numerics, Group::CacheLayout, Group::Selection, Group::Position];

    pub fn name(self) -> &'static str {
        match self {
            Group::Numerics => "numerics",
            Group::CacheLayout => "cache-layout",
            Group::Selection => "selection",
            Group::Position => "position",
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kind of failure a hypothesis stands for, as `diagnose` reports it
/// (docs/OBSERVATIONS.md, "Classes"): what the fault does to the
/// information the indexer has about the needle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultClass {
    /// No fault.
    Healthy,
    /// Scores carry no information about the needle and ties fall in random
    /// order: the needle is kept about k times in N.
    RandomLoss,
    /// Scores tie and the tie order is by row index: kept or lost by depth.
    IndexTies,
    /// Scores keep part of the information (a coarser scale, a format, a
    /// partly wrong position): recall falls below healthy, smoothly.
    Partial,
    /// The cache's writer and reader disagree about where codes and scales
    /// live, or which rows are read.
    Layout,
    /// The fault acts in some indexer layers only.
    LayerSubset,
    /// Chunked prefill hides rows from the indexer.
    Schedule,
}

impl FaultClass {
    pub const ALL: [FaultClass; 7] = [
        FaultClass::Healthy,
        FaultClass::RandomLoss,
        FaultClass::IndexTies,
        FaultClass::Partial,
        FaultClass::Layout,
        FaultClass::LayerSubset,
        FaultClass::Schedule,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultClass::Healthy => "healthy",
            FaultClass::RandomLoss => "random-loss",
            FaultClass::IndexTies => "index-ties",
            FaultClass::Partial => "partial",
            FaultClass::Layout => "layout",
            FaultClass::LayerSubset => "layer-subset",
            FaultClass::Schedule => "schedule",
        }
    }

    /// One line for tables.
    pub fn about(self) -> &'static str {
        match self {
            FaultClass::Healthy => "a healthy indexer",
            FaultClass::RandomLoss => "information destroyed, ties in random order",
            FaultClass::IndexTies => "information destroyed, ties in row-index order",
            FaultClass::Partial => "information partly kept",
            FaultClass::Layout => "cache writer and reader disagree",
            FaultClass::LayerSubset => "a fault in some layers only",
            FaultClass::Schedule => "chunked prefill hides or garbles rows",
        }
    }

    /// How severe, for a composite: the most severe part names it.
    fn severity(self) -> u8 {
        match self {
            FaultClass::Healthy => 0,
            FaultClass::Partial => 1,
            FaultClass::Layout => 2,
            FaultClass::Schedule => 3,
            FaultClass::RandomLoss => 4,
            FaultClass::IndexTies => 5,
            FaultClass::LayerSubset => 6,
        }
    }
}

impl fmt::Display for FaultClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The class of a candidate `h1+h2…` (hypotheses only, no base variant):
/// a tie maker that makes every logit equal with an index tie order is
/// `IndexTies`; otherwise the most severe part's class.
pub fn candidate_class(candidate: &str) -> FaultClass {
    let parts: Vec<Hypothesis> = candidate.split('+').filter_map(|p| Hypothesis::parse(p).ok()).collect();
    if parts.is_empty() {
        return FaultClass::Healthy;
    }
    let all_tie = parts.iter().any(|h| h.every_logit_ties());
    let index_order = parts.iter().any(|h| matches!(h.info.role, Role::TieOrder));
    let base = parts.iter().map(Hypothesis::class).max_by_key(|c| c.severity()).unwrap_or(FaultClass::Healthy);
    // A length gate (longer-than=T) says when the rest acts: the composite
    // is a prefill schedule fault, whatever its content.
    let gated = parts.iter().any(|h| matches!(h.info.role, Role::LengthGate));
    if gated && base != FaultClass::LayerSubset {
        return FaultClass::Schedule;
    }
    if all_tie && index_order && base != FaultClass::LayerSubset {
        FaultClass::IndexTies
    } else {
        base
    }
}

/// A hypothesis's value after `=` (`Value::None` for one without).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    None,
    /// Rows, tokens, blocks, bits or parts per million, as the entry says.
    Count(u64),
    Real(f64),
    Layers(LayerSubset),
}

impl Value {
    fn count(self) -> u64 {
        match self {
            Value::Count(n) => n,
            _ => 0,
        }
    }

    fn real(self) -> f64 {
        match self {
            Value::Real(x) => x,
            _ => f64::NAN,
        }
    }

    fn layers(self) -> LayerSubset {
        match self {
            Value::Layers(set) => set,
            _ => LayerSubset::All,
        }
    }
}

/// What a hypothesis does to ties, or to when the others act: what
/// `diagnose` and [`candidate_class`] read beyond the class.
#[derive(Clone, Copy, Debug)]
pub enum Role {
    None,
    /// Makes some logits tie, so `diagnose`'s `all` also tries it with
    /// each index tie order.
    SomeTies,
    /// Makes every logit tie (every row scores the same).
    EveryTie,
    /// Makes every logit tie at the values the function accepts.
    EveryTieWhen(fn(Value) -> bool),
    /// Sets an index tie order.
    TieOrder,
    /// Says in which prompts the other hypotheses act.
    LengthGate,
}

/// Reads a hypothesis's value (the text after `=`, trimmed).
pub type ParseValue = fn(&str) -> Result<Value, String>;

/// One catalogue entry: everything about one hypothesis.
#[derive(Clone, Copy, Debug)]
pub struct HypothesisInfo {
    /// As written after `+` (`topk=N` for a parametrized one).
    pub name: &'static str,
    pub group: Group,
    /// One line for listings.
    pub summary: &'static str,
    /// What exactly the pipeline does differently.
    pub changes: &'static str,
    /// The real bug or choice it stands for, with its source, or "hypothetical".
    pub stands_for: &'static str,
    /// The symptom we expect (to be checked by simulation).
    pub expected: &'static str,
    /// A scenario setting it needs, if any.
    pub requires: Option<&'static str>,
    /// Whether it acts identically in every layer (shared code, cache layout
    /// or kernel) or independently in each; `--fault-layers` overrides
    /// (docs/MODEL.md, "Faults across layers").
    pub layers: FaultSpread,
    /// What kind of failure it is (`diagnose` reports classes) …
    pub class: FaultClass,
    /// … unless its value decides that.
    pub class_of: Option<fn(Value) -> FaultClass>,
    /// The setting it decides: two hypotheses deciding the same one
    /// cannot be combined.
    pub setting: &'static str,
    pub role: Role,
    /// Reads the value after `=` (trimmed); None for a hypothesis without one.
    pub parse: Option<ParseValue>,
    /// Changes a variant as the hypothesis says, or says why it cannot
    /// (when it would change nothing about that variant).
    pub apply: fn(Value, &mut PrecisionVariant) -> Result<(), String>,
    /// Another entry whose section of docs/HYPOTHESES.md documents this one too.
    pub documented_with: Option<&'static str>,
    /// Its section of docs/HYPOTHESES.md (Markdown): mechanism, sources,
    /// expected signature, how it is tested.
    pub doc: &'static str,
}

impl HypothesisInfo {
    /// The name without its `=VALUE` placeholder.
    pub fn bare_name(&self) -> &'static str {
        self.name.split('=').next().unwrap_or(self.name)
    }
}

/// The entries of every group, one after another.
const fn concat<const N: usize>(groups: [&[HypothesisInfo]; 4]) -> [HypothesisInfo; N] {
    let mut out = [groups[0][0]; N];
    let (mut g, mut at) = (0, 0);
    while g < groups.len() {
        let mut i = 0;
        while i < groups[g].len() {
            out[at] = groups[g][i];
            (i, at) = (i + 1, at + 1);
        }
        g += 1;
    }
    assert!(at == N, "the catalogue's length is the sum of its groups'");
    out
}

const GROUPS: [&[HypothesisInfo]; 4] = [numerics::ENTRIES, cache::ENTRIES, selection::ENTRIES, position::ENTRIES];
const COUNT: usize = numerics::ENTRIES.len() + cache::ENTRIES.len() + selection::ENTRIES.len() + position::ENTRIES.len();
const ALL_ENTRIES: [HypothesisInfo; COUNT] = concat(GROUPS);

/// Every hypothesis, in listing order (group by group).
pub const CATALOGUE: &[HypothesisInfo] = &ALL_ENTRIES;

/// Names of every hypothesis, comma-separated, for error messages.
pub fn names() -> String {
    CATALOGUE.iter().map(|h| h.name).collect::<Vec<_>>().join(", ")
}

/// Every field of an entry, one per paragraph (`dsa-recall hypotheses show`).
pub fn long_text(h: &HypothesisInfo) -> String {
    let mut text = format!(
        "{} ({})\n  {}\n  changes: {}\n  stands for: {}\n  expected: {}\n",
        h.name, h.group, h.summary, h.changes, h.stands_for, h.expected
    );
    if let Some(r) = h.requires {
        text.push_str(&format!("  requires: {r}\n"));
    }
    text.push_str(&format!("  class: {} ({})\n", h.class.name(), h.class.about()));
    text.push_str(&format!("  across layers: {} (--fault-layers overrides)\n", h.layers.name()));
    text.push_str("  use: --precisions fp8,fp8+NAME (docs/HYPOTHESES.md)\n".replace("NAME", h.name).as_str());
    text
}

/// One line a person reads beside a candidate's code name: each part's
/// catalogue summary, joined by "; " (healthy for the empty candidate).
pub fn candidate_summary(candidate: &str) -> String {
    let parts: Vec<&str> = candidate.split('+').map(str::trim).filter(|p| !p.is_empty()).collect();
    let lines: Vec<&str> = parts.iter().filter_map(|p| info(p)).map(|h| h.summary).collect();
    if lines.is_empty() {
        FaultClass::Healthy.about().to_string()
    } else {
        lines.join("; ")
    }
}

/// The catalogue entry named `name` (`topk=N` and `topk` both find `topk=N`).
pub fn info(name: &str) -> Option<&'static HypothesisInfo> {
    let bare = name.split('=').next().unwrap_or(name);
    CATALOGUE.iter().find(|h| h.name == name || h.bare_name() == bare)
}

/// Hypotheses that make logits tie (diagnose's `all` tries each with both
/// index tie orders, since the tie rule decides what they select).
pub fn tie_makers() -> impl Iterator<Item = &'static HypothesisInfo> {
    CATALOGUE.iter().filter(|h| matches!(h.role, Role::SomeTies | Role::EveryTie))
}

/// The smallest cache pool (tokens) of `offset-32bit=POOL` with a block
/// past 2^31 bytes: one block more than the first such block.
pub const MIN_32BIT_POOL: u64 = (FIRST_BLOCK_PAST_2_31 + 1) * PAGE_ROWS as u64;
/// The largest pool accepted (2^40 tokens, 8.4 PiB of indexer cache).
pub const MAX_32BIT_POOL: u64 = 1 << 40;

/// A parsed hypothesis: its entry and its value.
#[derive(Clone, Copy, Debug)]
pub struct Hypothesis {
    pub info: &'static HypothesisInfo,
    pub value: Value,
}

impl Hypothesis {
    /// Parses one `+`-separated part: a catalogue name, or `NAME=VALUE`
    /// for a parametrized one (`topk=1024`, K/M suffixes where the entry
    /// reads a size). The error says what is allowed.
    pub fn parse(text: &str) -> Result<Hypothesis, String> {
        let text = text.trim();
        let unknown = || format!("unknown hypothesis {text:?}; known: {}", names());
        let (key, value) = match text.split_once('=') {
            Some((key, value)) => (key.trim(), Some(value.trim())),
            None => (text, None),
        };
        let info = CATALOGUE.iter().find(|h| h.bare_name() == key).ok_or_else(unknown)?;
        let value = match (info.parse, value) {
            (None, None) => Value::None,
            (Some(parse), Some(value)) => parse(value)?,
            (Some(_), None) => return Err(format!("{text} needs a value: {text}=N")),
            (None, Some(_)) => return Err(unknown()),
        };
        Ok(Hypothesis { info, value })
    }

    /// The setting this hypothesis decides; two hypotheses deciding the same
    /// setting cannot be combined.
    pub fn setting(self) -> &'static str {
        self.info.setting
    }

    /// Its class at its value.
    pub fn class(&self) -> FaultClass {
        self.info.class_of.map_or(self.info.class, |f| f(self.value))
    }

    /// Whether it makes every logit tie at its value.
    pub fn every_logit_ties(&self) -> bool {
        match self.info.role {
            Role::EveryTie => true,
            Role::EveryTieWhen(f) => f(self.value),
            _ => false,
        }
    }

    /// Changes `variant` as this hypothesis says, or says why it cannot
    /// (when it would change nothing about this variant).
    pub fn apply(self, v: &mut PrecisionVariant) -> Result<(), String> {
        (self.info.apply)(self.value, v)
    }
}

/// How the faults of the variant named `name` (`base+h1+h2…`) act across
/// layers: None without a hypothesis, Independent when any of them is.
pub fn variant_spread(name: &str) -> Option<FaultSpread> {
    let spreads: Vec<FaultSpread> = name.split('+').skip(1).filter_map(|part| info(part.trim())).map(|h| h.layers).collect();
    if spreads.is_empty() {
        None
    } else if spreads.contains(&FaultSpread::Independent) {
        Some(FaultSpread::Independent)
    } else {
        Some(FaultSpread::Shared)
    }
}

/// `base+h1+h2…`: `base` with each hypothesis applied in order, named
/// `text`. `lookup` finds a base variant by name. Errors are one line.
pub fn compose(text: &str, lookup: impl Fn(&str) -> Option<PrecisionVariant>) -> Result<PrecisionVariant, String> {
    let mut parts = text.split('+').map(str::trim);
    let base_name = parts.next().unwrap_or_default();
    let mut v = lookup(base_name).ok_or_else(|| format!("unknown precision variant {base_name:?} before the first +"))?;
    let mut applied: Vec<(Hypothesis, &str)> = Vec::new();
    for part in parts {
        let h = Hypothesis::parse(part)?;
        if let Some((_, earlier)) = applied.iter().find(|(e, _)| e.setting() == h.setting()) {
            return Err(format!("{earlier} and {part} both set {}: give one", h.setting()));
        }
        h.apply(&mut v)?;
        applied.push((h, part));
    }
    v.name = text.trim().to_string();
    Ok(v)
}

#[cfg(test)]
mod tests;

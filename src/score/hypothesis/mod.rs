//! The hypothesis catalogue: named changes to the pipeline that stand for a
//! real bug or a design choice, applied on top of a precision variant
//! (`fp8+no-hadamard`, `fp8+topk=1024+ties-lowest`). A hypothesis changes
//! how the pipeline computes, never a recall number; the result is an
//! ordinary [`PrecisionVariant`] with its own name, so every output works
//! unchanged.
//!
//! Each hypothesis is one [`HypothesisInfo`] entry in the file of its group
//! (`numerics`, `cache`, `selection`, `position`, `address`, `after`): its name, class, the
//! setting it decides, how its value is read, how it changes a variant and
//! its long documentation. The listing, `hypotheses show`, Python and
//! docs/HYPOTHESES.md ([`markdown`]) are all derived from the entries.

mod address;
mod after;
mod cache;
mod catalogue;
mod docs;
mod entry;
mod numerics;
mod position;
mod selection;

pub use cache::{MAX_32BIT_POOL, MIN_32BIT_POOL};
pub use catalogue::{info, names, tie_makers, CATALOGUE};
pub use docs::markdown;
pub use entry::{FaultClass, Group, HypothesisInfo, ParseValue, Role, Value};

use crate::model::stack::FaultSpread;
use crate::score::variant::PrecisionVariant;

/// Whether the candidate `h` is an after-selection loss (`loss`,
/// `loss-by-length`): scored on the healthy simulation, never composed.
pub fn after_selection(h: &str) -> bool {
    info(h.trim()).is_some_and(|i| i.group == Group::AfterSelection)
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
    let usage = if h.group == Group::AfterSelection {
        "  use: dsa-recall diagnose --hypotheses NAME (a sweep has nothing to simulate; docs/HYPOTHESES.md)\n"
    } else {
        "  use: --precisions fp8,fp8+NAME (docs/HYPOTHESES.md)\n"
    };
    text.push_str(usage.replace("NAME", h.name).as_str());
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

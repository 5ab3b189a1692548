//! What a catalogue entry is: its group, class, value, role and fields.

use crate::model::stack::FaultSpread;
use crate::score::variant::{LayerSubset, PrecisionVariant};
use std::fmt;

/// Which part of the pipeline a hypothesis changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Numerics,
    CacheLayout,
    Selection,
    Position,
    /// Which rows the indexer's addresses reach (a bound set by position or geometry).
    AddressSpace,
    /// After the selection: the answer lost where the indexer is not involved.
    AfterSelection,
}

impl Group {
    /// In the order of the catalogue and of docs/HYPOTHESES.md.
    pub const ALL: [Group; 6] =
        [Group::Numerics, Group::CacheLayout, Group::Selection, Group::Position, Group::AddressSpace, Group::AfterSelection];

    pub fn name(self) -> &'static str {
        match self {
            Group::Numerics => "numerics",
            Group::CacheLayout => "cache-layout",
            Group::Selection => "selection",
            Group::Position => "position",
            Group::AddressSpace => "address-space",
            Group::AfterSelection => "after-selection",
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
    /// The indexer's addresses do not reach every row: rows past a bound
    /// set by position or the deployment's geometry are dropped, zero or
    /// read from other rows.
    AddressSpace,
    /// The fault acts in some indexer layers only.
    LayerSubset,
    /// Chunked prefill hides rows from the indexer.
    Schedule,
    /// The selection is healthy: the answer is lost after it, with a
    /// probability that does not depend on whether the needle was selected.
    NotSelection,
}

impl FaultClass {
    pub const ALL: [FaultClass; 9] = [
        FaultClass::Healthy,
        FaultClass::RandomLoss,
        FaultClass::IndexTies,
        FaultClass::Partial,
        FaultClass::Layout,
        FaultClass::AddressSpace,
        FaultClass::LayerSubset,
        FaultClass::Schedule,
        FaultClass::NotSelection,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultClass::Healthy => "healthy",
            FaultClass::RandomLoss => "random-loss",
            FaultClass::IndexTies => "index-ties",
            FaultClass::Partial => "partial",
            FaultClass::Layout => "layout",
            FaultClass::AddressSpace => "address-space",
            FaultClass::LayerSubset => "layer-subset",
            FaultClass::Schedule => "schedule",
            FaultClass::NotSelection => "not-selection",
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
            FaultClass::AddressSpace => "rows past an address bound dropped or misread",
            FaultClass::LayerSubset => "a fault in some layers only",
            FaultClass::Schedule => "chunked prefill hides or garbles rows",
            FaultClass::NotSelection => "selection healthy, the answer lost after it",
        }
    }

    /// One plain sentence on what a verdict naming this class says
    /// happened (the text table prints it under the verdict); c is the
    /// compress ratio, W the raw window.
    pub fn meaning(self) -> &'static str {
        match self {
            FaultClass::Healthy => {
                "the needle is lost no more often than by a correct indexer, whose exact scores rank it below the k kept rows now and then"
            }
            FaultClass::RandomLoss => {
                "the scores no longer tell rows apart, so the k rows kept are a random draw: recall falls to about k over the candidate rows as the context grows; a correct cache does not do this"
            }
            FaultClass::IndexTies => {
                "the selection degenerated to the first or last k rows, a window of k·c+W tokens: the needle is found only inside it; a correct cache does not do this"
            }
            FaultClass::Partial => {
                "the scores keep part of their information (a coarser number format, a wrong scale): the needle is lost more often than by a correct indexer, more so at long contexts, but not always"
            }
            FaultClass::Layout => {
                "the cache's writer and reader disagree on where key bytes or scales sit, so the indexer scores other keys than were written: recall collapses beyond the rows the mix-up leaves intact"
            }
            FaultClass::AddressSpace => {
                "the indexer cannot address every row of its cache: past a bound set by the deployment's geometry (block-table width, slot capacity, workspace size) rows are dropped, read as zeros or read from other rows, so the needle is lost past an absolute position, whatever k"
            }
            FaultClass::LayerSubset => {
                "the fault acts in some indexer layers only and the others still select correctly, so whole-model recall falls less than one faulty layer's"
            }
            FaultClass::Schedule => {
                "chunked prefill hides rows from the indexer or garbles them: the loss follows where the needle falls against the chunk boundaries, not k"
            }
            FaultClass::NotSelection => {
                "the indexer keeps the needle as a correct one does, and the answer is lost after the selection (router, decode kernel, sampling or parsing) at a rate that does not depend on it"
            }
        }
    }

    /// How severe, for a composite: the most severe part names it.
    pub(super) fn severity(self) -> u8 {
        match self {
            FaultClass::Healthy => 0,
            FaultClass::Partial => 1,
            FaultClass::Layout => 2,
            FaultClass::AddressSpace => 3,
            FaultClass::Schedule => 4,
            FaultClass::RandomLoss => 5,
            FaultClass::IndexTies => 6,
            FaultClass::LayerSubset => 7,
            // Never composed (an after-selection loss stands alone).
            FaultClass::NotSelection => 8,
        }
    }
}

impl fmt::Display for FaultClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
    pub(super) fn count(self) -> u64 {
        match self {
            Value::Count(n) => n,
            _ => 0,
        }
    }

    pub(super) fn real(self) -> f64 {
        match self {
            Value::Real(x) => x,
            _ => f64::NAN,
        }
    }

    pub(super) fn layers(self) -> LayerSubset {
        match self {
            Value::Layers(set) => set,
            _ => LayerSubset::All,
        }
    }
}

/// What a hypothesis does to ties, or to when the others act: what
/// `diagnose` and [`super::candidate_class`] read beyond the class.
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

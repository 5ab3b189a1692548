//! What a sweep runs: its grid dealt into work units of one (depth,
//! context) pair, the units a shard owns, and the haystack groups they form
//! (the units of one depth, whose trials all their contexts share).

use crate::config::Scenario;
use crate::error::ConfigError;
use crate::estimate::driver::GroupKey;
use crate::run::cell::CellResult;
use serde::{Deserialize, Serialize};

/// The I-th (1-based) of N disjoint parts of a sweep's grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Parses `I/N` with 1 ≤ I ≤ N ≤ 100000.
    pub fn parse(text: &str) -> Result<Shard, ConfigError> {
        let bad = || ConfigError::new("--shard", format!("{text:?}"), "I/N with 1 ≤ I ≤ N ≤ 100000, e.g. 2/8");
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if index == 0 || index > count || count > 100_000 {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether this shard owns work unit `unit` (units dealt round-robin in
    /// sweep order, which spreads long and short contexts evenly).
    pub fn owns(&self, unit: usize) -> bool {
        unit % self.count as usize == (self.index - 1) as usize
    }
}

/// Key rows one thread scores per second, roughly (measured on an x86
/// core: a V4-Flash sweep of 128K and 256K tokens, fp8 and bf16, about 1.1
/// to 1.8 million): enough to tell a minute from a day before a run starts.
pub const ROWS_PER_SECOND_PER_THREAD: f64 = 1.5e6;

/// The units of work of a scenario in sweep order: (depth, context).
pub fn work_units(s: &Scenario) -> Vec<(f64, u64)> {
    s.depths.iter().flat_map(|&d| s.contexts.iter().map(move |&c| (d, c))).collect()
}

/// Cells of one (depth, context) unit: every needle offset, k and precision.
pub fn cells_per_unit(s: &Scenario) -> usize {
    s.needle_offsets.len() * s.topks.len() * s.precisions.len()
}

/// A sweep's work: the haystack groups of its part of the grid in sweep
/// order, and the cells of the first of them that an earlier run finished.
#[derive(Clone, Debug)]
pub struct Plan<'a> {
    pub scenario: &'a Scenario,
    pub shard: Option<Shard>,
    pub groups: Vec<GroupKey>,
    /// Cells of `groups[..groups_done]`, kept from an earlier run.
    pub done: Vec<CellResult>,
    pub groups_done: usize,
}

impl<'a> Plan<'a> {
    /// The whole grid of `s`, or the units `shard` owns.
    pub fn new(s: &'a Scenario, shard: Option<Shard>) -> Plan<'a> {
        let units: Vec<(f64, u64)> =
            work_units(s).into_iter().enumerate().filter(|(i, _)| shard.is_none_or(|sh| sh.owns(*i))).map(|(_, u)| u).collect();
        let mut groups: Vec<GroupKey> = Vec::new();
        for (depth, context) in units {
            match groups.last_mut() {
                Some(g) if g.depth_percent == depth => g.contexts.push(context),
                _ => groups.push(GroupKey { depth_percent: depth, contexts: vec![context], shared_depths: Vec::new() }),
            }
        }
        Plan { scenario: s, shard, groups, done: Vec::new(), groups_done: 0 }
    }

    /// The whole grid of `s` as one haystack group: every depth on the
    /// same trials, seeded by the first depth's value. Common random numbers
    /// across depths, for diagnose's next experiment: the first depth's cells are a sweep's
    /// bit for bit, the others' are the same model's draws on other seeds
    /// than a sweep gives them.
    pub fn sharing_depths(s: &'a Scenario) -> Plan<'a> {
        let groups = match s.depths.split_first() {
            Some((&first, rest)) => {
                vec![GroupKey { depth_percent: first, contexts: s.contexts.clone(), shared_depths: rest.to_vec() }]
            }
            None => Vec::new(),
        };
        Plan { scenario: s, shard: None, groups, done: Vec::new(), groups_done: 0 }
    }

    /// Cells of one group.
    pub fn group_cells(&self, group: &GroupKey) -> usize {
        group.contexts.len() * (1 + group.shared_depths.len()) * cells_per_unit(self.scenario)
    }

    /// Cells of the whole plan.
    pub fn cells_total(&self) -> usize {
        self.groups.iter().map(|g| self.group_cells(g)).sum()
    }

    /// Key rows the groups not yet done score: each trial draws every
    /// context's candidate rows (per needle offset) and scores them once per
    /// precision. Saturates rather than overflows.
    pub fn rows_to_score(&self) -> u64 {
        let s = self.scenario;
        let per_trial: u64 = self.groups[self.groups_done.min(self.groups.len())..]
            .iter()
            .flat_map(|g| g.contexts.iter())
            .map(|&c| s.geometry.candidate_rows(c))
            .fold(0u64, u64::saturating_add);
        per_trial.saturating_mul(s.trials).saturating_mul((s.precisions.len() * s.needle_offsets.len()) as u64)
    }

    /// Takes the whole groups of `cells` (a prefix of the sweep order, as an
    /// earlier run left it; a kill while a group's lines were being appended
    /// leaves part of one) as done; returns how many cells that keeps.
    pub fn resume_from(&mut self, mut cells: Vec<CellResult>) -> usize {
        let (mut groups_done, mut kept) = (0, 0);
        while groups_done < self.groups.len() && kept + self.group_cells(&self.groups[groups_done]) <= cells.len() {
            kept += self.group_cells(&self.groups[groups_done]);
            groups_done += 1;
        }
        cells.truncate(kept);
        self.done = cells;
        self.groups_done = groups_done;
        kept
    }

    /// The scenario of group `group`: its depths and contexts alone.
    pub fn group_scenario(&self, group: &GroupKey) -> Scenario {
        Scenario { contexts: group.contexts.clone(), depths: group.depths(), ..self.scenario.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_parsing_and_ownership() {
        assert_eq!(Shard::parse("2/3").unwrap(), Shard { index: 2, count: 3 });
        for bad in ["0/3", "4/3", "3", "a/b", "1/0", ""] {
            assert!(Shard::parse(bad).unwrap_err().to_string().starts_with("invalid --shard"), "{bad}");
        }
        let shards: Vec<Shard> = (1..=3).map(|i| Shard { index: i, count: 3 }).collect();
        for unit in 0..20 {
            assert_eq!(shards.iter().filter(|s| s.owns(unit)).count(), 1);
        }
    }
}

//! Quantities written with unit suffixes, shared by every layer that parses
//! or prints them: sizes in (`parse_size`) and token counts out
//! ([`tokens_label`]), and how far a recall holds ([`Reach`]), as tables and
//! charts both print it.

use serde::{Deserialize, Serialize};

/// Parses one size such as `4096`, `4K`, `1.5K` or `1M`.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (number, unit) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 1024u64),
        (i, 'm' | 'M') => (&t[..i], 1024 * 1024),
        _ => (t, 1),
    };
    if number.is_empty() {
        return None;
    }
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(unit);
    }
    // Fractions only with a suffix, and only when they give a whole number.
    let x: f64 = number.parse().ok()?;
    let v = x * unit as f64;
    (unit > 1 && x.is_finite() && x > 0.0 && v.fract() == 0.0 && v < 9.0e15).then_some(v as u64)
}

/// Token counts as people say them, exactly: 1024 → "1K", 1536 → "1.5K",
/// 1280 → "1.25K", 1048576 → "1M"; a count that K, M or G (2^10, 2^20, 2^30)
/// do not give in two decimals is printed whole (32769 → "32769").
pub fn tokens_label(n: u64) -> String {
    const K: u64 = 1 << 10;
    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;
    let fmt = |unit: u64, suffix: &str| {
        let s = format!("{:.2}", n as f64 / unit as f64);
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{s}{suffix}")
    };
    let exact = |unit: u64| n >= unit && u128::from(n) * 100 % u128::from(unit) == 0;
    if exact(G) {
        fmt(G, "G")
    } else if exact(M) {
        fmt(M, "M")
    } else if exact(K) {
        fmt(K, "K")
    } else {
        n.to_string()
    }
}

/// How far a recall holds: the longest tested context at which it is at or
/// above the threshold at every depth, that context and every shorter one.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reach {
    /// None when recall is below the threshold already at the shortest context.
    pub effective_context: Option<u64>,
    /// True when recall held at every context tested: the true value may be longer.
    pub held_at_longest: bool,
}

impl Reach {
    /// "16K", "≥ 128K" (it held at the longest context tested) or "< 1K"
    /// (it failed at `shortest`, the shortest tested context).
    pub fn label(&self, shortest: u64) -> String {
        match (self.effective_context, self.held_at_longest) {
            (None, _) => format!("< {}", tokens_label(shortest)),
            (Some(c), true) => format!("≥ {}", tokens_label(c)),
            (Some(c), false) => tokens_label(c),
        }
    }

    /// The reach of a curve from `held`: for each tested context, ascending,
    /// whether recall was at or above the threshold there. It runs up to the
    /// first context that failed; held at every one (or none tested), it
    /// held at the longest.
    pub fn of_held(held: impl IntoIterator<Item = (u64, bool)>) -> Reach {
        let mut reach = Reach { effective_context: None, held_at_longest: true };
        for (context, ok) in held {
            if !ok {
                reach.held_at_longest = false;
                break;
            }
            reach.effective_context = Some(context);
        }
        reach
    }

    /// This reach with its range when the range is wider than the point:
    /// "2K [1K, 4K]", else as [`Reach::label`].
    pub fn label_with(&self, range: Option<ReachRange>, shortest: u64) -> String {
        match range {
            Some(r) if r.low != r.high || r.low != *self => {
                format!("{} [{}, {}]", self.label(shortest), r.low.label(shortest), r.high.label(shortest))
            }
            _ => self.label(shortest),
        }
    }
}

/// How far a recall holds, read from the ends of each cell's Wilson 95 %
/// interval instead of its point estimate: `low` from the lower ends
/// (recall shown to be at or above the threshold), `high` from the upper
/// ends (recall not shown to be below it). Reaches whose ranges overlap
/// are not shown to differ (docs/MODEL.md, "Effective context").
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReachRange {
    pub low: Reach,
    pub high: Reach,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_labels_are_exact() {
        for (n, label) in [
            (0, "0"),
            (512, "512"),
            (1024, "1K"),
            (1280, "1.25K"),
            (1536, "1.5K"),
            (131072, "128K"),
            (32769, "32769"),
            (1 << 20, "1M"),
            (3 << 19, "1.5M"),
            (1 << 30, "1G"),
        ] {
            assert_eq!(tokens_label(n), label, "{n}");
        }
        assert_eq!(parse_size(&tokens_label(1280)), Some(1280), "a label parses back");
    }

    #[test]
    fn reach_labels() {
        let r = |c, held| Reach { effective_context: c, held_at_longest: held };
        assert_eq!(r(None, false).label(1024), "< 1K");
        assert_eq!(r(Some(4096), false).label(1024), "4K");
        assert_eq!(r(Some(131072), true).label(1024), "≥ 128K");
    }

    #[test]
    fn reach_of_a_curve_stops_at_the_first_failure() {
        let r = |c, held| Reach { effective_context: c, held_at_longest: held };
        assert_eq!(Reach::of_held([(1024, true), (2048, true), (4096, false), (8192, true)]), r(Some(2048), false));
        assert_eq!(Reach::of_held([(1024, false), (2048, true)]), r(None, false));
        assert_eq!(Reach::of_held([(1024, true), (2048, true)]), r(Some(2048), true));
    }
}

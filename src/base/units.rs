//! Quantities written with unit suffixes, shared by every layer that parses them.

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

//! Parsers for the comma-separated lists of the CLI and scenario files.

use crate::base::units::parse_size;
use crate::error::ConfigError;

const SIZE_HELP: &str =
    "a comma-separated list of positive integers with an optional K (×1024) or M (×1048576) suffix, or doubling ranges such as 1K..128K";

/// Parses a size list with doubling ranges (`1K..128K` = 1K, 2K, 4K … 128K).
pub fn parse_sizes(field: &str, text: &str) -> Result<Vec<u64>, ConfigError> {
    let bad = |v: &str| ConfigError::new(field, format!("{v:?}"), SIZE_HELP);
    let mut out = Vec::new();
    if text.trim().is_empty() {
        return Err(bad(text));
    }
    for item in text.split(',') {
        if let Some((a, b)) = item.split_once("..") {
            let (lo, hi) = (parse_size(a).ok_or_else(|| bad(item))?, parse_size(b).ok_or_else(|| bad(item))?);
            if lo == 0 || lo > hi {
                return Err(ConfigError::new(field, format!("{:?}", item.trim()), "a range A..B needs 0 < A ≤ B"));
            }
            let mut x = lo;
            while x <= hi {
                out.push(x);
                x = match x.checked_mul(2) {
                    Some(v) => v,
                    None => break,
                };
            }
        } else {
            let v = parse_size(item).ok_or_else(|| bad(item))?;
            if v == 0 {
                return Err(ConfigError::new(field, 0, "values must be ≥ 1"));
            }
            out.push(v);
        }
    }
    Ok(out)
}

/// Steepness `a` of the sigmoid depth spacing (see [`sigmoid_depths`]).
pub const SIGMOID_STEEPNESS: f64 = 4.0;
/// Most depths a `sigmoid:N` or `linear:N` item may ask for.
pub const MAX_GRID_POINTS: u64 = 1000;

/// `n` depths (percent) packed near 0 % and 100 %, where needles are most
/// often lost or kept against the trend:
///
/// d_i = 100 · (σ(a·(2i/(n−1) − 1)) − σ(−a)) / (σ(a) − σ(−a)),  i = 0 … n−1,
///
/// with σ(x) = 1/(1+e^−x) and a = [`SIGMOID_STEEPNESS`] = 4, so the ends are
/// exactly 0 and 100 and the middle (odd n) exactly 50; each depth is rounded
/// to 0.01 %. With a = 4 the step next to either end is about a ninth of the
/// step in the middle (n = 11: 0, 2.2, 6.76, 15.56, 30.29, 50, 69.71, …, 100).
/// `n` must be at least 2.
pub fn sigmoid_depths(n: u64) -> Vec<f64> {
    let sigma = |x: f64| 1.0 / (1.0 + (-x).exp());
    let a = SIGMOID_STEEPNESS;
    let (lo, hi) = (sigma(-a), sigma(a));
    let last = n.saturating_sub(1).max(1) as f64;
    (0..n)
        .map(|i| {
            let x = a * (2.0 * i as f64 / last - 1.0);
            let d = 100.0 * (sigma(x) - lo) / (hi - lo);
            ((d * 100.0).round() / 100.0).clamp(0.0, 100.0)
        })
        .collect()
}

/// `n` evenly spaced depths from 0 to 100 % (rounded to 0.01 %); `n` ≥ 2.
pub fn linear_depths(n: u64) -> Vec<f64> {
    let last = n.saturating_sub(1).max(1) as f64;
    (0..n).map(|i| ((10_000.0 * i as f64 / last).round() / 100.0).clamp(0.0, 100.0)).collect()
}

/// Parses a list of numbers with linear ranges `A..B:STEP` (both ends
/// included), and the depth grids `linear:N` (N evenly spaced depths from 0
/// to 100) and `sigmoid:N` (N depths packed near 0 and 100, see
/// [`sigmoid_depths`]).
pub fn parse_numbers(field: &str, text: &str) -> Result<Vec<f64>, ConfigError> {
    let help = "a comma-separated list of numbers, linear ranges such as 0..100:10, or depth grids linear:N / sigmoid:N (N from 2 to 1000)";
    let bad = |v: &str| ConfigError::new(field, format!("{:?}", v.trim()), help);
    let num = |s: &str| s.trim().parse::<f64>().ok().filter(|x| x.is_finite());
    let mut out = Vec::new();
    if text.trim().is_empty() {
        return Err(bad(text));
    }
    for item in text.split(',') {
        let trimmed = item.trim();
        if let Some((kind @ ("linear" | "sigmoid"), count)) = trimmed.split_once(':').map(|(k, c)| (k.trim(), c.trim())) {
            let n = count.parse::<u64>().ok().filter(|n| (2..=MAX_GRID_POINTS).contains(n)).ok_or_else(|| bad(item))?;
            out.extend(if kind == "linear" { linear_depths(n) } else { sigmoid_depths(n) });
            continue;
        }
        if let Some((a, rest)) = item.split_once("..") {
            let (b, step) = rest.split_once(':').ok_or_else(|| bad(item))?;
            let (a, b, step) = (num(a).ok_or_else(|| bad(item))?, num(b).ok_or_else(|| bad(item))?, num(step).ok_or_else(|| bad(item))?);
            if !(step > 0.0) || a > b || (b - a) / step > 100_000.0 {
                return Err(ConfigError::new(
                    field,
                    format!("{:?}", item.trim()),
                    "a range A..B:STEP needs A ≤ B, STEP > 0 and at most 100000 steps",
                ));
            }
            let n = ((b - a) / step + 1e-9).floor() as u64;
            out.extend((0..=n).map(|i| a + step * i as f64));
        } else {
            out.push(num(item).ok_or_else(|| bad(item))?);
        }
    }
    Ok(out)
}

/// Splits a comma-separated list of names.
pub fn parse_names(field: &str, text: &str) -> Result<Vec<String>, ConfigError> {
    let names: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
    if names.iter().any(String::is_empty) {
        return Err(ConfigError::new(field, format!("{text:?}"), "a comma-separated list of names without empty entries"));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes_and_ranges() {
        assert_eq!(parse_size("1K"), Some(1024));
        assert_eq!(parse_size("1.5k"), Some(1536));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("5000"), Some(5000));
        assert_eq!(parse_size("1.5"), None);
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("-4K"), None);
        assert_eq!(parse_sizes("c", "1K..8K").unwrap(), vec![1024, 2048, 4096, 8192]);
        assert_eq!(parse_sizes("c", "1K..3K,5000").unwrap(), vec![1024, 2048, 5000]);
        assert!(parse_sizes("c", "8K..1K").is_err());
        assert!(parse_sizes("c", "abc").unwrap_err().to_string().contains("invalid c = \"abc\""));
        assert!(parse_sizes("c", "").is_err());
        assert!(parse_sizes("c", "0").is_err());
        assert!(parse_sizes("c", "99999999999999999999").is_err());
    }

    #[test]
    fn numbers_and_linear_ranges() {
        assert_eq!(parse_numbers("d", "0,50,100").unwrap(), vec![0.0, 50.0, 100.0]);
        assert_eq!(parse_numbers("d", "0..100:25").unwrap(), vec![0.0, 25.0, 50.0, 75.0, 100.0]);
        assert!(parse_numbers("d", "0..100:0").is_err());
        assert!(parse_numbers("d", "NaN").is_err());
        assert!(parse_numbers("d", "1e400").is_err());
    }

    #[test]
    fn sigmoid_depths_pack_near_the_ends() {
        // By hand: σ(±4) = 0.9820138 / 0.0179862; n = 5 puts x at −4, −2, 0, 2, 4;
        // σ(−2) = 0.1192029 → 100·(0.1192029 − 0.0179862)/0.9640276 = 10.4995.
        assert_eq!(sigmoid_depths(5), vec![0.0, 10.5, 50.0, 89.5, 100.0]);
        assert_eq!(sigmoid_depths(2), vec![0.0, 100.0]);
        let d = sigmoid_depths(11);
        assert_eq!(d.len(), 11);
        assert_eq!((d[0], d[5], d[10]), (0.0, 50.0, 100.0));
        assert!(d.windows(2).all(|w| w[0] < w[1]), "{d:?}");
        // symmetric about 50 %
        for i in 0..11 {
            assert!((d[i] + d[10 - i] - 100.0).abs() < 0.011, "{d:?}");
        }
        // denser at the ends than in the middle
        assert!(d[1] - d[0] < (d[6] - d[5]) / 3.0, "{d:?}");
        assert_eq!(parse_numbers("d", "sigmoid:5").unwrap(), sigmoid_depths(5));
        assert_eq!(parse_numbers("d", " sigmoid : 3 ,25").unwrap(), vec![0.0, 50.0, 100.0, 25.0]);
    }

    #[test]
    fn linear_grids_and_bad_grids() {
        assert_eq!(parse_numbers("d", "linear:5").unwrap(), vec![0.0, 25.0, 50.0, 75.0, 100.0]);
        assert_eq!(linear_depths(4), vec![0.0, 33.33, 66.67, 100.0]);
        for bad in ["sigmoid:1", "sigmoid:0", "sigmoid:x", "sigmoid:", "linear:1001", "cubic:5"] {
            let e = parse_numbers("d", bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid d = "), "{bad}: {e}");
        }
    }
}

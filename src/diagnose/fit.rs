//! `calibrate --observations`: fits one free knob of the scenario (needle
//! strength by default) to the observation rows marked healthy, by profile
//! likelihood over a grid of values simulated on one seed. Method and what
//! it identifies: docs/CALIBRATION.md, "Calibrating from observations".

pub use super::knob::{current_value, default_field, with_value, DEFAULT_FIELD, DEFAULT_QUANTILE_FIELD};
use super::observations::{Observation, Observations};
use super::{clamped, log_binomial, simulate, DepthTrials, Reading};
use crate::base::observe::Observer;
use crate::config::params::ScenarioParams;
use crate::config::vary::VaryAxis;
use crate::error::{ConfigError, Error};
use serde::Serialize;

/// The strength's default range: from a needle far weaker than strength 1
/// to one four times the strength that met the public needle tests under
/// the strength unit (16).
pub const STRENGTH_RANGE: (f64, f64) = (0.125, 64.0);
/// The exceedance's default range: from a needle far easier than the
/// `niah` profile's (2.9·10⁻⁴) to one that ranks behind a tenth of the
/// haystack, five decades log-spaced.
pub const EXCEEDANCE_RANGE: (f64, f64) = (1e-6, 0.1);

/// Log-likelihood drop that bounds the 95 % interval: χ²₁(0.95) / 2.
pub const DROP_95: f64 = 1.920_729_4;
/// Log-spaced values of the first pass over the range.
pub const COARSE_POINTS: usize = 13;
/// Values added on each side of the first pass's best, between its neighbours.
pub const REFINE_POINTS: usize = 3;

/// What to fit, and how.
pub struct FitOptions<'a> {
    /// `section.field` of a numeric knob.
    pub field: String,
    /// Lowest and highest value tried; None: the knob's default range.
    pub range: Option<(f64, f64)>,
    pub reading: Reading,
    pub observer: &'a dyn Observer,
}

/// One value of the knob and what it gives.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GridPoint {
    pub value: f64,
    /// Σ over the fitted rows of log Binomial(found | total, p).
    pub log_likelihood: f64,
    /// Simulated recall (unclamped) of each fitted row, in row order.
    pub recalls: Vec<f64>,
    /// Each fitted row's log-likelihood term.
    pub row_log_likelihoods: Vec<f64>,
}

/// A row not used in the fit, predicted against what was observed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeldOut {
    pub line: usize,
    pub context_tokens: u64,
    pub depth_percent: f64,
    pub topk: u64,
    pub config: String,
    pub layer: Option<u64>,
    pub found: u64,
    pub total: u64,
    /// The knob's value the prediction is made at.
    pub at: f64,
    pub predicted: f64,
    /// Central 95 % range of `found` under the prediction.
    pub range_95: (u64, u64),
    /// "not healthy" (a row outside the fit), or "left out" (a healthy row,
    /// predicted from a fit to the others).
    pub kind: &'static str,
}

impl HeldOut {
    pub fn within(&self) -> bool {
        (self.range_95.0..=self.range_95.1).contains(&self.found)
    }
}

/// The result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fit {
    pub observations: String,
    pub field: String,
    pub estimate: f64,
    pub log_likelihood: f64,
    pub interval: (f64, f64),
    /// The interval reaches the lowest (highest) value tried: the data do
    /// not bound the knob on that side.
    pub open_low: bool,
    pub open_high: bool,
    /// File lines of the rows fitted.
    pub rows_used: Vec<usize>,
    /// Every value tried, ascending.
    pub curve: Vec<GridPoint>,
    pub held_out: Vec<HeldOut>,
    /// Simulated trials per cell.
    pub trials: u64,
    pub seed: Option<u64>,
}

fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits - 1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// `n` values from `lo` to `hi`, log-spaced, rounded to 3 significant digits.
fn log_spaced(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    (0..n).map(|i| round_sig(lo * (hi / lo).powf(i as f64 / (n - 1).max(1) as f64), 3)).collect()
}

/// Checks `field` (a numeric knob) and says whether it takes only whole values.
fn check_field(field: &str) -> Result<bool, ConfigError> {
    // The check borrows --vary's with made-up values: the user wrote the
    // field only, so the message echoes the field alone.
    let rename = |mut e: ConfigError| {
        if e.field == "--vary" {
            e.field = "--fit".into();
            e.value = field.to_string();
        }
        e.field = e.field.replace("--vary", "--fit");
        e.value = e.value.replace("--vary", "--fit");
        e
    };
    VaryAxis::new(field, "1,2").map_err(rename)?;
    let half = VaryAxis { field: field.to_string(), values: vec![1.5] };
    Ok(half.overlay(0, ScenarioParams::default()).is_err())
}

/// The recall of each row in `rows` simulated with `params`.
fn recalls(
    params: &ScenarioParams,
    rows: &[&Observation],
    reading: Reading,
    observer: &dyn Observer,
    path: &str,
) -> Result<(Vec<f64>, u64), Error> {
    let cells: Vec<(u64, f64, u64)> = rows.iter().map(|r| (r.context_tokens, r.depth_percent, r.topk)).collect();
    let mut variants: Vec<String> = rows.iter().map(|r| r.config.clone()).collect();
    variants.sort();
    variants.dedup();
    let sim = simulate(params, &cells, &variants, DepthTrials::Own, observer)?;
    let mut out = Vec::new();
    let mut trials = 0;
    for r in rows {
        let s = sim.get(&(r.context_tokens, r.depth_percent.to_bits(), r.topk, r.config.clone())).ok_or_else(|| Error::Input {
            location: format!("{path}:{}", r.line),
            message: format!("no simulated cell for {} here", r.config),
        })?;
        trials = s.trials;
        out.push(s.recall_for(r.layer, reading)?);
    }
    Ok((out, trials))
}

/// The central 95 % range of Binomial(n, p): the least k with P(X ≤ k) ≥
/// 0.025 and the least with P(X ≤ k) ≥ 0.975.
pub fn binomial_range_95(n: u64, p: f64) -> (u64, u64) {
    let (mut cdf, mut lo) = (0.0, None);
    for k in 0..=n {
        cdf += log_binomial(k, n, p).exp();
        if lo.is_none() && cdf >= 0.025 {
            lo = Some(k);
        }
        if cdf >= 0.975 {
            return (lo.unwrap_or(k), k);
        }
    }
    (lo.unwrap_or(n), n)
}

/// Where the log-likelihood along the sorted `curve` falls to `level`
/// between points `inside` (above it) and `outside` (below), linear in log value.
fn crossing(curve: &[GridPoint], inside: usize, outside: usize, level: f64) -> f64 {
    let (a, b) = (&curve[inside], &curve[outside]);
    let t = (a.log_likelihood - level) / (a.log_likelihood - b.log_likelihood);
    let (la, lb) = (a.value.ln(), b.value.ln());
    round_sig((la + t * (lb - la)).exp(), 3)
}

/// The point of `curve` with the highest likelihood (the first on ties).
fn best_point(c: &[GridPoint]) -> usize {
    (0..c.len()).fold(0, |b, i| if c[i].log_likelihood > c[b].log_likelihood { i } else { b })
}

/// The values tried: the options' range, else the knob's default range,
/// else a decade either side of its scenario value.
fn fit_range(params: &ScenarioParams, opts: &FitOptions<'_>) -> Result<(f64, f64), Error> {
    Ok(match opts.range {
        Some(r) => r,
        None if opts.field == DEFAULT_FIELD => STRENGTH_RANGE,
        None if opts.field == DEFAULT_QUANTILE_FIELD => EXCEEDANCE_RANGE,
        None => match current_value(params, &opts.field) {
            Some(v) if v > 0.0 => (v / 10.0, v * 10.0),
            v => {
                return Err(ConfigError::new(
                    "--fit-range",
                    "(not given)",
                    format!(
                        "LO..HI for {}: its scenario value ({}) gives no default range (one needs a value > 0)",
                        opts.field,
                        v.map_or("none".into(), |v| v.to_string())
                    ),
                )
                .into())
            }
        },
    })
}

/// The 95 % likelihood interval around the best point `b` of `curve`:
/// (low, high, open at the low end, open at the high end).
fn interval_95(curve: &[GridPoint], b: usize) -> (f64, f64, bool, bool) {
    let max = curve[b].log_likelihood;
    let level = max - DROP_95;
    let mut i = b;
    while i > 0 && curve[i - 1].log_likelihood >= level {
        i -= 1;
    }
    let mut j = b;
    while j + 1 < curve.len() && curve[j + 1].log_likelihood >= level {
        j += 1;
    }
    let (open_low, open_high) = (i == 0, j + 1 == curve.len());
    let low = if open_low { curve[0].value } else { crossing(curve, i, i - 1, level) };
    let high = if open_high { curve[j].value } else { crossing(curve, j, j + 1, level) };
    (low, high, open_low, open_high)
}

/// The check: rows outside the fit at the estimate; or, when every row
/// is healthy, each row predicted from the fit to the others (`trials` per
/// point of `curve`).
fn held_out(
    params: &ScenarioParams,
    obs: &Observations,
    opts: &FitOptions<'_>,
    used: &[&Observation],
    curve: &[GridPoint],
    trials: u64,
) -> Result<Vec<HeldOut>, Error> {
    let estimate = curve[best_point(curve)].value;
    let others: Vec<&Observation> = obs.rows.iter().filter(|r| r.healthy != Some(true)).collect();
    let mut held_out = Vec::new();
    if !others.is_empty() {
        let p = with_value(params, &opts.field, estimate)?;
        let (rec, n) = recalls(&p, &others, opts.reading, opts.observer, &obs.path)?;
        for (r, q) in others.iter().zip(rec) {
            held_out.push(held_out_row(r, estimate, q, n, "not healthy"));
        }
    } else if used.len() >= 2 {
        for (k, r) in used.iter().enumerate() {
            // The others' maximum; where they leave a plateau (a row at 0 or
            // all found says only "at least"), the value nearest the estimate.
            let rest = |g: &GridPoint| g.log_likelihood - g.row_log_likelihoods[k];
            let far = |g: &GridPoint| (g.value.ln() - estimate.ln()).abs();
            let at = (0..curve.len()).fold(0, |b, i| {
                let (x, y) = (rest(&curve[i]), rest(&curve[b]));
                if x > y + 1e-9 || (x >= y - 1e-9 && far(&curve[i]) < far(&curve[b])) {
                    i
                } else {
                    b
                }
            });
            held_out.push(held_out_row(r, curve[at].value, curve[at].recalls[k], trials, "left out"));
        }
    }
    Ok(held_out)
}

/// One held-out row: predicted recall `p` at value `at` (`n` trials).
fn held_out_row(r: &Observation, at: f64, p: f64, n: u64, kind: &'static str) -> HeldOut {
    HeldOut {
        line: r.line,
        context_tokens: r.context_tokens,
        depth_percent: r.depth_percent,
        topk: r.topk,
        config: r.label.clone(),
        layer: r.layer,
        found: r.found,
        total: r.total,
        at,
        predicted: p,
        range_95: binomial_range_95(r.total, clamped(p, n)),
        kind,
    }
}

/// Fits `opts.field` to the healthy rows of `obs`, simulated with `params`
/// (resolved, unchecked) on the scenario's seed at every value.
pub fn fit(params: &ScenarioParams, obs: &Observations, opts: &FitOptions<'_>) -> Result<Fit, Error> {
    let integer = check_field(&opts.field)?;
    if !obs.rows.iter().any(|r| r.healthy.is_some()) {
        return Err(Error::Input {
            location: obs.path.clone(),
            message: "no healthy column: calibrate fits to the configurations known to work (add healthy = true or false per row)".into(),
        });
    }
    let used: Vec<&Observation> = obs.rows.iter().filter(|r| r.healthy == Some(true)).collect();
    if used.is_empty() {
        return Err(Error::Input {
            location: obs.path.clone(),
            message: "no row has healthy = true: calibrate fits to the configurations known to work".into(),
        });
    }
    let (lo, hi) = fit_range(params, opts)?;
    let snap = |v: f64| if integer { v.round().max(1.0) } else { v };
    let mut curve: Vec<GridPoint> = Vec::new();
    let mut trials = 0;
    let mut evaluate = |values: Vec<f64>, curve: &mut Vec<GridPoint>| -> Result<(), Error> {
        for v in values.into_iter().map(snap) {
            if curve.iter().any(|p| p.value == v) {
                continue;
            }
            let p = with_value(params, &opts.field, v)?;
            let (rec, n) = recalls(&p, &used, opts.reading, opts.observer, &obs.path)?;
            trials = n;
            // A healthy indexer selects the same way each time a prompt repeats.
            let terms: Vec<f64> = used.iter().zip(&rec).map(|(r, &q)| super::repeats::row_log_likelihood(r, q, n, false)).collect();
            curve.push(GridPoint { value: v, log_likelihood: terms.iter().sum(), recalls: rec, row_log_likelihoods: terms });
        }
        curve.sort_by(|a, b| a.value.total_cmp(&b.value));
        Ok(())
    };
    evaluate(log_spaced(lo, hi, COARSE_POINTS), &mut curve)?;
    // Refine between the best value's neighbours.
    let b = best_point(&curve);
    let v = curve[b].value;
    let mut extra = Vec::new();
    if b > 0 {
        extra.extend(log_spaced(curve[b - 1].value, v, REFINE_POINTS + 2));
    }
    if b + 1 < curve.len() {
        extra.extend(log_spaced(v, curve[b + 1].value, REFINE_POINTS + 2));
    }
    evaluate(extra, &mut curve)?;
    let b = best_point(&curve);
    let max = curve[b].log_likelihood;
    let (low, high, open_low, open_high) = interval_95(&curve, b);
    let estimate = curve[b].value;

    let held_out = held_out(params, obs, opts, &used, &curve, trials)?;
    Ok(Fit {
        observations: obs.path.clone(),
        field: opts.field.clone(),
        estimate,
        log_likelihood: max,
        interval: (low, high),
        open_low,
        open_high,
        rows_used: used.iter().map(|r| r.line).collect(),
        curve,
        held_out,
        trials,
        seed: params.sweep.seed,
    })
}

/// A value as written in tables and TOML.
fn num(x: f64) -> String {
    format!("{}", round_sig(x, 4))
}

fn cell(h: &HeldOut) -> String {
    format!(
        "line {}: {} tokens, depth {} %, k {}, {}{}",
        h.line,
        h.context_tokens,
        h.depth_percent,
        h.topk,
        h.config,
        h.layer.map_or(String::new(), |l| format!(", layer {l}"))
    )
}

/// The interval in words, with what is not identified.
fn interval_text(f: &Fit) -> String {
    let mut t = format!("95 % interval [{}, {}]", num(f.interval.0), num(f.interval.1));
    match (f.open_low, f.open_high) {
        (true, true) => t.push_str(": not identified (the log-likelihood stays within 1.92 of its maximum over the whole range tried)"),
        (true, false) => t.push_str(": open below (it reaches the lowest value tried: the data give no lower bound)"),
        (false, true) => t.push_str(": open above (it reaches the highest value tried: the data give no upper bound)"),
        _ => {}
    }
    t
}

/// The table printed on stdout: the curve with a bar per value, the
/// estimate and interval, and the check on rows not fitted.
pub fn format_table(f: &Fit) -> String {
    let mut t = format!(
        "{} fitted to {} healthy row(s) of {} ({} simulated trials per cell, seed {}, the same at every value)\n",
        f.field,
        f.rows_used.len(),
        f.observations,
        f.trials,
        f.seed.map_or("-".into(), |s| s.to_string())
    );
    t.push_str(&format!("{:>10} {:>12} {:>9}  {}\n", "value", "log-lik", "Δ", "(bar: log-lik above max − 8)"));
    for p in &f.curve {
        let d = p.log_likelihood - f.log_likelihood;
        let bar = "#".repeat(((d + 8.0).max(0.0) * 4.0).round() as usize);
        let mark = if p.value == f.estimate {
            " ← max"
        } else if d >= -DROP_95 {
            " (in 95 %)"
        } else {
            ""
        };
        t.push_str(&format!("{:>10} {:>12.3} {:>9.3}  {bar}{mark}\n", num(p.value), p.log_likelihood, d));
    }
    t.push_str(&format!("{} = {}, {}\n", f.field, num(f.estimate), interval_text(f)));
    if f.held_out.is_empty() {
        t.push_str("check: no row outside the fit, and one healthy row is too few to leave out\n");
    } else {
        t.push_str(&format!(
            "check on rows not fitted ({}):\n",
            if f.held_out[0].kind == "left out" {
                "each healthy row predicted from a fit to the others"
            } else {
                "rows not marked healthy, at the estimate"
            }
        ));
        for h in &f.held_out {
            t.push_str(&format!("  {}\n", held_out_text(f, h)));
        }
    }
    t
}

fn held_out_text(f: &Fit, h: &HeldOut) -> String {
    format!(
        "{}: predicted {:.3}{} (95 %: {}–{} of {}), observed {} of {}: {}",
        cell(h),
        h.predicted,
        if h.kind == "left out" { format!(" at {} = {}", f.field, num(h.at)) } else { String::new() },
        h.range_95.0,
        h.range_95.1,
        h.total,
        h.found,
        h.total,
        if h.within() { "within" } else { "OUTSIDE" }
    )
}

/// The curve as CSV: value, log-likelihood, its drop from the maximum, and
/// whether it is inside the 95 % interval.
pub fn curve_csv(f: &Fit) -> String {
    let mut t = format!(
        "# {} profile log-likelihood, {} (dsa-recall calibrate --observations)\nvalue,log_likelihood,delta,in_95\n",
        f.field, f.observations
    );
    for p in &f.curve {
        let d = p.log_likelihood - f.log_likelihood;
        t.push_str(&format!("{},{},{},{}\n", p.value, p.log_likelihood, d, d >= -DROP_95));
    }
    t
}

/// The scenario TOML: comments on the fit, then `base` (the scenario as
/// given: preset, file, flags) with the fitted value set.
pub fn scenario_toml(base: &ScenarioParams, f: &Fit, command: &str) -> Result<String, Error> {
    let mut t = format!("# Written by `{command}`\n# (docs/CALIBRATION.md, \"Calibrating from observations\").\n");
    t.push_str(&format!(
        "# {} = {}: the maximum of the binomial log-likelihood ({:.3}) of the healthy rows (lines {}),\n",
        f.field,
        num(f.estimate),
        f.log_likelihood,
        f.rows_used.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ")
    ));
    t.push_str(&format!(
        "# over {} values from {} to {} simulated at {} trials per cell on one seed; {}.\n",
        f.curve.len(),
        num(f.curve[0].value),
        num(f.curve[f.curve.len() - 1].value),
        f.trials,
        interval_text(f)
    ));
    if f.held_out.is_empty() {
        t.push_str("# Check: none (no row outside the fit, and one healthy row is too few to leave out).\n");
    } else {
        t.push_str("# Check on rows not fitted (predicted vs observed):\n");
        for h in &f.held_out {
            t.push_str(&format!("#   {}\n", held_out_text(f, h)));
        }
    }
    let params = with_value(base, &f.field, round_sig(f.estimate, 4))?;
    let body = toml::to_string(&params).map_err(|e| Error::Input { location: "scenario".into(), message: e.to_string() })?;
    // Sections the scenario leaves empty are left out.
    let mut lines: Vec<&str> = Vec::new();
    let all: Vec<&str> = body.lines().collect();
    for (i, line) in all.iter().enumerate() {
        let empty_section = line.starts_with('[') && all.get(i + 1).is_none_or(|n| n.is_empty() || n.starts_with('['));
        if !empty_section {
            lines.push(line);
        }
    }
    let mut body = lines.join("\n");
    while body.contains("\n\n\n") {
        body = body.replace("\n\n\n", "\n\n");
    }
    t.push_str(body.trim());
    t.push('\n');
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_and_ranges() {
        let g = log_spaced(0.125, 64.0, 13);
        assert_eq!(g.len(), 13);
        assert_eq!((g[0], g[12]), (0.125, 64.0));
        assert_eq!(g[4], 1.0);
        assert_eq!(round_sig(2.37842, 3), 2.38);
        // Binomial(10, 0.5): P(X ≤ 1) = 0.011, P(X ≤ 2) = 0.055; P(X ≤ 7) = 0.945, P(X ≤ 8) = 0.989.
        assert_eq!(binomial_range_95(10, 0.5), (2, 8));
        assert_eq!(binomial_range_95(5, 1e-9), (0, 0));
    }

    #[test]
    fn fields_are_checked() {
        assert_eq!(check_field("needle.strength"), Ok(false));
        assert_eq!(check_field("needle.tokens"), Ok(true));
        let e = check_field("needle.colour").unwrap_err().to_string();
        assert!(e.contains("--fit") && e.contains("numeric knob"), "{e}");
        let e = check_field("sweep.trials").unwrap_err().to_string();
        assert!(e.contains("--fit"), "{e}");
        let e = check_field("nonsense.field").unwrap_err().to_string();
        assert!(e.starts_with("invalid --fit = nonsense.field: a knob of the scenario file's sections"), "{e}");
    }
}

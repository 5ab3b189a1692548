//! The needle margin against reruns it was not computed from: a sweep run
//! again with the needle's median exceedance set to the margin's (another
//! seed, so other haystacks and draws) keeps the needle at the recall
//! threshold within the two estimates' 95 % tolerance, and a needle twice
//! as rare keeps it less often (docs/MODEL.md, "The needle margin").

use crate::common::{cell, sweep_toml};

const TRIALS: u64 = 300;
const THRESHOLD: f64 = 0.9;

/// The sweep of one cell: `preset` at `context` with top-k `k` and
/// `precision`, the needle's median exceedance set when given.
fn one_cell(preset: &str, context: u64, k: u64, precision: &str, seed: u64, exceedance: Option<f64>) -> dsa_recall::run::cell::CellResult {
    let needle = exceedance.map_or(String::new(), |u| format!("[needle]\nexceedance = {u:e}\n"));
    let toml = format!(
        "preset = \"{preset}\"\n{needle}[sweep]\ncontexts = \"{context}\"\ndepths = \"50\"\ntopk = \"{k}\"\n\
         precisions = \"{precision}\"\ntrials = {TRIALS}\nseed = {seed}\nthreshold = {THRESHOLD}\n"
    );
    cell(&sweep_toml(&toml), context, 50.0, k, precision).clone()
}

fn check(preset: &str, context: u64, k: u64, precision: &str) {
    let first = one_cell(preset, context, k, precision, 11, None);
    let exceedance = first.needle_margin_exceedance.unwrap_or_else(|| panic!("{preset} {precision}: no margin"));
    assert_eq!(first.needle_margin_unbounded, Some(false), "{preset} {precision}: the margin must fall inside the range");
    let at = one_cell(preset, context, k, precision, 12, Some(exceedance));
    let rarer = one_cell(preset, context, k, precision, 12, Some(2.0 * exceedance));
    // Two independent estimates of the same recall (the margin's from the
    // first trials, the rerun's from its own): their difference has sd
    // √(2·t(1−t)/n) at the threshold t.
    let tolerance = 1.96 * (2.0 * THRESHOLD * (1.0 - THRESHOLD) / TRIALS as f64).sqrt();
    assert!(
        (at.recall - THRESHOLD).abs() <= tolerance,
        "{preset} {context} k={k} {precision}: recall {} at the margin's exceedance {exceedance:.3e}, threshold {THRESHOLD} ± {tolerance:.3}",
        at.recall
    );
    assert!(
        rarer.recall < at.recall && rarer.recall < THRESHOLD,
        "{preset} {precision}: twice as rare kept {} vs {}",
        rarer.recall,
        at.recall
    );
}

#[test]
fn v4_flash_bf16_keeps_the_needle_at_the_threshold_at_its_margin() {
    check("deepseek-v4-flash", 16384, 512, "bf16");
}

#[test]
fn v4_flash_fault_keeps_the_needle_at_the_threshold_at_its_margin() {
    check("deepseek-v4-flash", 16384, 512, "fp8+logits-fp16");
}

#[test]
fn v3_2_fp8_keeps_the_needle_at_the_threshold_at_its_margin() {
    check("deepseek-v3.2", 8192, 512, "fp8");
}

//! Cost per key row (d = 128) of quantizing it under each built-in variant
//! (rotation, block scale, cast, dequantize or keep element values and row
//! scales, as a trial does) against the cost of scoring it against 64 heads.
//!
//! `cargo bench --bench quantize`. Rows are processed in chunks of 256, as in
//! a trial; each figure is the median over repeated timings, in ns per row.

use dsa_recall::indexer::IndexerQuery;
use dsa_recall::precision::{PrecisionVariant, QuantizedRows};
use std::hint::black_box;
use std::time::Instant;

const HEADS: usize = 64;
const DIM: usize = 128;
const ROWS: usize = 256;
const REPEATS: usize = 31;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Median ns per row of `f`, which processes `ROWS` rows per call.
fn ns_per_row(mut f: impl FnMut()) -> f64 {
    // Enough calls per timing to last about a millisecond.
    let start = Instant::now();
    f();
    let once = start.elapsed().as_secs_f64().max(1e-7);
    let calls = ((1e-3 / once) as usize).clamp(1, 10_000);
    let timings = (0..REPEATS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                f();
            }
            start.elapsed().as_secs_f64() / (calls * ROWS) as f64 * 1e9
        })
        .collect();
    median(timings)
}

/// Deterministic pseudo-Gaussian-ish values without an RNG dependency.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            let mut sum = 0.0;
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                sum += (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            }
            sum
        })
        .collect()
}

fn main() {
    let raw_keys = values(ROWS * DIM, 1);
    let raw_queries = values(HEADS * DIM, 2);
    let weights = values(HEADS, 3);
    println!("per row of {DIM} values, chunks of {ROWS} rows, {HEADS} heads; median of {REPEATS} timings");
    println!("{:<14} {:>14} {:>12} {:>8}", "variant", "quantize ns", "score ns", "ratio");
    for name in PrecisionVariant::builtin_names() {
        let Some(variant) = PrecisionVariant::builtin(name) else { continue };
        let mut keys = QuantizedRows::with_capacity(ROWS, DIM);
        let quantize = ns_per_row(|| {
            variant.key.quantize_rows_into(black_box(&raw_keys), DIM, &mut keys).expect("quantize");
            black_box(&keys);
        });
        let query = IndexerQuery::new(variant.query.quantize_rows(&raw_queries, DIM).expect("query"), &weights, DIM, variant.scoring);
        let mut out = vec![0.0f32; ROWS];
        let score = ns_per_row(|| {
            query.score_quantized_rows(black_box(&keys), &mut out);
            black_box(&out);
        });
        println!("{name:<14} {quantize:>14.1} {score:>12.1} {:>8.2}", quantize / score);
    }
}

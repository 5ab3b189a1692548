//! Issue 3, item 8: the cost of quantizing a key row against the cost of
//! scoring it, per built-in precision variant, on exactly the engine's path
//! (src/score/trial/chunk.rs): a 256-row chunk of V4-Flash haystack keys goes through
//! `QuantPipeline::quantize_rows_into`, then
//! `IndexerQuery::score_quantized_rows` (`score_rows` on the raw keys for
//! variants whose key pipeline is the identity, as the engine does).
//!
//! `cargo bench --bench quantize [-- --rounds N] [--only VARIANT]`.
//!
//! Every round times every variant's quantize and score once each (about
//! 2 ms of calls per timing), the order of the variants rotating from round
//! to round, so load from elsewhere hits all of them alike. Printed: median
//! ns per row of each, the median of the per-round ratios quantize/score, and
//! the worst (largest) per-round ratio's 90th percentile.
//!
//! Instruction counts (repeatable on a loaded machine): the timed work runs
//! inside the `#[inline(never)]` functions `quantize_chunk` and
//! `score_chunk`; run one variant under callgrind and read their inclusive
//! counts:
//!
//! ```sh
//! valgrind --tool=callgrind --callgrind-out-file=cg.q target/release/deps/quantize-HASH \
//!     --only nvfp4 --rounds 1 --calls 20
//! callgrind_annotate --inclusive=yes cg.q | grep -E 'quantize_chunk|score_chunk'
//! ```
//!
//! `--gemm` instead times our scoring of 32K rows (fp32 and bf16 keys)
//! beside the `gemm` crate's f32 GEMM on the same [32K × 128]·[128 × 64]
//! product, on 1 and 2 threads, interleaved, and prints the share (issue 6).
//!
//! (`--calls N` fixes the calls per timing; each count divided by
//! N · 256 · (rounds + 1 warm-up) is instructions per row. Valgrind hides
//! AVX-512, so the AVX2 paths are what it counts.)

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::model::haystack::TrialHaystack;
use dsa_recall::numerics::pipeline::QuantizedRows;
use dsa_recall::score::indexer::IndexerQuery;
use dsa_recall::score::variant::PrecisionVariant;
use std::hint::black_box;
use std::time::Instant;

#[path = "common/gemm.rs"]
mod common_gemm;
use common_gemm::gemm_f32;

const ROWS: usize = 256;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn quantile(mut xs: Vec<f64>, q: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[((xs.len() - 1) as f64 * q).round() as usize]
}

struct Bench {
    name: &'static str,
    variant: PrecisionVariant,
    query: IndexerQuery,
    quantized: QuantizedRows,
    out: Vec<f32>,
    quantize_ns: Vec<f64>,
    score_ns: Vec<f64>,
}

/// The engine's key step for one chunk (nothing for an identity pipeline).
#[inline(never)]
fn quantize_chunk(variant: &PrecisionVariant, raw: &[f32], d: usize, quantized: &mut QuantizedRows) {
    if !variant.key.is_identity() {
        variant.key.quantize_rows_into(black_box(raw), d, quantized).expect("quantize");
    }
    black_box(&*quantized);
}

/// The engine's scoring step for one chunk.
#[inline(never)]
fn score_chunk(variant: &PrecisionVariant, query: &IndexerQuery, raw: &[f32], quantized: &QuantizedRows, out: &mut [f32]) {
    if variant.key.is_identity() {
        query.score_rows(black_box(raw), out);
    } else {
        query.score_quantized_rows(black_box(quantized), out);
    }
    black_box(&*out);
}

fn ns_per_row(calls: usize, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..calls {
        f();
    }
    start.elapsed().as_secs_f64() / (calls * ROWS) as f64 * 1e9
}

fn gemm_share(rounds: usize) {
    const N: usize = 32 * 1024;
    let scenario = config::check(config::resolve(parse_scenario_toml("").expect("toml")).expect("preset")).expect("scenario");
    let d = scenario.model.shape.head_dim;
    let haystack = TrialHaystack::draw(&scenario.model, 42).expect("haystack");
    let heads = haystack.weights.len();
    let mut raw = vec![0.0f32; N * d];
    haystack.fill_haystack_rows(0, &mut raw);
    let pools: Vec<rayon::ThreadPool> = (1..=2).map(|t| rayon::ThreadPoolBuilder::new().num_threads(t).build().expect("pool")).collect();
    let mut c = vec![0.0f32; N * heads];
    let mut out = vec![0.0f32; N];
    let cases: Vec<(&str, Vec<f32>, IndexerQuery)> = ["fp32", "bf16"]
        .iter()
        .map(|&name| {
            let v = PrecisionVariant::builtin(name).expect("builtin");
            let mut k = raw.clone();
            v.key.apply(&mut k, d).expect("keys");
            let q = IndexerQuery::new(v.query.quantize_rows(&haystack.queries, d).expect("q"), &haystack.weights, d, v.scoring);
            (name, k, q)
        })
        .collect();
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64() * 1e3
    };
    // [case][threads] ms, and gemm [threads] ms
    let mut ours = vec![vec![Vec::new(); 2]; cases.len()];
    let mut theirs = vec![Vec::new(); 2];
    for round in 0..=rounds {
        for t in 0..2 {
            let g = time(&mut || pools[t].install(|| gemm_f32(&raw, &haystack.queries, &mut c, d, heads, t + 1)));
            let o: Vec<f64> = cases
                .iter()
                .map(|(_, k, q)| {
                    time(&mut || {
                        pools[t].install(|| {
                            let half = if t == 0 { N } else { N / 2 };
                            rayon::scope(|s| {
                                for (kc, oc) in k.chunks(half * d).zip(out.chunks_mut(half)) {
                                    s.spawn(move |_| q.score_rows(kc, oc));
                                }
                            })
                        })
                    })
                })
                .collect();
            if round > 0 {
                theirs[t].push(g);
                for (i, ms) in o.into_iter().enumerate() {
                    ours[i][t].push(ms);
                }
            }
        }
    }
    let gflops = |ms: f64| 2.0 * (N * d * heads) as f64 / (ms * 1e-3) / 1e9;
    println!("scoring {N} rows × {d} against {heads} heads vs gemm (f32), median of {rounds} interleaved rounds");
    println!("{:<8} {:>7} {:>10} {:>8} {:>10} {:>8} {:>7}", "keys", "threads", "ours ms", "GFLOP/s", "gemm ms", "GFLOP/s", "share");
    for (i, (name, _, _)) in cases.iter().enumerate() {
        for t in 0..2 {
            let (o, g) = (median(ours[i][t].clone()), median(theirs[t].clone()));
            println!("{name:<8} {:>7} {o:>10.2} {:>8.1} {g:>10.2} {:>8.1} {:>6.0}%", t + 1, gflops(o), gflops(g), 100.0 * g / o);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--gemm") {
        let rounds = args.iter().position(|a| a == "--rounds").and_then(|i| args.get(i + 1)).map_or(15, |v| v.parse().expect("--rounds N"));
        gemm_share(rounds);
        return;
    }
    let arg = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let rounds: usize = arg("--rounds").map_or(41, |v| v.parse().expect("--rounds N"));
    let fixed_calls: Option<usize> = arg("--calls").map(|v| v.parse().expect("--calls N"));
    let only = arg("--only");

    let scenario = config::check(config::resolve(parse_scenario_toml("").expect("toml")).expect("preset")).expect("scenario");
    let model = &scenario.model;
    let d = model.shape.head_dim;
    let haystack = TrialHaystack::draw(model, 42).expect("haystack");
    let mut raw = vec![0.0f32; ROWS * d];
    haystack.fill_haystack_rows(4096, &mut raw);

    let mut benches: Vec<Bench> = PrecisionVariant::builtin_names()
        .into_iter()
        .filter(|n| only.as_deref().is_none_or(|o| o == *n))
        .map(|name| {
            let variant = PrecisionVariant::builtin(name).expect("builtin");
            let q = variant.query.quantize_rows(&haystack.queries, d).expect("query");
            let query = IndexerQuery::new(q, &haystack.weights, d, variant.scoring);
            Bench {
                name,
                variant,
                query,
                quantized: QuantizedRows::with_capacity(ROWS, d),
                out: vec![0.0; ROWS],
                quantize_ns: Vec::new(),
                score_ns: Vec::new(),
            }
        })
        .collect();
    assert!(!benches.is_empty(), "no variant named {only:?}");

    // Calls per timing: about 2 ms of scoring (the slower of the two for
    // most variants), the same count for quantize and score of a variant.
    let calls: Vec<usize> = benches
        .iter_mut()
        .map(|b| {
            quantize_chunk(&b.variant, &raw, d, &mut b.quantized);
            let once = ns_per_row(3, || score_chunk(&b.variant, &b.query, &raw, &b.quantized, &mut b.out)) * ROWS as f64;
            fixed_calls.unwrap_or(((2e6 / once) as usize).clamp(1, 1000))
        })
        .collect();

    let n = benches.len();
    for round in 0..=rounds {
        for i in 0..n {
            let k = (i + round) % n;
            let b = &mut benches[k];
            let quantize = ns_per_row(calls[k], || quantize_chunk(&b.variant, &raw, d, &mut b.quantized));
            let score = ns_per_row(calls[k], || score_chunk(&b.variant, &b.query, &raw, &b.quantized, &mut b.out));
            if round > 0 {
                // Round 0 warms caches and clocks up.
                b.quantize_ns.push(quantize);
                b.score_ns.push(score);
            }
        }
    }

    println!(
        "V4-Flash keys, d = {d}, {} heads, {ROWS}-row chunks (engine path); median of {rounds} interleaved rounds",
        haystack.weights.len()
    );
    println!("{:<14} {:>12} {:>10} {:>8} {:>10}", "variant", "quantize ns", "score ns", "ratio", "ratio p90");
    for b in &benches {
        let ratios: Vec<f64> = b.quantize_ns.iter().zip(&b.score_ns).map(|(q, s)| q / s).collect();
        println!(
            "{:<14} {:>12.1} {:>10.1} {:>8.2} {:>10.2}",
            b.name,
            median(b.quantize_ns.clone()),
            median(b.score_ns.clone()),
            median(ratios.clone()),
            quantile(ratios, 0.9),
        );
    }
}

//! Per-row kernels, with divan (`cargo bench --bench kernels`): haystack
//! generation (the Philox + Box–Muller generator beside the ChaCha8 +
//! ziggurat one it replaced), quantize + score per built-in precision
//! variant, and the limit: an optimized GEMM (`gemm` crate) on the scoring
//! shape [32K × 128]·[128 × 64] beside our scoring of the same 32K rows, on 1
//! and 2 threads. Counters give rows or Gaussians per second; the share of
//! GEMM is computed by `benches/trial.rs` (and docs/PERFORMANCE.md).

use divan::counter::ItemsCount;
use divan::{black_box, Bencher};
use dsa_recall::config::{self, params::parse_scenario_toml, Scenario};
use dsa_recall::model::haystack::TrialHaystack;
use dsa_recall::score::indexer::IndexerQuery;
use dsa_recall::score::variant::PrecisionVariant;
use rand::Rng;
use rand_distr::StandardNormal;

#[path = "common/gemm.rs"]
mod common_gemm;
use common_gemm::gemm_f32;

const CHUNK: usize = 256;
const D: usize = 128;
const GEMM_ROWS: usize = 32 * 1024;
const VARIANTS: &[&str] = &["fp32", "bf16", "fp8", "fp8-fp32scale", "fp4", "mxfp4", "nvfp4"];

fn main() {
    divan::main();
}

fn flash() -> Scenario {
    config::check(config::resolve(parse_scenario_toml("").unwrap()).unwrap()).unwrap()
}

fn haystack() -> TrialHaystack {
    TrialHaystack::draw(&flash().model, 42).unwrap()
}

fn keys(rows: usize) -> (TrialHaystack, Vec<f32>) {
    let h = haystack();
    let mut k = vec![0.0f32; rows * D];
    h.fill_haystack_rows(0, &mut k);
    (h, k)
}

fn query(h: &TrialHaystack, v: &PrecisionVariant) -> IndexerQuery {
    IndexerQuery::new(v.query.quantize_rows(&h.queries, D).unwrap(), &h.weights, D, v.scoring)
}

/// Gaussians per second of haystack keys (256 rows × 128 = 32,768 per iteration).
#[divan::bench_group]
mod generation {
    use super::*;

    #[divan::bench]
    fn philox_box_muller(b: Bencher) {
        let h = haystack();
        let mut out = vec![0.0f32; CHUNK * D];
        b.counter(ItemsCount::new(CHUNK * D)).bench_local(|| h.fill_haystack_rows(black_box(4096), &mut out));
    }

    /// The generator before this change: a ChaCha8 stream per row and
    /// rand_distr's ziggurat, then the same `c + σ·z`.
    #[divan::bench]
    fn chacha8_ziggurat_old(b: Bencher) {
        let h = haystack();
        let common = vec![0.1f32; D];
        let std = vec![1.0f32; D];
        let mut out = vec![0.0f32; CHUNK * D];
        let _ = &h;
        b.counter(ItemsCount::new(CHUNK * D)).bench_local(|| {
            for (r, key) in out.chunks_exact_mut(D).enumerate() {
                let mut rng = dsa_recall::base::rng::stream(black_box(77), &[4096 + r as u64]);
                for ((o, &c), &s) in key.iter_mut().zip(&common).zip(&std) {
                    let z: f32 = rng.sample(StandardNormal);
                    *o = c + s * z;
                }
            }
        });
    }
}

/// Rows per second through one variant's key pipeline and the scoring
/// kernel, 256 rows (one engine chunk) per iteration.
#[divan::bench(args = VARIANTS)]
fn quantize_score(b: Bencher, name: &str) {
    let v = PrecisionVariant::builtin(name).unwrap();
    let (h, raw) = keys(CHUNK);
    let q = query(&h, &v);
    // The engine's path (src/score/trial/chunk.rs): element values plus row scales.
    let mut quantized = dsa_recall::numerics::pipeline::QuantizedRows::with_capacity(CHUNK, D);
    let mut out = vec![0.0f32; CHUNK];
    b.counter(ItemsCount::new(CHUNK)).bench_local(|| {
        if v.key.is_identity() {
            q.score_rows(black_box(&raw), &mut out);
        } else {
            v.key.quantize_rows_into(black_box(&raw), D, &mut quantized).unwrap();
            q.score_quantized_rows(&quantized, &mut out);
        }
    });
}

/// The two halves of `quantize_score` timed apart (the same calls; the
/// interleaved, ratio-reporting version is `benches/quantize.rs`): the key
/// pipeline alone on a 256-row chunk…
#[divan::bench(args = VARIANTS)]
fn quantize(b: Bencher, name: &str) {
    let v = PrecisionVariant::builtin(name).unwrap();
    let (_, raw) = keys(CHUNK);
    let mut quantized = dsa_recall::numerics::pipeline::QuantizedRows::with_capacity(CHUNK, D);
    b.counter(ItemsCount::new(CHUNK)).bench_local(|| {
        if !v.key.is_identity() {
            v.key.quantize_rows_into(black_box(&raw), D, &mut quantized).unwrap();
        }
    });
}

/// …and the scoring kernel alone on the quantized chunk.
#[divan::bench(args = VARIANTS)]
fn score(b: Bencher, name: &str) {
    let v = PrecisionVariant::builtin(name).unwrap();
    let (h, raw) = keys(CHUNK);
    let q = query(&h, &v);
    let quantized = v.key.quantize_rows(&raw, D).unwrap();
    let mut out = vec![0.0f32; CHUNK];
    b.counter(ItemsCount::new(CHUNK)).bench_local(|| {
        if v.key.is_identity() {
            q.score_rows(black_box(&raw), &mut out);
        } else {
            q.score_quantized_rows(black_box(&quantized), &mut out);
        }
    });
}

/// Scoring only (keys already in the variant's format), 32K rows, split in
/// two halves on two threads when `threads` is 2.
fn score_32k(b: Bencher, name: &str, threads: usize) {
    let v = PrecisionVariant::builtin(name).unwrap();
    let (h, mut k) = keys(GEMM_ROWS);
    v.key.apply(&mut k, D).unwrap();
    let q = query(&h, &v);
    let mut out = vec![0.0f32; GEMM_ROWS];
    b.counter(ItemsCount::new(GEMM_ROWS)).bench_local(|| {
        if threads == 1 {
            q.score_rows(&k, &mut out);
        } else {
            let (ka, kb) = k.split_at(GEMM_ROWS / 2 * D);
            let (oa, ob) = out.split_at_mut(GEMM_ROWS / 2);
            rayon::join(|| q.score_rows(ka, oa), || q.score_rows(kb, ob));
        }
    });
}

#[divan::bench(args = [1, 2])]
fn score_32k_fp32(b: Bencher, threads: usize) {
    score_32k(b, "fp32", threads);
}

#[divan::bench(args = [1, 2])]
fn score_32k_bf16(b: Bencher, threads: usize) {
    score_32k(b, "bf16", threads);
}

/// C[32K × 64] = K[32K × 128] · Qᵀ[128 × 64], f32, the `gemm` crate.
#[divan::bench(args = [1, 2])]
fn gemm_32k(b: Bencher, threads: usize) {
    let (h, k) = keys(GEMM_ROWS);
    let q = h.queries.clone(); // [64 × 128] row-major = Qᵀ column-major
    let mut c = vec![0.0f32; GEMM_ROWS * 64];
    b.counter(ItemsCount::new(GEMM_ROWS)).bench_local(|| gemm_f32(&k, &q, &mut c, D, 64, threads));
}

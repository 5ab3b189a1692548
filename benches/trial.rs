//! End-to-end performance, all timings of one run side by side
//! (`cargo bench --bench trial`; docs/PERFORMANCE.md quotes it):
//!
//! 1. V4-Flash trials at 32K, 128K and 1M tokens, for one precision (fp32,
//!    fp8; null model, as NumPy computes it), fp32 with the preset's physics
//!    ("fp32 phys") and the preset as shipped (bf16 + fp4, k 512 and 1024),
//!    on 1 and 2 threads: median ms per trial and trials/s (trials run side
//!    by side on 2 threads, so this is throughput);
//!    and the latency of one 128K trial at a time (fp32, null model and with
//!    the preset's physics) on 1 and 2 threads, where its chunks are scored
//!    in parallel;
//!    and whole-model recall's cost: the same trials with the preset's
//!    layer stack and with none, side by side; and a whole-model trial of
//!    each 2026 preset against a V4-Flash one at 256K (`-- plans` alone);
//! 2. our scoring of 32K rows against an optimized GEMM (`gemm` crate) on the
//!    same [32K × 128]·[128 × 64] product: the share of its throughput;
//! 3. the README's default sweep end to end (2 threads, as shipped);
//! 4. peak memory (VmHWM) of a process that runs one 1M-token trial;
//! 5. NumPy (`tools/numpy_reference.py`, when python3 with numpy is there) on
//!    the same fp32 cells: trials/s and our ratio to it;
//! 6. a 1M-token V4-Flash cell of 200 trials in tail mode under the default
//!    (quantile) needle, beside a 64K one in tail mode and full simulation
//!    (`-- tail` alone);
//! 7. the needle margin's cost: the main job with the margin off and on
//!    (`-- margin` alone; 3 rounds even when quick).
//!
//! Repetitions are interleaved (every configuration once per round), so
//! load from elsewhere on the machine hits all of them alike; medians are
//! printed. DSA_BENCH_QUICK=1 runs fewer rounds.

use dsa_recall::config::{self, params::parse_scenario_toml, Scenario};
use dsa_recall::model::haystack::TrialHaystack;
use dsa_recall::run::sweep::run_sweep;
use dsa_recall::score::indexer::IndexerQuery;
use dsa_recall::score::variant::PrecisionVariant;
use std::process::Command;
use std::time::Instant;

#[path = "common/gemm.rs"]
mod common_gemm;
use common_gemm::gemm_f32;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn scenario(text: &str) -> Scenario {
    config::check(config::resolve(parse_scenario_toml(text).expect("toml")).expect("preset")).expect("scenario")
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool")
}

fn time(f: impl FnOnce()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64()
}

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// One 1M-token V4-Flash trial (preset precisions, k 512 and 1024), then VmHWM.
fn peak_child() {
    let s = scenario("[sweep]\ncontexts = \"1M\"\ntrials = 1\n");
    pool(1).install(|| run_sweep(&s, &|| {})).expect("sweep");
    println!("VmHWM_KiB {}", vm_hwm_kib().unwrap_or(0));
}

struct Case {
    label: String,
    scenario: Scenario,
    threads: usize,
    trials: u64,
    times: Vec<f64>,
}

/// The null model, as tools/numpy_reference.py computes it: no physics and
/// exchangeable Gaussian rows (no `[haystack]` structure), one layer (no stack).
const NULL_MODEL: &str = "[physics]\nrope = \"off\"\npooling = \"off\"\n\
    [haystack]\ncontent_rank = 0\nkey_content_share = 0.0\nquery_content_share = 0.0\nrelevance_scale = 0.0\n\
    [stack]\ncompress_ratios = \"none\"\n";

fn main() {
    if std::env::var_os("DSA_BENCH_PEAK_CHILD").is_some() {
        return peak_child();
    }
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` and test harness probes
    }
    let quick = std::env::var_os("DSA_BENCH_QUICK").is_some();
    let rounds = if quick { 1 } else { 3 };
    // `cargo bench --bench trial -- plans` runs section 1e alone, `-- tail`
    // section 6, `-- margin` section 7.
    if std::env::args().any(|a| a == "plans") {
        return plans(rounds);
    }
    if std::env::args().any(|a| a == "tail") {
        return tail_cells(rounds);
    }
    if std::env::args().any(|a| a == "margin") {
        return margin_cost(rounds.max(3));
    }

    // 1. Trials.
    let mut cases = Vec::new();
    for (context, trials) in [("32K", 16u64), ("128K", 16), ("1M", 2)] {
        // fp32 and fp8 on the null model (what tools/numpy_reference.py
        // computes); "as shipped" adds the preset's RoPE, pooling and RMSNorm.
        for (what, precisions, null) in
            [("fp32", "fp32", true), ("fp8", "fp8", true), ("fp32 phys", "fp32", false), ("bf16+fp4", "bf16,fp4", false)]
        {
            for threads in [1usize, 2] {
                let topk = if precisions.contains(',') { "" } else { "topk = \"512\"\n" };
                let physics = if null { NULL_MODEL } else { "" };
                let text = format!("[sweep]\ncontexts = \"{context}\"\ntrials = {trials}\nprecisions = \"{precisions}\"\n{topk}{physics}");
                cases.push(Case {
                    label: format!("{context:>5} {what:<9} {threads} thr"),
                    scenario: scenario(&text),
                    threads,
                    trials,
                    times: vec![],
                });
            }
        }
    }
    let pools = [pool(1), pool(2)];
    for _ in 0..rounds {
        for c in &mut cases {
            let p = &pools[c.threads - 1];
            c.times.push(time(|| {
                p.install(|| run_sweep(&c.scenario, &|| {})).expect("sweep");
            }));
        }
    }
    println!("## V4-Flash trials (median of {rounds} rounds)");
    println!("{:<24} {:>12} {:>12}", "context precision thr", "ms/trial", "trials/s");
    let mut per_trial = std::collections::HashMap::new();
    for c in &cases {
        let t = median(c.times.clone()) / c.trials as f64;
        per_trial.insert(c.label.clone(), t);
        println!("{:<24} {:>12.2} {:>12.2}", c.label, 1e3 * t, 1.0 / t);
    }
    for context in ["32K", "128K", "1M"] {
        let a = per_trial[&format!("{context:>5} {:<9} 1 thr", "fp8")];
        let b = per_trial[&format!("{context:>5} {:<9} 1 thr", "fp32")];
        println!("fp8 / fp32 time per trial at {context}: {:.2}×", a / b);
    }

    // 1b. Latency: one 128K trial at a time, 16 in a row per round.
    println!("\n## one 128K trial at a time (fp32, k 512; median of {rounds} rounds of 16 single-trial runs)");
    let mut single: Vec<(String, Scenario, usize, Vec<f64>)> = Vec::new();
    for (what, physics) in [("null model", NULL_MODEL), ("fp32 phys", "")] {
        for threads in [1usize, 2] {
            let text = format!("[sweep]\ncontexts = \"128K\"\ntrials = 1\nprecisions = \"fp32\"\ntopk = \"512\"\n{physics}");
            single.push((format!("{what:<10} {threads} thr"), scenario(&text), threads, Vec::new()));
        }
    }
    for _ in 0..rounds {
        for (_, s, threads, times) in &mut single {
            let p = &pools[*threads - 1];
            times.push(
                time(|| {
                    for _ in 0..16 {
                        p.install(|| run_sweep(s, &|| {})).expect("sweep");
                    }
                }) / 16.0,
            );
        }
    }
    for (label, _, _, times) in &single {
        println!("{label:<24} {:>12.2} ms", 1e3 * median(times.clone()));
    }

    // 1c. The whole stack against one layer: the same trials with the
    // preset's [stack] and with none (whole-model recall off), 1 thread.
    println!("\n## whole-model recall against per-layer only (preset as shipped, 16 trials, 1 thread; median of {rounds} rounds)");
    let mut stacks: Vec<(String, [Scenario; 2], [Vec<f64>; 2])> = Vec::new();
    for (label, preset, context) in [("V4-Flash 128K", "deepseek-v4-flash", "128K"), ("V3.2 32K", "deepseek-v3.2", "32K")] {
        let text = |stack: &str| format!("preset = \"{preset}\"\n[stack]\n{stack}[sweep]\ncontexts = \"{context}\"\ntrials = 16\n");
        stacks.push((label.to_string(), [scenario(&text("")), scenario(&text("compress_ratios = \"none\"\n"))], [vec![], vec![]]));
    }
    for _ in 0..rounds {
        for (_, scenarios, times) in &mut stacks {
            for (s, t) in scenarios.iter().zip(times.iter_mut()) {
                t.push(
                    time(|| {
                        pools[0].install(|| run_sweep(s, &|| {})).expect("sweep");
                    }) / 16.0,
                );
            }
        }
    }
    println!("{:<24} {:>14} {:>14} {:>8}", "", "stack ms/trial", "layer ms/trial", "ratio");
    for (label, _, [with, without]) in &stacks {
        let (a, b) = (median(with.clone()), median(without.clone()));
        println!("{label:<24} {:>14.2} {:>14.2} {:>7.3}×", 1e3 * a, 1e3 * b, a / b);
    }

    // 1d. The quantile needle's cost: the same trials with the needle
    // placed at its drawn exceedance (the preset's `niah` profile: an exact
    // reference scored beside bf16 and fp4, and the scale solved per
    // context) and with the fixed strength-1 needle (`stress`), 1 thread.
    println!("\n## quantile needle against the strength unit (V4-Flash as shipped, 128K, 16 trials, 1 thread; median of {rounds} rounds)");
    let needle_text = |profile: &str| format!("[needle]\nprofile = \"{profile}\"\n[sweep]\ncontexts = \"128K\"\ntrials = 16\n");
    let needle_cases = [scenario(&needle_text("niah")), scenario(&needle_text("stress"))];
    let mut needle_times = [vec![], vec![]];
    for _ in 0..rounds {
        for (s, t) in needle_cases.iter().zip(needle_times.iter_mut()) {
            t.push(
                time(|| {
                    pools[0].install(|| run_sweep(s, &|| {})).expect("sweep");
                }) / 16.0,
            );
        }
    }
    let (quantile, strength) = (median(needle_times[0].clone()), median(needle_times[1].clone()));
    println!("{:<24} {:>14} {:>14} {:>8}", "", "niah ms/trial", "stress ms/trial", "ratio");
    println!("{:<24} {:>14.2} {:>14.2} {:>7.3}×  (target ≤ 1.3×)", "V4-Flash 128K", 1e3 * quantile, 1e3 * strength, quantile / strength);

    // 2. Scoring vs GEMM on [32K × 128]·[128 × 64].
    let s = scenario("");
    let h = TrialHaystack::draw(&s.model, 42).expect("draw");
    let (rows, d) = (32 * 1024, 128);
    let mut keys = vec![0.0f32; rows * d];
    let gen_t = median((0..5).map(|_| time(|| h.fill_haystack_rows(0, &mut keys))).collect());
    println!(
        "\n## generation: {:.2} ms for 32K rows × 128 ({:.3} ns per Gaussian, 1 thread)",
        1e3 * gen_t,
        1e9 * gen_t / (rows * d) as f64
    );
    let mut out = vec![0.0f32; rows];
    let mut c = vec![0.0f32; rows * 64];
    println!("\n## scoring 32K rows vs gemm {{32K×128}}·{{128×64}} f32 (median of 7, interleaved)");
    for name in ["fp32", "bf16"] {
        let v = PrecisionVariant::builtin(name).expect("variant");
        let mut k = keys.clone();
        v.key.apply(&mut k, d).expect("quantize");
        let q = v.query.quantize_rows(&h.queries, d).expect("quantize");
        let iq = IndexerQuery::new(q, &h.weights, d, v.scoring);
        for threads in [1usize, 2] {
            let p = &pools[threads - 1];
            let (mut ours, mut theirs) = (vec![], vec![]);
            for _ in 0..7 {
                ours.push(time(|| {
                    p.install(|| {
                        let (ka, kb) = k.split_at(rows / 2 * d);
                        let (oa, ob) = out.split_at_mut(rows / 2);
                        rayon::join(|| iq.score_rows(ka, oa), || iq.score_rows(kb, ob));
                    })
                }));
                theirs.push(time(|| p.install(|| gemm_f32(&k, &h.queries, &mut c, 128, 64, threads))));
            }
            let (o, t) = (median(ours), median(theirs));
            println!(
                "{name:<5} {threads} thr: ours {:.2} ms ({:.1} GFLOP/s), gemm {:.2} ms ({:.1} GFLOP/s): ours = {:.0} % of gemm",
                1e3 * o,
                2.0 * (rows * d * 64) as f64 / o / 1e9,
                1e3 * t,
                2.0 * (rows * d * 64) as f64 / t / 1e9,
                100.0 * t / o
            );
        }
    }

    // 3. The README's default sweep.
    let sweep_rounds = if quick { 1 } else { 2 };
    let default = scenario("");
    let t = median(
        (0..sweep_rounds)
            .map(|_| {
                time(|| {
                    pools[1].install(|| run_sweep(&default, &|| {})).expect("sweep");
                })
            })
            .collect(),
    );
    println!("\n## default sweep (deepseek-v4-flash, 1K..128K, k 512/1024, bf16+fp4, 400 trials), 2 threads: {t:.2} s (median of {sweep_rounds})");

    // 4. Peak memory at 1M tokens, in a fresh process.
    let exe = std::env::current_exe().expect("exe");
    let child = Command::new(exe).env("DSA_BENCH_PEAK_CHILD", "1").output().expect("child");
    let text = String::from_utf8_lossy(&child.stdout);
    if let Some(kib) = text.lines().find_map(|l| l.strip_prefix("VmHWM_KiB ")).and_then(|v| v.trim().parse::<f64>().ok()) {
        println!("\n## peak memory (VmHWM) of one 1M-token V4-Flash trial (bf16+fp4, k 512/1024): {:.1} MiB", kib / 1024.0);
    }

    // 6. Tail mode at 1M under the quantile needle (before NumPy, which may be absent).
    tail_cells(rounds);

    // 5. NumPy on the same fp32 cells.
    println!("\n## NumPy reference (tools/numpy_reference.py, fp32, k 512, depth 50 %)");
    for (context, trials) in [("32K", 20u64), ("128K", 16)] {
        // Three rounds, each timing our fp32 and fp8 trials (1 and 2 threads)
        // right before a NumPy run (which times its trials after one warm-up).
        let find =
            |what: &str, threads: usize| cases.iter().find(|c| c.label == format!("{context:>5} {what:<9} {threads} thr")).expect("case");
        let mut ours: [Vec<f64>; 4] = Default::default();
        let mut runs = Vec::new();
        for _ in 0..3 {
            for (slot, (what, threads)) in [("fp32", 1), ("fp32", 2), ("fp8", 1), ("fp8", 2)].into_iter().enumerate() {
                let c = find(what, threads);
                let t = time(|| {
                    pools[threads - 1].install(|| run_sweep(&c.scenario, &|| {})).expect("sweep");
                });
                ours[slot].push(c.trials as f64 / t);
            }
            let out = Command::new("python3")
                .args(["tools/numpy_reference.py", "--contexts", context, "--trials", &trials.to_string(), "--json"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()
                .filter(|o| o.status.success());
            let Some(out) = out else { break };
            let json = String::from_utf8_lossy(&out.stdout).into_owned();
            if let Some(tps) =
                json.split("\"trials_per_s\": ").nth(1).and_then(|r| r.split([',', '}']).next()).and_then(|v| v.trim().parse::<f64>().ok())
            {
                runs.push(tps);
            }
        }
        if runs.is_empty() {
            println!("python3 with numpy not available: skipped");
            break;
        }
        let tps = median(runs);
        let [f1, f2, e1, e2] = ours.map(median);
        println!(
            "{context:>5}: numpy {tps:.2} trials/s; ours fp32 {f1:.2} (1 thr) = {:.1}×, {f2:.2} (2 thr) = {:.1}×; ours fp8 {e1:.2} (1 thr) = {:.1}×, {e2:.2} (2 thr) = {:.1}×; fp8/fp32 time {:.2}× (1 thr)",
            f1 / tps,
            f2 / tps,
            e1 / tps,
            e2 / tps,
            f1 / e1
        );
    }
}

/// Section 6, long contexts in tail mode under the default (quantile)
/// needle: a 1M-token V4-Flash cell as shipped (bf16 and fp4, k 512, whole model
/// and margin on), 200 trials on 2 threads (target ≤ 10 s), beside the
/// same cell at 64K in full simulation and in tail mode.
fn tail_cells(rounds: usize) {
    let cell = |context: &str, mode: &str| {
        scenario(&format!(
            "[sweep]\ncontexts = \"{context}\"\ndepths = \"50\"\ntopk = \"512\"\ntrials = 200\n[estimator]\nmode = \"{mode}\"\n"
        ))
    };
    let cases = [("1M, tail", cell("1M", "tail")), ("64K, tail", cell("64K", "tail")), ("64K, full", cell("64K", "full"))];
    let two = pool(2);
    let mut times = vec![Vec::new(); cases.len()];
    for _ in 0..rounds {
        for (t, (_, s)) in times.iter_mut().zip(&cases) {
            t.push(time(|| {
                two.install(|| run_sweep(s, &|| {})).expect("sweep");
            }));
        }
    }
    println!("\n## tail mode, quantile needle (V4-Flash, bf16+fp4, k 512, depth 50 %, 200 trials, margin on), 2 threads");
    for ((label, _), t) in cases.iter().zip(times) {
        println!("{label:>10}: {:.2} s (median of {rounds})", median(t));
    }
}

/// Section 7, the needle margin's cost: the README's main job (the default
/// preset and grid, 200 trials, 1 thread) with the margin off and on,
/// interleaved (target: on ≤ 1.2× off).
fn margin_cost(rounds: usize) {
    let job = |on: bool| scenario(&format!("[sweep]\ntrials = 200\n[estimator]\nmargin = {on}\n"));
    let cases = [("margin off", job(false)), ("margin on", job(true))];
    let one = pool(1);
    let mut times = vec![Vec::new(); cases.len()];
    for _ in 0..rounds {
        for (t, (_, s)) in times.iter_mut().zip(&cases) {
            t.push(time(|| {
                one.install(|| run_sweep(s, &|| {})).expect("sweep");
            }));
        }
    }
    println!("\n## the needle margin's cost (main job, 200 trials, 1 thread; median of {rounds} interleaved rounds)");
    let medians: Vec<f64> = times.into_iter().map(median).collect();
    for ((label, _), m) in cases.iter().zip(&medians) {
        println!("{label:>10}: {m:.2} s");
    }
    println!("  on / off: {:.3}× (target ≤ 1.2×)", medians[1] / medians[0]);
}

/// 1e. A whole-model trial of each layer-plan preset (mixed ratios, reused
/// selections, linear layers) against a V4-Flash one, at 256K, 1 thread:
/// each preset as shipped (its precisions, k = index_topk, its stack), the
/// same with bf16 and fp4 for every preset (V4-Flash's shipped pair).
fn plans(rounds: usize) {
    let presets = ["deepseek-v4-flash", "deepseek-v4.1-flash", "glm-5.2", "glm-5.3-flash"];
    let kinds = [("as shipped", ""), ("bf16+fp4", "precisions = \"bf16,fp4\"\n")];
    let mut cases: Vec<(usize, usize, Scenario, Vec<f64>)> = Vec::new();
    for (ki, (_, precisions)) in kinds.iter().enumerate() {
        for (pi, p) in presets.iter().enumerate() {
            let text = format!("preset = \"{p}\"\n[sweep]\ncontexts = \"256K\"\ntopk = \"{}\"\ntrials = 8\n{precisions}", topk_of(p));
            cases.push((ki, pi, scenario(&text), Vec::new()));
        }
    }
    let one = pool(1);
    for _ in 0..rounds {
        for (_, _, s, t) in &mut cases {
            t.push(
                time(|| {
                    one.install(|| run_sweep(s, &|| {})).expect("sweep");
                }) / 8.0,
            );
        }
    }
    println!("## whole-model trials by preset, 256K (k = index_topk, 8 trials, 1 thread; median of {rounds} rounds)");
    println!("{:<22} {:>20} {:>20}", "preset", kinds[0].0, kinds[1].0);
    let ms = |ki: usize, pi: usize| median(cases.iter().find(|c| c.0 == ki && c.1 == pi).expect("case").3.clone());
    for (pi, p) in presets.iter().enumerate() {
        let cells: Vec<String> =
            (0..kinds.len()).map(|ki| format!("{:8.1} ms {:5.2}×", 1e3 * ms(ki, pi), ms(ki, pi) / ms(ki, 0))).collect();
        println!("{p:<22} {:>20} {:>20}", cells[0], cells[1]);
    }
}

/// A preset's index_topk, its shipped k.
fn topk_of(preset: &str) -> u64 {
    scenario(&format!("preset = \"{preset}\"\n")).index_topk
}

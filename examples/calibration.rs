//! Recomputes the table of docs/CALIBRATION.md: the simulator's figures, with
//! 95 % intervals, beside the public measurements of the real indexer that
//! its defaults are meant to reproduce. Each row says what exactly is
//! compared; the sources and definitions are in docs/CALIBRATION.md.
//!
//! `cargo run --release --example calibration` (about 4.5 minutes on 2 cores);
//! `DSA_CALIBRATION_TRIALS=N` changes the trials per cell (default 200).

use dsa_recall::base::stats::{mean_interval, wilson_interval, Z95};
use dsa_recall::config::{self, params::parse_scenario_toml, Scenario};
use dsa_recall::estimate::driver::trial_seed;
use dsa_recall::estimate::stack::{adjacent_overlap, correlation_for_overlap, DECODE_CAPTURE_SHARE, OVERLAP_ENDS, TOKEN_OVERLAP_ENDS};
use dsa_recall::model::haystack::TrialHaystack;
use dsa_recall::model::row_source::context_keys;
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::run_sweep;

fn scenario(text: &str) -> Scenario {
    let params = parse_scenario_toml(text).expect("scenario TOML");
    config::check(config::resolve(params).expect("preset")).expect("valid scenario")
}

fn sweep(text: &str) -> Vec<CellResult> {
    run_sweep(&scenario(text), &|| {}).expect("sweep").cells
}

/// One row of the table.
struct Row {
    quantity: String,
    public: &'static str,
    target: &'static str,
    ours: String,
    met: Option<bool>,
    /// Whether the defaults were fitted to this target or it checks them.
    role: &'static str,
}

const FITTED: &str = "fitted";
const CHECK: &str = "check (not fitted)";
const PREDICTION: &str = "prediction (no target)";

fn interval(x: (f64, f64, f64)) -> String {
    format!("{:.3} [{:.3}, {:.3}]", x.0, x.1, x.2)
}

fn wilson(c: &CellResult) -> (f64, f64, f64) {
    let (lo, hi) = wilson_interval(c.survived, c.trials, Z95);
    (c.recall, lo, hi)
}

/// Mean of `xs` with a normal 95 % interval.
fn mean_ci(xs: &[f64]) -> (f64, f64, f64) {
    let (s, s2) = xs.iter().fold((0.0, 0.0), |(a, b), x| (a + x, b + x * x));
    mean_interval(s, s2, xs.len() as u64).unwrap_or((f64::NAN, f64::NAN, f64::NAN))
}

/// One trial (index `t`, depth 50 %) of `s` at `context` tokens: the count of
/// negative per-head products q_h·k over every row and head, and each row's
/// ReLU score Σ w_h ReLU(q_h·k) and linear score Σ w_h q_h·k (exact f32
/// keys, as scored; the (H·d)^-1/2 scale left out).
fn trial_scores(s: &Scenario, t: u64, context: u64) -> (u64, Vec<f64>, Vec<f64>) {
    let (heads, d) = (s.model.shape.heads, s.model.shape.head_dim);
    let seed = trial_seed(s.seed, 50.0, t);
    let hay = TrialHaystack::draw(&s.model, seed).expect("haystack");
    let placement = s.geometry.place_needle(context, s.needle_tokens, 50.0);
    let (keys, queries) = context_keys(&s.model, &s.physics, s.geometry, &hay, seed, context, placement.tokens, None).expect("rows");
    let rows = keys.len() / d;
    let (mut neg, mut relu, mut linear) = (0u64, vec![0.0f64; rows], vec![0.0f64; rows]);
    for (r, key) in keys.chunks_exact(d).enumerate() {
        for h in 0..heads {
            let dot: f64 = queries[h * d..(h + 1) * d].iter().zip(key).map(|(&q, &x)| f64::from(q) * f64::from(x)).sum();
            neg += u64::from(dot < 0.0);
            let w = f64::from(hay.weights[h]);
            relu[r] += w * dot.max(0.0);
            linear[r] += w * dot;
        }
    }
    (neg, relu, linear)
}

/// Per trial of the V4-Flash preset at `context` tokens (depth 50 %): the
/// share of negative per-head products q_h·k over every row and head, and
/// the overlap of the top-`k` rows by the ReLU score with the top-`k` by the
/// linear score.
fn sign_structure(context: u64, k: usize, trials: u64) -> (Vec<f64>, Vec<f64>) {
    let s = scenario(&format!("preset = \"deepseek-v4-flash\"\n[sweep]\ncontexts = \"{context}\"\nseed = 23\n"));
    let heads = s.model.shape.heads;
    let (mut negative, mut overlap) = (Vec::new(), Vec::new());
    for t in 0..trials {
        let (neg, relu, linear) = trial_scores(&s, t, context);
        let top = |scores: &[f64]| {
            let mut idx: Vec<usize> = (0..scores.len()).collect();
            idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
            idx.truncate(k);
            idx.sort_unstable();
            idx
        };
        let (a, b) = (top(&relu), top(&linear));
        negative.push(neg as f64 / (relu.len() * heads) as f64);
        overlap.push(a.iter().filter(|i| b.binary_search(i).is_ok()).count() as f64 / k as f64);
    }
    (negative, overlap)
}

/// Per trial of the V3.2 preset at 64K tokens (depth 50 %): the mean of the
/// row's logits over their standard deviation, and their excess kurtosis
/// (the shape TensorRT-LLM's blog 19 fits; the scale drops out of both).
fn logit_shape(trials: u64) -> (Vec<f64>, Vec<f64>) {
    let context = 64 << 10;
    let s = scenario(&format!("preset = \"deepseek-v3.2\"\n[sweep]\ncontexts = \"{context}\"\nseed = 26\n"));
    let (mut mean, mut kurtosis) = (Vec::new(), Vec::new());
    for t in 0..trials {
        let x = trial_scores(&s, t, context).1;
        let n = x.len() as f64;
        let mu = x.iter().sum::<f64>() / n;
        let moment = |p: i32| x.iter().map(|v| (v - mu).powi(p)).sum::<f64>() / n;
        let var = moment(2);
        mean.push(mu / var.sqrt());
        kurtosis.push(moment(4) / (var * var) - 3.0);
    }
    (mean, kurtosis)
}

/// 2560 → "2.5K".
fn tokens(n: u64) -> String {
    dsa_recall::base::units::tokens_label(n)
}

/// Selection fidelity (mean share of fp32's top-k kept, 95 % interval) of a cell.
fn fidelity(c: &CellResult) -> (f64, f64, f64) {
    (c.selection_recall.unwrap_or(f64::NAN), c.selection_recall_ci_low.unwrap_or(f64::NAN), c.selection_recall_ci_high.unwrap_or(f64::NAN))
}

fn model(c: &CellResult) -> (f64, f64, f64) {
    (c.model_recall.unwrap_or(f64::NAN), c.model_ci_low.unwrap_or(f64::NAN), c.model_ci_high.unwrap_or(f64::NAN))
}

/// A public healthy control of a 2026 preset: what was found, where.
struct Control {
    preset: &'static str,
    /// What stands in for the deployment beyond the preset, as a short label.
    what: &'static str,
    /// Scenario lines before `[sweep]` (a layer plan, …).
    extra: &'static str,
    contexts: &'static str,
    depths: &'static str,
    format: &'static str,
    topk: u64,
    public: &'static str,
    /// Contexts of 256K and more: half the trials.
    long: bool,
}

/// V4-Flash with IndexCache: every second (third) CSA layer reuses the
/// top-k of the one before it, as `index_topk_freq` 2 (3) does.
const INDEXCACHE_2: &str = "[stack]\nlayers = \"w*2, (i4, h128, s, h128)*10, i4\"\n";
const INDEXCACHE_3: &str = "[stack]\nlayers = \"w*2, (i4, h128, s, h128, s, h128)*6, i4, h128, s, h128, s\"\n";

const INDEXCACHE_PUBLIC: &str = "18,930-token prompt, needle at depth 0.15 / 0.5 / 0.85 retrieved with IndexCache off, at freq 2 and 3, V4-Flash, fp8_ds_mla (vllm-project/vllm #51209)";

const CONTROLS: &[Control] = &[
    Control {
        preset: "deepseek-v4.1-flash",
        what: "as released",
        extra: "",
        contexts: "950000",
        depths: "10,50,90",
        format: "fp8-fp32scale",
        topk: 512,
        public: "950K-token double-needle retrieval correct, V4.1-Flash, fp8 KV, TP8 (vllm-project/vllm #56700, 2026-09-13)",
        long: true,
    },
    Control {
        preset: "glm-5.3-flash",
        what: "as released",
        extra: "",
        contexts: "128K,512K,1M",
        depths: "10,50,90",
        format: "fp8",
        topk: 512,
        public: "two needles per tier at 128K / 512K / 1M, all recovered, GLM-5.3-Flash FP8, TP8 (vllm-project/vllm #53963, 2026-09-22)",
        long: true,
    },
    Control {
        preset: "glm-5.3-flash",
        what: "as released",
        extra: "",
        contexts: "40000",
        depths: "33,50",
        format: "fp8",
        topk: 512,
        public: "needle at 50 % 3/3 and at 33 % 2/2 at ~40K, GLM-5.3-Flash fp8, 8×MI350X after the fix (vllm-project/vllm #54359 follow-up, 2026-09-18)",
        long: false,
    },
    Control {
        preset: "glm-5.3-flash",
        what: "bf16 keys: a llama.cpp cache",
        extra: "",
        contexts: "9540,28439,56792,88290,188K",
        depths: "50",
        format: "bf16",
        topk: 512,
        public: "nine needles, nine recalls at 9,540–188K tokens, GLM-5.3-Flash UD-IQ3_XXS on llama.cpp (noonghunna/club-3090 #1129, 2026-09-06)",
        long: false,
    },
    Control {
        preset: "glm-5.2",
        what: "GLM-5.3, whose config is GLM-5.2's",
        extra: "",
        contexts: "203982,291408,485646,777003,1010121",
        depths: "50",
        format: "fp8-fp32scale",
        topk: 2048,
        public: "a secret phrase mid-prompt quoted exactly at 203,982 – 1,010,121 tokens, GLM-5.3 on the Z.ai API (NousResearch/hermes-agent #87262, 2026-08-15)",
        long: true,
    },
    Control {
        preset: "deepseek-v4-flash",
        what: "IndexCache freq 2",
        extra: INDEXCACHE_2,
        contexts: "18930",
        depths: "15,50,85",
        format: "fp8-fp32scale",
        topk: 512,
        public: INDEXCACHE_PUBLIC,
        long: false,
    },
    Control {
        preset: "deepseek-v4-flash",
        what: "IndexCache freq 3",
        extra: INDEXCACHE_3,
        contexts: "18930",
        depths: "15,50,85",
        format: "fp8-fp32scale",
        topk: 512,
        public: INDEXCACHE_PUBLIC,
        long: false,
    },
];

/// The cell with the lowest whole-model recall.
fn worst<'a>(cells: impl Iterator<Item = &'a CellResult>) -> &'a CellResult {
    cells.min_by(|a, b| a.model_recall.unwrap_or(0.0).total_cmp(&b.model_recall.unwrap_or(0.0))).expect("cells")
}

fn main() {
    let trials: u64 = std::env::var("DSA_CALIBRATION_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let mut rows = Vec::new();

    // Index scores rounded to bf16 or fp16 against fp32 scores (queries and
    // keys exact), V4-Flash, k 512: what DeepSeek-V4 §5.2.1 attaches its
    // "99.7 % recall of KV entries" to, and the FP16 step vLLM PR #52696 measures.
    let cells = sweep(&format!(
        "preset = \"deepseek-v4-flash\"\n[[precision]]\nname = \"bf16-scores\"\nlogits = \"bf16\"\n\
         [[precision]]\nname = \"fp16-scores\"\nlogits = \"f16\"\n\
         [sweep]\ncontexts = \"8K,32K,128K\"\nprecisions = \"fp32,bf16-scores,fp16-scores,fp8-fp32scale,fp4\"\n\
         topk = [512]\ntrials = {trials}\nseed = 21\n"
    ));
    for c in cells.iter().filter(|c| c.precision == "bf16-scores") {
        let x = fidelity(c);
        rows.push(Row {
            quantity: format!("index scores in bf16 vs fp32, top-512 set recall, {}", tokens(c.context_tokens)),
            public: "99.7 % recall of KV entries after quantizing index scores FP32 → BF16 (DeepSeek-V4 report §5.2.1)",
            target: "≈ 0.997 (≥ 0.99)",
            ours: interval(x),
            met: Some(x.0 >= 0.99),
            role: CHECK,
        });
    }
    for c in cells.iter().filter(|c| c.precision == "fp16-scores") {
        let x = fidelity(c);
        rows.push(Row {
            quantity: format!("index scores in fp16 vs fp32, top-512 set recall, {}", tokens(c.context_tokens)),
            public: "0.99931 (fp16 vs fp32 index scores, top-2048 at ~199K, GLM-5.2 decode; vLLM PR #52696)",
            target: "≥ 0.999",
            ours: interval(x),
            met: Some(x.0 >= 0.999),
            role: CHECK,
        });
    }
    // fp4 QK has no public set-recall figure: a prediction, with the bound for
    // exchangeable rows 1 − r·(1 − overlap), r ≥ 0.08 (docs/CALIBRATION.md).
    let overlap_32k = sign_structure(32 * 1024, 512, (trials / 10).max(5)).1;
    let bound = 1.0 - 0.08 * (1.0 - mean_ci(&overlap_32k).0);
    for c in cells.iter().filter(|c| c.precision == "fp4" || c.precision == "fp8-fp32scale") {
        let x = fidelity(c);
        let fp4 = c.precision == "fp4";
        rows.push(Row {
            quantity: format!("{} (QK quantized) top-512 set recall vs fp32, {}", c.precision, tokens(c.context_tokens)),
            public: if fp4 {
                "none published (the V4 report's 99.7 % is the BF16 score step, row above)"
            } else {
                "none published for V4 (V3.2 check below)"
            },
            target: if fp4 { "prediction; ≤ 1 − 0.08·(1 − ReLU/linear overlap) under exchangeable rows" } else { "prediction" },
            ours: interval(x),
            met: fp4.then_some(x.0 <= bound + 0.005),
            role: PREDICTION,
        });
    }

    // V3.2's fp8 indexers against fp32, token level, top-2048, and fp16
    // scores at ~192K (vLLM PR #52696's own context).
    let cells = sweep(&format!(
        "preset = \"deepseek-v3.2\"\n[sweep]\ncontexts = \"4K,16K,64K\"\nprecisions = \"fp32,fp8,fp8-fp32scale\"\ntopk = [2048]\n\
         trials = {}\nseed = 24\n",
        (trials / 2).max(20)
    ));
    for c in cells.iter().filter(|c| c.precision != "fp32") {
        let x = fidelity(c);
        rows.push(Row {
            quantity: format!("V3.2 {} top-2048 set recall vs fp32, {}", c.precision, tokens(c.context_tokens)),
            public: "0.983 (GLM-5.2 fp8 indexer vs f32 oracle, pegainfer PR #521)",
            target: "0.96–1.00 (another model: compatible, not equal)",
            ours: interval(x),
            met: Some((0.96..=1.0).contains(&x.0)),
            role: CHECK,
        });
    }
    let cells = sweep(&format!(
        "preset = \"deepseek-v3.2\"\n[[precision]]\nname = \"fp16-scores\"\nlogits = \"f16\"\n\
         [sweep]\ncontexts = \"192K\"\nprecisions = \"fp32,fp16-scores\"\ntopk = [2048]\ntrials = {}\nseed = 24\n",
        (trials / 10).max(10)
    ));
    for c in cells.iter().filter(|c| c.precision != "fp32") {
        let x = fidelity(c);
        rows.push(Row {
            quantity: format!("V3.2 index scores in fp16 vs fp32, top-2048 set recall, {}", tokens(c.context_tokens)),
            public: "0.99931 (top-2048 at ~199K, GLM-5.2 decode; vLLM PR #52696)",
            target: "≥ 0.999",
            ours: interval(x),
            met: Some(x.0 >= 0.999),
            role: CHECK,
        });
    }

    // The stack's correlations against the overlaps they were set from
    // (adjacent_overlap at a top share of 1/16; docs/MODEL.md).
    let flash = scenario("preset = \"deepseek-v4-flash\"\n");
    let stack = flash.stack.clone().expect("the V4-Flash preset has a stack");
    let layer_overlap = adjacent_overlap(stack.layer_correlation, 1.0 / 16.0);
    rows.push(Row {
        quantity: format!("adjacent-layer top-k overlap at a top share of 1/16 (ρ_L = {})", stack.layer_correlation),
        public: "70–100 % (THUDM IndexCache README: 47-layer DSA model, GLM-5)",
        target: "0.7–1.0",
        ours: format!("{layer_overlap:.3}"),
        met: Some((0.7..=1.0).contains(&layer_overlap)),
        role: FITTED,
    });
    // Adjacent decode steps: the deep layers' default and the early layers'
    // (docs/MODEL.md, "Per-layer profiles"), at the capture's top share.
    let capture = DECODE_CAPTURE_SHARE;
    let token_overlap = adjacent_overlap(stack.token_correlation, capture);
    rows.push(Row {
        quantity: format!(
            "adjacent-decode-step top-k overlap past the early layers, at a top share of 2048/70,690 (ρ_T = {})",
            stack.token_correlation
        ),
        public: "35–50 % average in layers 20–60 (max ~60 %), real V3.2 decode, top-2048 of ~70K rows, 2,024 steps (TensorRT-LLM tech blog 19, PR #12684)",
        target: "0.35–0.50 (the middle, 0.425)",
        ours: format!("{token_overlap:.3}"),
        met: Some((0.35..=0.50).contains(&token_overlap)),
        role: FITTED,
    });
    let early_overlap = adjacent_overlap(stack.early_token_correlation, capture);
    rows.push(Row {
        quantity: format!(
            "adjacent-decode-step top-k overlap in the early layers (model layers 0–1), at 2048/70,690 (ρ_T = {})",
            stack.early_token_correlation
        ),
        public: "~1–2 % in layers 0–1 (1.5 % in the ablation), chance 2.9 % (TensorRT-LLM tech blog 19, PR #12684)",
        target: "at most chance (0.029): ρ_T 0, the mapping's floor",
        ours: format!("{early_overlap:.3}"),
        met: Some(early_overlap <= capture + 1e-9),
        role: FITTED,
    });
    let [token_low, token_high] = TOKEN_OVERLAP_ENDS;
    let token_rho = |(overlap, share): (f64, f64)| correlation_for_overlap(overlap, share);
    rows.push(Row {
        quantity: format!(
            "the token band's ends: decode-step overlap {} at 2048/70,690 and {} at 1/16 (ρ_T = {:.4} and {:.4})",
            token_low.0,
            token_high.0,
            token_rho(token_low),
            token_rho(token_high)
        ),
        public: "35 %, the lowest deep-layer mean (TensorRT-LLM PR #12684); ≥ 95 % asserted without a method, V4-Flash (GDzhu01/vllm-ascend-deepseekv4 PR #134)",
        target: "both ends shown as the band",
        ours: format!(
            "{:.3} and {:.3}",
            adjacent_overlap(token_rho(token_low), token_low.1),
            adjacent_overlap(token_rho(token_high), token_high.1)
        ),
        met: None,
        role: "assumption (band)",
    });
    let (low, high) = OVERLAP_ENDS;
    rows.push(Row {
        quantity: format!(
            "the band's ends: adjacent-layer overlap {low} and {high} at a top share of 1/16 (ρ_L = {:.4} and {:.6})",
            correlation_for_overlap(low, 1.0 / 16.0),
            correlation_for_overlap(high, 1.0 / 16.0)
        ),
        public: "~38 % top-512 overlap across layers, V4-Flash prefill (vllm PR #41834); 70–100 % (IndexCache)",
        target: "both ends shown as the band",
        ours: format!(
            "{:.3} and {:.3}",
            adjacent_overlap(correlation_for_overlap(low, 1.0 / 16.0), 1.0 / 16.0),
            adjacent_overlap(correlation_for_overlap(high, 1.0 / 16.0), 1.0 / 16.0)
        ),
        met: None,
        role: "assumption (band)",
    });

    // Where the default needle ranks: fp32, ~55K tokens (13,801 rows in the
    // capture; 56K gives 14,336), the profile's own source.
    let cells = sweep(&format!(
        "preset = \"deepseek-v4-flash\"\n[sweep]\ncontexts = \"56K\"\ndepths = \"10,50,90\"\nprecisions = \"fp32\"\ntopk = [512]\n\
         trials = {trials}\nseed = 42\n"
    ));
    for c in &cells {
        let q = c.rank_share_quantiles.map(|q| q.map(|x| x * c.k_eff as f64)).unwrap_or([f64::NAN; 5]);
        let capped = c.needle_capped.unwrap_or(0) as f64 / c.trials as f64;
        rows.push(Row {
            quantity: format!(
                "median rank of the needle (niah profile, fp32), 56K, depth {} % (5–95 %: {:.0}–{:.0}; capped by the norm in {:.1} % of trials)",
                c.depth_percent,
                q[0],
                q[4],
                100.0 * capped
            ),
            public: "rank 0–16 of 13,801 compressed rows, a correct V4 prefill path (1CatAI/1Cat-vLLM PR #250)",
            target: "median 0–16",
            ours: format!("{:.1}", c.median_rank.unwrap_or(f64::NAN)),
            met: Some(c.median_rank.is_some_and(|m| m <= 16.0)),
            role: "fitted (the profile reads it)",
        });
    }

    // A correct V4-Flash finds a needle at 4K–256K (sglang PR #33271, issue
    // #33194): whole-model recall, bf16, k 512, the worst context per depth.
    let needle_grid = |precisions: &str, contexts: &str| {
        sweep(&format!(
            "preset = \"deepseek-v4-flash\"\n[sweep]\ncontexts = \"{contexts}\"\ndepths = \"10,50,90\"\nprecisions = \"{precisions}\"\n\
             topk = [512]\ntrials = {trials}\nseed = 22\n"
        ))
    };
    let default_needle = needle_grid("bf16", "4K..256K");
    for depth in [10.0, 50.0, 90.0] {
        let c = worst(default_needle.iter().filter(|c| c.depth_percent == depth));
        rows.push(Row {
            quantity: format!(
                "bf16, k 512, niah needle, worst of 4K–256K at depth {depth} %: whole-model recall ({}; per-layer there {}; band {:.3}–{:.3})",
                tokens(c.context_tokens),
                interval(wilson(c)),
                c.model_band_low.unwrap_or(f64::NAN),
                c.model_band_high.unwrap_or(f64::NAN)
            ),
            public: "4/4 needles found at 32K–256K (sglang PR #33271); 4/4 at 4K/32K/128K × depths 0.1/0.5/0.9 (sglang #33194)",
            target: "≥ 0.95 at every context",
            ours: interval(model(c)),
            met: Some(c.model_recall.unwrap_or(0.0) >= 0.95),
            role: CHECK,
        });
    }
    // Both fp8 and fp4 indexers find it at 50K–250K (vLLM PR #52696, 12/12 each).
    let quantized = needle_grid("fp8-fp32scale,fp4", "64K,128K,256K");
    for p in ["fp8-fp32scale", "fp4"] {
        let c = worst(quantized.iter().filter(|c| c.precision == p));
        rows.push(Row {
            quantity: format!(
                "{p}, k 512, niah needle, worst of 64K–256K × depths 10/50/90: whole-model recall ({}, depth {} %)",
                tokens(c.context_tokens),
                c.depth_percent
            ),
            public: "12/12 found with the FP8 and 12/12 with the FP4 indexer at 50K–250K, depths 10/50/90 (vLLM PR #52696)",
            target: "≥ 0.95 at every cell",
            ours: interval(model(c)),
            met: Some(c.model_recall.unwrap_or(0.0) >= 0.95),
            role: CHECK,
        });
    }

    // Healthy controls of the 2026 presets (docs/CALIBRATION.md, "Healthy
    // controls of the 2026 presets"): each deployment found its needles, so
    // whole-model recall should be ≥ 0.95 in every cell. Cells at 256K and
    // beyond run half the trials (a ratio-1 layer at 1M scores 1M rows).
    for control in CONTROLS {
        let n = if control.long { (trials / 2).max(20) } else { trials };
        let cells = sweep(&format!(
            "preset = \"{}\"\n{}[sweep]\ncontexts = \"{}\"\ndepths = \"{}\"\nprecisions = \"{}\"\n\
             topk = [{}]\ntrials = {n}\nseed = 27\n",
            control.preset, control.extra, control.contexts, control.depths, control.format, control.topk
        ));
        let c = worst(cells.iter());
        rows.push(Row {
            quantity: format!(
                "{} ({}), {}, k {}, niah needle, worst of {} × depths {}: whole-model recall ({}, depth {} %; {n} trials)",
                control.preset,
                control.what,
                control.format,
                control.topk,
                control.contexts,
                control.depths,
                tokens(c.context_tokens),
                c.depth_percent
            ),
            public: control.public,
            target: "≥ 0.95 at every cell",
            ours: interval(model(c)),
            met: Some(c.model_recall.unwrap_or(0.0) >= 0.95),
            role: CHECK,
        });
    }

    // The seed incident's surviving fault (constant logits, index-ordered
    // ties; docs/FINDINGS.md, 1) under the default needle.
    let cells = sweep(&format!(
        "preset = \"deepseek-v4-flash\"\n[sweep]\ncontexts = \"2K,2.5K,3K,4K,5K,6K,8K,10K\"\n\
         depths = \"80\"\nprecisions = \"bf16,fp8-fp32scale+scale-unwritten-zero+ties-lowest\"\ntopk = [512, 1024]\n\
         trials = {}\nseed = 25\n",
        (trials / 2).max(20)
    ));
    for k in [512, 1024] {
        let series = |p: &str| -> Vec<&CellResult> { cells.iter().filter(|c| c.topk == k && c.precision.starts_with(p)).collect() };
        let reach =
            |cs: &[&CellResult]| cs.iter().take_while(|c| c.model_recall.unwrap_or(0.0) >= 0.9).last().map_or(0, |c| c.context_tokens);
        let (fault, bf16) = (series("fp8"), series("bf16"));
        let (fault_reach, bf16_reach) = (reach(&fault), reach(&bf16));
        let lost_by = fault.iter().find(|c| c.model_recall.unwrap_or(1.0) <= 0.1).map_or(u64::MAX, |c| c.context_tokens);
        let (keep, lose) = if k == 512 { (2048, 4096) } else { (4096, 8192) };
        rows.push(Row {
            quantity: format!(
                "seed incident fault (scale-unwritten-zero+ties-lowest, depth 80 %), niah needle, k {k}: whole model reliable to {}, lost by {}; bf16 reliable to {}",
                tokens(fault_reach),
                if lost_by == u64::MAX { "—".to_string() } else { tokens(lost_by) },
                tokens(bf16_reach)
            ),
            public: "reliable to ~2.5K (k 512) / ~5K (k 1024), lost beyond, bf16 keys fix it (the seed report)",
            target: if k == 512 { "kept at 2K, lost by 4K; bf16 ≥ 10K" } else { "kept to 4–5K, lost by 8K; bf16 ≥ 10K" },
            ours: format!("fault {}, bf16 {}", tokens(fault_reach), tokens(bf16_reach)),
            met: Some(fault_reach >= keep && lost_by <= lose && bf16_reach >= 10 * 1024),
            role: CHECK,
        });
    }

    // The trained indexer's sign structure (sglang PR #33271): the haystack
    // fit of tools/haystack_fit.py, at its three contexts.
    for (context, range) in [(32u64 << 10, (0.71, 0.88)), (128 << 10, (0.63, 0.83)), (256 << 10, (0.55, 0.83))] {
        let (negative, overlap) = sign_structure(context, 512, (trials / 10).max(5));
        let (n, o) = (mean_ci(&negative), mean_ci(&overlap));
        rows.push(Row {
            quantity: format!("share of negative per-head products, {}", tokens(context)),
            public: "0.517 / 0.479 (V4-Flash layers 40 / 42 at 32K); 0.38–0.61 over 21 layers at 32K–256K (sglang PR #33271)",
            target: "0.45–0.55",
            ours: interval(n),
            met: Some((0.45..=0.55).contains(&n.0)),
            role: FITTED,
        });
        rows.push(Row {
            quantity: format!("top-512 overlap, ReLU vs linear score, {}", tokens(context)),
            public: "per-layer means 0.71–0.88 (32K), 0.63–0.83 (128K), 0.55–0.83 (256K), falling with context (sglang PR #33271)",
            target: if context == 32 << 10 {
                "0.71–0.88"
            } else if context == 128 << 10 {
                "0.63–0.83"
            } else {
                "0.55–0.83"
            },
            ours: interval(o),
            met: Some((range.0..=range.1).contains(&o.0)),
            role: FITTED,
        });
    }

    // The shape of V3.2's score rows (TensorRT-LLM blog 19: real decode
    // logits, SWE-Bench-64K, 9 layers): the mean's sign fitted through
    // `indexer.weight_mean`, the kurtosis checked.
    let (mean, kurtosis) = logit_shape((trials / 10).max(5));
    let negative = mean.iter().filter(|&&m| m < 0.0).count();
    let m = mean_ci(&mean);
    rows.push(Row {
        quantity: format!(
            "V3.2 fp32 logits at 64K, mean / standard deviation ({negative} of {} trials negative; range {:+.2} … {:+.2})",
            mean.len(),
            mean.iter().copied().fold(f64::INFINITY, f64::min),
            mean.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        ),
        public: "mean logit −0.47 to −4.51, negative in each of 9 layers (real V3.2 decode logits, SWE-Bench-64K, ~70K rows, top-2048; TensorRT-LLM tech blog 19, PR #12684)",
        target: "< 0 in every trial",
        ours: interval(m),
        met: Some(negative == mean.len()),
        role: FITTED,
    });
    let k = mean_ci(&kurtosis);
    rows.push(Row {
        quantity: format!(
            "V3.2 fp32 logits at 64K, excess kurtosis (trials {:+.2} … {:+.2})",
            kurtosis.iter().copied().fold(f64::INFINITY, f64::min),
            kurtosis.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        ),
        public: "−0.62 to +0.93 over 9 layers, deep layers −0.1 to −0.4; best fits beta, weibull_min, lognorm, logistic (TensorRT-LLM tech blog 19, PR #12684)",
        target: "mean −0.62 … +0.93",
        ours: interval(k),
        met: Some((-0.62..=0.93).contains(&k.0)),
        role: FITTED,
    });

    print_table(&rows);
    println!(
        "\n{trials} trials per cell (V3.2 and the seed incident: {}; V3.2 at 192K: {}), sign structure and V3.2 logit shape over {} trials per context.",
        (trials / 2).max(20),
        (trials / 10).max(10),
        (trials / 10).max(5)
    );

    // What the default correlations give at each context (V4-Flash, k 512
    // and 1024: the top share f = k / candidate rows), and the band's ends.
    println!("\n| context | top share f, k 512 | adjacent-layer overlap | adjacent-token overlap | f, k 1024 | adjacent-layer | adjacent-token |");
    println!("|---|---|---|---|---|---|---|");
    for context in [4u64 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10] {
        let rows = flash.geometry.candidate_rows(context) as f64;
        let cells: Vec<String> = [512.0, 1024.0]
            .iter()
            .flat_map(|&k| {
                let f = (k / rows).min(1.0);
                [
                    format!("{f:.4}"),
                    format!("{:.3}", adjacent_overlap(stack.layer_correlation, f)),
                    format!("{:.3}", adjacent_overlap(stack.token_correlation, f)),
                ]
            })
            .collect();
        println!("| {} | {} |", tokens(context), cells.join(" | "));
    }
    // The default needle, per context: per-layer and whole-model recall at depth 50 %.
    println!("\n| context | per-layer recall, depth 50 % | whole-model recall | band (layers share more / less) | indexer layers reaching it (mean) |");
    println!("|---|---|---|---|---|");
    for c in default_needle.iter().filter(|c| c.depth_percent == 50.0) {
        println!(
            "| {} | {} | {} | {:.3}–{:.3} | {:.2} |",
            tokens(c.context_tokens),
            interval(wilson(c)),
            interval(model(c)),
            c.model_band_low.unwrap_or(f64::NAN),
            c.model_band_high.unwrap_or(f64::NAN),
            c.layers_reached.unwrap_or(f64::NAN)
        );
    }
}

fn print_table(rows: &[Row]) {
    println!("| quantity | public measurement (source) | target | simulator, 95 % interval | met | role |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "-",
        };
        println!("| {} | {} | {} | {} | {} | {} |", r.quantity, r.public, r.target, r.ours, met, r.role);
    }
}

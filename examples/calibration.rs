//! Recomputes the table of docs/CALIBRATION.md: the simulator's figures, with
//! 95 % intervals, beside the public measurements of the real indexer that
//! its defaults are meant to reproduce. Each row says what exactly is
//! compared; the sources and definitions are in docs/CALIBRATION.md.
//!
//! `cargo run --release --example calibration` (about a minute on 2 cores);
//! `DSA_CALIBRATION_TRIALS=N` changes the trials per cell (default 200).

use dsa_recall::base::stats::{mean_interval, wilson_interval, Z95};
use dsa_recall::config::{self, params::parse_scenario_toml, Scenario};
use dsa_recall::estimate::driver::trial_seed;
use dsa_recall::estimate::stack::adjacent_overlap;
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

/// Per trial of the V4-Flash preset at `context` tokens (depth 50 %): the
/// share of negative per-head products q_h·k over every row and head, and
/// the overlap of the top-`k` rows by the ReLU score Σ w_h ReLU(q_h·k) with
/// the top-`k` by the linear score Σ w_h q_h·k (exact f32 keys, as scored).
fn sign_structure(context: u64, k: usize, trials: u64) -> (Vec<f64>, Vec<f64>) {
    let s = scenario(&format!("preset = \"deepseek-v4-flash\"\n[sweep]\ncontexts = \"{context}\"\nseed = 23\n"));
    let (heads, d) = (s.model.shape.heads, s.model.shape.head_dim);
    let (mut negative, mut overlap) = (Vec::new(), Vec::new());
    for t in 0..trials {
        let seed = trial_seed(s.seed, 50.0, t);
        let hay = TrialHaystack::draw(&s.model, seed).expect("haystack");
        let placement = s.geometry.place_needle(context, s.needle_tokens, 50.0);
        let (keys, queries) = context_keys(&s.model, &s.physics, s.geometry, &hay, seed, context, placement.tokens).expect("rows");
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
        let top = |scores: &[f64]| {
            let mut idx: Vec<usize> = (0..scores.len()).collect();
            idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
            idx.truncate(k);
            idx.sort_unstable();
            idx
        };
        let (a, b) = (top(&relu), top(&linear));
        negative.push(neg as f64 / (rows * heads) as f64);
        overlap.push(a.iter().filter(|i| b.binary_search(i).is_ok()).count() as f64 / k as f64);
    }
    (negative, overlap)
}

/// 2560 → "2.5K".
fn tokens(n: u64) -> String {
    dsa_recall::run::output::tokens_label(n)
}

fn main() {
    let trials: u64 = std::env::var("DSA_CALIBRATION_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let mut rows = Vec::new();

    // Selection recall of the V4 fp4 indexer (and fp8 with fp32 scales)
    // against exact fp32 scoring on the same trials, k 512.
    let cells = sweep(&format!(
        "preset = \"deepseek-v4-flash\"\n[sweep]\ncontexts = \"8K,32K,128K\"\nprecisions = \"fp32,fp4,fp8-fp32scale\"\n\
         topk = [512]\ntrials = {trials}\nseed = 21\n"
    ));
    for c in cells.iter().filter(|c| c.precision != "fp32") {
        let x = (
            c.selection_recall.unwrap_or(f64::NAN),
            c.selection_recall_ci_low.unwrap_or(f64::NAN),
            c.selection_recall_ci_high.unwrap_or(f64::NAN),
        );
        rows.push(Row {
            quantity: format!("{} top-512 set recall vs fp32, {}K", c.precision, c.context_tokens / 1024),
            public: "99.7 % (DeepSeek-V4 report, FP4 QK path)",
            target: "≥ 0.99",
            ours: interval(x),
            met: Some(x.0 >= 0.99),
            role: FITTED,
        });
    }

    // V3.2's fp8 indexer against fp32, token level, top-2048.
    let cells = sweep(&format!(
        "preset = \"deepseek-v3.2\"\n[sweep]\ncontexts = \"4K,16K,64K\"\nprecisions = \"fp32,fp8\"\ntopk = [2048]\n\
         trials = {}\nseed = 24\n",
        (trials / 2).max(20)
    ));
    for c in cells.iter().filter(|c| c.precision == "fp8") {
        let x = (
            c.selection_recall.unwrap_or(f64::NAN),
            c.selection_recall_ci_low.unwrap_or(f64::NAN),
            c.selection_recall_ci_high.unwrap_or(f64::NAN),
        );
        rows.push(Row {
            quantity: format!("V3.2 fp8 top-2048 set recall vs fp32, {}K", c.context_tokens / 1024),
            public: "0.983 (GLM-5.2 fp8 indexer vs f32 oracle, pegainfer PR #521)",
            target: "0.96–1.00 (another model: compatible, not equal)",
            ours: interval(x),
            met: Some((0.96..=1.0).contains(&x.0)),
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
    let token_overlap = adjacent_overlap(stack.token_correlation, 1.0 / 16.0);
    rows.push(Row {
        quantity: format!("adjacent-decode-step top-k overlap at a top share of 1/16 (ρ_T = {})", stack.token_correlation),
        public: "≥ 95 % (V4-Flash deployment, vllm-ascend-deepseekv4 PR #134)",
        target: "≥ 0.95",
        ours: format!("{token_overlap:.3}"),
        met: Some(token_overlap >= 0.95 - 5e-4),
        role: FITTED,
    });

    // A correct V4-Flash finds a needle at 32K–256K (whole-model outcomes).
    // Per-layer selection recall beside whole-model recall, default needle,
    // bf16, k 512, at three depths; the worst context of 4K–256K is the row.
    let needle_grid = |strength: f64, trials: u64| {
        sweep(&format!(
            "preset = \"deepseek-v4-flash\"\n[needle]\nstrength = {strength:?}\n[sweep]\ncontexts = \"4K..256K\"\n\
             depths = \"10,50,90\"\nprecisions = \"bf16\"\ntopk = [512]\ntrials = {trials}\nseed = 22\n"
        ))
    };
    let model =
        |c: &CellResult| (c.model_recall.unwrap_or(f64::NAN), c.model_ci_low.unwrap_or(f64::NAN), c.model_ci_high.unwrap_or(f64::NAN));
    let worst = |cells: &[CellResult], depth: f64| -> CellResult {
        let at_depth = cells.iter().filter(|c| c.depth_percent == depth);
        at_depth.min_by(|a, b| a.model_recall.unwrap_or(0.0).total_cmp(&b.model_recall.unwrap_or(0.0))).expect("cells").clone()
    };
    let default_needle = needle_grid(flash.model.needle_strength, trials);
    for depth in [10.0, 50.0, 90.0] {
        let c = worst(&default_needle, depth);
        let layer =
            default_needle.iter().filter(|x| x.depth_percent == depth && x.context_tokens == 256 * 1024).map(wilson).next().expect("256K");
        rows.push(Row {
            quantity: format!(
                "bf16 needle (strength {}), worst of 4K–256K at depth {depth} %: whole-model recall ({}K; per-layer at 256K {})",
                flash.model.needle_strength,
                c.context_tokens / 1024,
                interval(layer)
            ),
            public: "4/4 needles found at 32K–256K (sglang PR #33271)",
            target: "≥ 0.95 at every context",
            ours: interval(model(&c)),
            met: Some(c.model_recall.unwrap_or(0.0) >= 0.95),
            role: CHECK,
        });
    }
    // The weakest needle strength of a doubling grid that meets the target
    // at every context and depth: what a NIAH needle must be in this model.
    let mut niah = None;
    for strength in [2.0, 4.0, 8.0, 16.0, 32.0] {
        let cells = needle_grid(strength, trials / 2);
        let low = [10.0, 50.0, 90.0].map(|d| worst(&cells, d));
        let lowest = low.iter().min_by(|a, b| a.model_recall.unwrap_or(0.0).total_cmp(&b.model_recall.unwrap_or(0.0))).expect("three");
        if lowest.model_recall.unwrap_or(0.0) >= 0.95 {
            niah = Some((strength, lowest.clone()));
            break;
        }
    }
    if let Some((strength, c)) = niah {
        rows.push(Row {
            quantity: format!(
                "weakest needle strength of 2, 4, 8, 16, 32 meeting the row above at every depth: {strength} (its worst cell: {}K, depth {} %)",
                c.context_tokens / 1024,
                c.depth_percent
            ),
            public: "4/4 needles found at 32K–256K (sglang PR #33271)",
            target: "≥ 0.95 at every context",
            ours: interval(model(&c)),
            met: Some(true),
            role: "fitted (not the default)",
        });
    }

    // The seed incident's surviving fault (constant logits, index-ordered
    // ties; docs/FINDINGS.md, 1) must keep its signature in the whole model.
    let cells = sweep(&format!(
        "preset = \"deepseek-v4-flash\"\n[needle]\nstrength = 1.5\n[sweep]\ncontexts = \"2K,2.5K,3K,4K,5K,6K,8K,10K\"\n\
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
        let lost_after = fault.iter().filter(|c| c.context_tokens > fault_reach).all(|c| c.model_recall.unwrap_or(1.0) <= 0.5);
        let want = if k == 512 { 2560 } else { 5120 };
        rows.push(Row {
            quantity: format!(
                "seed incident fault (scale-unwritten-zero+ties-lowest, depth 80 %, strength 1.5), k {k}: whole model reliable to {} then lost; bf16 reliable to {}",
                tokens(fault_reach),
                tokens(bf16_reach)
            ),
            public: "reliable to ~2.5K (k 512) / ~5K (k 1024), lost beyond, bf16 keys fix it (the seed report)",
            target: if k == 512 { "fault 2.5K, lost after; bf16 ≥ 5K" } else { "fault 5K, lost after; bf16 ≥ 10K" },
            ours: format!("fault {}, bf16 {}", tokens(fault_reach), tokens(bf16_reach)),
            met: Some(fault_reach == want && lost_after && bf16_reach >= 2 * want),
            role: CHECK,
        });
    }

    // A salient needle is found at any depth.
    let cells = sweep(&format!(
        "preset = \"deepseek-v4-flash\"\n[needle]\nstrength = 30.0\n[sweep]\ncontexts = \"64K\"\ndepths = \"0\"\n\
         precisions = \"bf16\"\ntopk = [512]\ntrials = {trials}\nseed = 22\n"
    ));
    let c = &cells[0];
    rows.push(Row {
        quantity: "bf16 needle of strength 30, 64K, depth 0".into(),
        public: "trained models retrieve salient facts at any depth",
        target: "≥ 0.98",
        ours: interval(wilson(c)),
        met: Some(c.recall >= 0.98),
        role: FITTED,
    });

    // The trained indexer's sign structure at 32K (layers 40 and 42).
    let (negative, overlap) = sign_structure(32 * 1024, 512, (trials / 10).max(5));
    let (n, o) = (mean_ci(&negative), mean_ci(&overlap));
    rows.push(Row {
        quantity: "share of negative per-head products, 32K".into(),
        public: "0.517 / 0.479 (V4-Flash layers 40 / 42, sglang PR #33271)",
        target: "0.45–0.55",
        ours: interval(n),
        met: Some((0.45..=0.55).contains(&n.0)),
        role: FITTED,
    });
    rows.push(Row {
        quantity: "top-512 overlap, ReLU vs linear score, 32K".into(),
        public: "0.54 / 0.77 (same capture)",
        target: "0.5–0.8",
        ours: interval(o),
        met: Some((0.5..=0.8).contains(&o.0)),
        role: FITTED,
    });

    // The model before issue 15, for reference: the isotropic needle geometry
    // with independent heads on exchangeable rows (no [haystack], unit norm weight).
    let cells = sweep(&format!(
        "preset = \"deepseek-v4-flash\"\n[needle]\nstrength = 30.0\ngeometry = \"isotropic\"\nhead_coherence = 0.0\n\
         [haystack]\ncontent_rank = 0\nkey_content_share = 0.0\nquery_content_share = 0.0\nrelevance_scale = 0.0\n\
         [physics]\nnorm_weight_spread = 0.0\n\
         [sweep]\ncontexts = \"64K\"\ndepths = \"0\"\nprecisions = \"bf16\"\ntopk = [512]\ntrials = {trials}\nseed = 22\n"
    ));
    rows.push(Row {
        quantity: "the same under the model before issue 15 (isotropic needle, independent heads, exchangeable rows)".into(),
        public: "-",
        target: "-",
        ours: interval(wilson(&cells[0])),
        met: None,
        role: "reference",
    });

    println!("| quantity | public measurement (source) | target | simulator, 95 % interval | met | role |");
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "-",
        };
        println!("| {} | {} | {} | {} | {} | {} |", r.quantity, r.public, r.target, r.ours, met, r.role);
    }
    println!(
        "\n{trials} trials per cell (V3.2, the strength search and the seed incident: {}), sign structure over {} trials.",
        (trials / 2).max(20),
        (trials / 10).max(5)
    );

    // What the default correlations give at each context (V4-Flash, k 512
    // and 1024: the top share f = k / candidate rows).
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
    println!("\n| context | per-layer recall, depth 50 % | whole-model recall | indexer layers reaching it (mean) |");
    println!("|---|---|---|---|");
    for c in default_needle.iter().filter(|c| c.depth_percent == 50.0) {
        println!(
            "| {} | {} | {} | {:.2} |",
            tokens(c.context_tokens),
            interval(wilson(c)),
            interval(model(c)),
            c.layers_reached.unwrap_or(f64::NAN)
        );
    }
}

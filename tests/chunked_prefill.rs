//! `chunk-local` through the library (docs/HYPOTHESES.md, "chunk-local"):
//! with a prefill chunk of N tokens the query's indexer sees only rows
//! completed in its own chunk, so the needle survives when it lies in the
//! last chunk or the raw window and is lost otherwise; a healthy indexer
//! does not depend on the chunk at all. Every assertion here is exact
//! (no interval): visibility decides, not chance.

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::run_sweep;

/// The default preset (V4-Flash CSA rows: ratio 4, overlap, window 128)
/// with `extra` TOML lines.
fn cells(extra: &str) -> Vec<CellResult> {
    let toml = format!("[sweep]\ntrials = 30\nseed = 5\n{extra}");
    let params = parse_scenario_toml(&toml).unwrap_or_else(|e| panic!("{e}"));
    let s = config::check(config::resolve(params).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    run_sweep(&s, &|| {}).unwrap().cells
}

fn cell<'a>(cells: &'a [CellResult], depth: f64, topk: u64, precision: &str) -> &'a CellResult {
    cells.iter().find(|c| c.depth_percent == depth && c.topk == topk && c.precision == precision).unwrap()
}

#[test]
fn a_healthy_indexer_is_the_same_bits_with_or_without_chunks() {
    let grid = "contexts = \"6042,9000\"\ndepths = \"10,95\"\ntopk = \"64,512\"\nprecisions = \"bf16,fp8\"\n";
    let one = cells(grid);
    let chunked = cells(&format!("{grid}[geometry]\nprefill_chunk = 2048\n"));
    assert_eq!(one, chunked);
}

#[test]
fn chunk_local_keeps_the_needle_only_in_the_last_chunk() {
    // ml-explore/mlx-lm #1189's prompt: 6,042 tokens in chunks of 2,048.
    // The query's chunk starts at token 4096: rows 1024 … 1509 (486 rows).
    let all = cells(
        "contexts = \"6042\"\ndepths = \"10,50,95\"\ntopk = \"1,512\"\n\
         precisions = \"bf16,bf16+chunk-local,fp8+chunk-local\"\n[geometry]\nprefill_chunk = 2048\n",
    );
    for depth in [10.0, 50.0] {
        for k in [1, 512] {
            let healthy = cell(&all, depth, k, "bf16");
            assert!(healthy.needle_start_token < 4096 && !healthy.needle_in_window);
            for v in ["bf16+chunk-local", "fp8+chunk-local"] {
                assert_eq!(cell(&all, depth, k, v).survived, 0, "{v} depth {depth} k {k}: an earlier chunk's rows are hidden");
            }
        }
    }
    // Depth 95 lies in the last chunk: fewer competitors can only help (the
    // same scores, a subset of the rows), and k 512 ≥ 486 keeps every row.
    for k in [1, 512] {
        let (healthy, local) = (cell(&all, 95.0, k, "bf16"), cell(&all, 95.0, k, "bf16+chunk-local"));
        assert!(healthy.needle_start_token >= 4096 && !healthy.needle_in_window);
        assert!(local.survived >= healthy.survived, "k {k}: {} < {}", local.survived, healthy.survived);
    }
    assert!(healthy_below_one(&all));
    for v in ["bf16+chunk-local", "fp8+chunk-local"] {
        let c = cell(&all, 95.0, 512, v);
        assert_eq!((c.survived, c.candidate_rows, c.k_eff), (30, 486, 486), "{v}");
    }
    assert_eq!(cell(&all, 95.0, 512, "bf16").candidate_rows, 1510);
}

/// At k 1 the healthy indexer loses some needles at depth 95 (else the
/// comparison above would say nothing).
fn healthy_below_one(all: &[CellResult]) -> bool {
    cell(all, 95.0, 1, "bf16").survived < 30
}

#[test]
fn the_raw_window_reaches_back_into_the_previous_chunk() {
    // 4,106 tokens: the query's chunk is tokens 4096 … 4105 (two rows); the
    // window of 128 tokens starts at 3978, in the previous chunk.
    let all = cells(
        "contexts = \"4106\"\ndepths = \"96,98\"\ntopk = \"64\"\n\
         precisions = \"bf16,bf16+chunk-local\"\n[geometry]\nprefill_chunk = 2048\n",
    );
    let inside = cell(&all, 98.0, 64, "bf16+chunk-local");
    assert!(inside.needle_in_window && inside.needle_start_token < 4096, "{}", inside.needle_start_token);
    assert_eq!((inside.survived, inside.survived_via_window), (30, 30));
    let outside = cell(&all, 96.0, 64, "bf16+chunk-local");
    assert!(!outside.needle_in_window && outside.needle_start_token < 4096);
    assert_eq!(outside.survived, 0);
}

mod diagnosis {
    use dsa_recall::config::{self, params::parse_scenario_toml};
    use dsa_recall::diagnose::{self, observations, Options, Reading};

    fn options(hypotheses: &str) -> Options<'static> {
        Options {
            hypotheses: diagnose::candidates(hypotheses).unwrap(),
            reading: Reading::Layer,
            next: false,
            needle_multipliers: vec![1.0],
            observer: &dsa_recall::base::observe::Silent,
        }
    }

    fn params() -> dsa_recall::ScenarioParams {
        config::resolve(parse_scenario_toml("[sweep]\ntrials = 20\nseed = 3\n").unwrap()).unwrap()
    }

    #[test]
    fn each_row_is_simulated_with_its_own_chunk() {
        // The same cell under chunks of 2,048 (the needle at depth 50 lies
        // before the query's chunk) and 8,192 (one chunk: nothing hidden).
        let text =
            "context_tokens,depth_percent,topk,config,found,total,prefill_chunk\n6042,50,512,bf16,0,1,2048\n6042,50,512,bf16,1,1,8192\n";
        let p = params();
        let obs = observations::parse("x.csv", text, &|v| diagnose::variant_ok(&p, v)).unwrap();
        let prepared = diagnose::prepare(&p, "x.csv", &obs.rows, &options("chunk-local")).unwrap();
        let recall = |row: usize, h: &str| prepared.recall(h, &obs.rows[row]).unwrap().0;
        assert_eq!(recall(0, "chunk-local"), 0.0);
        assert_eq!(recall(1, "chunk-local"), recall(1, "healthy"));
        assert!(recall(1, "healthy") > 0.9);
    }

    #[test]
    fn a_chunk_fault_needs_every_rows_chunk() {
        let text = "context_tokens,depth_percent,topk,config,found,total,prefill_chunk\n6042,50,512,bf16,0,1,2048\n8000,50,512,bf16,1,1,\n";
        let p = params();
        let obs = observations::parse("x.csv", text, &|v| diagnose::variant_ok(&p, v)).unwrap();
        let err = diagnose::prepare(&p, "x.csv", &obs.rows, &options("chunk-local")).err().unwrap().to_string();
        assert!(err.starts_with("x.csv:3: prefill_chunk is missing: candidate chunk-local") && !err.contains('\n'), "{err}");
        // Without a chunk anywhere the fault cannot act: it is listed as not applicable.
        let text = "context_tokens,depth_percent,topk,config,found,total\n6042,50,512,bf16,0,1\n";
        let obs = observations::parse("x.csv", text, &|v| diagnose::variant_ok(&p, v)).unwrap();
        let prepared = diagnose::prepare(&p, "x.csv", &obs.rows, &options("chunk-local")).unwrap();
        assert_eq!(prepared.not_applicable, vec!["chunk-local".to_string()]);
    }
}

/// `longer-than=T` (vllm #40018, docs/HYPOTHESES.md): up to T tokens the
/// variant is its base, trial by trial; beyond T it is the fault it gates.
/// Exact: the same haystacks, so the cells match field by field (but for
/// the name and the paired comparison's baseline fields).
#[test]
fn a_length_gate_is_the_base_up_to_t_and_the_fault_beyond() {
    let fault = "fp8-fp32scale+row-shift";
    let got = cells(&format!(
        "contexts = \"8K,16K\"\ndepths = \"10,90\"\ntopk = \"512\"\nprecisions = \"fp8-fp32scale,{fault},{fault}+longer-than=12K\"\n"
    ));
    let outcome = |c: &CellResult| (c.survived, c.mean_rank, c.trials_with_ties, c.model_survived, c.layers_reached, c.model_band_low);
    for depth in [10.0, 90.0] {
        let at = |context: u64, p: &str| {
            got.iter().find(|c| c.context_tokens == context && c.depth_percent == depth && c.precision == p).unwrap()
        };
        let gated = format!("{fault}+longer-than=12K");
        assert_eq!(outcome(at(8192, &gated)), outcome(at(8192, "fp8-fp32scale")), "depth {depth}: the base at 8K");
        assert_eq!(outcome(at(16384, &gated)), outcome(at(16384, fault)), "depth {depth}: the fault at 16K");
        // And the fault is visible: the base keeps more than row-shift.
        assert!(at(16384, "fp8-fp32scale").survived > at(16384, fault).survived + 5, "depth {depth}");
    }
    // The gate names the composite a schedule fault.
    assert_eq!(dsa_recall::score::hypothesis::candidate_class("row-shift+longer-than=12K").name(), "schedule");
    // Refused without its base, with needle=M, and at 0 tokens: one line each.
    for (precisions, needle) in [
        (format!("{fault}+longer-than=12K"), "add fp8-fp32scale to --precisions"),
        (format!("fp8-fp32scale,{fault}+needle=2+longer-than=12K"), "not with needle=M"),
        (format!("fp8-fp32scale,{fault}+longer-than=0"), "at least 1 token"),
    ] {
        let toml = format!("[sweep]\nprecisions = \"{precisions}\"\n");
        let e = config::check(config::resolve(parse_scenario_toml(&toml).unwrap()).unwrap()).unwrap_err().to_string();
        assert!(e.contains(needle) && !e.contains('\n'), "{e}");
    }
}

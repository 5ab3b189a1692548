//! The address-space hypotheses through the library (docs/HYPOTHESES.md,
//! "Address space"): each is its base, cell for cell, in prompts its bound
//! does not reach, and past the bound loses needles by absolute position
//! (or chunk), whatever k.

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::run::cell::CellResult;
use dsa_recall::run::sweep::run_sweep;

/// The default preset (V4-Flash CSA rows: ratio 4, window 128) with `extra` TOML lines.
fn cells(extra: &str) -> Vec<CellResult> {
    let toml = format!("[sweep]\ntrials = 30\nseed = 5\n{extra}");
    let params = parse_scenario_toml(&toml).unwrap_or_else(|e| panic!("{e}"));
    let s = config::check(config::resolve(params).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    run_sweep(&s, &|| {}).unwrap().cells
}

fn cell<'a>(cells: &'a [CellResult], context: u64, depth: f64, topk: u64, precision: &str) -> &'a CellResult {
    cells
        .iter()
        .find(|c| c.context_tokens == context && c.depth_percent == depth && c.topk == topk && c.precision == precision)
        .unwrap_or_else(|| panic!("no cell {context} {depth} {topk} {precision}"))
}

const FAULTS: [&str; 4] = ["bf16+visible-cap=8K", "bf16+visible-cap-zero=8K", "bf16+visible-cap-wrap=8K", "bf16+block0-repeat=8K"];

#[test]
fn address_caps_are_their_base_below_the_bound_and_lose_needles_past_it_at_every_k() {
    let precisions = format!("bf16,{},bf16+workspace-clamp=8K", FAULTS.join(","));
    let all = cells(&format!("contexts = \"6042,16K\"\ndepths = \"10,40,85\"\ntopk = \"64,512\"\nprecisions = \"{precisions}\"\n"));
    let faults: Vec<&str> = precisions.split(',').skip(1).collect();
    for &v in &faults {
        for depth in [10.0, 40.0, 85.0] {
            for k in [64, 512] {
                // A prompt shorter than the bound: the base's outcomes, trial by trial.
                let (base, fault) = (cell(&all, 6042, depth, k, "bf16"), cell(&all, 6042, depth, k, v));
                assert_eq!((fault.survived, fault.candidate_rows), (base.survived, base.candidate_rows), "{v} 6042 {depth} {k}");
            }
        }
        for k in [64, 512] {
            // Depth 85 of 16K is token ~13.9K, past 8K and outside the window.
            let (base, fault) = (cell(&all, 16384, 85.0, k, "bf16"), cell(&all, 16384, 85.0, k, v));
            assert!(!base.needle_in_window && base.needle_start_token > 8192);
            assert!(base.survived >= 20, "the base keeps this needle: {}", base.survived);
            assert!(fault.survived * 3 <= base.survived, "{v} k {k}: past the bound {} of {}", fault.survived, base.survived);
        }
    }
    // The clean cap: past P no row is a candidate, so the needle is lost
    // exactly, at every k; below P fewer competitors can only help.
    for k in [64, 512] {
        let cap = cell(&all, 16384, 85.0, k, "bf16+visible-cap=8K");
        assert_eq!((cap.survived, cap.candidate_rows), (0, 2048), "k {k}");
        for depth in [10.0, 40.0] {
            let (base, cap) = (cell(&all, 16384, depth, k, "bf16"), cell(&all, 16384, depth, k, "bf16+visible-cap=8K"));
            assert!(base.needle_start_token < 8192 - 64);
            assert!(cap.survived >= base.survived, "depth {depth} k {k}: {} < {}", cap.survived, base.survived);
        }
    }
}

#[test]
fn the_onset_follows_the_bound_not_k() {
    // The same needle (depth 85 of 16K) with the bound moved past it: the base's outcomes.
    let all =
        cells("contexts = \"16K\"\ndepths = \"85\"\ntopk = \"64,512\"\nprecisions = \"bf16,bf16+visible-cap=15K,bf16+visible-cap=8K\"\n");
    for k in [64, 512] {
        let base = cell(&all, 16384, 85.0, k, "bf16");
        let (far, near) = (cell(&all, 16384, 85.0, k, "bf16+visible-cap=15K"), cell(&all, 16384, 85.0, k, "bf16+visible-cap=8K"));
        assert!(far.survived >= base.survived && base.survived >= 20, "k {k}: {} {}", far.survived, base.survived);
        assert_eq!(near.survived, 0, "k {k}");
    }
}

#[test]
fn slot_stride_half_and_stale_chunks_lose_the_needles_they_misaddress() {
    let all = cells(
        "contexts = \"1800,6042\"\ndepths = \"10,50,95\"\ntopk = \"64\"\n\
         precisions = \"bf16,bf16+slot-stride-half,bf16+chunk-stale\"\n[geometry]\nprefill_chunk = 2048\n",
    );
    for depth in [10.0, 50.0] {
        let base = cell(&all, 6042, depth, 64, "bf16");
        assert!(base.survived >= 20 && !base.needle_in_window, "{}", base.survived);
        for v in ["bf16+slot-stride-half", "bf16+chunk-stale"] {
            let fault = cell(&all, 6042, depth, 64, v);
            assert!(fault.survived * 3 <= base.survived, "{v} depth {depth}: {} of {}", fault.survived, base.survived);
        }
    }
    // Depth 95 of 6,042 lies in the query's chunk (from token 4096): its
    // competitors are the same scores in another order, so the same outcome.
    let (base, stale) = (cell(&all, 6042, 95.0, 64, "bf16"), cell(&all, 6042, 95.0, 64, "bf16+chunk-stale"));
    assert!(base.needle_start_token >= 4096);
    assert_eq!(stale.survived, base.survived);
    // A prompt within one chunk straddles no boundary.
    for depth in [10.0, 50.0, 95.0] {
        assert_eq!(cell(&all, 1800, depth, 64, "bf16+chunk-stale").survived, cell(&all, 1800, depth, 64, "bf16").survived);
    }
}

#[test]
fn address_faults_refuse_what_they_cannot_be() {
    let refused = |precisions: &str| {
        let toml = format!("[sweep]\ncontexts = \"8K\"\nprecisions = \"{precisions}\"\n");
        let params = parse_scenario_toml(&toml).unwrap();
        config::check(config::resolve(params).unwrap()).err().map(|e| e.to_string()).unwrap_or_default()
    };
    assert!(refused("bf16+visible-cap=0").contains("visible-cap=P needs a token position of at least 1"));
    assert!(refused("bf16+visible-cap=8K+block0-repeat=4K").contains("both set"));
    assert!(refused("bf16+chunk-stale").contains("prefill chunk"));
}

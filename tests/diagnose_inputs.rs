//! What an observation file may say beyond one row per cell: dense rows
//! (k at or above the candidate rows), rows of one prompt repeated, a
//! prefill chunk of 0, and rows of another key format than the one a
//! cache-layout fault lives in — each read, and used by `diagnose`.

use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::diagnose::{self, observations, repeats, Options, Reading, HEALTHY};

/// A small, fast scenario (strength needle, 24 trials a cell).
fn params() -> dsa_recall::ScenarioParams {
    let text = "preset = \"deepseek-v4-flash\"\n[needle]\nunit = \"strength\"\nstrength = 1.5\n[sweep]\ntrials = 24\nseed = 5\n\
                [estimator]\npredict = false\n";
    config::resolve(parse_scenario_toml(text).unwrap()).unwrap()
}

fn read(csv: &str) -> observations::Observations {
    let base = params();
    observations::parse("obs.csv", csv, &|v| diagnose::variant_ok(&base, v)).unwrap()
}

fn options(hypotheses: &str) -> Options<'static> {
    Options {
        hypotheses: diagnose::candidates(hypotheses).unwrap(),
        reading: Reading::Layer,
        next: false,
        needle_multipliers: vec![1.0],
        observer: &dsa_recall::base::observe::Silent,
    }
}

fn prepared(csv: &str, hypotheses: &str) -> (observations::Observations, diagnose::Prepared) {
    let obs = read(csv);
    let p = diagnose::prepare(&params(), &obs.path, &obs.rows, &options(hypotheses)).unwrap();
    (obs, p)
}

const HEADER: &str = "context_tokens,depth_percent,topk,config,found,total";

// 2048 tokens are 512 candidate rows (c = 4): k 1024 selects every one. The
// rows are simulated, not refused, and the simulator decides: healthy finds
// the needle there, a kernel that keeps 64 rows whatever k is asked does not.
#[test]
fn dense_rows_are_read_simulated_and_enter_the_likelihood() {
    let csv = |found| format!("{HEADER}\n2048,50,1024,fp8,{found},10\n");
    let (obs, p) = prepared(&csv(0), "topk=64");
    assert_eq!(obs.rows[0].topk, 1024);
    let healthy = p.recall(HEALTHY, &obs.rows[0]).unwrap().0;
    let capped = p.recall("topk=64", &obs.rows[0]).unwrap().0;
    assert_eq!(healthy, 1.0, "every row selected");
    assert!(capped < 0.5, "{capped}");
    let (ranking, _) = p.rank(&obs.rows).unwrap();
    assert_eq!(ranking[0].hypothesis, "topk=64");
    // Found every time: the dense row now speaks for healthy.
    let (obs, p) = prepared(&csv(10), "topk=64");
    assert_eq!(p.rank(&obs.rows).unwrap().0[0].hypothesis, HEALTHY);
    // The whole diagnosis runs on such a file too.
    let d = diagnose::diagnose(&params(), &obs, &options("topk=64")).unwrap();
    assert_eq!(d.ranking[0].hypothesis, HEALTHY);
}

// `prefill_chunk = 0` is the prompt in one chunk: read beside rows with a
// chunk, and a chunk fault changes nothing there (the whole prompt is its
// own chunk), while it loses a needle early in a prompt of 2K chunks.
#[test]
fn a_prefill_chunk_of_zero_is_one_chunk_not_a_missing_one() {
    let csv = format!("{HEADER},prefill_chunk\n8192,10,512,fp8,0,10,2048\n8192,10,512,fp8,10,10,0\n");
    let (obs, p) = prepared(&csv, "chunk-local");
    let (chunked, whole) = (&obs.rows[0], &obs.rows[1]);
    assert_eq!((chunked.prefill_chunk, whole.prefill_chunk), (Some(2048), Some(0)));
    let local = |r| p.recall("chunk-local", r).unwrap().0;
    let healthy = |r| p.recall(HEALTHY, r).unwrap().0;
    assert!(local(chunked) < 0.2 && healthy(chunked) > 0.5, "{} {}", local(chunked), healthy(chunked));
    assert!((local(whole) - healthy(whole)).abs() < 0.2, "{} {}", local(whole), healthy(whole));
    assert_eq!(p.rank(&obs.rows).unwrap().0[0].hypothesis, "chunk-local");
}

// A fault of the quantized cache's reader does not act on rows whose keys
// are bf16 (another cache): "bf16 keys fixed it" is evidence for it. Where
// every row is bf16, the fault lives in that cache and acts.
#[test]
fn a_cache_layout_fault_acts_only_on_the_rows_of_the_quantized_cache() {
    let csv = format!("{HEADER}\n8192,50,512,fp8,1,10\n8192,50,512,bf16,10,10\n");
    let (obs, p) = prepared(&csv, "block-row0,slot-shift+ties-lowest");
    let (fp8, bf16) = (&obs.rows[0], &obs.rows[1]);
    let plan = |h: &str| p.plan.iter().find(|(n, _)| n == h).unwrap().1.clone();
    assert_eq!(plan("block-row0")["bf16"], "bf16");
    assert_eq!(plan("block-row0")["fp8"], "fp8+block-row0");
    // The other parts of a composite still act on bf16.
    assert_eq!(plan("slot-shift+ties-lowest")["bf16"], "bf16+ties-lowest");
    assert_eq!(p.recall("block-row0", bf16).unwrap(), p.recall(HEALTHY, bf16).unwrap());
    assert_ne!(p.recall("block-row0", fp8).unwrap(), p.recall(HEALTHY, fp8).unwrap());
    let (obs, p) = prepared(&format!("{HEADER}\n8192,50,512,bf16,1,10\n"), "block-row0");
    assert_eq!(p.plan.iter().find(|(n, _)| n == "block-row0").unwrap().1["bf16"], "bf16+block-row0");
    assert_ne!(p.recall("block-row0", &obs.rows[0]).unwrap(), p.recall(HEALTHY, &obs.rows[0]).unwrap());
}

// One prompt asked five times, found twice: a candidate whose selection is
// the same each time is contradicted (ln 10⁻⁶), one whose ties fall in
// random order is not; all five found counts once for the first kind.
#[test]
fn repeats_of_one_prompt_answered_both_ways_count_against_deterministic_candidates() {
    let hypotheses = "scale-unwritten-zero";
    let ll = |csv: &str| {
        let (obs, p) = prepared(csv, hypotheses);
        let (ranking, _) = p.rank(&obs.rows).unwrap();
        let of = |h: &str| ranking.iter().find(|r| r.hypothesis == h).unwrap().log_likelihood;
        (of(HEALTHY), of(hypotheses), p.recall(HEALTHY, &obs.rows[0]).unwrap())
    };
    let (h_plain, z_plain, _) = ll(&format!("{HEADER}\n4096,50,512,fp8,2,5\n"));
    let (h_mixed, z_mixed, _) = ll(&format!("{HEADER},prompt\n4096,50,512,fp8,2,5,haystack-7\n"));
    assert_eq!(h_mixed, repeats::MIXED_REPEATS_LOG);
    assert!(h_plain > h_mixed, "{h_plain} {h_mixed}");
    assert_eq!(z_mixed, z_plain, "random ties: the repeats are independent draws");
    let (h_all, _, (p, n)) = ll(&format!("{HEADER},prompt\n4096,50,512,fp8,5,5,haystack-7\n"));
    assert!((h_all - diagnose::clamped(p, n).ln()).abs() < 1e-12, "{h_all} vs recall {p}");
    // Two prompts in one cell stay two rows.
    let obs = read(&format!("{HEADER},prompt\n4096,50,512,fp8,1,1,a\n4096,50,512,fp8,0,1,b\n4096,50,512,fp8,1,1,a\n"));
    assert_eq!(
        obs.rows.iter().map(|r| (r.prompt.as_deref(), r.found, r.total)).collect::<Vec<_>>(),
        [(Some("a"), 2, 2), (Some("b"), 0, 1)]
    );
}

// calibrate reads and simulates dense rows too: there every needle
// strength finds the needle, so the dense row's recall is 1 at every value
// tried and the fit rests on the other row.
#[test]
fn calibrate_fits_a_file_with_dense_rows() {
    use dsa_recall::diagnose::fit::{self, FitOptions};
    let obs = read(&format!("{HEADER},healthy\n2048,50,1024,fp8,10,10,true\n8192,50,512,fp8,5,10,true\n"));
    let opts = FitOptions {
        field: "needle.strength".into(),
        range: Some((0.5, 4.0)),
        reading: Reading::Layer,
        observer: &dsa_recall::base::observe::Silent,
    };
    let f = fit::fit(&params(), &obs, &opts).unwrap();
    assert_eq!(f.rows_used, [2, 3]);
    assert!(f.curve.iter().all(|g| g.recalls[0] == 1.0), "{:?}", f.curve.iter().map(|g| g.recalls[0]).collect::<Vec<_>>());
    assert!(f.curve.iter().any(|g| g.recalls[1] < 1.0));
}

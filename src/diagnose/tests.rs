use super::outcome::{calibrate_first, weak_evidence};
use super::text::{small_information, tied_runs, verdict_classes};
use super::*;
use crate::score::hypothesis::{candidate_class, FaultClass};

// The likelihood of a 2-row file, by hand.
#[test]
fn likelihood_of_two_rows_by_hand() {
    // 2 of 3 at p = 0.5: C(3,2)·0.5³ = 0.375; 0 of 4 at p = 0.1: 0.9⁴ = 0.6561.
    let ll = log_binomial(2, 3, 0.5) + log_binomial(0, 4, 0.1);
    assert!((ll - (0.375f64 * 0.6561).ln()).abs() < 1e-12, "{ll}");
    // A simulated recall of 0 from 200 trials is read as 1/400, not 0.
    assert_eq!(clamped(0.0, 200), 1.0 / 400.0);
    assert_eq!(clamped(1.0, 200), 1.0 - 1.0 / 400.0);
    assert!(log_binomial(3, 3, clamped(0.0, 200)).is_finite());
}

#[test]
fn ranking_posteriors_and_bayes_factors() {
    let ranked = ranked(&[("a", -3.0), ("b", -3.0 + 20f64.ln()), ("c", f64::NEG_INFINITY)]);
    assert_eq!(ranked[0].hypothesis, "b");
    assert!((ranked[0].posterior - 20.0 / 21.0).abs() < 1e-12);
    assert!((ranked[1].log10_bayes_factor + 20f64.log10()).abs() < 1e-12);
    assert_eq!(ranked[2].posterior, 0.0);
}

fn ranked(entries: &[(&str, f64)]) -> Vec<Ranked> {
    rank(
        entries
            .iter()
            .map(|&(h, ll)| Ranked {
                hypothesis: h.into(),
                log_likelihood: ll,
                posterior: 0.0,
                log10_bayes_factor: 0.0,
                rows_changed: 0,
                recalls: vec![],
                class: candidate_class(if h == HEALTHY { "" } else { h }),
                needle_multiplier: 1.0,
                needle_gain_log10: 0.0,
                loss: None,
                gate: None,
            })
            .collect(),
    )
}

// Issue 30, item 14: "calibrate first" only when the best candidate
// fits 10:1 better at an edge of the needle profile than at ×1.
#[test]
fn calibrate_first_needs_a_decisive_edge() {
    let mut r = ranked(&[("block-row0", -3.0), (HEALTHY, -9.0)]);
    let grid = [0.5, 1.0, 2.0];
    assert_eq!(calibrate_first(&r, "needle.exceedance", &grid), None, "at ×1");
    r[0].needle_multiplier = 0.5;
    r[0].needle_gain_log10 = 0.9;
    assert_eq!(calibrate_first(&r, "needle.exceedance", &grid), None, "under 10:1");
    r[0].needle_gain_log10 = 1.2;
    let note = calibrate_first(&r, "needle.exceedance", &grid).unwrap();
    assert!(note.contains("block-row0") && note.contains("× 0.5") && note.contains("calibrate first"), "{note}");
    r[0].needle_multiplier = 1.0;
    assert_eq!(calibrate_first(&r, "needle.exceedance", &grid), None, "inside the profile");
    assert_eq!(calibrate_first(&r, "needle.exceedance", &[1.0]), None, "no profile");
}

#[test]
fn classes_pool_their_candidates_under_a_uniform_class_prior() {
    // Two partial candidates at likelihood 1 each, one random-loss at 1:
    // the partial class gets the mean of its two (1), so the classes tie.
    let r = ranked(&[("slot-shift", 0.0), ("scale-per-page", 0.0), ("stale-scale", 0.0), ("hadamard-q-only", 0.0)]);
    let c = class_standings(&r);
    let get = |k: FaultClass| c.iter().find(|s| s.class == k).unwrap();
    assert_eq!(get(FaultClass::Partial).candidates, 2);
    assert!((get(FaultClass::Partial).posterior - 1.0 / 3.0).abs() < 1e-12);
    assert!((get(FaultClass::RandomLoss).posterior - 1.0 / 3.0).abs() < 1e-12);
    let total: f64 = c.iter().map(|s| s.posterior).sum();
    assert!((total - 1.0).abs() < 1e-12);
}

#[test]
fn composite_candidates_take_the_class_of_what_they_do() {
    assert_eq!(candidate_class(""), FaultClass::Healthy);
    assert_eq!(candidate_class("scale-unwritten-zero"), FaultClass::RandomLoss);
    assert_eq!(candidate_class("scale-unwritten-zero+ties-lowest"), FaultClass::IndexTies);
    assert_eq!(candidate_class("scale-unwritten-nan+ties-highest"), FaultClass::IndexTies);
    assert_eq!(candidate_class("logits-bf16+ties-lowest"), FaultClass::Partial);
    assert_eq!(candidate_class("slot-shift+scale-floor"), FaultClass::Layout);
    // Every page read as zeros destroys all information (issue 28, the
    // all-zero scores of ml-explore/mlx-lm#1454); a share of pages is layout.
    assert_eq!(candidate_class("zero-blocks=1"), FaultClass::RandomLoss);
    assert_eq!(candidate_class("zero-blocks=1+ties-highest"), FaultClass::IndexTies);
    assert_eq!(candidate_class("zero-blocks=0.5"), FaultClass::Layout);
    assert_eq!(candidate_class("zero-blocks=0.5+ties-highest"), FaultClass::Layout);
}

#[test]
fn the_verdict_says_healthy_inconclusive_or_the_class() {
    let ln10 = std::f64::consts::LN_10;
    // Healthy within 10:1 of the best fault: consistent with healthy.
    let r = ranked(&[(HEALTHY, -0.5 * ln10), ("slot-shift", 0.0)]);
    assert_eq!(verdict(&r, &class_standings(&r)).kind, "healthy");
    // Two classes within 10:1, healthy far behind: inconclusive.
    let r = ranked(&[(HEALTHY, -5.0 * ln10), ("slot-shift", 0.0), ("hadamard-q-only", -0.5 * ln10)]);
    let v = verdict(&r, &class_standings(&r));
    assert_eq!(v.kind, "inconclusive", "{}", v.text);
    assert!(v.text.contains("layout") && v.text.contains("random-loss"), "{}", v.text);
    // One class ahead of every other by 10:1 or more: the fault.
    let r = ranked(&[(HEALTHY, -5.0 * ln10), ("slot-shift", 0.0), ("pages-swapped", -0.2 * ln10), ("hadamard-q-only", -2.0 * ln10)]);
    let v = verdict(&r, &class_standings(&r));
    assert_eq!(v.kind, "fault", "{}", v.text);
    assert!(v.text.contains("pages-swapped cannot be told"), "{}", v.text);
}

// Each verdict is followed by the plain sentence of each class it names.
#[test]
fn the_verdict_names_the_classes_it_explains() {
    let ln10 = std::f64::consts::LN_10;
    let named = |entries: &[(&str, f64)]| {
        let r = ranked(entries);
        let classes = class_standings(&r);
        verdict_classes(&verdict(&r, &classes), &classes)
    };
    assert_eq!(named(&[(HEALTHY, -0.5 * ln10), ("slot-shift", 0.0)]), [FaultClass::Healthy]);
    assert_eq!(
        named(&[(HEALTHY, -5.0 * ln10), ("slot-shift", 0.0), ("hadamard-q-only", -0.5 * ln10)]),
        [FaultClass::Layout, FaultClass::RandomLoss]
    );
    assert_eq!(
        named(&[(HEALTHY, -5.0 * ln10), ("scale-unwritten-zero+ties-lowest", 0.0), ("hadamard-q-only", -2.0 * ln10)]),
        [FaultClass::IndexTies]
    );
    let sentences: Vec<&str> = FaultClass::ALL.iter().map(|c| c.meaning()).collect();
    assert!(sentences.iter().all(|s| !s.is_empty() && !s.ends_with('.')));
    assert!(FaultClass::IndexTies.meaning().contains("k·c+W"));
}

// A diagnosis reads recall alone: its sweeps skip the needle margin's search.
#[test]
fn diagnosis_sweeps_run_without_the_needle_margin() {
    let p = crate::config::resolve(Default::default()).unwrap();
    assert!(crate::config::check(p.clone()).unwrap().estimator.margin, "the margin is on by default");
    let s = super::simulate::scenario_with(&p, &[4096], &[50.0], &[512], &["fp8".to_string()]).unwrap();
    assert!(!s.estimator.margin);
}

#[test]
fn a_loss_after_a_healthy_selection_reads_as_not_a_selection_fault() {
    let ln10 = std::f64::consts::LN_10;
    let r = ranked(&[(HEALTHY, -6.0 * ln10), ("loss", 0.0), ("loss-by-length", -1.5 * ln10), ("slot-shift", -2.5 * ln10)]);
    let v = verdict(&r, &class_standings(&r));
    assert_eq!(v.kind, "not-selection", "{}", v.text);
    assert!(v.text.starts_with("selection healthy: the losses are not explained by the indexer's selection (316:1 against the next class, layout (slot-shift))"), "{}", v.text);
    assert!(v.text.contains("MoE router") && v.text.contains("decode kernel") && v.text.contains("sampling"), "{}", v.text);
    // Healthy within 10:1 of the loss: consistent with healthy, as for any fault.
    let r = ranked(&[(HEALTHY, -0.5 * ln10), ("loss", 0.0)]);
    assert_eq!(verdict(&r, &class_standings(&r)).kind, "healthy");
    // A selection fault within 10:1: inconclusive between the two.
    let r = ranked(&[(HEALTHY, -6.0 * ln10), ("loss", 0.0), ("slot-shift", -0.5 * ln10)]);
    let v = verdict(&r, &class_standings(&r));
    assert_eq!(v.kind, "inconclusive", "{}", v.text);
    assert!(v.text.contains("not-selection") && v.text.contains("layout"), "{}", v.text);
    assert_eq!((odds_text(1.0), odds_text(2.5), odds_text(7.3)), ("10:1".to_string(), "316:1".to_string(), "10^7:1".to_string()));
}

#[test]
fn a_bad_fit_or_a_quarter_unexplained_is_outside_the_catalogue() {
    let ln10 = std::f64::consts::LN_10;
    let r = ranked(&[(HEALTHY, -6.0 * ln10), ("slot-shift", 0.0), ("hadamard-q-only", -3.0 * ln10)]);
    let fit = |p_value: f64| GoodnessOfFit { hypothesis: "slot-shift".into(), deviance: 40.0, p_value, draws: 2000 };
    let row = |line: usize| Unexplained {
        line,
        context_tokens: 4096,
        depth_percent: 50.0,
        topk: 512,
        config: "fp8".into(),
        label: "fp8".into(),
        found: 0,
        total: 20,
        recall: 0.9,
        p_value: 1e-6,
    };
    assert_eq!(outside(&r, 12, &[], Some(&fit(0.2))), None);
    let v = outside(&r, 12, &[row(2)], Some(&fit(0.0005))).unwrap();
    assert_eq!(v.kind, "outside");
    assert!(v.text.starts_with("outside the catalogue: 1 of 12 rows unexplained; even the best candidate, slot-shift (layout), fits the rows badly (goodness of fit p < 0.001"), "{}", v.text);
    assert!(!v.text.contains("best explained"), "{}", v.text);
    // Three of twelve rows unexplained lead the verdict even where the deviance passes; one of twelve does not.
    assert_eq!(outside(&r, 12, &[row(2), row(3), row(4)], Some(&fit(0.2))).map(|v| v.kind), Some("outside".to_string()));
    assert_eq!(outside(&r, 12, &[row(2)], Some(&fit(0.2))), None);
}

// Issue 28, item 5: the pair an open verdict compares is the pair it names.
#[test]
fn the_open_pair_is_the_one_the_verdict_leaves_open() {
    let ln10 = std::f64::consts::LN_10;
    let names = |r: &[Ranked]| open_pair(r, &class_standings(r)).map(|(a, b)| (a.hypothesis.clone(), b.hypothesis.clone()));
    let pair = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
    let r = ranked(&[(HEALTHY, 0.0), ("slot-shift", -0.5 * ln10)]);
    assert_eq!(names(&r), pair(HEALTHY, "slot-shift"), "healthy first, a fault within 10:1");
    let r = ranked(&[(HEALTHY, -0.5 * ln10), ("slot-shift", 0.0), ("hadamard-q-only", -0.2 * ln10)]);
    assert_eq!(names(&r), pair("slot-shift", HEALTHY), "healthy within 10:1 of the best: the verdict names healthy");
    let r = ranked(&[(HEALTHY, -5.0 * ln10), ("slot-shift", 0.0), ("pages-swapped", -0.1 * ln10), ("hadamard-q-only", -0.5 * ln10)]);
    assert_eq!(names(&r), pair("slot-shift", "hadamard-q-only"), "inconclusive: the runner class's best");
    let r = ranked(&[(HEALTHY, -5.0 * ln10), ("slot-shift", 0.0), ("hadamard-q-only", -2.0 * ln10)]);
    assert_eq!(names(&r), None, "a decisive fault leaves nothing open");
    let r = ranked(&[(HEALTHY, 0.0), ("slot-shift", -2.0 * ln10)]);
    assert_eq!(names(&r), None, "healthy ahead of every fault by 10:1");
}

#[test]
fn two_sided_binomial_p() {
    // 0 of 10 at p = 0.5: P(0) + P(10) = 2/1024.
    assert!((binomial_two_sided_p(0, 10, 0.5) - 2.0 / 1024.0).abs() < 1e-12);
    assert!((binomial_two_sided_p(5, 10, 0.5) - 1.0).abs() < 1e-12);
    // 3 of 3 at p = 0.999: likely.
    assert!(binomial_two_sided_p(3, 3, 0.999) > 0.99);
    assert!(binomial_two_sided_p(0, 3, 0.999) < 1e-8);
}

#[test]
fn needle_multipliers_parse() {
    let quantile = crate::config::resolve(crate::config::params::parse_scenario_toml("preset = \"deepseek-v4-flash\"\n").unwrap()).unwrap();
    assert_eq!(parse_needle_multipliers("0.5, 1,2,1", &quantile).unwrap(), [0.5, 1.0, 2.0]);
    assert_eq!(parse_needle_multipliers("off", &quantile).unwrap(), [1.0]);
    // auto: the quantile needle's wide grid, cut where the exceedance would pass 0.5.
    assert_eq!(parse_needle_multipliers("auto", &quantile).unwrap(), EXCEEDANCE_MULTIPLIERS);
    let mut rare = quantile.clone();
    rare.needle.exceedance = Some(0.01);
    assert_eq!(parse_needle_multipliers("auto", &rare).unwrap(), [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]);
    let mut strength = quantile.clone();
    strength.needle.unit = Some("strength".into());
    assert_eq!(parse_needle_multipliers("auto", &strength).unwrap(), NUISANCE_MULTIPLIERS);
    for bad in ["", "0", "-1", "x", "nan", "inf"] {
        let e = parse_needle_multipliers(bad, &quantile).unwrap_err().to_string();
        assert!(e.contains("--needle-multipliers"), "{bad}: {e}");
    }
}

#[test]
fn information_and_prompts() {
    // Two equally likely hypotheses that answer 1 and 0: one prompt settles it (log 2 nats).
    assert!((information(&[0.5, 0.5], &[1.0, 0.0]) - 2f64.ln()).abs() < 1e-12);
    assert_eq!(information(&[0.5, 0.5], &[0.3, 0.3]), 0.0);
    assert_eq!(prompts_for_odds(0.3, 0.3), None);
    // KL(0.9‖0.5) = 0.368 nats: log 20 = 3.0 nats needs 9 prompts.
    assert_eq!(prompts_for_odds(0.9, 0.5), Some(9));
}

#[test]
fn candidate_lists() {
    let all = candidates("all").unwrap();
    assert_eq!(all[0], HEALTHY);
    assert!(all.iter().any(|h| h == "scale-unwritten-zero+ties-lowest"));
    assert!(!all.iter().any(|h| h.contains('=')));
    assert!(!all.iter().any(|h| h.starts_with("loss")), "losses after the selection are tried only when named");
    assert_eq!(candidates("all,loss,loss-by-length").unwrap().len(), all.len() + 2);
    assert_eq!(candidates("slot-shift, topk=1024").unwrap(), ["healthy", "slot-shift", "topk=1024"]);
    let more = candidates("all,topk=1024,slot-shift").unwrap();
    assert_eq!(more.len(), all.len() + 1);
    assert_eq!(more.last().unwrap(), "topk=1024");
    for nothing in ["", " , ", "healthy"] {
        let err = candidates(nothing).unwrap_err().to_string();
        assert!(err.contains("at least one hypothesis besides healthy"), "{nothing:?}: {err}");
    }
    let err = candidates("slot-shift,nope").unwrap_err().to_string();
    assert!(err.contains("--hypotheses") && err.contains("nope"), "{err}");
}

// A small information per prompt prints with its digits, not as 0.000.
#[test]
fn information_prints_small_values_with_their_digits() {
    assert_eq!(information_text(0.4123), "0.412");
    assert_eq!(information_text(0.01), "0.010");
    assert_eq!(information_text(4.1e-4), "4.1e-4");
    assert_eq!(information_text(0.0), "0.000");
}

// Candidates with the same log-likelihood, in ranking order, are one run.
#[test]
fn tied_candidates_are_runs() {
    let r = ranked(&[("a", -1.0), ("b", -2.0), ("c", -2.0), ("d", -2.0), ("e", -5.0)]);
    assert_eq!(tied_runs(&r), [(0, 1), (1, 3), (4, 1)]);
}

// Few prompts a row (the median row under WEAK_EVIDENCE_PROMPTS) gets a note.
#[test]
fn few_prompts_a_row_are_weak_evidence() {
    let row = |total| observations::Observation {
        line: 2,
        context_tokens: 1024,
        depth_percent: 50.0,
        topk: 64,
        label: "fp8".into(),
        config: "fp8".into(),
        found: 0,
        total,
        layer: None,
        query_position: None,
        healthy: None,
        prefill_chunk: None,
        address_bound: None,
        prompt: None,
    };
    let note = weak_evidence(&[row(1), row(1), row(20)]).unwrap();
    assert!(note.contains("1 prompt(s)") && note.contains("fewer than 5"), "{note}");
    assert_eq!(weak_evidence(&[row(1), row(WEAK_EVIDENCE_PROMPTS), row(20)]), None);
    assert_eq!(weak_evidence(&[]), None);
}

// A next experiment with little information per prompt but a few prompts
// to 20:1 says why: the posterior already favours the leader.
#[test]
fn small_information_is_explained() {
    let r = ranked(&[("block-row0", -11.0), ("hadamard-k-only", -19.0)]);
    let next = |nats: f64, prompts: Option<u64>| NextExperiment {
        context_tokens: 12061,
        depth_percent: 90.0,
        topk: 512,
        config: "fp8".into(),
        label: "fp8".into(),
        information_per_prompt: nats,
        leaders: ["block-row0".into(), "hadamard-k-only".into()],
        leader_recalls: [0.43, 0.745],
        prompts_for_20_to_1: prompts,
        beyond_observed: vec![],
    };
    let why = small_information(&r, &next(7.4e-5, Some(14))).unwrap();
    assert!(why.contains("already favours block-row0 at 1.000"), "{why}");
    assert_eq!(small_information(&r, &next(0.2, Some(14))), None);
    assert_eq!(small_information(&r, &next(7.4e-5, None)), None);
    assert_eq!(small_information(&ranked(&[("a", -1.0), ("b", -1.1)]), &next(7.4e-5, Some(14))), None, "no clear leader");
}

// On rows of another cache than the quantized one, a candidate runs without
// its cache-layout parts; what only qualifies a fault goes with it.
#[test]
fn cache_layout_parts_are_left_out_and_qualifiers_go_with_them() {
    use super::prepare::without_cache_layout;
    assert_eq!(without_cache_layout("block-row0"), "");
    assert_eq!(without_cache_layout("slot-shift+ties-lowest"), "ties-lowest");
    assert_eq!(without_cache_layout("block-row0+layers=0..3"), "");
    assert_eq!(without_cache_layout("zero-blocks=0.5+longer-than=8K"), "");
    assert_eq!(without_cache_layout("hadamard-q-only+layers=0..3"), "hadamard-q-only+layers=0..3");
    assert_eq!(without_cache_layout(HEALTHY), HEALTHY);
}

#[test]
fn address_bounds_come_from_the_contexts_or_the_rows_and_are_profiled() {
    // The observed contexts but the longest, at most 3, spread over them.
    assert_eq!(address_bounds(&[8192, 4096, 8192]), [4096]);
    assert_eq!(address_bounds(&[1913, 3611, 5294, 7003, 10411, 12061]), [1913, 5294, 10411]);
    assert!(address_bounds(&[4096]).is_empty());
    let csv = |bound: &str| {
        format!("context_tokens,depth_percent,topk,config,found,total,address_bound\n4K,50,512,fp8,1,2,{bound}\n16K,50,512,fp8,0,2,\n")
    };
    let rows = |bound: &str| observations::parse("t.csv", &csv(bound), &|_| Ok(())).unwrap().rows;
    let grid = with_address_bounds("all", vec![HEALTHY.into()], &rows(""));
    assert_eq!(grid.len(), 1 + super::candidates::BOUNDED.len());
    assert!(grid.contains(&"visible-cap=4096".into()) && grid.contains(&"workspace-clamp=4096".into()));
    // A stated bound replaces the contexts'; without `all` nothing is added.
    let stated = with_address_bounds("all", vec![], &rows("52480"));
    assert!(stated.contains(&"block0-repeat=52480".into()) && !stated.iter().any(|h| h.ends_with("=4096")));
    assert!(with_address_bounds("slot-shift", vec![], &rows("")).is_empty());
    // Each bounded hypothesis is named at its best bound, its likelihood
    // marginal over the bounds; composites and other parametrized entries
    // are left alone.
    let profiled = super::rank::pool_bounds(ranked(&[
        ("visible-cap=4096", -9.0),
        ("visible-cap=8192", -5.0),
        ("block0-repeat=4096", -7.0),
        ("topk=1024", -6.0),
        ("topk=2048", -6.5),
        ("visible-cap=4096+ties-lowest", -8.0),
    ]));
    let names: Vec<&str> = profiled.iter().map(|r| r.hypothesis.as_str()).collect();
    assert_eq!(names, ["visible-cap=8192", "topk=1024", "topk=2048", "block0-repeat=4096", "visible-cap=4096+ties-lowest"]);
    let cap = profiled.iter().find(|r| r.hypothesis == "visible-cap=8192").unwrap();
    let marginal = -5.0 + ((1.0 + (-4.0f64).exp()) / 2.0).ln();
    assert!((cap.log_likelihood - marginal).abs() < 1e-12, "{}", cap.log_likelihood);
    assert_eq!(profiled.iter().find(|r| r.hypothesis == "block0-repeat=4096").unwrap().log_likelihood, -7.0, "one bound: as it is");
}

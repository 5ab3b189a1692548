//! `needle=M` (issue 28, diagnose's cost): another needle on the same
//! haystacks, in the same trial. A variant with `needle=M` must give, bit
//! for bit, what the variant without it gives in a scenario whose median
//! exceedance is M times larger; its parse and refusals are one line.

use dsa_recall::config::{self, params::parse_scenario_toml, ListSpec, ScenarioParams};
use dsa_recall::diagnose;
use dsa_recall::run::cell::CellResult;

fn findings() -> ScenarioParams {
    let toml = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/incidents/findings.toml")).unwrap();
    let mut p = config::resolve(parse_scenario_toml(&toml).unwrap()).unwrap();
    p.sweep.contexts = Some(ListSpec::Text("4096,8192".into()));
    p.sweep.depths = Some(ListSpec::Text("50".into()));
    p.sweep.topk = Some(ListSpec::Text("128,512".into()));
    p.sweep.trials = Some(24);
    p.estimator.predict = Some(false);
    p
}

fn cells(p: &ScenarioParams, precisions: &str) -> Vec<CellResult> {
    let mut p = p.clone();
    p.sweep.precisions = Some(ListSpec::Text(precisions.into()));
    dsa_recall::run::sweep::run_sweep(&config::check(p).unwrap(), &|| {}).unwrap().cells
}

/// The cells of `precision` in `all`, renamed to `as_name`, as JSON,
/// without the paired comparison with the sweep's first variant.
fn of(all: &[CellResult], precision: &str, as_name: &str) -> Vec<String> {
    all.iter()
        .filter(|c| c.precision == precision)
        .map(|c| {
            let mut v = serde_json::to_value(CellResult { precision: as_name.into(), ..c.clone() }).unwrap();
            for paired in ["baseline", "recall_diff", "discordant_gained", "discordant_lost", "mcnemar_p"] {
                v.as_object_mut().unwrap().remove(paired);
            }
            v.to_string()
        })
        .collect()
}

#[test]
fn a_needle_multiple_is_the_scenario_with_that_exceedance_bit_for_bit() {
    let p = findings();
    let variants = ["fp8-fp32scale", "fp8-fp32scale+block-row0", "bf16"];
    let mut list: Vec<String> = variants.iter().map(|v| v.to_string()).collect();
    for m in ["0.5", "2"] {
        list.extend(variants.iter().map(|v| format!("{v}+needle={m}")));
    }
    let together = cells(&p, &list.join(","));
    for (m, multiple) in [("0.5", 0.5), ("2", 2.0)] {
        let alone = cells(&diagnose::with_needle_multiple(&p, multiple).unwrap(), &variants.join(","));
        for v in variants {
            let want = of(&alone, v, v);
            assert_eq!(want.len(), 4);
            assert_eq!(of(&together, &format!("{v}+needle={m}"), v), want, "{v} at needle × {m}");
        }
    }
    // The variants without a multiple are unchanged by the others beside them.
    let plain = cells(&p, &variants.join(","));
    for v in variants {
        assert_eq!(of(&together, v, v), of(&plain, v, v), "{v}");
    }
    // A harder needle ranks lower on the same haystacks.
    let rank = |name: &str| together.iter().filter(|c| c.precision == name).map(|c| c.mean_rank.unwrap()).sum::<f64>();
    assert!(rank("bf16+needle=0.5") < rank("bf16") && rank("bf16") < rank("bf16+needle=2"), "the multiples change nothing");
}

#[test]
fn needle_multiples_are_refused_where_they_cannot_act() {
    let p = findings();
    let refused = |p: &ScenarioParams, precisions: &str| {
        let mut p = p.clone();
        p.sweep.precisions = Some(ListSpec::Text(precisions.into()));
        config::check(p).unwrap_err()
    };
    for (bad, says) in [
        ("fp8+needle=0", "positive multiple"),
        ("fp8+needle=-2", "positive multiple"),
        ("fp8+needle=abc", "positive multiple"),
        ("fp8+needle", "needle=N"),
        ("fp8+needle=1", "changes nothing"),
        ("fp8+needle=1e5", "below 1"),
    ] {
        let e = refused(&p, bad);
        assert!(e.allowed.contains(says), "{bad}: {}", e.allowed);
    }
    let mut strength = p.clone();
    strength.needle.unit = Some("strength".into());
    strength.needle.profile = None;
    let e = refused(&strength, "fp8+needle=2");
    assert!(e.allowed.contains("quantile"), "{}", e.allowed);
}

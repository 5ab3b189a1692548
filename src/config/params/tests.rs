use super::*;

#[test]
fn overlay_keeps_base_values_the_top_leaves_out() {
    let mut base = parse_scenario_toml("[needle]\nstrength = 1.0\ntokens = 4\n").unwrap();
    let top = parse_scenario_toml("[needle]\nstrength = 2.0\n").unwrap();
    base.overlay(top);
    assert_eq!(base.needle.strength, Some(2.0));
    assert_eq!(base.needle.tokens, Some(4));
}

#[test]
fn unknown_keys_are_reported_with_line_and_column() {
    let err = parse_scenario_toml("[needle]\nstrength = 1.0\nstrenght = 2.0\n").unwrap_err();
    assert!(err.starts_with("line 3, column 1: unknown field `strenght`"), "{err}");
    let err = parse_scenario_toml("[needl]\n").unwrap_err();
    assert!(err.contains("line 1") && err.contains("unknown field `needl`"), "{err}");
    assert!(!err.contains('\n'));
}

#[test]
fn lists_accept_text_or_arrays() {
    let p = parse_scenario_toml("[sweep]\ncontexts = [1024, \"4K\"]\ndepths = \"0..100:50\"\n").unwrap();
    assert_eq!(p.sweep.contexts.unwrap().to_text(), "1024,4K");
    assert_eq!(p.sweep.depths.unwrap().to_text(), "0..100:50");
}

#[test]
fn every_flag_is_unique_and_named_after_its_field() {
    let flags: Vec<&Flag> = ScenarioParams::flags().collect();
    for (i, f) in flags.iter().enumerate() {
        assert!(f.long.starts_with("--") && !f.help.ends_with('.'), "{f:?}");
        assert!(flags[..i].iter().all(|g| g.long != f.long && g.path != f.path), "{} twice", f.long);
    }
    assert_eq!(field_name("physics.gate_noise_std"), "physics.gate_noise_std (--gate-noise-std)");
    assert_eq!(field_name("indexer.heads"), "indexer.heads");
}

#[test]
fn one_cell_commands_spell_the_grid_lists_in_the_singular() {
    let long = |path, c| spelling(path, c).unwrap().long;
    for (path, one) in [("sweep.contexts", "--context"), ("sweep.depths", "--depth"), ("sweep.topk", "--topk")] {
        assert_eq!(long(path, Command::Sweep), flag(path).unwrap());
        assert_eq!((long(path, Command::Run), long(path, Command::Trial)), (one, one));
    }
    // `trial` dumps several precisions of one trial: the list stays.
    assert_eq!(long("sweep.precisions", Command::Run), "--precision");
    assert_eq!(long("sweep.precisions", Command::Trial), "--precisions");
    // Every list of the grid has a one-value spelling in `run`.
    for f in ScenarioParams::flags().filter(|f| f.scope == Scope::Sweep) {
        assert!(f.cell.iter().any(|(c, _)| *c == Command::Run), "{}", f.path);
    }
    let e = in_spelling(ConfigError::new(field_name("sweep.contexts"), "\"-5\"", "x"), Command::Run);
    assert_eq!(e.field, "sweep.contexts (--context)");
    let e = in_spelling(ConfigError::new(field_name("sweep.trials"), "0", "x"), Command::Run);
    assert_eq!(e.field, "sweep.trials (--trials)");
}

#[test]
fn unused_knobs_are_refused_by_the_commands_that_ignore_them() {
    let given = |toml: &str| parse_scenario_toml(toml).unwrap();
    let threshold = given("[sweep]\nthreshold = 0.5\n");
    assert!(refuse_unused(&threshold, Command::Sweep).is_ok());
    let e = refuse_unused(&threshold, Command::Run).unwrap_err().to_string();
    assert!(e.contains("sweep.threshold (--threshold) = 0.5") && e.contains("`run` does not use --threshold"), "{e}");
    let trials = given("[sweep]\ntrials = 5\n");
    assert!(refuse_unused(&trials, Command::Run).is_ok());
    assert!(refuse_unused(&trials, Command::Trial).is_err());
    // A section's `unused_by` reaches each of its rows.
    for toml in ["[stack]\nquorum = 2\n", "[estimator]\nmode = \"tail\"\n"] {
        assert!(refuse_unused(&given(toml), Command::Run).is_ok(), "{toml}");
        assert!(refuse_unused(&given(toml), Command::Trial).is_err(), "{toml}");
    }
    // Every row of those sections is hidden from `trial`, none from `sweep`.
    for f in StackParams::FLAGS.iter().chain(EstimatorParams::FLAGS) {
        assert!(f.arg_for(Command::Trial).is_hide_set() && !f.arg_for(Command::Sweep).is_hide_set(), "{}", f.path);
    }
}

#[test]
fn flags_read_back_into_their_fields() {
    let cmd = || clap::Command::new("t").no_binary_name(true).args(args(Scope::Scenario)).args(args(Scope::Sweep));
    let m = cmd()
        .try_get_matches_from([
            "--gate-noise-std",
            "0.5",
            "--trials",
            "7",
            "--predict",
            "on",
            "--needle-strength",
            " 2.5",
            "--depths=-5",
            "--tie-rule",
            "random",
        ])
        .unwrap();
    let p = ScenarioParams::from_flags(&m, Scope::Scenario).unwrap();
    assert_eq!(p.physics.gate_noise_std, Some(0.5));
    assert_eq!(p.sweep.trials, Some(7));
    assert_eq!(p.estimator.predict, Some(true));
    assert_eq!(p.needle.strength, Some(2.5));
    assert_eq!(p.selection.tie_rule.as_deref(), Some("random"));
    assert_eq!(p.sweep.depths, None, "a sweep-only flag is not read in the scenario scope");
    let grid = ScenarioParams::from_flags(&m, Scope::Sweep).unwrap();
    assert_eq!(grid.sweep.depths, Some(ListSpec::Text("-5".into())));
    assert_eq!(grid.sweep.trials, None);

    let m = cmd().try_get_matches_from(["--needle-strength", "abc"]).unwrap();
    let err = ScenarioParams::from_flags(&m, Scope::Scenario).unwrap_err().to_string();
    assert_eq!(err, "invalid needle.strength (--needle-strength) = \"abc\": a finite number ≥ 0");
    let err = cmd().try_get_matches_from(["--trials", "-1"]).unwrap_err().to_string();
    assert!(err.starts_with("error: invalid value '-1' for '--trials <TRIALS>'"), "{err}");
}

/// Issue 19: the binding's keyword arguments read like the command line.
#[test]
fn flag_pairs_read_like_the_command_line() {
    let pair = |n: &str, v: &str| (n.to_string(), v.to_string());
    let p = overlay_from_flags(&[pair("gate-noise-std", "0.5"), pair("contexts", "1K,4K"), pair("predict", "on")]).unwrap();
    assert_eq!(p.physics.gate_noise_std, Some(0.5));
    assert_eq!(p.sweep.contexts, Some(ListSpec::Text("1K,4K".into())));
    assert_eq!(p.estimator.predict, Some(true));
    let p = overlay_from_flags(&[pair("depths", "-5")]).unwrap();
    assert_eq!(p.sweep.depths, Some(ListSpec::Text("-5".into())));
    let err = overlay_from_flags(&[pair("gate-nois-std", "1")]).unwrap_err().to_string();
    assert!(err.starts_with("invalid knob = \"gate-nois-std\": one of "), "{err}");
    let err = overlay_from_flags(&[pair("trials", "-1")]).unwrap_err().to_string();
    assert!(err.starts_with("invalid sweep.trials (--trials) = \"-1\": "), "{err}");
    let err = overlay_from_flags(&[pair("needle-strength", "abc")]).unwrap_err().to_string();
    assert_eq!(err, "invalid needle.strength (--needle-strength) = \"abc\": a finite number ≥ 0");
}

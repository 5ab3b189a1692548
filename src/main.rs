//! The `dsa-recall` binary: parses arguments, hands them to the library,
//! and turns errors into one line on stderr and an exit code
//! (2 for bad usage or configuration, 1 for a run that failed).

mod cli;
mod progress;

use clap::error::ErrorKind;
use clap::Parser;
use cli::{
    CalibrateArgs, Cli, Command, DiagnoseArgs, HypothesesAction, MergeArgs, ObserveArgs, PlotArgs, PresetsAction, QuantizeArgs, ReplayArgs,
    RunArgs, SweepArgs, TrialArgs,
};
use dsa_recall::base::observe::Silent;
use dsa_recall::commands::diagnose::diagnosis_params;
use dsa_recall::commands::replay::ReplayRequest;
use dsa_recall::config::{self, Overlay, Scenario, ScenarioParams};
use dsa_recall::error::Error;
use dsa_recall::report;
use dsa_recall::run::plan::Shard;
use dsa_recall::run::store::{self, StoreOptions};
use dsa_recall::run::{output, sweep};
use progress::{Interrupt, Progress, Steps};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            let _ = e.print();
            return ExitCode::from(if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand { 2 } else { 0 });
        }
        Err(e) => {
            // clap's message is several lines: its first paragraph says what
            // was wrong (and, on later lines, which arguments), then usage.
            let text = e.to_string();
            let first: Vec<&str> = text.split("\n\n").next().unwrap_or("").lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            let what = first.join(" ");
            let what = what.trim_start_matches("error: ");
            eprintln!("error: {} (see --help)", if what.is_empty() { "invalid arguments" } else { what });
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Sim(dsa_recall::SimError::Interrupted)) => {
            eprintln!("interrupted: rerun with --resume ({})", resume_command());
            ExitCode::from(Interrupt::exit_code())
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(if e.is_usage() { 2 } else { 1 })
        }
    }
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Sweep(args) => run_sweep(&args),
        Command::Run(args) => run_cell(&args),
        Command::Merge(args) => run_merge(&args),
        Command::Trial(args) => run_trial_dump(&args),
        Command::Replay(args) => run_replay(&args),
        Command::Quantize(args) => run_quantize(&args),
        Command::Plot(args) => run_plot(&args),
        Command::Calibrate(args) => run_calibrate(&args),
        Command::Diagnose(args) => run_diagnose(&args),
        Command::Observe(args) => run_observe(&args),
        Command::Hypotheses(args) => match (args.action, args.long) {
            (Some(HypothesesAction::Show { name }), _) => {
                let h = dsa_recall::score::hypothesis::info(&name).ok_or_else(|| {
                    dsa_recall::ConfigError::new(
                        "hypotheses show",
                        format!("{name:?}"),
                        format!("one of {}", dsa_recall::score::hypothesis::names()),
                    )
                })?;
                print!("{}", dsa_recall::score::hypothesis::long_text(h));
                Ok(())
            }
            (None, long) => {
                for h in dsa_recall::score::hypothesis::CATALOGUE {
                    if long {
                        println!("{}", dsa_recall::score::hypothesis::long_text(h));
                    } else {
                        println!("{:<13} {:<21} {}", h.group.name(), h.name, h.summary);
                    }
                }
                Ok(())
            }
        },
        Command::Presets(args) => {
            match args.action {
                None => {
                    for (name, text) in config::PRESETS {
                        let params = config::params::parse_scenario_toml(text).unwrap_or_default();
                        println!("{name:<20} {}", params.description.unwrap_or_default());
                    }
                }
                Some(PresetsAction::Show { name }) => {
                    print!("{}", config::preset_text(&name)?);
                    let s = config::check(config::resolve(ScenarioParams { preset: Some(name), ..Default::default() })?)?;
                    if let Some(stack) = &s.stack {
                        print!("\n{}", stack.toml_comment(s.needle_tokens, s.physics.needle_gate_boost));
                    }
                }
            }
            Ok(())
        }
    }
}

/// The command line that resumes an interrupted sweep: this one without
/// `--force` and with `--resume`, quoted for a POSIX shell where needed.
fn resume_command() -> String {
    let quote = |a: String| {
        if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c)) {
            a
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    };
    let mut args: Vec<String> = std::env::args().filter(|a| a != "--force").collect();
    if !args.iter().any(|a| a == "--resume") {
        args.push("--resume".into());
    }
    args.into_iter().map(quote).collect::<Vec<_>>().join(" ")
}

fn run_sweep(args: &SweepArgs) -> Result<(), Error> {
    if let Some(axis) = args.vary_axis()? {
        return run_vary(args, &axis);
    }
    let request = args.scenario_request()?;
    let s = request.scenario()?;
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let plot = sweep_plot_options(args, &s.contexts)?;
    let pool = request.thread_pool()?;
    store::check_memory(&s, pool.current_num_threads())?;
    let store_opts = StoreOptions { force: args.force, resume: args.resume, shard, chunk_trials: progress::chunk_trials_knob()? };
    let interrupt = Interrupt::catch();
    let display = Progress::new(true, args.resume)?.stopped_by(interrupt);
    let outcome = pool.install(|| store::sweep_into(&args.out, &s, store_opts, &display));
    display.finish();
    let outcome = outcome?;
    if interrupt.requested() {
        // The signal came after the last chunk: every cell is on disk, and
        // a resume writes the tables and charts.
        return Err(dsa_recall::SimError::Interrupted.into());
    }
    if shard.is_some() {
        // A shard's table and charts would describe a fragment: `merge` makes them.
        store::finish(&args.out, &s, shard, &outcome, &[output::MANIFEST_FILE.to_string(), output::RESULTS_FILE.to_string()])?;
        println!("wrote shard {} ({} cells) to {}", args.shard.as_deref().unwrap_or(""), outcome.cells.len(), args.out.display());
        return Ok(());
    }
    complete_sweep(&args.out, &s, &outcome, &plot)?;
    println!("\nwrote {}", args.out.display());
    Ok(())
}

/// `sweep`'s chart options, the detail context checked against the
/// sweep's `contexts` before anything is simulated.
fn sweep_plot_options(args: &SweepArgs, contexts: &[u64]) -> Result<report::PlotOptions, Error> {
    let plot = args.chart.request(&args.detail_context).options()?;
    if plot.detail_context.is_some() {
        report::detail_context(contexts, plot.detail_context)?;
    }
    Ok(plot)
}

/// `sweep` over a knob's values: one sweep directory per value under --out,
/// the combined results, chart and table at the top.
fn run_vary(args: &SweepArgs, axis: &dsa_recall::config::vary::VaryAxis) -> Result<(), Error> {
    use dsa_recall::run::vary;
    let request = args.scenario_request()?;
    let scenarios = axis.scenarios(&request.params()?)?;
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let plot = sweep_plot_options(args, &scenarios[0].contexts)?;
    let pool = request.thread_pool()?;
    store::check_memory(&scenarios[0], pool.current_num_threads())?;
    let store_opts = StoreOptions { force: args.force, resume: args.resume, shard, chunk_trials: progress::chunk_trials_knob()? };
    let interrupt = Interrupt::catch();
    let display = Progress::new(true, args.resume)?.stopped_by(interrupt);
    let finish_value = |dir: &std::path::Path, s: &Scenario, o: &sweep::SweepOutcome| report::vary::complete_value(dir, s, o, &plot);
    let outcome = pool.install(|| vary::sweep_vary(&args.out, axis, &scenarios, store_opts, &display, &finish_value));
    display.finish();
    let outcome = outcome?;
    if interrupt.requested() {
        return Err(dsa_recall::SimError::Interrupted.into());
    }
    let files = report::vary::write_vary(&args.out, &outcome, &plot)?;
    vary::finish(&args.out, &outcome, &files)?;
    print!("{}", vary::format_table(&outcome));
    println!("\nwrote {} (one sweep per value in {}=…/)", args.out.display(), axis.field);
    Ok(())
}

/// Derived files, the final manifest and the stdout table of a whole grid
/// (a finished sweep, or merged shards).
fn complete_sweep(dir: &std::path::Path, s: &Scenario, outcome: &sweep::SweepOutcome, plot: &report::PlotOptions) -> Result<(), Error> {
    let files = report::write_sweep(dir, s, outcome, plot)?;
    store::finish(dir, s, None, outcome, &files)?;
    print!("{}", output::format_table(s, outcome));
    Ok(())
}

fn run_merge(args: &MergeArgs) -> Result<(), Error> {
    let merged = store::merge_shards(&args.shards)?;
    let s: Scenario = store::scenario_from_manifest(&merged.manifest)?;
    let (lines, cells) = store::order_cells(&s, merged.lines, merged.cells)?;
    output::prepare_output_dir(&args.out, args.force)?;
    store::write_result_lines(&args.out.join(output::RESULTS_FILE), &lines)?;
    let effective = sweep::effective_contexts(&s, &cells);
    let outcome = sweep::SweepOutcome { cells, effective };
    complete_sweep(&args.out, &s, &outcome, &report::PlotOptions::default())?;
    println!("\nmerged {} shards into {}", args.shards.len(), args.out.display());
    Ok(())
}

fn run_cell(args: &RunArgs) -> Result<(), Error> {
    let request = args.request()?;
    let s = request.scenario()?;
    let pool = request.scenario.thread_pool()?;
    let display = Progress::of_trials(sweep::group_trial_runs(&s))?;
    let cell = pool.install(|| report::run_single_cell(&s, args.print_trials, &|| display.inc()));
    display.finish();
    let cell = cell?;
    if args.json {
        println!("{}", serde_json::to_string(&cell.result).unwrap_or_default());
    } else {
        print!("{}", cell.text);
    }
    Ok(())
}

/// `diagnose`: 200 trials per cell and no prediction unless the scenario
/// or the command line says otherwise. With `--out`, the directory is
/// checked before simulating and written only after everything is computed.
fn run_diagnose(args: &DiagnoseArgs) -> Result<(), Error> {
    use dsa_recall::diagnose;
    let request = args.scenario.request()?;
    let params = diagnosis_params(request.params()?)?;
    let reading = diagnose::Reading::parse(&args.recall)?;
    let hypotheses = diagnose::candidates(&args.hypotheses)?;
    let obs = diagnose::observations::read(&args.observations, &|v| diagnose::variant_ok(&params, v))?;
    if let Some(dir) = &args.out {
        output::check_output_dir(dir, args.force)?;
    }
    let pool = request.thread_pool()?;
    let opts = diagnose::Options { hypotheses, reading, next: !args.no_next, observer: &Silent };
    let d = pool.install(|| diagnose::diagnose(&params, &obs, &opts))?;
    let written = match &args.out {
        Some(dir) => {
            let existed = dir.exists();
            output::prepare_output_dir(dir, args.force)?;
            let files = report::diagnose::write_diagnosis(dir, &d, &obs, &args.formats());
            if files.is_err() && !existed {
                let _ = std::fs::remove_dir(dir);
            }
            Some(files?)
        }
        None => None,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&d).unwrap_or_default());
    } else {
        print!("{}", diagnose::format_table(&d));
    }
    if let (Some(dir), Some(files)) = (&args.out, written) {
        if !args.json {
            println!("wrote {} into {}", files.join(", "), dir.display());
        }
    }
    Ok(())
}

/// `observe`: an engine capture of the indexer's top-k → observation rows.
fn run_observe(args: &ObserveArgs) -> Result<(), Error> {
    use dsa_recall::tensors::capture::{self, Query, Spec};
    let preset = config::preset_params(args.preset.as_deref().unwrap_or(config::DEFAULT_PRESET))?;
    let positive = |flag: &str, v: Option<u64>| -> Result<Option<u64>, Error> {
        match v {
            Some(0) => Err(dsa_recall::ConfigError::new(flag, 0, "a positive whole number").into()),
            v => Ok(v),
        }
    };
    let context = match &args.context {
        None => None,
        Some(t) => Some(dsa_recall::base::units::parse_size(t).filter(|&n| n > 0).ok_or_else(|| {
            dsa_recall::ConfigError::new("--context", format!("{t:?}"), "a positive number of tokens (K/M suffixes allowed)")
        })?),
    };
    if let Some(d) = args.depth.filter(|d| !(0.0..=100.0).contains(d)) {
        return Err(dsa_recall::ConfigError::new("--depth", d, "a number from 0 to 100").into());
    }
    let spec = Spec {
        needle: capture::parse_needle_tokens(&args.needle_tokens)?,
        ratio: positive("--compress-ratio", args.compress_ratio)?.or(preset.geometry.compress_ratio).unwrap_or(1),
        topk: positive("--topk", args.topk)?,
        default_topk: preset.indexer.index_topk,
        layers: positive("--layers", args.layers)?,
        context,
        depth: args.depth,
        query: Query::parse(&args.query)?,
        label: args.label.trim().to_string(),
        healthy: args.healthy,
    };
    let text = capture::observe(&args.capture, &spec, &args.out)?;
    print!("{text}");
    println!("# → {}", args.out.display());
    Ok(())
}

fn run_quantize(args: &QuantizeArgs) -> Result<(), Error> {
    use dsa_recall::numerics::quantize::{format_line, parse_value, QuantizeSpec};
    use std::io::{BufRead, Write};
    let spec = QuantizeSpec::from_flags(&args.format, args.block, args.scale.as_deref(), args.saturate, args.amax_floor)?;
    let mut inputs = Vec::new();
    if args.values.is_empty() {
        for (i, line) in std::io::stdin().lock().lines().enumerate() {
            let line = line.map_err(|e| Error::io("reading stdin", e))?;
            if !line.trim().is_empty() {
                inputs.push(parse_value(&line, || format!("line {}", i + 1))?);
            }
        }
    } else {
        for (i, text) in args.values.iter().enumerate() {
            inputs.push(parse_value(text, || format!("argument {}", i + 1))?);
        }
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (value, code) in spec.quantize(&inputs) {
        writeln!(out, "{}", format_line(&spec, value, code, args.codes)).map_err(|e| Error::io("writing stdout", e))?;
    }
    out.flush().map_err(|e| Error::io("writing stdout", e))
}

fn run_plot(args: &PlotArgs) -> Result<(), Error> {
    let opts = args.chart.request(&args.detail_context).options()?;
    let files = report::plot_dir(&args.dir, &opts)?;
    println!("wrote {} files in {}: {}", files.len(), args.dir.display(), files.join(", "));
    Ok(())
}

/// `calibrate`: reads the sources given and writes the scenario: the
/// checkpoint's knobs, then (with `--observations`) the scenario file and
/// flags over them and the fitted knob on top.
fn run_calibrate(args: &CalibrateArgs) -> Result<(), Error> {
    if args.checkpoint.is_empty() && args.observations.is_none() {
        return Err(dsa_recall::ConfigError::new(
            "calibrate",
            "(no source)",
            "--checkpoint FILE… (a checkpoint's shards, index JSON or directory) and/or --observations FILE",
        )
        .into());
    }
    if let Some(p) = &args.scenario.preset {
        config::preset_params(p)?;
    }
    let Some(observations) = &args.observations else {
        // The scenario flags and the fit's own serve the fit alone.
        let flags = args.scenario.overlay()?;
        let given = args.scenario.config.is_some()
            || ScenarioParams { preset: None, ..flags } != ScenarioParams::default()
            || args.fit_range.is_some()
            || args.fit.is_some();
        if given {
            return Err(dsa_recall::ConfigError::new(
                "calibrate",
                "(scenario or fit flags)",
                "--observations FILE: without it calibrate reads the checkpoint alone, and takes only --preset",
            )
            .into());
        }
        let text = dsa_recall::tensors::calibrate::run_calibrate(&args.checkpoint, args.scenario.preset.as_deref(), &args.out)?;
        print!("{text}");
        println!("# → {}", args.out.display());
        return Ok(());
    };
    calibrate_from_observations(args, observations)
}

/// `calibrate --observations`: the fit, its scenario TOML and curve CSV
/// (both through temporary files: nothing is written on error).
fn calibrate_from_observations(args: &CalibrateArgs, observations: &std::path::Path) -> Result<(), Error> {
    use dsa_recall::diagnose::{self, fit};
    let mut base = ScenarioParams::default();
    let mut notes = String::new();
    if !args.checkpoint.is_empty() {
        let cal = dsa_recall::tensors::calibrate::calibrate_checkpoint(&args.checkpoint, args.scenario.preset.as_deref())?;
        notes = cal.to_toml();
        base.overlay(
            config::params::parse_scenario_toml(&notes).map_err(|m| Error::ScenarioFile { path: "checkpoint".into(), message: m })?,
        );
    }
    let request = args.scenario.request()?;
    base.overlay(request.params()?);
    if base.preset.is_none() {
        base.preset = Some(config::DEFAULT_PRESET.to_string());
    }
    let params = diagnosis_params(base.clone())?;
    let reading = diagnose::Reading::parse(&args.recall)?;
    let range = args.fit_range.as_deref().map(parse_fit_range).transpose()?;
    let obs = diagnose::observations::read(observations, &|v| diagnose::variant_ok(&params, v))?;
    let pool = request.thread_pool()?;
    let field = args.fit.as_deref().map_or_else(|| fit::default_field(&params).to_string(), |f| f.trim().to_string());
    let opts = fit::FitOptions { field, range, reading, observer: &Silent };
    let f = pool.install(|| fit::fit(&params, &obs, &opts))?;
    let command = std::iter::once("dsa-recall".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let mut text = fit::scenario_toml(&base, &f, &command)?;
    if !notes.is_empty() {
        text.push_str("\n# From the checkpoint (its values are in the sections above):\n");
        for line in notes.lines() {
            text.push_str(&if line.starts_with('#') { format!("{line}\n") } else { format!("# | {line}\n") });
        }
    }
    let loaded = config::params::parse_scenario_toml(&text).map_err(|m| Error::ScenarioFile {
        path: args.out.display().to_string(),
        message: format!("calibrated scenario does not parse: {m}"),
    })?;
    config::check(config::resolve(loaded)?)?;
    let csv_path = args.out.with_extension("fit.csv");
    let writes = [(&args.out, text.as_str()), (&csv_path, fit::curve_csv(&f).as_str())].map(|(p, t)| (p.clone(), t.to_string()));
    for (p, t) in &writes {
        let tmp = p.with_extension("partial");
        std::fs::write(&tmp, t).map_err(|e| Error::io(format!("writing {}", tmp.display()), e))?;
    }
    for (p, _) in &writes {
        std::fs::rename(p.with_extension("partial"), p).map_err(|e| Error::io(format!("writing {}", p.display()), e))?;
    }
    print!("{}", fit::format_table(&f));
    println!("wrote {} and {}", args.out.display(), csv_path.display());
    Ok(())
}

/// `--fit-range LO..HI`: two finite positive numbers, LO < HI.
fn parse_fit_range(text: &str) -> Result<(f64, f64), Error> {
    let refuse =
        || dsa_recall::ConfigError::new("--fit-range", format!("{text:?}"), "LO..HI, two positive numbers with LO < HI, e.g. 0.5..32");
    let (a, b) = text.split_once("..").ok_or_else(refuse)?;
    let (a, b): (f64, f64) = (a.trim().parse().map_err(|_| refuse())?, b.trim().parse().map_err(|_| refuse())?);
    if !(a.is_finite() && b.is_finite() && a > 0.0 && a < b) {
        return Err(refuse().into());
    }
    Ok((a, b))
}

fn run_trial_dump(args: &TrialArgs) -> Result<(), Error> {
    let s = args.request()?.scenario()?;
    let steps = Steps::new()?;
    let summary = dsa_recall::tensors::dump::dump_trial(&s, args.trial, &args.dump, &|what| steps.step(what));
    steps.finish();
    let summary = summary?;
    println!(
        "trial {} of {} tokens, depth {} %, k={} (k_eff {} of {} rows) → {}",
        args.trial,
        s.contexts[0],
        s.depths[0],
        s.topks[0],
        summary.k_eff,
        summary.rows,
        args.dump.display()
    );
    println!("{:<16} {:>9} {:>12} {:>18}", "precision", "survived", "needle rank", "overlap with fp32");
    for (name, survived, rank, overlap) in &summary.variants {
        let rank = rank.map_or("-".to_string(), |r| r.to_string());
        println!("{name:<16} {:>9} {rank:>12} {overlap:>18.4}", if *survived { "yes" } else { "no" });
    }
    Ok(())
}

fn run_replay(args: &ReplayArgs) -> Result<(), Error> {
    use dsa_recall::tensors::replay::{load_capture_npy, load_capture_safetensors, replay, replay_layered, Capture, TensorNames};
    let needle_rows = match &args.needle_rows {
        None => None,
        Some(list) => Some(
            list.split(',')
                .map(|x| {
                    x.trim()
                        .parse::<u64>()
                        .map_err(|_| dsa_recall::ConfigError::new("--needle-rows", format!("{list:?}"), "row indices, e.g. 12,13"))
                })
                .collect::<Result<Vec<u64>, _>>()?,
        ),
    };
    let request = ReplayRequest {
        topks: config::lists::parse_sizes("--topk", &args.topk)?,
        precisions: config::lists::parse_names("--precisions", &args.precisions)?,
        needle_rows,
    };
    let variants = request.variants()?;
    let mut cap = match (&args.file, &args.q_npy, &args.k_npy, &args.weights_npy) {
        (Some(file), None, _, _) => {
            let names = TensorNames {
                queries: args.q_name.clone(),
                keys: args.k_name.clone(),
                weights: args.weights_name.clone(),
                needle_rows: args.needle_rows_name.clone(),
            };
            load_capture_safetensors(file, &names)?
        }
        (None, Some(q), Some(k), Some(w)) => load_capture_npy(q, k, w)?,
        _ => {
            return Err(
                dsa_recall::ConfigError::new("replay", "(inputs)", "a safetensors FILE, or --q-npy, --k-npy and --weights-npy").into()
            )
        }
    };
    request.fit(&mut cap, &variants)?;
    let shape = cap.shape();
    let (rows, summaries) = match &cap {
        Capture::Single(rec) => (replay(rec, &variants, &request.topks)?, vec![]),
        Capture::Layered(layered) => {
            let r = replay_layered(layered, &variants, &request.topks)?;
            (r.rows, r.summaries)
        }
    };
    if let Some(path) = &args.chart {
        let chart = dsa_recall::report::chart::overlap::OverlapChart {
            title: "Top-k kept under each precision, against fp32".into(),
            subtitle: format!(
                "replayed tensors: {}{} query token(s), {} heads × {} dims, {} key rows",
                shape.layers.map_or(String::new(), |l| format!("{l} layers × ")),
                shape.tokens,
                shape.heads,
                shape.dim,
                shape.rows
            ),
            bars: dsa_recall::tensors::replay::overlap_bars(&rows),
        };
        dsa_recall::report::chart::overlap::render_overlap(&chart, path, 1400, 800)?;
    }
    if args.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        for s in &summaries {
            println!("{}", serde_json::to_string(s).unwrap_or_default());
        }
        return Ok(());
    }
    if let Some(layers) = shape.layers {
        print_layered_replay(layers, &shape, &rows, &summaries);
        return Ok(());
    }
    println!(
        "{} tokens × {} heads × {} dims against {} key rows; selection compared with fp32",
        shape.tokens, shape.heads, shape.dim, shape.rows
    );
    println!(
        "{:>6} {:>7} {:<14} {:>16} {:>9} {:>9} {:>12}",
        "token", "k", "precision", "recall@k vs fp32", "jaccard", "needle", "needle rank"
    );
    for r in &rows {
        let needle = r.needle_survived.map_or("-", |s| if s { "kept" } else { "lost" });
        let rank = r.needle_rank.map_or("-".to_string(), |x| x.to_string());
        println!(
            "{:>6} {:>7} {:<14} {:>16.4} {:>9.4} {:>9} {:>12}",
            r.token, r.topk, r.precision, r.selection_recall, r.jaccard, needle, rank
        );
    }
    Ok(())
}

/// The table of a per-layer replay: one line per layer × token × k ×
/// variant, then the overlaps and the needle across layers.
fn print_layered_replay(
    layers: usize,
    shape: &dsa_recall::tensors::replay::CaptureShape,
    rows: &[dsa_recall::tensors::replay::ReplayRow],
    summaries: &[dsa_recall::tensors::replay::Summary],
) {
    use dsa_recall::tensors::replay::Summary;
    println!(
        "{layers} layers × {} tokens × {} heads × {} dims against {} key rows per layer; selection compared with fp32",
        shape.tokens, shape.heads, shape.dim, shape.rows
    );
    println!(
        "{:>6} {:>6} {:>7} {:<14} {:>16} {:>9} {:>9} {:>12}",
        "layer", "token", "k", "precision", "recall@k vs fp32", "jaccard", "needle", "needle rank"
    );
    for r in rows {
        let needle = r.needle_survived.map_or("-", |s| if s { "kept" } else { "lost" });
        let rank = r.needle_rank.map_or("-".to_string(), |x| x.to_string());
        println!(
            "{:>6} {:>6} {:>7} {:<14} {:>16.4} {:>9.4} {:>9} {:>12}",
            r.layer.unwrap_or(0),
            r.token,
            r.topk,
            r.precision,
            r.selection_recall,
            r.jaccard,
            needle,
            rank
        );
    }
    let list = |xs: &[f64]| xs.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>().join(" ");
    let mut heading = None;
    for s in summaries {
        let (title, columns, line) = match s {
            Summary::AdjacentLayers { topk, mean, per_pair, .. } => (
                "adjacent-layer overlap of the fp32 top-k: share of layer l's also in layer l+1's (mean over tokens)",
                format!("{:>7} {:>7}  per pair (l, l+1) from l = 0", "k", "mean"),
                format!("{topk:>7} {mean:>7.4}  {}", list(per_pair)),
            ),
            Summary::AdjacentTokens { topk, mean, per_layer, .. } => (
                "adjacent-token overlap of the fp32 top-k: share of token t's also in token t+1's (mean over pairs)",
                format!("{:>7} {:>7}  per layer from l = 0", "k", "mean"),
                format!("{topk:>7} {mean:>7.4}  {}", list(per_layer)),
            ),
            Summary::NeedleLayers { topk, precision, layers, layers_reached, reached, .. } => (
                "needle across layers: a layer reaches it when one of its tokens selects a needle row",
                format!("{:>7} {:<14} {:>15} {:>22}", "k", "precision", "layers reached", "whole model (quorum 1)"),
                format!(
                    "{topk:>7} {precision:<14} {:>15} {:>22}",
                    format!("{layers_reached} of {layers}"),
                    if *reached { "reached" } else { "missed" }
                ),
            ),
        };
        if heading != Some(title) {
            println!("\n{title}\n{columns}");
            heading = Some(title);
        }
        println!("{line}");
    }
}

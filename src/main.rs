//! The `dsa-recall` binary: parses arguments into a request, runs the
//! library's command (`dsa_recall::commands`), prints what it returns, and
//! turns errors into one line on stderr and an exit code (2 for bad usage
//! or configuration, 1 for a run that failed). Its other files: `cli.rs`
//! (the arguments and the requests they make) and `cli/progress.rs` (the
//! progress display and the signals that stop a sweep).

mod cli;

use clap::error::ErrorKind;
use clap::FromArgMatches;
use cli::progress::{Interrupt, Progress, Steps};
use cli::{Cli, Command, HypothesesAction, PresetsAction};
use dsa_recall::base::files;
use dsa_recall::commands::{catalogue, cell, diagnose, observe, quantize, replay, sweep};
use dsa_recall::error::Error;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The definition with each subcommand's examples (cli/help.rs).
    let cli = match cli::help::command().try_get_matches().and_then(|m| Cli::from_arg_matches(&m)) {
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
    if let Command::Check(args) = &cli.command {
        return run_check(args);
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Sim(dsa_recall::SimError::Interrupted)) => {
            eprintln!("interrupted: rerun with --resume ({})", resume_command());
            ExitCode::from(Interrupt::exit_code())
        }
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::from(if e.is_usage() { 2 } else { 1 })
        }
    }
}

/// Most characters of an error line: a message that quotes more of the
/// input than its own shortening allows is cut here, never flooding a log.
const ERROR_LINE_CHARS: usize = 2000;

/// An error as the one line stderr gets.
fn one_line(e: &Error) -> String {
    dsa_recall::error::shorten(&e.to_string().replace(['\n', '\r'], " "), ERROR_LINE_CHARS)
}

/// `check` exits 1 on a mismatch, which is a finding, not an error.
fn run_check(args: &cli::CheckArgs) -> ExitCode {
    use dsa_recall::commands::check;
    let result = match (&args.layouts, &args.capture) {
        (Some(name), _) => check::layouts(Some(name.as_str()).filter(|n| !n.is_empty())).map(|t| (t, 0)),
        (None, Some(_)) => check::check(&args.request())
            .and_then(|checked| Ok((if args.json { checked.json()? + "\n" } else { checked.text() }, checked.exit_code()))),
        (None, None) => Err(dsa_recall::ConfigError::new("check", "(no capture)", "a capture file or folder, or --layouts").into()),
    };
    match result {
        Ok((text, code)) => {
            print!("{text}");
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::from(if e.is_usage() { 2 } else { 1 })
        }
    }
}

fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Sweep(args) => {
            let request = args.request()?;
            let display = Progress::new(true, args.resume)?.stopped_by(Interrupt::catch());
            let swept = sweep::sweep(&request, &display);
            display.finish();
            let swept = swept?;
            if args.json {
                // Cells on stdout for jq or pandas; where they were written goes to stderr.
                print!("{}", swept.json_lines());
                eprintln!("wrote {}", args.out.display());
            } else {
                print!("{}", swept.text());
            }
        }
        Command::Run(args) => {
            let request = args.request()?;
            let display = Progress::new(false, false)?;
            let cell = cell::run(&request, args.print_trials, &display);
            display.finish();
            let cell = cell?;
            if args.json {
                println!("{}", serde_json::to_string(&cell.result).unwrap_or_default());
            } else {
                print!("{}", cell.text);
            }
        }
        Command::Merge(args) => print!("{}", sweep::merge(&args.request())?.text()),
        Command::Trial(args) => {
            let request = args.request()?;
            let steps = Steps::new()?;
            let dumped = cell::trial(&request, args.trial, &args.dump, args.allow_large_output, &|what| steps.step(what));
            steps.finish();
            print!("{}", dumped?.text());
        }
        Command::Replay(args) => {
            let (request, input) = args.request()?;
            let replayed = replay::replay(&request, input, args.chart.as_deref())?;
            if args.json {
                replayed.json_lines().iter().for_each(|line| println!("{line}"));
            } else {
                print!("{}", replayed.table());
            }
        }
        Command::Quantize(args) => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut input = if args.values.is_empty() { files::stdin_input()? } else { Box::new(std::io::empty()) };
            quantize::quantize(&args.request(), &args.values, &mut input, &mut out)?;
        }
        Command::Plot(args) => {
            let files = sweep::plot(&args.dir, &args.chart.request(&args.detail_context))?;
            println!("wrote {} files in {}: {}", files.len(), args.dir.display(), files.join(", "));
        }
        Command::Calibrate(args) => {
            let command = std::iter::once("dsa-recall".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
            let request = args.request(command)?;
            print!("{}", in_parts(|display| diagnose::calibrate(&request, display))?);
        }
        Command::Diagnose(args) => {
            let request = args.request()?;
            print!("{}", in_parts(|display| diagnose::diagnose(&request, display))?.text(args.json, args.all));
        }
        Command::Completions { shell } => write_stdout(&cli::help::completions(shell))?,
        Command::Man => write_stdout(&cli::help::man_page().map_err(|e| Error::io("rendering the man page", e))?)?,
        Command::Observe(args) => print!("{}", observe::observe(&args.request())?),
        Command::Hypotheses(args) => match args.action {
            Some(HypothesesAction::Show { name }) => print!("{}", catalogue::hypothesis(&name)?),
            None if args.markdown => print!("{}", catalogue::hypotheses_markdown()),
            None => print!("{}", catalogue::hypotheses(args.long)),
        },
        Command::Check(_) => {} // run_check, before run: it has its own exit codes
        Command::Presets(args) => match args.action {
            Some(PresetsAction::Show { name }) => print!("{}", catalogue::preset(&name)?),
            None => print!("{}", catalogue::presets()),
        },
    }
    Ok(())
}

/// Runs `work` (several simulations: diagnose, calibrate) with progress on stderr.
fn in_parts<T>(work: impl FnOnce(&Progress) -> Result<T, Error>) -> Result<T, Error> {
    let display = Progress::new(false, false)?.in_parts();
    let done = work(&display);
    display.finish();
    done
}

fn write_stdout(bytes: &[u8]) -> Result<(), Error> {
    use std::io::Write;
    std::io::stdout().write_all(bytes).map_err(|e| Error::io("writing to stdout", e))
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

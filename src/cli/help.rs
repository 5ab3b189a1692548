//! What the command line tells about itself besides parsing: the examples
//! under each subcommand's `--help`, shell completions (`clap_complete`)
//! and the man page (`clap_mangen`), all from the one clap definition, so
//! they cannot drift from the flags.

use super::Cli;
use clap::CommandFactory;

/// Each subcommand's `Examples:` block: a comment saying what it answers,
/// then the command, continued after ` \` where it is long (clap wraps
/// help at 100 columns, which would break a command mid-flag). Every
/// command is parsed by a test, and the cheap ones are run.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "sweep",
        "  # the preset's grid: recall vs context, charts and report.html in results/
  dsa-recall sweep --out results
  # every precision at one context, 100 trials a cell
  dsa-recall sweep --contexts 32K --precisions all --trials 100 --out cmp
  # what k = 1024 buys over 512, paired on the same haystacks
  dsa-recall sweep --contexts 8K..64K --topk 512,1024 --out k
  # one JSON object per cell on stdout (progress stays on stderr)
  dsa-recall sweep --contexts 4K,8K --depths 50 --trials 50 --out small --json",
    ),
    (
        "run",
        "  # one cell: recall with its interval, rank and margin
  dsa-recall run --context 32K --depth 50 --topk 512 --precision fp4
  # the same, trial by trial
  dsa-recall run --context 32K --depth 50 --topk 512 --precision fp4 --trials 20 --print-trials
  # the cell as one JSON object (the keys of results.jsonl)
  dsa-recall run --context 8K --depth 10 --topk 512 --precision fp8 --json",
    ),
    (
        "presets",
        "  # the embedded presets, one line each
  dsa-recall presets
  # one preset's every setting, as TOML (a starting point for --config)
  dsa-recall presets show deepseek-v4-pro",
    ),
    (
        "merge",
        "  # two shards of one grid, then the whole directory
  dsa-recall sweep --contexts 1K..64K --shard 1/2 --out shard-1
  dsa-recall sweep --contexts 1K..64K --shard 2/2 --out shard-2
  dsa-recall merge shard-1 shard-2 --out merged",
    ),
    (
        "trial",
        "  # one trial's tensors for three precisions (docs/TENSORS.md)
  dsa-recall trial --context 32K --depth 50 --topk 512 --precisions fp32,fp8,fp4 \\
      --dump t.safetensors",
    ),
    (
        "replay",
        "  # a dumped trial through each precision against fp32
  dsa-recall replay t.safetensors --topk 512,1024
  # recorded tensors as .npy files, as JSON lines
  dsa-recall replay --q-npy q.npy --k-npy k.npy --weights-npy w.npy --needle-rows 812 --json",
    ),
    (
        "quantize",
        "  # three values through e4m3fn with one fp32 scale
  dsa-recall quantize --format e4m3fn --scale fp32 0.1 1.5 -3
  # a plain cast, each value with its code in hex
  dsa-recall quantize --format e2m1 --codes 0.3 2.5 7
  # one number a line from a file
  dsa-recall quantize --format e4m3fn --block 128 --scale ue8m0 < values.txt",
    ),
    (
        "plot",
        "  # redraw a sweep's charts as SVG, without simulating
  dsa-recall plot results --format svg
  # the rank/margin charts at 16K instead of the longest context
  dsa-recall plot results --detail-context 16K",
    ),
    (
        "hypotheses",
        "  # the catalogue, one line each
  dsa-recall hypotheses
  # one hypothesis in full
  dsa-recall hypotheses show hadamard-q-only",
    ),
    (
        "calibrate",
        "  # fit the needle to the rows marked healthy
  dsa-recall calibrate --observations examples/observations/healthy_niah.csv --out healthy.toml
  # the knobs a checkpoint's indexer weights give
  dsa-recall calibrate --checkpoint ./DeepSeek-V3.2 --preset deepseek-v3.2 --out cal.toml",
    ),
    (
        "diagnose",
        "  # rank every hypothesis on a shipped incident
  dsa-recall diagnose --config examples/incidents/findings.toml \\
      --observations examples/incidents/fp8_keys.csv
  # a few candidates, fewer trials, no next experiment: a quick look
  dsa-recall diagnose --observations obs.csv --hypotheses slot-shift,hadamard-q-only \\
      --trials 50 --no-next
  # the diagnosis as JSON, and its chart and report in diag/
  dsa-recall diagnose --observations obs.csv --json --out diag",
    ),
    (
        "observe",
        "  # two saved /generate responses into observation rows
  dsa-recall observe --capture run1.json run2.json --needle-tokens 20480..20512 \\
      --config fp8-fp32scale --out obs.csv",
    ),
    (
        "check",
        "  # the built-in cache layouts, then one as TOML
  dsa-recall check --layouts
  dsa-recall check --layouts sglang-v32-fp8
  # an engine's capture against its layout's reference
  dsa-recall check capture.safetensors --layout sglang-v32-fp8 --json",
    ),
    (
        "completions",
        "  # bash, for this shell and for every new one
  source <(dsa-recall completions bash)
  dsa-recall completions bash > ~/.local/share/bash-completion/completions/dsa-recall
  # zsh and fish
  dsa-recall completions zsh > ~/.zfunc/_dsa-recall
  dsa-recall completions fish > ~/.config/fish/completions/dsa-recall.fish",
    ),
    (
        "man",
        "  # read it, or install it where man finds it
  dsa-recall man > dsa-recall.1 && man -l dsa-recall.1
  dsa-recall man > ~/.local/share/man/man1/dsa-recall.1",
    ),
];

/// The command line's definition with every subcommand's examples under its help.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    for (name, examples) in EXAMPLES {
        cmd = cmd.mut_subcommand(name, |sub| sub.after_help(format!("Examples:\n{examples}")));
    }
    cmd
}

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command(), "dsa-recall", &mut out);
    out
}

/// One man page: the top level as clap_mangen renders it, then a section
/// per subcommand with its synopsis, description, options and examples
/// (the subcommand pages' sections, one level down).
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let mut cmd = command().disable_help_subcommand(true);
    cmd.build();
    let mut top = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut top)?;
    let mut top = String::from_utf8_lossy(&top).replace(".SH EXTRA", ".SH EXAMPLES");
    // The subcommands are sections of this page, not pages of their own.
    for sub in cmd.get_subcommands() {
        top = top.replace(&format!("dsa\\-recall\\-{}(1)", sub.get_name()), &format!("\\fBdsa\\-recall {}\\fR", sub.get_name()));
    }
    let mut out = top.into_bytes();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let man = clap_mangen::Man::new(sub.clone());
        let mut part = Vec::new();
        man.render_synopsis_section(&mut part)?;
        man.render_description_section(&mut part)?;
        man.render_options_section(&mut part)?;
        if sub.get_after_help().is_some() {
            man.render_extra_section(&mut part)?;
        }
        let part = String::from_utf8_lossy(&part).replace(".SH EXTRA", ".SH EXAMPLES");
        out.extend_from_slice(format!(".SH \"DSA\\-RECALL {}\"\n", sub.get_name().to_uppercase()).as_bytes());
        // Its sections become subsections of the subcommand's.
        for line in part.lines() {
            let line = line.strip_prefix(".SH ").map_or_else(|| line.to_string(), |rest| format!(".SS {rest}"));
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;

    /// A line of an example as the shell splits it (no quotes in the examples).
    fn words(line: &str) -> Vec<&str> {
        let line = line.split(['<', '>', '&', '|', ')']).next().unwrap_or_default();
        line.split_whitespace().collect()
    }

    /// The commands of the examples, continuation lines joined.
    fn example_lines() -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (name, text) in EXAMPLES {
            for line in text.replace(" \\\n", " ").lines().map(str::trim) {
                let line = line.strip_prefix("source <(").unwrap_or(line);
                if line.starts_with("dsa-recall ") {
                    out.push((*name, line.to_string()));
                }
            }
        }
        out
    }

    #[test]
    fn every_subcommand_has_examples_that_parse() {
        let cmd = command();
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let help = sub.get_after_help().map(|h| h.to_string()).unwrap_or_default();
            assert!(help.starts_with("Examples:\n  # "), "{} has no examples: {help:?}", sub.get_name());
            assert!(help.contains(&format!("dsa-recall {}", sub.get_name())), "{}: {help}", sub.get_name());
        }
        let lines = example_lines();
        assert!(lines.len() >= 30, "{}", lines.len());
        for (name, text) in EXAMPLES {
            assert!(text.lines().all(|l| l.chars().count() <= 96), "{name}: a line clap would wrap");
        }
        for (name, line) in &lines {
            let parsed = command().try_get_matches_from(words(line));
            assert!(parsed.is_ok(), "{name}: {line}: {}", parsed.err().map(|e| e.to_string()).unwrap_or_default());
            // The flags read as text are checked as the commands check them, short of running.
            let cli = parsed.and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m)).map_err(|e| e.to_string());
            let checked = match cli.as_ref().map(|c| &c.command) {
                Ok(Command::Sweep(a)) => a.request().map(drop).map_err(|e| e.to_string()),
                Ok(Command::Run(a)) => a.request().map(drop).map_err(|e| e.to_string()),
                Ok(Command::Trial(a)) => a.request().map(drop).map_err(|e| e.to_string()),
                Ok(Command::Diagnose(a)) => a.request().map(drop).map_err(|e| e.to_string()),
                Ok(Command::Replay(a)) => a.request().map(drop).map_err(|e| e.to_string()),
                Ok(_) => Ok(()),
                Err(e) => Err(e.clone()),
            };
            assert!(checked.is_ok(), "{line}: {checked:?}");
        }
    }

    #[test]
    fn an_example_that_does_not_parse_is_caught() {
        assert!(command().try_get_matches_from(words("dsa-recall run --contexts 1K --nope")).is_err());
        assert_eq!(words("dsa-recall quantize --format e4m3fn < values.txt"), ["dsa-recall", "quantize", "--format", "e4m3fn"]);
    }
}

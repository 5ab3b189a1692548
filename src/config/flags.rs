//! Command-line flags of the scenario knobs, generated from the table in
//! [`super::params`]: each row there names a field's flag, value name and
//! help; this module turns the rows into clap arguments, reads them back into
//! a [`ScenarioParams`] overlay, and maps TOML paths to flags for error
//! messages ([`field_name`]).

use super::params::{ListSpec, ScenarioParams};
use crate::error::ConfigError;
use clap::{value_parser, Arg, ArgAction, ArgMatches};

/// Which commands take a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every scenario command: `sweep`, `run` and `trial`.
    Scenario,
    /// `sweep` only: its list flags, which `run` and `trial` spell in the
    /// singular with their own help (`--context`, `--depth`, …).
    Sweep,
}

/// One row of the knob table that has a flag.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    /// TOML path, `section.field`; also the clap argument's id.
    pub path: &'static str,
    /// `--gate-noise-std`.
    pub long: &'static str,
    pub value_name: &'static str,
    pub help: &'static str,
    /// `--help` heading (the section's), or the default "Options".
    pub heading: Option<&'static str>,
    pub scope: Scope,
    /// Sets the value parser and how values starting with `-` are taken.
    pub configure: fn(Arg) -> Arg,
}

impl Flag {
    /// The clap argument.
    pub fn arg(&self) -> Arg {
        let arg =
            Arg::new(self.path).long(self.long.trim_start_matches('-')).value_name(self.value_name).help(self.help).action(ArgAction::Set);
        let arg = match self.heading {
            Some(heading) => arg.help_heading(heading),
            None => arg,
        };
        (self.configure)(arg)
    }
}

/// How a field type is given on the command line: numbers through clap's
/// parsers (negative numbers are taken as values, so that range checks name
/// the flag), text and lists as typed, booleans as `on|off`.
pub trait FlagValue: Sized {
    fn configure(arg: Arg) -> Arg;
    /// The value given to the flag with id `id`, if any.
    fn read(m: &ArgMatches, id: &str) -> Option<Self>;
}

macro_rules! numeric_flag_value {
    ($($t:ty),*) => {$(
        impl FlagValue for $t {
            fn configure(arg: Arg) -> Arg {
                arg.value_parser(value_parser!($t)).allow_negative_numbers(true)
            }
            fn read(m: &ArgMatches, id: &str) -> Option<Self> {
                m.get_one::<$t>(id).copied()
            }
        }
    )*};
}
numeric_flag_value!(u64, usize, f64);

impl FlagValue for String {
    fn configure(arg: Arg) -> Arg {
        text_arg(arg)
    }
    fn read(m: &ArgMatches, id: &str) -> Option<Self> {
        m.get_one::<String>(id).cloned()
    }
}

impl FlagValue for ListSpec {
    fn configure(arg: Arg) -> Arg {
        text_arg(arg)
    }
    fn read(m: &ArgMatches, id: &str) -> Option<Self> {
        String::read(m, id).map(ListSpec::Text)
    }
}

impl FlagValue for bool {
    fn configure(arg: Arg) -> Arg {
        arg.value_parser(["on", "off"])
    }
    fn read(m: &ArgMatches, id: &str) -> Option<Self> {
        m.get_one::<String>(id).map(|v| v == "on")
    }
}

/// A flag read as text, whatever it starts with (`--depths=-5` reaches the
/// list parser, which names the flag in its error).
pub fn text_arg(arg: Arg) -> Arg {
    arg.value_parser(value_parser!(String)).allow_hyphen_values(true)
}

/// A text flag turned into its field by `parse`, whose error is what is
/// allowed: `invalid FIELD (--flag) = "TEXT": ALLOWED`.
pub fn read_parsed<T>(m: &ArgMatches, id: &str, parse: fn(&str) -> Result<T, &'static str>) -> Result<Option<T>, ConfigError> {
    match m.get_one::<String>(id) {
        None => Ok(None),
        Some(text) => parse(text).map(Some).map_err(|allowed| ConfigError::new(field_name(id), format!("{text:?}"), allowed)),
    }
}

/// The clap arguments of the knobs in `scope`, in table order.
pub fn args(scope: Scope) -> impl Iterator<Item = Arg> {
    ScenarioParams::flags().filter(move |f| f.scope == scope).map(Flag::arg)
}

/// The flag that sets a scenario field (`sweep.topk` → `--topk`).
pub fn flag(path: &str) -> Option<&'static str> {
    ScenarioParams::flags().find(|f| f.path == path).map(|f| f.long)
}

/// "sweep.topk (--topk)": the name errors use for a field.
pub fn field_name(path: &str) -> String {
    match flag(path) {
        Some(f) => format!("{path} ({f})"),
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! Command-line flags of the scenario knobs: what a row of the table in
//! [`super::params`] says about its flag ([`Flag`]), and how each field type
//! becomes a clap argument and is read back ([`FlagValue`]). The table
//! itself, and what needs all of its rows (the clap arguments of a command,
//! the flag of a TOML path), live in [`super::params`].

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
numeric_flag_value!(f64);

/// Whole-number flags say what is allowed (`-1`, `0.5` and `x` are not a
/// count): clap's own message, "invalid digit found in string", does not.
macro_rules! whole_flag_value {
    ($($t:ty),*) => {$(
        impl FlagValue for $t {
            fn configure(arg: Arg) -> Arg {
                let parse = |text: &str| text.trim().parse::<$t>().map_err(|_| format!("a whole number from 0 to {}, without sign or fraction", <$t>::MAX));
                arg.value_parser(parse).allow_negative_numbers(true)
            }
            fn read(m: &ArgMatches, id: &str) -> Option<Self> {
                m.get_one::<$t>(id).copied()
            }
        }
    )*};
}
whole_flag_value!(u64, usize);

impl FlagValue for String {
    fn configure(arg: Arg) -> Arg {
        text_arg(arg)
    }
    fn read(m: &ArgMatches, id: &str) -> Option<Self> {
        m.get_one::<String>(id).cloned()
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

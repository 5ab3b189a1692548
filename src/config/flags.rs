//! Command-line flags of the scenario knobs: what a row of the table in
//! [`super::params`] says about its flag ([`Flag`]), and how each field type
//! becomes a clap argument and is read back ([`FlagValue`]). The table
//! itself, and what needs all of its rows (the clap arguments of a command,
//! the flag of a TOML path), live in [`super::params`].

use clap::{value_parser, Arg, ArgAction, ArgMatches};

/// Which commands take a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every scenario command: `sweep`, `run`, `trial`, `diagnose` and
    /// `calibrate` (hidden from and refused by a command in the row's
    /// `unused_by`).
    Scenario,
    /// The grid's lists: `sweep` takes them as spelled, `run` and `trial`
    /// in the row's one-cell spelling ([`Flag::cell`]).
    Sweep,
}

/// The commands whose knob flags differ from the others': the grid's lists
/// are spelled per command, and some knobs mean nothing to a one-cell
/// command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Sweep,
    Run,
    Trial,
}

impl Command {
    pub fn name(self) -> &'static str {
        match self {
            Command::Sweep => "sweep",
            Command::Run => "run",
            Command::Trial => "trial",
        }
    }

    /// Why a knob in [`Flag::unused_by`] means nothing to this command.
    pub fn why_unused(self) -> &'static str {
        match self {
            Command::Sweep => "it runs the whole grid",
            Command::Run => "it reports one cell of one precision: no effective context, no comparison between precisions",
            Command::Trial => "it writes the tensors of one trial, --trial",
        }
    }
}

/// How one command spells a flag: its long name, value name and help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spelling {
    pub long: &'static str,
    pub value_name: &'static str,
    pub help: &'static str,
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
    /// A grid list's spelling in `run` and `trial`, which take one value
    /// (`--context` for `--contexts`); a command left out takes the list as
    /// `sweep` spells it (`trial --precisions`).
    pub cell: &'static [(Command, Spelling)],
    /// Commands that read no value from this knob: hidden from their help,
    /// and a value given is refused ([`refuse_unused`]).
    pub unused_by: &'static [Command],
    /// Sets the value parser and how values starting with `-` are taken.
    pub configure: fn(Arg) -> Arg,
}

impl Flag {
    /// How `command` spells this flag.
    pub fn spelling(&self, command: Command) -> Spelling {
        let own = Spelling { long: self.long, value_name: self.value_name, help: self.help };
        self.cell.iter().find(|(c, _)| *c == command).map_or(own, |(_, s)| *s)
    }

    /// Whether `command` reads a value from this knob.
    pub fn used_by(&self, command: Command) -> bool {
        !self.unused_by.contains(&command)
    }

    /// The clap argument, as `sweep` (and every command but `run` and
    /// `trial`) spells it.
    pub fn arg(&self) -> Arg {
        self.arg_for(Command::Sweep)
    }

    /// The clap argument as `command` spells it, hidden where the command
    /// reads no value from it.
    pub fn arg_for(&self, command: Command) -> Arg {
        let s = self.spelling(command);
        let arg = Arg::new(self.path).long(s.long.trim_start_matches('-')).value_name(s.value_name).help(s.help).action(ArgAction::Set);
        let arg = match self.heading {
            Some(heading) => arg.help_heading(heading),
            None => arg,
        };
        (self.configure)(arg).hide(!self.used_by(command))
    }

    /// "sweep.contexts (--context)": the name errors use for this knob in
    /// `command`.
    pub fn field_name(&self, command: Command) -> String {
        format!("{} ({})", self.path, self.spelling(command).long)
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
/// A knob with a fixed range says that range, as its check does
/// (`--trials -1` and `--trials 0` alike: "an integer from 1 to 10000000").
macro_rules! whole_flag_value {
    ($($t:ty),*) => {$(
        impl FlagValue for $t {
            fn configure(arg: Arg) -> Arg {
                let (lo, hi) = super::limits::whole_range(arg.get_id().as_str()).unwrap_or((0, <$t>::MAX as u64));
                let parse = move |text: &str| text.trim().parse::<$t>().map_err(|_| format!("an integer from {lo} to {hi}, without sign or fraction"));
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

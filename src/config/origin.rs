//! Where a scenario value came from, for its error: a value that fails its
//! check is blamed on the command-line flag only when the flag set it; one
//! from the `--config` file is blamed on the file, its key and line.

use super::params::ScenarioParams;
use crate::error::{ConfigError, Error};
use std::path::Path;

/// `error` about a value of the merged scenario, blamed where the value came
/// from: a scenario file's key (`FILE: line L: invalid needle.strength =
/// NaN: …`) when the file set it and `overlay` (the flags) did not; otherwise
/// as it is (a flag, a preset, or a field that is no single key).
pub fn blame(error: ConfigError, file: Option<&Path>, overlay: &ScenarioParams) -> Error {
    let Some(path) = file else { return error.into() };
    // "needle.strength (--needle-strength)" → "needle.strength".
    let key = error.field.split(" (").next().unwrap_or_default().to_string();
    if key.is_empty() || sets(overlay, &key) {
        return error.into();
    }
    let Ok(text) = crate::base::files::read_text_capped(path, crate::base::files::SCENARIO_FILE_CAP) else { return error.into() };
    let Ok(in_file) = super::params::parse_scenario_toml(&text) else { return error.into() };
    if !sets(&in_file, &key) {
        return error.into();
    }
    let at = line_of_key(&text, &key).map_or(String::new(), |line| format!("line {line}: "));
    Error::ScenarioFile { path: path.display().to_string(), message: format!("{at}invalid {key} = {}: {}", error.value, error.allowed) }
}

/// The segments of a field path: `precision[1].name` → precision, 1, name.
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn segments(path: &str) -> Option<Vec<Segment<'_>>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        match part.split_once('[') {
            Some((name, rest)) => {
                out.push(Segment::Key(name));
                out.push(Segment::Index(rest.strip_suffix(']')?.parse().ok()?));
            }
            None => out.push(Segment::Key(part)),
        }
    }
    Some(out)
}

/// Whether `params` give the field at `path` a value. (Through TOML, not
/// JSON, which writes NaN and infinities as null.)
fn sets(params: &ScenarioParams, path: &str) -> bool {
    let (Ok(mut value), Some(segments)) = (toml::Value::try_from(params), segments(path)) else { return false };
    for s in segments {
        value = match (s, value) {
            (Segment::Key(k), toml::Value::Table(mut t)) => match t.remove(k) {
                Some(v) => v,
                None => return false,
            },
            (Segment::Index(i), toml::Value::Array(mut a)) if i < a.len() => a.swap_remove(i),
            _ => return false,
        };
    }
    true
}

/// The 1-based line of the key at `path` in the TOML `text`.
fn line_of_key(text: &str, path: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut table: &dyn toml_edit::TableLike = doc.as_table();
    let mut item: Option<&toml_edit::Item> = None;
    let mut span = None;
    for s in segments(path)? {
        match s {
            Segment::Key(k) => {
                if let Some(it) = item {
                    table = it.as_table_like()?;
                }
                let (key, next) = table.get_key_value(k)?;
                span = key.span();
                item = Some(next);
            }
            Segment::Index(i) => {
                table = item?.as_array_of_tables()?.get(i)?;
                item = None;
            }
        }
    }
    Some(line_at(text, span?.start))
}

fn line_at(text: &str, byte: usize) -> usize {
    text.get(..byte).map_or(1, |before| before.matches('\n').count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_set_are_found_even_when_not_finite() {
        let p = super::super::params::parse_scenario_toml("[needle]\nstrength = nan\n[[precision]]\nname = \"a\"\n").unwrap();
        assert!(sets(&p, "needle.strength") && sets(&p, "precision[0].name"));
        assert!(!sets(&p, "needle.tokens") && !sets(&p, "precision[1].name") && !sets(&p, "sweep.contexts"));
    }

    #[test]
    fn keys_are_found_with_their_lines() {
        let text = "# a scenario\n[needle]\nstrength = nan\n\n[[precision]]\nname = \"a\"\n[[precision]]\nname = \"π8\"\n";
        assert_eq!(line_of_key(text, "needle.strength"), Some(3));
        assert_eq!(line_of_key(text, "precision[1].name"), Some(8));
        assert_eq!(line_of_key("needle.strength = 1\n", "needle.strength"), Some(1));
        assert_eq!(line_of_key("[sweep]\n", "needle.strength"), None);
    }
}

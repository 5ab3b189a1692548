//! Custom precision variants: `[[precision]]` tables of a scenario file and
//! the compact `--precision-def` form of the command line, validated into
//! [`PrecisionVariant`]s. See docs/NUMERICS.md for what each field means.

use super::params::{ListItem, PrecisionParams, PrecisionSideParams};
use crate::error::ConfigError;
use crate::numerics::format::{default_amax_floor, BlockScaling, BlockShape, ElementFormat};
use crate::numerics::pipeline::{LogitFormat, QuantPipeline, Rotation, ScoreNumerics, WeightFormat};
use crate::numerics::quantize::ScaleRule;
use crate::score::variant::PrecisionVariant;

/// The flag of the compact form, for error messages.
pub const FLAG: &str = "--precision-def";

const SCALE_NAMES: &str = "fp32, ue8m0, ue8m0-floor, e4m3";

/// The variant a `--precisions` entry names: a built-in or custom variant
/// by its exact name, else `BASE+HYPOTHESIS+…` (crate::score::hypothesis). Errors
/// name `field` and list what is known.
pub fn named_variant(field: &str, name: &str, custom: &[PrecisionVariant]) -> Result<PrecisionVariant, ConfigError> {
    let lookup = |n: &str| PrecisionVariant::builtin(n).or_else(|| custom.iter().find(|c| c.name == n).cloned());
    if let Some(v) = lookup(name) {
        return Ok(v);
    }
    let known = || {
        let mut known = PrecisionVariant::builtin_names().join(", ");
        for c in custom {
            known.push_str(", ");
            known.push_str(&c.name);
        }
        known
    };
    if !name.contains('+') {
        return Err(ConfigError::new(
            field,
            format!("{name:?}"),
            format!(
                "one of {} (or a [[precision]] defined in the scenario), optionally +HYPOTHESIS (see `dsa-recall hypotheses`)",
                known()
            ),
        ));
    }
    crate::score::hypothesis::compose(name, lookup).map_err(|why| {
        let why = if why.starts_with("unknown precision variant") { format!("{why}; known: {}", known()) } else { why };
        ConfigError::new(field, format!("{name:?}"), why)
    })
}

/// Validates custom variant `index` for vectors of `head_dim`; `earlier`
/// are the custom variants before it (for duplicate names).
pub fn custom_variant(
    index: usize,
    p: &PrecisionParams,
    head_dim: usize,
    earlier: &[PrecisionVariant],
) -> Result<PrecisionVariant, ConfigError> {
    let field = |name: &str| format!("precision[{index}].{name}");
    let name = p.name.clone().ok_or_else(|| ConfigError::new(field("name"), "(missing)", "every [[precision]] needs a name"))?;
    let name_ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c));
    if !name_ok {
        return Err(ConfigError::new(field("name"), format!("{name:?}"), "a non-empty name of letters, digits and . _ + -"));
    }
    if PrecisionVariant::builtin(&name).is_some() {
        return Err(ConfigError::new(field("name"), format!("{name:?}"), "a name that does not shadow a built-in variant"));
    }
    if let Some(j) = earlier.iter().position(|v| v.name == name) {
        return Err(ConfigError::new(field("name"), format!("{name:?}"), format!("a unique name (precision[{j}] has it already)")));
    }
    let logits = match &p.logits {
        None => LogitFormat::F32,
        Some(t) => LogitFormat::parse(t)
            .ok_or_else(|| ConfigError::new(field("logits"), format!("{t:?}"), format!("one of {}", LogitFormat::NAMES)))?,
    };
    let weights = match &p.weights {
        None => WeightFormat::F32,
        Some(t) => WeightFormat::parse(t)
            .ok_or_else(|| ConfigError::new(field("weights"), format!("{t:?}"), format!("one of {}", WeightFormat::NAMES)))?,
    };
    let default_side = PrecisionSideParams::default();
    let query = side(&field("query"), p.query.as_ref().unwrap_or(&default_side), head_dim)?;
    let key = side(&field("key"), p.key.as_ref().unwrap_or(&default_side), head_dim)?;
    Ok(PrecisionVariant::new(&name, query, key, ScoreNumerics { weights, logits, relu: true }))
}

fn side(prefix: &str, p: &PrecisionSideParams, head_dim: usize) -> Result<QuantPipeline, ConfigError> {
    let field = |name: &str| format!("{prefix}.{name}");
    let rotation = match p.rotation.as_deref().map(|t| t.trim().to_ascii_lowercase()) {
        None => Rotation::None,
        Some(t) if t == "none" => Rotation::None,
        Some(t) if t == "hadamard" => Rotation::Hadamard,
        Some(t) => return Err(ConfigError::new(field("rotation"), format!("{t:?}"), "none or hadamard")),
    };
    if rotation == Rotation::Hadamard && !head_dim.is_power_of_two() {
        return Err(ConfigError::new(
            field("rotation"),
            "\"hadamard\"",
            format!("hadamard needs a power-of-two indexer.head_dim, not {head_dim}"),
        ));
    }
    let element = match &p.element {
        None => ElementFormat::F32,
        Some(t) => t.parse::<ElementFormat>().map_err(|_| {
            ConfigError::new(field("element"), format!("{t:?}"), format!("one of {}", ElementFormat::names(&ElementFormat::ALL, ", ")))
        })?,
    };
    let shape = match &p.block {
        None => None,
        Some(ListItem::Int(b)) if *b > 0 && head_dim.is_multiple_of(*b as usize) => Some(BlockShape::Block(*b as usize)),
        Some(ListItem::Int(b)) if *b > 0 => {
            return Err(ConfigError::new(field("block"), b, format!("a block size that divides indexer.head_dim = {head_dim}")))
        }
        Some(ListItem::Text(t)) if t.trim().eq_ignore_ascii_case("row") => Some(BlockShape::Row),
        // Keys are generated and quantized a chunk at a time, so one amax over
        // the whole context does not exist when a key is quantized.
        Some(ListItem::Text(t)) if t.trim().eq_ignore_ascii_case("tensor") && prefix.ends_with(".key") => {
            return Err(ConfigError::new(
                field("block"),
                "\"tensor\"",
                "a block size or \"row\": one scale for all keys of a context is not supported yet",
            ))
        }
        Some(ListItem::Text(t)) if t.trim().eq_ignore_ascii_case("tensor") => Some(BlockShape::Tensor),
        Some(other) => {
            let shown = match other {
                ListItem::Text(t) => format!("{t:?}"),
                ListItem::Int(v) => v.to_string(),
                ListItem::Float(v) => v.to_string(),
            };
            return Err(ConfigError::new(field("block"), shown, "a positive block size (16, 32, 64, 128 …), \"row\" or \"tensor\""));
        }
    };
    let scale = match &p.scale {
        None => None,
        Some(t) => match ScaleRule::parse(t) {
            Some(ScaleRule::Scaled(s)) => Some(s),
            _ => return Err(ConfigError::new(field("scale"), format!("{t:?}"), format!("one of {SCALE_NAMES}"))),
        },
    };
    let scaling = match (shape, scale) {
        (None, None) => {
            if let Some(f) = p.amax_floor {
                return Err(ConfigError::new(field("amax_floor"), f, format!("only with {} and {}", field("block"), field("scale"))));
            }
            None
        }
        (Some(_), None) => {
            return Err(ConfigError::new(field("scale"), "(missing)", format!("a scale rule ({SCALE_NAMES}) for the block")))
        }
        (None, Some(_)) => return Err(ConfigError::new(field("block"), "(missing)", "a block size, \"row\" or \"tensor\" for the scale")),
        (Some(shape), Some(scale)) => {
            let amax_floor = match p.amax_floor {
                None => default_amax_floor(element, scale),
                Some(f) if f.is_finite() && f >= 0.0 && (f as f32).is_finite() => f as f32,
                Some(f) => return Err(ConfigError::new(field("amax_floor"), f, "a finite number ≥ 0")),
            };
            Some(BlockScaling { shape, scale, amax_floor })
        }
    };
    Ok(QuantPipeline { rotation, element, scaling })
}

/// Parses the compact form `name=N;q=SIDE;k=SIDE;logits=L;weights=W`,
/// where SIDE is `ELEMENT[/BLOCK][/SCALE][/hadamard][/floor=X]` (the parts
/// after the element in any order; BLOCK is a number, `row` or `tensor`).
/// Only the syntax is checked here; values are checked with the TOML ones.
pub fn parse_compact(text: &str) -> Result<PrecisionParams, ConfigError> {
    let bad = |why: String| ConfigError::new(FLAG, format!("{text:?}"), why);
    let mut p = PrecisionParams::default();
    for part in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = part.split_once('=').ok_or_else(|| bad(format!("{part:?} is not KEY=VALUE")))?;
        let value = value.trim().to_string();
        match key.trim() {
            "name" => p.name = Some(value),
            "logits" => p.logits = Some(value),
            "weights" => p.weights = Some(value),
            "q" | "query" => p.query = Some(parse_side(&value).map_err(bad)?),
            "k" | "key" => p.key = Some(parse_side(&value).map_err(bad)?),
            other => return Err(bad(format!("unknown key {other:?}; keys are name, q, k, logits, weights"))),
        }
    }
    Ok(p)
}

fn parse_side(text: &str) -> Result<PrecisionSideParams, String> {
    let mut parts = text.split('/').map(str::trim);
    let mut side = PrecisionSideParams { element: parts.next().filter(|e| !e.is_empty()).map(str::to_string), ..Default::default() };
    if side.element.is_none() {
        return Err(format!("{text:?} has no element format before the first /"));
    }
    for part in parts {
        let lower = part.to_ascii_lowercase();
        if let Some(floor) = lower.strip_prefix("floor=") {
            side.amax_floor = Some(floor.parse().map_err(|_| format!("{part:?} needs a number after floor="))?);
        } else if let Ok(block) = lower.parse::<i64>() {
            side.block = Some(ListItem::Int(block));
        } else if lower == "row" || lower == "tensor" {
            side.block = Some(ListItem::Text(lower));
        } else if lower == "hadamard" || lower == "none" {
            side.rotation = Some(lower);
        } else {
            side.scale = Some(part.to_string());
        }
    }
    Ok(side)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::params::parse_scenario_toml;

    fn variant(toml: &str) -> Result<PrecisionVariant, ConfigError> {
        let p = parse_scenario_toml(toml).map_err(|e| ConfigError::new("toml", e, ""))?;
        custom_variant(0, &p.precision[0], 128, &[])
    }

    #[test]
    fn toml_and_compact_forms_agree() {
        let toml = "[[precision]]\nname = \"kfp8\"\nlogits = \"bf16\"\n[precision.query]\nelement = \"bf16\"\n\
                    [precision.key]\nrotation = \"hadamard\"\nelement = \"e4m3fn\"\nblock = 128\nscale = \"ue8m0\"\n";
        let from_toml = variant(toml).unwrap();
        let compact = parse_compact("name=kfp8; q=bf16; k=e4m3fn/128/ue8m0/hadamard; logits=bf16").unwrap();
        assert_eq!(custom_variant(0, &compact, 128, &[]).unwrap(), from_toml);
        assert_eq!(from_toml.key.scaling, Some(BlockScaling::DEEPSEEK_FP8));
        assert_eq!(from_toml.query.element, ElementFormat::Bf16);
        assert_eq!(from_toml.scoring.logits, LogitFormat::Bf16);
    }

    #[test]
    fn errors_name_the_field() {
        let base = "[[precision]]\nname = \"x\"\n[precision.key]\nelement = \"e2m1\"\n";
        let cases = [
            ("[[precision]]\nlogits = \"f32\"\n", "precision[0].name"),
            ("[[precision]]\nname = \"fp8\"\n", "precision[0].name"),
            ("[[precision]]\nname = \"a,b\"\n", "precision[0].name"),
            ("[[precision]]\nname = \"x\"\nlogits = \"f8\"\n", "precision[0].logits"),
            ("[[precision]]\nname = \"x\"\nweights = \"f16\"\n", "precision[0].weights"),
            (&format!("{base}block = 48\nscale = \"ue8m0\"\n"), "precision[0].key.block"),
            (&format!("{base}block = \"col\"\nscale = \"ue8m0\"\n"), "precision[0].key.block"),
            (&format!("{base}block = 32\n"), "precision[0].key.scale"),
            (&format!("{base}scale = \"ue8m0\"\n"), "precision[0].key.block"),
            (&format!("{base}block = 32\nscale = \"none\"\n"), "precision[0].key.scale"),
            (&format!("{base}block = 32\nscale = \"ue8m0\"\namax_floor = -1.0\n"), "precision[0].key.amax_floor"),
            (&format!("{base}element = \"e3m4\"\n"), "toml"),
            ("[[precision]]\nname = \"x\"\n[precision.query]\nelement = \"e3m4\"\n", "precision[0].query.element"),
            ("[[precision]]\nname = \"x\"\n[precision.query]\nrotation = \"dct\"\n", "precision[0].query.rotation"),
        ];
        for (toml, field) in cases {
            let err = variant(toml).unwrap_err().to_string();
            assert!(err.starts_with(&format!("invalid {field}")), "{toml}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
        let p = parse_scenario_toml("[[precision]]\nname = \"x\"\n[precision.key]\nrotation = \"hadamard\"\n").unwrap();
        let err = custom_variant(0, &p.precision[0], 96, &[]).unwrap_err().to_string();
        assert!(err.contains("precision[0].key.rotation") && err.contains("power-of-two"), "{err}");
        let first = custom_variant(0, &p.precision[0], 128, &[]).unwrap();
        let err = custom_variant(1, &p.precision[0], 128, &[first]).unwrap_err().to_string();
        assert!(err.contains("precision[1].name") && err.contains("precision[0]"), "{err}");
    }

    #[test]
    fn compact_syntax_errors() {
        for text in ["name", "name=x;z=1", "name=x;k=/128", "name=x;k=e2m1/32/floor=abc"] {
            let err = parse_compact(text).unwrap_err().to_string();
            assert!(err.starts_with("invalid --precision-def = "), "{err}");
        }
    }

    #[test]
    fn default_amax_floors_follow_the_reference_rules() {
        let v = variant("[[precision]]\nname = \"x\"\n[precision.key]\nelement = \"e2m1\"\nblock = 32\nscale = \"ue8m0\"\n").unwrap();
        assert_eq!(v.key.scaling, Some(BlockScaling::DEEPSEEK_FP4));
    }
}

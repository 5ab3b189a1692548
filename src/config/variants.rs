//! The checks of `sweep.precisions`: the variants named, built-in or
//! custom, and what each one's faults need from the rest of the scenario.

use super::lists;
use super::params::{self, field_name, ListSpec};
use super::precision;
use super::values::{require, whole_in};
use crate::error::ConfigError;
use crate::model::physics::RopeChoice;
use crate::model::stack::{LayerKind, WholeModel};
use crate::score::variant::PrecisionVariant;

/// `[[precision]]` definitions, then `sweep.precisions` naming built-in or
/// custom variants (duplicates dropped).
pub(super) fn check_precisions(
    defs: &[params::PrecisionParams],
    list: Option<&ListSpec>,
    head_dim: usize,
    rope: RopeChoice,
) -> Result<Vec<PrecisionVariant>, ConfigError> {
    let mut custom: Vec<PrecisionVariant> = Vec::new();
    for (i, def) in defs.iter().enumerate() {
        let v = precision::custom_variant(i, def, head_dim, &custom)?;
        custom.push(v);
    }
    let precision_spec = require(list, "sweep.precisions")?;
    let names = lists::parse_names(&field_name("sweep.precisions"), &precision_spec.to_text())?;
    let mut precisions: Vec<PrecisionVariant> = Vec::new();
    for name in names {
        if name == "all" {
            // Every built-in, then every custom variant, in definition order;
            // those that cannot run at this head_dim are left out, not refused.
            let every = PrecisionVariant::builtin_names().into_iter().map(String::from).chain(custom.iter().map(|v| v.name.clone()));
            for name in every {
                let v = precision::named_variant(&field_name("sweep.precisions"), &name, &custom)?;
                if v.unsupported(head_dim).is_none() && !precisions.iter().any(|p| p.name == v.name) {
                    precisions.push(v);
                }
            }
            continue;
        }
        let v = precision::named_variant(&field_name("sweep.precisions"), &name, &custom)?;
        if let Some(reason) = v.unsupported(head_dim) {
            return Err(ConfigError::new(
                field_name("sweep.precisions"),
                format!("{name:?}"),
                format!("not with indexer.head_dim = {head_dim}: {reason}"),
            ));
        }
        if !precisions.iter().any(|p| p.name == v.name) {
            precisions.push(v);
        }
    }

    if rope == RopeChoice::Off {
        if let Some(v) = precisions.iter().find(|v| v.position != crate::score::variant::PositionOverride::default()) {
            return Err(ConfigError::new(
                field_name("sweep.precisions"),
                format!("{:?}", v.name),
                "rope-swap-q / rope-swap-k only with physics.rope (--rope) v3.2 or v4: without RoPE there is no layout to swap",
            ));
        }
    }
    Ok(precisions)
}

/// Variants whose faults act in some layers only (`layers=…`,
/// `layer-share=F`) need the whole-model stack, the quantile needle's
/// per-layer draws, and layers that exist.
pub(super) fn check_layer_subsets(
    precisions: &[PrecisionVariant],
    stack: Option<&WholeModel>,
    unit: &crate::model::needle::NeedleUnit,
) -> Result<(), ConfigError> {
    for v in precisions.iter().filter(|v| !v.layers.is_all()) {
        let refuse = |why: String| ConfigError::new(field_name("sweep.precisions"), format!("{:?}", v.name), why);
        if !v.address.is_none() {
            // The table, slots or workspace are the deployment's, shared by every layer.
            return Err(refuse("an address fault acts in every layer; not with layers=SET or layer-share=F".into()));
        }
        if !v.chunk.is_all() {
            // The whole-model estimate reads a needle with no visible row as
            // absent in every layer, so a partial chunk fault would be read
            // as a total one.
            return Err(refuse("a chunk fault (chunk-local) acts in every layer; not with layers=SET or layer-share=F".into()));
        }
        let Some(stack) = stack else {
            return Err(refuse("a fault in some layers needs the whole-model stack ([stack], --compress-ratios)".into()));
        };
        if unit.is_strength() {
            return Err(refuse(
                "a fault in some layers needs the quantile needle (its per-layer draws); not with needle.unit = \"strength\"".into(),
            ));
        }
        if let Some(why) = v.layers.unsupported(stack.indexed_layers()) {
            return Err(refuse(why));
        }
        if v.layers == crate::score::variant::LayerSubset::Reusers && stack.count(LayerKind::Reused) == 0 {
            return Err(refuse("layers=reusers needs a plan with layers that reuse a selection (s, sN in stack.layers)".into()));
        }
    }
    Ok(())
}

/// Variants whose faults act only in longer prompts (`longer-than=T`)
/// take their base's outcomes in shorter ones: the base must be in the
/// sweep, with the same needle.
pub(super) fn check_length_gates(precisions: &[PrecisionVariant]) -> Result<(), ConfigError> {
    for v in precisions.iter().filter(|v| v.longer_than > 0) {
        let refuse = |why: String| ConfigError::new(field_name("sweep.precisions"), format!("{:?}", v.name), why);
        if v.needle_multiple != 1.0 {
            return Err(refuse("longer-than=T not with needle=M (its base would need the same needle)".into()));
        }
        let base = v.base_name();
        if !precisions.iter().any(|p| p.name == base) {
            return Err(refuse(format!("longer-than=T runs its base in shorter prompts: add {base} to --precisions")));
        }
    }
    Ok(())
}

/// Variants with another needle (`needle=M`) need the quantile needle, and
/// M times its median exceedance must stay a share below 1.
pub(super) fn check_needle_multiples(precisions: &[PrecisionVariant], unit: &crate::model::needle::NeedleUnit) -> Result<(), ConfigError> {
    for v in precisions.iter().filter(|v| v.needle_multiple != 1.0) {
        let refuse = |why: String| ConfigError::new(field_name("sweep.precisions"), format!("{:?}", v.name), why);
        let Some(q) = unit.quantile() else {
            return Err(refuse("needle=M scales the quantile needle's median exceedance; not with needle.unit = \"strength\"".into()));
        };
        if q.exceedance * v.needle_multiple >= 1.0 {
            return Err(refuse(format!(
                "needle=M with M below {} (M times the median exceedance {:e} must stay below 1)",
                1.0 / q.exceedance,
                q.exceedance
            )));
        }
    }
    Ok(())
}

/// `[geometry] prefill_chunk` (0 when left out), which a chunk fault
/// (`chunk-local`) needs: without it the fault has no boundary to act at.
pub(super) fn check_prefill_chunk(p: &params::GeometryParams, precisions: &[PrecisionVariant]) -> Result<u64, ConfigError> {
    let chunk = whole_in(p.prefill_chunk.unwrap_or(0), "geometry.prefill_chunk")?;
    if chunk == 0 {
        if let Some(v) = precisions.iter().find(|v| !v.chunk.is_all() || v.address.needs_chunk()) {
            return Err(ConfigError::new(
                field_name("sweep.precisions"),
                format!("{:?}", v.name),
                "a chunk fault needs a prefill chunk: give geometry.prefill_chunk (--prefill-chunk N, N ≥ 1 tokens)",
            ));
        }
    }
    Ok(chunk)
}

//! `calibrate --checkpoint`: the weight-only statistics of the lightning
//! indexer that fix (or bound) the model's knobs, written as a scenario TOML
//! with a comment per value. Definitions and sources: docs/CALIBRATION.md
//! "Calibrating from a checkpoint".

use super::checkpoint::Checkpoint;
use crate::config;
use crate::error::Error;
use rayon::prelude::*;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The checkpoint's tensor names, in one place so a wrong one is easy to
/// correct. A layer's tensors are `{prefix}{suffix}`, the prefix being
/// `model.layers.{i}.self_attn.` (V3.2) or `layers.{i}.attn.` (V4, with or
/// without `model.`), found by looking for [`WQ_B`].
pub mod names {
    /// Indexer query map, `[heads · head_dim, q_lora_rank]` (FP8 in both).
    pub const WQ_B: &str = "indexer.wq_b.weight";
    /// Per-head weight projection, `[heads, dim]` (BF16).
    pub const WEIGHTS_PROJ: &str = "indexer.weights_proj.weight";
    /// V3.2 key LayerNorm weight and bias, `[head_dim]` (F32).
    pub const K_NORM_WEIGHT: &str = "indexer.k_norm.weight";
    pub const K_NORM_BIAS: &str = "indexer.k_norm.bias";
    /// V4 indexer compressor's gate bias, `[ratio, 2 · head_dim]` (F32).
    pub const APE: &str = "indexer.compressor.ape";
    /// V4 indexer compressor's RMSNorm weight, `[head_dim]` (BF16).
    pub const COMPRESSOR_NORM: &str = "indexer.compressor.norm.weight";
}

/// Indexer head width in V3.2 and V4.
pub const HEAD_DIM: usize = 128;
/// Rotary dims per head: the first 64 in V3.2, the last 64 in V4.
pub const ROPE_DIMS: usize = 64;
/// V4's CSA compression ratio (the indexer exists only in ratio-4 layers).
pub const CSA_RATIO: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V32,
    V4,
}

/// One statistic: its value across layers (mean or pooled) and per-layer
/// extremes.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    pub value: f64,
    pub min: f64,
    pub max: f64,
}

fn summarise(per_layer: &[f64], pooled: f64) -> Stat {
    let min = per_layer.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = per_layer.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    Stat { value: pooled, min, max }
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// What the weights say.
#[derive(Clone, Debug)]
pub struct Calibration {
    pub family: Family,
    pub preset: String,
    /// Layer number and tensor prefix of every indexer layer, in order.
    pub layers: Vec<(usize, String)>,
    pub heads: usize,
    pub q_lora_rank: usize,
    /// √(mean over layers of the within-channel variance of `ape`) (V4).
    pub gate_bias_std: Option<Stat>,
    /// √(mean over layers of Var_j ln|γ_j|).
    pub norm_weight_spread: Option<Stat>,
    /// Mean over layers of ‖β‖/‖γ‖ (V3.2).
    pub norm_bias: Option<Stat>,
    /// Mean over head pairs and layers of cos(W_h, W_g) (Frobenius), all dims.
    pub head_cosine: Stat,
    /// The same, of |cos|.
    pub head_abs_cosine: Stat,
    /// The same on the rope-free dims only.
    pub head_cosine_nope: Stat,
    /// Mean over heads and layers of ‖W_h[rope rows]‖² / ‖W_h‖²; min and
    /// max over single heads.
    pub rope_energy_share: Stat,
    /// Coefficient of variation of `weights_proj` row norms across heads,
    /// mean over layers.
    pub weights_row_norm_cv: Stat,
}

/// Finds the indexer layers: every `…layers.{i}.{self_attn|attn}.` prefix
/// that has a [`names::WQ_B`].
fn find_layers(ck: &Checkpoint) -> Result<Vec<(usize, String)>, Error> {
    let mut layers = Vec::new();
    for name in ck.names() {
        let Some(prefix) = name.strip_suffix(names::WQ_B) else { continue };
        let rest = prefix.strip_prefix("model.").unwrap_or(prefix);
        let parsed = rest
            .strip_prefix("layers.")
            .and_then(|r| r.split_once('.'))
            .and_then(|(i, tail)| Some((i.parse::<usize>().ok()?, tail)))
            .filter(|(_, tail)| *tail == "self_attn." || *tail == "attn.");
        if let Some((i, _)) = parsed {
            layers.push((i, prefix.to_string()));
        }
    }
    layers.sort();
    if layers.is_empty() {
        return Err(Error::Input {
            location: "checkpoint".into(),
            message: format!(
                "no indexer layer found: no tensor named layers.{{i}}.attn.{} or model.layers.{{i}}.self_attn.{}",
                names::WQ_B,
                names::WQ_B
            ),
        });
    }
    Ok(layers)
}

fn tensor_error(ck: &Checkpoint, name: &str, message: String) -> Error {
    Error::Input {
        location: format!("{}: tensor {name}", ck.file_of(name).map_or("checkpoint".into(), |p| p.display().to_string())),
        message,
    }
}

/// Within-channel spread of one layer's `ape` `[ratio, 2d]`: for channel c
/// the 2·ratio gates (previous half `[.., c]`, current half `[.., d + c]`)
/// share one softmax, so a per-channel constant does not matter; returns the
/// pooled variance Σ_c Σ_j (g − ḡ_c)² / (d · (2·ratio − 1)).
pub fn ape_within_channel_variance(ape: &[f32], ratio: usize, d: usize) -> f64 {
    let n = 2 * ratio;
    let mut ss = 0.0;
    for c in 0..d {
        let vals: Vec<f64> = (0..ratio).flat_map(|s| [ape[s * 2 * d + c] as f64, ape[s * 2 * d + d + c] as f64]).collect();
        let m = vals.iter().sum::<f64>() / n as f64;
        ss += vals.iter().map(|v| (v - m) * (v - m)).sum::<f64>();
    }
    ss / (d * (n - 1)) as f64
}

/// Sample variance (n − 1) of ln|γ_j|; channels with γ = 0 are refused by the caller.
fn log_variance(gamma: &[f32]) -> f64 {
    let logs: Vec<f64> = gamma.iter().map(|g| (g.abs() as f64).ln()).collect();
    let m = mean(&logs);
    logs.iter().map(|l| (l - m) * (l - m)).sum::<f64>() / (logs.len() - 1) as f64
}

fn norm(xs: &[f32]) -> f64 {
    xs.iter().map(|x| (*x as f64) * (*x as f64)).sum::<f64>().sqrt()
}

/// Per-layer head geometry of `wq_b` `[h·d, r]`: (mean cos, mean |cos|,
/// mean cos on rope-free dims, per-head rope energy shares).
fn head_geometry(w: &[f32], heads: usize, r: usize, rope: std::ops::Range<usize>) -> (f64, f64, f64, Vec<f64>) {
    let d = HEAD_DIM;
    // Gram matrices of the heads' blocks, split into rope and rope-free
    // rows; one head's row of each per task (each sum in a fixed order, so
    // the result does not depend on the thread count).
    let block = |h: usize, i: usize| &w[(h * d + i) * r..(h * d + i + 1) * r];
    let rows: Vec<Vec<(f64, f64)>> = (0..heads)
        .into_par_iter()
        .map(|h| {
            (h..heads)
                .map(|k| {
                    let (mut rp, mut np) = (0.0f64, 0.0f64);
                    for i in 0..d {
                        let dot: f64 = block(h, i).iter().zip(block(k, i)).map(|(x, y)| *x as f64 * *y as f64).sum();
                        if rope.contains(&i) {
                            rp += dot;
                        } else {
                            np += dot;
                        }
                    }
                    (rp, np)
                })
                .collect()
        })
        .collect();
    let mut g_rope = vec![0.0f64; heads * heads];
    let mut g_nope = vec![0.0f64; heads * heads];
    for (h, row) in rows.iter().enumerate() {
        for (j, (rp, np)) in row.iter().enumerate() {
            g_rope[h * heads + h + j] = *rp;
            g_nope[h * heads + h + j] = *np;
        }
    }
    let (mut cos, mut abs, mut nope, mut pairs) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for h in 0..heads {
        for k in h + 1..heads {
            let all = |g: &[f64], a: usize, b: usize| g[a * heads + b];
            let num = all(&g_rope, h, k) + all(&g_nope, h, k);
            let den = ((all(&g_rope, h, h) + all(&g_nope, h, h)) * (all(&g_rope, k, k) + all(&g_nope, k, k))).sqrt();
            let c = if den > 0.0 { num / den } else { 0.0 };
            let dn = (all(&g_nope, h, h) * all(&g_nope, k, k)).sqrt();
            cos += c;
            abs += c.abs();
            nope += if dn > 0.0 { all(&g_nope, h, k) / dn } else { 0.0 };
            pairs += 1.0;
        }
    }
    let shares = (0..heads)
        .map(|h| {
            let total = g_rope[h * heads + h] + g_nope[h * heads + h];
            if total > 0.0 {
                g_rope[h * heads + h] / total
            } else {
                0.0
            }
        })
        .collect();
    let p = pairs.max(1.0);
    (cos / p, abs / p, nope / p, shares)
}

/// Reads the indexer tensors of every layer and computes the statistics.
/// `preset` defaults to the family's: deepseek-v3.2, or deepseek-v4-flash
/// (q_lora_rank 1024) / deepseek-v4-pro (1536).
pub fn calibrate_checkpoint(inputs: &[PathBuf], preset: Option<&str>) -> Result<Calibration, Error> {
    let ck = Checkpoint::open(inputs)?;
    let layers = find_layers(&ck)?;
    let has = |p: &str, s: &str| ck.contains(&format!("{p}{s}"));
    let (_, first) = &layers[0];
    let family = if has(first, names::K_NORM_WEIGHT) { Family::V32 } else { Family::V4 };
    // Every layer must carry its family's tensors; a missing one is named.
    let required: &[&str] = match family {
        Family::V32 => &[names::WEIGHTS_PROJ, names::K_NORM_WEIGHT, names::K_NORM_BIAS],
        Family::V4 => &[names::WEIGHTS_PROJ, names::APE, names::COMPRESSOR_NORM],
    };
    for (_, p) in &layers {
        for s in required {
            if !has(p, s) {
                let file = ck.file_of(&format!("{p}{}", names::WQ_B)).map(|f| f.display().to_string()).unwrap_or_default();
                return Err(Error::Input {
                    location: format!("{file}: tensor {p}{s}"),
                    message: format!("missing: every {} indexer layer needs it", if family == Family::V32 { "V3.2" } else { "V4" }),
                });
            }
        }
    }

    let d = HEAD_DIM;
    let (heads, rank) = {
        let (shape, _) = ck.info(&format!("{first}{}", names::WEIGHTS_PROJ))?;
        let (wq, _) = ck.info(&format!("{first}{}", names::WQ_B))?;
        (shape.first().copied().unwrap_or(0), wq.get(1).copied().unwrap_or(0))
    };
    if heads < 2 {
        let n = format!("{first}{}", names::WEIGHTS_PROJ);
        return Err(tensor_error(&ck, &n, format!("{heads} heads: at least 2 needed")));
    }
    let rope = match family {
        Family::V32 => 0..ROPE_DIMS,
        Family::V4 => d - ROPE_DIMS..d,
    };

    let (mut ape_var, mut gamma_var, mut bias_ratio) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cos, mut abs, mut nope, mut shares, mut layer_share, mut cv) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (_, p) in &layers {
        let n = |s: &str| format!("{p}{s}");
        let (w, _, _) = ck.read_weight(&n(names::WQ_B), Some(heads * d), Some(rank))?;
        // A head of zeros has no direction: the cosines between heads, and
        // every statistic below, would be made up.
        if let Some(h) = (0..heads).find(|h| w[h * d * rank..(h + 1) * d * rank].iter().all(|x| *x == 0.0)) {
            return Err(tensor_error(&ck, &n(names::WQ_B), format!("head {h} is all zeros: a trained projection has no zero head")));
        }
        let (c, a, np, s) = head_geometry(&w, heads, rank, rope.clone());
        cos.push(c);
        abs.push(a);
        nope.push(np);
        layer_share.push(mean(&s));
        shares.extend(s);

        let (wp, _, cols) = ck.read_weight(&n(names::WEIGHTS_PROJ), Some(heads), None)?;
        let norms: Vec<f64> = (0..heads).map(|h| norm(&wp[h * cols..(h + 1) * cols])).collect();
        let m = mean(&norms);
        let sd = (norms.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (heads - 1) as f64).sqrt();
        cv.push(if m > 0.0 { sd / m } else { 0.0 });

        let gamma_name = n(if family == Family::V32 { names::K_NORM_WEIGHT } else { names::COMPRESSOR_NORM });
        let (gamma, _) = ck.read_raw(&gamma_name, &[Some(d)])?;
        if gamma.contains(&0.0) {
            return Err(tensor_error(&ck, &gamma_name, "has a channel with weight 0: ln γ is undefined".into()));
        }
        gamma_var.push(log_variance(&gamma));
        match family {
            Family::V32 => {
                let (beta, _) = ck.read_raw(&n(names::K_NORM_BIAS), &[Some(d)])?;
                bias_ratio.push(norm(&beta) / norm(&gamma));
            }
            Family::V4 => {
                let (ape, _) = ck.read_raw(&n(names::APE), &[Some(CSA_RATIO), Some(2 * d)])?;
                ape_var.push(ape_within_channel_variance(&ape, CSA_RATIO, d));
            }
        }
    }
    let sqrt_all = |v: &[f64]| v.iter().map(|x| x.sqrt()).collect::<Vec<_>>();
    let share_stat = Stat {
        value: mean(&layer_share),
        min: shares.iter().cloned().fold(f64::INFINITY, f64::min),
        max: shares.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    };
    let preset = match preset {
        Some(p) => p.to_string(),
        None => match (family, rank) {
            (Family::V32, _) => "deepseek-v3.2".into(),
            (Family::V4, 1536) => "deepseek-v4-pro".into(),
            (Family::V4, _) => "deepseek-v4-flash".into(),
        },
    };
    Ok(Calibration {
        family,
        preset,
        heads,
        q_lora_rank: rank,
        gate_bias_std: (!ape_var.is_empty()).then(|| summarise(&sqrt_all(&ape_var), mean(&ape_var).sqrt())),
        norm_weight_spread: Some(summarise(&sqrt_all(&gamma_var), mean(&gamma_var).sqrt())),
        norm_bias: (!bias_ratio.is_empty()).then(|| summarise(&bias_ratio, mean(&bias_ratio))),
        head_cosine: summarise(&cos, mean(&cos)),
        head_abs_cosine: summarise(&abs, mean(&abs)),
        head_cosine_nope: summarise(&nope, mean(&nope)),
        rope_energy_share: share_stat,
        weights_row_norm_cv: summarise(&cv, mean(&cv)),
        layers,
    })
}

fn f(x: f64) -> String {
    format!("{x:.4}")
}

fn range(s: &Stat) -> String {
    format!("per layer {} … {}", f(s.min), f(s.max))
}

impl Calibration {
    fn layer_list(&self) -> String {
        let nums: Vec<String> = self.layers.iter().map(|(i, _)| i.to_string()).collect();
        format!("{} layer(s): {}", nums.len(), nums.join(", "))
    }

    /// The tensor name pattern, with `{i}` for the layer.
    fn pattern(&self, suffix: &str) -> String {
        let (i, p) = &self.layers[0];
        format!("{}{suffix}", p.replacen(&format!("layers.{i}."), "layers.{i}.", 1))
    }

    /// The scenario TOML: written knobs with a comment each, then the
    /// statistics that are only reported (commented out).
    pub fn to_toml(&self) -> String {
        let mut t = String::new();
        let fam = if self.family == Family::V32 { "DeepSeek-V3.2 (token-level indexer)" } else { "DeepSeek-V4 (CSA indexer)" };
        let _ = writeln!(t, "# Written by `dsa-recall calibrate --checkpoint` from the weights alone (docs/CALIBRATION.md,");
        let _ = writeln!(t, "# \"Calibrating from a checkpoint\"). Model: {fam}; {} heads, q_lora_rank {};", self.heads, self.q_lora_rank);
        let _ = writeln!(t, "# indexer {}.", self.layer_list());
        let _ = writeln!(t, "# Tensor names were checked against public reference code, not against a downloaded checkpoint.");
        let _ = writeln!(t, "preset = \"{}\"", self.preset);
        let _ = writeln!(t, "\n[physics]");
        if let Some(s) = &self.gate_bias_std {
            let _ = writeln!(
                t,
                "# {} (F32 [{CSA_RATIO}, {}]): per channel, the spread of its 8 gate biases",
                self.pattern(names::APE),
                2 * HEAD_DIM
            );
            let _ = writeln!(t, "# (4 slots x previous/current half) around their own mean, pooled over channels and layers");
            let _ = writeln!(t, "# as sqrt(mean variance); {}", range(s));
            let _ = writeln!(t, "gate_bias_std = {}", f(s.value));
        }
        if let Some(s) = &self.norm_weight_spread {
            let src = if self.family == Family::V32 { names::K_NORM_WEIGHT } else { names::COMPRESSOR_NORM };
            let _ = writeln!(
                t,
                "# {} ([{HEAD_DIM}]): SD of ln|gamma| over channels, sqrt(mean variance) over layers; {}",
                self.pattern(src),
                range(s)
            );
            let line = format!("norm_weight_spread = {}", f(s.value));
            let _ = writeln!(t, "{}", if s.value <= 3.0 { line } else { format!("# beyond the knob's 0 ... 3: {line}") });
        }
        if let Some(s) = &self.norm_bias {
            let _ = writeln!(
                t,
                "# {} / {}: ||beta|| / ||gamma||, mean over layers; {}",
                self.pattern(names::K_NORM_BIAS),
                names::K_NORM_WEIGHT,
                range(s)
            );
            let line = format!("norm_bias = {}", f(s.value));
            let _ = writeln!(t, "{}", if s.value <= 10.0 { line } else { format!("# beyond the knob's 0 ... 10: {line}") });
        }
        let wq = self.pattern(names::WQ_B);
        let rope = if self.family == Family::V32 { "first" } else { "last" };
        let _ = writeln!(t, "\n# Reported, not written (no knob they set directly):");
        let _ = writeln!(
            t,
            "# {wq}, head geometry: mean cos(W_h, W_g) over head pairs = {} ({}), mean |cos| = {}, on the rope-free dims = {};",
            f(self.head_cosine.value),
            range(&self.head_cosine),
            f(self.head_abs_cosine.value),
            f(self.head_cosine_nope.value)
        );
        let _ = writeln!(t, "#   needle.head_coherence is the correlation of the *looking* heads' queries, which the weights do not name.");
        let _ = writeln!(
            t,
            "# {wq}, share of each head's row energy in its rotary dims ({rope} {ROPE_DIMS} of {HEAD_DIM}): mean {}, heads {} … {};",
            f(self.rope_energy_share.value),
            f(self.rope_energy_share.min),
            f(self.rope_energy_share.max)
        );
        let _ = writeln!(t, "#   an upper bound for needle.rope_share only if the needle's match spreads like the query's energy.");
        let _ = writeln!(
            t,
            "# {}: coefficient of variation of row norms across heads = {} ({}); indexer.weight_std/weight_mean",
            self.pattern(names::WEIGHTS_PROJ),
            f(self.weights_row_norm_cv.value),
            range(&self.weights_row_norm_cv)
        );
        let _ = writeln!(t, "#   describe w_h over tokens, which needs activations: not set.");
        t
    }
}

/// Computes, checks that the scenario loads, and writes it to `out`
/// (through a temporary file, so a failure leaves nothing behind).
pub fn run_calibrate(inputs: &[PathBuf], preset: Option<&str>, out: &std::path::Path) -> Result<String, Error> {
    let cal = calibrate_checkpoint(inputs, preset)?;
    let text = cal.to_toml();
    let params = config::params::parse_scenario_toml(&text).map_err(|m| Error::ScenarioFile {
        path: out.display().to_string(),
        message: format!("calibrated scenario does not parse: {m}"),
    })?;
    config::check(config::resolve(params)?)?;
    crate::base::files::write_file(out, text.as_bytes())?;
    Ok(text)
}

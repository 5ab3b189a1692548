//! `calibrate --checkpoint` (issue 18, item 1) on synthetic shards with the
//! real tensor names, dtypes and shapes (64 heads × 128 dims; a small
//! q_lora_rank and model width to keep them small): V4 split over two shards
//! with an index JSON and FP8 wq_b with ue8m0 block scales, V3.2 in one
//! shard with F32 `weight_scale_inv`. Statistics are checked against values
//! computed here from the planted tensors, and against the planted spreads.

use assert_cmd::Command;
use dsa_recall::config;
use dsa_recall::numerics::format::{ElementFormat, Overflow};
use dsa_recall::tensors::calibrate::{calibrate_checkpoint, run_calibrate, Family};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

const H: usize = 64;
const D: usize = 128;
const RANK: usize = 32;
const DIM: usize = 64;
const COHERENCE: f64 = 0.5;
const ROPE_SCALE: f32 = 0.5;
const GATE_SD: f64 = 0.7;
const LOG_GAMMA_SD: f64 = 0.4;
const BIAS_RATIO: f64 = 0.25;

fn bin() -> Command {
    Command::cargo_bin("dsa-recall").unwrap()
}

type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    rng.sample::<f64, _>(StandardNormal)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// bf16 bytes and the values they hold.
fn bf16(v: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let codes: Vec<u16> = v.iter().map(|x| ElementFormat::Bf16.encode(*x, Overflow::Cast) as u16).collect();
    (codes.iter().flat_map(|c| c.to_le_bytes()).collect(), codes.iter().map(|c| ElementFormat::Bf16.decode(*c as u32)).collect())
}

/// FP8 e4m3 codes with one power-of-two scale per 128 × 128 block (the
/// DeepSeek rule), and the dequantized values they hold.
fn fp8_blocks(w: &[f32], rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
    let (br, bc) = (rows.div_ceil(128), cols.div_ceil(128));
    let mut scales = vec![0f32; br * bc];
    for i in 0..rows {
        for j in 0..cols {
            let s = &mut scales[(i / 128) * bc + j / 128];
            *s = s.max(w[i * cols + j].abs());
        }
    }
    for s in &mut scales {
        *s = 2f32.powi((*s / 448.0).log2().ceil() as i32);
    }
    let mut codes = vec![0u8; rows * cols];
    let mut deq = vec![0f32; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            let s = scales[(i / 128) * bc + j / 128];
            let c = ElementFormat::E4m3fn.encode(w[i * cols + j] / s, Overflow::Saturate) as u8;
            codes[i * cols + j] = c;
            deq[i * cols + j] = ElementFormat::E4m3fn.decode(c as u32) * s;
        }
    }
    (codes, scales, deq)
}

/// The planted query map: W_h = √c·A + √(1 − c)·B_h, rotary rows scaled.
fn planted_wq_b(rng: &mut ChaCha8Rng, rope: std::ops::Range<usize>) -> Vec<f32> {
    let a: Vec<f64> = (0..D * RANK).map(|_| normal(rng)).collect();
    let mut w = vec![0f32; H * D * RANK];
    for h in 0..H {
        for i in 0..D {
            for k in 0..RANK {
                let v = COHERENCE.sqrt() * a[i * RANK + k] + (1.0 - COHERENCE).sqrt() * normal(rng);
                w[(h * D + i) * RANK + k] = v as f32 * if rope.contains(&i) { ROPE_SCALE } else { 1.0 };
            }
        }
    }
    w
}

/// What the statistics must be, computed here from the stored values.
#[derive(Default)]
struct Expected {
    ape_var: Vec<f64>,
    log_gamma_var: Vec<f64>,
    bias_ratio: Vec<f64>,
    cos: Vec<f64>,
    rope_share: Vec<f64>,
}

fn sample_var(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let s: f64 = xs.iter().sum();
    let s2: f64 = xs.iter().map(|x| x * x).sum();
    (s2 - s * s / n) / (n - 1.0)
}

fn expect_geometry(e: &mut Expected, w: &[f32], rope: std::ops::Range<usize>) {
    let block = |h: usize| &w[h * D * RANK..(h + 1) * D * RANK];
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum::<f64>();
    let mut sum = 0.0;
    for h in 0..H {
        for g in h + 1..H {
            sum += dot(block(h), block(g)) / (dot(block(h), block(h)) * dot(block(g), block(g))).sqrt();
        }
        let rows = &block(h)[rope.start * RANK..rope.end * RANK];
        e.rope_share.push(dot(rows, rows) / dot(block(h), block(h)));
    }
    e.cos.push(sum / (H * (H - 1) / 2) as f64);
}

fn write_shard(path: &Path, tensors: &Tensors) {
    let views: Vec<(String, TensorView)> =
        tensors.iter().map(|(n, (dt, shape, bytes))| (n.clone(), TensorView::new(*dt, shape.clone(), bytes).unwrap())).collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn weights_proj(rng: &mut ChaCha8Rng) -> (Dtype, Vec<usize>, Vec<u8>) {
    let v: Vec<f32> = (0..H * DIM).map(|_| normal(rng) as f32 * 0.05).collect();
    (Dtype::BF16, vec![H, DIM], bf16(&v).0)
}

/// V4: layers 2, 4 in shard 1, layer 6 in shard 2, with an index JSON.
fn v4_checkpoint(dir: &Path) -> (PathBuf, Expected) {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut e = Expected::default();
    let mut shards = [Tensors::new(), Tensors::new()];
    for (n, layer) in [2usize, 4, 6].into_iter().enumerate() {
        let p = format!("layers.{layer}.attn.indexer.");
        let t = &mut shards[n / 2];
        let w = planted_wq_b(&mut rng, D - 64..D);
        let (codes, scales, deq) = fp8_blocks(&w, H * D, RANK);
        expect_geometry(&mut e, &deq, D - 64..D);
        let e8m0: Vec<u8> = scales.iter().map(|s| (s.log2() as i32 + 127) as u8).collect();
        t.insert(format!("{p}wq_b.weight"), (Dtype::F8_E4M3, vec![H * D, RANK], codes));
        t.insert(format!("{p}wq_b.scale"), (Dtype::F8_E8M0, vec![H * D / 128, 1], e8m0));
        t.insert(format!("{p}weights_proj.weight"), weights_proj(&mut rng));
        // Gate bias: a large per-channel offset (no effect on the softmax) plus the planted spread.
        let offset: Vec<f64> = (0..D).map(|_| 3.0 * normal(&mut rng)).collect();
        let ape: Vec<f32> = (0..4 * 2 * D).map(|k| (offset[k % D] + GATE_SD * normal(&mut rng)) as f32).collect();
        let per_channel: f64 = (0..D)
            .map(|c| {
                let v: Vec<f64> = (0..4).flat_map(|s| [ape[s * 2 * D + c] as f64, ape[s * 2 * D + D + c] as f64]).collect();
                sample_var(&v)
            })
            .sum();
        e.ape_var.push(per_channel / D as f64);
        t.insert(format!("{p}compressor.ape"), (Dtype::F32, vec![4, 2 * D], f32_bytes(&ape)));
        let gamma: Vec<f32> = (0..D).map(|_| (1.5 * (LOG_GAMMA_SD * normal(&mut rng)).exp()) as f32).collect();
        let (bytes, stored) = bf16(&gamma);
        e.log_gamma_var.push(sample_var(&stored.iter().map(|g| (*g as f64).ln()).collect::<Vec<_>>()));
        t.insert(format!("{p}compressor.norm.weight"), (Dtype::BF16, vec![D], bytes));
        // A tensor the calibration does not read, as in a real shard.
        t.insert(format!("layers.{layer}.attn.wkv.weight"), (Dtype::BF16, vec![4, DIM], vec![0; 4 * DIM * 2]));
    }
    let files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
    let mut map = serde_json::Map::new();
    for (t, f) in shards.iter().zip(files) {
        write_shard(&dir.join(f), t);
        for name in t.keys() {
            map.insert(name.clone(), f.into());
        }
    }
    let index = dir.join("model.safetensors.index.json");
    std::fs::write(&index, serde_json::json!({"metadata": {}, "weight_map": map}).to_string()).unwrap();
    (index, e)
}

/// V3.2: layers 0 and 1 in one shard.
fn v32_checkpoint(dir: &Path) -> (PathBuf, Expected) {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut e = Expected::default();
    let mut t = Tensors::new();
    for layer in 0..2 {
        let p = format!("model.layers.{layer}.self_attn.indexer.");
        let w = planted_wq_b(&mut rng, 0..64);
        let (codes, scales, deq) = fp8_blocks(&w, H * D, RANK);
        expect_geometry(&mut e, &deq, 0..64);
        t.insert(format!("{p}wq_b.weight"), (Dtype::F8_E4M3, vec![H * D, RANK], codes));
        t.insert(format!("{p}wq_b.weight_scale_inv"), (Dtype::F32, vec![H * D / 128, 1], f32_bytes(&scales)));
        t.insert(format!("{p}weights_proj.weight"), weights_proj(&mut rng));
        let gamma: Vec<f32> = (0..D).map(|_| (LOG_GAMMA_SD * normal(&mut rng)).exp() as f32).collect();
        e.log_gamma_var.push(sample_var(&gamma.iter().map(|g| (*g as f64).ln()).collect::<Vec<_>>()));
        let dir_: Vec<f64> = (0..D).map(|_| normal(&mut rng)).collect();
        let gn = gamma.iter().map(|g| (*g as f64).powi(2)).sum::<f64>().sqrt();
        let dn = dir_.iter().map(|x| x * x).sum::<f64>().sqrt();
        let beta: Vec<f32> = dir_.iter().map(|x| (x / dn * BIAS_RATIO * gn) as f32).collect();
        let bn = beta.iter().map(|b| (*b as f64).powi(2)).sum::<f64>().sqrt();
        e.bias_ratio.push(bn / gn);
        t.insert(format!("{p}k_norm.weight"), (Dtype::F32, vec![D], f32_bytes(&gamma)));
        t.insert(format!("{p}k_norm.bias"), (Dtype::F32, vec![D], f32_bytes(&beta)));
    }
    let path = dir.join("model.safetensors");
    write_shard(&path, &t);
    (path, e)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn close(a: f64, b: f64, tol: f64, what: &str) {
    assert!((a - b).abs() <= tol, "{what}: {a} vs {b} (tolerance {tol})");
}

#[test]
fn v4_two_shards_with_index_and_fp8_scales() {
    let tmp = TempDir::new().unwrap();
    let (index, e) = v4_checkpoint(tmp.path());
    let c = calibrate_checkpoint(std::slice::from_ref(&index), None).unwrap();
    assert_eq!(c.family, Family::V4);
    assert_eq!(c.layers.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![2, 4, 6]);
    assert_eq!((c.heads, c.q_lora_rank), (H, RANK));
    assert_eq!(c.preset, "deepseek-v4-flash");
    let gate = c.gate_bias_std.as_ref().unwrap().value;
    close(gate, mean(&e.ape_var).sqrt(), 1e-9, "gate_bias_std vs direct");
    // Planted spread, offsets removed: 2688 degrees of freedom, SE ≈ 1.4 %.
    close(gate, GATE_SD, 0.05 * GATE_SD, "gate_bias_std vs planted");
    let spread = c.norm_weight_spread.as_ref().unwrap().value;
    close(spread, mean(&e.log_gamma_var).sqrt(), 1e-9, "norm_weight_spread vs direct");
    close(spread, LOG_GAMMA_SD, 0.15 * LOG_GAMMA_SD, "norm_weight_spread vs planted");
    assert!(c.norm_bias.is_none(), "RMSNorm has no bias");
    close(c.head_cosine.value, mean(&e.cos), 1e-9, "head cosine vs direct");
    close(c.head_cosine.value, COHERENCE, 0.05, "head cosine vs planted coherence");
    close(c.rope_energy_share.value, mean(&e.rope_share), 1e-9, "rope share vs direct");
    let planted = (ROPE_SCALE * ROPE_SCALE) as f64 / (1.0 + (ROPE_SCALE * ROPE_SCALE) as f64);
    close(c.rope_energy_share.value, planted, 0.02, "rope share vs planted");

    // The written scenario loads through the same path as --config.
    let out = tmp.path().join("v4.toml");
    run_calibrate(&[index], None, &out).unwrap();
    let s = config::check(config::resolve(config::load_scenario_file(&out).unwrap()).unwrap()).unwrap();
    assert_eq!(s.preset, "deepseek-v4-flash");
    assert_eq!(s.physics.gate_bias_std, (gate * 1e4).round() / 1e4);
}

#[test]
fn v32_one_shard_with_weight_scale_inv() {
    let tmp = TempDir::new().unwrap();
    let (shard, e) = v32_checkpoint(tmp.path());
    let c = calibrate_checkpoint(&[shard], None).unwrap();
    assert_eq!(c.family, Family::V32);
    assert_eq!(c.preset, "deepseek-v3.2");
    assert!(c.gate_bias_std.is_none(), "V3.2 has no compressor");
    close(c.norm_bias.as_ref().unwrap().value, mean(&e.bias_ratio), 1e-9, "norm_bias vs direct");
    close(c.norm_bias.as_ref().unwrap().value, BIAS_RATIO, 1e-6, "norm_bias vs planted");
    close(c.norm_weight_spread.as_ref().unwrap().value, mean(&e.log_gamma_var).sqrt(), 1e-9, "norm_weight_spread");
    // V3.2's rotary dims are the first 64 of each head.
    close(c.rope_energy_share.value, mean(&e.rope_share), 1e-9, "rope share vs direct");
    close(c.head_cosine.value, mean(&e.cos), 1e-9, "head cosine vs direct");
}

#[test]
fn cli_writes_a_scenario_that_sweep_accepts() {
    let tmp = TempDir::new().unwrap();
    let (shard, _) = v32_checkpoint(tmp.path());
    let out = tmp.path().join("cal.toml");
    let o = bin().args(["calibrate", "--checkpoint"]).arg(&shard).arg("--out").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("preset = \"deepseek-v3.2\""), "{text}");
    assert!(text.contains("norm_bias = 0.2500"), "{text}");
    assert!(text.contains("model.layers.{i}.self_attn.indexer.k_norm.bias"), "{text}");
    assert!(!text.contains("\ngate_bias_std"), "no compressor in V3.2: {text}");
    let manifest = sweep_manifest(&out, &tmp.path().join("sweep"), "1K", "64", "fp32");
    assert_eq!(manifest["scenario"]["physics"]["norm_bias"], 0.25);
}

/// Sweeps a calibrated scenario (4 trials, one cell) into `dir` and returns
/// its manifest.
fn sweep_manifest(config: &Path, dir: &Path, context: &str, topk: &str, precision: &str) -> serde_json::Value {
    let o = bin()
        .args(["sweep", "--trials", "4", "--contexts", context, "--depths", "50", "--topk", topk, "--precisions", precision, "--config"])
        .arg(config)
        .arg("--out")
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

/// A failure with exit 2, one line on stderr naming every string given, and
/// no output file.
fn assert_refused(args: &[&std::ffi::OsStr], out: &Path, must: &[&str]) {
    let o = bin().arg("calibrate").args(args).arg("--out").arg(out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && !err.contains("panicked"), "{err}");
    for m in must {
        assert!(err.contains(m), "stderr should name {m:?}: {err}");
    }
    assert!(!out.exists(), "nothing may be written");
}

fn rewrite(path: &Path, edit: impl FnOnce(&mut Tensors)) {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut t: Tensors = st.tensors().into_iter().map(|(n, v)| (n, (v.dtype(), v.shape().to_vec(), v.data().to_vec()))).collect();
    edit(&mut t);
    write_shard(path, &t);
}

#[test]
fn bad_checkpoints_are_refused_with_one_line() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("cal.toml");
    let (shard, _) = v32_checkpoint(tmp.path());
    let s = shard.as_os_str();
    let flag = std::ffi::OsStr::new("--checkpoint");

    // Missing tensor: layer 1's k_norm bias.
    rewrite(&shard, |t| {
        t.remove("model.layers.1.self_attn.indexer.k_norm.bias");
    });
    assert_refused(&[flag, s], &out, &["model.layers.1.self_attn.indexer.k_norm.bias", "missing", "model.safetensors"]);

    // Wrong shape.
    let (shard, _) = v32_checkpoint(tmp.path());
    rewrite(&shard, |t| {
        t.insert("model.layers.0.self_attn.indexer.k_norm.bias".into(), (Dtype::F32, vec![64], vec![0; 256]));
    });
    assert_refused(&[flag, s], &out, &["model.layers.0.self_attn.indexer.k_norm.bias", "shape [64]", "expected [128]"]);

    // Wrong dtype.
    let (shard, _) = v32_checkpoint(tmp.path());
    rewrite(&shard, |t| {
        t.insert("model.layers.0.self_attn.indexer.k_norm.weight".into(), (Dtype::I32, vec![128], vec![0; 512]));
    });
    assert_refused(&[flag, s], &out, &["k_norm.weight", "dtype I32"]);

    // FP8 weight without its scale.
    let (shard, _) = v32_checkpoint(tmp.path());
    rewrite(&shard, |t| {
        t.remove("model.layers.0.self_attn.indexer.wq_b.weight_scale_inv");
    });
    assert_refused(&[flag, s], &out, &["model.layers.0.self_attn.indexer.wq_b.weight", "weight_scale_inv"]);

    // An all-zero wq_b (issue 30, item 10): cosines of zero heads are made up.
    let (shard, _) = v32_checkpoint(tmp.path());
    rewrite(&shard, |t| {
        let wq_b = t.get_mut("model.layers.0.self_attn.indexer.wq_b.weight").unwrap();
        wq_b.2.iter_mut().for_each(|b| *b = 0);
    });
    assert_refused(&[flag, s], &out, &["model.layers.0.self_attn.indexer.wq_b.weight", "head 0 is all zeros"]);

    // Truncated shard.
    let (shard, _) = v32_checkpoint(tmp.path());
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() - 1000]).unwrap();
    assert_refused(&[flag, s], &out, &["model.safetensors", "truncated"]);

    // Not a safetensors file.
    std::fs::write(&shard, b"hello").unwrap();
    assert_refused(&[flag, s], &out, &["model.safetensors", "not a safetensors file"]);

    // Bad index JSON, and an index naming a shard that is not there.
    let index = tmp.path().join("model.safetensors.index.json");
    std::fs::write(&index, "{not json").unwrap();
    assert_refused(&[flag, index.as_os_str()], &out, &["model.safetensors.index.json", "not JSON"]);
    std::fs::write(&index, r#"{"weight_map": {"layers.2.attn.indexer.wq_b.weight": "gone.safetensors"}}"#).unwrap();
    assert_refused(&[flag, index.as_os_str()], &out, &["model.safetensors.index.json", "gone.safetensors"]);

    // No indexer at all, and no source at all.
    let other = tmp.path().join("other.safetensors");
    write_shard(&other, &Tensors::from([("embed.weight".to_string(), (Dtype::F32, vec![2], vec![0; 8]))]));
    assert_refused(&[flag, other.as_os_str()], &out, &["no indexer layer"]);
    assert_refused(&[], &out, &["--checkpoint"]);
}

#[test]
fn v4_missing_ape_in_one_layer_is_named() {
    let tmp = TempDir::new().unwrap();
    let (index, _) = v4_checkpoint(tmp.path());
    let shard = tmp.path().join("model-00001-of-00002.safetensors");
    rewrite(&shard, |t| {
        t.remove("layers.4.attn.indexer.compressor.ape");
    });
    // The index still names it: the shard is where it is missing.
    let out = tmp.path().join("cal.toml");
    assert_refused(&[std::ffi::OsStr::new("--checkpoint"), index.as_os_str()], &out, &["layers.4.attn.indexer.compressor.ape", "missing"]);
}

// Issue 18, item 3: --checkpoint and --observations together: the
// checkpoint's knobs come first, the fit on top; the TOML keeps both.
#[test]
fn checkpoint_and_observations_together() {
    let tmp = TempDir::new().unwrap();
    let (index, _) = v4_checkpoint(tmp.path());
    let obs = tmp.path().join("obs.csv");
    std::fs::write(&obs, "# synthetic\ncontext_tokens,depth_percent,topk,config,found,total,layer,healthy\n4K,50,512,bf16,15,20,0,true\n")
        .unwrap();
    let out = tmp.path().join("both.toml");
    let o = bin()
        .args(["calibrate", "--checkpoint"])
        .arg(&index)
        .arg("--observations")
        .arg(&obs)
        .args(["--trials", "10", "--fit-range", "1e-5..1e-2", "--recall", "layer", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    // Under the default (quantile) needle the fitted knob is its median exceedance.
    assert!(text.contains("\ngate_bias_std = ") && text.contains("\nexceedance = "), "{text}");
    assert!(text.contains("# From the checkpoint"), "{text}");
    let p = config::params::parse_scenario_toml(&text).unwrap();
    assert_eq!(p.preset.as_deref(), Some("deepseek-v4-flash"));
    config::check(config::resolve(p).unwrap()).unwrap();
}

/// A GLM-5.2 checkpoint stores V3.2's indexer tensors on its 21 full layers
/// (none on the shared ones): `--preset glm-5.2` calibrates onto that preset,
/// its layer plan and lost-layer harm kept, and sweep takes the result.
#[test]
fn a_v32_family_checkpoint_calibrates_onto_the_glm_preset() {
    let tmp = TempDir::new().unwrap();
    let (shard, _) = v32_checkpoint(tmp.path());
    let out = tmp.path().join("glm.toml");
    let o = bin().args(["calibrate", "--preset", "glm-5.2", "--checkpoint"]).arg(&shard).arg("--out").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("preset = \"glm-5.2\""), "{text}");
    let manifest = sweep_manifest(&out, &tmp.path().join("sweep"), "4K", "2048", "bf16");
    let layers = manifest["scenario"]["stack"]["layers"].as_str().unwrap();
    assert!(layers.starts_with("i1*3, s2*3, i1, s6*3, i1, s10*3") && layers.ends_with("i1, s74*3"), "{layers}");
    assert_eq!(manifest["scenario"]["stack"]["lost_layer_harm"]["central"], 1.0);
}

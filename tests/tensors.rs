//! Real tensors in and out: a dumped trial replays to the same logits and
//! selections, and malformed files are refused with one line, never a panic.

use assert_cmd::Command;
use dsa_recall::config::{self, params::parse_scenario_toml};
use dsa_recall::score::variant::PrecisionVariant;
use dsa_recall::tensors::dump::{dump_trial, select_top_k, variant_logits};
use dsa_recall::tensors::npy::write_npy;
use dsa_recall::tensors::replay::{load_npy, load_safetensors, replay, TensorNames};
use safetensors::SafeTensors;
use std::path::Path;

const VARIANTS: &str = "fp32,bf16,fp8,fp8-fp32scale,fp4,mxfp4,nvfp4";

fn dump(dir: &Path) -> std::path::PathBuf {
    dump_with(dir, "")
}

/// The scenario settings under which today's model gives the bits the model
/// gave before the realism knobs of issue 15 (docs/MODEL.md, "Pessimistic
/// settings").
const PESSIMISTIC: &str = "[needle]\nunit = \"strength\"\nstrength = 1.0\ngeometry = \"isotropic\"\nhead_coherence = 0.0\n\
    [haystack]\ncontent_rank = 0\nkey_content_share = 0.0\nquery_content_share = 0.0\nrelevance_scale = 0.0\n\
    [physics]\nnorm_weight_spread = 0.0\n";

fn dump_with(dir: &Path, extra: &str) -> std::path::PathBuf {
    let text = format!("[sweep]\ncontexts = \"8K\"\ndepths = \"50\"\ntopk = \"256\"\nprecisions = \"{VARIANTS}\"\n{extra}");
    let s = config::check(config::resolve(parse_scenario_toml(&text).unwrap()).unwrap()).unwrap();
    let path = dir.join("trial.safetensors");
    let summary = dump_trial(&s, 2, &path, false, &|_| {}).unwrap();
    assert_eq!((summary.rows, summary.k_eff), (2048, 256));
    path
}

fn f32s(st: &SafeTensors, name: &str) -> Vec<f32> {
    st.tensor(name).unwrap().data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn i64s(st: &SafeTensors, name: &str) -> Vec<u64> {
    st.tensor(name).unwrap().data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u64).collect()
}

#[test]
fn a_dump_replays_to_the_same_logits_and_selections() {
    let tmp = tempfile::tempdir().unwrap();
    let path = dump(tmp.path());
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let rec = load_safetensors(&path, &TensorNames::default()).unwrap();
    assert_eq!((rec.heads, rec.dim, rec.tokens, rec.rows), (64, 128, 1, 2048));
    assert!(!rec.needle_rows.is_empty());
    for name in VARIANTS.split(',') {
        let v = PrecisionVariant::builtin(name).unwrap();
        let logits = variant_logits(&v, &rec.queries, &rec.weights, &rec.keys, rec.dim).unwrap();
        let dumped = f32s(&st, &format!("{name}.logits"));
        // Bit for bit: the replay recomputes from the fp32 tensors with the same code path.
        assert!(logits.iter().zip(&dumped).all(|(a, b)| a.to_bits() == b.to_bits()), "{name} logits differ");
        let selected = select_top_k(&logits, 256, rec.tie_rule, rec.tie_seed);
        assert_eq!(selected, i64s(&st, &format!("{name}.selected")), "{name} selection differs");
        let codes = st.tensor(&format!("{name}.k_codes")).unwrap();
        assert_eq!(codes.shape(), &[2048, 128]);
    }
    // The replay report: fp32 against itself is exact, quantized variants overlap less.
    let variants: Vec<PrecisionVariant> = VARIANTS.split(',').map(|n| PrecisionVariant::builtin(n).unwrap()).collect();
    let rows = replay(&rec, &variants, &[256]).unwrap();
    assert_eq!(rows[0].selection_recall, 1.0);
    assert!(rows.iter().all(|r| r.selection_recall > 0.5 && r.selection_recall <= 1.0));
    assert!(rows.iter().any(|r| r.selection_recall < 1.0));
}

/// FNV-1a (64 bits) of every tensor of the file [`dump_with`] writes under
/// [`PESSIMISTIC`], name then data, in name order: keys after the haystack,
/// pooling and RoPE kernels, quantized codes and scales, logits and
/// selections of every variant. Recorded before issue 15 added its knobs, so
/// it also proves that their null settings give back the old model.
const RECORDED_DUMP_FNV: u64 = 0x1fee_d990_8803_c65a;

/// The dump's bits as recorded (on an AVX-512 machine): `.ci/run` runs this
/// test at every SIMD level the CPU has (`DSA_RECALL_SIMD`), so each path
/// must reproduce them. Change the constant only with a deliberate change of
/// the simulated numbers, and say so in the commit.
#[test]
fn a_dump_has_the_recorded_bits_on_every_simd_path() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(dump_with(tmp.path(), PESSIMISTIC)).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort();
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for name in names {
        for &b in name.as_bytes().iter().chain(st.tensor(name).unwrap().data()) {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let level = dsa_recall::base::simd::level();
    assert_eq!(hash, RECORDED_DUMP_FNV, "dump bits differ from the recorded ones at SIMD level {level}: {hash:#018x}");
}

#[test]
fn npy_inputs_replay_like_safetensors() {
    let tmp = tempfile::tempdir().unwrap();
    let path = dump(tmp.path());
    let rec = load_safetensors(&path, &TensorNames::default()).unwrap();
    let write = |name: &str, shape: &[usize], data: &[f32]| {
        let p = tmp.path().join(name);
        std::fs::write(&p, write_npy(shape, data)).unwrap();
        p
    };
    let q = write("q.npy", &[1, 64, 128], &rec.queries);
    let k = write("k.npy", &[2048, 128], &rec.keys);
    let w = write("w.npy", &[64], &rec.weights);
    let from_npy = load_npy(&q, &k, &w).unwrap();
    let v = vec![PrecisionVariant::builtin("fp8").unwrap()];
    let a = replay(&from_npy, &v, &[128]).unwrap();
    let mut rec_lowest = rec.clone();
    rec_lowest.tie_rule = dsa_recall::score::selection::TieRule::LowestIndex;
    rec_lowest.tie_seed = None;
    rec_lowest.needle_rows.clear();
    assert_eq!(a, replay(&rec_lowest, &v, &[128]).unwrap());
}

fn replay_cli(args: &[&str]) -> std::process::Output {
    Command::cargo_bin("dsa-recall").unwrap().arg("replay").args(args).output().unwrap()
}

fn one_line_error(out: &std::process::Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.contains(needle), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn malformed_files_give_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let good = dump(tmp.path());
    let bytes = std::fs::read(&good).unwrap();
    let p = |n: &str| tmp.path().join(n);
    let write = |n: &str, b: &[u8]| {
        std::fs::write(p(n), b).unwrap();
        p(n).to_str().unwrap().to_string()
    };
    // Truncated data, a header that claims more than the file, garbage, an empty file.
    one_line_error(&replay_cli(&[&write("trunc.safetensors", &bytes[..bytes.len() / 2])]), "not a valid safetensors");
    let mut huge = bytes.clone();
    huge[..8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    one_line_error(&replay_cli(&[&write("huge.safetensors", &huge)]), "not a valid safetensors");
    one_line_error(&replay_cli(&[&write("junk.safetensors", b"hello world, not tensors")]), "not a valid safetensors");
    one_line_error(&replay_cli(&[&write("empty.safetensors", b"")]), "not a valid safetensors");
    // Wrong names, dtypes and shapes.
    one_line_error(&replay_cli(&[good.to_str().unwrap(), "--q-name", "nope"]), "no tensor \"nope\"");
    one_line_error(&replay_cli(&[good.to_str().unwrap(), "--q-name", "needle_rows"]), "dtype");
    one_line_error(&replay_cli(&[good.to_str().unwrap(), "--q-name", "weights"]), "queries have shape");
    one_line_error(&replay_cli(&[good.to_str().unwrap(), "--k-name", "weights"]), "keys have shape");
    one_line_error(&replay_cli(&[good.to_str().unwrap(), "--weights-name", "keys"]), "weights have shape");
    one_line_error(&replay_cli(&[good.to_str().unwrap(), "--needle-rows", "999999"]), "--needle-rows");
    one_line_error(&replay_cli(&[good.to_str().unwrap(), "--precisions", "fp7"]), "--precisions");
    one_line_error(&replay_cli(&["/nonexistent.safetensors"]), "cannot read");
    // .npy files that lie about their size or type.
    let q = write_npy(&[64, 128], &vec![0.5; 64 * 128]);
    let qp = write("q.npy", &q);
    let kp = write("k.npy", &write_npy(&[10, 128], &vec![0.25; 1280]));
    let wp = write("w.npy", &write_npy(&[64], &vec![1.0; 64]));
    let short = write("short.npy", &q[..q.len() - 4]);
    one_line_error(&replay_cli(&["--q-npy", &short, "--k-npy", &kp, "--weights-npy", &wp]), "holds");
    let at = q.windows(9).position(|w| w == b"(64, 128)").unwrap();
    let lying = [&q[..at], b"(64000000000000, 128)".as_slice(), &q[at + 9..]].concat();
    let lying = write("lie.npy", &lying);
    one_line_error(&replay_cli(&["--q-npy", &lying, "--k-npy", &kp, "--weights-npy", &wp]), "declares 8192000000000000 values");
    let chart = p("overlap.png");
    let ok = replay_cli(&[
        "--q-npy",
        &qp,
        "--k-npy",
        &kp,
        "--weights-npy",
        &wp,
        "--topk",
        "4,8",
        "--precisions",
        "fp8,fp4",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let png = std::fs::read(&chart).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 1400);
}

#[test]
fn a_dump_with_physics_agrees_with_the_trial_engine() {
    // The dump builds a whole context's keys at once (row_source::context_keys)
    // and scores them with the reference path; the engine streams chunks,
    // patches needle rows per case and scores with the fast kernel. Same
    // trial, same fates and ranks.
    let text = "[physics]\nrope = \"v4\"\npooling = \"on\"\nneedle_gate_boost = 2.0\ndistractors = 3\ndistractor_similarity = 0.9\n\
                [sweep]\ncontexts = \"8K\"\ndepths = \"50\"\ntopk = \"256\"\nprecisions = \"fp32,fp8-fp32scale,fp4\"\n";
    let s = config::check(config::resolve(parse_scenario_toml(text).unwrap()).unwrap()).unwrap();
    let spec = dsa_recall::run::sweep::spec_for(&s, &[50.0]);
    let tmp = tempfile::tempdir().unwrap();
    for trial in 0..6u64 {
        let path = tmp.path().join(format!("t{trial}.safetensors"));
        let summary = dump_trial(&s, trial, &path, false, &|_| {}).unwrap();
        let outcome = spec.run(dsa_recall::estimate::driver::trial_seed(s.seed, 50.0, trial)).unwrap();
        for (v, (name, survived, rank, _)) in summary.variants.iter().enumerate() {
            let cell = &outcome.cells[spec.cell_index(0, 0, 0, v)];
            assert_eq!(*survived, cell.survived, "trial {trial} {name}");
            assert_eq!(*rank, cell.rank.map(|r| r.above), "trial {trial} {name}");
        }
    }
}

/// A per-layer capture: queries [layers, tokens, heads, dim], keys
/// [layers, rows, dim], weights [layers, heads]; layers 0 and 1 are the
/// same, layer 2 is drawn afresh. Row 3 holds the needle.
struct Capture {
    shape: (usize, usize, usize, usize, usize),
    queries: Vec<f32>,
    keys: Vec<f32>,
    weights: Vec<f32>,
}

fn capture() -> Capture {
    use rand::Rng;
    let (layers, tokens, heads, dim, rows) = (3, 2, 4, 128, 64);
    let mut rng = dsa_recall::base::rng::stream(77, &[]);
    let mut normal = |n: usize| (0..n).map(|_| rng.sample::<f32, _>(rand_distr::StandardNormal)).collect::<Vec<f32>>();
    let (q, k, w) = (normal(tokens * heads * dim), normal(rows * dim), normal(heads));
    let (q2, k2, w2) = (normal(tokens * heads * dim), normal(rows * dim), normal(heads));
    let abs = |w: &[f32]| w.iter().map(|x| x.abs() + 0.1).collect::<Vec<f32>>();
    Capture {
        shape: (layers, tokens, heads, dim, rows),
        queries: [q.clone(), q, q2].concat(),
        keys: [k.clone(), k, k2].concat(),
        weights: [abs(&w), abs(&w), abs(&w2)].concat(),
    }
}

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn per_layer_captures_replay_the_same_from_safetensors_and_npy() {
    let c = capture();
    let (layers, tokens, heads, dim, rows) = c.shape;
    let tmp = tempfile::tempdir().unwrap();
    let path = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    // .npy: weights shared by the tokens of a layer; safetensors: one vector per token.
    std::fs::write(path("q.npy"), write_npy(&[layers, tokens, heads, dim], &c.queries)).unwrap();
    std::fs::write(path("k.npy"), write_npy(&[layers, rows, dim], &c.keys)).unwrap();
    std::fs::write(path("w.npy"), write_npy(&[layers, heads], &c.weights)).unwrap();
    let per_token: Vec<f32> = c.weights.chunks(heads).flat_map(|w| w.repeat(tokens)).collect();
    let le = |x: &[f32]| x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
    let (qb, kb, wb, nb) = (le(&c.queries), le(&c.keys), le(&per_token), 3i64.to_le_bytes().to_vec());
    use safetensors::{tensor::TensorView, Dtype};
    let views = vec![
        ("queries", TensorView::new(Dtype::F32, vec![layers, tokens, heads, dim], &qb).unwrap()),
        ("keys", TensorView::new(Dtype::F32, vec![layers, rows, dim], &kb).unwrap()),
        ("weights", TensorView::new(Dtype::F32, vec![layers, tokens, heads], &wb).unwrap()),
        ("needle_rows", TensorView::new(Dtype::I64, vec![1], &nb).unwrap()),
    ];
    std::fs::write(path("cap.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
    let flags = ["--topk", "8,16", "--precisions", "bf16,fp4", "--json"];
    let from_st = json_lines(&replay_cli(&[&[path("cap.safetensors").as_str()][..], &flags].concat()));
    let npy = ["--q-npy", &path("q.npy"), "--k-npy", &path("k.npy"), "--weights-npy", &path("w.npy"), "--needle-rows", "3"];
    let from_npy = json_lines(&replay_cli(&[&npy[..], &flags].concat()));
    assert_eq!(from_st, from_npy);
    // layers × tokens × k × variant rows, each with its layer, then the summaries.
    let n_rows = layers * tokens * 2 * 2;
    assert!(from_st[..n_rows].iter().all(|r| r["layer"].as_u64().unwrap() < layers as u64 && r.get("summary").is_none()));
    let kinds: Vec<&str> = from_st[n_rows..].iter().map(|s| s["summary"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "adjacent_layers",
            "adjacent_layers",
            "adjacent_tokens",
            "adjacent_tokens",
            "needle_layers",
            "needle_layers",
            "needle_layers",
            "needle_layers"
        ]
    );
    for s in &from_st[n_rows..n_rows + 2] {
        // Layers 0 and 1 are copies: their top-k sets are the same.
        assert_eq!(s["per_pair"][0].as_f64(), Some(1.0), "{s}");
        assert!(s["per_pair"][1].as_f64().unwrap() < 1.0, "{s}");
    }
    for s in &from_st[n_rows + 4..] {
        let reached: Vec<u64> = s["reached_layers"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(s["layers_reached"].as_u64(), Some(reached.len() as u64));
        assert_eq!(s["reached"].as_bool(), Some(!reached.is_empty()));
        assert_eq!(s["layers"].as_u64(), Some(layers as u64));
    }
    // The table and the chart.
    let chart = path("overlap.png");
    let table = replay_cli(&[&npy[..], &["--topk", "8,16", "--precisions", "bf16,fp4", "--chart", &chart]].concat());
    assert!(table.status.success(), "{}", String::from_utf8_lossy(&table.stderr));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("3 layers × 2 tokens × 4 heads × 128 dims against 64 key rows per layer"), "{text}");
    for heading in ["adjacent-layer overlap", "adjacent-token overlap", "needle across layers"] {
        assert_eq!(text.matches(heading).count(), 1, "{text}");
    }
    // Under the adjacent-layer heading and its columns, k = 8: the first pair (layers 0 and 1) is 1.
    let k8: Vec<&str> = text.split("adjacent-layer overlap").nth(1).unwrap().lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!((k8[0], k8[2]), ("8", "1.0000"), "{text}");
    assert_eq!(&std::fs::read(&chart).unwrap()[1..4], b"PNG");
}

#[test]
fn per_layer_shape_mismatches_give_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let npy = |name: &str, shape: &[usize]| {
        let p = tmp.path().join(name);
        std::fs::write(&p, write_npy(shape, &vec![0.5; shape.iter().product()])).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (q, k, w) = (npy("q.npy", &[2, 3, 4, 128]), npy("k.npy", &[2, 50, 128]), npy("w.npy", &[2, 3, 4]));
    let chart = tmp.path().join("never.png");
    let run = |q: &str, k: &str, w: &str, extra: &[&str]| {
        let base = ["--q-npy", q, "--k-npy", k, "--weights-npy", w, "--topk", "8", "--chart", chart.to_str().unwrap()];
        replay_cli(&[&base[..], extra].concat())
    };
    let cases = [
        (
            npy("q_layers.npy", &[3, 3, 4, 128]),
            k.clone(),
            w.clone(),
            "queries have shape [3, 3, 4, 128] but keys have shape [2, 50, 128]: layers 3 against 2",
        ),
        (
            npy("q_dim.npy", &[2, 3, 4, 64]),
            k.clone(),
            w.clone(),
            "queries have shape [2, 3, 4, 64] but keys have shape [2, 50, 128]: dim 64 against 128",
        ),
        (
            q.clone(),
            k.clone(),
            npy("w_tokens.npy", &[2, 5, 4]),
            "weights have shape [2, 5, 4]: tokens 5 against 3; expected [2, 4] or [2, 3, 4] to match queries [2, 3, 4, 128]",
        ),
        (q.clone(), k.clone(), npy("w_heads.npy", &[2, 6]), "weights have shape [2, 6]: heads 6 against 4"),
        (q.clone(), k.clone(), npy("w_layers.npy", &[1, 3, 4]), "weights have shape [1, 3, 4]: layers 1 against 2"),
        (
            q.clone(),
            npy("k_flat.npy", &[50, 128]),
            w.clone(),
            "queries have shape [2, 3, 4, 128] (a layer axis) but keys have shape [50, 128]",
        ),
        (
            npy("q_flat.npy", &[4, 128]),
            k.clone(),
            w.clone(),
            "queries have shape [4, 128]; expected [layers, heads, dim] or [layers, tokens, heads, dim]",
        ),
    ];
    for (q, k, w, message) in &cases {
        one_line_error(&run(q, k, w, &[]), message);
    }
    one_line_error(&run(&q, &k, &w, &["--needle-rows", "50"]), "--needle-rows = 50: row indices below 50");
    assert!(!chart.exists(), "no chart after an error");
    // The same checks on a safetensors file.
    let zeros = |n: usize| vec![0u8; 4 * n];
    let (qb, kb, wb) = (zeros(2 * 3 * 4 * 128), zeros(2 * 50 * 128), zeros(2 * 5));
    use safetensors::{tensor::TensorView, Dtype};
    let views = vec![
        ("queries", TensorView::new(Dtype::F32, vec![2, 3, 4, 128], &qb).unwrap()),
        ("keys", TensorView::new(Dtype::F32, vec![2, 50, 128], &kb).unwrap()),
        ("weights", TensorView::new(Dtype::F32, vec![2, 5], &wb).unwrap()),
    ];
    let st = tmp.path().join("bad.safetensors");
    std::fs::write(&st, safetensors::serialize(views, None).unwrap()).unwrap();
    one_line_error(&replay_cli(&[st.to_str().unwrap()]), "weights have shape [2, 5]: heads 5 against 4");
}

/// Issue 26: a dump under the quantile needle (the default) holds the keys
/// the trial scored: the needle's exact rank read from the dump's fp32
/// logits is the rank the trial placed it at, in every context tried.
#[test]
fn a_quantile_needle_dump_ranks_the_needle_where_the_trial_placed_it() {
    use dsa_recall::estimate::driver::trial_seed;
    use dsa_recall::run::sweep::spec_for;
    use dsa_recall::tensors::dump::trial_tensors;
    for context in ["4K", "32K"] {
        let text = format!("[sweep]\ncontexts = \"{context}\"\ndepths = \"40\"\ntopk = \"512\"\nprecisions = \"fp32,fp4\"\ntrials = 1\n");
        let s = config::check(config::resolve(parse_scenario_toml(&text).unwrap()).unwrap()).unwrap();
        assert!(!s.model.needle_unit.is_strength());
        for trial in 0..3 {
            let placed = spec_for(&s, &[40.0]).run(trial_seed(s.seed, 40.0, trial)).unwrap().needle[0];
            let dumped = trial_tensors(&s, trial, &|_| {}).unwrap().summary;
            let fp32 = dumped.variants.iter().find(|v| v.0 == "fp32").unwrap();
            assert_eq!(fp32.2, Some(placed.hay_above + placed.fixed_above), "{context}, trial {trial}: {placed:?}");
        }
    }
}

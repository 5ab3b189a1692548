//! `dsa-recall check` end to end (issue 29): captures written by the
//! project's own writer in every built-in layout, healthy and with each
//! layout fault injected by an engine written here (its own reader and a
//! naive scorer, independent of the checker's), deliberate ties at the cut,
//! and malformed captures.

use crate::common::capture_writer::{dequantize_row, QueryForm, SyntheticCapture, SyntheticSpec, TieOrder};
use dsa_recall::numerics::format::element::e4m3fnuz;
use dsa_recall::tensors::check::layout::{CacheLayout, CodeFormat, Placement, BUILTIN};
use dsa_recall::tensors::check::{check_path, CheckOptions, CheckReport};
use std::path::{Path, PathBuf};

/// A capture's tensors by name, as the writer gives them.
type Tensors<'a> = Vec<(String, crate::common::capture_writer::RawOut<'a>)>;

fn capture(layout: &str, seed: u64, edit: impl FnOnce(&mut SyntheticSpec)) -> SyntheticCapture {
    let mut spec = SyntheticSpec::small(layout, seed);
    edit(&mut spec);
    SyntheticCapture::generate(spec).unwrap()
}

/// How the test engine misreads the cache.
#[derive(Clone, Copy, Debug, Default)]
struct Misread {
    interleaved: bool,
    tile16: bool,
    flat: bool,
    row0: bool,
    slot_shift: bool,
    pages_swapped: bool,
    scale_next: bool,
    fnuz: bool,
    zero_from_block: Option<usize>,
}

/// Row `r` of `pair` as a naive engine with `m` reads it: dequantized.
fn engine_row(c: &SyntheticCapture, pair: usize, r: usize, m: Misread, out: &mut [f32]) {
    let l = &c.spec.layout;
    let rpb = l.rows_per_block;
    let layer = pair / c.spec.queries_per_layer;
    let mut logical = r / rpb;
    if m.pages_swapped {
        logical ^= 1;
    }
    let mut slot = r % rpb;
    if m.row0 {
        slot = 0;
    }
    if m.slot_shift {
        slot = (slot + 1) % rpb;
    }
    let physical = match c.block_table.get(logical) {
        Some(&b) if logical < c.max_blocks => b as usize,
        _ => {
            out.fill(0.0);
            return;
        }
    };
    if m.zero_from_block.is_some_and(|z| physical >= z) {
        out.fill(0.0);
        return;
    }
    let block = c.block(layer, physical);
    let healthy = !(m.interleaved || m.tile16 || m.flat || m.scale_next || m.fnuz);
    if healthy {
        dequantize_row(l, block, slot, out);
        return;
    }
    // The engine's own (wrong) addressing, written out here.
    let code_bytes = l.code_bytes_per_row();
    let s = l.scales.as_ref().unwrap();
    let record = code_bytes + l.scale_bytes_per_row();
    let code_at = |c: usize| -> usize {
        if m.interleaved {
            slot * record + c
        } else if m.tile16 {
            (slot / 16) * 16 * code_bytes + (c / 16) * 256 + (slot % 16) * 16 + c % 16
        } else if m.flat {
            slot * code_bytes + c
        } else {
            crate::common::capture_writer::code_offset(l, slot, c)
        }
    };
    let scale_slot = if m.scale_next { (slot + 1) % rpb } else { slot };
    let scale_at = |i: usize| -> usize {
        if m.interleaved {
            scale_slot * record + code_bytes + i * s.dtype.bytes()
        } else {
            crate::common::capture_writer::scale_offset(l, scale_slot, i)
        }
    };
    let bytes: Vec<u8> = (0..code_bytes).map(|c| block[code_at(c)]).collect();
    for (j, v) in out.iter_mut().enumerate() {
        let x = if m.fnuz { e4m3fnuz::decode(u32::from(bytes[j])) } else { l.codes.format.decode_at(&bytes, j, l.codes.low_nibble_first) };
        let at = scale_at(j / s.values_per_scale);
        let scale = s.dtype.decode(&block[at..at + s.dtype.bytes()]);
        *v = if scale == 0.0 { 0f32.copysign(x) } else { x * scale };
    }
}

/// Sets every pair's selection to a naive engine's top-k under `m`.
fn engine(c: &mut SyntheticCapture, m: Misread, relu: bool, tie: TieOrder) {
    for p in 0..c.pairs {
        let logits = {
            let cc = &*c;
            cc.naive_logits(p, relu, &|r, out| engine_row(cc, p, r, m, out))
        };
        c.set_selection(p, &logits, tie);
    }
}

struct Written {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn write(c: &SyntheticCapture, npy: bool) -> Written {
    let dir = tempfile::tempdir().unwrap();
    let path = if npy {
        let p = dir.path().join("capture");
        c.write_npy_dir(&p).unwrap();
        p
    } else {
        let p = dir.path().join("capture.safetensors");
        c.write_safetensors(&p).unwrap();
        p
    };
    Written { _dir: dir, path }
}

fn check(path: &Path, opts: &CheckOptions) -> CheckReport {
    check_path(path, opts).unwrap_or_else(|e| panic!("{e}"))
}

fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

#[test]
fn healthy_captures_pass_in_every_builtin_layout() {
    for (i, name) in builtin_names().into_iter().enumerate() {
        let mut c = capture(name, 100 + i as u64, |s| s.with_logits = true);
        // The writer's own selection is the reference's: passes bit for bit.
        let w = write(&c, i % 2 == 1);
        let exact = check(&w.path, &CheckOptions { exact: true, ..Default::default() });
        assert_eq!((exact.exit_code, exact.pairs_equal), (0, c.pairs), "{name} exact: {exact:?}");
        assert_eq!(exact.logits.as_ref().unwrap().rows_beyond_bound, 0, "{name}");
        // A naive engine (dequantize first, sums in index order) differs in
        // the last bits: equal within the f32 bound, and its logits inside it.
        engine(&mut c, Misread::default(), true, TieOrder::Highest);
        let w = write(&c, i % 2 == 0);
        let r = check(&w.path, &CheckOptions::default());
        assert_eq!(r.exit_code, 0, "{name}: {}", dsa_recall::tensors::check::render_text(&r));
        let logits = r.logits.as_ref().unwrap();
        // (fp4 values carry so few bits that every order sums them exactly.)
        assert!(logits.rows_beyond_bound == 0 && (logits.max_abs_error > 0.0 || name.contains("fp4")), "{name}: {logits:?}");
        assert_eq!(r.recall_min, 1.0, "{name}");
        assert!(r.transforms.is_empty() && r.first_divergence.is_none());
    }
}

/// The faults an engine can carry in `layout`, as (transform name, misread, relu).
fn faults(l: &CacheLayout) -> Vec<(&'static str, Misread)> {
    let mut out = vec![
        ("block-row0", Misread { row0: true, ..Default::default() }),
        ("slot-shift", Misread { slot_shift: true, ..Default::default() }),
        ("pages-swapped", Misread { pages_swapped: true, ..Default::default() }),
        ("scale-offset", Misread { scale_next: true, ..Default::default() }),
    ];
    if l.codes.placement == Placement::Planar {
        out.push(("layout-interleaved-read", Misread { interleaved: true, ..Default::default() }));
    }
    if l.codes.format.bits() == 8 && l.codes.placement == Placement::Planar {
        let m = if l.codes.tile.is_some() {
            Misread { flat: true, ..Default::default() }
        } else {
            Misread { tile16: true, ..Default::default() }
        };
        out.push(("layout-tile16", m));
    }
    if l.codes.format == CodeFormat::E4m3fn {
        out.push(("e4m3fnuz-read", Misread { fnuz: true, ..Default::default() }));
    }
    out
}

#[test]
fn each_layout_fault_is_a_mismatch_named_by_its_transform() {
    for (i, name) in builtin_names().into_iter().enumerate() {
        let layout = CacheLayout::builtin(name).unwrap();
        let mut all = faults(&layout);
        if layout.tail.is_some() {
            // fp8_ds_mla: the test engine misaddresses whole records only.
            all.retain(|(f, _)| ["block-row0", "slot-shift", "pages-swapped"].contains(f));
        }
        for (j, (fault, m)) in all.into_iter().enumerate() {
            // Reading e4m3fn codes as fnuz halves every value: the ranking
            // only moves where a −0 code turns NaN, so that fault is seen in
            // the engine's logits.
            let mut c = capture(name, 1000 + 37 * i as u64 + j as u64, |s| s.with_logits = fault == "e4m3fnuz-read");
            engine(&mut c, m, true, TieOrder::Lowest);
            let w = write(&c, false);
            let r = check(&w.path, &CheckOptions::default());
            let text = dsa_recall::tensors::check::render_text(&r);
            assert_eq!(r.exit_code, 1, "{name} {fault}: {text}");
            assert!(r.first_divergence.is_some(), "{name} {fault}");
            assert_eq!(r.reproduced_by.first().copied(), Some(fault), "{name} {fault}: {text}");
        }
    }
}

#[test]
fn scoring_faults_are_named() {
    // no-relu
    let mut c = capture("sglang-v32-fp8", 7, |_| {});
    engine(&mut c, Misread::default(), false, TieOrder::Lowest);
    let w = write(&c, false);
    let r = check(&w.path, &CheckOptions::default());
    assert_eq!((r.exit_code, r.reproduced_by.first().copied()), (1, Some("no-relu")), "{}", dsa_recall::tensors::check::render_text(&r));

    // logits kept in bf16 by the engine (k large enough that bins bite)
    let mut c = capture("vllm-indexer-fp8", 8, |s| {
        s.seq_len = 4000;
        s.topk = 1500;
        s.with_logits = true;
    });
    for p in 0..c.pairs {
        let logits: Vec<f32> = c.reference_logits(p).iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect();
        c.set_selection(p, &logits, TieOrder::Highest);
    }
    let w = write(&c, false);
    let r = check(&w.path, &CheckOptions::default());
    assert_eq!(r.exit_code, 1);
    assert!(r.reproduced_by.contains(&"logits-bf16"), "{}", dsa_recall::tensors::check::render_text(&r));

    // row-shift: each query gets its neighbour's selection
    let mut c = capture("sglang-v32-fp8", 9, |s| s.queries_per_layer = 3);
    let sels: Vec<Vec<i64>> = (0..c.pairs).map(|p| c.selected[p * c.spec.topk..(p + 1) * c.spec.topk].to_vec()).collect();
    for p in 0..c.pairs {
        let q = if p % 3 == 2 { p - 1 } else { p + 1 };
        c.set_rows(p, &sels[q]);
    }
    let w = write(&c, false);
    let r = check(&w.path, &CheckOptions::default());
    assert_eq!((r.exit_code, r.reproduced_by.first().copied()), (1, Some("row-shift")), "{}", dsa_recall::tensors::check::render_text(&r));

    // hadamard-k-only: a float query the engine forgot to rotate
    let mut c = capture("sglang-v32-fp8", 10, |s| s.query_form = QueryForm::Float);
    let unrotated = {
        let mut spec = c.spec.clone();
        spec.pipeline = "fp8+hadamard-k-only".into();
        SyntheticCapture::generate(spec).unwrap()
    };
    for p in 0..c.pairs {
        c.set_selection(p, &unrotated.reference_logits(p), TieOrder::Lowest);
    }
    let w = write(&c, false);
    let r = check(&w.path, &CheckOptions::default());
    assert_eq!(
        (r.exit_code, r.reproduced_by.first().copied()),
        (1, Some("hadamard-k-only")),
        "{}",
        dsa_recall::tensors::check::render_text(&r)
    );
}

#[test]
fn blocks_past_2_gib_reading_zero_are_named() {
    // An allocation whose block stride puts physical blocks 4 and up past
    // 2^31 bytes: a 32-bit offset zeroes their logits.
    let stride = (1u64 << 31) / 4;
    let mut c = capture("sglang-v32-fp8", 11, |s| {
        s.block_stride_bytes = Some(stride);
        s.seq_len = 700;
        s.spare_blocks = 2;
    });
    engine(&mut c, Misread { zero_from_block: Some(4), ..Default::default() }, true, TieOrder::Lowest);
    let w = write(&c, false);
    let r = check(&w.path, &CheckOptions::default());
    assert_eq!(r.exit_code, 1);
    assert!(r.reproduced_by.contains(&"offset-32bit"), "{}", dsa_recall::tensors::check::render_text(&r));
}

#[test]
fn deliberate_ties_at_the_cut_pass() {
    for name in ["sglang-v32-fp8", "trtllm-indexer-fp4"] {
        let mut c = capture(name, 12, |s| {
            s.tied_rows = Some((100, 9));
            s.queries_per_layer = 1;
        });
        // Put the cut inside the tied group (layer 0's logits): k = rows above it + 3.
        let logits0 = c.reference_logits(0);
        let k = logits0.iter().filter(|&&x| x > logits0[100]).count() + 3;
        c.spec.topk = k;
        c.selected.clear();
        for p in 0..c.pairs {
            let logits = c.reference_logits(p);
            c.set_selection(p, &logits, TieOrder::Highest);
        }
        let w = write(&c, false);
        let r = check(&w.path, &CheckOptions { exact: true, ..Default::default() });
        assert_eq!(r.exit_code, 0, "{name}: {}", dsa_recall::tensors::check::render_text(&r));
        let p0 = &r.per_pair[0].comparison;
        assert_eq!((p0.ties_at_cut, p0.tie_order), (10, Some("highest-index")), "{name}: {p0:?}");
        // Swapping a tied row for a row strictly below the cut is not a tie.
        let mut sel: Vec<i64> = c.selected[..k].to_vec();
        let below = (0..c.spec.seq_len).find(|&r| logits0[r] < logits0[100]).unwrap() as i64;
        let i = sel.iter().position(|&r| logits0[r as usize] == logits0[100]).unwrap();
        sel[i] = below;
        c.set_rows(0, &sel);
        let w = write(&c, false);
        let r = check(&w.path, &CheckOptions::default());
        assert_eq!(r.exit_code, 1);
        assert_eq!(r.first_divergence.as_ref().map(|d| (d.pair, d.side)), Some((0, "engine-only")));
    }
}

/// The CLI's one-line error for a capture, with exit 2 and no --out file.
fn cli_error(path: &Path, extra: &[&str]) -> String {
    let out_dir = tempfile::tempdir().unwrap();
    let report = out_dir.path().join("report.json");
    let output = assert_cmd::Command::cargo_bin("dsa-recall")
        .unwrap()
        .arg("check")
        .arg(path)
        .args(extra)
        .arg("--out")
        .arg(&report)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains('\n') && stderr.starts_with("error: "), "{stderr}");
    assert!(output.stdout.is_empty() && !report.exists(), "nothing written");
    stderr
}

#[test]
fn malformed_captures_are_refused_in_one_line_naming_the_tensor() {
    let c = capture("sglang-v32-fp8", 13, |_| {});
    let dir = tempfile::tempdir().unwrap();
    let save = |name: &str, edit: &dyn Fn(&mut Tensors<'_>)| -> PathBuf {
        let (mut tensors, meta) = c.tensors();
        edit(&mut tensors);
        let p = dir.path().join(name);
        std::fs::write(&p, crate::common::capture_writer::serialize(&tensors, &meta).unwrap()).unwrap();
        p
    };
    let find = |t: &mut Tensors<'_>, n: &str| t.iter().position(|(m, _)| m == n).unwrap();

    // A cache whose size is not whole blocks.
    let p = save("short.safetensors", &|t| {
        let i = find(t, "kv_cache");
        let shape = t[i].1.shape().to_vec();
        let len = t[i].1.data_mut().len() - 100 * shape[0] * shape[1];
        t[i].1.data_mut().truncate(len);
        t[i].1.set_shape(vec![shape[0], shape[1], shape[2] - 100]);
    });
    let e = cli_error(&p, &[]);
    assert!(e.contains("tensor kv_cache") && e.contains("8448"), "{e}");

    // A layout that does not divide the bytes.
    let good = write(&c, false);
    let e = cli_error(&good.path, &["--layout", "trtllm-indexer-fp4"]);
    assert!(e.contains("tensor kv_cache") && e.contains("trtllm-indexer-fp4"), "{e}");

    // Indices past the cache.
    let p = save("past.safetensors", &|t| {
        let i = find(t, "topk_indices");
        t[i].1.data_mut()[..4].copy_from_slice(&100_000i32.to_le_bytes());
    });
    let e = cli_error(&p, &[]);
    assert!(e.contains("tensor topk_indices") && e.contains("topk_indices[0][0] = 100000"), "{e}");

    // A NaN scale in a row the query reads.
    let l = &c.spec.layout;
    let first_block = c.physical(0);
    let p = save("nan.safetensors", &|t| {
        let i = find(t, "kv_cache");
        let off = first_block * l.block_stride() + crate::common::capture_writer::scale_offset(l, 5, 0);
        t[i].1.data_mut()[off..off + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    });
    let e = cli_error(&p, &[]);
    assert!(e.contains("tensor kv_cache") && e.contains("scale NaN of row 5"), "{e}");

    // A NaN query scale, a wrong weights shape, a missing tensor, a block past the cache.
    let p = save("qnan.safetensors", &|t| {
        let i = find(t, "q_scales");
        t[i].1.data_mut()[..4].copy_from_slice(&f32::NAN.to_le_bytes());
    });
    assert!(cli_error(&p, &[]).contains("tensor q_scales"));
    let p = save("w.safetensors", &|t| {
        let i = find(t, "weights");
        let s = t[i].1.shape().to_vec();
        t[i].1.set_shape(vec![s[0] * s[1]]);
    });
    assert!(cli_error(&p, &[]).contains("tensor weights"));
    let p = save("missing.safetensors", &|t| {
        let i = find(t, "seq_len");
        t.remove(i);
    });
    assert!(cli_error(&p, &[]).contains("tensor seq_len"));
    let p = save("table.safetensors", &|t| {
        let i = find(t, "block_table");
        t[i].1.data_mut()[..4].copy_from_slice(&9999i32.to_le_bytes());
    });
    assert!(cli_error(&p, &[]).contains("block_table[0][0] = 9999"));
    // Bad options are one line too.
    assert!(cli_error(&good.path, &["--layout", "nope"]).contains("layout"));
    assert!(cli_error(&good.path, &["--pipeline", "fp9"]).contains("fp9"));
}

#[test]
fn the_cli_exits_0_1_and_writes_the_report() {
    let mut c = capture("vllm-indexer-fp8", 14, |_| {});
    let w = write(&c, true);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.json");
    let run = |path: &Path, extra: &[&str]| {
        assert_cmd::Command::cargo_bin("dsa-recall").unwrap().arg("check").arg(path).args(extra).output().unwrap()
    };
    let ok = run(&w.path, &["--out", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{text}");
    assert!(text.contains("verdict: EQUAL up to ties"), "{text}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(json["verdict"], "equal-up-to-ties");
    engine(&mut c, Misread { slot_shift: true, ..Default::default() }, true, TieOrder::Lowest);
    let bad = write(&c, false);
    let mismatch = run(&bad.path, &[]);
    let text = String::from_utf8_lossy(&mismatch.stdout);
    assert_eq!(mismatch.status.code(), Some(1), "{text}");
    assert!(text.contains("verdict: MISMATCH") && text.contains("slot-shift") && text.contains("first divergence"), "{text}");
    let json = run(&bad.path, &["--json", "--no-transforms"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!((v["exit_code"].as_u64(), v["transforms"].as_array().map(Vec::len)), (Some(1), Some(0)));
    let list = assert_cmd::Command::cargo_bin("dsa-recall").unwrap().args(["check", "--layouts"]).output().unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(builtin_names().iter().all(|n| text.contains(n)), "{text}");
}

#[test]
fn engine_logits_beyond_the_bound_are_a_mismatch() {
    let mut c = capture("sglang-v32-fp8", 15, |s| s.with_logits = true);
    let i = c.spec.seq_len + 3;
    c.logits[i] *= 1.001;
    let w = write(&c, false);
    let r = check(&w.path, &CheckOptions::default());
    assert_eq!((r.exit_code, r.pairs_differing, r.logits.as_ref().unwrap().rows_beyond_bound), (1, 0, 1));
}

#[test]
fn a_repeated_index_or_disagreeing_heads_or_bad_layout_toml_is_refused_naming_it() {
    let c = capture("sglang-v32-fp8", 13, |_| {});
    let dir = tempfile::tempdir().unwrap();
    let save = |name: &str, edit: &dyn Fn(&mut Tensors<'_>, &mut String)| -> PathBuf {
        let (mut tensors, mut meta) = c.tensors();
        edit(&mut tensors, &mut meta);
        let p = dir.path().join(name);
        std::fs::write(&p, crate::common::capture_writer::serialize(&tensors, &meta).unwrap()).unwrap();
        p
    };
    let find = |t: &mut Tensors<'_>, n: &str| t.iter().position(|(m, _)| m == n).unwrap();

    // A row selected twice: bad input naming the tensor, not a mismatch.
    let p = save("repeat.safetensors", &|t, _| {
        let i = find(t, "topk_indices");
        let data = t[i].1.data_mut();
        let first: [u8; 4] = data[..4].try_into().unwrap();
        assert_ne!(i32::from_le_bytes(first), -1, "the fixture's first index is a row");
        data[4..8].copy_from_slice(&first);
    });
    let e = cli_error(&p, &[]);
    assert!(e.contains("tensor topk_indices") && e.contains("topk_indices[0][1]") && e.contains("repeats topk_indices[0][0]"), "{e}");

    // Weights of fewer heads than the query (8): both are named.
    let p = save("heads.safetensors", &|t, _| {
        let i = find(t, "weights");
        let pairs = t[i].1.shape()[0];
        t[i].1.data_mut().truncate(pairs * 5 * 4);
        t[i].1.set_shape(vec![pairs, 5]);
    });
    let e = cli_error(&p, &[]);
    assert!(e.contains("tensor q_codes") && e.contains("has 8 heads") && e.contains("weights has 5"), "{e}");

    // A layout TOML in the metadata that does not parse: where, and which key.
    let p = save("toml.safetensors", &|_, meta| {
        let mut m: serde_json::Value = serde_json::from_str(meta).unwrap();
        m["layout"] = serde_json::Value::String("name = \"mine\"\ndim = 128\nrows_per_block = [64".into());
        *meta = m.to_string();
    });
    let e = cli_error(&p, &[]);
    assert!(e.contains("metadata \"layout\"") && e.contains("line 3, column"), "{e}");
    assert!(e.len() <= 300, "{} characters: {e}", e.len());
}

#[test]
fn the_first_divergence_is_a_row_the_two_sets_disagree_on_printed_as_f32() {
    // no-relu: the engine keeps rows the reference ranks low.
    let mut c = capture("sglang-v32-fp8", 7, |_| {});
    engine(&mut c, Misread::default(), false, TieOrder::Lowest);
    let w = write(&c, false);
    let r = check(&w.path, &CheckOptions::default());
    let d = r.first_divergence.clone().expect("a divergence");
    let logit = f64::from(d.reference_logit.expect("a reference logit"));
    let selected = c.selected[d.pair * c.spec.topk..(d.pair + 1) * c.spec.topk].contains(&d.row);
    match d.side {
        // In the engine's set only: below the reference cut.
        "engine-only" => assert!(selected && logit < d.cut, "{d:?}"),
        // In the reference top-k only: above the cut.
        "reference-only" => assert!(!selected && logit > d.cut, "{d:?}"),
        other => panic!("side {other}: {d:?}"),
    }
    // The logit and the cut print alike: each the shortest f32 text.
    let text = dsa_recall::tensors::check::render_text(&r);
    let line = text.lines().find(|l| l.contains("first divergence")).unwrap();
    let numbers: Vec<&str> = line.split([' ', ',']).filter(|w| w.contains('e') && w.parse::<f32>().is_ok()).collect();
    assert_eq!(numbers.len(), 2, "{line}");
    for n in numbers {
        assert_eq!(format!("{:e}", n.parse::<f32>().unwrap()), n, "{line}");
    }
}

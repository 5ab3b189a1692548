//! `dsa-recall observe` (issue 18, item 2, second half): synthetic captures
//! in sglang's real layout (`/generate` JSON with `meta_info.indexer_topk`,
//! base64 of int32 `[prompt_tokens + completion_tokens − 1, layers, topk]`,
//! −1 padding; and the same array as .npy) counted by hand; bad input.

use assert_cmd::Command;
use dsa_recall::diagnose::observations;
use dsa_recall::tensors::npy::write_npy_i32;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use tempfile::TempDir;

fn bin() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin!("dsa-recall"))
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let v = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            out.push(if i <= c.len() { A[(v >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

/// A capture `[rows, layers, k]` where every entry is −1 except `picks`:
/// (token row, layer, the indices it selected).
fn capture(rows: usize, layers: usize, k: usize, picks: &[(usize, usize, &[i32])]) -> Vec<i32> {
    let mut v = vec![-1; rows * layers * k];
    for (r, l, idx) in picks {
        let at = (r * layers + l) * k;
        v[at..at + idx.len()].copy_from_slice(idx);
    }
    v
}

/// sglang's /generate response around the capture.
fn response(prompt: usize, completion: usize, indices: &[i32]) -> serde_json::Value {
    let bytes: Vec<u8> = indices.iter().flat_map(|x| x.to_le_bytes()).collect();
    serde_json::json!({
        "text": " Paris.",
        "meta_info": {
            "id": "0a1b", "finish_reason": {"type": "length", "length": completion},
            "prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": 0,
            "indexer_topk": base64(&bytes)
        }
    })
}

fn write(dir: &Path, name: &str, v: &serde_json::Value) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
    p
}

fn observe(files: &[&Path], extra: &[&str], out: &Path) -> Output {
    let mut c = bin();
    c.arg("observe").arg("--capture").args(files).args(["--out", out.to_str().unwrap()]).args(extra);
    c.output().unwrap()
}

/// The data rows of an observation file (comments and header dropped).
fn rows(path: &Path) -> Vec<String> {
    fs::read_to_string(path).unwrap().lines().filter(|l| !l.starts_with('#')).skip(1).map(str::to_string).collect()
}

fn assert_one_line_error(o: &Output, must: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {err:?}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.starts_with("error: ") && !err.contains("panicked"), "{err:?}");
    for m in must {
        assert!(err.contains(m), "stderr should contain {m:?}: {err:?}");
    }
}

// Issue 18, item 2: V3.2 layout (token positions, ratio 1), two prompts
// that add up, −1 padding, counted by hand; the file reads back.
#[test]
fn two_json_prompts_add_up_per_layer() {
    let dir = TempDir::new().unwrap();
    // 16 prompt tokens + 2 generated: 17 rows; 3 layers; k 4. Needle 10..12.
    // The last prompt token is row 15.
    let a = capture(17, 3, 4, &[(15, 0, &[10, 3]), (15, 1, &[0, 1, 2, 3]), (15, 2, &[11]), (16, 1, &[10])]);
    let b = capture(17, 3, 4, &[(15, 0, &[9, 12]), (15, 1, &[11, 0]), (15, 2, &[10, 11, 1, 2])]);
    let fa = write(dir.path(), "a.json", &response(16, 2, &a));
    let fb = write(dir.path(), "b.json", &response(16, 2, &b));
    let out = dir.path().join("obs.csv");
    let o = observe(&[&fa, &fb], &["--needle-tokens", "10..12", "--topk", "4", "--compress-ratio", "1", "--config", "fp8"], &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Layer 0: a yes (10), b no (9 and 12 are outside 10..12); layer 1: a no, b yes; layer 2: both.
    // Depth: 10 / (16 − 2) = 71.43 %.
    assert_eq!(rows(&out), ["16,71.43,4,fp8,1,2,0,15", "16,71.43,4,fp8,1,2,1,15", "16,71.43,4,fp8,2,2,2,15"]);
    let text = fs::read_to_string(&out).unwrap();
    let obs = observations::parse("obs.csv", &text, &|_| Ok(())).unwrap();
    assert_eq!(obs.rows.len(), 3);
    assert_eq!((obs.rows[2].layer, obs.rows[2].query_position), (Some(2), Some(15)));
    // --query all: rows 11 to 16 of a (those that see token 11); layer 1 selects the needle at row 16 only.
    let o = observe(
        &[&fa],
        &[
            "--needle-tokens",
            "10..12",
            "--topk",
            "4",
            "--compress-ratio",
            "1",
            "--config",
            "fp8",
            "--query",
            "all",
            "--depth",
            "50",
            "--healthy",
            "true",
        ],
        &out,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(rows(&out), ["16,50,4,fp8,1,6,0,,true", "16,50,4,fp8,1,6,1,,true", "16,50,4,fp8,1,6,2,,true"]);
}

// Issue 18, item 2: V4 layout (compressed rows of 4 tokens): a needle at
// tokens 6..10 straddles rows 1 and 2; either one counts, row 0 or 3 does not.
// The .npy of the same array gives the same rows.
#[test]
fn a_needle_straddling_compressed_rows_and_npy() {
    let dir = TempDir::new().unwrap();
    // 32 prompt tokens, 1 generated: 32 rows (row 31 = last prompt token), 4 layers, k 2.
    let v = capture(32, 4, 2, &[(31, 0, &[1]), (31, 1, &[2, 7]), (31, 2, &[0, 3]), (31, 3, &[7, -1])]);
    let json = write(dir.path(), "v4.json", &response(32, 1, &v));
    let npy = dir.path().join("v4.npy");
    fs::write(&npy, write_npy_i32(&[32, 4, 2], &v)).unwrap();
    let (out_j, out_n) = (dir.path().join("j.csv"), dir.path().join("n.csv"));
    let args = ["--needle-tokens", "6..10", "--preset", "deepseek-v4-flash", "--config", "fp8-fp32scale", "--depth", "20"];
    let o = observe(&[&json], &[&args[..], &["--topk", "2"]].concat(), &out_j);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        rows(&out_j),
        [
            "32,20,2,fp8-fp32scale,1,1,0,31",
            "32,20,2,fp8-fp32scale,1,1,1,31",
            "32,20,2,fp8-fp32scale,0,1,2,31",
            "32,20,2,fp8-fp32scale,0,1,3,31"
        ]
    );
    let o = observe(&[&npy], &args, &out_n);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(rows(&out_n), rows(&out_j));
}

// Issue 18, items 2 and 6: bad captures are one line naming the file and
// the field, exit 2, and nothing is written.
#[test]
fn bad_captures_are_refused_and_nothing_is_written() {
    let dir = TempDir::new().unwrap();
    let good = capture(8, 2, 2, &[(7, 0, &[3])]);
    let base = ["--needle-tokens", "3..4", "--topk", "2", "--compress-ratio", "1", "--config", "bf16"];
    let mut no_field = response(8, 1, &good);
    no_field["meta_info"].as_object_mut().unwrap().remove("indexer_topk");
    let mut no_counts = response(8, 1, &good);
    no_counts["meta_info"].as_object_mut().unwrap().remove("prompt_tokens");
    let cases: Vec<(serde_json::Value, Vec<&str>, Vec<&str>)> = vec![
        (no_field, vec![], vec!["meta_info.indexer_topk", "missing", "--enable-return-indexer-topk"]),
        (serde_json::json!({"text": "x"}), vec![], vec!["meta_info", "missing"]),
        (no_counts, vec![], vec!["meta_info.prompt_tokens", "--layers"]),
        // 8 × 2 × 2 indices read as k 3: no whole layers.
        (response(8, 1, &good), vec!["--topk", "3"], vec!["meta_info.indexer_topk", "32 indices", "--topk"]),
        (
            response(8, 1, &capture(8, 2, 2, &[(7, 1, &[99])])),
            vec![],
            vec!["meta_info.indexer_topk", "[token 7, layer 1]", "index 99", "past the captured context"],
        ),
        (response(8, 1, &capture(8, 2, 2, &[(7, 0, &[-2])])), vec![], vec!["index -2", "−1 for padding"]),
        (response(8, 1, &good), vec!["--query", "9"], vec!["--query 9", "below the context"]),
        (response(3, 1, &capture(3, 2, 2, &[])), vec![], vec!["--needle-tokens 3..4", "past the context (3 tokens)"]),
    ];
    for (i, (json, extra, must)) in cases.into_iter().enumerate() {
        let f = write(dir.path(), &format!("bad{i}.json"), &json);
        let out = dir.path().join(format!("out{i}.csv"));
        let mut args = base.to_vec();
        if extra.contains(&"--topk") {
            args.drain(2..4);
        }
        args.extend(extra.iter());
        let o = observe(&[&f], &args, &out);
        let name = format!("bad{i}.json");
        assert_one_line_error(&o, &[&[name.as_str()][..], &must[..]].concat());
        assert!(!out.exists() && !out.with_extension("csv.partial").exists(), "case {i} wrote output");
    }
    // A .npy of the wrong rank, and a file that is neither.
    let npy = dir.path().join("flat.npy");
    fs::write(&npy, write_npy_i32(&[8, 4], &[0; 32])).unwrap();
    let out = dir.path().join("x.csv");
    assert_one_line_error(&observe(&[&npy], &base, &out), &["flat.npy", "shape [8, 4]", "[tokens, layers, topk]"]);
    let junk = dir.path().join("junk.bin");
    fs::write(&junk, b"garbage").unwrap();
    assert_one_line_error(&observe(&[&junk], &base, &out), &["junk.bin", "neither a .npy file nor JSON"]);
    // A good file after a bad one: still nothing written.
    let good_file = write(dir.path(), "good.json", &response(8, 1, &good));
    assert_one_line_error(&observe(&[&good_file, &junk], &base, &out), &["junk.bin"]);
    assert!(!out.exists());
    assert_one_line_error(
        &observe(&[&good_file], &["--needle-tokens", "4..3", "--config", "bf16"], &out),
        &["--needle-tokens", "\"4..3\""],
    );
}

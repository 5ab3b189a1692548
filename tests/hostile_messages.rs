//! Issue 30, items 8–10 and 15: hostile inputs that must be refused with one
//! line naming the field (or file and line), the value and what is allowed,
//! and exit code 2; and inputs a user's tools write (Excel CSV) that must be
//! accepted. The cases and their commands come from the newcomer trial
//! (`newcomer-trial.md`, §4.2 and Appendix A). Output-safety cases are in
//! `tests/hostile.rs`.

use assert_cmd::Command;
use std::path::Path;
use std::process::Output;
use tempfile::TempDir;

fn bin() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin!("dsa-recall"))
}

/// The one line on stderr of a run that must fail with exit code 2, without
/// `error: `; it must contain every string of `words`, and no Rust Debug text.
fn refused(output: &Output, words: &[&str]) -> String {
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "exit code {:?}: {err}", output.status.code());
    let line = err.trim_end();
    assert!(!line.contains('\n') && line.starts_with("error: "), "not one error line: {err:?}");
    for w in words {
        assert!(line.contains(w), "{w:?} missing from {line:?}");
    }
    for debug in ["Some(", "None)", "Custom {", "kind: "] {
        assert!(!line.contains(debug), "Rust Debug text {debug:?} in {line:?}");
    }
    line["error: ".len()..].to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const OBS_HEADER: &str = "context_tokens,depth_percent,topk,config,found,total,healthy\n";

/// `diagnose` of `csv` against two hypotheses, few trials, no next experiment.
fn diagnose(csv: &Path) -> Output {
    bin()
        .args(["diagnose", "--hypotheses", "healthy,slot-shift", "--trials", "20", "--no-next", "--observations"])
        .arg(csv)
        .output()
        .unwrap()
}

// Item 9: what Excel's "CSV UTF-8" writes (a byte-order mark, quoted
// fields, CRLF) is read as the plain file is.
#[test]
fn diagnose_reads_excel_csv_with_bom_and_quotes() {
    let dir = TempDir::new().unwrap();
    let plain = format!("# source: test\n{OBS_HEADER}8K,50,512,fp8,2,3,\n4K,50,512,bf16,3,3,\n");
    let excel = format!(
        "\u{feff}# source: test\r\n{}\"8K\",\"50\",\"512\",\"fp8\",2,3,\r\n4K,50,512,bf16,3,3,\r\n",
        OBS_HEADER.replace('\n', "\r\n")
    );
    let a = diagnose(&write(dir.path(), "plain.csv", &plain));
    let b = diagnose(&write(dir.path(), "excel.csv", &excel));
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let text = |o: &Output| String::from_utf8_lossy(&o.stdout).replace("excel.csv", "plain.csv");
    assert_eq!(text(&a), text(&b));
}

// Items 8 and 9: an observation row's values are blamed on the file and
// line, in plain words.
#[test]
fn observation_rows_are_blamed_on_file_and_line_in_plain_words() {
    let dir = TempDir::new().unwrap();
    let conflict = write(dir.path(), "conflict.csv", &format!("{OBS_HEADER}4K,50,512,fp8,1,3,true\n4K,50,512,fp8,1,3,false\n"));
    let line = refused(&diagnose(&conflict), &["conflict.csv:3: healthy = false contradicts line 2"]);
    assert!(line.ends_with("(healthy = true)"), "{line}");
    let huge = write(dir.path(), "huge.csv", &format!("{OBS_HEADER}1024M,50,512,fp8,1,3,\n"));
    refused(&diagnose(&huge), &["huge.csv:2: context_tokens = \"1024M\"", "up to 16M"]);
    let quoted_comma = write(dir.path(), "qc.csv", &format!("{OBS_HEADER}\"8,192\",50,512,fp8,1,3,\n"));
    refused(&diagnose(&quoted_comma), &["qc.csv:2: context_tokens = \"8,192\""]);
}

/// A little-endian float32 `.npy` file of `shape`, values from `value(i)`.
fn write_npy(path: &Path, shape: &[usize], value: impl Fn(usize) -> f32) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_text}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for i in 0..shape.iter().product::<usize>() {
        bytes.extend(value(i).to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

/// q [8, 128], k [512, 128], w [8] as .npy files in `dir`:
/// (q, k, w).
fn npy_capture(dir: &Path) -> [std::path::PathBuf; 3] {
    let wave = |i: usize| ((i * 7919 % 1000) as f32 / 500.0) - 1.0;
    let [q, k, w] = ["q.npy", "k.npy", "w.npy"].map(|n| dir.join(n));
    write_npy(&q, &[8, 128], wave);
    write_npy(&k, &[512, 128], |i| wave(i + 3));
    write_npy(&w, &[8], |i| 1.0 + i as f32 / 8.0);
    [q, k, w]
}

fn replay(q: &Path, k: &Path, w: &Path, extra: &[&str]) -> Output {
    bin().arg("replay").arg("--q-npy").arg(q).arg("--k-npy").arg(k).arg("--weights-npy").arg(w).args(extra).output().unwrap()
}

// Item 10: a bad keys file is named, not the queries file.
#[test]
fn replay_names_the_npy_file_at_fault() {
    let dir = TempDir::new().unwrap();
    let [q, k, w] = npy_capture(dir.path());
    let k_0d = dir.path().join("k_0d.npy");
    write_npy(&k_0d, &[], |_| 1.0);
    let line = refused(&replay(&q, &k_0d, &w, &["--topk", "64"]), &["k_0d.npy: keys have shape []"]);
    assert!(!line.contains("q.npy"), "{line}");
    let w_bad = dir.path().join("w_bad.npy");
    write_npy(&w_bad, &[3], |_| 1.0);
    refused(&replay(&q, &k, &w_bad, &["--topk", "64"]), &["w_bad.npy: weights have shape [3]"]);
    let k_nan = dir.path().join("k_nan.npy");
    write_npy(&k_nan, &[512, 128], |i| if i == 99 { f32::NAN } else { 1.0 });
    refused(&replay(&q, &k_nan, &w, &["--topk", "64"]), &["k_nan.npy: tensors hold NaN"]);
    assert!(replay(&q, &k, &w, &["--topk", "64"]).status.success());
}

// Item 10: one rule for every top-k size: from 1 to the rows it selects
// from, whether it comes from `replay --topk`, `sweep --topk` or a
// variant's `topk=N`.
#[test]
fn every_topk_meets_one_bound() {
    let dir = TempDir::new().unwrap();
    let [q, k, w] = npy_capture(dir.path());
    refused(&replay(&q, &k, &w, &["--topk", "99999"]), &["invalid --topk = 99999: a top-k from 1 to 512, the key rows of the capture"]);
    refused(&replay(&q, &k, &w, &["--topk", "64,513"]), &["invalid --topk = 513: a top-k from 1 to 512"]);
    let sweep = |extra: &[&str]| {
        bin().args(["sweep", "--contexts", "8K", "--trials", "10", "--out"]).arg(dir.path().join("o")).args(extra).output().unwrap()
    };
    let rule = "a top-k from 1 to 2048, the candidate rows of the longest context (8192 tokens): a larger k selects every row";
    refused(&sweep(&["--topk", "1000000"]), &["invalid sweep.topk (--topk) = 1000000: ", rule]);
    refused(
        &sweep(&["--precisions", "fp8+topk=99999999999"]),
        &["invalid sweep.precisions (--precisions) = \"fp8+topk=99999999999\": ", rule],
    );
    assert!(!dir.path().join("o").exists(), "nothing may be written");
}

// Item 10: `calibrate --fit` echoes the field as written.
#[test]
fn calibrate_fit_echoes_the_field_as_written() {
    let dir = TempDir::new().unwrap();
    let obs = write(dir.path(), "obs.csv", &format!("{OBS_HEADER}8K,50,512,bf16,3,3,true\n"));
    let o = bin()
        .args(["calibrate", "--fit", "nonsense.field", "--observations"])
        .arg(&obs)
        .arg("--out")
        .arg(dir.path().join("c.toml"))
        .output();
    let line = refused(&o.unwrap(), &["invalid --fit = nonsense.field: a knob of the scenario file's sections"]);
    assert!(!line.contains("=1"), "{line}");
}

// Item 10: one capture given twice would count each prompt twice.
#[test]
fn observe_refuses_the_same_capture_twice() {
    let dir = TempDir::new().unwrap();
    let cap = write(dir.path(), "cap.json", "{}");
    let again = dir.path().join(".").join("cap.json");
    let o = bin()
        .args(["observe", "--needle-tokens", "1000..1016", "--config", "fp8", "--capture"])
        .arg(&cap)
        .arg(&again)
        .arg("--out")
        .arg(dir.path().join("obs.csv"))
        .output()
        .unwrap();
    refused(&o, &["invalid --capture = ", "cap.json", "each capture file once: it is the same file as", "its prompts would count twice"]);
    assert!(!dir.path().join("obs.csv").exists());
}

/// `sweep --config FILE` with a tiny grid, plus `extra`.
fn sweep_with_config(dir: &Path, config: &Path, extra: &[&str]) -> Output {
    bin().arg("sweep").arg("--config").arg(config).args(["--trials", "10"]).args(extra).arg("--out").arg(dir.join("o")).output().unwrap()
}

// Item 8: a value from the scenario file is blamed on the file, its key and
// line, not on a flag that was never typed; a flag's own value still is.
#[test]
fn config_file_values_are_blamed_on_the_file_key_and_line() {
    let dir = TempDir::new().unwrap();
    let nan = write(dir.path(), "strength_nan.toml", "# hostile\n[needle]\nunit = \"strength\"\nstrength = nan\n");
    let line = refused(
        &sweep_with_config(dir.path(), &nan, &["--contexts", "8K"]),
        &["strength_nan.toml: line 4: invalid needle.strength = NaN: a finite number ≥ 0"],
    );
    assert!(!line.contains("--needle-strength"), "{line}");
    let empty = write(dir.path(), "ctx_empty.toml", "[sweep]\ncontexts = []\n");
    refused(&sweep_with_config(dir.path(), &empty, &[]), &["ctx_empty.toml: line 2: invalid sweep.contexts = \"\""]);
    let name = write(dir.path(), "prec.toml", "[[precision]]\nname = \"ok\"\n[[precision]]\nname = \"π8\"\n");
    refused(&sweep_with_config(dir.path(), &name, &["--contexts", "8K"]), &["prec.toml: line 4: invalid precision[1].name = \"π8\""]);
    // The flag wins over the file, and is blamed itself.
    refused(
        &sweep_with_config(dir.path(), &nan, &["--contexts", "8K", "--needle-strength", "inf"]),
        &["invalid needle.strength (--needle-strength) = inf"],
    );
    assert!(!dir.path().join("o").exists(), "nothing may be written");
}

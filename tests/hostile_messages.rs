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

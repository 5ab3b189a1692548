//! `dsa-recall quantize` end to end: printed values parse back to exactly the
//! library's dequantized f32, stdin and arguments agree, blocks share scales,
//! bad input is one line on stderr with exit code 2.

use assert_cmd::Command;
use dsa_recall::numerics::quantize::QuantizeSpec;

fn cmd() -> Command {
    Command::cargo_bin("dsa-recall").expect("binary")
}

/// A few hundred values spread over every binade that matters, both signs,
/// exact ties and specials.
fn inputs() -> Vec<f32> {
    let mut v: Vec<f32> = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let exponent = (x % 60) as i32 - 40; // 2^-40 … 2^19
        let mantissa = 1.0 + (x >> 40) as f32 / (1u64 << 24) as f32;
        let sign = if x & 1 == 0 { 1.0 } else { -1.0 };
        v.push(sign * mantissa * 2f32.powi(exponent));
    }
    v.extend([0.0, -0.0, 0.25, 0.75, 464.0, 448.0, 1e-45, 65520.0, 6.0, 7.0, f32::MAX, f32::INFINITY]);
    v
}

fn stdout_lines(output: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout).lines().map(str::to_string).collect()
}

fn run_stdin(args: &[&str], values: &[f32]) -> Vec<String> {
    let text: String = values.iter().map(|v| format!("{v}\n")).collect();
    let out = cmd().arg("quantize").args(args).write_stdin(text).output().expect("run");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    stdout_lines(&out)
}

fn check_round_trip(args: &[&str], spec: QuantizeSpec) {
    let values = inputs();
    let lines = run_stdin(args, &values);
    let expected = spec.quantize(&values);
    assert_eq!(lines.len(), expected.len(), "{args:?}");
    for ((line, (want, _)), x) in lines.iter().zip(&expected).zip(&values) {
        let got: f32 = line.parse().unwrap_or_else(|_| panic!("{args:?}: {line:?} does not parse"));
        if want.is_nan() {
            assert!(got.is_nan(), "{args:?} {x}: {line}");
        } else {
            assert_eq!(got.to_bits(), want.to_bits(), "{args:?} {x}: {line}");
        }
    }
}

#[test]
fn printed_values_round_trip_for_every_format_and_scale() {
    for format in ["bf16", "fp16", "e4m3fn", "e5m2", "e2m1"] {
        for (extra, block, scale, saturate) in [
            (vec![], None, None, false),
            (vec!["--saturate"], None, None, true),
            (vec!["--block", "32", "--scale", "ue8m0"], Some(32), Some("ue8m0"), false),
            (vec!["--block", "16", "--scale", "e4m3"], Some(16), Some("e4m3"), false),
            (vec!["--block", "128", "--scale", "fp32"], Some(128), Some("fp32"), false),
            (vec!["--block", "32", "--scale", "ue8m0-floor"], Some(32), Some("ue8m0-floor"), false),
        ] {
            let mut args = vec!["--format", format];
            args.extend(extra);
            let spec = QuantizeSpec::from_flags(format, block, scale, saturate, None).expect("spec");
            check_round_trip(&args, spec);
        }
    }
}

#[test]
fn stdin_and_arguments_give_the_same_output() {
    let values = ["1.3", "-2.75", "0.001", "300", "7e-3", "-0"];
    let from_args = cmd().args(["quantize", "--format", "e4m3fn", "--codes", "--"]).args(values).output().expect("run");
    assert!(from_args.status.success());
    let from_stdin =
        cmd().args(["quantize", "--format", "e4m3fn", "--codes"]).write_stdin(values.join("\n") + "\n\n").output().expect("run");
    assert!(from_stdin.status.success());
    assert_eq!(from_args.stdout, from_stdin.stdout);
    assert_eq!(stdout_lines(&from_args)[5], "-0 0x80");
}

#[test]
fn blocks_are_scaled_together() {
    // Blocks of 2 with DeepSeek's ue8m0 rule: [12, 1] → scale 2; [0.2, 0.1] → scale 2^-4;
    // the trailing [5] alone → scale 1, and 5 ties to the even 4.
    let out = cmd()
        .args(["quantize", "--format", "e2m1", "--block", "2", "--scale", "ue8m0", "--codes", "12", "1", "0.2", "0.1", "5"])
        .output()
        .expect("run");
    assert!(out.status.success());
    assert_eq!(stdout_lines(&out), ["12 0x7", "1 0x1", "0.1875 0x5", "0.09375 0x3", "4 0x6"]);
    // Without --block one scale covers everything: 0.1 is lost next to 12 (scale 2: 0.05 → 0).
    let out = cmd().args(["quantize", "--format", "e2m1", "--scale", "ue8m0", "12", "0.1"]).output().expect("run");
    assert_eq!(stdout_lines(&out), ["12", "0"]);
    // The amax floor applies: an all-zero block keeps zeros; a raised floor (scale 16) zeroes small values.
    let out = cmd().args(["quantize", "--format", "e4m3fn", "--scale", "ue8m0", "--amax-floor", "4480", "0.001"]).output().expect("run");
    assert_eq!(stdout_lines(&out), ["0"]);
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    for args in [
        vec!["quantize", "--format", "fp7", "1"],
        vec!["quantize", "--format", "e2m1", "abc"],
        vec!["quantize", "--format", "e2m1", "--block", "0", "--scale", "ue8m0", "1"],
        vec!["quantize", "--format", "e2m1", "--block", "4", "1"],
        vec!["quantize", "--format", "e2m1", "--scale", "ue9", "1"],
        vec!["quantize", "--format", "e2m1", "--scale", "ue8m0", "--amax-floor", "-1", "1"],
        vec!["quantize", "--format", "e2m1", "--block", "x", "--scale", "ue8m0", "1"],
        vec!["quantize", "1"],
    ] {
        let out = cmd().args(&args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    let out = cmd().args(["quantize", "--format", "e2m1"]).write_stdin("1\n2\nnope\n").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3"));
}

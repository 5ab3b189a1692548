//! Bit-exact agreement with `ml_dtypes`, from the golden files written by
//! `tools/golden_formats.py` (see that script for the file layout).

use super::format::{quantize_dequantize, BlockScaling, ElementFormat, Overflow, QuantizedBlocks, ScaleFormat};

/// How many mismatches to print before giving up on a file.
const SHOWN_MISMATCHES: usize = 20;

fn read_golden(file: &str) -> Result<String, String> {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))
}

fn hex(field: &str) -> Result<u32, String> {
    u32::from_str_radix(field, 16).map_err(|e| format!("bad hex {field:?}: {e}"))
}

fn hex_list(field: &str) -> Result<Vec<u32>, String> {
    field.split_whitespace().map(hex).collect()
}

/// Data lines (comments and blanks skipped) with their 1-based line numbers.
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// Panics (so the message prints unescaped) if any case disagreed.
fn finish(file: &str, checked: usize, mismatches: &[String]) {
    let shown = mismatches.iter().take(SHOWN_MISMATCHES).cloned().collect::<Vec<_>>().join("\n");
    assert!(mismatches.is_empty(), "{} of {checked} cases in {file} disagree with ml_dtypes; first ones:\n{shown}", mismatches.len());
}

#[test]
fn element_formats_match_ml_dtypes_bit_for_bit() -> Result<(), String> {
    let file = "golden_formats.csv";
    let text = read_golden(file)?;
    let mut mismatches = Vec::new();
    let mut per_format = std::collections::BTreeMap::<&str, usize>::new();
    for (line_no, line) in data_lines(&text) {
        let fields: Vec<&str> = line.split(',').collect();
        let format: ElementFormat =
            fields.get(1).ok_or(format!("line {line_no}: no format"))?.parse().map_err(|e| format!("line {line_no}: {e}"))?;
        *per_format.entry(format.name()).or_default() += 1;
        match (fields[0], fields.len()) {
            ("dec", 4) => {
                let (code, expected) = (hex(fields[2])?, hex(fields[3])?);
                let got = format.decode(code).to_bits();
                if got != expected {
                    mismatches.push(format!("line {line_no}: decode {format} {code:#x}: got {got:08x}, ml_dtypes {expected:08x}"));
                }
            }
            ("enc", 7) => {
                let input = hex(fields[2])?;
                for (overflow, code_field, value_field) in [(Overflow::Cast, 3, 4), (Overflow::Saturate, 5, 6)] {
                    let (expected_code, expected_bits) = (hex(fields[code_field])?, hex(fields[value_field])?);
                    let code = format.encode(f32::from_bits(input), overflow);
                    let bits = format.round_trip(f32::from_bits(input), overflow).to_bits();
                    if code != expected_code || bits != expected_bits {
                        mismatches.push(format!(
                            "line {line_no}: {format} {overflow:?} of {input:08x} ({}): got code {code:#x} = {bits:08x}, ml_dtypes {expected_code:#x} = {expected_bits:08x}",
                            f32::from_bits(input)
                        ));
                    }
                }
            }
            _ => return Err(format!("line {line_no}: unexpected record {line:?}")),
        }
    }
    // Guard against an empty or truncated file passing silently.
    for format in ElementFormat::ALL {
        let count = per_format.get(format.name()).copied().unwrap_or(0);
        if count < 1000 {
            return Err(format!("{file}: only {count} cases for {format}"));
        }
    }
    finish(file, per_format.values().sum(), &mismatches);
    Ok(())
}

#[test]
fn block_scaling_matches_the_reference_rules() -> Result<(), String> {
    let file = "golden_block_scaling.csv";
    let text = read_golden(file)?;
    let mut mismatches = Vec::new();
    let mut checked = 0;
    for (line_no, line) in data_lines(&text) {
        let fields: Vec<&str> = line.split(',').collect();
        let [rule, scale, inputs, codes, dequantized] = fields[..] else {
            return Err(format!("line {line_no}: expected 5 fields"));
        };
        let (element, scaling) = match rule {
            "fp8" => (ElementFormat::E4m3fn, BlockScaling::DEEPSEEK_FP8),
            "fp4" => (ElementFormat::E2m1, BlockScaling::DEEPSEEK_FP4),
            "fp8_fp32" => (ElementFormat::E4m3fn, BlockScaling { scale: ScaleFormat::Fp32, ..BlockScaling::DEEPSEEK_FP8 }),
            "mxfp8" => (ElementFormat::E4m3fn, BlockScaling::OCP_MX),
            "mxfp4" => (ElementFormat::E2m1, BlockScaling::OCP_MX),
            "nvfp4" => (ElementFormat::E2m1, BlockScaling::NVFP4),
            other => return Err(format!("line {line_no}: unknown rule {other}")),
        };
        let mut values: Vec<f32> = hex_list(inputs)?.into_iter().map(f32::from_bits).collect();
        let mut quantized = QuantizedBlocks::default();
        let d = values.len();
        quantize_dequantize(&mut values, d, element, &scaling, Some(&mut quantized)).map_err(|e| format!("line {line_no}: {e}"))?;
        let got_bits: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
        let expected_scale = hex(scale)?;
        if quantized.scales.iter().map(|s| s.to_bits()).collect::<Vec<_>>() != [expected_scale] {
            mismatches.push(format!(
                "line {line_no} ({rule}): scales {:?}, reference {}",
                quantized.scales,
                f32::from_bits(expected_scale)
            ));
        }
        if quantized.codes != hex_list(codes)? {
            mismatches.push(format!("line {line_no} ({rule}): codes differ"));
        }
        let expected_bits = hex_list(dequantized)?;
        if let Some(i) = (0..expected_bits.len()).find(|&i| got_bits.get(i) != Some(&expected_bits[i])) {
            mismatches.push(format!(
                "line {line_no} ({rule}): value {i} dequantized to {:08x}, reference {:08x}",
                got_bits.get(i).copied().unwrap_or(0),
                expected_bits[i]
            ));
        }
        checked += 1;
    }
    if checked < 150 {
        return Err(format!("{file}: only {checked} blocks"));
    }
    finish(file, checked, &mismatches);
    Ok(())
}

#[test]
fn e4m3fnuz_matches_ml_dtypes_bit_for_bit() -> Result<(), String> {
    use super::format::element::e4m3fnuz;
    let file = "golden_e4m3fnuz.csv";
    let text = read_golden(file)?;
    let mut mismatches = Vec::new();
    let mut checked = 0;
    for (line_no, line) in data_lines(&text) {
        let fields: Vec<&str> = line.split(',').collect();
        match (fields[0], fields.len()) {
            ("dec", 4) => {
                let (code, expected) = (hex(fields[2])?, hex(fields[3])?);
                let got = e4m3fnuz::decode(code).to_bits();
                if got != expected {
                    mismatches.push(format!("line {line_no}: decode {code:#x}: got {got:08x}, ml_dtypes {expected:08x}"));
                }
            }
            ("enc", 7) => {
                let input = f32::from_bits(hex(fields[2])?);
                for (overflow, code_field) in [(Overflow::Cast, 3), (Overflow::Saturate, 5)] {
                    let code = e4m3fnuz::encode(input, overflow);
                    if code != hex(fields[code_field])? {
                        mismatches
                            .push(format!("line {line_no}: {overflow:?} of {input:e}: got {code:#x}, ml_dtypes {}", fields[code_field]));
                    }
                }
            }
            _ => return Err(format!("line {line_no}: unexpected record {line:?}")),
        }
        checked += 1;
    }
    if checked < 1000 {
        return Err(format!("{file}: only {checked} cases"));
    }
    finish(file, checked, &mismatches);
    Ok(())
}

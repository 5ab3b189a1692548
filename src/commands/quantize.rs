//! `quantize`: numbers through one element format and scale rule, each
//! printed back dequantized (and with its code).

use crate::base::files::{read_stream_capped, STDIN_CAP};
use crate::error::Error;
use crate::numerics::quantize::{format_line, parse_value, QuantizeSpec};
use std::io::{Read, Write};

/// `quantize` as asked: the format flags as typed.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizeRequest {
    pub format: String,
    pub block: Option<usize>,
    pub scale: Option<String>,
    pub saturate: bool,
    pub amax_floor: Option<f32>,
    /// Print each code's bit pattern after its value.
    pub codes: bool,
}

/// `quantize`: `values` (or, when there are none, one number per line of
/// `input`, blank lines skipped) quantized, one line each to `out`. The
/// input is read whole, at most [`STDIN_CAP`] bytes: an endless stream
/// (`< /dev/zero`) is refused after that much, not held in memory.
pub fn quantize(request: &QuantizeRequest, values: &[String], input: &mut dyn Read, out: &mut dyn Write) -> Result<(), Error> {
    let spec = QuantizeSpec::from_flags(&request.format, request.block, request.scale.as_deref(), request.saturate, request.amax_floor)?;
    let mut inputs = Vec::new();
    if values.is_empty() {
        let bytes = read_stream_capped(input, STDIN_CAP).map_err(|e| match e.kind() {
            std::io::ErrorKind::FileTooLarge => {
                Error::Input { location: "stdin".into(), message: format!("{e}; pass fewer numbers per run") }
            }
            std::io::ErrorKind::TimedOut => Error::Input { location: "stdin".into(), message: e.to_string() },
            _ => Error::io("reading stdin", e),
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let line = e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
            Error::Input { location: format!("stdin line {line}"), message: "not UTF-8 text: one number per line".into() }
        })?;
        for (i, line) in text.lines().enumerate() {
            if !line.trim().is_empty() {
                inputs.push(parse_value(line, || format!("line {}", i + 1))?);
            }
        }
    } else {
        for (i, text) in values.iter().enumerate() {
            inputs.push(parse_value(text, || format!("argument {}", i + 1))?);
        }
    }
    for (value, code) in spec.quantize(&inputs) {
        writeln!(out, "{}", format_line(&spec, value, code, request.codes)).map_err(|e| Error::io("writing stdout", e))?;
    }
    out.flush().map_err(|e| Error::io("writing stdout", e))
}

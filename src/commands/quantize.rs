//! `quantize`: numbers through one element format and scale rule, each
//! printed back dequantized (and with its code).

use crate::error::Error;
use crate::numerics::quantize::{format_line, parse_value, QuantizeSpec};
use std::io::{BufRead, Write};

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
/// `input`, blank lines skipped) quantized, one line each to `out`.
pub fn quantize(request: &QuantizeRequest, values: &[String], input: &mut dyn BufRead, out: &mut dyn Write) -> Result<(), Error> {
    let spec = QuantizeSpec::from_flags(&request.format, request.block, request.scale.as_deref(), request.saturate, request.amax_floor)?;
    let mut inputs = Vec::new();
    if values.is_empty() {
        for (i, line) in input.lines().enumerate() {
            let line = line.map_err(|e| Error::io("reading stdin", e))?;
            if !line.trim().is_empty() {
                inputs.push(parse_value(&line, || format!("line {}", i + 1))?);
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

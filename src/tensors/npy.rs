//! A strict reader of NumPy `.npy` files (format 1.0–3.0) holding f32, f16,
//! bf16-as-`<V2`-is-not-standard, or f64 little-endian C-order arrays. Every
//! declared size is checked against the bytes present before allocating.

use super::{bad_file, read_bounded};
use crate::error::Error;
use std::path::Path;

/// An array as f32 values and its shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Reads `path` as a `.npy` array converted to f32.
pub fn read_npy(path: &Path) -> Result<Array, Error> {
    let bytes = read_bounded(path)?;
    parse_npy(&bytes).map_err(|m| bad_file(path, m))
}

/// Parses `.npy` bytes (errors are messages for the caller to locate).
pub fn parse_npy(b: &[u8]) -> Result<Array, String> {
    let (descr, shape, payload) = parse_header(b)?;
    let width = match descr {
        "<f4" | "f4" => 4,
        "<f2" | "f2" => 2,
        "<f8" | "f8" => 8,
        other => return Err(format!("dtype {other:?} is not supported (use float32, float16 or float64, little-endian)")),
    };
    check_payload(&shape, width, payload)?;
    let data = match width {
        4 => payload.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        2 => payload.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        _ => payload.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).collect(),
    };
    Ok(Array { shape, data })
}

/// An integer array (int32 or int64, little-endian) and its shape.
#[derive(Clone, Debug, PartialEq)]
pub struct IntArray {
    pub shape: Vec<usize>,
    pub data: Vec<i64>,
}

/// Parses `.npy` bytes holding int32 or int64 values (indices).
pub fn parse_npy_int(b: &[u8]) -> Result<IntArray, String> {
    let (descr, shape, payload) = parse_header(b)?;
    let width = match descr {
        "<i4" | "i4" => 4,
        "<i8" | "i8" => 8,
        other => return Err(format!("dtype {other:?} is not supported here (use int32 or int64, little-endian)")),
    };
    check_payload(&shape, width, payload)?;
    let data = match width {
        4 => payload.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64).collect(),
        _ => payload.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
    };
    Ok(IntArray { shape, data })
}

/// Any C-order array as its dtype text (`<f4`, `|u1`, …), shape and
/// payload bytes, checked to hold exactly the values the shape declares for
/// the dtype's width (the `check` command reads byte tensors this way).
pub fn parse_npy_raw(b: &[u8]) -> Result<(String, Vec<usize>, &[u8]), String> {
    let (descr, shape, payload) = parse_header(b)?;
    let width = descr
        .trim_start_matches(['<', '|', '='])
        .get(1..)
        .and_then(|w| w.parse::<usize>().ok())
        .filter(|w| [1, 2, 4, 8].contains(w) && !descr.starts_with('>'))
        .ok_or_else(|| format!("dtype {descr:?} is not supported (use a little-endian integer or float dtype)"))?;
    check_payload(&shape, width, payload)?;
    Ok((descr.to_string(), shape, payload))
}

/// The dtype text, the shape and the payload bytes of a C-order array.
fn parse_header(b: &[u8]) -> Result<(&str, Vec<usize>, &[u8]), String> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (bad magic)".into());
    }
    let (header_len, start): (usize, usize) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 => {
            if b.len() < 12 {
                return Err("truncated header".into());
            }
            (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12)
        }
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let end = start.checked_add(header_len).filter(|&e| e <= b.len()).ok_or("header longer than the file")?;
    let header = std::str::from_utf8(&b[start..end]).map_err(|_| "header is not text")?;
    let field = |key: &str| -> Result<&str, String> {
        let i = header.find(&format!("'{key}'")).ok_or(format!("header has no '{key}'"))?;
        let rest = header[i + key.len() + 2..].trim_start().strip_prefix(':').ok_or("malformed header")?;
        Ok(rest.trim_start())
    };
    let descr = field("descr")?;
    let descr = descr.split('\'').nth(1).ok_or("malformed descr")?;
    let fortran = field("fortran_order")?;
    if fortran.starts_with("True") {
        return Err("Fortran-order arrays are not supported; save with np.ascontiguousarray".into());
    }
    let shape_text = field("shape")?;
    let shape_text = shape_text.strip_prefix('(').and_then(|s| s.split(')').next()).ok_or("malformed shape")?;
    let mut shape = Vec::new();
    for part in shape_text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        shape.push(part.parse::<usize>().map_err(|_| format!("bad shape entry {part:?}"))?);
    }
    Ok((descr, shape, &b[end..]))
}

/// Checks that the payload holds exactly the values the shape declares.
fn check_payload(shape: &[usize], width: usize, payload: &[u8]) -> Result<(), String> {
    let count = shape.iter().try_fold(1usize, |a, &x| a.checked_mul(x)).ok_or("declared shape overflows")?;
    let need = count.checked_mul(width).ok_or("declared size overflows")?;
    if payload.len() != need {
        return Err(format!("declares {count} values ({need} bytes) but holds {} bytes", payload.len()));
    }
    Ok(())
}

/// Serializes an f32 array as `.npy` 1.0 (for tests and tools).
pub fn write_npy(shape: &[usize], data: &[f32]) -> Vec<u8> {
    let mut out = npy_header("<f4", shape);
    out.extend(data.iter().flat_map(|x| x.to_le_bytes()));
    out
}

/// Serializes an int32 array as `.npy` 1.0 (an engine's captured indices).
pub fn write_npy_i32(shape: &[usize], data: &[i32]) -> Vec<u8> {
    let mut out = npy_header("<i4", shape);
    out.extend(data.iter().flat_map(|x| x.to_le_bytes()));
    out
}

/// The `.npy` 1.0 header of a C-order array of `descr` (`<f4`, `|u1`, …).
pub fn npy_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_lies() {
        let bytes = write_npy(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, -6.0]);
        let a = parse_npy(&bytes).unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.data[5], -6.0);
        assert!(parse_npy(&bytes[..bytes.len() - 1]).unwrap_err().contains("holds"));
        // Edit the header in place (the magic byte is not UTF-8, so no String round trip).
        let edit = |from: &str, to: &str| {
            let at = bytes.windows(from.len()).position(|w| w == from.as_bytes()).unwrap();
            [&bytes[..at], to.as_bytes(), &bytes[at + from.len()..]].concat()
        };
        assert!(parse_npy(&edit("(2, 3)", "(99999999999, 99999999999)")).unwrap_err().contains("overflows"));
        assert!(parse_npy(&edit("(2, 3)", "(4, 3)")).unwrap_err().contains("holds"));
        assert!(parse_npy(b"\x93NUMPY").is_err());
        assert!(parse_npy(b"garbage garbage").unwrap_err().contains("magic"));
        assert!(parse_npy(&edit("<f4", "<i8")).unwrap_err().contains("not supported"));
        assert!(parse_npy_int(&bytes).unwrap_err().contains("int32 or int64"));
        let ints = write_npy_i32(&[2, 2], &[-1, 0, 7, i32::MAX]);
        assert_eq!(parse_npy_int(&ints).unwrap(), IntArray { shape: vec![2, 2], data: vec![-1, 0, 7, i32::MAX as i64] });
        assert!(parse_npy(&ints).unwrap_err().contains("not supported"));
    }
}

//! A streaming reader of safetensors checkpoints: parses each shard's
//! header (8-byte little-endian length, then JSON) and reads only the bytes
//! of the tensors asked for (seek + read), never a whole shard. Multi-shard
//! checkpoints are found through `model.safetensors.index.json`
//! (`weight_map`: tensor name → shard file). Layout: docs/CALIBRATION.md
//! "Calibrating from a checkpoint".

use super::bad_file;
use crate::error::Error;
use crate::numerics::format::ElementFormat;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Largest safetensors header this reader parses (real shards' headers are
/// well under 1 MB).
const MAX_HEADER_BYTES: u64 = 100 << 20;

/// Largest single tensor read (the indexer's tensors are a few MB each).
const MAX_TENSOR_BYTES: u64 = 1 << 30;

/// FP8 weights of DeepSeek's checkpoints carry one scale per 128 × 128 block.
pub const FP8_WEIGHT_BLOCK: usize = 128;

/// One tensor's place in its shard.
#[derive(Clone, Debug)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    /// Absolute byte range in the shard file.
    start: u64,
    end: u64,
}

/// A checkpoint: which file holds each tensor, with shard headers parsed on
/// first use.
pub struct Checkpoint {
    files: BTreeMap<String, PathBuf>,
    headers: RefCell<BTreeMap<PathBuf, BTreeMap<String, Entry>>>,
}

fn at(path: &Path, tensor: &str) -> String {
    format!("{}: tensor {tensor}", path.display())
}

fn bad_tensor(path: &Path, tensor: &str, message: impl Into<String>) -> Error {
    Error::Input { location: at(path, tensor), message: message.into() }
}

fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F32" | "I32" | "U32" => 4,
        "BF16" | "F16" | "I16" | "U16" => 2,
        "F8_E4M3" | "F8_E5M2" | "F8_E8M0" | "I8" | "U8" | "BOOL" => 1,
        "F64" | "I64" | "U64" => 8,
        _ => return None,
    })
}

/// Parses one shard's header; every entry's byte range is checked against
/// the file's length, so a truncated shard fails here.
fn read_header(path: &Path) -> Result<BTreeMap<String, Entry>, Error> {
    let mut f = crate::base::files::open_input(path).map_err(|e| bad_file(path, format!("cannot read: {e}")))?;
    let len = f.metadata().map_err(|e| bad_file(path, format!("cannot read: {e}")))?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n).map_err(|_| bad_file(path, "not a safetensors file: shorter than its 8-byte header length"))?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_BYTES || n > len - 8 {
        return Err(bad_file(path, format!("not a safetensors file: header length {n} does not fit in {len} bytes")));
    }
    let mut text = vec![0u8; n as usize];
    f.read_exact(&mut text).map_err(|e| bad_file(path, format!("cannot read the header: {e}")))?;
    let json: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad_file(path, format!("not a safetensors file: header is not JSON ({e})")))?;
    let map = json.as_object().ok_or_else(|| bad_file(path, "not a safetensors file: header is not a JSON object"))?;
    let data_len = len - 8 - n;
    let mut out = BTreeMap::new();
    for (name, info) in map {
        if name == "__metadata__" {
            continue;
        }
        let bad = |m: &str| bad_tensor(path, name, m.to_string());
        let dtype = info.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| bad("header entry has no dtype"))?;
        let shape: Vec<usize> = info
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| bad("header entry has no shape"))?
            .iter()
            .map(|v| v.as_u64().and_then(|v| usize::try_from(v).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("shape is not a list of sizes"))?;
        let offsets = info.get("data_offsets").and_then(|s| s.as_array()).ok_or_else(|| bad("header entry has no data_offsets"))?;
        let (begin, end) = match offsets.as_slice() {
            [a, b] => (a.as_u64().ok_or_else(|| bad("bad data_offsets"))?, b.as_u64().ok_or_else(|| bad("bad data_offsets"))?),
            _ => return Err(bad("data_offsets is not [begin, end]")),
        };
        if begin > end || end > data_len {
            return Err(bad_tensor(
                path,
                name,
                format!("bytes {begin}..{end} lie beyond the file's {data_len} data bytes (truncated file?)"),
            ));
        }
        if let Some(size) = dtype_bytes(dtype) {
            let numel = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
            if numel.and_then(|n| n.checked_mul(size)) != Some(end - begin) {
                return Err(bad_tensor(path, name, format!("shape {shape:?} of {dtype} does not match its {} bytes", end - begin)));
            }
        }
        out.insert(name.clone(), Entry { dtype: dtype.to_string(), shape, start: 8 + n + begin, end: 8 + n + end });
    }
    Ok(out)
}

/// The shards an index JSON names, by tensor.
fn read_index(path: &Path) -> Result<BTreeMap<String, PathBuf>, Error> {
    let text = crate::base::files::read_capped(path, crate::base::files::JSON_FILE_CAP)
        .map_err(|e| bad_file(path, format!("cannot read: {e}")))?;
    let json: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad_file(path, format!("not a safetensors index: not JSON ({e})")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad_file(path, "not a safetensors index: no \"weight_map\" object"))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut out = BTreeMap::new();
    for (name, file) in map {
        let file = file.as_str().ok_or_else(|| bad_file(path, format!("weight_map entry {name:?} is not a file name")))?;
        // Lexically inside the index's directory: no `..`, root or drive.
        // (A symlink in the directory is followed: the Hugging Face cache
        // links each shard to a blob elsewhere.)
        if file.is_empty() || !Path::new(file).components().all(|c| matches!(c, std::path::Component::Normal(_))) {
            return Err(bad_file(
                path,
                format!("weight_map entry {name:?} = {file:?}: a file name inside the index's directory (no \"..\" or absolute paths)"),
            ));
        }
        let shard = dir.join(file);
        if !shard.is_file() {
            return Err(bad_file(path, format!("weight_map sends tensor {name} to {file}, which does not exist")));
        }
        out.insert(name.clone(), shard);
    }
    Ok(out)
}

impl Checkpoint {
    /// Opens a checkpoint from shard files, index JSONs, or a directory
    /// (its `model.safetensors.index.json`, else every `*.safetensors` in it).
    /// A tensor found in two places is refused.
    pub fn open(inputs: &[PathBuf]) -> Result<Self, Error> {
        let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
        let mut headers = BTreeMap::new();
        let add = |name: String, file: PathBuf, files: &mut BTreeMap<String, PathBuf>| -> Result<(), Error> {
            if let Some(other) = files.get(&name) {
                if *other != file {
                    return Err(bad_tensor(&file, &name, format!("is also in {}", other.display())));
                }
            }
            files.insert(name, file);
            Ok(())
        };
        let mut expanded = Vec::new();
        for input in inputs {
            if input.is_dir() {
                let index = input.join("model.safetensors.index.json");
                if index.is_file() {
                    expanded.push(index);
                } else {
                    let mut shards: Vec<PathBuf> = std::fs::read_dir(input)
                        .map_err(|e| bad_file(input, format!("cannot read: {e}")))?
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                        .collect();
                    shards.sort();
                    if shards.is_empty() {
                        return Err(bad_file(input, "holds neither model.safetensors.index.json nor *.safetensors"));
                    }
                    expanded.extend(shards);
                }
            } else {
                expanded.push(input.clone());
            }
        }
        for input in &expanded {
            if input.extension().is_some_and(|x| x == "json") {
                for (name, shard) in read_index(input)? {
                    add(name, shard, &mut files)?;
                }
            } else {
                let header = read_header(input)?;
                for name in header.keys() {
                    add(name.clone(), input.clone(), &mut files)?;
                }
                headers.insert(input.clone(), header);
            }
        }
        Ok(Self { files, headers: RefCell::new(headers) })
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.files.contains_key(name)
    }

    /// The file holding `name` (for messages).
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        self.files.get(name).map(PathBuf::as_path)
    }

    fn entry(&self, name: &str) -> Result<(PathBuf, Entry), Error> {
        let file = self.files.get(name).ok_or_else(|| Error::Input {
            location: format!("checkpoint: tensor {name}"),
            message: "missing from every shard given".into(),
        })?;
        let mut headers = self.headers.borrow_mut();
        if !headers.contains_key(file) {
            headers.insert(file.clone(), read_header(file)?);
        }
        let entry =
            headers[file].get(name).cloned().ok_or_else(|| bad_tensor(file, name, "named by the index but missing from the shard"))?;
        Ok((file.clone(), entry))
    }

    /// The shape and dtype of `name`.
    pub fn info(&self, name: &str) -> Result<(Vec<usize>, String), Error> {
        let (_, e) = self.entry(name)?;
        Ok((e.shape, e.dtype))
    }

    /// Reads `name` as f32 values, checking its shape (`None` in `shape`
    /// accepts any size on that axis) and returning the actual shape.
    /// F32, BF16, F16, F8_E4M3 and F8_E8M0 are decoded exactly; FP8 weights
    /// are returned as stored codes' values, without their scales (see
    /// [`Checkpoint::read_weight`]).
    pub fn read_raw(&self, name: &str, shape: &[Option<usize>]) -> Result<(Vec<f32>, Vec<usize>), Error> {
        let (file, e) = self.entry(name)?;
        let fits = e.shape.len() == shape.len() && e.shape.iter().zip(shape).all(|(a, b)| b.is_none_or(|b| *a == b));
        if !fits {
            let want: Vec<String> = shape.iter().map(|s| s.map_or("*".to_string(), |v| v.to_string())).collect();
            return Err(bad_tensor(&file, name, format!("shape {:?}, expected [{}]", e.shape, want.join(", "))));
        }
        let (size, decode): (u64, fn(&[u8]) -> f32) = match e.dtype.as_str() {
            "F32" => (4, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            "BF16" => (2, |b| ElementFormat::Bf16.decode(u16::from_le_bytes([b[0], b[1]]) as u32)),
            "F16" => (2, |b| ElementFormat::F16.decode(u16::from_le_bytes([b[0], b[1]]) as u32)),
            "F8_E4M3" => (1, |b| ElementFormat::E4m3fn.decode(b[0] as u32)),
            // ue8m0: 2^(e − 127); 0xff is NaN.
            "F8_E8M0" => (1, |b| if b[0] == 0xff { f32::NAN } else { (2f64).powi(b[0] as i32 - 127) as f32 }),
            other => return Err(bad_tensor(&file, name, format!("dtype {other}, expected one of F32, BF16, F16, F8_E4M3, F8_E8M0"))),
        };
        let bytes = e.end - e.start;
        if bytes > MAX_TENSOR_BYTES {
            return Err(bad_tensor(&file, name, format!("{bytes} bytes is more than the {MAX_TENSOR_BYTES} this tool reads")));
        }
        let mut f = crate::base::files::open_input(&file).map_err(|err| bad_file(&file, format!("cannot read: {err}")))?;
        let mut buf = vec![0u8; bytes as usize];
        f.seek(SeekFrom::Start(e.start))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|err| bad_tensor(&file, name, format!("cannot read its bytes: {err}")))?;
        let values: Vec<f32> = buf.chunks_exact(size as usize).map(decode).collect();
        if values.iter().any(|v| !v.is_finite()) {
            return Err(bad_tensor(&file, name, "holds a NaN or infinite value"));
        }
        Ok((values, e.shape))
    }

    /// Reads a 2-D weight `[rows, cols]` as f32. An F8_E4M3 weight is
    /// dequantized with its block scales, 128 × 128 per scale: the tensor
    /// `….weight_scale_inv` (V3.2, F32) or `….scale` (V4, F8_E8M0) beside it,
    /// multiplied in as DeepSeek's `weight_dequant` does.
    pub fn read_weight(&self, name: &str, rows: Option<usize>, cols: Option<usize>) -> Result<(Vec<f32>, usize, usize), Error> {
        let (mut w, shape) = self.read_raw(name, &[rows, cols])?;
        let (r, c) = (shape[0], shape[1]);
        let (_, dtype) = self.info(name)?;
        if dtype == "F8_E4M3" {
            let base = name.strip_suffix(".weight").unwrap_or(name);
            let candidates = [format!("{base}.weight_scale_inv"), format!("{base}.scale")];
            let scale_name = candidates.iter().find(|n| self.contains(n)).ok_or_else(|| {
                bad_tensor(
                    self.file_of(name).unwrap_or(Path::new("checkpoint")),
                    name,
                    format!("is F8_E4M3 but neither {} nor {} is in the checkpoint", candidates[0], candidates[1]),
                )
            })?;
            let (br, bc) = (r.div_ceil(FP8_WEIGHT_BLOCK), c.div_ceil(FP8_WEIGHT_BLOCK));
            let (s, _) = self.read_raw(scale_name, &[Some(br), Some(bc)])?;
            for i in 0..r {
                for j in 0..c {
                    w[i * c + j] *= s[(i / FP8_WEIGHT_BLOCK) * bc + j / FP8_WEIGHT_BLOCK];
                }
            }
        }
        Ok((w, r, c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(dir: &Path, header: &str, data: &[u8]) -> PathBuf {
        let path = dir.join("s.safetensors");
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn reads_one_tensor_and_decodes_ue8m0() {
        let dir = tempfile::TempDir::new().unwrap();
        let h = r#"{"__metadata__":{},"s":{"dtype":"F8_E8M0","shape":[1,3],"data_offsets":[0,3]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[3,7]}}"#;
        // ue8m0 127 = 1, 130 = 8, 120 = 2^-7; bf16 0x3fc0 = 1.5, 0xc000 = -2.
        let p = shard(dir.path(), h, &[127, 130, 120, 0xc0, 0x3f, 0x00, 0xc0]);
        let ck = Checkpoint::open(&[p]).unwrap();
        assert_eq!(ck.read_raw("s", &[Some(1), None]).unwrap().0, vec![1.0, 8.0, 1.0 / 128.0]);
        assert_eq!(ck.read_raw("b", &[Some(2)]).unwrap().0, vec![1.5, -2.0]);
        assert!(ck.read_raw("b", &[Some(3)]).is_err());
        assert!(ck.read_raw("nope", &[Some(3)]).is_err());
    }

    #[test]
    fn malformed_headers_are_errors_not_panics() {
        let dir = tempfile::TempDir::new().unwrap();
        for (h, data) in [
            ("{", &[][..]),
            ("[]", &[]),
            (r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, &[0u8; 4][..]),
            (r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, &[0u8; 8]),
            (r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}}"#, &[0u8; 8]),
            (r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#, &[0u8; 8]),
            (r#"{"a":{"dtype":"F32","shape":[18446744073709551615,2],"data_offsets":[0,8]}}"#, &[0u8; 8]),
            (r#"{"a":{"shape":[2],"data_offsets":[0,8]}}"#, &[0u8; 8]),
        ] {
            let p = shard(dir.path(), h, data);
            assert!(Checkpoint::open(&[p]).is_err(), "{h}");
        }
        let p = dir.path().join("short.safetensors");
        std::fs::write(&p, [1u8, 2, 3]).unwrap();
        assert!(Checkpoint::open(std::slice::from_ref(&p)).is_err());
        std::fs::write(&p, u64::MAX.to_le_bytes()).unwrap();
        assert!(Checkpoint::open(&[p]).is_err());
    }
}

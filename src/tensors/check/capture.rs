//! Reading a capture for `check`: named tensors from one safetensors file or
//! a folder of `.npy` files, checked into [`Capture`] (docs/TENSORS.md,
//! "Capture format"). Every refusal is one line naming the tensor and field.

use super::layout::{CacheLayout, CodeFormat, PageTable, RowReader, ScaleDtype};
use super::options::CheckOptions;
use crate::config::precision::{custom_variant, named_variant, parse_compact};
use crate::error::Error;
use crate::numerics::pipeline::QuantizedRows;
use crate::score::variant::PrecisionVariant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The metadata key of a safetensors capture, and the file name of a
/// `.npy` folder's metadata.
pub const META_KEY: &str = "dsa_recall_check";
pub const META_FILE: &str = "meta.json";

/// Element types of the tensors a capture may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    Bf16,
    F32,
    F64,
    /// Any other one-byte type (fp8, fp4 pairs): bytes only.
    Byte,
}

impl DType {
    pub fn width(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Byte => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::Bf16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    fn from_safetensors(d: safetensors::Dtype) -> Option<DType> {
        use safetensors::Dtype as D;
        Some(match d {
            D::U8 | D::BOOL => DType::U8,
            D::I8 => DType::I8,
            D::U16 => DType::U16,
            D::I16 => DType::I16,
            D::U32 => DType::U32,
            D::I32 => DType::I32,
            D::U64 => DType::U64,
            D::I64 => DType::I64,
            D::F16 => DType::F16,
            D::BF16 => DType::Bf16,
            D::F32 => DType::F32,
            D::F64 => DType::F64,
            D::F8_E4M3 | D::F8_E5M2 | D::F8_E8M0 | D::F8_E4M3FNUZ | D::F8_E5M2FNUZ => DType::Byte,
            _ => return None,
        })
    }

    fn from_npy(descr: &str) -> Option<DType> {
        Some(match descr.trim_start_matches(['<', '|', '=']) {
            "u1" | "b1" => DType::U8,
            "i1" => DType::I8,
            "u2" => DType::U16,
            "i2" => DType::I16,
            "u4" => DType::U32,
            "i4" => DType::I32,
            "u8" => DType::U64,
            "i8" => DType::I64,
            "f2" => DType::F16,
            "f4" => DType::F32,
            "f8" => DType::F64,
            "V1" => DType::Byte,
            "V2" => DType::Bf16,
            _ => return None,
        })
    }
}

/// One tensor's type, shape and bytes (borrowed from the file buffer).
#[derive(Clone, Debug)]
pub struct RawTensor<'a> {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: &'a [u8],
}

impl RawTensor<'_> {
    /// Values as f32 (floats only).
    fn floats(&self) -> Option<Vec<f32>> {
        let d = self.data;
        Some(match self.dtype {
            DType::F32 => d.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            DType::F16 => d.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            DType::Bf16 => d.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            DType::F64 => d.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).collect(),
            _ => return None,
        })
    }

    /// Values as i64 (integers only).
    fn ints(&self) -> Option<Vec<i64>> {
        let d = self.data;
        Some(match self.dtype {
            DType::U8 => d.iter().map(|&b| i64::from(b)).collect(),
            DType::I8 => d.iter().map(|&b| i64::from(b as i8)).collect(),
            DType::U16 => d.chunks_exact(2).map(|c| i64::from(u16::from_le_bytes([c[0], c[1]]))).collect(),
            DType::I16 => d.chunks_exact(2).map(|c| i64::from(i16::from_le_bytes([c[0], c[1]]))).collect(),
            DType::U32 => d.chunks_exact(4).map(|c| i64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
            DType::I32 => d.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
            DType::U64 => {
                d.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])).min(i64::MAX as u64) as i64).collect()
            }
            DType::I64 => d.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect(),
            _ => return None,
        })
    }
}

/// The files of a capture, read whole (one buffer per file; the key cache
/// is never copied out of its buffer).
pub struct CaptureFiles {
    pub path: PathBuf,
    /// (tensor name, file bytes); one entry named "" for a safetensors file.
    buffers: Vec<(String, Vec<u8>)>,
    metadata: Option<String>,
}

fn bad(path: &Path, tensor: &str, message: impl Into<String>) -> Error {
    if tensor.is_empty() {
        return crate::tensors::bad_file(path, message);
    }
    Error::Input { location: format!("{}: tensor {tensor}", path.display()), message: message.into() }
}

impl CaptureFiles {
    /// A safetensors file, or a folder of `NAME.npy` files (and an optional
    /// `meta.json`).
    pub fn read(path: &Path) -> Result<CaptureFiles, Error> {
        if path.is_dir() {
            let mut buffers = Vec::new();
            let mut metadata = None;
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| bad(path, "", format!("cannot read: {e}")))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            entries.sort();
            let mut total = 0u64;
            for file in entries {
                let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if name == META_FILE {
                    let bytes = crate::tensors::read_bounded(&file)?;
                    metadata = Some(String::from_utf8(bytes).map_err(|_| bad(&file, "", "is not UTF-8 text"))?);
                } else if let Some(tensor) = name.strip_suffix(".npy") {
                    let bytes = crate::tensors::read_bounded(&file)?;
                    total += bytes.len() as u64;
                    if total > crate::tensors::MAX_FILE_BYTES {
                        return Err(bad(path, "", format!("holds more than the {} bytes this tool reads", crate::tensors::MAX_FILE_BYTES)));
                    }
                    buffers.push((tensor.to_string(), bytes));
                }
            }
            if buffers.is_empty() {
                return Err(bad(path, "", "holds no .npy files (a capture folder holds NAME.npy per tensor)"));
            }
            return Ok(CaptureFiles { path: path.to_path_buf(), buffers, metadata });
        }
        let bytes = crate::tensors::read_bounded(path)?;
        let metadata = safetensors::SafeTensors::read_metadata(&bytes)
            .map_err(|e| bad(path, "", format!("not a valid safetensors file: {e}")))?
            .1
            .metadata()
            .as_ref()
            .and_then(|m| m.get(META_KEY).cloned());
        Ok(CaptureFiles { path: path.to_path_buf(), buffers: vec![(String::new(), bytes)], metadata })
    }

    /// The tensors by name.
    pub fn tensors(&self) -> Result<BTreeMap<String, RawTensor<'_>>, Error> {
        let mut out = BTreeMap::new();
        for (name, bytes) in &self.buffers {
            if name.is_empty() {
                let st = safetensors::SafeTensors::deserialize(bytes)
                    .map_err(|e| bad(&self.path, "", format!("not a valid safetensors file: {e}")))?;
                for (n, view) in st.tensors() {
                    let dtype = DType::from_safetensors(view.dtype())
                        .ok_or_else(|| bad(&self.path, &n, format!("dtype {:?} is not supported", view.dtype())))?;
                    out.insert(n, RawTensor { dtype, shape: view.shape().to_vec(), data: view.data() });
                }
            } else {
                let file = self.path.join(format!("{name}.npy"));
                let (descr, shape, payload) = crate::tensors::npy::parse_npy_raw(bytes).map_err(|m| bad(&file, "", m))?;
                let dtype = DType::from_npy(&descr).ok_or_else(|| bad(&file, "", format!("dtype {descr:?} is not supported")))?;
                out.insert(name.clone(), RawTensor { dtype, shape, data: payload });
            }
        }
        Ok(out)
    }

    pub fn metadata(&self) -> Option<&str> {
        self.metadata.as_deref()
    }
}

/// What the capture's metadata may say (every field optional; the command
/// line overrides).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CaptureMeta {
    /// A built-in layout's name, or a layout as TOML text.
    pub layout: Option<String>,
    /// Precision variant (built-in, BASE+HYPOTHESIS, or a definition).
    pub pipeline: Option<String>,
    /// `kernel` (default): the head weights the logits kernel multiplies,
    /// every factor folded in; `raw`: w_h before (H·d)^-1/2 and q's scale.
    pub weights: Option<String>,
    pub topk: Option<usize>,
    /// `logical` (default): row positions in the sequence; `physical`:
    /// slots `block · rows_per_block + offset` of the cache.
    pub index_space: Option<String>,
    pub rows_per_block: Option<usize>,
    /// Element format of `q_codes` (default: the layout's code format).
    pub q_format: Option<String>,
    /// Bytes from one physical block to the next in the engine's allocation
    /// (for the 32-bit offset fault; default: the layout's block stride).
    pub block_stride_bytes: Option<u64>,
    /// Free text (engine, model, command): carried into the report.
    pub note: Option<String>,
}

/// How the head weights were captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WeightsForm {
    Kernel,
    Raw,
}

/// The query as the engine stored it.
#[derive(Clone, Debug)]
pub enum QueryInput {
    /// Before quantization (and rotation): `[heads · dim]`.
    Float(Vec<f32>),
    /// Element values `[heads · dim]` and scales `[heads · scales_per_head]`.
    Codes { values: Vec<f32>, scales: Vec<f32>, scales_per_head: usize },
}

/// One (layer, query) pair of a capture.
#[derive(Clone, Debug)]
pub struct PairInput {
    pub layer: usize,
    pub query: i64,
    pub seq_len: usize,
    /// Physical block of each logical block (the capacity the table addresses).
    pub blocks: Vec<i64>,
    pub q: QueryInput,
    pub weights: Vec<f32>,
    /// The engine's selection as logical rows; −1 entries dropped.
    pub selected: Vec<i64>,
    /// The engine's logits of rows 0..seq_len, when captured.
    pub logits: Option<Vec<f32>>,
}

/// A checked capture: the cache bytes (borrowed) and every pair.
pub struct Capture<'a> {
    pub path: PathBuf,
    pub layout: CacheLayout,
    pub variant: PrecisionVariant,
    pub weights_form: WeightsForm,
    pub topk: usize,
    pub heads: usize,
    /// The key cache per layer, `blocks · stride` bytes each.
    pub cache: Vec<&'a [u8]>,
    pub blocks_per_layer: usize,
    pub block_stride_bytes: u64,
    pub pairs: Vec<PairInput>,
    pub note: Option<String>,
    /// Total bytes of the capture's tensors.
    pub bytes: u64,
}

fn resolve_variant(text: &str, dim: usize) -> Result<PrecisionVariant, String> {
    let v = if text.contains(';') || text.starts_with("name=") {
        let p = parse_compact(text).map_err(|e| e.to_string())?;
        custom_variant(0, &p, dim, &[]).map_err(|e| e.to_string())?
    } else {
        named_variant("pipeline", text, &[]).map_err(|e| e.to_string())?
    };
    if let Some(why) = v.query.unsupported(dim) {
        return Err(format!("invalid pipeline = {text}: not with dim {dim}: {why}"));
    }
    Ok(v)
}

/// The tensors of one capture with the refusals every read shares: a
/// missing tensor, a wrong element type, an axis 0 that is not the pairs.
struct Named<'t, 'a> {
    path: &'t Path,
    tensors: &'t BTreeMap<String, RawTensor<'a>>,
    /// Pairs of the capture (seq_len's length; 0 until it is read).
    pairs: usize,
}

impl<'a> Named<'_, 'a> {
    fn get(&self, name: &str) -> Result<&RawTensor<'a>, Error> {
        self.tensors.get(name).ok_or_else(|| bad(self.path, name, "is missing (docs/TENSORS.md lists a capture's tensors)"))
    }

    fn ints(&self, name: &str, t: &RawTensor) -> Result<Vec<i64>, Error> {
        t.ints().ok_or_else(|| bad(self.path, name, format!("dtype {:?} is not an integer type", t.dtype)))
    }

    fn floats(&self, name: &str, t: &RawTensor) -> Result<Vec<f32>, Error> {
        t.floats().ok_or_else(|| bad(self.path, name, format!("dtype {:?} is not a float type", t.dtype)))
    }

    fn per_pair(&self, name: &str, t: &RawTensor) -> Result<(), Error> {
        let pairs = self.pairs;
        if t.shape.first() != Some(&pairs) {
            return Err(bad(
                self.path,
                name,
                format!("shape {:?}: axis 0 is {} but seq_len has {pairs} pairs", t.shape, t.shape.first().copied().unwrap_or(0)),
            ));
        }
        Ok(())
    }

    /// An optional per-pair integer tensor.
    fn pair_ints(&self, name: &str) -> Result<Option<Vec<i64>>, Error> {
        match self.tensors.get(name) {
            Some(t) => {
                self.per_pair(name, t)?;
                Ok(Some(self.ints(name, t)?))
            }
            None => Ok(None),
        }
    }
}

/// How a capture is to be read: from the options, else its metadata, else defaults.
struct Reading {
    layout: CacheLayout,
    variant: PrecisionVariant,
    weights_form: WeightsForm,
    /// `topk_indices` are physical rows (through the block table).
    physical: bool,
}

impl Reading {
    fn new(path: &Path, opts: &CheckOptions, meta: &CaptureMeta) -> Result<Reading, Error> {
        let source = if opts.layout.is_some() { "--layout" } else { "metadata \"layout\"" };
        let layout_text = opts.layout.clone().or(meta.layout.clone()).ok_or_else(|| {
            bad(
                path,
                "",
                format!("no layout: give --layout NAME|FILE.toml or metadata \"layout\" (built-in: {})", CacheLayout::builtin_names()),
            )
        })?;
        let mut layout = CacheLayout::resolve(&layout_text, source).map_err(|e| bad(path, "", e))?;
        if let Some(rows) = opts.rows_per_block.or(meta.rows_per_block) {
            if rows == 0 || layout.codes.tile.is_some_and(|t| !rows.is_multiple_of(t)) {
                return Err(bad(path, "", format!("invalid rows_per_block = {rows}: a positive number of rows (a multiple of the tile)")));
            }
            if layout.rows_per_block != rows {
                // Planar regions scale with the rows of a block.
                let old = layout.rows_per_block;
                if let Some(s) = layout.scales.as_mut().filter(|s| s.placement == super::layout::Placement::Planar) {
                    s.offset = s.offset / old * rows;
                }
                layout.rows_per_block = rows;
                layout.block_bytes = None;
            }
        }
        let dim = layout.dim;
        let pipeline = opts.pipeline.clone().or(meta.pipeline.clone()).or(layout.pipeline.clone()).unwrap_or_else(|| "fp32".into());
        let variant = resolve_variant(&pipeline, dim).map_err(|e| bad(path, "", e))?;
        let weights_form = match opts.weights.as_deref().or(meta.weights.as_deref()).unwrap_or("kernel") {
            "kernel" => WeightsForm::Kernel,
            "raw" => WeightsForm::Raw,
            other => return Err(bad(path, "", format!("invalid weights = {other:?}: kernel or raw"))),
        };
        let physical = match meta.index_space.as_deref().unwrap_or("logical") {
            "logical" => false,
            "physical" => true,
            other => return Err(bad(path, "", format!("invalid index_space = {other:?}: logical or physical"))),
        };
        Ok(Reading { layout, variant, weights_form, physical })
    }
}

/// The per-pair tensors of a capture, checked, before they are cut into pairs.
struct Columns {
    seq_len: Vec<i64>,
    layer_of: Vec<i64>,
    query_of: Vec<i64>,
    /// Block table rows of `table_width` entries, one per pair.
    table: Vec<i64>,
    table_width: usize,
    heads: usize,
    weights: Vec<f32>,
    queries: Vec<QueryInput>,
    /// The engine's selection, rows of `width` entries.
    selected: Vec<i64>,
    width: usize,
    /// Logits with their column count.
    logits: Option<(Vec<f32>, usize)>,
}

/// The key cache: `[layers?, blocks, …]` whose trailing axes are whole
/// blocks; returns (layers, blocks per layer).
fn cache_shape(named: &Named, layout: &CacheLayout) -> Result<(usize, usize), Error> {
    let kv = named.get("kv_cache")?;
    let stride = layout.block_stride();
    split_cache_shape(&kv.shape, kv.dtype.width(), stride).ok_or_else(|| {
        bad(
            named.path,
            "kv_cache",
            format!(
                "shape {:?} of {} bytes does not split into whole {} blocks of {stride} bytes ({} rows × {} bytes per row): check --layout and --rows-per-block",
                kv.shape,
                kv.data.len(),
                layout.name,
                layout.rows_per_block,
                stride / layout.rows_per_block.max(1)
            ),
        )
    })
}

/// Layer of each pair (default 0) and query of each pair (default: the
/// pair's rank within its layer).
fn layers_and_queries(named: &Named) -> Result<(Vec<i64>, Vec<i64>), Error> {
    let layer_of = named.pair_ints("layer")?.unwrap_or_else(|| vec![0; named.pairs]);
    let query_of = match named.pair_ints("query")? {
        Some(q) => q,
        None => {
            let mut count: BTreeMap<i64, i64> = BTreeMap::new();
            layer_of
                .iter()
                .map(|l| {
                    let c = count.entry(*l).or_default();
                    *c += 1;
                    *c - 1
                })
                .collect()
        }
    };
    Ok((layer_of, query_of))
}

/// Block table: `[P, M]` or `[M]` shared, or none with identity; returns
/// the rows repeated per pair and M.
fn block_table(named: &Named, layout: &CacheLayout, blocks: usize) -> Result<(Vec<i64>, usize), Error> {
    let pairs = named.pairs;
    Ok(match (named.tensors.get("block_table"), layout.page_table) {
        (Some(t), _) => match t.shape.as_slice() {
            [p, m] if *p == pairs => (named.ints("block_table", t)?, *m),
            [m] => (named.ints("block_table", t)?.repeat(pairs), *m),
            s => return Err(bad(named.path, "block_table", format!("shape {s:?}: expected [{pairs}, max_blocks] or [max_blocks]"))),
        },
        (None, PageTable::Identity) => ((0..pairs).flat_map(|_| 0..blocks as i64).collect(), blocks),
        (None, PageTable::Block) => {
            return Err(bad(named.path, "block_table", format!("is missing: layout {} reads through a block table", layout.name)))
        }
    })
}

/// Head weights `[P, H]` (or `[P, H, 1]`), finite; returns them and H.
fn head_weights(named: &Named) -> Result<(Vec<f32>, usize), Error> {
    let pairs = named.pairs;
    let w = named.get("weights")?;
    named.per_pair("weights", w)?;
    let heads = match w.shape.as_slice() {
        [_, h] | [_, h, 1] => *h,
        s => return Err(bad(named.path, "weights", format!("shape {s:?}: expected [{pairs}, heads]"))),
    };
    if heads == 0 {
        return Err(bad(named.path, "weights", "has zero heads"));
    }
    let weights = named.floats("weights", w)?;
    if let Some(i) = weights.iter().position(|x| !x.is_finite()) {
        return Err(bad(named.path, "weights", format!("value {} at pair {}, head {} is not finite", weights[i], i / heads, i % heads)));
    }
    Ok((weights, heads))
}

/// The query's heads (axis 1 of `q` or `q_codes`) against the weights':
/// when they disagree, either may be the wrong one, so both are named.
fn heads_agree(named: &Named, name: &str, q: &RawTensor, heads: usize) -> Result<(), Error> {
    let shape = &q.shape;
    let why = "the query and the head weights must have the same heads (one of the two is cut or padded)";
    match shape.get(1) {
        Some(&h) if h != heads && shape.len() >= 3 => {
            Err(bad(named.path, name, format!("has {h} heads (shape {shape:?}) but weights has {heads}: {why}")))
        }
        _ => Ok(()),
    }
}

/// A float query `q` `[P, H, dim]`, to be quantized here.
fn float_queries(named: &Named, q: &RawTensor, reading: &Reading, heads: usize) -> Result<Vec<QueryInput>, Error> {
    let (path, pairs, q_dim) = (named.path, named.pairs, reading.layout.dim);
    named.per_pair("q", q)?;
    heads_agree(named, "q", q, heads)?;
    if q.shape.as_slice() != [pairs, heads, q_dim] {
        return Err(bad(
            path,
            "q",
            format!("shape {:?}: expected [{pairs}, {heads}, {q_dim}] (pairs, heads of weights, layout dim)", q.shape),
        ));
    }
    if reading.weights_form == WeightsForm::Kernel && reading.variant.query.scaling.is_some() {
        return Err(bad(
            path,
            "weights",
            "a float q is quantized here, so its scale is not yet in the weights: capture weights = \"raw\" (before (H·d)^-1/2 and q's scale), or capture q_codes and q_scales",
        ));
    }
    let v = named.floats("q", q)?;
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(bad(path, "q", format!("value {} at flat index {i} is not finite", v[i])));
    }
    Ok(v.chunks_exact(heads * q_dim).map(|c| QueryInput::Float(c.to_vec())).collect())
}

/// The query as stored: `q_codes` `[P, H, …]` in `q_format`, with optional
/// `q_scales` `[P, H, S]`.
fn coded_queries(named: &Named, layout: &CacheLayout, q_format: CodeFormat, heads: usize) -> Result<Vec<QueryInput>, Error> {
    let (path, pairs, q_dim) = (named.path, named.pairs, layout.dim);
    let codes = named.tensors.get("q_codes").ok_or_else(|| bad(path, "q", "is missing, and so is q_codes: capture the query as stored"))?;
    named.per_pair("q_codes", codes)?;
    heads_agree(named, "q_codes", codes, heads)?;
    let bytes_per_head = q_format.bytes_for(q_dim);
    let row_bytes = codes.shape.iter().skip(2).product::<usize>() * codes.dtype.width();
    if codes.shape.len() < 2 || codes.shape[1] != heads || row_bytes != bytes_per_head {
        return Err(bad(
            path,
            "q_codes",
            format!(
                "shape {:?} of {:?}: expected [{pairs}, {heads}, …] with {bytes_per_head} bytes per head ({q_dim} {} codes)",
                codes.shape,
                codes.dtype,
                q_format.name()
            ),
        ));
    }
    let low_first = layout.codes.low_nibble_first;
    let values: Vec<f32> =
        codes.data.chunks_exact(bytes_per_head).flat_map(|head| (0..q_dim).map(move |j| q_format.decode_at(head, j, low_first))).collect();
    let (scales, per_head) = query_scales(named, heads, q_dim)?;
    Ok(values
        .chunks_exact(heads * q_dim)
        .zip(scales.chunks_exact(heads * per_head))
        .map(|(v, s)| QueryInput::Codes { values: v.to_vec(), scales: s.to_vec(), scales_per_head: per_head })
        .collect())
}

/// `q_scales` `[P, H, S]` with S dividing dim (none: every scale 1);
/// returns the scales and S.
fn query_scales(named: &Named, heads: usize, q_dim: usize) -> Result<(Vec<f32>, usize), Error> {
    let (path, pairs) = (named.path, named.pairs);
    let Some(s) = named.tensors.get("q_scales") else {
        return Ok((vec![1.0; pairs * heads], 1));
    };
    named.per_pair("q_scales", s)?;
    let scales: Vec<f32> = match s.dtype {
        DType::U8 | DType::Byte => s.data.iter().map(|&b| ScaleDtype::Ue8m0.decode(&[b])).collect(),
        DType::I32 | DType::U32 => s.data.iter().map(|&b| ScaleDtype::Ue8m0.decode(&[b])).collect(),
        _ => named.floats("q_scales", s)?,
    };
    let per_head = scales.len() / (pairs * heads).max(1);
    if s.shape.get(1) != Some(&heads) || per_head == 0 || scales.len() != pairs * heads * per_head || !q_dim.is_multiple_of(per_head) {
        return Err(bad(path, "q_scales", format!("shape {:?}: expected [{pairs}, {heads}, S] with S dividing {q_dim}", s.shape)));
    }
    if let Some(i) = scales.iter().position(|x| !x.is_finite() || *x < 0.0) {
        return Err(bad(
            path,
            "q_scales",
            format!("scale {} of pair {}, head {} is not a finite number ≥ 0", scales[i], i / (heads * per_head), i / per_head % heads),
        ));
    }
    Ok((scales, per_head))
}

/// Optional logits `[P, rows]`; returns them and their column count.
fn logits(named: &Named) -> Result<Option<(Vec<f32>, usize)>, Error> {
    let Some(t) = named.tensors.get("logits") else {
        return Ok(None);
    };
    named.per_pair("logits", t)?;
    if t.shape.len() != 2 {
        return Err(bad(named.path, "logits", format!("shape {:?}: expected [{}, rows]", t.shape, named.pairs)));
    }
    Ok(Some((named.floats("logits", t)?, t.shape[1])))
}

/// Where the pairs' rows live: the cache's extent and how indices read.
struct CacheExtent {
    layers: usize,
    blocks: usize,
    rows_per_block: usize,
    physical: bool,
}

impl Columns {
    /// Cuts the columns into pairs, checking each pair's length, layer,
    /// blocks and selection against the cache.
    fn pair_inputs(&self, path: &Path, extent: &CacheExtent) -> Result<Vec<PairInput>, Error> {
        let (table_width, rpb, layers, blocks) = (self.table_width, extent.rows_per_block, extent.layers, extent.blocks);
        let (width, heads) = (self.width, self.heads);
        let mut out = Vec::with_capacity(self.seq_len.len());
        for (p, &n) in self.seq_len.iter().enumerate() {
            let table_row = &self.table[p * table_width..(p + 1) * table_width];
            let capacity = table_width * rpb;
            if n < 1 || n as usize > capacity {
                return Err(bad(
                    path,
                    "seq_len",
                    format!("seq_len[{p}] = {n}: expected 1 to {capacity} (the rows block_table addresses: {table_width} blocks × {rpb})"),
                ));
            }
            let n = n as usize;
            let layer = self.layer_of[p];
            if layer < 0 || layer as usize >= layers {
                return Err(bad(path, "layer", format!("layer[{p}] = {layer}: kv_cache holds {layers} layer(s)")));
            }
            let used = n.div_ceil(rpb);
            if let Some(b) = table_row[..used].iter().position(|&b| b < 0 || b as usize >= blocks) {
                return Err(bad(
                    path,
                    "block_table",
                    format!("block_table[{p}][{b}] = {}: the cache has blocks 0 to {}", table_row[b], blocks - 1),
                ));
            }
            let chosen = selected_rows(path, p, &self.selected[p * width..(p + 1) * width], table_row, extent)?;
            let pair_logits = match &self.logits {
                Some((v, cols)) => {
                    if *cols < n {
                        return Err(bad(path, "logits", format!("has {cols} columns but seq_len[{p}] = {n}")));
                    }
                    Some(v[p * cols..p * cols + n].to_vec())
                }
                None => None,
            };
            out.push(PairInput {
                layer: layer as usize,
                query: self.query_of[p],
                seq_len: n,
                blocks: table_row.to_vec(),
                q: self.queries[p].clone(),
                weights: self.weights[p * heads..(p + 1) * heads].to_vec(),
                selected: chosen,
                logits: pair_logits,
            });
        }
        Ok(out)
    }
}

/// Pair `p`'s selection as logical rows inside the capacity its block
/// table addresses, padding (−1) dropped. A row selected twice is a
/// malformed capture (a top-k names each row once), refused like a row
/// past the cache.
fn selected_rows(path: &Path, p: usize, selected: &[i64], table_row: &[i64], extent: &CacheExtent) -> Result<Vec<i64>, Error> {
    let rpb = extent.rows_per_block;
    let capacity = table_row.len() * rpb;
    let mut chosen = Vec::with_capacity(selected.len());
    let mut first_at: std::collections::HashMap<i64, usize> = std::collections::HashMap::with_capacity(selected.len());
    for (i, &idx) in selected.iter().enumerate() {
        if idx == -1 {
            continue;
        }
        let logical = if extent.physical { physical_to_logical(idx, table_row, rpb) } else { Some(idx) };
        match logical {
            Some(r) if r >= 0 && (r as usize) < capacity => {
                if let Some(j) = first_at.insert(r, i) {
                    return Err(bad(
                        path,
                        "topk_indices",
                        format!(
                            "topk_indices[{p}][{i}] = {idx} repeats topk_indices[{p}][{j}]: a top-k names each row once (-1 marks padding)"
                        ),
                    ));
                }
                chosen.push(r);
            }
            _ => {
                return Err(bad(
                    path,
                    "topk_indices",
                    format!("topk_indices[{p}][{i}] = {idx} is past the cache this query addresses ({capacity} rows; -1 marks padding)"),
                ))
            }
        }
    }
    Ok(chosen)
}

impl<'a> Capture<'a> {
    /// Checks every tensor of `files` against the layout and assembles the pairs.
    pub fn assemble(files: &'a CaptureFiles, opts: &CheckOptions) -> Result<Capture<'a>, Error> {
        let path = files.path.as_path();
        let tensors = files.tensors()?;
        let meta: CaptureMeta = match files.metadata() {
            Some(text) => serde_json::from_str(text).map_err(|e| bad(path, "", format!("metadata {META_KEY} is not valid: {e}")))?,
            None => CaptureMeta::default(),
        };
        let reading = Reading::new(path, opts, &meta)?;
        let layout = &reading.layout;
        let named = Named { path, tensors: &tensors, pairs: 0 };

        // Pairs: seq_len [P].
        let seq = named.get("seq_len")?;
        if seq.shape.len() != 1 || seq.shape[0] == 0 {
            return Err(bad(path, "seq_len", format!("shape {:?}: expected [pairs] with at least one pair", seq.shape)));
        }
        let seq_len = named.ints("seq_len", seq)?;
        let named = Named { pairs: seq_len.len(), ..named };
        let pairs = named.pairs;

        let (layers, blocks) = cache_shape(&named, layout)?;
        let stride = layout.block_stride();
        let kv = named.get("kv_cache")?;
        let cache: Vec<&[u8]> = kv.data.chunks_exact(blocks * stride).take(layers).collect();
        let (layer_of, query_of) = layers_and_queries(&named)?;
        let (table, table_width) = block_table(&named, layout, blocks)?;
        let (weights, heads) = head_weights(&named)?;

        // Query: floats `q`, or `q_codes` (+ `q_scales`).
        let q_format = match opts.q_format.as_deref().or(meta.q_format.as_deref()) {
            Some(t) => {
                CodeFormat::parse(t).ok_or_else(|| bad(path, "", format!("invalid q_format = {t:?}: one of {}", CodeFormat::NAMES)))?
            }
            None => layout.codes.format,
        };
        let queries = match tensors.get("q") {
            Some(q) => float_queries(&named, q, &reading, heads)?,
            None => coded_queries(&named, layout, q_format, heads)?,
        };

        // The engine's selection.
        let sel = named.get("topk_indices")?;
        named.per_pair("topk_indices", sel)?;
        if sel.shape.len() != 2 {
            return Err(bad(path, "topk_indices", format!("shape {:?}: expected [{pairs}, k]", sel.shape)));
        }
        let width = sel.shape[1];
        let selected = named.ints("topk_indices", sel)?;
        let topk = opts.topk.or(meta.topk).unwrap_or(width);
        if topk == 0 {
            return Err(bad(path, "", "invalid topk = 0: a positive number of rows"));
        }
        let logits = logits(&named)?;

        let columns = Columns { seq_len, layer_of, query_of, table, table_width, heads, weights, queries, selected, width, logits };
        let extent = CacheExtent { layers, blocks, rows_per_block: layout.rows_per_block, physical: reading.physical };
        let pairs = columns.pair_inputs(path, &extent)?;
        let bytes = tensors.values().map(|t| t.data.len() as u64).sum();
        let Reading { layout, variant, weights_form, .. } = reading;
        Ok(Capture {
            path: files.path.clone(),
            layout,
            variant,
            weights_form,
            topk,
            heads,
            cache,
            blocks_per_layer: blocks,
            block_stride_bytes: opts.block_stride_bytes.or(meta.block_stride_bytes).unwrap_or(stride as u64),
            pairs,
            note: meta.note,
            bytes,
        })
    }

    /// Reads the visible rows of `pair` through `reader` into `out` (element
    /// values with one scale per row, or dequantized values with scale 1),
    /// with logical blocks optionally remapped by `remap` and physical blocks
    /// from `zero_from_block` on reading as zero. Scales that are NaN,
    /// infinite or negative are refused when `strict` (the declared reader).
    pub fn gather(
        &self,
        pair: &PairInput,
        reader: &RowReader,
        remap: &dyn Fn(usize) -> usize,
        zero_block: &dyn Fn(i64) -> bool,
        strict: bool,
        out: &mut QuantizedRows,
    ) -> Result<(), Error> {
        let l = &self.layout;
        let (d, rpb, stride) = (l.dim, l.rows_per_block, l.block_stride());
        let per_row = l.scales_per_row();
        let one = l.one_scale_per_row();
        let cache = self.cache[pair.layer];
        out.values.clear();
        out.values.resize(pair.seq_len * d, 0.0);
        out.row_scales.clear();
        out.row_scales.resize(pair.seq_len, 1.0);
        let mut scales = vec![1f32; per_row.max(1)];
        let vps = l.scales.as_ref().map_or(d, |s| s.values_per_scale);
        for (r, values) in out.values.chunks_exact_mut(d).enumerate() {
            let logical = remap(r / rpb);
            let physical = pair.blocks.get(logical).copied().unwrap_or(-1);
            if physical < 0 || physical as usize >= self.blocks_per_layer || zero_block(physical) {
                values.fill(0.0);
                out.row_scales[r] = 0.0;
                continue;
            }
            let block = &cache[physical as usize * stride..(physical as usize + 1) * stride];
            reader.read(block, r % rpb, values, &mut scales[..per_row]);
            if strict {
                if let Some(s) = scales[..per_row].iter().find(|s| !s.is_finite() || **s < 0.0) {
                    return Err(bad(
                        &self.path,
                        "kv_cache",
                        format!(
                            "scale {s} of row {r} (layer {}, physical block {physical}, slot {}) is not a finite number ≥ 0: wrong --layout, or a cache that was never written",
                            pair.layer,
                            r % rpb
                        ),
                    ));
                }
            }
            if per_row == 0 {
                continue;
            }
            if one {
                out.row_scales[r] = scales[0];
            } else {
                for (j, v) in values[..l.scaled_dim()].iter_mut().enumerate() {
                    *v = scaled(*v, scales[j / vps]);
                }
            }
        }
        Ok(())
    }
}

/// `v · s`, a zero scale giving a zero of v's sign (the value was never
/// stored), as the simulator's dequantization does.
#[inline]
pub fn scaled(v: f32, s: f32) -> f32 {
    if s == 0.0 {
        0f32.copysign(v)
    } else {
        v * s
    }
}

/// (layers, blocks) when the tensor's trailing axes hold whole blocks of
/// `stride` bytes: `[blocks, …]` or `[layers, blocks, …]`.
fn split_cache_shape(shape: &[usize], width: usize, stride: usize) -> Option<(usize, usize)> {
    if stride == 0 || shape.is_empty() {
        return None;
    }
    for split in 1..=shape.len() {
        let tail: usize = shape[split..].iter().product::<usize>() * width;
        let lead = &shape[..split];
        if tail == stride {
            return match lead {
                [b] if *b > 0 => Some((1, *b)),
                [l, b] if *l > 0 && *b > 0 => Some((*l, *b)),
                _ => None,
            };
        }
        if tail < stride {
            break;
        }
    }
    // One flat axis of bytes (or [layers, bytes]) holding whole blocks.
    match shape {
        [n] if (n * width).is_multiple_of(stride) && *n > 0 => Some((1, n * width / stride)),
        [l, n] if (n * width).is_multiple_of(stride) && *n > 0 && *l > 0 => Some((*l, n * width / stride)),
        _ => None,
    }
}

/// The logical row of physical slot `idx` in a query's block table.
fn physical_to_logical(idx: i64, table: &[i64], rpb: usize) -> Option<i64> {
    if idx < 0 {
        return None;
    }
    let (block, offset) = (idx / rpb as i64, idx % rpb as i64);
    table.iter().position(|&b| b == block).map(|logical| logical as i64 * rpb as i64 + offset)
}

#[cfg(test)]
mod tests;

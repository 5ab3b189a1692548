//! An engine's capture of the indexer's selections, turned into observation
//! rows: sglang's `--enable-return-indexer-topk` returns, per request, the
//! top-k indices of every indexer layer for every token. With the needle's
//! token positions this says, layer by layer, whether the chosen queries
//! selected a needle row. Layout, sources and definitions:
//! docs/OBSERVATIONS.md, "From an engine capture".

use super::{bad_file, read_bounded};
use crate::error::{ConfigError, Error};
use std::collections::BTreeMap;
use std::path::Path;

/// Which captured queries (token positions) count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    /// The last prompt token (context − 1): the query whose selection
    /// produces the first answer token, what the simulator models.
    Last,
    /// Every captured query to which all needle rows are visible.
    All,
    /// One token position.
    At(u64),
}

impl Query {
    pub fn parse(text: &str) -> Result<Query, ConfigError> {
        match text.trim() {
            "last" => Ok(Query::Last),
            "all" => Ok(Query::All),
            t => t
                .parse::<u64>()
                .map(Query::At)
                .map_err(|_| ConfigError::new("--query", format!("{text:?}"), "last (the last prompt token), all, or a token position")),
        }
    }
}

/// Parses `--needle-tokens A..B`: the needle's token positions, half-open
/// (A is its first token, B the one after its last), as Python and Rust slice.
pub fn parse_needle_tokens(text: &str) -> Result<(u64, u64), ConfigError> {
    let refuse = || {
        ConfigError::new(
            "--needle-tokens",
            format!("{text:?}"),
            "A..B: token positions A (first needle token) to B (one past the last), A < B",
        )
    };
    let (a, b) = text.split_once("..").ok_or_else(refuse)?;
    let (a, b) = (a.trim().parse::<u64>().map_err(|_| refuse())?, b.trim().parse::<u64>().map_err(|_| refuse())?);
    if a >= b {
        return Err(refuse());
    }
    Ok((a, b))
}

/// What to count and how to label it.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The needle's tokens, half-open.
    pub needle: (u64, u64),
    /// Tokens per row the indices count in: 1 for V3.2 (token positions),
    /// 4 for V4's CSA layers (compressed rows).
    pub ratio: u64,
    /// The capture's width, the engine's index_topk, when given: a JSON
    /// capture needs it to split its indices, a `.npy` must agree with it.
    pub topk: Option<u64>,
    /// The width a JSON capture has when `topk` is not given (the preset's).
    pub default_topk: Option<u64>,
    /// Indexer layers, for a JSON capture without token counts.
    pub layers: Option<u64>,
    /// Prompt length; default: the capture's prompt_tokens, or a `.npy`'s rows.
    pub context: Option<u64>,
    /// Needle depth in percent; default: from its position in the context.
    pub depth: Option<f64>,
    pub query: Query,
    /// The `config` column.
    pub label: String,
    /// The `healthy` column, when given.
    pub healthy: Option<bool>,
}

/// Captured indices: base64 text as the server sends it (decoded a row at a
/// time, so a long capture is never held twice), or integers from a `.npy`.
enum Data {
    Base64(Vec<u8>),
    Ints(Vec<i64>),
}

/// One request's capture: indices `[rows, layers, width]`, row t being the
/// query at token position t (sglang returns seqlen − 1 rows from position 0).
pub struct Capture {
    /// The file, and `[i]` for the i-th response of a JSON array.
    pub source: String,
    /// Where the indices are, for messages: `meta_info.indexer_topk` or `indices`.
    field: &'static str,
    pub rows: usize,
    pub layers: usize,
    pub width: usize,
    pub prompt_tokens: Option<u64>,
    data: Data,
}

fn b64_value(c: u8) -> Option<u32> {
    match c {
        b'A'..=b'Z' => Some((c - b'A') as u32),
        b'a'..=b'z' => Some((c - b'a') as u32 + 26),
        b'0'..=b'9' => Some((c - b'0') as u32 + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Checks standard padded base64 and returns the number of bytes it holds.
fn b64_len(text: &[u8]) -> Result<usize, String> {
    if !text.len().is_multiple_of(4) {
        return Err(format!("{} characters: base64 comes in groups of 4", text.len()));
    }
    let pad = text.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return Err("more than two '=' at the end: not base64".into());
    }
    if let Some(i) = text[..text.len() - pad].iter().position(|&c| b64_value(c).is_none()) {
        return Err(format!("character {:?} at {i}: not base64", text[i] as char));
    }
    Ok(text.len() / 4 * 3 - pad)
}

/// Decodes bytes `start .. start + len` of checked base64 `text`.
fn b64_range(text: &[u8], start: usize, len: usize) -> Vec<u8> {
    let (g0, g1) = (start / 3, (start + len).div_ceil(3));
    let mut out = Vec::with_capacity((g1 - g0) * 3);
    for g in text[g0 * 4..g1 * 4].chunks_exact(4) {
        let v = g.iter().fold(0u32, |acc, &c| (acc << 6) | b64_value(c).unwrap_or(0));
        out.extend_from_slice(&[(v >> 16) as u8, (v >> 8) as u8, v as u8]);
    }
    out[start - g0 * 3..start - g0 * 3 + len].to_vec()
}

impl Capture {
    /// The `width` indices of query row `row` in layer `layer`.
    fn indices(&self, row: usize, layer: usize) -> Vec<i64> {
        let at = (row * self.layers + layer) * self.width;
        match &self.data {
            Data::Ints(v) => v[at..at + self.width].to_vec(),
            Data::Base64(text) => b64_range(text, at * 4, self.width * 4)
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                .collect(),
        }
    }

    fn bad(&self, message: String) -> Error {
        Error::Input { location: self.source.clone(), message }
    }
}

/// Reads a capture file: `.npy` (int32 or int64, `[rows, layers, width]`),
/// or JSON as sglang's `/generate` returns it (one response object, or an
/// array of them: one capture each).
pub fn read_capture(path: &Path, spec: &Spec) -> Result<Vec<Capture>, Error> {
    let bytes = read_bounded(path)?;
    let name = path.display().to_string();
    if bytes.starts_with(b"\x93NUMPY") {
        let a = super::npy::parse_npy_int(&bytes).map_err(|m| bad_file(path, m))?;
        let [rows, layers, width] = a.shape[..] else {
            return Err(bad_file(path, format!("shape {:?}: an index capture is [tokens, layers, topk]", a.shape)));
        };
        if let Some(k) = spec.topk.filter(|&k| k != width as u64) {
            return Err(bad_file(path, format!("shape {:?}: width {width} is not --topk {k}", a.shape)));
        }
        if let Some(l) = spec.layers.filter(|&l| l != layers as u64) {
            return Err(bad_file(path, format!("shape {:?}: {layers} layers, not --layers {l}", a.shape)));
        }
        if rows == 0 || layers == 0 || width == 0 {
            return Err(bad_file(path, format!("shape {:?}: empty", a.shape)));
        }
        return Ok(vec![Capture { source: name, field: "indices", rows, layers, width, prompt_tokens: None, data: Data::Ints(a.data) }]);
    }
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad_file(path, format!("neither a .npy file nor JSON: {e}")))?;
    drop(bytes);
    match json {
        serde_json::Value::Array(items) => {
            if items.is_empty() {
                return Err(bad_file(path, "an empty JSON array: no response"));
            }
            let many = items.len() > 1;
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| from_response(if many { format!("{name}[{i}]") } else { name.clone() }, item, spec))
                .collect()
        }
        other => Ok(vec![from_response(name, other, spec)?]),
    }
}

/// One `/generate` response: `meta_info.indexer_topk` (base64 of int32,
/// `[prompt_tokens + completion_tokens − 1, layers, index_topk]`).
fn from_response(source: String, mut v: serde_json::Value, spec: &Spec) -> Result<Capture, Error> {
    let bad = |m: String| Error::Input { location: source.clone(), message: m };
    let meta = v.get_mut("meta_info").ok_or_else(|| bad("field meta_info: missing (expected sglang's /generate response)".into()))?;
    let count = |key: &str| -> Result<Option<u64>, Error> {
        match meta.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(x) => x.as_u64().map(Some).ok_or_else(|| bad(format!("field meta_info.{key} = {x}: a whole number"))),
        }
    };
    let (prompt, completion) = (count("prompt_tokens")?, count("completion_tokens")?);
    let text = match meta.get_mut("indexer_topk").map(serde_json::Value::take) {
        Some(serde_json::Value::String(s)) => s.into_bytes(),
        None | Some(serde_json::Value::Null) => {
            return Err(bad(
                "field meta_info.indexer_topk: missing (start the server with --enable-return-indexer-topk and send \"return_indexer_topk\": true)".into(),
            ))
        }
        Some(_) => return Err(bad("field meta_info.indexer_topk: a base64 string of int32 indices".into())),
    };
    let n_bytes = b64_len(&text).map_err(|m| bad(format!("field meta_info.indexer_topk: {m}")))?;
    if !n_bytes.is_multiple_of(4) {
        return Err(bad(format!("field meta_info.indexer_topk: {n_bytes} bytes are not whole int32 values")));
    }
    let n = n_bytes / 4;
    let width = spec
        .topk
        .or(spec.default_topk)
        .ok_or_else(|| bad("a JSON capture needs --topk (the engine's index_topk) to split its indices".into()))? as usize;
    let (rows, layers) = match (prompt, completion, spec.layers) {
        (Some(p), Some(c), layers) => {
            let rows = (p + c)
                .checked_sub(1)
                .filter(|&r| r > 0)
                .ok_or_else(|| bad(format!("field meta_info.prompt_tokens = {p}, completion_tokens = {c}: no captured token")))?
                as usize;
            if n == 0 || !n.is_multiple_of(rows * width) {
                return Err(bad(format!(
                    "field meta_info.indexer_topk: {n} indices are not {rows} rows (prompt_tokens + completion_tokens − 1) × {width} (--topk) × whole layers"
                )));
            }
            let found = n / (rows * width);
            if let Some(l) = layers.filter(|&l| l as usize != found) {
                return Err(bad(format!("field meta_info.indexer_topk: {found} layers of {rows} rows × {width}, not --layers {l}")));
            }
            (rows, found)
        }
        (_, _, Some(l)) => {
            let l = l as usize;
            if n == 0 || !n.is_multiple_of(l * width) {
                return Err(bad(format!(
                    "field meta_info.indexer_topk: {n} indices are not whole rows of {l} layers (--layers) × {width} (--topk)"
                )));
            }
            (n / (l * width), l)
        }
        _ => {
            return Err(bad(
                "field meta_info.prompt_tokens or completion_tokens: missing; give --layers to split the indices into rows".into()
            ))
        }
    };
    Ok(Capture { source, field: "meta_info.indexer_topk", rows, layers, width, prompt_tokens: prompt, data: Data::Base64(text) })
}

/// The needle's selection in one layer, for one context and depth.
#[derive(Clone, Debug, PartialEq)]
pub struct Count {
    pub context_tokens: u64,
    pub depth_percent: f64,
    pub topk: u64,
    pub layer: u64,
    /// None when every query from the needle on counts (`--query all`).
    pub query_position: Option<u64>,
    pub found: u64,
    pub total: u64,
}

/// Per layer of `cap`: of the chosen queries, how many selected a needle
/// row. Indices below −1, or past the rows of the captured sequence, are
/// refused; −1 is padding.
pub fn count(cap: &Capture, spec: &Spec) -> Result<Vec<Count>, Error> {
    let (a, b) = spec.needle;
    let r = spec.ratio.max(1);
    let context = spec.context.or(cap.prompt_tokens).unwrap_or(cap.rows as u64);
    if b > context {
        return Err(cap.bad(format!("--needle-tokens {a}..{b}: past the context ({context} tokens)")));
    }
    let depth = spec.depth.unwrap_or_else(|| {
        let span = context - (b - a);
        if span == 0 {
            0.0
        } else {
            (a as f64 / span as f64 * 1e4).round() / 100.0
        }
    });
    let (first_row, last_row) = (a / r, (b - 1) / r);
    // A query sees compressed row i once it is complete, at token r·(i+1) − 1.
    let visible_from = r * (last_row + 1) - 1;
    let positions: Vec<u64> = match spec.query {
        Query::Last | Query::At(_) => {
            let p = if let Query::At(p) = spec.query { p } else { context - 1 };
            if p >= context {
                return Err(cap.bad(format!("--query {p}: a token position below the context ({context} tokens)")));
            }
            if p as usize >= cap.rows {
                return Err(cap.bad(format!(
                    "--query: token position {p} is not captured ({} rows: positions 0 to {})",
                    cap.rows,
                    cap.rows - 1
                )));
            }
            vec![p]
        }
        Query::All => {
            if visible_from as usize >= cap.rows {
                return Err(cap.bad(format!(
                    "--query all: no captured query sees the needle's rows (complete from token {visible_from}; {} rows captured)",
                    cap.rows
                )));
            }
            (visible_from..cap.rows as u64).collect()
        }
    };
    // Rows of the whole captured sequence (seqlen = rows + 1 tokens).
    let limit = (cap.rows as u64 + 1).div_ceil(r) as i64;
    let mut out = Vec::new();
    for layer in 0..cap.layers {
        let mut found = 0;
        for &p in &positions {
            let mut hit = false;
            for v in cap.indices(p as usize, layer) {
                if v < -1 || v >= limit {
                    return Err(cap.bad(format!(
                        "{} [token {p}, layer {layer}]: index {v}: {}",
                        cap.field,
                        if v < -1 {
                            "indices are ≥ 0, or −1 for padding".to_string()
                        } else {
                            format!("past the captured context ({limit} rows of {r} tokens)")
                        }
                    )));
                }
                hit |= v >= 0 && (first_row as i64..=last_row as i64).contains(&v);
            }
            found += u64::from(hit);
        }
        out.push(Count {
            context_tokens: context,
            depth_percent: depth,
            topk: cap.width as u64,
            layer: layer as u64,
            query_position: (spec.query != Query::All).then_some(positions[0]),
            found,
            total: positions.len() as u64,
        });
    }
    Ok(out)
}

/// Adds up the counts of several captures: one row per context, depth,
/// query position and layer.
pub fn add_up(counts: impl IntoIterator<Item = Count>) -> Vec<Count> {
    let mut sums: BTreeMap<(u64, u64, u64, Option<u64>, u64), Count> = BTreeMap::new();
    for c in counts {
        let key = (c.context_tokens, c.depth_percent.to_bits(), c.topk, c.query_position, c.layer);
        sums.entry(key)
            .and_modify(|s| {
                s.found += c.found;
                s.total += c.total;
            })
            .or_insert(c);
    }
    sums.into_values().collect()
}

/// The observation file (docs/OBSERVATIONS.md) of `counts`, with a source comment.
pub fn to_csv(counts: &[Count], spec: &Spec, sources: &[String]) -> String {
    let (a, b) = spec.needle;
    let r = spec.ratio.max(1);
    let mut t = format!(
        "# source: `dsa-recall observe` on {} capture(s): {}\n# needle tokens {a}..{b} (half-open); indices count rows of {r} token(s): needle rows {} to {}; queries: {}\n",
        sources.len(),
        sources.join(", "),
        a / r,
        (b - 1) / r,
        match spec.query {
            Query::Last => "the last prompt token".to_string(),
            Query::All => "every captured query from the needle's last row on (not independent: adjacent queries select alike)".to_string(),
            Query::At(p) => format!("token {p}"),
        }
    );
    t.push_str("context_tokens,depth_percent,topk,config,found,total,layer,query_position");
    t.push_str(if spec.healthy.is_some() { ",healthy\n" } else { "\n" });
    for c in counts {
        t.push_str(&format!(
            "{},{},{},{},{},{},{},{}",
            c.context_tokens,
            c.depth_percent,
            c.topk,
            spec.label,
            c.found,
            c.total,
            c.layer,
            c.query_position.map_or(String::new(), |p| p.to_string())
        ));
        if let Some(h) = spec.healthy {
            t.push_str(&format!(",{h}"));
        }
        t.push('\n');
    }
    t
}

/// Reads every capture, counts, and writes the observation file to `out`
/// (through a temporary file: nothing is written on error). Returns its text.
pub fn observe(paths: &[std::path::PathBuf], spec: &Spec, out: &Path) -> Result<String, Error> {
    if spec.label.is_empty() || spec.label.contains(',') || spec.label.starts_with('#') {
        return Err(
            ConfigError::new("--config", format!("{:?}", spec.label), "a configuration label without commas, e.g. fp8-fp32scale").into()
        );
    }
    crate::base::files::output_target(out)?;
    let mut counts = Vec::new();
    let mut sources = Vec::new();
    for p in paths {
        for cap in read_capture(p, spec)? {
            counts.extend(count(&cap, spec)?);
            sources.push(cap.source.clone());
        }
    }
    let text = to_csv(&add_up(counts), spec, &sources);
    crate::base::files::write_file(out, text.as_bytes())?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_ranges_match_a_whole_decode() {
        // "hello world!" and shorter tails with padding.
        let text = b"aGVsbG8gd29ybGQh";
        assert_eq!(b64_len(text), Ok(12));
        assert_eq!(b64_range(text, 0, 12), b"hello world!");
        assert_eq!(b64_range(text, 4, 5), b"o wor");
        assert_eq!(b64_len(b"aGk="), Ok(2));
        assert_eq!(b64_range(b"aGk=", 1, 1), b"i");
        assert!(b64_len(b"aGk").unwrap_err().contains("groups of 4"));
        assert!(b64_len(b"a*k=").unwrap_err().contains("not base64"));
    }

    #[test]
    fn needle_tokens_and_query_parse() {
        assert_eq!(parse_needle_tokens("100..104"), Ok((100, 104)));
        for bad in ["100", "104..100", "5..5", "a..b"] {
            assert!(parse_needle_tokens(bad).unwrap_err().to_string().contains("--needle-tokens"), "{bad}");
        }
        assert_eq!(Query::parse("last"), Ok(Query::Last));
        assert_eq!(Query::parse("17"), Ok(Query::At(17)));
        assert!(Query::parse("first").is_err());
    }
}

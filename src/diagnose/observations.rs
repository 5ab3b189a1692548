//! The observation file: what a deployment was measured to do, one row per
//! measured configuration (format: docs/OBSERVATIONS.md). The reader checks
//! syntax, counts and contradictions; whether a configuration label names a
//! variant is for the caller to say (custom variants live in the scenario).

use crate::base::units::parse_size;
use crate::config::MAX_CONTEXT;
use crate::error::Error;

/// One measured configuration (after summing agreeing duplicates).
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// 1-based line of the file where the row (its first occurrence) is.
    pub line: usize,
    pub context_tokens: u64,
    pub depth_percent: f64,
    pub topk: u64,
    /// The label as written in the file.
    pub label: String,
    /// The precision variant it stands for (`# map` applied), as `--precisions` takes it.
    pub config: String,
    pub found: u64,
    pub total: u64,
    /// An indexer layer: the row counts one layer's selections (a capture).
    pub layer: Option<u64>,
    /// Recorded; the simulator models the decoding query at the end.
    pub query_position: Option<u64>,
    /// Marked as a healthy configuration (for calibration); None when not given.
    pub healthy: Option<bool>,
    /// The deployment's prefill chunk in tokens (0: one chunk); None: the
    /// scenario's (`--prefill-chunk`). Chunk faults read it.
    pub prefill_chunk: Option<u64>,
    /// The position (tokens) past which the deployment's indexer cannot
    /// address its cache, when known (block-table width × page tokens, slot
    /// capacity × ratio, workspace tokens): the bounded address-space
    /// hypotheses are tried at it instead of at bounds taken from the
    /// contexts. None: not known.
    pub address_bound: Option<u64>,
    /// The prompt's name (column `prompt`): the row's `total` prompts are
    /// repeats of this one prompt, the same haystack each time. None: the
    /// prompts are distinct (or not known to repeat).
    pub prompt: Option<String>,
}

/// The longest prompt name a `prompt` column may hold, in characters.
pub const PROMPT_NAME_CHARS: usize = 100;

/// A parsed observation file.
#[derive(Clone, Debug, PartialEq)]
pub struct Observations {
    pub path: String,
    pub rows: Vec<Observation>,
}

const REQUIRED: [&str; 6] = ["context_tokens", "depth_percent", "topk", "config", "found", "total"];
const OPTIONAL: [&str; 6] = ["layer", "query_position", "healthy", "prefill_chunk", "address_bound", "prompt"];

fn bad(path: &str, line: usize, message: String) -> Error {
    Error::Input { location: format!("{path}:{line}"), message }
}

/// Reads and checks the file at `path`; `known` says whether a variant
/// name (after `# map`) is one the scenario can simulate, or why not.
pub fn read(path: &std::path::Path, known: &dyn Fn(&str) -> Result<(), String>) -> Result<Observations, Error> {
    let text = crate::base::files::read_text_capped(path, crate::base::files::OBSERVATIONS_FILE_CAP)
        .map_err(|e| Error::Input { location: path.display().to_string(), message: e.to_string() })?;
    parse(&path.display().to_string(), &text, known)
}

/// [`read`] on text already in memory; `path` names it in errors. Fields
/// are read as CSV (RFC 4180 quoting, via the `csv` crate); a UTF-8
/// byte-order mark (Excel's "CSV UTF-8") is skipped, and `#` lines are
/// comments, of which `# map LABEL = VARIANT` lines come before the header.
pub fn parse(path: &str, text: &str, known: &dyn Fn(&str) -> Result<(), String>) -> Result<Observations, Error> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let maps = read_maps(path, text, known)?;
    // Comment lines become empty lines, which the CSV reader skips, so that
    // record positions stay the file's line numbers.
    let body: String = text.lines().map(|l| if l.trim_start().starts_with('#') { "" } else { l }).flat_map(|l| [l, "\n"]).collect();
    let line_starts: Vec<usize> = std::iter::once(0).chain(body.match_indices('\n').map(|(i, _)| i + 1)).collect();
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).trim(csv::Trim::All).from_reader(body.as_bytes());
    let mut header: Option<Vec<String>> = None;
    let mut rows: Vec<Observation> = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(1, |p| p.line() as usize);
            bad(path, line, format!("not readable as CSV: {e}"))
        })?;
        let line = record.position().map_or(1, |p| line_of(&body, &line_starts, p.byte() as usize));
        let fields: Vec<&str> = record.iter().collect();
        if fields.iter().all(|f| f.is_empty()) {
            continue;
        }
        let Some(names) = &header else {
            if let Some((map_line, label, _)) = maps.iter().find(|(l, _, _)| *l > line) {
                return Err(bad(path, *map_line, format!("map {label:?}: put every `# map` line before the header")));
            }
            header = Some(read_header(path, line, &fields)?);
            continue;
        };
        let row = read_row(path, line, names, &fields, &maps, known)?;
        add_row(path, &mut rows, row)?;
    }
    let last_line = text.lines().count().max(1);
    if header.is_none() {
        return Err(bad(path, last_line, format!("no header: the first row names the columns ({})", REQUIRED.join(", "))));
    }
    if rows.is_empty() {
        return Err(bad(path, last_line, "no observation rows after the header".into()));
    }
    Ok(Observations { path: path.to_string(), rows })
}

/// The 1-based line where a record found at `byte` starts: the reader
/// reports where it began to look, before the empty lines it skips.
fn line_of(body: &str, line_starts: &[usize], byte: usize) -> usize {
    let rest = body.get(byte..).unwrap_or("");
    let start = byte + rest.len() - rest.trim_start_matches(['\n', '\r']).len();
    line_starts.partition_point(|&s| s <= start)
}

/// The `# map LABEL = VARIANT` lines, as (line, label, variant), checked.
fn read_maps(path: &str, text: &str, known: &dyn Fn(&str) -> Result<(), String>) -> Result<Vec<(usize, String, String)>, Error> {
    let mut maps: Vec<(usize, String, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let Some(m) = raw.trim().strip_prefix('#').and_then(|c| c.trim().strip_prefix("map ")) else { continue };
        let (label, variant) = m
            .split_once('=')
            .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
            .filter(|(a, b)| !a.is_empty() && !b.is_empty())
            .ok_or_else(|| bad(path, line, format!("map {m:?}: write `# map LABEL = VARIANT`")))?;
        if let Some((_, _, earlier)) = maps.iter().find(|(_, l, _)| *l == label) {
            if *earlier != variant {
                return Err(bad(path, line, format!("map {label:?} = {variant:?} contradicts an earlier map to {earlier:?}")));
            }
        }
        known(&variant).map_err(|why| bad(path, line, format!("map {label:?} = {variant:?}: {why}")))?;
        maps.push((line, label, variant));
    }
    Ok(maps)
}

/// The header's column names (lower case), each known and given once.
fn read_header(path: &str, line: usize, fields: &[&str]) -> Result<Vec<String>, Error> {
    let names: Vec<String> = fields.iter().map(|f| f.to_ascii_lowercase()).collect();
    for n in &names {
        if !REQUIRED.contains(&n.as_str()) && !OPTIONAL.contains(&n.as_str()) {
            let known = format!("columns are {} (optional: {})", REQUIRED.join(", "), OPTIONAL.join(", "));
            return Err(bad(path, line, format!("header column {n:?} is not known: {known}")));
        }
        if names.iter().filter(|m| *m == n).count() > 1 {
            return Err(bad(path, line, format!("header column {n:?} appears twice")));
        }
    }
    if let Some(missing) = REQUIRED.iter().find(|r| !names.iter().any(|n| n == *r)) {
        return Err(bad(path, line, format!("header lacks the column {missing:?}: required are {}", REQUIRED.join(", "))));
    }
    Ok(names)
}

/// One data row, checked field by field.
fn read_row(
    path: &str,
    line: usize,
    names: &[String],
    fields: &[&str],
    maps: &[(usize, String, String)],
    known: &dyn Fn(&str) -> Result<(), String>,
) -> Result<Observation, Error> {
    if fields.len() != names.len() {
        return Err(bad(path, line, format!("{} fields where the header has {}", fields.len(), names.len())));
    }
    let get = |name: &str| names.iter().position(|n| n == name).map(|i| fields[i]).filter(|v| !v.is_empty());
    let need = |name: &str| get(name).ok_or_else(|| bad(path, line, format!("{name} is empty: a value is required")));
    let count = |name: &str| -> Result<u64, Error> {
        let v = need(name)?;
        v.parse::<u64>().map_err(|_| bad(path, line, format!("{name} = {v:?}: a whole number ≥ 0")))
    };
    let context = need("context_tokens")?;
    let context_tokens = parse_size(context).filter(|&n| n > 0 && n <= MAX_CONTEXT).ok_or_else(|| {
        bad(path, line, format!("context_tokens = {context:?}: a positive number of tokens up to 16M (K/M suffixes allowed)"))
    })?;
    let depth = need("depth_percent")?;
    let depth_percent = depth
        .parse::<f64>()
        .ok()
        .filter(|d| (0.0..=100.0).contains(d))
        .ok_or_else(|| bad(path, line, format!("depth_percent = {depth:?}: a number from 0 to 100")))?;
    let k = need("topk")?;
    let topk = parse_size(k).filter(|&n| n > 0).ok_or_else(|| bad(path, line, format!("topk = {k:?}: a positive whole number")))?;
    let (found, total) = (count("found")?, count("total")?);
    if total == 0 {
        return Err(bad(path, line, "total = 0: at least one prompt".into()));
    }
    if found > total {
        return Err(bad(path, line, format!("found = {found}: at most total ({total})")));
    }
    let label = need("config")?.to_string();
    let config = maps.iter().find(|(_, l, _)| *l == label).map(|(_, _, v)| v.clone()).unwrap_or_else(|| label.clone());
    if config == label {
        known(&config).map_err(|why| bad(path, line, format!("config = {label:?}: {why} (or map it: `# map {label} = VARIANT`)")))?;
    }
    let optional_count = |name: &str| -> Result<Option<u64>, Error> {
        get(name).map(|v| v.parse::<u64>().map_err(|_| bad(path, line, format!("{name} = {v:?}: a whole number ≥ 0")))).transpose()
    };
    let layer = optional_count("layer")?;
    let query_position = optional_count("query_position")?;
    if let Some(q) = query_position.filter(|&q| q >= context_tokens) {
        return Err(bad(path, line, format!("query_position = {q}: below context_tokens ({context_tokens})")));
    }
    // A column of tokens (K/M allowed) from `min` to 16M.
    let tokens = |name: &str, min: u64, allowed: &str| -> Result<Option<u64>, Error> {
        let read = |v: &str| {
            let shown = crate::error::shorten(v, crate::error::VALUE_CHARS);
            parse_size(v)
                .filter(|n| (min..=MAX_CONTEXT).contains(n))
                .ok_or_else(|| bad(path, line, format!("{name} = {shown:?}: {allowed}")))
        };
        get(name).map(read).transpose()
    };
    let prefill_chunk = tokens("prefill_chunk", 0, "a whole number of tokens from 0 (one chunk) to 16M (K/M suffixes allowed)")?;
    let address_bound = tokens("address_bound", 1, "a token position from 1 to 16M (K/M suffixes allowed)")?;
    let prompt = get("prompt").map(|v| read_prompt(path, line, v)).transpose()?;
    let healthy = get("healthy").map(|v| read_healthy(path, line, v)).transpose()?;
    Ok(Observation {
        line,
        context_tokens,
        depth_percent,
        topk,
        label,
        config,
        found,
        total,
        layer,
        query_position,
        healthy,
        prefill_chunk,
        address_bound,
        prompt,
    })
}

/// A `healthy` mark: true/yes/1 or false/no/0.
fn read_healthy(path: &str, line: usize, v: &str) -> Result<bool, Error> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        _ => Err(bad(path, line, format!("healthy = {v:?}: true or false"))),
    }
}

/// A `prompt` name: at most [`PROMPT_NAME_CHARS`], no control characters.
fn read_prompt(path: &str, line: usize, v: &str) -> Result<String, Error> {
    if v.chars().count() <= PROMPT_NAME_CHARS && !v.chars().any(char::is_control) {
        return Ok(v.to_string());
    }
    let shown = crate::error::shorten(v, crate::error::VALUE_CHARS);
    Err(bad(path, line, format!("prompt = {shown:?}: a name of up to {PROMPT_NAME_CHARS} characters without control characters")))
}

/// Adds `row`: two rows of the same cell (and prompt, if named) are more
/// prompts of one experiment, and their counts add up, unless they
/// disagree on whether it is healthy.
fn add_row(path: &str, rows: &mut Vec<Observation>, row: Observation) -> Result<(), Error> {
    let same = |o: &Observation| {
        (
            o.context_tokens,
            o.depth_percent.to_bits(),
            o.topk,
            &o.config,
            o.layer,
            o.query_position,
            o.prefill_chunk,
            o.address_bound,
            &o.prompt,
        ) == (
            row.context_tokens,
            row.depth_percent.to_bits(),
            row.topk,
            &row.config,
            row.layer,
            row.query_position,
            row.prefill_chunk,
            row.address_bound,
            &row.prompt,
        )
    };
    let healthy_text = |h: Option<bool>| match h {
        Some(true) => "true",
        Some(false) => "false",
        None => "not given",
    };
    match rows.iter_mut().find(|o| same(o)) {
        Some(o) if o.healthy != row.healthy => Err(bad(
            path,
            row.line,
            format!(
                "healthy = {} contradicts line {} for the same configuration (healthy = {})",
                healthy_text(row.healthy),
                o.line,
                healthy_text(o.healthy)
            ),
        )),
        Some(o) => {
            o.found += row.found;
            o.total += row.total;
            Ok(())
        }
        None => {
            rows.push(row);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(_: &str) -> Result<(), String> {
        Ok(())
    }

    fn only_fp8(v: &str) -> Result<(), String> {
        if v.starts_with("fp8") || v == "bf16" {
            Ok(())
        } else {
            Err("unknown precision variant".into())
        }
    }

    // Issue 18, items 2 and 6: the format reads, and each bad input is one line naming file, line and field.
    #[test]
    fn reads_rows_maps_suffixes_and_sums_agreeing_duplicates() {
        let text = "# source: test\n# map cache = fp8-fp32scale\ncontext_tokens,depth_percent,topk,config,found,total,healthy\n\
                    4K,50,512,cache,2,3,false\n2048,10,512,bf16,3,3,true\n4096,50,512,cache,1,2,false\n";
        let o = parse("x.csv", text, &only_fp8).unwrap();
        assert_eq!(o.rows.len(), 2);
        let r = &o.rows[0];
        assert_eq!((r.context_tokens, r.topk, r.config.as_str(), r.label.as_str()), (4096, 512, "fp8-fp32scale", "cache"));
        assert_eq!((r.found, r.total, r.line, r.healthy), (3, 5, 4, Some(false)));
        assert_eq!(o.rows[1].healthy, Some(true));
    }

    #[test]
    fn a_prefill_chunk_column_is_read_and_kept_per_row() {
        let text = "context_tokens,depth_percent,topk,config,found,total,prefill_chunk\n6042,50,512,bf16,0,1,2K\n6042,50,512,bf16,1,1,\n6042,50,512,bf16,0,2,2048\n";
        let r = parse("x.csv", text, &any).unwrap().rows;
        assert_eq!(r.iter().map(|o| (o.prefill_chunk, o.found, o.total)).collect::<Vec<_>>(), vec![(Some(2048), 0, 3), (None, 1, 1)]);
        for bad in ["-1", "0.5", "x", "17M"] {
            let err = parse(
                "x.csv",
                &format!("context_tokens,depth_percent,topk,config,found,total,prefill_chunk\n6042,50,512,bf16,0,1,{bad}\n"),
                &any,
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.starts_with(&format!("x.csv:2: prefill_chunk = {bad:?}: a whole number of tokens")) && !err.contains('\n'),
                "{err}"
            );
        }
    }

    #[test]
    fn an_address_bound_column_is_read_per_row() {
        let h = "context_tokens,depth_percent,topk,config,found,total,address_bound\n";
        let text = format!("{h}160K,90,2048,bf16,0,1,52480\n160K,90,2048,bf16,1,1,\n8K,90,2048,bf16,1,1,52480\n");
        let r = parse("x.csv", &text, &any).unwrap().rows;
        assert_eq!(r.iter().map(|o| o.address_bound).collect::<Vec<_>>(), vec![Some(52480), None, Some(52480)]);
        for bad in ["0", "-1", "x", "17M", "0.5"] {
            let err = parse("x.csv", &format!("{h}6042,50,512,bf16,0,1,{bad}\n"), &any).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("x.csv:2: address_bound = {bad:?}: a token position from 1 to 16M")) && !err.contains('\n'),
                "{err}"
            );
        }
    }

    #[test]
    fn a_prompt_column_keeps_repeats_of_each_prompt_apart_and_refuses_bad_names() {
        let h = "context_tokens,depth_percent,topk,config,found,total,prompt\n";
        let text =
            format!("{h}4K,50,512,fp8,1,2,doc-17\n4K,50,512,fp8,0,1,\"doc 18, long\"\n4K,50,512,fp8,1,1,doc-17\n4K,50,512,fp8,1,1,\n");
        let r = parse("x.csv", &text, &any).unwrap().rows;
        let got: Vec<_> = r.iter().map(|o| (o.prompt.as_deref(), o.found, o.total, o.line)).collect();
        assert_eq!(got, [(Some("doc-17"), 2, 3, 2), (Some("doc 18, long"), 0, 1, 3), (None, 1, 1, 5)]);
        for (bad, shown) in [("x".repeat(101), format!("{}…", "x".repeat(60))), ("a\u{7}b".to_string(), "a\u{7}b".to_string())] {
            let err = parse("x.csv", &format!("{h}4K,50,512,fp8,1,1,{bad}\n"), &any).unwrap_err().to_string();
            assert_eq!(err, format!("x.csv:2: prompt = {shown:?}: a name of up to 100 characters without control characters"), "{bad:?}");
        }
    }

    // A k above the candidate rows is read: whether it selects every row is the simulation's to say.
    #[test]
    fn a_dense_topk_is_read_as_written() {
        let r = parse("x.csv", "context_tokens,depth_percent,topk,config,found,total\n6710,50,2048,fp8,1,1\n", &any).unwrap().rows;
        assert_eq!((r[0].context_tokens, r[0].topk), (6710, 2048));
    }

    #[test]
    fn bad_inputs_name_file_line_and_field() {
        let h = "context_tokens,depth_percent,topk,config,found,total,healthy\n";
        for (text, needle) in [
            (format!("{h}4K,50,512,fp8,x,3,\n"), "x.csv:2: found = \"x\""),
            (format!("{h}4K,50,512,fp8,4,3,\n"), "x.csv:2: found = 4: at most total (3)"),
            (format!("{h}4K,50,512,fp8,0,0,\n"), "x.csv:2: total = 0"),
            (format!("{h}4K,50,512,fp9,1,3,\n"), "x.csv:2: config = \"fp9\""),
            (format!("{h}4K,150,512,fp8,1,3,\n"), "depth_percent = \"150\""),
            (format!("{h}4Q,50,512,fp8,1,3,\n"), "context_tokens = \"4Q\""),
            (format!("{h}4K,50,512,fp8,1,3,maybe\n"), "healthy = \"maybe\""),
            (format!("{h}4K,50,512,fp8,1,3\n"), "6 fields where the header has 7"),
            (format!("{h}4K,50,512,fp8,1,3,true\n4K,50,512,fp8,1,3,false\n"), "x.csv:3: healthy"),
            ("context_tokens,depth_percent,topk,config,found\n4K,50,512,fp8,1\n".to_string(), "x.csv:1: header lacks the column \"total\""),
            ("context_tokens,depth,topk,config,found,total\n".to_string(), "header column \"depth\""),
            (format!("# map a = fp8\n# map a = bf16\n{h}"), "x.csv:2: map \"a\""),
            (h.to_string(), "no observation rows"),
            ("# only a comment\n".to_string(), "no header"),
        ] {
            let err = parse("x.csv", &text, &only_fp8).unwrap_err().to_string();
            assert!(err.contains(needle) && !err.contains('\n'), "{text:?}: {err}");
        }
        assert!(parse("x.csv", &format!("{h}4K,50,512,anything,1,3,\n"), &any).is_ok());
    }

    // Issue 30, item 9: what Excel writes (a byte-order mark, CRLF, quoted
    // fields) reads like the plain file, with the same line numbers.
    #[test]
    fn excel_csv_with_bom_quotes_and_crlf_reads_like_plain_csv() {
        let plain = "# map cache = fp8\ncontext_tokens,depth_percent,topk,config,found,total\n8K,50,512,cache,2,3\n\n4K,10,512,bf16,3,3\n";
        let excel = "\u{feff}# map cache = fp8\r\n\"context_tokens\",depth_percent,topk,config,found,total\r\n\"8K\",\"50\",512,\"cache\",2,3\r\n\r\n4K,10,512,bf16,3,3\r\n";
        let a = parse("x.csv", plain, &only_fp8).unwrap();
        let b = parse("x.csv", excel, &only_fp8).unwrap();
        assert_eq!(a.rows, b.rows);
        assert_eq!((b.rows[0].context_tokens, b.rows[0].line, b.rows[1].line), (8192, 3, 5));
        let err = parse("x.csv", "\u{feff}context_tokens,depth_percent,topk,config,found,total\n\"8,1K\",50,512,fp8,1,3\n", &only_fp8)
            .unwrap_err();
        assert_eq!(err.to_string(), "x.csv:2: context_tokens = \"8,1K\": a positive number of tokens up to 16M (K/M suffixes allowed)");
    }

    #[test]
    fn contradictions_and_late_maps_read_as_plain_words() {
        let h = "context_tokens,depth_percent,topk,config,found,total,healthy\n";
        let err = parse("x.csv", &format!("{h}4K,50,512,fp8,1,3,true\n4K,50,512,fp8,1,3,false\n"), &only_fp8).unwrap_err().to_string();
        assert_eq!(err, "x.csv:3: healthy = false contradicts line 2 for the same configuration (healthy = true)");
        let err = parse("x.csv", &format!("{h}4K,50,512,fp8,1,3,\n4K,50,512,fp8,1,3,no\n"), &only_fp8).unwrap_err().to_string();
        assert!(err.ends_with("healthy = false contradicts line 2 for the same configuration (healthy = not given)"), "{err}");
        let err = parse("x.csv", &format!("{h}# map a = fp8\n4K,50,512,a,1,3,\n"), &only_fp8).unwrap_err().to_string();
        assert_eq!(err, "x.csv:2: map \"a\": put every `# map` line before the header");
        let err = parse("x.csv", &format!("{h}1024M,50,512,fp8,1,3,\n"), &only_fp8).unwrap_err().to_string();
        assert!(err.starts_with("x.csv:2: context_tokens = \"1024M\": a positive number of tokens up to 16M"), "{err}");
    }
}

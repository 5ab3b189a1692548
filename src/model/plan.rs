//! A model's layer plan: for every layer, what selects the KV rows its
//! attention reads (docs/MODEL.md, "Layer plans"). Written in a scenario
//! as `stack.layers`, e.g. GLM-5.2's IndexShare or DeepSeek-V4.1's mixed
//! compress ratios; `stack.compress_ratios` is the older shorthand for a
//! plan whose indexer layers all share one ratio.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What one layer of the model attends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlanLayer {
    /// The raw window only (compress ratio 0): no row is selected.
    Window,
    /// Linear attention (KDA and kin): a recurrent state, no KV rows.
    Linear,
    /// An indexer of its own picks the top-k of the rows at this ratio.
    Indexer { ratio: u64 },
    /// Every compressed row at this ratio, no indexer (V4's HCA).
    Dense { ratio: u64 },
    /// The selection of layer `source` (an indexer layer before this one),
    /// reused without an indexer of its own (GLM-5.2's IndexShare,
    /// DeepSeek-V4.1's layers between its index sources).
    Reuse { source: usize },
}

impl PlanLayer {
    /// The plan's word for it: `w`, `lin`, `i4`, `h128`, `s20`.
    pub fn word(self) -> String {
        match self {
            PlanLayer::Window => "w".into(),
            PlanLayer::Linear => "lin".into(),
            PlanLayer::Indexer { ratio } => format!("i{ratio}"),
            PlanLayer::Dense { ratio } => format!("h{ratio}"),
            PlanLayer::Reuse { source } => format!("s{source}"),
        }
    }
}

/// A whole model's layers, checked: every reuse names an indexer layer
/// before it, every ratio is at least 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerPlan {
    layers: Vec<PlanLayer>,
}

/// Layers a plan may have.
pub const MAX_LAYERS: usize = 4096;

/// What a plan's text says of one layer before it is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Word {
    Layer(PlanLayer),
    /// `s`: the last indexer layer before this one.
    ReuseLast,
    /// A bare number of the `compress_ratios` shorthand.
    Ratio(u64),
}

impl LayerPlan {
    /// Checks a list of layers: the error names the first layer at fault.
    pub fn new(layers: Vec<PlanLayer>) -> Result<Self, String> {
        if layers.is_empty() {
            return Err("no layers".into());
        }
        if layers.len() > MAX_LAYERS {
            return Err(format!("{} layers: at most {MAX_LAYERS}", layers.len()));
        }
        for (l, &layer) in layers.iter().enumerate() {
            match layer {
                PlanLayer::Indexer { ratio: 0 } => {
                    return Err(format!(
                        "layer {l}: an indexer at ratio 0; an indexer needs a ratio of 1 or more (w is a raw-window-only layer)"
                    ))
                }
                PlanLayer::Dense { ratio: 0 } => {
                    return Err(format!(
                        "layer {l}: HCA at ratio 0; every-row attention needs a ratio of 1 or more (w is a raw-window-only layer)"
                    ))
                }
                PlanLayer::Reuse { source } if source == l => return Err(format!("layer {l} reuses its own selection (a cycle)")),
                PlanLayer::Reuse { source } if source > l => {
                    return Err(format!(
                        "layer {l} reuses layer {source}, a later layer: a layer reuses the selection of an earlier indexer layer"
                    ))
                }
                PlanLayer::Reuse { source } => match layers[source] {
                    PlanLayer::Indexer { .. } => {}
                    PlanLayer::Reuse { source: root } => {
                        return Err(format!("layer {l} reuses layer {source}, which itself reuses layer {root}: name layer {root}"))
                    }
                    other => return Err(format!("layer {l} reuses layer {source}, which has no indexer ({})", other.word())),
                },
                _ => {}
            }
        }
        Ok(LayerPlan { layers })
    }

    /// Parses a plan: comma-separated words, `X*N` for N repeats and
    /// `(A, B, …)*N` for a group. Words: `w` raw window only, `lin` linear
    /// attention, `iR` an indexer at ratio R, `hR` every row at ratio R,
    /// `sN` the selection of layer N, `s` that of the last indexer layer
    /// before it. GLM-5.2-like: `i1*3, (i1, s, s, s)*18, …`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let words = parse_words(text, &plan_word)?;
        if words.iter().any(|w| matches!(w, Word::Ratio(_))) {
            return Err("bare numbers belong to stack.compress_ratios; a plan says w, lin, iR, hR, s or sN".into());
        }
        Self::resolve(&words)
    }

    /// The `compress_ratios` shorthand: 0 is a raw-window-only layer, a
    /// layer at `indexer_ratio` has an indexer, any other ratio is HCA.
    pub fn from_compress_ratios(text: &str, indexer_ratio: u64) -> Result<Self, String> {
        let words = parse_words(text, &ratio_word)?;
        let layers = words
            .iter()
            .map(|w| match *w {
                Word::Ratio(0) => PlanLayer::Window,
                Word::Ratio(r) if r == indexer_ratio => PlanLayer::Indexer { ratio: r },
                Word::Ratio(r) => PlanLayer::Dense { ratio: r },
                Word::Layer(l) => l,
                Word::ReuseLast => PlanLayer::Window,
            })
            .collect();
        Self::new(layers)
    }

    fn resolve(words: &[Word]) -> Result<Self, String> {
        let mut layers = Vec::with_capacity(words.len());
        let mut last_indexer = None;
        for (l, w) in words.iter().enumerate() {
            let layer = match *w {
                Word::Layer(layer) => layer,
                Word::ReuseLast => PlanLayer::Reuse {
                    source: last_indexer
                        .ok_or_else(|| format!("layer {l} reuses the last indexer layer before it (s), and there is none"))?,
                },
                Word::Ratio(r) => unreachable!("ratio {r} refused before"),
            };
            if matches!(layer, PlanLayer::Indexer { .. }) {
                last_indexer = Some(l);
            }
            layers.push(layer);
        }
        Self::new(layers)
    }

    pub fn layers(&self) -> &[PlanLayer] {
        &self.layers
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The model layers with an indexer of their own, in order.
    pub fn indexers(&self) -> Vec<usize> {
        (0..self.layers.len()).filter(|&l| matches!(self.layers[l], PlanLayer::Indexer { .. })).collect()
    }

    /// Per indexer layer (in [`Self::indexers`] order), the layers that
    /// reuse its selection.
    pub fn reusers(&self) -> Vec<Vec<usize>> {
        let indexers = self.indexers();
        let mut out = vec![Vec::new(); indexers.len()];
        for (l, layer) in self.layers.iter().enumerate() {
            if let PlanLayer::Reuse { source } = *layer {
                let i = indexers.binary_search(&source).expect("a checked plan reuses indexer layers");
                out[i].push(l);
            }
        }
        out
    }

    /// Whether the plan reuses selections or mixes indexer ratios: what the
    /// `compress_ratios` shorthand cannot say.
    pub fn needs_words(&self) -> bool {
        let mut ratios = self.layers.iter().filter_map(|l| match l {
            PlanLayer::Indexer { ratio } => Some(*ratio),
            _ => None,
        });
        let first = ratios.next();
        self.layers.iter().any(|l| matches!(l, PlanLayer::Reuse { .. } | PlanLayer::Linear)) || ratios.any(|r| Some(r) != first)
    }

    /// The plan in its own words, runs of a repeated word or group written
    /// once: `w*2, (i4, h128)*20, i4`.
    pub fn to_words(&self) -> String {
        compress(&self.layers.iter().map(|l| l.word()).collect::<Vec<_>>())
    }

    /// Layer `l`'s compress ratio: an indexer's or HCA layer's own, a
    /// reusing layer's source's, 0 for a layer without rows.
    pub fn ratio_of(&self, l: usize) -> u64 {
        match self.layers[l] {
            PlanLayer::Indexer { ratio } | PlanLayer::Dense { ratio } => ratio,
            PlanLayer::Reuse { source } => self.ratio_of(source),
            PlanLayer::Window | PlanLayer::Linear => 0,
        }
    }

    /// Every layer's ratio as the `compress_ratios` shorthand lists them,
    /// when the plan can be said so.
    pub fn compress_ratios(&self) -> Option<Vec<u64>> {
        (!self.needs_words()).then(|| (0..self.layers.len()).map(|l| self.ratio_of(l)).collect())
    }

    /// As `compress_ratios` text (`0*2, (4, 128)*20, 4`), when the plan can
    /// be said so.
    pub fn to_ratios(&self) -> Option<String> {
        let ratios = self.compress_ratios()?;
        Some(compress(&ratios.iter().map(u64::to_string).collect::<Vec<_>>()))
    }
}

impl fmt::Display for LayerPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_words())
    }
}

/// Words with runs shortened: a word or a group of up to four words that
/// repeats is written `X*N` or `(A, B)*N`.
fn compress(words: &[String]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let mut best = (1usize, 1usize); // (group length, repeats)
        for len in 1..=4.min(words.len() - i) {
            let mut n = 1;
            while i + (n + 1) * len <= words.len() && words[i + n * len..i + (n + 1) * len] == words[i..i + len] {
                n += 1;
            }
            if n > 1 && n * len > best.0 * best.1 {
                best = (len, n);
            }
        }
        let (len, n) = best;
        let group = words[i..i + len].join(", ");
        parts.push(match (len, n) {
            (_, 1) => group,
            (1, n) => format!("{group}*{n}"),
            (_, n) => format!("({group})*{n}"),
        });
        i += len * n;
    }
    parts.join(", ")
}

fn skip_spaces(chars: &[char], pos: &mut usize) {
    while chars.get(*pos).is_some_and(|c| c.is_whitespace()) {
        *pos += 1;
    }
}

type WordParser = dyn Fn(&[char], &mut usize) -> Result<Word, String>;

fn parse_words(text: &str, word: &WordParser) -> Result<Vec<Word>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut pos = 0;
    let out = parse_list(&chars, &mut pos, 0, word)?;
    skip_spaces(&chars, &mut pos);
    if pos != chars.len() {
        return Err(format!("unexpected {:?} at character {}", chars[pos], pos + 1));
    }
    if out.is_empty() {
        return Err("no layers".into());
    }
    Ok(out)
}

fn parse_list(chars: &[char], pos: &mut usize, depth: usize, word: &WordParser) -> Result<Vec<Word>, String> {
    let mut out = Vec::new();
    loop {
        skip_spaces(chars, pos);
        let mut item = if chars.get(*pos) == Some(&'(') {
            if depth > 4 {
                return Err("groups nested more than 4 deep".into());
            }
            *pos += 1;
            let inner = parse_list(chars, pos, depth + 1, word)?;
            skip_spaces(chars, pos);
            match chars.get(*pos) {
                Some(')') => {}
                Some(c) => return Err(format!("expected ) at character {}, found {c:?}", *pos + 1)),
                None => return Err("missing ) at the end".into()),
            }
            *pos += 1;
            inner
        } else {
            vec![word(chars, pos)?]
        };
        skip_spaces(chars, pos);
        if chars.get(*pos) == Some(&'*') {
            *pos += 1;
            skip_spaces(chars, pos);
            let n = parse_number(chars, pos)? as usize;
            skip_spaces(chars, pos);
            if n == 0 || n.saturating_mul(item.len()) > MAX_LAYERS {
                return Err(format!("repeat count {n}: from 1 to {MAX_LAYERS} layers in all"));
            }
            item = item.repeat(n);
        }
        out.extend(item);
        if out.len() > MAX_LAYERS {
            return Err(format!("more than {MAX_LAYERS} layers"));
        }
        match chars.get(*pos) {
            Some(',') => *pos += 1,
            _ => return Ok(out),
        }
    }
}

fn parse_number(chars: &[char], pos: &mut usize) -> Result<u64, String> {
    let start = *pos;
    while chars.get(*pos).is_some_and(char::is_ascii_digit) {
        *pos += 1;
    }
    if start == *pos {
        return Err(match chars.get(start) {
            Some(c) => format!("expected a number at character {}, found {c:?}", start + 1),
            None => "expected a number at the end".into(),
        });
    }
    chars[start..*pos].iter().collect::<String>().parse().map_err(|_| format!("number too large at character {}", start + 1))
}

fn ratio_word(chars: &[char], pos: &mut usize) -> Result<Word, String> {
    parse_number(chars, pos).map(Word::Ratio)
}

/// One word of a plan: `w`, `lin`, `iR`, `hR`, `s`, `sN`.
fn plan_word(chars: &[char], pos: &mut usize) -> Result<Word, String> {
    let start = *pos;
    while chars.get(*pos).is_some_and(|c| c.is_ascii_alphabetic()) {
        *pos += 1;
    }
    let name: String = chars[start..*pos].iter().collect();
    let has_number = chars.get(*pos).is_some_and(char::is_ascii_digit);
    let at = start + 1;
    match (name.as_str(), has_number) {
        ("w", false) => Ok(Word::Layer(PlanLayer::Window)),
        ("lin", false) => Ok(Word::Layer(PlanLayer::Linear)),
        ("s", false) => Ok(Word::ReuseLast),
        ("s", true) => Ok(Word::Layer(PlanLayer::Reuse { source: parse_number(chars, pos)? as usize })),
        ("i", true) => Ok(Word::Layer(PlanLayer::Indexer { ratio: parse_number(chars, pos)? })),
        ("h", true) => Ok(Word::Layer(PlanLayer::Dense { ratio: parse_number(chars, pos)? })),
        ("i" | "h", false) => Err(format!("{name} at character {at} needs its ratio, e.g. {name}4")),
        ("", true) => Ok(Word::Ratio(parse_number(chars, pos)?)),
        ("", false) => Err(match chars.get(start) {
            Some(c) => format!("expected a layer (w, lin, iR, hR, s, sN) at character {at}, found {c:?}"),
            None => "expected a layer (w, lin, iR, hR, s, sN) at the end".into(),
        }),
        _ => Err(format!("unknown layer {name:?} at character {at}: one of w, lin, iR, hR, s, sN")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_and_print_in_their_own_words() {
        let v4 = LayerPlan::from_compress_ratios("0*2, (4, 128)*20, 4", 4).unwrap();
        assert_eq!(v4.len(), 43);
        assert_eq!(v4.to_words(), "w*2, (i4, h128)*20, i4");
        assert_eq!(v4.to_ratios().unwrap(), "0*2, (4, 128)*20, 4");
        assert!(!v4.needs_words());
        assert_eq!(LayerPlan::parse(&v4.to_words()).unwrap(), v4);

        let shared = LayerPlan::parse("i1, s, s, (i1, s, s, s)*2, s0").unwrap();
        assert_eq!(shared.indexers(), vec![0, 3, 7]);
        assert_eq!(shared.reusers(), vec![vec![1, 2, 11], vec![4, 5, 6], vec![8, 9, 10]]);
        assert!(shared.needs_words() && shared.to_ratios().is_none());
        assert_eq!(shared.to_words(), "i1, s0*2, i1, s3*3, i1, s7*3, s0");
        assert_eq!(LayerPlan::parse(&shared.to_words()).unwrap(), shared);

        let mixed = LayerPlan::parse("w*2, i2, s2*5, i1, lin").unwrap();
        assert!(mixed.needs_words());
        assert_eq!(mixed.indexers(), vec![2, 8]);
    }

    /// A malformed plan is refused in one line that names the layer.
    #[test]
    fn malformed_plans_name_the_layer() {
        let err = |t: &str| LayerPlan::parse(t).unwrap_err();
        assert_eq!(
            err("i1, s3, i1, i1"),
            "layer 1 reuses layer 3, a later layer: a layer reuses the selection of an earlier indexer layer"
        );
        assert_eq!(err("i1, s1"), "layer 1 reuses its own selection (a cycle)");
        assert_eq!(err("i1, s0, s1"), "layer 2 reuses layer 1, which itself reuses layer 0: name layer 0");
        assert_eq!(err("w, s0"), "layer 1 reuses layer 0, which has no indexer (w)");
        assert_eq!(err("w, i0"), "layer 1: an indexer at ratio 0; an indexer needs a ratio of 1 or more (w is a raw-window-only layer)");
        assert_eq!(err("w, s"), "layer 1 reuses the last indexer layer before it (s), and there is none");
        assert_eq!(err("i4, x"), "unknown layer \"x\" at character 5: one of w, lin, iR, hR, s, sN");
        assert_eq!(err("i4, i"), "i at character 5 needs its ratio, e.g. i4");
        assert_eq!(err("i4, 4"), "bare numbers belong to stack.compress_ratios; a plan says w, lin, iR, hR, s or sN");
        assert_eq!(err("(i4, w"), "missing ) at the end");
        assert_eq!(err("i4*0"), "repeat count 0: from 1 to 4096 layers in all");
        assert_eq!(err(""), "expected a layer (w, lin, iR, hR, s, sN) at the end");
        assert!(err("i4*99999999999999999999").starts_with("number too large"));
        for line in ["i1, s3", "i1, s1", "w, i0"].map(err) {
            assert!(!line.contains('\n') && line.len() < 200, "{line}");
        }
    }
}

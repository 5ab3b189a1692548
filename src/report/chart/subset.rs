//! A TrueType subsetter for SVG charts: the embedded font cut down to the
//! glyphs a chart's text uses, so an SVG carries a few kilobytes of font
//! instead of the whole 740 KB face (issue 17, "SVGs that do not embed a
//! megabyte of font each").
//!
//! The subset keeps what a browser needs to render the text with the same
//! metrics: `cmap` (format 4, only the used characters), `glyf`/`loca`
//! (the used glyphs and the components of composite ones, renumbered in
//! ascending original order), `hmtx`/`hhea`, `head`, `maxp`, `OS/2`,
//! `name` (the copyright and licence notices stay), `post` (version 3, no
//! glyph names) and the hinting tables. Layout tables (GSUB, GPOS, kern)
//! are dropped: charts place text with the unkerned advances plotters
//! measures. The output depends only on the font and the character set,
//! so it is byte-identical from run to run.

use std::collections::{BTreeMap, BTreeSet};

fn u16_at(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes([*d.get(at)?, *d.get(at + 1)?, *d.get(at + 2)?, *d.get(at + 3)?]))
}

/// The tables of a TrueType font, by tag.
fn tables(font: &[u8]) -> Option<BTreeMap<[u8; 4], &[u8]>> {
    let n = u16_at(font, 4)? as usize;
    let mut out = BTreeMap::new();
    for i in 0..n {
        let rec = 12 + 16 * i;
        let tag: [u8; 4] = font.get(rec..rec + 4)?.try_into().ok()?;
        let (off, len) = (u32_at(font, rec + 8)? as usize, u32_at(font, rec + 12)? as usize);
        out.insert(tag, font.get(off..off.checked_add(len)?)?);
    }
    Some(out)
}

/// The glyph of `ch` in a format 4 `cmap` subtable (Unicode BMP); 0 if none.
fn glyph_of(sub: &[u8], ch: u32) -> Option<u16> {
    if ch > 0xFFFF {
        return Some(0);
    }
    let ch = ch as u16;
    let seg_x2 = u16_at(sub, 6)? as usize;
    let ends = 14;
    let starts = ends + seg_x2 + 2;
    let deltas = starts + seg_x2;
    let ranges = deltas + seg_x2;
    for s in (0..seg_x2).step_by(2) {
        if ch > u16_at(sub, ends + s)? {
            continue;
        }
        let start = u16_at(sub, starts + s)?;
        if ch < start {
            return Some(0);
        }
        let delta = u16_at(sub, deltas + s)?;
        let range = u16_at(sub, ranges + s)? as usize;
        if range == 0 {
            return Some(ch.wrapping_add(delta));
        }
        let g = u16_at(sub, ranges + s + range + 2 * (ch - start) as usize)?;
        return Some(if g == 0 { 0 } else { g.wrapping_add(delta) });
    }
    Some(0)
}

/// The Windows Unicode BMP (3, 1) format 4 subtable of a `cmap`.
fn unicode_subtable(cmap: &[u8]) -> Option<&[u8]> {
    let n = u16_at(cmap, 2)? as usize;
    (0..n).find_map(|i| {
        let rec = 4 + 8 * i;
        let (platform, encoding, off) = (u16_at(cmap, rec)?, u16_at(cmap, rec + 2)?, u32_at(cmap, rec + 4)? as usize);
        let sub = cmap.get(off..)?;
        (platform == 3 && encoding == 1 && u16_at(sub, 0)? == 4).then_some(sub)
    })
}

/// The bytes of glyph `g` in `glyf` (empty for a glyph without outline).
fn glyph_bytes<'a>(glyf: &'a [u8], loca: &[u8], long: bool, g: u16) -> Option<&'a [u8]> {
    let g = g as usize;
    let (a, b) = if long {
        (u32_at(loca, 4 * g)? as usize, u32_at(loca, 4 * g + 4)? as usize)
    } else {
        (u16_at(loca, 2 * g)? as usize * 2, u16_at(loca, 2 * g + 2)? as usize * 2)
    };
    glyf.get(a..b.max(a))
}

/// The component glyph ids of a composite glyph, with the byte offset of
/// each id in the glyph (empty for a simple glyph).
fn components(glyph: &[u8]) -> Option<Vec<(usize, u16)>> {
    let mut out = Vec::new();
    if glyph.len() < 10 || (u16_at(glyph, 0)? as i16) >= 0 {
        return Some(out);
    }
    let mut at = 10;
    loop {
        let flags = u16_at(glyph, at)?;
        out.push((at + 2, u16_at(glyph, at + 2)?));
        at += 4 + if flags & 0x0001 != 0 { 4 } else { 2 };
        at += match flags {
            f if f & 0x0008 != 0 => 2,
            f if f & 0x0040 != 0 => 4,
            f if f & 0x0080 != 0 => 8,
            _ => 0,
        };
        if flags & 0x0020 == 0 {
            return Some(out);
        }
    }
}

fn checksum(data: &[u8]) -> u32 {
    data.chunks(4).fold(0u32, |sum, c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        sum.wrapping_add(u32::from_be_bytes(w))
    })
}

/// A format 4 `cmap` (platform 3, encoding 1) mapping each char to its new glyph id.
fn build_cmap(map: &BTreeMap<u16, u16>) -> Vec<u8> {
    let mut segs: Vec<(u16, u16, u16)> = map.iter().map(|(&c, &g)| (c, c, g.wrapping_sub(c))).collect();
    segs.push((0xFFFF, 0xFFFF, 1));
    let n = segs.len() as u16;
    let search = 2 * (1u16 << (15 - n.leading_zeros()));
    let mut sub = Vec::new();
    let len = 16 + 8 * segs.len();
    for v in [4u16, len as u16, 0, 2 * n, search, search.trailing_zeros() as u16 - 1, 2 * n - search] {
        sub.extend(v.to_be_bytes());
    }
    segs.iter().for_each(|s| sub.extend(s.1.to_be_bytes()));
    sub.extend(0u16.to_be_bytes());
    segs.iter().for_each(|s| sub.extend(s.0.to_be_bytes()));
    segs.iter().for_each(|s| sub.extend(s.2.to_be_bytes()));
    segs.iter().for_each(|_| sub.extend(0u16.to_be_bytes()));
    let mut cmap = Vec::new();
    for v in [0u16, 1, 3, 1] {
        cmap.extend(v.to_be_bytes());
    }
    cmap.extend(12u32.to_be_bytes());
    cmap.extend(sub);
    cmap
}

/// `font` cut down to the glyphs of `chars` (plus `.notdef`); None when the
/// font is not a TrueType font this subsetter can read.
pub fn subset(font: &[u8], chars: &BTreeSet<char>) -> Option<Vec<u8>> {
    let t = tables(font)?;
    let get = |tag: &[u8; 4]| t.get(tag).copied();
    let (head, hhea, maxp, hmtx, glyf, loca) = (get(b"head")?, get(b"hhea")?, get(b"maxp")?, get(b"hmtx")?, get(b"glyf")?, get(b"loca")?);
    let long = u16_at(head, 50)? == 1;
    let sub = unicode_subtable(get(b"cmap")?)?;
    let n_metrics = u16_at(hhea, 34)? as usize;

    // Characters → old glyphs; then the closure over composite components.
    let mut char_glyph = BTreeMap::new();
    let mut used = BTreeSet::from([0u16]);
    for &ch in chars {
        let g = glyph_of(sub, ch as u32)?;
        if g != 0 {
            char_glyph.insert(ch as u16, g);
            used.insert(g);
        }
    }
    let mut todo: Vec<u16> = used.iter().copied().collect();
    while let Some(g) = todo.pop() {
        for (_, c) in components(glyph_bytes(glyf, loca, long, g)?)? {
            if used.insert(c) {
                todo.push(c);
            }
        }
    }
    let new_id: BTreeMap<u16, u16> = used.iter().enumerate().map(|(i, &g)| (g, i as u16)).collect();

    // glyf, loca (long) and hmtx in the new order.
    let (mut new_glyf, mut new_loca, mut new_hmtx) = (Vec::new(), vec![0u8; 4], Vec::new());
    for &g in &used {
        let mut bytes = glyph_bytes(glyf, loca, long, g)?.to_vec();
        for (at, c) in components(&bytes)? {
            bytes[at..at + 2].copy_from_slice(&new_id[&c].to_be_bytes());
        }
        new_glyf.extend(&bytes);
        new_glyf.resize(new_glyf.len().next_multiple_of(4), 0);
        new_loca.extend((new_glyf.len() as u32).to_be_bytes());
        let gi = g as usize;
        let advance = u16_at(hmtx, 4 * gi.min(n_metrics - 1))?;
        let lsb = if gi < n_metrics { u16_at(hmtx, 4 * gi + 2)? } else { u16_at(hmtx, 4 * n_metrics + 2 * (gi - n_metrics))? };
        new_hmtx.extend(advance.to_be_bytes());
        new_hmtx.extend(lsb.to_be_bytes());
    }
    let count = used.len() as u16;
    let mut new_head = head.to_vec();
    new_head[8..12].copy_from_slice(&[0; 4]);
    new_head[50..52].copy_from_slice(&1u16.to_be_bytes());
    let mut new_hhea = hhea.to_vec();
    new_hhea[34..36].copy_from_slice(&count.to_be_bytes());
    let mut new_maxp = maxp.to_vec();
    new_maxp[4..6].copy_from_slice(&count.to_be_bytes());
    let mut post = get(b"post")?.get(..32)?.to_vec();
    post[0..4].copy_from_slice(&0x0003_0000u32.to_be_bytes());

    let mut out_tables: BTreeMap<[u8; 4], Vec<u8>> = BTreeMap::new();
    out_tables.insert(*b"cmap", build_cmap(&char_glyph.iter().map(|(&c, g)| (c, new_id[g])).collect()));
    out_tables.insert(*b"glyf", new_glyf);
    out_tables.insert(*b"head", new_head);
    out_tables.insert(*b"hhea", new_hhea);
    out_tables.insert(*b"hmtx", new_hmtx);
    out_tables.insert(*b"loca", new_loca);
    out_tables.insert(*b"maxp", new_maxp);
    out_tables.insert(*b"post", post);
    for tag in [b"OS/2", b"name", b"cvt ", b"fpgm", b"prep", b"gasp"] {
        if let Some(data) = get(tag) {
            out_tables.insert(*tag, data.to_vec());
        }
    }

    Some(font_file(&out_tables))
}

/// A TrueType file of `tables`: offset table, directory (sorted by tag: the
/// map's order), the tables' data, and head's checksum adjustment.
fn font_file(out_tables: &BTreeMap<[u8; 4], Vec<u8>>) -> Vec<u8> {
    let n = out_tables.len() as u16;
    let search = 16 * (1u16 << (15 - n.leading_zeros()));
    let mut out = Vec::new();
    out.extend(0x0001_0000u32.to_be_bytes());
    for v in [n, search, search.trailing_zeros() as u16 - 4, 16 * n - search] {
        out.extend(v.to_be_bytes());
    }
    let mut offset = 12 + 16 * out_tables.len();
    let mut body = Vec::new();
    let mut head_at = 0;
    for (tag, data) in out_tables {
        if tag == b"head" {
            head_at = offset + 8;
        }
        out.extend(tag);
        out.extend(checksum(data).to_be_bytes());
        out.extend((offset as u32).to_be_bytes());
        out.extend((data.len() as u32).to_be_bytes());
        body.extend(data);
        body.resize(body.len().next_multiple_of(4), 0);
        offset = 12 + 16 * out_tables.len() + body.len();
    }
    out.extend(body);
    let adjust = 0xB1B0_AFBAu32.wrapping_sub(checksum(&out));
    out[head_at..head_at + 4].copy_from_slice(&adjust.to_be_bytes());
    out
}

/// The characters of an SVG's text: every text node, entities decoded.
pub fn svg_text_chars(svg: &str) -> BTreeSet<char> {
    let mut chars = BTreeSet::new();
    for part in svg.split('>').skip(1) {
        let text = part.split('<').next().unwrap_or("");
        let decoded = text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&");
        chars.extend(decoded.chars().filter(|c| !c.is_control()));
    }
    chars
}

#[cfg(test)]
mod tests {
    use super::*;
    /// The face the charts embed (font.rs holds it; read here too so that
    /// the subsetter does not import its one caller).
    static DEJAVU_SANS_TTF: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

    #[test]
    fn a_subset_maps_its_characters_and_only_those() {
        // Issue 17 (SVG size): the subset keeps the used glyphs, renumbered,
        // and is a readable font whose cmap finds each of them.
        let chars: BTreeSet<char> = "k=512 · fp8 ≥ 128K Δ recall é".chars().collect();
        let small = subset(DEJAVU_SANS_TTF, &chars).unwrap();
        assert!(small.len() < 40_000, "{} bytes", small.len());
        let t = tables(&small).unwrap();
        let sub = unicode_subtable(t[b"cmap"]).unwrap();
        let n = u16_at(t[b"maxp"], 4).unwrap();
        let mut seen = BTreeSet::new();
        for &c in &chars {
            let g = glyph_of(sub, c as u32).unwrap();
            // the space has a glyph too; every char maps to a distinct glyph
            assert!(g != 0 && g < n, "{c:?} → {g}");
            assert!(seen.insert(g));
        }
        assert_eq!(glyph_of(sub, 'Z' as u32), Some(0));
        // same input, same bytes
        assert_eq!(subset(DEJAVU_SANS_TTF, &chars).unwrap(), small);
        // the whole font sums to the magic checksum after adjustment
        assert_eq!(checksum(&small), 0xB1B0_AFBA);
        // advance widths carried over: 'k' keeps the original width
        let orig = tables(DEJAVU_SANS_TTF).unwrap();
        let og = glyph_of(unicode_subtable(orig[b"cmap"]).unwrap(), 'k' as u32).unwrap() as usize;
        let ng = glyph_of(sub, 'k' as u32).unwrap() as usize;
        assert_eq!(u16_at(t[b"hmtx"], 4 * ng), u16_at(orig[b"hmtx"], 4 * og));
    }

    #[test]
    fn composite_glyphs_bring_their_components() {
        // 'é' is a composite in DejaVu Sans: its components must be in the
        // subset and its references renumbered into range.
        let small = subset(DEJAVU_SANS_TTF, &BTreeSet::from(['é'])).unwrap();
        let t = tables(&small).unwrap();
        let n = u16_at(t[b"maxp"], 4).unwrap();
        let g = glyph_of(unicode_subtable(t[b"cmap"]).unwrap(), 'é' as u32).unwrap();
        let bytes = glyph_bytes(t[b"glyf"], t[b"loca"], true, g).unwrap();
        let comps = components(bytes).unwrap();
        assert!(!comps.is_empty() && n > 2);
        assert!(comps.iter().all(|&(_, c)| c < n && c != g));
    }

    #[test]
    fn text_nodes_are_decoded() {
        let chars = svg_text_chars("<svg><text x=\"1\">a &lt; b &amp; ≥</text><rect/></svg>");
        assert_eq!(chars, "a < b & ≥".chars().collect());
    }
}

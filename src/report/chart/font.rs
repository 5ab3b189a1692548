//! Embedded chart font.
//!
//! Chart text never depends on system fonts: DejaVu Sans (see
//! `assets/fonts/LICENSE-DejaVu.txt`) is compiled into the binary and
//! registered with plotters' ab_glyph font table under [`FONT_FAMILY`] the
//! first time a chart is rendered.

use std::sync::OnceLock;

use plotters::style::FontStyle;

/// The only font family name used in chart text styles.
pub const FONT_FAMILY: &str = "DejaVu Sans";

/// DejaVu Sans, embedded at compile time.
pub(crate) static DEJAVU_SANS_TTF: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();

/// Registers the embedded font with plotters exactly once per process.
///
/// Every render function calls this before drawing; calling it again is cheap.
pub fn ensure_font_registered() -> Result<(), String> {
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, DEJAVU_SANS_TTF)
                .map_err(|_| format!("embedded font {FONT_FAMILY} could not be parsed"))
        })
        .clone()
}

/// `<defs><style>` block embedding the font as a base64 `@font-face`, so SVG
/// output renders with DejaVu Sans even where it is not installed: only the
/// glyphs of `chars` (see [`super::subset`]), the whole face if the subsetter
/// cannot read it.
pub(crate) fn svg_font_defs(chars: &std::collections::BTreeSet<char>) -> String {
    let font = super::subset::subset(DEJAVU_SANS_TTF, chars);
    format!(
        "<defs><style>@font-face{{font-family:\"{FONT_FAMILY}\";src:url(data:font/ttf;base64,{});}}</style></defs>",
        base64(font.as_deref().unwrap_or(DEJAVU_SANS_TTF))
    )
}

/// Standard base64 (RFC 4648, with padding).
pub(crate) fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_font_registers_and_is_idempotent() {
        assert!(DEJAVU_SANS_TTF.len() > 100_000);
        ensure_font_registered().unwrap();
        ensure_font_registered().unwrap();
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}

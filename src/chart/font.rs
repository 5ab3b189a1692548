//! Embedded chart font.
//!
//! Chart text never depends on system fonts: DejaVu Sans (see
//! `assets/fonts/LICENSE-DejaVu.txt`) is compiled into the binary and
//! registered with plotters' ab_glyph font table under [`FONT_FAMILY`] the
//! first time a chart is rendered.

use std::sync::OnceLock;

use plotters::style::FontStyle;

use super::ChartError;

/// The only font family name used in chart text styles.
pub const FONT_FAMILY: &str = "DejaVu Sans";

/// DejaVu Sans, embedded at compile time.
pub(crate) static DEJAVU_SANS_TTF: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();

/// Registers the embedded font with plotters exactly once per process.
///
/// Every render function calls this before drawing; calling it again is cheap.
pub fn ensure_font_registered() -> Result<(), ChartError> {
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, DEJAVU_SANS_TTF)
                .map_err(|_| format!("embedded font {FONT_FAMILY} could not be parsed"))
        })
        .clone()
        .map_err(ChartError::Font)
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
}

//! What every chart shares: its error type, the image formats, the
//! [`Painter`] a chart implements, and the atomic rendering of a painter
//! into a `.png` or `.svg` file (with the embedded font).

use crate::error::Error;
use std::path::{Path, PathBuf};

use image::ImageEncoder;
use plotters::coord::Shift;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::prelude::{BitMapBackend, DrawingArea, DrawingBackend, IntoDrawingArea, SVGBackend};
use plotters_backend::DrawingErrorKind;

use super::font::{ensure_font_registered, svg_font_defs};
use super::subset::svg_text_chars;

/// Smallest accepted image side, in pixels.
pub const MIN_SIDE_PX: u32 = 200;
/// Largest accepted image side, in pixels.
pub const MAX_SIDE_PX: u32 = 16_384;

/// Checks one line's contexts for a log2 axis: positive and strictly
/// ascending (`name` says which line).
pub fn check_log2_contexts(name: &str, contexts: impl Iterator<Item = u64>) -> Result<(), ChartError> {
    let mut prev = 0u64;
    for c in contexts {
        if c == 0 {
            return Err(ChartError::InvalidInput(format!("{name}: context length 0 cannot go on a log axis")));
        }
        if c <= prev {
            return Err(ChartError::InvalidInput(format!("{name}: context lengths must be strictly ascending")));
        }
        prev = c;
    }
    Ok(())
}

/// Errors from chart rendering.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// The chart data cannot be drawn (empty, non-finite, out of range, …).
    #[error("invalid chart input: {0}")]
    InvalidInput(String),
    /// The output path has an extension other than `.png` / `.svg`.
    #[error("unsupported chart file extension in {0:?}: use .png or .svg")]
    UnsupportedFormat(PathBuf),
    /// The embedded font could not be registered.
    #[error("font error: {0}")]
    Font(String),
    /// plotters failed while drawing or encoding.
    #[error("drawing failed: {0}")]
    Draw(String),
    /// Creating, renaming or removing a file failed.
    #[error("I/O error on {path:?}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing the image failed or its path was refused
    /// ([`crate::base::files::write_file`]'s error, kept as it is).
    #[error(transparent)]
    Output(Error),
}

/// Converts any plotters error into [`ChartError::Draw`].
pub(crate) fn draw_err<E: std::fmt::Display>(e: E) -> ChartError {
    ChartError::Draw(e.to_string())
}

/// The bitmap backend's error type (plotters does not re-export its name).
type BitmapError = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

/// A PNG that could not be encoded or written, in words: the backend's own
/// Display is its Debug text (`ImageError(IoError(Custom { … }))`).
fn png_write_error(path: &Path, e: DrawingAreaErrorKind<BitmapError>) -> ChartError {
    let DrawingAreaErrorKind::BackendError(DrawingErrorKind::DrawingError(inner)) = e else { return draw_err(e) };
    let source = match inner {
        BitmapError::IOError(source) => source,
        BitmapError::ImageError(image) => {
            let kind = std::error::Error::source(&image)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .map_or(std::io::ErrorKind::Other, |io| io.kind());
            std::io::Error::new(kind, image.to_string())
        }
        other => return ChartError::Draw(format!("encoding the PNG: {}", bitmap_error_words(&other))),
    };
    ChartError::Io { path: path.to_path_buf(), source }
}

fn bitmap_error_words(e: &BitmapError) -> &'static str {
    match e {
        BitmapError::InvalidBuffer => "the pixel buffer does not match the image size",
        _ => "the image encoder failed",
    }
}

/// Output image format, chosen from the file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Svg,
}

impl ImageFormat {
    /// `.png` → [`ImageFormat::Png`], `.svg` → [`ImageFormat::Svg`]
    /// (case-insensitive); anything else is an error.
    pub fn from_path(path: &Path) -> Result<Self, ChartError> {
        match path.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase()).as_deref() {
            Some("png") => Ok(ImageFormat::Png),
            Some("svg") => Ok(ImageFormat::Svg),
            _ => Err(ChartError::UnsupportedFormat(path.to_path_buf())),
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Svg => "svg",
        }
    }
}

/// Something that can paint itself on any plotters backend.
pub(crate) trait Painter {
    fn paint<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), ChartError>;
}

pub(crate) fn check_size(width: u32, height: u32) -> Result<(), ChartError> {
    let ok = |s: u32| (MIN_SIDE_PX..=MAX_SIDE_PX).contains(&s);
    if ok(width) && ok(height) {
        Ok(())
    } else {
        Err(ChartError::InvalidInput(format!("image size {width}×{height} outside {MIN_SIDE_PX}..={MAX_SIDE_PX} px per side")))
    }
}

/// Renders `painter` in memory and writes the image to `path` through
/// [`crate::base::files::write_file`] (a temporary file renamed into place;
/// nothing is left on failure). The PNG is encoded exactly as plotters'
/// file backend encodes it (image's default PNG encoder, RGB8).
pub(crate) fn render_atomically<P: Painter>(painter: &P, path: &Path, width: u32, height: u32) -> Result<(), ChartError> {
    check_size(width, height)?;
    let format = ImageFormat::from_path(path)?;
    ensure_font_registered().map_err(ChartError::Font)?;
    let name =
        path.file_name().and_then(|f| f.to_str()).ok_or_else(|| ChartError::InvalidInput(format!("no usable file name in {path:?}")))?;
    let in_memory = MEMORY.with(|m| m.borrow().is_some());
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !in_memory {
        std::fs::create_dir_all(&dir).map_err(|source| ChartError::Io { path: dir.clone(), source })?;
    }
    let bytes = match format {
        ImageFormat::Png => {
            let mut pixels = vec![0u8; width as usize * height as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
                painter.paint(&root)?;
                root.present().map_err(|e| png_write_error(path, e))?;
            }
            let mut png = Vec::new();
            image::codecs::png::PngEncoder::new(&mut png).write_image(&pixels, width, height, image::ColorType::Rgb8).map_err(draw_err)?;
            png
        }
        ImageFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
                painter.paint(&root)?;
                root.present().map_err(draw_err)?;
            }
            embed_svg_font(&svg)?.into_bytes()
        }
    };
    if in_memory {
        MEMORY.with(|m| m.borrow_mut().as_mut().map(|images| images.push((name.to_string(), bytes))));
        return Ok(());
    }
    crate::base::files::write_file(path, &bytes).map_err(ChartError::Output)
}

/// Images drawn in memory: (file name, bytes), in the order drawn.
pub type Images = Vec<(String, Vec<u8>)>;

thread_local! {
    /// Where [`render_atomically`] puts images instead of files while
    /// [`in_memory`] runs: the chart registry's painters take a path, and
    /// this lets the same painters give bytes (to Python) without a second
    /// signature on every chart.
    static MEMORY: std::cell::RefCell<Option<Images>> = const { std::cell::RefCell::new(None) };
}

/// Runs `draw` (which renders charts to paths, on this thread) with every
/// image kept in memory instead of written: returns `draw`'s result and the
/// images as (file name, bytes), in the order drawn. Nothing touches the disk.
pub fn in_memory<T>(draw: impl FnOnce() -> T) -> (T, Images) {
    type Sink = Option<Images>;
    // Puts the previous sink back on the way out, a panic included.
    struct Restore(Sink);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            MEMORY.with(|m| *m.borrow_mut() = previous);
        }
    }
    let _restore = Restore(MEMORY.with(|m| m.borrow_mut().replace(Vec::new())));
    let out = draw();
    let images = MEMORY.with(|m| m.borrow_mut().take()).unwrap_or_default();
    (out, images)
}

/// Inserts the embedded font's `@font-face` (the glyphs the SVG's text uses) right after the `<svg …>` tag.
fn embed_svg_font(svg: &str) -> Result<String, ChartError> {
    let insert_at = svg
        .find("<svg")
        .and_then(|start| svg[start..].find('>').map(|end| start + end + 1))
        .ok_or_else(|| ChartError::Draw("SVG backend wrote no <svg> element".into()))?;
    let defs = svg_font_defs(&svg_text_chars(svg));
    let mut out = String::with_capacity(svg.len() + defs.len() + 1);
    out.push_str(&svg[..insert_at]);
    out.push('\n');
    out.push_str(&defs);
    out.push_str(&svg[insert_at..]);
    Ok(out)
}

impl From<ChartError> for Error {
    /// A chart's file name and folder are the user's: a wrong extension or a
    /// folder that cannot be written is a usage error; drawing failures are not.
    fn from(e: ChartError) -> Self {
        match e {
            ChartError::UnsupportedFormat(path) => {
                Error::Input { location: path.display().to_string(), message: "unsupported chart file extension: use .png or .svg".into() }
            }
            ChartError::Io { path, source } => Error::io(format!("writing chart {}", path.display()), source),
            // Say that it was a chart the tool was writing, as before the
            // writer was shared.
            ChartError::Output(Error::Io { context, source }) => match context.strip_prefix("writing ") {
                Some(rest) => Error::io(format!("writing chart {rest}"), source),
                None => Error::Io { context, source },
            },
            ChartError::Output(e) => e,
            other => Error::Chart(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 30, item 8: a full disk reads as words, not plotters' Debug text.
    #[test]
    fn a_failed_png_write_is_named_in_words() {
        let full = || std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device (os error 28)");
        let wrapped = [BitmapError::ImageError(full().into()), BitmapError::IOError(full())];
        for e in wrapped {
            let err = png_write_error(Path::new("out/c.png"), DrawingAreaErrorKind::BackendError(DrawingErrorKind::DrawingError(e)));
            let text = Error::from(err).to_string();
            assert_eq!(text, "writing chart out/c.png: No space left on device (os error 28)");
        }
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(ImageFormat::from_path(Path::new("a/b.png")).unwrap(), ImageFormat::Png);
        assert_eq!(ImageFormat::from_path(Path::new("b.SVG")).unwrap(), ImageFormat::Svg);
        assert!(matches!(ImageFormat::from_path(Path::new("b.jpg")), Err(ChartError::UnsupportedFormat(_))));
        assert!(ImageFormat::from_path(Path::new("noext")).is_err());
    }
}

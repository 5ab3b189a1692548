//! Real tensors in and out: dump one simulated trial to safetensors, and
//! replay recorded indexer tensors (safetensors or .npy) through every
//! precision variant, and check an engine's indexer against the bit-exact
//! reference of its declared cache layout. Layouts are documented in docs/TENSORS.md.

pub mod calibrate;
pub mod capture;
pub mod check;
pub mod checkpoint;
pub mod dump;
pub mod npy;
pub mod replay;

use crate::error::Error;

/// Largest file the readers accept (8 GiB): a bigger one is refused before
/// anything is allocated for it.
pub const MAX_FILE_BYTES: u64 = 8 << 30;

pub(crate) fn bad_file(path: &std::path::Path, message: impl Into<String>) -> Error {
    Error::Input { location: path.display().to_string(), message: message.into() }
}

/// Reads a whole file after checking its size against [`MAX_FILE_BYTES`]
/// (and reading no more than that from a file with no size, a device).
pub(crate) fn read_bounded(path: &std::path::Path) -> Result<Vec<u8>, Error> {
    let meta = std::fs::metadata(path).map_err(|e| bad_file(path, format!("cannot read: {e}")))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(bad_file(path, format!("{} bytes is more than the {} bytes this tool reads", meta.len(), MAX_FILE_BYTES)));
    }
    crate::base::files::read_capped(path, MAX_FILE_BYTES).map_err(|e| bad_file(path, format!("cannot read: {e}")))
}

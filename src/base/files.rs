//! The user's files, handled safely. Every output goes through
//! [`write_file`] (or [`write_file_with`] for a writer that needs a path):
//! a temporary file in the target's directory, synced, then renamed over
//! the target, so a failure never leaves a half-written file. Only regular
//! files and new paths are written: a symlink is written through (its
//! regular-file target is replaced, the link stays), and a directory,
//! device, FIFO or socket is refused with one line. Inputs that are small
//! by nature are read with a size cap ([`read_capped`]), and a directory a
//! run writes into is held by one process at a time ([`DirLock`]).

use crate::error::Error;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The most a scenario (TOML) file may hold: real ones are a few KiB.
pub const SCENARIO_FILE_CAP: u64 = 4 << 20;
/// The most a JSON file this tool reads whole may hold (`manifest.json`,
/// `model.safetensors.index.json`, a knob sweep's manifest): the largest
/// real index (DeepSeek-V3's, about 90 000 tensors) is under 10 MiB.
pub const JSON_FILE_CAP: u64 = 64 << 20;
/// The most an observations CSV may hold (one row per measured cell).
pub const OBSERVATIONS_FILE_CAP: u64 = 64 << 20;
/// The most a file that grows with the grid may hold (`results.jsonl`,
/// about 2 KiB per cell; `checkpoint.jsonl`, well under 1 KiB per chunk of
/// trials): a million cells fit, `/dev/zero` behind a link does not.
pub const GRID_FILE_CAP: u64 = 4 << 30;

/// The lock file [`DirLock`] keeps in a directory while it holds it.
pub const LOCK_FILE: &str = ".dsa-recall.lock";

/// Symlinks followed before a chain is called a loop (Linux's own limit).
const MAX_LINKS: usize = 40;

/// "4 MiB", "64 MiB", "8 GiB": a cap as messages print it.
pub fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{bytes} bytes")
    }
}

/// What a file type is, when it is not something an output may replace.
fn not_writable(meta: &fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_char_device() {
            return Some("a character device");
        }
        if t.is_block_device() {
            return Some("a block device");
        }
        if t.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

fn refused(path: &Path, what: &str) -> Error {
    Error::Input {
        location: path.display().to_string(),
        message: format!("is {what}: outputs are written only to regular files or new paths"),
    }
}

/// The file an output for `path` replaces: `path` itself, or, when `path`
/// is a symlink, the regular file (or missing path) at the end of its chain
/// (so the link stays a link). A directory, device, FIFO or socket, at the
/// path or at the end of its links, is refused.
pub fn output_target(path: &Path) -> Result<PathBuf, Error> {
    match fs::metadata(path) {
        Ok(meta) => {
            if let Some(what) = not_writable(&meta) {
                return Err(refused(path, what));
            }
            let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            if link {
                fs::canonicalize(path).map_err(|e| Error::io(format!("resolving the symlink {}", path.display()), e))
            } else {
                Ok(path.to_path_buf())
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => dangling_target(path),
        Err(e) => Err(Error::io(format!("writing {}", path.display()), e)),
    }
}

/// The missing path a chain of symlinks ends at (`path` itself when it is
/// no link): the output is created there.
fn dangling_target(path: &Path) -> Result<PathBuf, Error> {
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(&at).map_err(|e| Error::io(format!("resolving the symlink {}", at.display()), e))?;
                at = match at.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(at),
        }
    }
    Err(Error::Input { location: path.display().to_string(), message: format!("more than {MAX_LINKS} symlinks deep (a loop?)") })
}

/// `.NAME.PID.tmp` beside `target`: per process, so two writers never share one.
fn temp_path(target: &Path) -> Result<PathBuf, Error> {
    let name = target.file_name().ok_or_else(|| Error::Input {
        location: target.display().to_string(),
        message: "names no file: outputs are written only to regular files or new paths".into(),
    })?;
    Ok(target.with_file_name(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id())))
}

/// A new, empty temporary file; one left at the name by a killed process of
/// the same id is replaced. `create_new` never follows a link planted there.
fn create_temp(tmp: &Path) -> std::io::Result<fs::File> {
    let open = || fs::OpenOptions::new().write(true).create_new(true).open(tmp);
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fs::remove_file(tmp)?;
            open()
        }
        other => other,
    }
}

/// Writes `bytes` to `path` safely (see the module's notes).
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    write_file_with(path, |file, _| file.write_all(bytes).map_err(|e| Error::io(format!("writing {}", path.display()), e)))
}

/// [`write_file`] for a writer of its own: `fill` gets the temporary file,
/// open for writing, and its path (for writers that take a path; they must
/// write that same file, not replace it). The file is synced and renamed
/// over the target only when `fill` succeeds; otherwise it is removed.
pub fn write_file_with(path: &Path, fill: impl FnOnce(&mut fs::File, &Path) -> Result<(), Error>) -> Result<(), Error> {
    let target = output_target(path)?;
    let tmp = temp_path(&target)?;
    let io = |e| Error::io(format!("writing {}", path.display()), e);
    let mut file = create_temp(&tmp).map_err(io)?;
    let result = (|| {
        fill(&mut file, &tmp)?;
        file.sync_all().map_err(io)?;
        if let Ok(old) = fs::metadata(&target) {
            // A replaced file keeps its permissions.
            fs::set_permissions(&tmp, old.permissions()).map_err(io)?;
        }
        fs::rename(&tmp, &target).map_err(io)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Reads at most `cap` bytes of `path`; a longer file (or an endless one,
/// such as `/dev/zero`) is an error of kind `FileTooLarge`, found after
/// reading `cap + 1` bytes, never more.
pub fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    fs::File::open(path)?.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than {}, the most this tool reads from such a file", size_label(cap)),
        ));
    }
    Ok(bytes)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_text_capped(path: &Path, cap: u64) -> std::io::Result<String> {
    String::from_utf8(read_capped(path, cap)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8"))
}

/// An advisory lock on a directory (`flock` on [`LOCK_FILE`] in it, which
/// records the holder's process id and host), held until dropped. Another
/// process asking for it is refused at once with the holder's id; the lock
/// goes with the process, so a killed run leaves no stale lock (only the
/// file, which the next holder reuses). Dropping removes the file, and the
/// directory too when [`DirLock::create`] made it and it is still empty.
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
    created: Option<PathBuf>,
    _file: fs::File,
}

impl DirLock {
    /// Creates `dir` (and its parents) when missing, then takes its lock.
    pub fn create(dir: &Path) -> Result<DirLock, Error> {
        let created = !dir.exists();
        fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating output directory {}", dir.display()), e))?;
        let mut lock = DirLock::acquire(dir)?;
        lock.created = created.then(|| dir.to_path_buf());
        Ok(lock)
    }

    /// Takes the lock of `dir`, which must exist.
    pub fn acquire(dir: &Path) -> Result<DirLock, Error> {
        let path = dir.join(LOCK_FILE);
        let io = |e| Error::io(format!("locking {}", path.display()), e);
        // A holder that removes the file and exits between our open and our
        // lock leaves us holding a lock on a removed file: open again.
        for _ in 0..8 {
            let mut file = fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    let mut holder = String::new();
                    let _ = file.read_to_string(&mut holder);
                    let holder = holder.trim();
                    return Err(Error::Input {
                        location: dir.display().to_string(),
                        message: format!(
                            "in use by another dsa-recall process ({}; lock file {LOCK_FILE}); \
                             wait for it to finish, or use another directory",
                            if holder.is_empty() { "pid unknown".to_string() } else { holder.to_string() }
                        ),
                    });
                }
                // A file system without locks (some network mounts): go on unlocked.
                Err(fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {}
                Err(fs::TryLockError::Error(e)) => return Err(io(e)),
            }
            if !same_file(&file, &path) {
                continue;
            }
            // The holder's id is a courtesy: on a full disk the lock holds
            // without it, and the run reports the disk where it writes.
            let _ = file.set_len(0).and_then(|()| file.write_all(format!("pid {}{}\n", std::process::id(), host_suffix()).as_bytes()));
            return Ok(DirLock { path, created: None, _file: file });
        }
        Err(io(std::io::Error::other("the lock file keeps being replaced")))
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Removed while still locked; the lock goes when the file closes.
        let _ = fs::remove_file(&self.path);
        if let Some(dir) = &self.created {
            // Only an empty directory goes: a refused run leaves none behind.
            let _ = fs::remove_dir(dir);
        }
    }
}

/// Whether `path` still names the open `file`.
fn same_file(file: &fs::File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

/// " on HOST" when the host name is known: a lock on a shared file system
/// may be held from another machine, where the pid means nothing here.
fn host_suffix() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname").map(|h| format!(" on {}", h.trim())).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn writes_a_new_file_and_replaces_an_old_one_leaving_no_temporary() {
        let d = tmpdir();
        let p = d.path().join("out.txt");
        write_file(&p, b"one").unwrap();
        write_file(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "no temporary file left");
    }

    #[cfg(unix)]
    #[test]
    fn a_replaced_file_keeps_its_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let d = tmpdir();
        let p = d.path().join("out.txt");
        fs::write(&p, b"old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        write_file(&p, b"new").unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_is_written_through_and_stays_a_link() {
        let d = tmpdir();
        let real = d.path().join("real.bin");
        let link = d.path().join("link.bin");
        fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink("real.bin", &link).unwrap();
        write_file(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
        // A dangling link (two deep) creates the file at its end.
        let end = d.path().join("sub");
        fs::create_dir(&end).unwrap();
        std::os::unix::fs::symlink(end.join("new.bin"), d.path().join("hop")).unwrap();
        std::os::unix::fs::symlink("hop", d.path().join("dangling")).unwrap();
        write_file(&d.path().join("dangling"), b"x").unwrap();
        assert_eq!(fs::read(end.join("new.bin")).unwrap(), b"x");
        assert!(fs::symlink_metadata(d.path().join("dangling")).unwrap().file_type().is_symlink());
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_loop_is_refused() {
        let d = tmpdir();
        std::os::unix::fs::symlink("b", d.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", d.path().join("b")).unwrap();
        assert!(write_file(&d.path().join("a"), b"x").is_err());
    }

    #[test]
    fn a_directory_is_refused_and_left_alone() {
        let d = tmpdir();
        let e = write_file(d.path(), b"x").unwrap_err().to_string();
        assert!(e.contains("is a directory") && e.contains(&d.path().display().to_string()), "{e}");
        assert!(d.path().is_dir());
    }

    #[cfg(unix)]
    #[test]
    fn devices_and_fifos_are_refused_and_left_alone() {
        use std::os::unix::fs::FileTypeExt;
        let e = write_file(Path::new("/dev/null"), b"x").unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("/dev/null: is a character device"), "{e}");
        assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        let d = tmpdir();
        let fifo = d.path().join("pipe");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let e = write_file(&fifo, b"x").unwrap_err().to_string();
        assert!(e.contains("is a FIFO"), "{e}");
        assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
        // Through a symlink too.
        let link = d.path().join("to-null");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        assert!(write_file(&link, b"x").unwrap_err().to_string().contains("is a character device"));
    }

    #[test]
    fn a_failed_fill_leaves_the_old_file_and_no_temporary() {
        let d = tmpdir();
        let p = d.path().join("out.txt");
        fs::write(&p, b"old").unwrap();
        let r = write_file_with(&p, |f, _| {
            f.write_all(b"half").unwrap();
            Err(Error::Quantize("stop".into()))
        });
        assert!(r.is_err());
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_full_disk_is_an_io_error_with_exit_code_2() {
        // /dev/full is refused as a device; its ENOSPC reaches a writer
        // that is handed it directly, and must surface as an I/O error.
        let mut f = fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let e = f.write_all(&[0; 4096]).and_then(|()| f.sync_all()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28));
        assert!(Error::io("writing x", e).is_usage());
    }

    #[test]
    fn reads_are_capped() {
        let d = tmpdir();
        let p = d.path().join("in.txt");
        fs::write(&p, b"12345").unwrap();
        assert_eq!(read_capped(&p, 5).unwrap(), b"12345");
        let e = read_capped(&p, 4).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("larger than 4 bytes"), "{e}");
        #[cfg(unix)]
        assert_eq!(read_capped(Path::new("/dev/zero"), 1 << 20).unwrap_err().kind(), std::io::ErrorKind::FileTooLarge);
        fs::write(&p, [0xff, 0xfe]).unwrap();
        assert_eq!(read_text_capped(&p, 10).unwrap_err().kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(size_label(SCENARIO_FILE_CAP), "4 MiB");
        assert_eq!(size_label(8 << 30), "8 GiB");
    }

    #[test]
    fn a_held_directory_is_refused_with_the_holders_pid_and_freed_on_drop() {
        let d = tmpdir();
        let first = DirLock::acquire(d.path()).unwrap();
        let e = DirLock::acquire(d.path()).unwrap_err();
        let text = e.to_string();
        assert!(e.is_usage() && text.contains(&format!("pid {}", std::process::id())), "{text}");
        drop(first);
        assert!(!d.path().join(LOCK_FILE).exists());
        let again = DirLock::acquire(d.path()).unwrap();
        drop(again);
        // A lock file left by a killed holder is taken over.
        fs::write(d.path().join(LOCK_FILE), "pid 1\n").unwrap();
        let taken = DirLock::acquire(d.path()).unwrap();
        assert!(fs::read_to_string(d.path().join(LOCK_FILE)).unwrap().starts_with(&format!("pid {}", std::process::id())));
        drop(taken);
        // A directory made for the lock goes with it while empty, and stays
        // once something was written into it.
        let made = d.path().join("a/b");
        drop(DirLock::create(&made).unwrap());
        assert!(!made.exists());
        let lock = DirLock::create(&made).unwrap();
        fs::write(made.join("results.jsonl"), b"").unwrap();
        drop(lock);
        assert!(made.join("results.jsonl").exists() && !made.join(LOCK_FILE).exists());
    }
}

//! The user's files, handled safely. Every output goes through
//! [`write_file`] (or [`write_file_with`] for a writer that needs a path):
//! a temporary file in the target's directory, synced, then renamed over
//! the target, so a failure never leaves a half-written file. Only regular
//! files and new paths are written. A symlink at an output's path is
//! refused, never written through nor replaced (what it points to may be
//! anyone's, and replacing it would break it silently); so is a directory,
//! device, FIFO or socket, each with one line. An output directory is
//! checked whole before anything is written into it
//! ([`check_output_dir_path`], [`check_owned_entries`]).
//!
//! Every input goes through [`open_input`]: only a regular file (or a link
//! to one) is opened, so a device or FIFO is refused at once instead of
//! read without end or waited on. Inputs that are small by nature are read
//! with a size cap ([`read_capped`]), a stream (stdin) with
//! [`read_stream_capped`], and a directory a run writes into is held by
//! one process at a time ([`DirLock`]).

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

/// The most `quantize` (or any command reading numbers) takes from stdin.
pub const STDIN_CAP: u64 = 64 << 20;

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

/// What a file type is, when it is not a regular file (None: it is one).
fn irregular(meta: &fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a directory");
    }
    if t.is_symlink() {
        return Some("a symlink");
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
    let why = if what == "a symlink" {
        "outputs are neither written through a link nor replace one: remove the link, or name the file itself"
    } else {
        "outputs are written only to regular files or new paths"
    };
    Error::Input { location: path.display().to_string(), message: format!("is {what}: {why}") }
}

/// Refuses an output path that is not a regular file or a new path: a
/// symlink (to anything), a directory, a device, a FIFO or a socket.
pub fn output_target(path: &Path) -> Result<PathBuf, Error> {
    match fs::symlink_metadata(path) {
        Ok(meta) => match irregular(&meta) {
            Some(what) => Err(refused(path, what)),
            None => Ok(path.to_path_buf()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(path.to_path_buf()),
        Err(e) => Err(Error::io(format!("writing {}", path.display()), e)),
    }
}

/// Refuses an output directory path that is neither a directory (or a
/// link to one) nor a path to create: `--out /dev/null`, a FIFO, a regular
/// file or a dangling link, each with one line saying what is allowed.
pub fn check_output_dir_path(dir: &Path) -> Result<(), Error> {
    let allowed = "an output directory is a directory, or a path where one can be made";
    let bad = |what: &str| Error::Input {
        location: format!("output directory {} (--out)", dir.display()),
        message: format!("is {what}: {allowed}"),
    };
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(meta) => Err(bad(irregular(&meta).unwrap_or("a regular file"))),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
            if fs::symlink_metadata(dir).is_ok() {
                return Err(bad("a dangling symlink"));
            }
            // The nearest existing ancestor must be a directory to make it in.
            match dir.ancestors().skip(1).find(|a| !a.as_os_str().is_empty() && fs::symlink_metadata(a).is_ok()) {
                Some(a) if !a.is_dir() => Err(Error::Input {
                    location: format!("output directory {} (--out)", dir.display()),
                    message: format!("cannot be made: {} is not a directory", a.display()),
                }),
                _ => Ok(()),
            }
        }
        Err(e) => Err(Error::io(format!("output directory {}", dir.display()), e)),
    }
}

/// Refuses, before anything is written, an entry of `dir` that a run would
/// write over (`owned` says which names it writes) but may not: a symlink,
/// a device, a FIFO, a socket, or a directory where a file goes. Owned
/// directories (`owned_dir`: a knob sweep's value directories) are checked
/// the same way, one level down.
pub fn check_owned_entries(dir: &Path, owned: &dyn Fn(&str) -> bool, owned_dir: &dyn Fn(&str) -> bool) -> Result<(), Error> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("reading output directory {}", dir.display()), e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format!("reading output directory {}", dir.display()), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        if owned_dir(&name) && !meta.file_type().is_symlink() {
            if meta.is_dir() {
                check_owned_entries(&path, owned, &|_| false)?;
                continue;
            }
            return Err(refused(&path, irregular(&meta).unwrap_or("a regular file where a directory goes")));
        }
        if owned(&name) || owned_dir(&name) || name == LOCK_FILE {
            if let Some(what) = irregular(&meta) {
                return Err(refused(&path, what));
            }
        }
    }
    Ok(())
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

/// Opens an input file for reading: only a regular file (or a symlink to
/// one). A device, FIFO, socket or directory is refused at once, with an
/// error of kind `InvalidInput` saying what it is: `/dev/zero` would be
/// read without end, and a FIFO would wait for a writer that may never come.
pub fn open_input(path: &Path) -> std::io::Result<fs::File> {
    let not_regular = |what: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("is {what}, not a regular file (inputs are read only from regular files)"),
        )
    };
    // Checked before opening: opening a FIFO blocks until a writer comes.
    if let Some(what) = irregular(&fs::metadata(path)?) {
        return Err(not_regular(what));
    }
    let file = fs::File::open(path)?;
    // Checked again on what was opened (the path may have changed since).
    match irregular(&file.metadata()?) {
        Some(what) => Err(not_regular(what)),
        None => Ok(file),
    }
}

fn too_large(cap: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        format!("larger than {}, the most this tool reads from such a file", size_label(cap)),
    )
}

/// Reads at most `cap` bytes of the regular file `path` ([`open_input`]); a
/// longer file is an error of kind `FileTooLarge`, found from its size
/// before reading, or (for a file that grows) after reading `cap + 1`
/// bytes, never more.
pub fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let file = open_input(path)?;
    if file.metadata()?.len() > cap {
        return Err(too_large(cap));
    }
    read_stream_capped(&mut &file, cap).map_err(|e| if e.kind() == std::io::ErrorKind::FileTooLarge { too_large(cap) } else { e })
}

/// Reads a stream (stdin, a pipe) to its end, but at most `cap` bytes: a
/// longer one is an error of kind `FileTooLarge` after reading `cap + 1`
/// bytes, so an endless stream (`< /dev/zero`, `yes |`) ends at once.
pub fn read_stream_capped(input: &mut dyn Read, cap: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    (&mut *input).take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("longer than {}, the most this tool reads from a stream", size_label(cap)),
        ));
    }
    Ok(bytes)
}

/// How long a stream read through [`IdleTimeoutReader`] may send nothing
/// before it is given up: generous for a real producer (a script that
/// computes its numbers first), short enough that `sleep 1000 | …` does
/// not hang a pipeline. [`STDIN_IDLE_ENV`] changes it.
pub const STDIN_IDLE_SECS: f64 = 30.0;
/// The environment variable that sets the idle timeout of stdin in
/// seconds (0: wait for ever).
pub const STDIN_IDLE_ENV: &str = "DSA_RECALL_STDIN_TIMEOUT";

/// The idle timeout of stdin: [`STDIN_IDLE_ENV`] if set, else
/// [`STDIN_IDLE_SECS`]; None: wait for ever (`0`).
pub fn stdin_idle_timeout() -> Result<Option<std::time::Duration>, Error> {
    let secs = match std::env::var(STDIN_IDLE_ENV) {
        Err(std::env::VarError::NotPresent) => STDIN_IDLE_SECS,
        Ok(text) => text.trim().parse::<f64>().ok().filter(|s| s.is_finite() && (0.0..=1e6).contains(s)).ok_or_else(|| {
            crate::error::ConfigError::new(
                STDIN_IDLE_ENV,
                format!("{text:?}"),
                "seconds stdin may stay silent, from 0 (wait for ever) to 1000000",
            )
        })?,
        Err(std::env::VarError::NotUnicode(raw)) => {
            return Err(crate::error::ConfigError::new(STDIN_IDLE_ENV, format!("{raw:?}"), "seconds, as a number").into());
        }
    };
    Ok((secs > 0.0).then(|| std::time::Duration::from_secs_f64(secs)))
}

/// stdin for a command that reads it whole: behind an
/// [`IdleTimeoutReader`] of [`stdin_idle_timeout`], unless it is a
/// terminal (a person typing) or the timeout is 0.
pub fn stdin_input() -> Result<Box<dyn Read>, Error> {
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Ok(Box::new(std::io::stdin()));
    }
    Ok(match stdin_idle_timeout()? {
        Some(idle) => Box::new(IdleTimeoutReader::new(std::io::stdin(), idle)),
        None => Box::new(std::io::stdin()),
    })
}

/// A stream read on a thread of its own, so that a read waits at most
/// `idle` for the next bytes: one that sends nothing for that long (a pipe
/// whose writer never writes nor closes) fails with kind `TimedOut`
/// instead of blocking for ever. The thread stays blocked in its read
/// until the process ends or the stream does.
pub struct IdleTimeoutReader {
    chunks: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    pending: Vec<u8>,
    at: usize,
    idle: std::time::Duration,
    ended: bool,
}

impl IdleTimeoutReader {
    pub fn new<R: Read + Send + 'static>(mut input: R, idle: std::time::Duration) -> Self {
        let (tx, chunks) = std::sync::mpsc::sync_channel(4);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let sent = match input.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => tx.send(Ok(buf[..n].to_vec())),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => tx.send(Err(e)),
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        IdleTimeoutReader { chunks, pending: Vec::new(), at: 0, idle, ended: false }
    }
}

impl Read for IdleTimeoutReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.pending.len() && !self.ended {
            match self.chunks.recv_timeout(self.idle) {
                Ok(chunk) => {
                    self.pending = chunk?;
                    self.at = 0;
                }
                // The reading thread ended: the stream did.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.ended = true,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "nothing arrived for {} s (the idle timeout; {STDIN_IDLE_ENV}=SECONDS waits longer, 0 for ever)",
                            self.idle.as_secs_f64()
                        ),
                    ));
                }
            }
        }
        let n = out.len().min(self.pending.len() - self.at);
        out[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
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
    /// A path that is no directory is refused first ([`check_output_dir_path`]).
    pub fn create(dir: &Path) -> Result<DirLock, Error> {
        check_output_dir_path(dir)?;
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
        // Opening follows links: a planted one would have the pid written
        // through it, outside the directory.
        if let Some(what) = fs::symlink_metadata(&path).ok().and_then(|m| irregular(&m)) {
            return Err(refused(&path, what));
        }
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
    fn a_symlink_is_refused_never_written_through_nor_replaced() {
        let d = tmpdir();
        let real = d.path().join("real.bin");
        let link = d.path().join("link.bin");
        fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink("real.bin", &link).unwrap();
        let e = write_file(&link, b"new").unwrap_err();
        assert!(e.is_usage() && e.to_string().contains("link.bin: is a symlink: outputs are neither written through"), "{e}");
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"old");
        // A dangling link, and a loop, the same.
        std::os::unix::fs::symlink(d.path().join("nowhere.bin"), d.path().join("dangling")).unwrap();
        assert!(write_file(&d.path().join("dangling"), b"x").unwrap_err().to_string().contains("is a symlink"));
        assert!(!d.path().join("nowhere.bin").exists());
        std::os::unix::fs::symlink("b", d.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", d.path().join("b")).unwrap();
        assert!(write_file(&d.path().join("a"), b"x").is_err());
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 5, "no temporary left");
    }

    #[cfg(unix)]
    #[test]
    fn inputs_are_regular_files_only_refused_at_once() {
        let d = tmpdir();
        let fifo = d.path().join("pipe");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        // Opening a FIFO would wait for a writer: refused before opening.
        let e = read_capped(&fifo, 10).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("is a FIFO (named pipe), not a regular file"), "{e}");
        let e = read_capped(Path::new("/dev/zero"), 1 << 30).unwrap_err();
        assert!(e.to_string().starts_with("is a character device"), "{e}");
        assert!(read_capped(d.path(), 10).unwrap_err().to_string().starts_with("is a directory"));
        // A link to a regular file is read.
        fs::write(d.path().join("real"), b"abc").unwrap();
        std::os::unix::fs::symlink("real", d.path().join("link")).unwrap();
        assert_eq!(read_capped(&d.path().join("link"), 10).unwrap(), b"abc");
    }

    #[test]
    fn streams_are_capped() {
        let mut endless = std::io::repeat(0);
        let e = read_stream_capped(&mut endless, 1 << 20).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("longer than 1 MiB"), "{e}");
        assert_eq!(read_stream_capped(&mut &b"1.5\n"[..], 4).unwrap(), b"1.5\n");
    }

    #[cfg(unix)]
    #[test]
    fn an_output_directory_path_must_be_a_directory_or_new() {
        let d = tmpdir();
        assert!(check_output_dir_path(d.path()).is_ok());
        assert!(check_output_dir_path(&d.path().join("new/deeper")).is_ok());
        fs::write(d.path().join("file"), b"x").unwrap();
        std::os::unix::fs::symlink(d.path().join("gone"), d.path().join("dangling")).unwrap();
        std::os::unix::fs::symlink(".", d.path().join("here")).unwrap();
        assert!(check_output_dir_path(&d.path().join("here")).is_ok(), "a link to a directory is one");
        for (path, what) in [
            (Path::new("/dev/null").to_path_buf(), "is a character device"),
            (d.path().join("file"), "is a regular file"),
            (d.path().join("dangling"), "is a dangling symlink"),
            (d.path().join("file/sub"), "is not a directory"),
        ] {
            let e = check_output_dir_path(&path).unwrap_err();
            let text = e.to_string();
            assert!(e.is_usage() && text.starts_with("output directory ") && text.contains(what), "{text}");
        }
        let e = DirLock::create(Path::new("/dev/null")).unwrap_err().to_string();
        assert!(e.contains("an output directory is a directory"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn owned_entries_that_are_links_or_special_files_are_refused() {
        let d = tmpdir();
        let owned = |n: &str| n.ends_with(".csv");
        let value_dir = |n: &str| n.contains('=');
        fs::write(d.path().join("a.csv"), b"x").unwrap();
        std::os::unix::fs::symlink("/dev/null", d.path().join("mine.txt")).unwrap();
        assert!(check_owned_entries(d.path(), &owned, &value_dir).is_ok(), "a link the run does not write is left alone");
        std::os::unix::fs::symlink("/dev/null", d.path().join("b.csv")).unwrap();
        let e = check_owned_entries(d.path(), &owned, &value_dir).unwrap_err().to_string();
        assert!(e.contains("b.csv: is a symlink"), "{e}");
        fs::remove_file(d.path().join("b.csv")).unwrap();
        fs::create_dir_all(d.path().join("k=1/c.csv")).unwrap();
        let e = check_owned_entries(d.path(), &owned, &value_dir).unwrap_err().to_string();
        assert!(e.contains("c.csv: is a directory"), "{e}");
        fs::remove_dir(d.path().join("k=1/c.csv")).unwrap();
        std::os::unix::fs::symlink("/tmp", d.path().join("k=2")).unwrap();
        assert!(check_owned_entries(d.path(), &owned, &value_dir).unwrap_err().to_string().contains("k=2: is a symlink"));
        fs::remove_file(d.path().join("k=2")).unwrap();
        std::os::unix::fs::symlink("/tmp/x", d.path().join(LOCK_FILE)).unwrap();
        assert!(DirLock::acquire(d.path()).unwrap_err().to_string().contains("is a symlink"));
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
        // A symlink to one is refused as a link.
        let link = d.path().join("to-null");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        assert!(write_file(&link, b"x").unwrap_err().to_string().contains("is a symlink"));
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
        assert_eq!(read_capped(Path::new("/dev/zero"), 1 << 20).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
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

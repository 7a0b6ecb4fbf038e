//! Writing results safely: every output path is checked before the work starts (writable, not
//! one of the inputs, not another output), and files are written atomically (a temporary file
//! in the same directory, then a rename), so an interrupted run never leaves a half-written
//! report and no input is ever overwritten.
//!
//! ```
//! use harness::report::output::{write_atomic, Outputs};
//! let dir = std::env::temp_dir().join(format!("harness-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let input = dir.join("case.json");
//! std::fs::write(&input, "{}").unwrap();
//! // the same file as input and output is refused before any work
//! let e = Outputs::new().input(&input).output("--json", &input).check().unwrap_err();
//! assert!(e.contains("is also an input"), "{e}");
//! let out = dir.join("results.json");
//! Outputs::new().input(&input).output("--json", &out).check().unwrap();
//! write_atomic(&out, b"[]").unwrap();
//! assert_eq!(std::fs::read(&out).unwrap(), b"[]");
//! assert_eq!(std::fs::read(&input).unwrap(), b"{}");
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

/// The inputs and outputs of one command, checked together before it runs.
#[derive(Debug, Default)]
pub struct Outputs {
    inputs: Vec<PathBuf>,
    outputs: Vec<(String, PathBuf)>,
    dirs: Vec<(String, PathBuf)>,
}

impl Outputs {
    /// No inputs and no outputs yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// A file or directory the command reads.
    pub fn input(mut self, path: impl AsRef<Path>) -> Self {
        self.inputs.push(path.as_ref().to_path_buf());
        self
    }
    /// A file the command writes, named by its flag in messages.
    pub fn output(mut self, flag: &str, path: impl AsRef<Path>) -> Self {
        self.outputs
            .push((flag.to_string(), path.as_ref().to_path_buf()));
        self
    }
    /// An optional output.
    pub fn output_opt(self, flag: &str, path: Option<&PathBuf>) -> Self {
        match path {
            Some(p) => self.output(flag, p),
            None => self,
        }
    }
    /// A directory the command writes files into (created by the command when missing; never
    /// by [`Outputs::check`]).
    pub fn output_dir(mut self, flag: &str, path: impl AsRef<Path>) -> Self {
        self.dirs
            .push((flag.to_string(), path.as_ref().to_path_buf()));
        self
    }

    /// `Ok` when every output can be written and none is an input, lies inside an input
    /// directory that is read recursively or inside an output directory, or is named twice. Probes writability by creating
    /// (and removing) a temporary file beside each output.
    pub fn check(&self) -> Result<(), String> {
        let inputs: Vec<PathBuf> = self.inputs.iter().map(|p| absolute(p)).collect();
        let dirs: Vec<(&String, PathBuf)> =
            self.dirs.iter().map(|(f, d)| (f, absolute(d))).collect();
        let mut seen: Vec<(String, PathBuf)> = Vec::new();
        for (flag, path) in &self.outputs {
            let abs = absolute(path);
            if let Some((other, d)) = dirs.iter().find(|(_, d)| abs.starts_with(d)) {
                return Err(format!(
                    "{flag} {}: lies inside the {other} directory {}, whose files that command \
                     writes; write it elsewhere",
                    path.display(),
                    d.display()
                ));
            }
            if path.as_os_str().is_empty() || path.is_dir() {
                return Err(format!(
                    "{flag} {}: is a directory, not a file",
                    path.display()
                ));
            }
            if let Some(i) = inputs.iter().find(|i| **i == abs) {
                return Err(format!(
                    "{flag} {}: is also an input ({}); refusing to overwrite it",
                    path.display(),
                    i.display()
                ));
            }
            if let Some(i) = inputs.iter().find(|i| i.is_dir() && abs.starts_with(i)) {
                return Err(format!(
                    "{flag} {}: lies inside the input directory {}, whose *.json files are read; write it elsewhere",
                    path.display(),
                    i.display()
                ));
            }
            if let Some((other, _)) = seen.iter().find(|(_, p)| *p == abs) {
                return Err(format!(
                    "{flag} {}: is also the output of {other}",
                    path.display()
                ));
            }
            if is_special(path) {
                // a device or pipe (`/dev/null`): opened for writing, never replaced
                open_in_place(path)
                    .map(drop)
                    .map_err(|e| format!("{flag} {}: cannot write there: {e}", path.display()))?;
            } else {
                probe_writable(flag, path)?;
            }
            seen.push((flag.clone(), abs));
        }
        for (flag, dir) in &self.dirs {
            let abs = absolute(dir);
            if let Some(i) = inputs.iter().find(|i| **i == abs || abs.starts_with(i)) {
                return Err(format!(
                    "{flag} {}: is an input or inside one ({})",
                    dir.display(),
                    i.display()
                ));
            }
            // nothing is created before the command's own checks pass: the directory, or the
            // nearest of its ancestors that exists (where the command will create it), must be
            // a writable directory
            let existing = abs.ancestors().find(|a| a.exists()).unwrap_or(&abs);
            if !existing.is_dir() {
                return Err(format!(
                    "{flag} {}: {} is not a directory",
                    dir.display(),
                    existing.display()
                ));
            }
            probe_writable(flag, &existing.join(".harness-write-probe"))?;
        }
        Ok(())
    }
}

/// The path made absolute and, where it exists, canonical (symlinks resolved); a path that does
/// not exist yet is its canonical parent joined with the file name.
pub fn absolute(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    };
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map(|d| d.join(name))
            .unwrap_or(abs.clone()),
        _ => abs,
    }
}

/// Create and remove a temporary file in `path`'s directory.
fn probe_writable(flag: &str, path: &Path) -> Result<(), String> {
    let tmp = temp_beside(path);
    let dir = tmp.parent().map(Path::to_path_buf).unwrap_or_default();
    if !dir.as_os_str().is_empty() && !dir.is_dir() {
        let what = if dir.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Err(format!(
            "{flag} {}: the directory {} {what}",
            path.display(),
            dir.display()
        ));
    }
    std::fs::File::create(&tmp)
        .map(drop)
        .and_then(|()| std::fs::remove_file(&tmp))
        .map_err(|e| format!("{flag} {}: cannot write there: {e}", path.display()))
}

/// A temporary name in the same directory as `path` (so the final rename is atomic).
fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Whether `path` exists (symlinks followed) and is neither a regular file nor a directory: a
/// device such as `/dev/null`, a pipe, a socket. Such a path is written in place; renaming a
/// file over it would replace the device node itself.
fn is_special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// `path` opened for writing as it is (not created, not truncated, not replaced). A pipe with
/// no reader is an error at once, not a wait for a reader that may never come.
fn open_in_place(path: &Path) -> std::io::Result<std::fs::File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        use std::os::unix::io::AsRawFd;
        if std::fs::metadata(path)?.file_type().is_fifo() {
            // opening a pipe's writing end without O_NONBLOCK blocks until a reader opens it;
            // with it the open fails with ENXIO when there is none
            let f = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ENXIO) => std::io::Error::new(
                        std::io::ErrorKind::BrokenPipe,
                        "no process is reading this pipe",
                    ),
                    _ => e,
                })?;
            // writes block again, so a slow reader gets every byte
            // SAFETY: F_GETFL/F_SETFL on a descriptor this function owns.
            unsafe {
                let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
                if flags < 0
                    || libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            return Ok(f);
        }
    }
    std::fs::OpenOptions::new().write(true).open(path)
}

/// Write `bytes` to `path` atomically: a temporary file beside it, flushed, then renamed over it.
/// A symlink is followed (its target is replaced, the link kept), and an existing path that is
/// not a regular file (`/dev/null`, a pipe) is written in place instead.
///
/// ```
/// use harness::report::output::write_atomic;
/// let dir = std::env::temp_dir().join(format!("harness-atomic-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let (file, link) = (dir.join("report.json"), dir.join("latest.json"));
/// std::fs::write(&file, "old").unwrap();
/// # #[cfg(unix)]
/// # {
/// std::os::unix::fs::symlink(&file, &link).unwrap();
/// write_atomic(&link, b"new").unwrap();
/// // the link is kept and its target replaced
/// assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
/// assert_eq!(std::fs::read(&file).unwrap(), b"new");
/// # }
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if is_special(path) {
        return open_in_place(path)
            .and_then(|mut f| f.write_all(bytes))
            .map_err(|e| format!("{}: {e}", path.display()));
    }
    // a symlink's target is the file to replace
    let resolved = std::fs::canonicalize(path).ok();
    let path = resolved.as_deref().unwrap_or(path);
    let tmp = temp_beside(path);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

    /// A pipe in a scratch directory and a non-blocking reader of it (never a real device: a
    /// regression that renames over its output must not be able to replace `/dev/null`).
    fn pipe_in_scratch(name: &str) -> (PathBuf, PathBuf, std::fs::File) {
        let dir = std::env::temp_dir().join(format!("harness-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("out.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        (dir, fifo, reader)
    }

    fn drained(mut reader: std::fs::File) -> Vec<u8> {
        let mut got = Vec::new();
        let _ = reader.read_to_end(&mut got);
        got
    }

    #[test]
    fn a_pipe_is_written_in_place_never_replaced_by_a_file() {
        let (dir, fifo, reader) = pipe_in_scratch("fifo");
        Outputs::new().output("--json", &fifo).check().unwrap();
        write_atomic(&fifo, b"[1]").unwrap();
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        assert_eq!(drained(reader), b"[1]");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_to_a_pipe_writes_the_pipe_and_keeps_the_link() {
        let (dir, fifo, reader) = pipe_in_scratch("fifo-link");
        let link = dir.join("latest.json");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        write_atomic(&link, b"{}").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        assert_eq!(drained(reader), b"{}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pipe_nobody_reads_is_refused_at_once_not_waited_on() {
        let (dir, fifo, reader) = pipe_in_scratch("fifo-no-reader");
        drop(reader);
        let err = Outputs::new().output("--json", &fifo).check().unwrap_err();
        assert!(
            err.contains("--json") && err.contains("no process is reading this pipe"),
            "{err}"
        );
        let err = write_atomic(&fifo, b"[1]").unwrap_err();
        assert!(err.contains("no process is reading this pipe"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_output_under_a_file_names_the_file_as_no_directory() {
        let dir = std::env::temp_dir().join(format!("harness-under-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("plain"), b"x").unwrap();
        let err = Outputs::new()
            .output("--json", dir.join("plain/x.json"))
            .check()
            .unwrap_err();
        assert!(err.contains("plain is not a directory"), "{err}");
        let err = Outputs::new()
            .output("--json", dir.join("absent/x.json"))
            .check()
            .unwrap_err();
        assert!(err.contains("absent does not exist"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

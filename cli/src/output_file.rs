//! Output files written safely: created under a fresh temporary name in the target's own
//! directory (`O_CREAT | O_EXCL | O_NOFOLLOW`, so never through a symlink or into a file
//! someone else made), renamed into place when complete, removed when not. An existing output
//! is kept as `FILE.old`, as `perf record` keeps `perf.data.old`.
//!
//! As root in a world-writable directory this matters: `rename(2)` replaces the directory
//! entry (a symlink planted under the output's name is moved to `FILE.old`, never followed),
//! and [`OutputFile::chown`] changes the owner through the descriptor of the file this process
//! created, never through a path another user could swap.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Distinguishes the temporary names of one process.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// An output being written; see the module docs. Dropped without [`OutputFile::commit`], its
/// temporary file is removed.
#[derive(Debug)]
pub struct OutputFile {
    file: File,
    /// The final name.
    path: PathBuf,
    /// The temporary name, `None` once renamed into place.
    tmp: Option<PathBuf>,
    /// The previous output, moved aside to `FILE.old` by [`OutputFile::commit`].
    kept_old: Option<PathBuf>,
}

/// `FILE.old`: where the previous output is kept.
pub fn old_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(".old");
    PathBuf::from(name)
}

impl OutputFile {
    /// Create a fresh temporary file (mode 0644 before umask) next to `path`.
    pub fn create(path: &Path) -> io::Result<Self> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the output must name a file, not a directory",
            )
        })?;
        loop {
            // ATOMICS: `Relaxed`: only uniqueness of the value matters, no other memory.
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let mut tmp_name = OsString::from(".");
            tmp_name.push(name);
            tmp_name.push(format!(".{}-{n}.tmp", std::process::id()));
            let tmp = dir.join(tmp_name);
            // Readable too: a recorder cuts a torn last record off after a full disk.
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp);
            match opened {
                Ok(file) => {
                    return Ok(Self {
                        file,
                        path: path.to_path_buf(),
                        tmp: Some(tmp),
                        kept_old: None,
                    })
                }
                // A leftover of a killed process with the same pid: take the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The final name.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the file is now: the temporary name until [`OutputFile::commit`].
    pub fn current_path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or(&self.path)
    }

    /// Give the file to `uid`/`gid` through its descriptor (`fchown`).
    pub fn chown(&self, uid: u32, gid: u32) -> io::Result<()> {
        std::os::unix::fs::fchown(&self.file, Some(uid), Some(gid))
    }

    /// Move any existing entry at the final name to `FILE.old` (replacing an older one), then
    /// rename the temporary file into place. Returns the `.old` path when one was kept.
    /// Committing twice does nothing the second time.
    pub fn commit(&mut self) -> io::Result<Option<PathBuf>> {
        let Some(tmp) = self.tmp.clone() else {
            return Ok(self.kept_old.clone());
        };
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.is_dir() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is a directory", self.path.display()),
                ))
            }
            Ok(meta) => {
                // Not the file just created (e.g. committed by another handle): keep it.
                let ours = self.file.metadata()?;
                if (meta.dev(), meta.ino()) != (ours.dev(), ours.ino()) {
                    let old = old_path(&self.path);
                    std::fs::rename(&self.path, &old)?;
                    self.kept_old = Some(old);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::rename(&tmp, &self.path)?;
        self.tmp = None;
        Ok(self.kept_old.clone())
    }

    /// Remove the output (at whichever name it has) and put a previous output kept as
    /// `FILE.old` back in place: as if nothing had been written.
    pub fn discard(mut self) -> io::Result<()> {
        match self.tmp.take() {
            Some(tmp) => std::fs::remove_file(tmp),
            None => {
                std::fs::remove_file(&self.path)?;
                match self.kept_old.take() {
                    Some(old) => std::fs::rename(old, &self.path),
                    None => Ok(()),
                }
            }
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "fxtrace-output-file-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn dropped_output_leaves_nothing() {
        let d = dir();
        let path = d.join("out.json");
        {
            let out = OutputFile::create(&path).unwrap();
            out.file().write_all(b"partial").unwrap();
        }
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn commit_keeps_the_previous_output_as_old() {
        let d = dir();
        let path = d.join("out.fxt");
        std::fs::write(&path, b"previous").unwrap();
        let mut out = OutputFile::create(&path).unwrap();
        out.file().write_all(b"new").unwrap();
        assert_eq!(out.commit().unwrap(), Some(old_path(&path)));
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read(old_path(&path)).unwrap(), b"previous");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_planted_symlink_is_moved_aside_never_written_through() {
        let d = dir();
        let target = d.join("precious");
        std::fs::write(&target, b"root's file").unwrap();
        let path = d.join("trace.fxt");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let mut out = OutputFile::create(&path).unwrap();
        out.file().write_all(b"trace").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"root's file");
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::symlink_metadata(old_path(&path))
            .unwrap()
            .file_type()
            .is_symlink());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn discard_after_commit_restores_the_old_output() {
        let d = dir();
        let path = d.join("out.fxt");
        std::fs::write(&path, b"previous").unwrap();
        let mut out = OutputFile::create(&path).unwrap();
        out.commit().unwrap();
        out.discard().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"previous");
        assert!(!old_path(&path).exists());
        std::fs::remove_dir_all(d).unwrap();
    }
}

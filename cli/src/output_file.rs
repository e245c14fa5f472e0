//! Output files written safely: created under a fresh temporary name in the target's own
//! directory (`O_CREAT | O_EXCL | O_NOFOLLOW`, so never through a symlink or into a file
//! someone else made), renamed into place when complete, removed when not. An existing output
//! is kept as `FILE.old`, as `perf record` keeps `perf.data.old`.
//!
//! As root in a world-writable directory this matters: `rename(2)` replaces the directory
//! entry (a symlink planted under the output's name is moved to `FILE.old`, never followed),
//! and [`OutputFile::chown`] changes the owner through the descriptor of the file this process
//! created, never through a path another user could swap.
//!
//! An output that exists and is not a regular file (`/dev/null`, `/dev/stdout`, a FIFO, a
//! terminal) is written in place: never renamed aside, replaced, removed or given away. (As
//! root, `-o /dev/null` once moved the system's `/dev/null` to `/dev/null.old` and left a
//! regular file in its place.) Only in a directory no one else could have put it in: owned by
//! root or by this user, and writable by neither group nor others. Anywhere else (`/tmp`,
//! another user's home) the entry is moved aside as any other, never followed or opened.

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
    /// An existing non-regular file written in place (see the module docs).
    in_place: bool,
}

/// `FILE.old`: where the previous output is kept.
pub fn old_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(".old");
    PathBuf::from(name)
}

impl OutputFile {
    /// Create a fresh temporary file (mode 0644 before umask) next to `path`; or, when
    /// `path` is an existing non-regular file, open it for writing in place.
    pub fn create(path: &Path) -> io::Result<Self> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if let Some(file) = open_in_place(path, &dir)? {
            return Ok(Self {
                file,
                path: path.to_path_buf(),
                tmp: None,
                kept_old: None,
                in_place: true,
            });
        }
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
                        in_place: false,
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

    /// Give the file to `uid`/`gid` through its descriptor (`fchown`). An output written in
    /// place (a device, a FIFO) is not this process's to give: left as it is.
    pub fn chown(&self, uid: u32, gid: u32) -> io::Result<()> {
        if self.in_place {
            return Ok(());
        }
        std::os::unix::fs::fchown(&self.file, Some(uid), Some(gid))
    }

    /// Whether the output is an existing non-regular file written in place.
    pub fn in_place(&self) -> bool {
        self.in_place
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
        if self.in_place {
            return Ok(());
        }
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

/// `path` opened for writing in place if it is an existing file other than a regular file or
/// a directory, in a directory no one else could have put it in (see the module docs);
/// `None` to write it the usual way.
fn open_in_place(path: &Path, dir: &Path) -> io::Result<Option<File>> {
    let Ok(link) = std::fs::symlink_metadata(path) else {
        return Ok(None);
    };
    let Ok(parent) = std::fs::metadata(dir) else {
        return Ok(None);
    };
    // SAFETY: `geteuid` has no preconditions.
    let me = unsafe { libc::geteuid() };
    if parent.mode() & 0o022 != 0 || (parent.uid() != 0 && parent.uid() != me) {
        return Ok(None);
    }
    match std::fs::metadata(path) {
        Ok(target) if !target.is_file() && !target.is_dir() => {}
        _ => return Ok(None),
    }
    // No `O_CREAT`, no `O_TRUNC`: the file is there and stays what it is. A name that was
    // not a link when looked at is not followed now.
    let no_follow = if link.file_type().is_symlink() {
        0
    } else {
        libc::O_NOFOLLOW
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC | no_follow)
        .open(path)?;
    // What was opened, not what was looked at.
    let opened = file.metadata()?;
    if opened.is_file() || opened.is_dir() {
        return Ok(None);
    }
    Ok(Some(file))
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

    /// An existing non-regular file (here a FIFO; `/dev/null` is the case that mattered) is
    /// written in place: not renamed aside, replaced, removed on discard, nor given away.
    #[test]
    fn an_existing_non_regular_file_is_written_in_place() {
        use std::io::Read;
        let d = dir();
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let mut text = String::new();
                File::open(fifo).unwrap().read_to_string(&mut text).unwrap();
                text
            })
        };
        let mut out = OutputFile::create(&fifo).unwrap();
        assert!(out.in_place());
        out.file().write_all(b"through the fifo").unwrap();
        out.chown(12345, 12345).unwrap();
        assert_eq!(out.commit().unwrap(), None);
        out.discard().unwrap();
        assert_eq!(reader.join().unwrap(), "through the fifo");
        let meta = std::fs::symlink_metadata(&fifo).unwrap();
        assert!(
            std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()),
            "still the FIFO"
        );
        assert_ne!(meta.uid(), 12345, "not given away");
        assert!(!old_path(&fifo).exists());
        std::fs::remove_dir_all(d).unwrap();
    }

    /// A link in another user's directory (one they may write to, though others may not):
    /// not followed, whatever it points at.
    /// `path` is not written in place: the new output replaces the entry, kept as `.old`.
    fn assert_written_beside(path: &Path) {
        let mut out = OutputFile::create(path).unwrap();
        assert!(!out.in_place());
        out.file().write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(path).unwrap(), b"new");
    }

    #[test]
    fn a_link_in_another_users_directory_is_moved_aside() {
        // SAFETY: `geteuid` has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            fxtrace::test_support::skip(
                fxtrace::test_support::Requirement::Root,
                "needs root to give a directory to another user",
            );
            return;
        }
        let d = dir();
        std::os::unix::fs::chown(&d, Some(1000), Some(1000)).unwrap();
        let path = d.join("out.fxt");
        std::os::unix::fs::symlink("/dev/null", &path).unwrap();
        assert_written_beside(&path);
        std::fs::remove_dir_all(d).unwrap();
    }

    /// A FIFO in a directory others may write to (planted in /tmp by another user) is not
    /// opened: moved aside as any other entry.
    #[test]
    fn a_fifo_in_a_shared_directory_is_moved_aside_not_opened() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let fifo = d.join("out.fxt");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // No reader: opening it for writing would block.
        assert_written_beside(&fifo);
        std::fs::remove_dir_all(d).unwrap();
    }

    /// A symbolic link to a non-regular file in a directory others may write to (a link
    /// planted in /tmp) is moved aside, not followed.
    #[test]
    fn a_planted_symlink_to_a_device_is_moved_aside() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let path = d.join("out.fxt");
        std::os::unix::fs::symlink("/dev/null", &path).unwrap();
        assert_written_beside(&path);
        assert!(std::fs::symlink_metadata(old_path(&path))
            .unwrap()
            .file_type()
            .is_symlink());
        std::fs::remove_dir_all(d).unwrap();
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

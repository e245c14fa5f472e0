//! Where `fxtrace record --preload` finds `libfxtrace_preload.so`.
//!
//! In order: `FXTRACE_PRELOAD_LIB`; the object next to the `fxtrace` executable (a build in
//! the repository); the copy embedded in the executable at build time (`cli/build.rs`: an
//! installed binary), extracted on first use to a private, content-addressed cache file:
//! `$XDG_CACHE_HOME/fxtrace/` (else `~/.cache/fxtrace/`), a directory of mode 0700 owned by
//! the user, the file named after a hash of its bytes and compared byte for byte with the
//! embedded copy before every use. The file is written under a temporary name and renamed,
//! so concurrent extractions (two `fxtrace record` at once) each see a whole file.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The preload object's file name.
pub const PRELOAD_LIB: &str = "libfxtrace_preload.so";
/// The environment variable that names the object to use.
pub const PRELOAD_LIB_ENV: &str = "FXTRACE_PRELOAD_LIB";

/// The object embedded at build time; empty when the build did not embed one (a build inside
/// the workspace, where the object sits next to the executable).
static EMBEDDED: &[u8] = include_bytes!(env!("FXTRACE_EMBEDDED_PRELOAD"));

/// Why no preload object could be found or extracted.
#[derive(Debug, thiserror::Error)]
pub enum PreloadLibError {
    /// `FXTRACE_PRELOAD_LIB` names no file.
    #[error("{PRELOAD_LIB_ENV}={}: no such file", .0.display())]
    ExplicitMissing(PathBuf),
    /// Nothing next to the executable and nothing embedded.
    #[error(
        "{PRELOAD_LIB} is not next to this fxtrace ({}) and this build embeds none: build it \
         in the repository (cargo build --release: the object lands next to fxtrace), install \
         with `cargo install --path cli` (which embeds it), or set {PRELOAD_LIB_ENV}",
        .0.display()
    )]
    NotFound(PathBuf),
    /// The cache directory is unusable (not ours, open to others, a symlink, ...).
    #[error("the cache directory {}: {reason}", .dir.display())]
    UnsafeCache {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No cache directory could be named (no `XDG_CACHE_HOME` and no `HOME`).
    #[error("no cache directory for the preload object: set XDG_CACHE_HOME or HOME, or set {PRELOAD_LIB_ENV}")]
    NoCacheDir,
    /// Reading or writing the cache failed.
    #[error("extracting the preload object to {}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The object `--preload` loads: see the module docs for the order. Absolute, since the
/// command may change directory.
pub fn preload_library() -> Result<PathBuf, PreloadLibError> {
    let exe = std::env::current_exe().ok();
    find(
        std::env::var_os(PRELOAD_LIB_ENV),
        exe.as_deref(),
        EMBEDDED,
        cache_dir().as_deref(),
    )
}

/// Whether this executable carries an embedded object.
pub fn is_embedded() -> bool {
    !EMBEDDED.is_empty()
}

/// [`preload_library`] with every input explicit (for tests).
fn find(
    explicit: Option<OsString>,
    exe: Option<&Path>,
    embedded: &[u8],
    cache: Option<&Path>,
) -> Result<PathBuf, PreloadLibError> {
    if let Some(path) = explicit.map(PathBuf::from) {
        if !path.is_file() {
            return Err(PreloadLibError::ExplicitMissing(path));
        }
        return Ok(std::path::absolute(&path).unwrap_or(path));
    }
    let beside = exe.map(|exe| exe.with_file_name(PRELOAD_LIB));
    if let Some(path) = beside.as_ref().filter(|p| p.is_file()) {
        return Ok(std::path::absolute(path).unwrap_or_else(|_| path.clone()));
    }
    if embedded.is_empty() {
        return Err(PreloadLibError::NotFound(
            beside.unwrap_or_else(|| PathBuf::from(PRELOAD_LIB)),
        ));
    }
    let cache = cache.ok_or(PreloadLibError::NoCacheDir)?;
    extract(embedded, cache)
}

/// `$XDG_CACHE_HOME/fxtrace`, else `$HOME/.cache/fxtrace` (absolute paths only).
fn cache_dir() -> Option<PathBuf> {
    let absolute = |v: OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    std::env::var_os("XDG_CACHE_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".cache"))
        })
        .map(|base| base.join("fxtrace"))
}

/// 64-bit FNV-1a of `bytes`: names the cache file (the content is compared in full).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The cache file holding `bytes` in `dir`, written if absent or different.
fn extract(bytes: &[u8], dir: &Path) -> Result<PathBuf, PreloadLibError> {
    private_dir(dir)?;
    let path = dir.join(format!("libfxtrace_preload-{:016x}.so", fnv1a(bytes)));
    if holds(&path, bytes)? {
        return Ok(path);
    }
    // A unique temporary name in the same directory, then an atomic rename over whatever is
    // at `path` (a stale or tampered file, or a symlink: rename replaces the link itself).
    let io = |source| PreloadLibError::Io {
        path: dir.to_path_buf(),
        source,
    };
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // ATOMICS: `Relaxed`: a unique counter.
    let temp = dir.join(format!(
        ".{PRELOAD_LIB}.{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)
        .map_err(io)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    if let Err(e) = written.and_then(|()| std::fs::rename(&temp, &path)) {
        let _ = std::fs::remove_file(&temp);
        return Err(io(e));
    }
    Ok(path)
}

/// Whether `path` is a regular file of ours, not writable by others, holding exactly `bytes`.
/// A symlink, another owner, another size or other content: `false` (it will be replaced).
fn holds(path: &Path, bytes: &[u8]) -> Result<bool, PreloadLibError> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => file,
        // ELOOP: a symlink planted at the path.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ELOOP) =>
        {
            return Ok(false)
        }
        Err(source) => {
            return Err(PreloadLibError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let meta = file.metadata().map_err(|source| PreloadLibError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file()
        || meta.uid() != me
        || meta.mode() & 0o022 != 0
        || meta.len() != bytes.len() as u64
    {
        return Ok(false);
    }
    Ok(same_content(file, bytes))
}

fn same_content(mut file: File, bytes: &[u8]) -> bool {
    let mut content = Vec::with_capacity(bytes.len());
    file.read_to_end(&mut content).is_ok() && content == bytes
}

/// Create `dir` (mode 0700) if needed and check that it is a directory of ours that no one
/// else can write to or list (not a symlink).
fn private_dir(dir: &Path) -> Result<(), PreloadLibError> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|source| PreloadLibError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(PreloadLibError::Io {
                path: dir.to_path_buf(),
                source,
            })
        }
    }
    let unsafe_dir = |reason: &str| PreloadLibError::UnsafeCache {
        dir: dir.to_path_buf(),
        reason: reason.to_owned(),
    };
    let meta = dir
        .symlink_metadata()
        .map_err(|source| PreloadLibError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir("is a symlink; remove it"));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("is not a directory; remove it"));
    }
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err(unsafe_dir(&format!(
            "belongs to uid {}, not to this user; remove it",
            meta.uid()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(unsafe_dir(&format!(
            "has mode {:o}, open to other users; make it 0700 (chmod 700)",
            meta.permissions().mode() & 0o777
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_in(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("cache").join("fxtrace")
    }

    #[test]
    fn the_lookup_order_is_env_then_beside_the_executable_then_embedded() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("fxtrace");
        let cache = cache_in(&dir);
        // Nothing anywhere: a message that says what to do.
        let err = find(None, Some(&exe), b"", Some(&cache)).unwrap_err();
        assert!(matches!(err, PreloadLibError::NotFound(_)), "{err}");
        assert!(
            err.to_string().contains("cargo install --path cli"),
            "{err}"
        );
        // Embedded only: extracted into the cache.
        let extracted = find(None, Some(&exe), b"ELF object", Some(&cache)).unwrap();
        assert!(extracted.starts_with(&cache), "{}", extracted.display());
        assert_eq!(std::fs::read(&extracted).unwrap(), b"ELF object");
        // Beside the executable wins over the embedded copy.
        let beside = dir.path().join(PRELOAD_LIB);
        std::fs::write(&beside, b"built").unwrap();
        assert_eq!(
            find(None, Some(&exe), b"ELF object", Some(&cache)).unwrap(),
            beside
        );
        // The environment wins over both, and must name a file.
        let other = dir.path().join("other.so");
        let err = find(Some(other.clone().into()), Some(&exe), b"x", Some(&cache)).unwrap_err();
        assert!(matches!(err, PreloadLibError::ExplicitMissing(_)), "{err}");
        std::fs::write(&other, b"").unwrap();
        assert_eq!(
            find(Some(other.clone().into()), Some(&exe), b"x", Some(&cache)).unwrap(),
            other
        );
    }

    #[test]
    fn the_cache_is_private_and_content_addressed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache_in(&dir);
        let a = extract(b"version a", &cache).unwrap();
        let b = extract(b"version b", &cache).unwrap();
        assert_ne!(a, b, "each content has its own file");
        assert_eq!(extract(b"version a", &cache).unwrap(), a, "reused");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&cache), 0o700);
        assert_eq!(mode(&a) & 0o022, 0);
    }

    #[test]
    fn a_tampered_or_planted_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache_in(&dir);
        let path = extract(b"the object", &cache).unwrap();
        // Same size, other bytes: rewritten.
        std::fs::write(&path, b"the 0bject").unwrap();
        assert_eq!(extract(b"the object", &cache).unwrap(), path);
        assert_eq!(std::fs::read(&path).unwrap(), b"the object");
        // A symlink planted at the name (to a file of the attacker's choice): replaced by a
        // file, the link's target untouched.
        let target = dir.path().join("elsewhere.so");
        std::fs::write(&target, b"not ours").unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert_eq!(extract(b"the object", &cache).unwrap(), path);
        assert!(!path.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"the object");
        assert_eq!(std::fs::read(&target).unwrap(), b"not ours");
    }

    #[test]
    fn an_open_or_linked_cache_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache_in(&dir);
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = extract(b"x", &cache).unwrap_err();
        assert!(err.to_string().contains("chmod 700"), "{err}");
        std::fs::remove_dir(&cache).unwrap();
        let real = dir.path().join("real");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&real)
            .unwrap();
        std::os::unix::fs::symlink(&real, &cache).unwrap();
        let err = extract(b"x", &cache).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
    }

    #[test]
    fn concurrent_extractions_each_see_a_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache_in(&dir);
        let object: Vec<u8> = (0..4 << 20).map(|i| (i * 7 % 251) as u8).collect();
        let paths: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| extract(&object, &cache).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(paths.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(std::fs::read(&paths[0]).unwrap(), object);
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }
}

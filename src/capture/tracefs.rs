//! Finding tracefs (for tracepoint ids and formats), and mounting it when root and absent.
//!
//! Lookup order: a `tracefs` entry in `/proc/self/mounts`, then `/sys/kernel/tracing`, then
//! `/sys/kernel/debug/tracing` (the old debugfs location). When none has `events/` and the
//! caller allows it, tracefs is mounted at `/sys/kernel/tracing` and unmounted again when the
//! last [`Tracefs`] using that mount is dropped (RAII, reference-counted per process, so
//! sessions or tests running in parallel share one mount). The perf tracepoint events
//! themselves do not need tracefs after they are opened: the mount is only held while ids and
//! formats are read.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use thiserror::Error;

use super::tracepoint::{FormatError, TracepointFormat};

/// Where fxtrace mounts tracefs when it has to.
pub const MOUNT_POINT: &str = "/sys/kernel/tracing";

/// Errors finding or reading tracefs.
#[derive(Debug, Error)]
pub enum TracefsError {
    /// tracefs is not mounted and we may not (or must not) mount it.
    #[error("tracefs is not mounted: {remedy}")]
    NotMounted {
        /// What to do.
        remedy: String,
    },
    /// Mounting failed.
    #[error("mounting tracefs at {path} failed: {source}")]
    Mount {
        /// Mount point.
        path: PathBuf,
        /// The cause.
        source: nix::Error,
    },
    /// A tracefs file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A tracepoint id file did not hold a number.
    #[error("{path}: not a tracepoint id: {text:?}")]
    BadId {
        /// The file.
        path: PathBuf,
        /// Its content.
        text: String,
    },
    /// A format file did not parse.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: FormatError,
    },
}

/// Process-wide state of the mount fxtrace made (if any).
#[derive(Debug)]
struct MountState {
    users: usize,
}

static MOUNT: Mutex<MountState> = Mutex::new(MountState { users: 0 });

/// A use of the tracefs mount fxtrace made; unmounts when the last one is dropped.
#[derive(Debug)]
struct MountGuard;

impl MountGuard {
    /// Joins fxtrace's mount, or mounts tracefs at [`MOUNT_POINT`]. `Ok(None)` when someone else
    /// mounted it meanwhile.
    fn acquire() -> Result<Option<Self>, TracefsError> {
        let mut state = MOUNT.lock().unwrap_or_else(|p| p.into_inner());
        if state.users > 0 {
            state.users += 1;
            return Ok(Some(Self));
        }
        if locate().is_some() {
            return Ok(None);
        }
        mount(
            Some("tracefs"),
            MOUNT_POINT,
            Some("tracefs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(|source| TracefsError::Mount {
            path: MOUNT_POINT.into(),
            source,
        })?;
        state.users = 1;
        Ok(Some(Self))
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        let mut state = MOUNT.lock().unwrap_or_else(|p| p.into_inner());
        state.users -= 1;
        if state.users == 0 {
            // Lazy detach: a concurrent reader elsewhere keeps its files until it closes them.
            // A failure leaves tracefs mounted, which is harmless; there is no caller to tell.
            let _ = umount2(MOUNT_POINT, MntFlags::MNT_DETACH);
        }
    }
}

/// The tracefs root, if mounted: [`MOUNT_POINT`] when a tracefs is mounted there (one
/// `statfs`; every traced process under `--preload` asks), else the first tracefs in
/// `/proc/self/mounts`, else a `tracing` directory under debugfs.
pub fn locate() -> Option<PathBuf> {
    if is_tracefs(MOUNT_POINT) {
        return Some(PathBuf::from(MOUNT_POINT));
    }
    let from_mounts = fs::read_to_string("/proc/self/mounts").ok().and_then(|m| {
        m.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            let (_, point, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "tracefs").then(|| PathBuf::from(point))
        })
    });
    from_mounts
        .into_iter()
        .chain([
            PathBuf::from(MOUNT_POINT),
            PathBuf::from("/sys/kernel/debug/tracing"),
        ])
        .find(|p| p.join("events").is_dir())
}

/// `TRACEFS_MAGIC` of `<linux/magic.h>`: `statfs`'s `f_type` of a tracefs.
const TRACEFS_MAGIC: i64 = 0x7472_6163;

/// Whether `path` is the root of a mounted tracefs.
fn is_tracefs(path: &str) -> bool {
    let Ok(path) = std::ffi::CString::new(path) else {
        return false;
    };
    // SAFETY: an all-zero `statfs` is a valid value of the plain C struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and outlives the call; `st` is valid for writes.
    let ok = unsafe { libc::statfs(path.as_ptr(), &mut st) } == 0;
    #[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between targets.
    let magic = st.f_type as i64;
    ok && magic == TRACEFS_MAGIC
}

/// An open tracefs (possibly mounted by us for as long as this value lives).
#[derive(Debug)]
pub struct Tracefs {
    root: PathBuf,
    guard: Option<MountGuard>,
}

impl Tracefs {
    /// Finds tracefs; if absent and `may_mount` (and we are root), mounts it at
    /// [`MOUNT_POINT`].
    pub fn open(may_mount: bool, root_user: bool) -> Result<Self, TracefsError> {
        if let Some(root) = locate() {
            return Ok(Self { root, guard: None });
        }
        if !may_mount || !root_user {
            return Err(TracefsError::NotMounted {
                remedy: if root_user {
                    format!("mount it: `mount -t tracefs tracefs {MOUNT_POINT}`")
                } else {
                    format!(
                        "not root, so fxtrace cannot mount it; run as root, or have an admin \
                         run `mount -t tracefs tracefs {MOUNT_POINT}` and make \
                         events/sched/sched_switch readable"
                    )
                },
            });
        }
        let guard = MountGuard::acquire()?;
        let root = locate().unwrap_or_else(|| MOUNT_POINT.into());
        Ok(Self { root, guard })
    }

    /// A tracefs-like tree at `root` (a synthetic one in tests).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            guard: None,
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this value holds a mount fxtrace made.
    pub fn mounted_by_us(&self) -> bool {
        self.guard.is_some()
    }

    fn event_dir(&self, system: &str, event: &str) -> PathBuf {
        self.root.join("events").join(system).join(event)
    }

    /// `events/<system>/<event>/id`.
    pub fn tracepoint_id(&self, system: &str, event: &str) -> Result<u64, TracefsError> {
        let path = self.event_dir(system, event).join("id");
        let text = read_text(&path).map_err(|source| TracefsError::Read {
            path: path.clone(),
            source,
        })?;
        text.trim().parse().map_err(|_| TracefsError::BadId {
            path,
            text: text.clone(),
        })
    }

    /// `events/<system>/<event>/format`, parsed.
    pub fn tracepoint_format(
        &self,
        system: &str,
        event: &str,
    ) -> Result<TracepointFormat, TracefsError> {
        let path = self.event_dir(system, event).join("format");
        let text = read_text(&path).map_err(|source| TracefsError::Read {
            path: path.clone(),
            source,
        })?;
        TracepointFormat::parse(&text).map_err(|source| TracefsError::Format { path, source })
    }
}

/// A tracefs file's text, read in one go: tracefs reports a size of 0, with which
/// `fs::read_to_string` asks for the size (`statx`) and then reads in growing steps from 32
/// bytes (seven reads for a `format` file, each regenerating the text). Every traced process
/// under `--preload` reads one at its start.
fn read_text(path: &Path) -> io::Result<String> {
    use io::Read;
    let mut file = fs::File::open(path)?;
    let mut bytes = Vec::with_capacity(8192);
    loop {
        if bytes.len() == bytes.capacity() {
            bytes.reserve(bytes.capacity());
        }
        let start = bytes.len();
        bytes.resize(bytes.capacity(), 0);
        match file.read(&mut bytes[start..]) {
            Ok(0) => {
                bytes.truncate(start);
                break;
            }
            Ok(n) => bytes.truncate(start + n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => bytes.truncate(start),
            Err(e) => return Err(e),
        }
    }
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_tracefs_is_taken_for_one() {
        assert!(!is_tracefs("/proc"));
        assert!(!is_tracefs("/no/such/directory"));
        // The mount table says the same as statfs about the usual mount point.
        let mounted = fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(MOUNT_POINT) && l.contains(" tracefs "));
        assert_eq!(is_tracefs(MOUNT_POINT), mounted);
    }

    #[test]
    fn synthetic_tree() {
        let dir = tempfile::tempdir().unwrap();
        let ev = dir.path().join("events/sched/sched_switch");
        fs::create_dir_all(&ev).unwrap();
        fs::write(ev.join("id"), "372\n").unwrap();
        fs::write(ev.join("format"), "name: sched_switch\nID: 372\n").unwrap();
        let t = Tracefs::at(dir.path());
        assert_eq!(t.tracepoint_id("sched", "sched_switch").unwrap(), 372);
        assert_eq!(
            t.tracepoint_format("sched", "sched_switch").unwrap().name,
            "sched_switch"
        );
        assert!(!t.mounted_by_us());
        assert!(matches!(
            t.tracepoint_id("sched", "nope"),
            Err(TracefsError::Read { .. })
        ));
        fs::write(ev.join("id"), "x").unwrap();
        assert!(matches!(
            t.tracepoint_id("sched", "sched_switch"),
            Err(TracefsError::BadId { .. })
        ));
    }

    #[test]
    fn a_file_is_read_whole_past_the_first_buffer() {
        // Longer than the first 8 KiB read, not a multiple of it, multi-byte characters
        // across the boundary.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("format");
        let text: String = (0..3000).map(|i| format!("{i}é\n")).collect();
        assert!(text.len() > 2 * 8192);
        fs::write(&path, &text).unwrap();
        assert_eq!(read_text(&path).unwrap(), text);
        fs::write(&path, "").unwrap();
        assert_eq!(read_text(&path).unwrap(), "");
        fs::write(&path, [0xff, 0xfe]).unwrap();
        assert_eq!(
            read_text(&path).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn not_root_and_absent_says_why() {
        if locate().is_some() {
            crate::test_support::skip(
                crate::test_support::Requirement::TracefsUnmounted,
                "tracefs is mounted here, the not-mounted path cannot be shown",
            );
            return;
        }
        let err = Tracefs::open(true, false).unwrap_err();
        assert!(err.to_string().contains("not root"), "{err}");
    }
}

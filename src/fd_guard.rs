//! Descriptors fxtrace owns inside a process it does not control.
//!
//! The preload object and the provider client live in someone else's program. A daemon may
//! close every descriptor it did not open (`closefrom(3)`, `for fd in 3..1024 close(fd)`) and
//! then open files of its own, which get the numbers fxtrace's descriptors had. From then on a
//! number fxtrace remembers names the program's file: writing, reading, an `ioctl` or a second
//! `close` through it would corrupt the program (and std's `OwnedFd` aborts debug builds on the
//! `EBADF` of a second close).
//!
//! [`FdIdentity`] remembers what a descriptor named when fxtrace created it and answers "is
//! this number still that object?" ([`FdStatus`]); [`GuardedFd`] owns a descriptor that way and
//! closes it on drop only while it is still its own (else it leaves the number alone and counts
//! it, [`abandoned`]); [`WakePipe`] is the wake-up channel of fxtrace's threads.
//!
//! # Identity
//!
//! `fstat`'s device, inode, mode and `rdev`. That is unique per object for files, sockets,
//! pipes and memfds, but not for anonymous-inode files: every eventfd, perf event, epoll and
//! timerfd shares one inode of the kernel's anon-inode filesystem. For those the identity adds
//! the object's kind (the `/proc/self/fd/N` link text, `anon_inode:[perf_event]`) and, for perf
//! events, the kernel's event id (`PERF_EVENT_IOC_ID`, asked only once the kind says the number
//! is a perf event). Two eventfds stay indistinguishable, so fxtrace wakes its threads through
//! pipes ([`WakePipe`], each pipe its own inode), not eventfds.
//!
//! Where `/proc` cannot say (not mounted, not readable, a `chroot` without it), a perf event is
//! still recognised, by its id: `PERF_EVENT_IOC_ID` is asked of the anonymous-inode file, and
//! if it answers, the identity is a perf event's with that id, exactly what
//! [`FdIdentity::of_perf_event`] takes at the open. The request is safe on an anonymous-inode
//! file of another kind: its type (`'$'`) is perf's alone in the kernel's ioctl registry
//! (`Documentation/userspace-api/ioctl/ioctl-number.rst`), it only reads (`_IOR`, 8 bytes into
//! a `u64` of ours), and the other anonymous-inode files (eventfd, epoll, timerfd, signalfd,
//! inotify, fanotify, userfaultfd, io_uring, KVM, VFIO, sync_file, bpf) dispatch on the whole
//! request number and refuse it (`ENOTTY`, `EINVAL`). Without `/proc`, anonymous-inode files
//! other than perf events are told apart by inode only (their kind is left empty).
//!
//! Every check is made of `fstat`, `readlink` and `ioctl` on stack buffers: no allocation, no
//! lock, no new descriptor, so it is async-signal-safe (the preload's exit and signal hooks use
//! it).
//!
//! # What cannot be guaranteed
//!
//! An inode number is unique among live objects only: once the program has closed the last
//! descriptor of a regular file, its file system may give the number to a new file. fxtrace's
//! own descriptors are sockets, pipes, memfds and perf events, whose inode numbers (and perf
//! event ids) come from counters the kernel does not hand out twice in practice.
//!
//! A check and the system call that follows it are two calls: a program thread that closes the
//! number and opens another file under it in between wins that race. The window is the time of
//! one system call; nothing in user space closes it (a descriptor number cannot be pinned).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// Rules: incremented by every drop that leaves a number alone (any thread); read by
/// [`abandoned`]. ATOMICS: `Relaxed`: a statistic, nothing is published through it.
static ABANDONED: AtomicU64 = AtomicU64::new(0);

/// How many descriptors fxtrace did not close in this process because their number no longer
/// named the object it had opened (the program had closed it, or reused the number).
pub fn abandoned() -> u64 {
    // ATOMICS: see `ABANDONED`.
    ABANDONED.load(Ordering::Relaxed)
}

fn count_abandoned() {
    // ATOMICS: see `ABANDONED`.
    ABANDONED.fetch_add(1, Ordering::Relaxed);
}

/// What a descriptor number names now, compared with what fxtrace opened under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdStatus {
    /// Still the object fxtrace opened.
    Ours,
    /// Not open (`EBADF`): the program closed it.
    Closed,
    /// Open, but another object: the program closed it and reused the number.
    Reused,
}

/// A descriptor fxtrace can no longer use: the program closed it, or reused its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the program closed fxtrace's descriptor {fd} ({what}){}",
        if *.status == FdStatus::Reused { " and opened another file under that number" } else { "" })]
pub struct FdLost {
    /// The descriptor number.
    pub fd: RawFd,
    /// What fxtrace used it for ("control socket", "perf event", …).
    pub what: &'static str,
    /// [`FdStatus::Closed`] or [`FdStatus::Reused`].
    pub status: FdStatus,
}

/// Length of the link text kept for an anonymous-inode file (`anon_inode:[perf_event]` fits).
const KIND_LEN: usize = 40;

/// The identity of the object a descriptor names (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdIdentity {
    dev: u64,
    ino: u64,
    rdev: u64,
    mode: u32,
    /// For anonymous-inode files: the start of the `/proc/self/fd/N` link text (zero padded),
    /// all zero otherwise or when `/proc` is not there.
    kind: [u8; KIND_LEN],
    /// For perf events: the kernel's event id; 0 otherwise.
    object: u64,
}

/// The link text of a perf event descriptor.
const PERF_EVENT_KIND: &[u8] = b"anon_inode:[perf_event]";

impl FdIdentity {
    /// The identity of the object `fd` names now.
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<Self> {
        Self::of_raw(fd.as_raw_fd())
    }

    /// The identity of the object the number `fd` names now; `EBADF` when it names none.
    /// Async-signal-safe (no allocation, no lock, no new descriptor).
    pub fn of_raw(fd: RawFd) -> io::Result<Self> {
        Self::of_raw_with(fd, link_text)
    }

    /// [`Self::of_raw`] with the `/proc/self/fd` link read by `link` (`None`: unreadable), the
    /// seam through which tests take `/proc` away.
    fn of_raw_with(fd: RawFd, link: fn(RawFd) -> Option<[u8; KIND_LEN]>) -> io::Result<Self> {
        // SAFETY: a zeroed `stat` is valid storage; fstat writes it or fails, and touches no
        // other memory whatever number it is given.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid out-pointer for the call.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut id = Self {
            dev: st.st_dev,
            ino: st.st_ino,
            rdev: st.st_rdev,
            mode: st.st_mode,
            kind: [0; KIND_LEN],
            object: 0,
        };
        if st.st_mode & libc::S_IFMT == 0 {
            // An anonymous-inode file: the inode is shared, its kind and object are not.
            match link(fd) {
                Some(text) => {
                    id.kind = text;
                    if text.starts_with(PERF_EVENT_KIND) {
                        id.object = perf_event_id(fd).unwrap_or(u64::MAX);
                    }
                }
                // `/proc` cannot say: a perf event still answers with its id (see the module
                // docs for why asking another kind of file is safe).
                None => {
                    if let Some(event_id) = perf_event_id(fd) {
                        id.kind = perf_event_kind();
                        id.object = event_id;
                    }
                }
            }
        }
        Ok(id)
    }

    /// The identity of `fd`, a perf event descriptor its caller has just had from
    /// `perf_event_open`: what [`Self::of`] finds for one, without asking `/proc` for the
    /// kind it knows (a `readlink` per event at every capture's start).
    pub fn of_perf_event(fd: BorrowedFd<'_>) -> io::Result<Self> {
        let fd = fd.as_raw_fd();
        // SAFETY: as in `of_raw`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid out-pointer for the call.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            dev: st.st_dev,
            ino: st.st_ino,
            rdev: st.st_rdev,
            mode: st.st_mode,
            kind: perf_event_kind(),
            object: perf_event_id(fd).unwrap_or(u64::MAX),
        })
    }

    /// The kernel's id of the perf event this identity is of (`PERF_EVENT_IOC_ID`: what
    /// `PERF_SAMPLE_IDENTIFIER` writes into its records); `None` for any other object.
    pub fn perf_event_id(&self) -> Option<u64> {
        (self.kind == perf_event_kind() && self.object != u64::MAX).then_some(self.object)
    }

    /// Whether the number `fd` still names this object. Async-signal-safe.
    pub fn check(&self, fd: RawFd) -> FdStatus {
        self.check_with(fd, link_text)
    }

    /// [`Self::check`] with the link read by `link` (see [`Self::of_raw_with`]).
    fn check_with(&self, fd: RawFd, link: fn(RawFd) -> Option<[u8; KIND_LEN]>) -> FdStatus {
        match Self::of_raw_with(fd, link) {
            Ok(now) if now == *self => FdStatus::Ours,
            Ok(_) => FdStatus::Reused,
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => FdStatus::Closed,
            // fstat failing otherwise (EOVERFLOW, ENOMEM) on a number fxtrace made: treat it as
            // not ours, which only ever costs fxtrace its own use of the descriptor.
            Err(_) => FdStatus::Reused,
        }
    }
}

/// The kind of a perf event's identity: its link text, zero padded.
const fn perf_event_kind() -> [u8; KIND_LEN] {
    let mut kind = [0; KIND_LEN];
    let mut i = 0;
    while i < PERF_EVENT_KIND.len() {
        kind[i] = PERF_EVENT_KIND[i];
        i += 1;
    }
    kind
}

/// The kernel's id of the perf event `fd` names (`PERF_EVENT_IOC_ID`); `None` when the number
/// names no perf event (the request is refused). Asked of anonymous-inode files only (see the
/// module docs).
fn perf_event_id(fd: RawFd) -> Option<u64> {
    let mut event_id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes at most one u64 through its argument, here a valid,
    // exclusively borrowed local; a file of another kind refuses the request and writes
    // nothing (module docs).
    let ok = unsafe { perf_event_open_sys::ioctls::ID(fd, &mut event_id) } == 0;
    ok.then_some(event_id)
}

/// The first [`KIND_LEN`] bytes of the `/proc/self/fd/N` link (zero padded); `None` when the
/// link cannot be read (no `/proc`).
fn link_text(fd: RawFd) -> Option<[u8; KIND_LEN]> {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    let mut path = [0u8; PREFIX.len() + 12];
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 11];
    let mut n = fd.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for (i, d) in digits[..len].iter().rev().enumerate() {
        path[PREFIX.len() + i] = *d;
    }
    // `path` stays NUL-terminated: it has at least one zero byte after the digits.
    let mut text = [0u8; KIND_LEN];
    // SAFETY: `path` is a NUL-terminated string and `text` a writable buffer of `KIND_LEN`
    // bytes; readlink writes at most that many.
    let n = unsafe { libc::readlink(path.as_ptr().cast(), text.as_mut_ptr().cast(), KIND_LEN) };
    (n >= 0).then_some(text)
}

// === impl GuardedFd ===

/// An owned descriptor that remembers its [`FdIdentity`] and never acts on a number that no
/// longer names its object: dropping it closes the descriptor only while it is still its own;
/// otherwise the number is left to the program and counted ([`abandoned`]).
#[derive(Debug)]
pub struct GuardedFd {
    fd: RawFd,
    identity: FdIdentity,
    what: &'static str,
}

impl GuardedFd {
    /// Take ownership of `fd`, remembering what it names now; `what` says what fxtrace uses it
    /// for (in messages: "control socket", "perf event", …).
    pub fn new(fd: OwnedFd, what: &'static str) -> io::Result<Self> {
        let identity = FdIdentity::of(fd.as_fd())?;
        Ok(Self {
            fd: fd.into_raw_fd(),
            identity,
            what,
        })
    }

    /// [`Self::new`] for a perf event descriptor just had from `perf_event_open`
    /// ([`FdIdentity::of_perf_event`]).
    pub fn perf_event(fd: OwnedFd) -> io::Result<Self> {
        let identity = FdIdentity::of_perf_event(fd.as_fd())?;
        Ok(Self {
            fd: fd.into_raw_fd(),
            identity,
            what: "perf event",
        })
    }

    /// What the number names now.
    pub fn status(&self) -> FdStatus {
        self.identity.check(self.fd)
    }

    /// The descriptor, if it still names the object fxtrace opened (see the module docs for the
    /// race no check can close).
    pub fn checked(&self) -> Result<BorrowedFd<'_>, FdLost> {
        match self.status() {
            // SAFETY: the number is open and names our object, which this value owns.
            FdStatus::Ours => Ok(unsafe { BorrowedFd::borrow_raw(self.fd) }),
            status => Err(self.lost(status)),
        }
    }

    /// `Ok` while the number still names the object fxtrace opened.
    pub fn check(&self) -> Result<(), FdLost> {
        self.checked().map(drop)
    }

    /// The number, unchecked: for `poll` sets (polling a number fxtrace lost does no harm;
    /// acting on what poll reports does, so check first) and messages.
    pub fn raw(&self) -> RawFd {
        self.fd
    }

    /// The identity remembered at creation.
    pub fn identity(&self) -> FdIdentity {
        self.identity
    }

    /// What fxtrace uses the descriptor for.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// The loss report for `status`.
    pub fn lost(&self, status: FdStatus) -> FdLost {
        FdLost {
            fd: self.fd,
            what: self.what,
            status,
        }
    }
}

impl Drop for GuardedFd {
    fn drop(&mut self) {
        if self.status() == FdStatus::Ours {
            // SAFETY: the number still names the object this value owns; nothing else closes
            // it. A failed close has no one to report to.
            unsafe { libc::close(self.fd) };
        } else {
            count_abandoned();
        }
    }
}

/// Drop `owner` (which closes the descriptor `fd` it holds) only if `fd` still names the
/// object `identity` describes; otherwise forget it, leaving the number to the program (its
/// other resources leak, which is the price of never closing someone else's file), and count
/// it. For descriptors held inside types of other modules. Returns whether it was dropped.
pub fn drop_if_ours<T>(owner: T, fd: RawFd, identity: &FdIdentity) -> bool {
    if identity.check(fd) == FdStatus::Ours {
        drop(owner);
        true
    } else {
        std::mem::forget(owner);
        count_abandoned();
        false
    }
}

// === impl WakePipe ===

/// A wake-up channel between fxtrace's threads: a non-blocking pipe, the waiting thread polls
/// the read end, [`WakePipe::wake`] writes one byte. A pipe rather than an eventfd because each
/// pipe has its own inode, so a program that closes the descriptors and creates pipes or
/// eventfds of its own never gets fxtrace's wake-up byte. A wake-up into a pipe whose read end
/// the program closed raises no `SIGPIPE` in the program.
#[derive(Debug)]
pub struct WakePipe {
    read: GuardedFd,
    write: GuardedFd,
}

impl WakePipe {
    /// A new pipe (`O_CLOEXEC | O_NONBLOCK`); `what` names it in messages.
    pub fn new(what: &'static str) -> io::Result<Self> {
        let mut fds = [-1; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both are new descriptors owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Self {
            read: GuardedFd::new(read, what)?,
            write: GuardedFd::new(write, what)?,
        })
    }

    /// Wake the waiting thread: one byte into the pipe, if its write end is still fxtrace's.
    /// A full pipe is awake already. Async-signal-safe.
    pub fn wake(&self) -> Result<(), FdLost> {
        wake_raw(self.write.raw(), &self.write.identity()).map_err(|s| self.write.lost(s))
    }

    /// Take every wake-up byte waiting in the pipe (the waiting thread, once awake), if its
    /// read end is still fxtrace's.
    pub fn drain(&self) -> Result<(), FdLost> {
        let fd = self.read.checked()?;
        let mut bytes = [0u8; 64];
        loop {
            // SAFETY: reads into a live local buffer of its length from our (non-blocking)
            // pipe.
            let n = unsafe { libc::read(fd.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
            // Empty (EAGAIN), or fewer bytes than asked: nothing more now.
            if n < bytes.len() as isize {
                return Ok(());
            }
        }
    }

    /// The end the waiting thread polls.
    pub fn read_end(&self) -> &GuardedFd {
        &self.read
    }

    /// The end [`WakePipe::wake`] writes.
    pub fn write_end(&self) -> &GuardedFd {
        &self.write
    }

    /// `Ok` while both ends are still fxtrace's.
    pub fn check(&self) -> Result<(), FdLost> {
        self.read.check()?;
        self.write.check()
    }
}

/// [`WakePipe::wake`] on a raw write end and its identity (for the preload's hooks, which keep
/// them in statics). Async-signal-safe. `Err` with the status when the number is not ours.
pub fn wake_raw(write_end: RawFd, identity: &FdIdentity) -> Result<(), FdStatus> {
    match identity.check(write_end) {
        FdStatus::Ours => {
            write_without_sigpipe(write_end);
            Ok(())
        }
        status => Err(status),
    }
}

/// Writes one wake-up byte into the pipe `write_end` without ever raising `SIGPIPE` in the
/// traced program. If the program closed the read end (so the pipe has no reader), `write`
/// fails with `EPIPE` and the kernel sends this thread a `SIGPIPE`, which kills a C program
/// by default. The signal is blocked around the write and a `SIGPIPE` this write raised is
/// taken back with `sigtimedwait` before the old mask returns; one already pending for the
/// program stays pending. Every call here is async-signal-safe. A full pipe (`EAGAIN`)
/// already holds a wake-up.
fn write_without_sigpipe(write_end: RawFd) {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it before any use.
    let mut sigpipe: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above, for the saved mask and the pending set (filled by the calls below).
    let (mut old, mut pending): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: valid pointers to local sigset_t values for the duration of each call.
    unsafe {
        libc::sigemptyset(&mut sigpipe);
        libc::sigaddset(&mut sigpipe, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &sigpipe, &mut old);
        libc::sigpending(&mut pending);
    }
    // SAFETY: `pending` was filled by sigpending.
    let already_pending = unsafe { libc::sigismember(&pending, libc::SIGPIPE) } == 1;
    let byte = 1u8;
    // SAFETY: writes one byte from a live local into a descriptor that still names our pipe.
    let written = unsafe { libc::write(write_end, (&byte as *const u8).cast(), 1) };
    if written < 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::EPIPE)
        && !already_pending
    {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid pointers; a zero timeout only takes a SIGPIPE that is pending now.
        unsafe { libc::sigtimedwait(&sigpipe, std::ptr::null_mut(), &zero) };
    }
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    // Unit tests run in parallel threads of one process, and the kernel hands out the lowest
    // free number: each test moves its descriptors to numbers of its own (700 and up, below
    // the usual 1024 limit), so no other test's `open` can take them.

    /// `file` moved to the lowest free number at or above `at`.
    fn high(file: impl Into<OwnedFd>, at: RawFd) -> OwnedFd {
        let fd: OwnedFd = file.into();
        // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor of a live one; no pointers.
        let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, at) };
        assert!(
            moved >= at,
            "F_DUPFD_CLOEXEC: {}",
            io::Error::last_os_error()
        );
        // SAFETY: `moved` is a new descriptor owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(moved) }
    }

    /// A file with `content`, and the name that keeps it (and its inode number) alive after
    /// the test's descriptors are closed: an inode number is unique among live files only, and
    /// a file system may give a freed one to the next new file.
    fn temp_file(content: &[u8]) -> (std::fs::File, tempfile::TempPath) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content).unwrap();
        let (file, path) = f.into_parts();
        (file, path)
    }

    /// Play the program: close `fd` (not ours to close in real life) and open a file of its own
    /// under the same number (`dup2`, as the kernel would hand out the lowest free number).
    fn close_and_reuse(fd: RawFd, content: &[u8]) -> std::fs::File {
        // SAFETY: the test plays the program closing a descriptor it did not open.
        assert_eq!(unsafe { libc::close(fd) }, 0);
        let (f, _name) = temp_file(content);
        // SAFETY: dup2 onto the number just given up.
        assert_eq!(unsafe { libc::dup2(f.as_raw_fd(), fd) }, fd);
        // SAFETY: dup2 made `fd` a descriptor owned by nobody else.
        unsafe { std::fs::File::from_raw_fd(fd) }
    }

    fn content(file: &mut std::fs::File) -> String {
        let mut text = String::new();
        file.rewind().unwrap();
        file.read_to_string(&mut text).unwrap();
        text
    }

    /// Two perf events of this process (software events any user may open on itself: the
    /// clock probe's dummy), or `None` after saying why the test skips.
    #[cfg(feature = "capture")]
    fn two_perf_events() -> Option<(OwnedFd, OwnedFd)> {
        use crate::capture::sys::{RealSys, Sys};
        let attr = crate::capture::EventAttr::clock_probe();
        let open = || RealSys.perf_event_open(&attr, 0, -1, None);
        match (open(), open()) {
            (Ok(a), Ok(b)) => Some((a, b)),
            _ => {
                crate::test_support::skip(
                    crate::test_support::Requirement::Perf,
                    "perf_event_open of a software event on this process was refused",
                );
                None
            }
        }
    }

    #[test]
    #[cfg(feature = "capture")]
    fn a_perf_event_guarded_without_readlink_has_the_identity_a_check_finds() {
        use crate::capture::sys::{RealSys, Sys};
        let Some((a, b)) = two_perf_events() else {
            return;
        };
        let quick = FdIdentity::of_perf_event(a.as_fd()).unwrap();
        assert_eq!(quick, FdIdentity::of(a.as_fd()).unwrap());
        assert_ne!(
            quick,
            FdIdentity::of(b.as_fd()).unwrap(),
            "each event its own id"
        );
        let guard = RealSys.guard_event(a).unwrap();
        assert_eq!(guard.status(), FdStatus::Ours);
        assert_eq!(guard.identity(), quick);
    }

    /// Without `/proc` (the link unreadable), a perf event's identity taken at the open and
    /// the one a later check takes are the same; another perf event, or an eventfd put under
    /// the number, is not it.
    #[test]
    #[cfg(feature = "capture")]
    fn a_perf_event_is_still_recognised_without_proc() {
        let no_proc: fn(RawFd) -> Option<[u8; KIND_LEN]> = |_| None;
        let Some((a, b)) = two_perf_events() else {
            return;
        };
        let at_open = FdIdentity::of_perf_event(a.as_fd()).unwrap();
        let later = FdIdentity::of_raw_with(a.as_raw_fd(), no_proc).unwrap();
        assert_eq!(later, at_open, "the kind learnt from the event itself");
        assert!(at_open.perf_event_id().is_some());
        assert_eq!(at_open.check_with(a.as_raw_fd(), no_proc), FdStatus::Ours);
        assert_eq!(at_open.check_with(b.as_raw_fd(), no_proc), FdStatus::Reused);
        // The program closes the event and an eventfd of its own takes the number.
        let a = a.into_raw_fd();
        // SAFETY: closing the test's own descriptor; eventfd has no pointer arguments.
        let efd = unsafe {
            libc::close(a);
            libc::eventfd(0, 0)
        };
        assert!(efd >= 0);
        // SAFETY: dup2 of the test's own eventfd onto the number it just closed.
        assert_eq!(unsafe { libc::dup2(efd, a) }, a);
        let eventfd = FdIdentity::of_raw_with(a, no_proc).unwrap();
        assert_eq!(
            eventfd.perf_event_id(),
            None,
            "an eventfd answers no event id"
        );
        assert_eq!(at_open.check_with(a, no_proc), FdStatus::Reused);
        // SAFETY: closing the test's own descriptors.
        unsafe {
            libc::close(a);
            libc::close(efd);
        }
    }

    #[test]
    fn an_untouched_descriptor_is_ours() {
        let pipe = WakePipe::new("test pipe").unwrap();
        assert_eq!(pipe.read_end().status(), FdStatus::Ours);
        assert_eq!(pipe.write_end().status(), FdStatus::Ours);
        assert!(pipe.check().is_ok());
        let (file, _name) = temp_file(b"x");
        let file = GuardedFd::new(file.into(), "test file").unwrap();
        assert_eq!(file.status(), FdStatus::Ours);
        assert_eq!(file.checked().unwrap().as_raw_fd(), file.raw());
    }

    #[test]
    fn a_closed_descriptor_is_gone_and_counted_on_drop() {
        let (file, _name) = temp_file(b"x");
        let guard = GuardedFd::new(high(file, 700), "test file").unwrap();
        // SAFETY: the test plays the program closing a descriptor it did not open.
        assert_eq!(unsafe { libc::close(guard.raw()) }, 0);
        assert_eq!(guard.status(), FdStatus::Closed);
        let lost = guard.check().unwrap_err();
        assert_eq!(lost.status, FdStatus::Closed);
        assert_eq!(lost.what, "test file");
        assert_eq!(
            lost.to_string(),
            format!(
                "the program closed fxtrace's descriptor {} (test file)",
                guard.raw()
            )
        );
        let before = abandoned();
        drop(guard);
        assert!(abandoned() > before, "the abandoned descriptor is counted");
    }

    #[test]
    fn a_reused_number_is_not_ours_and_is_not_closed_on_drop() {
        let (file, _name) = temp_file(b"ours");
        let guard = GuardedFd::new(high(file, 710), "test file").unwrap();
        let fd = guard.raw();
        let mut theirs = close_and_reuse(fd, b"the program's data");
        assert_eq!(guard.status(), FdStatus::Reused);
        assert!(matches!(
            guard.checked(),
            Err(FdLost {
                status: FdStatus::Reused,
                ..
            })
        ));
        let before = abandoned();
        drop(guard);
        assert!(abandoned() > before, "the abandoned descriptor is counted");
        // The program's file is still open under its number, and intact.
        assert_eq!(content(&mut theirs), "the program's data");
        theirs.write_all(b", more").unwrap();
        assert_eq!(content(&mut theirs), "the program's data, more");
        assert_eq!(theirs.as_raw_fd(), fd);
    }

    #[test]
    fn a_pipe_reused_by_the_program_gets_no_wake_up_and_stays_open() {
        let pipe = WakePipe::new("test pipe").unwrap();
        let write = high(pipe.write_end().raw().to_owned_fd(), 720);
        // Rebuild the pipe with its write end at a number of this test's own.
        let pipe = WakePipe {
            write: GuardedFd::new(write, "test pipe").unwrap(),
            ..pipe
        };
        let fd = pipe.write_end().raw();
        // The program closes our write end and a pipe of its own takes the number.
        // SAFETY: the test plays the program.
        assert_eq!(unsafe { libc::close(fd) }, 0);
        let mut theirs = [-1; 2];
        // SAFETY: a valid two-int array.
        let made = unsafe { libc::pipe2(theirs.as_mut_ptr(), libc::O_NONBLOCK) };
        assert_eq!(made, 0);
        // SAFETY: dup2 onto the number just given up.
        assert_eq!(unsafe { libc::dup2(theirs[1], fd) }, fd);
        assert_eq!(pipe.write_end().status(), FdStatus::Reused);
        assert_eq!(pipe.wake().unwrap_err().status, FdStatus::Reused);
        let mut byte = [0u8; 1];
        // SAFETY: `byte` is a valid one-byte buffer; the read end is non-blocking.
        let n = unsafe { libc::read(theirs[0], byte.as_mut_ptr().cast(), 1) };
        assert_eq!(n, -1, "no byte went into the program's pipe");
        drop(pipe);
        // SAFETY: F_GETFD only reads the descriptor flags.
        assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0, "still open");
        // SAFETY: closing the test's own descriptors.
        unsafe {
            libc::close(fd);
            libc::close(theirs[0]);
            libc::close(theirs[1]);
        }
    }

    trait ToOwnedFd {
        fn to_owned_fd(self) -> OwnedFd;
    }

    impl ToOwnedFd for RawFd {
        /// A duplicate of the number (for moving a test's descriptor elsewhere).
        fn to_owned_fd(self) -> OwnedFd {
            // SAFETY: the number is open for the call; try_clone_to_owned dups it.
            unsafe { BorrowedFd::borrow_raw(self) }
                .try_clone_to_owned()
                .unwrap()
        }
    }

    #[test]
    fn anonymous_inode_kinds_are_told_apart() {
        // SAFETY: eventfd and epoll_create1 have no pointer arguments.
        let (efd, epfd) = unsafe { (libc::eventfd(0, 0), libc::epoll_create1(0)) };
        assert!(efd >= 0 && epfd >= 0);
        let e = FdIdentity::of_raw(efd).unwrap();
        let p = FdIdentity::of_raw(epfd).unwrap();
        assert_eq!((e.dev, e.ino), (p.dev, p.ino), "one shared anonymous inode");
        assert_eq!(e.check(efd), FdStatus::Ours);
        // SAFETY: closing the test's own descriptors.
        let close = || unsafe {
            libc::close(efd);
            libc::close(epfd);
        };
        if e.kind == [0; KIND_LEN] {
            close();
            crate::test_support::skip(
                crate::test_support::Requirement::Procfs,
                "/proc/self/fd is not readable here",
            );
            return;
        }
        assert!(e.kind.starts_with(b"anon_inode:[eventfd]"));
        assert_ne!(e, p, "the kind differs");
        assert_eq!(e.check(epfd), FdStatus::Reused);
        close();
    }

    /// A program that closed the read end leaves a pipe without a reader: a wake-up must not
    /// raise SIGPIPE (which kills a C program by default; Rust ignores it, so the check runs
    /// in a child with the default disposition).
    #[test]
    fn waking_a_pipe_whose_reader_is_gone_raises_no_sigpipe() {
        let WakePipe { read, write } = WakePipe::new("test pipe").unwrap();
        let (fd, identity) = (write.raw(), write.identity());
        // The program closed the read end: the pipe has no reader left.
        drop(read);
        // SAFETY: fork in a test; the child only makes async-signal-safe calls and _exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: the child restores SIGPIPE's default action, wakes, and exits.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                let ok = wake_raw(fd, &identity).is_ok();
                libc::_exit(if ok { 0 } else { 3 });
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child died of signal {} (13 is SIGPIPE)",
            libc::WTERMSIG(status)
        );
        drop(write);
    }

    #[test]
    fn wake_makes_the_read_end_readable() {
        let pipe = WakePipe::new("test pipe").unwrap();
        let mut pfd = libc::pollfd {
            fd: pipe.read_end().raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 0);
        pipe.wake().unwrap();
        pipe.wake().unwrap();
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 1);
    }

    #[test]
    fn drop_if_ours_leaves_a_reused_number_alone_and_closes_its_own() {
        let (file, _name) = temp_file(b"ours");
        let owner = high(file, 730);
        let fd = owner.as_raw_fd();
        let identity = FdIdentity::of(owner.as_fd()).unwrap();
        let mut theirs = close_and_reuse(fd, b"theirs");
        assert!(!drop_if_ours(owner, fd, &identity));
        assert_eq!(content(&mut theirs), "theirs");
        drop(theirs);

        let (file, _name2) = temp_file(b"x");
        let mine = high(file, 740);
        let fd = mine.as_raw_fd();
        let identity = FdIdentity::of(mine.as_fd()).unwrap();
        assert!(drop_if_ours(mine, fd, &identity));
        assert_eq!(identity.check(fd), FdStatus::Closed);
    }
}

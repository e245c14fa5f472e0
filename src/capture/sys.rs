//! The syscall seam: every `perf_event_open`, perf `ioctl`, `mmap`, `munmap` and `poll` the
//! capture layer makes goes through the [`Sys`] trait.
//!
//! [`RealSys`] calls the kernel; `FakeSys` (feature `test-support`) serves synthetic perf events
//! and ring buffers from memory, so ring, record and session logic is tested on machines without
//! perf access or a PMU (this project's CI VM has none). Anything failing here comes back as an
//! [`io::Error`] made by the one errno helper, `check_errno`; the layers above wrap it in a
//! typed error naming the event, pid, cpu and remedy.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use perf_event_open_sys as pe;

use super::attr::EventAttr;
use crate::fd_guard::GuardedFd;

/// The one errno helper: a syscall return of `-1` becomes [`io::Error::last_os_error`].
///
/// Must be called right after the syscall, before anything else can overwrite `errno`.
pub(crate) fn check_errno(ret: i64) -> io::Result<i64> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// An `ioctl` request on a perf event file descriptor.
#[derive(Debug, Clone, Copy)]
pub enum PerfIoctl<'a> {
    /// `PERF_EVENT_IOC_ENABLE`: start counting / emitting records.
    Enable,
    /// `PERF_EVENT_IOC_DISABLE`: stop counting / emitting records.
    Disable,
    /// `PERF_EVENT_IOC_SET_OUTPUT`: send this event's records into the ring of the given event
    /// (same CPU, same clock).
    SetOutput(BorrowedFd<'a>),
}

/// The system calls the capture layer needs, one method each.
///
/// Implementations: [`RealSys`] (the kernel) and `FakeSys` (feature `test-support`) (memory).
pub trait Sys: Send + Sync + fmt::Debug {
    /// `perf_event_open(attr, pid, cpu, group_fd, PERF_FLAG_FD_CLOEXEC)`.
    fn perf_event_open(
        &self,
        attr: &EventAttr,
        pid: i32,
        cpu: i32,
        group_fd: Option<BorrowedFd<'_>>,
    ) -> io::Result<OwnedFd>;

    /// A perf `ioctl` on `fd`.
    fn ioctl(&self, fd: BorrowedFd<'_>, request: PerfIoctl<'_>) -> io::Result<()>;

    /// Maps `len` bytes of the perf event `fd` shared and read-write (so the kernel never
    /// overwrites unread records), at an address the kernel chooses.
    fn mmap(&self, fd: BorrowedFd<'_>, len: usize) -> io::Result<NonNull<u8>>;

    /// Unmaps a mapping returned by [`Sys::mmap`].
    ///
    /// # Safety
    ///
    /// `addr`/`len` must be exactly a mapping returned by `self.mmap` that was not unmapped yet,
    /// and no reference into it may be used afterwards.
    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> io::Result<()>;

    /// `poll(fds, timeout_ms)`, retried on `EINTR`; returns the number of ready descriptors.
    fn poll(&self, fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize>;

    /// `read(fd, buf)`, retried on `EINTR`; returns the bytes read.
    fn read(&self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize>;

    /// The page size perf mappings are made of.
    fn page_size(&self) -> usize;

    /// Own `fd`, a descriptor [`Sys::perf_event_open`] returned, checked before each use
    /// ([`GuardedFd`]). The kernel's are perf events, whose kind need not be asked of `/proc`
    /// ([`GuardedFd::perf_event`]); by default, the kind is read as for any descriptor.
    fn guard_event(&self, fd: OwnedFd) -> io::Result<GuardedFd> {
        GuardedFd::new(fd, "perf event")
    }

    /// The kernel's id of the perf event `fd` (from [`Sys::guard_event`]): the id
    /// `PERF_SAMPLE_IDENTIFIER` writes into its records and into those of the events inherited
    /// from it. By default, the one its guard read (`PERF_EVENT_IOC_ID`).
    fn event_id(&self, fd: &GuardedFd) -> Option<u64> {
        fd.identity().perf_event_id()
    }
}

/// The records perf event `fd` lost for want of room in its ring since it was opened
/// (`PERF_FORMAT_LOST`, [`EventAttr::counts_lost`]); `None` when its `read` does not say
/// (an event opened without the bit, or a failed read).
pub(crate) fn lost_count(sys: &dyn Sys, fd: BorrowedFd<'_>) -> Option<u64> {
    // `read_format` = LOST alone: `u64 value, u64 lost`; without the bit, the value alone.
    let mut buf = [0u8; 16];
    match sys.read(fd, &mut buf) {
        Ok(16) => Some(u64::from_ne_bytes(buf[8..].try_into().ok()?)),
        _ => None,
    }
}

/// The kernel.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealSys;

impl Sys for RealSys {
    fn perf_event_open(
        &self,
        attr: &EventAttr,
        pid: i32,
        cpu: i32,
        group_fd: Option<BorrowedFd<'_>>,
    ) -> io::Result<OwnedFd> {
        // The kernel may write the size it expects back into the struct (E2BIG), so it gets a
        // private copy.
        let mut raw = attr.to_raw();
        let group = group_fd.map_or(-1, |fd| fd.as_raw_fd());
        // SAFETY: `raw` is a fully initialised perf_event_attr built from `Default` and owned by
        // this frame for the duration of the call; the flags value is a valid perf flag.
        let ret = unsafe {
            pe::perf_event_open(
                &mut raw,
                pid,
                cpu,
                group,
                libc::c_ulong::from(pe::bindings::PERF_FLAG_FD_CLOEXEC),
            )
        };
        let fd = check_errno(i64::from(ret))?;
        // SAFETY: the syscall succeeded, so `fd` is a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    fn ioctl(&self, fd: BorrowedFd<'_>, request: PerfIoctl<'_>) -> io::Result<()> {
        let raw = fd.as_raw_fd();
        // SAFETY: `raw` is a live perf event descriptor borrowed for the call; each request gets
        // the argument type the kernel expects (0 for ENABLE/DISABLE, a perf fd for SET_OUTPUT).
        let ret = unsafe {
            match request {
                PerfIoctl::Enable => pe::ioctls::ENABLE(raw, 0),
                PerfIoctl::Disable => pe::ioctls::DISABLE(raw, 0),
                PerfIoctl::SetOutput(target) => pe::ioctls::SET_OUTPUT(raw, target.as_raw_fd()),
            }
        };
        check_errno(i64::from(ret)).map(drop)
    }

    fn mmap(&self, fd: BorrowedFd<'_>, len: usize) -> io::Result<NonNull<u8>> {
        // SAFETY: a fresh shared mapping at a kernel-chosen address aliases no Rust object;
        // the descriptor is live for the call.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        check_errno(ptr as isize as i64)?;
        NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))
    }

    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> io::Result<()> {
        // SAFETY: the caller guarantees `addr`/`len` is a live mapping from `mmap` with no
        // remaining users.
        let ret = unsafe { libc::munmap(addr.as_ptr().cast(), len) };
        check_errno(i64::from(ret)).map(drop)
    }

    fn read(&self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: `buf` is a live, exclusively borrowed buffer of `buf.len()` bytes; the
            // descriptor is live for the call.
            let ret = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            match check_errno(ret as i64) {
                Ok(n) => return Ok(n as usize),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn poll(&self, fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
        loop {
            // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()` pollfds.
            let ret =
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
            match check_errno(i64::from(ret)) {
                Ok(n) => return Ok(n as usize),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn page_size(&self) -> usize {
        // SAFETY: sysconf has no memory-safety preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size).unwrap_or(4096)
    }

    fn guard_event(&self, fd: OwnedFd) -> io::Result<GuardedFd> {
        GuardedFd::perf_event(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_errno_passes_values_and_maps_minus_one() {
        assert_eq!(check_errno(5).unwrap(), 5);
        assert_eq!(check_errno(0).unwrap(), 0);
        // SAFETY: closing an invalid descriptor only sets errno (EBADF).
        let ret = unsafe { libc::close(-1) };
        let err = check_errno(i64::from(ret)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    }
}

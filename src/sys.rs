//! The engine's system calls. Every one goes through [`check`], which turns the C convention
//! (`-1` and `errno`) into an error naming the operation.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// A failed system call: which one, and the OS error.
#[derive(Debug, thiserror::Error)]
#[error("{op} failed: {source}")]
pub struct SysError {
    /// The operation, e.g. `"memfd_create"` or `"fcntl(F_ADD_SEALS)"`.
    pub op: &'static str,
    /// The OS error (`errno`).
    #[source]
    pub source: io::Error,
}

/// Return values that signal failure with -1.
pub(crate) trait MinusOne: Copy + PartialEq {
    const MINUS_ONE: Self;
}

impl MinusOne for i32 {
    const MINUS_ONE: Self = -1;
}

impl MinusOne for i64 {
    const MINUS_ONE: Self = -1;
}

impl MinusOne for isize {
    const MINUS_ONE: Self = -1;
}

/// The one errno helper: `ret == -1` becomes a [`SysError`] carrying `errno` and `op`.
pub(crate) fn check<T: MinusOne>(op: &'static str, ret: T) -> Result<T, SysError> {
    if ret == T::MINUS_ONE {
        Err(SysError {
            op,
            source: io::Error::last_os_error(),
        })
    } else {
        Ok(ret)
    }
}

/// `memfd_create(name, flags)`.
pub(crate) fn memfd_create(name: &CStr, flags: libc::c_uint) -> Result<OwnedFd, SysError> {
    // SAFETY: `name` is a valid NUL-terminated string; the call has no other memory arguments.
    let fd = check("memfd_create", unsafe {
        libc::memfd_create(name.as_ptr(), flags)
    })?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `ftruncate(fd, len)`.
pub(crate) fn ftruncate(fd: BorrowedFd<'_>, len: u64) -> Result<(), SysError> {
    let len = libc::off_t::try_from(len).map_err(|_| SysError {
        op: "ftruncate",
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    // SAFETY: plain integer arguments.
    check("ftruncate", unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    Ok(())
}

/// `fcntl(fd, F_ADD_SEALS, seals)`.
pub(crate) fn add_seals(fd: BorrowedFd<'_>, seals: libc::c_int) -> Result<(), SysError> {
    // SAFETY: plain integer arguments.
    check("fcntl(F_ADD_SEALS)", unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals)
    })?;
    Ok(())
}

/// `fcntl(fd, F_GET_SEALS)`.
pub(crate) fn get_seals(fd: BorrowedFd<'_>) -> Result<libc::c_int, SysError> {
    // SAFETY: plain integer arguments.
    check("fcntl(F_GET_SEALS)", unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS)
    })
}

/// The file size from `fstat(fd)`.
pub(crate) fn fstat_size(fd: BorrowedFd<'_>) -> Result<u64, SysError> {
    Ok(fstat_raw(fd.as_raw_fd())?.st_size as u64)
}

/// `fstat(fd)` of a descriptor number that may not be open (`EBADF` then) or may not be what
/// the caller thinks: only the kernel's answer about it is read.
pub(crate) fn fstat_raw(fd: RawFd) -> Result<libc::stat, SysError> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `stat` points to writable memory of the right size for the kernel to fill; any
    // descriptor number is a valid argument.
    check("fstat", unsafe { libc::fstat(fd, stat.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it initialised `stat`.
    Ok(unsafe { stat.assume_init() })
}

/// `mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)`.
pub(crate) fn mmap_shared(fd: BorrowedFd<'_>, len: usize) -> Result<NonNull<u8>, SysError> {
    mmap_file(fd, len, libc::PROT_READ | libc::PROT_WRITE)
}

/// `mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0)`: a read-only view of a file (a sealed
/// memfd's pages are shared with every process that maps it).
pub(crate) fn mmap_read_only(fd: BorrowedFd<'_>, len: usize) -> Result<NonNull<u8>, SysError> {
    mmap_file(fd, len, libc::PROT_READ)
}

fn mmap_file(fd: BorrowedFd<'_>, len: usize, prot: libc::c_int) -> Result<NonNull<u8>, SysError> {
    // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(SysError {
            op: "mmap",
            source: io::Error::last_os_error(),
        });
    }
    NonNull::new(ptr.cast::<u8>()).ok_or(SysError {
        op: "mmap",
        source: io::Error::from_raw_os_error(libc::EFAULT),
    })
}

/// `munmap(ptr, len)`.
///
/// # Safety
///
/// `ptr..ptr+len` must be a mapping made by [`mmap_shared`] or [`mmap_read_only`] that nothing
/// references any more.
pub(crate) unsafe fn munmap(ptr: NonNull<u8>, len: usize) -> Result<(), SysError> {
    // SAFETY: guaranteed by the caller.
    check("munmap", unsafe { libc::munmap(ptr.as_ptr().cast(), len) })?;
    Ok(())
}

/// `pread(fd, buf, offset)` until `buf` is full.
pub(crate) fn pread_exact(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> Result<(), SysError> {
    let mut done = 0usize;
    while done < buf.len() {
        let rest = &mut buf[done..];
        let off = libc::off_t::try_from(offset + done as u64).map_err(|_| SysError {
            op: "pread",
            source: io::Error::from_raw_os_error(libc::EINVAL),
        })?;
        // SAFETY: `rest` is valid writable memory of `rest.len()` bytes.
        let ret = unsafe { libc::pread(fd.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len(), off) };
        match check("pread", ret) {
            Ok(0) => {
                return Err(SysError {
                    op: "pread",
                    source: io::Error::from(io::ErrorKind::UnexpectedEof),
                })
            }
            Ok(n) => done += n as usize,
            Err(e) if e.source.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, len)`: the range reads
/// back as zeros and its pages are freed (size seals allow it: the size does not change).
pub(crate) fn punch_hole(fd: BorrowedFd<'_>, offset: u64, len: u64) -> Result<(), SysError> {
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(SysError {
            op: "fallocate",
            source: io::Error::from_raw_os_error(libc::EINVAL),
        });
    };
    // SAFETY: plain integer arguments.
    check("fallocate(PUNCH_HOLE)", unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        )
    })?;
    Ok(())
}

/// `madvise(addr, len, MADV_POPULATE_WRITE)` (Linux 5.14): fault the range in writable
/// without changing its contents. `EINVAL` means the kernel does not know the advice.
///
/// # Safety
///
/// `addr..addr + len` must be a page-aligned range of a live shared mapping.
pub(crate) unsafe fn populate_write(addr: *mut u8, len: usize) -> Result<(), SysError> {
    /// `MADV_POPULATE_WRITE` from `<linux/mman.h>` (not in every libc crate version).
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    // SAFETY: the caller guarantees a live mapping; the advice does not change contents.
    check("madvise(MADV_POPULATE_WRITE)", unsafe {
        libc::madvise(addr.cast(), len, MADV_POPULATE_WRITE)
    })?;
    Ok(())
}

/// `madvise(addr, len, MADV_REMOVE)` on a shared memfd mapping: as [`punch_hole`] for that
/// range of the file, without needing its descriptor.
///
/// # Safety
///
/// `[addr, addr + len)` must be a page-aligned range of a live `MAP_SHARED` mapping that no
/// one else accesses during the call.
pub(crate) unsafe fn remove_pages(addr: *mut u8, len: usize) -> Result<(), SysError> {
    // SAFETY: the caller passes a page-aligned range of a live shared mapping.
    check("madvise(MADV_REMOVE)", unsafe {
        libc::madvise(addr.cast(), len, libc::MADV_REMOVE)
    })?;
    Ok(())
}

const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

/// Register this process for `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (once per process; the caller
/// caches the answer).
pub(crate) fn membarrier_register_private_expedited() -> Result<(), SysError> {
    // SAFETY: integer-only system call.
    let supported = check("membarrier(QUERY)", unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_QUERY,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    })?;
    if supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED == 0 {
        return Err(SysError {
            op: "membarrier(QUERY)",
            source: io::Error::from_raw_os_error(libc::ENOSYS),
        });
    }
    // SAFETY: integer-only system call.
    check("membarrier(REGISTER_PRIVATE_EXPEDITED)", unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    })?;
    Ok(())
}

/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: every thread of this process that is running
/// executes a full memory barrier before the call returns (the others pass one when scheduled).
pub(crate) fn membarrier_private_expedited() -> Result<(), SysError> {
    // SAFETY: integer-only system call.
    check("membarrier(PRIVATE_EXPEDITED)", unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_PRIVATE_EXPEDITED,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    })?;
    Ok(())
}

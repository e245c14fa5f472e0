//! The shared trace buffer, the one object provider (engine) and manager both map: a sealed
//! memfd mapped `MAP_SHARED` ([`TraceBuffer`]), with the 128-byte header at offset 0 whose
//! layout, geometry and record framing are in [`header`].
//!
//! The manager creates the memfd (`MFD_CLOEXEC | MFD_ALLOW_SEALING`), sizes it, seals it against
//! shrinking and growing, and passes the fd to the provider, which maps it with
//! [`TraceBuffer::from_fd`]. Standalone use and tests create one with [`TraceBuffer::create`].
//! Because the size can never change, neither side can be made to fault by the other truncating
//! the file under its mapping.

pub mod header;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use std::sync::atomic::{AtomicU64, Ordering};

use self::header::{SharedHeader, BUFFER_SIZE_GRANULE, MAX_BUFFER_SIZE, MIN_BUFFER_SIZE};
use crate::sys;
pub use crate::sys::SysError;

/// Seals every trace buffer must carry.
pub const REQUIRED_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
/// Seals [`TraceBuffer::create`] adds (the required ones, and no further seals).
pub const CREATED_SEALS: libc::c_int = REQUIRED_SEALS | libc::F_SEAL_SEAL;

/// Why a trace buffer could not be created, mapped or read.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// A system call failed.
    #[error(transparent)]
    Sys(#[from] SysError),
    /// The size is not a multiple of 4096 between 4 KiB and 4 GiB.
    #[error("trace buffer size {size} is not a multiple of 4096 in 4096..=4 GiB")]
    InvalidSize {
        /// The offending size.
        size: u64,
    },
    /// A received memfd lacks the shrink/grow seals.
    #[error("trace buffer memfd has seals {have:#x}, needs at least {need:#x} (shrink and grow)")]
    MissingSeals {
        /// Seals found (`F_GET_SEALS`).
        have: libc::c_int,
        /// Seals required.
        need: libc::c_int,
    },
    /// The buffer was mapped without keeping its descriptor ([`TraceBuffer::map_received`]).
    #[error("this trace buffer kept no descriptor (mapped with map_received)")]
    NoDescriptor,
    /// A read outside the buffer.
    #[error("range {offset}+{len} is outside the {size}-byte trace buffer")]
    OutOfRange {
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Buffer size.
        size: u64,
    },
}

/// Is `size` a valid trace buffer size?
pub fn is_valid_buffer_size(size: u64) -> bool {
    (MIN_BUFFER_SIZE..=MAX_BUFFER_SIZE).contains(&size) && size % BUFFER_SIZE_GRANULE == 0
}

/// How [`TraceBuffer::prefault`] faulted a range in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prefault {
    /// One `madvise(MADV_POPULATE_WRITE)`.
    Populated,
    /// The kernel lacks `MADV_POPULATE_WRITE`: one atomic no-op write per page.
    Touched,
}

/// A sealed memfd and its `MAP_SHARED` read-write mapping (the descriptor is not kept by
/// [`TraceBuffer::map_received`]: the mapping does not need it).
#[derive(Debug)]
pub struct TraceBuffer {
    fd: Option<OwnedFd>,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; it is unmapped only in Drop.
// Concurrent access to its bytes is governed by the engine's protocol (atomics for the header
// and record framing words, exclusive slots for payloads), not by this type.
unsafe impl Send for TraceBuffer {}
// SAFETY: as above; `&TraceBuffer` only hands out raw pointers and atomic views.
unsafe impl Sync for TraceBuffer {}

impl TraceBuffer {
    /// Create a zero-filled memfd of `size` bytes (`MFD_CLOEXEC | MFD_ALLOW_SEALING`), seal it
    /// against shrink, grow and further seals, and map it.
    pub fn create(size: u64) -> Result<Self, BufferError> {
        if !is_valid_buffer_size(size) {
            return Err(BufferError::InvalidSize { size });
        }
        let fd = sys::memfd_create(
            c"fxtrace-buffer",
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )?;
        sys::ftruncate(fd.as_fd(), size)?;
        sys::add_seals(fd.as_fd(), CREATED_SEALS)?;
        let mut buffer = Self::map(fd.as_fd(), size)?;
        buffer.fd = Some(fd);
        Ok(buffer)
    }

    /// Map a memfd received from a manager, after checking its size (`fstat`) and its seals
    /// (`F_GET_SEALS` must include shrink and grow).
    pub fn from_fd(fd: OwnedFd) -> Result<Self, BufferError> {
        let mut buffer = Self::map_received(fd.as_fd())?;
        buffer.fd = Some(fd);
        Ok(buffer)
    }

    /// As [`TraceBuffer::from_fd`], but keeps no descriptor: the caller closes `fd` (the
    /// mapping stays valid). A provider maps its buffer this way, so that a traced program
    /// that closes descriptors it did not open can never make fxtrace close one of its files.
    pub fn map_received(fd: BorrowedFd<'_>) -> Result<Self, BufferError> {
        let size = sys::fstat_size(fd)?;
        if !is_valid_buffer_size(size) {
            return Err(BufferError::InvalidSize { size });
        }
        let seals = sys::get_seals(fd)?;
        if seals & REQUIRED_SEALS != REQUIRED_SEALS {
            return Err(BufferError::MissingSeals {
                have: seals,
                need: REQUIRED_SEALS,
            });
        }
        Self::map(fd, size)
    }

    fn map(fd: BorrowedFd<'_>, size: u64) -> Result<Self, BufferError> {
        let len = usize::try_from(size).map_err(|_| BufferError::InvalidSize { size })?;
        let ptr = sys::mmap_shared(fd, len)?;
        Ok(Self { fd: None, ptr, len })
    }

    /// Size of the buffer in bytes (header included).
    pub fn size(&self) -> u64 {
        self.len as u64
    }

    /// The memfd ([`BufferError::NoDescriptor`] for a buffer from
    /// [`TraceBuffer::map_received`]).
    pub fn fd(&self) -> Result<BorrowedFd<'_>, BufferError> {
        self.fd
            .as_ref()
            .map(AsFd::as_fd)
            .ok_or(BufferError::NoDescriptor)
    }

    /// A new fd for the same memfd (`F_DUPFD_CLOEXEC`), e.g. to map it a second time.
    pub fn try_clone_fd(&self) -> Result<OwnedFd, BufferError> {
        self.fd()?.try_clone_to_owned().map_err(|source| {
            BufferError::Sys(SysError {
                op: "fcntl(F_DUPFD_CLOEXEC)",
                source,
            })
        })
    }

    /// Start of the mapping (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The header at offset 0, as atomics.
    pub fn header(&self) -> &SharedHeader {
        // SAFETY: the mapping is page-aligned, at least 4096 bytes, lives as long as `self`, and
        // the header bytes are only ever accessed through `SharedHeader`'s atomics.
        unsafe { SharedHeader::from_ptr(self.ptr.as_ptr()) }
    }

    /// Copy `buf.len()` bytes at `offset` out of the memfd with `pread` (a kernel copy, so it
    /// is not a data race even if a writer is active; the bytes are only meaningful for ranges
    /// whose writers have finished).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), BufferError> {
        self.check_range(offset, buf.len() as u64)?;
        sys::pread_exact(self.fd()?, buf, offset)?;
        Ok(())
    }

    /// Copy the `out.len()` bytes (a whole number of words) at `offset` (a multiple of 8) out
    /// of the mapping, each word with one `Relaxed` atomic load: no data race with a writer,
    /// no system call, and on x86-64 the plain loads of a copy loop. As [`Self::read_at`],
    /// the words are only meaningful for ranges whose writers have finished; a reader checks
    /// what it copied, never the mapping.
    pub fn read_words_at(&self, offset: u64, out: &mut [u8]) -> Result<(), BufferError> {
        let len = out.len() as u64;
        self.check_range(offset, len)?;
        if offset % 8 != 0 || len % 8 != 0 {
            return Err(BufferError::OutOfRange {
                offset,
                len,
                size: self.len as u64,
            });
        }
        // SAFETY: `offset..offset + len` is inside the mapping (checked) and 8-aligned (the
        // mapping is page-aligned, `offset` a multiple of 8); every access to the buffer's
        // words from this process goes through atomics or the kernel (a writer's stores, in
        // this or another process, are outside Rust's model, as the header's are).
        let shared = unsafe {
            std::slice::from_raw_parts(
                self.ptr.as_ptr().add(offset as usize).cast::<AtomicU64>(),
                out.len() / 8,
            )
        };
        for (word, shared) in out.chunks_exact_mut(8).zip(shared) {
            // ATOMICS: `Relaxed`: the copy's consistency comes from the protocol (the writers
            // of the range are done, published by the header's `Release` stores the caller
            // read with `Acquire`), not from this load.
            word.copy_from_slice(&shared.load(Ordering::Relaxed).to_ne_bytes());
        }
        Ok(())
    }

    /// [`Self::read_at`] into a new vector.
    pub fn copy_range(&self, offset: u64, len: u64) -> Result<Vec<u8>, BufferError> {
        self.check_range(offset, len)?;
        let mut out = vec![0u8; len as usize];
        self.read_at(offset, &mut out)?;
        Ok(out)
    }

    /// Make `[offset, offset + len)` read as zeros: whole pages are released with
    /// `fallocate(PUNCH_HOLE)` (no memory is committed for them), partial pages are cleared
    /// through the mapping.
    ///
    /// Must only be called while no one else accesses the range (the engine calls it while
    /// tracing is stopped).
    pub(crate) fn zero_range(&self, offset: u64, len: u64) -> Result<(), BufferError> {
        self.check_range(offset, len)?;
        let end = offset + len;
        let page = BUFFER_SIZE_GRANULE;
        let first_full = offset.div_ceil(page) * page;
        let last_full = end / page * page;
        if first_full < last_full {
            self.clear_bytes(offset, first_full - offset);
            match &self.fd {
                Some(fd) => sys::punch_hole(fd.as_fd(), first_full, last_full - first_full)?,
                // SAFETY: `first_full..last_full` is page-aligned and inside the mapping
                // (checked above), and the caller guarantees no one else accesses it.
                None => unsafe {
                    sys::remove_pages(
                        self.ptr.as_ptr().add(first_full as usize),
                        (last_full - first_full) as usize,
                    )?
                },
            }
            self.clear_bytes(last_full, end - last_full);
        } else {
            self.clear_bytes(offset, len);
        }
        Ok(())
    }

    /// Fault the pages of `[offset, offset + len)` in writable, without changing their
    /// contents, so that the record path takes no first-touch page fault there: one
    /// `madvise(MADV_POPULATE_WRITE)`, or on a kernel without it (before 5.14) an atomic
    /// no-op write (`fetch_or(0)`) to each page, harmless beside concurrent writers.
    ///
    /// Best effort: a failure (no memory for the range now) leaves the pages to be faulted by
    /// the writers, as without this call.
    pub(crate) fn prefault(&self, offset: u64, len: u64) -> Result<Prefault, BufferError> {
        self.check_range(offset, len)?;
        let page = BUFFER_SIZE_GRANULE;
        let start = offset / page * page;
        let end = (offset + len).div_ceil(page) * page;
        let end = end.min(self.len as u64) as usize;
        let start = start as usize;
        if start >= end {
            return Ok(Prefault::Populated);
        }
        // SAFETY: `start..end` is page-aligned (the mapping's length is a multiple of the
        // granule) and inside the live mapping.
        let populated = unsafe { sys::populate_write(self.ptr.as_ptr().add(start), end - start) };
        match populated {
            Ok(()) => Ok(Prefault::Populated),
            Err(e) if e.source.raw_os_error() == Some(libc::EINVAL) => {
                for offset in (start..end).step_by(page as usize) {
                    // SAFETY: `offset` is 8-aligned (page-aligned) and inside the mapping,
                    // which lives as long as `self`; every access to the buffer's words is
                    // atomic or by their single owner, and `fetch_or(0)` changes no bit.
                    let word = unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset).cast()) };
                    // ATOMICS: `Relaxed`: only the page fault matters, not the value.
                    word.fetch_or(0, Ordering::Relaxed);
                }
                Ok(Prefault::Touched)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn clear_bytes(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        // SAFETY: `check_range` in the caller bounds the range inside the mapping, and the
        // caller (`zero_range`) requires that no one else accesses it meanwhile.
        unsafe {
            self.ptr
                .as_ptr()
                .add(offset as usize)
                .write_bytes(0, len as usize)
        };
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<(), BufferError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len as u64 => Ok(()),
            _ => Err(BufferError::OutOfRange {
                offset,
                len,
                size: self.len as u64,
            }),
        }
    }
}

impl Drop for TraceBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `mmap_shared` in `map` and nothing borrows it any
        // more (borrows of `self` have ended). An error here can only leak address space.
        let _ = unsafe { sys::munmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider's mapping keeps no descriptor, and still clears whole pages (MADV_REMOVE on
    /// the shared mapping punches the memfd, as the manager's own mapping sees).
    #[test]
    fn a_mapping_without_descriptor_zeroes_ranges_through_the_mapping() {
        let manager = TraceBuffer::create(4 * BUFFER_SIZE_GRANULE).unwrap();
        let provider = TraceBuffer::map_received(manager.fd().unwrap()).unwrap();
        assert!(matches!(provider.fd(), Err(BufferError::NoDescriptor)));
        assert!(matches!(
            provider.try_clone_fd(),
            Err(BufferError::NoDescriptor)
        ));
        let len = 3 * BUFFER_SIZE_GRANULE;
        // SAFETY: the first three pages of the provider's live mapping; nothing else runs.
        unsafe { provider.as_ptr().write_bytes(0xab, len as usize) };
        let mut seen = vec![0u8; len as usize];
        manager.read_at(0, &mut seen).unwrap();
        assert!(seen.iter().all(|&b| b == 0xab), "one memfd, two mappings");
        // A partial page, two whole pages, a partial page.
        provider.zero_range(100, len - 200).unwrap();
        manager.read_at(0, &mut seen).unwrap();
        assert!(seen[..100].iter().all(|&b| b == 0xab));
        assert!(seen[100..(len - 100) as usize].iter().all(|&b| b == 0));
        assert!(seen[(len - 100) as usize..].iter().all(|&b| b == 0xab));
    }

    /// Prefaulting makes every data page resident (mincore) and changes no byte.
    #[test]
    fn prefault_makes_pages_resident_and_keeps_contents() {
        let pages = 64;
        let buffer = TraceBuffer::create(pages * BUFFER_SIZE_GRANULE).unwrap();
        let last = (pages - 1) * BUFFER_SIZE_GRANULE + 8;
        // SAFETY: inside the mapping, no one else uses this fresh buffer.
        unsafe {
            buffer
                .as_ptr()
                .add(last as usize)
                .cast::<u64>()
                .write(0x1234_5678)
        };
        let resident = |buffer: &TraceBuffer| {
            let mut vec = vec![0u8; pages as usize];
            // SAFETY: the mapping is live and `vec` has one byte per page.
            let ret = unsafe {
                libc::mincore(
                    buffer.as_ptr().cast(),
                    buffer.size() as usize,
                    vec.as_mut_ptr(),
                )
            };
            assert_eq!(ret, 0, "mincore: {}", std::io::Error::last_os_error());
            vec.iter().filter(|b| **b & 1 != 0).count()
        };
        let before = resident(&buffer);
        assert!(
            before < pages as usize,
            "a fresh memfd is not all resident ({before})"
        );
        buffer.prefault(0, buffer.size()).unwrap();
        assert_eq!(resident(&buffer), pages as usize);
        // SAFETY: as above.
        let value = unsafe { buffer.as_ptr().add(last as usize).cast::<u64>().read() };
        assert_eq!(value, 0x1234_5678);
        let mut zeros = vec![1u8; 64];
        buffer.read_at(BUFFER_SIZE_GRANULE, &mut zeros).unwrap();
        assert!(zeros.iter().all(|b| *b == 0));
    }
}

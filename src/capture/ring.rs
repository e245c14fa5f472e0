//! The mmap'd perf ring buffer: one control page (`perf_event_mmap_page`) then `2^n` data pages.
//!
//! Protocol (uapi `perf_event_mmap_page`, "data_head / data_tail"): the kernel appends records
//! and publishes `data_head` (a free-running byte count) after writing them; the reader consumes
//! records between `data_tail` and `data_head`, then publishes the new `data_tail`, which frees
//! the space. The ring is mapped read-write, so the kernel never overwrites unread records: when
//! the ring is full it drops records and reports them later in a `PERF_RECORD_LOST`.
//!
//! Every access to the control page goes through atomic views of its fields, never
//! `read_volatile` plus a fence:
//!
//! - ATOMICS: `data_head` is loaded with `Acquire`, pairing with the kernel's
//!   `smp_store_release` of `data_head` after it wrote the records, so the record bytes below
//!   the head are visible before they are read.
//! - ATOMICS: `data_tail` is stored with `Release` after the records were read, pairing with the
//!   kernel's `smp_load_acquire`/control dependency on `data_tail`, so the kernel reuses the
//!   space only after our reads of it completed.
//! - ATOMICS: the clock parameters are read as a seqlock on `lock`: `Acquire` load of `lock`,
//!   `Relaxed` loads of the fields, an `Acquire` fence, a `Relaxed` reload of `lock`; equal and
//!   even means the fields are one consistent snapshot. Racing stores are atomic accesses on
//!   both sides, so no torn read is undefined behaviour.
//!
//! A record is handed out as a zero-copy [`RawData`] view: [`RawData::Single`] when it is
//! contiguous, [`RawData::Split`] when it wraps around the end of the ring. Consumed space is
//! published when the [`RingReader`] is dropped, or earlier with
//! [`RingReader::release_consumed`].

use std::borrow::Cow;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::fd_guard::{FdLost, GuardedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use perf_event_open_sys::bindings as b;
use thiserror::Error;

use super::sys::Sys;
use super::time::TscConversion;

/// Size of `struct perf_event_header`.
pub const HEADER_SIZE: usize = 8;

/// Errors of the ring buffer.
#[derive(Debug, Error)]
pub enum RingError {
    /// `data_pages` is not a power of two.
    #[error("perf ring size must be a power of two data pages, got {data_pages}")]
    NotPowerOfTwo {
        /// The requested count.
        data_pages: usize,
    },
    /// `mmap` of the event failed.
    #[error("mmap of {len} bytes of perf ring failed: {source}")]
    Map {
        /// Bytes requested.
        len: usize,
        /// The cause.
        source: io::Error,
    },
    /// The control page describes a data area outside the mapping.
    #[error("perf mmap page: data area {offset}+{size} does not fit the {len}-byte mapping")]
    BadLayout {
        /// `data_offset`.
        offset: u64,
        /// `data_size`.
        size: u64,
        /// Mapping length.
        len: usize,
    },
    /// A record header is impossible (size below the header or above the unread bytes, or not
    /// a multiple of 8). The reader skips to `data_head`; the skipped bytes are reported here.
    #[error(
        "corrupt perf record at {tail:#x} (head {head:#x}): {reason}; skipped {skipped} bytes"
    )]
    Corrupt {
        /// Where the bad header was.
        tail: u64,
        /// `data_head` at the time.
        head: u64,
        /// What was wrong.
        reason: &'static str,
        /// Bytes skipped to resynchronise.
        skipped: u64,
    },
    /// The clock parameters kept changing while being read.
    #[error("perf mmap page clock parameters did not settle")]
    UnstableClock,
    /// `fstat` of the new event descriptor failed (its identity is kept, see
    /// [`crate::fd_guard`]).
    #[error("identifying the perf event descriptor: {0}")]
    Identity(io::Error),
}

// === impl RawData ===

/// A zero-copy view of bytes in the ring, possibly wrapping around its end.
#[derive(Debug, Clone, Copy)]
pub enum RawData<'a> {
    /// Contiguous bytes.
    Single(&'a [u8]),
    /// Bytes that wrap: the first part ends at the end of the ring, the second starts at 0.
    Split(&'a [u8], &'a [u8]),
}

impl<'a> RawData<'a> {
    /// Number of bytes.
    pub fn len(&self) -> usize {
        match self {
            Self::Single(a) => a.len(),
            Self::Split(a, b) => a.len() + b.len(),
        }
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sub-view `[offset, offset + len)`, still zero-copy.
    pub fn get(&self, offset: usize, len: usize) -> Option<RawData<'a>> {
        let end = offset.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        Some(match *self {
            Self::Single(a) => Self::Single(&a[offset..end]),
            Self::Split(a, b) => {
                if end <= a.len() {
                    Self::Single(&a[offset..end])
                } else if offset >= a.len() {
                    Self::Single(&b[offset - a.len()..end - a.len()])
                } else {
                    Self::Split(&a[offset..], &b[..end - a.len()])
                }
            }
        })
    }

    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Option<()> {
        match self.get(offset, dst.len())? {
            Self::Single(a) => dst.copy_from_slice(a),
            Self::Split(a, b) => {
                dst[..a.len()].copy_from_slice(a);
                dst[a.len()..].copy_from_slice(b);
            }
        }
        Some(())
    }

    /// The bytes `[offset, offset + len)`: borrowed when contiguous, copied when split.
    pub fn bytes(&self, offset: usize, len: usize) -> Option<Cow<'a, [u8]>> {
        Some(match self.get(offset, len)? {
            Self::Single(a) => Cow::Borrowed(a),
            Self::Split(a, b) => {
                let mut v = Vec::with_capacity(len);
                v.extend_from_slice(a);
                v.extend_from_slice(b);
                Cow::Owned(v)
            }
        })
    }

    /// All bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes(0, self.len())
            .map(Cow::into_owned)
            .unwrap_or_default()
    }

    /// The `N` bytes at `offset`. A fixed-size copy, so the common contiguous case is one load,
    /// not a `memcpy` call (those were ~40 instructions per field, 13 % of the capture
    /// thread's time per context switch: `benches/capture.rs`).
    #[inline]
    pub fn array_at<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        match self.get(offset, N)? {
            Self::Single(a) => a.try_into().ok(),
            Self::Split(a, b) => {
                let mut out = [0u8; N];
                for (o, &byte) in out.iter_mut().zip(a.iter().chain(b)) {
                    *o = byte;
                }
                Some(out)
            }
        }
    }

    /// A native-endian `u16` at `offset`.
    #[inline]
    pub fn u16_at(&self, offset: usize) -> Option<u16> {
        self.array_at(offset).map(u16::from_ne_bytes)
    }

    /// A native-endian `u32` at `offset`.
    #[inline]
    pub fn u32_at(&self, offset: usize) -> Option<u32> {
        self.array_at(offset).map(u32::from_ne_bytes)
    }

    /// A native-endian `u64` at `offset`.
    #[inline]
    pub fn u64_at(&self, offset: usize) -> Option<u64> {
        self.array_at(offset).map(u64::from_ne_bytes)
    }
}

/// A sequential reader over a [`RawData`].
#[derive(Debug, Clone)]
pub struct RawCursor<'a> {
    data: RawData<'a>,
    pos: usize,
}

impl<'a> RawCursor<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: RawData<'a>) -> Self {
        Self { data, pos: 0 }
    }

    /// Current offset.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// Reads a `u32`, or `None` at the end.
    pub fn u32(&mut self) -> Option<u32> {
        let v = self.data.u32_at(self.pos)?;
        self.pos += 4;
        Some(v)
    }

    /// Reads a `u64`, or `None` at the end.
    pub fn u64(&mut self) -> Option<u64> {
        let v = self.data.u64_at(self.pos)?;
        self.pos += 8;
        Some(v)
    }

    /// Takes the next `len` bytes as a view.
    pub fn take(&mut self, len: usize) -> Option<RawData<'a>> {
        let v = self.data.get(self.pos, len)?;
        self.pos += len;
        Some(v)
    }

    /// Skips `len` bytes.
    pub fn skip(&mut self, len: usize) -> Option<()> {
        self.take(len).map(drop)
    }
}

// === impl PerfRing ===

/// One mmap'd perf ring (owns the event descriptor and the mapping).
///
/// The mapping stays valid (and the kernel keeps writing into it) even if the traced program
/// closes the descriptor: reading the ring never uses the descriptor, and dropping the ring
/// unmaps it and closes the descriptor only while its number still names the event
/// ([`GuardedFd`]).
#[derive(Debug)]
pub struct PerfRing {
    sys: Arc<dyn Sys>,
    fd: GuardedFd,
    base: NonNull<u8>,
    len: usize,
    data_offset: usize,
    data_size: u64,
}

// SAFETY: the mapping is owned by this value and freed only in Drop. The control page is
// accessed only through atomics, and data bytes only between tail and head, which the kernel
// does not write until we publish a new tail; that needs `&mut self` (via `RingReader`), so moving
// the ring to the capture thread cannot create unsynchronised access.
unsafe impl Send for PerfRing {}

const _: () = {
    assert!(offset_of!(b::perf_event_mmap_page, data_head) % 8 == 0);
    assert!(offset_of!(b::perf_event_mmap_page, data_tail) % 8 == 0);
    assert!(offset_of!(b::perf_event_mmap_page, data_offset) % 8 == 0);
    assert!(offset_of!(b::perf_event_mmap_page, data_size) % 8 == 0);
    assert!(offset_of!(b::perf_event_mmap_page, time_zero) % 8 == 0);
    assert!(offset_of!(b::perf_event_mmap_page, time_mult) % 4 == 0);
    assert!(offset_of!(b::perf_event_mmap_page, time_shift) % 2 == 0);
    assert!(offset_of!(b::perf_event_mmap_page, lock) % 4 == 0);
    assert!(offset_of!(b::perf_event_mmap_page, __bindgen_anon_1) % 8 == 0);
    // The whole control struct fits the smallest page.
    assert!(size_of::<b::perf_event_mmap_page>() <= 4096);
};

impl PerfRing {
    /// Maps `1 + data_pages` pages of the perf event `fd` (`data_pages` a power of two, or 0
    /// for the control page only).
    pub fn map(sys: Arc<dyn Sys>, fd: OwnedFd, data_pages: usize) -> Result<Self, RingError> {
        if data_pages != 0 && !data_pages.is_power_of_two() {
            return Err(RingError::NotPowerOfTwo { data_pages });
        }
        let page = sys.page_size();
        let len = (1 + data_pages) * page;
        let base = sys
            .mmap(fd.as_fd(), len)
            .map_err(|source| RingError::Map { len, source })?;
        let fd = match sys.guard_event(fd) {
            Ok(fd) => fd,
            Err(e) => {
                // SAFETY: the mapping was just made and nothing refers to it.
                let _ = unsafe { sys.munmap(base, len) };
                return Err(RingError::Identity(e));
            }
        };
        let mut ring = Self {
            sys,
            fd,
            base,
            len,
            data_offset: page,
            data_size: (data_pages * page) as u64,
        };
        // ATOMICS: data_offset/data_size are written by the kernel before mmap returns; Relaxed
        // suffices (the mmap syscall orders them before us).
        let offset = ring
            .page_u64(offset_of!(b::perf_event_mmap_page, data_offset))
            .load(Ordering::Relaxed);
        let size = ring
            .page_u64(offset_of!(b::perf_event_mmap_page, data_size))
            .load(Ordering::Relaxed);
        if size != 0 || offset != 0 {
            let fits = offset
                .checked_add(size)
                .is_some_and(|end| end <= len as u64);
            if !fits || (size != 0 && !size.is_power_of_two()) || offset % 8 != 0 {
                return Err(RingError::BadLayout { offset, size, len });
            }
            ring.data_offset = offset as usize;
            ring.data_size = size;
        }
        Ok(ring)
    }

    /// The event's descriptor, unchecked: for `poll`, and for `ioctl`s while the program
    /// cannot have touched it yet (setting up). Later, use [`PerfRing::checked_fd`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the number was this ring's event when it was mapped and is closed only by
        // the ring's drop; if the program closed it meanwhile, polling it is harmless and the
        // caller checks before any other use.
        unsafe { BorrowedFd::borrow_raw(self.fd.raw()) }
    }

    /// The event's descriptor if its number still names the event (the traced program may
    /// have closed it, or reused the number for a file of its own).
    pub fn checked_fd(&self) -> Result<BorrowedFd<'_>, FdLost> {
        self.fd.checked()
    }

    /// The guarded descriptor (its number, identity and status).
    pub fn guarded_fd(&self) -> &GuardedFd {
        &self.fd
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// Bytes written by the kernel and not yet consumed.
    pub fn pending_bytes(&self) -> u64 {
        // ATOMICS: Acquire on the head as everywhere (pairs with the kernel's release); the
        // tail is only written by this process's reader, so Relaxed reads our own value.
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Relaxed);
        head.wrapping_sub(tail)
    }

    /// The page's TSC conversion when `cap_user_time_zero` is set (and the counter is the full
    /// 64-bit TSC, i.e. not `cap_user_time_short`), read as one consistent snapshot.
    pub fn tsc_conversion(&self) -> Result<Option<TscConversion>, RingError> {
        let lock = self.page_u32(offset_of!(b::perf_event_mmap_page, lock));
        let caps = self.page_u64(offset_of!(b::perf_event_mmap_page, __bindgen_anon_1));
        let zero = self.page_u64(offset_of!(b::perf_event_mmap_page, time_zero));
        let mult = self.page_u32(offset_of!(b::perf_event_mmap_page, time_mult));
        // SAFETY: see `page_u64`; time_shift is a u16 field at a 2-aligned offset in the page.
        let shift = unsafe {
            &*self
                .base
                .as_ptr()
                .add(offset_of!(b::perf_event_mmap_page, time_shift))
                .cast::<AtomicU16>()
        };
        for _ in 0..1000 {
            // ATOMICS: seqlock read, see the module notes.
            let seq = lock.load(Ordering::Acquire);
            let snapshot = (
                caps.load(Ordering::Relaxed),
                zero.load(Ordering::Relaxed),
                mult.load(Ordering::Relaxed),
                shift.load(Ordering::Relaxed),
            );
            fence(Ordering::Acquire);
            if seq % 2 == 0 && lock.load(Ordering::Relaxed) == seq {
                let (caps, zero, mult, shift) = snapshot;
                let mut bits = b::perf_event_mmap_page__bindgen_ty_1__bindgen_ty_1::default();
                bits._bitfield_1 = b::__BindgenBitfieldUnit::new(caps.to_ne_bytes());
                if bits.cap_user_time_zero() == 0 || bits.cap_user_time_short() != 0 {
                    return Ok(None);
                }
                return Ok(TscConversion::new(zero, mult, shift));
            }
            std::hint::spin_loop();
        }
        Err(RingError::UnstableClock)
    }

    /// Starts reading the records the kernel has published so far.
    pub fn reader(&mut self) -> RingReader<'_> {
        // ATOMICS: Acquire pairs with the kernel's release store of data_head: every record
        // byte below `head` is visible to the reads that follow.
        let head = self.head().load(Ordering::Acquire);
        // ATOMICS: only this reader writes data_tail, so Relaxed reads back our own value.
        let tail = self.tail().load(Ordering::Relaxed);
        RingReader {
            ring: self,
            head,
            tail,
            published: tail,
        }
    }

    fn page_u64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is the offset of an 8-aligned u64 field of perf_event_mmap_page
        // (checked by the const assertions), the control page is the first page of the live
        // mapping owned by `self`, and it is only ever accessed atomically by us.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn page_u32(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: as `page_u64`, for a 4-aligned u32 field.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    fn head(&self) -> &AtomicU64 {
        self.page_u64(offset_of!(b::perf_event_mmap_page, data_head))
    }

    fn tail(&self) -> &AtomicU64 {
        self.page_u64(offset_of!(b::perf_event_mmap_page, data_tail))
    }

    /// The bytes `[pos, pos + len)` of the data area (ring positions, modulo its size).
    ///
    /// # Safety
    ///
    /// `[pos, pos + len)` must lie between the published `data_tail` and an `Acquire`-loaded
    /// `data_head`, with `len <= data_size`, and the returned view must not outlive the next
    /// publication of a tail beyond it.
    unsafe fn view(&self, pos: u64, len: usize) -> RawData<'_> {
        let size = self.data_size as usize;
        let start = (pos & (self.data_size - 1)) as usize;
        // SAFETY: data_offset + data_size lies within the mapping (checked in `map`); the
        // caller guarantees the kernel does not write these bytes while the view lives.
        unsafe {
            let data = self.base.as_ptr().add(self.data_offset);
            if start + len <= size {
                RawData::Single(std::slice::from_raw_parts(data.add(start), len))
            } else {
                let first = size - start;
                RawData::Split(
                    std::slice::from_raw_parts(data.add(start), first),
                    std::slice::from_raw_parts(data, len - first),
                )
            }
        }
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` is the mapping made in `map`; no view can outlive `self` (they
        // borrow it), so nothing uses it afterwards.
        // A failure (impossible for a mapping we made) would leak the mapping until exit;
        // there is no caller to tell, and nothing to salvage.
        let _ = unsafe { self.sys.munmap(self.base, self.len) };
    }
}

// === impl RingReader ===

/// One record in the ring: its header fields and a view of the bytes after the header.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    /// `header.type` (`PERF_RECORD_*`).
    pub kind: u32,
    /// `header.misc`.
    pub misc: u16,
    /// The record without its 8-byte header.
    pub body: RawData<'a>,
}

/// Reads the records published when it was created; publishes the consumed space when dropped
/// (or at [`RingReader::commit`] / [`RingReader::release_consumed`]).
#[derive(Debug)]
pub struct RingReader<'a> {
    ring: &'a mut PerfRing,
    head: u64,
    tail: u64,
    published: u64,
}

impl RingReader<'_> {
    /// The next record, `None` once every published record was read. After a
    /// [`RingError::Corrupt`] the reader has skipped to the head and returns `None` next.
    pub fn next_record(&mut self) -> Option<Result<RawRecord<'_>, RingError>> {
        let avail = self.head.wrapping_sub(self.tail);
        if avail == 0 {
            return None;
        }
        if avail > self.ring.data_size || avail < HEADER_SIZE as u64 || self.tail % 8 != 0 {
            return Some(Err(
                self.skip_corrupt("unread byte count impossible for this ring")
            ));
        }
        // SAFETY: 8 bytes at tail are below head (avail >= 8) and unpublished.
        let header = unsafe { self.ring.view(self.tail, HEADER_SIZE) };
        let (Some(kind), Some(misc), Some(size)) =
            (header.u32_at(0), header.u16_at(4), header.u16_at(6))
        else {
            return Some(Err(self.skip_corrupt("header unreadable")));
        };
        let size = u64::from(size);
        if size < HEADER_SIZE as u64 || size > avail || size % 8 != 0 {
            return Some(Err(
                self.skip_corrupt("record size outside the unread bytes")
            ));
        }
        let body_pos = self.tail + HEADER_SIZE as u64;
        self.tail += size;
        // SAFETY: the body lies within [old tail, head), which is not published until this
        // reader is dropped or released; the returned view borrows `self`, so it ends before
        // either can happen.
        let body = unsafe { self.ring.view(body_pos, size as usize - HEADER_SIZE) };
        Some(Ok(RawRecord { kind, misc, body }))
    }

    /// Skips every unread byte of the batch after a corrupt header.
    fn skip_corrupt(&mut self, reason: &'static str) -> RingError {
        let err = RingError::Corrupt {
            tail: self.tail,
            head: self.head,
            reason,
            skipped: self.head.wrapping_sub(self.tail),
        };
        self.tail = self.head;
        err
    }

    /// Unread bytes left in this batch.
    pub fn remaining_bytes(&self) -> u64 {
        self.head.wrapping_sub(self.tail)
    }

    /// Publishes the space of the records read so far, so the kernel can reuse it now.
    pub fn release_consumed(&mut self) {
        if self.published != self.tail {
            // ATOMICS: Release orders our reads of the consumed records before the kernel may
            // overwrite them (see the module notes).
            self.ring.tail().store(self.tail, Ordering::Release);
            self.published = self.tail;
        }
    }

    /// Ends the batch, publishing the consumed space (same as dropping it).
    pub fn commit(mut self) {
        self.release_consumed();
    }
}

impl Drop for RingReader<'_> {
    fn drop(&mut self) {
        self.release_consumed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_data_split_reads_across_the_boundary() {
        let a = [1u8, 2, 3];
        let b = [4u8, 5, 6, 7, 8, 9];
        let d = RawData::Split(&a, &b);
        assert_eq!(d.len(), 9);
        assert_eq!(d.to_vec(), vec![1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(
            d.u32_at(1),
            Some(u32::from_ne_bytes([2, 3, 4, 5])),
            "u32 straddling the split"
        );
        assert!(matches!(d.get(0, 2), Some(RawData::Single(&[1, 2]))));
        assert!(matches!(d.get(4, 2), Some(RawData::Single(&[5, 6]))));
        assert!(matches!(d.get(2, 3), Some(RawData::Split(&[3], &[4, 5]))));
        assert!(d.get(8, 2).is_none());
        assert_eq!(
            d.u64_at(1),
            Some(u64::from_ne_bytes([2, 3, 4, 5, 6, 7, 8, 9]))
        );
        assert_eq!(d.u64_at(2), None);
        let mut c = RawCursor::new(d);
        assert!(c.skip(1).is_some());
        assert_eq!(c.take(4).unwrap().to_vec(), vec![2, 3, 4, 5]);
        assert_eq!(c.remaining(), 4);
        assert_eq!(c.u64(), None);
        assert_eq!(c.u32(), Some(u32::from_ne_bytes([6, 7, 8, 9])));
    }
}

//! An in-memory perf for tests: [`FakeSys`] implements [`Sys`] without the kernel.
//!
//! `perf_event_open` returns an `eventfd` (so `poll` works on it) and remembers the attr, pid
//! and cpu; `mmap` hands out a zeroed, page-aligned buffer laid out like a perf mapping (control
//! page with `data_offset`/`data_size` and, if configured, the clock parameters with
//! `cap_user_time_zero`); `ioctl` records enable/disable/`SET_OUTPUT`. A test then plays the
//! kernel through a [`FakeRing`]: it writes records at `data_head` (choosing where head and tail
//! start, e.g. just before the end of the ring so a record wraps), publishes the head with a
//! `Release` store as the kernel does, and wakes `poll`. Failures are injected with
//! [`FakeSys::fail_when`].

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::mem::offset_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use perf_event_open_sys::bindings as b;

use super::attr::{EventAttr, PerfEventKind};
use super::sys::{check_errno, PerfIoctl, Sys};

/// The `sched_waking` format file of this project's 6.18 kernel (a fake tracefs's).
pub const SCHED_WAKING_FORMAT: &str = "name: sched_waking
ID: 375
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;

print fmt: \"comm=%s pid=%d prio=%d target_cpu=%03d\", REC->comm, REC->pid, REC->prio, REC->target_cpu
";

/// A decision on whether a fake `perf_event_open(attr, pid, cpu)` fails (`Some(errno)`).
pub type FailRule = Box<dyn Fn(&EventAttr, i32, i32) -> Option<i32> + Send + Sync>;

// === impl FakeMemory ===

/// A page-aligned zeroed allocation standing in for a perf mapping.
struct FakeMemory {
    ptr: NonNull<u8>,
    layout: Layout,
    page: usize,
}

// SAFETY: the control page is only accessed through atomics; data bytes are written by the
// producer only in the free space beyond `data_head` (checked against an Acquire load of
// `data_tail`) and read by the consumer only below the head it loaded with Acquire, exactly the
// kernel's protocol, so the two sides never access the same bytes unsynchronised.
unsafe impl Send for FakeMemory {}
// SAFETY: as above.
unsafe impl Sync for FakeMemory {}

impl FakeMemory {
    fn new(len: usize, page: usize) -> io::Result<Self> {
        let layout = Layout::from_size_align(len.max(page), page)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Self { ptr, layout, page })
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: callers pass offsets of 8-aligned u64 fields of perf_event_mmap_page, inside
        // the first page of this live allocation, which is only accessed atomically.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn head(&self) -> &AtomicU64 {
        self.u64_at(offset_of!(b::perf_event_mmap_page, data_head))
    }

    fn tail(&self) -> &AtomicU64 {
        self.u64_at(offset_of!(b::perf_event_mmap_page, data_tail))
    }

    fn data_size(&self) -> u64 {
        (self.layout.size() - self.page) as u64
    }
}

impl Drop for FakeMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl fmt::Debug for FakeMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeMemory")
            .field("len", &self.layout.size())
            .finish()
    }
}

// === impl FakeRing ===

/// The producer ("kernel") side of a fake perf ring.
#[derive(Debug, Clone)]
pub struct FakeRing {
    mem: Arc<FakeMemory>,
    wake: Arc<OwnedFd>,
}

impl FakeRing {
    /// Size of the data area.
    pub fn data_size(&self) -> u64 {
        self.mem.data_size()
    }

    /// Current `data_head`.
    pub fn head(&self) -> u64 {
        // ATOMICS: only the producer writes the head; Relaxed reads back our own value.
        self.mem.head().load(Ordering::Relaxed)
    }

    /// Current `data_tail` (published by the reader).
    pub fn tail(&self) -> u64 {
        // ATOMICS: Acquire pairs with the reader's Release store of the tail.
        self.mem.tail().load(Ordering::Acquire)
    }

    /// Moves an empty ring's head and tail to `pos` (to place records across the ring end).
    /// Returns false if the ring holds unread records.
    pub fn set_position(&self, pos: u64) -> bool {
        if self.head() != self.tail() {
            return false;
        }
        // ATOMICS: the ring is empty, so the reader reads no bytes; Release on both keeps any
        // earlier producer writes ordered before the new positions.
        self.mem.tail().store(pos, Ordering::Release);
        self.mem.head().store(pos, Ordering::Release);
        true
    }

    /// Appends raw bytes (a length multiple of 8 is up to the caller) and publishes them:
    /// tests use it to craft corrupt headers. Returns false when the ring lacks room.
    pub fn write_bytes(&self, bytes: &[u8]) -> bool {
        let head = self.head();
        let tail = self.tail();
        let data_size = self.data_size();
        if head.wrapping_sub(tail) + bytes.len() as u64 > data_size {
            return false;
        }
        let start = (head % data_size) as usize;
        let first = bytes.len().min(data_size as usize - start);
        // SAFETY: both destination ranges lie in the data area of the live allocation
        // (start + first <= data_size, the rest from 0), in free space the reader does not
        // read (checked against the Acquire-loaded tail above).
        unsafe {
            let data = self.mem.ptr.as_ptr().add(self.mem.page);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.add(start), first);
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(first), data, bytes.len() - first);
        }
        // ATOMICS: Release publishes the bytes before the new head, as the kernel does.
        self.mem
            .head()
            .store(head + bytes.len() as u64, Ordering::Release);
        true
    }

    /// Appends one record (`header.size = 8 + body.len()`, body padded to 8 bytes) and
    /// publishes it. Returns false, writing nothing, when the ring lacks room — the real
    /// kernel would count it for a later `PERF_RECORD_LOST`.
    pub fn write_record(&self, kind: u32, misc: u16, body: &[u8]) -> bool {
        let padded = body.len().div_ceil(8) * 8;
        let size = 8 + padded;
        let Ok(size16) = u16::try_from(size) else {
            return false;
        };
        let mut bytes = Vec::with_capacity(size);
        bytes.extend_from_slice(&kind.to_ne_bytes());
        bytes.extend_from_slice(&misc.to_ne_bytes());
        bytes.extend_from_slice(&size16.to_ne_bytes());
        bytes.extend_from_slice(body);
        bytes.resize(size, 0);
        self.write_bytes(&bytes)
    }

    /// Wakes a `poll` on the event, as the kernel does at the wakeup watermark.
    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd.
        let ret = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
        // A full eventfd counter (EAGAIN) is still "readable": nothing is lost.
        let _ = check_errno(ret as i64);
    }
}

// === impl FakeSys ===

#[derive(Debug)]
struct FakeEvent {
    attr: EventAttr,
    pid: i32,
    cpu: i32,
    fd: RawFd,
    wake: Arc<OwnedFd>,
    mem: Option<Arc<FakeMemory>>,
    output: Option<usize>,
    enabled: bool,
    live: bool,
    /// What a `read` reports as lost (`PERF_FORMAT_LOST`).
    lost: u64,
    /// Its id (`PERF_EVENT_IOC_ID`): [`FIRST_EVENT_ID`] plus its index, in opening order as the
    /// kernel's.
    id: u64,
}

/// The id of the first event a [`FakeSys`] opens.
pub const FIRST_EVENT_ID: u64 = 1000;

/// What a test can see of a fake event.
#[derive(Debug, Clone)]
pub struct FakeEventInfo {
    /// Its attr.
    pub attr: EventAttr,
    /// `pid` argument.
    pub pid: i32,
    /// `cpu` argument.
    pub cpu: i32,
    /// It was mmapped.
    pub mapped: bool,
    /// It was redirected with `SET_OUTPUT`.
    pub redirected: bool,
    /// Enabled with `ioctl(ENABLE)`.
    pub enabled: bool,
    /// Its id, as `PERF_SAMPLE_IDENTIFIER` writes it.
    pub id: u64,
}

#[derive(Default)]
struct FakeState {
    events: Vec<FakeEvent>,
    by_fd: HashMap<RawFd, usize>,
    fail: Option<FailRule>,
    clock: Option<(u64, u32, u16)>,
    /// `poll` fails with this errno from now on.
    poll_errno: Option<i32>,
}

/// An in-memory [`Sys`] (see the module docs).
pub struct FakeSys {
    state: Mutex<FakeState>,
    page: usize,
}

impl fmt::Debug for FakeSys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("FakeSys")
            .field("events", &state.events.len())
            .field("clock", &state.clock)
            .finish()
    }
}

impl Default for FakeSys {
    fn default() -> Self {
        Self {
            state: Mutex::new(FakeState::default()),
            page: 4096,
        }
    }
}

impl FakeSys {
    /// A fake with 4 KiB pages, no failures, no clock parameters.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `perf_event_open` fail with the errno `rule` returns.
    pub fn fail_when(
        &self,
        rule: impl Fn(&EventAttr, i32, i32) -> Option<i32> + Send + Sync + 'static,
    ) {
        self.lock().fail = Some(Box::new(rule));
    }

    /// Makes every `poll` from now on fail with `errno` (a capture thread that cannot wait).
    pub fn fail_polls(&self, errno: i32) {
        self.lock().poll_errno = Some(errno);
    }

    /// Control pages mapped from now on advertise `cap_user_time_zero` with these parameters.
    pub fn set_clock(&self, time_zero: u64, time_mult: u32, time_shift: u16) {
        self.lock().clock = Some((time_zero, time_mult, time_shift));
    }

    /// Every event opened so far (closed ones included), in open order.
    pub fn events(&self) -> Vec<FakeEventInfo> {
        self.lock()
            .events
            .iter()
            .map(|e| FakeEventInfo {
                attr: e.attr.clone(),
                pid: e.pid,
                cpu: e.cpu,
                mapped: e.mem.is_some(),
                redirected: e.output.is_some(),
                enabled: e.enabled,
                id: e.id,
            })
            .collect()
    }

    /// The mapped ring of the live `kind` event on `cpu` (the first one, if several).
    pub fn ring(&self, kind: PerfEventKind, cpu: i32) -> Option<FakeRing> {
        let state = self.lock();
        state
            .events
            .iter()
            .filter(|e| e.live && e.attr.kind() == kind && e.cpu == cpu)
            .find_map(|e| {
                Some(FakeRing {
                    mem: e.mem.clone()?,
                    wake: e.wake.clone(),
                })
            })
    }

    /// Makes the live `kind` event on `cpu` report `lost` records lost when read (its
    /// `PERF_FORMAT_LOST` count: a ring that filled up with no `PERF_RECORD_LOST` after).
    pub fn set_lost(&self, kind: PerfEventKind, cpu: i32, lost: u64) {
        let mut state = self.lock();
        if let Some(e) = state
            .events
            .iter_mut()
            .find(|e| e.live && e.attr.kind() == kind && e.cpu == cpu)
        {
            e.lost = lost;
        }
    }

    /// The producer side of the mapping of `fd` (from [`Sys::perf_event_open`]).
    pub fn ring_of(&self, fd: BorrowedFd<'_>) -> Option<FakeRing> {
        let state = self.lock();
        let e = &state.events[*state.by_fd.get(&fd.as_raw_fd())?];
        Some(FakeRing {
            mem: e.mem.clone()?,
            wake: e.wake.clone(),
        })
    }

    fn init_control_page(&self, mem: &FakeMemory, clock: Option<(u64, u32, u16)>) {
        let page = mem.page as u64;
        // ATOMICS: the page is not shared yet (mmap has not returned); Relaxed suffices.
        mem.u64_at(offset_of!(b::perf_event_mmap_page, data_offset))
            .store(page, Ordering::Relaxed);
        mem.u64_at(offset_of!(b::perf_event_mmap_page, data_size))
            .store(mem.data_size(), Ordering::Relaxed);
        if let Some((zero, mult, shift)) = clock {
            let mut caps = b::perf_event_mmap_page__bindgen_ty_1__bindgen_ty_1::default();
            caps.set_cap_user_time(1);
            caps.set_cap_user_time_zero(1);
            let mut union = b::perf_event_mmap_page__bindgen_ty_1::default();
            union.__bindgen_anon_1 = caps;
            // SAFETY: both union members are 8 plain bytes; reading the u64 view of the
            // bitfield just written is a reinterpretation of initialised bytes.
            let caps = unsafe { union.capabilities };
            mem.u64_at(offset_of!(b::perf_event_mmap_page, __bindgen_anon_1))
                .store(caps, Ordering::Relaxed);
            mem.u64_at(offset_of!(b::perf_event_mmap_page, time_zero))
                .store(zero, Ordering::Relaxed);
            // SAFETY: time_mult (u32, 4-aligned) and time_shift (u16, 2-aligned) are inside the
            // control page of the live allocation and only accessed atomically.
            unsafe {
                let base = mem.ptr.as_ptr();
                (*base
                    .add(offset_of!(b::perf_event_mmap_page, time_mult))
                    .cast::<AtomicU32>())
                .store(mult, Ordering::Relaxed);
                (*base
                    .add(offset_of!(b::perf_event_mmap_page, time_shift))
                    .cast::<AtomicU16>())
                .store(shift, Ordering::Relaxed);
            }
        }
    }
}

impl Sys for FakeSys {
    fn perf_event_open(
        &self,
        attr: &EventAttr,
        pid: i32,
        cpu: i32,
        _group_fd: Option<BorrowedFd<'_>>,
    ) -> io::Result<OwnedFd> {
        let mut state = self.lock();
        if let Some(errno) = state.fail.as_ref().and_then(|rule| rule(attr, pid, cpu)) {
            return Err(io::Error::from_raw_os_error(errno));
        }
        // SAFETY: eventfd has no memory-safety preconditions.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        let raw = check_errno(i64::from(raw))? as RawFd;
        // SAFETY: `raw` is a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let wake = Arc::new(fd.try_clone()?);
        let index = state.events.len();
        // A reused descriptor number means the previous owner was closed.
        if let Some(old) = state.by_fd.insert(raw, index) {
            state.events[old].live = false;
        }
        state.events.push(FakeEvent {
            attr: attr.clone(),
            pid,
            cpu,
            fd: raw,
            wake,
            mem: None,
            output: None,
            enabled: !attr.disabled(),
            live: true,
            lost: 0,
            id: FIRST_EVENT_ID + index as u64,
        });
        Ok(fd)
    }

    fn ioctl(&self, fd: BorrowedFd<'_>, request: PerfIoctl<'_>) -> io::Result<()> {
        let mut state = self.lock();
        let index = *state
            .by_fd
            .get(&fd.as_raw_fd())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        match request {
            PerfIoctl::Enable => state.events[index].enabled = true,
            PerfIoctl::Disable => state.events[index].enabled = false,
            PerfIoctl::SetOutput(target) => {
                let target = *state
                    .by_fd
                    .get(&target.as_raw_fd())
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
                if state.events[target].cpu != state.events[index].cpu {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL));
                }
                state.events[index].output = Some(target);
            }
        }
        Ok(())
    }

    fn mmap(&self, fd: BorrowedFd<'_>, len: usize) -> io::Result<NonNull<u8>> {
        let mut state = self.lock();
        let index = *state
            .by_fd
            .get(&fd.as_raw_fd())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let data_pages = (len / self.page).saturating_sub(1);
        if len % self.page != 0 || (data_pages != 0 && !data_pages.is_power_of_two()) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let e = &state.events[index];
        if e.attr.inherit() && e.cpu == -1 {
            // The kernel refuses to map inherited per-task events.
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mem = Arc::new(FakeMemory::new(len, self.page)?);
        self.init_control_page(&mem, state.clock);
        let ptr = mem.ptr;
        state.events[index].mem = Some(mem);
        Ok(ptr)
    }

    unsafe fn munmap(&self, addr: NonNull<u8>, _len: usize) -> io::Result<()> {
        let mut state = self.lock();
        let event = state
            .events
            .iter_mut()
            .find(|e| e.mem.as_ref().is_some_and(|m| m.ptr == addr))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // Test-held `FakeRing`s keep the memory alive; the mapping itself is gone.
        event.mem = None;
        event.live = false;
        Ok(())
    }

    fn poll(&self, fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
        if let Some(errno) = self.lock().poll_errno {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let ready = super::sys::RealSys.poll(fds, timeout_ms)?;
        // Emulate perf's wakeup reset: a fake event stops being readable once polled.
        let fake: Vec<RawFd> = {
            let state = self.lock();
            fds.iter()
                .filter(|p| p.revents & libc::POLLIN != 0)
                .filter(|p| {
                    state
                        .by_fd
                        .get(&p.fd)
                        .is_some_and(|&i| state.events[i].fd == p.fd)
                })
                .map(|p| p.fd)
                .collect()
        };
        for fd in fake {
            let mut buf = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a live buffer from a descriptor the caller
            // passed to poll (still open for the duration of this call).
            let ret = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
            // EAGAIN: already reset; nothing else can fail on an eventfd read of 8 bytes.
            let _ = check_errno(ret as i64);
        }
        Ok(ready)
    }

    fn read(&self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
        let state = self.lock();
        let event = state
            .by_fd
            .get(&fd.as_raw_fd())
            .map(|&i| &state.events[i])
            .filter(|e| e.live)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        // The count (always 0 here), then the lost records when asked for.
        let mut words = vec![0u64];
        if event.attr.counts_lost() {
            words.push(event.lost);
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        if buf.len() < bytes.len() {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        buf[..bytes.len()].copy_from_slice(&bytes);
        Ok(bytes.len())
    }

    fn page_size(&self) -> usize {
        self.page
    }

    fn event_id(&self, fd: &crate::fd_guard::GuardedFd) -> Option<u64> {
        let state = self.lock();
        let index = *state.by_fd.get(&fd.raw())?;
        Some(state.events[index].id)
    }
}

/// Builds record bodies for [`FakeRing::write_record`] (native-endian).
#[derive(Debug, Clone, Default)]
pub struct RecordBytes(Vec<u8>);

impl RecordBytes {
    /// An empty body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a `u32`.
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }

    /// Appends a `u64`.
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }

    /// Appends bytes.
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }

    /// Pads with zeros to a multiple of 8.
    pub fn pad8(mut self) -> Self {
        self.0.resize(self.0.len().div_ceil(8) * 8, 0);
        self
    }

    /// Appends a `sample_id` trailer with `TID | TIME | CPU`.
    pub fn sample_id(self, pid: u32, tid: u32, time: u64, cpu: u32) -> Self {
        self.u32(pid).u32(tid).u64(time).u32(cpu).u32(0)
    }

    /// Appends a `sample_id` trailer with `TID | TIME | CPU | IDENTIFIER` (a process capture's
    /// events): `id` is the event's, or for an inherited copy the one it was inherited from.
    pub fn sample_id_of(self, pid: u32, tid: u32, time: u64, cpu: u32, id: u64) -> Self {
        self.sample_id(pid, tid, time, cpu).u64(id)
    }

    /// Current length.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bytes.
    pub fn build(self) -> Vec<u8> {
        self.0
    }
}

impl AsRef<[u8]> for RecordBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl AsFd for FakeRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }
}

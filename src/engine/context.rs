//! The trace context: one trace buffer, its allocators, the buffering mode, and the writers.
//!
//! # Notes on buffering modes
//!
//! (After Fuchsia's `context.cc`, whose protocol this follows; what differs is marked.)
//!
//! Threads and strings are cached to improve performance and reduce buffer usage: a thread or a
//! string is described once by a record in the *durable buffer* and later referred to by a
//! small index. Each thread keeps its own cache, reset when a new trace generation starts.
//!
//! **Oneshot.** The buffer is one rolling buffer; durable records share it. Records are written
//! until it is full; after that every record is dropped and counted.
//!
//! **Circular.** The space after the durable buffer is split into two rolling buffers. Writing
//! starts in buffer 0; when it fills, writing continues in buffer 1, and so on, alternating.
//! The buffer being entered loses its older data, so about half the data is dropped at each
//! switch, but the newest data is always kept. (fxtrace: a writer that was inside the buffer
//! when it was left, and is still there when the buffer is entered again — typically a thread
//! preempted mid-record — is not waited for: the chunk it holds is *pinned* and the new lap's
//! allocations skip it, so its late record lands in a chunk tagged with the old lap, which
//! readers skip like any overwritten data. Waiting instead dropped 20–80% of records with
//! 2–4 writers on 2 busy cores. Stale chunks are not zeroed either: chunk tags tell a reader
//! they are stale, `buffer::header` module docs.)
//!
//! **Streaming.** Like circular, but a buffer that fills is handed to the [`BufferHandler`]
//! (`notify_buffer_full(wrapped_count, durable_data_end)`), which saves it and reports back with
//! [`Context::mark_buffer_saved`]. Writing switches to the other buffer only if it has been
//! saved; otherwise records are dropped (and counted) until it is. `wrapped_count` names the
//! buffer to save (`wrapped_count & 1`); `durable_data_end` says how much durable data must be
//! saved first so that string and thread references resolve.
//!
//! Two properties hold in circular and streaming modes: records describing threads and strings
//! are not dropped while rolling records are (they live in the durable buffer), and thread
//! records are never dropped at all. The durable buffer is not reused; once it fills, tracing
//! stops for this context (every later record is dropped and counted), the header says so
//! (`durable_data_end`,
//! [`FLAG_DURABLE_BUFFER_FULL`](crate::buffer::header::FLAG_DURABLE_BUFFER_FULL)), and
//! [`StopReport::durable_buffer_full`] reports it.
//!
//! # Chunks (fxtrace)
//!
//! A reservation through the allocator takes a chunk (default 16 KiB, at most a quarter of a
//! rolling buffer) for the calling thread, which then bumps a thread-local cursor inside it: the
//! shared atomic is touched once per chunk, not once per record. A chunk belongs to exactly one
//! rolling buffer and one *gate* value (generation and wrapped count); a thread whose chunk no
//! longer matches the gate abandons it and takes a new one. Records never straddle chunks,
//! except a record larger than a chunk, which gets a run of consecutive chunks of its own.
//!
//! # Hand-off (fxtrace; closes the race Fuchsia leaves open)
//!
//! Fuchsia notifies the handler as soon as a buffer is full, while a writer that reserved space
//! just before may still be filling it ("TraceManager prematurely reading the buffer"). Here, in
//! streaming mode, a retired buffer is handed over only after a grace period (`engine::slots`):
//! every writer that was inside a writer section when the switch happened has left it. (Stop
//! waits for the same condition before finalising the header; circular mode does not wait, it
//! pins, see above.) Since a writer re-reads the
//! gate at the start of every section, no one enters the old buffer afterwards; idle threads
//! holding a chunk of it do not delay anything. In streaming mode a second grace period follows
//! the read of `durable_data_end`, so that every durable record below it is complete too. The
//! last writer to leave runs the service routine and the handler is called from there (or from
//! [`Context::service`], [`Context::stop`]).
//!
//! # Writers
//!
//! [`Context::acquire`] returns a [`Writer`]: the thread's writer section. With tracing on, a
//! record costs a thread-local access, two plain stores to the thread's own slot, one load of
//! the read-mostly gate word, a bounds check and the record's own stores. Nothing waits on the
//! record path: full buffers drop and count.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockWriteGuard};
use std::time::{Duration, Instant};

use crossbeam_utils::{Backoff, CachePadded};

use super::allocator::{
    gate_generation, gate_wrapped, make_gate, packed_offset, DurableAllocator, RollingAllocator,
    Taken, GATE_DURABLE_FULL, GATE_STARTED, GENERATION_MASK,
};
use super::category::{context_active, context_inactive, CategoryFilter};
use super::prefault::PrefaultAhead;
use super::slots::{FencePolicy, Fences, Grace, WriterSlots};
use super::writer::{self, Writer};
use crate::buffer::header::{
    make_chunk_tag, with_record_size_words, BufferGeometry, BufferingMode, GeometryError,
    HeaderFields, SharedHeader, HEADER_SIZE, MAX_RECORD_BYTES,
};
use crate::buffer::{BufferError, TraceBuffer};
use crate::format::{Encode, Initialization};
use crate::sys::SysError;

#[path = "handoff.rs"]
mod handoff;
use handoff::{BufferState, Notification, Retirement};

/// Receives streaming save requests. Called from whichever thread completes a hand-off (often
/// the last writer leaving the retired buffer), never with an engine lock held: it may call
/// [`Context::mark_buffer_saved`] directly. It must be quick and must not write trace records
/// (they would be dropped as re-entrant).
pub trait BufferHandler: Send + Sync {
    /// Rolling buffer `wrapped_count & 1` is full and no writer is left in it: save durable
    /// bytes up to `durable_data_end`, then the rolling buffer up to its `rolling_data_end`,
    /// then call [`Context::mark_buffer_saved`] with the same two values.
    fn notify_buffer_full(&self, wrapped_count: u32, durable_data_end: u64);

    /// Writers are getting near the end of what is faulted in ahead of them
    /// (the engine's `prefault` module): have [`Context::prefault_ahead`] called soon, off the record
    /// path. Called on a writer's thread, once per request, possibly in a signal handler, so
    /// it must be async-signal-safe (a wake-up). By default nothing: the writers fault the
    /// buffer's pages as they go.
    fn notify_prefault(&self) {}
}

/// A handler for modes that never notify (oneshot, circular).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHandler;

impl BufferHandler for NoHandler {
    fn notify_buffer_full(&self, _wrapped_count: u32, _durable_data_end: u64) {}
}

/// How much of the buffer a start clears (`trace_start_mode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMode {
    /// Clear durable and rolling buffers (`TRACE_START_CLEAR_ENTIRE_BUFFER` = 1).
    ClearEntire = 1,
    /// Clear the rolling buffers, keep the durable one (`TRACE_START_CLEAR_NONDURABLE_BUFFER`).
    ClearNondurable = 2,
    /// Keep everything and continue (`TRACE_START_RETAIN_BUFFER`).
    Retain = 3,
}

/// `trace_state_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceState {
    /// Not tracing (initial state, and after stop).
    Stopped = 0,
    /// Tracing.
    Started = 1,
    /// Stop requested; waiting for writers to leave.
    Stopping = 2,
}

/// Settings of a context.
#[derive(Debug, Clone, Copy)]
pub struct ContextConfig {
    /// Buffering mode.
    pub mode: BufferingMode,
    /// Requested chunk size in bytes (rounded down to a power of two, at least 64, at most a
    /// quarter of a rolling buffer; see [`chunk_size_for`]).
    pub chunk_size: u64,
    /// Writer threads that can be bound at once; a thread beyond this has its records dropped
    /// (and counted) until another thread exits.
    pub max_writer_threads: usize,
    /// Writer/engine fence pair.
    pub fence: FencePolicy,
}

impl Default for ContextConfig {
    fn default() -> Self {
        Self {
            mode: BufferingMode::Oneshot,
            chunk_size: DEFAULT_CHUNK_SIZE,
            max_writer_threads: DEFAULT_MAX_WRITER_THREADS,
            fence: FencePolicy::Auto,
        }
    }
}

/// Default chunk size: 1 KiB. A thread's first run is one chunk; each later one is twice the
/// last, up to [`MAX_THREAD_RUN`]: a thread that writes a few records and ends leaves at most
/// a chunk unused (a oneshot buffer of 4 MiB holds the records of 4 096 such threads), and a
/// busy thread still touches the shared allocator once per 16 KiB.
pub const DEFAULT_CHUNK_SIZE: u64 = 1024;
/// The largest run, in bytes, a thread takes at once for its own records (a record larger
/// than its run gets a run of its own).
pub const MAX_THREAD_RUN: u64 = 16 * 1024;
/// Smallest chunk size the engine uses.
pub const MIN_ENGINE_CHUNK_SIZE: u64 = 64;
/// [`Context::prefault`] faults the buffer in slices of this many bytes (a few milliseconds
/// each), looking between two whether the trace is still started.
pub(crate) const PREFAULT_SLICE: u64 = 16 << 20;
/// Default writer-thread capacity.
pub const DEFAULT_MAX_WRITER_THREADS: usize = 256;

/// The chunk size a context uses: `requested` rounded down to a power of two, clamped to at
/// least 64 bytes and at most the largest power of two not above a quarter of the rolling
/// buffer (so that even a 4 KiB buffer has several chunks per rolling buffer).
pub fn chunk_size_for(requested: u64, rolling_buffer_size: u64) -> u64 {
    let floor_pow2 = |v: u64| {
        if v == 0 {
            0
        } else {
            1u64 << (63 - v.leading_zeros())
        }
    };
    let cap = floor_pow2(rolling_buffer_size / 4).max(MIN_ENGINE_CHUNK_SIZE);
    floor_pow2(requested.max(MIN_ENGINE_CHUNK_SIZE)).min(cap)
}

/// The most chunks of `chunk` bytes a thread takes at once in rolling buffers of
/// `rolling_buffer_size` bytes: [`MAX_THREAD_RUN`] bytes, at most a quarter of a rolling
/// buffer, at least one chunk.
pub(crate) fn thread_run_chunks(chunk: u64, rolling_buffer_size: u64) -> u64 {
    (MAX_THREAD_RUN.min(rolling_buffer_size / 4) / chunk.max(1)).max(1)
}

/// Errors of context operations.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The buffer could not be used.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// The buffer size does not allow a geometry.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// A memory-fence system call failed (the hand-off cannot be proven safe).
    #[error(transparent)]
    Fence(#[from] SysError),
    /// The operation is not valid in the current state.
    #[error("{op} is not valid while the trace is {state:?}")]
    BadState {
        /// The operation.
        op: &'static str,
        /// The state it found.
        state: TraceState,
    },
    /// Writers still in flight when the stop timeout expired; call `stop` again.
    #[error("stop timed out with {writers_in_flight} writer(s) still in flight")]
    StopTimedOut {
        /// Writers the stop is still waiting for.
        writers_in_flight: usize,
    },
    /// `stop` was called by a thread holding a [`Writer`] of this context.
    #[error("stop called from inside a writer section of the same context")]
    StopFromWriter,
    /// `mark_buffer_saved` outside streaming mode.
    #[error("mark_buffer_saved is only valid in streaming mode")]
    NotStreaming,
    /// `mark_buffer_saved` for a buffer that is not waiting to be saved.
    #[error("buffer of wrapped count {wrapped_count} is not waiting to be saved")]
    NotAwaitingSave {
        /// The wrapped count given.
        wrapped_count: u32,
    },
}

/// What a stop leaves in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopReport {
    /// Header `wrapped_count`.
    pub wrapped_count: u32,
    /// Header `durable_data_end`.
    pub durable_data_end: u64,
    /// Header `rolling_data_end`.
    pub rolling_data_end: [u64; 2],
    /// Header `num_records_dropped`: records dropped during this trace.
    pub records_dropped: u64,
    /// Whether the durable buffer filled (and stopped tracing early).
    pub durable_buffer_full: bool,
}

/// Counters of a running or stopped context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineStats {
    /// Records dropped during the current (or last) trace.
    pub records_dropped: u64,
    /// Current wrapped count.
    pub wrapped_count: u32,
    /// Whether the durable buffer is full.
    pub durable_buffer_full: bool,
    /// Writer slots ever used.
    pub writer_threads: usize,
    /// Whether the membarrier fence pair is in use.
    pub membarrier: bool,
}

// === state under the switch mutex ===

#[derive(Debug)]
struct State {
    phase: TraceState,
    generation: u32,
    /// Full wrapped count of the buffer being written.
    wrapped_count: u32,
    buffers: [BufferState; 2],
    retirement: Option<Retirement>,
    /// Grace period of the pending retirement.
    grace: Grace,
    /// Grace period of a stop in progress.
    stop_grace: Grace,
    /// Whether `stop_grace` was taken after a successful heavy fence.
    stop_grace_taken: bool,
    /// Smallest durable offset whose reservation failed.
    durable_full_at: Option<u64>,
    oneshot_full: bool,
    /// Raw drop total at the last clearing start.
    dropped_base: u64,
    /// `Inner::early_drops` at the same point: what the header's `dropped_before_start` counts
    /// from.
    early_base: u64,
    /// Whether anything may have been written since the data area was last zeroed.
    dirty: bool,
    categories: Arc<CategoryFilter>,
    last_fence_error: Option<String>,
    /// Set by [`Context::arm`] while a start is expected; taken by the start.
    armed: Option<Armed>,
}

/// A context that expects a start ([`Context::arm`]): calls before it are counted as dropped
/// records of the trace that start begins.
#[derive(Debug)]
struct Armed {
    /// Raw drop total when armed: the start takes it as its base, so the drops counted while
    /// armed belong to the trace it begins.
    dropped_base: u64,
    /// `Inner::early_drops` when armed, likewise.
    early_base: u64,
}

static NEXT_CONTEXT_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_GENERATION: AtomicU32 = AtomicU32::new(1);

/// Rules: the generation of the trace started last in the process (by any context), 0 before
/// the first start; written by each start, under its context's switch mutex.
/// ATOMICS: `Relaxed`: a hint for the begin of a span (`latest_generation`), which takes a
/// timestamp when its cached answer is for this generation; the record at the span's end is
/// written only if that generation is still running, checked in a writer section.
static LATEST_GENERATION: AtomicU32 = AtomicU32::new(0);

/// The generation of the trace started last in the process (a hint: see
/// [`LATEST_GENERATION`]).
#[inline(always)]
pub(crate) fn latest_generation() -> u32 {
    // ATOMICS: see `LATEST_GENERATION`.
    LATEST_GENERATION.load(Ordering::Relaxed)
}

fn next_generation() -> u32 {
    loop {
        // ATOMICS: `Relaxed`: a unique counter (Fuchsia's `g_next_generation`).
        let generation = NEXT_GENERATION
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        if generation & GENERATION_MASK != 0 {
            return generation & GENERATION_MASK;
        }
    }
}

/// The shared part of a context.
pub(crate) struct Inner {
    /// Rules: unique per context, never reused; immutable. Thread-local writer state is keyed
    /// by it.
    pub(crate) id: u64,
    /// Rules: the gate. Written only under the switch mutex (start, stop, switch, durable full);
    /// read by every writer at the start of each section and on chunk refills.
    /// ATOMICS: stores `Release` (after the state they describe: zeroed buffers, reset
    /// allocators); writer loads `Acquire` after the announcement and the light fence; the
    /// heavy fence in every grace period orders the store before the scan.
    pub(crate) gate: CachePadded<AtomicU64>,
    pub(crate) rolling: RollingAllocator,
    pub(crate) durable: DurableAllocator,
    pub(crate) fences: Fences,
    /// The writer slots. Shared with the leases of the threads that use them, so that a slot
    /// stays valid memory for as long as a thread may still announce itself in it (the
    /// installed context's path announces before it knows the context is alive: see
    /// `writer::with_installed_writer`).
    pub(crate) slots: Arc<WriterSlots>,
    /// Rules: drops that no writer slot can take (re-entrant attempts, threads without a slot);
    /// `fetch_add` by any thread.
    /// ATOMICS: `Relaxed` counter; exact at stop because those attempts happen before the stop
    /// grace period's `Acquire` scan or not at all (tracing off).
    pub(crate) unslotted_drops: CachePadded<AtomicU64>,
    /// Rules: of `unslotted_drops`, the calls [`Self::count_call_before_start`] counted
    /// (before a start, or racing with one); `fetch_add` by any thread.
    /// ATOMICS: `Relaxed` counter, as `unslotted_drops`.
    early_drops: AtomicU64,
    /// Rules: mirrors `State::armed.is_some()`; written under the switch mutex, read by calls
    /// that found the trace not started, to decide whether to count them.
    /// ATOMICS: `Relaxed`: a hint; a call racing with `arm` or the start may miss it, as a
    /// call racing with a start may miss the trace.
    armed: AtomicBool,
    /// Rules: the categories the coming trace enables while armed (a call of another category
    /// is not an event of that trace, so it is not counted); `None` otherwise. Written under
    /// the switch mutex (arm, the start, disarm); read by the counting calls, which never take
    /// the switch mutex: a start must not wait behind threads calling in a loop (the lock is
    /// write-preferring, so it does not).
    armed_categories: RwLock<Option<Arc<CategoryFilter>>>,
    /// Rules (streaming): `ready[i]` mirrors `buffers[i] == Ready`; written under the switch
    /// mutex (a switch stores `false` for the new buffer only after resetting the allocator
    /// word), read by writers that found their buffer full, to drop without taking the mutex.
    /// ATOMICS: `Release` / `Acquire` (a hint only; the switch re-checks under the mutex).
    ready: [AtomicBool; 2],
    /// Rules: next string index (1..=0x7FFF); `fetch_add` by registering threads; reset on a
    /// clearing start. ATOMICS: `Relaxed` unique counter.
    string_index: AtomicU32,
    /// Rules: next thread index (1..=0xFF); as `string_index`.
    thread_index: AtomicU32,
    pub(crate) mode: BufferingMode,
    geometry: BufferGeometry,
    /// Rules: the switch mutex (Fuchsia's `buffer_switch_mutex_`). Everything in `State`, and
    /// every header store, happens under it: start, stop, switches, full marks, saves and the
    /// service routine. Taken off the record path only (buffer full, hand-off report). No
    /// handler call is made while it is held.
    state: Mutex<State>,
    /// Rules: held by whoever hands a full buffer to the handler (`notify_buffer_full`),
    /// taken while `state` is still held and released after the call. A stop takes it too,
    /// under `state`, once it has finished: so a hand-off taken by a writer just before the
    /// stop is delivered before the stop returns (and before the provider says STOPPED), never
    /// after, where a manager would take it for the next trace's.
    delivering: Mutex<()>,
    pub(crate) handler: Arc<dyn BufferHandler>,
    /// Where the buffer is faulted in ahead of the writers (reset by every start).
    pub(crate) prefault_ahead: PrefaultAhead,
    pub(crate) buffer: TraceBuffer,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("id", &self.id)
            .field("mode", &self.mode)
            .field("geometry", &self.geometry)
            .field("chunk_size", &self.rolling.chunk_size())
            .finish_non_exhaustive()
    }
}

/// A trace context: the buffer, the allocators and the state machine of one provider's trace.
/// Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

impl Context {
    /// Take over `buffer`: compute the geometry for `config.mode`, zero the data area, write the
    /// header (`InitBufferHeader` plus the fxtrace chunk size). The trace is stopped until
    /// [`Self::start`].
    pub fn new(
        buffer: TraceBuffer,
        config: ContextConfig,
        handler: Arc<dyn BufferHandler>,
    ) -> Result<Self, EngineError> {
        let geometry = BufferGeometry::compute(config.mode, buffer.size())?;
        let chunk = chunk_size_for(config.chunk_size, geometry.rolling_buffer_size);
        buffer.zero_range(HEADER_SIZE, buffer.size() - HEADER_SIZE)?;
        buffer
            .header()
            .store(&HeaderFields::initial(&geometry, chunk));

        let base = buffer.as_ptr();
        // SAFETY: the geometry's offsets lie inside the mapping (they sum to its size).
        let at = |offset: u64| unsafe { base.add(offset as usize) };
        let rolling_starts = match config.mode {
            BufferingMode::Oneshot => [at(geometry.rolling_offset(0)), std::ptr::null_mut()],
            _ => [
                at(geometry.rolling_offset(0)),
                at(geometry.rolling_offset(1)),
            ],
        };
        let slots = config.max_writer_threads.max(1);
        let inner = Inner {
            // ATOMICS: `Relaxed`: a unique counter.
            id: NEXT_CONTEXT_ID.fetch_add(1, Ordering::Relaxed),
            gate: CachePadded::new(AtomicU64::new(0)),
            rolling: RollingAllocator::new(
                rolling_starts,
                geometry.rolling_buffer_size,
                chunk,
                &buffer.header().rolling_position,
            ),
            durable: DurableAllocator::new(
                at(geometry.durable_offset()),
                geometry.durable_buffer_size,
                &buffer.header().durable_position,
            ),
            fences: Fences::new(config.fence),
            slots: Arc::new(WriterSlots::new(slots)),
            unslotted_drops: CachePadded::new(AtomicU64::new(0)),
            early_drops: AtomicU64::new(0),
            armed: AtomicBool::new(false),
            armed_categories: RwLock::new(None),
            ready: [AtomicBool::new(false), AtomicBool::new(true)],
            string_index: AtomicU32::new(1),
            thread_index: AtomicU32::new(1),
            mode: config.mode,
            geometry,
            delivering: Mutex::new(()),
            state: Mutex::new(State {
                phase: TraceState::Stopped,
                generation: 0,
                wrapped_count: 0,
                buffers: [BufferState::Current, BufferState::Ready],
                retirement: None,
                grace: Grace::with_capacity(slots),
                stop_grace: Grace::with_capacity(slots),
                stop_grace_taken: false,
                durable_full_at: None,
                oneshot_full: false,
                dropped_base: 0,
                early_base: 0,
                dirty: false,
                categories: Arc::new(CategoryFilter::all()),
                last_fence_error: None,
                armed: None,
            }),
            handler,
            prefault_ahead: PrefaultAhead::new(),
            buffer,
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// A reference that does not keep the context alive (for a handler that must call
    /// [`Self::mark_buffer_saved`] without creating a reference cycle).
    pub fn downgrade(&self) -> WeakContext {
        WeakContext {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Enter a writer section on the calling thread, or `None` if tracing is off (not counted,
    /// unless the context is armed: [`Self::arm`]) or the attempt must be dropped (counted: re-entrant call from the same thread, or no
    /// writer slot free). Dropping the [`Writer`] leaves the section.
    #[inline]
    pub fn acquire(&self) -> Option<Writer<'_>> {
        writer::acquire(&self.inner)
    }

    /// Expect a start: the provider was initialized for a trace of `categories` that has not
    /// started yet (Fuchsia's "initialized" state). Until the start, every event call that
    /// finds this context installed, and every direct [`Self::acquire`], of an enabled
    /// category is counted as a dropped record of the trace that start begins (reported in
    /// its `num_records_dropped`) instead of being lost without a trace. Valid only while
    /// stopped; arming an armed context replaces its categories.
    pub fn arm(&self, categories: CategoryFilter) -> Result<(), EngineError> {
        let inner = &*self.inner;
        let mut st = inner.lock();
        if st.phase != TraceState::Stopped {
            return Err(EngineError::BadState {
                op: "arm",
                state: st.phase,
            });
        }
        *inner.armed_categories_mut() = Some(Arc::new(categories));
        match &mut st.armed {
            Some(_) => {}
            None => {
                st.armed = Some(Armed {
                    dropped_base: inner.raw_dropped(),
                    early_base: inner.early_drops(),
                });
                // ATOMICS: `Relaxed`: see `Inner::armed`; call sites reach the context (and
                // count) once `category::tracing_maybe_on` says so.
                inner.armed.store(true, Ordering::Relaxed);
                context_active();
            }
        }
        Ok(())
    }

    /// No start is coming after all (the session stopped or ended first): leave the state
    /// [`Self::arm`] entered. Returns the calls counted as dropped while armed (0 when not
    /// armed).
    pub fn disarm(&self) -> u64 {
        let inner = &*self.inner;
        let mut st = inner.lock();
        inner.disarm(&mut st)
    }

    /// Fault the whole buffer in, off the record path: a first pass over a fresh buffer
    /// otherwise pays a page fault per page (up to +50 % per record). Call it after a start,
    /// once the caller has said the trace started: writers write meanwhile (this changes no
    /// byte), and a buffer of 1 GiB takes a few hundred milliseconds, in slices of
    /// 16 MiB; it gives up as soon as the trace is no longer started. Best
    /// effort: on failure (no memory for the whole buffer now) the writers fault pages in as
    /// they go. Returns the bytes faulted in.
    pub fn prefault(&self) -> u64 {
        // ATOMICS: `Relaxed`: only a hint to stop early; a stale value costs one slice.
        self.prefault_trace(gate_generation(self.inner.gate.load(Ordering::Relaxed)))
    }

    /// [`Self::prefault`] for the trace of generation `trace`: it stops when that one does (a
    /// later start has a prefault of its own). Faulting a page in changes no byte, so a slice
    /// that overlaps the next start's zeroing leaves the buffer as that zeroing makes it.
    fn prefault_trace(&self, trace: u32) -> u64 {
        let inner = &*self.inner;
        let size = inner.buffer.size();
        let mut offset = 0;
        while offset < size {
            // ATOMICS: `Relaxed`: only a hint to stop early; a stale value costs one slice.
            let gate = inner.gate.load(Ordering::Relaxed);
            if gate & GATE_STARTED == 0 || gate_generation(gate) != trace {
                break;
            }
            let len = PREFAULT_SLICE.min(size - offset);
            if inner.buffer.prefault(offset, len).is_err() {
                break;
            }
            offset += len;
        }
        offset
    }

    /// Fault in the next slice of the buffer ahead of its writers (the engine's `prefault` module), if
    /// the trace runs and a writer asked for more ([`BufferHandler::notify_prefault`]). Call
    /// it off the record path, again while it returns `true` (a slice is a fraction of a
    /// millisecond, so the caller can answer other work between two). Best effort: a slice
    /// that cannot be faulted in now is left to the writers.
    pub fn prefault_ahead(&self) -> bool {
        let inner = &*self.inner;
        // ATOMICS: `Relaxed`: only a hint to stop early; a stale value costs one slice.
        if inner.gate.load(Ordering::Relaxed) & GATE_STARTED == 0 {
            return false;
        }
        let limit = inner.buffer.size();
        let Some(slice) = inner.prefault_ahead.next_slice(limit) else {
            return false;
        };
        let _ = inner.buffer.prefault(slice.from, slice.to - slice.from);
        inner.prefault_ahead.advanced(slice, limit)
    }

    /// Start tracing. Valid only while stopped. Writes no record: a trace that readers decode
    /// needs its initialization record first, which [`Self::start_with_initialization`] (or
    /// [`super::record::start_trace`]) writes before any other thread can write.
    pub fn start(&self, mode: StartMode, categories: CategoryFilter) -> Result<(), EngineError> {
        self.start_inner(mode, categories, None).map(drop)
    }

    /// Start tracing like [`Self::start`], and write the initialization record
    /// (`ticks_per_second`) as the first record of the trace *before* the gate that lets
    /// writers in opens, so no other thread's record can precede it: at offset 0 of the
    /// durable buffer (circular, streaming), or in the first chunk of the rolling buffer
    /// (oneshot; the rest of that chunk becomes the calling thread's chunk when it can write
    /// to this context).
    ///
    /// The record is written at every clearing start, as Fuchsia's `trace_engine_start` does
    /// ([`StartMode::ClearNondurable`] appends it to the kept durable records, ahead of every
    /// record of the new trace), and at a first start whatever the mode; a
    /// [`StartMode::Retain`] start of a trace that has data keeps the record written earlier.
    /// Returns whether a record was written; `false` also when there was no room (the durable
    /// buffer is full), which is counted as a dropped record.
    pub fn start_with_initialization(
        &self,
        mode: StartMode,
        categories: CategoryFilter,
        ticks_per_second: u64,
    ) -> Result<bool, EngineError> {
        self.start_inner(mode, categories, Some(ticks_per_second))
    }

    fn start_inner(
        &self,
        mode: StartMode,
        categories: CategoryFilter,
        ticks_per_second: Option<u64>,
    ) -> Result<bool, EngineError> {
        let inner = &*self.inner;
        let mut st = inner.lock();
        if st.phase != TraceState::Stopped {
            return Err(EngineError::BadState {
                op: "start",
                state: st.phase,
            });
        }
        let header = inner.buffer.header();
        if st.armed.is_some() {
            // From here until the gate opens every call counts, whatever its category.
            *inner.armed_categories_mut() = None;
        }
        let raw_dropped = inner.raw_dropped();
        // The calls an armed context counted since `arm` are drops of the trace this start
        // begins; those counted from here on are too (they stay above its base).
        let (raw_dropped, dropped_before_start, early_base) = match &st.armed {
            Some(armed) => (
                armed.dropped_base,
                raw_dropped.saturating_sub(armed.dropped_base),
                armed.early_base,
            ),
            None => (raw_dropped, 0, inner.early_drops()),
        };
        match mode {
            StartMode::ClearEntire => {
                if st.dirty {
                    inner
                        .buffer
                        .zero_range(HEADER_SIZE, inner.geometry.total_size - HEADER_SIZE)?;
                }
                header.store(&HeaderFields::initial(
                    &inner.geometry,
                    inner.rolling.chunk_size(),
                ));
                inner.durable.reset();
                st.durable_full_at = None;
                // ATOMICS: `Relaxed`: while stopped; published by the start's gate store.
                inner.string_index.store(1, Ordering::Relaxed);
                inner.thread_index.store(1, Ordering::Relaxed);
                inner.reset_rolling(&mut st)?;
                st.dropped_base = raw_dropped;
                st.early_base = early_base;
                header.store_dropped_at_start(dropped_before_start);
            }
            StartMode::ClearNondurable => {
                inner.reset_rolling(&mut st)?;
                st.dropped_base = raw_dropped;
                st.early_base = early_base;
                header.store_dropped_at_start(dropped_before_start);
            }
            StartMode::Retain => {}
        }
        // While tracing, the current buffer's end and the durable end read 0 ("being
        // written"): a reader after a crash scans them whole instead of trusting a stale end.
        let current = (st.wrapped_count & 1) as usize;
        // ATOMICS: `Release` header stores, for the manager.
        header.rolling_data_end[current].store(0, Ordering::Release);
        if st.durable_full_at.is_none() {
            header.durable_data_end.store(0, Ordering::Release);
        }
        st.dirty = true;
        st.generation = next_generation();
        // ATOMICS: see `LATEST_GENERATION`.
        LATEST_GENERATION.store(st.generation, Ordering::Relaxed);
        st.categories = Arc::new(categories);
        st.phase = TraceState::Started;
        inner.prefault_ahead.reset(inner.geometry.rolling_offset(0));
        let flags = GATE_STARTED
            | if st.durable_full_at.is_some() {
                GATE_DURABLE_FULL
            } else {
                0
            };
        let gate = make_gate(st.generation, st.wrapped_count, flags);
        // Still closed to every writer: the leading record goes first.
        let leading = match ticks_per_second {
            Some(ticks_per_second) if st.durable_full_at.is_none() => {
                self.write_leading(&Initialization { ticks_per_second }, mode, gate)
            }
            // The durable buffer is full: a retained trace keeps its record, any other start
            // loses the new one, counted like any record that found no room.
            Some(_) if mode != StartMode::Retain => {
                inner.count_unslotted_drop();
                false
            }
            _ => false,
        };
        if st.armed.take().is_some() {
            // Armed, it already counts as active.
            // ATOMICS: `Relaxed`: see `Inner::armed`.
            inner.armed.store(false, Ordering::Relaxed);
        } else {
            // A hint for call sites (see `category`).
            context_active();
        }
        // ATOMICS: `Release`: zeroed buffers, reset allocators and the leading record
        // happen-before any writer that sees the started gate.
        inner.gate.store(gate, Ordering::Release);
        Ok(leading)
    }

    /// Write `record` as the first record of the trace while the gate is still closed (under
    /// the switch mutex, from [`Self::start_inner`]), unless `mode` retains a trace that
    /// already has data (and so its record).
    fn write_leading(&self, record: &Initialization, mode: StartMode, gate: u64) -> bool {
        const WORDS: usize = 2;
        let mut words = [0u64; WORDS];
        if record.words() != Ok(WORDS) || record.write(&mut words) != Ok(WORDS) {
            return false;
        }
        let header_word = with_record_size_words(words[0], WORDS as u64);
        let inner = &*self.inner;
        // Where the record goes: `(record, end of the space it may use)`.
        let (at, end) = if inner.mode == BufferingMode::Oneshot {
            if packed_offset(inner.rolling.load()) != 0 {
                return false; // a retained trace: its first chunk already leads
            }
            let run = match inner.rolling.take_run(1, gate, &inner.gate) {
                Taken::Run(run) if run.bytes() >= (WORDS + 2) * 8 => run,
                _ => {
                    inner.count_unslotted_drop();
                    return false;
                }
            };
            let tag = make_chunk_tag(gate_wrapped(run.gate), 1);
            // ATOMICS: `Relaxed`: published with the record by the start's `Release` gate
            // store (no writer runs before it; the manager reads after STARTED or stop).
            // SAFETY: the run is ours (the allocator handed it out), 8-aligned, and at least
            // four words long (checked above).
            unsafe { AtomicU64::from_ptr(run.start) }.store(tag, Ordering::Relaxed);
            // SAFETY: inside the run, see above.
            (unsafe { run.start.add(1) }, run.end)
        } else {
            if mode == StartMode::Retain && inner.durable.allocated() != 0 {
                return false; // the durable buffer keeps the record of an earlier start
            }
            match inner.durable.reserve(WORDS as u64 * 8) {
                // SAFETY: the reservation holds `WORDS` words.
                Ok(at) => (at, unsafe { at.add(WORDS) }),
                Err(_) => {
                    inner.count_unslotted_drop();
                    return false;
                }
            }
        };
        for (i, &word) in words.iter().enumerate().skip(1) {
            // ATOMICS: `Relaxed`: published by the header's `Release` store below.
            // SAFETY: `at..at + WORDS` is reserved for this record (see above).
            unsafe { AtomicU64::from_ptr(at.add(i)) }.store(word, Ordering::Relaxed);
        }
        // SAFETY: `at + WORDS <= end`, inside the reservation.
        let next = unsafe { at.add(WORDS) };
        if next < end {
            // The terminator of the chunk's records (a chunk starts zeroed only after a clear).
            // ATOMICS: `Relaxed`, as the body.
            // SAFETY: `next` is inside the run.
            unsafe { AtomicU64::from_ptr(next) }.store(0, Ordering::Relaxed);
        }
        // ATOMICS: `Release`: a reader that sees the header sees the body.
        // SAFETY: `at` is the reserved record's first word.
        unsafe { AtomicU64::from_ptr(at) }.store(header_word, Ordering::Release);
        if inner.mode == BufferingMode::Oneshot {
            writer::adopt_chunk(&self.inner, next, end, gate);
        }
        true
    }

    /// Stop tracing: close the gate, wait (up to `timeout`) until no writer is in flight, then
    /// write `durable_data_end`, `rolling_data_end[]`, `wrapped_count` and
    /// `num_records_dropped` into the header. On [`EngineError::StopTimedOut`] the context stays
    /// `Stopping`; call `stop` again to keep waiting.
    pub fn stop(&self, timeout: Duration) -> Result<StopReport, EngineError> {
        let inner = &*self.inner;
        if writer::in_section_of(inner) {
            return Err(EngineError::StopFromWriter);
        }
        {
            let mut st = inner.lock();
            match st.phase {
                TraceState::Stopped => {
                    return Err(EngineError::BadState {
                        op: "stop",
                        state: st.phase,
                    })
                }
                TraceState::Started => {
                    let gate = make_gate(st.generation, st.wrapped_count, 0);
                    // ATOMICS: `Release`; ordered before the scan by the heavy fence.
                    inner.gate.store(gate, Ordering::Release);
                    st.phase = TraceState::Stopping;
                    st.stop_grace_taken = false;
                }
                TraceState::Stopping => {}
            }
            if !st.stop_grace_taken {
                // A snapshot taken without a successful heavy fence proves nothing: retake it
                // on the next call if the fence fails.
                let State { stop_grace, .. } = &mut *st;
                inner.slots.begin_grace(inner.fences, stop_grace, false)?;
                st.stop_grace_taken = true;
            }
        }
        let deadline = Instant::now() + timeout;
        let backoff = Backoff::new();
        loop {
            let (report, notification, turn) = {
                let mut st = inner.lock();
                let State { stop_grace, .. } = &mut *st;
                if inner.slots.is_grace_complete(stop_grace) {
                    let (report, notification) = inner.finish_stop(&mut st);
                    // Waits for a writer's hand-off in progress (see `delivering`).
                    (Some(report), notification, Some(inner.delivery_turn()))
                } else if Instant::now() >= deadline {
                    let writers_in_flight = inner.slots.in_flight(&st.stop_grace);
                    return Err(EngineError::StopTimedOut { writers_in_flight });
                } else {
                    (None, None, None)
                }
            };
            inner.deliver(notification);
            drop(turn);
            if let Some(report) = report {
                return Ok(report);
            }
            if backoff.is_completed() {
                std::thread::sleep(Duration::from_micros(200));
            } else {
                backoff.snooze();
            }
        }
    }

    /// Streaming: the handler saved the buffer of `wrapped_count`; it may be written again.
    /// (`durable_data_end` is accepted for symmetry with the protocol and not used.)
    pub fn mark_buffer_saved(
        &self,
        wrapped_count: u32,
        durable_data_end: u64,
    ) -> Result<(), EngineError> {
        let _ = durable_data_end;
        let inner = &*self.inner;
        if inner.mode != BufferingMode::Streaming {
            return Err(EngineError::NotStreaming);
        }
        let mut st = inner.lock();
        let buffer = (wrapped_count & 1) as usize;
        match st.buffers[buffer] {
            BufferState::AwaitingSave {
                wrapped_count: awaited,
            } if awaited == wrapped_count => {
                st.buffers[buffer] = BufferState::Ready;
                // ATOMICS: `Release` for the header (manager side) and the ready hint.
                inner.buffer.header().rolling_data_end[buffer].store(0, Ordering::Release);
                inner.ready[buffer].store(true, Ordering::Release);
                Ok(())
            }
            _ => Err(EngineError::NotAwaitingSave { wrapped_count }),
        }
    }

    /// Complete a pending hand-off if its writers have finished (normally done by the last
    /// writer leaving; a provider loop may call this too). Returns whether a hand-off is still
    /// pending.
    pub fn service(&self) -> bool {
        self.inner.service()
    }

    /// Current state.
    pub fn state(&self) -> TraceState {
        self.inner.lock().phase
    }

    /// Generation of the current (or last) trace: per-thread caches reset when it changes.
    /// Unique within the process (never 0).
    pub fn generation(&self) -> u32 {
        self.inner.lock().generation
    }

    /// Buffering mode.
    pub fn mode(&self) -> BufferingMode {
        self.inner.mode
    }

    /// Geometry of the buffer.
    pub fn geometry(&self) -> BufferGeometry {
        self.inner.geometry
    }

    /// Chunk size in use (also in the header's `reserved[0]`).
    pub fn chunk_size(&self) -> u64 {
        self.inner.rolling.chunk_size()
    }

    /// The trace buffer (for its fd and header).
    pub fn buffer(&self) -> &TraceBuffer {
        &self.inner.buffer
    }

    /// Records dropped during the current (or last) trace.
    pub fn records_dropped(&self) -> u64 {
        let base = self.inner.lock().dropped_base;
        self.inner.raw_dropped() - base
    }

    /// Counters.
    pub fn stats(&self) -> EngineStats {
        let inner = &*self.inner;
        let st = inner.lock();
        EngineStats {
            records_dropped: inner.raw_dropped() - st.dropped_base,
            wrapped_count: st.wrapped_count,
            durable_buffer_full: st.durable_full_at.is_some(),
            writer_threads: inner.slots.high_water(),
            membarrier: inner.fences.uses_membarrier(),
        }
    }

    /// The last fence failure, if any (a failure blocks hand-offs until a later call succeeds).
    pub fn last_fence_error(&self) -> Option<String> {
        self.inner.lock().last_fence_error.clone()
    }

    /// Allocate a string index (1..=0x7FFF, never reused within a trace); `None` when
    /// exhausted: write the string inline.
    pub fn alloc_string_index(&self) -> Option<u16> {
        // ATOMICS: `Relaxed` unique counter.
        let index = self.inner.string_index.fetch_add(1, Ordering::Relaxed);
        (index <= 0x7fff).then_some(index as u16)
    }

    /// Allocate a thread index (1..=0xFF); `None` when exhausted: write the thread inline.
    pub fn alloc_thread_index(&self) -> Option<u8> {
        // ATOMICS: `Relaxed` unique counter.
        let index = self.inner.thread_index.fetch_add(1, Ordering::Relaxed);
        (index <= 0xff).then_some(index as u8)
    }

    /// Whether `category` is enabled in the current trace (uncached; see
    /// [`super::category::CallSite`] for the cached form).
    pub fn is_category_enabled(&self, category: &str) -> bool {
        let inner = &*self.inner;
        // ATOMICS: `Relaxed`: a snapshot answer, like any category check.
        if inner.gate.load(Ordering::Relaxed) & GATE_STARTED == 0 {
            return false;
        }
        inner.lock().categories.is_enabled(category)
    }

    /// Largest record in bytes the engine accepts.
    pub const MAX_RECORD_BYTES: u64 = MAX_RECORD_BYTES;
}

impl Drop for Inner {
    /// The last handle is gone, so no writer can be in flight: finalise the header as a stop
    /// would (a manager reading the memfd afterwards sees the final ends and counts).
    fn drop(&mut self) {
        let mut st = self.lock();
        if st.phase != TraceState::Stopped {
            // ATOMICS: `Release`, as in `stop`.
            self.gate.store(0, Ordering::Release);
            let _ = self.finish_stop(&mut st);
        }
        self.disarm(&mut st);
    }
}

/// A weak reference to a [`Context`].
#[derive(Debug, Clone)]
pub struct WeakContext {
    inner: std::sync::Weak<Inner>,
}

impl WeakContext {
    /// The context, if it is still alive.
    pub fn upgrade(&self) -> Option<Context> {
        self.inner.upgrade().map(|inner| Context { inner })
    }
}

// === impl Inner ===

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave `State` half-updated in a way that breaks
        // memory safety; keep going rather than propagate the poison as a panic.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn header(&self) -> &SharedHeader {
        self.buffer.header()
    }

    fn raw_dropped(&self) -> u64 {
        // ATOMICS: `Relaxed` counters; see the fields.
        self.slots.dropped_total() + self.unslotted_drops.load(Ordering::Relaxed)
    }

    fn early_drops(&self) -> u64 {
        // ATOMICS: `Relaxed` counter; see the field.
        self.early_drops.load(Ordering::Relaxed)
    }

    /// The header's exact drop counts for the trace `st` describes (at a switch or a stop):
    /// `num_records_dropped`, and of those, `dropped_before_start`.
    fn store_drop_counts(&self, st: &State) {
        let header = self.header();
        // ATOMICS: `Release`, for a manager reading after a save request, stop or crash.
        header
            .num_records_dropped
            .store(self.raw_dropped() - st.dropped_base, Ordering::Release);
        header
            .dropped_before_start
            .store(self.early_drops() - st.early_base, Ordering::Release);
    }

    /// A call found the trace not started: if the context is armed and `category` (`None`: a
    /// direct writer, no category) is one the coming trace enables, count it as a dropped
    /// record of that trace. Off the record path: only calls between [`Context::arm`] and the
    /// start (or a call racing with a start) take the mutex.
    #[cold]
    #[inline(never)]
    pub(crate) fn count_call_before_start(&self, category: Option<&str>) {
        // ATOMICS: `Relaxed`: see `armed`.
        if !self.armed.load(Ordering::Relaxed) {
            return;
        }
        // A poisoned lock holds an `Option<Arc<_>>` written in one store: still consistent.
        let categories = self
            .armed_categories
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // `None`: a start is under way (or the call raced with one): the call missed the
        // trace it begins, whatever its category.
        let counted = match (categories.as_deref(), category) {
            (Some(categories), Some(category)) => categories.is_enabled(category),
            _ => true,
        };
        drop(categories);
        if counted {
            // ATOMICS: `Relaxed` counter, see `early_drops`; the header's running count as
            // `publish_drop`'s (exact at every switch and stop).
            self.early_drops.fetch_add(1, Ordering::Relaxed);
            self.header()
                .dropped_before_start
                .fetch_add(1, Ordering::Relaxed);
            self.count_unslotted_drop();
        }
    }

    /// The armed categories, for writing (under the switch mutex).
    fn armed_categories_mut(&self) -> RwLockWriteGuard<'_, Option<Arc<CategoryFilter>>> {
        // A poisoned lock holds an `Option<Arc<_>>` written in one store: still consistent.
        self.armed_categories
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Leave the armed state without a start; returns the calls it counted as dropped.
    fn disarm(&self, st: &mut State) -> u64 {
        let Some(armed) = st.armed.take() else {
            return 0;
        };
        *self.armed_categories_mut() = None;
        // ATOMICS: `Relaxed`: see `armed` and `category::tracing_maybe_on`.
        self.armed.store(false, Ordering::Relaxed);
        context_inactive();
        self.raw_dropped().saturating_sub(armed.dropped_base)
    }

    /// Count one drop that no slot can take.
    pub(crate) fn count_unslotted_drop(&self) {
        // ATOMICS: `Relaxed`: see `unslotted_drops`.
        self.unslotted_drops.fetch_add(1, Ordering::Relaxed);
        self.publish_drop();
    }

    /// Add one drop to the shared header's running `num_records_dropped`, so that a manager
    /// salvaging the buffer of a killed process reports it. Every switch and stop stores the
    /// exact count again.
    #[cold]
    pub(crate) fn publish_drop(&self) {
        // ATOMICS: `Relaxed`: a running count only read by a salvage; the exact value is
        // published by the `Release` stores of a switch or stop.
        self.header()
            .num_records_dropped
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn category_filter_enabled(&self, generation: u32, category: &str) -> Option<bool> {
        let st = self.lock();
        (st.phase == TraceState::Started && st.generation == generation)
            .then(|| st.categories.is_enabled(category))
    }

    /// Zero the rolling buffers and restart writing in buffer 0 (while stopped).
    fn reset_rolling(&self, st: &mut State) -> Result<(), EngineError> {
        let g = &self.geometry;
        if st.dirty {
            let rolling_len = g.total_size - g.rolling_offset(0);
            self.buffer.zero_range(g.rolling_offset(0), rolling_len)?;
        }
        st.wrapped_count = 0;
        st.buffers = [BufferState::Current, BufferState::Ready];
        st.retirement = None;
        st.grace.clear();
        st.oneshot_full = false;
        self.rolling.clear_pins();
        // ATOMICS: `Release` for the ready hints and the header (manager side).
        self.ready[0].store(false, Ordering::Release);
        self.ready[1].store(true, Ordering::Release);
        let header = self.header();
        header.wrapped_count.store(0, Ordering::Release);
        header.rolling_data_end[0].store(0, Ordering::Release);
        header.rolling_data_end[1].store(0, Ordering::Release);
        self.rolling.reset(0);
        Ok(())
    }

    /// After the stop grace period: no writer is in flight. Finalise the header
    /// (`UpdateBufferHeaderAfterStopped`) and settle a pending retirement.
    fn finish_stop(&self, st: &mut State) -> (StopReport, Notification) {
        let header = self.header();
        let current = (st.wrapped_count & 1) as usize;
        let rolling_end = self.rolling_data_end_now();
        let durable_data_end = self.durable_data_end(st);
        let dropped = self.raw_dropped() - st.dropped_base;
        // ATOMICS: `Release` stores, read by the manager after the stopped message.
        header.rolling_data_end[current].store(rolling_end, Ordering::Release);
        header
            .durable_data_end
            .store(durable_data_end, Ordering::Release);
        header
            .wrapped_count
            .store(st.wrapped_count, Ordering::Release);
        self.store_drop_counts(st);
        // Every writer has left, so a pending retirement is complete: streaming hands the
        // buffer over now (before the caller reports stopped), circular frees it.
        let mut notification = None;
        if let Some(retirement) = st.retirement.take() {
            st.grace.clear();
            if self.mode == BufferingMode::Streaming {
                st.buffers[retirement.buffer] = BufferState::AwaitingSave {
                    wrapped_count: retirement.wrapped_count,
                };
                notification = Some((retirement.wrapped_count, durable_data_end));
            } else {
                st.buffers[retirement.buffer] = BufferState::Ready;
                // ATOMICS: `Release`: see `ready`.
                self.ready[retirement.buffer].store(true, Ordering::Release);
            }
        }
        st.phase = TraceState::Stopped;
        // A hint for call sites.
        context_inactive();
        let report = StopReport {
            wrapped_count: st.wrapped_count,
            durable_data_end,
            rolling_data_end: [
                header.rolling_data_end[0].load(Ordering::Relaxed),
                header.rolling_data_end[1].load(Ordering::Relaxed),
            ],
            records_dropped: dropped,
            durable_buffer_full: st.durable_full_at.is_some(),
        };
        (report, notification)
    }

    /// Generation currently in the gate (0 if never started).
    pub(crate) fn gate_generation_now(&self) -> (bool, u32) {
        // ATOMICS: `Acquire` (a plain load on x86): call-site caching tolerates a stale answer
        // for one call, but a thread that learns a generation here must then also see the
        // active-context word as the start left it (`category::active_epoch`: pairs with the
        // start's `Release` gate store, after its count increment).
        let gate = self.gate.load(Ordering::Acquire);
        (gate & GATE_STARTED != 0, gate_generation(gate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_rules() {
        // 4 KiB circular buffer: rolling 1856 bytes, quarter 464 -> 256.
        assert_eq!(chunk_size_for(16 * 1024, 1856), 256);
        assert_eq!(chunk_size_for(16 * 1024, 16 << 20), 16 * 1024);
        assert_eq!(chunk_size_for(20_000, 16 << 20), 16 * 1024);
        assert_eq!(chunk_size_for(1, 16 << 20), 64);
        assert_eq!(chunk_size_for(1 << 40, 1 << 30), 1 << 28);
    }

    #[test]
    fn a_prefault_ends_with_its_trace() {
        let buffer = TraceBuffer::create(1 << 20).unwrap();
        let ctx = Context::new(buffer, ContextConfig::default(), Arc::new(NoHandler)).unwrap();
        ctx.start(StartMode::ClearEntire, CategoryFilter::all())
            .unwrap();
        let first = gate_generation(ctx.inner.gate.load(Ordering::Relaxed));
        assert_eq!(ctx.prefault_trace(first), 1 << 20);
        ctx.stop(Duration::from_secs(5)).unwrap();
        ctx.start(StartMode::Retain, CategoryFilter::all()).unwrap();
        assert_eq!(ctx.prefault_trace(first), 0, "the first trace is over");
        assert_eq!(ctx.prefault(), 1 << 20, "the second one's");
        ctx.stop(Duration::from_secs(5)).unwrap();
    }

    #[test]
    fn thread_runs_grow_to_16_kib_and_a_quarter_of_the_buffer_at_most() {
        assert_eq!(thread_run_chunks(1024, 4 << 20), 16);
        assert_eq!(thread_run_chunks(16 * 1024, 4 << 20), 1);
        assert_eq!(thread_run_chunks(64 * 1024, 4 << 20), 1);
        assert_eq!(thread_run_chunks(64, 4 << 20), 256);
        // A 16 KiB rolling buffer: runs of at most 4 KiB.
        assert_eq!(thread_run_chunks(256, 16 * 1024), 16);
        assert_eq!(thread_run_chunks(1024, 1856), 1);
    }
}

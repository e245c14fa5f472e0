//! The record-writing entry point: writer sections, slots, and the per-thread chunk cursor.
//!
//! Algorithm: a per-thread bump allocator inside chunks handed out by the lock-free allocator
//! (`engine::allocator`); writer sections announced through the thread's slot
//! (`engine::slots`, quiescent-state grace periods). A thread publishes the chunk (or large
//! record run) it holds in its slot once per chunk, so that circular reuse can pin it.
//!
//! # One announcement per record of the installed context
//!
//! A thread already bound to the installed context announces itself in its writer slot only, then
//! checks that context's id in `global::INSTALLED_ID`; `global::uninstall` / `replace` wait for the
//! old context's writer slots as well as the read-side sections, so the context outlives every
//! section that saw it installed (a context's slot table is shared with its threads' leases, so
//! announcing into the slot of a context already gone is harmless). Records of other contexts, and
//! a thread's first record in a context, still take the read-side section and `Context::acquire`.
//!
//! Thread-scoped events of `'static` strings find their indices in the thread's event memo, and
//! small records (instants, spans, `#[traced]` with up to four scalar arguments) are written
//! straight into the thread's chunk (`writer::installed_record`: a fast path that calls nothing,
//! `try_installed_record`, which hands every other case back as a `writer::Attempt` with the
//! section still open, and cold finishers for them).
//!
//! A span's begin takes no section at all: the memo or the call site's cached answer for the
//! generation last started in the process (`context::latest_generation`, a hint) says whether to
//! take a timestamp; the end writes only if that generation is still the installed context's
//! running trace.
//!
//! A `#[traced]` guard keeps its scalar arguments encoded at entry (`format::ScalarArg`: the header
//! without its name ref, and the value word), and the thread's memo of the pair also keeps the
//! string indices of the call site's argument names (keyed by the address of the site's names, a
//! static of the expansion), so the end adds each name's index without a string-table probe.
//!
//! Indices are always the writing thread's own registrations: in oneshot mode a string record sits
//! in its registering thread's chunk, so another thread's index could be defined later in the
//! buffer than the record using it.
//!
//! The C API's `_static` calls find the same memo by their two strings' addresses alone once their
//! own slow path has claimed it (`ThreadCache::claim_by_address`). They look it up once the thread
//! is claimed (`writer::ThreadClaim`: `busy` set, nothing announced yet), so that no call of the
//! same thread (a signal handler's) can replace it, and finish every case of the attempt with a
//! tail call to a cold function that reads the two addresses back from the memo: the fast path
//! keeps few registers and needs no `catch_unwind`, while every cold function that can run the
//! program's buffer handler runs it inside `catch_unwind`, as every other C entry point does. All
//! of them are `extern "C"` (they cannot unwind), so a call between them needs no landing pad and
//! is a jump.
//!
//! The record path's costs are kept in CI as instruction counts (`scripts/check-instructions.sh`).
//!
//! # Contract for record writers
//!
//! ```text
//! let Some(mut writer) = context.acquire() else { return };   // tracing off or dropped
//! let Some(mut slot) = writer.reserve(words) else { return }; // dropped (and counted)
//! slot.payload().copy_from_slice(&body);                     // words - 1 payload words
//! slot.commit(header_word);                                  // header stored last, Release
//! ```
//!
//! - `words` counts the whole record, header word included: 1..=4095 (32760 bytes).
//! - The payload slice holds stale bytes: write **every** word (zero the padding).
//! - `commit` stores the header word with `Release` after the payload; the size field of the
//!   header is forced to `words` so framing is always right. A slot dropped without `commit`
//!   counts as one dropped record (a durable slot is then filled with an ignorable String
//!   record of index 0, so later durable records stay reachable).
//! - `reserve` writes rolling records (events...); `reserve_durable` writes the records that
//!   must not be dropped while rolling data is (initialization, string, thread, process/thread
//!   name records). In oneshot mode both go to the one buffer.
//! - Nothing allocates, nothing blocks, except the rare slow paths: first use of a context on a
//!   thread (slot lease), a buffer switch (takes the switch mutex), and leaving a section that a
//!   hand-off is waiting for (runs the service routine, which may call the handler).
//! - Per-thread caches (string and thread refs) are keyed by [`Writer::generation`]: when it
//!   differs from the cached one, clear the cache (Fuchsia's `GetCurrentContextCache`). Indices
//!   come from `Context::alloc_string_index` / `alloc_thread_index`.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use super::allocator::{
    gate_generation, gate_high, gate_open, gate_wrapped, make_gate, Taken, GATE_STARTED,
    GENERATION_MASK, HOLD_ALLOCATING, PIN_CAPACITY, WRAPPED_MASK,
};
use super::context::Inner;
use super::global;
use super::slots::{Fences, WriterSlot, WriterSlots};
use crate::buffer::header::{
    make_chunk_tag, with_record_size_words, BufferingMode, MAX_RECORD_WORDS, RECORD_SIZE_MASK,
    RECORD_SIZE_SHIFT,
};

/// A chunk cursor: `pos` is where the next record goes (the word there is zero), `end` the end
/// of the run, `gate` the gate value the run belongs to (0 = no chunk; never equals an open
/// gate).
#[derive(Clone, Copy)]
struct Chunk {
    pos: *mut u64,
    end: *mut u64,
    gate: u64,
}

const NO_CHUNK: Chunk = Chunk {
    pos: ptr::null_mut(),
    end: ptr::null_mut(),
    gate: 0,
};

/// Per-thread writer state. `const`-initialised and without a destructor, so access is a plain
/// thread-local address computation and it stays valid for the whole life of the thread.
struct ThreadState {
    /// Id of the context this thread's slot belongs to (0 = none).
    context_id: Cell<u64>,
    /// That context (dereferenced only while it is known to be alive: by a caller holding
    /// it, or by [`with_installed_writer`] once it has seen it installed).
    inner: Cell<*const Inner>,
    /// That context's slot: null, or a slot of the table the thread's lease keeps alive.
    slot: Cell<*const WriterSlot>,
    /// That context's fence pair (its light fence is a compiler fence once `membarrier` is
    /// registered), copied so that it is read without the context.
    fences: Cell<Fences>,
    /// Local copy of the slot's `seq` (the owner is the only writer).
    seq: Cell<u64>,
    /// Inside a writer section (of any context): re-entrancy guard.
    busy: Cell<bool>,
    /// Current chunk (of `context_id`'s buffer): a run of one or more chunks.
    chunk: Cell<Chunk>,
    /// Chunks the thread's next run takes: 1 for a thread new to the context, doubled at each
    /// run up to the context's `thread_run_chunks`, so that a short-lived thread leaves little
    /// unused.
    next_run: Cell<u64>,
    /// The thread's [`thread_key`], 0 until first asked.
    key: Cell<u64>,
}

thread_local! {
    static THREAD: ThreadState = const {
        ThreadState {
            context_id: Cell::new(0),
            inner: Cell::new(ptr::null()),
            slot: Cell::new(ptr::null()),
            fences: Cell::new(Fences::SEQ_CST),
            seq: Cell::new(0),
            busy: Cell::new(false),
            chunk: Cell::new(NO_CHUNK),
            next_run: Cell::new(1),
            key: Cell::new(0),
        }
    };

    /// The slot lease, whose destructor gives the slot back when the thread exits. Touched only
    /// when binding to a context (cold).
    static LEASE: RefCell<Option<Lease>> = const { RefCell::new(None) };
}

/// A thread's claim on a writer slot of a context. It keeps the context's slot table alive
/// (not the context): the thread may announce itself in its slot before it knows whether the
/// context still exists ([`with_installed_writer`]).
struct Lease {
    slots: Arc<WriterSlots>,
    context_id: u64,
    index: usize,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = THREAD.try_with(|t| {
            if t.context_id.get() == self.context_id {
                t.context_id.set(0);
                t.inner.set(ptr::null());
                t.slot.set(ptr::null());
                t.chunk.set(NO_CHUNK);
            }
        });
        self.slots.release(self.index);
    }
}

impl ThreadState {
    /// The light fence of the context the thread is bound to (`Fences::light`).
    #[inline(always)]
    fn light_fence(&self) {
        self.fences.get().light();
    }
}

#[inline(always)]
fn thread_state() -> &'static ThreadState {
    // SAFETY: `THREAD` has a const initialiser and no destructor, so its storage lives as long
    // as the thread; every reference we hand out is used on this thread only (`Writer` and
    // `Slot` are `!Send`) and never outlives it.
    THREAD.with(|t| unsafe { &*(t as *const ThreadState) })
}

/// The last [`thread_key`] handed out.
/// ATOMICS: `Relaxed`: a unique counter (nothing is published with it).
static LAST_THREAD_KEY: AtomicU64 = AtomicU64::new(0);

/// A number that identifies the calling thread among every thread the process ever ran (never
/// 0, never reused: a thread's storage, and with it any address of it, is reused by the next
/// thread once it exits): what per-thread data remembered elsewhere was valid for.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))] // Only the tracing layer asks.
#[inline(always)]
pub(crate) fn thread_key() -> u64 {
    let t = thread_state();
    match t.key.get() {
        0 => first_thread_key(t),
        key => key,
    }
}

/// The calling thread's [`thread_key`] if it has one already, else 0 (no thread's key): what
/// a key remembered elsewhere (never 0) is compared with. One load. A thread has its key
/// once it asked for it or bound to a context ([`bind`]): every thread that has written, so
/// every thread whose event memo holds anything.
#[inline(always)]
pub(crate) fn thread_key_if_any() -> u64 {
    thread_state().key.get()
}

/// [`thread_key`] the first time on a thread: the next number (lock-free, so that a signal
/// handler may be the first to ask).
#[cold]
#[inline(never)]
fn first_thread_key(t: &ThreadState) -> u64 {
    // ATOMICS: see `LAST_THREAD_KEY`. (2⁶⁴ threads are never started.)
    let key = LAST_THREAD_KEY.fetch_add(1, Ordering::Relaxed) + 1;
    t.key.set(key);
    key
}

/// Is the calling thread inside a writer section (of any context)?
pub(crate) fn in_any_section() -> bool {
    THREAD.try_with(|t| t.busy.get()).unwrap_or(false)
}

/// Is the calling thread inside a writer section of `inner`?
pub(crate) fn in_section_of(inner: &Inner) -> bool {
    THREAD
        .try_with(|t| t.busy.get() && t.context_id.get() == inner.id)
        .unwrap_or(false)
}

/// Lease a slot of `inner` for this thread (giving back the slot of any other context).
#[cold]
#[inline(never)]
fn bind(inner: &Arc<Inner>, t: &ThreadState) -> bool {
    // Every memo of the thread is filled in a section, so after this: a memo's begin reads
    // the key with `thread_key_if_any`.
    if t.key.get() == 0 {
        first_thread_key(t);
    }
    LEASE
        .try_with(|lease| {
            let Ok(mut lease) = lease.try_borrow_mut() else {
                return false;
            };
            drop(lease.take());
            let Some(index) = inner.slots.lease() else {
                return false;
            };
            let slot = inner.slots.get(index);
            // ATOMICS: `Relaxed`: the lease's `Acquire` CAS ordered the previous owner's last
            // store; the value is even (that owner was quiescent).
            t.seq.set(slot.seq.load(Ordering::Relaxed));
            t.slot.set(slot);
            t.inner.set(Arc::as_ptr(inner));
            t.fences.set(inner.fences);
            t.chunk.set(NO_CHUNK);
            t.next_run.set(1);
            t.context_id.set(inner.id);
            *lease = Some(Lease {
                slots: Arc::clone(&inner.slots),
                context_id: inner.id,
                index,
            });
            true
        })
        .unwrap_or(false)
}

/// Oneshot start: make `[pos, end)` of the first chunk, just after the leading record, the
/// calling thread's chunk for gate `gate`, binding the thread to `inner` if needed, so that the
/// rest of the chunk is not wasted when this thread writes. Does nothing inside a writer
/// section (the thread's slot and chunk belong to that section) or without a free slot. `pos`
/// holds a zero word unless `pos == end`.
pub(crate) fn adopt_chunk(inner: &Arc<Inner>, pos: *mut u64, end: *mut u64, gate: u64) {
    let _ = THREAD.try_with(|t| {
        if t.busy.get() || (t.context_id.get() != inner.id && !bind(inner, t)) {
            return;
        }
        t.chunk.set(Chunk { pos, end, gate });
        // A one-chunk run of the new trace: the thread's runs grow again from there.
        t.next_run.set(1);
    });
}

#[inline]
pub(crate) fn acquire(inner: &Arc<Inner>) -> Option<Writer<'_>> {
    // ATOMICS: `Relaxed` pre-check so that "tracing off" costs one load; the authoritative load
    // follows the announcement.
    if inner.gate.load(Ordering::Relaxed) & GATE_STARTED == 0 {
        // Counted while armed (a direct writer has no category: every attempt counts).
        inner.count_call_before_start(None);
        return None;
    }
    let t = thread_state();
    if t.busy.get() {
        inner.count_unslotted_drop();
        return None;
    }
    t.busy.set(true);
    if t.context_id.get() != inner.id && !bind(inner, t) {
        t.busy.set(false);
        inner.count_unslotted_drop();
        return None;
    }
    // SAFETY: `context_id` matches `inner`, which is alive (we hold `&Arc<Inner>`), so `slot`
    // points into `inner.slots`.
    let slot = unsafe { &*t.slot.get() };
    let seq = t.seq.get() + 1;
    t.seq.set(seq);
    // ATOMICS: `Release` (see `WriterSlot::seq`), then the light fence so the gate load below
    // cannot be ordered before this store (Dekker with the engine's heavy fence).
    slot.seq.store(seq, Ordering::Release);
    inner.fences.light();
    // ATOMICS: `Acquire`: pairs with the engine's `Release` gate stores.
    let gate = inner.gate.load(Ordering::Acquire);
    let writer = Writer {
        inner,
        thread: t,
        slot,
        gate,
        installed: false,
        _not_send: PhantomData,
    };
    if gate & GATE_STARTED == 0 {
        return None; // dropping `writer` leaves the section
    }
    Some(writer)
}

/// Run `f` in a writer section on the process's installed context (`engine::global`),
/// entered with one announcement: the thread's writer slot keeps the context alive, as
/// `global::uninstall` waits for the writer slots of the context it removes.
///
/// The calling thread must already be bound to the installed context (its first record in a
/// context goes through [`acquire`]). Then: announce in the slot (an odd `seq`, the light
/// fence), load the installed context's id, and only if it is the thread's context use it.
/// By the Dekker pattern with `global::uninstall` (clear the id, heavy fence, wait for the
/// context's odd slots), a thread that saw its context installed after announcing is waited
/// for, so the context outlives the section; a thread that saw another id touches nothing of
/// the context (its slot belongs to a table its lease keeps alive).
///
/// `None` (nothing written, nothing counted): the thread is not bound to the installed
/// context, is already inside a writer section, or the trace is not started. The caller then
/// takes the general path, which handles and counts each of those cases.
#[inline(always)]
pub(crate) fn with_installed_writer<R>(f: impl FnOnce(&mut Writer<'_>) -> R) -> Option<R> {
    let t = thread_state();
    if t.busy.get() {
        return None;
    }
    // SAFETY: a non-null `slot` is in the table that the thread's lease keeps alive.
    let slot = unsafe { t.slot.get().as_ref() }?;
    t.busy.set(true);
    let seq = t.seq.get() + 1;
    t.seq.set(seq);
    // ATOMICS: `Release` (see `WriterSlot::seq`), then the light fence: the id and gate
    // loads below cannot be ordered before this store (Dekker with the heavy fences of
    // `global::uninstall` and of the engine's grace periods).
    slot.seq.store(seq, Ordering::Release);
    t.light_fence();
    if global::installed_id() != t.context_id.get() {
        leave_unused(t, slot);
        return None;
    }
    // SAFETY: the installed context is the one this thread is bound to (ids are never
    // reused), and it stays alive until this section ends (see above).
    let mut writer = unsafe { installed_writer(t, slot) };
    if writer.gate & GATE_STARTED == 0 {
        return None; // dropping `writer` leaves the section
    }
    Some(f(&mut writer))
}

/// Most payload words of an [`installed_record`].
pub(crate) const MAX_INSTALLED_PAYLOAD: usize = 15;

/// A record of `len + 1` words (`header`, then `payload[..len]`, at most
/// [`MAX_INSTALLED_PAYLOAD`] words; `payload` by value, so that its words stay in registers
/// unless the cold path needs them in memory) of the trace whose open gate's high half is
/// `open_gate` ([`open_gate_high`](super::allocator::open_gate_high) of its generation, which
/// a memo keeps computed) on the installed context's path (see [`with_installed_writer`]),
/// written straight into the thread's chunk: the whole section inlined, no [`Writer`] or
/// [`Slot`] built unless the chunk needs a refill. `header` is an event record's with its
/// size field zero (set here).
///
/// `true`: written, or dropped and counted. `false`: the path does not apply (see
/// [`with_installed_writer`]) or the running trace is not that one: nothing was written or
/// counted.
#[inline(always)]
pub(crate) fn installed_record<const N: usize>(
    open_gate: u32,
    header: u64,
    payload: [u64; N],
    len: usize,
) -> bool {
    finish_attempt(try_installed_record(open_gate, header, payload, len))
}

/// Finish an [`Attempt`] as [`installed_record`] does (the cold cases by calls); the answer
/// is `installed_record`'s.
#[inline(always)]
pub(crate) fn finish_attempt<const N: usize>(attempt: Attempt<N>) -> bool {
    match attempt {
        Attempt::Written => true,
        Attempt::NotApplicable => false,
        Attempt::Unused => {
            leave_unused_section();
            false
        }
        Attempt::Slow(record) => record.write(),
        Attempt::Wanted => {
            serve_wanted_section();
            true
        }
    }
}

/// How [`try_installed_record`] ended. Each case but the first two leaves the thread's
/// section open, for the caller to finish with the cold function the case names, as its last
/// step: a caller whose own fallback is a call (the C API's `_static` functions) then ends in
/// tail calls only and needs no stack frame on its fast path.
#[must_use]
pub(crate) enum Attempt<const N: usize> {
    /// Written; the section is left.
    Written,
    /// The installed path does not apply (the thread is inside a section, or not bound to a
    /// context); no section was entered.
    NotApplicable,
    /// The installed context is not the thread's: leave with [`leave_unused_section`], then
    /// take the caller's own path.
    Unused,
    /// The record needs the slow path (a chunk refill, a gate that is not the memo's open
    /// one): [`SlowRecord::write`].
    Slow(SlowRecord<N>),
    /// Written, and a buffer hand-off asked this writer to report: leave with
    /// [`serve_wanted_section`].
    Wanted,
}

/// A record that [`try_installed_record`] could not write on its fast path, its section
/// still open.
#[must_use]
pub(crate) struct SlowRecord<const N: usize> {
    open_gate: u32,
    header: u64,
    payload: [u64; N],
    len: usize,
}

impl<const N: usize> SlowRecord<N> {
    /// Its trace's open gate (high half), header and payload words (all `N`: a
    /// [`try_installed_record`] of `N` words with a `len` below `N` is not split here), for a
    /// caller that passes them to a cold function in registers.
    #[cfg(feature = "c-api")]
    #[inline(always)]
    pub(crate) fn into_parts(self) -> (u32, u64, [u64; N]) {
        debug_assert_eq!(self.len, N);
        (self.open_gate, self.header, self.payload)
    }

    /// The record of [`Self::into_parts`] again (`len` = `N`).
    ///
    /// # Safety
    ///
    /// The parts are those of a record whose section is still open on this thread.
    #[cfg(feature = "c-api")]
    #[inline(always)]
    pub(crate) unsafe fn from_parts(open_gate: u32, header: u64, payload: [u64; N]) -> Self {
        Self {
            open_gate,
            header,
            payload,
            len: N,
        }
    }

    /// Write it through a [`Writer`] on the open section (refill, drop counting), which is
    /// left then. The answer is [`installed_record`]'s.
    #[inline(always)]
    pub(crate) fn write(self) -> bool {
        installed_record_slow(self.open_gate, self.header, self.payload, self.len)
    }
}

/// [`installed_record`]'s fast path alone: no call, every other case handed back to the
/// caller (see [`Attempt`]).
#[inline(always)]
pub(crate) fn try_installed_record<const N: usize>(
    open_gate: u32,
    header: u64,
    payload: [u64; N],
    len: usize,
) -> Attempt<N> {
    // Checked before the section is entered: a failed assertion must not leave it open.
    debug_assert_record::<N>(header, len);
    if len > N {
        return Attempt::NotApplicable;
    }
    match enter_installed() {
        Ok(section) => section.record(open_gate, header, payload, len),
        Err(NotEntered::NotApplicable) => Attempt::NotApplicable,
        Err(NotEntered::Unused) => Attempt::Unused,
    }
}

/// Debug builds: an installed record's `len` is 1..=`N` and its `header` leaves the size
/// field (set by the path) zero. Checked before a section is entered.
#[inline(always)]
pub(crate) fn debug_assert_record<const N: usize>(header: u64, len: usize) {
    debug_assert!((1..=N).contains(&len));
    debug_assert_eq!(
        header >> RECORD_SIZE_SHIFT & RECORD_SIZE_MASK,
        0,
        "set here"
    );
}

/// Why [`enter_installed`] opened no section for its caller.
pub(crate) enum NotEntered {
    /// As [`Attempt::NotApplicable`]: no section was entered.
    NotApplicable,
    /// As [`Attempt::Unused`]: a section is open, for [`leave_unused_section`].
    Unused,
}

/// A section of the installed context's path, open on the calling thread (`busy` set, its
/// slot announced, the installed context checked to be the thread's): write one record with
/// [`Self::record`], or leave it with [`Self::leave`]. Not `Send` (the thread's own state).
#[must_use]
pub(crate) struct InstalledSection {
    t: &'static ThreadState,
    slot: &'static WriterSlot,
    /// The announced (odd) `seq`, not yet copied into `t.seq`.
    seq: u64,
}

/// Open a section of the installed context's path: [`try_installed_record`]'s first half.
#[inline(always)]
pub(crate) fn enter_installed() -> Result<InstalledSection, NotEntered> {
    claim_installed()
        .ok_or(NotEntered::NotApplicable)?
        .announce()
        .ok_or(NotEntered::Unused)
}

/// The calling thread kept out of every other section (`busy` set) while it prepares a
/// section of the installed context's path, not yet announced: what it reads meanwhile (its
/// memo) no call of the same thread (a signal handler's) can change. Announce it with
/// [`Self::announce`], or give it up with `release` (the C API's, when its memo is missing).
#[must_use]
pub(crate) struct ThreadClaim {
    t: &'static ThreadState,
    slot: &'static WriterSlot,
}

/// Claim the calling thread for a section of the installed context's path; `None` as
/// [`NotEntered::NotApplicable`].
#[inline(always)]
pub(crate) fn claim_installed() -> Option<ThreadClaim> {
    let t = thread_state();
    if t.busy.get() {
        return None;
    }
    // SAFETY: a non-null `slot` is in the table that the thread's lease keeps alive.
    let slot = unsafe { t.slot.get().as_ref() }?;
    t.busy.set(true);
    Some(ThreadClaim { t, slot })
}

impl ThreadClaim {
    /// Give the claim up: nothing was announced.
    #[cfg(feature = "c-api")]
    #[inline(always)]
    pub(crate) fn release(self) {
        self.t.busy.set(false);
    }

    /// Announce the section and check that the installed context is the thread's; `None` as
    /// [`NotEntered::Unused`] (the section is open, for [`leave_unused_section`]).
    #[inline(always)]
    pub(crate) fn announce(self) -> Option<InstalledSection> {
        let Self { t, slot } = self;
        // The thread's copy `t.seq` is brought up to date only when the section ends or
        // leaves for a cold path (which reads it): nothing else reads it meanwhile, as `busy`
        // keeps every other section of this thread out.
        let seq = t.seq.get() + 1;
        // ATOMICS: as in `with_installed_writer`.
        slot.seq.store(seq, Ordering::Release);
        t.light_fence();
        if global::installed_id() != t.context_id.get() {
            t.seq.set(seq);
            return None;
        }
        Some(InstalledSection { t, slot, seq })
    }
}

impl InstalledSection {
    /// [`try_installed_record`]'s second half: the record of `len + 1` words (see
    /// [`installed_record`]) in this section. Never [`Attempt::NotApplicable`] or
    /// [`Attempt::Unused`] (a `len` above `N`, a caller's error, is an [`Attempt::Slow`]
    /// whose write leaves the section and answers `false`).
    #[inline(always)]
    pub(crate) fn record<const N: usize>(
        self,
        open_gate: u32,
        header: u64,
        payload: [u64; N],
        len: usize,
    ) -> Attempt<N> {
        const { assert!(N <= MAX_INSTALLED_PAYLOAD) };
        // (The debug checks of `header` and `len`, `debug_assert_record`, are the caller's,
        // before its section: a failed assertion must not leave the section open.)
        let Self { t, slot, seq } = self;
        // SAFETY: as in `with_installed_writer`.
        let inner = unsafe { &*t.inner.get() };
        // ATOMICS: `Acquire`: pairs with the engine's `Release` gate stores.
        let gate = inner.gate.load(Ordering::Acquire);
        let words = len + 1;
        let chunk = t.chunk.get();
        // The fast path writes all `N` payload words (a copy of constant length, unrolled: no
        // `memcpy` call for a variable `len`; the words past `len` are overwritten by the
        // terminator and the next record), so it takes the record only if the chunk has room
        // for the header, `N` words and the terminator after them (a record that would fill
        // the chunk exactly takes the slow path); the terminator is then stored
        // unconditionally.
        let reach = chunk.pos as usize + (N + 1) * 8;
        // An open gate of the memo's trace (`open_gate`; a durable-full one takes the slow
        // path, which counts the drop), the one the chunk was taken under.
        if gate_high(gate) != open_gate
            || chunk.gate != gate
            || reach >= chunk.end as usize
            || len > N
        {
            t.seq.set(seq);
            return Attempt::Slow(SlowRecord {
                open_gate,
                header,
                payload,
                len,
            });
        }
        let header = header | (words as u64) << RECORD_SIZE_SHIFT;
        // SAFETY: the chunk belongs to the installed context (its gate is the running one) and
        // has room for the header, `N` words and the word after them, which only this thread
        // writes (no reader looks past the terminator before a header published there); `next`
        // (at most `N + 1` words on) is within the chunk.
        unsafe {
            let next = chunk.pos.add(words);
            for (i, &word) in payload.iter().enumerate() {
                // ATOMICS: `Relaxed`, published by the header's `Release` store. One store per
                // word: a plain array write is merged into 16-byte moves through the stack,
                // whose load of two 8-byte stores cannot be forwarded (a stall per record).
                AtomicU64::from_ptr(chunk.pos.add(1 + i)).store(word, Ordering::Relaxed);
            }
            // After the payload, which may have covered it.
            // ATOMICS: `Relaxed`: the terminator, published by the header's `Release` store.
            AtomicU64::from_ptr(next).store(0, Ordering::Relaxed);
            // ATOMICS: `Release`: a reader that sees the header sees the payload and terminator.
            AtomicU64::from_ptr(chunk.pos).store(header, Ordering::Release);
            // The cursor alone moves (`Cell::set` would store the whole chunk).
            (*t.chunk.as_ptr()).pos = next;
        }
        let seq = seq + 1;
        t.seq.set(seq);
        // ATOMICS: as in `Writer::drop`.
        slot.seq.store(seq, Ordering::Release);
        t.light_fence();
        // ATOMICS: `Relaxed`: see `WriterSlot::wanted`.
        if slot.wanted.load(Ordering::Relaxed) {
            // `busy` stays set until `serve_wanted_section` has served.
            return Attempt::Wanted;
        }
        t.busy.set(false);
        Attempt::Written
    }
}

/// The calling thread's open section of [`try_installed_record`] (or of an
/// [`InstalledSection`]) and its slot.
///
/// # Safety
///
/// Only while such a section is open on this thread (it returned [`Attempt::Unused`],
/// [`Attempt::Slow`] or [`Attempt::Wanted`], or is being left, not yet finished).
#[inline(always)]
unsafe fn open_installed_section() -> (&'static ThreadState, &'static WriterSlot) {
    let t = thread_state();
    // SAFETY: the open section found `slot` non-null, and the thread's lease keeps its table
    // alive at least until the section is left (the caller's promise: it is open).
    (t, unsafe { &*t.slot.get() })
}

/// A [`Writer`] on the thread's open section of the installed context (leaving it when
/// dropped), its gate loaded now.
///
/// # Safety
///
/// `slot` is the thread's (`t`'s) slot, announced in a section that is open, and that
/// section found the installed context to be the thread's: it stays alive until the section
/// is left.
#[inline(always)]
unsafe fn installed_writer(t: &'static ThreadState, slot: &'static WriterSlot) -> Writer<'static> {
    // SAFETY: the caller's promise: the context is alive while the section is open.
    let inner = unsafe { &*t.inner.get() };
    // ATOMICS: `Acquire`: pairs with the engine's `Release` gate stores.
    let gate = inner.gate.load(Ordering::Acquire);
    Writer {
        inner,
        thread: t,
        slot,
        gate,
        installed: true,
        _not_send: PhantomData,
    }
}

/// [`installed_writer`] on the section [`open_installed_section`] finds.
///
/// # Safety
///
/// As [`open_installed_section`], and the section checked that the installed context is the
/// thread's (any case but [`Attempt::Unused`]).
#[inline(always)]
unsafe fn open_section_writer() -> Writer<'static> {
    // SAFETY: the caller's promise.
    unsafe {
        let (t, slot) = open_installed_section();
        installed_writer(t, slot)
    }
}

/// Finish an [`Attempt::Unused`]: leave the section, nothing written.
#[cold]
#[inline(never)]
pub(crate) fn leave_unused_section() {
    // SAFETY: called for an `Attempt::Unused`, whose section is open.
    let (t, slot) = unsafe { open_installed_section() };
    leave_unused(t, slot);
}

/// Finish an [`Attempt::Wanted`]: report to the hand-off that asked (its service routine may
/// run the program's buffer handler, which may panic; the thread is then out of its section
/// all the same), then clear the thread's section.
#[cold]
#[inline(never)]
pub(crate) fn serve_wanted_section() {
    // SAFETY: called for an `Attempt::Wanted`, whose section (`busy`) is still open.
    let (t, slot) = unsafe { open_installed_section() };
    slot.wanted.store(false, Ordering::Relaxed);
    serve_installed(t, slot);
    t.busy.set(false);
}

/// [`SlowRecord::write`]: a [`Writer`] on the open section (its thread, slot and installed
/// context read again: the section keeps them; the gate loaded again: any value seen while
/// the section is open is as good as the first), then, if the trace is the memo's
/// (`open_gate`'s generation) and started, its reservation (refill, drop counting), else
/// nothing.
#[cold]
#[inline(never)]
fn installed_record_slow<const N: usize>(
    open_gate: u32,
    header: u64,
    payload: [u64; N],
    len: usize,
) -> bool {
    // SAFETY: called for an `Attempt::Slow`, whose section is open and found the installed
    // context to be the thread's.
    let mut writer = unsafe { open_section_writer() };
    let gate = writer.gate;
    let Some(payload) = payload.get(..len) else {
        return false; // a `len` above `N`, a caller's error: dropping `writer` leaves
    };
    let generation = open_gate & GENERATION_MASK;
    let expected = make_gate(generation, 0, GATE_STARTED);
    if gate & make_gate(GENERATION_MASK, 0, GATE_STARTED) != expected {
        return false; // dropping `writer` leaves the section
    }
    if let Some(mut reserved) = writer.reserve(payload.len() + 1) {
        reserved.payload().copy_from_slice(payload);
        reserved.commit(header);
    }
    true
}

/// Leave a section of [`with_installed_writer`] that found another context installed.
#[cold]
#[inline(never)]
fn leave_unused(t: &ThreadState, slot: &WriterSlot) {
    let seq = t.seq.get() + 1;
    t.seq.set(seq);
    // ATOMICS: `Release`, as every leaving store (nothing was written).
    slot.seq.store(seq, Ordering::Release);
    t.busy.set(false);
}

/// A writer of the installed context left its section and found `wanted`: the hand-off it
/// was asked to report to may be waiting for it. The context may be gone by now, so announce
/// again and, if it is still installed, take a reference to it before leaving and running the
/// service routine.
#[cold]
#[inline(never)]
fn serve_installed(t: &ThreadState, slot: &WriterSlot) {
    let seq = t.seq.get() + 1;
    t.seq.set(seq);
    // ATOMICS: as in `with_installed_writer` (the full fence: a cold path).
    slot.seq.store(seq, Ordering::Release);
    fence(Ordering::SeqCst);
    let inner = (global::installed_id() == t.context_id.get()).then(|| {
        let inner = t.inner.get();
        // SAFETY: the context is alive (installed, and this section is waited for);
        // `t.inner` is `Arc::as_ptr` of one of its `Arc`s, so adding a strong count and
        // taking it back as an `Arc` is sound.
        unsafe {
            Arc::increment_strong_count(inner);
            Arc::from_raw(inner)
        }
    });
    let seq = seq + 1;
    t.seq.set(seq);
    // ATOMICS: `Release`, as every leaving store.
    slot.seq.store(seq, Ordering::Release);
    if let Some(inner) = inner {
        let _leaving = LeavingOnUnwind(t);
        inner.service();
    }
}

/// Clears the thread's `busy` flag when dropped: held across the service routine a writer
/// runs after leaving its section (its slot's `seq` is already even; `busy` stays set so that
/// the routine's own records do not re-enter), so that a panic out of it (a buffer handler
/// the program installed; the C API swallows it) does not leave the thread marked inside a
/// section for good, every later record of it dropped.
struct LeavingOnUnwind<'t>(&'t ThreadState);

impl Drop for LeavingOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.busy.set(false);
    }
}

/// A writer section on the calling thread: reserve records through it; dropping it leaves the
/// section (and may complete a buffer hand-off). Not `Send`.
pub struct Writer<'c> {
    inner: &'c Inner,
    thread: &'static ThreadState,
    slot: &'c WriterSlot,
    /// Gate value this section runs under (refreshed on chunk refills).
    gate: u64,
    /// Entered by [`with_installed_writer`]: nothing keeps the context alive once the
    /// section is left.
    installed: bool,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for Writer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("context", &self.inner.id)
            .field("gate", &self.gate)
            .finish()
    }
}

impl Drop for Writer<'_> {
    #[inline]
    fn drop(&mut self) {
        let seq = self.thread.seq.get() + 1;
        self.thread.seq.set(seq);
        // ATOMICS: `Release` publishes every record of the section to the grace-period scan;
        // the light fence orders it before the `wanted` load (pairs with the heavy fence after
        // the scan sets `wanted`).
        self.slot.seq.store(seq, Ordering::Release);
        // The thread's copy of the context's fence choice: past the store above, the context
        // of an installed section may already be gone.
        self.thread.light_fence();
        // ATOMICS: `Relaxed`: see `WriterSlot::wanted`.
        if self.slot.wanted.load(Ordering::Relaxed) {
            self.slot.wanted.store(false, Ordering::Relaxed);
            if self.installed {
                serve_installed(self.thread, self.slot);
            } else {
                let _leaving = LeavingOnUnwind(self.thread);
                self.inner.service();
            }
        }
        self.thread.busy.set(false);
    }
}

impl<'c> Writer<'c> {
    /// Trace generation of this section (for per-thread cache resets).
    pub fn generation(&self) -> u32 {
        gate_generation(self.gate)
    }

    /// Unique id of the context (a per-thread cache serving several contexts keys on it too).
    pub fn context_id(&self) -> u64 {
        self.inner.id
    }

    /// Count one dropped record against this thread.
    #[cold]
    fn count_drop(&self) {
        // ATOMICS: `Relaxed` load + store: only this thread writes its slot's counter.
        let dropped = self.slot.dropped.load(Ordering::Relaxed);
        self.slot.dropped.store(dropped + 1, Ordering::Relaxed);
        self.inner.publish_drop();
    }

    /// Reserve a rolling record of `words` words (header included, 1..=4095). `None` means the
    /// record is dropped (and counted). Always inlined: the fast case is a few instructions
    /// (the slow one is out of line).
    #[inline(always)]
    pub fn reserve(&mut self, words: usize) -> Option<Slot<'_>> {
        let chunk = self.thread.chunk.get();
        if chunk.gate == self.gate
            && words.wrapping_sub(1) < MAX_RECORD_WORDS as usize
            && (chunk.end as usize - chunk.pos as usize) >= words * 8
        {
            // SAFETY: the chunk belongs to the live context of this section and has room.
            return Some(unsafe { self.slot_in_chunk(chunk, words) });
        }
        self.reserve_slow(words)
    }

    /// Place a record at the chunk cursor.
    ///
    /// # Safety
    ///
    /// `chunk` is this thread's current chunk, of this section's context, with at least
    /// `words` words of room.
    #[inline(always)]
    unsafe fn slot_in_chunk(&mut self, chunk: Chunk, words: usize) -> Slot<'_> {
        // SAFETY: room for `words` words, per the caller.
        let next = unsafe { chunk.pos.add(words) };
        if next < chunk.end {
            // The terminator: the word after the record reads as zero until the next record's
            // header is committed.
            // ATOMICS: `Relaxed`: published by the record's `Release` header store.
            // SAFETY: `next` is inside the chunk, 8-aligned; only this thread writes it.
            unsafe { AtomicU64::from_ptr(next) }.store(0, Ordering::Relaxed);
        }
        Slot {
            record: chunk.pos,
            words,
            kind: SlotKind::Chunk,
            thread: self.thread,
            slot: self.slot,
            inner: self.inner,
            _borrow: PhantomData,
        }
    }

    #[cold]
    #[inline(never)]
    fn reserve_slow(&mut self, words: usize) -> Option<Slot<'_>> {
        let chunk_bytes = self.inner.rolling.chunk_size() as usize;
        // A run holds its tag word plus the record.
        let needed = (words + 1) * 8;
        if words == 0
            || words > MAX_RECORD_WORDS as usize
            || needed as u64 > self.inner.rolling.rolling_size()
        {
            self.count_drop();
            return None;
        }
        let outcome = self.take_space(words, needed, chunk_bytes);
        let Some((record, end, kind)) = outcome else {
            // ATOMICS: `Release`, see `WriterSlot::run_hold`.
            self.slot.run_hold.store(0, Ordering::Release);
            self.count_drop();
            return None;
        };
        let chunk = Chunk {
            pos: record,
            end,
            gate: self.gate,
        };
        // SAFETY: `take_space` returned room for `words` words at `record` in a run of this
        // context that this thread owns.
        let mut slot = unsafe { self.slot_in_chunk(chunk, words) };
        slot.kind = kind;
        Some(slot)
    }

    /// The allocation loop of [`Self::reserve_slow`]: where the record goes, the end of its
    /// run, and the slot kind. Leaves `run_hold` set for a large record's run (cleared by its
    /// commit or drop), 0 for a new chunk; the caller clears it on failure.
    fn take_space(
        &mut self,
        words: usize,
        needed: usize,
        chunk_bytes: usize,
    ) -> Option<(*mut u64, *mut u64, SlotKind)> {
        const ATTEMPTS: usize = 3;
        let mut attempts = 0;
        let mut pinned = 0;
        while attempts < ATTEMPTS && pinned <= PIN_CAPACITY {
            // ATOMICS: `Acquire`: see `Inner::gate`.
            let gate = self.inner.gate.load(Ordering::Acquire);
            if !gate_open(gate) {
                return None;
            }
            self.gate = gate;
            let chunk = self.thread.chunk.get();
            if chunk.gate == gate && (chunk.end as usize - chunk.pos as usize) >= words * 8 {
                // ATOMICS: `Release`, see `WriterSlot::run_hold`.
                self.slot.run_hold.store(0, Ordering::Release);
                return Some((chunk.pos, chunk.end, SlotKind::Chunk));
            }
            // The thread's next run, longer if the record needs it; a record too large for any
            // run of a thread gets a run of its own (after the thread's run in the buffer). A
            // thread new to this trace starts again from one chunk.
            if gate_generation(chunk.gate) != gate_generation(gate) {
                self.thread.next_run.set(1);
            }
            let longest = self.inner.rolling.thread_run_chunks();
            let chunks = (needed.div_ceil(chunk_bytes) as u64).max(self.thread.next_run.get());
            let own_run = chunks <= longest;
            attempts += 1;
            // Announce "allocating" before touching the allocator word (see
            // `WriterSlot::run_hold`); every outcome below replaces it.
            self.slot.run_hold.store(HOLD_ALLOCATING, Ordering::Relaxed);
            self.inner.fences.light();
            let taken = self.inner.rolling.take_run(chunks, gate, &self.inner.gate);
            if !matches!(taken, Taken::Run(ref run) if run.bytes() >= needed) {
                // Nothing of ours to write into (a short run at the buffer end is abandoned
                // untagged): hold nothing while possibly blocking on the switch mutex below.
                // ATOMICS: `Release`, see `WriterSlot::run_hold`.
                self.slot.run_hold.store(0, Ordering::Release);
            }
            match taken {
                Taken::Run(run) if run.bytes() >= needed => {
                    // SAFETY: the run is ours, at least two words long and 8-aligned.
                    let first = unsafe { run.start.add(1) };
                    // Publish the hold before writing anything into the run.
                    if own_run {
                        // ATOMICS: `Release`, see `WriterSlot::chunk_hold`.
                        self.slot.chunk_hold.store(run.hold, Ordering::Release);
                        self.slot.run_hold.store(0, Ordering::Release);
                    } else {
                        // ATOMICS: `Release`, see `WriterSlot::run_hold`.
                        self.slot.run_hold.store(run.hold, Ordering::Release);
                    }
                    // Zero the first record position, then publish the tag.
                    // SAFETY: `first` is inside the run.
                    unsafe { AtomicU64::from_ptr(first) }.store(0, Ordering::Relaxed);
                    let tag = make_chunk_tag(gate_wrapped(run.gate), chunks as u16);
                    // ATOMICS: `Release`: a reader that sees the tag sees the zeroed word.
                    // SAFETY: `run.start` is inside the run.
                    unsafe { AtomicU64::from_ptr(run.start) }.store(tag, Ordering::Release);
                    self.gate = run.gate;
                    // Near the end of what is faulted in: ask for more (engine::prefault).
                    let end = run.end as u64 - self.inner.buffer.as_ptr() as u64;
                    if self.inner.prefault_ahead.passed(end) {
                        self.inner.handler.notify_prefault();
                    }
                    if own_run {
                        self.thread.chunk.set(Chunk {
                            pos: first,
                            end: run.end,
                            gate: run.gate,
                        });
                        self.thread.next_run.set((chunks * 2).min(longest));
                        return Some((first, run.end, SlotKind::Chunk));
                    }
                    // A record larger than the thread's run: its own run; the thread keeps its
                    // chunk.
                    return Some((first, run.end, SlotKind::Run));
                }
                Taken::Run(run) => {
                    // The short run at the end of the buffer cannot hold the record: the buffer
                    // is full. The run stays untagged, so readers skip it.
                    if !self
                        .inner
                        .on_rolling_full(gate_wrapped(run.gate) & WRAPPED_MASK)
                    {
                        return None;
                    }
                }
                Taken::Full { wrapped } => {
                    if !self.inner.on_rolling_full(wrapped) {
                        return None;
                    }
                }
                Taken::Retry => {}
                Taken::Pinned => {
                    // Left to the stale writer that holds it; does not count as an attempt.
                    attempts -= 1;
                    pinned += 1;
                }
            }
        }
        None
    }

    /// Reserve a durable record (initialization, string, thread, process/thread names) of
    /// `words` words. In oneshot mode this is [`Self::reserve`]. When the durable buffer is
    /// full, tracing stops for this context: this and every later reservation return `None`
    /// (counted).
    pub fn reserve_durable(&mut self, words: usize) -> Option<Slot<'_>> {
        if self.inner.mode == BufferingMode::Oneshot {
            let slot = self.reserve(words)?;
            if slot.kind == SlotKind::Run {
                // A record larger than a chunk lies in a run of its own, after the thread's
                // chunk in the buffer; the thread's later records may use what it defines (a
                // string's index), so they must follow it: the thread leaves its chunk (the
                // rest of it reads as unused) and takes the next one after the run.
                let chunk = slot.thread.chunk.get();
                slot.thread.chunk.set(Chunk {
                    pos: chunk.end,
                    ..chunk
                });
            }
            return Some(slot);
        }
        if words == 0 || words > MAX_RECORD_WORDS as usize || !gate_open(self.gate) {
            self.count_drop();
            return None;
        }
        match self.inner.durable.reserve(words as u64 * 8) {
            Ok(record) => {
                // The durable buffer is one dense stretch that every thread appends to: a
                // record whose header is still 0 would end it for a reader. Until the commit
                // (or the drop) writes the real header, the slot reads as a filler record of
                // its size, so that a writer dying mid-record (a crash, a stop that timed
                // out) hides none of the records reserved after it.
                // ATOMICS: `Relaxed`: read only after this writer's section ends (a stop's
                // or a save's grace period) or after the process died; the commit's
                // `Release` store to the same word supersedes it.
                // SAFETY: as in `commit`: the slot's first word, exclusive to this writer.
                unsafe { AtomicU64::from_ptr(record) }
                    .store(durable_filler(words), Ordering::Relaxed);
                Some(Slot {
                    record,
                    words,
                    kind: SlotKind::Durable,
                    thread: self.thread,
                    slot: self.slot,
                    inner: self.inner,
                    _borrow: PhantomData,
                })
            }
            Err(offset) => {
                self.inner.on_durable_full(offset);
                self.count_drop();
                None
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotKind {
    /// In the thread's current chunk: committing advances its cursor.
    Chunk,
    /// In a run of its own (record larger than a chunk).
    Run,
    /// In the durable buffer.
    Durable,
}

/// Reserved space for one record. Write the payload, then [`Slot::commit`] the header word.
pub struct Slot<'w> {
    record: *mut u64,
    words: usize,
    kind: SlotKind,
    thread: &'static ThreadState,
    slot: &'w WriterSlot,
    /// The context, for the shared header's running drop count.
    inner: &'w Inner,
    _borrow: PhantomData<&'w mut ()>,
}

impl std::fmt::Debug for Slot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("words", &self.words)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Slot<'_> {
    /// Record size in words, header included.
    pub fn words(&self) -> usize {
        self.words
    }

    /// The payload words (everything after the header word). They hold stale bytes: write
    /// every one.
    #[inline]
    pub fn payload(&mut self) -> &mut [u64] {
        // SAFETY: the reservation gives this slot exclusive use of `words` words at `record`;
        // no one reads them before the header is committed (readers stop at the zero header,
        // and the engine hands buffers over only after this writer leaves its section).
        unsafe { std::slice::from_raw_parts_mut(self.record.add(1), self.words - 1) }
    }

    /// Publish the record: store `header_word` (its size field set to [`Self::words`]) with
    /// `Release`, after the payload.
    #[inline]
    pub fn commit(self, header_word: u64) {
        let header = with_record_size_words(header_word, self.words as u64);
        // ATOMICS: `Release`: a reader that sees the header sees the payload and the terminator.
        // SAFETY: `record` is 8-aligned and inside our reservation.
        unsafe { AtomicU64::from_ptr(self.record) }.store(header, Ordering::Release);
        match self.kind {
            SlotKind::Chunk => {
                let mut chunk = self.thread.chunk.get();
                // SAFETY: the record lies in the current chunk, so this stays within it.
                chunk.pos = unsafe { self.record.add(self.words) };
                self.thread.chunk.set(chunk);
            }
            // ATOMICS: `Release`: the run's record is complete (see `WriterSlot::run_hold`).
            SlotKind::Run => self.slot.run_hold.store(0, Ordering::Release),
            SlotKind::Durable => {}
        }
        std::mem::forget(self);
    }
}

impl Drop for Slot<'_> {
    /// Not committed: the record is dropped (and counted). A durable slot is turned into a
    /// String record of index 0 (which readers must ignore) so the durable data stays dense.
    fn drop(&mut self) {
        // ATOMICS: `Relaxed` load + store: only this thread writes its counter.
        let dropped = self.slot.dropped.load(Ordering::Relaxed);
        self.slot.dropped.store(dropped + 1, Ordering::Relaxed);
        self.inner.publish_drop();
        if self.kind == SlotKind::Run {
            // ATOMICS: `Release`, as in `commit`.
            self.slot.run_hold.store(0, Ordering::Release);
        }
        if self.kind == SlotKind::Durable {
            self.payload().fill(0);
            // ATOMICS: `Release`, as a commit.
            // SAFETY: as in `commit`.
            unsafe { AtomicU64::from_ptr(self.record) }
                .store(durable_filler(self.words), Ordering::Release);
        }
    }
}

/// The header of a durable slot not (or not yet) committed: a String record of index 0 and
/// length 0 (which readers ignore) of the slot's `words`, so that the durable data stays
/// dense.
fn durable_filler(words: usize) -> u64 {
    const STRING_RECORD: u64 = 2;
    with_record_size_words(STRING_RECORD, words as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_out_of_the_service_routine_leaves_no_section_behind() {
        let t = thread_state();
        t.busy.set(true);
        let caught = std::panic::catch_unwind(|| {
            let _leaving = LeavingOnUnwind(thread_state());
            panic!("a buffer handler panics");
        });
        assert!(caught.is_err());
        assert!(!in_any_section(), "busy cleared on unwind");
    }

    /// A writer on the installed path that finds its slot's `wanted` flag when it leaves (a
    /// buffer hand-off's scan saw it inside its section) reports, clears the flag and leaves:
    /// the Rust facade's path, and the C API's `_static` one, which finishes the case itself.
    /// The only test of this binary that installs a context.
    #[test]
    fn installed_writers_that_find_their_slot_wanted_serve_and_leave() {
        use crate::trace::{instant, Scope};

        let session = crate::standalone::start(crate::BufferingMode::Circular, 1 << 20)
            .expect("a standalone session");
        let wanted = || {
            let t = thread_state();
            // SAFETY: bound (the first call below binds the thread): the slot is in the
            // table its lease keeps alive.
            unsafe { &(*t.slot.get()).wanted }
        };
        // The first calls bind the thread and fill its memos; the next ones take the
        // installed path.
        let calls: [&dyn Fn(); 2] = [
            &|| instant("test", "wanted", Scope::Thread, &[]),
            #[cfg(feature = "c-api")]
            // SAFETY: C string literals: static, NUL-terminated.
            &|| unsafe { crate::c_api::fxtrace_instant_static(c"test".as_ptr(), c"c".as_ptr()) },
            #[cfg(not(feature = "c-api"))]
            &|| instant("test", "wanted", Scope::Thread, &[]),
        ];
        let mut written = 0;
        for call in calls {
            call();
            call();
            wanted().store(true, Ordering::Relaxed);
            call();
            assert!(!wanted().load(Ordering::Relaxed), "the writer reported");
            assert!(!in_any_section(), "and left its section");
            call();
            written += 4;
        }
        let (bytes, report) = session.finish_to_vec().expect("finish");
        assert_eq!(report.stop.records_dropped, 0);
        // This test's events only (another test of this binary may call the C API while
        // the session is installed).
        let events = crate::format::Decoder::new(&bytes)
            .map(|r| r.expect("decodes"))
            .filter(|r| {
                matches!(&r.record, crate::format::DecodedRecord::Event(e) if e.category == "test")
            })
            .count();
        assert_eq!(events, written, "every call written, once");
    }
}

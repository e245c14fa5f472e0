//! The process-wide current context: how instrumentation finds the engine.
//!
//! A provider (the provider client, a standalone session, a test) *installs* a [`Context`];
//! instrumentation anywhere in the process then reaches it through [`with_current`] or
//! [`with_writer`], without locks. This is Fuchsia's `g_context` with its acquire/release
//! (`trace_acquire_context` / `trace_release_context`), minus the shared reference count that
//! every writer increments there (one shared read-modify-write per record collapses under
//! contention: 20 ns a record on one thread became 150–210 ns on each of two threads sharing
//! the atomic, measured on the first design's machine).
//!
//! # Algorithm
//!
//! Quiescent-state-based reclamation ("urcu-memb", Desnoyers et al., IEEE TPDS 2012; the same
//! scheme as the engine's writer slots, `engine::slots`) applied to one pointer:
//!
//! - `CURRENT` points to a heap-allocated `Context` (or is null).
//! - Each thread that reads it owns a *reader slot* (leased once, from a list of blocks that
//!   only grows). A read-side section stores an odd sequence number into the thread's slot,
//!   fences (a compiler fence when `membarrier(PRIVATE_EXPEDITED)` is available, else
//!   `fence(SeqCst)`), loads `CURRENT`, uses the context, and stores the next (even) number
//!   with `Release`. Two plain stores to the thread's own cache line: nothing shared is
//!   written.
//! - [`uninstall`] / [`replace`] swap the pointer, run the heavy fence (`membarrier`, or
//!   `fence(SeqCst)`), snapshot every slot holding an odd number, and wait until each has
//!   changed. By the Dekker pattern, a reader either saw the new pointer or was seen in its
//!   section; once every such section has ended (its `Release` store observed with
//!   `Acquire`), no thread can still hold the old pointer, and it is freed (the `Context` is
//!   handed back to the caller).
//!
//! Sections are short (one record) unless a [`with_current`] closure is long: `uninstall`
//! waits for it, sleeping rather than spinning after a few rounds. Calling `uninstall` from
//! inside a section of the same thread is refused ([`GlobalError::InsideSection`]) instead of
//! waiting for itself.
//!
//! # For the provider client
//!
//! ```text
//! global::install(context.clone())?;                  // calls find it stopped: no record
//! record::start_trace(&context, mode, categories)?;   // initialization record, then the gate
//! ...
//! let context = global::uninstall()?;                 // no thread reaches it any more
//! context.stop(timeout)?;                             // no writer is in flight
//! ```
//!
//! Installing before or after the start are both fine: the start writes the initialization
//! record before it opens the gate that lets writers in, so it is the first record of the
//! trace either way. A context may also stay installed across stop and start (calls find it
//! stopped and write nothing).
//!
//! # fork
//!
//! In a child created by `fork`, the parent's context is forgotten (the child would otherwise
//! write into the parent's shared buffer with the parent's per-thread state): a
//! `pthread_atfork` child handler clears `CURRENT` (leaking, in the child, the parent's
//! heap copy: its other threads do not exist there), resets every reader slot but the
//! caller's, and resets the calling thread's caches. The child may install its own context.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::Duration;

use crossbeam_utils::{Backoff, CachePadded};

use super::cache;
use super::context::Context;
use super::record::TraceWriter;
use super::slots::{FencePolicy, Fences};
use super::writer;
use crate::sys::SysError;

/// Errors of install and uninstall.
#[derive(Debug, thiserror::Error)]
pub enum GlobalError {
    /// [`install`] found a context already installed (use [`replace`]).
    #[error("a trace context is already installed in this process")]
    AlreadyInstalled,
    /// Called from inside a [`with_current`] / [`with_writer`] section of the same thread,
    /// which the call would have to wait for.
    #[error("install/uninstall called from inside a section that uses the current context")]
    InsideSection,
    /// The heavy fence (`membarrier`) failed: readers cannot be proven gone.
    #[error(transparent)]
    Fence(#[from] SysError),
}

// === the pointer ===

/// Rules: the installed context (a leaked `Box<Context>`), or null. Written only under
/// [`LOCK`] (install, replace, uninstall) and by the fork child handler; read by every
/// section.
/// ATOMICS: stores `Release` (the boxed `Context` is initialised before it is published);
/// section loads `Acquire`. The swap that retires a pointer is ordered before the slot scan
/// by the heavy fence.
static CURRENT: AtomicPtr<Context> = AtomicPtr::new(ptr::null_mut());

/// Rules: the id of the installed context's engine (`Inner::id`, never 0), or 0 when none
/// is installed; written with [`CURRENT`], under [`LOCK`] (and by the fork child handler).
/// Read by the installed context's one-announcement path (`writer::with_installed_writer`),
/// after the thread announced itself in its writer slot.
/// ATOMICS: stores `Release` after the `CURRENT` store; the path's load is `Acquire`. A
/// retiring store is ordered before the writer-slot scan by the grace period's heavy fence.
static INSTALLED_ID: AtomicU64 = AtomicU64::new(0);

/// The installed context's engine id, 0 when none is installed (see [`INSTALLED_ID`]).
#[inline(always)]
pub(crate) fn installed_id() -> u64 {
    // ATOMICS: `Acquire`: see `INSTALLED_ID`.
    INSTALLED_ID.load(Ordering::Acquire)
}

/// Serialises install, replace and uninstall (never taken on the record path).
static LOCK: Mutex<()> = Mutex::new(());

/// Rules: whether readers may use a compiler fence (`membarrier` registered); set once, under
/// [`LOCK`], before the first pointer is published.
/// ATOMICS: `Relaxed`: a reader that sees `false` uses `fence(SeqCst)`, which is always
/// sufficient; `true` is stored only after the registration succeeded, and every heavy fence
/// then uses `membarrier`.
static MEMBARRIER: AtomicBool = AtomicBool::new(false);

fn fences() -> Fences {
    static FENCES: OnceLock<Fences> = OnceLock::new();
    *FENCES.get_or_init(|| Fences::new(FencePolicy::Auto))
}

// === reader slots ===

/// One thread's read-side announcement.
#[derive(Debug)]
struct ReaderSlot {
    /// Rules: written only by the owning thread: odd inside a section, even outside; read by
    /// grace-period scans.
    /// ATOMICS: entering stores `Relaxed` then fences (see module docs); leaving stores
    /// `Release`, pairing with the scan's `Acquire`, so the section's uses of the context
    /// happen before it is freed.
    seq: AtomicU64,
    /// Rules: lease flag: set by the claiming thread (CAS), cleared by it at thread exit.
    /// ATOMICS: `Acquire` CAS / `Release` clear: the next owner sees the last `seq`.
    in_use: AtomicBool,
}

impl ReaderSlot {
    const fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            in_use: AtomicBool::new(false),
        }
    }
}

const BLOCK_SLOTS: usize = 64;

/// A block of reader slots; blocks form a list that only grows (bounded by the largest
/// number of threads alive at once) and is never freed.
#[derive(Debug)]
struct Block {
    slots: [CachePadded<ReaderSlot>; BLOCK_SLOTS],
    /// Rules: the next block, set once (CAS from null) by the thread that appends it.
    /// ATOMICS: `AcqRel` CAS / `Acquire` loads: the new block's slots are initialised
    /// before it is reachable.
    next: AtomicPtr<Block>,
}

#[allow(clippy::declare_interior_mutable_const)] // array-repeat initialiser only
const FREE_SLOT: CachePadded<ReaderSlot> = CachePadded::new(ReaderSlot::new());

impl Block {
    const fn new() -> Self {
        Self {
            slots: [FREE_SLOT; BLOCK_SLOTS],
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    fn next(&self) -> Option<&'static Block> {
        // ATOMICS: `Acquire`: see `Block::next`.
        // SAFETY: a non-null `next` is a leaked `Box<Block>`, never freed.
        unsafe { self.next.load(Ordering::Acquire).as_ref() }
    }
}

static FIRST_BLOCK: Block = Block::new();

fn blocks() -> impl Iterator<Item = &'static Block> {
    std::iter::successors(Some(&FIRST_BLOCK), |b| b.next())
}

fn all_slots() -> impl Iterator<Item = &'static ReaderSlot> {
    blocks().flat_map(|b| b.slots.iter().map(|s| &**s))
}

/// Claim a free slot, appending a block when all are taken.
fn lease_slot() -> &'static ReaderSlot {
    let mut block = &FIRST_BLOCK;
    loop {
        for slot in block.slots.iter() {
            // ATOMICS: see `ReaderSlot::in_use`.
            if !slot.in_use.load(Ordering::Relaxed)
                && slot
                    .in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return slot;
            }
        }
        block = match block.next() {
            Some(next) => next,
            None => {
                let fresh = Box::into_raw(Box::new(Block::new()));
                // ATOMICS: `AcqRel`: publish our block, or see the winner's.
                match block.next.compare_exchange(
                    ptr::null_mut(),
                    fresh,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    // SAFETY: just leaked, never freed.
                    Ok(_) => unsafe { &*fresh },
                    Err(winner) => {
                        // SAFETY: `fresh` was never published; we still own it.
                        drop(unsafe { Box::from_raw(fresh) });
                        // SAFETY: a published block is never freed.
                        unsafe { &*winner }
                    }
                }
            }
        };
    }
}

// === per-thread state ===

/// The thread's reader state: plain data, `const`-initialised, no destructor.
struct Local {
    /// The leased slot (null until the first section; null again after thread-exit clean-up).
    slot: Cell<*const ReaderSlot>,
    /// Local copy of the slot's `seq`.
    seq: Cell<u64>,
    /// Nesting depth of sections (only the outermost one announces).
    depth: Cell<u32>,
    /// The thread is exiting: no new lease.
    dead: Cell<bool>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            slot: Cell::new(ptr::null()),
            seq: Cell::new(0),
            depth: Cell::new(0),
            dead: Cell::new(false),
        }
    };

    /// Gives the slot back when the thread exits. Touched only when leasing (cold).
    static LEASE: Lease = const { Lease { slot: Cell::new(ptr::null()) } };
}

struct Lease {
    slot: Cell<*const ReaderSlot>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let slot = self.slot.get();
        let _ = LOCAL.try_with(|l| {
            l.slot.set(ptr::null());
            l.dead.set(true);
        });
        // SAFETY: slots live forever (static or leaked blocks).
        if let Some(slot) = unsafe { slot.as_ref() } {
            // ATOMICS: see `ReaderSlot::in_use`; `seq` is even (no section is open while the
            // thread's thread-locals are destroyed, sections being scoped to calls).
            slot.in_use.store(false, Ordering::Release);
        }
    }
}

#[cold]
#[inline(never)]
fn bind(local: &Local) -> Option<&'static ReaderSlot> {
    if local.dead.get() {
        return None;
    }
    LEASE
        .try_with(|lease| {
            let slot = lease_slot();
            lease.slot.set(slot);
            // ATOMICS: `Relaxed`: our `Acquire` CAS ordered the previous owner's last store.
            local.seq.set(slot.seq.load(Ordering::Relaxed));
            local.slot.set(slot);
            slot
        })
        .ok()
}

#[inline(always)]
fn local() -> &'static Local {
    // SAFETY: `LOCAL` has a const initialiser and no destructor: its storage lives as long as
    // the thread, and the reference never leaves the thread (`Section` is `!Send`).
    LOCAL.with(|l| unsafe { &*(l as *const Local) })
}

#[inline(always)]
fn light_fence() {
    // ATOMICS: see `MEMBARRIER`.
    if MEMBARRIER.load(Ordering::Relaxed) {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// A read-side section on the calling thread: while it lives, the pointer loaded from
/// [`CURRENT`] stays valid.
struct Section {
    local: &'static Local,
    slot: &'static ReaderSlot,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Section {
    #[inline(always)]
    fn enter() -> Option<Section> {
        let local = local();
        // SAFETY: a non-null `slot` is a slot leased by this thread; slots live forever.
        let slot = match unsafe { local.slot.get().as_ref() } {
            Some(slot) => slot,
            None => bind(local)?,
        };
        let depth = local.depth.get();
        local.depth.set(depth + 1);
        if depth == 0 {
            let seq = local.seq.get() + 1;
            local.seq.set(seq);
            // ATOMICS: `Relaxed` + the light fence: see `ReaderSlot::seq`.
            slot.seq.store(seq, Ordering::Relaxed);
            light_fence();
        }
        Some(Section {
            local,
            slot,
            _not_send: std::marker::PhantomData,
        })
    }

    /// Whether the calling thread is inside a section.
    fn is_open() -> bool {
        LOCAL.with(|l| l.depth.get() > 0)
    }
}

impl Drop for Section {
    #[inline(always)]
    fn drop(&mut self) {
        let depth = self.local.depth.get() - 1;
        self.local.depth.set(depth);
        if depth == 0 {
            let seq = self.local.seq.get() + 1;
            self.local.seq.set(seq);
            // ATOMICS: `Release`: see `ReaderSlot::seq`.
            self.slot.seq.store(seq, Ordering::Release);
        }
    }
}

// === readers ===

/// Run `f` with the installed context; `None` when none is installed. Lock-free: two stores
/// to the thread's own slot, a fence that is free with `membarrier`, one load. Keep `f`
/// short: [`uninstall`] waits for it.
#[inline]
pub fn with_current<R>(f: impl FnOnce(&Context) -> R) -> Option<R> {
    let _section = Section::enter()?;
    // ATOMICS: `Acquire`: pairs with the `Release` store of install/replace.
    let current = CURRENT.load(Ordering::Acquire);
    // SAFETY: a non-null pointer was published by install/replace and is freed only after a
    // grace period that waits for this section (it was open before we loaded the pointer:
    // either the retiring swap came after our load, or the scan saw our odd `seq`).
    let context = unsafe { current.as_ref() }?;
    Some(f(context))
}

/// Run `f` with a [`TraceWriter`] on the installed context; `None` when none is installed,
/// tracing is off, or the writer section was refused (counted).
#[inline]
pub fn with_writer<R>(f: impl FnOnce(&mut TraceWriter<'_>) -> R) -> Option<R> {
    with_current(|context| context.trace_writer().map(|mut w| f(&mut w))).flatten()
}

/// A clone of the installed context (an `Arc` increment: not for the record path).
pub fn current() -> Option<Context> {
    with_current(Context::clone)
}

/// Whether a context is installed.
pub fn is_installed() -> bool {
    // ATOMICS: `Relaxed`: an instantaneous answer, nothing is dereferenced.
    !CURRENT.load(Ordering::Relaxed).is_null()
}

// === writers of the pointer ===

/// Whether the calling thread is inside a read-side or a writer section, which a grace
/// period would wait for.
fn inside_section() -> bool {
    Section::is_open() || writer::in_any_section()
}

fn lock() -> MutexGuard<'static, ()> {
    // The guarded data is `()`: a poisoned lock protects nothing that could be inconsistent.
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// First install: choose the fence pair and register the fork handler.
fn prepare() {
    // ATOMICS: `Relaxed`: see `MEMBARRIER`.
    MEMBARRIER.store(fences().uses_membarrier(), Ordering::Relaxed);
    static AT_FORK: Once = Once::new();
    AT_FORK.call_once(|| {
        // SAFETY: `child_after_fork` is an `extern "C"` function with no arguments that only
        // performs atomic and thread-local stores (async-signal-safe). A failure (ENOMEM)
        // leaves fork unhandled, which only matters if the child traces.
        unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) };
    });
}

/// Install `context` as the process's current context. Fails if one is already installed.
pub fn install(context: Context) -> Result<(), GlobalError> {
    if inside_section() {
        return Err(GlobalError::InsideSection);
    }
    let _guard = lock();
    prepare();
    // ATOMICS: `Relaxed`: only writers (under `LOCK`) store the pointer.
    if !CURRENT.load(Ordering::Relaxed).is_null() {
        return Err(GlobalError::AlreadyInstalled);
    }
    let id = context.inner().id;
    let boxed = Box::into_raw(Box::new(context));
    // ATOMICS: `Release`: see `CURRENT`.
    CURRENT.store(boxed, Ordering::Release);
    // ATOMICS: `Release`: see `INSTALLED_ID`.
    INSTALLED_ID.store(id, Ordering::Release);
    Ok(())
}

/// Install `context` in place of the current one (if any), which is returned once no thread
/// can reach it any more.
pub fn replace(context: Context) -> Result<Option<Context>, GlobalError> {
    if inside_section() {
        return Err(GlobalError::InsideSection);
    }
    let _guard = lock();
    prepare();
    let id = context.inner().id;
    let boxed = Box::into_raw(Box::new(context));
    // ATOMICS: `AcqRel`: publish the new context (`Release`), and read the old one.
    let old = CURRENT.swap(boxed, Ordering::AcqRel);
    // ATOMICS: `Release`: see `INSTALLED_ID`.
    INSTALLED_ID.store(id, Ordering::Release);
    retire(old)
}

/// Remove the current context; it is returned once no thread can reach it any more (every
/// section that might have loaded it has ended). Writers already inside the context's own
/// writer sections are then also done, since those sections nest inside reader sections.
pub fn uninstall() -> Result<Option<Context>, GlobalError> {
    if inside_section() {
        return Err(GlobalError::InsideSection);
    }
    let _guard = lock();
    // ATOMICS: `AcqRel`, as in `replace`.
    let old = CURRENT.swap(ptr::null_mut(), Ordering::AcqRel);
    // ATOMICS: `Release`: see `INSTALLED_ID`.
    INSTALLED_ID.store(0, Ordering::Release);
    retire(old)
}

/// Uninstall only if the installed context is `context` (same shared state). Returns whether
/// it was.
pub(crate) fn uninstall_if(context: &Context) -> Result<bool, GlobalError> {
    if inside_section() {
        return Err(GlobalError::InsideSection);
    }
    let _guard = lock();
    // ATOMICS: `Relaxed`: writers are serialised by `LOCK`.
    let current = CURRENT.load(Ordering::Relaxed);
    // SAFETY: under `LOCK` nobody frees the installed context.
    let same = unsafe { current.as_ref() }
        .is_some_and(|c| std::sync::Arc::ptr_eq(c.inner(), context.inner()));
    if !same {
        return Ok(false);
    }
    // ATOMICS: `Release`, as every store of `CURRENT` (a null publishes nothing; ordered
    // before the grace period's scan by its heavy fence).
    CURRENT.store(ptr::null_mut(), Ordering::Release);
    // ATOMICS: `Release`: see `INSTALLED_ID`.
    INSTALLED_ID.store(0, Ordering::Release);
    retire(current)?;
    Ok(true)
}

/// Wait for a grace period, then free `old` (a pointer taken out of [`CURRENT`]).
fn retire(old: *mut Context) -> Result<Option<Context>, GlobalError> {
    if old.is_null() {
        return Ok(None);
    }
    // SAFETY: `old` came from `Box::into_raw` and is freed below, not before.
    let slots = &unsafe { &*old }.inner().slots;
    if let Err(error) = synchronize().and_then(|()| slots.wait_quiescent(fences())) {
        // Readers cannot be proven gone: keep the box alive forever rather than risk a
        // use-after-free; the caller learns why.
        return Err(error.into());
    }
    // SAFETY: `old` came from `Box::into_raw` in install/replace, was removed from `CURRENT`
    // under `LOCK` (so exactly once), and the grace period proved no section still uses it.
    let boxed = unsafe { Box::from_raw(old) };
    Ok(Some(*boxed))
}

/// The grace period: heavy fence, snapshot of the sections in progress, wait for each to end.
fn synchronize() -> Result<(), SysError> {
    fences().heavy()?;
    let mut waiting: Vec<(&'static ReaderSlot, u64)> = all_slots()
        .filter_map(|slot| {
            // ATOMICS: `Acquire`: pairs with the readers' `Release` leaving stores.
            let seq = slot.seq.load(Ordering::Acquire);
            (seq & 1 == 1).then_some((slot, seq))
        })
        .collect();
    let backoff = Backoff::new();
    while !waiting.is_empty() {
        // ATOMICS: `Acquire`, as above: a changed value ends that section.
        waiting.retain(|(slot, seq)| slot.seq.load(Ordering::Acquire) == *seq);
        if waiting.is_empty() {
            break;
        }
        if backoff.is_completed() {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            backoff.snooze();
        }
    }
    Ok(())
}

/// `pthread_atfork` child handler: see the module docs ("fork").
extern "C" fn child_after_fork() {
    // ATOMICS: `Relaxed` everywhere: the child has a single thread.
    CURRENT.store(ptr::null_mut(), Ordering::Relaxed);
    INSTALLED_ID.store(0, Ordering::Relaxed);
    let own = LOCAL.with(|l| l.slot.get());
    for slot in all_slots() {
        if !ptr::eq(slot, own) {
            let seq = slot.seq.load(Ordering::Relaxed);
            slot.seq.store(seq + (seq & 1), Ordering::Relaxed);
            slot.in_use.store(false, Ordering::Relaxed);
        }
    }
    cache::forget_ids_after_fork();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_leased_released_and_the_list_grows() {
        let held: Vec<_> = (0..BLOCK_SLOTS + 3).map(|_| lease_slot()).collect();
        assert!(blocks().count() >= 2);
        for (i, a) in held.iter().enumerate() {
            for b in &held[i + 1..] {
                assert!(!ptr::eq(*a, *b), "a slot leased twice");
            }
        }
        for slot in &held {
            slot.in_use.store(false, Ordering::Release);
        }
    }

    #[test]
    fn grace_period_waits_for_an_open_section() {
        let slot = lease_slot();
        slot.seq.store(1, Ordering::Relaxed);
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let waiter = {
            let done = done.clone();
            std::thread::spawn(move || {
                synchronize().unwrap();
                done.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !done.load(Ordering::SeqCst),
            "returned while a section was open"
        );
        slot.seq.store(2, Ordering::Release);
        waiter.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        slot.in_use.store(false, Ordering::Release);
    }
}

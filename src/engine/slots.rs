//! Writer slots: how the engine knows that no writer is still inside a buffer.
//!
//! Algorithm: quiescent-state-based grace periods over per-thread sequence counters, with an
//! asymmetric fence — the "urcu-memb" flavour of userspace RCU (M. Desnoyers et al., "User-Level
//! Implementations of Read-Copy Update", IEEE TPDS 23(2), 2012; Linux `membarrier(2)`).
//!
//! Each writer thread leases one [`WriterSlot`]. Entering a writer section (acquiring the
//! context) stores an odd `seq`; leaving it stores the next, even, value. Both are plain stores to
//! the thread's own cache line: no read-modify-write, nothing shared, per record.
//!
//! To retire a buffer (switch, stop), the engine first changes the *gate* word that every writer
//! reads after announcing itself, then runs a grace period:
//!
//! 1. heavy fence ([`Fences::heavy`]),
//! 2. snapshot every slot's `seq`; odd values are writers that may still be in the old buffer,
//! 3. the grace period is over once each of them has moved on (its `seq` differs).
//!
//! Writers that announce themselves after step 1 are guaranteed to read the new gate, so they
//! never touch the retired buffer. The heavy fence is `membarrier(PRIVATE_EXPEDITED)`, which
//! makes every running thread of the process execute a full barrier; the writer's side then only
//! needs a compiler fence between its `seq` store and its gate load (the Dekker pattern with one
//! side's fence moved to the kernel). Where membarrier is unavailable both sides use
//! `fence(SeqCst)` instead.
//!
//! A writer found in flight is asked to report when it leaves: the engine sets its slot's
//! `wanted` flag, fences again, and re-reads `seq`. A writer leaving its section stores `seq`,
//! fences (light), and reads `wanted`; if set, it runs the service routine that completes the
//! hand-off. So the last writer out of a retired buffer finishes the hand-off without any thread
//! polling, and idle threads (not in a section) never delay it: their chunk of the old buffer is
//! simply abandoned, since their next record re-reads the gate first.

use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use std::time::Duration;

use crossbeam_utils::{Backoff, CachePadded};

use crate::sys::{self, SysError};

/// One writer thread's announcement word and counters.
#[derive(Debug, Default)]
pub(crate) struct WriterSlot {
    /// Rules: written only by the owning thread: odd while it is inside a writer section, even
    /// otherwise, increasing by one at each transition. Read by grace-period scans.
    /// ATOMICS: entering stores `Release` (so a scanner that reads the new odd value also sees
    /// every record the owner committed before) and is followed by the light fence; leaving
    /// stores `Release` (publishes the records written in the section to the scanner's
    /// `Acquire` load).
    pub(crate) seq: AtomicU64,
    /// Rules: records dropped by the owning thread; only the owner writes it (load + store,
    /// no RMW), anyone may read it. Exact once the owner is quiescent.
    /// ATOMICS: `Relaxed`: a counter; the stop path reads it after a grace period, whose
    /// `Acquire` on `seq` orders it.
    pub(crate) dropped: AtomicU64,
    /// Rules: set by a grace-period scan (under the engine's switch mutex) when it must learn
    /// that the owner left its current section; cleared by the owner when it sees it.
    /// ATOMICS: `Relaxed` store, then the heavy fence; the owner's light fence sits between its
    /// leaving `seq` store and its load of this flag.
    pub(crate) wanted: AtomicBool,
    /// Rules: the chunk the owner writes records into ([`super::allocator::make_hold`]), or 0.
    /// Written only by the owner, when it takes a new chunk (before writing into it); read by
    /// a circular-mode switch for writers that have been in flight since the buffer being
    /// reused was retired, to pin that chunk.
    /// ATOMICS: `Release` store / `Acquire` load: a switch that sees a hold elsewhere also sees
    /// the owner's writes to its previous chunk completed.
    pub(crate) chunk_hold: AtomicU64,
    /// Rules: `HOLD_ALLOCATING` from just before the owner's `fetch_add` on the rolling word
    /// until it knows what it got; then the hold of a run it writes a large record into (until
    /// that record is committed or dropped), or 0. Written only by the owner.
    /// ATOMICS: the `HOLD_ALLOCATING` store is `Relaxed` followed by the light fence, so any
    /// switch whose heavy fence follows the `fetch_add` sees it; other stores `Release` and
    /// loads `Acquire`, as `chunk_hold`.
    pub(crate) run_hold: AtomicU64,
    /// Rules: lease flag; set by the thread that claims the slot (CAS), cleared by the same
    /// thread when it exits or moves to another context.
    /// ATOMICS: `Acquire` CAS / `Release` clear, so the next owner sees the previous owner's
    /// final `seq`.
    pub(crate) in_use: AtomicBool,
}

/// How writers and the engine order "announce, then read the gate" against "change the gate,
/// then scan".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencePolicy {
    /// `membarrier(PRIVATE_EXPEDITED)` on the engine side and a compiler fence on the writer
    /// side when the kernel supports it; otherwise `SeqCstFences`.
    Auto,
    /// `fence(SeqCst)` on both sides (about 5–10 ns more per record on x86).
    SeqCstFences,
}

/// The fence pair selected for a context.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fences {
    membarrier: bool,
}

fn membarrier_available() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| sys::membarrier_register_private_expedited().is_ok())
}

impl Fences {
    /// `fence(SeqCst)` on both sides (no `membarrier`): what a thread bound to no context
    /// holds.
    pub(crate) const SEQ_CST: Fences = Fences { membarrier: false };

    pub(crate) fn new(policy: FencePolicy) -> Self {
        let membarrier = match policy {
            FencePolicy::Auto => membarrier_available(),
            FencePolicy::SeqCstFences => false,
        };
        Self { membarrier }
    }

    /// Whether the heavy side is `membarrier`.
    pub(crate) fn uses_membarrier(self) -> bool {
        self.membarrier
    }

    /// The writer side, between its `seq` store and its next load of shared state.
    ///
    /// ATOMICS: with membarrier, a compiler fence suffices: the engine's `membarrier` call
    /// executes a full barrier on this thread at some point P, and everything this thread did
    /// before P is visible to the engine after the call, while everything after P sees what the
    /// engine stored before the call. Without it, `fence(SeqCst)` pairs with the engine's.
    #[inline(always)]
    pub(crate) fn light(self) {
        if !self.membarrier {
            fence(Ordering::SeqCst);
        }
        // Implied by the fence; alone, it is the whole of the light fence. Written after the
        // branch, not in an arm of its own, so that the fast case is one test and one jump.
        compiler_fence(Ordering::SeqCst);
    }

    /// The engine side (switch, stop): slow, never on the record path.
    pub(crate) fn heavy(self) -> Result<(), SysError> {
        if self.membarrier {
            sys::membarrier_private_expedited()?;
        }
        // ATOMICS: also a SeqCst fence, which is what pairs with writers in fence mode and
        // orders this thread's own accesses around the membarrier call.
        fence(Ordering::SeqCst);
        Ok(())
    }
}

/// A snapshot of writers in flight: `seq` values by slot index, 0 where the slot was quiescent
/// or has moved on.
#[derive(Debug, Default)]
pub(crate) struct Grace {
    seqs: Vec<u64>,
}

impl Grace {
    pub(crate) fn with_capacity(slots: usize) -> Self {
        Self {
            seqs: Vec::with_capacity(slots),
        }
    }

    /// Forget everything (no writer to wait for).
    pub(crate) fn clear(&mut self) {
        self.seqs.clear();
    }
}

/// The fixed table of writer slots of one context.
#[derive(Debug)]
pub(crate) struct WriterSlots {
    slots: Box<[CachePadded<WriterSlot>]>,
    /// Rules: one past the highest slot index ever leased; raised by leasing threads with
    /// `fetch_max`, never lowered. Scans read slots `0..high_water`.
    /// ATOMICS: `Release` fetch_max / `Acquire` load; a thread leasing slot `i` raises it before
    /// its first announcement, and the heavy fence makes either the raise visible to the scan or
    /// the new gate visible to the thread.
    high_water: CachePadded<AtomicUsize>,
}

impl WriterSlots {
    pub(crate) fn new(count: usize) -> Self {
        let slots = (0..count)
            .map(|_| CachePadded::new(WriterSlot::default()))
            .collect();
        Self {
            slots,
            high_water: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Slots ever leased (one past the highest index).
    pub(crate) fn high_water(&self) -> usize {
        // ATOMICS: `Acquire`: see `high_water`.
        self.high_water.load(Ordering::Acquire)
    }

    pub(crate) fn get(&self, index: usize) -> &WriterSlot {
        &self.slots[index]
    }

    /// Claim a free slot for the calling thread.
    pub(crate) fn lease(&self) -> Option<usize> {
        for (index, slot) in self.slots.iter().enumerate() {
            // ATOMICS: `Acquire` on success: see the previous owner's last `seq` (its `Release`
            // clear of `in_use` follows its last `seq` store). A failed CAS just moves on.
            if !slot.in_use.load(Ordering::Relaxed)
                && slot
                    .in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // A previous owner's holds are meaningless for the new one (and would only cause
                // needless pins). ATOMICS: `Release`, as every hold store.
                slot.chunk_hold.store(0, Ordering::Release);
                slot.run_hold.store(0, Ordering::Release);
                // ATOMICS: `Release`, see `high_water`.
                self.high_water.fetch_max(index + 1, Ordering::Release);
                return Some(index);
            }
        }
        None
    }

    /// Give a slot back (its owner is quiescent: its `seq` is even).
    pub(crate) fn release(&self, index: usize) {
        if let Some(slot) = self.slots.get(index) {
            // ATOMICS: `Relaxed`: published by the `Release` clear of `in_use` below.
            slot.wanted.store(false, Ordering::Relaxed);
            // ATOMICS: `Release`: the next owner's `Acquire` CAS sees our final `seq`.
            slot.in_use.store(false, Ordering::Release);
        }
    }

    /// Sum of every slot's drop counter.
    pub(crate) fn dropped_total(&self) -> u64 {
        let high = self.high_water.load(Ordering::Acquire);
        // ATOMICS: `Relaxed`: counters; exactness at stop comes from the grace period.
        self.slots[..high]
            .iter()
            .map(|s| s.dropped.load(Ordering::Relaxed))
            .sum()
    }

    /// Steps 1–2 of a grace period: heavy fence, then record who is in flight. With
    /// `ask_report`, writers found in flight get their `wanted` flag so that leaving their
    /// section runs the service routine.
    pub(crate) fn begin_grace(
        &self,
        fences: Fences,
        grace: &mut Grace,
        ask_report: bool,
    ) -> Result<(), SysError> {
        fences.heavy()?;
        // ATOMICS: `Acquire`: see `high_water`.
        let high = self.high_water.load(Ordering::Acquire);
        grace.seqs.clear();
        let mut any = false;
        for slot in &self.slots[..high] {
            // ATOMICS: `Acquire`: pairs with the writers' `Release` stores of `seq`.
            let seq = slot.seq.load(Ordering::Acquire);
            let waiting = seq & 1 == 1;
            any |= waiting;
            grace.seqs.push(if waiting { seq } else { 0 });
        }
        if !any {
            grace.seqs.clear();
            return Ok(());
        }
        if ask_report {
            for (slot, &seq) in self.slots.iter().zip(&grace.seqs) {
                if seq != 0 {
                    // ATOMICS: `Relaxed`, ordered by the heavy fence that follows.
                    slot.wanted.store(true, Ordering::Relaxed);
                }
            }
            fences.heavy()?;
        }
        // Writers that left before seeing `wanted` are done; the others will report.
        self.is_grace_complete(grace);
        Ok(())
    }

    /// Step 3: has every writer of the snapshot left the section it was in? Forgets the ones
    /// that have, so repeated checks get cheaper.
    pub(crate) fn is_grace_complete(&self, grace: &mut Grace) -> bool {
        let mut complete = true;
        for (slot, seq) in self.slots.iter().zip(grace.seqs.iter_mut()) {
            if *seq != 0 {
                // ATOMICS: `Acquire`: a changed value was stored with `Release` after the
                // writer's records, so they happen-before whatever we do next (notify the
                // handler, finalise the header).
                if slot.seq.load(Ordering::Acquire) == *seq {
                    complete = false;
                } else {
                    *seq = 0;
                }
            }
        }
        if complete {
            grace.seqs.clear();
        }
        complete
    }

    /// The slots of the snapshot still in flight (after [`Self::is_grace_complete`]).
    pub(crate) fn outstanding<'a>(
        &'a self,
        grace: &'a Grace,
    ) -> impl Iterator<Item = &'a WriterSlot> + 'a {
        self.slots
            .iter()
            .zip(&grace.seqs)
            .filter(|(_, &seq)| seq != 0)
            .map(|(slot, _)| &**slot)
    }

    /// A whole grace period, waited for by the calling thread (no `wanted` flags): returns
    /// once every writer that was inside a section when it began has left it. For
    /// `global::uninstall`, whose writers may hold the context only through their slots.
    pub(crate) fn wait_quiescent(&self, fences: Fences) -> Result<(), SysError> {
        let mut grace = Grace::with_capacity(self.high_water());
        self.begin_grace(fences, &mut grace, false)?;
        let backoff = Backoff::new();
        while !self.is_grace_complete(&mut grace) {
            if backoff.is_completed() {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                backoff.snooze();
            }
        }
        Ok(())
    }

    /// Number of writers of the snapshot still in flight.
    pub(crate) fn in_flight(&self, grace: &Grace) -> usize {
        grace.seqs.iter().filter(|&&s| s != 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enter(slot: &WriterSlot) {
        slot.seq
            .store(slot.seq.load(Ordering::Relaxed) + 1, Ordering::Release);
    }

    #[test]
    fn grace_waits_only_for_writers_in_flight_at_the_snapshot() {
        let slots = WriterSlots::new(4);
        let (a, b, c) = (
            slots.lease().unwrap(),
            slots.lease().unwrap(),
            slots.lease().unwrap(),
        );
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(slots.high_water(), 3);
        enter(slots.get(a)); // a in flight
        enter(slots.get(c)); // c in flight
        let fences = Fences::new(FencePolicy::SeqCstFences);
        let mut grace = Grace::with_capacity(4);
        slots.begin_grace(fences, &mut grace, true).unwrap();
        assert!(
            slots.get(a).wanted.load(Ordering::Relaxed),
            "asked to report"
        );
        assert!(!slots.get(b).wanted.load(Ordering::Relaxed), "b was idle");
        assert_eq!(slots.in_flight(&grace), 2);
        assert!(!slots.is_grace_complete(&mut grace));
        enter(slots.get(b)); // b starts after the snapshot: not waited for
        enter(slots.get(a)); // a leaves
        assert!(!slots.is_grace_complete(&mut grace));
        assert_eq!(slots.outstanding(&grace).count(), 1);
        enter(slots.get(c)); // c leaves...
        enter(slots.get(c)); // ...and enters again: still counts as having moved on
        assert!(slots.is_grace_complete(&mut grace));
        assert_eq!(slots.in_flight(&grace), 0);
    }

    #[test]
    fn released_slots_are_leased_again_with_their_counters() {
        let slots = WriterSlots::new(1);
        let a = slots.lease().unwrap();
        assert!(slots.lease().is_none(), "capacity 1");
        slots.get(a).dropped.store(5, Ordering::Relaxed);
        slots.get(a).chunk_hold.store(42, Ordering::Relaxed);
        slots.release(a);
        assert_eq!(slots.lease(), Some(a));
        assert_eq!(slots.dropped_total(), 5, "drop counts survive owners");
        assert_eq!(
            slots.get(a).chunk_hold.load(Ordering::Relaxed),
            0,
            "holds do not"
        );
    }
}

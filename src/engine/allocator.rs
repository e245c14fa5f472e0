//! The rolling and durable allocators.
//!
//! Algorithm: Fuchsia's classic trace-engine allocator (`trace_context::AllocRecord` and
//! `AllocDurableRecord`, `zircon/system/ulib/trace-engine/context.cc`; `shared/spec/
//! fuchsia-notes.md` §1.4–1.5): one `AtomicU64` packs the rolling offset with the wrapped count,
//! and a reservation is one lock-free `fetch_add` on it. fxtrace's change is the unit: a
//! reservation takes a *run* of whole chunks (one chunk normally, several for a record larger
//! than a chunk) that a single thread then fills through a private cursor, so the shared word is
//! touched once per chunk instead of once per record.
//!
//! Packing (classic engine, §1.4) — chosen over the 2025 CAS-loop packing (§1.6) because a
//! `fetch_add` never fails and never retries, and with chunks the word is cold anyway:
//!
//! | bits    | content |
//! |---------|---------|
//! | 0..=40  | offset of the next chunk in the current rolling buffer (may run past its end) |
//! | 41..=43 | unused |
//! | 44..=63 | wrapped count modulo 2^20; bit 44 is the buffer being written |
//!
//! The engine keeps the full 32-bit wrapped count under its switch mutex and in the gate word;
//! chunk tags carry the full count. Before the `fetch_add`, a thread loads the word and gives up
//! without writing if the buffer is already full, so failed attempts do not keep pushing the
//! offset (the classic engine's "snap to end" paranoia is not needed: the offset can exceed the
//! buffer end by at most one run per racing thread).
//!
//! The durable buffer keeps the classic scheme unchanged: one `fetch_add` per durable record
//! (string, thread, initialization records are rare), dense, never reused within a trace.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// Bits of the packed word holding the offset.
pub(crate) const OFFSET_BITS: u32 = 41;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// Shift of the wrapped count in the packed word.
pub(crate) const WRAPPED_SHIFT: u32 = 44;
/// Mask of the wrapped count kept in the packed word (20 bits).
pub(crate) const WRAPPED_MASK: u32 = (1 << 20) - 1;

const _: () = assert!(OFFSET_BITS + 20 <= 64 && WRAPPED_SHIFT + 20 == 64);

/// `MakeOffsetPlusCounter`.
pub(crate) const fn pack(offset: u64, wrapped_count: u32) -> u64 {
    (offset & OFFSET_MASK) | (((wrapped_count & WRAPPED_MASK) as u64) << WRAPPED_SHIFT)
}

/// `GetBufferOffset`.
pub(crate) const fn packed_offset(word: u64) -> u64 {
    word & OFFSET_MASK
}

/// `GetWrappedCount` (20 bits).
pub(crate) const fn packed_wrapped(word: u64) -> u32 {
    (word >> WRAPPED_SHIFT) as u32
}

// === the gate word ===
//
// One word every writer reads after announcing itself: whether tracing is on, whether the
// durable buffer is full, the trace generation and the full wrapped count of the buffer being
// written. A thread's chunk stays usable only while the gate equals the value it was taken under.

/// Gate bit: tracing is started.
pub(crate) const GATE_STARTED: u64 = 1 << 63;
/// Gate bit: the durable buffer filled; every reservation is dropped (and counted).
pub(crate) const GATE_DURABLE_FULL: u64 = 1 << 62;
const GATE_GENERATION_SHIFT: u32 = 32;
/// Generations are kept modulo 2^30 in the gate.
pub(crate) const GENERATION_MASK: u32 = (1 << 30) - 1;

/// Build a gate value.
pub(crate) const fn make_gate(generation: u32, wrapped_count: u32, flags: u64) -> u64 {
    flags
        | (((generation & GENERATION_MASK) as u64) << GATE_GENERATION_SHIFT)
        | wrapped_count as u64
}

/// The full wrapped count in a gate value.
pub(crate) const fn gate_wrapped(gate: u64) -> u32 {
    gate as u32
}

/// The generation in a gate value.
pub(crate) const fn gate_generation(gate: u64) -> u32 {
    (gate >> GATE_GENERATION_SHIFT) as u32 & GENERATION_MASK
}

/// Can a writer reserve under this gate?
pub(crate) const fn gate_open(gate: u64) -> bool {
    gate & (GATE_STARTED | GATE_DURABLE_FULL) == GATE_STARTED
}

/// A run of chunks handed to one thread: `[start, end)` in some rolling buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub(crate) start: *mut u64,
    pub(crate) end: *mut u64,
    /// The gate value the run belongs to (its buffer's wrapped count).
    pub(crate) gate: u64,
}

impl Run {
    pub(crate) fn bytes(&self) -> usize {
        self.end as usize - self.start as usize
    }
}

/// Outcome of [`RollingAllocator::take_run`].
#[derive(Debug)]
pub(crate) enum Taken {
    /// A run in the current buffer (possibly shorter than asked at the buffer end).
    Run(Run),
    /// The buffer with this (20-bit) wrapped count is full.
    Full { wrapped: u32 },
    /// A buffer switch raced with the reservation; try again.
    Retry,
}

/// The rolling allocator: the packed word and where the rolling buffers are.
#[derive(Debug)]
pub(crate) struct RollingAllocator {
    /// Rules: `fetch_add` by writer threads (one per chunk run); `store` by the engine under
    /// its switch mutex when switching buffers (new count, offset 0) and when starting.
    /// ATOMICS: writers load `Relaxed` (a pre-check only) and `fetch_add` `Acquire`, pairing
    /// with the switch's `Release` store, which follows the gate store: a writer that gets a
    /// run in the new buffer then sees the new gate.
    word: CachePadded<AtomicU64>,
    starts: [*mut u8; 2],
    size: u64,
    chunk: u64,
}

// SAFETY: the raw pointers point into the trace buffer mapping owned by the same context; the
// allocator only computes addresses from them and hands out disjoint runs.
unsafe impl Send for RollingAllocator {}
// SAFETY: as above; the only shared mutable state is the atomic word.
unsafe impl Sync for RollingAllocator {}

impl RollingAllocator {
    /// `starts[1]` is unused (null) in oneshot mode.
    pub(crate) fn new(starts: [*mut u8; 2], size: u64, chunk: u64) -> Self {
        Self {
            word: CachePadded::new(AtomicU64::new(pack(0, 0))),
            starts,
            size,
            chunk,
        }
    }

    pub(crate) fn rolling_size(&self) -> u64 {
        self.size
    }

    pub(crate) fn chunk_size(&self) -> u64 {
        self.chunk
    }

    /// Current packed word.
    pub(crate) fn load(&self) -> u64 {
        // ATOMICS: `Relaxed`: readers under the switch mutex or at stop (after a grace period)
        // only need a value that is at least as new as the decisions they make.
        self.word.load(Ordering::Relaxed)
    }

    /// Reset to offset 0 of buffer `wrapped_count & 1` (switch or start; under the mutex).
    pub(crate) fn reset(&self, wrapped_count: u32) {
        // ATOMICS: `Release`: publishes the gate store that precedes it (see `word`).
        self.word.store(pack(0, wrapped_count), Ordering::Release);
    }

    /// Take a run of `chunks` chunks for a writer that read `gate` (open) and `gate_word`
    /// (where the gate lives, for a re-read when a switch raced).
    pub(crate) fn take_run(&self, chunks: u64, gate: u64, gate_word: &AtomicU64) -> Taken {
        let bytes = chunks * self.chunk;
        let current = self.word.load(Ordering::Relaxed);
        if packed_offset(current) >= self.size {
            return Taken::Full {
                wrapped: packed_wrapped(current),
            };
        }
        let previous = self.word.fetch_add(bytes, Ordering::Acquire);
        let offset = packed_offset(previous);
        let wrapped = packed_wrapped(previous);
        let run_gate = if wrapped == gate_wrapped(gate) & WRAPPED_MASK {
            gate
        } else {
            // The word moved to another buffer after we read the gate. The switch stores the
            // gate before the word, so a re-read names the buffer we got a run in (unless yet
            // another switch happened; then the run is abandoned: it carries no current tag).
            // ATOMICS: `Acquire`, pairs with the switch's `Release` gate store.
            let fresh = gate_word.load(Ordering::Acquire);
            if gate_open(fresh) && gate_wrapped(fresh) & WRAPPED_MASK == wrapped {
                fresh
            } else {
                return Taken::Retry;
            }
        };
        if offset >= self.size {
            return Taken::Full { wrapped };
        }
        let end = (offset + bytes).min(self.size);
        let base = self.starts[(wrapped & 1) as usize];
        // SAFETY: `offset < end <= size`, and `base..base+size` is rolling buffer
        // `wrapped & 1` inside the mapping (in oneshot mode the word never leaves buffer 0).
        let (start, end) = unsafe {
            (
                base.add(offset as usize).cast::<u64>(),
                base.add(end as usize).cast::<u64>(),
            )
        };
        Taken::Run(Run {
            start,
            end,
            gate: run_gate,
        })
    }
}

/// The durable allocator (circular and streaming modes).
#[derive(Debug)]
pub(crate) struct DurableAllocator {
    /// Rules: `fetch_add` by writer threads, one per durable record; reset to 0 by the engine
    /// while stopped (clearing start). May run past the buffer end once it is full.
    /// ATOMICS: `Relaxed`: the slot it yields is exclusive to the writer; publication of the
    /// record is the header word's `Release` store and the writer's `seq` store.
    current: CachePadded<AtomicU64>,
    start: *mut u8,
    size: u64,
}

// SAFETY: `start` points into the mapping owned by the same context; reservations are disjoint.
unsafe impl Send for DurableAllocator {}
// SAFETY: as above.
unsafe impl Sync for DurableAllocator {}

impl DurableAllocator {
    pub(crate) fn new(start: *mut u8, size: u64) -> Self {
        Self {
            current: CachePadded::new(AtomicU64::new(0)),
            start,
            size,
        }
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Bytes handed out so far (may exceed the size once full).
    pub(crate) fn allocated(&self) -> u64 {
        self.current.load(Ordering::Relaxed)
    }

    pub(crate) fn reset(&self) {
        self.current.store(0, Ordering::Relaxed);
    }

    /// Reserve `bytes`; `Err(offset)` when they do not fit (the buffer is full).
    pub(crate) fn reserve(&self, bytes: u64) -> Result<*mut u64, u64> {
        let offset = self.current.fetch_add(bytes, Ordering::Relaxed);
        if offset + bytes <= self.size {
            // SAFETY: `offset + bytes <= size`, inside the durable buffer.
            Ok(unsafe { self.start.add(offset as usize).cast::<u64>() })
        } else {
            Err(offset)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_matches_the_classic_layout() {
        let word = pack(0x1ff_ffff_fff8, 0xabcde);
        assert_eq!(word, 0xabcd_e1ff_ffff_fff8);
        assert_eq!(packed_offset(word), 0x1ff_ffff_fff8);
        assert_eq!(packed_wrapped(word), 0xabcde);
        assert_eq!(packed_wrapped(pack(0, 1)) & 1, 1);
        // Wrapped counts keep 20 bits.
        assert_eq!(packed_wrapped(pack(8, 0x10_0003)), 3);
    }

    #[test]
    fn gate_fields() {
        let gate = make_gate(0x3fff_ffff, 0xffff_fffe, GATE_STARTED);
        assert_eq!(gate_generation(gate), 0x3fff_ffff);
        assert_eq!(gate_wrapped(gate), 0xffff_fffe);
        assert!(gate_open(gate));
        assert!(!gate_open(gate | GATE_DURABLE_FULL));
        assert!(!gate_open(make_gate(1, 0, 0)));
    }
}

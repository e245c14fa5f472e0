//! The rolling and durable allocators.
//!
//! Algorithm: Fuchsia's classic trace-engine allocator (`trace_context::AllocRecord` and
//! `AllocDurableRecord`, `zircon/system/ulib/trace-engine/context.cc`, and the packing of
//! `rolling_buffer_current_` in `context_impl.h`): one `AtomicU64` packs the rolling offset with
//! the wrapped count, and a reservation is one lock-free `fetch_add` on it. fxtrace's change is the
//! unit: a reservation takes a *run* of whole chunks that a single thread then fills through a
//! private cursor, so the shared word is touched once per run instead of once per record. A
//! thread's runs grow from one chunk to `thread_run_chunks` (doubling at each); a record larger
//! than that gets a run of its own.
//!
//! Packing (the classic engine's `context_impl.h`) — chosen over the 2025 rewrite's CAS loop (its
//! lock-free `RollingBuffer`) because a `fetch_add` never fails and never retries, and with chunks
//! the word is cold anyway:
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

/// Bits of the packed word holding the offset (the word is published as the header's
/// `rolling_position`, whose layout this is).
pub(crate) const OFFSET_BITS: u32 = crate::buffer::header::POSITION_OFFSET_BITS;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// Shift of the wrapped count in the packed word.
pub(crate) const WRAPPED_SHIFT: u32 = crate::buffer::header::POSITION_WRAPPED_SHIFT;
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

/// The high half of an open gate of the started trace `generation`
/// (`make_gate(generation, _, GATE_STARTED) >> 32`): a gate whose high half equals it is
/// started, not durable-full, and of that generation, whatever its wrapped count.
pub(crate) const fn open_gate_high(generation: u32) -> u32 {
    (make_gate(generation, 0, GATE_STARTED) >> GATE_GENERATION_SHIFT) as u32
}

/// The high half of a gate value (see [`open_gate_high`]).
pub(crate) const fn gate_high(gate: u64) -> u32 {
    (gate >> GATE_GENERATION_SHIFT) as u32
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

// === holds and pins (circular reuse) ===
//
// A writer publishes the chunk (and, for a large record, the run) it may write into as a
// *hold*. When a circular switch reuses a buffer while some writer that was inside it is still
// in flight (typically preempted mid-record), the switch *pins* that writer's holds in the
// buffer instead of waiting for it: the new lap's allocations skip pinned chunks, so the stale
// writer can finish into memory no one else uses. Its late records sit in chunks tagged with
// the old lap, which readers skip, exactly like any data a circular buffer overwrites.

/// Hold value: the writer is between `fetch_add` and knowing what it got.
pub(crate) const HOLD_ALLOCATING: u64 = 1 << 62;
const HOLD_VALID: u64 = 1 << 63;
const HOLD_BUFFER_SHIFT: u32 = 61;
const HOLD_START_SHIFT: u32 = 12;
const HOLD_CHUNKS_MASK: u64 = (1 << HOLD_START_SHIFT) - 1;
const HOLD_START_MASK: u64 = (1 << (HOLD_BUFFER_SHIFT - HOLD_START_SHIFT)) - 1;

/// The hold of `chunks` chunks from chunk index `start` of rolling buffer `buffer`.
pub(crate) const fn make_hold(buffer: usize, start: u64, chunks: u64) -> u64 {
    HOLD_VALID
        | ((buffer as u64 & 1) << HOLD_BUFFER_SHIFT)
        | ((start & HOLD_START_MASK) << HOLD_START_SHIFT)
        | (chunks & HOLD_CHUNKS_MASK)
}

/// `(buffer, start chunk, chunks)` of a hold, if it names a region.
pub(crate) const fn hold_region(hold: u64) -> Option<(usize, u64, u64)> {
    if hold & HOLD_VALID == 0 || hold & HOLD_ALLOCATING != 0 {
        return None;
    }
    Some((
        ((hold >> HOLD_BUFFER_SHIFT) & 1) as usize,
        (hold >> HOLD_START_SHIFT) & HOLD_START_MASK,
        hold & HOLD_CHUNKS_MASK,
    ))
}

/// Pinned regions per buffer.
pub(crate) const PIN_CAPACITY: usize = 32;

/// The chunks of one rolling buffer that the current lap must not hand out.
#[derive(Debug)]
struct PinList {
    /// Rules: written by a circular switch under the switch mutex, before the allocator word
    /// is reset to the lap they apply to; read by writers that got a run in that lap. Never
    /// rewritten while such a reader is between its `fetch_add` and its hold store (the next
    /// reuse of the buffer would find that reader `HOLD_ALLOCATING` and refuse).
    /// ATOMICS: `Relaxed` stores and loads, published by the word's `Release` reset and the
    /// writers' `Acquire` `fetch_add`.
    wrapped: AtomicU64,
    count: AtomicU64,
    regions: [AtomicU64; PIN_CAPACITY],
}

impl PinList {
    fn new() -> Self {
        Self {
            wrapped: AtomicU64::new(0),
            count: AtomicU64::new(0),
            regions: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn overlaps(&self, wrapped: u32, start: u64, chunks: u64) -> bool {
        // ATOMICS: `Relaxed` loads: published by the allocator word, see the fields.
        let count = self.count.load(Ordering::Relaxed) as usize;
        if count == 0 || self.wrapped.load(Ordering::Relaxed) != wrapped as u64 {
            return false;
        }
        self.regions[..count.min(PIN_CAPACITY)].iter().any(|r| {
            let (_, pin_start, pin_chunks) =
                hold_region(r.load(Ordering::Relaxed)).unwrap_or((0, 0, 0));
            start < pin_start + pin_chunks && pin_start < start + chunks
        })
    }
}

/// A run of chunks handed to one thread: `[start, end)` in some rolling buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub(crate) start: *mut u64,
    pub(crate) end: *mut u64,
    /// The gate value the run belongs to (its buffer's wrapped count).
    pub(crate) gate: u64,
    /// The run as a hold.
    pub(crate) hold: u64,
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
    /// The run overlaps chunks pinned for a stale writer; it is left to that writer. Try again.
    Pinned,
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
    /// The most chunks a thread takes at once for its own records (see
    /// [`thread_run_chunks`](super::context::thread_run_chunks)).
    thread_run: u64,
    pins: [PinList; 2],
    /// The header's `rolling_position`, where the word is published for a manager's status
    /// (written after each `fetch_add` and reset, never read here).
    published: *const AtomicU64,
}

// SAFETY: the raw pointers point into the trace buffer mapping owned by the same context; the
// allocator only computes addresses from them, hands out disjoint runs, and stores into the
// published position atomically.
unsafe impl Send for RollingAllocator {}
// SAFETY: as above; the only shared mutable state is the atomic word.
unsafe impl Sync for RollingAllocator {}

impl RollingAllocator {
    /// `starts[1]` is unused (null) in oneshot mode. `published`: the header's
    /// `rolling_position` in the same mapping as the buffers.
    pub(crate) fn new(starts: [*mut u8; 2], size: u64, chunk: u64, published: &AtomicU64) -> Self {
        Self {
            word: CachePadded::new(AtomicU64::new(pack(0, 0))),
            starts,
            size,
            chunk,
            thread_run: super::context::thread_run_chunks(chunk, size),
            pins: [PinList::new(), PinList::new()],
            published,
        }
    }

    /// Publish `word` as the header's `rolling_position`.
    #[inline]
    fn publish(&self, word: u64) {
        // SAFETY: `published` points into the header of the mapping the context owns, which
        // outlives the allocator (see `new`).
        let published = unsafe { &*self.published };
        // ATOMICS: `Relaxed`: a figure a manager reads for its status; nothing is published
        // through it, and racing writers may store out of order (a status is approximate).
        published.store(word, Ordering::Relaxed);
    }

    /// The most chunks a thread takes at once for its own records.
    pub(crate) fn thread_run_chunks(&self) -> u64 {
        self.thread_run
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

    /// Set the pins of buffer `wrapped_count & 1` for the lap `wrapped_count` (under the
    /// switch mutex, before [`Self::reset`] opens the lap). `holds` are hold values in that
    /// buffer; at most [`PIN_CAPACITY`].
    pub(crate) fn set_pins(&self, wrapped_count: u32, holds: &[u64]) {
        let pins = &self.pins[(wrapped_count & 1) as usize];
        let count = holds.len().min(PIN_CAPACITY);
        // ATOMICS: `Relaxed` stores: published by the `Release` reset that opens the lap.
        for (slot, &hold) in pins.regions.iter().zip(&holds[..count]) {
            slot.store(hold, Ordering::Relaxed);
        }
        pins.wrapped.store(wrapped_count as u64, Ordering::Relaxed);
        pins.count.store(count as u64, Ordering::Relaxed);
    }

    /// Forget every pin (start).
    pub(crate) fn clear_pins(&self) {
        for pins in &self.pins {
            // ATOMICS: `Relaxed`: while stopped; the start's `Release` gate store publishes it.
            pins.count.store(0, Ordering::Relaxed);
        }
    }

    /// Reset to offset 0 of buffer `wrapped_count & 1` (switch or start; under the mutex).
    pub(crate) fn reset(&self, wrapped_count: u32) {
        // ATOMICS: `Release`: publishes the gate store that precedes it (see `word`).
        self.word.store(pack(0, wrapped_count), Ordering::Release);
        self.publish(pack(0, wrapped_count));
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
        // ATOMICS: `Acquire`: see `word` (pairs with the switch's `Release` reset, which
        // follows the gate and pin stores of the lap).
        let previous = self.word.fetch_add(bytes, Ordering::Acquire);
        self.publish(previous.wrapping_add(bytes));
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
        let buffer = (wrapped & 1) as usize;
        let first_chunk = offset / self.chunk;
        if self.pins[buffer].overlaps(gate_wrapped(run_gate), first_chunk, chunks) {
            return Taken::Pinned;
        }
        let end = (offset + bytes).min(self.size);
        let base = self.starts[buffer];
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
            hold: make_hold(buffer, first_chunk, chunks),
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
    /// The header's `durable_position` (written after each reservation and reset, never read
    /// here).
    published: *const AtomicU64,
}

// SAFETY: `start` and `published` point into the mapping owned by the same context;
// reservations are disjoint; the published position is stored atomically.
unsafe impl Send for DurableAllocator {}
// SAFETY: as above.
unsafe impl Sync for DurableAllocator {}

impl DurableAllocator {
    /// `published`: the header's `durable_position` in the same mapping as the buffer.
    pub(crate) fn new(start: *mut u8, size: u64, published: &AtomicU64) -> Self {
        Self {
            current: CachePadded::new(AtomicU64::new(0)),
            start,
            size,
            published,
        }
    }

    /// Publish `offset` as the header's `durable_position`.
    #[inline]
    fn publish(&self, offset: u64) {
        // SAFETY: `published` points into the header of the mapping the context owns, which
        // outlives the allocator (see `new`).
        let published = unsafe { &*self.published };
        // ATOMICS: `Relaxed`: a figure for a manager's status, as the rolling position.
        published.store(offset, Ordering::Relaxed);
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Bytes handed out so far (may exceed the size once full).
    pub(crate) fn allocated(&self) -> u64 {
        // ATOMICS: `Relaxed`: read under the switch mutex; completeness of the records below
        // it comes from the grace period that follows (see `Inner::service_locked`).
        self.current.load(Ordering::Relaxed)
    }

    pub(crate) fn reset(&self) {
        // ATOMICS: `Relaxed`: while stopped; the start's `Release` gate store publishes it.
        self.current.store(0, Ordering::Relaxed);
        self.publish(0);
    }

    /// Reserve `bytes`; `Err(offset)` when they do not fit (the buffer is full).
    pub(crate) fn reserve(&self, bytes: u64) -> Result<*mut u64, u64> {
        // ATOMICS: `Relaxed`: see `current`.
        let offset = self.current.fetch_add(bytes, Ordering::Relaxed);
        self.publish(offset.wrapping_add(bytes));
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
    fn the_open_gate_high_half_names_started_open_gates_of_one_generation() {
        for wrapped in [0, 1, u32::MAX] {
            let gate = make_gate(5, wrapped, GATE_STARTED);
            assert_eq!(gate_high(gate), open_gate_high(5));
            assert_eq!(
                gate_high(make_gate(5 + (1 << 30), wrapped, GATE_STARTED)),
                open_gate_high(5)
            );
            assert_ne!(gate_high(gate | GATE_DURABLE_FULL), open_gate_high(5));
            assert_ne!(gate_high(make_gate(5, wrapped, 0)), open_gate_high(5));
            assert_ne!(
                gate_high(make_gate(6, wrapped, GATE_STARTED)),
                open_gate_high(5)
            );
        }
        assert_eq!(open_gate_high(5) & GENERATION_MASK, 5);
    }

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
    fn holds_round_trip() {
        let hold = make_hold(1, (1 << 25) + 3, 513);
        assert_eq!(hold_region(hold), Some((1, (1 << 25) + 3, 513)));
        assert_eq!(hold_region(HOLD_ALLOCATING), None);
        assert_eq!(hold_region(0), None);
    }

    #[test]
    fn pins_overlap_by_chunk_range_and_lap() {
        let pins = PinList::new();
        assert!(!pins.overlaps(2, 0, 1));
        pins.regions[0].store(make_hold(0, 10, 3), Ordering::Relaxed);
        pins.wrapped.store(2, Ordering::Relaxed);
        pins.count.store(1, Ordering::Relaxed);
        assert!(pins.overlaps(2, 12, 1));
        assert!(pins.overlaps(2, 8, 3));
        assert!(!pins.overlaps(2, 13, 4));
        assert!(!pins.overlaps(2, 7, 3));
        assert!(!pins.overlaps(4, 10, 1), "pins apply to one lap only");
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

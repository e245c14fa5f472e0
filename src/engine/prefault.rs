//! Faulting the trace buffer in ahead of its writers.
//!
//! The first write to a page of a fresh buffer takes a page fault (the kernel allocates and
//! zeroes the page): up to +50 % on a record. Faulting the whole buffer in when the trace
//! starts ([`Context::prefault`](super::Context::prefault)) spares a busy writer that, but
//! costs a traced process that writes a few kilobytes and ends (a build's compiler runs, a
//! script's commands) far more than it writes: 4 MiB is some 5 ms of CPU, and as many pages
//! for the manager to free. So a provider faults its buffer in *ahead of its writers*:
//!
//! - A writer that takes a chunk run ending past the *trigger* asks, once, for more
//!   ([`BufferHandler::notify_prefault`](super::BufferHandler::notify_prefault)): one relaxed
//!   load and a compare per run (a run is 1–16 KiB of a thread's records), never per record.
//! - The thread that serves the request ([`Context::prefault_ahead`](super::Context::prefault_ahead),
//!   the provider's control thread) faults the buffer in up to [`AHEAD`] past the furthest run
//!   end asked for, a slice per call, then sets the trigger half of that back: writers find
//!   their pages faulted in as long as they write slower than the faulting goes.
//! - A start resets it: the first [`FIRST_TRIGGER`] bytes of the rolling buffers fault as
//!   they are written (a short-lived process writes less than that), the rest ahead.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the rolling buffers written before the first request: their pages fault on the
/// record path (16 faults), which a process that writes no more never pays more for.
pub(crate) const FIRST_TRIGGER: u64 = 64 << 10;
/// How far past the furthest run end asked for a request faults the buffer in.
pub(crate) const AHEAD: u64 = 1 << 20;
/// The most one [`Context::prefault_ahead`](super::Context::prefault_ahead) call faults in (a
/// fraction of a millisecond), so that the thread serving it answers its other work between
/// two slices.
pub(crate) const SLICE: u64 = 1 << 20;

/// Bits of [`PrefaultAhead::done`] that hold the offset; the bits above count the starts.
const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;

/// Where the buffer is faulted in up to, and where writers ask for more (byte offsets in the
/// buffer mapping).
#[derive(Debug)]
pub(crate) struct PrefaultAhead {
    /// Rules: a writer whose run ends past this offset asks for more; `u64::MAX` while a
    /// request is pending. Swapped to `u64::MAX` by the asking writer, stored by the
    /// prefaulting thread and by a start.
    /// ATOMICS: `Relaxed`: a hint; a stale value costs one page fault or one request more.
    trigger: AtomicU64,
    /// Rules: the furthest run end asked for (0: none); `fetch_max` by asking writers, reset
    /// by a start. ATOMICS: `Relaxed`: a hint, as `trigger`.
    wanted: AtomicU64,
    /// Rules: the buffer is faulted in up to this offset (the low [`OFFSET_BITS`]; above them
    /// the count of starts): advanced by the prefaulting thread with a compare-exchange, so
    /// that a slice faulted in for an earlier start is never counted for a later one; stored
    /// by a start. ATOMICS: `Relaxed`: a hint, as `trigger`.
    done: AtomicU64,
}

/// A range to fault in, `[from, to)`, for the start that [`PrefaultAhead::next_slice`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slice {
    /// `done` when the slice was chosen.
    seen: u64,
    pub(crate) from: u64,
    pub(crate) to: u64,
}

impl PrefaultAhead {
    /// Nothing faulted in, nothing asked for (a start calls [`Self::reset`]).
    pub(crate) fn new() -> Self {
        Self {
            trigger: AtomicU64::new(u64::MAX),
            wanted: AtomicU64::new(0),
            done: AtomicU64::new(0),
        }
    }

    /// A start: the rolling buffers begin at offset `rolling_start`, nothing of them is
    /// faulted in (a clearing start has just given their pages back).
    pub(crate) fn reset(&self, rolling_start: u64) {
        // ATOMICS: `Relaxed` hints (see the fields); published with the start's gate store.
        let starts = (self.done.load(Ordering::Relaxed) >> OFFSET_BITS).wrapping_add(1);
        self.done.store(
            (starts << OFFSET_BITS) | (rolling_start & OFFSET_MASK),
            Ordering::Relaxed,
        );
        self.wanted.store(0, Ordering::Relaxed);
        self.trigger
            .store(rolling_start + FIRST_TRIGGER, Ordering::Relaxed);
    }

    /// A writer took a run ending at offset `end`: whether it must ask for more (it is the
    /// first past the trigger since the last request was served). The caller then calls the
    /// handler.
    #[inline]
    pub(crate) fn passed(&self, end: u64) -> bool {
        // ATOMICS: see `trigger`.
        end > self.trigger.load(Ordering::Relaxed) && self.ask(end)
    }

    #[cold]
    fn ask(&self, end: u64) -> bool {
        // ATOMICS: see the fields.
        self.wanted.fetch_max(end, Ordering::Relaxed);
        self.trigger.swap(u64::MAX, Ordering::Relaxed) != u64::MAX
    }

    /// The next range to fault in, toward [`AHEAD`] past the furthest run end asked for and
    /// at most `limit` (the buffer's end); `None` when there is none.
    pub(crate) fn next_slice(&self, limit: u64) -> Option<Slice> {
        // ATOMICS: see the fields.
        let seen = self.done.load(Ordering::Relaxed);
        let wanted = self.wanted.load(Ordering::Relaxed);
        let from = seen & OFFSET_MASK;
        let target = wanted.saturating_add(AHEAD).min(limit);
        (wanted != 0 && from < target).then(|| Slice {
            seen,
            from,
            to: target.min(from + SLICE),
        })
    }

    /// `slice` is faulted in (or could not be: the writers will fault it). Returns whether
    /// more is wanted; when not, re-arms the trigger half of [`AHEAD`] before the end of what
    /// is faulted in.
    pub(crate) fn advanced(&self, slice: Slice, limit: u64) -> bool {
        let now = (slice.seen & !OFFSET_MASK) | slice.to;
        // ATOMICS: see `done`; a start that reset it meanwhile keeps its value.
        if self
            .done
            .compare_exchange(slice.seen, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        if self.next_slice(limit).is_some() {
            return true;
        }
        if slice.to < limit {
            // ATOMICS: see `trigger`. A writer past it already asks again at its next run.
            self.trigger
                .store(slice.to.saturating_sub(AHEAD / 2), Ordering::Relaxed);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serve the pending request as the prefaulting thread does: the slices it faults in.
    fn serve(p: &PrefaultAhead, limit: u64) -> Vec<(u64, u64)> {
        let mut slices = Vec::new();
        while let Some(slice) = p.next_slice(limit) {
            slices.push((slice.from, slice.to));
            if !p.advanced(slice, limit) {
                break;
            }
        }
        slices
    }

    #[test]
    fn writers_ask_once_past_the_trigger_and_the_buffer_is_faulted_in_ahead_of_them() {
        let p = PrefaultAhead::new();
        assert!(!p.passed(1 << 30), "never asks before a start");
        let start = 128;
        let limit = 16 << 20;
        p.reset(start);
        assert!(
            !p.passed(start + FIRST_TRIGGER),
            "the first 64 KiB fault as written"
        );
        assert_eq!(p.next_slice(limit), None, "nothing asked for");
        let end = start + FIRST_TRIGGER + 1024;
        assert!(p.passed(end), "the first past the trigger asks");
        assert!(!p.passed(end + 1024), "once, until the request is served");
        // Served: up to AHEAD past the end asked for, a slice at a time.
        let slices = serve(&p, limit);
        assert_eq!(slices.first(), Some(&(start, start + SLICE)));
        assert_eq!(slices.last().unwrap().1, end + AHEAD);
        assert!(slices.iter().all(|(a, b)| b - a <= SLICE));
        // Re-armed half of AHEAD before the end of what is faulted in.
        let done = end + AHEAD;
        assert!(!p.passed(done - AHEAD / 2));
        let next = done - AHEAD / 2 + 8;
        assert!(p.passed(next));
        assert_eq!(serve(&p, limit), vec![(done, next + AHEAD)]);
        // Never past the buffer's end, and nothing more asked for once it is all in.
        assert!(p.passed(limit - 8));
        assert_eq!(serve(&p, limit).last().unwrap().1, limit);
        assert!(!p.passed(limit));
    }

    #[test]
    fn a_start_while_a_slice_is_faulted_in_wins() {
        let p = PrefaultAhead::new();
        p.reset(0);
        assert!(p.passed(FIRST_TRIGGER + 8));
        let slice = p.next_slice(64 << 20).unwrap();
        p.reset(0); // a new trace started meanwhile
        assert!(
            !p.advanced(slice, 64 << 20),
            "the stale slice is not counted"
        );
        assert_eq!(
            p.next_slice(64 << 20),
            None,
            "the new trace asked for nothing yet"
        );
        assert!(
            p.passed(FIRST_TRIGGER + 8),
            "and asks again past its own trigger"
        );
        // At the buffer's end, nothing more.
        assert_eq!(serve(&p, 4096).len(), 1);
        assert_eq!(p.next_slice(4096), None);
    }
}

//! The ideal writer: the least a TSC tracer can do per event. One `rdtscp`, one shared
//! `fetch_add` reserving three words, three stores into a ring that was faulted in before
//! the first block. No category check, no string table, no chunk hand-off: a floor, not a
//! tracer.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::tsc::rdtscp;

/// Words per 4 KiB page.
const PAGE_WORDS: usize = 4096 / 8;

/// A cursor on a cache line of its own, so that the threads bumping it do not also bounce
/// the line holding the ring's address.
#[repr(align(64))]
#[derive(Debug)]
struct PaddedCursor(AtomicU64);

/// A ring of `u64` words written by any number of threads.
#[derive(Debug)]
pub(crate) struct IdealRing {
    words: Box<[AtomicU64]>,
    mask: u64,
    cursor: Box<PaddedCursor>,
}

impl IdealRing {
    /// A ring of `bytes` (rounded up to a power of two words), every page written once.
    pub(crate) fn new(bytes: usize) -> Self {
        let len = (bytes / 8).next_power_of_two().max(PAGE_WORDS);
        let words: Box<[AtomicU64]> = (0..len).map(|_| AtomicU64::new(0)).collect();
        // Write one word per page: a zeroed allocation may still be unmapped (calloc).
        for word in words.iter().step_by(PAGE_WORDS) {
            // ATOMICS: relaxed: nothing reads the ring; the store only faults the page in.
            word.store(1, Ordering::Relaxed);
        }
        Self {
            words,
            mask: len as u64 - 1,
            cursor: Box::new(PaddedCursor(AtomicU64::new(0))),
        }
    }

    /// One event: header, timestamp, one argument word.
    #[inline(always)]
    pub(crate) fn write(&self, header: u64, arg: u64) {
        let ticks = rdtscp();
        // ATOMICS: relaxed: the reservation only has to be unique; nothing orders the words
        // for a reader (there is none), which is the floor this row measures.
        let at = self.cursor.0.fetch_add(3, Ordering::Relaxed);
        let word = |k: u64| &self.words[((at + k) & self.mask) as usize];
        // ATOMICS: relaxed stores: plain `mov`s on x86_64, kept by the compiler because
        // another thread could read them.
        word(0).store(header, Ordering::Relaxed);
        word(1).store(ticks, Ordering::Relaxed);
        word(2).store(arg, Ordering::Relaxed);
    }

    /// One span of nothing: two timestamps, then the event (header, start, end), as a
    /// duration-complete record is written.
    #[inline(always)]
    pub(crate) fn write_span(&self, header: u64) {
        let start = rdtscp();
        let end = rdtscp();
        // ATOMICS: as in `write`.
        let at = self.cursor.0.fetch_add(3, Ordering::Relaxed);
        let word = |k: u64| &self.words[((at + k) & self.mask) as usize];
        // ATOMICS: as in `write`.
        word(0).store(header, Ordering::Relaxed);
        word(1).store(start, Ordering::Relaxed);
        word(2).store(end, Ordering::Relaxed);
    }

    /// Words reserved so far.
    pub(crate) fn written_words(&self) -> u64 {
        // ATOMICS: relaxed: read after the writing threads were joined.
        self.cursor.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_wraps_and_counts_every_word() {
        let ring = IdealRing::new(4096);
        assert_eq!(ring.words.len(), PAGE_WORDS);
        for i in 0..1000 {
            ring.write(0xabc, i);
        }
        assert_eq!(ring.written_words(), 3000);
        // Event 999 began at word 2997, wrapped to 2997 & 511 = 437: header, time, argument.
        let word = |i: usize| ring.words[i].load(Ordering::Relaxed);
        assert_eq!((word(437), word(439)), (0xabc, 999));
    }
}

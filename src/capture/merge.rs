//! Merging per-ring event streams into one timestamp-ordered stream.
//!
//! Each perf ring (one per CPU and event) yields its records in time order, but rings are
//! drained one after another, so a later-drained ring can hold older events. [`Merger`] keeps a
//! queue per stream and a binary heap of stream heads (a k-way merge), and releases events only
//! when no stream can still produce an older one.
//!
//! # Release rule
//!
//! Each stream has a *frontier*: the largest of
//!
//! - the newest timestamp pushed into it (its records arrive in order, so nothing older follows),
//! - the time up to which it is known to be complete: [`Merger::mark_caught_up`] is called with
//!   "now minus a slack" after the ring was drained empty, so an idle CPU does not hold back the
//!   others forever. The slack covers records whose timestamp was taken but which were not yet
//!   published in the ring when it was read.
//!
//! An event is released when its timestamp is `<=` the minimum frontier over all streams.
//! [`Merger::flush`] releases everything (end of capture). Ties are released in stream order,
//! then push order. Two departures from the assumptions are counted, never dropped:
//! a stream pushing an older timestamp than its newest (`reordered`: sorted into its queue) and
//! an event older than what was already released (`late`: delivered out of order).

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Debug)]
struct Stream<T> {
    queue: VecDeque<(u64, T)>,
    newest: u64,
    caught_up: u64,
}

impl<T> Stream<T> {
    fn frontier(&self) -> u64 {
        self.newest.max(self.caught_up)
    }
}

/// A k-way, timestamp-ordered merge of event streams (see the module docs for the rule).
#[derive(Debug)]
pub struct Merger<T> {
    streams: Vec<Stream<T>>,
    /// Stream heads as `(key, stream)`. Invariant: every non-empty stream has an entry whose key
    /// equals its front key; entries that no longer match the front are stale and skipped.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    released: u64,
    pending: usize,
    reordered: u64,
    late: u64,
}

impl<T> Merger<T> {
    /// A merger over `streams` streams, numbered `0..streams`.
    pub fn new(streams: usize) -> Self {
        Self {
            streams: (0..streams)
                .map(|_| Stream {
                    queue: VecDeque::new(),
                    newest: 0,
                    caught_up: 0,
                })
                .collect(),
            heap: BinaryHeap::new(),
            released: 0,
            pending: 0,
            reordered: 0,
            late: 0,
        }
    }

    /// Adds a stream; returns its number.
    pub fn add_stream(&mut self) -> usize {
        self.streams.push(Stream {
            queue: VecDeque::new(),
            newest: 0,
            caught_up: 0,
        });
        self.streams.len() - 1
    }

    /// Queues `item` with timestamp `key` on `stream` (panics on an unknown stream number, a
    /// caller bug).
    pub fn push(&mut self, stream: usize, key: u64, item: T) {
        if key < self.released {
            self.late += 1;
        }
        let s = &mut self.streams[stream];
        let front = if key >= s.newest {
            // In order, the rule: appended, no element moves.
            s.queue.push_back((key, item));
            s.newest = key;
            s.queue.len() == 1
        } else {
            self.reordered += 1;
            let at = s.queue.partition_point(|(k, _)| *k <= key);
            s.queue.insert(at, (key, item));
            at == 0
        };
        if front {
            self.heap.push(Reverse((key, stream)));
        }
        self.pending += 1;
    }

    /// Declares `stream` complete up to `time`: it will not produce older events.
    pub fn mark_caught_up(&mut self, stream: usize, time: u64) {
        let s = &mut self.streams[stream];
        s.caught_up = s.caught_up.max(time);
    }

    /// The minimum frontier: events at or before it can be released.
    pub fn watermark(&self) -> u64 {
        self.streams
            .iter()
            .map(Stream::frontier)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Releases, in order, every event at or before [`Self::watermark`].
    pub fn release(&mut self, out: impl FnMut(u64, T)) {
        let limit = self.watermark();
        self.release_up_to(limit, out);
    }

    /// Releases everything, in order.
    pub fn flush(&mut self, out: impl FnMut(u64, T)) {
        self.release_up_to(u64::MAX, out);
    }

    fn release_up_to(&mut self, limit: u64, mut out: impl FnMut(u64, T)) {
        while let Some(mut top) = self.heap.peek_mut() {
            let Reverse((key, stream)) = *top;
            if key > limit {
                break;
            }
            let s = &mut self.streams[stream];
            if s.queue.front().map(|(k, _)| *k) != Some(key) {
                PeekMut::pop(top); // stale entry
                continue;
            }
            let Some((key, item)) = s.queue.pop_front() else {
                PeekMut::pop(top);
                continue;
            };
            // The stream's next event takes its place: one sift instead of a pop and a push.
            match s.queue.front() {
                Some(&(next, _)) => *top = Reverse((next, stream)),
                None => drop(PeekMut::pop(top)),
            }
            self.pending -= 1;
            self.released = self.released.max(key);
            out(key, item);
        }
    }

    /// Events queued and not yet released.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Events that arrived older than their stream's newest (sorted in).
    pub fn reordered(&self) -> u64 {
        self.reordered
    }

    /// Events that arrived older than events already released (delivered out of order).
    pub fn late(&self) -> u64 {
        self.late
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(m: &mut Merger<&'static str>, flush: bool) -> Vec<(u64, &'static str)> {
        let mut v = Vec::new();
        if flush {
            m.flush(|k, t| v.push((k, t)));
        } else {
            m.release(|k, t| v.push((k, t)));
        }
        v
    }

    #[test]
    fn merges_in_order_and_holds_back_until_every_stream_passed() {
        let mut m = Merger::new(3);
        m.push(0, 10, "a10");
        m.push(0, 30, "a30");
        m.push(1, 20, "b20");
        // Stream 2 has said nothing: nothing can go.
        assert_eq!(drain(&mut m, false), vec![]);
        m.mark_caught_up(2, 25);
        // Frontiers: 30, 20, 25 -> watermark 20.
        assert_eq!(m.watermark(), 20);
        assert_eq!(drain(&mut m, false), vec![(10, "a10"), (20, "b20")]);
        m.push(2, 26, "c26");
        m.push(1, 40, "b40");
        // Frontiers: 30, 40, 26.
        assert_eq!(drain(&mut m, false), vec![(26, "c26")]);
        assert_eq!(m.pending(), 2);
        assert_eq!(drain(&mut m, true), vec![(30, "a30"), (40, "b40")]);
        assert_eq!((m.reordered(), m.late(), m.pending()), (0, 0, 0));
    }

    #[test]
    fn ties_go_in_stream_then_push_order() {
        let mut m = Merger::new(2);
        m.push(1, 5, "b1");
        m.push(0, 5, "a1");
        m.push(0, 5, "a2");
        assert_eq!(drain(&mut m, true), vec![(5, "a1"), (5, "a2"), (5, "b1")]);
    }

    #[test]
    fn out_of_order_within_a_stream_is_sorted_and_counted() {
        let mut m = Merger::new(1);
        m.push(0, 10, "x10");
        m.push(0, 30, "x30");
        m.push(0, 5, "x5"); // new front
        m.push(0, 20, "x20");
        assert_eq!(m.reordered(), 2);
        assert_eq!(
            drain(&mut m, true),
            vec![(5, "x5"), (10, "x10"), (20, "x20"), (30, "x30")]
        );
    }

    #[test]
    fn late_events_are_delivered_and_counted() {
        let mut m = Merger::new(2);
        m.push(0, 10, "a");
        m.push(1, 12, "b");
        assert_eq!(drain(&mut m, false), vec![(10, "a")]);
        m.push(1, 8, "late");
        assert_eq!(m.late(), 1);
        assert_eq!(drain(&mut m, true), vec![(8, "late"), (12, "b")]);
    }

    #[test]
    fn many_streams_random_interleaving_is_sorted() {
        // A deterministic LCG interleaving 8 sorted streams.
        let mut m = Merger::new(8);
        let mut next = [0u64; 8];
        let mut seed = 12345u64;
        for _ in 0..2000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let s = (seed >> 33) as usize % 8;
            next[s] += (seed >> 40) % 100;
            m.push(s, next[s], "");
        }
        let mut out = Vec::new();
        m.release(|k, _| out.push(k));
        m.flush(|k, _| out.push(k));
        assert_eq!(out.len(), 2000);
        assert!(out.windows(2).all(|w| w[0] <= w[1]));
    }
}

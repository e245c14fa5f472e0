//! Records of one thread that two of a process capture's events wrote: told apart and the
//! copies dropped, counted ([`super::CaptureStats::duplicates`]).
//!
//! # How a thread gets two events of a kind
//!
//! A process capture opens its events per thread, with `inherit` ([`super::open`]): it lists
//! `/proc/PID/task`, opens each thread's events, and lists again for the threads that appeared
//! meanwhile (*late* threads), until none did. A late thread made by a thread whose events were
//! already open inherited copies of them; its own events, opened after, are a second set. Every
//! switch, wake-up and wait point of it is then written twice, its samples are taken by two
//! timers, and the threads it makes later inherit both. perf (`perf record -p`) lists once and
//! misses the late threads whose maker was not followed yet; fxtrace opens them all and drops
//! the copies. Without a late thread no thread has two events of a kind (each has its own, or
//! the copies of its maker's), and nothing here runs.
//!
//! Every per-thread event carries `PERF_SAMPLE_IDENTIFIER`: the id of the event fxtrace opened,
//! which the kernel also writes in the records of the copies inherited from it (its
//! *lineage*). The events of one kind in one thread are of distinct lineages, and the newest
//! (the largest id: ids are handed out in opening order) is the thread's own, or the one of the
//! nearest thread above it that fxtrace opened: the one kept.
//!
//! # Twins: switch, side-band and tracepoint records
//!
//! The events of a thread that see one occurrence (a switch, a wake-up, a FORK) write their
//! records of it one after the other into the same ring (the CPU's: a copy writes into its
//! parent's ring), from one loop of the kernel with interrupts off, so no other record comes
//! between them. [`TwinFilter`] drops a record equal to the last one the ring kept in every byte
//! but its time and identifier, written within [`TWIN_WINDOW`] by a lineage not seen since that
//! one: the next occurrence comes from a lineage already seen (each event writes once per
//! occurrence), and two genuine records in a row are never equal that way (a thread switches
//! out, then in; a tid given to another thread needs the pid space to wrap, which takes far
//! longer than the window).
//!
//! # Samples: cpu-clock, LBR
//!
//! Two events sampling one thread are two timers, not twins. [`SampleLineages`] keeps the
//! samples of one lineage per thread and CPU, the newest: for a thread fxtrace opened, its own;
//! for a thread made after the start, that of the thread that made it (from its FORK record,
//! which comes before the new thread's samples), so down to the nearest thread fxtrace opened
//! (its *anchor*). A thread without a known anchor (made in the instant between the last
//! listing and the start, or whose FORK was lost) keeps the newest lineage seen so far: at most
//! the first sample of an older lineage before the newest one's first goes through. A thread's
//! EXIT forgets it (the maps hold live threads only, and a reused tid starts afresh). An exec
//! keeps the leader's newest lineage (and a thread it makes then inherits it); one by a thread
//! that was not the leader comes after the leader's EXIT, and its own lineage is taken.

use super::events::{CaptureEvent, CpuSample};
use super::ids::IdMap;
use super::records::{
    RecordLayout, RECORD_COMM, RECORD_EXIT, RECORD_FORK, RECORD_MMAP, RECORD_MMAP2, RECORD_SAMPLE,
    RECORD_SWITCH,
};
use super::ring::{RawData, RawRecord};
use super::{PerfEventKind, SampleFormat};

/// The longest time between two twins, in perf nanoseconds. Twins are written nanoseconds
/// apart; this leaves room for a virtual CPU descheduled between them (a copy written later
/// than this after its original is delivered), and is far shorter than the pid space takes to
/// wrap (32 768 thread creations with the default `pid_max` of a machine with few CPUs).
pub(crate) const TWIN_WINDOW: u64 = 10_000_000;

/// Where a record's time and identifier are (see [`TwinFilter`]).
#[derive(Debug, Clone, Copy)]
struct Marks {
    /// In a sample's body: the time's offset (the identifier is first).
    sample_time: Option<usize>,
    /// The `sample_id` trailer's length on side-band records (the identifier is last).
    trailer: usize,
    /// The time's offset in the trailer.
    trailer_time: Option<usize>,
}

/// One ring's twin detector (see the module docs).
#[derive(Debug)]
pub(crate) struct TwinFilter {
    marks: Marks,
    /// Samples are compared too (tracepoints); else they pass untouched (a sampling event's
    /// ring, where only the side band can have twins).
    samples: bool,
    /// The last record kept: type, misc, time and body; `valid` false when there is none to
    /// compare with (the start, a loss between).
    kind: u32,
    misc: u16,
    time: u64,
    body: Vec<u8>,
    valid: bool,
    /// The lineages whose copies of the kept record were seen.
    burst: Vec<u64>,
}

/// A record's identity as [`TwinFilter`] reads it.
struct Stamp {
    lineage: u64,
    time: u64,
    /// Words left out of the comparison (identifier, time, a FORK/EXIT's own time).
    masked: [Option<usize>; 3],
}

impl TwinFilter {
    /// The filter of a ring whose records are laid out by `layout`; `None` when its records
    /// carry no identifier. `samples`: samples are twins too (tracepoint events).
    pub(crate) fn new(layout: &RecordLayout, samples: bool) -> Option<Self> {
        let s = layout.sample_format();
        if !s.contains(SampleFormat::IDENTIFIER) || !layout.has_sample_id() {
            return None;
        }
        let before = |f: SampleFormat| if s.contains(f) { 8 } else { 0 };
        let time = s.contains(SampleFormat::TIME);
        let marks = Marks {
            sample_time: time.then(|| 8 + before(SampleFormat::IP) + before(SampleFormat::TID)),
            trailer: layout.sample_id_len(),
            trailer_time: time.then(|| before(SampleFormat::TID)),
        };
        Some(Self {
            marks,
            samples,
            kind: 0,
            misc: 0,
            time: 0,
            body: Vec::new(),
            valid: false,
            burst: Vec::new(),
        })
    }

    /// Where `rec`'s lineage and time are; `None` for a record that is never a twin. Every
    /// field read is a word of the body (records are made of 8-byte words after their header,
    /// and so is the trailer).
    #[inline]
    fn stamp(&self, rec: &RawRecord<'_>) -> Option<Stamp> {
        let words = rec.body.len() / 8;
        let word = |i| word(&rec.body, i);
        match rec.kind {
            RECORD_SAMPLE => {
                let time_at = self.marks.sample_time.map(|at| at / 8);
                (words > time_at.unwrap_or(0)).then(|| Stamp {
                    lineage: word(0),
                    time: time_at.map_or(0, word),
                    masked: [Some(0), time_at, None],
                })
            }
            RECORD_SWITCH | RECORD_COMM | RECORD_MMAP | RECORD_MMAP2 | RECORD_FORK
            | RECORD_EXIT => {
                let start = words.checked_sub(self.marks.trailer / 8)?;
                let last = words.checked_sub(1)?;
                let time_at = self.marks.trailer_time.map(|t| start + t / 8);
                // FORK and EXIT also carry a time of their own (their third word), before
                // the trailer.
                let own_time =
                    (matches!(rec.kind, RECORD_FORK | RECORD_EXIT) && start > 2).then_some(2);
                Some(Stamp {
                    lineage: word(last),
                    time: time_at.map_or(0, word),
                    masked: [Some(last), time_at, own_time],
                })
            }
            _ => None,
        }
    }

    /// Whether `rec` is a twin of the record this ring kept before it (then it is dropped);
    /// otherwise it is the one kept from now on.
    pub(crate) fn is_twin(&mut self, rec: &RawRecord<'_>) -> bool {
        if rec.kind == RECORD_SAMPLE && !self.samples {
            // A sample between side-band twins (an interrupt's) leaves them twins.
            return false;
        }
        let Some(stamp) = self.stamp(rec) else {
            // A loss, a throttle: what comes next is compared with nothing.
            self.valid = false;
            return false;
        };
        // Rare past the first line (the same type and size in a row): the bytes compared
        // only then. The kept record's words left out are where `rec`'s are (same type, same
        // size, same layout).
        let twin = self.valid
            && rec.kind == self.kind
            && rec.misc == self.misc
            && rec.body.len() == self.body.len()
            && stamp.time.abs_diff(self.time) <= TWIN_WINDOW
            && !self.burst.contains(&stamp.lineage)
            && (0..self.body.len() / 8).all(|i| {
                stamp.masked.contains(&Some(i))
                    || word(&rec.body, i) == word(&RawData::Single(&self.body), i)
            });
        if twin {
            self.burst.push(stamp.lineage);
            return true;
        }
        match rec.body {
            // A switch record's, the most frequent: two 16-byte moves, not a `memcpy` call
            // (about 30 instructions a record, `benches/capture.rs`).
            RawData::Single(b) if b.len() == 32 => {
                self.body.resize(32, 0);
                self.body.copy_from_slice(&b[..32]);
            }
            RawData::Single(b) => {
                self.body.clear();
                self.body.extend_from_slice(b);
            }
            RawData::Split(a, b) => {
                self.body.clear();
                self.body.extend_from_slice(a);
                self.body.extend_from_slice(b);
            }
        }
        self.kind = rec.kind;
        self.misc = rec.misc;
        self.time = stamp.time;
        self.valid = true;
        self.burst.clear();
        self.burst.push(stamp.lineage);
        false
    }
}

/// Word `i` of `body` (native-endian), 0 past its end.
#[inline(always)]
fn word(body: &RawData<'_>, i: usize) -> u64 {
    match body {
        RawData::Single(b) => b
            .get(i * 8..i * 8 + 8)
            .and_then(|w| w.try_into().ok())
            .map_or(0, u64::from_ne_bytes),
        split => split.u64_at(i * 8).unwrap_or(0),
    }
}

// === impl SampleLineages ===

/// Which samples of one sampling event kind to keep (see the module docs).
#[derive(Debug)]
pub(crate) struct SampleLineages {
    kind: PerfEventKind,
    /// Per thread fxtrace opened, the id of its own event on each CPU.
    own: IdMap<Vec<(u32, u64)>>,
    /// Per thread, its anchor: the thread fxtrace opened whose own events are its newest.
    anchor: IdMap<u32>,
    /// Per thread without an anchor, the newest lineage seen on each CPU.
    newest: IdMap<Vec<(u32, u64)>>,
}

impl SampleLineages {
    /// The filter of `kind`'s samples, from its events: `(id, tid, cpu)` of each one opened.
    pub(crate) fn new(kind: PerfEventKind, opened: &[(u64, u32, u32)]) -> Self {
        let mut own: IdMap<Vec<(u32, u64)>> = IdMap::default();
        let mut anchor = IdMap::default();
        for &(id, tid, cpu) in opened {
            own.entry(tid).or_default().push((cpu, id));
            anchor.insert(tid, tid);
        }
        Self {
            kind,
            own,
            anchor,
            newest: IdMap::default(),
        }
    }

    /// Thread `tid` was made by `ptid` (a FORK record): it has `ptid`'s events.
    fn forked(&mut self, tid: u32, ptid: u32) {
        self.newest.remove(&tid);
        match self.anchor.get(&ptid).copied() {
            Some(a) => {
                self.anchor.insert(tid, a);
            }
            None => {
                self.anchor.remove(&tid);
                // A maker known only by its newest lineages (after its exec) hands them on.
                if let Some(seen) = self.newest.get(&ptid).cloned() {
                    self.newest.insert(tid, seen);
                }
            }
        }
    }

    /// Thread `tid` ended (an EXIT record): what was known of it is forgotten, so the maps
    /// hold only live threads, and a tid given to another thread (its FORK lost) starts again
    /// from the newest lineage it shows.
    fn forget(&mut self, tid: u32) {
        self.anchor.remove(&tid);
        self.newest.remove(&tid);
    }

    /// Thread `tid` began a new image (an exec's COMM). The leader keeps its events, so its
    /// anchor's stays the newest lineage it knows; a thread that was not the leader took the
    /// leader's tid with its own events, after the leader's EXIT forgot the tid, and its new
    /// lineage is taken as it shows (as after a lost EXIT: the old anchor would drop them all).
    fn execed(&mut self, tid: u32) {
        if let Some(anchor) = self.anchor.remove(&tid) {
            if let Some(own) = self.own.get(&anchor) {
                self.newest.insert(tid, own.clone());
            }
        }
    }

    /// Whether to keep a sample of `tid` on `cpu` from lineage `lineage`.
    fn keep(&mut self, tid: u32, cpu: u32, lineage: u64) -> bool {
        let own = self
            .anchor
            .get(&tid)
            .and_then(|a| self.own.get(a))
            .and_then(|ids| ids.iter().find(|(c, _)| *c == cpu))
            .map(|&(_, id)| id);
        if let Some(own) = own {
            return lineage == own;
        }
        let seen = self.newest.entry(tid).or_default();
        match seen.iter_mut().find(|(c, _)| *c == cpu) {
            Some((_, newest)) if lineage < *newest => false,
            Some((_, newest)) => {
                *newest = lineage;
                true
            }
            None => {
                seen.push((cpu, lineage));
                true
            }
        }
    }
}

/// The sample filters of a capture's sampling events that had late threads, applied where
/// events are delivered in time order (a FORK before the new thread's samples).
#[derive(Debug, Default)]
pub(crate) struct SampleFilter {
    kinds: Vec<SampleLineages>,
}

impl SampleFilter {
    /// Adds the filter of one sampling event kind.
    pub(crate) fn add(&mut self, lineages: SampleLineages) {
        self.kinds.push(lineages);
    }

    /// Whether there is nothing to filter.
    pub(crate) fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Whether to deliver `event` (of lineage `lineage` when it is a sample): false for a
    /// sample of a lineage another of its thread's events supersedes. A FORK is noted.
    pub(crate) fn keep(&mut self, event: Sampled<'_>) -> bool {
        let (kind, tid, cpu, lineage) = match event {
            Sampled::Cpu(s, lineage) => (PerfEventKind::CpuClockSampling, s.tid, s.cpu, lineage),
            Sampled::Other(CaptureEvent::Branch(b), lineage) => {
                (PerfEventKind::BranchSampling, b.tid, b.cpu, lineage)
            }
            Sampled::Other(CaptureEvent::Fork(f), _) => {
                for k in &mut self.kinds {
                    k.forked(f.tid, f.ptid);
                }
                return true;
            }
            Sampled::Other(CaptureEvent::Exit(x), _) => {
                for k in &mut self.kinds {
                    k.forget(x.tid);
                }
                return true;
            }
            Sampled::Other(CaptureEvent::Comm(c), _) if c.exec => {
                for k in &mut self.kinds {
                    k.execed(c.tid);
                }
                return true;
            }
            Sampled::Other(..) => return true,
        };
        match self.kinds.iter_mut().find(|k| k.kind == kind) {
            Some(k) => k.keep(tid, cpu, lineage),
            None => true,
        }
    }
}

/// An event as [`SampleFilter::keep`] sees it, with the lineage its record named.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sampled<'a> {
    /// A CPU sample.
    Cpu(&'a CpuSample, u64),
    /// Any other event (LBR samples and FORKs matter).
    Other(&'a CaptureEvent, u64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::attr::BranchSampleFormat;
    use crate::capture::events::{TaskComm, TaskExit, TaskFork};
    use crate::capture::records::{MISC_SWITCH_OUT, RECORD_LOST};

    fn layout(sample: SampleFormat) -> RecordLayout {
        RecordLayout::from_formats(sample, BranchSampleFormat::empty(), true).unwrap()
    }

    /// A process switch event's layout: `TID | TIME | CPU | IDENTIFIER`.
    fn switch_layout() -> RecordLayout {
        layout(
            SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU | SampleFormat::IDENTIFIER,
        )
    }

    /// A switch record's body: `sample_id` = pid, tid, time, cpu, identifier.
    fn switch_body(tid: u32, time: u64, lineage: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&10u32.to_ne_bytes());
        b.extend_from_slice(&tid.to_ne_bytes());
        b.extend_from_slice(&time.to_ne_bytes());
        b.extend_from_slice(&0u64.to_ne_bytes());
        b.extend_from_slice(&lineage.to_ne_bytes());
        b
    }

    fn record(kind: u32, misc: u16, body: &[u8]) -> RawRecord<'_> {
        RawRecord {
            kind,
            misc,
            body: RawData::Single(body),
        }
    }

    /// Which of `records` (kind, misc, body) the filter keeps.
    fn kept(f: &mut TwinFilter, records: &[(u32, u16, Vec<u8>)]) -> Vec<bool> {
        records
            .iter()
            .map(|(k, m, b)| !f.is_twin(&record(*k, *m, b)))
            .collect()
    }

    #[test]
    fn only_identified_layouts_have_a_filter() {
        let plain = layout(SampleFormat::TID | SampleFormat::TIME | SampleFormat::CPU);
        assert!(TwinFilter::new(&plain, true).is_none());
        assert!(TwinFilter::new(&switch_layout(), true).is_some());
    }

    #[test]
    fn a_switch_written_by_two_lineages_is_kept_once() {
        let mut f = TwinFilter::new(&switch_layout(), true).unwrap();
        let out = |tid, time, lineage| {
            (
                RECORD_SWITCH,
                MISC_SWITCH_OUT,
                switch_body(tid, time, lineage),
            )
        };
        let keep = kept(
            &mut f,
            &[
                out(11, 1_000, 7),
                out(11, 1_020, 9), // the copy: another lineage, 20 ns later
                (RECORD_SWITCH, 0, switch_body(11, 5_000, 7)), // switched in: another record
                (RECORD_SWITCH, 0, switch_body(11, 5_010, 9)),
                (RECORD_SWITCH, 0, switch_body(11, 5_030, 12)), // a third lineage
            ],
        );
        assert_eq!(keep, [true, false, true, false, false]);
    }

    #[test]
    fn the_next_occurrence_from_a_lineage_seen_is_kept() {
        let mut f = TwinFilter::new(&switch_layout(), true).unwrap();
        // Records of other threads' contexts, equal but for their lineage, in a row: the
        // second of each pair is a twin, the third comes from a lineage already seen.
        let rec = |time, lineage| {
            (
                RECORD_SWITCH,
                MISC_SWITCH_OUT,
                switch_body(11, time, lineage),
            )
        };
        let keep = kept(
            &mut f,
            &[rec(100, 7), rec(110, 9), rec(200, 7), rec(210, 9)],
        );
        assert_eq!(keep, [true, false, true, false]);
    }

    #[test]
    fn different_content_a_loss_or_a_long_gap_is_no_twin() {
        let mut f = TwinFilter::new(&switch_layout(), true).unwrap();
        let out = |tid, time, lineage| {
            (
                RECORD_SWITCH,
                MISC_SWITCH_OUT,
                switch_body(tid, time, lineage),
            )
        };
        let lost = (RECORD_LOST, 0, vec![0u8; 16 + 32]);
        let keep = kept(
            &mut f,
            &[
                out(11, 100, 7),
                out(12, 110, 9), // another thread
                lost,
                out(12, 120, 11), // after a loss: compared with nothing
                out(12, 120 + TWIN_WINDOW + 1, 13), // too late to be a copy
            ],
        );
        assert_eq!(keep, [true, true, true, true, true]);
    }

    #[test]
    fn a_record_split_by_the_ring_end_compares_as_one() {
        let mut f = TwinFilter::new(&switch_layout(), true).unwrap();
        let first = switch_body(11, 100, 7);
        assert!(!f.is_twin(&record(RECORD_SWITCH, MISC_SWITCH_OUT, &first)));
        let copy = switch_body(11, 130, 9);
        let (a, b) = copy.split_at(12);
        let split = RawRecord {
            kind: RECORD_SWITCH,
            misc: MISC_SWITCH_OUT,
            body: RawData::Split(a, b),
        };
        assert!(f.is_twin(&split));
    }

    /// A FORK's own time (before the trailer) differs between the copies too.
    #[test]
    fn fork_copies_differ_in_both_times() {
        let mut f = TwinFilter::new(&switch_layout(), true).unwrap();
        let fork = |time: u64, lineage| {
            let mut b = Vec::new();
            for v in [10u32, 10, 13, 11] {
                b.extend_from_slice(&v.to_ne_bytes());
            }
            b.extend_from_slice(&time.to_ne_bytes());
            b.extend(switch_body(11, time, lineage));
            (RECORD_FORK, 0, b)
        };
        assert_eq!(kept(&mut f, &[fork(100, 7), fork(104, 9)]), [true, false]);
    }

    /// Tracepoint samples: identifier first, then `TID`, `TIME`, `CPU`, raw data.
    #[test]
    fn tracepoint_sample_copies_are_twins_and_samples_pass_a_sampling_ring() {
        let l = layout(
            SampleFormat::IDENTIFIER
                | SampleFormat::TID
                | SampleFormat::TIME
                | SampleFormat::CPU
                | SampleFormat::RAW,
        );
        let sample = |time: u64, lineage: u64, woken: u8| {
            let mut b = Vec::new();
            b.extend_from_slice(&lineage.to_ne_bytes());
            b.extend_from_slice(&10u32.to_ne_bytes());
            b.extend_from_slice(&11u32.to_ne_bytes());
            b.extend_from_slice(&time.to_ne_bytes());
            b.extend_from_slice(&0u64.to_ne_bytes());
            b.extend_from_slice(&12u32.to_ne_bytes());
            b.extend_from_slice(&[woken; 12]);
            (RECORD_SAMPLE, 0, b)
        };
        let mut f = TwinFilter::new(&l, true).unwrap();
        let keep = kept(
            &mut f,
            &[
                sample(100, 7, 1),
                sample(101, 9, 1),
                sample(300, 7, 2),
                sample(301, 9, 1),
            ],
        );
        assert_eq!(keep, [true, false, true, true]);
        let mut sampling = TwinFilter::new(&l, false).unwrap();
        assert_eq!(
            kept(&mut sampling, &[sample(100, 7, 1), sample(101, 9, 1)]),
            [true, true]
        );
    }

    fn cpu_sample(tid: u32, cpu: u32) -> CpuSample {
        CpuSample {
            time: 0,
            cpu,
            pid: Some(10),
            tid,
            ip: 0,
            stack: None,
        }
    }

    fn fork(tid: u32, ptid: u32) -> CaptureEvent {
        CaptureEvent::Fork(TaskFork {
            time: 0,
            pid: 10,
            ppid: 10,
            tid,
            ptid,
        })
    }

    #[test]
    fn samples_keep_the_newest_lineage_of_their_thread() {
        // Thread 10 opened first (events 1, 2 on cpus 0, 1); thread 11, made by 10 meanwhile
        // and opened after (events 3, 4): it has both lineages.
        let opened = [(1, 10, 0), (2, 10, 1), (3, 11, 0), (4, 11, 1)];
        let mut f = SampleFilter::default();
        f.add(SampleLineages::new(
            PerfEventKind::CpuClockSampling,
            &opened,
        ));
        let mut keep = |tid, cpu, lineage| f.keep(Sampled::Cpu(&cpu_sample(tid, cpu), lineage));
        assert!(keep(10, 0, 1));
        assert!(keep(11, 0, 3), "its own");
        assert!(!keep(11, 0, 1), "its copy of 10's");
        assert!(keep(11, 1, 4) && !keep(11, 1, 2));
        // Thread 12, made by 11 after the start, has both lineages too: 11's is kept.
        assert!(f.keep(Sampled::Other(&fork(12, 11), 0)));
        let mut keep = |tid, cpu, lineage| f.keep(Sampled::Cpu(&cpu_sample(tid, cpu), lineage));
        assert!(!keep(12, 0, 1) && keep(12, 0, 3));
        // Thread 13, made by 10: one lineage, 10's.
        assert!(f.keep(Sampled::Other(&fork(13, 10), 0)));
        assert!(f.keep(Sampled::Cpu(&cpu_sample(13, 1), 2)));
    }

    #[test]
    fn a_thread_without_anchor_keeps_the_newest_lineage_seen_and_a_fork_starts_over() {
        let mut f = SampleFilter::default();
        f.add(SampleLineages::new(
            PerfEventKind::CpuClockSampling,
            &[(5, 10, 0)],
        ));
        let mut keep = |lineage| f.keep(Sampled::Cpu(&cpu_sample(20, 0), lineage));
        assert!(keep(3));
        assert!(keep(5), "a newer lineage");
        assert!(!keep(3), "the older one from then on");
        assert!(keep(5));
        // Tid 20 given to a new thread, made by 10: 10's lineage only.
        assert!(f.keep(Sampled::Other(&fork(20, 10), 0)));
        let mut keep = |lineage| f.keep(Sampled::Cpu(&cpu_sample(20, 0), lineage));
        assert!(keep(5) && !keep(3));
        // LBR samples are not cpu-clock's: no filter of theirs here.
        let b = CaptureEvent::Branch(crate::capture::BranchSample {
            time: 0,
            cpu: 0,
            pid: 10,
            tid: 20,
            ip: 0,
            hw_idx: None,
            entries: Vec::new(),
        });
        assert!(f.keep(Sampled::Other(&b, 3)));
    }

    /// An EXIT forgets its thread (the maps hold live threads only; the tid's next thread
    /// starts afresh, even when its FORK was lost), and so does an exec.
    #[test]
    fn an_exit_or_an_exec_forgets_the_thread() {
        let mut f = SampleFilter::default();
        f.add(SampleLineages::new(
            PerfEventKind::CpuClockSampling,
            &[(5, 10, 0), (6, 11, 0)],
        ));
        assert!(f.keep(Sampled::Other(&fork(20, 10), 0)));
        assert!(
            !f.keep(Sampled::Cpu(&cpu_sample(20, 0), 6)),
            "not its anchor's"
        );
        let exit = CaptureEvent::Exit(TaskExit {
            time: 0,
            pid: 10,
            ppid: 10,
            tid: 20,
            ptid: 10,
        });
        assert!(f.keep(Sampled::Other(&exit, 0)));
        assert!(!f.kinds[0].anchor.contains_key(&20) && !f.kinds[0].newest.contains_key(&20));
        // Tid 20 again, its FORK lost: the newest lineage it shows is kept.
        assert!(f.keep(Sampled::Cpu(&cpu_sample(20, 0), 6)));
        assert!(
            !f.keep(Sampled::Cpu(&cpu_sample(20, 0), 5)),
            "older than the newest"
        );
        // The leader 10 execs: its own lineage (5) stays the newest it knows; an older one
        // (a copy it had) is not let through.
        let exec = CaptureEvent::Comm(TaskComm {
            time: 0,
            pid: 10,
            tid: 10,
            name: "next".into(),
            exec: true,
        });
        assert!(f.keep(Sampled::Other(&exec, 0)));
        assert!(f.keep(Sampled::Cpu(&cpu_sample(10, 0), 5)));
        assert!(
            !f.keep(Sampled::Cpu(&cpu_sample(10, 0), 4)),
            "an older lineage"
        );
        // A thread it makes after the exec inherits what it knows.
        assert!(f.keep(Sampled::Other(&fork(21, 10), 0)));
        assert!(
            !f.keep(Sampled::Cpu(&cpu_sample(21, 0), 4)),
            "the child's older copy"
        );
        assert!(f.keep(Sampled::Cpu(&cpu_sample(21, 0), 5)));
        // Thread 11 execs and, not the leader, takes tid 10 with its own events (lineage 6),
        // after the leader's EXIT: its lineage is newer, and kept.
        let leader_exit = CaptureEvent::Exit(TaskExit {
            time: 0,
            pid: 10,
            ppid: 1,
            tid: 10,
            ptid: 1,
        });
        assert!(f.keep(Sampled::Other(&leader_exit, 0)));
        assert!(f.keep(Sampled::Other(&exec, 0)));
        assert!(
            f.keep(Sampled::Cpu(&cpu_sample(10, 0), 6)),
            "after the exec"
        );
    }
}

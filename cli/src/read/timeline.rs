//! Each thread's time on and off the CPUs, from the context switches and wake-ups read so far:
//! a switch closes the outgoing thread's time on its CPU ([`Interval::On`]) and the incoming
//! thread's time off the CPUs ([`Interval::Off`]: why it left, where it waited, when and by
//! whom it was woken). What ran on each CPU lately is kept ([`HISTORY`] slices a CPU), so
//! that an interval off the CPUs can say who ran instead on the CPU it left.
//!
//! Bounded for crafted input: [`MAX_THREADS`] threads followed at once, [`MAX_CPUS`] CPUs with
//! a history; what is beyond them is counted ([`Timeline::threads_not_followed`]).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};

use fxtrace_format::sched::WakeupView;
use fxtrace_format::ThreadState;

use super::bounded::BoundedMap;
use super::cpus::{Cpus, OffCpu, Running, Switch, WaitPoint};

/// Threads followed at once: 7/8 of 2^18, the most a hash table of 2^18 buckets holds before
/// it doubles (one more thread would make the table, and the peak while it grows, twice as
/// large: `report sched` peaked at 62 MB rather than 43 on a million threads asleep).
pub const MAX_THREADS: usize = (1 << 18) / 8 * 7;
/// CPUs whose recent slices are kept.
pub const MAX_CPUS: usize = 1024;
/// Slices kept a CPU.
pub const HISTORY: usize = 256;

/// A thread's time on or off the CPUs, closed by a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// It ran on `cpu` from `start` to `end`.
    On {
        /// Thread.
        tid: u64,
        /// Its process, when known.
        pid: Option<u64>,
        /// The CPU.
        cpu: u16,
        /// From, ns.
        start: u64,
        /// To, ns.
        end: u64,
    },
    /// It was off the CPUs from `start` (switched out of `cpu`) to `end` (switched in).
    Off(OffInterval),
}

/// A thread's time off the CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffInterval {
    /// Thread.
    pub tid: u64,
    /// The CPU it left.
    pub cpu: u16,
    /// The CPU it came back on.
    pub back_on: u16,
    /// From (switched out), ns.
    pub start: u64,
    /// To (switched in), ns.
    pub end: u64,
    /// Why it left.
    pub reason: OffCpu,
    /// Its wait point, when the switch named one.
    pub stack: Option<WaitPoint>,
    /// When it was woken, and by whom, when a wake-up was recorded.
    pub woken: Option<(u64, Option<u64>)>,
}

impl OffInterval {
    /// Its length, ns.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Zero length.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The part spent waiting for the event (asleep), and the part spent runnable (after a
    /// wake-up, or all of it when preempted), ns.
    pub fn split(&self) -> (u64, u64) {
        match (self.reason, self.woken) {
            (OffCpu::Runnable, _) => (0, self.len()),
            (_, Some((at, _))) => {
                let at = at.clamp(self.start, self.end);
                (at - self.start, self.end - at)
            }
            (_, None) => (self.len(), 0),
        }
    }
}

/// A slice a CPU ran, as its history keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slice {
    tid: u64,
    start: u64,
    end: u64,
}

/// What the timeline knows of a thread now.
#[derive(Debug, Clone, Copy, Default)]
struct ThreadNow {
    /// Switched out at, on that CPU, why, and its wait point.
    off: Option<(u64, u16, OffCpu, Option<WaitPoint>)>,
    /// Woken at, by (while off).
    woken: Option<(u64, Option<u64>)>,
    /// Its last switch, in or out, on any CPU: (ns, CPU) (a slice still running at the end
    /// is its only if it did not switch elsewhere since).
    last: Option<(u64, u16)>,
}

/// Threads on and off the CPUs.
#[derive(Debug)]
pub struct Timeline {
    cpus: Cpus<()>,
    threads: BoundedMap<u64, ThreadNow>,
    history: BoundedMap<u16, VecDeque<Slice>>,
    /// Wake-ups read.
    pub wakeups: u64,
    /// Context switches read.
    pub switches: u64,
    /// Switches whose outgoing thread was not the one the CPU's previous switch brought in
    /// (a switch missing between): the time since is the named outgoing thread's.
    pub mismatches: u64,
    /// Switches older than the last one read on their CPU, or the same as it (a second
    /// source of the same switches, or a section out of order): not applied.
    pub out_of_order: u64,
    /// The last switch applied on each CPU: (ns, outgoing tid, incoming tid).
    last_switch: BTreeMap<u16, (u64, u64, u64)>,
    /// A thread was switched out `running` (a preempted one): `suspended` means stopped.
    suspended_is_stopped: bool,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            cpus: Cpus::new(),
            threads: BoundedMap::new(MAX_THREADS),
            history: BoundedMap::new(MAX_CPUS),
            wakeups: 0,
            switches: 0,
            mismatches: 0,
            out_of_order: 0,
            last_switch: BTreeMap::new(),
            suspended_is_stopped: false,
        }
    }
}

impl Timeline {
    /// Nothing read.
    pub fn new() -> Self {
        Self::default()
    }

    /// Threads whose state was not kept (beyond [`MAX_THREADS`]).
    pub fn threads_not_followed(&self) -> u64 {
        self.threads.refused()
    }

    /// The thread running on `cpu` and since when.
    pub fn running(&self, cpu: u16) -> Option<(u64, u64)> {
        self.cpus.running(cpu).map(|r| (r.tid, r.since_ns))
    }

    /// A wake-up: remembered until the woken thread runs.
    pub fn wakeup(&mut self, w: &WakeupView) {
        self.wakeups += 1;
        if let Some(t) = self.threads.get_mut(&w.tid) {
            if t.off.is_some() {
                t.woken = Some((w.time.ns, w.waker));
            }
        }
    }

    /// A switch: hands `out` the outgoing thread's time on the CPU, then the incoming
    /// thread's time off the CPUs (when its switch out was read).
    ///
    /// The outgoing thread is the one the switch names, and it ran since the CPU's previous
    /// switch, as `perf sched timehist` counts it: when that switch brought in another thread
    /// (a switch missing between, [`Timeline::mismatches`]), the time is the named thread's,
    /// whose switch in is the one missing (where it ran on another CPU meanwhile, that time
    /// is counted twice). The first switch of a CPU begins its first slice.
    ///
    /// Returns whether the switch was applied: not when it is older than the CPU's last one,
    /// or the same switch again ([`Timeline::out_of_order`]).
    pub fn switch(&mut self, s: &Switch<'_>, mut out: impl FnMut(Interval)) -> bool {
        let this = (s.ns, s.outgoing_tid, s.incoming_tid);
        let previous = match self.last_switch.entry(s.cpu) {
            Entry::Occupied(mut last) => {
                if s.ns < last.get().0 || this == *last.get() {
                    self.out_of_order += 1;
                    return false;
                }
                Some(last.insert(this).0)
            }
            Entry::Vacant(last) => {
                last.insert(this);
                None
            }
        };
        self.switches += 1;
        let incoming = (s.incoming_tid != 0).then_some(Running {
            tid: s.incoming_tid,
            pid: s.incoming_pid,
            since_ns: s.ns,
            data: (),
        });
        let ran = self
            .cpus
            .switch(s.cpu, s.ns, s.outgoing_tid, s.outgoing_state, incoming)
            .map(|ran| ran.running);
        let expected = ran.as_ref().map_or(0, |r| r.tid);
        if let Some(previous) = previous {
            self.mismatches += u64::from(expected != s.outgoing_tid);
            if s.outgoing_tid != 0 {
                // perf's rule, even where the thread's switch in here was lost and it ran on
                // another CPU meanwhile (that time is then counted twice: a known limit).
                let start = previous;
                let pid = match ran {
                    Some(r) if r.tid == s.outgoing_tid => r.pid.or(s.outgoing_pid),
                    _ => s.outgoing_pid,
                };
                let slice = Slice {
                    tid: s.outgoing_tid,
                    start,
                    end: s.ns,
                };
                if let Some(history) = self.history.entry(s.cpu) {
                    if history.len() >= HISTORY {
                        history.pop_front();
                    }
                    history.push_back(slice);
                }
                out(Interval::On {
                    tid: s.outgoing_tid,
                    pid,
                    cpu: s.cpu,
                    start,
                    end: s.ns,
                });
            }
        }
        if s.outgoing_state == ThreadState::Running as u8 {
            self.suspended_is_stopped = true;
        }
        if s.outgoing_tid != 0 {
            let reason = s.off_cpu(self.suspended_is_stopped);
            if let Some(t) = self.threads.entry(s.outgoing_tid) {
                *t = ThreadNow {
                    off: Some((s.ns, s.cpu, reason, s.wait_point)),
                    woken: None,
                    last: Some((s.ns, s.cpu)),
                };
            }
        }
        // (A full map refuses, and counts, a thread at its switch out alone, as before.)
        let room = self.threads.len() < self.threads.limit();
        if s.incoming_tid != 0 && (room || self.threads.get(&s.incoming_tid).is_some()) {
            if let Some(t) = self.threads.entry(s.incoming_tid) {
                t.last = Some((s.ns, s.cpu));
                if let Some((start, cpu, reason, stack)) = t.off.take() {
                    out(Interval::Off(OffInterval {
                        tid: s.incoming_tid,
                        cpu,
                        back_on: s.cpu,
                        start,
                        end: s.ns,
                        reason,
                        stack,
                        woken: t.woken.take(),
                    }));
                }
            }
        }
        true
    }

    /// The trace ended at `end_ns`: hands `out` the time on its CPU of each thread still
    /// running ([`Interval::On`] to `end_ns`). A thread seen switched on another CPU since
    /// its switch in here (its switch out here lost) is left out: when it left is unknown.
    pub fn finish(&mut self, end_ns: u64, mut out: impl FnMut(Interval)) {
        for ran in self.cpus.finish(end_ns) {
            let r = ran.running;
            let elsewhere = self
                .threads
                .get(&r.tid)
                .and_then(|t| t.last)
                .is_some_and(|last| last != (r.since_ns, ran.cpu));
            if !elsewhere {
                out(Interval::On {
                    tid: r.tid,
                    pid: r.pid,
                    cpu: ran.cpu,
                    start: r.since_ns,
                    end: ran.until_ns.max(r.since_ns),
                });
            }
        }
    }

    /// Who ran on `cpu` between `start` and `end` (ns), by thread: (tid, ns) the longest
    /// first, from the slices kept ([`HISTORY`]) and the one running now; `false` when the
    /// history does not reach back to `start` (the list covers only its end).
    pub fn ran_on(&self, cpu: u16, start: u64, end: u64) -> (Vec<(u64, u64)>, bool) {
        let mut by_thread: BTreeMap<u64, u64> = BTreeMap::new();
        let mut add = |tid: u64, a: u64, b: u64| {
            let (a, b) = (a.max(start), b.min(end));
            if b > a {
                *by_thread.entry(tid).or_default() += b - a;
            }
        };
        if let Some(r) = self.cpus.running(cpu) {
            add(r.tid, r.since_ns, end);
        }
        let mut complete = false;
        if let Some(history) = self.history.get(&cpu) {
            for slice in history.iter().rev() {
                if slice.end <= start {
                    complete = true;
                    break;
                }
                add(slice.tid, slice.start, slice.end);
            }
            complete |= history.len() < HISTORY;
        }
        let mut ran: Vec<(u64, u64)> = by_thread.into_iter().collect();
        ran.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        (ran, complete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switch(ns: u64, cpu: u16, out: u64, state: u8, inc: u64) -> Switch<'static> {
        Switch {
            ns,
            cpu,
            outgoing_tid: out,
            outgoing_pid: None,
            outgoing_state: state,
            incoming_tid: inc,
            incoming_pid: None,
            incoming_priority: None,
            args: &[],
            uninterruptible: false,
            wait_point: None,
        }
    }

    #[test]
    fn a_preempted_thread_waits_runnable_while_another_runs_its_cpu() {
        let mut t = Timeline::new();
        let mut got = Vec::new();
        t.switch(&switch(0, 0, 0, 3, 10), |i| got.push(i));
        // 10 preempted by 20 at 100; 20 runs until 400, then 10 again.
        t.switch(&switch(100, 0, 10, 1, 20), |i| got.push(i));
        t.switch(&switch(400, 0, 20, 3, 10), |i| got.push(i));
        let off = got
            .iter()
            .find_map(|i| match i {
                Interval::Off(o) => Some(*o),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            (off.start, off.end, off.reason),
            (100, 400, OffCpu::Runnable)
        );
        assert_eq!(off.split(), (0, 300));
        assert_eq!(t.ran_on(0, off.start, off.end), (vec![(20, 300)], true));
    }

    #[test]
    fn a_switch_missing_leaves_the_time_to_the_thread_switched_out() {
        let mut t = Timeline::new();
        let mut got = Vec::new();
        t.switch(&switch(0, 0, 0, 3, 10), |i| got.push(i));
        // 20's switch in (and 10's out) are missing: the CPU ran 20 until 300, as far as the
        // trace says; then idle, yet 30 is switched out at 700.
        t.switch(&switch(300, 0, 20, 3, 0), |i| got.push(i));
        t.switch(&switch(700, 0, 30, 3, 0), |i| got.push(i));
        let on: Vec<(u64, u64, u64)> = got
            .iter()
            .filter_map(|i| match *i {
                Interval::On {
                    tid, start, end, ..
                } => Some((tid, start, end)),
                Interval::Off(_) => None,
            })
            .collect();
        assert_eq!(on, [(20, 0, 300), (30, 300, 700)]);
        assert_eq!(t.mismatches, 2);
        assert_eq!(t.ran_on(0, 0, 700), (vec![(30, 400), (20, 300)], true));
    }

    fn on(got: &[Interval]) -> Vec<(u64, u16, u64, u64)> {
        got.iter()
            .filter_map(|i| match *i {
                Interval::On {
                    tid,
                    cpu,
                    start,
                    end,
                    ..
                } => Some((tid, cpu, start, end)),
                Interval::Off(_) => None,
            })
            .collect()
    }

    #[test]
    fn the_same_switch_twice_is_applied_once() {
        let mut t = Timeline::new();
        let mut got = Vec::new();
        assert!(t.switch(&switch(0, 0, 0, 3, 10), |i| got.push(i)));
        assert!(t.switch(&switch(100, 0, 10, 3, 20), |i| got.push(i)));
        assert!(!t.switch(&switch(100, 0, 10, 3, 20), |i| got.push(i)));
        assert!(!t.switch(&switch(50, 0, 10, 3, 20), |i| got.push(i)));
        // Another switch at the same time is applied.
        assert!(t.switch(&switch(100, 0, 20, 3, 0), |i| got.push(i)));
        assert_eq!(on(&got), [(10, 0, 0, 100), (20, 0, 100, 100)]);
        assert_eq!((t.switches, t.out_of_order), (3, 2));
    }

    #[test]
    fn the_trace_end_closes_the_slices_still_running() {
        let mut t = Timeline::new();
        let mut got = Vec::new();
        t.switch(&switch(100, 0, 0, 3, 10), |i| got.push(i));
        t.switch(&switch(200, 1, 0, 3, 20), |i| got.push(i));
        // 20 is switched out of CPU 2 (its switch out of CPU 1, and in, lost): when it left
        // CPU 1 is unknown.
        t.switch(&switch(250, 2, 0, 3, 30), |i| got.push(i));
        t.switch(&switch(300, 2, 20, 3, 0), |i| got.push(i));
        got.clear();
        t.finish(1_000, |i| got.push(i));
        assert_eq!(on(&got), [(10, 0, 100, 1_000)]);
        got.clear();
        t.finish(2_000, |i| got.push(i));
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn a_sleep_ends_with_its_wakeup_then_waits_runnable() {
        let mut t = Timeline::new();
        let mut got = Vec::new();
        t.switch(&switch(0, 1, 0, 3, 10), |i| got.push(i));
        t.switch(&switch(50, 1, 10, 3, 0), |i| got.push(i));
        t.wakeup(&WakeupView {
            time: fxtrace_format::Timestamp {
                ticks: 250,
                ns: 250,
            },
            cpu: 1,
            tid: 10,
            waker: Some(11),
        });
        t.switch(&switch(300, 1, 0, 3, 10), |i| got.push(i));
        let Some(Interval::Off(off)) = got.last().copied() else {
            panic!("{got:?}")
        };
        assert_eq!(
            (off.reason, off.woken),
            (OffCpu::Sleeping, Some((250, Some(11))))
        );
        assert_eq!(off.split(), (200, 50));
    }
}

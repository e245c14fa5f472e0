//! `fxtrace report sched`: what `perf sched latency` and `perf sched timehist -s` give, from
//! an FXT trace's context switches and wake-ups. Per thread: time on the CPUs, switches, time
//! off them by state (runnable: preempted; sleeping; D: uninterruptible) with count, p50, p99
//! and max, and the runqueue latency (woken → running) where wake-ups are recorded. Then the
//! longest intervals off the CPUs with their wait point, waker and what ran on the CPU
//! meanwhile. Then the stalls: moments when several threads of one process slept at once,
//! with the sibling that ran meanwhile or woke them (a lock held too long, usually). The
//! sleeps of a stall are alike (each overlaps the others for half its length at least: a
//! thread idle for the whole trace is not part of every stall), each at least
//! [`SchedOptions::min_stall_ns`] long; fxtrace's own threads take no part.
//!
//! Two passes: the first follows every thread ([`Timeline`]) and finds the stalls, the
//! second measures, for each stall, what the process's other threads ran in it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io;

use fxtrace_format::{Decoded, RecordHead, RecordKind};

use crate::read::bounded::{BoundedMap, FastMap};
use crate::read::cpus::{OffCpu, Switch, WaitPoint};
use crate::read::filter::Glob;
use crate::read::histogram::Durations;
use crate::read::names::Names;
use crate::read::timeline::{Interval, OffInterval, Timeline};
use crate::read::wall::WallClock;
use crate::read::{self, Analysis, Input, Outcome, ReadError};
use crate::report::stacks::{one_line, StackReport};
use crate::report::symbolize::Symbolizer;
use fxtrace_format::sched::WakeupView;

/// Threads with statistics of their own; the others are counted together.
pub const MAX_THREADS: usize = 4096;
/// Sleeps gathered into one cluster before its stalls are taken (a longer chain of
/// overlapping sleeps is cut there).
pub const MAX_WAITERS: usize = 64;
/// Stall candidates kept per stall shown (ranked again after the second pass).
pub const STALL_CANDIDATES: usize = 4;
/// Clusters of similar sleeps gathered at once per process.
pub const CLUSTERS_PER_PROCESS: usize = 4;

/// Whether two sleeps are alike enough to be one stall: they overlap for at least half of
/// the longer one (a thread asleep for the whole trace is not part of every short stall).
fn alike(a: &Waiter, b: &Waiter) -> bool {
    let overlap = a.end.min(b.end).saturating_sub(a.start.max(b.start));
    let longer = (a.end - a.start).max(b.end - b.start);
    overlap > 0 && 2 * overlap >= longer
}

/// fxtrace's own threads inside a traced process (`fxtrace-capture`, …): never part of a
/// stall of the program.
fn is_fxtraces_own(name: Option<&str>) -> bool {
    name.is_some_and(|n| n.starts_with("fxtrace-"))
}

/// What to report.
#[derive(Debug, Clone, Default)]
pub struct SchedOptions {
    /// How many of the longest intervals off the CPUs, and of the stalls, to detail.
    pub top: usize,
    /// Only threads of these processes (all when empty).
    pub pids: Vec<u64>,
    /// Only threads whose name, or whose process's name, matches (all when empty).
    pub comms: Vec<Glob>,
    /// Only what happened on these CPUs (all when empty).
    pub cpus: Vec<u16>,
    /// A sleep shorter than this is not part of a stall, ns.
    pub min_stall_ns: u64,
}

/// One thread's row.
#[derive(Debug, Clone, Default)]
pub struct ThreadRow {
    /// Thread id (0 for the row of the threads beyond [`MAX_THREADS`]).
    pub tid: u64,
    /// On the CPUs, ns.
    pub on_cpu: u64,
    /// Times switched out.
    pub switches: u64,
    /// Preempted: runnable until it ran again.
    pub runnable: Durations,
    /// Asleep (until woken, when wake-ups are recorded).
    pub sleeping: Durations,
    /// Asleep uninterruptibly (Linux `D`).
    pub uninterruptible: Durations,
    /// Woken → running.
    pub latency: Durations,
}

/// One of the longest intervals off the CPUs.
#[derive(Debug, Clone)]
pub struct OffRow {
    /// The interval.
    pub off: OffInterval,
    /// Who ran on the CPU it left meanwhile: (tid, ns), the longest first.
    pub ran: Vec<(u64, u64)>,
    /// The CPU's history did not reach back to the interval's start.
    pub ran_partial: bool,
}

/// A thread waiting in a stall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// Thread.
    pub tid: u64,
    /// Asleep from, ns.
    pub start: u64,
    /// To (woken, or switched in), ns.
    pub end: u64,
    /// Its wait point, when recorded.
    pub stack: Option<WaitPoint>,
    /// Who woke it, when recorded.
    pub waker: Option<u64>,
    /// Uninterruptibly.
    pub uninterruptible: bool,
}

/// Several threads of one process asleep at once.
#[derive(Debug, Clone)]
pub struct Stall {
    /// The process.
    pub pid: u64,
    /// From the moment a second thread was asleep, ns.
    pub start: u64,
    /// To the moment fewer than two were, ns.
    pub end: u64,
    /// Thread-time lost in the window: the waiters' sleep within it, ns.
    pub lost_ns: u64,
    /// How the stalls rank: `lost_ns` weighted by the share of the window the process's
    /// busiest other thread ran (a lock held by a running sibling ranks first).
    pub score: f64,
    /// The threads asleep.
    pub waiters: Vec<Waiter>,
    /// The process's threads on a CPU in the window: (tid, ns), the longest first.
    pub running: Vec<(u64, u64)>,
}

impl Stall {
    /// The distinct threads asleep (a thread may have slept more than once in the window).
    pub fn threads(&self) -> usize {
        let mut tids: Vec<u64> = self.waiters.iter().map(|w| w.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        tids.len()
    }

    /// The window's length, ns.
    pub fn duration_ns(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

/// The report.
#[derive(Debug)]
pub struct SchedReport {
    /// Per thread, the most time on the CPUs first.
    pub threads: Vec<ThreadRow>,
    /// The longest intervals off the CPUs, the longest first.
    pub longest: Vec<OffRow>,
    /// The stalls, the most thread-time lost first.
    pub stalls: Vec<Stall>,
    /// Context switches read.
    pub switches: u64,
    /// Wake-ups read.
    pub wakeups: u64,
    /// Switches that named their wait point.
    pub wait_points: u64,
    /// Switches whose outgoing thread was not the one running (a switch missing).
    pub mismatches: u64,
    /// Switches older than the last one on their CPU, left out (a second source of them).
    pub out_of_order: u64,
    /// Threads not followed (beyond the timeline's bound) or not given a row.
    pub threads_not_kept: u64,
    /// Threads and processes the names table refused (beyond its bound), counted per record.
    pub names_not_kept: u64,
    /// The trace's first timestamp, ns.
    pub origin_ns: u64,
    /// When the trace was taken, if it says.
    pub wall: Option<WallClock>,
    /// Thread and process names.
    pub names: Names,
    /// The trace's call stacks (wait points).
    pub stacks: StackReport,
    /// Names their frames.
    pub symbols: Symbolizer,
    /// How reading went.
    pub outcome: Outcome,
}

impl SchedReport {
    /// What the trace lacks for this report, with the remedy: one sentence each.
    pub fn lacks(&self) -> Vec<String> {
        let mut lacks = Vec::new();
        if self.switches == 0 {
            lacks.push(
                "no context switches in this trace: record with -a (system-wide) to see threads \
                 on and off the CPUs"
                    .to_owned(),
            );
            return lacks;
        }
        if self.wakeups == 0 {
            lacks.push(
                "no wake-ups in this trace: record with -a to see who woke whom and the runqueue \
                 latency"
                    .to_owned(),
            );
        }
        if self.wait_points == 0 {
            lacks.push(
                "no wait points (call chains at switches) in this trace: record with -a \
                 --wait-points to see where threads slept"
                    .to_owned(),
            );
        }
        lacks
    }

    /// What the report could not count, and why: one sentence each (the text prints them
    /// after the stalls, the JSON as notes after [`SchedReport::lacks`]).
    pub fn counted_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.mismatches > 0 {
            notes.push(format!(
                "{} switch(es) named an outgoing thread other than the one running (switch \
                 records missing): each one's time since its CPU's previous switch went to the \
                 thread it names, as perf sched timehist counts it",
                self.mismatches
            ));
        }
        if self.out_of_order > 0 {
            notes.push(format!(
                "{} switch(es) older than the last one read on their CPU were left out (the \
                 same switches from a second source, such as --preload beside -a)",
                self.out_of_order
            ));
        }
        if self.threads_not_kept > 0 {
            notes.push(format!(
                "threads beyond the report's bounds were counted together ({} times)",
                self.threads_not_kept
            ));
        }
        if self.names_not_kept > 0 {
            notes.push(format!(
                "threads or processes beyond the names table's bound ({}) were not named \
                 ({} times): their process is unknown, so --pid and the stalls leave them out",
                crate::read::names::MAX_NAMED,
                self.names_not_kept
            ));
        }
        notes
    }
}

/// A stall being gathered: the long sleeps of one process that overlap.
#[derive(Debug, Default)]
struct Cluster {
    end: u64,
    waiters: Vec<Waiter>,
}

/// The first pass.
struct Follow<'o> {
    options: &'o SchedOptions,
    timeline: Timeline,
    names: Names,
    wall: Option<WallClock>,
    first_ticks: read::FirstTime,
    rows: BoundedMap<u64, ThreadRow>,
    other: ThreadRow,
    longest: BinaryHeap<Reverse<(u64, u64)>>,
    longest_rows: FastMap<u64, OffRow>,
    /// Per process, the clusters of similar sleeps being gathered (at most
    /// [`CLUSTERS_PER_PROCESS`]).
    clusters: BoundedMap<u64, Vec<Cluster>>,
    stalls: BinaryHeap<Reverse<(u64, u64)>>,
    stall_rows: FastMap<u64, Stall>,
    seq: u64,
    wait_points: u64,
    intervals: Vec<Interval>,
    /// The trace's call stacks, symbols and mappings (wait points named by their frames).
    stacks: StackReport,
}

impl Follow<'_> {
    fn keeps_thread(&self, tid: u64) -> bool {
        let o = self.options;
        let pid = self.names.pid(tid);
        !is_fxtraces_own(self.names.thread(tid))
            && (o.pids.is_empty() || pid.is_some_and(|p| o.pids.contains(&p)))
            && (o.comms.is_empty()
                || o.comms.iter().any(|g| {
                    self.names.thread(tid).is_some_and(|n| g.matches(n))
                        || pid
                            .and_then(|p| self.names.process(p))
                            .is_some_and(|n| g.matches(n))
                }))
    }

    fn keeps_cpu(&self, cpu: u16) -> bool {
        self.options.cpus.is_empty() || self.options.cpus.contains(&cpu)
    }

    fn row(&mut self, tid: u64) -> &mut ThreadRow {
        match self.rows.entry_with(tid, || ThreadRow {
            tid,
            ..ThreadRow::default()
        }) {
            Some(row) => row,
            None => &mut self.other,
        }
    }

    fn interval(&mut self, interval: Interval) {
        match interval {
            Interval::On {
                tid,
                pid,
                cpu,
                start,
                end,
            } => {
                if let Some(pid) = pid {
                    self.names.saw(pid, tid);
                }
                if !self.keeps_cpu(cpu) || !self.keeps_thread(tid) {
                    return;
                }
                let row = self.row(tid);
                row.on_cpu += end.saturating_sub(start);
                row.switches += 1;
            }
            Interval::Off(off) => {
                if !self.keeps_cpu(off.cpu) || !self.keeps_thread(off.tid) {
                    return;
                }
                let (asleep, runnable) = off.split();
                let row = self.row(off.tid);
                match off.reason {
                    OffCpu::Runnable => row.runnable.add(runnable),
                    OffCpu::Uninterruptible => row.uninterruptible.add(asleep),
                    OffCpu::Sleeping | OffCpu::Stopped | OffCpu::Exited => row.sleeping.add(asleep),
                }
                if off.reason != OffCpu::Runnable && off.woken.is_some() {
                    row.latency.add(runnable);
                }
                self.longest_candidate(off);
                if off.reason != OffCpu::Runnable && asleep >= self.options.min_stall_ns {
                    self.asleep(off, off.start + asleep);
                }
            }
        }
    }

    fn longest_candidate(&mut self, off: OffInterval) {
        let top = self.options.top;
        if top == 0 {
            return;
        }
        let len = off.len();
        if self.longest.len() >= top {
            match self.longest.peek() {
                Some(Reverse((shortest, _))) if len > *shortest => {
                    if let Some(Reverse((_, seq))) = self.longest.pop() {
                        self.longest_rows.remove(&seq);
                    }
                }
                _ => return,
            }
        }
        let (ran, complete) = self.timeline.ran_on(off.cpu, off.start, off.end);
        self.seq += 1;
        self.longest.push(Reverse((len, self.seq)));
        self.longest_rows.insert(
            self.seq,
            OffRow {
                off,
                ran: ran.into_iter().take(3).collect(),
                ran_partial: !complete,
            },
        );
    }

    /// A thread slept from `off.start` to `until`: part of its process's stall, if another
    /// thread of it slept at the same time.
    fn asleep(&mut self, off: OffInterval, until: u64) {
        let Some(pid) = self.names.pid(off.tid) else {
            return;
        };
        if is_fxtraces_own(self.names.thread(off.tid)) {
            return;
        }
        let waiter = Waiter {
            tid: off.tid,
            start: off.start,
            end: until,
            stack: off.stack,
            waker: off.woken.and_then(|(_, w)| w),
            uninterruptible: off.reason == OffCpu::Uninterruptible,
        };
        let Some(clusters) = self.clusters.entry(pid) else {
            return;
        };
        // Clusters this sleep starts after are complete (sleeps come in the order they end).
        let (done, open): (Vec<Cluster>, Vec<Cluster>) = std::mem::take(clusters)
            .into_iter()
            .partition(|c| waiter.start >= c.end);
        *clusters = open;
        // It joins a cluster with a sleep alike (not full), else starts one.
        let join = clusters.iter().position(|c| {
            c.waiters.len() < MAX_WAITERS && c.waiters.iter().any(|w| alike(w, &waiter))
        });
        let mut closed = done;
        match join {
            Some(i) => {
                let c = &mut clusters[i];
                c.end = c.end.max(waiter.end);
                c.waiters.push(waiter);
            }
            None => {
                if clusters.len() >= CLUSTERS_PER_PROCESS {
                    closed.push(clusters.remove(0));
                }
                clusters.push(Cluster {
                    end: waiter.end,
                    waiters: vec![waiter],
                });
            }
        }
        for cluster in closed {
            self.close(pid, cluster);
        }
    }

    /// A cluster of overlapping sleeps of process `pid` is complete: each stretch of it
    /// when two threads or more slept at once is a stall.
    fn close(&mut self, pid: u64, cluster: Cluster) {
        let mut edges: Vec<(u64, i32)> = cluster
            .waiters
            .iter()
            .flat_map(|w| [(w.start, 1), (w.end, -1)])
            .collect();
        // Ends before starts at the same instant: touching sleeps do not overlap.
        edges.sort();
        let mut depth = 0;
        let mut from = None;
        for (at, step) in edges {
            let before = depth;
            depth += step;
            if before < 2 && depth >= 2 {
                from = Some(at);
            } else if before >= 2 && depth < 2 {
                if let Some(start) = from.take() {
                    self.stall(pid, start, at, &cluster);
                }
            }
        }
    }

    /// The stretch `start..end` of `cluster` when two of its threads or more slept.
    fn stall(&mut self, pid: u64, start: u64, end: u64, cluster: &Cluster) {
        let waiters: Vec<Waiter> = cluster
            .waiters
            .iter()
            .filter(|w| w.start < end && w.end > start)
            .cloned()
            .collect();
        let mut distinct: Vec<u64> = waiters.iter().map(|w| w.tid).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() < 2 || end <= start {
            return;
        }
        let lost_ns = waiters
            .iter()
            .map(|w| w.end.min(end).saturating_sub(w.start.max(start)))
            .sum();
        // Candidates: more than shown, ranked again once the second pass says who ran.
        // A `--top` beyond memory means "all of them": saturate rather than wrap to 0.
        let top = self.options.top.saturating_mul(STALL_CANDIDATES);
        if top == 0 {
            return;
        }
        if self.stalls.len() >= top {
            match self.stalls.peek() {
                Some(Reverse((least, _))) if lost_ns > *least => {
                    if let Some(Reverse((_, seq))) = self.stalls.pop() {
                        self.stall_rows.remove(&seq);
                    }
                }
                _ => return,
            }
        }
        self.seq += 1;
        self.stalls.push(Reverse((lost_ns, self.seq)));
        self.stall_rows.insert(
            self.seq,
            Stall {
                pid,
                start,
                end,
                lost_ns,
                score: 0.0,
                waiters,
                running: Vec::new(),
            },
        );
    }
}

impl Analysis for Follow<'_> {
    fn head(&mut self, head: &RecordHead) -> bool {
        self.first_ticks.head(head);
        let stacks = Analysis::head(&mut self.stacks, head);
        stacks
            || matches!(
                head.kind,
                RecordKind::ContextSwitch
                    | RecordKind::SchedContextSwitch
                    | RecordKind::SchedThreadWakeup
                    | RecordKind::KernelObject
                    | RecordKind::Thread
            )
    }

    fn add(&mut self, head: &RecordHead, d: &Decoded<'_>) -> io::Result<()> {
        Analysis::add(&mut self.stacks, head, d)?;
        if let Some(switch) = Switch::of(d) {
            self.wait_points += u64::from(switch.wait_point.is_some());
            let mut intervals = std::mem::take(&mut self.intervals);
            self.timeline.switch(&switch, |i| intervals.push(i));
            for i in intervals.drain(..) {
                self.interval(i);
            }
            self.intervals = intervals;
        } else if let Some(w) = WakeupView::of(&d.record) {
            self.timeline.wakeup(&w);
        } else {
            if self.wall.is_none() {
                self.wall = WallClock::of(&d.record);
            }
            self.names.add(&d.record);
        }
        Ok(())
    }
}

/// The second pass: what each stall's process ran in its window.
struct Running<'s> {
    timeline: Timeline,
    names: &'s Names,
    /// By process, its stalls (indexes).
    by_pid: FastMap<u64, Vec<usize>>,
    stalls: &'s [Stall],
    ran: Vec<BTreeMap<u64, u64>>,
    intervals: Vec<Interval>,
}

impl Analysis for Running<'_> {
    fn head(&mut self, head: &RecordHead) -> bool {
        matches!(
            head.kind,
            RecordKind::ContextSwitch | RecordKind::SchedContextSwitch
        )
    }

    fn add(&mut self, _: &RecordHead, d: &Decoded<'_>) -> io::Result<()> {
        let Some(switch) = Switch::of(d) else {
            return Ok(());
        };
        let mut intervals = std::mem::take(&mut self.intervals);
        self.timeline.switch(&switch, |i| intervals.push(i));
        for interval in intervals.drain(..) {
            let Interval::On {
                tid,
                pid,
                start,
                end,
                ..
            } = interval
            else {
                continue;
            };
            let Some(pid) = pid.or_else(|| self.names.pid(tid)) else {
                continue;
            };
            for &i in self.by_pid.get(&pid).into_iter().flatten() {
                let s = &self.stalls[i];
                let (lo, hi) = (start.max(s.start), end.min(s.end));
                if hi > lo {
                    *self.ran[i].entry(tid).or_default() += hi - lo;
                }
            }
        }
        self.intervals = intervals;
        Ok(())
    }
}

fn ordered<T>(heap: BinaryHeap<Reverse<(u64, u64)>>, mut rows: FastMap<u64, T>) -> Vec<T> {
    let mut order: Vec<(u64, u64)> = heap.into_iter().map(|Reverse(e)| e).collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    order
        .into_iter()
        .filter_map(|(_, seq)| rows.remove(&seq))
        .collect()
}

impl SchedReport {
    /// Reads `input` twice (open it with [`Input::open_rereadable`]).
    pub fn read(input: &mut Input, options: &SchedOptions) -> Result<SchedReport, ReadError> {
        let mut follow = Follow {
            options,
            timeline: Timeline::new(),
            names: Names::new(),
            wall: None,
            first_ticks: read::FirstTime::default(),
            rows: BoundedMap::new(MAX_THREADS),
            other: ThreadRow::default(),
            longest: BinaryHeap::new(),
            longest_rows: FastMap::default(),
            clusters: BoundedMap::new(MAX_THREADS),
            stalls: BinaryHeap::new(),
            stall_rows: FastMap::default(),
            seq: 0,
            wait_points: 0,
            intervals: Vec::new(),
            stacks: StackReport::for_naming(),
        };
        let mut outcome = read::read(input, &mut follow)?;
        let pending: Vec<(u64, Vec<Cluster>)> = follow.clusters.drain().collect();
        for (pid, clusters) in pending {
            for cluster in clusters {
                follow.close(pid, cluster);
            }
        }
        let mut threads: Vec<ThreadRow> = follow.rows.drain().map(|(_, row)| row).collect();
        threads.sort_by(|a, b| b.on_cpu.cmp(&a.on_cpu).then(a.tid.cmp(&b.tid)));
        if follow.other.switches > 0 || follow.other.on_cpu > 0 {
            threads.push(follow.other);
        }
        let longest = ordered(follow.longest, follow.longest_rows);
        let mut stalls = ordered(follow.stalls, follow.stall_rows);
        let names_not_kept = follow.names.refused();
        let names = follow.names;
        if !stalls.is_empty() && outcome.error.is_none() {
            let mut by_pid: FastMap<u64, Vec<usize>> = FastMap::default();
            for (i, s) in stalls.iter().enumerate() {
                by_pid.entry(s.pid).or_default().push(i);
            }
            let mut running = Running {
                timeline: Timeline::new(),
                names: &names,
                by_pid,
                stalls: &stalls,
                ran: vec![BTreeMap::new(); stalls.len()],
                intervals: Vec::new(),
            };
            let again = read::read_again(input, &mut running)?;
            // (The first reading's counts; the second's error, if the file changed between.)
            if again.error.is_some() {
                outcome = again;
            }
            let ran = running.ran;
            for (s, ran) in stalls.iter_mut().zip(ran) {
                let waiters: Vec<u64> = s.waiters.iter().map(|w| w.tid).collect();
                let mut v: Vec<(u64, u64)> = ran
                    .into_iter()
                    .filter(|(tid, _)| !waiters.contains(tid))
                    .collect();
                v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                v.truncate(4);
                let busiest = v.first().map_or(0, |(_, ns)| *ns);
                s.score = s.lost_ns as f64 * busiest as f64 / s.duration_ns().max(1) as f64;
                s.running = v;
            }
            stalls.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.start.cmp(&b.start)));
        }
        stalls.truncate(options.top);
        // Only the binaries of the wait points shown.
        let shown = longest.iter().filter_map(|o| o.off.stack).chain(
            stalls
                .iter()
                .flat_map(|s| s.waiters.iter().filter_map(|w| w.stack)),
        );
        let mut symbols = Symbolizer::new();
        symbols.load_mappings(follow.stacks.mappings_of(shown));
        Ok(SchedReport {
            threads,
            longest,
            stalls,
            switches: follow.timeline.switches,
            wakeups: follow.timeline.wakeups,
            wait_points: follow.wait_points,
            symbols,
            stacks: follow.stacks,
            mismatches: follow.timeline.mismatches,
            out_of_order: follow.timeline.out_of_order,
            threads_not_kept: follow.timeline.threads_not_followed() + follow.rows.refused(),
            names_not_kept,
            origin_ns: follow.first_ticks.ns(),
            wall: follow.wall,
            names,
            outcome,
        })
    }
}

// === the report as text and JSON ===

use std::io::Write;

use serde_json::{json, Value as Json};

use crate::report::spans::Style;
use crate::report::text::{Ns, Since};

/// Thread rows shown in the text (the others are summed up in one line).
pub const THREADS_SHOWN: usize = 20;

impl SchedReport {
    fn when(&self, ns: u64, style: Style) -> String {
        let since = Since(ns.saturating_sub(self.origin_ns));
        match (style.wall, self.wall) {
            (true, Some(wall)) => format!("{since} [{}]", wall.at(ns)),
            _ => since.to_string(),
        }
    }

    /// A wait point as its frames, innermost first (`futex_wait ← __lll_lock_wait ← …`).
    pub fn wait_point(&self, wait: Option<WaitPoint>) -> String {
        match wait {
            Some(key) => one_line(&self.stacks.frames(key, &self.symbols)),
            None => "-".to_owned(),
        }
    }

    fn distribution(d: &Durations) -> String {
        if d.count == 0 {
            return "-".to_owned();
        }
        format!(
            "{}× p50 {} p99 {} max {}",
            d.count,
            Ns(d.p50()),
            Ns(d.p99()),
            Ns(d.max)
        )
    }

    /// The report as text.
    pub fn write_text(&self, out: &mut (impl Write + ?Sized), style: Style) -> io::Result<()> {
        writeln!(
            out,
            "context switches: {}, wake-ups: {}, switches with a wait point: {}",
            self.switches, self.wakeups, self.wait_points
        )?;
        for lack in self.lacks() {
            writeln!(out, "note: {lack}")?;
        }
        if self.switches == 0 {
            return Ok(());
        }
        if style.wall && self.wall.is_none() {
            writeln!(
                out,
                "(--wall: the trace has no wall-clock anchor; times are relative)"
            )?;
        }
        writeln!(
            out,
            "\nthreads (most time on CPU first; fxtrace's own threads left out):"
        )?;
        for row in self.threads.iter().take(THREADS_SHOWN) {
            let name = if row.tid == 0 {
                "(other threads)".to_owned()
            } else {
                self.names.label(row.tid)
            };
            writeln!(
                out,
                "  {name}: on CPU {} in {} slice(s)\n    runnable {} · sleeping {} · D {} · \
                 woken → running {}",
                Ns(row.on_cpu),
                row.switches,
                Self::distribution(&row.runnable),
                Self::distribution(&row.sleeping),
                Self::distribution(&row.uninterruptible),
                Self::distribution(&row.latency),
            )?;
        }
        if self.threads.len() > THREADS_SHOWN {
            writeln!(
                out,
                "  … {} more thread(s) (--json lists them all)",
                self.threads.len() - THREADS_SHOWN
            )?;
        }
        if !self.longest.is_empty() {
            writeln!(out, "\nlongest off CPU:")?;
        }
        for (i, row) in self.longest.iter().enumerate() {
            let o = &row.off;
            let (asleep, runnable) = o.split();
            writeln!(
                out,
                "{:>2}. {}  {}  at {}  {}",
                i + 1,
                self.names.label(o.tid),
                Ns(o.len()),
                self.when(o.start, style),
                match o.reason {
                    OffCpu::Runnable => "runnable (preempted)".to_owned(),
                    reason => format!(
                        "{} {} then runnable {}",
                        reason.name(),
                        Ns(asleep),
                        Ns(runnable)
                    ),
                }
            )?;
            if o.reason != OffCpu::Runnable && (self.wakeups > 0 || self.wait_points > 0) {
                let waker = match o.woken {
                    Some((_, Some(w))) => self.names.label(w),
                    Some((_, None)) => "(not recorded)".to_owned(),
                    None => "-".to_owned(),
                };
                writeln!(
                    out,
                    "    wait point: {}, woken by: {waker}",
                    self.wait_point(o.stack)
                )?;
            }
            if !row.ran.is_empty() {
                let ran: Vec<String> = row
                    .ran
                    .iter()
                    .map(|(tid, ns)| format!("{} {}", self.names.label(*tid), Ns(*ns)))
                    .collect();
                writeln!(
                    out,
                    "    ran on CPU {} meanwhile: {}{}",
                    o.cpu,
                    ran.join(", "),
                    if row.ran_partial { " (at least)" } else { "" }
                )?;
            }
        }
        if !self.stalls.is_empty() {
            writeln!(out, "\nstalls (threads of one process asleep at once):")?;
        }
        for (i, s) in self.stalls.iter().enumerate() {
            let process = self.names.process(s.pid).unwrap_or("?");
            writeln!(
                out,
                "{:>2}. {process} (pid {})  {} threads asleep at once for {} at {} ({} lost)",
                i + 1,
                s.pid,
                s.threads(),
                Ns(s.duration_ns()),
                self.when(s.start, style),
                Ns(s.lost_ns)
            )?;
            for (tid, ns) in &s.running {
                writeln!(
                    out,
                    "    running meanwhile: {} {}",
                    self.names.label(*tid),
                    Ns(*ns)
                )?;
            }
            for w in &s.waiters {
                let waker = match w.waker {
                    Some(waker) => format!(", woken by {}", self.names.label(waker)),
                    None => String::new(),
                };
                let at = match w.stack {
                    Some(_) => format!(" at {}", self.wait_point(w.stack)),
                    None => String::new(),
                };
                writeln!(
                    out,
                    "    waiting: {} {}{}{at}{waker}",
                    self.names.label(w.tid),
                    Ns(w.end - w.start),
                    if w.uninterruptible { " (D)" } else { "" },
                )?;
            }
        }
        let counted = self.counted_notes();
        if !counted.is_empty() {
            writeln!(out)?;
        }
        for note in counted {
            writeln!(out, "note: {note}")?;
        }
        Ok(())
    }

    fn thread_json(&self, tid: u64) -> Json {
        json!({"tid": tid, "pid": self.names.pid(tid), "thread": self.names.label(tid)})
    }

    fn distribution_json(d: &Durations) -> Json {
        json!({"count": d.count, "total_ns": d.total, "p50_ns": d.p50(), "p99_ns": d.p99(),
               "max_ns": d.max})
    }

    /// The report as JSON lines: one object per thread, interval, stall and note.
    pub fn write_json(&self, out: &mut (impl Write + ?Sized), style: Style) -> io::Result<()> {
        for row in &self.threads {
            let mut line = self.thread_json(row.tid);
            line["type"] = json!("thread");
            line["on_cpu_ns"] = json!(row.on_cpu);
            line["switches"] = json!(row.switches);
            line["runnable"] = Self::distribution_json(&row.runnable);
            line["sleeping"] = Self::distribution_json(&row.sleeping);
            line["uninterruptible"] = Self::distribution_json(&row.uninterruptible);
            line["latency"] = Self::distribution_json(&row.latency);
            writeln!(out, "{line}")?;
        }
        let wall = |ns: u64| match (style.wall, self.wall) {
            (true, Some(w)) => json!(w.at(ns).to_string()),
            _ => Json::Null,
        };
        for (i, row) in self.longest.iter().enumerate() {
            let o = &row.off;
            let (asleep, runnable) = o.split();
            let mut line = self.thread_json(o.tid);
            line["type"] = json!("off_cpu");
            line["rank"] = json!(i + 1);
            line["start_ns"] = json!(o.start.saturating_sub(self.origin_ns));
            line["start_wall"] = wall(o.start);
            line["duration_ns"] = json!(o.len());
            line["state"] = json!(o.reason.name());
            line["asleep_ns"] = json!(asleep);
            line["runnable_ns"] = json!(runnable);
            line["cpu"] = json!(o.cpu);
            line["wait_point"] = json!(o.stack.map(|_| self.wait_point(o.stack)));
            line["waker"] = json!(o.woken.and_then(|(_, w)| w).map(|w| self.thread_json(w)));
            line["ran"] = json!(row
                .ran
                .iter()
                .map(|(tid, ns)| {
                    let mut t = self.thread_json(*tid);
                    t["ns"] = json!(ns);
                    t
                })
                .collect::<Vec<_>>());
            line["ran_partial"] = json!(row.ran_partial);
            writeln!(out, "{line}")?;
        }
        for (i, s) in self.stalls.iter().enumerate() {
            let line = json!({
                "type": "stall", "rank": i + 1, "pid": s.pid,
                "process": self.names.process(s.pid),
                "start_ns": s.start.saturating_sub(self.origin_ns), "start_wall": wall(s.start),
                "duration_ns": s.duration_ns(), "lost_ns": s.lost_ns, "threads": s.threads(),
                "running": s.running.iter().map(|(tid, ns)| {
                    let mut t = self.thread_json(*tid);
                    t["ns"] = json!(ns);
                    t
                }).collect::<Vec<_>>(),
                "waiters": s.waiters.iter().map(|w| {
                    let mut t = self.thread_json(w.tid);
                    t["asleep_ns"] = json!(w.end - w.start);
                    t["wait_point"] = json!(w.stack.map(|_| self.wait_point(w.stack)));
                    t["uninterruptible"] = json!(w.uninterruptible);
                    t["waker"] = json!(w.waker.map(|k| self.thread_json(k)));
                    t
                }).collect::<Vec<_>>(),
            });
            writeln!(out, "{line}")?;
        }
        for note in self.lacks().into_iter().chain(self.counted_notes()) {
            writeln!(out, "{}", json!({"type": "note", "text": note}))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_counts_a_thread_that_slept_twice_once() {
        let waiter = |tid, start, end| Waiter {
            tid,
            start,
            end,
            stack: None,
            waker: None,
            uninterruptible: false,
        };
        let stall = Stall {
            pid: 10,
            start: 0,
            end: 100,
            lost_ns: 0,
            score: 0.0,
            waiters: vec![waiter(11, 0, 40), waiter(11, 50, 100), waiter(12, 0, 100)],
            running: Vec::new(),
        };
        assert_eq!(stall.threads(), 2);
    }
}

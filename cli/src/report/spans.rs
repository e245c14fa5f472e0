//! `fxtrace report spans`: where a program's spans spent their time. Per span name: count,
//! total, self time (less the time of the spans inside them), p50, p99, max. Then the slowest
//! spans with their arguments, thread, start, the children that took their time, and, where
//! the trace has the thread's context switches, the span's time split into on CPU, runnable
//! (preempted), sleeping and D, with who ran instead on the CPU, who woke it and where it
//! waited.
//!
//! Spans are duration begin/end pairs (an end closes its thread's innermost begin), duration
//! complete events and async begin/end pairs (by process, category, name and id). Two passes
//! over the input: the first finds the spans, the second (only when the trace has switches)
//! follows the slowest spans' threads through the switches and wake-ups ([`Timeline`]), and
//! reads their begin records' arguments back.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io;
use std::rc::Rc;

use fxtrace_format::{
    Decoded, DecodedEvent, DecodedEventKind, DecodedRecord, EventType, RecordHead, RecordKind,
    Thread,
};

use crate::read::bounded::{BoundedMap, FastMap};
use crate::read::cpus::{OffCpu, Switch, WaitPoint};
use crate::read::filter::Glob;
use crate::read::histogram::Durations;
use crate::read::names::Names;
use crate::read::slices::{Closed, Slices};
use crate::read::timeline::{Interval, Timeline};
use crate::read::wall::WallClock;
use crate::read::{self, Analysis, Input, Outcome, ReadError};
use crate::report::stacks::{one_line, StackReport};
use crate::report::symbolize::Symbolizer;
use fxtrace_format::sched::WakeupView;

/// Span names with statistics of their own; the others are counted together.
pub const MAX_NAMES: usize = 4096;
/// Child names kept per open span (the others are added up as one).
pub const MAX_CHILD_NAMES: usize = 8;
/// Async spans open at once.
pub const MAX_OPEN_ASYNC: usize = 1 << 16;
/// Arguments shown per span, and the length of each.
pub const MAX_ARGS_SHOWN: usize = 8;
/// Longest argument text shown.
pub const MAX_ARG_TEXT: usize = 120;

/// What to report.
#[derive(Debug, Clone, Default)]
pub struct SpansOptions {
    /// How many of the slowest spans to detail.
    pub top: usize,
    /// Only spans whose name matches one of these (all when empty).
    pub names: Vec<Glob>,
    /// Only spans of these processes (all when empty).
    pub pids: Vec<u64>,
    /// Only spans of these threads (all when empty).
    pub tids: Vec<u64>,
    /// Only spans at least this long, ns.
    pub min_duration_ns: u64,
}

impl SpansOptions {
    fn keeps(&self, name: &str, thread: Thread, duration: u64) -> bool {
        duration >= self.min_duration_ns
            && (self.names.is_empty() || self.names.iter().any(|g| g.matches(name)))
            && (self.pids.is_empty() || self.pids.contains(&thread.pid))
            && (self.tids.is_empty() || self.tids.contains(&thread.tid))
    }
}

/// One row of the per-name table.
#[derive(Debug, Clone, Default)]
pub struct NameRow {
    /// The span name (`(other names)` for those beyond [`MAX_NAMES`]).
    pub name: String,
    /// Durations.
    pub durations: Durations,
    /// Total less the time of the spans directly inside them, ns.
    pub self_ns: u64,
}

/// A child's share of a span's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// Its name (`(others)` for those beyond [`MAX_CHILD_NAMES`]).
    pub name: String,
    /// How many times it ran inside the span.
    pub count: u64,
    /// Their total, ns.
    pub total_ns: u64,
}

/// A slow span's time by what its thread was doing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSplit {
    /// On a CPU, ns.
    pub on_cpu: u64,
    /// Runnable, waiting for a CPU (preempted, or woken and not yet running), ns.
    pub runnable: u64,
    /// Asleep (blocked, interruptible), ns.
    pub sleeping: u64,
    /// Asleep uninterruptibly (Linux `D`), ns.
    pub uninterruptible: u64,
    /// Not covered by the switches read (the thread's first switch came later), ns.
    pub unknown: u64,
    /// Who ran on the CPU the thread had left while it was off: (tid, ns), longest first.
    pub ran_instead: Vec<(u64, u64)>,
    /// Who woke it: (tid, times).
    pub woken_by: Vec<(u64, u64)>,
    /// Where it waited: (wait point, ns asleep there).
    pub wait_points: Vec<(WaitPoint, u64)>,
}

/// One of the slowest spans.
#[derive(Debug, Clone)]
pub struct SlowSpan {
    /// Name.
    pub name: String,
    /// Category.
    pub category: String,
    /// Its thread (the begin's, for an async span).
    pub thread: Thread,
    /// Begin, ns (trace time).
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
    /// An async span (not bound to its thread: no CPU split).
    pub is_async: bool,
    /// Its arguments, `name=value` (the begin's).
    pub args: Vec<String>,
    /// The spans directly inside it, by name, the longest total first.
    pub children: Vec<Child>,
    /// Its time by what the thread did (when the trace has the thread's switches).
    pub cpu: Option<CpuSplit>,
    /// The record the span began with (to read its arguments back).
    begin_offset: u64,
}

impl SlowSpan {
    /// Its length, ns.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// The report.
#[derive(Debug)]
pub struct SpansReport {
    /// Per name, the longest total first.
    pub names: Vec<NameRow>,
    /// The slowest spans, the slowest first.
    pub slowest: Vec<SlowSpan>,
    /// Spans counted.
    pub spans: u64,
    /// Duration ends with no begin open on their thread.
    pub unmatched_ends: u64,
    /// Async ends with no begin (a wrapped or cut trace lost it).
    pub orphan_async_ends: u64,
    /// Spans still open when the trace ended (not counted).
    pub unclosed: u64,
    /// Spans not followed (beyond the bounds of open spans).
    pub not_kept: u64,
    /// The trace's first timestamp, ns (what relative times count from).
    pub origin_ns: u64,
    /// When the trace was taken, if it says.
    pub wall: Option<WallClock>,
    /// Context switches in the trace.
    pub switches: u64,
    /// Wake-ups in the trace.
    pub wakeups: u64,
    /// Names of threads and processes.
    pub names_of: Names,
    /// The trace's call stacks (wait points).
    pub stacks: StackReport,
    /// Names their frames.
    pub symbols: Symbolizer,
    /// How reading went (the second pass's, when there was one).
    pub outcome: Outcome,
}

/// A duration span open on its thread.
#[derive(Debug, Default)]
struct OpenSpan {
    begin_offset: u64,
    /// Time of the spans directly inside, ns.
    children_ns: u64,
    /// Their breakdown (at most [`MAX_CHILD_NAMES`] names, then `other`).
    children: Vec<(Rc<str>, u64, u64)>,
    other: (u64, u64),
}

/// The address of a shared text, a key for the time it is held.
fn address(text: &Rc<str>) -> usize {
    Rc::as_ptr(text) as *const u8 as usize
}

/// An async span open.
#[derive(Debug)]
struct OpenAsync {
    begin_ns: u64,
    thread: Thread,
    category: Rc<str>,
    name: Rc<str>,
    begin_offset: u64,
}

#[derive(Debug, Default)]
struct NameStats {
    durations: Durations,
    self_ns: u64,
}

/// The first pass: spans, names, the origin and the anchor.
struct Collect<'o> {
    options: &'o SpansOptions,
    slices: Slices<OpenSpan>,
    /// Async spans open by (process, category, name, id), the texts by the address of their
    /// shared copy ([`Slices::text`]: one address per text while held).
    asyncs: BoundedMap<(u64, usize, usize, u64), OpenAsync>,
    /// Per name (by the address of its shared copy, held by the row).
    by_name: BoundedMap<usize, (Rc<str>, NameStats)>,
    other_names: NameStats,
    /// The slowest so far: min-heap of (duration, sequence) → span.
    slowest: BinaryHeap<Reverse<(u64, u64)>>,
    slow: FastMap<u64, SlowSpan>,
    seq: u64,
    spans: u64,
    unmatched_ends: u64,
    orphan_async_ends: u64,
    first_ticks: read::FirstTime,
    wall: Option<WallClock>,
    names: Names,
    switches: u64,
    wakeups: u64,
}

impl Collect<'_> {
    /// A span ended: counted, and kept if among the slowest.
    #[allow(clippy::too_many_arguments)]
    fn ended(
        &mut self,
        name: &Rc<str>,
        category: &str,
        thread: Thread,
        start_ns: u64,
        end_ns: u64,
        self_ns: u64,
        is_async: bool,
        begin_offset: u64,
        children: Vec<Child>,
    ) {
        let duration = end_ns.saturating_sub(start_ns);
        if !self.options.keeps(name, thread, duration) {
            return;
        }
        self.spans += 1;
        let key = Rc::as_ptr(name) as *const u8 as usize;
        let stats = match self
            .by_name
            .entry_with(key, || (name.clone(), NameStats::default()))
        {
            Some((_, stats)) => stats,
            None => &mut self.other_names,
        };
        stats.durations.add(duration);
        stats.self_ns += self_ns;
        let top = self.options.top;
        if top == 0 {
            return;
        }
        if self.slowest.len() >= top {
            match self.slowest.peek() {
                Some(Reverse((shortest, _))) if duration > *shortest => {
                    if let Some(Reverse((_, seq))) = self.slowest.pop() {
                        self.slow.remove(&seq);
                    }
                }
                _ => return,
            }
        }
        self.seq += 1;
        self.slowest.push(Reverse((duration, self.seq)));
        self.slow.insert(
            self.seq,
            SlowSpan {
                name: name.to_string(),
                category: category.to_owned(),
                thread,
                start_ns,
                end_ns,
                is_async,
                args: Vec::new(),
                children,
                cpu: None,
                begin_offset,
            },
        );
    }

    fn event(&mut self, offset: u64, e: &DecodedEvent<'_>) {
        self.names.saw(e.thread.pid, e.thread.tid);
        let ts = e.time.ns;
        match e.kind {
            DecodedEventKind::DurationBegin => {
                let open = OpenSpan {
                    begin_offset: offset,
                    ..OpenSpan::default()
                };
                self.slices.begin(e.thread, ts, &e.category, &e.name, open);
            }
            DecodedEventKind::DurationEnd => {
                let open = match self.slices.end(e.thread) {
                    Closed::Slice(open) => open,
                    Closed::NotKept => return,
                    Closed::Unmatched => {
                        self.unmatched_ends += 1;
                        return;
                    }
                };
                let end = ts.max(open.begin_ns);
                self.closed(
                    e.thread,
                    open.begin_ns,
                    end,
                    &open.name,
                    &open.category,
                    open.data,
                );
            }
            DecodedEventKind::DurationComplete { end } => {
                let name = self.slices.text(&e.name);
                let end = end.ns.max(ts);
                let open = OpenSpan {
                    begin_offset: offset,
                    ..OpenSpan::default()
                };
                let category = e.category.to_string();
                self.closed(e.thread, ts, end, &name, &category, open);
            }
            DecodedEventKind::AsyncBegin { id } => {
                let (category, name) = (self.slices.text(&e.category), self.slices.text(&e.name));
                let key = (e.thread.pid, address(&category), address(&name), id);
                if let Some(open) = self.asyncs.entry_with(key, || OpenAsync {
                    begin_ns: ts,
                    thread: e.thread,
                    category,
                    name,
                    begin_offset: offset,
                }) {
                    open.begin_ns = ts;
                }
            }
            DecodedEventKind::AsyncEnd { id } => {
                let (category, name) = (self.slices.text(&e.category), self.slices.text(&e.name));
                let key = (e.thread.pid, address(&category), address(&name), id);
                match self.asyncs.remove(&key) {
                    Some(open) => {
                        let end = ts.max(open.begin_ns);
                        let duration = end - open.begin_ns;
                        self.ended(
                            &open.name,
                            &open.category,
                            open.thread,
                            open.begin_ns,
                            end,
                            duration,
                            true,
                            open.begin_offset,
                            Vec::new(),
                        );
                    }
                    None => self.orphan_async_ends += 1,
                }
            }
            _ => {}
        }
    }

    /// A duration span of `thread` closed: its parent learns of it, then it is counted.
    fn closed(
        &mut self,
        thread: Thread,
        start: u64,
        end: u64,
        name: &Rc<str>,
        category: &str,
        open: OpenSpan,
    ) {
        let duration = end - start;
        if let Some(parent) = self.slices.innermost_mut(thread) {
            let p = &mut parent.data;
            p.children_ns += duration;
            let full = p.children.len() >= MAX_CHILD_NAMES;
            match p
                .children
                .iter_mut()
                .find(|c| Rc::ptr_eq(&c.0, name) || *c.0 == **name)
            {
                Some(c) => {
                    c.1 += 1;
                    c.2 += duration;
                }
                None if !full => p.children.push((name.clone(), 1, duration)),
                None => {
                    p.other.0 += 1;
                    p.other.1 += duration;
                }
            }
        }
        let mut children: Vec<Child> = open
            .children
            .iter()
            .map(|(name, count, total)| Child {
                name: name.to_string(),
                count: *count,
                total_ns: *total,
            })
            .collect();
        if open.other.0 > 0 {
            children.push(Child {
                name: "(others)".into(),
                count: open.other.0,
                total_ns: open.other.1,
            });
        }
        children.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
        let self_ns = duration.saturating_sub(open.children_ns);
        self.ended(
            name,
            category,
            thread,
            start,
            end,
            self_ns,
            false,
            open.begin_offset,
            children,
        );
    }
}

impl Analysis for Collect<'_> {
    fn head(&mut self, head: &RecordHead) -> bool {
        self.first_ticks.head(head);
        match head.kind {
            RecordKind::Event => matches!(
                head.event_type,
                Some(
                    EventType::DurationBegin
                        | EventType::DurationEnd
                        | EventType::DurationComplete
                        | EventType::AsyncBegin
                        | EventType::AsyncEnd
                )
            ),
            RecordKind::ContextSwitch | RecordKind::SchedContextSwitch => {
                self.switches += 1;
                false
            }
            RecordKind::SchedThreadWakeup => {
                self.wakeups += 1;
                false
            }
            _ => Names::wants(head),
        }
    }

    fn add(&mut self, head: &RecordHead, d: &Decoded<'_>) -> io::Result<()> {
        match &d.record {
            DecodedRecord::Event(e) => self.event(head.offset, e),
            record => {
                if self.wall.is_none() {
                    self.wall = WallClock::of(record);
                }
                self.names.add(record);
            }
        }
        Ok(())
    }
}

/// The second pass: the slowest spans' threads through the switches, and their arguments.
struct Follow<'s> {
    /// Per thread, the slowest spans on it (indexes into `slow`).
    windows: FastMap<u64, Vec<usize>>,
    slow: &'s mut [SlowSpan],
    /// Begin records to read arguments from → the span.
    begins: FastMap<u64, usize>,
    timeline: Timeline,
    /// Per span: who ran instead, woken by, wait points, as maps.
    ran: Vec<BTreeMap<u64, u64>>,
    wakers: Vec<BTreeMap<u64, u64>>,
    waits: Vec<BTreeMap<WaitPoint, u64>>,
    covered: Vec<u64>,
    intervals: Vec<Interval>,
    /// The followed threads now off a CPU: the CPU they left, since when.
    off_now: FastMap<u64, (u16, u64)>,
    /// The trace's call stacks, symbols and mappings (wait points named by their frames).
    stacks: StackReport,
    /// The latest time read (records' and complete events' ends), as (ticks per second,
    /// ticks) and ns: where the slices still running end.
    last: (u64, u64),
    last_ns: u64,
}

fn overlap(a: u64, b: u64, start: u64, end: u64) -> Option<(u64, u64)> {
    let (lo, hi) = (a.max(start), b.min(end));
    (hi > lo).then_some((lo, hi))
}

/// `ran` = (tid, a, b): `tid` ran from `a` to `b` on the CPU `target` left at `since`; within
/// `target`'s slow spans, that is time `tid` ran instead of it.
fn ran_instead_of(
    windows: &FastMap<u64, Vec<usize>>,
    slow: &[SlowSpan],
    instead: &mut [BTreeMap<u64, u64>],
    target: u64,
    since: u64,
    (tid, a, b): (u64, u64, u64),
) {
    for &i in windows.get(&target).into_iter().flatten() {
        if let Some((lo, hi)) = overlap(a.max(since), b, slow[i].start_ns, slow[i].end_ns) {
            *instead[i].entry(tid).or_default() += hi - lo;
        }
    }
}

impl Follow<'_> {
    fn interval(&mut self, interval: Interval) {
        let tid = match interval {
            Interval::On { tid, .. } => tid,
            Interval::Off(o) => o.tid,
        };
        let Some(spans) = self.windows.get(&tid) else {
            return;
        };
        for &i in spans {
            let (start, end) = (self.slow[i].start_ns, self.slow[i].end_ns);
            let split = self.slow[i].cpu.get_or_insert_with(CpuSplit::default);
            match interval {
                Interval::On {
                    start: a, end: b, ..
                } => {
                    if let Some((lo, hi)) = overlap(a, b, start, end) {
                        split.on_cpu += hi - lo;
                        self.covered[i] += hi - lo;
                    }
                }
                Interval::Off(off) => {
                    let Some((lo, hi)) = overlap(off.start, off.end, start, end) else {
                        continue;
                    };
                    self.covered[i] += hi - lo;
                    // The asleep part ends at the wake-up, the rest is runnable.
                    let (asleep, _) = off.split();
                    let wake = off.start + asleep;
                    let sleep_part = overlap(off.start, wake, lo, hi).map_or(0, |(a, b)| b - a);
                    let runnable_part = (hi - lo) - sleep_part;
                    split.runnable += runnable_part;
                    match off.reason {
                        OffCpu::Uninterruptible => split.uninterruptible += sleep_part,
                        OffCpu::Runnable => {}
                        _ => split.sleeping += sleep_part,
                    }
                    if sleep_part > 0 {
                        if let Some(stack) = off.stack {
                            *self.waits[i].entry(stack).or_default() += sleep_part;
                        }
                    }
                    if let Some((at, Some(waker))) = off.woken {
                        if at >= start && at <= end {
                            *self.wakers[i].entry(waker).or_default() += 1;
                        }
                    }
                }
            }
        }
    }

    /// Who ran instead: a thread ran on `cpu` from `a` to `b`; each followed thread off that
    /// CPU meanwhile had it run instead (within its slow spans).
    fn ran_instead(&mut self, tid: u64, cpu: u16, a: u64, b: u64) {
        for (&target, &(left, since)) in &self.off_now {
            if left == cpu && target != tid {
                ran_instead_of(
                    &self.windows,
                    self.slow,
                    &mut self.ran,
                    target,
                    since,
                    (tid, a, b),
                );
            }
        }
    }

    /// One switch: the intervals it closes, who ran instead of the followed threads.
    fn switch(&mut self, switch: &Switch<'_>) {
        let mut intervals = std::mem::take(&mut self.intervals);
        let applied = self.timeline.switch(switch, |i| intervals.push(i));
        self.intervals(&mut intervals);
        self.intervals = intervals;
        if applied && self.windows.contains_key(&switch.outgoing_tid) {
            self.off_now
                .insert(switch.outgoing_tid, (switch.cpu, switch.ns));
        }
    }

    /// The trace ended: the slices still running, to the latest time read.
    fn finish(&mut self) {
        let mut intervals = std::mem::take(&mut self.intervals);
        self.timeline.finish(self.last_ns, |i| intervals.push(i));
        self.intervals(&mut intervals);
        self.intervals = intervals;
    }

    /// Intervals closed: the spans' splits, who ran instead of the followed threads.
    fn intervals(&mut self, intervals: &mut Vec<Interval>) {
        for interval in intervals.drain(..) {
            match interval {
                Interval::On {
                    tid,
                    cpu,
                    start,
                    end,
                    ..
                } => self.ran_instead(tid, cpu, start, end),
                Interval::Off(off) => {
                    // A followed thread back on another CPU: what still runs on the one it
                    // left ran instead of it until now (and of it alone: the others off that
                    // CPU are credited when that slice ends).
                    if let Some((left, since)) = self.off_now.remove(&off.tid) {
                        if off.back_on != left {
                            if let Some((tid, ran_since)) = self.timeline.running(left) {
                                let ran = (tid, ran_since, off.end);
                                ran_instead_of(
                                    &self.windows,
                                    self.slow,
                                    &mut self.ran,
                                    off.tid,
                                    since,
                                    ran,
                                );
                            }
                        }
                    }
                }
            }
            self.interval(interval);
        }
    }

    /// Takes a record's time (and a complete event's end) into the latest time read.
    fn saw(&mut self, rate: u64, ticks: u64) {
        if rate != self.last.0 || ticks > self.last.1 {
            let ns = fxtrace_format::ticks_to_ns(ticks, rate);
            if ns >= self.last_ns {
                self.last = (rate, ticks);
                self.last_ns = ns;
            }
        }
    }
}

impl Analysis for Follow<'_> {
    fn head(&mut self, head: &RecordHead) -> bool {
        for ticks in [head.ticks, head.end_ticks].into_iter().flatten() {
            self.saw(head.ticks_per_second, ticks);
        }
        if Analysis::head(&mut self.stacks, head) {
            return true;
        }
        match head.kind {
            RecordKind::ContextSwitch
            | RecordKind::SchedContextSwitch
            | RecordKind::SchedThreadWakeup => true,
            RecordKind::Event => self.begins.contains_key(&head.offset),
            _ => false,
        }
    }

    fn add(&mut self, head: &RecordHead, d: &Decoded<'_>) -> io::Result<()> {
        Analysis::add(&mut self.stacks, head, d)?;
        if let Some(switch) = Switch::of(d) {
            self.switch(&switch);
        } else if let Some(w) = WakeupView::of(&d.record) {
            self.timeline.wakeup(&w);
        } else if let (Some(&i), DecodedRecord::Event(e)) =
            (self.begins.get(&head.offset), &d.record)
        {
            self.slow[i].args = e
                .args
                .iter()
                .take(MAX_ARGS_SHOWN)
                .map(|a| {
                    let text = format!("{}={}", a.name, crate::report::text::Value(&a.value));
                    fxtrace_format::truncate_str(&text, MAX_ARG_TEXT).to_owned()
                })
                .collect();
        }
        Ok(())
    }
}

fn top_entries<K: Copy + Ord>(map: &BTreeMap<K, u64>, n: usize) -> Vec<(K, u64)> {
    let mut v: Vec<(K, u64)> = map.iter().map(|(k, v)| (*k, *v)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

impl SpansReport {
    /// Reads `input` (twice when it has switches: open it with [`Input::open_rereadable`]).
    pub fn read(input: &mut Input, options: &SpansOptions) -> Result<SpansReport, ReadError> {
        let mut collect = Collect {
            options,
            slices: Slices::new(),
            asyncs: BoundedMap::new(MAX_OPEN_ASYNC),
            by_name: BoundedMap::new(MAX_NAMES),
            other_names: NameStats::default(),
            slowest: BinaryHeap::new(),
            slow: FastMap::default(),
            seq: 0,
            spans: 0,
            unmatched_ends: 0,
            orphan_async_ends: 0,
            first_ticks: read::FirstTime::default(),
            wall: None,
            names: Names::new(),
            switches: 0,
            wakeups: 0,
        };
        let mut outcome = read::read(input, &mut collect)?;
        let unclosed = collect
            .slices
            .drain()
            .iter()
            .map(|(_, s)| s.len() as u64)
            .sum::<u64>()
            + collect.asyncs.len() as u64;
        let mut names: Vec<NameRow> = collect
            .by_name
            .drain()
            .map(|(_, (name, s))| NameRow {
                name: name.to_string(),
                durations: s.durations,
                self_ns: s.self_ns,
            })
            .collect();
        if collect.other_names.durations.count > 0 {
            names.push(NameRow {
                name: "(other names)".into(),
                durations: collect.other_names.durations,
                self_ns: collect.other_names.self_ns,
            });
        }
        names.sort_by(|a, b| {
            b.durations
                .total
                .cmp(&a.durations.total)
                .then(a.name.cmp(&b.name))
        });
        let mut order: Vec<(u64, u64)> = collect
            .slowest
            .into_iter()
            .map(|Reverse(entry)| entry)
            .collect();
        order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut slowest: Vec<SlowSpan> = order
            .into_iter()
            .filter_map(|(_, seq)| collect.slow.remove(&seq))
            .collect();
        let mut timeline_stats = (collect.switches, collect.wakeups);
        let mut stacks = StackReport::new();
        let mut symbols = Symbolizer::new();
        if !slowest.is_empty() && outcome.error.is_none() {
            let mut windows: FastMap<u64, Vec<usize>> = FastMap::default();
            let mut begins = FastMap::default();
            for (i, s) in slowest.iter().enumerate() {
                if !s.is_async && collect.switches > 0 {
                    windows.entry(s.thread.tid).or_default().push(i);
                }
                begins.insert(s.begin_offset, i);
            }
            let n = slowest.len();
            let mut follow = Follow {
                windows,
                slow: &mut slowest,
                begins,
                timeline: Timeline::new(),
                ran: vec![BTreeMap::new(); n],
                wakers: vec![BTreeMap::new(); n],
                waits: vec![BTreeMap::new(); n],
                covered: vec![0; n],
                intervals: Vec::new(),
                off_now: FastMap::default(),
                stacks: StackReport::for_naming(),
                last: (0, 0),
                last_ns: 0,
            };
            let again = read::read_again(input, &mut follow)?;
            follow.finish();
            // (The first reading's counts; the second's error, if the file changed between.)
            if again.error.is_some() {
                outcome = again;
            }
            timeline_stats = (follow.timeline.switches, follow.timeline.wakeups);
            let Follow {
                ran,
                wakers,
                waits,
                covered,
                stacks: followed,
                ..
            } = follow;
            for (i, s) in slowest.iter_mut().enumerate() {
                let duration = s.duration_ns();
                if let Some(split) = s.cpu.as_mut() {
                    split.unknown = duration.saturating_sub(covered[i]);
                    split.ran_instead = top_entries(&ran[i], 5);
                    split.woken_by = top_entries(&wakers[i], 3);
                    split.wait_points = top_entries(&waits[i], 3);
                }
            }
            // Only the binaries of the wait points shown.
            let shown = slowest
                .iter()
                .filter_map(|s| s.cpu.as_ref())
                .flat_map(|c| c.wait_points.iter().map(|(wait, _)| *wait));
            symbols.load_mappings(followed.mappings_of(shown));
            stacks = followed;
        }
        Ok(SpansReport {
            names,
            slowest,
            spans: collect.spans,
            unmatched_ends: collect.unmatched_ends,
            orphan_async_ends: collect.orphan_async_ends,
            unclosed,
            not_kept: collect.slices.not_kept + collect.asyncs.refused(),
            origin_ns: collect.first_ticks.ns(),
            wall: collect.wall,
            switches: timeline_stats.0,
            wakeups: timeline_stats.1,
            names_of: collect.names,
            stacks,
            symbols,
            outcome,
        })
    }
}

// === the report as text and JSON ===

use std::io::Write;

use serde_json::{json, Value as Json};

use crate::report::text::{Ns, Since};

/// How to print a report.
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    /// Show wall-clock times (the trace's anchor) beside relative ones.
    pub wall: bool,
}

impl SpansReport {
    /// The notes under the report: what was left out, and what the trace lacks.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.spans == 0 && self.unclosed == 0 {
            notes.push(
                "no spans in this trace (duration begin/end, complete or async events): trace the \
                 program with #[traced], fxtrace::duration, the C API or the tracing layer"
                    .to_owned(),
            );
        }
        if self.switches == 0 && self.spans > 0 {
            notes.push(
                "no context switches in this trace: record with -a (system-wide) to split each \
                 span's time into on CPU, runnable and blocked"
                    .to_owned(),
            );
        } else if self.wakeups == 0 && self.spans > 0 {
            notes.push(
                "no wake-ups in this trace: record with -a to see who woke the spans' threads"
                    .to_owned(),
            );
        }
        if self.unclosed > 0 {
            notes.push(format!(
                "{} span(s) still open when the trace ended (the trace stopped before their end): \
                 not counted",
                self.unclosed
            ));
        }
        if self.unmatched_ends > 0 {
            notes.push(format!(
                "{} duration end(s) with no begin open on their thread (a wrapped or cut trace \
                 lost the begin): not counted",
                self.unmatched_ends
            ));
        }
        if self.orphan_async_ends > 0 {
            notes.push(format!(
                "{} async end(s) with no async begin: not counted",
                self.orphan_async_ends
            ));
        }
        if self.not_kept > 0 {
            notes.push(format!(
                "{} span(s) beyond the bounds of open spans were not followed",
                self.not_kept
            ));
        }
        notes
    }

    fn when(&self, ns: u64, style: Style) -> String {
        let since = Since(ns.saturating_sub(self.origin_ns));
        match (style.wall, self.wall) {
            (true, Some(wall)) => format!("{since} [{}]", wall.at(ns)),
            _ => since.to_string(),
        }
    }

    /// The report as text.
    pub fn write_text(&self, out: &mut (impl Write + ?Sized), style: Style) -> io::Result<()> {
        writeln!(
            out,
            "spans: {} of {} name(s); context switches: {}, wake-ups: {}",
            self.spans,
            self.names.len(),
            self.switches,
            self.wakeups
        )?;
        if style.wall && self.wall.is_none() {
            writeln!(
                out,
                "(--wall: the trace has no wall-clock anchor; times are relative)"
            )?;
        }
        if !self.names.is_empty() {
            writeln!(out)?;
            let width = self
                .names
                .iter()
                .map(|r| r.name.chars().count())
                .max()
                .unwrap_or(4)
                .clamp(4, 40);
            writeln!(
                out,
                "{:<width$} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}",
                "name", "count", "total", "self", "p50", "p99", "max"
            )?;
            for row in &self.names {
                let d = &row.durations;
                writeln!(
                    out,
                    "{:<width$} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}",
                    fxtrace_format::truncate_str(&row.name, 40),
                    d.count,
                    Ns(d.total),
                    Ns(row.self_ns),
                    Ns(d.p50()),
                    Ns(d.p99()),
                    Ns(d.max)
                )?;
            }
        }
        if !self.slowest.is_empty() {
            writeln!(out, "\nslowest {} span(s):", self.slowest.len())?;
        }
        for (i, s) in self.slowest.iter().enumerate() {
            writeln!(
                out,
                "{:>2}. {}  {}  at {}",
                i + 1,
                s.name,
                Ns(s.duration_ns()),
                self.when(s.start_ns, style)
            )?;
            writeln!(
                out,
                "    thread: {}{}",
                self.names_of.label(s.thread.tid),
                if s.is_async {
                    " (async span, begun there)"
                } else {
                    ""
                }
            )?;
            if !s.args.is_empty() {
                writeln!(out, "    args: {}", s.args.join(", "))?;
            }
            if !s.children.is_empty() {
                let children: Vec<String> = s
                    .children
                    .iter()
                    .take(5)
                    .map(|c| format!("{} {} ({}×)", c.name, Ns(c.total_ns), c.count))
                    .collect();
                writeln!(out, "    children: {}", children.join(", "))?;
            }
            let Some(cpu) = &s.cpu else {
                continue;
            };
            let mut split = format!(
                "    on CPU {} · runnable {} · sleeping {} · D {}",
                Ns(cpu.on_cpu),
                Ns(cpu.runnable),
                Ns(cpu.sleeping),
                Ns(cpu.uninterruptible)
            );
            if cpu.unknown > 0 {
                split += &format!(" · not covered by switches {}", Ns(cpu.unknown));
            }
            writeln!(out, "{split}")?;
            if !cpu.ran_instead.is_empty() {
                let ran: Vec<String> = cpu
                    .ran_instead
                    .iter()
                    .map(|(tid, ns)| format!("{} {}", self.names_of.label(*tid), Ns(*ns)))
                    .collect();
                writeln!(out, "    ran instead on its CPU: {}", ran.join(", "))?;
            }
            if !cpu.woken_by.is_empty() {
                let woken: Vec<String> = cpu
                    .woken_by
                    .iter()
                    .map(|(tid, n)| format!("{} ({n}×)", self.names_of.label(*tid)))
                    .collect();
                writeln!(out, "    woken by: {}", woken.join(", "))?;
            }
            if !cpu.wait_points.is_empty() {
                let waits: Vec<String> = cpu
                    .wait_points
                    .iter()
                    .map(|(wait, ns)| {
                        let frames = one_line(&self.stacks.frames(*wait, &self.symbols));
                        format!("{frames} {}", Ns(*ns))
                    })
                    .collect();
                writeln!(out, "    waited at: {}", waits.join(", "))?;
            }
        }
        let notes = self.notes();
        if !notes.is_empty() {
            writeln!(out)?;
        }
        for note in notes {
            writeln!(out, "note: {note}")?;
        }
        Ok(())
    }

    fn thread_json(&self, tid: u64) -> Json {
        json!({
            "tid": tid,
            "pid": self.names_of.pid(tid),
            "thread": self.names_of.label(tid),
        })
    }

    /// The report as JSON lines: one object per table row, slow span and note.
    pub fn write_json(&self, out: &mut (impl Write + ?Sized), style: Style) -> io::Result<()> {
        for row in &self.names {
            let d = &row.durations;
            let line = json!({
                "type": "name", "name": row.name, "count": d.count, "total_ns": d.total,
                "self_ns": row.self_ns, "p50_ns": d.p50(), "p99_ns": d.p99(), "max_ns": d.max,
            });
            writeln!(out, "{line}")?;
        }
        for (i, s) in self.slowest.iter().enumerate() {
            let mut line = json!({
                "type": "span", "rank": i + 1, "name": s.name, "category": s.category,
                "duration_ns": s.duration_ns(),
                "start_ns": s.start_ns.saturating_sub(self.origin_ns),
                "pid": s.thread.pid, "tid": s.thread.tid,
                "thread": self.names_of.label(s.thread.tid), "async": s.is_async,
                "args": s.args,
                "children": s.children.iter().map(|c| json!({
                    "name": c.name, "count": c.count, "total_ns": c.total_ns,
                })).collect::<Vec<_>>(),
            });
            if let (true, Some(wall)) = (style.wall, self.wall) {
                line["start_wall"] = json!(wall.at(s.start_ns).to_string());
                line["start_wall_ns"] = json!(wall.wall_ns(s.start_ns));
            }
            if let Some(cpu) = &s.cpu {
                line["cpu"] = json!({
                    "on_cpu_ns": cpu.on_cpu, "runnable_ns": cpu.runnable,
                    "sleeping_ns": cpu.sleeping, "uninterruptible_ns": cpu.uninterruptible,
                    "not_covered_ns": cpu.unknown,
                    "ran_instead": cpu.ran_instead.iter().map(|(tid, ns)| {
                        let mut t = self.thread_json(*tid);
                        t["ns"] = json!(ns);
                        t
                    }).collect::<Vec<_>>(),
                    "woken_by": cpu.woken_by.iter().map(|(tid, n)| {
                        let mut t = self.thread_json(*tid);
                        t["times"] = json!(n);
                        t
                    }).collect::<Vec<_>>(),
                    "wait_points": cpu.wait_points.iter().map(|(wait, ns)| json!({
                        "frames": one_line(&self.stacks.frames(*wait, &self.symbols)), "ns": ns,
                    })).collect::<Vec<_>>(),
                });
            }
            writeln!(out, "{line}")?;
        }
        for note in self.notes() {
            writeln!(out, "{}", json!({"type": "note", "text": note}))?;
        }
        Ok(())
    }
}

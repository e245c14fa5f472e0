//! Call stacks in a trace, read for reports: the interned stacks (`"fxtrace:stack"` blobs),
//! the kernel symbols that name their kernel frames (`"fxtrace:ksym"`), CPU samples
//! (`"fxtrace:sample"`, [`fxtrace_format::stack`]) and wait points (context switches with a
//! `stack` argument, [`fxtrace_format::sched`]) with the wake-ups that ended them.
//!
//! [`StackReport::add`] takes the records of a trace one by one (any reading loop can feed
//! it); it keeps per stack and thread how many samples fell there, and per wait point and
//! thread how often and how long the thread stayed blocked there and who woke it. A wait
//! lasts from the switch that took the thread off its CPU to the switch that brought it
//! back; its waker is that of the first wake-up of the thread in between.
//!
//! Bounded for crafted input: at most [`MAX_STACKS`] stacks of [`MAX_FRAMES`] frames in all,
//! [`MAX_KERNEL_SYMBOLS`] kernel symbols, [`MAX_PAIRS`] (stack, thread) totals of samples and of
//! waits, [`MAX_WAKERS`] wakers per wait total, a wait open on [`timeline::MAX_THREADS`]
//! threads at once; what is beyond them is counted ([`StackReport::not_kept`]).
//!
//! Stack ids are a writer's own: they are read per provider section. A stack's user frames
//! are named through the mappings of the process that used it first (by the mappings the
//! trace recorded, as the LBR report reads them, and the files they name); its kernel frames
//! through the recorded kernel symbols.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};

use fxtrace_format::sched::{Side, SwitchView, WakeupView, UNKNOWN_PROCESS_KOID};
use fxtrace_format::stack::{
    KernelSymbolRecord, SampleRecord, StackRecord, KSYM_BLOB_NAME, SAMPLE_BLOB_NAME,
    STACK_BLOB_NAME,
};
use fxtrace_format::{
    ticks_to_ns, BlobType, DecodeError, Decoded, DecodedRecord, RecordHead, RecordKind, SkipCounts,
};

use crate::read::bounded::BoundedMap;
use crate::read::timeline;
use crate::read::{self, Analysis, Input, ReadError};

use super::lbr::LbrReport;
use super::symbolize::{Location, Mapping, Symbolizer};

/// Stacks kept (a writer interns each call stack once: a real trace has a few thousand).
pub const MAX_STACKS: usize = 1 << 17;
/// Frames of the stacks kept, in all (16 MiB; the recorder interns 32 MiB of frames at most,
/// some of which no record of a trace refers to any more).
pub const MAX_FRAMES: usize = 1 << 21;
/// Kernel symbols kept (a recorder writes those its stacks use).
pub const MAX_KERNEL_SYMBOLS: usize = 1 << 17;
/// (stack, thread) totals kept, of samples and of waits each: 7/8 of 2^16, the most a hash
/// table of 2^16 buckets holds before it doubles.
pub const MAX_PAIRS: usize = (1 << 16) / 8 * 7;
/// Distinct wakers counted per (wait point, thread); the others are counted in all.
pub const MAX_WAKERS: usize = 64;

/// A stack: its provider section and its id there.
pub type StackKey = (u32, u32);

/// How often and how long threads waited at one wait point.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Waits (blocked switches) there.
    pub count: u64,
    /// Time blocked there, in nanoseconds (to the trace's end for a wait not over).
    pub blocked_ns: u64,
    /// Who woke the thread, by waker tid (`None`: no wake-up recorded before it ran again),
    /// at most [`MAX_WAKERS`] of them, in no order.
    pub wakers: Vec<(Option<u64>, u64)>,
}

impl WaitStats {
    /// Counts `n` wake-ups by `waker`; `false` (not counted) when `waker` is new and `limit`
    /// wakers are counted already.
    pub fn woken(&mut self, waker: Option<u64>, n: u64, limit: usize) -> bool {
        if let Some((_, count)) = self.wakers.iter_mut().find(|(who, _)| *who == waker) {
            *count += n;
        } else if self.wakers.len() < limit {
            self.wakers.push((waker, n));
        } else {
            return false;
        }
        true
    }
}

#[derive(Debug, Clone, Copy)]
struct OpenWait {
    stack: Option<StackKey>,
    since_ns: u64,
    waker: Option<Option<u64>>,
}

/// Samples and wait points of a trace, by stack and thread (see the module docs).
#[derive(Debug)]
pub struct StackReport {
    /// Thread and process names, and the executable mappings, as the LBR report reads them.
    names: LbrReport,
    stacks: BoundedMap<StackKey, StackRecord>,
    /// Frames of the stacks kept.
    frames_kept: usize,
    /// Kernel symbols by address: (bytes covered, name).
    kernel_symbols: BTreeMap<u64, (u64, String)>,
    /// The process and time of a stack's first use (its user frames' address space).
    first_use: BoundedMap<StackKey, (Option<u32>, u64)>,
    samples: BoundedMap<(Option<StackKey>, u64), u64>,
    sample_count: u64,
    waits: BoundedMap<(Option<StackKey>, u64), WaitStats>,
    open_waits: BoundedMap<u64, OpenWait>,
    /// Stacks, kernel symbols and wakers beyond the bounds (the maps count their own).
    not_kept: u64,
    last_ns: u64,
    invalid_payloads: u64,
    unknown_stacks: u64,
    /// Only the stacks and what names their frames: no samples, no waits (whose state grows
    /// with the threads of the trace) — [`StackReport::for_naming`].
    naming_only: bool,
}

impl Default for StackReport {
    fn default() -> Self {
        StackReport {
            names: LbrReport::default(),
            stacks: BoundedMap::new(MAX_STACKS),
            frames_kept: 0,
            kernel_symbols: BTreeMap::new(),
            first_use: BoundedMap::new(MAX_STACKS),
            samples: BoundedMap::new(MAX_PAIRS),
            sample_count: 0,
            waits: BoundedMap::new(MAX_PAIRS),
            open_waits: BoundedMap::new(timeline::MAX_THREADS),
            not_kept: 0,
            last_ns: 0,
            invalid_payloads: 0,
            unknown_stacks: 0,
            naming_only: false,
        }
    }
}

/// The result of reading a whole trace.
#[derive(Debug)]
pub struct StackRead {
    /// The report of everything decoded.
    pub report: StackReport,
    /// Where decoding stopped early, if it did (the report covers what came before).
    pub decode_error: Option<DecodeError>,
    /// Records and arguments the decoder skipped (unknown types).
    pub skipped: SkipCounts,
}

impl StackRead {
    fn of(mut report: StackReport, outcome: Result<read::Outcome, ReadError>) -> StackRead {
        report.finish();
        match outcome {
            Ok(outcome) => StackRead {
                report,
                decode_error: outcome.error,
                skipped: outcome.skipped,
            },
            // The report writes nothing: no output to fail.
            Err(_) => StackRead {
                report,
                decode_error: None,
                skipped: SkipCounts::default(),
            },
        }
    }
}

impl Analysis for StackReport {
    /// Stack, sample, symbol and mapping blobs, switches, wake-ups, thread and process names;
    /// every record's time (the end of the waits still open at the trace's end).
    fn head(&mut self, head: &RecordHead) -> bool {
        if let Some(end) = head.end_time() {
            self.last_ns = self.last_ns.max(end.ns);
        }
        if self.naming_only {
            // No wake-ups (no waits), no LBR notes (instant events and logs).
            return matches!(
                head.kind,
                RecordKind::Blob
                    | RecordKind::ContextSwitch
                    | RecordKind::SchedContextSwitch
                    | RecordKind::Thread
                    | RecordKind::KernelObject
            );
        }
        matches!(
            head.kind,
            RecordKind::Blob
                | RecordKind::ContextSwitch
                | RecordKind::SchedContextSwitch
                | RecordKind::SchedThreadWakeup
                | RecordKind::Thread
                | RecordKind::KernelObject
                | RecordKind::Log
        ) || head.event_type == Some(fxtrace_format::EventType::Instant)
    }

    fn add(&mut self, _: &RecordHead, d: &Decoded<'_>) -> io::Result<()> {
        StackReport::add(self, d);
        Ok(())
    }
}

impl StackReport {
    /// An empty report.
    pub fn new() -> Self {
        StackReport::default()
    }

    /// A report that keeps only the stacks, the kernel symbols, the mappings and the names
    /// that name a wait point's frames ([`StackReport::frames`]): what `report spans` and
    /// `report sched` need, without the per-thread state of samples and waits.
    pub fn for_naming() -> Self {
        StackReport {
            naming_only: true,
            ..StackReport::default()
        }
    }

    /// Reads a whole trace (starting with the magic number record) from `input`.
    pub fn read<R: Read>(mut input: R) -> StackRead {
        let mut report = StackReport::new();
        let outcome = read::read_stream("<input>".into(), &mut input, &mut report);
        StackRead::of(report, outcome)
    }

    /// Reads a whole opened trace ([`Input`]).
    pub fn read_input(input: &mut Input) -> Result<StackRead, ReadError> {
        let mut report = StackReport::new();
        let outcome = read::read(input, &mut report)?;
        Ok(StackRead::of(report, Ok(outcome)))
    }

    /// Takes one record into account.
    pub fn add(&mut self, d: &Decoded<'_>) {
        self.names.add(d);
        let provider = d.provider.unwrap_or(0);
        if let Some(ns) = d.record.time().map(|t| t.ns) {
            self.last_ns = self.last_ns.max(ns);
        }
        match &d.record {
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } if *blob_type == BlobType::DATA => match name.as_ref() {
                STACK_BLOB_NAME => match StackRecord::decode(payload) {
                    Ok(s) => self.keep_stack(provider, s),
                    Err(_) => self.invalid_payloads += 1,
                },
                KSYM_BLOB_NAME => match KernelSymbolRecord::decode(payload) {
                    Ok(k) => {
                        if self.kernel_symbols.len() < MAX_KERNEL_SYMBOLS
                            || self.kernel_symbols.contains_key(&k.start)
                        {
                            self.kernel_symbols.insert(k.start, (k.len, k.name_lossy()));
                        } else {
                            self.not_kept += 1;
                        }
                    }
                    Err(_) => self.invalid_payloads += 1,
                },
                SAMPLE_BLOB_NAME if self.naming_only => {}
                SAMPLE_BLOB_NAME => match SampleRecord::decode(payload) {
                    Ok(s) => {
                        let ns = ticks_to_ns(s.time, d.ticks_per_second);
                        self.last_ns = self.last_ns.max(ns);
                        let pid = Some(s.pid).filter(|&p| u64::from(p) != UNKNOWN_PROCESS_KOID);
                        let stack = self.stack_ref(provider, s.stack, pid, ns);
                        if let Some(n) = self.samples.entry((stack, u64::from(s.tid))) {
                            *n += 1;
                        }
                        self.sample_count += 1;
                    }
                    Err(_) => self.invalid_payloads += 1,
                },
                _ => {}
            },
            record if self.naming_only => {
                if let Some(s) = SwitchView::of(record) {
                    self.name_wait_point(provider, &s);
                }
            }
            record => {
                if let Some(w) = WakeupView::of(record) {
                    if let Some(open) = self.open_waits.get_mut(&w.tid) {
                        open.waker.get_or_insert(w.waker);
                    }
                } else if let Some(s) = SwitchView::of(record) {
                    self.switch(provider, &s);
                }
            }
        }
    }

    fn switch(&mut self, provider: u32, s: &SwitchView) {
        let ns = s.time.ns;
        if let Some(tid) = s.incoming.tid() {
            if let Some(open) = self.open_waits.remove(&tid) {
                self.close(tid, open, ns);
            }
        }
        let Side::Thread { tid, .. } = s.outgoing else {
            return;
        };
        if let Some(stack) = self.name_wait_point(provider, s) {
            let open = OpenWait {
                stack,
                since_ns: ns,
                waker: None,
            };
            if let Some(slot) = self.open_waits.entry_with(tid, || open) {
                *slot = open;
            }
        }
    }

    /// The wait point of a switch of a thread out, its first use noted (whose process names
    /// its user frames); `None` when the switch names none.
    fn name_wait_point(&mut self, provider: u32, s: &SwitchView) -> Option<Option<StackKey>> {
        let (Some(id), Side::Thread { tid, pid }) = (s.stack, s.outgoing) else {
            return None;
        };
        let pid = pid
            .or_else(|| self.names.thread(tid).and_then(|t| t.pid))
            .and_then(|p| u32::try_from(p).ok());
        Some(self.stack_ref(provider, id, pid, s.time.ns))
    }

    fn close(&mut self, tid: u64, open: OpenWait, end_ns: u64) {
        let Some(w) = self.waits.entry((open.stack, tid)) else {
            return;
        };
        w.count += 1;
        w.blocked_ns += end_ns.saturating_sub(open.since_ns);
        if !w.woken(open.waker.flatten(), 1, MAX_WAKERS) {
            self.not_kept += 1;
        }
    }

    /// Keeps a stack record (in place of an earlier one of its id), within [`MAX_STACKS`]
    /// and [`MAX_FRAMES`].
    fn keep_stack(&mut self, provider: u32, s: StackRecord) {
        let key = (provider, s.id);
        if let Some(old) = self.stacks.remove(&key) {
            self.frames_kept -= old.frames.len();
        }
        let frames = s.frames.len();
        if self.frames_kept + frames > MAX_FRAMES {
            self.not_kept += 1;
        } else if self.stacks.entry_with(key, || s).is_some() {
            self.frames_kept += frames;
        }
    }

    /// The key of stack `id` of `provider` (`None` for 0, "no stack"), noting its first use.
    fn stack_ref(&mut self, provider: u32, id: u32, pid: Option<u32>, ns: u64) -> Option<StackKey> {
        if id == 0 {
            return None;
        }
        let key = (provider, id);
        if self.stacks.get(&key).is_none() {
            self.unknown_stacks += 1;
        }
        self.first_use.entry_with(key, || (pid, ns));
        Some(key)
    }

    /// Closes the waits still open at the trace's end (blocked until then).
    pub fn finish(&mut self) {
        // (Taken out, the waits closed as they are drained: no copy of them all at once.)
        let mut open = std::mem::replace(&mut self.open_waits, BoundedMap::new(0));
        self.not_kept += open.refused();
        for (tid, wait) in open.drain() {
            self.close(tid, wait, self.last_ns);
        }
    }

    /// CPU samples read.
    pub fn sample_count(&self) -> u64 {
        self.sample_count
    }

    /// Samples by (stack, thread).
    pub fn samples(&self) -> &BoundedMap<(Option<StackKey>, u64), u64> {
        &self.samples
    }

    /// Waits by (wait point, thread).
    pub fn waits(&self) -> &BoundedMap<(Option<StackKey>, u64), WaitStats> {
        &self.waits
    }

    /// What the bounds left out: stacks, kernel symbols, wakers, (stack, thread) totals of
    /// samples and waits, and waits of threads beyond those followed (see the module docs).
    pub fn not_kept(&self) -> u64 {
        self.not_kept
            + self.stacks.refused()
            + self.first_use.refused()
            + self.samples.refused()
            + self.waits.refused()
            + self.open_waits.refused()
    }

    /// Stack, sample and symbol payloads that did not decode.
    pub fn invalid_payloads(&self) -> u64 {
        self.invalid_payloads
    }

    /// References to a stack id no `"fxtrace:stack"` blob defined before.
    pub fn unknown_stacks(&self) -> u64 {
        self.unknown_stacks
    }

    /// A stack's record.
    pub fn stack(&self, key: StackKey) -> Option<&StackRecord> {
        self.stacks.get(&key)
    }

    /// The mappings the user frames of the stacks used fall in (each once), for the
    /// symbolizer to load.
    pub fn used_mappings(&self) -> Vec<&Mapping> {
        self.mappings_of(self.first_use.iter().map(|(key, _)| *key))
    }

    /// The mappings the user frames of `stacks` fall in (each once): those a report that
    /// shows only these stacks loads (a system-wide trace's stacks name the binaries of every
    /// process, loading them all costs their symbol tables).
    pub fn mappings_of(&self, stacks: impl IntoIterator<Item = StackKey>) -> Vec<&Mapping> {
        let mut used: Vec<&Mapping> = Vec::new();
        for key in stacks {
            let (Some(stack), Some(&(pid, ns))) = (self.stacks.get(&key), self.first_use.get(&key))
            else {
                continue;
            };
            for &ip in stack.user() {
                if let Some(m) = self.names.mapping_at(pid, ns, ip) {
                    if !used.iter().any(|u| std::ptr::eq(*u, m)) {
                        used.push(m);
                    }
                }
            }
        }
        used
    }

    /// The frames of stack `key`, innermost first, named: kernel frames by the recorded
    /// symbols, user frames by `symbols` through the mappings of the stack's first user.
    pub fn frames(&self, key: StackKey, symbols: &Symbolizer) -> Vec<String> {
        let Some(stack) = self.stacks.get(&key) else {
            let why = if self.stacks.refused() + self.not_kept > 0 {
                "not in the trace, or beyond the reader's bounds"
            } else {
                "not in the trace"
            };
            return vec![format!("(stack {}: {why})", key.1)];
        };
        let (pid, ns) = self.first_use.get(&key).copied().unwrap_or((None, 0));
        let kernel = stack.kernel().iter().map(|&ip| self.kernel_frame(ip));
        let user = stack.user().iter().map(|&ip| {
            symbols
                .locate(ip)
                .or_else(|| {
                    self.names
                        .mapping_at(pid, ns, ip)
                        .map(|m| symbols.locate_mapped(ip, m))
                })
                .map_or_else(|| format!("{ip:#x}"), |l| frame_name(&l))
        });
        kernel.chain(user).collect()
    }

    fn kernel_frame(&self, ip: u64) -> String {
        match self.kernel_symbols.range(..=ip).next_back() {
            Some((start, (len, name))) if ip - start < *len => name.clone(),
            _ => format!("[kernel] {ip:#x}"),
        }
    }

    /// `name (tid)`, with the process when known.
    pub fn thread_label(&self, tid: u64) -> String {
        let t = self.names.thread(tid);
        let name = t
            .and_then(|t| t.name.clone())
            .unwrap_or_else(|| format!(":{tid}"));
        match t.and_then(|t| t.pid).filter(|&p| p != tid && p != 0) {
            Some(pid) => match self.names.process_name(pid) {
                Some(process) => format!("{name} ({tid}, {process} {pid})"),
                None => format!("{name} ({tid}, pid {pid})"),
            },
            None => format!("{name} ({tid})"),
        }
    }

    fn thread_name(&self, tid: u64) -> String {
        self.names
            .thread(tid)
            .and_then(|t| t.name.clone())
            .unwrap_or_else(|| format!(":{tid}"))
    }
}

/// A frame as a report shows it: the function, else `file+0xOFFSET`.
fn frame_name(l: &Location) -> String {
    match &l.function {
        Some((name, _)) => name.clone(),
        None => format!("{}+{:#x}", l.binary, l.file_address),
    }
}

/// Frames of the scheduler itself at the top of a wait point, and of the system call entry
/// at its bottom: the same in every wait, left out of the one-line view (kept in `--folded`).
fn scheduler_frame(name: &str) -> bool {
    matches!(
        name,
        "__schedule" | "schedule" | "schedule_idle" | "__cond_resched" | "preempt_schedule_common"
    ) || name.starts_with("schedule_preempt")
}

fn entry_frame(name: &str) -> bool {
    name == "do_syscall_64" || name.starts_with("entry_SYSCALL")
}

/// `leaf ← caller ← …`, the scheduler's and the syscall entry's frames left out.
pub fn one_line(frames: &[String]) -> String {
    let mut f: &[String] = frames;
    while f.len() > 1 && scheduler_frame(&f[0]) {
        f = &f[1..];
    }
    let kept: Vec<&str> = f
        .iter()
        .map(String::as_str)
        .filter(|n| !entry_frame(n))
        .collect();
    if kept.is_empty() {
        "(no frames)".into()
    } else {
        kept.join(" ← ")
    }
}

// === text ===

/// What `fxtrace report samples|waits` prints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackTextOptions {
    /// Rows shown.
    pub top: usize,
    /// Only this thread.
    pub thread: Option<u64>,
    /// Folded stacks (`thread;outermost;…;innermost count`, for flame graphs) instead of a
    /// table.
    pub folded: bool,
}

/// Rows of a table: (thread, named frames innermost first) and their sum. Stacks are
/// summed by their frames' names (two samples a few instructions apart in one function are one
/// row), in a stable order: the biggest first.
type Rows = Vec<((u64, Vec<String>), u64)>;

fn named_rows<'r, T: 'r>(
    report: &StackReport,
    symbols: &Symbolizer,
    items: impl Iterator<Item = (&'r (Option<StackKey>, u64), &'r T)>,
    thread: Option<u64>,
    weight: impl Fn(&T) -> u64,
) -> Rows {
    let mut names: HashMap<Option<StackKey>, Vec<String>> = HashMap::new();
    let mut sums: HashMap<(u64, Vec<String>), u64> = HashMap::new();
    for ((key, tid), value) in items {
        if thread.is_some_and(|t| t != *tid) {
            continue;
        }
        let frames = names
            .entry(*key)
            .or_insert_with(|| match key {
                Some(key) => report.frames(*key, symbols),
                None => Vec::new(),
            })
            .clone();
        *sums.entry((*tid, frames)).or_default() += weight(value);
    }
    let mut rows: Rows = sums.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows
}

fn write_folded(out: &mut dyn Write, report: &StackReport, rows: &Rows) -> io::Result<()> {
    let clean = |s: &str| s.replace([';', ' ', '\n'], "_");
    for ((tid, frames), count) in rows {
        let mut line = clean(&report.thread_name(*tid));
        for f in frames.iter().rev() {
            line.push(';');
            line.push_str(&clean(f));
        }
        writeln!(out, "{line} {count}")?;
    }
    Ok(())
}

/// Samples by their innermost frame's name (the function the sample fell in), the biggest
/// first.
fn self_counts(rows: &Rows) -> Vec<(String, u64)> {
    let mut by_function: HashMap<&str, u64> = HashMap::new();
    for ((_, frames), c) in rows {
        let leaf = frames.first().map_or("(no stack recorded)", String::as_str);
        *by_function.entry(leaf).or_default() += c;
    }
    let mut functions: Vec<(String, u64)> = by_function
        .into_iter()
        .map(|(f, c)| (f.to_owned(), c))
        .collect();
    functions.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    functions
}

fn stack_line(frames: &[String]) -> String {
    if frames.is_empty() {
        "(no stack recorded)".into()
    } else {
        one_line(frames)
    }
}

/// The hottest stacks of the CPU samples (`fxtrace report samples`).
pub fn write_samples_text(
    out: &mut dyn Write,
    report: &StackReport,
    symbols: &Symbolizer,
    options: &StackTextOptions,
) -> io::Result<()> {
    let rows = named_rows(
        report,
        symbols,
        report.samples.iter(),
        options.thread,
        |c| *c,
    );
    if options.folded {
        return write_folded(out, report, &rows);
    }
    let total: u64 = rows.iter().map(|r| r.1).sum();
    if total == 0 {
        return writeln!(
            out,
            "no CPU samples{} (record with `fxtrace record -a --sample`)",
            options
                .thread
                .map_or_else(String::new, |t| format!(" of thread {t}"))
        );
    }
    let mut by_thread: BTreeMap<u64, u64> = BTreeMap::new();
    for ((tid, _), c) in &rows {
        *by_thread.entry(*tid).or_default() += c;
    }
    let mut threads: Vec<(u64, u64)> = by_thread.into_iter().collect();
    threads.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    writeln!(out, "CPU samples: {total} in {} threads", threads.len())?;
    writeln!(out, "\n  samples      %  thread")?;
    for (tid, c) in threads.iter().take(options.top.max(1)) {
        writeln!(
            out,
            "  {c:>7} {:>5.1}%  {}",
            percent(*c, total),
            report.thread_label(*tid)
        )?;
    }
    writeln!(
        out,
        "\nhottest functions (samples in the function itself, as `perf report --no-children`):"
    )?;
    for (function, c) in self_counts(&rows).iter().take(options.top.max(1)) {
        writeln!(out, "  {c:>7} {:>5.1}%  {function}", percent(*c, total))?;
    }
    writeln!(out, "\nhottest stacks (innermost frame first):")?;
    for ((tid, frames), c) in rows.iter().take(options.top.max(1)) {
        writeln!(
            out,
            "  {c:>7} {:>5.1}%  {}\n           {}",
            percent(*c, total),
            report.thread_label(*tid),
            stack_line(frames)
        )?;
    }
    Ok(())
}

/// Where threads blocked, by blocked time (`fxtrace report waits`).
pub fn write_waits_text(
    out: &mut dyn Write,
    report: &StackReport,
    symbols: &Symbolizer,
    options: &StackTextOptions,
) -> io::Result<()> {
    if options.folded {
        // Weighted by blocked microseconds, as an off-CPU flame graph.
        let rows = named_rows(report, symbols, report.waits.iter(), options.thread, |w| {
            w.blocked_ns / 1000
        });
        return write_folded(out, report, &rows);
    }
    // Each row's waits summed (counts, time, wakers) by thread and named frames.
    let mut merged: HashMap<(u64, Vec<String>), WaitStats> = HashMap::new();
    let mut names: HashMap<Option<StackKey>, Vec<String>> = HashMap::new();
    for ((key, tid), w) in report.waits.iter() {
        if options.thread.is_some_and(|t| t != *tid) {
            continue;
        }
        let frames = names
            .entry(*key)
            .or_insert_with(|| key.map_or_else(Vec::new, |k| report.frames(k, symbols)))
            .clone();
        let m = merged.entry((*tid, frames)).or_default();
        m.count += w.count;
        m.blocked_ns += w.blocked_ns;
        for &(who, n) in &w.wakers {
            m.woken(who, n, usize::MAX);
        }
    }
    let mut rows: Vec<((u64, Vec<String>), WaitStats)> = merged.into_iter().collect();
    rows.sort_by(|a, b| {
        b.1.blocked_ns
            .cmp(&a.1.blocked_ns)
            .then_with(|| a.0.cmp(&b.0))
    });
    let waits: u64 = rows.iter().map(|r| r.1.count).sum();
    if waits == 0 {
        return writeln!(
            out,
            "no wait points{} (record with `fxtrace record -a --wait-points`)",
            options
                .thread
                .map_or_else(String::new, |t| format!(" of thread {t}"))
        );
    }
    let blocked: u64 = rows.iter().map(|r| r.1.blocked_ns).sum();
    writeln!(
        out,
        "wait points: {waits} waits, {:.3} ms blocked in all; by blocked time (innermost frame first)",
        blocked as f64 / 1e6
    )?;
    writeln!(
        out,
        "\n   waits  blocked ms   avg µs  thread / wait point / woken by"
    )?;
    for ((tid, frames), w) in rows.iter().take(options.top.max(1)) {
        let mut wakers: Vec<(&Option<u64>, &u64)> = w.wakers.iter().map(|(a, b)| (a, b)).collect();
        wakers.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let woken: Vec<String> = wakers
            .iter()
            .take(3)
            .map(|(who, n)| match who {
                Some(0) => format!("an interrupt ×{n}"),
                Some(t) => format!("{} ×{n}", report.thread_label(*t)),
                None => format!("no wake-up recorded ×{n}"),
            })
            .collect();
        writeln!(
            out,
            "  {:>6} {:>11.3} {:>8.1}  {}\n                                 {}\n                                 woken by {}",
            w.count,
            w.blocked_ns as f64 / 1e6,
            w.blocked_ns as f64 / 1e3 / w.count.max(1) as f64,
            report.thread_label(*tid),
            stack_line(frames),
            woken.join(", ")
        )?;
    }
    Ok(())
}

fn percent(part: u64, total: u64) -> f64 {
    100.0 * part as f64 / total.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_leaves_out_the_scheduler_and_the_syscall_entry() {
        let frames: Vec<String> = [
            "__schedule",
            "schedule",
            "futex_wait",
            "do_futex",
            "__x64_sys_futex",
            "do_syscall_64",
            "entry_SYSCALL_64_after_hwframe",
            "__lll_lock_wait",
            "pthread_mutex_lock",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            one_line(&frames),
            "futex_wait ← do_futex ← __x64_sys_futex ← __lll_lock_wait ← pthread_mutex_lock"
        );
        assert_eq!(one_line(&["schedule".to_owned()]), "schedule");
        assert_eq!(one_line(&[]), "(no frames)");
    }

    #[test]
    fn self_counts_sum_each_innermost_function_over_stacks_and_threads() {
        let frames = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let rows: Rows = vec![
            ((1, frames(&["spin", "main"])), 5),
            ((2, frames(&["work", "main"])), 4),
            ((1, frames(&["work", "other", "main"])), 3),
            ((1, Vec::new()), 1),
        ];
        assert_eq!(
            self_counts(&rows),
            [
                ("work".to_string(), 7),
                ("spin".to_string(), 5),
                ("(no stack recorded)".to_string(), 1)
            ]
        );
    }
}

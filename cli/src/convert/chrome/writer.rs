//! The streaming converter: decoded FXT records in, trace-event JSON out, with only the
//! state that pairing needs kept in between.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};
use std::rc::Rc;

use fxtrace_format::lbr::LbrSample;
use fxtrace_format::{
    listed_entry, ticks_to_ns, BlobType, DecodeError, Decoded, DecodedArg, DecodedEvent,
    DecodedEventKind, DecodedRecord, DecodedValue, ObjectType, RecordHead, SkipCounts, ThreadState,
    PROVIDER_EVENT_BUFFER_OVERFLOW,
};

use super::json::{all, write_arg_members, write_str, HexStr, Micros};
use super::stats::ChromeStats;
use crate::read::bounded::BoundedMap;
use crate::read::cpus::{Cpus, Ran, Running, Switch};
use crate::read::slices::{Closed, Open, SharedTexts, Slices};

/// An async slice's track: process, category, name, correlation id.
type AsyncTrack = (u64, Rc<str>, Rc<str>, u64);

/// Async slices the converter pairs at once (an end beyond them is written as it comes).
pub const MAX_OPEN_ASYNC: usize = 1 << 16;
use crate::read::Analysis;

/// Process id of the synthetic "CPUs" process that holds one track per CPU (context
/// switches and LBR samples). Above Linux's `PID_MAX_LIMIT` (2^22), so it never collides
/// with a real process, and within `u32`, which Perfetto's JSON importer requires.
pub const CPU_PROCESS_PID: u64 = 0xFFFE_FFFF;
/// Thread id of CPU 0's track; CPU N's track is `CPU_TRACK_TID_BASE + N` (N < 2^16).
pub const CPU_TRACK_TID_BASE: u64 = 0xFFFF_0000;

/// Linux's `PID_MAX_LIMIT` (`include/linux/threads.h`): no pid or tid reaches it.
const PID_MAX_LIMIT: u64 = 1 << 22;
const _: () = assert!(CPU_PROCESS_PID >= PID_MAX_LIMIT && CPU_PROCESS_PID <= u32::MAX as u64);
const _: () = assert!(CPU_PROCESS_PID < CPU_TRACK_TID_BASE && CPU_TRACK_TID_BASE >= PID_MAX_LIMIT);
const _: () = assert!(CPU_TRACK_TID_BASE + u16::MAX as u64 <= u32::MAX as u64);

/// Process and thread ids used for trace-wide events (global instants).
const GLOBAL_PID: u64 = 0;

/// What the converter holds between records, for tests and diagnostics: all of it is
/// bounded by the number of threads, CPUs, providers and the nesting depth, never by the
/// number of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retained {
    /// Duration begins not yet ended, over all threads.
    pub open_slices: u64,
    /// Threads with at least one open duration.
    pub threads_with_open_slices: usize,
    /// CPUs seen (each has a track).
    pub cpus: usize,
    /// CPUs with a thread running (a CPU slice waiting for its end).
    pub running_cpu_slices: usize,
    /// Threads whose process or name is known (to label CPU slices).
    pub known_threads: usize,
    /// Providers named by provider info records.
    pub providers: usize,
}

/// What the converter keeps of the thread running on a CPU: its priority and the arguments
/// of the switch that brought it in (scheduling weights, …), written on its slice.
#[derive(Debug)]
struct SliceArgs {
    priority: Option<u8>,
    args: Vec<DecodedArg<'static>>,
}

#[derive(Debug, Default)]
struct KnownThread {
    pid: Option<u64>,
    name: Option<String>,
}

/// LAST_BRANCH totals of one CPU.
#[derive(Debug, Default, Clone, Copy)]
struct LbrCounts {
    samples: u64,
    branches: u64,
    mispredicted: u64,
}

/// Converts decoded FXT records to Chrome trace-event JSON as they arrive.
///
/// Call [`ChromeJsonWriter::record`] for every record in file order, then
/// [`ChromeJsonWriter::finish`]. Memory stays bounded (see [`Retained`]): events are written
/// immediately, and only the begin times of open durations per thread, the running thread
/// per CPU, and names of threads and providers are kept. The mapping is documented in [`super`].
#[derive(Debug)]
pub struct ChromeJsonWriter<W: Write> {
    out: W,
    /// Per thread, its open durations (their category and name, which their end repeats:
    /// viewers such as the DevTools trace engine read `name` and `cat` of every event).
    open: Slices<()>,
    /// Async slices open, by track: their thread and how many.
    asyncs: BoundedMap<AsyncTrack, (u64, u64)>,
    async_texts: SharedTexts,
    cpus: Cpus<SliceArgs>,
    /// CPUs whose track is named.
    cpu_tracks: BTreeSet<u16>,
    threads: HashMap<u64, KnownThread>,
    providers: BTreeMap<u32, String>,
    last_ns: Option<u64>,
    lbr: BTreeMap<u16, LbrCounts>,
    stats: ChromeStats,
}

/// Zero bytes standing for a kept blob argument: the JSON gives a blob's length only
/// (`blob_bytes`), so a kept blob keeps its length and none of its bytes. A blob fits in one
/// record (at most 32 KiB).
static BLOB_STAND_IN: [u8; 32 * 1024] = [0; 32 * 1024];

/// `arg` kept until its CPU slice is written (the switch that brought a thread in carries
/// them): its name and text cut at [`crate::MAX_KEPT_NAME`] bytes (at a character boundary),
/// a blob kept as its length, so that a trace of many CPUs with large switch arguments cannot
/// hold them all (500 CPUs × 15 arguments naming a 32 KB string: 244 MB before). `cut` counts
/// the arguments cut (once each, name or text).
fn owned_arg(arg: &DecodedArg<'_>, cut: &mut u64) -> DecodedArg<'static> {
    let name = crate::kept_name(&arg.name);
    let mut was_cut = name.len() < arg.name.len();
    let value = match &arg.value {
        DecodedValue::Null => DecodedValue::Null,
        DecodedValue::I32(v) => DecodedValue::I32(*v),
        DecodedValue::U32(v) => DecodedValue::U32(*v),
        DecodedValue::I64(v) => DecodedValue::I64(*v),
        DecodedValue::U64(v) => DecodedValue::U64(*v),
        DecodedValue::F64(v) => DecodedValue::F64(*v),
        DecodedValue::Str(s) => {
            let kept = crate::kept_name(s);
            was_cut |= kept.len() < s.len();
            DecodedValue::Str(Cow::Owned(kept))
        }
        DecodedValue::Pointer(v) => DecodedValue::Pointer(*v),
        DecodedValue::Koid(v) => DecodedValue::Koid(*v),
        DecodedValue::Bool(v) => DecodedValue::Bool(*v),
        DecodedValue::Blob(b) => {
            let len = b.len().min(BLOB_STAND_IN.len());
            DecodedValue::Blob(Cow::Borrowed(&BLOB_STAND_IN[..len]))
        }
    };
    *cut += u64::from(was_cut);
    DecodedArg {
        name: Cow::Owned(name),
        value,
    }
}

/// The scope of an instant event from a `"scope"` string argument (`"g"`/`"global"`,
/// `"p"`/`"process"`, `"t"`/`"thread"`), and the index of that argument so it is not
/// repeated in `args`. Thread scope by default, as FXT instants belong to a thread.
fn instant_scope(args: &[DecodedArg<'_>]) -> (&'static str, Option<usize>) {
    for (i, arg) in args.iter().enumerate() {
        if arg.name != "scope" {
            continue;
        }
        if let DecodedValue::Str(s) = &arg.value {
            let scope = match s.as_ref() {
                "g" | "global" => "g",
                "p" | "process" => "p",
                "t" | "thread" => "t",
                _ => continue,
            };
            return (scope, Some(i));
        }
    }
    ("t", None)
}

/// A koid-like integer argument value.
fn as_koid(value: &DecodedValue<'_>) -> Option<u64> {
    match *value {
        DecodedValue::Koid(k) | DecodedValue::U64(k) => Some(k),
        DecodedValue::U32(k) => Some(u64::from(k)),
        DecodedValue::I64(k) => u64::try_from(k).ok(),
        DecodedValue::I32(k) => u64::try_from(k).ok(),
        _ => None,
    }
}

fn is_number(value: &DecodedValue<'_>) -> bool {
    match value {
        DecodedValue::I32(_)
        | DecodedValue::U32(_)
        | DecodedValue::I64(_)
        | DecodedValue::U64(_) => true,
        DecodedValue::F64(v) => v.is_finite(),
        _ => false,
    }
}

fn bump(map: &mut BTreeMap<&'static str, u64>, key: &'static str) {
    *map.entry(key).or_default() += 1;
}

impl<W: Write> ChromeJsonWriter<W> {
    /// Starts the output: writes `{"traceEvents":[`.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(b"{\"traceEvents\":[")?;
        Ok(ChromeJsonWriter {
            out,
            open: Slices::new(),
            asyncs: BoundedMap::new(MAX_OPEN_ASYNC),
            async_texts: SharedTexts::default(),
            cpus: Cpus::new(),
            cpu_tracks: BTreeSet::new(),
            threads: HashMap::new(),
            providers: BTreeMap::new(),
            last_ns: None,
            lbr: BTreeMap::new(),
            stats: ChromeStats::default(),
        })
    }

    /// The counts so far.
    pub fn stats(&self) -> &ChromeStats {
        &self.stats
    }

    /// The state held between records (bounded; see [`Retained`]).
    pub fn retained(&self) -> Retained {
        Retained {
            open_slices: self.open.open() as u64,
            threads_with_open_slices: self.open.threads(),
            cpus: self.cpus.len(),
            running_cpu_slices: self.cpus.running_count(),
            known_threads: self.threads.len(),
            providers: self.providers.len(),
        }
    }

    fn saw(&mut self, ns: u64) {
        self.last_ns = Some(self.last_ns.map_or(ns, |t| t.max(ns)));
    }

    /// Starts an event object: the separator, then `{"ph":…,"ts":…,"pid":…,"tid":…`.
    fn head(&mut self, ph: &str, ts: u64, pid: u64, tid: u64) -> io::Result<()> {
        let sep: &[u8] = if self.stats.events_written == 0 {
            b"\n"
        } else {
            b",\n"
        };
        self.out.write_all(sep)?;
        self.stats.events_written += 1;
        write!(
            self.out,
            "{{\"ph\":\"{ph}\",\"ts\":{},\"pid\":{pid},\"tid\":{tid}",
            Micros(ts)
        )
    }

    /// [`Self::head`] followed by `"cat"` and `"name"`.
    fn head_named(
        &mut self,
        ph: &str,
        ts: u64,
        pid: u64,
        tid: u64,
        cat: &str,
        name: &str,
    ) -> io::Result<()> {
        self.head(ph, ts, pid, tid)?;
        self.out.write_all(b",\"cat\":")?;
        write_str(&mut self.out, cat)?;
        self.out.write_all(b",\"name\":")?;
        write_str(&mut self.out, name)
    }

    /// `,"args":{…}` unless there is nothing to write; closes nothing.
    fn args(&mut self, args: &[DecodedArg<'_>], skip: Option<usize>) -> io::Result<()> {
        let count = args.len() - usize::from(skip.is_some());
        if count == 0 {
            return Ok(());
        }
        self.out.write_all(b",\"args\":{")?;
        write_arg_members(&mut self.out, args, |i, _| Some(i) != skip, &[])?;
        self.out.write_all(b"}")
    }

    /// A metadata event (`process_name`, `thread_name`, sort indexes).
    fn metadata(
        &mut self,
        what: &str,
        pid: u64,
        tid: Option<u64>,
        key: &str,
        value: MetaValue<'_>,
    ) -> io::Result<()> {
        let sep: &[u8] = if self.stats.events_written == 0 {
            b"\n"
        } else {
            b",\n"
        };
        self.out.write_all(sep)?;
        self.stats.events_written += 1;
        write!(self.out, "{{\"ph\":\"M\",\"pid\":{pid}")?;
        if let Some(tid) = tid {
            write!(self.out, ",\"tid\":{tid}")?;
        }
        // `__metadata`: the category Chrome itself gives metadata events.
        self.out.write_all(b",\"cat\":\"__metadata\",\"name\":")?;
        write_str(&mut self.out, what)?;
        self.out.write_all(b",\"args\":{")?;
        write_str(&mut self.out, key)?;
        self.out.write_all(b":")?;
        match value {
            MetaValue::Str(s) => write_str(&mut self.out, s)?,
            MetaValue::Int(i) => write!(self.out, "{i}")?,
        }
        self.out.write_all(b"}}")
    }

    /// Converts one record.
    pub fn record(&mut self, d: &Decoded<'_>) -> io::Result<()> {
        self.convert_record(d)
    }

    fn convert_record(&mut self, d: &Decoded<'_>) -> io::Result<()> {
        self.stats.records += 1;
        match &d.record {
            DecodedRecord::Magic
            | DecodedRecord::Initialization { .. }
            | DecodedRecord::String { .. }
            | DecodedRecord::ProviderSection { .. } => Ok(()),
            DecodedRecord::ProviderInfo { provider_id, name } => {
                if let Some(listed) = listed_entry(&mut self.providers, *provider_id) {
                    *listed = name.to_string();
                }
                Ok(())
            }
            DecodedRecord::ProviderEvent { provider_id, event } => {
                self.provider_event(*provider_id, *event)
            }
            DecodedRecord::Thread { thread, .. } => {
                self.threads.entry(thread.tid).or_default().pid = Some(thread.pid);
                Ok(())
            }
            DecodedRecord::Event(e) => self.event(e),
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } => {
                if *blob_type == BlobType::LAST_BRANCH {
                    self.last_branch(name, payload, d.ticks_per_second)
                } else {
                    bump(&mut self.stats.not_converted, "blob");
                    Ok(())
                }
            }
            DecodedRecord::UserspaceObject { .. } => {
                bump(&mut self.stats.not_converted, "userspace_object");
                Ok(())
            }
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            } => self.kernel_object(*koid, *object_type, name, args),
            DecodedRecord::ContextSwitch { .. } | DecodedRecord::SchedContextSwitch { .. } => {
                match Switch::of(d) {
                    Some(switch) => self.switch(&switch),
                    None => Ok(()),
                }
            }
            DecodedRecord::SchedThreadWakeup {
                time,
                cpu,
                waking_tid,
                args,
            } => self.wakeup(*cpu, time.ns, *waking_tid, args),
            DecodedRecord::Log {
                time,
                thread,
                message,
            } => {
                self.saw(time.ns);
                self.head_named("i", time.ns, thread.pid, thread.tid, "log", "log")?;
                self.out.write_all(b",\"s\":\"t\",\"args\":{\"message\":")?;
                write_str(&mut self.out, message)?;
                self.out.write_all(b"}}")
            }
            DecodedRecord::LargeBlob {
                category,
                name,
                metadata,
                payload,
            } => match metadata {
                Some(m) => {
                    self.saw(m.time.ns);
                    self.head_named("i", m.time.ns, m.thread.pid, m.thread.tid, category, name)?;
                    self.out.write_all(b",\"s\":\"t\",\"args\":{")?;
                    write_arg_members(&mut self.out, &m.args, all, &[])?;
                    if !m.args.is_empty() {
                        self.out.write_all(b",")?;
                    }
                    write!(self.out, "\"payload_bytes\":{}}}}}", payload.len())
                }
                None => {
                    bump(&mut self.stats.not_converted, "large_blob_attachment");
                    Ok(())
                }
            },
        }
    }

    fn event(&mut self, e: &DecodedEvent<'_>) -> io::Result<()> {
        let ts = e.time.ns;
        let (pid, tid) = (e.thread.pid, e.thread.tid);
        self.saw(ts);
        match e.kind {
            DecodedEventKind::Instant => {
                let (scope, skip) = instant_scope(&e.args);
                self.head_named("i", ts, pid, tid, &e.category, &e.name)?;
                write!(self.out, ",\"s\":\"{scope}\"")?;
                self.args(&e.args, skip)?;
            }
            DecodedEventKind::Counter { id } => {
                self.head_named("C", ts, pid, tid, &e.category, &e.name)?;
                if id != 0 {
                    write!(self.out, ",\"id\":{}", HexStr(id))?;
                }
                let dropped = e.args.iter().filter(|a| !is_number(&a.value)).count();
                self.stats.counter_args_dropped += dropped as u64;
                self.out.write_all(b",\"args\":{")?;
                write_arg_members(&mut self.out, &e.args, |_, a| is_number(&a.value), &[])?;
                self.out.write_all(b"}")?;
            }
            DecodedEventKind::DurationBegin => {
                if !self.open.begin(e.thread, ts, &e.category, &e.name, ()) {
                    // Beyond the bound of open slices: its end is consumed with it.
                    self.stats.begins_not_kept += 1;
                    return Ok(());
                }
                self.head_named("B", ts, pid, tid, &e.category, &e.name)?;
                self.args(&e.args, None)?;
            }
            DecodedEventKind::DurationEnd => {
                let Open {
                    begin_ns: begin,
                    category: cat,
                    name,
                    ..
                } = match self.open.end(e.thread) {
                    Closed::Slice(slice) => slice,
                    Closed::NotKept => return Ok(()),
                    Closed::Unmatched => {
                        self.stats.unmatched_ends_dropped += 1;
                        return Ok(());
                    }
                };
                // An end before its begin is moved to the begin: viewers sort events by
                // time, and every end must still follow its own begin after sorting.
                if ts < begin {
                    self.stats.negative_durations += 1;
                }
                // The begin's name and category, whatever the end record says: an end closes
                // the innermost open begin of its thread (Perfetto would refuse an end whose
                // name differs from its begin's; DevTools needs a name on every event).
                self.head_named("E", ts.max(begin), pid, tid, &cat, &name)?;
                self.args(&e.args, None)?;
            }
            DecodedEventKind::DurationComplete { end } => {
                self.saw(end.ns);
                if end.ns < ts {
                    self.stats.negative_durations += 1;
                }
                self.head_named("X", ts, pid, tid, &e.category, &e.name)?;
                write!(self.out, ",\"dur\":{}", Micros(end.ns.saturating_sub(ts)))?;
                self.args(&e.args, None)?;
            }
            DecodedEventKind::AsyncBegin { id } | DecodedEventKind::AsyncEnd { id }
                if !self.async_pairs(e, id) =>
            {
                return Ok(());
            }
            DecodedEventKind::AsyncBegin { id }
            | DecodedEventKind::AsyncInstant { id }
            | DecodedEventKind::AsyncEnd { id } => {
                let ph = match e.kind {
                    DecodedEventKind::AsyncBegin { .. } => "b",
                    DecodedEventKind::AsyncInstant { .. } => "n",
                    _ => "e",
                };
                self.head_named(ph, ts, pid, tid, &e.category, &e.name)?;
                write!(self.out, ",\"id\":{}", HexStr(id))?;
                self.args(&e.args, None)?;
            }
            DecodedEventKind::FlowBegin { id }
            | DecodedEventKind::FlowStep { id }
            | DecodedEventKind::FlowEnd { id } => {
                let ph = match e.kind {
                    DecodedEventKind::FlowBegin { .. } => "s",
                    DecodedEventKind::FlowStep { .. } => "t",
                    _ => "f",
                };
                self.head_named(ph, ts, pid, tid, &e.category, &e.name)?;
                write!(self.out, ",\"id\":{},\"bp\":\"e\"", HexStr(id))?;
                self.args(&e.args, None)?;
            }
        }
        self.out.write_all(b"}")
    }

    /// Pairs an async begin or end with its track (process, category, name, id); `false`
    /// for an end with no begin open there (dropped and counted, as a duration end is).
    fn async_pairs(&mut self, e: &DecodedEvent<'_>, id: u64) -> bool {
        let cat = self.async_texts.get(&e.category);
        let name = self.async_texts.get(&e.name);
        let key = (e.thread.pid, cat, name, id);
        if matches!(e.kind, DecodedEventKind::AsyncBegin { .. }) {
            if let Some(open) = self.asyncs.entry(key) {
                open.0 = e.thread.tid;
                open.1 += 1;
            }
            return true;
        }
        let refused = self.asyncs.refused();
        match self.asyncs.get_mut(&key) {
            Some(open) => {
                open.1 -= 1;
                if open.1 == 0 {
                    self.asyncs.remove(&key);
                }
                true
            }
            // Its begin may be one beyond the bound: written as it is.
            None if refused > 0 => true,
            None => {
                self.stats.unmatched_async_ends_dropped += 1;
                false
            }
        }
    }

    fn kernel_object(
        &mut self,
        koid: u64,
        object_type: ObjectType,
        name: &str,
        args: &[DecodedArg<'_>],
    ) -> io::Result<()> {
        if object_type == ObjectType::PROCESS {
            return self.metadata("process_name", koid, None, "name", MetaValue::Str(name));
        }
        if object_type != ObjectType::THREAD {
            bump(&mut self.stats.not_converted, "kernel_object");
            return Ok(());
        }
        let from_arg = args
            .iter()
            .find(|a| a.name == "process")
            .and_then(|a| as_koid(&a.value));
        let known = self.threads.entry(koid).or_default();
        known.name = Some(crate::kept_name(name));
        let Some(pid) = from_arg.or(known.pid) else {
            self.stats.thread_names_without_process += 1;
            return Ok(());
        };
        known.pid = Some(pid);
        self.metadata("thread_name", pid, Some(koid), "name", MetaValue::Str(name))
    }

    fn provider_event(&mut self, provider_id: u32, event: u8) -> io::Result<()> {
        if event != PROVIDER_EVENT_BUFFER_OVERFLOW {
            bump(&mut self.stats.not_converted, "provider_event");
            return Ok(());
        }
        *listed_entry(&mut self.stats.buffer_overflows, provider_id)
            .unwrap_or(&mut self.stats.buffer_overflows_not_listed) += 1;
        let name = match self.providers.get(&provider_id) {
            Some(n) => {
                format!("fxtrace: provider {provider_id} ({n}) buffer overflow, records dropped")
            }
            None => format!("fxtrace: provider {provider_id} buffer overflow, records dropped"),
        };
        let ts = self.last_ns.unwrap_or(0);
        self.head_named("i", ts, GLOBAL_PID, GLOBAL_PID, "fxtrace", &name)?;
        self.out.write_all(b",\"s\":\"g\"}")
    }

    /// Names CPU `cpu`'s track the first time it is used.
    fn cpu_track(&mut self, cpu: u16) -> io::Result<()> {
        if self.cpu_tracks.contains(&cpu) {
            return Ok(());
        }
        if self.cpu_tracks.is_empty() {
            self.metadata(
                "process_name",
                CPU_PROCESS_PID,
                None,
                "name",
                MetaValue::Str("CPUs"),
            )?;
            self.metadata(
                "process_sort_index",
                CPU_PROCESS_PID,
                None,
                "sort_index",
                MetaValue::Int(-1),
            )?;
        }
        self.cpu_tracks.insert(cpu);
        let tid = CPU_TRACK_TID_BASE + u64::from(cpu);
        self.metadata(
            "thread_name",
            CPU_PROCESS_PID,
            Some(tid),
            "name",
            MetaValue::Str(&format!("CPU {cpu}")),
        )?;
        self.metadata(
            "thread_sort_index",
            CPU_PROCESS_PID,
            Some(tid),
            "sort_index",
            MetaValue::Int(i64::from(cpu)),
        )
    }

    /// `name (tid)` when the thread's name is known, else `tid N`.
    fn label(&self, tid: u64) -> String {
        match self.threads.get(&tid).and_then(|t| t.name.as_deref()) {
            Some(name) => format!("{name} ({tid})"),
            None => format!("tid {tid}"),
        }
    }

    fn switch(&mut self, switch: &Switch<'_>) -> io::Result<()> {
        let (cpu, ns) = (switch.cpu, switch.ns);
        self.saw(ns);
        self.cpu_track(cpu)?;
        let incoming = (switch.incoming_tid != 0).then(|| Running {
            tid: switch.incoming_tid,
            pid: switch
                .incoming_pid
                .or_else(|| self.threads.get(&switch.incoming_tid).and_then(|t| t.pid)),
            since_ns: ns,
            data: SliceArgs {
                priority: switch.incoming_priority,
                // Kept for the slice of the thread switched in.
                args: switch
                    .args
                    .iter()
                    .map(|arg| owned_arg(arg, &mut self.stats.switch_args_cut))
                    .collect(),
            },
        });
        let ended = self.cpus.switch(
            cpu,
            ns,
            switch.outgoing_tid,
            switch.outgoing_state,
            incoming,
        );
        match ended {
            Some(ran) => {
                self.stats.switch_mismatches += u64::from(ran.mismatch);
                self.cpu_slice(ran)
            }
            None => Ok(()),
        }
    }

    /// The `X` slice on its CPU's track of a thread that ran.
    fn cpu_slice(&mut self, ran: Ran<SliceArgs>) -> io::Result<()> {
        let (r, end_ns) = (&ran.running, ran.until_ns);
        if end_ns < r.since_ns {
            self.stats.negative_durations += 1;
        }
        let label = self.label(r.tid);
        let tid = CPU_TRACK_TID_BASE + u64::from(ran.cpu);
        self.head_named("X", r.since_ns, CPU_PROCESS_PID, tid, "cpu", &label)?;
        write!(
            self.out,
            ",\"dur\":{},\"args\":{{\"tid\":{}",
            Micros(end_ns.saturating_sub(r.since_ns)),
            r.tid
        )?;
        if let Some(pid) = r
            .pid
            .or_else(|| self.threads.get(&r.tid).and_then(|t| t.pid))
        {
            write!(self.out, ",\"pid\":{pid}")?;
        }
        if let Some(priority) = r.data.priority {
            write!(self.out, ",\"priority\":{priority}")?;
        }
        match ran.end_state {
            Some(s) => {
                self.out.write_all(b",\"end_state\":")?;
                match ThreadState::from_raw(s) {
                    Some(state) => write_str(&mut self.out, &state.to_string())?,
                    None => write!(self.out, "{s}")?,
                }
            }
            None => self.out.write_all(b",\"end_state\":\"trace end\"")?,
        }
        let written = ["tid", "pid", "priority", "end_state"];
        write_arg_members(&mut self.out, &r.data.args, all, &written)?;
        self.out.write_all(b"}}")
    }

    fn wakeup(&mut self, cpu: u16, ns: u64, tid: u64, args: &[DecodedArg<'_>]) -> io::Result<()> {
        self.saw(ns);
        self.cpu_track(cpu)?;
        let name = format!("wakeup {}", self.label(tid));
        let track = CPU_TRACK_TID_BASE + u64::from(cpu);
        self.head_named("i", ns, CPU_PROCESS_PID, track, "cpu", &name)?;
        write!(self.out, ",\"s\":\"t\",\"args\":{{\"tid\":{tid}")?;
        write_arg_members(&mut self.out, args, all, &["tid"])?;
        self.out.write_all(b"}}")
    }

    fn last_branch(&mut self, name: &str, payload: &[u8], ticks_per_second: u64) -> io::Result<()> {
        let sample = match LbrSample::decode(payload) {
            Ok(s) => s,
            Err(_) => {
                self.stats.lbr_invalid += 1;
                return Ok(());
            }
        };
        let h = sample.header;
        let ns = ticks_to_ns(h.event_time, ticks_per_second);
        self.saw(ns);
        self.cpu_track(h.cpu)?;
        self.stats.lbr_samples += 1;
        let counts = self.lbr.entry(h.cpu).or_default();
        counts.samples += 1;
        counts.branches += u64::from(h.num_branches);
        counts.mispredicted += sample.branches().filter(|b| b.mispredicted()).count() as u64;
        let track = CPU_TRACK_TID_BASE + u64::from(h.cpu);
        self.head_named(
            "i",
            ns,
            CPU_PROCESS_PID,
            track,
            "cpu:last_branch",
            "last_branch",
        )?;
        self.out.write_all(b",\"s\":\"t\",\"args\":{\"blob\":")?;
        write_str(&mut self.out, name)?;
        write!(self.out, ",\"aspace\":{},\"branches\":[", HexStr(h.aspace))?;
        for (i, b) in sample.branches().enumerate() {
            if i > 0 {
                self.out.write_all(b",")?;
            }
            write!(
                self.out,
                "{{\"from\":{},\"to\":{},\"cycles\":{},\"mispredicted\":{}}}",
                HexStr(b.from),
                HexStr(b.to),
                b.cycles(),
                b.mispredicted()
            )?;
        }
        self.out.write_all(b"]}}")
    }

    /// Ends the output: closes open durations and CPU slices at the last timestamp, then
    /// writes `"displayTimeUnit"` and `"otherData"` (providers, counts, LBR summary, decode
    /// status). `decode_error` and `skipped` describe how reading the input ended. Returns
    /// the output (flushed) and the counts.
    pub fn finish(
        mut self,
        decode_error: Option<&DecodeError>,
        skipped: SkipCounts,
    ) -> io::Result<(W, ChromeStats)> {
        let end = self.last_ns.unwrap_or(0);
        for (thread, stack) in self.open.drain() {
            for slice in stack.into_iter().rev() {
                let (cat, name) = (&slice.category, &slice.name);
                self.head_named("E", end, thread.pid, thread.tid, cat, name)?;
                self.out.write_all(b"}")?;
                self.stats.unclosed_begins_closed += 1;
            }
        }
        let mut asyncs: Vec<(AsyncTrack, (u64, u64))> = self.asyncs.drain().collect();
        asyncs.sort_by(|a, b| {
            (a.0 .0, &*a.0 .1, &*a.0 .2, a.0 .3).cmp(&(b.0 .0, &*b.0 .1, &*b.0 .2, b.0 .3))
        });
        for ((pid, cat, name, id), (tid, count)) in asyncs {
            for _ in 0..count {
                self.head_named("e", end, pid, tid, &cat, &name)?;
                write!(self.out, ",\"id\":{}}}", HexStr(id))?;
                self.stats.unclosed_async_closed += 1;
            }
        }
        if self.stats.unclosed_begins_closed + self.stats.unclosed_async_closed > 0 {
            self.stats.closed_at_ns = Some(end);
        }
        for ran in self.cpus.finish(end) {
            self.cpu_slice(ran)?;
        }
        self.out
            .write_all(b"\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{")?;
        self.other_data(decode_error, skipped)?;
        self.out.write_all(b"}}\n")?;
        self.out.flush()?;
        Ok((self.out, self.stats))
    }

    fn other_data(
        &mut self,
        decode_error: Option<&DecodeError>,
        skipped: SkipCounts,
    ) -> io::Result<()> {
        write!(
            self.out,
            "\"generator\":\"fxtrace {}\",\"providers\":{{",
            env!("CARGO_PKG_VERSION")
        )?;
        for (i, (id, name)) in self.providers.iter().enumerate() {
            if i > 0 {
                self.out.write_all(b",")?;
            }
            write_str(&mut self.out, &id.to_string())?;
            self.out.write_all(b":")?;
            write_str(&mut self.out, name)?;
        }
        self.out.write_all(b"},\"input\":{\"status\":")?;
        match decode_error {
            None => write_str(&mut self.out, "ok")?,
            Some(e) => write_str(&mut self.out, &format!("damaged: {e}"))?,
        }
        write!(
            self.out,
            ",\"records\":{},\"records_skipped\":{},\"args_of_unknown_type\":{}}}",
            self.stats.records,
            skipped.records(),
            skipped.unknown_arg_type
        )?;
        let s = &self.stats;
        write!(
            self.out,
            ",\"conversion\":{{\"events\":{},\"unmatched_ends_dropped\":{},\
             \"unclosed_begins_closed\":{},\"unmatched_async_ends_dropped\":{},\
             \"unclosed_async_closed\":{},\"negative_durations\":{},\
             \"counter_args_dropped\":{},\"thread_names_without_process\":{},\
             \"switch_mismatches\":{},\"lbr_invalid\":{},\"not_converted\":{{",
            s.events_written,
            s.unmatched_ends_dropped,
            s.unclosed_begins_closed,
            s.unmatched_async_ends_dropped,
            s.unclosed_async_closed,
            s.negative_durations,
            s.counter_args_dropped,
            s.thread_names_without_process,
            s.switch_mismatches,
            s.lbr_invalid
        )?;
        let not_converted: Vec<String> = s
            .not_converted
            .iter()
            .map(|(k, n)| format!("\"{k}\":{n}"))
            .collect();
        let overflows: Vec<String> = s
            .buffer_overflows
            .iter()
            .map(|(p, n)| format!("\"{p}\":{n}"))
            .collect();
        write!(
            self.out,
            "{}}},\"buffer_overflows\":{{{}}}}}",
            not_converted.join(","),
            overflows.join(",")
        )?;
        let total = self
            .lbr
            .values()
            .fold(LbrCounts::default(), |a, c| LbrCounts {
                samples: a.samples + c.samples,
                branches: a.branches + c.branches,
                mispredicted: a.mispredicted + c.mispredicted,
            });
        write!(
            self.out,
            ",\"lastBranch\":{{\"samples\":{},\"branches\":{},\"mispredicted\":{},\
             \"invalid\":{},\"report\":\"fxtrace report lbr TRACE.fxt\",\"cpus\":{{",
            total.samples, total.branches, total.mispredicted, self.stats.lbr_invalid
        )?;
        let cpus: Vec<String> = self
            .lbr
            .iter()
            .map(|(cpu, c)| {
                format!(
                    "\"{cpu}\":{{\"samples\":{},\"branches\":{},\"mispredicted\":{}}}",
                    c.samples, c.branches, c.mispredicted
                )
            })
            .collect();
        write!(self.out, "{}}}}}", cpus.join(","))
    }
}

impl<W: Write> Analysis for ChromeJsonWriter<W> {
    /// Every record is converted or counted.
    fn add(&mut self, _: &RecordHead, d: &Decoded<'_>) -> io::Result<()> {
        self.convert_record(d)
    }
}

/// The value of a metadata event's single argument.
#[derive(Debug, Clone, Copy)]
enum MetaValue<'a> {
    Str(&'a str),
    Int(i64),
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use fxtrace_format::{DecodedArg, DecodedValue};

    #[test]
    fn kept_switch_arguments_are_cut_once_each_and_blobs_keep_their_length() {
        let long = "é".repeat(200); // 400 bytes
        let arg = |name: &str, value| DecodedArg {
            name: Cow::Owned(name.to_owned()),
            value,
        };
        let mut cut = 0;
        let both = super::owned_arg(
            &arg(
                &"n".repeat(300),
                DecodedValue::Str(Cow::Owned(long.clone())),
            ),
            &mut cut,
        );
        assert_eq!(cut, 1, "one argument, name and text both cut: counted once");
        assert_eq!(both.name.len(), 256);
        let DecodedValue::Str(text) = &both.value else {
            panic!("{both:?}")
        };
        assert!(
            text.len() <= 256 && long.starts_with(text.as_ref()),
            "at a boundary"
        );
        let blob = super::owned_arg(
            &arg("b", DecodedValue::Blob(Cow::Owned(vec![7; 1000]))),
            &mut cut,
        );
        assert_eq!(cut, 1, "a blob is kept as its length: nothing cut");
        assert!(matches!(blob.value, DecodedValue::Blob(b) if b.len() == 1000));
        let short = super::owned_arg(&arg("w", DecodedValue::Str(Cow::Borrowed("x"))), &mut cut);
        assert_eq!(
            (cut, short.value),
            (1, DecodedValue::Str(Cow::Borrowed("x")))
        );
    }

    use super::*;

    fn arg(name: &'static str, value: DecodedValue<'static>) -> DecodedArg<'static> {
        DecodedArg {
            name: Cow::Borrowed(name),
            value,
        }
    }

    #[test]
    fn scope_from_argument() {
        let s = |v: &'static str| arg("scope", DecodedValue::Str(Cow::Borrowed(v)));
        assert_eq!(instant_scope(&[]), ("t", None));
        assert_eq!(instant_scope(&[s("global")]), ("g", Some(0)));
        assert_eq!(
            instant_scope(&[arg("x", DecodedValue::U32(1)), s("p")]),
            ("p", Some(1))
        );
        assert_eq!(instant_scope(&[s("thread")]), ("t", Some(0)));
        // An unrecognised scope value stays an ordinary argument.
        assert_eq!(instant_scope(&[s("galaxy")]), ("t", None));
        assert_eq!(
            instant_scope(&[arg("scope", DecodedValue::U32(1))]),
            ("t", None)
        );
    }

    #[test]
    fn koid_arguments() {
        assert_eq!(as_koid(&DecodedValue::Koid(5)), Some(5));
        assert_eq!(as_koid(&DecodedValue::U32(5)), Some(5));
        assert_eq!(as_koid(&DecodedValue::I64(-1)), None);
        assert_eq!(as_koid(&DecodedValue::Bool(true)), None);
    }
}

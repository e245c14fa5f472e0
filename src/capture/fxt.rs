//! Capture events → FXT records: the kernel provider's record stream.
//!
//! [`KernelTraceWriter`] turns the timestamp-ordered [`CaptureEvent`]s of a capture session into
//! FXT records and pushes them into a [`RecordSink`]: an in-memory [`RecordWriter`], a file or
//! pipe ([`FxtStreamSink`]), the recorder's section, or the in-process engine's buffer. Its
//! string and thread indices come from a [`RefTable`]: a table of its own ([`LocalRefs`]), or
//! inside a traced process the engine's tables (the preload object's), so records are written
//! with the indices they keep.
//!
//! | capture event | FXT records |
//! |---|---|
//! | [`CaptureEvent::Thread`] | Thread record (indexed while the table has room), Kernel Object records naming the process (`PROCESS` = 1) and the thread (`THREAD` = 2, with a `"process"` koid argument; `:<tid>` when its name is unknown), each once per name |
//! | [`CaptureEvent::Comm`] | a new Kernel Object record for the renamed thread (and its process when the thread is the main one) |
//! | [`CaptureEvent::ContextSwitch`] | Context Switch record (type 8, legacy layout: cpu, outgoing state, thread refs, priorities); CPUs above 255 use the scheduling type 1 layout (16-bit cpu) |
//! | [`CaptureEvent::Branch`] | Blob record of type `LAST_BRANCH` (2), payload per [`crate::format::lbr`], named `"cpu<N>"` (an indexed string); `aspace` is the sampled process's pid (0 when unknown) |
//! | [`CaptureEvent::Mmap`] | Blob record of type `DATA` (1) named `"fxtrace:mmap"` (an indexed string), payload per [`crate::format::mmap`] (pid, time, start, len, pgoff, build-id, path) |
//! | [`CaptureEvent::Lost`] | instant event `"fxtrace: N perf records lost"` (category `"fxtrace"`, `count` and `cpu` arguments) and, on the first loss, Provider Event metadata "buffer overflow" |
//! | [`CaptureEvent::Unsupported`] | an instant event `"fxtrace: <what> unavailable"`: `reason` (one line), `detail` (the whole text), `errno` |
//! | [`CaptureEvent::Fork`] / [`CaptureEvent::Exit`] | nothing of their own (a reused tid in another process re-registers its thread), except that a forked process gets a copy of its parent's mapping blobs (the kernel reports none for the inherited address space) |
//!
//! # Thread table
//!
//! Thread refs use indices while the table has room (the local table: 1..=255); a thread
//! switched out for the last time (state dying or dead) gives its index back, and the next new
//! thread re-registers it with a new Thread record. When the table's epoch changes (a new trace
//! in the engine) every string and thread is registered again at its next use and every known
//! process and thread name is written again ([`KernelTraceStats::names_replayed`]). When no index is free, refs go inline (pid and tid in the record) and the
//! thread is counted in [`KernelTraceStats::unindexed_threads`]. A switch side the source does not
//! know (per-process capture: the other task is outside the process) is written as thread koid
//! 0 of process 0, like the idle task.
//!
//! # Threads of unknown process
//!
//! Only the idle task (tid 0) is written in process 0. A thread the capture could not place in
//! a process (its event arrives with pid `None`: see `capture::pids`) is written in the
//! marker process [`UNKNOWN_PROCESS_KOID`] (`0xffffffff`, perf's own "-1" for a pid it cannot
//! resolve; no Linux pid reaches it, `pid_max` ≤ 2²²), named [`UNKNOWN_PROCESS_NAME`] by a
//! Kernel Object record, so such threads are grouped visibly in viewers instead of being
//! mixed with the idle task. Each such thread is counted once in
//! [`KernelTraceStats::unknown_process_threads`] and in the section's summary event. If its
//! process is learnt later, the thread is registered and named again under it.
//!
//! # Order and losses
//!
//! Records go out in the order events arrive, which the capture layer makes timestamp order.
//! An event older than one already written is still written (with its own timestamp) and counted
//! in [`KernelTraceStats::late`]. Nothing is dropped silently: records the sink refuses (encode
//! limits, a full buffer) are counted in [`KernelTraceStats::dropped_records`]; an I/O error
//! stops the writer and is returned.

use std::collections::HashMap;

use super::ids::{IdMap, IdSet};
use std::io::{self, Write};

use thiserror::Error;

use super::events::{
    BranchSample, CaptureEvent, CpuSample, KernelSymbol, Lost, LostKind, MemoryMap, StackInfo,
    SwitchEvent, SwitchSides, TaskComm, TaskExit, TaskFork, ThreadInfo, Unsupported, WakeupEvent,
};
use super::refs::{LocalRefs, RefTable, Registration};
use super::state::LinuxThreadState;
use crate::format::fields::{
    ArgumentHeader, ContextSwitchRecord, RecordHeader, SchedThreadWakeupRecord, SchedulingRecord,
};
use crate::format::lbr::{LbrBranch, LbrPayload, LBR_MAX_BRANCHES};
use crate::format::mmap::{MmapRecord, MMAP_BLOB_NAME, MMAP_MAX_BUILD_ID, MMAP_MAX_PATH};
use crate::format::sched::{self, IDLE_WEIGHT};
use crate::format::stack::{
    KernelSymbolRecord, SampleRecord, StackRecord, KSYM_BLOB_NAME, KSYM_MAX_NAME, SAMPLE_BLOB_NAME,
    STACK_BLOB_NAME,
};
use crate::format::{
    truncate_str, Arg, ArgType, ArgValue, BatchError, BatchOut, BatchWriter, Blob, BlobType,
    ContextSwitch, Encode, EncodeError, Event, EventKind, Initialization, KernelObject, ObjectType,
    ProviderEvent, ProviderInfo, Record, RecordType, RecordWriter, SchedContextSwitch,
    SchedThreadWakeup, SchedulingType, StringRef, ThreadRef, ThreadState,
    PROVIDER_EVENT_BUFFER_OVERFLOW,
};

/// The process koid of threads whose process could not be learnt (see the module docs), and
/// with thread 0, of a switch side the source does not know
/// ([`crate::format::sched::UNKNOWN_PROCESS_KOID`]).
pub const UNKNOWN_PROCESS_KOID: u32 = crate::format::sched::UNKNOWN_PROCESS_KOID as u32;
/// The name of the [`UNKNOWN_PROCESS_KOID`] process.
pub const UNKNOWN_PROCESS_NAME: &str = "unknown process (fxtrace)";

/// Category of the events fxtrace writes about its own capture.
pub const FXTRACE_CATEGORY: &str = "fxtrace";

// === impl RecordSink ===

/// Why a sink did not take a record.
#[derive(Debug, Error)]
pub enum SinkError {
    /// The record breaks a format limit; it is dropped (and counted by the writer).
    #[error("record could not be encoded: {0}")]
    Encode(#[from] EncodeError),
    /// The destination buffer is full; the record is dropped (and counted by the writer).
    #[error("the trace buffer is full")]
    Full,
    /// Writing failed; the trace cannot continue.
    #[error("writing the trace failed: {0}")]
    Io(#[from] io::Error),
}

/// Where encoded records go.
pub trait RecordSink {
    /// Encodes and appends one record; returns its size in words.
    fn push(&mut self, record: &Record<'_>) -> Result<usize, SinkError>;

    /// Encodes and appends one context switch, the record written per switch; returns its size
    /// in words. The same as [`Self::push`] of a [`Record::ContextSwitch`]; sinks that encode
    /// in place override it to encode the record type directly, without going through
    /// [`Record`]'s dispatch over every record type.
    fn push_context_switch(&mut self, record: &ContextSwitch) -> Result<usize, SinkError> {
        self.push(&Record::ContextSwitch(*record))
    }

    /// Encodes and appends one thread wakeup, the record written per wake-up; the same as
    /// [`Self::push`] of a [`Record::SchedThreadWakeup`], which sinks that encode in place
    /// override as [`Self::push_context_switch`].
    fn push_wakeup(&mut self, record: &SchedThreadWakeup<'_>) -> Result<usize, SinkError> {
        self.push(&Record::SchedThreadWakeup(*record))
    }
}

impl RecordSink for RecordWriter {
    fn push(&mut self, record: &Record<'_>) -> Result<usize, SinkError> {
        Ok(RecordWriter::push(self, record)?)
    }

    fn push_context_switch(&mut self, record: &ContextSwitch) -> Result<usize, SinkError> {
        Ok(RecordWriter::push(self, record)?)
    }

    fn push_wakeup(&mut self, record: &SchedThreadWakeup<'_>) -> Result<usize, SinkError> {
        Ok(RecordWriter::push(self, record)?)
    }
}

impl<S: RecordSink + ?Sized> RecordSink for &mut S {
    fn push(&mut self, record: &Record<'_>) -> Result<usize, SinkError> {
        (**self).push(record)
    }

    fn push_context_switch(&mut self, record: &ContextSwitch) -> Result<usize, SinkError> {
        (**self).push_context_switch(record)
    }

    fn push_wakeup(&mut self, record: &SchedThreadWakeup<'_>) -> Result<usize, SinkError> {
        (**self).push_wakeup(record)
    }
}

/// Streams records to any [`Write`] (a file, a pipe): the format's [`BatchWriter`] in batches of
/// about 64 KiB. Call [`FxtStreamSink::finish`] (or [`FxtStreamSink::flush`]) at the end:
/// dropping the sink loses what is still buffered.
#[derive(Debug)]
pub struct FxtStreamSink<W: Write>(BatchWriter<WriteBatches<W>>);

/// Words buffered before a write to the underlying writer (64 KiB).
const CHUNK_WORDS: usize = 8 * 1024;

/// A [`Write`] as the output of a [`BatchWriter`].
#[derive(Debug)]
struct WriteBatches<W>(W);

impl<W: Write> BatchOut for WriteBatches<W> {
    type Error = io::Error;

    fn write_batch(&mut self, words: &[u64]) -> io::Result<()> {
        // SAFETY: `words` is a live, initialised `[u64]`; viewing its memory as bytes (align 1,
        // same length in bytes, no padding in u64) is always valid, and the view ends with
        // this call.
        let bytes = unsafe {
            std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words))
        };
        self.0.write_all(bytes)
    }
}

impl<W: Write> FxtStreamSink<W> {
    /// A sink writing to `out`, nothing written yet.
    pub fn new(out: W) -> Self {
        Self(BatchWriter::new(WriteBatches(out), CHUNK_WORDS))
    }

    /// A sink whose stream starts with the magic number record, as a trace file does.
    pub fn with_magic(out: W) -> Self {
        Self(BatchWriter::with_magic(WriteBatches(out), CHUNK_WORDS))
    }

    /// Bytes accepted so far (written or buffered).
    pub fn bytes(&self) -> u64 {
        self.0.bytes()
    }

    /// Writes out everything buffered and flushes the writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.0.flush()?;
        self.0.out_mut().0.flush()
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush()?;
        Ok(self.0.into_out().0)
    }
}

impl<W: Write> RecordSink for FxtStreamSink<W> {
    fn push(&mut self, record: &Record<'_>) -> Result<usize, SinkError> {
        self.0.push(record).map_err(batch_error)
    }

    fn push_context_switch(&mut self, record: &ContextSwitch) -> Result<usize, SinkError> {
        // Encoded straight into the batch's words: the usual two-word record as two stores.
        match IndexedSwitch::of(record) {
            Some(words) => self.0.push(&words),
            None => self.0.push(record),
        }
        .map_err(batch_error)
    }

    fn push_wakeup(&mut self, record: &SchedThreadWakeup<'_>) -> Result<usize, SinkError> {
        match WakeupWords::of(record) {
            Some(words) => self.0.push(&words),
            None => self.0.push(record),
        }
        .map_err(batch_error)
    }
}

/// A record of `N` words built ahead from the format's field descriptors, so that writing it
/// is `N` stores instead of the general encoder: the records written per switch and per
/// wake-up ([`IndexedSwitch`], [`WakeupWords`]).
#[derive(Debug, Clone, Copy)]
pub struct RecordWords<const N: usize>([u64; N]);

/// A legacy context switch whose two threads are table indices (nearly every switch): its
/// header word and timestamp (checked against [`ContextSwitch`]'s encoder by
/// `indexed_switch_words_are_the_encoders`).
pub type IndexedSwitch = RecordWords<2>;

/// A thread wakeup with one argument, a koid under an indexed name (fxtrace's `waker`): five
/// words (checked against the encoder by `wakeup_words_are_the_encoders`).
pub type WakeupWords = RecordWords<5>;

impl RecordWords<2> {
    /// The switch's words; `None` when a ref is inline (more words) or an index 0 (an encode
    /// error).
    #[inline]
    pub fn of(cs: &ContextSwitch) -> Option<Self> {
        let (ThreadRef::Index(out), ThreadRef::Index(inc)) = (cs.outgoing, cs.incoming) else {
            return None;
        };
        if out == 0 || inc == 0 {
            return None;
        }
        let header = RecordHeader::TYPE.make(RecordType::Scheduling as u64)
            | RecordHeader::SIZE.make(2)
            | ContextSwitchRecord::CPU.make(u64::from(cs.cpu))
            | ContextSwitchRecord::OUTGOING_STATE.make(cs.outgoing_state as u64)
            | ContextSwitchRecord::OUTGOING_THREAD_REF.make(u64::from(out))
            | ContextSwitchRecord::INCOMING_THREAD_REF.make(u64::from(inc))
            | ContextSwitchRecord::OUTGOING_PRIORITY.make(u64::from(cs.outgoing_priority))
            | ContextSwitchRecord::INCOMING_PRIORITY.make(u64::from(cs.incoming_priority))
            | SchedulingRecord::SCHEDULING_TYPE.make(SchedulingType::LegacyContextSwitch as u64);
        Some(Self([header, cs.ticks]))
    }
}

impl RecordWords<5> {
    /// The wakeup's words; `None` unless it has exactly one koid argument with an indexed
    /// name.
    #[inline]
    pub fn of(w: &SchedThreadWakeup<'_>) -> Option<Self> {
        let [Arg {
            name: StringRef::Index(name),
            value: ArgValue::Koid(koid),
        }] = w.args
        else {
            return None;
        };
        if *name == 0 || *name > crate::format::MAX_STRING_INDEX {
            return None;
        }
        let header = RecordHeader::TYPE.make(RecordType::Scheduling as u64)
            | RecordHeader::SIZE.make(5)
            | SchedThreadWakeupRecord::ARGUMENT_COUNT.make(1)
            | SchedThreadWakeupRecord::CPU.make(u64::from(w.cpu))
            | SchedulingRecord::SCHEDULING_TYPE.make(SchedulingType::ThreadWakeup as u64);
        let arg = ArgumentHeader::TYPE.make(ArgType::Koid as u64)
            | ArgumentHeader::SIZE.make(2)
            | ArgumentHeader::NAME_REF.make(u64::from(*name));
        Some(Self([header, w.ticks, w.waking_tid, arg, *koid]))
    }
}

impl<const N: usize> Encode for RecordWords<N> {
    fn words(&self) -> Result<usize, EncodeError> {
        Ok(N)
    }

    #[inline]
    fn write(&self, out: &mut [u64]) -> Result<usize, EncodeError> {
        let available = out.len();
        let Some(dst) = out.get_mut(..N) else {
            return Err(EncodeError::BufferTooSmall {
                needed: N,
                available,
            });
        };
        dst.copy_from_slice(&self.0);
        Ok(N)
    }

    fn write_body(&self, body: &mut [u64]) -> Result<(u64, usize), EncodeError> {
        let available = body.len();
        let Some(dst) = body.get_mut(..N - 1) else {
            return Err(EncodeError::BufferTooSmall {
                needed: N - 1,
                available,
            });
        };
        dst.copy_from_slice(&self.0[1..]);
        Ok((self.0[0], N))
    }
}

fn batch_error(e: BatchError<io::Error>) -> SinkError {
    match e {
        BatchError::Encode(e) => SinkError::Encode(e),
        BatchError::Out(e) => SinkError::Io(e),
    }
}

// === impl KernelTraceStats ===

/// What a [`KernelTraceWriter`] wrote, and everything it could not write as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelTraceStats {
    /// Records written (metadata included).
    pub records: u64,
    /// Words written.
    pub words: u64,
    /// Context Switch records.
    pub context_switches: u64,
    /// Context switches written with the 16-bit-cpu layout (cpu above 255).
    pub wide_cpu_switches: u64,
    /// Context switches written by tid (scheduling type 1) because they carry arguments
    /// (cpu above 255, an uninterruptible sleep, a wait point).
    pub switches_by_tid: u64,
    /// Context switches of a thread going to sleep uninterruptibly (Linux `D`).
    pub uninterruptible_switches: u64,
    /// Context switches with a wait point (`stack` argument).
    pub wait_points: u64,
    /// Thread Wakeup records.
    pub wakeups: u64,
    /// `"fxtrace:sample"` blobs (CPU samples).
    pub samples: u64,
    /// `"fxtrace:stack"` blobs (interned call chains; again after a new epoch).
    pub stack_blobs: u64,
    /// `"fxtrace:ksym"` blobs (kernel symbols; again after a new epoch).
    pub kernel_symbols: u64,
    /// Distinct threads seen.
    pub threads: u64,
    /// Thread records written (registrations and re-registrations).
    pub thread_records: u64,
    /// Threads referenced inline because the thread table had no free index.
    pub unindexed_threads: u64,
    /// Threads (tid ≠ 0) written in the [`UNKNOWN_PROCESS_KOID`] process: their process could
    /// not be learnt.
    pub unknown_process_threads: u64,
    /// Strings written inline because the string table was full.
    pub unindexed_strings: u64,
    /// Kernel Object records (thread and process names).
    pub kernel_objects: u64,
    /// LAST_BRANCH blobs.
    pub branch_blobs: u64,
    /// Branch entries beyond the 32 a LAST_BRANCH blob holds (the oldest ones), not written.
    pub lbr_entries_truncated: u64,
    /// `"fxtrace:mmap"` blobs.
    pub mmap_blobs: u64,
    /// Mappings whose path (over 4096 bytes) or build-id (over 32 bytes) was cut to fit.
    pub mmaps_truncated: u64,
    /// Mapping blobs written for a forked child: copies of its parent's mappings, which the
    /// kernel does not report again (counted in `mmap_blobs` too).
    pub mmaps_inherited: u64,
    /// Mappings not remembered for a later fork because [`MAX_REMEMBERED_MAPPINGS`] (or
    /// [`MAX_REMEMBERED_BYTES`]) were
    /// already held: a child forked from that process misses them.
    pub mmaps_not_remembered: u64,
    /// Records the kernel reported lost (`PERF_RECORD_LOST`).
    pub lost_records: u64,
    /// Samples the kernel reported lost (`PERF_RECORD_LOST_SAMPLES`).
    pub lost_samples: u64,
    /// Loss reports written as events.
    pub lost_reports: u64,
    /// Unavailable sources written (one event each).
    pub unsupported: u64,
    /// Events older than one already written (written anyway, out of order).
    pub late: u64,
    /// Records the sink refused (encode limits, full buffer): not in the trace.
    pub dropped_records: u64,
    /// New epochs of the string and thread table (a new trace in the engine): everything
    /// registered again, every name written again.
    pub epochs: u64,
    /// Name records (Kernel Object) written again at the start of a new epoch.
    pub names_replayed: u64,
    /// Ring records the capture could not parse, as it counted them
    /// ([`KernelTraceWriter::note_capture_damage`]): not in the trace.
    pub unparsed_records: u64,
    /// Ring bytes the capture skipped after a corrupt record header (as it counted them).
    pub corrupt_bytes: u64,
    /// Second copies the capture dropped (a thread with two events of a kind, as it counted
    /// them: [`KernelTraceWriter::note_capture_damage`]); one of each is in the trace.
    pub duplicates: u64,
}

impl KernelTraceStats {
    /// Whether the trace misses anything the kernel or fxtrace dropped.
    pub fn lost_anything(&self) -> bool {
        self.lost_records > 0
            || self.lost_samples > 0
            || self.dropped_records > 0
            || self.unparsed_records > 0
            || self.corrupt_bytes > 0
    }
}

// === impl KernelTraceWriter ===

/// Identity and clock of a kernel provider's section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelTraceConfig {
    /// Provider id in the archive.
    pub provider_id: u32,
    /// Provider name.
    pub provider_name: String,
    /// Ticks per second of every timestamp (the TSC rate, [`crate::clock::info`]).
    pub ticks_per_second: u64,
    /// Tick count at capture start: the time of records about the capture itself that the
    /// kernel did not timestamp (unsupported sources).
    pub start_ticks: u64,
    /// The recorder's own (pid, tid): the thread of events about the capture (losses,
    /// unsupported sources).
    pub recorder: (u32, u32),
}

impl KernelTraceConfig {
    /// Provider 1, `"kernel"`, this process's clock, started now, recorded by this thread.
    pub fn kernel() -> Self {
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() } as u32;
        Self {
            provider_id: 1,
            provider_name: "kernel".into(),
            ticks_per_second: crate::clock::info().ticks_per_second,
            start_ticks: crate::clock::ticks(),
            recorder: (std::process::id(), tid),
        }
    }
}

/// What a remembered mapping costs, approximately: its fields, path and build-id.
fn remembered_size(map: &MemoryMap) -> usize {
    std::mem::size_of::<MemoryMap>() + map.path.len() + map.build_id.as_ref().map_or(0, Vec::len)
}

/// How many mappings the writer keeps to copy to forked children: beyond it (or beyond
/// [`MAX_REMEMBERED_BYTES`]), new mappings are written but not remembered, and counted.
pub const MAX_REMEMBERED_MAPPINGS: usize = 1 << 18;

/// How many bytes of remembered mappings (paths, build-ids and about 100 bytes of fields each)
/// the writer keeps at most: in the preload object this memory is the traced program's.
pub const MAX_REMEMBERED_BYTES: usize = 32 << 20;

/// Slots of the writer's recent-thread cache (a power of two).
const RECENT_THREADS: usize = 256;

/// The recent-thread cache slot of `tid`.
fn recent_thread(tid: u32) -> usize {
    tid as usize & (RECENT_THREADS - 1)
}

/// A registered thread.
#[derive(Debug, Clone, Copy)]
struct ThreadSlot {
    pid: u32,
    index: Option<u8>,
    /// Registered in an earlier epoch: register again before use.
    stale: bool,
}

/// Converts capture events into FXT records (see the module docs). String and thread indices
/// come from `T` ([`LocalRefs`], a table of its own, unless said otherwise).
#[derive(Debug)]
pub struct KernelTraceWriter<S: RecordSink, T: RefTable<S> = LocalRefs> {
    sink: S,
    refs: T,
    /// The epoch of `refs` the registrations below belong to.
    epoch: Option<u64>,
    config: KernelTraceConfig,
    stats: KernelTraceStats,
    threads: IdMap<ThreadSlot>,
    /// Recent entries of `threads` that need no registration (not stale), direct-mapped by
    /// the tid's low bits: both sides of a context switch are nearly always among them, and a
    /// hit is a compare instead of a hash lookup. Rules: written with every insert into
    /// `threads`, cleared with a removal and when a new epoch makes entries stale.
    recent_threads: Box<[Option<(u32, ThreadSlot)>; RECENT_THREADS]>,
    strings: HashMap<String, u16>,
    /// The refs of the argument names scheduling records use, registered at first use in
    /// each epoch (see [`Name`]).
    names_cache: [Option<StringRef<'static>>; Name::COUNT],
    /// The ref of the unknown switch side (thread 0 of [`UNKNOWN_PROCESS_KOID`]), registered
    /// at first use in each epoch.
    unknown_side: Option<ThreadRef>,
    cpu_names: IdMap<Option<u16>>,
    released: IdSet,
    /// The last name written for each thread, with the process it was written under.
    thread_names: IdMap<(Option<u32>, String)>,
    process_names: IdMap<String>,
    /// Threads written with [`UNKNOWN_PROCESS_KOID`].
    unknown_process: IdSet,
    /// The stacks and kernel symbols written, written again in a new epoch.
    stacks: IdMap<StackInfo>,
    kernel_symbols: Vec<KernelSymbol>,
    /// The mappings written for each process, copied to a child it forks.
    mappings: IdMap<Vec<MemoryMap>>,
    /// How many mappings `mappings` holds, and their approximate size in bytes.
    remembered_mappings: usize,
    remembered_bytes: usize,
    last_time: u64,
    overflow_reported: bool,
}

impl<S: RecordSink> KernelTraceWriter<S> {
    /// Starts the provider's section (Provider Info metadata, then the Initialization record),
    /// numbering strings and threads in a table of its own.
    pub fn new(sink: S, config: KernelTraceConfig) -> Result<Self, SinkError> {
        Self::with_refs(sink, LocalRefs::default(), config)
    }
}

impl<S: RecordSink, T: RefTable<S>> KernelTraceWriter<S, T> {
    /// Starts the provider's section: Provider Info metadata, then the Initialization record;
    /// strings and threads are registered through `refs`.
    pub fn with_refs(mut sink: S, refs: T, config: KernelTraceConfig) -> Result<Self, SinkError> {
        let mut stats = KernelTraceStats::default();
        for record in [
            Record::ProviderInfo(ProviderInfo {
                provider_id: config.provider_id,
                name: &config.provider_name,
            }),
            Record::Initialization(Initialization {
                ticks_per_second: config.ticks_per_second,
            }),
        ] {
            stats.words += sink.push(&record)? as u64;
            stats.records += 1;
        }
        Ok(Self {
            sink,
            refs,
            epoch: None,
            last_time: config.start_ticks,
            config,
            stats,
            threads: IdMap::default(),
            recent_threads: Box::new([None; RECENT_THREADS]),
            strings: HashMap::new(),
            names_cache: [None; Name::COUNT],
            unknown_side: None,
            cpu_names: IdMap::default(),
            released: IdSet::default(),
            thread_names: IdMap::default(),
            process_names: IdMap::default(),
            unknown_process: IdSet::default(),
            stacks: IdMap::default(),
            kernel_symbols: Vec::new(),
            mappings: IdMap::default(),
            remembered_mappings: 0,
            remembered_bytes: 0,
            overflow_reported: false,
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> KernelTraceStats {
        self.stats
    }

    /// The sink.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The latest timestamp written.
    pub fn last_time(&self) -> u64 {
        self.last_time
    }

    /// Writes a record of the caller's own into the section (metadata a source adds about
    /// itself, with inline string and thread refs: the writer's tables are not involved),
    /// counted as the writer's records are. Only an I/O error is returned.
    pub fn write_record(&mut self, record: &Record<'_>) -> Result<(), SinkError> {
        self.push(record)
    }

    /// Converts one event. Only an I/O error is returned; refused records are counted.
    pub fn handle(&mut self, event: &CaptureEvent) -> Result<(), SinkError> {
        self.check_epoch()?;
        if let Some(time) = event.time() {
            if time < self.last_time {
                self.stats.late += 1;
            } else {
                self.last_time = time;
            }
        }
        match event {
            CaptureEvent::ContextSwitch(cs) => self.context_switch(cs),
            CaptureEvent::Thread(info) => self.thread(info),
            CaptureEvent::Comm(comm) => self.comm(comm),
            CaptureEvent::Fork(fork) => self.fork(fork),
            CaptureEvent::Exit(exit) => {
                self.exit(exit);
                Ok(())
            }
            CaptureEvent::Mmap(map) => {
                self.remember(map);
                self.mmap(map)
            }
            CaptureEvent::Lost(lost) => self.lost(lost),
            CaptureEvent::Wakeup(w) => self.wakeup(w),
            CaptureEvent::Sample(s) => self.sample(s),
            CaptureEvent::Stack(s) => self.stack(s),
            CaptureEvent::KernelSymbol(k) => self.kernel_symbol(k),
            CaptureEvent::Branch(sample) => self.branch(sample),
            CaptureEvent::Unsupported(u) => self.unsupported(u),
        }
    }

    /// Note what the capture itself could not read (records that failed to parse, bytes
    /// skipped after a corrupt header: [`super::CaptureStats`]): written in the summary
    /// event, and marked as a loss ([`PROVIDER_EVENT_BUFFER_OVERFLOW`]) at [`Self::finish`].
    /// The copies it dropped ([`super::CaptureStats::duplicates`]) are written in an event of
    /// their own after the summary.
    pub fn note_capture_damage(&mut self, capture: &super::CaptureStats) {
        self.stats.unparsed_records = capture.parse_errors;
        self.stats.corrupt_bytes = capture.corrupt_bytes;
        self.stats.duplicates = capture.duplicates;
    }

    /// Ends the section: a summary event with the totals (and the buffer-overflow metadata if
    /// anything was lost and not yet reported); returns the sink and the final counters.
    pub fn finish(mut self) -> Result<(S, KernelTraceStats), SinkError> {
        self.check_epoch()?;
        if self.stats.unparsed_records > 0 || self.stats.corrupt_bytes > 0 {
            self.report_overflow()?;
        }
        let s = self.stats;
        let recorder = self.recorder_ref()?;
        let category = self.string(FXTRACE_CATEGORY)?;
        // At most MAX_ARGS (15).
        let args = [
            Arg::new("context_switches", ArgValue::U64(s.context_switches)),
            Arg::new("wakeups", ArgValue::U64(s.wakeups)),
            Arg::new("wait_points", ArgValue::U64(s.wait_points)),
            Arg::new("samples", ArgValue::U64(s.samples)),
            Arg::new("threads", ArgValue::U64(s.threads)),
            Arg::new("unindexed_threads", ArgValue::U64(s.unindexed_threads)),
            Arg::new(
                "unknown_process_threads",
                ArgValue::U64(s.unknown_process_threads),
            ),
            Arg::new("branch_blobs", ArgValue::U64(s.branch_blobs)),
            Arg::new("mmap_blobs", ArgValue::U64(s.mmap_blobs)),
            Arg::new("lost_records", ArgValue::U64(s.lost_records)),
            Arg::new("lost_samples", ArgValue::U64(s.lost_samples)),
            Arg::new("late", ArgValue::U64(s.late)),
            Arg::new("dropped_records", ArgValue::U64(s.dropped_records)),
            Arg::new("unparsed_records", ArgValue::U64(s.unparsed_records)),
            Arg::new("corrupt_bytes", ArgValue::U64(s.corrupt_bytes)),
        ];
        self.push(&Record::Event(Event {
            ticks: self.last_time,
            thread: recorder,
            category,
            name: StringRef::Inline("fxtrace: kernel capture summary"),
            args: &args,
            kind: EventKind::Instant,
        }))?;
        if s.duplicates > 0 {
            // The summary holds MAX_ARGS already.
            self.push(&Record::Event(Event {
                ticks: self.last_time,
                thread: recorder,
                category,
                name: StringRef::Inline("fxtrace: duplicate records dropped"),
                args: &[Arg::new("records", ArgValue::U64(s.duplicates))],
                kind: EventKind::Instant,
            }))?;
        }
        if self.stats.lost_anything() {
            self.report_overflow()?;
        }
        Ok((self.sink, self.stats))
    }

    // --- records ---

    /// Pushes a record; counts refusals, returns only I/O errors.
    fn push(&mut self, record: &Record<'_>) -> Result<(), SinkError> {
        self.try_push(record).map(|_| ())
    }

    /// As [`Self::push`], saying whether the record went in (registrations need to know: an
    /// index whose record was refused must not be referred to).
    fn try_push(&mut self, record: &Record<'_>) -> Result<bool, SinkError> {
        let pushed = self.sink.push(record);
        self.count_push(pushed)
    }

    /// Counts what a push did; returns only I/O errors.
    #[inline]
    fn count_push(&mut self, pushed: Result<usize, SinkError>) -> Result<bool, SinkError> {
        match pushed {
            Ok(words) => {
                self.stats.records += 1;
                self.stats.words += words as u64;
                Ok(true)
            }
            Err(SinkError::Encode(_)) | Err(SinkError::Full) => {
                self.stats.dropped_records += 1;
                Ok(false)
            }
            Err(e @ SinkError::Io(_)) => Err(e),
        }
    }

    fn report_overflow(&mut self) -> Result<(), SinkError> {
        if self.overflow_reported {
            return Ok(());
        }
        self.overflow_reported = true;
        self.push(&Record::ProviderEvent(ProviderEvent {
            provider_id: self.config.provider_id,
            event: PROVIDER_EVENT_BUFFER_OVERFLOW,
        }))
    }

    /// The ref of an indexed string, registering it on first use (inline once the table is
    /// full).
    fn string<'s>(&mut self, value: &'s str) -> Result<StringRef<'s>, SinkError> {
        if let Some(&index) = self.strings.get(value) {
            return Ok(StringRef::Index(index));
        }
        match self.refs.register_string(&mut self.sink, value)? {
            Registration::Index { index, words } => {
                self.count_registration(words);
                self.strings.insert(value.to_owned(), index);
                Ok(StringRef::Index(index))
            }
            Registration::TableFull => {
                self.stats.unindexed_strings += 1;
                Ok(StringRef::Inline(value))
            }
            // Not registered: refer to it inline this time, try again next time.
            Registration::Refused => {
                self.stats.dropped_records += 1;
                Ok(StringRef::Inline(value))
            }
            Registration::Discarded => Ok(StringRef::Inline(value)),
        }
    }

    fn count_registration(&mut self, words: usize) {
        self.stats.records += 1;
        self.stats.words += words as u64;
    }

    /// Registers thread (`pid`, `tid`) through the table: its index, or `None` (inline;
    /// counted unless nothing can be written now), and whether to try again at the next use
    /// (nothing could be written).
    fn register_thread(&mut self, pid: u32, tid: u32) -> Result<(Option<u8>, bool), SinkError> {
        self.stats.thread_records += 1;
        let registration =
            self.refs
                .register_thread(&mut self.sink, u64::from(pid), u64::from(tid))?;
        Ok(match registration {
            Registration::Index { index, words } => {
                self.count_registration(words);
                (Some(index), false)
            }
            Registration::TableFull => {
                self.stats.unindexed_threads += 1;
                (None, false)
            }
            Registration::Refused => {
                self.stats.dropped_records += 1;
                self.stats.unindexed_threads += 1;
                (None, false)
            }
            Registration::Discarded => (None, true),
        })
    }

    /// Before each event: when the table's epoch changed, everything registered before is
    /// void; register again on use, and write every known name again now.
    fn check_epoch(&mut self) -> Result<(), SinkError> {
        let Some(epoch) = self.refs.epoch(&mut self.sink) else {
            return Ok(());
        };
        if self.epoch == Some(epoch) {
            return Ok(());
        }
        if self.epoch.replace(epoch).is_some() {
            self.stats.epochs += 1;
        }
        self.strings.clear();
        self.names_cache = [None; Name::COUNT];
        self.unknown_side = None;
        self.cpu_names.clear();
        self.recent_threads.fill(None);
        for slot in self.threads.values_mut() {
            slot.stale = true;
            slot.index = None;
        }
        let processes: Vec<(u32, String)> = self.process_names.drain().collect();
        let threads: Vec<(u32, (Option<u32>, String))> = self.thread_names.drain().collect();
        for (pid, name) in processes {
            self.name_process(pid, &name)?;
            self.stats.names_replayed += 1;
        }
        for (tid, (pid, name)) in threads {
            self.name_thread(tid, pid, &name)?;
            self.stats.names_replayed += 1;
        }
        // Stacks are referred to by id: define them again in the new epoch, symbols first.
        for k in std::mem::take(&mut self.kernel_symbols) {
            self.kernel_symbol(&k)?;
        }
        let mut stacks: Vec<StackInfo> = std::mem::take(&mut self.stacks).into_values().collect();
        stacks.sort_by_key(|s| s.id);
        for s in stacks {
            self.stack(&s)?;
        }
        Ok(())
    }

    /// The ref of thread `tid`, registering it (or re-registering it under a new pid, or in a
    /// new epoch).
    #[inline]
    fn thread_ref(&mut self, tid: u32, pid: Option<u32>) -> Result<ThreadRef, SinkError> {
        if let Some((t, slot)) = self.recent_threads[recent_thread(tid)] {
            if t == tid && pid.map_or(true, |p| p == slot.pid) {
                // The common case: known thread, same process, nothing to register.
                return Ok(slot_ref(tid, slot));
            }
        }
        self.thread_ref_slow(tid, pid)
    }

    /// [`Self::thread_ref`] past its cache.
    #[inline(never)]
    fn thread_ref_slow(&mut self, tid: u32, pid: Option<u32>) -> Result<ThreadRef, SinkError> {
        let slot = self.thread_slot(tid, pid)?;
        self.recent_threads[recent_thread(tid)] = (!slot.stale).then_some((tid, slot));
        Ok(slot_ref(tid, slot))
    }

    /// The entry of thread `tid` in `threads`, registering it (or re-registering it under a
    /// new pid, or in a new epoch) first when needed.
    fn thread_slot(&mut self, tid: u32, pid: Option<u32>) -> Result<ThreadSlot, SinkError> {
        if let Some(slot) = self.threads.get_mut(&tid) {
            let pid_changed = pid.is_some_and(|p| p != slot.pid);
            if !pid_changed && !slot.stale {
                return Ok(*slot);
            }
            let mut slot = *slot;
            if pid_changed {
                // The thread's name record carries its process: name it again.
                self.thread_names.remove(&tid);
                slot.pid = pid.unwrap_or(slot.pid);
            }
            if let Some(index) = slot.index.take() {
                // The index still means the old (pid, tid) to a reader: a new registration.
                self.refs.release_thread(index);
            }
            (slot.index, slot.stale) = self.register_thread(slot.pid, tid)?;
            self.threads.insert(tid, slot);
            return Ok(slot);
        }
        let pid = match pid {
            Some(pid) => pid,
            None => self.unknown_process(tid)?,
        };
        self.stats.threads += 1;
        let (index, stale) = self.register_thread(pid, tid)?;
        let slot = ThreadSlot { pid, index, stale };
        self.threads.insert(tid, slot);
        Ok(slot)
    }

    /// The process koid of `tid` whose process is unknown: 0 for the idle task, else the
    /// marker (named once, counted once per thread).
    fn unknown_process(&mut self, tid: u32) -> Result<u32, SinkError> {
        if tid == 0 {
            return Ok(0);
        }
        if self.unknown_process.insert(tid) {
            self.stats.unknown_process_threads += 1;
        }
        self.name_process(UNKNOWN_PROCESS_KOID, UNKNOWN_PROCESS_NAME)?;
        Ok(UNKNOWN_PROCESS_KOID)
    }

    /// Gives `tid`'s index back to the table (the thread will not run again).
    fn release_thread(&mut self, tid: u32) {
        let recent = &mut self.recent_threads[recent_thread(tid)];
        if recent.is_some_and(|(t, _)| t == tid) {
            *recent = None;
        }
        if let Some(slot) = self.threads.remove(&tid) {
            if let Some(index) = slot.index {
                self.refs.release_thread(index);
            }
        }
        self.thread_names.remove(&tid);
        self.released.insert(tid);
    }

    fn recorder_ref(&mut self) -> Result<ThreadRef, SinkError> {
        let (pid, tid) = self.config.recorder;
        self.thread_ref(tid, Some(pid))
    }

    /// A Kernel Object record naming thread `tid` (with its process koid when known), unless
    /// that name was the last one written for it.
    fn name_thread(&mut self, tid: u32, pid: Option<u32>, name: &str) -> Result<(), SinkError> {
        if self.thread_names.get(&tid).is_some_and(|(_, n)| n == name) {
            return Ok(());
        }
        let process = self.string("process")?;
        let args = pid.map(|p| Arg {
            name: process,
            value: ArgValue::Koid(u64::from(p)),
        });
        self.stats.kernel_objects += 1;
        self.push(&Record::KernelObject(KernelObject {
            koid: u64::from(tid),
            object_type: ObjectType::THREAD,
            name: StringRef::Inline(name),
            args: args.as_slice(),
        }))?;
        self.thread_names.insert(tid, (pid, name.to_owned()));
        Ok(())
    }

    /// A Kernel Object record naming process `pid`, unless that name was the last one written.
    fn name_process(&mut self, pid: u32, name: &str) -> Result<(), SinkError> {
        if self.process_names.get(&pid).is_some_and(|n| n == name) {
            return Ok(());
        }
        self.stats.kernel_objects += 1;
        self.push(&Record::KernelObject(KernelObject {
            koid: u64::from(pid),
            object_type: ObjectType::PROCESS,
            name: StringRef::Inline(name),
            args: &[],
        }))?;
        self.process_names.insert(pid, name.to_owned());
        Ok(())
    }

    // --- events ---

    fn thread(&mut self, info: &ThreadInfo) -> Result<(), SinkError> {
        self.thread_ref(info.tid, info.pid)?;
        if let (Some(pid), Some(name)) = (info.pid, &info.process_name) {
            self.name_process(pid, name)?;
        }
        // Perfetto takes a thread's process only from its Kernel Object record: every thread
        // gets one, named `:<tid>` (perf's habit) when its name is unknown.
        let unnamed;
        let name = match &info.name {
            Some(name) => Some(name.as_str()),
            None if info.tid != 0 => {
                unnamed = format!(":{}", info.tid);
                Some(unnamed.as_str())
            }
            None => None,
        };
        if let Some(name) = name {
            // The process a viewer groups the thread under: the registered one (the marker for
            // an unknown process).
            let pid = self.threads.get(&info.tid).map(|s| s.pid).or(info.pid);
            self.name_thread(info.tid, pid, name)?;
        }
        Ok(())
    }

    fn fork(&mut self, fork: &TaskFork) -> Result<(), SinkError> {
        if fork.pid != fork.ppid {
            self.inherit_mappings(fork)?;
        }
        if self
            .threads
            .get(&fork.tid)
            .is_some_and(|s| s.pid != fork.pid)
        {
            // A tid still registered for another process: register it anew.
            self.thread_ref(fork.tid, Some(fork.pid))?;
        }
        // A tid whose earlier thread died: the capture layer announces a tid once per session,
        // so name the new thread here, with the name it inherits from its parent.
        if self.released.remove(&fork.tid) {
            if let Some((_, name)) = self.thread_names.get(&fork.ptid).cloned() {
                self.name_thread(fork.tid, Some(fork.pid), &name)?;
            }
        }
        Ok(())
    }

    fn comm(&mut self, comm: &TaskComm) -> Result<(), SinkError> {
        if comm.exec {
            // The old image is gone; the kernel reports the new one's mappings after this.
            self.forget_mappings(comm.pid);
        }
        if self.threads.contains_key(&comm.tid) {
            self.thread_ref(comm.tid, Some(comm.pid))?;
        }
        // The main thread's name is the process's name (`ps`, `/proc/PID/comm`).
        if comm.tid == comm.pid {
            self.name_process(comm.pid, &comm.name)?;
        }
        self.name_thread(comm.tid, Some(comm.pid), &comm.name)
    }

    fn context_switch(&mut self, cs: &SwitchEvent) -> Result<(), SinkError> {
        // A side the source does not know is neither the idle task nor a thread 0.
        let outgoing = match cs.sides {
            SwitchSides::IncomingOnly => self.unknown_side()?,
            _ => self.thread_ref(cs.prev_tid, cs.prev_pid)?,
        };
        let incoming = match cs.sides {
            SwitchSides::OutgoingOnly => self.unknown_side()?,
            _ => self.thread_ref(cs.next_tid, cs.next_pid)?,
        };
        let outgoing_state = fxt_state(cs.prev_state);
        let outgoing_priority = perfetto_priority(cs.prev_tid, cs.prev_prio);
        let incoming_priority = perfetto_priority(cs.next_tid, cs.next_prio);
        self.stats.context_switches += 1;
        match u8::try_from(cs.cpu) {
            Ok(cpu) if !cs.uninterruptible && cs.stack.is_none() => {
                let pushed = self.sink.push_context_switch(&ContextSwitch {
                    ticks: cs.time,
                    cpu,
                    outgoing_state,
                    outgoing,
                    incoming,
                    outgoing_priority,
                    incoming_priority,
                });
                self.count_push(pushed)?;
            }
            _ => self.switch_by_tid(cs, incoming_priority)?,
        }
        if cs.sides != SwitchSides::IncomingOnly
            && cs.prev_tid != 0
            && matches!(
                cs.prev_state,
                LinuxThreadState::Dying | LinuxThreadState::Dead
            )
        {
            self.release_thread(cs.prev_tid);
        }
        Ok(())
    }

    /// A context switch the legacy layout cannot hold (see [`crate::format::sched`]): by tid,
    /// with the weights Perfetto reads and fxtrace's arguments.
    fn switch_by_tid(&mut self, cs: &SwitchEvent, incoming_priority: u8) -> Result<(), SinkError> {
        self.stats.switches_by_tid += 1;
        if cs.cpu > u32::from(u8::MAX) {
            self.stats.wide_cpu_switches += 1;
        }
        // A side the source does not know is written as the idle task (tid 0, idle weight).
        let side = |known: bool, tid: u32| if known { tid } else { 0 };
        let outgoing_tid = side(cs.sides != SwitchSides::IncomingOnly, cs.prev_tid);
        let incoming_tid = side(cs.sides != SwitchSides::OutgoingOnly, cs.next_tid);
        let mut args = [Arg::new(StringRef::Empty, ArgValue::Null); 4];
        let mut n = 0;
        // Perfetto reads only the i32 weights on this layout: the incoming thread's is its
        // priority column, and INT32_MIN marks the idle task on either side.
        args[n] = Arg {
            name: self.cached_name(Name::IncomingWeight)?,
            value: ArgValue::I32(perfetto_weight(incoming_tid, incoming_priority)),
        };
        n += 1;
        if outgoing_tid == 0 {
            args[n] = Arg {
                name: self.cached_name(Name::OutgoingWeight)?,
                value: ArgValue::I32(IDLE_WEIGHT),
            };
            n += 1;
        }
        if cs.uninterruptible {
            self.stats.uninterruptible_switches += 1;
            args[n] = Arg {
                name: self.cached_name(Name::LinuxState)?,
                value: ArgValue::Str(self.cached_name(Name::Uninterruptible)?),
            };
            n += 1;
        }
        if let Some(id) = cs.stack {
            self.stats.wait_points += 1;
            args[n] = Arg {
                name: self.cached_name(Name::Stack)?,
                value: ArgValue::U32(id),
            };
            n += 1;
        }
        self.push(&Record::SchedContextSwitch(SchedContextSwitch {
            ticks: cs.time,
            cpu: u16::try_from(cs.cpu).unwrap_or(u16::MAX),
            outgoing_state: fxt_state(cs.prev_state),
            outgoing_tid: u64::from(outgoing_tid),
            incoming_tid: u64::from(incoming_tid),
            args: &args[..n],
        }))
    }

    /// A Thread Wakeup record: the woken thread on the CPU it was queued on, and its waker
    /// (see [`crate::format::sched`]). Both threads were announced (named under their
    /// processes) before.
    fn wakeup(&mut self, w: &WakeupEvent) -> Result<(), SinkError> {
        self.stats.wakeups += 1;
        let args = [Arg {
            name: self.cached_name(Name::Waker)?,
            value: ArgValue::Koid(u64::from(w.waker_tid)),
        }];
        let pushed = self.sink.push_wakeup(&SchedThreadWakeup {
            ticks: w.time,
            cpu: u16::try_from(w.target_cpu).unwrap_or(u16::MAX),
            waking_tid: u64::from(w.tid),
            args: &args,
        });
        self.count_push(pushed).map(|_| ())
    }

    /// An `"fxtrace:sample"` blob.
    fn sample(&mut self, s: &CpuSample) -> Result<(), SinkError> {
        let payload = SampleRecord {
            time: s.time,
            cpu: u16::try_from(s.cpu).unwrap_or(u16::MAX),
            pid: s.pid.unwrap_or(UNKNOWN_PROCESS_KOID),
            tid: s.tid,
            stack: s.stack.unwrap_or(0),
        }
        .encode();
        let name = self.cached_name(Name::SampleBlob)?;
        self.stats.samples += 1;
        self.push(&Record::Blob(Blob {
            name,
            blob_type: BlobType::DATA,
            payload: &payload,
        }))
    }

    /// An `"fxtrace:stack"` blob defining stack `s.id`, kept to be written again in a new
    /// epoch.
    fn stack(&mut self, s: &StackInfo) -> Result<(), SinkError> {
        let kernel = usize::from(s.kernel_frames).min(s.frames.len());
        let payload = match StackRecord::encode(s.id, &s.frames[..kernel], &s.frames[kernel..]) {
            Ok(p) => p,
            Err(_) => {
                // The capture keeps at most the format's frames and ids from 1: counted.
                self.stats.dropped_records += 1;
                return Ok(());
            }
        };
        let name = self.cached_name(Name::StackBlob)?;
        self.stats.stack_blobs += 1;
        self.stacks.insert(s.id, s.clone());
        self.push(&Record::Blob(Blob {
            name,
            blob_type: BlobType::DATA,
            payload: &payload,
        }))
    }

    /// An `"fxtrace:ksym"` blob, kept to be written again in a new epoch.
    fn kernel_symbol(&mut self, k: &KernelSymbol) -> Result<(), SinkError> {
        let payload = KernelSymbolRecord {
            start: k.start,
            len: k.len,
            name: truncate_str(&k.name, KSYM_MAX_NAME).as_bytes(),
        }
        .encode();
        let Ok(payload) = payload else {
            self.stats.dropped_records += 1;
            return Ok(());
        };
        let name = self.cached_name(Name::KsymBlob)?;
        self.stats.kernel_symbols += 1;
        self.kernel_symbols.push(k.clone());
        self.push(&Record::Blob(Blob {
            name,
            blob_type: BlobType::DATA,
            payload: &payload,
        }))
    }

    /// The ref of a string scheduling records use, registered once per epoch.
    #[inline]
    fn cached_name(&mut self, name: Name) -> Result<StringRef<'static>, SinkError> {
        if let Some(r) = self.names_cache[name as usize] {
            return Ok(r);
        }
        let r = self.string(name.text())?;
        // Only an index is kept: an inline ref (a full table) is tried again next time.
        if let StringRef::Index(_) = r {
            self.names_cache[name as usize] = Some(r);
        }
        Ok(r)
    }

    /// The ref of the unknown switch side: thread 0 of [`UNKNOWN_PROCESS_KOID`], registered
    /// once per epoch (inline when the table is full).
    fn unknown_side(&mut self) -> Result<ThreadRef, SinkError> {
        if let Some(r) = self.unknown_side {
            return Ok(r);
        }
        let (index, retry) = self.register_thread(UNKNOWN_PROCESS_KOID, 0)?;
        let r = match index {
            Some(index) => ThreadRef::Index(index),
            None => ThreadRef::Inline {
                pid: u64::from(UNKNOWN_PROCESS_KOID),
                tid: 0,
            },
        };
        if !retry {
            self.unknown_side = Some(r);
        }
        Ok(r)
    }

    fn branch(&mut self, sample: &BranchSample) -> Result<(), SinkError> {
        let kept = sample.entries.len().min(LBR_MAX_BRANCHES);
        self.stats.lbr_entries_truncated += (sample.entries.len() - kept) as u64;
        let mut branches = [LbrBranch::new(0, 0, 0, false); LBR_MAX_BRANCHES];
        for (out, e) in branches.iter_mut().zip(&sample.entries[..kept]) {
            *out = LbrBranch::new(e.from, e.to, u64::from(e.cycles), e.mispred);
        }
        // The kernel's CPU numbers fit 16 bits on every machine Linux runs on; saturate anyway.
        let cpu = u16::try_from(sample.cpu).unwrap_or(u16::MAX);
        // The address space is the process: its pid (0 when the kernel could not say, -1).
        let aspace = match sample.pid {
            u32::MAX => 0,
            pid => u64::from(pid),
        };
        let payload = match LbrPayload::new(cpu, sample.time, aspace, &branches[..kept]) {
            Ok(p) => p,
            Err(_) => {
                // Unreachable with at most 32 entries; counted rather than trusted.
                self.stats.dropped_records += 1;
                return Ok(());
            }
        };
        let inline_name;
        let name = match self.cpu_name(sample.cpu)? {
            Some(index) => StringRef::Index(index),
            None => {
                inline_name = format!("cpu{}", sample.cpu);
                StringRef::Inline(&inline_name)
            }
        };
        self.stats.branch_blobs += 1;
        self.push(&Record::Blob(Blob {
            name,
            blob_type: BlobType::LAST_BRANCH,
            payload: payload.as_bytes(),
        }))
    }

    /// Keeps `map` for a child its process may fork (bounded, see
    /// [`MAX_REMEMBERED_MAPPINGS`]).
    fn remember(&mut self, map: &MemoryMap) {
        let bytes = remembered_size(map);
        if self.remembered_mappings >= MAX_REMEMBERED_MAPPINGS
            || self.remembered_bytes + bytes > MAX_REMEMBERED_BYTES
        {
            self.stats.mmaps_not_remembered += 1;
            return;
        }
        self.remembered_mappings += 1;
        self.remembered_bytes += bytes;
        self.mappings.entry(map.pid).or_default().push(map.clone());
    }

    fn forget_mappings(&mut self, pid: u32) {
        if let Some(maps) = self.mappings.remove(&pid) {
            self.remembered_mappings -= maps.len();
            self.remembered_bytes -= maps.iter().map(remembered_size).sum::<usize>();
        }
    }

    /// A process ends with its main thread's exit: its mappings are no longer needed.
    fn exit(&mut self, exit: &TaskExit) {
        if exit.pid == exit.tid {
            self.forget_mappings(exit.pid);
        }
    }

    /// A new process starts with its parent's address space, which the kernel does not report
    /// again (as `perf report` does, the parent's mappings are copied to the child): write
    /// them for the child, stamped with the fork's time.
    fn inherit_mappings(&mut self, fork: &TaskFork) -> Result<(), SinkError> {
        self.forget_mappings(fork.pid);
        let Some(parent) = self.mappings.get(&fork.ppid) else {
            return Ok(());
        };
        let children: Vec<MemoryMap> = parent
            .iter()
            .map(|m| MemoryMap {
                time: fork.time,
                pid: fork.pid,
                tid: fork.tid,
                synthesized: false,
                ..m.clone()
            })
            .collect();
        for map in &children {
            self.remember(map);
            self.mmap(map)?;
            self.stats.mmaps_inherited += 1;
        }
        Ok(())
    }

    fn mmap(&mut self, map: &MemoryMap) -> Result<(), SinkError> {
        let path = &map.path[..map.path.len().min(MMAP_MAX_PATH)];
        let build_id = map
            .build_id
            .as_deref()
            .map(|id| &id[..id.len().min(MMAP_MAX_BUILD_ID)]);
        if path.len() < map.path.len()
            || build_id.map(<[u8]>::len) < map.build_id.as_ref().map(Vec::len)
        {
            self.stats.mmaps_truncated += 1;
        }
        let record = MmapRecord {
            pid: map.pid,
            time: map.time,
            start: map.start,
            len: map.len,
            pgoff: map.pgoff,
            build_id,
            path,
        };
        let payload = match record.encode() {
            Ok(p) => p,
            Err(_) => {
                // Unreachable: both lengths were cut to their limits above.
                self.stats.dropped_records += 1;
                return Ok(());
            }
        };
        let name = self.string(MMAP_BLOB_NAME)?;
        self.stats.mmap_blobs += 1;
        self.push(&Record::Blob(Blob {
            name,
            blob_type: BlobType::DATA,
            payload: &payload,
        }))
    }

    /// The index of the blob name `"cpu<N>"`, registered once per CPU (`None`: the string
    /// table is full and the name goes inline).
    fn cpu_name(&mut self, cpu: u32) -> Result<Option<u16>, SinkError> {
        if let Some(&index) = self.cpu_names.get(&cpu) {
            return Ok(index);
        }
        let index = match self.string(&format!("cpu{cpu}"))? {
            StringRef::Index(i) => Some(i),
            _ => None,
        };
        self.cpu_names.insert(cpu, index);
        Ok(index)
    }

    fn lost(&mut self, lost: &Lost) -> Result<(), SinkError> {
        let what = match lost.kind {
            LostKind::Records => {
                self.stats.lost_records = self.stats.lost_records.saturating_add(lost.count);
                "records"
            }
            LostKind::Samples => {
                self.stats.lost_samples = self.stats.lost_samples.saturating_add(lost.count);
                "samples"
            }
        };
        self.stats.lost_reports += 1;
        self.report_overflow()?;
        let recorder = self.recorder_ref()?;
        let category = self.string(FXTRACE_CATEGORY)?;
        let count = self.string("count")?;
        let cpu = self.string("cpu")?;
        let name = format!("fxtrace: {} perf {what} lost", lost.count);
        let args = [
            Arg {
                name: count,
                value: ArgValue::U64(lost.count),
            },
            Arg {
                name: cpu,
                value: ArgValue::U32(lost.cpu),
            },
        ];
        self.push(&Record::Event(Event {
            ticks: lost.time,
            thread: recorder,
            category,
            name: StringRef::Inline(&name),
            args: &args,
            kind: EventKind::Instant,
        }))
    }

    /// One record per source that could not be used: an instant event named after it, with the
    /// cause and remedy in one line (`reason`), the whole text once (`detail`, when longer) and
    /// the errno. (A log record repeated the whole text beside it.)
    fn unsupported(&mut self, u: &Unsupported) -> Result<(), SinkError> {
        self.stats.unsupported += 1;
        let recorder = self.recorder_ref()?;
        let ticks = self.last_time;
        let category = self.string(FXTRACE_CATEGORY)?;
        let name = format!("fxtrace: {} unavailable", u.what);
        let mut args = vec![Arg::new(
            "reason",
            ArgValue::Str(StringRef::Inline(truncate_str(&u.summary, 1000))),
        )];
        if u.hint != u.summary {
            args.push(Arg::new(
                "detail",
                ArgValue::Str(StringRef::Inline(truncate_str(&u.hint, 4000))),
            ));
        }
        if let Some(e) = u.errno {
            args.push(Arg::new("errno", ArgValue::I32(e)));
        }
        self.push(&Record::Event(Event {
            ticks,
            thread: recorder,
            category,
            name: StringRef::Inline(truncate_str(&name, 1000)),
            args: &args,
            kind: EventKind::Instant,
        }))
    }
}

fn slot_ref(tid: u32, slot: ThreadSlot) -> ThreadRef {
    match slot.index {
        Some(index) => ThreadRef::Index(index),
        None => ThreadRef::Inline {
            pid: u64::from(slot.pid),
            tid: u64::from(tid),
        },
    }
}

/// The strings of scheduling records ([`crate::format::sched`]) and of the stack blobs
/// ([`crate::format::stack`]), registered once per epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    IncomingWeight,
    OutgoingWeight,
    LinuxState,
    Uninterruptible,
    Stack,
    Waker,
    StackBlob,
    SampleBlob,
    KsymBlob,
}

impl Name {
    const COUNT: usize = 9;

    fn text(self) -> &'static str {
        match self {
            Name::IncomingWeight => sched::INCOMING_WEIGHT_ARG,
            Name::OutgoingWeight => sched::OUTGOING_WEIGHT_ARG,
            Name::LinuxState => sched::LINUX_STATE_ARG,
            Name::Uninterruptible => sched::UNINTERRUPTIBLE,
            Name::Stack => sched::STACK_ARG,
            Name::Waker => sched::WAKER_ARG,
            Name::StackBlob => STACK_BLOB_NAME,
            Name::SampleBlob => SAMPLE_BLOB_NAME,
            Name::KsymBlob => KSYM_BLOB_NAME,
        }
    }
}

/// The FXT state of a capture state (same `ZX_THREAD_STATE_*` numbering).
pub fn fxt_state(state: LinuxThreadState) -> ThreadState {
    match state {
        LinuxThreadState::New => ThreadState::New,
        LinuxThreadState::Running => ThreadState::Running,
        LinuxThreadState::Suspended => ThreadState::Suspended,
        LinuxThreadState::Blocked => ThreadState::Blocked,
        LinuxThreadState::Dying => ThreadState::Dying,
        LinuxThreadState::Dead => ThreadState::Dead,
    }
}

/// The priority written for one side of a legacy context switch. Perfetto's importer takes a
/// side as the idle task when its pid is 0 and its priority is 0 (see docs/perfetto.md), so
/// the idle task (tid 0) is written with priority 0 and a real thread whose kernel priority is
/// 0 (SCHED_FIFO/RR 99, deadline) is written as 1 so that it is never mistaken for idle.
fn perfetto_priority(tid: u32, kernel_prio: u8) -> u8 {
    if tid == 0 {
        0
    } else {
        kernel_prio.max(1)
    }
}

/// The weight argument of a scheduling (type 1) context switch: Perfetto reads
/// `incoming_weight`/`outgoing_weight` as i32, with `INT32_MIN` meaning the idle task.
fn perfetto_weight(tid: u32, priority: u8) -> i32 {
    if tid == 0 {
        IDLE_WEIGHT
    } else {
        i32::from(priority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{words_to_bytes, DecodedRecord, Decoder};

    #[test]
    fn idle_is_priority_zero_and_only_idle_is() {
        assert_eq!(perfetto_priority(0, 120), 0);
        assert_eq!(perfetto_priority(0, 255), 0);
        assert_eq!(perfetto_priority(42, 0), 1);
        assert_eq!(perfetto_priority(42, 120), 120);
        assert_eq!(perfetto_weight(0, 0), i32::MIN);
        assert_eq!(perfetto_weight(42, 120), 120);
    }

    fn config() -> KernelTraceConfig {
        KernelTraceConfig {
            provider_id: 1,
            provider_name: "kernel".into(),
            ticks_per_second: 1_000_000_000,
            start_ticks: 100,
            recorder: (7, 7),
        }
    }

    fn switch(time: u64, prev: u32, next: u32, state: LinuxThreadState) -> CaptureEvent {
        CaptureEvent::ContextSwitch(SwitchEvent {
            time,
            cpu: 0,
            prev_tid: prev,
            prev_pid: Some(prev),
            next_tid: next,
            next_pid: Some(next),
            prev_state: state,
            uninterruptible: false,
            stack: None,
            prev_prio: 120,
            next_prio: 120,
            sides: SwitchSides::Both,
        })
    }

    /// The five-word wakeup is word for word what the general encoder writes; other argument
    /// lists take the general path.
    #[test]
    fn wakeup_words_are_the_encoders() {
        for (cpu, tid, name, koid) in [
            (0u16, 1u64, 1u16, 0u64),
            (u16::MAX, u64::MAX, 0x7fff, u64::MAX),
            (3, 42, 17, 43),
        ] {
            let args = [Arg {
                name: StringRef::Index(name),
                value: ArgValue::Koid(koid),
            }];
            let w = SchedThreadWakeup {
                ticks: 0x0123_4567_89ab_cdef,
                cpu,
                waking_tid: tid,
                args: &args,
            };
            let mut general = RecordWriter::new();
            general.push(&Record::SchedThreadWakeup(w)).unwrap();
            let words = WakeupWords::of(&w).unwrap();
            let mut direct = [0u64; 5];
            assert_eq!(words.write(&mut direct), Ok(5));
            assert_eq!(&direct[..], general.words());
            let mut body = [0u64; 4];
            assert_eq!(words.write_body(&mut body), Ok((direct[0], 5)));
            assert_eq!(&body[..], &direct[1..]);
            let mut sink = FxtStreamSink::new(Vec::new());
            assert_eq!(sink.push_wakeup(&w).unwrap(), 5);
            assert_eq!(sink.finish().unwrap(), words_to_bytes(general.words()));
        }
        let inline = [Arg::new("waker", ArgValue::Koid(1))];
        let none: [Arg<'_>; 0] = [];
        let u64_arg = [Arg::new(StringRef::Index(1), ArgValue::U64(1))];
        for args in [&inline[..], &none, &u64_arg] {
            let w = SchedThreadWakeup {
                ticks: 1,
                cpu: 0,
                waking_tid: 2,
                args,
            };
            assert!(WakeupWords::of(&w).is_none());
            let mut general = RecordWriter::new();
            general.push(&Record::SchedThreadWakeup(w)).unwrap();
            let mut sink = FxtStreamSink::new(Vec::new());
            sink.push_wakeup(&w).unwrap();
            assert_eq!(sink.finish().unwrap(), words_to_bytes(general.words()));
        }
    }

    /// The two-word context switch is word for word what the general encoder writes, for
    /// every field's extremes; inline refs and index 0 take the general path.
    #[test]
    fn indexed_switch_words_are_the_encoders() {
        let states = [
            ThreadState::New,
            ThreadState::Running,
            ThreadState::Suspended,
            ThreadState::Blocked,
            ThreadState::Dying,
            ThreadState::Dead,
        ];
        for cpu in [0u8, 1, 37, 255] {
            for state in states {
                for (out, inc) in [(1u8, 2u8), (255, 1), (17, 17), (128, 254)] {
                    for (op, ip) in [(0u8, 0u8), (1, 255), (120, 139), (255, 254)] {
                        let cs = ContextSwitch {
                            ticks: 0xfedc_ba98_7654_3210 ^ u64::from(cpu),
                            cpu,
                            outgoing_state: state,
                            outgoing: ThreadRef::Index(out),
                            incoming: ThreadRef::Index(inc),
                            outgoing_priority: op,
                            incoming_priority: ip,
                        };
                        let mut general = RecordWriter::new();
                        general.push(&Record::ContextSwitch(cs)).unwrap();
                        let words = IndexedSwitch::of(&cs).unwrap();
                        let mut direct = [0u64; 2];
                        assert_eq!(words.write(&mut direct), Ok(2));
                        assert_eq!(&direct[..], general.words(), "{cs:?}");
                        let mut body = [0u64; 1];
                        assert_eq!(words.write_body(&mut body), Ok((direct[0], 2)));
                        assert_eq!(body[0], direct[1]);
                        assert!(words.write(&mut [0u64; 1]).is_err());
                        // Through the stream sink: the same bytes.
                        let mut sink = FxtStreamSink::new(Vec::new());
                        assert_eq!(sink.push_context_switch(&cs).unwrap(), 2);
                        assert_eq!(sink.finish().unwrap(), words_to_bytes(general.words()));
                    }
                }
            }
        }
        let inline = ContextSwitch {
            ticks: 5,
            cpu: 0,
            outgoing_state: ThreadState::Blocked,
            outgoing: ThreadRef::Inline { pid: 1, tid: 2 },
            incoming: ThreadRef::Index(3),
            outgoing_priority: 1,
            incoming_priority: 2,
        };
        assert!(IndexedSwitch::of(&inline).is_none());
        let zero = ContextSwitch {
            outgoing: ThreadRef::Index(0),
            ..inline
        };
        assert!(IndexedSwitch::of(&zero).is_none());
        let mut sink = FxtStreamSink::new(Vec::new());
        assert!(matches!(
            sink.push_context_switch(&zero),
            Err(SinkError::Encode(_))
        ));
    }

    #[test]
    fn states_keep_their_numbers() {
        for (linux, fxt) in [
            (LinuxThreadState::New, 0),
            (LinuxThreadState::Running, 1),
            (LinuxThreadState::Suspended, 2),
            (LinuxThreadState::Blocked, 3),
            (LinuxThreadState::Dying, 4),
            (LinuxThreadState::Dead, 5),
        ] {
            assert_eq!(fxt_state(linux).raw(), fxt);
            assert_eq!(linux.fxt_value(), fxt);
        }
    }

    #[test]
    fn truncation_respects_characters() {
        assert_eq!(truncate_str("héllo", 2), "h");
        assert_eq!(truncate_str("héllo", 3), "hé");
        assert_eq!(truncate_str("abc", 10), "abc");
    }

    #[test]
    fn a_dead_thread_gives_its_index_back() {
        let mut w = KernelTraceWriter::new(RecordWriter::with_magic(), config()).unwrap();
        w.handle(&switch(200, 10, 11, LinuxThreadState::Dead))
            .unwrap();
        w.handle(&switch(300, 11, 12, LinuxThreadState::Blocked))
            .unwrap();
        let (sink, stats) = w.finish().unwrap();
        assert_eq!(stats.threads, 4, "10, 11, 12 and the recorder");
        let bytes = sink.to_bytes();
        let threads: Vec<(u8, u64)> = Decoder::new(&bytes)
            .filter_map(|d| match d.unwrap().record {
                DecodedRecord::Thread { index, thread } => Some((index, thread.tid)),
                _ => None,
            })
            .collect();
        assert_eq!(threads, vec![(1, 10), (2, 11), (1, 12), (3, 7)]);
    }

    /// The local table with an epoch the test moves on.
    #[derive(Debug, Default)]
    struct Epochs {
        table: LocalRefs,
        epoch: u64,
    }

    impl RefTable<RecordWriter> for Epochs {
        fn epoch(&mut self, _sink: &mut RecordWriter) -> Option<u64> {
            Some(self.epoch)
        }
        fn register_string(
            &mut self,
            sink: &mut RecordWriter,
            value: &str,
        ) -> Result<Registration<u16>, SinkError> {
            self.table.register_string(sink, value)
        }
        fn register_thread(
            &mut self,
            sink: &mut RecordWriter,
            pid: u64,
            tid: u64,
        ) -> Result<Registration<u8>, SinkError> {
            self.table.register_thread(sink, pid, tid)
        }
        fn release_thread(&mut self, index: u8) {
            RefTable::<RecordWriter>::release_thread(&mut self.table, index);
        }
    }

    #[test]
    fn a_new_epoch_registers_and_names_everything_again() {
        let mut w =
            KernelTraceWriter::with_refs(RecordWriter::with_magic(), Epochs::default(), config())
                .unwrap();
        w.handle(&CaptureEvent::Thread(ThreadInfo {
            time: 150,
            tid: 10,
            pid: Some(10),
            name: Some("main".into()),
            process_name: Some("app".into()),
        }))
        .unwrap();
        w.handle(&switch(200, 10, 0, LinuxThreadState::Blocked))
            .unwrap();
        let registrations = |w: &KernelTraceWriter<RecordWriter, Epochs>| {
            let bytes = w.sink().to_bytes();
            let mut threads = 0;
            let mut names = 0;
            for d in Decoder::new(&bytes) {
                match d.unwrap().record {
                    DecodedRecord::Thread { thread, .. } if thread.tid == 10 => threads += 1,
                    DecodedRecord::KernelObject { koid: 10, .. } => names += 1,
                    _ => {}
                }
            }
            (threads, names)
        };
        assert_eq!(
            registrations(&w),
            (1, 2),
            "thread 10 and process 10 named once"
        );
        // Same epoch: nothing again.
        w.handle(&switch(300, 0, 10, LinuxThreadState::Running))
            .unwrap();
        assert_eq!(registrations(&w), (1, 2));
        w.refs.epoch = 1;
        w.handle(&switch(400, 10, 0, LinuxThreadState::Blocked))
            .unwrap();
        assert_eq!(registrations(&w), (2, 4), "registered and named again");
        let stats = w.stats();
        assert_eq!((stats.epochs, stats.names_replayed), (1, 2));
        assert_eq!(stats.threads, 2, "10 and the idle task, each counted once");
    }

    /// A sink whose buffer is "full" for every Thread and String record.
    #[derive(Debug, Default)]
    struct NoRegistrations(RecordWriter);

    impl RecordSink for NoRegistrations {
        fn push(&mut self, record: &Record<'_>) -> Result<usize, SinkError> {
            match record {
                Record::Thread(_) | Record::String(_) => Err(SinkError::Full),
                r => RecordSink::push(&mut self.0, r),
            }
        }
    }

    fn decode_all(bytes: &[u8]) -> Vec<DecodedRecord<'_>> {
        Decoder::new(bytes).map(|d| d.unwrap().record).collect()
    }

    /// A wake-up is a Thread Wakeup record (scheduling type 2) on the CPU the woken thread
    /// was queued on, with its waker as a koid argument; a `D` switch and a switch with a
    /// wait point go by tid with fxtrace's arguments; every other switch stays two words.
    #[test]
    fn wakeups_uninterruptible_sleeps_and_wait_points() {
        use crate::format::sched::{SwitchView, WakeupView};
        let mut w = KernelTraceWriter::new(RecordWriter::with_magic(), config()).unwrap();
        w.handle(&CaptureEvent::Wakeup(WakeupEvent {
            time: 150,
            cpu: 0,
            target_cpu: 1,
            tid: 11,
            pid: Some(11),
            prio: 120,
            waker_tid: 10,
            waker_pid: Some(10),
        }))
        .unwrap();
        let d = CaptureEvent::ContextSwitch(SwitchEvent {
            uninterruptible: true,
            ..match switch(200, 10, 0, LinuxThreadState::Blocked) {
                CaptureEvent::ContextSwitch(cs) => cs,
                _ => unreachable!(),
            }
        });
        w.handle(&d).unwrap();
        w.handle(&CaptureEvent::KernelSymbol(KernelSymbol {
            start: 0xffff_ffff_8143_fc90,
            len: 0x120,
            name: "futex_wait".into(),
        }))
        .unwrap();
        w.handle(&CaptureEvent::Stack(StackInfo {
            id: 1,
            kernel_frames: 1,
            frames: vec![0xffff_ffff_8143_fca0, 0x40_1000].into(),
        }))
        .unwrap();
        let waits = CaptureEvent::ContextSwitch(SwitchEvent {
            stack: Some(1),
            ..match switch(300, 11, 12, LinuxThreadState::Blocked) {
                CaptureEvent::ContextSwitch(cs) => cs,
                _ => unreachable!(),
            }
        });
        w.handle(&waits).unwrap();
        w.handle(&switch(400, 12, 0, LinuxThreadState::Running))
            .unwrap();
        let (sink, stats) = w.finish().unwrap();
        assert_eq!(
            (
                stats.wakeups,
                stats.uninterruptible_switches,
                stats.wait_points
            ),
            (1, 1, 1)
        );
        assert_eq!((stats.switches_by_tid, stats.context_switches), (2, 3));
        assert_eq!(
            (
                stats.stack_blobs,
                stats.kernel_symbols,
                stats.dropped_records
            ),
            (1, 1, 0)
        );
        let bytes = sink.to_bytes();
        let records = decode_all(&bytes);
        let wake = records.iter().find_map(WakeupView::of).unwrap();
        assert_eq!(
            (wake.time.ticks, wake.cpu, wake.tid, wake.waker),
            (150, 1, 11, Some(10))
        );
        let switches: Vec<SwitchView> = records.iter().filter_map(SwitchView::of).collect();
        assert_eq!(switches.len(), 3);
        assert!(switches[0].uninterruptible && switches[0].stack.is_none());
        assert_eq!(switches[0].incoming, crate::format::sched::Side::Idle);
        assert_eq!(switches[1].stack, Some(1));
        assert!(!switches[1].uninterruptible && switches[1].blocked());
        assert_eq!(switches[2].outgoing_state, ThreadState::Running as u8);
        // The by-tid switches, and only they.
        let by_tid = records
            .iter()
            .filter(|r| matches!(r, DecodedRecord::SchedContextSwitch { .. }))
            .count();
        assert_eq!(by_tid, 2);
        // The stack and its symbol, as blobs, before the switch that refers to the stack.
        let position = |f: &dyn Fn(&DecodedRecord<'_>) -> bool| records.iter().position(f).unwrap();
        let stack_at =
            position(&|r| matches!(r, DecodedRecord::Blob { name, .. } if name == STACK_BLOB_NAME));
        let ksym_at =
            position(&|r| matches!(r, DecodedRecord::Blob { name, .. } if name == KSYM_BLOB_NAME));
        let use_at = position(&|r| SwitchView::of(r).is_some_and(|s| s.stack == Some(1)));
        assert!(ksym_at < stack_at && stack_at < use_at);
        if let DecodedRecord::Blob { payload, .. } = &records[stack_at] {
            let s = StackRecord::decode(payload).unwrap();
            assert_eq!(
                (s.id, s.kernel(), s.user()),
                (1, &[0xffff_ffff_8143_fca0][..], &[0x40_1000][..])
            );
        }
    }

    #[test]
    fn samples_are_blobs_and_a_new_epoch_defines_stacks_again() {
        let mut w =
            KernelTraceWriter::with_refs(RecordWriter::with_magic(), Epochs::default(), config())
                .unwrap();
        w.handle(&CaptureEvent::Stack(StackInfo {
            id: 7,
            kernel_frames: 0,
            frames: vec![0x40_1000].into(),
        }))
        .unwrap();
        let sample = CaptureEvent::Sample(CpuSample {
            time: 500,
            cpu: 1,
            pid: Some(10),
            tid: 11,
            ip: 0x40_1000,
            stack: Some(7),
        });
        w.handle(&sample).unwrap();
        w.refs.epoch = 1;
        w.handle(&sample).unwrap();
        assert_eq!((w.stats().samples, w.stats().stack_blobs), (2, 2));
        let bytes = w.sink().to_bytes();
        let blobs: Vec<String> = Decoder::new(&bytes)
            .filter_map(|d| match d.unwrap().record {
                DecodedRecord::Blob { name, payload, .. } if name == SAMPLE_BLOB_NAME => {
                    let s = SampleRecord::decode(&payload).unwrap();
                    Some(format!("sample {} {} {} {}", s.time, s.pid, s.tid, s.stack))
                }
                DecodedRecord::Blob { name, payload, .. } if name == STACK_BLOB_NAME => Some(
                    format!("stack {}", StackRecord::decode(&payload).unwrap().id),
                ),
                _ => None,
            })
            .collect();
        assert_eq!(
            blobs,
            [
                "stack 7",
                "sample 500 10 11 7",
                "stack 7",
                "sample 500 10 11 7"
            ],
            "the new epoch's reader meets the stack again before its use"
        );
    }

    /// A side the per-process source does not know is thread 0 of the unknown process:
    /// idle to Perfetto (tid 0, priority 0), "unknown" to fxtrace's readers, never a thread.
    #[test]
    fn an_unknown_side_is_neither_idle_nor_a_thread() {
        use crate::format::sched::{Side, SwitchView};
        let mut w = KernelTraceWriter::new(RecordWriter::with_magic(), config()).unwrap();
        let out_only = match switch(200, 10, 0, LinuxThreadState::Blocked) {
            CaptureEvent::ContextSwitch(cs) => CaptureEvent::ContextSwitch(SwitchEvent {
                sides: SwitchSides::OutgoingOnly,
                next_pid: Some(0),
                ..cs
            }),
            _ => unreachable!(),
        };
        w.handle(&out_only).unwrap();
        w.handle(&out_only).unwrap();
        let (sink, stats) = w.finish().unwrap();
        let bytes = sink.to_bytes();
        let records = decode_all(&bytes);
        let views: Vec<SwitchView> = records.iter().filter_map(SwitchView::of).collect();
        assert_eq!(views.len(), 2);
        assert!(views.iter().all(|v| v.incoming == Side::Unknown));
        for r in &records {
            if let DecodedRecord::ContextSwitch {
                incoming,
                incoming_priority,
                ..
            } = r
            {
                assert_eq!(
                    (incoming.tid, *incoming_priority),
                    (0, 0),
                    "Perfetto's idle"
                );
            }
        }
        let registered = records
            .iter()
            .filter(|r| matches!(r, DecodedRecord::Thread { thread, .. } if thread.pid == u64::from(UNKNOWN_PROCESS_KOID) && thread.tid == 0))
            .count();
        assert_eq!(registered, 1, "registered once");
        assert_eq!(stats.dropped_records, 0);
    }

    #[test]
    fn refused_registrations_are_never_referred_to() {
        let mut w = KernelTraceWriter::new(NoRegistrations::default(), config()).unwrap();
        w.handle(&switch(200, 10, 11, LinuxThreadState::Blocked))
            .unwrap();
        w.handle(&CaptureEvent::Lost(Lost {
            time: 300,
            cpu: 0,
            kind: LostKind::Records,
            count: 1,
        }))
        .unwrap();
        let (sink, stats) = w.finish().unwrap();
        assert_eq!(stats.unindexed_threads, 3, "10, 11, the recorder");
        assert!(stats.dropped_records >= 3);
        let mut bytes = words_to_bytes(&[crate::format::MAGIC_WORD]);
        bytes.extend(sink.0.to_bytes());
        let records: Vec<_> = Decoder::new(&bytes).map(|d| d.unwrap().record).collect();
        assert!(records.iter().any(|r| matches!(
            r,
            DecodedRecord::ContextSwitch { outgoing, incoming, .. }
                if outgoing.tid == 10 && incoming.tid == 11
        )));
        assert!(records.iter().any(|r| matches!(
            r,
            DecodedRecord::Event(e) if e.category == "fxtrace" && e.thread.tid == 7
        )));
    }

    /// What the capture counted (parse errors, copies dropped) ends in the trace: the
    /// summary's damage counts, and the copies in an event of their own, only when there are.
    #[test]
    fn the_copies_a_capture_dropped_are_written_after_the_summary() {
        let events = |duplicates: u64| {
            let mut w = KernelTraceWriter::new(RecordWriter::with_magic(), config()).unwrap();
            w.note_capture_damage(&super::super::CaptureStats {
                parse_errors: 2,
                duplicates,
                ..Default::default()
            });
            let (sink, stats) = w.finish().unwrap();
            assert_eq!((stats.unparsed_records, stats.duplicates), (2, duplicates));
            let bytes = sink.to_bytes();
            Decoder::new(&bytes)
                .filter_map(|d| match d.unwrap().record {
                    DecodedRecord::Event(e) => Some((
                        e.name.into_owned(),
                        e.args
                            .iter()
                            .map(|a| format!("{}={}", a.name, a.value))
                            .collect::<Vec<_>>(),
                    )),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let with = events(5);
        assert_eq!(with[0].0, "fxtrace: kernel capture summary");
        assert!(with[0].1.contains(&"unparsed_records=u64(2)".to_owned()));
        assert_eq!(
            with[1],
            (
                "fxtrace: duplicate records dropped".to_owned(),
                vec!["records=u64(5)".to_owned()]
            )
        );
        assert!(events(0)
            .iter()
            .all(|(name, _)| name != "fxtrace: duplicate records dropped"));
    }

    #[test]
    fn stream_sink_matches_record_writer() {
        let mut a = RecordWriter::with_magic();
        let mut b = FxtStreamSink::with_magic(Vec::new());
        let r = Record::Initialization(Initialization {
            ticks_per_second: 5,
        });
        RecordSink::push(&mut a, &r).unwrap();
        RecordSink::push(&mut b, &r).unwrap();
        assert_eq!(b.bytes(), 24);
        assert_eq!(b.finish().unwrap(), a.to_bytes());
    }
}

//! XRay log → FXT: one provider section whose records a trace viewer understands.
//!
//! [`write_fxt`] streams a decoded [`XrayLog`] into any `io::Write` as a complete FXT
//! trace:
//!
//! 1. the magic number record, a Provider Info record named `"xray:<log file name>"`,
//!    and an Initialization record with the log's `cycle_frequency` as ticks per second
//!    (1e9 when the header says 0, flagged in [`ImportStats::ticks_per_second_defaulted`]);
//! 2. String records for the category [`CATEGORY`] and every function name the log
//!    uses (names from the [`InstrMap`] when given, else `func#<id>`); more strings are
//!    registered as they are first needed, inline refs once the table is full;
//! 3. Thread records (indices 1..=255 in log order, inline refs beyond) and Kernel
//!    Object records naming each process (koid = pid) and thread (koid = tid, with the
//!    conventional `"process"` koid argument; pid 0 when the log does not record it, as
//!    FDR logs before version 3 do);
//! 4. per thread, in time order: duration begin/end events for function entry and
//!    exit, instant events for custom events ([`CUSTOM_EVENT_NAME`]), typed events
//!    ([`TYPED_EVENT_NAME`]), CPU migrations ([`CPU_MIGRATION_NAME`]) and the wall-clock
//!    anchors of FDR buffers ([`WALL_TIME_NAME`]).
//!
//! Timestamps are the log's absolute TSCs, unchanged (TSC wraps are already applied by
//! the reader).
//!
//! # Durations always nest
//!
//! XRay logs from real programs are not always balanced: FDR buffers can be recycled,
//! a log can be cut short, an exit sled can fire for a frame whose entry was never
//! logged. The converter keeps a call stack per thread and repairs what it must,
//! counting every repair:
//!
//! * an exit (or tail exit) of a function that is on the stack but not on top closes
//!   the frames above it at the exit's timestamp ([`ImportStats::unwound_frames`]);
//! * an exit of a function that is not on the stack is dropped
//!   ([`ImportStats::dropped_exits`]);
//! * frames still open when a thread's events end are closed at that thread's last
//!   timestamp ([`ImportStats::closed_at_end`]);
//! * a timestamp earlier than the thread's previous one is raised to it
//!   ([`ImportStats::clamped_timestamps`]), so no duration is negative.
//!
//! A thread with any repair gets a [`REPAIRS_NAME`] instant event at its end with the
//! counts as arguments, so the repairs are visible in a viewer, not only in the
//! summary.
//!
//! # Payloads
//!
//! Custom and typed event payloads go into the instant event as a blob argument
//! (argument type 10, `"data"`), plus a `"text"` string argument when the payload is
//! short UTF-8 text (viewers that skip blob arguments still show it). A payload too
//! large for an argument (about 32 KiB) is written right after its event as a Blob
//! record (type DATA) named like the event, split into several same-named Blob records
//! when it does not fit one (never a Large Blob record, which Perfetto misframes); the
//! event then carries `"blob"` = that name.
//!
//! ```
//! use fxtrace_tools::convert::xray::{read_log, write_fxt, ImportOptions};
//! use fxtrace_format::{Decoder, DecodedRecord};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A version-3 basic-mode log: function 7 entered at TSC 100 and left at TSC 250.
//! let mut bytes = vec![0u8; 96];
//! bytes[0] = 3; // version 3, basic mode
//! bytes[8..16].copy_from_slice(&1_000_000_000u64.to_le_bytes());
//! for (i, (kind, tsc)) in [(0u8, 100u64), (1, 250)].into_iter().enumerate() {
//!     let r = &mut bytes[32 + 32 * i..64 + 32 * i];
//!     r[3] = kind; // 0 entry, 1 exit
//!     r[4] = 7; // function id
//!     r[8..16].copy_from_slice(&tsc.to_le_bytes());
//!     r[16] = 42; // thread id
//! }
//! let log = read_log(&bytes)?;
//! let mut fxt = Vec::new();
//! let stats = write_fxt(&log, &ImportOptions::new("app.xray"), &mut fxt)?;
//! assert_eq!((stats.threads, stats.durations, stats.repairs()), (1, 1, 0));
//! let names: Vec<String> = Decoder::new(&fxt)
//!     .filter_map(|r| match r.ok()?.record {
//!         DecodedRecord::Event(e) => Some(format!("{:?} {} @{}", e.kind, e.name, e.time.ticks)),
//!         _ => None,
//!     })
//!     .collect();
//! assert_eq!(names, ["DurationBegin func#7 @100", "DurationEnd func#7 @250"]);
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Write};

use fxtrace_format::{
    truncate_str, Arg, ArgValue, Blob, BlobType, Encode, EncodeError, Event, EventKind,
    Initialization, KernelObject, ObjectType, ProviderInfo, StringRecord, StringRef, ThreadRecord,
    ThreadRef, MAGIC_WORD, MAX_ARGS, MAX_BLOB_PAYLOAD, MAX_PROVIDER_NAME_LEN, MAX_STRING_INDEX,
    MAX_STRING_LEN, MAX_THREAD_INDEX,
};

use super::event::{FunctionId, WallTimeAnchor, XrayEvent, XrayEventKind, XrayLog};
use super::instr_map::InstrMap;

/// Category of every event the import writes.
pub const CATEGORY: &str = "xray";
/// Name of the instant event written for a custom event (`__xray_customevent`).
pub const CUSTOM_EVENT_NAME: &str = "xray:custom";
/// Name of the instant event written for a typed event (`__xray_typedevent`).
pub const TYPED_EVENT_NAME: &str = "xray:typed";
/// Name of the instant event written where a thread moved to another CPU.
pub const CPU_MIGRATION_NAME: &str = "xray:cpu_migration";
/// Name of the instant event written at each FDR buffer's wall-clock anchor.
pub const WALL_TIME_NAME: &str = "xray:wall_time";
/// Name of the instant event, at the end of a thread, that counts that thread's repairs.
pub const REPAIRS_NAME: &str = "xray:repairs";
/// Prefix of the provider name (the log's file name follows).
pub const PROVIDER_NAME_PREFIX: &str = "xray:";
/// Provider id of the one provider section the import writes.
pub const PROVIDER_ID: u32 = 1;
/// Ticks per second used when the log's header gives a cycle frequency of 0.
pub const FALLBACK_TICKS_PER_SECOND: u64 = 1_000_000_000;
/// Payloads up to this many bytes that are valid UTF-8 also get a `"text"` argument.
pub const MAX_TEXT_ARG: usize = 1024;
/// Prefix of the name given to a function without a known name: `func#<decimal id>`.
pub const UNNAMED_FUNCTION_PREFIX: &str = "func#";

/// Where the log came from and how to name its functions.
#[derive(Debug, Clone, Copy)]
pub struct ImportOptions<'a> {
    /// The log's file name (no directory): the provider is named `"xray:<log_name>"`
    /// and the process is named after it (see [`process_name_from_log_name`]).
    pub log_name: &'a str,
    /// Names function ids; without it functions are named `func#<id>`.
    pub instr_map: Option<&'a InstrMap>,
}

impl<'a> ImportOptions<'a> {
    /// Options for the log named `log_name`, without an instrumentation map.
    pub fn new(log_name: &'a str) -> Self {
        Self {
            log_name,
            instr_map: None,
        }
    }

    /// The same options, naming functions through `map`.
    pub fn with_instr_map(self, map: &'a InstrMap) -> Self {
        Self {
            instr_map: Some(map),
            ..self
        }
    }
}

/// Why the FXT output could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// Writing to the output failed.
    #[error("cannot write the FXT output: {0}")]
    Write(#[from] io::Error),
    /// A record could not be encoded (a limit of the format the converter did not
    /// anticipate; every known limit is handled before encoding).
    #[error("cannot encode an FXT record: {0}")]
    Encode(#[from] EncodeError),
}

/// What the import wrote, and every repair and drop it made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportStats {
    /// Ticks per second written in the Initialization record.
    pub ticks_per_second: u64,
    /// The log's header gave a cycle frequency of 0, so [`FALLBACK_TICKS_PER_SECOND`] was used.
    pub ticks_per_second_defaulted: bool,
    /// Threads (one per (pid, tid) stream of the log).
    pub threads: u64,
    /// Distinct function ids in the log.
    pub functions: u64,
    /// Functions named `func#<id>` because no name was known for them.
    pub unnamed_functions: u64,
    /// Function names longer than an FXT string (32000 bytes), cut at a character boundary.
    pub truncated_names: u64,
    /// FXT event records written (of every kind).
    pub events: u64,
    /// Durations (begin/end pairs) written, repaired ones included.
    pub durations: u64,
    /// Function arguments written as `argN` event arguments.
    pub call_args: u64,
    /// Custom events written.
    pub custom_events: u64,
    /// Typed events written.
    pub typed_events: u64,
    /// CPU migration events written.
    pub cpu_migrations: u64,
    /// Wall-clock anchor events written.
    pub wall_times: u64,
    /// Payloads too large for an event argument, written as (chunked) Blob records.
    pub blob_records: u64,
    /// Repair: frames closed early because an exit matched a frame below them.
    pub unwound_frames: u64,
    /// Repair: frames still open at the end of their thread, closed at its last timestamp.
    pub closed_at_end: u64,
    /// Repair: timestamps earlier than their thread's previous one, raised to it.
    pub clamped_timestamps: u64,
    /// Drop: exits of a function that was not on the thread's stack.
    pub dropped_exits: u64,
    /// Drop: function arguments beyond the 15 an FXT event can carry.
    pub dropped_call_args: u64,
    /// Drop (by the reader): call-argument records that followed no entry.
    pub reader_dropped_call_args: u64,
    /// Wall-clock anchors without a TSC (their buffer ended before its first CPU
    /// record): not written, since they anchor no event.
    pub unanchored_wall_times: u64,
    /// FXT records written, the magic number included.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
}

impl ImportStats {
    /// All repairs: unwound frames, frames closed at the end, clamped timestamps.
    pub fn repairs(&self) -> u64 {
        self.unwound_frames + self.closed_at_end + self.clamped_timestamps
    }

    /// Everything dropped: unmatched exits and call arguments (by the converter or the reader).
    pub fn dropped(&self) -> u64 {
        self.dropped_exits + self.dropped_call_args + self.reader_dropped_call_args
    }
}

impl fmt::Display for ImportStats {
    /// One line: `threads, functions, events (by kind), repairs, dropped`, with the
    /// breakdown of repairs and drops when there are any.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} threads, {} functions, {} events ({} durations, {} call args, {} custom, {} typed, \
             {} cpu migrations, {} wall-time anchors), {} repairs",
            self.threads,
            self.functions,
            self.events,
            self.durations,
            self.call_args,
            self.custom_events,
            self.typed_events,
            self.cpu_migrations,
            self.wall_times,
            self.repairs(),
        )?;
        if self.repairs() > 0 {
            write!(
                f,
                " ({} frames unwound, {} closed at thread end, {} timestamps clamped)",
                self.unwound_frames, self.closed_at_end, self.clamped_timestamps
            )?;
        }
        write!(f, ", {} dropped", self.dropped())?;
        if self.dropped() > 0 {
            write!(
                f,
                " ({} unmatched exits, {} call args beyond {MAX_ARGS}, {} orphan call args)",
                self.dropped_exits, self.dropped_call_args, self.reader_dropped_call_args
            )?;
        }
        if self.unnamed_functions > 0 {
            write!(f, "; {} functions without a name", self.unnamed_functions)?;
        }
        if self.truncated_names > 0 {
            write!(f, "; {} names truncated", self.truncated_names)?;
        }
        if self.blob_records > 0 {
            write!(f, "; {} payloads as blob records", self.blob_records)?;
        }
        if self.unanchored_wall_times > 0 {
            write!(
                f,
                "; {} wall times without a TSC not written",
                self.unanchored_wall_times
            )?;
        }
        Ok(())
    }
}

/// The process name for a log file name: compiler-rt names logs
/// `<xray_logfile_base><program>.<6 random characters>` with the default base
/// `xray-log.`, so `xray-log.server.a1B2c3` gives `server`. Any other name is returned
/// unchanged.
pub fn process_name_from_log_name(log_name: &str) -> &str {
    let stem = match log_name.rsplit_once('.') {
        Some((stem, suffix))
            if !stem.is_empty()
                && suffix.len() == 6
                && suffix.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            stem
        }
        _ => return log_name,
    };
    match stem.strip_prefix("xray-log.") {
        Some(program) if !program.is_empty() => program,
        _ => stem,
    }
}

/// Writes `log` as an FXT trace to `out` (see the module docs for what is written).
///
/// Everything in `log` is written, including the events of a log whose decoding
/// stopped early ([`XrayLog::error`]); reporting that error is the caller's job.
/// The output is flushed before returning.
pub fn write_fxt<W: Write>(
    log: &XrayLog,
    options: &ImportOptions<'_>,
    out: W,
) -> Result<ImportStats, ImportError> {
    let ids = log
        .threads
        .iter()
        .flat_map(|t| t.events.iter().filter_map(|e| e.kind.func_id()));
    let threads: Vec<(Option<u32>, u32)> = log.threads.iter().map(|t| (t.pid, t.tid)).collect();
    let mut import = Import::begin(&log.header, &log.stats, options, ids, &threads, out)?;
    for (i, stream) in log.threads.iter().enumerate() {
        let mut thread = import.thread(i, &stream.wall_times);
        for e in &stream.events {
            thread.feed(e)?;
        }
        thread.finish()?;
    }
    import.finish()
}

/// An import under way: the records before the threads' events are written; each thread's
/// events are then fed in turn ([`Import::thread`]).
pub(crate) struct Import<W: Write> {
    out: FxtOut<W>,
    strings: Strings,
    stats: ImportStats,
    category: Option<u16>,
    functions: Functions,
    threads: Vec<ThreadRef>,
}

impl<W: Write> Import<W> {
    /// Writes the magic number, the provider, the initialization record, the names of the
    /// functions `ids` (the ids the log uses, in any order, repeats allowed) and the
    /// `threads` (pid, tid), in the order their events will be fed.
    pub(crate) fn begin(
        header: &super::header::FileHeader,
        read: &super::event::ReadStats,
        options: &ImportOptions<'_>,
        ids: impl IntoIterator<Item = FunctionId>,
        threads: &[(Option<u32>, u32)],
        out: W,
    ) -> Result<Self, ImportError> {
        let mut stats = ImportStats {
            reader_dropped_call_args: read.orphan_call_args,
            ..ImportStats::default()
        };
        let mut out = FxtOut::new(out);
        let mut strings = Strings::default();

        out.words.push(MAGIC_WORD);
        out.records += 1;
        let provider = format!("{PROVIDER_NAME_PREFIX}{}", options.log_name);
        out.push(&ProviderInfo {
            provider_id: PROVIDER_ID,
            name: truncate_str(&provider, MAX_PROVIDER_NAME_LEN),
        })?;
        stats.ticks_per_second = header.cycle_frequency;
        if stats.ticks_per_second == 0 {
            stats.ticks_per_second = FALLBACK_TICKS_PER_SECOND;
            stats.ticks_per_second_defaulted = true;
        }
        out.push(&Initialization {
            ticks_per_second: stats.ticks_per_second,
        })?;

        let category = strings.intern(CATEGORY, &mut out)?;
        let functions = Functions::new(ids, options.instr_map, &mut strings, &mut out, &mut stats)?;
        let threads = write_threads(
            threads,
            options.log_name,
            &mut strings,
            &mut out,
            &mut stats,
        )?;
        Ok(Import {
            out,
            strings,
            stats,
            category,
            functions,
            threads,
        })
    }

    /// The converter of thread `index` (of those given to [`Self::begin`]), whose FDR
    /// buffers carry the wall-clock anchors `wall_times` (in the order of its events).
    pub(crate) fn thread(
        &mut self,
        index: usize,
        wall_times: &[WallTimeAnchor],
    ) -> ThreadConverter<'_, W> {
        let mut anchors = Vec::with_capacity(wall_times.len());
        for w in wall_times {
            match w.tsc {
                Some(tsc) => anchors.push((tsc, *w)),
                None => self.stats.unanchored_wall_times += 1,
            }
        }
        ThreadConverter {
            thread: self
                .threads
                .get(index)
                .copied()
                .unwrap_or(ThreadRef::Inline { pid: 0, tid: 0 }),
            category: self.category,
            functions: &self.functions,
            strings: &mut self.strings,
            out: &mut self.out,
            stats: &mut self.stats,
            stack: CallStack::default(),
            last_ts: None,
            repairs: ThreadRepairs::default(),
            anchors: anchors.into_iter().peekable(),
        }
    }

    /// Flushes the output; what was written.
    pub(crate) fn finish(mut self) -> Result<ImportStats, ImportError> {
        self.stats.records = self.out.records;
        self.stats.bytes = self.out.finish()?;
        Ok(self.stats)
    }
}

// === impl FxtOut ===

/// Words to collect before writing them out.
const FLUSH_WORDS: usize = 8192;

/// Encodes records into a word buffer and writes it out in chunks.
struct FxtOut<W: Write> {
    out: W,
    words: Vec<u64>,
    bytes: Vec<u8>,
    records: u64,
    written: u64,
}

impl<W: Write> FxtOut<W> {
    fn new(out: W) -> Self {
        Self {
            out,
            words: Vec::with_capacity(FLUSH_WORDS + 64),
            bytes: Vec::with_capacity((FLUSH_WORDS + 64) * 8),
            records: 0,
            written: 0,
        }
    }

    /// Appends one record; on an encoding error nothing is appended.
    fn push<R: Encode + ?Sized>(&mut self, record: &R) -> Result<(), ImportError> {
        let n = record.words()?;
        let start = self.words.len();
        self.words.resize(start + n, 0);
        if let Err(e) = record.write(&mut self.words[start..]) {
            self.words.truncate(start);
            return Err(e.into());
        }
        self.records += 1;
        if self.words.len() >= FLUSH_WORDS {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> io::Result<()> {
        self.bytes.clear();
        for w in &self.words {
            self.bytes.extend_from_slice(&w.to_ne_bytes());
        }
        self.out.write_all(&self.bytes)?;
        self.written += self.bytes.len() as u64;
        self.words.clear();
        Ok(())
    }

    /// Writes what is left, flushes, and returns the number of bytes written.
    fn finish(mut self) -> io::Result<u64> {
        self.write_out()?;
        self.out.flush()?;
        Ok(self.written)
    }
}

// === impl Strings ===

/// The string table: each string registered once, inline refs once it is full.
#[derive(Default)]
struct Strings {
    indices: HashMap<String, u16>,
    next: u16,
}

impl Strings {
    /// The index of `s`, writing its String record first if it is new; `None` when the
    /// table is full (or `s` is empty), meaning: refer to it inline.
    fn intern<W: Write>(
        &mut self,
        s: &str,
        out: &mut FxtOut<W>,
    ) -> Result<Option<u16>, ImportError> {
        if s.is_empty() {
            return Ok(None);
        }
        if let Some(&i) = self.indices.get(s) {
            return Ok(Some(i));
        }
        if self.next >= MAX_STRING_INDEX {
            return Ok(None);
        }
        let index = self.next + 1;
        out.push(&StringRecord { index, value: s })?;
        self.next = index;
        self.indices.insert(s.to_owned(), index);
        Ok(Some(index))
    }

    /// A ref to `s`: by index when registered (registering it now if possible), else inline.
    fn get<'s, W: Write>(
        &mut self,
        s: &'s str,
        out: &mut FxtOut<W>,
    ) -> Result<StringRef<'s>, ImportError> {
        Ok(string_ref(self.intern(s, out)?, s))
    }
}

/// The ref for `s` given its index, if any.
fn string_ref(index: Option<u16>, s: &str) -> StringRef<'_> {
    match index {
        Some(i) => StringRef::Index(i),
        None if s.is_empty() => StringRef::Empty,
        None => StringRef::Inline(s),
    }
}

// === impl Functions ===

/// A function's name and its string table index.
struct FunctionName {
    name: String,
    index: Option<u16>,
}

/// A cheap hasher for function ids (multiplicative, Fibonacci hashing): the name lookup
/// runs once per function event, where SipHash cost a fifth of the conversion time. The
/// ids come from the log, but a log can only choose which ids collide, not make a table
/// larger than its own number of distinct ids.
#[derive(Debug, Default, Clone, Copy)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_i32(&mut self, i: i32) {
        self.write_u64(u64::from(i as u32));
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0 ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by function id.
type IdMap<V> = HashMap<FunctionId, V, BuildHasherDefault<IdHasher>>;

/// Names of the functions the log uses, registered in the string table by id order.
struct Functions {
    names: IdMap<FunctionName>,
}

impl Functions {
    fn new<W: Write>(
        ids: impl IntoIterator<Item = FunctionId>,
        map: Option<&InstrMap>,
        strings: &mut Strings,
        out: &mut FxtOut<W>,
        stats: &mut ImportStats,
    ) -> Result<Self, ImportError> {
        let ids: HashSet<FunctionId, BuildHasherDefault<IdHasher>> = ids.into_iter().collect();
        let mut ids: Vec<FunctionId> = ids.into_iter().collect();
        ids.sort_unstable();
        let mut names = IdMap::with_capacity_and_hasher(ids.len(), Default::default());
        for id in ids {
            let mut name = match map.and_then(|m| m.function_name(id)) {
                Some(n) if !n.is_empty() => n.to_owned(),
                _ => {
                    stats.unnamed_functions += 1;
                    format!("{UNNAMED_FUNCTION_PREFIX}{id}")
                }
            };
            if name.len() > MAX_STRING_LEN {
                stats.truncated_names += 1;
                let cut = truncate_str(&name, MAX_STRING_LEN).len();
                name.truncate(cut);
            }
            let index = strings.intern(&name, out)?;
            names.insert(id, FunctionName { name, index });
        }
        stats.functions = names.len() as u64;
        Ok(Self { names })
    }

    /// The ref naming function `id` (every id of the log was registered in `new`).
    fn get(&self, id: FunctionId) -> StringRef<'_> {
        match self.names.get(&id) {
            Some(f) => string_ref(f.index, &f.name),
            // Unreachable for ids of the log: an empty name rather than a panic.
            None => StringRef::Empty,
        }
    }
}

// === thread and kernel object records ===

/// Writes the Thread records and the Kernel Object records naming processes and
/// threads; returns each stream's thread ref.
fn write_threads<W: Write>(
    threads: &[(Option<u32>, u32)],
    log_name: &str,
    strings: &mut Strings,
    out: &mut FxtOut<W>,
    stats: &mut ImportStats,
) -> Result<Vec<ThreadRef>, ImportError> {
    let process_name = truncate_str(process_name_from_log_name(log_name), MAX_STRING_LEN);
    let mut refs = Vec::with_capacity(threads.len());
    let mut pids = BTreeSet::new();
    for (i, &(t_pid, t_tid)) in threads.iter().enumerate() {
        let pid = u64::from(t_pid.unwrap_or(0));
        let tid = u64::from(t_tid);
        // Indices 1..=MAX_THREAD_INDEX (255, the u8 range), inline refs beyond.
        let r = match u8::try_from(i + 1) {
            Ok(index) => {
                out.push(&ThreadRecord { index, pid, tid })?;
                ThreadRef::Index(index)
            }
            _ => ThreadRef::Inline { pid, tid },
        };
        refs.push(r);
        if let Some(pid) = t_pid {
            pids.insert(pid);
        }
    }
    stats.threads = refs.len() as u64;
    for pid in pids {
        out.push(&KernelObject {
            koid: u64::from(pid),
            object_type: ObjectType::PROCESS,
            name: StringRef::Inline(process_name),
            args: &[],
        })?;
    }
    let process_arg = strings.get("process", out)?;
    for (i, &(pid, tid)) in threads.iter().enumerate() {
        let name = format!("xray thread #{}", i + 1);
        let args = [Arg::new(
            process_arg,
            ArgValue::Koid(u64::from(pid.unwrap_or(0))),
        )];
        out.push(&KernelObject {
            koid: u64::from(tid),
            object_type: ObjectType::THREAD,
            name: StringRef::Inline(&name),
            args: &args,
        })?;
    }
    Ok(refs)
}

// === impl ThreadConverter ===

/// One thread's repairs and drops, for its [`REPAIRS_NAME`] event.
#[derive(Debug, Default, Clone, Copy)]
struct ThreadRepairs {
    unwound_frames: u64,
    closed_at_end: u64,
    clamped_timestamps: u64,
    dropped_exits: u64,
}

impl ThreadRepairs {
    fn any(&self) -> bool {
        self.unwound_frames + self.closed_at_end + self.clamped_timestamps + self.dropped_exits > 0
    }
}

// Thread indices are the whole u8 range but 0: `u8::try_from` is the range check.
const _: () = assert!(MAX_THREAD_INDEX == u8::MAX);

/// Argument names `arg0`..`arg14`.
const CALL_ARG_NAMES: [&str; MAX_ARGS] = [
    "arg0", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6", "arg7", "arg8", "arg9", "arg10",
    "arg11", "arg12", "arg13", "arg14",
];

/// Converts the events of one thread, fed in time order ([`Self::feed`]), then
/// [`Self::finish`]ed.
pub(crate) struct ThreadConverter<'c, W: Write> {
    thread: ThreadRef,
    category: Option<u16>,
    functions: &'c Functions,
    strings: &'c mut Strings,
    out: &'c mut FxtOut<W>,
    stats: &'c mut ImportStats,
    /// Open frames.
    stack: CallStack,
    /// The thread's latest timestamp so far.
    last_ts: Option<u64>,
    repairs: ThreadRepairs,
    /// The wall-clock anchors not written yet (TSC, anchor), in order.
    anchors: std::iter::Peekable<std::vec::IntoIter<(u64, WallTimeAnchor)>>,
}

impl<W: Write> ThreadConverter<'_, W> {
    /// The thread's next event: the anchors before it, then the event.
    pub(crate) fn feed(&mut self, e: &XrayEvent) -> Result<(), ImportError> {
        while let Some((tsc, w)) = self.anchors.next_if(|(tsc, _)| *tsc <= e.tsc) {
            self.wall_time(tsc, &w)?;
        }
        let ts = self.clamp(e.tsc);
        match &e.kind {
            XrayEventKind::Enter { func_id } => self.enter(ts, *func_id, &[])?,
            XrayEventKind::EnterWithArgs { func_id, args } => self.enter(ts, *func_id, args)?,
            XrayEventKind::Exit { func_id } | XrayEventKind::TailExit { func_id } => {
                self.exit(ts, *func_id)?
            }
            XrayEventKind::CustomEvent { data } => {
                self.stats.custom_events += 1;
                self.payload_event(ts, CUSTOM_EVENT_NAME, None, data)?;
            }
            XrayEventKind::TypedEvent { event_type, data } => {
                self.stats.typed_events += 1;
                self.payload_event(ts, TYPED_EVENT_NAME, Some(*event_type), data)?;
            }
            XrayEventKind::CpuMigration { from, to } => {
                self.stats.cpu_migrations += 1;
                let args = [
                    Arg::new(
                        self.strings.get("from", self.out)?,
                        ArgValue::U32((*from).into()),
                    ),
                    Arg::new(
                        self.strings.get("to", self.out)?,
                        ArgValue::U32((*to).into()),
                    ),
                ];
                let name = self.strings.get(CPU_MIGRATION_NAME, self.out)?;
                self.event(ts, name, &args, EventKind::Instant)?;
            }
        }
        Ok(())
    }

    /// After the thread's last event: the anchors left, the frames still open closed, the
    /// repairs told.
    pub(crate) fn finish(mut self) -> Result<(), ImportError> {
        while let Some((tsc, w)) = self.anchors.next() {
            self.wall_time(tsc, &w)?;
        }
        // Close what is still open at the thread's last timestamp, innermost first.
        if let Some(end) = self.last_ts {
            while let Some(func_id) = self.stack.pop() {
                self.repairs.closed_at_end += 1;
                self.end(end, func_id)?;
            }
        }
        let r = self.repairs;
        self.stats.unwound_frames += r.unwound_frames;
        self.stats.closed_at_end += r.closed_at_end;
        self.stats.clamped_timestamps += r.clamped_timestamps;
        self.stats.dropped_exits += r.dropped_exits;
        if let (true, Some(end)) = (r.any(), self.last_ts) {
            let counts = [
                ("unwound_frames", r.unwound_frames),
                ("closed_at_end", r.closed_at_end),
                ("clamped_timestamps", r.clamped_timestamps),
                ("dropped_exits", r.dropped_exits),
            ];
            let mut args = Vec::with_capacity(counts.len());
            for (name, n) in counts {
                args.push(Arg::new(
                    self.strings.get(name, self.out)?,
                    ArgValue::U64(n),
                ));
            }
            let name = self.strings.get(REPAIRS_NAME, self.out)?;
            self.event(end, name, &args, EventKind::Instant)?;
        }
        Ok(())
    }

    /// `tsc`, raised to the thread's latest timestamp if it is earlier (counted).
    fn clamp(&mut self, tsc: u64) -> u64 {
        match self.last_ts {
            Some(last) if tsc < last => {
                self.repairs.clamped_timestamps += 1;
                last
            }
            _ => {
                self.last_ts = Some(tsc);
                tsc
            }
        }
    }

    fn event(
        &mut self,
        ticks: u64,
        name: StringRef<'_>,
        args: &[Arg<'_>],
        kind: EventKind,
    ) -> Result<(), ImportError> {
        self.out.push(&Event {
            ticks,
            thread: self.thread,
            category: string_ref(self.category, CATEGORY),
            name,
            args,
            kind,
        })?;
        self.stats.events += 1;
        Ok(())
    }

    fn enter(
        &mut self,
        ts: u64,
        func_id: FunctionId,
        call_args: &[u64],
    ) -> Result<(), ImportError> {
        let kept = call_args.len().min(MAX_ARGS);
        self.stats.dropped_call_args += (call_args.len() - kept) as u64;
        self.stats.call_args += kept as u64;
        let mut args = Vec::with_capacity(kept);
        for (name, value) in CALL_ARG_NAMES.iter().zip(call_args) {
            args.push(Arg::new(
                self.strings.get(name, self.out)?,
                ArgValue::U64(*value),
            ));
        }
        self.stack.push(func_id);
        let functions = self.functions;
        let name = functions.get(func_id);
        self.event(ts, name, &args, EventKind::DurationBegin)
    }

    fn end(&mut self, ts: u64, func_id: FunctionId) -> Result<(), ImportError> {
        self.stats.durations += 1;
        let functions = self.functions;
        let name = functions.get(func_id);
        self.event(ts, name, &[], EventKind::DurationEnd)
    }

    /// Closes `func_id`'s innermost frame, and any frames above it (counted); an exit of a
    /// function not on the stack is dropped (counted).
    fn exit(&mut self, ts: u64, func_id: FunctionId) -> Result<(), ImportError> {
        let Some(depth) = self.stack.innermost(func_id) else {
            self.repairs.dropped_exits += 1;
            return Ok(());
        };
        while self.stack.len() > depth + 1 {
            if let Some(inner) = self.stack.pop() {
                self.repairs.unwound_frames += 1;
                self.end(ts, inner)?;
            }
        }
        self.stack.pop();
        self.end(ts, func_id)
    }

    fn wall_time(&mut self, tsc: u64, w: &WallTimeAnchor) -> Result<(), ImportError> {
        self.stats.wall_times += 1;
        let ts = self.clamp(tsc);
        let args = [
            Arg::new(
                self.strings.get("wall_seconds", self.out)?,
                ArgValue::I64(w.seconds),
            ),
            Arg::new(
                self.strings.get("wall_micros", self.out)?,
                ArgValue::U32(w.micros),
            ),
            Arg::new(
                self.strings.get("anchor_tsc", self.out)?,
                ArgValue::U64(tsc),
            ),
        ];
        let name = self.strings.get(WALL_TIME_NAME, self.out)?;
        self.event(ts, name, &args, EventKind::Instant)
    }

    /// An instant event carrying `data` (custom or typed event), with the payload as an
    /// argument when it fits, else in Blob records right after it.
    fn payload_event(
        &mut self,
        ts: u64,
        event_name: &'static str,
        event_type: Option<u16>,
        data: &[u8],
    ) -> Result<(), ImportError> {
        let name = self.strings.get(event_name, self.out)?;
        let mut args = Vec::with_capacity(4);
        if let Some(t) = event_type {
            args.push(Arg::new(
                self.strings.get("type", self.out)?,
                ArgValue::U32(t.into()),
            ));
        }
        args.push(Arg::new(
            self.strings.get("size", self.out)?,
            ArgValue::U64(data.len() as u64),
        ));
        let text = std::str::from_utf8(data)
            .ok()
            .filter(|t| t.len() <= MAX_TEXT_ARG && !t.is_empty());
        if let Some(text) = text {
            args.push(Arg::new(
                self.strings.get("text", self.out)?,
                ArgValue::Str(StringRef::Inline(text)),
            ));
        }
        let fixed = args.len();
        args.push(Arg::new(
            self.strings.get("data", self.out)?,
            ArgValue::Blob(data),
        ));
        let event = Event {
            ticks: ts,
            thread: self.thread,
            category: string_ref(self.category, CATEGORY),
            name,
            args: &args,
            kind: EventKind::Instant,
        };
        match event.words() {
            Ok(_) => {
                self.out.push(&event)?;
                self.stats.events += 1;
                return Ok(());
            }
            Err(EncodeError::ArgumentTooLarge { .. } | EncodeError::RecordTooLarge { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        // Too large for an argument: the payload follows in its own record.
        args.truncate(fixed);
        args.push(Arg::new(
            self.strings.get("blob", self.out)?,
            ArgValue::Str(name),
        ));
        self.event(ts, name, &args, EventKind::Instant)?;
        // Blob records with the same name append to one blob (the spec's chunking); each
        // record holds at most 4095 words with its header and name. Large blob records are
        // not used: Perfetto frames every record by the 12-bit size field and would misread
        // or stop at them (docs/perfetto.md).
        let mut rest = data;
        let mut chunk_len = MAX_BLOB_PAYLOAD.min(rest.len());
        while !rest.is_empty() {
            let take = chunk_len.min(rest.len());
            let blob = Blob {
                name,
                blob_type: BlobType::DATA,
                payload: &rest[..take],
            };
            match blob.words() {
                Ok(_) => {
                    self.out.push(&blob)?;
                    self.stats.blob_records += 1;
                    rest = &rest[take..];
                }
                // The name leaves less room than MAX_BLOB_PAYLOAD: shrink by a word.
                Err(EncodeError::RecordTooLarge { .. } | EncodeError::BlobTooLarge { .. })
                    if chunk_len > 8 =>
                {
                    chunk_len -= 8;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// A thread's open frames, outermost first, with how many frames each function has open:
/// an exit of a function with none open (a log cut mid-call, a hostile one) is answered
/// without walking the stack.
#[derive(Debug, Default)]
struct CallStack {
    frames: Vec<FunctionId>,
    open: HashMap<FunctionId, u32>,
}

impl CallStack {
    fn push(&mut self, func_id: FunctionId) {
        self.frames.push(func_id);
        *self.open.entry(func_id).or_default() += 1;
    }

    fn pop(&mut self) -> Option<FunctionId> {
        let func_id = self.frames.pop()?;
        if let Some(n) = self.open.get_mut(&func_id) {
            *n -= 1;
            if *n == 0 {
                self.open.remove(&func_id);
            }
        }
        Some(func_id)
    }

    fn len(&self) -> usize {
        self.frames.len()
    }

    /// The depth of `func_id`'s innermost open frame. Walks only the frames above it, which
    /// the exit then closes.
    fn innermost(&self, func_id: FunctionId) -> Option<usize> {
        if !self.open.contains_key(&func_id) {
            return None;
        }
        self.frames.iter().rposition(|f| *f == func_id)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_call_stack_finds_the_innermost_open_frame_of_a_function() {
        let mut stack = CallStack::default();
        for f in [1, 2, 1, 3] {
            stack.push(f);
        }
        assert_eq!(stack.innermost(1), Some(2));
        assert_eq!(stack.innermost(3), Some(3));
        assert_eq!(stack.innermost(4), None, "never opened");
        assert_eq!(stack.pop(), Some(3));
        assert_eq!(stack.innermost(3), None, "closed");
        assert_eq!((stack.pop(), stack.innermost(1)), (Some(1), Some(0)));
        assert_eq!(stack.len(), 2);
    }

    use super::*;

    #[test]
    fn process_names_follow_compiler_rt_log_names() {
        assert_eq!(
            process_name_from_log_name("xray-log.server.a1B2c3"),
            "server"
        );
        assert_eq!(process_name_from_log_name("my.app.XyZ123"), "my.app");
        assert_eq!(process_name_from_log_name("fdr-v5.xray"), "fdr-v5.xray");
        assert_eq!(process_name_from_log_name("xray-log..abcdef"), "xray-log.");
        assert_eq!(process_name_from_log_name(".abcdef"), ".abcdef");
    }

    #[test]
    fn id_hasher_spreads_small_and_negative_ids() {
        let hash = |id: FunctionId| {
            let mut h = IdHasher::default();
            std::hash::Hash::hash(&id, &mut h);
            h.finish()
        };
        let hashes: HashSet<u64> = (-100..1000).map(hash).collect();
        assert_eq!(hashes.len(), 1100);
        assert_ne!(
            hash(1) >> 57,
            hash(2) >> 57,
            "top bits differ for neighbours"
        );
    }

    #[test]
    fn truncate_cuts_at_a_char_boundary() {
        assert_eq!(truncate_str("abc", 5), "abc");
        assert_eq!(truncate_str("aé", 2), "a");
        assert_eq!(truncate_str("aé", 3), "aé");
    }

    #[test]
    fn stats_line_names_every_count() {
        let s = ImportStats {
            threads: 2,
            functions: 3,
            events: 10,
            unwound_frames: 1,
            dropped_exits: 2,
            ..ImportStats::default()
        };
        let line = s.to_string();
        assert!(
            line.starts_with("2 threads, 3 functions, 10 events"),
            "{line}"
        );
        assert!(line.contains("1 repairs (1 frames unwound"), "{line}");
        assert!(line.contains("2 dropped (2 unmatched exits"), "{line}");
        assert_eq!((s.repairs(), s.dropped()), (1, 2));
    }
}

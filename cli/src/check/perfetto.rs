//! Is an FXT archive Perfetto-ready? [`check_for_perfetto`] reads an archive the way
//! Perfetto's FXT importer does and lists every place where that importer would stop, drop,
//! misplace or skip something, with byte offsets ([`PerfettoReport`]).
//!
//! Perfetto's importer (`src/trace_processor/importers/fuchsia/` in google/perfetto:
//! `fuchsia_trace_tokenizer.cc`, `fuchsia_trace_parser.cc`, `fuchsia_trace_utils.cc`) has
//! habits of its own; `docs/perfetto.md` quotes the source for each. The checker keeps the
//! state that importer keeps, as that importer keeps it:
//!
//! - one table of strings, one of threads and one ticks-per-second per provider, replaced
//!   whole by each Provider Info record (`RegisterProvider`), selected by Provider Section
//!   records, with provider 0 registered before the first record;
//! - record sizes read from header bits `[4 .. 15]` for every record type, large records
//!   included (`Parse`), stopping the whole import at a size of 0;
//! - the process koid of each thread as Kernel Object records give it (the `"process"`
//!   argument), which is all the legacy context-switch layout uses for a thread's process
//!   and for telling the idle thread apart;
//! - timestamps converted with `TicksToNs` ([`perfetto_ticks_to_ns`]), which refuses
//!   anything beyond `i64::MAX` nanoseconds and a rate of 0.
//!
//! # Severities
//!
//! | severity | meaning |
//! |---|---|
//! | [`Severity::Error`] | the import stops, or a record or field is lost or misread |
//! | [`Severity::Warning`] | shown, but misattributed or wrong in some Perfetto versions, or a drop Perfetto hides |
//! | [`Severity::Note`] | skipped by design (LBR blobs, logs, unknown argument types, …): informational |
//!
//! Findings of one [`FindingKind`] are gathered into one [`Finding`]: the first offset, the
//! first few others, and how many there were.
//!
//! # Drops must be visible
//!
//! Perfetto ignores Provider Event metadata ("buffer overflow": records were dropped). A
//! provider whose section holds that metadata must also hold an event Perfetto shows that
//! reports the loss ([`DROP_WORDS`]): an event whose name mentions a drop or a loss, or with
//! a nonzero numeric argument whose name does (`"fxtrace: 12 perf records lost"`, a summary
//! with `dropped_records = 3`). Otherwise the drop is a [`FindingKind::DropsOnlyInMetadata`]
//! warning.
//!
//! ```
//! use fxtrace_tools::check::perfetto::{check_for_perfetto, FindingKind, Severity};
//! use fxtrace::format::{Blob, BlobType, Initialization, ProviderInfo, RecordWriter};
//!
//! let mut w = RecordWriter::with_magic();
//! w.push(&ProviderInfo { provider_id: 1, name: "kernel" })?;
//! w.push(&Initialization { ticks_per_second: 2_000_000_000 })?;
//! w.push(&Blob { name: "cpu0".into(), blob_type: BlobType::LAST_BRANCH, payload: &[0; 8] })?;
//! let report = check_for_perfetto(&w.to_bytes()[..])?;
//! assert!(!report.has_violations());
//! let lbr = report.find(FindingKind::LbrBlobSkipped).unwrap();
//! assert_eq!((lbr.offset, lbr.kind.severity()), (40, Severity::Note));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{self, Read};

use thiserror::Error;

use fxtrace::format::fields::{
    ArgumentHeader, BlobRecord, ContextSwitchRecord, EventRecord, Int32Argument,
    KernelObjectRecord, MetadataRecord, ProviderEventMetadata, ProviderInfoMetadata,
    ProviderSectionMetadata, RecordHeader, SchedContextSwitchRecord, SchedThreadWakeupRecord,
    SchedulingRecord, StringArgument, StringRecord, ThreadRecord,
};
use fxtrace::format::{
    record_words, ArgType, BlobType, EventType, MetadataType, ObjectType, RecordType,
    SchedulingType, MAGIC_WORD, PROVIDER_EVENT_BUFFER_OVERFLOW,
};

/// Words of a name or argument name that make an event a visible drop report (compared
/// ASCII case-insensitively): see the module docs.
pub const DROP_WORDS: [&str; 2] = ["dropped", "lost"];

/// How many offsets a [`Finding`] keeps (the first ones); `count` has them all.
pub const MAX_OFFSETS: usize = 8;

/// The weight Perfetto reads as "this side of a context switch is the idle thread"
/// (`kIdleWeight`, `INT32_MIN`), in the `incoming_weight` / `outgoing_weight` / `weight`
/// arguments of scheduling records of types 1 and 2.
pub const PERFETTO_IDLE_WEIGHT: i32 = i32::MIN;

/// Converts ticks to nanoseconds exactly as Perfetto's `fuchsia_trace_utils::TicksToNs`
/// does: the high 32 bits of `ticks` through a truncated `(1e9 << 32) / ticks_per_second`,
/// the low 32 bits exactly. `None` where Perfetto returns -1 (a rate of 0, a result beyond
/// `i64::MAX`): Perfetto drops such records (`fuchsia_timestamp_overflow`).
pub const fn perfetto_ticks_to_ns(ticks: u64, ticks_per_second: u64) -> Option<i64> {
    const NS_PER_SEC: u64 = 1_000_000_000;
    if ticks_per_second == 0 {
        return None;
    }
    let hi = ticks >> 32;
    let lo = ticks & 0xffff_ffff;
    let per_hi = (NS_PER_SEC << 32) / ticks_per_second;
    let Some(result_hi) = hi.checked_mul(per_hi) else {
        return None;
    };
    // lo < 2^32 and 1e9 < 2^30: no overflow.
    let result_lo = lo * NS_PER_SEC / ticks_per_second;
    // Perfetto adds as unsigned (wrapping), then rejects a negative int64.
    let sum = result_hi.wrapping_add(result_lo) as i64;
    if sum < 0 {
        None
    } else {
        Some(sum)
    }
}

// === impl Severity, FindingKind ===

/// How bad a finding is (ordered: `Note < Warning < Error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Skipped by design; informational.
    Note,
    /// Shown, but misattributed or version-dependent, or a hidden drop.
    Warning,
    /// The import stops, or data is lost or misread.
    Error,
}

impl Severity {
    /// `error`, `warning` or `note`.
    pub const fn name(self) -> &'static str {
        match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Defines [`FindingKind`] with its severity, name and the Perfetto source behind it.
macro_rules! finding_kinds {
    ($($(#[$doc:meta])* $kind:ident = $sev:ident, $name:literal, $source:literal;)+) => {
        /// What Perfetto's importer does with something in the archive. Each kind names the
        /// Perfetto source that shows it ([`FindingKind::perfetto_source`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum FindingKind {
            $($(#[$doc])* $kind,)+
        }

        impl FindingKind {
            /// Every kind.
            pub const ALL: &'static [FindingKind] = &[$(FindingKind::$kind),+];

            /// How bad it is.
            pub const fn severity(self) -> Severity {
                match self {
                    $(FindingKind::$kind => Severity::$sev,)+
                }
            }

            /// A short snake_case name, as `fxtrace check` prints it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(FindingKind::$kind => $name,)+
                }
            }

            /// Where Perfetto's source shows the habit (file and function).
            pub const fn perfetto_source(self) -> &'static str {
                match self {
                    $(FindingKind::$kind => $source,)+
                }
            }
        }
    };
}

finding_kinds! {
    /// The file does not start with the magic number record: Perfetto does not recognise it
    /// as FXT.
    NotFxt = Error, "not_fxt",
        "forwarding_trace_parser.cc GuessTraceType (kFuchsiaMagicNumber)";
    /// A header word whose size field (bits 4..15) is 0, a zero word included: Perfetto stops
    /// the whole import there ("Unexpected record of size 0").
    ZeroSizeRecord = Error, "zero_size_record",
        "fuchsia_trace_tokenizer.cc FuchsiaTraceTokenizer::Parse";
    /// A large record (type 15) of 4096 words or more: Perfetto reads only the low 12 bits of
    /// its 32-bit size and reads its payload as records.
    LargeRecordMisframed = Error, "large_record_misframed",
        "fuchsia_trace_tokenizer.cc FuchsiaTraceTokenizer::Parse (ReadField(header, 4, 15))";
    /// The file ends inside a record: Perfetto keeps the bytes as leftovers and never reads
    /// the record.
    TruncatedRecord = Error, "truncated_record",
        "fuchsia_trace_tokenizer.cc FuchsiaTraceTokenizer::Parse (leftover_bytes_)";
    /// A record after a Provider Section for a provider no Provider Info introduced: Perfetto
    /// has no current provider and drops it.
    RecordWithoutProvider = Error, "record_without_provider",
        "fuchsia_trace_tokenizer.cc ParseRecord (current_provider_ == nullptr)";
    /// A string index the provider's table does not hold (in Perfetto's view): the record is
    /// dropped, or the field lost.
    UnknownStringRef = Error, "unknown_string_ref",
        "fuchsia_trace_tokenizer.cc ParseRecord (fuchsia_invalid_string_ref)";
    /// An Initialization record with 0 ticks per second: every later timestamp of the
    /// provider is refused.
    ZeroTicksPerSecond = Error, "zero_ticks_per_second",
        "fuchsia_trace_utils.cc TicksToNs";
    /// A timestamp whose nanoseconds do not fit `i64`: the record is dropped.
    TimestampOverflow = Error, "timestamp_overflow",
        "fuchsia_trace_utils.cc TicksToNs; fuchsia_timestamp_overflow";
    /// A duration-complete event ending before it begins: dropped.
    NegativeDuration = Error, "negative_duration",
        "fuchsia_trace_parser.cc Parse, kDurationComplete";
    /// A record shorter than its fields say (or an argument of size 0): Perfetto drops or
    /// misreads it.
    MalformedRecord = Error, "malformed_record",
        "fuchsia_trace_utils.cc RecordCursor; fuchsia_record_read_error";
    /// An argument Perfetto interprets with the wrong type (`process` not a koid, a weight
    /// not an i32, `waker` not a koid): the record is dropped.
    WrongArgType = Error, "wrong_arg_type",
        "fuchsia_trace_tokenizer.cc / fuchsia_trace_parser.cc; fuchsia_invalid_event_arg_type";
    /// Scheduling records of one provider going back in time: older Perfetto versions apply
    /// them in file order.
    SchedOutOfOrder = Warning, "sched_out_of_order",
        "fuchsia_trace_tokenizer.cc ParseRecord, kSchedulerEvent (older versions)";
    /// A flow event with no duration slice open on its thread at its time: Perfetto binds
    /// flow events to the enclosing slice and drops one that has none (trace_processor
    /// counts it as the error stat `flow_no_enclosing_slice`).
    FlowWithoutEnclosingSlice = Error, "flow_without_enclosing_slice",
        "flow_tracker.cc FlowTracker::Begin/Step/End (flow_no_enclosing_slice)";
    /// A duration end with no duration begin open on its thread: Perfetto drops it.
    UnmatchedDurationEnd = Warning, "unmatched_duration_end",
        "slice_tracker.cc SliceTracker::End; fuchsia_trace_parser.cc kDurationEnd";
    /// A provider's buffer overflow recorded only as Provider Event metadata, which Perfetto
    /// ignores, with no event reporting the drop.
    DropsOnlyInMetadata = Warning, "drops_only_in_metadata",
        "fuchsia_trace_tokenizer.cc ParseRecord, kProviderEvent";
    /// Timestamped records of a provider with no Initialization record: Perfetto takes
    /// 1 tick = 1 ns.
    MissingInitialization = Warning, "missing_initialization",
        "fuchsia_trace_tokenizer.h ProviderInfo::ticks_per_second = 1000000000";
    /// A second Provider Info for the same provider: Perfetto starts it afresh (empty string
    /// and thread tables, 1 tick = 1 ns).
    ProviderInfoRepeated = Warning, "provider_info_repeated",
        "fuchsia_trace_tokenizer.cc RegisterProvider";
    /// A thread index the provider's table does not hold: Perfetto uses pid 0, tid 0.
    UnknownThreadRef = Warning, "unknown_thread_ref",
        "fuchsia_trace_tokenizer.h ProviderInfo::GetThread";
    /// A process or thread koid above `u32::MAX`: Perfetto truncates it to 32 bits.
    KoidTooWide = Warning, "koid_too_wide",
        "fuchsia_trace_parser.cc UpdateThread(static_cast<uint32_t>(tid), ...)";
    /// The idle side of a context switch (tid 0) that Perfetto does not recognise as idle
    /// (legacy layout: priority 0 and no process; types 1/2: weight INT32_MIN).
    IdleNotRecognized = Warning, "idle_not_recognized",
        "fuchsia_trace_parser.cc Parse, kSchedulerEvent* (incoming_is_idle)";
    /// A running thread Perfetto takes for the idle thread (legacy layout, priority 0 and no
    /// process koid from a Kernel Object record): its time on the CPU disappears.
    ThreadTakenForIdle = Warning, "thread_taken_for_idle",
        "fuchsia_trace_parser.cc Parse, kSchedulerEventLegacyContextSwitch";
    /// A thread whose process Perfetto does not know where it needs it (scheduling records,
    /// a thread name without `"process"`): attributed to process 0.
    ThreadWithoutProcess = Warning, "thread_without_process",
        "fuchsia_trace_parser.cc SwitchFrom/SwitchTo (thread->info.pid)";
    /// A blob of type 3 (Perfetto): Perfetto parses its payload as protobuf trace packets.
    PerfettoBlob = Warning, "perfetto_blob",
        "fuchsia_trace_tokenizer.cc ParseRecord, kBlob (kPerfettoBlob)";
    /// Provider Event metadata: ignored by Perfetto.
    ProviderEventIgnored = Note, "provider_event_ignored",
        "fuchsia_trace_tokenizer.cc ParseRecord, kProviderEvent";
    /// A LAST_BRANCH blob: skipped (use `fxtrace report lbr`).
    LbrBlobSkipped = Note, "lbr_blob_skipped",
        "fuchsia_trace_tokenizer.cc ParseRecord, kBlob";
    /// A blob of a type other than 2 and 3: skipped.
    BlobSkipped = Note, "blob_skipped",
        "fuchsia_trace_tokenizer.cc ParseRecord, kBlob";
    /// A large record under 4096 words: skipped (unknown record type 15).
    LargeRecordSkipped = Note, "large_record_skipped",
        "fuchsia_trace_tokenizer.cc ParseRecord, default";
    /// A Log record: skipped (record type 9 is not imported).
    LogSkipped = Note, "log_skipped",
        "fuchsia_trace_tokenizer.cc ParseRecord, default";
    /// A Userspace Object record: skipped.
    UserspaceObjectSkipped = Note, "userspace_object_skipped",
        "fuchsia_trace_tokenizer.cc ParseRecord, default";
    /// A record of a type the format does not define: skipped.
    UnknownRecordType = Note, "unknown_record_type",
        "fuchsia_trace_tokenizer.cc ParseRecord, default";
    /// A Kernel Object record of a type other than process and thread: skipped.
    KernelObjectSkipped = Note, "kernel_object_skipped",
        "fuchsia_trace_tokenizer.cc ParseRecord, kKernelObject";
    /// An event type above 10, or a scheduling type above 2: skipped.
    UnknownEventType = Note, "unknown_event_type",
        "fuchsia_trace_parser.cc Parse (event_type switch)";
    /// An argument of type blob (10) or unknown: shown as the string "unknown".
    ArgTypeUnknown = Note, "arg_type_unknown",
        "fuchsia_trace_parser.cc ParseArgs (ArgValue::Unknown)";
    /// A counter argument that is not a number (bool, string, pointer, koid, null): no sample.
    NonNumericCounterArg = Note, "non_numeric_counter_arg",
        "fuchsia_trace_parser.cc Parse, kCounter (fuchsia_non_numeric_counters)";
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// === impl Finding, PerfettoReport ===

/// Every occurrence of one [`FindingKind`] in an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What.
    pub kind: FindingKind,
    /// Byte offset of the first occurrence (the record's header word).
    pub offset: u64,
    /// The first [`MAX_OFFSETS`] distinct offsets, in file order (the first one included).
    pub offsets: Vec<u64>,
    /// How many occurrences there were.
    pub count: u64,
    /// What the first occurrence is and what Perfetto does with it.
    pub message: String,
}

impl Finding {
    /// The kind's severity.
    pub fn severity(&self) -> Severity {
        self.kind.severity()
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<7} @{} {}: {}",
            self.severity(),
            self.offset,
            self.kind,
            self.message
        )?;
        if self.count > 1 {
            write!(f, " (x{}", self.count)?;
            let more: Vec<String> = self.offsets[1..].iter().map(|o| format!("@{o}")).collect();
            if !more.is_empty() {
                write!(f, "; also {}", more.join(" "))?;
                if self.offsets.len() == MAX_OFFSETS {
                    f.write_str(" …")?;
                }
            }
            f.write_str(")")?;
        }
        write!(f, " [perfetto: {}]", self.kind.perfetto_source())
    }
}

/// What Perfetto's FXT importer would make of an archive.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PerfettoReport {
    /// One entry per kind found, ordered by first offset.
    pub findings: Vec<Finding>,
    /// Bytes read.
    pub bytes: u64,
    /// Records read (the magic number record included).
    pub records: u64,
    /// Where Perfetto's import would stop (not FXT, or a record of size 0), if it would.
    pub import_stops_at: Option<u64>,
}

impl PerfettoReport {
    /// Occurrences of findings of `severity`.
    pub fn count(&self, severity: Severity) -> u64 {
        self.findings
            .iter()
            .filter(|f| f.severity() == severity)
            .map(|f| f.count)
            .sum()
    }

    /// The worst severity found.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(Finding::severity).max()
    }

    /// Whether there is any warning or error (notes are not violations).
    pub fn has_violations(&self) -> bool {
        self.worst() > Some(Severity::Note)
    }

    /// The finding of `kind`, if any.
    pub fn find(&self, kind: FindingKind) -> Option<&Finding> {
        self.findings.iter().find(|f| f.kind == kind)
    }
}

impl fmt::Display for PerfettoReport {
    /// Errors first, then warnings, then notes; one line each; then a summary line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for severity in [Severity::Error, Severity::Warning, Severity::Note] {
            for finding in self.findings.iter().filter(|x| x.severity() == severity) {
                writeln!(f, "{finding}")?;
            }
        }
        write!(
            f,
            "perfetto: {} error(s), {} warning(s), {} note(s) in {} records ({} bytes)",
            self.count(Severity::Error),
            self.count(Severity::Warning),
            self.count(Severity::Note),
            self.records,
            self.bytes
        )?;
        match self.import_stops_at {
            Some(offset) => write!(f, "; the import stops at @{offset}"),
            None => Ok(()),
        }
    }
}

/// Why the archive could not be checked (the checker itself never fails on content).
#[derive(Debug, Error)]
pub enum PerfettoCheckError {
    /// Reading the input failed.
    #[error("reading the trace at byte {offset}: {source}")]
    Read {
        /// Bytes read before the failure.
        offset: u64,
        /// The cause.
        source: io::Error,
    },
}

// === impl Checker ===

/// What a string means to Perfetto's importer: only these strings change how it reads a
/// record, so only the tag is kept (memory stays bounded by the table size, not the text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StringTag {
    /// `"process"` (the thread name's process koid argument).
    Process,
    /// `"incoming_weight"`.
    IncomingWeight,
    /// `"outgoing_weight"`.
    OutgoingWeight,
    /// `"weight"`.
    Weight,
    /// `"waker"`.
    Waker,
    /// Mentions a drop or a loss ([`DROP_WORDS`]).
    Drop,
    /// Anything else.
    Other,
}

impl StringTag {
    fn of(bytes: &[u8]) -> StringTag {
        match bytes {
            b"process" => StringTag::Process,
            b"incoming_weight" => StringTag::IncomingWeight,
            b"outgoing_weight" => StringTag::OutgoingWeight,
            b"weight" => StringTag::Weight,
            b"waker" => StringTag::Waker,
            _ if DROP_WORDS
                .iter()
                .any(|w| contains_ignore_case(bytes, w.as_bytes())) =>
            {
                StringTag::Drop
            }
            _ => StringTag::Other,
        }
    }
}

fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// One provider as Perfetto's tokenizer keeps it (`FuchsiaTraceTokenizer::ProviderInfo`).
#[derive(Debug, Default)]
struct Provider {
    strings: HashMap<u16, StringTag>,
    threads: HashMap<u8, (u64, u64)>,
    /// `None` until an Initialization record (Perfetto then uses 1e9).
    ticks_per_second: Option<u64>,
    warned_uninitialized: bool,
}

impl Provider {
    fn rate(&self) -> u64 {
        self.ticks_per_second.unwrap_or(1_000_000_000)
    }
}

/// What the checker remembers per provider id across its sections.
#[derive(Debug, Default)]
struct Tally {
    /// Latest scheduling record so far: (ns, offset).
    last_sched: Option<(i64, u64)>,
    /// First Provider Event "buffer overflow" for this provider.
    overflow_at: Option<u64>,
    /// An event in this provider's sections reports a drop.
    drop_shown: bool,
}

/// The duration slices open on one thread track.
#[derive(Debug, Default)]
struct ThreadSlices {
    /// Duration begins not yet ended.
    open_begins: u32,
    /// Duration-complete slices not yet over: (start, end) in ns.
    completes: Vec<(i64, i64)>,
}

/// An argument as far as the checker needs it.
#[derive(Debug, Clone, Copy)]
struct ArgInfo {
    name: StringTag,
    kind: Option<ArgType>,
    /// The i32 value (type 1).
    i32_value: Option<i32>,
    /// The koid value (type 8).
    koid: Option<u64>,
    /// Numeric (types 1..=5) and nonzero.
    nonzero_number: bool,
}

impl ArgInfo {
    fn numeric(&self) -> bool {
        matches!(
            self.kind,
            Some(ArgType::I32 | ArgType::U32 | ArgType::I64 | ArgType::U64 | ArgType::F64)
        )
    }
}

/// Why a record was given up on (the finding is already recorded).
#[derive(Debug)]
struct Dropped;

/// A record's bytes with a word cursor, as Perfetto's `RecordCursor`.
#[derive(Debug)]
struct Cursor<'a> {
    bytes: &'a [u8],
    /// Position in words.
    word: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, word: 1 }
    }

    fn header(&self) -> u64 {
        self.word_at(0).unwrap_or(0)
    }

    fn words(&self) -> usize {
        self.bytes.len() / 8
    }

    fn word_at(&self, index: usize) -> Option<u64> {
        let at = index.checked_mul(8)?;
        let w = self.bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_ne_bytes([
            w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
        ]))
    }

    fn word(&mut self) -> Option<u64> {
        let w = self.word_at(self.word)?;
        self.word += 1;
        Some(w)
    }

    /// `len` bytes padded to whole words.
    fn stream(&mut self, len: usize) -> Option<&'a [u8]> {
        let start = self.word.checked_mul(8)?;
        let padded = len.div_ceil(8);
        if self.word.checked_add(padded)? > self.words() {
            return None;
        }
        self.word += padded;
        self.bytes.get(start..start + len)
    }
}

/// Reads the input, counting bytes.
struct Input<R> {
    reader: R,
    offset: u64,
}

impl<R: Read> Input<R> {
    fn fail(&self, source: io::Error) -> PerfettoCheckError {
        PerfettoCheckError::Read {
            offset: self.offset,
            source,
        }
    }

    /// Fills `buf` unless the input ends; returns the bytes read.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<usize, PerfettoCheckError> {
        let mut n = 0;
        while n < buf.len() {
            match self.reader.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
        self.offset += n as u64;
        Ok(n)
    }

    /// Appends up to `len` bytes to `buf`; returns how many.
    fn read_into(&mut self, len: u64, buf: &mut Vec<u8>) -> Result<u64, PerfettoCheckError> {
        // `take` bounds the read and read_to_end grows only as data arrives: a corrupt size
        // cannot make this allocate more than the input holds.
        match (&mut self.reader).take(len).read_to_end(buf) {
            Ok(n) => {
                self.offset += n as u64;
                Ok(n as u64)
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Skips up to `len` bytes; returns how many.
    fn skip(&mut self, len: u64) -> Result<u64, PerfettoCheckError> {
        match io::copy(&mut (&mut self.reader).take(len), &mut io::sink()) {
            Ok(n) => {
                self.offset += n;
                Ok(n)
            }
            Err(e) => Err(self.fail(e)),
        }
    }
}

/// Perfetto's importer state plus the findings.
#[derive(Debug)]
struct Checker {
    findings: BTreeMap<FindingKind, Finding>,
    /// `providers_`: `None` for an id a Provider Section named before any Provider Info.
    providers: HashMap<u32, Option<Provider>>,
    /// Ids a Provider Info record introduced (provider 0 is registered implicitly).
    introduced: HashSet<u32>,
    /// The current provider id, and the offset of the section record that selected it.
    current: u32,
    section_at: u64,
    tallies: HashMap<u32, Tally>,
    /// Process koid of each thread koid, from Kernel Object records (Perfetto's
    /// `FuchsiaTraceParser::Thread::info.pid`).
    process_of: HashMap<u64, u64>,
    /// Threads already reported without a process.
    reported_without_process: HashSet<u64>,
    /// Duration slices open per thread track (Perfetto's `(tid, pid)` as 32 bits).
    slices: HashMap<(u32, u32), ThreadSlices>,
    records: u64,
    import_stops_at: Option<u64>,
}

/// The two sides of a context switch.
const SIDES: [&str; 2] = ["outgoing", "incoming"];

impl Checker {
    fn new() -> Self {
        let mut providers = HashMap::new();
        providers.insert(0, Some(Provider::default()));
        Checker {
            findings: BTreeMap::new(),
            providers,
            introduced: HashSet::new(),
            current: 0,
            section_at: 0,
            tallies: HashMap::new(),
            process_of: HashMap::new(),
            reported_without_process: HashSet::new(),
            slices: HashMap::new(),
            records: 0,
            import_stops_at: None,
        }
    }

    fn add(&mut self, kind: FindingKind, offset: u64, message: impl FnOnce() -> String) {
        add(&mut self.findings, kind, offset, message);
    }

    fn finish(mut self, bytes: u64) -> PerfettoReport {
        let mut unreported: Vec<(u32, u64)> = self
            .tallies
            .iter()
            .filter_map(|(&id, t)| Some((id, t.overflow_at?)).filter(|_| !t.drop_shown))
            .collect();
        unreported.sort_by_key(|&(_, at)| at);
        for (id, at) in unreported {
            self.add(FindingKind::DropsOnlyInMetadata, at, || {
                format!(
                    "provider {id} reports a buffer overflow only as Provider Event metadata, \
                     which Perfetto ignores; no event of provider {id} names the drop \
                     (a name or a nonzero numeric argument containing \"dropped\" or \"lost\")"
                )
            });
        }
        let mut findings: Vec<Finding> = self.findings.into_values().collect();
        findings.sort_by_key(|f| (f.offset, f.kind));
        PerfettoReport {
            findings,
            bytes,
            records: self.records,
            import_stops_at: self.import_stops_at,
        }
    }

    fn run<R: Read>(&mut self, input: &mut Input<R>) -> Result<(), PerfettoCheckError> {
        let mut head = [0u8; 8];
        let n = input.read_full(&mut head)?;
        if n < 8 || u64::from_ne_bytes(head) != MAGIC_WORD {
            let first = u64::from_ne_bytes(head);
            self.add(FindingKind::NotFxt, 0, || match n {
                0 => "the file is empty".to_owned(),
                n if n < 8 => format!("the file is {n} bytes long, shorter than one word"),
                _ => format!(
                    "the first word is {first:#018x}, not the magic number record \
                     {MAGIC_WORD:#018x}: Perfetto does not open it as an FXT trace"
                ),
            });
            self.import_stops_at = Some(0);
            return Ok(());
        }
        self.records += 1;
        let mut buf = Vec::new();
        loop {
            let offset = input.offset;
            let n = input.read_full(&mut head)?;
            if n == 0 {
                return Ok(());
            }
            if n < 8 {
                self.add(FindingKind::TruncatedRecord, offset, || {
                    format!("{n} trailing byte(s) after the last record, less than a header word")
                });
                return Ok(());
            }
            let header = u64::from_ne_bytes(head);
            let words = record_words(header);
            let perfetto_words = RecordHeader::SIZE.get(header) as usize;
            let is_large = RecordHeader::TYPE.get(header) == RecordType::LargeRecord as u64;
            if perfetto_words == 0 {
                let rest = input.skip(u64::MAX)?;
                self.add(FindingKind::ZeroSizeRecord, offset, || {
                    let what = if header == 0 {
                        "a zero header word".to_owned()
                    } else if is_large {
                        format!(
                            "a large record of {words} words, whose size Perfetto reads from \
                             bits 4..15 only (0)"
                        )
                    } else {
                        format!("header {header:#018x} with size 0")
                    };
                    format!(
                        "{what}: Perfetto stops the whole import here; the {} bytes from here \
                         on are never read",
                        rest + 8
                    )
                });
                self.import_stops_at = Some(offset);
                return Ok(());
            }
            self.records += 1;
            let rest = (words as u64 - 1) * 8;
            if is_large {
                // Only the header matters; the payload may be gigabytes.
                let got = input.skip(rest)?;
                if got < rest {
                    self.truncated(offset, words, got);
                    return Ok(());
                }
                self.large_record(offset, words, perfetto_words);
                continue;
            }
            buf.clear();
            buf.extend_from_slice(&head);
            let got = input.read_into(rest, &mut buf)?;
            if got < rest {
                self.truncated(offset, words, got);
                return Ok(());
            }
            self.record(offset, &buf);
        }
    }

    fn truncated(&mut self, offset: u64, words: usize, got: u64) {
        self.add(FindingKind::TruncatedRecord, offset, || {
            format!(
                "a record of {words} words but only {} bytes left: Perfetto keeps them as \
                 leftovers and never imports the record",
                got + 8
            )
        });
    }

    fn large_record(&mut self, offset: u64, words: usize, perfetto_words: usize) {
        if words == perfetto_words {
            self.add(FindingKind::LargeRecordSkipped, offset, || {
                format!("a large record ({words} words): Perfetto skips record type 15")
            });
        } else {
            self.add(FindingKind::LargeRecordMisframed, offset, || {
                format!(
                    "a large record of {words} words: Perfetto reads its size from bits 4..15 \
                     only ({perfetto_words} words) and reads the rest of its payload as \
                     records; what it imports after this point is unreliable (the checker \
                     goes on with the true size)"
                )
            });
        }
    }

    /// The current provider, or `None` where Perfetto has none.
    fn provider(&mut self) -> Option<&mut Provider> {
        self.providers.get_mut(&self.current)?.as_mut()
    }

    fn tally(&mut self) -> &mut Tally {
        self.tallies.entry(self.current).or_default()
    }

    fn record(&mut self, offset: u64, bytes: &[u8]) {
        let mut c = Cursor::new(bytes);
        let header = c.header();
        let record_type = RecordType::from_raw(RecordHeader::TYPE.get(header) as u8);
        if record_type == Some(RecordType::Metadata) {
            return self.metadata(offset, &mut c);
        }
        if self.provider().is_none() {
            let (id, at) = (self.current, self.section_at);
            self.add(FindingKind::RecordWithoutProvider, offset, || {
                format!(
                    "the provider section at @{at} selects provider {id}, which no Provider \
                     Info record introduced: Perfetto has no current provider and drops this \
                     record and the others up to the next provider metadata"
                )
            });
            return;
        }
        // A dropped record has its finding already.
        let _ = match record_type {
            Some(RecordType::Initialization) => self.initialization(offset, &mut c),
            Some(RecordType::String) => self.string_record(offset, &mut c),
            Some(RecordType::Thread) => self.thread_record(offset, &mut c),
            Some(RecordType::Event) => self.event(offset, &mut c),
            Some(RecordType::Blob) => {
                self.blob(offset, header);
                Ok(())
            }
            Some(RecordType::UserspaceObject) => {
                self.add(FindingKind::UserspaceObjectSkipped, offset, || {
                    "a Userspace Object record: Perfetto does not import record type 6".into()
                });
                Ok(())
            }
            Some(RecordType::KernelObject) => self.kernel_object(offset, &mut c),
            Some(RecordType::Scheduling) => self.scheduling(offset, &mut c),
            Some(RecordType::Log) => {
                self.add(FindingKind::LogSkipped, offset, || {
                    "a Log record: Perfetto does not import record type 9 (the message does \
                     not appear)"
                        .into()
                });
                Ok(())
            }
            // Large records are handled before the record is read.
            Some(RecordType::Metadata | RecordType::LargeRecord) => Ok(()),
            None => {
                let t = RecordHeader::TYPE.get(header);
                self.add(FindingKind::UnknownRecordType, offset, || {
                    format!("a record of type {t}, which the format does not define: skipped")
                });
                Ok(())
            }
        };
    }

    fn malformed(&mut self, offset: u64, what: &str) -> Dropped {
        self.add(FindingKind::MalformedRecord, offset, || {
            format!("{what}: the record ends before its fields do; Perfetto drops it")
        });
        Dropped
    }

    fn metadata(&mut self, offset: u64, c: &mut Cursor<'_>) {
        let header = c.header();
        let metadata_type = MetadataRecord::METADATA_TYPE.get(header) as u8;
        match MetadataType::from_raw(metadata_type) {
            Some(MetadataType::ProviderInfo) => {
                let id = ProviderInfoMetadata::PROVIDER_ID.get(header) as u32;
                let len = ProviderInfoMetadata::NAME_LENGTH.get(header) as usize;
                if c.stream(len).is_none() {
                    self.malformed(offset, "a Provider Info record");
                    return;
                }
                if !self.introduced.insert(id) {
                    self.add(FindingKind::ProviderInfoRepeated, offset, || {
                        format!(
                            "a second Provider Info for provider {id}: Perfetto replaces the \
                             provider, emptying its string and thread tables and resetting its \
                             ticks per second to 1e9"
                        )
                    });
                }
                self.providers.insert(id, Some(Provider::default()));
                self.current = id;
                self.section_at = offset;
            }
            Some(MetadataType::ProviderSection) => {
                let id = ProviderSectionMetadata::PROVIDER_ID.get(header) as u32;
                // `providers_[provider_id]` inserts a null provider for an unknown id.
                self.providers.entry(id).or_insert(None);
                self.current = id;
                self.section_at = offset;
            }
            Some(MetadataType::ProviderEvent) => {
                let id = ProviderEventMetadata::PROVIDER_ID.get(header) as u32;
                let event = ProviderEventMetadata::EVENT.get(header) as u8;
                self.add(FindingKind::ProviderEventIgnored, offset, || {
                    format!("Provider Event metadata (provider {id}, event {event}): ignored")
                });
                if event == PROVIDER_EVENT_BUFFER_OVERFLOW {
                    self.tallies
                        .entry(id)
                        .or_default()
                        .overflow_at
                        .get_or_insert(offset);
                }
            }
            // Trace info (the magic number again, in concatenated archives) and unknown
            // metadata types: Perfetto ignores them without a trace.
            Some(MetadataType::TraceInfo) | None => {}
        }
    }

    fn initialization(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let Some(rate) = c.word() else {
            return Err(self.malformed(offset, "an Initialization record"));
        };
        if rate == 0 {
            let id = self.current;
            self.add(FindingKind::ZeroTicksPerSecond, offset, || {
                format!(
                    "provider {id} declares 0 ticks per second: Perfetto refuses every later \
                     timestamp of this provider"
                )
            });
        }
        if let Some(p) = self.provider() {
            p.ticks_per_second = Some(rate);
        }
        Ok(())
    }

    fn string_record(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let header = c.header();
        let index = StringRecord::INDEX.get(header) as u16;
        if index == 0 {
            return Ok(());
        }
        let len = StringRecord::LENGTH.get(header) as usize;
        let Some(bytes) = c.stream(len) else {
            return Err(self.malformed(offset, "a String record"));
        };
        let tag = StringTag::of(bytes);
        if let Some(p) = self.provider() {
            p.strings.insert(index, tag);
        }
        Ok(())
    }

    fn thread_record(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let index = ThreadRecord::INDEX.get(c.header()) as u8;
        if index == 0 {
            return Ok(());
        }
        let (Some(pid), Some(tid)) = (c.word(), c.word()) else {
            return Err(self.malformed(offset, "a Thread record"));
        };
        self.koid(offset, "process", pid);
        self.koid(offset, "thread", tid);
        if let Some(p) = self.provider() {
            p.threads.insert(index, (pid, tid));
        }
        Ok(())
    }

    fn koid(&mut self, offset: u64, what: &str, koid: u64) {
        if koid > u64::from(u32::MAX) {
            self.add(FindingKind::KoidTooWide, offset, || {
                format!(
                    "{what} koid {koid} does not fit 32 bits: Perfetto truncates it to {}",
                    koid as u32
                )
            });
        }
    }

    /// A string ref as Perfetto resolves it: inline (or 0, the empty string) from the
    /// record, else from the provider's table.
    fn string_ref(
        &mut self,
        offset: u64,
        c: &mut Cursor<'_>,
        string_ref: u64,
        field: &str,
        effect: &str,
    ) -> Result<StringTag, Dropped> {
        let string_ref = string_ref as u16;
        if string_ref == 0 || string_ref & 0x8000 != 0 {
            return match c.stream(usize::from(string_ref & 0x7fff)) {
                Some(bytes) => Ok(StringTag::of(bytes)),
                None => Err(self.malformed(offset, field)),
            };
        }
        if let Some(tag) = self.provider().and_then(|p| p.strings.get(&string_ref)) {
            return Ok(*tag);
        }
        let id = self.current;
        self.add(FindingKind::UnknownStringRef, offset, || {
            format!(
                "{field} refers to string index {string_ref}, which provider {id}'s table does \
                 not hold in Perfetto's view: {effect}"
            )
        });
        Err(Dropped)
    }

    /// A thread ref: inline (pid, tid) from the record, else from the provider's table
    /// (Perfetto uses (0, 0) for an unknown index).
    fn thread_ref(
        &mut self,
        offset: u64,
        c: &mut Cursor<'_>,
        thread_ref: u64,
        field: &str,
    ) -> Result<(u64, u64), Dropped> {
        let thread_ref = thread_ref as u8;
        if thread_ref == 0 {
            let (Some(pid), Some(tid)) = (c.word(), c.word()) else {
                return Err(self.malformed(offset, field));
            };
            self.koid(offset, "process", pid);
            self.koid(offset, "thread", tid);
            return Ok((pid, tid));
        }
        if let Some(t) = self.provider().and_then(|p| p.threads.get(&thread_ref)) {
            return Ok(*t);
        }
        let id = self.current;
        self.add(FindingKind::UnknownThreadRef, offset, || {
            format!(
                "{field} refers to thread index {thread_ref}, which provider {id}'s table does \
                 not hold: Perfetto puts it on pid 0, tid 0"
            )
        });
        Ok((0, 0))
    }

    /// The record's timestamp in Perfetto's nanoseconds; warns once per provider when no
    /// Initialization record set the rate.
    fn timestamp(&mut self, offset: u64, c: &mut Cursor<'_>, field: &str) -> Result<i64, Dropped> {
        let Some(ticks) = c.word() else {
            return Err(self.malformed(offset, field));
        };
        let id = self.current;
        let Some(p) = self.provider() else {
            return Err(Dropped);
        };
        let rate = p.rate();
        if p.ticks_per_second.is_none() && !p.warned_uninitialized {
            p.warned_uninitialized = true;
            self.add(FindingKind::MissingInitialization, offset, || {
                format!(
                    "provider {id} has timestamped records but no Initialization record: \
                     Perfetto takes 1 tick = 1 ns"
                )
            });
        }
        match perfetto_ticks_to_ns(ticks, rate) {
            Some(ns) => Ok(ns),
            None => {
                self.add(FindingKind::TimestampOverflow, offset, || {
                    format!(
                        "{field}: {ticks} ticks at {rate} ticks/s is not a nanosecond count \
                         Perfetto accepts (0..=i64::MAX, rate > 0): the record is dropped"
                    )
                });
                Err(Dropped)
            }
        }
    }

    /// Reads `count` arguments as Perfetto's `ParseArgs` does.
    fn args(
        &mut self,
        offset: u64,
        c: &mut Cursor<'_>,
        count: u64,
        what: &str,
        effect: &str,
    ) -> Result<Vec<ArgInfo>, Dropped> {
        let mut args = Vec::with_capacity(count as usize);
        for i in 0..count {
            let field = format!("{what}, argument {i}");
            let base = c.word;
            let Some(header) = c.word() else {
                return Err(self.malformed(offset, &field));
            };
            let size = ArgumentHeader::SIZE.get(header) as usize;
            if size == 0 {
                self.add(FindingKind::MalformedRecord, offset, || {
                    format!(
                        "{field} has size 0: Perfetto reads the same argument again and \
                         misreads the record"
                    )
                });
                return Err(Dropped);
            }
            let name = self.string_ref(
                offset,
                c,
                ArgumentHeader::NAME_REF.get(header),
                &format!("{field}'s name"),
                effect,
            )?;
            let raw_type = ArgumentHeader::TYPE.get(header) as u8;
            let kind = ArgType::from_raw(raw_type);
            let mut arg = ArgInfo {
                name,
                kind,
                i32_value: None,
                koid: None,
                nonzero_number: false,
            };
            match kind {
                Some(ArgType::I32 | ArgType::U32) => {
                    let v = Int32Argument::VALUE.get(header);
                    arg.i32_value = Some(v as u32 as i32);
                    arg.nonzero_number = v != 0;
                }
                Some(ArgType::I64 | ArgType::U64) => match c.word() {
                    Some(v) => arg.nonzero_number = v != 0,
                    None => return Err(self.malformed(offset, &field)),
                },
                Some(ArgType::F64) => match c.word() {
                    Some(v) => arg.nonzero_number = f64::from_bits(v) != 0.0,
                    None => return Err(self.malformed(offset, &field)),
                },
                Some(ArgType::Pointer) => {
                    if c.word().is_none() {
                        return Err(self.malformed(offset, &field));
                    }
                }
                Some(ArgType::Koid) => match c.word() {
                    Some(v) => arg.koid = Some(v),
                    None => return Err(self.malformed(offset, &field)),
                },
                Some(ArgType::Str) => {
                    self.string_ref(
                        offset,
                        c,
                        StringArgument::VALUE_REF.get(header),
                        &format!("{field}'s value"),
                        effect,
                    )?;
                }
                Some(ArgType::Null | ArgType::Bool) => {}
                Some(ArgType::Blob) | None => {
                    let shown = if kind == Some(ArgType::Blob) {
                        "a blob argument (type 10)".to_owned()
                    } else {
                        format!("an argument of unknown type {raw_type}")
                    };
                    self.add(FindingKind::ArgTypeUnknown, offset, || {
                        format!("{field} is {shown}: Perfetto shows its value as \"unknown\"")
                    });
                }
            }
            c.word = base + size;
            if c.word > c.words() {
                return Err(self.malformed(offset, &field));
            }
            args.push(arg);
        }
        Ok(args)
    }

    fn event(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let header = c.header();
        let ts = self.timestamp(offset, c, "an event's timestamp")?;
        let thread = self.thread_ref(
            offset,
            c,
            EventRecord::THREAD_REF.get(header),
            "an event's thread",
        )?;
        let drop = "Perfetto drops the event";
        self.string_ref(
            offset,
            c,
            EventRecord::CATEGORY_REF.get(header),
            "an event's category",
            drop,
        )?;
        let name = self.string_ref(
            offset,
            c,
            EventRecord::NAME_REF.get(header),
            "an event's name",
            drop,
        )?;
        let args = self.args(
            offset,
            c,
            EventRecord::ARGUMENT_COUNT.get(header),
            "an event",
            drop,
        )?;
        let raw_type = EventRecord::EVENT_TYPE.get(header) as u8;
        let event_type = EventType::from_raw(raw_type);
        let mut complete_end = None;
        match event_type {
            Some(EventType::Instant | EventType::DurationBegin | EventType::DurationEnd) => {}
            Some(EventType::Counter) => {
                if c.word().is_none() {
                    return Err(self.malformed(offset, "a counter event's id"));
                }
                let non_numeric = args.iter().filter(|a| !a.numeric()).count();
                if non_numeric > 0 {
                    self.add(FindingKind::NonNumericCounterArg, offset, || {
                        format!(
                            "a counter event with {non_numeric} non-numeric argument(s): \
                             Perfetto plots only i32, u32, i64, u64 and f64 values"
                        )
                    });
                }
            }
            Some(EventType::DurationComplete) => {
                let Some(end_ticks) = c.word() else {
                    return Err(self.malformed(offset, "a duration-complete event's end"));
                };
                let rate = self.provider().map_or(1_000_000_000, |p| p.rate());
                match perfetto_ticks_to_ns(end_ticks, rate) {
                    Some(end) if end < ts => {
                        self.add(FindingKind::NegativeDuration, offset, || {
                            format!(
                                "a duration-complete event ends at {end} ns, before it begins \
                                 ({ts} ns): Perfetto drops it"
                            )
                        });
                        return Err(Dropped);
                    }
                    Some(end) => complete_end = Some(end),
                    None => {
                        self.add(FindingKind::TimestampOverflow, offset, || {
                            format!(
                                "a duration-complete event's end ({end_ticks} ticks) is not a \
                                 nanosecond count Perfetto accepts: the event is dropped"
                            )
                        });
                        return Err(Dropped);
                    }
                }
            }
            Some(
                EventType::AsyncBegin
                | EventType::AsyncInstant
                | EventType::AsyncEnd
                | EventType::FlowBegin
                | EventType::FlowStep
                | EventType::FlowEnd,
            ) => {
                if c.word().is_none() {
                    return Err(self.malformed(offset, "an async or flow event's id"));
                }
            }
            None => {
                self.add(FindingKind::UnknownEventType, offset, || {
                    format!("an event of type {raw_type}: Perfetto's parser does nothing with it")
                });
            }
        }
        if let Some(event_type) = event_type {
            self.thread_slices(offset, thread, ts, event_type, complete_end);
        }
        let reports_drop = name == StringTag::Drop
            || args
                .iter()
                .any(|a| a.name == StringTag::Drop && a.nonzero_number);
        if reports_drop {
            self.tally().drop_shown = true;
        }
        Ok(())
    }

    /// Follows the duration slices open on each thread track, as far as flow events need
    /// them. Perfetto sorts events by time; a thread's events are taken in file order, which
    /// is time order for a thread written by one provider.
    fn thread_slices(
        &mut self,
        offset: u64,
        (pid, tid): (u64, u64),
        ts: i64,
        event_type: EventType,
        complete_end: Option<i64>,
    ) {
        // Perfetto's thread track: UpdateThread(uint32 tid, uint32 pid).
        let slices = self.slices.entry((pid as u32, tid as u32)).or_default();
        // A complete slice is closed by the first event at or after its end.
        slices.completes.retain(|&(_, end)| end > ts);
        match event_type {
            EventType::DurationBegin => slices.open_begins += 1,
            EventType::DurationEnd => {
                if slices.open_begins == 0 {
                    self.add(FindingKind::UnmatchedDurationEnd, offset, || {
                        format!(
                            "a duration end on thread {tid} (pid {pid}) at {ts} ns with no \
                             duration begin open: Perfetto drops it"
                        )
                    });
                } else {
                    slices.open_begins -= 1;
                }
            }
            EventType::DurationComplete => {
                if let Some(end) = complete_end.filter(|&end| end > ts) {
                    slices.completes.push((ts, end));
                }
            }
            EventType::FlowBegin | EventType::FlowStep | EventType::FlowEnd => {
                let enclosed = slices.open_begins > 0
                    || slices.completes.iter().any(|&(start, _)| start <= ts);
                if !enclosed {
                    self.add(FindingKind::FlowWithoutEnclosingSlice, offset, || {
                        format!(
                            "a flow event on thread {tid} (pid {pid}) at {ts} ns with no \
                             duration slice open there: Perfetto binds flows to the enclosing \
                             slice and drops this one (flow_no_enclosing_slice)"
                        )
                    });
                }
            }
            _ => {}
        }
    }

    fn blob(&mut self, offset: u64, header: u64) {
        let blob_type = BlobType(BlobRecord::BLOB_TYPE.get(header) as u8);
        match blob_type {
            BlobType::LAST_BRANCH => self.add(FindingKind::LbrBlobSkipped, offset, || {
                "a LAST_BRANCH blob: Perfetto skips it (`fxtrace report lbr` reads it)".into()
            }),
            BlobType::PERFETTO => self.add(FindingKind::PerfettoBlob, offset, || {
                "a blob of type 3 (Perfetto): Perfetto parses its payload as protobuf \
                 TracePackets at the end of each chunk; anything else there is an import error"
                    .into()
            }),
            other => self.add(FindingKind::BlobSkipped, offset, || {
                format!("a blob of type {other}: Perfetto skips it")
            }),
        }
    }

    fn kernel_object(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let header = c.header();
        let Some(koid) = c.word() else {
            return Err(self.malformed(offset, "a Kernel Object record"));
        };
        self.string_ref(
            offset,
            c,
            KernelObjectRecord::NAME_REF.get(header),
            "a Kernel Object's name",
            "Perfetto drops the record (the name is lost)",
        )?;
        let object_type = ObjectType(KernelObjectRecord::OBJECT_TYPE.get(header) as u8);
        match object_type {
            ObjectType::PROCESS => self.koid(offset, "process", koid),
            ObjectType::THREAD => {
                self.koid(offset, "thread", koid);
                let count = KernelObjectRecord::ARGUMENT_COUNT.get(header);
                let args = self.args(
                    offset,
                    c,
                    count,
                    "a thread's Kernel Object record",
                    "Perfetto loses the argument (a lost \"process\" leaves the thread in \
                     process 0)",
                )?;
                let mut pid = 0;
                for a in args.iter().filter(|a| a.name == StringTag::Process) {
                    let Some(p) = a.koid else {
                        let kind = a.kind.map_or("unknown", ArgType::name);
                        self.add(FindingKind::WrongArgType, offset, || {
                            format!(
                                "thread {koid}'s \"process\" argument is of type {kind}, not \
                                 koid: Perfetto drops the record (the thread's name is lost)"
                            )
                        });
                        return Err(Dropped);
                    };
                    pid = p;
                }
                self.koid(offset, "process", pid);
                self.process_of.insert(koid, pid);
                if pid == 0 && koid != 0 {
                    self.without_process(offset, koid, "its name record has no \"process\" koid");
                }
            }
            other => self.add(FindingKind::KernelObjectSkipped, offset, || {
                format!(
                    "a Kernel Object of type {other}: Perfetto imports only processes and threads"
                )
            }),
        }
        Ok(())
    }

    fn without_process(&mut self, offset: u64, tid: u64, why: &str) {
        if !self.reported_without_process.insert(tid) {
            return;
        }
        self.add(FindingKind::ThreadWithoutProcess, offset, || {
            format!(
                "thread {tid}: {why}; Perfetto attributes it to process 0, apart from the \
                 events that carry its real pid"
            )
        });
    }

    fn scheduling(&mut self, offset: u64, c: &mut Cursor<'_>) -> Result<(), Dropped> {
        let header = c.header();
        let raw = SchedulingRecord::SCHEDULING_TYPE.get(header) as u8;
        let Some(kind) = SchedulingType::from_raw(raw) else {
            self.add(FindingKind::UnknownEventType, offset, || {
                format!("a scheduling record of type {raw}: Perfetto skips it")
            });
            return Ok(());
        };
        let ts = self.timestamp(offset, c, "a scheduling record's timestamp")?;
        match kind {
            SchedulingType::LegacyContextSwitch => {
                let refs = [
                    ContextSwitchRecord::OUTGOING_THREAD_REF.get(header),
                    ContextSwitchRecord::INCOMING_THREAD_REF.get(header),
                ];
                let priorities = [
                    ContextSwitchRecord::OUTGOING_PRIORITY.get(header),
                    ContextSwitchRecord::INCOMING_PRIORITY.get(header),
                ];
                let mut tids = [0; 2];
                for (i, side) in SIDES.iter().enumerate() {
                    let field = format!("a context switch's {side} thread");
                    tids[i] = self.thread_ref(offset, c, refs[i], &field)?.1;
                }
                for i in 0..2 {
                    self.legacy_side(offset, SIDES[i], tids[i], priorities[i]);
                }
            }
            SchedulingType::ContextSwitch => {
                let (Some(outgoing), Some(incoming)) = (c.word(), c.word()) else {
                    return Err(self.malformed(offset, "a context switch (type 1)"));
                };
                let count = SchedContextSwitchRecord::ARGUMENT_COUNT.get(header);
                let args = self.args(
                    offset,
                    c,
                    count,
                    "a context switch (type 1)",
                    "Perfetto drops the record",
                )?;
                let mut weights = [0i32; 2];
                for a in &args {
                    let i = match a.name {
                        StringTag::OutgoingWeight => 0,
                        StringTag::IncomingWeight => 1,
                        _ => continue,
                    };
                    weights[i] = self.i32_weight(offset, a, SIDES[i])?;
                }
                for (i, tid) in [outgoing, incoming].into_iter().enumerate() {
                    self.koid(offset, "thread", tid);
                    self.weighted_side(offset, SIDES[i], tid, weights[i]);
                }
            }
            SchedulingType::ThreadWakeup => {
                let Some(tid) = c.word() else {
                    return Err(self.malformed(offset, "a thread wakeup"));
                };
                let count = SchedThreadWakeupRecord::ARGUMENT_COUNT.get(header);
                let args = self.args(
                    offset,
                    c,
                    count,
                    "a thread wakeup",
                    "Perfetto drops the record",
                )?;
                let mut weight = 0;
                for a in &args {
                    match a.name {
                        StringTag::Weight => weight = self.i32_weight(offset, a, "woken")?,
                        StringTag::Waker => match a.koid {
                            Some(waker) => self.koid(offset, "waker", waker),
                            None => {
                                self.add(FindingKind::WrongArgType, offset, || {
                                    "a thread wakeup's \"waker\" argument is not a koid: \
                                     Perfetto drops the record"
                                        .into()
                                });
                                return Err(Dropped);
                            }
                        },
                        _ => {}
                    }
                }
                self.koid(offset, "thread", tid);
                if weight != PERFETTO_IDLE_WEIGHT && tid != 0 {
                    self.check_process(offset, tid);
                }
            }
        }
        let id = self.current;
        match self.tally().last_sched {
            Some((last, at)) if ts < last => {
                self.add(FindingKind::SchedOutOfOrder, offset, || {
                    format!(
                        "a scheduling record at {ts} ns comes after one at {last} ns (@{at}) in \
                         provider {id}: Perfetto versions that apply context switches in file \
                         order (the tokenizer, before they went through the sorter) get \
                         negative durations and unsorted scheduling tables"
                    )
                });
            }
            _ => self.tally().last_sched = Some((ts, offset)),
        }
        Ok(())
    }

    fn i32_weight(&mut self, offset: u64, a: &ArgInfo, side: &str) -> Result<i32, Dropped> {
        match (a.kind, a.i32_value) {
            (Some(ArgType::I32), Some(v)) => Ok(v),
            _ => {
                let kind = a.kind.map_or("unknown", ArgType::name);
                self.add(FindingKind::WrongArgType, offset, || {
                    format!(
                        "the {side} weight argument is of type {kind}, not i32: Perfetto drops \
                         the record"
                    )
                });
                Err(Dropped)
            }
        }
    }

    /// One side of a legacy context switch: Perfetto calls it idle when the thread's process
    /// (from Kernel Object records, not from the record) is 0 and its priority is 0.
    fn legacy_side(&mut self, offset: u64, side: &str, tid: u64, priority: u64) {
        let pid = self.process_of.get(&tid).copied().unwrap_or(0);
        let idle = pid == 0 && priority == 0;
        if tid == 0 {
            if !idle {
                self.add(FindingKind::IdleNotRecognized, offset, || {
                    format!(
                        "the {side} thread is tid 0 (idle) with priority {priority}: Perfetto \
                         recognises the idle thread in this layout only by priority 0 and no \
                         process, so it records tid 0 as a thread that runs (no CPU idle \
                         transitions)"
                    )
                });
            }
        } else if idle {
            self.add(FindingKind::ThreadTakenForIdle, offset, || {
                format!(
                    "the {side} thread {tid} has priority 0 and no Kernel Object record with \
                     its \"process\" koid before this point: Perfetto takes it for the idle \
                     thread and drops this side of the switch"
                )
            });
        } else {
            self.check_process(offset, tid);
        }
    }

    /// One side of a type-1 context switch: idle when its weight is INT32_MIN.
    fn weighted_side(&mut self, offset: u64, side: &str, tid: u64, weight: i32) {
        let idle = weight == PERFETTO_IDLE_WEIGHT;
        if tid == 0 && !idle {
            self.add(FindingKind::IdleNotRecognized, offset, || {
                format!(
                    "the {side} thread is tid 0 (idle) without an {side}_weight of INT32_MIN: \
                     Perfetto records tid 0 as a thread that runs (no CPU idle transitions)"
                )
            });
        } else if tid != 0 && !idle {
            self.check_process(offset, tid);
        }
    }

    fn check_process(&mut self, offset: u64, tid: u64) {
        if self.process_of.get(&tid).copied().unwrap_or(0) == 0 {
            self.without_process(
                offset,
                tid,
                "it is switched or woken before any Kernel Object record gives its \"process\" \
                 koid (Perfetto takes a switched thread's process only from there)",
            );
        }
    }
}

fn add(
    findings: &mut BTreeMap<FindingKind, Finding>,
    kind: FindingKind,
    offset: u64,
    message: impl FnOnce() -> String,
) {
    let finding = findings.entry(kind).or_insert_with(|| Finding {
        kind,
        offset,
        offsets: Vec::new(),
        count: 0,
        message: message(),
    });
    finding.count += 1;
    if finding.offsets.len() < MAX_OFFSETS && finding.offsets.last() != Some(&offset) {
        finding.offsets.push(offset);
    }
}

/// Reads an FXT archive as Perfetto's FXT importer would and reports every place where the
/// importer stops, drops, misattributes or skips something (see the module docs). Reads one
/// record at a time: memory stays bounded by the largest record (large records are skipped,
/// not held) plus the per-provider tables.
pub fn check_for_perfetto<R: Read>(reader: R) -> Result<PerfettoReport, PerfettoCheckError> {
    let mut input = Input { reader, offset: 0 };
    let mut checker = Checker::new();
    checker.run(&mut input)?;
    Ok(checker.finish(input.offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_to_ns_matches_perfetto_arithmetic() {
        // 1 tick = 1 ns: identity, up to i64::MAX.
        assert_eq!(perfetto_ticks_to_ns(12_345, 1_000_000_000), Some(12_345));
        assert_eq!(
            perfetto_ticks_to_ns(i64::MAX as u64, 1_000_000_000),
            Some(i64::MAX)
        );
        assert_eq!(perfetto_ticks_to_ns(1 << 63, 1_000_000_000), None);
        assert_eq!(perfetto_ticks_to_ns(5, 0), None);
        // 2 GHz: exact below 2^32 ticks.
        assert_eq!(perfetto_ticks_to_ns(4_000, 2_000_000_000), Some(2_000));
        // 3 GHz above 2^32 ticks: the high part goes through the truncated factor
        // floor(1e9 * 2^32 / 3e9) = 1431655765, not 1431655765.33.
        let ticks = (5u64 << 32) + 3_000;
        assert_eq!(
            perfetto_ticks_to_ns(ticks, 3_000_000_000),
            Some(5 * 1_431_655_765 + 1_000)
        );
        // A slow clock overflows the high part's multiplication.
        assert_eq!(perfetto_ticks_to_ns(u64::MAX, 1_000), None);
    }

    #[test]
    fn string_tags() {
        assert_eq!(StringTag::of(b"process"), StringTag::Process);
        assert_eq!(StringTag::of(b"processes"), StringTag::Other);
        assert_eq!(
            StringTag::of(b"fxtrace: 3 records Dropped"),
            StringTag::Drop
        );
        assert_eq!(StringTag::of(b"lost_samples"), StringTag::Drop);
        assert_eq!(StringTag::of(b""), StringTag::Other);
    }

    #[test]
    fn kinds_are_named_and_sourced() {
        let mut names = HashSet::new();
        for kind in FindingKind::ALL {
            assert!(names.insert(kind.name()), "{kind:?}");
            assert!(!kind.perfetto_source().is_empty());
        }
        assert_eq!(FindingKind::ZeroSizeRecord.severity(), Severity::Error);
        assert_eq!(FindingKind::SchedOutOfOrder.severity(), Severity::Warning);
        assert_eq!(FindingKind::LbrBlobSkipped.severity(), Severity::Note);
        assert!(Severity::Note < Severity::Warning && Severity::Warning < Severity::Error);
    }
}

//! What the check reports: severities, kinds of finding, findings gathered by kind, the
//! report, and the errors that stop a check.

use std::fmt;
use std::io;

use thiserror::Error;

use super::MAX_OFFSETS;

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
    /// An async end with no async begin open on its track (name, process, id): Perfetto
    /// drops it (a wrapped circular buffer, or a trace started late, lost the begin).
    UnmatchedAsyncEnd = Warning, "unmatched_async_end",
        "slice_tracker.cc SliceTracker::End; fuchsia_trace_parser.cc kAsyncEnd \
         (InternLegacyAsyncTrack)";
    /// An async begin never ended: Perfetto shows a slice that did not end (the trace
    /// stopped first, or a full buffer dropped the end).
    UnendedAsyncBegin = Warning, "unended_async_begin",
        "slice_tracker.cc SliceTracker::Begin (no End: the slice keeps duration -1); \
         fuchsia_trace_parser.cc kAsyncBegin";
    /// Records beyond the check's own bounds (threads with open slices, open async slices,
    /// thread processes): not followed, so findings about them may be missing.
    NotFollowed = Note, "not_followed",
        "fxtrace's check: bounded memory for crafted input (not a Perfetto habit)";
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
    /// A context switch whose outgoing state is not one of the six FXT states: Perfetto's
    /// `IdForOutgoingThreadState` gives no state (a null string) to the thread's state row.
    UnknownThreadState = Warning, "unknown_thread_state",
        "fuchsia_trace_parser.cc IdForOutgoingThreadState (default: kNullStringId)";
    /// A thread whose process Perfetto does not know where it needs it (scheduling records,
    /// a thread name without `"process"`): attributed to process 0.
    ThreadWithoutProcess = Warning, "thread_without_process",
        "fuchsia_trace_parser.cc SwitchFrom/SwitchTo (thread->info.pid)";
    /// A thread wakeup without a `waker` argument: Perfetto records the woken thread as its
    /// own waker (a wake-up by a timer or a timeout, in Zircon's terms).
    WakeupWithoutWaker = Note, "wakeup_without_waker",
        "fuchsia_trace_parser.cc Wake (waker_utid.value_or(utid))";
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

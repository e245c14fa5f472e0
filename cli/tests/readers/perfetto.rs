//! `fxtrace_tools::check::perfetto`: hand-built traces with each habit of Perfetto's FXT importer
//! broken are flagged at the offset of the record concerned, with the right severity; the
//! `write_all_records` example's trace gets notes and design-intended warnings but no error;
//! a system-wide `fxtrace record` trace has no error (root only); `fxtrace check` prints the
//! report and exits non-zero on violations only.

use crate::write_all_records;

use std::collections::BTreeSet;
use std::process::Command;

use fxtrace::capture::PerfPermissions;
use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::{
    Arg, ArgValue, Blob, BlobType, ContextSwitch, Encode, Event, EventKind, Initialization,
    KernelObject, LargeBlob, Log, ObjectType, ProcessRef, ProviderEvent, ProviderInfo,
    ProviderSection, Record, RecordWriter, SchedContextSwitch, SchedThreadWakeup, StringRecord,
    StringRef, ThreadRecord, ThreadRef, ThreadState, UserspaceObject,
    PROVIDER_EVENT_BUFFER_OVERFLOW,
};
use fxtrace_tools::check::perfetto::{
    check_for_perfetto, perfetto_ticks_to_ns, FindingKind, PerfettoReport, Severity,
    PERFETTO_IDLE_WEIGHT,
};

const GHZ2: u64 = 2_000_000_000;
const THREAD: ThreadRef = ThreadRef::Inline { pid: 10, tid: 11 };

/// A trace writer that knows the byte offset of the next record.
struct Trace(RecordWriter);

impl Trace {
    /// Magic number, provider 1 "p" at 2 GHz, and the process and thread of [`THREAD`].
    fn new() -> Self {
        let mut t = Trace(RecordWriter::with_magic());
        t.push(&ProviderInfo {
            provider_id: 1,
            name: "p",
        });
        t.push(&Initialization {
            ticks_per_second: GHZ2,
        });
        t.push(&KernelObject {
            koid: 10,
            object_type: ObjectType::PROCESS,
            name: "proc".into(),
            args: &[],
        });
        let args = [Arg::new("process", ArgValue::Koid(10))];
        t.push(&KernelObject {
            koid: 11,
            object_type: ObjectType::THREAD,
            name: "main".into(),
            args: &args,
        });
        t
    }

    /// Magic number only.
    fn bare() -> Self {
        Trace(RecordWriter::with_magic())
    }

    /// Appends a record; returns its offset.
    fn push<R: Encode + ?Sized>(&mut self, record: &R) -> u64 {
        let offset = self.offset();
        self.0.push(record).expect("record encodes");
        offset
    }

    fn offset(&self) -> u64 {
        self.0.words().len() as u64 * 8
    }

    fn instant(&mut self, ticks: u64, name: &str, args: &[Arg<'_>]) -> u64 {
        self.push(&Event {
            ticks,
            thread: THREAD,
            category: "cat".into(),
            name: name.into(),
            args,
            kind: EventKind::Instant,
        })
    }

    fn switch(&mut self, ticks: u64, out: (u64, u8), incoming: (u64, u8)) -> u64 {
        self.push(&ContextSwitch {
            ticks,
            cpu: 0,
            outgoing_state: ThreadState::Blocked,
            outgoing: ThreadRef::Inline {
                pid: if out.0 == 0 { 0 } else { 10 },
                tid: out.0,
            },
            incoming: ThreadRef::Inline {
                pid: if incoming.0 == 0 { 0 } else { 10 },
                tid: incoming.0,
            },
            outgoing_priority: out.1,
            incoming_priority: incoming.1,
        })
    }

    fn bytes(&self) -> Vec<u8> {
        self.0.to_bytes()
    }

    fn check(&self) -> PerfettoReport {
        check(&self.bytes())
    }
}

fn check(bytes: &[u8]) -> PerfettoReport {
    check_for_perfetto(bytes).expect("reading a slice cannot fail")
}

/// Asserts that `kind` was found first at `offset`, with its severity, and returns its count.
fn flagged(report: &PerfettoReport, kind: FindingKind, offset: u64) -> u64 {
    let f = report
        .find(kind)
        .unwrap_or_else(|| panic!("{kind} not found in:\n{report}"));
    assert_eq!(f.offset, offset, "{kind} offset in:\n{report}");
    assert_eq!(f.offsets[0], offset);
    assert_eq!(f.severity(), kind.severity());
    f.count
}

fn kinds(report: &PerfettoReport, severity: Severity) -> BTreeSet<FindingKind> {
    report
        .findings
        .iter()
        .filter(|f| f.severity() == severity)
        .map(|f| f.kind)
        .collect()
}

#[test]
fn a_well_formed_trace_has_no_finding() {
    let mut t = Trace::new();
    t.push(&StringRecord {
        index: 1,
        value: "indexed",
    });
    t.push(&ThreadRecord {
        index: 1,
        pid: 10,
        tid: 11,
    });
    t.push(&Event {
        ticks: 100,
        thread: ThreadRef::Index(1),
        category: StringRef::Index(1),
        name: StringRef::Empty,
        args: &[Arg::new(StringRef::Index(1), ArgValue::Bool(true))],
        kind: EventKind::DurationBegin,
    });
    t.instant(150, "counter-ish", &[Arg::new("v", ArgValue::F64(1.5))]);
    t.switch(160, (0, 0), (11, 120));
    t.switch(170, (11, 120), (0, 0));
    t.push(&Event {
        ticks: 200,
        thread: ThreadRef::Index(1),
        category: StringRef::Index(1),
        name: StringRef::Empty,
        args: &[],
        kind: EventKind::DurationEnd,
    });
    let report = t.check();
    assert!(report.findings.is_empty(), "{report}");
    assert!(!report.has_violations());
    assert_eq!(report.worst(), None);
    assert_eq!(report.bytes, t.bytes().len() as u64);
    assert_eq!(report.records, 12);
    assert_eq!(report.import_stops_at, None);
}

#[test]
fn a_zero_header_word_stops_the_import() {
    let mut t = Trace::new();
    t.instant(100, "before", &[]);
    let at = t.offset();
    let mut bytes = t.bytes();
    bytes.extend_from_slice(&[0; 8]);
    // Records after the zero word are never read by Perfetto (nor by the checker).
    let mut after = RecordWriter::new();
    after
        .push(&Blob {
            name: "cpu0".into(),
            blob_type: BlobType::LAST_BRANCH,
            payload: &[1; 8],
        })
        .unwrap();
    bytes.extend(after.to_bytes());
    let report = check(&bytes);
    assert_eq!(flagged(&report, FindingKind::ZeroSizeRecord, at), 1);
    assert_eq!(report.import_stops_at, Some(at));
    assert!(report.find(FindingKind::LbrBlobSkipped).is_none());
    assert!(report
        .find(FindingKind::ZeroSizeRecord)
        .unwrap()
        .message
        .contains("zero header"));
    assert_eq!(report.worst(), Some(Severity::Error));

    // A non-zero header with a size field of 0 stops it too.
    let mut bytes = Trace::new().bytes();
    let at = bytes.len() as u64;
    bytes.extend_from_slice(&0x0000_0000_0001_0004u64.to_ne_bytes());
    let report = check(&bytes);
    flagged(&report, FindingKind::ZeroSizeRecord, at);
}

#[test]
fn a_file_without_the_magic_number_is_not_fxt() {
    let report = check(&[]);
    flagged(&report, FindingKind::NotFxt, 0);
    assert_eq!(report.import_stops_at, Some(0));
    let mut t = Trace::new();
    t.instant(1, "x", &[]);
    let report = check(&t.bytes()[8..]);
    flagged(&report, FindingKind::NotFxt, 0);
    assert_eq!(report.records, 0);
}

#[test]
fn large_records_are_skipped_below_4096_words_and_misframed_above() {
    let mut t = Trace::new();
    let small = t.push(&LargeBlob {
        category: StringRef::Empty,
        name: "small".into(),
        metadata: None,
        payload: &[7; 100],
    });
    // 3 words of header, format word and size, then 4093 payload words: 4096, whose low
    // 12 bits are 0.
    let big = t.push(&LargeBlob {
        category: StringRef::Empty,
        name: StringRef::Empty,
        metadata: None,
        payload: &[1; 4097 * 8],
    });
    let after = t.instant(100, "after", &[]);
    let report = t.check();
    flagged(&report, FindingKind::LargeRecordSkipped, small);
    let f = report.find(FindingKind::LargeRecordMisframed).unwrap();
    assert_eq!((f.offset, f.severity()), (big, Severity::Error));
    assert!(f.message.contains("4100 words"), "{}", f.message);
    assert!(f.message.contains("(4 words)"), "{}", f.message);
    // The checker goes on with the true framing: the event after it is read, and fine.
    assert_eq!(report.import_stops_at, None);
    assert_eq!(report.records, 8);
    assert!(after > big);
    assert_eq!(
        kinds(&report, Severity::Error),
        BTreeSet::from([FindingKind::LargeRecordMisframed])
    );

    let mut t = Trace::new();
    let exact = t.push(&LargeBlob {
        category: StringRef::Empty,
        name: StringRef::Empty,
        metadata: None,
        payload: &[1; 4093 * 8],
    });
    let report = t.check();
    flagged(&report, FindingKind::ZeroSizeRecord, exact);
    assert!(report.findings[0].message.contains("4096 words"));
    assert_eq!(report.import_stops_at, Some(exact));
}

#[test]
fn a_record_cut_off_by_the_end_of_the_file_is_flagged() {
    let mut t = Trace::new();
    let last = t.instant(100, "last", &[]);
    let bytes = t.bytes();
    let report = check(&bytes[..bytes.len() - 8]);
    flagged(&report, FindingKind::TruncatedRecord, last);
    let report = check(&bytes[..last as usize + 3]);
    flagged(&report, FindingKind::TruncatedRecord, last);
}

#[test]
fn context_switches_out_of_time_order_within_a_provider() {
    let mut t = Trace::new();
    t.switch(1_000, (11, 120), (12, 120));
    t.switch(2_000, (12, 120), (11, 120));
    let late = t.switch(1_500, (11, 120), (12, 120));
    t.switch(3_000, (12, 120), (11, 120));
    let later = t.switch(2_500, (11, 120), (12, 120));
    let report = t.check();
    assert_eq!(flagged(&report, FindingKind::SchedOutOfOrder, late), 2);
    assert_eq!(
        report.find(FindingKind::SchedOutOfOrder).unwrap().offsets,
        vec![late, later]
    );
    assert_eq!(report.worst(), Some(Severity::Warning));

    // Another provider's clock is its own: its earlier switches are not out of order.
    let mut t = Trace::new();
    t.switch(10_000, (11, 120), (12, 120));
    t.push(&ProviderInfo {
        provider_id: 2,
        name: "q",
    });
    t.push(&Initialization {
        ticks_per_second: GHZ2,
    });
    t.switch(20, (11, 120), (12, 120));
    assert!(t.check().find(FindingKind::SchedOutOfOrder).is_none());
}

#[test]
fn drops_need_an_event_perfetto_shows() {
    let overflow = ProviderEvent {
        provider_id: 1,
        event: PROVIDER_EVENT_BUFFER_OVERFLOW,
    };
    let mut t = Trace::new();
    t.instant(10, "work", &[Arg::new("dropped_records", ArgValue::U64(0))]);
    let at = t.push(&overflow);
    let report = t.check();
    flagged(&report, FindingKind::DropsOnlyInMetadata, at);
    flagged(&report, FindingKind::ProviderEventIgnored, at);

    for visible in [
        ("fxtrace: 3 records dropped", None),
        ("fxtrace: 12 perf records LOST", None),
        ("fxtrace: summary", Some(ArgValue::U64(3))),
        ("fxtrace: summary", Some(ArgValue::I32(-1))),
    ] {
        let mut t = Trace::new();
        let args: Vec<Arg<'_>> = visible
            .1
            .map(|v| Arg::new("dropped_records", v))
            .into_iter()
            .collect();
        t.instant(10, visible.0, &args);
        t.push(&overflow);
        let report = t.check();
        assert!(
            report.find(FindingKind::DropsOnlyInMetadata).is_none(),
            "{visible:?}: {report}"
        );
        assert!(!report.has_violations(), "{report}");
    }

    // The visible event must be in the section of the provider that overflowed.
    let mut t = Trace::new();
    t.push(&ProviderInfo {
        provider_id: 2,
        name: "q",
    });
    t.push(&Initialization {
        ticks_per_second: GHZ2,
    });
    t.instant(10, "fxtrace: 3 records dropped", &[]);
    let at = t.push(&overflow);
    flagged(&t.check(), FindingKind::DropsOnlyInMetadata, at);

    // Or the trace manager's marker, in its own section (provider 0), naming the provider.
    for (about, shown) in [(1, true), (2, false)] {
        let mut t = Trace::new();
        let at = t.push(&overflow);
        t.push(&ProviderInfo {
            provider_id: 0,
            name: "fxtrace",
        });
        t.push(&Initialization {
            ticks_per_second: GHZ2,
        });
        let args = [
            Arg::new("provider", ArgValue::U64(about)),
            Arg::new("records_dropped", ArgValue::U64(3)),
        ];
        t.instant(10, "fxtrace: 3 records dropped", &args);
        let report = t.check();
        if shown {
            let found = report.find(FindingKind::DropsOnlyInMetadata);
            assert!(found.is_none(), "{report}");
        } else {
            flagged(&report, FindingKind::DropsOnlyInMetadata, at);
        }
    }
}

#[test]
fn provider_state_follows_perfettos_rules() {
    // A second Provider Info empties the tables: string 1 is unknown afterwards.
    let mut t = Trace::new();
    t.push(&StringRecord {
        index: 1,
        value: "cat",
    });
    let again = t.push(&ProviderInfo {
        provider_id: 1,
        name: "p",
    });
    let event = t.push(&Event {
        ticks: 10,
        thread: THREAD,
        category: StringRef::Index(1),
        name: "e".into(),
        args: &[],
        kind: EventKind::Instant,
    });
    let report = t.check();
    flagged(&report, FindingKind::ProviderInfoRepeated, again);
    flagged(&report, FindingKind::UnknownStringRef, event);
    // ... and ticks per second is back to 1e9.
    flagged(&report, FindingKind::MissingInitialization, event);

    // A section for a provider no Provider Info introduced: Perfetto has no provider.
    let mut t = Trace::new();
    t.push(&Record::ProviderSection(ProviderSection { provider_id: 9 }));
    let first = t.instant(10, "lost", &[]);
    t.instant(20, "lost too", &[]);
    t.push(&Record::ProviderSection(ProviderSection { provider_id: 1 }));
    t.instant(30, "fine", &[]);
    let report = t.check();
    assert_eq!(
        flagged(&report, FindingKind::RecordWithoutProvider, first),
        2
    );

    // Records before any provider metadata belong to provider 0 (registered up front), at
    // 1 tick = 1 ns.
    let mut t = Trace::bare();
    let event = t.instant(10, "early", &[]);
    let report = t.check();
    flagged(&report, FindingKind::MissingInitialization, event);
    assert!(report.find(FindingKind::RecordWithoutProvider).is_none());

    // Thread indices come from the current provider's table.
    let mut t = Trace::new();
    let unknown = t.push(&Event {
        ticks: 10,
        thread: ThreadRef::Index(3),
        category: "c".into(),
        name: "e".into(),
        args: &[],
        kind: EventKind::Instant,
    });
    flagged(&t.check(), FindingKind::UnknownThreadRef, unknown);
}

#[test]
fn flows_need_an_enclosing_slice() {
    let mut t = Trace::new();
    let event = |t: &mut Trace, ticks, kind| {
        t.push(&Event {
            ticks,
            thread: THREAD,
            category: "c".into(),
            name: "e".into(),
            args: &[],
            kind,
        })
    };
    event(&mut t, 100, EventKind::DurationBegin);
    event(&mut t, 150, EventKind::FlowBegin { id: 1 });
    event(&mut t, 200, EventKind::DurationEnd);
    let outside = event(&mut t, 250, EventKind::FlowStep { id: 1 });
    event(&mut t, 300, EventKind::DurationComplete { end_ticks: 400 });
    event(&mut t, 350, EventKind::FlowStep { id: 1 });
    let at_end = event(&mut t, 400, EventKind::FlowEnd { id: 1 });
    let unmatched = event(&mut t, 500, EventKind::DurationEnd);
    let report = t.check();
    assert_eq!(
        flagged(&report, FindingKind::FlowWithoutEnclosingSlice, outside),
        2
    );
    assert_eq!(
        report
            .find(FindingKind::FlowWithoutEnclosingSlice)
            .unwrap()
            .offsets,
        vec![outside, at_end]
    );
    assert_eq!(
        flagged(&report, FindingKind::UnmatchedDurationEnd, unmatched),
        1
    );
    // The flow is lost: an error, as trace_processor's stat is.
    assert_eq!(
        FindingKind::FlowWithoutEnclosingSlice.severity(),
        Severity::Error
    );
    // The same flow on another thread's track has no slice either.
    let mut t = Trace::new();
    t.instant(100, "x", &[]);
    let other = t.push(&Event {
        ticks: 150,
        thread: ThreadRef::Inline { pid: 10, tid: 12 },
        category: "c".into(),
        name: "f".into(),
        args: &[],
        kind: EventKind::FlowBegin { id: 2 },
    });
    flagged(&t.check(), FindingKind::FlowWithoutEnclosingSlice, other);
}

#[test]
fn timestamps_perfetto_refuses() {
    let mut t = Trace::new();
    // At 2 GHz every tick count fits i64 nanoseconds; at 1 GHz the top half does not.
    t.push(&Initialization {
        ticks_per_second: 1_000_000_000,
    });
    let fits = t.instant(i64::MAX as u64, "last ns", &[]);
    let overflow = t.instant(1 << 63, "far", &[]);
    let backwards = t.push(&Event {
        ticks: 1_000,
        thread: THREAD,
        category: "c".into(),
        name: "backwards".into(),
        args: &[],
        kind: EventKind::DurationComplete { end_ticks: 500 },
    });
    let zero_rate = t.push(&Initialization {
        ticks_per_second: 0,
    });
    let after = t.instant(10, "after", &[]);
    let report = t.check();
    assert_eq!(
        flagged(&report, FindingKind::TimestampOverflow, overflow),
        2
    );
    assert_eq!(
        report.find(FindingKind::TimestampOverflow).unwrap().offsets,
        vec![overflow, after]
    );
    flagged(&report, FindingKind::NegativeDuration, backwards);
    flagged(&report, FindingKind::ZeroTicksPerSecond, zero_rate);
    assert!(fits < overflow);
    assert_eq!(perfetto_ticks_to_ns(u64::MAX, GHZ2), Some(i64::MAX));
}

#[test]
fn idle_and_thread_processes_in_context_switches() {
    let mut t = Trace::new();
    // tid 0 with a nonzero priority: not idle to Perfetto.
    let idle = t.switch(100, (11, 120), (0, 120));
    // tid 12 at priority 0 with no Kernel Object: taken for the idle thread.
    let rt = t.switch(200, (0, 0), (12, 0));
    // tid 13 with no Kernel Object: process 0.
    let orphan = t.switch(300, (12, 0), (13, 120));
    let report = t.check();
    flagged(&report, FindingKind::IdleNotRecognized, idle);
    flagged(&report, FindingKind::ThreadTakenForIdle, rt);
    flagged(&report, FindingKind::ThreadWithoutProcess, orphan);

    // Named with their process before the switch, the same threads are fine.
    let mut t = Trace::new();
    for tid in [12, 13] {
        let args = [Arg::new("process", ArgValue::Koid(10))];
        t.push(&KernelObject {
            koid: tid,
            object_type: ObjectType::THREAD,
            name: "worker".into(),
            args: &args,
        });
    }
    t.switch(200, (0, 0), (12, 0));
    t.switch(300, (12, 0), (13, 120));
    assert!(t.check().findings.is_empty(), "{}", t.check());

    // Type 1: idle is a weight of INT32_MIN; weights must be i32.
    let mut t = Trace::new();
    let idle_weight = [Arg::new(
        "incoming_weight",
        ArgValue::I32(PERFETTO_IDLE_WEIGHT),
    )];
    t.push(&SchedContextSwitch {
        ticks: 100,
        cpu: 300,
        outgoing_state: ThreadState::Blocked,
        outgoing_tid: 11,
        incoming_tid: 0,
        args: &idle_weight,
    });
    let unweighted = t.push(&SchedContextSwitch {
        ticks: 200,
        cpu: 300,
        outgoing_state: ThreadState::Blocked,
        outgoing_tid: 0,
        incoming_tid: 11,
        args: &[],
    });
    let bad_weight = [Arg::new("outgoing_weight", ArgValue::U32(3))];
    let wrong = t.push(&SchedContextSwitch {
        ticks: 300,
        cpu: 300,
        outgoing_state: ThreadState::Blocked,
        outgoing_tid: 11,
        incoming_tid: 11,
        args: &bad_weight,
    });
    let report = t.check();
    assert_eq!(
        flagged(&report, FindingKind::IdleNotRecognized, unweighted),
        1
    );
    flagged(&report, FindingKind::WrongArgType, wrong);
}

/// Outgoing states as Perfetto names them (`IdForOutgoingThreadState`: 0 to 5), and wake-ups
/// with and without a waker.
#[test]
fn thread_states_and_wakeups() {
    let mut t = Trace::new();
    // Every defined state is fine, running (a preempted thread, Perfetto's `R`) included.
    for (i, state) in [
        ThreadState::New,
        ThreadState::Running,
        ThreadState::Suspended,
        ThreadState::Blocked,
        ThreadState::Dying,
        ThreadState::Dead,
    ]
    .into_iter()
    .enumerate()
    {
        t.push(&ContextSwitch {
            ticks: 100 + i as u64,
            cpu: 0,
            outgoing_state: state,
            outgoing: THREAD,
            incoming: ThreadRef::Inline { pid: 0, tid: 0 },
            outgoing_priority: 120,
            incoming_priority: 0,
        });
    }
    let waker = [Arg::new("waker", ArgValue::Koid(11))];
    t.push(&SchedThreadWakeup {
        ticks: 200,
        cpu: 1,
        waking_tid: 11,
        args: &waker,
    });
    assert!(t.check().findings.is_empty(), "{}", t.check());
    // A state Perfetto has no name for: the thread's state row shows none.
    let mut header = t.bytes();
    let offset = t.push(&ContextSwitch {
        ticks: 300,
        cpu: 0,
        outgoing_state: ThreadState::Blocked,
        outgoing: THREAD,
        incoming: ThreadRef::Inline { pid: 0, tid: 0 },
        outgoing_priority: 120,
        incoming_priority: 0,
    });
    let mut record = t.bytes()[offset as usize..].to_vec();
    // Outgoing state [24 .. 27] from 3 to 9.
    record[3] = (record[3] & 0xf0) | 9;
    header.extend(record);
    let report = check(&header);
    flagged(&report, FindingKind::UnknownThreadState, offset);
    assert_eq!(
        report
            .find(FindingKind::UnknownThreadState)
            .unwrap()
            .severity(),
        Severity::Warning
    );
    // A wake-up without a waker: Perfetto makes the thread its own waker (a note).
    let mut t = Trace::new();
    let selfless = t.push(&SchedThreadWakeup {
        ticks: 200,
        cpu: 1,
        waking_tid: 11,
        args: &[],
    });
    let report = t.check();
    flagged(&report, FindingKind::WakeupWithoutWaker, selfless);
    assert_eq!(report.worst(), Some(Severity::Note));
    // A waker that is not a koid: the record is dropped.
    let mut t = Trace::new();
    let not_koid = [Arg::new("waker", ArgValue::U64(11))];
    let wrong = t.push(&SchedThreadWakeup {
        ticks: 200,
        cpu: 1,
        waking_tid: 11,
        args: &not_koid,
    });
    flagged(&t.check(), FindingKind::WrongArgType, wrong);
}

#[test]
fn kernel_objects_and_koids() {
    let mut t = Trace::new();
    let wide = t.push(&ThreadRecord {
        index: 1,
        pid: 10,
        tid: 1 << 32,
    });
    let not_koid = [Arg::new("process", ArgValue::U64(10))];
    let wrong = t.push(&KernelObject {
        koid: 12,
        object_type: ObjectType::THREAD,
        name: "t".into(),
        args: &not_koid,
    });
    let nameless = t.push(&KernelObject {
        koid: 13,
        object_type: ObjectType::THREAD,
        name: "no process".into(),
        args: &[],
    });
    let other = t.push(&KernelObject {
        koid: 14,
        object_type: ObjectType(17),
        name: "vmo".into(),
        args: &[],
    });
    let unknown_name = t.push(&KernelObject {
        koid: 15,
        object_type: ObjectType::PROCESS,
        name: StringRef::Index(40),
        args: &[],
    });
    let report = t.check();
    flagged(&report, FindingKind::KoidTooWide, wide);
    flagged(&report, FindingKind::WrongArgType, wrong);
    flagged(&report, FindingKind::ThreadWithoutProcess, nameless);
    flagged(&report, FindingKind::KernelObjectSkipped, other);
    flagged(&report, FindingKind::UnknownStringRef, unknown_name);
}

#[test]
fn what_perfetto_skips_is_noted() {
    let mut t = Trace::new();
    let blob_arg = t.instant(10, "e", &[Arg::new("data", ArgValue::Blob(&[1, 2, 3]))]);
    let counter = t.push(&Event {
        ticks: 20,
        thread: THREAD,
        category: "c".into(),
        name: "load".into(),
        args: &[
            Arg::new("value", ArgValue::U32(3)),
            Arg::new("flag", ArgValue::Bool(true)),
        ],
        kind: EventKind::Counter { id: 1 },
    });
    let lbr = t.push(&Blob {
        name: "cpu0".into(),
        blob_type: BlobType::LAST_BRANCH,
        payload: &[0; 16],
    });
    let data = t.push(&Blob {
        name: "raw".into(),
        blob_type: BlobType::DATA,
        payload: &[0; 3],
    });
    let log = t.push(&Log {
        ticks: 30,
        thread: THREAD,
        message: "hello",
    });
    let object = t.push(&UserspaceObject {
        pointer: 1,
        process: ProcessRef::Inline(10),
        name: "obj".into(),
        args: &[],
    });
    let report = t.check();
    flagged(&report, FindingKind::ArgTypeUnknown, blob_arg);
    flagged(&report, FindingKind::NonNumericCounterArg, counter);
    flagged(&report, FindingKind::LbrBlobSkipped, lbr);
    flagged(&report, FindingKind::BlobSkipped, data);
    flagged(&report, FindingKind::LogSkipped, log);
    flagged(&report, FindingKind::UserspaceObjectSkipped, object);
    assert_eq!(report.worst(), Some(Severity::Note));
    assert!(!report.has_violations());

    // A type-3 blob is parsed as Perfetto protobuf: a warning, fxtrace never writes one.
    let mut t = Trace::new();
    let proto = t.push(&Blob {
        name: "p".into(),
        blob_type: BlobType::PERFETTO,
        payload: &[0; 8],
    });
    flagged(&t.check(), FindingKind::PerfettoBlob, proto);
}

/// The example intentionally holds every record type: Perfetto skips several (notes), and
/// three of its choices are warnings by design; nothing makes Perfetto stop or drop data.
#[test]
fn write_all_records_example_status() {
    let bytes = write_all_records::build_trace().unwrap();
    let report = check(&bytes);
    println!("{report}");
    assert_eq!(report.count(Severity::Error), 0, "{report}");
    assert_eq!(report.import_stops_at, None);
    assert_eq!(
        kinds(&report, Severity::Warning),
        BTreeSet::from([
            // Provider 1's Provider Event has no visible drop report.
            FindingKind::DropsOnlyInMetadata,
            // Provider 2 ("beta") has no Initialization record, on purpose.
            FindingKind::MissingInitialization,
            // Threads 102, 201 and 202 are switched but never named with their process.
            FindingKind::ThreadWithoutProcess,
        ]),
        "{report}"
    );
    assert_eq!(
        report
            .find(FindingKind::ThreadWithoutProcess)
            .unwrap()
            .count,
        3
    );
    assert_eq!(
        kinds(&report, Severity::Note),
        BTreeSet::from([
            FindingKind::ArgTypeUnknown,
            FindingKind::BlobSkipped,
            FindingKind::LbrBlobSkipped,
            FindingKind::UserspaceObjectSkipped,
            FindingKind::LogSkipped,
            FindingKind::ProviderEventIgnored,
            FindingKind::LargeRecordSkipped,
        ]),
        "{report}"
    );
    assert_eq!(report.bytes, bytes.len() as u64);
}

fn fxtrace() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fxtrace"))
}

#[test]
fn the_cli_prints_the_report_and_fails_on_violations_only() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.fxt");
    let mut t = Trace::new();
    t.push(&Blob {
        name: "cpu0".into(),
        blob_type: BlobType::LAST_BRANCH,
        payload: &[0; 16],
    });
    std::fs::write(&clean, t.bytes()).unwrap();
    let out = fxtrace()
        .args(["check", "--perfetto"])
        .arg(&clean)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("note    @"), "{stdout}");
    assert!(stdout.contains("lbr_blob_skipped"), "{stdout}");
    assert!(stdout.contains("status: ok"), "{stdout}");

    let broken = dir.path().join("broken.fxt");
    let at = t.offset();
    let mut bytes = t.bytes();
    bytes.extend_from_slice(&[0; 16]);
    std::fs::write(&broken, bytes).unwrap();
    let out = fxtrace().arg("check").arg(&broken).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("error   @{at} zero_size_record")),
        "{stdout}"
    );
    assert!(stdout.contains("status: errors"), "{stdout}");

    let out = fxtrace()
        .arg("check")
        .arg(dir.path().join("missing.fxt"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.fxt"));
}

#[test]
fn a_system_wide_recording_has_no_error() {
    let perms = PerfPermissions::read();
    if !(perms.root || perms.perfmon) {
        skip(Requirement::Perf, "needs root or CAP_PERFMON");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("system.fxt");
    let out = fxtrace()
        .args(["record", "--system-wide", "--duration", "0.5", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&trace).unwrap();
    let report = check(&bytes);
    println!("{report}");
    assert_eq!(report.count(Severity::Error), 0, "{report}");
    assert_eq!(report.import_stops_at, None);
    assert_eq!(report.bytes, bytes.len() as u64);
    // The kernel provider writes its switches merged in time order, its threads named with
    // their process before they run, and every loss as a visible event.
    for kind in [
        FindingKind::SchedOutOfOrder,
        FindingKind::DropsOnlyInMetadata,
        FindingKind::MissingInitialization,
        FindingKind::ThreadTakenForIdle,
        FindingKind::UnknownThreadRef,
        FindingKind::KoidTooWide,
    ] {
        assert!(report.find(kind).is_none(), "{kind}: {report}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any bytes after the magic number: the checker reads them all (or stops where Perfetto
    /// would) and never panics.
    #[test]
    fn arbitrary_input_never_panics(words in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..64), tail in 0usize..8) {
        let mut bytes = fxtrace_format::words_to_bytes(&[fxtrace_format::MAGIC_WORD]);
        bytes.extend(fxtrace_format::words_to_bytes(&words));
        bytes.extend(std::iter::repeat_n(0xa5, tail));
        let report = check(&bytes);
        proptest::prop_assert!(report.bytes <= bytes.len() as u64);
        proptest::prop_assert!(report.records >= 1);
    }

    /// The example trace with one word flipped: still no panic, and what comes before the
    /// flipped word is read.
    #[test]
    fn a_corrupted_example_never_panics(index in 1usize..196, value in proptest::prelude::any::<u64>()) {
        let bytes = write_all_records::build_trace().unwrap();
        let mut words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        let index = index % words.len();
        words[index] = value;
        let report = check(&fxtrace_format::words_to_bytes(&words));
        proptest::prop_assert!(report.records >= 1);
    }
}

#[test]
fn orphaned_async_records_are_flagged_as_perfetto_would_import_them() {
    // After a circular buffer wrapped: an async end whose begin was lost; after a oneshot
    // buffer filled: an async begin whose end was dropped. A matched pair, with the same id
    // in another process and another name, is neither.
    let mut t = Trace::new();
    let event = |ticks, pid, name: &'static str, kind| Event {
        ticks,
        thread: ThreadRef::Inline { pid, tid: 11 },
        category: "cat".into(),
        name: name.into(),
        args: &[],
        kind,
    };
    let orphan_end = t.push(&event(100, 10, "request", EventKind::AsyncEnd { id: 1 }));
    t.push(&event(200, 10, "request", EventKind::AsyncBegin { id: 2 }));
    t.push(&event(300, 10, "request", EventKind::AsyncEnd { id: 2 }));
    t.push(&event(300, 12, "request", EventKind::AsyncBegin { id: 2 }));
    t.push(&event(300, 12, "request", EventKind::AsyncEnd { id: 2 }));
    let unended = t.push(&event(400, 10, "upload", EventKind::AsyncBegin { id: 2 }));
    t.push(&event(500, 10, "request", EventKind::AsyncEnd { id: 3 }));
    let report = t.check();
    assert_eq!(
        flagged(&report, FindingKind::UnmatchedAsyncEnd, orphan_end),
        2
    );
    assert_eq!(flagged(&report, FindingKind::UnendedAsyncBegin, unended), 1);
    assert!(report.has_violations(), "warnings: `check` exits 1");
}

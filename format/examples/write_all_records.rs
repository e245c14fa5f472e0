//! Writes a trace containing every record type, event type and argument type, with indexed
//! and inline string and thread refs, from two providers, with known content.
//!
//! ```text
//! cargo run --example write_all_records -- OUT.fxt
//! fxtrace dump OUT.fxt
//! ```
//!
//! Provider 1 ("alpha") runs at 2 GHz ticks (ns = ticks / 2) and registers string 1 =
//! "cat"; provider 2 ("beta") has no initialization record (1 tick = 1 ns) and registers
//! string 1 = "beta-cat". The last event returns to provider 1's section and uses string 1
//! again, which must resolve to "cat": the per-provider tables at work.

use std::process::ExitCode;

use fxtrace_format::lbr::{LbrBranch, LbrPayload};
use fxtrace_format::{
    Arg, ArgValue, Blob, BlobType, ContextSwitch, Event, EventKind, Initialization, KernelObject,
    LargeBlob, LargeBlobMetadata, Log, ObjectType, ProcessRef, ProviderEvent, ProviderInfo,
    ProviderSection, Record, RecordWriter, SchedContextSwitch, SchedThreadWakeup, StringRecord,
    StringRef, ThreadRecord, ThreadRef, ThreadState, UserspaceObject,
    PROVIDER_EVENT_BUFFER_OVERFLOW,
};

/// Provider 1's thread, registered at index 1.
pub(crate) const ALPHA_THREAD: (u64, u64) = (100, 101);
/// Provider 2's thread, registered at index 1 of its own table.
pub(crate) const BETA_THREAD: (u64, u64) = (200, 201);

/// Builds the whole trace (magic number first).
pub(crate) fn build_trace() -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut w = RecordWriter::with_magic();
    let alpha = ThreadRef::Index(1);
    let inline_thread = ThreadRef::Inline { pid: 100, tid: 102 };
    let cat = StringRef::Index(1);
    let blob_bytes = [0xde, 0xad, 0xbe, 0xef, 0x01];

    // --- Provider 1: "alpha", 2 ticks per ns.
    w.push(&ProviderInfo {
        provider_id: 1,
        name: "alpha",
    })?;
    w.push(&Initialization {
        ticks_per_second: 2_000_000_000,
    })?;
    w.push(&StringRecord {
        index: 1,
        value: "cat",
    })?;
    w.push(&StringRecord {
        index: 2,
        value: "indexed-name",
    })?;
    w.push(&StringRecord {
        index: 3,
        value: "count",
    })?;
    w.push(&ThreadRecord {
        index: 1,
        pid: ALPHA_THREAD.0,
        tid: ALPHA_THREAD.1,
    })?;
    w.push(&KernelObject {
        koid: 100,
        object_type: ObjectType::PROCESS,
        name: "alpha-process".into(),
        args: &[],
    })?;
    let thread_args = [Arg::new("process", ArgValue::Koid(100))];
    w.push(&KernelObject {
        koid: 101,
        object_type: ObjectType::THREAD,
        name: "alpha-main".into(),
        args: &thread_args,
    })?;

    // Every argument type on one instant event; names indexed and inline.
    let all_args = [
        Arg::new("null", ArgValue::Null),
        Arg {
            name: StringRef::Index(3),
            value: ArgValue::I32(-5),
        },
        Arg::new("u32", ArgValue::U32(7)),
        Arg::new("i64", ArgValue::I64(-1 << 40)),
        Arg::new("u64", ArgValue::U64(1 << 40)),
        Arg::new("f64", ArgValue::F64(1.5)),
        Arg::new("str_inline", ArgValue::Str(StringRef::Inline("hello"))),
        Arg::new("str_indexed", ArgValue::Str(StringRef::Index(2))),
        Arg::new("pointer", ArgValue::Pointer(0xdead_beef)),
        Arg::new("koid", ArgValue::Koid(101)),
        Arg::new("bool", ArgValue::Bool(true)),
        Arg::new("blob", ArgValue::Blob(&blob_bytes)),
    ];
    let event = |ticks, name, thread, kind, args| Event {
        ticks,
        thread,
        category: cat,
        name,
        args,
        kind,
    };
    let inline = |s| StringRef::Inline(s);
    let counter_args = [Arg::new("value", ArgValue::I64(42))];
    let events = [
        event(
            2_000,
            inline("instant"),
            alpha,
            EventKind::Instant,
            &all_args[..],
        ),
        event(
            4_000,
            inline("counter"),
            alpha,
            EventKind::Counter { id: 9 },
            &counter_args,
        ),
        event(
            6_000,
            StringRef::Index(2),
            alpha,
            EventKind::DurationBegin,
            &[],
        ),
        event(
            10_000,
            inline("complete"),
            inline_thread,
            EventKind::DurationComplete { end_ticks: 23_000 },
            &[],
        ),
        event(
            14_000,
            inline("async"),
            alpha,
            EventKind::AsyncBegin { id: 77 },
            &[],
        ),
        event(
            16_000,
            inline("async"),
            inline_thread,
            EventKind::AsyncInstant { id: 77 },
            &[],
        ),
        event(
            18_000,
            inline("async"),
            alpha,
            EventKind::AsyncEnd { id: 77 },
            &[],
        ),
        event(
            20_000,
            inline("flow"),
            alpha,
            EventKind::FlowBegin { id: 5 },
            &[],
        ),
        event(
            22_000,
            inline("flow"),
            inline_thread,
            EventKind::FlowStep { id: 5 },
            &[],
        ),
        event(
            24_000,
            inline("flow"),
            alpha,
            EventKind::FlowEnd { id: 5 },
            &[],
        ),
        // The duration begun at 6_000 ends after the flow: flows attach to the enclosing
        // slice (the complete one on the inline thread holds the step), so Perfetto's
        // importer binds them all (no flow_no_enclosing_slice).
        event(
            26_000,
            StringRef::Index(2),
            alpha,
            EventKind::DurationEnd,
            &[],
        ),
    ];
    for e in &events {
        w.push(e)?;
    }
    w.push(&Blob {
        name: "raw".into(),
        blob_type: BlobType::DATA,
        payload: &blob_bytes,
    })?;
    let lbr = LbrPayload::new(
        3,
        26_000,
        0x1000,
        &[
            LbrBranch::new(0x40_1000, 0x40_2000, 12, false),
            LbrBranch::new(0x40_3000, 0x40_1000, 3, true),
        ],
    )?;
    w.push(&Blob {
        name: StringRef::Inline("cpu3"),
        blob_type: BlobType::LAST_BRANCH,
        payload: lbr.as_bytes(),
    })?;
    let object_args = [Arg::new("size", ArgValue::U64(4096))];
    w.push(&UserspaceObject {
        pointer: 0x7f00_0000_1000,
        process: ProcessRef::Index(1),
        name: "buffer".into(),
        args: &object_args,
    })?;
    w.push(&UserspaceObject {
        pointer: 0x7f00_0000_2000,
        process: ProcessRef::Inline(100),
        name: StringRef::Index(2),
        args: &[],
    })?;
    w.push(&ContextSwitch {
        ticks: 28_000,
        cpu: 3,
        outgoing_state: ThreadState::Blocked,
        outgoing: alpha,
        incoming: inline_thread,
        outgoing_priority: 20,
        incoming_priority: 10,
    })?;
    w.push(&Log {
        ticks: 30_000,
        thread: alpha,
        message: "hello from alpha",
    })?;
    w.push(&Log {
        ticks: 32_000,
        thread: inline_thread,
        message: "inline thread log",
    })?;
    w.push(&ProviderEvent {
        provider_id: 1,
        event: PROVIDER_EVENT_BUFFER_OVERFLOW,
    })?;

    // --- Provider 2: "beta", no initialization record (1 tick = 1 ns), its own tables.
    w.push(&ProviderInfo {
        provider_id: 2,
        name: "beta",
    })?;
    w.push(&StringRecord {
        index: 1,
        value: "beta-cat",
    })?;
    w.push(&ThreadRecord {
        index: 1,
        pid: BETA_THREAD.0,
        tid: BETA_THREAD.1,
    })?;
    w.push(&Event {
        ticks: 5_000,
        thread: ThreadRef::Index(1),
        category: StringRef::Index(1),
        name: "beta-instant".into(),
        args: &[],
        kind: EventKind::Instant,
    })?;
    let weights = [
        Arg::new("incoming_weight", ArgValue::I32(3)),
        Arg::new("outgoing_weight", ArgValue::I32(4)),
    ];
    w.push(&SchedContextSwitch {
        ticks: 6_000,
        cpu: 300,
        outgoing_state: ThreadState::Suspended,
        outgoing_tid: 201,
        incoming_tid: 202,
        args: &weights,
    })?;
    let waker = [Arg::new("waker", ArgValue::Koid(201))];
    w.push(&SchedThreadWakeup {
        ticks: 7_000,
        cpu: 1,
        waking_tid: 202,
        args: &waker,
    })?;
    let large_args = [Arg::new("frame", ArgValue::U32(1))];
    w.push(&LargeBlob {
        category: StringRef::Index(1),
        name: "large-event".into(),
        metadata: Some(LargeBlobMetadata {
            ticks: 8_000,
            thread: ThreadRef::Index(1),
            args: &large_args,
        }),
        payload: b"large blob with metadata",
    })?;
    w.push(&LargeBlob {
        category: StringRef::Index(1),
        name: "large-attachment".into(),
        metadata: None,
        payload: &[7; 20],
    })?;

    // --- Back to provider 1: string 1 is "cat" again, 2 ticks per ns.
    w.push(&Record::ProviderSection(ProviderSection { provider_id: 1 }))?;
    w.push(&Event {
        ticks: 40_000,
        thread: alpha,
        category: StringRef::Index(1),
        name: "back-in-alpha".into(),
        args: &[],
        kind: EventKind::Instant,
    })?;
    Ok(w.to_bytes())
}

#[allow(dead_code)] // also compiled into the tests, which do not call main
fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(path), None) = (args.next(), args.next()) else {
        eprintln!("usage: write_all_records OUT.fxt");
        return ExitCode::from(2);
    };
    let bytes = match build_trace() {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("write_all_records: encoding failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::write(&path, &bytes) {
        eprintln!("{}: cannot write: {e}", path.to_string_lossy());
        return ExitCode::FAILURE;
    }
    println!("wrote {} bytes to {}", bytes.len(), path.to_string_lossy());
    ExitCode::SUCCESS
}

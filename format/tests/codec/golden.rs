//! Golden tests: the spec's own numbers, and header words computed by hand from the bit
//! tables of the FXT spec (Fuchsia's "Fuchsia Trace Format",
//! `docs/reference/tracing/trace-format.md`) and of the newer records and arguments in
//! `zircon/system/ulib/trace-engine/include/lib/trace-engine/types.h` and `fields.h`.

use fxtrace_format::fields::{
    self, ArgumentHeader, BlobArgument, BlobRecord, BoolArgument, ContextSwitchRecord, EventRecord,
    Field, Int32Argument, KernelObjectRecord, LargeBlobWithMetadata, LargeRecordHeader, LogRecord,
    MagicNumberRecord, MetadataRecord, ProviderEventMetadata, ProviderInfoMetadata,
    ProviderSectionMetadata, RecordHeader, SchedContextSwitchRecord, SchedThreadWakeupRecord,
    SchedulingRecord, StringArgument, TraceInfoMetadata, UserspaceObjectRecord,
};
use fxtrace_format::*;

/// Parses the spec's notation `[lo .. hi]`.
fn spec_bits(s: &str) -> (u32, u32) {
    let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
    let (lo, hi) = inner.split_once("..").expect("spec notation [lo .. hi]");
    (lo.trim().parse().unwrap(), hi.trim().parse().unwrap())
}

/// Every field next to its line in the spec's tables, copied verbatim.
#[test]
fn fields_match_spec_bit_tables() {
    let table: &[(&str, Field, &str)] = &[
        // Record Header
        ("record type", RecordHeader::TYPE, "[0 .. 3]"),
        ("record size", RecordHeader::SIZE, "[4 .. 15]"),
        // Metadata Record
        ("metadata type", MetadataRecord::METADATA_TYPE, "[16 .. 19]"),
        // Provider Info Metadata
        (
            "provider id",
            ProviderInfoMetadata::PROVIDER_ID,
            "[20 .. 51]",
        ),
        (
            "name length in bytes",
            ProviderInfoMetadata::NAME_LENGTH,
            "[52 .. 59]",
        ),
        // Provider Section Metadata
        (
            "provider id",
            ProviderSectionMetadata::PROVIDER_ID,
            "[20 .. 51]",
        ),
        // Provider Event Metadata
        (
            "provider id",
            ProviderEventMetadata::PROVIDER_ID,
            "[20 .. 51]",
        ),
        ("the event id", ProviderEventMetadata::EVENT, "[52 .. 55]"),
        // Trace Info Metadata / Magic Number Record
        (
            "trace info type",
            TraceInfoMetadata::TRACE_INFO_TYPE,
            "[20 .. 23]",
        ),
        (
            "the magic number 0x16547846",
            MagicNumberRecord::MAGIC,
            "[24 .. 55]",
        ),
        // String Record
        ("string index", fields::StringRecord::INDEX, "[16 .. 30]"),
        (
            "string length in bytes",
            fields::StringRecord::LENGTH,
            "[32 .. 46]",
        ),
        // Thread Record
        ("thread index", fields::ThreadRecord::INDEX, "[16 .. 23]"),
        // Event Record
        ("event type", EventRecord::EVENT_TYPE, "[16 .. 19]"),
        (
            "number of arguments",
            EventRecord::ARGUMENT_COUNT,
            "[20 .. 23]",
        ),
        ("thread (thread ref)", EventRecord::THREAD_REF, "[24 .. 31]"),
        (
            "category (string ref)",
            EventRecord::CATEGORY_REF,
            "[32 .. 47]",
        ),
        ("name (string ref)", EventRecord::NAME_REF, "[48 .. 63]"),
        // Blob Record
        ("blob name (string ref)", BlobRecord::NAME_REF, "[16 .. 31]"),
        (
            "blob payload size in bytes",
            BlobRecord::PAYLOAD_SIZE,
            "[32 .. 46]",
        ),
        ("blob type", BlobRecord::BLOB_TYPE, "[48 .. 55]"),
        // Userspace Object Record
        (
            "process (thread ref)",
            UserspaceObjectRecord::PROCESS_REF,
            "[16 .. 23]",
        ),
        (
            "name (string ref)",
            UserspaceObjectRecord::NAME_REF,
            "[24 .. 39]",
        ),
        (
            "number of arguments",
            UserspaceObjectRecord::ARGUMENT_COUNT,
            "[40 .. 43]",
        ),
        // Kernel Object Record
        (
            "kernel object type",
            KernelObjectRecord::OBJECT_TYPE,
            "[16 .. 23]",
        ),
        (
            "name (string ref)",
            KernelObjectRecord::NAME_REF,
            "[24 .. 39]",
        ),
        (
            "number of arguments",
            KernelObjectRecord::ARGUMENT_COUNT,
            "[40 .. 43]",
        ),
        // Context Switch Record
        ("cpu number", ContextSwitchRecord::CPU, "[16 .. 23]"),
        (
            "outgoing thread state",
            ContextSwitchRecord::OUTGOING_STATE,
            "[24 .. 27]",
        ),
        (
            "outgoing thread (thread ref)",
            ContextSwitchRecord::OUTGOING_THREAD_REF,
            "[28 .. 35]",
        ),
        (
            "incoming thread (thread ref)",
            ContextSwitchRecord::INCOMING_THREAD_REF,
            "[36 .. 43]",
        ),
        (
            "outgoing thread priority",
            ContextSwitchRecord::OUTGOING_PRIORITY,
            "[44 .. 51]",
        ),
        (
            "incoming thread priority",
            ContextSwitchRecord::INCOMING_PRIORITY,
            "[52 .. 59]",
        ),
        // Log Record
        (
            "log message length in bytes",
            LogRecord::MESSAGE_LENGTH,
            "[16 .. 30]",
        ),
        ("thread (thread ref)", LogRecord::THREAD_REF, "[32 .. 39]"),
        // Argument Header and argument types
        ("argument type", ArgumentHeader::TYPE, "[0 .. 3]"),
        ("argument size", ArgumentHeader::SIZE, "[4 .. 15]"),
        (
            "argument name (string ref)",
            ArgumentHeader::NAME_REF,
            "[16 .. 31]",
        ),
        ("32-bit integer", Int32Argument::VALUE, "[32 .. 63]"),
        (
            "argument value (string ref)",
            StringArgument::VALUE_REF,
            "[32 .. 47]",
        ),
        // Newer records and arguments (trace-engine's `types.h` and `fields.h`)
        ("bool value", BoolArgument::VALUE, "[32 .. 32]"),
        ("blob size", BlobArgument::SIZE, "[32 .. 63]"),
        (
            "scheduling record type",
            SchedulingRecord::SCHEDULING_TYPE,
            "[60 .. 63]",
        ),
        (
            "sched 1 arg count",
            SchedContextSwitchRecord::ARGUMENT_COUNT,
            "[16 .. 19]",
        ),
        ("sched 1 cpu", SchedContextSwitchRecord::CPU, "[20 .. 35]"),
        (
            "sched 1 outgoing state",
            SchedContextSwitchRecord::OUTGOING_STATE,
            "[36 .. 39]",
        ),
        (
            "sched 2 arg count",
            SchedThreadWakeupRecord::ARGUMENT_COUNT,
            "[16 .. 19]",
        ),
        ("sched 2 cpu", SchedThreadWakeupRecord::CPU, "[20 .. 35]"),
        ("large record size", LargeRecordHeader::SIZE, "[4 .. 35]"),
        (
            "large record type",
            LargeRecordHeader::LARGE_TYPE,
            "[36 .. 39]",
        ),
        (
            "large blob format",
            LargeRecordHeader::BLOB_FORMAT,
            "[40 .. 43]",
        ),
        (
            "large blob category",
            LargeBlobWithMetadata::CATEGORY_REF,
            "[0 .. 15]",
        ),
        (
            "large blob name",
            LargeBlobWithMetadata::NAME_REF,
            "[16 .. 31]",
        ),
        (
            "large blob arg count",
            LargeBlobWithMetadata::ARGUMENT_COUNT,
            "[32 .. 35]",
        ),
        (
            "large blob thread ref",
            LargeBlobWithMetadata::THREAD_REF,
            "[36 .. 43]",
        ),
    ];
    for (what, field, spec) in table {
        let (lo, hi) = spec_bits(spec);
        assert_eq!((field.lo, field.hi), (lo, hi), "{what}: spec says {spec}");
    }
}

#[test]
fn magic_number_is_the_spec_word_and_bytes() {
    assert_eq!(MAGIC_WORD, 0x0016547846040010);
    let words = encode_to_vec(&MagicNumber).unwrap();
    assert_eq!(words, [0x0016547846040010]);
    let bytes = words_to_bytes(&words);
    if cfg!(target_endian = "little") {
        assert_eq!(bytes, [0x10, 0x00, 0x04, 0x46, 0x78, 0x54, 0x16, 0x00]);
    }
    // The word is also the sum of its fields.
    assert_eq!(
        RecordHeader::SIZE.make(1)
            | MagicNumberRecord::METADATA_TYPE.make(4)
            | MagicNumberRecord::TRACE_INFO_TYPE.make(0)
            | MagicNumberRecord::MAGIC.make(u64::from(MAGIC_NUMBER)),
        MAGIC_WORD
    );
}

fn encode<'a>(record: impl Into<Record<'a>>) -> Vec<u64> {
    let record = record.into();
    let words = encode_to_vec(&record).unwrap();
    assert_eq!(record.words().unwrap(), words.len());
    words
}

fn text(s: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..s.len()].copy_from_slice(s);
    u64::from_ne_bytes(w)
}

#[test]
fn metadata_headers() {
    assert_eq!(
        encode(ProviderInfo {
            provider_id: 1,
            name: "alpha"
        }),
        [0x0050_0000_0011_0020, text(b"alpha")]
    );
    assert_eq!(
        encode(ProviderSection {
            provider_id: 0x1234_5678
        }),
        [0x0001_2345_6782_0010]
    );
    assert_eq!(
        encode(ProviderEvent {
            provider_id: 1,
            event: 5
        }),
        [0x0050_0000_0013_0010]
    );
}

#[test]
fn initialization_string_thread_headers() {
    assert_eq!(
        encode(Initialization {
            ticks_per_second: 1_000_000_000
        }),
        [0x21, 1_000_000_000]
    );
    assert_eq!(
        encode(StringRecord {
            index: 1,
            value: "cat"
        }),
        [0x0000_0003_0001_0022, text(b"cat")]
    );
    assert_eq!(
        encode(ThreadRecord {
            index: 1,
            pid: 10,
            tid: 11
        }),
        [0x0000_0000_0001_0033, 10, 11]
    );
}

#[test]
fn event_headers() {
    let instant = Event {
        ticks: 99,
        thread: ThreadRef::Index(1),
        category: StringRef::Index(1),
        name: StringRef::Index(2),
        args: &[],
        kind: EventKind::Instant,
    };
    assert_eq!(encode(instant), [0x0002_0001_0100_0024, 99]);

    let args = [Arg {
        name: StringRef::Index(5),
        value: ArgValue::I32(-1),
    }];
    let counter = Event {
        ticks: 7,
        thread: ThreadRef::Inline { pid: 10, tid: 11 },
        category: StringRef::Index(1),
        name: StringRef::Inline("abc"),
        args: &args,
        kind: EventKind::Counter { id: 42 },
    };
    assert_eq!(
        encode(counter),
        [
            0x8003_0001_0011_0074,
            7,
            10,
            11,
            text(b"abc"),
            0xffff_ffff_0005_0011,
            42
        ]
    );

    let complete = Event {
        kind: EventKind::DurationComplete { end_ticks: 200 },
        ..instant
    };
    assert_eq!(encode(complete), [0x0002_0001_0104_0034, 99, 200]);
    // Every event type lands in [16 .. 19].
    for (raw, kind) in [
        (5, EventKind::AsyncBegin { id: 1 }),
        (6, EventKind::AsyncInstant { id: 1 }),
        (7, EventKind::AsyncEnd { id: 1 }),
        (8, EventKind::FlowBegin { id: 1 }),
        (9, EventKind::FlowStep { id: 1 }),
        (10, EventKind::FlowEnd { id: 1 }),
    ] {
        let words = encode(Event { kind, ..instant });
        assert_eq!(words, [0x0002_0001_0100_0034 | (raw << 16), 99, 1]);
    }
}

#[test]
fn blob_object_headers() {
    assert_eq!(
        encode(Blob {
            name: StringRef::Index(1),
            blob_type: BlobType::DATA,
            payload: &[1, 2, 3, 4, 5]
        }),
        [0x0001_0005_0001_0025, 0x05_0403_0201]
    );
    assert_eq!(
        encode(UserspaceObject {
            pointer: 0xabc,
            process: ProcessRef::Index(1),
            name: StringRef::Index(2),
            args: &[],
        }),
        [0x0000_0000_0201_0026, 0xabc]
    );
    let args = [Arg::new("process", ArgValue::Koid(10))];
    assert_eq!(
        encode(KernelObject {
            koid: 11,
            object_type: ObjectType::THREAD,
            name: StringRef::Index(3),
            args: &args,
        }),
        [0x0000_0100_0302_0057, 11, 0x8007_0038, text(b"process"), 10]
    );
}

#[test]
fn scheduling_and_log_headers() {
    assert_eq!(
        encode(ContextSwitch {
            ticks: 5,
            cpu: 3,
            outgoing_state: ThreadState::Blocked,
            outgoing: ThreadRef::Index(1),
            incoming: ThreadRef::Index(2),
            outgoing_priority: 20,
            incoming_priority: 10,
        }),
        [0x00a1_4020_1303_0028, 5]
    );
    assert_eq!(
        encode(Log {
            ticks: 5,
            thread: ThreadRef::Index(1),
            message: "hi"
        }),
        [0x0000_0001_0002_0039, 5, text(b"hi")]
    );
    assert_eq!(
        encode(SchedContextSwitch {
            ticks: 5,
            cpu: 1,
            outgoing_state: ThreadState::Blocked,
            outgoing_tid: 7,
            incoming_tid: 8,
            args: &[],
        }),
        [0x1000_0030_0010_0048, 5, 7, 8]
    );
    assert_eq!(
        encode(SchedThreadWakeup {
            ticks: 5,
            cpu: 2,
            waking_tid: 7,
            args: &[]
        }),
        [0x2000_0000_0020_0038, 5, 7]
    );
    // fxtrace's wakeup: the `waker` koid argument (name index 3) that Perfetto reads into
    // `thread_state.waker_utid`: type 8, 2 words, the koid in the second.
    let waker = [Arg::new(StringRef::Index(3), ArgValue::Koid(8))];
    assert_eq!(
        encode(SchedThreadWakeup {
            ticks: 5,
            cpu: 2,
            waking_tid: 7,
            args: &waker
        }),
        [0x2000_0000_0021_0058, 5, 7, 0x0003_0028, 8]
    );
    // fxtrace's switch by tid with a wait point: `stack` (u32, name index 4) = 9, one word;
    // `incoming_weight` (i32, name index 5) = INT32_MIN (the idle task), one word.
    let wait = [
        Arg::new(StringRef::Index(5), ArgValue::I32(i32::MIN)),
        Arg::new(StringRef::Index(4), ArgValue::U32(9)),
    ];
    assert_eq!(
        encode(SchedContextSwitch {
            ticks: 5,
            cpu: 1,
            outgoing_state: ThreadState::Blocked,
            outgoing_tid: 7,
            incoming_tid: 0,
            args: &wait,
        }),
        [
            0x1000_0030_0012_0068,
            5,
            7,
            0,
            0x8000_0000_0005_0011,
            0x0000_0009_0004_0012
        ]
    );
}

#[test]
fn large_blob_headers() {
    assert_eq!(
        encode(LargeBlob {
            category: StringRef::Index(1),
            name: StringRef::Index(2),
            metadata: None,
            payload: &[1, 2, 3],
        }),
        [0x0000_0100_0000_004f, 0x0002_0001, 3, 0x03_0201]
    );
    assert_eq!(
        encode(LargeBlob {
            category: StringRef::Index(1),
            name: StringRef::Index(2),
            metadata: Some(LargeBlobMetadata {
                ticks: 9,
                thread: ThreadRef::Index(4),
                args: &[]
            }),
            payload: &[],
        }),
        [0x0000_0000_0000_004f, 0x0000_0040_0002_0001, 9, 0]
    );
}

#[test]
fn framing_helpers_read_spec_headers() {
    assert_eq!(record_type(0x0002_0001_0100_0024), 4);
    assert_eq!(record_words(0x0002_0001_0100_0024), 2);
    assert_eq!(record_type(0x0000_0100_0000_004f), 15);
    assert_eq!(record_words(0x0000_0100_0000_004f), 4);
    assert_eq!(record_words(0x0000_0000_ffff_fff0 | 0xf), 0x0fff_ffff);
}

#[test]
fn limits_are_typed_errors() {
    let long = "x".repeat(MAX_STRING_LEN + 1);
    let e = |r: Record<'_>| r.words().unwrap_err();
    assert_eq!(
        e(StringRecord {
            index: 1,
            value: &long
        }
        .into()),
        EncodeError::StringTooLong { len: 32001 }
    );
    assert_eq!(
        e(StringRecord {
            index: 0,
            value: "a"
        }
        .into()),
        EncodeError::StringIndexOutOfRange { index: 0 }
    );
    assert_eq!(
        e(StringRecord {
            index: 0x8000,
            value: "a"
        }
        .into()),
        EncodeError::StringIndexOutOfRange { index: 0x8000 }
    );
    assert_eq!(
        e(ThreadRecord {
            index: 0,
            pid: 1,
            tid: 1
        }
        .into()),
        EncodeError::ThreadIndexZero
    );
    let name = "n".repeat(256);
    assert_eq!(
        e(ProviderInfo {
            provider_id: 1,
            name: &name
        }
        .into()),
        EncodeError::ProviderNameTooLong { len: 256 }
    );
    assert_eq!(
        e(ProviderEvent {
            provider_id: 1,
            event: 16
        }
        .into()),
        EncodeError::ProviderEventOutOfRange { event: 16 }
    );
    let payload = vec![0u8; MAX_BLOB_PAYLOAD + 1];
    assert_eq!(
        e(Blob {
            name: StringRef::Empty,
            blob_type: BlobType::DATA,
            payload: &payload
        }
        .into()),
        EncodeError::BlobTooLarge { len: 32768 }
    );
    // 32767 bytes fit the size field but not the record: 1 + 4096 words.
    assert_eq!(
        e(Blob {
            name: StringRef::Empty,
            blob_type: BlobType::DATA,
            payload: &payload[1..]
        }
        .into()),
        EncodeError::RecordTooLarge { words: 4097 }
    );
    // The largest blob that fits: 4094 words of payload.
    let max = Blob {
        name: StringRef::Empty,
        blob_type: BlobType::DATA,
        payload: &payload[..4094 * 8],
    };
    assert_eq!(max.words(), Ok(4095));
    let args = [Arg::new("a", ArgValue::Null); 16];
    let event = Event {
        ticks: 0,
        thread: ThreadRef::Index(1),
        category: StringRef::Empty,
        name: StringRef::Empty,
        args: &args,
        kind: EventKind::Instant,
    };
    assert_eq!(event.words(), Err(EncodeError::TooManyArgs { count: 16 }));
    assert_eq!(
        Event {
            args: &args[..15],
            ..event
        }
        .words(),
        Ok(2 + 30)
    );
    // A record that exceeds 4095 words through its strings.
    let s = "y".repeat(MAX_STRING_LEN);
    let big_args = [Arg::new(
        StringRef::Inline(&s),
        ArgValue::Str(StringRef::Inline(&s)),
    )];
    assert_eq!(
        Event {
            args: &big_args,
            ..event
        }
        .words(),
        Err(EncodeError::ArgumentTooLarge { words: 8001 })
    );
    // Output too small: typed error, nothing written past the slice.
    let mut out = [0u64; 1];
    assert_eq!(
        Initialization {
            ticks_per_second: 1
        }
        .write(&mut out),
        Err(EncodeError::BufferTooSmall {
            needed: 2,
            available: 1
        })
    );
}

#[test]
fn writer_leaves_buffer_intact_on_error() {
    let mut w = RecordWriter::with_magic();
    assert!(w
        .push(&ThreadRecord {
            index: 0,
            pid: 1,
            tid: 2
        })
        .is_err());
    assert_eq!(w.words(), [MAGIC_WORD]);
    assert_eq!(
        w.push(&ThreadRecord {
            index: 1,
            pid: 1,
            tid: 2
        }),
        Ok(3)
    );
    assert_eq!(w.words().len(), 4);
}

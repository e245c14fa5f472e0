//! Typed record writers and the per-thread caches, on explicit contexts: every writer decodes
//! back with its fields; strings and threads are registered once per thread per generation,
//! inline past the limits; encode errors are counted.
//!
//! Tests take `SERIAL`: the process name record is claimed process-wide per generation, so two
//! tests starting contexts at once could take it from each other.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fxtrace::buffer::header::{copy_records, BufferingMode, ChunkScanStop, Framing, HEADER_SIZE};
use fxtrace::buffer::TraceBuffer;
use fxtrace::engine::record::{start_trace, RecordError, Scope, TraceStr};
use fxtrace::engine::{
    CategoryFilter, Context, ContextConfig, NoHandler, StartMode, MAX_STRING_ENTRIES,
};
use fxtrace_format::{
    encode_to_vec, Arg, ArgValue, Blob, BlobType, ContextSwitch, Decoded, DecodedEventKind,
    DecodedRecord, DecodedValue, Decoder, Encode, EncodeError, Event, EventKind, Initialization,
    KernelObject, Log, ObjectType, ProcessRef, SchedContextSwitch, StringRecord, StringRef,
    ThreadRecord, ThreadRef, ThreadState, UserspaceObject,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const STOP: Duration = Duration::from_secs(5);

fn context(mode: BufferingMode, size: u64, categories: CategoryFilter) -> Context {
    let buffer = TraceBuffer::create(size).expect("memfd");
    let config = ContextConfig {
        mode,
        ..ContextConfig::default()
    };
    let ctx = Context::new(buffer, config, Arc::new(NoHandler)).expect("context");
    assert!(start_trace(&ctx, StartMode::ClearEntire, categories).unwrap());
    ctx
}

/// Stop `ctx` and read its records as a manager would: durable, earlier rolling buffer (if
/// wrapped), current rolling buffer. Every region must scan completely.
fn read(ctx: &Context) -> Vec<u8> {
    let stop = ctx.stop(STOP).expect("stop");
    let buffer = ctx.buffer();
    let whole = buffer.copy_range(0, buffer.size()).unwrap();
    let header = buffer.header().load();
    let g = ctx.geometry();
    let mut out = Vec::new();
    let mut append = |region: &[u8], end: u64, framing: Framing| {
        let (stop, _) = copy_records(region, end, framing, &mut out).unwrap();
        assert_eq!(stop, ChunkScanStop::Complete);
    };
    if ctx.mode() != BufferingMode::Oneshot {
        let d = HEADER_SIZE as usize;
        append(
            &whole[d..d + g.durable_buffer_size as usize],
            stop.durable_data_end,
            Framing::Dense,
        );
    }
    let rolling = |i: usize| {
        let o = g.rolling_offset(i) as usize;
        &whole[o..o + g.rolling_buffer_size as usize]
    };
    let end = |i: usize| match stop.rolling_data_end[i] {
        0 => g.rolling_buffer_size,
        e => e,
    };
    let wc = stop.wrapped_count;
    if wc > 0 {
        let e = ((wc - 1) & 1) as usize;
        append(rolling(e), end(e), header.rolling_framing(wc - 1));
    }
    let c = (wc & 1) as usize;
    append(rolling(c), end(c), header.rolling_framing(wc));
    out
}

fn decode(bytes: &[u8]) -> Vec<Decoded<'_>> {
    Decoder::bare(bytes)
        .collect::<Result<Vec<_>, _>>()
        .expect("the buffer decodes")
}

/// The raw words of each record.
fn raw_records(bytes: &[u8]) -> Vec<Vec<u64>> {
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let n = ((words[i] >> 4) & 0xfff) as usize;
        assert!(n > 0 && i + n <= words.len());
        out.push(words[i..i + n].to_vec());
        i += n;
    }
    out
}

fn events<'a>(records: &'a [Decoded<'a>]) -> Vec<&'a fxtrace_format::DecodedEvent<'a>> {
    records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// String records by value: how many times each string was registered.
fn string_records(records: &[Decoded<'_>]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for d in records {
        if let DecodedRecord::String { value, .. } = &d.record {
            *out.entry(value.to_string()).or_default() += 1;
        }
    }
    out
}

fn count_kind(records: &[Decoded<'_>], kind: &str) -> usize {
    records
        .iter()
        .filter(|d| d.record.kind_name() == kind)
        .count()
}

fn tid() -> u64 {
    // SAFETY: gettid has no arguments and no memory effects.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

#[test]
fn write_body_matches_write_for_every_record() {
    let args = [
        Arg::new("a", ArgValue::I32(-3)),
        Arg::new(
            StringRef::Index(4),
            ArgValue::Str(StringRef::Inline("text")),
        ),
        Arg::new("blob", ArgValue::Blob(&[1, 2, 3, 4, 5, 6, 7, 8, 9])),
    ];
    let inline = ThreadRef::Inline { pid: 10, tid: 11 };
    let records: Vec<Box<dyn Encode>> = vec![
        Box::new(Initialization {
            ticks_per_second: 3,
        }),
        Box::new(StringRecord {
            index: 9,
            value: "hello world",
        }),
        Box::new(ThreadRecord {
            index: 2,
            pid: 5,
            tid: 6,
        }),
        Box::new(Event {
            ticks: 77,
            thread: inline,
            category: StringRef::Inline("cat"),
            name: StringRef::Index(3),
            args: &args,
            kind: EventKind::DurationComplete { end_ticks: 99 },
        }),
        Box::new(Blob {
            name: StringRef::Inline("b"),
            blob_type: BlobType::DATA,
            payload: b"0123456789",
        }),
        Box::new(KernelObject {
            koid: 1,
            object_type: ObjectType::THREAD,
            name: StringRef::Inline("t"),
            args: &args,
        }),
        Box::new(UserspaceObject {
            pointer: 0xdead,
            process: ProcessRef::Inline(7),
            name: StringRef::Index(1),
            args: &args[..1],
        }),
        Box::new(ContextSwitch {
            ticks: 5,
            cpu: 1,
            outgoing_state: ThreadState::Blocked,
            outgoing: inline,
            incoming: ThreadRef::Index(3),
            outgoing_priority: 1,
            incoming_priority: 2,
        }),
        Box::new(SchedContextSwitch {
            ticks: 5,
            cpu: 300,
            outgoing_state: ThreadState::Running,
            outgoing_tid: 8,
            incoming_tid: 9,
            args: &args[..1],
        }),
        Box::new(Log {
            ticks: 1,
            thread: inline,
            message: "a log line that is long",
        }),
    ];
    for record in &records {
        let whole = encode_to_vec(record.as_ref()).unwrap();
        let mut body = vec![u64::MAX; whole.len() - 1];
        let (header, words) = record.write_body(&mut body).unwrap();
        assert_eq!(words, whole.len());
        assert_eq!(header, whole[0]);
        assert_eq!(body, whole[1..]);
        let mut short = vec![0; whole.len() - 2];
        assert_eq!(
            record.write_body(&mut short),
            Err(EncodeError::BufferTooSmall {
                needed: whole.len(),
                available: whole.len() - 1
            })
        );
    }
}

#[test]
fn typed_writers_decode_back() {
    let _s = serial();
    let ctx = context(BufferingMode::Circular, 1 << 20, CategoryFilter::all());
    let args = [
        Arg::new("n", ArgValue::U64(42)),
        Arg::new("s", ArgValue::Str(StringRef::Inline("v"))),
    ];
    {
        let mut w = ctx.trace_writer().expect("writer");
        assert!(w.is_cached());
        w.instant(100, "cat", "inst", Scope::Thread, &args).unwrap();
        w.instant(101, "cat", "proc", Scope::Process, &args)
            .unwrap();
        w.instant(102, "cat", "glob", Scope::Global, &[]).unwrap();
        w.counter(103, "cat", "ctr", 7, &[Arg::new("v", ArgValue::I64(-5))])
            .unwrap();
        w.duration_begin(104, "cat", "dur", &[]).unwrap();
        w.duration_end(105, "cat", "dur", &args).unwrap();
        w.duration_complete(106, 116, "cat", "comp", &[]).unwrap();
        w.async_begin(107, "cat", "as", 9, &[]).unwrap();
        w.async_instant(108, "cat", "as", 9, &[]).unwrap();
        w.async_end(109, "cat", "as", 9, &[]).unwrap();
        w.flow_begin(110, "cat", "fl", 11, &[]).unwrap();
        w.flow_step(111, "cat", "fl", 11, &[]).unwrap();
        w.flow_end(112, "cat", "fl", 11, &[]).unwrap();
        w.log(113, "log message").unwrap();
        w.blob("blobname", BlobType::DATA, b"payload!x").unwrap();
        w.kernel_object(
            555,
            ObjectType(17),
            "kobj",
            &[Arg::new("k", ArgValue::Koid(1))],
        )
        .unwrap();
        w.userspace_object(0xabc, "uobj", &[Arg::new("b", ArgValue::Bool(true))])
            .unwrap();
        w.context_switch(114, 3, ThreadState::Suspended, 21, 22, &[])
            .unwrap();
    }
    let bytes = read(&ctx);
    let records = decode(&bytes);
    let me = tid();
    let pid = u64::from(std::process::id());

    // Durable records first: initialization, then registrations in first-use order.
    let DecodedRecord::Initialization { ticks_per_second } = records[0].record else {
        panic!("first record is {:?}", records[0].record)
    };
    assert_eq!(ticks_per_second, fxtrace::clock::info().ticks_per_second);

    let ev = events(&records);
    let kinds: Vec<(DecodedEventKind, &str, u64)> = ev
        .iter()
        .map(|e| (e.kind, e.name.as_ref(), e.time.ticks))
        .collect();
    let tps = ticks_per_second;
    let end = fxtrace_format::Timestamp {
        ticks: 116,
        ns: fxtrace_format::ticks_to_ns(116, tps),
    };
    assert_eq!(
        kinds,
        vec![
            (DecodedEventKind::Instant, "inst", 100),
            (DecodedEventKind::Instant, "proc", 101),
            (DecodedEventKind::Instant, "glob", 102),
            (DecodedEventKind::Counter { id: 7 }, "ctr", 103),
            (DecodedEventKind::DurationBegin, "dur", 104),
            (DecodedEventKind::DurationEnd, "dur", 105),
            (DecodedEventKind::DurationComplete { end }, "comp", 106),
            (DecodedEventKind::AsyncBegin { id: 9 }, "as", 107),
            (DecodedEventKind::AsyncInstant { id: 9 }, "as", 108),
            (DecodedEventKind::AsyncEnd { id: 9 }, "as", 109),
            (DecodedEventKind::FlowBegin { id: 11 }, "fl", 110),
            (DecodedEventKind::FlowStep { id: 11 }, "fl", 111),
            (DecodedEventKind::FlowEnd { id: 11 }, "fl", 112),
        ]
    );
    for e in &ev {
        assert_eq!(e.category, "cat");
        assert_eq!((e.thread.pid, e.thread.tid), (pid, me));
    }
    let arg_names = |i: usize| -> Vec<(String, DecodedValue<'_>)> {
        ev[i]
            .args
            .iter()
            .map(|a| (a.name.to_string(), a.value.clone()))
            .collect()
    };
    assert_eq!(
        arg_names(0),
        vec![
            ("n".into(), DecodedValue::U64(42)),
            ("s".into(), DecodedValue::Str("v".into()))
        ]
    );
    assert_eq!(
        arg_names(1)[2],
        ("scope".into(), DecodedValue::Str("process".into()))
    );
    assert_eq!(
        arg_names(2),
        vec![("scope".into(), DecodedValue::Str("global".into()))]
    );
    assert_eq!(arg_names(3), vec![("v".into(), DecodedValue::I64(-5))]);

    let mut saw = BTreeMap::new();
    for d in &records {
        match &d.record {
            DecodedRecord::Log {
                time,
                thread,
                message,
            } => {
                assert_eq!(
                    (time.ticks, thread.tid, message.as_ref()),
                    (113, me, "log message")
                );
                *saw.entry("log").or_insert(0) += 1;
            }
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } => {
                assert_eq!(
                    (name.as_ref(), *blob_type, payload.as_ref()),
                    ("blobname", BlobType::DATA, &b"payload!x"[..])
                );
                *saw.entry("blob").or_insert(0) += 1;
            }
            DecodedRecord::KernelObject {
                koid: 555,
                object_type,
                name,
                args,
            } => {
                assert_eq!((object_type.0, name.as_ref()), (17, "kobj"));
                assert_eq!(args[0].value, DecodedValue::Koid(1));
                *saw.entry("kobj").or_insert(0) += 1;
            }
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            } if *object_type == ObjectType::THREAD => {
                assert_eq!(*koid, me);
                // The test thread's name (the test's path), cut to Linux's 15 bytes.
                let full = std::thread::current().name().unwrap_or_default().to_owned();
                let cut = &full.as_bytes()[..full.len().min(15)];
                assert_eq!(name.as_bytes(), cut, "thread name (15 bytes)");
                assert_eq!(args[0].name, "process");
                assert_eq!(args[0].value, DecodedValue::Koid(pid));
                *saw.entry("thread_name").or_insert(0) += 1;
            }
            DecodedRecord::KernelObject {
                koid, object_type, ..
            } if *object_type == ObjectType::PROCESS => {
                assert_eq!(*koid, pid);
                *saw.entry("process_name").or_insert(0) += 1;
            }
            DecodedRecord::UserspaceObject {
                pointer,
                pid: p,
                name,
                args,
            } => {
                assert_eq!((*pointer, *p, name.as_ref()), (0xabc, pid, "uobj"));
                assert_eq!(args[0].value, DecodedValue::Bool(true));
                *saw.entry("uobj").or_insert(0) += 1;
            }
            DecodedRecord::SchedContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing_tid,
                incoming_tid,
                ..
            } => {
                assert_eq!(
                    (
                        time.ticks,
                        *cpu,
                        *outgoing_state,
                        *outgoing_tid,
                        *incoming_tid
                    ),
                    (114, 3, ThreadState::Suspended as u8, 21, 22)
                );
                *saw.entry("switch").or_insert(0) += 1;
            }
            DecodedRecord::Thread { thread, .. } => {
                assert_eq!((thread.pid, thread.tid), (pid, me));
                *saw.entry("thread").or_insert(0) += 1;
            }
            _ => {}
        }
    }
    let expected: BTreeMap<&str, i32> = [
        ("log", 1),
        ("blob", 1),
        ("kobj", 1),
        ("thread_name", 1),
        ("process_name", 1),
        ("uobj", 1),
        ("switch", 1),
        ("thread", 1),
    ]
    .into();
    assert_eq!(saw, expected);
}

#[test]
fn strings_and_threads_register_once_per_generation() {
    let _s = serial();
    let ctx = context(BufferingMode::Circular, 1 << 20, CategoryFilter::all());
    for _ in 0..100 {
        let mut w = ctx.trace_writer().unwrap();
        w.instant(1, "reg_cat", "reg_name", Scope::Thread, &[])
            .unwrap();
    }
    let first_generation = ctx.generation();
    // A clearing start of the rolling buffers keeps the durable records: the new generation's
    // registrations are appended to them.
    ctx.stop(STOP).unwrap();
    assert!(start_trace(&ctx, StartMode::ClearNondurable, CategoryFilter::all()).unwrap());
    assert_ne!(ctx.generation(), first_generation);
    for _ in 0..50 {
        let mut w = ctx.trace_writer().unwrap();
        w.instant(2, "reg_cat", "reg_name", Scope::Thread, &[])
            .unwrap();
    }
    let bytes = read(&ctx);
    let records = decode(&bytes);
    let strings = string_records(&records);
    assert_eq!(strings.get("reg_cat"), Some(&2), "{strings:?}");
    assert_eq!(strings.get("reg_name"), Some(&2));
    assert_eq!(strings.get("process"), Some(&2));
    assert_eq!(count_kind(&records, "thread"), 2);
    assert_eq!(count_kind(&records, "initialization"), 2);
    let names = |t: ObjectType| {
        records
            .iter()
            .filter(|d| matches!(&d.record, DecodedRecord::KernelObject { object_type, .. } if *object_type == t))
            .count()
    };
    assert_eq!(names(ObjectType::THREAD), 2);
    assert_eq!(names(ObjectType::PROCESS), 2);
    // Only the second generation's events are in the rolling buffers; all resolve.
    let ev = events(&records);
    assert_eq!(ev.len(), 50);
    assert!(ev
        .iter()
        .all(|e| e.category == "reg_cat" && e.name == "reg_name"));
    // And they are written with indexed refs: header + timestamp only.
    let raw = raw_records(&bytes);
    let event_sizes: Vec<usize> = raw
        .iter()
        .filter(|r| r[0] & 0xf == 4)
        .map(|r| r.len())
        .collect();
    assert!(event_sizes.iter().all(|&n| n == 2), "{event_sizes:?}");
}

#[test]
fn non_static_strings_are_written_inline() {
    let _s = serial();
    let ctx = context(BufferingMode::Oneshot, 1 << 16, CategoryFilter::all());
    let owned = String::from("dynamic-name");
    {
        let mut w = ctx.trace_writer().unwrap();
        w.instant(1, "c", TraceStr::Inline(&owned), Scope::Thread, &[])
            .unwrap();
        w.instant(2, "c", TraceStr::Inline(&owned), Scope::Thread, &[])
            .unwrap();
        w.instant(3, "c", TraceStr::Inline(""), Scope::Thread, &[])
            .unwrap();
    }
    let bytes = read(&ctx);
    let records = decode(&bytes);
    assert!(!string_records(&records).contains_key("dynamic-name"));
    let ev = events(&records);
    assert_eq!(ev[0].name, "dynamic-name");
    assert_eq!(ev[1].name, "dynamic-name");
    assert_eq!(ev[2].name, "");
    let raw = raw_records(&bytes);
    let name_refs: Vec<u64> = raw
        .iter()
        .filter(|r| r[0] & 0xf == 4)
        .map(|r| r[0] >> 48)
        .collect();
    assert_eq!(name_refs, vec![0x8000 | 12, 0x8000 | 12, 0]);
}

#[test]
fn per_thread_table_overflow_goes_inline() {
    let _s = serial();
    let ctx = context(BufferingMode::Circular, 4 << 20, CategoryFilter::all());
    let n = MAX_STRING_ENTRIES + 44;
    let names: Vec<&'static str> = (0..n)
        .map(|i| &*Box::leak(format!("leaked-{i}").into_boxed_str()))
        .collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            for &name in &names {
                let mut w = ctx.trace_writer().unwrap();
                w.instant(1, "ovf", name, Scope::Thread, &[]).unwrap();
            }
        });
    });
    let bytes = read(&ctx);
    let records = decode(&bytes);
    let strings = string_records(&records);
    // "ovf", "process" and the process record's clock argument (its name, "fxtrace.clock",
    // and its value, e.g. "rdtscp") took four entries; 252 names fit.
    let registered = names.iter().filter(|n| strings.contains_key(**n)).count();
    assert_eq!(registered, MAX_STRING_ENTRIES - 4);
    assert!(names[..MAX_STRING_ENTRIES - 4]
        .iter()
        .all(|n| strings.contains_key(*n)));
    let ev = events(&records);
    let decoded: Vec<&str> = ev.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(decoded, names);
}

#[test]
fn string_index_exhaustion_goes_inline() {
    let _s = serial();
    let ctx = context(BufferingMode::Oneshot, 1 << 16, CategoryFilter::all());
    let mut taken = 0;
    while ctx.alloc_string_index().is_some() {
        taken += 1;
    }
    assert_eq!(taken, 0x7fff);
    {
        let mut w = ctx.trace_writer().unwrap();
        w.instant(1, "exhausted_cat", "exhausted_name", Scope::Thread, &[])
            .unwrap();
        w.instant(2, "exhausted_cat", "exhausted_name", Scope::Thread, &[])
            .unwrap();
    }
    let bytes = read(&ctx);
    let records = decode(&bytes);
    assert!(string_records(&records).is_empty());
    let ev = events(&records);
    assert_eq!(ev.len(), 2);
    assert!(ev
        .iter()
        .all(|e| e.category == "exhausted_cat" && e.name == "exhausted_name"));
}

#[test]
fn thread_index_exhaustion_goes_inline() {
    let _s = serial();
    let ctx = context(BufferingMode::Oneshot, 1 << 16, CategoryFilter::all());
    while ctx.alloc_thread_index().is_some() {}
    {
        let mut w = ctx.trace_writer().unwrap();
        assert_eq!(
            w.thread_ref(),
            ThreadRef::Inline {
                pid: u64::from(std::process::id()),
                tid: tid()
            }
        );
        w.instant(1, "c", "n", Scope::Thread, &[]).unwrap();
    }
    let bytes = read(&ctx);
    let records = decode(&bytes);
    assert_eq!(count_kind(&records, "thread"), 0);
    let ev = events(&records);
    assert_eq!(ev[0].thread.tid, tid());
    // The thread is still named.
    assert!(records.iter().any(|d| matches!(&d.record,
        DecodedRecord::KernelObject { koid, object_type, .. }
            if *object_type == ObjectType::THREAD && *koid == tid())));
}

#[test]
fn an_older_generation_is_written_uncached() {
    let _s = serial();
    let older = context(BufferingMode::Oneshot, 1 << 16, CategoryFilter::all());
    let newer = context(BufferingMode::Oneshot, 1 << 16, CategoryFilter::all());
    assert!(newer.generation() > older.generation());
    {
        let mut w = newer.trace_writer().unwrap();
        assert!(w.is_cached());
        w.instant(1, "gen_cat", "gen_name", Scope::Thread, &[])
            .unwrap();
    }
    {
        let mut w = older.trace_writer().unwrap();
        assert!(
            !w.is_cached(),
            "this thread already serves a newer generation"
        );
        assert!(matches!(w.thread_ref(), ThreadRef::Inline { .. }));
        w.instant(2, "gen_cat", "gen_name", Scope::Thread, &[])
            .unwrap();
    }
    let old_bytes = read(&older);
    let old = decode(&old_bytes);
    assert!(string_records(&old).is_empty());
    let ev = events(&old);
    assert_eq!(
        (
            ev[0].category.as_ref(),
            ev[0].name.as_ref(),
            ev[0].thread.tid
        ),
        ("gen_cat", "gen_name", tid())
    );
    let new_bytes = read(&newer);
    assert_eq!(
        string_records(&decode(&new_bytes)).get("gen_name"),
        Some(&1)
    );
}

#[test]
fn threads_register_their_own_refs_and_all_resolve() {
    let _s = serial();
    const THREADS: usize = 8;
    const EVENTS: u64 = 500;
    let ctx = context(BufferingMode::Circular, 8 << 20, CategoryFilter::all());
    let names: Vec<&'static str> = (0..THREADS)
        .map(|i| &*Box::leak(format!("own-{i}").into_boxed_str()))
        .collect();
    let tids: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|&own| {
                let ctx = &ctx;
                s.spawn(move || {
                    for i in 0..EVENTS {
                        let mut w = ctx.trace_writer().unwrap();
                        let args = [Arg::new("i", ArgValue::U64(i))];
                        w.instant(i, "mt", "shared", Scope::Thread, &args).unwrap();
                        w.counter(i, "mt", own, 1, &args).unwrap();
                    }
                    tid()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let bytes = read(&ctx);
    let records = decode(&bytes);
    let strings = string_records(&records);
    assert_eq!(
        strings.get("shared"),
        Some(&THREADS),
        "one registration per thread"
    );
    assert_eq!(strings.get("mt"), Some(&THREADS));
    for own in &names {
        assert_eq!(strings.get(*own), Some(&1));
    }
    assert_eq!(count_kind(&records, "thread"), THREADS);
    let mut per_thread: HashMap<u64, (u64, u64)> = HashMap::new();
    for e in events(&records) {
        let slot = per_thread.entry(e.thread.tid).or_default();
        assert_eq!(e.category, "mt");
        match e.kind {
            DecodedEventKind::Instant => {
                assert_eq!(e.name, "shared");
                slot.0 += 1;
            }
            DecodedEventKind::Counter { id: 1 } => {
                let i = tids.iter().position(|&t| t == e.thread.tid).unwrap();
                assert_eq!(e.name, names[i]);
                slot.1 += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    for t in &tids {
        assert_eq!(per_thread.get(t), Some(&(EVENTS, EVENTS)), "thread {t}");
    }
}

#[test]
fn invalid_records_are_refused_and_counted() {
    let _s = serial();
    let ctx = context(BufferingMode::Oneshot, 1 << 16, CategoryFilter::all());
    let sixteen = [Arg::new("x", ArgValue::Null); 16];
    let fifteen = [Arg::new("x", ArgValue::Null); 15];
    {
        let mut w = ctx.trace_writer().unwrap();
        assert_eq!(
            w.instant(1, "c", "n", Scope::Thread, &sixteen),
            Err(RecordError::Encode(EncodeError::TooManyArgs { count: 16 }))
        );
        assert_eq!(
            w.instant(1, "c", "n", Scope::Global, &fifteen),
            Err(RecordError::Encode(EncodeError::TooManyArgs { count: 16 }))
        );
        w.instant(1, "c", "n", Scope::Thread, &fifteen).unwrap();
        let long = "x".repeat(32001);
        assert!(matches!(
            w.log(2, &long),
            Err(RecordError::Encode(EncodeError::StringTooLong { .. }))
        ));
        assert_eq!(ctx.records_dropped(), 3);
    }
    let bytes = read(&ctx);
    assert_eq!(events(&decode(&bytes)).len(), 1);
}

#[test]
fn category_checks_follow_the_filter_and_are_cached() {
    let _s = serial();
    let ctx = context(
        BufferingMode::Oneshot,
        1 << 16,
        CategoryFilter::new(["on", "pre:*"]),
    );
    assert!(ctx.is_category_enabled_cached("on"));
    assert!(ctx.is_category_enabled_cached("pre:x"));
    assert!(!ctx.is_category_enabled_cached("off"));
    {
        let mut w = ctx.trace_writer().unwrap();
        assert!(w.category_enabled("on"));
        assert!(!w.category_enabled("off"));
        // A cached category can still be registered as a string afterwards.
        w.instant(1, "on", "n", Scope::Thread, &[]).unwrap();
    }
    ctx.stop(STOP).unwrap();
    assert!(!ctx.is_category_enabled_cached("on"), "stopped");
    let bytes = {
        assert!(start_trace(&ctx, StartMode::ClearEntire, CategoryFilter::new(["off"])).unwrap());
        // New generation: the cached answers are not reused.
        assert!(!ctx.is_category_enabled_cached("on"));
        assert!(ctx.is_category_enabled_cached("off"));
        read(&ctx)
    };
    assert!(events(&decode(&bytes)).is_empty());
}

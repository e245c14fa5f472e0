//! `import-xray`: XRay logs to FXT, checked by decoding the FXT with `format::Decoder`.
//!
//! The real fixtures (`tests/fixtures/xray/`, made by `scripts/make-xray-fixtures.sh`)
//! are converted and cross-checked against `llvm-xray convert --output-format=yaml` of
//! the same logs: same threads, same functions by name, same entry/exit sequence with
//! the same timestamps and arguments, same custom-event payloads. Set
//! `FXTRACE_XRAY_FIXTURES=DIR` to run the checks on freshly generated fixtures. Repairs,
//! payload fallbacks and limits are checked on synthetic logs built in memory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use fxtrace_format::{
    BlobType, DecodedArg, DecodedEvent, DecodedEventKind, DecodedRecord, DecodedValue, Decoder,
    ObjectType, Thread,
};
use fxtrace_tools::convert::xray::llvm_yaml::{get, parse_flow_mapping, parse_int, YamlValue};
use fxtrace_tools::convert::xray::{
    read_log, write_fxt, FileHeader, ImportOptions, ImportStats, InstrMap, LogType, ReadStats,
    ThreadStream, WallTimeAnchor, XrayEvent, XrayEventKind, XrayLog, CATEGORY, CPU_MIGRATION_NAME,
    CUSTOM_EVENT_NAME, REPAIRS_NAME, TYPED_EVENT_NAME, WALL_TIME_NAME,
};

// === fixtures and llvm-xray's YAML ===

fn fixture_dir() -> PathBuf {
    match std::env::var_os("FXTRACE_XRAY_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(crate::WORKSPACE).join("tests/fixtures/xray"),
    }
}

fn fixture(name: &str) -> PathBuf {
    fixture_dir().join(name)
}

fn read(name: &str) -> Vec<u8> {
    let path = fixture(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn instr_map() -> InstrMap {
    InstrMap::from_yaml(&String::from_utf8(read("instr-map.yaml")).unwrap()).unwrap()
}

/// One record of llvm-xray's YAML.
#[derive(Debug, Clone)]
struct LlvmRecord {
    kind: String,
    function: String,
    tsc: u64,
    args: Vec<u64>,
    data: String,
}

/// llvm-xray's YAML: cycle frequency, and per (pid, tid) the records in order.
struct LlvmTrace {
    cycle_frequency: u64,
    threads: BTreeMap<(u64, u64), Vec<LlvmRecord>>,
}

fn parse_llvm_yaml(text: &str) -> LlvmTrace {
    let mut cycle_frequency = None;
    let mut threads: BTreeMap<(u64, u64), Vec<LlvmRecord>> = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("cycle-frequency:") {
            cycle_frequency = parse_int(v.trim());
        }
        if !t.starts_with("- {") {
            continue;
        }
        let e = parse_flow_mapping(t).unwrap_or_else(|err| panic!("{err}: {t}"));
        let s = |k: &str| {
            get(&e, k)
                .and_then(YamlValue::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let n = |k: &str| parse_int(&s(k)).unwrap_or_else(|| panic!("no `{k}` in {t}"));
        let args = match get(&e, "args") {
            Some(YamlValue::Seq(items)) => items.iter().map(|a| parse_int(a).unwrap()).collect(),
            _ => Vec::new(),
        };
        threads
            .entry((n("process"), n("thread")))
            .or_default()
            .push(LlvmRecord {
                kind: s("kind"),
                function: s("function"),
                tsc: n("tsc"),
                args,
                data: s("data"),
            });
    }
    LlvmTrace {
        cycle_frequency: cycle_frequency.expect("cycle-frequency in the YAML header"),
        threads,
    }
}

// === decoding the FXT ===

/// Everything the tests look at in a decoded FXT trace.
#[derive(Default)]
struct Fxt {
    provider_names: Vec<String>,
    ticks_per_second: Vec<u64>,
    /// Thread records: (index, thread).
    thread_records: Vec<(u8, Thread)>,
    /// Kernel objects: (koid, type, name, args).
    kernel_objects: Vec<(u64, ObjectType, String, Vec<DecodedArg<'static>>)>,
    events: Vec<DecodedEvent<'static>>,
    /// Blob and large blob records: (name, type or None for a large blob, payload).
    blobs: Vec<(String, Option<BlobType>, Vec<u8>)>,
    records: usize,
}

fn owned_args(args: &[DecodedArg<'_>]) -> Vec<DecodedArg<'static>> {
    args.iter().map(|a| a.clone().into_owned()).collect()
}

/// Decodes a whole trace; panics at any decode error or skipped record.
fn decode(bytes: &[u8]) -> Fxt {
    let mut fxt = Fxt::default();
    let mut decoder = Decoder::new(bytes);
    for r in decoder.by_ref() {
        let r = r.unwrap_or_else(|e| panic!("FXT must decode cleanly: {e}"));
        fxt.records += 1;
        match r.record {
            DecodedRecord::ProviderInfo { name, .. } => fxt.provider_names.push(name.into()),
            DecodedRecord::Initialization { ticks_per_second } => {
                fxt.ticks_per_second.push(ticks_per_second)
            }
            DecodedRecord::Thread { index, thread } => fxt.thread_records.push((index, thread)),
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            } => fxt
                .kernel_objects
                .push((koid, object_type, name.into(), owned_args(&args))),
            DecodedRecord::Event(e) => fxt.events.push(DecodedEvent {
                time: e.time,
                thread: e.thread,
                category: e.category.into_owned().into(),
                name: e.name.into_owned().into(),
                args: owned_args(&e.args).into(),
                kind: e.kind,
            }),
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } => fxt
                .blobs
                .push((name.into(), Some(blob_type), payload.into_owned())),
            DecodedRecord::LargeBlob { name, payload, .. } => {
                fxt.blobs.push((name.into(), None, payload.into_owned()))
            }
            _ => {}
        }
    }
    assert_eq!(decoder.offset(), bytes.len() as u64, "every byte decoded");
    assert_eq!(decoder.skipped().records(), 0, "nothing skipped");
    fxt
}

fn convert(log: &XrayLog, options: &ImportOptions<'_>) -> (ImportStats, Fxt) {
    let mut bytes = Vec::new();
    let stats = write_fxt(log, options, &mut bytes).expect("conversion");
    assert_eq!(stats.bytes, bytes.len() as u64);
    let fxt = decode(&bytes);
    assert_eq!(stats.records, fxt.records as u64, "records counted");
    let events = fxt.events.len() as u64;
    assert_eq!(stats.events, events, "events counted");
    (stats, fxt)
}

fn arg<'e>(e: &'e DecodedEvent<'static>, name: &str) -> Option<&'e DecodedValue<'static>> {
    e.args.iter().find(|a| a.name == name).map(|a| &a.value)
}

fn events_of(fxt: &Fxt, thread: Thread) -> Vec<&DecodedEvent<'static>> {
    fxt.events.iter().filter(|e| e.thread == thread).collect()
}

/// Checks that durations nest on every thread: each end closes the innermost open
/// begin of the same name at a time not before it, and nothing stays open. Returns
/// the number of durations.
fn assert_durations_nest(fxt: &Fxt) -> usize {
    let mut stacks: BTreeMap<Thread, Vec<(String, u64)>> = BTreeMap::new();
    let mut durations = 0;
    for e in &fxt.events {
        assert_eq!(e.category, CATEGORY);
        let stack = stacks.entry(e.thread).or_default();
        if let Some(&(_, last)) = stack.last() {
            assert!(e.time.ticks >= last, "time goes forward within a frame");
        }
        match e.kind {
            DecodedEventKind::DurationBegin => stack.push((e.name.to_string(), e.time.ticks)),
            DecodedEventKind::DurationEnd => {
                let (name, begin) = stack
                    .pop()
                    .unwrap_or_else(|| panic!("end of {} without a begin", e.name));
                assert_eq!(name, e.name, "end closes the innermost frame");
                assert!(e.time.ticks >= begin, "{name}: end before begin");
                durations += 1;
            }
            _ => {}
        }
    }
    for (thread, stack) in stacks {
        assert!(stack.is_empty(), "{thread}: frames left open: {stack:?}");
    }
    durations
}

// === real fixtures against llvm-xray ===

/// Converts `log_name` with the instrumentation map and checks it against llvm-xray's
/// YAML of the same log.
fn cross_check(log_name: &str, yaml_name: &str) -> (XrayLog, ImportStats, Fxt) {
    let log = read_log(&read(log_name)).expect("header");
    assert_eq!(log.error, None, "{log_name} decodes completely");
    let map = instr_map();
    let (stats, fxt) = convert(&log, &ImportOptions::new(log_name).with_instr_map(&map));
    let llvm = parse_llvm_yaml(&String::from_utf8(read(yaml_name)).unwrap());

    assert_eq!(fxt.provider_names, [format!("xray:{log_name}")]);
    assert_eq!(fxt.ticks_per_second, [llvm.cycle_frequency]);
    assert_eq!((stats.repairs(), stats.dropped()), (0, 0), "{stats}");
    assert_eq!(stats.unnamed_functions, 0);
    assert_eq!(assert_durations_nest(&fxt) as u64, stats.durations);

    // Same threads, each with a thread record and a kernel object naming it.
    let threads: Vec<(u64, u64)> = {
        let mut v: Vec<_> = fxt
            .thread_records
            .iter()
            .map(|(_, t)| (t.pid, t.tid))
            .collect();
        v.sort();
        v
    };
    assert_eq!(threads, llvm.threads.keys().copied().collect::<Vec<_>>());
    for (pid, tid) in &threads {
        let thread_obj = fxt
            .kernel_objects
            .iter()
            .find(|k| k.1 == ObjectType::THREAD && k.0 == *tid)
            .expect("thread kernel object");
        assert_eq!(thread_obj.3[0].name, "process");
        assert_eq!(thread_obj.3[0].value, DecodedValue::Koid(*pid));
        assert!(fxt
            .kernel_objects
            .iter()
            .any(|k| k.1 == ObjectType::PROCESS && k.0 == *pid));
    }

    let mut llvm_functions = std::collections::BTreeSet::new();
    let mut fxt_functions = std::collections::BTreeSet::new();
    for (&(pid, tid), records) in &llvm.threads {
        let thread = Thread { pid, tid };
        let events = events_of(&fxt, thread);
        // Function events: entries are begins, exits and tail exits are ends, one for
        // one and in the same order, at the same ticks, with the same names and args.
        let ours: Vec<_> = events
            .iter()
            .filter(|e| {
                matches!(
                    e.kind,
                    DecodedEventKind::DurationBegin | DecodedEventKind::DurationEnd
                )
            })
            .collect();
        let theirs: Vec<_> = records
            .iter()
            .filter(|r| r.kind.starts_with("function-"))
            .collect();
        let count = |kinds: &[&str]| theirs.iter().filter(|r| kinds.contains(&&*r.kind)).count();
        let begins = ours
            .iter()
            .filter(|e| e.kind == DecodedEventKind::DurationBegin)
            .count();
        assert_eq!(
            begins,
            count(&["function-enter", "function-enter-arg"]),
            "entries of thread {tid}"
        );
        assert_eq!(
            ours.len() - begins,
            count(&["function-exit", "function-tail-exit"]),
            "exits of thread {tid}"
        );
        for (i, (e, r)) in ours.iter().zip(&theirs).enumerate() {
            let want_kind = if r.kind.starts_with("function-enter") {
                DecodedEventKind::DurationBegin
            } else {
                DecodedEventKind::DurationEnd
            };
            assert_eq!(e.kind, want_kind, "thread {tid} event {i}: {r:?}");
            assert_eq!(e.time.ticks, r.tsc, "thread {tid} event {i}: {r:?}");
            assert_eq!(e.name, r.function, "thread {tid} event {i}");
            let args: Vec<u64> = (0..r.args.len())
                .map(|k| match arg(e, &format!("arg{k}")) {
                    Some(DecodedValue::U64(v)) => *v,
                    other => panic!("thread {tid} event {i}: arg{k} = {other:?}"),
                })
                .collect();
            assert_eq!(args, r.args, "thread {tid} event {i}");
            assert_eq!(e.args.len(), r.args.len(), "no other arguments");
            llvm_functions.insert(r.function.clone());
            fxt_functions.insert(e.name.to_string());
        }
        // Custom events: same payloads, at the same ticks.
        let our_customs: Vec<(u64, String)> = events
            .iter()
            .filter(|e| e.name == CUSTOM_EVENT_NAME)
            .map(|e| match arg(e, "data") {
                Some(DecodedValue::Blob(b)) => {
                    (e.time.ticks, String::from_utf8_lossy(b).into_owned())
                }
                other => panic!("custom event data: {other:?}"),
            })
            .collect();
        let their_customs: Vec<(u64, String)> = records
            .iter()
            .filter(|r| r.kind == "custom-event")
            .map(|r| (r.tsc, r.data.clone()))
            .collect();
        assert_eq!(our_customs, their_customs, "custom events of thread {tid}");
    }
    assert_eq!(fxt_functions, llvm_functions, "same functions by name");
    assert_eq!(stats.functions as usize, llvm_functions.len());
    assert_eq!(stats.threads as usize, llvm.threads.len());
    (log, stats, fxt)
}

#[test]
fn fdr_v5_fixture_matches_llvm_xray() {
    let (log, stats, fxt) = cross_check("fdr-v5.xray", "fdr-v5.yaml");
    assert_eq!(log.header.log_type, LogType::Fdr);
    // What the fixture program does (scripts/xray-fixture/xray_fixture.cc): on each of
    // two threads, with_arg(id * 100 + i) for i in 0..3 and one custom event.
    assert_eq!(stats.threads, 2);
    assert_eq!(stats.call_args, 6);
    assert_eq!(stats.custom_events, 2);
    let mut arg0: Vec<u64> = fxt
        .events
        .iter()
        .filter(|e| e.name == "with_arg(unsigned long)")
        .filter_map(|e| match arg(e, "arg0") {
            Some(DecodedValue::U64(v)) => Some(*v),
            _ => None,
        })
        .collect();
    arg0.sort();
    assert_eq!(arg0, [0, 1, 2, 100, 101, 102]);
    for e in fxt.events.iter().filter(|e| e.name == CUSTOM_EVENT_NAME) {
        match arg(e, "text") {
            Some(DecodedValue::Str(t)) => assert!(t.starts_with("custom event from thread ")),
            other => panic!("custom event text: {other:?}"),
        }
    }
    // One wall-clock anchor per FDR buffer, at the TSC of the buffer's first CPU record.
    let anchors: Vec<_> = fxt
        .events
        .iter()
        .filter(|e| e.name == WALL_TIME_NAME)
        .collect();
    assert_eq!(anchors.len(), 2);
    assert_eq!(stats.wall_times, 2);
    for a in anchors {
        let stream = log.thread(a.thread.tid as u32).unwrap();
        let w = stream.wall_times[0];
        assert_eq!(Some(a.time.ticks), w.tsc);
        assert_eq!(arg(a, "wall_seconds"), Some(&DecodedValue::I64(w.seconds)));
        assert_eq!(arg(a, "wall_micros"), Some(&DecodedValue::U32(w.micros)));
        // The anchor comes first on its thread.
        assert_eq!(events_of(&fxt, a.thread)[0].name, WALL_TIME_NAME);
    }
}

#[test]
fn basic_v3_fixture_matches_llvm_xray() {
    let (log, stats, fxt) = cross_check("basic-v3.xray", "basic-v3.yaml");
    assert_eq!(log.header.log_type, LogType::Basic);
    assert_eq!(stats.threads, 2);
    assert_eq!(stats.call_args, 6, "one argument per with_arg call");
    assert_eq!(stats.wall_times, 0, "basic mode has no wall-clock anchors");
    assert!(fxt.events.iter().all(|e| e.name != WALL_TIME_NAME));
}

#[test]
fn without_an_instr_map_functions_are_named_by_id() {
    let log = read_log(&read("fdr-v5.xray")).unwrap();
    let (stats, fxt) = convert(&log, &ImportOptions::new("fdr-v5.xray"));
    assert_eq!(stats.unnamed_functions, stats.functions);
    assert!(stats.to_string().contains("functions without a name"));
    let map = instr_map();
    let mut seen = 0;
    for e in fxt
        .events
        .iter()
        .filter(|e| e.kind == DecodedEventKind::DurationBegin)
    {
        let id: i32 = e
            .name
            .strip_prefix("func#")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("name {:?}", e.name));
        assert!(map.function_name(id).is_some(), "func#{id} is in the map");
        seen += 1;
    }
    assert!(seen > 30);
}

#[test]
fn truncated_log_gives_partial_valid_fxt() {
    let data = read("fdr-v5.xray");
    let cut = data.len() * 2 / 3 + 3; // inside a record
    let log = read_log(&data[..cut]).expect("header");
    let err = log.error.clone().expect("a truncated log reports an error");
    assert!(err.offset <= cut as u64 && err.offset > 32, "{err}");
    assert!(err.to_string().contains("byte offset"), "{err}");
    assert!(log.event_count() > 0);
    let (stats, fxt) = convert(&log, &ImportOptions::new("cut.xray"));
    // Every decoded function event is in the FXT; frames left open are closed.
    let function_events = log
        .threads
        .iter()
        .flat_map(|t| &t.events)
        .filter(|e| e.kind.func_id().is_some())
        .count() as u64;
    assert_eq!(
        stats.durations * 2,
        function_events + stats.closed_at_end + stats.unwound_frames - stats.dropped_exits,
        "{stats}"
    );
    assert!(
        stats.closed_at_end > 0,
        "the cut leaves frames open: {stats}"
    );
    assert_eq!(assert_durations_nest(&fxt) as u64, stats.durations);
    assert!(fxt.events.iter().any(|e| e.name == REPAIRS_NAME));
}

// === synthetic logs ===

fn header(cycle_frequency: u64) -> FileHeader {
    FileHeader {
        version: 5,
        log_type: LogType::Fdr,
        constant_tsc: true,
        nonstop_tsc: true,
        cycle_frequency,
        free_form: [0; 16],
    }
}

fn stream(pid: u32, tid: u32, events: Vec<(u64, XrayEventKind)>) -> ThreadStream {
    ThreadStream {
        pid: Some(pid),
        tid,
        events: events
            .into_iter()
            .map(|(tsc, kind)| XrayEvent {
                tsc,
                cpu: 0,
                pid: Some(pid),
                tid,
                kind,
            })
            .collect(),
        wall_times: Vec::new(),
        buffers: 1,
    }
}

fn synthetic(threads: Vec<ThreadStream>) -> XrayLog {
    XrayLog {
        header: header(2_000_000_000),
        threads,
        stats: ReadStats::default(),
        error: None,
    }
}

use XrayEventKind::{CpuMigration, CustomEvent, Enter, EnterWithArgs, Exit, TailExit, TypedEvent};

/// (kind, name, ticks) of the events of a trace.
fn timeline(fxt: &Fxt) -> Vec<(DecodedEventKind, String, u64)> {
    fxt.events
        .iter()
        .map(|e| (e.kind, e.name.to_string(), e.time.ticks))
        .collect()
}

const B: DecodedEventKind = DecodedEventKind::DurationBegin;
const E: DecodedEventKind = DecodedEventKind::DurationEnd;
const I: DecodedEventKind = DecodedEventKind::Instant;

fn ev(kind: DecodedEventKind, name: &str, ticks: u64) -> (DecodedEventKind, String, u64) {
    (kind, name.to_string(), ticks)
}

#[test]
fn mismatched_exits_unwind_to_the_matching_frame() {
    let log = synthetic(vec![stream(
        1,
        2,
        vec![
            (10, Enter { func_id: 1 }),
            (20, Enter { func_id: 2 }),
            (30, Enter { func_id: 3 }),
            (40, Exit { func_id: 1 }), // closes 3 and 2 first
            (50, Exit { func_id: 4 }), // never entered: dropped
        ],
    )]);
    let (stats, fxt) = convert(&log, &ImportOptions::new("x"));
    assert_eq!(
        (
            stats.unwound_frames,
            stats.dropped_exits,
            stats.closed_at_end
        ),
        (2, 1, 0)
    );
    assert_eq!(assert_durations_nest(&fxt), 3);
    assert_eq!(
        timeline(&fxt),
        [
            ev(B, "func#1", 10),
            ev(B, "func#2", 20),
            ev(B, "func#3", 30),
            ev(E, "func#3", 40),
            ev(E, "func#2", 40),
            ev(E, "func#1", 40),
            ev(I, REPAIRS_NAME, 50),
        ]
    );
    let repairs = &fxt.events[6];
    assert_eq!(arg(repairs, "unwound_frames"), Some(&DecodedValue::U64(2)));
    assert_eq!(arg(repairs, "dropped_exits"), Some(&DecodedValue::U64(1)));
    assert_eq!(arg(repairs, "closed_at_end"), Some(&DecodedValue::U64(0)));
    assert!(stats.to_string().contains("2 repairs"), "{stats}");
    assert!(stats.to_string().contains("1 dropped"), "{stats}");
}

#[test]
fn tail_exits_close_their_frame_and_recursion_matches_innermost() {
    let log = synthetic(vec![stream(
        1,
        2,
        vec![
            (1, Enter { func_id: 5 }),
            (2, Enter { func_id: 5 }),
            (3, Enter { func_id: 6 }),
            (4, TailExit { func_id: 6 }),
            (5, Enter { func_id: 7 }), // the tail callee
            (6, Exit { func_id: 7 }),
            (7, Exit { func_id: 5 }),
            (8, Exit { func_id: 5 }),
        ],
    )]);
    let (stats, fxt) = convert(&log, &ImportOptions::new("x"));
    assert_eq!((stats.repairs(), stats.dropped()), (0, 0));
    assert_eq!(assert_durations_nest(&fxt), 4);
    let t = timeline(&fxt);
    assert_eq!(t[3], ev(E, "func#6", 4));
    assert_eq!(t[7], ev(E, "func#5", 8));
}

#[test]
fn open_frames_close_at_the_last_timestamp_and_time_never_goes_back() {
    let log = synthetic(vec![
        stream(
            1,
            2,
            vec![
                (100, Enter { func_id: 1 }),
                (200, Enter { func_id: 2 }),
                (
                    150,
                    CustomEvent {
                        data: b"late".to_vec(),
                    },
                ), // earlier than 200: clamped
                (300, CustomEvent { data: vec![] }),
            ],
        ),
        stream(
            1,
            3,
            vec![(5, Enter { func_id: 1 }), (6, Exit { func_id: 1 })],
        ),
    ]);
    let (stats, fxt) = convert(&log, &ImportOptions::new("x"));
    assert_eq!((stats.closed_at_end, stats.clamped_timestamps), (2, 1));
    assert_eq!(assert_durations_nest(&fxt), 3);
    let t2 = events_of(&fxt, Thread { pid: 1, tid: 2 });
    let kinds: Vec<_> = t2
        .iter()
        .map(|e| (e.kind, e.name.to_string(), e.time.ticks))
        .collect();
    assert_eq!(
        kinds,
        [
            ev(B, "func#1", 100),
            ev(B, "func#2", 200),
            ev(I, CUSTOM_EVENT_NAME, 200),
            ev(I, CUSTOM_EVENT_NAME, 300),
            ev(E, "func#2", 300),
            ev(E, "func#1", 300),
            ev(I, REPAIRS_NAME, 300),
        ]
    );
    // The empty payload has no text argument, but its (empty) data.
    assert_eq!(arg(t2[3], "size"), Some(&DecodedValue::U64(0)));
    assert_eq!(arg(t2[3], "text"), None);
    assert_eq!(arg(t2[3], "data"), Some(&DecodedValue::Blob(vec![].into())));
    // The other thread needed no repair: no repairs event there.
    let t3 = events_of(&fxt, Thread { pid: 1, tid: 3 });
    assert_eq!(t3.len(), 2);
}

#[test]
fn call_arguments_become_u64_args_and_beyond_fifteen_are_counted() {
    let many: Vec<u64> = (0..17).map(|i| i * 1000 + u64::MAX / 2).collect();
    let log = synthetic(vec![stream(
        1,
        2,
        vec![
            (
                1,
                EnterWithArgs {
                    func_id: 3,
                    args: many.clone(),
                },
            ),
            (2, Exit { func_id: 3 }),
        ],
    )]);
    let (stats, fxt) = convert(&log, &ImportOptions::new("x"));
    assert_eq!((stats.call_args, stats.dropped_call_args), (15, 2));
    assert_eq!(stats.dropped(), 2);
    let begin = &fxt.events[0];
    assert_eq!(begin.args.len(), 15);
    for (i, v) in many.iter().take(15).enumerate() {
        assert_eq!(arg(begin, &format!("arg{i}")), Some(&DecodedValue::U64(*v)));
    }
}

#[test]
fn payloads_go_inline_then_into_blob_records_chunked_by_name() {
    // Records hold at most 4095 words. An instant event with a `size` (2 words) and a
    // `data` argument (1 word + payload) holds at most (4095 - 2 - 2 - 1) * 8 = 32720
    // payload bytes; a blob record with an indexed name (1 word) at most 32752.
    let small = b"hello".to_vec();
    let medium = vec![0xabu8; 32_721]; // one byte too many for an argument
    let edge = vec![0xefu8; 32_753]; // one byte too many for a blob record
    let large = vec![0xcdu8; 40_000]; // beyond a blob record's 32767-byte size field
    let log = synthetic(vec![stream(
        1,
        2,
        vec![
            (
                1,
                TypedEvent {
                    event_type: 7,
                    data: small.clone(),
                },
            ),
            (
                2,
                CustomEvent {
                    data: medium.clone(),
                },
            ),
            (3, CustomEvent { data: edge.clone() }),
            (
                4,
                CustomEvent {
                    data: vec![0x11; 32_720],
                },
            ), // just fits an argument
            (
                5,
                TypedEvent {
                    event_type: 9,
                    data: large.clone(),
                },
            ),
        ],
    )]);
    let (stats, fxt) = convert(&log, &ImportOptions::new("x"));
    assert_eq!((stats.custom_events, stats.typed_events), (3, 2));
    // medium: one record; edge: 32745 + 8 bytes; large: 32751 + 7249 bytes.
    assert_eq!(stats.blob_records, 5);
    let [typed, custom, edge_event, fits, big] = [0, 1, 2, 3, 4].map(|i| &fxt.events[i]);
    assert_eq!(arg(edge_event, "size"), Some(&DecodedValue::U64(32_753)));
    assert!(matches!(arg(fits, "data"), Some(DecodedValue::Blob(b)) if b.len() == 32_720));
    assert_eq!(typed.name, TYPED_EVENT_NAME);
    assert_eq!(arg(typed, "type"), Some(&DecodedValue::U32(7)));
    assert_eq!(arg(typed, "data"), Some(&DecodedValue::Blob(small.into())));
    assert_eq!(
        arg(typed, "text"),
        Some(&DecodedValue::Str("hello".to_string().into()))
    );
    assert_eq!(arg(custom, "data"), None);
    assert_eq!(arg(custom, "size"), Some(&DecodedValue::U64(32_721)));
    assert_eq!(
        arg(custom, "blob"),
        Some(&DecodedValue::Str(CUSTOM_EVENT_NAME.to_string().into()))
    );
    assert_eq!(arg(big, "type"), Some(&DecodedValue::U32(9)));
    // Every chunk is a DATA blob record (never a large record, which Perfetto misframes);
    // chunks with the same name append, in order.
    assert!(fxt
        .blobs
        .iter()
        .all(|(_, ty, p)| *ty == Some(BlobType::DATA) && p.len() <= 32_752));
    let sizes: Vec<usize> = fxt.blobs.iter().map(|(_, _, p)| p.len()).collect();
    assert_eq!(sizes, [32_721, 32_745, 8, 32_751, 7_249]);
    let joined = |name: &str, range: std::ops::Range<usize>| -> Vec<u8> {
        fxt.blobs[range]
            .iter()
            .inspect(|(n, _, _)| assert_eq!(n, name))
            .flat_map(|(_, _, p)| p.iter().copied())
            .collect()
    };
    assert_eq!(joined(CUSTOM_EVENT_NAME, 0..1), medium);
    assert_eq!(joined(CUSTOM_EVENT_NAME, 1..3), edge);
    assert_eq!(joined(TYPED_EVENT_NAME, 3..5), large);
}

#[test]
fn migrations_and_wall_times_are_instant_events_in_time_order() {
    let mut s = stream(
        4,
        5,
        vec![
            (1_000, Enter { func_id: 1 }),
            (1_500, CpuMigration { from: 0, to: 3 }),
            (1_500, Exit { func_id: 1 }),
            (9_000, Enter { func_id: 1 }),
            (9_100, Exit { func_id: 1 }),
        ],
    );
    s.wall_times = vec![
        WallTimeAnchor {
            seconds: 10,
            micros: 5,
            tsc: Some(900),
        },
        WallTimeAnchor {
            seconds: 11,
            micros: 0,
            tsc: None, // buffer ended before its first CPU record
        },
        WallTimeAnchor {
            seconds: 12,
            micros: 7,
            tsc: Some(8_000),
        },
    ];
    let (stats, fxt) = convert(&synthetic(vec![s]), &ImportOptions::new("x"));
    assert_eq!(
        (
            stats.cpu_migrations,
            stats.wall_times,
            stats.unanchored_wall_times
        ),
        (1, 2, 1)
    );
    assert_eq!(
        timeline(&fxt),
        [
            ev(I, WALL_TIME_NAME, 900),
            ev(B, "func#1", 1_000),
            ev(I, CPU_MIGRATION_NAME, 1_500),
            ev(E, "func#1", 1_500),
            ev(I, WALL_TIME_NAME, 8_000),
            ev(B, "func#1", 9_000),
            ev(E, "func#1", 9_100),
        ]
    );
    assert_eq!(arg(&fxt.events[2], "from"), Some(&DecodedValue::U32(0)));
    assert_eq!(arg(&fxt.events[2], "to"), Some(&DecodedValue::U32(3)));
    assert_eq!(
        arg(&fxt.events[4], "wall_seconds"),
        Some(&DecodedValue::I64(12))
    );
    assert_eq!(
        arg(&fxt.events[4], "wall_micros"),
        Some(&DecodedValue::U32(7))
    );
    assert!(stats.to_string().contains("1 wall times without a TSC"));
}

#[test]
fn threads_beyond_255_use_inline_refs() {
    let threads: Vec<_> = (0..300)
        .map(|i| {
            stream(
                7,
                1_000 + i,
                vec![
                    (u64::from(i), Enter { func_id: 1 }),
                    (u64::from(i) + 1, Exit { func_id: 1 }),
                ],
            )
        })
        .collect();
    let (stats, fxt) = convert(&synthetic(threads), &ImportOptions::new("x"));
    assert_eq!(stats.threads, 300);
    assert_eq!(fxt.thread_records.len(), 255);
    assert_eq!(
        fxt.thread_records[254],
        (255, Thread { pid: 7, tid: 1_254 })
    );
    let thread_objects = fxt
        .kernel_objects
        .iter()
        .filter(|k| k.1 == ObjectType::THREAD)
        .count();
    assert_eq!(thread_objects, 300);
    // Every thread's events decode to its own (pid, tid), inline or not.
    for i in [0u64, 254, 255, 299] {
        let t = Thread {
            pid: 7,
            tid: 1_000 + i,
        };
        let ticks: Vec<u64> = events_of(&fxt, t).iter().map(|e| e.time.ticks).collect();
        assert_eq!(ticks, [i, i + 1], "thread {t}");
    }
    assert_eq!(assert_durations_nest(&fxt), 300);
}

#[test]
fn zero_cycle_frequency_falls_back_to_nanoseconds() {
    let mut log = synthetic(vec![stream(1, 2, vec![(5, Enter { func_id: 1 })])]);
    log.header = header(0);
    let (stats, fxt) = convert(&log, &ImportOptions::new("x"));
    assert!(stats.ticks_per_second_defaulted);
    assert_eq!(fxt.ticks_per_second, [1_000_000_000]);
    // A lone entry is closed at the thread's only timestamp.
    assert_eq!(stats.closed_at_end, 1);
    assert_eq!(assert_durations_nest(&fxt), 1);
}

#[test]
fn process_and_provider_are_named_after_the_log_file() {
    let log = synthetic(vec![stream(42, 43, vec![])]);
    let (_, fxt) = convert(&log, &ImportOptions::new("xray-log.server.a1B2c3"));
    assert_eq!(fxt.provider_names, ["xray:xray-log.server.a1B2c3"]);
    let process = fxt
        .kernel_objects
        .iter()
        .find(|k| k.1 == ObjectType::PROCESS)
        .unwrap();
    assert_eq!((process.0, process.2.as_str()), (42, "server"));
    assert_eq!(fxt.thread_records, [(1, Thread { pid: 42, tid: 43 })]);
    assert!(fxt.events.is_empty());
}

// === the command line ===

fn fxtrace(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .args(args)
        .output()
        .expect("run fxtrace")
}

#[test]
fn cli_imports_a_real_log() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fdr.fxt");
    let log = fixture("fdr-v5.xray");
    let map = fixture("instr-map.yaml");
    let o = fxtrace(&[
        "import-xray".as_ref(),
        log.as_os_str(),
        "--instr-map".as_ref(),
        map.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("2 threads, 7 functions,") && stdout.contains("0 repairs, 0 dropped"),
        "{stdout}"
    );
    let fxt = decode(&std::fs::read(&out).unwrap());
    assert!(fxt.events.iter().any(|e| e.name == "worker(void*)"));
    assert_durations_nest(&fxt);

    // The same to standard output: identical bytes, the summary on standard error.
    let o2 = fxtrace(&[
        "import-xray".as_ref(),
        log.as_os_str(),
        "--instr-map".as_ref(),
        map.as_os_str(),
        "-o".as_ref(),
        "-".as_ref(),
    ]);
    assert!(o2.status.success());
    assert_eq!(o2.stdout, std::fs::read(&out).unwrap());
    assert!(String::from_utf8_lossy(&o2.stderr).contains("2 threads"));
}

#[test]
fn cli_reports_a_malformed_log_with_its_offset_after_writing_the_good_part() {
    let dir = tempfile::tempdir().unwrap();
    let data = read("basic-v3.xray");
    let cut = 32 + 32 * 20 + 5; // 20 whole records, then 5 bytes of the 21st
    let log = dir.path().join("cut.xray");
    std::fs::write(&log, &data[..cut]).unwrap();
    let decoded = read_log(&data[..cut]).unwrap();
    assert_eq!(
        decoded.error.as_ref().map(|e| e.offset),
        Some(cut as u64 - 5)
    );
    let out = dir.path().join("cut.fxt");
    let o = fxtrace(&[
        "import-xray".as_ref(),
        log.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "exit status must report the damage");
    assert!(
        stderr.contains(&format!("byte offset {}", cut - 5)),
        "{stderr}"
    );
    let events = decoded.event_count();
    assert!(
        stderr.contains(&format!("holds the {events} events decoded before it")),
        "{stderr}"
    );
    let fxt = decode(&std::fs::read(&out).unwrap());
    let function_events = fxt
        .events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                DecodedEventKind::DurationBegin | DecodedEventKind::DurationEnd
            )
        })
        .count();
    let decoded_function_events = decoded
        .threads
        .iter()
        .flat_map(|t| &t.events)
        .filter(|e| e.kind.func_id().is_some())
        .count();
    assert!(function_events >= decoded_function_events && decoded_function_events > 10);
    assert_durations_nest(&fxt);

    // A file that is not an XRay log at all: nothing usable, an error naming the cause.
    let junk = dir.path().join("junk.xray");
    std::fs::write(&junk, [0xffu8; 40]).unwrap();
    let o = fxtrace(&[
        "import-xray".as_ref(),
        junk.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("junk.xray"));

    // A missing instrumentation map is an error too.
    let o = fxtrace(&[
        "import-xray".as_ref(),
        fixture("basic-v3.xray").as_os_str(),
        "--instr-map".as_ref(),
        dir.path().join("nope").as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nope"));
}

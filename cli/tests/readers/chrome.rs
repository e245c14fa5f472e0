//! `convert --to chrome-json`: golden conversions of small hand-built traces (one per event
//! kind), the example trace as valid, well-nested JSON, repairs of mismatched durations,
//! and the command line on files and standard streams.

use crate::write_all_records;

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};

use fxtrace_format::lbr::{LbrBranch, LbrPayload};
use fxtrace_format::{
    Arg, ArgValue, Blob, BlobType, ContextSwitch, Event, EventKind, Initialization, KernelObject,
    LargeBlob, LargeBlobMetadata, Log, ObjectType, ProviderEvent, ProviderInfo, RecordWriter,
    SchedContextSwitch, SchedThreadWakeup, StringRef, ThreadRecord, ThreadRef, ThreadState,
    UserspaceObject, PROVIDER_EVENT_BUFFER_OVERFLOW,
};
use fxtrace_tools::convert::chrome::{
    convert, ChromeConversion, CPU_PROCESS_PID, CPU_TRACK_TID_BASE,
};
use serde_json::Value;

const T: ThreadRef = ThreadRef::Inline { pid: 10, tid: 11 };
const U: ThreadRef = ThreadRef::Inline { pid: 10, tid: 12 };

fn ev<'a>(
    ticks: u64,
    thread: ThreadRef,
    name: &'a str,
    kind: EventKind,
    args: &'a [Arg<'a>],
) -> Event<'a> {
    Event {
        ticks,
        thread,
        category: StringRef::Inline("c"),
        name: StringRef::Inline(name),
        args,
        kind,
    }
}

/// Converts a trace; returns the event lines (without separators), the parsed JSON and
/// the conversion's outcome.
fn run(bytes: &[u8]) -> (Vec<String>, Value, ChromeConversion) {
    let mut out = Vec::new();
    let done = convert(bytes, &mut out).expect("writing to a Vec cannot fail");
    let text = String::from_utf8(out).unwrap();
    let value: Value = serde_json::from_str(&text).expect("output is valid JSON");
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.remove(0), "{\"traceEvents\":[");
    let end = lines
        .iter()
        .position(|l| *l == "],")
        .expect("end of traceEvents");
    let events = lines[..end]
        .iter()
        .map(|l| l.strip_suffix(',').unwrap_or(l).to_string())
        .collect();
    (events, value, done)
}

fn trace(build: impl FnOnce(&mut RecordWriter)) -> Vec<u8> {
    let mut w = RecordWriter::with_magic();
    build(&mut w);
    w.to_bytes()
}

#[test]
fn durations_begin_end_and_complete() {
    let args = [Arg::new("n", ArgValue::U32(3))];
    let bytes = trace(|w| {
        w.push(&ev(1_000, T, "outer", EventKind::DurationBegin, &args))
            .unwrap();
        w.push(&ev(1_500, T, "inner", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(2_000, T, "inner", EventKind::DurationEnd, &[]))
            .unwrap();
        w.push(&ev(
            2_250,
            T,
            "x",
            EventKind::DurationComplete { end_ticks: 2_750 },
            &[],
        ))
        .unwrap();
        w.push(&ev(3_000, T, "outer", EventKind::DurationEnd, &args))
            .unwrap();
    });
    let (events, _, done) = run(&bytes);
    assert_eq!(
        events,
        [
            r#"{"ph":"B","ts":1.000,"pid":10,"tid":11,"cat":"c","name":"outer","args":{"n":3}}"#,
            r#"{"ph":"B","ts":1.500,"pid":10,"tid":11,"cat":"c","name":"inner"}"#,
            r#"{"ph":"E","ts":2.000,"pid":10,"tid":11,"cat":"c","name":"inner"}"#,
            r#"{"ph":"X","ts":2.250,"pid":10,"tid":11,"cat":"c","name":"x","dur":0.500}"#,
            r#"{"ph":"E","ts":3.000,"pid":10,"tid":11,"cat":"c","name":"outer","args":{"n":3}}"#,
        ]
    );
    assert!(
        done.stats.warnings().is_empty(),
        "{:?}",
        done.stats.warnings()
    );
}

#[test]
fn timestamps_keep_nanoseconds_at_any_tick_rate() {
    let bytes = trace(|w| {
        // 3 ticks per ns: 3_703 ticks = 1234.333… ns → 1234 ns.
        w.push(&Initialization {
            ticks_per_second: 3_000_000_000,
        })
        .unwrap();
        w.push(&ev(3_703, T, "i", EventKind::Instant, &[])).unwrap();
        w.push(&ev(3_000_000_000_000, T, "late", EventKind::Instant, &[]))
            .unwrap();
    });
    let (events, value, _) = run(&bytes);
    assert!(events[0].contains(r#""ts":1.234,"#), "{}", events[0]);
    assert!(
        events[1].contains(r#""ts":1000000000.000,"#),
        "{}",
        events[1]
    );
    assert_eq!(value["traceEvents"][0]["ts"].as_f64(), Some(1.234));
}

#[test]
fn instants_with_scope() {
    let global = [Arg::new(
        "scope",
        ArgValue::Str(StringRef::Inline("global")),
    )];
    let process = [
        Arg::new("k", ArgValue::Bool(false)),
        Arg::new("scope", ArgValue::Str(StringRef::Inline("p"))),
    ];
    let odd = [Arg::new(
        "scope",
        ArgValue::Str(StringRef::Inline("galaxy")),
    )];
    let bytes = trace(|w| {
        w.push(&ev(1_000, T, "t", EventKind::Instant, &[])).unwrap();
        w.push(&ev(2_000, T, "g", EventKind::Instant, &global))
            .unwrap();
        w.push(&ev(3_000, T, "p", EventKind::Instant, &process))
            .unwrap();
        w.push(&ev(4_000, T, "odd", EventKind::Instant, &odd))
            .unwrap();
    });
    let (events, _, _) = run(&bytes);
    assert_eq!(
        events,
        [
            r#"{"ph":"i","ts":1.000,"pid":10,"tid":11,"cat":"c","name":"t","s":"t"}"#,
            r#"{"ph":"i","ts":2.000,"pid":10,"tid":11,"cat":"c","name":"g","s":"g"}"#,
            r#"{"ph":"i","ts":3.000,"pid":10,"tid":11,"cat":"c","name":"p","s":"p","args":{"k":false}}"#,
            r#"{"ph":"i","ts":4.000,"pid":10,"tid":11,"cat":"c","name":"odd","s":"t","args":{"scope":"galaxy"}}"#,
        ]
    );
}

#[test]
fn counters_one_series_per_numeric_argument() {
    let args = [
        Arg::new("reads", ArgValue::U64(7)),
        Arg::new("label", ArgValue::Str(StringRef::Inline("not a number"))),
        Arg::new("ratio", ArgValue::F64(0.25)),
        Arg::new("delta", ArgValue::I32(-2)),
    ];
    let bytes = trace(|w| {
        w.push(&ev(1_000, T, "io", EventKind::Counter { id: 0 }, &args))
            .unwrap();
        w.push(&ev(
            2_000,
            T,
            "io",
            EventKind::Counter { id: 0x2a },
            &args[..1],
        ))
        .unwrap();
    });
    let (events, _, done) = run(&bytes);
    assert_eq!(
        events,
        [
            r#"{"ph":"C","ts":1.000,"pid":10,"tid":11,"cat":"c","name":"io","args":{"reads":7,"ratio":0.25,"delta":-2}}"#,
            r#"{"ph":"C","ts":2.000,"pid":10,"tid":11,"cat":"c","name":"io","id":"0x2a","args":{"reads":7}}"#,
        ]
    );
    assert_eq!(done.stats.counter_args_dropped, 1);
    assert_eq!(
        done.stats.warnings(),
        ["1 non-numeric counter argument(s) were dropped"]
    );
}

#[test]
fn async_events_carry_id_and_category() {
    // (An id above 2^53 stays exact: a string.)
    let bytes = trace(|w| {
        w.push(&ev(
            1_000,
            T,
            "req",
            EventKind::AsyncBegin { id: u64::MAX },
            &[],
        ))
        .unwrap();
        w.push(&ev(
            2_000,
            U,
            "req",
            EventKind::AsyncInstant { id: 0xabc },
            &[],
        ))
        .unwrap();
        w.push(&ev(
            3_000,
            U,
            "req",
            EventKind::AsyncEnd { id: u64::MAX },
            &[],
        ))
        .unwrap();
    });
    let (events, _, _) = run(&bytes);
    assert_eq!(
        events,
        [
            r#"{"ph":"b","ts":1.000,"pid":10,"tid":11,"cat":"c","name":"req","id":"0xffffffffffffffff"}"#,
            r#"{"ph":"n","ts":2.000,"pid":10,"tid":12,"cat":"c","name":"req","id":"0xabc"}"#,
            r#"{"ph":"e","ts":3.000,"pid":10,"tid":12,"cat":"c","name":"req","id":"0xffffffffffffffff"}"#,
        ]
    );
}

#[test]
fn flows_bind_to_enclosing_slices() {
    let bytes = trace(|w| {
        w.push(&ev(1_000, T, "send", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(1_100, T, "msg", EventKind::FlowBegin { id: 5 }, &[]))
            .unwrap();
        w.push(&ev(1_200, T, "send", EventKind::DurationEnd, &[]))
            .unwrap();
        w.push(&ev(2_000, U, "recv", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(2_100, U, "msg", EventKind::FlowStep { id: 5 }, &[]))
            .unwrap();
        w.push(&ev(2_200, U, "msg", EventKind::FlowEnd { id: 5 }, &[]))
            .unwrap();
        w.push(&ev(2_300, U, "recv", EventKind::DurationEnd, &[]))
            .unwrap();
    });
    let (events, _, _) = run(&bytes);
    assert_eq!(
        events[1],
        r#"{"ph":"s","ts":1.100,"pid":10,"tid":11,"cat":"c","name":"msg","id":"0x5","bp":"e"}"#
    );
    assert_eq!(
        events[4],
        r#"{"ph":"t","ts":2.100,"pid":10,"tid":12,"cat":"c","name":"msg","id":"0x5","bp":"e"}"#
    );
    assert_eq!(
        events[5],
        r#"{"ph":"f","ts":2.200,"pid":10,"tid":12,"cat":"c","name":"msg","id":"0x5","bp":"e"}"#
    );
}

#[test]
fn logs_are_instants_with_the_message() {
    let bytes = trace(|w| {
        w.push(&Log {
            ticks: 5_000,
            thread: T,
            message: "disk \"sda\" is slow\n",
        })
        .unwrap();
    });
    let (events, value, _) = run(&bytes);
    assert_eq!(
        events,
        [
            r#"{"ph":"i","ts":5.000,"pid":10,"tid":11,"cat":"log","name":"log","s":"t","args":{"message":"disk \"sda\" is slow\n"}}"#
        ]
    );
    assert_eq!(
        value["traceEvents"][0]["args"]["message"],
        "disk \"sda\" is slow\n"
    );
}

#[test]
fn process_and_thread_names() {
    let process_arg = [Arg::new("process", ArgValue::Koid(10))];
    let bytes = trace(|w| {
        w.push(&KernelObject {
            koid: 10,
            object_type: ObjectType::PROCESS,
            name: "server".into(),
            args: &[],
        })
        .unwrap();
        w.push(&KernelObject {
            koid: 11,
            object_type: ObjectType::THREAD,
            name: "worker".into(),
            args: &process_arg,
        })
        .unwrap();
        // No "process" argument, but a thread record said tid 12 is in pid 10.
        w.push(&ThreadRecord {
            index: 1,
            pid: 10,
            tid: 12,
        })
        .unwrap();
        w.push(&KernelObject {
            koid: 12,
            object_type: ObjectType::THREAD,
            name: "io".into(),
            args: &[],
        })
        .unwrap();
        // Neither: the name cannot be placed, and that is counted.
        w.push(&KernelObject {
            koid: 13,
            object_type: ObjectType::THREAD,
            name: "lost".into(),
            args: &[],
        })
        .unwrap();
        // Another object type has no JSON form.
        w.push(&KernelObject {
            koid: 14,
            object_type: ObjectType(4),
            name: "vmo".into(),
            args: &[],
        })
        .unwrap();
    });
    let (events, _, done) = run(&bytes);
    assert_eq!(
        events,
        [
            r#"{"ph":"M","pid":10,"cat":"__metadata","name":"process_name","args":{"name":"server"}}"#,
            r#"{"ph":"M","pid":10,"tid":11,"cat":"__metadata","name":"thread_name","args":{"name":"worker"}}"#,
            r#"{"ph":"M","pid":10,"tid":12,"cat":"__metadata","name":"thread_name","args":{"name":"io"}}"#,
        ]
    );
    assert_eq!(done.stats.thread_names_without_process, 1);
    assert_eq!(done.stats.not_converted.get("kernel_object"), Some(&1));
}

#[test]
fn context_switches_become_cpu_slices() {
    let process_arg = [Arg::new("process", ArgValue::Koid(10))];
    let weights = [Arg::new("incoming_weight", ArgValue::I32(3))];
    let bytes = trace(|w| {
        w.push(&KernelObject {
            koid: 11,
            object_type: ObjectType::THREAD,
            name: "worker".into(),
            args: &process_arg,
        })
        .unwrap();
        // CPU 2: idle → 11 at 1 µs, 11 → 12 at 4 µs (11 blocked), 12 → idle at 6 µs.
        for (ticks, out, state, incoming) in [
            (
                1_000,
                ThreadRef::Inline { pid: 0, tid: 0 },
                ThreadState::Running,
                T,
            ),
            (4_000, T, ThreadState::Blocked, U),
            (
                6_000,
                U,
                ThreadState::Suspended,
                ThreadRef::Inline { pid: 0, tid: 0 },
            ),
        ] {
            w.push(&ContextSwitch {
                ticks,
                cpu: 2,
                outgoing_state: state,
                outgoing: out,
                incoming,
                outgoing_priority: 20,
                incoming_priority: 7,
            })
            .unwrap();
        }
        // The by-tid layout on CPU 300, still running at the end of the trace (8 µs).
        w.push(&SchedContextSwitch {
            ticks: 7_000,
            cpu: 300,
            outgoing_state: ThreadState::Blocked,
            outgoing_tid: 0,
            incoming_tid: 11,
            args: &weights,
        })
        .unwrap();
        let waker = [Arg::new("waker", ArgValue::Koid(12))];
        w.push(&SchedThreadWakeup {
            ticks: 8_000,
            cpu: 2,
            waking_tid: 11,
            args: &waker,
        })
        .unwrap();
    });
    let (events, _, done) = run(&bytes);
    let cpu_pid = CPU_PROCESS_PID;
    let cpu2 = CPU_TRACK_TID_BASE + 2;
    let cpu300 = CPU_TRACK_TID_BASE + 300;
    let expected = [
        r#"{"ph":"M","pid":10,"tid":11,"cat":"__metadata","name":"thread_name","args":{"name":"worker"}}"#.to_string(),
        format!(r#"{{"ph":"M","pid":{cpu_pid},"cat":"__metadata","name":"process_name","args":{{"name":"CPUs"}}}}"#),
        format!(
            r#"{{"ph":"M","pid":{cpu_pid},"cat":"__metadata","name":"process_sort_index","args":{{"sort_index":-1}}}}"#
        ),
        format!(
            r#"{{"ph":"M","pid":{cpu_pid},"tid":{cpu2},"cat":"__metadata","name":"thread_name","args":{{"name":"CPU 2"}}}}"#
        ),
        format!(
            r#"{{"ph":"M","pid":{cpu_pid},"tid":{cpu2},"cat":"__metadata","name":"thread_sort_index","args":{{"sort_index":2}}}}"#
        ),
        format!(
            r#"{{"ph":"X","ts":1.000,"pid":{cpu_pid},"tid":{cpu2},"cat":"cpu","name":"worker (11)","dur":3.000,"args":{{"tid":11,"pid":10,"priority":7,"end_state":"blocked"}}}}"#
        ),
        format!(
            r#"{{"ph":"X","ts":4.000,"pid":{cpu_pid},"tid":{cpu2},"cat":"cpu","name":"tid 12","dur":2.000,"args":{{"tid":12,"pid":10,"priority":7,"end_state":"suspended"}}}}"#
        ),
        format!(
            r#"{{"ph":"M","pid":{cpu_pid},"tid":{cpu300},"cat":"__metadata","name":"thread_name","args":{{"name":"CPU 300"}}}}"#
        ),
        format!(
            r#"{{"ph":"M","pid":{cpu_pid},"tid":{cpu300},"cat":"__metadata","name":"thread_sort_index","args":{{"sort_index":300}}}}"#
        ),
        format!(
            r#"{{"ph":"i","ts":8.000,"pid":{cpu_pid},"tid":{cpu2},"cat":"cpu","name":"wakeup worker (11)","s":"t","args":{{"tid":11,"waker":12}}}}"#
        ),
        format!(
            r#"{{"ph":"X","ts":7.000,"pid":{cpu_pid},"tid":{cpu300},"cat":"cpu","name":"worker (11)","dur":1.000,"args":{{"tid":11,"pid":10,"end_state":"trace end","incoming_weight":3}}}}"#
        ),
    ];
    assert_eq!(events, expected);
    assert!(
        done.stats.warnings().is_empty(),
        "{:?}",
        done.stats.warnings()
    );
}

#[test]
fn a_missing_switch_is_counted() {
    let bytes = trace(|w| {
        for (ticks, outgoing_tid, incoming_tid) in [(1_000, 0, 11), (2_000, 12, 13)] {
            w.push(&SchedContextSwitch {
                ticks,
                cpu: 0,
                outgoing_state: ThreadState::Blocked,
                outgoing_tid,
                incoming_tid,
                args: &[],
            })
            .unwrap();
        }
    });
    let (_, value, done) = run(&bytes);
    assert_eq!(done.stats.switch_mismatches, 1);
    let slices: Vec<&Value> = value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert_eq!(
        slices.len(),
        2,
        "11's slice is still closed at the next switch"
    );
    assert_eq!(slices[0]["args"]["tid"], 11);
    assert_eq!(slices[1]["args"]["tid"], 13);
}

#[test]
fn last_branch_blobs_become_cpu_instants_and_a_summary() {
    let bytes = trace(|w| {
        let lbr = LbrPayload::new(
            1,
            9_000,
            0xabc,
            &[
                LbrBranch::new(0x1000, 0x2000, 5, true),
                LbrBranch::new(0x3000, 0x1000, 0, false),
            ],
        )
        .unwrap();
        w.push(&Blob {
            name: StringRef::Inline("cpu1"),
            blob_type: BlobType::LAST_BRANCH,
            payload: lbr.as_bytes(),
        })
        .unwrap();
        w.push(&Blob {
            name: StringRef::Inline("cpu1"),
            blob_type: BlobType::LAST_BRANCH,
            payload: &[1, 2, 3],
        })
        .unwrap();
        w.push(&Blob {
            name: StringRef::Inline("data"),
            blob_type: BlobType::DATA,
            payload: &[1, 2, 3],
        })
        .unwrap();
    });
    let (events, value, done) = run(&bytes);
    let cpu1 = CPU_TRACK_TID_BASE + 1;
    assert_eq!(
        events.last().unwrap(),
        &format!(
            r#"{{"ph":"i","ts":9.000,"pid":{CPU_PROCESS_PID},"tid":{cpu1},"cat":"cpu:last_branch","name":"last_branch","s":"t","args":{{"blob":"cpu1","aspace":"0xabc","branches":[{{"from":"0x1000","to":"0x2000","cycles":5,"mispredicted":true}},{{"from":"0x3000","to":"0x1000","cycles":0,"mispredicted":false}}]}}}}"#
        )
    );
    let lbr = &value["otherData"]["lastBranch"];
    assert_eq!(lbr["samples"], 1);
    assert_eq!(lbr["branches"], 2);
    assert_eq!(lbr["mispredicted"], 1);
    assert_eq!(lbr["invalid"], 1);
    assert_eq!(lbr["cpus"]["1"]["branches"], 2);
    assert_eq!(done.stats.lbr_invalid, 1);
    assert_eq!(done.stats.not_converted.get("blob"), Some(&1));
}

#[test]
fn other_records_large_blobs_objects_and_overflow() {
    let frame = [Arg::new("frame", ArgValue::U32(1))];
    let bytes = trace(|w| {
        w.push(&ProviderInfo {
            provider_id: 3,
            name: "gpu",
        })
        .unwrap();
        w.push(&LargeBlob {
            category: StringRef::Inline("c"),
            name: "shot".into(),
            metadata: Some(LargeBlobMetadata {
                ticks: 2_000,
                thread: T,
                args: &frame,
            }),
            payload: &[0; 100],
        })
        .unwrap();
        w.push(&LargeBlob {
            category: StringRef::Inline("c"),
            name: "file".into(),
            metadata: None,
            payload: &[0; 10],
        })
        .unwrap();
        w.push(&UserspaceObject {
            pointer: 0x1000,
            process: fxtrace_format::ProcessRef::Inline(10),
            name: "obj".into(),
            args: &[],
        })
        .unwrap();
        w.push(&ProviderEvent {
            provider_id: 3,
            event: PROVIDER_EVENT_BUFFER_OVERFLOW,
        })
        .unwrap();
    });
    let (events, value, done) = run(&bytes);
    assert_eq!(
        events,
        [
            r#"{"ph":"i","ts":2.000,"pid":10,"tid":11,"cat":"c","name":"shot","s":"t","args":{"frame":1,"payload_bytes":100}}"#,
            r#"{"ph":"i","ts":2.000,"pid":0,"tid":0,"cat":"fxtrace","name":"fxtrace: provider 3 (gpu) buffer overflow, records dropped","s":"g"}"#,
        ]
    );
    assert_eq!(value["otherData"]["providers"]["3"], "gpu");
    assert_eq!(value["otherData"]["conversion"]["buffer_overflows"]["3"], 1);
    assert_eq!(
        value["otherData"]["conversion"]["not_converted"]["userspace_object"],
        1
    );
    assert_eq!(done.stats.buffer_overflows.get(&3), Some(&1));
    assert_eq!(
        done.stats.not_converted.get("large_blob_attachment"),
        Some(&1)
    );
}

/// Replays `B`/`E` events per thread and checks the stacks never underflow and end empty;
/// returns the number of `B`s.
fn check_stacks<'a>(events: impl Iterator<Item = &'a Value>, order: &str) -> usize {
    let mut depth: HashMap<(u64, u64), usize> = HashMap::new();
    let mut slices = 0;
    for e in events {
        let key = || (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        match e["ph"].as_str().unwrap() {
            "B" => {
                *depth.entry(key()).or_default() += 1;
                slices += 1;
            }
            "E" => {
                let d = depth.entry(key()).or_default();
                assert!(*d > 0, "in {order}: E without an open B: {e}");
                *d -= 1;
            }
            _ => {}
        }
    }
    assert!(
        depth.values().all(|&d| d == 0),
        "in {order}: unclosed B: {depth:?}"
    );
    slices
}

/// Checks that the `B`/`E` events of every thread nest, both in file order and in time
/// order (viewers sort events by `ts`, keeping file order for equal times). Returns the
/// number of slices.
fn assert_nested(value: &Value) -> usize {
    let events = value["traceEvents"].as_array().unwrap();
    let slices = check_stacks(events.iter(), "file order");
    let mut by_time: Vec<&Value> = events.iter().filter(|e| e["ph"] != "M").collect();
    by_time.sort_by(|a, b| {
        a["ts"]
            .as_f64()
            .unwrap()
            .total_cmp(&b["ts"].as_f64().unwrap())
    });
    assert_eq!(check_stacks(by_time.into_iter(), "time order"), slices);
    slices
}

#[test]
fn example_trace_is_valid_nested_json() {
    let bytes = write_all_records::build_trace().unwrap();
    let (_, value, done) = run(&bytes);
    assert!(done.decode_error.is_none());
    assert_eq!(assert_nested(&value), 1);
    assert_eq!(value["displayTimeUnit"], "ns");
    assert_eq!(value["otherData"]["input"]["status"], "ok");
    assert_eq!(value["otherData"]["providers"]["1"], "alpha");
    assert_eq!(value["otherData"]["providers"]["2"], "beta");
    let events = value["traceEvents"].as_array().unwrap();
    let phases: std::collections::BTreeSet<&str> =
        events.iter().map(|e| e["ph"].as_str().unwrap()).collect();
    for ph in ["B", "E", "X", "i", "C", "b", "n", "e", "s", "t", "f", "M"] {
        assert!(phases.contains(ph), "no {ph} event in {phases:?}");
    }
    for e in events {
        assert!(e["pid"].is_u64(), "{e}");
        // Every event is named and categorized, `E` included (the DevTools trace engine
        // reads both on every event).
        assert!(e["name"].is_string() && e["cat"].is_string(), "{e}");
        if e["ph"] != "M" {
            assert!(e["ts"].is_f64(), "{e}");
            assert!(e["tid"].is_u64(), "{e}");
        }
    }
    // The last provider-1 event: 40_000 ticks at 2 GHz = 20 µs.
    let back = events
        .iter()
        .find(|e| e["name"] == "back-in-alpha")
        .unwrap();
    assert_eq!(back["ts"].as_f64(), Some(20.0));
    assert_eq!(back["cat"], "cat");
}

#[test]
fn mismatched_durations_are_repaired_and_counted() {
    let bytes = trace(|w| {
        // An end with nothing open (dropped), then a begin whose end never comes on T,
        // and on U a clean pair plus a stray end and two unclosed begins.
        w.push(&ev(1_000, T, "stray", EventKind::DurationEnd, &[]))
            .unwrap();
        w.push(&ev(2_000, T, "open", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(3_000, U, "a", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(4_000, U, "a", EventKind::DurationEnd, &[]))
            .unwrap();
        w.push(&ev(5_000, U, "b", EventKind::DurationEnd, &[]))
            .unwrap();
        w.push(&ev(6_000, U, "c", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(7_000, U, "d", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(
            9_000,
            T,
            "x",
            EventKind::DurationComplete { end_ticks: 8_000 },
            &[],
        ))
        .unwrap();
    });
    let (events, value, done) = run(&bytes);
    assert_eq!(assert_nested(&value), 4);
    assert_eq!(done.stats.unmatched_ends_dropped, 2);
    assert_eq!(done.stats.unclosed_begins_closed, 3);
    assert_eq!(done.stats.negative_durations, 1);
    // Closed at the last timestamp of the trace, 9 µs, in thread order.
    assert_eq!(
        &events[events.len() - 3..],
        [
            r#"{"ph":"E","ts":9.000,"pid":10,"tid":11,"cat":"c","name":"open"}"#,
            r#"{"ph":"E","ts":9.000,"pid":10,"tid":12,"cat":"c","name":"d"}"#,
            r#"{"ph":"E","ts":9.000,"pid":10,"tid":12,"cat":"c","name":"c"}"#,
        ]
    );
    assert_eq!(
        done.stats.warnings(),
        [
            "2 duration end event(s) without a matching begin on their thread were dropped",
            "3 duration begin event(s) without an end were closed at the last timestamp (9.000 us)",
            "1 duration(s) ending before they began were written with zero length",
        ]
    );
    assert_eq!(
        value["otherData"]["conversion"]["unmatched_ends_dropped"],
        2
    );
    assert_eq!(
        value["otherData"]["conversion"]["unclosed_begins_closed"],
        3
    );
}

#[test]
fn an_end_before_its_begin_is_moved_to_the_begin() {
    let bytes = trace(|w| {
        w.push(&ev(1_000, T, "a", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(5_000, T, "b", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(3_000, T, "b", EventKind::DurationEnd, &[]))
            .unwrap();
        w.push(&ev(4_000, T, "a", EventKind::DurationEnd, &[]))
            .unwrap();
    });
    let (events, value, done) = run(&bytes);
    assert_eq!(
        events[2],
        r#"{"ph":"E","ts":5.000,"pid":10,"tid":11,"cat":"c","name":"b"}"#
    );
    assert_eq!(done.stats.negative_durations, 1);
    // Left at 3 µs, sorting by time would put it before b's begin. Moved to 5 µs, every
    // E still follows its own B in time order.
    assert_eq!(
        events[3],
        r#"{"ph":"E","ts":4.000,"pid":10,"tid":11,"cat":"c","name":"a"}"#
    );
    assert_eq!(assert_nested(&value), 2);
}

#[test]
fn damaged_input_still_yields_complete_json() {
    let mut bytes = trace(|w| {
        w.push(&ev(1_000, T, "open", EventKind::DurationBegin, &[]))
            .unwrap();
        w.push(&ev(2_000, T, "i", EventKind::Instant, &[])).unwrap();
    });
    bytes.truncate(bytes.len() - 8);
    let (events, value, done) = run(&bytes);
    let err = done.decode_error.expect("truncation is reported");
    assert_eq!(events.len(), 2, "the begin, and its repair");
    assert_nested(&value);
    let status = value["otherData"]["input"]["status"].as_str().unwrap();
    assert_eq!(status, format!("damaged: {err}"));
}

fn fxtrace(args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fxtrace");
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

#[test]
fn cli_converts_files_and_standard_streams() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = write_all_records::build_trace().unwrap();
    let input = dir.path().join("all.fxt");
    std::fs::write(&input, &bytes).unwrap();
    let output = dir.path().join("all.json");
    let out = fxtrace(
        &[
            "convert",
            "--to",
            "chrome-json",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("fxtrace convert: provider 1 reported a buffer overflow 1 time(s)"),
        "{stderr}"
    );
    let from_file = std::fs::read(&output).unwrap();

    let piped = fxtrace(&["convert", "--to", "chrome-json", "-", "-o", "-"], &bytes);
    assert!(piped.status.success());
    assert_eq!(piped.stdout, from_file, "same JSON through stdin/stdout");
    let value: Value = serde_json::from_slice(&from_file).unwrap();
    assert_nested(&value);
}

#[test]
fn cli_reports_damage_with_failure_status() {
    let mut bytes = write_all_records::build_trace().unwrap();
    bytes.truncate(bytes.len() - 4);
    let out = fxtrace(&["convert", "--to", "chrome-json", "-", "-o", "-"], &bytes);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr
            .lines()
            .last()
            .unwrap()
            .starts_with("<stdin>: at byte offset"),
        "{stderr}"
    );
    let value: Value = serde_json::from_slice(&out.stdout).expect("complete JSON");
    assert!(value["otherData"]["input"]["status"]
        .as_str()
        .unwrap()
        .starts_with("damaged"));

    let missing = fxtrace(
        &[
            "convert",
            "--to",
            "chrome-json",
            "/nonexistent.fxt",
            "-o",
            "-",
        ],
        &[],
    );
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent.fxt: cannot read"));
}

#[test]
fn convert_and_report_say_on_stderr_what_the_decoder_skipped() {
    // The magic number, then a record of the unknown type 10 (one word).
    let mut bytes = 0x0016_5478_4604_0010u64.to_ne_bytes().to_vec();
    bytes.extend((0xa_u64 | 1 << 4).to_ne_bytes());
    let out = fxtrace(&["convert", "--to", "chrome-json", "-", "-o", "-"], &bytes);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("skipped 1 records and 0 arguments of unknown types"),
        "{stderr}"
    );
    let out = fxtrace(&["report", "lbr", "-"], &bytes);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("skipped 1 records and 0 arguments of unknown types"),
        "{stderr}"
    );
}

#[test]
fn orphaned_async_ends_are_dropped_and_unended_begins_closed_as_durations_are() {
    let mut w = RecordWriter::with_magic();
    let event = |ticks, kind| Event {
        ticks,
        thread: T,
        category: StringRef::Inline("c"),
        name: StringRef::Inline("request"),
        args: &[],
        kind,
    };
    for (ticks, kind) in [
        (100, EventKind::AsyncEnd { id: 1 }),
        (200, EventKind::AsyncBegin { id: 2 }),
        (300, EventKind::AsyncEnd { id: 2 }),
        (400, EventKind::AsyncBegin { id: 3 }),
    ] {
        w.push(&event(ticks, kind)).unwrap();
    }
    let (events, value, done) = run(&w.to_bytes());
    let phases: Vec<&str> = value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["ph"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["b", "e", "b", "e"], "{events:?}");
    assert_eq!(done.stats.unmatched_async_ends_dropped, 1);
    assert_eq!(done.stats.unclosed_async_closed, 1);
    let conversion = &value["otherData"]["conversion"];
    assert_eq!(conversion["unmatched_async_ends_dropped"], 1);
    assert_eq!(conversion["unclosed_async_closed"], 1);
    assert!(done
        .stats
        .warnings()
        .iter()
        .any(|w| w.contains("1 async end event(s) without a matching async begin were dropped")));
}

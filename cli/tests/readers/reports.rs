//! `report spans`, `report sched` and `dump`'s filters on crafted traces: empty, without
//! switches, switches without spans, spans across a stopped trace, unmatched begins and ends,
//! a damaged tail; one test per filter.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fxtrace_format::stack::{KernelSymbolRecord, StackRecord, KSYM_BLOB_NAME, STACK_BLOB_NAME};
use fxtrace_format::{
    Arg, ArgValue, Blob, BlobType, ContextSwitch, Event, EventKind, KernelObject, ObjectType,
    RecordWriter, SchedContextSwitch, SchedThreadWakeup, StringRef, ThreadRef, ThreadState,
};
use serde_json::Value;

const FXTRACE: &str = env!("CARGO_BIN_EXE_fxtrace");

/// The server's worker thread, its lock holder, and another process's thread.
const WORKER: ThreadRef = ThreadRef::Inline { pid: 10, tid: 11 };
const HOLDER: ThreadRef = ThreadRef::Inline { pid: 10, tid: 12 };
const OTHER: ThreadRef = ThreadRef::Inline { pid: 20, tid: 21 };
const IDLE: ThreadRef = ThreadRef::Inline { pid: 0, tid: 0 };

fn fxtrace(args: &[&str]) -> Output {
    Command::new(FXTRACE).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn span(w: &mut RecordWriter, thread: ThreadRef, name: &str, from: u64, to: u64, args: &[Arg<'_>]) {
    for (ticks, kind, args) in [
        (from, EventKind::DurationBegin, args),
        (to, EventKind::DurationEnd, &[][..]),
    ] {
        w.push(&Event {
            ticks,
            thread,
            category: StringRef::Inline("app"),
            name: StringRef::Inline(name),
            args,
            kind,
        })
        .unwrap();
    }
}

fn switch(
    w: &mut RecordWriter,
    ticks: u64,
    cpu: u8,
    out: ThreadRef,
    state: ThreadState,
    inc: ThreadRef,
) {
    w.push(&ContextSwitch {
        ticks,
        cpu,
        outgoing_state: state,
        outgoing: out,
        incoming: inc,
        outgoing_priority: 120,
        incoming_priority: 120,
    })
    .unwrap();
}

fn name_thread(w: &mut RecordWriter, thread: ThreadRef, name: &str) {
    let ThreadRef::Inline { pid, tid } = thread else {
        unreachable!("the test threads are inline")
    };
    let process = [Arg::new("process", ArgValue::Koid(pid))];
    w.push(&KernelObject {
        koid: tid,
        object_type: ObjectType::THREAD,
        name: StringRef::Inline(name),
        args: &process,
    })
    .unwrap();
}

/// A program whose batch 7 (1 000..6 000 ns) is slow: preempted at 2 000 by `backup`, which
/// runs its CPU until 5 000; batch 8 (7 000..8 000) is quick. Times are ns (1 tick = 1 ns).
fn preempted_trace() -> Vec<u8> {
    preempted_trace_with(false)
}

/// [`preempted_trace`]; with `migrant`, a third thread (HOLDER) that slept on CPU 0 before
/// the batch wakes on CPU 1 at 3 000, amid `backup`'s time on CPU 0.
fn preempted_trace_with(migrant: bool) -> Vec<u8> {
    let mut w = RecordWriter::with_magic();
    name_thread(&mut w, WORKER, "worker");
    name_thread(&mut w, OTHER, "backup");
    let id = |n| [Arg::new("id", ArgValue::U64(n))];
    let mut at = |ticks, name, kind, args: &[Arg<'_>]| {
        w.push(&Event {
            ticks,
            thread: WORKER,
            category: StringRef::Inline("app"),
            name: StringRef::Inline(name),
            args,
            kind,
        })
        .unwrap()
    };
    at(1_000, "batch", EventKind::DurationBegin, &id(7));
    at(1_200, "parse", EventKind::DurationBegin, &[]);
    at(1_500, "parse", EventKind::DurationEnd, &[]);
    at(6_000, "batch", EventKind::DurationEnd, &[]);
    span(&mut w, WORKER, "batch", 7_000, 8_000, &id(8));
    if migrant {
        switch(&mut w, 300, 0, HOLDER, ThreadState::Blocked, IDLE);
    }
    switch(&mut w, 500, 0, IDLE, ThreadState::Blocked, WORKER);
    switch(&mut w, 2_000, 0, WORKER, ThreadState::Running, OTHER);
    if migrant {
        switch(&mut w, 3_000, 1, IDLE, ThreadState::Blocked, HOLDER);
        switch(&mut w, 3_500, 1, HOLDER, ThreadState::Blocked, IDLE);
    }
    switch(&mut w, 5_000, 0, OTHER, ThreadState::Blocked, WORKER);
    switch(&mut w, 9_000, 0, WORKER, ThreadState::Blocked, IDLE);
    w.to_bytes()
}

/// A request (500..9 500 ns) of `worker` that sleeps twice: on a futex (1 000..4 000, stack
/// 5: `futex_wait ← do_futex`) and in D (5 000..7 000, stack 6: `io_schedule`), the wait
/// points written as `--wait-points` writes them (kernel symbols, stacks, switches by tid
/// naming them).
fn wait_point_trace() -> Vec<u8> {
    let mut w = RecordWriter::with_magic();
    name_thread(&mut w, WORKER, "worker");
    name_thread(&mut w, HOLDER, "holder");
    let blob = |w: &mut RecordWriter, name, payload: &[u8]| {
        w.push(&Blob {
            name: StringRef::Inline(name),
            blob_type: BlobType::DATA,
            payload,
        })
        .unwrap()
    };
    for (start, name) in [
        (0x1000, "futex_wait"),
        (0x2000, "do_futex"),
        (0x3000, "io_schedule"),
    ] {
        let ksym = KernelSymbolRecord {
            start,
            len: 0x100,
            name: name.as_bytes(),
        };
        blob(&mut w, KSYM_BLOB_NAME, &ksym.encode().unwrap());
    }
    blob(
        &mut w,
        STACK_BLOB_NAME,
        &StackRecord::encode(5, &[0x1010, 0x2020], &[]).unwrap(),
    );
    blob(
        &mut w,
        STACK_BLOB_NAME,
        &StackRecord::encode(6, &[0x3010], &[]).unwrap(),
    );
    span(&mut w, WORKER, "request", 500, 9_500, &[]);
    let futex = [Arg::new("stack", ArgValue::U32(5))];
    let disk = [
        Arg::new("stack", ArgValue::U32(6)),
        Arg::new("linux_state", ArgValue::Str(StringRef::Inline("D"))),
    ];
    for (ticks, outgoing_tid, incoming_tid, args) in [
        (0, 0, 11, &[][..]),
        (1_000, 11, 12, &futex[..]),
        (4_000, 12, 11, &[][..]),
        (5_000, 11, 0, &disk[..]),
        (7_000, 0, 11, &[][..]),
        (10_000, 11, 0, &[][..]),
    ] {
        w.push(&SchedContextSwitch {
            ticks,
            cpu: 0,
            outgoing_state: ThreadState::Blocked,
            outgoing_tid,
            incoming_tid,
            args,
        })
        .unwrap();
    }
    w.to_bytes()
}

#[test]
fn both_reports_name_a_wait_point_by_its_frames_and_tell_d_from_sleeping() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &wait_point_trace());
    let file = trace.to_str().unwrap();
    let out = fxtrace(&["report", "spans", file]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("on CPU 4.00 µs · runnable 0 ns · sleeping 3.00 µs · D 2.00 µs"),
        "{stdout}"
    );
    let waited = stdout
        .lines()
        .find(|l| l.contains("waited at:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        waited.contains("futex_wait ← do_futex 3.00 µs") && waited.contains("io_schedule 2.00 µs"),
        "{waited}"
    );
    let out = fxtrace(&["report", "sched", file, "--top", "2"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("switches with a wait point: 2"), "{stdout}");
    assert!(
        stdout.contains("wait point: futex_wait ← do_futex,"),
        "{stdout}"
    );
    assert!(stdout.contains("wait point: io_schedule,"), "{stdout}");
    let rows = json_lines(&fxtrace(&["report", "sched", file, "--json"]));
    let longest = rows.iter().find(|r| r["type"] == "off_cpu").unwrap();
    assert_eq!(longest["wait_point"], "futex_wait ← do_futex", "{longest}");
}

/// A server whose two workers sleep on a lock from 1 000 to 9 000 ns while `holder` runs,
/// then are woken by it.
fn stall_trace() -> Vec<u8> {
    let mut w = RecordWriter::with_magic();
    let waiter = ThreadRef::Inline { pid: 10, tid: 13 };
    name_thread(&mut w, WORKER, "worker-1");
    name_thread(&mut w, waiter, "worker-2");
    name_thread(&mut w, HOLDER, "holder");
    name_thread(&mut w, OTHER, "other");
    let waker = [Arg::new("waker", ArgValue::Koid(12))];
    switch(&mut w, 0, 0, IDLE, ThreadState::Blocked, WORKER);
    switch(&mut w, 0, 1, IDLE, ThreadState::Blocked, waiter);
    switch(&mut w, 1_000, 0, WORKER, ThreadState::Blocked, HOLDER);
    switch(&mut w, 1_100, 1, waiter, ThreadState::Blocked, OTHER);
    for (ticks, tid) in [(9_000, 11), (9_050, 13)] {
        w.push(&SchedThreadWakeup {
            ticks,
            cpu: 1,
            waking_tid: tid,
            args: &waker,
        })
        .unwrap();
    }
    switch(&mut w, 9_200, 1, OTHER, ThreadState::Running, WORKER);
    switch(&mut w, 9_400, 0, HOLDER, ThreadState::Blocked, waiter);
    w.to_bytes()
}

fn json_lines(out: &Output) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn spans_names_the_process_that_ran_instead_of_a_slow_span() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &preempted_trace());
    let out = fxtrace(&["report", "spans", trace.to_str().unwrap(), "--top", "3"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    // The table: batch twice (5 000 + 1 000), its self time less parse's 300.
    let batch = stdout.lines().find(|l| l.starts_with("batch")).unwrap();
    let cols: Vec<&str> = batch.split_whitespace().collect();
    assert_eq!(&cols[..5], ["batch", "2", "6.00", "µs", "5.70"], "{batch}");
    // The slowest: batch 7, its argument, its child, its time split, who ran instead.
    assert!(
        stdout.contains(" 1. batch  5.00 µs  at +0.000000 s"),
        "{stdout}"
    );
    assert!(stdout.contains("args: id=7"), "{stdout}");
    assert!(stdout.contains("children: parse 300 ns (1×)"), "{stdout}");
    assert!(
        stdout.contains("on CPU 2.00 µs · runnable 3.00 µs · sleeping 0 ns · D 0 ns"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ran instead on its CPU: backup (pid 20/tid 21) 3.00 µs"),
        "{stdout}"
    );
    // JSON: one object per row.
    let out = fxtrace(&["report", "spans", trace.to_str().unwrap(), "--json"]);
    let rows = json_lines(&out);
    let slow = rows.iter().find(|r| r["type"] == "span").unwrap();
    assert_eq!(slow["duration_ns"], 5000);
    assert_eq!(slow["cpu"]["runnable_ns"], 3000);
    assert_eq!(slow["cpu"]["ran_instead"][0]["tid"], 21);
    assert_eq!(slow["args"][0], "id=7");
}

#[test]
fn a_thread_that_changes_cpu_does_not_count_who_ran_instead_twice() {
    // `backup` ran instead of the batch 3 µs (2 000..5 000), not 3 + the 1 µs before
    // HOLDER's move to CPU 1 (a report once credited a slice up to another thread's change
    // of CPU, then the whole slice again).
    let trace = preempted_trace_with(true);
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &trace);
    let out = fxtrace(&["report", "spans", trace.to_str().unwrap(), "--top", "1"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("ran instead on its CPU: backup (pid 20/tid 21) 3.00 µs"),
        "{stdout}"
    );
}

#[test]
fn spans_filters_by_name_thread_process_and_duration() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &preempted_trace());
    let file = trace.to_str().unwrap();
    let names = |extra: &[&str]| -> Vec<(String, u64)> {
        let mut args = vec!["report", "spans", file, "--json"];
        args.extend_from_slice(extra);
        json_lines(&fxtrace(&args))
            .into_iter()
            .filter(|r| r["type"] == "name")
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_owned(),
                    r["count"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(names(&["--name", "pa*"]), [("parse".to_owned(), 1)]);
    assert_eq!(names(&["--min-duration", "2us"]), [("batch".to_owned(), 1)]);
    assert_eq!(
        names(&["--tid", "11", "--name", "batch"]),
        [("batch".to_owned(), 2)]
    );
    assert!(names(&["--tid", "99"]).is_empty());
    assert!(names(&["--pid", "20"]).is_empty());
    assert_eq!(names(&["--pid", "10"]).len(), 2);
}

#[test]
fn sched_names_the_sibling_that_ran_while_the_workers_slept() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &stall_trace());
    let file = trace.to_str().unwrap();
    let out = fxtrace(&["report", "sched", file, "--min-stall", "1us"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("context switches: 6, wake-ups: 2"),
        "{stdout}"
    );
    assert!(
        stdout.contains("stalls (threads of one process asleep at once):"),
        "{stdout}"
    );
    let stall = stdout.split("stalls").nth(1).unwrap();
    assert!(
        stall.contains("2 threads asleep at once for 7.90 µs"),
        "{stall}"
    );
    assert!(
        stall.contains("running meanwhile: holder (pid 10/tid 12) 7.90 µs"),
        "{stall}"
    );
    assert!(
        stall.contains("waiting: worker-1 (pid 10/tid 11) 8.00 µs, woken by holder"),
        "{stall}"
    );
    // The worker's row: one sleep of 8 µs (woken at 9 000), then 200 ns runnable.
    let rows = json_lines(&fxtrace(&["report", "sched", file, "--json"]));
    let worker = rows
        .iter()
        .find(|r| r["type"] == "thread" && r["tid"] == 11)
        .unwrap();
    assert_eq!(worker["sleeping"]["max_ns"], 8000);
    assert_eq!(worker["latency"]["max_ns"], 200);
    let longest = rows.iter().find(|r| r["type"] == "off_cpu").unwrap();
    assert_eq!(
        (longest["tid"].as_u64(), longest["duration_ns"].as_u64()),
        (Some(13), Some(8300))
    );
    assert_eq!(longest["waker"]["tid"], 12);
}

#[test]
fn sched_filters_by_process_name_and_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &stall_trace());
    let file = trace.to_str().unwrap();
    let tids = |extra: &[&str]| -> Vec<u64> {
        let mut args = vec!["report", "sched", file, "--json"];
        args.extend_from_slice(extra);
        let mut tids: Vec<u64> = json_lines(&fxtrace(&args))
            .into_iter()
            .filter(|r| r["type"] == "thread")
            .map(|r| r["tid"].as_u64().unwrap())
            .collect();
        tids.sort_unstable();
        tids
    };
    assert_eq!(tids(&[]), [11, 12, 13, 21]);
    assert_eq!(tids(&["--pid", "20"]), [21]);
    assert_eq!(tids(&["--comm", "worker-*"]), [11, 13]);
    // CPU 0 ran the first worker and the holder.
    assert_eq!(tids(&["--cpu", "0"]), [11, 12]);
}

/// Switches with one missing between (a lost record, or a source that missed one): each
/// switch's outgoing thread ran since its CPU's previous switch, as `perf sched timehist -s`
/// counts it. On CPU 0, `worker` (1 000..2 000) then `holder` switched in, but the next
/// switch names `backup` (20/21) switched out at 6 000: its switch in is the one missing. On
/// CPU 1, idle was switched in at 1 000 (the CPU's first switch, which ends no slice), but
/// `late` (30/31) is switched out at 3 000.
#[test]
fn sched_charges_a_switch_to_the_thread_it_names_when_one_is_missing() {
    let late = ThreadRef::Inline { pid: 30, tid: 31 };
    let mut w = RecordWriter::with_magic();
    name_thread(&mut w, WORKER, "worker");
    name_thread(&mut w, HOLDER, "holder");
    switch(&mut w, 1_000, 0, IDLE, ThreadState::Blocked, WORKER);
    switch(&mut w, 1_000, 1, OTHER, ThreadState::Blocked, IDLE);
    switch(&mut w, 2_000, 0, WORKER, ThreadState::Running, HOLDER);
    switch(&mut w, 3_000, 1, late, ThreadState::Blocked, IDLE);
    switch(&mut w, 6_000, 0, OTHER, ThreadState::Blocked, IDLE);
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &w.to_bytes());
    let file = trace.to_str().unwrap();
    let rows = json_lines(&fxtrace(&["report", "sched", file, "--json"]));
    let mut on_cpu: Vec<(u64, u64, u64, u64)> = rows
        .iter()
        .filter(|r| r["type"] == "thread")
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            (n("tid"), n("pid"), n("on_cpu_ns"), n("switches"))
        })
        .collect();
    on_cpu.sort_unstable();
    // (tid, pid, ns on CPU, slices): `holder` ran for an unknown time, so for none (perf
    // too); `backup` has its own process, not the one of the thread it was taken for.
    assert_eq!(
        on_cpu,
        [(11, 10, 1_000, 1), (21, 20, 4_000, 1), (31, 30, 2_000, 1)],
        "{rows:?}"
    );
    let out = fxtrace(&["report", "sched", file]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("note: 2 switch(es) named an outgoing thread other than the one running"),
        "{stdout}"
    );
}

#[test]
fn each_report_says_what_a_trace_lacks() {
    let dir = tempfile::tempdir().unwrap();
    // Spans, no switches.
    let mut w = RecordWriter::with_magic();
    span(&mut w, WORKER, "batch", 100, 900, &[]);
    let spans_only = write(dir.path(), "spans.fxt", &w.to_bytes());
    let out = fxtrace(&["report", "spans", spans_only.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("note: no context switches in this trace: record with -a"),
        "{}",
        text(&out.stdout)
    );
    let out = fxtrace(&["report", "sched", spans_only.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("note: no context switches in this trace: record with -a"));
    // Switches, no spans, no wake-ups.
    let mut w = RecordWriter::with_magic();
    switch(&mut w, 100, 0, IDLE, ThreadState::Blocked, WORKER);
    switch(&mut w, 900, 0, WORKER, ThreadState::Blocked, IDLE);
    let switches_only = write(dir.path(), "switches.fxt", &w.to_bytes());
    let out = fxtrace(&["report", "spans", switches_only.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("note: no spans in this trace"),
        "{}",
        text(&out.stdout)
    );
    let out = fxtrace(&["report", "sched", switches_only.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success());
    assert!(
        stdout.contains("note: no wake-ups in this trace: record with -a"),
        "{stdout}"
    );
    assert!(stdout.contains("on CPU 800 ns in 1 slice(s)"), "{stdout}");
}

#[test]
fn spans_across_a_stopped_trace_and_unmatched_ends_are_named_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = RecordWriter::with_magic();
    // An end with no begin (the trace started after it), a complete span, a begin with no
    // end (the trace stopped before it), an async end whose begin was lost.
    w.push(&Event {
        ticks: 50,
        thread: WORKER,
        category: StringRef::Inline("app"),
        name: StringRef::Inline("early"),
        args: &[],
        kind: EventKind::DurationEnd,
    })
    .unwrap();
    span(&mut w, WORKER, "done", 100, 200, &[]);
    w.push(&Event {
        ticks: 300,
        thread: WORKER,
        category: StringRef::Inline("app"),
        name: StringRef::Inline("late"),
        args: &[],
        kind: EventKind::DurationBegin,
    })
    .unwrap();
    w.push(&Event {
        ticks: 400,
        thread: WORKER,
        category: StringRef::Inline("app"),
        name: StringRef::Inline("request"),
        args: &[],
        kind: EventKind::AsyncEnd { id: 5 },
    })
    .unwrap();
    let trace = write(dir.path(), "t.fxt", &w.to_bytes());
    let out = fxtrace(&["report", "spans", trace.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("spans: 1 of 1 name(s)"), "{stdout}");
    assert!(
        stdout.contains("note: 1 span(s) still open when the trace ended"),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: 1 duration end(s) with no begin open on their thread"),
        "{stdout}"
    );
    assert!(
        stdout.contains("note: 1 async end(s) with no async begin"),
        "{stdout}"
    );
}

#[test]
fn a_damaged_tail_is_reported_named_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = preempted_trace();
    let good = bytes.len();
    bytes.extend_from_slice(&[0xff; 13]);
    let trace = write(dir.path(), "t.fxt", &bytes);
    for report in ["spans", "sched"] {
        let out = fxtrace(&["report", report, trace.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "report {report}");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            stdout.contains("backup") || stdout.contains("batch"),
            "{stdout}"
        );
        assert!(
            stderr.contains(&format!("t.fxt: at byte offset {good}:")),
            "report {report}: {stderr}"
        );
    }
    // Empty, and not a trace: nothing to report, the problem named.
    let empty = write(dir.path(), "empty.fxt", &[]);
    for report in ["spans", "sched"] {
        let out = fxtrace(&["report", report, empty.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).contains("empty input, not an FXT trace"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_trace_on_standard_input_is_read_twice() {
    let mut child = Command::new(FXTRACE)
        .args(["report", "spans", "-", "--top", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&preempted_trace())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success());
    assert!(
        stdout.contains("ran instead on its CPU: backup"),
        "{stdout}"
    );
}

/// The records `dump ARGS` prints, as (type, name) of its JSON objects.
fn dumped(trace: &Path, args: &[&str]) -> Vec<(String, String)> {
    let mut all = vec!["dump", trace.to_str().unwrap(), "--json"];
    all.extend_from_slice(args);
    let out = fxtrace(&all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    json_lines(&out)
        .into_iter()
        .map(|r| {
            let name = r["name"]
                .as_str()
                .or(r["event"].as_str())
                .unwrap_or("")
                .to_owned();
            (r["type"].as_str().unwrap().to_owned(), name)
        })
        .collect()
}

#[test]
fn dump_filters_each_keep_what_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &preempted_trace());
    let kinds = |args: &[&str]| -> Vec<String> {
        dumped(&trace, args).into_iter().map(|(t, _)| t).collect()
    };
    // --type: a kind, both switch layouts, an event type.
    assert_eq!(kinds(&["--type", "context_switch"]).len(), 4);
    assert_eq!(kinds(&["--type", "duration_begin"]).len(), 3);
    assert_eq!(kinds(&["--type", "kernel_object"]).len(), 2);
    // --name, --category.
    let names: Vec<String> = dumped(&trace, &["--name", "par*"])
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(names, ["parse", "parse"]);
    assert_eq!(kinds(&["--category", "app"]).len(), 6);
    assert!(kinds(&["--category", "nope"]).is_empty());
    // --tid: events of the thread and switches on either side; --pid likewise.
    assert_eq!(
        kinds(&["--tid", "21"]),
        ["kernel_object", "context_switch", "context_switch"]
    );
    assert_eq!(kinds(&["--pid", "20", "--type", "context_switch"]).len(), 2);
    // --provider: records before any provider metadata belong to none.
    assert!(kinds(&["--provider", "1"]).is_empty());
    // --from/--to: relative to the first timestamp (500 ns): 1 000 ..= 2 000 ns.
    let window: Vec<(String, String)> = dumped(&trace, &["--from", "500ns", "--to", "1.5us"]);
    let expected = [
        ("event", "batch"),
        ("event", "parse"),
        ("event", "parse"),
        ("context_switch", ""),
    ]
    .map(|(t, n)| (t.to_owned(), n.to_owned()));
    assert_eq!(window, expected);
}

#[test]
fn dump_relative_times_agree_in_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &preempted_trace());
    let file = trace.to_str().unwrap();
    let out = fxtrace(&["dump", file, "--relative", "--type", "context_switch"]);
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert!(lines[0].contains(" t=0ns cpu=0 "), "{lines:?}");
    assert!(
        lines[1].contains(" t=1500ns cpu=0 ") && lines[1].contains("out_state=running"),
        "{lines:?}"
    );
    let json = json_lines(&fxtrace(&[
        "dump",
        file,
        "--relative",
        "--json",
        "--type",
        "context_switch",
    ]));
    assert_eq!(json[1]["time"]["ns"], 1500);
    assert_eq!(
        json[1]["outgoing_state"], "running",
        "the same name as the text"
    );
}

/// Review (rev-read): a trace file that shrinks while a reader has it mapped (a user's file
/// truncated under `sudo fxtrace report …`, a trace rewritten in place by another tool)
/// kills the reader with SIGBUS: no message, exit 135, where damage should be named. The
/// reading runs in a child process (this test run again) so that the signal fails only it.
#[test]
fn a_trace_truncated_while_mapped_is_damage_not_a_bus_error() {
    const CHILD: &str = "FXTRACE_REV_READ_TRUNCATE_CHILD";
    let name = "reports::a_trace_truncated_while_mapped_is_damage_not_a_bus_error";
    if let Ok(path) = std::env::var(CHILD) {
        struct Count(u64);
        impl fxtrace_tools::read::Analysis for Count {
            fn add(
                &mut self,
                _: &fxtrace_format::RecordHead,
                _: &fxtrace_format::Decoded<'_>,
            ) -> std::io::Result<()> {
                self.0 += 1;
                Ok(())
            }
        }
        let mut input = fxtrace_tools::read::Input::open(Path::new(&path)).unwrap();
        // Another process truncates the file (at a page boundary, mid-records) once mapped.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(64 << 10)
            .unwrap();
        let outcome = fxtrace_tools::read::read(&mut input, &mut Count(0)).unwrap();
        assert!(outcome.damaged(), "{outcome:?}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut w = RecordWriter::with_magic();
    for i in 0..20_000 {
        span(&mut w, WORKER, "batch", i * 10, i * 10 + 5, &[]);
    }
    let trace = write(dir.path(), "t.fxt", &w.to_bytes());
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, &trace)
        .status()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.success(),
        "the reader of a truncated trace ended with {status:?} (signal {:?})",
        status.signal()
    );
}

/// Review (rev-read): the worker is switched in at 500 (after a sleep) and still runs when the trace ends
/// (recording stopped, `--duration`): a span of 1 000..2 000 on it ran on its CPU the whole
/// time, as the switch in says, not "not covered by switches".
#[test]
fn a_span_of_a_thread_still_running_at_the_trace_end_is_on_cpu() {
    let mut w = RecordWriter::with_magic();
    name_thread(&mut w, WORKER, "worker");
    span(&mut w, WORKER, "batch", 1_000, 2_000, &[]);
    switch(&mut w, 300, 0, IDLE, ThreadState::Blocked, WORKER);
    switch(&mut w, 400, 0, WORKER, ThreadState::Blocked, IDLE);
    switch(&mut w, 500, 0, IDLE, ThreadState::Blocked, WORKER);
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &w.to_bytes());
    let rows = json_lines(&fxtrace(&[
        "report",
        "spans",
        trace.to_str().unwrap(),
        "--json",
    ]));
    let slow = rows.iter().find(|r| r["type"] == "span").unwrap();
    assert_eq!(slow["cpu"]["on_cpu_ns"], 1_000, "{slow}");
    assert_eq!(slow["cpu"]["not_covered_ns"], 0, "{slow}");
}

/// Review (rev-read): `dump --pid` keeps "a switch of either thread's": the worker's process
/// (10) has its thread's six switches, written by tid as `--wait-points` writes them (the
/// thread's process is known from its kernel object), as `--tid 11` keeps them.
#[test]
fn dump_by_process_keeps_its_threads_switches_written_by_tid() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &wait_point_trace());
    let switches = |args: &[&str]| {
        dumped(&trace, args)
            .into_iter()
            .filter(|(t, _)| t == "sched_context_switch")
            .count()
    };
    assert_eq!(switches(&["--tid", "11"]), 6);
    assert_eq!(switches(&["--pid", "10"]), 6);
}

/// Review (rev-read): the same switch from a second source (`--preload` beside `-a`), read
/// after newer switches of its CPU, is left out of the timeline ("older than the last one
/// read on their CPU"), but `report spans` still takes it as the worker leaving CPU 1 at 50:
/// `late`'s slice of CPU 1 (400..800), while the worker runs on CPU 0 (300..1 000), is
/// counted as having run instead of it. Who ran instead cannot exceed the time off the CPUs.
#[test]
fn a_switch_left_out_as_out_of_order_does_not_count_who_ran_instead() {
    let late = ThreadRef::Inline { pid: 30, tid: 31 };
    let mut w = RecordWriter::with_magic();
    name_thread(&mut w, WORKER, "worker");
    name_thread(&mut w, OTHER, "backup");
    name_thread(&mut w, HOLDER, "holder");
    span(&mut w, WORKER, "batch", 0, 1_000, &[]);
    switch(&mut w, 0, 1, IDLE, ThreadState::Blocked, WORKER);
    switch(&mut w, 50, 1, WORKER, ThreadState::Blocked, OTHER);
    switch(&mut w, 100, 0, IDLE, ThreadState::Blocked, HOLDER);
    switch(&mut w, 300, 0, HOLDER, ThreadState::Blocked, WORKER);
    switch(&mut w, 400, 1, OTHER, ThreadState::Blocked, late);
    // The second source's copy of the switch at 50.
    switch(&mut w, 50, 1, WORKER, ThreadState::Blocked, OTHER);
    switch(&mut w, 800, 1, late, ThreadState::Blocked, IDLE);
    switch(&mut w, 1_000, 0, WORKER, ThreadState::Blocked, IDLE);
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &w.to_bytes());
    let rows = json_lines(&fxtrace(&[
        "report",
        "spans",
        trace.to_str().unwrap(),
        "--json",
    ]));
    let slow = rows.iter().find(|r| r["type"] == "span").unwrap();
    let cpu = &slow["cpu"];
    let off = ["runnable_ns", "sleeping_ns", "uninterruptible_ns"]
        .iter()
        .map(|k| cpu[k].as_u64().unwrap())
        .sum::<u64>();
    let instead: u64 = cpu["ran_instead"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ns"].as_u64().unwrap())
        .sum();
    assert_eq!(off, 250, "{slow}");
    assert!(
        instead <= off,
        "ran instead {instead} ns of {off} off: {slow}"
    );
}

/// Review (rev-read): `report sched --json` says what the text says of the switches missing:
/// the text's note on 2 switches naming another thread than the one running is not in the
/// JSON (nor those on switches left out and threads beyond the bounds).
#[test]
fn sched_json_notes_the_switches_missing_as_the_text_does() {
    let late = ThreadRef::Inline { pid: 30, tid: 31 };
    let mut w = RecordWriter::with_magic();
    switch(&mut w, 1_000, 0, IDLE, ThreadState::Blocked, WORKER);
    switch(&mut w, 1_000, 1, OTHER, ThreadState::Blocked, IDLE);
    switch(&mut w, 2_000, 0, WORKER, ThreadState::Running, HOLDER);
    switch(&mut w, 3_000, 1, late, ThreadState::Blocked, IDLE);
    switch(&mut w, 6_000, 0, OTHER, ThreadState::Blocked, IDLE);
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &w.to_bytes());
    let file = trace.to_str().unwrap();
    let stdout = text(&fxtrace(&["report", "sched", file]).stdout);
    assert!(
        stdout.contains("2 switch(es) named an outgoing thread"),
        "{stdout}"
    );
    let rows = json_lines(&fxtrace(&["report", "sched", file, "--json"]));
    assert!(
        rows.iter().any(|r| r["type"] == "note"
            && r["text"]
                .as_str()
                .unwrap()
                .contains("2 switch(es) named an outgoing thread")),
        "{rows:?}"
    );
}

/// Review (rev-read): a long system-wide trace (a parallel build) names more than 65 536
/// threads; the names table keeps the first 65 536, and a thread named after them has no
/// process: `report sched --pid` leaves its row out, its sleeps are no stall, and no note
/// says anything was dropped.
#[test]
fn sched_by_process_keeps_a_thread_seen_after_65536_others() {
    let mut w = RecordWriter::with_magic();
    for i in 0..65_536u64 {
        name_thread(
            &mut w,
            ThreadRef::Inline {
                pid: 99,
                tid: 100_000 + i,
            },
            "cc1",
        );
    }
    name_thread(&mut w, WORKER, "worker");
    switch(&mut w, 1_000, 0, IDLE, ThreadState::Blocked, WORKER);
    switch(&mut w, 2_000, 0, WORKER, ThreadState::Blocked, IDLE);
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &w.to_bytes());
    let file = trace.to_str().unwrap();
    let out = fxtrace(&["report", "sched", file, "--pid", "10", "--json"]);
    let rows = json_lines(&out);
    assert!(
        rows.iter().any(|r| r["type"] == "thread" && r["tid"] == 11)
            || rows
                .iter()
                .any(|r| r["type"] == "note" && r["text"].as_str().unwrap().contains("beyond")),
        "worker's row left out, and no note: {rows:?}"
    );
}

/// Review (rev-read): `--top` is a `usize`; `report sched` multiplies it by the candidates
/// kept per stall (sched.rs: `top * STALL_CANDIDATES`): 2^62 wraps to 0 in a release build
/// (the stalls vanish) and panics in a debug one. A large `--top` means "all of them".
#[test]
fn sched_with_a_huge_top_still_lists_the_stall() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "t.fxt", &stall_trace());
    let file = trace.to_str().unwrap();
    let out = fxtrace(&[
        "report",
        "sched",
        file,
        "--min-stall",
        "1us",
        "--top",
        "4611686018427387904",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        json_lines(&out).iter().any(|r| r["type"] == "stall"),
        "{}",
        text(&out.stdout)
    );
}

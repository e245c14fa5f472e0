//! `fxtrace dump` on a valid, a truncated and a garbage file, and on standard input.

use crate::write_all_records;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn fxtrace(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fxtrace");
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.unwrap_or_default()).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn dump_valid_file() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_all_records::build_trace().unwrap();
    let path = file(dir.path(), "all.fxt", &trace);
    let out = fxtrace(&["dump", path.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 38);
    assert_eq!(lines[0], "@0 [-] magic");
    assert_eq!(lines[1], "@8 [p1] provider_info id=1 name=\"alpha\"");
    for expected in [
        "initialization ticks_per_second=2000000000",
        "event instant t=1000ns pid=100 tid=101 cat=\"cat\" name=\"instant\" args={\"null\": null, \"count\": i32(-5)",
        "\"str_indexed\": str(\"indexed-name\")",
        "\"blob\": blob(5 bytes: de ad be ef 01)",
        "event counter t=2000ns pid=100 tid=101 cat=\"cat\" name=\"counter\" id=9",
        "blob name=\"cpu3\" type=last_branch(2) size=72 lbr cpu=3 time=13000ns",
        "kernel_object koid=101 type=thread(2) name=\"alpha-main\" args={\"process\": koid(100)}",
        "userspace_object pointer=0x7f0000001000 pid=100 name=\"buffer\"",
        "log t=15000ns pid=100 tid=101 message=\"hello from alpha\"",
        "[p2] event instant t=5000ns pid=200 tid=201 cat=\"beta-cat\" name=\"beta-instant\"",
        "sched_context_switch t=6000ns cpu=300 out_tid=201 out_state=suspended in_tid=202",
        "thread_wakeup t=7000ns cpu=1 tid=202 args={\"waker\": koid(201)}",
        "large_blob event t=8000ns pid=200 tid=201 cat=\"beta-cat\" name=\"large-event\"",
        "large_blob attachment cat=\"beta-cat\" name=\"large-attachment\" size=20",
        "[p1] event instant t=20000ns pid=100 tid=101 cat=\"cat\" name=\"back-in-alpha\"",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in\n{stdout}");
    }
}

#[test]
fn dump_json_is_one_object_per_record() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_all_records::build_trace().unwrap();
    let path = file(dir.path(), "all.fxt", &trace);
    let out = fxtrace(&["dump", "--json", path.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let objects: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(objects.len(), 38);
    assert_eq!(objects[0]["type"], "magic");
    let instant = objects.iter().find(|o| o["name"] == "instant").unwrap();
    assert_eq!(instant["event"], "instant");
    assert_eq!(instant["time"]["ns"], 1000);
    assert_eq!(instant["time"]["ticks"], 2000);
    assert_eq!(instant["thread"]["tid"], 101);
    assert_eq!(instant["args"][1]["value"], -5);
    assert_eq!(instant["args"][11]["value"], "deadbeef01");
    let lbr = objects.iter().find(|o| o["blob_type"] == 2).unwrap();
    assert_eq!(lbr["lbr"]["branches"][1]["mispredicted"], true);
    assert_eq!(lbr["lbr"]["time"]["ns"], 13000);
}

#[test]
fn dump_stdin_matches_file() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_all_records::build_trace().unwrap();
    let path = file(dir.path(), "all.fxt", &trace);
    let from_file = fxtrace(&["dump", path.to_str().unwrap()], None);
    let from_stdin = fxtrace(&["dump", "-"], Some(&trace));
    assert!(from_stdin.status.success(), "{}", text(&from_stdin.stderr));
    assert_eq!(text(&from_stdin.stdout), text(&from_file.stdout));
}

#[test]
fn dump_truncated_file_prints_the_good_part_then_fails() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_all_records::build_trace().unwrap();
    let path = file(dir.path(), "cut.fxt", &trace[..1000]);
    let out = fxtrace(&["dump", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 22);
    assert!(stdout
        .lines()
        .last()
        .unwrap()
        .starts_with("@872 [p1] blob name=\"cpu3\""));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "{}: at byte offset 960: record header",
            path.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("says 6 words (48 bytes) but only 40 bytes remain"),
        "{stderr}"
    );

    // The same from standard input.
    let out = fxtrace(&["dump", "-"], Some(&trace[..1000]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), stdout);
    assert!(text(&out.stderr).starts_with("<stdin>: at byte offset 960:"));
}

#[test]
fn dump_garbage_is_not_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), "garbage.fxt", b"hello world, not a trace");
    let out = fxtrace(&["dump", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        format!(
            "{}: not an FXT trace (first word is 0x6f77206f6c6c6568, expected magic 0x0016547846040010)\n",
            path.display()
        )
    );
    let empty = file(dir.path(), "empty.fxt", b"");
    let out = fxtrace(&["dump", empty.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("empty input, not an FXT trace"));
}

#[test]
fn dump_missing_file_and_usage_errors() {
    let out = fxtrace(&["dump", "/nonexistent/trace.fxt"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("/nonexistent/trace.fxt: cannot read: "));
    let out = fxtrace(&["dump"], None);
    assert_eq!(out.status.code(), Some(2), "clap usage error");
}

/// fxtrace's stack, sample and kernel-symbol blobs and the scheduling records of a wait
/// point, in text and JSON: decoded, and a switch side the source did not know as
/// `unknown`, never as a thread 0.
#[test]
fn dump_shows_stacks_samples_and_unknown_sides() {
    use fxtrace_format::sched::UNKNOWN_PROCESS_KOID;
    use fxtrace_format::stack::{KernelSymbolRecord, SampleRecord, StackRecord};
    use fxtrace_format::{
        Arg, ArgValue, Blob, BlobType, ContextSwitch, Initialization, ProviderInfo, RecordWriter,
        SchedContextSwitch, ThreadRef, ThreadState,
    };
    let mut w = RecordWriter::with_magic();
    w.push(&ProviderInfo {
        provider_id: 1,
        name: "kernel",
    })
    .unwrap();
    w.push(&Initialization {
        ticks_per_second: 1_000_000_000,
    })
    .unwrap();
    let ksym = KernelSymbolRecord {
        start: 0xffff_ffff_8143_fc90,
        len: 0x120,
        name: b"futex_wait",
    }
    .encode()
    .unwrap();
    let stack = StackRecord::encode(3, &[0xffff_ffff_8143_fca0], &[0x40_1000]).unwrap();
    let sample = SampleRecord {
        time: 900,
        cpu: 1,
        pid: 10,
        tid: 11,
        stack: 3,
    }
    .encode();
    for (name, payload) in [
        ("fxtrace:ksym", &ksym[..]),
        ("fxtrace:stack", &stack[..]),
        ("fxtrace:sample", &sample[..]),
    ] {
        w.push(&Blob {
            name: name.into(),
            blob_type: BlobType::DATA,
            payload,
        })
        .unwrap();
    }
    let args = [
        Arg::new("incoming_weight", ArgValue::I32(i32::MIN)),
        Arg::new("stack", ArgValue::U32(3)),
    ];
    w.push(&SchedContextSwitch {
        ticks: 1000,
        cpu: 1,
        outgoing_state: ThreadState::Blocked,
        outgoing_tid: 11,
        incoming_tid: 0,
        args: &args,
    })
    .unwrap();
    w.push(&ContextSwitch {
        ticks: 2000,
        cpu: 0,
        outgoing_state: ThreadState::Running,
        outgoing: ThreadRef::Inline { pid: 10, tid: 11 },
        incoming: ThreadRef::Inline {
            pid: UNKNOWN_PROCESS_KOID,
            tid: 0,
        },
        outgoing_priority: 120,
        incoming_priority: 0,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), "stacks.fxt", &w.to_bytes());
    let out = fxtrace(&["dump", path.to_str().unwrap()], None);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for expected in [
        "ksym 0xffffffff8143fc90-0xffffffff8143fdb0 futex_wait",
        "stack id=3 kernel=[0xffffffff8143fca0] user=[0x401000]",
        "sample t=900ns cpu=1 pid=10 tid=11 stack=3",
        "sched_context_switch t=1000ns cpu=1 out_tid=11 out_state=blocked in_tid=0 args={\"incoming_weight\": i32(-2147483648), \"stack\": u32(3)}",
        "context_switch t=2000ns cpu=0 out=10/11 out_state=running out_prio=120 in=unknown in_prio=0",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in\n{stdout}");
    }
    let out = fxtrace(&["dump", "--json", path.to_str().unwrap()], None);
    let objects: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let find = |key: &str| objects.iter().find(|o| !o[key].is_null()).unwrap()[key].clone();
    assert_eq!(find("stack")["id"], 3);
    assert_eq!(find("stack")["kernel"][0], "0xffffffff8143fca0");
    assert_eq!(find("sample")["tid"], 11);
    assert_eq!(find("ksym")["name"], "futex_wait");
}

//! The fake perf fixtures of the capture-session tests: a 6.x `sched_switch` format in a fake
//! tracefs, a fake `/proc` of process 10 (threads 10..=12), tracepoint samples, and a sink that
//! collects the delivered events.
#![allow(dead_code)]

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fxtrace::capture::fake::SCHED_WAKING_FORMAT;
use fxtrace::capture::{
    CaptureConfig, CaptureEvent, FakeSys, PerfPermissions, RecordBytes, TracefsChoice,
};

/// `sched_switch` format of a 6.x kernel.
pub(crate) const FORMAT: &str = "name: sched_switch
ID: 372
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;

print fmt: \"x\", __print_flags(REC->prev_state & 0xff, \"|\", { 0x00000001, \"S\" }, { 0x00000002, \"D\" }, { 0x00000004, \"T\" }, { 0x00000008, \"t\" }, { 0x00000010, \"X\" }, { 0x00000020, \"Z\" }, { 0x00000040, \"P\" }, { 0x00000080, \"I\" }) : \"R\"
";

pub(crate) fn tracefs(dir: &Path) {
    let ev = dir.join("events/sched/sched_switch");
    fs::create_dir_all(&ev).unwrap();
    fs::write(ev.join("id"), "372\n").unwrap();
    fs::write(ev.join("format"), FORMAT).unwrap();
    let ev = dir.join("events/sched/sched_waking");
    fs::create_dir_all(&ev).unwrap();
    fs::write(ev.join("id"), "375\n").unwrap();
    fs::write(ev.join("format"), SCHED_WAKING_FORMAT).unwrap();
    // A new thread's first wake-up: the same template, another name and id.
    let ev = dir.join("events/sched/sched_wakeup_new");
    fs::create_dir_all(&ev).unwrap();
    fs::write(ev.join("id"), "376\n").unwrap();
    let new = SCHED_WAKING_FORMAT
        .replace("name: sched_waking", "name: sched_wakeup_new")
        .replace("ID: 375", "ID: 376");
    fs::write(ev.join("format"), new).unwrap();
}

/// A sched_waking tracepoint sample (TID, TIME, CPU, RAW): `waker` (its (pid, tid), the
/// sample's own, as the tracepoint fires in the waker's context) wakes `woken` onto `target`.
pub(crate) fn waking_sample(
    time: u64,
    cpu: u32,
    waker: (u32, u32),
    woken: (&str, u32),
    target: u32,
) -> Vec<u8> {
    tracepoint_wakeup(375, time, cpu, waker, woken, target)
}

/// A sample of the wake-up tracepoint `id` (375 `sched_waking`, 376 `sched_wakeup_new`: the
/// kernel's one wake-up template), as [`waking_sample`].
pub(crate) fn tracepoint_wakeup(
    id: u32,
    time: u64,
    cpu: u32,
    waker: (u32, u32),
    woken: (&str, u32),
    target: u32,
) -> Vec<u8> {
    let raw = RecordBytes::new()
        .u32(id)
        .u32(waker.1)
        .bytes(&comm16(woken.0))
        .u32(woken.1)
        .u32(120)
        .u32(target)
        .build();
    assert_eq!(raw.len(), 36);
    RecordBytes::new()
        .u32(waker.0)
        .u32(waker.1)
        .u64(time)
        .u32(cpu)
        .u32(0)
        .u32(36)
        .bytes(&raw)
        .build()
}

/// A sched_switch sample with a call chain (TID, TIME, CPU, CALLCHAIN, RAW), as the switch
/// event has with wait points on.
pub(crate) fn switch_sample_with_chain(
    time: u64,
    cpu: u32,
    prev: (&str, u32, i64),
    next: (&str, u32),
    chain: &[u64],
) -> Vec<u8> {
    let plain = switch_sample(time, cpu, prev, next);
    // TID, TIME, CPU (24 bytes), then the chain, then the raw data as before.
    let mut b = RecordBytes::new()
        .bytes(&plain[..24])
        .u64(chain.len() as u64);
    for ip in chain {
        b = b.u64(*ip);
    }
    b.bytes(&plain[24..]).build()
}

/// `sample` as an event of a process capture writes it: its `IDENTIFIER` (`id`) first.
pub(crate) fn identified(id: u64, sample: &[u8]) -> Vec<u8> {
    RecordBytes::new().u64(id).bytes(sample).build()
}

/// A cpu-clock sample (IP, TID, TIME, CPU, CALLCHAIN).
pub(crate) fn clock_sample(time: u64, cpu: u32, (pid, tid): (u32, u32), chain: &[u64]) -> Vec<u8> {
    let mut b = RecordBytes::new()
        .u64(chain.get(1).copied().unwrap_or(0))
        .u32(pid)
        .u32(tid)
        .u64(time)
        .u32(cpu)
        .u32(0)
        .u64(chain.len() as u64);
    for ip in chain {
        b = b.u64(*ip);
    }
    b.build()
}

/// /proc with process 10 ("server": threads 10, 11 "worker") and 12 (a thread that exits).
/// A `/proc/kallsyms` of three kernel functions (the wait-point tests' frames).
pub(crate) fn kallsyms(proc_dir: &Path) {
    fs::write(
        proc_dir.join("kallsyms"),
        "ffffffff81000000 T _stext\nffffffff8143fc90 T futex_wait\nffffffff821f8540 t __schedule\nffffffff821f9490 T schedule\n",
    )
    .unwrap();
}

pub(crate) fn proc_tree(dir: &Path, tids: &[u32]) {
    for &tid in tids {
        proc_thread(dir, tid);
    }
    fs::write(dir.join("10/comm"), "server\n").unwrap();
    // A thread's name is read at /proc/<tid>/comm (capture::procfs's module docs).
    for (tid, name) in [(10, "server"), (11, "worker")] {
        if tids.contains(&tid) {
            fs::write(dir.join(format!("{tid}/comm")), format!("{name}\n")).unwrap();
        }
    }
}

/// Thread `tid` of process 10 in the fake `/proc` (a thread made while a capture starts).
pub(crate) fn proc_thread(dir: &Path, tid: u32) {
    fs::create_dir_all(dir.join(format!("10/task/{tid}"))).unwrap();
    fs::create_dir_all(dir.join(tid.to_string())).unwrap();
    fs::write(
        dir.join(format!("{tid}/status")),
        format!("Tgid:\t10\nPid:\t{tid}\n"),
    )
    .unwrap();
}

pub(crate) fn comm16(name: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..name.len()].copy_from_slice(name.as_bytes());
    b
}

/// The process of a thread of these tests: threads 10..=12 are process 10's (`proc_tree`).
pub(crate) fn tgid(tid: u32) -> u32 {
    if (10..=12).contains(&tid) {
        10
    } else {
        tid
    }
}

/// A sched_switch tracepoint sample (TID, TIME, CPU, RAW) for FORMAT. Its TID pair is the
/// outgoing task's, as the kernel's (the tracepoint fires in its context).
pub(crate) fn switch_sample(
    time: u64,
    cpu: u32,
    prev: (&str, u32, i64),
    next: (&str, u32),
) -> Vec<u8> {
    switch_sample_of(tgid(prev.1), time, cpu, prev, next)
}

/// As [`switch_sample`], with the sample's pid given (the outgoing task's process).
pub(crate) fn switch_sample_of(
    sample_pid: u32,
    time: u64,
    cpu: u32,
    prev: (&str, u32, i64),
    next: (&str, u32),
) -> Vec<u8> {
    let raw = RecordBytes::new()
        .u32(372)
        .u32(prev.1)
        .bytes(&comm16(prev.0))
        .u32(prev.1)
        .u32(120)
        .u64(prev.2 as u64)
        .bytes(&comm16(next.0))
        .u32(next.1)
        .u32(100)
        .build();
    assert_eq!(raw.len(), 64);
    RecordBytes::new()
        .u32(sample_pid)
        .u32(prev.1)
        .u64(time)
        .u32(cpu)
        .u32(0)
        .u32(68)
        .bytes(&raw)
        .u32(0) // pad to 8
        .build()
}

/// A perf time one second in the future: the fake clock is 1 TSC tick = 1 ns with
/// `time_zero = 0`, so nothing here is "caught up" before the test writes it.
pub(crate) fn base() -> u64 {
    // SAFETY: rdtsc only reads the time stamp counter.
    let now = unsafe { core::arch::x86_64::_rdtsc() };
    now + 1_000_000_000
}

pub(crate) fn root_perms() -> PerfPermissions {
    PerfPermissions {
        paranoid: Some(2),
        root: true,
        perfmon: true,
        hardware_pmu: false,
    }
}

pub(crate) type Events = Arc<Mutex<Vec<CaptureEvent>>>;

pub(crate) fn sink() -> (Events, impl FnMut(CaptureEvent) + Send + 'static) {
    let events: Events = Arc::default();
    let e = events.clone();
    (events, move |ev| e.lock().unwrap().push(ev))
}

pub(crate) fn wait_for(events: &Events, what: impl Fn(&[CaptureEvent]) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if what(&events.lock().unwrap()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

pub(crate) fn switches(events: &[CaptureEvent]) -> Vec<fxtrace::capture::SwitchEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::ContextSwitch(cs) => Some(*cs),
            _ => None,
        })
        .collect()
}

pub(crate) fn config(target: CaptureConfig, tracefs_dir: &Path, proc_dir: &Path) -> CaptureConfig {
    CaptureConfig {
        cpus: Some(vec![0, 1]),
        tracefs: TracefsChoice::At(tracefs_dir.into()),
        proc_root: proc_dir.into(),
        poll_interval: Duration::from_millis(10),
        ring_pages: 1,
        ..target
    }
}

/// A fake machine for one capture: a fake tracefs, a fake `/proc` with threads `tids`, and
/// a fake perf whose control pages give the mmap-page clock (2^31 / 2^31: one tick per
/// nanosecond). The directories live as long as the value.
pub(crate) struct FakeMachine {
    pub(crate) tfs: tempfile::TempDir,
    pub(crate) proc: tempfile::TempDir,
    pub(crate) sys: Arc<FakeSys>,
}

pub(crate) fn fake_machine(tids: &[u32]) -> FakeMachine {
    let tfs = tempfile::tempdir().unwrap();
    let proc = tempfile::tempdir().unwrap();
    tracefs(tfs.path());
    proc_tree(proc.path(), tids);
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    FakeMachine { tfs, proc, sys }
}

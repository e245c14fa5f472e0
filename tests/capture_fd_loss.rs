//! A per-process capture whose descriptors the traced program closes (a daemon closing every
//! descriptor it did not open, then opening files under the same numbers), on the in-memory
//! perf (`FakeSys`). One test in its own binary: it closes every descriptor the capture opened,
//! which must not be another test's.

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fxtrace::capture::records::RECORD_SAMPLE;
use fxtrace::capture::{
    Capture, CaptureConfig, CaptureError, CaptureEvent, EventKind, FakeRing, FakeSys,
    PerfPermissions, RecordBytes, TracefsChoice,
};

/// `sched_switch` format of a 6.x kernel.
const FORMAT: &str = "name: sched_switch
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

fn tracefs(dir: &Path) {
    let ev = dir.join("events/sched/sched_switch");
    fs::create_dir_all(&ev).unwrap();
    fs::write(ev.join("id"), "372\n").unwrap();
    fs::write(ev.join("format"), FORMAT).unwrap();
}

/// /proc with process 10 ("server": threads 10, 11 "worker") and 12 (a thread that exits).
fn proc_tree(dir: &Path, tids: &[u32]) {
    for &tid in tids {
        fs::create_dir_all(dir.join(format!("10/task/{tid}"))).unwrap();
        fs::create_dir_all(dir.join(tid.to_string())).unwrap();
        fs::write(
            dir.join(format!("{tid}/status")),
            format!("Tgid:\t10\nPid:\t{tid}\n"),
        )
        .unwrap();
    }
    fs::write(dir.join("10/comm"), "server\n").unwrap();
    fs::write(dir.join("10/task/10/comm"), "server\n").unwrap();
    fs::write(dir.join("10/task/11/comm"), "worker\n").unwrap();
}

fn comm16(name: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..name.len()].copy_from_slice(name.as_bytes());
    b
}

/// A sched_switch tracepoint sample (TID, TIME, CPU, RAW) for FORMAT.
fn switch_sample(time: u64, cpu: u32, prev: (&str, u32, i64), next: (&str, u32)) -> Vec<u8> {
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
        .u32(prev.1)
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
fn base() -> u64 {
    // SAFETY: rdtsc only reads the time stamp counter.
    let now = unsafe { core::arch::x86_64::_rdtsc() };
    now + 1_000_000_000
}

fn root_perms() -> PerfPermissions {
    PerfPermissions {
        paranoid: Some(2),
        root: true,
        perfmon: true,
        hardware_pmu: false,
    }
}

type Events = Arc<Mutex<Vec<CaptureEvent>>>;

fn sink() -> (Events, impl FnMut(CaptureEvent) + Send + 'static) {
    let events: Events = Arc::default();
    let e = events.clone();
    (events, move |ev| e.lock().unwrap().push(ev))
}

fn wait_for(events: &Events, what: impl Fn(&[CaptureEvent]) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if what(&events.lock().unwrap()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn switches(events: &[CaptureEvent]) -> Vec<fxtrace::capture::ContextSwitch> {
    events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::ContextSwitch(cs) => Some(*cs),
            _ => None,
        })
        .collect()
}

fn config(target: CaptureConfig, tracefs_dir: &Path, proc_dir: &Path) -> CaptureConfig {
    CaptureConfig {
        cpus: Some(vec![0, 1]),
        tracefs: TracefsChoice::At(tracefs_dir.into()),
        proc_root: proc_dir.into(),
        poll_interval: Duration::from_millis(10),
        ring_pages: 1,
        ..target
    }
}

/// The descriptor numbers open in this process (0..4096), read without opening one.
fn open_fds() -> std::collections::BTreeSet<i32> {
    (0..4096)
        // SAFETY: F_GETFD only reads a descriptor's flags; a closed number fails with EBADF.
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
        .collect()
}

#[test]
fn a_program_closing_the_capture_descriptors_ends_it_cleanly_and_keeps_its_files() {
    use std::io::{Read, Seek, Write};
    use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};

    let tfs = tempfile::tempdir().unwrap();
    let proc = tempfile::tempdir().unwrap();
    tracefs(tfs.path());
    proc_tree(proc.path(), &[10, 11]);
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    let cfg = config(CaptureConfig::system_wide(), tfs.path(), proc.path());
    let (events, sink) = sink();
    let before = open_fds();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();
    let new: Vec<i32> = open_fds().difference(&before).copied().collect();
    // Two rings (the fake keeps a duplicate of each) and the stop pipe; other tests of this
    // file may open descriptors meanwhile, hence "at least".
    assert!(new.len() >= 6, "{new:?}");
    let t = base();
    let cpu0: FakeRing = sys.ring(EventKind::SchedSwitchTracepoint, 0).unwrap();
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t, 0, ("server", 10, 1), ("worker", 11)),
    ));
    cpu0.wake();
    // A daemon closes every descriptor it did not open and opens files under the numbers.
    let mut files: Vec<(i32, std::fs::File)> = new
        .iter()
        .map(|&fd| {
            let mut f = tempfile::tempfile().unwrap();
            write!(f, "program file {fd}").unwrap();
            // The capture thread may have closed `fd` already (it stops when it sees the first
            // loss), and a new file may then get that very number: move the file above every
            // number in `new` first, so that dup2 never replaces the file's own descriptor.
            // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor ≥ 4096 for the open file `f`.
            let high = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 4096) };
            assert!(high >= 4096);
            // The low number goes before dup2 (it may be `fd` itself).
            drop(f);
            // SAFETY: `high` was just made and is owned here alone.
            let f = unsafe { std::fs::File::from_raw_fd(high) };
            // SAFETY: dup2 closes the descriptor (as the program would) and puts the
            // program's file under its number.
            assert_eq!(unsafe { libc::dup2(f.as_raw_fd(), fd) }, fd);
            // SAFETY: `fd` is now a descriptor owned by the test alone.
            (fd, unsafe { std::fs::File::from_raw_fd(fd) })
        })
        .collect();
    // The capture notices by itself, delivers what it had, then says why it stopped.
    assert!(wait_for(&events, |e| e.iter().any(|e| matches!(
        e,
        CaptureEvent::Unsupported(u) if u.what == "context-switch capture"
            && u.hint.contains("the program closed fxtrace's descriptor")
            && u.hint.ends_with("capture stopped; events captured before are kept")
    ))));
    assert_eq!(
        switches(&events.lock().unwrap()).len(),
        1,
        "the switch was kept"
    );
    match capture.stop() {
        Err(CaptureError::DescriptorLost(lost)) => assert!(new.contains(&lost.fd)),
        other => panic!("expected DescriptorLost, got {other:?}"),
    }
    // No DISABLE went to a number the program took: cpu 0's ring has the lowest new number,
    // replaced first, before the capture could notice any loss (events whose numbers were
    // still the capture's when it noticed are disabled, as they should be).
    let cpu0_event = sys
        .events()
        .into_iter()
        .find(|e| e.attr.kind() == EventKind::SchedSwitchTracepoint && e.cpu == 0)
        .unwrap();
    assert!(
        cpu0_event.enabled,
        "DISABLE sent to a number the program took"
    );
    // The program's files are open and intact.
    for (fd, f) in &mut files {
        let mut text = String::new();
        f.rewind().unwrap();
        f.read_to_string(&mut text).unwrap();
        assert_eq!(text, format!("program file {fd}"));
        f.write_all(b"!").unwrap();
    }
    // The fake perf (playing the kernel) still owns the duplicates it made, and closes them
    // when dropped: leave those numbers to it.
    for (_, f) in files {
        let _ = f.into_raw_fd();
    }
}

//! Capture sessions on the in-memory perf (`FakeSys`): what gets opened, merge order across CPU
//! rings, thread announcements, LOST/unknown counting, the unsupported-LBR outcome, and
//! permission errors with their remedy.

use std::path::Path;

use fxtrace::capture::records::{
    MISC_SWITCH_OUT, MISC_SWITCH_OUT_PREEMPT, RECORD_COMM, RECORD_FORK, RECORD_LOST, RECORD_SAMPLE,
    RECORD_SWITCH,
};
use fxtrace::capture::{
    BranchSampling, Capture, CaptureConfig, CaptureError, CaptureEvent, FakeRing, FakeSys,
    LinuxThreadState, LostKind, PerfEventKind, PerfPermissions, RecordBytes, SwitchSides,
    SwitchSource, FIRST_EVENT_ID,
};

use crate::fake_perf;
use fake_perf::*;

#[test]
fn system_wide_merges_cpus_names_threads_counts_losses_and_reports_lbr_once() {
    let tfs = tempfile::tempdir().unwrap();
    let proc = tempfile::tempdir().unwrap();
    tracefs(tfs.path());
    proc_tree(proc.path(), &[10, 11]);
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    sys.fail_when(|attr, _, _| {
        (attr.kind() == PerfEventKind::BranchSampling).then_some(libc::ENOENT)
    });
    let cfg = CaptureConfig {
        lbr: Some(BranchSampling::default()),
        ..config(CaptureConfig::system_wide(), tfs.path(), proc.path())
    };
    let (events, sink) = sink();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();

    let report = capture.report().clone();
    assert_eq!(
        report.switch_source,
        Some(SwitchSource::SchedSwitchTracepoint)
    );
    assert_eq!(report.lbr, None);
    assert_eq!(report.unsupported.len(), 1);
    let lbr = &report.unsupported[0];
    assert!(lbr.what.contains("LBR"));
    assert_eq!(lbr.errno, Some(libc::ENOENT));
    assert!(
        lbr.hint.contains("VM without a virtual PMU"),
        "{}",
        lbr.hint
    );
    assert!(
        report.clock.perf_to_tsc(12345) == 12345,
        "probed from the fake page"
    );
    let opened = sys.events();
    let tp: Vec<_> = opened
        .iter()
        .filter(|e| e.attr.kind() == PerfEventKind::SchedSwitchTracepoint)
        .collect();
    assert_eq!(tp.len(), 2);
    assert!(tp
        .iter()
        .all(|e| e.pid == -1 && e.mapped && e.enabled && e.attr.config() == 372));
    assert_eq!(tp.iter().map(|e| e.cpu).collect::<Vec<_>>(), vec![0, 1]);

    let t = base();
    let cpu0: FakeRing = sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    let cpu1: FakeRing = sys.ring(PerfEventKind::SchedSwitchTracepoint, 1).unwrap();
    // cpu0: 100 server->worker, COMM at 150, unknown record, 300 worker->idle.
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 100, 0, ("server", 10, 0x1), ("worker", 11))
    ));
    let comm = RecordBytes::new()
        .u32(10)
        .u32(11)
        .bytes(b"renamed\0")
        .sample_id(10, 11, t + 150, 0)
        .build();
    assert!(cpu0.write_record(RECORD_COMM, 0, &comm));
    assert!(cpu0.write_record(200, 0, &[0u8; 8]));
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 300, 0, ("renamed", 11, 0x100), ("swapper/0", 0))
    ));
    // cpu1: 200 idle->server, LOST 5 at 250, 400 server exits (X).
    assert!(cpu1.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 200, 1, ("swapper/1", 0, 0), ("server", 10))
    ));
    let lost = RecordBytes::new()
        .u64(1)
        .u64(5)
        .sample_id(0, 0, t + 250, 1)
        .build();
    assert!(cpu1.write_record(RECORD_LOST, 0, &lost));
    assert!(cpu1.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 400, 1, ("server", 10, 0x10), ("swapper/1", 0))
    ));
    cpu0.wake();
    cpu1.wake();

    // Released before stop: everything up to min(newest cpu0, newest cpu1) = t+300.
    assert!(wait_for(&events, |e| switches(e)
        .iter()
        .any(|cs| cs.time == t + 300)));
    assert!(
        !switches(&events.lock().unwrap())
            .iter()
            .any(|cs| cs.time == t + 400),
        "t+400 is beyond the watermark until stop"
    );
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();

    assert!(matches!(&events[0], CaptureEvent::Unsupported(u) if u.what.contains("LBR")));
    let timed: Vec<u64> = events.iter().filter_map(CaptureEvent::time).collect();
    assert!(
        timed.windows(2).all(|w| w[0] <= w[1]),
        "timestamp order: {timed:?}"
    );

    let cs = switches(&events);
    assert_eq!(
        cs.iter().map(|c| c.time - t).collect::<Vec<_>>(),
        vec![100, 200, 300, 400]
    );
    assert_eq!((cs[0].prev_tid, cs[0].next_tid, cs[0].cpu), (10, 11, 0));
    assert_eq!(
        (cs[0].prev_pid, cs[0].next_pid),
        (Some(10), Some(10)),
        "pids from /proc"
    );
    assert_eq!(cs[0].prev_state, LinuxThreadState::Blocked);
    assert_eq!((cs[0].prev_prio, cs[0].next_prio), (120, 100));
    assert_eq!(cs[0].sides, SwitchSides::Both);
    assert_eq!((cs[1].prev_tid, cs[1].prev_pid, cs[1].cpu), (0, Some(0), 1));
    assert_eq!(cs[2].prev_state, LinuxThreadState::Running, "R+");
    assert_eq!(cs[3].prev_state, LinuxThreadState::Dead, "X");

    // Each thread announced once, before its first switch, with names.
    let threads: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Thread(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        threads.iter().map(|t| t.tid).collect::<Vec<_>>(),
        vec![10, 11, 0]
    );
    assert_eq!(threads[0].name.as_deref(), Some("server"));
    assert_eq!(threads[1].name.as_deref(), Some("worker"));
    assert_eq!(threads[1].pid, Some(10));
    assert_eq!(threads[1].process_name.as_deref(), Some("server"));
    let first_switch = events
        .iter()
        .position(|e| matches!(e, CaptureEvent::ContextSwitch(_)))
        .unwrap();
    let thread_11 = events
        .iter()
        .position(|e| matches!(e, CaptureEvent::Thread(t) if t.tid == 11))
        .unwrap();
    assert!(thread_11 < first_switch);

    assert!(events
        .iter()
        .any(|e| matches!(e, CaptureEvent::Comm(c) if c.name == "renamed" && c.tid == 11)));
    assert!(events.iter().any(|e| matches!(e, CaptureEvent::Lost(l) if l.count == 5 && l.kind == LostKind::Records && l.cpu == 1)));
    assert_eq!(stats.lost_records, 5);
    assert_eq!(stats.lost_reports, 1);
    assert_eq!(stats.unknown_records, 1);
    assert_eq!(stats.switches, 4);
    assert_eq!(stats.threads, 3);
    assert_eq!((stats.parse_errors, stats.late), (0, 0));
    assert!(sys.events().iter().all(|e| !e.enabled), "disabled at stop");
}

/// Issue #7: the process of every switched thread, from the sources in `capture::pids`.
#[test]
fn every_switched_thread_gets_its_process_from_records_or_is_counted() {
    let tfs = tempfile::tempdir().unwrap();
    let proc = tempfile::tempdir().unwrap();
    tracefs(tfs.path());
    proc_tree(proc.path(), &[10, 11]);
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    let cfg = config(CaptureConfig::system_wide(), tfs.path(), proc.path());
    let (events, sink) = sink();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();
    let t = base();
    let cpu0 = sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    let cpu1 = sys.ring(PerfEventKind::SchedSwitchTracepoint, 1).unwrap();
    // cpu0: 500 (not in /proc, no FORK: it predates the capture and is gone) is switched in at
    // 100, and switched out at 300: that sample says it is in process 450.
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 100, 0, ("swapper/0", 0, 0), ("ghost", 500))
    ));
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample_of(450, t + 300, 0, ("ghost", 500, 0x1), ("swapper/0", 0))
    ));
    // cpu1: worker 11 forks thread 601 of a new process 600 at 150 (FORK: pid, ppid, tid, ptid,
    // time); 601 runs at 200; 700 (never heard of again) runs at 350.
    let fork = RecordBytes::new()
        .u32(600)
        .u32(10)
        .u32(601)
        .u32(11)
        .u64(t + 150)
        .sample_id(10, 11, t + 150, 1)
        .build();
    assert!(cpu1.write_record(RECORD_FORK, 0, &fork));
    assert!(cpu1.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 200, 1, ("worker", 11, 0x1), ("child", 601))
    ));
    assert!(cpu1.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample_of(600, t + 250, 1, ("child", 601, 0x1), ("swapper/1", 0))
    ));
    assert!(cpu1.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 350, 1, ("swapper/1", 0, 0), ("lost", 700))
    ));
    cpu0.wake();
    cpu1.wake();
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    let timed: Vec<u64> = events.iter().filter_map(CaptureEvent::time).collect();
    assert!(timed.windows(2).all(|w| w[0] <= w[1]), "held in order");

    let cs = switches(&events);
    let at = |dt: u64| cs.iter().find(|c| c.time == t + dt).unwrap();
    assert_eq!(
        (at(100).next_tid, at(100).next_pid),
        (500, Some(450)),
        "resolved from its own later switch-out"
    );
    assert_eq!(at(200).prev_pid, Some(10), "worker 11, from the sample");
    assert_eq!(at(200).next_pid, Some(600), "from the FORK record");
    assert_eq!((at(350).next_tid, at(350).next_pid), (700, None));
    let announced: Vec<(u32, Option<u32>)> = events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Thread(t) if t.tid != 0 => Some((t.tid, t.pid)),
            _ => None,
        })
        .collect();
    assert_eq!(
        announced,
        vec![
            (500, Some(450)),
            (11, Some(10)),
            (601, Some(600)),
            (700, None)
        ],
        "each announced once, with its process where one was learnt"
    );
    assert_eq!(stats.deferred_events, 2, "the switch-ins of 500 and 700");
    assert_eq!(stats.unknown_process_threads, 1, "700");
    assert_eq!(stats.proc_scan_threads, 2, "10/task/{{10,11}}");
    assert_eq!(
        stats.proc_scan_failures, 1,
        "/proc/11 has no task directory"
    );
}

/// A capture of process 10 whose `/proc` (the returned directory) lists `tids`, on a fake
/// perf whose control pages give the clock.
fn process_10(tids: &[u32]) -> (tempfile::TempDir, std::sync::Arc<FakeSys>, CaptureConfig) {
    let proc = tempfile::tempdir().unwrap();
    proc_tree(proc.path(), tids);
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    let cfg = config(
        CaptureConfig::process(10),
        Path::new("/nonexistent"),
        proc.path(),
    );
    (proc, sys, cfg)
}

#[test]
fn process_mode_opens_per_thread_and_cpu_with_one_ring_per_cpu() {
    let (_proc, sys, cfg) = process_10(&[10, 11, 12]);
    // Thread 12 exits between the listing and perf_event_open.
    sys.fail_when(|_, pid, _| (pid == 12).then_some(libc::ESRCH));
    let (events, sink) = sink();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();
    assert_eq!(
        capture.report().switch_source,
        Some(SwitchSource::ProcessSwitchRecords)
    );
    let opened: Vec<_> = sys
        .events()
        .into_iter()
        .filter(|e| e.attr.kind() == PerfEventKind::ProcessSwitches)
        .collect();
    assert_eq!(opened.len(), 4, "threads 10 and 11 on cpus 0 and 1");
    assert!(opened.iter().all(|e| e.attr.inherit() && e.enabled));
    assert_eq!(
        opened.iter().filter(|e| e.mapped).count(),
        2,
        "one ring per cpu"
    );
    assert_eq!(opened.iter().filter(|e| e.redirected).count(), 2);

    let t = base();
    let ring = sys.ring(PerfEventKind::ProcessSwitches, 0).unwrap();
    // A process capture's records name their event (`IDENTIFIER`, last).
    let id = FIRST_EVENT_ID;
    let out = RecordBytes::new()
        .sample_id_of(10, 11, t + 10, 0, id)
        .build();
    assert!(ring.write_record(
        RECORD_SWITCH,
        MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT,
        &out
    ));
    let inbound = RecordBytes::new()
        .sample_id_of(10, 10, t + 20, 0, id)
        .build();
    assert!(ring.write_record(RECORD_SWITCH, 0, &inbound));
    ring.wake();
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    let cs = switches(&events);
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0].sides, SwitchSides::OutgoingOnly);
    assert_eq!(
        (cs[0].prev_tid, cs[0].prev_pid, cs[0].next_tid),
        (11, Some(10), 0)
    );
    assert_eq!(cs[0].prev_state, LinuxThreadState::Running, "preempted");
    assert_eq!(cs[1].sides, SwitchSides::IncomingOnly);
    assert_eq!(
        (cs[1].next_tid, cs[1].next_pid, cs[1].prev_tid),
        (10, Some(10), 0)
    );
    assert_eq!(
        (cs[0].prev_prio, cs[1].next_prio),
        (255, 255),
        "unknown priority"
    );
    let names: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Thread(t) => Some((t.tid, t.name.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        vec![(11, Some("worker".into())), (10, Some("server".into()))],
        "the unknown side (tid 0) is not announced"
    );
    assert_eq!(stats.switches, 2);
}

/// A process that is ending stops its capture with `request_at_exit`: the last drain
/// delivers what the rings hold and counts their losses as any stop does, but the events
/// are left enabled (and their rings and descriptors to the kernel's teardown), without a
/// disable per event.
#[test]
fn a_stop_at_exit_drains_and_counts_without_disabling() {
    let (_proc, sys, cfg) = process_10(&[10, 11]);
    let (events, sink) = sink();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();
    let ring = sys.ring(PerfEventKind::ProcessSwitches, 0).unwrap();
    let out = RecordBytes::new()
        .sample_id_of(10, 11, base() + 10, 0, FIRST_EVENT_ID)
        .build();
    assert!(ring.write_record(RECORD_SWITCH, MISC_SWITCH_OUT, &out));
    sys.set_lost(PerfEventKind::ProcessSwitches, 0, 4);
    capture.stopper().request_at_exit();
    let stats = capture.stop().unwrap();
    assert_eq!(switches(&events.lock().unwrap()).len(), 1, "drained");
    assert_eq!(stats.lost_unreported, 4, "losses read from the events");
    let opened: Vec<_> = sys
        .events()
        .into_iter()
        .filter(|e| e.attr.kind() == PerfEventKind::ProcessSwitches)
        .collect();
    assert_eq!(opened.len(), 4, "threads 10 and 11 on cpus 0 and 1");
    assert!(
        opened.iter().all(|e| e.enabled),
        "no event disabled at exit"
    );
}

#[test]
fn tracepoint_unavailable_falls_back_to_cpu_wide_records() {
    let proc = tempfile::tempdir().unwrap();
    proc_tree(proc.path(), &[10, 11]);
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    let empty = tempfile::tempdir().unwrap(); // no events/ in it
    let cfg = config(CaptureConfig::system_wide(), empty.path(), proc.path());
    let (events, sink) = sink();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();
    let report = capture.report().clone();
    assert_eq!(
        report.switch_source,
        Some(SwitchSource::CpuWideSwitchRecords)
    );
    assert!(report.unsupported[0].what.contains("sched_switch"));
    assert!(report.unsupported[0].hint.contains("SWITCH_CPU_WIDE"));

    let t = base();
    let ring = sys.ring(PerfEventKind::CpuWideSwitches, 1).unwrap();
    // One switch 10 -> 11 on cpu 1: an OUT record (next = 11) and its IN twin (prev = 10).
    let out = RecordBytes::new()
        .u32(10)
        .u32(11)
        .sample_id(10, 10, t + 5, 1)
        .build();
    assert!(ring.write_record(
        fxtrace::capture::records::RECORD_SWITCH_CPU_WIDE,
        MISC_SWITCH_OUT,
        &out
    ));
    let inbound = RecordBytes::new()
        .u32(10)
        .u32(10)
        .sample_id(10, 11, t + 6, 1)
        .build();
    assert!(ring.write_record(
        fxtrace::capture::records::RECORD_SWITCH_CPU_WIDE,
        0,
        &inbound
    ));
    ring.wake();
    capture.stop().unwrap();
    let cs = switches(&events.lock().unwrap());
    assert_eq!(cs.len(), 1, "the IN twin is not a second switch");
    assert_eq!(
        (cs[0].prev_tid, cs[0].next_tid, cs[0].next_pid),
        (10, 11, Some(10))
    );
    assert_eq!(cs[0].prev_state, LinuxThreadState::Blocked);
}

/// A `SWITCH_CPU_WIDE` switch-out record of `own` (pid, tid) to `next` at `time`.
fn cpu_wide_out(time: u64, own: (u32, u32), next: (u32, u32)) -> Vec<u8> {
    RecordBytes::new()
        .u32(next.0)
        .u32(next.1)
        .sample_id(own.0, own.1, time, 0)
        .build()
}

/// A system-wide capture on fake perf, processes 10 and 11 in its `/proc`, with CPU-wide switch
/// records (no tracefs): its directories (kept while it runs), the fake system, what it
/// delivers, the capture and CPU 0's switch ring.
fn cpu_wide_capture() -> (
    [tempfile::TempDir; 2],
    std::sync::Arc<FakeSys>,
    Events,
    Capture,
    FakeRing,
) {
    let proc = tempfile::tempdir().unwrap();
    proc_tree(proc.path(), &[10, 11]);
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    let empty = tempfile::tempdir().unwrap();
    let cfg = config(CaptureConfig::system_wide(), empty.path(), proc.path());
    let (events, sink) = sink();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();
    let ring = sys.ring(PerfEventKind::CpuWideSwitches, 0).unwrap();
    ([proc, empty], sys, events, capture, ring)
}

/// A reaped thread's last `SWITCH_CPU_WIDE` switch-out says -1 for its own pid and tid: it is
/// the task the previous switch-out of that CPU switched to. Its name, unknown to `/proc`, is
/// its parent's from the FORK record.
#[test]
fn cpu_wide_switch_out_of_a_reaped_thread_names_the_task_last_switched_in() {
    let (_dirs, sys, events, capture, ring) = cpu_wide_capture();
    let t = base();
    let cpu_wide = fxtrace::capture::records::RECORD_SWITCH_CPU_WIDE;
    // Worker 11 creates thread 13 of process 10.
    let fork = RecordBytes::new()
        .u32(10)
        .u32(10)
        .u32(13)
        .u32(11)
        .u64(t + 5)
        .sample_id(10, 11, t + 5, 0)
        .build();
    assert!(ring.write_record(RECORD_FORK, 0, &fork));
    // 11 -> 13, then 13 (reaped: -1) -> idle.
    assert!(ring.write_record(
        cpu_wide,
        MISC_SWITCH_OUT,
        &cpu_wide_out(t + 10, (10, 11), (10, 13))
    ));
    assert!(ring.write_record(
        cpu_wide,
        MISC_SWITCH_OUT,
        &cpu_wide_out(t + 20, (u32::MAX, u32::MAX), (0, 0))
    ));
    // An unknown task leaving a CPU nobody was seen entering: only the incoming side is known.
    let other = sys.ring(PerfEventKind::CpuWideSwitches, 1).unwrap();
    assert!(other.write_record(
        cpu_wide,
        MISC_SWITCH_OUT,
        &cpu_wide_out(t + 30, (u32::MAX, u32::MAX), (10, 10))
    ));
    ring.wake();
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    let cs = switches(&events);
    assert_eq!(cs.len(), 3);
    assert_eq!((cs[1].prev_tid, cs[1].prev_pid), (13, Some(10)));
    assert_eq!(cs[1].sides, SwitchSides::Both);
    assert_eq!((cs[2].prev_tid, cs[2].next_tid), (0, 10));
    assert_eq!(cs[2].sides, SwitchSides::IncomingOnly);
    let thread_13 = events.iter().find_map(|e| match e {
        CaptureEvent::Thread(t) if t.tid == 13 => Some(t.clone()),
        _ => None,
    });
    let thread_13 = thread_13.unwrap();
    assert_eq!(thread_13.pid, Some(10));
    assert_eq!(
        thread_13.name.as_deref(),
        Some("worker"),
        "inherited at fork"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, CaptureEvent::Thread(t) if t.tid == u32::MAX)),
        "no thread -1"
    );
    assert_eq!(stats.unknown_process_threads, 0);
}

/// A reaped task can be switched back in (preempted after its own `release_task`, or reaped by
/// its parent while off the CPU): the `SWITCH_CPU_WIDE` switch-out naming it says -1 for its
/// tid, and for its pid once its process is gone. Neither the incoming side nor that task's
/// own next switch-out is a thread `0xffffffff` (of no process, or of its old one); a switch
/// between two such tasks names nobody.
#[test]
fn a_reaped_task_switched_back_in_is_an_unknown_side_not_thread_minus_one() {
    let (_dirs, _sys, events, capture, ring) = cpu_wide_capture();
    let t = base();
    let cpu_wide = fxtrace::capture::records::RECORD_SWITCH_CPU_WIDE;
    let minus_one = u32::MAX;
    let records = [
        // 11 -> a task whose whole process is gone (-1, -1), which then leaves for idle.
        ((10, 11), (minus_one, minus_one)),
        ((minus_one, minus_one), (0, 0)),
        // 11 -> a reaped thread of process 10 (10, -1), which then leaves for 11.
        ((10, 11), (10, minus_one)),
        ((10, minus_one), (10, 11)),
        // 11 -> a reaped task, which leaves for another one: a switch of nobody.
        ((10, 11), (minus_one, minus_one)),
        ((minus_one, minus_one), (minus_one, minus_one)),
    ];
    for (i, (own, next)) in records.into_iter().enumerate() {
        let time = t + 10 * (i as u64 + 1);
        assert!(ring.write_record(cpu_wide, MISC_SWITCH_OUT, &cpu_wide_out(time, own, next)));
    }
    ring.wake();
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    let cs = switches(&events);
    let sides: Vec<_> = cs
        .iter()
        .map(|c| (c.prev_tid, c.next_tid, c.sides))
        .collect();
    assert_eq!(
        sides,
        vec![
            (11, 0, SwitchSides::OutgoingOnly),
            (0, 0, SwitchSides::IncomingOnly),
            (11, 0, SwitchSides::OutgoingOnly),
            (0, 11, SwitchSides::IncomingOnly),
            (11, 0, SwitchSides::OutgoingOnly),
        ],
        "{cs:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, CaptureEvent::Thread(t) if t.tid == minus_one)),
        "no thread -1"
    );
    assert_eq!(
        stats.unknown_task_switches, 1,
        "the switch naming nobody, counted"
    );
    assert_eq!(stats.unknown_process_threads, 0);
    assert_eq!(
        stats.deferred_events, 0,
        "nothing waits for a pid of nobody"
    );
}

#[test]
fn permission_denied_says_what_is_missing() {
    let sys = FakeSys::new();
    sys.fail_when(|attr, _, _| (attr.kind() != PerfEventKind::ClockProbe).then_some(libc::EACCES));
    let tfs = tempfile::tempdir().unwrap();
    tracefs(tfs.path());
    let cfg = CaptureConfig {
        clock: Some(fxtrace::capture::PerfTimeConverter::Measured(
            fxtrace::capture::MeasuredMapping::new(0, 0, 1.0),
        )),
        ..config(CaptureConfig::system_wide(), tfs.path(), Path::new("/proc"))
    };
    let user = PerfPermissions {
        paranoid: Some(2),
        root: false,
        perfmon: false,
        hardware_pmu: true,
    };
    let err = Capture::start_with(sys, user, cfg, |_| {}).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            CaptureError::Open {
                event: PerfEventKind::CpuWideSwitches,
                cpu: 0,
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("perf_event_paranoid = 2"), "{text}");
    assert!(text.contains("CAP_PERFMON"), "{text}");
}

#[test]
fn only_unsupported_lbr_is_nothing_to_capture() {
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    sys.fail_when(|attr, _, _| {
        (attr.kind() == PerfEventKind::BranchSampling).then_some(libc::EOPNOTSUPP)
    });
    let cfg = CaptureConfig {
        switches: false,
        lbr: Some(BranchSampling::default()),
        cpus: Some(vec![0]),
        ..CaptureConfig::system_wide()
    };
    let err = Capture::start_with(sys, root_perms(), cfg, |_| {}).unwrap_err();
    assert!(
        matches!(err, CaptureError::NothingToCapture { ref why, .. } if why.contains("LBR")),
        "{err}"
    );
}

/// Two LOST records whose counts sum past `u64::MAX` (a corrupt ring): the capture thread
/// keeps going, delivers what it decoded, and the loss saturates instead of wrapping to a
/// small number (or panicking on the overflow).
#[test]
fn lost_counts_past_u64_max_saturate_and_the_capture_goes_on() {
    let m = fake_machine(&[10, 11]);
    let (tfs, proc, sys) = (m.tfs.path(), m.proc.path(), &m.sys);
    let cfg = config(CaptureConfig::system_wide(), tfs, proc);
    let (events, sink) = sink();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();
    let t = base();
    let cpu0 = sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 100, 0, ("server", 10, 0x1), ("worker", 11))
    ));
    for i in 0..2u64 {
        let lost = RecordBytes::new()
            .u64(1)
            .u64(1 << 63)
            .sample_id(0, 0, t + 200 + i, 0)
            .build();
        assert!(cpu0.write_record(RECORD_LOST, 0, &lost));
    }
    cpu0.wake();
    let stats = capture
        .stop()
        .expect("the capture survives huge lost counts");
    assert_eq!(stats.lost_records, u64::MAX);
    assert_eq!(stats.lost_reports, 2);
    let events = events.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, CaptureEvent::ContextSwitch(cs) if cs.next_tid == 11)),
        "the switch decoded before the losses is delivered"
    );
}

/// Records a ring had no room for in the last moments before the stop (no LOST record after
/// them: the kernel writes one only before the next record that fits) are counted from each
/// event's own count at the stop and delivered as a loss of their CPU, after every event;
/// what LOST records reported is not counted twice.
#[test]
fn losses_no_lost_record_reported_are_counted_at_the_stop() {
    let m = fake_machine(&[10, 11]);
    let (tfs, proc, sys) = (m.tfs.path(), m.proc.path(), &m.sys);
    let cfg = config(CaptureConfig::system_wide(), tfs, proc);
    let (events, sink) = sink();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();
    assert!(sys
        .events()
        .iter()
        .all(|e| e.attr.counts_lost() || e.attr.kind() != PerfEventKind::SchedSwitchTracepoint));
    let t = base();
    let cpu0 = sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 100, 0, ("server", 10, 0x1), ("worker", 11))
    ));
    let lost = RecordBytes::new()
        .u64(1)
        .u64(5)
        .sample_id(0, 0, t + 150, 0)
        .build();
    assert!(cpu0.write_record(RECORD_LOST, 0, &lost));
    cpu0.wake();
    // CPU 0's event lost 12 in all: 5 reported above, 7 after; CPU 1's lost 3, unreported.
    sys.set_lost(PerfEventKind::SchedSwitchTracepoint, 0, 12);
    sys.set_lost(PerfEventKind::SchedSwitchTracepoint, 1, 3);
    let stats = capture.stop().unwrap();
    assert_eq!(stats.lost_records, 15);
    assert_eq!(stats.lost_unreported, 10);
    assert_eq!(stats.lost_reports, 3);
    let events = events.lock().unwrap();
    let losses: Vec<(u32, u64)> = events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Lost(l) if l.kind == LostKind::Records => Some((l.cpu, l.count)),
            _ => None,
        })
        .collect();
    assert_eq!(losses, [(0, 5), (0, 7), (1, 3)]);
    assert!(
        matches!(events.last(), Some(CaptureEvent::Lost(_))),
        "the stop's losses come after every event"
    );
}

/// A kernel before 6.0 refuses `PERF_FORMAT_LOST` with `EINVAL`: the events are opened
/// without it and the capture runs as before (its last losses then go uncounted), with the
/// clock of the probe event's mmap page as before.
#[test]
fn a_kernel_without_the_lost_count_opens_the_events_without_it() {
    let m = fake_machine(&[10, 11]);
    let (tfs, proc, sys) = (m.tfs.path(), m.proc.path(), &m.sys);
    sys.fail_when(|attr, _, _| attr.counts_lost().then_some(libc::EINVAL));
    let cfg = config(CaptureConfig::system_wide(), tfs, proc);
    let (_events, sink) = sink();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, sink).unwrap();
    assert!(sys
        .events()
        .iter()
        .filter(|e| e.attr.kind() == PerfEventKind::SchedSwitchTracepoint)
        .all(|e| !e.attr.counts_lost()));
    assert!(
        matches!(
            capture.report().clock,
            fxtrace::capture::PerfTimeConverter::MmapPage(_)
        ),
        "{:?}",
        capture.report().clock
    );
    sys.set_lost(PerfEventKind::SchedSwitchTracepoint, 0, 4);
    let stats = capture.stop().unwrap();
    assert_eq!((stats.lost_records, stats.lost_unreported), (0, 0));
}

/// A capture that fails during its stop (here its sink panics in the last drain) still
/// gives the counters of that drain: the LOST record it read is counted.
#[test]
fn a_capture_failing_at_the_stop_still_gives_its_final_counters() {
    let m = fake_machine(&[10, 11]);
    let (tfs, proc, sys) = (m.tfs.path(), m.proc.path(), &m.sys);
    let mut cfg = config(CaptureConfig::system_wide(), tfs, proc);
    // The thread waits in `poll` until the stop wakes it.
    cfg.poll_interval = std::time::Duration::from_secs(30);
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, |event| {
        if matches!(event, CaptureEvent::ContextSwitch(_)) {
            panic!("a sink that fails");
        }
    })
    .unwrap();
    let t = base();
    let cpu0 = sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    let lost = RecordBytes::new()
        .u64(1)
        .u64(5)
        .sample_id(0, 0, t + 50, 0)
        .build();
    assert!(cpu0.write_record(RECORD_LOST, 0, &lost));
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 100, 0, ("server", 10, 0x1), ("worker", 11))
    ));
    let (stats, outcome) = capture.stop_with_stats();
    assert!(
        matches!(outcome, Err(CaptureError::Thread(_))),
        "{outcome:?}"
    );
    assert_eq!((stats.lost_records, stats.lost_reports), (5, 1));
}

/// Wake-ups, wait points and CPU samples through the fake perf: each from its own ring, the
/// woken thread named from the sample and placed in its process, the waker from the sample's
/// own (pid, tid); a blocked switch's call chain interned once and announced (with the
/// kernel symbols its frames fall in) before the first switch or sample that refers to it;
/// a preempted switch keeps no wait point.
#[test]
fn wakeups_wait_points_and_samples_are_delivered_with_their_stacks_announced_first() {
    let m = fake_machine(&[10, 11, 12]);
    kallsyms(m.proc.path());
    let cfg = CaptureConfig {
        wakeups: true,
        wait_points: true,
        sample_hz: Some(99),
        ..config(CaptureConfig::system_wide(), m.tfs.path(), m.proc.path())
    };
    let (events, sink) = sink();
    let capture = Capture::start_with(m.sys.clone(), root_perms(), cfg, sink).unwrap();
    let report = capture.report().clone();
    assert!(report.wakeups && report.wait_points && report.kernel_symbols);
    assert_eq!(report.sampling, Some((99, true)));
    assert!(report.unsupported.is_empty(), "{:?}", report.unsupported);
    let opened = m.sys.events();
    let waking: Vec<_> = opened
        .iter()
        .filter(|e| e.attr.kind() == PerfEventKind::SchedWakingTracepoint)
        .collect();
    // sched_waking on each CPU, and sched_wakeup_new writing into its ring there.
    assert_eq!(waking.len(), 4);
    assert!(waking.iter().all(|e| e.pid == -1));
    let of = |config| {
        let mut on: Vec<(i32, bool)> = waking
            .iter()
            .filter(|e| e.attr.config() == config)
            .map(|e| (e.cpu, e.redirected))
            .collect();
        on.sort();
        on
    };
    assert_eq!(of(375), [(0, false), (1, false)]);
    assert_eq!(of(376), [(0, true), (1, true)]);
    let switch_attr = &opened
        .iter()
        .find(|e| e.attr.kind() == PerfEventKind::SchedSwitchTracepoint)
        .unwrap()
        .attr;
    assert!(switch_attr
        .sample_format()
        .contains(fxtrace::capture::SampleFormat::CALLCHAIN));

    let t = base();
    const KERNEL: u64 = (-128i64) as u64;
    const USER: u64 = (-512i64) as u64;
    let futex = [
        KERNEL,
        0xffff_ffff_821f_8550,
        0xffff_ffff_8143_fca0,
        USER,
        0x40_1000,
    ];
    let sw = m.sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    let wakes = m.sys.ring(PerfEventKind::SchedWakingTracepoint, 1).unwrap();
    let clock = m.sys.ring(PerfEventKind::CpuClockSampling, 0).unwrap();
    // 11 blocks in the futex path twice (one stack), is preempted once (no wait point).
    for (time, state) in [(100, 0x1), (300, 0x1), (500, 0x100)] {
        assert!(sw.write_record(
            RECORD_SAMPLE,
            0,
            &switch_sample_with_chain(t + time, 0, ("worker", 11, state), ("swapper/0", 0), &futex)
        ));
    }
    // 10 wakes 11 onto CPU 0 from CPU 1.
    assert!(wakes.write_record(
        RECORD_SAMPLE,
        0,
        &waking_sample(t + 200, 1, (10, 10), ("worker", 11), 0)
    ));
    // 10 starts thread 12 on CPU 0: its first wake-up is sched_wakeup_new's.
    assert!(wakes.write_record(
        RECORD_SAMPLE,
        0,
        &tracepoint_wakeup(376, t + 220, 1, (10, 10), ("worker", 12), 0)
    ));
    // A sample of 10 in user code, one in the futex path.
    assert!(clock.write_record(
        RECORD_SAMPLE,
        0,
        &clock_sample(t + 250, 0, (10, 10), &[USER, 0x40_2000])
    ));
    assert!(clock.write_record(
        RECORD_SAMPLE,
        0,
        &clock_sample(t + 350, 0, (10, 11), &futex)
    ));
    sw.wake();
    wakes.wake();
    clock.wake();
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    assert_eq!(
        (
            stats.wakeups,
            stats.wait_points,
            stats.samples,
            stats.stacks,
            stats.kernel_symbols
        ),
        (2, 2, 2, 2, 2)
    );
    assert_eq!(stats.stacks_not_interned, 0);

    let wakes: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Wakeup(w) => Some((
                w.tid,
                w.pid,
                w.waker_tid,
                w.waker_pid,
                w.cpu,
                w.target_cpu,
                w.prio,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        wakes,
        [
            (11, Some(10), 10, Some(10), 1, 0, 120),
            (12, Some(10), 10, Some(10), 1, 0, 120)
        ]
    );
    let cs = switches(&events);
    assert_eq!(cs.len(), 3);
    assert_eq!(cs[0].stack, cs[1].stack, "one interned stack");
    assert!(cs[0].stack.is_some());
    assert_eq!(cs[2].stack, None, "preempted: no wait point");
    // Symbols, then the stack, then its first use.
    let at = |f: &dyn Fn(&CaptureEvent) -> bool| events.iter().position(f).unwrap();
    let first_symbol = at(&|e| matches!(e, CaptureEvent::KernelSymbol(_)));
    let stack = at(&|e| matches!(e, CaptureEvent::Stack(s) if Some(s.id) == cs[0].stack));
    let first_use = at(&|e| matches!(e, CaptureEvent::ContextSwitch(c) if c.stack.is_some()));
    assert!(first_symbol < stack && stack < first_use);
    let names: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::KernelSymbol(k) => Some(k.name.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["__schedule", "futex_wait"]);
    let samples: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Sample(s) => Some(*s),
            _ => None,
        })
        .collect();
    assert_eq!(samples.len(), 2);
    assert_eq!(
        (samples[0].tid, samples[0].pid, samples[0].ip),
        (10, Some(10), 0x40_2000)
    );
    assert_eq!(
        samples[1].stack, cs[0].stack,
        "a sample in the same chain: the same stack"
    );
    assert_ne!(samples[0].stack, samples[1].stack);
}

/// Without the tracepoints (no tracefs), wake-ups and wait points are unsupported, each said
/// once, and the switches still come (from the CPU-wide switch records).
#[test]
fn wakeups_and_wait_points_without_tracefs_are_noted_not_fatal() {
    let m = fake_machine(&[10, 11]);
    let cfg = CaptureConfig {
        wakeups: true,
        wait_points: true,
        tracefs: fxtrace::capture::TracefsChoice::Skip,
        ..config(CaptureConfig::system_wide(), m.tfs.path(), m.proc.path())
    };
    let (_events, sink) = sink();
    let capture = Capture::start_with(m.sys.clone(), root_perms(), cfg, sink).unwrap();
    let report = capture.report().clone();
    assert_eq!(
        report.switch_source,
        Some(SwitchSource::CpuWideSwitchRecords)
    );
    assert!(!report.wakeups && !report.wait_points);
    let what: Vec<&str> = report.unsupported.iter().map(|u| u.what.as_str()).collect();
    assert!(what.iter().any(|w| w.contains("wake-ups")), "{what:?}");
    assert!(what.iter().any(|w| w.contains("wait points")), "{what:?}");
    capture.stop().unwrap();
}

/// A kernel without `sched_wakeup_new`: wake-ups are recorded, and the note says a new
/// thread's first one is not.
#[test]
fn wakeups_without_sched_wakeup_new_say_so() {
    let m = fake_machine(&[10, 11]);
    std::fs::remove_dir_all(m.tfs.path().join("events/sched/sched_wakeup_new")).unwrap();
    let cfg = CaptureConfig {
        wakeups: true,
        ..config(CaptureConfig::system_wide(), m.tfs.path(), m.proc.path())
    };
    let (_events, sink) = sink();
    let capture = Capture::start_with(m.sys.clone(), root_perms(), cfg, sink).unwrap();
    let report = capture.report().clone();
    assert!(report.wakeups);
    let notes: Vec<String> = report
        .unsupported
        .iter()
        .map(|u| format!("{}: {}", u.what, u.summary))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("sched_wakeup_new") && notes[0].contains("first wake-up"),
        "{notes:?}"
    );
    let waking = m.sys.events();
    assert!(waking.iter().all(|e| e.attr.config() != 376));
    capture.stop().unwrap();
}

/// Wait points of a process capture: `sched_switch` with call chains on each thread (into
/// rings of its own), its blocked samples' stacks given to the thread's switch-out record that
/// follows; a preempted switch keeps none, and a wait point not followed by a blocked
/// switch-out is dropped, not given to a later one.
#[test]
fn a_process_captures_wait_points_go_to_its_switch_records() {
    let m = fake_machine(&[10, 11]);
    kallsyms(m.proc.path());
    let cfg = CaptureConfig {
        wait_points: true,
        ..config(CaptureConfig::process(10), m.tfs.path(), m.proc.path())
    };
    let (events, sink) = sink();
    let capture = Capture::start_with(m.sys.clone(), root_perms(), cfg, sink).unwrap();
    let report = capture.report().clone();
    assert_eq!(
        report.switch_source,
        Some(SwitchSource::ProcessSwitchRecords)
    );
    assert!(report.wait_points && report.kernel_symbols);
    assert!(report.unsupported.is_empty(), "{:?}", report.unsupported);
    let tracepoints: Vec<_> = m
        .sys
        .events()
        .into_iter()
        .filter(|e| e.attr.kind() == PerfEventKind::SchedSwitchTracepoint)
        .collect();
    assert_eq!(tracepoints.len(), 4, "threads 10 and 11 on cpus 0 and 1");
    // Its switch records' event has the side band (FORK, EXIT, COMM): this one has none.
    assert!(tracepoints.iter().all(|e| e.attr.inherit()
        && !e.attr.task()
        && !e.attr.comm()
        && e.pid != -1
        && e.attr
            .sample_format()
            .contains(fxtrace::capture::SampleFormat::CALLCHAIN)));

    let t = base();
    const KERNEL: u64 = (-128i64) as u64;
    let futex = [KERNEL, 0xffff_ffff_821f_8550, 0xffff_ffff_8143_fca0];
    let tp = m.sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    let sw = m.sys.ring(PerfEventKind::ProcessSwitches, 0).unwrap();
    let out = |time: u64, preempted: bool| {
        let body = RecordBytes::new()
            .sample_id_of(10, 11, t + time, 0, FIRST_EVENT_ID)
            .build();
        let misc = if preempted {
            MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT
        } else {
            MISC_SWITCH_OUT
        };
        assert!(sw.write_record(RECORD_SWITCH, misc, &body));
    };
    let sample = |time: u64, state: i64| {
        let body = identified(
            FIRST_EVENT_ID,
            &switch_sample_with_chain(t + time, 0, ("worker", 11, state), ("x", 0), &futex),
        );
        assert!(tp.write_record(RECORD_SAMPLE, 0, &body));
    };
    // Blocked, with its wait point; preempted; a blocked sample whose switch-out says
    // preempted (its wait point dropped); a blocked switch-out without a sample.
    sample(100, 0x1);
    out(110, false);
    sample(200, 0x100);
    out(210, true);
    sample(300, 0x1);
    out(310, true);
    out(410, false);
    tp.wake();
    sw.wake();
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    let cs = switches(&events);
    assert_eq!(cs.len(), 4, "the switch records alone are switches");
    assert!(cs.iter().all(|c| c.prev_tid == 11));
    let stacks: Vec<_> = cs.iter().map(|c| c.stack).collect();
    assert!(stacks[0].is_some(), "{stacks:?}");
    assert_eq!(stacks[1..], [None, None, None]);
    assert_eq!((stats.switches, stats.wait_points, stats.stacks), (4, 1, 1));
    let stack = events
        .iter()
        .position(|e| matches!(e, CaptureEvent::Stack(s) if Some(s.id) == stacks[0]))
        .unwrap();
    let first_use = events
        .iter()
        .position(|e| matches!(e, CaptureEvent::ContextSwitch(c) if c.stack.is_some()))
        .unwrap();
    assert!(stack < first_use, "the stack is announced before its use");
}

/// A process capture where the kernel refuses the `sched_switch` event (no raw tracepoint
/// data for this user): its switches are recorded, and a note says wait points are not,
/// with the remedy.
#[test]
fn a_process_capture_refused_its_wait_points_says_why_and_goes_on() {
    let m = fake_machine(&[10, 11]);
    m.sys.fail_when(|attr, _, _| {
        (attr.kind() == PerfEventKind::SchedSwitchTracepoint).then_some(libc::EACCES)
    });
    let cfg = CaptureConfig {
        wait_points: true,
        ..config(CaptureConfig::process(10), m.tfs.path(), m.proc.path())
    };
    let (_events, sink) = sink();
    let capture = Capture::start_with(m.sys.clone(), root_perms(), cfg, sink).unwrap();
    let report = capture.report().clone();
    assert_eq!(
        report.switch_source,
        Some(SwitchSource::ProcessSwitchRecords)
    );
    assert!(!report.wait_points);
    let notes: Vec<String> = report
        .unsupported
        .iter()
        .map(|u| format!("{}: {}", u.what, u.hint))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("wait points") && notes[0].contains("not recorded"),
        "{notes:?}"
    );
    assert!(
        notes[0].contains("perf_event_paranoid"),
        "the remedy: {notes:?}"
    );
    assert!(m
        .sys
        .events()
        .iter()
        .all(|e| e.attr.kind() != PerfEventKind::SchedSwitchTracepoint));
    capture.stop().unwrap();
}

/// Threads made while a process capture opens its events: each appears once its maker,
/// thread 10, has its event of a kind on CPU 0 open (so it inherited that one), and is opened
/// itself in the next listing. It then has two events of that kind on CPU 0, and every record
/// of it comes twice (as the kernel writes them: one after the other, each naming its
/// lineage); a thread it makes later has both lineages too. One record of each is delivered,
/// the copies counted: switches and their side band (13, made for the switch events; 14, made
/// by 13 after the start), wake-ups (15, for the wake-up events), CPU samples, two timers of
/// one thread (16, for the sampling events; 17, made by 16 after the start).
#[test]
fn a_thread_made_while_the_events_open_is_recorded_once() {
    let m = fake_machine(&[10, 11]);
    let proc = m.proc.path().to_owned();
    m.sys.fail_when(move |attr, pid, cpu| {
        let made = match attr.kind() {
            PerfEventKind::ProcessSwitches => 13,
            PerfEventKind::SchedWakingTracepoint if attr.config() == 375 => 15,
            PerfEventKind::CpuClockSampling => 16,
            _ => return None,
        };
        if (pid, cpu) == (10, 1) {
            proc_thread(&proc, made);
        }
        None
    });
    let cfg = CaptureConfig {
        wakeups: true,
        sample_hz: Some(99),
        ..config(CaptureConfig::process(10), m.tfs.path(), m.proc.path())
    };
    let (events, sink) = sink();
    let capture = Capture::start_with(m.sys.clone(), root_perms(), cfg, sink).unwrap();
    assert!(capture.report().wakeups && capture.report().sampling.is_some());
    let opened = m.sys.events();
    // The id of the event of `kind` fxtrace opened on thread `tid`, CPU 0.
    let id = |kind: PerfEventKind, tid: i32| {
        opened
            .iter()
            .find(|e| e.attr.kind() == kind && e.pid == tid && e.cpu == 0)
            .map(|e| e.id)
            .unwrap_or_else(|| panic!("no {kind:?} event on thread {tid}"))
    };
    for (kind, late) in [
        (PerfEventKind::ProcessSwitches, 13),
        (PerfEventKind::SchedWakingTracepoint, 15),
        (PerfEventKind::CpuClockSampling, 16),
    ] {
        assert!(
            id(kind, late) > id(kind, 10),
            "{late} is opened after its maker"
        );
    }
    let t = base();
    let sw = m.sys.ring(PerfEventKind::ProcessSwitches, 0).unwrap();
    let (own13, of10) = (
        id(PerfEventKind::ProcessSwitches, 13),
        id(PerfEventKind::ProcessSwitches, 10),
    );
    let switch = |misc, tid, time, lineage| {
        let body = RecordBytes::new()
            .sample_id_of(10, tid, t + time, 0, lineage)
            .build();
        assert!(sw.write_record(RECORD_SWITCH, misc, &body));
    };
    // 13 leaves the CPU, comes back (the copies in either order), 11 (one event) leaves.
    switch(MISC_SWITCH_OUT, 13, 10, own13);
    switch(MISC_SWITCH_OUT, 13, 11, of10);
    switch(0, 13, 50, of10);
    switch(0, 13, 51, own13);
    switch(
        MISC_SWITCH_OUT,
        11,
        60,
        id(PerfEventKind::ProcessSwitches, 11),
    );
    // 13 makes 14: a FORK from each of 13's events; 14 has both lineages.
    for (lineage, dt) in [(own13, 0), (of10, 2)] {
        let fork = RecordBytes::new()
            .u32(10)
            .u32(10)
            .u32(14)
            .u32(13)
            .u64(t + 70 + dt)
            .sample_id_of(10, 13, t + 70 + dt, 0, lineage)
            .build();
        assert!(sw.write_record(RECORD_FORK, 0, &fork));
    }
    switch(MISC_SWITCH_OUT, 14, 80, of10);
    switch(MISC_SWITCH_OUT, 14, 81, own13);
    sw.wake();
    // 15 wakes 11: the tracepoint fires in each of 15's events.
    let wk = m.sys.ring(PerfEventKind::SchedWakingTracepoint, 0).unwrap();
    for (lineage, dt) in [
        (id(PerfEventKind::SchedWakingTracepoint, 15), 0),
        (id(PerfEventKind::SchedWakingTracepoint, 10), 3),
    ] {
        let body = identified(
            lineage,
            &waking_sample(t + 90 + dt, 0, (10, 15), ("worker", 11), 1),
        );
        assert!(wk.write_record(RECORD_SAMPLE, 0, &body));
    }
    wk.wake();
    // Samples of 16 from its own timer and its copy of 10's, of 10, and of 17 (made by 16
    // after the start: both lineages), as the timers fire.
    let sm = m.sys.ring(PerfEventKind::CpuClockSampling, 0).unwrap();
    let (own16, of10) = (
        id(PerfEventKind::CpuClockSampling, 16),
        id(PerfEventKind::CpuClockSampling, 10),
    );
    let fork17 = RecordBytes::new()
        .u32(10)
        .u32(10)
        .u32(17)
        .u32(16)
        .u64(t + 150)
        .sample_id_of(10, 16, t + 150, 0, of10)
        .build();
    assert!(sw.write_record(RECORD_FORK, 0, &fork17));
    sw.wake();
    for (tid, time, lineage) in [
        (16, 100, of10),
        (16, 101, own16),
        (10, 120, of10),
        (16, 200, own16),
        (16, 202, of10),
        (17, 300, of10),
        (17, 301, own16),
    ] {
        let body = identified(lineage, &clock_sample(t + time, 0, (10, tid), &[0x401000]));
        assert!(sm.write_record(RECORD_SAMPLE, 0, &body));
    }
    sm.wake();
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    let outs: Vec<(u32, bool)> = switches(&events)
        .iter()
        .map(|c| match c.sides {
            SwitchSides::IncomingOnly => (c.next_tid, false),
            _ => (c.prev_tid, true),
        })
        .collect();
    assert_eq!(outs, [(13, true), (13, false), (11, true), (14, true)]);
    let forks = events
        .iter()
        .filter(|e| matches!(e, CaptureEvent::Fork(f) if f.tid == 14))
        .count();
    assert_eq!(forks, 1, "one FORK of 14");
    let wakeups = events
        .iter()
        .filter(|e| matches!(e, CaptureEvent::Wakeup(w) if w.tid == 11 && w.waker_tid == 15))
        .count();
    assert_eq!(wakeups, 1);
    let samples: Vec<(u32, u64)> = events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Sample(s) => Some((s.tid, s.time - t)),
            _ => None,
        })
        .collect();
    assert_eq!(
        samples,
        [(16, 101), (10, 120), (16, 200), (17, 301)],
        "the newest lineage of each thread"
    );
    assert_eq!(stats.duplicates, 4 + 1 + 3);
    assert_eq!(
        (stats.switches, stats.wakeups, stats.samples),
        (4, 1, 4),
        "{stats:?}"
    );
}

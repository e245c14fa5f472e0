//! Capture events → FXT (`KernelTraceWriter`): thread and name records, context switches, LBR
//! blobs round-tripped through `format::lbr`, losses and unavailable sources as visible data,
//! thread-table exhaustion, late events; the kernel provider over the in-memory perf (LOST
//! counted, unsupported LBR, a synthetic LBR sample); and, on the real kernel (root), a context
//! switch ordered correctly between two `clock::ticks()` reads of the same thread.

use crate::fake_perf;
use fake_perf::{base, fake_machine, proc_tree, root_perms, switch_sample, tracefs};

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use fxtrace::capture::fxt::{
    KernelTraceConfig, KernelTraceWriter, UNKNOWN_PROCESS_KOID, UNKNOWN_PROCESS_NAME,
};
use fxtrace::capture::records::{RECORD_LOST, RECORD_SAMPLE};
use fxtrace::capture::{
    BranchEntry, BranchSample, BranchSampling, CaptureConfig, CaptureEvent, FakeSys,
    LinuxThreadState, Lost, LostKind, PerfEventKind, PerfPermissions, RecordBytes, SwitchEvent,
    SwitchSides, TaskComm, TaskFork, ThreadInfo, TracefsChoice, Unsupported,
};
use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::lbr::LbrSample;
use fxtrace_format::{
    BlobType, Decoded, DecodedEventKind, DecodedRecord, DecodedValue, Decoder, ObjectType,
    RecordWriter, PROVIDER_EVENT_BUFFER_OVERFLOW,
};
use fxtrace_tools::manager::kernel::{KernelProvider, KernelProviderConfig};

// === helpers ===

fn config() -> KernelTraceConfig {
    KernelTraceConfig {
        provider_id: 1,
        provider_name: "kernel".into(),
        ticks_per_second: 2_000_000_000,
        start_ticks: 1_000,
        recorder: (99, 99),
    }
}

fn write_all(events: &[CaptureEvent]) -> (Vec<u8>, fxtrace::capture::KernelTraceStats) {
    let mut w = KernelTraceWriter::new(RecordWriter::with_magic(), config()).unwrap();
    for e in events {
        w.handle(e).unwrap();
    }
    let (sink, stats) = w.finish().unwrap();
    (sink.to_bytes(), stats)
}

fn decode(bytes: &[u8]) -> Vec<Decoded<'_>> {
    Decoder::new(bytes)
        .collect::<Result<Vec<_>, _>>()
        .expect("the trace decodes")
}

fn thread_info(tid: u32, pid: u32, name: &str, process: &str) -> CaptureEvent {
    CaptureEvent::Thread(ThreadInfo {
        time: 2_000,
        tid,
        pid: Some(pid),
        name: Some(name.into()),
        process_name: Some(process.into()),
    })
}

fn switch(
    time: u64,
    cpu: u32,
    prev: (u32, u32),
    next: (u32, u32),
    state: LinuxThreadState,
) -> CaptureEvent {
    CaptureEvent::ContextSwitch(SwitchEvent {
        time,
        cpu,
        prev_tid: prev.1,
        prev_pid: Some(prev.0),
        next_tid: next.1,
        next_pid: Some(next.0),
        prev_state: state,
        uninterruptible: false,
        stack: None,
        prev_prio: 120,
        next_prio: 100,
        sides: SwitchSides::Both,
    })
}

/// Kernel object records as (type, koid, name, "process" arg).
fn kernel_objects(records: &[Decoded<'_>]) -> Vec<(ObjectType, u64, String, Option<u64>)> {
    records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::KernelObject {
                koid,
                object_type,
                name,
                args,
            } => {
                let process = args.iter().find_map(|a| match (&*a.name, &a.value) {
                    ("process", DecodedValue::Koid(k)) => Some(*k),
                    _ => None,
                });
                Some((*object_type, *koid, name.to_string(), process))
            }
            _ => None,
        })
        .collect()
}

/// The value of argument `name` of an event.
fn arg<'a>(e: &fxtrace_format::DecodedEvent<'a>, name: &str) -> Option<DecodedValue<'a>> {
    e.args
        .iter()
        .find(|a| a.name == name)
        .map(|a| a.value.clone())
}

fn assert_time_order(records: &[Decoded<'_>]) {
    let times: Vec<u64> = records
        .iter()
        .filter_map(|d| d.record.time().map(|t| t.ticks))
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "records in time order: {times:?}"
    );
}

// === the writer ===

#[test]
fn threads_names_and_switches() {
    let events = [
        thread_info(10, 10, "server", "server"),
        thread_info(11, 10, "worker", "server"),
        switch(3_000, 1, (10, 10), (10, 11), LinuxThreadState::Blocked),
        CaptureEvent::Comm(TaskComm {
            time: 3_500,
            pid: 10,
            tid: 11,
            name: "renamed".into(),
            exec: false,
        }),
        CaptureEvent::Thread(ThreadInfo {
            time: 4_000,
            tid: 0,
            pid: Some(0),
            name: Some("swapper/1".into()),
            process_name: None,
        }),
        switch(4_000, 1, (10, 11), (0, 0), LinuxThreadState::Running),
        // The same thread announced again with the same names: nothing new to write.
        CaptureEvent::Thread(ThreadInfo {
            time: 4_500,
            tid: 11,
            pid: Some(10),
            name: Some("renamed".into()),
            process_name: Some("server".into()),
        }),
        switch(5_000, 1, (0, 0), (10, 10), LinuxThreadState::Blocked),
    ];
    let (bytes, stats) = write_all(&events);
    let records = decode(&bytes);
    assert_eq!(records[0].record, DecodedRecord::Magic);
    assert!(matches!(
        &records[1].record,
        DecodedRecord::ProviderInfo { provider_id: 1, name } if name == "kernel"
    ));
    assert_eq!(
        records[2].record,
        DecodedRecord::Initialization {
            ticks_per_second: 2_000_000_000
        }
    );
    assert!(records[1..].iter().all(|d| d.provider == Some(1)));
    assert_time_order(&records);

    let threads: Vec<(u8, u64, u64)> = records
        .iter()
        .filter_map(|d| match d.record {
            DecodedRecord::Thread { index, thread } => Some((index, thread.pid, thread.tid)),
            _ => None,
        })
        .collect();
    assert_eq!(
        threads,
        vec![(1, 10, 10), (2, 10, 11), (3, 0, 0), (4, 99, 99)],
        "indexed in order of appearance; the recorder last (summary event)"
    );

    assert_eq!(
        kernel_objects(&records),
        vec![
            (ObjectType::PROCESS, 10, "server".into(), None),
            (ObjectType::THREAD, 10, "server".into(), Some(10)),
            (ObjectType::THREAD, 11, "worker".into(), Some(10)),
            (ObjectType::THREAD, 11, "renamed".into(), Some(10)),
            (ObjectType::THREAD, 0, "swapper/1".into(), Some(0)),
        ],
        "each process and thread named once, a rename named again"
    );

    let switches: Vec<_> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::ContextSwitch {
                time,
                cpu,
                outgoing_state,
                outgoing,
                incoming,
                outgoing_priority,
                incoming_priority,
            } => Some((
                time.ticks,
                *cpu,
                *outgoing_state,
                (outgoing.pid, outgoing.tid),
                (incoming.pid, incoming.tid),
                *outgoing_priority,
                *incoming_priority,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        switches,
        vec![
            (3_000, 1, 3, (10, 10), (10, 11), 120, 100),
            // The idle task (tid 0) is written with priority 0, as Perfetto expects; the
            // preempted thread as running (Perfetto's `R`).
            (4_000, 1, 1, (10, 11), (0, 0), 120, 0),
            (5_000, 1, 3, (0, 0), (10, 10), 0, 100),
        ]
    );
    // Thread records come before the first record that refers to them.
    let first_switch = records
        .iter()
        .position(|d| matches!(d.record, DecodedRecord::ContextSwitch { .. }))
        .unwrap();
    let thread_11 = records
        .iter()
        .position(|d| matches!(d.record, DecodedRecord::Thread { index: 2, .. }))
        .unwrap();
    assert!(thread_11 < first_switch);

    assert_eq!(stats.context_switches, 3);
    assert_eq!(stats.threads, 4);
    assert_eq!(stats.kernel_objects, 5);
    assert_eq!(
        (stats.late, stats.dropped_records, stats.unindexed_threads),
        (0, 0, 0)
    );
    assert!(!stats.lost_anything());
    assert!(
        !records
            .iter()
            .any(|d| matches!(d.record, DecodedRecord::ProviderEvent { .. })),
        "no overflow marker when nothing was lost"
    );
}

#[test]
fn losses_and_unavailable_sources_are_written_as_data() {
    let events = [
        CaptureEvent::Unsupported(Unsupported {
            what: "LBR branch-stack sampling (cpu-cycles)".into(),
            errno: Some(libc::ENOENT),
            hint: "no hardware PMU is registered, and the whole story".into(),
            summary: "no hardware PMU".into(),
        }),
        switch(2_000, 0, (1, 1), (2, 2), LinuxThreadState::Blocked),
        CaptureEvent::Lost(Lost {
            time: 2_500,
            cpu: 1,
            kind: LostKind::Records,
            count: 5,
        }),
        CaptureEvent::Lost(Lost {
            time: 2_600,
            cpu: 0,
            kind: LostKind::Samples,
            count: 2,
        }),
        switch(3_000, 0, (2, 2), (1, 1), LinuxThreadState::Blocked),
    ];
    let (bytes, stats) = write_all(&events);
    let records = decode(&bytes);
    assert_time_order(&records);

    // Said once: one event, no log record beside it repeating the whole text.
    assert!(
        !records
            .iter()
            .any(|d| matches!(d.record, DecodedRecord::Log { .. })),
        "no log record"
    );

    let events: Vec<_> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    assert!(events
        .iter()
        .all(|e| e.category == "fxtrace" && e.kind == DecodedEventKind::Instant));
    let names: Vec<&str> = events.iter().map(|e| &*e.name).collect();
    assert_eq!(
        names,
        vec![
            "fxtrace: LBR branch-stack sampling (cpu-cycles) unavailable",
            "fxtrace: 5 perf records lost",
            "fxtrace: 2 perf samples lost",
            "fxtrace: kernel capture summary",
        ]
    );
    assert_eq!(arg(&events[1], "count"), Some(DecodedValue::U64(5)));
    assert_eq!(arg(&events[1], "cpu"), Some(DecodedValue::U32(1)));
    assert_eq!(events[1].time.ticks, 2_500);
    assert_eq!(
        arg(&events[0], "errno"),
        Some(DecodedValue::I32(libc::ENOENT))
    );
    assert_eq!(
        arg(&events[0], "reason"),
        Some(DecodedValue::Str("no hardware PMU".into()))
    );
    assert_eq!(
        arg(&events[0], "detail"),
        Some(DecodedValue::Str(
            "no hardware PMU is registered, and the whole story".into()
        ))
    );
    let thread = &events[0].thread;
    assert_eq!(
        (thread.pid, thread.tid),
        (99, 99),
        "on the recorder's thread"
    );
    assert_eq!(events[0].time.ticks, 1_000, "at capture start");
    assert_eq!(arg(&events[3], "lost_records"), Some(DecodedValue::U64(5)));
    assert_eq!(arg(&events[3], "lost_samples"), Some(DecodedValue::U64(2)));
    assert_eq!(
        arg(&events[3], "context_switches"),
        Some(DecodedValue::U64(2))
    );

    let overflow: Vec<_> = records
        .iter()
        .filter(|d| {
            matches!(
                d.record,
                DecodedRecord::ProviderEvent {
                    provider_id: 1,
                    event: PROVIDER_EVENT_BUFFER_OVERFLOW
                }
            )
        })
        .collect();
    assert_eq!(overflow.len(), 1, "one buffer-overflow marker");
    assert_eq!(
        (stats.lost_records, stats.lost_samples, stats.lost_reports),
        (5, 2, 2)
    );
    assert_eq!(stats.unsupported, 1);
    assert!(stats.lost_anything());
}

#[test]
fn lbr_samples_become_last_branch_blobs() {
    let entries = |n: usize| -> Vec<BranchEntry> {
        (0..n)
            .map(|i| BranchEntry {
                from: 0x1000 + i as u64,
                to: 0x2000 + i as u64,
                mispred: i % 3 == 0,
                predicted: i % 3 != 0,
                cycles: i as u16 * 7,
                ..BranchEntry::default()
            })
            .collect()
    };
    let sample = |time: u64, cpu: u32, n: usize| {
        CaptureEvent::Branch(BranchSample {
            time,
            cpu,
            pid: 50,
            tid: 51,
            ip: 0xdead,
            hw_idx: None,
            entries: entries(n),
        })
    };
    let (bytes, stats) = write_all(&[
        sample(2_000, 3, 0),
        sample(2_100, 3, 1),
        sample(2_200, 3, 32),
        sample(2_300, 1, 40),
    ]);
    let records = decode(&bytes);
    let strings: Vec<(u16, String)> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::String { index, value } => Some((*index, value.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(
        strings.iter().filter(|(_, v)| v.starts_with("cpu")).count(),
        2,
        "one string record per CPU: {strings:?}"
    );
    let blobs: Vec<_> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } => Some((name.to_string(), *blob_type, payload.to_vec())),
            _ => None,
        })
        .collect();
    assert_eq!(blobs.len(), 4);
    for ((name, blob_type, payload), (time, cpu, n)) in
        blobs
            .iter()
            .zip([(2_000, 3, 0), (2_100, 3, 1), (2_200, 3, 32), (2_300, 1, 32)])
    {
        assert_eq!(name, &format!("cpu{cpu}"));
        assert_eq!(*blob_type, BlobType::LAST_BRANCH);
        let s = LbrSample::decode(payload).unwrap();
        assert_eq!(s.header.cpu, cpu as u16);
        assert_eq!(s.header.event_time, time);
        assert_eq!(s.header.aspace, 50, "the sampled process's pid");
        assert_eq!(usize::from(s.header.num_branches), n);
        let want = entries(n);
        let got: Vec<_> = s.branches().collect();
        assert_eq!(got.len(), n);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                (g.from, g.to),
                (w.from, w.to),
                "newest first, in kernel order"
            );
            assert_eq!(g.cycles(), w.cycles);
            assert_eq!(g.mispredicted(), w.mispred);
            assert_eq!(g.info >> 17, 0, "only cycles and the mispredict bit");
        }
    }
    assert_eq!(stats.branch_blobs, 4);
    assert_eq!(stats.lbr_entries_truncated, 8, "40 entries, 32 kept");
}

#[test]
fn a_full_thread_table_goes_inline_and_is_counted() {
    let mut events = Vec::new();
    for i in 0..300u32 {
        let tid = 1_000 + i;
        events.push(switch(
            2_000 + u64::from(i),
            0,
            (7, tid),
            (0, 0),
            LinuxThreadState::Blocked,
        ));
    }
    let (bytes, stats) = write_all(&events);
    let records = decode(&bytes);
    let thread_records = records
        .iter()
        .filter(|d| matches!(d.record, DecodedRecord::Thread { .. }))
        .count();
    assert_eq!(thread_records, 255, "every index used once");
    // 300 workers + tid 0 + the recorder = 302 threads; 255 got an index.
    assert_eq!(stats.threads, 302);
    assert_eq!(stats.unindexed_threads, 47);
    let outgoing: Vec<u64> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::ContextSwitch { outgoing, .. } => Some(outgoing.tid),
            _ => None,
        })
        .collect();
    assert_eq!(
        outgoing,
        (1_000..1_300).collect::<Vec<u64>>(),
        "inline refs resolve too"
    );
}

#[test]
fn dead_threads_free_their_index_and_a_reused_tid_is_named_again() {
    let events = [
        thread_info(20, 20, "app", "app"),
        thread_info(21, 20, "helper", "app"),
        switch(2_000, 0, (20, 21), (20, 20), LinuxThreadState::Dead),
        // tid 21 comes back in process 30, forked from thread 30 ("other").
        thread_info(30, 30, "other", "other"),
        CaptureEvent::Fork(TaskFork {
            time: 3_000,
            pid: 30,
            ppid: 30,
            tid: 21,
            ptid: 30,
        }),
        switch(4_000, 0, (30, 30), (30, 21), LinuxThreadState::Blocked),
    ];
    let (bytes, _) = write_all(&events);
    let records = decode(&bytes);
    let threads: Vec<(u8, u64, u64)> = records
        .iter()
        .filter_map(|d| match d.record {
            DecodedRecord::Thread { index, thread } => Some((index, thread.pid, thread.tid)),
            _ => None,
        })
        .collect();
    assert_eq!(
        &threads[..4],
        &[(1, 20, 20), (2, 20, 21), (2, 30, 30), (3, 30, 21)],
        "21's index 2 is reused by the next new thread"
    );
    let names = kernel_objects(&records);
    assert!(
        names.contains(&(ObjectType::THREAD, 21, "other".into(), Some(30))),
        "the new tid 21 inherits its parent's name: {names:?}"
    );
    let last = records
        .iter()
        .rev()
        .find_map(|d| match &d.record {
            DecodedRecord::ContextSwitch { incoming, .. } => Some(*incoming),
            _ => None,
        })
        .unwrap();
    assert_eq!((last.pid, last.tid), (30, 21));
}

#[test]
fn threads_of_unknown_process_get_the_marker_process_and_are_counted() {
    let unknown = |tid: u32, name: &str| {
        CaptureEvent::Thread(ThreadInfo {
            time: 2_000,
            tid,
            pid: None,
            name: Some(name.into()),
            process_name: None,
        })
    };
    let gone_in = CaptureEvent::ContextSwitch(SwitchEvent {
        time: 2_100,
        cpu: 0,
        prev_tid: 0,
        prev_pid: Some(0),
        next_tid: 41,
        next_pid: None,
        prev_state: LinuxThreadState::Running,
        uninterruptible: false,
        stack: None,
        prev_prio: 120,
        next_prio: 120,
        sides: SwitchSides::Both,
    });
    let events = [
        thread_info(0, 0, "swapper/0", "swapper"),
        unknown(41, "gone"),
        gone_in,
        // Announced again once its process is learnt: registered and named under it.
        thread_info(41, 40, "gone", "app"),
        switch(2_200, 0, (40, 41), (0, 0), LinuxThreadState::Blocked),
    ];
    let (bytes, stats) = write_all(&events);
    assert_eq!(stats.unknown_process_threads, 1);
    let records = decode(&bytes);
    let marker = u64::from(UNKNOWN_PROCESS_KOID);
    let threads: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|d| match d.record {
            DecodedRecord::Thread { thread, .. } => Some((thread.pid, thread.tid)),
            _ => None,
        })
        .collect();
    assert_eq!(threads, vec![(0, 0), (marker, 41), (40, 41), (99, 99)]);
    let names = kernel_objects(&records);
    assert!(names.contains(&(
        ObjectType::PROCESS,
        marker,
        UNKNOWN_PROCESS_NAME.into(),
        None
    )));
    assert!(names.contains(&(ObjectType::THREAD, 41, "gone".into(), Some(marker))));
    assert!(names.contains(&(ObjectType::THREAD, 41, "gone".into(), Some(40))));
    assert!(
        names.contains(&(ObjectType::THREAD, 0, "swapper/0".into(), Some(0))),
        "the idle task stays in process 0"
    );
    let incoming: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::ContextSwitch { incoming, .. } => Some((incoming.pid, incoming.tid)),
            _ => None,
        })
        .collect();
    assert_eq!(incoming[0], (marker, 41), "never process 0");
    let summary = records
        .iter()
        .find_map(|d| match &d.record {
            DecodedRecord::Event(e) if e.name == "fxtrace: kernel capture summary" => Some(e),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        arg(summary, "unknown_process_threads"),
        Some(DecodedValue::U64(1))
    );
}

#[test]
fn late_events_are_written_and_counted_and_big_cpus_keep_their_number() {
    let (bytes, stats) = write_all(&[
        switch(5_000, 0, (1, 1), (2, 2), LinuxThreadState::Blocked),
        switch(4_000, 1, (3, 3), (4, 4), LinuxThreadState::Blocked),
        switch(6_000, 300, (5, 5), (6, 6), LinuxThreadState::Running),
    ]);
    assert_eq!(stats.late, 1);
    assert_eq!(stats.context_switches, 3);
    assert_eq!(stats.wide_cpu_switches, 1);
    let records = decode(&bytes);
    assert!(records.iter().any(|d| matches!(
        d.record,
        DecodedRecord::ContextSwitch { cpu: 1, time, .. } if time.ticks == 4_000
    )));
    assert!(records.iter().any(|d| matches!(
        d.record,
        DecodedRecord::SchedContextSwitch {
            cpu: 300,
            outgoing_tid: 5,
            incoming_tid: 6,
            outgoing_state: 1,
            ..
        }
    )));
}

// === the kernel provider over the in-memory perf ===

fn fake_config(tfs: &Path, proc: &Path, lbr: bool) -> KernelProviderConfig {
    KernelProviderConfig {
        capture: CaptureConfig {
            cpus: Some(vec![0, 1]),
            tracefs: TracefsChoice::At(tfs.into()),
            proc_root: proc.into(),
            poll_interval: Duration::from_millis(10),
            ring_pages: 1,
            lbr: lbr.then(BranchSampling::default),
            ..CaptureConfig::system_wide()
        },
        trace: KernelTraceConfig {
            start_ticks: fxtrace::clock::ticks(),
            ..config()
        },
    }
}

#[test]
fn kernel_provider_over_fake_perf_counts_losses_and_notes_missing_lbr() {
    let tfs = tempfile::tempdir().unwrap();
    let proc = tempfile::tempdir().unwrap();
    tracefs(tfs.path());
    proc_tree(proc.path(), &[10, 11]);
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    sys.fail_when(|attr, _, _| {
        (attr.kind() == PerfEventKind::BranchSampling).then_some(libc::ENOENT)
    });
    let provider = KernelProvider::start_with(
        sys.clone(),
        root_perms(),
        fake_config(tfs.path(), proc.path(), true),
        RecordWriter::with_magic(),
    )
    .unwrap();
    assert_eq!(provider.report().unsupported.len(), 1);

    let t = base();
    let cpu0 = sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    let cpu1 = sys.ring(PerfEventKind::SchedSwitchTracepoint, 1).unwrap();
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 100, 0, ("server", 10, 0x1), ("worker", 11))
    ));
    let lost = RecordBytes::new()
        .u64(1)
        .u64(5)
        .sample_id(0, 0, t + 150, 1)
        .build();
    assert!(cpu1.write_record(RECORD_LOST, 0, &lost));
    assert!(cpu1.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 200, 1, ("swapper/1", 0, 0), ("server", 10))
    ));
    cpu0.wake();
    cpu1.wake();
    let outcome = provider.stop().unwrap();
    assert_eq!(outcome.capture.lost_records, 5);
    assert_eq!(outcome.trace.lost_records, 5);
    assert_eq!(outcome.trace.context_switches, 2);
    assert_eq!(outcome.trace.unsupported, 1);

    let bytes = outcome.sink.to_bytes();
    let records = decode(&bytes);
    assert_time_order(&records);
    assert!(matches!(
        &records[1].record,
        DecodedRecord::ProviderInfo { provider_id: 1, name } if name == "kernel"
    ));
    // One event: the reason in a line, the whole text once.
    let said: Vec<String> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Event(e) if e.name.contains("LBR") => Some(format!("{:?}", e.args)),
            _ => None,
        })
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("no hardware PMU") && said[0].contains("VM without a virtual PMU"),
        "{said:?}"
    );
    assert!(records.iter().any(|d| matches!(
        &d.record,
        DecodedRecord::Event(e) if e.name == "fxtrace: 5 perf records lost" && e.time.ticks == t + 150
    )));
    assert!(records.iter().any(|d| matches!(
        d.record,
        DecodedRecord::ProviderEvent {
            provider_id: 1,
            event: PROVIDER_EVENT_BUFFER_OVERFLOW
        }
    )));
    let names = kernel_objects(&records);
    assert!(
        names.contains(&(ObjectType::PROCESS, 10, "server".into(), None)),
        "{names:?}"
    );
    assert!(
        names.contains(&(ObjectType::THREAD, 11, "worker".into(), Some(10))),
        "{names:?}"
    );
}

/// A capture that fails while running (here its `poll`) keeps what it delivered before: the
/// section is closed as usual, holds the switch, and the outcome names the failure.
#[test]
fn a_capture_that_fails_while_running_keeps_its_section() {
    let m = fake_machine(&[10, 11]);
    let (tfs, proc, sys) = (m.tfs.path(), m.proc.path(), &m.sys);
    let provider = KernelProvider::start_with(
        sys.clone(),
        root_perms(),
        fake_config(tfs, proc, false),
        RecordWriter::with_magic(),
    )
    .unwrap();
    let t = base();
    let cpu0 = sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 100, 0, ("server", 10, 0x1), ("worker", 11))
    ));
    // From the next wait on, the capture thread's `poll` fails: the wake ends the wait it is
    // in, it drains the switch, and its next `poll` fails.
    sys.fail_polls(libc::ENOMEM);
    cpu0.wake();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while provider.capture_stats().switches == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the switch is never delivered"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The thread polls again right after the drain that delivered the switch.
    std::thread::sleep(Duration::from_millis(200));
    let outcome = provider.stop().expect("the section is kept");
    let error = outcome
        .capture_error
        .as_ref()
        .expect("the failure is reported");
    assert!(error.to_string().contains("poll"), "{error}");
    assert!(
        outcome.describe().contains("the capture failed"),
        "{}",
        outcome.describe()
    );
    assert_eq!(outcome.trace.context_switches, 1);
    assert_eq!(outcome.capture.switches, 1);
    let bytes = outcome.sink.to_bytes();
    let records = decode(&bytes);
    assert!(
        records
            .iter()
            .any(|d| matches!(d.record, DecodedRecord::ContextSwitch { .. })),
        "{records:?}"
    );
}

/// A ring record the capture cannot parse is not in the trace: the section says so (its
/// summary event counts it, and the buffer-overflow metadata marks the section as lossy).
#[test]
fn records_the_capture_could_not_parse_are_marked_in_the_section() {
    let m = fake_machine(&[10, 11]);
    let (tfs, proc, sys) = (m.tfs.path(), m.proc.path(), &m.sys);
    let provider = KernelProvider::start_with(
        sys.clone(),
        root_perms(),
        fake_config(tfs, proc, false),
        RecordWriter::with_magic(),
    )
    .unwrap();
    let t = base();
    let cpu0 = sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t + 100, 0, ("server", 10, 0x1), ("worker", 11))
    ));
    // A sample too short for its sample_type: it fails to parse.
    assert!(cpu0.write_record(RECORD_SAMPLE, 0, &[0u8; 8]));
    cpu0.wake();
    let outcome = provider.stop().unwrap();
    assert_eq!(outcome.capture.parse_errors, 1);
    assert_eq!(outcome.trace.unparsed_records, 1);
    assert!(outcome.trace.lost_anything());
    let bytes = outcome.sink.to_bytes();
    let records = decode(&bytes);
    assert!(records.iter().any(|d| matches!(
        d.record,
        DecodedRecord::ProviderEvent {
            provider_id: 1,
            event: PROVIDER_EVENT_BUFFER_OVERFLOW
        }
    )));
    let summary = records
        .iter()
        .find_map(|d| match &d.record {
            DecodedRecord::Event(e) if e.name == "fxtrace: kernel capture summary" => Some(e),
            _ => None,
        })
        .expect("the summary event");
    assert!(summary
        .args
        .iter()
        .any(|a| a.name == "unparsed_records" && a.value == DecodedValue::U64(1)));
}

/// A line of `/proc/PID/maps` that does not parse is counted as such, not as a ring record
/// the capture could not read: the section is not marked lossy for it.
#[test]
fn a_bad_proc_maps_line_does_not_mark_the_section_lossy() {
    let m = fake_machine(&[10, 11]);
    let (tfs, proc, sys) = (m.tfs.path(), m.proc.path(), &m.sys);
    std::fs::write(proc.join("10/maps"), "garbage\n").unwrap();
    let mut cfg = fake_config(tfs, proc, false);
    cfg.capture.mmaps = true;
    let provider =
        KernelProvider::start_with(sys.clone(), root_perms(), cfg, RecordWriter::with_magic())
            .unwrap();
    let outcome = provider.stop().unwrap();
    assert_eq!(outcome.capture.maps_bad_lines, 1);
    assert_eq!(outcome.capture.parse_errors, 0);
    assert_eq!(outcome.trace.unparsed_records, 0);
    assert!(!outcome.trace.lost_anything());
}

#[test]
fn synthetic_lbr_sample_round_trips_into_a_blob() {
    let tfs = tempfile::tempdir().unwrap();
    let proc = tempfile::tempdir().unwrap();
    tracefs(tfs.path());
    proc_tree(proc.path(), &[10, 11]);
    let sys = FakeSys::new();
    sys.set_clock(0, 1 << 31, 31);
    let provider = KernelProvider::start_with(
        sys.clone(),
        root_perms(),
        fake_config(tfs.path(), proc.path(), true),
        RecordWriter::with_magic(),
    )
    .unwrap();
    assert!(provider.report().lbr.is_some(), "the fake PMU accepts LBR");
    let t = base();
    // IP | TID | TIME | CPU | BRANCH_STACK with 3 entries (kernel perf_branch_entry flags:
    // bit 0 mispred, bit 1 predicted, bits 4..19 cycles).
    let mut body = RecordBytes::new()
        .u64(0x4000)
        .u32(10)
        .u32(11)
        .u64(t + 50)
        .u32(1)
        .u32(0)
        .u64(3);
    let flags = |mispred: bool, cycles: u64| {
        u64::from(mispred) | (u64::from(!mispred) << 1) | (cycles << 4)
    };
    for (from, to, mispred, cycles) in [
        (0x10, 0x20, true, 9),
        (0x30, 0x40, false, 0),
        (0x50, 0x60, false, 65_535),
    ] {
        body = body.u64(from).u64(to).u64(flags(mispred, cycles));
    }
    let ring = sys.ring(PerfEventKind::BranchSampling, 1).unwrap();
    assert!(ring.write_record(RECORD_SAMPLE, 0, &body.build()));
    ring.wake();
    let outcome = provider.stop().unwrap();
    assert_eq!(outcome.trace.branch_blobs, 1);
    let bytes = outcome.sink.to_bytes();
    let records = decode(&bytes);
    let (name, payload) = records
        .iter()
        .find_map(|d| match &d.record {
            DecodedRecord::Blob {
                name,
                blob_type: BlobType::LAST_BRANCH,
                payload,
            } => Some((name.to_string(), payload.to_vec())),
            _ => None,
        })
        .expect("a LAST_BRANCH blob");
    assert_eq!(name, "cpu1");
    let s = LbrSample::decode(&payload).unwrap();
    assert_eq!(
        (s.header.cpu, s.header.num_branches, s.header.event_time),
        (1, 3, t + 50)
    );
    let b: Vec<_> = s
        .branches()
        .map(|b| (b.from, b.to, b.cycles(), b.mispredicted()))
        .collect();
    assert_eq!(
        b,
        vec![
            (0x10, 0x20, 9, true),
            (0x30, 0x40, 0, false),
            (0x50, 0x60, 65_535, false)
        ]
    );
}

// === the real kernel ===

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

fn needs_root() -> bool {
    let perms = PerfPermissions::read();
    if perms.root || perms.perfmon {
        return true;
    }
    skip(Requirement::Perf, "needs root or CAP_PERFMON");
    false
}

/// "A context switch record and an instrumented event written around the same moment by the
/// same thread order correctly": a thread reads the TSC (`clock::ticks()`, what an instrumented
/// event records), blocks in a pipe read, and reads the TSC again once woken. Its blocked
/// switch-out must lie after the first read and before the waker's own TSC read taken just
/// before it wrote, and its switch-in after that and before the second read.
#[test]
fn switch_records_order_correctly_against_tsc_reads_of_the_same_thread() {
    if !needs_root() {
        return;
    }
    let config = KernelProviderConfig {
        capture: CaptureConfig {
            poll_interval: Duration::from_millis(10),
            ..CaptureConfig::system_wide()
        },
        trace: KernelTraceConfig::kernel(),
    };
    let provider = KernelProvider::start(config, RecordWriter::with_magic()).unwrap();
    const ROUNDS: usize = 8;
    let (r, w): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    let reader = std::thread::Builder::new()
        .name("fxt-order-rd".into())
        .spawn(move || {
            let mut marks = Vec::new();
            for _ in 0..ROUNDS {
                let before = fxtrace::clock::ticks();
                let mut b = [0u8; 1];
                assert_eq!(nix::unistd::read(r.as_fd(), &mut b).unwrap(), 1);
                let after = fxtrace::clock::ticks();
                marks.push((before, after));
            }
            (gettid(), marks)
        })
        .unwrap();
    let writer = std::thread::spawn(move || {
        let mut wakes = Vec::new();
        for _ in 0..ROUNDS {
            std::thread::sleep(Duration::from_millis(10));
            wakes.push(fxtrace::clock::ticks());
            assert_eq!(nix::unistd::write(&w, &[1u8]).unwrap(), 1);
        }
        wakes
    });
    let (tid, marks) = reader.join().unwrap();
    let wakes = writer.join().unwrap();
    let outcome = provider.stop().unwrap();
    assert_eq!(outcome.capture.lost_records, 0, "nothing lost");
    let bytes = outcome.sink.to_bytes();
    let records = decode(&bytes);
    let mine: Vec<(u64, bool, u8)> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::ContextSwitch {
                time,
                outgoing,
                outgoing_state,
                ..
            } if outgoing.tid == u64::from(tid) => Some((time.ticks, true, *outgoing_state)),
            DecodedRecord::ContextSwitch { time, incoming, .. }
                if incoming.tid == u64::from(tid) =>
            {
                Some((time.ticks, false, 0))
            }
            _ => None,
        })
        .collect();
    assert!(
        !mine.is_empty(),
        "the reader thread's switches are in the trace"
    );
    // Switch-outs are required in every round. Switch-ins are checked where present: some
    // kernels emit no sched_switch at all when a CPU leaves idle (this machine's CPU 1: ftrace
    // and perf record show the same gap), and a reader woken after 10 ms of sleep is usually
    // switched in from idle.
    for (round, (&(before, after), &wake)) in marks.iter().zip(&wakes).enumerate() {
        let outs: Vec<u64> = mine
            .iter()
            .filter(|&&(t, is_out, state)| is_out && state == 3 && t > before && t <= after)
            .map(|&(t, _, _)| t)
            .collect();
        assert!(
            !outs.is_empty(),
            "round {round}: no blocked switch-out in [{before}, {after}]: {mine:?}"
        );
        for &out in &outs {
            assert!(
                out < wake,
                "round {round}: blocked at {out}, after the writer's tick {wake}"
            );
        }
        let out = outs[0];
        if let Some(&(back_in, _, _)) = mine
            .iter()
            .find(|&&(t, is_out, _)| !is_out && t > out && t <= after)
        {
            assert!(
                back_in > wake,
                "round {round}: switched in at {back_in}, before the wake {wake}"
            );
        }
    }
    let names = kernel_objects(&records);
    assert!(
        names
            .iter()
            .any(|(t, koid, name, process)| *t == ObjectType::THREAD
                && *koid == u64::from(tid)
                && name == "fxt-order-rd"
                && *process == Some(u64::from(std::process::id()))),
        "the reader is named, with its process"
    );
}

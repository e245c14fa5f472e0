//! Every thread of a system-wide recording lands under its real process (issue #7): a
//! recording around a workload that creates and ends many short-lived processes and threads
//! has no thread other than the idle task (tid 0) attributed to process 0, in any of the three
//! places a reader takes a thread's process from: Thread records, inline thread refs of
//! context switches, and the `"process"` argument of a thread's Kernel Object record (the only
//! one Perfetto uses). Needs root ("skipped: needs root" otherwise).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use fxtrace::capture::fxt::UNKNOWN_PROCESS_KOID;
use fxtrace::capture::{PerfPermissions, SwitchSource, TracefsChoice};
use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::{DecodedRecord, DecodedValue, Decoder, ObjectType, RecordWriter};
use fxtrace_tools::manager::kernel::{KernelProvider, KernelProviderConfig};

/// Where each thread (tid != 0) of the kernel section got its process from, by tid.
#[derive(Debug, Default)]
struct Attribution {
    /// Threads with a Thread record, an inline ref or a Kernel Object saying process 0.
    in_process_zero: BTreeSet<u64>,
    /// Threads written with the documented unknown-process marker.
    marked_unknown: BTreeSet<u64>,
    /// Threads seen in context switches.
    switched: BTreeSet<u64>,
    /// Thread Kernel Object records without a `"process"` argument, by tid.
    named_without_process: BTreeSet<u64>,
    /// Thread names with their process: (name, tid, process).
    names: Vec<(String, u64, u64)>,
}

impl Attribution {
    /// Switched threads with no thread Kernel Object record at all: Perfetto takes a thread's
    /// process only from that record, so these would land in its process 0 too.
    fn unnamed(&self) -> BTreeSet<u64> {
        let named: BTreeSet<u64> = self.names.iter().map(|n| n.1).collect();
        self.switched
            .difference(&named)
            .copied()
            .filter(|t| !self.named_without_process.contains(t))
            .collect()
    }
}

fn attribution(bytes: &[u8]) -> Attribution {
    let mut a = Attribution::default();
    let note = |a: &mut Attribution, pid: u64, tid: u64| {
        if tid == 0 {
            return;
        }
        if pid == 0 {
            a.in_process_zero.insert(tid);
        } else if pid == u64::from(UNKNOWN_PROCESS_KOID) {
            a.marked_unknown.insert(tid);
        }
    };
    for d in Decoder::new(bytes) {
        let d = d.expect("the archive decodes");
        if d.provider != Some(1) {
            continue;
        }
        match &d.record {
            DecodedRecord::Thread { thread, .. } => note(&mut a, thread.pid, thread.tid),
            DecodedRecord::ContextSwitch {
                outgoing, incoming, ..
            } => {
                for t in [outgoing, incoming] {
                    note(&mut a, t.pid, t.tid);
                    if t.tid != 0 {
                        a.switched.insert(t.tid);
                    }
                }
            }
            DecodedRecord::KernelObject {
                koid,
                object_type,
                args,
                name,
            } if *object_type == ObjectType::THREAD => {
                match args.iter().find(|arg| arg.name == "process") {
                    Some(arg) => match arg.value {
                        DecodedValue::Koid(pid) => {
                            note(&mut a, pid, *koid);
                            a.names.push((name.to_string(), *koid, pid));
                        }
                        ref other => panic!("thread {koid}: process argument {other:?}"),
                    },
                    None => {
                        a.named_without_process.insert(*koid);
                    }
                }
            }
            _ => {}
        }
    }
    a
}

/// Short-lived processes (a shell loop of `/bin/true`, and shells that start threads of
/// their own through a pipeline), and short-lived threads of this process.
fn workload() -> (u32, u32) {
    let shells = Command::new("sh")
        .args([
            "-c",
            "for i in $(seq 150); do /bin/true; done; \
             for i in $(seq 30); do (echo x | cat | cat >/dev/null) & done; wait",
        ])
        .spawn()
        .expect("sh runs");
    let mut threads = 0;
    for round in 0..20 {
        let handles: Vec<_> = (0..10)
            .map(|i: u64| {
                std::thread::Builder::new()
                    .name(format!("pidmap-{round}-{i}"))
                    .spawn(move || (0..1000u64).fold(i, |a, b| a.wrapping_mul(31) ^ b))
                    .expect("thread starts")
            })
            .collect();
        for h in handles {
            std::hint::black_box(h.join().expect("thread ends"));
            threads += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = shells.wait_with_output().expect("sh ends").status;
    assert!(status.success());
    (150 + 30 * 3, threads)
}

#[test]
fn no_thread_lands_in_process_zero() {
    let perms = PerfPermissions::read();
    if !(perms.root || perms.perfmon) {
        skip(Requirement::Perf, "needs root or CAP_PERFMON");
        return;
    }
    let provider = match KernelProvider::start(
        KernelProviderConfig::system_wide(None),
        RecordWriter::with_magic(),
    ) {
        Ok(p) => p,
        Err(e) => {
            skip(
                Requirement::Perf,
                format!("system-wide capture unavailable: {e}"),
            );
            return;
        }
    };
    let (processes, threads) = workload();
    let summary = provider.stop().unwrap();
    let a = attribution(&summary.sink.to_bytes());
    let by_count: BTreeMap<&str, usize> = [
        ("switched threads", a.switched.len()),
        ("in process 0", a.in_process_zero.len()),
        ("marked unknown", a.marked_unknown.len()),
        ("named without process", a.named_without_process.len()),
    ]
    .into_iter()
    .collect();
    println!(
        "pidmap: workload {processes} processes, {threads} threads; {by_count:?}; \
         in process 0: {:?}; capture summary: {} unknown, {} events deferred, {} tasks scanned \
         ({} scan failures)",
        a.in_process_zero,
        summary.capture.unknown_process_threads,
        summary.capture.deferred_events,
        summary.capture.proc_scan_threads,
        summary.capture.proc_scan_failures
    );
    assert!(
        a.switched.len() > threads as usize / 2,
        "the workload's threads were switched"
    );
    assert_eq!(a.in_process_zero, BTreeSet::new(), "threads in process 0");
    // Not only some process: the right one. Our short-lived threads are ours; each `true` is
    // a single-threaded process of its own.
    let pid = u64::from(std::process::id());
    let ours: Vec<_> = a
        .names
        .iter()
        .filter(|n| n.0.starts_with("pidmap-"))
        .collect();
    assert!(ours.len() > threads as usize / 2, "{} of ours", ours.len());
    assert!(ours.iter().all(|n| n.2 == pid), "{ours:?}");
    let trues: Vec<_> = a.names.iter().filter(|n| n.0 == "true").collect();
    assert!(!trues.is_empty());
    assert!(trues.iter().all(|n| n.1 == n.2), "{trues:?}");
    assert_eq!(
        a.named_without_process,
        BTreeSet::new(),
        "thread names without a process (Perfetto puts them in process 0)"
    );
    assert_eq!(
        a.unnamed(),
        BTreeSet::new(),
        "switched threads without a name record"
    );
    // The last resort is counted, never silent: what the trace marks is what the summary says.
    assert_eq!(
        a.marked_unknown.len() as u64,
        summary.capture.unknown_process_threads
    );
    assert_eq!(
        summary.capture.unknown_process_threads, 0,
        "every thread's process was learnt: {:?}",
        a.marked_unknown
    );
}

/// The fallback source (`PERF_RECORD_SWITCH_CPU_WIDE`, no tracepoint): both pids come with each
/// record, names from COMM records and `/proc`.
#[test]
fn no_thread_lands_in_process_zero_with_cpu_wide_switch_records() {
    let perms = PerfPermissions::read();
    if !(perms.root || perms.perfmon) {
        skip(Requirement::Perf, "needs root or CAP_PERFMON");
        return;
    }
    let mut config = KernelProviderConfig::system_wide(None);
    config.capture.tracefs = TracefsChoice::Skip;
    let provider = match KernelProvider::start(config, RecordWriter::with_magic()) {
        Ok(p) => p,
        Err(e) => {
            skip(
                Requirement::Perf,
                format!("system-wide capture unavailable: {e}"),
            );
            return;
        }
    };
    assert_eq!(
        provider.report().switch_source,
        Some(SwitchSource::CpuWideSwitchRecords)
    );
    let (_, threads) = workload();
    let outcome = provider.stop().unwrap();
    let a = attribution(&outcome.sink.to_bytes());
    println!(
        "pidmap (cpu-wide): {} switched threads, {} in process 0, {} marked unknown, {} named \
         without process; {} events deferred, {} unknown",
        a.switched.len(),
        a.in_process_zero.len(),
        a.marked_unknown.len(),
        a.named_without_process.len(),
        outcome.capture.deferred_events,
        outcome.capture.unknown_process_threads
    );
    assert!(a.switched.len() > threads as usize / 2);
    // A reaped task switched back in is reported with tid -1 (machines with process churn):
    // an unknown side, never a thread 0xffffffff.
    assert!(!a.switched.contains(&u64::from(u32::MAX)), "thread -1");
    assert_eq!(a.in_process_zero, BTreeSet::new(), "threads in process 0");
    assert_eq!(a.named_without_process, BTreeSet::new());
    assert_eq!(
        a.unnamed(),
        BTreeSet::new(),
        "switched threads without a name record"
    );
    assert_eq!(
        a.marked_unknown.len() as u64,
        outcome.trace.unknown_process_threads
    );
    assert_eq!(outcome.capture.unknown_process_threads, 0);
}

//! The system-wide capture pipeline's cost per context switch, without a kernel (issue 11, "the
//! capture path"): `sched_switch` samples written into two in-memory perf rings (`FakeSys`, the
//! capture tests' fake kernel) go through the real capture thread (ring reader, record
//! decoding, per-CPU merge, thread announcements, delivery) and the FXT conversion
//! (`KernelTraceWriter` into an `FxtStreamSink` over `io::sink()`).
//!
//! Instruction counts, which do not depend on the machine's load: run the binary under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*capture*worker*run*'`
//! (the capture thread only, not the main thread playing the kernel) with two values of
//! `FXTRACE_BENCH_CALLS` and divide the difference of the totals by the difference of the
//! switches. Without valgrind it prints the wall time per switch (noisy; for orientation).
//!
//! `cargo bench -p fxtrace-benches --features capture --bench capture` (default 200 000
//! switches); `scripts/capture-instructions.sh` for the instruction count. With
//! `FXTRACE_BENCH_WAKEUPS=1`, each switch comes with a `sched_waking` sample of the thread it
//! brings in (woken by the one it takes off), in rings of their own, as
//! `fxtrace record -a` captures them: the cost per switch and wake-up.
//!
//! `FXTRACE_BENCH_PROCESS=1`: a process capture's switches instead (`--preload`): each switch
//! a `PERF_RECORD_SWITCH` out record and an in record, each naming its event
//! (`PERF_SAMPLE_IDENTIFIER`). With `FXTRACE_BENCH_LATE=1` a thread appears while the events
//! are opened, so the rings drop the copies a second event of a thread writes (`TwinFilter`,
//! `capture::duplicates`): what that check costs on every record (the switching threads
//! themselves have one event each).

#[path = "../tests/fake_perf/mod.rs"]
mod fake_perf;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fxtrace::capture::records::{MISC_SWITCH_OUT, RECORD_SAMPLE, RECORD_SWITCH};
use fxtrace::capture::{
    Capture, CaptureConfig, FakeSys, FxtStreamSink, KernelTraceConfig, KernelTraceWriter,
    PerfEventKind, RecordBytes,
};

use fake_perf::{
    config, proc_thread, proc_tree, root_perms, switch_sample, tracefs, waking_sample,
};

fn main() {
    let switches: u64 = std::env::var("FXTRACE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let flag = |name| std::env::var(name).is_ok_and(|v| v == "1");
    let wakeups = flag("FXTRACE_BENCH_WAKEUPS");
    let process = flag("FXTRACE_BENCH_PROCESS");
    let tfs = tempfile::tempdir().expect("tempdir");
    let proc = tempfile::tempdir().expect("tempdir");
    tracefs(tfs.path());
    proc_tree(proc.path(), &[10, 11, 12]);
    let sys = FakeSys::new();
    // 1 TSC tick per perf nanosecond, from 0.
    sys.set_clock(0, 1 << 31, 31);
    if flag("FXTRACE_BENCH_LATE") {
        // Thread 13 appears once thread 10's switch events are open.
        let dir = proc.path().to_owned();
        sys.fail_when(move |attr, pid, cpu| {
            if attr.kind() == PerfEventKind::ProcessSwitches && (pid, cpu) == (10, 1) {
                proc_thread(&dir, 13);
            }
            None
        });
    }
    let target = if process {
        CaptureConfig {
            mmaps: false,
            ..CaptureConfig::process(10)
        }
    } else {
        CaptureConfig::system_wide()
    };
    let cfg = CaptureConfig {
        ring_pages: 64,
        poll_interval: Duration::from_millis(1),
        wakeups: wakeups && !process,
        ..config(target, tfs.path(), proc.path())
    };
    let writer = KernelTraceWriter::new(
        FxtStreamSink::new(std::io::sink()),
        KernelTraceConfig::kernel(),
    )
    .expect("kernel writer");
    let writer = Arc::new(Mutex::new(Some(writer)));
    let sink_writer = writer.clone();
    let capture = Capture::start_with(sys.clone(), root_perms(), cfg, move |event| {
        if let Some(w) = sink_writer.lock().expect("writer").as_mut() {
            let _ = w.handle(&event);
        }
    })
    .expect("capture on the fake perf");
    let kind = if process {
        PerfEventKind::ProcessSwitches
    } else {
        PerfEventKind::SchedSwitchTracepoint
    };
    let rings = [0, 1].map(|cpu| sys.ring(kind, cpu).expect("switch ring"));
    let id = fxtrace::capture::FIRST_EVENT_ID;
    let waking_rings = wakeups.then(|| {
        [0, 1].map(|cpu| {
            sys.ring(PerfEventKind::SchedWakingTracepoint, cpu)
                .expect("waking ring")
        })
    });
    // Precomputed samples: threads 10, 11 and 12 of process 10 take turns on two CPUs, in
    // time order across the rings (as the kernel would write them).
    let names = ["server", "worker", "helper"];
    let samples: Vec<(usize, Vec<u8>, Vec<u8>)> = (0..switches)
        .map(|i| {
            let cpu = (i % 2) as usize;
            let (prev, next) = ((i % 3) as usize, ((i + 1) % 3) as usize);
            let time = 1_000_000 + i * 100;
            if process {
                // A process capture's switch: the out record of one thread, the in record of
                // the next (in the `wake` slot), each naming its event.
                let record = |tid, time| {
                    RecordBytes::new()
                        .sample_id_of(10, tid, time, cpu as u32, id)
                        .build()
                };
                let out = record(10 + prev as u32, time);
                return (cpu, out, record(10 + next as u32, time + 1));
            }
            let sample = switch_sample(
                time,
                cpu as u32,
                (names[prev], 10 + prev as u32, 0x1),
                (names[next], 10 + next as u32),
            );
            let wake = waking_sample(
                time - 50,
                cpu as u32,
                (10, 10 + prev as u32),
                (names[next], 10 + next as u32),
                cpu as u32,
            );
            (cpu, sample, wake)
        })
        .collect();
    // A full ring waits for the capture thread, as the kernel would (it would drop).
    let write = |ring: &fxtrace::capture::FakeRing, (kind, misc): (u32, u16), record: &[u8]| {
        while !ring.write_record(kind, misc, record) {
            ring.wake();
            std::thread::yield_now();
        }
    };
    let started = Instant::now();
    for (cpu, sample, wake) in &samples {
        if process {
            write(&rings[*cpu], (RECORD_SWITCH, MISC_SWITCH_OUT), sample);
            write(&rings[*cpu], (RECORD_SWITCH, 0), wake);
            continue;
        }
        if let Some(w) = &waking_rings {
            write(&w[*cpu], (RECORD_SAMPLE, 0), wake);
        }
        write(&rings[*cpu], (RECORD_SAMPLE, 0), sample);
    }
    rings.iter().for_each(|r| r.wake());
    waking_rings.iter().flatten().for_each(|r| r.wake());
    let stats = capture.stop().expect("capture stop");
    let elapsed = started.elapsed();
    let (_, fxt) = writer
        .lock()
        .expect("writer")
        .take()
        .expect("writer")
        .finish()
        .expect("finish");
    // A process capture's switch is two records, each a switch of its own.
    let per_switch = if process { 2 } else { 1 };
    assert_eq!(fxt.context_switches, per_switch * switches, "{stats:?}");
    assert_eq!(fxt.wakeups, if wakeups { switches } else { 0 }, "{stats:?}");
    println!(
        "capture: {switches} switches through the pipeline in {elapsed:?} ({:.0} ns per switch, \
         wall time, noisy)",
        elapsed.as_nanos() as f64 / switches as f64
    );
}

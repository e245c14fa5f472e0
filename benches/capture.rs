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

#[path = "../tests/fake_perf/mod.rs"]
mod fake_perf;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fxtrace::capture::records::RECORD_SAMPLE;
use fxtrace::capture::{
    Capture, CaptureConfig, FakeSys, FxtStreamSink, KernelTraceConfig, KernelTraceWriter,
    PerfEventKind,
};

use fake_perf::{config, proc_tree, root_perms, switch_sample, tracefs, waking_sample};

fn main() {
    let switches: u64 = std::env::var("FXTRACE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let wakeups = std::env::var("FXTRACE_BENCH_WAKEUPS").is_ok_and(|v| v == "1");
    let tfs = tempfile::tempdir().expect("tempdir");
    let proc = tempfile::tempdir().expect("tempdir");
    tracefs(tfs.path());
    proc_tree(proc.path(), &[10, 11, 12]);
    let sys = FakeSys::new();
    // 1 TSC tick per perf nanosecond, from 0.
    sys.set_clock(0, 1 << 31, 31);
    let cfg = CaptureConfig {
        ring_pages: 64,
        poll_interval: Duration::from_millis(1),
        wakeups,
        ..config(CaptureConfig::system_wide(), tfs.path(), proc.path())
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
    let rings = [
        sys.ring(PerfEventKind::SchedSwitchTracepoint, 0)
            .expect("cpu 0 ring"),
        sys.ring(PerfEventKind::SchedSwitchTracepoint, 1)
            .expect("cpu 1 ring"),
    ];
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
    let write = |ring: &fxtrace::capture::FakeRing, record: &[u8]| {
        while !ring.write_record(RECORD_SAMPLE, 0, record) {
            ring.wake();
            std::thread::yield_now();
        }
    };
    let started = Instant::now();
    for (cpu, sample, wake) in &samples {
        if let Some(w) = &waking_rings {
            write(&w[*cpu], wake);
        }
        write(&rings[*cpu], sample);
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
    assert_eq!(fxt.context_switches, switches, "{stats:?}");
    assert_eq!(fxt.wakeups, if wakeups { switches } else { 0 }, "{stats:?}");
    println!(
        "capture: {switches} switches through the pipeline in {elapsed:?} ({:.0} ns per switch, \
         wall time, noisy)",
        elapsed.as_nanos() as f64 / switches as f64
    );
}

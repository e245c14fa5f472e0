//! A per-process capture whose descriptors the traced program closes (a daemon closing every
//! descriptor it did not open, then opening files under the same numbers), on the in-memory
//! perf (`FakeSys`). One test in its own binary: it closes every descriptor the capture opened,
//! which must not be another test's.

use fxtrace::capture::records::RECORD_SAMPLE;
use fxtrace::capture::{
    Capture, CaptureConfig, CaptureError, CaptureEvent, FakeRing, FakeSys, PerfEventKind,
};

#[path = "daemon/mod.rs"]
mod daemon;
#[path = "fake_perf/mod.rs"]
mod fake_perf;
use daemon::{assert_intact, open_fds, take_over};
use fake_perf::*;

#[test]
fn a_program_closing_the_capture_descriptors_ends_it_cleanly_and_keeps_its_files() {
    use std::os::fd::IntoRawFd;

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
    let cpu0: FakeRing = sys.ring(PerfEventKind::SchedSwitchTracepoint, 0).unwrap();
    assert!(cpu0.write_record(
        RECORD_SAMPLE,
        0,
        &switch_sample(t, 0, ("server", 10, 1), ("worker", 11)),
    ));
    cpu0.wake();
    // A daemon closes every descriptor it did not open and opens files under the numbers.
    let mut files = take_over(&new);
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
        .find(|e| e.attr.kind() == PerfEventKind::SchedSwitchTracepoint && e.cpu == 0)
        .unwrap();
    assert!(
        cpu0_event.enabled,
        "DISABLE sent to a number the program took"
    );
    // The program's files are open and intact.
    assert_intact(&mut files);
    // The fake perf (playing the kernel) still owns the duplicates it made, and closes them
    // when dropped: leave those numbers to it.
    for (_, f) in files {
        let _ = f.into_raw_fd();
    }
}

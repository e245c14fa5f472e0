//! Capture against the real kernel: a two-thread pipe ping-pong is captured per process and
//! system-wide (tracepoint and `SWITCH_CPU_WIDE` fallback) with the right tids, states and
//! names; perf timestamps converted to TSC land between `rdtscp` reads around the switch; LBR on
//! a PMU-less machine is a clean `Unsupported` outcome. Where the kernel does not allow it, a
//! test skips (`fxtrace::test_support::skip`: one line on stderr, a failure when
//! `FXTRACE_TEST_REQUIRE` lists `perf`).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fxtrace::capture::tracefs;
use fxtrace::capture::{
    BranchSampling, Capture, CaptureConfig, CaptureError, CaptureEvent, LinuxThreadState,
    PerfPermissions, PerfTimeConverter, SwitchEvent, SwitchSides, SwitchSource, TracefsChoice,
};
use fxtrace::test_support::{skip, Requirement};

/// Kernel tests run one at a time: they share the CPUs and the tracefs mount.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// This thread's nice value.
fn nice() -> i32 {
    // getpriority returns -1 both as a nice value and as an error: errno tells them apart.
    // SAFETY: __errno_location returns this thread's errno; getpriority has no preconditions.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        assert_eq!(*libc::__errno_location(), 0, "getpriority failed");
        nice
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

fn rdtscp() -> u64 {
    let mut aux = 0;
    // SAFETY: rdtscp reads the TSC into registers and writes `aux`, a live local.
    unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
}

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe().unwrap()
}

fn read1(fd: &OwnedFd) {
    let mut b = [0u8; 1];
    assert_eq!(nix::unistd::read(fd.as_fd(), &mut b).unwrap(), 1);
}

fn write1(fd: &OwnedFd) {
    assert_eq!(nix::unistd::write(fd, &[1u8]).unwrap(), 1);
}

/// Two threads, "fxt-ping" and "fxt-pong", bouncing one byte `rounds` times through two pipes.
/// Returns their tids.
fn ping_pong(rounds: usize) -> (u32, u32) {
    let (r1, w1) = pipe();
    let (r2, w2) = pipe();
    let pong = std::thread::Builder::new()
        .name("fxt-pong".into())
        .spawn(move || {
            for _ in 0..rounds {
                read1(&r1);
                write1(&w2);
            }
            gettid()
        })
        .unwrap();
    let ping = std::thread::Builder::new()
        .name("fxt-ping".into())
        .spawn(move || {
            for _ in 0..rounds {
                write1(&w1);
                read1(&r2);
            }
            gettid()
        })
        .unwrap();
    let tids = (ping.join().unwrap(), pong.join().unwrap());
    // `join` returns when the kernel clears the thread's tid (futex wake in `exit`), before
    // the thread's last `schedule()`: its exit switch comes a little later. Let it reach the
    // rings before the caller stops the capture.
    std::thread::sleep(std::time::Duration::from_millis(50));
    tids
}

type Events = Arc<Mutex<Vec<CaptureEvent>>>;

fn start(config: CaptureConfig) -> Option<(Capture, Events)> {
    let events: Events = Arc::default();
    let sink = events.clone();
    match Capture::start(config, move |e| sink.lock().unwrap().push(e)) {
        Ok(c) => Some((c, events)),
        Err(CaptureError::Open { source, remedy, .. })
            if matches!(
                source.raw_os_error(),
                Some(libc::EACCES) | Some(libc::EPERM)
            ) =>
        {
            skip(
                Requirement::Perf,
                format!(
                    "perf_event_open not permitted: {}",
                    remedy.unwrap_or_default()
                ),
            );
            None
        }
        Err(e) => panic!("capture failed to start: {e}"),
    }
}

fn switches(events: &[CaptureEvent]) -> Vec<SwitchEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::ContextSwitch(cs) => Some(*cs),
            _ => None,
        })
        .collect()
}

/// The last name fxtrace gave `tid` (announcement or COMM).
fn last_name(events: &[CaptureEvent], tid: u32) -> Option<String> {
    events.iter().rev().find_map(|e| match e {
        CaptureEvent::Comm(c) if c.tid == tid => Some(c.name.clone()),
        CaptureEvent::Thread(t) if t.tid == tid => t.name.clone(),
        _ => None,
    })
}

fn require_root() -> bool {
    let perms = PerfPermissions::read();
    if !perms.root && !perms.perfmon {
        skip(
            Requirement::Perf,
            format!("needs root or CAP_PERFMON (paranoid {:?})", perms.paranoid),
        );
        return false;
    }
    true
}

/// A ping-pong thread leaves the CPU either blocked in `read` (S → blocked) or preempted by the
/// thread it just woke or by other load (R+ → running, what Perfetto shows as runnable);
/// nothing else. Returns how many of `outs` blocked.
fn assert_states(outs: &[&SwitchEvent]) -> usize {
    let blocked = outs
        .iter()
        .filter(|c| c.prev_state == LinuxThreadState::Blocked)
        .count();
    let preempted = outs
        .iter()
        .filter(|c| c.prev_state == LinuxThreadState::Running)
        .count();
    println!("  blocked {blocked}, preempted {preempted}");
    assert_eq!(blocked + preempted, outs.len(), "only blocked or runnable");
    blocked
}

/// Each round one of the two threads waits for the other in `read`. Which one depends on the
/// placement: on two CPUs both block; on one, the thread woken preempts the writer (R+) and
/// blocks in its next read, so one thread can show almost no blocked switches (seen in CI:
/// 127 of 500) while the pair still blocks about once a round.
fn assert_pair_blocks(blocked: usize, rounds: usize) {
    assert!(
        blocked >= rounds / 2,
        "pipe reads block: {blocked} blocked switch-outs in {rounds} rounds of two threads"
    );
}

fn assert_in_time_order(events: &[CaptureEvent]) {
    let times: Vec<u64> = events.iter().filter_map(CaptureEvent::time).collect();
    let late = times.windows(2).filter(|w| w[0] > w[1]).count();
    assert_eq!(late, 0, "events out of timestamp order");
}

#[test]
fn per_process_switches_of_a_ping_pong() {
    let _g = serial();
    let pid = std::process::id();
    let Some((capture, events)) = start(CaptureConfig::process(pid)) else {
        return;
    };
    assert_eq!(
        capture.report().switch_source,
        Some(SwitchSource::ProcessSwitchRecords)
    );
    let rounds = 300;
    let (ping, pong) = ping_pong(rounds);
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    assert_in_time_order(&events);
    let cs = switches(&events);
    let mut blocked = 0;
    for tid in [ping, pong] {
        let outs: Vec<_> = cs
            .iter()
            .filter(|c| c.sides == SwitchSides::OutgoingOnly && c.prev_tid == tid)
            .collect();
        let ins = cs
            .iter()
            .filter(|c| c.sides == SwitchSides::IncomingOnly && c.next_tid == tid)
            .count();
        println!("tid {tid}: {} switch-outs, {ins} switch-ins", outs.len());
        assert!(
            outs.len() >= rounds / 2,
            "tid {tid}: {} switch-outs",
            outs.len()
        );
        assert!(ins >= rounds / 2, "tid {tid}: {ins} switch-ins");
        assert!(outs.iter().all(|c| c.prev_pid == Some(pid)));
        blocked += assert_states(&outs);
    }
    assert_pair_blocks(blocked, rounds);
    assert_eq!(last_name(&events, ping).as_deref(), Some("fxt-ping"));
    assert_eq!(last_name(&events, pong).as_deref(), Some("fxt-pong"));
    assert!(events
        .iter()
        .any(|e| matches!(e, CaptureEvent::Fork(f) if f.tid == ping && f.pid == pid)));
    assert!(events
        .iter()
        .any(|e| matches!(e, CaptureEvent::Exit(x) if x.tid == ping)));
    assert_eq!(stats.lost_records, 0);
    assert_eq!(stats.parse_errors, 0);
    println!("stats: {stats:?}");
}

#[test]
fn switch_timestamps_land_between_rdtscp_reads() {
    let _g = serial();
    let Some((capture, events)) = start(CaptureConfig::process(std::process::id())) else {
        return;
    };
    match capture.report().clock {
        PerfTimeConverter::MmapPage(c) => println!(
            "clock: mmap page time_zero {:#x} time_mult {} time_shift {}",
            c.time_zero(),
            c.time_mult(),
            c.time_shift()
        ),
        PerfTimeConverter::Measured(m) => {
            println!(
                "clock: no cap_user_time_zero here; measured {} ticks/ns",
                m.ticks_per_ns()
            )
        }
    }
    let (r, w) = pipe();
    let waker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        write1(&w);
    });
    let tid = gettid();
    let before = rdtscp();
    read1(&r); // blocks: switch out, then in when the waker writes
    let after = rdtscp();
    waker.join().unwrap();
    capture.stop().unwrap();
    let cs = switches(&events.lock().unwrap());
    let out = cs
        .iter()
        .find(|c| c.sides == SwitchSides::OutgoingOnly && c.prev_tid == tid && c.time >= before)
        .expect("switch-out of the blocked reader");
    let back = cs
        .iter()
        .find(|c| c.sides == SwitchSides::IncomingOnly && c.next_tid == tid && c.time > out.time)
        .expect("switch-in of the woken reader");
    println!(
        "before {before} out +{} in +{} after +{} (ticks)",
        out.time - before,
        back.time - before,
        after - before
    );
    assert!(before <= out.time && out.time <= back.time && back.time <= after);
    assert_eq!(out.prev_state, LinuxThreadState::Blocked);
}

#[test]
fn system_wide_sched_switch_sees_the_workload() {
    let _g = serial();
    if !require_root() {
        return;
    }
    let mounted_before = tracefs::locate().is_some();
    let config = CaptureConfig::system_wide();
    let Some((capture, events)) = start(config) else {
        return;
    };
    let report = capture.report().clone();
    assert_eq!(
        report.switch_source,
        Some(SwitchSource::SchedSwitchTracepoint),
        "unsupported: {:?}",
        report.unsupported
    );
    assert_eq!(
        tracefs::locate().is_some(),
        mounted_before,
        "a tracefs mount made for the open is released once the events exist"
    );
    let rounds = 500;
    let (ping, pong) = ping_pong(rounds);
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    assert_in_time_order(&events);
    let cs = switches(&events);
    let pid = std::process::id();
    let mut total_ins = 0;
    let mut exits = 0;
    let mut blocked = 0;
    for tid in [ping, pong] {
        let outs: Vec<_> = cs.iter().filter(|c| c.prev_tid == tid).collect();
        let ins = cs.iter().filter(|c| c.next_tid == tid).count();
        println!("tid {tid}: {} switched out, {ins} switched in", outs.len());
        // Every blocking read switches the thread out. Switch-ins are not all seen: this KVM
        // guest's kernel emits no sched_switch for some exits from idle (ftrace shows the same
        // gap; seen here: 501 out, 126 in), so only their presence is required.
        assert!(
            outs.len() >= rounds / 2,
            "tid {tid}: {} switch-outs, {ins} switch-ins",
            outs.len()
        );
        total_ins += ins;
        assert!(outs
            .iter()
            .all(|c| c.prev_pid == Some(pid) && c.sides == SwitchSides::Both));
        // The tracepoint reports the exit: the thread's last switch-out is X (autoreaped
        // thread) or Z, every earlier one blocked or preempted. (Before `ping_pong` waited
        // for the exits after `join`, the capture sometimes stopped before them: 1 run in
        // 6-12.) This guest's kernel also drops some sched_switch events (see below): when
        // the exit's is the one missing, the thread shows no X/Z and at most one switch-out
        // per round.
        let (last, earlier) = outs.split_last().unwrap();
        let exited = matches!(
            last.prev_state,
            LinuxThreadState::Dead | LinuxThreadState::Dying
        );
        if exited {
            exits += 1;
            blocked += assert_states(earlier);
        } else {
            assert!(
                outs.len() <= rounds,
                "tid {tid}: {} switch-outs and none of them the exit ({:?} last)",
                outs.len(),
                last.prev_state
            );
            println!("tid {tid}: the kernel reported no switch-out for the exit");
            blocked += assert_states(&outs);
        }
        // The kernel's prio of a normal task is 120 + its nice (inherited from the test run:
        // `nice -n 5 cargo test` gives 125).
        let prio = 120 + nice();
        assert!(
            outs.iter().all(|c| i32::from(c.prev_prio) == prio),
            "nice {} is prio {prio}",
            prio - 120
        );
    }
    assert_pair_blocks(blocked, rounds);
    assert!(total_ins > 0, "the workload threads are seen switching in");
    assert!(
        exits > 0,
        "neither thread's exit was reported (X or Z): the state mapping is wrong"
    );
    // Both directions between our two threads and the others are consistent per CPU: every
    // switch's next is the following switch's prev on that CPU, except after a switch to the
    // idle task: this guest kernel reports no sched_switch for some exits from idle (`perf
    // record -e sched:sched_switch -a` shows the same: on CPU 1, 133 switch-outs of the
    // workload and no switch-in).
    for cpu in &report.cpus {
        let on: Vec<_> = cs.iter().filter(|c| c.cpu == *cpu).collect();
        let chained = on
            .windows(2)
            .filter(|w| w[0].next_tid == w[1].prev_tid || w[0].next_tid == 0)
            .count();
        // The capture lost nothing (`lost_records` is 0 below); a break is a switch the
        // kernel did not report. Seen here: 1 or 2 in about 1000 per CPU, more under load.
        let breaks = on.len().saturating_sub(chained + 1);
        println!("cpu {cpu}: {chained} of {} chained", on.len());
        assert!(
            breaks <= 2 + on.len() / 100,
            "cpu {cpu}: {chained} of {} chained",
            on.len()
        );
    }
    assert_eq!(last_name(&events, ping).as_deref(), Some("fxt-ping"));
    assert_eq!(last_name(&events, pong).as_deref(), Some("fxt-pong"));
    let thread = events.iter().find_map(|e| match e {
        CaptureEvent::Thread(t) if t.tid == ping => Some(t.clone()),
        _ => None,
    });
    assert_eq!(thread.and_then(|t| t.pid), Some(pid));
    assert_eq!(
        stats.lost_records, 0,
        "default ring loses nothing on the ping-pong"
    );
    assert_eq!(stats.parse_errors, 0);
    println!("stats: {stats:?}");
}

#[test]
fn system_wide_cpu_wide_fallback_sees_the_workload() {
    let _g = serial();
    if !require_root() {
        return;
    }
    let config = CaptureConfig {
        tracefs: TracefsChoice::Skip,
        ..CaptureConfig::system_wide()
    };
    let Some((capture, events)) = start(config) else {
        return;
    };
    assert_eq!(
        capture.report().switch_source,
        Some(SwitchSource::CpuWideSwitchRecords)
    );
    let rounds = 300;
    let (ping, pong) = ping_pong(rounds);
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    assert_in_time_order(&events);
    let cs = switches(&events);
    let pid = std::process::id();
    let mut total_ins = 0;
    for tid in [ping, pong] {
        let outs: Vec<_> = cs.iter().filter(|c| c.prev_tid == tid).collect();
        let ins = cs.iter().filter(|c| c.next_tid == tid).count();
        println!("tid {tid}: {} switched out, {ins} switched in", outs.len());
        // Every blocking read switches the thread out. Switch-ins are not all seen: this KVM
        // guest's kernel emits no sched_switch for some exits from idle (ftrace shows the same
        // gap; seen here: 501 out, 126 in), so only their presence is required.
        assert!(
            outs.len() >= rounds / 2,
            "tid {tid}: {} switch-outs, {ins} switch-ins",
            outs.len()
        );
        total_ins += ins;
        assert!(outs.iter().all(|c| c.prev_pid == Some(pid)));
        assert!(cs
            .iter()
            .filter(|c| c.next_tid == tid)
            .all(|c| c.next_pid == Some(pid)));
    }
    assert!(total_ins > 0, "the workload threads are seen switching in");
    assert_eq!(stats.lost_records, 0);
}

#[test]
fn lbr_unsupported_is_reported_once_and_switches_go_on() {
    let _g = serial();
    if !require_root() {
        return;
    }
    let config = CaptureConfig {
        lbr: Some(BranchSampling::default()),
        ..CaptureConfig::system_wide()
    };
    let Some((capture, events)) = start(config) else {
        return;
    };
    let report = capture.report().clone();
    let (ping, _) = ping_pong(100);
    let burn = std::time::Instant::now();
    let mut x = 0u64;
    while burn.elapsed() < Duration::from_millis(50) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(std::hint::black_box(1));
    }
    std::hint::black_box(x);
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();
    assert!(
        switches(&events).iter().any(|c| c.prev_tid == ping),
        "switches still captured"
    );
    match report.lbr {
        None => {
            let lbr: Vec<_> = report
                .unsupported
                .iter()
                .filter(|u| u.what.contains("LBR"))
                .collect();
            assert_eq!(lbr.len(), 1);
            println!(
                "LBR unsupported here: errno {:?}: {}",
                lbr[0].errno, lbr[0].hint
            );
            assert!(matches!(
                lbr[0].errno,
                Some(libc::ENOENT)
                    | Some(libc::EOPNOTSUPP)
                    | Some(libc::EINVAL)
                    | Some(libc::ENODEV)
            ));
            let reported = events
                .iter()
                .filter(|e| matches!(e, CaptureEvent::Unsupported(u) if u.what.contains("LBR")))
                .count();
            assert_eq!(reported, 1, "reported once");
            assert!(
                matches!(events[0], CaptureEvent::Unsupported(_)),
                "before anything else"
            );
            assert_eq!(stats.branch_samples, 0);
        }
        Some(cfg) => {
            println!("LBR available here ({cfg:?}): checking samples decode");
            let samples: Vec<_> = events
                .iter()
                .filter_map(|e| match e {
                    CaptureEvent::Branch(b) => Some(b),
                    _ => None,
                })
                .collect();
            assert!(!samples.is_empty(), "LBR opened but no samples");
            assert!(samples.iter().any(|s| !s.entries.is_empty()));
            assert!(samples.iter().all(|s| s.entries.len() <= 64));
        }
    }
}

/// Voluntary plus involuntary context switches of thread `tid` of this process so far.
fn switch_outs(tid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    status
        .lines()
        .filter(|l| {
            l.starts_with("voluntary_ctxt_switches") || l.starts_with("nonvoluntary_ctxt_switches")
        })
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<u64>().ok())
        .sum()
}

/// A ring that fills while the sink is slow, right before the stop: the kernel writes no
/// LOST record after the stop, so the losses are counted from the events' own counts
/// (`PERF_FORMAT_LOST`): every switch-out of the workload is captured or counted lost.
#[test]
fn switches_lost_just_before_the_stop_are_counted() {
    let _s = serial();
    if !require_root() {
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    let block = Arc::new(AtomicBool::new(false));
    let blocked = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let outs: Arc<Mutex<Vec<u32>>> = Arc::default();
    let (b, bd, r, o) = (
        block.clone(),
        blocked.clone(),
        release.clone(),
        outs.clone(),
    );
    let config = CaptureConfig {
        ring_pages: 1,
        ..CaptureConfig::system_wide()
    };
    let capture = match Capture::start(config, move |event| {
        if let CaptureEvent::ContextSwitch(cs) = &event {
            o.lock().unwrap().push(cs.prev_tid);
        }
        // A sink that stalls once (a slow writer) until released.
        if b.load(Ordering::SeqCst) && !bd.swap(true, Ordering::SeqCst) {
            while !r.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }) {
        Ok(capture) => capture,
        Err(e) => {
            skip(
                Requirement::Perf,
                format!("system-wide capture unavailable: {e}"),
            );
            return;
        }
    };
    std::thread::sleep(Duration::from_millis(100));
    block.store(true, Ordering::SeqCst);
    while !blocked.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let me = gettid();
    let (to_pong, pong_rx) = std::sync::mpsc::sync_channel::<u32>(0);
    let (to_ping, ping_rx) = std::sync::mpsc::sync_channel::<u32>(0);
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let ponger = std::thread::spawn(move || {
        tid_tx.send(gettid()).unwrap();
        while let Ok(v) = pong_rx.recv() {
            if to_ping.send(v).is_err() {
                break;
            }
        }
    });
    let pong = tid_rx.recv().unwrap();
    let before = switch_outs(me) + switch_outs(pong);
    for i in 0..3000 {
        to_pong.send(i).unwrap();
        ping_rx.recv().unwrap();
    }
    let after = switch_outs(me) + switch_outs(pong);
    drop(to_pong);
    ponger.join().unwrap();
    // Stop while the sink is still stalled: the capture thread disables, then drains.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        release.store(true, Ordering::SeqCst);
    });
    let stats = capture.stop().unwrap();
    releaser.join().unwrap();
    let happened = after - before;
    let captured = outs
        .lock()
        .unwrap()
        .iter()
        .filter(|&&t| t == me || t == pong)
        .count() as u64;
    println!(
        "switch-outs of the two threads: {happened}; captured {captured}; lost {} ({} \
         counted at the stop)",
        stats.lost_records, stats.lost_unreported
    );
    assert!(
        captured + stats.lost_records + stats.lost_samples >= happened,
        "{} switch-outs vanished uncounted",
        happened - captured - stats.lost_records - stats.lost_samples
    );
}

/// What a [`RacingSys`] asks of the thread that makes the late threads.
enum Make {
    /// A thread that starts before its maker has an event of the kind (it inherits none).
    Uninherited,
    /// A thread that starts once its maker has the kind's events on every CPU (it inherits
    /// them, and is opened itself in the next listing: two events of the kind).
    Inherited,
}

/// The kernel, with a thread made at the worst moments of a process capture's opening: for
/// each kind of event, right after the maker thread's event on the last CPU is open, and once
/// before its first.
#[derive(Debug)]
struct RacingSys {
    maker: u32,
    last_cpu: i32,
    /// Taken once the capture runs, which ends the maker thread.
    request: Mutex<Option<std::sync::mpsc::Sender<Make>>>,
    made: Mutex<std::sync::mpsc::Receiver<u32>>,
    /// The kinds (and tracepoints) a thread was made for.
    done: Mutex<Vec<(fxtrace::capture::PerfEventKind, u64)>>,
    uninherited: std::sync::atomic::AtomicBool,
}

impl RacingSys {
    fn make(&self, what: Make) {
        let request = self.request.lock().unwrap();
        request.as_ref().unwrap().send(what).unwrap();
        // The thread exists before the opener lists the threads again.
        self.made.lock().unwrap().recv().unwrap();
    }
}

impl fxtrace::capture::Sys for RacingSys {
    fn perf_event_open(
        &self,
        attr: &fxtrace::capture::EventAttr,
        pid: i32,
        cpu: i32,
        group: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> std::io::Result<OwnedFd> {
        use std::sync::atomic::Ordering;
        let maker = pid == self.maker as i32;
        if maker && !self.uninherited.swap(true, Ordering::SeqCst) {
            self.make(Make::Uninherited);
        }
        let fd = fxtrace::capture::RealSys.perf_event_open(attr, pid, cpu, group)?;
        let key = (attr.kind(), attr.config());
        if maker && cpu == self.last_cpu && !self.done.lock().unwrap().contains(&key) {
            self.done.lock().unwrap().push(key);
            self.make(Make::Inherited);
        }
        Ok(fd)
    }

    fn ioctl(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        request: fxtrace::capture::PerfIoctl<'_>,
    ) -> std::io::Result<()> {
        fxtrace::capture::RealSys.ioctl(fd, request)
    }

    fn mmap(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        len: usize,
    ) -> std::io::Result<std::ptr::NonNull<u8>> {
        fxtrace::capture::RealSys.mmap(fd, len)
    }

    unsafe fn munmap(&self, addr: std::ptr::NonNull<u8>, len: usize) -> std::io::Result<()> {
        // SAFETY: the caller's guarantee, passed on: `addr`/`len` is a live mapping that
        // `mmap` above (the kernel's) returned.
        unsafe { fxtrace::capture::RealSys.munmap(addr, len) }
    }

    fn poll(&self, fds: &mut [libc::pollfd], timeout_ms: i32) -> std::io::Result<usize> {
        fxtrace::capture::RealSys.poll(fds, timeout_ms)
    }

    fn read(&self, fd: std::os::fd::BorrowedFd<'_>, buf: &mut [u8]) -> std::io::Result<usize> {
        fxtrace::capture::RealSys.read(fd, buf)
    }

    fn page_size(&self) -> usize {
        fxtrace::capture::RealSys.page_size()
    }

    fn guard_event(&self, fd: OwnedFd) -> std::io::Result<fxtrace::fd_guard::GuardedFd> {
        fxtrace::capture::RealSys.guard_event(fd)
    }
}

/// This thread's CPU time, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the call.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(ret, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Spins for `ms` milliseconds of this thread's CPU time; returns the thread's CPU time
/// since it started.
fn spin_cpu(ms: u64) -> u64 {
    let start = thread_cpu_ns();
    while thread_cpu_ns() - start < ms * 1_000_000 {
        std::hint::spin_loop();
    }
    thread_cpu_ns()
}

/// The threads of one late worker: (tid, CPU nanoseconds used) of it and of the child it
/// made after the start.
type Pair = [(u32, u64); 2];

/// A late thread's work once the capture runs (`gate` opens): it makes a child (which
/// inherits all its events), they bounce a byte `rounds` times (switches and wake-ups), then
/// spin (samples).
fn late_worker(gate: Arc<std::sync::RwLock<()>>, rounds: usize) -> Pair {
    drop(gate.read().unwrap());
    let (r1, w1) = pipe();
    let (r2, w2) = pipe();
    let child = std::thread::spawn(move || {
        for _ in 0..rounds {
            read1(&r1);
            write1(&w2);
        }
        (gettid(), spin_cpu(30))
    });
    for _ in 0..rounds {
        write1(&w1);
        read1(&r2);
    }
    let me = (gettid(), spin_cpu(30));
    [me, child.join().unwrap()]
}

/// A process that makes threads while a capture of it starts: a thread made once its maker's
/// events are open inherited them and gets its own in the next listing, two events of each
/// kind (switch records, wait points, wake-ups, CPU samples); the threads it makes later
/// inherit both. Every switch of theirs is recorded once (a thread's switches on a CPU
/// alternate out and in), every wake-up once, and they are sampled at the rate asked, not
/// twice it; none is missed, the thread made before its maker was followed included. The
/// copies are counted (`duplicates`). The moments are made, not hoped for ([`RacingSys`]).
#[test]
fn threads_made_while_a_process_capture_starts_are_recorded_once() {
    let _g = serial();
    if !require_root() {
        return;
    }
    use std::sync::mpsc::channel;
    let rounds = 200;
    // Held until the capture runs: the late threads wait for it.
    let gate = Arc::new(std::sync::RwLock::new(()));
    let closed = gate.write().unwrap();
    let workers: Arc<Mutex<Vec<std::thread::JoinHandle<Pair>>>> = Arc::default();
    let (request_tx, request_rx) = channel::<Make>();
    let (made_tx, made_rx) = channel::<u32>();
    let (maker_tid_tx, maker_tid_rx) = channel();
    let maker = {
        let (workers, gate) = (workers.clone(), gate.clone());
        std::thread::Builder::new()
            .name("fxt-maker".into())
            .spawn(move || {
                maker_tid_tx.send(gettid()).unwrap();
                while let Ok(what) = request_rx.recv() {
                    let gate = gate.clone();
                    let (tx, rx) = channel();
                    let name = match what {
                        Make::Uninherited => "fxt-uninherited",
                        Make::Inherited => "fxt-inherited",
                    };
                    let h = std::thread::Builder::new()
                        .name(name.into())
                        .spawn(move || {
                            tx.send(gettid()).unwrap();
                            late_worker(gate, rounds)
                        })
                        .unwrap();
                    let tid = rx.recv().unwrap();
                    workers.lock().unwrap().push(h);
                    made_tx.send(tid).unwrap();
                }
            })
            .unwrap()
    };
    let cpus = fxtrace::capture::procfs::online_cpus().unwrap();
    let sys = Arc::new(RacingSys {
        maker: maker_tid_rx.recv().unwrap(),
        last_cpu: *cpus.last().unwrap() as i32,
        request: Mutex::new(Some(request_tx)),
        made: Mutex::new(made_rx),
        done: Mutex::default(),
        uninherited: Default::default(),
    });
    let config = CaptureConfig {
        wakeups: true,
        wait_points: true,
        sample_hz: Some(999),
        ..CaptureConfig::process(std::process::id())
    };
    let events: Events = Arc::default();
    let sink = events.clone();
    let capture = Capture::start_with(sys.clone(), PerfPermissions::read(), config, move |e| {
        sink.lock().unwrap().push(e)
    })
    .unwrap();
    drop(closed);
    let report = capture.report().clone();
    if !(report.wakeups && report.wait_points && report.sampling.is_some()) {
        let why: Vec<String> = report
            .unsupported
            .iter()
            .map(|u| u.summary.clone())
            .collect();
        skip(
            Requirement::Perf,
            format!("wake-ups, wait points or samples unavailable: {why:?}"),
        );
        return;
    }
    println!("threads made for: {:?}", sys.done.lock().unwrap());
    sys.request.lock().unwrap().take();
    maker.join().unwrap();
    let handles: Vec<_> = std::mem::take(&mut *workers.lock().unwrap());
    // One before the first event, one per kind: switches, wait points, two wake-up
    // tracepoints, samples.
    assert_eq!(handles.len(), 6);
    let pairs: Vec<Pair> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(50));
    let stats = capture.stop().unwrap();
    println!("stats: {stats:?}");
    let events = events.lock().unwrap().clone();
    assert_eq!((stats.lost_records, stats.lost_samples), (0, 0));
    let ticks_per_us = fxtrace::clock::info().ticks_per_second / 1_000_000;
    let cs = switches(&events);
    for &[w, c] in &pairs {
        for (tid, cpu_ns) in [w, c] {
            // Switches: on each CPU, out and in alternate (a copy is a second out or in).
            let mut last: std::collections::HashMap<u32, bool> = Default::default();
            let mut outs = 0;
            for cs in &cs {
                let (t, out) = match cs.sides {
                    SwitchSides::IncomingOnly => (cs.next_tid, false),
                    _ => (cs.prev_tid, true),
                };
                if t != tid {
                    continue;
                }
                outs += usize::from(out);
                assert_ne!(
                    last.insert(cs.cpu, out),
                    Some(out),
                    "thread {tid}: two switch-{} records in a row on cpu {} at {}",
                    if out { "out" } else { "in" },
                    cs.cpu,
                    cs.time
                );
            }
            assert!(outs >= rounds / 4, "thread {tid}: {outs} switch-outs");
            // Samples: at the rate asked of the thread's CPU time (cpu-clock counts it), not
            // twice it (a second timer).
            let samples = events
                .iter()
                .filter(|e| matches!(e, CaptureEvent::Sample(s) if s.tid == tid))
                .count();
            let expected = cpu_ns as f64 * 999.0 / 1e9;
            println!(
                "thread {tid}: {outs} switch-outs, {samples} samples for {:.1} ms of CPU",
                cpu_ns as f64 / 1e6
            );
            assert!(
                (samples as f64) < expected * 1.3 + 3.0 && (samples as f64) > expected * 0.5 - 3.0,
                "thread {tid}: {samples} samples, {expected:.0} expected"
            );
        }
        // Wake-ups of the child by the worker and back: each once (the copies are written
        // nanoseconds apart), and some of each.
        for (woken, waker) in [(c.0, w.0), (w.0, c.0)] {
            let times: Vec<(u32, u64)> = events
                .iter()
                .filter_map(|e| match e {
                    CaptureEvent::Wakeup(x) if x.tid == woken && x.waker_tid == waker => {
                        Some((x.cpu, x.time))
                    }
                    _ => None,
                })
                .collect();
            assert!(!times.is_empty(), "no wake-up of {woken} by {waker}");
            for pair in times.windows(2) {
                assert!(
                    pair[0].0 != pair[1].0 || pair[1].1 - pair[0].1 > ticks_per_us,
                    "a wake-up of {woken} by {waker} recorded twice at {}",
                    pair[0].1
                );
            }
        }
    }
    assert!(
        stats.duplicates > 0,
        "the race was made: copies were dropped"
    );
}

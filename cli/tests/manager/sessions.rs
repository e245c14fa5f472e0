//! Sessions with real providers and an in-process manager: two providers at once keep their
//! own sections and string/thread tables; one session starts and stops several times without
//! saving anything twice; alerts are queued for WatchAlert.

use crate::support;

use std::time::Duration;

use fxtrace::protocol::control::{BufferingMode, SessionState};
use fxtrace::provider::{Provider, ProviderOptions};
use fxtrace_format::{Encode, Event, EventKind, StringRef, ThreadRef};
use fxtrace_tools::manager::{Manager, ManagerConfig, ManagerEvent, SessionConfig};

use support::{decode, drive, parse_probe, registered, spawn_probe, SharedOut};

fn manager(socket: &std::path::Path, mode: BufferingMode, size: u64) -> (Manager, SharedOut) {
    let config = ManagerConfig {
        session: SessionConfig {
            buffering_mode: mode,
            buffer_size_bytes: size,
            stop_timeout: Duration::from_secs(2),
            ..SessionConfig::default()
        },
        ..ManagerConfig::new(socket)
    };
    let out = SharedOut::default();
    (Manager::new(config, Box::new(out.clone())).unwrap(), out)
}

#[test]
fn two_providers_keep_their_own_sections_and_tables() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let (mut m, out) = manager(&socket, BufferingMode::Streaming, 64 << 10);
    m.start(None).unwrap();
    let mut events = Vec::new();
    let args = |name: &'static str| {
        [
            "--name",
            name,
            "--indexed",
            "--events",
            "3000",
            "--threads",
            "2",
            "--pause-every",
            "25",
            "--pause-us",
            "300",
        ]
    };
    let alpha = spawn_probe(&socket, &args("alpha"));
    let beta = spawn_probe(&socket, &args("beta"));
    let (alpha, beta) = std::thread::scope(|s| {
        let a = s.spawn(|| alpha.wait_with_output().unwrap());
        let b = s.spawn(|| beta.wait_with_output().unwrap());
        drive(&mut m, &mut events, Duration::from_secs(20), |_, _| {
            a.is_finished() && b.is_finished()
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    m.stop(true).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(10), |m, _| {
        m.session().state() == SessionState::Stopped
    });
    let reports = m.reports();
    m.finish().unwrap();
    assert_eq!(registered(&events), 2);
    let archive = decode(&out.bytes());
    for (name, output) in [("alpha", &alpha), ("beta", &beta)] {
        let probe = parse_probe(&String::from_utf8_lossy(&output.stdout));
        let part = archive.one(name);
        let report = reports.iter().find(|r| r.name == name).unwrap();
        assert_eq!(report.lost, None, "{report:?}");
        assert_eq!(part.infos, 1, "{name}: one Provider Info");
        assert!(part.sections >= 2, "{name}: streamed in several sections");
        assert_eq!(part.events.len() as u64, probe.written, "{name}");
        // Indexed refs resolve through this provider's own tables: string index 2 is "alpha"
        // in alpha's section and "beta" in beta's, thread indexes map to its own pid.
        let pid = u64::from(probe.pid.unwrap());
        for e in &part.events {
            assert_eq!(
                (e.name.as_str(), e.category.as_str(), e.pid),
                (name, "probe", pid)
            );
        }
        let tids: std::collections::BTreeSet<u64> = part.events.iter().map(|e| e.tid).collect();
        assert_eq!(tids.len(), 2, "{name}: two writer threads");
    }
    // The sections interleave (both streamed at the same time).
    let order = &archive.section_order;
    let switches = order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(switches >= 2, "sections did not interleave: {order:?}");
}

fn write(provider: &Provider, n: u64, first: u64) -> u64 {
    let mut ok = 0;
    for i in first..first + n {
        let Some(mut w) = provider.context().acquire() else {
            continue;
        };
        let args = [fxtrace_format::Arg::new(
            "seq",
            fxtrace_format::ArgValue::U64(i),
        )];
        let e = Event {
            ticks: fxtrace::clock::ticks(),
            thread: ThreadRef::Inline { pid: 1, tid: 1 },
            category: StringRef::Inline("probe"),
            name: StringRef::Inline("in-process"),
            args: &args,
            kind: EventKind::Instant,
        };
        let n = e.words().unwrap();
        let mut words = [0u64; 32];
        e.write(&mut words[..n]).unwrap();
        let slot = w.reserve(n);
        if let Some(mut slot) = slot {
            slot.payload().copy_from_slice(&words[1..n]);
            slot.commit(words[0]);
            ok += 1;
        }
    }
    ok
}

#[test]
fn a_session_starts_and_stops_several_times_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let (mut m, out) = manager(&socket, BufferingMode::Circular, 256 << 10);
    let mut events = Vec::new();
    let opts = ProviderOptions {
        socket_path: Some(socket.clone()),
        exit_hook: false,
        known_categories: vec!["db".into(), "net".into()],
        ..ProviderOptions::default()
    };
    let provider = std::thread::scope(|s| {
        let h = s.spawn(|| {
            Provider::connect_with("in-process", &opts)
                .unwrap()
                .unwrap()
        });
        drive(&mut m, &mut events, Duration::from_secs(5), |_, _| {
            h.is_finished()
        });
        h.join().unwrap()
    });
    // GetKnownCategories answers from what the provider declared at registration.
    assert_eq!(m.session().known_categories(), ["db", "net"]);
    let mut written = Vec::new();
    for round in 0..3u64 {
        m.start(None).unwrap();
        drive(&mut m, &mut events, Duration::from_secs(5), |m, _| {
            m.session().state() == SessionState::Started
        });
        assert!(provider.wait_started(Duration::from_secs(5)));
        written.push(write(&provider, 100, round * 1000));
        m.stop(true).unwrap();
        drive(&mut m, &mut events, Duration::from_secs(5), |m, _| {
            m.session().state() == SessionState::Stopped
        });
        // Raise an alert between rounds; WatchAlert hands them out in order.
        assert!(provider.alert(&format!("round-{round}")).unwrap());
    }
    drive(&mut m, &mut events, Duration::from_secs(5), |_, ev| {
        ev.iter()
            .filter(|e| matches!(e, ManagerEvent::Alert { .. }))
            .count()
            == 3
    });
    assert_eq!(m.watch_alert().as_deref(), Some("round-0"));
    assert_eq!(m.watch_alert().as_deref(), Some("round-1"));
    assert_eq!(m.watch_alert().as_deref(), Some("round-2"));
    assert_eq!(m.watch_alert(), None);
    m.finish().unwrap();
    assert_eq!(written, [100, 100, 100]);
    let archive = decode(&out.bytes());
    let part = archive.one("in-process");
    // One Provider Info, then a Provider Section per later collection; each round's events
    // exactly once (the restart after a stop with results clears the buffer).
    assert_eq!((part.infos, part.sections), (1, 2));
    let seqs: Vec<u64> = part.events.iter().map(|e| e.seq).collect();
    let want: Vec<u64> = (0..3).flat_map(|r| r * 1000..r * 1000 + 100).collect();
    assert_eq!(seqs, want);
    assert_eq!(part.inits, 3, "an initialization record per clearing start");
}

/// A provider whose small buffer is full is SIGKILLed: the drops it counted reach the summary
/// and the archive's drop marker through the shared header (before: `dropped 0`, no marker).
#[test]
fn drops_of_a_killed_provider_are_reported() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let (mut m, out) = manager(&socket, BufferingMode::Oneshot, 16 << 10);
    let mut events = Vec::new();
    let mut probe = spawn_probe(
        &socket,
        &[
            "--name",
            "killed",
            "--events",
            "20000",
            "--hang-after",
            "19000",
        ],
    );
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        registered(ev) == 1
    });
    m.start(None).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        ev.iter()
            .any(|e| matches!(e, ManagerEvent::StartAcknowledged { .. }))
    });
    let stdout = probe.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut progress = String::new();
    while let Some(Ok(line)) = lines.next() {
        if line.starts_with("progress=") {
            progress = line;
            break;
        }
    }
    probe.kill().unwrap();
    probe.wait().unwrap();
    assert!(progress.starts_with("progress=19000 "), "{progress:?}");
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        ev.iter()
            .any(|e| matches!(e, ManagerEvent::ProviderCollected { .. }))
    });
    let report = m.reports().remove(0);
    m.finish().unwrap();
    println!(
        "killed provider: {} records kept, {} dropped",
        report.records, report.records_dropped
    );
    assert!(report.lost.is_some(), "{report:?}");
    // A 16 KiB buffer holds a few hundred of the 19000 events.
    assert!(
        report.records_dropped > 10_000,
        "dropped {} of 19000 events: {report:?}",
        report.records_dropped
    );
    let archive = decode(&out.bytes());
    let part = archive.one("killed");
    let marker = format!("fxtrace: {} records dropped", report.records_dropped);
    assert!(part.markers.contains(&marker), "{:?}", part.markers);
}

/// 40 providers that exit normally (exit flush: STOPPED, then close) before the session's
/// Stop reaches them are done, not lost (before: "cannot send Stop: peer closed the
/// connection" for those the manager had not read yet). Three sessions.
#[test]
fn providers_that_exit_normally_are_not_lost() {
    for run in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("m.sock");
        let (mut m, out) = manager(&socket, BufferingMode::Oneshot, 64 << 10);
        let mut events = Vec::new();
        let probes: Vec<_> = (0..40)
            .map(|i| {
                let name = format!("p{i}");
                spawn_probe(&socket, &["--name", &name, "--events", "200"])
            })
            .collect();
        drive(&mut m, &mut events, Duration::from_secs(20), |_, ev| {
            registered(ev) == 40
        });
        m.start(None).unwrap();
        drive(&mut m, &mut events, Duration::from_secs(20), |_, ev| {
            ev.iter()
                .any(|e| matches!(e, ManagerEvent::StartAcknowledged { .. }))
        });
        // Every provider exits before the manager reads anything more (the recorder's Stop
        // after the command exited races with their STOPPED the same way).
        let written: Vec<u64> = probes
            .into_iter()
            .map(|p| {
                let output = p.wait_with_output().unwrap();
                assert!(output.status.success());
                parse_probe(&String::from_utf8_lossy(&output.stdout)).written
            })
            .collect();
        m.stop(true).unwrap();
        drive(&mut m, &mut events, Duration::from_secs(20), |_, ev| {
            ev.iter()
                .any(|e| matches!(e, ManagerEvent::StopAcknowledged { .. }))
        });
        let reports = m.reports();
        m.finish().unwrap();
        let lost: Vec<_> = reports.iter().filter(|r| r.lost.is_some()).collect();
        assert!(
            lost.is_empty(),
            "run {run}: {} of 40 lost: {lost:?}",
            lost.len()
        );
        let archive = decode(&out.bytes());
        for (i, w) in written.iter().enumerate() {
            let part = archive.one(&format!("p{i}"));
            assert_eq!(part.events.len() as u64, *w, "run {run}: p{i}");
            assert!(
                part.markers.is_empty(),
                "run {run}: p{i}: {:?}",
                part.markers
            );
        }
    }
}

/// A provider initialized by a session that has not started yet: what it writes before the
/// start is counted as dropped in that trace's report (before: lost without a count,
/// `dropped 0`), and what it writes after is recorded.
#[test]
fn writes_before_the_start_are_counted_as_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let (mut m, out) = manager(&socket, BufferingMode::Oneshot, 256 << 10);
    let mut events = Vec::new();
    let opts = ProviderOptions {
        socket_path: Some(socket.clone()),
        exit_hook: false,
        ..ProviderOptions::default()
    };
    let provider = std::thread::scope(|s| {
        let h = s.spawn(|| {
            Provider::connect_with("early-writer", &opts)
                .unwrap()
                .unwrap()
        });
        drive(&mut m, &mut events, Duration::from_secs(5), |_, _| {
            h.is_finished()
        });
        h.join().unwrap()
    });
    assert_eq!(
        write(&provider, 40, 0),
        0,
        "nothing is written before the start"
    );
    m.start(None).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(5), |m, _| {
        m.session().state() == SessionState::Started
    });
    assert!(provider.wait_started(Duration::from_secs(5)));
    assert_eq!(write(&provider, 10, 100), 10);
    m.stop(true).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(5), |m, _| {
        m.session().state() == SessionState::Stopped
    });
    let reports = m.reports();
    m.finish().unwrap();
    let report = reports.iter().find(|r| r.name == "early-writer").unwrap();
    assert_eq!(report.records_dropped, 40, "{report:?}");
    let archive = decode(&out.bytes());
    let part = archive.one("early-writer");
    let seqs: Vec<u64> = part.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (100..110).collect::<Vec<_>>());
}

/// A streaming provider's writers can fill its buffer between the start (the gate opens) and
/// the provider's STARTED: its SAVE_BUFFER then arrives while the manager still waits for
/// STARTED. It is served (before: ignored, so the provider waited for BUFFER_SAVED forever and
/// dropped everything after; `record::lifecycle::a_killed_recorder_leaves_whole_records_only`
/// stalled that way under load).
#[test]
fn a_save_requested_before_started_is_served() {
    use fxtrace::buffer::header::HEADER_SIZE;
    use fxtrace::protocol::control::Message;
    use fxtrace::protocol::fifo::{FifoPacket, BUFFER_SAVED, SAVE_BUFFER};
    use std::sync::atomic::{AtomicBool, Ordering};
    use support::{filler_records, FakeProvider, INIT_RECORD};

    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let (mut m, out) = manager(&socket, BufferingMode::Streaming, 64 << 10);
    m.start(None).unwrap();
    let mut events = Vec::new();
    let started_sent = AtomicBool::new(false);
    let saved = std::thread::scope(|s| {
        let fake = s.spawn(|| {
            let mut p = FakeProvider::register(&socket, "early-save");
            p.expect_start();
            let mut h = p.init_header();
            p.put_words(HEADER_SIZE, &INIT_RECORD);
            p.put_words(p.geometry().rolling_offset(0), &filler_records(3));
            h.rolling_data_end[0] = 48;
            p.buffer.header().store(&h);
            // The save request comes first, STARTED after it.
            p.send(FifoPacket::new(SAVE_BUFFER, 0, 0, 16));
            let saved = p.recv_packet(Duration::from_secs(10));
            p.send_started();
            started_sent.store(true, Ordering::SeqCst);
            assert!(matches!(p.recv(), Some(Message::Stop)));
            p.send(fxtrace::protocol::fifo::ProviderPacket::Stopped.to_packet());
            saved
        });
        drive(&mut m, &mut events, Duration::from_secs(20), |_, _| {
            started_sent.load(Ordering::SeqCst) || fake.is_finished()
        });
        m.stop(true).unwrap();
        drive(&mut m, &mut events, Duration::from_secs(20), |_, _| {
            fake.is_finished()
        });
        fake.join().unwrap()
    });
    drive(&mut m, &mut events, Duration::from_secs(10), |m, _| {
        m.session().state() == SessionState::Stopped
    });
    m.finish().unwrap();
    let saved = saved.expect("BUFFER_SAVED within 10 s");
    assert_eq!(saved.request, BUFFER_SAVED, "{saved:?}");
    let archive = decode(&out.bytes());
    assert!(
        archive.one("early-save").inits >= 3,
        "the saved records are archived"
    );
}

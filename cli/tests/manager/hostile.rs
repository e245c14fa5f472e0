//! The manager against hostile providers (scripted fakes speaking the raw protocol), next to a
//! well-behaved probe process: each hostile one is dropped with a clear reason, the manager
//! keeps going, and the probe's data is complete.

use crate::support;

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fxtrace::buffer::header::HEADER_SIZE;
use fxtrace::protocol::control::{BufferingMode, Message, BODY_HEADER_LEN, FRAME_PREFIX_LEN};
use fxtrace::protocol::fifo::{FifoPacket, ProviderPacket, SAVE_BUFFER, STARTED};
use fxtrace::protocol::transport;
use fxtrace::test_support::{skip, Requirement};
use fxtrace_tools::manager::{Manager, ManagerConfig, ManagerEvent, SessionConfig};

use support::{decode, drive, parse_probe, registered, spawn_probe, FakeProvider, SharedOut};

/// What each hostile provider does after registering; the manager's reason must contain the
/// given text.
const HOSTILE: &[(&str, &str)] = &[
    ("bad-version", "unsupported FIFO protocol version 2"),
    ("garbage", "unknown FIFO request code 0x77"),
    ("short-packet", "FIFO datagram of 5 bytes"),
    ("data16", "non-zero data16"),
    ("outside", "invalid buffer header: rolling_data_end[0]"),
    ("double-save", "second SAVE_BUFFER before BUFFER_SAVED"),
    ("bad-save", "streaming save rejected"),
    (
        "chatty",
        "unexpected Register message on the control socket",
    ),
    ("silent", "did not acknowledge Stop in time"),
];

fn hostile(
    socket: std::path::PathBuf,
    name: &'static str,
    done: Arc<std::sync::atomic::AtomicUsize>,
) {
    let mut p = FakeProvider::register(&socket, name);
    let g = p.geometry();
    let rolling0 = g.rolling_offset(0);
    match name {
        "silent" => {
            // Never answers anything; keeps the connection open until the manager closes it.
            done.fetch_add(1, Ordering::SeqCst);
            p.conn
                .set_recv_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            while p.recv().is_some() {}
            return;
        }
        "chatty" => {
            p.expect_start();
            p.send_started();
            p.conn
                .send_msg(
                    &Message::Register {
                        pid: 1,
                        name: "again".into(),
                        known_categories: Vec::new(),
                        accepts_ticks_per_second: false,
                        waits_for_session: false,
                    },
                    &[],
                )
                .unwrap();
        }
        _ => {
            p.expect_start();
        }
    }
    match name {
        "bad-version" => p.send(FifoPacket::new(STARTED, 0, 2, 0)),
        "garbage" => p.send(FifoPacket::new(0x77, 0, 0xdead, 0xbeef)),
        "short-packet" => p.send_raw(&[1, 0, 0, 0, 1]),
        "data16" => p.send(FifoPacket::new(STARTED, 1, 1, 0)),
        "outside" => {
            let mut h = p.init_header();
            p.put_words(rolling0, &support::filler_records(4));
            // Points far past the rolling buffer.
            h.rolling_data_end[0] = g.rolling_buffer_size * 4;
            p.buffer.header().store(&h);
            p.send_started();
            done.fetch_add(1, Ordering::SeqCst);
            // Answer Stop like a good provider: the header is what is wrong.
            assert!(matches!(p.recv(), Some(Message::Stop)));
            p.send(ProviderPacket::Stopped.to_packet());
        }
        "double-save" | "bad-save" => {
            let mut h = p.init_header();
            p.put_words(HEADER_SIZE, &support::INIT_RECORD);
            p.put_words(rolling0, &support::filler_records(3));
            h.rolling_data_end[0] = 48;
            p.buffer.header().store(&h);
            p.send_started();
            if name == "bad-save" {
                // Durable data end past the durable buffer.
                p.send(FifoPacket::new(
                    SAVE_BUFFER,
                    0,
                    0,
                    g.durable_buffer_size + 8,
                ));
            } else {
                p.send(FifoPacket::new(SAVE_BUFFER, 0, 0, 16));
                // Do not read BUFFER_SAVED; ask again.
                std::thread::sleep(Duration::from_millis(100));
                p.send(FifoPacket::new(SAVE_BUFFER, 0, 1, 16));
            }
        }
        _ => {}
    }
    if name != "outside" {
        done.fetch_add(1, Ordering::SeqCst);
    }
    // The manager closes the connection (or, for "outside", after the stop).
    p.conn
        .set_recv_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(
        p.wait_closed(),
        "{name}: the manager did not close the connection"
    );
    // The FIFO is closed too.
    let fifo = transport::try_recv_packet(p.fifo.as_fd());
    let closed =
        matches!(fifo, Err(transport::TransportError::PeerClosed)) || name == "double-save";
    assert!(closed, "{name}: FIFO still open: {fifo:?}");
}

#[test]
fn hostile_providers_are_dropped_and_the_good_one_is_complete() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let config = ManagerConfig {
        session: SessionConfig {
            buffering_mode: BufferingMode::Streaming,
            buffer_size_bytes: 64 << 10,
            start_timeout: Duration::from_millis(300),
            stop_timeout: Duration::from_millis(700),
            ..SessionConfig::default()
        },
        ..ManagerConfig::new(&socket)
    };
    let out = SharedOut::default();
    let mut m = Manager::new(config, Box::new(out.clone())).unwrap();
    let mut events = Vec::new();

    // Everyone registers before Start, so the start timeout applies to "silent".
    let probe = spawn_probe(
        &socket,
        &[
            "--name",
            "good",
            "--events",
            "3000",
            "--pause-every",
            "50",
            "--pause-us",
            "300",
        ],
    );
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let threads: Vec<_> = HOSTILE
        .iter()
        .map(|&(name, _)| {
            let (socket, done) = (socket.clone(), done.clone());
            std::thread::spawn(move || hostile(socket, name, done))
        })
        .collect();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        registered(ev) == HOSTILE.len() + 1
    });
    m.start(None).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        ev.iter()
            .any(|e| matches!(e, ManagerEvent::StartAcknowledged { .. }))
    });
    let output = probe.wait_with_output().unwrap();
    let report = parse_probe(&String::from_utf8_lossy(&output.stdout));
    assert!(output.status.success(), "{report:?}");
    drive(&mut m, &mut events, Duration::from_secs(10), |_, _| {
        done.load(Ordering::SeqCst) == HOSTILE.len()
    });
    m.stop(true).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        ev.iter()
            .any(|e| matches!(e, ManagerEvent::StopAcknowledged { .. }))
    });
    m.terminate().unwrap();
    drive(&mut m, &mut events, Duration::from_secs(5), |_, ev| {
        ev.iter().any(|e| matches!(e, ManagerEvent::Terminated))
    });
    let reports = m.reports();
    let bytes_written = m.finish().unwrap();
    for t in threads {
        t.join().expect("hostile script");
    }

    // Each hostile provider: lost, with its reason.
    for &(name, reason) in HOSTILE {
        let r = reports.iter().find(|r| r.name == name).unwrap();
        let lost = r
            .lost
            .as_deref()
            .unwrap_or_else(|| panic!("{name} not lost: {r:?}"));
        assert!(lost.contains(reason), "{name}: {lost:?} lacks {reason:?}");
        println!("{name:>12}: {lost}");
    }
    let silent = reports.iter().find(|r| r.name == "silent").unwrap();
    assert!(
        silent
            .problems
            .iter()
            .any(|p| p.contains("did not answer Start within 300 ms")),
        "{silent:?}"
    );
    assert!(events.iter().any(|e| matches!(
        e,
        ManagerEvent::StartAcknowledged { timed_out } if timed_out == &[silent.id]
    )));

    // The good provider: not lost, nothing dropped, every event it wrote is in the archive.
    let good = reports.iter().find(|r| r.name == "good").unwrap();
    assert_eq!(good.lost, None, "{good:?}");
    assert_eq!(good.records_dropped, report.dropped);
    let bytes = out.bytes();
    assert_eq!(bytes.len() as u64, bytes_written);
    let archive = decode(&bytes);
    let part = archive.one("good");
    let seqs = support::seqs_of_thread(&part.events, 0);
    assert_eq!(seqs.len() as u64, report.written, "{report:?}");
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicates"
    );
    assert_eq!(
        good.records,
        report.written + 1,
        "events + initialization record"
    );
    assert_eq!(part.infos, 1);

    // Hostile data: "double-save"'s first (valid) save is in the archive, nothing after it;
    // the others wrote nothing.
    let double = archive.one("double-save");
    assert_eq!(double.inits, 4, "{double:?}");
    for &(name, _) in HOSTILE {
        if name != "double-save" {
            let parts = archive.by_name(name);
            assert!(
                parts.iter().all(|p| p.events.is_empty() && p.inits == 0),
                "{name} has data: {parts:?}"
            );
        }
    }
}

#[test]
fn a_peer_of_another_uid_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        skip(
            Requirement::Root,
            "not root (needs to run processes as uid 65534)",
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // Uid 65534 runs copies in the 0777 directory: the target directory may be out of its
    // reach (a clone under a mode-0700 home).
    let probe = support::runnable_by_all(&support::probe(), dir.path());
    let fxtrace = support::runnable_by_all(
        std::path::Path::new(env!("CARGO_BIN_EXE_fxtrace")),
        dir.path(),
    );

    // 1. A root manager that accepts only root (PeerPolicy::OnlyUid(0)), socket mode 0666 so
    //    that the connect itself succeeds: SO_PEERCRED refuses the uid-65534 probe.
    // 2. The default socket mode 0600: the kernel refuses the connect.
    for (mode, by_credentials) in [(0o666, true), (0o600, false)] {
        let socket = dir.path().join(format!("m{mode:o}.sock"));
        let config = ManagerConfig {
            listener: transport::ListenerOptions {
                mode,
                policy: transport::PeerPolicy::OnlyUid(0),
            },
            ..ManagerConfig::new(&socket)
        };
        let mut m = Manager::new(config, Box::new(SharedOut::default())).unwrap();
        m.start(None).unwrap();
        let child = std::process::Command::new(&probe)
            .args(["--events", "10"])
            .env(transport::SOCKET_ENV, &socket)
            .uid(65534)
            .gid(65534)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut events = Vec::new();
        let output = std::thread::scope(|s| {
            let h = s.spawn(|| child.wait_with_output().unwrap());
            drive(&mut m, &mut events, Duration::from_secs(10), |_, _| {
                h.is_finished()
            });
            h.join().unwrap()
        });
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stdout.contains("connected=error"), "{stdout} {stderr}");
        assert_eq!(registered(&events), 0);
        if by_credentials {
            // A provider hung up on tries once more without the clock field (for a manager
            // of control revision 1): refused once or twice, each time for the same reason.
            let refused = m.refused();
            assert!((1..=2).contains(&refused.len()), "{events:?}");
            assert!(
                refused.iter().all(|r| (r.uid, r.pid) == (65534, pid)),
                "{events:?}"
            );
        } else {
            assert!(stderr.contains("Permission denied"), "{stderr}");
        }
        println!("socket mode {mode:o}: uid 65534 refused: {}", stderr.trim());
    }

    // 3. A manager running as uid 65534 (`fxtrace record` under setuid) refuses a root peer
    //    ("same uid or root" means the *manager* is root), and a root provider refuses it.
    let socket = dir.path().join("nobody.sock");
    let mut record = std::process::Command::new(&fxtrace)
        .args(["record", "--socket"])
        .arg(&socket)
        .arg("-o")
        .arg(dir.path().join("nobody.fxt"))
        .args(["--duration", "20"])
        .uid(65534)
        .gid(65534)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            std::time::Instant::now() < until,
            "no socket from the uid-65534 manager"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Root may connect to any socket file; the manager checks the credentials.
    let mut raw = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    use std::io::{Read, Write};
    let frame = Message::Register {
        pid: std::process::id(),
        name: "root".into(),
        known_categories: Vec::new(),
        accepts_ticks_per_second: false,
        waits_for_session: false,
    }
    .encode()
    .unwrap();
    let _ = raw.write_all(&frame);
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    let n = raw.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the manager answered a root peer");
    // A root provider does not talk to a manager of another user either.
    let opts = fxtrace::provider::ProviderOptions {
        socket_path: Some(socket.clone()),
        exit_hook: false,
        ..Default::default()
    };
    let err = fxtrace::provider::Provider::connect_with("root", &opts).unwrap_err();
    assert!(err.to_string().contains("uid 65534"), "{err}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(record.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = record.wait().unwrap();
    let mut stderr = String::new();
    record
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("runs as uid 0, not as this manager's user"),
        "{stderr}"
    );
    assert!(stderr.contains("refused a connection from pid"), "{stderr}");
    println!(
        "uid-65534 manager: {}",
        stderr.lines().find(|l| l.contains("uid 0")).unwrap_or("")
    );
}

/// A provider that writes into its own buffer the provider metadata only the manager writes
/// (renaming every provider, opening other providers' sections, a fake overflow event), then
/// stops cleanly. Records: one initialization record, then per forged id an info, a section
/// and an initialization record "for" that provider, then a provider event.
fn forger_records() -> Vec<u64> {
    use fxtrace_format::{encode_to_vec, ProviderEvent, ProviderInfo, ProviderSection};
    let mut words = support::INIT_RECORD.to_vec();
    for id in 1..=4 {
        let info = ProviderInfo {
            provider_id: id,
            name: "renamed",
        };
        words.extend(encode_to_vec(&info).unwrap());
        words.extend(encode_to_vec(&ProviderSection { provider_id: id }).unwrap());
        words.extend(support::INIT_RECORD);
    }
    words.extend(
        encode_to_vec(&ProviderEvent {
            provider_id: 1,
            event: 0,
        })
        .unwrap(),
    );
    words
}

/// Register as `name`, fill the buffer with `words` (the header `tweak`ed after), answer Start
/// and Stop like a good provider.
fn scripted(
    socket: std::path::PathBuf,
    name: &'static str,
    words: Vec<u64>,
    tweak: impl FnOnce(&mut fxtrace::buffer::header::HeaderFields),
) {
    let mut p = FakeProvider::register(&socket, name);
    let mut h = p.init_header();
    p.put_words(p.geometry().rolling_offset(0), &words);
    h.rolling_data_end[0] = words.len() as u64 * 8;
    tweak(&mut h);
    p.buffer.header().store(&h);
    p.expect_start();
    p.send_started();
    assert!(matches!(p.recv(), Some(Message::Stop)));
    p.send(ProviderPacket::Stopped.to_packet());
    p.conn
        .set_recv_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    p.wait_closed();
}

/// A header change of a scripted provider.
type Tweak = fn(&mut fxtrace::buffer::header::HeaderFields);

/// One session of scripted providers (`name`, buffer words, header change), registered in
/// order (ids 1, 2, …), started, looked at by `while_started`, stopped: their reports and the
/// archive.
fn scripted_session(
    providers: Vec<(&'static str, Vec<u64>, Tweak)>,
    while_started: impl FnOnce(&Manager),
) -> (Vec<fxtrace_tools::manager::ProviderReport>, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let config = ManagerConfig {
        session: SessionConfig {
            buffer_size_bytes: 64 << 10,
            ..SessionConfig::default()
        },
        ..ManagerConfig::new(&socket)
    };
    let out = SharedOut::default();
    let mut m = Manager::new(config, Box::new(out.clone())).unwrap();
    let mut events = Vec::new();
    let mut threads = Vec::new();
    for (i, (name, words, tweak)) in providers.into_iter().enumerate() {
        let s = socket.clone();
        threads.push(std::thread::spawn(move || scripted(s, name, words, tweak)));
        drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
            registered(ev) == i + 1
        });
    }
    m.start(None).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        ev.iter()
            .any(|e| matches!(e, ManagerEvent::StartAcknowledged { .. }))
    });
    while_started(&m);
    m.stop(true).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        ev.iter()
            .any(|e| matches!(e, ManagerEvent::StopAcknowledged { .. }))
    });
    let reports = m.reports();
    m.finish().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    (reports, out.bytes())
}

#[test]
fn provider_metadata_written_by_a_provider_is_dropped_and_reported() {
    let (reports, bytes) = scripted_session(
        vec![
            ("victim", support::INIT_RECORD.to_vec(), |_| {}),
            ("forger", forger_records(), |_| {}),
        ],
        |_| {},
    );
    let archive = decode(&bytes);
    let mut names = archive.names();
    names.sort();
    assert_eq!(names, ["forger", "victim"], "nobody renamed");
    let v = archive.one("victim");
    assert_eq!(
        (v.infos, v.sections, v.inits, v.overflows),
        (1, 0, 1, 0),
        "{v:?}"
    );
    let f = archive.one("forger");
    assert_eq!(
        (f.infos, f.sections, f.inits, f.overflows),
        (1, 0, 5, 0),
        "{f:?}"
    );
    let fr = reports.iter().find(|r| r.name == "forger").unwrap();
    assert!(
        fr.problems
            .iter()
            .any(|p| p.contains("protocol violation: 9 provider metadata records")),
        "{fr:?}"
    );
    assert_eq!(
        fr.records, 5,
        "the forged records are not counted as copied"
    );
    let vr = reports.iter().find(|r| r.name == "victim").unwrap();
    assert!(vr.problems.is_empty() && vr.lost.is_none(), "{vr:?}");
}

#[test]
fn a_drop_count_that_is_not_one_adds_nothing_but_a_problem_line() {
    // A header that validates but claims 2^64 - 1 drops; one that does not validate at all;
    // a provider that dropped 3 records.
    let record = || support::INIT_RECORD.to_vec();
    let providers: Vec<(&str, Vec<u64>, Tweak)> = vec![
        ("boastful", record(), |h| h.num_records_dropped = u64::MAX),
        ("broken", record(), |h| {
            h.num_records_dropped = u64::MAX;
            h.magic = 0;
        }),
        ("honest", record(), |h| h.num_records_dropped = 3),
    ];
    let (reports, bytes) = scripted_session(providers, |m| {
        // While tracing: only the honest count, and a line for each of the others.
        let info = m.session_info();
        assert_eq!(info.records_dropped, 3, "{info:?}");
        let said = |text: &str| info.problems.iter().filter(|p| p.contains(text)).count();
        assert_eq!(
            said("provider 1: its buffer header says 18446744073709551615 records dropped"),
            1,
            "{:?}",
            info.problems
        );
        assert_eq!(
            said("provider 2: invalid buffer header: bad header magic"),
            1
        );
    });
    let report = |name: &str| reports.iter().find(|r| r.name == name).unwrap();
    let boastful = report("boastful");
    assert_eq!(boastful.records_dropped, 0, "{boastful:?}");
    assert_eq!(boastful.records, 1, "its records are kept: {boastful:?}");
    assert!(
        boastful.problems.iter().any(|p| p.contains("not a count")),
        "{boastful:?}"
    );
    assert_eq!(report("broken").records_dropped, 0);
    assert_eq!(report("honest").records_dropped, 3);
    // The archive: no overflow and no marker but the honest provider's.
    let archive = decode(&bytes);
    let b = archive.one("boastful");
    assert_eq!((b.overflows, b.markers.len()), (0, 0), "{b:?}");
    let h = archive.one("honest");
    assert_eq!(h.overflows, 1);
    assert_eq!(h.markers, ["fxtrace: 3 records dropped"]);
}

#[test]
fn a_provider_cannot_forge_the_managers_drop_marker() {
    use fxtrace_format::{Arg, ArgValue, Event, EventKind, StringRef, ThreadRef};
    // The honest provider dropped 3 records (provider 1); the forger writes the manager's
    // marker for it, word for word, on the marker thread, claiming 999.
    let pid = u64::from(std::process::id());
    let args = [
        Arg::new("provider", ArgValue::U64(1)),
        Arg::new("records_dropped", ArgValue::U64(999)),
    ];
    let forged = Event {
        ticks: 1,
        thread: ThreadRef::Inline {
            pid,
            tid: 0x8000_0000 | pid,
        },
        category: StringRef::Inline("fxtrace"),
        name: StringRef::Inline("fxtrace: 999 records dropped"),
        args: &args,
        kind: EventKind::Instant,
    };
    let mut words = support::INIT_RECORD.to_vec();
    words.extend(fxtrace_format::encode_to_vec(&forged).unwrap());
    let (_, bytes) = scripted_session(
        vec![
            ("honest", support::INIT_RECORD.to_vec(), |h| {
                h.num_records_dropped = 3
            }),
            ("forger", words, |_| {}),
        ],
        |_| {},
    );
    let archive = decode(&bytes);
    assert_eq!(
        archive.one("honest").markers,
        ["fxtrace: 3 records dropped"]
    );
    let f = archive.one("forger");
    assert!(f.markers.is_empty(), "{f:?}");
    assert_eq!(f.section_markers, ["fxtrace: 999 records dropped"]);
    // What `fxtrace stats` counts: the manager's marker only.
    let mut summary = fxtrace_format::Summary::new();
    for d in fxtrace_format::Decoder::new(&bytes) {
        summary.add(&d.unwrap());
    }
    assert_eq!(
        summary.records_dropped,
        std::collections::BTreeMap::from([(1, 3)])
    );
    assert_eq!(summary.markers_not_counted, 1);
    assert_eq!(summary.providers.len(), 2, "{:?}", summary.providers);
}

/// Send Register as `name` on a fresh connection (the answer is not read).
fn raw_register(socket: &std::path::Path, name: &str) -> transport::ControlConn {
    let mut conn = transport::ControlConn::connect(socket, Duration::from_secs(1)).unwrap();
    let register = Message::Register {
        pid: std::process::id(),
        name: name.into(),
        known_categories: Vec::new(),
        accepts_ticks_per_second: false,
        waits_for_session: false,
    };
    conn.send_msg(&register, &[]).unwrap();
    conn
}

fn refusals(events: &[ManagerEvent], text: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, ManagerEvent::Refused { reason, .. } if reason.contains(text)))
        .count()
}

/// A manager with small buffers and short start/stop timeouts (providers of a flood never
/// answer Start).
fn lockout_config(socket: &std::path::Path) -> ManagerConfig {
    ManagerConfig {
        session: SessionConfig {
            buffer_size_bytes: 64 << 10,
            start_timeout: Duration::from_millis(300),
            stop_timeout: Duration::from_millis(500),
            ..SessionConfig::default()
        },
        ..ManagerConfig::new(socket)
    }
}

/// One user floods the table (here 8 slots, 2 kept for the traced command): its registrations
/// beyond the 6 open slots are refused, the traced command's own provider is still accepted
/// and traced completely, and a provider that never answered Start is evicted for a newcomer.
/// Before: the flood took all 8 slots and the traced probe was refused.
#[test]
fn one_user_cannot_lock_the_traced_command_out() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let mut config = lockout_config(&socket);
    config.max_providers = 8;
    config.reserved_for_traced = 2;
    config.max_per_uid = 8;
    let out = SharedOut::default();
    let mut m = Manager::new(config, Box::new(out.clone())).unwrap();
    let mut events = Vec::new();
    let hostile: Vec<_> = (0..10)
        .map(|i| raw_register(&socket, &format!("flood{i}")))
        .collect();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        registered(ev) + refusals(ev, "refused") == 10
    });
    assert_eq!(registered(&events), 6, "{events:#?}");
    assert_eq!(refusals(&events, "outside the traced command"), 4);

    let probe = spawn_probe(&socket, &["--name", "traced", "--events", "300"]);
    m.set_traced_root(probe.id());
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        registered(ev) == 7
    });
    m.start(None).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        ev.iter()
            .any(|e| matches!(e, ManagerEvent::StartAcknowledged { .. }))
    });
    let output = probe.wait_with_output().unwrap();
    let report = parse_probe(&String::from_utf8_lossy(&output.stdout));
    assert!(
        output.status.success() && report.connected.is_some(),
        "{report:?}"
    );

    // The open slots are full of providers that never answered Start: a newcomer evicts one.
    let _late = raw_register(&socket, "late");
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        registered(ev) == 8
    });
    let evicted = events
        .iter()
        .filter(|e| matches!(e, ManagerEvent::ProviderLost { reason, .. } if reason.contains("evicted")))
        .count();
    assert_eq!(evicted, 1, "{events:#?}");
    m.stop(true).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        ev.iter()
            .any(|e| matches!(e, ManagerEvent::StopAcknowledged { .. }))
    });
    let reports = m.reports();
    m.finish().unwrap();
    drop(hostile);
    let traced = reports.iter().find(|r| r.name == "traced").unwrap();
    assert!(traced.lost.is_none(), "{traced:?}");
    let archive = decode(&out.bytes());
    assert_eq!(
        archive.one("traced").events.len() as u64,
        report.written,
        "{report:?}"
    );
}

/// The scale with the default table (256 providers, 224 per uid, 32 kept for the
/// traced command, 16 per process): 300 registrations from one process, then the traced
/// command's provider. Before the limits, the flood took all 256 slots and the traced
/// provider was refused (BENCHMARKS.md); now 16 are registered, 284 refused, and the traced
/// provider is accepted and recorded completely. (The per-uid cap is tested with a small table
/// in `one_user_cannot_lock_the_traced_command_out`.)
#[test]
fn three_hundred_registrations_leave_room_for_the_traced_command() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let config = lockout_config(&socket);
    let (max_providers, reserved, max_per_pid) = (
        config.max_providers,
        config.reserved_for_traced,
        config.max_per_pid,
    );
    let out = SharedOut::default();
    let mut m = Manager::new(config, Box::new(out.clone())).unwrap();
    let mut events = Vec::new();
    let mut hostile = Vec::new();
    for i in 0..300 {
        hostile.push(raw_register(&socket, &format!("flood{i}")));
        // The listen queue is short: let the manager accept as the flood goes.
        events.extend(m.poll(&[], Some(Duration::from_millis(1))).unwrap().events);
    }
    drive(&mut m, &mut events, Duration::from_secs(20), |_, ev| {
        registered(ev) + refusals(ev, "refused") == 300
    });
    // All from this one process: its per-process cap binds before the per-uid one.
    let flood = registered(&events);
    println!("300 registrations from one process: {flood} registered, the rest refused");
    assert_eq!(flood, max_per_pid.min(max_providers - reserved));
    assert_eq!(refusals(&events, "refused"), 300 - flood);
    let probe = spawn_probe(&socket, &["--name", "traced", "--events", "300"]);
    m.set_traced_root(probe.id());
    m.start(None).unwrap();
    let output = std::thread::scope(|s| {
        let h = s.spawn(|| probe.wait_with_output().unwrap());
        drive(&mut m, &mut events, Duration::from_secs(20), |_, _| {
            h.is_finished()
        });
        h.join().unwrap()
    });
    let report = parse_probe(&String::from_utf8_lossy(&output.stdout));
    assert!(
        output.status.success() && report.connected.is_some(),
        "{report:?}"
    );
    m.stop(true).unwrap();
    drive(&mut m, &mut events, Duration::from_secs(10), |_, ev| {
        ev.iter()
            .any(|e| matches!(e, ManagerEvent::StopAcknowledged { .. }))
    });
    m.finish().unwrap();
    drop(hostile);
    let archive = decode(&out.bytes());
    assert_eq!(archive.one("traced").events.len() as u64, report.written);
}

/// The resident set of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A count from the environment (for measuring the same scenario at another scale), else
/// `default`.
fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// 150 connections each send all but the last byte of a 480 KB Register (before: the
/// manager buffered every byte, ~70 MB): each is refused as "sent an oversized registration"
/// from its length prefix, and the manager's memory barely moves. The scale, 1000
/// connections of 950 KB (702 MB before), is measured with `FXTRACE_FLOOD_CONNECTIONS=1000
/// FXTRACE_FLOOD_FRAME_KB=950` (BENCHMARKS.md).
#[test]
fn oversized_registrations_are_refused_before_they_are_buffered() {
    use std::io::Write;
    let connections = env_count("FXTRACE_FLOOD_CONNECTIONS", 150);
    let frame_kb = env_count("FXTRACE_FLOOD_FRAME_KB", 480);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let config = ManagerConfig::new(&socket);
    let mut m = Manager::new(config, Box::new(SharedOut::default())).unwrap();
    // A Register frame whose length prefix announces `frame_kb` KB (a legitimate one is at
    // most about 520 KB: 5000 categories of 100 bytes), its body zeros after the version and
    // tag; each client sends all of it but the last byte.
    let mut big = Message::Register {
        pid: 1,
        name: "big".into(),
        known_categories: Vec::new(),
        accepts_ticks_per_second: false,
        waits_for_session: false,
    }
    .encode()
    .unwrap();
    big.truncate(FRAME_PREFIX_LEN + BODY_HEADER_LEN);
    big.resize(frame_kb * 1000, 0);
    let body_len = u32::try_from(big.len() - FRAME_PREFIX_LEN).unwrap();
    big[..FRAME_PREFIX_LEN].copy_from_slice(&body_len.to_le_bytes());
    let frame = &big[..big.len() - 1];
    let before = rss_kib();
    let mut clients: Vec<(std::os::unix::net::UnixStream, usize, bool)> = Vec::new();
    let mut events = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while clients.len() < connections || clients.iter().any(|c| !c.2) {
        // A few connections per turn: the listen queue is short and only the manager's poll
        // empties it.
        while clients.len() < connections && clients.iter().filter(|c| !c.2).count() < 8 {
            let s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
            s.set_nonblocking(true).unwrap();
            clients.push((s, 0, false));
        }
        assert!(std::time::Instant::now() < until, "clients still sending");
        for (s, sent, done) in clients.iter_mut().filter(|c| !c.2) {
            match s.write(&frame[*sent..]) {
                Ok(n) => {
                    *sent += n;
                    *done = *sent == frame.len();
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => *done = true, // closed by the manager
            }
        }
        events.extend(m.poll(&[], Some(Duration::from_millis(5))).unwrap().events);
    }
    for _ in 0..20 {
        events.extend(m.poll(&[], Some(Duration::from_millis(5))).unwrap().events);
    }
    let grown_kib = rss_kib().saturating_sub(before);
    println!(
        "manager RSS grew by {grown_kib} KiB for {connections} partial {} KB registrations",
        frame.len() / 1000
    );
    assert_eq!(
        refusals(&events, "sent an oversized registration"),
        connections
    );
    assert!(grown_kib < 16 << 10, "grew by {grown_kib} KiB");
}

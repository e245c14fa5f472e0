//! The provider against a fake manager speaking the raw protocol: the handshake, Start / Stop /
//! Terminate, the streaming save handshake, categories, alerts, a manager that dies or breaks
//! the protocol, and the cost of having no manager.
//!
//! A binary of its own: these tests put files under descriptor numbers of this process, which
//! would clobber the descriptors of tests running beside them in a shared binary.

#[path = "../../tests/daemon/mod.rs"]
mod daemon;
/// The workspace root (the probe is built from there).
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[path = "support/mod.rs"]
mod support;

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fxtrace::buffer::header::{self, MAGIC};
use fxtrace::engine::TraceState;
use fxtrace::protocol::control::{BufferDisposition, BufferingMode, Message};
use fxtrace::protocol::fifo::{FifoPacket, ManagerPacket, ProviderPacket, FIFO_PROTOCOL_VERSION};
use fxtrace::protocol::transport;
use fxtrace::provider::{Provider, ProviderOptions, ProviderState};
use fxtrace_format::{Encode, Event, EventKind, StringRef, ThreadRef};

use daemon::{assert_intact, open_fd_files, opened_since, take_over};
use support::{FakeManager, FakeSession};

/// Alerts go through the process's last provider: keep these tests from overlapping.
static SERIAL: Mutex<()> = Mutex::new(());

fn options(path: &std::path::Path) -> ProviderOptions {
    ProviderOptions {
        socket_path: Some(path.to_path_buf()),
        exit_hook: false,
        ..ProviderOptions::default()
    }
}

/// Connect a provider to `manager` (served on a thread) and return both ends.
fn connect(
    manager: &FakeManager,
    mode: BufferingMode,
    size: u64,
    categories: &'static [&'static str],
) -> (Provider, FakeSession) {
    let path = manager.path().to_path_buf();
    let provider = std::thread::spawn(move || {
        Provider::connect_with("client-test", &options(&path))
            .expect("connect")
            .expect("a manager is there")
    });
    let session = manager.accept(mode, size, categories);
    (provider.join().unwrap(), session)
}

fn write_events(provider: &Provider, n: u64) -> u64 {
    let mut ok = 0;
    for i in 0..n {
        let Some(mut w) = provider.context().acquire() else {
            continue;
        };
        let event = Event {
            ticks: i,
            thread: ThreadRef::Inline { pid: 1, tid: 2 },
            category: StringRef::Inline("cat"),
            name: StringRef::Inline("ev"),
            args: &[],
            kind: EventKind::Instant,
        };
        let n = event.words().unwrap();
        let mut words = [0u64; 16];
        event.write(&mut words[..n]).unwrap();
        let slot = w.reserve(n);
        if let Some(mut slot) = slot {
            slot.payload().copy_from_slice(&words[1..n]);
            slot.commit(words[0]);
            ok += 1;
        }
    }
    ok
}

/// Times the calling thread gave up its CPU of its own accord so far (slept, blocked, waited).
fn waits_of_this_thread() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[test]
fn no_manager_returns_none_without_waiting() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // No socket file at all.
    let missing = dir.path().join("nobody.sock");
    // A stale socket file nobody listens on.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    std::env::set_var(transport::SOCKET_ENV, &missing);
    // Each answer comes without the thread sleeping or blocking once (no retry, no timeout
    // waited out), however slow the machine.
    let waits = waits_of_this_thread();
    let no_file = Provider::connect_with("x", &options(&missing)).unwrap();
    let refused = Provider::connect_with("x", &options(&stale)).unwrap();
    // Through the environment, as a program would.
    let via_env = Provider::connect("x").unwrap();
    let waited = waits_of_this_thread() - waits;
    std::env::remove_var(transport::SOCKET_ENV);
    assert!(no_file.is_none() && refused.is_none() && via_env.is_none());
    assert_eq!(waited, 0, "connect waited {waited} times with no manager");
}

#[test]
fn handshake_start_stop_terminate() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let manager = FakeManager::new();
    let start = Instant::now();
    let (provider, mut s) = connect(
        &manager,
        BufferingMode::Circular,
        64 << 10,
        &["gfx", "net*"],
    );
    println!(
        "connect + handshake with a (fake) manager: {:?}",
        start.elapsed()
    );
    assert_eq!(s.registered_pid, std::process::id());
    assert_eq!(s.registered_name, "client-test");
    assert_eq!(provider.id(), 7);
    assert_eq!(provider.buffering_mode(), BufferingMode::Circular);
    assert_eq!(provider.categories(), ["gfx", "net*"]);
    assert_eq!(provider.state(), ProviderState::Idle);
    // The provider (its engine) initialised the header of the manager's memfd.
    let h = s.header();
    assert_eq!(h.magic, MAGIC);
    assert_eq!(h.buffering_mode, header::BufferingMode::Circular as u8);
    assert_eq!(
        h.validate(64 << 10).unwrap().mode,
        header::BufferingMode::Circular
    );
    // Not started: nothing is written, and each attempt is counted as a dropped record of
    // the trace the coming start begins (the provider was initialized for it).
    assert_eq!(write_events(&provider, 10), 0);

    s.send(&Message::Start {
        disposition: BufferDisposition::ClearEntire,
    });
    assert_eq!(
        s.packet(Duration::from_secs(5)),
        Some(ProviderPacket::Started {
            version: FIFO_PROTOCOL_VERSION
        })
    );
    assert!(provider.wait_started(Duration::from_secs(1)));
    assert_eq!(provider.state(), ProviderState::Started);
    assert!(provider.context().is_category_enabled("gfx"));
    assert!(provider.context().is_category_enabled("network"));
    assert!(!provider.context().is_category_enabled("db"));
    assert_eq!(write_events(&provider, 100), 100);

    s.send(&Message::Stop);
    assert_eq!(
        s.packet(Duration::from_secs(5)),
        Some(ProviderPacket::Stopped)
    );
    assert_eq!(provider.context().state(), TraceState::Stopped);
    // The stop finalised the header: durable end covers the initialization record.
    let h = s.header();
    assert!(h.durable_data_end >= 16, "{h:?}");
    assert_eq!(h.num_records_dropped, 10, "the writes before the start");
    assert_eq!(provider.state(), ProviderState::Stopped);

    // Start again, retaining; then terminate: stop, STOPPED, close.
    s.send(&Message::Start {
        disposition: BufferDisposition::Retain,
    });
    assert_eq!(
        s.packet(Duration::from_secs(5)),
        Some(ProviderPacket::STARTED)
    );
    s.send(&Message::Terminate);
    assert_eq!(
        s.packet(Duration::from_secs(5)),
        Some(ProviderPacket::Stopped)
    );
    assert_eq!(
        provider.wait_stopped(Duration::from_secs(5)),
        ProviderState::Disconnected
    );
    assert!(provider
        .end_reason()
        .unwrap()
        .contains("terminated by the manager"));
    // The provider closed its control connection.
    s.conn
        .set_recv_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    assert!(matches!(
        s.conn.recv_msg(),
        Err(transport::TransportError::PeerClosed)
    ));
    assert_eq!(provider.stats().starts, 2);
}

#[test]
fn streaming_save_request_and_buffer_saved() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let manager = FakeManager::new();
    let (provider, mut s) = connect(&manager, BufferingMode::Streaming, 16 << 10, &[]);
    s.send(&Message::Start {
        disposition: BufferDisposition::ClearEntire,
    });
    assert_eq!(
        s.packet(Duration::from_secs(5)),
        Some(ProviderPacket::STARTED)
    );
    // Fill rolling buffer 0 (16 KiB buffer: about 7 KiB each); the engine asks to save it.
    let mut wrote = 0;
    let request = loop {
        wrote += write_events(&provider, 50);
        if let Some(p) = s.packet(Duration::from_millis(1)) {
            break p;
        }
        assert!(wrote < 100_000, "no SAVE_BUFFER after {wrote} events");
    };
    let ProviderPacket::SaveBuffer {
        wrapped_count,
        durable_data_end,
    } = request
    else {
        panic!("expected SAVE_BUFFER, got {request:?}");
    };
    assert_eq!(wrapped_count, 0);
    assert!(durable_data_end >= 16 && durable_data_end % 8 == 0);
    let h = s.header();
    assert!(h.rolling_data_end[0] > 0);
    // Until the answer, a second fill is dropped (counted), never a second request.
    let before = provider.context().records_dropped();
    let extra = write_events(&provider, 2000);
    assert!(
        s.packet(Duration::from_millis(50)).is_none(),
        "second SAVE_BUFFER"
    );
    assert!(provider.context().records_dropped() > before);
    assert!(extra < 2000);
    // BUFFER_SAVED echoes the request; the engine may then switch into buffer 0 again.
    transport::send_packet(
        s.fifo.as_fd(),
        &ManagerPacket::BufferSaved {
            wrapped_count,
            durable_data_end,
        }
        .to_packet(),
    )
    .unwrap();
    let until = Instant::now() + Duration::from_secs(2);
    while provider.stats().buffers_saved == 0 {
        assert!(Instant::now() < until, "BUFFER_SAVED not consumed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.header().rolling_data_end[0], 0, "saved buffer reset");
    assert!(write_events(&provider, 10) == 10);
    // The next request names wrapped count 1.
    let next = loop {
        write_events(&provider, 50);
        if let Some(p) = s.packet(Duration::from_millis(1)) {
            break p;
        }
    };
    assert!(matches!(
        next,
        ProviderPacket::SaveBuffer {
            wrapped_count: 1,
            ..
        }
    ));
    assert_eq!(provider.stats().save_requests, 2);
}

#[test]
fn manager_death_stops_tracing_without_disturbing_the_program() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let manager = FakeManager::new();
    let (provider, mut s) = connect(&manager, BufferingMode::Oneshot, 64 << 10, &[]);
    s.send(&Message::Start {
        disposition: BufferDisposition::ClearEntire,
    });
    assert!(provider.wait_started(Duration::from_secs(5)));
    assert_eq!(write_events(&provider, 10), 10);
    drop(s);
    drop(manager);
    assert_eq!(
        provider.wait_stopped(Duration::from_secs(5)),
        ProviderState::Disconnected
    );
    assert!(provider.end_reason().unwrap().contains("went away"));
    assert_eq!(provider.context().state(), TraceState::Stopped);
    // Writers see tracing off: no wait, nothing written, nothing counted.
    let waits = waits_of_this_thread();
    assert_eq!(write_events(&provider, 1000), 0);
    assert_eq!(waits_of_this_thread() - waits, 0, "a writer waited");
    // Alerts fail quietly.
    assert!(!provider.alert("late").unwrap());
    // Dropping the handle does not block.
    let start = Instant::now();
    drop(provider);
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_bad_packet_from_the_manager_ends_the_session() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let manager = FakeManager::new();
    let (provider, mut s) = connect(&manager, BufferingMode::Streaming, 64 << 10, &[]);
    s.send(&Message::Start {
        disposition: BufferDisposition::ClearEntire,
    });
    assert!(provider.wait_started(Duration::from_secs(5)));
    // STARTED is a provider → manager code.
    transport::send_packet(
        s.fifo.as_fd(),
        &FifoPacket::new(fxtrace::protocol::fifo::STARTED, 0, 1, 0),
    )
    .unwrap();
    // Noticed within the control thread's check interval (100 ms).
    let deadline = Instant::now() + Duration::from_secs(5);
    while provider.state() != ProviderState::Disconnected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(provider.state(), ProviderState::Disconnected);
    let reason = provider.end_reason().unwrap();
    assert!(reason.contains("protocol violation"), "{reason}");
    assert_eq!(provider.context().state(), TraceState::Stopped);
}

#[test]
fn alerts_reach_the_manager() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let manager = FakeManager::new();
    let (provider, s) = connect(&manager, BufferingMode::Circular, 64 << 10, &[]);
    assert!(fxtrace::alert("oom").unwrap());
    assert!(provider.alert("quota-15-bytes!").is_err());
    assert!(provider.alert("disk-full").unwrap());
    let names: Vec<String> = (0..2)
        .map(|_| match s.packet(Duration::from_secs(5)) {
            Some(ProviderPacket::Alert { name }) => name.to_string_lossy(),
            other => panic!("expected an alert, got {other:?}"),
        })
        .collect();
    assert_eq!(names, ["oom", "disk-full"]);
    drop(provider);
    // The handle is gone: the process-wide alert has no provider.
    assert!(!fxtrace::alert("oom").unwrap());
}

#[test]
fn a_manager_that_never_answers_register_is_bounded() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("mute.sock");
    let listener = transport::ControlListener::bind(&path).unwrap();
    let opts = ProviderOptions {
        handshake_timeout: Duration::from_millis(200),
        ..options(&path)
    };
    let start = Instant::now();
    let got = Provider::connect_with("x", &opts);
    let took = start.elapsed();
    assert!(got.is_err(), "a silent manager is an error, not a hang");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    drop(listener);
}

/// Send `frame` one byte every `pause`, until it is all sent or a write fails; the time the
/// write failed (the provider closed its end), if one did.
fn trickle(conn: &transport::ControlConn, frame: &[u8], pause: Duration) -> Option<Instant> {
    use nix::sys::socket::{send, MsgFlags};
    use std::os::fd::AsRawFd;
    for byte in frame {
        std::thread::sleep(pause);
        let sent = send(
            conn.as_fd().as_raw_fd(),
            std::slice::from_ref(byte),
            MsgFlags::MSG_NOSIGNAL,
        );
        if sent.is_err() {
            return Some(Instant::now());
        }
    }
    None
}

/// The frame of an Initialize that claims a body of `len` bytes (only its start is ever sent).
fn long_frame(len: u32) -> Vec<u8> {
    let mut frame = len.to_le_bytes().to_vec();
    frame.extend_from_slice(&[1, 0, 2, 0]); // version 1, tag 2 (Initialize)
    frame.resize(8 + 64, 0);
    frame
}

/// The next connection to `listener`, once it has sent its Register.
fn accept_register(listener: &transport::ControlListener) -> transport::ControlConn {
    let mut conn = listener.accept().unwrap();
    conn.set_recv_timeout(Some(Duration::from_secs(5))).unwrap();
    assert!(matches!(
        conn.recv_msg().unwrap().0,
        Message::Register { .. }
    ));
    conn
}

/// `got` is the error of a handshake given up on in the middle of the manager's answer.
fn assert_stalled_mid_frame<T: std::fmt::Debug>(got: &Result<T, fxtrace::provider::ProviderError>) {
    assert!(
        matches!(
            got,
            Err(fxtrace::provider::ProviderError::Transport(
                transport::TransportError::StalledMidFrame { .. }
            ))
        ),
        "{got:?}"
    );
}

/// A manager (of this uid) that answers Register one byte at a time, each byte within the
/// receive timeout: the whole handshake still ends at its deadline. (Per `recv`, a byte every
/// 300 ms kept a 1 s timeout from ever expiring: the 72 bytes sent here took 22 s.)
#[test]
fn a_manager_trickling_its_answer_is_given_up_on_at_the_handshake_deadline() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("trickle.sock");
    let listener = transport::ControlListener::bind(&path).unwrap();
    let manager = std::thread::spawn(move || {
        let conn = accept_register(&listener);
        trickle(&conn, &long_frame(60_000), Duration::from_millis(300))
    });
    let opts = ProviderOptions {
        handshake_timeout: Duration::from_secs(1),
        ..options(&path)
    };
    let start = Instant::now();
    let got = Provider::connect_with("trickled", &opts);
    let took = start.elapsed();
    assert_stalled_mid_frame(&got);
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(manager.join().unwrap().is_some(), "the provider hung up");
}

/// `join_or_follow` (what `fxtrace::connect` runs under `FXTRACE_SOCKET`) registers again
/// without Register's features with a manager that hung up on them: both tries share one
/// handshake deadline. Here the manager hangs up after 1 s, then trickles its answer to the
/// second try: the provider hangs up at the first try's deadline, 2 s after it began (it
/// used to start a new 2 s on the second try, and hung up after 3 s).
#[test]
fn the_second_register_of_join_or_follow_is_within_the_first_ones_deadline() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("old.sock");
    let listener = transport::ControlListener::bind(&path).unwrap();
    let manager = std::thread::spawn(move || {
        let conn = accept_register(&listener);
        let first = Instant::now();
        std::thread::sleep(Duration::from_secs(1));
        drop(conn);
        let conn = accept_register(&listener);
        trickle(&conn, &long_frame(60_000), Duration::from_millis(100))
            .map(|hung_up| hung_up.duration_since(first))
    });
    let opts = ProviderOptions {
        handshake_timeout: Duration::from_secs(2),
        ..options(&path)
    };
    let got = fxtrace::provider::join_or_follow("old", &opts, Box::new(|_| Box::new(())));
    assert_stalled_mid_frame(&got);
    let hung_up = manager.join().unwrap().expect("the provider hung up");
    assert!(
        hung_up < Duration::from_millis(2600),
        "hung up {hung_up:?} after its first Register"
    );
}

/// A program following the trace service (`examples/service`) that a service registered and
/// then sends Initialize one byte at a time: the service thread gives up on the message at the
/// handshake deadline (2 s) and hangs up, instead of waiting for as long as the bytes come.
#[test]
fn an_initialize_trickled_to_an_idle_provider_is_given_up_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fxtrace.sock");
    let listener = transport::ControlListener::bind(&path).unwrap();
    let mut program = std::process::Command::new(support::example("service"))
        .arg("30")
        .env("FXTRACE_SOCKET", "")
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut conn = listener.accept().unwrap();
    conn.set_recv_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let registered = conn.recv_msg();
    assert!(
        matches!(
            registered,
            Ok((
                Message::Register {
                    waits_for_session: true,
                    ..
                },
                _
            ))
        ),
        "{registered:?}"
    );
    conn.send_msg(
        &Message::Registered {
            provider_id: 1,
            joining: false,
        },
        &[],
    )
    .unwrap();
    let start = Instant::now();
    let hung_up = trickle(&conn, &long_frame(60_000), Duration::from_millis(300));
    let _ = program.kill();
    let _ = program.wait();
    let hung_up = hung_up
        .expect("the provider never hung up")
        .duration_since(start);
    assert!(
        hung_up < Duration::from_secs(5),
        "hung up after {hung_up:?}"
    );
}

/// A provider tracing for a fake manager, whose four descriptors (control socket, FIFO,
/// wake-up pipe; the buffer's memfd is closed once mapped) a daemon then closes, opening files
/// of its own under the same numbers.
fn provider_robbed_of_its_descriptors() -> (
    Provider,
    support::FakeSession,
    FakeManager,
    Vec<(i32, std::fs::File)>,
) {
    use std::os::fd::AsRawFd;

    let manager = FakeManager::new();
    // By file, not by number: a number closed by a thread of an earlier test and given to
    // this provider is one of its descriptors.
    let before = open_fd_files();
    let (provider, mut s) = connect(&manager, BufferingMode::Oneshot, 64 << 10, &[]);
    s.send(&Message::Start {
        disposition: BufferDisposition::ClearEntire,
    });
    assert!(provider.wait_started(Duration::from_secs(5)));
    assert_eq!(write_events(&provider, 10), 10);
    // The provider's descriptors: everything new except the fake manager's side.
    let manager_side = [
        s.conn.as_fd().as_raw_fd(),
        s.fifo.as_raw_fd(),
        s.buffer.fd().unwrap().as_raw_fd(),
    ];
    let ours: Vec<i32> = opened_since(&before)
        .into_iter()
        .filter(|fd| !manager_side.contains(fd))
        .collect();
    assert_eq!(
        ours.len(),
        4,
        "control socket, FIFO, wake-up pipe (the memfd is closed once mapped): {ours:?}"
    );
    let files = take_over(&ours);
    (provider, s, manager, files)
}

#[test]
fn a_program_closing_the_providers_descriptors_ends_the_session_at_the_next_message() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (provider, mut s, _manager, mut files) = provider_robbed_of_its_descriptors();
    // Closing the wake-up pipe's write end woke the control thread (POLLHUP on the read end);
    // had the program closed only the socket, the manager's next message would. The socket
    // may be gone already, hence the ignored error.
    let _ = s.conn.send_msg(&Message::Stop, &[]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while provider.state() != ProviderState::Disconnected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(provider.state(), ProviderState::Disconnected);
    let reason = provider.end_reason().unwrap();
    assert!(
        reason.contains("the program closed fxtrace's descriptor")
            && reason.ends_with("tracing stopped; data already written is kept"),
        "{reason}"
    );
    assert_eq!(provider.context().state(), TraceState::Stopped);
    // The reason is in the trace too, once.
    let mut bytes = vec![0u8; s.buffer.size() as usize];
    s.buffer.read_at(0, &mut bytes).unwrap();
    let needle = b"tracing stopped; data already written is kept";
    assert_eq!(
        bytes.windows(needle.len()).filter(|w| w == needle).count(),
        1,
        "one Log record with the reason"
    );
    let abandoned = fxtrace::fd_guard::abandoned();
    let start = Instant::now();
    drop(provider);
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(
        fxtrace::fd_guard::abandoned() >= abandoned + 3,
        "the wake-up pipe's ends and the FIFO are left alone and counted (the control \
         socket was counted at the end)"
    );
    assert_intact(&mut files);
}

#[test]
fn dropping_a_provider_robbed_of_its_descriptors_stops_tracing_and_closes_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (provider, _s, _manager, mut files) = provider_robbed_of_its_descriptors();
    let context = provider.context().clone();
    let start = Instant::now();
    drop(provider);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "no join on a thread nobody wakes"
    );
    assert_eq!(
        context.state(),
        TraceState::Stopped,
        "after the drop: {:?}",
        context.stop(Duration::from_millis(10))
    );
    assert_intact(&mut files);
}

/// A manager of control revision 1 does not know Register's trailing clock field: it refuses
/// the frame and closes the connection. The provider registers again without the field, and
/// traces, measuring its own clock.
#[test]
fn a_manager_that_refuses_the_clock_field_gets_a_second_register_without_it() {
    use fxtrace::buffer::TraceBuffer;
    use fxtrace::protocol::transport::ControlListener;

    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old-manager.sock");
    let listener = ControlListener::bind(&path).unwrap();
    // Whether the connection's Register carries the clock field.
    fn accepts_ticks_per_second(conn: &mut transport::ControlConn) -> bool {
        conn.set_recv_timeout(Some(Duration::from_secs(5))).unwrap();
        match conn.recv_msg().unwrap().0 {
            Message::Register {
                accepts_ticks_per_second,
                ..
            } => accepts_ticks_per_second,
            other => panic!("expected Register, got {other:?}"),
        }
    }
    let old_manager = std::thread::spawn(move || {
        let mut asked = Vec::new();
        // First connection: the field is there; an old decoder refuses it and hangs up.
        let mut conn = listener.accept().unwrap();
        asked.push(accepts_ticks_per_second(&mut conn));
        drop(conn);
        // Second connection: a revision-1 Register, answered as an old manager does.
        let mut conn = listener.accept().unwrap();
        asked.push(accepts_ticks_per_second(&mut conn));
        let buffer = TraceBuffer::create(64 << 10).unwrap();
        let (fifo, theirs) = transport::fifo_pair().unwrap();
        conn.send_msg(
            &Message::Initialize {
                buffering_mode: BufferingMode::Oneshot,
                categories: Vec::new(),
                provider_id: 7,
                ticks_per_second: None,
            },
            &[buffer.fd().unwrap(), theirs.as_fd()],
        )
        .unwrap();
        (asked, conn, fifo, buffer)
    });
    let options = ProviderOptions {
        socket_path: Some(path),
        ..ProviderOptions::default()
    };
    assert!(
        options.accept_manager_clock,
        "the default asks for the rate"
    );
    let provider = Provider::connect_with("old-manager-client", &options)
        .expect("registered on the second try")
        .expect("a manager is listening");
    let (asked, _conn, _fifo, _buffer) = old_manager.join().unwrap();
    assert_eq!(asked, [true, false], "with the clock field, then without");
    assert_eq!(provider.id(), 7);
    assert!(provider.clock_handoff().is_none(), "no rate came");
}

//! The manager's clock rate reaches its providers: a provider that connects before anything
//! in its process read the clock takes the rate from Initialize (no measurement) and writes it
//! in its initialization record; a later one finds the clock determined and says so; the real
//! manager sends its own rate only to providers that ask.
//!
//! One test function: the process has one clock, and its first reader decides it.

use std::os::fd::AsFd;
use std::time::Duration;

use fxtrace::buffer::header::{copy_records, HEADER_SIZE};
use fxtrace::buffer::TraceBuffer;
use fxtrace::clock::{self, ClockSetError, ClockSource};
use fxtrace::protocol::control::{BufferDisposition, BufferingMode, Message};
use fxtrace::protocol::fifo::ProviderPacket;
use fxtrace::protocol::transport::{self, ControlConn, ControlListener};
use fxtrace::provider::{Provider, ProviderOptions};
use fxtrace_format::{DecodedRecord, Decoder};
use fxtrace_tools::manager::{Manager, ManagerConfig, SessionConfig};

/// A rate no real TSC here has, so that the records show where it came from.
const GIVEN: u64 = 1_234_567_890;

/// Play the manager for one provider: answer its Register with Initialize carrying `rate`
/// (if it asked), start it, and return whether it asked, the buffer and the connection.
fn fake_manager(listener: &ControlListener, rate: u64) -> (bool, TraceBuffer, ControlConn) {
    let mut conn = listener.accept().expect("accept");
    conn.set_recv_timeout(Some(Duration::from_secs(5))).unwrap();
    let (msg, _) = conn.recv_msg().expect("register");
    let Message::Register {
        accepts_ticks_per_second,
        ..
    } = msg
    else {
        panic!("expected Register, got {msg:?}");
    };
    let buffer = TraceBuffer::create(64 << 10).unwrap();
    let (mine, theirs) = transport::fifo_pair().unwrap();
    conn.send_msg(
        &Message::Initialize {
            buffering_mode: BufferingMode::Circular,
            categories: Vec::new(),
            provider_id: 1,
            ticks_per_second: accepts_ticks_per_second.then_some(rate),
        },
        &[buffer.fd().unwrap(), theirs.as_fd()],
    )
    .unwrap();
    conn.send_msg(
        &Message::Start {
            disposition: BufferDisposition::ClearEntire,
        },
        &[],
    )
    .unwrap();
    // STARTED on the FIFO: the initialization record is in place.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(Some(p)) = transport::try_recv_packet(mine.as_fd()) {
            assert_eq!(ProviderPacket::parse(&p).unwrap(), ProviderPacket::STARTED);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no STARTED");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::mem::forget(mine); // keep the FIFO open for as long as the provider lives
    (accepts_ticks_per_second, buffer, conn)
}

/// The ticks per second of the first record of the durable buffer.
fn initialization_rate(buffer: &TraceBuffer) -> u64 {
    let bytes = buffer.copy_range(HEADER_SIZE, 16).unwrap();
    let mut out = Vec::new();
    copy_records(
        &bytes,
        16,
        fxtrace::buffer::header::Framing::Dense,
        &mut out,
    )
    .unwrap();
    match Decoder::bare(&out).next() {
        Some(Ok(d)) => match d.record {
            DecodedRecord::Initialization { ticks_per_second } => ticks_per_second,
            other => panic!("first durable record: {other:?}"),
        },
        other => panic!("no first durable record: {other:?}"),
    }
}

#[test]
fn the_managers_clock_rate_is_taken_before_first_use_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.sock");
    let listener = ControlListener::bind(&path).unwrap();
    let options = ProviderOptions {
        socket_path: Some(path.clone()),
        exit_hook: false,
        ..ProviderOptions::default()
    };

    // 1. Nothing read the clock yet: the provider takes the manager's rate.
    let (asked, buffer, _conn) = std::thread::scope(|s| {
        let manager = s.spawn(|| fake_manager(&listener, GIVEN));
        let provider = Provider::connect_with("first", &options).unwrap().unwrap();
        let got = manager.join().unwrap();
        assert_eq!(provider.clock_handoff(), Some(Ok(())));
        drop(provider);
        got
    });
    assert!(asked, "the provider asks for the rate");
    let info = clock::info();
    assert_eq!(
        (info.ticks_per_second, info.source, info.calibration),
        (GIVEN, ClockSource::Manager, None)
    );
    assert_eq!(initialization_rate(&buffer), GIVEN);

    // 2. The clock is determined now: a second rate is ignored, with the reason.
    let (_, buffer, _conn) = std::thread::scope(|s| {
        let manager = s.spawn(|| fake_manager(&listener, GIVEN + 1));
        let provider = Provider::connect_with("second", &options).unwrap().unwrap();
        let got = manager.join().unwrap();
        assert_eq!(
            provider.clock_handoff(),
            Some(Err(ClockSetError::AlreadyDetermined {
                ticks_per_second: GIVEN,
                origin: ClockSource::Manager
            }))
        );
        got
    });
    assert_eq!(initialization_rate(&buffer), GIVEN);

    // 3. A provider that does not ask gets no rate.
    let no_clock = ProviderOptions {
        accept_manager_clock: false,
        ..options.clone()
    };
    let (asked, _, _conn) = std::thread::scope(|s| {
        let manager = s.spawn(|| fake_manager(&listener, GIVEN));
        let provider = Provider::connect_with("third", &no_clock).unwrap().unwrap();
        assert_eq!(provider.clock_handoff(), None);
        manager.join().unwrap()
    });
    assert!(!asked);

    // 4. The real manager sends its own rate to a provider that asks, and only then.
    let socket = dir.path().join("m.sock");
    let config = ManagerConfig {
        session: SessionConfig {
            buffering_mode: BufferingMode::Oneshot,
            buffer_size_bytes: 64 << 10,
            ..SessionConfig::default()
        },
        ..ManagerConfig::new(&socket)
    };
    let mut manager = Manager::new(config, Box::new(std::io::sink())).unwrap();
    for accepts_ticks_per_second in [true, false] {
        let mut conn = ControlConn::connect(&socket, Duration::from_secs(1)).unwrap();
        conn.set_recv_timeout(Some(Duration::from_secs(5))).unwrap();
        conn.send_msg(
            &Message::Register {
                pid: std::process::id(),
                name: "raw".into(),
                known_categories: Vec::new(),
                accepts_ticks_per_second,
                waits_for_session: false,
            },
            &[],
        )
        .unwrap();
        let mut reply = None;
        for _ in 0..100 {
            manager
                .poll(&[], Some(Duration::from_millis(20)))
                .expect("poll");
            conn.set_recv_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            if let Ok((msg, _)) = conn.recv_msg() {
                reply = Some(msg);
                break;
            }
        }
        let Some(Message::Initialize {
            ticks_per_second, ..
        }) = reply
        else {
            panic!("no Initialize: {reply:?}");
        };
        let expected = accepts_ticks_per_second.then_some(clock::info().ticks_per_second);
        assert_eq!(ticks_per_second, expected);
    }
    drop(manager);
}

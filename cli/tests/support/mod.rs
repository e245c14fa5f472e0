//! Shared helpers for the provider, manager and record tests: the probe program, archive
//! decoding, a scripted (possibly hostile) fake provider speaking the raw protocol, a fake
//! manager, and an in-process manager driver.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fxtrace::buffer::header::{self, BufferGeometry, HeaderFields};
use fxtrace::buffer::TraceBuffer;
use fxtrace::protocol::control::{BufferDisposition, BufferingMode, Message};
use fxtrace::protocol::fifo::{FifoPacket, ProviderPacket};
use fxtrace::protocol::transport::{self, ControlConn, ControlListener, TransportError};
use fxtrace_format::{DecodedRecord, DecodedValue, Decoder};
use fxtrace_tools::manager::{Manager, ManagerEvent};

// === the probe program ===

/// `examples/provider_probe`, built next to the test binaries (`cargo test` builds examples;
/// when it is missing, e.g. with `cargo test --test NAME`, it is built here once).
pub fn probe() -> PathBuf {
    example("provider_probe")
}

/// The example program `name`, built next to the test binaries (see [`probe`]).
pub fn example(name: &str) -> PathBuf {
    static PATHS: std::sync::Mutex<BTreeMap<String, PathBuf>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut paths = PATHS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = paths.get(name) {
        return path.clone();
    }
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = profile_dir.join("examples").join(name);
    let release = profile_dir.ends_with("release");
    // Always ask cargo: a no-op when up to date, a rebuild when the example changed.
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet", "-p", "fxtrace", "--example", name])
        .current_dir(crate::WORKSPACE);
    if release {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
    assert!(status.success(), "building examples/{name} failed");
    assert!(path.exists(), "{} missing after the build", path.display());
    paths.insert(name.to_owned(), path.clone());
    path
}

/// A copy of the executable `exe` in `dir`, runnable by every user: a process run as another
/// uid cannot reach the build's own target directory when the repository is cloned under a
/// mode-0700 home directory (root's, typically), so such tests run this copy instead.
pub fn runnable_by_all(exe: &Path, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let name = exe.file_name().expect("an executable's file name");
    let copy = dir.join(name);
    std::fs::copy(exe, &copy).expect("copy the executable");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))
        .expect("make the copy executable by all");
    copy
}

/// What the probe printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeReport {
    pub connected: Option<u32>,
    pub pid: Option<u32>,
    pub written: u64,
    pub dropped: u64,
    pub last_seq: Option<u64>,
    pub progress: Option<u64>,
    pub lines: Vec<String>,
}

pub fn parse_probe(stdout: &str) -> ProbeReport {
    let mut r = ProbeReport::default();
    for line in stdout.lines() {
        r.lines.push(line.to_string());
        for field in line.split_whitespace() {
            let Some((k, v)) = field.split_once('=') else {
                continue;
            };
            match k {
                "connected" => r.connected = v.parse().ok(),
                "pid" => r.pid = v.parse().ok(),
                "written" => r.written = v.parse().unwrap_or(0),
                "dropped" => r.dropped = v.parse().unwrap_or(0),
                "last_seq" => r.last_seq = v.parse().ok(),
                "progress" => r.progress = v.parse().ok(),
                _ => {}
            }
        }
    }
    r
}

/// Start the probe against `socket` with `args`, stdout piped.
pub fn spawn_probe(socket: &Path, args: &[&str]) -> Child {
    Command::new(probe())
        .args(args)
        .env(transport::SOCKET_ENV, socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn probe")
}

// === archive decoding ===

/// One probe event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ev {
    pub seq: u64,
    pub pid: u64,
    pub tid: u64,
    pub category: String,
    pub name: String,
}

/// One provider's part of an archive.
#[derive(Debug, Clone, Default)]
pub struct ProviderPart {
    pub name: String,
    /// Provider Info records seen (must be 1).
    pub infos: u64,
    /// Provider Section records seen.
    pub sections: u64,
    /// Provider Event "buffer overflow" records.
    pub overflows: u64,
    pub inits: u64,
    /// Probe events (category "probe"), in archive order.
    pub events: Vec<Ev>,
    /// The manager's markers about this provider (in the manager's section): names.
    pub markers: Vec<String>,
    /// Markers (category "fxtrace") in the section itself: not the manager's (a provider's
    /// own, or the kernel section's notes).
    pub section_markers: Vec<String>,
    /// Other records by kind.
    pub other: BTreeMap<&'static str, u64>,
}

/// A decoded archive, by provider id.
#[derive(Debug, Clone, Default)]
pub struct Archive {
    pub providers: BTreeMap<u32, ProviderPart>,
    /// Provider ids in the order their metadata records appear.
    pub section_order: Vec<u32>,
}

impl Archive {
    pub fn by_name(&self, name: &str) -> Vec<&ProviderPart> {
        self.providers.values().filter(|p| p.name == name).collect()
    }

    pub fn one(&self, name: &str) -> &ProviderPart {
        let found = self.by_name(name);
        assert_eq!(found.len(), 1, "providers named {name}: {:?}", self.names());
        found[0]
    }

    pub fn names(&self) -> Vec<String> {
        self.providers.values().map(|p| p.name.clone()).collect()
    }
}

/// Decode a whole archive, asserting it is well formed (magic first, then the wall-clock
/// anchor a recording writes, every record decodes and is in a provider section).
pub fn decode(bytes: &[u8]) -> Archive {
    let mut a = Archive::default();
    for (i, d) in Decoder::new(bytes).enumerate() {
        let d = d.unwrap_or_else(|e| panic!("record {i} does not decode: {e}"));
        if i == 0 {
            assert_eq!(d.record, DecodedRecord::Magic, "magic first");
            continue;
        }
        // The manager's wall-clock anchor, right after the magic, before any section.
        if i == 1 && fxtrace_tools::read::wall::WallClock::of(&d.record).is_some() {
            continue;
        }
        let id = d
            .provider
            .expect("every record after the magic is in a provider section");
        if id == fxtrace_format::MANAGER_PROVIDER_ID {
            // The manager's section: its markers, each about the provider its argument
            // names, on that process's "fxtrace" thread.
            if let DecodedRecord::Event(e) = &d.record {
                assert_eq!(
                    e.category, "fxtrace",
                    "only markers in the manager's section"
                );
                let of = e
                    .args
                    .iter()
                    .find_map(|a| match (a.name.as_ref(), &a.value) {
                        ("provider", DecodedValue::U64(v)) => Some(*v as u32),
                        _ => None,
                    });
                let of = of.expect("a manager's marker names its provider");
                assert_eq!(
                    e.thread.tid,
                    0x8000_0000 | e.thread.pid,
                    "on the process's marker thread"
                );
                let part = a.providers.entry(of).or_default();
                part.markers.push(e.name.to_string());
            }
            continue;
        }
        let part = a.providers.entry(id).or_default();
        match &d.record {
            DecodedRecord::ProviderInfo { name, .. } => {
                part.name = name.to_string();
                part.infos += 1;
                a.section_order.push(id);
            }
            DecodedRecord::ProviderSection { .. } => {
                part.sections += 1;
                a.section_order.push(id);
            }
            DecodedRecord::ProviderEvent { event, .. } => {
                assert_eq!(*event, 0, "buffer overflow event");
                part.overflows += 1;
            }
            DecodedRecord::Initialization { .. } => part.inits += 1,
            DecodedRecord::Event(e) if e.category == "fxtrace" => {
                part.section_markers.push(e.name.to_string());
            }
            DecodedRecord::Event(e) => {
                let seq = e
                    .args
                    .iter()
                    .find(|a| a.name == "seq")
                    .and_then(|a| match a.value {
                        DecodedValue::U64(v) => Some(v),
                        _ => None,
                    })
                    .expect("probe events carry a u64 seq");
                part.events.push(Ev {
                    seq,
                    pid: e.thread.pid,
                    tid: e.thread.tid,
                    category: e.category.to_string(),
                    name: e.name.to_string(),
                });
            }
            other => *part.other.entry(other.kind_name()).or_default() += 1,
        }
    }
    a
}

/// The seqs of thread `t`'s events, in archive order.
pub fn seqs_of_thread(events: &[Ev], t: u64) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e.seq >> 32 == t)
        .map(|e| e.seq & 0xffff_ffff)
        .collect()
}

// === in-process manager ===

/// A `Write` whose bytes the test can read while the manager owns it.
#[derive(Clone, Default)]
pub struct SharedOut(pub Arc<Mutex<Vec<u8>>>);

impl Write for SharedOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl SharedOut {
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

/// Poll `manager` until `done` says so (given every event so far), or panic after `limit`.
pub fn drive(
    manager: &mut Manager,
    events: &mut Vec<ManagerEvent>,
    limit: Duration,
    mut done: impl FnMut(&Manager, &[ManagerEvent]) -> bool,
) {
    let until = Instant::now() + limit;
    while !done(manager, events) {
        let left = until.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "timed out; events so far: {events:#?}");
        let out = manager
            .poll(&[], Some(left.min(Duration::from_millis(50))))
            .expect("manager poll");
        events.extend(out.events);
    }
}

pub fn registered(events: &[ManagerEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, ManagerEvent::ProviderRegistered { .. }))
        .count()
}

// === a scripted fake provider (raw protocol) ===

/// A provider written against the wire protocol only, to misbehave on purpose.
pub struct FakeProvider {
    pub conn: ControlConn,
    pub fifo: OwnedFd,
    pub buffer: TraceBuffer,
    pub id: u32,
    pub mode: BufferingMode,
}

impl FakeProvider {
    /// Connect and register as `name`; returns after Initialize.
    pub fn register(socket: &Path, name: &str) -> Self {
        let mut conn = ControlConn::connect(socket, Duration::from_secs(1)).expect("connect");
        conn.set_recv_timeout(Some(Duration::from_secs(5))).unwrap();
        conn.send_msg(
            &Message::Register {
                pid: std::process::id(),
                name: name.into(),
                known_categories: Vec::new(),
                accepts_ticks_per_second: false,
                waits_for_session: false,
            },
            &[],
        )
        .expect("register");
        let (msg, mut fds) = conn.recv_msg().expect("initialize");
        let Message::Initialize {
            buffering_mode,
            provider_id,
            ..
        } = msg
        else {
            panic!("expected Initialize, got {msg:?}");
        };
        let fifo = fds.pop().unwrap();
        let buffer = TraceBuffer::from_fd(fds.pop().unwrap()).expect("map buffer");
        Self {
            conn,
            fifo,
            buffer,
            id: provider_id,
            mode: buffering_mode,
        }
    }

    /// The next control message (None: closed).
    pub fn recv(&mut self) -> Option<Message> {
        match self.conn.recv_msg() {
            Ok((m, _)) => Some(m),
            Err(TransportError::PeerClosed) => None,
            Err(e) => panic!("fake provider recv: {e}"),
        }
    }

    /// Wait for Start (panics on anything else).
    pub fn expect_start(&mut self) -> BufferDisposition {
        match self.recv() {
            Some(Message::Start { disposition }) => disposition,
            other => panic!("expected Start, got {other:?}"),
        }
    }

    /// Wait until the manager closes the control connection (true) or something else arrives.
    pub fn wait_closed(&mut self) -> bool {
        loop {
            match self.conn.recv_msg() {
                Err(TransportError::PeerClosed) => return true,
                Err(TransportError::TimedOut { .. }) => return false,
                Err(_) => return true,
                Ok(_) => continue,
            }
        }
    }

    pub fn send(&self, p: FifoPacket) {
        transport::send_packet(self.fifo.as_fd(), &p).expect("send packet");
    }

    pub fn send_started(&self) {
        self.send(ProviderPacket::STARTED.to_packet());
    }

    /// Send raw bytes as one FIFO datagram.
    pub fn send_raw(&self, bytes: &[u8]) {
        let n = nix::sys::socket::send(
            self.fifo.as_raw_fd(),
            bytes,
            nix::sys::socket::MsgFlags::empty(),
        )
        .expect("send raw");
        assert_eq!(n, bytes.len());
    }

    pub fn recv_packet(&self, timeout: Duration) -> Option<FifoPacket> {
        let until = Instant::now() + timeout;
        loop {
            if let Ok(Some(p)) = transport::try_recv_packet(self.fifo.as_fd()) {
                return Some(p);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn geometry(&self) -> BufferGeometry {
        let mode = header::BufferingMode::from_raw(self.mode.to_engine()).unwrap();
        BufferGeometry::compute(mode, self.buffer.size()).unwrap()
    }

    /// Write a valid header (dense layout, chunk size 0).
    pub fn init_header(&self) -> HeaderFields {
        let fields = HeaderFields::initial(&self.geometry(), 0);
        self.buffer.header().store(&fields);
        fields
    }

    /// Write `words` at byte `offset` of the buffer.
    pub fn put_words(&self, offset: u64, words: &[u64]) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let n = nix::sys::uio::pwrite(self.buffer.fd().unwrap(), &bytes, offset as i64)
            .expect("pwrite");
        assert_eq!(n, bytes.len());
    }
}

/// An FXT initialization record (2 words) at 1 tick per ns.
pub const INIT_RECORD: [u64; 2] = [0x21, 1_000_000_000];

/// A 2-word FXT record the decoder accepts: an initialization record.
pub fn filler_records(n: usize) -> Vec<u64> {
    (0..n).flat_map(|_| INIT_RECORD).collect()
}

// === a fake manager (for the provider tests) ===

/// A manager written against the wire protocol only.
pub struct FakeManager {
    pub listener: ControlListener,
    pub dir: tempfile::TempDir,
}

/// One accepted provider, as the fake manager sees it.
pub struct FakeSession {
    pub conn: ControlConn,
    pub fifo: OwnedFd,
    pub buffer: TraceBuffer,
    pub registered_pid: u32,
    pub registered_name: String,
}

impl FakeManager {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let listener = ControlListener::bind(&dir.path().join("fake.sock")).unwrap();
        Self { listener, dir }
    }

    pub fn path(&self) -> &Path {
        self.listener.path()
    }

    /// Accept one provider and answer its Register with Initialize.
    pub fn accept(&self, mode: BufferingMode, size: u64, categories: &[&str]) -> FakeSession {
        let mut conn = self.listener.accept().expect("accept");
        conn.set_recv_timeout(Some(Duration::from_secs(5))).unwrap();
        let (msg, _) = conn.recv_msg().expect("register");
        let Message::Register { pid, name, .. } = msg else {
            panic!("expected Register, got {msg:?}");
        };
        let buffer = TraceBuffer::create(size).unwrap();
        let (mine, theirs) = transport::fifo_pair().unwrap();
        conn.send_msg(
            &Message::Initialize {
                buffering_mode: mode,
                categories: categories.iter().map(|c| c.to_string()).collect(),
                provider_id: 7,
                ticks_per_second: None,
            },
            &[buffer.fd().unwrap(), theirs.as_fd()],
        )
        .unwrap();
        FakeSession {
            conn,
            fifo: mine,
            buffer,
            registered_pid: pid,
            registered_name: name,
        }
    }
}

impl FakeSession {
    pub fn send(&mut self, msg: &Message) {
        self.conn.send_msg(msg, &[]).expect("send");
    }

    /// The next FIFO packet within `timeout`.
    pub fn packet(&self, timeout: Duration) -> Option<ProviderPacket> {
        let until = Instant::now() + timeout;
        loop {
            match transport::try_recv_packet(self.fifo.as_fd()) {
                Ok(Some(p)) => return Some(ProviderPacket::parse(&p).expect("valid packet")),
                Ok(None) => {}
                Err(_) => return None,
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn header(&self) -> HeaderFields {
        self.buffer.header().load()
    }
}

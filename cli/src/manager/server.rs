//! The trace manager's event loop: the listener, the provider registry, and the carrying out
//! of [`Session`]'s commands.
//!
//! One thread, one `poll(2)` over the listener, a wake eventfd, every connection that has not
//! said who it is yet, every provider's control socket and FIFO, and whatever extra fds the
//! caller adds (a child's pidfd, …). Nothing spins: when nothing is ready the loop sleeps in
//! `poll` until the next session deadline.
//!
//! Per provider (`Tracee` in Fuchsia's trace_manager):
//!
//! - Register → the manager creates a zero-filled sealed memfd of the configured size and a
//!   FIFO pair, answers Initialize with [memfd, provider's FIFO end] and closes its copy of the
//!   provider's end (so a dead provider shows up as a hang-up). The provider initialises the
//!   header.
//! - FIFO packets are validated as `shared/spec/fuchsia-notes.md` §3.1 says. A packet that
//!   breaks the protocol (unknown request, wrong version, non-zero reserved data, wrong size, a
//!   second SAVE_BUFFER before BUFFER_SAVED was received, an invalid save request) closes that
//!   provider's FIFO and connection: it is marked lost with the reason and its further data is
//!   ignored. Everyone else's trace is untouched.
//! - SAVE_BUFFER (streaming) → [`Drain::save_buffer`] → BUFFER_SAVED.
//! - STOPPED, a lost connection or a Stop timeout → [`Drain::read_out`] (salvage from the
//!   manager's own mapping when the provider is gone).
//!
//! A second SAVE_BUFFER "before BUFFER_SAVED" is detected exactly: either two requests were
//! queued together before the manager answered the first, or the manager's previous
//! BUFFER_SAVED is still unread in the FIFO (`SIOCOUTQ`) when the new request is read — the
//! provider sent it without having received the answer.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::archive::{Archive, ArchiveError};
use super::conn::{FramedConn, ReadOutcome};
use super::drain::{Drain, DrainError, Restart};
use super::report::{ProviderReport, RefusedPeer};
use super::session::{
    Command, ProviderId, ProviderPhase, Session, SessionConfig, SessionState, StartError,
    StateError, StopError,
};
use fxtrace::engine::TraceBuffer;
use fxtrace::protocol::control::{
    BufferDisposition, BufferingMode, Message, ProviderEntry as StatusEntry, SessionFigures,
    MAX_OUTPUT_NAME_LEN,
};
use fxtrace::protocol::fifo::{ManagerPacket, ProviderPacket};
use fxtrace::protocol::header;
use fxtrace::protocol::transport::{self, ControlListener, ListenerOptions, TransportError};

/// Most providers one manager serves at once (each has a buffer).
pub const DEFAULT_MAX_PROVIDERS: usize = 256;
/// How long an accepted connection may take to say who it is.
pub const DEFAULT_REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);
/// Most FIFO packets read from one provider per loop turn (fairness).
const FIFO_BATCH: usize = 64;

/// Settings of a [`Manager`].
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Where to listen.
    pub socket_path: PathBuf,
    /// Socket file mode and peer policy (default: 0600, same uid or root).
    pub listener: ListenerOptions,
    /// The session (categories, buffer size, mode, timeouts).
    pub session: SessionConfig,
    /// Most providers at once; later ones are refused.
    pub max_providers: usize,
    /// How long an accepted connection may take to send its first message.
    pub registration_timeout: Duration,
    /// The output's name, as `fxtrace status` shows it (empty: unknown).
    pub output_name: String,
}

impl ManagerConfig {
    /// Defaults for everything but the socket path.
    pub fn new(socket_path: impl Into<PathBuf>) -> Self {
        Self {
            socket_path: socket_path.into(),
            listener: ListenerOptions::default(),
            session: SessionConfig::default(),
            max_providers: DEFAULT_MAX_PROVIDERS,
            registration_timeout: DEFAULT_REGISTRATION_TIMEOUT,
            output_name: String::new(),
        }
    }
}

/// Errors that end the manager (a single provider's failures never do).
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The listening socket could not be set up.
    #[error("cannot listen for providers: {0}")]
    Listen(#[source] TransportError),
    /// The configured buffer size is not usable.
    #[error(
        "buffer size {0} bytes is not usable: it must be a multiple of 4096 between 4 KiB and 4 GiB"
    )]
    BufferSize(u64),
    /// The wake eventfd or `poll` failed.
    #[error("{op}: {source}")]
    Sys {
        /// What failed.
        op: &'static str,
        /// The errno.
        source: Errno,
    },
    /// The archive could not be written.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// Something the caller may want to know or print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManagerEvent {
    /// A provider registered.
    ProviderRegistered {
        /// Its id.
        id: ProviderId,
        /// Its pid.
        pid: u32,
        /// Its name.
        name: String,
    },
    /// A provider was lost (and salvaged unless it broke the protocol).
    ProviderLost {
        /// Its id.
        id: ProviderId,
        /// Why.
        reason: String,
    },
    /// A provider disconnected cleanly (after STOPPED, or while idle).
    ProviderGone {
        /// Its id.
        id: ProviderId,
    },
    /// A provider's data was copied into the archive after it stopped or was lost.
    ProviderCollected {
        /// Its id.
        id: ProviderId,
    },
    /// A note about one provider (late Start, malformed record cut, …).
    ProviderProblem {
        /// Its id.
        id: ProviderId,
        /// What happened.
        message: String,
    },
    /// A provider raised an alert.
    Alert {
        /// The provider.
        id: ProviderId,
        /// The alert name (invalid UTF-8 replaced).
        name: String,
    },
    /// A connection was refused (peer of another user, too many providers, …).
    Refused {
        /// Peer pid, when known.
        pid: Option<i32>,
        /// Why.
        reason: String,
    },
    /// The session changed state.
    StateChanged(SessionState),
    /// Start was acknowledged (every provider started, or the start timeout passed).
    StartAcknowledged {
        /// Providers that did not answer in time.
        timed_out: Vec<ProviderId>,
    },
    /// Stop finished.
    StopAcknowledged {
        /// Providers that did not answer in time.
        timed_out: Vec<ProviderId>,
    },
    /// Terminate finished: the session is READY again.
    Terminated,
    /// [`Waker::wake`] was called.
    Woken,
}

/// What one [`Manager::poll`] turn produced.
#[derive(Debug, Default)]
pub struct PollOutcome {
    /// Events, in order.
    pub events: Vec<ManagerEvent>,
    /// Indices (into the `extra` slice) of extra fds that were ready.
    pub extra_ready: Vec<usize>,
}

/// Wakes a [`Manager`] blocked in [`Manager::poll`] from another thread (or a signal handler,
/// through [`Waker::raw_fd`]: a `write(2)` of 8 bytes is async-signal-safe).
#[derive(Debug, Clone)]
pub struct Waker {
    fd: Arc<EventFd>,
}

impl Waker {
    fn new() -> Result<Self, ManagerError> {
        let fd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).map_err(
            |source| ManagerError::Sys {
                op: "eventfd",
                source,
            },
        )?;
        Ok(Self { fd: Arc::new(fd) })
    }

    /// Make the manager's current or next `poll` return with [`ManagerEvent::Woken`].
    pub fn wake(&self) {
        // EAGAIN (counter saturated) still leaves it readable; nothing else can fail here.
        let _ = self.fd.write(1);
    }

    /// The eventfd, for a signal handler that writes an 8-byte 1 to it. Valid while any clone
    /// of this waker (or the manager) is alive.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_fd().as_raw_fd()
    }

    fn drain(&self) {
        let _ = self.fd.read();
    }
}

/// A connection that has not sent its first message yet.
#[derive(Debug)]
struct Pending {
    key: u64,
    conn: FramedConn,
    deadline: Instant,
}

/// Everything the manager holds for one provider.
#[derive(Debug)]
struct Tracee {
    id: ProviderId,
    pid: u32,
    name: String,
    conn: Option<FramedConn>,
    fifo: Option<OwnedFd>,
    /// The manager's mapping of the provider's buffer; released once the provider is gone and
    /// its data collected.
    buffer: Option<TraceBuffer>,
    drain: Drain,
    mode: BufferingMode,
    lost: Option<String>,
    /// After a protocol violation: no more data from this provider reaches the archive.
    ignore_data: bool,
    /// A BUFFER_SAVED was sent (for the "second SAVE_BUFFER" check).
    buffer_saved_sent: bool,
    problems: Vec<String>,
}

impl Tracee {
    /// Close the FIFO, then the control connection (a peer that sees the connection closed
    /// finds the FIFO closed too).
    fn close(&mut self) {
        self.fifo = None;
        self.conn = None;
    }

    fn report(&self) -> ProviderReport {
        let stats = self.drain.stats();
        let mut problems = self.problems.clone();
        problems.extend(stats.problems.iter().cloned());
        ProviderReport {
            id: self.id,
            pid: self.pid,
            name: self.name.clone(),
            mode: self.mode,
            records: stats.records,
            durable_bytes: stats.durable_bytes,
            rolling_bytes: stats.rolling_bytes,
            records_dropped: stats.records_dropped,
            wrapped_count: stats.wrapped_count,
            durable_buffer_used_percent: match stats.durable_buffer_size {
                0 => 0,
                size => (stats.durable_data_end.saturating_mul(100) / size) as u32,
            },
            saves: stats.saves,
            copy_time: stats.copy_time,
            lost: self.lost.clone(),
            problems,
        }
    }
}

/// What one batch of FIFO reading found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FifoRead {
    /// Nothing more to read now.
    Drained,
    /// A full batch: more may be waiting.
    More,
    /// The provider closed its end.
    Closed,
}

/// Where a poll entry points.
#[derive(Debug, Clone, Copy)]
enum Target {
    Listener,
    Waker,
    Pending(u64),
    Control(ProviderId),
    Fifo(ProviderId),
    Extra(usize),
}

/// The trace manager: one session, its providers, and the archive it writes.
pub struct Manager {
    config: ManagerConfig,
    listener: ControlListener,
    waker: Waker,
    session: Session,
    archive: Archive<Box<dyn Write + Send>>,
    /// The archive failed: the session was aborted and nothing more is written.
    archive_failed: Option<String>,
    tracees: BTreeMap<ProviderId, Tracee>,
    pending: Vec<Pending>,
    next_pending: u64,
    refused: Vec<RefusedPeer>,
    events: Vec<ManagerEvent>,
    /// When the manager was created (the figures' elapsed time).
    created: Instant,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("socket", &self.listener.path())
            .field("state", &self.session.state())
            .field("providers", &self.tracees.len())
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// Listen at `config.socket_path`, initialize the session, and start the archive on
    /// `output` (the magic number is written at once).
    pub fn new(config: ManagerConfig, output: Box<dyn Write + Send>) -> Result<Self, ManagerError> {
        let size = config.session.buffer_size_bytes;
        if !fxtrace::engine::buffer::is_valid_buffer_size(size) {
            return Err(ManagerError::BufferSize(size));
        }
        let listener = ControlListener::bind_with(&config.socket_path, config.listener)
            .map_err(ManagerError::Listen)?;
        listener
            .set_nonblocking(true)
            .map_err(ManagerError::Listen)?;
        let waker = Waker::new()?;
        let mut session = Session::new();
        // A fresh session is READY, so initialize cannot fail.
        let commands = session
            .initialize(config.session.clone())
            .unwrap_or_default();
        let archive = Archive::new(output)?;
        // Determine the clock rate now (a measurement takes ~30 ms on a machine whose CPUID
        // does not give it) rather than at the first registration, inside the event loop:
        // providers get it in Initialize.
        let _ = fxtrace::clock::info();
        let mut manager = Self {
            config,
            listener,
            waker,
            session,
            archive,
            archive_failed: None,
            tracees: BTreeMap::new(),
            pending: Vec::new(),
            next_pending: 0,
            refused: Vec::new(),
            events: Vec::new(),
            created: Instant::now(),
        };
        manager.run(commands, Instant::now());
        Ok(manager)
    }

    /// The socket providers connect to.
    pub fn socket_path(&self) -> &Path {
        self.listener.path()
    }

    /// A handle that wakes [`Self::poll`].
    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }

    /// The session (state, providers, known categories, queued alerts).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// `WatchAlert`: the oldest queued alert.
    pub fn watch_alert(&mut self) -> Option<String> {
        self.session.watch_alert()
    }

    /// `StartTracing`.
    pub fn start(&mut self, disposition: Option<BufferDisposition>) -> Result<(), StartError> {
        let now = Instant::now();
        let commands = self.session.start(disposition, now)?;
        self.run(commands, now);
        Ok(())
    }

    /// `StopTracing`. With `write_results`, each provider's buffer goes into the archive as it
    /// stops (or when the stop timeout salvages it). Completion is reported by
    /// [`ManagerEvent::StopAcknowledged`] from [`Self::poll`].
    pub fn stop(&mut self, write_results: bool) -> Result<(), StopError> {
        let now = Instant::now();
        let commands = self.session.stop(write_results, now)?;
        self.run(commands, now);
        Ok(())
    }

    /// `TerminateTracing`: providers are told to terminate; the session goes back to READY when
    /// they are gone or the stop timeout passes ([`ManagerEvent::Terminated`]).
    pub fn terminate(&mut self) -> Result<(), StateError> {
        let now = Instant::now();
        let commands = self.session.terminate(now)?;
        self.run(commands, now);
        Ok(())
    }

    /// Wait (at most `timeout`; `None` = until something happens) for activity, handle it, and
    /// return the events. `extra` fds are polled for readability too; their readiness is
    /// reported, nothing is read from them.
    pub fn poll(
        &mut self,
        extra: &[BorrowedFd<'_>],
        timeout: Option<Duration>,
    ) -> Result<PollOutcome, ManagerError> {
        let now = Instant::now();
        let mut wait = timeout;
        let mut shorten = |deadline: Instant| {
            let d = deadline.saturating_duration_since(now);
            wait = Some(wait.map_or(d, |w| w.min(d)));
        };
        if let Some(deadline) = self.session.deadline() {
            shorten(deadline);
        }
        for p in &self.pending {
            shorten(p.deadline);
        }
        if !self.events.is_empty() {
            wait = Some(Duration::ZERO);
        }

        let mut targets = Vec::new();
        let mut fds: Vec<PollFd<'_>> = Vec::new();
        let readable = PollFlags::POLLIN;
        fds.push(PollFd::new(self.listener.as_fd(), readable));
        targets.push(Target::Listener);
        fds.push(PollFd::new(self.waker.fd.as_fd(), readable));
        targets.push(Target::Waker);
        for p in &self.pending {
            fds.push(PollFd::new(p.conn.as_fd(), readable));
            targets.push(Target::Pending(p.key));
        }
        for t in self.tracees.values() {
            // FIFO first: packets sent before a close are handled before the close.
            if let Some(fifo) = &t.fifo {
                fds.push(PollFd::new(fifo.as_fd(), readable));
                targets.push(Target::Fifo(t.id));
            }
            if let Some(conn) = &t.conn {
                fds.push(PollFd::new(conn.as_fd(), readable));
                targets.push(Target::Control(t.id));
            }
        }
        for (i, fd) in extra.iter().enumerate() {
            fds.push(PollFd::new(*fd, readable));
            targets.push(Target::Extra(i));
        }
        let timeout = match wait {
            None => PollTimeout::NONE,
            // Round up to whole milliseconds so a sub-millisecond wait does not spin.
            Some(d) => {
                let ms = d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let ready: Vec<(Target, PollFlags)> = match poll(&mut fds, timeout) {
            Ok(_) => fds
                .iter()
                .zip(&targets)
                .filter_map(|(fd, t)| match fd.revents() {
                    Some(r) if !r.is_empty() => Some((*t, r)),
                    _ => None,
                })
                .collect(),
            Err(Errno::EINTR) => Vec::new(),
            Err(source) => return Err(ManagerError::Sys { op: "poll", source }),
        };
        drop(fds);

        let mut outcome = PollOutcome::default();
        for (target, revents) in ready {
            match target {
                Target::Listener => self.accept_all(),
                Target::Waker => {
                    self.waker.drain();
                    self.events.push(ManagerEvent::Woken);
                }
                Target::Pending(key) => self.read_pending(key),
                Target::Control(id) => self.read_control(id),
                Target::Fifo(id) => self.read_fifo(id, revents),
                Target::Extra(i) => outcome.extra_ready.push(i),
            }
        }
        let now = Instant::now();
        self.expire_pending(now);
        let commands = self.session.tick(now);
        self.run(commands, now);
        if let Some(reason) = &self.archive_failed {
            return Err(ManagerError::Archive(ArchiveError::Io(
                std::io::Error::other(reason.clone()),
            )));
        }
        outcome.events = std::mem::take(&mut self.events);
        Ok(outcome)
    }

    /// Take a provider id for a section the manager does not get from a provider (see
    /// [`Self::write_section`]).
    pub fn reserve_provider_id(&mut self) -> ProviderId {
        self.session.reserve_provider_id()
    }

    /// Append `records` (whole, well-framed FXT records; their framing is checked) to the
    /// archive in the section of `id` (from [`Self::reserve_provider_id`]), introduced as
    /// `name` the first time. Returns the number of records.
    pub fn write_section(
        &mut self,
        id: ProviderId,
        name: &str,
        records: &[u8],
    ) -> Result<u64, ManagerError> {
        if let Some(reason) = &self.archive_failed {
            return Err(ManagerError::Archive(ArchiveError::Io(
                std::io::Error::other(reason.clone()),
            )));
        }
        if self.archive.current_provider() != Some(id) {
            self.archive.begin_provider(id, name)?;
        }
        Ok(self.archive.write_records(records)?)
    }

    /// Per-provider statistics so far.
    pub fn reports(&self) -> Vec<ProviderReport> {
        self.tracees.values().map(Tracee::report).collect()
    }

    /// Connections refused for their credentials.
    pub fn refused(&self) -> &[RefusedPeer] {
        &self.refused
    }

    /// Bytes written to the archive so far.
    pub fn archive_bytes(&self) -> u64 {
        self.archive.bytes_written()
    }

    /// The session's running figures, read now (buffers' headers included): what
    /// `fxtrace status` and the progress line of `fxtrace record` show.
    pub fn snapshot(&self) -> SessionFigures {
        let mut buffered_bytes = 0;
        let mut records_dropped = 0;
        for t in self.tracees.values() {
            match &t.buffer {
                Some(buffer) if !t.ignore_data => {
                    let h = buffer.header().load();
                    // What the buffer holds now (in streaming mode, saved halves too).
                    buffered_bytes +=
                        h.durable_data_end + h.rolling_data_end[0] + h.rolling_data_end[1];
                    records_dropped += h.num_records_dropped;
                }
                _ => records_dropped += t.drain.stats().records_dropped,
            }
        }
        let session = self.session.config();
        SessionFigures {
            buffering_mode: session.buffering_mode,
            buffer_size_bytes: session.buffer_size_bytes,
            providers: self.tracees.values().filter(|t| t.conn.is_some()).count() as u32,
            records_written: self.archive.records_written(),
            bytes_written: self.archive.bytes_written(),
            buffered_bytes,
            records_dropped,
            elapsed_ns: u64::try_from(self.created.elapsed().as_nanos()).unwrap_or(u64::MAX),
            output: super::archive::truncate_str(&self.config.output_name, MAX_OUTPUT_NAME_LEN)
                .to_owned(),
        }
    }

    /// Flush the archive and close every connection. Returns the archive's size in bytes.
    pub fn finish(mut self) -> Result<u64, ManagerError> {
        for t in self.tracees.values_mut() {
            t.close();
        }
        self.archive.flush()?;
        Ok(self.archive.bytes_written())
    }

    // === connections ===

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok(conn) => {
                    let peer_pid = conn.peer_pid();
                    match FramedConn::new(conn) {
                        Ok(conn) => {
                            self.next_pending += 1;
                            self.pending.push(Pending {
                                key: self.next_pending,
                                conn,
                                deadline: Instant::now() + self.config.registration_timeout,
                            });
                        }
                        Err(e) => self.events.push(ManagerEvent::Refused {
                            pid: Some(peer_pid),
                            reason: format!("setting up the connection failed: {e}"),
                        }),
                    }
                }
                Err(TransportError::Sys {
                    source: Errno::EAGAIN,
                    ..
                }) => return,
                Err(TransportError::PeerRefused { pid, uid, .. }) => {
                    self.refused.push(RefusedPeer { pid, uid });
                    self.events.push(ManagerEvent::Refused {
                        pid: Some(pid),
                        reason: format!(
                            "peer pid {pid} runs as uid {uid}, not as this manager's user"
                        ),
                    });
                }
                Err(TransportError::Sys {
                    source: Errno::ECONNABORTED | Errno::EINTR,
                    ..
                }) => {}
                Err(e) => {
                    // EMFILE and the like: try again on the next turn.
                    self.events.push(ManagerEvent::Refused {
                        pid: None,
                        reason: format!("accept failed: {e}"),
                    });
                    return;
                }
            }
        }
    }

    fn expire_pending(&mut self, now: Instant) {
        let before = self.pending.len();
        self.pending.retain(|p| p.deadline > now);
        for _ in self.pending.len()..before {
            self.events.push(ManagerEvent::Refused {
                pid: None,
                reason: "a connection sent nothing within the registration timeout".into(),
            });
        }
    }

    fn read_pending(&mut self, key: u64) {
        let Some(index) = self.pending.iter().position(|p| p.key == key) else {
            return;
        };
        let pid = self.pending[index].conn.conn().peer_pid();
        let messages = match self.pending[index].conn.read_available() {
            Ok(ReadOutcome::Messages(m)) if m.is_empty() => return,
            Ok(ReadOutcome::Messages(m)) | Ok(ReadOutcome::Closed(m)) => m,
            Err(e) => {
                self.pending.swap_remove(index);
                self.events.push(ManagerEvent::Refused {
                    pid: Some(pid),
                    reason: format!("bad first message: {e}"),
                });
                return;
            }
        };
        let mut pending = self.pending.swap_remove(index);
        match messages.into_iter().next() {
            Some(Message::Register {
                pid: claimed,
                name,
                known_categories,
                accepts_ticks_per_second,
            }) => {
                let registration = Registration {
                    claimed_pid: claimed,
                    name,
                    known_categories,
                    accepts_ticks_per_second,
                };
                self.register(pending.conn, registration);
            }
            Some(Message::StatusRequest { figures }) => {
                let reply = self.status_reply(figures);
                // The client may be gone already; nothing to do about it.
                let _ = pending.conn.send(&reply, &[]);
            }
            Some(other) => self.events.push(ManagerEvent::Refused {
                pid: Some(pid),
                reason: format!("unexpected first message {}", other.name()),
            }),
            None => {} // closed before saying anything
        }
    }

    fn status_reply(&self, figures: bool) -> Message {
        let providers = self
            .session
            .providers()
            .filter(|p| p.phase != ProviderPhase::Lost)
            .map(|p| StatusEntry {
                id: p.id,
                pid: p.pid,
                name: p.name.clone(),
            })
            .take(fxtrace::protocol::control::MAX_STATUS_PROVIDERS)
            .collect();
        Message::StatusReply {
            state: self.session.state(),
            providers,
            categories: self.session.known_categories(),
            figures: figures.then(|| self.snapshot()),
        }
    }

    fn register(&mut self, mut conn: FramedConn, registration: Registration) {
        let Registration {
            claimed_pid,
            name,
            known_categories,
            accepts_ticks_per_second,
        } = registration;
        let peer_pid = conn.conn().peer_pid();
        let live = self.tracees.values().filter(|t| t.conn.is_some()).count();
        if live >= self.config.max_providers {
            self.events.push(ManagerEvent::Refused {
                pid: Some(peer_pid),
                reason: format!(
                    "provider {name:?} refused: {} providers already connected",
                    self.config.max_providers
                ),
            });
            return;
        }
        // SO_PEERCRED is authoritative (translated into this pid namespace).
        let pid = u32::try_from(peer_pid).unwrap_or(claimed_pid);
        let setup = TraceBuffer::create(self.config.session.buffer_size_bytes)
            .map_err(|e| e.to_string())
            .and_then(|buffer| {
                transport::fifo_pair()
                    .map(|fifo| (buffer, fifo))
                    .map_err(|e| e.to_string())
            });
        let (buffer, (manager_end, provider_end)) = match setup {
            Ok(v) => v,
            Err(e) => {
                self.events.push(ManagerEvent::Refused {
                    pid: Some(peer_pid),
                    reason: format!("provider {name:?}: cannot create its buffer: {e}"),
                });
                return;
            }
        };
        // A buffer made by `create` always keeps its descriptor.
        let memfd = match buffer.fd() {
            Ok(fd) => fd,
            Err(e) => {
                self.events.push(ManagerEvent::Refused {
                    pid: Some(peer_pid),
                    reason: format!("provider {name:?}: its buffer has no descriptor: {e}"),
                });
                return;
            }
        };
        let now = Instant::now();
        let (id, commands) = self.session.register_provider(pid, &name, known_categories);
        let mode = self.config.session.buffering_mode;
        let init = Message::Initialize {
            buffering_mode: mode,
            categories: self.config.session.categories.clone(),
            provider_id: id,
            // The TSC rate is the machine's: a provider that takes ours measures nothing.
            ticks_per_second: accepts_ticks_per_second
                .then(|| fxtrace::clock::info().ticks_per_second),
        };
        let sent = conn.send(&init, &[memfd, provider_end.as_fd()]);
        drop(provider_end);
        let engine_mode = header::BufferingMode::from_raw(mode.to_engine())
            .unwrap_or(header::BufferingMode::Oneshot);
        let mut problems = Vec::new();
        if claimed_pid != pid {
            problems.push(format!(
                "registered as pid {claimed_pid}, but the socket peer is pid {pid}"
            ));
        }
        self.tracees.insert(
            id,
            Tracee {
                id,
                pid,
                name: name.clone(),
                conn: Some(conn),
                fifo: Some(manager_end),
                buffer: Some(buffer),
                drain: Drain::new(engine_mode),
                mode,
                lost: None,
                ignore_data: false,
                buffer_saved_sent: false,
                problems,
            },
        );
        self.events
            .push(ManagerEvent::ProviderRegistered { id, pid, name });
        if let Err(e) = sent {
            self.lose(id, format!("sending Initialize failed: {e}"), true, now);
            return;
        }
        self.run(commands, now);
    }

    fn read_control(&mut self, id: ProviderId) {
        let Some(t) = self.tracees.get_mut(&id) else {
            return;
        };
        let Some(conn) = t.conn.as_mut() else {
            return;
        };
        let now = Instant::now();
        match conn.read_available() {
            Ok(ReadOutcome::Messages(m)) if m.is_empty() => {}
            Ok(ReadOutcome::Messages(m)) => {
                let what = m[0].name();
                self.lose(
                    id,
                    format!("protocol violation: unexpected {what} message on the control socket"),
                    true,
                    now,
                );
            }
            Ok(ReadOutcome::Closed(m)) if m.is_empty() => self.disconnected(id, now),
            Ok(ReadOutcome::Closed(m)) => {
                let what = m[0].name();
                self.lose(
                    id,
                    format!("protocol violation: unexpected {what} message on the control socket"),
                    true,
                    now,
                );
            }
            Err(e) => self.lose(id, format!("protocol violation: {e}"), true, now),
        }
    }

    /// The provider's connection (control socket or FIFO) closed.
    fn disconnected(&mut self, id: ProviderId, now: Instant) {
        // What the provider sent before closing still counts (a last SAVE_BUFFER, STOPPED):
        // the control socket's close may be seen before the FIFO's packets are read.
        while self
            .tracees
            .get(&id)
            .is_some_and(|t| t.fifo.is_some() && t.lost.is_none())
        {
            if self.process_fifo(id, PollFlags::empty()) != FifoRead::More {
                break;
            }
        }
        let Some(t) = self.tracees.get_mut(&id) else {
            return;
        };
        if t.lost.is_some() || (t.conn.is_none() && t.fifo.is_none()) {
            t.close();
            return;
        }
        let phase = self.session.provider(id).map(|p| p.phase);
        match phase {
            Some(ProviderPhase::Starting | ProviderPhase::Started | ProviderPhase::Stopping) => {
                self.lose(
                    id,
                    "connection closed without STOPPED (the process exited without stopping \
                     its provider, crashed or was killed); buffer salvaged from the manager's \
                     mapping"
                        .into(),
                    false,
                    now,
                );
            }
            _ => {
                t.close();
                self.events.push(ManagerEvent::ProviderGone { id });
                let commands = self.session.provider_terminated(id, now);
                self.run(commands, now);
                self.release_if_gone(id);
            }
        }
    }

    // === FIFO ===

    fn read_fifo(&mut self, id: ProviderId, revents: PollFlags) {
        if self.process_fifo(id, revents) == FifoRead::Closed {
            self.disconnected(id, Instant::now());
        }
    }

    /// Read and handle one batch of packets. A protocol violation drops the provider here; a
    /// close is reported to the caller.
    fn process_fifo(&mut self, id: ProviderId, revents: PollFlags) -> FifoRead {
        let now = Instant::now();
        let mut packets = Vec::new();
        let mut closed = false;
        let mut violation = None;
        {
            let Some(t) = self.tracees.get(&id) else {
                return FifoRead::Drained;
            };
            let Some(fifo) = t.fifo.as_ref() else {
                return FifoRead::Drained;
            };
            while packets.len() < FIFO_BATCH {
                match transport::try_recv_packet(fifo.as_fd()) {
                    Ok(Some(p)) => packets.push(p),
                    Ok(None) => break,
                    Err(TransportError::PeerClosed) => {
                        closed = true;
                        break;
                    }
                    Err(e) => {
                        violation = Some(format!("FIFO protocol violation: {e}"));
                        break;
                    }
                }
            }
            if packets.is_empty()
                && violation.is_none()
                && revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)
            {
                closed = true;
            }
        }
        let full = packets.len() == FIFO_BATCH;
        let saves = packets
            .iter()
            .filter(|p| p.request == fxtrace::protocol::fifo::SAVE_BUFFER)
            .count();
        let mut saves_seen = 0;
        for raw in packets {
            if !self.tracees.get(&id).is_some_and(|t| t.fifo.is_some()) {
                return FifoRead::Drained; // dropped while handling an earlier packet
            }
            let packet = match ProviderPacket::parse(&raw) {
                Ok(p) => p,
                Err(e) => {
                    self.lose(id, format!("FIFO protocol violation: {e}"), true, now);
                    return FifoRead::Drained;
                }
            };
            match packet {
                ProviderPacket::Started { .. } => {
                    let commands = self.session.provider_started(id, now);
                    self.run(commands, now);
                }
                ProviderPacket::Stopped => {
                    let commands = self.session.provider_stopped(id, now);
                    self.run(commands, now);
                }
                ProviderPacket::Alert { name } => {
                    let name = name.to_string_lossy();
                    self.session.alert(&name);
                    self.events.push(ManagerEvent::Alert { id, name });
                }
                ProviderPacket::SaveBuffer {
                    wrapped_count,
                    durable_data_end,
                } => {
                    saves_seen += 1;
                    if saves_seen > 1 && saves > 1 {
                        self.lose(
                            id,
                            "FIFO protocol violation: a second SAVE_BUFFER before BUFFER_SAVED \
                             (two requests queued together)"
                                .into(),
                            true,
                            now,
                        );
                        return FifoRead::Drained;
                    }
                    if self.save_buffer(id, wrapped_count, durable_data_end, now) {
                        // The provider closed its end after sending: the rest of the batch
                        // (typically STOPPED) is still valid.
                        closed = true;
                    }
                }
            }
        }
        if let Some(reason) = violation {
            self.lose(id, reason, true, now);
            FifoRead::Drained
        } else if closed {
            FifoRead::Closed
        } else if full {
            FifoRead::More
        } else {
            FifoRead::Drained
        }
    }

    /// Serve one SAVE_BUFFER. Returns true when the answer could not be sent because the
    /// provider has closed the FIFO (the caller finishes the batch, then handles the close).
    fn save_buffer(
        &mut self,
        id: ProviderId,
        wrapped_count: u32,
        durable_data_end: u64,
        now: Instant,
    ) -> bool {
        let phase = self.session.provider(id).map(|p| p.phase);
        let Some(t) = self.tracees.get_mut(&id) else {
            return false;
        };
        if t.mode != BufferingMode::Streaming
            || !matches!(
                phase,
                Some(ProviderPhase::Started | ProviderPhase::Stopping | ProviderPhase::Terminating)
            )
        {
            // trace_manager ignores these with a warning.
            let message = format!(
                "SAVE_BUFFER({wrapped_count}, {durable_data_end}) ignored: the provider is not \
                 streaming and started"
            );
            t.problems.push(message.clone());
            self.events
                .push(ManagerEvent::ProviderProblem { id, message });
            return false;
        }
        if t.buffer_saved_sent {
            if let Some(fifo) = &t.fifo {
                if unread_output(fifo.as_fd()) > 0 {
                    self.lose(
                        id,
                        "FIFO protocol violation: a second SAVE_BUFFER before BUFFER_SAVED \
                         (the previous BUFFER_SAVED is still unread)"
                            .into(),
                        true,
                        now,
                    );
                    return false;
                }
            }
        }
        if t.ignore_data || self.archive_failed.is_some() {
            return false;
        }
        let Some(buffer) = t.buffer.as_ref() else {
            return false;
        };
        let result = t.drain.save_buffer(
            buffer,
            &mut self.archive,
            id,
            &t.name,
            wrapped_count,
            durable_data_end,
        );
        match result {
            Ok(()) => {
                let answer = ManagerPacket::BufferSaved {
                    wrapped_count,
                    durable_data_end,
                }
                .to_packet();
                let Some(fifo) = t.fifo.as_ref() else {
                    return false;
                };
                match transport::try_send_packet(fifo.as_fd(), &answer) {
                    Ok(()) => t.buffer_saved_sent = true,
                    Err(TransportError::PeerClosed) => return true,
                    Err(e) => self.lose(id, format!("cannot answer BUFFER_SAVED: {e}"), true, now),
                }
            }
            Err(e) if e.is_archive() => self.archive_failure(e.to_string(), now),
            Err(e) => self.lose(id, format!("streaming save rejected: {e}"), true, now),
        }
        false
    }

    // === commands ===

    fn run(&mut self, commands: Vec<Command>, now: Instant) {
        let mut queue = std::collections::VecDeque::from(commands);
        while let Some(command) = queue.pop_front() {
            let more = self.execute(command, now);
            queue.extend(more);
        }
    }

    fn execute(&mut self, command: Command, now: Instant) -> Vec<Command> {
        match command {
            Command::StartProvider { id, disposition } => {
                if let Some(t) = self.tracees.get_mut(&id) {
                    t.drain.restart(match disposition {
                        BufferDisposition::ClearEntire => Restart::ClearEntire,
                        BufferDisposition::ClearNonDurable => Restart::ClearNonDurable,
                        BufferDisposition::Retain => Restart::Retain,
                    });
                    t.buffer_saved_sent = false;
                }
                self.send(id, &Message::Start { disposition }, now)
            }
            Command::StopProvider { id } => self.send(id, &Message::Stop, now),
            Command::TerminateProvider { id } => {
                let sent = self
                    .tracees
                    .get_mut(&id)
                    .and_then(|t| t.conn.as_mut())
                    .map(|c| c.send(&Message::Terminate, &[]).is_ok())
                    .unwrap_or(false);
                if sent {
                    Vec::new()
                } else {
                    if let Some(t) = self.tracees.get_mut(&id) {
                        t.close();
                    }
                    self.session.provider_terminated(id, now)
                }
            }
            Command::CollectProvider { id } => {
                self.collect(id);
                Vec::new()
            }
            Command::AcknowledgeStart { timed_out } => {
                let ms = self.config.session.start_timeout.as_millis();
                for &id in &timed_out {
                    self.problem(id, format!("did not answer Start within {ms} ms"));
                }
                self.events
                    .push(ManagerEvent::StartAcknowledged { timed_out });
                Vec::new()
            }
            Command::AcknowledgeStop { timed_out } => {
                let ms = self.config.session.stop_timeout.as_millis();
                for &id in &timed_out {
                    if let Some(t) = self.tracees.get_mut(&id) {
                        if t.lost.is_none() {
                            t.lost = Some(format!(
                                "did not answer Stop within {ms} ms; buffer salvaged"
                            ));
                            self.events.push(ManagerEvent::ProviderLost {
                                id,
                                reason: t.lost.clone().unwrap_or_default(),
                            });
                        }
                        t.close();
                        t.buffer = None;
                    }
                }
                self.events
                    .push(ManagerEvent::StopAcknowledged { timed_out });
                Vec::new()
            }
            Command::Terminated => {
                for t in self.tracees.values_mut() {
                    t.close();
                }
                self.events.push(ManagerEvent::Terminated);
                Vec::new()
            }
            Command::StateChanged(state) => {
                self.events.push(ManagerEvent::StateChanged(state));
                Vec::new()
            }
        }
    }

    /// Send a control message; a provider that cannot take it is lost (its data salvaged).
    fn send(&mut self, id: ProviderId, msg: &Message, now: Instant) -> Vec<Command> {
        let Some(t) = self.tracees.get_mut(&id) else {
            return Vec::new();
        };
        let Some(conn) = t.conn.as_mut() else {
            return Vec::new();
        };
        match conn.send(msg, &[]) {
            Ok(()) => Vec::new(),
            Err(e) => {
                let reason = format!("cannot send {}: {e}", msg.name());
                self.lose_commands(id, reason, false, now)
            }
        }
    }

    fn problem(&mut self, id: ProviderId, message: String) {
        if let Some(t) = self.tracees.get_mut(&id) {
            t.problems.push(message.clone());
        }
        self.events
            .push(ManagerEvent::ProviderProblem { id, message });
    }

    /// Mark a provider lost, close its FIFO and connection, and run the session's reaction
    /// (which salvages its buffer unless `ignore_data`).
    fn lose(&mut self, id: ProviderId, reason: String, ignore_data: bool, now: Instant) {
        let commands = self.lose_commands(id, reason, ignore_data, now);
        self.run(commands, now);
        self.release_if_gone(id);
    }

    /// Unmap the buffer of a provider that is gone: nothing can be collected from it any more
    /// (a lost provider is salvaged when it is lost; one that disconnected cleanly had
    /// stopped, or was idle).
    fn release_if_gone(&mut self, id: ProviderId) {
        if let Some(t) = self.tracees.get_mut(&id) {
            if t.conn.is_none() && t.fifo.is_none() {
                t.buffer = None;
            }
        }
    }

    fn lose_commands(
        &mut self,
        id: ProviderId,
        reason: String,
        ignore_data: bool,
        now: Instant,
    ) -> Vec<Command> {
        let Some(t) = self.tracees.get_mut(&id) else {
            return Vec::new();
        };
        if t.lost.is_some() {
            t.close();
            return Vec::new();
        }
        t.lost = Some(reason.clone());
        t.ignore_data |= ignore_data;
        t.close();
        self.events.push(ManagerEvent::ProviderLost {
            id,
            reason: reason.clone(),
        });
        self.session.provider_lost(id, &reason, now)
    }

    /// The final read-out of one provider into the archive, with its drop and loss markers.
    fn collect(&mut self, id: ProviderId) {
        if self.archive_failed.is_some() {
            return;
        }
        let Some(t) = self.tracees.get_mut(&id) else {
            return;
        };
        // A provider the session gave up on (Stop timeout) is salvaged now: say so first.
        if t.lost.is_none() {
            if let Some(reason) = self
                .session
                .provider(id)
                .filter(|p| p.phase == ProviderPhase::Lost)
                .and_then(|p| p.lost_reason.as_deref())
            {
                let reason = format!(
                    "{reason} ({} ms); buffer salvaged",
                    self.config.session.stop_timeout.as_millis()
                );
                t.lost = Some(reason.clone());
                self.events.push(ManagerEvent::ProviderLost { id, reason });
            }
        }
        if t.ignore_data {
            t.problems
                .push("its data was ignored after the protocol violation".into());
            return;
        }
        let Some(buffer) = t.buffer.as_ref() else {
            return;
        };
        let result = t.drain.read_out(buffer, &mut self.archive, id, &t.name);
        let outcome = match result {
            Ok(()) => {
                let dropped = t.drain.stats().records_dropped;
                let mut r = Ok(());
                if dropped > 0 {
                    r = self.archive.marker(
                        fxtrace::clock::ticks(),
                        u64::from(t.pid),
                        &format!("fxtrace: {dropped} records dropped"),
                        fxtrace::format::DROP_MARKER_ARG,
                        dropped,
                    );
                }
                r.map_err(DrainError::from)
            }
            Err(e) => Err(e),
        };
        let outcome = outcome.and_then(|()| match &t.lost {
            Some(reason) => {
                if self.archive.current_provider() != Some(id) {
                    self.archive.begin_provider(id, &t.name)?;
                }
                self.archive
                    .marker(
                        fxtrace::clock::ticks(),
                        u64::from(t.pid),
                        &format!("fxtrace: provider lost: {reason}"),
                        "pid",
                        u64::from(t.pid),
                    )
                    .map_err(DrainError::from)
            }
            None => Ok(()),
        });
        match outcome {
            Ok(()) => self.events.push(ManagerEvent::ProviderCollected { id }),
            Err(e) if e.is_archive() => self.archive_failure(e.to_string(), Instant::now()),
            Err(e) => {
                let message = format!("final read-out skipped: {e}");
                if t.lost.is_none() {
                    t.lost = Some(message.clone());
                    self.events.push(ManagerEvent::ProviderLost {
                        id,
                        reason: message,
                    });
                } else {
                    t.problems.push(message.clone());
                    self.events
                        .push(ManagerEvent::ProviderProblem { id, message });
                }
            }
        }
    }

    fn archive_failure(&mut self, reason: String, now: Instant) {
        if self.archive_failed.is_none() {
            self.archive_failed = Some(reason);
            let commands = self.session.abort(now);
            self.run(commands, now);
        }
    }
}

/// Bytes this end has sent that the peer has not read yet (`SIOCOUTQ`); 0 if unknown.
fn unread_output(fd: BorrowedFd<'_>) -> i32 {
    let mut queued: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (= TIOCOUTQ) writes one int through the pointer, which points at a live
    // local; the fd is borrowed for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if r < 0 {
        0
    } else {
        queued
    }
}

/// What a Register message asks for.
struct Registration {
    claimed_pid: u32,
    name: String,
    known_categories: Vec<String>,
    accepts_ticks_per_second: bool,
}

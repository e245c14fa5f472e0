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
//! - STOPPED, a lost connection or a Stop timeout → [`Drain::read_out`](super::Drain::read_out)
//!   (salvage from the manager's own mapping when the provider is gone).
//!
//! The parts live in their own files: `registry` (accepting, registration, the per-provider
//! record), `fifo` (the per-provider FIFO protocol), `executor` (the session's commands and
//! the final read-out), `status` (what the manager says of its session).

mod executor;
mod fifo;
mod registry;
mod status;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::archive::{Archive, ArchiveError, ArchiveOutput};
use super::conn::FramedConn;
use super::report::{Problems, ProviderReport, RefusedPeer};
use super::session::{
    ProviderId, Session, SessionConfig, SessionState, StartError, StateError, StopError,
};
use fxtrace::capture::procfs::ProcessImage;
use fxtrace::protocol::control::BufferDisposition;
use fxtrace::protocol::transport::{ControlListener, ListenerOptions, TransportError};
use fxtrace_format::CheckedRecords;
pub(crate) use registry::Registration;
use registry::{Pending, Tracee};

/// Most providers one manager serves at once (each has a buffer).
pub const DEFAULT_MAX_PROVIDERS: usize = 256;
/// How long an accepted connection may take to say who it is.
pub const DEFAULT_REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest message body accepted from a peer (Register, a status request): a larger one is
/// refused from its length prefix ("sent an oversized registration"), before it is buffered.
pub const MAX_REGISTRATION_BODY: usize = 8 << 10;
/// Most connections waiting to say who they are; a new one beyond this evicts the oldest.
pub const MAX_PENDING: usize = 64;
/// Most providers one process may have registered at once.
pub const DEFAULT_MAX_PER_PID: usize = 16;
/// Provider slots kept for the traced command's own processes (descendants of
/// [`ManagerConfig::traced_root`]); other peers get at most `max_providers` minus this.
pub const DEFAULT_RESERVED_FOR_TRACED: usize = 32;

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
    /// Most providers registered at once by one peer process.
    pub max_per_pid: usize,
    /// Most providers registered at once by one peer uid, outside the reserve.
    pub max_per_uid: usize,
    /// Slots of `max_providers` only the traced command's processes may take.
    pub reserved_for_traced: usize,
    /// The traced command (`fxtrace record -- CMD`): its descendants (and itself) may use the
    /// reserve. Set later with [`Manager::set_traced_root`].
    pub traced_root: Option<u32>,
    /// The output's name, as `fxtrace status` shows it (empty: unknown).
    pub output_name: String,
    /// The session's id, as `status` shows it (0: `fxtrace record`'s, its only one).
    pub session_id: u32,
    /// The user the session belongs to (the controller's; the recorder's own by default).
    pub owner_uid: u32,
    /// The session outlives its controller (a detached session of the trace service).
    pub detached: bool,
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
            max_per_pid: DEFAULT_MAX_PER_PID,
            max_per_uid: DEFAULT_MAX_PROVIDERS - DEFAULT_RESERVED_FOR_TRACED,
            reserved_for_traced: DEFAULT_RESERVED_FOR_TRACED,
            traced_root: None,
            output_name: String::new(),
            session_id: 0,
            owner_uid: nix::unistd::geteuid().as_raw(),
            detached: false,
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
        /// The program image its process ran when it registered, if `/proc` showed it: what
        /// tells an exec from a second provider of the same process.
        image: Option<ProcessImage>,
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
    pub(in crate::manager) fn new() -> Result<Self, ManagerError> {
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

    pub(in crate::manager) fn drain(&self) {
        let _ = self.fd.read();
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
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
    /// `None` for a session of the trace service: its providers are handed over
    /// ([`Manager::adopt`]), not accepted.
    listener: Option<ControlListener>,
    waker: Waker,
    session: Session,
    archive: Archive<Box<dyn ArchiveOutput + Send>>,
    /// The archive failed: the session was aborted and nothing more is written.
    archive_failed: Option<String>,
    tracees: BTreeMap<ProviderId, Tracee>,
    pending: Vec<Pending>,
    next_pending: u64,
    refused: Vec<RefusedPeer>,
    events: Vec<ManagerEvent>,
    /// When the manager was created (the status's elapsed time).
    created: Instant,
    /// The session's problems, as `status` lists them: its providers' (from the events) and
    /// those noted by whoever runs the session ([`Manager::note_problem`]).
    problems: Problems,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("socket", &self.config.socket_path)
            .field("state", &self.session.state())
            .field("providers", &self.tracees.len())
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// Listen at `config.socket_path`, initialize the session, and start the archive on
    /// `output` (the magic number is written at once).
    pub fn new(config: ManagerConfig, output: Box<dyn Write + Send>) -> Result<Self, ManagerError> {
        Self::with_output(config, Box::new(output))
    }

    /// [`Self::new`] on an output that may lend its memory to the archive ([`ArchiveOutput`]:
    /// the recorder's direct output).
    pub fn with_output(
        config: ManagerConfig,
        output: Box<dyn ArchiveOutput + Send>,
    ) -> Result<Self, ManagerError> {
        let size = config.session.buffer_size_bytes;
        if !fxtrace::buffer::is_valid_buffer_size(size) {
            return Err(ManagerError::BufferSize(size));
        }
        let listener = ControlListener::bind_with(&config.socket_path, config.listener)
            .map_err(ManagerError::Listen)?;
        listener
            .set_nonblocking(true)
            .map_err(ManagerError::Listen)?;
        Self::with_listener(config, Some(listener), output)
    }

    /// A manager that listens nowhere: a session of the trace service, whose providers are
    /// handed over with [`Self::adopt`] (`config.socket_path` is only shown).
    pub(crate) fn without_listener(
        config: ManagerConfig,
        output: Box<dyn Write + Send>,
    ) -> Result<Self, ManagerError> {
        let size = config.session.buffer_size_bytes;
        if !fxtrace::buffer::is_valid_buffer_size(size) {
            return Err(ManagerError::BufferSize(size));
        }
        Self::with_listener(config, None, Box::new(output))
    }

    fn with_listener(
        config: ManagerConfig,
        listener: Option<ControlListener>,
        output: Box<dyn ArchiveOutput + Send>,
    ) -> Result<Self, ManagerError> {
        let waker = Waker::new()?;
        let mut session = Session::new();
        // A fresh session is READY, so initialize cannot fail.
        let commands = session
            .initialize(config.session.clone())
            .unwrap_or_default();
        // Determine the clock rate now (a measurement takes ~30 ms on a machine whose CPUID
        // does not give it) rather than at the first registration, inside the event loop:
        // providers get it in Initialize, and the archive's wall-clock anchor reads it.
        let _ = fxtrace::clock::info();
        let archive = Archive::recording(output)?;
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
            problems: Problems::default(),
        };
        manager.run(commands, Instant::now());
        Ok(manager)
    }

    /// The socket providers connect to.
    pub fn socket_path(&self) -> &Path {
        self.listener
            .as_ref()
            .map_or(&self.config.socket_path, ControlListener::path)
    }

    /// Take in a provider the trace service registered (`conn`, its Register `registration`):
    /// it gets its buffer and Initialize now (and Start, if the session is tracing), as if it
    /// had registered here. The connection's credentials are the provider's own. Its id in
    /// this session, or `None` when it was refused (a [`ManagerEvent::Refused`] says why).
    pub(in crate::manager) fn adopt(
        &mut self,
        conn: FramedConn,
        registration: Registration,
    ) -> Option<ProviderId> {
        self.register(conn, registration)
    }

    /// Write what follows into a new archive on `output`, named `name` (the magic number
    /// first): a restart of the session given a new output file. The current archive is
    /// flushed first.
    pub(crate) fn replace_output(
        &mut self,
        output: Box<dyn Write + Send>,
        name: String,
    ) -> Result<(), ManagerError> {
        self.archive.flush()?;
        let output: Box<dyn ArchiveOutput + Send> = Box::new(output);
        self.archive = Archive::recording(output)?;
        self.config.output_name = name;
        Ok(())
    }

    /// Let the traced command `pid` and its descendants use the reserved provider slots.
    pub fn set_traced_root(&mut self, pid: u32) {
        self.config.traced_root = Some(pid);
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
        if let Some(listener) = &self.listener {
            fds.push(PollFd::new(listener.as_fd(), readable));
            targets.push(Target::Listener);
        }
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
        // New connections are accepted after the others are read, so that a connection that
        // has spoken is read before a flood of new ones could push it out.
        let mut accept = false;
        for (target, revents) in ready {
            match target {
                Target::Listener => accept = true,
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
        if accept {
            self.accept_all();
        }
        let now = Instant::now();
        self.expire_pending(now);
        let commands = self.session.tick(now);
        self.run(commands, now);
        // What this turn took is in the file before the next (the archive stages records).
        if self.archive_failed.is_none() {
            if let Err(e) = self.archive.flush() {
                self.archive_failure(format!("writing the trace: {e}"), now);
            }
        }
        if let Some(reason) = &self.archive_failed {
            return Err(ManagerError::Archive(ArchiveError::Io(
                std::io::Error::other(reason.clone()),
            )));
        }
        outcome.events = std::mem::take(&mut self.events);
        for event in &outcome.events {
            if let Some(line) = problem_of(event) {
                self.problems.push(line);
            }
        }
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
        let records = CheckedRecords::check(records).map_err(ArchiveError::Framing)?;
        if self.archive.current_provider() != Some(id) {
            self.archive.begin_provider(id, name)?;
        }
        // Handed to the output now, as a read-out is at the end of its turn (written, or queued
        // for `record`'s writer thread: `direct_output`): a section's batches come from outside
        // the event loop, which may sleep long before its next turn. A failed write ends the
        // session as one while reading a provider out does.
        let written = self
            .archive
            .write_records(records)
            .and_then(|written| self.archive.flush().map(|()| written));
        if let Err(e) = &written {
            self.archive_failure(e.to_string(), Instant::now());
        }
        Ok(written?)
    }

    /// Flush the archive's output (a stop of a session that goes on).
    pub fn flush_archive(&mut self) -> Result<(), ManagerError> {
        Ok(self.archive.flush()?)
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

    /// Flush the archive and close every connection. Returns the archive's size in bytes.
    pub fn finish(mut self) -> Result<u64, ManagerError> {
        for t in self.tracees.values_mut() {
            t.close();
        }
        self.archive.flush()?;
        Ok(self.archive.bytes_written())
    }
}

/// The line `status` keeps for `event`, if it is a problem: a provider lost, a provider's
/// problem, a connection refused.
fn problem_of(event: &ManagerEvent) -> Option<String> {
    match event {
        ManagerEvent::ProviderLost { id, reason } => Some(format!("provider {id} lost: {reason}")),
        ManagerEvent::ProviderProblem { id, message } => Some(format!("provider {id}: {message}")),
        ManagerEvent::Refused { reason, .. } => Some(reason.clone()),
        _ => None,
    }
}

/// Fixtures for the unit tests of the manager's parts: a manager on a temporary socket and a
/// hand-driven provider that speaks the wire protocol directly.
#[cfg(test)]
pub(crate) mod test_support {
    use std::os::fd::OwnedFd;
    use std::time::{Duration, Instant};

    use super::{Manager, ManagerConfig, ManagerEvent};
    use fxtrace::protocol::control::Message;
    use fxtrace::protocol::transport::ControlConn;

    /// A manager listening in a fresh temporary directory (kept alive with it).
    pub(crate) fn manager(tweak: impl FnOnce(&mut ManagerConfig)) -> (tempfile::TempDir, Manager) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = ManagerConfig::new(dir.path().join("m.sock"));
        config.session.buffer_size_bytes = 64 << 10;
        tweak(&mut config);
        let manager = Manager::new(config, Box::new(std::io::sink())).expect("manager");
        (dir, manager)
    }

    /// Poll the manager until `done` holds for the events seen so far (at most 5 s).
    pub(crate) fn pump(
        manager: &mut Manager,
        mut done: impl FnMut(&[ManagerEvent]) -> bool,
    ) -> Vec<ManagerEvent> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = Vec::new();
        while !done(&seen) {
            assert!(Instant::now() < deadline, "manager events so far: {seen:?}");
            let out = manager
                .poll(&[], Some(Duration::from_millis(20)))
                .expect("poll");
            seen.extend(out.events);
        }
        seen
    }

    /// A provider registered by hand: its control connection, buffer memfd and FIFO end.
    pub(crate) struct RawProvider {
        pub(crate) conn: ControlConn,
        pub(crate) _memfd: OwnedFd,
        pub(crate) fifo: OwnedFd,
    }

    /// Connect, send Register as `name`, let the manager answer, and take Initialize.
    pub(crate) fn register(manager: &mut Manager, name: &str) -> RawProvider {
        let mut conn =
            ControlConn::connect(manager.socket_path(), Duration::from_secs(1)).expect("connect");
        let register = Message::Register {
            pid: std::process::id(),
            name: name.into(),
            known_categories: Vec::new(),
            accepts_ticks_per_second: true,
            waits_for_session: false,
        };
        conn.send_msg(&register, &[]).expect("send Register");
        pump(manager, |e| {
            e.iter()
                .any(|e| matches!(e, ManagerEvent::ProviderRegistered { name: n, .. } if n == name))
        });
        conn.set_recv_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let (msg, fds) = conn.recv_msg().expect("Initialize");
        assert!(matches!(msg, Message::Initialize { .. }), "{msg:?}");
        let mut fds = fds.into_iter();
        let memfd = fds.next().expect("memfd");
        let fifo = fds.next().expect("fifo");
        RawProvider {
            conn,
            _memfd: memfd,
            fifo,
        }
    }
}

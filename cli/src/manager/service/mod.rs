//! The trace service (`fxtrace daemon`): a long-lived manager that programs register with
//! when they start, and that controllers (`fxtrace start`, `stop`, …) start and stop sessions
//! of at any time: Fuchsia's `trace_manager`, Perfetto's `traced`.
//!
//! - **Registry.** A provider registers once ([`Message::Register`] with
//!   `waits_for_session`), is answered [`Message::Registered`], and stays idle: the service
//!   holds its connection and nothing else (no buffer). When a session takes it in, its
//!   connection is handed to that session's manager, which sends Initialize (and Start). When
//!   the session ends, the provider registers again by itself.
//! - **Sessions.** Each is a listener-less [`Manager`] in its own thread (`session.rs`), with
//!   the archive written to the file the controller opened. Providers that register while a
//!   session is running and match it join it at once.
//! - **Controllers** speak the JSON protocol of [`protocol`] over the same socket. A session
//!   whose controller goes away is stopped (written) and ended, unless it was detached.
//! - **Policy** ([`policy`]): `SO_PEERCRED` on every connection.
//!
//! One thread, one `poll(2)` over the listener, a wake eventfd (sessions' news, `SIGTERM`),
//! the connections that have not said who they are, idle providers (to notice them leave) and
//! controllers. Nothing spins: idle, the service sleeps in `poll` without a timeout.

pub mod client;
pub mod policy;
pub mod protocol;
mod session;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::conn::{eviction_victim, FramedConn, ReadOutcome, MAX_ACCEPTS_PER_TURN};
use super::report::{Throttle, ThrottledLines};
use super::server::{Manager, ManagerConfig, Registration, Waker};
use super::session::SessionConfig;
use super::wire::{Frame, StatusEntry, StatusReply, MAX_STATUS_PROVIDERS};
use fxtrace::protocol::control::{
    BufferDisposition, BufferingMode, FrameMessage, Message, SessionState,
};
use fxtrace::protocol::transport::{ControlListener, ListenerOptions, TransportError};
use policy::{Peer, Policy};
use protocol::{
    Event, FromService, ProviderInfo, Reply, Request, SessionInfo, StartRequest, StatusReport,
};
use session::{Command, News, Plan};

/// Where the system's service listens (root).
pub use fxtrace::provider::SYSTEM_SOCKET_PATH;

/// Most providers registered at once.
pub const MAX_PROVIDERS: usize = 4096;
/// Most providers one user may have registered (outside root and the service's user).
pub const MAX_PROVIDERS_PER_UID: usize = 1024;
/// Most providers one process may have registered.
pub const MAX_PROVIDERS_PER_PID: usize = 16;
/// Most sessions one user may have at once.
pub const MAX_SESSIONS_PER_UID: usize = 4;
/// Most controllers connected at once per user.
pub const MAX_CONTROLLERS_PER_UID: usize = 16;
/// Most connections waiting to say who they are.
pub const MAX_PENDING: usize = 64;
/// At most one log line per this interval about connections closed for newer ones, and per
/// rule and uid about refused registrations and bad first messages.
const EVICTION_LOG_INTERVAL: Duration = Duration::from_secs(1);
/// Largest message a peer of the service may send (a controller's request, a Register).
pub const MAX_REQUEST_BODY: usize = 64 << 10;
/// How long a session waits for providers to acknowledge Start, Stop and Terminate before
/// going on without them (salvaging their buffers).
pub const SESSION_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the service waits, when it stops, for its sessions to stop, write and end: more
/// than a stop and a terminate of a session whose providers do not answer.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the listener rests after accepting failed for want of descriptors.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// How long a new connection may take to say who it is.
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);

/// The socket a service listens on by default: [`SYSTEM_SOCKET_PATH`] for root, else the
/// user's (`$XDG_RUNTIME_DIR/fxtrace.sock`, else `/tmp/fxtrace-<uid>/fxtrace.sock`, in a
/// directory of mode 0700 it creates). `FXTRACE_SOCKET` overrides both.
pub fn default_service_socket() -> PathBuf {
    if std::env::var_os(fxtrace::protocol::transport::SOCKET_ENV).is_some_and(|p| !p.is_empty()) {
        return fxtrace::protocol::transport::default_socket_path();
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from(SYSTEM_SOCKET_PATH);
    }
    fxtrace::protocol::transport::default_socket_path()
}

/// How the service runs.
#[derive(Debug)]
pub struct ServiceConfig {
    /// Where to listen (ignored with `listen_fd`).
    pub socket_path: PathBuf,
    /// A listening socket handed over by systemd (`LISTEN_FDS`).
    pub listen_fd: Option<OwnedFd>,
    /// Who may do what.
    pub policy: Policy,
    /// Log lines carry a timestamp (off under systemd: the journal stamps them).
    pub log_timestamps: bool,
}

/// Errors that stop the service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The socket could not be set up (another service owns it, a directory is missing, …).
    #[error("cannot listen at {path}: {source}")]
    Listen {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: TransportError,
    },
    /// The socket's directory could not be created.
    #[error("cannot create {path}: {source}")]
    SocketDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The wake-up eventfd could not be made.
    #[error("cannot set up the service's wake-up: {0}")]
    Waker(#[source] super::ManagerError),
    /// `poll` or the wake eventfd failed.
    #[error("{op}: {source}")]
    Sys {
        /// What failed.
        op: &'static str,
        /// The errno.
        source: Errno,
    },
}

/// A connection that has not sent its first message.
struct Pending {
    conn: FramedConn,
    deadline: Instant,
}

/// A registered provider.
struct Provider {
    pid: u32,
    uid: u32,
    name: String,
    registration: Registration,
    place: Place,
}

/// Where a registered provider is.
enum Place {
    /// Idle: the service holds its connection.
    Idle(FramedConn),
    /// Handed to this session (it registers again when the session ends).
    Session(u32),
}

/// A controller connection.
struct Controller {
    conn: FramedConn,
    peer: Peer,
    /// The request being carried out, answered when its session reports.
    waiting: Option<(u32, Waiting)>,
    /// Requests received and not handled yet: one is handled at a time, once the last answer
    /// is carried out and sent (at most [`MAX_BACKLOG`]).
    backlog: VecDeque<(Frame, Vec<OwnedFd>)>,
    /// A one-shot client (a status request of `fxtrace record`'s protocol): closed once its
    /// answer is sent.
    close_when_sent: bool,
    /// The controller closed its end: its requests still queued are carried out (a stop or
    /// a terminate sent just before closing counts), then it is forgotten, this same turn.
    closing: bool,
}

/// Most requests a controller may send ahead of their answers.
pub const MAX_BACKLOG: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    Start,
    Stop,
    Terminate,
}

/// A session and the thread running it.
struct Session {
    commands: Sender<Command>,
    waker: Waker,
    info: Arc<Mutex<SessionInfo>>,
    owner_uid: u32,
    /// The controller it ends with (`None`: detached).
    owner: Option<u64>,
    /// Which providers it takes: pids, names (empty: any), and only the owner's uid unless
    /// the owner is an administrator.
    pids: BTreeSet<u32>,
    names: BTreeSet<String>,
    any_uid: bool,
    /// Set by the session's thread when it is finishing (see `Plan::ending`).
    ending: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Session {
    fn wants(&self, p: &Provider) -> bool {
        // ATOMICS: `Relaxed` flag (see `Plan::ending`).
        !self.ending.load(Ordering::Relaxed)
            && (self.any_uid || p.uid == self.owner_uid)
            && (self.pids.is_empty() || self.pids.contains(&p.pid))
            && (self.names.is_empty() || self.names.contains(&p.name))
    }

    fn send(&self, command: Command) {
        // A session whose thread ended reports Ended; nothing else to do here.
        let _ = self.commands.send(command);
        self.waker.wake();
    }
}

/// The trace service.
pub struct Service {
    config: ServiceConfig,
    listener: ControlListener,
    waker: Waker,
    pending: Vec<Pending>,
    providers: BTreeMap<u32, Provider>,
    controllers: BTreeMap<u64, Controller>,
    sessions: BTreeMap<u32, Session>,
    news: Receiver<News>,
    news_tx: Sender<News>,
    next_provider: u32,
    next_session: u32,
    next_controller: u64,
    /// The service is stopping: no new session, no provider joins one.
    stopping: bool,
    /// Accepting failed for want of descriptors: the listener is not polled until then.
    listener_paused_until: Option<Instant>,
    /// Most providers registered at once: [`MAX_PROVIDERS`], or fewer when the descriptor
    /// limit allows fewer.
    max_providers: usize,
    /// Waiting connections closed for newer ones: logged at most once per
    /// [`EVICTION_LOG_INTERVAL`].
    evicted: Throttle,
    /// The user of the last connection closed that way.
    evicted_uid: u32,
    /// Refused registrations and bad first messages: what any local user can make the service
    /// say as often as they like, logged at most once per [`EVICTION_LOG_INTERVAL`] per rule
    /// and uid, with a count.
    refusals: ThrottledLines<(&'static str, u32)>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("socket", &self.listener.path())
            .field("providers", &self.providers.len())
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

impl Service {
    /// Listen (creating the socket's directory when it is the system's) and start serving.
    pub fn new(mut config: ServiceConfig) -> Result<Service, ServiceError> {
        let root = nix::unistd::geteuid().is_root();
        // Root's service takes other users' programs: the policy, not the file mode, decides.
        let options = ListenerOptions {
            mode: if root { 0o666 } else { 0o600 },
            ..ListenerOptions::default()
        };
        let listener = match config.listen_fd.take() {
            Some(fd) => ControlListener::from_listening(fd, options.policy),
            None => {
                if root && config.socket_path == Path::new(SYSTEM_SOCKET_PATH) {
                    create_socket_dir(&config.socket_path)?;
                }
                ControlListener::bind_with(&config.socket_path, options)
            }
        }
        .map_err(|source| ServiceError::Listen {
            path: config.socket_path.clone(),
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| ServiceError::Listen {
                path: config.socket_path.clone(),
                source,
            })?;
        let waker = Waker::new().map_err(ServiceError::Waker)?;
        // Sessions hand this rate to providers; measure it now, not in the loop.
        let _ = fxtrace::clock::info();
        let max_providers =
            crate::manager::lifecycle::raise_descriptor_limit().providers(MAX_PROVIDERS);
        let (news_tx, news) = mpsc::channel();
        Ok(Service {
            config,
            listener,
            waker,
            pending: Vec::new(),
            providers: BTreeMap::new(),
            controllers: BTreeMap::new(),
            sessions: BTreeMap::new(),
            news,
            news_tx,
            next_provider: 1,
            next_session: 1,
            next_controller: 1,
            stopping: false,
            listener_paused_until: None,
            max_providers,
            evicted: Throttle::new(EVICTION_LOG_INTERVAL),
            evicted_uid: 0,
            refusals: ThrottledLines::new(EVICTION_LOG_INTERVAL),
        })
    }

    /// The socket it listens on.
    pub fn socket_path(&self) -> &Path {
        self.listener.path()
    }

    /// Wakes the loop (for a signal handler: write 8 bytes to [`Waker::raw_fd`]).
    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }

    /// Log `line`, a refusal by `rule` of a peer of `uid`, unless such a line was logged less
    /// than [`EVICTION_LOG_INTERVAL`] ago (then it is counted, and told with the count later).
    fn log_refusal(&mut self, rule: &'static str, uid: u32, line: String) {
        if let Some(line) = self.refusals.note((rule, uid), line, Instant::now()) {
            self.log(line);
        }
    }

    fn log(&self, line: impl std::fmt::Display) {
        use std::io::Write as _;
        let mut err = std::io::stderr().lock();
        // A closed standard error loses the line, not the service.
        let _ = if self.config.log_timestamps {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            writeln!(err, "[{}.{:03}] {line}", t.as_secs(), t.subsec_millis())
        } else {
            writeln!(err, "{line}")
        };
    }

    /// Serve until `shutdown` is set (then [`Waker::wake`], e.g. from a `SIGTERM` handler
    /// writing to [`Waker::raw_fd`]); then end every session (written) and return.
    pub fn run(&mut self, shutdown: &AtomicBool) -> Result<(), ServiceError> {
        self.log(format_args!(
            "fxtrace daemon: listening at {} (pid {})",
            self.listener.path().display(),
            std::process::id()
        ));
        let mut shutdown_deadline: Option<Instant> = None;
        loop {
            // ATOMICS: `Relaxed`: a flag; the wake-up that follows its store is what matters.
            if shutdown.load(Ordering::Relaxed) && shutdown_deadline.is_none() {
                self.log("fxtrace daemon: stopping: ending every session (written)");
                shutdown_deadline = Some(Instant::now() + SHUTDOWN_TIMEOUT);
                for session in self.sessions.values() {
                    session.send(Command::Terminate {
                        reason: "the trace service is stopping".into(),
                    });
                }
            }
            if let Some(deadline) = shutdown_deadline {
                if self.sessions.is_empty() || Instant::now() >= deadline {
                    for (id, mut session) in std::mem::take(&mut self.sessions) {
                        if let Some(thread) = session.thread.take() {
                            if thread.is_finished() {
                                let _ = thread.join();
                            } else {
                                // Blocked (an archive on a stuck file system?): waiting would
                                // only get the service killed. What it wrote is in the file.
                                self.log(format_args!(
                                    "fxtrace daemon: session {id} did not end in time: its \
                                     archive holds what was written"
                                ));
                            }
                        }
                    }
                    self.log("fxtrace daemon: stopped");
                    return Ok(());
                }
            }
            self.stopping = shutdown_deadline.is_some();
            self.turn(shutdown_deadline)?;
        }
    }

    /// How long the next wait in `poll` may last: until the first pending connection's
    /// deadline, the next counted refusal or eviction line, the shutdown's deadline or the end
    /// of a pause of the listener; and whether the listener is polled (not paused).
    fn wait_bound(&mut self, shutdown: Option<Instant>) -> (PollTimeout, bool) {
        let now = Instant::now();
        // Counted refusals and evictions are told when due, also while nothing else happens.
        let mut deadline = self
            .pending
            .iter()
            .map(|p| p.deadline)
            .chain(self.refusals.next_due())
            .chain(self.evicted.next_due())
            .chain(shutdown)
            .min();
        let listen = match self.listener_paused_until {
            Some(until) if until > now => {
                deadline = Some(deadline.map_or(until, |d| d.min(until)));
                false
            }
            _ => {
                self.listener_paused_until = None;
                true
            }
        };
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let ms = d.saturating_duration_since(now).as_millis().min(60_000) as i32 + 1;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        (timeout, listen)
    }

    /// One wait in `poll` and what it brought.
    fn turn(&mut self, shutdown: Option<Instant>) -> Result<(), ServiceError> {
        #[derive(Clone, Copy)]
        enum Target {
            Listener,
            Waker,
            Pending(usize),
            Idle(u32),
            Controller(u64),
        }
        let (timeout, listen) = self.wait_bound(shutdown);
        let mut targets = Vec::new();
        let ready: Vec<(Target, PollFlags)> = {
            let mut fds = Vec::new();
            let readable = PollFlags::POLLIN;
            if listen {
                fds.push(PollFd::new(self.listener.as_fd(), readable));
                targets.push(Target::Listener);
            }
            fds.push(PollFd::new(self.waker.as_fd(), readable));
            targets.push(Target::Waker);
            for (i, p) in self.pending.iter().enumerate() {
                fds.push(PollFd::new(p.conn.as_fd(), readable));
                targets.push(Target::Pending(i));
            }
            for (id, p) in &self.providers {
                if let Place::Idle(conn) = &p.place {
                    fds.push(PollFd::new(conn.as_fd(), readable));
                    targets.push(Target::Idle(*id));
                }
            }
            for (key, c) in &self.controllers {
                // Writable matters only while an answer is queued.
                let flags = if c.conn.queued() > 0 {
                    readable | PollFlags::POLLOUT
                } else {
                    readable
                };
                fds.push(PollFd::new(c.conn.as_fd(), flags));
                targets.push(Target::Controller(*key));
            }
            match poll(&mut fds, timeout) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(source) => return Err(ServiceError::Sys { op: "poll", source }),
            }
            fds.iter()
                .zip(&targets)
                .filter_map(|(fd, t)| {
                    let revents = fd.revents().unwrap_or(PollFlags::empty());
                    (!revents.is_empty()).then_some((*t, revents))
                })
                .collect()
        };
        // Pending connections are handled last and by index, highest first, so indices stay
        // valid while some are removed; new connections are accepted after them, so that a
        // connection that has spoken is read before a flood of new ones could push it out.
        let mut pending_ready = Vec::new();
        let mut accept = false;
        for (target, revents) in ready {
            match target {
                Target::Listener => accept = true,
                Target::Waker => self.waker.drain(),
                Target::Pending(i) => pending_ready.push(i),
                Target::Idle(id) => self.read_idle(id),
                Target::Controller(key) => {
                    if revents.contains(PollFlags::POLLOUT) {
                        self.flush_controller(key);
                    }
                    if revents.intersects(!PollFlags::POLLOUT) {
                        self.read_controller(key);
                    }
                }
            }
        }
        pending_ready.sort_unstable_by(|a, b| b.cmp(a));
        for i in pending_ready {
            self.read_pending(i);
        }
        if accept {
            self.accept_all();
        }
        self.log_evictions();
        let now = Instant::now();
        for line in self.refusals.due(now) {
            self.log(line);
        }
        let before = self.pending.len();
        self.pending.retain(|p| p.deadline > now);
        if self.pending.len() < before {
            self.log(format_args!(
                "fxtrace daemon: {} connections said nothing within {} s: closed",
                before - self.pending.len(),
                REGISTRATION_TIMEOUT.as_secs()
            ));
        }
        while let Ok(news) = self.news.try_recv() {
            self.on_news(news);
        }
        self.serve_backlogs();
        Ok(())
    }

    /// Handle the next request of every controller that is free (no request under way, its
    /// last answer sent).
    fn serve_backlogs(&mut self) {
        loop {
            let ready: Vec<u64> = self
                .controllers
                .iter()
                .filter(|(_, c)| {
                    !c.backlog.is_empty()
                        && (c.closing || (c.waiting.is_none() && c.conn.queued() == 0))
                })
                .map(|(k, _)| *k)
                .collect();
            if ready.is_empty() {
                break;
            }
            for key in ready {
                let Some((msg, fds)) = self
                    .controllers
                    .get_mut(&key)
                    .and_then(|c| c.backlog.pop_front())
                else {
                    continue;
                };
                match msg {
                    Frame::Controller { body, .. } => self.handle_request(key, &body, fds),
                    other => self.reply(
                        key,
                        Reply::Error {
                            error: format!("unexpected {} message from a controller", other.name()),
                        },
                    ),
                }
            }
        }
        let closed: Vec<u64> = self
            .controllers
            .iter()
            .filter(|(_, c)| c.closing)
            .map(|(k, _)| *k)
            .collect();
        for key in closed {
            self.controller_gone(key);
        }
    }

    /// The controller's socket is writable: send what is queued.
    fn flush_controller(&mut self, key: u64) {
        let Some(c) = self.controllers.get_mut(&key) else {
            return;
        };
        let result = c.conn.flush_queued();
        let done = c.close_when_sent && c.conn.queued() == 0;
        if let Err(e) = result {
            let pid = c.conn.conn().peer_pid();
            self.log(format_args!("fxtrace daemon: controller pid {pid}: {e}"));
            self.controller_gone(key);
        } else if done {
            self.controllers.remove(&key);
        }
    }

    /// Accept new connections (at most [`MAX_ACCEPTS_PER_TURN`]; the rest next turn).
    fn accept_all(&mut self) {
        for _ in 0..MAX_ACCEPTS_PER_TURN {
            match self.listener.accept() {
                Ok(conn) => {
                    if self.pending.len() >= MAX_PENDING {
                        let victim = eviction_victim(
                            &self.pending,
                            |p| p.conn.conn().peer_uid(),
                            |p| p.deadline,
                        );
                        let victim = self.pending.swap_remove(victim);
                        self.note_eviction(victim.conn.conn().peer_uid());
                    }
                    // Controllers hand over their output file: descriptors are kept.
                    match FramedConn::with_fds(conn, MAX_REQUEST_BODY) {
                        Ok(conn) => self.pending.push(Pending {
                            conn,
                            deadline: Instant::now() + REGISTRATION_TIMEOUT,
                        }),
                        Err(e) => self.log(format_args!("fxtrace daemon: a connection: {e}")),
                    }
                }
                Err(TransportError::Sys {
                    source: Errno::EAGAIN,
                    ..
                }) => return,
                Err(TransportError::PeerRefused { pid, uid, .. }) => self.log_refusal(
                    "connect",
                    uid,
                    format!(
                        "fxtrace daemon: refused pid {pid}: uid {uid} may not connect to a \
                         service of another user (run a service of your own: fxtrace daemon)"
                    ),
                ),
                Err(TransportError::Sys {
                    source: Errno::ECONNABORTED | Errno::EINTR,
                    ..
                }) => {}
                Err(TransportError::Sys {
                    source:
                        source @ (Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM),
                    ..
                }) => {
                    // Out of descriptors: the connection stays queued and the listener
                    // readable; stop polling it for a while instead of spinning.
                    self.listener_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                    self.log(format_args!(
                        "fxtrace daemon: cannot accept connections: {source} ({} providers, {} \
                         controllers, {} waiting): pausing {} ms",
                        self.providers.len(),
                        self.controllers.len(),
                        self.pending.len(),
                        ACCEPT_PAUSE.as_millis()
                    ));
                    return;
                }
                Err(e) => {
                    self.log(format_args!("fxtrace daemon: {e}"));
                    return;
                }
            }
        }
    }

    /// A connection of `uid` waiting to say who it is was closed for a newer one. Logged at
    /// most once per [`EVICTION_LOG_INTERVAL`], with the count since the last line, so that a
    /// flood does not flood the log too ([`Self::log_evictions`]).
    fn note_eviction(&mut self, uid: u32) {
        self.evicted.note();
        self.evicted_uid = uid;
        self.log_evictions();
    }

    /// Log the evictions not logged yet, unless a line was logged less than
    /// [`EVICTION_LOG_INTERVAL`] ago (also called every turn, so the last ones are told).
    fn log_evictions(&mut self) {
        let Some(closed) = self.evicted.due(Instant::now()) else {
            return;
        };
        let uid = self.evicted_uid;
        self.log(format_args!(
            "fxtrace daemon: more than {MAX_PENDING} connections waiting to say who they are: \
             closed {closed} since the last such line (the oldest of the user with the most \
             waiting; last: uid {uid})"
        ));
    }

    fn read_pending(&mut self, index: usize) {
        let Some(p) = self.pending.get_mut(index) else {
            return;
        };
        let pid = p.conn.conn().peer_pid();
        let uid = p.conn.conn().peer_uid();
        let messages = match p.conn.read_available() {
            Ok(ReadOutcome::Messages(m)) if m.is_empty() => return,
            Ok(ReadOutcome::Messages(m)) | Ok(ReadOutcome::Closed(m)) => m,
            Err(e) => {
                self.pending.swap_remove(index);
                self.log_refusal(
                    "bad first message",
                    uid,
                    format!("fxtrace daemon: pid {pid} (uid {uid}): bad first message: {e}"),
                );
                return;
            }
        };
        let Pending { conn, .. } = self.pending.swap_remove(index);
        let mut messages = messages.into_iter();
        let Some(first) = messages.next() else {
            return; // closed before saying anything
        };
        match first {
            Frame::Provider(Message::Register {
                pid: claimed_pid,
                name,
                known_categories,
                accepts_ticks_per_second,
                waits_for_session,
            }) => {
                if let Some(next) = messages.next() {
                    self.log_refusal(
                        "message before the registration's answer",
                        uid,
                        format!(
                            "fxtrace daemon: pid {pid} (uid {uid}): {} sent before its \
                             registration was answered: closed",
                            next.name()
                        ),
                    );
                    return;
                }
                let registration = Registration {
                    claimed_pid,
                    // Printed on terminals and written in the archive.
                    name: crate::manager::report::printable(&name).into_owned(),
                    known_categories,
                    accepts_ticks_per_second,
                };
                self.register(conn, registration, waits_for_session);
            }
            Frame::Controller { .. } | Frame::StatusRequest { .. } => {
                let one_shot = matches!(first, Frame::StatusRequest { .. });
                let requests: Vec<Frame> = std::iter::once(first).chain(messages).collect();
                self.new_controller(conn, requests, one_shot);
            }
            other => self.log_refusal(
                "unexpected first message",
                uid,
                format!(
                    "fxtrace daemon: pid {pid} (uid {uid}): unexpected first message {}",
                    other.name()
                ),
            ),
        }
    }

    /// A connection whose first message is a controller's request (or a status request of
    /// `fxtrace record`'s protocol, answered once, `one_shot`).
    fn new_controller(&mut self, mut conn: FramedConn, requests: Vec<Frame>, one_shot: bool) {
        let cred = conn.conn().peer();
        let peer = Peer::of(conn.as_fd(), cred);
        let of_uid = self
            .controllers
            .values()
            .filter(|c| c.peer.cred.uid == cred.uid)
            .count();
        if of_uid >= MAX_CONTROLLERS_PER_UID {
            let reply = FromService::Reply(Reply::Error {
                error: format!(
                    "uid {} already has {of_uid} controllers connected (at most \
                     {MAX_CONTROLLERS_PER_UID})",
                    cred.uid
                ),
            });
            // A fresh connection's buffer takes this; a peer that cannot is dropped anyway.
            if let Ok(msg) = reply.to_message() {
                let _ = conn.queue(&msg);
            }
            return;
        }
        let key = self.next_controller;
        self.next_controller += 1;
        self.controllers.insert(
            key,
            Controller {
                conn,
                peer: peer.clone(),
                waiting: None,
                backlog: VecDeque::new(),
                close_when_sent: one_shot,
                closing: false,
            },
        );
        if one_shot {
            let reply = self.legacy_status(&peer);
            if let Some(c) = self.controllers.get_mut(&key) {
                if c.conn.queue(&reply).is_err() || c.conn.queued() == 0 {
                    self.controllers.remove(&key);
                }
            }
            return;
        }
        if let Err(e) = self.take_requests(key, requests) {
            self.log(format_args!(
                "fxtrace daemon: controller pid {}: {e}",
                cred.pid
            ));
            self.controller_gone(key);
        }
    }

    /// The registry as a session, for a status client of `fxtrace record`'s protocol: what
    /// `peer` may see.
    fn legacy_status(&self, peer: &Peer) -> Frame {
        let state = if self.sessions.is_empty() {
            SessionState::Ready
        } else {
            SessionState::Started
        };
        let providers = self
            .providers
            .iter()
            .filter(|(_, p)| self.config.policy.may_trace(peer, p.uid))
            .map(|(id, p)| StatusEntry {
                id: *id,
                pid: p.pid,
                name: p.name.clone(),
            })
            .take(MAX_STATUS_PROVIDERS)
            .collect();
        let mut categories = self.categories(peer);
        categories.truncate(fxtrace::protocol::control::MAX_CATEGORIES);
        Frame::StatusReply(Box::new(StatusReply {
            state,
            providers,
            categories,
            figures: None,
        }))
    }

    /// A provider's Register.
    fn register(&mut self, mut conn: FramedConn, registration: Registration, waits: bool) {
        let cred = conn.conn().peer();
        let peer = Peer::of(conn.as_fd(), cred);
        let name = registration.name.clone();
        let pid = u32::try_from(cred.pid).unwrap_or(registration.claimed_pid);
        let admitted = self
            .config
            .policy
            .may_register(&peer)
            .map_err(|why| ("registration: policy", why))
            .and_then(|()| {
                self.admit(pid, cred.uid)
                    .map_err(|why| ("registration: limits", why))
            });
        if let Err((rule, why)) = admitted {
            self.log_refusal(
                rule,
                cred.uid,
                format!("fxtrace daemon: provider {name:?} (pid {pid}) refused: {why}"),
            );
            // The provider learns the rule (and backs off); the connection closes after it.
            let reason = crate::manager::archive::truncate_str(
                &why,
                fxtrace::protocol::control::MAX_REFUSAL_LEN,
            );
            let _ = conn.send(
                &Message::Refused {
                    reason: reason.into(),
                },
                &[],
            );
            return;
        }
        let id = self.next_provider;
        self.next_provider = self.next_provider.wrapping_add(1).max(1);
        let mut provider = Provider {
            pid,
            uid: cred.uid,
            name: name.clone(),
            registration,
            place: Place::Session(0),
        };
        let session = self
            .sessions
            .iter()
            .find(|(_, s)| !self.stopping && s.wants(&provider))
            .map(|(sid, _)| *sid);
        if !waits && session.is_none() {
            // A program that registers once, as with `fxtrace record` (FXTRACE_SOCKET names
            // this service, or an fxtrace older than the service): say why, to it and here.
            let reason = "this is a trace service (fxtrace daemon) and none of its sessions is \
                          running for this program: start one first (fxtrace start), or register \
                          with fxtrace::connect, which follows the service (also the one \
                          FXTRACE_SOCKET names) and joins its sessions as they start";
            self.log_refusal(
                "registration: no session",
                cred.uid,
                format!(
                    "fxtrace daemon: provider {name:?} (pid {pid}, uid {}) registered to be \
                     traced now, not to wait for a session, and no session is running for it: \
                     refused",
                    cred.uid
                ),
            );
            let _ = conn.send(
                &Message::Refused {
                    reason: reason.into(),
                },
                &[],
            );
            return;
        }
        if waits {
            let registered = Message::Registered {
                provider_id: id,
                joining: session.is_some(),
            };
            if let Err(e) = conn.send(&registered, &[]) {
                self.log_refusal(
                    "registration: answer not sent",
                    cred.uid,
                    format!("fxtrace daemon: provider {name:?} (pid {pid}): {e}"),
                );
                return;
            }
        }
        match session {
            Some(sid) => {
                provider.place = Place::Session(sid);
                if let Some(s) = self.sessions.get(&sid) {
                    s.send(Command::Adopt(id, conn, provider.registration.clone()));
                }
                self.log(format_args!(
                    "fxtrace daemon: provider {id} {name:?} (pid {pid}) registered and joined \
                     session {sid}"
                ));
            }
            None => {
                provider.place = Place::Idle(conn);
                self.log(format_args!(
                    "fxtrace daemon: provider {id} {name:?} (pid {pid}, uid {}) registered",
                    cred.uid
                ));
            }
        }
        self.providers.insert(id, provider);
    }

    /// Per-process, per-user and total bounds on registered providers.
    fn admit(&self, pid: u32, uid: u32) -> Result<(), String> {
        if self.providers.len() >= self.max_providers {
            return Err(format!(
                "{} providers already registered (at most {}{})",
                self.providers.len(),
                self.max_providers,
                if self.max_providers < MAX_PROVIDERS {
                    ": the service's descriptor limit (RLIMIT_NOFILE, LimitNOFILE= in its \
                     unit) allows no more"
                } else {
                    ""
                }
            ));
        }
        let of_pid = self.providers.values().filter(|p| p.pid == pid).count();
        if of_pid >= MAX_PROVIDERS_PER_PID {
            return Err(format!(
                "process {pid} already has {of_pid} providers (at most \
                 {MAX_PROVIDERS_PER_PID} per process)"
            ));
        }
        let service_uid = nix::unistd::geteuid().as_raw();
        let of_uid = self.providers.values().filter(|p| p.uid == uid).count();
        if uid != 0 && uid != service_uid && of_uid >= MAX_PROVIDERS_PER_UID {
            return Err(format!(
                "uid {uid} already has {of_uid} providers (at most {MAX_PROVIDERS_PER_UID} per \
                 user)"
            ));
        }
        Ok(())
    }

    /// An idle provider's connection is readable: it left (or broke the protocol).
    fn read_idle(&mut self, id: u32) {
        let Some(Provider {
            place: Place::Idle(conn),
            ..
        }) = self.providers.get_mut(&id)
        else {
            return;
        };
        let why = match conn.read_available() {
            Ok(ReadOutcome::Messages(m)) if m.is_empty() => return,
            Ok(ReadOutcome::Closed(m)) if m.is_empty() => None,
            Ok(ReadOutcome::Messages(m)) | Ok(ReadOutcome::Closed(m)) => Some(format!(
                "protocol violation: {} from an idle provider",
                m[0].name()
            )),
            Err(e) => Some(format!("protocol violation: {e}")),
        };
        if let Some(p) = self.providers.remove(&id) {
            match why {
                None => self.log(format_args!(
                    "fxtrace daemon: provider {id} {:?} (pid {}) left",
                    p.name, p.pid
                )),
                Some(why) => self.log(format_args!(
                    "fxtrace daemon: provider {id} {:?} (pid {}) dropped: {why}",
                    p.name, p.pid
                )),
            }
        }
    }

    fn read_controller(&mut self, key: u64) {
        let Some(c) = self.controllers.get_mut(&key) else {
            return;
        };
        let pid = c.conn.conn().peer_pid();
        let (messages, closed) = match c.conn.read_available() {
            Ok(ReadOutcome::Messages(m)) => (m, false),
            Ok(ReadOutcome::Closed(m)) => (m, true),
            Err(e) => {
                self.log(format_args!("fxtrace daemon: controller pid {pid}: {e}"));
                self.controller_gone(key);
                return;
            }
        };
        if let Err(e) = self.take_requests(key, messages) {
            self.log(format_args!("fxtrace daemon: controller pid {pid}: {e}"));
            self.controller_gone(key);
            return;
        }
        if closed {
            if let Some(c) = self.controllers.get_mut(&key) {
                c.closing = true;
            }
        }
    }

    /// Put `messages` (with their descriptors) in the controller's backlog.
    fn take_requests(&mut self, key: u64, messages: Vec<Frame>) -> Result<(), String> {
        let Some(c) = self.controllers.get_mut(&key) else {
            return Ok(());
        };
        for msg in messages {
            let fds = c.conn.take_fds(&msg).map_err(|e| e.to_string())?;
            if c.backlog.len() >= MAX_BACKLOG {
                return Err(format!(
                    "more than {MAX_BACKLOG} requests sent ahead of their answers"
                ));
            }
            c.backlog.push_back((msg, fds));
        }
        Ok(())
    }

    /// A controller went away: its attached sessions are stopped (written) and ended.
    fn controller_gone(&mut self, key: u64) {
        self.controllers.remove(&key);
        let mut ended = Vec::new();
        for (id, s) in &mut self.sessions {
            if s.owner == Some(key) {
                s.owner = None;
                s.send(Command::Terminate {
                    reason: "its controller went away".into(),
                });
                ended.push(*id);
            }
        }
        for id in ended {
            self.log(format_args!(
                "fxtrace daemon: session {id}: its controller went away: stopping (written) and \
                 ending it"
            ));
        }
    }

    fn reply(&mut self, key: u64, reply: Reply) {
        self.send_to(key, &FromService::Reply(reply));
    }

    /// Queue `what` for controller `key` (never blocking); an answer too large for a frame
    /// becomes an error that says so. A controller that does not read is dropped.
    fn send_to(&mut self, key: u64, what: &FromService) {
        let Some(c) = self.controllers.get_mut(&key).filter(|c| !c.closing) else {
            return;
        };
        let Ok(msg) = what.to_fitting_message() else {
            return;
        };
        if let Err(e) = c.conn.queue(&msg) {
            let pid = c.conn.conn().peer_pid();
            self.log(format_args!("fxtrace daemon: controller pid {pid}: {e}"));
            self.controller_gone(key);
        }
    }

    fn handle_request(&mut self, key: u64, body: &str, mut fds: Vec<OwnedFd>) {
        let request = match Request::parse(body) {
            Ok(r) => r,
            Err(e) => {
                return self.reply(
                    key,
                    Reply::Error {
                        error: e.to_string(),
                    },
                )
            }
        };
        let Some(peer) = self.controllers.get(&key).map(|c| c.peer.clone()) else {
            return;
        };
        match request {
            Request::Providers {} => {
                let providers = self.visible_providers(&peer);
                self.reply(
                    key,
                    Reply::Providers {
                        providers,
                        omitted: 0,
                    },
                );
            }
            Request::Categories {} => {
                let categories = self.categories(&peer);
                self.reply(
                    key,
                    Reply::Categories {
                        categories,
                        omitted: 0,
                    },
                );
            }
            Request::Status {} => {
                let report = StatusReport {
                    pid: std::process::id(),
                    uid: nix::unistd::geteuid().as_raw(),
                    socket: self.listener.path().display().to_string(),
                    providers: self.visible_providers(&peer),
                    sessions: self
                        .sessions
                        .values()
                        .filter(|s| self.config.policy.may_control(&peer, s.owner_uid).is_ok())
                        .map(|s| s.info.lock().unwrap_or_else(|p| p.into_inner()).clone())
                        .collect(),
                    providers_omitted: 0,
                    recording: false,
                    categories: Vec::new(),
                };
                self.reply(key, Reply::Status(report));
            }
            Request::Start(start) => {
                let output = fds.pop().map(File::from);
                if let Some(Err(error)) = output.as_ref().map(writable_regular_file) {
                    return self.reply(key, Reply::Error { error });
                }
                match start.session {
                    Some(id) => self.restart(key, &peer, id, &start, output),
                    None => self.start(key, &peer, *start, output),
                }
            }
            Request::Stop { session, write } => match self.resolve(&peer, session) {
                Ok(id) => {
                    self.sessions[&id].send(Command::Stop {
                        write,
                        from: Some(key),
                    });
                    self.wait(key, id, Waiting::Stop);
                }
                Err(error) => self.reply(key, Reply::Error { error }),
            },
            Request::Terminate { session } => match self.resolve(&peer, session) {
                Ok(id) => {
                    self.sessions[&id].send(Command::Terminate {
                        reason: "terminated by a controller".into(),
                    });
                    self.wait(key, id, Waiting::Terminate);
                }
                Err(error) => self.reply(key, Reply::Error { error }),
            },
        }
    }

    fn wait(&mut self, key: u64, session: u32, what: Waiting) {
        if let Some(c) = self.controllers.get_mut(&key) {
            c.waiting = Some((session, what));
        }
    }

    /// The session a request names (or the peer's only one).
    fn resolve(&self, peer: &Peer, session: Option<u32>) -> Result<u32, String> {
        let policy = &self.config.policy;
        match session {
            Some(id) => {
                let s = self
                    .sessions
                    .get(&id)
                    .ok_or_else(|| format!("no session {id} (fxtrace status lists them)"))?;
                policy.may_control(peer, s.owner_uid)?;
                Ok(id)
            }
            // Unnamed: the caller's own session, never another user's (an administrator names
            // those with --session).
            None => {
                let mine: Vec<u32> = self
                    .sessions
                    .iter()
                    .filter(|(_, s)| s.owner_uid == peer.cred.uid)
                    .map(|(id, _)| *id)
                    .collect();
                let others = self.sessions.len() - mine.len();
                match mine.as_slice() {
                    [id] => Ok(*id),
                    [] if others > 0 => Err(format!(
                        "you have no session running; {others} of other users are (fxtrace \
                         status lists those you may control: name one with --session)"
                    )),
                    [] => Err("no session is running (fxtrace start starts one)".into()),
                    ids => Err(format!(
                        "{} of your sessions are running ({ids:?}): say which with --session",
                        ids.len()
                    )),
                }
            }
        }
    }

    fn visible_providers(&self, peer: &Peer) -> Vec<ProviderInfo> {
        self.providers
            .iter()
            .filter(|(_, p)| self.config.policy.may_trace(peer, p.uid))
            .map(|(id, p)| ProviderInfo {
                id: *id,
                pid: p.pid,
                name: p.name.clone(),
                uid: p.uid,
                state: match p.place {
                    Place::Idle(_) => "idle".into(),
                    Place::Session(s) => format!("session {s}"),
                },
            })
            .collect()
    }

    /// The categories declared by the providers `peer` may trace, sorted, once each.
    fn categories(&self, peer: &Peer) -> Vec<String> {
        let set: BTreeSet<&String> = self
            .providers
            .values()
            .filter(|p| self.config.policy.may_trace(peer, p.uid))
            .flat_map(|p| &p.registration.known_categories)
            .collect();
        set.into_iter().cloned().collect()
    }

    /// `start` of a new session.
    fn start(&mut self, key: u64, peer: &Peer, start: StartRequest, output: Option<File>) {
        match self.create_session(key, peer, start, output) {
            Ok(id) => self.wait(key, id, Waiting::Start),
            Err(error) => self.reply(key, Reply::Error { error }),
        }
    }

    /// A new session for controller `key`: who may have it, what it records, its manager in
    /// a thread of its own; the idle providers it wants are handed over and it starts.
    fn create_session(
        &mut self,
        key: u64,
        peer: &Peer,
        start: StartRequest,
        output: Option<File>,
    ) -> Result<u32, String> {
        self.may_create(peer, &start)?;
        let session_config = session_config(&start)?;
        let uid = peer.cred.uid;
        let id = self.next_session;
        let mut config = ManagerConfig::new(format!("{}#{id}", self.listener.path().display()));
        config.session = session_config;
        // The service's own bounds hold; a session has no traced command to keep slots for.
        config.max_providers = MAX_PROVIDERS;
        config.max_per_uid = MAX_PROVIDERS_PER_UID;
        config.max_per_pid = MAX_PROVIDERS_PER_PID;
        config.reserved_for_traced = 0;
        config.output_name = start.output.clone().unwrap_or_default();
        config.session_id = id;
        config.owner_uid = uid;
        config.detached = start.detach;
        // The archive stages one turn's read-out at most (a killed service loses no more), and
        // a file whose write failed (a full disk) is cut after its last whole record.
        let output: Box<dyn std::io::Write + Send> = match output {
            Some(file) => Box::new(crate::manager::archive::CutOnFailure::new(file)),
            None => Box::new(std::io::sink()),
        };
        let manager = Manager::without_listener(config, output).map_err(|e| e.to_string())?;
        self.next_session += 1;
        let plan = Plan {
            id,
            duration: start.duration_ms.map(Duration::from_millis),
            stop_on_alert: start.stop_on_alert.clone(),
            system_wide: start.system_wide,
            ending: Arc::new(AtomicBool::new(false)),
        };
        let session = self.spawn_session(manager, plan, peer, key, &start)?;
        let joined = self.hand_over_idle(id, &session);
        session.send(Command::Start {
            disposition: BufferDisposition::ClearEntire,
            output: None,
            from: Some(key),
        });
        self.log(format_args!(
            "fxtrace daemon: session {id} started by uid {uid} with {joined} providers{}",
            if start.detach { " (detached)" } else { "" }
        ));
        self.sessions.insert(id, session);
        Ok(id)
    }

    /// Whether `peer` may create the session `start` asks for.
    fn may_create(&self, peer: &Peer, start: &StartRequest) -> Result<(), String> {
        if self.stopping {
            return Err("the trace service is stopping".into());
        }
        let uid = peer.cred.uid;
        let of_uid = self
            .sessions
            .values()
            .filter(|s| s.owner_uid == uid)
            .count();
        if of_uid >= MAX_SESSIONS_PER_UID && !self.config.policy.is_admin(peer) {
            return Err(format!(
                "uid {uid} already has {of_uid} sessions (at most {MAX_SESSIONS_PER_UID} per user)"
            ));
        }
        if start.system_wide && !self.config.policy.is_admin(peer) {
            return Err(format!(
                "--system-wide records every process's context switches: only root, the \
                 service's user or a member of group {:?} may ask for it",
                policy::ADMIN_GROUP
            ));
        }
        if start.disposition.is_some() {
            return Err("a buffer disposition applies to a restart (--session ID)".into());
        }
        Ok(())
    }

    /// The session's thread, running `manager` as `plan` says (a bug that unwinds it still
    /// ends the session), and the service's handle on it.
    fn spawn_session(
        &self,
        manager: Manager,
        plan: Plan,
        peer: &Peer,
        key: u64,
        start: &StartRequest,
    ) -> Result<Session, String> {
        let id = plan.id;
        let (commands, rx) = mpsc::channel();
        let info = Arc::new(Mutex::new(manager.session_info()));
        let session_waker = manager.waker();
        let ending = plan.ending.clone();
        let news = self.news_tx.clone();
        let waker = self.waker.clone();
        let thread_info = info.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fxtrace-session-{id}"))
            .spawn(move || {
                let (news_after, waker_after) = (news.clone(), waker.clone());
                let body = std::panic::AssertUnwindSafe(|| {
                    session::run(manager, plan, rx, news, waker, thread_info)
                });
                if std::panic::catch_unwind(body).is_err() {
                    // A bug: the service must still forget the session and tell its
                    // controllers (its providers' connections closed with the unwinding).
                    let _ = news_after.send(News::Ended {
                        session: id,
                        reason: "its thread failed (a bug in fxtrace): the archive holds \
                                 what was written before"
                            .into(),
                    });
                    waker_after.wake();
                }
            })
            .map_err(|e| format!("starting the session's thread: {e}"))?;
        Ok(Session {
            commands,
            waker: session_waker,
            info,
            owner_uid: peer.cred.uid,
            owner: (!start.detach).then_some(key),
            pids: start.pids.iter().copied().collect(),
            names: start.names.iter().cloned().collect(),
            any_uid: self.config.policy.is_admin(peer),
            ending,
            thread: Some(thread),
        })
    }

    /// Hand the idle providers `session` (id `id`) wants over to it; how many.
    fn hand_over_idle(&mut self, id: u32, session: &Session) -> u32 {
        let mut joined = 0;
        for (pid, p) in self.providers.iter_mut() {
            if !session.wants(p) {
                continue;
            }
            if let Place::Idle(_) = p.place {
                let Place::Idle(conn) = std::mem::replace(&mut p.place, Place::Session(id)) else {
                    continue;
                };
                session.send(Command::Adopt(*pid, conn, p.registration.clone()));
                joined += 1;
            }
        }
        joined
    }

    /// `start --session ID`: start an existing session again.
    fn restart(
        &mut self,
        key: u64,
        peer: &Peer,
        id: u32,
        start: &StartRequest,
        output: Option<File>,
    ) {
        let disposition = match start.disposition.as_deref() {
            None | Some("clear") => BufferDisposition::ClearEntire,
            Some("clear-nondurable") => BufferDisposition::ClearNonDurable,
            Some("retain") => BufferDisposition::Retain,
            Some(other) => {
                return self.reply(
                    key,
                    Reply::Error {
                        error: format!(
                            "unknown buffer disposition {other:?} (clear, clear-nondurable or \
                             retain)"
                        ),
                    },
                )
            }
        };
        let session = match self.resolve(peer, Some(id)) {
            Ok(id) => &self.sessions[&id],
            Err(error) => return self.reply(key, Reply::Error { error }),
        };
        let name = start.output.clone().unwrap_or_default();
        let output = output.map(|file| {
            let file = crate::manager::archive::CutOnFailure::new(file);
            (Box::new(file) as Box<dyn std::io::Write + Send>, name)
        });
        session.send(Command::Start {
            disposition,
            output,
            from: Some(key),
        });
        self.wait(key, id, Waiting::Start);
    }

    fn on_news(&mut self, news: News) {
        match news {
            News::Started {
                session,
                to,
                providers,
                timed_out,
                notes,
            } => {
                let reply = Reply::Started {
                    session,
                    providers,
                    timed_out,
                    notes,
                };
                self.answer(session, to, Waiting::Start, reply);
            }
            News::Refused { session, to, error } => {
                // Only the controller whose command was refused, if that command still waits.
                for what in [Waiting::Start, Waiting::Stop] {
                    let reply = Reply::Error {
                        error: error.clone(),
                    };
                    if self.answer(session, to, what, reply) {
                        break;
                    }
                }
            }
            News::ProviderLeft { session, provider } => {
                // It registers again by itself (if it still runs).
                if self
                    .providers
                    .get(&provider)
                    .is_some_and(|p| matches!(p.place, Place::Session(s) if s == session))
                {
                    self.providers.remove(&provider);
                }
            }
            News::Stopped {
                session,
                to,
                start_to,
                reason,
                info,
            } => self.session_stopped(session, [to, start_to], reason, info),
            News::Ended { session, reason } => self.session_ended(session, reason),
        }
    }

    /// Answer controller `to` if it waits for `what` on `session`: each command is answered
    /// once, to the controller that sent it. Whether it was answered.
    fn answer(&mut self, session: u32, to: Option<u64>, what: Waiting, reply: Reply) -> bool {
        let Some(k) = to else {
            return false;
        };
        let Some(c) = self.controllers.get_mut(&k) else {
            return false;
        };
        if c.waiting != Some((session, what)) {
            return false;
        }
        c.waiting = None;
        self.reply(k, reply);
        true
    }

    /// `session` stopped: the stop's controller and a start that had not completed are
    /// answered (the archive holds what was written), else the owner is told.
    fn session_stopped(
        &mut self,
        session: u32,
        [to, start_to]: [Option<u64>; 2],
        reason: String,
        info: Box<SessionInfo>,
    ) {
        self.log(format_args!(
            "fxtrace daemon: session {session} stopped ({reason}): {} records, {} bytes \
             written",
            info.records_written, info.bytes_written
        ));
        let stopped = Reply::Stopped((*info).clone());
        let stopper = self
            .answer(session, to, Waiting::Stop, stopped.clone())
            .then_some(to)
            .flatten();
        let starter = self
            .answer(session, start_to, Waiting::Start, stopped)
            .then_some(start_to)
            .flatten();
        let owner = self.sessions.get(&session).and_then(|s| s.owner);
        if let Some(owner) = owner.filter(|o| Some(*o) != stopper && Some(*o) != starter) {
            self.send_to(owner, &FromService::Event(Event::Stopped { reason, info }));
        }
    }

    /// `session` ended: forgotten, its providers register again by themselves, the
    /// controllers waiting on it answered, its owner told.
    fn session_ended(&mut self, session: u32, reason: String) {
        let waiting: Vec<(u64, Waiting)> = self
            .controllers
            .iter()
            .filter_map(|(k, c)| match c.waiting {
                Some((s, w)) if s == session => Some((*k, w)),
                _ => None,
            })
            .collect();
        let owner = self.sessions.get(&session).and_then(|s| s.owner);
        self.log(format_args!(
            "fxtrace daemon: session {session} ended ({reason})"
        ));
        if let Some(mut s) = self.sessions.remove(&session) {
            // It sent Ended last: the thread is returning.
            if let Some(t) = s.thread.take() {
                let _ = t.join();
            }
        }
        self.providers
            .retain(|_, p| !matches!(p.place, Place::Session(s) if s == session));
        for (k, w) in &waiting {
            if let Some(c) = self.controllers.get_mut(k) {
                c.waiting = None;
            }
            let reply = match w {
                Waiting::Terminate => Reply::Terminated { session },
                _ => Reply::Error {
                    error: format!("session {session} ended: {reason}"),
                },
            };
            self.reply(*k, reply);
        }
        if let Some(owner) = owner.filter(|o| !waiting.iter().any(|(k, _)| k == o)) {
            self.send_to(owner, &FromService::Event(Event::Ended { session, reason }));
        }
    }
}

/// What a new session records, as `start` asks (mode, buffer size, categories), checked.
fn session_config(start: &StartRequest) -> Result<SessionConfig, String> {
    use fxtrace::protocol::control::{MAX_CATEGORIES, MAX_CATEGORY_NAME_LEN};
    let mut session_config = SessionConfig {
        buffering_mode: super::session::RECORDING_MODE,
        buffer_size_bytes: super::session::RECORDING_BUFFER_SIZE,
        ..SessionConfig::default()
    };
    if let Some(mode) = &start.mode {
        session_config.buffering_mode = mode.parse::<BufferingMode>().map_err(|e| e.to_string())?;
    }
    if let Some(size) = start.buffer_size {
        if !fxtrace::buffer::is_valid_buffer_size(size) {
            return Err(format!(
                "buffer size {size} bytes is not usable: it must be a multiple of 4096 between \
                 4 KiB and 4 GiB"
            ));
        }
        session_config.buffer_size_bytes = size;
    }
    if start.categories.len() > MAX_CATEGORIES {
        return Err(format!(
            "{} categories: at most {MAX_CATEGORIES} may be enabled",
            start.categories.len(),
        ));
    }
    if let Some(long) = start
        .categories
        .iter()
        .find(|c| c.len() > MAX_CATEGORY_NAME_LEN)
    {
        return Err(format!(
            "category {long:?} is longer than {MAX_CATEGORY_NAME_LEN} bytes"
        ));
    }
    session_config.categories = start.categories.clone();
    // A provider that does not answer Stop is salvaged after this, well inside the service's
    // shutdown bound and a controller's patience.
    session_config.stop_timeout = SESSION_STOP_TIMEOUT;
    session_config.start_timeout = SESSION_STOP_TIMEOUT;
    Ok(session_config)
}

/// Create `/run/fxtrace` (0755, root's) for the system socket.
fn create_socket_dir(socket: &Path) -> Result<(), ServiceError> {
    let Some(dir) = socket.parent() else {
        return Ok(());
    };
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Someone else's directory is not ours to use.
            let meta =
                std::fs::symlink_metadata(dir).map_err(|source| ServiceError::SocketDir {
                    path: dir.to_owned(),
                    source,
                })?;
            use std::os::unix::fs::MetadataExt;
            if !meta.is_dir() || meta.uid() != 0 || meta.permissions().mode() & 0o022 != 0 {
                return Err(ServiceError::SocketDir {
                    path: dir.to_owned(),
                    source: std::io::Error::other(
                        "it exists but is not a directory owned by root and writable only by it",
                    ),
                });
            }
            Ok(())
        }
        Err(source) => Err(ServiceError::SocketDir {
            path: dir.to_owned(),
            source,
        }),
    }
}

/// The listening socket systemd handed over (`LISTEN_FDS`/`LISTEN_PID`, first descriptor
/// 3), if it did. The variables are removed so children do not see them.
pub fn systemd_listen_fd() -> Option<OwnedFd> {
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.parse().ok()?;
    let fds: u32 = std::env::var("LISTEN_FDS").ok()?.parse().ok()?;
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    if pid != std::process::id() || fds == 0 {
        return None;
    }
    // SAFETY: F_GETFD only reads descriptor 3's flags; a closed number fails with EBADF.
    if unsafe { libc::fcntl(3, libc::F_GETFD) } < 0 {
        return None;
    }
    use std::os::fd::FromRawFd;
    // SAFETY: systemd passes the listening socket as descriptor 3 (SD_LISTEN_FDS_START) to
    // this process (LISTEN_PID matched), and it is open; nothing else in the process owns it.
    Some(unsafe { OwnedFd::from_raw_fd(3) })
}

/// Whether a controller's output is a regular file open for writing: anything else (a pipe
/// or FIFO kept full, a socket, a terminal) could block the writes of the session, and a
/// descriptor open only for reading would lose the trace.
fn writable_regular_file(file: &File) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let kind = file
        .metadata()
        .map_err(|e| format!("the output file handed over cannot be examined: {e}"))?
        .file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a pipe or FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(format!(
            "the output handed over is {what}: give -o a regular file (fxtrace start opens one)"
        ));
    }
    let flags = nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_GETFL)
        .map_err(|e| format!("the output file handed over cannot be examined: {e}"))?;
    let mode = flags & libc::O_ACCMODE;
    if mode != libc::O_WRONLY && mode != libc::O_RDWR {
        return Err("the output file handed over is not open for writing".into());
    }
    Ok(())
}

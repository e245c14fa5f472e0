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

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::conn::{longest_waiting, ConnError, FramedConn, ReadOutcome};
use super::server::{Manager, ManagerConfig, Registration, Waker};
use super::session::SessionConfig;
use fxtrace::protocol::control::{
    BufferDisposition, BufferingMode, Message, SessionState, StatusEntry,
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
/// Largest message a peer of the service may send (a controller's request, a Register).
pub const MAX_REQUEST_BODY: usize = 64 << 10;
/// How long a new connection may take to say who it is.
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);

/// The socket a service listens on by default: [`SYSTEM_SOCKET_PATH`] for root, else the
/// user's (`$XDG_RUNTIME_DIR/fxtrace.sock`, else `/tmp/fxtrace-<uid>.sock`). `FXTRACE_SOCKET`
/// overrides both.
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
}

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
        let waker = Waker::new().map_err(|_| ServiceError::Sys {
            op: "eventfd",
            source: Errno::last(),
        })?;
        // Sessions hand this rate to providers; measure it now, not in the loop.
        let _ = fxtrace::clock::info();
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
                shutdown_deadline = Some(Instant::now() + Duration::from_secs(10));
                for session in self.sessions.values() {
                    session.send(Command::Terminate {
                        reason: "the trace service is stopping".into(),
                    });
                }
            }
            if let Some(deadline) = shutdown_deadline {
                if self.sessions.is_empty() || Instant::now() >= deadline {
                    for (id, session) in std::mem::take(&mut self.sessions) {
                        if session.thread.as_ref().is_some_and(|t| !t.is_finished()) {
                            self.log(format_args!(
                                "fxtrace daemon: session {id} did not end in time"
                            ));
                        }
                    }
                    self.log("fxtrace daemon: stopped");
                    return Ok(());
                }
            }
            self.turn(shutdown_deadline)?;
        }
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
        let now = Instant::now();
        let mut deadline = self.pending.iter().map(|p| p.deadline).min();
        if let Some(s) = shutdown {
            deadline = Some(deadline.map_or(s, |d| d.min(s)));
        }
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let ms = d.saturating_duration_since(now).as_millis().min(60_000) as i32 + 1;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut targets = Vec::new();
        let ready: Vec<Target> = {
            let mut fds = Vec::new();
            let readable = PollFlags::POLLIN;
            fds.push(PollFd::new(self.listener.as_fd(), readable));
            targets.push(Target::Listener);
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
                fds.push(PollFd::new(c.conn.as_fd(), readable));
                targets.push(Target::Controller(*key));
            }
            match poll(&mut fds, timeout) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(source) => return Err(ServiceError::Sys { op: "poll", source }),
            }
            fds.iter()
                .zip(&targets)
                .filter(|(fd, _)| fd.revents().is_some_and(|r| !r.is_empty()))
                .map(|(_, t)| *t)
                .collect()
        };
        // Pending connections are handled last and by index, highest first, so indices stay
        // valid while some are removed.
        let mut pending_ready = Vec::new();
        for target in ready {
            match target {
                Target::Listener => self.accept_all(),
                Target::Waker => self.waker.drain(),
                Target::Pending(i) => pending_ready.push(i),
                Target::Idle(id) => self.read_idle(id),
                Target::Controller(key) => self.read_controller(key),
            }
        }
        pending_ready.sort_unstable_by(|a, b| b.cmp(a));
        for i in pending_ready {
            self.read_pending(i);
        }
        let now = Instant::now();
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
        Ok(())
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok(conn) => {
                    if self.pending.len() >= MAX_PENDING {
                        let oldest = longest_waiting(&self.pending, |p| p.deadline);
                        self.pending.swap_remove(oldest);
                        self.log(format_args!(
                            "fxtrace daemon: more than {MAX_PENDING} connections waiting to say \
                             who they are: the oldest was closed"
                        ));
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
                Err(TransportError::PeerRefused { pid, uid, .. }) => self.log(format_args!(
                    "fxtrace daemon: refused pid {pid}: uid {uid} may not connect to a service \
                     of another user (run a service of your own: fxtrace daemon)"
                )),
                Err(TransportError::Sys {
                    source: Errno::ECONNABORTED | Errno::EINTR,
                    ..
                }) => {}
                Err(e) => {
                    self.log(format_args!("fxtrace daemon: accept failed: {e}"));
                    return;
                }
            }
        }
    }

    fn read_pending(&mut self, index: usize) {
        let Some(p) = self.pending.get_mut(index) else {
            return;
        };
        let pid = p.conn.conn().peer_pid();
        let messages = match p.conn.read_available() {
            Ok(ReadOutcome::Messages(m)) if m.is_empty() => return,
            Ok(ReadOutcome::Messages(m)) | Ok(ReadOutcome::Closed(m)) => m,
            Err(e) => {
                self.pending.swap_remove(index);
                self.log(format_args!(
                    "fxtrace daemon: pid {pid}: bad first message: {e}"
                ));
                return;
            }
        };
        let Pending { mut conn, .. } = self.pending.swap_remove(index);
        let Some(first) = messages.into_iter().next() else {
            return; // closed before saying anything
        };
        match first {
            Message::Register {
                pid: claimed_pid,
                name,
                known_categories,
                accepts_ticks_per_second,
                waits_for_session,
            } => {
                let registration = Registration {
                    claimed_pid,
                    name,
                    known_categories,
                    accepts_ticks_per_second,
                };
                self.register(conn, registration, waits_for_session);
            }
            Message::Controller { ref body, .. } => {
                let fds = match conn.take_fds(&first) {
                    Ok(fds) => fds,
                    Err(e) => {
                        self.log(format_args!("fxtrace daemon: controller pid {pid}: {e}"));
                        return;
                    }
                };
                let cred = conn.conn().peer();
                let peer = Peer::of(conn.as_fd(), cred);
                let of_uid = self
                    .controllers
                    .values()
                    .filter(|c| c.peer.cred.uid == cred.uid)
                    .count();
                if of_uid >= MAX_CONTROLLERS_PER_UID {
                    let reply = Reply::Error {
                        error: format!(
                            "uid {} already has {of_uid} controllers connected (at most \
                             {MAX_CONTROLLERS_PER_UID})",
                            cred.uid
                        ),
                    };
                    let _ = send(&mut conn, &FromService::Reply(reply));
                    return;
                }
                let key = self.next_controller;
                self.next_controller += 1;
                self.controllers.insert(
                    key,
                    Controller {
                        conn,
                        peer,
                        waiting: None,
                    },
                );
                let body = body.clone();
                self.handle_request(key, &body, fds);
            }
            Message::StatusRequest { .. } => {
                // A status client of `fxtrace record`'s protocol: the registry as a session.
                let state = if self.sessions.is_empty() {
                    SessionState::Ready
                } else {
                    SessionState::Started
                };
                let providers = self
                    .providers
                    .iter()
                    .map(|(id, p)| StatusEntry {
                        id: *id,
                        pid: p.pid,
                        name: p.name.clone(),
                    })
                    .take(fxtrace::protocol::control::MAX_STATUS_PROVIDERS)
                    .collect();
                let reply = Message::StatusReply {
                    state,
                    providers,
                    categories: self.categories(None),
                    figures: None,
                };
                let _ = conn.send(&reply, &[]);
            }
            other => self.log(format_args!(
                "fxtrace daemon: pid {pid}: unexpected first message {}",
                other.name()
            )),
        }
    }

    /// A provider's Register.
    fn register(&mut self, mut conn: FramedConn, registration: Registration, waits: bool) {
        let cred = conn.conn().peer();
        let peer = Peer::of(conn.as_fd(), cred);
        let name = registration.name.clone();
        let pid = u32::try_from(cred.pid).unwrap_or(registration.claimed_pid);
        if let Err(why) = self.config.policy.may_register(&peer) {
            self.log(format_args!(
                "fxtrace daemon: provider {name:?} (pid {pid}) refused: {why}"
            ));
            return;
        }
        if let Err(why) = self.admit(pid, cred.uid) {
            self.log(format_args!(
                "fxtrace daemon: provider {name:?} (pid {pid}) refused: {why}"
            ));
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
            .find(|(_, s)| s.wants(&provider))
            .map(|(sid, _)| *sid);
        if !waits && session.is_none() {
            self.log(format_args!(
                "fxtrace daemon: provider {name:?} (pid {pid}) cannot wait for a session (an \
                 fxtrace older than the service?) and no session is running for it: closed"
            ));
            return;
        }
        if waits {
            let registered = Message::Registered {
                provider_id: id,
                joining: session.is_some(),
            };
            if let Err(e) = conn.send(&registered, &[]) {
                self.log(format_args!(
                    "fxtrace daemon: provider {name:?} (pid {pid}): {e}"
                ));
                return;
            }
        }
        match session {
            Some(sid) => {
                provider.place = Place::Session(sid);
                if let Some(s) = self.sessions.get(&sid) {
                    s.send(Command::Adopt(conn, provider.registration.clone()));
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
        if self.providers.len() >= MAX_PROVIDERS {
            return Err(format!("{MAX_PROVIDERS} providers already registered"));
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
        let (messages, closed) = match c.conn.read_available() {
            Ok(ReadOutcome::Messages(m)) => (m, false),
            Ok(ReadOutcome::Closed(m)) => (m, true),
            Err(e) => {
                let pid = c.conn.conn().peer_pid();
                self.log(format_args!("fxtrace daemon: controller pid {pid}: {e}"));
                self.controller_gone(key);
                return;
            }
        };
        for msg in messages {
            let Some(c) = self.controllers.get_mut(&key) else {
                return;
            };
            let fds = match c.conn.take_fds(&msg) {
                Ok(fds) => fds,
                Err(e) => {
                    self.reply(
                        key,
                        Reply::Error {
                            error: e.to_string(),
                        },
                    );
                    continue;
                }
            };
            match msg {
                Message::Controller { body, .. } => self.handle_request(key, &body, fds),
                other => self.reply(
                    key,
                    Reply::Error {
                        error: format!("unexpected {} message from a controller", other.name()),
                    },
                ),
            }
        }
        if closed {
            self.controller_gone(key);
        }
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

    fn send_to(&mut self, key: u64, what: &FromService) {
        let Some(c) = self.controllers.get_mut(&key) else {
            return;
        };
        if let Err(e) = send(&mut c.conn, what) {
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
        if self
            .controllers
            .get(&key)
            .is_some_and(|c| c.waiting.is_some())
        {
            return self.reply(
                key,
                Reply::Error {
                    error: "a request is already being carried out on this connection".into(),
                },
            );
        }
        match request {
            Request::Providers {} => {
                let providers = self.visible_providers(&peer);
                self.reply(key, Reply::Providers { providers });
            }
            Request::Categories {} => {
                let categories = self.categories(Some(&peer));
                self.reply(key, Reply::Categories { categories });
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
                };
                self.reply(key, Reply::Status(report));
            }
            Request::Start(start) => {
                let output = fds.pop().map(File::from);
                match start.session {
                    Some(id) => self.restart(key, &peer, id, &start, output),
                    None => self.start(key, &peer, *start, output),
                }
            }
            Request::Stop { session, write } => match self.resolve(&peer, session) {
                Ok(id) => {
                    self.sessions[&id].send(Command::Stop { write });
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
            None => {
                let mine: Vec<u32> = self
                    .sessions
                    .iter()
                    .filter(|(_, s)| policy.may_control(peer, s.owner_uid).is_ok())
                    .map(|(id, _)| *id)
                    .collect();
                match mine.as_slice() {
                    [id] => Ok(*id),
                    [] => Err("no session is running (fxtrace start starts one)".into()),
                    ids => Err(format!(
                        "{} sessions are running ({ids:?}): say which with --session",
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

    fn categories(&self, peer: Option<&Peer>) -> Vec<String> {
        let set: BTreeSet<&String> = self
            .providers
            .values()
            .filter(|p| peer.map_or(true, |peer| self.config.policy.may_trace(peer, p.uid)))
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

    fn create_session(
        &mut self,
        key: u64,
        peer: &Peer,
        start: StartRequest,
        output: Option<File>,
    ) -> Result<u32, String> {
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
        let mut session_config = SessionConfig::default();
        if let Some(mode) = &start.mode {
            session_config.buffering_mode =
                mode.parse::<BufferingMode>().map_err(|e| e.to_string())?;
        }
        if let Some(size) = start.buffer_size {
            if !fxtrace::buffer::is_valid_buffer_size(size) {
                return Err(format!(
                    "buffer size {size} bytes is not usable: it must be a multiple of 4096 \
                     between 4 KiB and 4 GiB"
                ));
            }
            session_config.buffer_size_bytes = size;
        }
        session_config.categories = start.categories.clone();
        let output: Box<dyn std::io::Write + Send> = match output {
            Some(file) => Box::new(std::io::BufWriter::with_capacity(1 << 20, file)),
            None => Box::new(std::io::sink()),
        };
        let id = self.next_session;
        let mut config = ManagerConfig::new(format!("{}#{id}", self.listener.path().display()));
        config.session = session_config;
        config.output_name = start.output.clone().unwrap_or_default();
        let manager = Manager::without_listener(config, output).map_err(|e| e.to_string())?;
        self.next_session += 1;
        let (commands, rx) = mpsc::channel();
        let info = Arc::new(Mutex::new(SessionInfo {
            session: id,
            state: SessionState::Initialized.name().into(),
            mode: manager.session().config().buffering_mode.as_str().into(),
            buffer_size: manager.session().config().buffer_size_bytes,
            providers: 0,
            records_written: 0,
            bytes_written: 0,
            records_dropped: 0,
            output: start.output.clone().unwrap_or_default(),
            owner_uid: uid,
            detached: start.detach,
            problems: Vec::new(),
        }));
        let session_waker = manager.waker();
        let plan = Plan {
            id,
            duration: start.duration_ms.map(Duration::from_millis),
            stop_on_alert: start.stop_on_alert.clone(),
            system_wide: start.system_wide,
            ending: Arc::new(AtomicBool::new(false)),
        };
        let ending = plan.ending.clone();
        let thread = {
            let news = self.news_tx.clone();
            let waker = self.waker.clone();
            let info = info.clone();
            std::thread::Builder::new()
                .name(format!("fxtrace-session-{id}"))
                .spawn(move || session::run(manager, plan, rx, news, waker, info))
                .map_err(|e| format!("starting the session's thread: {e}"))?
        };
        let session = Session {
            commands,
            waker: session_waker,
            info,
            owner_uid: uid,
            owner: (!start.detach).then_some(key),
            pids: start.pids.iter().copied().collect(),
            names: start.names.iter().cloned().collect(),
            any_uid: self.config.policy.is_admin(peer),
            ending,
            thread: Some(thread),
        };
        // The idle providers it wants, then the start.
        let mut joined = 0;
        for p in self.providers.values_mut() {
            if !session.wants(p) {
                continue;
            }
            if let Place::Idle(_) = p.place {
                let Place::Idle(conn) = std::mem::replace(&mut p.place, Place::Session(id)) else {
                    continue;
                };
                session.send(Command::Adopt(conn, p.registration.clone()));
                joined += 1;
            }
        }
        session.send(Command::Start {
            disposition: BufferDisposition::ClearEntire,
            output: None,
        });
        self.log(format_args!(
            "fxtrace daemon: session {id} started by uid {uid} with {joined} providers{}",
            if start.detach { " (detached)" } else { "" }
        ));
        self.sessions.insert(id, session);
        Ok(id)
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
        let output = output.map(|file| {
            Box::new(std::io::BufWriter::with_capacity(1 << 20, file))
                as Box<dyn std::io::Write + Send>
        });
        session.send(Command::Start {
            disposition,
            output,
        });
        self.wait(key, id, Waiting::Start);
    }

    fn on_news(&mut self, news: News) {
        let session = match &news {
            News::Started { session, .. }
            | News::Refused { session, .. }
            | News::Stopped { session, .. }
            | News::Ended { session, .. } => *session,
        };
        let waiting: Vec<(u64, Waiting)> = self
            .controllers
            .iter()
            .filter_map(|(k, c)| match c.waiting {
                Some((s, w)) if s == session => Some((*k, w)),
                _ => None,
            })
            .collect();
        let owner = self.sessions.get(&session).and_then(|s| s.owner);
        let answered = |svc: &mut Service, what: Waiting, reply: Reply| {
            for (k, w) in &waiting {
                if *w == what {
                    if let Some(c) = svc.controllers.get_mut(k) {
                        c.waiting = None;
                    }
                    svc.reply(*k, reply.clone());
                }
            }
        };
        match news {
            News::Started {
                providers,
                timed_out,
                notes,
                ..
            } => answered(
                self,
                Waiting::Start,
                Reply::Started {
                    session,
                    providers,
                    timed_out,
                    notes,
                },
            ),
            News::Refused { error, .. } => {
                for (k, _) in &waiting {
                    if let Some(c) = self.controllers.get_mut(k) {
                        c.waiting = None;
                    }
                    self.reply(
                        *k,
                        Reply::Error {
                            error: error.clone(),
                        },
                    );
                }
            }
            News::Stopped { reason, info, .. } => {
                self.log(format_args!(
                    "fxtrace daemon: session {session} stopped ({reason}): {} records, {} bytes \
                     written",
                    info.records_written, info.bytes_written
                ));
                let stop_waiters: Vec<u64> = waiting
                    .iter()
                    .filter(|(_, w)| *w == Waiting::Stop)
                    .map(|(k, _)| *k)
                    .collect();
                answered(self, Waiting::Stop, Reply::Stopped(info.clone()));
                if let Some(owner) = owner.filter(|o| !stop_waiters.contains(o)) {
                    self.send_to(owner, &FromService::Event(Event::Stopped { reason, info }));
                }
            }
            News::Ended { reason, .. } => {
                self.log(format_args!(
                    "fxtrace daemon: session {session} ended ({reason})"
                ));
                if let Some(mut s) = self.sessions.remove(&session) {
                    if let Some(t) = s.thread.take() {
                        let _ = t.join();
                    }
                }
                // Its providers register again by themselves.
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
    }
}

fn send(conn: &mut FramedConn, what: &FromService) -> Result<(), String> {
    let msg = what.to_message().map_err(|e| e.to_string())?;
    conn.send(&msg, &[]).map_err(|e: ConnError| e.to_string())
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
    use std::os::fd::FromRawFd;
    // SAFETY: systemd passes the listening socket as descriptor 3 (SD_LISTEN_FDS_START) to
    // this process (LISTEN_PID matched); nothing else in the process owns it.
    Some(unsafe { OwnedFd::from_raw_fd(3) })
}

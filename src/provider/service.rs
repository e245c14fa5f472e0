//! Following the trace service (`fxtrace daemon`): a process registers once, stays idle at
//! the cost of its disabled call sites, joins every session the service starts for it, and
//! registers again when the service restarts or appears later than the process.
//!
//! One background thread (`fxtrace-service`) per process does it:
//!
//! 1. Register, saying the provider waits for a session
//!    ([`crate::protocol::control::FEATURE_WAITS_FOR_SESSION`]), at the first of
//!    [`service_socket_paths`] where something listens. A service answers `Registered`; a
//!    session manager answers Initialize at once (then that session is served as below).
//! 2. Idle: the thread sleeps in `poll` on the connection (no timeout, no wake-ups) until
//!    Initialize comes: it builds a [`Provider`] over the connection, installs its context as
//!    the process's current one, and sleeps until that session ends. Then it registers again.
//! 3. No service: the thread watches the sockets' directories with inotify (the nearest
//!    existing ancestor when a directory does not exist yet) and sleeps in `read` until
//!    something is created there: no syscall while nothing happens. A socket that exists
//!    but nobody listens on (a service that died) is tried again when its directory changes
//!    (a new service replaces it) or after a back-off that doubles from [`RETRY_INTERVAL`] to
//!    [`MAX_RETRY_INTERVAL`]; a service that refuses the process, after the same back-off.
//!
//! A process whose program closes the service thread's descriptors loses its registration
//! (checked with [`crate::fd_guard`] before every use, as the provider's control thread does)
//! and falls back to one attempt per second.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::client::{handshake_deadline, register_at, ControlFd, Registered};
use super::{Provider, ProviderError, ProviderOptions};
use crate::fd_guard::{self, GuardedFd};
use crate::protocol::control::Message;
use crate::protocol::transport::{default_socket_path, socket_path_from, ControlConn};

/// The system-wide trace service's socket (`fxtrace daemon` run as root, or its systemd
/// socket unit).
pub const SYSTEM_SOCKET_PATH: &str = "/run/fxtrace/fxtrace.sock";

/// Least time between two registration attempts at a socket that exists but did not
/// register the provider (stale, refusing, or failing).
pub const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// Longest wait between attempts that keep failing (a service that refuses this process, a
/// socket nobody listens on and whose directory does not change).
pub const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(60);

/// Where a provider looks for the trace service, in order: the user's own service
/// (`$XDG_RUNTIME_DIR/fxtrace.sock`, else `/tmp/fxtrace-<euid>/fxtrace.sock`), then the system's
/// ([`SYSTEM_SOCKET_PATH`]). `FXTRACE_SOCKET`, when set, names the only one.
pub fn service_socket_paths() -> Vec<PathBuf> {
    if std::env::var_os(crate::protocol::transport::SOCKET_ENV).is_some_and(|p| !p.is_empty()) {
        return vec![default_socket_path()];
    }
    let user = socket_path_from(
        None,
        std::env::var_os("XDG_RUNTIME_DIR"),
        nix::unistd::geteuid().as_raw(),
    );
    let system = PathBuf::from(SYSTEM_SOCKET_PATH);
    if user == system {
        vec![user]
    } else {
        vec![user, system]
    }
}

/// Where this process stands with the trace service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceState {
    /// No service found yet: watching for one.
    Waiting,
    /// Registered with the service at `socket` as provider `id`, no session running for it.
    Idle {
        /// The service's socket.
        socket: PathBuf,
        /// The provider's id at the service.
        id: u32,
    },
    /// A session of the service is tracing this process.
    Tracing {
        /// The service's socket.
        socket: PathBuf,
        /// The provider's id in the session.
        id: u32,
    },
}

/// What the service thread publishes.
#[derive(Debug)]
struct Status {
    state: ServiceState,
    /// Registrations made (a restart of the service makes one more).
    registrations: u64,
    /// Sessions joined.
    sessions: u64,
    /// The last failure (registration refused, session set-up failed, …).
    last_error: Option<String>,
}

#[derive(Debug)]
struct Shared {
    status: Mutex<Status>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }
}

/// The process's service thread, once started.
static SERVICE: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

/// What this process's service registration looks like now: `None` when the process does
/// not follow a service (it never called [`crate::connect`] without `FXTRACE_SOCKET`).
pub fn service_status() -> Option<ServiceStatus> {
    let shared = SERVICE.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
    let status = shared.lock();
    Some(ServiceStatus {
        state: status.state.clone(),
        registrations: status.registrations,
        sessions: status.sessions,
        last_error: status.last_error.clone(),
    })
}

/// A snapshot of the process's registration with the trace service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStatus {
    /// Where it stands.
    pub state: ServiceState,
    /// Registrations made so far (each service (re)start the process saw makes one).
    pub registrations: u64,
    /// Sessions joined so far.
    pub sessions: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

/// What a follower does when a session starts for the process (after the session's context
/// became the process's current one): what it returns is dropped when the session ends.
pub type SessionHook = Box<dyn FnMut(&Provider) -> Box<dyn Send> + Send>;

/// Follow the trace service as provider `name` (see the module docs), calling `on_session`
/// as each session starts (the preload object starts its capture there). The first call in a
/// process starts the service thread; later calls change nothing. When a service is
/// listening and a session of it is running for this process, waits at most
/// `options.start_wait` for that session to start, so the program's first events are kept.
pub fn follow_service(
    name: &str,
    options: &ProviderOptions,
    on_session: SessionHook,
) -> Result<(), ProviderError> {
    let mut slot = SERVICE.lock().unwrap_or_else(|p| p.into_inner());
    if slot.is_some() {
        return Ok(());
    }
    let paths = service_socket_paths();
    // The first attempt runs here, so a program started after the service is registered
    // (and, if a session is running, traced) when `connect` returns.
    let first = attempt(&paths, name, options);
    let joining = matches!(first, Attempt::Registered { joining: true, .. });
    let shared = start_following(name, options, on_session, paths, first)?;
    *slot = Some(shared.clone());
    drop(slot);
    if joining {
        wait_for_start(&shared, options);
    }
    Ok(())
}

/// Join whatever listens at the socket `FXTRACE_SOCKET` names (or `options.socket_path`) as
/// provider `name`, registering as a provider that can wait for a session: a session manager
/// (`fxtrace record`) answers Initialize, and its provider is returned, as
/// [`Provider::connect_with`] gives it; a trace service (`fxtrace daemon --socket PATH`)
/// answers Registered, and the process then follows that service as [`follow_service`] follows
/// the default ones (idle, its sessions, its restarts; `on_session` as each session starts),
/// and `None` is returned. Nobody listening: `None` and nothing else (no thread, no watch: a
/// program started without a manager pays one failed `connect`, as before).
///
/// `options.exit_hook` is for a session manager's provider (the preload object stops that one
/// itself); the sessions of a followed service always stop at exit through the provider's
/// exit hook, as [`follow_service`]'s do by default.
pub fn join_or_follow(
    name: &str,
    options: &ProviderOptions,
    on_session: SessionHook,
) -> Result<Option<Provider>, ProviderError> {
    let path = options
        .socket_path
        .clone()
        .unwrap_or_else(default_socket_path);
    let mut slot = SERVICE.lock().unwrap_or_else(|p| p.into_inner());
    // Both tries within one handshake, as `connect_with`'s.
    let deadline = handshake_deadline(options);
    let registered = match register_at(&path, name, options, true, deadline) {
        // A manager of the first control revision refuses Register's features: register with
        // it as before the service existed (a trace service never hangs up on a first
        // Register, so that is not one).
        Err(ProviderError::Transport(crate::protocol::transport::TransportError::PeerClosed)) => {
            register_at(&path, name, options, false, deadline)?
        }
        other => other?,
    };
    let Some((conn, msg, fds)) = registered else {
        return Ok(None);
    };
    let Message::Registered {
        provider_id,
        joining,
    } = msg
    else {
        // Initialize (or Refused, or a protocol error: said by `from_initialize`).
        return Provider::from_initialize(name.to_owned(), conn, msg, fds, options).map(Some);
    };
    if slot.is_some() {
        // This process follows a service already (a second `connect`): one registration
        // per process, the one it has.
        return Ok(None);
    }
    let first = Attempt::Registered {
        socket: path.clone(),
        conn,
        id: provider_id,
        joining,
    };
    let options = ProviderOptions {
        exit_hook: true,
        // The sessions' providers are served here, each with its thread from the start.
        defer_control_thread: false,
        ..options.clone()
    };
    let shared = start_following(name, &options, on_session, vec![path], first)?;
    *slot = Some(shared.clone());
    drop(slot);
    if joining {
        wait_for_start(&shared, &options);
    }
    Ok(None)
}

/// Start the service thread over `paths`, from the outcome of the first attempt.
fn start_following(
    name: &str,
    options: &ProviderOptions,
    on_session: SessionHook,
    paths: Vec<PathBuf>,
    first: Attempt,
) -> Result<Arc<Shared>, ProviderError> {
    let shared = Arc::new(Shared {
        status: Mutex::new(Status {
            state: ServiceState::Waiting,
            registrations: 0,
            sessions: 0,
            last_error: None,
        }),
        changed: Condvar::new(),
    });
    {
        let shared = shared.clone();
        let name = name.to_owned();
        let options = options.clone();
        crate::helper_thread::spawn("fxtrace-service", move || {
            run(&shared, &name, &options, &paths, on_session, Some(first))
        })
        .map_err(ProviderError::Thread)?;
    }
    Ok(shared)
}

/// A registration joined a session that is running: wait at most `options.start_wait` for the
/// session's start, so the program's first events are kept.
fn wait_for_start(shared: &Shared, options: &ProviderOptions) {
    if !options.start_wait.is_zero() {
        // A wait too long for the clock is no bound at all: cap it at an hour.
        let start_wait = options.start_wait.min(Duration::from_secs(3600));
        let deadline = Instant::now() + start_wait;
        let mut status = shared.lock();
        while !matches!(status.state, ServiceState::Tracing { .. }) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            status = shared
                .changed
                .wait_timeout(status, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

/// The outcome of one registration attempt.
enum Attempt {
    /// Nothing listens at any of the paths.
    NoService,
    /// A service registered the provider (idle, or `joining` a running session).
    Registered {
        socket: PathBuf,
        conn: ControlConn,
        id: u32,
        joining: bool,
    },
    /// A session manager answered Initialize: a session for this process right away.
    Session {
        socket: PathBuf,
        registered: Registered,
    },
    /// Something listens but did not register the provider.
    Failed(String),
}

/// Register at the first path where something listens, all of it within one handshake
/// deadline.
fn attempt(paths: &[PathBuf], name: &str, options: &ProviderOptions) -> Attempt {
    let mut failure = None;
    let deadline = handshake_deadline(options);
    for path in paths {
        match register_at(path, name, options, true, deadline) {
            Ok(None) => {}
            Ok(Some((
                conn,
                Message::Registered {
                    provider_id,
                    joining,
                },
                _,
            ))) => {
                return Attempt::Registered {
                    socket: path.clone(),
                    conn,
                    id: provider_id,
                    joining,
                }
            }
            Ok(Some(registered @ (_, Message::Initialize { .. }, _))) => {
                return Attempt::Session {
                    socket: path.clone(),
                    registered,
                }
            }
            Ok(Some((_, Message::Refused { reason }, _))) => {
                failure = Some(format!(
                    "{}: the service refused this process: {reason}",
                    path.display()
                ))
            }
            Ok(Some((_, other, _))) => {
                failure = Some(format!(
                    "{}: the service answered Register with {}",
                    path.display(),
                    other.name()
                ))
            }
            Err(e) => failure = Some(format!("{}: {e}", path.display())),
        }
    }
    match failure {
        Some(why) => Attempt::Failed(why),
        None => Attempt::NoService,
    }
}

/// The service thread.
fn run(
    shared: &Shared,
    name: &str,
    options: &ProviderOptions,
    paths: &[PathBuf],
    mut on_session: SessionHook,
    mut next: Option<Attempt>,
) {
    let mut last_attempt = Instant::now();
    // Attempts in a row that found a socket but no registration (stale, refusing): each
    // doubles the wait before the next, up to [`MAX_RETRY_INTERVAL`].
    let mut fruitless: u32 = 0;
    loop {
        let outcome = match next.take() {
            Some(outcome) => outcome,
            None => {
                let since = last_attempt.elapsed();
                if since < RETRY_INTERVAL {
                    std::thread::sleep(RETRY_INTERVAL - since);
                }
                last_attempt = Instant::now();
                attempt(paths, name, options)
            }
        };
        match outcome {
            Attempt::NoService => {
                shared.update(|s| s.state = ServiceState::Waiting);
                let Some(watch) = Watch::new(paths) else {
                    std::thread::sleep(backoff(fruitless));
                    fruitless = fruitless.saturating_add(1);
                    continue;
                };
                if paths.iter().any(|p| p.exists()) {
                    // A socket nobody listens on (a service that died), or one created
                    // between the attempt and the watch: try once more at the retry pace,
                    // then wait for the directory to change, or the back-off.
                    fruitless = fruitless.saturating_add(1);
                    if fruitless > 1 {
                        watch.wait(Some(backoff(fruitless)));
                    }
                } else {
                    fruitless = 0;
                    watch.wait(None);
                }
            }
            Attempt::Failed(why) => {
                shared.update(|s| {
                    s.state = ServiceState::Waiting;
                    s.last_error = Some(why);
                });
                std::thread::sleep(backoff(fruitless));
                fruitless = fruitless.saturating_add(1);
            }
            Attempt::Registered {
                socket, conn, id, ..
            } => {
                fruitless = 0;
                shared.update(|s| {
                    s.state = ServiceState::Idle {
                        socket: socket.clone(),
                        id,
                    };
                    s.registrations += 1;
                });
                match wait_for_initialize(conn, options) {
                    Ok(registered) => {
                        serve_session(shared, name, options, socket, registered, &mut on_session)
                    }
                    Err(why) => shared.update(|s| {
                        s.state = ServiceState::Waiting;
                        s.last_error = why;
                    }),
                }
            }
            Attempt::Session { socket, registered } => {
                serve_session(shared, name, options, socket, registered, &mut on_session)
            }
        }
    }
}

/// Serve one session: the provider over the connection, installed as the process's current
/// context, until the session ends.
fn serve_session(
    shared: &Shared,
    name: &str,
    options: &ProviderOptions,
    socket: PathBuf,
    (conn, msg, fds): Registered,
    on_session: &mut SessionHook,
) {
    let provider = match Provider::from_initialize(name.to_owned(), conn, msg, fds, options) {
        Ok(provider) => provider,
        Err(e) => {
            shared.update(|s| s.last_error = Some(format!("joining a session: {e}")));
            return;
        }
    };
    if let Err(e) = provider.install_global() {
        // Another context is the process's (a standalone trace): this session gets nothing
        // from the program; say so and leave it (the provider's drop sends STOPPED).
        shared.update(|s| s.last_error = Some(format!("joining a session: {e}")));
        return;
    }
    shared.update(|s| {
        s.state = ServiceState::Tracing {
            socket,
            id: provider.id(),
        };
        s.sessions += 1;
    });
    let guard = on_session(&provider);
    provider.wait_session_end();
    drop(guard);
    drop(provider);
    shared.update(|s| s.state = ServiceState::Waiting);
}

/// Sleep until the service sends Initialize on `conn` (a session takes the provider in), or
/// the connection ends (`Err`, with a reason when it is not the service going away). Once
/// its first byte is there, the message must be whole within the handshake timeout.
fn wait_for_initialize(
    mut conn: ControlConn,
    options: &ProviderOptions,
) -> Result<Registered, Option<String>> {
    let control = ControlFd::of(&conn).map_err(|e| Some(format!("fstat: {e}")))?;
    loop {
        let mut fds = [PollFd::new(conn.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => break,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(Some(format!("poll: {e}"))),
        }
    }
    if let Err(lost) = control.check() {
        // Never close a number the program took.
        control.drop_if_ours(conn);
        return Err(Some(lost.to_string()));
    }
    match conn.recv_msg_by(handshake_deadline(options)) {
        Ok((msg @ Message::Initialize { .. }, fds)) => Ok((conn, msg, fds)),
        Ok((other, _)) => {
            let why = format!("the service sent {} to an idle provider", other.name());
            control.drop_if_ours(conn);
            Err(Some(why))
        }
        Err(crate::protocol::transport::TransportError::PeerClosed) => {
            control.drop_if_ours(conn);
            Err(None)
        }
        Err(e) => {
            control.drop_if_ours(conn);
            Err(Some(e.to_string()))
        }
    }
}

/// The wait after `fruitless` attempts in a row that found no service to register with.
fn backoff(fruitless: u32) -> Duration {
    RETRY_INTERVAL
        .saturating_mul(1 << fruitless.min(6))
        .min(MAX_RETRY_INTERVAL)
}

/// An inotify descriptor watching the directories where the sockets would appear.
struct Watch {
    fd: GuardedFd,
}

impl Watch {
    fn new(paths: &[PathBuf]) -> Option<Watch> {
        // SAFETY: inotify_init1 has no memory preconditions.
        let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        if raw < 0 {
            return None;
        }
        // SAFETY: a new descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let fd = GuardedFd::new(fd, "inotify").ok()?;
        let mut watched = 0;
        for path in paths {
            let Some(dir) = nearest_existing_dir(path) else {
                continue;
            };
            let Ok(dir) = CString::new(dir.as_os_str().as_bytes()) else {
                continue;
            };
            let mask = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_ATTRIB;
            // SAFETY: `dir` is a NUL-terminated string alive for the call; the descriptor is
            // the inotify instance just created.
            if unsafe { libc::inotify_add_watch(fd.raw(), dir.as_ptr(), mask) } >= 0 {
                watched += 1;
            }
        }
        (watched > 0).then_some(Watch { fd })
    }

    /// Block until an event arrives, or `timeout` passes (or the descriptor stops being
    /// ours: then sleep the retry interval instead).
    fn wait(&self, timeout: Option<Duration>) {
        let mut buf = [0u64; 512];
        let Ok(fd) = self.fd.checked() else {
            std::thread::sleep(RETRY_INTERVAL);
            return;
        };
        if let Some(timeout) = timeout {
            let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            if let Ok(0) = poll(&mut fds, PollTimeout::from(ms)) {
                return;
            }
        }
        loop {
            // SAFETY: `buf` is writable for its whole size; `fd` is the inotify instance.
            let n = unsafe {
                libc::read(
                    fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    std::mem::size_of_val(&buf),
                )
            };
            match Errno::result(n) {
                Err(Errno::EINTR) => continue,
                Ok(_) => return,
                Err(_) => {
                    std::thread::sleep(RETRY_INTERVAL);
                    return;
                }
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let raw = self.fd.raw();
        let identity = self.fd.identity();
        // SAFETY: the number is the inotify instance this value took ownership of (checked
        // by `drop_if_ours` before closing).
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        fd_guard::drop_if_ours(owned, raw, &identity);
    }
}

/// `path`'s directory, or its nearest ancestor that exists.
fn nearest_existing_dir(path: &Path) -> Option<PathBuf> {
    let mut dir = path.parent()?;
    loop {
        if dir.is_dir() {
            return Some(dir.to_owned());
        }
        dir = dir.parent()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_existing_dir_walks_up() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/fxtrace.sock");
        assert_eq!(nearest_existing_dir(&deep).as_deref(), Some(dir.path()));
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        assert_eq!(nearest_existing_dir(&deep), Some(dir.path().join("a/b")));
    }

    #[test]
    fn a_watch_wakes_when_the_socket_appears() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("run/fxtrace.sock");
        let watch = Watch::new(std::slice::from_ref(&sock)).expect("inotify");
        let maker = {
            let run = dir.path().join("run");
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                std::fs::create_dir(run).unwrap();
            })
        };
        let t = Instant::now();
        watch.wait(None);
        assert!(t.elapsed() >= Duration::from_millis(40), "woke too early");
        maker.join().unwrap();
    }
}

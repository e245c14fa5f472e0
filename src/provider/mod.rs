//! The provider side of the protocol: register with a trace manager, receive the buffer and
//! the configuration, and answer Start, Stop and Terminate.
//!
//! ```no_run
//! use fxtrace::provider::Provider;
//!
//! // No manager (no socket, nobody listening): `None`, within microseconds.
//! if let Some(provider) = Provider::connect("my-app")? {
//!     // Install `provider.context()` as the process's current context (the record API), or
//!     // write through it directly: `context.acquire()`, `reserve`, `commit`.
//!     let context = provider.context().clone();
//!     provider.wait_started(std::time::Duration::from_secs(1));
//!     # let _ = context;
//!     fxtrace::alert("oom")?; // a flight recorder waiting for "oom" writes its trace
//! }
//! # Ok::<(), fxtrace::provider::ProviderError>(())
//! ```
//!
//! # What happens
//!
//! 1. [`Provider::connect`] finds the socket (`FXTRACE_SOCKET`, else the per-user default,
//!    [`crate::protocol::transport::default_socket_path`]) and connects with a bounded timeout.
//!    No socket or nobody listening: `Ok(None)` at once; the program runs untraced at no cost.
//! 2. It sends Register (pid, name) and waits (bounded) for Initialize, which brings the
//!    buffering mode, the categories, the sealed memfd the manager created, the provider's
//!    end of the FIFO, and the manager's clock rate, which the process's clock takes
//!    ([`crate::clock::set_ticks_per_second`]) so that no traced process measures its TSC.
//! 3. It maps the memfd and builds an engine [`Context`](crate::engine::Context) over it (the
//!    engine initialises the header) with a [`crate::engine::BufferHandler`] that sends
//!    SAVE_BUFFER in streaming mode and passes the writers' prefault requests on. A Start
//!    queued behind Initialize (a session already tracing) is served right there, on the
//!    connecting thread ([`ProviderOptions::start_wait`]).
//! 4. A background thread (`fxtrace-provider`) serves the manager: Start → start the context
//!    (clearing as the disposition says; the start writes the initialization record before
//!    any other thread can write, at the first start and after every clearing start, as
//!    Fuchsia's engine does) → STARTED (version 1); Stop → stop the context (waits
//!    for writers in flight, bounded) → STOPPED; Terminate → stop, then close; BUFFER_SAVED →
//!    [`Context::mark_buffer_saved`](crate::engine::Context::mark_buffer_saved). Anything
//!    else from the manager ends the session, as Fuchsia's provider does. Between messages it
//!    faults the buffer in ahead of the writers, as far as they ask
//!    ([`Context::prefault_ahead`](crate::engine::Context::prefault_ahead)).
//! 5. If the manager goes away (its end of the socket or FIFO closes), tracing stops cleanly
//!    and the program carries on; nothing ever blocks a writer.
//! 6. When the process exits normally (`exit`, or returning from `main`), an `atexit` hook stops
//!    the context and sends STOPPED, so the manager reads exact data ends instead of salvaging.
//!    Dropping the [`Provider`] does the same.
//!
//! Packets to the manager are sent without blocking: if the FIFO were full (a manager that does
//! not read), the packet is lost and counted in [`ProviderStats`], and the manager's timeouts
//! take over.

mod client;
mod service;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub use client::{Provider, ProviderState, ProviderStats};
pub use service::{
    follow_service, join_or_follow, service_socket_paths, service_status, ServiceState,
    ServiceStatus, SessionHook, MAX_RETRY_INTERVAL, RETRY_INTERVAL, SYSTEM_SOCKET_PATH,
};

use crate::buffer::BufferError;
use crate::engine::{ContextConfig, EngineError};
use crate::protocol::fifo::PacketError;
use crate::protocol::transport::TransportError;

/// Default bound on connecting to the manager's socket (only a full listen queue can make a
/// connect wait at all).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// Default bound on the Register → Initialize exchange.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Default bound on `connect` waiting for the start of a session that is already tracing
/// ([`ProviderOptions::start_wait`]).
pub const DEFAULT_START_WAIT: Duration = Duration::from_millis(100);
/// Default bound on waiting for writers in flight when tracing stops.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on the stop done by the process-exit hook.
pub const EXIT_STOP_TIMEOUT: Duration = Duration::from_millis(200);

/// How to connect.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    /// The manager's socket; `None`: `FXTRACE_SOCKET`, else the per-user default.
    pub socket_path: Option<PathBuf>,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// Bound on the registration exchange.
    pub handshake_timeout: Duration,
    /// Bound on waiting for writers in flight at stop.
    pub stop_timeout: Duration,
    /// Engine settings (the buffering mode is the manager's and overrides `context.mode`).
    pub context: ContextConfig,
    /// Install the process-exit hook (stop and send STOPPED at `exit`).
    pub exit_hook: bool,
    /// Categories this provider writes, reported to the manager at registration (what
    /// `fxtrace status` lists as known categories: `GetKnownCategories`).
    pub known_categories: Vec<String>,
    /// Ask the manager for its clock rate at registration and use it instead of determining
    /// one (which measures the TSC for ~30 ms on machines whose CPUID does not give the
    /// rate). Default `true`; the rate is ignored if something read the clock before
    /// ([`Provider::clock_handoff`] says which happened).
    pub accept_manager_clock: bool,
    /// When the manager's session is already tracing (it sends Start right behind
    /// Initialize), `connect` serves that Start itself before it returns, so the program's
    /// first events are recorded: it looks for it for at most this long (and at most 10 ms).
    /// Zero: only a Start already there is served so; a later one by the provider's thread.
    pub start_wait: Duration,
    /// Leave the control thread (which reads the manager's messages) to
    /// [`Provider::start_control_thread`] instead of starting it in `connect`: a caller that
    /// opens per-thread perf events with `inherit` next (the preload object's capture) has
    /// the thread inherit them rather than open its own. Until it starts, nothing reads the
    /// manager's messages (a Start behind Initialize was served by `connect` already).
    pub defer_control_thread: bool,
}

impl Default for ProviderOptions {
    fn default() -> Self {
        Self {
            socket_path: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            stop_timeout: DEFAULT_STOP_TIMEOUT,
            context: ContextConfig::default(),
            exit_hook: true,
            known_categories: Vec::new(),
            accept_manager_clock: true,
            start_wait: DEFAULT_START_WAIT,
            defer_control_thread: false,
        }
    }
}

/// Why a provider could not be set up, or an alert not sent.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The socket exchange with the manager failed (timeout, refused credentials, closed, …).
    #[error("trace manager connection: {0}")]
    Transport(#[from] TransportError),
    /// The manager answered Register with something other than Initialize.
    #[error("trace manager answered Register with {0} instead of Initialize")]
    Handshake(&'static str),
    /// The manager refused the registration, saying why.
    #[error("the trace manager refused this program: {0}")]
    Refused(String),
    /// The buffer received could not be mapped (wrong size, missing seals, …).
    #[error("trace buffer from the manager: {0}")]
    Buffer(#[from] BufferError),
    /// The engine refused the buffer.
    #[error("trace engine: {0}")]
    Engine(#[from] EngineError),
    /// The control thread could not be started.
    #[error("starting the provider thread: {0}")]
    Thread(std::io::Error),
    /// An alert name that cannot be sent (longer than 14 bytes, or containing NUL).
    #[error("alert: {0}")]
    Alert(#[from] PacketError),
    /// Another context is already the process's current one.
    #[error("installing the provider's context: {0}")]
    Global(#[from] crate::engine::global::GlobalError),
}

/// Connect this process to fxtrace as provider `name`, and route every piece of
/// instrumentation in the process (`fxtrace::instant`, `#[traced]`, the C API) into the buffer
/// of whichever session traces it.
///
/// - Under `fxtrace record` (`FXTRACE_SOCKET` is set): join that session. `Some(provider)`:
///   keep it alive for as long as the program should be traced; `None`: nobody listens there.
///   When `FXTRACE_SOCKET` names a trace service instead (`fxtrace daemon --socket PATH`: it
///   answers the registration with `Registered`), the process follows that service as below,
///   and `None` is returned ([`join_or_follow`]).
/// - Otherwise: follow the trace service (`fxtrace daemon`, see [`service_socket_paths`]).
///   The process registers with it now if it is running, or when it appears (a background
///   thread watches for it, with no syscall while nothing happens), stays idle at the cost of
///   a disabled call site, joins every session the service starts for it, and registers again
///   when the service restarts. Returns `None` (no session handle to keep: the registration
///   lasts as long as the process); when a session is already running for the process, it has
///   joined it (waiting at most [`DEFAULT_START_WAIT`] for the start) when this returns.
///   [`service_status`] says where it stands. A session manager listening at the default
///   socket (an older `fxtrace record` setup) is joined as under `fxtrace record`.
///
/// Called on the main thread, it also has the process end with the program's last thread
/// when the main thread ends first (`pthread_exit`), as without fxtrace, whose own threads
/// never end ([`crate::helper_thread::exit_with_the_last_program_thread`]).
pub fn connect(name: &str) -> Result<Option<Provider>, ProviderError> {
    // fxtrace's threads (this provider's, the service follower) never end: a main thread
    // that ends with `pthread_exit` must not leave the process running on them.
    crate::helper_thread::exit_with_the_last_program_thread();
    let options = ProviderOptions::default();
    let name = crate::format::truncate_str(name, crate::protocol::control::MAX_PROVIDER_NAME_LEN);
    if std::env::var_os(crate::protocol::transport::SOCKET_ENV).is_some_and(|p| !p.is_empty()) {
        let Some(provider) = join_or_follow(name, &options, Box::new(|_| Box::new(())))? else {
            return Ok(None);
        };
        provider.install_global()?;
        return Ok(Some(provider));
    }
    follow_service(name, &options, Box::new(|_| Box::new(())))?;
    Ok(None)
}

/// The provider alerts go through: the last one connected in this process.
static CURRENT: Mutex<Option<Weak<client::Shared>>> = Mutex::new(None);

fn set_current(shared: &Arc<client::Shared>) {
    let mut current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    *current = Some(Arc::downgrade(shared));
}

fn clear_current(shared: &Arc<client::Shared>) {
    let mut current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    if current
        .as_ref()
        .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(shared)))
    {
        *current = None;
    }
}

/// The current provider, if any. `try_lock`: never blocks (the exit hook may run while another
/// thread holds the lock).
fn current() -> Option<Arc<client::Shared>> {
    let current = CURRENT.try_lock().ok()?;
    current.as_ref().and_then(Weak::upgrade)
}

/// Raise alert `name` (at most 14 bytes, no NUL) through this process's provider: the ALERT
/// packet goes to the manager, which queues it for `WatchAlert` (and `fxtrace record
/// --stop-on-alert NAME` stops and writes the trace). Returns `Ok(false)` when the process has
/// no provider. Never blocks.
pub fn alert(name: &str) -> Result<bool, ProviderError> {
    let name = crate::protocol::fifo::AlertName::new(name)?;
    match current() {
        Some(shared) => Ok(shared.send_alert(name)),
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alert_names_are_checked_and_without_provider_nothing_is_sent() {
        assert!(matches!(
            alert("a-name-that-is-too-long"),
            Err(ProviderError::Alert(PacketError::AlertNameTooLong {
                len: 23
            }))
        ));
        assert!(matches!(alert("ok"), Ok(false)));
    }
}

//! The connected provider: the handshake, the shared state, and the control thread.
//!
//! # Descriptors the program closes
//!
//! The provider's descriptors (control socket, FIFO, the control thread's wake-up pipe) live in
//! a program that may close descriptors it did not open and reuse their numbers
//! ([`crate::fd_guard`]); the buffer's memfd is closed as soon as it is mapped, so it is not
//! one of them. Every number is checked before it is acted on: the
//! control thread checks all of them after every wake-up, before reading anything. A lost
//! descriptor ends the session with the reason "the program closed fxtrace's descriptor N
//! (control socket): tracing stopped; data already written is kept", written once into the
//! trace as a Log record while tracing is still on; the manager salvages the buffer. A number
//! that is no longer the provider's is never written to, read, shut down or closed.
//!
//! The control thread sleeps in `poll` without a timeout. The wake-up pipe also carries the
//! writers' requests to fault more of the buffer in ahead of them
//! ([`Context::prefault_ahead`](crate::engine::Context::prefault_ahead), a slice per turn of
//! the loop, so a Stop waits for one slice at most). A program closing every descriptor
//! closes the wake-up pipe's write end, which wakes it at once (`POLLHUP` on the read end);
//! it then checks, writes the reason and stops tracing within microseconds of the manager
//! seeing the connection close (a sleeping `poll` holds the socket alive, so the manager's
//! salvage starts only once the thread is awake). The reason is a self-contained Log record
//! (inline thread reference), so a salvage that races with it copies it whole or not at all.
//! If only other descriptors were taken, the manager's next message (or the process's exit)
//! wakes the thread. Dropping the handle when the wake-up pipe is gone stops tracing from the
//! dropping thread and does not join a control thread nobody can wake.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, Shutdown};

use super::{ProviderError, ProviderOptions, EXIT_STOP_TIMEOUT};
use crate::buffer::header;
use crate::buffer::TraceBuffer;
use crate::clock::ClockSetError;
use crate::engine::global::{self, GlobalError};
use crate::engine::{
    start_trace, BufferHandler, CategoryFilter, Context, ContextConfig, EngineError, StartMode,
    TraceState,
};
use crate::fd_guard::{self, FdIdentity, FdLost, FdStatus, GuardedFd, WakePipe};
use crate::format::{Encode, Log, ThreadRef};
use crate::protocol::control::{BufferDisposition, BufferingMode, Message, MAX_PROVIDER_NAME_LEN};
use crate::protocol::fifo::{AlertName, FifoPacket, ManagerPacket, ProviderPacket};
use crate::protocol::transport::{self, default_socket_path, ControlConn, TransportError};

/// Where a provider is, as far as it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderState {
    /// Initialized by the manager; not tracing yet (or stopped, waiting for a new Start).
    Idle,
    /// Tracing.
    Started,
    /// Stopped by the manager (or at exit).
    Stopped,
    /// The session ended: the manager terminated it, went away, or broke the protocol.
    /// Tracing is off for good.
    Disconnected,
}

/// Counters of the provider's side of the protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderStats {
    /// SAVE_BUFFER packets sent.
    pub save_requests: u64,
    /// BUFFER_SAVED packets received and handled (the buffer they name is writable again,
    /// when the answer was the awaited one).
    pub buffers_saved: u64,
    /// Packets that could not be sent (FIFO full or closed).
    pub packets_lost: u64,
    /// Starts served.
    pub starts: u64,
}

#[derive(Debug)]
struct Status {
    state: ProviderState,
    /// Why the session ended, when it did.
    end_reason: Option<String>,
    starts: u64,
}

/// State shared by the [`Provider`] handle, the control thread, the buffer handler, alerts and
/// the exit hook.
#[derive(Debug)]
pub(super) struct Shared {
    id: u32,
    name: String,
    mode: BufferingMode,
    categories: Vec<String>,
    context: Context,
    fifo: Arc<GuardedFd>,
    /// Rules: set by the handle's drop before it wakes the control thread, read by the
    /// control thread after every wake-up (its wake-up pipe may be gone and a manager message
    /// wake it instead; the pipe also carries prefault requests, so a wake-up alone does not
    /// mean closing). ATOMICS: `Release` store / `Acquire` load: a control thread that drained
    /// the drop's wake-up byte sees the flag (nothing else is published through it; the
    /// thread's join orders what follows).
    closing: AtomicBool,
    stop_timeout: Duration,
    /// What became of the manager's clock rate (see [`Provider::clock_handoff`]).
    clock_handoff: Option<Result<(), ClockSetError>>,
    status: Mutex<Status>,
    changed: Condvar,
    /// Rules: held for the whole of [`Shared::stop`], so that a stop that finds another one
    /// under way (the handle's drop while the control thread stops for a lost descriptor)
    /// returns only once the trace is stopped; at exit only tried, for a bounded time
    /// ([`Shared::stop_at_exit`]). Taken before `status`, never while holding it.
    stopping: Mutex<()>,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    /// Rules: incremented by whichever thread sends or receives; read by `stats`.
    /// ATOMICS: `Relaxed` counters (statistics only), but `buffers_saved` is incremented with
    /// `Release` once the answer is handled and read with `Acquire`.
    save_requests: AtomicU64,
    buffers_saved: AtomicU64,
    packets_lost: AtomicU64,
}

/// Sends SAVE_BUFFER when the engine hands over a full rolling buffer (streaming mode), and
/// wakes the control thread when the writers want more of the buffer faulted in.
#[derive(Debug)]
struct SaveRequester {
    fifo: Arc<GuardedFd>,
    counters: Arc<Counters>,
    /// The control thread's wake-up pipe.
    waker: Arc<WakePipe>,
}

impl BufferHandler for SaveRequester {
    fn notify_buffer_full(&self, wrapped_count: u32, durable_data_end: u64) {
        let packet = ProviderPacket::SaveBuffer {
            wrapped_count,
            durable_data_end,
        }
        .to_packet();
        // ATOMICS: `Relaxed` counters.
        match send_packet(&self.fifo, &packet) {
            Ok(()) => self.counters.save_requests.fetch_add(1, Ordering::Relaxed),
            // The buffer stays unsaved: records are dropped (and counted) until the session
            // ends; the control thread sees the closed (or lost) FIFO and stops tracing.
            // ATOMICS: `Relaxed` counter (statistics only).
            Err(()) => self.counters.packets_lost.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn notify_prefault(&self) {
        // A pipe the program took: the writers fault the pages in as they go.
        let _ = self.waker.wake();
    }
}

/// Send a packet on the FIFO without blocking, if the FIFO is still the provider's.
fn send_packet(fifo: &GuardedFd, packet: &FifoPacket) -> Result<(), ()> {
    let fd = fifo.checked().map_err(drop)?;
    transport::try_send_packet(fd, packet).map_err(drop)
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_state(&self, state: ProviderState, reason: Option<String>) {
        let mut status = self.lock();
        if status.state == ProviderState::Disconnected {
            return;
        }
        status.state = state;
        if reason.is_some() {
            status.end_reason = reason;
        }
        self.changed.notify_all();
    }

    /// Send a packet without blocking; a failure is counted.
    fn send(&self, packet: &FifoPacket) -> bool {
        let sent = send_packet(&self.fifo, packet).is_ok();
        if !sent {
            // ATOMICS: `Relaxed` counter.
            self.counters.packets_lost.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    pub(super) fn send_alert(&self, name: AlertName) -> bool {
        self.send(&ProviderPacket::Alert { name }.to_packet())
    }

    /// Start tracing (Start from the manager).
    fn start(&self, disposition: BufferDisposition) {
        let mode = match disposition {
            BufferDisposition::ClearEntire => StartMode::ClearEntire,
            BufferDisposition::ClearNonDurable => StartMode::ClearNondurable,
            BufferDisposition::Retain => StartMode::Retain,
        };
        let filter = CategoryFilter::new(self.categories.iter().cloned());
        // The initialization record is written by the start itself, before the gate opens
        // (the context may already be installed and other threads calling): at the first
        // start whatever the disposition, and after every start that cleared it.
        match start_trace(&self.context, mode, filter) {
            // Already tracing: answer STARTED again so the manager does not wait.
            Ok(_)
            | Err(EngineError::BadState {
                state: TraceState::Started,
                ..
            }) => {}
            Err(e) => {
                // No STARTED: the manager's start timeout reports this provider.
                self.lock().end_reason = Some(format!("start failed: {e}"));
                return;
            }
        }
        {
            let mut status = self.lock();
            status.starts += 1;
        }
        self.set_state(ProviderState::Started, None);
        self.send(&ProviderPacket::STARTED.to_packet());
    }

    /// Stop tracing (if it is on) and, when `report` or tracing was on, send STOPPED. Returns
    /// once the trace is stopped, also when another thread's stop was under way.
    fn stop(&self, timeout: Duration, report: bool) {
        // A poisoned lock only means a stop panicked: the next one stops all the same.
        let _stopping = self.stopping.lock().unwrap_or_else(|p| p.into_inner());
        self.stop_now(timeout, report);
    }

    /// [`Self::stop`] at process exit, which must not hang: a stop under way (on another
    /// thread, or on this one, interrupted by a signal handler that exits) is waited for
    /// only until `timeout`, then this one goes ahead beside it.
    fn stop_at_exit(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let _stopping = loop {
            match self.stopping.try_lock() {
                Ok(guard) => break Some(guard),
                Err(TryLockError::Poisoned(p)) => break Some(p.into_inner()),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TryLockError::WouldBlock) => break None,
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        self.stop_now(left.max(Duration::from_millis(1)), false);
    }

    /// [`Self::stop`]'s work, with `stopping` held (or given up on at exit).
    fn stop_now(&self, timeout: Duration, report: bool) {
        let was_started = {
            let mut status = self.lock();
            let started = status.state == ProviderState::Started;
            if started {
                status.state = ProviderState::Stopped;
            }
            started
        };
        if !was_started {
            // The trace this provider was initialized for did not start.
            self.context.disarm();
        }
        if was_started {
            // On a timeout the header ends stay 0 (but a oneshot buffer's once it filled) and
            // the manager scans the buffer; the records it finds are whole (headers are
            // committed last), so STOPPED is still the truth for the manager.
            let _ = self.context.stop(timeout);
        }
        if was_started || report {
            self.send(&ProviderPacket::Stopped.to_packet());
        }
        self.changed.notify_all();
    }

    /// The program took one of the provider's descriptors: say so once in the trace (while
    /// tracing is still on), stop tracing (STOPPED only if the FIFO is still ours), and return
    /// the session's end reason.
    fn descriptor_lost(&self, lost: FdLost) -> String {
        let reason = format!("{lost}: tracing stopped; data already written is kept");
        self.write_log(&format!("fxtrace: {reason}"));
        self.stop(self.stop_timeout, false);
        reason
    }

    /// A Log record with an inline thread reference: self-contained (no thread or string
    /// record in the durable buffer), so a manager salvaging the buffer while it is written
    /// copies it whole or not at all. A refused record is counted by the engine as dropped.
    fn write_log(&self, message: &str) {
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() } as u64;
        let log = Log {
            ticks: crate::clock::ticks(),
            thread: ThreadRef::Inline {
                pid: u64::from(std::process::id()),
                tid,
            },
            message,
        };
        let Ok(n) = log.words() else { return };
        let mut words = vec![0u64; n];
        if log.write(&mut words).is_err() {
            return;
        }
        if let Some(mut writer) = self.context.acquire() {
            if let Some(mut slot) = writer.reserve(n) {
                slot.payload().copy_from_slice(&words[1..]);
                slot.commit(words[0]);
            }
        }
    }

    /// The first of the provider's descriptors (control socket `control`, FIFO, wake-up pipe)
    /// that is no longer its own.
    fn lost_descriptor(&self, control: &ControlFd, waker: &WakePipe) -> Option<FdLost> {
        let control = control.check().err();
        control
            .or_else(|| self.fifo.check().err())
            .or_else(|| waker.check().err())
    }

    /// The session is over: stop tracing for good, close the FIFO.
    fn end(&self, reason: String) {
        if self.context.state() != TraceState::Stopped {
            let _ = self.context.stop(self.stop_timeout);
        }
        self.context.disarm();
        // Best effort: the manager sees the hang-up even while the handle keeps the fd. Never
        // on a number the program reused: that would shut down the program's socket.
        if let Ok(fifo) = self.fifo.checked() {
            let _ = socket::shutdown(fifo.as_raw_fd(), Shutdown::Both);
        }
        let mut status = self.lock();
        status.state = ProviderState::Disconnected;
        status.end_reason.get_or_insert(reason);
        self.changed.notify_all();
    }
}

/// A provider connected to a trace manager. Dropping it stops tracing, tells the manager
/// (STOPPED) and closes the connection.
#[derive(Debug)]
pub struct Provider {
    shared: Arc<Shared>,
    waker: Arc<WakePipe>,
    thread: Option<JoinHandle<()>>,
    /// The control connection while its thread is not started yet
    /// ([`ProviderOptions::defer_control_thread`]).
    deferred: Option<(ControlConn, ControlFd)>,
}

impl Provider {
    /// Connect to the manager at `FXTRACE_SOCKET` (else the per-user default socket) as
    /// `name`. `Ok(None)` when there is no manager (no socket file, or nobody listening):
    /// that costs one failed `connect`. Errors (a manager that refuses this user, answers
    /// badly or too slowly) are bounded by [`super::DEFAULT_HANDSHAKE_TIMEOUT`]; a program
    /// usually treats them as "not traced" too.
    pub fn connect(name: &str) -> Result<Option<Provider>, ProviderError> {
        Self::connect_with(name, &ProviderOptions::default())
    }

    /// [`Self::connect`] with explicit options.
    pub fn connect_with(
        name: &str,
        options: &ProviderOptions,
    ) -> Result<Option<Provider>, ProviderError> {
        let name = crate::format::truncate_str(name, MAX_PROVIDER_NAME_LEN).to_owned();
        let path = options
            .socket_path
            .clone()
            .unwrap_or_else(default_socket_path);
        let deadline = handshake_deadline(options);
        let Some((conn, msg, fds)) = register_at(&path, &name, options, false, deadline)? else {
            return Ok(None);
        };
        Self::from_initialize(name, conn, msg, fds, options).map(Some)
    }

    /// The provider a manager's Initialize (`msg`, with its descriptors `fds`) on `conn`
    /// sets up: the buffer mapped, the context armed, the control thread serving `conn`.
    pub(super) fn from_initialize(
        name: String,
        mut conn: ControlConn,
        msg: Message,
        mut fds: Vec<OwnedFd>,
        options: &ProviderOptions,
    ) -> Result<Provider, ProviderError> {
        let Message::Initialize {
            buffering_mode,
            categories,
            provider_id,
            ticks_per_second,
        } = msg
        else {
            if let Message::Refused { reason } = msg {
                return Err(ProviderError::Refused(reason));
            }
            return Err(ProviderError::Handshake(msg.name()));
        };
        // Before anything in this process reads the clock (the start's initialization
        // record, the first event): the manager's rate saves a ~30 ms measurement.
        let clock_handoff = ticks_per_second.map(crate::clock::set_ticks_per_second);
        // `recv_msg` checked there are exactly two: the memfd, then the FIFO.
        let fifo = fds.pop().ok_or(ProviderError::Handshake("Initialize"))?;
        let fifo = Arc::new(GuardedFd::new(fifo, "FIFO").map_err(sys_error("fstat"))?);
        // Mapped, then closed at once: the mapping needs no descriptor, so there is none the
        // program could take over.
        let memfd = fds.pop().ok_or(ProviderError::Handshake("Initialize"))?;
        let buffer = TraceBuffer::map_received(memfd.as_fd())?;
        drop(memfd);
        let counters = Arc::new(Counters::default());
        let waker = Arc::new(WakePipe::new("wake-up pipe").map_err(sys_error("pipe2"))?);
        let handler = Arc::new(SaveRequester {
            fifo: fifo.clone(),
            counters: counters.clone(),
            waker: waker.clone(),
        });
        let config = ContextConfig {
            mode: header::BufferingMode::from_raw(buffering_mode.to_engine())
                .unwrap_or(header::BufferingMode::Oneshot),
            ..options.context
        };
        let context = Context::new(buffer, config, handler)?;
        // Initialize means a trace of these categories is coming: calls before its start are
        // counted as dropped records of it, not lost without a count.
        context.arm(CategoryFilter::new(categories.iter().cloned()))?;
        // Control messages from here on are read by the control thread, which polls first; a
        // frame stalled half-way for this long ends the session.
        conn.set_recv_timeout(Some(Duration::from_secs(1)))?;
        conn.set_send_timeout(Some(Duration::from_secs(1)))?;
        let control = ControlFd::of(&conn).map_err(sys_error("fstat"))?;
        let shared = Arc::new(Shared {
            id: provider_id,
            name,
            mode: buffering_mode,
            categories,
            context,
            fifo,
            closing: AtomicBool::new(false),
            stop_timeout: options.stop_timeout,
            clock_handoff,
            status: Mutex::new(Status {
                state: ProviderState::Idle,
                end_reason: None,
                starts: 0,
            }),
            changed: Condvar::new(),
            stopping: Mutex::new(()),
            counters,
        });
        // A session that is already tracing sends Start right behind Initialize: served here,
        // on the connecting thread, so `connect` returns with tracing on and waits for no
        // other thread (nor, under `dlopen`, for a control thread the loader's lock holds
        // up until the constructor returns).
        if message_queued(&conn, START_PEEK.min(options.start_wait)) {
            if let Some(reason) = serve_control(&shared, conn.recv_msg()) {
                shared.end(reason);
                control.drop_if_ours(conn);
                return Ok(Provider {
                    shared,
                    waker,
                    thread: None,
                    deferred: None,
                });
            }
        }
        let mut provider = Provider {
            shared,
            waker,
            thread: None,
            deferred: Some((conn, control)),
        };
        if !options.defer_control_thread {
            provider.start_control_thread()?;
        }
        super::set_current(&provider.shared);
        if options.exit_hook {
            install_exit_hook();
        }
        Ok(provider)
    }

    /// Start the control thread that [`ProviderOptions::defer_control_thread`] left
    /// unstarted (nothing to do when it runs, or the session ended while connecting).
    /// Whoever waits on the provider's state ([`Self::wait_started`], …) needs it running.
    pub fn start_control_thread(&mut self) -> Result<(), ProviderError> {
        let Some((conn, control)) = self.deferred.take() else {
            return Ok(());
        };
        let shared = self.shared.clone();
        let waker = self.waker.clone();
        let thread = crate::helper_thread::spawn("fxtrace-provider", move || {
            control_loop(&shared, conn, control, &waker)
        })
        .map_err(ProviderError::Thread)?;
        self.thread = Some(thread);
        Ok(())
    }

    /// The engine context over the shared buffer: install it as the process's current context,
    /// or write through it directly ([`Context::acquire`]). It stays valid (tracing off) after
    /// the session ends.
    pub fn context(&self) -> &Context {
        &self.shared.context
    }

    /// The id the manager gave this provider (its FXT provider id).
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// What became of the clock rate the manager sent at registration: `None` when it sent
    /// none (a manager of the first protocol revision: the clock is determined locally, as
    /// without a manager), `Some(Ok(()))` when this process uses it, `Some(Err(reason))` when
    /// it was ignored because the clock had been read (or given) before.
    pub fn clock_handoff(&self) -> Option<Result<(), ClockSetError>> {
        self.shared.clock_handoff
    }

    /// The registered name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The session's buffering mode.
    pub fn buffering_mode(&self) -> BufferingMode {
        self.shared.mode
    }

    /// The session's enabled categories (empty: all).
    pub fn categories(&self) -> &[String] {
        &self.shared.categories
    }

    /// Where the provider is.
    pub fn state(&self) -> ProviderState {
        self.shared.lock().state
    }

    /// Why the session ended, once it has ([`ProviderState::Disconnected`]), or why the last
    /// start failed.
    pub fn end_reason(&self) -> Option<String> {
        self.shared.lock().end_reason.clone()
    }

    /// Protocol counters.
    pub fn stats(&self) -> ProviderStats {
        let c = &self.shared.counters;
        // ATOMICS: `Relaxed` reads of statistics, but `buffers_saved`'s `Acquire` (see where
        // it is counted).
        ProviderStats {
            save_requests: c.save_requests.load(Ordering::Relaxed),
            buffers_saved: c.buffers_saved.load(Ordering::Acquire),
            packets_lost: c.packets_lost.load(Ordering::Relaxed),
            starts: self.shared.lock().starts,
        }
    }

    /// Wait until tracing has started (returns true), the session ended, or `timeout` passed
    /// (false). A manager whose session is already running starts a new provider right after
    /// registering it: a program that must not miss its first events waits here briefly.
    pub fn wait_started(&self, timeout: Duration) -> bool {
        self.wait_for(timeout, |s| {
            s.starts > 0 || s.state == ProviderState::Disconnected
        })
        .starts
            > 0
    }

    /// Wait until tracing is off after having been on (stopped or session over), or `timeout`
    /// passed. Returns the state then.
    pub fn wait_stopped(&self, timeout: Duration) -> ProviderState {
        self.wait_for(timeout, |s| {
            s.starts > 0 && s.state != ProviderState::Started
                || s.state == ProviderState::Disconnected
        })
        .state
    }

    /// Wait, without a bound, until the session is over ([`ProviderState::Disconnected`]).
    pub(super) fn wait_session_end(&self) {
        let mut status = self.shared.lock();
        while status.state != ProviderState::Disconnected {
            status = self
                .shared
                .changed
                .wait(status)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    fn wait_for(&self, timeout: Duration, done: impl Fn(&Status) -> bool) -> StatusSnapshot {
        let deadline = Instant::now() + timeout;
        let mut status = self.shared.lock();
        while !done(&status) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            status = self
                .shared
                .changed
                .wait_timeout(status, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        StatusSnapshot {
            state: status.state,
            starts: status.starts,
        }
    }

    /// Make this provider's context the process-wide current one, so that instrumentation
    /// anywhere in the process (`fxtrace::instant`, `#[traced]`, the C API) writes into the
    /// buffer the manager reads. Dropping the provider uninstalls it again (if it is still the
    /// current context).
    pub fn install_global(&self) -> Result<(), GlobalError> {
        global::install(self.shared.context.clone())
    }

    /// Raise an alert through this provider (see [`super::alert`]). Returns whether the packet
    /// went out.
    pub fn alert(&self, name: &str) -> Result<bool, ProviderError> {
        let name = AlertName::new(name)?;
        Ok(self.shared.send_alert(name))
    }

    /// Stop tracing on this thread (waiting, bounded, for writers in flight) and, if it was
    /// on, tell the manager (STOPPED), keeping the connection: once this returns the buffer
    /// holds everything and the manager knows it, so a process that is about to end need
    /// not wait for the rest of [`Self::shutdown`] (the control thread's end, the buffer's
    /// unmapping). Dropping the provider later sends nothing more.
    pub fn stop(&self) {
        self.shared.stop(self.shared.stop_timeout, false);
    }

    /// Stop tracing, tell the manager (STOPPED), and close the connection. Same as dropping.
    pub fn shutdown(self) {
        drop(self);
    }
}

struct StatusSnapshot {
    state: ProviderState,
    starts: u64,
}

impl Drop for Provider {
    fn drop(&mut self) {
        // No thread may reach the context through the process-wide slot once it stops.
        let _ = global::uninstall_if(&self.shared.context);
        // ATOMICS: see `Shared::closing`.
        self.shared.closing.store(true, Ordering::Release);
        if let Some((conn, control)) = self.deferred.take() {
            // The control thread never started: its work at the end is done here.
            self.shared.stop(self.shared.stop_timeout, false);
            self.shared.end("the provider was shut down".to_owned());
            fd_guard::drop_if_ours(conn, control.fd, &control.identity);
        }
        match self.waker.wake() {
            Ok(()) => {
                if let Some(thread) = self.thread.take() {
                    let _ = thread.join();
                }
            }
            // The program took the wake-up pipe: stop tracing here and leave the control
            // thread asleep (it holds the control socket, see the module docs; a manager
            // message ends it, or the process's exit). It only uses checked descriptors.
            Err(_) => self.shared.stop(self.shared.stop_timeout, false),
        }
        super::clear_current(&self.shared);
    }
}

/// What a Register gets back: the connection, the manager's answer and its descriptors.
pub(super) type Registered = (ControlConn, Message, Vec<OwnedFd>);

/// Connect to the manager at `path` and register as `name` (saying whether the provider
/// waits for a session, `waits_for_session`); the manager's answer, by `deadline` (the
/// whole exchange: a manager that trickles its answer in cannot stretch it). `Ok(None)`: no
/// manager. A manager of control revision 1 refuses Register's trailing features field and
/// closes the connection: then the provider registers again without it. Not a provider that
/// waits for a session: only a trace service is asked that, and one that closes the
/// connection (too many connections waiting at once) is asked again later, never with a
/// Register that cannot wait.
pub(super) fn register_at(
    path: &Path,
    name: &str,
    options: &ProviderOptions,
    waits_for_session: bool,
    deadline: Instant,
) -> Result<Option<Registered>, ProviderError> {
    match register_once(
        path,
        name,
        options,
        options.accept_manager_clock,
        waits_for_session,
        deadline,
    ) {
        Err(ProviderError::Transport(TransportError::PeerClosed))
            if options.accept_manager_clock && !waits_for_session =>
        {
            register_once(path, name, options, false, false, deadline)
        }
        other => other,
    }
}

/// When a handshake that starts now must be over: `options.handshake_timeout` from now (a
/// bound too long for the clock is an hour).
pub(super) fn handshake_deadline(options: &ProviderOptions) -> Instant {
    Instant::now() + options.handshake_timeout.min(Duration::from_secs(3600))
}

/// Connect and send one Register; the manager's answer, by `deadline`. `Ok(None)`: no
/// manager.
fn register_once(
    path: &Path,
    name: &str,
    options: &ProviderOptions,
    accepts_ticks_per_second: bool,
    waits_for_session: bool,
    deadline: Instant,
) -> Result<Option<Registered>, ProviderError> {
    let left = || deadline.saturating_duration_since(Instant::now());
    let mut conn = match ControlConn::connect(path, options.connect_timeout.min(left())) {
        Ok(conn) => conn,
        Err(TransportError::NoManager { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    // One send, of a few hundred bytes: bounded by what is left.
    conn.set_send_timeout(Some(left()))?;
    conn.send_msg(
        &Message::Register {
            pid: std::process::id(),
            name: name.to_owned(),
            known_categories: options.known_categories.clone(),
            accepts_ticks_per_second,
            waits_for_session,
        },
        &[],
    )?;
    let (msg, fds) = conn.recv_msg_by(deadline)?;
    Ok(Some((conn, msg, fds)))
}

/// A `TransportError::Sys` maker for `map_err`.
/// How long `connect` looks for a Start queued behind Initialize.
const START_PEEK: Duration = Duration::from_millis(10);

/// Whether a message is waiting on (or arrives within `wait` on) the control connection.
fn message_queued(conn: &ControlConn, wait: Duration) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(conn.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
}

fn sys_error(op: &'static str) -> impl Fn(std::io::Error) -> ProviderError {
    move |e| {
        ProviderError::Transport(TransportError::Sys {
            op,
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        })
    }
}

/// The control socket's number and identity (the transport owns the descriptor).
#[derive(Debug, Clone, Copy)]
pub(super) struct ControlFd {
    fd: RawFd,
    identity: FdIdentity,
}

impl ControlFd {
    pub(super) fn of(conn: &ControlConn) -> std::io::Result<Self> {
        Ok(Self {
            fd: conn.as_fd().as_raw_fd(),
            identity: FdIdentity::of(conn.as_fd())?,
        })
    }

    /// Close the connection, only while its number is still the control socket.
    pub(super) fn drop_if_ours(&self, conn: ControlConn) {
        fd_guard::drop_if_ours(conn, self.fd, &self.identity);
    }

    pub(super) fn check(&self) -> Result<(), FdLost> {
        match self.identity.check(self.fd) {
            FdStatus::Ours => Ok(()),
            status => Err(FdLost {
                fd: self.fd,
                what: "control socket",
                status,
            }),
        }
    }
}

/// Serve the manager until the session ends.
///
/// Every wake-up first checks that the descriptors are still the provider's: a number the
/// program closed polls as `POLLNVAL`, one it reused may poll readable, and neither may be
/// read.
fn control_loop(
    shared: &Arc<Shared>,
    mut conn: ControlConn,
    control_fd: ControlFd,
    waker: &WakePipe,
) {
    // The writers asked for more of the buffer to be faulted in, and there is more to do.
    let mut prefaulting = false;
    let reason = loop {
        let (control, fifo, wake) = {
            let borrow = |fd: RawFd| {
                // SAFETY: the number is only polled; one the program took meanwhile is
                // harmless to poll, and nothing is done with it before the check below.
                unsafe { BorrowedFd::borrow_raw(fd) }
            };
            let mut fds = [
                PollFd::new(conn.as_fd(), PollFlags::POLLIN),
                PollFd::new(borrow(shared.fifo.raw()), PollFlags::POLLIN),
                PollFd::new(borrow(waker.read_end().raw()), PollFlags::POLLIN),
            ];
            // Asleep until a message or a wake-up; not at all while the writers wait for
            // more of the buffer to be faulted in (a slice between two looks at messages).
            let timeout = if prefaulting {
                PollTimeout::ZERO
            } else {
                PollTimeout::NONE
            };
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => break format!("poll failed: {e}"),
            }
            let ready = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), ready(&fds[1]), ready(&fds[2]))
        };
        if let Some(lost) = shared.lost_descriptor(&control_fd, waker) {
            break shared.descriptor_lost(lost);
        }
        if wake {
            // A prefault request, or the handle's drop (`closing`, below). Drained before
            // `closing` is read: a drop's byte taken here is seen there.
            let _ = waker.drain();
        }
        // ATOMICS: see `Shared::closing`.
        if shared.closing.load(Ordering::Acquire) {
            // The handle is being dropped (or shut down).
            shared.stop(shared.stop_timeout, false);
            break "the provider was shut down".to_owned();
        }
        if fifo {
            if let Some(reason) = serve_fifo(shared) {
                break reason;
            }
        }
        if control {
            if let Some(reason) = serve_control(shared, conn.recv_msg()) {
                break reason;
            }
        }
        // Writers asked (`SaveRequester::notify_prefault`), or a slice was done last turn:
        // the next slice, if the trace still runs and more is wanted.
        if wake || prefaulting {
            prefaulting = shared.context.prefault_ahead();
        }
    };
    shared.end(reason);
    // The transport closes the socket on drop: only while the number is still ours.
    fd_guard::drop_if_ours(conn, control_fd.fd, &control_fd.identity);
}

/// Answer one control message from the manager. Returns why the session ends, if it does.
fn serve_control(
    shared: &Shared,
    received: Result<(Message, Vec<OwnedFd>), TransportError>,
) -> Option<String> {
    match received {
        Ok((Message::Start { disposition }, _)) => shared.start(disposition),
        Ok((Message::Stop, _)) => shared.stop(shared.stop_timeout, true),
        Ok((Message::Terminate, _)) => {
            shared.stop(shared.stop_timeout, false);
            return Some("terminated by the manager".to_owned());
        }
        Ok((other, _)) => {
            return Some(format!(
                "protocol violation: unexpected {} message",
                other.name()
            ))
        }
        Err(TransportError::PeerClosed) => return Some("the trace manager went away".to_owned()),
        Err(e) => return Some(format!("control connection: {e}")),
    }
    None
}

/// Read every BUFFER_SAVED waiting on the FIFO. Returns why the session ends, if it does.
fn serve_fifo(shared: &Shared) -> Option<String> {
    let fifo = match shared.fifo.checked() {
        Ok(fifo) => fifo,
        Err(lost) => return Some(shared.descriptor_lost(lost)),
    };
    loop {
        match transport::try_recv_packet(fifo) {
            Ok(None) => return None,
            Ok(Some(packet)) => match ManagerPacket::parse(&packet) {
                Ok(ManagerPacket::BufferSaved {
                    wrapped_count,
                    durable_data_end,
                }) => {
                    // Fuchsia ignores ZX_ERR_BAD_STATE here (a stale or repeated answer).
                    let _ = shared
                        .context
                        .mark_buffer_saved(wrapped_count, durable_data_end);
                    // Counted once handled. ATOMICS: `Release`: a reader of the count (`stats`,
                    // `Acquire`) sees what the answer did (the saved buffer reset).
                    shared
                        .counters
                        .buffers_saved
                        .fetch_add(1, Ordering::Release);
                }
                Err(e) => return Some(format!("FIFO protocol violation by the manager: {e}")),
            },
            Err(TransportError::PeerClosed) => {
                return Some("the trace manager went away".to_owned())
            }
            Err(e) => return Some(format!("FIFO: {e}")),
        }
    }
}

static EXIT_HOOK: Once = Once::new();

/// Register [`at_exit`] once per process.
fn install_exit_hook() {
    EXIT_HOOK.call_once(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()` with no preconditions; atexit only stores
        // the pointer. A failure (out of handler slots) just means no exit hook.
        let _ = unsafe { libc::atexit(at_exit) };
    });
}

/// At process exit: stop the current provider's context (bounded) and send STOPPED, so the
/// manager reads exact ends. Never blocks on a lock another thread holds for long (a stop
/// under way is waited for only until [`EXIT_STOP_TIMEOUT`]).
extern "C" fn at_exit() {
    if let Some(shared) = super::current() {
        shared.stop_at_exit(EXIT_STOP_TIMEOUT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_requester_counts_lost_packets() {
        let (a, b) = transport::fifo_pair().unwrap();
        let counters = Arc::new(Counters::default());
        let handler = SaveRequester {
            fifo: Arc::new(GuardedFd::new(a, "FIFO").unwrap()),
            counters: counters.clone(),
            waker: Arc::new(WakePipe::new("wake-up pipe").unwrap()),
        };
        handler.notify_buffer_full(3, 64);
        let p = transport::try_recv_packet(b.as_fd()).unwrap().unwrap();
        assert_eq!(
            ProviderPacket::parse(&p).unwrap(),
            ProviderPacket::SaveBuffer {
                wrapped_count: 3,
                durable_data_end: 64
            }
        );
        drop(b);
        handler.notify_buffer_full(4, 64);
        assert_eq!(counters.save_requests.load(Ordering::Relaxed), 1);
        assert_eq!(counters.packets_lost.load(Ordering::Relaxed), 1);
    }
}

//! `fxtrace record` as a library: run a command under a fresh trace session and write one
//! archive.
//!
//! ```text
//! Recorder::new(config)      bind a private socket, open the output, start the session
//!   .run(log)                spawn CMD with FXTRACE_SOCKET set, trace until the first of:
//!                              CMD exits (then a bounded wait for its providers to finish),
//!                              the duration ends, a stop signal, an alert named
//!                              `stop_on_alert`, or StopHandle::request_stop
//!                            stop with write_results (stop timeout salvages silent providers),
//!                            stop external sources, terminate providers (bounded), flush the
//!                            archive; a command still running gets SIGTERM (SIGKILL after 2 s)
//! ```
//!
//! A SIGINT, SIGTERM or SIGHUP the recorder receives is passed on to the command's process
//! group as it is (a terminal's Ctrl-C reaches that group itself when the command has the
//! terminal): the command ends its own way and is traced meanwhile; SIGTERM follows only if it
//! still runs [`RecordConfig::signal_grace`] later.
//!
//! The loop is the session loop every session runs (`SessionDriver`: the manager's turns,
//! the duration, the stop alert, the sections); around it the recorder keeps the command,
//! signals and the log lines.
//!
//! Sections that do not come from a provider of the protocol (the built-in kernel provider of
//! `--system-wide`) join the same archive through a [`SectionSink`] and an
//! [`ExternalSource`]: the source encodes records into the sink from its own thread, the
//! session loop copies each batch into the archive under the section's reserved provider id.
//!
//! The socket lives in a fresh private directory (mode 0700, under `$XDG_RUNTIME_DIR` when set,
//! else `/tmp`) named `fxtrace-session-<pid>-XXXXXX`, so concurrent sessions never collide and
//! `fxtrace status` can find them. Other processes of the same user that set `FXTRACE_SOCKET`
//! to it (printed at the start) join the session too.
//!
//! The command's own standard streams are left alone; the recorder reports through the `log`
//! callback given to [`Recorder::run`] and the returned [`RecordReport`].

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};

use super::archive::{truncate_to_complete_records, ArchiveError};
use super::driver::{SessionDriver, StopCause};
use super::lifecycle;
use super::report::{
    ProviderReport, RefusedPeer, SectionLosses, SectionReport, SummaryTable, Throttle,
};
pub use super::section::{SectionError, SectionSink};
use super::server::{
    Manager, ManagerConfig, ManagerError, ManagerEvent, Waker, DEFAULT_RESERVED_FOR_TRACED,
};
use super::service::protocol::SessionInfo;
use super::session::{SessionConfig, SessionState};
use fxtrace::capture::procfs::ProcessImage;
use fxtrace::protocol::control::BufferingMode;
use fxtrace::protocol::transport::{ListenerOptions, SOCKET_ENV, SOCKET_FILE_NAME};

use super::direct_output::{DirectOutcome, DirectOutput};
use crate::output_file::OutputFile;

/// Prefix of the private session directories (under the runtime directory).
pub const SESSION_DIR_PREFIX: &str = "fxtrace-session-";

/// Most providers a recording holds at once (its descriptor limit may allow fewer, never
/// fewer than 16): the processes of a build or a script traced under `--preload`.
pub const MAX_PROVIDERS: usize = 1024;

/// What to record and how.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordConfig {
    /// The archive to write.
    pub output: PathBuf,
    /// Enabled categories (empty: all; `prefix*` matches a prefix).
    pub categories: Vec<String>,
    /// Buffer size per provider in bytes (a multiple of 4096, 4 KiB..=4 GiB).
    pub buffer_size_bytes: u64,
    /// Buffering mode of every provider.
    pub buffering_mode: BufferingMode,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop when a provider raises an alert with this name (flight recorder).
    pub stop_on_alert: Option<String>,
    /// The command to run (program and arguments); empty: trace whoever connects.
    pub command: Vec<OsString>,
    /// Listen here instead of a fresh private directory.
    pub socket_path: Option<PathBuf>,
    /// Socket file mode and peer policy.
    pub listener: ListenerOptions,
    /// How long Start waits for providers.
    pub start_timeout: Duration,
    /// How long Stop waits for providers before salvaging their buffers.
    pub stop_timeout: Duration,
    /// After the command exits (or a Ctrl-C), how long to wait for its providers to finish.
    pub exit_grace: Duration,
    /// After a stop signal passed on to the command, how long it is traced while it ends on
    /// its own before it gets SIGTERM.
    pub signal_grace: Duration,
    /// Extra environment variables for the command (`fxtrace record --preload` sets
    /// `LD_PRELOAD`).
    pub env: Vec<(OsString, OsString)>,
    /// Give the output to this user and group (`fchown` on the file the recorder created,
    /// never a path): root recording for a `sudo` user.
    pub output_owner: Option<(u32, u32)>,
}

impl Default for RecordConfig {
    fn default() -> Self {
        Self {
            output: PathBuf::from("trace.fxt"),
            categories: Vec::new(),
            buffer_size_bytes: super::session::RECORDING_BUFFER_SIZE,
            buffering_mode: super::session::RECORDING_MODE,
            duration: None,
            stop_on_alert: None,
            command: Vec::new(),
            socket_path: None,
            listener: ListenerOptions::default(),
            start_timeout: super::session::DEFAULT_START_TIMEOUT,
            stop_timeout: Duration::from_secs(5),
            exit_grace: Duration::from_secs(1),
            signal_grace: SIGNAL_GRACE,
            env: Vec::new(),
            output_owner: None,
        }
    }
}

/// Why `record` failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// The output file could not be created.
    #[error("cannot create {path}: {source}")]
    Output {
        /// The output path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The private socket directory could not be created.
    #[error("cannot create a socket directory in {dir}: {source}")]
    SocketDir {
        /// Where.
        dir: PathBuf,
        /// The cause.
        source: nix::errno::Errno,
    },
    /// The manager failed.
    #[error(transparent)]
    Manager(#[from] ManagerError),
    /// The command could not be started.
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        /// The program.
        program: OsString,
        /// The cause.
        source: std::io::Error,
    },
    /// Signal handlers could not be installed.
    #[error("installing signal handlers: {0}")]
    Signals(String),
    /// Waiting for the command failed.
    #[error("waiting for the command: {0}")]
    Wait(std::io::Error),
    /// Writing the output failed part-way (a full disk): the recording stopped, the command
    /// was stopped as on Ctrl-C, and the file was cut after its last complete record.
    #[error(
        "{path}: {reason}; the recording stopped there: the file is a valid trace of its first \
         {records} records ({bytes} bytes)"
    )]
    OutputFailed {
        /// The output.
        path: PathBuf,
        /// What failed (the system's error).
        reason: String,
        /// Records in the file (the magic number record included).
        records: u64,
        /// Bytes in the file.
        bytes: u64,
    },
}

/// Why tracing stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The command exited.
    CommandExited,
    /// The configured duration passed.
    Duration,
    /// A signal arrived (its number).
    Signal(i32),
    /// A provider raised the stop alert.
    Alert {
        /// The provider.
        provider: u32,
        /// The alert's name.
        name: String,
    },
    /// [`StopHandle::request_stop`] was called.
    Requested,
    /// Writing the output failed (see [`RecordReport::output_failure`]).
    OutputFailed,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::CommandExited => f.write_str("the command exited"),
            StopReason::Duration => f.write_str("the duration ended"),
            StopReason::Signal(n) => write!(f, "{} received", signal_name(*n)),
            StopReason::Alert { provider, name } => {
                write!(f, "provider {provider} raised alert {name:?}")
            }
            StopReason::Requested => f.write_str("stop requested"),
            StopReason::OutputFailed => f.write_str("writing the output failed"),
        }
    }
}

/// What a recording did.
#[derive(Debug, Clone)]
pub struct RecordReport {
    /// Where the archive is.
    pub output: PathBuf,
    /// Its size in bytes.
    pub output_bytes: u64,
    /// The socket the session listened on.
    pub socket_path: PathBuf,
    /// Per-provider statistics, by id.
    pub providers: Vec<ProviderReport>,
    /// Connections refused for their credentials.
    pub refused: Vec<RefusedPeer>,
    /// Sections written by external sources (the kernel provider).
    pub sections: Vec<SectionReport>,
    /// Why tracing stopped.
    pub stop_reason: StopReason,
    /// The command's pid, if one was run.
    pub command_pid: Option<u32>,
    /// How the command ended (`None`: no command, or still running when the recorder returned).
    pub command_status: Option<ExitStatus>,
    /// Alerts raised by providers, in order: the first [`ALERTS_KEPT`].
    pub alerts: Vec<String>,
    /// Alerts raised beyond those (counted, neither kept nor logged).
    pub alerts_more: u64,
    /// The categories the providers declared (sorted union), to check the enabled ones
    /// against.
    pub known_categories: Vec<String>,
    /// From start to the archive being complete.
    pub elapsed: Duration,
    /// Writing the output failed part-way (the file holds a valid prefix of `output_bytes`).
    pub output_failure: Option<OutputFailure>,
}

/// How writing the output failed part-way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFailure {
    /// The system's error.
    pub reason: String,
    /// Records in the file after it was cut after its last complete record.
    pub records: u64,
}

impl RecordReport {
    /// The output's failure as an error, to report after the summary (the exit status is a
    /// failure then).
    pub fn output_error(&self) -> Option<RecorderError> {
        self.output_failure
            .as_ref()
            .map(|f| RecorderError::OutputFailed {
                path: self.output.clone(),
                reason: f.reason.clone(),
                records: f.records,
                bytes: self.output_bytes,
            })
    }

    /// The end-of-trace table.
    pub fn summary(&self) -> SummaryTable<'_> {
        SummaryTable {
            providers: &self.providers,
            sections: &self.sections,
            refused: &self.refused,
            output: &self.output,
            output_bytes: self.output_bytes,
            command_ran: self.command_pid.is_some(),
        }
    }
}

// === stop requests and signals ===

/// Rules: the wake eventfd of the recorder whose [`SignalGuard`] is installed, or -1; written
/// by `stop_on_signals` and the guard's drop, read by the signal handler.
/// ATOMICS: `SeqCst` stores and loads: the handler may run on any thread at any point; the
/// install/uninstall paths are cold.
static SIGNAL_WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// Rules: the first stop signal received (0: none); set by the handler, read by the recorder,
/// reset when handlers are installed.
/// ATOMICS: `SeqCst`, as above.
static SIGNAL_RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(signo: libc::c_int) {
    // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    // ATOMICS: `SeqCst` (see the statics); `swap` tells a second signal from the first.
    if SIGNAL_RECEIVED.swap(signo, Ordering::SeqCst) != 0 {
        // A second signal before the first was handled: the user insists. Die of it, as if
        // no handler were installed.
        // SAFETY: signal() and raise() are async-signal-safe; restoring the default action and
        // re-raising ends the process with the signal's usual status.
        unsafe {
            libc::signal(signo, libc::SIG_DFL);
            libc::raise(signo);
        }
    }
    // ATOMICS: `SeqCst`, see the static.
    let fd = SIGNAL_WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: write(2) is async-signal-safe; the buffer is a live local of 8 bytes; the
        // fd stays open while the guard that published it is installed.
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
    // SAFETY: as above; restoring errno keeps the interrupted code's view intact.
    unsafe { *libc::__errno_location() = errno };
}

/// Stops a running [`Recorder`] from another thread.
#[derive(Debug, Clone)]
pub struct StopHandle {
    waker: Waker,
    requested: Arc<AtomicBool>,
}

impl StopHandle {
    /// Ask the recorder to stop tracing and write the archive.
    pub fn request_stop(&self) {
        // ATOMICS: `Release`, read with `Acquire` by the recorder after the wake-up.
        self.requested.store(true, Ordering::Release);
        self.waker.wake();
    }
}

/// Signal handlers that stop a recorder; the previous handlers come back on drop.
#[derive(Debug)]
pub struct SignalGuard {
    _waker: Waker,
    previous: Vec<(Signal, SigAction)>,
}

/// Alerts a recording keeps and logs; later ones are counted ([`RecordReport::alerts_more`]).
pub const ALERTS_KEPT: usize = 64;

/// Make `signals` stop the recorder of `handle` cleanly (the archive is still written) instead
/// of their default action; a second one before the recorder has reacted kills the process
/// as usual. One guard at a time per process. Handlers are reset to the default
/// in the command run by the recorder (exec resets caught signals).
pub fn stop_on_signals(
    handle: &StopHandle,
    signals: &[Signal],
) -> Result<SignalGuard, RecorderError> {
    let fd = handle.waker.raw_fd();
    // ATOMICS: `SeqCst` on a cold path: the fd is published before any handler is installed.
    if SIGNAL_WAKE_FD
        .compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return Err(RecorderError::Signals(
            "another recorder's signal handlers are installed".into(),
        ));
    }
    // ATOMICS: `SeqCst`, see the static; no handler is installed yet.
    SIGNAL_RECEIVED.store(0, Ordering::SeqCst);
    let action = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    let mut guard = SignalGuard {
        _waker: handle.waker.clone(),
        previous: Vec::new(),
    };
    for &sig in signals {
        // SAFETY: the handler only touches atomics and calls write(2), both async-signal-safe.
        match unsafe { signal::sigaction(sig, &action) } {
            Ok(old) => guard.previous.push((sig, old)),
            Err(e) => return Err(RecorderError::Signals(format!("{sig}: {e}"))),
        }
    }
    Ok(guard)
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (sig, old) in self.previous.drain(..).rev() {
            // SAFETY: restoring an action returned by sigaction for the same signal.
            let _ = unsafe { signal::sigaction(sig, &old) };
        }
        // ATOMICS: `SeqCst`, after the handlers are gone.
        SIGNAL_WAKE_FD.store(-1, Ordering::SeqCst);
    }
}

/// `SIGINT`, or the number when it has no name.
pub fn signal_name(n: i32) -> String {
    Signal::try_from(n)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {n}"))
}

// === the recorder ===

/// The private directory holding the socket; removed on drop.
#[derive(Debug)]
struct SocketDir(PathBuf);

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A session being recorded; see the module docs.
#[derive(Debug)]
pub struct Recorder {
    config: RecordConfig,
    // Declared before `socket_dir`: the listener (and its socket file) goes first.
    driver: SessionDriver,
    socket_dir: Option<SocketDir>,
    stop: StopHandle,
    started: Instant,
    externals: Vec<Box<dyn ExternalSource>>,
    progress: Option<Progress>,
    /// The output, under its name since the start (as `perf record`'s).
    output: OutputFile,
    /// How the archive's writer thread ended (read once the manager, which owns the
    /// archive's [`DirectOutput`], is finished).
    written: DirectOutcome,
    /// The descriptor limit raised for the manager; the command gets the one before.
    descriptors: lifecycle::DescriptorLimit,
    /// Held while a command runs under `--preload` (see [`lifecycle::ProbeHold`]).
    probes: Option<lifecycle::ProbeHold>,
    /// The kernel symbols the command's preloaded processes map, held while it runs (see
    /// [`lifecycle::share_kernel_symbols`]).
    kernel_symbols: Option<fxtrace::capture::SharedSymbols>,
    /// The command was given the terminal (see [`lifecycle::prepare_command`]).
    gave_terminal: bool,
    /// The log lines of the manager's events.
    lines: EventLines,
    /// Which providers followed others by exec.
    successions: Successions,
}

/// A callback that receives the session's status about every `interval` while tracing.
struct Progress {
    interval: Duration,
    report: Box<dyn FnMut(&SessionInfo) + Send>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// The directory session sockets go in: `$XDG_RUNTIME_DIR` when absolute, else `/tmp`.
pub fn runtime_dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && d.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// A fresh private directory for a session socket: in [`runtime_dir`], or in `/tmp` when the
/// runtime directory is not writable (another user's `XDG_RUNTIME_DIR` after `su`).
fn session_dir() -> Result<PathBuf, RecorderError> {
    let name = format!("{SESSION_DIR_PREFIX}{}-XXXXXX", std::process::id());
    let base = runtime_dir();
    match nix::unistd::mkdtemp(&base.join(&name)) {
        Ok(dir) => Ok(dir),
        Err(_) if base != Path::new("/tmp") => {
            let tmp = PathBuf::from("/tmp");
            nix::unistd::mkdtemp(&tmp.join(&name))
                .map_err(|source| RecorderError::SocketDir { dir: tmp, source })
        }
        Err(source) => Err(RecorderError::SocketDir { dir: base, source }),
    }
}

// === sections from outside the protocol ===

/// Something that writes a section of its own into the archive through a [`SectionSink`]
/// (the built-in kernel provider). The recorder stops it after the providers.
pub trait ExternalSource: Send + std::fmt::Debug {
    /// Stop producing and push the last records into the sink (flushing it) before returning.
    fn stop(&mut self) -> Result<(), String>;

    /// Once stopped: what each of its sections lost, by section id (for the summary table).
    fn losses(&self) -> Vec<(u32, SectionLosses)> {
        Vec::new()
    }
}

impl Recorder {
    /// A sink for a section named `name` with an id of its own in this session. Take it before
    /// [`Self::run`] (the id is then the first of the session: 1).
    pub fn section_sink(&mut self, name: &str) -> SectionSink {
        self.driver.section_sink(name)
    }

    /// Have `source` stopped (after the providers) when the recording ends.
    pub fn add_external(&mut self, source: Box<dyn ExternalSource>) {
        self.externals.push(source);
    }

    /// Give up before [`Self::run`]: close everything, remove the output file and put a
    /// previous output kept as `FILE.old` back.
    pub fn discard(self) {
        let Recorder {
            driver,
            socket_dir,
            output,
            ..
        } = self;
        drop(driver);
        drop(socket_dir);
        let _ = output.discard();
    }
}

impl Recorder {
    /// Bind the socket, create the output, start the session (with no provider yet it is
    /// started at once; providers that connect later are started as they register).
    pub fn new(config: RecordConfig) -> Result<Self, RecorderError> {
        let (socket_path, socket_dir) = match &config.socket_path {
            Some(p) => (p.clone(), None),
            None => {
                let dir = session_dir()?;
                (dir.join(SOCKET_FILE_NAME), Some(SocketDir(dir)))
            }
        };
        // What recorders killed by SIGKILL left behind.
        for base in [runtime_dir(), PathBuf::from("/tmp")] {
            lifecycle::remove_stale_session_dirs(&base);
        }
        let output_error = |source| RecorderError::Output {
            path: config.output.clone(),
            source,
        };
        // A fresh file (O_EXCL|O_NOFOLLOW under a temporary name), owned as asked through its
        // descriptor, then renamed to its name at once (a previous output kept as FILE.old):
        // the trace is under its name while it is recorded, as `perf record`'s, so a killed
        // recorder leaves what it wrote there.
        let mut out_file = OutputFile::create(&config.output).map_err(output_error)?;
        if let Some((uid, gid)) = config.output_owner {
            out_file.chown(uid, gid).map_err(output_error)?;
        }
        out_file.commit().map_err(output_error)?;
        // Written in large blocks with direct I/O by a writer thread, each turn's bytes in
        // the file or in its queue when the turn ends, or waiting in the block for a later turn
        // while every block is in the writer's hands (see `DirectOutput`). A recorder killed
        // by SIGKILL loses what it had not yet written.
        let output = out_file.file().try_clone().map_err(output_error)?;
        let (output, written) = DirectOutput::new(output);
        // Hundreds of the command's processes may be providers at once (a script's or a
        // build's short ones under --preload): as many as the descriptors allow, up to
        // MAX_PROVIDERS; the command gets its own limit back.
        let descriptors = lifecycle::raise_descriptor_limit();
        let max_providers = descriptors.providers(MAX_PROVIDERS);
        // Half of them at most kept for the command where descriptors are few: never all.
        let reserved = DEFAULT_RESERVED_FOR_TRACED.min(max_providers / 2);
        let manager_config = ManagerConfig {
            listener: config.listener,
            session: SessionConfig {
                categories: config.categories.clone(),
                buffer_size_bytes: config.buffer_size_bytes,
                buffering_mode: config.buffering_mode,
                start_timeout: config.start_timeout,
                stop_timeout: config.stop_timeout,
            },
            output_name: config.output.display().to_string(),
            max_providers,
            max_per_uid: max_providers - reserved,
            reserved_for_traced: reserved,
            ..ManagerConfig::new(socket_path)
        };
        let mut manager = Manager::with_output(manager_config, Box::new(output))?;
        // A fresh session is INITIALIZED: Start cannot fail.
        let _ = manager.start(None);
        let stop = StopHandle {
            waker: manager.waker(),
            requested: Arc::new(AtomicBool::new(false)),
        };
        let started = Instant::now();
        let mut driver = SessionDriver::new(manager, config.duration, config.stop_on_alert.clone());
        driver.arm_deadline(started);
        Ok(Self {
            config,
            driver,
            socket_dir,
            stop,
            started,
            externals: Vec::new(),
            progress: None,
            output: out_file,
            written,
            descriptors,
            probes: None,
            kernel_symbols: None,
            gave_terminal: false,
            lines: EventLines::new(),
            successions: Successions::default(),
        })
    }

    /// The socket providers connect to (`FXTRACE_SOCKET`).
    pub fn socket_path(&self) -> &Path {
        self.driver.manager.socket_path()
    }

    /// Have `report` called with the session's status ([`Manager::session_info`]) about every
    /// `interval` while tracing, from [`Self::run`]'s thread (for a progress line).
    pub fn on_progress(&mut self, interval: Duration, report: Box<dyn FnMut(&SessionInfo) + Send>) {
        self.progress = Some(Progress { interval, report });
    }

    /// A handle to stop the recording from another thread (or a signal handler through
    /// [`stop_on_signals`]).
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Run the command (if any) and trace until a stop condition; write the archive. `log`
    /// receives one human-readable line per notable event (provider joined, lost, alert, …).
    pub fn run(mut self, mut log: impl FnMut(&str)) -> Result<RecordReport, RecorderError> {
        // Sections started before the command open the archive.
        self.driver.drain_sections()?;
        let child = match self.spawn() {
            Ok(child) => child,
            Err(e) => {
                // Nothing was recorded: leave no trace file behind.
                self.discard();
                return Err(e);
            }
        };
        let mut command = Traced::new(child);
        if let Some(pid) = command.pid {
            self.driver.manager.set_traced_root(pid);
        }
        let mut alerts = Alerts::default();
        let (stop_reason, mut output_failure) =
            match self.trace(&mut command, &mut alerts, &mut log) {
                Ok(reason) => (reason, None),
                Err(e) => (StopReason::OutputFailed, Some(output_failed(&e).ok_or(e)?)),
            };
        log(&format!("stopping: {stop_reason}"));
        let elapsed = self.started.elapsed();
        // A failed output stops the command as Ctrl-C would: SIGINT to its process group. A
        // stop signal the command was passed ([`Traced::pass_on`]) had its grace already; any
        // other gets a moment to exit on its own after the session stops.
        let interrupted = match stop_reason {
            StopReason::Signal(_) => command.passed_on.is_none(),
            StopReason::OutputFailed => {
                if let (Some(pgid), None) = (command.pid, command.status) {
                    lifecycle::signal_group(pgid, Signal::SIGINT);
                }
                true
            }
            _ => false,
        };
        // A command that exited opens no more tracepoints: the recorder's hold is released
        // while the session winds down (the kernel's waits overlap with it). One still running
        // (a duration, a signal, a failed output) keeps the hold until it has ended below.
        // Processes the command left running in the background pay the probes' registration
        // themselves from then on (13 ms, and 40–54 ms at their last close): a cost, no loss.
        let mut released = None;
        if command.exited_at.is_some() {
            released = self.probes.take().map(lifecycle::ProbeHold::release);
        }
        self.wind_down(&mut output_failure, &mut log)?;
        // The trace ended first: the command goes too (SIGTERM to its group, then SIGKILL).
        // After a stop signal it gets a moment to exit on its own.
        if let Some(line) = command.end(interrupted, self.config.exit_grace)? {
            log(&line);
        }
        if released.is_none() {
            released = self.probes.take().map(lifecycle::ProbeHold::release);
        }
        if self.gave_terminal {
            lifecycle::take_back_terminal();
        }
        let ended = Ended {
            stop_reason,
            command_pid: command.pid,
            command_status: command.status,
            alerts,
            elapsed,
            output_failure,
        };
        let report = self.report(ended);
        drop(released);
        report
    }

    /// Trace until a stop condition: the session's turns, the command's exit, signals.
    fn trace(
        &mut self,
        command: &mut Traced,
        alerts: &mut Alerts,
        log: &mut impl FnMut(&str),
    ) -> Result<StopReason, RecorderError> {
        let mut next_progress = self.progress.as_ref().map(|p| self.started + p.interval);
        loop {
            let wake_at = command
                .wake_at(self.config.exit_grace, self.config.signal_grace)
                .into_iter()
                .chain(next_progress)
                .min();
            let turn = {
                let extra: Vec<BorrowedFd<'_>> = command.pollable().into_iter().collect();
                self.driver.turn(&extra, wake_at)?
            };
            if turn.stop == Some(StopCause::Duration) {
                return Ok(StopReason::Duration);
            }
            let mut reason = None;
            for event in &turn.events {
                // Alerts beyond the first ALERTS_KEPT are counted, not logged (a provider
                // raising alerts in a loop must not flood the terminal).
                let quiet = matches!(event, ManagerEvent::Alert { .. }) && alerts.full();
                if let Some(line) = self.lines.line(event, Instant::now()).filter(|_| !quiet) {
                    log(&line);
                }
                match event {
                    ManagerEvent::Woken => reason = self.stop_requested().or(reason),
                    ManagerEvent::Alert { name, .. } => {
                        if let Some(line) = alerts.note(name) {
                            log(line);
                        }
                    }
                    _ => {}
                }
            }
            if let Some(StopCause::Alert { provider, name }) = turn.stop {
                reason.get_or_insert(StopReason::Alert { provider, name });
            }
            // After the events' own lines ("provider N joined" first).
            for line in self.successions.observe(&turn.events) {
                log(&line);
            }
            if let Some(line) = self.lines.pending(Instant::now()) {
                log(&line);
            }
            if let Some(line) = command.check_exit() {
                log(&line);
            }
            if let Some(reason) = reason {
                // A stop signal goes to the command first: tracing goes on while it ends.
                match command.pass_on(&reason) {
                    PassOn::Passed(line) => log(&line),
                    PassOn::Waiting => {}
                    PassOn::StopNow => return Ok(reason),
                }
            }
            let now = Instant::now();
            if let Some((signo, at)) = command.passed_on {
                if command.exited_at.is_none() && now >= at + self.config.signal_grace {
                    return Ok(StopReason::Signal(signo));
                }
            }
            if let Some(at) = command.exited_at {
                let waiting = self.providers_of(command.pid.unwrap_or(0));
                if waiting == 0 || now >= at + self.config.exit_grace {
                    return Ok(match command.passed_on {
                        Some((signo, _)) => StopReason::Signal(signo),
                        None => StopReason::CommandExited,
                    });
                }
            }
            if let (Some(at), Some(progress)) = (next_progress, self.progress.as_mut()) {
                if now >= at {
                    (progress.report)(&self.driver.manager.session_info());
                    next_progress = Some(now + progress.interval);
                }
            }
        }
    }

    /// A stop signal received or a stop requested, after a wake-up.
    fn stop_requested(&self) -> Option<StopReason> {
        // ATOMICS: `SeqCst`, see the static; the handler stored it before waking us. Not
        // reset: a second signal while stopping kills.
        let signo = SIGNAL_RECEIVED.load(Ordering::SeqCst);
        if signo != 0 {
            Some(StopReason::Signal(signo))
        // ATOMICS: `Acquire`, pairs with `request_stop`.
        } else if self.stop.requested.load(Ordering::Acquire) {
            Some(StopReason::Requested)
        } else {
            None
        }
    }

    /// After tracing: stop the session (its buffers read out), then the external sources,
    /// and write their last batches. A failure to write the output (a full disk) is kept in
    /// `output_failure` (the file is then cut after its last whole record), and once there
    /// is one nothing more is written.
    fn wind_down(
        &mut self,
        output_failure: &mut Option<String>,
        log: &mut impl FnMut(&str),
    ) -> Result<(), RecorderError> {
        if output_failure.is_none() {
            // The stop reads every provider's buffer out: the disk may fill now too.
            if let Err(e) = self.stop_session(log) {
                *output_failure = Some(output_failed(&e).ok_or(e)?);
            }
        }
        for mut source in std::mem::take(&mut self.externals) {
            if let Err(e) = source.stop() {
                log(&format!("stopping {source:?}: {e}"));
            }
            for (id, losses) in source.losses() {
                let sections = self.driver.sections_mut();
                if let Some(s) = sections.iter_mut().find(|s| s.report.id == id) {
                    s.report.losses = Some(losses);
                }
            }
        }
        if output_failure.is_none() {
            if let Err(e) = self.driver.drain_sections() {
                let e = RecorderError::Manager(e);
                *output_failure = Some(output_failed(&e).ok_or(e)?);
            }
        }
        Ok(())
    }

    /// The report of a recording that has `ended`: the archive finished (or cut after its
    /// last whole record when writing it failed).
    fn report(mut self, ended: Ended) -> Result<RecordReport, RecorderError> {
        let manager = &self.driver.manager;
        let mut providers = manager.reports();
        note_execs(&mut providers, &self.successions);
        if let (Some(pid), Some(status)) = (ended.command_pid, ended.command_status) {
            refine_lost_reasons(&mut providers, pid, status);
        }
        let refused = manager.refused().to_vec();
        let known_categories = manager.session().known_categories();
        let socket_path = manager.socket_path().to_path_buf();
        let sections = self
            .driver
            .sections_mut()
            .iter()
            .map(|s| s.report.clone())
            .collect();
        let Recorder {
            driver,
            socket_dir,
            config,
            output,
            written,
            ..
        } = self;
        // The manager's end drops the archive's output, which waits for its writer.
        let finished = match (ended.output_failure, driver.manager.finish()) {
            (None, Ok(bytes)) => match written.error() {
                None => Ok(bytes),
                Some(e) => Err(e.to_string()),
            },
            (Some(reason), _) => Err(reason),
            (None, Err(e)) => {
                let e = RecorderError::Manager(e);
                Err(output_failed(&e).ok_or(e)?)
            }
        };
        drop(socket_dir);
        let (output_bytes, output_failure) = match finished {
            Ok(bytes) => (bytes, None),
            Err(reason) => {
                // The file may end inside a record: cut it after the last whole one.
                let prefix = truncate_to_complete_records(output.file()).map_err(|source| {
                    RecorderError::Output {
                        path: config.output.clone(),
                        source,
                    }
                })?;
                let failure = OutputFailure {
                    reason,
                    records: prefix.records,
                };
                (prefix.bytes, Some(failure))
            }
        };
        Ok(RecordReport {
            output: config.output,
            output_bytes,
            socket_path,
            providers,
            refused,
            sections,
            stop_reason: ended.stop_reason,
            command_pid: ended.command_pid,
            command_status: ended.command_status,
            alerts: ended.alerts.kept,
            alerts_more: ended.alerts.more,
            known_categories,
            elapsed: ended.elapsed,
            output_failure,
        })
    }

    fn spawn(&mut self) -> Result<Option<Child>, RecorderError> {
        let Some((program, args)) = self.config.command.split_first() else {
            return Ok(None);
        };
        // What the command will see: the recorder's settings over its own environment.
        let option = |name: &str| {
            let set = self.config.env.iter().rev().find(|(k, _)| k == name);
            set.map(|(_, v)| v.clone())
                .or_else(|| std::env::var_os(name))
        };
        let on = |name: &str| option(name).is_some_and(|v| v != "0" && !v.is_empty());
        let mut command = std::process::Command::new(program);
        if self.config.env.iter().any(|(k, _)| k == "LD_PRELOAD")
            && option("FXTRACE_PRELOAD_CAPTURE").map_or(true, |v| v != "none")
        {
            let wait_points = on("FXTRACE_PRELOAD_WAIT_POINTS");
            self.probes = lifecycle::ProbeHold::open(wait_points);
            if wait_points || on("FXTRACE_PRELOAD_SAMPLE") {
                self.kernel_symbols = lifecycle::share_kernel_symbols(&mut command);
            }
        }
        if self.kernel_symbols.is_none() {
            // An outer session's table (a recorder started under another) is not this one's.
            command.env_remove(fxtrace::capture::SHARED_SYMBOLS_ENV);
        }
        self.gave_terminal = lifecycle::terminal_is_ours();
        lifecycle::prepare_command(&mut command, self.gave_terminal, self.descriptors);
        command
            .args(args)
            .env(SOCKET_ENV, self.driver.manager.socket_path())
            .envs(self.config.env.iter().map(|(k, v)| (k, v)))
            .spawn()
            .map(Some)
            .map_err(|source| RecorderError::Spawn {
                program: program.clone(),
                source,
            })
    }

    /// Providers of process `pid` still connected.
    fn providers_of(&self, pid: u32) -> usize {
        self.driver
            .manager
            .session()
            .providers()
            .filter(|p| {
                p.pid == pid
                    && !matches!(
                        p.phase,
                        super::session::ProviderPhase::Lost
                            | super::session::ProviderPhase::Stopped
                    )
            })
            .count()
    }

    /// Stop with results (salvaging silent providers after the stop timeout), then terminate
    /// the providers, waiting at most a moment for them to close.
    fn stop_session(&mut self, log: &mut impl FnMut(&str)) -> Result<(), RecorderError> {
        if matches!(
            self.driver.manager.session().state(),
            SessionState::Starting | SessionState::Started
        ) {
            if let Err(e) = self.driver.manager.stop(true) {
                log(&format!("stop: {e}"));
            }
            while self.driver.manager.session().state() == SessionState::Stopping {
                let outcome = self.driver.manager.poll(&[], None)?;
                self.log_events(&outcome.events, log);
            }
        }
        if self.driver.manager.terminate().is_ok() {
            let until = Instant::now() + Duration::from_millis(500);
            while self.driver.manager.session().state() == SessionState::Terminating {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let outcome = self.driver.manager.poll(&[], Some(left))?;
                self.log_events(&outcome.events, log);
            }
        }
        if let Some(line) = self.lines.rest() {
            log(&line);
        }
        Ok(())
    }

    /// Log the lines of `events` (and of refusals due).
    fn log_events(&mut self, events: &[ManagerEvent], log: &mut impl FnMut(&str)) {
        let now = Instant::now();
        for event in events {
            if let Some(line) = self.lines.line(event, now) {
                log(&line);
            }
        }
        for line in self.successions.observe(events) {
            log(&line);
        }
        if let Some(line) = self.lines.pending(now) {
            log(&line);
        }
    }
}

/// What a recording ended with, for its report.
struct Ended {
    stop_reason: StopReason,
    command_pid: Option<u32>,
    command_status: Option<ExitStatus>,
    alerts: Alerts,
    elapsed: Duration,
    output_failure: Option<String>,
}

/// The alerts a recording keeps (the first [`ALERTS_KEPT`]) and how many more it counted.
#[derive(Debug, Default)]
struct Alerts {
    kept: Vec<String>,
    more: u64,
}

impl Alerts {
    /// As many kept as there may be: later ones are counted and not logged.
    fn full(&self) -> bool {
        self.kept.len() >= ALERTS_KEPT
    }

    /// Keep or count alert `name`; the line to log when the list has just filled.
    fn note(&mut self, name: &str) -> Option<&'static str> {
        if self.full() {
            self.more = self.more.saturating_add(1);
            return None;
        }
        self.kept.push(name.to_owned());
        self.full()
            .then_some("further alerts are counted, not listed")
    }
}

/// The recorded command (none: the recording traces whoever joins).
struct Traced {
    child: Option<Child>,
    /// Readable when the command exits (none: no command, or a kernel before 5.3).
    pidfd: Option<OwnedFd>,
    /// Should the recorder die (even of SIGKILL), the command's group is signalled.
    group_guard: Option<lifecycle::GroupGuard>,
    pid: Option<u32>,
    status: Option<ExitStatus>,
    exited_at: Option<Instant>,
    /// The stop signal passed on to the command, and when.
    passed_on: Option<(i32, Instant)>,
}

/// What [`Traced::pass_on`] did with a stop reason.
enum PassOn {
    /// The signal went to the command: the line to log; tracing goes on.
    Passed(String),
    /// It went before: tracing goes on until the command exits or its grace ends.
    Waiting,
    /// Not a signal to pass on (or no command to take it): stop now.
    StopNow,
}

/// Stop signals the recorder passes on to its command, as they are: a user's request that the
/// command end (Ctrl-C when the recorder has the terminal, `kill`, `timeout -s INT`, a
/// service manager's stop). SIGUSR1 and SIGUSR2 (`--stop-on-signal`) stop the recording only.
pub const PASSED_ON_SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// How long a command passed a stop signal is traced while it ends on its own, by default
/// ([`RecordConfig::signal_grace`]): then it gets SIGTERM.
pub const SIGNAL_GRACE: Duration = Duration::from_secs(5);

impl Traced {
    fn new(child: Option<Child>) -> Traced {
        let pid = child.as_ref().map(Child::id);
        Traced {
            pidfd: pid.and_then(pidfd_open),
            group_guard: pid.and_then(|pid| lifecycle::GroupGuard::new(pid).ok()),
            child,
            pid,
            status: None,
            exited_at: None,
            passed_on: None,
        }
    }

    /// Pass the stop signal of `reason` on to the command's process group, once, if it is one
    /// of [`PASSED_ON_SIGNALS`] and the command runs.
    fn pass_on(&mut self, reason: &StopReason) -> PassOn {
        let StopReason::Signal(signo) = *reason else {
            return PassOn::StopNow;
        };
        match self.passed_on {
            // A later wake-up reads the same signal: the command still has its grace.
            Some((passed, _)) if passed == signo => return PassOn::Waiting,
            Some(_) => return PassOn::StopNow,
            None => {}
        }
        let (Ok(signal), Some(pid), None) = (Signal::try_from(signo), self.pid, self.status) else {
            return PassOn::StopNow;
        };
        if !PASSED_ON_SIGNALS.contains(&signal) || !lifecycle::signal_group(pid, signal) {
            return PassOn::StopNow;
        }
        self.passed_on = Some((signo, Instant::now()));
        PassOn::Passed(format!(
            "{} passed on to the command (pid {pid}); tracing until it exits",
            signal.as_str()
        ))
    }

    /// The descriptor that says the command exited, while it runs.
    fn pollable(&self) -> Option<BorrowedFd<'_>> {
        match (&self.pidfd, self.status) {
            (Some(fd), None) => Some(fd.as_fd()),
            _ => None,
        }
    }

    /// When the session loop must look again: the end of the grace its providers get after
    /// it exited (`grace`), or of the one it gets after a stop signal (`signal_grace`), or in
    /// 50 ms when there is no pidfd to say it exits (kernel < 5.3).
    fn wake_at(&self, grace: Duration, signal_grace: Duration) -> Option<Instant> {
        let tick = (self.child.is_some() && self.status.is_none() && self.pidfd.is_none())
            .then(|| Instant::now() + Duration::from_millis(50));
        let signalled = self.passed_on.map(|(_, at)| at + signal_grace);
        self.exited_at
            .map(|at| at + grace)
            .into_iter()
            .chain(signalled)
            .chain(tick)
            .min()
    }

    /// Whether it exited (the line to log, once).
    fn check_exit(&mut self) -> Option<String> {
        if self.status.is_some() {
            return None;
        }
        let child = self.child.as_mut()?;
        let status = child.try_wait().ok()??;
        self.status = Some(status);
        self.exited_at = Some(Instant::now());
        Some(format!(
            "command (pid {}) {}",
            child.id(),
            describe_status(status)
        ))
    }

    /// The recording is over: a command still running goes too (after `grace` to exit on its
    /// own when `interrupted`, then SIGTERM to its group, then SIGKILL). The line to log.
    fn end(&mut self, interrupted: bool, grace: Duration) -> Result<Option<String>, RecorderError> {
        let mut line = None;
        if let (Some(c), None) = (self.child.as_mut(), self.status) {
            if interrupted {
                self.status = wait_child(c, self.pidfd.as_ref(), grace);
            }
            if self.status.is_none() {
                let status =
                    terminate_child(c, self.pidfd.as_ref()).map_err(RecorderError::Wait)?;
                line = Some(format!(
                    "command (pid {}) was still running: sent SIGTERM; it {}",
                    c.id(),
                    describe_status(status)
                ));
                self.status = Some(status);
            }
        }
        self.group_guard = None;
        Ok(line)
    }
}

/// How often at most a line tells of refused connections.
const REFUSALS_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// The log lines of the manager's events: refused connections told at most once per
/// [`REFUSALS_LOG_INTERVAL`] (a flood of connections must not flood the terminal), the others
/// as they come.
#[derive(Debug)]
struct EventLines {
    refused: Throttle,
    /// Why the last connection was refused.
    last_refusal: String,
}

impl EventLines {
    fn new() -> Self {
        EventLines {
            refused: Throttle::new(REFUSALS_LOG_INTERVAL),
            last_refusal: String::new(),
        }
    }

    /// The line for `event` at `now`, if one is due.
    fn line(&mut self, event: &ManagerEvent, now: Instant) -> Option<String> {
        if let ManagerEvent::Refused { reason, .. } = event {
            self.refused.note();
            self.last_refusal.clone_from(reason);
            return self.pending(now);
        }
        describe(event)
    }

    /// Refusals not told yet, once the interval has passed (call it every turn).
    fn pending(&mut self, now: Instant) -> Option<String> {
        let due = self.refused.due(now);
        self.refusals(due)
    }

    /// Refusals not told yet, whatever the interval (at the end).
    fn rest(&mut self) -> Option<String> {
        let rest = self.refused.rest();
        self.refusals(rest)
    }

    fn refusals(&self, count: Option<u64>) -> Option<String> {
        Some(match count? {
            1 => format!("refused a connection: {}", self.last_refusal),
            n => format!("refused {n} connections (the last: {})", self.last_refusal),
        })
    }
}

/// The system's error when `e` is a failure to write the output (a full disk), not of the
/// recording itself.
fn output_failed(e: &RecorderError) -> Option<String> {
    match e {
        RecorderError::Manager(ManagerError::Archive(ArchiveError::Io(io))) => Some(io.to_string()),
        _ => None,
    }
}

/// One log line for an event worth telling the user about.
fn describe(event: &ManagerEvent) -> Option<String> {
    Some(match event {
        ManagerEvent::ProviderRegistered { id, pid, name, .. } => {
            format!("provider {id} joined: pid {pid} {name:?}")
        }
        ManagerEvent::ProviderLost { id, reason } => format!("provider {id} lost: {reason}"),
        ManagerEvent::ProviderProblem { id, message } => format!("provider {id}: {message}"),
        ManagerEvent::Alert { id, name } => format!("provider {id} raised alert {name:?}"),
        ManagerEvent::StartAcknowledged { timed_out } if !timed_out.is_empty() => {
            format!("start acknowledged without providers {timed_out:?} (start timeout)")
        }
        ManagerEvent::StopAcknowledged { timed_out } if !timed_out.is_empty() => {
            format!("stop finished without providers {timed_out:?} (stop timeout; salvaged)")
        }
        _ => return None,
    })
}

fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by {}", signal_name(sig)),
        _ => format!("ended ({status})"),
    }
}

/// Which providers of a process followed others by `exec`. A provider's registration names
/// the image its process ran then ([`ProcessImage`]): a provider of the same process (the
/// same start time) in another image follows every provider of the image before by exec, and
/// another start time is another process given the same pid (no succession). Where the two
/// images read the same (one image, or the same program exec'd again with address-space
/// randomisation off, or an image read after another thread's exec) or one is unknown
/// (`/proc` not readable), the connections decide: a provider registered after every earlier
/// provider of the image had ended follows them by exec (the old image's connections close at
/// the exec); one registered while another is still connected is a second provider of the
/// process (a program with its own copy of fxtrace beside the preload object's provider, or
/// one that connects again beside it), never an exec. Pid 0 (a peer in a pid namespace this
/// manager cannot see) is never a succession. What this cannot tell: a provider that connects
/// again in the same image once every other had ended reads as their exec (a program that
/// closed its provider's connection and opened another; if that one was lost, its loss reads
/// as an unflushed exec), and an exec with randomisation off while a forked child still holds
/// the old connection reads as a second provider. Every provider of the old image is said to
/// have exec'd, one that ended long before the exec too.
#[derive(Debug, Default)]
struct Successions {
    /// Connected providers (registered, connection not ended).
    live: HashSet<u32>,
    /// Each process's latest image and the providers registered in it: pid → (image, ids).
    images: HashMap<u32, (Option<ProcessImage>, Vec<u32>)>,
    /// Provider → the provider its process exec'd into.
    execs: HashMap<u32, u32>,
    /// Provider → the first provider of its process, for a provider that is not that first.
    process_of: HashMap<u32, u32>,
}

impl Successions {
    /// Take in one poll's events; the log lines they call for. Ends are taken first: a
    /// connection whose end this poll read ended before a registration the same poll read
    /// (an exec closes the old image's connections before the new image runs).
    fn observe(&mut self, events: &[ManagerEvent]) -> Vec<String> {
        let mut ended = HashSet::new();
        for event in events {
            if let ManagerEvent::ProviderLost { id, .. } | ManagerEvent::ProviderGone { id } = event
            {
                self.live.remove(id);
                ended.insert(*id);
            }
        }
        let mut lines = Vec::new();
        for event in events {
            let ManagerEvent::ProviderRegistered {
                id,
                pid,
                name,
                image,
            } = event
            else {
                continue;
            };
            if !ended.contains(id) {
                self.live.insert(*id);
            }
            if *pid == 0 {
                continue;
            }
            let Some((before, providers)) = self.images.get_mut(pid) else {
                self.images.insert(*pid, (*image, vec![*id]));
                continue;
            };
            // The process's first provider, if this one belongs to the same process.
            let first = providers
                .first()
                .map(|p| self.process_of.get(p).copied().unwrap_or(*p));
            let beside = providers
                .iter()
                .rev()
                .find(|&p| self.live.contains(p))
                .copied();
            let exec = match (*before, *image) {
                // Another process given the same pid: no succession.
                (Some(a), Some(b)) if a.start_time != b.start_time => {
                    self.images.insert(*pid, (*image, vec![*id]));
                    continue;
                }
                (Some(a), Some(b)) if a.auxv != b.auxv => true,
                _ => beside.is_none(),
            };
            if let Some(first) = first {
                self.process_of.insert(*id, first);
            }
            if !exec {
                if let Some(beside) = beside {
                    lines.push(format!(
                        "provider {id} ({name:?}) is a second provider of pid {pid}, beside \
                         provider {beside}"
                    ));
                }
                *before = before.or(*image);
                providers.push(*id);
                continue;
            }
            for &old in providers.iter() {
                self.execs.insert(old, *id);
                lines.push(format!(
                    "provider {old} (pid {pid}) exec'd into {name:?} (provider {id})"
                ));
            }
            self.images.insert(*pid, (*image, vec![*id]));
        }
        lines
    }

    /// The provider `id`'s process exec'd into, if it did.
    fn exec_of(&self, id: u32) -> Option<u32> {
        self.execs.get(&id).copied()
    }

    /// The first provider of provider `id`'s process (`id` itself when it is that first).
    fn process_of(&self, id: u32) -> u32 {
        self.process_of.get(&id).copied().unwrap_or(id)
    }
}

/// A provider followed by another of the same process by exec ([`Successions`]): an exec is
/// a normal end of the old image, not a loss. One that closed without STOPPED (an exec the
/// preload object could not flush before) had its buffer salvaged: said so, not marked lost.
fn note_execs(providers: &mut [ProviderReport], successions: &Successions) {
    for p in providers.iter_mut() {
        p.process = successions.process_of(p.id);
    }
    let next: Vec<Option<(u32, String)>> = providers
        .iter()
        .map(|p| {
            let next = successions.exec_of(p.id)?;
            let name = providers.iter().find(|q| q.id == next)?.name.clone();
            Some((next, name))
        })
        .collect();
    for (p, next) in providers.iter_mut().zip(next) {
        let Some((id, name)) = next else { continue };
        let salvaged = p
            .lost
            .as_deref()
            .is_some_and(|r| r.starts_with("connection closed without STOPPED"));
        if salvaged {
            p.lost = None;
            p.problems.push(format!(
                "exec'd into {name:?} (provider {id}) without flushing; its buffer was \
                 salvaged from the manager's mapping"
            ));
        } else if p.lost.is_none() {
            p.problems
                .push(format!("exec'd into {name:?} (provider {id})"));
        }
    }
}

/// A provider of the command that vanished without STOPPED: say how the command ended.
fn refine_lost_reasons(providers: &mut [ProviderReport], pid: u32, status: ExitStatus) {
    for p in providers.iter_mut().filter(|p| p.pid == pid) {
        if let Some(reason) = &mut p.lost {
            if reason.starts_with("connection closed without STOPPED") {
                *reason = format!(
                    "the process {} without stopping its provider; buffer salvaged from the \
                     manager's mapping",
                    describe_status(status)
                );
            }
        }
    }
}

/// `pidfd_open(pid, 0)`, or `None` when the kernel lacks it.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the syscall returned a new descriptor that nothing else owns (it is CLOEXEC by
    // definition of pidfd_open).
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// How long a command gets to exit after SIGTERM before SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_secs(2);

/// SIGTERM to the command's process group, up to [`TERM_GRACE`] for the command to exit, then
/// SIGKILL to the group; returns the exit status.
fn terminate_child(child: &mut Child, pidfd: Option<&OwnedFd>) -> std::io::Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    // The command leads its own process group (see `lifecycle`): the group gets the signals,
    // so that what the command started goes too. ESRCH: it exited meanwhile; the wait below
    // collects it.
    lifecycle::signal_group(child.id(), Signal::SIGTERM);
    if let Some(status) = wait_child(child, pidfd, TERM_GRACE) {
        return Ok(status);
    }
    lifecycle::signal_group(child.id(), Signal::SIGKILL);
    let _ = child.kill();
    child.wait()
}

/// Wait up to `limit` for `child` to exit.
fn wait_child(child: &mut Child, pidfd: Option<&OwnedFd>, limit: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let wait = match pidfd {
            Some(_) => left,
            None => left.min(Duration::from_millis(20)),
        };
        match pidfd {
            Some(fd) => {
                let mut fds = [nix::poll::PollFd::new(
                    fd.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let ms = wait.as_millis().min(i32::MAX as u128) as i32;
                let _ = nix::poll::poll(
                    &mut fds,
                    nix::poll::PollTimeout::try_from(ms.max(1))
                        .unwrap_or(nix::poll::PollTimeout::MAX),
                );
            }
            None => std::thread::sleep(wait),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_refused_connections_is_told_in_one_line_a_second() {
        let mut lines = EventLines::new();
        let refused = |i: i32| ManagerEvent::Refused {
            pid: Some(i),
            reason: format!("reason {i}"),
        };
        let t0 = Instant::now();
        let told: Vec<String> = (0..100)
            .filter_map(|i| lines.line(&refused(i), t0))
            .collect();
        assert_eq!(told, ["refused a connection: reason 0"]);
        assert_eq!(lines.pending(t0 + REFUSALS_LOG_INTERVAL / 2), None);
        assert_eq!(
            lines.pending(t0 + REFUSALS_LOG_INTERVAL).as_deref(),
            Some("refused 99 connections (the last: reason 99)")
        );
        assert_eq!(lines.line(&refused(100), t0 + REFUSALS_LOG_INTERVAL), None);
        assert_eq!(
            lines.rest().as_deref(),
            Some("refused a connection: reason 100")
        );
        // Other events are told as they come.
        let lost = ManagerEvent::ProviderLost {
            id: 3,
            reason: "gone".into(),
        };
        assert_eq!(
            lines.line(&lost, t0).as_deref(),
            Some("provider 3 lost: gone")
        );
    }

    #[test]
    fn status_descriptions() {
        assert_eq!(
            describe_status(ExitStatus::from_raw(3 << 8)),
            "exited with status 3"
        );
        assert_eq!(
            describe_status(ExitStatus::from_raw(9)),
            "was killed by SIGKILL"
        );
        assert_eq!(signal_name(2), "SIGINT");
        assert_eq!(StopReason::Signal(15).to_string(), "SIGTERM received");
    }

    fn report(id: u32, pid: u32, name: &str, lost: Option<&str>) -> ProviderReport {
        ProviderReport {
            lost: lost.map(str::to_owned),
            ..ProviderReport::idle(id, pid, name)
        }
    }

    fn image(start_time: u64, auxv: u64) -> Option<ProcessImage> {
        Some(ProcessImage { start_time, auxv })
    }

    fn registered(id: u32, pid: u32, name: &str, image: Option<ProcessImage>) -> ManagerEvent {
        ManagerEvent::ProviderRegistered {
            id,
            pid,
            name: name.into(),
            image,
        }
    }

    fn lost(id: u32) -> ManagerEvent {
        ManagerEvent::ProviderLost {
            id,
            reason: "connection closed without STOPPED (…)".into(),
        }
    }

    fn gone(id: u32) -> ManagerEvent {
        ManagerEvent::ProviderGone { id }
    }

    /// The successions of every case `note_execs` is tested on, each checked as it is seen.
    fn successions_of_every_case() -> Successions {
        let mut successions = Successions::default();
        // bash exec'd into pyenv (flushed first), pyenv into python3 (closed unflushed, seen
        // in the poll that reads python3's registration, after it).
        assert!(successions
            .observe(&[
                registered(1, 10, "bash", image(100, 1)),
                registered(4, 11, "other", image(150, 1)),
            ])
            .is_empty());
        assert_eq!(
            successions.observe(&[gone(1), registered(2, 10, "pyenv", image(100, 2))]),
            ["provider 1 (pid 10) exec'd into \"pyenv\" (provider 2)"]
        );
        assert_eq!(
            successions.observe(&[registered(3, 10, "python3", image(100, 3)), lost(2)]),
            ["provider 2 (pid 10) exec'd into \"python3\" (provider 3)"]
        );
        // Two providers of one image (a program with its own fxtrace under the preload
        // object), both lost when it crashed: no exec. The program's provider connects again
        // beside the other: no exec either.
        successions.observe(&[registered(5, 12, "preload", image(200, 7))]);
        assert_eq!(
            successions.observe(&[registered(6, 12, "own", image(200, 7))]),
            ["provider 6 (\"own\") is a second provider of pid 12, beside provider 5"]
        );
        assert_eq!(
            successions.observe(&[gone(6), registered(7, 12, "own", image(200, 7))]),
            ["provider 7 (\"own\") is a second provider of pid 12, beside provider 5"]
        );
        successions.observe(&[lost(5), lost(7)]);
        // An exec the object did not hook while a forked child still holds the old image's
        // connection: the image changed, an exec all the same.
        successions.observe(&[registered(8, 13, "parent", image(300, 1))]);
        assert_eq!(
            successions.observe(&[registered(9, 13, "true", image(300, 2))]),
            ["provider 8 (pid 13) exec'd into \"true\" (provider 9)"]
        );
        successions.observe(&[lost(8)]);
        // A pid given to another process: no succession, the first one's loss stays.
        successions.observe(&[registered(10, 14, "first", image(400, 1)), lost(10)]);
        assert!(successions
            .observe(&[registered(11, 14, "next", image(500, 2))])
            .is_empty());
        // Without images: an exec once every earlier provider of the pid had ended.
        successions.observe(&[registered(12, 15, "a", None)]);
        assert_eq!(
            successions.observe(&[registered(13, 15, "b", None)]).len(),
            1
        );
        assert_eq!(
            successions.observe(&[lost(12), gone(13), registered(14, 15, "c", None)]),
            [
                "provider 12 (pid 15) exec'd into \"c\" (provider 14)",
                "provider 13 (pid 15) exec'd into \"c\" (provider 14)"
            ]
        );
        // The same image read again after every earlier provider ended: the same program
        // exec'd again with address-space randomisation off (or read after another thread's
        // exec), an exec by the connections.
        successions.observe(&[registered(15, 16, "reexec", image(600, 1)), lost(15)]);
        assert_eq!(
            successions.observe(&[registered(16, 16, "reexec", image(600, 1))]),
            ["provider 15 (pid 16) exec'd into \"reexec\" (provider 16)"]
        );
        // Pid 0 (a peer in a pid namespace not seen here): never a succession.
        successions.observe(&[registered(17, 0, "far", None), lost(17)]);
        assert!(successions
            .observe(&[registered(18, 0, "away", None)])
            .is_empty());
        // An image first unknown, then known: the known one decides later.
        successions.observe(&[registered(19, 17, "x", None)]);
        assert_eq!(
            successions.observe(&[registered(20, 17, "x", image(700, 1))]),
            ["provider 20 (\"x\") is a second provider of pid 17, beside provider 19"]
        );
        assert_eq!(
            successions.observe(&[registered(21, 17, "y", image(700, 2))]),
            [
                "provider 19 (pid 17) exec'd into \"y\" (provider 21)",
                "provider 20 (pid 17) exec'd into \"y\" (provider 21)"
            ]
        );
        successions
    }

    #[test]
    fn an_exec_is_not_a_loss_and_a_second_provider_is_not_an_exec() {
        let successions = successions_of_every_case();
        let unflushed = Some("connection closed without STOPPED (…)");
        let mut providers = vec![
            report(1, 10, "bash", None),
            report(2, 10, "pyenv", unflushed),
            report(3, 10, "python3", None),
            report(4, 11, "other", unflushed),
            report(5, 12, "preload", unflushed),
            report(6, 12, "own", None),
            report(7, 12, "own", unflushed),
            report(8, 13, "parent", unflushed),
            report(9, 13, "true", None),
            report(10, 14, "first", unflushed),
            report(11, 14, "next", None),
            report(17, 0, "far", unflushed),
            report(18, 0, "away", None),
            report(15, 16, "reexec", unflushed),
            report(16, 16, "reexec", None),
        ];
        note_execs(&mut providers, &successions);
        assert_eq!(
            providers[0].problems,
            ["exec'd into \"pyenv\" (provider 2)"]
        );
        assert_eq!(providers[1].lost, None);
        assert!(providers[1].problems[0].starts_with("exec'd into \"python3\" (provider 3)"));
        assert!(providers[2].problems.is_empty());
        // Another process's loss stays a loss, and so do those of two providers of one image
        // and of a process that had the pid before.
        for i in [3, 4, 6, 9, 11] {
            assert!(
                providers[i].lost.is_some() && providers[i].problems.is_empty(),
                "{:?}",
                providers[i]
            );
        }
        assert!(providers[5].problems.is_empty());
        assert_eq!(
            providers[13].lost, None,
            "exec'd into itself, randomisation off"
        );
        assert!(providers[13].problems[0].starts_with("exec'd into \"reexec\" (provider 16)"));
        assert_eq!(providers[7].lost, None, "the unhooked exec's old image");
        assert!(providers[7].problems[0].starts_with("exec'd into \"true\" (provider 9)"));
        // One process, one line: each provider's first provider of its process.
        let processes: Vec<(u32, u32)> = providers.iter().map(|p| (p.id, p.process)).collect();
        assert_eq!(
            processes,
            [
                (1, 1),
                (2, 1),
                (3, 1),
                (4, 4),
                (5, 5),
                (6, 5),
                (7, 5),
                (8, 8),
                (9, 8),
                (10, 10),
                (11, 11),
                (17, 17),
                (18, 18),
                (15, 15),
                (16, 15)
            ]
        );
    }

    #[test]
    fn lost_reasons_name_the_signal() {
        let mut providers = vec![report(
            1,
            10,
            "p",
            Some("connection closed without STOPPED (…)"),
        )];
        refine_lost_reasons(&mut providers, 10, ExitStatus::from_raw(9));
        assert!(providers[0]
            .lost
            .as_deref()
            .unwrap()
            .starts_with("the process was killed by SIGKILL"));
    }
}

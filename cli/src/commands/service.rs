//! The trace service's commands: `fxtrace daemon` and its controllers (`providers`,
//! `categories`, `start`, `stop`, `terminate`; `status` asks it too).

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use clap::Args;

use fxtrace::protocol::control::BufferingMode;
use fxtrace_tools::manager::report::printable;
use fxtrace_tools::manager::service::client::{Controller, ControllerError};
use fxtrace_tools::manager::service::policy::Policy;
use fxtrace_tools::manager::service::protocol::{
    Event, FromService, Reply, Request, SessionInfo, StartRequest,
};
use fxtrace_tools::manager::service::{
    default_service_socket, systemd_listen_fd, Service, ServiceConfig, ServiceError,
};
use fxtrace_tools::output_file::OutputFile;

/// Why a service command failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServiceCliError {
    /// The daemon could not run.
    #[error("fxtrace daemon: {0}")]
    Daemon(#[from] ServiceError),
    /// A controller command failed.
    #[error("fxtrace {command}: {source}")]
    Controller {
        /// The subcommand.
        command: &'static str,
        /// Why.
        source: ControllerError,
    },
    /// A bad argument.
    #[error("fxtrace {command}: {message}")]
    BadArgument {
        /// The subcommand.
        command: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The output file could not be created.
    #[error("fxtrace start: cannot create {path}: {source}")]
    Output {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// `--socket`, shared by every service command.
#[derive(Debug, Args)]
pub(crate) struct SocketArg {
    /// The trace service's socket (default: FXTRACE_SOCKET, else /run/fxtrace/fxtrace.sock
    /// for root, else $XDG_RUNTIME_DIR/fxtrace.sock).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

impl SocketArg {
    fn path(&self) -> PathBuf {
        self.socket.clone().unwrap_or_else(controller_socket)
    }
}

/// Where a controller finds the service: the user's own, else the system's.
pub(crate) fn controller_socket() -> PathBuf {
    let own = default_service_socket();
    if own.exists() {
        return own;
    }
    let system = PathBuf::from(fxtrace::provider::SYSTEM_SOCKET_PATH);
    if system.exists() {
        system
    } else {
        own
    }
}

/// Arguments of `fxtrace daemon`.
#[derive(Debug, Args)]
pub(crate) struct DaemonArgs {
    #[command(flatten)]
    socket: SocketArg,
}

static SHUTDOWN_FD: AtomicI32 = AtomicI32::new(-1);
static SHUTDOWN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_shutdown_signal(_: libc::c_int) {
    // ATOMICS: `Relaxed` flag and descriptor number; the write wakes the loop, which reads
    // the flag (the eventfd write orders nothing it needs).
    SHUTDOWN.store(true, Ordering::Relaxed);
    let fd = SHUTDOWN_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let one = 1u64.to_ne_bytes();
        // SAFETY: write(2) is async-signal-safe; `one` is 8 readable bytes.
        unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
    }
}

/// Runs `fxtrace daemon`.
pub(crate) fn daemon(args: &DaemonArgs) -> Result<ExitCode, ServiceCliError> {
    let listen_fd = systemd_listen_fd();
    let under_systemd = std::env::var_os("JOURNAL_STREAM").is_some() || listen_fd.is_some();
    let socket_path = args
        .socket
        .socket
        .clone()
        .unwrap_or_else(default_service_socket);
    if args.socket.socket.is_none()
        && std::env::var_os(fxtrace::protocol::transport::SOCKET_ENV).is_some_and(|p| !p.is_empty())
    {
        note!(
            "listening at {} because FXTRACE_SOCKET names it: programs started with the same \
             FXTRACE_SOCKET follow this service",
            socket_path.display()
        );
    }
    let mut service = Service::new(ServiceConfig {
        socket_path,
        listen_fd,
        policy: Policy::for_service(nix::unistd::geteuid().as_raw()),
        log_timestamps: !under_systemd,
    })?;
    let waker = service.waker();
    // ATOMICS: `Relaxed`: published before the handlers are installed (a syscall).
    SHUTDOWN_FD.store(waker.raw_fd(), Ordering::Relaxed);
    // Without SA_RESTART: a system call the loop is blocked in (a write to a slow output)
    // fails with EINTR, so that the shutdown is not held up by it.
    let action = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_shutdown_signal),
        nix::sys::signal::SaFlags::empty(),
        nix::sys::signal::SigSet::empty(),
    );
    for signal in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGHUP,
    ] {
        // SAFETY: the handler only stores an atomic and calls write(2) (async-signal-safe).
        let _ = unsafe { nix::sys::signal::sigaction(signal, &action) };
    }
    // SAFETY: ignoring SIGPIPE is a plain sigaction; a controller that goes away mid-reply is
    // an EPIPE error, handled.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    service.run(&SHUTDOWN)?;
    drop(waker);
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `fxtrace providers` and `fxtrace categories`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    socket: SocketArg,
}

fn connect(command: &'static str, socket: &SocketArg) -> Result<Controller, ServiceCliError> {
    Controller::connect(&socket.path())
        .map_err(|source| ServiceCliError::Controller { command, source })
}

fn call(
    command: &'static str,
    controller: &mut Controller,
    request: &Request,
    output: Option<&File>,
) -> Result<Reply, ServiceCliError> {
    controller
        .call(request, output.map(|f| f.as_fd()), print_event)
        .map_err(|source| ServiceCliError::Controller { command, source })
}

fn print_event(event: Event) {
    match event {
        Event::Stopped { reason, info } => {
            note!("session {} stopped ({reason})", info.session);
            print_session(&info);
        }
        Event::Ended { session, reason } => note!("session {session} ended ({reason})"),
    }
}

fn unexpected(command: &'static str, reply: &Reply) -> ServiceCliError {
    ServiceCliError::Controller {
        command,
        source: ControllerError::Protocol(format!("unexpected reply {reply:?}")),
    }
}

/// Runs `fxtrace providers`.
pub(crate) fn providers(args: &ListArgs) -> Result<ExitCode, ServiceCliError> {
    let mut controller = connect("providers", &args.socket)?;
    match call("providers", &mut controller, &Request::Providers {}, None)? {
        Reply::Providers { providers, omitted } => {
            println!(
                "{:>6} {:>8} {:>6}  {:<12} name",
                "id", "pid", "uid", "state"
            );
            for p in &providers {
                println!(
                    "{:>6} {:>8} {:>6}  {:<12} {}",
                    p.id, p.pid, p.uid, p.state, p.name
                );
            }
            if providers.is_empty() && omitted == 0 {
                note!(
                    "no providers registered with {}",
                    controller.socket().display()
                );
            }
            note_omitted(omitted, "providers");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(unexpected("providers", &other)),
    }
}

/// Say that the service left `omitted` entries of a list out of its answer.
fn note_omitted(omitted: u32, what: &str) {
    if let Some(line) = omitted_line(omitted, what) {
        note!("{line}");
    }
}

/// The line saying that the service left `omitted` entries of a list out, if it did.
pub(crate) fn omitted_line(omitted: u32, what: &str) -> Option<String> {
    (omitted > 0).then(|| {
        format!("{omitted} more {what} not listed: the whole list would not fit in one answer")
    })
}

/// Runs `fxtrace categories`.
pub(crate) fn categories(args: &ListArgs) -> Result<ExitCode, ServiceCliError> {
    let mut controller = connect("categories", &args.socket)?;
    match call("categories", &mut controller, &Request::Categories {}, None)? {
        Reply::Categories {
            categories,
            omitted,
        } => {
            for c in &categories {
                println!("{}", printable(c));
            }
            note_omitted(omitted, "categories");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(unexpected("categories", &other)),
    }
}

/// Arguments of `fxtrace start`.
#[derive(Debug, Args)]
pub(crate) struct StartArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The trace file to write (created, or truncated).
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Buffering mode: streaming (the default: full halves of each buffer are saved while
    /// tracing), oneshot (stop writing when full) or circular (keep the newest data).
    #[arg(long, short = 'm', value_name = "MODE")]
    mode: Option<BufferingMode>,
    /// Buffer size per provider: MiB, or with a K/M/G suffix (a multiple of 4K); default
    /// 8 MiB.
    #[arg(long = "buffer-size", short = 'b', value_name = "SIZE")]
    buffer_size: Option<String>,
    /// Enabled categories, comma-separated (`prefix*` matches a prefix; default: all).
    #[arg(long, short = 'c', value_name = "CAT,...", value_delimiter = ',')]
    categories: Vec<String>,
    /// Stop and write after this many seconds, then end the session.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Stop and write when a provider raises this alert, then end the session.
    #[arg(long, value_name = "NAME")]
    stop_on_alert: Option<String>,
    /// Only providers of these processes.
    #[arg(long, value_name = "PID", num_args = 1..)]
    pid: Vec<u32>,
    /// Only providers of these names.
    #[arg(long, value_name = "NAME", num_args = 1..)]
    name: Vec<String>,
    /// Also every CPU's context switches (the kernel provider, inside the service).
    #[arg(long, short = 'a')]
    system_wide: bool,
    /// Return once the session is tracing; it runs until `fxtrace stop` (and ends with
    /// `fxtrace terminate`), whether or not this controller is there.
    #[arg(long)]
    detach: bool,
    /// Start this existing session again (see --retain, --clear).
    #[arg(long, value_name = "ID")]
    session: Option<u32>,
    /// With --session: keep what the buffers hold (the next stop appends it again).
    #[arg(long, conflicts_with = "clear", requires = "session")]
    retain: bool,
    /// With --session: clear the buffers (the default).
    #[arg(long, requires = "session")]
    clear: bool,
}

/// A fresh output next to `path` (`fxtrace record`'s rules: a new file under a temporary
/// name, put in place, the previous one kept as `FILE.old`, once the session has started;
/// removed if it does not start).
fn create_output(path: &Path) -> Result<OutputFile, ServiceCliError> {
    OutputFile::create(path).map_err(|source| ServiceCliError::Output {
        path: path.to_owned(),
        source,
    })
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    // ATOMICS: `Relaxed` flag, polled by the controller's loop.
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Runs `fxtrace start`.
pub(crate) fn start(args: &StartArgs) -> Result<ExitCode, ServiceCliError> {
    let bad = |message: String| ServiceCliError::BadArgument {
        command: "start",
        message,
    };
    let buffer_size = args
        .buffer_size
        .as_deref()
        .map(super::record::parse_size)
        .transpose()
        .map_err(bad)?;
    let duration_ms = match args.duration {
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Some((s * 1000.0).ceil() as u64),
        Some(s) => return Err(bad(format!("--duration must be positive seconds, got {s}"))),
        None => None,
    };
    // A new session writes trace.fxt unless told otherwise; a restart appends to its file.
    let output_path = match (&args.output, args.session) {
        (Some(p), _) => Some(p.clone()),
        (None, None) => Some(PathBuf::from("trace.fxt")),
        (None, Some(_)) => None,
    };
    let output = output_path.as_deref().map(create_output).transpose()?;
    let request = Request::Start(Box::new(StartRequest {
        session: args.session,
        disposition: args
            .session
            .map(|_| if args.retain { "retain" } else { "clear" }.to_owned()),
        mode: args.mode.map(|m| m.as_str().to_owned()),
        buffer_size,
        categories: args.categories.clone(),
        duration_ms,
        stop_on_alert: args.stop_on_alert.clone(),
        pids: args.pid.clone(),
        names: args.name.clone(),
        system_wide: args.system_wide,
        detach: args.detach || args.session.is_some(),
        output: output_path.as_ref().map(|p| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string()
        }),
    }));
    let mut controller = connect("start", &args.socket)?;
    if !args.detach && args.session.is_none() {
        // Ctrl-C from now on stops the session and writes it (checked once it is tracing).
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: the handler only stores an atomic flag.
            unsafe { libc::signal(signal, on_interrupt as *const () as libc::sighandler_t) };
        }
    }
    let reply = call(
        "start",
        &mut controller,
        &request,
        output.as_ref().map(OutputFile::file),
    )?;
    if !matches!(reply, Reply::Started { .. } | Reply::Stopped(_)) {
        // Nothing was written: the fresh file goes (the previous trace stays).
        return Err(unexpected("start", &reply));
    }
    if let Some(mut out) = output {
        // The service writes through its descriptor: the file keeps growing at its name.
        match out.commit() {
            Ok(Some(old)) => note!("the previous trace was kept as {}", old.display()),
            Ok(None) => {}
            Err(source) => {
                let at = out.current_path().to_owned();
                // The service writes into it: keep it where it is and say where.
                std::mem::forget(out);
                return Err(ServiceCliError::Output { path: at, source });
            }
        }
        // Dropping a committed output leaves the file.
        drop(out);
    }
    let (session, providers, timed_out, notes) = match reply {
        Reply::Started {
            session,
            providers,
            timed_out,
            notes,
        } => (session, providers, timed_out, notes),
        Reply::Stopped(info) => {
            // Stopped (by another controller, its duration, the service's end) before every
            // provider had acknowledged the start: what was written is in the file.
            note!(
                "session {} stopped before its start completed",
                info.session
            );
            print_session(&info);
            return Ok(ExitCode::SUCCESS);
        }
        other => return Err(unexpected("start", &other)),
    };
    for n in notes {
        note!("{n}");
    }
    note!(
        "session {session}: tracing {providers} providers{}{}",
        if timed_out > 0 {
            format!(" ({timed_out} did not acknowledge the start in time)")
        } else {
            String::new()
        },
        match &output_path {
            Some(p) => format!(", writing {}", p.display()),
            None => String::new(),
        }
    );
    if args.detach || args.session.is_some() {
        println!("{session}");
        return Ok(ExitCode::SUCCESS);
    }
    attached(&mut controller, session)
}

/// Stay with the session until it stops (duration, alert, another controller's stop, or
/// Ctrl-C here, which stops it and writes the archive).
fn attached(controller: &mut Controller, session: u32) -> Result<ExitCode, ServiceCliError> {
    let fail = |source| ServiceCliError::Controller {
        command: "start",
        source,
    };
    loop {
        // ATOMICS: `Relaxed` flag set by the signal handler.
        if INTERRUPTED.swap(false, Ordering::Relaxed) {
            note!("stopping session {session} (writing the trace)");
            let stop = Request::Stop {
                session: Some(session),
                write: true,
            };
            let reply = controller.call(&stop, None, print_event).map_err(fail)?;
            if let Reply::Stopped(info) = reply {
                print_session(&info);
            }
            return Ok(ExitCode::SUCCESS);
        }
        let mut fds = [nix::poll::PollFd::new(
            controller.fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(200u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(fail(ControllerError::Protocol(format!("poll: {e}")))),
        }
        match controller
            .receive(Some(Duration::from_secs(5)))
            .map_err(fail)?
        {
            FromService::Event(Event::Stopped { reason, info }) => {
                note!("session {session} stopped ({reason})");
                print_session(&info);
                return Ok(ExitCode::SUCCESS);
            }
            FromService::Event(Event::Ended { reason, .. }) => {
                note!("session {session} ended ({reason})");
                return Ok(ExitCode::SUCCESS);
            }
            FromService::Reply(other) => return Err(unexpected("start", &other)),
        }
    }
}

fn print_session(info: &SessionInfo) {
    note!("{}", session_line(info));
    for p in &info.problems {
        note!("  {p}");
    }
}

/// One session in one line, as `start`, `stop` and `status` print it.
fn session_line(s: &SessionInfo) -> String {
    format!(
        "session {}: {}{}, {} ({} per provider), {} providers, {} records / {} bytes written, \
         {} dropped, output {}",
        s.session,
        s.state,
        if s.detached { " (detached)" } else { "" },
        s.mode,
        indicatif::HumanBytes(s.buffer_size),
        s.providers,
        s.records_written,
        s.bytes_written,
        s.records_dropped,
        if s.output.is_empty() {
            "(none)".into()
        } else {
            printable(&s.output)
        }
    )
}

/// Arguments of `fxtrace stop`.
#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The session (default: your only one).
    #[arg(long, value_name = "ID")]
    session: Option<u32>,
    /// Discard what the providers hold instead of writing it.
    #[arg(long)]
    no_write: bool,
}

/// Runs `fxtrace stop`.
pub(crate) fn stop(args: &StopArgs) -> Result<ExitCode, ServiceCliError> {
    let mut controller = connect("stop", &args.socket)?;
    let request = Request::Stop {
        session: args.session,
        write: !args.no_write,
    };
    match call("stop", &mut controller, &request, None)? {
        Reply::Stopped(info) => {
            print_session(&info);
            Ok(ExitCode::SUCCESS)
        }
        other => Err(unexpected("stop", &other)),
    }
}

/// Arguments of `fxtrace terminate`.
#[derive(Debug, Args)]
pub(crate) struct TerminateArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The session (default: your only one).
    #[arg(long, value_name = "ID")]
    session: Option<u32>,
}

/// Runs `fxtrace terminate`.
pub(crate) fn terminate(args: &TerminateArgs) -> Result<ExitCode, ServiceCliError> {
    let mut controller = connect("terminate", &args.socket)?;
    let request = Request::Terminate {
        session: args.session,
    };
    match call("terminate", &mut controller, &request, None)? {
        Reply::Terminated { session } => {
            note!("session {session} ended");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(unexpected("terminate", &other)),
    }
}

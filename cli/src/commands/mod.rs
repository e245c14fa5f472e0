//! Command-line definitions (clap derives only) and dispatch to one module per subcommand.

/// `eprintln!` that never panics: when standard error is a closed pipe (`fxtrace record … 2>&1
/// | true`) the message is lost, never the recording (`eprintln!` panics on `EPIPE`). The line
/// is formatted first and written in one `write` (standard error is unbuffered: `writeln!`
/// writes each piece of the format on its own, and the preloaded processes that share the
/// terminal wrote their own lines between the pieces).
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut line = format!($($arg)*);
        line.push('\n');
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

mod check;
mod convert;
mod dump;
mod import_perf;
mod import_xray;
mod input;
mod progress;
mod record;
mod record_notes;
mod report;
mod service;
mod stats;
mod status;

use std::io;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use fxtrace_format::DecodeError;

const EXAMPLES: &str = "\
EXAMPLES:
    fxtrace dump trace.fxt                one line per record
    fxtrace dump --json trace.fxt | jq .  one JSON object per record
    cat trace.fxt | fxtrace dump -        read standard input
    fxtrace stats trace.fxt               counts, providers, time span, damage
    fxtrace report spans trace.fxt --top 3   why the slowest spans were slow
    fxtrace report sched trace.fxt        threads on and off the CPUs, stalls
    fxtrace import-xray xray-log.app.Ab12Cd --instr-map ./app -o app.fxt
    fxtrace import-perf perf.data         perf record's samples, switches, wake-ups, mappings
    fxtrace record -o trace.fxt -- ./app --flag   trace a program that links fxtrace
    fxtrace record -m circular --stop-on-alert oom -- ./server   flight recorder
    fxtrace record -m streaming -b 64K -- ./app   small buffers, saved while tracing
    sudo fxtrace record -a -- ./app       also every CPU's context switches, same archive
    fxtrace status                        state and providers of running sessions
    fxtrace daemon &                      the trace service: programs register with it
    fxtrace start --duration 10 -o now.fxt   trace the running services for 10 s
    fxtrace start --detach -m circular    a flight recorder; later: fxtrace stop";

/// Fuchsia tracing (FXT) on Linux.
#[derive(Debug, Parser)]
#[command(
    name = "fxtrace",
    version,
    about = "Fuchsia tracing (FXT) on Linux: record, read and inspect FXT traces",
    after_help = EXAMPLES
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print every record of a trace, one line each, strings and threads resolved, time in ns.
    Dump(dump::DumpArgs),
    /// Summarize a trace: records by type, providers, time span, and any damage.
    Stats(stats::StatsArgs),
    /// Convert an LLVM XRay log (basic or FDR mode) to FXT: function durations per thread,
    /// custom and typed events, CPU migrations, wall-clock anchors.
    ImportXray(import_xray::ImportXrayArgs),
    /// Convert a `perf record` file (perf.data) to FXT: CPU samples with their call chains
    /// (`perf record -g`), LBR samples, context switches and wake-ups (`perf sched record`),
    /// mappings, thread names; every record kind not converted is counted.
    #[command(after_help = import_perf::EXAMPLES)]
    ImportPerf(import_perf::ImportPerfArgs),
    /// Convert a trace to another format: `--to chrome-json` (chrome://tracing, Perfetto).
    Convert(convert::ConvertArgs),
    /// Print a report of a trace: `spans` (why spans were slow), `sched` (threads on and off
    /// the CPUs, stalls), `lbr` (the hottest branch edges of its LBR samples).
    Report(report::ReportArgs),
    /// Record a trace: run a command under a trace session (it and any program given its
    /// FXTRACE_SOCKET become providers) and write one FXT archive; with --system-wide the
    /// context switches (and LBR) of every CPU go into the same archive.
    Record(record::RecordArgs),
    /// Show the state, providers and known categories of running sessions.
    Status(status::StatusArgs),
    /// Check a trace against Perfetto's FXT importer: what it would stop at, drop or skip.
    Check(check::CheckArgs),
    /// Run the trace service: programs register with it when they start and stay idle until
    /// a controller (`fxtrace start`) traces them.
    Daemon(service::DaemonArgs),
    /// List the providers registered with the trace service (no session needed).
    Providers(service::ListArgs),
    /// List the categories the trace service's providers declared (no session needed).
    Categories(service::ListArgs),
    /// Start a session of the trace service: trace the running programs registered with it.
    Start(service::StartArgs),
    /// Stop a session of the trace service and write its trace.
    Stop(service::StopArgs),
    /// End a session of the trace service (its providers go back to idle).
    Terminate(service::TerminateArgs),
}

/// Why a subcommand failed. Each message names the file and the problem.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// The input could not be opened or read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The input as given on the command line.
        path: String,
        /// The cause.
        source: io::Error,
    },
    /// The input is not a trace, or decoding stopped at a damaged record.
    #[error("{path}: {source}")]
    Decode {
        /// The input as given on the command line.
        path: String,
        /// Where and why decoding stopped.
        source: DecodeError,
    },
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(io::Error),
    /// `import-xray` failed, or converted a log only up to a malformed record.
    #[error(transparent)]
    ImportXray(#[from] import_xray::ImportXrayError),
    /// `import-perf` failed, or converted a perf.data only up to its damage.
    #[error(transparent)]
    ImportPerf(#[from] import_perf::ImportPerfError),
    /// `fxtrace record` failed.
    #[error(transparent)]
    Record(#[from] record::RecordCliError),
    /// `status` found no session, or could not print.
    #[error(transparent)]
    Status(#[from] status::StatusError),
    /// A trace service command failed.
    #[error(transparent)]
    Service(#[from] service::ServiceCliError),
}

/// Runs the chosen subcommand.
pub(crate) fn run(cli: Cli) -> Result<ExitCode, CliError> {
    if !matches!(
        cli.command,
        Command::Record(_) | Command::Daemon(_) | Command::Start(_)
    ) {
        die_on_closed_pipe();
    }
    match cli.command {
        Command::Dump(args) => dump::run(&args),
        Command::Stats(args) => stats::run(&args),
        Command::ImportXray(args) => import_xray::run(&args),
        Command::ImportPerf(args) => import_perf::run(&args),
        Command::Convert(args) => convert::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Record(args) => Ok(record::run(args)?),
        Command::Status(args) => Ok(status::run(&args)?),
        Command::Check(args) => check::run(&args),
        Command::Daemon(args) => Ok(service::daemon(&args)?),
        Command::Providers(args) => Ok(service::providers(&args)?),
        Command::Categories(args) => Ok(service::categories(&args)?),
        Command::Start(args) => Ok(service::start(&args)?),
        Command::Stop(args) => Ok(service::stop(&args)?),
        Command::Terminate(args) => Ok(service::terminate(&args)?),
    }
}

/// A reader whose standard output or error is a closed pipe (`fxtrace dump t.fxt | head`)
/// ends as `cat` does: killed by SIGPIPE, silently, instead of panicking in `println!`/
/// `eprintln!` (Rust ignores SIGPIPE by default, turning it into an `EPIPE` error). Not for
/// `record`, which must stop its command and write its archive whatever happens to its
/// terminal.
fn die_on_closed_pipe() {
    // SAFETY: setting SIGPIPE's disposition to the default is a plain sigaction call, done
    // before any thread is started; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

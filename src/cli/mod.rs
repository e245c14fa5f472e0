//! Command-line definitions (clap derives only) and dispatch to one module per subcommand.

mod convert;
mod dump;
mod import_xray;
mod input;
mod record;
mod report;
mod stats;

use std::io;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use fxtrace::format::DecodeError;

const EXAMPLES: &str = "\
EXAMPLES:
    fxtrace dump trace.fxt                one line per record
    fxtrace dump --json trace.fxt | jq .  one JSON object per record
    cat trace.fxt | fxtrace dump -        read standard input
    fxtrace stats trace.fxt               counts, providers, time span, damage
    fxtrace import-xray xray-log.app.Ab12Cd --instr-map ./app -o app.fxt";

/// Fuchsia tracing (FXT) on Linux.
#[derive(Debug, Parser)]
#[command(
    name = "fxtrace",
    version,
    about = "Fuchsia tracing (FXT) on Linux: read and inspect FXT traces",
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
    /// Convert a trace to another format: `--to chrome-json` (chrome://tracing, Perfetto).
    Convert(convert::ConvertArgs),
    /// Print a report of a trace: `lbr`, the hottest branch edges of its LBR samples.
    Report(report::ReportArgs),
    /// Record a trace: with --system-wide, the context switches (and LBR) of every CPU.
    Record(record::RecordArgs),
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
    /// `fxtrace record` failed.
    #[error(transparent)]
    Record(#[from] record::RecordCliError),
}

/// Runs the chosen subcommand.
pub(crate) fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Dump(args) => dump::run(&args),
        Command::Stats(args) => stats::run(&args),
        Command::ImportXray(args) => import_xray::run(&args),
        Command::Convert(args) => convert::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Record(args) => Ok(record::run(args)?),
    }
}

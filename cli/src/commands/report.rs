//! `fxtrace report`: human-readable reports of a trace (`lbr`: the hottest branch edges).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use fxtrace_tools::report::{
    write_lbr_text, BinarySpec, Breakdown, LbrReport, LbrTextOptions, SymbolizeError, Symbolizer,
};

use super::input;
use super::CliError;

/// Arguments of `fxtrace report`.
#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    #[command(subcommand)]
    kind: ReportKind,
}

#[derive(Debug, Subcommand)]
enum ReportKind {
    /// The hottest branch edges of the trace's last-branch-record (LBR) samples: count,
    /// mispredict rate, average cycles, overall and per CPU or thread, symbolized through the
    /// mappings the trace recorded and the binaries given.
    Lbr(LbrArgs),
}

/// Arguments of `fxtrace report lbr`.
#[derive(Debug, Args)]
struct LbrArgs {
    /// The trace to read (`-` for standard input).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// An ELF binary to name addresses with, overriding the trace's own mappings (traces
    /// recorded by fxtrace name their executables and libraries themselves); `PATH@0xBASE`
    /// for a position-independent one loaded at BASE (the start of its first mapping in
    /// /proc/PID/maps). Repeatable.
    #[arg(long = "binary", value_name = "PATH[@0xBASE]")]
    binaries: Vec<BinarySpec>,
    /// Edges shown per table.
    #[arg(long, value_name = "N", default_value_t = 20)]
    top: usize,
    /// One table per thread after the overall one.
    #[arg(long, conflicts_with = "per_cpu")]
    per_thread: bool,
    /// One table per CPU after the overall one.
    #[arg(long)]
    per_cpu: bool,
}

/// Runs a report.
pub(crate) fn run(args: &ReportArgs) -> Result<ExitCode, CliError> {
    match &args.kind {
        ReportKind::Lbr(args) => lbr(args),
    }
}

fn lbr(args: &LbrArgs) -> Result<ExitCode, CliError> {
    let mut symbols = Symbolizer::new();
    for spec in &args.binaries {
        symbols.add(spec).map_err(|e| {
            let source = match e {
                SymbolizeError::Read { source, .. } => source,
                SymbolizeError::Parse { source, .. } => io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("not a readable ELF file: {source}"),
                ),
                other => io::Error::other(other.to_string()),
            };
            CliError::Read {
                path: spec.path.display().to_string(),
                source,
            }
        })?;
    }
    let mut input = input::open(&args.file)?;
    let read = LbrReport::read_input(&mut input)?;
    // The trace's own mappings name what the binaries given by hand do not cover.
    symbols.load_mappings(read.report.used_mappings());
    let options = LbrTextOptions {
        top: args.top,
        breakdown: if args.per_thread {
            Breakdown::PerThread
        } else if args.per_cpu {
            Breakdown::PerCpu
        } else {
            Breakdown::Overall
        },
    };
    // An input error comes first, before any report line: alone when nothing of the trace
    // could be read, else followed by the report of what came before it.
    let damaged = read.decode_error.is_some();
    if let Some(source) = read.decode_error {
        let error = CliError::Decode {
            path: input.name().to_owned(),
            source,
        };
        if read.report.overall().samples() == 0 {
            return Err(error);
        }
        note!("{error}");
        note!("(the report below covers the records before that point)");
    }
    if let Some(line) = read.skipped.summary() {
        note!("{}: {line}", input.name());
    }
    let mut out = io::stdout().lock();
    write_lbr_text(&mut out, &read.report, &symbols, &options)
        .and_then(|()| out.flush())
        .map_err(CliError::Output)?;
    Ok(if damaged {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

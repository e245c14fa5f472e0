//! `fxtrace check [--perfetto] TRACE.fxt`: what Perfetto's FXT importer would make of a trace.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use fxtrace_tools::check::perfetto::{
    check_for_perfetto, PerfettoCheckError, PerfettoReport, Severity,
};

use fxtrace_tools::read::Source;

use super::input;
use super::CliError;

/// Arguments of `fxtrace check`.
#[derive(Debug, Args)]
#[command(after_help = "\
Prints one line per finding (errors, then warnings, then notes) with the byte offset of the \
first record concerned, and a summary. Errors: Perfetto stops, drops or misreads data. \
Warnings: shown but misattributed, version-dependent, or a drop Perfetto hides. Notes: \
skipped by design (LBR blobs, logs, blob arguments).

Exit status: 0 when there are notes at most, 1 on any warning or error (or when the trace \
cannot be read). docs/perfetto.md cites Perfetto's source for every check.")]
pub(crate) struct CheckArgs {
    /// Check against Perfetto's FXT importer (ui.perfetto.dev, trace_processor); the default
    /// and, for now, the only check.
    #[arg(long)]
    perfetto: bool,
    /// The trace to check (`-` for standard input).
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

/// Checks the trace and prints the report; fails (exit 1) on warnings and errors.
pub(crate) fn run(args: &CheckArgs) -> Result<ExitCode, CliError> {
    // `--perfetto` names the only check there is: with or without it, the same check runs.
    let _perfetto_is_the_default = args.perfetto;
    let mut input = input::open(&args.file)?;
    let name = input.name().to_owned();
    let read_error = |e: PerfettoCheckError| CliError::Read {
        path: name.clone(),
        source: match e {
            PerfettoCheckError::Read { offset, source } => {
                io::Error::new(source.kind(), format!("at byte {offset}: {source}"))
            }
        },
    };
    // Perfetto's importer frames records its own way (`check_for_perfetto` reads them as it
    // does): the input is handed over as a stream, a mapped file included.
    let report = match input.source() {
        Source::Mapped(Some(map)) => check_for_perfetto(map.reader()),
        Source::Mapped(None) => check_for_perfetto(io::empty()),
        Source::Stream(reader) | Source::Spooled(reader, _) => check_for_perfetto(reader),
    }
    .map_err(read_error)?;
    print(&mut io::stdout().lock(), &name, &report).map_err(CliError::Output)?;
    Ok(if report.has_violations() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print(out: &mut impl Write, name: &str, report: &PerfettoReport) -> io::Result<()> {
    writeln!(out, "file: {name}")?;
    writeln!(out, "{report}")?;
    let verdict = match report.worst() {
        None => "ok: Perfetto imports everything in this trace",
        Some(Severity::Note) => {
            "ok: Perfetto imports this trace (the notes list what it skips by design)"
        }
        Some(Severity::Warning) => {
            "warnings: Perfetto imports this trace, but shows some of it wrongly or hides a drop"
        }
        Some(Severity::Error) => "errors: Perfetto stops, drops or misreads part of this trace",
    };
    writeln!(out, "status: {verdict}")
}

//! `fxtrace report`: human-readable reports of a trace (`lbr`: the hottest branch edges;
//! `samples`: where the CPU time went; `waits`: where threads blocked, and who woke them).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use fxtrace_format::{DecodeError, SkipCounts};

use fxtrace_tools::report::{
    write_lbr_text, write_samples_text, write_waits_text, BinarySpec, Breakdown, LbrReport,
    LbrTextOptions, StackReport, StackTextOptions, SymbolizeError, Symbolizer,
};

use super::convert::{input_name, open_input};
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
    /// Where the CPU time went: the hottest call stacks of the CPU samples (`fxtrace record
    /// -a --sample`), overall or of one thread; `--folded` for flame graphs.
    Samples(StackArgs),
    /// Where threads blocked: the wait points (`fxtrace record -a --wait-points`) by time
    /// blocked, each with the threads that woke them; `--folded` for off-CPU flame graphs.
    Waits(StackArgs),
}

/// Arguments of `fxtrace report samples` and `fxtrace report waits`.
#[derive(Debug, Args)]
struct StackArgs {
    /// The trace to read (`-` for standard input).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Only this thread (its tid).
    #[arg(long, value_name = "TID")]
    thread: Option<u64>,
    /// Rows shown.
    #[arg(long, value_name = "N", default_value_t = 20)]
    top: usize,
    /// One line per stack and thread, `thread;outermost;…;innermost COUNT` (samples, or
    /// microseconds blocked), the input of flamegraph.pl and speedscope.
    #[arg(long)]
    folded: bool,
    /// An ELF binary to name user addresses with, overriding the trace's own mappings;
    /// `PATH@0xBASE` for a position-independent one. Repeatable.
    #[arg(long = "binary", value_name = "PATH[@0xBASE]")]
    binaries: Vec<BinarySpec>,
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
        ReportKind::Samples(args) => stacks(args, write_samples_text),
        ReportKind::Waits(args) => stacks(args, write_waits_text),
    }
}

/// A symbolizer with the binaries given by hand.
fn symbolizer(binaries: &[BinarySpec]) -> Result<Symbolizer, CliError> {
    let mut symbols = Symbolizer::new();
    for spec in binaries {
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
    Ok(symbols)
}

type StackText = fn(&mut dyn Write, &StackReport, &Symbolizer, &StackTextOptions) -> io::Result<()>;

fn stacks(args: &StackArgs, write: StackText) -> Result<ExitCode, CliError> {
    let mut symbols = symbolizer(&args.binaries)?;
    let read = StackReport::read(open_input(&args.file)?);
    symbols.load_mappings(read.report.used_mappings());
    let report = &read.report;
    let nothing = report.sample_count() == 0 && report.waits().is_empty();
    let damaged = input_notes(&args.file, read.decode_error, nothing, &read.skipped)?;
    let (invalid, unknown) = (report.invalid_payloads(), report.unknown_stacks());
    if invalid > 0 || unknown > 0 {
        eprintln!(
            "{}: {invalid} stack, sample or symbol payload(s) did not decode; {unknown} \
             reference(s) to a stack the trace does not define",
            input_name(&args.file)
        );
    }
    let options = StackTextOptions {
        top: args.top,
        thread: args.thread,
        folded: args.folded,
    };
    print(damaged, |out| write(out, report, &symbols, &options))
}

/// Says what went wrong with the input before any report line: a decode error alone (as the
/// error) when `nothing` of the trace could be read, else on standard error followed by the
/// report of what came before it; then the records the decoder skipped. Returns whether the
/// input was damaged.
fn input_notes(
    file: &Path,
    decode_error: Option<DecodeError>,
    nothing: bool,
    skipped: &SkipCounts,
) -> Result<bool, CliError> {
    let damaged = decode_error.is_some();
    if let Some(source) = decode_error {
        let error = CliError::Decode {
            path: input_name(file),
            source,
        };
        if nothing {
            return Err(error);
        }
        eprintln!("{error}");
        eprintln!("(the report below covers the records before that point)");
    }
    if let Some(line) = skipped.summary() {
        eprintln!("{}: {line}", input_name(file));
    }
    Ok(damaged)
}

/// Writes a report to standard output; fails the command when the input was `damaged`.
fn print(
    damaged: bool,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<ExitCode, CliError> {
    let mut out = io::stdout().lock();
    write(&mut out)
        .and_then(|()| out.flush())
        .map_err(CliError::Output)?;
    Ok(if damaged {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn lbr(args: &LbrArgs) -> Result<ExitCode, CliError> {
    let mut symbols = symbolizer(&args.binaries)?;
    let read = LbrReport::read(open_input(&args.file)?);
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
    let nothing = read.report.overall().samples() == 0;
    let damaged = input_notes(&args.file, read.decode_error, nothing, &read.skipped)?;
    print(damaged, |mut out| {
        write_lbr_text(&mut out, &read.report, &symbols, &options)
    })
}

//! `fxtrace report`: human-readable reports of a trace (`spans`: where spans spent their
//! time and why the slowest were slow; `sched`: what the scheduler did to each thread; `lbr`:
//! the hottest branch edges; `samples`: where the CPU time went; `waits`: where threads
//! blocked, and who woke them).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use fxtrace_tools::read::filter::{Glob, RelativeTime};
use fxtrace_tools::report::sched::{SchedOptions, SchedReport};
use fxtrace_tools::report::spans::{SpansOptions, SpansReport, Style};
use fxtrace_tools::report::{
    write_lbr_text, write_samples_text, write_waits_text, BinarySpec, Breakdown, LbrReport,
    LbrTextOptions, StackReport, StackTextOptions, SymbolizeError, Symbolizer,
};

use super::input::{self, notes};
use super::CliError;

const EXAMPLES: &str = "\
EXAMPLES:
    fxtrace report spans trace.fxt                 per-name table, the 10 slowest spans
    fxtrace report spans trace.fxt --top 3 --wall  the 3 slowest, with wall-clock times
    fxtrace report spans trace.fxt --name 'batch*' --min-duration 10ms --json
    fxtrace report sched trace.fxt                 threads on and off the CPUs, stalls
    fxtrace report sched trace.fxt --pid 4242 --top 5
    fxtrace report waits trace.fxt                 where threads blocked, who woke them
    fxtrace report samples trace.fxt --folded      CPU samples for a flame graph
    fxtrace report lbr trace.fxt --per-thread      the hottest branch edges

Record with -a (system-wide) for the context switches and wake-ups that `spans` splits a
span's time with and that `sched` reads, and --wait-points for where threads slept:
`sudo fxtrace record -a --wait-points -- ./server`.";

/// Arguments of `fxtrace report`.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub(crate) struct ReportArgs {
    #[command(subcommand)]
    kind: ReportKind,
}

#[derive(Debug, Subcommand)]
enum ReportKind {
    /// Where spans spent their time: per name count, total, self, p50, p99, max; the slowest
    /// spans with their arguments, thread, children, and (with context switches in the
    /// trace) their time on CPU, runnable, sleeping and in D, who ran instead and who woke
    /// them.
    Spans(SpansArgs),
    /// What the scheduler did to each thread: time on CPU, time off it by state (runnable,
    /// sleeping, D) with p50/p99/max, runqueue latency; the longest times off CPU with their
    /// wait point, waker and what ran meanwhile; stalls (threads of one process asleep at
    /// once, with the sibling that ran or woke them).
    Sched(SchedArgs),
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

/// Arguments of `fxtrace report spans`.
#[derive(Debug, Args)]
#[command(after_help = "\
Times are relative to the trace's first timestamp; --wall adds the wall-clock time (UTC) the \
trace's anchor gives. A span's time is split only where the trace has its thread's context \
switches (record with -a). Exit status 1 when the trace is damaged (the report covers the \
records before the damage).")]
struct SpansArgs {
    /// The trace to read (`-` for standard input, saved to a temporary file: it is read twice).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Slowest spans shown in detail.
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,
    /// Only spans whose name matches (`*` and `?` wildcards). Repeatable.
    #[arg(long, value_name = "GLOB")]
    name: Vec<String>,
    /// Only spans of this process. Repeatable.
    #[arg(long, value_name = "PID")]
    pid: Vec<u64>,
    /// Only spans of this thread. Repeatable.
    #[arg(long, value_name = "TID")]
    tid: Vec<u64>,
    /// Only spans at least this long (`10ms`, `250us`, `1.5` seconds).
    #[arg(long, value_name = "TIME")]
    min_duration: Option<RelativeTime>,
    /// Show wall-clock times too.
    #[arg(long)]
    wall: bool,
    /// One JSON object per line (table rows, slow spans, notes), for scripts.
    #[arg(long)]
    json: bool,
}

/// Arguments of `fxtrace report sched`.
#[derive(Debug, Args)]
#[command(after_help = "\
Reads the trace's context switches and wake-ups (record with -a). Runnable is time preempted \
or woken and waiting for a CPU; sleeping is time blocked until woken; D is an uninterruptible \
sleep. A stall is a moment when two or more threads of one process slept at once (each for at \
least --min-stall): the report names the process's threads that ran meanwhile and those that \
woke the sleepers, the usual signature of a lock held too long. Exit status 1 when the trace \
is damaged (the report covers the records before the damage).")]
struct SchedArgs {
    /// The trace to read (`-` for standard input, saved to a temporary file: it is read twice).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Longest times off CPU, and stalls, shown.
    #[arg(long, value_name = "N", default_value_t = 10)]
    top: usize,
    /// Only threads of this process. Repeatable.
    #[arg(long, value_name = "PID")]
    pid: Vec<u64>,
    /// Only threads whose name, or whose process's name, matches (`*`, `?`). Repeatable.
    #[arg(long, value_name = "GLOB")]
    comm: Vec<String>,
    /// Only what happened on this CPU. Repeatable.
    #[arg(long, value_name = "CPU")]
    cpu: Vec<u16>,
    /// Shortest sleep that takes part in a stall.
    #[arg(long, value_name = "TIME", default_value = "10ms")]
    min_stall: RelativeTime,
    /// Show wall-clock times too.
    #[arg(long)]
    wall: bool,
    /// One JSON object per line (threads, intervals, stalls, notes), for scripts.
    #[arg(long)]
    json: bool,
}

/// Runs a report.
pub(crate) fn run(args: &ReportArgs) -> Result<ExitCode, CliError> {
    match &args.kind {
        ReportKind::Spans(args) => spans(args),
        ReportKind::Sched(args) => sched(args),
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
    let mut input = input::open(&args.file)?;
    let read = StackReport::read_input(&mut input)?;
    symbols.load_mappings(read.report.used_mappings());
    let report = &read.report;
    let nothing = report.sample_count() == 0 && report.waits().is_empty();
    let damaged = notes(input.name(), read.decode_error, nothing, &read.skipped)?;
    let (invalid, unknown) = (report.invalid_payloads(), report.unknown_stacks());
    if invalid > 0 || unknown > 0 {
        note!(
            "{}: {invalid} stack, sample or symbol payload(s) did not decode; {unknown} \
             reference(s) to a stack the trace does not define",
            input.name()
        );
    }
    let not_kept = report.not_kept();
    if not_kept > 0 {
        note!(
            "{}: {not_kept} stack(s), kernel symbol(s), waker(s) or (stack, thread) total(s) \
             beyond the reader's bounds not counted (a crafted trace, or one of more than \
             {} stacks or threads)",
            input.name(),
            fxtrace_tools::report::stacks::MAX_PAIRS
        );
    }
    let options = StackTextOptions {
        top: args.top,
        thread: args.thread,
        folded: args.folded,
    };
    input::print(damaged, |out| write(out, report, &symbols, &options))
}

fn spans(args: &SpansArgs) -> Result<ExitCode, CliError> {
    let options = SpansOptions {
        top: args.top,
        names: args.name.iter().map(|g| Glob::new(g)).collect(),
        pids: args.pid.clone(),
        tids: args.tid.clone(),
        min_duration_ns: args.min_duration.map_or(0, |d| d.0),
    };
    let mut input = input::open_rereadable(&args.file)?;
    let mut report = SpansReport::read(&mut input, &options)?;
    let nothing = report.spans == 0 && report.unclosed == 0;
    let (error, skipped) = (report.outcome.error.take(), report.outcome.skipped);
    let damaged = notes(input.name(), error, nothing, &skipped)?;
    let style = Style { wall: args.wall };
    print_report(
        input.name(),
        damaged,
        args.json,
        |out| report.write_json(out, style),
        |out| report.write_text(out, style),
    )
}

fn sched(args: &SchedArgs) -> Result<ExitCode, CliError> {
    let options = SchedOptions {
        top: args.top,
        pids: args.pid.clone(),
        comms: args.comm.iter().map(|g| Glob::new(g)).collect(),
        cpus: args.cpu.clone(),
        min_stall_ns: args.min_stall.0,
    };
    let mut input = input::open_rereadable(&args.file)?;
    let mut report = SchedReport::read(&mut input, &options)?;
    let nothing = report.switches == 0 && report.outcome.bytes_decoded == 0;
    let (error, skipped) = (report.outcome.error.take(), report.outcome.skipped);
    let damaged = notes(input.name(), error, nothing, &skipped)?;
    let style = Style { wall: args.wall };
    print_report(
        input.name(),
        damaged,
        args.json,
        |out| report.write_json(out, style),
        |out| report.write_text(out, style),
    )
}

/// A report's output: JSON lines, or the text after the file's name; the exit code says
/// whether the input was damaged.
fn print_report(
    name: &str,
    damaged: bool,
    json: bool,
    write_json: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    write_text: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<ExitCode, CliError> {
    input::print(damaged, |out| {
        if json {
            write_json(out)
        } else {
            writeln!(out, "file: {name}")?;
            write_text(out)
        }
    })
}

fn lbr(args: &LbrArgs) -> Result<ExitCode, CliError> {
    let mut symbols = symbolizer(&args.binaries)?;
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
    let nothing = read.report.overall().samples() == 0;
    let damaged = notes(input.name(), read.decode_error, nothing, &read.skipped)?;
    input::print(damaged, |mut out| {
        write_lbr_text(&mut out, &read.report, &symbols, &options)
    })
}

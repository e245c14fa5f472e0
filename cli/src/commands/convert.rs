//! `fxtrace convert`: FXT to other formats (Chrome trace-event JSON).

use std::io::{self, BufWriter, Write};

use fxtrace_tools::output_file::OutputFile;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use fxtrace_tools::convert::chrome;
use fxtrace_tools::read::Outcome;

use super::input;
use super::CliError;

/// Output formats of `fxtrace convert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Chrome trace-event JSON (chrome://tracing, Perfetto, speedscope).
    ChromeJson,
}

/// Arguments of `fxtrace convert`.
#[derive(Debug, Args)]
pub(crate) struct ConvertArgs {
    /// The output format.
    #[arg(long = "to", value_enum, value_name = "FORMAT")]
    to: Format,
    /// The trace to read (`-` for standard input).
    #[arg(value_name = "FILE")]
    input: PathBuf,
    /// Where to write (`-` for standard output).
    #[arg(short, long, value_name = "OUT")]
    output: PathBuf,
}

/// Converts; prints every repair and drop on standard error. A damaged input still yields
/// complete JSON of its well-formed part, and a failure status; an input that is not FXT
/// leaves no output file. The output is written under a temporary name and renamed into
/// place at the end; a previous one is kept as `OUT.old`.
pub(crate) fn run(args: &ConvertArgs) -> Result<ExitCode, CliError> {
    let Format::ChromeJson = args.to;
    let mut input = input::open(&args.input)?;
    let output_error = |e: io::Error| {
        CliError::Output(io::Error::new(
            e.kind(),
            format!("{}: {e}", args.output.display()),
        ))
    };
    let mut file = if args.output.as_os_str() == "-" {
        None
    } else {
        Some(OutputFile::create(&args.output).map_err(output_error)?)
    };
    let output: Box<dyn Write + '_> = match &file {
        Some(f) => Box::new(BufWriter::with_capacity(1 << 16, f.file())),
        None => Box::new(BufWriter::new(io::stdout().lock())),
    };
    let done = chrome::convert_input(&mut input, output)
        .map_err(|chrome::ChromeError::Write(e)| output_error(e))?;
    if done.bytes_decoded == 0 {
        if let Some(e) = done.decode_error {
            // Not FXT at all: nothing worth keeping (the temporary file goes with `file`).
            return Err(CliError::Decode {
                path: input.name().to_owned(),
                source: e,
            });
        }
    }
    if let Some(f) = file.as_mut() {
        f.commit().map_err(output_error)?;
    }
    for line in done.stats.warnings() {
        note!("fxtrace convert: {line}");
    }
    input::finish(Outcome {
        name: input.name().to_owned(),
        bytes_read: done.bytes_decoded,
        bytes_decoded: done.bytes_decoded,
        skipped: done.skipped,
        error: done.decode_error,
    })
}

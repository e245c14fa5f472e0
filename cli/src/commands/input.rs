//! Reading a trace given on the command line through the pipeline (`fxtrace_tools::read`),
//! and the one rule every reader ends with: what was read is reported, the damage is named on
//! standard error, and the command fails (exit 1). A reader that writes as it reads (`dump`,
//! `stats`, `convert`) names the damage after its output ([`finish`]); a report, which prints
//! once it has read everything, names it first ([`notes`], then [`print`]).

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use fxtrace_format::{DecodeError, SkipCounts};
use fxtrace_tools::read::{self, Analysis, Input, OpenError, Outcome, ReadError};

use super::CliError;

impl From<OpenError> for CliError {
    fn from(e: OpenError) -> Self {
        CliError::Read {
            path: e.name,
            source: e.source,
        }
    }
}

impl From<ReadError> for CliError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Open(e) => e.into(),
            ReadError::Output(e) => CliError::Output(e),
        }
    }
}

/// Opens `arg` (`-`: standard input).
pub(crate) fn open(arg: &Path) -> Result<Input, CliError> {
    read::name_bus_errors();
    Ok(Input::open(arg)?)
}

/// Opens `arg` for a reader that reads it twice (a stream is saved to a temporary file).
pub(crate) fn open_rereadable(arg: &Path) -> Result<Input, CliError> {
    read::name_bus_errors();
    Ok(Input::open_rereadable(arg)?)
}

/// Reads all of `input` into `analysis`.
pub(crate) fn read_all(
    input: &mut Input,
    analysis: &mut impl Analysis,
) -> Result<Outcome, CliError> {
    Ok(read::read(input, analysis)?)
}

/// The end of every reader, once its report is written: what was skipped on standard error,
/// then the damage (exit 1, the message naming the input and the offset), else success.
pub(crate) fn finish(outcome: Outcome) -> Result<ExitCode, CliError> {
    if let Some(line) = outcome.skipped.summary() {
        note!("{}: {line}", outcome.name);
    }
    match outcome.error {
        Some(source) => Err(CliError::Decode {
            path: outcome.name,
            source,
        }),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// The rule for a report that prints after it has read its input: what went wrong with the
/// input first, on standard error (a decode error alone, as the error, when `nothing` of the
/// trace could be read; else the error and that the report covers the records before it),
/// then what the decoder skipped. Returns whether the input was damaged (the command then
/// fails, exit 1, after its report: [`print`]).
pub(crate) fn notes(
    name: &str,
    decode_error: Option<DecodeError>,
    nothing: bool,
    skipped: &SkipCounts,
) -> Result<bool, CliError> {
    let damaged = decode_error.is_some();
    if let Some(source) = decode_error {
        let error = CliError::Decode {
            path: name.to_owned(),
            source,
        };
        if nothing {
            return Err(error);
        }
        note!("{error}");
        note!("(the report below covers the records before that point)");
    }
    if let Some(line) = skipped.summary() {
        note!("{name}: {line}");
    }
    Ok(damaged)
}

/// Writes a report to standard output; fails the command when the input was `damaged`.
pub(crate) fn print(
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

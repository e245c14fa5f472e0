//! Reading a trace given on the command line through the pipeline (`fxtrace_tools::read`),
//! and the one rule every reader ends with.

use std::path::Path;
use std::process::ExitCode;

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
    Ok(Input::open(arg)?)
}

/// Opens `arg` for a reader that reads it twice (a stream is saved to a temporary file).
pub(crate) fn open_rereadable(arg: &Path) -> Result<Input, CliError> {
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

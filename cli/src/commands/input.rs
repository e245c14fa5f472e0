//! Opening a trace given on the command line (a path, or `-` for standard input) and
//! decoding it record by record.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use fxtrace::format::{DecodeError, Decoded, Decoder, SkipCounts, StreamDecoder};

use super::CliError;

/// Where a trace comes from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A file, read whole and decoded without copying.
    File(PathBuf),
    /// Standard input, decoded as a stream.
    Stdin,
}

impl Source {
    /// `-` means standard input.
    pub(crate) fn from_arg(arg: &Path) -> Source {
        if arg.as_os_str() == "-" {
            Source::Stdin
        } else {
            Source::File(arg.to_path_buf())
        }
    }

    /// The name used in messages.
    pub(crate) fn name(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Stdin => "<stdin>".to_string(),
        }
    }
}

/// How decoding a whole input went.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Bytes read from the input.
    pub(crate) bytes_read: u64,
    /// Bytes consumed by well-formed records.
    pub(crate) bytes_decoded: u64,
    /// Records and arguments skipped.
    pub(crate) skipped: SkipCounts,
    /// Where decoding stopped, if it did not reach a clean end.
    pub(crate) error: Option<DecodeError>,
}

/// Counts the bytes that pass through.
struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// Decodes `source`, calling `each` for every record; stops at the first decode error
/// (returned in the outcome) or output error (returned as `CliError::Output`).
pub(crate) fn decode_each(
    source: &Source,
    mut each: impl FnMut(&Decoded<'_>) -> io::Result<()>,
) -> Result<Outcome, CliError> {
    match source {
        Source::File(path) => {
            let bytes = std::fs::read(path).map_err(|e| CliError::Read {
                path: path.display().to_string(),
                source: e,
            })?;
            let mut decoder = Decoder::new(&bytes);
            let error = drive(&mut decoder, &mut each)?;
            Ok(Outcome {
                bytes_read: bytes.len() as u64,
                bytes_decoded: decoder.offset(),
                skipped: decoder.skipped(),
                error,
            })
        }
        Source::Stdin => {
            let stdin = io::stdin().lock();
            let mut decoder = StreamDecoder::new(Counting {
                inner: stdin,
                count: 0,
            });
            let error = drive(&mut decoder, &mut each)?;
            Ok(Outcome {
                bytes_read: decoder.get_ref().count,
                bytes_decoded: decoder.offset(),
                skipped: decoder.skipped(),
                error,
            })
        }
    }
}

fn drive<'a, I>(
    records: &mut I,
    each: &mut impl FnMut(&Decoded<'_>) -> io::Result<()>,
) -> Result<Option<DecodeError>, CliError>
where
    I: Iterator<Item = Result<Decoded<'a>, DecodeError>>,
{
    for item in records {
        match item {
            Ok(record) => each(&record).map_err(CliError::Output)?,
            Err(e) => return Ok(Some(e)),
        }
    }
    Ok(None)
}

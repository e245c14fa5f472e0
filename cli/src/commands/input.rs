//! Opening a trace given on the command line (a path, or `-` for standard input) and
//! decoding it record by record.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use fxtrace_format::{DecodeError, Decoded, SkipCounts, StreamDecoder};

use super::CliError;

/// Where a trace comes from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A file (or FIFO, or device), read as a stream.
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
    /// Bytes in the input: a regular file's size, else the bytes read.
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

/// Decodes `source` as a stream (a file, FIFO or device through a 64 KiB buffer, or standard
/// input), calling `each` for every record; stops at the first decode error (returned in the
/// outcome) or output error (returned as `CliError::Output`). Memory stays bounded by the
/// largest record and the decoder's tables, whatever the input's size; an input that is not
/// FXT is refused after its first word.
pub(crate) fn decode_each(
    source: &Source,
    mut each: impl FnMut(&Decoded<'_>) -> io::Result<()>,
) -> Result<Outcome, CliError> {
    // The size of a regular file, for the byte count after a damaged record; a FIFO or a
    // device is counted as read, never sized.
    let mut file_size = None;
    let reader: Box<dyn Read> = match source {
        Source::File(path) => {
            let file = std::fs::File::open(path).map_err(|e| CliError::Read {
                path: path.display().to_string(),
                source: e,
            })?;
            file_size = file
                .metadata()
                .ok()
                .filter(|m| m.file_type().is_file())
                .map(|m| m.len());
            Box::new(io::BufReader::with_capacity(1 << 16, file))
        }
        Source::Stdin => Box::new(io::stdin().lock()),
    };
    let mut decoder = StreamDecoder::new(Counting {
        inner: reader,
        count: 0,
    });
    let error = drive(&mut decoder, &mut each)?;
    Ok(Outcome {
        bytes_read: decoder.get_ref().count.max(file_size.unwrap_or(0)),
        bytes_decoded: decoder.offset(),
        skipped: decoder.skipped(),
        error,
    })
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

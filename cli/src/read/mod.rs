//! The reading pipeline every reader of the tools runs on: one input opener ([`Input`]: a
//! mapped file, standard input, a FIFO), one trait an analysis implements ([`Analysis`]),
//! one driver ([`read`]) that checks every record, decodes only those an analysis wants and
//! ends the same way for all at damage, and the pieces analyses share: the per-thread slice
//! stack that pairs duration begins with their ends ([`slices`]), the per-CPU switch state
//! ([`cpus`]) and each thread's time on and off the CPUs ([`timeline`]), a map bounded for
//! crafted input ([`bounded`]), durations in bounded memory ([`histogram`]), record filters
//! ([`filter`]) and the wall-clock anchor ([`wall`]).
//!
//! # Damage, empty input, exit status
//!
//! The driver stops at the first record that does not decode (framing, a field past the
//! record's end, an unknown string or thread index, …) and returns what came before it
//! together with the error ([`Outcome::error`]). Every reader follows one rule with it:
//! report what was read, then name the damage on standard error ("FILE: at byte offset N:
//! …"), and exit 1. An input that is not FXT at all (empty, or another first word) is the
//! same error at offset 0. A reader's own findings (`check`'s warnings) may also exit 1.
//!
//! # Memory and speed
//!
//! A mapped file is read without copying: records borrow the mapping, table strings are kept
//! once, argument lists reuse one allocation, and the pages read are given back every
//! [`RELEASE_EVERY`] bytes (resident memory stays bounded whatever the file's size). A
//! record an analysis does not want is checked but not decoded ([`Analysis::head`]).

pub mod bounded;
pub mod cpus;
pub mod filter;
pub mod histogram;
mod input;
pub mod names;
pub mod slices;
pub mod timeline;
pub mod wall;

use std::io::{self, Read, Write};

use fxtrace_format::{
    DecodeError, DecodeErrorKind, Decoded, Decoder, RecordHead, SkipCounts, StreamDecoder, Visitor,
};

pub use input::{input_name, name_bus_errors, Input, MappedReader, Mapping, OpenError, Source};

/// What a reader computes from a trace, record by record.
pub trait Analysis {
    /// Every record's head, checked: returns whether to decode the record and hand it to
    /// [`Analysis::add`] (by default every record is wanted). An analysis that counts
    /// records counts them here.
    fn head(&mut self, head: &RecordHead) -> bool {
        let _ = head;
        true
    }

    /// A record [`Analysis::head`] wanted, decoded. An error (a closed output) stops the
    /// reading.
    fn add(&mut self, head: &RecordHead, record: &Decoded<'_>) -> io::Result<()>;
}

/// How reading a whole input went.
#[derive(Debug)]
pub struct Outcome {
    /// The input's name in messages.
    pub name: String,
    /// Bytes in the input: a regular file's size, else the bytes read.
    pub bytes_read: u64,
    /// Bytes of well-formed records (where reading stopped).
    pub bytes_decoded: u64,
    /// Records and arguments skipped (unknown types), table entries not kept.
    pub skipped: SkipCounts,
    /// Where and why reading stopped before the end, if it did.
    pub error: Option<DecodeError>,
}

impl Outcome {
    /// Whether reading stopped at damage (or the input is not FXT).
    pub fn damaged(&self) -> bool {
        self.error.is_some()
    }

    /// Nothing of the input was FXT (empty, or another first word).
    pub fn not_fxt(&self) -> bool {
        self.error.as_ref().is_some_and(DecodeError::is_not_fxt)
    }
}

/// The trace's first timestamp, from the records' heads (what reports count times from):
/// the earliest ticks per tick rate, converted once at the end.
#[derive(Debug, Default)]
pub struct FirstTime {
    /// (ticks per second, earliest ticks), the last rate seen first.
    rates: Vec<(u64, u64)>,
}

impl FirstTime {
    /// Takes a record's time into account.
    #[inline]
    pub fn head(&mut self, head: &RecordHead) {
        let Some(ticks) = head.ticks else {
            return;
        };
        match self.rates.last_mut() {
            Some((rate, first)) if *rate == head.ticks_per_second => *first = (*first).min(ticks),
            _ => self.other_rate(head.ticks_per_second, ticks),
        }
    }

    #[cold]
    fn other_rate(&mut self, rate: u64, ticks: u64) {
        match self.rates.iter().position(|(r, _)| *r == rate) {
            Some(at) => {
                let (r, first) = self.rates.remove(at);
                self.rates.push((r, first.min(ticks)));
            }
            // A crafted trace of many rates: the oldest rate's earliest time is kept as ns.
            None => {
                if self.rates.len() >= 8 {
                    let (r, first) = self.rates.remove(0);
                    let ns = fxtrace_format::ticks_to_ns(first, r);
                    self.rates.insert(0, (1_000_000_000, ns));
                }
                self.rates.push((rate, ticks));
            }
        }
    }

    /// The earliest time seen, ns (0 when no record had one).
    pub fn ns(&self) -> u64 {
        self.rates
            .iter()
            .map(|&(rate, ticks)| fxtrace_format::ticks_to_ns(ticks, rate))
            .min()
            .unwrap_or(0)
    }
}

/// Bytes read (or table-string bytes referred to) between two give-backs of a mapping's
/// pages.
pub const RELEASE_EVERY: u64 = 8 << 20;

/// Why a reading stopped before the input did, other than damage.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The input could not be read (a stream's read error is damage, not this).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The analysis stopped the reading (its output failed).
    #[error("cannot write output: {0}")]
    Output(io::Error),
}

/// Reads `input` from its start: every record checked, those `analysis` wants decoded and
/// handed to it. A mapped input can be read again (a reader of two passes); a stream once.
pub fn read(input: &mut Input, analysis: &mut impl Analysis) -> Result<Outcome, ReadError> {
    read_input(input, analysis, false)
}

/// [`read`] for a second reading of an input a first one read whole: the records that change
/// no table are not checked again ([`Decoder::trusting`]), those decoded are.
pub fn read_again(input: &mut Input, analysis: &mut impl Analysis) -> Result<Outcome, ReadError> {
    read_input(input, analysis, true)
}

fn read_input(
    input: &mut Input,
    analysis: &mut impl Analysis,
    again: bool,
) -> Result<Outcome, ReadError> {
    let name = input.name().to_owned();
    match input.source() {
        Source::Mapped(None) => Ok(Outcome {
            name,
            bytes_read: 0,
            bytes_decoded: 0,
            skipped: SkipCounts::default(),
            error: Decoder::new(&[]).next().and_then(Result::err),
        }),
        Source::Mapped(Some(map)) => read_mapped(name, map, analysis, again),
        Source::Stream(reader) => read_stream(name, reader, analysis),
        Source::Spooled(reader, spool) => {
            let mut tee = Tee {
                reader,
                copy: io::BufWriter::with_capacity(1 << 16, spool),
            };
            let outcome = read_stream(name, &mut tee, analysis)?;
            tee.copy.flush().map_err(|source| OpenError {
                name: outcome.name.clone(),
                source,
            })?;
            drop(tee);
            input.spooled()?;
            Ok(outcome)
        }
    }
}

/// A reader that writes what it reads to `copy`.
struct Tee<'r, W: Write> {
    reader: &'r mut Box<dyn Read>,
    copy: W,
}

impl<W: Write> Read for Tee<'_, W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.reader.read(buf)?;
        self.copy.write_all(&buf[..n])?;
        Ok(n)
    }
}

fn read_mapped(
    name: String,
    map: &Mapping,
    analysis: &mut impl Analysis,
    again: bool,
) -> Result<Outcome, ReadError> {
    let bytes = map.bytes();
    let mut decoder = if again {
        Decoder::trusting(bytes)
    } else {
        Decoder::new(bytes)
    };
    // A file that shrank since it was mapped raises SIGBUS on the pages it lost: its length
    // is checked before the first part and each next one, and reading stops there as damage.
    let shrank = |e: io::Error, offset: u64| DecodeError {
        offset,
        kind: DecodeErrorKind::Io(e),
    };
    if let Err(e) = map.check_length() {
        return Ok(Outcome {
            name,
            bytes_read: bytes.len() as u64,
            bytes_decoded: 0,
            skipped: SkipCounts::default(),
            error: Some(shrank(e, 0)),
        });
    }
    let mut error = None;
    let (mut release_at, mut release_resolved) = (RELEASE_EVERY, RELEASE_EVERY);
    while let Some(head) = decoder.next_head() {
        let head = match head {
            Ok(head) => head,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        if analysis.head(&head) {
            match decoder.decode_current() {
                Some(Ok(record)) => analysis.add(&head, &record).map_err(ReadError::Output)?,
                Some(Err(e)) => {
                    error = Some(e);
                    break;
                }
                None => {}
            }
        }
        let (at, resolved) = (decoder.offset(), decoder.table_bytes_resolved());
        if at >= release_at || resolved >= release_resolved {
            map.release_before(at as usize);
            release_at = at + RELEASE_EVERY;
            release_resolved = resolved + RELEASE_EVERY;
            if let Err(e) = map.check_length() {
                error = Some(shrank(e, at));
                break;
            }
        }
    }
    map.release_before(bytes.len());
    Ok(Outcome {
        name,
        bytes_read: bytes.len() as u64,
        bytes_decoded: decoder.offset(),
        skipped: decoder.skipped(),
        error,
    })
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

/// An [`Analysis`] as the streaming decoder's visitor.
struct Visiting<'v, A>(&'v mut A);

impl<A: Analysis> Visitor for Visiting<'_, A> {
    type Error = io::Error;

    fn head(&mut self, head: &RecordHead) -> bool {
        self.0.head(head)
    }

    fn record(&mut self, head: &RecordHead, record: &Decoded<'_>) -> io::Result<()> {
        self.0.add(head, record)
    }
}

/// Reads the stream `reader` (named `name` in messages) into `analysis`: what [`read`] does
/// with a stream [`Input`], for a reader already open (a test's bytes).
pub fn read_stream(
    name: String,
    reader: &mut dyn Read,
    analysis: &mut impl Analysis,
) -> Result<Outcome, ReadError> {
    let mut decoder = StreamDecoder::new(Counting {
        inner: reader,
        count: 0,
    });
    let error = decoder
        .visit(&mut Visiting(analysis))
        .map_err(ReadError::Output)?;
    Ok(Outcome {
        name,
        bytes_read: decoder.get_ref().count,
        bytes_decoded: decoder.offset(),
        skipped: decoder.skipped(),
        error,
    })
}

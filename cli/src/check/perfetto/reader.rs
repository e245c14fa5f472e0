//! Reading the input as Perfetto's importer does: one record at a time ([`Input`]), a word
//! cursor over a record's bytes ([`Cursor`]).

use std::io::{self, Read};

use super::findings::*;

/// Why a record was given up on (the finding is already recorded).
#[derive(Debug)]
pub(super) struct Dropped;

/// A record's bytes with a word cursor, as Perfetto's `RecordCursor`.
#[derive(Debug)]
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    /// Position in words.
    pub(super) word: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, word: 1 }
    }

    pub(super) fn header(&self) -> u64 {
        self.word_at(0).unwrap_or(0)
    }

    pub(super) fn words(&self) -> usize {
        self.bytes.len() / 8
    }

    pub(super) fn word_at(&self, index: usize) -> Option<u64> {
        let at = index.checked_mul(8)?;
        let w = self.bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_ne_bytes([
            w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
        ]))
    }

    pub(super) fn word(&mut self) -> Option<u64> {
        let w = self.word_at(self.word)?;
        self.word += 1;
        Some(w)
    }

    /// `len` bytes padded to whole words.
    pub(super) fn stream(&mut self, len: usize) -> Option<&'a [u8]> {
        let start = self.word.checked_mul(8)?;
        let padded = len.div_ceil(8);
        if self.word.checked_add(padded)? > self.words() {
            return None;
        }
        self.word += padded;
        self.bytes.get(start..start + len)
    }
}

/// Reads the input, counting bytes.
pub(super) struct Input<R> {
    pub(super) reader: R,
    pub(super) offset: u64,
}

impl<R: Read> Input<R> {
    pub(super) fn fail(&self, source: io::Error) -> PerfettoCheckError {
        PerfettoCheckError::Read {
            offset: self.offset,
            source,
        }
    }

    /// Fills `buf` unless the input ends; returns the bytes read.
    pub(super) fn read_full(&mut self, buf: &mut [u8]) -> Result<usize, PerfettoCheckError> {
        let mut n = 0;
        while n < buf.len() {
            match self.reader.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
        self.offset += n as u64;
        Ok(n)
    }

    /// Appends up to `len` bytes to `buf`; returns how many.
    pub(super) fn read_into(
        &mut self,
        len: u64,
        buf: &mut Vec<u8>,
    ) -> Result<u64, PerfettoCheckError> {
        // `take` bounds the read and read_to_end grows only as data arrives: a corrupt size
        // cannot make this allocate more than the input holds.
        match (&mut self.reader).take(len).read_to_end(buf) {
            Ok(n) => {
                self.offset += n as u64;
                Ok(n as u64)
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Skips up to `len` bytes; returns how many.
    pub(super) fn skip(&mut self, len: u64) -> Result<u64, PerfettoCheckError> {
        match io::copy(&mut (&mut self.reader).take(len), &mut io::sink()) {
            Ok(n) => {
                self.offset += n;
                Ok(n)
            }
            Err(e) => Err(self.fail(e)),
        }
    }
}

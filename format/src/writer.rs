//! Writers on top of the slice encoders: [`RecordWriter`] (a growable word buffer) and
//! [`BatchWriter`] (records encoded in place into a batch, handed to a [`BatchOut`] when full).

use super::error::EncodeError;
use super::record::{Encode, MagicNumber};
use super::types::MAX_RECORD_WORDS;

/// Appends encoded records to a growable word buffer. A record that fails to encode leaves
/// the buffer as it was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordWriter {
    words: Vec<u64>,
}

impl RecordWriter {
    /// An empty writer.
    pub fn new() -> Self {
        RecordWriter::default()
    }

    /// A writer whose buffer starts with the magic number record, as a trace file does.
    pub fn with_magic() -> Self {
        let mut w = RecordWriter::new();
        w.words.push(super::types::MAGIC_WORD);
        debug_assert_eq!(MagicNumber.words(), Ok(1));
        w
    }

    /// Appends one record and returns its size in words.
    pub fn push<R: Encode + ?Sized>(&mut self, record: &R) -> Result<usize, EncodeError> {
        let n = record.words()?;
        let start = self.words.len();
        self.words.resize(start + n, 0);
        match record.write(&mut self.words[start..]) {
            Ok(written) => {
                debug_assert_eq!(written, n);
                Ok(written)
            }
            Err(e) => {
                self.words.truncate(start);
                Err(e)
            }
        }
    }

    /// The words written so far.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// The bytes written so far (words in machine order).
    pub fn to_bytes(&self) -> Vec<u8> {
        words_to_bytes(&self.words)
    }

    /// Consumes the writer, returning its words.
    pub fn into_words(self) -> Vec<u64> {
        self.words
    }
}

/// Encodes one record into a new vector of exactly [`Encode::words`] words.
pub fn encode_to_vec<R: Encode + ?Sized>(record: &R) -> Result<Vec<u64>, EncodeError> {
    let mut w = RecordWriter::new();
    w.push(record)?;
    Ok(w.into_words())
}

/// The bytes of `words` in machine order, as they are stored in a trace file.
pub fn words_to_bytes(words: &[u64]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(words.len() * 8);
    for w in words {
        bytes.extend_from_slice(&w.to_ne_bytes());
    }
    bytes
}

/// Where a [`BatchWriter`] sends its batches: a file or a pipe, a channel to a trace manager.
pub trait BatchOut {
    /// Why a batch could not be taken.
    type Error;

    /// Takes one batch of whole records (words in machine order; never empty).
    fn write_batch(&mut self, words: &[u64]) -> Result<(), Self::Error>;
}

/// Why [`BatchWriter::push`] did not take a record.
#[derive(Debug, thiserror::Error)]
pub enum BatchError<E> {
    /// The record does not encode; nothing was buffered.
    #[error("record could not be encoded: {0}")]
    Encode(#[from] EncodeError),
    /// The output refused the batch the record completed (the record was taken).
    #[error("writing a batch of records: {0}")]
    Out(E),
}

/// The one batching FXT writer: records are encoded in place at the end of a word buffer (no
/// size pass, no copy; a record larger than the room kept behind the batch, a large blob, is
/// sized first) and handed to the [`BatchOut`] once `batch_words` words are buffered. Call
/// [`BatchWriter::flush`] at the end: dropping the writer loses what is still buffered.
#[derive(Debug)]
pub struct BatchWriter<O> {
    out: O,
    /// At least `batch_words + MAX_RECORD_WORDS` long, so any ordinary record fits behind
    /// `used`.
    buffer: Vec<u64>,
    used: usize,
    bytes: u64,
    batch_words: usize,
}

impl<O: BatchOut> BatchWriter<O> {
    /// A writer to `out` that hands over batches of about `batch_words` words.
    pub fn new(out: O, batch_words: usize) -> Self {
        Self {
            out,
            buffer: vec![0; batch_words + MAX_RECORD_WORDS],
            used: 0,
            bytes: 0,
            batch_words,
        }
    }

    /// A writer whose stream starts with the magic number record, as a trace file does.
    pub fn with_magic(out: O, batch_words: usize) -> Self {
        let mut w = Self::new(out, batch_words);
        w.buffer[0] = super::types::MAGIC_WORD;
        w.used = 1;
        w.bytes = 8;
        w
    }

    /// Encodes one record into the batch (handing the batch over when it is full) and returns
    /// its size in words.
    pub fn push<R: Encode + ?Sized>(&mut self, record: &R) -> Result<usize, BatchError<O::Error>> {
        let written = match record.write(&mut self.buffer[self.used..]) {
            Ok(written) => written,
            Err(EncodeError::BufferTooSmall { .. }) => {
                let needed = record.words()?;
                self.buffer.resize(self.used + needed, 0);
                record.write(&mut self.buffer[self.used..])?
            }
            Err(e) => return Err(e.into()),
        };
        self.used += written;
        self.bytes += 8 * written as u64;
        if self.used >= self.batch_words {
            self.flush().map_err(BatchError::Out)?;
        }
        Ok(written)
    }

    /// Hands what is buffered to the output (nothing when the batch is empty).
    pub fn flush(&mut self) -> Result<(), O::Error> {
        if self.used == 0 {
            return Ok(());
        }
        self.out.write_batch(&self.buffer[..self.used])?;
        self.used = 0;
        Ok(())
    }

    /// Bytes taken so far (handed over or buffered).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Words buffered, not yet handed over.
    pub fn buffered_words(&self) -> usize {
        self.used
    }

    /// The output.
    pub fn out(&self) -> &O {
        &self.out
    }

    /// The output, mutably (e.g. to flush a writer under it after [`Self::flush`]).
    pub fn out_mut(&mut self) -> &mut O {
        &mut self.out
    }

    /// The output; what is still buffered is lost (call [`Self::flush`] first).
    pub fn into_out(self) -> O {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LargeBlob, StringRef};

    #[derive(Default)]
    struct Batches(Vec<Vec<u64>>);

    impl BatchOut for Batches {
        type Error = ();
        fn write_batch(&mut self, words: &[u64]) -> Result<(), ()> {
            self.0.push(words.to_vec());
            Ok(())
        }
    }

    #[test]
    fn batches_fill_then_flush_and_large_records_fit() {
        let mut w = BatchWriter::with_magic(Batches::default(), 4);
        let init = crate::Initialization {
            ticks_per_second: 7,
        };
        assert_eq!(w.push(&init).unwrap(), 2);
        assert!(w.out().0.is_empty(), "3 words buffered, batch is 4");
        w.push(&init).unwrap();
        assert_eq!(w.out().0, [vec![crate::MAGIC_WORD, 0x21, 7, 0x21, 7]]);
        assert_eq!(w.buffered_words(), 0);
        // A record larger than the room behind the batch.
        let payload = vec![0xabu8; 8 * (MAX_RECORD_WORDS + 10)];
        let blob = LargeBlob {
            category: StringRef::Inline("c"),
            name: StringRef::Inline("n"),
            metadata: None,
            payload: &payload,
        };
        let n = blob.words().unwrap();
        assert!(n > MAX_RECORD_WORDS);
        assert_eq!(w.push(&blob).unwrap(), n);
        assert_eq!(w.out().0[1], encode_to_vec(&blob).unwrap());
        assert_eq!(w.bytes(), 8 * (5 + n as u64));
        w.flush().unwrap();
        assert_eq!(
            w.into_out().0.len(),
            2,
            "flushing an empty batch hands over nothing"
        );
    }
}

//! A `Vec`-backed convenience writer on top of the slice encoders.

use super::error::EncodeError;
use super::record::{Encode, MagicNumber};

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

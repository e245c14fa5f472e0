//! Typed errors of the encoder, the framing scanner and the decoder.

use std::io;

use super::types::{
    MAGIC_WORD, MAX_ARGS, MAX_BLOB_PAYLOAD, MAX_PROVIDER_EVENT, MAX_PROVIDER_NAME_LEN,
    MAX_RECORD_WORDS, MAX_STRING_INDEX, MAX_STRING_LEN,
};

/// Why a record could not be encoded. Nothing is ever truncated to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The record would exceed the 12-bit size field.
    #[error("record of {words} words exceeds the limit of {MAX_RECORD_WORDS} words")]
    RecordTooLarge {
        /// Size the record would have had, in words.
        words: usize,
    },
    /// A large record would exceed its 32-bit size field.
    #[error("large record of {words} words exceeds the 32-bit size field")]
    LargeRecordTooLarge {
        /// Size the record would have had, in words.
        words: usize,
    },
    /// A string is longer than the format's conservative limit.
    #[error("string of {len} bytes exceeds the limit of {MAX_STRING_LEN} bytes")]
    StringTooLong {
        /// Length of the string in bytes.
        len: usize,
    },
    /// More arguments than the 4-bit count field allows.
    #[error("{count} arguments exceed the limit of {MAX_ARGS}")]
    TooManyArgs {
        /// Number of arguments given.
        count: usize,
    },
    /// A string index outside 1..=0x7fff.
    #[error("string index {index:#x} outside 0x1..={MAX_STRING_INDEX:#x}")]
    StringIndexOutOfRange {
        /// The index given.
        index: u16,
    },
    /// Thread index 0, which is reserved for inline threads.
    #[error("thread index 0 is reserved for inline threads (valid: 1..=255)")]
    ThreadIndexZero,
    /// A blob payload longer than the blob record's 15-bit size field.
    #[error("blob payload of {len} bytes exceeds the limit of {MAX_BLOB_PAYLOAD} bytes")]
    BlobTooLarge {
        /// Payload length in bytes.
        len: usize,
    },
    /// An argument larger than its 12-bit size field.
    #[error("argument of {words} words exceeds the limit of {MAX_RECORD_WORDS} words")]
    ArgumentTooLarge {
        /// Size the argument would have had, in words.
        words: usize,
    },
    /// A provider name longer than the 8-bit length field.
    #[error("provider name of {len} bytes exceeds the limit of {MAX_PROVIDER_NAME_LEN} bytes")]
    ProviderNameTooLong {
        /// Length of the name in bytes.
        len: usize,
    },
    /// A provider event id wider than its 4-bit field.
    #[error("provider event {event} exceeds the limit of {MAX_PROVIDER_EVENT}")]
    ProviderEventOutOfRange {
        /// The event id given.
        event: u8,
    },
    /// The output slice is smaller than the record.
    #[error("output of {available} words is too small for a record of {needed} words")]
    BufferTooSmall {
        /// Words the record needs.
        needed: usize,
        /// Words the output slice has.
        available: usize,
    },
}

/// What is wrong with the framing of a record (its header's type and size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingErrorKind {
    /// A non-zero header whose size field is 0.
    #[error("record header {header:#018x} has size 0")]
    ZeroSize {
        /// The header word.
        header: u64,
    },
    /// The record runs past the end of the data.
    #[error(
        "record header {header:#018x} says {words} words ({} bytes) but only {available} bytes remain",
        (*.words as u128) * 8
    )]
    PastEnd {
        /// The header word.
        header: u64,
        /// The record's size in words according to its header.
        words: usize,
        /// Bytes left from the record's start to the end of the data.
        available: usize,
    },
    /// Fewer than 8 bytes remain: not even a header word.
    #[error("{len} trailing bytes, less than one 8-byte word")]
    TrailingBytes {
        /// Number of trailing bytes.
        len: usize,
    },
}

/// A framing error at a byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("at byte offset {offset}: {kind}")]
pub struct FramingError {
    /// Byte offset of the offending record.
    pub offset: usize,
    /// What is wrong.
    pub kind: FramingErrorKind,
}

/// What ended decoding.
#[derive(Debug, thiserror::Error)]
pub enum DecodeErrorKind {
    /// The input is empty.
    #[error("empty input, not an FXT trace (expected magic {MAGIC_WORD:#018x})")]
    Empty,
    /// The input does not start with the magic number record.
    #[error(
        "not an FXT trace (first word is {first_word:#018x}, expected magic {MAGIC_WORD:#018x})"
    )]
    NotFxt {
        /// The first 8 bytes read as a word.
        first_word: u64,
    },
    /// The input is shorter than the magic number record.
    #[error("not an FXT trace ({len} bytes, shorter than the 8-byte magic {MAGIC_WORD:#018x})")]
    TooShort {
        /// Length of the input in bytes.
        len: usize,
    },
    /// The record's framing is broken.
    #[error("{0}")]
    Framing(FramingErrorKind),
    /// The record's contents do not fit its declared layout.
    #[error("malformed {record} record (header {header:#018x}): {problem}")]
    Malformed {
        /// Which record (type name).
        record: &'static str,
        /// Its header word.
        header: u64,
        /// What does not fit.
        problem: &'static str,
    },
    /// A string ref names an index no string record has registered.
    #[error("string index {index:#x} is not registered (in a {record} record)")]
    UnknownStringIndex {
        /// Which record (type name).
        record: &'static str,
        /// The unregistered index.
        index: u16,
    },
    /// A thread ref names an index no thread record has registered.
    #[error("thread index {index} is not registered (in a {record} record)")]
    UnknownThreadIndex {
        /// Which record (type name).
        record: &'static str,
        /// The unregistered index.
        index: u8,
    },
    /// Reading the input failed.
    #[error("read error: {0}")]
    Io(#[from] io::Error),
}

/// Decoding stopped at byte `offset`; everything before it was decoded.
#[derive(Debug, thiserror::Error)]
pub struct DecodeError {
    /// Byte offset of the record (or word) that could not be decoded.
    pub offset: u64,
    /// What is wrong.
    pub kind: DecodeErrorKind,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            DecodeErrorKind::Empty
            | DecodeErrorKind::NotFxt { .. }
            | DecodeErrorKind::TooShort { .. } => write!(f, "{}", self.kind),
            kind => write!(f, "at byte offset {}: {kind}", self.offset),
        }
    }
}

impl DecodeError {
    /// Whether the input is not an FXT trace at all (as opposed to a damaged one).
    pub fn is_not_fxt(&self) -> bool {
        matches!(
            self.kind,
            DecodeErrorKind::Empty
                | DecodeErrorKind::NotFxt { .. }
                | DecodeErrorKind::TooShort { .. }
        )
    }
}

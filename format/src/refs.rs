//! String refs and thread refs, as the encoder takes them.

use super::error::EncodeError;
use super::sink::{stream_words, Sink};
use super::types::{MAX_STRING_INDEX, MAX_STRING_LEN};

/// Bit 15 of a string ref: set for an inline string (low 15 bits = length).
pub const STRING_REF_INLINE_FLAG: u16 = 0x8000;

/// A string as a record refers to it: empty, by string table index, or inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringRef<'a> {
    /// The empty string (ref value 0).
    Empty,
    /// An index registered earlier by a string record, 1..=0x7fff.
    Index(u16),
    /// The string's bytes, written inside the record (≤ 32000 bytes). An empty inline
    /// string is encoded as [`StringRef::Empty`].
    Inline(&'a str),
}

impl<'a> From<&'a str> for StringRef<'a> {
    fn from(s: &'a str) -> Self {
        StringRef::Inline(s)
    }
}

impl StringRef<'_> {
    /// The 16-bit ref value written in the record's header, after checking the limits.
    #[inline]
    pub fn encode(&self) -> Result<u16, EncodeError> {
        match *self {
            StringRef::Empty => Ok(0),
            StringRef::Index(index) => {
                if index == 0 || index > MAX_STRING_INDEX {
                    Err(EncodeError::StringIndexOutOfRange { index })
                } else {
                    Ok(index)
                }
            }
            StringRef::Inline(s) => {
                if s.len() > MAX_STRING_LEN {
                    Err(EncodeError::StringTooLong { len: s.len() })
                } else if s.is_empty() {
                    Ok(0)
                } else {
                    // MAX_STRING_LEN < 0x8000, so the length fits the low 15 bits.
                    Ok(STRING_REF_INLINE_FLAG | s.len() as u16)
                }
            }
        }
    }

    /// Words this ref adds to a record (its inline stream, if any).
    #[inline]
    pub fn stream_words(&self) -> usize {
        match self {
            StringRef::Inline(s) => stream_words(s.len()),
            _ => 0,
        }
    }

    /// Appends the inline stream, if any.
    #[inline]
    pub(crate) fn emit_stream<S: Sink>(&self, s: &mut S) {
        if let StringRef::Inline(text) = self {
            s.stream(text.as_bytes());
        }
    }
}

/// A thread as a record refers to it: by thread table index, or inline (process and thread
/// koids; on Linux, pid and tid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadRef {
    /// An index registered earlier by a thread record, 1..=255.
    Index(u8),
    /// Process and thread koids written inside the record.
    Inline {
        /// Process koid (pid).
        pid: u64,
        /// Thread koid (tid).
        tid: u64,
    },
}

impl ThreadRef {
    /// The 8-bit ref value written in the record's header (0 = inline).
    #[inline]
    pub fn encode(&self) -> Result<u8, EncodeError> {
        match *self {
            ThreadRef::Index(0) => Err(EncodeError::ThreadIndexZero),
            ThreadRef::Index(index) => Ok(index),
            ThreadRef::Inline { .. } => Ok(0),
        }
    }

    /// Words this ref adds to a record (2 when inline).
    #[inline]
    pub fn inline_words(&self) -> usize {
        match self {
            ThreadRef::Index(_) => 0,
            ThreadRef::Inline { .. } => 2,
        }
    }

    /// Appends the inline pid and tid words, if inline.
    #[inline]
    pub(crate) fn emit_inline<S: Sink>(&self, s: &mut S) {
        if let ThreadRef::Inline { pid, tid } = *self {
            s.word(pid);
            s.word(tid);
        }
    }
}

/// A process as a userspace object record refers to it: a thread table index (whose process
/// koid is meant) or an inline process koid (one word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessRef {
    /// A thread table index, 1..=255; the process of that thread.
    Index(u8),
    /// The process koid (pid) written inside the record.
    Inline(u64),
}

impl ProcessRef {
    /// The 8-bit thread ref value written in the record's header (0 = inline).
    #[inline]
    pub fn encode(&self) -> Result<u8, EncodeError> {
        match *self {
            ProcessRef::Index(0) => Err(EncodeError::ThreadIndexZero),
            ProcessRef::Index(index) => Ok(index),
            ProcessRef::Inline(_) => Ok(0),
        }
    }

    /// Appends the inline pid word, if inline.
    #[inline]
    pub(crate) fn emit_inline<S: Sink>(&self, s: &mut S) {
        if let ProcessRef::Inline(pid) = *self {
            s.word(pid);
        }
    }
}

/// `s` cut to at most `max` bytes at a character boundary (a text written inline under a
/// size limit).
pub fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_cut_at_char_boundaries() {
        assert_eq!(truncate_str("abcdef", 3), "abc");
        assert_eq!(truncate_str("aéb", 2), "a");
        assert_eq!(truncate_str("ab", 5), "ab");
    }

    #[test]
    fn string_ref_values() {
        assert_eq!(StringRef::Empty.encode(), Ok(0));
        assert_eq!(StringRef::Index(1).encode(), Ok(1));
        assert_eq!(StringRef::Index(0x7fff).encode(), Ok(0x7fff));
        assert_eq!(
            StringRef::Index(0x8000).encode(),
            Err(EncodeError::StringIndexOutOfRange { index: 0x8000 })
        );
        assert_eq!(
            StringRef::Index(0).encode(),
            Err(EncodeError::StringIndexOutOfRange { index: 0 })
        );
        assert_eq!(StringRef::Inline("abc").encode(), Ok(0x8003));
        assert_eq!(StringRef::Inline("").encode(), Ok(0));
        let long = "x".repeat(MAX_STRING_LEN);
        assert_eq!(StringRef::Inline(&long).encode(), Ok(0x8000 | 32000));
        let too_long = "x".repeat(MAX_STRING_LEN + 1);
        assert_eq!(
            StringRef::Inline(&too_long).encode(),
            Err(EncodeError::StringTooLong { len: 32001 })
        );
    }

    #[test]
    fn thread_ref_values() {
        assert_eq!(ThreadRef::Index(255).encode(), Ok(255));
        assert_eq!(
            ThreadRef::Index(0).encode(),
            Err(EncodeError::ThreadIndexZero)
        );
        assert_eq!(ThreadRef::Inline { pid: 1, tid: 2 }.encode(), Ok(0));
        assert_eq!(ThreadRef::Inline { pid: 1, tid: 2 }.inline_words(), 2);
        assert_eq!(
            ProcessRef::Index(0).encode(),
            Err(EncodeError::ThreadIndexZero)
        );
        assert_eq!(ProcessRef::Inline(9).encode(), Ok(0));
    }
}

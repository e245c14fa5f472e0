//! "Size, reserve once, write through a cursor" (Fuchsia's `SizeOfEncoded*` + `Payload`).
//!
//! Every record describes its encoding once, as a function generic over a [`Sink`]. Run
//! against a [`Counter`] it yields the record's size in words; run against a [`Cursor`] over
//! the caller's `&mut [u64]` it writes the words. Size fields are patched in when a record
//! or argument is finished, so the two passes cannot drift apart.

use super::fields::Field;

/// Where an encoding goes: a word counter or a cursor over a word slice.
pub trait Sink {
    /// Appends one word.
    fn word(&mut self, w: u64);
    /// Appends a byte stream, zero-padded to the next 8-byte boundary.
    fn stream(&mut self, bytes: &[u8]);
    /// Words appended so far.
    fn pos(&self) -> usize;
    /// Sets `field` of the word at `at` to `value` (a no-op when only counting).
    fn patch(&mut self, at: usize, field: Field, value: u64);
}

/// Number of words a stream of `len` bytes takes once padded.
pub(crate) const fn stream_words(len: usize) -> usize {
    len.div_ceil(8)
}

/// The last, partial word of a stream: `rest` (1..=7 bytes) then zero padding, in memory
/// order. Composed in a register from 4-, 2- and 1-byte loads: a byte copy into a stack
/// array becomes a `memcpy` call followed by a wide load that stalls on store forwarding.
#[inline(always)]
fn tail_word(rest: &[u8]) -> u64 {
    let n = rest.len().min(7);
    let mut le = 0u64;
    let mut at = 0;
    if n & 4 != 0 {
        le |= u64::from(u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]));
        at = 4;
    }
    if n & 2 != 0 {
        le |= u64::from(u16::from_le_bytes([rest[at], rest[at + 1]])) << (8 * at);
        at += 2;
    }
    if n & 1 != 0 {
        le |= u64::from(rest[at]) << (8 * at);
    }
    // The bytes in memory order, whatever the machine's byte order.
    u64::from_ne_bytes(le.to_le_bytes())
}

/// Counts words without writing anything.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    words: usize,
}

impl Sink for Counter {
    #[inline]
    fn word(&mut self, _w: u64) {
        self.words += 1;
    }

    #[inline]
    fn stream(&mut self, bytes: &[u8]) {
        self.words += stream_words(bytes.len());
    }

    #[inline]
    fn pos(&self) -> usize {
        self.words
    }

    #[inline]
    fn patch(&mut self, _at: usize, _field: Field, _value: u64) {}
}

/// Writes words into a caller-provided slice. Never writes out of bounds: once the slice is
/// full it keeps counting, and [`Cursor::finish`] reports how many words were needed.
#[derive(Debug)]
pub struct Cursor<'o> {
    out: &'o mut [u64],
    pos: usize,
}

impl<'o> Cursor<'o> {
    /// A cursor at the start of `out`.
    pub fn new(out: &'o mut [u64]) -> Self {
        Cursor { out, pos: 0 }
    }

    /// Words written, or `Err(needed)` when the slice was too small.
    pub fn finish(&self) -> Result<usize, usize> {
        if self.pos <= self.out.len() {
            Ok(self.pos)
        } else {
            Err(self.pos)
        }
    }
}

impl Sink for Cursor<'_> {
    #[inline]
    fn word(&mut self, w: u64) {
        if let Some(slot) = self.out.get_mut(self.pos) {
            *slot = w;
        }
        self.pos += 1;
    }

    #[inline(always)]
    fn stream(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.word(u64::from_ne_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            self.word(tail_word(rest));
        }
    }

    #[inline]
    fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    fn patch(&mut self, at: usize, field: Field, value: u64) {
        if let Some(slot) = self.out.get_mut(at) {
            *slot = field.set(*slot, value);
        }
    }
}

/// Like [`Cursor`], but word 0 (the record header) goes to a separate field instead of the
/// slice: `body[i]` receives word `i + 1`. For writers that publish the header last, after the
/// body (the engine stores it with `Release` once the record is complete).
#[derive(Debug)]
pub(crate) struct SplitCursor<'o> {
    header: u64,
    body: &'o mut [u64],
    pos: usize,
}

impl<'o> SplitCursor<'o> {
    pub(crate) fn new(body: &'o mut [u64]) -> Self {
        SplitCursor {
            header: 0,
            body,
            pos: 0,
        }
    }

    /// The header word and the words written (header included), or `Err(needed)` when the
    /// body slice was too small.
    pub(crate) fn finish(&self) -> Result<(u64, usize), usize> {
        if self.pos <= self.body.len() + 1 {
            Ok((self.header, self.pos))
        } else {
            Err(self.pos)
        }
    }
}

impl Sink for SplitCursor<'_> {
    #[inline]
    fn word(&mut self, w: u64) {
        match self.pos.checked_sub(1) {
            None => self.header = w,
            Some(i) => {
                if let Some(slot) = self.body.get_mut(i) {
                    *slot = w;
                }
            }
        }
        self.pos += 1;
    }

    #[inline(always)]
    fn stream(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.word(u64::from_ne_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            self.word(tail_word(rest));
        }
    }

    #[inline]
    fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    fn patch(&mut self, at: usize, field: Field, value: u64) {
        match at.checked_sub(1) {
            None => self.header = field.set(self.header, value),
            Some(i) => {
                if let Some(slot) = self.body.get_mut(i) {
                    *slot = field.set(*slot, value);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_is_zero_padded_in_byte_order() {
        let mut out = [u64::MAX; 2];
        let mut c = Cursor::new(&mut out);
        c.stream(b"abcdefghi");
        assert_eq!(c.finish(), Ok(2));
        let bytes: Vec<u8> = out.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes, b"abcdefghi\0\0\0\0\0\0\0");
    }

    #[test]
    fn tail_word_matches_a_padded_copy() {
        let bytes = b"abcdefg";
        for len in 1..=7 {
            let mut padded = [0u8; 8];
            padded[..len].copy_from_slice(&bytes[..len]);
            assert_eq!(
                tail_word(&bytes[..len]),
                u64::from_ne_bytes(padded),
                "len {len}"
            );
        }
    }

    #[test]
    fn exact_multiple_is_not_padded() {
        let mut counter = Counter::default();
        counter.stream(b"12345678");
        counter.stream(b"");
        assert_eq!(counter.pos(), 1);
    }

    #[test]
    fn overflow_is_reported_not_written() {
        let mut out = [0u64; 1];
        let mut c = Cursor::new(&mut out);
        c.word(1);
        c.word(2);
        c.patch(5, Field::new(0, 3), 1);
        assert_eq!(c.finish(), Err(2));
        assert_eq!(out, [1]);
    }

    #[test]
    fn split_cursor_routes_word_zero_to_the_header() {
        let mut body = [u64::MAX; 2];
        let mut c = SplitCursor::new(&mut body);
        c.word(0x10);
        c.word(7);
        c.stream(b"ab");
        c.patch(0, Field::new(4, 15), 3);
        c.patch(1, Field::new(0, 3), 1);
        assert_eq!(c.finish(), Ok((0x30, 3)));
        assert_eq!(body, [1, u64::from_ne_bytes(*b"ab\0\0\0\0\0\0")]);
        let mut small = [0u64; 1];
        let mut c = SplitCursor::new(&mut small);
        c.word(1);
        c.word(2);
        c.word(3);
        assert_eq!(c.finish(), Err(3));
        assert_eq!(small, [2]);
    }
}

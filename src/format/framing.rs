//! Record framing without decoding contents: what the trace manager needs to copy a
//! provider's buffer "up to the last well-formed record".

use super::error::{FramingError, FramingErrorKind};
use super::fields::{LargeRecordHeader, RecordHeader};
use super::types::RecordType;

/// The record type bits `[0 .. 3]` of a header word.
pub const fn record_type(header: u64) -> u8 {
    RecordHeader::TYPE.get(header) as u8
}

/// The size in words of the record that `header` starts, header included: bits `[4 .. 15]`,
/// or `[4 .. 35]` for large records (type 15). 0 means the header is malformed (or, for a
/// zero word, that a zero-filled buffer ends here).
pub const fn record_words(header: u64) -> usize {
    if record_type(header) == RecordType::LargeRecord as u8 {
        LargeRecordHeader::SIZE.get(header) as usize
    } else {
        RecordHeader::SIZE.get(header) as usize
    }
}

/// Why [`scan_records`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanStop {
    /// Every byte was consumed by well-formed records.
    End,
    /// A zero header word: the end of the written part of a zero-filled buffer.
    ZeroWord,
    /// A record is not well framed.
    Error(FramingError),
}

/// Result of [`scan_records`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    /// Length in bytes of the well-formed prefix (a multiple of 8).
    pub valid_len: usize,
    /// Number of records in that prefix.
    pub records: usize,
    /// Why the scan stopped at `valid_len`.
    pub stop: ScanStop,
}

/// Walks the record headers of `bytes` and returns the length of its well-formed prefix:
/// every record in it has a non-zero size and lies entirely inside `bytes`. Stops at a zero
/// header word (the end of data in a zero-filled buffer). Never reads record contents.
pub fn scan_records(bytes: &[u8]) -> Scan {
    scan_with(bytes.len(), |offset| {
        bytes
            .get(offset..offset + 8)
            .map(|w| u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
    })
}

/// [`scan_records`] over words (e.g. a provider buffer mapped as `u64`s).
pub fn scan_words(words: &[u64]) -> Scan {
    scan_with(words.len() * 8, |offset| words.get(offset / 8).copied())
}

fn scan_with(len: usize, word_at: impl Fn(usize) -> Option<u64>) -> Scan {
    let mut offset = 0;
    let mut records = 0;
    let stop = loop {
        if offset == len {
            break ScanStop::End;
        }
        let Some(header) = word_at(offset) else {
            break ScanStop::Error(FramingError {
                offset,
                kind: FramingErrorKind::TrailingBytes { len: len - offset },
            });
        };
        if header == 0 {
            break ScanStop::ZeroWord;
        }
        match check_frame(header, len - offset) {
            Ok(bytes) => {
                offset += bytes;
                records += 1;
            }
            Err(kind) => break ScanStop::Error(FramingError { offset, kind }),
        }
    };
    Scan {
        valid_len: offset,
        records,
        stop,
    }
}

/// Checks that the record starting with `header` has a non-zero size that fits in
/// `available` bytes, and returns its size in bytes.
pub fn check_frame(header: u64, available: usize) -> Result<usize, FramingErrorKind> {
    let words = record_words(header);
    if words == 0 {
        return Err(FramingErrorKind::ZeroSize { header });
    }
    match words.checked_mul(8) {
        Some(bytes) if bytes <= available => Ok(bytes),
        _ => Err(FramingErrorKind::PastEnd {
            header,
            words,
            available,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn header_fields() {
        assert_eq!(record_type(0x0016_5478_4604_0010), 0);
        assert_eq!(record_words(0x0016_5478_4604_0010), 1);
        // Large record: 32-bit size 0x1_0000 words.
        assert_eq!(
            record_words(0x0001_0000_0000_000f | (0x1_0000 << 4)),
            0x1_0000
        );
        // A small record ignores bits above 15 for its size.
        assert_eq!(record_words(0xffff_ffff_ffff_0024), 2);
    }

    #[test]
    fn scan_stops_at_zero_word() {
        let data = bytes(&[0x0016_5478_4604_0010, 0x21, 7, 0, 0x11]);
        let scan = scan_records(&data);
        assert_eq!(
            scan,
            Scan {
                valid_len: 24,
                records: 2,
                stop: ScanStop::ZeroWord
            }
        );
        assert_eq!(scan_words(&[0x0016_5478_4604_0010, 0x21, 7, 0, 0x11]), scan);
    }

    #[test]
    fn scan_reports_past_end_and_trailing_bytes() {
        let data = bytes(&[0x11, 0x34, 1]);
        let scan = scan_records(&data);
        assert_eq!(scan.valid_len, 8);
        assert_eq!(
            scan.stop,
            ScanStop::Error(FramingError {
                offset: 8,
                kind: FramingErrorKind::PastEnd {
                    header: 0x34,
                    words: 3,
                    available: 16
                }
            })
        );
        let mut data = bytes(&[0x11]);
        data.extend_from_slice(&[1, 2, 3]);
        let scan = scan_records(&data);
        assert_eq!(scan.valid_len, 8);
        assert_eq!(
            scan.stop,
            ScanStop::Error(FramingError {
                offset: 8,
                kind: FramingErrorKind::TrailingBytes { len: 3 }
            })
        );
        let scan = scan_records(&bytes(&[0x11, 0x4]));
        assert_eq!(
            scan.stop,
            ScanStop::Error(FramingError {
                offset: 8,
                kind: FramingErrorKind::ZeroSize { header: 4 }
            })
        );
        assert_eq!(scan_records(&[]).stop, ScanStop::End);
    }
}

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
    scan_with(bytes.len(), |offset| word_at(bytes, offset)).0
}

/// [`scan_records`] over words (e.g. a provider buffer mapped as `u64`s).
pub fn scan_words(words: &[u64]) -> Scan {
    scan_with(words.len() * 8, |offset| words.get(offset / 8).copied()).0
}

/// Whether a record of `header`'s type is one a trace manager looks at before copying:
/// metadata (type 0: provider metadata is the manager's alone) or a large record (type 15: one
/// too large for a reader is left out).
const fn is_metadata_or_large(header: u64) -> bool {
    let kind = record_type(header);
    kind == RecordType::Metadata as u8 || kind == RecordType::LargeRecord as u8
}

/// The scan, and how many of its records are metadata or large ([`is_metadata_or_large`]).
fn scan_with(len: usize, word_at: impl Fn(usize) -> Option<u64>) -> (Scan, usize) {
    let mut offset = 0;
    let mut records = 0;
    let mut metadata_or_large = 0;
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
        // A record that is not large (nearly all): its size is one shift and one mask away,
        // so the walk's chain from one header to the next is short; the checks branch off it.
        // Large records, zero sizes and records past the end take `check_frame`.
        let kind = record_type(header);
        let bytes = RecordHeader::SIZE.get(header) as usize * 8;
        if kind != RecordType::LargeRecord as u8 && bytes != 0 && bytes <= len - offset {
            offset += bytes;
            records += 1;
            metadata_or_large += usize::from(kind == RecordType::Metadata as u8);
            continue;
        }
        match check_frame(header, len - offset) {
            Ok(bytes) => {
                offset += bytes;
                records += 1;
                metadata_or_large += usize::from(is_metadata_or_large(header));
            }
            Err(kind) => break ScanStop::Error(FramingError { offset, kind }),
        }
    };
    let scan = Scan {
        valid_len: offset,
        records,
        stop,
    };
    (scan, metadata_or_large)
}

/// Bytes that are whole, well-framed records: every header declares a non-zero size that fits,
/// there is no zero header word and no trailing byte. A value exists only after a scan walked
/// the bytes ([`CheckedRecords::check`], [`CheckedRecords::prefix`]), so whoever receives one
/// (the trace manager's archive) copies the bytes without walking them again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedRecords<'a> {
    bytes: &'a [u8],
    records: usize,
    /// Whether some record may be metadata or large ([`is_metadata_or_large`]; true when not
    /// known).
    metadata_or_large: bool,
}

impl<'a> CheckedRecords<'a> {
    /// `bytes` if they are whole, well-framed records; else where and why they are not (a zero
    /// header word is [`FramingErrorKind::ZeroSize`] with header 0).
    pub fn check(bytes: &'a [u8]) -> Result<Self, FramingError> {
        let (checked, stop) = Self::prefix(bytes);
        match stop {
            ScanStop::End => Ok(checked),
            ScanStop::Error(e) => Err(e),
            ScanStop::ZeroWord => Err(FramingError {
                offset: checked.len(),
                kind: FramingErrorKind::ZeroSize { header: 0 },
            }),
        }
    }

    /// The well-formed prefix of `bytes` ([`scan_records`]) and why the scan stopped there.
    pub fn prefix(bytes: &'a [u8]) -> (Self, ScanStop) {
        let (scan, metadata_or_large) = scan_with(bytes.len(), |offset| word_at(bytes, offset));
        let checked = Self {
            bytes: &bytes[..scan.valid_len],
            records: scan.records,
            metadata_or_large: metadata_or_large > 0,
        };
        (checked, scan.stop)
    }

    /// Whether some record may be a metadata record (type 0) or a large record (type 15):
    /// when not, a reader that looks only at those (the trace manager, before it copies a
    /// provider's records) need not walk the records again.
    pub fn may_hold_metadata_or_large(&self) -> bool {
        self.metadata_or_large
    }

    /// The records' bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of records.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there is no record.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Each record's byte offset and header word, in order.
    pub fn headers(&self) -> impl Iterator<Item = (usize, u64)> + 'a {
        let bytes = self.bytes;
        let mut offset = 0;
        std::iter::from_fn(move || {
            let header = word_at(bytes, offset)?;
            let at = offset;
            // The bytes were checked: every size is non-zero and fits.
            offset += record_words(header) * 8;
            Some((at, header))
        })
    }

    /// The runs of records left when those whose header `leave_out` accepts are taken out,
    /// one at a time (nothing is collected: a buffer that alternates records to keep and to
    /// leave out costs no memory per run); [`Without::left_out`] counts those taken out so
    /// far. Each run is itself checked records (it starts and ends on a record boundary); no
    /// run is empty.
    pub fn without<F: FnMut(u64) -> bool>(&self, leave_out: F) -> Without<'a, F> {
        Without {
            bytes: self.bytes,
            offset: 0,
            leave_out,
            left_out: 0,
        }
    }
}

/// The runs of [`CheckedRecords::without`].
#[derive(Debug)]
pub struct Without<'a, F> {
    bytes: &'a [u8],
    offset: usize,
    leave_out: F,
    left_out: usize,
}

impl<F> Without<'_, F> {
    /// Records taken out so far.
    pub fn left_out(&self) -> usize {
        self.left_out
    }
}

impl<'a, F: FnMut(u64) -> bool> Iterator for Without<'a, F> {
    type Item = CheckedRecords<'a>;

    fn next(&mut self) -> Option<CheckedRecords<'a>> {
        let mut run_start = self.offset;
        let mut records = 0;
        while let Some(header) = word_at(self.bytes, self.offset) {
            // The bytes were checked: every size is non-zero and fits.
            let size = record_words(header) * 8;
            if (self.leave_out)(header) {
                self.left_out += 1;
                if records > 0 {
                    let run = &self.bytes[run_start..self.offset];
                    self.offset += size;
                    return Some(CheckedRecords {
                        bytes: run,
                        records,
                        metadata_or_large: true,
                    });
                }
                self.offset += size;
                run_start = self.offset;
            } else {
                records += 1;
                self.offset += size;
            }
        }
        (records > 0).then(|| CheckedRecords {
            bytes: &self.bytes[run_start..self.offset],
            records,
            metadata_or_large: true,
        })
    }
}

/// Where [`walk_records`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkStop {
    /// At the end of the bytes, after whole records.
    End,
    /// At a zero header word.
    ZeroWord,
    /// At a record whose size is zero or runs past the end.
    Misfit,
}

/// Records of a dense stream walked by [`walk_records`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordWalk {
    /// The end of the last whole record (from the start of the bytes).
    pub end: u64,
    /// Whole records walked.
    pub records: u64,
    /// Why the walk ended there.
    pub stop: WalkStop,
}

/// Walk the record headers of a dense stream of `len` bytes from byte `start` (a record
/// boundary), reading it through `read(offset, block)` in blocks of about 1 MiB: for streams
/// too large to hold (a trace file, a provider's buffer), only the headers are looked at.
pub fn walk_records<E>(
    len: u64,
    start: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
) -> Result<RecordWalk, E> {
    const BLOCK: u64 = 1 << 20;
    let mut block = vec![0u8; BLOCK.min(len.saturating_sub(start)) as usize];
    // The bytes of `block` are the stream's from `from` for `filled` bytes.
    let (mut from, mut filled) = (0u64, 0u64);
    let mut walk = RecordWalk {
        end: start,
        records: 0,
        stop: WalkStop::End,
    };
    while walk.end + 8 <= len {
        let at = walk.end;
        if at < from || at + 8 > from + filled {
            from = at;
            filled = BLOCK.min(len - at);
            read(from, &mut block[..filled as usize])?;
        }
        let header = word_at(&block, (at - from) as usize).unwrap_or(0);
        if header == 0 {
            walk.stop = WalkStop::ZeroWord;
            return Ok(walk);
        }
        let size = record_words(header) as u64 * 8;
        if size == 0 || size > len - at {
            walk.stop = WalkStop::Misfit;
            return Ok(walk);
        }
        walk.end += size;
        walk.records += 1;
    }
    if walk.end < len {
        walk.stop = WalkStop::Misfit;
    }
    Ok(walk)
}

fn word_at(bytes: &[u8], offset: usize) -> Option<u64> {
    bytes
        .get(offset..offset.checked_add(8)?)
        .map(|w| u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
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

    /// The scan's rule one record at a time, without its fast path: what the scan must find.
    fn reference_prefix(bytes: &[u8]) -> (usize, usize, bool, ScanStop) {
        let (mut offset, mut records, mut metadata_or_large) = (0, 0, false);
        let stop = loop {
            if offset == bytes.len() {
                break ScanStop::End;
            }
            let Some(header) = word_at(bytes, offset) else {
                let len = bytes.len() - offset;
                let kind = FramingErrorKind::TrailingBytes { len };
                break ScanStop::Error(FramingError { offset, kind });
            };
            if header == 0 {
                break ScanStop::ZeroWord;
            }
            match check_frame(header, bytes.len() - offset) {
                Ok(size) => {
                    offset += size;
                    records += 1;
                    metadata_or_large |= is_metadata_or_large(header);
                }
                Err(kind) => break ScanStop::Error(FramingError { offset, kind }),
            }
        };
        (offset, records, metadata_or_large, stop)
    }

    proptest::proptest! {
        #[test]
        fn the_scan_finds_what_the_record_by_record_rule_finds(
            words in proptest::collection::vec(
                (0u64..16, 0u64..6, proptest::bool::ANY, 0u64..1 << 20),
                0..40,
            ),
            trailing in 0usize..8,
        ) {
            // Headers of every type with small sizes (0 included), large records whose size
            // may run far, zero words, and payload words that are not headers.
            let mut bytes = Vec::new();
            for (kind, size, large_size, high) in words {
                let header = match (kind, large_size) {
                    (15, true) => 15 | (size.pow(3) << 4) | (high << 36),
                    (0, true) => 0,
                    _ => kind | (size << 4) | (high << 16),
                };
                bytes.extend_from_slice(&header.to_ne_bytes());
            }
            bytes.extend(std::iter::repeat_n(0x55, trailing));
            let (checked, stop) = CheckedRecords::prefix(&bytes);
            let found = (
                checked.len(),
                checked.records(),
                checked.may_hold_metadata_or_large(),
                stop,
            );
            proptest::prop_assert_eq!(found, reference_prefix(&bytes));
        }
    }

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

    #[test]
    fn a_walk_stops_after_whole_records_and_says_why() {
        let walk = |words: &[u64], start: u64| {
            let data = bytes(words);
            walk_records(data.len() as u64, start, |offset, block: &mut [u8]| {
                block.copy_from_slice(&data[offset as usize..offset as usize + block.len()]);
                Ok::<(), ()>(())
            })
            .unwrap()
        };
        let at = |end, records, stop| RecordWalk { end, records, stop };
        assert_eq!(walk(&[0x14, 0x24, 7], 0), at(24, 2, WalkStop::End));
        assert_eq!(walk(&[0x14, 0, 0x14], 0), at(8, 1, WalkStop::ZeroWord));
        assert_eq!(walk(&[0x14, 0x34, 1], 0), at(8, 1, WalkStop::Misfit));
        // From a record boundary further in.
        assert_eq!(walk(&[9, 0x14, 0x14], 8), at(24, 2, WalkStop::End));
        assert_eq!(walk(&[], 0), at(0, 0, WalkStop::End));
    }

    #[test]
    fn checked_records_check_and_split() {
        let data = bytes(&[0x24, 1, 0x14, 0x24, 2]);
        let checked = CheckedRecords::check(&data).unwrap();
        assert_eq!((checked.records(), checked.len()), (3, 40));
        assert_eq!(
            checked.headers().collect::<Vec<_>>(),
            [(0, 0x24), (16, 0x14), (24, 0x24)]
        );
        let without = |leave_out: u64| {
            let mut runs = checked.without(|h| h == leave_out);
            let collected: Vec<_> = runs.by_ref().collect();
            (collected, runs.left_out())
        };
        let (runs, left_out) = without(0x14);
        assert_eq!(left_out, 1);
        assert_eq!(runs.len(), 2);
        assert_eq!((runs[0].bytes(), runs[0].records()), (&data[..16], 1));
        assert_eq!((runs[1].bytes(), runs[1].records()), (&data[24..], 1));
        let (runs, left_out) = without(0x24);
        assert_eq!(
            (runs.len(), runs[0].bytes(), left_out),
            (1, &data[16..24], 2)
        );
        // Runs of several records, and records left out at the start and the end.
        let data = bytes(&[0x14, 0x24, 1, 0x24, 2, 0x14, 0x24, 3, 0x14]);
        let checked = CheckedRecords::check(&data).unwrap();
        let mut runs = checked.without(|h| h == 0x14);
        let collected: Vec<_> = runs.by_ref().collect();
        assert_eq!(runs.left_out(), 3);
        assert_eq!(collected.len(), 2);
        assert_eq!(
            (collected[0].bytes(), collected[0].records()),
            (&data[8..40], 2)
        );
        assert_eq!(
            (collected[1].bytes(), collected[1].records()),
            (&data[48..64], 1)
        );
        // A zero word, a record past the end and trailing bytes are refused.
        let zero = bytes(&[0x14, 0]);
        assert_eq!(
            CheckedRecords::check(&zero),
            Err(FramingError {
                offset: 8,
                kind: FramingErrorKind::ZeroSize { header: 0 }
            })
        );
        assert!(CheckedRecords::check(&bytes(&[0x24, 1, 0x34])).is_err());
        assert!(CheckedRecords::check(&[1, 2, 3]).is_err());
        let (prefix, stop) = CheckedRecords::prefix(&zero);
        assert_eq!(
            (prefix.records(), prefix.len(), stop),
            (1, 8, ScanStop::ZeroWord)
        );
    }

    #[test]
    fn a_checked_run_says_whether_it_may_hold_metadata_or_large_records() {
        let plain = bytes(&[0x21, 1_000_000_000, 0x14]);
        assert!(!CheckedRecords::check(&plain)
            .unwrap()
            .may_hold_metadata_or_large());
        // A provider info record (metadata, type 0) or a large record (type 15) in it.
        for header in [0x10, 0x1f] {
            let with = bytes(&[0x21, 1_000_000_000, header]);
            assert!(CheckedRecords::check(&with)
                .unwrap()
                .may_hold_metadata_or_large());
        }
    }
}

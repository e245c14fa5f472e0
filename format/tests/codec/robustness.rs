//! Robustness: truncation at every byte, random corruption, unknown types skipped and
//! counted, malformed records reported with their offset, awkward readers.

use crate::write_all_records;

use std::io::{self, Read};

use proptest::prelude::*;

use fxtrace_format::fields::{ArgumentHeader, LargeRecordHeader, MetadataRecord, RecordHeader};
use fxtrace_format::*;

fn trace() -> Vec<u8> {
    write_all_records::build_trace().unwrap()
}

fn bytes(words: &[u64]) -> Vec<u8> {
    words_to_bytes(words)
}

/// All records before the first error, and the error.
fn decode_all(bytes: &[u8]) -> (Vec<Decoded<'_>>, Option<DecodeError>) {
    let mut ok = Vec::new();
    for item in Decoder::new(bytes) {
        match item {
            Ok(d) => ok.push(d),
            Err(e) => return (ok, Some(e)),
        }
    }
    (ok, None)
}

fn stream_all(bytes: &[u8]) -> (Vec<Decoded<'static>>, Option<DecodeError>) {
    let mut ok = Vec::new();
    for item in StreamDecoder::new(OneByteAtATime(bytes)) {
        match item {
            Ok(d) => ok.push(d),
            Err(e) => return (ok, Some(e)),
        }
    }
    (ok, None)
}

/// A reader that returns one byte per call, to exercise partial reads.
struct OneByteAtATime<'a>(&'a [u8]);

impl Read for OneByteAtATime<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match (self.0.split_first(), buf.first_mut()) {
            (Some((b, rest)), Some(slot)) => {
                *slot = *b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

#[test]
fn every_prefix_decodes_to_a_prefix_then_stops_cleanly() {
    let full_bytes = trace();
    let (full, err) = decode_all(&full_bytes);
    assert!(err.is_none());
    let boundaries: Vec<u64> = full
        .iter()
        .map(|d| d.offset)
        .chain([full_bytes.len() as u64])
        .collect();
    for len in 0..=full_bytes.len() {
        let prefix = &full_bytes[..len];
        let (got, err) = decode_all(prefix);
        assert_eq!(got[..], full[..got.len()], "prefix of {len} bytes");
        let streamed = stream_all(prefix);
        assert_eq!(streamed.0[..], got[..], "streaming, prefix of {len} bytes");
        let at_boundary = boundaries.contains(&(len as u64));
        match (len, err, streamed.1) {
            (0, Some(e), Some(s)) => {
                assert!(matches!(e.kind, DecodeErrorKind::Empty));
                assert!(matches!(s.kind, DecodeErrorKind::Empty));
            }
            (1..=7, Some(e), Some(_)) => {
                assert!(matches!(e.kind, DecodeErrorKind::TooShort { .. }))
            }
            (_, None, None) => {
                assert!(at_boundary, "{len} bytes decoded cleanly but is mid-record");
                assert_eq!(
                    got.len(),
                    boundaries.iter().position(|&b| b == len as u64).unwrap()
                );
            }
            (_, Some(e), Some(s)) => {
                assert!(
                    !at_boundary,
                    "{len} bytes is a record boundary but failed: {e}"
                );
                // The error points at the start of the cut record, right after the last good one.
                let cut = boundaries[got.len()];
                assert_eq!(e.offset, cut, "{e}");
                assert_eq!(s.offset, cut, "{s}");
                assert!(matches!(e.kind, DecodeErrorKind::Framing(_)), "{e}");
                assert_eq!(scan_records(prefix).valid_len as u64, cut);
            }
            (_, e, s) => panic!("slice and stream disagree at {len}: {e:?} vs {s:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_byte_flips_never_panic(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut data = trace();
        for (at, value) in &flips {
            let i = at.index(data.len());
            data[i] = *value;
        }
        let (got, err) = decode_all(&data);
        let (streamed, serr) = stream_all(&data);
        // Compared through Debug: a flipped f64 can be NaN, which never equals itself.
        prop_assert_eq!(format!("{streamed:?}"), format!("{got:?}"));
        prop_assert_eq!(err.as_ref().map(|e| e.offset), serr.as_ref().map(|e| e.offset));
        // Whatever decoded is in order and inside the input; display never panics.
        for d in &got {
            prop_assert!((d.offset as usize) < data.len());
            let _ = d.to_string();
        }
        let scan = scan_records(&data);
        prop_assert!(scan.valid_len <= data.len());
        let mut summary = Summary::new();
        got.iter().for_each(|d| summary.add(d));
    }

    #[test]
    fn random_bytes_after_magic_never_panic(tail in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut data = MAGIC_WORD.to_ne_bytes().to_vec();
        data.extend_from_slice(&tail);
        let (got, err) = decode_all(&data);
        let (streamed, serr) = stream_all(&data);
        // Compared through Debug: a flipped f64 can be NaN, which never equals itself.
        prop_assert_eq!(format!("{streamed:?}"), format!("{got:?}"));
        prop_assert_eq!(err.is_some(), serr.is_some());
        for d in Decoder::bare(&tail).flatten() {
            let _ = d.to_string();
        }
    }
}

#[test]
fn unknown_types_are_skipped_by_size_and_counted() {
    let h = |t: u64, words: u64, rest: u64| {
        RecordHeader::TYPE.make(t) | RecordHeader::SIZE.make(words) | rest
    };
    let mut w = RecordWriter::with_magic();
    w.push(&StringRecord {
        index: 1,
        value: "name",
    })
    .unwrap();
    let mut words = w.into_words();
    // Unknown record types 10..=14, with payload words that look like garbage.
    for t in 10..=14 {
        words.extend([h(t, 3, 0xffff_0000), u64::MAX, 0]);
    }
    // Metadata type 5, trace info type 1.
    words.push(h(0, 1, MetadataRecord::METADATA_TYPE.make(5)));
    words.push(h(0, 1, MetadataRecord::METADATA_TYPE.make(4) | (1 << 20)));
    // Event type 11 (2 words).
    words.extend([h(4, 2, 11 << 16), 0]);
    // Scheduling type 3.
    words.extend([h(8, 2, 3 << 60), 0]);
    // Large record type 1, and large blob format 2.
    words.extend([
        LargeRecordHeader::TYPE.make(15)
            | LargeRecordHeader::SIZE.make(2)
            | LargeRecordHeader::LARGE_TYPE.make(1),
        0,
    ]);
    words.extend([
        LargeRecordHeader::TYPE.make(15)
            | LargeRecordHeader::SIZE.make(2)
            | LargeRecordHeader::BLOB_FORMAT.make(2),
        0,
    ]);
    // String record for index 0 and thread record for index 0: ignored.
    words.extend([h(2, 2, 3 << 32), u64::from_ne_bytes(*b"abc\0\0\0\0\0")]);
    words.extend([h(3, 3, 0), 1, 2]);
    // An event (inline thread 7/8, category and name = string 1) with three args: an i32,
    // an unknown type 12 of 3 words, a u32. Size: header, ticks, pid, tid, 1 + 3 + 1 args.
    words.extend([h(4, 9, (3 << 20) | (1 << 32) | (1 << 48)), 500, 7, 8]);
    words.push(
        ArgumentHeader::TYPE.make(1)
            | ArgumentHeader::SIZE.make(1)
            | ArgumentHeader::NAME_REF.make(1)
            | (5 << 32),
    );
    words.extend([
        ArgumentHeader::TYPE.make(12) | ArgumentHeader::SIZE.make(3),
        u64::MAX,
        u64::MAX,
    ]);
    words.push(
        ArgumentHeader::TYPE.make(2)
            | ArgumentHeader::SIZE.make(1)
            | ArgumentHeader::NAME_REF.make(1)
            | (6 << 32),
    );

    let data = bytes(&words);
    let (got, err) = decode_all(&data);
    assert!(err.is_none(), "{err:?}");
    let kinds: Vec<_> = got.iter().map(|d| d.record.kind_name()).collect();
    assert_eq!(kinds, ["magic", "string", "event"]);
    let DecodedRecord::Event(e) = &got[2].record else {
        panic!()
    };
    assert_eq!((e.category.as_ref(), e.name.as_ref()), ("name", "name"));
    assert_eq!(e.thread, Thread { pid: 7, tid: 8 });
    assert_eq!(
        e.args,
        [
            DecodedArg {
                name: "name".into(),
                value: DecodedValue::I32(5)
            },
            DecodedArg {
                name: "name".into(),
                value: DecodedValue::U32(6)
            },
        ]
    );
    let mut decoder = Decoder::new(&data);
    decoder.by_ref().for_each(drop);
    assert_eq!(
        decoder.skipped(),
        SkipCounts {
            unknown_record_type: 5,
            unknown_metadata_type: 2,
            unknown_event_type: 1,
            unknown_scheduling_type: 1,
            unknown_large_type: 2,
            reserved_index: 2,
            unknown_arg_type: 1,
            ..SkipCounts::default()
        }
    );
    assert_eq!(decoder.skipped().records(), 13);
    assert_eq!(decoder.offset(), data.len() as u64);
    let mut stream = StreamDecoder::new(&data[..]);
    stream.by_ref().for_each(drop);
    assert_eq!(stream.skipped(), decoder.skipped());
}

/// Decodes `magic + words` and returns the error, checking everything before it decoded.
fn error_of(words: &[u64], good_before: usize) -> DecodeError {
    let mut all = vec![MAGIC_WORD];
    all.extend_from_slice(words);
    let data = bytes(&all);
    let (got, err) = decode_all(&data);
    assert_eq!(got.len(), good_before, "records before the error");
    let (_, serr) = stream_all(&data);
    let err = err.expect("an error");
    assert_eq!(serr.expect("a stream error").offset, err.offset);
    err
}

#[test]
fn malformed_records_end_decoding_with_their_offset() {
    let init = [0x21, 1_000];
    let with = |tail: &[u64]| [&init[..], tail].concat();

    // Size 0 (non-zero header).
    let e = error_of(&with(&[0x4]), 2);
    assert_eq!(e.offset, 24);
    assert!(matches!(
        e.kind,
        DecodeErrorKind::Framing(FramingErrorKind::ZeroSize { header: 4 })
    ));
    // A zero word is a zero-size record in a file.
    let e = error_of(&with(&[0]), 2);
    assert!(matches!(
        e.kind,
        DecodeErrorKind::Framing(FramingErrorKind::ZeroSize { .. })
    ));
    // Size past the end.
    let e = error_of(&with(&[0x51, 1]), 2);
    assert_eq!(e.offset, 24);
    assert!(matches!(
        e.kind,
        DecodeErrorKind::Framing(FramingErrorKind::PastEnd {
            words: 5,
            available: 16,
            ..
        })
    ));
    // Unregistered string index 9 in an event (inline thread 1/2).
    let e = error_of(&with(&[0x0009_0000_0000_0044, 5, 1, 2]), 2);
    assert_eq!(e.offset, 24);
    assert!(
        matches!(e.kind, DecodeErrorKind::UnknownStringIndex { index: 9, .. }),
        "{e}"
    );
    // Unregistered thread index 3.
    let e = error_of(&with(&[0x0000_0000_0300_0024, 5]), 2);
    assert!(
        matches!(e.kind, DecodeErrorKind::UnknownThreadIndex { index: 3, .. }),
        "{e}"
    );
    // An inline name longer than its record.
    let e = error_of(&with(&[0x8064_0000_0000_0044, 5, 1, 2]), 2);
    assert!(matches!(e.kind, DecodeErrorKind::Malformed { .. }), "{e}");
    // Argument of size 0, and an argument running past the record.
    let e = error_of(&with(&[0x0000_0000_0010_0054, 5, 1, 2, 0x1]), 2);
    assert!(
        matches!(e.kind, DecodeErrorKind::Malformed { problem, .. } if problem.contains("size 0")),
        "{e}"
    );
    let e = error_of(&with(&[0x0000_0000_0010_0054, 5, 1, 2, 0x24]), 2);
    assert!(
        matches!(e.kind, DecodeErrorKind::Malformed { problem, .. } if problem.contains("past the end")),
        "{e}"
    );
    // A counter event without its counter word.
    let e = error_of(&with(&[0x0000_0000_0001_0044, 5, 1, 2]), 2);
    assert!(matches!(e.kind, DecodeErrorKind::Malformed { .. }), "{e}");
    // Ticks per second 0.
    let e = error_of(&[0x21, 0], 1);
    assert!(matches!(e.kind, DecodeErrorKind::Malformed { .. }), "{e}");
    // A magic record with a wrong magic, or extra words.
    let e = error_of(&[0x0016_5478_4704_0010], 1);
    assert!(
        matches!(
            e.kind,
            DecodeErrorKind::Malformed {
                problem: "wrong magic number",
                ..
            }
        ),
        "{e}"
    );
    let e = error_of(&[0x0016_5478_4604_0020, 0], 1);
    assert!(matches!(e.kind, DecodeErrorKind::Malformed { .. }), "{e}");
    // Trailing bytes after the last record.
    let mut data = bytes(&[MAGIC_WORD]);
    data.extend_from_slice(&[1, 2, 3]);
    let (got, err) = decode_all(&data);
    assert_eq!(got.len(), 1);
    let err = err.unwrap();
    assert_eq!(err.offset, 8);
    assert!(matches!(
        err.kind,
        DecodeErrorKind::Framing(FramingErrorKind::TrailingBytes { len: 3 })
    ));
    assert_eq!(
        err.to_string(),
        "at byte offset 8: 3 trailing bytes, less than one 8-byte word"
    );
}

#[test]
fn not_a_trace_is_named_as_such() {
    let e = decode_all(b"hello world!").1.unwrap();
    assert!(e.is_not_fxt());
    assert_eq!(
        e.to_string(),
        "not an FXT trace (first word is 0x6f77206f6c6c6568, expected magic 0x0016547846040010)"
    );
    assert!(matches!(
        decode_all(b"").1.unwrap().kind,
        DecodeErrorKind::Empty
    ));
    assert!(matches!(
        decode_all(b"\x10\x00").1.unwrap().kind,
        DecodeErrorKind::TooShort { len: 2 }
    ));
    // A bare decoder accepts records without the magic.
    let words = encode_to_vec(&Initialization {
        ticks_per_second: 5,
    })
    .unwrap();
    let data = bytes(&words);
    assert_eq!(Decoder::bare(&data).count(), 1);
    assert_eq!(StreamDecoder::bare(&data[..]).count(), 1);
}

#[test]
fn huge_declared_sizes_do_not_allocate_or_panic() {
    // A large record claiming 2^32 - 1 words, followed by 16 bytes.
    let header =
        LargeRecordHeader::TYPE.make(15) | LargeRecordHeader::SIZE.make(u64::from(u32::MAX));
    let data = bytes(&[MAGIC_WORD, header, 0, 0]);
    let (_, err) = stream_all(&data);
    let err = err.unwrap();
    assert_eq!(err.offset, 8);
    assert!(matches!(
        err.kind,
        DecodeErrorKind::Framing(FramingErrorKind::PastEnd { available: 24, .. })
    ));
    let (_, err) = decode_all(&data);
    assert!(matches!(
        err.unwrap().kind,
        DecodeErrorKind::Framing(FramingErrorKind::PastEnd { .. })
    ));
    // A blob argument claiming 4 GiB inside a small record.
    let blob_arg =
        ArgumentHeader::TYPE.make(10) | ArgumentHeader::SIZE.make(1) | (u64::from(u32::MAX) << 32);
    let e = error_of(&[0x0000_0000_0010_0054, 5, 1, 2, blob_arg], 1);
    assert!(matches!(e.kind, DecodeErrorKind::Malformed { .. }), "{e}");
}

#[test]
fn read_errors_are_reported_with_offset() {
    struct Failing(usize);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::Error::other("disk on fire"));
            }
            let magic = MAGIC_WORD.to_ne_bytes();
            let n = buf.len().min(self.0).min(8);
            buf[..n].copy_from_slice(&magic[8 - self.0..8 - self.0 + n]);
            self.0 -= n;
            Ok(n)
        }
    }
    let mut d = StreamDecoder::new(Failing(8));
    assert!(matches!(
        d.next(),
        Some(Ok(Decoded {
            record: DecodedRecord::Magic,
            ..
        }))
    ));
    let err = d.next().unwrap().unwrap_err();
    assert_eq!(err.offset, 8);
    assert!(matches!(err.kind, DecodeErrorKind::Io(_)));
    assert!(d.next().is_none(), "fused after an error");
}

#[test]
fn scan_records_salvages_a_zero_filled_buffer() {
    let mut words = encode_to_vec(&Initialization {
        ticks_per_second: 1,
    })
    .unwrap();
    words.extend(
        encode_to_vec(&StringRecord {
            index: 1,
            value: "x",
        })
        .unwrap(),
    );
    let used = words.len() * 8;
    words.resize(64, 0);
    let scan = scan_words(&words);
    assert_eq!(
        scan,
        Scan {
            valid_len: used,
            records: 2,
            stop: ScanStop::ZeroWord
        }
    );
    // A record cut by the end of the buffer is not counted.
    let cut = &words_to_bytes(&words)[..20];
    let scan = scan_records(cut);
    assert_eq!(scan.valid_len, 16);
    assert!(matches!(
        scan.stop,
        ScanStop::Error(FramingError { offset: 16, .. })
    ));
}

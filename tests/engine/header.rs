//! The shared buffer header (`buffer::header`): geometry, layout, validation, and the record
//! scanner the manager uses to turn a buffer into dense FXT.

use fxtrace::buffer::header::*;
use fxtrace::buffer::TraceBuffer;
use fxtrace_format::{FramingError, FramingErrorKind};

// === geometry ===

#[test]
fn geometry_matches_the_worked_values_table() {
    // `trace_context::ComputeBufferSizes` (trace-engine's `context.cc`): its arithmetic for
    // these sizes.
    let table: [(u64, u64, u64); 5] = [
        (4096, 256, 1856),
        (1 << 20, 65536, 491456),
        (4 << 20, 262144, 1966016),
        (32 << 20, 1048576, 16252864),
        (64 << 20, 1048576, 33030080),
    ];
    for (size, durable, rolling) in table {
        for mode in [BufferingMode::Circular, BufferingMode::Streaming] {
            let g = BufferGeometry::compute(mode, size).unwrap();
            assert_eq!(
                (g.durable_buffer_size, g.rolling_buffer_size),
                (durable, rolling),
                "{size}"
            );
            assert_eq!(HEADER_SIZE + durable + 2 * rolling, size, "no gaps");
            assert_eq!(g.durable_offset(), 128);
            assert_eq!(g.rolling_offset(0), 128 + durable);
            assert_eq!(g.rolling_offset(1), 128 + durable + rolling);
        }
        let g = BufferGeometry::compute(BufferingMode::Oneshot, size).unwrap();
        assert_eq!(
            (g.durable_buffer_size, g.rolling_buffer_size),
            (0, size - 128)
        );
        assert_eq!(g.rolling_offset(0), 128);
    }
}

#[test]
fn geometry_rejects_bad_sizes() {
    use BufferingMode::Circular;
    assert_eq!(
        BufferGeometry::compute(Circular, 0),
        Err(GeometryError::TooSmall(0))
    );
    assert_eq!(
        BufferGeometry::compute(Circular, 4095),
        Err(GeometryError::TooSmall(4095))
    );
    assert_eq!(
        BufferGeometry::compute(Circular, 6000),
        Err(GeometryError::NotPageMultiple(6000))
    );
    let too_big = (1u64 << 32) + 4096;
    assert_eq!(
        BufferGeometry::compute(Circular, too_big),
        Err(GeometryError::TooLarge(too_big))
    );
    let max = BufferGeometry::compute(Circular, 1 << 32).unwrap();
    assert_eq!(max.durable_buffer_size, MAX_DURABLE_BUFFER_SIZE);
}

#[test]
fn every_geometry_validates_in_every_mode() {
    for pages in [1u64, 2, 3, 17, 256, 1000, 4096] {
        for mode in [
            BufferingMode::Oneshot,
            BufferingMode::Circular,
            BufferingMode::Streaming,
        ] {
            let size = pages * 4096;
            let g = BufferGeometry::compute(mode, size).unwrap();
            assert_eq!(g.durable_buffer_size % 8, 0);
            assert_eq!(g.rolling_buffer_size % 8, 0);
            let h = HeaderFields::initial(&g, 0);
            assert_eq!(h.validate(size), Ok(g), "{mode:?} {size}");
        }
    }
}

// === layout ===

#[test]
fn header_fields_sit_at_the_spec_offsets_in_shared_memory() {
    let buffer = TraceBuffer::create(4096).unwrap();
    let header = buffer.header();
    let fields = HeaderFields {
        magic: MAGIC,
        version: 0,
        buffering_mode: BufferingMode::Streaming as u8,
        reserved1: 0,
        wrapped_count: 0xa1b2_c3d4,
        total_size: 4096,
        durable_buffer_size: 256,
        rolling_buffer_size: 1856,
        durable_data_end: 40,
        rolling_data_end: [48, 56],
        num_records_dropped: 64,
        reserved: [72, 80, 0, 0, 0, 0, 0],
    };
    header.store(&fields);
    let mut raw = [0u8; 128];
    buffer.read_at(0, &mut raw).unwrap();
    let word = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().unwrap());
    assert_eq!(word(0), 0x627566ee68656164, "magic at 0");
    assert_eq!(u16::from_le_bytes([raw[8], raw[9]]), 0, "version at 8");
    assert_eq!(raw[10], 2, "buffering_mode at 10");
    assert_eq!(
        u32::from_le_bytes(raw[12..16].try_into().unwrap()),
        0xa1b2_c3d4,
        "wrapped at 12"
    );
    assert_eq!(
        (word(16), word(24), word(32)),
        (4096, 256, 1856),
        "sizes at 16/24/32"
    );
    assert_eq!(word(40), 40, "durable_data_end at 40");
    assert_eq!((word(48), word(56)), (48, 56), "rolling_data_end at 48/56");
    assert_eq!(word(64), 64, "num_records_dropped at 64");
    assert_eq!(word(72), 72, "fxtrace chunk size at 72");
    assert_eq!(word(80), 80, "fxtrace flags at 80");
    assert_eq!(std::mem::size_of::<SharedHeader>(), 128);
    assert_eq!(header.load(), fields);
    assert_eq!(HeaderFields::from_bytes(&raw), fields);
}

// === validation (`BufferHeaderReader::Validate`) ===

fn valid(mode: BufferingMode, size: u64) -> HeaderFields {
    HeaderFields::initial(&BufferGeometry::compute(mode, size).unwrap(), 0)
}

#[test]
fn validation_rejects_each_spec_error() {
    let size = 1 << 20;
    let base = valid(BufferingMode::Circular, size);
    let check = |h: HeaderFields, actual: u64| h.validate(actual).unwrap_err();

    assert_eq!(
        check(HeaderFields { magic: 1, ..base }, size),
        HeaderError::BadMagic(1)
    );
    assert_eq!(
        check(HeaderFields { version: 1, ..base }, size),
        HeaderError::BadVersion(1)
    );
    assert_eq!(check(base, size + 4), HeaderError::SizeUnaligned(size + 4));
    assert_eq!(
        check(
            HeaderFields {
                buffering_mode: 3,
                ..base
            },
            size
        ),
        HeaderError::BadBufferingMode(3)
    );
    assert_eq!(
        check(base, size + 8),
        HeaderError::TotalSizeMismatch {
            header: size,
            actual: size + 8
        }
    );
    assert!(matches!(
        check(
            HeaderFields {
                rolling_buffer_size: 491455,
                ..base
            },
            size
        ),
        HeaderError::FieldUnaligned {
            field: "rolling_buffer_size",
            ..
        }
    ));
    assert!(matches!(
        check(
            HeaderFields {
                durable_buffer_size: 65535,
                ..base
            },
            size
        ),
        HeaderError::FieldUnaligned {
            field: "durable_buffer_size",
            ..
        }
    ));
    // rolling >= size/2
    let h = HeaderFields {
        rolling_buffer_size: size / 2,
        durable_buffer_size: 0,
        ..base
    };
    assert!(matches!(check(h, size), HeaderError::BadGeometry { .. }));
    // durable >= rolling
    let h = HeaderFields {
        durable_buffer_size: 491456,
        ..base
    };
    assert!(matches!(check(h, size), HeaderError::BadGeometry { .. }));
    // gap: 128 + durable + 2*rolling != size
    let h = HeaderFields {
        durable_buffer_size: 65536 - 16,
        ..base
    };
    assert!(matches!(check(h, size), HeaderError::BadGeometry { .. }));
    // oneshot
    let one = valid(BufferingMode::Oneshot, size);
    assert_eq!(
        one.validate(size).map(|g| g.rolling_buffer_size),
        Ok(size - 128)
    );
    assert!(matches!(
        check(
            HeaderFields {
                durable_buffer_size: 8,
                ..one
            },
            size
        ),
        HeaderError::BadOneshotGeometry { .. }
    ));
    assert!(matches!(
        check(
            HeaderFields {
                rolling_buffer_size: size - 136,
                ..one
            },
            size
        ),
        HeaderError::BadOneshotGeometry { .. }
    ));
    // data ends
    let h = HeaderFields {
        rolling_data_end: [0, 491464],
        ..base
    };
    assert_eq!(
        check(h, size),
        HeaderError::BadRollingDataEnd {
            index: 1,
            value: 491464
        }
    );
    let h = HeaderFields {
        rolling_data_end: [12, 0],
        ..base
    };
    assert_eq!(
        check(h, size),
        HeaderError::BadRollingDataEnd {
            index: 0,
            value: 12
        }
    );
    let h = HeaderFields {
        durable_data_end: 65544,
        ..base
    };
    assert_eq!(check(h, size), HeaderError::BadDurableDataEnd(65544));
    let h = HeaderFields {
        durable_data_end: 4,
        ..base
    };
    assert_eq!(check(h, size), HeaderError::BadDurableDataEnd(4));
    // boundaries accepted
    let h = HeaderFields {
        rolling_data_end: [491456, 491456],
        durable_data_end: 65536,
        ..base
    };
    assert!(h.validate(size).is_ok());
}

#[test]
fn fxtrace_extension_validation() {
    let mut h = valid(BufferingMode::Circular, 4096);
    for good in [0u64, 16, 64, 256, 1856] {
        h.reserved[0] = good;
        assert_eq!(h.validate_fxtrace_extension(), Ok(()), "{good}");
    }
    for bad in [8u64, 20, 1864, 1 << 20] {
        h.reserved[0] = bad;
        assert_eq!(
            h.validate_fxtrace_extension(),
            Err(HeaderError::BadChunkSize(bad))
        );
    }
}

// === record scan ===

fn event(words: u64, fill: u64) -> Vec<u64> {
    let mut record = vec![4 | (words << 4)];
    record.extend((1..words).map(|i| fill + i));
    record
}

fn bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn scan_all(buf: &[u8], end: u64, framing: Framing) -> (Vec<u8>, ChunkScanStop, ScanStats) {
    let mut out = Vec::new();
    let (stop, stats) = copy_records(buf, end, framing, &mut out).unwrap();
    (out, stop, stats)
}

#[test]
fn dense_scan_stops_at_a_zero_word() {
    let mut words = event(3, 100);
    words.extend(event(2, 200));
    words.extend([0, 0, 0xdead_beef, 0]); // zero tail with garbage after it
    let buf = bytes(&words);
    let (out, stop, stats) = scan_all(&buf, buf.len() as u64, Framing::Dense);
    assert_eq!(out, bytes(&words[..5]));
    assert_eq!(stop, ChunkScanStop::Complete);
    assert_eq!(stats.records, 2);
    assert_eq!(stats.skipped_bytes, 32);
}

#[test]
fn dense_scan_includes_a_record_ending_exactly_at_the_end() {
    let mut words = event(3, 0);
    words.extend(event(5, 10));
    let buf = bytes(&words);
    let (out, stop, stats) = scan_all(&buf, buf.len() as u64, Framing::Dense);
    assert_eq!(out, buf, "the last record ends at the data end and is kept");
    assert_eq!(stop, ChunkScanStop::Complete);
    assert_eq!(stats.records, 2);
    // With a data end one word short, that record is malformed (runs past the end).
    let (out, stop, _) = scan_all(&buf, buf.len() as u64 - 8, Framing::Dense);
    assert_eq!(out, bytes(&words[..3]));
    assert_eq!(
        stop,
        ChunkScanStop::Malformed(FramingError {
            offset: 24,
            kind: FramingErrorKind::PastEnd {
                header: words[3],
                words: 5,
                available: 32
            }
        })
    );
}

#[test]
fn dense_scan_reports_a_zero_size_record_offset() {
    let mut words = event(2, 0);
    words.push(4); // type 4, size 0
    words.extend(event(2, 0));
    let buf = bytes(&words);
    let (out, stop, _) = scan_all(&buf, buf.len() as u64, Framing::Dense);
    assert_eq!(out, bytes(&words[..2]));
    assert_eq!(
        stop,
        ChunkScanStop::Malformed(FramingError {
            offset: 16,
            kind: FramingErrorKind::ZeroSize { header: 4 }
        })
    );
}

#[test]
fn scan_argument_errors() {
    let buf = [0u8; 64];
    assert!(matches!(
        scan_records(&buf, 72, Framing::Dense),
        Err(ChunkFramingError::BadDataEnd { .. })
    ));
    assert!(matches!(
        scan_records(&buf, 12, Framing::Dense),
        Err(ChunkFramingError::BadDataEnd { .. })
    ));
    let framing = Framing::Chunked {
        chunk_size: 12,
        wrapped_count: 0,
    };
    assert!(matches!(
        scan_records(&buf, 64, framing),
        Err(ChunkFramingError::BadChunkSize(12))
    ));
}

/// Lay out chunks of `chunk` bytes: each entry is (tag, words in the chunk after the tag).
fn chunked(chunk: usize, chunks: &[(u64, Vec<u64>)], total: usize) -> Vec<u8> {
    let mut buf = vec![0xabu8; total]; // stale garbage everywhere
    let mut pos = 0;
    for (tag, words) in chunks {
        let mut w = vec![*tag];
        w.extend(words);
        let b = bytes(&w);
        buf[pos..pos + b.len()].copy_from_slice(&b);
        let run = parse_chunk_tag(*tag).map_or(1, |(_, n)| n as usize);
        pos += chunk * run;
    }
    buf
}

#[test]
fn chunked_scan_skips_tails_tags_and_stale_chunks() {
    let c = 64usize; // 8 words: tag + 7
    let wc = 5u32;
    let mut a = event(3, 1);
    a.extend(event(2, 2));
    a.push(0); // terminator, then stale bytes
    let b = event(7, 3); // fills its chunk exactly
    let stale = event(3, 4);
    let mut d = event(4, 5);
    d.push(0);
    let buf = chunked(
        c,
        &[
            (make_chunk_tag(wc, 1), a.clone()),
            (make_chunk_tag(wc, 1), b.clone()),
            (make_chunk_tag(wc - 2, 1), stale), // previous lap
            (make_chunk_tag(wc, 1), d.clone()),
            (0x1234, vec![0x5678]), // not a tag at all
        ],
        5 * c + 40, // a short last chunk
    );
    let framing = Framing::Chunked {
        chunk_size: c as u64,
        wrapped_count: wc,
    };
    let (out, stop, stats) = scan_all(&buf, buf.len() as u64, framing);
    let mut expect = a[..5].to_vec();
    expect.extend(&b);
    expect.extend(&d[..4]);
    assert_eq!(out, bytes(&expect));
    assert_eq!(stop, ChunkScanStop::Complete);
    assert_eq!(stats.records, 4);
    assert_eq!(
        stats.skipped_chunks, 3,
        "previous lap, not a tag, untagged short last chunk"
    );
    assert!(
        !out.chunks_exact(8).any(|w| w == [0u8; 8]),
        "no zero header words in the output"
    );
}

#[test]
fn chunked_scan_follows_multi_chunk_runs_and_short_last_chunks() {
    let c = 32usize; // tag + 3 words
    let wc = 0u32;
    let big = event(10, 7); // needs a run of 3 chunks (tag + 10 words = 88 bytes)
    let mut after = event(1, 0);
    after.push(0);
    let mut buf = vec![0u8; 5 * c + 16];
    let mut run = vec![make_chunk_tag(wc, 3)];
    run.extend(&big);
    buf[..run.len() * 8].copy_from_slice(&bytes(&run));
    let mut single = vec![make_chunk_tag(wc, 1)];
    single.extend(&after);
    buf[3 * c..3 * c + single.len() * 8].copy_from_slice(&bytes(&single));
    // Short last chunk (16 bytes): tag + one 1-word record ending at the buffer end.
    let last = [make_chunk_tag(wc, 1), 1 << 4 | 4];
    buf[5 * c..].copy_from_slice(&bytes(&last));
    let framing = Framing::Chunked {
        chunk_size: c as u64,
        wrapped_count: wc,
    };
    let (out, stop, stats) = scan_all(&buf, buf.len() as u64, framing);
    let mut expect = big.clone();
    expect.push(after[0]);
    expect.push(last[1]);
    assert_eq!(out, bytes(&expect));
    assert_eq!(stop, ChunkScanStop::Complete);
    assert_eq!(stats.records, 3);
    assert_eq!(stats.skipped_chunks, 1, "chunk 4 was never tagged");
}

#[test]
fn chunked_scan_rejects_a_record_crossing_its_chunk() {
    let c = 32usize;
    let mut words = vec![make_chunk_tag(1, 1)];
    words.extend(event(2, 0));
    words.push(4 | (2 << 4)); // 2 words from word 3 of a 4-word chunk: crosses into chunk 1
    let mut buf = bytes(&words);
    buf.resize(2 * c, 0);
    let framing = Framing::Chunked {
        chunk_size: c as u64,
        wrapped_count: 1,
    };
    let (out, stop, _) = scan_all(&buf, buf.len() as u64, framing);
    assert_eq!(out, bytes(&event(2, 0)));
    assert_eq!(
        stop,
        ChunkScanStop::Malformed(FramingError {
            offset: 24,
            kind: FramingErrorKind::PastEnd {
                header: 4 | (2 << 4),
                words: 2,
                available: 8
            }
        })
    );
}

#[test]
fn scan_yields_contiguous_runs() {
    let c = 64usize;
    let mut a = event(2, 0);
    a.extend(event(2, 1));
    a.push(0);
    let buf = chunked(
        c,
        &[
            (make_chunk_tag(0, 1), a),
            (make_chunk_tag(0, 1), event(7, 2)),
        ],
        2 * c,
    );
    let framing = Framing::Chunked {
        chunk_size: c as u64,
        wrapped_count: 0,
    };
    let runs: Vec<(usize, usize)> = scan_records(&buf, buf.len() as u64, framing)
        .unwrap()
        .map(|run| {
            (
                run.bytes().as_ptr() as usize - buf.as_ptr() as usize,
                run.len(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        vec![(8, 32), (72, 56)],
        "one run per chunk, tags excluded"
    );
}

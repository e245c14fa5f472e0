//! The XRay reader on damaged input: truncated real logs keep every event before the
//! cut and report where decoding stopped; random and mutated bytes never panic.

use std::path::PathBuf;

use fxtrace_tools::convert::xray::llvm_yaml::parse_flow_mapping;
use fxtrace_tools::convert::xray::{
    import, read_log, write_fxt, FileHeader, ImportOptions, InstrMap, XrayErrorKind, XrayEventKind,
    XrayLog,
};
use proptest::prelude::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(crate::WORKSPACE)
        .join("tests/fixtures/xray")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every thread of `part` is a prefix of the same thread in `full`. The last event may
/// miss arguments whose records were cut off, nothing else. (A thread cut before its
/// Pid record has no pid yet, so threads are matched by tid.)
fn assert_prefix(part: &XrayLog, full: &XrayLog, cut: usize) {
    for t in &part.threads {
        let whole = full
            .threads
            .iter()
            .find(|f| f.tid == t.tid)
            .expect("thread exists in full log");
        let n = t.events.len();
        assert!(n <= whole.events.len(), "cut {cut}");
        if n == 0 {
            continue;
        }
        assert_eq!(
            t.events[..n - 1],
            whole.events[..n - 1],
            "cut {cut}: events of thread {} are a prefix",
            t.tid
        );
        let (a, b) = (&t.events[n - 1], &whole.events[n - 1]);
        assert_eq!(
            (a.tsc, a.cpu, a.tid, a.kind.func_id()),
            (b.tsc, b.cpu, b.tid, b.kind.func_id()),
            "cut {cut}"
        );
        match (&a.kind, &b.kind) {
            (
                XrayEventKind::EnterWithArgs { args: x, .. },
                XrayEventKind::EnterWithArgs { args: y, .. },
            ) => {
                assert!(y.starts_with(x), "cut {cut}")
            }
            (x, y) => assert_eq!(x, y, "cut {cut}"),
        }
    }
}

/// [`import`] (two passes, no event kept) writes what [`read_log`] then [`write_fxt`] write,
/// byte for byte, with the same counts, events and error; and calls `release` as it reads.
fn assert_import_matches(data: &[u8]) -> Result<(), TestCaseError> {
    let header = FileHeader::parse(data).expect("a valid header");
    let log = read_log(data).expect("a valid header");
    let options = ImportOptions::new("xray-log.app.a1B2c3");
    let mut expected = Vec::new();
    let stats = write_fxt(&log, &options, &mut expected);
    let mut got = Vec::new();
    let imported = import(data, &header, &options, &mut got, &mut || {});
    match (stats, imported) {
        (Ok(stats), Ok(imported)) => {
            prop_assert!(
                got == expected,
                "{} bytes, expected {}",
                got.len(),
                expected.len()
            );
            prop_assert_eq!(imported.stats, stats);
            prop_assert_eq!(imported.events, log.event_count() as u64);
            prop_assert_eq!(imported.error, log.error);
        }
        (Err(_), Err(_)) => {}
        (stats, imported) => prop_assert!(false, "{stats:?} but {imported:?}"),
    }
    Ok(())
}

#[test]
fn import_writes_what_read_log_and_write_fxt_write() {
    for name in ["fdr-v5.xray", "basic-v3.xray"] {
        let data = fixture(name);
        assert_import_matches(&data).unwrap();
        // Cut anywhere: the same partial output and the same error.
        for cut in (32..data.len()).step_by(37) {
            assert_import_matches(&data[..cut]).unwrap();
        }
    }
}

#[test]
fn truncated_fdr_log_keeps_everything_before_the_cut() {
    let data = fixture("fdr-v5.xray");
    let full = read_log(&data).unwrap();
    assert!(full.is_complete());
    // Offsets where a BufferExtents-delimited buffer ends: cutting there leaves a valid log.
    let mut boundaries = vec![32];
    let mut pos = 32;
    while pos < data.len() {
        let size = u64::from_le_bytes(data[pos + 1..pos + 9].try_into().unwrap()) as usize;
        pos += 16 + size;
        boundaries.push(pos);
    }
    assert_eq!(pos, data.len());
    let mut kept_events = Vec::new();
    for cut in 0..data.len() {
        let part = &data[..cut];
        match read_log(part) {
            Err(e) => {
                assert!(cut < 32, "only a short header is fatal (cut {cut})");
                assert_eq!(e.kind, XrayErrorKind::TooShortForHeader { len: cut });
            }
            Ok(log) => {
                match &log.error {
                    None => assert!(
                        boundaries.contains(&cut),
                        "cut {cut} inside a buffer must be reported"
                    ),
                    Some(e) => {
                        assert!(
                            !boundaries.contains(&cut),
                            "cut {cut} at a buffer boundary is a valid log: {e}"
                        );
                        assert!(
                            e.offset as usize <= cut,
                            "error offset {} beyond the data ({cut})",
                            e.offset
                        );
                        assert!(e.offset >= 32);
                        assert!(
                            matches!(e.kind, XrayErrorKind::Truncated { .. }),
                            "cut {cut}: {e}"
                        );
                    }
                }
                assert_prefix(&log, &full, cut);
                kept_events.push(log.event_count());
            }
        }
    }
    // More data never means fewer events.
    assert!(kept_events.windows(2).all(|w| w[0] <= w[1]));
    // Cutting the last byte loses only the last record, which holds at most one event.
    assert!(*kept_events.last().unwrap() + 1 >= full.event_count());
}

#[test]
fn truncated_basic_log_keeps_whole_records() {
    let data = fixture("basic-v3.xray");
    let full = read_log(&data).unwrap();
    assert!(full.is_complete());
    for cut in 32..data.len() {
        let log = read_log(&data[..cut]).unwrap();
        let whole_records = (cut - 32) / 32;
        if (cut - 32) % 32 == 0 {
            assert_eq!(log.error, None, "cut {cut}");
        } else {
            let e = log.error.clone().expect("partial record reported");
            assert_eq!(e.offset as usize, 32 + whole_records * 32, "cut {cut}");
        }
        assert_eq!(log.stats.records as usize, whole_records);
        assert_prefix(&log, &full, cut);
    }
}

#[test]
fn corrupted_record_kind_is_reported_at_its_offset() {
    let mut data = fixture("fdr-v5.xray");
    // Offset 32 + 16 (extents) + 16 (NewBuffer) is the WallTimeMarker of the first buffer;
    // make it metadata kind 10, which does not exist.
    let at = 32 + 16 + 16;
    data[at] = (10 << 1) | 1;
    let log = read_log(&data).unwrap();
    let e = log.error.clone().expect("error");
    assert_eq!(
        (e.offset as usize, e.kind),
        (at, XrayErrorKind::UnknownMetadataKind { kind: 10 })
    );
    assert_eq!(log.event_count(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(log) = read_log(&data) {
            if let Some(e) = &log.error {
                prop_assert!(e.offset as usize <= data.len());
            }
        }
        let _ = InstrMap::from_bytes(&data);
    }

    #[test]
    fn random_bodies_behind_valid_headers_never_panic(
        version in 1u16..=5,
        fdr in any::<bool>(),
        buffer_size in prop_oneof![Just(0u64), 1u64..512, Just(u64::MAX)],
        body in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        let mut data = Vec::new();
        data.extend_from_slice(&(if fdr { version } else { 1 + version % 3 }).to_le_bytes());
        data.extend_from_slice(&u16::from(fdr).to_le_bytes());
        data.extend_from_slice(&3u32.to_le_bytes());
        data.extend_from_slice(&1_000_000_000u64.to_le_bytes());
        data.extend_from_slice(&buffer_size.to_le_bytes());
        data.extend_from_slice(&[0; 8]);
        data.extend_from_slice(&body);
        let log = read_log(&data).expect("valid header");
        if let Some(e) = &log.error {
            prop_assert!(e.offset as usize <= data.len());
        }
        assert_import_matches(&data)?;
    }

    #[test]
    fn mutated_real_logs_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        basic in any::<bool>(),
    ) {
        let mut data = fixture(if basic { "basic-v3.xray" } else { "fdr-v5.xray" });
        for (i, byte) in flips {
            let at = 32 + i.index(data.len() - 32); // keep the header: exercise the body
            data[at] = byte;
        }
        let log = read_log(&data).expect("header untouched");
        if let Some(e) = &log.error {
            prop_assert!(e.offset as usize <= data.len());
        }
        assert_import_matches(&data)?;
    }

    #[test]
    fn random_yaml_lines_never_panic(line in "[-{}\\[\\]:,'\" a-z0-9\\\\x]{0,80}") {
        let _ = parse_flow_mapping(&line);
        let _ = InstrMap::from_yaml(&line);
    }
}

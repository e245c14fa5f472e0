//! `fxtrace stats` on a valid, a truncated and a garbage file.

use crate::write_all_records;

use std::process::{Command, Output};

fn stats(path: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .arg("stats")
        .arg(path)
        .output()
        .expect("run fxtrace")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn stats_valid_file() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_all_records::build_trace().unwrap();
    let path = dir.path().join("all.fxt");
    std::fs::write(&path, &trace).unwrap();
    let out = stats(&path);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for expected in [
        format!("bytes: {0} ({0} in well-formed records)", trace.len()),
        "records: 38".to_string(),
        "  event                  13".to_string(),
        "  large_blob             2".to_string(),
        "events: 13".to_string(),
        "  instant                3".to_string(),
        "  flow_step              1".to_string(),
        "providers: 2".to_string(),
        "  1      \"alpha\"  records dropped (buffer overflow; count not recorded)".to_string(),
        "  2      \"beta\"".to_string(),
        "records dropped while tracing: 0 counted, more not counted (a buffer overflowed \
         without a recorded count)"
            .to_string(),
        "provider event: provider 1 event 0 (buffer overflow, records likely dropped) x1"
            .to_string(),
        "skipped: 0 records, 0 arguments of unknown type".to_string(),
        "time span: 1000 ns .. 20000 ns (19000 ns)".to_string(),
        "status: ok".to_string(),
    ] {
        assert!(
            stdout.lines().any(|l| l == expected),
            "missing {expected:?} in\n{stdout}"
        );
    }
}

#[test]
fn stats_truncated_file_reports_the_good_part_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_all_records::build_trace().unwrap();
    let path = dir.path().join("cut.fxt");
    std::fs::write(&path, &trace[..1000]).unwrap();
    let out = stats(&path);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("bytes: 1000 (960 in well-formed records)"),
        "{stdout}"
    );
    assert!(stdout.contains("records: 22\n"), "{stdout}");
    assert!(
        stdout.contains("time span: 1000 ns .. 13000 ns (12000 ns)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("status: damaged: at byte offset 960: record header"),
        "{stdout}"
    );
    assert!(text(&out.stderr).starts_with(&format!("{}: at byte offset 960:", path.display())));
}

#[test]
fn stats_garbage_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.fxt");
    std::fs::write(&path, [0xffu8; 64]).unwrap();
    let out = stats(&path);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("records: 0\n"), "{stdout}");
    assert!(stdout.contains("status: damaged: not an FXT trace (first word is 0xffffffffffffffff"));
    assert!(text(&out.stderr).contains(
        "not an FXT trace (first word is 0xffffffffffffffff, expected magic 0x0016547846040010)"
    ));
}

#[test]
fn stats_prints_the_wall_clock_span_from_the_archives_anchor() {
    use fxtrace_format::{Event, EventKind, RecordWriter, StringRef, ThreadRef};
    use fxtrace_tools::read::wall::WallClock;

    // The anchor: 2026-11-28 23:57:01 UTC at tick 1 000 000 (1 GHz); events 1 ms and 3.5 ms
    // of trace time after it.
    let anchor = WallClock {
        ticks: 1_000_000,
        ticks_per_second: 1_000_000_000,
        realtime_ns: 1_795_910_221_000_000_000,
        monotonic_ns: 0,
        boottime_ns: 0,
    };
    let mut words = vec![fxtrace_format::MAGIC_WORD];
    words.extend(anchor.record_words(1).unwrap());
    let mut w = RecordWriter::new();
    for ticks in [2_000_000, 4_500_000] {
        w.push(&Event {
            ticks,
            thread: ThreadRef::Inline { pid: 1, tid: 1 },
            category: StringRef::Inline("c"),
            name: StringRef::Inline("e"),
            args: &[],
            kind: EventKind::Instant,
        })
        .unwrap();
    }
    words.extend_from_slice(w.words());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("anchored.fxt");
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    let out = stats(&path);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            "wall clock: 2026-11-28 23:57:01.001000 UTC .. 2026-11-28 23:57:01.003500 UTC"
        ),
        "{stdout}"
    );
    // Without an anchor, the line says so.
    let out = stats(&{
        let p = dir.path().join("plain.fxt");
        std::fs::write(&p, write_all_records::build_trace().unwrap()).unwrap();
        p
    });
    assert!(text(&out.stdout).contains("wall clock: not recorded"));
}

//! Executable mappings: `PERF_RECORD_MMAP` / `MMAP2` parsed from synthetic records laid out as
//! the perf ABI says (exact offsets, truncation errors with the byte offset), their FXT blob,
//! and an end-to-end per-process capture whose mappings match `/proc/PID/maps` (root).

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fxtrace::capture::records::{MISC_MMAP_BUILD_ID, MISC_MMAP_DATA, RECORD_MMAP, RECORD_MMAP2};
use fxtrace::capture::{
    Capture, CaptureConfig, CaptureEvent, EventAttr, KernelTraceConfig, KernelTraceWriter,
    MemoryMap, MmapFile, ParseError, PerfClock, PerfMmap, PerfRecord, RawData, RawRecord,
    RecordBytes, RecordLayout, TaskComm, TaskFork,
};
use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::mmap::{MmapRecord, MMAP_BLOB_NAME};
use fxtrace_format::{BlobType, DecodedRecord, Decoder, RecordWriter};

fn layout() -> RecordLayout {
    // The switch event's layout: sample_id_all with TID | TIME | CPU (24-byte trailer).
    RecordLayout::new(&EventAttr::process_switches(PerfClock::PerfDefault).with_mmaps(true))
        .unwrap()
}

fn parse(kind: u32, misc: u16, body: &[u8]) -> Result<PerfMmap, ParseError> {
    match layout().parse(&RawRecord {
        kind,
        misc,
        body: RawData::Single(body),
    })? {
        PerfRecord::Mmap(m) => Ok(m),
        other => panic!("not a mapping: {other:?}"),
    }
}

/// `u32 pid, tid; u64 addr, len, pgoff` — the part every mapping record starts with.
fn head() -> RecordBytes {
    RecordBytes::new()
        .u32(10)
        .u32(11)
        .u64(0x5555_5555_5000)
        .u64(0x3000)
        .u64(0x1000)
}

/// An MMAP2 body with the device/inode union, PROT_READ|PROT_EXEC, MAP_PRIVATE.
fn mmap2_inode() -> Vec<u8> {
    head()
        .u32(0xfd) // maj
        .u32(1) // min
        .u64(123_456) // ino
        .u64(7) // ino_generation
        .u32(5) // prot
        .u32(2) // flags
        .bytes(b"/usr/bin/prog\0")
        .pad8()
        .sample_id(10, 11, 9_000, 3)
        .build()
}

#[test]
fn mmap2_with_device_and_inode() {
    let body = mmap2_inode();
    // 8 (pid, tid) + 24 (addr, len, pgoff) + 24 (union) + 8 (prot, flags) + 16 (name) + 24.
    assert_eq!(body.len(), 104);
    let m = parse(RECORD_MMAP2, 0, &body).unwrap();
    assert_eq!((m.pid, m.tid), (10, 11));
    assert_eq!((m.addr, m.len, m.pgoff), (0x5555_5555_5000, 0x3000, 0x1000));
    assert_eq!(
        m.file,
        MmapFile::Inode {
            maj: 0xfd,
            min: 1,
            ino: 123_456,
            ino_generation: 7
        }
    );
    assert_eq!((m.prot, m.flags), (Some(5), Some(2)));
    assert_eq!(m.filename, b"/usr/bin/prog");
    assert_eq!((m.sample_id.time, m.sample_id.cpu), (Some(9_000), Some(3)));
    assert!(m.executable());
}

#[test]
fn mmap2_with_build_id() {
    let mut id = [0u8; 24];
    id[0] = 20; // build_id_size, then u8 + u16 reserved
    for (i, b) in id[4..].iter_mut().enumerate() {
        *b = i as u8 + 1;
    }
    let body = head()
        .bytes(&id)
        .u32(1) // PROT_READ only: not executable
        .u32(2)
        .bytes(b"[vdso]\0\0")
        .sample_id(10, 11, 9_000, 3)
        .build();
    let m = parse(RECORD_MMAP2, MISC_MMAP_BUILD_ID, &body).unwrap();
    assert_eq!(m.file, MmapFile::BuildId((1..=20).collect()));
    assert_eq!(m.filename, b"[vdso]");
    assert!(!m.executable());
}

#[test]
fn mmap_version_one() {
    let body = head()
        .bytes(b"/lib/x.so\0")
        .pad8()
        .sample_id(10, 11, 9_000, 3)
        .build();
    let m = parse(RECORD_MMAP, 0, &body).unwrap();
    assert_eq!(m.file, MmapFile::Unknown);
    assert_eq!((m.prot, m.flags), (None, None));
    assert_eq!(m.filename, b"/lib/x.so");
    assert!(m.executable());
    assert!(!parse(RECORD_MMAP, MISC_MMAP_DATA, &body)
        .unwrap()
        .executable());
}

#[test]
fn truncated_records_name_the_field_and_its_offset() {
    let full = mmap2_inode();
    let trailer = 24;
    // Cut the fixed part at each field boundary (keeping the trailer): the error names the
    // first missing field at its offset from the record start (8-byte header included).
    for (keep, field, offset) in [
        (0, "pid", 8),
        (4, "tid", 12),
        (8, "addr", 16),
        (16, "len", 24),
        (24, "pgoff", 32),
        (32, "maj", 40),
        (40, "ino", 48),
        (44, "ino", 48),
        (56, "prot", 64),
        (60, "flags", 68),
        (64, "filename", 72),
    ] {
        let mut body = full[..keep].to_vec();
        body.extend_from_slice(&full[full.len() - trailer..]);
        assert_eq!(
            parse(RECORD_MMAP2, 0, &body),
            Err(ParseError::TruncatedAt {
                record: "mmap2",
                field,
                offset
            }),
            "kept {keep} bytes"
        );
    }
    // Shorter than the trailer itself.
    assert!(matches!(
        parse(RECORD_MMAP2, 0, &full[..10]),
        Err(ParseError::Truncated {
            record: "mmap2",
            field: "sample_id"
        })
    ));
    let err = parse(RECORD_MMAP2, 0, &full[full.len() - trailer..]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "truncated mmap2 record: missing pid at byte 8"
    );
}

fn trace_config() -> KernelTraceConfig {
    KernelTraceConfig {
        provider_id: 1,
        provider_name: "kernel".into(),
        ticks_per_second: 1_000_000_000,
        start_ticks: 0,
        recorder: (1, 1),
    }
}

/// A decoded mapping blob: pid, time, start, pgoff, build-id, path.
type Blob = (u32, u64, u64, u64, Option<Vec<u8>>, Vec<u8>);

/// The `"fxtrace:mmap"` blobs of an encoded trace, decoded.
fn mmap_blobs(bytes: &[u8]) -> Vec<Blob> {
    Decoder::new(bytes)
        .filter_map(|d| match d.unwrap().record {
            DecodedRecord::Blob {
                name,
                blob_type,
                payload,
            } if name == MMAP_BLOB_NAME => {
                assert_eq!(blob_type, BlobType::DATA);
                let m = MmapRecord::decode(&payload).unwrap();
                Some((
                    m.pid,
                    m.time,
                    m.start,
                    m.pgoff,
                    m.build_id.map(<[u8]>::to_vec),
                    m.path.to_vec(),
                ))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn kernel_trace_writer_writes_a_mapping_blob() {
    let mut w = KernelTraceWriter::new(RecordWriter::with_magic(), trace_config()).unwrap();
    let map = MemoryMap {
        time: 500,
        pid: 10,
        tid: 11,
        start: 0x7f00_0000_1000,
        len: 0x2000,
        pgoff: 0x1000,
        path: b"/lib/libc.so.6".to_vec(),
        build_id: Some(vec![1, 2, 3]),
        synthesized: false,
    };
    w.handle(&CaptureEvent::Mmap(map.clone())).unwrap();
    let long = MemoryMap {
        path: vec![b'/'; 5000],
        build_id: None,
        ..map
    };
    w.handle(&CaptureEvent::Mmap(long)).unwrap();
    let (sink, stats) = w.finish().unwrap();
    assert_eq!(stats.mmap_blobs, 2);
    assert_eq!(
        stats.mmaps_truncated, 1,
        "the 5000-byte path is cut to 4096"
    );
    let blobs = mmap_blobs(&sink.to_bytes());
    assert_eq!(
        blobs[0],
        (
            10,
            500,
            0x7f00_0000_1000,
            0x1000,
            Some(vec![1, 2, 3]),
            b"/lib/libc.so.6".to_vec()
        )
    );
    assert_eq!(blobs[1].5.len(), 4096);

    // `fxtrace dump` prints it readably …
    let bytes = sink.to_bytes();
    let line = Decoder::new(&bytes)
        .map(|d| d.unwrap().to_string())
        .find(|l| l.contains(" mmap pid="))
        .unwrap();
    assert!(
        line.ends_with(
            "mmap pid=10 time=500ns 0x7f0000001000-0x7f0000003000 pgoff=0x1000 build_id=010203 \
             /lib/libc.so.6"
        ),
        "{line}"
    );
    // … and Perfetto's importer skips it without complaint.
    let report = fxtrace_tools::check::perfetto::check_for_perfetto(&bytes[..]).unwrap();
    assert!(!report.has_violations(), "{report}");
}
/// A forked process starts with its parent's address space, which the kernel does not report
/// again: the writer copies the parent's mappings to the child at the fork (not for a new
/// thread), and an exec makes the process start over.
#[test]
fn a_forked_process_inherits_its_parents_mappings_until_it_execs() {
    let mut w = KernelTraceWriter::new(RecordWriter::with_magic(), trace_config()).unwrap();
    let map = |time, pid, start, path: &str| {
        CaptureEvent::Mmap(MemoryMap {
            time,
            pid,
            tid: pid,
            start,
            len: 0x1000,
            pgoff: 0,
            path: path.as_bytes().to_vec(),
            build_id: None,
            synthesized: false,
        })
    };
    let fork = |time, pid, ppid| {
        CaptureEvent::Fork(TaskFork {
            time,
            pid,
            ppid,
            tid: pid + 1000 * u32::from(pid == ppid),
            ptid: ppid,
        })
    };
    let events = [
        map(100, 10, 0x1000, "/bin/server"),
        map(110, 10, 0x5000, "/lib/libc.so.6"),
        fork(200, 10, 10),                    // a thread: nothing to copy
        fork(300, 20, 10),                    // a process: both mappings copied at 300
        map(400, 10, 0x9000, "/lib/late.so"), // the parent's later mapping is its own
        CaptureEvent::Comm(TaskComm {
            time: 500,
            pid: 20,
            tid: 20,
            name: "true".into(),
            exec: true,
        }),
        map(510, 20, 0x2000, "/bin/true"),
        fork(600, 30, 20), // a child of the exec'd image: only its mapping
    ];
    for e in &events {
        w.handle(e).unwrap();
    }
    let (sink, stats) = w.finish().unwrap();
    let blobs: Vec<(u32, u64, u64, String)> = mmap_blobs(&sink.to_bytes())
        .into_iter()
        .map(|b| (b.0, b.1, b.2, String::from_utf8(b.5).unwrap()))
        .collect();
    let expected = [
        (10, 100, 0x1000, "/bin/server"),
        (10, 110, 0x5000, "/lib/libc.so.6"),
        (20, 300, 0x1000, "/bin/server"),
        (20, 300, 0x5000, "/lib/libc.so.6"),
        (10, 400, 0x9000, "/lib/late.so"),
        (20, 510, 0x2000, "/bin/true"),
        (30, 600, 0x2000, "/bin/true"),
    ]
    .map(|(pid, time, start, path)| (pid, time, start, path.to_string()));
    assert_eq!(blobs, expected);
    assert_eq!(stats.mmap_blobs, 7);
    assert_eq!(stats.mmaps_inherited, 3);
    assert_eq!(stats.mmaps_not_remembered, 0);
}

/// The first executable mapping of `pid`'s own executable in `/proc/PID/maps`.
fn exe_mapping(pid: u32) -> Option<(u64, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 6 && f[1].contains('x') && f[5].as_bytes() == exe.as_os_str().as_bytes())
            .then(|| {
                let start = u64::from_str_radix(f[0].split('-').next()?, 16).ok()?;
                Some((start, exe.as_os_str().as_bytes().to_vec()))
            })
            .flatten()
    })
}

/// A shell waiting on its standard input is traced; its mappings at the start come from
/// `/proc`, and the `exec` it then does is reported by the kernel (`PERF_RECORD_MMAP2`).
#[test]
fn per_process_capture_records_the_program_mappings() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(
            Requirement::Root,
            "needs root for per-process perf events on another process",
        );
        return;
    }
    let mut child = Command::new("sh")
        .args(["-c", "read line; exec true"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until the shell runs (its maps name its own executable).
    let mut exe = None;
    for _ in 0..200 {
        exe = exe_mapping(pid);
        if exe.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (exe_start, exe_path) = exe.expect("the shell's executable mapping");
    let events: Arc<Mutex<Vec<CaptureEvent>>> = Arc::default();
    let sink = events.clone();
    let config = CaptureConfig {
        poll_interval: Duration::from_millis(10),
        ..CaptureConfig::process(pid)
    };
    let capture = match Capture::start(config, move |e| sink.lock().unwrap().push(e)) {
        Ok(c) => c,
        Err(e) => {
            skip(
                Requirement::Perf,
                format!("per-process capture unavailable here: {e}"),
            );
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
    };
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(50));
    let stats = capture.stop().unwrap();
    let events = events.lock().unwrap().clone();

    // Through the kernel trace writer into an archive.
    let mut w = KernelTraceWriter::new(RecordWriter::with_magic(), trace_config()).unwrap();
    for e in &events {
        w.handle(e).unwrap();
    }
    let (sink, _) = w.finish().unwrap();
    let blobs = mmap_blobs(&sink.to_bytes());
    assert!(
        blobs
            .iter()
            .any(|b| b.0 == pid && b.2 == exe_start && b.5 == exe_path),
        "no blob for {} at {exe_start:#x}: {blobs:?}",
        String::from_utf8_lossy(&exe_path)
    );
    assert!(stats.mmaps_synthesized > 0 && stats.mmaps >= stats.mmaps_synthesized);
    let synthesized = events.iter().any(|e| {
        matches!(e, CaptureEvent::Mmap(m) if m.synthesized && m.start == exe_start && m.build_id.is_some())
    });
    assert!(synthesized, "the executable's mapping, with its build-id");
    // After `exec true`: the kernel reports true's mapping.
    let execed = events.iter().any(|e| {
        matches!(e, CaptureEvent::Mmap(m) if !m.synthesized && m.pid == pid && m.path.ends_with(b"/true"))
    });
    assert!(
        execed,
        "no MMAP2 record for true: {:?}",
        events
            .iter()
            .filter_map(|e| match e {
                CaptureEvent::Mmap(m) => Some(String::from_utf8_lossy(&m.path).into_owned()),
                _ => None,
            })
            .collect::<Vec<_>>()
    );
}

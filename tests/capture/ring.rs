//! The perf ring reader on synthetic rings served through the syscall seam (`FakeSys`): records
//! placed across the end of the ring, LOST records, corrupt headers, tail publication.

use std::sync::Arc;

use fxtrace::capture::records::{RECORD_COMM, RECORD_LOST, RECORD_SWITCH};
use fxtrace::capture::{
    EventAttr, FakeRing, FakeSys, PerfClock, PerfRecord, PerfRing, RawData, RecordBytes,
    RecordLayout, RingError, Sys,
};

const PAGES: usize = 1;

fn ring() -> (Arc<FakeSys>, PerfRing, FakeRing, RecordLayout) {
    let sys = FakeSys::new();
    let attr = EventAttr::process_switches(PerfClock::PerfDefault);
    let fd = sys.perf_event_open(&attr, 1, 0, None).unwrap();
    let dyn_sys: Arc<dyn Sys> = sys.clone();
    let ring = PerfRing::map(dyn_sys, fd, PAGES).unwrap();
    let producer = sys.ring(attr.kind(), 0).unwrap();
    (sys, ring, producer, RecordLayout::new(&attr).unwrap())
}

fn comm_body(pid: u32, tid: u32, name: &[u8], time: u64) -> Vec<u8> {
    RecordBytes::new()
        .u32(pid)
        .u32(tid)
        .bytes(name)
        .u32(0)
        .pad8()
        .sample_id(pid, tid, time, 1)
        .build()
}

#[test]
fn record_across_the_ring_end_is_a_split_view_and_parses() {
    let (_sys, mut ring, producer, layout) = ring();
    let size = producer.data_size();
    assert_eq!(size, 4096);
    // Header in the last 16 bytes, body wrapping to the start of the data area.
    assert!(producer.set_position(10 * size - 16));
    let body = comm_body(77, 78, b"wrapped-name", 123_456);
    assert!(producer.write_record(RECORD_COMM, 0, &body));
    assert_eq!(producer.head(), 10 * size - 16 + 8 + body.len() as u64);

    let mut reader = ring.reader();
    let rec = reader.next_record().unwrap().unwrap();
    assert_eq!(rec.kind, RECORD_COMM);
    match rec.body {
        RawData::Split(a, b) => {
            assert_eq!(a.len(), 8, "8 body bytes before the end");
            assert_eq!(b.len(), body.len() - 8);
        }
        RawData::Single(_) => panic!("expected a split record"),
    }
    assert_eq!(rec.body.to_vec(), body);
    match layout.parse(&rec).unwrap() {
        PerfRecord::Comm(c) => {
            assert_eq!((c.pid, c.tid), (77, 78));
            assert_eq!(c.name.as_bytes(), b"wrapped-name");
            assert_eq!(c.sample_id.time, Some(123_456));
            assert_eq!(c.sample_id.cpu, Some(1));
        }
        other => panic!("{other:?}"),
    }
    assert!(reader.next_record().is_none());
    drop(reader);
    assert_eq!(producer.tail(), producer.head(), "tail published on drop");
}

#[test]
fn header_straddling_nothing_body_starting_at_zero() {
    // The header fills the last 8 bytes; the body starts exactly at offset 0 (Single).
    let (_sys, mut ring, producer, layout) = ring();
    let size = producer.data_size();
    assert!(producer.set_position(size - 8));
    let body = RecordBytes::new().sample_id(5, 6, 99, 0).build();
    assert!(producer.write_record(RECORD_SWITCH, 0x2000, &body));
    let mut reader = ring.reader();
    let rec = reader.next_record().unwrap().unwrap();
    assert!(matches!(rec.body, RawData::Single(_)));
    match layout.parse(&rec).unwrap() {
        PerfRecord::Switch(s) => {
            assert!(s.out && !s.preempt && s.next_prev.is_none());
            assert_eq!((s.sample_id.pid, s.sample_id.tid), (Some(5), Some(6)));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn many_wraps_every_record_read_once_in_order() {
    let (_sys, mut ring, producer, layout) = ring();
    let mut next_expected = 0u64;
    let mut written = 0u64;
    // ~64-byte records through a 4 KiB ring: 20 batches of 50 wrap it many times.
    for _batch in 0..20 {
        for _ in 0..50 {
            let body = comm_body(1, 2, b"n", written);
            if !producer.write_record(RECORD_COMM, 0, &body) {
                break;
            }
            written += 1;
        }
        let mut reader = ring.reader();
        while let Some(rec) = reader.next_record() {
            let rec = rec.unwrap();
            match layout.parse(&rec).unwrap() {
                PerfRecord::Comm(c) => assert_eq!(c.sample_id.time, Some(next_expected)),
                other => panic!("{other:?}"),
            }
            next_expected += 1;
        }
        reader.commit();
    }
    assert_eq!(next_expected, written);
    assert!(
        written > 3 * 4096 / 64,
        "wrapped several times ({written} records)"
    );
}

#[test]
fn full_ring_refuses_until_the_reader_releases() {
    let (_sys, mut ring, producer, _layout) = ring();
    let body = vec![0u8; 1016]; // 1 KiB records
    for _ in 0..4 {
        assert!(producer.write_record(99, 0, &body));
    }
    assert!(!producer.write_record(99, 0, &body), "ring full");
    let mut reader = ring.reader();
    assert!(reader.next_record().unwrap().is_ok());
    // Not yet published: still full for the producer.
    assert!(!producer.write_record(99, 0, &body));
    reader.release_consumed();
    assert!(
        producer.write_record(99, 0, &body),
        "space released mid-batch"
    );
    // The reader's batch ends at the head it saw: 3 records left, not the new one.
    let mut left = 0;
    while let Some(r) = reader.next_record() {
        r.unwrap();
        left += 1;
    }
    assert_eq!(left, 3);
}

#[test]
fn lost_and_unknown_records() {
    let (_sys, mut ring, producer, layout) = ring();
    let lost = RecordBytes::new()
        .u64(7)
        .u64(42)
        .sample_id(0, 0, 5, 1)
        .build();
    assert!(producer.write_record(RECORD_LOST, 0, &lost));
    assert!(producer.write_record(200, 0, &[1, 2, 3]));
    let mut reader = ring.reader();
    match layout
        .parse(&reader.next_record().unwrap().unwrap())
        .unwrap()
    {
        PerfRecord::Lost {
            id,
            lost,
            sample_id,
        } => {
            assert_eq!((id, lost), (7, 42));
            assert_eq!(sample_id.time, Some(5));
        }
        other => panic!("{other:?}"),
    }
    match layout
        .parse(&reader.next_record().unwrap().unwrap())
        .unwrap()
    {
        PerfRecord::Unknown { kind, len } => assert_eq!((kind, len), (200, 8)),
        other => panic!("{other:?}"),
    }
}

fn header(kind: u32, size: u16) -> Vec<u8> {
    let mut h = kind.to_ne_bytes().to_vec();
    h.extend_from_slice(&0u16.to_ne_bytes());
    h.extend_from_slice(&size.to_ne_bytes());
    h
}

#[test]
fn corrupt_headers_are_reported_and_skipped_not_looped_on() {
    let cases: [(u16, usize, &str); 3] = [
        (0, 16, "size 0"),
        (40, 16, "size beyond the published bytes"),
        (12, 16, "size not a multiple of 8"),
    ];
    for (size, published, what) in cases {
        let (_sys, mut ring, producer, _layout) = ring();
        assert!(producer.write_record(RECORD_COMM, 0, &[0u8; 8]), "{what}");
        let mut bytes = header(RECORD_COMM, size);
        bytes.resize(published, 0);
        assert!(producer.write_bytes(&bytes));
        let mut reader = ring.reader();
        assert!(
            reader.next_record().unwrap().is_ok(),
            "{what}: the good record first"
        );
        match reader.next_record() {
            Some(Err(RingError::Corrupt { skipped, .. })) => {
                assert_eq!(skipped, published as u64, "{what}")
            }
            other => panic!("{what}: {other:?}"),
        }
        assert!(
            reader.next_record().is_none(),
            "{what}: resynchronised at the head"
        );
        drop(reader);
        assert_eq!(producer.tail(), producer.head(), "{what}");
        // The ring keeps working afterwards.
        assert!(producer.write_record(RECORD_COMM, 0, &[0u8; 8]));
        let mut reader = ring.reader();
        assert!(reader.next_record().unwrap().is_ok(), "{what}");
    }
}

#[test]
fn clock_parameters_come_from_the_control_page() {
    let sys = FakeSys::new();
    let attr = EventAttr::clock_probe();
    let fd = sys.perf_event_open(&attr, 0, -1, None).unwrap();
    let dyn_sys: Arc<dyn Sys> = sys.clone();
    let ring = PerfRing::map(dyn_sys.clone(), fd, 0).unwrap();
    assert_eq!(
        ring.tsc_conversion().unwrap(),
        None,
        "no cap_user_time_zero"
    );

    sys.set_clock(1000, 1 << 30, 31);
    let fd = sys.perf_event_open(&attr, 0, -1, None).unwrap();
    let ring = PerfRing::map(dyn_sys, fd, 0).unwrap();
    let c = ring.tsc_conversion().unwrap().unwrap();
    assert_eq!(
        (c.time_zero(), c.time_mult(), c.time_shift()),
        (1000, 1 << 30, 31)
    );
    // mult / 2^shift = 0.5 ns per tick.
    assert_eq!(c.tsc_to_perf(2000), 2000);
    assert_eq!(c.perf_to_tsc(2000), 2000);
}

#[test]
fn ring_size_must_be_a_power_of_two() {
    let sys = FakeSys::new();
    let attr = EventAttr::process_switches(PerfClock::PerfDefault);
    let fd = sys.perf_event_open(&attr, 1, 0, None).unwrap();
    let err = PerfRing::map(sys, fd, 3).unwrap_err();
    assert!(matches!(err, RingError::NotPowerOfTwo { data_pages: 3 }));
}

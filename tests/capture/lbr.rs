//! The LBR decoder on synthetic `PERF_RECORD_SAMPLE`s built from the kernel's
//! `perf_branch_entry` layout: `u64 from, u64 to, u64 flags` with flags bits
//! `mispred:1 predicted:1 in_tx:1 abort:1 cycles:16 type:4 spec:2 new_type:4 priv:3`.

use std::sync::Arc;

use fxtrace::capture::lbr::read_branch_stack;
use fxtrace::capture::records::RECORD_SAMPLE;
use fxtrace::capture::ring::RawCursor;
use fxtrace::capture::{
    BranchSampleFormat, BranchSampling, EventAttr, FakeSys, ParseError, PerfClock, PerfRecord,
    PerfRing, RawData, RawRecord, RecordBytes, RecordLayout, Sys,
};

/// A flags word from the kernel's bit positions.
fn flags(mispred: bool, predicted: bool, cycles: u16, branch_type: u8) -> u64 {
    u64::from(mispred)
        | (u64::from(predicted) << 1)
        | (u64::from(cycles) << 4)
        | (u64::from(branch_type) << 20)
}

/// `IP | TID | TIME | CPU | BRANCH_STACK` sample body with `n` entries (entry i: from 0x1000+i,
/// to 0x2000+i, cycles i, mispredicted when i is odd).
fn sample(n: u64, hw_idx: Option<u64>) -> RecordBytes {
    let mut b = RecordBytes::new()
        .u64(0xdead_beef) // ip
        .u32(100) // pid
        .u32(101) // tid
        .u64(5_000) // time
        .u32(1) // cpu
        .u32(0) // res
        .u64(n); // nr
    if let Some(idx) = hw_idx {
        b = b.u64(idx);
    }
    for i in 0..n {
        b = b
            .u64(0x1000 + i)
            .u64(0x2000 + i)
            .u64(flags(i % 2 == 1, i % 2 == 0, i as u16, 3));
    }
    b
}

fn lbr_layout(extra: BranchSampleFormat) -> RecordLayout {
    let attr = EventAttr::branch_sampling(BranchSampling::default(), PerfClock::PerfDefault);
    let format = attr.branch_format() | extra;
    let attr = attr.with_branch_format(format);
    RecordLayout::new(&attr).unwrap()
}

fn parse<'a>(layout: &RecordLayout, body: &'a [u8]) -> Result<PerfRecord<'a>, ParseError> {
    layout.parse(&RawRecord {
        kind: RECORD_SAMPLE,
        misc: 0,
        body: RawData::Single(body),
    })
}

#[test]
fn zero_one_and_thirty_two_entries() {
    let layout = lbr_layout(BranchSampleFormat::empty());
    for n in [0u64, 1, 32] {
        let body = sample(n, None).build();
        let rec = parse(&layout, &body).unwrap();
        let PerfRecord::Sample(s) = rec else {
            panic!("{rec:?}")
        };
        assert_eq!(
            (s.ip, s.pid, s.tid, s.time, s.cpu),
            (Some(0xdead_beef), Some(100), Some(101), Some(5000), Some(1))
        );
        let stack = s.branch_stack.unwrap();
        assert_eq!(stack.hw_idx, None);
        assert_eq!(stack.entries.len() as u64, n);
        for (i, e) in stack.entries.iter().enumerate() {
            assert_eq!((e.from, e.to), (0x1000 + i as u64, 0x2000 + i as u64));
            assert_eq!(e.cycles, i as u16);
            assert_eq!(e.mispred, i % 2 == 1, "entry {i}");
            assert_eq!(e.predicted, i % 2 == 0, "entry {i}");
            assert_eq!(e.branch_type, 3);
            assert!(!e.in_tx && !e.abort);
        }
    }
}

#[test]
fn hw_index_precedes_the_entries_when_requested() {
    let layout = lbr_layout(BranchSampleFormat::HW_INDEX);
    let body = sample(2, Some(7)).build();
    let PerfRecord::Sample(s) = parse(&layout, &body).unwrap() else {
        panic!()
    };
    let stack = s.branch_stack.unwrap();
    assert_eq!(stack.hw_idx, Some(7));
    assert_eq!(stack.entries[1].from, 0x1001);
    // Without the flag, the same bytes would be misread: the layout follows the attr.
    let plain = lbr_layout(BranchSampleFormat::empty());
    let body = sample(2, None).build();
    let PerfRecord::Sample(s) = parse(&plain, &body).unwrap() else {
        panic!()
    };
    assert_eq!(s.branch_stack.unwrap().entries[0].from, 0x1000);
}

#[test]
fn counters_after_the_entries_are_skipped() {
    let layout = lbr_layout(BranchSampleFormat::COUNTERS);
    let body = sample(2, None).u64(11).u64(22).build();
    let PerfRecord::Sample(s) = parse(&layout, &body).unwrap() else {
        panic!()
    };
    assert_eq!(s.branch_stack.unwrap().entries.len(), 2);
    // The stack with a word after it (what a sample's next field would be): read past the
    // counters, the cursor is at that word. (Skipping nothing, it would read counter 11.)
    let stack = RecordBytes::new()
        .u64(2)
        .u64(0x1000)
        .u64(0x2000)
        .u64(flags(false, true, 0, 3))
        .u64(0x1001)
        .u64(0x2001)
        .u64(flags(true, false, 1, 3))
        .u64(11)
        .u64(22)
        .u64(0xfeed)
        .build();
    let mut cur = RawCursor::new(RawData::Single(&stack));
    let read = read_branch_stack(&mut cur, BranchSampleFormat::COUNTERS).unwrap();
    assert_eq!(read.entries[1].from, 0x1001);
    assert_eq!(cur.u64(), Some(0xfeed), "the field after the counters");
    assert_eq!(cur.remaining(), 0);
}

#[test]
fn truncated_records_are_typed_errors() {
    let layout = lbr_layout(BranchSampleFormat::empty());
    let full = sample(32, None).build();
    // Claims 32 entries, holds 3.
    let short = &full[..32 + 8 + 3 * 24];
    assert!(matches!(
        parse(&layout, short),
        Err(ParseError::BranchCount { nr: 32, room: 72 })
    ));
    // Cut inside the fixed fields.
    assert!(matches!(
        parse(&layout, &full[..12]),
        Err(ParseError::Truncated {
            record: "sample",
            field: "tid"
        })
    ));
    // Cut before nr.
    assert!(matches!(
        parse(&layout, &full[..32]),
        Err(ParseError::Truncated {
            record: "branch stack",
            field: "nr"
        })
    ));
    // An absurd nr cannot make the decoder allocate or read beyond the record.
    let mut absurd = sample(0, None).build();
    let nr_at = 32;
    absurd[nr_at..nr_at + 8].copy_from_slice(&u64::MAX.to_ne_bytes());
    assert!(matches!(
        parse(&layout, &absurd),
        Err(ParseError::BranchCount { nr: u64::MAX, .. })
    ));
}

#[test]
fn a_sample_wrapping_the_ring_end_decodes() {
    let sys = FakeSys::new();
    let attr = EventAttr::branch_sampling(BranchSampling::default(), PerfClock::PerfDefault);
    let fd = sys.perf_event_open(&attr, -1, 0, None).unwrap();
    let dyn_sys: Arc<dyn Sys> = sys.clone();
    let mut ring = PerfRing::map(dyn_sys, fd, 1).unwrap();
    let producer = sys.ring(attr.kind(), 0).unwrap();
    // 32 entries = 808-byte body; start 200 bytes before the end.
    assert!(producer.set_position(producer.data_size() - 200));
    let body = sample(32, None).build();
    assert!(producer.write_record(RECORD_SAMPLE, 0, &body));
    let layout = RecordLayout::new(&attr).unwrap();
    let mut reader = ring.reader();
    let rec = reader.next_record().unwrap().unwrap();
    assert!(matches!(rec.body, RawData::Split(..)));
    let PerfRecord::Sample(s) = layout.parse(&rec).unwrap() else {
        panic!()
    };
    let entries = s.branch_stack.unwrap().entries;
    assert_eq!(entries.len(), 32);
    assert_eq!(entries[31].to, 0x2000 + 31);
    assert!(entries[31].mispred);
}

//! `sched:sched_switch` raw data decoded by the offsets of a synthetic format file, and the
//! switch records (`SWITCH`, `SWITCH_CPU_WIDE`).

use fxtrace::capture::records::{
    MISC_SWITCH_OUT, MISC_SWITCH_OUT_PREEMPT, RECORD_SAMPLE, RECORD_SWITCH_CPU_WIDE,
};
use fxtrace::capture::{
    EventAttr, LinuxThreadState, ParseError, PerfClock, PerfRecord, RawData, RawRecord,
    RecordBytes, RecordLayout, SchedSwitchFormat, TracepointFormat,
};

/// A format whose fields sit at offsets different from any real kernel's (an extra field in
/// front, `prev_state` as a 4-byte int), so hard-coded offsets would fail.
const FORMAT: &str = "name: sched_switch
ID: 999
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
\tfield:u64 padding_field;\toffset:8;\tsize:8;\tsigned:0;

\tfield:char next_comm[16];\toffset:16;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:32;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:36;\tsize:4;\tsigned:1;
\tfield:char prev_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:60;\tsize:4;\tsigned:1;
\tfield:int prev_state;\toffset:64;\tsize:4;\tsigned:1;

print fmt: \"prev_state=%s\", __print_flags(REC->prev_state & 0xff, \"|\", { 0x01, \"S\" }, { 0x02, \"D\" }, { 0x04, \"T\" }, { 0x08, \"t\" }, { 0x10, \"X\" }, { 0x20, \"Z\" }, { 0x40, \"P\" }, { 0x80, \"I\" }) : \"R\"
";

fn comm(name: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..name.len()].copy_from_slice(name.as_bytes());
    b
}

/// Raw data laid out per FORMAT.
fn raw(prev: (&str, u32, i32, i32), next: (&str, u32, i32)) -> Vec<u8> {
    RecordBytes::new()
        .u32(999) // common_type, flags, preempt_count
        .u32(prev.1) // common_pid
        .u64(0) // padding_field
        .bytes(&comm(next.0))
        .u32(next.1)
        .u32(next.2 as u32)
        .bytes(&comm(prev.0))
        .u32(prev.1)
        .u32(prev.2 as u32)
        .u32(prev.3 as u32)
        .build()
}

fn format() -> SchedSwitchFormat {
    SchedSwitchFormat::from_format(&TracepointFormat::parse(FORMAT).unwrap()).unwrap()
}

#[test]
fn fields_are_read_at_the_format_offsets() {
    let f = format();
    let bytes = raw(("ping", 4242, 120, 0x1), ("pong", 4243, 98));
    let d = f.decode(&RawData::Single(&bytes)).unwrap();
    assert_eq!(d.prev_comm.as_bytes(), b"ping");
    assert_eq!(d.next_comm.as_bytes(), b"pong");
    assert_eq!((d.prev_tid, d.prev_prio, d.prev_state), (4242, 120, 1));
    assert_eq!((d.next_tid, d.next_prio), (4243, 98));
    assert_eq!(
        f.state_bits().thread_state(d.prev_state),
        LinuxThreadState::Blocked
    );
    assert_eq!(f.state_bits().preempt_bit(), 0x100);
}

#[test]
fn split_raw_data_decodes_the_same() {
    let f = format();
    let bytes = raw(("a-thread-name-15", 7, 139, 0x100), ("b", 8, 0));
    let (x, y) = bytes.split_at(45); // splits prev_comm
    let d = f.decode(&RawData::Split(x, y)).unwrap();
    assert_eq!(d.prev_comm.as_bytes(), b"a-thread-name-15");
    assert_eq!(d.prev_tid, 7);
    assert_eq!(
        f.state_bits().thread_state(d.prev_state),
        LinuxThreadState::Running,
        "preempted"
    );
}

#[test]
fn short_raw_data_is_an_error() {
    let f = format();
    let bytes = raw(("a", 1, 120, 0), ("b", 2, 120));
    let err = f.decode(&RawData::Single(&bytes[..60])).unwrap_err();
    assert!(
        matches!(err, ParseError::Tracepoint(ref m) if m.contains("prev_prio")),
        "{err}"
    );
}

#[test]
fn missing_field_is_a_format_error() {
    let text = FORMAT.replace("prev_prio", "prev_priority");
    let err = SchedSwitchFormat::from_format(&TracepointFormat::parse(&text).unwrap()).unwrap_err();
    assert!(err.to_string().contains("prev_prio"), "{err}");
}

#[test]
fn tracepoint_sample_carries_the_raw_data() {
    let attr = EventAttr::sched_switch_tracepoint(999, PerfClock::PerfDefault);
    let layout = RecordLayout::new(&attr).unwrap();
    let data = raw(("ping", 10, 120, 0x2), ("swapper/1", 0, 120));
    // PERF_SAMPLE_RAW: u32 size then the data, padded so that size + 4 is a multiple of 8.
    let padded = (data.len() + 4).div_ceil(8) * 8 - 4;
    let mut padded_data = data.clone();
    padded_data.resize(padded, 0);
    // sample order: TID, TIME, CPU, RAW
    let body = RecordBytes::new()
        .u32(10)
        .u32(10)
        .u64(777)
        .u32(1)
        .u32(0)
        .u32(padded as u32)
        .bytes(&padded_data)
        .build();
    assert_eq!(body.len() % 8, 0);
    let rec = RawRecord {
        kind: RECORD_SAMPLE,
        misc: 0,
        body: RawData::Single(&body),
    };
    let PerfRecord::Sample(s) = layout.parse(&rec).unwrap() else {
        panic!()
    };
    assert_eq!((s.time, s.cpu), (Some(777), Some(1)));
    let raw = s.raw.unwrap();
    assert_eq!(raw.len(), padded);
    let d = format().decode(&raw).unwrap();
    assert_eq!((d.prev_tid, d.next_tid), (10, 0));
    assert_eq!(d.next_comm.as_bytes(), b"swapper/1");
    assert_eq!(
        format().state_bits().thread_state(d.prev_state),
        LinuxThreadState::Blocked
    );
}

#[test]
fn cpu_wide_switch_records() {
    let attr = EventAttr::cpu_wide_switches(PerfClock::PerfDefault);
    let layout = RecordLayout::new(&attr).unwrap();
    let body = RecordBytes::new()
        .u32(300)
        .u32(301)
        .sample_id(200, 201, 55, 0)
        .build();
    let out = RawRecord {
        kind: RECORD_SWITCH_CPU_WIDE,
        misc: MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT,
        body: RawData::Single(&body),
    };
    let PerfRecord::Switch(s) = layout.parse(&out).unwrap() else {
        panic!()
    };
    assert!(s.out && s.preempt);
    assert_eq!(s.next_prev, Some((300, 301)));
    assert_eq!(
        (s.sample_id.pid, s.sample_id.tid, s.sample_id.time),
        (Some(200), Some(201), Some(55))
    );
    let inbound = RawRecord { misc: 0, ..out };
    let PerfRecord::Switch(s) = layout.parse(&inbound).unwrap() else {
        panic!()
    };
    assert!(!s.out && !s.preempt);
    // Truncated: only the trailer.
    let short = RecordBytes::new().u32(1).build();
    let rec = RawRecord {
        kind: RECORD_SWITCH_CPU_WIDE,
        misc: 0,
        body: RawData::Single(&short),
    };
    assert!(matches!(
        layout.parse(&rec),
        Err(ParseError::Truncated { .. })
    ));
}

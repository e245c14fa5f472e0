//! The basic-mode ("naive") log reader.
//!
//! After the 32-byte file header, a basic log is a sequence of 32-byte records
//! (compiler-rt `xray_records.h`), each thread's buffer appended whole:
//!
//! `XRayRecord` (record type 0, NORMAL):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | record type = 0 |
//! | 2 | 1 | CPU |
//! | 3 | 1 | entry type: 0 entry, 1 exit, 2 tail exit, 3 entry with args |
//! | 4 | 4 | function id (signed) |
//! | 8 | 8 | absolute TSC |
//! | 16 | 4 | thread id |
//! | 20 | 4 | process id (version 3) |
//! | 24 | 8 | padding |
//!
//! `XRayArgPayload` (record type 1, ARG_PAYLOAD), right after the entry it belongs to:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | record type = 1 |
//! | 2 | 2 | padding |
//! | 4 | 4 | function id |
//! | 8 | 4 | thread id |
//! | 12 | 4 | process id |
//! | 16 | 8 | the argument |
//! | 24 | 8 | padding |

use std::collections::HashMap;
use std::ops::Range;

use super::bytes::{i32_at, u16_at, u32_at, u64_at};
use super::error::{XrayError, XrayErrorKind};
use super::event::{ReadStats, ThreadStream, XrayEvent, XrayEventKind};
use super::header::{FileHeader, FILE_HEADER_SIZE};

/// Size of every basic-mode record.
pub const RECORD_SIZE: usize = 32;
/// Offset of the 16-bit record type.
pub const RECORD_TYPE: usize = 0;
/// Record type of a function record (`XRayRecord`).
pub const RECORD_TYPE_NORMAL: u16 = 0;
/// Record type of an argument payload (`XRayArgPayload`).
pub const RECORD_TYPE_ARG_PAYLOAD: u16 = 1;
/// NORMAL: offset of the 8-bit CPU.
pub const CPU: usize = 2;
/// NORMAL: offset of the 8-bit entry type.
pub const ENTRY_TYPE: usize = 3;
/// NORMAL: offset of the signed 32-bit function id.
pub const FUNC_ID: usize = 4;
/// NORMAL: offset of the 64-bit TSC.
pub const TSC: usize = 8;
/// NORMAL: offset of the 32-bit thread id.
pub const TID: usize = 16;
/// NORMAL: offset of the 32-bit process id.
pub const PID: usize = 20;
/// ARG_PAYLOAD: offset of the function id.
pub const ARG_FUNC_ID: usize = 4;
/// ARG_PAYLOAD: offset of the thread id.
pub const ARG_TID: usize = 8;
/// ARG_PAYLOAD: offset of the process id.
pub const ARG_PID: usize = 12;
/// ARG_PAYLOAD: offset of the 64-bit argument.
pub const ARG_VALUE: usize = 16;

/// The last NORMAL record, which an argument payload must belong to: its event is held
/// (not handed over yet) while payloads may follow.
#[derive(Debug)]
struct LastEntry {
    thread: usize,
    /// Where its NORMAL record starts.
    start: usize,
    event: XrayEvent,
    func_id: i32,
    tid: u32,
    pid: u32,
}

/// What one record is.
enum Record {
    /// A NORMAL record: an event of thread (pid, tid); `raw_pid` as written.
    Normal {
        key: (u32, u32),
        event: XrayEvent,
        func_id: i32,
        raw_pid: u32,
    },
    /// An ARG_PAYLOAD record.
    Arg {
        func_id: i32,
        tid: u32,
        pid: u32,
        arg: u64,
    },
}

/// Decodes every record after the header into per-thread streams (in order of first
/// appearance), counting into `stats`. Returns the first error alongside the streams.
pub(crate) fn read_threads(
    data: &[u8],
    header: &FileHeader,
    stats: &mut ReadStats,
) -> (Vec<ThreadStream>, Option<XrayError>) {
    let mut streams: Vec<ThreadStream> = Vec::new();
    let mut threads = Vec::new();
    let error = read_into(
        data,
        header,
        stats,
        &mut threads,
        &mut |thread, event, _| {
            // Events come in record order, so a thread's first event comes after the first
            // events of every thread seen before it: a new thread is the next index.
            if thread == streams.len() {
                streams.push(ThreadStream {
                    pid: event.pid,
                    tid: event.tid,
                    events: Vec::new(),
                    wall_times: Vec::new(),
                    buffers: 0,
                });
            }
            if let Some(stream) = streams.get_mut(thread) {
                stream.events.push(event);
            }
        },
    );
    (streams, error)
}

/// Decodes every record after the header, handing each event to `on_event` with the index
/// of its thread in `threads` (which lists each (pid, tid) once, in order of first
/// appearance), its argument payloads attached, and the bytes of its records (the NORMAL
/// record and its payloads), counting into `stats`. Returns the first error, after every
/// event before it.
pub(crate) fn read_into(
    data: &[u8],
    header: &FileHeader,
    stats: &mut ReadStats,
    threads: &mut Vec<(Option<u32>, u32)>,
    on_event: &mut dyn FnMut(usize, XrayEvent, Range<usize>),
) -> Option<XrayError> {
    let records = FILE_HEADER_SIZE..data.len();
    read_records(data, header.version, records, stats, threads, on_event)
}

/// Decodes the records in `span` of `data` again (whole records [`read_into`] read without
/// an error, the first a NORMAL one) as [`read_into`] does: thread 0 is the first record's.
pub(crate) fn read_span(
    data: &[u8],
    header: &FileHeader,
    span: Range<usize>,
    on_event: &mut dyn FnMut(usize, XrayEvent, Range<usize>),
) {
    let mut stats = ReadStats::default();
    let mut threads = Vec::new();
    let _ = read_records(
        data,
        header.version,
        span,
        &mut stats,
        &mut threads,
        on_event,
    );
}

/// [`read_into`] over the records in `span`.
fn read_records(
    data: &[u8],
    version: u16,
    span: Range<usize>,
    stats: &mut ReadStats,
    threads: &mut Vec<(Option<u32>, u32)>,
    on_event: &mut dyn FnMut(usize, XrayEvent, Range<usize>),
) -> Option<XrayError> {
    let data = data.get(..span.end).unwrap_or(data);
    let mut index: HashMap<(u32, u32), usize> = HashMap::new();
    let mut last: Option<LastEntry> = None;
    let mut pos = span.start;
    let error = loop {
        if pos >= data.len() {
            break None;
        }
        match read_record(data, pos, version) {
            Ok(Record::Normal {
                key,
                event,
                func_id,
                raw_pid,
            }) => {
                if let Some(done) = last.take() {
                    on_event(done.thread, done.event, done.start..pos);
                }
                let thread = *index.entry(key).or_insert_with(|| {
                    threads.push((event.pid, event.tid));
                    threads.len() - 1
                });
                last = Some(LastEntry {
                    thread,
                    start: pos,
                    func_id,
                    tid: event.tid,
                    pid: raw_pid,
                    event,
                });
            }
            Ok(Record::Arg {
                func_id,
                tid,
                pid,
                arg,
            }) => {
                let owner = last.as_mut().filter(|l| {
                    l.func_id == func_id && l.tid == tid && (version < 3 || l.pid == pid)
                });
                let Some(owner) = owner else {
                    break Some(XrayError::new(
                        pos,
                        XrayErrorKind::ArgPayloadMismatch { func_id, tid },
                    ));
                };
                match &mut owner.event.kind {
                    XrayEventKind::EnterWithArgs { args, .. } => args.push(arg),
                    kind @ XrayEventKind::Enter { .. } => {
                        *kind = XrayEventKind::EnterWithArgs {
                            func_id,
                            args: vec![arg],
                        }
                    }
                    _ => stats.orphan_call_args += 1,
                }
            }
            Err(kind) => break Some(XrayError::new(pos, kind)),
        }
        stats.records += 1;
        pos += RECORD_SIZE;
    };
    if let Some(done) = last {
        on_event(done.thread, done.event, done.start..pos);
    }
    error
}

fn read_record(data: &[u8], pos: usize, version: u16) -> Result<Record, XrayErrorKind> {
    let available = (data.len() - pos) as u64;
    let Some(rec) = data.get(pos..pos + RECORD_SIZE) else {
        return Err(XrayErrorKind::Truncated {
            record: "basic-mode record",
            needed: RECORD_SIZE as u64,
            available,
        });
    };
    // `rec` has 32 bytes, so every fixed-offset read below succeeds.
    let record_type = u16_at(rec, RECORD_TYPE).unwrap_or(0);
    match record_type {
        RECORD_TYPE_NORMAL => {
            let entry_type = rec[ENTRY_TYPE];
            let func_id = i32_at(rec, FUNC_ID).unwrap_or(0);
            let kind = match entry_type {
                0 => XrayEventKind::Enter { func_id },
                1 => XrayEventKind::Exit { func_id },
                2 => XrayEventKind::TailExit { func_id },
                3 => XrayEventKind::EnterWithArgs {
                    func_id,
                    args: Vec::new(),
                },
                _ => return Err(XrayErrorKind::UnknownBasicEntryType { entry_type }),
            };
            let tid = u32_at(rec, TID).unwrap_or(0);
            let raw_pid = u32_at(rec, PID).unwrap_or(0);
            let pid = (version >= 3).then_some(raw_pid);
            let event = XrayEvent {
                tsc: u64_at(rec, TSC).unwrap_or(0),
                cpu: u16::from(rec[CPU]),
                pid,
                tid,
                kind,
            };
            // Before version 3 the pid bytes are undefined: one stream per thread id.
            Ok(Record::Normal {
                key: (pid.unwrap_or(0), tid),
                event,
                func_id,
                raw_pid,
            })
        }
        RECORD_TYPE_ARG_PAYLOAD => Ok(Record::Arg {
            func_id: i32_at(rec, ARG_FUNC_ID).unwrap_or(0),
            tid: u32_at(rec, ARG_TID).unwrap_or(0),
            pid: u32_at(rec, ARG_PID).unwrap_or(0),
            arg: u64_at(rec, ARG_VALUE).unwrap_or(0),
        }),
        other => Err(XrayErrorKind::UnknownBasicRecordType { record_type: other }),
    }
}

/// Encoders of basic-mode records, for tests that build synthetic logs.
#[cfg(test)]
pub(crate) mod encode {
    use super::*;

    /// A NORMAL record.
    pub(crate) fn normal(
        cpu: u8,
        entry_type: u8,
        func_id: i32,
        tsc: u64,
        tid: u32,
        pid: u32,
    ) -> Vec<u8> {
        let mut r = vec![0u8; RECORD_SIZE];
        r[RECORD_TYPE..RECORD_TYPE + 2].copy_from_slice(&RECORD_TYPE_NORMAL.to_le_bytes());
        r[CPU] = cpu;
        r[ENTRY_TYPE] = entry_type;
        r[FUNC_ID..FUNC_ID + 4].copy_from_slice(&func_id.to_le_bytes());
        r[TSC..TSC + 8].copy_from_slice(&tsc.to_le_bytes());
        r[TID..TID + 4].copy_from_slice(&tid.to_le_bytes());
        r[PID..PID + 4].copy_from_slice(&pid.to_le_bytes());
        r[24..].fill(0xCC); // padding is never read
        r
    }

    /// An ARG_PAYLOAD record.
    pub(crate) fn arg(func_id: i32, tid: u32, pid: u32, value: u64) -> Vec<u8> {
        let mut r = vec![0xCCu8; RECORD_SIZE];
        r[RECORD_TYPE..RECORD_TYPE + 2].copy_from_slice(&RECORD_TYPE_ARG_PAYLOAD.to_le_bytes());
        r[ARG_FUNC_ID..ARG_FUNC_ID + 4].copy_from_slice(&func_id.to_le_bytes());
        r[ARG_TID..ARG_TID + 4].copy_from_slice(&tid.to_le_bytes());
        r[ARG_PID..ARG_PID + 4].copy_from_slice(&pid.to_le_bytes());
        r[ARG_VALUE..ARG_VALUE + 8].copy_from_slice(&value.to_le_bytes());
        r
    }
}

#[cfg(test)]
mod tests {
    use super::encode::*;
    use super::*;

    fn header(version: u16) -> Vec<u8> {
        let mut h = vec![0u8; FILE_HEADER_SIZE];
        h[0..2].copy_from_slice(&version.to_le_bytes());
        h[8..16].copy_from_slice(&1_000_000_000u64.to_le_bytes());
        h
    }

    fn decode(data: &[u8]) -> (Vec<ThreadStream>, ReadStats, Option<XrayError>) {
        let h = FileHeader::parse(data).unwrap();
        let mut stats = ReadStats::default();
        let (t, e) = read_threads(data, &h, &mut stats);
        (t, stats, e)
    }

    #[test]
    fn record_layouts_match_compiler_rt_structs() {
        // XRayRecord: u16 type, u8 cpu, u8 type, i32 func id, u64 tsc, u32 tid, u32 pid, 8 pad.
        assert_eq!(
            (RECORD_TYPE, CPU, ENTRY_TYPE, FUNC_ID, TSC, TID, PID),
            (0, 2, 3, 4, 8, 16, 20)
        );
        assert_eq!(PID + 4 + 8, RECORD_SIZE);
        // XRayArgPayload: u16 type, 2 pad, i32 func id, u32 tid, u32 pid, u64 arg, 8 pad.
        assert_eq!((ARG_FUNC_ID, ARG_TID, ARG_PID, ARG_VALUE), (4, 8, 12, 16));
        assert_eq!(ARG_VALUE + 8 + 8, RECORD_SIZE);
        let r = normal(3, 1, -2, 0x1122, 10, 20);
        assert_eq!(&r[..8], &[0, 0, 3, 1, 0xfe, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn decodes_threads_args_and_tail_exits() {
        let data = [
            header(3),
            normal(0, 0, 1, 100, 10, 5),
            normal(1, 3, 2, 110, 11, 5),
            arg(2, 11, 5, 0xABCD),
            normal(0, 2, 1, 120, 10, 5),
            normal(1, 1, 2, 130, 11, 5),
        ]
        .concat();
        let (threads, stats, err) = decode(&data);
        assert_eq!(err, None);
        assert_eq!(stats.records, 5);
        assert_eq!(threads.len(), 2);
        assert_eq!((threads[0].pid, threads[0].tid), (Some(5), 10));
        let t0: Vec<_> = threads[0]
            .events
            .iter()
            .map(|e| (e.tsc, e.cpu, e.kind.clone()))
            .collect();
        assert_eq!(
            t0,
            vec![
                (100, 0, XrayEventKind::Enter { func_id: 1 }),
                (120, 0, XrayEventKind::TailExit { func_id: 1 })
            ]
        );
        let t1: Vec<_> = threads[1]
            .events
            .iter()
            .map(|e| (e.tsc, e.cpu, e.kind.clone()))
            .collect();
        assert_eq!(
            t1,
            vec![
                (
                    110,
                    1,
                    XrayEventKind::EnterWithArgs {
                        func_id: 2,
                        args: vec![0xABCD]
                    }
                ),
                (130, 1, XrayEventKind::Exit { func_id: 2 })
            ]
        );
    }

    #[test]
    fn before_version_3_a_thread_is_one_stream_whatever_its_pid_bytes() {
        // Version 2: the pid bytes are undefined (here 0 and 1): one thread, in time order.
        let data = [
            header(2),
            normal(0, 0, 1, 100, 5, 0),
            normal(0, 0, 2, 110, 5, 1),
            normal(0, 1, 2, 120, 5, 1),
            normal(0, 1, 1, 130, 5, 0),
        ]
        .concat();
        let (threads, _, err) = decode(&data);
        assert_eq!(err, None);
        assert_eq!(threads.len(), 1);
        assert_eq!((threads[0].pid, threads[0].tid), (None, 5));
        let tscs: Vec<u64> = threads[0].events.iter().map(|e| e.tsc).collect();
        assert_eq!(tscs, [100, 110, 120, 130]);
        // Version 3: the pid is the process's; two processes, two streams.
        let data = [
            header(3),
            normal(0, 0, 1, 100, 5, 0),
            normal(0, 0, 2, 110, 5, 1),
        ]
        .concat();
        assert_eq!(decode(&data).0.len(), 2);
    }

    #[test]
    fn mismatched_arg_payload_is_an_error_with_offset() {
        let data = [header(3), normal(0, 3, 2, 1, 10, 5), arg(3, 10, 5, 1)].concat();
        let (threads, _, err) = decode(&data);
        assert_eq!(
            err,
            Some(XrayError::new(
                64,
                XrayErrorKind::ArgPayloadMismatch {
                    func_id: 3,
                    tid: 10
                }
            ))
        );
        assert_eq!(threads[0].events.len(), 1);
        // Version 3 also checks the pid; versions 1 and 2 do not.
        let data = [header(3), normal(0, 3, 2, 1, 10, 5), arg(2, 10, 6, 1)].concat();
        assert!(decode(&data).2.is_some());
        let data = [header(2), normal(0, 3, 2, 1, 10, 5), arg(2, 10, 6, 1)].concat();
        let (threads, _, err) = decode(&data);
        assert_eq!(err, None);
        assert_eq!(threads[0].pid, None);
    }

    #[test]
    fn unknown_types_and_truncation() {
        let mut bad = normal(0, 0, 1, 1, 1, 1);
        bad[0] = 2;
        let (_, _, err) = decode(&[header(3), bad].concat());
        assert_eq!(
            err.unwrap().kind,
            XrayErrorKind::UnknownBasicRecordType { record_type: 2 }
        );
        let (_, _, err) = decode(&[header(3), normal(0, 4, 1, 1, 1, 1)].concat());
        assert_eq!(
            err.unwrap().kind,
            XrayErrorKind::UnknownBasicEntryType { entry_type: 4 }
        );
        let data = [
            header(3),
            normal(0, 0, 1, 1, 1, 1),
            normal(0, 1, 1, 2, 1, 1),
        ]
        .concat();
        let (threads, _, err) = decode(&data[..data.len() - 5]);
        assert_eq!(
            err,
            Some(XrayError::new(
                64,
                XrayErrorKind::Truncated {
                    record: "basic-mode record",
                    needed: 32,
                    available: 27
                }
            ))
        );
        assert_eq!(threads[0].events.len(), 1);
    }
}

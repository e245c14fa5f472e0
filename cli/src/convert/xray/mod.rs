//! LLVM XRay log import: the reader of basic-mode and FDR logs, and the
//! instrumentation map that names their function ids.
//!
//! [`read_log`] turns the bytes of a log written by compiler-rt's XRay runtime into
//! an owned [`XrayLog`]: the [`FileHeader`] and one [`ThreadStream`] per thread of
//! [`XrayEvent`]s with absolute timestamps. It reads
//!
//! * FDR ("flight data recorder") logs, versions 1 (the spec: LLVM's "XRay Flight Data
//!   Recorder Trace Format", `llvm/docs/XRayFDRFormat.rst`) to 5 (what compiler-rt writes
//!   since LLVM 7: BufferExtents, Pid, typed events, delta-encoded custom events), see
//!   [`fdr`];
//! * basic-mode ("naive") logs, versions 1 to 3, see [`basic`].
//!
//! Malformed input never panics: the first problem is reported with its byte
//! offset in [`XrayLog::error`], after everything decoded before it.
//!
//! [`InstrMap`] resolves function ids to addresses and names, from an instrumented
//! ELF binary's `xray_instr_map` section and symbols, or from the YAML that
//! `llvm-xray extract --symbolize` prints.
//!
//! [`write_fxt`] turns a decoded log into an FXT trace: durations per thread that
//! always nest, instant events for custom and typed events, CPU migrations and
//! wall-clock anchors, every repair counted in [`ImportStats`]. [`import`] writes the same
//! trace from the log's bytes without holding its events (two passes, [`stream`]): what
//! `fxtrace import-xray` runs.
//!
//! ```
//! use fxtrace_tools::convert::xray::{read_log, XrayEventKind};
//! # fn main() -> Result<(), fxtrace_tools::convert::xray::XrayError> {
//! // A version-3 basic-mode log with one function entry.
//! let mut log = vec![0u8; 64];
//! log[0] = 3; // version 3, type 0 (basic)
//! log[32 + 4] = 7; // function id 7, entry
//! log[32 + 8] = 100; // TSC 100
//! log[32 + 16] = 42; // thread 42
//! let log = read_log(&log)?;
//! assert!(log.is_complete());
//! assert_eq!(log.threads[0].tid, 42);
//! assert_eq!(log.threads[0].events[0].kind, XrayEventKind::Enter { func_id: 7 });
//! # Ok(())
//! # }
//! ```

pub mod basic;
mod bytes;
mod error;
mod event;
pub mod fdr;
pub mod fdr_records;
pub mod header;
pub mod instr_map;
pub mod llvm_yaml;
pub mod stream;
mod to_fxt;

pub use error::{XrayError, XrayErrorKind};
pub use event::{
    FunctionId, ReadStats, ThreadStream, WallTimeAnchor, XrayEvent, XrayEventKind, XrayLog,
};
pub use header::{FileHeader, LogType};
pub use instr_map::{FunctionInfo, InstrMap, InstrMapError, Sled, SledKind};
pub use stream::{import, Imported};
pub use to_fxt::{
    process_name_from_log_name, write_fxt, ImportError, ImportOptions, ImportStats, CATEGORY,
    CPU_MIGRATION_NAME, CUSTOM_EVENT_NAME, FALLBACK_TICKS_PER_SECOND, MAX_TEXT_ARG, PROVIDER_ID,
    PROVIDER_NAME_PREFIX, REPAIRS_NAME, TYPED_EVENT_NAME, UNNAMED_FUNCTION_PREFIX, WALL_TIME_NAME,
};

use std::collections::HashMap;

/// Decodes an XRay log (basic or FDR, detected from the header).
///
/// `Err` only when the file header itself is unreadable or unsupported. Any later
/// problem leaves the events decoded before it in the returned log and sets
/// [`XrayLog::error`] to the byte offset and cause.
pub fn read_log(data: &[u8]) -> Result<XrayLog, XrayError> {
    let header = FileHeader::parse(data)?;
    let mut stats = ReadStats::default();
    let (mut threads, error) = match header.log_type {
        LogType::Basic => basic::read_threads(data, &header, &mut stats),
        LogType::Fdr => {
            let mut blocks = Vec::new();
            let result = fdr::read_blocks(data, &header, &mut blocks, &mut stats);
            (assemble_blocks(blocks), result.err())
        }
    };
    for t in &mut threads {
        stats.cpu_migrations += event::insert_cpu_migrations(&mut t.events);
    }
    Ok(XrayLog {
        header,
        threads,
        stats,
        error,
    })
}

/// Groups FDR blocks into one stream per (pid, tid), in order of first appearance,
/// each thread's blocks ordered by wall time (file order among equal times).
fn assemble_blocks(blocks: Vec<fdr::Block>) -> Vec<ThreadStream> {
    per_thread(blocks, |b| &b.info)
        .into_iter()
        .map(|((pid, tid), group)| {
            let mut stream = ThreadStream {
                pid,
                tid,
                events: Vec::new(),
                wall_times: Vec::new(),
                buffers: 0,
            };
            let single = group.len() == 1;
            if !single {
                stream
                    .events
                    .reserve_exact(group.iter().map(|b| b.events.len()).sum());
            }
            for b in group {
                stream.buffers += 1;
                stream.wall_times.extend(b.info.wall);
                if single {
                    stream.events = b.events; // moved, not copied
                } else {
                    stream.events.extend(b.events);
                }
            }
            stream
        })
        .collect()
}

/// A thread of an FDR log: its (pid, tid), and its blocks in the order they are read.
type ThreadBlocks<T> = ((Option<u32>, u32), Vec<T>);

/// `blocks` grouped by thread (pid, tid), in order of first appearance, each thread's
/// blocks ordered by wall time (file order among equal times; a block without a wall time,
/// cut short right after NewBuffer, last).
fn per_thread<T>(blocks: Vec<T>, info: impl Fn(&T) -> &fdr::BlockInfo) -> Vec<ThreadBlocks<T>> {
    let mut order: Vec<(Option<u32>, u32)> = Vec::new();
    let mut groups: HashMap<(Option<u32>, u32), Vec<T>> = HashMap::new();
    for b in blocks {
        let key = (info(&b).pid, info(&b).tid);
        groups
            .entry(key)
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push(b);
    }
    order
        .into_iter()
        .map(|key| {
            let mut group = groups.remove(&key).unwrap_or_default();
            group.sort_by_key(|b| {
                info(b)
                    .wall
                    .map_or((true, 0, 0), |w| (false, w.seconds, w.micros))
            });
            (key, group)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::fdr_records::encode::{fields, function, metadata};
    use super::*;

    fn fdr_header(version: u16) -> Vec<u8> {
        let mut h = fields(&[
            &version.to_le_bytes(),
            &1u16.to_le_bytes(),
            &3u32.to_le_bytes(),
        ]);
        h.extend_from_slice(&2_000_000_000u64.to_le_bytes());
        h.extend_from_slice(&[0; 16]);
        h
    }

    /// A version-5 buffer of thread `tid` in process 9 with wall time `seconds`.
    fn buffer(tid: u32, seconds: i64, body: &[Vec<u8>]) -> Vec<u8> {
        let records = [
            vec![
                metadata(0, &tid.to_le_bytes()),
                metadata(4, &fields(&[&seconds.to_le_bytes(), &0u32.to_le_bytes()])),
                metadata(9, &9u32.to_le_bytes()),
            ],
            body.to_vec(),
        ]
        .concat()
        .concat();
        [metadata(7, &(records.len() as u64).to_le_bytes()), records].concat()
    }

    fn new_cpu(cpu: u16, tsc: u64) -> Vec<u8> {
        metadata(2, &fields(&[&cpu.to_le_bytes(), &tsc.to_le_bytes()]))
    }

    /// [`import`] of `data` (read as `log`) writes what [`write_fxt`] writes of `log`, with the
    /// same counts: what it imported, and how often it had `release` called.
    fn import_as_write_fxt(data: &[u8], log: &XrayLog) -> (Imported, usize) {
        let options = ImportOptions::new("x");
        let mut expected = Vec::new();
        let stats = write_fxt(log, &options, &mut expected).unwrap();
        let mut got = Vec::new();
        let mut released = 0;
        let imported =
            import(data, &log.header, &options, &mut got, &mut || released += 1).unwrap();
        assert!(got == expected, "import and write_fxt differ");
        assert_eq!(imported.stats, stats);
        (imported, released)
    }

    #[test]
    fn thread_buffers_are_ordered_by_wall_time_and_migrations_synthesized() {
        // Thread 5's second buffer (wall time 20 s) comes first in the file, as a
        // recycled buffer can; thread 6 sits between them.
        let data = [
            fdr_header(5),
            buffer(5, 20, &[new_cpu(1, 5_000), function(1, 2, 10)]),
            buffer(6, 15, &[new_cpu(0, 3_000), function(0, 3, 1)]),
            buffer(
                5,
                10,
                &[
                    new_cpu(0, 1_000),
                    function(0, 2, 5),
                    new_cpu(1, 1_100),
                    function(0, 4, 0),
                ],
            ),
        ]
        .concat();
        let log = read_log(&data).unwrap();
        assert!(log.is_complete(), "{:?}", log.error);
        assert_eq!(
            log.threads.iter().map(|t| t.tid).collect::<Vec<_>>(),
            vec![5, 6]
        );
        let t5 = log.thread(5).unwrap();
        assert_eq!((t5.pid, t5.buffers), (Some(9), 2));
        let got: Vec<_> = t5
            .events
            .iter()
            .map(|e| (e.tsc, e.cpu, e.kind.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1_005, 0, XrayEventKind::Enter { func_id: 2 }),
                (1_100, 1, XrayEventKind::CpuMigration { from: 0, to: 1 }),
                (1_100, 1, XrayEventKind::Enter { func_id: 4 }),
                (5_010, 1, XrayEventKind::Exit { func_id: 2 }),
            ]
        );
        let anchors: Vec<_> = t5.wall_times.iter().map(|w| (w.seconds, w.tsc)).collect();
        assert_eq!(anchors, vec![(10, Some(1_000)), (20, Some(5_000))]);
        assert_eq!(log.stats.cpu_migrations, 1);
        assert_eq!(log.stats.buffers, 3);
        assert_eq!(log.event_count(), 5);
        assert_eq!(log.header.cycle_frequency, 2_000_000_000);
        // Two passes, no event kept, buffers read in each thread's wall-time order: the
        // same trace.
        let (imported, released) = import_as_write_fxt(&data, &log);
        assert_eq!((imported.events, imported.error), (5, None));
        assert_eq!(released, 0, "a log this small is never released");
    }

    /// A basic-mode log of 1 024 threads, each one's entry and exit records apart (every
    /// thread's entry, then every exit; one entry with argument payloads): the import reads it
    /// twice in all, not once per thread (64 MiB here, which `release` would be told of four
    /// times), and writes what `write_fxt` writes.
    #[test]
    fn a_basic_log_of_many_threads_is_read_twice_not_once_per_thread() {
        use super::basic::encode::{arg, normal};
        let mut h = vec![0u8; header::FILE_HEADER_SIZE];
        h[0..2].copy_from_slice(&3u16.to_le_bytes());
        h[8..16].copy_from_slice(&1_000_000_000u64.to_le_bytes());
        let threads = 1024u32;
        let mut records = vec![h];
        for tid in 0..threads {
            let entry = if tid == 7 { 3 } else { 0 };
            records.push(normal(0, entry, 1, 100 + u64::from(tid), 10 + tid, 9));
            if tid == 7 {
                records.push(arg(1, 10 + tid, 9, 42));
                records.push(arg(1, 10 + tid, 9, 43));
            }
        }
        for tid in 0..threads {
            records.push(normal(1, 1, 1, 5_000 + u64::from(tid), 10 + tid, 9));
        }
        let data = records.concat();
        let log = read_log(&data).unwrap();
        assert!(log.is_complete(), "{:?}", log.error);
        assert_eq!(log.threads.len(), threads as usize);
        let (imported, released) = import_as_write_fxt(&data, &log);
        // Entry, exit and the CPU migration between them.
        assert_eq!(imported.events, 3 * u64::from(threads));
        assert_eq!(
            released,
            0,
            "{} bytes read as {released} x 16 MiB",
            data.len()
        );
    }

    #[test]
    fn header_errors_are_fatal_later_errors_are_not() {
        assert_eq!(
            read_log(&[0; 8]).unwrap_err().kind,
            XrayErrorKind::TooShortForHeader { len: 8 }
        );
        let data = [
            fdr_header(5),
            buffer(5, 1, &[new_cpu(0, 1), function(0, 1, 1), vec![0xff; 3]]),
        ]
        .concat();
        // The extents include the 3 stray bytes, which start a truncated metadata record.
        let log = read_log(&data).unwrap();
        let err = log.error.clone().unwrap();
        assert_eq!(err.offset as usize, data.len() - 3);
        assert_eq!(log.event_count(), 1);
        assert!(
            err.to_string()
                .contains(&format!("byte offset {}", data.len() - 3)),
            "{err}"
        );
    }
}

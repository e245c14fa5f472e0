//! FXT → Chrome trace-event JSON, the format of `chrome://tracing`, Perfetto's legacy JSON
//! importer and speedscope.
//!
//! [`ChromeJsonWriter`] is an analysis of the reading pipeline ([`crate::read`]): it writes
//! each event as it is decoded, so a trace of any size converts in bounded memory. What is kept between
//! records is only what pairing needs ([`Retained`]): the begin times of the open durations
//! of each thread, the running thread per CPU, and the names of threads and providers.
//!
//! # Output
//!
//! The JSON Object Format, one event per line:
//! `{"traceEvents":[…], "displayTimeUnit":"ns", "otherData":{…}}`. Timestamps (`ts`,
//! `dur`) are microseconds with three decimals, i.e. exact nanoseconds (`1234.567`), as
//! the format requires; `displayTimeUnit` only asks viewers to show nanoseconds (Perfetto
//! reads `ts` as microseconds regardless since 2022, google/perfetto#274). `pid`/`tid` are
//! the FXT process and thread koids (Linux pid and tid). Ids and pointers are `"0x…"`
//! strings, since JavaScript numbers lose precision above 2^53.
//!
//! | FXT | trace event |
//! |---|---|
//! | duration begin / end | `B` / `E` on the event's thread; an `E` closes the innermost open `B` and repeats its `cat` and `name` (whatever the end record says) |
//! | duration complete | `X` with `dur` |
//! | instant | `i`; scope `"s"` from a string argument `scope` (`g`/`global`, `p`/`process`, `t`/`thread`), default `t` |
//! | counter | `C`, one series per numeric argument; `"id"` when the counter id is nonzero |
//! | async begin / instant / end | `b` / `n` / `e` with `"id"` (the correlation id) and the category |
//! | flow begin / step / end | `s` / `t` / `f` with `"id"` and `"bp":"e"`: bound to the enclosing slice of the thread |
//! | log | `i` (thread scope), category and name `log`, `args.message` |
//! | kernel object, process (type 1) | `M` `process_name` |
//! | kernel object, thread (type 2) | `M` `thread_name`, process from the `"process"` koid argument (or an earlier thread record) |
//! | context switch (both layouts) | `X` slices on the synthetic `CPUs` process, one track `CPU N` per CPU: each slice is a thread's time on that CPU, named `name (tid)`, with `tid`, `pid`, `priority` and the `end_state` it left in, and the switch's own arguments (kept until the slice ends: each name and text cut at 256 bytes, and counted when cut) |
//! | thread wakeup | `i` on the CPU's track, `wakeup name (tid)` |
//! | LAST_BRANCH blob | `i` `last_branch` (category `cpu:last_branch`) on the CPU's track, the branches in `args`; totals per CPU in `otherData.lastBranch` |
//! | large blob with metadata | `i` on its thread, with its arguments and `payload_bytes` |
//! | provider buffer overflow | global `i` "fxtrace: provider N (name) buffer overflow, records dropped", counted in `otherData` |
//! | provider info | `otherData.providers` (pids come from the records) |
//!
//! Context switches go on separate CPU tracks, not on the threads' own tracks: thread-state
//! slices there would overlap the threads' `B`/`E` slices and break their nesting. The
//! synthetic ids ([`CPU_PROCESS_PID`], [`CPU_TRACK_TID_BASE`]) are above Linux's pid range
//! and fit the `u32` Perfetto's importer takes.
//!
//! Every event has a `name` and a `cat` (metadata events the category `__metadata`, as
//! Chrome writes them): the DevTools Performance panel's trace engine reads both on every
//! event (`scripts/check-devtools.sh` loads converted traces in it).
//!
//! LBR samples become events, not a top-level `"lastBranch"` array as Fuchsia's exporter
//! writes (`chromium_exporter.cc`), because that array can only be written after every
//! event, i.e. held in memory; `fxtrace report lbr` gives the analysis.
//!
//! # Repairs
//!
//! A well-formed trace never yields a `B`/`E` mismatch: an `E` with no open `B` on its
//! thread is dropped, a `B` still open at the end is closed at the last timestamp of the
//! trace, an `E` timestamped before its `B` is moved to the `B`'s time (viewers sort by
//! time, and each `E` must stay after its `B`), and all are counted ([`ChromeStats`]). Records with no JSON form (userspace
//! objects, data blobs, large-blob attachments) are counted, as is every other drop.
//!
//! ```
//! use fxtrace_tools::convert::chrome::convert;
//! use fxtrace_format::{Event, EventKind, RecordWriter, StringRef, ThreadRef};
//!
//! let mut w = RecordWriter::with_magic();
//! let thread = ThreadRef::Inline { pid: 1, tid: 2 };
//! for (ticks, kind) in [(1_500, EventKind::DurationBegin), (4_000, EventKind::DurationEnd)] {
//!     w.push(&Event {
//!         ticks,
//!         thread,
//!         category: StringRef::Inline("cat"),
//!         name: StringRef::Inline("work"),
//!         args: &[],
//!         kind,
//!     })?;
//! }
//! let mut json = Vec::new();
//! let done = convert(&w.to_bytes()[..], &mut json)?;
//! assert!(done.decode_error.is_none());
//! let value: serde_json::Value = serde_json::from_slice(&json)?;
//! assert_eq!(value["traceEvents"][0]["ph"], "B");
//! assert_eq!(value["traceEvents"][0]["ts"], 1.5);
//! assert_eq!(value["traceEvents"][1]["ph"], "E");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod json;
mod stats;
mod writer;

use std::io::{self, Read, Write};

use fxtrace_format::{DecodeError, SkipCounts};

use crate::read::{self, Input, ReadError};

pub use stats::ChromeStats;
pub use writer::{ChromeJsonWriter, Retained, CPU_PROCESS_PID, CPU_TRACK_TID_BASE, MAX_OPEN_ASYNC};

/// Why a conversion could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum ChromeError {
    /// Writing the JSON output failed.
    #[error("cannot write the JSON output: {0}")]
    Write(#[from] io::Error),
}

/// How a conversion went: the counts, and how reading the input ended.
#[derive(Debug)]
pub struct ChromeConversion {
    /// What the converter wrote, repaired, dropped and skipped.
    pub stats: ChromeStats,
    /// Where decoding stopped early (damaged or truncated input, or a read error); the
    /// records before it were converted and the JSON is complete.
    pub decode_error: Option<DecodeError>,
    /// Records and arguments the decoder skipped (unknown types).
    pub skipped: SkipCounts,
    /// Bytes of well-formed records read.
    pub bytes_decoded: u64,
}

/// Converts the FXT trace read from `input` (starting with the magic number record) into
/// Chrome JSON written to `output`, streaming. Wrap an output file in `BufWriter`.
pub fn convert<R: Read, W: Write>(
    mut input: R,
    output: W,
) -> Result<ChromeConversion, ChromeError> {
    let mut writer = ChromeJsonWriter::new(output)?;
    let outcome = read::read_stream("<input>".into(), &mut input, &mut writer);
    finish(writer, outcome)
}

/// Converts an opened trace ([`Input`]: a mapped file, a stream) into Chrome JSON written to
/// `output`.
///
/// A decode error does not fail the conversion: everything before it is converted, the
/// JSON is closed properly, and the error is returned in [`ChromeConversion`] (and noted
/// in `otherData.input.status`). Only a write error is an `Err`.
pub fn convert_input<W: Write>(
    input: &mut Input,
    output: W,
) -> Result<ChromeConversion, ChromeError> {
    let mut writer = ChromeJsonWriter::new(output)?;
    let outcome = read::read(input, &mut writer);
    finish(writer, outcome)
}

fn finish<W: Write>(
    writer: ChromeJsonWriter<W>,
    outcome: Result<read::Outcome, ReadError>,
) -> Result<ChromeConversion, ChromeError> {
    let outcome = outcome.map_err(|e| match e {
        ReadError::Output(e) => ChromeError::Write(e),
        ReadError::Open(e) => ChromeError::Write(e.source),
    })?;
    let (_, stats) = writer.finish(outcome.error.as_ref(), outcome.skipped)?;
    Ok(ChromeConversion {
        stats,
        decode_error: outcome.error,
        skipped: outcome.skipped,
        bytes_decoded: outcome.bytes_decoded,
    })
}

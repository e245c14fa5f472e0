//! `perf.data` import: a `perf record` file or stream → an FXT trace, written by the live
//! capture's own conversion.
//!
//! The file is read by the `linux-perf-data` crate (header, attributes, feature sections,
//! record framing, timestamp order by perf's rounds, zstd-compressed records), after
//! [`input`] has checked what that parser would trust. Each record then goes through
//! [`fxtrace::capture::Replay`], the capture thread's decoding, pid resolution and thread
//! announcements, and each resulting event through [`fxtrace::capture::KernelTraceWriter`],
//! the live capture's writer: an imported record is the record the live capture would have
//! written for it.
//!
//! | perf record | FXT |
//! |---|---|
//! | `SAMPLE` with a branch stack (`perf record -b`, `-j`) | LAST_BRANCH blob: entries (from, to, mispredicted, cycles), the sample's cpu, time and pid |
//! | `SAMPLE` of a sampling event (`perf record -F 999 -g`: `cpu-clock`, `cycles`, …; the first such event) | `"fxtrace:sample"` blob, its call chain (else its ip) an interned `"fxtrace:stack"`, kernel frames named by `"fxtrace:ksym"` blobs ([`kallsyms`]) |
//! | `SAMPLE` of `sched:sched_switch` (`perf sched record`, `perf record -e sched:sched_switch`), decoded by the recording kernel's format (its tracing data) | Context Switch record; with a call chain, a blocked thread's wait point (`stack` argument) |
//! | `SAMPLE` of `sched:sched_waking`, `sched_wakeup_new` (and `sched_wakeup` in a file without `sched_waking`), by the recorded format | Thread Wakeup record with its `waker` |
//! | `SWITCH`, `SWITCH_CPU_WIDE` (`perf record --switch-events`) | Context Switch record |
//! | `MMAP`, `MMAP2` (executable) | `"fxtrace:mmap"` blob, build-id from the record or the file's build-id section |
//! | `COMM` | Kernel Object records naming the thread (and its process, for a main thread) |
//! | `FORK`, `EXIT` | what the capture writes for them: the parent's mappings copied to a forked process; tids and pids learnt |
//! | `LOST`, `LOST_SAMPLES` | the capture's loss event and the buffer-overflow metadata |
//! | the header: host, OS, perf version, CPU, command line, clock, event attributes | instant events `perf.data header` and `perf.data event` (category `perf`) on the import's own thread, their arguments |
//!
//! Every other record is counted by kind in [`ImportSummary::skipped`], including samples of
//! events fxtrace has no record for (other tracepoints, a second sampling event, the
//! `sched_wakeup` copies of `sched_waking`'s wake-ups), and the throttling, metadata and
//! hardware trace records. None is dropped silently.
//!
//! # Time
//!
//! perf stamps records in nanoseconds of its clock (`perf_clock`, or the `clockid` the events
//! were opened with: the header event names it, and the wall-clock reference of the
//! `CLOCK_DATA` feature when the file has it). The trace's Initialization record says
//! 1 000 000 000 ticks per second and every timestamp is perf's, unchanged: the import is one
//! timeline, and its times are those `perf script` prints.
//!
//! # Damage
//!
//! A truncated or corrupt input is converted up to its damage; the damage is then reported
//! ([`ImportSummary::damage`], each with its byte offset) and the import fails. A header the
//! parser cannot read at all is an [`ImportError`] before anything is written.

pub mod input;
pub mod kallsyms;
mod rounds;
mod to_fxt;
pub mod tracing_data;

pub use to_fxt::{
    import_perf, ImportError, ImportOptions, ImportSummary, Skipped, FURTHER_KINDS, IMPORT_KOID,
    MAX_SKIPPED_KINDS,
};

/// Where a perf.data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PerfSource {
    /// A file (a regular file is read by seeking; a FIFO or device as a stream).
    File(std::path::PathBuf),
    /// Standard input (a stream, or a regular file redirected to it).
    Stdin,
}

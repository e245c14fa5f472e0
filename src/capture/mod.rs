//! Kernel and hardware capture through `perf_event_open`: context switches (system-wide from
//! `sched:sched_switch`, or one process's own), thread lifecycle and names, and LBR branch
//! stacks, delivered as typed, timestamp-ordered events in TSC ticks.
//!
//! Layers, bottom up (one file per concept):
//!
//! | module | concept |
//! |---|---|
//! | [`sys`] | the syscall seam ([`Sys`]): kernel ([`RealSys`]) or memory (`FakeSys`, feature `test-support`) |
//! | [`attr`] | `perf_event_attr` builder for each event fxtrace opens |
//! | [`ring`] | the mmap'd ring: atomic head/tail, zero-copy (possibly split) record views |
//! | [`records`] | record layouts → typed records ([`PerfRecord`]) |
//! | [`lbr`] | branch stacks (`perf_branch_entry`) |
//! | [`tracepoint`], [`switch`], [`waking`] | tracepoint format files; `sched_switch` and `sched_waking` raw data by their offsets |
//! | `stacks` | call chains interned (wait points, CPU samples), their kernel frames named |
//! | [`kernel_symbols`] | kernel symbols: `/proc/kallsyms` as one sorted table, shared by a manager with the processes it traces (a sealed memfd) |
//! | [`state`] | Linux `prev_state` / priorities → FXT thread states / priorities (table) |
//! | [`time`] | perf timestamps → TSC ticks |
//! | [`merge`] | k-way timestamp merge of per-CPU streams, with its release rule |
//! | `duplicates` | a process capture's threads with two events of a kind (made while the events were opened): the copies of their records told apart and dropped |
//! | [`procfs`] | tid → pid and names, cached, from records and `/proc` |
//! | [`maps`] | executable mappings from `/proc/PID/maps` at the start; ELF build-ids of mapped files |
//! | `pids` | the process of every switched thread: pids learnt from records, events held until known |
//! | [`permissions`], [`tracefs`] | what we may do, remedy text; finding/mounting tracefs |
//! | [`session`] | [`Capture`]: open, drain on a thread, merge, deliver [`CaptureEvent`]s |
//! | [`fxt`] | [`CaptureEvent`]s → FXT records ([`KernelTraceWriter`]) into a [`RecordSink`] |
//! | [`replay`] | recorded perf records (a `perf.data` file's) through the same decoding, pid resolution and delivery ([`Replay`]) |
//! | `fake` | test support (feature `test-support`, not API): an in-memory perf behind [`Sys`] |
//!
//! The bindgen types of `perf-event-open-sys` never appear in this API.
//!
//! ```no_run
//! use fxtrace::capture::{Capture, CaptureConfig, CaptureEvent};
//! # fn main() -> Result<(), fxtrace::capture::CaptureError> {
//! let capture = Capture::start(CaptureConfig::system_wide(), |event| {
//!     if let CaptureEvent::ContextSwitch(cs) = event {
//!         println!("cpu {}: {} -> {}", cs.cpu, cs.prev_tid, cs.next_tid);
//!     }
//! })?;
//! std::thread::sleep(std::time::Duration::from_millis(100));
//! let stats = capture.stop()?;
//! println!("{} switches, {} lost", stats.switches, stats.lost_records);
//! # Ok(())
//! # }
//! ```

// perf-event-open-sys asks for bindgen structs to be built with `Default` and then assigned
// field by field, never with a struct literal, so that regenerated bindings with new fields keep
// compiling. That is exactly what this clippy lint objects to.
#![allow(clippy::field_reassign_with_default)]

pub mod attr;
mod decode;
mod duplicates;
pub mod events;
#[cfg(feature = "test-support")]
pub mod fake;
pub mod fxt;
mod ids;
pub mod kernel_symbols;
pub mod lbr;
pub mod maps;
pub mod merge;
mod open;
pub mod permissions;
mod pids;
pub mod probe;
pub mod procfs;
pub mod records;
pub mod refs;
pub mod replay;
pub mod ring;
pub mod session;
mod stacks;
pub mod state;
pub mod switch;
pub mod sys;
pub mod time;
pub mod tracefs;
pub mod tracepoint;
pub mod waking;
mod worker;

pub use attr::{BranchSampleFormat, BranchSampling, EventAttr, PerfEventKind, SampleFormat};
pub use events::{
    BranchSample, CaptureEvent, CpuSample, KernelSymbol, Lost, LostKind, MemoryMap, StackInfo,
    SwitchEvent, SwitchSides, TaskComm, TaskExit, TaskFork, ThreadInfo, Unsupported, WakeupEvent,
};
#[cfg(feature = "test-support")]
pub use fake::{FakeRing, FakeSys, RecordBytes, FIRST_EVENT_ID};
pub use fxt::{
    FxtStreamSink, KernelTraceConfig, KernelTraceStats, KernelTraceWriter, RecordSink, SinkError,
};
pub use kernel_symbols::{
    KernelSymbols, KernelSymbolsError, SharedSymbols, SharedSymbolsRef, SHARED_SYMBOLS_ENV,
};
pub use lbr::{BranchEntry, BranchStack};
pub use maps::{read_build_id, BuildIdCache, MapsLine, MapsSynthesis};
pub use merge::Merger;
pub use permissions::{Need, PerfPermissions};
pub use records::{MmapFile, ParseError, PerfMmap, PerfRecord, RecordLayout, TaskName};
pub use refs::{LocalRefs, RefTable, Registration};
pub use replay::{
    KernelSymbolsState, Replay, ReplayEventKind, ReplaySkip, ReplayStats, Replayed, KERNEL_MAP,
};
pub use ring::{PerfRing, RawData, RawRecord, RingError, RingReader};
pub use session::{
    Capture, CaptureConfig, CaptureError, CaptureReport, CaptureStats, CaptureStopper,
    CaptureTarget, SwitchSource, TracefsChoice,
};
pub use state::{LinuxThreadState, TaskStateBits};
pub use switch::{SchedSwitchFields, SchedSwitchFormat};
pub use sys::{PerfIoctl, RealSys, Sys};
pub use time::{MeasuredMapping, PerfClock, PerfTimeConverter, TscConversion};
pub use tracefs::Tracefs;
pub use tracepoint::TracepointFormat;
pub use waking::{SchedWakingFields, SchedWakingFormat};

//! A capture session: opens the perf events, drains their rings on a capture thread, and
//! delivers merged, typed events to a sink.
//!
//! # What is opened
//!
//! - [`CaptureTarget::SystemWide`]: per online CPU, the `sched:sched_switch` tracepoint (id and
//!   format read from tracefs, mounted if needed and allowed). If that fails, per CPU a dummy
//!   event with `PERF_RECORD_SWITCH_CPU_WIDE`; the tracepoint failure is reported as an
//!   [`Unsupported`] note. Needs root or `CAP_PERFMON` (the error says what is missing).
//! - [`CaptureTarget::Process`]: per (thread, CPU) a dummy event with `context_switch` and
//!   `inherit` (threads created later are followed by the kernel), all events of one CPU
//!   redirected with `SET_OUTPUT` into one ring per CPU. The thread list is re-read until no
//!   thread appeared meanwhile; a thread that appeared may have inherited events before it got
//!   its own, and the copies of its records are dropped ([`super::duplicates`]).
//! - LBR, when asked: per CPU (and per thread for a process) a cycles sampling event with the
//!   branch stack, in rings of its own. If the PMU refuses (no PMU in a VM: `ENOENT`; no LBR:
//!   `EOPNOTSUPP`/`EINVAL`; not permitted), that is one [`Unsupported`] outcome and the rest of
//!   the capture goes on.
//!
//! Events are opened disabled, their rings mapped, then all enabled.
//!
//! With [`CaptureConfig::mmaps`], the event carrying the task/comm side band (the switch
//! event, else the LBR event) also reports new executable mappings (`PERF_RECORD_MMAP2`), and
//! the capture thread first delivers the executable mappings that existed when the events
//! were enabled, read from `/proc/PID/maps` (every process for a system-wide capture, bounded;
//! see [`super::maps`]), stamped with the tick count taken just before enabling.
//!
//! # The capture thread
//!
//! It sleeps in `poll()` on every ring descriptor plus an eventfd that [`Capture::stop`]
//! signals: no busy loop. Rings wake it at a quarter full, and `poll`'s timeout
//! ([`CaptureConfig::poll_interval`]) bounds the delivery delay when traffic is light. Each round
//! drains every ring (publishing the consumed space as it goes), decodes records into typed
//! events, and feeds the [`Merger`], which releases them in timestamp order (see its release
//! rule; each drained ring is complete up to "now − [`CaptureConfig::merge_slack`]"). On stop,
//! events are disabled, rings drained a last time and everything left is flushed.
//!
//! # Descriptors the traced program closes
//!
//! A per-process capture lives in the traced program, which may close descriptors it did not
//! open and reuse their numbers ([`crate::fd_guard`]). Each round, the capture thread checks
//! its stop pipe, and every ring descriptor that `poll` reported something on, before acting
//! on it. A lost descriptor ends the capture cleanly: the rings are drained a last time (their
//! mappings stay valid without the descriptors), only the events whose numbers are still
//! fxtrace's are disabled, everything is delivered, then a [`CaptureEvent::Unsupported`] note
//! says why the capture stopped, and the thread ends with [`CaptureError::DescriptorLost`].
//! A number that is no longer the capture's is never `ioctl`ed or closed. [`Capture::stop`]
//! also sets a flag the thread reads every round, so it stops within
//! [`CaptureConfig::poll_interval`] even when its stop pipe was taken.
//!
//! Before the first event naming a thread, a [`CaptureEvent::Thread`] announces it with its
//! process id and names (from switch names, COMM/FORK records and `/proc`, cached). A
//! system-wide capture scans `/proc/*/task` once when it starts; an event whose thread's
//! process is still unknown waits for that thread's own later records (see [`super::pids`]). Unsupported
//! sources are delivered first, once. Every drop, skip and error is counted in
//! [`CaptureStats`].

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use thiserror::Error;

use super::attr::{BranchSampling, EventAttr, PerfEventKind};
use super::decode::{RawFormat, StreamDecoder};
use super::duplicates::{SampleFilter, SampleLineages, TwinFilter};
use super::events::{CaptureEvent, Unsupported};
use super::ids::IdMap;
use super::kernel_symbols::KernelSymbols;
use super::maps::BuildIdCache;
use super::merge::Merger;
use super::open::*;
use super::permissions::{is_permission_error, is_unsupported_error, Need, PerfPermissions};
use super::pids::PidResolver;
use super::procfs::{online_cpus, TaskRegistry};
use super::records::{ParseError, RecordLayout};
use super::ring::RingError;
use super::stacks::{StackInterner, MAX_STACK_BYTES};
use super::sys::{PerfIoctl, RealSys, Sys};
use super::time::PerfTimeConverter;
use super::tracefs::TracefsError;
use super::worker::*;
use crate::fd_guard::{FdLost, GuardedFd, WakePipe};

/// Whose context switches to capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureTarget {
    /// Every CPU (root or `CAP_PERFMON`).
    SystemWide,
    /// One process and the threads it creates.
    Process(u32),
}

/// Where to find tracepoint ids and formats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TracefsChoice {
    /// Find tracefs; mount it at `/sys/kernel/tracing` if absent, allowed and root.
    Auto {
        /// Mounting is allowed.
        may_mount: bool,
    },
    /// A tracefs tree at this path.
    At(PathBuf),
    /// Do not use the tracepoint (system-wide capture uses `SWITCH_CPU_WIDE`).
    Skip,
}

/// What to capture and how.
#[derive(Debug, Clone)]
pub struct CaptureConfig {
    /// Whose switches.
    pub target: CaptureTarget,
    /// Capture context switches.
    pub switches: bool,
    /// Capture LBR branch stacks with these settings.
    pub lbr: Option<BranchSampling>,
    /// Data pages per ring (a power of two).
    pub ring_pages: usize,
    /// CPUs to open (default: `/sys/devices/system/cpu/online`).
    pub cpus: Option<Vec<u32>>,
    /// Tracefs.
    pub tracefs: TracefsChoice,
    /// The `/proc` tree for names and process ids.
    pub proc_root: PathBuf,
    /// Longest sleep between drains.
    pub poll_interval: Duration,
    /// Merge slack: a drained ring is taken as complete up to now minus this.
    pub merge_slack: Duration,
    /// The perf→TSC conversion to use; `None`: probe the mmap page, else measure.
    pub clock: Option<PerfTimeConverter>,
    /// Record executable mappings: those in `/proc` at the start and new ones
    /// (`PERF_RECORD_MMAP2`), as [`CaptureEvent::Mmap`].
    pub mmaps: bool,
    /// Record wake-ups (`sched:sched_waking`, or `sched_wakeup`): who woke whom, as
    /// [`CaptureEvent::Wakeup`]. System-wide, or the wake-ups the traced process's threads
    /// make (of its own threads or others), where the kernel allows raw tracepoint data
    /// (root, `CAP_PERFMON`, `perf_event_paranoid = -1`). A process capture misses wake-ups of
    /// its threads by others (a timer interrupt, another process): the kernel hands those to
    /// the woken task's events only while they run (a stopped event is skipped), never while
    /// it sleeps. `-a` has them all.
    pub wakeups: bool,
    /// Record wait points: the call chain of every thread switched out blocked (kernel
    /// frames, and user frames walked by frame pointers), interned as [`CaptureEvent::Stack`]
    /// and referred to by [`SwitchEvent::stack`](super::SwitchEvent::stack). Needs the
    /// `sched_switch` tracepoint: system-wide it is the switches' source; on a process it is
    /// opened beside the switch records, for its call chains alone (raw tracepoint data:
    /// root, `CAP_PERFMON`, `perf_event_paranoid = -1`).
    pub wait_points: bool,
    /// CPU samples at this many a second of CPU time (software `cpu-clock`, no PMU needed),
    /// with call chains, as [`CaptureEvent::Sample`].
    pub sample_hz: Option<u64>,
    /// A process's events, inherited by the children it forks, leave each child at its
    /// `exec` (`remove_on_exec`, Linux 5.13): for a process whose children's new images
    /// record themselves (the preload object's), so each switch is recorded once. Off: a
    /// child is followed into its new image.
    pub leave_at_exec: bool,
    /// The symbols naming kernel frames (of wait points, of samples with kernel frames): a
    /// table the manager shared ([`KernelSymbols::open_shared`]), so that this capture does
    /// not read `/proc/kallsyms` (read only if that table turns out to have a bad entry).
    /// `None`: `proc_root/kallsyms` is read at the start when needed.
    pub kernel_symbols: Option<KernelSymbols>,
}

impl CaptureConfig {
    /// System-wide switches, no LBR, no mappings (reading every process's maps at the start
    /// costs some 100s of ms: recordings turn it on with LBR), no wake-ups, wait points or CPU
    /// samples, 1 MiB rings (256 pages).
    pub fn system_wide() -> Self {
        Self {
            target: CaptureTarget::SystemWide,
            switches: true,
            lbr: None,
            ring_pages: 256,
            cpus: None,
            tracefs: TracefsChoice::Auto { may_mount: true },
            proc_root: "/proc".into(),
            poll_interval: Duration::from_millis(50),
            merge_slack: Duration::from_millis(20),
            clock: None,
            mmaps: false,
            wakeups: false,
            wait_points: false,
            sample_hz: None,
            leave_at_exec: false,
            kernel_symbols: None,
        }
    }

    /// One process's switches and executable mappings, no LBR.
    pub fn process(pid: u32) -> Self {
        Self {
            target: CaptureTarget::Process(pid),
            mmaps: true,
            ..Self::system_wide()
        }
    }
}

/// Where the context switches come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchSource {
    /// `sched:sched_switch` tracepoint samples.
    SchedSwitchTracepoint,
    /// `PERF_RECORD_SWITCH_CPU_WIDE` records.
    CpuWideSwitchRecords,
    /// Per-process `PERF_RECORD_SWITCH` records.
    ProcessSwitchRecords,
}

/// What a session opened.
#[derive(Debug, Clone, PartialEq)]
pub struct CaptureReport {
    /// The switch source, if switches were asked for.
    pub switch_source: Option<SwitchSource>,
    /// LBR sampling is running (with kernel branches or not).
    pub lbr: Option<BranchSampling>,
    /// Wake-ups are recorded.
    pub wakeups: bool,
    /// Wait points are recorded (call chains on the switch event).
    pub wait_points: bool,
    /// CPU samples are taken at this rate; `kernel`: with kernel frames.
    pub sampling: Option<(u64, bool)>,
    /// Kernel frames are named (`/proc/kallsyms` was read).
    pub kernel_symbols: bool,
    /// Sources that could not be used.
    pub unsupported: Vec<Unsupported>,
    /// The perf→TSC conversion.
    pub clock: PerfTimeConverter,
    /// The CPUs opened.
    pub cpus: Vec<u32>,
    /// Rings mapped.
    pub rings: usize,
    /// Events opened.
    pub events: usize,
}

/// Errors starting or running a session.
#[derive(Debug, Error)]
pub enum CaptureError {
    /// `perf_event_open` failed.
    #[error("perf_event_open({event:?}, pid {pid}, cpu {cpu}) failed: {source}{}", remedy.as_deref().map(|r| format!("; {r}")).unwrap_or_default())]
    Open {
        /// Which event.
        event: PerfEventKind,
        /// pid argument.
        pid: i32,
        /// cpu argument.
        cpu: i32,
        /// The cause.
        source: io::Error,
        /// What to do about it.
        remedy: Option<String>,
    },
    /// Mapping a ring failed.
    #[error("perf ring of {event:?} on cpu {cpu}: {source}{}", remedy.as_deref().map(|r| format!("; {r}")).unwrap_or_default())]
    Ring {
        /// Which event.
        event: PerfEventKind,
        /// The CPU.
        cpu: i32,
        /// The cause.
        source: RingError,
        /// What to do about it.
        remedy: Option<String>,
    },
    /// An `ioctl` failed.
    #[error("perf ioctl {what} failed: {source}")]
    Ioctl {
        /// Which request.
        what: &'static str,
        /// The cause.
        source: io::Error,
    },
    /// Tracefs was needed and unusable, and there was no fallback.
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    /// Reading `/proc` or `/sys` failed.
    #[error("{what}: {source}")]
    System {
        /// What was read.
        what: String,
        /// The cause.
        source: io::Error,
    },
    /// An event's records cannot be laid out.
    #[error(transparent)]
    Layout(#[from] ParseError),
    /// Nothing was asked for, or everything asked for is unsupported.
    #[error("nothing to capture: {why}")]
    NothingToCapture {
        /// What was missing, each source with its one-line reason.
        why: String,
        /// The sources that could not be used.
        unavailable: Vec<Unsupported>,
    },
    /// The capture thread could not be started or stopped.
    #[error("capture thread: {0}")]
    Thread(String),
    /// `poll` failed on the capture thread.
    #[error("poll on perf rings failed: {0}")]
    Poll(io::Error),
    /// The traced program closed one of the capture's descriptors (or reused its number): the
    /// capture stopped; what it had captured was delivered.
    #[error("{0}: capture stopped; events captured before are kept")]
    DescriptorLost(FdLost),
}

// === impl Counters ===

/// Session counters. ATOMICS: every counter is a statistic written only by the capture thread
/// with `Relaxed`; `Capture::stats` may read slightly stale values while running, and the
/// thread's join makes the final values visible to `Capture::stop`.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) lost_records: AtomicU64,
    pub(super) lost_samples: AtomicU64,
    pub(super) lost_reports: AtomicU64,
    pub(super) lost_unreported: AtomicU64,
    pub(super) unknown_records: AtomicU64,
    pub(super) unexpected_samples: AtomicU64,
    pub(super) throttles: AtomicU64,
    pub(super) parse_errors: AtomicU64,
    pub(super) corrupt_bytes: AtomicU64,
    pub(super) duplicates: AtomicU64,
    pub(super) switches: AtomicU64,
    pub(super) wakeups: AtomicU64,
    pub(super) wait_points: AtomicU64,
    pub(super) samples: AtomicU64,
    pub(super) stacks: AtomicU64,
    pub(super) stacks_not_interned: AtomicU64,
    pub(super) kernel_symbols: AtomicU64,
    pub(super) branch_samples: AtomicU64,
    pub(super) mmaps: AtomicU64,
    pub(super) mmaps_synthesized: AtomicU64,
    pub(super) mmaps_not_synthesized: AtomicU64,
    pub(super) maps_unreadable: AtomicU64,
    pub(super) maps_bad_lines: AtomicU64,
    pub(super) data_mappings: AtomicU64,
    pub(super) unknown_task_switches: AtomicU64,
    pub(super) threads: AtomicU64,
    pub(super) delivered: AtomicU64,
    pub(super) reordered: AtomicU64,
    pub(super) late: AtomicU64,
    pub(super) deferred_events: AtomicU64,
    pub(super) unknown_process_threads: AtomicU64,
    pub(super) proc_scan_threads: AtomicU64,
    pub(super) proc_scan_failures: AtomicU64,
}

pub(super) fn bump(counter: &AtomicU64, by: u64) {
    // ATOMICS: a statistic (see `Counters`): Relaxed. Its one writer is the capture thread (or
    // the starting thread before it is spawned, which the spawn orders before it), so a load
    // and a store add without a locked read-modify-write on every event. Saturating: `by`
    // may come from the kernel's ring (a lost count), which a corrupt record can make huge.
    counter.store(
        counter.load(Ordering::Relaxed).saturating_add(by),
        Ordering::Relaxed,
    );
}

/// A snapshot of a session's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CaptureStats {
    /// Records the kernel dropped because a ring was full (sum of `PERF_RECORD_LOST`).
    pub lost_records: u64,
    /// Samples the kernel dropped (sum of `PERF_RECORD_LOST_SAMPLES`).
    pub lost_samples: u64,
    /// LOST / LOST_SAMPLES records seen.
    pub lost_reports: u64,
    /// Of [`Self::lost_records`], those no `PERF_RECORD_LOST` reported: records a ring had no
    /// room for in the last moments before the stop (the kernel reports a loss only before
    /// the next record that fits), counted at the stop from each event's own count
    /// (`PERF_FORMAT_LOST`, Linux 6.0; not counted on older kernels).
    pub lost_unreported: u64,
    /// Records of types fxtrace did not request, skipped.
    pub unknown_records: u64,
    /// Samples on events that should produce none, skipped.
    pub unexpected_samples: u64,
    /// THROTTLE / UNTHROTTLE records.
    pub throttles: u64,
    /// Records that failed to parse (truncated, corrupt ring).
    pub parse_errors: u64,
    /// Ring bytes skipped after a corrupt header.
    pub corrupt_bytes: u64,
    /// Records dropped as copies of another: a thread of a process capture made while its
    /// events were being opened can have two events of a kind, which write each of its
    /// switches, wake-ups and wait points twice and sample it twice as often (see
    /// `capture::duplicates`). Not a loss: one record of each is delivered.
    pub duplicates: u64,
    /// Context switches delivered.
    pub switches: u64,
    /// Wake-ups delivered.
    pub wakeups: u64,
    /// Context switches delivered with a wait point (the call chain where the thread blocked).
    pub wait_points: u64,
    /// CPU samples delivered.
    pub samples: u64,
    /// Distinct call chains announced.
    pub stacks: u64,
    /// Call chains not interned for want of room ([`super::stacks`]'s bound): their wait
    /// point or sample went without a stack.
    pub stacks_not_interned: u64,
    /// Kernel symbols announced (those the stacks' kernel frames fall in).
    pub kernel_symbols: u64,
    /// LBR samples delivered.
    pub branch_samples: u64,
    /// Executable mappings delivered (read from `/proc` at the start, or reported by the
    /// kernel).
    pub mmaps: u64,
    /// Of those, read from `/proc` at the start.
    pub mmaps_synthesized: u64,
    /// Executable mappings in `/proc` left out by the bounds of [`super::maps`] (processes
    /// beyond the limit are counted as one each).
    pub mmaps_not_synthesized: u64,
    /// Processes whose `/proc/PID/maps` could not be read (gone, or not permitted).
    pub maps_unreadable: u64,
    /// Lines of `/proc/PID/maps` that did not parse: their mappings are not in the trace.
    pub maps_bad_lines: u64,
    /// Non-executable mapping records, skipped.
    pub data_mappings: u64,
    /// Context switches that name no task the kernel still identified (reaped tasks: a CPU-wide
    /// switch record with -1 on both sides, a switch-in record whose own task is -1), skipped:
    /// no side to write.
    pub unknown_task_switches: u64,
    /// Threads announced.
    pub threads: u64,
    /// Events delivered in total.
    pub delivered: u64,
    /// Events that arrived out of order within a ring (sorted in).
    pub reordered: u64,
    /// Events older than already-delivered ones (delivered out of order).
    pub late: u64,
    /// Events held back until a thread's process was learnt from a later record.
    pub deferred_events: u64,
    /// Threads (tid ≠ 0) delivered without a process: gone before any record or `/proc` said
    /// which process they were in. The trace marks them ([`super::fxt::UNKNOWN_PROCESS_KOID`]).
    pub unknown_process_threads: u64,
    /// Threads noted by the `/proc` scan at start (system-wide capture).
    pub proc_scan_threads: u64,
    /// Processes the start scan could not read (exited meanwhile), plus one if the scan failed
    /// or hit its limit.
    pub proc_scan_failures: u64,
}

impl Counters {
    fn snapshot(&self) -> CaptureStats {
        // ATOMICS: statistics (see `Counters`): Relaxed.
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CaptureStats {
            lost_records: g(&self.lost_records),
            lost_samples: g(&self.lost_samples),
            lost_reports: g(&self.lost_reports),
            lost_unreported: g(&self.lost_unreported),
            unknown_records: g(&self.unknown_records),
            unexpected_samples: g(&self.unexpected_samples),
            throttles: g(&self.throttles),
            parse_errors: g(&self.parse_errors),
            corrupt_bytes: g(&self.corrupt_bytes),
            duplicates: g(&self.duplicates),
            switches: g(&self.switches),
            wakeups: g(&self.wakeups),
            wait_points: g(&self.wait_points),
            samples: g(&self.samples),
            stacks: g(&self.stacks),
            stacks_not_interned: g(&self.stacks_not_interned),
            kernel_symbols: g(&self.kernel_symbols),
            branch_samples: g(&self.branch_samples),
            mmaps: g(&self.mmaps),
            mmaps_synthesized: g(&self.mmaps_synthesized),
            mmaps_not_synthesized: g(&self.mmaps_not_synthesized),
            maps_unreadable: g(&self.maps_unreadable),
            maps_bad_lines: g(&self.maps_bad_lines),
            data_mappings: g(&self.data_mappings),
            unknown_task_switches: g(&self.unknown_task_switches),
            threads: g(&self.threads),
            delivered: g(&self.delivered),
            reordered: g(&self.reordered),
            late: g(&self.late),
            deferred_events: g(&self.deferred_events),
            unknown_process_threads: g(&self.unknown_process_threads),
            proc_scan_threads: g(&self.proc_scan_threads),
            proc_scan_failures: g(&self.proc_scan_failures),
        }
    }
}

// === impl Capture ===

/// A running capture session (see the module docs). Stops on [`Capture::stop`] or drop.
#[derive(Debug)]
pub struct Capture {
    report: CaptureReport,
    counters: Arc<Counters>,
    stop: Arc<StopSignal>,
    thread: Option<JoinHandle<Result<(), CaptureError>>>,
}

impl Capture {
    /// Starts a session on the kernel; `sink` receives every event on the capture thread, in
    /// timestamp order. The sink should not block for long: while it runs, no ring is drained
    /// (the kernel counts what it has to drop, and the session reports it as lost).
    pub fn start(
        config: CaptureConfig,
        sink: impl FnMut(CaptureEvent) + Send + 'static,
    ) -> Result<Self, CaptureError> {
        Self::start_with(Arc::new(RealSys), PerfPermissions::read(), config, sink)
    }

    /// Starts a session through `sys` (a fake in tests) with the given permission facts.
    pub fn start_with(
        sys: Arc<dyn Sys>,
        perms: PerfPermissions,
        config: CaptureConfig,
        sink: impl FnMut(CaptureEvent) + Send + 'static,
    ) -> Result<Self, CaptureError> {
        if !config.switches && config.lbr.is_none() && !config.wakeups && config.sample_hz.is_none()
        {
            return Err(CaptureError::NothingToCapture {
                why: "neither context switches, wake-ups, CPU samples nor LBR requested".into(),
                unavailable: Vec::new(),
            });
        }
        let cpus = match &config.cpus {
            Some(c) => c.clone(),
            None => online_cpus().map_err(|source| CaptureError::System {
                what: "reading /sys/devices/system/cpu/online".into(),
                source,
            })?,
        };
        if cpus.is_empty() {
            return Err(CaptureError::NothingToCapture {
                why: "no CPUs".into(),
                unavailable: Vec::new(),
            });
        }
        let clock = choose_clock(&sys, &config);
        let source = clock.clock_source();
        let page = sys.page_size();
        let watermark = u32::try_from(config.ring_pages * page / 4).unwrap_or(u32::MAX);
        let opener = Opener {
            sys: &sys,
            pages: config.ring_pages,
            leave_at_exec: config.leave_at_exec,
        };
        let registry = TaskRegistry::new(config.proc_root.clone());
        let mut unsupported = Vec::new();
        let mut slots: Vec<RingSlot> = Vec::new();
        let mut members: Vec<(usize, GuardedFd)> = Vec::new();
        let mut events = 0usize;
        let mut sample_filter = SampleFilter::default();
        let mut add = |set: OpenSet, attr: &EventAttr, format: Option<RawFormat>| {
            let layout = RecordLayout::new(attr)?;
            events += set.rings.len() + set.members.len();
            let first = slots.len();
            // A thread may have two events of this kind: their copies are dropped.
            let sampling = matches!(
                attr.kind(),
                PerfEventKind::CpuClockSampling | PerfEventKind::BranchSampling
            );
            if set.late && sampling {
                sample_filter.add(SampleLineages::new(attr.kind(), &set.per_thread));
            }
            for (cpu, ring) in set.rings {
                let mut decoder = StreamDecoder::new(attr.kind(), cpu, layout, format.clone());
                // (Every per-thread event names its lineage: `new` gives a filter.)
                if let Some(twins) = TwinFilter::new(&layout, !sampling).filter(|_| set.late) {
                    decoder.drop_twins(twins);
                }
                slots.push(RingSlot {
                    ring,
                    decoder,
                    reported_lost: 0,
                });
            }
            // Each member writes into its set's ring of its CPU.
            for (cpu, member) in set.members {
                let ring = slots[first..]
                    .iter()
                    .position(|s| s.decoder.cpu() == cpu)
                    .map_or(first, |i| first + i);
                members.push((ring, member));
            }
            Ok::<(), CaptureError>(())
        };

        // Context switches.
        let mut switch_source = None;
        // Wait points of a process capture: (tried, opened).
        let (mut process_waits_tried, mut process_wait_points) = (false, false);
        if config.switches {
            match config.target {
                CaptureTarget::Process(pid) => {
                    let attr = EventAttr::process_switches(source)
                        .with_mmaps(config.mmaps)
                        .with_wakeup_watermark(watermark)
                        .with_identifier();
                    let set = opener
                        .per_thread(&attr, pid, &cpus, &registry)
                        .map_err(|e| e.into_error(&perms, Need::ProcessSwitches))?;
                    if config.wait_points {
                        // Added first: a switch's wait point comes before the switch-out
                        // record, and the merge puts equal times in the order rings were
                        // added.
                        process_waits_tried = true;
                        let targets = (pid, &cpus[..], &registry);
                        let clock = (source, watermark);
                        match open_wait_points(&opener, (&config, &perms), targets, clock) {
                            Ok((set, attr, fmt)) => {
                                add(set, &attr, Some(RawFormat::WaitPoints(fmt)))?;
                                process_wait_points = true;
                            }
                            Err(note) => unsupported.push(note),
                        }
                    }
                    add(set, &attr, None)?;
                    switch_source = Some(SwitchSource::ProcessSwitchRecords);
                }
                CaptureTarget::SystemWide => {
                    match open_tracepoint(&opener, &config, &perms, &cpus, source, watermark) {
                        Ok((set, attr, fmt)) => {
                            add(set, &attr, Some(RawFormat::Switch(fmt)))?;
                            switch_source = Some(SwitchSource::SchedSwitchTracepoint);
                        }
                        Err(note) => {
                            unsupported.push(note);
                            let attr = EventAttr::cpu_wide_switches(source)
                                .with_mmaps(config.mmaps)
                                .with_wakeup_watermark(watermark);
                            let set = opener
                                .per_cpu(&attr, &cpus)
                                .map_err(|f| f.into_error(&perms, Need::CpuWide))?;
                            add(set, &attr, None)?;
                            switch_source = Some(SwitchSource::CpuWideSwitchRecords);
                        }
                    }
                }
            }
        }

        let wait_points = process_wait_points
            || config.wait_points && switch_source == Some(SwitchSource::SchedSwitchTracepoint);
        if config.wait_points && !wait_points && !process_waits_tried {
            let hint = "they need the sched:sched_switch tracepoint (system-wide, it is the \
                        switches' source); not recorded";
            unsupported.push(Unsupported {
                what: "wait points (call chains at sched_switch)".into(),
                errno: None,
                summary: hint.into(),
                hint: hint.into(),
            });
        }

        // Wake-ups.
        let mut wakeups = false;
        if config.wakeups {
            let clock = (source, watermark);
            match open_waking(&opener, &config, &perms, &cpus, &registry, clock) {
                Ok((set, attr, fmt, wakeup_new)) => {
                    add(set, &attr, Some(RawFormat::Waking(fmt)))?;
                    wakeups = true;
                    unsupported.extend(wakeup_new);
                }
                Err(note) => unsupported.push(note),
            }
        }

        // CPU samples.
        let mut sampling = None;
        if let Some(hz) = config.sample_hz {
            match open_sampling(
                &opener,
                &config,
                &perms,
                &cpus,
                &registry,
                (hz, source, watermark),
            ) {
                Ok((set, attr)) => {
                    add(set, &attr, None)?;
                    sampling = Some((hz, !attr.exclude_kernel()));
                }
                Err(note) => unsupported.push(note),
            }
        }

        // Kernel symbols, for the kernel frames of wait points and samples.
        let mut symbols = None;
        let kallsyms = config.proc_root.join("kallsyms");
        if wait_points || sampling.is_some_and(|(_, kernel)| kernel) {
            let given = config.kernel_symbols.clone();
            match given.map_or_else(|| KernelSymbols::read(&kallsyms), Ok) {
                Ok(s) => symbols = Some(s),
                Err(e) => {
                    let hint = format!("{e}; kernel frames stay addresses");
                    unsupported.push(Unsupported {
                        what: "kernel symbols".into(),
                        errno: None,
                        summary: hint.clone(),
                        hint,
                    })
                }
            }
        }

        // LBR.
        let mut lbr = None;
        if let Some(cfg) = config.lbr {
            let cfg = BranchSampling {
                include_kernel: cfg.include_kernel
                    && perms.allows(Need::HardwareSampling { kernel: true }),
                ..cfg
            };
            let need = Need::HardwareSampling {
                kernel: cfg.include_kernel,
            };
            // Without a switch event, the LBR event carries the mapping records.
            let mut attr = EventAttr::branch_sampling(cfg, source)
                .with_mmaps(config.mmaps && !config.switches)
                .with_wakeup_watermark(watermark);
            let opened = match config.target {
                CaptureTarget::SystemWide => {
                    opener.per_cpu(&attr, &cpus).map_err(OpenError::Failure)
                }
                CaptureTarget::Process(pid) => {
                    attr = attr.with_identifier();
                    if !config.switches && sampling.is_none() {
                        // The FORK records, as the CPU samples' (`open_sampling`).
                        attr = attr.with_side_band();
                    }
                    opener.per_thread(&attr.clone().with_inherit(true), pid, &cpus, &registry)
                }
            };
            match opened {
                Ok(set) => {
                    add(set, &attr, None)?;
                    lbr = Some(cfg);
                }
                Err(OpenError::Failure(f)) => {
                    let errno = f.errno();
                    let class = match &f.error {
                        Ok(e) if is_unsupported_error(e) => "not supported here",
                        Ok(e) if is_permission_error(e) => "not permitted",
                        _ => "failed",
                    };
                    unsupported.push(Unsupported {
                        what: "LBR branch-stack sampling (cpu-cycles)".into(),
                        errno,
                        hint: format!("{class}: {}; {}", f.describe(), perms.remedy(need, errno)),
                        summary: format!("{class}: {}", perms.remedy_short(need, errno)),
                    });
                }
                Err(OpenError::Fatal(e)) => unsupported.push(Unsupported {
                    what: "LBR branch-stack sampling (cpu-cycles)".into(),
                    errno: None,
                    hint: e.to_string(),
                    summary: e.to_string(),
                }),
            }
        }

        if slots.is_empty() {
            let why = unsupported
                .iter()
                .map(|u| format!("{}: {}", u.what, u.summary))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(CaptureError::NothingToCapture {
                why,
                unavailable: unsupported,
            });
        }

        // Mappings read from /proc are stamped before enabling: no kernel record is older.
        let start_ticks = crate::clock::ticks();
        // Enable everything now that every ring exists.
        for fd in slots
            .iter()
            .map(|s| s.ring.fd())
            .chain(members.iter().map(|(_, m)| {
                // SAFETY: just opened by this function; the number is the event's.
                unsafe { std::os::fd::BorrowedFd::borrow_raw(m.raw()) }
            }))
        {
            sys.ioctl(fd, PerfIoctl::Enable)
                .map_err(|source| CaptureError::Ioctl {
                    what: "ENABLE",
                    source,
                })?;
        }

        let report = CaptureReport {
            switch_source,
            lbr,
            wakeups,
            wait_points,
            sampling,
            kernel_symbols: symbols.is_some(),
            unsupported: unsupported.clone(),
            clock,
            cpus,
            rings: slots.len(),
            events,
        };
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(StopSignal {
            pipe: WakePipe::new("capture stop pipe")
                .map_err(|e| CaptureError::Thread(format!("pipe: {e}")))?,
            requested: AtomicBool::new(false),
            at_exit: AtomicBool::new(false),
        });
        let streams = slots.len();
        let mut worker = Worker {
            sys: sys.clone(),
            slots,
            members,
            stop: stop.clone(),
            conv: clock,
            merger: Merger::new(streams),
            slack: config.merge_slack.as_nanos() as u64,
            // At least 1 ms: a zero timeout would turn the capture thread into a busy loop.
            poll_ms: i32::try_from(config.poll_interval.as_millis())
                .unwrap_or(i32::MAX)
                .max(1),
            synthesize: config.mmaps.then(|| Synthesize {
                proc_root: config.proc_root.clone(),
                pid: match config.target {
                    CaptureTarget::SystemWide => None,
                    CaptureTarget::Process(pid) => Some(pid),
                },
                time: start_ticks,
            }),
            synthesized: None,
            scan_proc: config.target == CaptureTarget::SystemWide,
            scan_thread_names: switch_source == Some(SwitchSource::CpuWideSwitchRecords),
            delivery: Delivery {
                resolver: PidResolver::new(registry),
                build_ids: Some(BuildIdCache::new()),
                announced: IdMap::default(),
                recent: Box::new([None; ANNOUNCED_SLOTS]),
                waiting: IdMap::default(),
                samples: (!sample_filter.is_empty()).then_some(sample_filter),
                stacks: StackInterner::new(MAX_STACK_BYTES, symbols)
                    .with_fallback(config.kernel_symbols.is_some().then_some(kallsyms)),
                counters: counters.clone(),
                sink: Box::new(sink),
            },
            unsupported,
        };
        // Before `start` returns, so that what the caller does next (say, let the traced
        // program exec) is seen either in `/proc` now or by the enabled events.
        worker.prepare();
        let thread = crate::helper_thread::spawn("fxtrace-capture", move || worker.run())
            .map_err(|e| CaptureError::Thread(format!("spawn: {e}")))?;
        Ok(Self {
            report,
            counters,
            stop,
            thread: Some(thread),
        })
    }

    /// What was opened, and what could not be.
    pub fn report(&self) -> &CaptureReport {
        &self.report
    }

    /// A handle that asks the capture thread to stop from anywhere, a signal handler too:
    /// the thread drains its rings a last time, delivers everything and ends, and
    /// [`Self::stop`] then only waits for it. An exit hook starts that while the thread that
    /// will call `stop` is still waking up.
    pub fn stopper(&self) -> CaptureStopper {
        CaptureStopper {
            signal: self.stop.clone(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> CaptureStats {
        self.counters.snapshot()
    }

    /// Stops capturing: disables the events, drains every ring, delivers what is left, and
    /// returns the final counters (or the capture thread's error).
    pub fn stop(self) -> Result<CaptureStats, CaptureError> {
        let (stats, outcome) = self.stop_with_stats();
        outcome.map(|()| stats)
    }

    /// [`Self::stop`], with the counters after the last drain whatever the outcome: a
    /// capture that failed (its thread, a poll, a descriptor the program took) still
    /// delivered what it had, and these count it.
    pub fn stop_with_stats(mut self) -> (CaptureStats, Result<(), CaptureError>) {
        let outcome = self.shutdown();
        (self.counters.snapshot(), outcome)
    }

    fn shutdown(&mut self) -> Result<(), CaptureError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        // ATOMICS: see `StopSignal::requested`.
        self.stop.requested.store(true, Ordering::Relaxed);
        // A stop pipe the program took: the thread sees the flag within one poll interval.
        let _ = self.stop.pipe.wake();
        thread.join().map_err(|_| {
            CaptureError::Thread("the capture thread panicked (in the sink?)".into())
        })?
    }
}

/// Asks a capture thread to stop ([`Capture::stopper`]).
#[derive(Debug, Clone)]
pub struct CaptureStopper {
    signal: Arc<StopSignal>,
}

impl CaptureStopper {
    /// Ask the capture thread to stop (see [`Capture::stopper`]). Async-signal-safe: an atomic
    /// store and a checked one-byte write; a stop pipe the program took is not written, and
    /// the thread sees the flag within its poll interval.
    pub fn request(&self) {
        // ATOMICS: see `StopSignal::requested`.
        self.signal.requested.store(true, Ordering::Relaxed);
        let _ = self.signal.pipe.wake();
    }

    /// [`Self::request`] from a process that is ending (its exit, or an exec that will
    /// replace its image): the last drain leaves the events enabled, and their rings and
    /// descriptors to the kernel, which tears them down with the process more cheaply than
    /// disabling and closing them one by one. What the process does after the last drain is
    /// not read, as it would not be recorded after a stop. Async-signal-safe, as `request`.
    pub fn request_at_exit(&self) {
        // ATOMICS: see `StopSignal::at_exit`.
        self.signal.at_exit.store(true, Ordering::Relaxed);
        self.request();
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // Errors here have no one to go to; `stop` is the way to see them.
        let _ = self.shutdown();
    }
}

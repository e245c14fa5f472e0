//! The built-in kernel provider: a capture session whose events become FXT records in a provider
//! section of their own ([`KernelProvider`]), and `fxtrace record --system-wide` on top of it
//! ([`SystemWideRecording`]).
//!
//! [`KernelProvider`] is the component a trace manager runs next to its user providers: it
//! starts a [`Capture`], converts every event on the capture thread with a
//! [`KernelTraceWriter`], and pushes the records into any [`RecordSink`] (a file, a pipe, an
//! engine buffer). Its section starts with Provider Info metadata (default id 1, `"kernel"`)
//! and an Initialization record (the TSC rate).
//!
//! [`SystemWideRecording`] is the standalone recorder: it checks the permissions, writes a trace
//! file (magic number, then the kernel provider's section), runs an optional command, and stops
//! when the command exits, after a duration, or on an interrupt (see
//! [`interrupt_on_signals`]), then prints what it captured ([`SystemWideSummary`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use fxtrace::capture::kernel_provider::{interrupt_on_signals, SystemWideConfig, SystemWideRecording};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let interrupt = interrupt_on_signals()?;
//! let config = SystemWideConfig {
//!     duration: Some(Duration::from_secs(2)),
//!     ..SystemWideConfig::new("trace.fxt")
//! };
//! let recording = SystemWideRecording::start(config)?;
//! let summary = recording.wait(interrupt)?;
//! println!("{summary}");
//! # Ok(())
//! # }
//! ```

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::attr::BranchSampling;
use super::events::Unsupported;
use super::fxt::{
    FxtStreamSink, KernelTraceConfig, KernelTraceStats, KernelTraceWriter, RecordSink, SinkError,
    UNKNOWN_PROCESS_KOID, UNKNOWN_PROCESS_NAME,
};
use super::permissions::{Need, PerfPermissions};
use super::session::{
    Capture, CaptureConfig, CaptureError, CaptureReport, CaptureStats, SwitchSource,
};
use super::sys::{RealSys, Sys};

// === impl KernelProvider ===

/// What a [`KernelProvider`] captures and how its section is labelled.
#[derive(Debug, Clone)]
pub struct KernelProviderConfig {
    /// The capture session.
    pub capture: CaptureConfig,
    /// The provider section (id, name, clock, recorder thread).
    pub trace: KernelTraceConfig,
}

impl KernelProviderConfig {
    /// System-wide switches, LBR as given, provider 1 `"kernel"`.
    pub fn system_wide(lbr: Option<BranchSampling>) -> Self {
        Self {
            capture: CaptureConfig {
                lbr,
                // Mappings name the LBR samples' addresses (`fxtrace report lbr`).
                mmaps: lbr.is_some(),
                ..CaptureConfig::system_wide()
            },
            trace: KernelTraceConfig::kernel(),
        }
    }
}

/// Errors of the kernel provider.
#[derive(Debug, Error)]
pub enum KernelProviderError {
    /// The capture could not start or failed while running.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// The provider section's first records could not be written.
    #[error("starting the kernel provider's section: {0}")]
    Header(SinkError),
    /// Writing the trace failed while capturing; later events were not written.
    #[error("{source} ({unwritten} capture events after it were not written)")]
    Write {
        /// The first write error.
        source: SinkError,
        /// Events not written because of it.
        unwritten: u64,
    },
}

/// The writer as the capture thread and the owner share it.
#[derive(Debug)]
struct Shared<S: RecordSink> {
    writer: Option<KernelTraceWriter<S>>,
    error: Option<SinkError>,
    unwritten: u64,
}

fn lock<S: RecordSink>(shared: &Mutex<Shared<S>>) -> MutexGuard<'_, Shared<S>> {
    // A panic in the writer leaves counters that are still meaningful; keep going.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running kernel provider (see the module docs). Stops on [`KernelProvider::stop`] or drop.
#[derive(Debug)]
pub struct KernelProvider<S: RecordSink + Send + 'static> {
    capture: Capture,
    shared: Arc<Mutex<Shared<S>>>,
}

/// What a stopped kernel provider hands back.
#[derive(Debug)]
pub struct KernelProviderOutcome<S> {
    /// The sink, holding the whole section.
    pub sink: S,
    /// What the capture opened.
    pub report: CaptureReport,
    /// The capture's counters.
    pub capture: CaptureStats,
    /// The conversion's counters.
    pub trace: KernelTraceStats,
}

impl<S: RecordSink + Send + 'static> KernelProvider<S> {
    /// Writes the section's first records into `sink` and starts capturing on the kernel.
    pub fn start(config: KernelProviderConfig, sink: S) -> Result<Self, KernelProviderError> {
        Self::start_with(Arc::new(RealSys), PerfPermissions::read(), config, sink)
    }

    /// As [`KernelProvider::start`], through `sys` (a fake in tests) with these permissions.
    pub fn start_with(
        sys: Arc<dyn Sys>,
        perms: PerfPermissions,
        config: KernelProviderConfig,
        sink: S,
    ) -> Result<Self, KernelProviderError> {
        let writer =
            KernelTraceWriter::new(sink, config.trace).map_err(KernelProviderError::Header)?;
        let shared = Arc::new(Mutex::new(Shared {
            writer: Some(writer),
            error: None,
            unwritten: 0,
        }));
        let for_capture = shared.clone();
        let capture = Capture::start_with(sys, perms, config.capture, move |event| {
            let mut guard = lock(&for_capture);
            let shared = &mut *guard;
            if shared.error.is_some() {
                shared.unwritten += 1;
                return;
            }
            if let Some(writer) = shared.writer.as_mut() {
                if let Err(e) = writer.handle(&event) {
                    shared.error = Some(e);
                    shared.unwritten += 1;
                }
            }
        })?;
        Ok(Self { capture, shared })
    }

    /// What the capture opened, and what it could not.
    pub fn report(&self) -> &CaptureReport {
        self.capture.report()
    }

    /// The capture's counters so far.
    pub fn capture_stats(&self) -> CaptureStats {
        self.capture.stats()
    }

    /// The conversion's counters so far.
    pub fn trace_stats(&self) -> KernelTraceStats {
        lock(&self.shared)
            .writer
            .as_ref()
            .map(KernelTraceWriter::stats)
            .unwrap_or_default()
    }

    /// Stops the capture, writes what is left and the section's closing records, and returns
    /// the sink with the counters.
    pub fn stop(self) -> Result<KernelProviderOutcome<S>, KernelProviderError> {
        let report = self.capture.report().clone();
        let capture = self.capture.stop()?;
        let mut shared = lock(&self.shared);
        if let Some(source) = shared.error.take() {
            return Err(KernelProviderError::Write {
                source,
                unwritten: shared.unwritten,
            });
        }
        let writer = shared
            .writer
            .take()
            .ok_or_else(|| KernelProviderError::Write {
                source: SinkError::Io(io::Error::other("the kernel trace writer is gone")),
                unwritten: 0,
            })?;
        drop(shared);
        let (sink, trace) = writer
            .finish()
            .map_err(|source| KernelProviderError::Write {
                source,
                unwritten: 0,
            })?;
        Ok(KernelProviderOutcome {
            sink,
            report,
            capture,
            trace,
        })
    }
}

// === interrupts ===

/// Set by the signal handler; see [`interrupt_on_signals`].
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: libc::c_int) {
    // ATOMICS: a flag polled by the recording loop, which reads nothing else the handler
    // writes: Relaxed. `swap` tells a second signal from the first.
    if INTERRUPTED.swap(true, Ordering::Relaxed) {
        // Second signal: the user insists. Die of it, as if no handler were installed.
        // SAFETY: signal() and raise() are async-signal-safe; restoring the default action and
        // re-raising ends the process with the signal's usual status.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
}

/// Installs SIGINT and SIGTERM handlers that set the returned flag (a second signal ends the
/// process at once, without writing the trace). Pass the flag to
/// [`SystemWideRecording::wait`].
pub fn interrupt_on_signals() -> io::Result<&'static AtomicBool> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only touches an atomic and calls async-signal-safe functions.
        unsafe { sigaction(signal, &action) }.map_err(io::Error::from)?;
    }
    Ok(&INTERRUPTED)
}

// === impl SystemWideRecording ===

/// What `fxtrace record --system-wide` does.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemWideConfig {
    /// The trace file to write.
    pub output: PathBuf,
    /// LBR sampling (`None`: off).
    pub lbr: Option<BranchSampling>,
    /// Data pages per CPU ring (a power of two).
    pub ring_pages: usize,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Run this command (program and arguments) and stop when it exits.
    pub command: Vec<OsString>,
}

impl SystemWideConfig {
    /// Writes `output`; LBR on with the default period; 1 MiB rings; no duration, no command.
    pub fn new(output: impl Into<PathBuf>) -> Self {
        Self {
            output: output.into(),
            lbr: Some(BranchSampling {
                include_kernel: true,
                ..BranchSampling::default()
            }),
            ring_pages: CaptureConfig::system_wide().ring_pages,
            duration: None,
            command: Vec::new(),
        }
    }
}

/// Errors of a system-wide recording.
#[derive(Debug, Error)]
pub enum RecordError {
    /// This process may not capture system-wide.
    #[error("fxtrace record --system-wide: {remedy}")]
    NotPermitted {
        /// What is missing and what to do.
        remedy: String,
    },
    /// The output file could not be created or written.
    #[error("{path}: {source}")]
    Output {
        /// The output file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The command could not be started.
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        /// The program.
        program: OsString,
        /// The cause.
        source: io::Error,
    },
    /// Waiting for the command failed.
    #[error("waiting for the command: {0}")]
    Wait(io::Error),
    /// The kernel provider failed.
    #[error(transparent)]
    Provider(#[from] KernelProviderError),
}

/// Why a recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The command exited.
    CommandExited,
    /// The duration elapsed.
    Duration,
    /// An interrupt (Ctrl-C, SIGTERM).
    Interrupted,
}

/// Whether LBR was captured.
#[derive(Debug, Clone, PartialEq)]
pub enum LbrStatus {
    /// Not requested (`--no-lbr`).
    Off,
    /// Branch stacks were sampled.
    Active(BranchSampling),
    /// Requested but unavailable; the reason is in the trace too.
    Unavailable(String),
}

/// What a system-wide recording captured (printed by `fxtrace record` after its provider
/// table, which already names the output file: this part does not repeat it).
#[derive(Debug, Clone)]
pub struct SystemWideSummary {
    /// The trace file.
    pub output: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Where the context switches came from.
    pub switch_source: Option<SwitchSource>,
    /// LBR.
    pub lbr: LbrStatus,
    /// Sources that could not be used (LBR included), as written into the trace.
    pub unsupported: Vec<Unsupported>,
    /// The capture's counters.
    pub capture: CaptureStats,
    /// The conversion's counters.
    pub trace: KernelTraceStats,
    /// Why it stopped.
    pub stopped_by: StopReason,
    /// The command's exit status, if one ran and ended.
    pub command_status: Option<ExitStatus>,
    /// Capture time.
    pub elapsed: Duration,
}

impl fmt::Display for SystemWideSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.trace;
        let c = &self.capture;
        writeln!(f, "system-wide (kernel section):")?;
        let source = match self.switch_source {
            Some(SwitchSource::SchedSwitchTracepoint) => "sched:sched_switch tracepoint",
            Some(SwitchSource::CpuWideSwitchRecords) => "PERF_RECORD_SWITCH_CPU_WIDE",
            Some(SwitchSource::ProcessSwitchRecords) => "PERF_RECORD_SWITCH",
            None => "none",
        };
        writeln!(
            f,
            "  context switches: {} (from {source})",
            t.context_switches
        )?;
        writeln!(
            f,
            "  lost: {} records, {} samples{}",
            t.lost_records,
            t.lost_samples,
            if t.lost_anything() {
                " (marked in the trace)"
            } else {
                ""
            }
        )?;
        writeln!(
            f,
            "  threads: {} ({} beyond the thread table, referenced inline)",
            t.threads, t.unindexed_threads
        )?;
        if t.unknown_process_threads > 0 {
            writeln!(
                f,
                "  {} threads with unknown process (in process {:#x}, \"{}\")",
                t.unknown_process_threads, UNKNOWN_PROCESS_KOID, UNKNOWN_PROCESS_NAME
            )?;
        }
        match &self.lbr {
            LbrStatus::Off => writeln!(f, "  LBR: off")?,
            LbrStatus::Active(b) => writeln!(
                f,
                "  LBR: {} samples (every {} cycles{})",
                t.branch_blobs,
                b.period,
                if b.include_kernel {
                    ", user and kernel"
                } else {
                    ", user only"
                }
            )?,
            LbrStatus::Unavailable(why) => writeln!(f, "  LBR: unavailable: {why}")?,
        }
        for u in &self.unsupported {
            if !u.what.contains("LBR") {
                writeln!(f, "  note: {} unavailable: {}", u.what, u.hint)?;
            }
        }
        let damage = [
            ("records that failed to parse", c.parse_errors),
            ("events out of time order", t.late),
            ("records the trace could not hold", t.dropped_records),
            ("LBR entries beyond 32", t.lbr_entries_truncated),
            ("mappings whose path or build-id was cut", t.mmaps_truncated),
            (
                "mappings not kept for forked children (limit reached)",
                t.mmaps_not_remembered,
            ),
        ];
        for (what, n) in damage.iter().filter(|(_, n)| *n > 0) {
            writeln!(f, "  warning: {n} {what}")?;
        }
        let stopped = match self.stopped_by {
            StopReason::CommandExited => "the command exited",
            StopReason::Duration => "the duration elapsed",
            StopReason::Interrupted => "interrupted",
        };
        write!(
            f,
            "  stopped after {:.3} s: {stopped}",
            self.elapsed.as_secs_f64()
        )?;
        if let Some(status) = self.command_status {
            write!(f, " (command {status})")?;
        }
        Ok(())
    }
}

/// A running `fxtrace record --system-wide` (see the module docs).
#[derive(Debug)]
pub struct SystemWideRecording {
    config: SystemWideConfig,
    provider: KernelProvider<FxtStreamSink<File>>,
    child: Option<Child>,
    started: Instant,
}

/// How often the recording loop looks at the command, the clock and the interrupt flag.
const WAIT_STEP: Duration = Duration::from_millis(20);
/// How long a command gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);

impl SystemWideRecording {
    /// Checks permissions, creates the output file, starts the kernel provider into it, then
    /// starts the command (so its whole life is captured).
    pub fn start(config: SystemWideConfig) -> Result<Self, RecordError> {
        let perms = PerfPermissions::read();
        if !perms.allows(Need::CpuWide) {
            return Err(RecordError::NotPermitted {
                remedy: perms.remedy(Need::RawTracepoint, None),
            });
        }
        let output_error = |source| RecordError::Output {
            path: config.output.clone(),
            source,
        };
        let file = File::create(&config.output).map_err(output_error)?;
        let provider_config = KernelProviderConfig {
            capture: CaptureConfig {
                lbr: config.lbr,
                ring_pages: config.ring_pages,
                mmaps: config.lbr.is_some(),
                ..CaptureConfig::system_wide()
            },
            trace: KernelTraceConfig::kernel(),
        };
        let provider = match KernelProvider::start(provider_config, FxtStreamSink::with_magic(file))
        {
            Ok(p) => p,
            Err(e) => {
                // Nothing was captured: leave no half-written file behind.
                let _ = std::fs::remove_file(&config.output);
                return Err(e.into());
            }
        };
        let child = match config.command.split_first() {
            Some((program, args)) => match Command::new(program).args(args).spawn() {
                Ok(child) => Some(child),
                Err(source) => {
                    // The capture is dropped (stopped) with the provider; the file is useless.
                    drop(provider);
                    let _ = std::fs::remove_file(&config.output);
                    return Err(RecordError::Spawn {
                        program: program.clone(),
                        source,
                    });
                }
            },
            None => None,
        };
        Ok(Self {
            config,
            provider,
            child,
            started: Instant::now(),
        })
    }

    /// What the capture opened.
    pub fn report(&self) -> &CaptureReport {
        self.provider.report()
    }

    /// The command's process id, if one runs.
    pub fn command_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits until the command exits, the duration elapses or `interrupt` is set; then
    /// stops the command if it still runs (SIGTERM, SIGKILL after 2 s), stops the capture,
    /// finishes the file and returns the summary.
    pub fn wait(mut self, interrupt: &AtomicBool) -> Result<SystemWideSummary, RecordError> {
        let deadline = self.config.duration.map(|d| self.started + d);
        let mut command_status = None;
        let stopped_by = loop {
            // ATOMICS: a flag with nothing published through it: Relaxed.
            if interrupt.load(Ordering::Relaxed) {
                break StopReason::Interrupted;
            }
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait().map_err(RecordError::Wait)? {
                    command_status = Some(status);
                    break StopReason::CommandExited;
                }
            }
            let mut step = WAIT_STEP;
            if let Some(deadline) = deadline {
                let now = Instant::now();
                if now >= deadline {
                    break StopReason::Duration;
                }
                step = step.min(deadline - now);
            }
            std::thread::sleep(step);
        };
        if command_status.is_none() {
            if let Some(child) = self.child.take() {
                command_status = Some(terminate(child).map_err(RecordError::Wait)?);
            }
        }
        let elapsed = self.started.elapsed();
        let outcome = self.provider.stop()?;
        let bytes = outcome.sink.bytes();
        outcome
            .sink
            .finish()
            .map_err(|source| RecordError::Output {
                path: self.config.output.clone(),
                source,
            })?;
        let lbr = match (self.config.lbr, outcome.report.lbr) {
            (None, _) => LbrStatus::Off,
            (Some(_), Some(active)) => LbrStatus::Active(active),
            (Some(_), None) => LbrStatus::Unavailable(
                outcome
                    .report
                    .unsupported
                    .iter()
                    .find(|u| u.what.contains("LBR"))
                    .map_or_else(|| "not opened".to_owned(), |u| u.hint.clone()),
            ),
        };
        Ok(SystemWideSummary {
            output: self.config.output,
            bytes,
            switch_source: outcome.report.switch_source,
            lbr,
            unsupported: outcome.report.unsupported,
            capture: outcome.capture,
            trace: outcome.trace,
            stopped_by,
            command_status,
            elapsed,
        })
    }
}

/// SIGTERM, up to [`TERM_GRACE`] to exit, then SIGKILL; returns the exit status.
fn terminate(mut child: Child) -> io::Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    // ESRCH: it exited meanwhile; wait() below collects it.
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + TERM_GRACE;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        std::thread::sleep(WAIT_STEP);
    }
    child.kill()?;
    child.wait()
}

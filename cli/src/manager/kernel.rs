//! The built-in kernel provider: a capture session whose events become FXT records in a
//! provider section of their own ([`KernelProvider`]), and that provider as a section of a
//! [`Recorder`]'s archive ([`KernelSection`], what `fxtrace record --system-wide` runs).
//!
//! [`KernelProvider`] starts a [`Capture`], converts every event on the capture thread with a
//! [`KernelTraceWriter`], and pushes the records into any [`RecordSink`] (a file, a pipe, the
//! recorder's section). Its section starts with Provider Info metadata (default id 1,
//! `"kernel"`) and an Initialization record (the TSC rate). The recorder stops it after the
//! providers ([`ExternalSource`]), and [`KernelSection::summary`] says what it captured.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use thiserror::Error;

use fxtrace::capture::fxt::{UNKNOWN_PROCESS_KOID, UNKNOWN_PROCESS_NAME};
use fxtrace::capture::{
    BranchSampling, Capture, CaptureConfig, CaptureError, CaptureReport, CaptureStats,
    KernelTraceConfig, KernelTraceStats, KernelTraceWriter, PerfPermissions, RealSys, RecordSink,
    SinkError, SwitchSource, Sys, Unsupported,
};
use fxtrace_format::Record;

use super::driver::SessionDriver;
use super::recorder::{
    ExternalSource, RecordReport, Recorder, SectionError, SectionSink, StopReason,
};
use super::report::SectionLosses;

// === impl KernelProvider ===

// === impl SessionKernel ===

/// The kernel provider in a session of the trace service (`fxtrace start --system-wide`):
/// started at each start of the session, its records written into the session's archive as
/// they come (a section of the session loop, [`SessionDriver`]), stopped (and its last records
/// written, or discarded) when the session stops.
#[derive(Debug)]
pub(crate) struct SessionKernel {
    id: u32,
    provider: Option<KernelProvider<KernelSink>>,
}

/// Name of the kernel provider's section.
const KERNEL_SECTION: &str = "kernel";

impl SessionKernel {
    /// Start system-wide capture (no LBR) into a section of `driver`'s archive.
    pub(crate) fn start(driver: &mut SessionDriver) -> Result<Self, KernelProviderError> {
        let sink = driver.section_sink(KERNEL_SECTION);
        let id = sink.id();
        let config = KernelProviderConfig {
            trace: KernelTraceConfig {
                provider_id: id,
                ..KernelTraceConfig::kernel()
            },
            ..KernelProviderConfig::system_wide(None)
        };
        match KernelProvider::start(config, KernelSink(sink)) {
            Ok(provider) => Ok(Self {
                id,
                provider: Some(provider),
            }),
            Err(e) => {
                let _ = driver.close_section(id, false);
                Err(e)
            }
        }
    }

    /// Stop capturing; write what is left (`write`) or discard it. Returns the capture's
    /// counters for the session's notes.
    pub(crate) fn stop(
        mut self,
        driver: &mut SessionDriver,
        write: bool,
    ) -> Result<String, String> {
        let stopped = match self.provider.take() {
            Some(provider) => provider.stop().map_err(|e| e.to_string()),
            None => return Ok(String::new()),
        };
        let line = stopped.and_then(|mut outcome| {
            outcome.sink.0.flush().map_err(|e| e.to_string())?;
            Ok(outcome.describe())
        });
        let write = write && line.is_ok();
        driver
            .close_section(self.id, write)
            .map_err(|e| e.to_string())?;
        line
    }
}

/// What a [`KernelProvider`] captures and how its section is labelled.
#[derive(Debug, Clone)]
pub struct KernelProviderConfig {
    /// The capture session.
    pub capture: CaptureConfig,
    /// The provider section (id, name, clock, recorder thread).
    pub trace: KernelTraceConfig,
}

impl KernelProviderConfig {
    /// System-wide switches and wake-ups, LBR as given, provider 1 `"kernel"`.
    pub fn system_wide(lbr: Option<BranchSampling>) -> Self {
        Self::with_options(&KernelOptions {
            lbr,
            ..KernelOptions::default()
        })
    }

    /// System-wide capture as `options` say, provider 1 `"kernel"`.
    pub fn with_options(options: &KernelOptions) -> Self {
        Self {
            capture: CaptureConfig {
                lbr: options.lbr,
                // Mappings name the user addresses of LBR samples, wait points and CPU
                // samples (`fxtrace report`).
                mmaps: options.lbr.is_some() || options.wait_points || options.sample_hz.is_some(),
                wakeups: options.wakeups,
                wait_points: options.wait_points,
                sample_hz: options.sample_hz,
                ring_pages: options.ring_pages,
                ..CaptureConfig::system_wide()
            },
            trace: KernelTraceConfig::kernel(),
        }
    }
}

/// What the kernel provider captures besides every CPU's context switches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelOptions {
    /// LBR branch stacks (where the CPU has them).
    pub lbr: Option<BranchSampling>,
    /// Wake-ups: who woke whom (default on).
    pub wakeups: bool,
    /// Wait points: the call chain where each thread blocked (default off: the kernel walks
    /// the stack at every switch).
    pub wait_points: bool,
    /// CPU samples a second (software `cpu-clock` with call chains; default off).
    pub sample_hz: Option<u64>,
    /// Data pages per CPU ring.
    pub ring_pages: usize,
}

impl Default for KernelOptions {
    fn default() -> Self {
        let capture = CaptureConfig::system_wide();
        Self {
            lbr: None,
            wakeups: true,
            wait_points: false,
            sample_hz: None,
            ring_pages: capture.ring_pages,
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
    /// Why the capture failed while running or stopping, if it did: the events it delivered
    /// before are in the section all the same (closed as usual), and [`Self::capture`]
    /// counts them.
    pub capture_error: Option<CaptureError>,
}

impl<S> KernelProviderOutcome<S> {
    /// One line for a log: what was captured, and the capture's failure if any.
    pub fn describe(&self) -> String {
        let failure = match &self.capture_error {
            Some(e) => format!("; the capture failed: {e} (what it delivered before is kept)"),
            None => String::new(),
        };
        format!(
            "kernel provider: {} context switches, {} threads, {} records lost{failure}",
            self.trace.context_switches,
            self.trace.threads,
            self.capture
                .lost_records
                .saturating_add(self.capture.lost_samples)
        )
    }
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
    /// the sink with the counters. A capture that failed (its thread, a poll) still closes
    /// the section with what it delivered: the failure is in
    /// [`KernelProviderOutcome::capture_error`].
    pub fn stop(self) -> Result<KernelProviderOutcome<S>, KernelProviderError> {
        let report = self.capture.report().clone();
        let (capture, outcome) = self.capture.stop_with_stats();
        let capture_error = outcome.err();
        let mut shared = lock(&self.shared);
        if let Some(source) = shared.error.take() {
            return Err(KernelProviderError::Write {
                source,
                unwritten: shared.unwritten,
            });
        }
        let mut writer = shared
            .writer
            .take()
            .ok_or_else(|| KernelProviderError::Write {
                source: SinkError::Io(io::Error::other("the kernel trace writer is gone")),
                unwritten: 0,
            })?;
        drop(shared);
        writer.note_capture_damage(&capture);
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
            capture_error,
        })
    }
}

// === impl KernelSection ===

/// The recorder's section sink as the kernel provider's record sink.
#[derive(Debug)]
struct KernelSink(SectionSink);

impl RecordSink for KernelSink {
    fn push(&mut self, record: &Record<'_>) -> Result<usize, SinkError> {
        self.0.push(record).map_err(section_error)
    }

    fn push_context_switch(
        &mut self,
        record: &fxtrace_format::ContextSwitch,
    ) -> Result<usize, SinkError> {
        self.0.push_context_switch(record).map_err(section_error)
    }

    fn push_wakeup(
        &mut self,
        record: &fxtrace_format::SchedThreadWakeup<'_>,
    ) -> Result<usize, SinkError> {
        self.0.push_wakeup(record).map_err(section_error)
    }
}

fn section_error(e: SectionError) -> SinkError {
    match e {
        SectionError::Encode(e) => SinkError::Encode(e),
        SectionError::Closed => SinkError::Io(io::Error::other(e.to_string())),
    }
}

/// What the stopped kernel provider handed back, for the summary.
type KernelOutcome = Arc<Mutex<Option<Result<KernelProviderOutcome<KernelSink>, String>>>>;

/// The running kernel provider, stopped by the recorder after the providers.
#[derive(Debug)]
struct KernelSource {
    provider: Option<KernelProvider<KernelSink>>,
    outcome: KernelOutcome,
    /// Its section's id.
    section: u32,
}

impl ExternalSource for KernelSource {
    fn stop(&mut self) -> Result<(), String> {
        let Some(provider) = self.provider.take() else {
            return Ok(());
        };
        let result = match provider.stop() {
            Ok(mut outcome) => outcome
                .sink
                .0
                .flush()
                .map(|()| outcome)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        // A failed capture's section is kept (the summary says why it ended early); the
        // recorder logs the failure too.
        let error = match &result {
            Ok(outcome) => outcome.capture_error.as_ref().map(|_| outcome.describe()),
            Err(e) => Some(e.clone()),
        };
        *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        error.map_or(Ok(()), Err)
    }

    fn losses(&self) -> Vec<(u32, SectionLosses)> {
        match &*self.outcome.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(Ok(outcome)) => vec![(
                self.section,
                SectionLosses {
                    records_dropped: outcome.trace.dropped_records,
                    // What the kernel lost, and the ring records the capture could not
                    // read (the section marks both).
                    records_lost: outcome
                        .capture
                        .lost_records
                        .saturating_add(outcome.capture.lost_samples)
                        .saturating_add(outcome.trace.unparsed_records),
                },
            )],
            _ => Vec::new(),
        }
    }
}

/// The kernel provider running as a section of a [`Recorder`]'s archive: every CPU's context
/// switches, and what [`KernelOptions`] asks besides.
#[derive(Debug)]
pub struct KernelSection {
    lbr: Option<BranchSampling>,
    started: CaptureReport,
    outcome: KernelOutcome,
}

impl KernelSection {
    /// Starts system-wide capture into a new section of `recorder` (which stops it after the
    /// providers), as `options` say.
    pub fn start(
        recorder: &mut Recorder,
        options: &KernelOptions,
    ) -> Result<Self, KernelProviderError> {
        let lbr = options.lbr;
        let sink = recorder.section_sink("kernel");
        let section = sink.id();
        let config = KernelProviderConfig {
            trace: KernelTraceConfig {
                provider_id: sink.id(),
                ..KernelTraceConfig::kernel()
            },
            ..KernelProviderConfig::with_options(options)
        };
        let provider = KernelProvider::start(config, KernelSink(sink))?;
        let started = provider.report().clone();
        let outcome: KernelOutcome = Arc::new(Mutex::new(None));
        recorder.add_external(Box::new(KernelSource {
            provider: Some(provider),
            outcome: outcome.clone(),
            section,
        }));
        Ok(Self {
            lbr,
            started,
            outcome,
        })
    }

    /// What the capture opened at the start (CPUs, the switch source, LBR).
    pub fn report(&self) -> &CaptureReport {
        &self.started
    }

    /// What the provider captured, once the recorder has run (`report` is the recorder's);
    /// the error says why the provider failed or was never stopped.
    pub fn summary(&self, report: &RecordReport) -> Result<KernelSummary, String> {
        let taken = self
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let outcome = match taken {
            Some(Ok(outcome)) => outcome,
            Some(Err(e)) => return Err(format!("the kernel provider failed: {e}")),
            None => return Err("the kernel provider was not stopped".to_owned()),
        };
        let lbr = match (self.lbr, outcome.report.lbr) {
            (None, _) => LbrStatus::Off,
            (Some(_), Some(active)) => LbrStatus::Active(active),
            (Some(_), None) => LbrStatus::Unavailable(
                outcome
                    .report
                    .unsupported
                    .iter()
                    .find(|u| u.what.contains("LBR"))
                    .map_or_else(|| "not opened".to_owned(), |u| u.summary.clone()),
            ),
        };
        Ok(KernelSummary {
            output: report.output.clone(),
            bytes: report.output_bytes,
            switch_source: outcome.report.switch_source,
            lbr,
            unsupported: outcome.report.unsupported.clone(),
            capture: outcome.capture,
            trace: outcome.trace,
            capture_error: outcome.capture_error.map(|e| e.to_string()),
            started: outcome.report.clone(),
            stopped_by: report.stop_reason.clone(),
            command_status: report.command_status,
            elapsed: report.elapsed,
        })
    }
}

// === the summary ===

/// Whether LBR was captured.
#[derive(Debug, Clone, PartialEq)]
pub enum LbrStatus {
    /// Not requested (`--no-lbr`).
    Off,
    /// Branch stacks were sampled.
    Active(BranchSampling),
    /// Requested but unavailable: why, in one line (said when the recording started; the trace
    /// holds the whole text).
    Unavailable(String),
}

/// What the kernel provider of a recording captured (printed by `fxtrace record --system-wide`
/// after its provider table, which already names the output file: this part does not repeat it).
#[derive(Debug, Clone)]
pub struct KernelSummary {
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
    /// Why the capture failed before the end, if it did (what it delivered before is in the
    /// trace).
    pub capture_error: Option<String>,
    /// Why it stopped.
    pub stopped_by: StopReason,
    /// The command's exit status, if one ran and ended.
    pub command_status: Option<ExitStatus>,
    /// Capture time.
    pub elapsed: Duration,
    /// What the capture opened.
    pub started: CaptureReport,
}

impl KernelSummary {
    /// The lines of what the capture recorded beside the switches: wake-ups, wait points,
    /// samples and their call chains.
    fn fmt_signals(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.trace;
        if self.started.wakeups {
            writeln!(f, "  wake-ups: {}", t.wakeups)?;
        }
        if self.started.wait_points {
            writeln!(
                f,
                "  wait points: {} switches with the call chain where the thread blocked",
                t.wait_points
            )?;
        }
        if let Some((hz, kernel)) = self.started.sampling {
            writeln!(
                f,
                "  CPU samples: {} (cpu-clock at {hz} Hz, {} frames)",
                t.samples,
                if kernel { "kernel and user" } else { "user" }
            )?;
        }
        if t.stack_blobs > 0 {
            writeln!(
                f,
                "  call chains: {} distinct, {} kernel symbols{}",
                t.stack_blobs,
                t.kernel_symbols,
                if self.started.kernel_symbols || !self.started.wait_points {
                    ""
                } else {
                    " (kernel frames unnamed: /proc/kallsyms unreadable)"
                }
            )?;
        }
        Ok(())
    }

    /// One warning line per kind of damage the capture or the conversion counted.
    fn fmt_damage(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (t, c) = (&self.trace, &self.capture);
        let damage = [
            ("records that failed to parse", c.parse_errors),
            (
                "ring bytes skipped after a corrupt record header",
                c.corrupt_bytes,
            ),
            (
                "records of a type fxtrace did not ask for, skipped",
                c.unknown_records,
            ),
            (
                "samples from events that should give none, skipped",
                c.unexpected_samples,
            ),
            (
                "lines of /proc/PID/maps that did not parse",
                c.maps_bad_lines,
            ),
            ("events out of time order", t.late),
            ("records the trace could not hold", t.dropped_records),
            ("LBR entries beyond 32", t.lbr_entries_truncated),
            (
                "call chains not kept (the bound on distinct stacks was reached)",
                c.stacks_not_interned,
            ),
            ("mappings whose path or build-id was cut", t.mmaps_truncated),
            (
                "mappings not kept for forked children (limit reached)",
                t.mmaps_not_remembered,
            ),
        ];
        for (what, n) in damage.iter().filter(|(_, n)| *n > 0) {
            writeln!(f, "  warning: {n} {what}")?;
        }
        Ok(())
    }
}

impl fmt::Display for KernelSummary {
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
        self.fmt_signals(f)?;
        let at_stop = match c.lost_unreported {
            0 => String::new(),
            n => format!(", {n} of the records counted at the stop (no LOST record after them)"),
        };
        writeln!(
            f,
            "  lost: {} records, {} samples{}{at_stop}",
            t.lost_records,
            t.lost_samples,
            if t.lost_anything() {
                " (marked in the trace)"
            } else {
                ""
            }
        )?;
        if c.duplicates > 0 {
            writeln!(
                f,
                "  copies dropped: {} records a thread's second event wrote (a thread made \
                 while the events were opened)",
                c.duplicates
            )?;
        }
        if c.unknown_task_switches > 0 {
            writeln!(
                f,
                "  switches skipped: {} naming only tasks already reaped (the kernel no longer \
                 said which)",
                c.unknown_task_switches
            )?;
        }
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
            // Said once, when the recording started.
            LbrStatus::Unavailable(_) => writeln!(f, "  LBR: unavailable (see above)")?,
        }
        for u in &self.unsupported {
            if !u.what.contains("LBR") {
                writeln!(f, "  note: {} unavailable: {}", u.what, u.summary)?;
            }
        }
        if let Some(e) = &self.capture_error {
            writeln!(
                f,
                "  error: the capture failed before the end: {e}; what it delivered before is in \
                 the trace"
            )?;
        }
        self.fmt_damage(f)?;
        let stopped = match self.stopped_by {
            StopReason::CommandExited => "the command exited",
            StopReason::Duration => "the duration elapsed",
            StopReason::Signal(_)
            | StopReason::Alert { .. }
            | StopReason::Requested
            | StopReason::OutputFailed => "interrupted",
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

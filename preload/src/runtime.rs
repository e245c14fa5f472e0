//! What the preload object does in a process: register with the trace manager, install the
//! engine context, capture the process's context switches into it, and flush at exit.
//!
//! Order at load ([`init`]):
//!
//! 1. Read the options (one table, [`crate::opt`]); log them if asked.
//! 2. Connect to the manager as a provider named after the executable. Nobody listening: stop
//!    here. The program runs untouched; this cost one failed `connect`.
//! 3. Install the provider's context as the process's current context (the C API and any
//!    Rust instrumentation write into it). A Start the manager sends right behind Initialize
//!    (`fxtrace record` does) was served while connecting, on this thread; a later one is
//!    waited for (bounded), but not when loaded by `dlopen`, whose lock keeps the provider's
//!    thread from serving it.
//! 4. Name the process and the loading thread (engine thread registration).
//! 5. Start the per-process context-switch capture (perf, inherited by every thread and
//!    child the program creates; LBR sampling where the CPU has it; wake-ups where raw
//!    tracepoint data is allowed and tracefs mounted): its events go through a
//!    [`KernelTraceWriter`] into an [`EngineSink`] over the same context. A capture that cannot
//!    start (perf not permitted, …) is noted in the trace and the rest goes on.
//! 6. Start the flusher thread and arm the hooks ([`crate::hooks`]): exit (and, opt-in,
//!    SIGTERM/SIGINT/SIGHUP) flushes, bounded by `FXTRACE_PRELOAD_FLUSH_MS`.
//!
//! The flush ([`Runtime::finish`], on the flusher thread): stop the capture (its rings are
//! drained and converted), write the capture summary, stop the engine (waiting, bounded, for
//! writers in flight) and send STOPPED, then answer the hooks: an exiting process goes on
//! at once, while the flusher closes the connection. A provider whose Start has not come yet
//! waits for it first (bounded), so that it ends stopped rather than lost.
//!
//! With `FXTRACE_PRELOAD_LOG=1`, where the time of the start and of the flush went is logged
//! (`start: 1.013 ms (register 0.445, start wait 0.010, …)`).
//!
//! If the manager ends the session first (Terminate, or it went away), the flusher stops the
//! capture, disarms the hooks and exits: the program goes on untraced.
//!
//! If the program closes the flusher's pipes (a daemon closing every descriptor it did not
//! open), the flusher notices within [`SESSION_CHECK`], notes it (log and a Log record), and
//! flushes at once: the capture and the provider check their own descriptors
//! ([`fxtrace::fd_guard`]) and end without touching a number the program reused. The exit
//! hook, finding the pipes gone, waits (bounded) for that flush through an atomic instead.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fxtrace::capture::sys::RealSys;
use fxtrace::capture::{
    BranchSampling, Capture, CaptureConfig, CaptureEvent, CaptureStats, KernelSymbols,
    KernelTraceConfig, KernelTraceStats, KernelTraceWriter, Need, PerfPermissions, TracefsChoice,
    Unsupported, SHARED_SYMBOLS_ENV,
};
use fxtrace::engine::global;
use fxtrace::fd_guard::WakePipe;
use fxtrace::provider::{Provider, ProviderOptions, ProviderState};

use crate::hooks;
use crate::log::{log, Phases};
use crate::opt::{self, CaptureMode, Options};
use crate::sink::{EngineRefs, EngineSink};

/// How often the flusher checks whether the manager ended the session, and whether its pipes
/// are still its own.
pub(crate) const SESSION_CHECK: Duration = Duration::from_millis(100);

type SharedWriter = Arc<Mutex<Option<KernelTraceWriter<EngineSink, EngineRefs>>>>;

/// The preload object's state in a traced process, owned by the flusher thread.
struct Runtime {
    provider: Provider,
    capture: Option<Capture>,
    writer: SharedWriter,
    /// The hooks write it to request the flush; the flusher polls it.
    request: WakePipe,
    /// The flusher writes it when the flush is complete; the hooks poll it.
    done: WakePipe,
    /// How long a flush waits for a Start not served yet: `FXTRACE_PRELOAD_FLUSH_MS`, whatever
    /// `FXTRACE_PRELOAD_START_WAIT_MS` says (that one is about the program's start).
    start_wait: Duration,
}

/// The executable's file name (`/proc/self/exe`), else the process name.
fn executable_name() -> String {
    std::fs::read_link("/proc/self/exe")
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| {
            std::fs::read_to_string("/proc/self/comm")
                .ok()
                .map(|s| s.trim_end().to_owned())
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The constructor's work (see the module docs). Never panics on purpose; the caller
/// catches any panic anyway.
pub(crate) fn init() {
    // Every thread started below is an `fxtrace::helper_thread`: it blocks every signal, so
    // it never takes one meant for the program (a process-directed signal goes to a thread
    // that does not block it: a helper with an open mask would run the program's handler on
    // a thread the program does not know, or die of a signal the program blocks everywhere
    // to `sigwait` for it).
    // Whatever follows: a main thread that ends before the process does must not leave it
    // running forever on fxtrace's threads.
    crate::last_thread::arm();
    let mut phases = Phases::start();
    let (options, complaints) = opt::from_env();
    crate::log::set_enabled(options.log);
    log!("options: {}", opt::describe(&options));
    for complaint in &complaints {
        log!("{complaint}");
    }
    let name = options.name.clone().unwrap_or_else(executable_name);
    let provider_options = ProviderOptions {
        socket_path: options.socket.clone().map(PathBuf::from),
        stop_timeout: options.flush,
        // The preload's own exit hook orders the flush (capture first, then the engine).
        exit_hook: false,
        // A Start the manager sent behind Initialize is served while connecting, on this
        // thread; a later one is waited for below.
        start_wait: options.start_wait,
        // Started once the capture's events are open, so that the thread inherits them
        // instead of having events of its own opened (and enabled, an IPI each) beside the
        // loading thread's.
        defer_control_thread: true,
        ..ProviderOptions::default()
    };
    if options.socket.as_ref().map_or(true, |s| s.is_empty()) {
        // Not under `fxtrace record`: follow the trace service (`fxtrace daemon`). The
        // capture runs while a session of it traces this process.
        follow(&name, options, complaints);
        return;
    }
    // A trace service there (`fxtrace daemon --socket PATH`) is followed as the default
    // ones are; a session manager (`fxtrace record`) gives its provider.
    let hook = session_hook(options.clone(), complaints.clone());
    let mut provider = match fxtrace::provider::join_or_follow(&name, &provider_options, hook) {
        Ok(Some(provider)) => provider,
        Ok(None) => {
            match fxtrace::provider::service_status() {
                Some(status) => log!("following the trace service: {:?}", status.state),
                None => log!("no trace manager listening: not tracing"),
            }
            return;
        }
        Err(e) => {
            log!("not tracing: {e}");
            return;
        }
    };
    log!("registered as provider {} ({name})", provider.id());
    phases.mark("register");
    let context = provider.context().clone();
    if let Err(e) = provider.install_global() {
        // Only the program's own instrumentation misses the context; the capture goes on.
        log!("cannot install the trace context for instrumentation: {e}");
    }
    let started = provider.state() == ProviderState::Started;
    if !started && !start_control_thread(&mut provider) {
        return;
    }
    let waited = Instant::now();
    if started {
        // The usual case: the Start came behind Initialize and was served while connecting.
        log!("tracing started while registering");
    } else if options.start_wait.is_zero() {
        log!("not waiting for the start (FXTRACE_PRELOAD_START_WAIT_MS=0)");
    } else if !new_threads_run() {
        // Loaded by `dlopen`: the dynamic loader holds its lock while this constructor runs,
        // and our new threads wait for it (thread-local storage of a dlopen'ed object). The
        // provider's thread serves the start right after `dlopen` returns.
        log!("new threads wait for the dynamic loader (dlopen?): not waiting for the start");
    } else if provider.wait_started(options.start_wait) {
        log!("tracing started ({} ms)", waited.elapsed().as_millis());
    } else {
        log!(
            "tracing not started after {} ms; records before the start are not kept",
            options.start_wait.as_millis()
        );
    }
    phases.mark("start wait");
    // The process and this thread's name records, and the option complaints as Log records.
    global::with_writer(|w| {
        let _ = w.thread_ref();
        for complaint in &complaints {
            let message = format!("fxtrace-preload: {complaint}");
            let _ = w.log(fxtrace::clock::ticks(), &message);
        }
    });

    let writer = new_writer(&provider, &context);
    phases.mark("names");
    let capture = match options.capture {
        CaptureMode::Switches => start_capture(&options, &writer),
        CaptureMode::None => None,
    };
    if let Some(capture) = &capture {
        if provider.state() == ProviderState::Started {
            hooks::stop_capture_on_flush(capture.stopper());
        }
    }
    phases.mark("capture");
    if !start_control_thread(&mut provider) {
        return;
    }
    phases.mark("control thread");
    let pipes = (
        WakePipe::new("exit-flush request pipe"),
        WakePipe::new("exit-flush done pipe"),
    );
    let (request, done) = match pipes {
        (Ok(request), Ok(done)) => (request, done),
        (Err(e), _) | (_, Err(e)) => {
            log!("no exit flush (pipe: {e}); the manager will salvage the buffer");
            // Keep everything running for the process's life: dropping it would stop tracing.
            std::mem::forget((provider, capture));
            return;
        }
    };
    let runtime = Runtime {
        provider,
        capture,
        writer,
        request,
        done,
        start_wait: options.flush,
    };
    // Armed before the flusher starts, from the pipes it will own (the flusher never closes
    // them: see `Runtime::finish`).
    hooks::arm(&runtime.request, &runtime.done, options.flush);
    let flusher = fxtrace::helper_thread::spawn("fxtrace-preload", move || runtime.serve());
    if let Err(e) = flusher {
        hooks::disarm();
        log!("no exit flush (thread: {e}); the manager will salvage the buffer");
        return;
    }
    if !hooks::install_at_exit() {
        log!("atexit refused the exit hook; the manager will salvage the buffer");
    }
    if !hooks::install_at_fork() {
        log!("pthread_atfork refused the fork hook");
    }
    if options.signals {
        let taken = hooks::install_signal_handlers();
        log!("flushing on signals {taken:?} (those left at their default action)");
    }
    phases.mark("flusher and hooks");
    log!("start: {phases}");
}

/// Start the provider's control thread (see `defer_control_thread` in [`init`]); false, said
/// in the log, when it cannot start: the provider is dropped then (its session ends, the
/// capture stops), as a provider whose `connect` could not start that thread never was.
fn start_control_thread(provider: &mut Provider) -> bool {
    match provider.start_control_thread() {
        Ok(()) => true,
        Err(e) => {
            log!("not tracing: {e}");
            false
        }
    }
}

/// Register with the trace service and, for each session of it that traces this process,
/// start the per-process capture (stopped when the session ends). The provider's own exit
/// hook stops tracing at exit; the service salvages what the capture had not flushed.
fn follow(name: &str, options: Options, complaints: Vec<String>) {
    // As under `fxtrace record`: FXTRACE_PRELOAD_START_WAIT_MS bounds the wait for a running
    // session's start, and under `dlopen` (our threads wait for the loader) nothing waits.
    let start_wait = if options.start_wait.is_zero() || !new_threads_run() {
        Duration::ZERO
    } else {
        options.start_wait
    };
    let provider_options = ProviderOptions {
        stop_timeout: options.flush,
        start_wait,
        ..ProviderOptions::default()
    };
    let hook = session_hook(options, complaints);
    match fxtrace::provider::follow_service(name, &provider_options, hook) {
        Ok(()) => log!(
            "following the trace service: {:?}",
            fxtrace::provider::service_status().map(|s| s.state)
        ),
        Err(e) => log!("not following the trace service: {e}"),
    }
}

/// What starts for each session of the trace service that traces this process: the
/// per-process capture (stopped when the session ends), after the option complaints are
/// noted in the trace.
fn session_hook(options: Options, complaints: Vec<String>) -> fxtrace::provider::SessionHook {
    Box::new(move |provider: &Provider| -> Box<dyn Send> {
        log!("session started: provider {}", provider.id());
        global::with_writer(|w| {
            let _ = w.thread_ref();
            for complaint in &complaints {
                let message = format!("fxtrace-preload: {complaint}");
                let _ = w.log(fxtrace::clock::ticks(), &message);
            }
        });
        let writer = new_writer(provider, provider.context());
        let capture = match options.capture {
            CaptureMode::Switches => start_capture(&options, &writer),
            CaptureMode::None => None,
        };
        Box::new(SessionCapture { capture, writer })
    })
}

/// The capture of one session of the trace service: stopped, and its last events written,
/// when the session ends.
struct SessionCapture {
    capture: Option<Capture>,
    writer: SharedWriter,
}

impl Drop for SessionCapture {
    fn drop(&mut self) {
        // The capture thread's last events go into the writer before it stops.
        let captured = self.capture.take().and_then(stop_capture);
        // The session's context is stopped by now: what the writer still has is refused by
        // the engine and counted as dropped.
        let taken = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(Ok((_, stats))) = taken.map(|w| finish_writer(w, captured.as_ref())) {
            log!(
                "session capture: {} switches, {} threads",
                stats.context_switches,
                stats.threads
            );
        }
    }
}

/// Whether a new thread gets to run code of this object that uses thread-local storage
/// within a few milliseconds. False while the dynamic loader's lock is held by our caller (a
/// constructor run by `dlopen`): the provider's thread could not serve the manager's Start
/// before this constructor returns, so waiting for it would only stall `dlopen`.
fn new_threads_run() -> bool {
    thread_local! {
        static PROBE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = fxtrace::helper_thread::spawn("fxtrace-probe", move || {
        PROBE.with(|p| p.set(1));
        let _ = tx.send(());
    });
    spawned.is_ok() && rx.recv_timeout(Duration::from_millis(20)).is_ok()
}

/// The kernel trace writer over the engine sink, shared with the capture thread.
fn new_writer(provider: &Provider, context: &fxtrace::engine::Context) -> SharedWriter {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() } as u32;
    let config = KernelTraceConfig {
        provider_id: provider.id(),
        provider_name: provider.name().to_owned(),
        ticks_per_second: fxtrace::clock::info().ticks_per_second,
        start_ticks: fxtrace::clock::ticks(),
        recorder: (std::process::id(), tid),
    };
    // The engine sink never returns I/O errors, so this cannot fail.
    let writer =
        KernelTraceWriter::with_refs(EngineSink::new(context.clone()), EngineRefs, config).ok();
    Arc::new(Mutex::new(writer))
}

/// The kernel symbols the session shared (`FXTRACE_PRELOAD_KERNEL_SYMBOLS`), mapped, when
/// something will name kernel frames: the capture then does not read `/proc/kallsyms`. A
/// reference naming no usable table (the program closed or reused the descriptor, or the
/// session is over) is noted in the log and the trace, and the capture reads the file.
fn shared_kernel_symbols(options: &Options) -> Option<KernelSymbols> {
    let reference = options.kernel_symbols.as_ref()?;
    if !options.wait_points && options.sample_hz.is_none() {
        return None;
    }
    let opening = Instant::now();
    match KernelSymbols::open_shared(reference) {
        Ok(symbols) => {
            log!(
                "kernel symbols: the session's table ({} symbols, mapped in {} µs)",
                symbols.len(),
                opening.elapsed().as_micros()
            );
            Some(symbols)
        }
        Err(e) => {
            let message = format!(
                "fxtrace-preload: {SHARED_SYMBOLS_ENV}={reference}: {e}; reading /proc/kallsyms"
            );
            log!("{message}");
            global::with_writer(|w| {
                let _ = w.log(fxtrace::clock::ticks(), &message);
            });
            None
        }
    }
}

/// Start the per-process capture, or note in the trace why it could not start.
fn start_capture(options: &Options, writer: &SharedWriter) -> Option<Capture> {
    // Read once (three files and a directory): the capture's start uses the same facts.
    let perms = PerfPermissions::read();
    let config = CaptureConfig {
        ring_pages: options.ring_pages,
        lbr: options.lbr.then(BranchSampling::default),
        // Wake-ups of and by the process's threads where the kernel gives raw tracepoint
        // data (root, CAP_PERFMON, perf_event_paranoid -1), tracefs as it is: never mounted
        // from inside the program.
        wakeups: perms.allows(Need::RawTracepoint),
        sample_hz: options.sample_hz,
        wait_points: options.wait_points,
        // The executable mappings (MMAP records, and `/proc/PID/maps` with each mapped
        // file's build-id read by the capture thread at its start) only serve to symbolise
        // the addresses of LBR branch stacks, CPU samples and wait points: without any (LBR
        // cannot open without a hardware PMU, as in most VMs), a short process does not pay
        // for them.
        mmaps: (options.lbr && perms.hardware_pmu)
            || options.sample_hz.is_some()
            || options.wait_points,
        tracefs: TracefsChoice::Auto { may_mount: false },
        // A child's new image loads this object again and records its own switches.
        leave_at_exec: true,
        kernel_symbols: shared_kernel_symbols(options),
        ..CaptureConfig::process(std::process::id())
    };
    let sink_writer = writer.clone();
    let started = Capture::start_with(Arc::new(RealSys), perms, config, move |event| {
        let mut guard = sink_writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(writer) = guard.as_mut() {
            // The engine sink returns no I/O errors; refusals are counted by the writer.
            let _ = writer.handle(&event);
        }
    });
    match started {
        Ok(capture) => {
            let report = capture.report();
            log!(
                "capturing context switches: {} events, {} rings, LBR {}, wake-ups {}",
                report.events,
                report.rings,
                if report.lbr.is_some() { "on" } else { "off" },
                if report.wakeups { "on" } else { "off" }
            );
            for note in &report.unsupported {
                log!("unavailable: {}: {}", note.what, note.summary);
            }
            Some(capture)
        }
        Err(e) => {
            log!("no context-switch capture: {e}");
            let note = CaptureEvent::Unsupported(Unsupported {
                what: "per-process context-switch capture".into(),
                errno: None,
                hint: e.to_string(),
                summary: e.to_string(),
            });
            let mut guard = writer.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(writer) = guard.as_mut() {
                let _ = writer.handle(&note);
            }
            None
        }
    }
}

/// How the capture ended: its counters (also when it failed), and why it failed.
type Captured = (CaptureStats, Option<String>);

/// Stop `capture` (its last events go into the writer): its counters, also when it failed
/// (said in the log, and in the trace by [`finish_writer`]), so that what it dropped is in the
/// trace whatever happened.
fn stop_capture(capture: Capture) -> Option<Captured> {
    let (stats, outcome) = capture.stop_with_stats();
    let failed = outcome.err().map(|e| {
        log!("capture: {e}");
        e.to_string()
    });
    Some((stats, failed))
}

/// Finish the capture's section of the trace, with what the capture itself could not parse,
/// the copies it dropped and why it failed, as the recorder's kernel provider does.
fn finish_writer(
    mut writer: KernelTraceWriter<EngineSink, EngineRefs>,
    captured: Option<&Captured>,
) -> Result<(EngineSink, KernelTraceStats), fxtrace::capture::SinkError> {
    if let Some((stats, failed)) = captured {
        writer.note_capture_damage(stats);
        if let Some(why) = failed {
            // The engine sink returns no I/O errors; a refusal is counted by the writer.
            let _ = writer.handle(&CaptureEvent::Unsupported(Unsupported {
                what: "the per-process capture's end".into(),
                errno: None,
                hint: why.clone(),
                summary: format!("the capture failed: {why}; events it had not delivered are lost"),
            }));
        }
    }
    writer.finish()
}

impl Runtime {
    /// The flusher thread: wait for the exit request (or the end of the session), then
    /// finish.
    fn serve(self) {
        let request = self.request.read_end().raw();
        loop {
            let readable = hooks::wait_for_request(request, SESSION_CHECK);
            if let Err(lost) = self.request.check().and_then(|()| self.done.check()) {
                // A daemon closing every descriptor: flush now. Everything below checks its
                // descriptors before using them, and a hook at exit waits for `FLUSHED`.
                let message = format!("{lost}: exit flush done at once, without it");
                log!("{message}");
                if let Some(mut w) = self.provider.context().trace_writer() {
                    let _ = w.log(
                        fxtrace::clock::ticks(),
                        &format!("fxtrace-preload: {message}"),
                    );
                }
                break;
            }
            // Readable only once a hook wrote the request (the pipe is still ours).
            if readable && hooks::flush_requested() {
                break;
            }
            if self.provider.state() == ProviderState::Disconnected {
                hooks::disarm();
                let reason = self.provider.end_reason().unwrap_or_default();
                log!("the session ended ({reason}); not tracing any more");
                break;
            }
        }
        self.finish();
        if !hooks::flush_requested() {
            log!("capture stopped");
        }
    }

    /// Drain the capture, write its summary, stop the engine, say STOPPED, then answer every
    /// hook that requested the flush (including one that raced with a disarm in
    /// [`Self::serve`] or came after: it waits on `done` or `FLUSHED`, bounded). Only then
    /// the provider's connection is closed and its buffer unmapped: a process that is
    /// exiting does not wait for that.
    fn finish(self) {
        let Runtime {
            provider,
            capture,
            writer,
            request,
            done,
            start_wait,
        } = self;
        let mut phases = Phases::start();
        if provider.state() == ProviderState::Idle && !start_wait.is_zero() {
            // The program ends before the manager's Start was served (a loaded machine): it
            // is on its way, so wait for it (bounded), then the capture's switches are kept
            // and the manager gets STOPPED instead of finding the provider gone unstarted.
            let started = provider.wait_started(start_wait);
            log!(
                "flush: tracing {}",
                if started { "started" } else { "never started" }
            );
        }
        phases.mark("start wait");
        let captured = capture.and_then(|capture| {
            if hooks::flush_requested_at_exit() {
                // A hook's flush at exit: the image ends (see
                // `CaptureStopper::request_at_exit`). After an exec's, which may fail, the
                // capture closes its events itself.
                capture.stopper().request_at_exit();
            }
            stop_capture(capture)
        });
        phases.mark("capture stop");
        let taken = writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(writer) = taken {
            if let Ok((sink, stats)) = finish_writer(writer, captured.as_ref()) {
                log!(
                    "capture: {} switches, {} threads, {} lost; engine sink {:?}",
                    stats.context_switches,
                    stats.threads,
                    stats.lost_records + stats.lost_samples + stats.dropped_records,
                    sink.stats()
                );
            }
        }
        phases.mark("capture summary");
        // The buffer holds everything and the manager is told so.
        provider.stop();
        phases.mark("engine stop and STOPPED");
        log!("flush: {phases}");
        // The hooks may still use `done` (and `request`) until the process ends: never closed.
        std::mem::forget(request);
        hooks::flush_done(Box::leak(Box::new(done)));
        provider.shutdown();
        if fxtrace::fd_guard::abandoned() > 0 {
            log!(
                "{} descriptors left to the program (it had closed or reused them)",
                fxtrace::fd_guard::abandoned()
            );
        }
    }
}

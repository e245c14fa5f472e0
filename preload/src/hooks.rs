//! The hooks that run where almost nothing is allowed: at `exit`, in a child created by
//! `fork`, and (opt-in) in a handler of a terminating signal; `exec` ([`crate::exec`]) uses
//! the same flush.
//!
//! They share one mechanism, made of async-signal-safe calls only (atomic loads and stores,
//! `getpid`, `fstat`, `readlink`, `write`, `poll`, `clock_gettime`, `sigaction`,
//! `sigprocmask`, `raise`): the hook writes to the *request* pipe, which wakes the preload's
//! flusher thread, then polls the *done* pipe for at most `FXTRACE_PRELOAD_FLUSH_MS`. The flusher does the real work
//! (drain the perf rings, stop the engine, send STOPPED) with ordinary code, on its own
//! thread. Past the bound, exit goes on and the manager salvages the shared buffer: nothing
//! already written is lost, only the switches still in the perf rings.
//!
//! No hook allocates, takes a lock, or touches a `thread_local!` with a destructor. Before
//! touching a pipe, a hook checks ([`FdIdentity`]) that the descriptor still names the pipe it
//! was armed with: a program that closes every descriptor (daemons do) and opens files of its
//! own under the same numbers never gets a byte written into them. Without the pipes, the
//! hook still requests the flush (an atomic the flusher reads within [`SESSION_CHECK`]) and
//! waits, bounded the same way, for the flusher's "done" atomic.
//!
//! [`SESSION_CHECK`]: crate::runtime::SESSION_CHECK
//!
//! # fork
//!
//! The child of `fork` shares the trace buffer's memory (a `MAP_SHARED` memfd mapping) with
//! its parent but none of its threads. It must never write there: the engine's own
//! `pthread_atfork` child handler uninstalls the inherited context (instrumentation in the
//! child finds none and does nothing), and [`child_after_fork`] disarms these hooks, so the
//! child's `exit` neither stops the parent's engine nor signals the parent's flusher (the
//! eventfds are inherited). Every hook also compares `getpid()` with the pid that armed it,
//! which covers children made without `pthread_atfork` handlers (`vfork`, raw `clone`). The
//! child stays silent; if it calls `exec`, the new image loads the preload object again
//! (`LD_PRELOAD` is inherited) and registers as a provider of its own. Until then its context
//! switches appear in the parent's trace, with its pid: the per-process perf events are
//! inherited by child tasks and leave them at the exec (`remove_on_exec`, Linux 5.13; on older
//! kernels they stay, and a preloaded child's switches are in both providers). A child whose
//! new image does not load the object (static, setuid) has its switches in no provider after
//! its exec; `record -a` records every process's.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use fxtrace::capture::CaptureStopper;
use fxtrace::fd_guard::{self, FdIdentity, FdStatus, WakePipe};

/// Rules: the pid that armed the hooks; written by [`arm`] (constructor thread) before
/// [`ARMED`] is set. ATOMICS: `Relaxed`, published by the `Release` store of `ARMED`.
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// The pipe ends the hooks use, with their identities: the write end of the request pipe (the
/// flusher polls its read end) and the read end of the done pipe (the flusher writes it).
/// Rules: set once by [`arm`] before `ARMED`; a hook touches a number only while it still names
/// its pipe (a program that closed every descriptor and opened files of its own under the
/// same numbers keeps them to itself).
#[derive(Debug)]
struct HookFds {
    request: (RawFd, FdIdentity),
    done: (RawFd, FdIdentity),
}

/// See [`HookFds`]. `OnceLock::get` is one atomic load: async-signal-safe.
static FDS: OnceLock<HookFds> = OnceLock::new();
/// Rules: set once, when the capture runs and the trace had started by the end of the
/// constructor: a flush request also asks the capture thread to stop, so that its last drain
/// runs while the flusher wakes up (the flusher's own stop then only waits for it). Not set
/// when the trace had not started: the flusher waits for the start before the capture's last
/// drain, so that its switches are kept.
static CAPTURE_STOPPER: OnceLock<CaptureStopper> = OnceLock::new();
/// Rules: the flush bound in ms; written by [`arm`] before `ARMED`. ATOMICS: as `OWNER_PID`.
static FLUSH_MS: AtomicU64 = AtomicU64::new(0);
/// Rules: set by the flusher once the flush is complete (whether or not the done pipe could
/// be written). ATOMICS: `Release` store / `Acquire` load: a hook that sees it returns after
/// the flusher's work.
static FLUSHED: AtomicBool = AtomicBool::new(false);
/// Rules: hooks do something only while armed: set by [`arm`], cleared by [`disarm`] (the
/// session ended early) and in a forked child. ATOMICS: `Release` store / `Acquire` load: a
/// hook that sees `true` sees the fds and the bound written before.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Rules: set by the first hook that requests the flush; later hooks only wait.
/// ATOMICS: `Relaxed` swap: a claim, nothing is published through it (the eventfd carries
/// the request).
static REQUESTED: AtomicBool = AtomicBool::new(false);
/// Rules: set by the hook whose request was the first when it came from an `exec` (which can
/// fail and leave the program running), before it wakes the flusher.
/// ATOMICS: `Relaxed`: the flusher reads it after the request's wake-up (a write and a read
/// of the request descriptor, system calls, in between); a reader that missed it would only
/// leave the kernel the events of an exec that fails.
static BY_EXEC: AtomicBool = AtomicBool::new(false);

/// The signals whose default action the opt-in handler takes over (only when left at
/// `SIG_DFL`).
pub(crate) const FLUSH_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Arm the hooks: from now on, `exit` (and handled signals) in this process request a flush
/// on `request` and wait for `done` at most `flush`. The pipes stay open for the process's
/// life (unless the program closes them). Armed once per process.
pub(crate) fn arm(request: &WakePipe, done: &WakePipe, flush: Duration) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let end = |fd: &fd_guard::GuardedFd| (fd.raw(), fd.identity());
    if FDS
        .set(HookFds {
            request: end(request.write_end()),
            done: end(done.read_end()),
        })
        .is_err()
    {
        return;
    }
    // ATOMICS: `Relaxed` stores published by the `Release` store of `ARMED` (see the statics).
    OWNER_PID.store(pid, Ordering::Relaxed);
    FLUSH_MS.store(
        u64::try_from(flush.as_millis()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    ARMED.store(true, Ordering::Release);
}

/// Have a flush request stop the capture thread too (see [`CAPTURE_STOPPER`]).
pub(crate) fn stop_capture_on_flush(stopper: CaptureStopper) {
    let _ = CAPTURE_STOPPER.set(stopper);
}

/// Disarm the hooks (the session is over: nothing to flush at exit).
pub(crate) fn disarm() {
    // ATOMICS: see `ARMED`.
    ARMED.store(false, Ordering::Release);
}

/// Whether the hooks would act in this process.
pub(crate) fn armed_here() -> bool {
    // ATOMICS: see `ARMED`.
    if !ARMED.load(Ordering::Acquire) {
        return false;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    // ATOMICS: published by `ARMED` (see the statics).
    pid == OWNER_PID.load(Ordering::Relaxed)
}

/// Whether the number of `end` still names the pipe end it was armed with.
fn still_ours(end: &(RawFd, FdIdentity)) -> bool {
    end.1.check(end.0) == FdStatus::Ours
}

/// `CLOCK_MONOTONIC` in ms (async-signal-safe).
fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// Wait until `fd` is readable or `timeout_ms` passed (async-signal-safe, EINTR retried).
/// Returns whether it became readable.
fn wait_readable(fd: RawFd, timeout_ms: u64) -> bool {
    let deadline = now_ms().saturating_add(timeout_ms);
    loop {
        let left = deadline.saturating_sub(now_ms());
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, i32::try_from(left).unwrap_or(i32::MAX)) };
        if n > 0 {
            return true;
        }
        // SAFETY: errno is thread-local and always readable.
        let interrupted = n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR;
        if !interrupted || left == 0 {
            return false;
        }
    }
}

/// How long one wait of a hook lasts before it looks at [`FLUSHED`] and the done pipe again.
const WAIT_SLICE_MS: u64 = 10;

/// How the process's image ends, as a hook sees it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Exit, or a terminating signal: the kernel tears the capture's events down with it.
    Exit,
    /// An `exec`, which can still fail and leave the program running: the capture closes
    /// its events itself.
    Exec,
}

/// Request the flush (once per process) and wait for it, bounded. Async-signal-safe.
/// Returns whether the flusher finished in time (false also when not armed here).
pub(crate) fn flush_and_wait(ending: Ending) -> bool {
    if !armed_here() {
        return false;
    }
    let Some(fds) = FDS.get() else {
        return false;
    };
    // ATOMICS: published by `ARMED` (see the statics); `REQUESTED` is a claim.
    let ms = FLUSH_MS.load(Ordering::Relaxed);
    if !REQUESTED.swap(true, Ordering::Relaxed) {
        // ATOMICS: see `BY_EXEC`.
        BY_EXEC.store(ending == Ending::Exec, Ordering::Relaxed);
        // A request pipe the program took gets no byte: the flusher notices the loss (and
        // the request) by itself within SESSION_CHECK.
        let _ = fd_guard::wake_raw(fds.request.0, &fds.request.1);
        if let Some(capture) = CAPTURE_STOPPER.get() {
            match ending {
                // The kernel tears the capture's events down with the process.
                Ending::Exit => capture.request_at_exit(),
                // An exec that fails (ENOEXEC, E2BIG, …) leaves the program running: its
                // events must not stay enabled, writing into rings nobody reads.
                Ending::Exec => capture.request(),
            }
        }
    }
    let deadline = now_ms().saturating_add(ms);
    loop {
        // ATOMICS: see `FLUSHED`.
        if FLUSHED.load(Ordering::Acquire) {
            return true;
        }
        let left = deadline.saturating_sub(now_ms());
        if left == 0 {
            return false;
        }
        let slice = left.min(WAIT_SLICE_MS);
        // The done pipe only wakes the wait; `FLUSHED` (stored before the byte is written)
        // decides. Readable without `FLUSHED` means its write end is gone (POLLHUP): the
        // program took it, so sleep the slice instead of spinning on it.
        let woken = still_ours(&fds.done) && wait_readable(fds.done.0, slice);
        // ATOMICS: see `FLUSHED`.
        if woken && !FLUSHED.load(Ordering::Acquire) {
            // poll with no descriptor: an async-signal-safe sleep.
            // SAFETY: a null array of zero pollfds.
            unsafe { libc::poll(std::ptr::null_mut(), 0, slice as libc::c_int) };
        } else if !still_ours(&fds.done) {
            // SAFETY: as above.
            unsafe { libc::poll(std::ptr::null_mut(), 0, slice as libc::c_int) };
        }
    }
}

/// Whether a flush was requested since the hooks were armed.
pub(crate) fn flush_requested() -> bool {
    // ATOMICS: see `REQUESTED`.
    REQUESTED.load(Ordering::Relaxed)
}

/// Whether a flush was requested by an exit or a terminating signal (not an `exec`, which can
/// fail): the image ends, the kernel tears the capture's events down with it.
pub(crate) fn flush_requested_at_exit() -> bool {
    // ATOMICS: see `REQUESTED` and `BY_EXEC`.
    flush_requested() && !BY_EXEC.load(Ordering::Relaxed)
}

/// The flusher's side: wait for a request on `request` for at most `timeout`.
pub(crate) fn wait_for_request(request: RawFd, timeout: Duration) -> bool {
    wait_readable(
        request,
        u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    )
}

/// The flusher's side: tell the waiting hooks the flush is complete.
pub(crate) fn flush_done(done: &WakePipe) {
    // ATOMICS: see `FLUSHED`.
    FLUSHED.store(true, Ordering::Release);
    // Lost to the program: the hooks see `FLUSHED` within a wait slice.
    let _ = done.wake();
}

// === exit ===

/// `atexit` hook: flush, bounded.
extern "C" fn at_exit() {
    let started = std::time::Instant::now();
    let in_time = flush_and_wait(Ending::Exit);
    // Logging allocates: fine at exit, but not in a forked child that never armed.
    if in_time || armed_here() {
        crate::log::log!(
            "flush at exit {} after {:.3} ms",
            if in_time { "done" } else { "timed out" },
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}

/// Register the exit hook. Registered from the constructor, it runs after every `atexit`
/// handler of the program (including C++ static destructors), so their events are traced.
pub(crate) fn install_at_exit() -> bool {
    // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds; atexit only stores it.
    unsafe { libc::atexit(at_exit) == 0 }
}

// === fork ===

/// `pthread_atfork` child handler (see the module docs): only an atomic store.
extern "C" fn child_after_fork() {
    // ATOMICS: the child has one thread; `Relaxed` would do, `Release` as in `disarm`.
    ARMED.store(false, Ordering::Release);
}

/// Register the fork handler.
pub(crate) fn install_at_fork() -> bool {
    // SAFETY: `child_after_fork` is an `extern "C" fn()` that only stores an atomic
    // (async-signal-safe, as a child handler of a multi-threaded parent must be).
    unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) == 0 }
}

// === signals (opt-in) ===

/// Handler of a terminating signal that was at its default action: flush (bounded), then
/// restore the default action and raise the signal again, so the process dies of it exactly
/// as it would have (same status, same core dump rules).
extern "C" fn on_signal(signal: libc::c_int) {
    // SAFETY: errno is thread-local and always readable.
    let saved_errno = unsafe { *libc::__errno_location() };
    flush_and_wait(Ending::Exit);
    // SAFETY: a zeroed sigaction is a valid "SIG_DFL, no flags, empty mask"; sigaction,
    // sigemptyset, sigaddset, sigprocmask and raise are async-signal-safe and get valid
    // pointers to locals.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut default.sa_mask);
        libc::sigaction(signal, &default, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
        // Only reached if the signal did not end the process (someone changed its action
        // meanwhile): leave errno as the interrupted code had it.
        *libc::__errno_location() = saved_errno;
    }
}

/// Take over each of [`FLUSH_SIGNALS`] whose action is `SIG_DFL` (never one the program, or
/// its parent, set to be ignored). Returns the signals taken.
pub(crate) fn install_signal_handlers() -> Vec<libc::c_int> {
    let mut taken = Vec::new();
    for signal in FLUSH_SIGNALS {
        // SAFETY: zeroed sigactions are valid; sigaction reads/writes them only.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            new.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut new.sa_mask);
            if libc::sigaction(signal, &new, std::ptr::null_mut()) == 0 {
                taken.push(signal);
            }
        }
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unarmed_hooks_do_nothing_and_waits_are_bounded() {
        assert!(!flush_and_wait(Ending::Exit));
        let mut fds = [0; 2];
        // SAFETY: a valid 2-element array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let start = now_ms();
        assert!(!wait_readable(fds[0], 30));
        assert!(now_ms() - start >= 25);
        // SAFETY: writes one byte from a live local into the test's pipe.
        assert_eq!(unsafe { libc::write(fds[1], [1u8].as_ptr().cast(), 1) }, 1);
        assert!(wait_readable(fds[0], 1000));
        // SAFETY: closing our own pipe.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}

//! A program whose main thread ends without ending the process (`pthread_exit`, `thrd_exit`,
//! or a cancellation) ends when its last thread ends, as it does without the object.
//!
//! glibc ends such a process (`exit(0)`, `atexit` handlers run) when the last thread of the
//! process ends. The object's own threads (`fxtrace::helper_thread`: the provider's, the
//! capture's, the flusher, the service follower) never end on their own, so without this the
//! process would outlive its program forever, and with every signal blocked in those threads,
//! a `SIGTERM` could not end it either.
//!
//! The constructor gives the main thread a thread-specific value ([`arm`]) whose destructor
//! glibc runs when the main thread ends that way, never at `exit`. It starts a watcher
//! thread; once the main thread has ended and only fxtrace's threads are left (known by
//! thread id), the watcher calls `exit(0)`, which flushes the trace as any exit does.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::log::log;

/// The watcher's first and longest wait between two looks at `/proc/self/task`.
const FIRST_WAIT: Duration = Duration::from_millis(1);
const LONGEST_WAIT: Duration = Duration::from_millis(50);

/// On the main thread (the constructor's, under `LD_PRELOAD`): have its end start the
/// watcher. Elsewhere (a `dlopen` from another thread) nothing is armed.
pub(crate) fn arm() {
    // SAFETY: getpid and gettid have no preconditions.
    if unsafe { libc::gettid() != libc::getpid() } {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is valid storage; the destructor is an `extern "C"` function that lives
    // as long as the object (linked with `-z nodelete`).
    if unsafe { libc::pthread_key_create(&mut key, Some(main_thread_ending)) } != 0 {
        log!("no watch for the end of the main thread (pthread_key_create failed)");
        return;
    }
    // SAFETY: a key just created; the value is only a non-null marker (never dereferenced),
    // without which glibc does not call the destructor.
    unsafe { libc::pthread_setspecific(key, std::ptr::NonNull::<u8>::dangling().as_ptr().cast()) };
}

/// The main thread's thread-specific destructor: it is ending without ending the process.
extern "C" fn main_thread_ending(_: *mut c_void) {
    // A panic must not unwind into glibc.
    fxtrace::c_api::catch_panic(start_watcher);
}

/// Start the watcher thread, once per process.
fn start_watcher() {
    static STARTED: AtomicBool = AtomicBool::new(false);
    // ATOMICS: only claims the start; nothing is published through it.
    if STARTED.swap(true, Ordering::Relaxed) {
        return;
    }
    if let Err(e) = fxtrace::helper_thread::spawn("fxtrace-exit", watch) {
        log!("the main thread ended, but no watcher thread ({e}): the process will not end by itself once its threads have");
    }
}

/// Wait until the program's own threads are gone, then end the process as glibc would.
fn watch() {
    let mut wait = FIRST_WAIT;
    loop {
        std::thread::sleep(wait);
        wait = (wait * 2).min(LONGEST_WAIT);
        if only_helpers_left(&fxtrace::helper_thread::tids()) {
            log!("the program's last thread has ended: exit(0)");
            // SAFETY: exit runs the atexit handlers (the trace's flush among them) and ends
            // the process, as glibc does when the last thread ends.
            unsafe { libc::exit(0) };
        }
    }
}

/// Whether the main thread has ended and every other thread is one of `helpers`.
/// Unreadable entries count as the program's (the process goes on).
fn only_helpers_left(helpers: &[libc::pid_t]) -> bool {
    // SAFETY: getpid has no preconditions.
    let leader = unsafe { libc::getpid() };
    if !main_thread_ended(leader) {
        return false;
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks.into_iter().all(|entry| {
        entry
            .ok()
            .and_then(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
            .is_some_and(|tid| tid == leader || helpers.contains(&tid))
    })
}

/// Whether the main thread `leader` is a zombie: its `pthread_exit` (and the cleanup in it) is
/// over, and it waits for the process's other threads.
fn main_thread_ended(leader: libc::pid_t) -> bool {
    std::fs::read(format!("/proc/self/task/{leader}/stat"))
        .ok()
        .and_then(|stat| thread_state(&stat))
        .is_some_and(|state| state == b'Z')
}

/// The state letter of a `/proc/…/stat` line.
fn thread_state(stat: &[u8]) -> Option<u8> {
    fxtrace::capture::procfs::stat_fields(stat)
        .next()?
        .first()
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_state_is_the_field_after_the_command() {
        assert_eq!(thread_state(b"1234 (prog) Z 1 1234 1234"), Some(b'Z'));
        assert_eq!(thread_state(b"1234 (a) b) S 1 2"), Some(b'S'));
        assert_eq!(thread_state(b"1234 (x y) R 1"), Some(b'R'));
        assert_eq!(thread_state(b"1234 (prog)"), None);
        assert_eq!(thread_state(b"no command"), None);
    }

    #[test]
    fn a_live_main_thread_has_not_ended() {
        // SAFETY: getpid has no preconditions.
        let leader = unsafe { libc::getpid() };
        assert!(!main_thread_ended(leader));
        // The test harness's main thread is alive: never "only helpers left".
        // SAFETY: gettid has no preconditions.
        assert!(!only_helpers_left(&[unsafe { libc::gettid() }]));
    }
}

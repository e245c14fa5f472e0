//! `pthread_exit`, interposed: a program whose `main` ends with `pthread_exit` ends when its
//! last thread ends, as it does without the object.
//!
//! glibc ends such a process (`exit(0)`, `atexit` handlers run) when the last thread of the
//! process ends. The object's own threads (`fxtrace-provider`, `-capture`, `-preload`,
//! `-service`) never end on their own, so without this the process would outlive its
//! program forever, and with every signal blocked in those threads, a `SIGTERM` could not end
//! it either. When the main thread calls `pthread_exit`, a watcher thread starts; once the
//! main thread has ended and only threads named `fxtrace-…` are left, it calls `exit(0)`,
//! which flushes the trace as any exit does.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::log::log;

/// The name prefix of every thread this object (and the fxtrace library in it) starts.
const HELPER_PREFIX: &[u8] = b"fxtrace-";

/// The watcher's first and longest wait between two looks at `/proc/self/task`.
const FIRST_WAIT: Duration = Duration::from_millis(1);
const LONGEST_WAIT: Duration = Duration::from_millis(50);

type PthreadExit = unsafe extern "C" fn(*mut c_void) -> !;

/// `pthread_exit(3)`: from the main thread, first start the watcher (once).
///
/// # Safety
/// As `pthread_exit`: ends the calling thread.
#[no_mangle]
pub unsafe extern "C" fn pthread_exit(retval: *mut c_void) -> ! {
    // SAFETY: getpid and gettid have no preconditions.
    if unsafe { libc::gettid() == libc::getpid() } {
        // A panic must not unwind into the program.
        fxtrace::c_api::catch_panic(start_watcher);
    }
    // SAFETY: a valid C string; RTLD_NEXT looks past this object.
    let next = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_exit".as_ptr()) };
    if !next.is_null() {
        // SAFETY: libc's `pthread_exit` has this signature and does not return.
        unsafe { std::mem::transmute::<*mut c_void, PthreadExit>(next)(retval) }
    }
    // No next definition (cannot happen with glibc): end the thread without its cleanup.
    loop {
        // SAFETY: exit ends the calling thread only.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
    }
}

/// Start the watcher thread, once per process.
fn start_watcher() {
    static STARTED: AtomicBool = AtomicBool::new(false);
    // ATOMICS: only claims the start; nothing is published through it.
    if STARTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("fxtrace-exit".into())
        .spawn(watch);
    if let Err(e) = spawned {
        log!("the main thread called pthread_exit, but no watcher thread ({e}): the process will not end by itself once its threads have");
    }
}

/// Wait until the program's own threads are gone, then end the process as glibc would.
fn watch() {
    // SAFETY: gettid has no preconditions.
    let own = unsafe { libc::gettid() };
    let mut wait = FIRST_WAIT;
    loop {
        std::thread::sleep(wait);
        wait = (wait * 2).min(LONGEST_WAIT);
        if only_helpers_left(own) {
            log!("the program's last thread has ended: exit(0)");
            // SAFETY: exit runs the atexit handlers (the trace's flush among them) and ends
            // the process, as glibc does when the last thread ends.
            unsafe { libc::exit(0) };
        }
    }
}

/// Whether the main thread has ended and every other thread but `own` is a helper.
/// Unreadable entries count as the program's (the process goes on).
fn only_helpers_left(own: libc::pid_t) -> bool {
    // SAFETY: getpid has no preconditions.
    let leader = unsafe { libc::getpid() };
    if !main_thread_ended(leader) {
        return false;
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks.into_iter().all(|entry| {
        let Some(tid) = entry
            .ok()
            .and_then(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        else {
            return false;
        };
        tid == leader
            || tid == own
            || std::fs::read(format!("/proc/self/task/{tid}/comm"))
                .is_ok_and(|comm| comm.starts_with(HELPER_PREFIX))
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

/// The state letter of a `/proc/…/stat` line: the field after the command's closing `)` (the
/// command may itself hold `)` and spaces).
fn thread_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
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
        assert!(!only_helpers_left(unsafe { libc::gettid() }));
    }
}

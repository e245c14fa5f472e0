//! fxtrace's own threads: a provider's control thread, the trace-service follower, the
//! capture thread, the preload object's flusher and watcher.
//!
//! Each starts with every signal blocked, so that a signal sent to the process always reaches
//! one of the program's threads (a program that blocks a signal everywhere to `sigwait` for it
//! still gets it), and is known by its thread id while it runs, so that the preload object can
//! tell when only fxtrace's threads are left (`tids`).
//!
//! # Two copies of this crate in one process
//!
//! A Rust program that links `fxtrace` and runs with `libfxtrace_preload.so` (`fxtrace record
//! --preload`) holds two copies of this module, each with its own statics: the program's and
//! the preload object's. The preload object's watcher ends the process once only helpers are
//! left, so it must know the program's helpers too (the program's provider thread never ends by
//! itself: were it counted as a program thread, a main thread ending with `pthread_exit` would
//! leave the process running forever). The preload object therefore exports its list under
//! [`PROCESS_LIST_SYMBOL`] ([`HelperList`], [`this_copys_list`]), and every copy lists its
//! helpers there when a loaded object exports it, else in its own list. A copy looks for it
//! once, at its first helper: one whose first helper started before such an object was loaded
//! (a `dlopen` of the preload object later on), or whose object `dlopen` loaded with
//! `RTLD_LOCAL` (which `dlsym(RTLD_DEFAULT)` does not search), keeps its helpers in its own
//! list, unseen by the watcher.

use std::ffi::CStr;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::thread::JoinHandle;

/// Most helper threads listed at once (a process has a handful); one beyond is not listed,
/// and counts as a program thread.
const SLOTS: usize = 64;

/// Most slots an exported list may claim to have (a sanity bound on what another copy hands
/// over).
const MAX_EXPORTED_SLOTS: usize = 4096;

/// Thread ids of the helper threads running now (0: a free slot). Lock-free, so that a
/// `fork` child can clear it whatever another thread was doing ([`forget_in_child`]), and so
/// that another copy of this crate can share it ([`this_copys_list`]).
static RUNNING: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];

/// The name under which a shared object exports the process's list of helper threads: a
/// function `extern "C" fn() -> HelperList` (the preload object exports it, returning
/// [`this_copys_list`]). Versioned: a change of [`HelperList`] takes a new name.
pub const PROCESS_LIST_SYMBOL: &CStr = c"fxtrace_helper_threads_v1";

/// A list of helper thread ids shared by the copies of this crate in one process: `len`
/// atomic `i32` slots at `slots`, each a thread id or 0 (free), claimed with a
/// compare-and-swap from 0 and cleared when the thread ends.
///
/// Whoever exports one keeps the slots mapped and in place until the process ends (the
/// preload object is linked with `-z nodelete`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HelperList {
    /// The first slot.
    pub slots: *const AtomicI32,
    /// How many slots.
    pub len: usize,
}

/// This copy's own list, for the object that exports [`PROCESS_LIST_SYMBOL`].
pub extern "C" fn this_copys_list() -> HelperList {
    HelperList {
        slots: RUNNING.as_ptr(),
        len: RUNNING.len(),
    }
}

/// Rules: the exported list found by [`list`] (null: none found yet), and its length; set once
/// (the first found stays: the exporter is never unloaded), read by [`list`] and the fork
/// child handler. ATOMICS: the length is stored `Relaxed` before the pointer's `Release`
/// store, and read `Relaxed` after the pointer's `Acquire` load.
static EXPORTED: AtomicPtr<AtomicI32> = AtomicPtr::new(std::ptr::null_mut());
/// See [`EXPORTED`].
static EXPORTED_LEN: AtomicUsize = AtomicUsize::new(0);

/// The slots of an exported list already found, if any (async-signal-safe: two atomic loads).
fn exported() -> Option<&'static [AtomicI32]> {
    // ATOMICS: see `EXPORTED`.
    let slots = EXPORTED.load(Ordering::Acquire);
    if slots.is_null() {
        return None;
    }
    let len = EXPORTED_LEN.load(Ordering::Relaxed);
    // SAFETY: `slots` and `len` were checked by `find_exported` and published before the
    // pointer: `len` live `AtomicI32`s that their exporter keeps in place for the process's
    // life (see `HelperList`).
    Some(unsafe { std::slice::from_raw_parts(slots, len) })
}

/// Rules: set once [`find_exported`] has looked the symbol up, whatever it found: a copy
/// looks up to its first helpers (two first lookups at once both look), so that a later spawn
/// takes no loader lock. (A preload object loaded later with `dlopen` and `RTLD_GLOBAL` is
/// not seen then; with `RTLD_LOCAL`, the default, `dlsym(RTLD_DEFAULT)` never sees it.)
/// ATOMICS: stored `Release` after `EXPORTED`, loaded `Acquire` before `EXPORTED` is read
/// again: a thread that sees the lookup done sees what it found.
static LOOKED_UP: AtomicBool = AtomicBool::new(false);

/// Look up [`PROCESS_LIST_SYMBOL`] among the loaded objects (`dlsym(RTLD_DEFAULT)`, once per
/// copy: [`LOOKED_UP`]; not async-signal-safe: takes the dynamic loader's lock). Remembers
/// what it finds.
fn find_exported() -> Option<&'static [AtomicI32]> {
    if let Some(found) = exported() {
        return Some(found);
    }
    // ATOMICS: see `LOOKED_UP`.
    if LOOKED_UP.load(Ordering::Acquire) {
        return exported();
    }
    if let Some(list) = exported_list() {
        // ATOMICS: see `EXPORTED`. Two threads may both store the same list.
        EXPORTED_LEN.store(list.len, Ordering::Relaxed);
        EXPORTED.store(list.slots.cast_mut(), Ordering::Release);
    }
    // ATOMICS: see `LOOKED_UP`.
    LOOKED_UP.store(true, Ordering::Release);
    exported()
}

/// Another copy's list, exported under [`PROCESS_LIST_SYMBOL`] by a loaded object, if one is
/// and it looks sound (`None` also when this copy is the exporter: its own list is the
/// process's).
fn exported_list() -> Option<HelperList> {
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, PROCESS_LIST_SYMBOL.as_ptr()) };
    if symbol.is_null() {
        return None;
    }
    // SAFETY: the symbol of that (versioned) name is, by its contract, a function of this type.
    let export: extern "C" fn() -> HelperList = unsafe { std::mem::transmute(symbol) };
    let list = export();
    let sound = !list.slots.is_null() && list.len != 0 && list.len <= MAX_EXPORTED_SLOTS;
    (sound && !std::ptr::eq(list.slots, RUNNING.as_ptr())).then_some(list)
}

/// The list this copy's helpers go in: the process's (exported by a loaded object), else its
/// own.
fn list() -> &'static [AtomicI32] {
    find_exported().unwrap_or(&RUNNING)
}

/// Spawn `f` on a helper thread named `name` (at most 15 bytes are shown by the kernel).
pub fn spawn<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // A flag, not a `Once`: a fork by another thread in the middle of a `Once` would leave
    // it running forever in the child. The flag is set once the handler is registered, so
    // no helper is listed before it is; two threads may both register it (it is idempotent).
    static FORK_HANDLER: AtomicBool = AtomicBool::new(false);
    // ATOMICS: `Acquire`/`Release`: a thread that sees the flag sees the registration.
    if !FORK_HANDLER.load(Ordering::Acquire) {
        // SAFETY: registers a handler that only stores atomics (async-signal-safe). Without
        // it (it fails only for want of memory), a child would list its parent's helpers.
        unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
        FORK_HANDLER.store(true, Ordering::Release);
    }
    // Looked up here, not on the new thread: a thread started by a constructor that `dlopen`
    // runs could not take the dynamic loader's lock (`dlsym`) before the constructor returns.
    let list = list();
    // The new thread inherits the mask in force when it is created.
    let _blocked = AllSignalsBlocked::new();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _running = Running::new(list);
            f()
        })
}

/// Thread ids of the helper threads running now: this copy's, and those of every copy of this
/// crate in the process that lists its helpers in the same exported list (see the module
/// docs). A helper that has just started or is just ending may be missing: callers that count
/// threads as the program's err on the side of a program thread.
pub fn tids() -> Vec<libc::pid_t> {
    // This copy's list and the exported one it found (no loader lookup here: the preload
    // object's watcher asks every few milliseconds, and its own list is the exported one).
    // ATOMICS: `Relaxed`: each slot is a thread id on its own; a stale read only makes a
    // helper that is starting or ending count as a program thread for a moment.
    RUNNING
        .iter()
        .chain(exported().unwrap_or(&[]))
        .map(|slot| slot.load(Ordering::Relaxed))
        .filter(|&tid| tid != 0)
        .collect()
}

/// A `fork` child has none of its parent's threads: its list starts empty (their ids may be
/// given to the child's own threads), and so does the process's exported list (its exporter's
/// own handler may not be registered).
extern "C" fn forget_in_child() {
    for slot in RUNNING.iter().chain(exported().unwrap_or(&[])) {
        // ATOMICS: `Relaxed`: the child has one thread now.
        slot.store(0, Ordering::Relaxed);
    }
}

/// Have the process end when the program's last thread does, once its main thread has ended
/// without ending it (`pthread_exit`, `thrd_exit`, a cancellation), as it would without
/// fxtrace: glibc ends such a process when its last thread ends, and fxtrace's helpers (the
/// provider's control thread, the service follower, …) never end on their own; with every
/// signal blocked in them, a `SIGTERM` could not end it either.
///
/// Called on the main thread (elsewhere nothing is armed), once per copy of this crate: the
/// main thread gets a thread-specific value whose destructor glibc runs when it ends that way,
/// never at `exit`. The destructor starts a watcher helper (`fxtrace-exit`); once the main
/// thread has ended and only helpers are left ([`tids`]), the watcher calls `exit(0)`, which
/// runs the `atexit` handlers (the trace's flush) as glibc's end of the last thread does. In a
/// process whose loaded preload object exports the helper list, that object's copy watches
/// (one watcher: two could call `exit` at once), and this one arms nothing.
pub fn exit_with_the_last_program_thread() {
    static ARMED: AtomicBool = AtomicBool::new(false);
    // SAFETY: getpid and gettid have no preconditions.
    if unsafe { libc::gettid() != libc::getpid() } || find_exported().is_some() {
        return;
    }
    // ATOMICS: only claims the arming; nothing is published through it.
    if ARMED.swap(true, Ordering::Relaxed) {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is valid storage; the destructor is an `extern "C"` function of this copy,
    // which stays loaded (a program's own, or the preload object, linked with `-z nodelete`).
    if unsafe { libc::pthread_key_create(&mut key, Some(main_thread_ending)) } != 0 {
        return;
    }
    // SAFETY: a key just created; the value is only a non-null marker (never dereferenced),
    // without which glibc does not call the destructor.
    unsafe { libc::pthread_setspecific(key, std::ptr::NonNull::<u8>::dangling().as_ptr().cast()) };
}

/// The main thread's thread-specific destructor: it is ending without ending the process.
extern "C" fn main_thread_ending(_: *mut libc::c_void) {
    // A panic must not unwind into glibc; without a watcher the process lives on as before.
    let _ = std::panic::catch_unwind(|| {
        static STARTED: AtomicBool = AtomicBool::new(false);
        // ATOMICS: only claims the start; nothing is published through it.
        if !STARTED.swap(true, Ordering::Relaxed) {
            let _ = spawn("fxtrace-exit", watch_for_the_last_program_thread);
        }
    });
}

/// Wait until the program's own threads are gone, then end the process as glibc would.
fn watch_for_the_last_program_thread() {
    const LONGEST_WAIT: std::time::Duration = std::time::Duration::from_millis(50);
    let mut wait = std::time::Duration::from_millis(1);
    loop {
        std::thread::sleep(wait);
        wait = (wait * 2).min(LONGEST_WAIT);
        if only_helpers_left(&tids()) {
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
        == Some(b'Z')
}

/// The state letter of a `/proc/…/stat` line: the first field after the command, which ends
/// at the line's last `)`.
fn thread_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat[close + 1..]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .copied()
}

/// The calling thread, listed in [`RUNNING`] while this lives (unless every slot is taken).
struct Running(Option<&'static AtomicI32>);

impl Running {
    /// List the calling thread in `list`.
    fn new(list: &'static [AtomicI32]) -> Self {
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() };
        // ATOMICS: `Relaxed`: see `tids`.
        let slot = list.iter().find(|slot| {
            slot.compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        });
        Self(slot)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(slot) = self.0 {
            // ATOMICS: `Relaxed`: see `tids`.
            slot.store(0, Ordering::Relaxed);
        }
    }
}

/// Every signal blocked in the calling thread while this lives; its mask restored after.
pub(crate) struct AllSignalsBlocked {
    old: libc::sigset_t,
    /// `!Send`: the mask is restored on the thread that changed it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl AllSignalsBlocked {
    /// Block every signal in the calling thread.
    pub(crate) fn new() -> Self {
        // SAFETY: zeroed sigset_t values are valid storage; sigfillset and pthread_sigmask
        // only write them (pthread_sigmask cannot fail with a valid `how`).
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            Self {
                old,
                _not_send: std::marker::PhantomData,
            }
        }
    }
}

impl Drop for AllSignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask `new` saved, on the same thread (the guard is `!Send`).
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(signal: libc::c_int) -> bool {
        // SAFETY: zeroed storage; pthread_sigmask with a null new set only reads the mask.
        unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask);
            libc::sigismember(&mask, signal) == 1
        }
    }

    #[test]
    fn a_helper_blocks_every_signal_is_listed_while_it_runs_and_leaves_the_caller_as_it_was() {
        assert!(!blocked(libc::SIGUSR2));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let helper = spawn("fxtrace-test", move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            tx.send((tid, blocked(libc::SIGUSR2), blocked(libc::SIGTERM)))
                .unwrap();
            done_rx.recv().unwrap();
            tid
        })
        .unwrap();
        let (tid, usr2, term) = rx.recv().unwrap();
        assert!(usr2 && term, "signals blocked in the helper");
        assert!(tids().contains(&tid));
        assert!(!blocked(libc::SIGUSR2), "the caller's mask is restored");
        done_tx.send(()).unwrap();
        assert_eq!(helper.join().unwrap(), tid);
        assert!(!tids().contains(&tid), "no longer listed once ended");
    }

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

    #[test]
    fn a_fork_child_lists_none_of_its_parents_helpers() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let helper = spawn("fxtrace-test", move || rx.recv()).unwrap();
        while tids().is_empty() {
            std::thread::yield_now();
        }
        // SAFETY: the child only reads atomics and calls _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let code = i32::from(!tids().is_empty());
            // SAFETY: ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status}"
        );
        tx.send(()).unwrap();
        helper.join().unwrap().unwrap();
    }
}

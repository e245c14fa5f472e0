//! `libfxtrace_preload.so`: trace an unmodified program with fxtrace.
//!
//! ```text
//! fxtrace record --preload -o trace.fxt -- ./server --port 8080
//! LD_PRELOAD=/path/to/libfxtrace_preload.so ./server     # next to a running `fxtrace record`
//! cc app.c -Iinclude -Ltarget/release -lfxtrace_preload   # the C API (include/fxtrace.h)
//! ```
//!
//! When the object is loaded (an ELF constructor) and a trace manager is listening
//! (`FXTRACE_SOCKET`), the process registers as a provider named after its executable, names
//! itself and its threads, captures its own context switches (and LBR branch stacks where the
//! CPU has them) into its trace buffer, and flushes and says STOPPED when it exits. When no
//! manager is listening, loading costs one failed `connect` and the program runs as if the
//! object were not there: same output, same exit status, nothing on standard error.
//!
//! The object also exports the C API of `include/fxtrace.h` (`fxtrace_instant`,
//! `fxtrace_duration_begin`, …), implemented by [`fxtrace::c_api`].
//!
//! Options: one table of `FXTRACE_*` environment variables ([`opt`], `docs/preload.md`).
//! Exit, fork and signals: [`hooks`]; exec: [`exec`]; a main thread that ends before the
//! process: [`last_thread`]. The capture's records in the engine buffer: [`sink`].
//! The sequence at load and at exit: [`runtime`].

// Unit tests do not install the constructor (the test binary must not register with a
// manager), which leaves the load-time code unreachable there.
#![cfg_attr(test, allow(dead_code))]

pub mod exec;
mod hooks;
mod last_thread;
mod log;
mod opt;
mod runtime;
mod sink;

// The C API is defined in the fxtrace library; re-exporting it here keeps its symbols in
// this object's dynamic symbol table.
pub use fxtrace::c_api::*;

/// The process's list of fxtrace helper threads ([`fxtrace::helper_thread::HelperList`]):
/// this object's, exported so that a program with its own copy of the `fxtrace` crate lists
/// its helpers (its provider's thread, …) where [`last_thread`]'s watcher sees them. Without
/// it, a main thread ending with `pthread_exit` left such a program running forever on its
/// provider's thread, which the watcher took for one of the program's. The name is
/// [`fxtrace::helper_thread::PROCESS_LIST_SYMBOL`]; the object is never unloaded (`-z
/// nodelete`), so the list stays in place.
#[no_mangle]
pub extern "C" fn fxtrace_helper_threads_v1() -> fxtrace::helper_thread::HelperList {
    fxtrace::helper_thread::this_copys_list()
}

/// The ELF constructor: the dynamic loader calls it (with `argc`, `argv`, `envp`, as glibc
/// passes to `.init_array` entries) after the object's dependencies are initialised and
/// before the program's own constructors and `main`.
extern "C" fn preload_init(
    _argc: libc::c_int,
    _argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    // A panic must not cross into the loader; whatever happened, the program runs on.
    fxtrace::c_api::catch_panic(runtime::init);
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static PRELOAD_INIT: extern "C" fn(
    libc::c_int,
    *const *const libc::c_char,
    *const *const libc::c_char,
) = preload_init;

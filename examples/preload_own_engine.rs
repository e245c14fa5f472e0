//! A fixture of the preload tests (`cli/tests/preload/own_engine.rs`): a Rust program with its
//! own copy of the `fxtrace` crate, run under `fxtrace record --preload`, whose main thread
//! ends with `pthread_exit` while a worker thread still writes. The service tests run it
//! without the preload object too, following the trace service (`cli/tests/manager/service.rs`).
//!
//! ```text
//! fxtrace record --preload -o t.fxt -- target/debug/examples/preload_own_engine
//! ```
//!
//! It connects as provider `own-engine` (its own engine beside the preload object's), starts a
//! worker that writes `tick` events for about 200 ms and then `worker done`, writes
//! `main done`, and ends its main thread with `pthread_exit`. The process must then end when
//! the worker does (glibc's `exit(0)` after the last thread), as it does without fxtrace; its
//! provider's control thread is fxtrace's, not the program's. Prints `connected=<bool>`,
//! `main done` and `worker done`.
//!
//! `main` is the C `main` (`#![no_main]`, `extern "C-unwind"`): `pthread_exit` unwinds the
//! thread with a forced unwind, which must not cross the standard library's `lang_start`.

#![no_main]

use std::io::Write;
use std::time::Duration;

use fxtrace::Scope;

extern "C-unwind" {
    /// glibc's, declared as unwinding (the `libc` crate declares it `extern "C"`, which would
    /// abort on its forced unwind).
    fn pthread_exit(value: *mut libc::c_void) -> !;
}

/// Connect, start the worker and write `main done`; the provider stays alive (leaked) for
/// the rest of the process, as a program's would.
fn run() {
    let provider = match fxtrace::connect("own-engine") {
        Ok(provider) => provider,
        Err(e) => {
            eprintln!("preload_own_engine: cannot connect: {e}");
            None
        }
    };
    if let Some(p) = &provider {
        p.wait_started(Duration::from_secs(5));
    }
    println!("connected={}", provider.is_some());
    std::mem::forget(provider);
    let spawned = std::thread::Builder::new().name("worker".into()).spawn(|| {
        for _ in 0..200 {
            fxtrace::instant("own", "tick", Scope::Thread, &[]);
            std::thread::sleep(Duration::from_millis(1));
        }
        fxtrace::instant("own", "worker done", Scope::Thread, &[]);
        println!("worker done");
        let _ = std::io::stdout().flush();
    });
    if let Err(e) = spawned {
        eprintln!("preload_own_engine: cannot start the worker: {e}");
    }
    fxtrace::instant("own", "main done", Scope::Thread, &[]);
    println!("main done");
    let _ = std::io::stdout().flush();
}

/// The C entry point: [`run`], then end the main thread alone.
#[no_mangle]
pub extern "C-unwind" fn main(
    _argc: libc::c_int,
    _argv: *const *const libc::c_char,
) -> libc::c_int {
    run();
    // SAFETY: nothing on this frame needs dropping (`run` returned); the forced unwind only
    // crosses this `C-unwind` frame and glibc's.
    unsafe { pthread_exit(std::ptr::null_mut()) }
}

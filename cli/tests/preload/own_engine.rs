//! A Rust program with its own copy of the `fxtrace` crate (its own provider) under
//! `fxtrace record --preload`: two engines in one process, the program's and the preload
//! object's. Its main thread ends first (`pthread_exit`); the process must end with its last
//! thread, as without fxtrace, and both providers flush.
//!
//! The preload object ends such a process once only fxtrace's helper threads are left, and
//! knew only its own copy's helpers: the program's provider thread counted as a program
//! thread, and the process ran forever (every signal blocked in that thread: a SIGTERM could
//! not end it either).

use std::time::Duration;

use crate::preload_support::{record_preload_within, Summary};

/// Far beyond the program's ~200 ms: reached only by a process that does not end.
const LIMIT: Duration = Duration::from_secs(20);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_program_with_its_own_provider_ends_when_its_last_thread_does() {
    let dir = tempfile::tempdir().unwrap();
    let exe = crate::support::example("preload_own_engine");
    let (out, bytes) = record_preload_within(
        dir.path(),
        &[],
        &[exe.to_str().unwrap()],
        &[("FXTRACE_PRELOAD_CAPTURE", "none")],
        LIMIT,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("connected=true"), "{stdout}\n{stderr}");
    assert!(stdout.contains("worker done"), "{stdout}\n{stderr}");
    assert!(
        !stderr.contains("salvaged"),
        "both providers flushed: {stderr}"
    );
    // Two providers of one process at once: neither is reported as the other's exec.
    assert!(!stderr.contains("exec'd"), "{stderr}");
    assert!(stderr.contains("is a second provider of pid"), "{stderr}");
    let records = crate::preload_support::decode(&bytes);
    let s = Summary::of(&records);
    assert!(
        s.provider("preload_own_engine").is_some(),
        "{:?}",
        s.providers
    );
    let own = s
        .provider("own-engine")
        .expect("the program's own provider");
    let names = s.event_names(own);
    for name in ["main done", "worker done"] {
        assert!(names.contains(&name), "{name}: {names:?}");
    }
}

//! `libfxtrace_preload.so` with no trace manager listening: programs run exactly as without
//! it (same standard output, standard error and exit status), it prints nothing unless
//! `FXTRACE_PRELOAD_LOG=1`, and a C program linked against it runs untraced.

use crate::preload_support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use preload_support::{cc, compile_c, output_within, preload_lib, root, RUN_LIMIT};

/// Run `program args` with or without the object, with `FXTRACE_SOCKET` at `socket`.
fn run(program: &str, args: &[&str], preload: bool, socket: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("FXTRACE_SOCKET", socket)
        .env_remove("LD_PRELOAD")
        .env_remove("FXTRACE_PRELOAD_LOG");
    if preload {
        cmd.env("LD_PRELOAD", preload_lib());
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    output_within(&mut cmd, RUN_LIMIT)
}

fn assert_same(what: &str, plain: &Output, preloaded: &Output) {
    assert_eq!(
        plain.status.code(),
        preloaded.status.code(),
        "{what}: exit code"
    );
    assert_eq!(
        plain.status.signal(),
        preloaded.status.signal(),
        "{what}: signal"
    );
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&preloaded.stdout),
        "{what}: standard output"
    );
    assert_eq!(
        String::from_utf8_lossy(&plain.stderr),
        String::from_utf8_lossy(&preloaded.stderr),
        "{what}: standard error"
    );
}

#[test]
fn system_binaries_run_unchanged_without_a_manager() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody.sock");
    let listing = root();
    let listing = listing.to_str().unwrap();
    let cases: &[(&str, &[&str])] = &[
        ("/bin/true", &[]),
        ("/bin/false", &[]),
        ("/bin/ls", &["-la", listing]),
        ("/bin/ls", &["/nonexistent/fxtrace"]),
        ("/bin/sh", &["-c", "echo out; echo err >&2; exit 5"]),
    ];
    for (program, args) in cases {
        if !Path::new(program).exists() {
            fxtrace::test_support::skip(
                fxtrace::test_support::Requirement::Tools,
                format!("{program} is not installed"),
            );
            continue;
        }
        let what = format!("{program} {args:?}");
        let plain = run(program, args, false, &socket, &[]);
        let preloaded = run(program, args, true, &socket, &[]);
        assert_same(&what, &plain, &preloaded);
    }
    // The failing cases really fail (the comparison saw a non-zero status).
    let failed = run("/bin/sh", &["-c", "exit 5"], true, &socket, &[]);
    assert_eq!(failed.status.code(), Some(5));
}

#[test]
fn a_socket_nobody_listens_on_is_no_manager() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("stale.sock");
    // A socket file left behind by a manager that is gone: connect is refused.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let plain = run("/bin/echo", &["hi"], false, &socket, &[]);
    let preloaded = run("/bin/echo", &["hi"], true, &socket, &[]);
    assert_same("echo with a stale socket", &plain, &preloaded);
}

#[test]
fn death_by_signal_is_unchanged_without_a_manager() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody.sock");
    for signals in ["0", "1"] {
        let env = [("FXTRACE_PRELOAD_SIGNALS", signals)];
        let args = ["-c", "kill -TERM $$; echo unreachable"];
        let plain = run("/bin/sh", &args, false, &socket, &env);
        let preloaded = run("/bin/sh", &args, true, &socket, &env);
        assert_eq!(preloaded.status.signal(), Some(libc::SIGTERM));
        assert_same("sh killing itself", &plain, &preloaded);
    }
}

#[test]
fn nothing_is_printed_unless_logging_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody.sock");
    let bad = [
        ("FXTRACE_PRELOAD_FLUSH_MS", "soon"),
        ("FXTRACE_PRELOAD_CAPTURE", "everything"),
    ];
    let quiet = run("/bin/true", &[], true, &socket, &bad);
    assert!(quiet.status.success());
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );

    let mut logging = bad.to_vec();
    logging.push(("FXTRACE_PRELOAD_LOG", "1"));
    let loud = run("/bin/true", &[], true, &socket, &logging);
    assert!(loud.status.success());
    let err = String::from_utf8_lossy(&loud.stderr);
    assert!(
        err.contains("FXTRACE_PRELOAD_FLUSH_MS: \"soon\" is not a number of milliseconds"),
        "{err}"
    );
    assert!(
        err.contains("FXTRACE_PRELOAD_CAPTURE: \"everything\""),
        "{err}"
    );
    assert!(
        err.contains("FXTRACE_PRELOAD_FLUSH_MS=500"),
        "the defaults are used: {err}"
    );
    assert!(
        err.contains("no trace manager listening: not tracing"),
        "{err}"
    );
    assert!(
        err.lines().all(|l| l.starts_with("fxtrace-preload[")),
        "every line is marked: {err}"
    );
    assert!(loud.stdout.is_empty());
}

#[test]
fn the_c_example_runs_untraced_without_a_manager() {
    let Some(_) = cc() else {
        preload_support::skip_without_cc();
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(root().join("examples/c/hello.c")).unwrap();
    let hello = compile_c(dir.path(), "hello", &source, true);
    let out = Command::new(&hello)
        .env("FXTRACE_SOCKET", dir.path().join("nobody.sock"))
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let squares = |n: u64| (0..n).map(|i| i * i).sum::<u64>();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("hello: {} {}\n", squares(200_000), 3 * squares(100_000))
    );
}

/// A program whose main thread ends before its process, while a thread of its own runs on:
/// by `pthread_exit`, `thrd_exit`, or a cancellation; `sigwait`: the thread left blocks
/// SIGUSR1, sends it to the process and waits for it (a helper with an open mask would die
/// of it).
const MAIN_LEAVES_FIRST: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

static pthread_t main_thread;
static const char* mode;

static void nap(void) {
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
}

static void* late(void* arg) {
    (void)arg;
    nap();
    /* After main has printed and flushed (a cancellation inside its write would print twice). */
    if (!strcmp(mode, "cancel")) pthread_cancel(main_thread);
    nap();
    if (!strcmp(mode, "sigwait")) {
        sigset_t set;
        int sig = 0;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        kill(getpid(), SIGUSR1);
        sigwait(&set, &sig);
        printf("sigwait got %d\n", sig);
    }
    printf("late thread done\n");
    return NULL;
}

int main(int argc, char** argv) {
    mode = argc > 1 ? argv[1] : "pthread_exit";
    main_thread = pthread_self();
    pthread_t t;
    pthread_create(&t, NULL, late, NULL);
    printf("main leaves\n");
    fflush(stdout);
    if (!strcmp(mode, "thrd_exit")) thrd_exit(0);
    if (!strcmp(mode, "cancel")) for (;;) pause();
    pthread_exit(NULL);
}
"#;

#[test]
fn a_main_thread_that_ends_first_ends_the_process_with_its_last_thread() {
    let Some(_) = cc() else {
        preload_support::skip_without_cc();
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(dir.path(), "main_leaves", MAIN_LEAVES_FIRST, false);
    // A program whose name starts like fxtrace's threads' is not taken for one of them.
    let lookalike = dir.path().join("fxtrace-demo");
    std::fs::copy(&exe, &lookalike).unwrap();
    let socket = dir.path().join("nobody.sock");
    for (program, mode) in [
        (&exe, "pthread_exit"),
        (&exe, "thrd_exit"),
        (&exe, "cancel"),
        (&exe, "sigwait"),
        (&lookalike, "pthread_exit"),
    ] {
        let program = program.to_str().unwrap();
        let plain = run(program, &[mode], false, &socket, &[]);
        assert!(
            String::from_utf8_lossy(&plain.stdout).ends_with("late thread done\n"),
            "{mode}: {plain:?}"
        );
        // FXTRACE_SOCKET unset: the object follows the trace service (absent), with threads
        // of its own that never end.
        let mut unset = Command::new(program);
        unset
            .arg(mode)
            .env_remove("FXTRACE_SOCKET")
            .env("LD_PRELOAD", preload_lib());
        let unset = output_within(&mut unset, RUN_LIMIT);
        assert_same(&format!("{program} {mode}"), &plain, &unset);
    }
}

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
            println!("skipped: {program} is not installed");
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
        println!("skipped: no C compiler (cc, gcc or clang)");
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

/// A program whose `main` ends with `pthread_exit` while a thread of its own runs on.
const MAIN_LEAVES_FIRST: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static void* late(void* arg) {
    (void)arg;
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    printf("late thread done\n");
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, late, NULL);
    printf("main leaves\n");
    fflush(stdout);
    pthread_exit(NULL);
}
"#;

#[test]
fn a_main_ending_with_pthread_exit_ends_with_its_last_thread() {
    let Some(_) = cc() else {
        println!("skipped: no C compiler (cc, gcc or clang)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(dir.path(), "main_leaves", MAIN_LEAVES_FIRST, false);
    let exe = exe.to_str().unwrap();
    let socket = dir.path().join("nobody.sock");
    let plain = run(exe, &[], false, &socket, &[]);
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "main leaves\nlate thread done\n"
    );
    // Without a manager (the object follows the trace service, which is not there either),
    // and with FXTRACE_SOCKET unset: the process ends when its late thread does, status 0.
    let preloaded = run(exe, &[], true, &socket, &[]);
    assert_same("pthread_exit from main", &plain, &preloaded);
    let mut unset = Command::new(exe);
    unset
        .env_remove("FXTRACE_SOCKET")
        .env("LD_PRELOAD", preload_lib());
    let unset = output_within(&mut unset, RUN_LIMIT);
    assert_same("pthread_exit from main, no FXTRACE_SOCKET", &plain, &unset);
}

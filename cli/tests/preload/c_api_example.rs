//! `examples/c/hello.c`, built with `cc` against `libfxtrace_preload.so`, traced by
//! `fxtrace record` (the object's constructor makes it a provider; no `LD_PRELOAD` needed):
//! its C API events decode with their names, nesting, threads and counter values. And
//! `fxtrace_alert` stops a flight recorder.

use crate::preload_support;

use std::process::Command;
use std::time::{Duration, Instant};

use fxtrace_format::{DecodedEventKind, DecodedRecord, DecodedValue};
use preload_support::{cc, compile_c, decode, fxtrace_bin, preload_lib, root, Summary};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn record(dir: &std::path::Path, extra: &[&str], cmd: &[&str]) -> (std::process::Output, Vec<u8>) {
    let archive = dir.join("trace.fxt");
    let out = Command::new(fxtrace_bin())
        .arg("record")
        .arg("-o")
        .arg(&archive)
        .args(extra)
        .arg("--")
        .args(cmd)
        .env("FXTRACE_PRELOAD_LIB", preload_lib())
        .env_remove("LD_PRELOAD")
        .env_remove("FXTRACE_SOCKET")
        .output()
        .unwrap();
    (out, std::fs::read(&archive).unwrap_or_default())
}

#[test]
fn the_c_example_is_traced() {
    if cc().is_none() {
        preload_support::skip_without_cc();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(root().join("examples/c/hello.c")).unwrap();
    let hello = compile_c(dir.path(), "hello", &source, true);
    let hello = hello.to_str().unwrap();
    let squares = |n: u64| (0..n).map(|i| i * i).sum::<u64>();
    let expected = format!("hello: {} {}\n", squares(200_000), 3 * squares(100_000));

    // Linked: a provider by itself. With --preload as well: the same object, loaded once.
    for extra in [&[][..], &["--preload"][..]] {
        let (out, bytes) = record(dir.path(), extra, &[hello]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), expected);
        let records = decode(&bytes);
        let s = Summary::of(&records);
        assert_eq!(
            s.providers.values().collect::<Vec<_>>(),
            ["hello"],
            "{extra:?}"
        );
        let provider = s.provider("hello").unwrap();
        let (&pid, _) = s
            .processes
            .iter()
            .find(|(_, n)| n.contains("hello"))
            .expect("process name");

        // Per thread, the events in time order.
        let mut by_thread: std::collections::BTreeMap<u64, Vec<(u64, String, DecodedEventKind)>> =
            Default::default();
        let mut counters = Vec::new();
        for d in &records {
            if let DecodedRecord::Event(e) = &d.record {
                if e.category != "hello" {
                    continue;
                }
                assert_eq!(d.provider, Some(provider));
                assert_eq!(e.thread.pid, pid);
                by_thread.entry(e.thread.tid).or_default().push((
                    e.time.ticks,
                    e.name.to_string(),
                    e.kind,
                ));
                if let DecodedEventKind::Counter { id } = e.kind {
                    assert_eq!(id, 0);
                    assert_eq!(e.args.len(), 1);
                    assert_eq!(e.args[0].name, "value");
                    if let DecodedValue::I64(v) = e.args[0].value {
                        counters.push((e.name.to_string(), v));
                    }
                }
            }
        }
        assert_eq!(by_thread.len(), 2, "main and worker: {by_thread:?}");
        let main = &by_thread[&pid];
        let worker = by_thread
            .iter()
            .find(|(t, _)| **t != pid)
            .map(|(_, e)| e)
            .unwrap();
        let names = |events: &[(u64, String, DecodedEventKind)]| {
            let mut sorted = events.to_vec();
            sorted.sort_by_key(|e| e.0);
            sorted
                .into_iter()
                .map(|(_, n, k)| format!("{k:?} {n}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(main),
            [
                "Instant start",
                "DurationBegin sum_squares",
                "DurationEnd sum_squares",
                "Counter { id: 0 } result_low_bits",
                "Instant done"
            ]
        );
        let mut want = Vec::new();
        for round in 0..3 {
            want.push(format!("DurationBegin round {round}"));
            want.push("DurationBegin sum_squares".to_string());
            want.push("DurationEnd sum_squares".to_string());
            want.push(format!("DurationEnd round {round}"));
            want.push("Counter { id: 0 } worker_rounds".to_string());
        }
        assert_eq!(names(worker), want, "nesting on the worker thread");
        let low = ((squares(200_000) + 3 * squares(100_000)) & 0xffff) as i64;
        counters.sort();
        let want: Vec<(String, i64)> = [
            ("result_low_bits", low),
            ("worker_rounds", 1),
            ("worker_rounds", 2),
            ("worker_rounds", 3),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        assert_eq!(counters, want);
        // Both threads are named (engine registration on the first event).
        for tid in by_thread.keys() {
            assert!(s.threads.contains_key(tid), "thread {tid} named");
        }
    }
}

#[test]
fn an_alert_stops_a_flight_recorder() {
    if cc().is_none() {
        preload_support::skip_without_cc();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // SIGTERM (sent by the recorder once it stopped on the alert) is blocked and waited for,
    // so the program prints its line whatever the timing; alarm() ends it if no alert stops
    // the recorder.
    let source = r#"
#include <fxtrace.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    sigset_t set;
    int sig;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    alarm(20);
    FXTRACE_INSTANT("app", "before the alert");
    int sent = fxtrace_alert("boom");
    printf("alert %d\n", sent);
    fflush(stdout);
    sigwait(&set, &sig);
    return 0;
}
"#;
    let exe = compile_c(dir.path(), "alerting", source, true);
    let started = Instant::now();
    let (out, bytes) = record(
        dir.path(),
        &["-m", "circular", "--stop-on-alert", "boom"],
        &[exe.to_str().unwrap()],
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the recorder stopped on the alert, not when the program ended"
    );
    assert_eq!(text(&out.stdout), "alert 1\n", "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("alert \"boom\""), "{err}");
    let s = Summary::of(&decode(&bytes));
    let provider = s.provider("alerting").expect("provider");
    assert!(s.event_names(provider).contains(&"before the alert"));
}

#[test]
fn an_object_loaded_with_dlopen_traces_and_survives_dlclose() {
    if cc().is_none() {
        preload_support::skip_without_cc();
        return;
    }
    // A program that knows nothing of fxtrace at link time: it loads the object at run time
    // (its constructor registers the process then; it cannot wait for the manager's Start
    // inside `dlopen`, so the program waits until its category is enabled), calls the C API
    // through dlsym, closes the object (which stays mapped: it is linked `-z nodelete`, its
    // threads and exit hook still run its code), works on, and exits normally (the exit hook
    // flushes).
    let source = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
typedef void (*instant_fn)(const char*, const char*);
typedef int (*enabled_fn)(const char*);
int main(int argc, char** argv) {
    if (argc < 2) return 2;
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 3; }
    instant_fn instant = (instant_fn)dlsym(lib, "fxtrace_instant");
    enabled_fn enabled = (enabled_fn)dlsym(lib, "fxtrace_is_category_enabled");
    if (!instant || !enabled) return 4;
    for (int i = 0; i < 300 && !enabled("dl"); i++) usleep(10000);
    instant("dl", "after dlopen");
    dlclose(lib);
    instant("dl", "after dlclose");
    usleep(20000);
    printf("done\n");
    return 0;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(dir.path(), "dlopener", source, false);
    let lib = preload_lib();
    let (out, bytes) = record(
        dir.path(),
        &[],
        &[exe.to_str().unwrap(), lib.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "done\n");
    let s = Summary::of(&decode(&bytes));
    let provider = s.provider("dlopener").expect("registered at dlopen");
    let names = s.event_names(provider);
    assert!(names.contains(&"after dlopen"), "{names:?}");
    assert!(names.contains(&"after dlclose"), "{names:?}");
    let err = text(&out.stderr);
    assert!(!err.contains("LOST"), "the exit flush ran: {err}");
}

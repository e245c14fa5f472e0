//! Unmodified programs traced through `fxtrace record --preload`: `/bin/ls`, and a C program
//! built here that starts named threads, forks, execs and ends in every way (return, `exit`
//! with a code, SIGTERM with and without the opt-in flush, SIGKILL). The archive decodes and
//! holds the process and thread names and the threads' context switches; the program's
//! output and exit status are unchanged; a forked child never writes into its parent's
//! section; an exec'd program becomes a provider of its own.

use crate::preload_support;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

use preload_support::{cc, compile_c, decode, perf_allowed, record_preload, Summary};

/// The workload: three named threads that sleep a little (context switches), then one of
/// several endings. It uses the C API only if the process has it (`dlsym`), as a program
/// that is traced when preloaded would.
const WORKLOAD: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef void (*instant_fn)(const char*, const char*);
static instant_fn instant;

static void event(const char* name) {
    if (instant) instant("workload", name);
}

static void nap(void) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

static void* worker(void* arg) {
    char name[16];
    snprintf(name, sizeof name, "worker-%d", (int)(intptr_t)arg);
    pthread_setname_np(pthread_self(), name);
    for (int i = 0; i < 5; i++) {
        event(name);
        nap();
    }
    return NULL;
}

static void* late(void* arg) {
    (void)arg;
    for (int i = 0; i < 5; i++) nap();
    event("late thread done");
    printf("late thread done\n");
    return NULL;
}

int main(int argc, char** argv) {
    instant = (instant_fn)dlsym(RTLD_DEFAULT, "fxtrace_instant");
    const char* mode = argc > 1 ? argv[1] : "return";
    pthread_t t[3];
    for (intptr_t i = 0; i < 3; i++) pthread_create(&t[i], NULL, worker, (void*)i);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("threads joined\n");
    fflush(stdout);
    if (!strcmp(mode, "fork")) {
        pid_t child = fork();
        if (child == 0) {
            for (int i = 0; i < 200; i++) event("child must not appear");
            nap();
            printf("child exiting\n");
            fflush(stdout);
            exit(3);
        }
        int status;
        waitpid(child, &status, 0);
        printf("child %d status %d\n", (int)child, WEXITSTATUS(status));
        event("parent after fork");
    } else if (!strcmp(mode, "exec")) {
        pid_t child = fork();
        if (child == 0) {
            execl("/bin/true", "true", (char*)NULL);
            _exit(127);
        }
        int status;
        waitpid(child, &status, 0);
        printf("exec child %d status %d\n", (int)child, WEXITSTATUS(status));
    }
    if (!strcmp(mode, "sigwait")) {
        sigset_t set;
        int sig = 0;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        kill(getpid(), SIGUSR1); /* process-directed: any thread not blocking it takes it */
        sigwait(&set, &sig);
        printf("sigwait got %d\n", sig);
    }
    event("main done");
    if (!strcmp(mode, "exit7")) exit(7);
    if (!strcmp(mode, "pthread_exit")) {
        pthread_t t_late;
        pthread_create(&t_late, NULL, late, NULL);
        pthread_exit(NULL);
    }
    if (!strcmp(mode, "termproc")) kill(getpid(), SIGTERM);
    if (!strcmp(mode, "term")) raise(SIGTERM);
    if (!strcmp(mode, "kill")) raise(SIGKILL);
    return 0;
}
"#;

/// The workload, built once per test (each test has its own directory).
fn workload(dir: &std::path::Path) -> Option<String> {
    if cc().is_none() {
        preload_support::skip_without_cc();
        return None;
    }
    let exe = compile_c(dir, "workload", WORKLOAD, false);
    Some(exe.to_str().unwrap().to_owned())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The archive's summary, after checking that it decodes completely.
fn summary_of(bytes: &[u8]) -> Summary {
    assert!(!bytes.is_empty(), "no archive written");
    Summary::of(&decode(bytes))
}

/// The workload's provider, its process id, and checks common to every ending: the process
/// and its three workers are named, every worker's switches are in the trace.
fn check_workload(s: &Summary, capture: bool) -> (u32, u64) {
    let provider = s
        .provider("workload")
        .expect("a provider named after the executable");
    // The provider's process: the pid of its own events. (Not the process named "workload":
    // the trace also names the threads its threads woke, and the tests beside this one run
    // workloads of that name at the same time.)
    let pid = s
        .events
        .iter()
        .find(|e| e.0 == provider && e.4 == "main done")
        .map(|e| e.1)
        .expect("the workload's events");
    assert!(
        s.processes
            .get(&pid)
            .is_some_and(|n| n.contains("workload")),
        "the process is named"
    );
    for worker in ["worker-0", "worker-1", "worker-2"] {
        let tids: Vec<u64> = s
            .tids_named(worker)
            .into_iter()
            .filter(|tid| s.threads[tid].0 == pid)
            .collect();
        assert_eq!(
            tids.len(),
            1,
            "{worker} named once per thread of the process: {tids:?}"
        );
        if capture {
            assert!(
                s.switched_tids(provider).contains(&tids[0]),
                "{worker}'s context switches are in the trace"
            );
        }
    }
    (provider, pid)
}

/// Whether the flush at exit ran (the capture summary is written only by it).
fn flushed(s: &Summary, provider: u32) -> bool {
    s.event_names(provider)
        .contains(&"fxtrace: kernel capture summary")
}

#[test]
fn ls_is_traced_unmodified() {
    if !perf_allowed("ls_is_traced_unmodified") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Directories nothing changes while the test runs.
    let root = preload_support::root();
    let include = root.join("include");
    let example = root.join("examples/c");
    let args = ["-la", include.to_str().unwrap(), example.to_str().unwrap()];
    let plain = Command::new("/bin/ls").args(args).output().unwrap();
    let (out, bytes) = record_preload(dir.path(), &[], &[&["/bin/ls"][..], &args].concat(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(&plain.stdout), "ls prints the same");
    let s = summary_of(&bytes);
    let provider = s.provider("ls").expect("provider \"ls\"");
    let (&pid, _) = s
        .processes
        .iter()
        .find(|(_, n)| n.contains("ls"))
        .expect("process name");
    assert!(
        s.threads
            .get(&pid)
            .is_some_and(|(p, names)| *p == pid && names.contains("ls")),
        "the main thread is named: {:?}",
        s.threads
    );
    assert!(
        s.switched_tids(provider).contains(&pid),
        "ls's own switches"
    );
    assert!(
        flushed(&s, provider),
        "flushed at exit: {:?}",
        s.event_names(provider)
    );
    let err = text(&out.stderr);
    assert!(!err.contains("LOST"), "{err}");
}

#[test]
fn threads_and_a_forked_child() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = workload(dir.path()) else {
        return;
    };
    let capture = perf_allowed("threads_and_a_forked_child (switch checks)");
    let plain = Command::new(&exe).arg("fork").output().unwrap();
    let (out, bytes) = record_preload(dir.path(), &[], &[&exe, "fork"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let child_pid = |o: &Output| -> (String, u64) {
        let t = text(&o.stdout);
        let line = t
            .lines()
            .find(|l| l.starts_with("child ") && l.contains(" status "))
            .unwrap();
        let pid = line.split(' ').nth(1).unwrap().parse().unwrap();
        (t.replace(&format!("child {pid} "), "child PID "), pid)
    };
    let (plain_text, _) = child_pid(&plain);
    let (traced_text, child) = child_pid(&out);
    assert_eq!(traced_text, plain_text, "same output (child pid aside)");
    assert_eq!(
        traced_text,
        "threads joined\nchild exiting\nchild PID status 3\n"
    );
    let s = summary_of(&bytes);
    let (provider, pid) = check_workload(&s, capture);
    let names = s.event_names(provider);
    assert!(names.contains(&"parent after fork"), "{names:?}");
    assert!(names.contains(&"main done"), "{names:?}");
    assert!(
        s.events.iter().all(|e| e.4 != "child must not appear"),
        "the child wrote nothing anywhere"
    );
    assert_eq!(
        s.providers.len(),
        1,
        "the child stayed silent: {:?}",
        s.providers
    );
    assert!(flushed(&s, provider), "the parent flushed at exit");
    if capture {
        // The child's switches come with the inherited perf events, under its own pid.
        assert!(
            s.switches.iter().any(|w| w.1 == child || w.2 == child),
            "child {child} switches"
        );
        assert_ne!(child, pid);
    }
    let err = text(&out.stderr);
    assert!(
        !err.contains("LOST"),
        "the parent's section is intact: {err}"
    );
}

#[test]
fn an_execd_program_becomes_its_own_provider() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = workload(dir.path()) else {
        return;
    };
    let (out, bytes) = record_preload(dir.path(), &[], &[&exe, "exec"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.ends_with(" status 0\n"), "{stdout}");
    let exec_pid: u64 = stdout
        .lines()
        .last()
        .and_then(|l| l.split(' ').nth(2))
        .and_then(|p| p.parse().ok())
        .expect("the exec child's pid");
    let s = summary_of(&bytes);
    check_workload(&s, false);
    let provider = s.provider("true").expect("the exec'd /bin/true registered");
    assert!(
        s.processes
            .get(&exec_pid)
            .is_some_and(|n| n.contains("true")),
        "the new image is named after its executable: {:?}",
        s.processes
    );
    assert!(flushed(&s, provider) || !perf_allowed("exec flush"));
}

/// One ending: the recorder's exit code (the command's, shell-style), whether the flush ran,
/// and whether the manager salvaged the buffer.
fn ending(mode: &str, env: &[(&str, &str)]) -> Option<(i32, bool, bool, Summary, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let exe = workload(dir.path())?;
    let plain = Command::new(&exe).arg(mode).output().unwrap();
    let (out, bytes) = record_preload(dir.path(), &[], &[&exe, mode], env);
    assert_eq!(
        text(&out.stdout),
        text(&plain.stdout),
        "{mode}: same output"
    );
    let last = match mode {
        "sigwait" => "sigwait got 10\n",
        "pthread_exit" => "late thread done\n",
        _ => "",
    };
    assert_eq!(text(&out.stdout), format!("threads joined\n{last}"));
    let code = out.status.code().expect("fxtrace exits normally");
    let expected = plain
        .status
        .code()
        .unwrap_or_else(|| 128 + plain.status.signal().unwrap());
    assert_eq!(
        code, expected,
        "{mode}: the command's status passes through"
    );
    let s = summary_of(&bytes);
    let provider = s.provider("workload").expect("provider");
    let names = s.event_names(provider);
    assert!(names.contains(&"main done"), "{mode}: {names:?}");
    let salvaged = text(&out.stderr).contains("salvaged");
    Some((
        code,
        flushed(&s, provider),
        salvaged,
        s,
        u64::from(provider),
    ))
}

#[test]
fn signals_for_the_program_stay_the_programs() {
    // The program blocks SIGUSR1 and sends it to its process to `sigwait` for it: the
    // preload's threads must not take it (its default action would kill the process).
    let Some((code, flushed, salvaged, s, _)) = ending("sigwait", &[]) else {
        return;
    };
    assert_eq!(code, 0);
    assert!(flushed && !salvaged);
    let names = s.event_names(s.provider("workload").unwrap());
    assert!(names.contains(&"main done"));
}

#[test]
fn return_and_exit_with_a_code_flush() {
    for (mode, code) in [("return", 0), ("exit7", 7)] {
        let Some((got, flushed, salvaged, s, _)) = ending(mode, &[]) else {
            return;
        };
        assert_eq!(got, code);
        assert!(flushed, "{mode}: the exit hook flushed");
        assert!(!salvaged, "{mode}: STOPPED was sent");
        check_workload(&s, perf_allowed(mode));
    }
}

#[test]
fn a_main_thread_ending_with_pthread_exit_ends_with_its_last_thread() {
    // glibc ends the process when its last thread ends; the object's own threads must not
    // keep it alive (they never end by themselves).
    let Some((code, flushed, salvaged, s, provider)) = ending("pthread_exit", &[]) else {
        return;
    };
    assert_eq!(code, 0);
    assert!(flushed, "the exit that ended the process flushed");
    assert!(!salvaged, "STOPPED was sent");
    let names = s.event_names(provider as u32);
    assert!(names.contains(&"late thread done"), "{names:?}");
}

#[test]
fn a_large_buffer_does_not_hold_the_start_back() {
    // Faulting 512 MiB in takes longer than the object waits for the start: it happens after
    // STARTED, beside the program, so the program's first events are kept, not dropped.
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = workload(dir.path()) else {
        return;
    };
    let (out, bytes) = record_preload(dir.path(), &["-b", "512"], &[&exe], &[]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("records dropped"), "{err}");
    assert!(!err.contains("salvaged"), "{err}");
    let s = summary_of(&bytes);
    let provider = s.provider("workload").expect("provider");
    let names = s.event_names(provider);
    for event in ["worker-0", "worker-1", "worker-2", "main done"] {
        assert!(names.contains(&event), "{event}: {names:?}");
    }
    assert!(flushed(&s, provider));
}

#[test]
fn death_by_signal_keeps_the_status_and_the_data() {
    // SIGTERM at its default action: no handler, the manager salvages the buffer.
    let Some((code, flushed, salvaged, s, _)) = ending("term", &[]) else {
        return;
    };
    assert_eq!(code, 128 + libc::SIGTERM);
    assert!(!flushed && salvaged, "no flush, salvaged");
    check_workload(&s, false);
    // Opt-in: the handler flushes, then the process dies of the same signal.
    let env = [("FXTRACE_PRELOAD_SIGNALS", "1")];
    let (code, flushed, salvaged, s, _) = ending("term", &env).unwrap();
    assert_eq!(code, 128 + libc::SIGTERM);
    assert!(flushed && !salvaged, "flushed by the handler, STOPPED sent");
    check_workload(&s, perf_allowed("term with FXTRACE_PRELOAD_SIGNALS=1"));
    // Sent to the process (not to a thread): it reaches a thread of the program, never one of
    // the preload's (they block every signal), so the handler flushes there.
    let (code, flushed, _, _, _) = ending("termproc", &env).unwrap();
    assert_eq!(code, 128 + libc::SIGTERM);
    assert!(
        flushed,
        "termproc: flushed by the handler on a program thread"
    );
    // SIGKILL: nothing runs; everything written before is salvaged.
    let (code, flushed, salvaged, _, _) = ending("kill", &env).unwrap();
    assert_eq!(code, 128 + libc::SIGKILL);
    assert!(!flushed && salvaged);
}

#[test]
fn a_program_outliving_the_session_runs_on_untraced() {
    // `LD_PRELOAD` next to a running session (no `--preload`): the session ends (after
    // 0.5 s) while the program still runs; the program carries on untraced and exits as it
    // would have, without waiting for a flush.
    let dir = tempfile::tempdir().unwrap();
    let lib = preload_support::preload_lib(); // built before the session's clock runs
    let socket = dir.path().join("session.sock");
    let archive = dir.path().join("trace.fxt");
    let mut recorder = Command::new(preload_support::fxtrace_bin())
        .arg("record")
        .arg("--socket")
        .arg(&socket)
        .args(["--duration", "0.5", "-o"])
        .arg(&archive)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The recorder says it is recording once it listens.
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(recorder.stderr.take().unwrap()));
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("recording"), "{first}");
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let started = std::time::Instant::now();
    let out = Command::new("/bin/sh")
        .args(["-c", "sleep 1; echo still here; exit 4"])
        .env("LD_PRELOAD", &lib)
        .env("FXTRACE_SOCKET", &socket)
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(text(&out.stdout), "still here\n");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert!(
        took < std::time::Duration::from_millis(2700),
        "no wait at exit once the session is over: {took:?}"
    );
    let status = recorder.wait().unwrap();
    let rest = rest.join().unwrap();
    assert!(status.success(), "{rest:?}");
    let s = summary_of(&std::fs::read(&archive).unwrap());
    assert!(!s.providers.is_empty(), "the program joined the session");
}

#[test]
fn a_program_closing_our_descriptors_keeps_its_files_intact() {
    // A daemon-style program closes every descriptor it did not open, opens files of its own
    // (which get the numbers the preload object's descriptors had: control socket, FIFO,
    // memfd, pipes, perf events), writes them, reads them back, closes them and exits with
    // its own status. Twice: exiting at once (the exit hook finds its pipes gone and waits
    // for the flusher) and after a pause (the provider, capture and flusher threads notice by
    // themselves). Nothing of fxtrace may write, read, ioctl or close those numbers; the
    // recording ends with what was written before the close and says why it was cut short.
    if cc().is_none() {
        preload_support::skip_without_cc();
        return;
    }
    let source = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
typedef void (*instant_fn)(const char*, const char*);
int main(int argc, char** argv) {
    instant_fn instant = (instant_fn)dlsym(RTLD_DEFAULT, "fxtrace_instant");
    if (instant) instant("closer", "before close");
    char path[256], buf[64];
    int fds[256];
    for (int fd = 3; fd < 1024; fd++) close(fd);
    for (int i = 0; i < 256; i++) {
        snprintf(path, sizeof path, "%s/f%d", argv[1], i);
        fds[i] = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
        int n = snprintf(buf, sizeof buf, "data %d", i);
        if (fds[i] < 0 || write(fds[i], buf, n) != n) return 3;
    }
    struct timespec pause = {0, atol(argv[2]) * 1000000L};
    nanosleep(&pause, NULL);
    for (int i = 0; i < 256; i++) {
        char want[64], got[64] = {0};
        int n = snprintf(want, sizeof want, "data %d", i);
        if (pread(fds[i], got, sizeof got, 0) != n || memcmp(got, want, n)) return 4;
        if (write(fds[i], "!", 1) != 1) return 5;
        if (close(fds[i]) != 0) return 6;
    }
    printf("done\n");
    return 42;
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(dir.path(), "closer", source, false);
    for pause_ms in ["0", "400"] {
        let files = dir.path().join(format!("files-{pause_ms}"));
        std::fs::create_dir(&files).unwrap();
        let (out, bytes) = record_preload(
            dir.path(),
            &[],
            &[exe.to_str().unwrap(), files.to_str().unwrap(), pause_ms],
            &[],
        );
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(42),
            "the program's files were disturbed (3: open/write, 4: content, 5: write, 6: \
             close) or its status changed (pause {pause_ms} ms):\n{stderr}"
        );
        assert_eq!(text(&out.stdout), "done\n");
        for i in 0..256 {
            let content = std::fs::read(files.join(format!("f{i}"))).unwrap();
            assert_eq!(
                text(&content),
                format!("data {i}!"),
                "file f{i} (pause {pause_ms} ms)"
            );
        }
        // The recording finished: the archive decodes, keeps what was written before the
        // close, and says the provider was cut short.
        let s = summary_of(&bytes);
        let provider = s
            .provider("closer")
            .expect("the provider is in the archive");
        assert!(
            s.event_names(provider).contains(&"before close"),
            "pause {pause_ms} ms: {:?}",
            s.events
        );
        let reported = s
            .events
            .iter()
            .any(|e| e.4.starts_with("fxtrace: provider lost"))
            || s.logs
                .iter()
                .any(|l| l.contains("the program closed fxtrace's descriptor"));
        assert!(reported, "pause {pause_ms} ms: {:?} {:?}", s.events, s.logs);
        assert!(stderr.contains("lost"), "{stderr}");
    }
}

/// Under `--preload` alone, where the kernel gives raw tracepoint data (root here), the
/// traced process's wake-ups are in its own section: ping woken by pong and pong by ping, and
/// each first by the main thread that made it.
#[test]
fn the_traced_process_wakeups_name_their_wakers() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: the_traced_process_wakeups_name_their_wakers: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pingpong = crate::support::example("pingpong");
    let (out, bytes) = record_preload(dir.path(), &[], &[pingpong.to_str().unwrap(), "500"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let tid = |key: &str| -> u64 {
        stdout
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {stdout}"))
    };
    let (ping, pong) = (tid("ping_tid"), tid("pong_tid"));
    let wakers: BTreeSet<(u64, Option<u64>)> = decode(&bytes)
        .iter()
        .filter_map(|d| fxtrace_format::sched::WakeupView::of(&d.record))
        .map(|w| (w.tid, w.waker))
        .collect();
    assert!(wakers.contains(&(ping, Some(pong))), "{wakers:?}");
    assert!(wakers.contains(&(pong, Some(ping))), "{wakers:?}");
    // Each thread's first wake-up (sched_wakeup_new) is the main thread's, which made it.
    let main = tid("pid");
    assert!(wakers.contains(&(ping, Some(main))), "{wakers:?}");
    assert!(wakers.contains(&(pong, Some(main))), "{wakers:?}");
}

/// `fxtrace record --preload --sample`: the preloaded program samples its own threads
/// (user frames where not permitted more), and the report finds its busy loop.
#[test]
fn a_preloaded_programs_samples_find_its_busy_loop() {
    if !perf_allowed("a_preloaded_programs_samples_find_its_busy_loop") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let contention = crate::support::example("contention");
    let (out, bytes) = record_preload(
        dir.path(),
        &["--sample=999"],
        &[contention.to_str().unwrap(), "spin", "1", "300"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let samples = decode(&bytes)
        .iter()
        .filter(|d| matches!(&d.record, fxtrace_format::DecodedRecord::Blob { name, .. } if name == "fxtrace:sample"))
        .count();
    assert!(samples > 10, "{samples} samples");
    let trace = dir.path().join("trace.fxt");
    let report = Command::new(crate::preload_support::fxtrace_bin())
        .args(["report", "samples", "--top", "3"])
        .arg(&trace)
        .output()
        .unwrap();
    let text = text(&report.stdout);
    assert!(text.contains("contention::busy_loop"), "{text}");
}

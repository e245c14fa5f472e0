//! `fxtrace record --preload` and `exec`: an exec is a normal end of the old image. It is
//! flushed (the preload object hooks the `exec` family), reported as "exec'd into …" and
//! never as a lost provider; a failed exec leaves tracing on; an exec the object cannot hook
//! (`execl`, variadic) is still reported as an exec, its buffer salvaged.

use crate::preload_support;

use preload_support::{cc, compile_c, decode, perf_allowed, record_preload, Summary};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `lost` column of every process row of the summary (ids such as `1` or `1,3-4`, a pid,
/// a name that may have spaces: `sh → sleep`).
fn lost_column(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let ids = f
                .first()?
                .chars()
                .all(|c| c.is_ascii_digit() || ",-".contains(c));
            (f.len() >= 8 && ids && f[1].parse::<u32>().is_ok()).then(|| f[f.len() - 1].to_owned())
        })
        .collect()
}

/// A directory for test `name`'s C program, or `None` (the test skipped) without perf or a
/// C compiler.
fn c_program_dir(name: &str) -> Option<tempfile::TempDir> {
    if !perf_allowed(name) {
        return None;
    }
    if cc().is_none() {
        preload_support::skip_without_cc();
        return None;
    }
    Some(tempfile::tempdir().unwrap())
}

#[test]
fn an_exec_is_reported_as_one_not_as_a_loss() {
    if !perf_allowed("an_exec_is_reported_as_one_not_as_a_loss") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The shell runs `sleep` in a child, then execs a shell, which execs `sleep`. Providers
    // are named after the executable (`/bin/sh` may be a link to dash or bash).
    let (out, bytes) = record_preload(
        dir.path(),
        &[],
        &[
            "/bin/sh",
            "-c",
            "/bin/sleep 0.1; exec /bin/sh -c 'exec /bin/sleep 0.1'",
        ],
        &[],
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("lost:") && !err.contains("LOST"), "{err}");
    assert!(!err.contains("without stopping its provider"), "{err}");
    assert!(!err.contains("crashed or was killed"), "{err}");
    let shell = err
        .lines()
        .find_map(|l| l.strip_prefix("fxtrace: provider 1 joined: pid "))
        .and_then(|l| l.split('"').nth(1))
        .unwrap_or_else(|| panic!("the shell's provider in {err}"));
    let into_shell = format!("exec'd into \"{shell}\"");
    assert_eq!(
        err.matches(&into_shell).count(),
        2,
        "live line and summary: {err}"
    );
    assert_eq!(err.matches("exec'd into \"sleep\"").count(), 2, "{err}");
    let lost = lost_column(&err);
    // One line per process: the shell that exec'd a shell that exec'd sleep, and its child.
    assert_eq!(lost.len(), 2, "sh → sleep, and sleep: {err}");
    assert!(lost.iter().all(|l| l == "no"), "{err}");
    assert!(err.contains(&format!("  {shell} → sleep ")), "{err}");
    // Every image's data is in the archive.
    let summary = Summary::of(&decode(&bytes));
    for name in [shell, "sleep"] {
        assert!(
            summary.provider(name).is_some(),
            "{name} in the archive: {err}"
        );
    }
}

#[test]
fn a_failed_exec_keeps_tracing_and_an_unhooked_exec_is_still_an_exec() {
    let Some(dir) =
        c_program_dir("a_failed_exec_keeps_tracing_and_an_unhooked_exec_is_still_an_exec")
    else {
        return;
    };
    let exe = compile_c(
        dir.path(),
        "execs",
        r#"
#include <unistd.h>
#include "fxtrace.h"
int main(void) {
    char *argv[] = {"/nonexistent/prog", 0};
    execv("/nonexistent/prog", argv);          /* fails: no flush, still traced */
    fxtrace_instant_static("t", "after-failed-exec");
    execl("/bin/sleep", "sleep", "0.2", (char *)0);  /* variadic: not hooked */
    return 1;
}
"#,
        true,
    );
    let (out, bytes) = record_preload(dir.path(), &[], &[exe.to_str().unwrap()], &[]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let summary = Summary::of(&decode(&bytes));
    let execs = summary.provider("execs").expect("the program's provider");
    assert!(
        summary.event_names(execs).contains(&"after-failed-exec"),
        "tracing went on after the failed exec: {err}"
    );
    assert!(
        err.contains(
            "exec'd into \"sleep\" (provider 2) without flushing; its buffer was salvaged"
        ),
        "{err}"
    );
    assert!(lost_column(&err).iter().all(|l| l == "no"), "{err}");
}

#[test]
fn an_unhooked_exec_while_a_forked_child_holds_the_old_connection_is_still_an_exec() {
    let Some(dir) = c_program_dir(
        "an_unhooked_exec_while_a_forked_child_holds_the_old_connection_is_still_an_exec",
    ) else {
        return;
    };
    // The child keeps the old image's connection open after the parent's exec (`execl` is
    // not hooked: nothing flushes it first): the old provider is still connected when the
    // new image registers, and is an exec's all the same (the process's image changed).
    let exe = compile_c(
        dir.path(),
        "forks_then_execs",
        r#"
#include <unistd.h>
int main(void) {
    if (fork() == 0) { sleep(1); _exit(0); }
    usleep(200000);
    execl("/bin/true", "true", (char *)0);
    return 1;
}
"#,
        false,
    );
    let (out, _) = record_preload(dir.path(), &[], &[exe.to_str().unwrap()], &[]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("exec'd into \"true\" (provider 2)"), "{err}");
    assert!(!err.contains("second provider"), "{err}");
    assert!(lost_column(&err).iter().all(|l| l == "no"), "{err}");
}

#[test]
fn a_program_that_execs_itself_without_address_randomisation_is_an_exec() {
    let Some(dir) =
        c_program_dir("a_program_that_execs_itself_without_address_randomisation_is_an_exec")
    else {
        return;
    };
    let setarch = std::path::Path::new("/usr/bin/setarch");
    if !setarch.exists() {
        fxtrace::test_support::skip(
            fxtrace::test_support::Requirement::Tools,
            "no /usr/bin/setarch (util-linux) to turn address randomisation off",
        );
        return;
    }
    // Both images read the same (randomisation off, the same program, arguments of the same
    // length): the exec is told by the old image's connection, closed at the exec (`execl`
    // is not hooked: unflushed, salvaged).
    let exe = compile_c(
        dir.path(),
        "reexec",
        r#"
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "a") == 0) {
        usleep(100000);
        execl(argv[0], argv[0], "b", (char *)0);
        return 1;
    }
    return 0;
}
"#,
        false,
    );
    let exe = exe.to_str().unwrap();
    let (out, _) = record_preload(dir.path(), &[], &["/usr/bin/setarch", "-R", exe, "a"], &[]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("exec'd into \"reexec\" (provider 3) without flushing"),
        "{err}"
    );
    assert!(lost_column(&err).iter().all(|l| l == "no"), "{err}");
}

#[test]
fn lbr_unavailability_is_said_once_on_the_terminal() {
    if !perf_allowed("lbr_unavailability_is_said_once_on_the_terminal") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cmd = ["/bin/sh", "-c", "/bin/sleep 0.1; /bin/sleep 0.1"];
    let (out, _) = record_preload(dir.path(), &[], &cmd, &[]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The shell ends with `_exit` (no atexit handlers): flushed all the same.
    assert!(!err.contains("LOST") && !err.contains("lost:"), "{err}");
    let said = err
        .matches("LBR unavailable for the preloaded programs: ")
        .count();
    match fxtrace::capture::probe::lbr_unavailable(std::process::id()) {
        // Three preloaded programs, one line.
        Some(why) => {
            assert_eq!(said, 1, "{err}");
            // The same reason (the pid in it aside).
            let tail = why.rsplit("; ").next().unwrap();
            assert!(err.contains(tail), "{tail:?} in {err}");
        }
        None => assert_eq!(said, 0, "this machine samples LBR: {err}"),
    }
    // Told not to sample it: nothing to say.
    let (out, _) = record_preload(dir.path(), &[], &cmd, &[("FXTRACE_PRELOAD_LBR", "0")]);
    assert!(
        !text(&out.stderr).contains("LBR unavailable"),
        "{}",
        text(&out.stderr)
    );
}

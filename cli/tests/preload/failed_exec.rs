//! An `exec` that fails after the preload object flushed: the capture it stopped leaves no
//! perf event behind.

use crate::preload_support::{self, cc, compile_c, perf_allowed, record_preload};

/// A program whose `exec` fails after the hook flushed (an executable file the kernel cannot
/// run: a script without `#!`, `ENOEXEC`) counts its perf event descriptors before and after.
const FAILED_EXEC: &str = r#"
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static int perf_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        char p[300], l[64];
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(p, l, sizeof l - 1);
        if (k > 0) { l[k] = 0; if (strstr(l, "perf_event")) n++; }
    }
    closedir(d);
    return n;
}
int main(int argc, char **argv) {
    printf("before %d\n", perf_fds());
    char *args[] = { argv[1], NULL };
    execv(argv[1], args);
    usleep(100000);
    printf("after %d\n", perf_fds());
    return 0;
}
"#;

/// The exec hook's flush stops the capture "at exit" (events left enabled, descriptors and
/// rings left to the kernel's teardown), but an `exec` can fail after the flush: the process
/// then runs on untraced with every perf event still enabled (each of its switches still
/// written into rings nobody reads, and inherited by every child it starts) and their
/// descriptors leaked.
#[test]
fn a_failed_exec_after_the_flush_leaves_no_perf_event_behind() {
    if cc().is_none() {
        preload_support::skip_without_cc();
        return;
    }
    if !perf_allowed("failed exec") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(dir.path(), "failexec", FAILED_EXEC, false);
    let script = dir.path().join("no-shebang");
    std::fs::write(&script, "true\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (out, _) = record_preload(
        dir.path(),
        &[],
        &[exe.to_str().unwrap(), script.to_str().unwrap()],
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let count = |what: &str| -> usize {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(what))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {what:?} line: {stdout}"))
    };
    assert!(count("before ") > 0, "the capture runs: {stdout}");
    assert_eq!(
        count("after "),
        0,
        "perf events left open (and enabled) after a failed exec"
    );
}

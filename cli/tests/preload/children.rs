//! Each switch once under `--preload`: a preloaded child of a preloaded parent records its own
//! switches, and the parent's capture lets go of it at its `exec`.

use crate::preload_support::{self, cc, compile_c, decode, perf_allowed, record_preload, Summary};

/// A program that blocks 60 times after its exec: 60 switch-outs or more of its main thread.
const SLEEPER: &str = r#"
#include <stdio.h>
#include <unistd.h>
int main(void) {
    printf("sleeper %d\n", getpid());
    fflush(stdout);
    for (int i = 0; i < 60; i++) usleep(1000);
    return 0;
}
"#;

/// Each switch once: a preloaded shell's per-thread events are inherited by the child it
/// forks; they stayed on it across its `exec` (before `remove_on_exec`), so once the child's
/// image was preloaded too (its own provider, its own capture), each of its switches was in
/// both providers. The shell's provider may hold the child's few switches between fork and
/// exec, never its life after the exec.
#[test]
fn a_preloaded_child_of_a_preloaded_shell_is_recorded_once() {
    if cc().is_none() {
        preload_support::skip_without_cc();
        return;
    }
    if !perf_allowed("each switch once") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_c(dir.path(), "sleeper", SLEEPER, false);
    // `; true`: the shell forks for the sleeper instead of exec'ing into it.
    let script = format!("{}; true", exe.display());
    let (out, bytes) = record_preload(dir.path(), &[], &["sh", "-c", &script], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pid: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sleeper "))
        .and_then(|p| p.trim().parse().ok())
        .expect("the sleeper says its pid");
    let s = Summary::of(&decode(&bytes));
    let sleeper = s.provider("sleeper").expect("the sleeper is a provider");
    let shell = s
        .providers
        .iter()
        .find(|(_, n)| n.as_str() != "sleeper")
        .map(|(id, _)| *id)
        .expect("the shell is a provider");
    // The sleeper's main thread is its pid.
    let of = |provider: u32| {
        s.switches
            .iter()
            .filter(|sw| sw.0 == provider && (sw.1 == pid || sw.2 == pid))
            .count()
    };
    let (own, shells) = (of(sleeper), of(shell));
    assert!(
        own >= 60,
        "the sleeper's own provider has its switches: {own}"
    );
    assert!(
        shells < 20,
        "the shell's provider ({shell}) records the sleeper's switches after its exec too: \
         {shells} of them, beside the {own} of the sleeper's own provider ({sleeper})"
    );
}

//! "Finding out why it was slow" (README), a `#[traced]` program: `examples/preempted.rs`
//! runs its batches on CPU 0 while a process named `backup` takes that CPU; recorded with
//! `-a`, `fxtrace report spans --top 3` must name `backup` beside the slow batches. Needs
//! root ("skipped: needs root" otherwise).

use crate::support;

use std::process::Command;

use fxtrace::capture::PerfPermissions;

#[test]
fn report_spans_names_the_process_that_took_the_slow_spans_cpu() {
    let perms = PerfPermissions::read();
    if !(perms.root || perms.perfmon) {
        println!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("batches.fxt");
    let out = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .args(["record", "-a", "--no-lbr", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(support::example("preempted"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let backup: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("backup_pid="))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no backup_pid in {stdout}"));

    let report = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .args(["report", "spans", "--top", "3"])
        .arg(&trace)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{text}");
    assert!(text.contains("preempted::batch"), "{text}");
    let slowest = text
        .split("slowest")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    // Each slow batch spent most of its time runnable, and `backup` ran instead.
    let named = slowest
        .lines()
        .filter(|l| l.contains("ran instead on its CPU:"))
        .filter(|l| l.contains(&format!("backup (pid {backup}/tid {backup})")))
        .count();
    assert!(named >= 1, "backup (pid {backup}) not named:\n{text}");
    assert!(slowest.contains("runnable"), "{text}");
}

//! "Finding out why it was slow" (README), an unmodified C server: the requests of
//! `examples/c/slow_requests.c` are slow while its `compactor` thread holds their lock;
//! recorded with `--preload -a --wait-points`, `fxtrace report sched` must name the compactor
//! in the stall list, beside the workers asleep and where they slept (the futex of the lock).
//! Needs root and a C compiler (a line says which is missing otherwise).

use crate::preload_support;

use fxtrace::capture::PerfPermissions;
use preload_support::{cc, compile_c, fxtrace_bin, record_preload};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn report_sched_names_the_thread_that_held_the_lock() {
    let perms = PerfPermissions::read();
    if !(perms.root || perms.perfmon) {
        println!("skipped: needs root");
        return;
    }
    if cc().is_none() {
        println!("skipped: no C compiler");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = include_str!("../../../examples/c/slow_requests.c");
    let exe = compile_c(dir.path(), "slow_requests", source, false);
    let (out, bytes) = record_preload(
        dir.path(),
        &["-a", "--no-lbr", "--wait-points"],
        &[exe.to_str().unwrap(), "1"],
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(!bytes.is_empty());
    let compactor: u32 = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("compactor_tid="))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no compactor_tid in {stdout}"));

    let trace = dir.path().join("trace.fxt");
    let report = std::process::Command::new(fxtrace_bin())
        .args(["report", "sched", "--comm", "slow_requests", "--top", "3"])
        .arg(&trace)
        .output()
        .unwrap();
    let report_text = text(&report.stdout);
    assert!(report.status.success(), "{report_text}");
    let stalls = report_text
        .split("stalls (threads of one process asleep at once):")
        .nth(1)
        .unwrap_or_else(|| panic!("no stall found:\n{report_text}"));
    // The first stall: the workers asleep, the compactor running meanwhile.
    let first = stalls.split("\n 2. ").next().unwrap();
    assert!(
        first.contains("running meanwhile: compactor (slow_requests, pid "),
        "{report_text}"
    );
    assert!(
        first.contains(&format!("tid {compactor})")),
        "{report_text}"
    );
    assert!(
        first.matches("waiting: worker-").count() >= 2,
        "{report_text}"
    );
    // Each waiting worker's wait point: asleep in the kernel's futex wait, under the lock.
    let waiting: Vec<&str> = first
        .lines()
        .filter(|l| l.contains("waiting: worker-"))
        .collect();
    assert!(
        waiting
            .iter()
            .all(|l| l.contains(" at ") && l.contains("futex")),
        "{report_text}"
    );
}

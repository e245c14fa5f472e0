//! Kernel symbols under `--preload --wait-points`: the recorder reads `/proc/kallsyms` once
//! and its preloaded processes map that table.
//!
//! - A traced program that cannot read `/proc/kallsyms` at all (an empty file bind-mounted
//!   over it in a mount namespace of its own) still names the kernel frames of its own wait
//!   points in its own part of the archive (the readers would borrow another provider's names
//!   otherwise): it did not read the file.
//! - A program whose shell closed its descriptors still names them (the table is the
//!   recorder's, opened through `/proc/PID/fd/N`); one given a reference to no table reads
//!   the file, which the trace notes.
//!
//! Needs root (the mount namespace, and the tracepoint's raw data) and util-linux's
//! `unshare` and `mount`.

use std::path::Path;
use std::process::Command;

use fxtrace::capture::PerfPermissions;
use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::stack::{KernelSymbolRecord, KSYM_BLOB_NAME};
use fxtrace_format::{DecodedRecord, Decoder};

use crate::preload_support::{fxtrace_bin, record_preload};
use crate::support;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Root, and the tools of the mount namespace; else skipped (false).
fn can_run() -> bool {
    if !PerfPermissions::read().root {
        skip(
            Requirement::Root,
            "a mount namespace and raw tracepoint data need root",
        );
        return false;
    }
    let tools = ["unshare", "mount"].into_iter().all(|t| {
        Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !tools {
        skip(
            Requirement::Tools,
            "util-linux's unshare and mount are needed",
        );
    }
    tools
}

/// A recording of `contention lock 3 3` run by `bash -c "PREFIX contention lock 3 3"` (bash:
/// dash redirects descriptors 0 to 9 only) under `--preload --wait-points`, the preload
/// object logging.
struct Recorded {
    stdout: String,
    stderr: String,
    archive: Vec<u8>,
}

fn record_contention(dir: &Path, prefix: &str, wrapper: &[&str]) -> Recorded {
    let contention = support::example("contention");
    let script = format!("{prefix} {} lock 3 3", contention.display());
    let mut cmd = wrapper.to_vec();
    cmd.extend(["bash", "-c", &script]);
    let (out, archive) = record_preload(
        dir,
        &["--wait-points"],
        &cmd,
        &[("FXTRACE_PRELOAD_LOG", "1")],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(!archive.is_empty());
    Recorded {
        stdout,
        stderr,
        archive,
    }
}

impl Recorded {
    /// The kernel symbols the `contention` provider announced itself.
    fn own_kernel_names(&self) -> Vec<String> {
        let provider = self
            .stderr
            .lines()
            .find(|l| l.ends_with("\"contention\"") && l.contains(" joined: pid "))
            .and_then(|l| l.split_whitespace().nth(2)?.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("the contention provider joined: {}", self.stderr));
        Decoder::new(&self.archive)
            .map(|d| d.expect("the archive decodes"))
            .filter(|d| d.provider == Some(provider))
            .filter_map(|d| match d.record {
                DecodedRecord::Blob { name, payload, .. } if name == KSYM_BLOB_NAME => {
                    Some(KernelSymbolRecord::decode(&payload).unwrap().name_lossy())
                }
                _ => None,
            })
            .collect()
    }

    /// The program's own symbols name its futex waits, and `fxtrace report waits` shows
    /// each waiter's, woken by the holder.
    fn assert_futex_waits_named(&self, dir: &Path) {
        let own = self.own_kernel_names();
        assert!(
            own.iter().any(|n| n.contains("futex_wait")),
            "contention names its own kernel frames: {own:?}"
        );
        let holder = tids(&self.stdout, "holder_tid")[0];
        for waiter in tids(&self.stdout, "waiter_tids") {
            let report = Command::new(fxtrace_bin())
                .args(["report", "waits", "--thread", &waiter.to_string()])
                .arg(dir.join("trace.fxt"))
                .output()
                .unwrap();
            let report = text(&report.stdout);
            let at = report
                .lines()
                .position(|l| l.contains("futex_wait"))
                .unwrap_or_else(|| panic!("waiter {waiter}'s futex wait named: {report}"));
            let woken = report.lines().nth(at + 1).unwrap_or_default();
            assert!(
                woken.contains(&format!("({holder})")),
                "woken by the holder {holder}: {report}"
            );
        }
    }

    fn archive_holds(&self, words: &str) -> bool {
        self.archive
            .windows(words.len())
            .any(|w| w == words.as_bytes())
    }
}

/// The thread ids `contention` prints after `key=` (`key=1,2,3`).
fn tids(stdout: &str, key: &str) -> Vec<u64> {
    let prefix = format!("{key}=");
    let list = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {key} in {stdout}"));
    list.split(',').map(|t| t.parse().unwrap()).collect()
}

#[test]
fn preloaded_processes_name_kernel_frames_without_reading_kallsyms() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let prefix = format!(
        "mount --bind {} /proc/kallsyms && echo kallsyms_bytes=$(head -c 1 /proc/kallsyms | wc -c) \
         && exec",
        empty.display(),
    );
    let wrapper = ["unshare", "-m", "--propagation", "private"];
    let r = record_contention(dir.path(), &prefix, &wrapper);
    assert!(
        r.stdout.contains("kallsyms_bytes=0"),
        "the program cannot read /proc/kallsyms: {}",
        r.stdout
    );
    r.assert_futex_waits_named(dir.path());
    assert!(!r.archive_holds("kernel frames stay addresses"));
    // Every preloaded process (unshare, bash, mount, head, wc, contention) mapped the table.
    let mapped = r
        .stderr
        .matches("kernel symbols: the session's table")
        .count();
    assert!(mapped >= 4, "{}", r.stderr);
    assert!(!r.stderr.contains("reading /proc/kallsyms"), "{}", r.stderr);
}

#[test]
fn a_reference_to_no_usable_table_is_harmless() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The shell closes every descriptor it was given beyond the standard ones: the table is
    // the recorder's own, opened through /proc, so nothing is lost.
    let closed =
        "for fd in $(ls /proc/$$/fd); do [ $fd -gt 2 ] && eval \"exec $fd>&-\"; done; exec";
    let r = record_contention(dir.path(), closed, &[]);
    r.assert_futex_waits_named(dir.path());
    assert!(!r.archive_holds("reading /proc/kallsyms"));
    // A reference naming no process: the program reads /proc/kallsyms itself, and says so.
    let bogus = "FXTRACE_PRELOAD_KERNEL_SYMBOLS=8388608:1:3:1:1 exec";
    let r = record_contention(dir.path(), bogus, &[]);
    r.assert_futex_waits_named(dir.path());
    assert!(
        r.archive_holds("is not the session's kernel symbol table")
            && r.archive_holds("no process 8388608")
            && r.archive_holds("reading /proc/kallsyms"),
        "the trace notes the fallback"
    );
}

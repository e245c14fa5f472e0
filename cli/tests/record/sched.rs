//! Scheduling as perf sees it, through `fxtrace record --system-wide` on the kernel (root
//! only: "skipped: needs root" otherwise), with `examples/contention`:
//!
//! - a CPU-contended program: its threads preempted are runnable (`R` in Perfetto), asleep
//!   blocked (`S`), its wake-ups present with their wakers; `fxtrace check` finds no error,
//!   and Perfetto's own importer (`trace_processor_shell`, from `FXTRACE_TRACE_PROCESSOR` or
//!   the `PATH`; that part says so and is left out when it is not there) shows the same with
//!   no error statistic;
//! - a lock held while others wait: each waiter is woken by the holder, and its wait point
//!   (`--wait-points`) names the futex path, in the trace and in `fxtrace report waits`;
//!   under `--preload` alone too (the program's own `sched_switch` call chains);
//! - `--sample` on a machine without a PMU: the hottest stack of a spinning thread is its busy
//!   loop (`fxtrace report samples`);
//! - `--preload` with `--system-wide`: every switch once (the kernel provider's).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fxtrace::capture::PerfPermissions;
use fxtrace_format::sched::{Side, SwitchView, WakeupView};
use fxtrace_format::stack::{KernelSymbolRecord, StackRecord, KSYM_BLOB_NAME, STACK_BLOB_NAME};
use fxtrace_format::{Decoded, DecodedRecord, Decoder, ThreadState};
use fxtrace_tools::check::perfetto::{check_for_perfetto, Severity};

use crate::support;

fn fxtrace() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fxtrace"))
}

fn root() -> bool {
    let perms = PerfPermissions::read();
    if perms.root || perms.perfmon {
        return true;
    }
    println!("skipped: needs root");
    false
}

/// `fxtrace record -a --no-lbr EXTRA -o TRACE -- sh -c SCRIPT`: its output, checked for
/// success.
fn record(trace: &Path, extra: &[&str], script: &str) -> Output {
    let out = fxtrace()
        .args(["record", "--system-wide", "--no-lbr"])
        .args(extra)
        .arg("-o")
        .arg(trace)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn decode(bytes: &[u8]) -> Vec<Decoded<'_>> {
    Decoder::new(bytes)
        .collect::<Result<Vec<_>, _>>()
        .expect("the trace decodes")
}

/// The tids of `key=a,b,c` in the program's output.
fn tids(stdout: &str, key: &str) -> Vec<u64> {
    stdout
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{key} in {stdout:?}"))
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect()
}

/// Perfetto's trace processor, if this machine has one.
fn trace_processor() -> Option<PathBuf> {
    let found = std::env::var_os("FXTRACE_TRACE_PROCESSOR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|p| p.join("trace_processor_shell"))
                    .find(|p| p.exists())
            })
        });
    if found.is_none() {
        println!(
            "Perfetto's importer left out: no trace_processor_shell (set FXTRACE_TRACE_PROCESSOR)"
        );
    }
    found
}

/// The rows of a trace processor query, as CSV lines without the header.
fn query(tp: &Path, trace: &Path, sql: &str) -> Vec<String> {
    let out = Command::new(tp)
        .arg("-Q")
        .arg(sql)
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(|l| l.replace('"', ""))
        .collect()
}

#[test]
fn a_cpu_contended_program_shows_runnable_sleeping_and_its_wakers() {
    if !root() {
        return;
    }
    let contention = support::example("contention");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("contended.fxt");
    // Three spinners on two CPUs preempt each other; the lock waiters sleep.
    let script = format!("{0} spin 3 300 & {0} lock 3 2; wait", contention.display());
    let out = record(&trace, &[], &script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let spinners = tids(&stdout, "spin_tids");
    let holder = tids(&stdout, "holder_tid")[0];
    let waiters = tids(&stdout, "waiter_tids");

    let bytes = std::fs::read(&trace).unwrap();
    let records = decode(&bytes);
    let mut states: BTreeMap<u64, BTreeSet<u8>> = BTreeMap::new();
    for s in records.iter().filter_map(|d| SwitchView::of(&d.record)) {
        if let Side::Thread { tid, .. } = s.outgoing {
            states.entry(tid).or_default().insert(s.outgoing_state);
        }
    }
    let running = ThreadState::Running as u8;
    let blocked = ThreadState::Blocked as u8;
    assert!(
        spinners
            .iter()
            .any(|t| states.get(t).is_some_and(|s| s.contains(&running))),
        "a preempted spinner is runnable: {states:?}"
    );
    for t in spinners.iter().chain(&waiters) {
        assert!(
            !states
                .get(t)
                .is_some_and(|s| s.contains(&(ThreadState::Suspended as u8))),
            "nothing is stopped: {states:?}"
        );
    }
    for w in &waiters {
        assert!(
            states[w].contains(&blocked),
            "waiter {w} sleeps: {states:?}"
        );
    }
    let wakers: BTreeMap<u64, BTreeSet<Option<u64>>> = records
        .iter()
        .filter_map(|d| WakeupView::of(&d.record))
        .fold(BTreeMap::new(), |mut m, w| {
            m.entry(w.tid).or_default().insert(w.waker);
            m
        });
    for w in &waiters {
        assert!(
            wakers.get(w).is_some_and(|s| s.contains(&Some(holder))),
            "waiter {w} woken by the holder {holder}: {:?}",
            wakers.get(w)
        );
    }
    // A new thread's first wake-up (sched_wakeup_new) is its creator's, before it first
    // runs: the holder made the waiters.
    for w in &waiters {
        let first_wake = records
            .iter()
            .filter_map(|d| WakeupView::of(&d.record))
            .filter(|x| x.tid == *w)
            .min_by_key(|x| x.time.ticks);
        let first_run = records
            .iter()
            .filter_map(|d| SwitchView::of(&d.record))
            .filter(|s| s.incoming.tid() == Some(*w))
            .map(|s| s.time.ticks)
            .min();
        assert!(
            first_wake.is_some_and(
                |x| x.waker == Some(holder) && first_run.is_some_and(|run| x.time.ticks <= run)
            ),
            "waiter {w}: first woken {first_wake:?} by the holder {holder}, before its first \
             run at {first_run:?}"
        );
    }
    let report = check_for_perfetto(&bytes[..]).unwrap();
    assert_eq!(report.count(Severity::Error), 0, "{report}");

    let Some(tp) = trace_processor() else {
        return;
    };
    let errors = query(
        &tp,
        &trace,
        "select name, value from stats where value > 0 and severity in ('error', 'data_loss')",
    );
    assert!(errors.is_empty(), "Perfetto's error statistics: {errors:?}");
    let list = |t: &[u64]| t.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let spin_states = query(
        &tp,
        &trace,
        &format!(
            "select distinct state from thread_state join thread using (utid) where tid in ({})",
            list(&spinners)
        ),
    );
    assert!(spin_states.iter().any(|s| s == "R"), "{spin_states:?}");
    assert!(!spin_states.iter().any(|s| s == "T"), "{spin_states:?}");
    let woken = query(
        &tp,
        &trace,
        &format!(
            "select distinct t.tid, w.tid from thread_state s join thread t using (utid) \
             join thread w on w.utid = s.waker_utid where t.tid in ({})",
            list(&waiters)
        ),
    );
    for w in &waiters {
        assert!(
            woken.contains(&format!("{w},{holder}")),
            "Perfetto: waiter {w} woken by {holder}: {woken:?}"
        );
    }
    let sleeps = query(
        &tp,
        &trace,
        &format!(
            "select count(*) from thread_state join thread using (utid) where state = 'S' and \
             tid in ({})",
            list(&waiters)
        ),
    );
    assert_ne!(sleeps, ["0"], "waiters sleep (S) in Perfetto");
}

#[test]
fn a_lock_waiters_wait_point_names_the_futex_path_and_its_waker() {
    if !root() {
        return;
    }
    let contention = support::example("contention");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("lock.fxt");
    let out = record(
        &trace,
        &["--wait-points"],
        &format!("{} lock 3 3", contention.display()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let holder = tids(&stdout, "holder_tid")[0];
    let waiters = tids(&stdout, "waiter_tids");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("wait points: "), "{stderr}");

    let bytes = std::fs::read(&trace).unwrap();
    let records = decode(&bytes);
    let mut symbols: Vec<(u64, u64, String)> = Vec::new();
    let mut stacks: BTreeMap<u32, StackRecord> = BTreeMap::new();
    for d in &records {
        if let DecodedRecord::Blob { name, payload, .. } = &d.record {
            if *name == KSYM_BLOB_NAME {
                let k = KernelSymbolRecord::decode(payload).unwrap();
                symbols.push((k.start, k.len, k.name_lossy()));
            } else if *name == STACK_BLOB_NAME {
                let s = StackRecord::decode(payload).unwrap();
                stacks.insert(s.id, s);
            }
        }
    }
    let name_of = |ip: u64| {
        symbols
            .iter()
            .find(|(start, len, _)| ip >= *start && ip - start < *len)
            .map(|s| s.2.clone())
    };
    for w in &waiters {
        let futex = records
            .iter()
            .filter_map(|d| SwitchView::of(&d.record))
            .filter(|s| s.outgoing.tid() == Some(*w))
            .filter_map(|s| stacks.get(&s.stack?))
            .any(|stack| {
                stack
                    .kernel()
                    .iter()
                    .filter_map(|&ip| name_of(ip))
                    .any(|n| n == "futex_wait" || n.contains("futex_wait"))
            });
        assert!(futex, "waiter {w} has a wait point in futex_wait");
    }
    assert_futex_waits_reported(&trace, &waiters, holder);
}

/// `fxtrace report waits` on `trace`: each waiter's futex wait, woken by the holder.
fn assert_futex_waits_reported(trace: &Path, waiters: &[u64], holder: u64) {
    for w in waiters {
        let out = fxtrace()
            .args(["report", "waits", "--thread", &w.to_string()])
            .arg(trace)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        // Each row: counts and thread, the wait point, then `woken by …`.
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("futex_wait"))
            .unwrap_or_else(|| panic!("a futex wait of {w} in {text}"));
        let woken = lines.get(at + 1).copied().unwrap_or_default();
        assert!(
            woken.contains("woken by") && woken.contains(&format!("({holder})")),
            "woken by the holder {holder}: {text}"
        );
        // glibc's own frame, named by its detached debug file when the machine has one
        // (Debian's libc6-dbg).
        if Path::new("/usr/lib/debug/.build-id").is_dir() {
            if lines[at].contains("__lll_lock_wait") {
                assert!(lines[at].contains("futex_wait ← "), "{}", lines[at]);
            } else {
                println!(
                    "glibc's __lll_lock_wait not named (no libc debug file?): {}",
                    lines[at]
                );
            }
        }
    }
}

/// `--wait-points` under `--preload` alone: the traced program's own `sched_switch` call
/// chains (beside its switch records) name each lock waiter's futex wait, and its waker.
#[test]
fn preload_wait_points_name_the_futex_path() {
    if !root() {
        return;
    }
    let contention = support::example("contention");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("preload-lock.fxt");
    let out = fxtrace()
        .args(["record", "--preload", "--wait-points", "-o"])
        .arg(&trace)
        .arg("--")
        .args([
            contention.as_os_str(),
            "lock".as_ref(),
            "3".as_ref(),
            "3".as_ref(),
        ])
        .env_remove("FXTRACE_PRELOAD_CAPTURE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let holder = tids(&stdout, "holder_tid")[0];
    let waiters = tids(&stdout, "waiter_tids");
    assert_futex_waits_reported(&trace, &waiters, holder);
}

#[test]
fn cpu_samples_without_a_pmu_find_the_busy_loop() {
    if !root() {
        return;
    }
    let contention = support::example("contention");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("samples.fxt");
    let out = record(
        &trace,
        &["--sample=999"],
        &format!("{} spin 2 400", contention.display()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let spinner = tids(&stdout, "spin_tids")[0];
    let report = fxtrace()
        .args([
            "report",
            "samples",
            "--top",
            "1",
            "--thread",
            &spinner.to_string(),
        ])
        .arg(&trace)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{text}");
    let hottest = text
        .split("hottest stacks")
        .nth(1)
        .unwrap_or_else(|| panic!("a stack table in {text}"));
    let innermost = hottest.lines().nth(2).unwrap_or_default().trim();
    assert!(
        innermost.starts_with("contention::busy_loop"),
        "the hottest stack of spinner {spinner} is its busy loop: {text}"
    );
    let folded = fxtrace()
        .args([
            "report",
            "samples",
            "--folded",
            "--thread",
            &spinner.to_string(),
        ])
        .arg(&trace)
        .output()
        .unwrap();
    let folded = String::from_utf8_lossy(&folded.stdout);
    assert!(
        folded
            .lines()
            .any(|l| l.starts_with("spin-") && l.contains(";contention::busy_loop ")),
        "{folded}"
    );
}

#[test]
fn preload_with_system_wide_records_each_switch_once() {
    if !root() {
        return;
    }
    let pingpong = support::example("pingpong");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("once.fxt");
    let out = fxtrace()
        .args(["record", "--system-wide", "--no-lbr", "--preload", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&pingpong)
        .arg("2000")
        .env_remove("FXTRACE_PRELOAD_CAPTURE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let kernel_count: u64 = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("context switches: "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("the kernel's count in {stderr}"));
    let bytes = std::fs::read(&trace).unwrap();
    let records = decode(&bytes);
    let mut by_provider: BTreeMap<Option<u32>, u64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut duplicates = 0;
    for d in &records {
        if let Some(s) = SwitchView::of(&d.record) {
            *by_provider.entry(d.provider).or_default() += 1;
            if !seen.insert((s.time.ticks, s.cpu)) {
                duplicates += 1;
            }
        }
    }
    assert_eq!(
        by_provider.len(),
        1,
        "one provider's switches: {by_provider:?}"
    );
    assert_eq!(
        by_provider.values().sum::<u64>(),
        kernel_count,
        "{by_provider:?}"
    );
    assert_eq!(duplicates, 0);
    // The preloaded program is traced all the same (its provider is in the archive).
    assert!(
        records.iter().any(|d| matches!(
            &d.record,
            DecodedRecord::ProviderInfo { name, .. } if name.contains("pingpong")
        )),
        "{stderr}"
    );
}

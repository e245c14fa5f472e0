//! `fxtrace record` through the binary: the system-wide recording of `examples/pingpong`
//! decodes, with the workload's context switches (tids, blocked states, names) in time order and
//! the LBR outcome in the trace and the summary; `--duration`, Ctrl-C and a long command stop
//! cleanly; without root the error carries the remedy; without `--system-wide` only providers
//! are recorded. Tests that need root skip otherwise (`fxtrace::test_support::skip`). (The
//! system-wide section next to provider sections is tested in `system_wide.rs`.)

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fxtrace::capture::PerfPermissions;
use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::{Decoded, DecodedRecord, DecodedValue, Decoder, ObjectType};

fn fxtrace() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fxtrace"))
}

fn needs_root() -> bool {
    let perms = PerfPermissions::read();
    if perms.root || perms.perfmon {
        return true;
    }
    skip(Requirement::Perf, "needs root or CAP_PERFMON");
    false
}

/// `examples/pingpong`, built by `cargo test` next to the test binaries.
fn pingpong() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples/pingpong");
    if path.exists() {
        Some(path)
    } else {
        skip(
            Requirement::Examples,
            format!(
                "{} is not built (`cargo test` builds examples; or `cargo build --example \
                 pingpong`)",
                path.display()
            ),
        );
        None
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn decode(bytes: &[u8]) -> Vec<Decoded<'_>> {
    Decoder::new(bytes)
        .collect::<Result<Vec<_>, _>>()
        .expect("the trace decodes")
}

/// `key=value` from the pingpong line.
fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{key} in {line:?}"))
        .parse()
        .unwrap()
}

fn assert_header(records: &[Decoded<'_>]) {
    assert_eq!(records[0].record, DecodedRecord::Magic);
    // The archive's wall-clock anchor, then the kernel section.
    assert!(
        fxtrace_tools::read::wall::WallClock::of(&records[1].record).is_some(),
        "{:?}",
        records[1]
    );
    assert!(matches!(
        &records[2].record,
        DecodedRecord::ProviderInfo { provider_id: 1, name } if name == "kernel"
    ));
    assert!(matches!(
        records[3].record,
        DecodedRecord::Initialization { ticks_per_second } if ticks_per_second > 1_000_000
    ));
}

fn assert_time_order(records: &[Decoded<'_>]) {
    let times: Vec<u64> = records
        .iter()
        .filter_map(|d| d.record.time().map(|t| t.ticks))
        .collect();
    let late = times.windows(2).filter(|w| w[0] > w[1]).count();
    assert_eq!(late, 0, "records out of time order");
}

/// The summary's `lost: N records, M samples` line as (N, M).
fn summary_lost(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("lost: "))
        .unwrap_or_else(|| panic!("a lost line in {stderr}"));
    let mut numbers = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().unwrap());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

#[test]
fn without_system_wide_it_records_providers_only() {
    // `true` links no provider: the archive is the magic number alone, and the summary says so.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.fxt");
    let out = fxtrace()
        .args(["record", "-o"])
        .arg(&trace)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "no provider connected: the command does not link fxtrace; use --preload to \
             trace it unmodified, or --system-wide for its context switches"
        ),
        "{err}"
    );
    // No kernel provider: neither its banner nor its part of the summary.
    assert!(!err.contains("recording context switches"), "{err}");
    assert!(!err.contains("system-wide (kernel section)"), "{err}");
    let bytes = std::fs::read(&trace).unwrap();
    let records = decode(&bytes);
    // The magic and the wall-clock anchor: nothing else.
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].record, DecodedRecord::Magic);
    assert!(fxtrace_tools::read::wall::WallClock::of(&records[1].record).is_some());
}

#[test]
fn bad_arguments_are_refused_before_anything_starts() {
    let out = fxtrace()
        .args([
            "record",
            "--system-wide",
            "--mmap-pages",
            "100",
            "-o",
            "/nonexistent/x.fxt",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("power of two"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn system_wide_recording_of_pingpong() {
    if !needs_root() {
        return;
    }
    let Some(pingpong) = pingpong() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("pingpong.fxt");
    let rounds = 2_000;
    let out = fxtrace()
        .args(["record", "--system-wide", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&pingpong)
        .arg(rounds.to_string())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("rounds="))
        .unwrap_or_else(|| panic!("pingpong's line in {stdout}"));
    assert_eq!(field(line, "rounds"), rounds);
    let (pid, ping, pong) = (
        field(line, "pid"),
        field(line, "ping_tid"),
        field(line, "pong_tid"),
    );

    let bytes = std::fs::read(&trace).unwrap();
    // The output is named once (the provider table's last line), not again by the kernel part.
    let written = format!(
        "trace written to {} ({} bytes)",
        trace.display(),
        bytes.len()
    );
    assert_eq!(
        stderr.matches(&written).count(),
        1,
        "{written:?} in {stderr}"
    );
    assert!(!stderr.contains("fxtrace: wrote"), "{stderr}");
    for expected in [
        "system-wide (kernel section):".to_owned(),
        "context switches: ".to_owned(),
        "threads: ".to_owned(),
        "the command exited (command exit status: 0)".to_owned(),
    ] {
        assert!(stderr.contains(&expected), "{expected:?} in {stderr}");
    }
    let records = decode(&bytes);
    assert_header(&records);
    assert_time_order(&records);

    // The workload's switches: each thread leaves its CPU blocked in `read` or preempted. A
    // round trip blocks one of the two in `read` at least (the other, preempted by the thread
    // it woke, finds its byte there when it runs again); how the blocks split between them
    // varies (with wake-ups recorded, the waker is preempted more often: its path to `read`
    // is longer by the `sched_waking` sample), so each has at least a fifth of them, and
    // together (2000–2230 for 2000 round trips in the runs seen) at least half as many as
    // round trips.
    let mut total_ins = 0;
    let mut total_blocked = 0;
    for tid in [ping, pong] {
        let outs: Vec<u8> = records
            .iter()
            .filter_map(|d| match &d.record {
                DecodedRecord::ContextSwitch {
                    outgoing,
                    outgoing_state,
                    ..
                } if outgoing.tid == tid => {
                    assert_eq!(outgoing.pid, pid, "tid {tid} belongs to pingpong");
                    Some(*outgoing_state)
                }
                _ => None,
            })
            .collect();
        let ins = records
            .iter()
            .filter(|d| matches!(&d.record, DecodedRecord::ContextSwitch { incoming, .. } if incoming.tid == tid))
            .count();
        let blocked = outs.iter().filter(|&&s| s == 3).count();
        let preempted = outs.iter().filter(|&&s| s == 1).count();
        println!(
            "tid {tid}: {} outs ({blocked} blocked, {preempted} preempted), {ins} ins",
            outs.len()
        );
        assert!(
            outs.len() as u64 >= rounds / 2,
            "tid {tid}: {} switch-outs",
            outs.len()
        );
        assert!(
            blocked as u64 >= rounds / 5,
            "tid {tid}: pipe reads block ({blocked})"
        );
        total_blocked += blocked as u64;
        assert_eq!(
            blocked + preempted + outs.iter().filter(|&&s| s == 5 || s == 4).count(),
            outs.len(),
            "tid {tid}: blocked, preempted, or exiting at the end"
        );
        // Switch-ins are not all seen on this KVM guest (no sched_switch for some exits
        // from idle; see tests/capture_kernel.rs): only their presence is required.
        total_ins += ins;
    }
    assert!(total_ins > 0, "the workload threads are seen switching in");
    assert!(
        total_blocked >= rounds / 2,
        "reads block in most round trips: {total_blocked} of {rounds}"
    );

    // Names: the threads (as the builder named them) with their process, and the process.
    let named = |object_type: ObjectType, koid: u64| -> Vec<(String, Option<u64>)> {
        records
            .iter()
            .filter_map(|d| match &d.record {
                DecodedRecord::KernelObject {
                    koid: k,
                    object_type: t,
                    name,
                    args,
                } if *k == koid && *t == object_type => Some((
                    name.to_string(),
                    args.iter().find_map(|a| match (&*a.name, &a.value) {
                        ("process", DecodedValue::Koid(p)) => Some(*p),
                        _ => None,
                    }),
                )),
                _ => None,
            })
            .collect()
    };
    assert!(named(ObjectType::THREAD, ping).contains(&("pingpong-ping".into(), Some(pid))));
    assert!(named(ObjectType::THREAD, pong).contains(&("pingpong-pong".into(), Some(pid))));
    let process = named(ObjectType::PROCESS, pid);
    assert_eq!(
        process.last().map(|(n, _)| n.as_str()),
        Some("pingpong"),
        "the process is named after exec: {process:?}"
    );

    // LBR: sampled where the CPU has it; otherwise said clearly, in the trace and the summary.
    let lbr_said = records.iter().any(|d| {
        matches!(&d.record, DecodedRecord::Event(e) if e.name.contains("LBR") && e.name.contains("unavailable"))
    });
    if PerfPermissions::read().hardware_pmu {
        assert!(stderr.contains("LBR: "), "{stderr}");
    } else {
        assert!(lbr_said, "no PMU: the trace says LBR was unavailable");
        assert!(stderr.contains("LBR: unavailable"), "{stderr}");
        assert!(stderr.contains("VM without a virtual PMU"), "{stderr}");
    }

    // Losses, if any (a loaded machine), are accounted for in the trace.
    let (lost_records, lost_samples) = summary_lost(&stderr);
    let in_trace: u64 = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Event(e) if e.category == "fxtrace" && e.name.contains(" lost") => {
                e.args.iter().find_map(|a| match (&*a.name, &a.value) {
                    ("count", DecodedValue::U64(n)) => Some(*n),
                    _ => None,
                })
            }
            _ => None,
        })
        .sum();
    assert_eq!(in_trace, lost_records + lost_samples);
    let overflow = records.iter().any(|d| {
        matches!(
            d.record,
            DecodedRecord::ProviderEvent {
                provider_id: 1,
                event: 0
            }
        )
    });
    assert_eq!(overflow, lost_records + lost_samples > 0);
}

#[test]
fn duration_stops_a_recording_without_command() {
    if !needs_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("d.fxt");
    let start = Instant::now();
    let out = fxtrace()
        .args(["record", "-a", "--no-lbr", "--duration", "0.3", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    let took = start.elapsed();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(stderr.contains("the duration elapsed"), "{stderr}");
    assert!(stderr.contains("LBR: off"), "{stderr}");
    let bytes = std::fs::read(&trace).unwrap();
    let records = decode(&bytes);
    assert_header(&records);
    assert_time_order(&records);
    assert!(
        !records.iter().any(
            |d| matches!(&d.record, DecodedRecord::Log { message, .. } if message.contains("LBR"))
        ),
        "--no-lbr: nothing to say about LBR"
    );
}

#[test]
fn duration_ends_a_longer_command() {
    if !needs_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("c.fxt");
    let start = Instant::now();
    let out = fxtrace()
        .args(["record", "-a", "--no-lbr", "--duration", "0.3", "-o"])
        .arg(&trace)
        .args(["--", "sleep", "30"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(stderr.contains("the duration elapsed"), "{stderr}");
    assert!(
        stderr.contains("signal: 15"),
        "the command got SIGTERM: {stderr}"
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "fxtrace ended the command itself: the recording succeeded"
    );
    decode(&std::fs::read(&trace).unwrap());
}

#[test]
fn ctrl_c_stops_cleanly_and_the_trace_is_written() {
    if !needs_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("i.fxt");
    let mut child = fxtrace()
        .args(["record", "-a", "--no-lbr", "-o"])
        .arg(&trace)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(first.contains("Ctrl-C to stop"), "{first}");
    std::thread::sleep(Duration::from_millis(200));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "fxtrace did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(status.success(), "{rest}");
    assert!(rest.contains("interrupted"), "{rest}");
    let bytes = std::fs::read(&trace).unwrap();
    let records = decode(&bytes);
    assert_header(&records);
    assert!(
        records
            .iter()
            .any(|d| matches!(d.record, DecodedRecord::ContextSwitch { .. })),
        "switches of the 200 ms before the interrupt"
    );
}

/// Runs `fxtrace record --system-wide -o DIR/nobody.fxt` as `nobody`, from a copy of the
/// binary in `dir` (the build's own may sit under a home directory nobody cannot enter).
fn run_as_nobody(dir: &Path) -> Output {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = crate::support::runnable_by_all(Path::new(env!("CARGO_BIN_EXE_fxtrace")), dir);
    Command::new(exe)
        .args(["record", "--system-wide", "-o"])
        .arg(dir.join("nobody.fxt"))
        .args(["--", "true"])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run fxtrace as nobody")
}

#[test]
fn without_privileges_the_error_says_what_to_do() {
    if !PerfPermissions::read().root {
        skip(Requirement::Root, "runs fxtrace as another user");
        return;
    }
    let paranoid = PerfPermissions::read().paranoid;
    if paranoid.is_some_and(|p| p <= 0) {
        skip(
            Requirement::Paranoid,
            format!("perf_event_paranoid = {paranoid:?} lets everyone capture system-wide"),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = run_as_nobody(dir.path());
    let output = dir.path().join("nobody.fxt");
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("system-wide capture needs root or CAP_PERFMON"),
        "{stderr}"
    );
    assert!(stderr.contains("setcap cap_perfmon"), "{stderr}");
    assert!(stderr.contains("perf_event_paranoid"), "{stderr}");
    assert!(!output.exists());
}

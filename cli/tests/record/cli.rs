//! `fxtrace record` end to end, with real processes: the probe traced in each buffering mode,
//! a small streaming buffer, a provider killed mid-trace, the flight recorder, Ctrl-C, a
//! duration without a command, and `fxtrace status`.

use crate::support;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use support::{decode, parse_probe, probe, seqs_of_thread, Archive, ProbeReport};

fn fxtrace() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fxtrace"))
}

/// One row of the summary table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    id: u32,
    pid: u32,
    name: String,
    records: u64,
    bytes: u64,
    dropped: u64,
    mode: String,
    lost: bool,
}

fn rows(stderr: &str) -> Vec<Row> {
    stderr
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 8 || f[0] == "id" {
                return None;
            }
            Some(Row {
                id: f[0].parse().ok()?,
                pid: f[1].parse().ok()?,
                name: f[2].to_string(),
                records: f[3].parse().ok()?,
                bytes: f[4].parse().ok()?,
                dropped: f[5].parse().ok()?,
                mode: f[6].to_string(),
                lost: match f[7] {
                    "LOST" => true,
                    "no" => false,
                    _ => return None,
                },
            })
        })
        .collect()
}

struct Recorded {
    probe: ProbeReport,
    stderr: String,
    rows: Vec<Row>,
    archive: Archive,
    bytes: Vec<u8>,
    elapsed: Duration,
}

fn record(dir: &Path, record_args: &[&str], probe_args: &[&str]) -> Recorded {
    let out = dir.join("trace.fxt");
    let start = Instant::now();
    let output: Output = fxtrace()
        .arg("record")
        .arg("-o")
        .arg(&out)
        .args(record_args)
        .arg("--")
        .arg(probe())
        .args(probe_args)
        .output()
        .expect("run fxtrace record");
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "fxtrace record failed: {stderr}");
    let bytes = std::fs::read(&out).unwrap();
    Recorded {
        probe: parse_probe(&String::from_utf8_lossy(&output.stdout)),
        rows: rows(&stderr),
        archive: decode(&bytes),
        bytes,
        stderr,
        elapsed,
    }
}

/// Per thread: strictly increasing seqs, none duplicated.
fn assert_ordered(r: &Recorded, threads: u64) -> Vec<Vec<u64>> {
    let part = r.archive.one("probe");
    (0..threads)
        .map(|t| {
            let seqs = seqs_of_thread(&part.events, t);
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "thread {t}: out of order or duplicated"
            );
            seqs
        })
        .collect()
}

#[test]
fn each_mode_archives_what_the_probe_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let threads = 2u64;
    let events = 4000u64;
    for mode in ["oneshot", "circular", "streaming"] {
        let mut probe_args = vec!["--events", "4000", "--threads", "2"];
        if mode == "streaming" {
            probe_args.extend(["--pause-every", "50", "--pause-us", "200"]);
        }
        let r = record(dir.path(), &["-m", mode, "-b", "128K"], &probe_args);
        let p = &r.probe;
        assert_eq!(p.written + p.dropped, threads * events, "{mode}: {p:?}");
        assert_eq!(r.rows.len(), 1, "{mode}: {}", r.stderr);
        let row = &r.rows[0];
        assert_eq!((row.mode.as_str(), row.lost), (mode, false), "{}", r.stderr);
        // The header's drop count is the probe's.
        assert_eq!(row.dropped, p.dropped, "{mode}: {}", r.stderr);
        let part = r.archive.one("probe");
        assert_eq!(part.infos, 1);
        assert!(part.inits >= 1);
        // Magic, provider info (2 words for "probe"), the copied bytes, metadata and markers.
        assert!(r.bytes.len() as u64 >= 24 + row.bytes, "{mode}");
        let per_thread = assert_ordered(&r, threads);
        let kept: u64 = per_thread.iter().map(|s| s.len() as u64).sum();
        match mode {
            "oneshot" => {
                // Everything written is there; the rest was dropped, counted, and marked.
                assert_eq!(kept, p.written);
                assert!(p.dropped > 0, "128 KiB cannot hold 8000 events");
                assert_eq!(part.overflows, 1);
                assert_eq!(
                    part.markers,
                    [format!("fxtrace: {} records dropped", p.dropped)]
                );
                // Oneshot keeps the oldest: each thread's events are a prefix.
                for seqs in &per_thread {
                    assert!(seqs.iter().enumerate().all(|(i, &s)| s == i as u64));
                }
            }
            "circular" => {
                // The newest data is kept: the last event of the thread that finished last
                // is there (a thread that finished earlier may have been overwritten).
                assert!(kept <= p.written && kept > 0);
                assert!(
                    per_thread.iter().any(|s| s.last() == Some(&(events - 1))),
                    "newest events kept"
                );
                assert!(kept < threads * events, "128 KiB cannot hold 8000 events");
            }
            _ => {
                assert_eq!(kept, p.written, "{}", r.stderr);
                assert_eq!(part.overflows > 0, p.dropped > 0);
                assert!(part.sections >= 2, "streamed in several saves");
            }
        }
        assert_eq!(row.records, kept + part.inits, "{mode}");
        println!(
            "{mode}: written {} dropped {} archived {kept} ({} bytes, {} sections) in {:?}",
            p.written,
            p.dropped,
            r.bytes.len(),
            part.sections + 1,
            r.elapsed
        );
    }
}

/// Nothing written is lost however late the manager is scheduled: every event the probe wrote
/// is in the archive, in order, and every other one was refused at the write and counted (as
/// dropped by the probe, in the summary and by a marker). (Whether the manager keeps up with a
/// paced writer is a matter of speed, not checked here: with the pauses below it normally
/// drops nothing.)
#[test]
fn streaming_with_a_small_buffer_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // A rolling buffer (~30 KiB) holds ~420 events: ~80 pauses, 20+ ms to fill one, which is
    // the time the manager has to save the other (it needs well under a millisecond).
    let r = record(
        dir.path(),
        &["-m", "streaming", "-b", "64K"],
        &[
            "--events",
            "10000",
            "--pause-every",
            "5",
            "--pause-us",
            "200",
        ],
    );
    let (written, dropped) = (r.probe.written, r.probe.dropped);
    assert_eq!(written + dropped, 10_000, "{}", r.stderr);
    let seqs = assert_ordered(&r, 1);
    assert_eq!(
        seqs[0].len() as u64,
        written,
        "every written event archived"
    );
    assert!(seqs[0].iter().all(|&s| s < 10_000));
    assert_eq!(r.rows[0].dropped, dropped, "{}", r.stderr);
    let part = r.archive.one("probe");
    // Each run of drops is marked, with its count.
    assert_eq!(part.overflows > 0, dropped > 0);
    let marked: u64 = part
        .markers
        .iter()
        .map(|m| {
            m.strip_prefix("fxtrace: ")
                .and_then(|m| m.strip_suffix(" records dropped"))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("marker {m:?}"))
        })
        .sum();
    assert_eq!(marked, dropped, "{:?}", part.markers);
    // A save holds one rolling buffer (under half of 64 KiB) of events of 32 bytes or more:
    // at most 1024 events each, so the events kept took that many saves at least.
    let saves = written.div_ceil(1024);
    assert!(
        part.sections as u64 >= saves,
        "{written} events in {} sections of a 64 KiB buffer",
        part.sections
    );
    println!(
        "streaming 64 KiB: {written} of 10000 events kept ({dropped} dropped), {} saves, {} \
         bytes, {:?}",
        part.sections,
        r.bytes.len(),
        r.elapsed
    );
}

/// A writer flat out against 1 MiB buffers: whatever the manager keeps up with, the archive
/// holds exactly the events written, in order, and the summary's drops are the probe's.
#[test]
fn streaming_flat_out_keeps_the_written_events_and_counts_the_rest() {
    // No pauses: the writer runs flat out; the manager drains 1 MiB buffers as they fill.
    let dir = tempfile::tempdir().unwrap();
    let r = record(
        dir.path(),
        &["-m", "streaming", "-b", "1M"],
        &["--events", "200000"],
    );
    let seqs = assert_ordered(&r, 1);
    assert_eq!(seqs[0].len() as u64, r.probe.written, "{}", r.stderr);
    assert_eq!(r.rows[0].dropped, r.probe.dropped);
    let mb = r.bytes.len() as f64 / 1e6;
    println!(
        "streaming 1 MiB flat out: {} of 200000 events kept ({} dropped), {mb:.1} MB archived \
         in {:?} ({:.0} MB/s end to end, debug build)",
        r.probe.written,
        r.probe.dropped,
        r.elapsed,
        mb / r.elapsed.as_secs_f64()
    );
}

/// Start `fxtrace record` with the probe, stdout piped.
fn spawn_record(dir: &Path, record_args: &[&str], probe_args: &[&str]) -> Child {
    fxtrace()
        .arg("record")
        .arg("-o")
        .arg(dir.join("trace.fxt"))
        .args(record_args)
        .arg("--")
        .arg(probe())
        .args(probe_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Read stdout lines until one satisfies `want`.
fn wait_line(reader: &mut impl BufRead, want: impl Fn(&str) -> bool) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).unwrap();
        assert!(n > 0, "stdout closed before the expected line");
        if want(&line) {
            return line;
        }
    }
}

fn finish(mut child: Child) -> (String, Vec<u8>) {
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    (format!("{stderr}\nstatus: {status}"), Vec::new())
}

#[test]
fn a_provider_killed_mid_trace_is_salvaged_and_others_are_intact() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let socket_arg = socket.to_str().unwrap();
    let mut child = spawn_record(
        dir.path(),
        &["-m", "circular", "-b", "1M", "--socket", socket_arg],
        &[
            "--name",
            "victim",
            "--events",
            "100000",
            "--hang-after",
            "3000",
        ],
    );
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let connected = parse_probe(&wait_line(&mut stdout, |l| l.starts_with("connected=")));
    let progress = parse_probe(&wait_line(&mut stdout, |l| l.starts_with("progress=")));
    assert_eq!(progress.progress, Some(3000));
    // Another provider joins the session and finishes cleanly.
    let other = support::spawn_probe(&socket, &["--name", "bystander", "--events", "2000"])
        .wait_with_output()
        .unwrap();
    let other = parse_probe(&String::from_utf8_lossy(&other.stdout));
    assert_eq!(other.written, 2000);
    // SIGKILL the victim while it holds its buffer.
    kill(
        Pid::from_raw(connected.pid.unwrap() as i32),
        Signal::SIGKILL,
    )
    .unwrap();
    let (stderr, _) = finish(child);
    let archive = decode(&std::fs::read(dir.path().join("trace.fxt")).unwrap());
    let victim = archive.one("victim");
    let seqs = seqs_of_thread(&victim.events, 0);
    assert_eq!(
        seqs,
        (0..3000).collect::<Vec<u64>>(),
        "every record up to the kill"
    );
    // The marker is written when the connection drops; the summary knows how the process
    // ended.
    assert!(
        victim
            .markers
            .iter()
            .any(|m| m.starts_with("fxtrace: provider lost: connection closed without STOPPED")),
        "{:?}",
        victim.markers
    );
    let bystander = archive.one("bystander");
    assert_eq!(
        seqs_of_thread(&bystander.events, 0),
        (0..2000).collect::<Vec<u64>>()
    );
    assert!(bystander.markers.is_empty());
    let rows = rows(&stderr);
    let v = rows.iter().find(|r| r.name == "victim").unwrap();
    let b = rows.iter().find(|r| r.name == "bystander").unwrap();
    assert!(v.lost && !b.lost, "{stderr}");
    assert!(
        stderr.contains("lost: the process was killed by SIGKILL"),
        "{stderr}"
    );
    assert!(stderr.contains("status: exit status: 137"), "{stderr}");
}

#[test]
fn flight_recorder_writes_the_newest_data_on_alert() {
    let dir = tempfile::tempdir().unwrap();
    let r = record(
        dir.path(),
        &["-m", "circular", "-b", "64K", "--stop-on-alert", "boom"],
        &[
            "--events",
            "20000",
            "--alert-after",
            "20000",
            "boom",
            "--forever",
        ],
    );
    assert!(
        r.stderr
            .contains("stopping: provider 1 raised alert \"boom\""),
        "{}",
        r.stderr
    );
    let seqs = assert_ordered(&r, 1);
    let kept = &seqs[0];
    // A 64 KiB circular buffer keeps only the newest events, which include the alert point.
    assert!(!kept.is_empty() && kept.len() < 2000, "kept {}", kept.len());
    assert!(
        *kept.last().unwrap() >= 19_999,
        "newest kept: {:?}",
        kept.last()
    );
    assert!(
        kept[0] > 10_000,
        "oldest kept {}: old data was overwritten",
        kept[0]
    );
    // Contiguous: nothing dropped between the oldest and the newest kept event.
    assert_eq!(kept.last().unwrap() - kept[0] + 1, kept.len() as u64);
}

#[test]
fn ctrl_c_stops_cleanly_and_writes_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_record(
        dir.path(),
        &["-m", "oneshot"],
        &[
            "--events",
            "100",
            "--forever",
            "--pause-every",
            "10",
            "--pause-us",
            "1000",
        ],
    );
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    wait_line(&mut stdout, |l| l.starts_with("connected="));
    std::thread::sleep(Duration::from_millis(200));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    // The SIGINT goes on to the probe (issue 34), which dies of it, as of a terminal's
    // Ctrl-C: its buffer is salvaged, every record up to the end kept.
    let (stderr, _) = finish(child);
    assert!(
        stderr.contains("SIGINT passed on to the command"),
        "{stderr}"
    );
    assert!(stderr.contains("was killed by SIGINT"), "{stderr}");
    assert!(stderr.contains("stopping: SIGINT received"), "{stderr}");
    assert!(stderr.contains("status: exit status: 0"), "{stderr}");
    let archive = decode(&std::fs::read(dir.path().join("trace.fxt")).unwrap());
    let seqs = seqs_of_thread(&archive.one("probe").events, 0);
    assert!(seqs.len() >= 100, "{}", seqs.len());
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<u64>>());
}

#[test]
fn the_exit_hook_stops_a_provider_that_was_never_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let r = record(dir.path(), &[], &["--events", "500", "--exit-hook"]);
    assert!(!r.rows[0].lost, "{}", r.stderr);
    assert!(!r.stderr.contains("lost:"), "{}", r.stderr);
    assert_eq!(seqs_of_thread(&r.archive.one("probe").events, 0).len(), 500);
}

#[test]
fn a_duration_without_a_command_traces_whoever_joins() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let out = dir.path().join("trace.fxt");
    let child = fxtrace()
        // Long enough for two probes and a status call on a loaded machine (1.5 s was not:
        // the session had ended when `status` asked).
        .args(["record", "--duration", "4", "-m", "streaming", "--socket"])
        .arg(&socket)
        .arg("-o")
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while !socket.exists() {
        assert!(Instant::now() < until);
        std::thread::sleep(Duration::from_millis(5));
    }
    let a = support::spawn_probe(&socket, &["--name", "first", "--events", "300"]);
    let a = parse_probe(&String::from_utf8_lossy(
        &a.wait_with_output().unwrap().stdout,
    ));
    // `fxtrace status` sees the running session and its provider history.
    let status = fxtrace()
        .args(["status", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    let status_out = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{status_out}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(status_out.contains("STARTED"), "{status_out}");
    let b = support::spawn_probe(&socket, &["--name", "second", "--events", "200"]);
    let b = parse_probe(&String::from_utf8_lossy(
        &b.wait_with_output().unwrap().stdout,
    ));
    let (stderr, _) = finish(child);
    assert!(stderr.contains("stopping: the duration ended"), "{stderr}");
    let archive = decode(&std::fs::read(&out).unwrap());
    assert_eq!(archive.one("first").events.len() as u64, a.written);
    assert_eq!(archive.one("second").events.len() as u64, b.written);
    assert_eq!(a.written, 300);
    assert_eq!(b.written, 200);
}

#[test]
fn a_buffer_about_to_overflow_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    // 256 KiB in oneshot mode holds about 3600 probe events: 3100 fill it past 80 % without
    // a drop; the probe then waits.
    let mut child = spawn_record(
        dir.path(),
        &[
            "-m",
            "oneshot",
            "-b",
            "256K",
            "--socket",
            socket.to_str().unwrap(),
        ],
        &["--events", "3100", "--hang-after", "3100"],
    );
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    wait_line(&mut stdout, |l| l.starts_with("progress="));
    // While tracing: the status says how full each provider's buffer is.
    let status = fxtrace()
        .args(["status", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let (stderr, _) = finish(child);
    let fill: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("  buffers full (toward dropping records): probe "))
        .and_then(|p| p.strip_suffix('%'))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no fill in {text}"));
    assert!((80..100).contains(&fill), "{text}");
    // After: the summary warns, with the remedy.
    let rows = rows(&stderr);
    assert_eq!(rows[0].dropped, 0, "{stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("provider 1 (probe): its buffer was "))
        .unwrap_or_else(|| panic!("no warning in {stderr}"));
    assert!(
        warning.ends_with(
            "% full: records are dropped once it is full; a larger -b, or -m streaming, \
             keeps more"
        ),
        "{warning}"
    );
}

#[test]
fn status_lists_a_running_session_and_its_provider() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let mut child = spawn_record(
        dir.path(),
        &["--socket", socket.to_str().unwrap()],
        &[
            "--name",
            "status-probe",
            "--events",
            "10",
            "--forever",
            "--pause-every",
            "1",
            "--pause-us",
            "1000",
        ],
    );
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let connected = parse_probe(&wait_line(&mut stdout, |l| l.starts_with("connected=")));
    let status = fxtrace()
        .args(["status", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let (stderr, _) = finish(child);
    assert!(status.status.success(), "{text}");
    assert!(
        text.contains(&format!("session at {}: STARTED", socket.display())),
        "{text}"
    );
    assert!(text.contains("status-probe"), "{text}");
    assert!(
        text.contains(&format!("{}", connected.pid.unwrap())),
        "{text}"
    );
    assert!(text.contains("known categories"), "{text}");
    // Mode, buffer size, output, elapsed time and figures so far, as `lttng list SESSION`.
    for expected in [
        // The defaults (issue 34): streaming, 8 MiB.
        "  mode: streaming, buffer size 8.00 MiB per provider".to_owned(),
        format!("  output: {}", dir.path().join("trace.fxt").display()),
        "  elapsed: ".to_owned(),
        "  written so far: ".to_owned(),
        "  in the providers' buffers: ".to_owned(),
    ] {
        assert!(text.contains(&expected), "{expected:?} in {text}");
    }
    assert!(stderr.contains("trace written to"), "{stderr}");
    // Nobody listening any more.
    let gone = fxtrace()
        .args(["status", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(!gone.status.success());
}

//! `fxtrace record`'s output and process lifecycle (issue 13, "The manager's own death and
//! full disks"; issue 14, "Overwriting"): no file when nothing was recorded, the previous
//! output kept as `FILE.old`, a full disk reported with a valid prefix and the command
//! stopped, the command's whole process group signalled on SIGTERM and on the recorder's
//! death, stale session directories removed, nothing held back from the kernel.

use fxtrace::test_support::{skip, Requirement};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FXTRACE: &str = env!("CARGO_BIN_EXE_fxtrace");

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fxtrace-lifecycle-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `examples/threads`, built by `cargo test` next to the test binaries.
fn threads_example() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples/threads");
    if path.exists() {
        Some(path)
    } else {
        skip(
            Requirement::Examples,
            format!("{} is not built", path.display()),
        );
        None
    }
}

/// Pids of processes whose command line contains `needle`.
fn pids_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // Zombies have an empty command line; the recorder's own argv holds the needle too.
        if cmdline.starts_with("sleep ") && cmdline.contains(needle) {
            out.push(pid);
        }
    }
    out
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

fn stats(path: &Path) -> String {
    let out = Command::new(FXTRACE)
        .arg("stats")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_command_that_cannot_run_leaves_no_trace_and_the_old_one_in_place() {
    let dir = temp_dir("nonexistent");
    let out = dir.join("t.fxt");
    std::fs::write(&out, b"previous").unwrap();
    let status = Command::new(FXTRACE)
        .args(["record", "-o"])
        .arg(&out)
        .args(["--", "/nonexistent/command"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
    assert_eq!(std::fs::read(&out).unwrap(), b"previous");
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "{names:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_existing_output_is_kept_as_old() {
    let dir = temp_dir("old");
    let out = dir.join("t.fxt");
    std::fs::write(&out, b"previous").unwrap();
    let status = Command::new(FXTRACE)
        .args(["record", "-o"])
        .arg(&out)
        .args(["--", "/bin/true"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read(dir.join("t.fxt.old")).unwrap(), b"previous");
    assert!(stats(&out).contains("status: ok"));
    std::fs::remove_dir_all(dir).unwrap();
}

fn spawn_record(out: &Path, command: &[&str]) -> Child {
    Command::new(FXTRACE)
        .args(["record", "-o"])
        .arg(out)
        .arg("--")
        .args(command)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn sigterm_reaches_the_commands_whole_process_group() {
    let dir = temp_dir("group");
    let tag = format!("10{}", std::process::id());
    let script = format!("sleep {tag}; true");
    let mut rec = spawn_record(&dir.join("t.fxt"), &["sh", "-c", &script]);
    assert!(
        wait_until(Duration::from_secs(10), || !pids_with(&tag).is_empty()),
        "sleep never started"
    );
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(rec.id() as i32, libc::SIGTERM) };
    let status = rec.wait().unwrap();
    assert!(status.code().is_some(), "recorder died: {status:?}");
    assert!(
        wait_until(Duration::from_secs(3), || pids_with(&tag).is_empty()),
        "sh's child sleep outlived the recording: {:?}",
        pids_with(&tag)
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_stop_signal_reaches_the_command_as_it_was_sent() {
    // A command that ends gracefully on SIGINT (as a server on Ctrl-C) and says which signal
    // it got; the recorder has no terminal to give it, so only the recorder gets the SIGINT
    // (`kill`, `timeout -s INT`, a terminal the command does not hold).
    let dir = temp_dir("sigint");
    let script = "trap 'echo INT > got; exit 0' INT; trap 'echo TERM > got; exit 0' TERM; \
                  : > ready; while :; do sleep 0.05; done";
    let rec = Command::new(FXTRACE)
        .current_dir(&dir)
        .args(["record", "-o", "t.fxt", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || dir.join("ready").exists()),
        "the command never started"
    );
    let sent = Instant::now();
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let got = std::fs::read_to_string(dir.join("got")).unwrap_or_default();
    assert_eq!(got.trim(), "INT", "the command's signal; recorder: {err}");
    assert!(err.contains("SIGINT passed on to the command"), "{err}");
    assert!(err.contains("exited with status 0"), "{err}");
    assert!(!err.contains("sent SIGTERM"), "{err}");
    assert!(
        sent.elapsed() < Duration::from_secs(4),
        "no grace period waited: {:?}",
        sent.elapsed()
    );
    assert!(stats(&dir.join("t.fxt")).contains("status: ok"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_recorder_killed_by_sigkill_takes_its_command_group_along() {
    let dir = temp_dir("sigkill");
    let tag = format!("20{}", std::process::id());
    let script = format!("sleep {tag}; true");
    let mut rec = spawn_record(&dir.join("t.fxt"), &["sh", "-c", &script]);
    assert!(
        wait_until(Duration::from_secs(10), || !pids_with(&tag).is_empty()),
        "sleep never started"
    );
    let session_dir = std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("fxtrace-session-{}-", rec.id()))
        });
    rec.kill().unwrap();
    rec.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || pids_with(&tag).is_empty()),
        "the command's sleep outlived a killed recorder: {:?}",
        pids_with(&tag)
    );
    // The next `status` removes what the killed recorder left. (Another test of this binary
    // running `fxtrace status` at the same moment may be that next `status`: then the
    // directory is already gone, which is the point.)
    if let Some(session_dir) = session_dir.filter(|d| d.exists()) {
        let _ = Command::new(FXTRACE)
            .arg("status")
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("FXTRACE_SOCKET")
            .output()
            .unwrap();
        assert!(!session_dir.exists(), "{} stayed", session_dir.display());
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_killed_recorder_leaves_whole_records_only() {
    let Some(example) = threads_example() else {
        return;
    };
    let dir = temp_dir("killed-archive");
    let out = dir.join("t.fxt");
    let rec = Command::new(FXTRACE)
        .args(["record", "-m", "streaming", "-b", "64K", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&example)
        .args(["--threads", "2", "--events", "100000000"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.txt")).unwrap())
        .spawn()
        .unwrap();
    // Killed however the test ends.
    struct KillOnDrop(Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut rec = KillOnDrop(rec);
    // Let it save a few buffers, then kill it mid-stream.
    assert!(
        wait_until(Duration::from_secs(60), || {
            std::fs::metadata(&out).is_ok_and(|m| m.len() > 600_000)
        }),
        "the recording did not grow past 600 KB; the recorder said: {}",
        std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default()
    );
    std::thread::sleep(Duration::from_millis(150));
    rec.0.kill().unwrap();
    rec.0.wait().unwrap();
    let size = std::fs::metadata(&out).unwrap().len();
    let text = stats(&out);
    // Everything the recorder wrote is whole records, except at most the one it was writing
    // when it was killed (a write cut short by SIGKILL): the damage, if any, is a last record
    // that runs past the end of the file, never a bad record inside it.
    let torn_tail = text.lines().any(|l| {
        l.starts_with("status: damaged: at byte offset ")
            && l.contains("bytes remain")
            && l.split_whitespace()
                .nth(5)
                .and_then(|o| o.trim_end_matches(':').parse::<u64>().ok())
                .is_some_and(|offset| size - offset < 8 * 4096)
    });
    assert!(
        text.contains("status: ok") || torn_tail,
        "{size} bytes: {text}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_full_disk_names_the_file_keeps_a_valid_prefix_and_stops_the_command() {
    let Some(example) = threads_example() else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(Requirement::Root, "mounting a 2 MB tmpfs needs root");
        return;
    }
    let dir = temp_dir("enospc");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "fxtrace-enospc"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        skip(
            Requirement::Root,
            format!("cannot mount a tmpfs on {}", dir.display()),
        );
        return;
    }
    // The disk fills while tracing (streaming saves), or at the stop, when a oneshot buffer
    // is read out.
    let cases: [&[&str]; 2] = [
        &["-m", "streaming", "-b", "64K"],
        &["-m", "oneshot", "-b", "16M", "--duration", "2"],
    ];
    for mode in cases {
        let out = dir.join("t.fxt");
        let _ = std::fs::remove_file(&out);
        let result = full_disk_case(&example, &out, mode);
        if let Err(e) = result {
            let _ = Command::new("umount").arg(&dir).status();
            let _ = std::fs::remove_dir_all(&dir);
            panic!("{mode:?}: {e}");
        }
    }
    let _ = Command::new("umount").arg(&dir).status();
    let _ = std::fs::remove_dir_all(&dir);
}

/// One recording onto a full disk, checked; `Err` says what failed.
fn full_disk_case(
    example: &std::path::Path,
    out: &std::path::Path,
    mode: &[&str],
) -> Result<(), String> {
    let started = Instant::now();
    let result = Command::new(FXTRACE)
        .arg("record")
        .args(mode)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(example)
        .args(["--threads", "2", "--events", "100000000"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    let text = stats(out);
    std::panic::catch_unwind(|| check_full_disk(&result, &stderr, &text, out, started))
        .map_err(|_| format!("stderr:\n{stderr}\nstats:\n{text}"))
}

fn check_full_disk(
    result: &std::process::Output,
    stderr: &str,
    text: &str,
    out: &std::path::Path,
    started: Instant,
) {
    assert!(!result.status.success(), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the command was left running"
    );
    let line = stderr
        .lines()
        .find(|l| l.contains("No space left on device"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains(&out.display().to_string()), "{line}");
    assert_eq!(
        line.matches("writing the trace output").count(),
        1,
        "{line}"
    );
    assert!(text.contains("status: ok"), "{text}");
    let records = text
        .lines()
        .find_map(|l| l.strip_prefix("records: "))
        .unwrap();
    assert!(
        line.contains(&format!("its first {records} records")),
        "{line} / {text}"
    );
    assert!(stderr.contains("records"), "no summary: {stderr}");
}

#[test]
fn a_closed_standard_error_loses_messages_never_the_recording() {
    // Before: `record`'s first message panicked ("failed printing to stderr", exit 101) and the
    // command ran untraced.
    let dir = temp_dir("closed-stderr");
    let out = dir.join("t.fxt");
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    let status = Command::new(FXTRACE)
        .args(["record", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "exit 3"])
        .stderr(Stdio::from(write_end))
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(3),
        "the command's own status, not a panic: {status:?}"
    );
    let text = stats(&out);
    assert!(text.contains("status: ok"), "{text}");
    std::fs::remove_dir_all(dir).unwrap();
}

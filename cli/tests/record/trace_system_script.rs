//! `scripts/trace-system.sh`: a short system-wide capture through the sudo script, as root.
//! The trace is written and decodes, and every machine setting the script changed is back.

use std::path::Path;
use std::process::Command;

use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::{DecodedRecord, Decoder};

fn script() -> std::path::PathBuf {
    Path::new(crate::WORKSPACE).join("scripts/trace-system.sh")
}

fn is_root() -> bool {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The script changes machine-wide settings and checks them afterwards: one run at a time.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn machine() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|p| p.into_inner())
}

fn tracefs_mounted() -> bool {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("tracefs"))
}

#[test]
fn help_explains_the_options() {
    let out = Command::new("bash")
        .arg(script())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "-o FILE",
        "-d SECONDS",
        "tracefs",
        "perf_event_mlock_kb",
        "SUDO_USER",
    ] {
        assert!(text.contains(needle), "--help mentions {needle}: {text}");
    }
}

#[test]
fn bad_arguments_are_refused_with_a_reason() {
    let out = Command::new("bash")
        .arg(script())
        .args(["-d", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-d takes seconds"));
}

#[test]
fn records_system_wide_and_restores_the_machine() {
    let _machine = machine();
    if !is_root() {
        skip(
            Requirement::Root,
            "needs root (the script re-runs itself with sudo otherwise)",
        );
        return;
    }
    let mlock_before = std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb").unwrap();
    let mounted_before = tracefs_mounted();
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("system.fxt");
    let out = Command::new("bash")
        .arg(script())
        .arg("--fxtrace")
        .arg(env!("CARGO_BIN_EXE_fxtrace"))
        .arg("-o")
        .arg(&out_file)
        .args(["-d", "0.5", "--", "sleep", "0.2"])
        .env_remove("SUDO_USER")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "trace-system.sh failed: {stderr}");

    let bytes = std::fs::read(&out_file).expect("the trace is written");
    let mut switches = 0;
    let mut providers = Vec::new();
    for d in Decoder::new(&bytes) {
        match d
            .unwrap_or_else(|e| panic!("the trace decodes: {e}"))
            .record
        {
            DecodedRecord::ContextSwitch { .. } => switches += 1,
            DecodedRecord::ProviderInfo { name, .. } => providers.push(name.to_string()),
            _ => {}
        }
    }
    assert!(providers.iter().any(|p| p == "kernel"), "{providers:?}");
    assert!(switches > 0, "context switches were captured");

    let mlock_after = std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb").unwrap();
    assert_eq!(mlock_after, mlock_before, "perf_event_mlock_kb restored");
    assert_eq!(
        tracefs_mounted(),
        mounted_before,
        "tracefs left as it was: {stderr}"
    );
}

#[test]
fn a_planted_symlink_is_moved_aside_and_only_the_new_trace_is_given_away() {
    let _machine = machine();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !is_root() {
        skip(
            Requirement::Root,
            "needs root (the attack is on root's recorder)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let precious = dir.path().join("precious");
    std::fs::write(&precious, b"root's file").unwrap();
    std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out_file = dir.path().join("trace.fxt");
    // The user's symlink, planted under the output's name.
    std::os::unix::fs::symlink(&precious, &out_file).unwrap();
    std::os::unix::fs::lchown(&out_file, Some(65534), Some(65534)).unwrap();
    let out = Command::new("bash")
        .arg(script())
        .arg("--fxtrace")
        .arg(env!("CARGO_BIN_EXE_fxtrace"))
        .arg("-o")
        .arg(&out_file)
        .args(["-d", "0.5", "--", "sleep", "0.2"])
        .env("SUDO_USER", "nobody")
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "trace-system.sh failed: {stderr}");
    let meta = std::fs::metadata(&precious).unwrap();
    assert_eq!(std::fs::read(&precious).unwrap(), b"root's file");
    assert_eq!(
        (meta.uid(), meta.gid()),
        (0, 0),
        "the symlink's target was chowned"
    );
    let trace = std::fs::symlink_metadata(&out_file).unwrap();
    assert!(trace.file_type().is_file(), "{trace:?}");
    assert_eq!((trace.uid(), trace.gid()), (65534, 65534));
    let old = dir.path().join("trace.fxt.old");
    assert!(std::fs::symlink_metadata(old)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn sigterm_stops_the_recording_at_once_and_restores_the_machine() {
    let _machine = machine();
    if !is_root() {
        skip(
            Requirement::Root,
            "needs root (the script re-runs itself with sudo otherwise)",
        );
        return;
    }
    let mlock_before = std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("system.fxt");
    let mut child = Command::new("bash")
        .arg(script())
        .arg("--fxtrace")
        .arg(env!("CARGO_BIN_EXE_fxtrace"))
        .arg("-o")
        .arg(&out_file)
        .args(["-d", "60"])
        .env_remove("SUDO_USER")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The trace is under its name once the recording has started.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !out_file.exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let sent = std::time::Instant::now();
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(
        took < std::time::Duration::from_secs(4),
        "stopping took {took:?}"
    );
    // The recorder is gone with the script, not left recording in the background.
    let needle = out_file.display().to_string();
    let recorders: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(" record ") && c.contains(&needle))
        .collect();
    assert!(recorders.is_empty(), "still running: {recorders:?}");
    let bytes = std::fs::read(&out_file).unwrap();
    for d in Decoder::new(&bytes) {
        d.unwrap_or_else(|e| panic!("the trace decodes: {e}"));
    }
    let mlock_after = std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb").unwrap();
    assert_eq!(mlock_after, mlock_before, "perf_event_mlock_kb restored");
}

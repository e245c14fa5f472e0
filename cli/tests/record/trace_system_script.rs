//! `scripts/trace-system.sh`: a short system-wide capture through the sudo script, as root.
//! The trace is written and decodes, and every machine setting the script changed is back.

use std::path::Path;
use std::process::Command;

use fxtrace::format::{DecodedRecord, Decoder};

fn script() -> std::path::PathBuf {
    Path::new(crate::WORKSPACE).join("scripts/trace-system.sh")
}

fn is_root() -> bool {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
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
    if !is_root() {
        println!("skipped: needs root (the script re-runs itself with sudo otherwise)");
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

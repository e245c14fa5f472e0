//! The `#[traced]` examples run and check their own archives (`examples/hello_traced.rs`,
//! `examples/async_traced.rs`): each must exit 0 and print where its trace went, so the
//! examples cannot rot (STYLE, "What to avoid" 14).
//!
//! `cargo test` builds the examples next to the test binaries; when they were not built
//! (e.g. `cargo test --test api` alone) the test skips (`fxtrace::test_support::skip`).

#![cfg(feature = "instrument")]

use fxtrace::test_support::{skip, Requirement};
use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/<name>`, from this test's own path
/// (`target/<profile>/deps/traced_examples-<hash>`).
fn example(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples").join(name);
    path.exists().then_some(path)
}

fn run(name: &str, expect: &[&str]) {
    let Some(binary) = example(name) else {
        skip(
            Requirement::Examples,
            format!("example {name} not built (run the whole `cargo test`)"),
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{name}.fxt"));
    let output = Command::new(&binary).arg(&out).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{name} failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("written to {}", out.display())),
        "{stdout}"
    );
    for line in expect {
        assert!(stdout.contains(line), "{name}: no {line:?} in\n{stdout}");
    }
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
}

#[test]
fn hello_traced_runs_and_finds_its_durations() {
    run(
        "hello_traced",
        &[
            "465  hello_traced::fib",
            "2  hello_traced::fragile",
            "(0 dropped)",
        ],
    );
}

#[test]
fn async_traced_runs_and_matches_its_async_pairs() {
    run(
        "async_traced",
        &["48 futures began, 48 ended", "(0 dropped)"],
    );
}

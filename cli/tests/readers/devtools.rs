//! Chrome JSON from `fxtrace convert` loads in the DevTools Performance panel's trace engine
//! (`scripts/check-devtools.sh`, which installs `@paulirish/trace_engine` at a pinned version
//! into a cache directory and runs it in Node). Without node and npm: one skip line.

use crate::write_all_records;

use fxtrace::test_support::{skip, Requirement};
use std::path::Path;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn converted_traces_load_in_the_devtools_trace_engine() {
    if !have("node") || !have("npm") {
        skip(
            Requirement::Node,
            "node and npm are needed to run the DevTools trace engine",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fxt = dir.path().join("all.fxt");
    std::fs::write(&fxt, write_all_records::build_trace().unwrap()).unwrap();
    let json = dir.path().join("all.json");
    let convert = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .args(["convert", "--to", "chrome-json", "-o"])
        .arg(&json)
        .arg(&fxt)
        .output()
        .unwrap();
    assert!(
        convert.status.success(),
        "{}",
        String::from_utf8_lossy(&convert.stderr)
    );
    let script = Path::new(crate::WORKSPACE).join("scripts/check-devtools.sh");
    let check = Command::new(script).arg(&json).output().unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    let stderr = String::from_utf8_lossy(&check.stderr);
    if check.status.code() == Some(3) {
        // Node is there but the engine could not be installed (no registry): say so.
        skip(Requirement::Node, stderr.trim());
        return;
    }
    assert!(check.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("loaded by the DevTools trace engine") && stdout.contains("2 processes"),
        "{stdout}\n{stderr}"
    );
}

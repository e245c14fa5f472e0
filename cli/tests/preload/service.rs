//! An unmodified program with `libfxtrace_preload.so`, started with no `fxtrace record`
//! around it: it registers with the trace service and a later `fxtrace start` traces it.

use std::process::{Command, Stdio};
use std::time::Duration;

use fxtrace_format::{DecodedRecord, Decoder};

use crate::preload_support::preload_lib;
use crate::service_support::Daemon;

#[test]
fn a_preloaded_program_follows_the_trace_service() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path());
    let mut program = Command::new("/bin/sleep")
        .arg("20")
        .env("LD_PRELOAD", preload_lib())
        .env_remove("FXTRACE_SOCKET")
        .env("XDG_RUNTIME_DIR", dir.path())
        .env("FXTRACE_PRELOAD_NAME", "preloaded-sleep")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    daemon.wait_providers("preloaded-sleep", 1);
    let out = dir.path().join("preloaded.fxt");
    daemon.ok(&["start", "--duration", "0.5", "-o", out.to_str().unwrap()]);
    let bytes = std::fs::read(&out).unwrap();
    let names: Vec<String> = Decoder::new(&bytes)
        .filter_map(|r| match r.unwrap().record {
            DecodedRecord::ProviderInfo { name, .. } => Some(name.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["preloaded-sleep"]);
    // Registered again after the session, idle.
    daemon.wait_providers("preloaded-sleep", 1);
    std::thread::sleep(Duration::from_millis(50));
    let _ = program.kill();
    let _ = program.wait();
}

//! Many short-lived processes under `fxtrace record --preload` (issue 37): each one is a
//! provider of its own with its context switches, flushed at its exit, none lost, also when
//! hundreds start at once.

use crate::preload_support;

use preload_support::{decode, perf_allowed, record_preload, Summary};

/// How many processes start at once.
const PROCESSES: usize = 300;

#[test]
fn hundreds_of_concurrent_short_processes_are_each_a_provider_with_their_switches() {
    if !perf_allowed("hundreds_of_concurrent_short_processes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = format!("for i in $(seq {PROCESSES}); do sleep 0.2 & done; wait");
    let (out, bytes) = record_preload(dir.path(), &[], &["sh", "-c", &script], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The recorder's table says LOST for a provider whose process ended without STOPPED.
    assert!(!err.contains("LOST"), "{err}");
    let s = Summary::of(&decode(&bytes));
    let sleeps: Vec<u32> = s
        .providers
        .iter()
        .filter(|(_, name)| name.as_str() == "sleep")
        .map(|(&id, _)| id)
        .collect();
    assert_eq!(sleeps.len(), PROCESSES, "one provider per sleep: {err}");
    for provider in sleeps {
        // Its process: the pid of its events' thread (the capture summary is its own).
        let pid = s
            .events
            .iter()
            .find(|e| e.0 == provider && e.4 == "fxtrace: kernel capture summary")
            .map(|e| e.1)
            .unwrap_or_else(|| panic!("provider {provider} was not flushed at exit"));
        assert!(
            s.switched_tids(provider).contains(&pid),
            "provider {provider}: the switches of its main thread (pid {pid})"
        );
        assert!(
            s.processes.get(&pid).is_some_and(|n| n.contains("sleep")),
            "provider {provider}: process {pid} named"
        );
    }
}

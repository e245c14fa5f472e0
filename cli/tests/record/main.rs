//! `fxtrace record` and `fxtrace status` from the command line, per process and system-wide, and the sudo script.
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

/// The workspace root (the tests read fixtures, scripts and examples from there).
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[path = "../../../tests/fake_perf/mod.rs"]
mod fake_perf;
#[path = "../support/mod.rs"]
mod support;

mod cli;
mod kernel_provider;
mod lifecycle;
mod pidmap;
mod readme_snippet;
mod record_run;
mod sched;
mod system_wide;
mod threads;
mod trace_system_script;
mod ux;
mod why_slow;

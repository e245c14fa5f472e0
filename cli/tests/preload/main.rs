//! The preload object and the C API linked from C: tracing unmodified programs.
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

/// The workspace root (the tests read fixtures, scripts and examples from there).
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[path = "../preload_support/mod.rs"]
mod preload_support;
#[path = "../service_support/mod.rs"]
mod service_support;
#[path = "../support/mod.rs"]
mod support;

mod c_api_example;
mod children;
mod exec;
mod failed_exec;
mod kernel_symbols;
mod no_manager;
mod own_engine;
mod record;
mod service;
mod short;
mod why_slow;

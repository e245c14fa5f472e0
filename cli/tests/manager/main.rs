//! The manager and its providers: sessions, hostile peers, the provider client, the clock hand-off, init-record ordering.
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

/// The workspace root (the tests read fixtures, scripts and examples from there).
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[path = "../../../tests/daemon/mod.rs"]
mod daemon;
#[path = "../service_support/mod.rs"]
mod service_support;
#[path = "../support/mod.rs"]
mod support;

mod hostile;
mod init_order;
mod service;
mod sessions;

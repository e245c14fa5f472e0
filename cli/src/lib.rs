//! fxtrace's tools: the trace manager (sessions, registry, buffer draining, the archive), the
//! readers that check and convert FXT traces, and the reports of the `fxtrace` command line.
//!
//! Programs that are traced depend on the `fxtrace` library crate alone; this crate is what the
//! `fxtrace` binary is built from. See `docs/ARCHITECTURE.md` for how the two fit together.

pub mod check;
pub mod convert;
pub mod manager;
pub mod output_file;
pub mod preload_lib;
pub mod report;

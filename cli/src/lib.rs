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
pub mod read;
pub mod report;

/// Longest thread or process name a reader keeps for its labels, in bytes (cut at a character
/// boundary): Zircon's names have 32 bytes at most and Linux's 16, and a crafted trace must
/// not make each of its objects hold a copy of a 32 KB string.
pub const MAX_KEPT_NAME: usize = 256;

/// `name` as a reader keeps it ([`MAX_KEPT_NAME`]).
pub fn kept_name(name: &str) -> String {
    fxtrace_format::truncate_str(name, MAX_KEPT_NAME).to_owned()
}

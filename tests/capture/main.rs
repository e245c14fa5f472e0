//! Kernel capture through perf_event: rings, decoding, switches, LBR, sessions, FXT conversion.
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

#[path = "../daemon/mod.rs"]
mod daemon;
#[path = "../fake_perf/mod.rs"]
mod fake_perf;

mod lbr;
mod ring;
mod session;
mod switch;

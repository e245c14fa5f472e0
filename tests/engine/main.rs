//! The in-process engine: the shared buffer, its header, modes, records, crash salvage.
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

#[path = "../engine_support/mod.rs"]
mod engine_support;

mod buffer;
mod crash;
mod header;
mod modes;
mod records;

//! The record API seen by programs: `#[traced]` (sync, async, compiled out, compile errors), the `tracing` layer, the C API.
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

#[path = "../traced_support/mod.rs"]
mod traced_support;

mod async_fn;
mod before_start;
mod c_api;
mod compiled_out;
mod examples;
mod installed;
mod sync;
mod tracing_layer;

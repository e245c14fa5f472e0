//! The record API seen by programs: `#[traced]` (sync, async, compile errors), the `tracing`
//! layer, the C API. (`#[traced]` compiled out is `tests/compiled_out/`, a crate of its own:
//! in this one the `instrument` feature is always on.)
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

#[path = "../traced_support/mod.rs"]
mod traced_support;

mod async_fn;
mod before_start;
mod c_api;
mod examples;
mod installed;
mod sync;
mod tracing_layer;

//! The FXT codec: the example trace, golden words from the spec, robustness, round trips.
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

#[path = "../../examples/write_all_records.rs"]
mod write_all_records;

mod example;
mod golden;
mod robustness;
mod roundtrip;

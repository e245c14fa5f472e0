//! LLVM XRay import: instrumentation maps, logs, fixtures cross-checked against llvm-xray, robustness.
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

/// The workspace root (the tests read fixtures, scripts and examples from there).
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

mod fixtures;
mod instr_map;
mod robustness;
mod to_fxt;

//! Other formats: LLVM XRay FDR and perf.data import, Chrome trace-event JSON export.

pub mod chrome;
pub mod perf;
pub mod xray;

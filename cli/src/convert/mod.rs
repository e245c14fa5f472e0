//! Other formats: LLVM XRay FDR import and Chrome trace-event JSON export.

pub mod chrome;
pub mod xray;

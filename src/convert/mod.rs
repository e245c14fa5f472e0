//! Other formats: LLVM XRay FDR import (and later Chrome JSON export).

pub mod xray;

//! Reading traces: dump, stats, the Perfetto check, Chrome JSON, LBR reports, mapping blobs,
//! perf.data import.
//!
//! One test binary per area (each binary links the whole crate): the modules below are the
//! area's test files.

/// The workspace root (the tests read fixtures, scripts and examples from there).
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[path = "../../../format/examples/write_all_records.rs"]
mod write_all_records;

mod bounded;
mod capture_mmap;
mod chrome;
mod devtools;
mod dump;
mod import_perf;
mod perfetto;
mod report_lbr;
mod reports;
mod stats;

//! Reports computed from a trace: what a person wants to read, as text.
//!
//! [`lbr`] aggregates LAST_BRANCH blobs into branch-edge tables, [`symbolize`] names
//! addresses from ELF binaries, and [`lbr_text`] prints the hottest edges. [`stacks`] reads
//! call stacks (CPU samples, wait points with their wakers) and prints the hottest.

pub mod lbr;
pub mod lbr_text;
pub mod stacks;
pub mod symbolize;

pub use lbr::{Edge, EdgeStats, EdgeTable, LbrRead, LbrReport, ThreadNames};
pub use lbr_text::{write_lbr_text, Breakdown, LbrTextOptions};
pub use stacks::{
    write_samples_text, write_waits_text, StackRead, StackReport, StackTextOptions, WaitStats,
};
/// Decodes the whole trace in `input` (from its magic number record), handing each record to
/// `add`: where decoding stopped early (the records before it were handed over) and the
/// records and arguments the decoder skipped.
pub fn read_records<R: std::io::Read>(
    input: R,
    mut add: impl FnMut(&fxtrace_format::Decoded<'_>),
) -> (
    Option<fxtrace_format::DecodeError>,
    fxtrace_format::SkipCounts,
) {
    let mut decoder = fxtrace_format::StreamDecoder::new(input);
    let mut error = None;
    for item in decoder.by_ref() {
        match item {
            Ok(d) => add(&d),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    (error, decoder.skipped())
}

pub use symbolize::{
    BinaryInfo, BinarySpec, Location, MappedFile, Mapping, SymbolizeError, Symbolizer,
};

//! Reports computed from a trace: what a person wants to read, as text.
//!
//! [`spans`] says where a program's spans spent their time and why the slowest were slow,
//! [`sched`] what the scheduler did to each thread (`perf sched latency` from FXT), [`lbr`]
//! aggregates LAST_BRANCH blobs into branch-edge tables, [`symbolize`] names addresses from
//! ELF binaries, and [`lbr_text`] prints the hottest edges. [`stacks`] reads call stacks (CPU
//! samples, wait points with their wakers) and prints the hottest; [`text`] is how the
//! reports print durations and times.

pub mod lbr;
pub mod lbr_text;
pub mod sched;
pub mod spans;
pub mod stacks;
pub mod symbolize;
pub mod text;

pub use lbr::{Edge, EdgeStats, EdgeTable, LbrRead, LbrReport, ThreadNames};
pub use lbr_text::{write_lbr_text, Breakdown, LbrTextOptions};
pub use stacks::{
    write_samples_text, write_waits_text, StackRead, StackReport, StackTextOptions, WaitStats,
};

pub use symbolize::{
    BinaryInfo, BinarySpec, Location, MappedFile, Mapping, SymbolizeError, Symbolizer,
};

//! The Fuchsia Trace Format (FXT): bit fields, typed records and arguments, an encoder into
//! word slices, record framing, and a tolerant decoder.
//!
//! A crate of its own, for anyone who reads or writes FXT (fxtrace's engine, its tools, or a
//! program of yours): it depends on nothing but `thiserror` and does no I/O apart from reading
//! an `io::Read` in [`StreamDecoder`]. The spec it implements is the Fuchsia Trace Format
//! (`fuchsia.dev/fuchsia-src/reference/tracing/trace-format`); each bit field in [`fields`]
//! names the spec's table it comes from.
//!
//! # Encoding
//!
//! Each record type is a plain struct borrowing its strings and arguments ([`Event`],
//! [`Blob`], [`StringRecord`], …, or any of them as a [`Record`]). [`Encode::words`] gives
//! the exact size; [`Encode::write`] writes into a caller's `&mut [u64]` without allocating,
//! so the engine can reserve space in shared memory and encode in place. Limits are typed
//! errors ([`EncodeError`]), never truncation or panics.
//!
//! ```
//! use fxtrace_format::{Arg, ArgValue, Encode, Event, EventKind, StringRef, ThreadRef};
//!
//! let args = [Arg::new("bytes", ArgValue::U32(512))];
//! let event = Event {
//!     ticks: 1_000,
//!     thread: ThreadRef::Index(1),
//!     category: StringRef::Index(1),
//!     name: StringRef::Inline("read"),
//!     args: &args,
//!     kind: EventKind::DurationBegin,
//! };
//! let mut slot = [0u64; 8];
//! let n = event.words()?;
//! assert_eq!(event.write(&mut slot[..n])?, n);
//! # Ok::<(), fxtrace_format::EncodeError>(())
//! ```
//!
//! # Framing
//!
//! [`record_type`], [`record_words`] and [`scan_records`] find record boundaries without
//! decoding contents: what a trace manager needs to salvage a buffer "up to the last
//! well-formed record". [`CheckedRecords`] carries bytes a scan accepted, so they are not
//! walked twice. This is the one record-header walk of fxtrace: the chunk-aware scanner of a
//! live trace buffer (in the `fxtrace` crate) runs it inside each chunk run.
//!
//! # Decoding
//!
//! [`Decoder`] iterates a byte slice without copying; [`StreamDecoder`] reads any
//! `io::Read`. Both resolve strings and threads with per-provider tables and convert
//! timestamps to nanoseconds ([`Decoded`], [`DecodedRecord`]).
//!
//! ```
//! use fxtrace_format::{Decoder, DecodedRecord, Initialization, RecordWriter};
//!
//! let mut w = RecordWriter::with_magic();
//! w.push(&Initialization { ticks_per_second: 2_000_000_000 })?;
//! let bytes = w.to_bytes();
//! let records: Vec<_> = Decoder::new(&bytes).collect::<Result<_, _>>()?;
//! assert_eq!(records[0].record, DecodedRecord::Magic);
//! assert_eq!(records[1].ticks_per_second, 2_000_000_000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod args;
mod decode;
mod decoded;
mod error;
pub mod fields;
mod framing;
pub mod lbr;
pub mod mmap;
mod record;
mod refs;
pub mod sched;
mod sink;
pub mod stack;
mod summary;
mod types;
mod writer;

// The engine's in-place encoding (the `fxtrace` crate): not part of this crate's API.
#[doc(hidden)]
pub use args::{fit_args, ScalarArg};
pub use args::{Arg, ArgValue};
pub use decode::{
    Decoder, RecordHead, SkipCounts, StreamDecoder, Visitor, DEFAULT_TICKS_PER_SECOND,
    MAX_PROVIDER_TABLES, STRING_NOT_KEPT, TABLE_BUDGET_BYTES, TABLE_ENTRY_COST,
};
pub use decoded::{
    Decoded, DecodedArg, DecodedArgs, DecodedEvent, DecodedEventKind, DecodedRecord, DecodedValue,
    LargeBlobEvent, RecordKind, RelativeLine, Thread, ThreadStateName, Timestamp,
};
pub use error::{DecodeError, DecodeErrorKind, EncodeError, FramingError, FramingErrorKind};
pub use framing::{
    check_frame, record_type, record_words, scan_records, scan_words, walk_records, CheckedRecords,
    RecordWalk, Scan, ScanStop, WalkStop, Without,
};
pub use record::{
    Blob, ContextSwitch, Encode, Event, EventKind, Initialization, KernelObject, LargeBlob,
    LargeBlobMetadata, Log, MagicNumber, ProviderEvent, ProviderInfo, ProviderSection, Record,
    SchedContextSwitch, SchedThreadWakeup, StringRecord, ThreadRecord, UserspaceObject,
};
pub use refs::{truncate_str, ProcessRef, StringRef, ThreadRef, STRING_REF_INLINE_FLAG};
#[doc(hidden)]
pub use sink::{Cursor, Sink};
pub use summary::{
    listed_entry, Summary, DROP_MARKER_ARG, MANAGER_PROVIDER_ID, MANAGER_PROVIDER_NAME,
    MARKER_CATEGORY, MARKER_PROVIDER_ARG, MAX_PROVIDERS_LISTED,
};
pub use types::{
    ticks_to_ns, ArgType, BlobType, EventType, LargeBlobFormat, MetadataType, ObjectType,
    RecordType, SchedulingType, ThreadState, LARGE_RECORD_TYPE_BLOB, MAGIC_NUMBER, MAGIC_WORD,
    MAX_ARGS, MAX_BLOB_PAYLOAD, MAX_LARGE_RECORD_WORDS, MAX_PROVIDER_EVENT, MAX_PROVIDER_NAME_LEN,
    MAX_RECORD_WORDS, MAX_STRING_INDEX, MAX_STRING_LEN, MAX_THREAD_INDEX,
    PROVIDER_EVENT_BUFFER_OVERFLOW, TRACE_INFO_TYPE_MAGIC,
};
pub use writer::{encode_to_vec, words_to_bytes, BatchError, BatchOut, BatchWriter, RecordWriter};

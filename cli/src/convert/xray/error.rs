//! Errors of the XRay log reader: what went wrong, and at which byte.

/// A malformed or unsupported XRay log, located by byte offset in the file.
///
/// Returned by [`read_log`](super::read_log) when not even the file header can be
/// read, and kept in [`XrayLog::error`](super::XrayLog::error) when decoding stopped
/// part-way, after everything before [`offset`](Self::offset) was decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed XRay log at byte offset {offset}: {kind}")]
pub struct XrayError {
    /// Offset from the start of the file of the record (or field) that could not be read.
    pub offset: u64,
    /// What is wrong there.
    pub kind: XrayErrorKind,
}

impl XrayError {
    /// An error of `kind` at byte `offset`.
    pub fn new(offset: usize, kind: XrayErrorKind) -> Self {
        Self {
            offset: offset as u64,
            kind,
        }
    }
}

/// What made an XRay log unreadable at some offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum XrayErrorKind {
    /// The file is shorter than the 32-byte file header.
    #[error("file of {len} bytes is shorter than the 32-byte XRay file header")]
    TooShortForHeader {
        /// Length of the file.
        len: usize,
    },
    /// The header's `type` is neither basic (0) nor FDR (1).
    #[error("unknown XRay log type {log_type} (0 = basic/naive, 1 = FDR)")]
    UnknownLogType {
        /// The `type` field as read (little-endian).
        log_type: u16,
    },
    /// The header's version is not one this reader knows for that log type.
    #[error("unsupported {mode} log version {version} (supported: {supported})")]
    UnsupportedVersion {
        /// "FDR" or "basic".
        mode: &'static str,
        /// The version field.
        version: u16,
        /// The supported range, for the message.
        supported: &'static str,
    },
    /// The header reads as a valid header only when byte-swapped: a big-endian log.
    #[error("big-endian XRay logs are not supported (header reads as version {version}, type {log_type} when byte-swapped)")]
    BigEndian {
        /// Version, read big-endian.
        version: u16,
        /// Type, read big-endian.
        log_type: u16,
    },
    /// The file ends inside a record.
    #[error("{record} needs {needed} bytes but only {available} remain")]
    Truncated {
        /// Name of the record being read.
        record: &'static str,
        /// Bytes that record needs from its start.
        needed: u64,
        /// Bytes left in the file from the record's start.
        available: u64,
    },
    /// A record extends past the end of its buffer (BufferExtents or fixed buffer size).
    #[error("{record} of {len} bytes runs {overrun} bytes past the end of its buffer")]
    BufferOverrun {
        /// Name of the record being read.
        record: &'static str,
        /// Length of the record including any payload.
        len: u64,
        /// How far past the buffer's end it reaches.
        overrun: u64,
    },
    /// An FDR metadata record kind beyond the known ones (0..=9).
    #[error("unknown FDR metadata record kind {kind}")]
    UnknownMetadataKind {
        /// The 7-bit kind.
        kind: u8,
    },
    /// An FDR function record action beyond the known ones (0..=3).
    #[error("unknown FDR function record action {action}")]
    UnknownFunctionAction {
        /// The 3-bit action.
        action: u8,
    },
    /// A basic-mode record whose record type is neither NORMAL (0) nor ARG_PAYLOAD (1).
    #[error("unknown basic-mode record type {record_type}")]
    UnknownBasicRecordType {
        /// The 16-bit record type.
        record_type: u16,
    },
    /// A basic-mode NORMAL record whose entry type is beyond the known ones (0..=3).
    #[error("unknown basic-mode entry type {entry_type}")]
    UnknownBasicEntryType {
        /// The 8-bit type.
        entry_type: u8,
    },
    /// A record appears where the FDR grammar does not allow it.
    #[error("{found} record is not allowed after {after}")]
    UnexpectedRecord {
        /// Record found.
        found: &'static str,
        /// What preceded it (grammar state).
        after: &'static str,
    },
    /// A custom or typed event marker with a size that is zero or negative.
    #[error("{record} with non-positive payload size {size}")]
    BadEventSize {
        /// Name of the marker record.
        record: &'static str,
        /// The size field.
        size: i32,
    },
    /// A version-1 FDR log whose header gives no buffer size, so EndOfBuffer cannot be skipped.
    #[error("version-1 FDR log with a zero buffer_size in its header")]
    ZeroBufferSize,
    /// A basic-mode argument payload that does not follow an entry of the same function and thread.
    #[error("argument payload for function {func_id} (tid {tid}) does not follow an entry of that function and thread")]
    ArgPayloadMismatch {
        /// Function id in the payload record.
        func_id: i32,
        /// Thread id in the payload record.
        tid: u32,
    },
}

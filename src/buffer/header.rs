//! The trace buffer's 128-byte header, its geometry, and the record framing a reader checks.
//!
//! Provider (the engine) and manager both map the same sealed memfd. This module is what they
//! agree on, so it depends on nothing else in the crate but `format` (whose record framing walk
//! the chunk-aware scanner runs inside each chunk run): the manager reads buffers with it and
//! never imports `engine`.
//!
//! # Layout (Fuchsia's `trace_buffer_header`, trace-engine's `buffer_internal.h`)
//!
//! | offset | size | field                  |
//! |-------:|-----:|------------------------|
//! |      0 |    8 | `magic` = [`MAGIC`]    |
//! |      8 |    2 | `version` = 0          |
//! |     10 |    1 | `buffering_mode`       |
//! |     11 |    1 | `reserved1`            |
//! |     12 |    4 | `wrapped_count`        |
//! |     16 |    8 | `total_size`           |
//! |     24 |    8 | `durable_buffer_size`  |
//! |     32 |    8 | `rolling_buffer_size`  |
//! |     40 |    8 | `durable_data_end`     |
//! |     48 |   16 | `rolling_data_end[2]`  |
//! |     64 |    8 | `num_records_dropped`  |
//! |     72 |   56 | `reserved[7]` (the first five are the fxtrace extension below) |
//!
//! After the header come the durable buffer (absent in oneshot mode) and one or two rolling
//! buffers, with no gaps ([`BufferGeometry`]).
//!
//! # The fxtrace extension: chunked rolling buffers
//!
//! Fuchsia's engine packs rolling records densely with one shared `fetch_add` per record.
//! fxtrace's engine hands each writer thread a *chunk* of a rolling buffer instead and lets it
//! bump a private cursor inside (two threads sharing one atomic offset cost 150–210 ns per record
//! each on the reference machine, against 21 ns with private cursors). Chunks leave unused tails,
//! so a reader needs to know where chunks are. Reserved header words describe it, and what
//! the engine dropped:
//!
//! - `reserved[0]` (offset 72) = [`SharedHeader::chunk_size`]: 0 means the plain Fuchsia layout
//!   (dense records); otherwise the chunk size in bytes (a multiple of 8, at least
//!   [`MIN_CHUNK_SIZE`], at most `rolling_buffer_size`).
//! - `reserved[1]` (offset 80) = [`SharedHeader::fxtrace_flags`]: bit 0
//!   ([`FLAG_DURABLE_BUFFER_FULL`]) says the durable buffer filled and the engine stopped tracing.
//! - `reserved[2]` (offset 88) = [`SharedHeader::dropped_before_start`]: of
//!   `num_records_dropped`, the records dropped before the trace started (the program wrote
//!   them between its provider's registration and the start), so that a reader does not take
//!   them for a full buffer.
//! - `reserved[3]` (offset 96) = [`SharedHeader::rolling_position`]: where the engine's rolling
//!   allocator is, published at each chunk-run reservation (the one `fetch_add` per run) and
//!   each buffer switch: the next chunk's offset in the current rolling buffer in bits 0..40
//!   (it may run past the buffer's end: the buffer is full), the wrapped count modulo 2^20 in
//!   bits 44..63 ([`position_offset`], [`position_wrapped`]). The engine never reads it back.
//! - `reserved[4]` (offset 104) = [`SharedHeader::durable_position`]: bytes handed out of the
//!   durable buffer (past its size once it is full), published at each reservation.
//!
//! The two positions let a manager show how full a buffer is while it is written (the data
//! ends are written only at a switch or a stop); they are figures, never bounds of a read.
//!
//! The chunked layout of one rolling buffer, when `chunk_size` = C is not 0:
//!
//! - Chunk *k* covers buffer offsets `[k*C, (k+1)*C)`; the last one may be shorter when the
//!   rolling buffer size is not a multiple of C.
//! - A writer reserves a *run* of one or more consecutive whole chunks (fxtrace's engine: a
//!   thread's runs grow from one chunk to 16 KiB, and a larger record gets a run of its own). A
//!   run at the end of the buffer may be shorter than its tag says. The first word of a run is
//!   its *chunk tag*
//!   ([`make_chunk_tag`]): [`CHUNK_TAG_MAGIC`] in bits 48..63, the run length in chunks in bits
//!   32..47, and the buffer's full `wrapped_count` in bits 0..31. Records follow the tag densely.
//! - **A record never crosses the end of its run.**
//! - **A zero word where a record header is expected means "the rest of this run is unused".**
//!   Writers keep that true by storing a zero *terminator* word right after each record they
//!   reserve (unless the record ends exactly at the run end) and by storing each record's header
//!   word *last*, with `Release`: a half-written record still reads as zero.
//! - The tag is stored (with `Release`) after the word that follows it has been zeroed. A chunk
//!   whose first word is not a tag carrying the magic and the buffer's current `wrapped_count` is
//!   not part of the buffer's data: it is a chunk left over from an earlier lap of a circular or
//!   streaming buffer, never handed out, or handed out but not yet tagged (a writer killed in
//!   that window). Readers skip it.
//!
//! Because stale chunks are recognised by their tag, **rolling buffers are not zeroed when they
//! are reused**: no one pays for a memset on a buffer switch. The whole data area is zeroed only
//! when a trace starts with a clearing start mode, by the thread that calls start, before any
//! writer can reserve space. The durable buffer is never reused within a trace; it stays dense,
//! with one record after another, and a zero word marks its end.
//!
//! [`scan_records`] walks one buffer with these rules and yields the dense record bytes; it stops
//! at the first malformed record and reports its offset. Its output is standard FXT with no zero
//! header word, ready to append to an archive.

use core::mem::{align_of, offset_of, size_of};
use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::format::{CheckedRecords, FramingError, ScanStop};

// === layout constants ===

/// Size of the header in bytes.
pub const HEADER_SIZE: u64 = 128;
/// `TRACE_BUFFER_HEADER_MAGIC`: "buf\xEEhead" read big-endian.
pub const MAGIC: u64 = 0x6275_66ee_6865_6164;
/// `TRACE_BUFFER_HEADER_V0`.
pub const VERSION_V0: u16 = 0;

/// Byte offset of `magic`.
pub const OFFSET_MAGIC: usize = 0;
/// Byte offset of `version` (u16).
pub const OFFSET_VERSION: usize = 8;
/// Byte offset of `buffering_mode` (u8).
pub const OFFSET_BUFFERING_MODE: usize = 10;
/// Byte offset of `reserved1` (u8).
pub const OFFSET_RESERVED1: usize = 11;
/// Byte offset of `wrapped_count` (u32).
pub const OFFSET_WRAPPED_COUNT: usize = 12;
/// Byte offset of `total_size`.
pub const OFFSET_TOTAL_SIZE: usize = 16;
/// Byte offset of `durable_buffer_size`.
pub const OFFSET_DURABLE_BUFFER_SIZE: usize = 24;
/// Byte offset of `rolling_buffer_size`.
pub const OFFSET_ROLLING_BUFFER_SIZE: usize = 32;
/// Byte offset of `durable_data_end`.
pub const OFFSET_DURABLE_DATA_END: usize = 40;
/// Byte offset of `rolling_data_end[0]` (`[1]` follows at +8).
pub const OFFSET_ROLLING_DATA_END: usize = 48;
/// Byte offset of `num_records_dropped`.
pub const OFFSET_NUM_RECORDS_DROPPED: usize = 64;
/// Byte offset of `reserved[0]`, which fxtrace uses for the chunk size.
pub const OFFSET_CHUNK_SIZE: usize = 72;
/// Byte offset of `reserved[1]`, which fxtrace uses for its flags.
pub const OFFSET_FXTRACE_FLAGS: usize = 80;
/// Byte offset of `reserved[2]`, which fxtrace uses for the records dropped before the
/// trace started (a part of `num_records_dropped`).
pub const OFFSET_DROPPED_BEFORE_START: usize = 88;
/// Byte offset of `reserved[3]`, which fxtrace uses for the rolling allocator's position.
pub const OFFSET_ROLLING_POSITION: usize = 96;
/// Byte offset of `reserved[4]`, which fxtrace uses for the durable allocator's position.
pub const OFFSET_DURABLE_POSITION: usize = 104;

/// Bits of a rolling position word (and of the engine's allocator word) holding the offset.
pub const POSITION_OFFSET_BITS: u32 = 41;
/// Shift of the wrapped count (modulo 2^20) in a rolling position word.
pub const POSITION_WRAPPED_SHIFT: u32 = 44;

/// The offset in a rolling position word (`reserved[3]`).
pub const fn position_offset(word: u64) -> u64 {
    word & ((1 << POSITION_OFFSET_BITS) - 1)
}

/// The wrapped count modulo 2^20 in a rolling position word (`reserved[3]`).
pub const fn position_wrapped(word: u64) -> u32 {
    (word >> POSITION_WRAPPED_SHIFT) as u32
}

/// `kMinPhysicalBufferSize`: smallest buffer (header included).
pub const MIN_BUFFER_SIZE: u64 = 4096;
/// `kMaxPhysicalBufferSize` = `kMaxRollingBufferSize`: largest buffer (header included).
pub const MAX_BUFFER_SIZE: u64 = 1 << 32;
/// Buffer sizes are multiples of this.
pub const BUFFER_SIZE_GRANULE: u64 = 4096;
/// `kMinDurableBufferSize`: room for the initialization record.
pub const MIN_DURABLE_BUFFER_SIZE: u64 = 16;
/// `kMaxDurableBufferSize`.
pub const MAX_DURABLE_BUFFER_SIZE: u64 = 1 << 20;

/// fxtrace flag (in `reserved[1]`): the durable buffer filled and tracing stopped.
pub const FLAG_DURABLE_BUFFER_FULL: u64 = 1 << 0;

// === record framing ===

/// Bits 0..3 of a record header word: the record type.
pub const RECORD_TYPE_MASK: u64 = 0xf;
/// Bits 4..15 of a record header word: the size in 64-bit words, header included.
pub const RECORD_SIZE_SHIFT: u32 = 4;
/// Mask of the 12-bit size field (after shifting).
pub const RECORD_SIZE_MASK: u64 = 0xfff;
/// Record type 15 ("large record") keeps its size in bits 4..35.
pub const LARGE_RECORD_TYPE: u64 = 15;
/// Mask of the 32-bit size field of a large record (after shifting).
pub const LARGE_RECORD_SIZE_MASK: u64 = 0xffff_ffff;
/// Largest record the engine writes, in words (the 12-bit size field's maximum).
pub const MAX_RECORD_WORDS: u64 = RECORD_SIZE_MASK;
/// Largest record the engine writes, in bytes (32760).
pub const MAX_RECORD_BYTES: u64 = MAX_RECORD_WORDS * 8;

/// `header` with its size field replaced by `words` (which must fit the field).
pub const fn with_record_size_words(header: u64, words: u64) -> u64 {
    if header & RECORD_TYPE_MASK == LARGE_RECORD_TYPE {
        (header & !(LARGE_RECORD_SIZE_MASK << RECORD_SIZE_SHIFT))
            | ((words & LARGE_RECORD_SIZE_MASK) << RECORD_SIZE_SHIFT)
    } else {
        (header & !(RECORD_SIZE_MASK << RECORD_SIZE_SHIFT))
            | ((words & RECORD_SIZE_MASK) << RECORD_SIZE_SHIFT)
    }
}

// === chunk tags (fxtrace extension) ===

/// Smallest chunk size the layout allows: a tag and at least one one-word record.
pub const MIN_CHUNK_SIZE: u64 = 16;
/// Bits 48..63 of every chunk tag.
pub const CHUNK_TAG_MAGIC: u64 = 0xf7c4;
const CHUNK_TAG_MAGIC_SHIFT: u32 = 48;
const CHUNK_TAG_RUN_SHIFT: u32 = 32;
const CHUNK_TAG_RUN_MASK: u64 = 0xffff;

/// The first word of a run of `run_chunks` chunks written while the buffer's wrapped count is
/// `wrapped_count`.
pub const fn make_chunk_tag(wrapped_count: u32, run_chunks: u16) -> u64 {
    (CHUNK_TAG_MAGIC << CHUNK_TAG_MAGIC_SHIFT)
        | ((run_chunks as u64) << CHUNK_TAG_RUN_SHIFT)
        | wrapped_count as u64
}

/// `(wrapped_count, run_chunks)` of a chunk tag, or `None` if `word` is not one.
pub const fn parse_chunk_tag(word: u64) -> Option<(u32, u16)> {
    let run = ((word >> CHUNK_TAG_RUN_SHIFT) & CHUNK_TAG_RUN_MASK) as u16;
    if word >> CHUNK_TAG_MAGIC_SHIFT != CHUNK_TAG_MAGIC || run == 0 {
        return None;
    }
    Some((word as u32, run))
}

// === buffering mode ===

/// How a provider's buffer is used: `trace_buffering_mode_t`, whose discriminants are the
/// header's numbering (0/1/2); the control protocol's FIDL numbering (1/2/3) is
/// [`BufferingMode::to_fidl`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BufferingMode {
    /// One buffer; when full, further records are dropped.
    Oneshot = 0,
    /// Two rolling buffers used alternately; the newest data is kept.
    Circular = 1,
    /// Two rolling buffers; a full one is saved by the manager while the other is written.
    Streaming = 2,
}

impl BufferingMode {
    /// The mode stored as `raw`, if valid.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::Oneshot),
            1 => Some(Self::Circular),
            2 => Some(Self::Streaming),
            _ => None,
        }
    }

    /// Number of rolling buffers the mode uses (1 or 2).
    pub const fn rolling_buffer_count(self) -> usize {
        match self {
            Self::Oneshot => 1,
            Self::Circular | Self::Streaming => 2,
        }
    }
}

// === geometry ===

/// A buffer size the engine cannot use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// Not a multiple of 4096.
    #[error("buffer size {0} is not a multiple of 4096")]
    NotPageMultiple(u64),
    /// Smaller than 4096.
    #[error("buffer size {0} is below the minimum of 4096")]
    TooSmall(u64),
    /// Larger than 4 GiB.
    #[error("buffer size {0} is above the maximum of 4 GiB")]
    TooLarge(u64),
}

/// Where the durable and rolling buffers lie (Fuchsia's `trace_context::ComputeBufferSizes`,
/// `zircon/system/ulib/trace-engine/context.cc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferGeometry {
    /// The buffering mode the geometry is for.
    pub mode: BufferingMode,
    /// Size of the whole buffer, header included.
    pub total_size: u64,
    /// Size of the durable buffer (0 in oneshot mode).
    pub durable_buffer_size: u64,
    /// Size of each rolling buffer.
    pub rolling_buffer_size: u64,
}

impl BufferGeometry {
    /// `ComputeBufferSizes`: oneshot gets one rolling buffer of `total - 128`; the other modes
    /// get `durable = min(avail / 16, 1 MiB)` (rounded so both rolling buffers are multiples of
    /// 8) and two equal rolling buffers sharing the rest.
    pub fn compute(mode: BufferingMode, total_size: u64) -> Result<Self, GeometryError> {
        if total_size < MIN_BUFFER_SIZE {
            return Err(GeometryError::TooSmall(total_size));
        }
        if total_size > MAX_BUFFER_SIZE {
            return Err(GeometryError::TooLarge(total_size));
        }
        if total_size % BUFFER_SIZE_GRANULE != 0 {
            return Err(GeometryError::NotPageMultiple(total_size));
        }
        let avail = total_size - HEADER_SIZE;
        let (durable_buffer_size, rolling_buffer_size) = match mode {
            BufferingMode::Oneshot => (0, avail),
            BufferingMode::Circular | BufferingMode::Streaming => {
                let mut durable = (avail / 16).min(MAX_DURABLE_BUFFER_SIZE);
                // `avail - durable` must be a multiple of 16 so each half is a multiple of 8;
                // `avail` is a multiple of 8, so the remainder is 0 or 8.
                durable += (avail - durable) & 15;
                (durable, (avail - durable) / 2)
            }
        };
        Ok(Self {
            mode,
            total_size,
            durable_buffer_size,
            rolling_buffer_size,
        })
    }

    /// Byte offset of the durable buffer from the start of the mapping.
    pub const fn durable_offset(&self) -> u64 {
        HEADER_SIZE
    }

    /// Byte offset of rolling buffer `index` (0 or 1) from the start of the mapping.
    pub const fn rolling_offset(&self, index: usize) -> u64 {
        HEADER_SIZE + self.durable_buffer_size + index as u64 * self.rolling_buffer_size
    }
}

// === header fields (plain values) ===

/// A header read out of a buffer (or to be written into one), field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderFields {
    /// Must be [`MAGIC`].
    pub magic: u64,
    /// Must be [`VERSION_V0`].
    pub version: u16,
    /// Raw [`BufferingMode`].
    pub buffering_mode: u8,
    /// Zero.
    pub reserved1: u8,
    /// Times writing wrapped between rolling buffers; `wrapped_count & 1` is the current one.
    pub wrapped_count: u32,
    /// Size of the whole buffer, header included.
    pub total_size: u64,
    /// Size of the durable buffer (0 in oneshot).
    pub durable_buffer_size: u64,
    /// Size of each rolling buffer.
    pub rolling_buffer_size: u64,
    /// End of durable data (bytes from the durable buffer's start).
    pub durable_data_end: u64,
    /// End of data in each rolling buffer (bytes from that buffer's start).
    pub rolling_data_end: [u64; 2],
    /// Records dropped so far.
    pub num_records_dropped: u64,
    /// Reserved words; `reserved[0]` is the fxtrace chunk size, `reserved[1]` fxtrace flags,
    /// `reserved[2]` the records dropped before the start, `reserved[3]` and `reserved[4]` the
    /// rolling and durable allocators' positions.
    pub reserved: [u64; 7],
}

/// What a header says that a reader cannot accept (Fuchsia's `BufferHeaderReader::Validate`,
/// `zircon/system/ulib/trace-reader/reader_internal.cc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Magic is not [`MAGIC`].
    #[error("bad header magic {0:#018x}")]
    BadMagic(u64),
    /// Version is not 0.
    #[error("unsupported header version {0}")]
    BadVersion(u16),
    /// The mapped size is not a multiple of 8.
    #[error("buffer size {0} is not a multiple of 8")]
    SizeUnaligned(u64),
    /// Buffering mode is not 0, 1 or 2.
    #[error("bad buffering mode {0}")]
    BadBufferingMode(u8),
    /// `total_size` differs from the size of the buffer.
    #[error("header total_size {header} differs from the buffer size {actual}")]
    TotalSizeMismatch {
        /// `total_size` in the header.
        header: u64,
        /// Size of the buffer actually mapped.
        actual: u64,
    },
    /// The durable or rolling buffer size is not a multiple of 8.
    #[error("{field} {value} is not a multiple of 8")]
    FieldUnaligned {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// Oneshot needs `rolling == size - 128` and `durable == 0`.
    #[error("oneshot geometry durable={durable} rolling={rolling} does not fit size {size}")]
    BadOneshotGeometry {
        /// `durable_buffer_size`.
        durable: u64,
        /// `rolling_buffer_size`.
        rolling: u64,
        /// Buffer size.
        size: u64,
    },
    /// Circular/streaming need `rolling < size/2`, `durable < rolling` and no gaps.
    #[error("geometry durable={durable} rolling={rolling} does not fit size {size}")]
    BadGeometry {
        /// `durable_buffer_size`.
        durable: u64,
        /// `rolling_buffer_size`.
        rolling: u64,
        /// Buffer size.
        size: u64,
    },
    /// `rolling_data_end[index]` is past the buffer or unaligned.
    #[error("rolling_data_end[{index}] = {value} is out of range or unaligned")]
    BadRollingDataEnd {
        /// 0 or 1.
        index: usize,
        /// The value.
        value: u64,
    },
    /// `durable_data_end` is past the durable buffer or unaligned.
    #[error("durable_data_end = {0} is out of range or unaligned")]
    BadDurableDataEnd(u64),
    /// The fxtrace chunk size is not 0 and not a usable chunk size.
    #[error("fxtrace chunk size {0} is not 0 or a multiple of 8 in 16..=rolling_buffer_size")]
    BadChunkSize(u64),
}

impl HeaderFields {
    /// `InitBufferHeader`: all zero but magic, version, mode and the three sizes, plus the
    /// fxtrace chunk size (0 for the plain Fuchsia layout).
    pub fn initial(geometry: &BufferGeometry, chunk_size: u64) -> Self {
        let mut fields = Self {
            magic: MAGIC,
            version: VERSION_V0,
            buffering_mode: geometry.mode as u8,
            total_size: geometry.total_size,
            durable_buffer_size: geometry.durable_buffer_size,
            rolling_buffer_size: geometry.rolling_buffer_size,
            ..Self::default()
        };
        fields.reserved[0] = chunk_size;
        fields
    }

    /// Decode the first 128 bytes of a buffer (little-endian, as laid out in memory).
    pub fn from_bytes(bytes: &[u8; HEADER_SIZE as usize]) -> Self {
        let u64_at = |off: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[off..off + 8]);
            u64::from_le_bytes(word)
        };
        let mut reserved = [0u64; 7];
        for (i, word) in reserved.iter_mut().enumerate() {
            *word = u64_at(OFFSET_CHUNK_SIZE + 8 * i);
        }
        Self {
            magic: u64_at(OFFSET_MAGIC),
            version: u16::from_le_bytes([bytes[OFFSET_VERSION], bytes[OFFSET_VERSION + 1]]),
            buffering_mode: bytes[OFFSET_BUFFERING_MODE],
            reserved1: bytes[OFFSET_RESERVED1],
            wrapped_count: u32::from_le_bytes([
                bytes[OFFSET_WRAPPED_COUNT],
                bytes[OFFSET_WRAPPED_COUNT + 1],
                bytes[OFFSET_WRAPPED_COUNT + 2],
                bytes[OFFSET_WRAPPED_COUNT + 3],
            ]),
            total_size: u64_at(OFFSET_TOTAL_SIZE),
            durable_buffer_size: u64_at(OFFSET_DURABLE_BUFFER_SIZE),
            rolling_buffer_size: u64_at(OFFSET_ROLLING_BUFFER_SIZE),
            durable_data_end: u64_at(OFFSET_DURABLE_DATA_END),
            rolling_data_end: [
                u64_at(OFFSET_ROLLING_DATA_END),
                u64_at(OFFSET_ROLLING_DATA_END + 8),
            ],
            num_records_dropped: u64_at(OFFSET_NUM_RECORDS_DROPPED),
            reserved,
        }
    }

    /// Encode as the 128 bytes of a header.
    pub fn to_bytes(&self) -> [u8; HEADER_SIZE as usize] {
        let mut bytes = [0u8; HEADER_SIZE as usize];
        let mut put = |off: usize, src: &[u8]| bytes[off..off + src.len()].copy_from_slice(src);
        put(OFFSET_MAGIC, &self.magic.to_le_bytes());
        put(OFFSET_VERSION, &self.version.to_le_bytes());
        put(OFFSET_BUFFERING_MODE, &[self.buffering_mode]);
        put(OFFSET_RESERVED1, &[self.reserved1]);
        put(OFFSET_WRAPPED_COUNT, &self.wrapped_count.to_le_bytes());
        put(OFFSET_TOTAL_SIZE, &self.total_size.to_le_bytes());
        put(
            OFFSET_DURABLE_BUFFER_SIZE,
            &self.durable_buffer_size.to_le_bytes(),
        );
        put(
            OFFSET_ROLLING_BUFFER_SIZE,
            &self.rolling_buffer_size.to_le_bytes(),
        );
        put(
            OFFSET_DURABLE_DATA_END,
            &self.durable_data_end.to_le_bytes(),
        );
        put(
            OFFSET_ROLLING_DATA_END,
            &self.rolling_data_end[0].to_le_bytes(),
        );
        put(
            OFFSET_ROLLING_DATA_END + 8,
            &self.rolling_data_end[1].to_le_bytes(),
        );
        put(
            OFFSET_NUM_RECORDS_DROPPED,
            &self.num_records_dropped.to_le_bytes(),
        );
        for (i, word) in self.reserved.iter().enumerate() {
            put(OFFSET_CHUNK_SIZE + 8 * i, &word.to_le_bytes());
        }
        bytes
    }

    /// The fxtrace chunk size (`reserved[0]`); 0 = plain Fuchsia layout.
    pub const fn chunk_size(&self) -> u64 {
        self.reserved[0]
    }

    /// The rolling allocator's published position (`reserved[3]`): offset in the current
    /// rolling buffer (may be past its end) and wrapped count modulo 2^20.
    pub const fn rolling_position(&self) -> (u64, u32) {
        (
            position_offset(self.reserved[3]),
            position_wrapped(self.reserved[3]),
        )
    }

    /// The durable allocator's published position (`reserved[4]`; may be past its end).
    pub const fn durable_position(&self) -> u64 {
        self.reserved[4]
    }

    /// The fxtrace flags (`reserved[1]`).
    pub const fn fxtrace_flags(&self) -> u64 {
        self.reserved[1]
    }

    /// Of `num_records_dropped`, those dropped before the trace started (`reserved[2]`):
    /// calls a provider's program made between its registration and the start. Never more
    /// than `num_records_dropped`, whatever the word says.
    pub const fn dropped_before_start(&self) -> u64 {
        if self.reserved[2] < self.num_records_dropped {
            self.reserved[2]
        } else {
            self.num_records_dropped
        }
    }

    /// `BufferHeaderReader::Validate`'s checks exactly, against the real buffer size. Returns the
    /// geometry the header describes. Does not look at the fxtrace extension words (see
    /// [`Self::validate_fxtrace_extension`]).
    pub fn validate(&self, buffer_size: u64) -> Result<BufferGeometry, HeaderError> {
        if self.magic != MAGIC {
            return Err(HeaderError::BadMagic(self.magic));
        }
        if self.version != VERSION_V0 {
            return Err(HeaderError::BadVersion(self.version));
        }
        if buffer_size % 8 != 0 {
            return Err(HeaderError::SizeUnaligned(buffer_size));
        }
        let mode = BufferingMode::from_raw(self.buffering_mode)
            .ok_or(HeaderError::BadBufferingMode(self.buffering_mode))?;
        if self.total_size != buffer_size {
            return Err(HeaderError::TotalSizeMismatch {
                header: self.total_size,
                actual: buffer_size,
            });
        }
        let rolling = self.rolling_buffer_size;
        let durable = self.durable_buffer_size;
        if rolling % 8 != 0 {
            return Err(HeaderError::FieldUnaligned {
                field: "rolling_buffer_size",
                value: rolling,
            });
        }
        if durable % 8 != 0 {
            return Err(HeaderError::FieldUnaligned {
                field: "durable_buffer_size",
                value: durable,
            });
        }
        let size = buffer_size;
        match mode {
            BufferingMode::Oneshot => {
                if Some(rolling) != size.checked_sub(HEADER_SIZE) || durable != 0 {
                    return Err(HeaderError::BadOneshotGeometry {
                        durable,
                        rolling,
                        size,
                    });
                }
            }
            BufferingMode::Circular | BufferingMode::Streaming => {
                let sum = rolling
                    .checked_mul(2)
                    .and_then(|r| r.checked_add(durable))
                    .and_then(|s| s.checked_add(HEADER_SIZE));
                if rolling >= size / 2 || durable >= rolling || sum != Some(size) {
                    return Err(HeaderError::BadGeometry {
                        durable,
                        rolling,
                        size,
                    });
                }
            }
        }
        for (index, &value) in self.rolling_data_end.iter().enumerate() {
            if value > rolling || value % 8 != 0 {
                return Err(HeaderError::BadRollingDataEnd { index, value });
            }
        }
        if self.durable_data_end > durable || self.durable_data_end % 8 != 0 {
            return Err(HeaderError::BadDurableDataEnd(self.durable_data_end));
        }
        Ok(BufferGeometry {
            mode,
            total_size: size,
            durable_buffer_size: durable,
            rolling_buffer_size: rolling,
        })
    }

    /// Check the fxtrace extension: the chunk size is 0 or a multiple of 8 between
    /// [`MIN_CHUNK_SIZE`] and `rolling_buffer_size`.
    pub fn validate_fxtrace_extension(&self) -> Result<(), HeaderError> {
        let chunk = self.chunk_size();
        if chunk != 0
            && (chunk % 8 != 0 || chunk < MIN_CHUNK_SIZE || chunk > self.rolling_buffer_size)
        {
            return Err(HeaderError::BadChunkSize(chunk));
        }
        Ok(())
    }

    /// How to frame rolling buffer `index` (0 or 1) whose data was written while the header's
    /// wrapped count had the value `wrapped_count`.
    pub const fn rolling_framing(&self, wrapped_count: u32) -> Framing {
        match self.chunk_size() {
            0 => Framing::Dense,
            chunk_size => Framing::Chunked {
                chunk_size,
                wrapped_count,
            },
        }
    }
}

// === shared (atomic) view ===

/// The header as it lies in shared memory: every field an atomic of the field's width, so that
/// provider and manager read and write it through atomics only (never `read_volatile`).
///
/// Rules (who writes what, when, and what publishes it) are given on each field. In short: only
/// the provider's engine writes the header, under its buffer-switch mutex, with `Release`
/// stores; the manager reads it with `Acquire` loads after a FIFO message (save request,
/// stopped) or after the provider died, and trusts nothing without [`HeaderFields::validate`].
#[repr(C)]
#[derive(Debug)]
pub struct SharedHeader {
    /// Rules: written once by the engine when it initialises the buffer, before any record.
    pub magic: AtomicU64,
    /// Rules: written once at initialisation.
    pub version: AtomicU16,
    /// Rules: written once at initialisation.
    pub buffering_mode: AtomicU8,
    /// Rules: zero.
    pub reserved1: AtomicU8,
    /// Rules: written by the engine under its switch mutex on every rolling-buffer switch (the
    /// new count) and at stop; `Release`. Read by the manager at stop or after a crash.
    pub wrapped_count: AtomicU32,
    /// Rules: written once at initialisation.
    pub total_size: AtomicU64,
    /// Rules: written once at initialisation.
    pub durable_buffer_size: AtomicU64,
    /// Rules: written once at initialisation.
    pub rolling_buffer_size: AtomicU64,
    /// Rules: 0 while running; written by the engine when the durable buffer fills and at stop,
    /// after every writer that reserved durable space has finished (at stop); `Release`.
    pub durable_data_end: AtomicU64,
    /// Rules: `[i]` is written by the engine (under its switch mutex) when buffer `i` is
    /// retired by a switch or fills in oneshot mode, and for the current buffer at stop; set to
    /// 0 when the buffer becomes current again or is marked saved. 0 while a buffer is being
    /// written: a reader that finds 0 after a crash scans the whole buffer. `Release`.
    pub rolling_data_end: [AtomicU64; 2],
    /// Rules: written by the engine (sum of its per-thread counters) on each switch and at
    /// stop; exact at stop. `Release`.
    pub num_records_dropped: AtomicU64,
    /// Rules (fxtrace extension, `reserved[0]`): written once at initialisation; 0 = dense
    /// Fuchsia layout, else the chunk size in bytes of the chunked layout (module docs).
    pub chunk_size: AtomicU64,
    /// Rules (fxtrace extension, `reserved[1]`): [`FLAG_DURABLE_BUFFER_FULL`] is set by the
    /// engine, under its switch mutex, when the durable buffer fills. `Release`.
    pub fxtrace_flags: AtomicU64,
    /// Rules (fxtrace extension, `reserved[2]`): written by the engine at a clearing start,
    /// while no writer can write: of the `num_records_dropped` it stores then, those counted
    /// before the start. `Relaxed`, published by the start's gate and read after a stop.
    pub dropped_before_start: AtomicU64,
    /// Rules (fxtrace extension, `reserved[3]`): the rolling allocator's word as of its last
    /// chunk-run reservation or buffer reset ([`position_offset`], [`position_wrapped`]),
    /// stored by the writer that made it. `Relaxed`: a figure for a manager's status, never
    /// read by the engine.
    pub rolling_position: AtomicU64,
    /// Rules (fxtrace extension, `reserved[4]`): the durable allocator's offset as of its last
    /// reservation or reset, stored by the writer that made it. `Relaxed`, as above.
    pub durable_position: AtomicU64,
    /// Rules: zero.
    pub reserved: [AtomicU64; 2],
}

const _: () = assert!(size_of::<SharedHeader>() == HEADER_SIZE as usize);
const _: () = assert!(align_of::<SharedHeader>() == 8);
const _: () = assert!(offset_of!(SharedHeader, magic) == OFFSET_MAGIC);
const _: () = assert!(offset_of!(SharedHeader, version) == OFFSET_VERSION);
const _: () = assert!(offset_of!(SharedHeader, buffering_mode) == OFFSET_BUFFERING_MODE);
const _: () = assert!(offset_of!(SharedHeader, reserved1) == OFFSET_RESERVED1);
const _: () = assert!(offset_of!(SharedHeader, wrapped_count) == OFFSET_WRAPPED_COUNT);
const _: () = assert!(offset_of!(SharedHeader, total_size) == OFFSET_TOTAL_SIZE);
const _: () = assert!(offset_of!(SharedHeader, durable_buffer_size) == OFFSET_DURABLE_BUFFER_SIZE);
const _: () = assert!(offset_of!(SharedHeader, rolling_buffer_size) == OFFSET_ROLLING_BUFFER_SIZE);
const _: () = assert!(offset_of!(SharedHeader, durable_data_end) == OFFSET_DURABLE_DATA_END);
const _: () = assert!(offset_of!(SharedHeader, rolling_data_end) == OFFSET_ROLLING_DATA_END);
const _: () = assert!(offset_of!(SharedHeader, num_records_dropped) == OFFSET_NUM_RECORDS_DROPPED);
const _: () = assert!(offset_of!(SharedHeader, chunk_size) == OFFSET_CHUNK_SIZE);
const _: () = assert!(offset_of!(SharedHeader, fxtrace_flags) == OFFSET_FXTRACE_FLAGS);
const _: () =
    assert!(offset_of!(SharedHeader, dropped_before_start) == OFFSET_DROPPED_BEFORE_START);
const _: () = assert!(offset_of!(SharedHeader, rolling_position) == OFFSET_ROLLING_POSITION);
const _: () = assert!(offset_of!(SharedHeader, durable_position) == OFFSET_DURABLE_POSITION);

impl SharedHeader {
    /// View the first 128 bytes at `ptr` as a shared header.
    ///
    /// # Safety
    ///
    /// `ptr` must be 8-byte aligned and valid for reads and writes of 128 bytes for `'a`
    /// (typically the start of a `MAP_SHARED` mapping that outlives `'a`), and every access to
    /// those bytes during `'a`, from any thread or process, must go through atomics.
    pub unsafe fn from_ptr<'a>(ptr: *mut u8) -> &'a SharedHeader {
        // SAFETY: the caller guarantees alignment, validity and atomic-only access; all-zero
        // and arbitrary bit patterns are valid for every atomic integer field.
        unsafe { &*ptr.cast::<SharedHeader>() }
    }

    /// Read every field.
    ///
    /// ATOMICS: `Acquire` loads, so that whatever the engine wrote before its `Release` stores
    /// of these fields (the records they describe) is visible to the reader.
    pub fn load(&self) -> HeaderFields {
        let a = Ordering::Acquire;
        let mut reserved = [0u64; 7];
        reserved[0] = self.chunk_size.load(a);
        reserved[1] = self.fxtrace_flags.load(a);
        reserved[2] = self.dropped_before_start.load(a);
        reserved[3] = self.rolling_position.load(a);
        reserved[4] = self.durable_position.load(a);
        for (dst, src) in reserved[5..].iter_mut().zip(&self.reserved) {
            *dst = src.load(a);
        }
        HeaderFields {
            magic: self.magic.load(a),
            version: self.version.load(a),
            buffering_mode: self.buffering_mode.load(a),
            reserved1: self.reserved1.load(a),
            wrapped_count: self.wrapped_count.load(a),
            total_size: self.total_size.load(a),
            durable_buffer_size: self.durable_buffer_size.load(a),
            rolling_buffer_size: self.rolling_buffer_size.load(a),
            durable_data_end: self.durable_data_end.load(a),
            rolling_data_end: [
                self.rolling_data_end[0].load(a),
                self.rolling_data_end[1].load(a),
            ],
            num_records_dropped: self.num_records_dropped.load(a),
            reserved,
        }
    }

    /// At a clearing start, while no writer can write: the trace begins with
    /// `dropped_before_start` records dropped, all of them before the start.
    ///
    /// ATOMICS: `Relaxed`: published by the start's `Release` gate store (writers) and by the
    /// stop's `Release` stores that follow it (the manager).
    pub fn store_dropped_at_start(&self, dropped_before_start: u64) {
        self.num_records_dropped
            .store(dropped_before_start, Ordering::Relaxed);
        self.dropped_before_start
            .store(dropped_before_start, Ordering::Relaxed);
    }

    /// Write every field (used for `InitBufferHeader`).
    ///
    /// ATOMICS: `Release` stores; `magic` goes last so that a reader that sees the magic sees
    /// the rest.
    pub fn store(&self, fields: &HeaderFields) {
        let r = Ordering::Release;
        self.version.store(fields.version, r);
        self.buffering_mode.store(fields.buffering_mode, r);
        self.reserved1.store(fields.reserved1, r);
        self.wrapped_count.store(fields.wrapped_count, r);
        self.total_size.store(fields.total_size, r);
        self.durable_buffer_size
            .store(fields.durable_buffer_size, r);
        self.rolling_buffer_size
            .store(fields.rolling_buffer_size, r);
        self.durable_data_end.store(fields.durable_data_end, r);
        self.rolling_data_end[0].store(fields.rolling_data_end[0], r);
        self.rolling_data_end[1].store(fields.rolling_data_end[1], r);
        self.num_records_dropped
            .store(fields.num_records_dropped, r);
        self.chunk_size.store(fields.reserved[0], r);
        self.fxtrace_flags.store(fields.reserved[1], r);
        self.dropped_before_start.store(fields.reserved[2], r);
        self.rolling_position.store(fields.reserved[3], r);
        self.durable_position.store(fields.reserved[4], r);
        for (dst, &src) in self.reserved.iter().zip(&fields.reserved[5..]) {
            dst.store(src, r);
        }
        self.magic.store(fields.magic, r);
    }
}

// === record scan ===

/// How the records of one buffer are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One record after another from offset 0; a zero word ends the data. Used for the durable
    /// buffer, and for rolling buffers when the header's chunk size is 0.
    Dense,
    /// The fxtrace chunked layout (module docs).
    Chunked {
        /// The header's chunk size in bytes.
        chunk_size: u64,
        /// The wrapped count under which the buffer was written (its chunk tags carry it).
        wrapped_count: u32,
    },
}

/// Arguments [`scan_records`] refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkFramingError {
    /// `data_end` is beyond the slice or not a multiple of 8.
    #[error("data end {data_end} is unaligned or beyond the {len}-byte buffer")]
    BadDataEnd {
        /// The requested end.
        data_end: u64,
        /// The slice length.
        len: usize,
    },
    /// The chunk size is below 16 or not a multiple of 8.
    #[error("chunk size {0} is not a multiple of 8 of at least 16")]
    BadChunkSize(u64),
}

/// Where a scan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkScanStop {
    /// Still scanning (the iterator has not returned `None` yet).
    Running,
    /// Every byte up to the data end was accounted for.
    Complete,
    /// A malformed record (its offset counts from the start of the buffer slice; an error of
    /// kind `PastEnd` counts the room left in the record's chunk run); nothing from that offset
    /// on was yielded.
    Malformed(FramingError),
}

/// Counters of a scan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Well-framed records yielded.
    pub records: u64,
    /// Bytes of those records.
    pub record_bytes: u64,
    /// Chunks skipped because they carried no current tag (stale, never used, or untagged).
    pub skipped_chunks: u64,
    /// Bytes skipped in chunk tails and tags (and after a zero word in dense framing).
    pub skipped_bytes: u64,
}

/// Iterator over the record runs of one buffer; see [`scan_records`].
#[derive(Debug, Clone)]
pub struct RecordScan<'a> {
    bytes: &'a [u8],
    framing: Framing,
    pos: usize,
    run_end: usize,
    in_run: bool,
    stop: ChunkScanStop,
    stats: ScanStats,
}

/// Bytes [`chunked_data_extent`] reads at a time (rounded down to whole chunks).
const EXTENT_BLOCK: u64 = 1 << 20;

/// The end of lap `wrapped_count`'s data in a chunked rolling buffer of `len` bytes whose data
/// end is unknown (a provider that died while writing): the end of the last run tagged for
/// that lap (at most `len`), 0 if there is none. `read(offset, block)` fills `block` with the
/// buffer's bytes at `offset`; it is called for consecutive blocks of about 1 MiB, so a
/// caller copies the buffer only as far as its data, not whole. A chunk size below
/// [`MIN_CHUNK_SIZE`] or not a multiple of 8 gives `len` (nothing is skipped).
pub fn chunked_data_extent<E>(
    len: u64,
    chunk_size: u64,
    wrapped_count: u32,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
) -> Result<u64, E> {
    if chunk_size < MIN_CHUNK_SIZE || chunk_size % 8 != 0 {
        return Ok(len);
    }
    let block_len = (EXTENT_BLOCK / chunk_size).max(1) * chunk_size;
    let mut block = vec![0u8; block_len.min(len) as usize];
    let mut extent = 0;
    let mut offset = 0;
    while offset < len {
        let n = block_len.min(len - offset);
        let block = &mut block[..n as usize];
        read(offset, block)?;
        for at in (0..n).step_by(chunk_size as usize) {
            let Some(word) = block.get(at as usize..at as usize + 8) else {
                break;
            };
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            if let Some((wc, run)) = parse_chunk_tag(word) {
                if wc == wrapped_count {
                    let end = (offset + at).saturating_add(u64::from(run) * chunk_size);
                    extent = extent.max(end.min(len));
                }
            }
        }
        offset += n;
    }
    Ok(extent)
}

/// The end of the data of a dense buffer of `len` bytes whose data end is unknown (a
/// provider that died while writing): where its first zero header word is, or just past the
/// header of its first record that does not fit (so that a scan still reports it), else `len`.
/// Records are walked through `read(offset, block)`, called for blocks of about 1 MiB, so a
/// caller copies the buffer only as far as its data, not whole.
pub fn dense_data_extent<E>(
    len: u64,
    read: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
) -> Result<u64, E> {
    let walk = crate::format::walk_records(len, 0, read)?;
    Ok(match walk.stop {
        crate::format::WalkStop::Misfit => (walk.end + 8).min(len),
        crate::format::WalkStop::End | crate::format::WalkStop::ZeroWord => walk.end,
    })
}

/// Walk one buffer's bytes `[0, data_end)` and yield its well-framed records as contiguous runs
/// of [`CheckedRecords`] (each a whole number of records, never containing a zero header word),
/// skipping chunk tags, zero tails and stale chunks. Inside a run the walk is `format`'s
/// ([`CheckedRecords::prefix`]); only the chunk logic is here. The scan stops at the first malformed record; see
/// [`RecordScan::stop`] for where and why. A record that ends exactly at `data_end` is yielded.
///
/// `bytes` must not be written while it is scanned: pass a copy made with `pread`, or a mapping
/// whose writers are known to be finished (the engine's hand-off, or a dead provider).
pub fn scan_records(
    bytes: &[u8],
    data_end: u64,
    framing: Framing,
) -> Result<RecordScan<'_>, ChunkFramingError> {
    if data_end % 8 != 0 || data_end > bytes.len() as u64 {
        return Err(ChunkFramingError::BadDataEnd {
            data_end,
            len: bytes.len(),
        });
    }
    if let Framing::Chunked { chunk_size, .. } = framing {
        if chunk_size < MIN_CHUNK_SIZE || chunk_size % 8 != 0 {
            return Err(ChunkFramingError::BadChunkSize(chunk_size));
        }
    }
    Ok(RecordScan {
        bytes: &bytes[..data_end as usize],
        framing,
        pos: 0,
        run_end: 0,
        in_run: false,
        stop: ChunkScanStop::Running,
        stats: ScanStats::default(),
    })
}

/// Append every record [`scan_records`] yields to `out`; returns where the scan stopped and its
/// counters.
pub fn copy_records(
    bytes: &[u8],
    data_end: u64,
    framing: Framing,
    out: &mut Vec<u8>,
) -> Result<(ChunkScanStop, ScanStats), ChunkFramingError> {
    let mut scan = scan_records(bytes, data_end, framing)?;
    for run in scan.by_ref() {
        out.extend_from_slice(run.bytes());
    }
    Ok((scan.stop(), scan.stats()))
}

impl<'a> RecordScan<'a> {
    /// Where the scan stopped ([`ChunkScanStop::Running`] until the iterator returned `None`).
    pub fn stop(&self) -> ChunkScanStop {
        self.stop
    }

    /// Counters so far.
    pub fn stats(&self) -> ScanStats {
        self.stats
    }

    fn word(&self, pos: usize) -> u64 {
        let mut word = [0u8; 8];
        word.copy_from_slice(&self.bytes[pos..pos + 8]);
        u64::from_le_bytes(word)
    }

    /// Position on the next run (chunked: a tagged chunk; dense: the whole data). Returns false
    /// when the data is exhausted.
    fn enter_run(&mut self) -> bool {
        let end = self.bytes.len();
        match self.framing {
            Framing::Dense => {
                if self.pos >= end {
                    return false;
                }
                self.run_end = end;
                self.in_run = true;
                true
            }
            Framing::Chunked {
                chunk_size,
                wrapped_count,
            } => {
                let chunk = chunk_size as usize;
                while self.pos < end {
                    let tag = parse_chunk_tag(self.word(self.pos));
                    match tag {
                        Some((wc, run)) if wc == wrapped_count => {
                            let run_bytes = (run as usize).saturating_mul(chunk);
                            self.run_end = self.pos.saturating_add(run_bytes).min(end);
                            self.pos += 8;
                            self.stats.skipped_bytes += 8;
                            self.in_run = true;
                            return true;
                        }
                        _ => {
                            let next = (self.pos + chunk).min(end);
                            self.stats.skipped_chunks += 1;
                            self.stats.skipped_bytes += (next - self.pos) as u64;
                            self.pos = next;
                        }
                    }
                }
                false
            }
        }
    }
}

impl<'a> Iterator for RecordScan<'a> {
    type Item = CheckedRecords<'a>;

    fn next(&mut self) -> Option<CheckedRecords<'a>> {
        loop {
            if self.stop != ChunkScanStop::Running {
                return None;
            }
            if !self.in_run && !self.enter_run() {
                self.stop = ChunkScanStop::Complete;
                return None;
            }
            // The run is one dense stretch of records: `format`'s framing walk.
            let start = self.pos;
            let (records, stop) = CheckedRecords::prefix(&self.bytes[start..self.run_end]);
            self.pos += records.len();
            self.stats.records += records.records() as u64;
            self.stats.record_bytes += records.len() as u64;
            match stop {
                ScanStop::End => {}
                ScanStop::ZeroWord => {
                    // Rest of the run unused (dense: rest of the data).
                    self.stats.skipped_bytes += (self.run_end - self.pos) as u64;
                    self.pos = self.run_end;
                }
                ScanStop::Error(e) => {
                    self.stop = ChunkScanStop::Malformed(FramingError {
                        offset: start + e.offset,
                        kind: e.kind,
                    });
                }
            }
            if self.pos >= self.run_end {
                self.in_run = false;
                if self.framing == Framing::Dense {
                    self.pos = self.bytes.len();
                }
            }
            if !records.is_empty() {
                return Some(records);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes_read_buf_ee_head() {
        assert_eq!(
            MAGIC.to_le_bytes(),
            [0x64, 0x61, 0x65, 0x68, 0xee, 0x66, 0x75, 0x62]
        );
    }

    #[test]
    fn field_offsets_match_the_spec_table() {
        let fields = HeaderFields {
            magic: MAGIC,
            version: 0x0102,
            buffering_mode: 2,
            reserved1: 0,
            wrapped_count: 0x0304_0506,
            total_size: 0x1111,
            durable_buffer_size: 0x2222,
            rolling_buffer_size: 0x3333,
            durable_data_end: 0x4444,
            rolling_data_end: [0x5555, 0x6666],
            num_records_dropped: 0x7777,
            reserved: [0x88, 0x99, 0, 0, 0, 0, 0xaa],
        };
        let b = fields.to_bytes();
        let at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        assert_eq!(at(0), 0x627566ee68656164);
        assert_eq!(u16::from_le_bytes([b[8], b[9]]), 0x0102);
        assert_eq!(b[10], 2);
        assert_eq!(
            u32::from_le_bytes(b[12..16].try_into().unwrap()),
            0x0304_0506
        );
        assert_eq!(at(16), 0x1111);
        assert_eq!(at(24), 0x2222);
        assert_eq!(at(32), 0x3333);
        assert_eq!(at(40), 0x4444);
        assert_eq!(at(48), 0x5555);
        assert_eq!(at(56), 0x6666);
        assert_eq!(at(64), 0x7777);
        assert_eq!(at(72), 0x88);
        assert_eq!(at(80), 0x99);
        assert_eq!(at(120), 0xaa);
        assert_eq!(HeaderFields::from_bytes(&b), fields);
    }

    #[test]
    fn the_shared_view_keeps_every_reserved_word_and_the_drops_before_start() {
        let mut words = [0u64; 16];
        // SAFETY: 128 bytes, 8-aligned, accessed only through the view below.
        let shared = unsafe { SharedHeader::from_ptr(words.as_mut_ptr().cast()) };
        let fields = HeaderFields {
            magic: MAGIC,
            num_records_dropped: 7,
            reserved: [1, 2, 3, 4, 5, 6, 7],
            ..HeaderFields::default()
        };
        shared.store(&fields);
        assert_eq!(shared.load(), fields);
        assert_eq!(shared.load().dropped_before_start(), 3);
        shared.store_dropped_at_start(4);
        let loaded = shared.load();
        assert_eq!((loaded.num_records_dropped, loaded.reserved[2]), (4, 4));
        // A word above the total (a hostile provider) is held to the total.
        let mut hostile = loaded;
        hostile.reserved[2] = u64::MAX;
        assert_eq!(hostile.dropped_before_start(), 4);
        assert_eq!(OFFSET_DROPPED_BEFORE_START, OFFSET_FXTRACE_FLAGS + 8);
    }

    #[test]
    fn the_data_extent_is_the_end_of_the_last_run_of_the_lap() {
        const C: u64 = 64;
        let len = 3 * EXTENT_BLOCK + 5 * C;
        let mut bytes = vec![0u8; len as usize];
        let mut put = |at: u64, word: u64| {
            bytes[at as usize..at as usize + 8].copy_from_slice(&word.to_le_bytes())
        };
        put(0, make_chunk_tag(3, 1));
        put(10 * C, make_chunk_tag(3, 2));
        // Past a gap of untagged chunks, in the second block.
        put(EXTENT_BLOCK + 4 * C, make_chunk_tag(3, 1));
        // Another lap's tag (a stale chunk) is not data.
        put(2 * EXTENT_BLOCK, make_chunk_tag(2, 1));
        let extent = |bytes: &[u8], len: u64, chunk: u64, wc: u32| {
            let mut reads = Vec::new();
            let extent = chunked_data_extent(len, chunk, wc, |offset, block: &mut [u8]| {
                reads.push((offset, block.len()));
                block.copy_from_slice(&bytes[offset as usize..offset as usize + block.len()]);
                Ok::<(), ()>(())
            })
            .unwrap();
            (extent, reads)
        };
        let (end, reads) = extent(&bytes, len, C, 3);
        assert_eq!(end, EXTENT_BLOCK + 5 * C);
        assert_eq!(reads.len(), 4, "blocks of 1 MiB: {reads:?}");
        assert!(reads.windows(2).all(|w| w[0].0 + w[0].1 as u64 == w[1].0));
        assert_eq!(extent(&bytes, len, C, 2).0, 2 * EXTENT_BLOCK + C);
        assert_eq!(extent(&bytes, len, C, 4).0, 0, "no run of that lap");
        // A tag claiming more chunks than remain ends at the buffer's end.
        let mut last = vec![0u8; (4 * C) as usize];
        last[(3 * C) as usize..(3 * C) as usize + 8]
            .copy_from_slice(&make_chunk_tag(1, 0xffff).to_le_bytes());
        assert_eq!(extent(&last, 4 * C, C, 1).0, 4 * C);
        // A chunk size no reader accepts skips nothing.
        assert_eq!(extent(&last, 4 * C, 12, 1).0, 4 * C);
    }

    #[test]
    fn a_dense_extent_ends_at_the_first_zero_word_or_the_first_record_that_does_not_fit() {
        let extent = |words: &[u64]| {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            dense_data_extent(bytes.len() as u64, |offset, block: &mut [u8]| {
                block.copy_from_slice(&bytes[offset as usize..offset as usize + block.len()]);
                Ok::<(), ()>(())
            })
            .unwrap()
        };
        // Two records (1 and 2 words), then zeros.
        assert_eq!(extent(&[0x14, 0x24, 7, 0, 0]), 24);
        // Full to the end.
        assert_eq!(extent(&[0x14, 0x14]), 16);
        // A record larger than what is left: just past its header.
        assert_eq!(extent(&[0x14, 0x54, 0, 0]), 16);
        // A large record claiming more words than the buffer holds.
        assert_eq!(extent(&[15 | (1 << 30), 0]), 8);
        assert_eq!(extent(&[]), 0);
        // Across blocks: 100 records of 4 095 words (3.1 MiB), then zeros.
        let mut words = Vec::new();
        for _ in 0..100 {
            words.push(0xfff4);
            words.extend(std::iter::repeat(1).take(4094));
        }
        words.extend([0u64; 100]);
        assert_eq!(extent(&words), 100 * 4095 * 8);
    }

    #[test]
    fn record_size_field_and_large_records() {
        use crate::format::record_words;
        assert_eq!(record_words(0x34), 3);
        assert_eq!(record_words(0xfff4), 4095);
        assert_eq!(record_words((5000 << 4) | 15), 5000);
        assert_eq!(
            with_record_size_words(0xffff_0000_0000_fff4, 3),
            0xffff_0000_0000_0034
        );
        assert_eq!(
            record_words(with_record_size_words((1 << 4) | 15, 5000)),
            5000
        );
        assert_eq!(MAX_RECORD_BYTES, 32760);
    }

    #[test]
    fn chunk_tag_round_trip() {
        let tag = make_chunk_tag(0xdead_beef, 3);
        assert_eq!(tag >> 48, 0xf7c4);
        assert_eq!(parse_chunk_tag(tag), Some((0xdead_beef, 3)));
        assert_eq!(parse_chunk_tag(make_chunk_tag(1, 0)), None);
        assert_eq!(parse_chunk_tag(0), None);
        assert_eq!(parse_chunk_tag(0x34), None);
    }
}

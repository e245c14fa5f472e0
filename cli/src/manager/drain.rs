//! Copying a provider's buffer into the archive: the streaming save and the final read-out,
//! as Fuchsia's trace_manager does them (`Tracee::TransferBuffer` and
//! `Tracee::TransferRecords`, `src/performance/trace_manager/tracee.cc`).
//!
//! The manager maps the same sealed memfd the provider writes. It trusts nothing in it: every read
//! starts with a fresh copy of the header (atomic `Acquire` loads) validated exactly as
//! `BufferHeaderReader::Validate` does ([`HeaderFields::validate`]) plus the fxtrace chunk
//! extension, every region is copied out (a rolling buffer a cache-sized window at a time, and
//! a save's durable bytes, word by word through atomics, into the room the archive's output
//! lends when it does, so that the records are checked and kept where they will be written;
//! the other regions of a final read-out with `pread`) inside the bounds the validated
//! geometry gives, so that what is checked is what is written (a provider cannot change a
//! record between its check and its write), and every region goes through the chunk-aware
//! record scanner of
//! [`fxtrace::buffer::header`], which yields only whole, well-framed records (unused chunk tails,
//! stale chunks and zero words never reach the archive) as [`fxtrace_format::CheckedRecords`], so
//! the archive copies them without walking their framing again, and stops at the first malformed
//! one. A scan that stops early is not an error: what came before it is kept and the stop is
//! reported in [`DrainStats::problems`].

use super::archive::{
    Archive, ArchiveError, ArchiveOutput, ProviderRuns, MAX_READABLE_LARGE_WORDS,
};
use fxtrace::buffer::header::{
    chunked_data_extent, dense_data_extent, parse_chunk_tag, scan_records, BufferGeometry,
    BufferingMode, ChunkFramingError, ChunkScanStop, Framing, HeaderError, HeaderFields,
    MIN_DURABLE_BUFFER_SIZE,
};
use fxtrace::buffer::{BufferError, TraceBuffer};
use fxtrace_format::{
    record_type, CheckedRecords, FramingErrorKind, RecordType, ScanStop,
    PROVIDER_EVENT_BUFFER_OVERFLOW,
};

/// Why a provider's buffer could not be read. Every variant but [`DrainError::Archive`] is the
/// provider's fault and ends only that provider; an archive error ends the session.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The header fails validation (`BufferHeaderReader::Validate`'s, or the chunk extension
    /// check).
    #[error("invalid buffer header: {0}")]
    Header(#[from] HeaderError),
    /// The header's buffering mode is not the session's.
    #[error("buffer header says {found:?} mode, the session uses {expected:?}")]
    ModeMismatch {
        /// Mode in the header.
        found: BufferingMode,
        /// Mode the manager configured.
        expected: BufferingMode,
    },
    /// SAVE_BUFFER outside streaming mode.
    #[error("SAVE_BUFFER in {0:?} mode (only streaming saves buffers)")]
    NotStreaming(BufferingMode),
    /// SAVE_BUFFER's wrapped count does not follow the previous one.
    #[error("SAVE_BUFFER wrapped count {got} does not follow {expected}")]
    WrappedCountSequence {
        /// The wrapped count received.
        got: u32,
        /// The one expected.
        expected: u32,
    },
    /// SAVE_BUFFER's durable data end is unaligned, out of range, or moves backwards.
    #[error(
        "SAVE_BUFFER durable data end {got} is invalid (must be a multiple of 8 in \
         {min}..={max} and at least the previous {last})"
    )]
    DurableDataEnd {
        /// The value received.
        got: u64,
        /// The previous save's value.
        last: u64,
        /// Smallest valid value.
        min: u64,
        /// Durable buffer size.
        max: u64,
    },
    /// A read outside the buffer (cannot happen after validation; kept as an error, never a
    /// panic).
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// The region and end given to the scanner do not fit (cannot happen after validation).
    #[error("record scan refused its arguments: {0}")]
    Scan(#[from] fxtrace::buffer::header::ChunkFramingError),
    /// Writing the archive failed.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

impl DrainError {
    /// Whether the error is the archive's (fatal for the session) rather than the provider's.
    pub fn is_archive(&self) -> bool {
        matches!(self, DrainError::Archive(_))
    }
}

/// What the manager copied out of one provider's buffer, and what the header said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Records copied into the archive.
    pub records: u64,
    /// Durable-buffer bytes copied.
    pub durable_bytes: u64,
    /// Rolling-buffer bytes copied.
    pub rolling_bytes: u64,
    /// Streaming saves done.
    pub saves: u64,
    /// Header `num_records_dropped` at the last read.
    pub records_dropped: u64,
    /// Of those, the records dropped before the trace started (header `reserved[2]`).
    pub records_dropped_before_start: u64,
    /// Header `wrapped_count` at the last read.
    pub wrapped_count: u32,
    /// Header `durable_data_end` at the last read (0 while running).
    pub durable_data_end: u64,
    /// Durable buffer size (0 in oneshot mode).
    pub durable_buffer_size: u64,
    /// The fullest the buffer was seen toward dropping records ([`fill_percent`]): at each
    /// streaming save and at the final read-out.
    pub fill_percent: u32,
    /// Chunk tails, tags and stale chunks the scanner skipped, in bytes.
    pub skipped_bytes: u64,
    /// Regions whose scan stopped at a malformed record, with where and why.
    pub problems: crate::manager::report::Problems,
    /// Provider metadata records (info, section, event) found in the buffer and left out:
    /// only the manager writes them (a protocol violation by the provider).
    pub forged_metadata: u64,
    /// Large records over the size a trace reader reads, left out.
    pub oversized_records: u64,
    /// Time spent copying this provider's data into the archive.
    pub copy_time: std::time::Duration,
}

/// The streaming state of one provider's buffer (`Tracee`'s `last_wrapped_count_` and
/// `last_durable_data_end_`).
#[derive(Debug, Clone)]
pub struct Drain {
    mode: BufferingMode,
    last_wrapped_count: u32,
    last_durable_data_end: u64,
    saved_any: bool,
    stats: DrainStats,
    /// Reused for every copy out of the buffer that the output lends no room for.
    scratch: Vec<u8>,
    /// Bytes of a rolling buffer copied and scanned at a time ([`READ_WINDOW`]).
    window: u64,
    /// Windows read so far, and the most bytes read at once (the tests' evidence of the
    /// windowed path and of its bound).
    windows_read: u64,
    largest_read: u64,
    /// When the buffer was made: a provider cannot have dropped more records than nanoseconds
    /// have passed since (each drop is one atomic add on a shared counter).
    created: std::time::Instant,
    /// A drop count past that bound was reported (once).
    implausible_drops_noted: bool,
}

/// What a buffer's header says now, while its provider writes ([`Drain::live`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveFigures {
    /// What the buffer holds (in streaming mode, saved halves too).
    pub buffered_bytes: u64,
    /// Records dropped so far (0 when the header's count is not a count).
    pub records_dropped: u64,
    /// How full the buffer is toward dropping records, in percent ([`fill_percent`]).
    pub fill_percent: u32,
    /// Why the header's drop count was left out, if it was.
    pub problem: Option<String>,
}

/// How full a buffer is toward dropping records, in percent, from the positions its engine
/// publishes (the data ends are written only at a switch or a stop): in oneshot mode the
/// rolling buffer written; in streaming mode the data not saved yet (the half being written,
/// and the other half while it waits for its save) of both halves; in circular mode (whose
/// rolling buffers are overwritten by design) and streaming mode, the durable buffer too (when
/// it fills, tracing stops). A header of another engine (no positions) reads as its ends.
pub fn fill_percent(fields: &HeaderFields, geometry: &BufferGeometry) -> u32 {
    use fxtrace::buffer::header::POSITION_WRAPPED_SHIFT;
    let percent = |used: u64, of: u64| match of {
        0 => 0,
        _ => (u128::from(used.min(of)) * 100 / u128::from(of)) as u32,
    };
    let rolling = geometry.rolling_buffer_size;
    let (offset, wrapped) = fields.rolling_position();
    // The position of the buffer being written (a position from before the last switch is
    // not its).
    let lap_mask = (1u32 << (64 - POSITION_WRAPPED_SHIFT)) - 1;
    let current = match wrapped == fields.wrapped_count & lap_mask {
        true => offset.min(rolling),
        false => 0,
    };
    let in_use = match geometry.mode {
        BufferingMode::Oneshot => percent(current.max(fields.rolling_data_end[0]), rolling),
        BufferingMode::Streaming => {
            let other = ((fields.wrapped_count & 1) ^ 1) as usize;
            let waiting = match fields.rolling_data_end[other] {
                0 => 0,
                _ => rolling,
            };
            percent(current + waiting, 2 * rolling)
        }
        BufferingMode::Circular => 0,
    };
    let durable = match geometry.mode {
        BufferingMode::Oneshot => 0,
        _ => percent(
            fields.durable_position().max(fields.durable_data_end),
            geometry.durable_buffer_size,
        ),
    };
    in_use.max(durable)
}

/// How much of the durable buffer a new trace keeps (the start disposition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// CLEAR_ENTIRE: everything is cleared; saving starts again from offset 0.
    ClearEntire,
    /// CLEAR_NONDURABLE: rolling buffers cleared (wrapped count back to 0), durable data kept
    /// (and not saved again).
    ClearNonDurable,
    /// RETAIN: nothing cleared; the wrapped count continues.
    Retain,
}

impl Drain {
    /// A buffer that the session configured with `mode`.
    pub fn new(mode: BufferingMode) -> Self {
        Self {
            mode,
            last_wrapped_count: 0,
            last_durable_data_end: 0,
            saved_any: false,
            stats: DrainStats::default(),
            scratch: Vec::new(),
            window: READ_WINDOW,
            windows_read: 0,
            largest_read: 0,
            created: std::time::Instant::now(),
            implausible_drops_noted: false,
        }
    }

    /// The configured mode.
    pub fn mode(&self) -> BufferingMode {
        self.mode
    }

    /// What was copied so far.
    pub fn stats(&self) -> &DrainStats {
        &self.stats
    }

    /// A Start was sent: reset the streaming sequence the way the engine resets its buffer.
    pub fn restart(&mut self, how: Restart) {
        match how {
            Restart::ClearEntire => {
                self.last_wrapped_count = 0;
                self.last_durable_data_end = 0;
                self.saved_any = false;
            }
            Restart::ClearNonDurable => {
                self.last_wrapped_count = 0;
                self.saved_any = false;
            }
            Restart::Retain => {}
        }
    }

    /// The header validated against the buffer and the session's mode.
    fn checked_header(
        &self,
        buffer: &TraceBuffer,
    ) -> Result<(HeaderFields, BufferGeometry), DrainError> {
        let fields = buffer.header().load();
        let geometry = fields.validate(buffer.size())?;
        fields.validate_fxtrace_extension()?;
        if geometry.mode != self.mode {
            return Err(DrainError::ModeMismatch {
                found: geometry.mode,
                expected: self.mode,
            });
        }
        Ok((fields, geometry))
    }

    /// The header's drop counts (all, and before the start), or why they are not counts: more
    /// drops than nanoseconds since the buffer was made (the header is the provider's memory:
    /// `2^64 - 1` there would make every drop total meaningless).
    fn drop_counts(&self, fields: &HeaderFields) -> Result<(u64, u64), String> {
        let bound = u64::try_from(self.created.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if fields.num_records_dropped > bound {
            return Err(format!(
                "its buffer header says {} records dropped, more than the {bound} ns since its \
                 buffer was made: not a count, left out of the drop totals",
                fields.num_records_dropped
            ));
        }
        Ok((fields.num_records_dropped, fields.dropped_before_start()))
    }

    /// What the header says now, read while the provider writes (`status`): nothing but an
    /// error when it does not validate, and no drop count when that count is not one.
    pub fn live(&self, buffer: &TraceBuffer) -> Result<LiveFigures, DrainError> {
        let (fields, geometry) = self.checked_header(buffer)?;
        let (records_dropped, problem) = match self.drop_counts(&fields) {
            Ok((dropped, _)) => (dropped, None),
            Err(problem) => (0, Some(problem)),
        };
        // What the buffer holds (in streaming mode, saved halves too); the ends are within
        // the validated geometry.
        let buffered_bytes =
            fields.durable_data_end + fields.rolling_data_end[0] + fields.rolling_data_end[1];
        Ok(LiveFigures {
            buffered_bytes,
            records_dropped,
            fill_percent: fill_percent(&fields, &geometry),
            problem,
        })
    }

    /// Read the header and validate it against the buffer and the session's mode.
    fn read_header(
        &mut self,
        buffer: &TraceBuffer,
    ) -> Result<(HeaderFields, BufferGeometry), DrainError> {
        let (fields, geometry) = self.checked_header(buffer)?;
        let (dropped, before_start) = match self.drop_counts(&fields) {
            Ok(counts) => counts,
            Err(problem) => {
                if !std::mem::replace(&mut self.implausible_drops_noted, true) {
                    self.stats.problems.push(problem);
                }
                (0, 0)
            }
        };
        self.stats.records_dropped = dropped;
        self.stats.records_dropped_before_start = before_start;
        // At a save, the half being saved waits and the other is being written: the fullest
        // a streaming buffer gets; at the read-out, how full it ended.
        let fill = fill_percent(&fields, &geometry);
        self.stats.fill_percent = self.stats.fill_percent.max(fill);
        self.stats.wrapped_count = fields.wrapped_count;
        self.stats.durable_data_end = fields.durable_data_end;
        self.stats.durable_buffer_size = geometry.durable_buffer_size;
        Ok((fields, geometry))
    }

    /// SAVE_BUFFER(`wrapped_count`, `durable_data_end`) (`Tracee::TransferBuffer`): validate
    /// the request and the header, then copy the new durable bytes and rolling buffer `wrapped_count & 1` into the
    /// archive under provider `id`'s section. On success the caller answers BUFFER_SAVED with
    /// the same two values; on error it drops the provider.
    pub fn save_buffer<W: ArchiveOutput>(
        &mut self,
        buffer: &TraceBuffer,
        archive: &mut Archive<W>,
        id: u32,
        name: &str,
        wrapped_count: u32,
        durable_data_end: u64,
    ) -> Result<(), DrainError> {
        if self.mode != BufferingMode::Streaming {
            return Err(DrainError::NotStreaming(self.mode));
        }
        // 1. The sequence: the first save of a trace is buffer 0, later ones follow on.
        let expected = if self.saved_any {
            self.last_wrapped_count.wrapping_add(1)
        } else {
            0
        };
        if wrapped_count != expected {
            return Err(DrainError::WrappedCountSequence {
                got: wrapped_count,
                expected,
            });
        }
        // 3. The header.
        let (fields, geometry) = self.read_header(buffer)?;
        // 1 and 4. The durable end.
        let last = self.last_durable_data_end;
        if durable_data_end % 8 != 0
            || durable_data_end < last
            || durable_data_end < MIN_DURABLE_BUFFER_SIZE
            || durable_data_end > geometry.durable_buffer_size
        {
            return Err(DrainError::DurableDataEnd {
                got: durable_data_end,
                last,
                min: MIN_DURABLE_BUFFER_SIZE,
                max: geometry.durable_buffer_size,
            });
        }
        // 2. The section.
        archive.begin_provider(id, name)?;
        // 5. New durable bytes.
        if durable_data_end > last {
            let offset = geometry.durable_offset() + last;
            let len = durable_data_end - last;
            self.forward(
                buffer,
                archive,
                (offset, last),
                len,
                len,
                Framing::Dense,
                Region::Durable,
            )?;
        }
        // 6. The rolling buffer, up to its recorded end.
        let index = (wrapped_count & 1) as usize;
        let end = fields.rolling_data_end[index];
        if end > 0 {
            self.forward(
                buffer,
                archive,
                (geometry.rolling_offset(index), 0),
                geometry.rolling_buffer_size,
                end,
                fields.rolling_framing(wrapped_count),
                Region::Rolling(index),
            )?;
        }
        // 7.
        self.last_wrapped_count = wrapped_count;
        self.last_durable_data_end = durable_data_end;
        self.saved_any = true;
        self.stats.saves += 1;
        Ok(())
    }

    /// The final read-out (`Tracee::TransferRecords`), after STOPPED or when the provider is
    /// gone: Provider Info/Section, a Provider Event "buffer overflow" when records were dropped, durable data
    /// not yet saved, then the rolling buffers in wrap order. A zero end in the header (never
    /// finalised: a crashed or killed provider) means "scan the whole region". Nothing is
    /// written when the header does not validate.
    ///
    /// When no writer is left ([`Writers`]), the rolling buffers are copied and written a
    /// window at a time ([`READ_WINDOW`]), so the manager never holds a whole buffer.
    /// Otherwise the regions are copied out whole, rolling first, durable last, and written in
    /// archive order (durable first): a thread writes its Thread/String record into the
    /// durable buffer before any rolling record that refers to it, so a durable copy taken
    /// after the rolling copy holds every record the copied events refer to.
    pub fn read_out<W: ArchiveOutput>(
        &mut self,
        buffer: &TraceBuffer,
        archive: &mut Archive<W>,
        (id, name): (u32, &str),
        writers: Writers,
    ) -> Result<(), DrainError> {
        let (fields, geometry) = self.read_header(buffer)?;
        let started = std::time::Instant::now();
        // An end of 0: the provider died while writing that buffer. A chunked one is copied
        // only as far as its last run of the lap, not whole (up to 4 GiB).
        let rolling_end = |index: usize, framing: Framing| match fields.rolling_data_end[index] {
            0 => match framing {
                Framing::Chunked {
                    chunk_size,
                    wrapped_count,
                } => chunked_data_extent(
                    geometry.rolling_buffer_size,
                    chunk_size,
                    wrapped_count,
                    |offset, block| buffer.read_at(geometry.rolling_offset(index) + offset, block),
                ),
                Framing::Dense => {
                    dense_data_extent(geometry.rolling_buffer_size, |offset, block| {
                        buffer.read_at(geometry.rolling_offset(index) + offset, block)
                    })
                }
            },
            end => Ok(end),
        };
        // Rolling buffers, in wrap order.
        let wrapped = fields.wrapped_count;
        let mut rolling = Vec::with_capacity(2);
        if self.mode != BufferingMode::Oneshot && wrapped > 0 {
            let earlier = wrapped - 1;
            // Already streamed (the 2026 trace_manager's check; the 2024 one re-read it).
            let streamed = self.mode == BufferingMode::Streaming
                && self.saved_any
                && self.last_wrapped_count >= earlier;
            if !streamed {
                rolling.push(earlier);
            }
        }
        rolling.push(wrapped);
        // Each: its index, framing and data end (the extent walk of a region never finalised).
        let rolling = rolling
            .into_iter()
            .map(|wrap| {
                let index = (wrap & 1) as usize;
                let framing = fields.rolling_framing(wrap);
                Ok((index, framing, rolling_end(index, framing)?))
            })
            .collect::<Result<Vec<_>, DrainError>>()?;
        // A provider whose stop timed out sends STOPPED anyway, with the ends of its header
        // left 0 (its writers may still be running): only a finalised header says they are
        // done. Oneshot has no durable buffer, so no order to keep: its windows are read as
        // a whole copy would be (a live writer can change either).
        let finalised = self.mode == BufferingMode::Oneshot
            || (fields.rolling_data_end[(wrapped & 1) as usize] != 0
                && fields.durable_data_end != 0);
        let windowed = match writers {
            Writers::Ended => true,
            Writers::Stopped => finalised,
            Writers::MayRun => false,
        };
        if windowed {
            let durable = self.copy_durable(buffer, &fields, &geometry)?;
            self.begin_read_out(archive, (id, name))?;
            self.scan_durable(durable, archive)?;
            for (index, framing, end) in rolling {
                let offset = geometry.rolling_offset(index);
                let len = geometry.rolling_buffer_size;
                let region = Region::Rolling(index);
                self.forward(buffer, archive, (offset, 0), len, end, framing, region)?;
            }
            self.scratch = Vec::new();
            return Ok(());
        }
        let rolling = rolling
            .into_iter()
            .map(|(index, framing, end)| {
                let len = geometry.rolling_buffer_size.min(end);
                let bytes = buffer.copy_range(geometry.rolling_offset(index), len)?;
                Ok((bytes, end, framing, Region::Rolling(index)))
            })
            .collect::<Result<Vec<_>, DrainError>>()?;
        // Durable data not yet saved, copied last.
        let durable = self.copy_durable(buffer, &fields, &geometry)?;
        self.stats.copy_time += started.elapsed();
        self.begin_read_out(archive, (id, name))?;
        self.scan_durable(durable, archive)?;
        for (bytes, end, framing, region) in rolling {
            self.scan_into((&bytes, 0, 0), end, framing, region, archive)?;
        }
        // Nothing more is read until a new trace: give the copy buffer back.
        self.scratch = Vec::new();
        Ok(())
    }

    /// The durable data a final read-out has not saved yet (at most the durable buffer, 1 MiB),
    /// copied out with its length and its offset in the durable buffer; `None` in oneshot mode
    /// or when all was saved.
    fn copy_durable(
        &mut self,
        buffer: &TraceBuffer,
        fields: &HeaderFields,
        geometry: &BufferGeometry,
    ) -> Result<Option<(Vec<u8>, u64, u64)>, DrainError> {
        if self.mode == BufferingMode::Oneshot {
            return Ok(None);
        }
        let end = match fields.durable_data_end {
            0 => geometry.durable_buffer_size,
            end => end,
        };
        let from = self.last_durable_data_end.min(end);
        if end <= from {
            return Ok(None);
        }
        let len = end - from;
        let bytes = buffer.copy_range(geometry.durable_offset() + from, len)?;
        self.last_durable_data_end = if fields.durable_data_end == 0 {
            from
        } else {
            end
        };
        Ok(Some((bytes, len, from)))
    }

    /// Scan the durable bytes [`Self::copy_durable`] copied, if any, into the archive.
    fn scan_durable<W: ArchiveOutput>(
        &mut self,
        durable: Option<(Vec<u8>, u64, u64)>,
        archive: &mut Archive<W>,
    ) -> Result<(), DrainError> {
        if let Some((bytes, len, from)) = durable {
            let (framing, region) = (Framing::Dense, Region::Durable);
            self.scan_into((&bytes, from, 0), len, framing, region, archive)?;
        }
        Ok(())
    }

    /// A final read-out's section: Provider Info/Section, then a Provider Event "buffer
    /// overflow" when records were dropped.
    fn begin_read_out<W: ArchiveOutput>(
        &self,
        archive: &mut Archive<W>,
        (id, name): (u32, &str),
    ) -> Result<(), DrainError> {
        archive.begin_provider(id, name)?;
        // The count as read (0 when it is not one: see `drop_counts`).
        if self.stats.records_dropped > 0 {
            archive.provider_event(PROVIDER_EVENT_BUFFER_OVERFLOW)?;
        }
        Ok(())
    }

    /// Copy the first `data_end` bytes of the region `[offset, offset + len)` out of the
    /// buffer, scan them with `framing`, and append the records found: a rolling buffer a
    /// window at a time ([`READ_WINDOW`]; see [`Self::forward_range`]), the durable buffer (at
    /// most 1 MiB) at once. `base`: where `offset` is in its region (for the reports of
    /// malformed records).
    #[allow(clippy::too_many_arguments)]
    fn forward<W: ArchiveOutput>(
        &mut self,
        buffer: &TraceBuffer,
        archive: &mut Archive<W>,
        at: (u64, u64),
        len: u64,
        data_end: u64,
        framing: Framing,
        region: Region,
    ) -> Result<(), DrainError> {
        let started = std::time::Instant::now();
        // Only `[0, data_end)` is scanned: copy no more; an end past the region is refused
        // as the scanner refuses it.
        if data_end % 8 != 0 || data_end > len {
            return Err(ChunkFramingError::BadDataEnd {
                data_end,
                len: usize::try_from(len).unwrap_or(usize::MAX),
            }
            .into());
        }
        // Windows up to SCRATCH_KEPT bytes reuse one copy buffer.
        let mut words = std::mem::take(&mut self.scratch);
        let range = (at, data_end, framing, region);
        let result = self.forward_range(buffer, archive, &mut words, range);
        if words.capacity() <= SCRATCH_KEPT {
            self.scratch = words;
        }
        self.stats.copy_time += started.elapsed();
        result.map(drop)
    }

    /// [`Self::forward`]'s reading and scanning of `data_end` bytes at `offset` (`base` in the
    /// region) through `bytes`: a rolling buffer a window at a time, cut where no record or
    /// chunk run crosses. A record longer than a window (at most 4095 words: a trace reader's
    /// limit) is read whole; a large record over that limit, which the archive leaves out, is
    /// counted and not read; a chunk run longer than a window is read as the dense stretch of
    /// records it is, a window at a time. So the manager holds about one window whatever the
    /// provider wrote. How the scan ended.
    fn forward_range<W: ArchiveOutput>(
        &mut self,
        buffer: &TraceBuffer,
        archive: &mut Archive<W>,
        words: &mut Vec<u8>,
        ((offset, base), data_end, framing, region): ((u64, u64), u64, Framing, Region),
    ) -> Result<Scanned, DrainError> {
        // Chunks larger than a window (the provider chose the chunk size) are read by their
        // tag alone, then their run's records window by window, or skipped unread.
        let (window, large_chunks) = match (region, framing) {
            (Region::Durable, _) => (data_end, None),
            (
                Region::Rolling(_),
                Framing::Chunked {
                    chunk_size,
                    wrapped_count,
                },
            ) if chunk_size > self.window => (8, Some((chunk_size, wrapped_count))),
            // Whole chunks, so that each window starts on a chunk.
            (Region::Rolling(_), Framing::Chunked { chunk_size, .. }) => {
                (self.window / chunk_size * chunk_size, None)
            }
            (Region::Rolling(_), Framing::Dense) => (self.window, None),
        };
        debug_assert!(window > 0 && window % 8 == 0, "window {window}");
        let mut pos = 0;
        while pos < data_end {
            let remaining = data_end - pos;
            if large_chunks.is_none() {
                let at = (offset + pos, base + pos);
                let room = (window.min(remaining), remaining, framing, region);
                match self.forward_in_room(buffer, archive, at, room)? {
                    Some((Scanned::Whole, cut)) => {
                        pos += cut;
                        continue;
                    }
                    Some((Scanned::ZeroWord, cut)) => {
                        self.stats.skipped_bytes += remaining - cut;
                        return Ok(Scanned::ZeroWord);
                    }
                    Some((Scanned::Malformed, _)) => return Ok(Scanned::Malformed),
                    None => {}
                }
            }
            self.read_window(buffer, offset + pos, window.min(remaining), words)?;
            if let Some((chunk_size, lap)) = large_chunks {
                let tag = u64::from_ne_bytes(words[..8].try_into().expect("a window of 8 bytes"));
                match parse_chunk_tag(tag) {
                    Some((wc, run)) if wc == lap => {
                        let run = (u64::from(run) * chunk_size).min(remaining);
                        let at = (offset + pos, base + pos);
                        if self.forward_run(buffer, archive, words, (at, run, region))? {
                            return Ok(Scanned::Malformed);
                        }
                        pos += run;
                    }
                    _ => {
                        // Not this lap's: skipped, as the scanner skips it.
                        self.stats.skipped_bytes += chunk_size.min(remaining);
                        pos += chunk_size;
                    }
                }
                continue;
            }
            let cut = match window_cut(words, framing, remaining) {
                WindowCut::At(cut) => cut,
                WindowCut::Unit(unit) if framing == Framing::Dense => {
                    self.read_window(buffer, offset + pos, unit, words)?;
                    unit
                }
                WindowCut::Unit(unit) => {
                    // A chunk run longer than a window.
                    let run = unit.min(remaining);
                    let at = (offset + pos, base + pos);
                    if self.forward_run(buffer, archive, words, (at, run, region))? {
                        return Ok(Scanned::Malformed);
                    }
                    pos += run;
                    continue;
                }
                WindowCut::Oversized(size) => {
                    self.stats.oversized_records += 1;
                    pos += size;
                    continue;
                }
            };
            let piece = (&words[..cut as usize], base + pos, remaining - cut);
            match self.scan_into(piece, cut, framing, region, archive)? {
                Scanned::Whole => pos += cut,
                Scanned::ZeroWord => {
                    // A dense stretch's data ends at its first zero word: the rest is skipped.
                    self.stats.skipped_bytes += remaining - cut;
                    return Ok(Scanned::ZeroWord);
                }
                Scanned::Malformed => return Ok(Scanned::Malformed),
            }
        }
        Ok(Scanned::Whole)
    }

    /// [`Self::forward_range`]'s step where the archive's output lends room for a window: the
    /// window (`len` bytes at `offset`, `base` in the region, `remaining` bytes of the region's
    /// data from there) read straight into that room, cut, scanned there, and its records
    /// kept in place: one copy out of the buffer and none into the output. How the scan ended
    /// and where the window was cut; `None` when the output lends no room, or when the
    /// window's first record or run is longer than it (the caller then reads it its own way).
    fn forward_in_room<W: ArchiveOutput>(
        &mut self,
        buffer: &TraceBuffer,
        archive: &mut Archive<W>,
        (offset, base): (u64, u64),
        (len, remaining, framing, region): (u64, u64, Framing, Region),
    ) -> Result<Option<(Scanned, u64)>, DrainError> {
        let Ok(size) = usize::try_from(len) else {
            return Ok(None);
        };
        let Some((room, mut runs)) = archive.room(size)? else {
            return Ok(None);
        };
        self.read_into(buffer, offset, room)?;
        let WindowCut::At(cut) = window_cut(room, framing, remaining) else {
            return Ok(None);
        };
        let piece = (&room[..cut as usize], base, remaining - cut);
        let scanned = self.scan_into(piece, cut, framing, region, &mut runs)?;
        archive.take_room(runs)?;
        Ok(Some((scanned, cut)))
    }

    /// Fill `words` with the `len` bytes (a multiple of 8) of the buffer at `offset` (one copy
    /// out of the mapping, counted).
    fn read_window(
        &mut self,
        buffer: &TraceBuffer,
        offset: u64,
        len: u64,
        words: &mut Vec<u8>,
    ) -> Result<(), DrainError> {
        let size = usize::try_from(len).map_err(|_| BufferError::OutOfRange {
            offset,
            len,
            size: buffer.size(),
        })?;
        words.resize(size, 0);
        self.read_into(buffer, offset, words)
    }

    /// Fill `bytes` (a whole number of words) with the buffer's bytes at `offset` (one copy
    /// out of the mapping, counted).
    fn read_into(
        &mut self,
        buffer: &TraceBuffer,
        offset: u64,
        bytes: &mut [u8],
    ) -> Result<(), DrainError> {
        buffer.read_words_at(offset, bytes)?;
        self.windows_read += 1;
        self.largest_read = self.largest_read.max(bytes.len() as u64);
        Ok(())
    }

    /// The records of the chunk run of `run` bytes at `offset` (`base` in the region): its tag
    /// skipped, as the scanner skips it, then its records, the dense stretch a zero word ends
    /// (the run, not the region), window by window. Whether a malformed record ended the scan.
    fn forward_run<W: ArchiveOutput>(
        &mut self,
        buffer: &TraceBuffer,
        archive: &mut Archive<W>,
        words: &mut Vec<u8>,
        ((offset, base), run, region): ((u64, u64), u64, Region),
    ) -> Result<bool, DrainError> {
        self.stats.skipped_bytes += 8;
        let range = ((offset + 8, base + 8), run - 8, Framing::Dense, region);
        Ok(self.forward_range(buffer, archive, words, range)? == Scanned::Malformed)
    }

    /// Scan `bytes[..data_end]`, the region's bytes from offset `base`, followed by `beyond`
    /// more bytes of the region's data (a window's), with `framing` and append the records
    /// found; how the scan ended.
    fn scan_into<'a>(
        &mut self,
        (bytes, base, beyond): (&'a [u8], u64, u64),
        data_end: u64,
        framing: Framing,
        region: Region,
        sink: &mut impl ProviderRuns<'a>,
    ) -> Result<Scanned, DrainError> {
        let mut from = 0usize;
        loop {
            let bytes = &bytes[from.min(bytes.len())..];
            let data_end = data_end.saturating_sub(from as u64);
            let mut scan = scan_records(bytes, data_end, framing)?;
            let taken = sink.take_runs(scan.by_ref())?;
            self.stats.records += taken.written;
            self.stats.forged_metadata += taken.forged;
            self.stats.oversized_records += taken.oversized;
            let copied = taken.bytes;
            match region {
                Region::Durable => self.stats.durable_bytes += copied,
                Region::Rolling(_) => self.stats.rolling_bytes += copied,
            }
            let skipped = scan.stats().skipped_bytes;
            if let ChunkScanStop::Malformed(mut error) = scan.stop() {
                // Reported from the region's start, and against the region's data end.
                error.offset = error
                    .offset
                    .saturating_add((base as usize).saturating_add(from));
                // (Dense: what remains is the data's; chunked: the run's, the same whole or
                // windowed, since a window never splits a run.)
                if let (FramingErrorKind::PastEnd { available, .. }, Framing::Dense) =
                    (&mut error.kind, framing)
                {
                    *available = available.saturating_add(beyond as usize);
                }
                self.stats.skipped_bytes += skipped;
                self.stats.problems.push(format!(
                    "{region}: malformed record {error}; the rest of the region was skipped"
                ));
                return Ok(Scanned::Malformed);
            }
            // The durable buffer is one dense stretch: a zero word ends its data, unless a
            // writer died (or was still writing when the trace stopped) between reserving a
            // record and writing its first word. Records follow such a hole if any word after
            // it is not zero (the buffer is zeroed at a clearing start and only appended to).
            let hole = match region {
                Region::Durable if skipped > 0 => {
                    let zero_at = (data_end - skipped) as usize;
                    bytes[zero_at..data_end as usize]
                        .chunks_exact(8)
                        .position(|word| word != [0; 8])
                        .map(|words| (zero_at, words * 8))
                }
                _ => None,
            };
            let Some((zero_at, len)) = hole else {
                self.stats.skipped_bytes += skipped;
                // Dense: skipped bytes are the rest of the data after a zero word.
                return Ok(match framing {
                    Framing::Dense if skipped > 0 => Scanned::ZeroWord,
                    _ => Scanned::Whole,
                });
            };
            self.stats.skipped_bytes += len as u64;
            self.stats.problems.push(format!(
                "{region}: {len} bytes at offset {} were never written (a record whose writer \
                 stopped or died before writing it); the records after them are kept",
                base as usize + from + zero_at
            ));
            from += zero_at + len;
        }
    }
}

/// Whether a provider's writers may still be running at its final read-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writers {
    /// It answered STOPPED: its writers are done once its header is finalised too (a stop
    /// that timed out sends STOPPED anyway, its writers maybe still running).
    Stopped,
    /// Its process has ended (a crash, a kill): no writer is left, whatever the header.
    Ended,
    /// Gone without STOPPED, its process maybe still running.
    MayRun,
}

/// Most bytes of copy buffer a drain keeps between two streaming saves.
const SCRATCH_KEPT: usize = 8 << 20;

/// Bytes of a rolling buffer copied and scanned at a time (streaming saves, and the final
/// read-out of a provider that answered STOPPED): small enough to stay in a core's cache
/// between its copy out of the mapping, its scan and its write to the output (4 MiB windows
/// cost the manager about three times the CPU per MiB of 128 KiB ones: BENCHMARKS.md).
pub const READ_WINDOW: u64 = 128 << 10;

/// How [`Drain::scan_into`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scanned {
    /// At the end of its bytes (chunked: zero tails and stale chunks skipped on the way).
    Whole,
    /// At a zero word in dense framing: the end of the region's data.
    ZeroWord,
    /// At a malformed record: the rest of the region is skipped.
    Malformed,
}

/// Where a window of a region is cut ([`window_cut`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WindowCut {
    /// Scan the window's first bytes, up to here (no record or run crosses it).
    At(u64),
    /// The window's first record or run is longer than the window (and within the data):
    /// this many bytes.
    Unit(u64),
    /// The window's first record is a large record the archive leaves out (over
    /// [`MAX_READABLE_LARGE_WORDS`] words, within the data): this many bytes, not read.
    Oversized(u64),
}

/// Where to cut `window`, the bytes of a region from a record or chunk boundary, `remaining`
/// of them up to the region's data end, so that no record (dense) or chunk run (chunked) is
/// split: after the last unit that fits; the whole window when it ends the data (the scan then
/// reports what does not fit), or when the framing ends inside it (a zero word, a malformed
/// record, a record past the data end: the scan stops there).
fn window_cut(window: &[u8], framing: Framing, remaining: u64) -> WindowCut {
    let len = window.len() as u64;
    if len >= remaining {
        return WindowCut::At(len);
    }
    match framing {
        Framing::Dense => match CheckedRecords::prefix(window) {
            (_, ScanStop::Error(e)) => match e.kind {
                // A record past the data end is malformed: not read, only reported.
                FramingErrorKind::PastEnd { header, words, .. }
                    if e.offset == 0 && (words as u64).saturating_mul(8) <= remaining =>
                {
                    let large = record_type(header) == RecordType::LargeRecord as u8;
                    match words as u64 * 8 {
                        size if large && words > MAX_READABLE_LARGE_WORDS => {
                            WindowCut::Oversized(size)
                        }
                        size => WindowCut::Unit(size),
                    }
                }
                FramingErrorKind::PastEnd { .. } if e.offset == 0 => WindowCut::At(len),
                FramingErrorKind::PastEnd { .. } => WindowCut::At(e.offset as u64),
                _ => WindowCut::At(len),
            },
            _ => WindowCut::At(len),
        },
        Framing::Chunked {
            chunk_size,
            wrapped_count,
        } => {
            // The scanner's walk: a run tagged for the lap spans its chunks; any other chunk
            // is skipped alone.
            let mut at = 0u64;
            while at + 8 <= len {
                let word = &window[at as usize..at as usize + 8];
                let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
                match parse_chunk_tag(word) {
                    Some((wc, run)) if wc == wrapped_count => {
                        let end = at.saturating_add(u64::from(run) * chunk_size);
                        if end > len {
                            return match at {
                                0 => WindowCut::Unit(end),
                                _ => WindowCut::At(at),
                            };
                        }
                        at = end;
                    }
                    _ => at += chunk_size,
                }
            }
            WindowCut::At(at.min(len))
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Region {
    Durable,
    Rolling(usize),
}

impl std::fmt::Display for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Region::Durable => f.write_str("durable buffer"),
            Region::Rolling(i) => write!(f, "rolling buffer {i}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::archive::LendingOutput;
    use fxtrace::buffer::header::{make_chunk_tag, HEADER_SIZE, POSITION_WRAPPED_SHIFT};

    const SIZE: u64 = 16 * 4096;

    /// A buffer with a valid header for `mode` and chunk size `chunk` (0: dense).
    fn buffer(mode: BufferingMode, chunk: u64) -> (TraceBuffer, BufferGeometry) {
        let buffer = TraceBuffer::create(SIZE).unwrap();
        let geometry = BufferGeometry::compute(mode, SIZE).unwrap();
        buffer
            .header()
            .store(&HeaderFields::initial(&geometry, chunk));
        (buffer, geometry)
    }

    fn put_words(buffer: &TraceBuffer, offset: u64, words: &[u64]) {
        for (i, w) in words.iter().enumerate() {
            let at = offset as usize + i * 8;
            // SAFETY: test-only writes inside the mapping (offsets chosen below its size), with
            // no concurrent access.
            unsafe { buffer.as_ptr().add(at).cast::<u64>().write(*w) };
        }
    }

    /// An instant-like test record of 2 words: header type 4 with `tag` in bits 16.., payload.
    fn rec(tag: u64) -> [u64; 2] {
        [0x24 | (tag << 16), tag]
    }

    /// What [`tags`] names, in order.
    fn tag_names(bytes: &[u8]) -> Vec<String> {
        tags(bytes).into_iter().map(|(_, what)| what).collect()
    }

    fn tags(bytes: &[u8]) -> Vec<(Option<u32>, String)> {
        // Decode only framing-level facts: provider metadata and raw header tags.
        let mut out = Vec::new();
        let mut i = 8;
        out.push((None, "magic".to_string()));
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        let mut provider = None;
        while i < bytes.len() {
            let h = words[i / 8];
            let size = ((h >> 4) & 0xfff) as usize;
            assert!(size > 0);
            let what = match h & 0xf {
                0 => match (h >> 16) & 0xf {
                    1 | 2 => {
                        provider = Some(((h >> 20) & 0xffff_ffff) as u32);
                        format!("section {}", provider.unwrap())
                    }
                    3 => "overflow".to_string(),
                    t => format!("meta {t}"),
                },
                4 if size == 2 => format!("rec {}", h >> 16),
                t => format!("type {t}"),
            };
            out.push((provider, what));
            i += size * 8;
        }
        out
    }

    /// A test record of `words` words (type 4, `tag` in bits 16..), its payload `tag`.
    fn record(tag: u64, words: u64) -> Vec<u64> {
        let mut r = vec![tag; words as usize];
        r[0] = 0x4 | (words << 4) | (tag << 16);
        r
    }

    /// The final read-out of `buffer` (`mode`) copied whole (a provider gone without STOPPED)
    /// and a window of `window` bytes at a time (one that answered STOPPED): the same
    /// archive and counters. Returns the archive and the windowed drain.
    fn read_out_both_ways(
        buffer: &TraceBuffer,
        mode: BufferingMode,
        window: u64,
    ) -> (Vec<u8>, Drain) {
        let (whole, expected) =
            read_out_to(buffer, (mode, READ_WINDOW), Writers::MayRun, Vec::new());
        let (windowed, got) = read_out_to(buffer, (mode, window), Writers::Stopped, Vec::new());
        assert_eq!(whole.windows_read, 0, "a provider lost: copied whole");
        assert!(
            windowed.windows_read > 0,
            "STOPPED, header finalised: windows"
        );
        assert_eq!(
            got, expected,
            "windowed read-out differs from the whole copy"
        );
        same_counts(windowed.stats(), whole.stats());
        // About one window at a time: a record a reader reads (4095 words) at most beyond.
        assert!(
            windowed.largest_read <= window.max(4095 * 8),
            "{}",
            windowed.largest_read
        );
        // The same read into an output's room: the same archive and counters.
        let lending = LendingOutput::default();
        let (in_room, lending) = read_out_to(buffer, (mode, window), Writers::Stopped, lending);
        assert_eq!(lending.bytes, expected, "read-out into room differs");
        same_counts(in_room.stats(), whole.stats());
        (got, windowed)
    }

    /// The final read-out of `buffer` (`mode`, windows of `window` bytes) as provider 1 into
    /// an archive on `out`: the drain and the output.
    fn read_out_to<W: ArchiveOutput>(
        buffer: &TraceBuffer,
        (mode, window): (BufferingMode, u64),
        writers: Writers,
        out: W,
    ) -> (Drain, W) {
        let mut drain = Drain::new(mode);
        drain.window = window;
        let mut archive = Archive::new(out).unwrap();
        drain
            .read_out(buffer, &mut archive, (1, "p"), writers)
            .unwrap();
        (drain, archive.into_inner().unwrap())
    }

    /// Whether two drains counted alike.
    fn same_counts(a: &DrainStats, b: &DrainStats) {
        assert_eq!(
            (a.records, a.rolling_bytes, a.durable_bytes, a.skipped_bytes),
            (b.records, b.rolling_bytes, b.durable_bytes, b.skipped_bytes)
        );
        assert_eq!(
            (a.forged_metadata, a.oversized_records),
            (b.forged_metadata, b.oversized_records)
        );
        assert_eq!(a.problems.kept(), b.problems.kept());
    }

    #[test]
    fn a_chunked_buffer_is_read_a_window_at_a_time_without_splitting_a_run() {
        let chunk = 256;
        let (buffer, g) = buffer(BufferingMode::Oneshot, chunk);
        let base = g.rolling_offset(0);
        // Runs of 1, 2 and 3 chunks, full of records of 1 to 31 words, and an untagged chunk:
        // windows of 3 chunks (and of 1: every run of 2 or 3 is longer) cut between runs.
        let mut at = 0;
        let mut tag = 1;
        for (i, run) in [1u64, 2, 3, 1, 3, 2, 2, 1, 3].iter().enumerate() {
            if i == 4 {
                at += chunk; // never used
            }
            let mut words = vec![make_chunk_tag(0, *run as u16)];
            let room = (run * chunk / 8) as usize;
            while words.len() < room - 1 {
                let n = (tag % 31 + 1).min((room - words.len()) as u64);
                words.extend(record(tag, n));
                tag += 1;
            }
            put_words(&buffer, base + at, &words);
            at += run * chunk;
        }
        buffer.header().rolling_data_end[0].store(at, std::sync::atomic::Ordering::Release);
        for window in [chunk, 3 * chunk, 4 * chunk] {
            let (_, drain) = read_out_both_ways(&buffer, BufferingMode::Oneshot, window);
            assert_eq!(drain.stats().records, tag - 1, "window {window}");
        }
    }

    #[test]
    fn a_dense_buffer_is_read_a_window_at_a_time_without_splitting_a_record() {
        let (buffer, g) = buffer(BufferingMode::Oneshot, 0);
        let base = g.rolling_offset(0);
        let mut words = Vec::new();
        for tag in 1..200u64 {
            words.extend(record(tag, tag % 37 + 1));
        }
        // A record longer than the smaller windows (300 words: read whole), then more.
        words.extend(record(500, 300));
        words.extend(record(501, 2));
        put_words(&buffer, base, &words);
        let end = words.len() as u64 * 8;
        buffer.header().rolling_data_end[0].store(end, std::sync::atomic::Ordering::Release);
        for window in [64, 1000, 4096] {
            let (_, drain) = read_out_both_ways(&buffer, BufferingMode::Oneshot, window);
            assert_eq!(drain.stats().records, 201, "window {window}");
            assert_eq!(drain.stats().rolling_bytes, end);
        }
    }

    #[test]
    fn a_run_longer_than_a_window_and_an_oversized_record_are_read_a_window_at_a_time() {
        // Chunked: one run of 40 chunks of records, then a small one; windows of 2 chunks.
        let chunk = 256;
        let (buffer, g) = buffer(BufferingMode::Oneshot, chunk);
        let base = g.rolling_offset(0);
        let mut words = vec![make_chunk_tag(0, 40)];
        let mut tag = 1;
        while words.len() + 5 <= 40 * 32 {
            words.extend(record(tag, tag % 5 + 1));
            tag += 1;
        }
        words.resize(40 * 32, 0);
        words.extend([&[make_chunk_tag(0, 1)][..], &rec(999)].concat());
        put_words(&buffer, base, &words);
        let end = 41 * chunk;
        buffer.header().rolling_data_end[0].store(end, std::sync::atomic::Ordering::Release);
        let (_, drain) = read_out_both_ways(&buffer, BufferingMode::Oneshot, 2 * chunk);
        assert_eq!(drain.stats().records, tag);
        assert!(drain.largest_read <= 2 * chunk, "{}", drain.largest_read);
        // Dense: a large record of 5000 words (left out by the archive) between records.
        let (buffer, g) = self::buffer(BufferingMode::Oneshot, 0);
        let mut words = [rec(1), rec(2)].concat();
        let mut large = vec![0x55u64; 5000];
        large[0] = 15 | (5000 << 4);
        words.extend(large);
        words.extend(rec(3));
        put_words(&buffer, g.rolling_offset(0), &words);
        buffer.header().rolling_data_end[0]
            .store(words.len() as u64 * 8, std::sync::atomic::Ordering::Release);
        let (_, drain) = read_out_both_ways(&buffer, BufferingMode::Oneshot, 1024);
        assert_eq!(drain.stats().records, 3);
        assert_eq!(drain.stats().oversized_records, 1);
        assert!(drain.largest_read <= 1024, "{}", drain.largest_read);
    }

    #[test]
    fn chunks_larger_than_a_window_are_read_by_their_tags_and_records() {
        // Chunks of 4 KiB (a provider may choose up to its buffer), windows of 512 bytes: a
        // run of two chunks of records, a stale chunk, a run of one.
        let chunk = 4096;
        let (buffer, g) = buffer(BufferingMode::Oneshot, chunk);
        let base = g.rolling_offset(0);
        let mut words = vec![make_chunk_tag(0, 2)];
        let mut tag = 1;
        while words.len() + 7 <= 2 * 512 {
            words.extend(record(tag, tag % 7 + 1));
            tag += 1;
        }
        words.resize(2 * 512, 0);
        words.extend([make_chunk_tag(5, 1), rec(900)[0], rec(900)[1]]);
        words.resize(3 * 512, 0);
        words.extend([&[make_chunk_tag(0, 1)][..], &rec(901)].concat());
        put_words(&buffer, base, &words);
        buffer.header().rolling_data_end[0].store(4 * chunk, std::sync::atomic::Ordering::Release);
        let (_, drain) = read_out_both_ways(&buffer, BufferingMode::Oneshot, 512);
        assert_eq!(drain.stats().records, tag);
        assert!(drain.largest_read <= 512, "{}", drain.largest_read);
    }

    #[test]
    fn a_windowed_dense_read_stops_at_the_first_zero_word_and_at_a_malformed_record() {
        // Zero word: what follows it (stale records in later windows) is not data.
        let (buffer, g) = buffer(BufferingMode::Oneshot, 0);
        let base = g.rolling_offset(0);
        let mut words = Vec::new();
        for tag in 1..40u64 {
            words.extend(record(tag, 4));
        }
        words.push(0);
        for tag in 40..80u64 {
            words.extend(record(tag, 4));
        }
        put_words(&buffer, base, &words);
        buffer.header().rolling_data_end[0]
            .store(words.len() as u64 * 8, std::sync::atomic::Ordering::Release);
        let (_, drain) = read_out_both_ways(&buffer, BufferingMode::Oneshot, 128);
        assert_eq!(drain.stats().records, 39);
        // A malformed record (size 0) in a middle window: the rest is skipped and reported.
        put_words(&buffer, base + 39 * 32, &[0x4]);
        let (_, drain) = read_out_both_ways(&buffer, BufferingMode::Oneshot, 128);
        assert_eq!(drain.stats().records, 39);
        assert_eq!(drain.stats().problems.kept().len(), 1);
    }

    #[test]
    fn a_streaming_save_is_read_a_window_at_a_time() {
        let chunk = 256;
        let (buffer, g) = buffer(BufferingMode::Streaming, chunk);
        let r0 = g.rolling_offset(0);
        let mut at = 0;
        let mut tag = 1;
        for run in [2u64, 1, 3, 2] {
            let mut words = vec![make_chunk_tag(0, run as u16)];
            while words.len() + 4 <= (run * chunk / 8) as usize {
                words.extend(record(tag, 4));
                tag += 1;
            }
            put_words(&buffer, r0 + at, &words);
            at += run * chunk;
        }
        put_words(&buffer, HEADER_SIZE, &rec(1000));
        buffer.header().rolling_data_end[0].store(at, std::sync::atomic::Ordering::Release);
        let save = |window| {
            let mut drain = Drain::new(BufferingMode::Streaming);
            drain.window = window;
            let mut archive = Archive::new(Vec::new()).unwrap();
            drain
                .save_buffer(&buffer, &mut archive, 1, "s", 0, 16)
                .unwrap();
            assert_eq!(drain.stats().records, tag, "window {window}");
            // Into an output's room: the same.
            let mut in_room = Drain::new(BufferingMode::Streaming);
            in_room.window = window;
            let mut lending = Archive::new(LendingOutput::default()).unwrap();
            in_room
                .save_buffer(&buffer, &mut lending, 1, "s", 0, 16)
                .unwrap();
            same_counts(in_room.stats(), drain.stats());
            let lending = lending.into_inner().unwrap();
            assert!(lending.lent > 0, "no room lent");
            let bytes = archive.into_inner().unwrap();
            assert_eq!(lending.bytes, bytes, "window {window}: in room");
            bytes
        };
        assert_eq!(save(chunk), save(READ_WINDOW));
    }

    #[test]
    fn a_stopped_provider_whose_header_was_not_finalised_is_copied_whole() {
        // Its stop timed out: STOPPED came anyway, the ends are 0, writers may be running.
        // Oneshot (no durable buffer: no order to keep) is read in windows all the same.
        let (buffer, g) = buffer(BufferingMode::Oneshot, 0);
        put_words(&buffer, g.rolling_offset(0), &[rec(1), rec(2)].concat());
        let mut drain = Drain::new(BufferingMode::Oneshot);
        drain.window = 16;
        let mut archive = Archive::new(Vec::new()).unwrap();
        drain
            .read_out(&buffer, &mut archive, (1, "p"), Writers::Stopped)
            .unwrap();
        assert_eq!(drain.windows_read, 2);
        assert_eq!(drain.stats().records, 2);
        // Circular: both ends must be set.
        let (buffer, g) = self::buffer(BufferingMode::Circular, 0);
        put_words(&buffer, g.rolling_offset(0), &rec(3));
        buffer.header().rolling_data_end[0].store(16, std::sync::atomic::Ordering::Release);
        let mut drain = Drain::new(BufferingMode::Circular);
        let mut archive = Archive::new(Vec::new()).unwrap();
        drain
            .read_out(&buffer, &mut archive, (1, "p"), Writers::Stopped)
            .unwrap();
        assert_eq!(drain.windows_read, 0);
        buffer
            .header()
            .durable_data_end
            .store(16, std::sync::atomic::Ordering::Release);
        let mut drain = Drain::new(BufferingMode::Circular);
        let mut archive = Archive::new(Vec::new()).unwrap();
        drain
            .read_out(&buffer, &mut archive, (1, "p"), Writers::Stopped)
            .unwrap();
        assert_eq!(drain.windows_read, 1);
    }

    #[test]
    fn a_provider_whose_process_ended_is_read_in_windows_whatever_its_header() {
        // It crashed: the ends are 0, the durable buffer holds records, nothing writes now.
        let chunk = 256;
        let (buffer, g) = buffer(BufferingMode::Circular, chunk);
        put_words(&buffer, g.durable_offset(), &[rec(1), rec(2)].concat());
        let mut words = Vec::new();
        for run in 0..20u64 {
            words.push(make_chunk_tag(0, 1));
            for i in 0..10 {
                words.extend(record(run * 10 + i + 3, 3));
            }
            words.resize(((run + 1) * chunk / 8) as usize, 0);
        }
        put_words(&buffer, g.rolling_offset(0), &words);
        let read = |writers| {
            let mut drain = Drain::new(BufferingMode::Circular);
            drain.window = 2 * chunk;
            let mut archive = Archive::new(Vec::new()).unwrap();
            drain
                .read_out(&buffer, &mut archive, (1, "p"), writers)
                .unwrap();
            (archive.into_inner().unwrap(), drain)
        };
        let (whole, whole_drain) = read(Writers::MayRun);
        let (windowed, drain) = read(Writers::Ended);
        assert_eq!(whole_drain.windows_read, 0);
        assert!(drain.windows_read >= 10, "{}", drain.windows_read);
        assert_eq!(windowed, whole);
        assert_eq!(drain.stats().records, 202);
        // STOPPED with those ends (a stop that timed out): copied whole.
        let (_, stopped) = read(Writers::Stopped);
        assert_eq!(stopped.windows_read, 0);
    }

    #[test]
    fn a_malformed_durable_record_is_reported_from_the_durable_buffers_start() {
        let (buffer, g) = buffer(BufferingMode::Streaming, 0);
        use std::sync::atomic::Ordering::Release;
        put_words(&buffer, g.durable_offset(), &[rec(1), rec(2)].concat());
        put_words(&buffer, g.rolling_offset(0), &rec(3));
        buffer.header().rolling_data_end[0].store(16, Release);
        let mut drain = Drain::new(BufferingMode::Streaming);
        let mut archive = Archive::new(Vec::new()).unwrap();
        drain
            .save_buffer(&buffer, &mut archive, 1, "s", 0, 16)
            .unwrap();
        // The second save's durable bytes start at 16: rec 2, then a size-0 header at 32.
        put_words(&buffer, g.durable_offset() + 32, &[0x4]);
        put_words(&buffer, g.rolling_offset(1), &rec(4));
        buffer.header().rolling_data_end[1].store(16, Release);
        drain
            .save_buffer(&buffer, &mut archive, 1, "s", 1, 40)
            .unwrap();
        let problems = drain.stats().problems.kept();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("offset 32"), "{problems:?}");
        // The final read-out's durable bytes start at 40: rec 5, then a size-0 header at 56.
        put_words(
            &buffer,
            g.durable_offset() + 40,
            &[rec(5)[0], rec(5)[1], 0x4],
        );
        put_words(&buffer, g.rolling_offset(0), &rec(6));
        let h = buffer.header();
        h.rolling_data_end[0].store(16, Release);
        h.wrapped_count.store(2, Release);
        h.durable_data_end.store(64, Release);
        drain
            .read_out(&buffer, &mut archive, (1, "s"), Writers::Stopped)
            .unwrap();
        let problems = drain.stats().problems.kept();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[1].contains("offset 56"), "{problems:?}");
        assert!(drain.windows_read > 0);
    }

    mod windows_property {
        use super::*;
        use proptest::prelude::*;

        /// A rolling buffer's contents: runs (current or stale lap) of records of any size,
        /// untagged chunks, runs longer than the buffer, large records with 32-bit sizes.
        #[derive(Debug, Clone)]
        enum Unit {
            Run {
                stale: bool,
                run: u16,
                records: Vec<u64>,
            },
            Untagged(u64),
            HugeRun(u16),
            LargeRecord(u64),
        }

        fn unit() -> impl Strategy<Value = Unit> {
            let sizes = prop_oneof![10 => 1u64..20, 1 => 20u64..600, 1 => Just(0u64)];
            prop_oneof![
                8 => (any::<bool>(), 1u16..12, proptest::collection::vec(sizes, 0..40))
                    .prop_map(|(stale, run, records)| Unit::Run { stale, run, records }),
                1 => any::<u64>().prop_map(Unit::Untagged),
                1 => prop_oneof![Just(u16::MAX), any::<u16>()].prop_map(Unit::HugeRun),
                1 => prop_oneof![Just(0xffff_ffffu64), 1u64..2000, 4090u64..6000]
                    .prop_map(Unit::LargeRecord),
            ]
        }

        /// The words of `units` in chunks of `chunk` words (tags left out when `dense`), at
        /// most `total`.
        fn layout(units: &[Unit], chunk: usize, total: usize, lap: u32, dense: bool) -> Vec<u64> {
            let mut out = Vec::new();
            let tag = |lap, run| {
                if dense {
                    Vec::new()
                } else {
                    vec![make_chunk_tag(lap, run)]
                }
            };
            for u in units {
                let mut words = match u {
                    Unit::Run {
                        stale,
                        run,
                        records,
                    } => {
                        let mut words = tag(if *stale { lap ^ 1 } else { lap }, *run);
                        for &n in records.iter().take_while(|&&n| n > 0) {
                            words.extend(record(7, n.min(0xfff)));
                        }
                        words.resize(*run as usize * chunk, 0);
                        words
                    }
                    Unit::Untagged(x) => vec![*x],
                    Unit::HugeRun(run) => [tag(lap, *run), vec![0x14]].concat(),
                    Unit::LargeRecord(n) => [tag(lap, 1), vec![15 | (n << 4)]].concat(),
                };
                if !matches!(u, Unit::Run { .. }) {
                    words.resize(chunk, 0);
                }
                out.extend(words);
                if out.len() >= total {
                    break;
                }
            }
            out.truncate(total);
            out
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
            /// Read a window at a time, any buffer reads as it does whole.
            #[test]
            fn a_windowed_read_out_equals_the_whole_copy(
                units in proptest::collection::vec(unit(), 1..120),
                chunk_words in prop_oneof![Just(0u64), Just(2u64), Just(4), Just(32), 2u64..128],
                end in 1u64..=SIZE / 8,
                window in prop_oneof![Just(8u64), 8u64..8192, Just(READ_WINDOW)],
                wrapped in 0u32..3,
                circular in any::<bool>(),
            ) {
                let mode = if circular { BufferingMode::Circular } else { BufferingMode::Oneshot };
                let wrapped = if circular { wrapped } else { 0 };
                let chunk = chunk_words * 8;
                let buffer = TraceBuffer::create(SIZE).unwrap();
                let g = BufferGeometry::compute(mode, SIZE).unwrap();
                prop_assume!(chunk <= g.rolling_buffer_size);
                let mut fields = HeaderFields::initial(&g, chunk);
                fields.wrapped_count = wrapped;
                let end = (end * 8).min(g.rolling_buffer_size);
                fields.rolling_data_end = [end, end];
                if circular {
                    fields.durable_data_end = MIN_DURABLE_BUFFER_SIZE;
                }
                buffer.header().store(&fields);
                let total = (g.rolling_buffer_size / 8) as usize;
                for index in 0..if circular { 2 } else { 1 } {
                    let lap = if index == (wrapped & 1) as usize { wrapped } else { wrapped.wrapping_sub(1) };
                    let words = layout(&units, (chunk_words as usize).max(1), total, lap, chunk == 0);
                    put_words(&buffer, g.rolling_offset(index), &words);
                }
                read_out_both_ways(&buffer, mode, (window & !7).max(8));
            }
        }
    }

    #[test]
    fn the_fill_is_what_the_buffer_holds_before_it_drops() {
        let g = |mode| BufferGeometry::compute(mode, 1 << 20).unwrap();
        let position = |offset: u64, wrapped: u64| offset | (wrapped << POSITION_WRAPPED_SHIFT);
        // Oneshot: the written part of the buffer, from the allocator's position (past the
        // end: full), or from the end a full buffer records.
        let oneshot = g(BufferingMode::Oneshot);
        let mut h = HeaderFields::initial(&oneshot, 1024);
        assert_eq!(fill_percent(&h, &oneshot), 0);
        h.reserved[3] = position(oneshot.rolling_buffer_size * 97 / 100 + 8, 0);
        assert_eq!(fill_percent(&h, &oneshot), 97);
        h.reserved[3] = position(oneshot.rolling_buffer_size + 4096, 0);
        assert_eq!(fill_percent(&h, &oneshot), 100);
        h.reserved[3] = 0;
        h.rolling_data_end[0] = oneshot.rolling_buffer_size / 2;
        assert_eq!(fill_percent(&h, &oneshot), 50);
        // Streaming: the half written, plus the other while it waits for its save.
        let streaming = g(BufferingMode::Streaming);
        let half = streaming.rolling_buffer_size;
        let mut h = HeaderFields::initial(&streaming, 1024);
        h.wrapped_count = 3;
        h.reserved[3] = position(half * 6 / 10 + 8, 3);
        assert_eq!(fill_percent(&h, &streaming), 30, "the other half was saved");
        h.rolling_data_end[0] = half;
        assert_eq!(
            fill_percent(&h, &streaming),
            80,
            "buffer 0 waits for its save"
        );
        h.reserved[3] = position(half * 9 / 10, 2);
        assert_eq!(
            fill_percent(&h, &streaming),
            50,
            "a position of the lap before"
        );
        // The durable buffer fills too (then tracing stops): circular's only fill.
        h.reserved[4] = streaming.durable_buffer_size * 9 / 10 + 8;
        assert_eq!(fill_percent(&h, &streaming), 90);
        let circular = g(BufferingMode::Circular);
        let mut h = HeaderFields::initial(&circular, 1024);
        h.reserved[3] = position(circular.rolling_buffer_size, 7);
        h.wrapped_count = 7;
        assert_eq!(
            fill_percent(&h, &circular),
            0,
            "overwriting is circular's way"
        );
        h.reserved[4] = circular.durable_buffer_size / 4 + 8;
        assert_eq!(fill_percent(&h, &circular), 25);
    }

    #[test]
    fn oneshot_read_out_scans_a_zero_end_and_counts_drops() {
        let (buffer, g) = buffer(BufferingMode::Oneshot, 0);
        let base = g.rolling_offset(0);
        put_words(&buffer, base, &[rec(1), rec(2), rec(3)].concat());
        buffer
            .header()
            .num_records_dropped
            .store(5, std::sync::atomic::Ordering::Release);
        let mut archive = Archive::new(Vec::new()).unwrap();
        let mut drain = Drain::new(BufferingMode::Oneshot);
        drain
            .read_out(&buffer, &mut archive, (3, "p"), Writers::MayRun)
            .unwrap();
        let bytes = archive.into_inner().unwrap();
        let got = tag_names(&bytes);
        assert_eq!(
            got,
            ["magic", "section 3", "overflow", "rec 1", "rec 2", "rec 3"]
        );
        assert_eq!(drain.stats().records, 3);
        assert_eq!(drain.stats().rolling_bytes, 48);
        assert_eq!(drain.stats().records_dropped, 5);
        // Whole, well-framed records only.
        let scan = fxtrace_format::scan_records(&bytes);
        assert_eq!(scan.stop, fxtrace_format::ScanStop::End);
        assert_eq!(scan.valid_len, bytes.len());
    }

    #[test]
    fn a_chunked_buffer_of_a_dead_writer_is_read_to_its_last_run() {
        // rolling_data_end 0 (the provider died): runs past untagged chunks are found, and the
        // copy ends with the last run.
        let chunk = 256;
        let (buffer, g) = buffer(BufferingMode::Oneshot, chunk);
        let base = g.rolling_offset(0);
        put_words(
            &buffer,
            base,
            &[&[make_chunk_tag(0, 1)][..], &rec(1)].concat(),
        );
        put_words(
            &buffer,
            base + 9 * chunk,
            &[&[make_chunk_tag(0, 2)][..], &rec(2)].concat(),
        );
        let mut archive = Archive::new(Vec::new()).unwrap();
        let mut drain = Drain::new(BufferingMode::Oneshot);
        drain
            .read_out(&buffer, &mut archive, (3, "p"), Writers::MayRun)
            .unwrap();
        let bytes = archive.into_inner().unwrap();
        let got = tag_names(&bytes);
        assert_eq!(got, ["magic", "section 3", "rec 1", "rec 2"]);
        assert!(g.rolling_buffer_size > 11 * chunk);
        assert_eq!(drain.stats().rolling_bytes, 32);
    }

    #[test]
    fn circular_read_out_is_durable_then_earlier_then_current_and_skips_stale_chunks() {
        let chunk = 256;
        let (buffer, g) = buffer(BufferingMode::Circular, chunk);
        let h = buffer.header();
        use std::sync::atomic::Ordering::Release;
        // Durable: two records, end finalised.
        put_words(&buffer, HEADER_SIZE, &[rec(10), rec(11)].concat());
        h.durable_data_end.store(32, Release);
        // Wrapped count 3: current buffer 1 (lap 3), earlier buffer 0 (lap 2).
        h.wrapped_count.store(3, Release);
        let r0 = g.rolling_offset(0);
        let r1 = g.rolling_offset(1);
        // Buffer 0: a lap-2 chunk, then a stale lap-0 chunk.
        put_words(
            &buffer,
            r0,
            &[&[make_chunk_tag(2, 1)][..], &rec(20)].concat(),
        );
        put_words(
            &buffer,
            r0 + chunk,
            &[&[make_chunk_tag(0, 1)][..], &rec(99)].concat(),
        );
        h.rolling_data_end[0].store(2 * chunk, Release);
        // Buffer 1: lap 3, end 0 (not finalised: scan it all).
        put_words(
            &buffer,
            r1,
            &[&[make_chunk_tag(3, 1)][..], &rec(30), &rec(31)].concat(),
        );
        let mut archive = Archive::new(Vec::new()).unwrap();
        let mut drain = Drain::new(BufferingMode::Circular);
        drain
            .read_out(&buffer, &mut archive, (1, "c"), Writers::MayRun)
            .unwrap();
        let got = tag_names(&archive.into_inner().unwrap());
        assert_eq!(
            got,
            [
                "magic",
                "section 1",
                "rec 10",
                "rec 11",
                "rec 20",
                "rec 30",
                "rec 31"
            ]
        );
        assert!(drain.stats().skipped_bytes > 0);
    }

    #[test]
    fn header_errors_write_nothing() {
        let (buffer, g) = buffer(BufferingMode::Oneshot, 0);
        use std::sync::atomic::Ordering::Release;
        buffer.header().rolling_data_end[0].store(g.rolling_buffer_size + 8, Release);
        let mut archive = Archive::new(Vec::new()).unwrap();
        let mut drain = Drain::new(BufferingMode::Oneshot);
        let err = drain
            .read_out(&buffer, &mut archive, (1, "x"), Writers::MayRun)
            .unwrap_err();
        assert!(matches!(
            err,
            DrainError::Header(HeaderError::BadRollingDataEnd { index: 0, .. })
        ));
        assert_eq!(archive.bytes_written(), 8);
        // Mode mismatch.
        let (buffer, _) = self::buffer(BufferingMode::Circular, 0);
        let err = drain
            .read_out(&buffer, &mut archive, (1, "x"), Writers::MayRun)
            .unwrap_err();
        assert!(matches!(err, DrainError::ModeMismatch { .. }));
        // Zero header (provider never initialised it).
        let blank = TraceBuffer::create(SIZE).unwrap();
        let err = drain
            .read_out(&blank, &mut archive, (1, "x"), Writers::MayRun)
            .unwrap_err();
        assert!(matches!(err, DrainError::Header(HeaderError::BadMagic(0))));
        assert_eq!(archive.bytes_written(), 8);
    }

    #[test]
    fn streaming_saves_follow_the_sequence_and_final_read_skips_streamed_buffers() {
        let (buffer, g) = buffer(BufferingMode::Streaming, 0);
        let h = buffer.header();
        use std::sync::atomic::Ordering::Release;
        let r0 = g.rolling_offset(0);
        let r1 = g.rolling_offset(1);
        put_words(&buffer, HEADER_SIZE, &rec(1));
        put_words(&buffer, r0, &[rec(2), rec(3)].concat());
        h.rolling_data_end[0].store(32, Release);
        h.wrapped_count.store(1, Release);
        let mut archive = Archive::new(Vec::new()).unwrap();
        let mut drain = Drain::new(BufferingMode::Streaming);
        // Out of sequence: the first save must be wrapped count 0.
        assert!(matches!(
            drain.save_buffer(&buffer, &mut archive, 1, "s", 1, 16),
            Err(DrainError::WrappedCountSequence {
                got: 1,
                expected: 0
            })
        ));
        // Durable end below the initialization record, unaligned, past the buffer.
        for dde in [8, 12, g.durable_buffer_size + 8] {
            assert!(matches!(
                drain.save_buffer(&buffer, &mut archive, 1, "s", 0, dde),
                Err(DrainError::DurableDataEnd { .. })
            ));
        }
        drain
            .save_buffer(&buffer, &mut archive, 1, "s", 0, 16)
            .unwrap();
        // The provider marks buffer 0 saved and writes on in buffer 1; buffer 0 refills (lap 2).
        put_words(&buffer, HEADER_SIZE + 16, &rec(4));
        put_words(&buffer, r1, &rec(5));
        h.rolling_data_end[1].store(16, Release);
        h.rolling_data_end[0].store(0, Release);
        // A repeated wrapped count is refused.
        assert!(matches!(
            drain.save_buffer(&buffer, &mut archive, 1, "s", 0, 16),
            Err(DrainError::WrappedCountSequence {
                got: 0,
                expected: 1
            })
        ));
        // Durable end going backwards is refused.
        assert!(matches!(
            drain.save_buffer(&buffer, &mut archive, 1, "s", 1, 8),
            Err(DrainError::DurableDataEnd { .. })
        ));
        drain
            .save_buffer(&buffer, &mut archive, 1, "s", 1, 32)
            .unwrap();
        // Stop: wrapped count 2, current buffer 0 holds rec 6; buffer 1 (lap 1) was streamed.
        put_words(&buffer, r0, &rec(6));
        h.rolling_data_end[0].store(16, Release);
        h.wrapped_count.store(2, Release);
        h.durable_data_end.store(32, Release);
        drain
            .read_out(&buffer, &mut archive, (1, "s"), Writers::MayRun)
            .unwrap();
        let got = tag_names(&archive.into_inner().unwrap());
        assert_eq!(
            got,
            [
                "magic",
                "section 1",
                "rec 1",
                "rec 2",
                "rec 3", // save 0
                "section 1",
                "rec 4",
                "rec 5", // save 1
                "section 1",
                "rec 6", // final
            ]
        );
        assert_eq!(drain.stats().saves, 2);
        assert_eq!(drain.stats().records, 6);
    }

    /// A provider that died between reserving a durable record and writing its first word
    /// leaves zero words in the middle of the durable data: the records after them are kept,
    /// and the hole is reported.
    #[test]
    fn durable_records_after_a_never_written_one_are_kept_and_the_hole_reported() {
        let (buffer, g) = buffer(BufferingMode::Circular, 0);
        let (a, b) = (rec(1), rec(2));
        // rec 1, two words never written, rec 2; durable_data_end 0: the provider died.
        put_words(&buffer, g.durable_offset(), &[a[0], a[1], 0, 0, b[0], b[1]]);
        let mut archive = Archive::new(Vec::new()).unwrap();
        let mut drain = Drain::new(BufferingMode::Circular);
        drain
            .read_out(&buffer, &mut archive, (1, "p"), Writers::MayRun)
            .unwrap();
        let got = tag_names(&archive.into_inner().unwrap());
        assert_eq!(got, ["magic", "section 1", "rec 1", "rec 2"]);
        let problems = drain.stats().problems.kept();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("16 bytes at offset 16"),
            "{problems:?}"
        );
    }

    /// A save read into the output's room leaves out and reports what a save through the
    /// drain's own window does: provider metadata a provider wrote, a large record over the
    /// readable size, and a hole in the durable buffer.
    #[test]
    fn a_save_into_the_outputs_room_leaves_out_and_reports_as_any_save() {
        let size = 1 << 20;
        let buffer = TraceBuffer::create(size).unwrap();
        let g = BufferGeometry::compute(BufferingMode::Streaming, size).unwrap();
        let chunk = 256;
        buffer.header().store(&HeaderFields::initial(&g, chunk));
        // Durable: rec 1, two words never written, rec 2.
        let (a, b) = (rec(1), rec(2));
        put_words(&buffer, g.durable_offset(), &[a[0], a[1], 0, 0, b[0], b[1]]);
        // Rolling: one run of 200 chunks: records, a provider section (only the manager writes
        // those), a large record over the readable size, records; all in one window.
        let forged = 0x10 | (2 << 16) | (7 << 20);
        let large_words = MAX_READABLE_LARGE_WORDS as u64 + 5;
        let mut large = vec![0u64; large_words as usize];
        large[0] = 0xf | (large_words << 4);
        let mut words = vec![make_chunk_tag(0, 200)];
        words.extend(record(3, 4));
        words.push(forged);
        words.extend(record(4, 4));
        words.extend(&large);
        words.extend(record(5, 4));
        put_words(&buffer, g.rolling_offset(0), &words);
        let end = 200 * chunk;
        assert!(end < READ_WINDOW);
        buffer.header().rolling_data_end[0].store(end, std::sync::atomic::Ordering::Release);
        let mut drain = Drain::new(BufferingMode::Streaming);
        let mut archive = Archive::new(Vec::new()).unwrap();
        drain
            .save_buffer(&buffer, &mut archive, 1, "s", 0, 48)
            .unwrap();
        let mut in_room = Drain::new(BufferingMode::Streaming);
        let mut lending = Archive::new(LendingOutput::default()).unwrap();
        in_room
            .save_buffer(&buffer, &mut lending, 1, "s", 0, 48)
            .unwrap();
        let (expected, lending) = (archive.into_inner().unwrap(), lending.into_inner().unwrap());
        assert_eq!(
            lending.lent, 2,
            "the durable bytes and the window, each in a room"
        );
        assert_eq!(lending.bytes, expected);
        same_counts(in_room.stats(), drain.stats());
        let stats = in_room.stats();
        assert_eq!((stats.forged_metadata, stats.oversized_records), (1, 1));
        assert_eq!(stats.records, 5, "rec 1, 2 and the three kept in the run");
        assert!(stats.problems.kept()[0].contains("never written"));
        let got = tag_names(&lending.bytes);
        assert_eq!(
            got,
            [
                "magic",
                "section 1",
                "rec 1",
                "rec 2",
                "type 4",
                "type 4",
                "type 4"
            ]
        );
    }

    #[test]
    fn malformed_records_are_cut_and_reported() {
        let (buffer, g) = buffer(BufferingMode::Oneshot, 0);
        // rec 1, then a header claiming 4095 words near the end of nothing: past the data end.
        put_words(&buffer, g.rolling_offset(0), &[rec(1)[0], 1, 0xfff4, 7]);
        buffer.header().rolling_data_end[0].store(32, std::sync::atomic::Ordering::Release);
        let mut archive = Archive::new(Vec::new()).unwrap();
        let mut drain = Drain::new(BufferingMode::Oneshot);
        drain
            .read_out(&buffer, &mut archive, (1, "m"), Writers::MayRun)
            .unwrap();
        assert_eq!(drain.stats().records, 1);
        assert_eq!(
            drain.stats().problems.kept().len(),
            1,
            "{:?}",
            drain.stats().problems
        );
        assert!(drain.stats().problems.kept()[0].contains("offset 16"));
    }
}

//! The archive: the one FXT stream a session writes.
//!
//! Layout (the `fuchsia.tracing.controller` FIDL library: "Traces obtained from different
//! providers are delimited by metadata records within the stream"; Fuchsia's trace_manager,
//! `Tracee::TransferRecords` in `tracee.cc` and the records of `buffer_forwarder.cc`):
//!
//! ```text
//! magic number record                       (first word, exactly once)
//! kernel object "fxtrace" (wall clock)      (when the trace was taken: read::wall)
//! provider info (id, name)                  (the first time provider `id` has data)
//!   [provider event "buffer overflow"]      (records were dropped)
//!   records copied from its buffer …
//! provider info (id 2, name) …              (another provider)
//! provider section (id)                     (provider `id` again: a later streaming save)
//!   records …
//! provider info (0, "fxtrace")              (the manager's own section, once it has a marker)
//!   initialization (the manager's tick rate)
//!   kernel object: thread "fxtrace" of the provider's process   (first marker about it)
//!   marker "fxtrace: N records dropped" (provider id, count)
//! ```
//!
//! The archive takes records only as [`CheckedRecords`] (bytes whose framing a scan accepted:
//! the drain's chunk-aware scanner, or [`CheckedRecords::check`]), so it never walks their
//! framing itself, and it never decodes their contents: a provider's records reach the output
//! byte for byte. An output that keeps its next bytes in memory lends it ([`ArchiveOutput`]):
//! the drain reads a window of a provider's buffer there, and the archive keeps the checked runs
//! in place ([`RoomRuns`]: only runs handed over as `CheckedRecords` are kept). The only
//! records the manager composes itself are metadata records and the visible drop/loss markers
//! of [`Archive::marker`], written in a section of the manager's own that no provider can
//! write into, so that readers tell them from a provider's imitation.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::ops::Range;

use crate::read::wall::WallClock;
use fxtrace_format::{
    self, Arg, ArgValue, CheckedRecords, Encode, EncodeError, Event, EventKind, FramingError,
    Initialization, ProviderEvent, ProviderInfo, ProviderSection, StringRef, ThreadRef, MAGIC_WORD,
};

/// Why the archive could not take some data.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Writing the output failed.
    #[error("writing the trace output: {0}")]
    Io(#[from] io::Error),
    /// Bytes meant for the archive are not whole, well-framed records.
    #[error("refusing records that are not well framed: {0}")]
    Framing(FramingError),
    /// Records were written outside a provider's section.
    #[error("records written before any provider section")]
    NoSection,
    /// A record the manager composes did not encode.
    #[error("encoding a {what} record: {source}")]
    Encode {
        /// Which record.
        what: &'static str,
        /// Why.
        source: EncodeError,
    },
}

/// Writes one FXT stream: the magic number, then provider sections.
#[derive(Debug)]
pub struct Archive<W: ArchiveOutput> {
    /// `None` only once [`Self::into_inner`] has taken it.
    out: Option<W>,
    bytes: u64,
    records: u64,
    /// Providers whose Provider Info record was written.
    introduced: BTreeSet<u32>,
    /// The provider whose section the stream is in.
    current: Option<u32>,
    /// The magic number record is still to be written (before anything else), then the
    /// wall-clock anchor.
    magic_pending: bool,
    /// The wall-clock anchor record ([`crate::read::wall`]), written right after the magic.
    anchor: Vec<u8>,
    /// Processes whose marker thread ([`marker_tid`]) was named.
    marker_threads: BTreeSet<u64>,
    /// Records taken and not written yet (at most [`STAGED`] bytes): metadata and short runs
    /// of records go out in few writes (a window of a read-out is written from where its
    /// records are, [`Self::write_provider_runs`]). [`Self::flush`] writes them.
    staged: Vec<u8>,
    /// The room the output lent last ([`Self::room`]: its address and length), until anything
    /// is written to the output ([`Self::out`]): only records collected in it are kept there.
    lent_room: Option<(usize, usize)>,
}

/// An archive dropped without [`Archive::flush`] (an error or a panic on the way out) still
/// writes what it had taken, the magic number included: the file holds every record taken.
impl<W: ArchiveOutput> Drop for Archive<W> {
    fn drop(&mut self) {
        // An archive that took nothing writes nothing (a recording that failed to start leaves
        // an output written in place, such as a pipe, untouched).
        if self.out.is_some() && !(self.magic_pending && self.staged.is_empty()) {
            let _ = self.flush();
        }
    }
}

/// Where an archive's bytes go: any `Write`, and an output that keeps its next bytes in memory
/// of its own before writing them (the recorder's `DirectOutput`) lends that memory
/// ([`Archive::room`]), so that a provider's records are copied into the output once, where
/// they are checked and kept, rather than through a copy of the drain's first.
pub trait ArchiveOutput: Write {
    /// `len` bytes of the output's memory right after the bytes it took, for the caller to
    /// fill; `None` when the output has none (or not that many at once). Asked again for as
    /// many bytes or fewer before [`Self::commit_room`], the same memory.
    fn room(&mut self, len: usize) -> io::Result<Option<&mut [u8]>> {
        let _ = len;
        Ok(None)
    }

    /// The first `len` bytes of the room lent last are the output's next bytes.
    fn commit_room(&mut self, len: usize) -> io::Result<()> {
        match len {
            0 => Ok(()),
            _ => Err(io::Error::other("this output lends no room")),
        }
    }
}

impl ArchiveOutput for Vec<u8> {}
impl ArchiveOutput for std::fs::File {}
impl ArchiveOutput for CutOnFailure {}
impl ArchiveOutput for Box<dyn Write + Send> {}

impl ArchiveOutput for Box<dyn ArchiveOutput + Send> {
    fn room(&mut self, len: usize) -> io::Result<Option<&mut [u8]>> {
        (**self).room(len)
    }

    fn commit_room(&mut self, len: usize) -> io::Result<()> {
        (**self).commit_room(len)
    }
}

/// An output that lends room as the recorder's does, for tests: what it took, and the room
/// it lends (filled with a pattern each time, so that bytes not written read as garbage).
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct LendingOutput {
    pub(crate) bytes: Vec<u8>,
    room: Vec<u8>,
    /// Rooms lent (asked again before a commit: the same one).
    pub(crate) lent: usize,
    /// A room is lent and not committed.
    open: bool,
}

#[cfg(test)]
impl Write for LendingOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.open = false;
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
impl ArchiveOutput for LendingOutput {
    fn room(&mut self, len: usize) -> io::Result<Option<&mut [u8]>> {
        if !(self.open && len <= self.room.len()) {
            self.lent += 1;
            self.open = true;
            self.room.clear();
            self.room.resize(len, 0xa5);
        }
        Ok(Some(&mut self.room[..len]))
    }

    fn commit_room(&mut self, len: usize) -> io::Result<()> {
        self.open = false;
        self.bytes.extend_from_slice(&self.room[..len]);
        Ok(())
    }
}

/// Move the ranges `kept` of `room` (ascending, disjoint, within it) together to its start, in
/// their order; their total length.
fn compact_room(room: &mut [u8], kept: &[Range<usize>]) -> io::Result<usize> {
    let (mut end, mut previous_end) = (0, 0);
    for range in kept {
        if range.start < previous_end || range.end > room.len() || range.start > range.end {
            return Err(io::Error::other(format!(
                "room range {range:?} out of order or outside {} bytes",
                room.len()
            )));
        }
        room.copy_within(range.clone(), end);
        end += range.len();
        previous_end = range.end;
    }
    Ok(end)
}

/// The records a drain checked in an output's room ([`Archive::room`]) and keeps there
/// ([`Archive::take_room`]): where they are in the room, and their counts.
#[derive(Debug)]
pub struct RoomRuns {
    /// The room's address and length (its records are found by address: this holds no borrow
    /// of it, so that the records lent from it can be passed in).
    start: usize,
    len: usize,
    kept: Vec<Range<usize>>,
    counts: ProviderRecords,
}

impl RoomRuns {
    fn new(room: &[u8]) -> Self {
        Self {
            start: room.as_ptr() as usize,
            len: room.len(),
            kept: Vec::new(),
            counts: ProviderRecords::default(),
        }
    }
}

/// Where a drain's scan puts the records it accepted from a provider's buffer: an archive
/// (written, or staged), or the room the archive's output lent ([`RoomRuns`]). What is left
/// out is the same for both ([`Archive::write_provider_records`]).
pub trait ProviderRuns<'a> {
    /// Take `runs`; what was kept and left out.
    fn take_runs(
        &mut self,
        runs: impl IntoIterator<Item = CheckedRecords<'a>>,
    ) -> Result<ProviderRecords, ArchiveError>;
}

impl<'a> ProviderRuns<'a> for RoomRuns {
    fn take_runs(
        &mut self,
        runs: impl IntoIterator<Item = CheckedRecords<'a>>,
    ) -> Result<ProviderRecords, ArchiveError> {
        let taken = keep_provider_runs(runs, |records| {
            let at = (records.bytes().as_ptr() as usize).wrapping_sub(self.start);
            if at > self.len || records.len() > self.len - at {
                return Err(io::Error::other(
                    "records outside the room they were read into",
                ));
            }
            self.kept.push(at..at + records.len());
            Ok(())
        })?;
        let counts = &mut self.counts;
        counts.written += taken.written;
        counts.bytes += taken.bytes;
        counts.forged += taken.forged;
        counts.oversized += taken.oversized;
        Ok(taken)
    }
}

impl<'a, W: ArchiveOutput> ProviderRuns<'a> for Archive<W> {
    fn take_runs(
        &mut self,
        runs: impl IntoIterator<Item = CheckedRecords<'a>>,
    ) -> Result<ProviderRecords, ArchiveError> {
        self.write_provider_runs(runs)
    }
}

/// Pass each run of `runs` to `keep`, leaving out what a provider must not write (see
/// [`Archive::write_provider_records`]); the counts.
fn keep_provider_runs<'a>(
    runs: impl IntoIterator<Item = CheckedRecords<'a>>,
    mut keep: impl FnMut(CheckedRecords<'a>) -> io::Result<()>,
) -> io::Result<ProviderRecords> {
    let mut out = ProviderRecords::default();
    let mut kept = |records: CheckedRecords<'a>, out: &mut ProviderRecords| {
        out.written += records.records() as u64;
        out.bytes += records.len() as u64;
        keep(records)
    };
    for records in runs {
        if !records.may_hold_metadata_or_large() {
            // Nothing to leave out (the scan saw no metadata or large record): whole.
            kept(records, &mut out)?;
            continue;
        }
        let mut oversized = 0u64;
        let mut parts = records.without(|header| {
            let large = fxtrace_format::record_type(header)
                == fxtrace_format::RecordType::LargeRecord as u8
                && fxtrace_format::record_words(header) > MAX_READABLE_LARGE_WORDS;
            oversized += u64::from(large);
            large || is_provider_metadata(header)
        });
        for part in parts.by_ref() {
            kept(part, &mut out)?;
        }
        let left_out = parts.left_out() as u64;
        out.oversized += oversized;
        out.forged += left_out - oversized;
    }
    Ok(out)
}

/// What [`Archive::write_provider_records`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderRecords {
    /// Records written.
    pub written: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Provider metadata records left out (only the manager writes those).
    pub forged: u64,
    /// Large records over [`MAX_READABLE_LARGE_WORDS`] words left out.
    pub oversized: u64,
}

/// The largest large record (type 15) a trace keeps, in words: Perfetto reads only bits 4..15
/// of a large record's header for its size.
pub const MAX_READABLE_LARGE_WORDS: usize = 4095;

/// Most bytes [`Archive`] keeps before writing them.
const STAGED: usize = 1 << 20;
/// Runs of provider records gathered for one `writev` ([`Archive::write_provider_runs`]).
const GATHERED: usize = 64;

/// Runs of records to write together: where they are, and how many bytes in all.
struct Gathered<'a> {
    slices: [io::IoSlice<'a>; GATHERED],
    count: usize,
    bytes: usize,
}

impl Default for Gathered<'_> {
    fn default() -> Self {
        Gathered {
            slices: [io::IoSlice::new(&[]); GATHERED],
            count: 0,
            bytes: 0,
        }
    }
}
/// Gathered runs of fewer bytes are staged (copied) instead: a write of a few records would
/// cost more than their copy.
const WRITTEN_THROUGH_MIN: usize = 16 << 10;

impl<W: ArchiveOutput> Archive<W> {
    /// A stream on `out` that starts with the magic number record. Nothing is written to `out`
    /// until the first record, flush or [`Self::into_inner`]: whoever creates the archive
    /// never blocks on `out` (the trace service creates sessions' archives on its event loop,
    /// and a controller's output may be slow).
    pub fn new(out: W) -> Result<Self, ArchiveError> {
        Ok(Self {
            out: Some(out),
            bytes: 8,
            records: 1,
            introduced: BTreeSet::new(),
            current: None,
            magic_pending: true,
            anchor: Vec::new(),
            marker_threads: BTreeSet::new(),
            staged: Vec::new(),
            lent_room: None,
        })
    }

    /// [`Self::new`] for a recording: the archive starts with a wall-clock anchor, when the
    /// trace was taken ([`crate::read::wall`]; the clocks are read now). Every session of
    /// the manager writes one.
    pub fn recording(out: W) -> Result<Self, ArchiveError> {
        let mut archive = Self::new(out)?;
        let anchor = WallClock::now()
            .record_words(u64::from(std::process::id()))
            .map_err(|source| ArchiveError::Encode {
                what: "wall-clock anchor",
                source,
            })?;
        archive.anchor = fxtrace_format::words_to_bytes(&anchor);
        archive.bytes += archive.anchor.len() as u64;
        archive.records += 1;
        Ok(archive)
    }

    /// Append `bytes` to the stream: staged, and written once [`STAGED`] bytes are (a room
    /// lent before is no longer the stream's next bytes).
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.lent_room = None;
        if self.staged.len() + bytes.len() > STAGED {
            self.write_staged()?;
        }
        if bytes.len() >= STAGED {
            self.out()?.write_all(bytes)
        } else {
            self.staged.extend_from_slice(bytes);
            Ok(())
        }
    }

    /// Write the staged bytes.
    fn write_staged(&mut self) -> io::Result<()> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let staged = std::mem::take(&mut self.staged);
        let written = self.out().and_then(|out| out.write_all(&staged));
        // The allocation is kept for the next records (at most STAGED bytes).
        self.staged = staged;
        self.staged.clear();
        written
    }

    /// The output, after the magic number record, to write (a room lent before is no longer
    /// the output's next bytes).
    fn out(&mut self) -> io::Result<&mut W> {
        self.lent_room = None;
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| io::Error::other("the archive's output was taken"))?;
        if self.magic_pending {
            out.write_all(&MAGIC_WORD.to_ne_bytes())?;
            out.write_all(&self.anchor)?;
            self.magic_pending = false;
        }
        Ok(out)
    }

    /// Enter provider `id`'s section: Provider Info (id, name) the first time, Provider Section
    /// afterwards. Names longer than the record allows (255 bytes) are cut at a character
    /// boundary.
    pub fn begin_provider(&mut self, id: u32, name: &str) -> Result<(), ArchiveError> {
        if self.introduced.contains(&id) {
            self.push("provider section", &ProviderSection { provider_id: id })?;
        } else {
            let name = truncate_str(name, fxtrace_format::MAX_PROVIDER_NAME_LEN);
            self.push(
                "provider info",
                &ProviderInfo {
                    provider_id: id,
                    name,
                },
            )?;
            self.introduced.insert(id);
        }
        self.current = Some(id);
        Ok(())
    }

    /// The provider whose section the stream is in.
    pub fn current_provider(&self) -> Option<u32> {
        self.current
    }

    /// Provider Event metadata for the current provider (event 0: buffer overflow).
    pub fn provider_event(&mut self, event: u8) -> Result<(), ArchiveError> {
        let provider_id = self.current.ok_or(ArchiveError::NoSection)?;
        self.push("provider event", &ProviderEvent { provider_id, event })
    }

    /// Append `records`. Returns the number of records.
    pub fn write_records(&mut self, records: CheckedRecords<'_>) -> Result<u64, ArchiveError> {
        if self.current.is_none() {
            return Err(ArchiveError::NoSection);
        }
        self.put(records.bytes())?;
        self.bytes += records.len() as u64;
        self.records += records.records() as u64;
        Ok(records.records() as u64)
    }

    /// [`Self::write_records`] for records taken from a provider's buffer, leaving out what a
    /// provider must not write: every provider metadata record (provider info, section or
    /// event: only the manager writes those; a provider that wrote one would rename a provider
    /// or add records to another's section), and every large record over
    /// [`MAX_READABLE_LARGE_WORDS`] words (the engine never writes one; Perfetto reads only
    /// 12 bits of a large record's size and would misread every record after it).
    pub fn write_provider_records(
        &mut self,
        records: CheckedRecords<'_>,
    ) -> Result<ProviderRecords, ArchiveError> {
        self.write_provider_runs(std::iter::once(records))
    }

    /// [`Self::write_provider_records`] for the runs of records a scan of one window of a
    /// provider's buffer found: gathered and written with one `writev` from where they are
    /// (no copy into the staged bytes), unless they are few bytes (then staged).
    pub fn write_provider_runs<'a>(
        &mut self,
        runs: impl IntoIterator<Item = CheckedRecords<'a>>,
    ) -> Result<ProviderRecords, ArchiveError> {
        if self.current.is_none() {
            return Err(ArchiveError::NoSection);
        }
        let mut gathered = Gathered::default();
        let out = keep_provider_runs(runs, |records| self.gather(&mut gathered, records))?;
        self.put_gathered(&mut gathered)?;
        self.bytes += out.bytes;
        self.records += out.written;
        Ok(out)
    }

    /// `len` bytes of the output's own memory, right after what the archive wrote, for a
    /// provider's records to be read into, checked in place and kept with
    /// [`Self::take_room`] (the [`RoomRuns`] collects them): no copy into the output after
    /// the copy out of the buffer. `None` when the output lends none ([`ArchiveOutput`]).
    pub fn room(&mut self, len: usize) -> Result<Option<(&mut [u8], RoomRuns)>, ArchiveError> {
        if self.current.is_none() {
            return Err(ArchiveError::NoSection);
        }
        self.write_staged()?;
        // The magic number first, then the room, borrowed from the output field alone.
        self.out()?;
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| io::Error::other("no output"))?;
        let room = out.room(len)?;
        self.lent_room = room
            .as_ref()
            .map(|room| (room.as_ptr() as usize, room.len()));
        Ok(room.map(|room| {
            let runs = RoomRuns::new(room);
            (room, runs)
        }))
    }

    /// Keep the records `runs` collected in the room [`Self::room`] lent last: moved together
    /// to its start, and committed.
    pub fn take_room(&mut self, runs: RoomRuns) -> Result<(), ArchiveError> {
        let moved = || ArchiveError::Io(io::Error::other("the output's room is no longer lent"));
        if self.lent_room.take() != Some((runs.start, runs.len)) {
            return Err(moved());
        }
        let out = self.out.as_mut().ok_or_else(moved)?;
        let room = out.room(runs.len)?;
        let Some(room) = room.filter(|room| room.as_ptr() as usize == runs.start) else {
            return Err(moved());
        };
        let len = compact_room(room, &runs.kept)?;
        out.commit_room(len)?;
        self.bytes += runs.counts.bytes;
        self.records += runs.counts.written;
        Ok(())
    }

    /// Add `records` to `gathered`, putting the gathered ones into the stream first when
    /// there is no room.
    fn gather<'a>(
        &mut self,
        gathered: &mut Gathered<'a>,
        records: CheckedRecords<'a>,
    ) -> io::Result<()> {
        if gathered.count == GATHERED {
            self.put_gathered(gathered)?;
        }
        gathered.slices[gathered.count] = io::IoSlice::new(records.bytes());
        gathered.count += 1;
        gathered.bytes += records.len();
        Ok(())
    }

    /// Append what is `gathered` to the stream, and empty it: staged when few bytes, else
    /// written after what is staged, with `writev`.
    fn put_gathered(&mut self, gathered: &mut Gathered<'_>) -> io::Result<()> {
        let count = std::mem::take(&mut gathered.count);
        let bytes = std::mem::take(&mut gathered.bytes);
        let mut rest = &mut gathered.slices[..count];
        if bytes < WRITTEN_THROUGH_MIN {
            return rest.iter().try_for_each(|s| self.put(s));
        }
        self.write_staged()?;
        let out = self.out()?;
        while !rest.is_empty() {
            match out.write_vectored(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => io::IoSlice::advance_slices(&mut rest, written),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A visible marker of the manager about provider `provider` of process `pid`, in the
    /// manager's own section ([`fxtrace_format::MANAGER_PROVIDER_ID`], where no provider can
    /// write: readers count only the markers found there): an instant event in category
    /// `fxtrace` named `name`, at `ticks`, with the arguments `provider` and `arg_name`, on
    /// the process's thread named "fxtrace" ([`marker_tid`]; its kernel object record is
    /// written the first time). Viewers that ignore provider metadata (Perfetto) still show
    /// it, on a track of the provider's process.
    pub fn marker(
        &mut self,
        ticks: u64,
        (provider, pid): (u32, u64),
        name: &str,
        (arg_name, arg_value): (&str, u64),
    ) -> Result<(), ArchiveError> {
        use fxtrace_format::{KernelObject, ObjectType, MANAGER_PROVIDER_ID, MARKER_PROVIDER_ARG};
        if self.current != Some(MANAGER_PROVIDER_ID) {
            let first = !self.introduced.contains(&MANAGER_PROVIDER_ID);
            self.begin_provider(MANAGER_PROVIDER_ID, fxtrace_format::MANAGER_PROVIDER_NAME)?;
            if first {
                // The section's tick rate: the manager's clock (the one it gave providers).
                let ticks_per_second = fxtrace::clock::info().ticks_per_second;
                self.push("initialization", &Initialization { ticks_per_second })?;
            }
        }
        let tid = marker_tid(pid);
        if self.marker_threads.insert(pid) {
            let process = [Arg::new("process", ArgValue::Koid(pid))];
            let thread = KernelObject {
                koid: tid,
                object_type: ObjectType::THREAD,
                name: StringRef::Inline(MARKER_THREAD_NAME),
                args: &process,
            };
            self.push("marker thread", &thread)?;
        }
        let name = truncate_str(name, MARKER_NAME_MAX);
        let args = [
            Arg::new(MARKER_PROVIDER_ARG, ArgValue::U64(u64::from(provider))),
            Arg::new(arg_name, ArgValue::U64(arg_value)),
        ];
        let event = Event {
            ticks,
            thread: ThreadRef::Inline { pid, tid },
            category: StringRef::Inline(MARKER_CATEGORY),
            name: StringRef::Inline(name),
            args: &args,
            kind: EventKind::Instant,
        };
        self.push("marker event", &event)
    }

    /// Bytes written so far (magic included).
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Records written so far (magic and metadata included).
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Write what is staged and flush the output.
    pub fn flush(&mut self) -> Result<(), ArchiveError> {
        self.write_staged()?;
        self.out()?.flush()?;
        Ok(())
    }

    /// Flush and return the output.
    pub fn into_inner(mut self) -> Result<W, ArchiveError> {
        self.flush()?;
        self.out
            .take()
            .ok_or_else(|| ArchiveError::Io(io::Error::other("the archive's output was taken")))
    }

    fn push<R: Encode>(&mut self, what: &'static str, record: &R) -> Result<(), ArchiveError> {
        let words = fxtrace_format::encode_to_vec(record)
            .map_err(|source| ArchiveError::Encode { what, source })?;
        let bytes = fxtrace_format::words_to_bytes(&words);
        self.put(&bytes)?;
        self.bytes += bytes.len() as u64;
        self.records += 1;
        Ok(())
    }
}

/// The part of an archive file made of complete records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletePrefix {
    /// Its length in bytes (the file's length after [`truncate_to_complete_records`]).
    pub bytes: u64,
    /// Its records (the magic number record included).
    pub records: u64,
}

/// An archive's output file that, once a write to it has failed (a full disk), is cut after
/// its last complete record when it is dropped ([`truncate_to_complete_records`]): the file
/// stays a valid trace of what was written whole.
#[derive(Debug)]
pub struct CutOnFailure {
    file: std::fs::File,
    /// The file's length when it was handed over: the archive starts there (what was in the
    /// file before is never cut).
    start: u64,
    failed: bool,
}

impl CutOnFailure {
    /// Write archives to `file`, from where its writes go now: its end when it is open for
    /// appending, else its offset (what comes before is never cut).
    pub fn new(file: std::fs::File) -> Self {
        use std::io::Seek;
        let start = if opened_for_appending(&file) {
            file.metadata().map_or(0, |m| m.len())
        } else {
            (&file).stream_position().unwrap_or(0)
        };
        Self {
            file,
            start,
            failed: false,
        }
    }

    fn note(&mut self, result: &io::Result<impl Sized>) {
        // An interrupted write is tried again by `write_all`: not a failure.
        self.failed |= result
            .as_ref()
            .is_err_and(|e| e.kind() != io::ErrorKind::Interrupted);
    }
}

impl Write for CutOnFailure {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.file.write(buf);
        self.note(&written);
        written
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let written = self.file.write_vectored(bufs);
        self.note(&written);
        written
    }

    fn flush(&mut self) -> io::Result<()> {
        let flushed = self.file.flush();
        self.note(&flushed);
        flushed
    }
}

impl Drop for CutOnFailure {
    fn drop(&mut self) {
        if self.failed {
            let _ = truncate_to_complete_records_from(&self.file, self.start);
        }
    }
}

/// Whether `file`'s description was opened for appending (`O_APPEND`: every write goes to the
/// end, whatever its offset).
pub(crate) fn opened_for_appending(file: &std::fs::File) -> bool {
    nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_GETFL)
        .is_ok_and(|flags| flags & libc::O_APPEND != 0)
}

/// Cuts `file` after its last complete record and returns what it holds: after a failed write
/// (`ENOSPC`) the file may end inside a record; cut there, it is a valid trace up to the last
/// record that was written whole. Reads only record headers.
pub fn truncate_to_complete_records(file: &std::fs::File) -> io::Result<CompletePrefix> {
    truncate_to_complete_records_from(file, 0)
}

/// [`truncate_to_complete_records`] for records that start at byte `start` of `file` (what
/// comes before is kept as it is, and counted in neither figure but the length).
fn truncate_to_complete_records_from(
    file: &std::fs::File,
    start: u64,
) -> io::Result<CompletePrefix> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    // A descriptor open for writing only (a controller's output) is read through a second
    // opening of the same file.
    let reopened;
    let reader = match file.read_at(&mut [0u8; 0], 0) {
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
            reopened = std::fs::File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
            &reopened
        }
        _ => file,
    };
    let walk = fxtrace_format::walk_records(len, start, |offset, block| {
        reader.read_exact_at(block, offset)
    })?;
    if walk.end < len {
        file.set_len(walk.end)?;
    }
    Ok(CompletePrefix {
        bytes: walk.end,
        records: walk.records,
    })
}

/// A provider info, provider section or provider event metadata record header.
fn is_provider_metadata(header: u64) -> bool {
    use fxtrace_format::fields::MetadataRecord;
    use fxtrace_format::MetadataType;
    fxtrace_format::record_type(header) == fxtrace_format::RecordType::Metadata as u8
        && [
            MetadataType::ProviderInfo,
            MetadataType::ProviderSection,
            MetadataType::ProviderEvent,
        ]
        .iter()
        .any(|&t| MetadataRecord::METADATA_TYPE.get(header) == t as u64)
}

/// Category of the manager's marker events.
pub const MARKER_CATEGORY: &str = fxtrace_format::MARKER_CATEGORY;
/// Longest marker name written (longer ones are cut).
const MARKER_NAME_MAX: usize = 200;
/// Name of the thread the manager's markers about a process are on.
pub const MARKER_THREAD_NAME: &str = "fxtrace";

/// The thread of process `pid` the manager's markers about it are on: one no real thread can
/// be (Linux thread ids are below 2^22), in 32 bits (Perfetto keeps 32 of a thread id's bits),
/// one per process (a thread koid names one thread of one process).
pub const fn marker_tid(pid: u64) -> u64 {
    0x8000_0000 | (pid & 0x7fff_ffff)
}

pub(crate) use fxtrace_format::truncate_str;

#[cfg(test)]
mod tests {
    use super::*;
    use fxtrace_format::{DecodedRecord, Decoder, PROVIDER_EVENT_BUFFER_OVERFLOW};

    #[test]
    fn provider_metadata_from_a_provider_is_left_out_and_counted() {
        let init = [0x21u64, 1_000_000_000];
        let mut words = init.to_vec();
        words.extend(fxtrace_format::encode_to_vec(&ProviderSection { provider_id: 9 }).unwrap());
        words.extend(init);
        let bytes = fxtrace_format::words_to_bytes(&words);
        let mut a = Archive::new(Vec::new()).unwrap();
        a.begin_provider(1, "p").unwrap();
        let checked = CheckedRecords::check(&bytes).unwrap();
        assert_eq!(
            a.write_provider_records(checked).unwrap(),
            ProviderRecords {
                written: 2,
                bytes: 32,
                forged: 1,
                oversized: 0
            }
        );
        // A large record the engine never writes (over 4095 words) is left out too; one of
        // 4095 words is kept.
        let large = |words: u64| {
            let mut record = vec![0u64; words as usize];
            record[0] = 15 | (words << 4);
            record
        };
        let mut words = large(4096);
        words.extend(init);
        words.extend(large(4095));
        let bytes = fxtrace_format::words_to_bytes(&words);
        let checked = CheckedRecords::check(&bytes).unwrap();
        assert_eq!(
            a.write_provider_records(checked).unwrap(),
            ProviderRecords {
                written: 2,
                bytes: 16 + 4095 * 8,
                forged: 0,
                oversized: 1
            }
        );
        let out = a.into_inner().unwrap();
        let ids: Vec<_> = Decoder::new(&out).map(|d| d.unwrap().provider).collect();
        // magic, info(1), init, init, init, large: nothing claims provider 9.
        assert_eq!(ids.len(), 6);
        assert!(ids.iter().all(|id| *id != Some(9)), "{ids:?}");
        // Badly framed input never becomes records the archive takes, forged records or not.
        assert!(CheckedRecords::check(&bytes[..bytes.len() - 8]).is_err());
    }

    #[test]
    fn a_file_whose_write_failed_is_cut_after_its_last_whole_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.fxt");
        let file = std::fs::File::create(&path).unwrap();
        let mut a = Archive::new(CutOnFailure::new(file)).unwrap();
        a.begin_provider(1, "p").unwrap();
        let mut out = a.into_inner().unwrap();
        // Half of a two-word record, as a full disk leaves it.
        out.write_all(&0x24u64.to_ne_bytes()).unwrap();
        let whole = std::fs::metadata(&path).unwrap().len() - 8;
        out.failed = true;
        drop(out);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        // Nothing is cut when every write succeeded.
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let mut out = CutOnFailure::new(file);
        out.write_all(&0x24u64.to_ne_bytes()).unwrap();
        drop(out);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole + 8);
        // What a file held before the archive was appended to it is never cut.
        let before = b"not a trace, 24 bytes...";
        std::fs::write(&path, before).unwrap();
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let mut a = Archive::new(CutOnFailure::new(file)).unwrap();
        a.begin_provider(1, "p").unwrap();
        let mut out = a.into_inner().unwrap();
        let archive = std::fs::metadata(&path).unwrap().len();
        out.write_all(&0x24u64.to_ne_bytes()).unwrap();
        out.failed = true;
        drop(out);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), archive);
        assert!(std::fs::read(&path).unwrap().starts_with(before));
    }

    #[test]
    fn an_archive_dropped_writes_what_it_took_and_nothing_if_it_took_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.fxt");
        drop(Archive::new(std::fs::File::create(&path).unwrap()).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        let mut a = Archive::new(std::fs::File::create(&path).unwrap()).unwrap();
        a.begin_provider(1, "p").unwrap();
        // Dropped without a flush (an error path): the magic number and the record.
        drop(a);
        let bytes = std::fs::read(&path).unwrap();
        let ids: Vec<_> = Decoder::new(&bytes).map(|d| d.unwrap().provider).collect();
        assert_eq!(ids.len(), 2);
    }

    fn records(bytes: &[u8]) -> Vec<(Option<u32>, String)> {
        Decoder::new(bytes)
            .map(|d| {
                let d = d.expect("decodes");
                let what = match &d.record {
                    DecodedRecord::ProviderInfo { provider_id, name } => {
                        format!("info {provider_id} {name}")
                    }
                    DecodedRecord::ProviderSection { provider_id } => {
                        format!("section {provider_id}")
                    }
                    DecodedRecord::ProviderEvent { event, .. } => format!("event {event}"),
                    DecodedRecord::Event(e) => format!("{}:{}", e.category, e.name),
                    other => other.kind_name().to_string(),
                };
                (d.provider, what)
            })
            .collect()
    }

    #[test]
    fn magic_first_then_info_once_then_sections() {
        let mut a = Archive::new(Vec::new()).unwrap();
        a.begin_provider(1, "one").unwrap();
        a.provider_event(PROVIDER_EVENT_BUFFER_OVERFLOW).unwrap();
        a.begin_provider(2, "two").unwrap();
        a.begin_provider(1, "one").unwrap();
        a.marker(
            5,
            (1, 42),
            "fxtrace: 3 records dropped",
            ("records_dropped", 3),
        )
        .unwrap();
        a.marker(6, (1, 42), "fxtrace: provider lost", ("pid", 42))
            .unwrap();
        a.begin_provider(2, "two").unwrap();
        a.marker(
            7,
            (2, 43),
            "fxtrace: 1 records dropped",
            ("records_dropped", 1),
        )
        .unwrap();
        let bytes = a.into_inner().unwrap();
        assert_eq!(&bytes[..8], &MAGIC_WORD.to_ne_bytes());
        let got = records(&bytes);
        let want: Vec<(Option<u32>, String)> = vec![
            (None, "magic".into()),
            (Some(1), "info 1 one".into()),
            (Some(1), "event 0".into()),
            (Some(2), "info 2 two".into()),
            (Some(1), "section 1".into()),
            // The markers are in the manager's section, on each process's named thread.
            (Some(0), "info 0 fxtrace".into()),
            (Some(0), "initialization".into()),
            (Some(0), "kernel_object".into()),
            (Some(0), "fxtrace:fxtrace: 3 records dropped".into()),
            (Some(0), "fxtrace:fxtrace: provider lost".into()),
            (Some(2), "section 2".into()),
            (Some(0), "section 0".into()),
            (Some(0), "kernel_object".into()),
            (Some(0), "fxtrace:fxtrace: 1 records dropped".into()),
        ];
        assert_eq!(got, want);
        let threads: Vec<_> = Decoder::new(&bytes)
            .filter_map(|d| match d.unwrap().record {
                DecodedRecord::KernelObject {
                    koid, name, args, ..
                } => Some((koid, name.to_string(), args[0].value.clone())),
                DecodedRecord::Event(e) => Some((
                    e.thread.tid,
                    e.args[0].name.to_string(),
                    e.args[0].value.clone(),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(threads[0].0, 0x8000_0000 | 42);
        assert_eq!(threads[0].1, "fxtrace");
        assert!(matches!(
            threads[0].2,
            fxtrace_format::DecodedValue::Koid(42)
        ));
        assert_eq!(threads[1].0, 0x8000_0000 | 42, "on the named thread");
        assert_eq!(threads[1].1, "provider");
        assert!(matches!(threads[1].2, fxtrace_format::DecodedValue::U64(1)));
    }

    #[test]
    fn write_records_needs_a_section_and_checked_records() {
        let mut a = Archive::new(Vec::new()).unwrap();
        let one = 0x11u64.to_ne_bytes();
        assert!(matches!(
            a.write_records(CheckedRecords::check(&one).unwrap()),
            Err(ArchiveError::NoSection)
        ));
        a.begin_provider(7, "p").unwrap();
        // A 2-word record followed by a record claiming 3 words with only 1 left; a zero
        // word; trailing bytes: none of them are records.
        let bad: Vec<u8> = [0x24u64, 1, 0x34]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        assert!(CheckedRecords::check(&bad).is_err());
        let zero: Vec<u8> = [0x14u64, 0].iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert!(CheckedRecords::check(&zero).is_err());
        assert!(CheckedRecords::check(&[1, 2, 3]).is_err());
        let before = a.bytes_written();
        let good: Vec<u8> = [0x24u64, 1, 0x14]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        assert_eq!(
            a.write_records(CheckedRecords::check(&good).unwrap())
                .unwrap(),
            2
        );
        assert_eq!(a.bytes_written(), before + 24);
    }

    #[test]
    fn room_ranges_move_together_in_order_and_bad_ones_are_refused() {
        let mut room: Vec<u8> = (0..32).collect();
        assert_eq!(compact_room(&mut room, &[2..4, 4..6, 10..13]).unwrap(), 7);
        assert_eq!(&room[..7], &[2, 3, 4, 5, 10, 11, 12]);
        // Out of order, overlapping, past the room, reversed.
        let reversed = Range { start: 5, end: 3 };
        for bad in [
            [4..6, 2..4],
            [0..8, 6..10],
            [0..2, 30..40],
            [0..2, reversed],
        ] {
            assert!(compact_room(&mut room, &bad).is_err(), "{bad:?}");
        }
        // Records kept in a room the output no longer lends (it moved) are refused.
        let mut a = Archive::new(LendingOutput::default()).unwrap();
        a.begin_provider(1, "p").unwrap();
        let (room, mut runs) = a.room(16).unwrap().expect("a room");
        room.copy_from_slice(&fxtrace_format::words_to_bytes(&[0x24 | (1 << 16), 1]));
        let checked = CheckedRecords::check(room).unwrap();
        assert_eq!(runs.take_runs([checked]).unwrap().written, 1);
        runs.start += 8;
        assert!(a.take_room(runs).is_err());
        // Or when the archive wrote to the output in between (the same memory lent again).
        let (room, mut runs) = a.room(16).unwrap().expect("a room");
        room.copy_from_slice(&fxtrace_format::words_to_bytes(&[0x24 | (1 << 16), 1]));
        let checked = CheckedRecords::check(room).unwrap();
        runs.take_runs([checked]).unwrap();
        a.provider_event(0).unwrap();
        assert!(a.take_room(runs).is_err());
    }

    #[test]
    fn long_names_are_cut_at_a_char_boundary() {
        let name = "é".repeat(200); // 400 bytes
        let mut a = Archive::new(Vec::new()).unwrap();
        a.begin_provider(1, &name).unwrap();
        let bytes = a.into_inner().unwrap();
        let got = records(&bytes);
        assert_eq!(got[1].1, format!("info 1 {}", "é".repeat(127)));
        assert_eq!(truncate_str("abc", 2), "ab");
        assert_eq!(truncate_str("aé", 2), "a");
    }
}

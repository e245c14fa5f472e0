//! Importing a log without holding its events: [`import`].
//!
//! [`super::read_log`] then [`super::write_fxt`] hold every event of the log at once (an FDR
//! function record of 8 bytes becomes a 56-byte event: about eight times the log). [`import`]
//! reads the log twice instead, and writes the same FXT byte for byte:
//!
//! 1. a first pass keeps no event: it finds the threads (in order of first appearance), the
//!    function ids, and, for an FDR log, where each buffer lies, its thread and wall time;
//! 2. the second decodes each thread's events again and converts them as they come: an FDR
//!    log buffer by buffer, in each thread's wall-time order; a basic-mode log run by run
//!    (the first pass notes where each thread's runs of records lie: its threads' records
//!    are interleaved a buffer at a time). However many threads the log has, each record is
//!    decoded a bounded number of times (twice, unless threads interleave record by record:
//!    `RUN_GAP`).
//!
//! What stays in memory grows with the threads, the FDR buffers (48 bytes each), a basic
//! log's runs (16 bytes each; XRay writes a thread's buffer of 1024 records whole), the
//! distinct function ids and a thread's open frames, not with the events. The log itself is
//! the caller's `&[u8]` (the command maps the file), of which `release` is told every
//! [`RELEASE_EVERY`] bytes read, so that pages already read need not stay resident.

use std::collections::HashSet;
use std::io::Write;
use std::ops::Range;

use super::basic;
use super::error::XrayError;
use super::event::{CpuTracker, FunctionId, ReadStats, WallTimeAnchor, XrayEvent};
use super::fdr::{self, BlockInfo, BlockSink};
use super::header::{FileHeader, LogType};
use super::to_fxt::{Import, ImportError, ImportOptions, ImportStats, ThreadConverter};
use crate::read::Mapping;

/// How many bytes of the log are read between two calls of `release`.
pub const RELEASE_EVERY: usize = 16 << 20;

/// The largest gap of other threads' records a basic-mode thread's run takes in (its records
/// then decoded again and passed over): each record is decoded by at most 9 threads' runs,
/// and records of a few threads interleaved one by one make a run per thread, not per record.
const RUN_GAP: usize = 8 * basic::RECORD_SIZE;

/// What [`import`] did.
#[derive(Debug)]
pub struct Imported {
    /// The conversion's counts.
    pub stats: ImportStats,
    /// Events decoded (CPU migrations included), all written.
    pub events: u64,
    /// Where decoding stopped before the end of the log, and why: everything before it was
    /// written.
    pub error: Option<XrayError>,
}

/// Converts the XRay log `data` (whose file header is `header`) into an FXT trace on `out`,
/// as [`super::read_log`] and [`super::write_fxt`] do, without holding its events (see the
/// module docs). `release` is called every [`RELEASE_EVERY`] bytes of the log read.
pub fn import<W: Write>(
    data: &[u8],
    header: &FileHeader,
    options: &ImportOptions<'_>,
    out: W,
    release: &mut dyn FnMut(),
) -> Result<Imported, ImportError> {
    let mut pacer = Pacer { read: 0, release };
    match header.log_type {
        LogType::Fdr => import_fdr(data, header, options, out, &mut pacer),
        LogType::Basic => import_basic(data, header, options, out, &mut pacer),
    }
}

/// Calls `release` every [`RELEASE_EVERY`] bytes read.
struct Pacer<'r> {
    read: usize,
    release: &'r mut dyn FnMut(),
}

impl Pacer<'_> {
    fn read(&mut self, bytes: usize) {
        self.read += bytes;
        if self.read >= RELEASE_EVERY {
            self.read = 0;
            (self.release)();
        }
    }
}

/// The first pass over an FDR log: its buffers and function ids, no event.
struct Index<'p, 'r> {
    blocks: Vec<BlockInfo>,
    ids: HashSet<FunctionId>,
    pacer: &'p mut Pacer<'r>,
}

impl BlockSink for Index<'_, '_> {
    fn event(&mut self, event: XrayEvent) {
        self.ids.extend(event.kind.func_id());
    }

    fn block(&mut self, info: BlockInfo) {
        self.pacer.read(info.end - info.start);
        self.blocks.push(info);
    }
}

/// Hands a thread's events, CPU migrations inserted, to its converter; keeps the first
/// error of the conversion (the events after it are not converted).
struct Feed<'t, 'c, W: Write> {
    thread: &'t mut ThreadConverter<'c, W>,
    cpu: CpuTracker,
    events: u64,
    error: Option<ImportError>,
}

impl<W: Write> Feed<'_, '_, W> {
    fn feed(&mut self, event: &XrayEvent) {
        if self.error.is_some() {
            return;
        }
        let migration = self.cpu.migration_before(event);
        for e in migration.iter().chain(std::iter::once(event)) {
            self.events += 1;
            if let Err(e) = self.thread.feed(e) {
                self.error = Some(e);
                return;
            }
        }
    }
}

impl<W: Write> BlockSink for Feed<'_, '_, W> {
    fn event(&mut self, event: XrayEvent) {
        self.feed(&event);
    }

    fn block(&mut self, _: BlockInfo) {}
}

fn import_fdr<W: Write>(
    data: &[u8],
    header: &FileHeader,
    options: &ImportOptions<'_>,
    out: W,
    pacer: &mut Pacer<'_>,
) -> Result<Imported, ImportError> {
    let mut stats = ReadStats::default();
    let mut index = Index {
        blocks: Vec::new(),
        ids: HashSet::new(),
        pacer,
    };
    let error = fdr::read_into(data, header, &mut index, &mut stats).err();
    let Index {
        blocks, ids, pacer, ..
    } = index;
    let threads = super::per_thread(blocks, |b| b);
    let keys: Vec<(Option<u32>, u32)> = threads.iter().map(|(key, _)| *key).collect();
    let import = Import::begin(header, &stats, options, ids, &keys, out)?;
    let walls = |i: usize| threads[i].1.iter().filter_map(|b| b.wall).collect();
    convert_each(import, keys.len(), walls, error, |i, feed| {
        let mut again = None;
        for block in &threads[i].1 {
            // The same bytes decode the same way: an error here would be a bug, and is
            // reported as the log's if the first pass found none.
            let read =
                fdr::read_block(data, header.version, block, feed, &mut ReadStats::default());
            again = again.or(read.err());
            pacer.read(block.end - block.start);
        }
        again
    })
}

fn import_basic<W: Write>(
    data: &[u8],
    header: &FileHeader,
    options: &ImportOptions<'_>,
    out: W,
    pacer: &mut Pacer<'_>,
) -> Result<Imported, ImportError> {
    let mut stats = ReadStats::default();
    let mut threads = Vec::new();
    let mut ids = HashSet::new();
    // Each thread's runs of records, in order: XRay writes a thread's buffer whole. A run
    // takes in a gap of up to RUN_GAP bytes of other threads' records.
    let mut runs: Vec<Vec<Range<usize>>> = Vec::new();
    let error = basic::read_into(
        data,
        header,
        &mut stats,
        &mut threads,
        &mut |t, event, span| {
            ids.extend(event.kind.func_id());
            pacer.read(span.len());
            if runs.len() <= t {
                runs.resize_with(t + 1, Vec::new);
            }
            match runs[t].last_mut() {
                Some(run) if span.start - run.end <= RUN_GAP => run.end = span.end,
                _ => runs[t].push(span),
            }
        },
    );
    let import = Import::begin(header, &stats, options, ids, &threads, out)?;
    convert_each(
        import,
        threads.len(),
        |_| Vec::new(),
        error,
        |i, feed| {
            // The first pass read these records without an error: they decode the same.
            for run in runs.get(i).into_iter().flatten() {
                basic::read_span(data, header, run.clone(), &mut |t, event, span| {
                    if t == 0 {
                        feed.feed(&event);
                    }
                    pacer.read(span.len());
                });
            }
            None
        },
    )
}

/// Converts threads `0..threads` of `import` in turn: `read(i, feed)` hands thread `i`'s
/// events to `feed` (its FDR buffers' wall-clock anchors are `walls(i)`), and returns an
/// error it met, kept if the first pass's `error` is `None`.
fn convert_each<W: Write>(
    mut import: Import<W>,
    threads: usize,
    walls: impl Fn(usize) -> Vec<WallTimeAnchor>,
    mut error: Option<XrayError>,
    mut read: impl FnMut(usize, &mut Feed<'_, '_, W>) -> Option<XrayError>,
) -> Result<Imported, ImportError> {
    let mut events = 0;
    for i in 0..threads {
        let mut thread = import.thread(i, &walls(i));
        let mut feed = Feed {
            thread: &mut thread,
            cpu: CpuTracker::default(),
            events: 0,
            error: None,
        };
        let again = read(i, &mut feed);
        error = error.or(again);
        events += feed.events;
        if let Some(e) = feed.error {
            return Err(e);
        }
        thread.finish()?;
    }
    Ok(Imported {
        stats: import.finish()?,
        events,
        error,
    })
}

/// A log's bytes, mapped read-only ([`crate::read::Mapping`], the readers' mapping): a
/// regular file as it is, anything else (a FIFO, a device) first copied into an unlinked
/// temporary file, so that [`import`] can read it twice. [`MappedLog::release`] drops the
/// pages read from this process's memory (they stay in the page cache, and are read again if
/// needed): it is what [`import`]'s `release` should do. A regular file truncated by another
/// process while it is mapped ends the reading process with `SIGBUS`, as any reader of a
/// mapped file.
#[derive(Debug)]
pub struct MappedLog {
    /// `None` for an empty file (nothing mapped).
    map: Option<Mapping>,
}

impl MappedLog {
    /// Maps `file`, of which `head` (its first bytes) was read already; a file that is not a
    /// regular one is copied from where its reading stopped, after `head`.
    pub fn new(mut file: std::fs::File, head: &[u8]) -> std::io::Result<MappedLog> {
        if !file.metadata()?.is_file() {
            let mut spool = spool_file()?;
            spool.write_all(head)?;
            std::io::copy(&mut file, &mut spool)?;
            file = spool;
        }
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        let map = match len {
            0 => None,
            len => Some(Mapping::new(&file, len)?),
        };
        Ok(MappedLog { map })
    }

    /// The log's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_ref().map_or(&[], Mapping::bytes)
    }

    /// Drops the pages read so far from this process's memory.
    pub fn release(&self) {
        if let Some(map) = &self.map {
            map.release_before(map.bytes().len());
        }
    }
}

/// An unlinked temporary file, readable and writable by this process only.
fn spool_file() -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(std::env::temp_dir())
}

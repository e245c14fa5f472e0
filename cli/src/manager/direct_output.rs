//! The archive's output file, written in large blocks with direct I/O (`O_DIRECT`) by a writer
//! thread: a streaming session's records reach the disk without the page cache's per-page work
//! (most of a buffered `write`'s CPU: a folio per page, the file system's per-block accounting,
//! the copy), and the event loop never waits for the device.
//!
//! Bytes are copied into a page-aligned block of [`BLOCK`] bytes. A full block is handed to
//! the writer thread, which writes its whole pages with direct I/O (through the page cache
//! while the disk is behind, within a budget), and the part of a page that may end it through
//! the file's own (buffered) description; that partial page starts the next block, whose
//! writer completes it through the page cache too: no page is written both ways (a direct
//! write over a page the page cache holds first waits for that page's writeback). At the end of
//! each turn ([`Write::flush`]) the block is handed over when it holds at least [`DIRECT_MIN`]
//! bytes not yet in the file; fewer are written through at once while the writer is idle (a
//! small direct write costs more than a buffered one), as the archive wrote every turn before,
//! and handed over while it writes. So each turn's bytes are in the file, or in the writer's
//! queue, when the turn ends, but when every block is in the writer's hands: then a turn's few
//! bytes wait in the block for a later turn rather than the event loop for the disk. A
//! recorder killed by `SIGKILL` loses at most the queue ([`MAX_BLOCKS`] − 1 blocks) and those.
//!
//! Where direct I/O is not possible the output is written through: a file that is not regular,
//! open for appending, or whose archive does not start at a page boundary; no `/proc` to open
//! a second, direct description with (the given one is left as it is: its owner may share
//! it); or a file system that refuses `O_DIRECT` (the writer then writes that block and every
//! later one buffered).
//!
//! Errors are kept: after the first failed write the writer writes nothing more (the file has
//! no hole), and every later call returns that error; how the writer ended is read from
//! [`DirectOutcome`] once the output is dropped (its drop waits for the writer).

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::archive::ArchiveOutput;

/// Alignment of a direct write's memory, file offset and length: a page (every common block
/// device's logical block size divides it).
pub const DIRECT_ALIGN: usize = 4096;
/// Bytes of a block, the largest direct write (direct writes of 1 MiB cost the test machine
/// 0.065 ms of CPU per MiB, of 4 MiB 0.04, buffered ones 0.17 or more; 2 MiB
/// blocks, twice as many, drop less in a burst than 4 MiB ones:
/// `docs/benchmarks/manager-and-service.md`).
pub const BLOCK: usize = 2 << 20;
/// Fewest bytes a turn's end hands over for a direct write; fewer are written through.
pub const DIRECT_MIN: usize = 512 << 10;
/// Bytes at most that the writer sends through the page cache while the disk is behind,
/// until it has caught up (the writer thread's loop, `write_blocks`).
pub const BEHIND_THROUGH: usize = 256 << 20;
/// Blocks waiting behind the one the writer takes from which the disk is behind: one is not
/// (a save larger than a block hands two over at once).
const BEHIND_QUEUED: usize = 2;
/// Bytes of a huge page (x86-64's PMD pages) that a block other than the first is aligned to.
const HUGE_PAGE: usize = 2 << 20;
/// Blocks at most (16 MiB): one being filled, the others queued or being written. When the
/// writer has them all, handing one more over waits for one (the saves then go at the disk's
/// speed, and providers drop, counted, what they cannot buffer).
pub const MAX_BLOCKS: usize = 8;

/// What the writer thread did: read it once the [`DirectOutput`] is dropped.
#[derive(Debug, Clone, Default)]
pub struct DirectOutcome(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    /// A write failed (the error is in `figures`).
    failed: AtomicBool,
    figures: Mutex<Figures>,
}

#[derive(Debug, Default)]
struct Figures {
    /// The first failed write: its system error number, else its kind and text.
    error: Option<(Option<i32>, io::ErrorKind, String)>,
    /// Bytes written with direct I/O.
    direct_bytes: u64,
    /// Why direct I/O was not used, or stopped, if it was not or did.
    refused: Option<String>,
}

impl DirectOutcome {
    /// The first write that failed, if one did.
    pub fn error(&self) -> Option<io::Error> {
        if !self.0.failed.load(Ordering::Acquire) {
            return None;
        }
        let figures = self.figures();
        Some(match figures.error.as_ref()? {
            (Some(code), _, _) => io::Error::from_raw_os_error(*code),
            (None, kind, text) => io::Error::new(*kind, text.clone()),
        })
    }

    /// Bytes written with direct I/O.
    pub fn direct_bytes(&self) -> u64 {
        self.figures().direct_bytes
    }

    /// Why direct I/O was not used or was given up, if it was.
    pub fn refused(&self) -> Option<String> {
        self.figures().refused.clone()
    }

    fn figures(&self) -> std::sync::MutexGuard<'_, Figures> {
        // A writer that panicked left figures that are still figures.
        self.0
            .figures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn fail(&self, e: &io::Error) {
        self.figures()
            .error
            .get_or_insert_with(|| (e.raw_os_error(), e.kind(), e.to_string()));
        // ATOMICS: `Release` after the error is stored: a reader that sees the flag with
        // `Acquire` finds it (the mutex orders it too; the flag is the writes' fast check).
        self.0.failed.store(true, Ordering::Release);
    }

    fn refuse(&self, why: String) {
        self.figures().refused.get_or_insert(why);
    }

    /// The error to return when a write has failed.
    fn check(&self) -> io::Result<()> {
        self.error().map_or(Ok(()), Err)
    }
}

/// A page-aligned buffer of [`BLOCK`] bytes (an anonymous mapping: zero pages until written)
/// and the file range it covers.
struct Block {
    ptr: NonNull<u8>,
    /// File offset of its first byte (a multiple of [`DIRECT_ALIGN`]).
    base: u64,
    /// Bytes it holds.
    fill: usize,
    /// Of those, the first ones already in the file (written through).
    written: usize,
}

// SAFETY: a `Block` owns its mapping exclusively (no copy of the pointer outlives it), so it
// may move to the writer thread and back.
unsafe impl Send for Block {}

impl Block {
    /// A block at file offset `base`. A `huge` one asks for huge pages where the kernel has
    /// them (`madvise` mode: a direct write then pins and maps one page instead of 512, a tenth
    /// of the recorder's CPU per MiB on the test machine); the first block has small pages, so
    /// that a short recording faults in only the few it fills.
    fn new(base: u64, huge: bool) -> io::Result<Self> {
        use nix::sys::mman::{madvise, mmap_anonymous, munmap, MapFlags, MmapAdvise, ProtFlags};
        // A huge one is cut out of a mapping a huge page longer, at a huge page boundary
        // (kernels before 6.7 do not align anonymous mappings to one).
        let extra = if huge { HUGE_PAGE } else { 0 };
        let len =
            std::num::NonZeroUsize::new(BLOCK + extra).ok_or_else(|| io::Error::other("BLOCK"))?;
        // SAFETY: a fresh private anonymous mapping, at an address the kernel chooses: it
        // aliases no other memory.
        let mapped = unsafe {
            mmap_anonymous(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .map_err(io::Error::from)?;
        let start = mapped.as_ptr() as usize;
        let head = start.next_multiple_of(extra.max(1)) - start;
        let trim = |at: usize, len: usize| {
            if let Some(at) = NonNull::new(at as *mut std::ffi::c_void).filter(|_| len > 0) {
                // SAFETY: a part of the mapping just made, outside the block kept: nothing
                // refers to it.
                let _ = unsafe { munmap(at, len) };
            }
        };
        trim(start, head);
        trim(start + head + BLOCK, extra - head);
        let ptr =
            NonNull::new((start + head) as *mut u8).ok_or_else(|| io::Error::other("mmap"))?;
        if huge {
            // SAFETY: advice on the block just made, which nothing else uses yet. Refused (no
            // huge pages in this kernel), the block has small pages.
            let _ = unsafe { madvise(ptr.cast(), BLOCK, MmapAdvise::MADV_HUGEPAGE) };
        }
        Ok(Self {
            ptr,
            base,
            fill: 0,
            written: 0,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `BLOCK` readable bytes (zero until written), alive as long as
        // `self`, written only through `bytes_mut`, which borrows `self` mutably.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), BLOCK) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the mutable borrow of `self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), BLOCK) }
    }

    /// Bytes from its start that fill whole pages.
    fn aligned(&self) -> usize {
        self.fill - self.fill % DIRECT_ALIGN
    }

    /// Write `[written, fill)` through `file` and continue from the block's last partial page
    /// (moved to its start); a failure is kept in `outcome` (nothing is written after it).
    fn write_through(&mut self, file: &File, outcome: &DirectOutcome) -> io::Result<()> {
        outcome.check()?;
        let (from, to) = (self.written, self.fill);
        if let Err(e) = write_through_at(file, &self.bytes()[from..to], self.base + from as u64) {
            outcome.fail(&e);
            return Err(e);
        }
        let aligned = self.aligned();
        let rest = self.fill - aligned;
        self.bytes_mut().copy_within(aligned..aligned + rest, 0);
        self.base += aligned as u64;
        self.fill = rest;
        self.written = rest;
        Ok(())
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: the mapping `Block::new` made, `BLOCK` bytes, unmapped once (no slice of it
        // outlives `self`).
        let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), BLOCK) };
    }
}

/// The archive's output; see the module docs.
pub struct DirectOutput {
    /// The file, as it was given (buffered).
    file: Arc<File>,
    /// `None`: written through (no direct I/O possible).
    blocks: Option<Blocks>,
    outcome: DirectOutcome,
}

impl std::fmt::Debug for DirectOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectOutput")
            .field("blocks", &self.blocks.is_some())
            .finish_non_exhaustive()
    }
}

/// The block being filled, the others, and the writer thread.
struct Blocks {
    block: Block,
    /// Blocks the writer gave back.
    free: Vec<Block>,
    /// Blocks made so far.
    made: usize,
    /// Started at the first hand-over; `None` after that if direct I/O is not possible.
    writer: Option<WriterThread>,
    /// Whether a writer may still be started.
    direct: bool,
    /// The writer's [`BEHIND_THROUGH`].
    behind_through: usize,
}

struct WriterThread {
    jobs: Option<SyncSender<Block>>,
    done: Receiver<Block>,
    thread: Option<JoinHandle<()>>,
    /// Blocks handed over and not given back yet.
    in_flight: usize,
}

impl DirectOutput {
    /// An output on `file` (open for writing; the archive starts at its offset), and what
    /// its writer did, to read once the output is dropped.
    pub fn new(file: File) -> (Self, DirectOutcome) {
        Self::with_behind_budget(file, BEHIND_THROUGH)
    }

    /// [`Self::new`] whose writer sends at most `behind_through` bytes through the page cache
    /// while the disk is behind (the tests' 0: every whole page direct).
    fn with_behind_budget(file: File, behind_through: usize) -> (Self, DirectOutcome) {
        let outcome = DirectOutcome::default();
        let blocks = match block_start(&file) {
            Ok(base) => Block::new(base, false)
                .map(|block| Blocks {
                    block,
                    free: Vec::new(),
                    made: 1,
                    writer: None,
                    direct: true,
                    behind_through,
                })
                .map_err(|e| outcome.refuse(format!("no block for direct writes: {e}")))
                .ok(),
            Err(why) => {
                outcome.refuse(why);
                None
            }
        };
        let output = Self {
            file: Arc::new(file),
            blocks,
            outcome: outcome.clone(),
        };
        (output, outcome)
    }
}

/// Where the archive starts in `file` if it may be written direct; else why not.
fn block_start(file: &File) -> Result<u64, String> {
    use std::io::Seek;
    if !file.metadata().is_ok_and(|m| m.file_type().is_file()) {
        return Err("not a regular file".into());
    }
    if super::archive::opened_for_appending(file) {
        return Err("open for appending".into());
    }
    let mut position = file;
    match position.stream_position() {
        Ok(offset) if offset % DIRECT_ALIGN as u64 == 0 => Ok(offset),
        Ok(offset) => Err(format!("starts at byte {offset}")),
        Err(e) => Err(format!("no offset: {e}")),
    }
}

impl Blocks {
    /// Copy `buf` into blocks, handing each full one over (nothing after a kept failure).
    fn take(
        &mut self,
        mut buf: &[u8],
        file: &Arc<File>,
        outcome: &DirectOutcome,
    ) -> io::Result<()> {
        outcome.check()?;
        while !buf.is_empty() {
            if self.block.fill == BLOCK {
                self.hand_over(file, outcome)?;
            }
            let fill = self.block.fill;
            let n = (BLOCK - fill).min(buf.len());
            self.block.bytes_mut()[fill..fill + n].copy_from_slice(&buf[..n]);
            self.block.fill += n;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Hand the block to the writer thread (started now if it is not yet) and continue in
    /// another from its last partial page, waiting for one while the writer has them all;
    /// where no writer can run, write it through.
    fn hand_over(&mut self, file: &Arc<File>, outcome: &DirectOutcome) -> io::Result<()> {
        outcome.check()?;
        if self.writer.is_none() && self.direct {
            match WriterThread::start(file, outcome, self.behind_through) {
                Ok(writer) => self.writer = Some(writer),
                Err(e) => {
                    outcome.refuse(format!("no direct description of the file: {e}"));
                    self.direct = false;
                }
            }
        }
        let Some(writer) = &mut self.writer else {
            return self.block.write_through(file, outcome);
        };
        writer.collect(&mut self.free);
        let made = match self.free.pop() {
            Some(block) => Ok(block),
            None if self.made < MAX_BLOCKS => Block::new(0, true).inspect(|_| self.made += 1),
            None => writer.wait_block().inspect_err(|e| outcome.fail(e)),
        };
        let mut next = match made {
            Ok(block) => block,
            // No memory for another block: wait for one the writer has, or else write this
            // one through (the recording goes on).
            Err(_) if writer.in_flight > 0 => {
                writer.wait_block().inspect_err(|e| outcome.fail(e))?
            }
            Err(_) => {
                return self.block.write_through(file, outcome);
            }
        };
        let aligned = self.block.aligned();
        let rest = self.block.fill - aligned;
        next.base = self.block.base + aligned as u64;
        next.bytes_mut()[..rest].copy_from_slice(&self.block.bytes()[aligned..self.block.fill]);
        next.fill = rest;
        next.written = rest;
        let full = std::mem::replace(&mut self.block, next);
        // A writer gone (it cannot panic) is a failure kept like a failed write.
        writer.send(full).inspect_err(|e| outcome.fail(e))
    }

    /// The end of a turn: the block is handed over when it holds [`DIRECT_MIN`] bytes not in
    /// the file; fewer are written through here while the writer is idle, and handed over
    /// while it is writing (this thread never writes the file while a direct write holds it:
    /// an extending direct write keeps the inode locked until the device is done), unless
    /// that would wait for a block: then they stay in the block until a later turn.
    fn end_turn(&mut self, file: &Arc<File>, outcome: &DirectOutcome) -> io::Result<()> {
        let unwritten = self.block.fill - self.block.written;
        let (writing, block_free) = match &mut self.writer {
            Some(writer) => {
                writer.collect(&mut self.free);
                let free = !self.free.is_empty() || self.made < MAX_BLOCKS;
                (writer.in_flight > 0, free)
            }
            None => (false, true),
        };
        // After the blocks given back: a failure of the writer's is seen before this thread
        // writes past it.
        outcome.check()?;
        match (unwritten, writing) {
            (0, _) => Ok(()),
            (DIRECT_MIN.., _) => self.hand_over(file, outcome),
            (_, true) if block_free => self.hand_over(file, outcome),
            (_, true) => Ok(()),
            (_, false) => self.block.write_through(file, outcome),
        }
    }

    /// Hand over what is not in the file yet and wait for the writer to write it all.
    fn finish(&mut self, file: &Arc<File>, outcome: &DirectOutcome) -> io::Result<()> {
        let handed = match self.block.fill > self.block.written {
            true => self.hand_over(file, outcome),
            false => Ok(()),
        };
        if let Some(writer) = &mut self.writer {
            writer.jobs = None;
            if let Some(thread) = writer.thread.take() {
                if thread.join().is_err() {
                    outcome.fail(&io::Error::other("the output's writer thread panicked"));
                }
            }
        }
        handed?;
        outcome.check()
    }

    /// Where the archive ends in the file.
    fn end(&self) -> u64 {
        self.block.base + self.block.fill as u64
    }
}

impl WriterThread {
    fn start(file: &Arc<File>, outcome: &DirectOutcome, behind_through: usize) -> io::Result<Self> {
        let direct = reopen_direct(file)?;
        let (jobs, queue) = mpsc::sync_channel::<Block>(MAX_BLOCKS);
        let (give_back, done) = mpsc::channel();
        let file = Arc::clone(file);
        let outcome = outcome.clone();
        let thread = std::thread::Builder::new()
            .name("fxtrace-output".into())
            .spawn(move || {
                let files = (&direct, &*file);
                write_blocks(&queue, &give_back, files, behind_through, &outcome);
            })?;
        Ok(Self {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            in_flight: 0,
        })
    }

    /// Add the blocks the writer gave back to `free`.
    fn collect(&mut self, free: &mut Vec<Block>) {
        for block in self.done.try_iter() {
            self.in_flight -= 1;
            free.push(block);
        }
    }

    /// Wait for the writer to give a block back.
    fn wait_block(&mut self) -> io::Result<Block> {
        if self.in_flight == 0 {
            return Err(io::Error::other("no block to wait for"));
        }
        let block = self.done.recv().map_err(|_| writer_gone())?;
        self.in_flight -= 1;
        Ok(block)
    }

    fn send(&mut self, block: Block) -> io::Result<()> {
        let jobs = self.jobs.as_ref().ok_or_else(writer_gone)?;
        jobs.send(block).map_err(|_| writer_gone())?;
        self.in_flight += 1;
        Ok(())
    }
}

fn writer_gone() -> io::Error {
    io::Error::other("the trace output's writer thread ended")
}

impl Write for DirectOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.blocks {
            Some(blocks) => {
                blocks.take(buf, &self.file, &self.outcome)?;
                Ok(buf.len())
            }
            None => (&*self.file).write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match &mut self.blocks {
            Some(blocks) => {
                let mut total = 0;
                for buf in bufs {
                    blocks.take(buf, &self.file, &self.outcome)?;
                    total += buf.len();
                }
                Ok(total)
            }
            None => (&*self.file).write_vectored(bufs),
        }
    }

    /// The end of a turn: what the output took is in the file or in the writer's queue (see
    /// the module docs); a failed write of the writer's is returned.
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.blocks {
            Some(blocks) => blocks.end_turn(&self.file, &self.outcome),
            None => Ok(()),
        }
    }
}

/// The block's memory after its bytes is lent to the archive: a provider's records are read
/// into it and checked there, then kept where they are (no copy from the drain's window).
impl ArchiveOutput for DirectOutput {
    /// Room in the block being filled (handed over first when it has fewer than `len` bytes
    /// free); `None` when written through, or for more than a block holds after a partial
    /// page.
    fn room(&mut self, len: usize) -> io::Result<Option<&mut [u8]>> {
        let Some(blocks) = &mut self.blocks else {
            return Ok(None);
        };
        if len > BLOCK - DIRECT_ALIGN {
            return Ok(None);
        }
        self.outcome.check()?;
        if BLOCK - blocks.block.fill < len {
            blocks.hand_over(&self.file, &self.outcome)?;
        }
        // A block handed over leaves less than a page in the next one.
        let fill = blocks.block.fill;
        Ok(blocks.block.bytes_mut().get_mut(fill..fill + len))
    }

    fn commit_room(&mut self, len: usize) -> io::Result<()> {
        let Some(blocks) = &mut self.blocks else {
            return match len {
                0 => Ok(()),
                _ => Err(io::Error::other("the trace output lent no room")),
            };
        };
        if len > BLOCK - blocks.block.fill {
            return Err(io::Error::other(
                "more bytes committed than the block holds",
            ));
        }
        blocks.block.fill += len;
        Ok(())
    }
}

/// Dropped, the output writes what it holds (unless a write failed), waits for its writer, and
/// leaves the file's offset at the archive's end; [`DirectOutcome`] then says whether a write
/// failed (the file then ends at most where the failure left it).
impl Drop for DirectOutput {
    fn drop(&mut self) {
        use std::io::Seek;
        if let Some(blocks) = &mut self.blocks {
            match blocks.finish(&self.file, &self.outcome) {
                Ok(()) => {
                    let _ = (&*self.file).seek(io::SeekFrom::Start(blocks.end()));
                }
                Err(e) => self.outcome.fail(&e),
            }
        }
    }
}

/// A second description of `file`, for writing with `O_DIRECT` (the given one stays as it is).
fn reopen_direct(file: &File) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// The writer thread: write each block handed over, in order, and give it back; after a
/// failure, write nothing more.
///
/// While the disk is behind ([`BEHIND_QUEUED`] blocks or more queued behind this one),
/// blocks go through the page cache, which takes them at memory speed, up to
/// `behind_through` bytes until the writer has caught up: a burst faster than the disk costs
/// few more drops than it did before direct writes, while a sustained stream that outruns the
/// disk goes at the disk's pace, direct
/// (through the page cache, such a stream filled memory with dirty pages, slowed every write
/// and saved less: `docs/benchmarks/manager-and-service.md`).
fn write_blocks(
    queue: &Receiver<Block>,
    give_back: &mpsc::Sender<Block>,
    (direct, file): (&File, &File),
    behind_through: usize,
    outcome: &DirectOutcome,
) {
    let mut use_direct = true;
    let mut queued = std::collections::VecDeque::new();
    let mut budget = behind_through;
    while let Some(block) = queued.pop_front().or_else(|| queue.recv().ok()) {
        queued.extend(queue.try_iter());
        if !outcome.0.failed.load(Ordering::Acquire) {
            let behind = queued.len() >= BEHIND_QUEUED && budget >= block.fill;
            match behind {
                true => budget -= block.fill,
                false if queued.is_empty() => budget = behind_through,
                false => {}
            }
            if let Err(e) = write_block(&block, direct, file, use_direct && !behind, outcome) {
                outcome.fail(&e);
            }
            use_direct &= outcome.figures().refused.is_none();
        }
        if give_back.send(block).is_err() {
            break;
        }
    }
}

/// Write one block handed over: what is not in the file yet (from `written`), its whole pages
/// direct, the partial pages around them through `file` (the one that ends it starts the next
/// block, which writes the rest of that page the same way): no page is written both ways, so
/// a direct write never waits for the page cache to write back a page of its range. All of it
/// goes through `file` when `use_direct` is false or it has fewer than [`DIRECT_MIN`] bytes
/// of whole pages but one page (a turn's end while the writer was busy). A file system that refuses direct
/// I/O (`EINVAL`) gets this block, and the caller the later ones, through `file`.
fn write_block(
    block: &Block,
    direct: &File,
    file: &File,
    use_direct: bool,
    outcome: &DirectOutcome,
) -> io::Result<()> {
    let bytes = block.bytes();
    let at = |offset: usize| block.base + offset as u64;
    let [head, whole, tail] = block_pieces(block.written, block.fill);
    // (A turn's end hands over DIRECT_MIN bytes or more: whole pages of them, a page less.)
    if use_direct && whole.len() + DIRECT_ALIGN >= DIRECT_MIN {
        write_through_at(file, &bytes[head.clone()], at(head.start))?;
        match direct.write_all_at(&bytes[whole.clone()], at(whole.start)) {
            Ok(()) => {
                outcome.figures().direct_bytes += whole.len() as u64;
                return write_through_at(file, &bytes[tail.clone()], at(tail.start));
            }
            // The file system does not take direct I/O (or not at this alignment).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                outcome.refuse(format!("the file system refused a direct write: {e}"));
                return write_through_at(file, &bytes[whole.start..tail.end], at(whole.start));
            }
            Err(e) => return Err(e),
        }
    }
    write_through_at(file, &bytes[head.start..tail.end], at(head.start))
}

/// The bytes `[written, fill)` of a block not in the file yet, in three pieces: up to the
/// first page boundary, the whole pages after it (page-aligned: what may be written direct),
/// and the partial page that ends them. A page of the direct piece holds no byte of the
/// others (and none already in the file).
fn block_pieces(written: usize, fill: usize) -> [std::ops::Range<usize>; 3] {
    let aligned = fill - fill % DIRECT_ALIGN;
    let head_end = written.next_multiple_of(DIRECT_ALIGN).clamp(written, fill);
    let whole_end = aligned.max(head_end);
    [written..head_end, head_end..whole_end, whole_end..fill]
}

/// Most bytes of one buffered write.
const THROUGH_PIECE: usize = 1 << 20;

fn write_through_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    let mut at = offset;
    for piece in bytes.chunks(THROUGH_PIECE) {
        file.write_all_at(piece, at)?;
        at += piece.len() as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fxtrace::test_support::{skip, Requirement};

    /// `len` bytes that differ from page to page and block to block.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes()[7])
            .collect()
    }

    fn file_in(dir: &tempfile::TempDir) -> (std::path::PathBuf, File) {
        let path = dir.path().join("t.fxt");
        let file = File::create(&path).unwrap();
        (path, file)
    }

    /// [`file_in`] and a second, direct description of the file, or `None` after a skip line.
    fn direct_file_in(dir: &tempfile::TempDir) -> Option<(std::path::PathBuf, File, File)> {
        let (path, file) = file_in(dir);
        let Ok(direct) = reopen_direct(&file) else {
            skip(
                Requirement::DirectIo,
                "no O_DIRECT description of a temporary file",
            );
            return None;
        };
        Some((path, file, direct))
    }

    /// `data` (whole blocks) as full blocks queued for a writer, the queue closed; all but
    /// the first `huge` when asked.
    fn queued_blocks(data: &[u8], huge: bool) -> Receiver<Block> {
        let (jobs, queue) = mpsc::sync_channel(data.len() / BLOCK);
        for (n, bytes) in data.chunks(BLOCK).enumerate() {
            let mut block = Block::new((n * BLOCK) as u64, huge && n > 0).unwrap();
            block.bytes_mut().copy_from_slice(bytes);
            block.fill = BLOCK;
            jobs.send(block).unwrap();
        }
        queue
    }

    /// Whether `outcome` shows direct writes, or else says why not (a file system that
    /// refuses them): the test then checks the written-through path only, and says so.
    fn went_direct(outcome: &DirectOutcome) -> bool {
        match outcome.refused() {
            Some(why) => {
                skip(Requirement::DirectIo, format!("direct writes: {why}"));
                false
            }
            None => true,
        }
    }

    #[test]
    fn pieces_and_turns_of_every_size_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = file_in(&dir);
        let mut description = file.try_clone().unwrap();
        let (mut out, outcome) = DirectOutput::with_behind_budget(file, 0);
        let data = pattern(3 * BLOCK + 5 * DIRECT_ALIGN + 123);
        // Pieces of 1 byte to more than a block; turns ending after small and large amounts,
        // on and off page boundaries.
        let sizes = [1, 7, 4096, 100_000, DIRECT_MIN + 8, 3, BLOCK + 17, 65_536];
        let mut at = 0;
        let mut n = 0;
        while at < data.len() {
            let len = sizes[n % sizes.len()].min(data.len() - at);
            if n % 3 == 0 {
                let slices = [
                    io::IoSlice::new(&data[at..at + len / 2]),
                    io::IoSlice::new(&data[at + len / 2..at + len]),
                ];
                assert_eq!(out.write_vectored(&slices).unwrap(), len);
            } else {
                out.write_all(&data[at..at + len]).unwrap();
            }
            at += len;
            n += 1;
            if n % 2 == 0 {
                out.flush().unwrap();
            }
        }
        drop(out);
        assert!(outcome.error().is_none());
        assert!(std::fs::read(&path).unwrap() == data, "the file differs");
        if went_direct(&outcome) {
            // The full blocks went direct.
            assert!(
                outcome.direct_bytes() >= 2 * BLOCK as u64,
                "{}",
                outcome.direct_bytes()
            );
        }
        // The offset of the description it was given is left at the archive's end.
        use std::io::Seek;
        assert_eq!(description.stream_position().unwrap(), data.len() as u64);
    }

    #[test]
    fn a_turn_end_puts_its_bytes_in_the_file_or_the_writers_queue() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = file_in(&dir);
        let (mut out, outcome) = DirectOutput::with_behind_budget(file, 0);
        let data = pattern(BLOCK + DIRECT_MIN + 1000);
        // A small turn with no writer running: in the file when the turn ends.
        out.write_all(&data[..1000]).unwrap();
        out.flush().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), &data[..1000]);
        // Then a large one: handed over to the writer, in the file without another turn.
        out.write_all(&data[1000..]).unwrap();
        out.flush().unwrap();
        let started = std::time::Instant::now();
        while std::fs::metadata(&path).unwrap().len() < data.len() as u64 {
            let waited = started.elapsed();
            assert!(
                waited < std::time::Duration::from_secs(10),
                "not written: {waited:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        drop(out);
        assert!(std::fs::read(&path).unwrap() == data);
        if went_direct(&outcome) {
            assert!(outcome.direct_bytes() >= BLOCK as u64);
        }
    }

    #[test]
    fn what_cannot_go_direct_is_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let data = pattern(BLOCK + 4000);
        // An archive that starts inside a page keeps what the file held before it.
        let path = dir.path().join("after.fxt");
        std::fs::write(&path, b"100 bytes before".repeat(6)).unwrap();
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        use std::io::Seek;
        file.seek(io::SeekFrom::End(0)).unwrap();
        let (mut out, outcome) = DirectOutput::new(file);
        out.write_all(&data).unwrap();
        drop(out);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..96], b"100 bytes before".repeat(6).as_slice());
        assert!(bytes[96..] == data);
        assert_eq!(outcome.direct_bytes(), 0);
        assert_eq!(outcome.refused().as_deref(), Some("starts at byte 96"));
        // A file open for appending.
        let path = dir.path().join("append.fxt");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let (mut out, outcome) = DirectOutput::new(file);
        out.write_all(&data).unwrap();
        drop(out);
        assert!(std::fs::read(&path).unwrap() == data);
        assert_eq!(outcome.refused().as_deref(), Some("open for appending"));
        // A pipe.
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            io::Read::read_to_end(&mut File::from(read_end), &mut got).unwrap();
            got
        });
        let (mut out, outcome) = DirectOutput::new(File::from(write_end));
        out.write_all(&data).unwrap();
        drop(out);
        assert!(reader.join().unwrap() == data);
        assert_eq!(outcome.refused().as_deref(), Some("not a regular file"));
    }

    #[test]
    fn while_blocks_wait_behind_the_disk_they_go_through_the_page_cache_within_a_budget() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, _, _)) = direct_file_in(&dir) else {
            return;
        };
        // Full blocks queued before the writer starts: while two or more are behind one (the
        // disk is behind; one is not: a save of two blocks hands two over at once), it goes
        // through the page cache within the budget; the rest direct.
        for (blocks, budget, direct) in [(5, 4, 2), (6, 2, 4)] {
            let data = pattern(blocks * BLOCK);
            let queue = queued_blocks(&data, true);
            let (give_back, done) = mpsc::channel();
            let outcome = DirectOutcome::default();
            let file = File::create(&path).unwrap();
            let direct_file = reopen_direct(&file).unwrap();
            write_blocks(
                &queue,
                &give_back,
                (&direct_file, &file),
                budget * BLOCK,
                &outcome,
            );
            assert_eq!(done.try_iter().count(), blocks, "every block given back");
            assert!(std::fs::read(&path).unwrap() == data);
            if went_direct(&outcome) {
                assert_eq!(
                    outcome.direct_bytes(),
                    (direct * BLOCK) as u64,
                    "{blocks} blocks"
                );
            }
        }
    }

    #[test]
    fn no_page_is_written_both_direct_and_through() {
        let page = DIRECT_ALIGN;
        for (written, fill) in [
            (0, BLOCK),
            (0, 3 * page + 10),
            (100, 3 * page + 10),
            (page, 3 * page),
            (page - 8, page + 8),
            (100, 200),
            (5000, 5000),
        ] {
            let [head, whole, tail] = block_pieces(written, fill);
            let case = format!("{written}..{fill}: {head:?} {whole:?} {tail:?}");
            // Every byte not in the file, once, in order.
            let ends = (head.start, head.end, whole.end);
            assert_eq!(ends, (written, whole.start, tail.start), "{case}");
            assert_eq!(tail.end, fill, "{case}");
            // The direct piece is whole pages, and shares no page with the others or with
            // what is in the file already.
            if !whole.is_empty() {
                assert_eq!((whole.start % page, whole.len() % page), (0, 0), "{case}");
                assert!(written <= whole.start && head.end <= whole.start, "{case}");
                assert!(tail.is_empty() || tail.start >= whole.end, "{case}");
                assert!(written.div_ceil(page) * page <= whole.start, "{case}");
            }
            // As much as can go direct does.
            assert!(tail.len() < page && head.len() < page, "{case}");
        }
    }

    #[test]
    fn bytes_committed_in_the_lent_room_are_the_next_bytes_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = file_in(&dir);
        let (mut out, outcome) = DirectOutput::new(file);
        let data = pattern(3 * BLOCK);
        let mut expected = Vec::new();
        // Written bytes, then rooms: two that fit in the first block, one that does not (the
        // block is handed over first), each committed in part; then written bytes again.
        out.write_all(&data[..1000]).unwrap();
        expected.extend_from_slice(&data[..1000]);
        let mut at = 1000;
        for len in [300_000, BLOCK - 400_000, BLOCK - DIRECT_ALIGN] {
            let room = out.room(len).unwrap().expect("a room");
            assert_eq!(room.len(), len);
            room.copy_from_slice(&data[at..at + len]);
            // Asked again before the commit: the same memory.
            let start = room.as_ptr();
            assert_eq!(out.room(len / 2).unwrap().unwrap().as_ptr(), start);
            out.commit_room(len - 800).unwrap();
            expected.extend_from_slice(&data[at..at + len - 800]);
            at += len;
        }
        out.write_all(&data[at..at + 5000]).unwrap();
        expected.extend_from_slice(&data[at..at + 5000]);
        // More than a block holds after a partial page: no room; more than it has: refused.
        assert!(out.room(BLOCK - DIRECT_ALIGN + 8).unwrap().is_none());
        out.room(64).unwrap().expect("a room");
        assert!(out.commit_room(BLOCK).is_err());
        drop(out);
        assert!(outcome.error().is_none());
        assert!(
            std::fs::read(&path).unwrap() == expected,
            "the file differs"
        );
    }

    #[test]
    fn a_block_that_starts_in_the_file_goes_direct_from_its_next_page() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, file, direct)) = direct_file_in(&dir) else {
            return;
        };
        // The first 100 bytes of the block are in the file already (a partial page carried
        // over, or a turn's bytes written through).
        let data = pattern(BLOCK);
        std::fs::write(&path, &data[..100]).unwrap();
        let mut block = Block::new(0, false).unwrap();
        block.bytes_mut().copy_from_slice(&data);
        (block.fill, block.written) = (BLOCK, 100);
        let outcome = DirectOutcome::default();
        write_block(&block, &direct, &file, true, &outcome).unwrap();
        assert!(std::fs::read(&path).unwrap() == data);
        if went_direct(&outcome) {
            // Not the first page: the page cache holds it.
            let direct_bytes = (BLOCK - DIRECT_ALIGN) as u64;
            assert_eq!(outcome.direct_bytes(), direct_bytes);
        }
    }

    #[test]
    fn a_failed_write_is_kept_returned_and_leaves_no_hole() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skip(Requirement::Root, "mounting a 6 MB tmpfs needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=6m", "fxtrace-direct"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            skip(Requirement::Root, "cannot mount a tmpfs");
            return;
        }
        /// Unmounts the tmpfs however the test ends.
        struct Unmount<'a>(&'a std::path::Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(self.0).status();
            }
        }
        let unmount = Unmount(dir.path());
        let (path, file) = file_in(&dir);
        let (mut out, outcome) = DirectOutput::with_behind_budget(file, 0);
        let data = pattern(4 * BLOCK);
        for piece in data.chunks(DIRECT_MIN) {
            if out.write_all(piece).and_then(|()| out.flush()).is_err() {
                break;
            }
        }
        // The writer fails on its own time; once it has, every call says so.
        let started = std::time::Instant::now();
        while outcome.error().is_none() && started.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let failed = out.write_all(b"more").and_then(|()| out.flush()).err();
        drop(out);
        let error = outcome.error().expect("the writer's error is kept");
        let bytes = std::fs::read(&path).unwrap();
        drop(unmount);
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
        assert!(error.to_string().contains("No space left"), "{error}");
        let failed = failed.expect("a later call returns the error");
        assert!(failed.to_string().contains("No space left"), "{failed}");
        // What the file holds is what was given, up to where it ends: no hole, no later block.
        assert!(
            bytes.len() < data.len() && bytes.len() > BLOCK,
            "{}",
            bytes.len()
        );
        assert!(
            data.starts_with(&bytes),
            "the file is not a prefix of what was written"
        );
    }

    #[test]
    fn an_archive_at_a_page_boundary_past_the_start_goes_direct_after_what_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.fxt");
        let head = pattern(2 * DIRECT_ALIGN);
        std::fs::write(&path, &head).unwrap();
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        use std::io::Seek;
        file.seek(io::SeekFrom::End(0)).unwrap();
        let (mut out, outcome) = DirectOutput::with_behind_budget(file, 0);
        let data: Vec<u8> = pattern(BLOCK + 10).into_iter().rev().collect();
        out.write_all(&data).unwrap();
        drop(out);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes[..head.len()] == head && bytes[head.len()..] == data);
        if went_direct(&outcome) {
            assert_eq!(outcome.direct_bytes(), BLOCK as u64);
        }
    }

    #[test]
    fn after_a_kept_failure_nothing_more_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = file_in(&dir);
        let (mut out, outcome) = DirectOutput::new(file);
        out.write_all(&pattern(1000)).unwrap();
        // The writer's failure, as it keeps it.
        outcome.fail(&io::Error::from_raw_os_error(libc::EIO));
        let error = out.flush().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        assert!(out.write_all(b"more").is_err());
        drop(out);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "nothing written after it"
        );
    }

    #[test]
    fn a_writer_that_failed_writes_no_later_block() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, _file, direct)) = direct_file_in(&dir) else {
            return;
        };
        // The buffered description cannot write (EBADF): the first block, sent through the
        // page cache (two wait behind it; the budget takes one), fails; the next two would go
        // direct, which works.
        let read_only = File::open(&path).unwrap();
        let data = pattern(3 * BLOCK);
        let queue = queued_blocks(&data, false);
        let (give_back, done) = mpsc::channel();
        let outcome = DirectOutcome::default();
        write_blocks(&queue, &give_back, (&direct, &read_only), BLOCK, &outcome);
        assert_eq!(done.try_iter().count(), 3, "every block given back");
        assert_eq!(
            outcome.error().and_then(|e| e.raw_os_error()),
            Some(libc::EBADF)
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "a block after the failure"
        );
    }

    #[test]
    fn a_huge_block_starts_at_a_huge_page_boundary_and_keeps_its_bytes() {
        for _ in 0..4 {
            let mut block = Block::new(0, true).unwrap();
            assert_eq!(block.ptr.as_ptr() as usize % HUGE_PAGE, 0);
            block.bytes_mut().copy_from_slice(&pattern(BLOCK));
            assert!(block.bytes() == pattern(BLOCK).as_slice());
        }
    }
}

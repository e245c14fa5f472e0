//! Opening a trace given on the command line: a regular file is mapped (zero-copy, the pages
//! read given back as the reading moves on), standard input or a FIFO is read as a stream, and
//! a reader that reads its input twice has a stream saved to an unlinked temporary file first.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

/// Why a trace could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("{name}: cannot read: {source}")]
pub struct OpenError {
    /// The input as given on the command line (`<stdin>` for `-`).
    pub name: String,
    /// The cause.
    pub source: io::Error,
}

/// A read-only private mapping of a whole regular file.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    /// The file (a duplicate descriptor), whose length [`Mapping::check_length`] reads.
    file: File,
    /// Pages before this offset were given back (`MADV_DONTNEED`).
    released: std::cell::Cell<usize>,
}

impl Mapping {
    /// Maps `file` (`len` bytes, at least one) read-only (the mapping keeps a duplicate of
    /// the descriptor, to see the file shrink).
    pub fn new(file: &File, len: usize) -> io::Result<Mapping> {
        let file = file.try_clone()?;
        // SAFETY: a new read-only private mapping of a descriptor we own, at an address the
        // kernel chooses; nothing else refers to that range.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: advice on the range just mapped; a failure only loses the advice.
        unsafe {
            libc::madvise(ptr, len, libc::MADV_SEQUENTIAL);
        }
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?,
            len,
            file,
            released: std::cell::Cell::new(0),
        })
    }

    /// Whether the file still holds every byte mapped (`fstat`): a file truncated while
    /// mapped raises SIGBUS on the pages it lost, so a reader checks before each next part
    /// of the mapping ([`super::RELEASE_EVERY`] bytes) and stops with this error instead.
    pub fn check_length(&self) -> io::Result<()> {
        let now = self.file.metadata()?.len();
        if now < self.len as u64 {
            return Err(io::Error::other(format!(
                "the file shrank while being read ({} bytes when opened, {now} now): another \
                 program truncated or rewrote it; read a copy once it is complete",
                self.len
            )));
        }
        Ok(())
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for the life of `self`. Pages given back by
        // `release_before` read again from the file when touched (a private read-only
        // mapping that was never written holds nothing of its own). A file truncated while
        // mapped raises SIGBUS on the lost pages: the readers call `check_length` before
        // each next part, and the command line names a SIGBUS between a check and an access
        // (`name_bus_errors`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Gives back the resident pages of the first `offset` bytes (those read already, and
    /// table strings they hold, which read in again when referred to): the reader's resident
    /// memory stays bounded however large the file.
    pub fn release_before(&self, offset: usize) {
        let end = offset.min(self.len) & !(page_size() - 1);
        if end == 0 {
            return;
        }
        // SAFETY: advice on a page-aligned range inside our own mapping; MADV_DONTNEED on a
        // private, never-written file mapping drops pages that read in again from the file.
        unsafe {
            libc::madvise(self.ptr.as_ptr().cast(), end, libc::MADV_DONTNEED);
        }
        self.released.set(end);
    }
}

impl Mapping {
    /// The mapping as an `io::Read` from its start, giving back the pages read every
    /// [`super::RELEASE_EVERY`] bytes (for a reader that frames records its own way, as
    /// `check` does Perfetto's).
    pub fn reader(&self) -> MappedReader<'_> {
        MappedReader {
            map: self,
            pos: 0,
            release_at: super::RELEASE_EVERY as usize,
        }
    }
}

/// A mapping read as a stream ([`Mapping::reader`]).
#[derive(Debug)]
pub struct MappedReader<'m> {
    map: &'m Mapping,
    pos: usize,
    release_at: usize,
}

impl Read for MappedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == 0 {
            self.map.check_length()?;
        }
        let bytes = &self.map.bytes()[self.pos..];
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        self.pos += n;
        if self.pos >= self.release_at {
            self.map.release_before(self.pos);
            self.release_at = self.pos + super::RELEASE_EVERY as usize;
            self.map.check_length()?;
        }
        Ok(n)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping the range this value mapped; no slice of it outlives `self`
        // (`bytes` borrows `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Makes a SIGBUS (a mapped trace truncated between [`Mapping::check_length`] and the access
/// to a page it lost) end the process with a one-line message and exit status 1 instead of a
/// silent death by signal. For the command line's readers only (a library user's process has
/// its own signal handling); installed once.
pub fn name_bus_errors() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid value (empty mask, no flags); the handler
        // installed calls only async-signal-safe functions (write, _exit).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_bus_error as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            // A failure leaves the default action (death by SIGBUS): nothing worse.
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

extern "C" fn on_bus_error(_: libc::c_int) {
    const MESSAGE: &[u8] = b"fxtrace: error: an input file shrank while being read (another \
        program truncated or rewrote it; SIGBUS on a page it lost): read a copy once it is \
        complete\n";
    // SAFETY: write(2) and _exit(2) are async-signal-safe; MESSAGE is a static buffer. A
    // short or failed write loses only the message.
    unsafe {
        libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
        libc::_exit(1);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096)
}

/// Where the records come from.
pub enum Source {
    /// A regular file, mapped (`None`: the file is empty).
    Mapped(Option<Mapping>),
    /// A stream (standard input, a FIFO, a device), read through a 64 KiB buffer.
    Stream(Box<dyn Read>),
    /// A stream to be read more than once: its first reading saves what it reads to the
    /// file (an unlinked temporary file), which is mapped for the next readings.
    Spooled(Box<dyn Read>, File),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Mapped(m) => f.debug_tuple("Mapped").field(m).finish(),
            Source::Stream(_) => f.write_str("Stream"),
            Source::Spooled(..) => f.write_str("Spooled"),
        }
    }
}

/// A trace to read, opened.
#[derive(Debug)]
pub struct Input {
    name: String,
    source: Source,
}

impl Input {
    /// Opens `arg`: `-` is standard input; a regular file (standard input redirected from
    /// one included) is mapped, anything else read as a stream.
    pub fn open(arg: &Path) -> Result<Input, OpenError> {
        let name = input_name(arg);
        let fail = |source| OpenError {
            name: name.clone(),
            source,
        };
        let file = if arg.as_os_str() == "-" {
            // A duplicate of descriptor 0, so that mapping it leaves stdin as it was.
            let stdin = io::stdin();
            let fd = stdin.as_raw_fd();
            // SAFETY: F_DUPFD_CLOEXEC on our own standard input returns a new descriptor
            // (or -1), which the File below owns.
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            if dup < 0 {
                return Err(fail(io::Error::last_os_error()));
            }
            // SAFETY: `dup` is a descriptor just created and owned by nothing else.
            unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(dup) }
        } else {
            File::open(arg).map_err(fail)?
        };
        let meta = file.metadata().map_err(fail)?;
        let source = if meta.file_type().is_file() {
            let len = usize::try_from(meta.len()).map_err(|_| {
                fail(io::Error::other(
                    "the file is larger than the address space",
                ))
            })?;
            // Standard input redirected from a file may have been read from already: map
            // only when it is at its start.
            let at_start =
                arg.as_os_str() != "-" || io::Seek::stream_position(&mut &file).map_err(fail)? == 0;
            if !at_start {
                Source::Stream(Box::new(io::BufReader::with_capacity(1 << 16, file)))
            } else if len == 0 {
                Source::Mapped(None)
            } else {
                Source::Mapped(Some(Mapping::new(&file, len).map_err(fail)?))
            }
        } else {
            Source::Stream(Box::new(io::BufReader::with_capacity(1 << 16, file)))
        };
        Ok(Input { name, source })
    }

    /// Opens `arg` for a reader that reads it more than once: a stream's first reading saves
    /// what it reads (up to where decoding stops) to an unlinked file in the temporary
    /// directory (`TMPDIR`), mapped for the next readings.
    pub fn open_rereadable(arg: &Path) -> Result<Input, OpenError> {
        let input = Input::open(arg)?;
        let Source::Stream(reader) = input.source else {
            return Ok(input);
        };
        let spool = tempfile::tempfile().map_err(|source| OpenError {
            name: input.name.clone(),
            source,
        })?;
        Ok(Input {
            name: input.name,
            source: Source::Spooled(reader, spool),
        })
    }

    /// Maps the spool a first reading wrote (a [`Source::Spooled`] input becomes
    /// [`Source::Mapped`]).
    pub(super) fn spooled(&mut self) -> Result<(), OpenError> {
        let Source::Spooled(_, spool) = &self.source else {
            return Ok(());
        };
        let fail = |source| OpenError {
            name: self.name.clone(),
            source,
        };
        let len = spool.metadata().map_err(fail)?.len();
        let len = usize::try_from(len).map_err(|_| {
            fail(io::Error::other(
                "the input is larger than the address space",
            ))
        })?;
        let map = match len {
            0 => None,
            len => Some(Mapping::new(spool, len).map_err(fail)?),
        };
        self.source = Source::Mapped(map);
        Ok(())
    }

    /// The input's name in messages (`<stdin>` for `-`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the records come from.
    pub fn source(&mut self) -> &mut Source {
        &mut self.source
    }
}

/// The name of an input in messages.
pub fn input_name(arg: &Path) -> String {
    if arg.as_os_str() == "-" {
        "<stdin>".to_owned()
    } else {
        arg.display().to_string()
    }
}

//! Kernel symbols: the text symbols of `/proc/kallsyms` (types `t`, `T`, `w`, `W` with a
//! nonzero address), sorted by address, which name the kernel frames of wait points and CPU
//! samples ([`super::stacks`]).
//!
//! They are one compact table whatever their source: parsed from a kallsyms text
//! ([`KernelSymbols::read`], [`KernelSymbols::parse`]), or mapped from a table another process
//! made ([`KernelSymbols::open_shared`]). Reading `/proc/kallsyms` costs some 40 ms of system
//! time (120 000 lines on a 6.x kernel) and parsing it more; under `fxtrace record --preload`
//! every traced process would pay that at its start. The manager reads it once, puts the
//! table in a sealed memfd it keeps ([`KernelSymbols::share`]), and names it in
//! [`SHARED_SYMBOLS_ENV`]: each preloaded process opens it through `/proc/PID/fd/N` and maps
//! it, and looks symbols up in place, with no parse and no copy.
//!
//! # The table (version 1)
//!
//! All integers little-endian; the file is exactly as long as its sections.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `FXKSYMS\0` |
//! | 8 | 4 | version, 1 |
//! | 12 | 4 | `count`: symbols |
//! | 16 | 4 | `modules`: module names |
//! | 20 | 4 | `strings_len`: bytes of the string blob |
//! | 24 | 8 | 0 (reserved) |
//! | 32 | 8 × count | the symbols' addresses, ascending |
//! | … | 4 × (count + modules) | string ends: string `s` is the blob from the end of string `s − 1` (0 for the first) to its own end; strings `0..count` are the symbols' names (≤ 255 bytes), then the module names (`[kvm]`) |
//! | … | 4 × count | each symbol's module: 0 the kernel's own, `k` module name `k − 1` |
//! | … | strings_len | the string blob |
//!
//! # Trust
//!
//! The reference comes from the environment, which a program may have kept long after the
//! recorder ended, or been handed crafted. Nothing is opened for reading before the process it
//! names is shown to be the one that shared (its start time: a reused pid has another) and the
//! file to be that table: `/proc/PID/fd/N` is opened `O_PATH` (no device, FIFO or file
//! system's file is opened by that: it only holds the inode the link names, so that what
//! follows is about that one file however the number is swapped meanwhile), its name read
//! back from `/proc/self/fd` (a memfd named as the recorder names it: nothing of another file
//! system is opened or asked its attributes; the `O_PATH` walk itself may revalidate a network
//! file system's path), its owner (root or this user), device and inode checked; only
//! then is that inode opened for reading, non-blocking and without becoming a controlling
//! terminal. The kernel opens another process's descriptor only for a process that may read
//! that process's descriptors (ptrace read access: the same user, or root), and a process to
//! which `/proc/kallsyms` shows zeros (`kernel.kptr_restrict`) does not take the table: a
//! descendant that dropped its privileges reads `/proc/kallsyms` itself, which hides the
//! addresses from it. On its own descriptor, `fstat` says again that it is that file and
//! `F_GET_SEALS` that its contents and size cannot change (no `SIGBUS`, no contents moving
//! under a reader); then the magic, the version and the sections adding up to its size. Every
//! offset read from the table is checked where it is used: a bad entry is a
//! [`KernelSymbolsError::BadEntry`], never a panic or a read out of bounds. (Checking each
//! entry up front would cost every traced process's start some 0.1 ms of page faults and
//! reads, for a table only the manager writes.) Where the table cannot be opened, the capture
//! reads `/proc/kallsyms` itself and says why in the trace.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::str::FromStr;
use std::sync::Arc;

use super::events::KernelSymbol;
use crate::sys::{self, SysError};

/// The environment variable naming a shared table to a traced process:
/// `PID:START:FD:DEV:INODE` ([`SharedSymbolsRef`]), set by `fxtrace record --preload`.
pub const SHARED_SYMBOLS_ENV: &str = "FXTRACE_PRELOAD_KERNEL_SYMBOLS";

/// The table's first 8 bytes.
const MAGIC: [u8; 8] = *b"FXKSYMS\0";
/// The layout this module writes and reads.
const VERSION: u32 = 1;
/// Bytes before the addresses.
const HEADER_LEN: usize = 32;
/// The largest shared table mapped (a 6.18 kernel's: 4.9 MB for 122 059 symbols).
const MAX_TABLE_LEN: u64 = 256 << 20;
/// What `/proc/self/fd/N` says of a memfd [`KernelSymbols::share`] made.
const MEMFD_LINK: &[u8] = b"/memfd:fxtrace-kernel-symbols";

/// Whether `/proc/kallsyms` shows this process zeros for addresses (`kernel.kptr_restrict`,
/// no `CAP_SYSLOG`): its first text symbol says (the kernel formats the file on demand; the
/// absolute per-CPU symbols before it are at 0 on many kernels, for root too: 3.6 KiB of them on
/// a 5.x kernel). An empty or unreadable file says nothing either way; a file with no text
/// symbol in its first [`KALLSYMS_PROBE`] bytes is taken as hiding them.
fn kernel_addresses_hidden() -> bool {
    use std::io::Read;
    let Ok(file) = std::fs::File::open("/proc/kallsyms") else {
        return false;
    };
    let mut first = Vec::with_capacity(16 << 10);
    let _ = file.take(KALLSYMS_PROBE).read_to_end(&mut first);
    !first.is_empty() && shows_zero_address(&first) != Some(false)
}

/// How much of `/proc/kallsyms` [`kernel_addresses_hidden`] reads at most.
const KALLSYMS_PROBE: u64 = 64 << 10;

/// Whether the first text symbol (type `t`, `T`) of a kallsyms text is at address 0; `None`
/// without one.
fn shows_zero_address(text: &[u8]) -> Option<bool> {
    text.split(|&b| b == b'\n')
        .find_map(|line| {
            let mut parts = line.split(|&b| b == b' ');
            let (address, kind) = (parts.next()?, parts.next()?);
            matches!(kind, b"t" | b"T").then_some(address)
        })
        .map(|address| !address.is_empty() && address.iter().all(|&b| b == b'0'))
}

/// The longest symbol name kept (kallsyms' own limit is 512; longer ones are dropped).
const MAX_NAME_LEN: usize = 255;
/// The bytes a symbol covers when no symbol follows it: kallsyms gives no sizes.
const LAST_SYMBOL_LEN: u64 = 4096;
/// Seals a shared table must carry: its contents and its size are fixed.
const REQUIRED_SEALS: libc::c_int = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

/// Why kernel symbols could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KernelSymbolsError {
    /// A kallsyms file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: io::Error,
    },
    /// Every address reads 0 (`kernel.kptr_restrict` hides them from this user).
    #[error("{path} shows every address as 0 (kernel.kptr_restrict hides them; run as root)")]
    Hidden {
        /// The file.
        path: String,
    },
    /// A system call making or mapping a shared table failed.
    #[error("kernel symbol table: {0}")]
    System(#[from] SysError),
    /// A reference ([`SHARED_SYMBOLS_ENV`]'s value) that does not parse.
    #[error("{0:?} names no shared kernel symbol table (PID:START:FD:DEV:INODE expected)")]
    BadReference(String),
    /// The descriptor is not the shared table (closed, reused, not sealed).
    #[error("{what} is not the session's kernel symbol table: {why}")]
    NotTheTable {
        /// The descriptor (and where else it was looked for).
        what: String,
        /// What it is instead.
        why: String,
    },
    /// The table's header or size is wrong.
    #[error("the kernel symbol table is malformed: {0}")]
    BadTable(String),
    /// One entry of the table points out of it.
    #[error("entry {index} of the kernel symbol table is malformed: {why}")]
    BadEntry {
        /// The symbol's index.
        index: usize,
        /// What is wrong with it.
        why: &'static str,
    },
}

type Error = KernelSymbolsError;

/// Where each section of a table starts, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    count: usize,
    modules: usize,
    ends: usize,
    module_of: usize,
    strings: usize,
    /// The whole table's length.
    bytes: usize,
}

impl Layout {
    /// The layout of `count` symbols, `modules` modules and `strings_len` bytes of strings
    /// (`None` when it would not fit the address space).
    fn new(count: usize, modules: usize, strings_len: usize) -> Option<Self> {
        let ends = HEADER_LEN.checked_add(count.checked_mul(8)?)?;
        let module_of = ends.checked_add(count.checked_add(modules)?.checked_mul(4)?)?;
        let strings = module_of.checked_add(count.checked_mul(4)?)?;
        let bytes = strings.checked_add(strings_len)?;
        Some(Self {
            count,
            modules,
            ends,
            module_of,
            strings,
            bytes,
        })
    }

    /// The layout a table's header declares, checked against its length.
    fn read(bytes: &[u8]) -> Result<Self, Error> {
        let bad = |why: &str| Error::BadTable(why.to_owned());
        let header = bytes
            .get(..HEADER_LEN)
            .ok_or_else(|| bad("shorter than its header"))?;
        if header[..8] != MAGIC {
            return Err(bad("no table magic"));
        }
        let word = |at: usize| u32_at(header, at).unwrap_or(u32::MAX) as usize;
        let version = word(8);
        if version != VERSION as usize {
            return Err(Error::BadTable(format!(
                "version {version}, this build reads {VERSION}"
            )));
        }
        if u64_at(header, 24) != Some(0) {
            return Err(bad("reserved header bytes are not 0"));
        }
        Self::new(word(12), word(16), word(20))
            .filter(|l| l.bytes == bytes.len())
            .ok_or_else(|| bad("its sections do not add up to its size"))
    }

    /// The header that declares this layout.
    fn header(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(self.count as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(self.modules as u32).to_le_bytes());
        h[20..24].copy_from_slice(&((self.bytes - self.strings) as u32).to_le_bytes());
        h
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let word = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(word.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let word = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(word.try_into().ok()?))
}

/// A read-only mapping of a sealed table.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only memory of a memfd sealed against writes and size changes
// (checked before mapping): no thread or process can change it, so sharing and sending
// `&[u8]` views of it between threads is sound.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: made by `mmap_read_only` in `KernelSymbols::map`; the views of it borrow
        // `self`, so none is left. An error here only leaks address space.
        let _ = unsafe { sys::munmap(self.ptr, self.len) };
    }
}

/// A table's bytes: built here, or mapped from a shared table.
enum Bytes {
    Owned(Box<[u8]>),
    Mapped(Mapping),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Owned(b) => &b[..],
            // SAFETY: `ptr..ptr + len` is a live read-only mapping (see `Mapping`'s `Send`),
            // unmapped only when `self` is dropped, after this borrow ends; sealed, its
            // contents never change and every page of its length exists.
            Bytes::Mapped(m) => unsafe { std::slice::from_raw_parts(m.ptr.as_ptr(), m.len) },
        }
    }
}

/// The text symbols of a kernel, sorted by address (see the module docs). Cheap to clone: the
/// table is shared.
#[derive(Clone)]
pub struct KernelSymbols {
    bytes: Arc<Bytes>,
    layout: Layout,
}

impl fmt::Debug for KernelSymbols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelSymbols")
            .field("symbols", &self.layout.count)
            .field("shared", &self.is_shared())
            .finish()
    }
}

/// A symbol as the table is built from: address, name, module (empty for the kernel's own).
type Entry<'a> = (u64, &'a str, &'a str);

/// A symbol as the table holds it: address, name, module (`None` for the kernel's own).
type Held<'a> = (u64, &'a [u8], Option<&'a [u8]>);

impl KernelSymbols {
    /// Reads `path` (`/proc/kallsyms`).
    pub fn read(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        let symbols = Self::parse(&text);
        if symbols.is_empty() {
            return Err(Error::Hidden {
                path: path.display().to_string(),
            });
        }
        Ok(symbols)
    }

    /// The text symbols (types `t`, `T`, `w`, `W`) with a nonzero address of a kallsyms text.
    pub fn parse(text: &str) -> Self {
        let mut entries = Vec::new();
        // The string ends are `u32`s: a text that would overflow them is cut there.
        let mut strings = 0usize;
        for line in text.lines() {
            let mut parts = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 || name.len() > MAX_NAME_LEN {
                continue;
            }
            let module = parts.next().unwrap_or("");
            strings += name.len() + module.len();
            if strings > u32::MAX as usize || entries.len() == u32::MAX as usize {
                break;
            }
            entries.push((addr, name, module));
        }
        Self::encode(entries)
    }

    /// The table of `entries` (sorted here, equal addresses kept in their order).
    fn encode(mut entries: Vec<Entry<'_>>) -> Self {
        entries.sort_by_key(|e| e.0);
        let mut modules: Vec<&str> = Vec::new();
        let mut module_ids: HashMap<&str, u32> = HashMap::new();
        let module_of: Vec<u32> = entries
            .iter()
            .map(|&(_, _, module)| {
                if module.is_empty() {
                    return 0;
                }
                *module_ids.entry(module).or_insert_with(|| {
                    modules.push(module);
                    modules.len() as u32
                })
            })
            .collect();
        let names = entries.iter().map(|e| e.1);
        let strings: Vec<&str> = names.chain(modules.iter().copied()).collect();
        let strings_len = strings.iter().map(|s| s.len()).sum();
        // `parse` bounds every count by u32::MAX, so this fits.
        let layout = Layout::new(entries.len(), modules.len(), strings_len)
            .expect("parse bounds the table to u32 counts");
        let mut out = Vec::with_capacity(layout.bytes);
        out.extend_from_slice(&layout.header());
        for e in &entries {
            out.extend_from_slice(&e.0.to_le_bytes());
        }
        let mut end = 0u32;
        for s in &strings {
            end += s.len() as u32;
            out.extend_from_slice(&end.to_le_bytes());
        }
        for m in module_of {
            out.extend_from_slice(&m.to_le_bytes());
        }
        for s in &strings {
            out.extend_from_slice(s.as_bytes());
        }
        debug_assert_eq!(out.len(), layout.bytes);
        Self {
            bytes: Arc::new(Bytes::Owned(out.into_boxed_slice())),
            layout,
        }
    }

    /// A table from its bytes (the layout of the module docs), its header checked.
    pub fn from_table(bytes: Vec<u8>) -> Result<Self, Error> {
        Self::of_bytes(Bytes::Owned(bytes.into_boxed_slice()))
    }

    fn of_bytes(bytes: Bytes) -> Result<Self, Error> {
        let layout = Layout::read(bytes.as_slice())?;
        Ok(Self {
            bytes: Arc::new(bytes),
            layout,
        })
    }

    /// The table's bytes (the layout of the module docs).
    pub fn table(&self) -> &[u8] {
        self.bytes.as_slice()
    }

    /// Whether the table is mapped from a shared one ([`Self::open_shared`]).
    pub fn is_shared(&self) -> bool {
        matches!(*self.bytes, Bytes::Mapped(_))
    }

    /// Symbols kept.
    pub fn len(&self) -> usize {
        self.layout.count
    }

    /// No symbol kept.
    pub fn is_empty(&self) -> bool {
        self.layout.count == 0
    }

    /// Symbol `i`'s address.
    fn address(&self, i: usize) -> Option<u64> {
        if i >= self.layout.count {
            return None;
        }
        u64_at(self.table(), HEADER_LEN + 8 * i)
    }

    /// String `s` (a name, or a module's name after the names), checked against the blob;
    /// `index`: the symbol it is for, for the error.
    fn string(&self, s: usize, index: usize) -> Result<&[u8], Error> {
        let bytes = self.table();
        let end_of = |s: usize| u32_at(bytes, self.layout.ends + 4 * s).map(|e| e as usize);
        let start = match s {
            0 => Some(0),
            _ => end_of(s - 1),
        };
        let blob = &bytes[self.layout.strings.min(bytes.len())..];
        start
            .zip(end_of(s))
            .and_then(|(start, end)| blob.get(start..end))
            .ok_or(Error::BadEntry {
                index,
                why: "its name is not within the string blob",
            })
    }

    /// Symbol `i`: address, name and module (`None` for the kernel's own), each checked.
    fn entry(&self, i: usize) -> Result<Held<'_>, Error> {
        let bad = |why| Error::BadEntry { index: i, why };
        let address = self.address(i).ok_or(bad("no such symbol"))?;
        let name = self.string(i, i)?;
        if name.len() > MAX_NAME_LEN {
            return Err(bad("its name is longer than 255 bytes"));
        }
        let module = match u32_at(self.table(), self.layout.module_of + 4 * i) {
            Some(0) => None,
            Some(k) if (k as usize) <= self.layout.modules => {
                Some(self.string(self.layout.count + k as usize - 1, i)?)
            }
            _ => return Err(bad("its module is not in the table")),
        };
        Ok((address, name, module))
    }

    /// The index of the symbol `ip` falls in: the last one at or below it (`None` below the
    /// first).
    pub fn find(&self, ip: u64) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.layout.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.address(mid).is_some_and(|a| a <= ip) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }

    /// Symbol `i`: its address, the bytes up to the next symbol, and its name (`name
    /// [module]` for a module's).
    pub fn symbol(&self, i: usize) -> Result<KernelSymbol, Error> {
        let (start, name, module) = self.entry(i)?;
        let name = String::from_utf8_lossy(name);
        let name: Arc<str> = match module {
            Some(m) => format!("{name} {}", String::from_utf8_lossy(m)).into(),
            None => name.into(),
        };
        let end = match self.address(i + 1) {
            Some(next) if next < start => {
                return Err(Error::BadEntry {
                    index: i + 1,
                    why: "addresses are not ascending",
                })
            }
            Some(next) => next,
            None => start.saturating_add(LAST_SYMBOL_LEN),
        };
        Ok(KernelSymbol {
            start,
            len: end - start,
            name,
        })
    }

    /// The address of the symbol named `name` (the first one of that name).
    pub fn address_of(&self, name: &str) -> Option<u64> {
        (0..self.layout.count)
            .filter_map(|i| self.entry(i).ok())
            .find(|e| e.1 == name.as_bytes())
            .map(|e| e.0)
    }

    /// The kernel's own symbols moved by `by` (wrapping): the symbols of a kernel as another
    /// boot loaded it (KASLR). Modules load at addresses of their own each boot: their
    /// symbols are dropped (their frames stay addresses).
    pub fn relocate(&mut self, by: u64) {
        if by == 0 {
            return;
        }
        let kept: Vec<(u64, String)> = (0..self.layout.count)
            .filter_map(|i| self.entry(i).ok())
            .filter(|e| e.2.is_none())
            .map(|(address, name, _)| {
                let name = String::from_utf8_lossy(name).into_owned();
                (address.wrapping_add(by), name)
            })
            .collect();
        *self = Self::encode(kept.iter().map(|(a, n)| (*a, n.as_str(), "")).collect());
    }

    /// The table in a sealed memfd, kept close-on-exec by this process: other processes map
    /// it with [`Self::open_shared`] through `/proc/PID/fd/N`, which the kernel opens only for
    /// a process that may read this one's descriptors (ptrace read access: the same user, or
    /// root), so a descendant that dropped its privileges cannot read kernel addresses that
    /// `/proc/kallsyms` hides from it.
    pub fn share(&self) -> Result<SharedSymbols, Error> {
        let pid = std::process::id();
        let start_time = super::procfs::start_time(pid).ok_or_else(|| {
            Error::BadReference(format!(
                "/proc/{pid}/stat unreadable: no start time to name"
            ))
        })?;
        let fd = sys::memfd_create(
            c"fxtrace-kernel-symbols",
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )?;
        let mut file = std::fs::File::from(fd);
        file.write_all(self.table()).map_err(|source| SysError {
            op: "write",
            source,
        })?;
        let fd = OwnedFd::from(file);
        sys::add_seals(fd.as_fd(), REQUIRED_SEALS | libc::F_SEAL_SEAL)?;
        let stat = sys::fstat_raw(fd.as_raw_fd())?;
        Ok(SharedSymbols {
            reference: SharedSymbolsRef {
                pid,
                start_time,
                fd: fd.as_raw_fd(),
                dev: stat.st_dev,
                inode: stat.st_ino,
            },
            fd,
        })
    }

    /// The table `reference` names, mapped from the sharing process's descriptor
    /// (`/proc/PID/fd/N`), for a process that may see kernel addresses. Nothing is opened for
    /// reading before the process is shown to be the one that shared it (its start time) and
    /// the file to be that table: the path is opened `O_PATH` (which opens no device, no FIFO,
    /// no file system's file: it only holds the inode the link names, so that everything
    /// after is about that one file), its name read from `/proc/self/fd` (a memfd named as the
    /// recorder names it: nothing of another file system is opened or asked its attributes),
    /// its owner,
    /// device and inode checked, and only then is that inode opened for reading, non-blocking
    /// and without becoming a controlling terminal, and checked again before it is mapped
    /// (see the module docs). The error says why it is not the table.
    pub fn open_shared(reference: &SharedSymbolsRef) -> Result<Self, Error> {
        use std::os::unix::fs::OpenOptionsExt;
        let pid = reference.pid;
        let path = format!("/proc/{pid}/fd/{}", reference.fd);
        let not = |why: String| Error::NotTheTable {
            what: path.clone(),
            why,
        };
        match super::procfs::start_time(pid) {
            Some(t) if t == reference.start_time => {}
            Some(_) => {
                return Err(not(format!(
                    "process {pid} is another process now (the recorder ended; or this \
                     process is in another time namespace)"
                )))
            }
            None => {
                return Err(not(format!(
                    "no process {pid} here (the recorder ended, or this is another pid namespace)"
                )))
            }
        }
        if kernel_addresses_hidden() {
            return Err(not(
                "this process sees no kernel addresses in /proc/kallsyms (kernel.kptr_restrict): \
                 the recorder's table is not for it"
                    .into(),
            ));
        }
        let held = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&path)
            .map_err(|e| not(e.to_string()))?;
        let here = format!("/proc/self/fd/{}", held.as_raw_fd());
        let name = std::fs::read_link(&here).map_err(|e| not(e.to_string()))?;
        if !name.as_os_str().as_encoded_bytes().starts_with(MEMFD_LINK) {
            return Err(not(format!("another file ({})", name.display())));
        }
        let stat = sys::fstat_raw(held.as_raw_fd()).map_err(|e| not(e.to_string()))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if stat.st_uid != 0 && stat.st_uid != me {
            return Err(not(format!(
                "a memfd of user {} (only root's or this user's are taken)",
                stat.st_uid
            )));
        }
        reference.names(&stat).map_err(not)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&here)
            .map_err(|e| not(e.to_string()))?;
        Self::map(file.as_fd(), reference).map_err(|e| match e {
            Error::NotTheTable { why, .. } => not(why),
            e => e,
        })
    }

    /// Maps `fd`, this process's own descriptor, once it is shown to be a sealed regular file
    /// of the device and inode `reference` names.
    fn map(fd: BorrowedFd<'_>, reference: &SharedSymbolsRef) -> Result<Self, Error> {
        let not = |why: String| Error::NotTheTable {
            what: format!("descriptor {}", fd.as_raw_fd()),
            why,
        };
        let stat = sys::fstat_raw(fd.as_raw_fd()).map_err(|e| not(e.to_string()))?;
        reference.names(&stat).map_err(not)?;
        let seals = sys::get_seals(fd).map_err(|e| not(format!("not a memfd ({e})")))?;
        if seals & REQUIRED_SEALS != REQUIRED_SEALS {
            return Err(not(format!(
                "not sealed against changes (seals {seals:#x}, {REQUIRED_SEALS:#x} needed)"
            )));
        }
        let size = stat.st_size as u64;
        if !(HEADER_LEN as u64..=MAX_TABLE_LEN).contains(&size) {
            return Err(Error::BadTable(format!(
                "{size} bytes, not within {HEADER_LEN}..={MAX_TABLE_LEN}"
            )));
        }
        let len = size as usize;
        // The mapping outlives `fd`: it keeps the file, which its seals keep as it is.
        let ptr = sys::mmap_read_only(fd, len)?;
        Self::of_bytes(Bytes::Mapped(Mapping { ptr, len }))
    }
}

/// A table in a sealed memfd ([`KernelSymbols::share`]), and what names it to other
/// processes.
#[derive(Debug)]
pub struct SharedSymbols {
    fd: OwnedFd,
    reference: SharedSymbolsRef,
}

impl SharedSymbols {
    /// The memfd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What names it (the value of [`SHARED_SYMBOLS_ENV`]).
    pub fn reference(&self) -> SharedSymbolsRef {
        self.reference
    }
}

/// What names a shared table: the process that shares it (its pid and start time, which a
/// reused pid does not have), the descriptor number it holds the table under, and the
/// table's device and inode. Written `PID:START:FD:DEV:INODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedSymbolsRef {
    /// The sharing process.
    pub pid: u32,
    /// Its start time (`/proc/PID/stat` field 22).
    pub start_time: u64,
    /// The descriptor number it holds the table under.
    pub fd: RawFd,
    /// The memfd's device.
    pub dev: u64,
    /// The memfd's inode number.
    pub inode: u64,
}

impl SharedSymbolsRef {
    /// Whether `stat` is of the file this names (a regular file of its device and inode);
    /// else what it is instead.
    fn names(&self, stat: &libc::stat) -> Result<(), String> {
        if stat.st_mode & libc::S_IFMT == libc::S_IFREG
            && stat.st_dev == self.dev
            && stat.st_ino == self.inode
        {
            return Ok(());
        }
        Err(format!(
            "another file (device {}, inode {})",
            stat.st_dev, stat.st_ino
        ))
    }
}

impl fmt::Display for SharedSymbolsRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}:{}",
            self.pid, self.start_time, self.fd, self.dev, self.inode
        )
    }
}

impl FromStr for SharedSymbolsRef {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::BadReference(s.to_owned());
        let fields: Vec<&str> = s.trim().split(':').collect();
        let [pid, start_time, fd, dev, inode] = fields[..] else {
            return Err(bad());
        };
        Ok(Self {
            pid: pid.parse().ok().filter(|&p| p != 0).ok_or_else(bad)?,
            start_time: start_time.parse().map_err(|_| bad())?,
            fd: fd
                .parse()
                .ok()
                .filter(|&fd: &RawFd| fd >= 0)
                .ok_or_else(bad)?,
            dev: dev.parse().map_err(|_| bad())?,
            inode: inode.parse().map_err(|_| bad())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TEXT: &str = "\
ffffffff8143fc90 T futex_wait
ffffffff81000000 T _stext
ffffffff821f8540 t __schedule
ffffffff821f8000 d some_data
0000000000000000 A fixed_percpu_data
ffffffffc0a01000 t kvm_vcpu_block\t[kvm]
ffffffffc0a02000 t kvm_arch_vcpu_ioctl\t[kvm]
ffffffffc0b00000 t ext4_sync_file\t[ext4]
";

    /// Every lookup of `s` over addresses around its symbols: (index, symbol) of each.
    fn answers(s: &KernelSymbols) -> Vec<Option<(usize, KernelSymbol)>> {
        let probes = [
            0,
            0xffff_ffff_8000_0000,
            0xffff_ffff_8100_0000,
            0xffff_ffff_8143_fca0,
            0xffff_ffff_821f_8550,
            0xffff_ffff_c0a0_1010,
            0xffff_ffff_c0a0_2000,
            0xffff_ffff_c0b0_0fff,
            u64::MAX,
        ];
        probes
            .iter()
            .map(|&ip| s.find(ip).map(|i| (i, s.symbol(i).unwrap())))
            .collect()
    }

    #[test]
    fn kallsyms_text_symbols_sorted_with_their_modules() {
        let s = KernelSymbols::parse(TEXT);
        assert_eq!(s.len(), 6, "text symbols only");
        assert!(!s.is_shared());
        let sym = s.symbol(s.find(0xffff_ffff_8143_fca0).unwrap()).unwrap();
        assert_eq!(
            (sym.start, &*sym.name),
            (0xffff_ffff_8143_fc90, "futex_wait")
        );
        assert_eq!(sym.len, 0xffff_ffff_821f_8540 - 0xffff_ffff_8143_fc90);
        assert_eq!(s.find(0xffff_ffff_8000_0000), None);
        let kvm = s.symbol(s.find(0xffff_ffff_c0a0_1010).unwrap()).unwrap();
        assert_eq!((&*kvm.name, kvm.len), ("kvm_vcpu_block [kvm]", 0x1000));
        let ext4 = s.symbol(s.find(0xffff_ffff_c0b0_0010).unwrap()).unwrap();
        assert_eq!(
            (&*ext4.name, ext4.len),
            ("ext4_sync_file [ext4]", LAST_SYMBOL_LEN),
            "the last one covers a page"
        );
        assert!(matches!(s.symbol(6), Err(Error::BadEntry { index: 6, .. })));
        // Two modules, each name stored once.
        assert_eq!(s.layout.modules, 2);
        let hidden = KernelSymbols::parse("0000000000000000 T futex_wait\n");
        assert!(hidden.is_empty());
    }

    #[test]
    fn the_table_read_back_gives_the_parsed_answers() {
        let parsed = KernelSymbols::parse(TEXT);
        let decoded = KernelSymbols::from_table(parsed.table().to_vec()).unwrap();
        assert_eq!(decoded.layout, parsed.layout);
        assert_eq!(answers(&decoded), answers(&parsed));
        assert_eq!(
            decoded.address_of("__schedule"),
            Some(0xffff_ffff_821f_8540)
        );
        // The same through a sealed memfd, mapped (the descriptor this process holds).
        let shared = parsed.share().unwrap();
        let reference: SharedSymbolsRef = shared.reference().to_string().parse().unwrap();
        assert_eq!(reference, shared.reference());
        let mapped = KernelSymbols::open_shared(&reference).unwrap();
        assert!(mapped.is_shared());
        assert_eq!(answers(&mapped), answers(&parsed));
        assert_eq!(mapped.table(), parsed.table());
        let seals = sys::get_seals(shared.fd()).unwrap();
        assert_eq!(seals & REQUIRED_SEALS, REQUIRED_SEALS);
        // The real kallsyms, where it can be read, the same way.
        if let Ok(real) = KernelSymbols::read(Path::new("/proc/kallsyms")) {
            let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
            let mapped = KernelSymbols::open_shared(&real.share().unwrap().reference());
            let mapped = mapped.unwrap();
            assert_eq!(mapped.len(), real.len());
            for line in text.lines().filter(|l| l.contains(" T ")).step_by(97) {
                let addr = u64::from_str_radix(&line[..16], 16).unwrap();
                let i = mapped.find(addr).unwrap();
                assert_eq!(mapped.symbol(i).unwrap().start, addr, "{line}");
                assert_eq!(real.symbol(i).unwrap(), mapped.symbol(i).unwrap());
            }
        }
    }

    #[test]
    fn kallsyms_of_another_boot_moved_without_their_modules() {
        let mut s = KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81000100 T hot\nffffffffc0a01000 t m\t[kvm]\n",
        );
        assert_eq!(s.address_of("hot"), Some(0xffff_ffff_8100_0100));
        assert_eq!(s.address_of("absent"), None);
        s.relocate(0);
        assert_eq!(s.len(), 3, "not moved: kept whole");
        s.relocate((-0x10_0000i64) as u64);
        assert_eq!(s.len(), 2, "the module's symbol dropped");
        let hot = s.symbol(s.find(0xffff_ffff_80f0_0110).unwrap()).unwrap();
        assert_eq!((&*hot.name, hot.start), ("hot", 0xffff_ffff_80f0_0100));
    }

    #[test]
    fn references_parse_and_refuse_garbage() {
        let r: SharedSymbolsRef = "1234:555:7:64:99887766".parse().unwrap();
        assert_eq!(
            (r.pid, r.start_time, r.fd, r.dev, r.inode),
            (1234, 555, 7, 64, 99_887_766)
        );
        assert_eq!(r.to_string(), "1234:555:7:64:99887766");
        for bad in [
            "",
            "7",
            "7:1:1",
            "1:1:-1:1:1",
            "0:1:7:1:1",
            "1:1:7:1:1:1",
            "a:1:7:1:1",
            "1:1:7:1:x",
        ] {
            assert!(
                matches!(bad.parse::<SharedSymbolsRef>(), Err(Error::BadReference(_))),
                "{bad:?}"
            );
        }
    }

    fn not_the_table(r: &SharedSymbolsRef) -> String {
        match KernelSymbols::open_shared(r) {
            Err(Error::NotTheTable { why, .. }) => why,
            other => panic!("{r}: {other:?}"),
        }
    }

    /// A sealed memfd named as the recorder names it, holding `bytes`, sealed with `seals`.
    fn memfd(bytes: &[u8], seals: libc::c_int) -> OwnedFd {
        let fd = sys::memfd_create(c"fxtrace-kernel-symbols", libc::MFD_ALLOW_SEALING).unwrap();
        std::fs::File::from(fd.try_clone().unwrap())
            .write_all(bytes)
            .unwrap();
        if seals != 0 {
            sys::add_seals(fd.as_fd(), seals).unwrap();
        }
        fd
    }

    #[test]
    fn zero_addresses_say_kallsyms_is_hidden() {
        assert_eq!(
            shows_zero_address(b"0000000000000000 T _stext\n"),
            Some(true)
        );
        assert_eq!(
            shows_zero_address(b"ffffffff81000000 T _stext\n"),
            Some(false)
        );
        // Absolute per-CPU symbols at 0 come first on many kernels, for root too: more than
        // 4 KiB of them on some.
        let mut absolute = Vec::new();
        for i in 0..200 {
            absolute.extend_from_slice(format!("0000000000000000 A per_cpu_{i}\n").as_bytes());
        }
        let mut visible = absolute.clone();
        visible.extend_from_slice(b"ffffffff81000000 T _stext\n");
        assert!(visible.len() > 4096);
        assert_eq!(shows_zero_address(&visible), Some(false));
        let mut hidden = absolute.clone();
        hidden.extend_from_slice(b"0000000000000000 T _stext\n");
        assert_eq!(shows_zero_address(&hidden), Some(true));
        assert_eq!(shows_zero_address(&absolute), None, "no text symbol");
        assert_eq!(shows_zero_address(TEXT.as_bytes()), Some(false));
    }

    /// This process shares; each reference below names something else under its pid.
    #[test]
    fn what_is_not_the_table_is_refused_and_nothing_is_opened_blindly() {
        if kernel_addresses_hidden() {
            crate::test_support::skip(
                crate::test_support::Requirement::Root,
                "/proc/kallsyms hides addresses from this user: no table is taken",
            );
            return;
        }
        let parsed = KernelSymbols::parse(TEXT);
        let shared = parsed.share().unwrap();
        let good = shared.reference();
        assert_eq!(good.pid, std::process::id());
        assert_eq!(
            answers(&KernelSymbols::open_shared(&good).unwrap()),
            answers(&parsed)
        );
        let at = |fd: RawFd| {
            let st = sys::fstat_raw(fd).unwrap();
            SharedSymbolsRef {
                fd,
                dev: st.st_dev,
                inode: st.st_ino,
                ..good
            }
        };
        // A number this process does not have.
        let closed = SharedSymbolsRef { fd: 9999, ..good };
        assert!(not_the_table(&closed).contains("No such file"));
        // Another file under the number, even given its own device and inode.
        let file = tempfile::tempfile().unwrap();
        assert!(not_the_table(&SharedSymbolsRef {
            fd: file.as_raw_fd(),
            ..good
        })
        .contains("another file"));
        assert!(not_the_table(&at(file.as_raw_fd())).contains("another file"));
        // A FIFO nobody writes to, held as O_PATH: never opened for reading (a blocking open
        // would wait for a writer forever; any open would make a writer's non-blocking open
        // succeed): refused at once, and still without a reader after.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let held = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(&fifo)
                .unwrap()
        };
        let started = std::time::Instant::now();
        assert!(not_the_table(&at(held.as_raw_fd())).contains("another file"));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let writer = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo)
        };
        assert_eq!(
            writer.map(|_| ()).map_err(|e| e.raw_os_error()),
            Err(Some(libc::ENXIO)),
            "no reader ever opened the FIFO"
        );
        // A memfd named as the table, not sealed.
        let writable = memfd(parsed.table(), 0);
        assert!(not_the_table(&at(writable.as_raw_fd())).contains("not sealed"));
        // A sealed one that is not a table.
        let mut bytes = parsed.table().to_vec();
        bytes[0] = b'X';
        assert!(matches!(
            KernelSymbols::from_table(bytes.clone()),
            Err(Error::BadTable(_))
        ));
        let forged = memfd(&bytes, REQUIRED_SEALS);
        assert!(matches!(
            KernelSymbols::open_shared(&at(forged.as_raw_fd())),
            Err(Error::BadTable(why)) if why.contains("magic")
        ));
        // A table of another user (root can make one: the test changes its owner).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = memfd(parsed.table(), REQUIRED_SEALS);
            nix::unistd::fchown(
                &theirs,
                Some(nix::unistd::Uid::from_raw(65534)),
                Some(nix::unistd::Gid::from_raw(65534)),
            )
            .unwrap();
            assert!(not_the_table(&at(theirs.as_raw_fd())).contains("user 65534"));
        }
        // Another process under the pid (another start time), or no process.
        let reused_pid = SharedSymbolsRef {
            start_time: good.start_time + 1,
            ..good
        };
        assert!(not_the_table(&reused_pid).contains("another process"));
        let gone = SharedSymbolsRef {
            pid: 1 << 23,
            ..good
        };
        assert!(not_the_table(&gone).contains("no process"));
    }

    /// The number swapped between the table and a FIFO while the table is opened through
    /// it: whatever the timing, the FIFO is never opened for reading (a writer's
    /// non-blocking open never finds a reader).
    #[test]
    fn a_file_swapped_in_after_the_checks_is_not_opened() {
        use std::os::unix::fs::OpenOptionsExt;
        use std::sync::atomic::{AtomicBool, Ordering};
        let table = KernelSymbols::parse(TEXT).share().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let held = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&fifo)
            .unwrap();
        // A number nothing else of the test binary uses (the lowest free one from 777).
        // SAFETY: F_DUPFD makes a new descriptor of an open one; it is closed at the end.
        let number: RawFd = unsafe { libc::fcntl(held.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 777) };
        assert!(number >= 777);
        let reference = SharedSymbolsRef {
            fd: number,
            ..table.reference()
        };
        let (table_fd, fifo_fd) = (table.fd().as_raw_fd(), held.as_raw_fd());
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let done = done.clone();
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    for from in [table_fd, fifo_fd] {
                        // SAFETY: dup2 onto a number this test owns; both sources stay open
                        // until the thread is joined.
                        unsafe { libc::dup2(from, number) };
                    }
                }
            })
        };
        // A writer's non-blocking open succeeds only while a reader has the FIFO open.
        let prober = {
            let (done, fifo) = (done.clone(), fifo.clone());
            std::thread::spawn(move || {
                let mut readers = 0;
                while !done.load(Ordering::Relaxed) {
                    let writer = std::fs::OpenOptions::new()
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(&fifo);
                    readers += usize::from(writer.is_ok());
                }
                readers
            })
        };
        let mut opened = 0;
        let until = std::time::Instant::now() + std::time::Duration::from_millis(700);
        while std::time::Instant::now() < until {
            opened += usize::from(KernelSymbols::open_shared(&reference).is_ok());
        }
        done.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        let readers = prober.join().unwrap();
        // SAFETY: closes the number the test made.
        unsafe { libc::close(number) };
        assert_eq!(readers, 0, "the FIFO was opened for reading");
        println!("opened the table {opened} times");
    }

    #[test]
    fn the_table_is_read_through_the_sharing_process_while_it_lives() {
        use std::os::unix::process::CommandExt;
        let parsed = KernelSymbols::parse(TEXT);
        let shared = parsed.share().unwrap();
        // A process holding the table under a number this one does not use.
        const NUMBER: RawFd = 917;
        let raw = shared.fd().as_raw_fd();
        let mut holder = std::process::Command::new("sleep");
        holder.arg("10");
        // SAFETY: dup2 is async-signal-safe and takes integers only.
        unsafe {
            holder.pre_exec(move || match libc::dup2(raw, NUMBER) {
                -1 => Err(io::Error::last_os_error()),
                _ => Ok(()),
            });
        }
        let mut holder = holder.spawn().unwrap();
        let reference = SharedSymbolsRef {
            pid: holder.id(),
            start_time: super::super::procfs::start_time(holder.id()).unwrap(),
            fd: NUMBER,
            ..shared.reference()
        };
        let opened = KernelSymbols::open_shared(&reference);
        let gone = {
            let _ = holder.kill();
            let _ = holder.wait();
            KernelSymbols::open_shared(&reference)
        };
        assert_eq!(answers(&opened.unwrap()), answers(&parsed));
        match gone {
            Err(Error::NotTheTable { why, .. }) => assert!(why.contains("no process"), "{why}"),
            other => panic!("the holder is gone: {other:?}"),
        }
    }

    /// What keeps kernel addresses from a descendant that dropped its privileges: the kernel
    /// opens `/proc/PID/fd/N` only for a process that may read PID's descriptors.
    #[test]
    fn another_user_cannot_open_the_table() {
        use crate::test_support::{skip, Requirement};
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skip(
                Requirement::Root,
                "needs root to run a command as another user",
            );
            return;
        }
        let shared = KernelSymbols::parse(TEXT).share().unwrap();
        let path = format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            shared.fd().as_raw_fd()
        );
        let run = |uid: Option<u32>| {
            use std::os::unix::process::CommandExt;
            let mut cat = std::process::Command::new("cat");
            cat.arg(&path).stdout(std::process::Stdio::piped());
            if let Some(uid) = uid {
                cat.uid(uid).gid(uid);
            }
            cat.output().unwrap()
        };
        let root = run(None);
        assert!(root.status.success(), "root reads it");
        assert_eq!(&root.stdout[..8], &MAGIC[..]);
        let nobody = run(Some(65534));
        assert!(!nobody.status.success(), "uid 65534 read the table");
        assert!(nobody.stdout.is_empty());
    }

    /// Looks every symbol of `s` up, in every way, without panicking.
    fn use_all(s: &mut KernelSymbols) {
        for i in 0..s.len().min(64) {
            let _ = s.symbol(i);
            if let Ok(sym) = s.symbol(i) {
                let _ = s.find(sym.start);
            }
        }
        let _ = s.find(0);
        let _ = s.find(u64::MAX);
        let _ = s.address_of("futex_wait");
        s.relocate(0x1000);
        let _ = s.symbol(0);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_are_an_error_or_a_table_never_a_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            if let Ok(mut s) = KernelSymbols::from_table(bytes) {
                use_all(&mut s);
            }
        }

        #[test]
        fn corrupted_tables_are_an_error_or_a_table_never_a_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let mut bytes = KernelSymbols::parse(TEXT).table().to_vec();
            for (at, value) in flips {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            if truncate {
                bytes.truncate(cut.index(bytes.len()));
            }
            match KernelSymbols::from_table(bytes) {
                Ok(mut s) => use_all(&mut s),
                Err(e) => prop_assert!(matches!(e, Error::BadTable(_)), "{e}"),
            }
        }

        #[test]
        fn a_bad_entry_is_a_typed_error(index in 0usize..6, end in any::<u32>(), module in 3u32..) {
            let good = KernelSymbols::parse(TEXT);
            let l = good.layout;
            let mut bytes = good.table().to_vec();
            bytes[l.ends + 4 * index..][..4].copy_from_slice(&end.to_le_bytes());
            let s = KernelSymbols::from_table(bytes).unwrap();
            // The entry stays readable only if its name still lies within the blob.
            if let Err(e) = s.symbol(index) {
                prop_assert!(matches!(e, Error::BadEntry { .. }), "{e}");
            }
            let mut bytes = good.table().to_vec();
            bytes[l.module_of + 4 * index..][..4].copy_from_slice(&module.to_le_bytes());
            let s = KernelSymbols::from_table(bytes).unwrap();
            let refused = matches!(s.symbol(index), Err(Error::BadEntry { index: i, .. }) if i == index);
            prop_assert!(refused, "module {} of entry {}", module, index);
        }
    }

    #[test]
    fn wrong_magic_version_and_sizes_are_named() {
        let good = KernelSymbols::parse(TEXT).table().to_vec();
        let why = |bytes: Vec<u8>| match KernelSymbols::from_table(bytes) {
            Err(Error::BadTable(why)) => why,
            other => panic!("{other:?}"),
        };
        assert!(why(Vec::new()).contains("shorter than its header"));
        let mut b = good.clone();
        b[0] = b'f';
        assert!(why(b).contains("magic"));
        let mut b = good.clone();
        b[8] = 2;
        assert!(why(b).contains("version 2"));
        let mut b = good.clone();
        b[12] = 200;
        assert!(why(b).contains("do not add up"));
        let mut b = good.clone();
        b.push(0);
        assert!(why(b).contains("do not add up"));
        let mut b = good.clone();
        b.pop();
        assert!(why(b).contains("do not add up"));
        let mut b = good;
        b[24] = 1;
        assert!(why(b).contains("reserved"));
    }
}

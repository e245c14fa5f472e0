//! Address → function and file:line, from ELF binaries named by the trace's mappings or
//! given by the user.
//!
//! Function names come from the ELF symbol table (`.symtab`, else `.dynsym`, and the
//! `.symtab` of the file's detached debug file when `/usr/lib/debug/.build-id` has one for
//! its build-id, as gdb and perf find it: `libc6-dbg` names glibc's internal functions) through the
//! `object` crate; file and line from DWARF through `addr2line`, when the binary has debug
//! information.
//!
//! # Mappings from the trace
//!
//! A trace recorded by fxtrace carries the executable mappings of the traced processes
//! (`"fxtrace:mmap"` blobs, [`fxtrace_format::mmap`]): start, length, file offset (`pgoff`),
//! path and build-id. For an address inside a [`Mapping`], its file offset is
//! `address - start + pgoff`; the ELF `PT_LOAD` segment whose file range holds that offset
//! gives the file (link-time) address `p_vaddr + (offset - p_offset)`. That is right for
//! non-PIE executables (bias 0), PIE executables and shared libraries alike, whatever the
//! segment layout. [`Symbolizer::load_mapped`] opens each mapped file once; a file whose
//! build-id differs from the one recorded is not used (its addresses then read
//! `name+0xOFFSET`, the file offset), nor is a file that is missing or not ELF.
//!
//! # Binaries given by hand
//!
//! `--binary PATH` (a non-PIE executable, which runs at the addresses in its file) or
//! `PATH@0xBASE` (a position-independent one, `BASE` the start of its first mapping, the
//! first line naming the file in `/proc/PID/maps`, offset 0; the load bias is then `BASE`
//! minus the page-aligned lowest segment address) override the trace's mappings, and serve
//! traces without them. Addresses that neither covers are printed as the raw address.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::str::FromStr;

use object::{Object, ObjectKind, ObjectSection, ObjectSegment, ObjectSymbol, SegmentFlags};

/// Page size used to align the lowest segment address when computing a load bias.
const PAGE: u64 = 4096;
/// ELF segment flag `PF_X`: executable.
const PF_X: u32 = 1;

/// A binary given on the command line: `PATH` or `PATH@0xBASE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinarySpec {
    /// The ELF file.
    pub path: PathBuf,
    /// Where it was loaded (start of its first mapping), for PIE binaries.
    pub base: Option<u64>,
}

/// Why a binary spec or a binary could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SymbolizeError {
    /// The text after `@` is not an address.
    #[error("{spec:?}: the load base after '@' must be an address like 0x7f0000000000")]
    BadBase {
        /// The spec as given.
        spec: String,
    },
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not an object file `object` can read.
    #[error("{}: not a readable ELF file: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: object::Error,
    },
}

fn parse_address(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

impl FromStr for BinarySpec {
    type Err = SymbolizeError;

    /// `PATH@0xBASE` (hex, or decimal without `0x`) or `PATH`. A path that itself contains
    /// `@` followed by something that is not an address is taken whole, unless that
    /// something starts with `0x`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((path, base)) = s.rsplit_once('@') {
            if let Some(base) = parse_address(base) {
                if !path.is_empty() {
                    return Ok(BinarySpec {
                        path: PathBuf::from(path),
                        base: Some(base),
                    });
                }
            }
            if base.starts_with("0x") || base.starts_with("0X") || path.is_empty() {
                return Err(SymbolizeError::BadBase {
                    spec: s.to_string(),
                });
            }
        }
        Ok(BinarySpec {
            path: PathBuf::from(s),
            base: None,
        })
    }
}

/// What was loaded from a binary, for the report's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryInfo {
    /// The file.
    pub path: PathBuf,
    /// Position-independent (ELF type `ET_DYN`): needs a base to match run-time addresses.
    pub position_independent: bool,
    /// Run-time address minus file address.
    pub bias: u64,
    /// Function symbols found.
    pub functions: usize,
    /// DWARF line information present and readable.
    pub debug_info: bool,
    /// Something the user should know (a PIE without base, unreadable DWARF).
    pub warning: Option<String>,
}

/// A function symbol: file address, size (0 = unknown), demangled name.
#[derive(Debug)]
struct Function {
    address: u64,
    size: u64,
    name: String,
}

type Dwarf = addr2line::Context<gimli::EndianRcSlice<gimli::RunTimeEndian>>;

/// A `PT_LOAD` segment: link-time address, file offset, bytes in the file.
#[derive(Debug, Clone, Copy)]
struct LoadSegment {
    address: u64,
    offset: u64,
    file_size: u64,
}

struct Binary {
    info: BinaryInfo,
    /// Executable segments, file addresses `[start, end)`.
    segments: Vec<(u64, u64)>,
    /// Every segment with file contents, for file offset → file address.
    loads: Vec<LoadSegment>,
    /// The ELF build-id, if the file has one.
    build_id: Option<Vec<u8>>,
    functions: Vec<Function>,
    dwarf: Option<Dwarf>,
}

impl fmt::Debug for Binary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Binary")
            .field("info", &self.info)
            .field("segments", &self.segments)
            .field("functions", &self.functions.len())
            .finish_non_exhaustive()
    }
}

/// Where an address is: the binary, the function and offset, the source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The run-time address.
    pub address: u64,
    /// Name of the binary's file (its last path component).
    pub binary: String,
    /// Address in the file (run-time address minus bias).
    pub file_address: u64,
    /// The enclosing function and the offset into it.
    pub function: Option<(String, u64)>,
    /// Source file and line, from DWARF.
    pub source: Option<(String, u32)>,
}

impl fmt::Display for Location {
    /// `main+0x16 (t.c:7)`, `main (t.c:3)` at offset 0, or `prog+0x1139` without a
    /// symbol; the source file as DWARF names it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.function {
            Some((name, 0)) => f.write_str(name)?,
            Some((name, offset)) => write!(f, "{name}+{offset:#x}")?,
            None => write!(f, "{}+{:#x}", self.binary, self.file_address)?,
        }
        if let Some((file, line)) = &self.source {
            write!(f, " ({file}:{line})")?;
        }
        Ok(())
    }
}

/// An executable mapping of a traced process, as the trace recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The process.
    pub pid: u32,
    /// When it was seen, in nanoseconds.
    pub time_ns: u64,
    /// First mapped address.
    pub start: u64,
    /// Mapped bytes.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The file's build-id, if recorded.
    pub build_id: Option<Vec<u8>>,
    /// The file's path, or a name like `[vdso]` or `//anon`.
    pub path: PathBuf,
}

impl Mapping {
    /// Whether `address` is inside the mapping.
    pub fn contains(&self, address: u64) -> bool {
        address >= self.start && address - self.start < self.len
    }

    /// The file offset of `address` (inside the mapping).
    pub fn file_offset(&self, address: u64) -> u64 {
        address.wrapping_sub(self.start).wrapping_add(self.pgoff)
    }

    /// A file on disk (an absolute path, not a kernel name like `[vdso]` or perf's `//anon`).
    pub fn is_file(&self) -> bool {
        let p = self.path.as_os_str().as_encoded_bytes();
        p.starts_with(b"/") && !p.starts_with(b"//")
    }
}

/// What became of a mapped file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappedFile {
    /// Read: its symbols name the mapping's addresses.
    Loaded {
        /// Function symbols found.
        functions: usize,
        /// DWARF line information present.
        debug_info: bool,
    },
    /// The file could not be opened (gone, another mount namespace, not permitted).
    Unreadable(String),
    /// Not an ELF file `object` reads.
    NotElf(String),
    /// Its build-id is not the one the trace recorded: another build of the file. Not used.
    BuildIdMismatch {
        /// The trace's.
        recorded: Vec<u8>,
        /// The file's (`None`: it has none).
        found: Option<Vec<u8>>,
    },
}

/// Resolves run-time addresses against the binaries added to it and the mapped files
/// loaded into it.
#[derive(Debug)]
pub struct Symbolizer {
    binaries: Vec<Binary>,
    /// Mapped files, by path and recorded build-id, in the order loaded.
    mapped: Vec<(PathBuf, Option<Vec<u8>>, MappedFile)>,
    mapped_index: HashMap<(PathBuf, Option<Vec<u8>>), usize>,
    /// The same, by file (device and inode): a file named by several paths (`a/../b`, a
    /// link) is read once.
    mapped_by_file: HashMap<(u64, u64, Option<Vec<u8>>), usize>,
    /// Binaries of the `Loaded` mapped files.
    mapped_binaries: HashMap<usize, Binary>,
    /// Where detached debug files are looked up by build-id ([`DEBUG_FILE_DIR`]).
    debug_dir: PathBuf,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer {
            binaries: Vec::new(),
            mapped: Vec::new(),
            mapped_index: HashMap::new(),
            mapped_by_file: HashMap::new(),
            mapped_binaries: HashMap::new(),
            debug_dir: PathBuf::from(DEBUG_FILE_DIR),
        }
    }
}

fn demangle(name: &str) -> String {
    // Rust's mangling first: its legacy scheme is C++'s `_ZN…E` with Rust escapes, which
    // the C++ demangler reads only half-way. `{:#}` leaves out the hash.
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        return format!("{rust:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = symbol.demangle(&cpp_demangle::DemangleOptions::default()) {
                return text;
            }
        }
    }
    name.to_string()
}

fn load_dwarf(file: &object::File<'_>) -> Result<Option<Dwarf>, gimli::Error> {
    if file.section_by_name(".debug_info").is_none() {
        return Ok(None);
    }
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let dwarf = gimli::Dwarf::load(|id: gimli::SectionId| -> Result<_, gimli::Error> {
        let data: Cow<'_, [u8]> = match file.section_by_name(id.name()) {
            Some(section) => section.uncompressed_data().map_err(|_| gimli::Error::Io)?,
            None => Cow::Borrowed(&[]),
        };
        Ok(gimli::EndianRcSlice::new(Rc::from(&*data), endian))
    })?;
    addr2line::Context::from_dwarf(dwarf).map(Some)
}

/// Largest binary read to name addresses, in bytes: a larger file is reported, not read.
pub const MAX_BINARY_BYTES: u64 = 4 << 30;

/// The bytes of the binary at `path`: a regular file of at most [`MAX_BINARY_BYTES`] (a
/// trace names the mapped files, and a crafted one can name `/dev/zero` or a FIFO: those are
/// refused without blocking, and nothing larger than the bound is read).
pub fn read_binary(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    // Looked at before it is opened (opening some devices has effects), and again after.
    if !std::fs::metadata(path)?.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() > MAX_BINARY_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} bytes, more than the {MAX_BINARY_BYTES} read to name addresses",
                meta.len()
            ),
        ));
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_BINARY_BYTES).read_to_end(&mut data)?;
    Ok(data)
}

impl Symbolizer {
    /// No binaries: every address stays unsymbolized.
    pub fn new() -> Self {
        Symbolizer::default()
    }

    /// Look detached debug files up under `dir` instead of [`DEBUG_FILE_DIR`].
    pub fn with_debug_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.debug_dir = dir.into();
        self
    }

    /// Reads and adds a binary.
    pub fn add(&mut self, spec: &BinarySpec) -> Result<&BinaryInfo, SymbolizeError> {
        let data = read_binary(&spec.path).map_err(|source| SymbolizeError::Read {
            path: spec.path.clone(),
            source,
        })?;
        self.add_bytes(&spec.path, &data, spec.base)
    }

    /// Adds a binary from its bytes (`path` names it in output).
    pub fn add_bytes(
        &mut self,
        path: &Path,
        data: &[u8],
        base: Option<u64>,
    ) -> Result<&BinaryInfo, SymbolizeError> {
        let binary = Binary::parse(path, data, base)?;
        self.binaries.push(binary);
        Ok(&self.binaries[self.binaries.len() - 1].info)
    }

    /// Opens the file of `mapping` (once per path and recorded build-id) so that
    /// [`Self::locate_mapped`] can name its addresses; says what became of it. Kernel names
    /// (`[vdso]`, `//anon`) are not files and give `None`.
    pub fn load_mapped(&mut self, mapping: &Mapping) -> Option<&MappedFile> {
        if !mapping.is_file() {
            return None;
        }
        let key = (mapping.path.clone(), mapping.build_id.clone());
        if let Some(&i) = self.mapped_index.get(&key) {
            return Some(&self.mapped[i].2);
        }
        let file = std::fs::metadata(&mapping.path).ok().map(|m| {
            (
                std::os::unix::fs::MetadataExt::dev(&m),
                std::os::unix::fs::MetadataExt::ino(&m),
                mapping.build_id.clone(),
            )
        });
        if let Some(&i) = file.as_ref().and_then(|file| self.mapped_by_file.get(file)) {
            self.mapped_index.insert(key, i);
            return Some(&self.mapped[i].2);
        }
        let index = self.mapped.len();
        let state = match read_binary(&mapping.path) {
            Err(e) => MappedFile::Unreadable(e.to_string()),
            Ok(data) => match Binary::parse(&mapping.path, &data, None) {
                Err(SymbolizeError::Parse { source, .. }) => MappedFile::NotElf(source.to_string()),
                Err(e) => MappedFile::NotElf(e.to_string()),
                Ok(binary) => match &mapping.build_id {
                    Some(recorded) if binary.build_id.as_ref() != Some(recorded) => {
                        MappedFile::BuildIdMismatch {
                            recorded: recorded.clone(),
                            found: binary.build_id.clone(),
                        }
                    }
                    _ => {
                        let mut binary = binary;
                        binary.add_debug_file(&self.debug_dir);
                        let state = MappedFile::Loaded {
                            functions: binary.info.functions,
                            debug_info: binary.info.debug_info,
                        };
                        self.mapped_binaries.insert(index, binary);
                        state
                    }
                },
            },
        };
        self.mapped.push((key.0.clone(), key.1.clone(), state));
        self.mapped_index.insert(key, index);
        if let Some(file) = file {
            self.mapped_by_file.insert(file, index);
        }
        Some(&self.mapped[index].2)
    }

    /// [`Self::load_mapped`] for each mapping.
    pub fn load_mappings<'a>(&mut self, mappings: impl IntoIterator<Item = &'a Mapping>) {
        for m in mappings {
            self.load_mapped(m);
        }
    }

    /// The mapped files loaded so far: path, recorded build-id, what became of it.
    pub fn mapped_files(&self) -> impl Iterator<Item = (&Path, Option<&[u8]>, &MappedFile)> {
        self.mapped
            .iter()
            .map(|(p, id, state)| (p.as_path(), id.as_deref(), state))
    }

    /// Where `address` is, by `mapping` (which must contain it): function and source from
    /// its file when [`Self::load_mapped`] loaded it, else the file name and the file
    /// offset (`[vdso]+0x…`, `libfoo.so+0x…`).
    pub fn locate_mapped(&self, address: u64, mapping: &Mapping) -> Location {
        let offset = mapping.file_offset(address);
        let binary = self
            .mapped_index
            .get(&(mapping.path.clone(), mapping.build_id.clone()))
            .and_then(|i| self.mapped_binaries.get(i));
        if let Some(b) = binary {
            if let Some(file_address) = b.file_address_of_offset(offset) {
                return b.describe(address, file_address);
            }
        }
        Location {
            address,
            binary: file_name(&mapping.path),
            file_address: offset,
            function: None,
            source: None,
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

impl Binary {
    fn parse(path: &Path, data: &[u8], base: Option<u64>) -> Result<Binary, SymbolizeError> {
        let file = object::File::parse(data).map_err(|source| SymbolizeError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let position_independent = file.kind() == ObjectKind::Dynamic;
        let segments: Vec<(u64, u64)> = file
            .segments()
            .filter(|s| match s.flags() {
                SegmentFlags::Elf { p_flags } => p_flags & PF_X != 0,
                _ => true,
            })
            .map(|s| (s.address(), s.address().saturating_add(s.size())))
            .filter(|(start, end)| start < end)
            .collect();
        let loads: Vec<LoadSegment> = file
            .segments()
            .map(|s| {
                let (offset, file_size) = s.file_range();
                LoadSegment {
                    address: s.address(),
                    offset,
                    file_size,
                }
            })
            .filter(|l| l.file_size > 0)
            .collect();
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let lowest = file.segments().map(|s| s.address()).min().unwrap_or(0) & !(PAGE - 1);
        let bias = base.map_or(0, |b| b.wrapping_sub(lowest));

        let functions = functions_of(&file, Vec::new());

        let mut warning = None;
        if position_independent && base.is_none() {
            warning = Some(format!(
                "{} is position-independent and no load base was given ({}@0xBASE, BASE = \
                 the start of its first mapping in /proc/PID/maps): addresses are assumed \
                 to be file addresses",
                path.display(),
                path.display()
            ));
        }
        let dwarf = match load_dwarf(&file) {
            Ok(d) => d,
            Err(e) => {
                warning = Some(format!(
                    "{}: debug information unreadable ({e}): no file:line",
                    path.display()
                ));
                None
            }
        };
        Ok(Binary {
            info: BinaryInfo {
                path: path.to_path_buf(),
                position_independent,
                bias,
                functions: functions.len(),
                debug_info: dwarf.is_some(),
                warning,
            },
            segments,
            loads,
            build_id,
            functions,
            dwarf,
        })
    }
}

/// The function symbols of `file` (`.symtab` and `.dynsym`) with `more`, one per address:
/// the sized one, then the first name.
fn functions_of(file: &object::File<'_>, more: Vec<Function>) -> Vec<Function> {
    let mut functions: Vec<Function> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition())
        .filter(|s| s.address() != 0)
        .filter_map(|s| {
            Some(Function {
                address: s.address(),
                size: s.size(),
                name: demangle(s.name().ok()?),
            })
        })
        .chain(more)
        .collect();
    // glibc's internal aliases (`__GI___lll_lock_wait`) after the names perf and gdb show.
    let alias = |f: &Function| f.name.starts_with("__GI_");
    functions.sort_by(|a, b| {
        a.address
            .cmp(&b.address)
            .then(b.size.cmp(&a.size))
            .then(alias(a).cmp(&alias(b)))
            .then(a.name.cmp(&b.name))
    });
    functions.dedup_by_key(|f| f.address);
    functions
}

/// Where distributions install a binary's detached debug file, by its build-id
/// (`/usr/lib/debug/.build-id/12/3456….debug`, as gdb and perf look it up).
pub const DEBUG_FILE_DIR: &str = "/usr/lib/debug/.build-id";

/// The detached debug file of build-id `id` under `dir`, if there is one.
fn debug_file(dir: &Path, id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = id.split_first()?;
    let rest: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir
        .join(format!("{first:02x}"))
        .join(format!("{rest}.debug"));
    path.is_file().then_some(path)
}

impl Binary {
    /// Adds the symbols (and, when this file has none, the line information) of its detached
    /// debug file found by build-id under `dir`: a stripped library (`libc.so.6` keeps only
    /// its exported names) then names its internal functions too. Nothing happens without a
    /// build-id, a debug file, or one that reads.
    fn add_debug_file(&mut self, dir: &Path) {
        let Some(path) = self.build_id.as_deref().and_then(|id| debug_file(dir, id)) else {
            return;
        };
        let Ok(data) = read_binary(&path) else {
            return;
        };
        let Ok(file) = object::File::parse(&*data) else {
            return;
        };
        if file.build_id().ok().flatten() != self.build_id.as_deref() {
            return;
        }
        let own = std::mem::take(&mut self.functions);
        self.functions = functions_of(&file, own);
        self.info.functions = self.functions.len();
        if self.dwarf.is_none() {
            if let Ok(Some(dwarf)) = load_dwarf(&file) {
                self.dwarf = Some(dwarf);
                self.info.debug_info = true;
            }
        }
    }
}

impl Symbolizer {
    /// The binaries added, in order.
    pub fn binaries(&self) -> impl Iterator<Item = &BinaryInfo> {
        self.binaries.iter().map(|b| &b.info)
    }

    /// Where `address` is, if it falls in an executable segment of a binary added.
    pub fn locate(&self, address: u64) -> Option<Location> {
        self.binaries.iter().find_map(|b| b.locate(address))
    }
}

impl Binary {
    fn locate(&self, address: u64) -> Option<Location> {
        let file_address = address.wrapping_sub(self.info.bias);
        if !self
            .segments
            .iter()
            .any(|(start, end)| (*start..*end).contains(&file_address))
        {
            return None;
        }
        Some(self.describe(address, file_address))
    }

    /// The file address of file offset `offset`: through the segment whose file range (its
    /// start rounded down to a page, as the loader maps it) holds it.
    fn file_address_of_offset(&self, offset: u64) -> Option<u64> {
        let exact = |l: &&LoadSegment| offset >= l.offset && offset - l.offset < l.file_size;
        let paged = |l: &&LoadSegment| {
            offset >= l.offset & !(PAGE - 1) && offset.saturating_sub(l.offset) < l.file_size
        };
        self.loads
            .iter()
            .find(exact)
            .or_else(|| self.loads.iter().find(paged))
            .map(|l| l.address.wrapping_add(offset.wrapping_sub(l.offset)))
    }

    fn describe(&self, address: u64, file_address: u64) -> Location {
        let at = self
            .functions
            .partition_point(|f| f.address <= file_address);
        let function = at
            .checked_sub(1)
            .map(|i| &self.functions[i])
            .filter(|f| f.size == 0 || file_address - f.address < f.size)
            .map(|f| (f.name.clone(), file_address - f.address));
        let source = self.dwarf.as_ref().and_then(|d| {
            let loc = d.find_location(file_address).ok()??;
            Some((loc.file?.to_string(), loc.line?))
        });
        Location {
            address,
            binary: file_name(&self.info.path),
            file_address,
            function,
            source,
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn only_regular_files_are_read_as_binaries_and_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bin");
        std::fs::write(&file, b"bytes").unwrap();
        assert_eq!(read_binary(&file).unwrap(), b"bytes");
        // A trace can name any path: a device that never ends, a FIFO no one writes.
        let err = read_binary(Path::new("/dev/zero")).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = read_binary(&fifo).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    use super::*;

    #[test]
    fn binary_specs() {
        let spec = |s: &str| s.parse::<BinarySpec>();
        assert_eq!(
            spec("/bin/prog").unwrap(),
            BinarySpec {
                path: "/bin/prog".into(),
                base: None
            }
        );
        assert_eq!(
            spec("/bin/prog@0x5555_5555".replace('_', "").as_str()).unwrap(),
            BinarySpec {
                path: "/bin/prog".into(),
                base: Some(0x5555_5555)
            }
        );
        assert_eq!(spec("a@4096").unwrap().base, Some(4096));
        assert_eq!(spec("a@b@0X10").unwrap().path, PathBuf::from("a@b"));
        // '@' that is not followed by an address belongs to the path …
        assert_eq!(spec("v@latest").unwrap().path, PathBuf::from("v@latest"));
        // … unless it looks like a mistyped address, or there is no path.
        assert!(matches!(
            spec("a@0xZZ"),
            Err(SymbolizeError::BadBase { .. })
        ));
        assert!(matches!(spec("@0x10"), Err(SymbolizeError::BadBase { .. })));
    }

    #[test]
    fn location_text() {
        let mut loc = Location {
            address: 0x401136,
            binary: "prog".into(),
            file_address: 0x401136,
            function: Some(("main".into(), 0x16)),
            source: Some(("/src/t.c".into(), 7)),
        };
        assert_eq!(loc.to_string(), "main+0x16 (/src/t.c:7)");
        loc.function = Some(("hot".into(), 0));
        loc.source = None;
        assert_eq!(loc.to_string(), "hot");
        loc.function = None;
        assert_eq!(loc.to_string(), "prog+0x401136");
    }

    #[test]
    fn not_an_elf_file() {
        let mut s = Symbolizer::new();
        let err = s
            .add_bytes(Path::new("junk"), b"not an object", None)
            .unwrap_err();
        assert!(
            err.to_string().starts_with("junk: not a readable ELF file"),
            "{err}"
        );
        assert_eq!(s.locate(0x1000), None);
    }

    #[test]
    fn a_file_named_by_several_paths_is_read_once() {
        // The test binary itself, by its path and by a spelling with `..`.
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap();
        let other = dir
            .join("..")
            .join(dir.file_name().unwrap())
            .join(exe.file_name().unwrap());
        let mapping = |path: &Path| Mapping {
            pid: 1,
            time_ns: 0,
            start: 0x1000,
            len: 0x1000,
            pgoff: 0,
            build_id: None,
            path: path.to_path_buf(),
        };
        let mut s = Symbolizer::new();
        assert!(s.load_mapped(&mapping(&exe)).is_some());
        assert!(s.load_mapped(&mapping(&other)).is_some());
        assert_eq!(s.mapped_files().count(), 1);
        assert_eq!(s.mapped_binaries.len(), 1);
        // Both spellings name the same binary's addresses.
        let (a, b) = (
            s.locate_mapped(0x1000, &mapping(&exe)),
            s.locate_mapped(0x1000, &mapping(&other)),
        );
        assert_eq!((a.function, a.file_address), (b.function, b.file_address));
    }

    #[test]
    fn demangles_cpp() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Znot-valid"), "_Znot-valid");
    }

    #[test]
    fn debug_files_are_found_by_build_id() {
        let dir = tempfile::tempdir().unwrap();
        let id = [0x93, 0xac, 0x61, 0xec];
        assert_eq!(debug_file(dir.path(), &id), None);
        std::fs::create_dir_all(dir.path().join("93")).unwrap();
        std::fs::write(dir.path().join("93/ac61ec.debug"), b"x").unwrap();
        assert_eq!(
            debug_file(dir.path(), &id),
            Some(dir.path().join("93/ac61ec.debug"))
        );
        assert_eq!(debug_file(dir.path(), &[]), None);
    }

    #[test]
    fn demangles_rust_without_the_hash() {
        assert_eq!(
            demangle("_ZN10contention9busy_loop17h0f2c150931415665E"),
            "contention::busy_loop"
        );
        assert_eq!(
            demangle("_ZN89_$LT$core..ops..range..Range$LT$T$GT$$u20$as$u20$core..iter..range..RangeIteratorImpl$GT$9spec_next17h237e99d1ead4810aE"),
            "<core::ops::range::Range<T> as core::iter::range::RangeIteratorImpl>::spec_next"
        );
    }
}

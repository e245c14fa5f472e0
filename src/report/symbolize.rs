//! Address → function and file:line, from ELF binaries given by the user.
//!
//! Function names come from the ELF symbol table (`.symtab`, else `.dynsym`) through the
//! `object` crate; file and line from DWARF through `addr2line`, when the binary has debug
//! information.
//!
//! # Load addresses
//!
//! An address in a trace is a run-time address. A non-PIE executable runs at the addresses
//! in its file, so `--binary PATH` is enough. A position-independent executable or shared
//! library is loaded at a random base: give it as `PATH@0xBASE`, where `BASE` is the
//! start of its first mapping (the first line naming the file in `/proc/PID/maps`, offset
//! 0). The load bias is then `BASE` minus the page-aligned lowest segment address. FXT
//! kernel and userspace object records carry no mmap information today, so the base
//! cannot be read from the trace; addresses outside every given binary's segments are
//! printed unsymbolized (the raw address only).

use std::borrow::Cow;
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

struct Binary {
    info: BinaryInfo,
    /// Executable segments, file addresses `[start, end)`.
    segments: Vec<(u64, u64)>,
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

/// Resolves run-time addresses against the binaries added to it.
#[derive(Debug, Default)]
pub struct Symbolizer {
    binaries: Vec<Binary>,
}

fn demangle(name: &str) -> String {
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

impl Symbolizer {
    /// No binaries: every address stays unsymbolized.
    pub fn new() -> Self {
        Symbolizer::default()
    }

    /// Reads and adds a binary.
    pub fn add(&mut self, spec: &BinarySpec) -> Result<&BinaryInfo, SymbolizeError> {
        let data = std::fs::read(&spec.path).map_err(|source| SymbolizeError::Read {
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
        let lowest = file.segments().map(|s| s.address()).min().unwrap_or(0) & !(PAGE - 1);
        let bias = base.map_or(0, |b| b.wrapping_sub(lowest));

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
            .collect();
        // One entry per address: the sized one, then the first name.
        functions.sort_by(|a, b| {
            a.address
                .cmp(&b.address)
                .then(b.size.cmp(&a.size))
                .then(a.name.cmp(&b.name))
        });
        functions.dedup_by_key(|f| f.address);

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
        self.binaries.push(Binary {
            info: BinaryInfo {
                path: path.to_path_buf(),
                position_independent,
                bias,
                functions: functions.len(),
                debug_info: dwarf.is_some(),
                warning,
            },
            segments,
            functions,
            dwarf,
        });
        Ok(&self.binaries[self.binaries.len() - 1].info)
    }

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
        Some(Location {
            address,
            binary: self.info.path.file_name().map_or_else(
                || self.info.path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            file_address,
            function,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
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
    fn demangles_cpp() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Znot-valid"), "_Znot-valid");
    }
}

//! The XRay instrumentation map: function ids → function addresses → names.
//!
//! An instrumented binary has an `xray_instr_map` section with one entry per sled
//! (patchable instruction sequence), 32 bytes on 64-bit targets (16 on 32-bit):
//!
//! | offset (64-bit) | size | field |
//! |---|---|---|
//! | 0 | word | sled address |
//! | 8 | word | address of the sled's function |
//! | 16 | 1 | kind: 0 entry, 1 exit, 2 tail exit, 3 entry with args, 4 custom event, 5 typed event |
//! | 17 | 1 | always-instrument flag |
//! | 18 | 1 | entry version |
//! | 19 | 13 | padding |
//!
//! From entry version 2 both addresses are PC-relative: the sled address is relative
//! to the entry's own address, the function address to the address of that field
//! (entry + one word). Version 0/1 addresses are absolute; when they are zero in the
//! file a relocation on that field supplies them (position-independent binaries).
//!
//! Function ids, as the XRay runtime and `llvm-xray` assign them: walk the sleds in
//! section order; the first sled's function gets id 1, and the id increases by one
//! each time a sled's function differs from the previous sled's.
//!
//! Names come from the binary's symbol tables (C++ names demangled like
//! `llvm-xray --symbolize` prints them), or from the YAML that
//! `llvm-xray extract [--symbolize] BINARY` prints, which this module also reads so
//! that tests and users without the binary can still name functions.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use object::{
    Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationKind,
    RelocationTarget, SymbolKind,
};

use super::event::FunctionId;
use super::llvm_yaml::{get, parse_flow_mapping, parse_int};

/// Name of the section holding the sled table.
pub const SECTION_NAME: &str = "xray_instr_map";
/// Size of one sled entry in a 64-bit binary.
pub const ENTRY_SIZE_64: usize = 32;
/// Size of one sled entry in a 32-bit binary.
pub const ENTRY_SIZE_32: usize = 16;
/// Entry version from which addresses are PC-relative.
pub const PC_RELATIVE_VERSION: u8 = 2;

/// What a sled instruments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SledKind {
    /// 0: function entry.
    FunctionEnter,
    /// 1: function exit.
    FunctionExit,
    /// 2: exit through a tail call.
    TailExit,
    /// 3: function entry that logs arguments.
    LogArgsEnter,
    /// 4: `__xray_customevent` call site.
    CustomEvent,
    /// 5: `__xray_typedevent` call site.
    TypedEvent,
    /// A kind this reader does not know.
    Unknown(u8),
}

impl SledKind {
    /// The kind with wire number `n`.
    pub fn from_wire(n: u8) -> Self {
        match n {
            0 => Self::FunctionEnter,
            1 => Self::FunctionExit,
            2 => Self::TailExit,
            3 => Self::LogArgsEnter,
            4 => Self::CustomEvent,
            5 => Self::TypedEvent,
            n => Self::Unknown(n),
        }
    }

    /// The kind named as `llvm-xray extract` prints it (`function-enter`, ...).
    pub fn from_yaml_name(name: &str) -> Option<Self> {
        Some(match name {
            "function-enter" => Self::FunctionEnter,
            "function-exit" => Self::FunctionExit,
            "tail-exit" => Self::TailExit,
            "log-args-enter" => Self::LogArgsEnter,
            "custom-event" => Self::CustomEvent,
            "typed-event" => Self::TypedEvent,
            _ => return None,
        })
    }
}

/// One sled of the map, with resolved addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sled {
    /// Address of the sled (link-time virtual address).
    pub address: u64,
    /// Address of the function it belongs to.
    pub function: u64,
    /// What it instruments.
    pub kind: SledKind,
    /// Instrumented regardless of the instruction threshold.
    pub always_instrument: bool,
    /// Entry version (2 = PC-relative addresses).
    pub version: u8,
}

/// An instrumented function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Its XRay function id.
    pub id: FunctionId,
    /// Its address.
    pub address: u64,
    /// Its (demangled) name, when symbols were available.
    pub name: Option<String>,
}

/// Why an instrumentation map could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstrMapError {
    /// The file could not be read.
    #[error("cannot read instrumentation map {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file starts like ELF but could not be parsed.
    #[error("cannot parse ELF file: {0}")]
    Elf(String),
    /// The binary has no `xray_instr_map` section (not built with `-fxray-instrument`).
    #[error("no xray_instr_map section: the binary was not built with -fxray-instrument")]
    NoSection,
    /// Big-endian binaries are not supported.
    #[error("big-endian binaries are not supported")]
    BigEndian,
    /// The section size is not a multiple of the entry size.
    #[error(
        "xray_instr_map section of {size} bytes is not a multiple of the {entry_size}-byte entry"
    )]
    BadSectionSize {
        /// Section size.
        size: usize,
        /// Entry size.
        entry_size: usize,
    },
    /// A line of the YAML extract could not be read.
    #[error("instrumentation map YAML, line {line}: {message}")]
    Yaml {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Sleds and functions of one instrumented binary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstrMap {
    sleds: Vec<Sled>,
    functions: BTreeMap<FunctionId, FunctionInfo>,
}

impl InstrMap {
    /// Loads `path`: an ELF binary, or else the YAML of `llvm-xray extract` (a regular file,
    /// as a binary given to `report lbr`: a device or a FIFO is refused, not read for ever).
    pub fn load(path: &Path) -> Result<Self, InstrMapError> {
        let data =
            crate::report::symbolize::read_binary(path).map_err(|source| InstrMapError::Io {
                path: path.display().to_string(),
                source,
            })?;
        Self::from_bytes(&data)
    }

    /// Reads an ELF binary (detected by its magic) or else llvm-xray's YAML extract.
    pub fn from_bytes(data: &[u8]) -> Result<Self, InstrMapError> {
        if data.starts_with(b"\x7fELF") {
            return Self::from_elf(data);
        }
        let text = std::str::from_utf8(data).map_err(|e| InstrMapError::Yaml {
            line: 1,
            message: format!("neither ELF nor UTF-8 YAML ({e})"),
        })?;
        Self::from_yaml(text)
    }

    /// Reads the `xray_instr_map` section and the symbols of an ELF binary.
    pub fn from_elf(data: &[u8]) -> Result<Self, InstrMapError> {
        let file = object::File::parse(data).map_err(|e| InstrMapError::Elf(e.to_string()))?;
        if !file.is_little_endian() {
            return Err(InstrMapError::BigEndian);
        }
        let section = file
            .section_by_name(SECTION_NAME)
            .ok_or(InstrMapError::NoSection)?;
        let contents = section
            .data()
            .map_err(|e| InstrMapError::Elf(e.to_string()))?;
        let base = section.address();
        let (entry_size, word) = if file.is_64() {
            (ENTRY_SIZE_64, 8)
        } else {
            (ENTRY_SIZE_32, 4)
        };
        if contents.len() % entry_size != 0 {
            return Err(InstrMapError::BadSectionSize {
                size: contents.len(),
                entry_size,
            });
        }
        let relocs = relocated_words(&file, &section);
        let read_word = |entry: &[u8], at: usize| -> u64 {
            if word == 8 {
                super::bytes::u64_at(entry, at).unwrap_or(0)
            } else {
                u64::from(super::bytes::u32_at(entry, at).unwrap_or(0))
            }
        };
        let mut sleds = Vec::with_capacity(contents.len() / entry_size);
        for (i, entry) in contents.chunks_exact(entry_size).enumerate() {
            let entry_addr = base.wrapping_add((i * entry_size) as u64);
            let field = |at: usize| {
                let raw = read_word(entry, at);
                if raw == 0 {
                    relocs
                        .get(&entry_addr.wrapping_add(at as u64))
                        .copied()
                        .unwrap_or(0)
                } else {
                    raw
                }
            };
            let (mut address, mut function) = (field(0), field(word));
            let kind = SledKind::from_wire(entry[2 * word]);
            let always_instrument = entry[2 * word + 1] != 0;
            let version = entry[2 * word + 2];
            if version >= PC_RELATIVE_VERSION {
                address = address.wrapping_add(entry_addr);
                function = function.wrapping_add(entry_addr.wrapping_add(word as u64));
            }
            if word == 4 {
                address &= 0xffff_ffff;
                function &= 0xffff_ffff;
            }
            sleds.push(Sled {
                address,
                function,
                kind,
                always_instrument,
                version,
            });
        }
        let symbols = Symbolizer::new(&file);
        let mut map = Self::from_sleds(sleds);
        for f in map.functions.values_mut() {
            f.name = symbols.name_of(f.address);
        }
        Ok(map)
    }

    /// Reads the YAML printed by `llvm-xray extract [--symbolize]`: one flow mapping per
    /// sled with `id`, `address`, `function`, `kind`, `always-instrument`, `version`
    /// and, with `--symbolize`, `function-name`.
    pub fn from_yaml(text: &str) -> Result<Self, InstrMapError> {
        let mut map = Self::default();
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            if trimmed.is_empty()
                || trimmed == "---"
                || trimmed == "..."
                || trimmed.starts_with('#')
            {
                continue;
            }
            let err = |message: String| InstrMapError::Yaml {
                line: n + 1,
                message,
            };
            let entries = parse_flow_mapping(trimmed).map_err(|e| err(e.to_string()))?;
            let int = |key: &str| -> Result<u64, InstrMapError> {
                get(&entries, key)
                    .and_then(|v| v.as_str())
                    .and_then(parse_int)
                    .ok_or_else(|| err(format!("missing or non-numeric `{key}`")))
            };
            let id =
                FunctionId::try_from(int("id")?).map_err(|_| err("`id` out of range".into()))?;
            let kind_name = get(&entries, "kind").and_then(|v| v.as_str()).unwrap_or("");
            let kind = SledKind::from_yaml_name(kind_name)
                .ok_or_else(|| err(format!("unknown sled kind `{kind_name}`")))?;
            let sled = Sled {
                address: int("address")?,
                function: int("function")?,
                kind,
                always_instrument: get(&entries, "always-instrument").and_then(|v| v.as_str())
                    == Some("true"),
                version: u8::try_from(int("version").unwrap_or(0)).unwrap_or(u8::MAX),
            };
            let name = get(&entries, "function-name")
                .and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_string);
            map.sleds.push(sled);
            let f = map.functions.entry(id).or_insert(FunctionInfo {
                id,
                address: sled.function,
                name: None,
            });
            if f.name.is_none() {
                f.name = name;
            }
        }
        Ok(map)
    }

    /// Builds the map from sleds in section order, assigning function ids as the XRay
    /// runtime does (names are left empty).
    pub fn from_sleds(sleds: Vec<Sled>) -> Self {
        let mut functions = BTreeMap::new();
        let mut id: FunctionId = 0;
        let mut current = None;
        for s in &sleds {
            if current != Some(s.function) {
                id = id.saturating_add(1);
                current = Some(s.function);
                functions.insert(
                    id,
                    FunctionInfo {
                        id,
                        address: s.function,
                        name: None,
                    },
                );
            }
        }
        Self { sleds, functions }
    }

    /// The sleds, in section order.
    pub fn sleds(&self) -> &[Sled] {
        &self.sleds
    }

    /// The function with id `id`.
    pub fn function(&self, id: FunctionId) -> Option<&FunctionInfo> {
        self.functions.get(&id)
    }

    /// The name of function `id`, when known.
    pub fn function_name(&self, id: FunctionId) -> Option<&str> {
        self.functions.get(&id)?.name.as_deref()
    }

    /// All functions, by increasing id.
    pub fn functions(&self) -> impl Iterator<Item = &FunctionInfo> {
        self.functions.values()
    }

    /// The id of the function at `address`.
    pub fn id_of_address(&self, address: u64) -> Option<FunctionId> {
        self.functions
            .values()
            .find(|f| f.address == address)
            .map(|f| f.id)
    }
}

/// Values that relocations put into words of the `xray_instr_map` section, keyed by
/// the word's address: RELATIVE dynamic relocations (position-independent binaries)
/// give their addend, absolute ones symbol + addend, PC-relative ones symbol + addend
/// minus the word's address (relocatable objects).
fn relocated_words(
    file: &object::File<'_>,
    section: &object::Section<'_, '_>,
) -> HashMap<u64, u64> {
    let relative_type = match file.architecture() {
        object::Architecture::X86_64 | object::Architecture::X86_64_X32 => {
            Some(object::elf::R_X86_64_RELATIVE)
        }
        object::Architecture::I386 => Some(object::elf::R_386_RELATIVE),
        object::Architecture::Aarch64 => Some(object::elf::R_AARCH64_RELATIVE),
        object::Architecture::Arm => Some(object::elf::R_ARM_RELATIVE),
        object::Architecture::PowerPc64 => Some(object::elf::R_PPC64_RELATIVE),
        object::Architecture::Riscv64 => Some(object::elf::R_RISCV_RELATIVE),
        object::Architecture::LoongArch64 => Some(object::elf::R_LARCH_RELATIVE),
        _ => None,
    };
    let symbol_value = |target: RelocationTarget, dynamic: bool| -> Option<u64> {
        match target {
            RelocationTarget::Symbol(index) => {
                let symbol = if dynamic {
                    file.dynamic_symbol_table()?.symbol_by_index(index).ok()?
                } else {
                    file.symbol_by_index(index).ok()?
                };
                Some(symbol.address())
            }
            RelocationTarget::Section(index) => Some(file.section_by_index(index).ok()?.address()),
            RelocationTarget::Absolute => Some(0),
            _ => None,
        }
    };
    let mut out = HashMap::new();
    let mut add = |place: u64, reloc: &object::Relocation, dynamic: bool| {
        let addend = reloc.addend() as u64;
        let is_relative_type = matches!(reloc.flags(), RelocationFlags::Elf { r_type } if Some(r_type) == relative_type);
        let pc64 = matches!(reloc.flags(), RelocationFlags::Elf { r_type } if r_type == object::elf::R_X86_64_PC64)
            && file.architecture() == object::Architecture::X86_64;
        let value = if is_relative_type {
            Some(addend)
        } else if reloc.kind() == RelocationKind::Absolute {
            symbol_value(reloc.target(), dynamic).map(|s| s.wrapping_add(addend))
        } else if reloc.kind() == RelocationKind::Relative || pc64 {
            symbol_value(reloc.target(), dynamic)
                .map(|s| s.wrapping_add(addend).wrapping_sub(place))
        } else {
            None
        };
        if let Some(v) = value {
            out.insert(place, v);
        }
    };
    let range = section.address()..section.address().saturating_add(section.size());
    if let Some(dynamic) = file.dynamic_relocations() {
        for (place, reloc) in dynamic {
            if range.contains(&place) {
                add(place, &reloc, true);
            }
        }
    }
    for (offset, reloc) in section.relocations() {
        add(section.address().wrapping_add(offset), &reloc, false);
    }
    out
}

/// Function symbols sorted by address, for address → name lookups.
struct Symbolizer {
    /// (address, size, demangled name), sorted by address.
    symbols: Vec<(u64, u64, String)>,
}

impl Symbolizer {
    fn new(file: &object::File<'_>) -> Self {
        let mut symbols: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), demangle(s.name().ok()?))))
            .filter(|(_, _, name)| !name.is_empty())
            .collect();
        // Per address, prefer sized symbols; keep one entry per address.
        symbols.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        symbols.dedup_by_key(|s| s.0);
        Self { symbols }
    }

    /// The symbol containing `address` (exact start, or inside a sized symbol).
    fn name_of(&self, address: u64) -> Option<String> {
        let i = self
            .symbols
            .partition_point(|s| s.0 <= address)
            .checked_sub(1)?;
        let (start, size, name) = &self.symbols[i];
        (address == *start || address - start < *size).then(|| name.clone())
    }
}

/// Demangles Itanium C++ names (`_Z...`) as `llvm-symbolizer` prints them; other
/// names are returned as they are.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_Z") {
        if let Ok(symbol) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = symbol.demangle(&cpp_demangle::DemangleOptions::default()) {
                return text;
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sled(function: u64, kind: u8) -> Sled {
        Sled {
            address: function + 1,
            function,
            kind: SledKind::from_wire(kind),
            always_instrument: false,
            version: 2,
        }
    }

    #[test]
    fn ids_follow_runs_of_the_same_function() {
        // Two sleds of A, one of B, then A again: A gets 1, B 2, and the second run of A 3,
        // exactly as the runtime numbers them (it does not deduplicate).
        let map = InstrMap::from_sleds(vec![
            sled(0x100, 0),
            sled(0x100, 1),
            sled(0x200, 0),
            sled(0x100, 2),
        ]);
        let ids: Vec<_> = map.functions().map(|f| (f.id, f.address)).collect();
        assert_eq!(ids, vec![(1, 0x100), (2, 0x200), (3, 0x100)]);
        assert_eq!(map.id_of_address(0x200), Some(2));
        assert_eq!(map.function(4), None);
    }

    #[test]
    fn sled_kinds_match_llvm_numbering() {
        let kinds: Vec<_> = (0..7).map(SledKind::from_wire).collect();
        assert_eq!(
            kinds,
            vec![
                SledKind::FunctionEnter,
                SledKind::FunctionExit,
                SledKind::TailExit,
                SledKind::LogArgsEnter,
                SledKind::CustomEvent,
                SledKind::TypedEvent,
                SledKind::Unknown(6)
            ]
        );
        assert_eq!(
            SledKind::from_yaml_name("log-args-enter"),
            Some(SledKind::LogArgsEnter)
        );
        assert_eq!(SledKind::from_yaml_name("bogus"), None);
    }

    #[test]
    fn reads_llvm_xray_extract_yaml() {
        let text = "---\n\
            - { id: 1, address: 0x21DB0, function: 0x21DB0, kind: function-enter, always-instrument: false, function-name: 'leaf(int)', version: 2 }\n\
            - { id: 1, address: 0x21DC8, function: 0x21DB0, kind: function-exit, always-instrument: false, function-name: 'leaf(int)', version: 2 }\n\
            - { id: 2, address: 0x21DE0, function: 0x21DE0, kind: log-args-enter, always-instrument: true, version: 2 }\n\
            ...\n";
        let map = InstrMap::from_yaml(text).unwrap();
        assert_eq!(map.sleds().len(), 3);
        assert_eq!(map.function_name(1), Some("leaf(int)"));
        assert_eq!(
            map.function(2).map(|f| (f.address, f.name.clone())),
            Some((0x21DE0, None))
        );
        assert!(map.sleds()[2].always_instrument);
        let err = InstrMap::from_yaml("- { id: 1, kind: function-enter }").unwrap_err();
        assert!(matches!(err, InstrMapError::Yaml { line: 1, .. }), "{err}");
        assert!(matches!(
            InstrMap::from_bytes(&[0xff, 0xfe]),
            Err(InstrMapError::Yaml { .. })
        ));
    }

    #[test]
    fn demangles_cpp_names_like_llvm_symbolizer() {
        assert_eq!(demangle("_Z4leafi"), "leaf(int)");
        assert_eq!(demangle("_Z8with_argm"), "with_arg(unsigned long)");
        assert_eq!(demangle("_Z6workerPv"), "worker(void*)");
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
    }
}

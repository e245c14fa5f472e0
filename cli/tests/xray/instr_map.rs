//! The instrumentation map read from ELF binaries: synthetic ones built here with
//! known sleds, and the real fixture program compared with `llvm-xray extract`.

use fxtrace::test_support::{skip, Requirement};
use std::path::{Path, PathBuf};
use std::process::Command;

use fxtrace_tools::convert::xray::{InstrMap, InstrMapError, Sled, SledKind};
use object::write::{Object, Relocation, StandardSection, Symbol, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, RelocationEncoding, RelocationFlags, RelocationKind,
    SectionKind, SymbolFlags, SymbolKind, SymbolScope,
};

/// One sled entry: (address field, function field, kind, always, version).
fn entry(word: usize, address: u64, function: u64, kind: u8, always: bool, version: u8) -> Vec<u8> {
    let mut e = Vec::new();
    if word == 8 {
        e.extend_from_slice(&address.to_le_bytes());
        e.extend_from_slice(&function.to_le_bytes());
    } else {
        e.extend_from_slice(&(address as u32).to_le_bytes());
        e.extend_from_slice(&(function as u32).to_le_bytes());
    }
    e.extend_from_slice(&[kind, u8::from(always), version]);
    e.resize(if word == 8 { 32 } else { 16 }, 0xAB); // padding is never read
    e
}

fn add_function(
    obj: &mut Object<'_>,
    name: &str,
    value: u64,
    size: u64,
) -> object::write::SymbolId {
    let text = obj.section_id(StandardSection::Text);
    obj.add_symbol(Symbol {
        name: name.as_bytes().to_vec(),
        value,
        size,
        kind: SymbolKind::Text,
        scope: SymbolScope::Linkage,
        weak: false,
        section: SymbolSection::Section(text),
        flags: SymbolFlags::None,
    })
}

/// A relocatable x86-64 ELF object: `.text` with two functions, and an `xray_instr_map`
/// with version-2 (PC-relative) sleds for the first and a version-0 sled whose zero
/// fields are filled by R_X86_64_64 relocations for the second. Sections of a
/// relocatable object sit at address 0.
fn synthetic_elf64() -> Vec<u8> {
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    let text = obj.section_id(StandardSection::Text);
    obj.append_section_data(text, &[0x90; 0x100], 16);
    add_function(&mut obj, "_Z4leafi", 0x10, 0x20);
    let plain = add_function(&mut obj, "plain_c", 0x40, 0x30);
    let xray = obj.add_section(
        Vec::new(),
        b"xray_instr_map".to_vec(),
        SectionKind::ReadOnlyData,
    );
    let mut map = Vec::new();
    // Entry 0 at 0: sled 0x12 of function 0x10. Address relative to the entry (0),
    // function relative to the function field (0 + 8).
    map.extend(entry(8, 0x12, 0x10u64.wrapping_sub(8), 0, false, 2));
    // Entry 1 at 32: sled 0x28; both fields negative offsets.
    map.extend(entry(
        8,
        0x28u64.wrapping_sub(32),
        0x10u64.wrapping_sub(40),
        1,
        false,
        2,
    ));
    // Entry 2 at 64: version 0, zero fields, relocated to plain_c + 2 and plain_c.
    map.extend(entry(8, 0, 0, 3, true, 0));
    obj.append_section_data(xray, &map, 8);
    let abs64 = RelocationFlags::Generic {
        kind: RelocationKind::Absolute,
        encoding: RelocationEncoding::Generic,
        size: 64,
    };
    obj.add_relocation(
        xray,
        Relocation {
            offset: 64,
            symbol: plain,
            addend: 2,
            flags: abs64,
        },
    )
    .unwrap();
    obj.add_relocation(
        xray,
        Relocation {
            offset: 72,
            symbol: plain,
            addend: 0,
            flags: abs64,
        },
    )
    .unwrap();
    obj.write().unwrap()
}

#[test]
fn reads_pc_relative_and_relocated_sleds_from_elf64() {
    let map = InstrMap::from_elf(&synthetic_elf64()).unwrap();
    let sled = |address, function, kind, always_instrument, version| Sled {
        address,
        function,
        kind,
        always_instrument,
        version,
    };
    assert_eq!(
        map.sleds(),
        &[
            sled(0x12, 0x10, SledKind::FunctionEnter, false, 2),
            sled(0x28, 0x10, SledKind::FunctionExit, false, 2),
            sled(0x42, 0x40, SledKind::LogArgsEnter, true, 0),
        ]
    );
    let functions: Vec<_> = map
        .functions()
        .map(|f| (f.id, f.address, f.name.clone()))
        .collect();
    assert_eq!(
        functions,
        vec![
            (1, 0x10, Some("leaf(int)".to_string())),
            (2, 0x40, Some("plain_c".to_string()))
        ]
    );
    assert_eq!(map.function_name(2), Some("plain_c"));
}

#[test]
fn reads_16_byte_entries_of_elf32() {
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::I386, Endianness::Little);
    let text = obj.section_id(StandardSection::Text);
    obj.append_section_data(text, &[0x90; 0x80], 16);
    add_function(&mut obj, "f32", 0x20, 0x10);
    let xray = obj.add_section(
        Vec::new(),
        b"xray_instr_map".to_vec(),
        SectionKind::ReadOnlyData,
    );
    let mut map = entry(4, 0x21, 0x20u64.wrapping_sub(4), 0, false, 2);
    map.extend(entry(
        4,
        0x2Au64.wrapping_sub(16),
        0x20u64.wrapping_sub(20),
        2,
        false,
        2,
    ));
    assert_eq!(map.len(), 32);
    obj.append_section_data(xray, &map, 4);
    let m = InstrMap::from_elf(&obj.write().unwrap()).unwrap();
    let got: Vec<_> = m
        .sleds()
        .iter()
        .map(|s| (s.address, s.function, s.kind))
        .collect();
    assert_eq!(
        got,
        vec![
            (0x21, 0x20, SledKind::FunctionEnter),
            (0x2A, 0x20, SledKind::TailExit)
        ]
    );
    assert_eq!(m.function_name(1), Some("f32"));
}

#[test]
fn elf_errors_are_typed() {
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    let text = obj.section_id(StandardSection::Text);
    obj.append_section_data(text, &[0x90; 16], 16);
    assert!(matches!(
        InstrMap::from_elf(&obj.write().unwrap()),
        Err(InstrMapError::NoSection)
    ));
    let xray = obj.add_section(
        Vec::new(),
        b"xray_instr_map".to_vec(),
        SectionKind::ReadOnlyData,
    );
    obj.append_section_data(xray, &[0; 40], 8);
    let err = InstrMap::from_elf(&obj.write().unwrap()).unwrap_err();
    assert!(
        matches!(
            err,
            InstrMapError::BadSectionSize {
                size: 40,
                entry_size: 32
            }
        ),
        "{err}"
    );
    assert!(matches!(
        InstrMap::from_bytes(b"\x7fELF\x02\x01"),
        Err(InstrMapError::Elf(_))
    ));
    // A device is refused, not read until memory runs out.
    let started = std::time::Instant::now();
    let err = InstrMap::load(Path::new("/dev/zero")).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

fn tool(names: &[&str]) -> Option<PathBuf> {
    names.iter().find_map(|n| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {n}"))
            .output()
            .ok()?;
        let path = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
    })
}

/// Builds the fixture program as scripts/make-xray-fixtures.sh does and compares this
/// reader's view of its xray_instr_map with `llvm-xray extract --symbolize`.
#[test]
fn real_binary_matches_llvm_xray_extract() {
    let (Some(cxx), Some(xray)) = (
        tool(&["clang++", "clang++-14"]),
        tool(&["llvm-xray", "llvm-xray-14"]),
    ) else {
        skip(
            Requirement::Clang,
            "clang++ or llvm-xray not installed (apt-get install clang llvm)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("xray_fixture");
    let src = Path::new(crate::WORKSPACE).join("scripts/xray-fixture/xray_fixture.cc");
    let status = Command::new(&cxx)
        .args([
            "-O2",
            "-g0",
            "-fxray-instrument",
            "-fxray-instruction-threshold=1",
            "-pthread",
            "-o",
        ])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "{} failed to build the fixture",
        cxx.display()
    );
    let extract = Command::new(&xray)
        .args(["extract", "--symbolize"])
        .arg(&bin)
        .output()
        .unwrap();
    assert!(
        extract.status.success(),
        "llvm-xray extract: {}",
        String::from_utf8_lossy(&extract.stderr)
    );
    let theirs = InstrMap::from_yaml(&String::from_utf8(extract.stdout).unwrap()).unwrap();
    let ours = InstrMap::from_elf(&std::fs::read(&bin).unwrap()).unwrap();
    assert_eq!(ours.sleds(), theirs.sleds());
    assert!(ours.sleds().len() >= 14);
    let ours_f: Vec<_> = ours.functions().collect();
    let theirs_f: Vec<_> = theirs.functions().collect();
    assert_eq!(ours_f, theirs_f, "ids, addresses and demangled names");
    assert!(ours_f
        .iter()
        .any(|f| f.name.as_deref() == Some("worker(void*)")));
}

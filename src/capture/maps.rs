//! Executable memory mappings known before the capture starts, and build-ids of mapped files.
//!
//! The kernel reports mappings created while a capture runs (`PERF_RECORD_MMAP2`); those made
//! earlier (the executable, its libraries) are read from `/proc/PID/maps` once the events are
//! enabled, as `perf record` synthesizes them. [`MapsSynthesis::read`] does that for one
//! process or for every process (system-wide), bounded by [`MAX_SYNTH_PROCESSES`] and
//! [`MAX_SYNTH_MAPPINGS`]; what the bounds leave out and what could not be read is counted.
//! Only executable mappings (`x` in the permissions) are kept; a mapping without a path is
//! named `//anon`, as perf names it, and kernel names like `[vdso]` are kept.
//!
//! [`BuildIdCache`] reads the ELF build-id (`NT_GNU_BUILD_ID`) of a mapped file once per file
//! (keyed by device and inode when known, else by path), reading only the headers and notes.
//! Paths are taken as seen from fxtrace's mount namespace: a process in another one may name
//! a different file (or none).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::events::MemoryMap;

/// Most processes whose maps are read for a system-wide capture.
pub const MAX_SYNTH_PROCESSES: usize = 8192;
/// Most mappings synthesized in total.
pub const MAX_SYNTH_MAPPINGS: usize = 65536;
/// Most files whose build-id is remembered.
pub const MAX_BUILD_ID_CACHE: usize = 16384;
/// The name perf gives to executable mappings without a file.
pub const ANON_NAME: &[u8] = b"//anon";

/// One line of `/proc/PID/maps`:
/// `start-end perms offset major:minor inode [path]`, numbers in hex except the inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsLine {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `x` in the permissions.
    pub executable: bool,
    /// File offset of `start`.
    pub offset: u64,
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Inode (0 without a file).
    pub inode: u64,
    /// The path or name (`[vdso]`), empty for anonymous mappings.
    pub path: Vec<u8>,
}

impl MapsLine {
    /// Parses one line; `None` when it does not have the shape above.
    pub fn parse(line: &[u8]) -> Option<MapsLine> {
        let mut rest = line;
        let mut field = || {
            let start = rest.iter().position(|&b| b != b' ')?;
            rest = &rest[start..];
            let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
            let (f, r) = rest.split_at(end);
            rest = r;
            Some(f)
        };
        let hex = |b: &[u8]| u64::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok();
        let range = field()?;
        let perms = field()?;
        let offset = field()?;
        let dev = field()?;
        let inode = field()?;
        let dash = range.iter().position(|&b| b == b'-')?;
        let colon = dev.iter().position(|&b| b == b':')?;
        let path_start = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
        let mut path = rest[path_start..].to_vec();
        while path.last() == Some(&b'\n') {
            path.pop();
        }
        Some(MapsLine {
            start: hex(&range[..dash])?,
            end: hex(&range[dash + 1..])?,
            executable: perms.get(2) == Some(&b'x'),
            offset: hex(offset)?,
            major: u32::try_from(hex(&dev[..colon])?).ok()?,
            minor: u32::try_from(hex(&dev[colon + 1..])?).ok()?,
            inode: std::str::from_utf8(inode).ok()?.parse().ok()?,
            path,
        })
    }
}

/// Reads and parses `<proc_root>/<pid>/maps` (unparsable lines are skipped and counted in the
/// second value).
pub fn read_maps(proc_root: &Path, pid: u32) -> io::Result<(Vec<MapsLine>, u64)> {
    let text = super::procfs::read_small(proc_root.join(pid.to_string()).join("maps"))?;
    let mut lines = Vec::new();
    let mut bad = 0;
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match MapsLine::parse(line) {
            Some(l) => lines.push(l),
            None => bad += 1,
        }
    }
    Ok((lines, bad))
}

// === impl BuildIdCache ===

/// What identifies a file for the cache.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum FileKey {
    Inode { major: u32, minor: u32, inode: u64 },
    Path(Vec<u8>),
}

/// Build-ids of mapped files, read once per file (see the module docs).
#[derive(Debug, Default)]
pub struct BuildIdCache {
    known: HashMap<FileKey, Option<Vec<u8>>>,
    reads: u64,
}

/// The ELF build-id of the file at `path`, reading only what the ELF headers point to;
/// `None` when the file cannot be read, is not ELF, or has no build-id note.
pub fn read_build_id(path: &Path) -> Option<Vec<u8>> {
    let file = fs::File::open(path).ok()?;
    elf_build_id(|offset, buf| {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(buf, offset).is_ok()
    })
}

/// `PT_NOTE`: a program header of notes.
const PT_NOTE: u32 = 4;
/// `NT_GNU_BUILD_ID`: the note type of a build-id, owned by `"GNU\0"`.
const NT_GNU_BUILD_ID: u32 = 3;
/// Note segments longer than this are not read (a build-id note is 36 bytes).
const MAX_NOTE_SEGMENT: u64 = 1 << 16;
/// Program headers looked at (a real executable has about a dozen).
const MAX_PROGRAM_HEADERS: u64 = 256;

/// The build-id in the `PT_NOTE` segments of an ELF file (32 or 64-bit, either byte order),
/// read through `read_at(offset, buf) -> filled`: the ELF header, the program header table
/// and the note segments, one read each (a traced process reads every file it has mapped
/// when its capture starts), each bounded.
fn elf_build_id(read_at: impl Fn(u64, &mut [u8]) -> bool) -> Option<Vec<u8>> {
    let mut ident = [0u8; 64];
    // The 64 bytes of an ELF64 header; only a file shorter than that (an ELF32 one) needs
    // the second read.
    let whole = read_at(0, &mut ident);
    if !(whole || read_at(0, &mut ident[..52])) || ident[..4] != *b"\x7fELF" {
        return None;
    }
    let wide = match ident[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little = match ident[5] {
        1 => true,
        2 => false,
        _ => return None,
    };
    let u16_at = |b: &[u8], at: usize| {
        let v = [b[at], b[at + 1]];
        u64::from(if little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        })
    };
    let u32_at = |b: &[u8], at: usize| {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        u64::from(if little {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        })
    };
    let u64_at = |b: &[u8], at: usize| {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[at..at + 8]);
        if little {
            u64::from_le_bytes(v)
        } else {
            u64::from_be_bytes(v)
        }
    };
    if wide && !whole {
        return None;
    }
    // e_phoff, e_phentsize, e_phnum (ELF32: 28, 42, 44; ELF64: 32, 54, 56).
    let (phoff, phentsize, phnum) = if wide {
        (u64_at(&ident, 32), u16_at(&ident, 54), u16_at(&ident, 56))
    } else {
        (u32_at(&ident, 28), u16_at(&ident, 42), u16_at(&ident, 44))
    };
    let min_entry = if wide { 56 } else { 32 };
    if phentsize < min_entry || phentsize > 256 {
        return None;
    }
    let phnum = phnum.min(MAX_PROGRAM_HEADERS);
    let mut table = vec![0u8; (phnum * phentsize) as usize];
    if !read_at(phoff, &mut table) {
        return None;
    }
    for entry in table.chunks_exact(phentsize as usize) {
        if u32_at(entry, 0) != u64::from(PT_NOTE) {
            continue;
        }
        // p_offset, p_filesz, p_align (ELF32: 4, 16, 28; ELF64: 8, 32, 48).
        let (offset, size, align) = if wide {
            (u64_at(entry, 8), u64_at(entry, 32), u64_at(entry, 48))
        } else {
            (u32_at(entry, 4), u32_at(entry, 16), u32_at(entry, 28))
        };
        if size > MAX_NOTE_SEGMENT {
            continue;
        }
        let mut notes = vec![0u8; size as usize];
        if !read_at(offset, &mut notes) {
            continue;
        }
        let align = if align == 8 { 8 } else { 4 };
        let pad = |n: u64| n.div_ceil(align) * align;
        let mut at = 0u64;
        while at + 12 <= size {
            let p = at as usize;
            let (namesz, descsz, kind) = (
                u32_at(&notes, p),
                u32_at(&notes, p + 4),
                u32_at(&notes, p + 8),
            );
            let name_at = at + 12;
            let desc_at = name_at.checked_add(pad(namesz))?;
            let end = desc_at.checked_add(pad(descsz))?;
            if desc_at.checked_add(descsz)? > size {
                break;
            }
            let name = &notes[name_at as usize..(name_at + namesz) as usize];
            if kind == u64::from(NT_GNU_BUILD_ID) && name == b"GNU\0" && descsz > 0 {
                return Some(notes[desc_at as usize..(desc_at + descsz) as usize].to_vec());
            }
            at = end;
        }
    }
    None
}

impl BuildIdCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The build-id of the mapped file `path` (device and inode when known, to tell apart
    /// files replaced under the same path); only absolute paths are read (not `//anon`).
    pub fn get(&mut self, path: &[u8], inode: Option<(u32, u32, u64)>) -> Option<Vec<u8>> {
        if !path.starts_with(b"/") || path.starts_with(b"//") {
            return None;
        }
        let key = match inode {
            Some((major, minor, inode)) if inode != 0 => FileKey::Inode {
                major,
                minor,
                inode,
            },
            _ => FileKey::Path(path.to_vec()),
        };
        if let Some(known) = self.known.get(&key) {
            return known.clone();
        }
        self.reads += 1;
        let id = read_build_id(&path_of(path));
        if self.known.len() < MAX_BUILD_ID_CACHE {
            self.known.insert(key, id.clone());
        }
        id
    }

    /// Files read so far (cache misses).
    pub fn reads(&self) -> u64 {
        self.reads
    }
}

fn path_of(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

// === impl MapsSynthesis ===

/// Mappings read from `/proc` at the start of a capture, and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapsSynthesis {
    /// The executable mappings, as events at the capture's start.
    pub maps: Vec<MemoryMap>,
    /// Processes whose maps were read.
    pub processes: u64,
    /// Processes whose maps could not be read (gone, or not permitted).
    pub unreadable: u64,
    /// Processes left out by [`MAX_SYNTH_PROCESSES`].
    pub processes_skipped: u64,
    /// Executable mappings left out by [`MAX_SYNTH_MAPPINGS`].
    pub mappings_skipped: u64,
    /// Lines of a maps file that did not parse.
    pub bad_lines: u64,
    /// For each of `maps`, its file's device and inode (the build-id cache's key), for
    /// [`Self::resolve_build_ids`].
    files: Vec<Option<(u32, u32, u64)>>,
}

impl MapsSynthesis {
    /// Reads the executable mappings of `pid`, or of every process under `proc_root` when
    /// `pid` is `None`, stamped `time` (TSC ticks); build-ids through `build_ids`.
    pub fn read(
        proc_root: &Path,
        pid: Option<u32>,
        time: u64,
        build_ids: &mut BuildIdCache,
    ) -> MapsSynthesis {
        let mut found = Self::read_without_build_ids(proc_root, pid, time);
        found.resolve_build_ids(build_ids);
        found
    }

    /// [`Self::read`] without the build-ids, which [`Self::resolve_build_ids`] reads later
    /// (opening every mapped file: a capture reads the maps before it returns, the build-ids
    /// on its own thread).
    pub fn read_without_build_ids(proc_root: &Path, pid: Option<u32>, time: u64) -> MapsSynthesis {
        let mut out = MapsSynthesis::default();
        let pids = match pid {
            Some(p) => vec![p],
            None => match list_processes(proc_root) {
                Ok(p) => p,
                Err(_) => {
                    out.unreadable += 1;
                    return out;
                }
            },
        };
        for (i, &pid) in pids.iter().enumerate() {
            if i >= MAX_SYNTH_PROCESSES {
                out.processes_skipped = (pids.len() - i) as u64;
                break;
            }
            let (lines, bad) = match read_maps(proc_root, pid) {
                Ok(l) => l,
                Err(_) => {
                    out.unreadable += 1;
                    continue;
                }
            };
            out.processes += 1;
            out.bad_lines += bad;
            for line in lines.into_iter().filter(|l| l.executable) {
                if out.maps.len() >= MAX_SYNTH_MAPPINGS {
                    out.mappings_skipped += 1;
                    continue;
                }
                let path = if line.path.is_empty() {
                    ANON_NAME.to_vec()
                } else {
                    line.path
                };
                out.files.push(Some((line.major, line.minor, line.inode)));
                out.maps.push(MemoryMap {
                    time,
                    pid,
                    tid: pid,
                    start: line.start,
                    len: line.end.saturating_sub(line.start),
                    pgoff: line.offset,
                    path,
                    build_id: None,
                    synthesized: true,
                });
            }
        }
        out
    }

    /// The build-id of every mapping's file (through `build_ids`, once per file).
    pub fn resolve_build_ids(&mut self, build_ids: &mut BuildIdCache) {
        for (map, file) in self.maps.iter_mut().zip(&self.files) {
            if map.build_id.is_none() {
                map.build_id = build_ids.get(&map.path, *file);
            }
        }
    }
}

/// The numeric entries of `proc_root`, sorted.
fn list_processes(proc_root: &Path) -> io::Result<Vec<u32>> {
    let mut pids: Vec<u32> = fs::read_dir(proc_root)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let l = MapsLine::parse(
            b"55d0c8a00000-55d0c8a21000 r-xp 00002000 fd:01 1234567                    /usr/bin/prog",
        )
        .unwrap();
        assert_eq!(
            l,
            MapsLine {
                start: 0x55d0_c8a0_0000,
                end: 0x55d0_c8a2_1000,
                executable: true,
                offset: 0x2000,
                major: 0xfd,
                minor: 1,
                inode: 1_234_567,
                path: b"/usr/bin/prog".to_vec(),
            }
        );
        let anon = MapsLine::parse(b"7ffd1000-7ffd3000 rw-p 00000000 00:00 0 \n").unwrap();
        assert!(!anon.executable);
        assert!(anon.path.is_empty());
        let spaced = MapsLine::parse(b"1000-2000 r-xp 0 08:02 7 /tmp/a b (deleted)").unwrap();
        assert_eq!(spaced.path, b"/tmp/a b (deleted)");
        assert_eq!(MapsLine::parse(b"garbage"), None);
        assert_eq!(MapsLine::parse(b"zz-2000 r-xp 0 08:02 7 /x"), None);
    }

    /// The maps read before a capture returns, the build-ids later on its thread: the same
    /// mappings as read at once, the files opened only by the second step.
    #[test]
    fn build_ids_are_read_apart_from_the_maps() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let p = dir.path().join("7");
        fs::create_dir(&p).unwrap();
        fs::write(
            p.join("maps"),
            format!("1000-3000 r-xp 00000000 00:00 0 {}\n", exe.display()),
        )
        .unwrap();
        let mut at_once = BuildIdCache::new();
        let whole = MapsSynthesis::read(dir.path(), Some(7), 5, &mut at_once);
        let mut later = MapsSynthesis::read_without_build_ids(dir.path(), Some(7), 5);
        assert_eq!(later.maps[0].build_id, None);
        let mut ids = BuildIdCache::new();
        later.resolve_build_ids(&mut ids);
        assert_eq!((ids.reads(), at_once.reads()), (1, 1));
        assert_eq!(later, whole);
        assert_eq!(whole.maps[0].build_id, read_build_id(&exe));
    }

    #[test]
    fn synthesis_keeps_executable_mappings_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("42");
        fs::create_dir(&p).unwrap();
        fs::write(
            p.join("maps"),
            "1000-3000 r-xp 00001000 00:00 0 /nonexistent/prog\n\
             3000-4000 rw-p 00003000 00:00 0 /nonexistent/prog\n\
             5000-6000 r-xp 00000000 00:00 0 \n\
             7000-8000 r-xp 00000000 00:00 0 [vdso]\n\
             not a line\n",
        )
        .unwrap();
        fs::create_dir(dir.path().join("43")).unwrap(); // no maps: unreadable
        fs::create_dir(dir.path().join("self-not-a-pid")).unwrap();
        let mut ids = BuildIdCache::new();
        let one = MapsSynthesis::read(dir.path(), Some(42), 99, &mut ids);
        assert_eq!(one.maps.len(), 3);
        assert_eq!(one.bad_lines, 1);
        assert_eq!(
            one.maps[0],
            MemoryMap {
                time: 99,
                pid: 42,
                tid: 42,
                start: 0x1000,
                len: 0x2000,
                pgoff: 0x1000,
                path: b"/nonexistent/prog".to_vec(),
                build_id: None,
                synthesized: true,
            }
        );
        assert_eq!(one.maps[1].path, ANON_NAME);
        assert_eq!(one.maps[2].path, b"[vdso]");
        let all = MapsSynthesis::read(dir.path(), None, 99, &mut ids);
        assert_eq!((all.processes, all.unreadable), (1, 1));
        assert_eq!(all.maps.len(), 3);
        assert_eq!(ids.reads(), 1, "one file, read once");
    }

    /// A minimal ELF file: the header, one `PT_NOTE` program header, and its notes (a first
    /// note that is not a build-id, then the build-id `0xde 0xad 0xbe 0xef`).
    fn tiny_elf(wide: bool, little: bool) -> Vec<u8> {
        let mut notes = Vec::new();
        let push32 = |v: &mut Vec<u8>, x: u32| {
            v.extend_from_slice(&if little {
                x.to_le_bytes()
            } else {
                x.to_be_bytes()
            })
        };
        for (kind, desc) in [
            (1u32, &[9u8, 9, 9, 9][..]),
            (NT_GNU_BUILD_ID, &[0xde, 0xad, 0xbe, 0xef][..]),
        ] {
            push32(&mut notes, 4);
            push32(&mut notes, desc.len() as u32);
            push32(&mut notes, kind);
            notes.extend_from_slice(b"GNU\0");
            notes.extend_from_slice(desc);
        }
        let (ehsize, phentsize) = if wide { (64u64, 56u64) } else { (52, 32) };
        let notes_at = ehsize + phentsize;
        let mut f = vec![0u8; notes_at as usize];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = if wide { 2 } else { 1 };
        f[5] = if little { 1 } else { 2 };
        let put = |f: &mut Vec<u8>, at: usize, bytes: usize, x: u64| {
            let b = if little {
                x.to_le_bytes()
            } else {
                x.to_be_bytes()
            };
            let b = if little { &b[..bytes] } else { &b[8 - bytes..] };
            f[at..at + bytes].copy_from_slice(b);
        };
        let ph = ehsize as usize;
        if wide {
            put(&mut f, 32, 8, ehsize);
            put(&mut f, 54, 2, phentsize);
            put(&mut f, 56, 2, 1);
            put(&mut f, ph, 4, u64::from(PT_NOTE));
            put(&mut f, ph + 8, 8, notes_at);
            put(&mut f, ph + 32, 8, notes.len() as u64);
            put(&mut f, ph + 48, 8, 4);
        } else {
            put(&mut f, 28, 4, ehsize);
            put(&mut f, 42, 2, phentsize);
            put(&mut f, 44, 2, 1);
            put(&mut f, ph, 4, u64::from(PT_NOTE));
            put(&mut f, ph + 4, 4, notes_at);
            put(&mut f, ph + 16, 4, notes.len() as u64);
            put(&mut f, ph + 28, 4, 4);
        }
        f.extend_from_slice(&notes);
        f
    }

    fn build_id_of_bytes(data: &[u8]) -> Option<Vec<u8>> {
        elf_build_id(|offset, buf| {
            let Some(end) = (offset as usize).checked_add(buf.len()) else {
                return false;
            };
            match data.get(offset as usize..end) {
                Some(src) => {
                    buf.copy_from_slice(src);
                    true
                }
                None => false,
            }
        })
    }

    #[test]
    fn build_id_of_synthetic_elf_files_in_every_class_and_byte_order() {
        for wide in [false, true] {
            for little in [false, true] {
                let f = tiny_elf(wide, little);
                assert_eq!(
                    build_id_of_bytes(&f),
                    Some(vec![0xde, 0xad, 0xbe, 0xef]),
                    "wide {wide} little {little}"
                );
                // Every truncation is refused or still finds the id; none panics.
                for len in 0..f.len() {
                    let got = build_id_of_bytes(&f[..len]);
                    assert!(got.is_none(), "truncated at {len}: {got:?}");
                }
            }
        }
        assert_eq!(
            build_id_of_bytes(b"not an ELF file at all, really not one"),
            None
        );
    }

    /// A traced process reads the build-id of every file it has mapped when its capture
    /// starts: the header, the program header table and the notes, one read each.
    #[test]
    fn a_build_id_takes_three_reads() {
        for wide in [false, true] {
            let f = tiny_elf(wide, true);
            let reads = std::cell::Cell::new(0);
            let id = elf_build_id(|offset, buf| {
                reads.set(reads.get() + 1);
                let end = offset as usize + buf.len();
                f.get(offset as usize..end)
                    .map(|src| buf.copy_from_slice(src))
                    .is_some()
            });
            assert_eq!(id, Some(vec![0xde, 0xad, 0xbe, 0xef]));
            // An ELF32 file shorter than 64 bytes would take one more.
            assert!(
                reads.get() <= 3 + usize::from(!wide),
                "{} reads",
                reads.get()
            );
        }
    }

    #[test]
    fn build_id_of_this_test_binary_matches_readelf() {
        let exe = std::env::current_exe().unwrap();
        assert_eq!(read_build_id(Path::new("/nonexistent")), None);
        let Ok(out) = std::process::Command::new("readelf")
            .arg("-n")
            .arg(&exe)
            .output()
        else {
            crate::test_support::skip(
                crate::test_support::Requirement::Tools,
                "readelf is not installed (binutils), the build-id is not cross-checked",
            );
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let want = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .map(|hex| {
                (0..hex.len() / 2)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                    .collect::<Vec<u8>>()
            });
        assert_eq!(read_build_id(&exe), want);
    }
}

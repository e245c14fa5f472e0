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
    let text = fs::read(proc_root.join(pid.to_string()).join("maps"))?;
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
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    use object::Object;
    let id = elf.build_id().ok()??;
    Some(id.to_vec())
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
                let build_id = build_ids.get(&path, Some((line.major, line.minor, line.inode)));
                out.maps.push(MemoryMap {
                    time,
                    pid,
                    tid: pid,
                    start: line.start,
                    len: line.end.saturating_sub(line.start),
                    pgoff: line.offset,
                    path,
                    build_id,
                    synthesized: true,
                });
            }
        }
        out
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

    #[test]
    fn build_id_of_this_test_binary_matches_object() {
        let exe = std::env::current_exe().unwrap();
        let data = fs::read(&exe).unwrap();
        use object::Object;
        let want = object::File::parse(&*data)
            .unwrap()
            .build_id()
            .unwrap()
            .map(<[u8]>::to_vec);
        assert_eq!(read_build_id(&exe), want);
        assert_eq!(read_build_id(Path::new("/nonexistent")), None);
    }
}

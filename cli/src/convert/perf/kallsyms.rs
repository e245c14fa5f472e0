//! The recording kernel's symbols, to name the kernel frames of imported call chains.
//!
//! A perf.data holds no kernel symbols: only the kernel's build-id (its build-id section, for
//! the file `[kernel.kallsyms]`) and where its text was (the `[kernel.kallsyms]_text`
//! mapping). perf itself finds the symbols by that build-id, and so does the import, in
//! perf's order:
//!
//! 1. a file the user names (`import-perf --kallsyms FILE`, as `perf report --kallsyms`);
//! 2. perf's build-id cache, where `perf record` copies `/proc/kallsyms` of the kernel it
//!    recorded: `$PERF_BUILDID_DIR`, else `~/.debug`, then `[kernel.kallsyms]/<build-id>/kallsyms`;
//! 3. `/proc/kallsyms`, when the running kernel has that build-id (`/sys/kernel/notes`), or
//!    when the recording names none (a stream from `perf record -o -`: perf then assumes the
//!    running kernel too, and the summary says so).
//!
//! Otherwise kernel frames stay addresses, and the summary says why. The replay moves the
//! symbols to the recording's kernel address ([`fxtrace::capture::Replay::set_kernel_symbols`]),
//! so a cached copy from another boot of the same kernel names the frames too.

use std::path::{Path, PathBuf};

/// Which kernel symbols to use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KallsymsChoice {
    /// Found by the recording's kernel build-id (see the module docs).
    #[default]
    Auto,
    /// This file (a copy of `/proc/kallsyms` of the recording kernel).
    File(PathBuf),
    /// None: kernel frames stay addresses.
    Off,
}

/// Kernel symbols found: their text and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundKallsyms {
    /// The file's text (`/proc/kallsyms` lines).
    pub text: String,
    /// Where it came from, as the summary says it.
    pub from: String,
}

/// `/sys/kernel/notes`: the running kernel's ELF notes.
const KERNEL_NOTES: &str = "/sys/kernel/notes";
/// The running kernel's symbols.
const PROC_KALLSYMS: &str = "/proc/kallsyms";
/// Bytes of a kallsyms read at most (a kernel's is 5 to 20 MB).
const MAX_KALLSYMS: u64 = 256 << 20;

/// The kernel symbols for a recording whose kernel has `build_id` (`None`: the recording names
/// none), per `choice`; else why there are none.
pub fn find_kallsyms(
    choice: &KallsymsChoice,
    build_id: Option<&[u8]>,
) -> Result<FoundKallsyms, String> {
    match choice {
        KallsymsChoice::Off => Err("not looked for (--kallsyms none)".into()),
        KallsymsChoice::File(path) => read_kallsyms(path).map(|text| FoundKallsyms {
            text,
            from: path.display().to_string(),
        }),
        KallsymsChoice::Auto => auto(build_id),
    }
}

fn auto(build_id: Option<&[u8]>) -> Result<FoundKallsyms, String> {
    let running = std::fs::read(KERNEL_NOTES)
        .ok()
        .and_then(|notes| gnu_build_id(&notes).map(<[u8]>::to_vec));
    let Some(id) = build_id else {
        return read_kallsyms(Path::new(PROC_KALLSYMS))
            .map(|text| FoundKallsyms {
                text,
                from: format!(
                    "{PROC_KALLSYMS} (the recording names no kernel build-id: this machine's \
                     running kernel is assumed, as perf assumes it)"
                ),
            })
            .map_err(|e| format!("the recording names no kernel build-id, and {e}"));
    };
    let hex = hex(id);
    let mut tried = Vec::new();
    if let Some(dir) = buildid_dir() {
        let cached = dir.join("[kernel.kallsyms]").join(&hex).join("kallsyms");
        match read_kallsyms(&cached) {
            Ok(text) => {
                return Ok(FoundKallsyms {
                    text,
                    from: format!("perf's build-id cache ({})", cached.display()),
                })
            }
            Err(e) => tried.push(e),
        }
    }
    if running.as_deref() == Some(id) {
        return read_kallsyms(Path::new(PROC_KALLSYMS)).map(|text| FoundKallsyms {
            text,
            from: format!(
                "{PROC_KALLSYMS} (the running kernel is the recording's, build-id {hex})"
            ),
        });
    }
    tried.push(match running {
        Some(r) => format!("the running kernel is another (build-id {})", self::hex(&r)),
        None => format!("the running kernel's build-id is unknown ({KERNEL_NOTES})"),
    });
    Err(format!(
        "no symbols of the recording's kernel (build-id {hex}): {}; give them with --kallsyms \
         FILE (a copy of /proc/kallsyms made on the recording machine)",
        tried.join("; ")
    ))
}

/// perf's build-id cache: `$PERF_BUILDID_DIR`, else `$HOME/.debug`.
fn buildid_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PERF_BUILDID_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".debug"))
}

/// A kallsyms file's text, at most [`MAX_KALLSYMS`] bytes.
fn read_kallsyms(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_KALLSYMS)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text)
}

/// The GNU build-id note (type 3, name `GNU`) of ELF notes (`/sys/kernel/notes`): each
/// `u32 namesz, u32 descsz, u32 type`, then the name and the descriptor, each padded to 4
/// bytes.
pub fn gnu_build_id(notes: &[u8]) -> Option<&[u8]> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let pad = |n: usize| n.checked_add(3).map(|n| n & !3);
    let mut at = 0usize;
    while let Some(header) = notes.get(at..at.checked_add(12)?) {
        let word = |i: usize| u32::from_ne_bytes(header[i..i + 4].try_into().unwrap_or([0; 4]));
        let (namesz, descsz, kind) = (word(0) as usize, word(4) as usize, word(8));
        let name_at = at + 12;
        let desc_at = name_at.checked_add(pad(namesz)?)?;
        let end = desc_at.checked_add(pad(descsz)?)?;
        let name = notes.get(name_at..name_at.checked_add(namesz)?)?;
        let desc = notes.get(desc_at..desc_at.checked_add(descsz)?)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(desc);
        }
        at = end;
    }
    None
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        for part in [name, desc] {
            out.extend_from_slice(part);
            out.resize(out.len().next_multiple_of(4), 0);
        }
        out
    }

    #[test]
    fn the_gnu_build_id_note_among_others() {
        let mut notes = note(b"Xen\0", 6, b"linux");
        notes.extend(note(b"GNU\0", 1, &[9; 4]));
        notes.extend(note(b"GNU\0", 3, &[0x48, 0xdc, 0x54]));
        assert_eq!(gnu_build_id(&notes), Some(&[0x48, 0xdc, 0x54][..]));
        assert_eq!(gnu_build_id(&notes[..notes.len() - 2]), None, "cut short");
        assert_eq!(gnu_build_id(&note(b"Linux\0", 3, &[1])), None);
        let mut lying = note(b"GNU\0", 3, &[1, 2, 3, 4]);
        lying[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(gnu_build_id(&lying), None);
        assert_eq!(hex(&[0x0a, 0xff]), "0aff");
    }

    #[test]
    fn a_named_file_or_none() {
        let dir = std::env::temp_dir().join(format!("fxtrace-kallsyms-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("kallsyms");
        std::fs::write(&file, "ffffffff81000000 T _text\n").unwrap();
        let found = find_kallsyms(&KallsymsChoice::File(file.clone()), None).unwrap();
        assert_eq!(found.text, "ffffffff81000000 T _text\n");
        assert_eq!(found.from, file.display().to_string());
        assert!(
            find_kallsyms(&KallsymsChoice::File(dir.join("absent")), None)
                .unwrap_err()
                .contains("absent")
        );
        assert!(find_kallsyms(&KallsymsChoice::Off, Some(&[1]))
            .unwrap_err()
            .contains("--kallsyms none"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}

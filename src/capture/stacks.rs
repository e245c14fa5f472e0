//! Call chains interned: each distinct chain gets an id the first time it is seen, and every
//! event carrying it (a switch's wait point, a CPU sample) refers to it by that id. The
//! capture thread announces a stack (and the kernel symbols its kernel frames fall in,
//! [`super::kernel_symbols`]) before the first event that refers to it, as it announces
//! threads ([`super::events::StackInfo`], [`super::events::KernelSymbol`]). A shared symbol
//! table with a bad entry is replaced, at that entry's first use, by the symbols of the
//! fallback file (`/proc/kallsyms`), and a note says so.
//!
//! A perf call chain (`PERF_SAMPLE_CALLCHAIN`) is `nr` instruction pointers, innermost first,
//! with context markers (`PERF_CONTEXT_KERNEL`, `PERF_CONTEXT_USER`, … : values of the last
//! page of the address space) saying which part the frames after them are in. Interned
//! stacks keep the kernel frames, then the user ones, without the markers; guest and
//! hypervisor frames are dropped.
//!
//! Bounds: at most [`MAX_STACK_BYTES`] of frames are kept. Past it a new chain is not
//! interned: its event goes without a stack and is counted
//! ([`super::CaptureStats::stacks_not_interned`]).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::path::PathBuf;
use std::sync::Arc;

use super::events::{KernelSymbol, StackInfo, Unsupported};
use super::ids::IdHasher;
use super::kernel_symbols::{KernelSymbols, KernelSymbolsError};

/// The most frames one interned stack keeps (the format's limit,
/// [`crate::format::stack::STACK_MAX_FRAMES`]).
pub(crate) const MAX_FRAMES: usize = crate::format::stack::STACK_MAX_FRAMES;
/// Bytes of frames the interner keeps at most (a bound on the memory of a long capture with
/// many distinct stacks; in the preload object this memory is the traced program's).
pub(crate) const MAX_STACK_BYTES: usize = 32 << 20;
/// The call chain depth asked of the kernel (`sample_max_stack`): perf's default is 127; a
/// wait point or a sample rarely needs more, and each frame costs the kernel a read.
pub(crate) const CHAIN_DEPTH: u16 = 64;

/// `PERF_CONTEXT_MAX` (-4095): call chain entries at or above it are context markers.
const CONTEXT_MAX: u64 = (-4095i64) as u64;
/// `PERF_CONTEXT_KERNEL`.
const CONTEXT_KERNEL: u64 = (-128i64) as u64;
/// `PERF_CONTEXT_USER`.
const CONTEXT_USER: u64 = (-512i64) as u64;

/// A call chain with its markers removed: kernel frames first, then user frames.
#[derive(Debug)]
pub(crate) struct Chain {
    frames: [u64; MAX_FRAMES],
    len: usize,
    kernel: usize,
}

impl Chain {
    /// The chain of `ips` (perf's order and markers; frames beyond [`MAX_FRAMES`] dropped).
    /// A chain without markers is taken as kernel frames when they are kernel addresses.
    pub(crate) fn of(ips: impl Iterator<Item = u64>) -> Self {
        #[derive(PartialEq)]
        enum Part {
            Kernel,
            User,
            Other,
        }
        let mut chain = Chain {
            frames: [0; MAX_FRAMES],
            len: 0,
            kernel: 0,
        };
        let mut part = None;
        for ip in ips {
            if ip >= CONTEXT_MAX {
                part = Some(match ip {
                    CONTEXT_KERNEL => Part::Kernel,
                    CONTEXT_USER => Part::User,
                    _ => Part::Other,
                });
                continue;
            }
            // Before any marker, a frame's address says which part it is in.
            let by_address = if ip >= 1 << 63 {
                Part::Kernel
            } else {
                Part::User
            };
            let part = part.as_ref().unwrap_or(&by_address);
            if *part == Part::Other || chain.len == MAX_FRAMES {
                continue;
            }
            // Kernel frames come first in perf's chains; one after a user frame is dropped
            // rather than reordered.
            if *part == Part::Kernel {
                if chain.kernel < chain.len {
                    continue;
                }
                chain.kernel += 1;
            }
            chain.frames[chain.len] = ip;
            chain.len += 1;
        }
        chain
    }

    /// The chain of a call chain as the ring holds it (`nr` native-endian `u64`s).
    pub(crate) fn of_ring_bytes(bytes: &[u8]) -> Self {
        Self::of(
            bytes
                .chunks_exact(8)
                .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8]))),
        )
    }

    /// The frames.
    pub(crate) fn frames(&self) -> &[u64] {
        &self.frames[..self.len]
    }

    fn hash(&self) -> u64 {
        self.frames()
            .iter()
            .fold(self.kernel as u64 ^ 0x5bd1_e995, |h, &ip| {
                (h.rotate_left(23) ^ ip).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            })
    }
}

#[derive(Debug)]
struct Interned {
    hash: u64,
    /// The next id with the same hash (0: none).
    next: u32,
    kernel: u16,
    frames: Arc<[u64]>,
    announced: bool,
}

/// The interned stacks of a capture, and the kernel symbols to name their kernel frames.
#[derive(Debug, Default)]
pub(crate) struct StackInterner {
    /// Hash → the newest id with that hash (the others chained through `next`).
    by_hash: HashMap<u64, u32, BuildHasherDefault<IdHasher>>,
    /// Id `n` is `stacks[n - 1]`.
    stacks: Vec<Interned>,
    bytes: usize,
    limit: usize,
    /// Chains not interned for want of room.
    pub(crate) not_interned: u64,
    symbols: Option<KernelSymbols>,
    symbols_announced: Vec<bool>,
    /// Where symbols are read from when the table in use has a bad entry (a shared table's
    /// `/proc/kallsyms`); taken at that first use.
    fallback: Option<PathBuf>,
    /// What happened to a table with a bad entry, for the capture to deliver.
    pub(crate) symbols_note: Option<Unsupported>,
}

impl StackInterner {
    /// An interner keeping at most `limit` bytes of frames, naming kernel frames with
    /// `symbols`.
    pub(crate) fn new(limit: usize, symbols: Option<KernelSymbols>) -> Self {
        let announced = symbols.as_ref().map_or(0, KernelSymbols::len);
        Self {
            limit,
            symbols,
            symbols_announced: vec![false; announced],
            ..Self::default()
        }
    }

    /// The id of `chain` (interning it if new); `None` for an empty chain or when there is
    /// no room for a new one (counted).
    pub(crate) fn intern(&mut self, chain: &Chain) -> Option<u32> {
        if chain.len == 0 {
            return None;
        }
        let hash = chain.hash();
        let head = self.by_hash.get(&hash).copied().unwrap_or(0);
        let mut id = head;
        while id != 0 {
            let s = &self.stacks[id as usize - 1];
            if s.hash == hash
                && usize::from(s.kernel) == chain.kernel
                && *s.frames == *chain.frames()
            {
                return Some(id);
            }
            id = s.next;
        }
        let bytes = 8 * chain.len + std::mem::size_of::<Interned>();
        let Ok(new) = u32::try_from(self.stacks.len() + 1) else {
            self.not_interned += 1;
            return None;
        };
        if self.bytes + bytes > self.limit {
            self.not_interned += 1;
            return None;
        }
        self.bytes += bytes;
        self.stacks.push(Interned {
            hash,
            next: head,
            kernel: chain.kernel as u16,
            frames: Arc::from(chain.frames()),
            announced: false,
        });
        self.by_hash.insert(hash, new);
        Some(new)
    }

    /// Symbols are read from `path` if the table given turns out to have a bad entry.
    pub(crate) fn with_fallback(self, path: Option<PathBuf>) -> Self {
        Self {
            fallback: path,
            ..self
        }
    }

    /// Names the kernel frames of the stacks announced from now on with `symbols` (a
    /// recording's, known only once its records began: [`super::Replay`]).
    pub(crate) fn set_symbols(&mut self, symbols: KernelSymbols) {
        self.symbols_announced = vec![false; symbols.len()];
        self.symbols = Some(symbols);
    }

    /// Distinct stacks interned.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.stacks.len()
    }

    /// The announcements stack `id` needs before its first use: the kernel symbols of its
    /// kernel frames not announced yet, then the stack itself. Nothing once it was announced
    /// (or for an unknown id).
    pub(crate) fn announce(
        &mut self,
        id: u32,
        mut symbol: impl FnMut(KernelSymbol),
    ) -> Option<StackInfo> {
        let s = self.stacks.get_mut((id as usize).checked_sub(1)?)?;
        if s.announced {
            return None;
        }
        s.announced = true;
        let info = StackInfo {
            id,
            kernel_frames: s.kernel,
            frames: s.frames.clone(),
        };
        let kernel = &info.frames[..usize::from(info.kernel_frames)];
        if let Err(broken) = self.name_frames(kernel, &mut symbol) {
            self.replace_symbols(broken);
            // The fallback is parsed here: its entries are well-formed.
            let _ = self.name_frames(kernel, &mut symbol);
        }
        Some(info)
    }

    /// Announces the symbols of `frames` not announced yet; `Err` at the first bad entry of
    /// the table (the symbols before it were announced).
    fn name_frames(
        &mut self,
        frames: &[u64],
        symbol: &mut impl FnMut(KernelSymbol),
    ) -> Result<(), KernelSymbolsError> {
        let Some(symbols) = &self.symbols else {
            return Ok(());
        };
        for &ip in frames {
            let Some(i) = symbols.find(ip) else {
                continue;
            };
            if self.symbols_announced.get(i) == Some(&false) {
                symbol(symbols.symbol(i)?);
                self.symbols_announced[i] = true;
            }
        }
        Ok(())
    }

    /// The table in use has a bad entry: read the fallback's symbols (or name no frame from
    /// now on), and note it.
    fn replace_symbols(&mut self, broken: KernelSymbolsError) {
        let (symbols, outcome) = match self.fallback.take() {
            Some(path) => match KernelSymbols::read(&path) {
                Ok(s) => (Some(s), format!("read {} instead", path.display())),
                Err(e) => (None, format!("{e}; kernel frames stay addresses")),
            },
            None => (None, "kernel frames stay addresses".to_owned()),
        };
        self.symbols_announced = vec![false; symbols.as_ref().map_or(0, KernelSymbols::len)];
        self.symbols = symbols;
        let text = format!("{broken}; {outcome}");
        self.symbols_note = Some(Unsupported {
            what: "shared kernel symbols".into(),
            errno: None,
            summary: text.clone(),
            hint: text,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: u64 = CONTEXT_KERNEL;
    const USER: u64 = CONTEXT_USER;

    #[test]
    fn chains_lose_their_markers_and_keep_kernel_then_user() {
        let c = Chain::of(
            [
                KERNEL,
                0xffff_ffff_8100_0010,
                0xffff_ffff_8100_0020,
                USER,
                0x40_1000,
            ]
            .into_iter(),
        );
        assert_eq!(
            c.frames(),
            &[0xffff_ffff_8100_0010, 0xffff_ffff_8100_0020, 0x40_1000]
        );
        assert_eq!(c.kernel, 2);
        let user_only = Chain::of([USER, 0x40_1000, 0x40_2000].into_iter());
        assert_eq!((user_only.len, user_only.kernel), (2, 0));
        // Guest frames (PERF_CONTEXT_GUEST, -2048) are dropped.
        let guest = Chain::of([(-2048i64) as u64, 0x1234, USER, 0x40_1000].into_iter());
        assert_eq!(guest.frames(), &[0x40_1000]);
        // No markers: classified by address.
        assert_eq!(
            Chain::of([0xffff_ffff_8100_0000, 0x40_0000].into_iter()).kernel,
            1
        );
        // Too deep: cut at MAX_FRAMES.
        let deep = Chain::of(std::iter::once(USER).chain((1..=1000u64).map(|i| i * 16)));
        assert_eq!(deep.len, MAX_FRAMES);
        let bytes: Vec<u8> = [KERNEL, 0xffff_ffff_8100_0010]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        assert_eq!(
            Chain::of_ring_bytes(&bytes).frames(),
            &[0xffff_ffff_8100_0010]
        );
    }

    #[test]
    fn each_distinct_chain_is_interned_once_and_announced_once() {
        let mut i = StackInterner::new(MAX_STACK_BYTES, None);
        let a = Chain::of([KERNEL, 0xffff_ffff_8100_0010, USER, 0x40_1000].into_iter());
        let b = Chain::of([KERNEL, 0xffff_ffff_8100_0010].into_iter());
        let a_id = i.intern(&a).unwrap();
        assert_eq!(i.intern(&a), Some(a_id), "the same chain: the same id");
        let b_id = i.intern(&b).unwrap();
        assert_ne!(a_id, b_id);
        assert_eq!(i.len(), 2);
        assert_eq!(i.intern(&Chain::of(std::iter::empty())), None);
        let info = i.announce(a_id, |_| panic!("no symbols")).unwrap();
        assert_eq!(
            (info.id, info.kernel_frames, &info.frames[..]),
            (a_id, 1, a.frames())
        );
        assert!(i.announce(a_id, |_| {}).is_none(), "once");
        assert!(i.announce(99, |_| {}).is_none());
    }

    #[test]
    fn hash_collisions_are_told_apart_by_their_frames() {
        let mut i = StackInterner::new(MAX_STACK_BYTES, None);
        let a = Chain::of([USER, 1, 2].into_iter());
        let b = Chain::of([USER, 3, 4].into_iter());
        let a_id = i.intern(&a).unwrap();
        // Force b into a's bucket, as a collision would.
        let hash = a.hash();
        i.stacks.push(Interned {
            hash,
            next: a_id,
            kernel: 0,
            frames: Arc::from(b.frames()),
            announced: false,
        });
        let b_id = i.stacks.len() as u32;
        i.by_hash.insert(hash, b_id);
        assert_eq!(i.intern(&a), Some(a_id));
        assert_eq!(i.intern(&Chain::of([USER, 1, 2].into_iter())), Some(a_id));
    }

    #[test]
    fn the_byte_bound_refuses_new_chains_and_counts_them() {
        let one = 8 * 2 + std::mem::size_of::<Interned>();
        let mut i = StackInterner::new(one, None);
        assert!(i.intern(&Chain::of([USER, 1, 2].into_iter())).is_some());
        assert_eq!(i.intern(&Chain::of([USER, 3, 4].into_iter())), None);
        assert_eq!(i.not_interned, 1);
        assert!(
            i.intern(&Chain::of([USER, 1, 2].into_iter())).is_some(),
            "known ones still resolve"
        );
    }

    const TEXT: &str = "\
ffffffff8143fc90 T futex_wait
ffffffff81000000 T _stext
ffffffff821f8540 t __schedule
ffffffffc0a01000 t kvm_vcpu_block\t[kvm]
";

    /// Interns two stacks over [`TEXT`]'s symbols and announces them: the names announced.
    fn announce_two(interner: &mut StackInterner) -> Vec<String> {
        let a = interner
            .intern(&Chain::of(
                [
                    KERNEL,
                    0xffff_ffff_821f_8550,
                    0xffff_ffff_8143_fca0,
                    USER,
                    0x40_1000,
                ]
                .into_iter(),
            ))
            .unwrap();
        let b = interner
            .intern(&Chain::of(
                [KERNEL, 0xffff_ffff_821f_8560, 0xffff_ffff_8100_0100].into_iter(),
            ))
            .unwrap();
        let mut names = Vec::new();
        for id in [a, b] {
            interner
                .announce(id, |k| names.push(k.name.to_string()))
                .unwrap();
        }
        names
    }

    #[test]
    fn kernel_symbols_are_announced_once() {
        let s = KernelSymbols::parse(TEXT);
        let mut interner = StackInterner::new(MAX_STACK_BYTES, Some(s));
        assert_eq!(
            announce_two(&mut interner),
            ["__schedule", "futex_wait", "_stext"],
            "each symbol once"
        );
        assert!(interner.symbols_note.is_none());
    }

    #[test]
    fn a_table_with_a_bad_entry_gives_way_to_the_fallback_file_with_a_note() {
        let good = KernelSymbols::parse(TEXT);
        // `futex_wait` (index 1 by address) names a module the table does not have.
        let mut bytes = good.table().to_vec();
        // The table's layout (`kernel_symbols`' docs): 32-byte header, addresses, string
        // ends (4 names, 1 module), then each symbol's module.
        let module_of = 32 + 8 * 4 + 4 * (4 + 1);
        bytes[module_of + 4..][..4].copy_from_slice(&7u32.to_le_bytes());
        let bad = KernelSymbols::from_table(bytes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kallsyms");
        std::fs::write(&file, TEXT).unwrap();
        let mut interner =
            StackInterner::new(MAX_STACK_BYTES, Some(bad.clone())).with_fallback(Some(file));
        assert_eq!(
            announce_two(&mut interner),
            ["__schedule", "__schedule", "futex_wait", "_stext"],
            "named from the file from the bad entry on"
        );
        let note = interner.symbols_note.take().unwrap();
        assert!(
            note.summary.contains("entry 1") && note.summary.contains("instead"),
            "{}",
            note.summary
        );
        // No fallback: the frames stay addresses, said once.
        let mut interner = StackInterner::new(MAX_STACK_BYTES, Some(bad));
        assert_eq!(announce_two(&mut interner), ["__schedule"]);
        let note = interner.symbols_note.take().unwrap();
        assert!(note.summary.ends_with("kernel frames stay addresses"));
    }
}

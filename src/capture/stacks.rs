//! Call chains interned: each distinct chain gets an id the first time it is seen, and every
//! event carrying it (a switch's wait point, a CPU sample) refers to it by that id. The
//! capture thread announces a stack (and the kernel symbols its kernel frames fall in, from
//! `/proc/kallsyms` read when the capture started) before the first event that refers to it,
//! as it announces threads ([`super::events::StackInfo`], [`super::events::KernelSymbol`]).
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
use std::path::Path;
use std::sync::Arc;

use super::events::{KernelSymbol, StackInfo};
use super::ids::IdHasher;

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
        if let Some(symbols) = &self.symbols {
            for &ip in &s.frames[..usize::from(s.kernel)] {
                if let Some(i) = symbols.find(ip) {
                    if !std::mem::replace(&mut self.symbols_announced[i], true) {
                        symbol(symbols.symbol(i));
                    }
                }
            }
        }
        Some(StackInfo {
            id,
            kernel_frames: s.kernel,
            frames: s.frames.clone(),
        })
    }
}

// === impl KernelSymbols ===

/// The text symbols of `/proc/kallsyms`, sorted by address.
#[derive(Debug)]
pub(crate) struct KernelSymbols {
    /// The file's text, names sliced out of it.
    text: String,
    /// (address, name start, name end, module start, module end) into `text`; the module
    /// range is empty for the kernel's own symbols.
    entries: Vec<(u64, u32, u32, u32, u32)>,
}

/// Why `/proc/kallsyms` gave no symbols.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KallsymsError {
    /// It could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Every address reads 0 (`kernel.kptr_restrict` hides them from this user).
    #[error("{path} shows every address as 0 (kernel.kptr_restrict hides them; run as root)")]
    Hidden {
        /// The file.
        path: String,
    },
}

impl KernelSymbols {
    /// Reads `path` (`/proc/kallsyms`).
    pub(crate) fn read(path: &Path) -> Result<Self, KallsymsError> {
        let text = std::fs::read_to_string(path).map_err(|source| KallsymsError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let symbols = Self::parse(text);
        if symbols.entries.is_empty() {
            return Err(KallsymsError::Hidden {
                path: path.display().to_string(),
            });
        }
        Ok(symbols)
    }

    /// The text symbols (types `t`, `T`, `w`, `W`) with a nonzero address of a kallsyms text.
    pub(crate) fn parse(text: String) -> Self {
        let mut entries = Vec::new();
        let base = text.as_ptr() as usize;
        let at = |s: &str| (s.as_ptr() as usize - base) as u32;
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
            if addr == 0 || name.len() > 255 {
                continue;
            }
            let module = parts.next().unwrap_or("");
            entries.push((
                addr,
                at(name),
                at(name) + name.len() as u32,
                if module.is_empty() { 0 } else { at(module) },
                if module.is_empty() {
                    0
                } else {
                    at(module) + module.len() as u32
                },
            ));
        }
        entries.sort_by_key(|e| e.0);
        Self { text, entries }
    }

    /// The address of the symbol named `name` (the first one of that name).
    pub(crate) fn address_of(&self, name: &str) -> Option<u64> {
        self.entries
            .iter()
            .find(|e| &self.text[e.1 as usize..e.2 as usize] == name)
            .map(|e| e.0)
    }

    /// The kernel's own symbols moved by `by` (wrapping): the symbols of a kernel as another
    /// boot loaded it (KASLR). Modules load at addresses of their own each boot: their
    /// symbols are dropped (their frames stay addresses).
    pub(crate) fn relocate(&mut self, by: u64) {
        if by == 0 {
            return;
        }
        self.entries.retain(|e| e.4 == 0);
        for e in &mut self.entries {
            e.0 = e.0.wrapping_add(by);
        }
        self.entries.sort_by_key(|e| e.0);
    }

    /// Symbols kept.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The index of the symbol `ip` falls in: the last one at or below it (`None` below the
    /// first).
    pub(crate) fn find(&self, ip: u64) -> Option<usize> {
        self.entries.partition_point(|e| e.0 <= ip).checked_sub(1)
    }

    /// Symbol `i`: its address, the bytes up to the next symbol, and its name (`name
    /// [module]` for a module's).
    pub(crate) fn symbol(&self, i: usize) -> KernelSymbol {
        let (start, n0, n1, m0, m1) = self.entries[i];
        let name = &self.text[n0 as usize..n1 as usize];
        let name: Arc<str> = if m1 > m0 {
            format!("{name} {}", &self.text[m0 as usize..m1 as usize]).into()
        } else {
            name.into()
        };
        // The last symbol covers up to the next page: kallsyms gives no size.
        let end = self
            .entries
            .get(i + 1)
            .map_or(start.saturating_add(4096), |e| e.0);
        KernelSymbol {
            start,
            len: end - start,
            name,
        }
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

    #[test]
    fn kallsyms_text_symbols_sorted_and_announced_once() {
        let text = "\
ffffffff8143fc90 T futex_wait
ffffffff81000000 T _stext
ffffffff821f8540 t __schedule
ffffffff821f8000 d some_data
0000000000000000 A fixed_percpu_data
ffffffffc0a01000 t kvm_vcpu_block\t[kvm]
"
        .to_owned();
        let s = KernelSymbols::parse(text);
        assert_eq!(s.len(), 4, "text symbols only");
        let i = s.find(0xffff_ffff_8143_fca0).unwrap();
        let sym = s.symbol(i);
        assert_eq!(
            (sym.start, &*sym.name),
            (0xffff_ffff_8143_fc90, "futex_wait")
        );
        assert_eq!(sym.len, 0xffff_ffff_821f_8540 - 0xffff_ffff_8143_fc90);
        assert_eq!(s.find(0xffff_ffff_8000_0000), None);
        let kvm = s.symbol(s.find(0xffff_ffff_c0a0_1010).unwrap());
        assert_eq!((&*kvm.name, kvm.len), ("kvm_vcpu_block [kvm]", 4096));
        let mut interner = StackInterner::new(MAX_STACK_BYTES, Some(s));
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
        interner
            .announce(a, |k| names.push(k.name.to_string()))
            .unwrap();
        interner
            .announce(b, |k| names.push(k.name.to_string()))
            .unwrap();
        assert_eq!(
            names,
            ["__schedule", "futex_wait", "_stext"],
            "each symbol once"
        );
        let hidden = KernelSymbols::parse("0000000000000000 T futex_wait\n".to_owned());
        assert_eq!(hidden.len(), 0);
    }

    #[test]
    fn kallsyms_of_another_boot_moved_without_their_modules() {
        let mut s = KernelSymbols::parse(
            "ffffffff81000000 T _text\nffffffff81000100 T hot\nffffffffc0a01000 t m\t[kvm]\n"
                .to_owned(),
        );
        assert_eq!(s.address_of("hot"), Some(0xffff_ffff_8100_0100));
        assert_eq!(s.address_of("absent"), None);
        s.relocate(0);
        assert_eq!(s.len(), 3, "not moved: kept whole");
        s.relocate((-0x10_0000i64) as u64);
        assert_eq!(s.len(), 2, "the module's symbol dropped");
        let hot = s.symbol(s.find(0xffff_ffff_80f0_0110).unwrap());
        assert_eq!((&*hot.name, hot.start), ("hot", 0xffff_ffff_80f0_0100));
    }
}

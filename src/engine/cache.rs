//! Per-thread caches of string refs, category answers and the thread's own ref, valid for one
//! trace generation (Fuchsia's `ContextCache` / `GetCurrentContextCache`,
//! `zircon/system/ulib/trace-engine/context_api.cc`).
//!
//! Algorithm: a fixed open-addressing hash table (linear probing) keyed by the *address and
//! length* of a `&'static str`, as Fuchsia keys its table by the literal's address: the same
//! literal always has the same address, and a `'static` string's bytes never change, so the
//! address identifies the text. No entry is ever removed during a generation, which keeps
//! linear probing correct without tombstones; a new generation clears the table.
//!
//! Limits (as Fuchsia): at most [`MAX_STRING_ENTRIES`] strings per thread per generation; past
//! that, strings are written inline (and category answers are not cached). The table has
//! twice as many slots as entries, so probes stay short.
//!
//! Rules for the generation: a thread's cache belongs to the newest generation it has seen. A
//! writer of that generation uses it; a writer of an *older* generation (another context still
//! running, or a stale section) gets no cache at all (inline refs, uncached category checks),
//! exactly as `GetCurrentContextCache` returns null; a writer of a newer generation resets it.
//! Generations are unique in the process (`engine::context`), so one number identifies both
//! the context and its trace.
//!
//! The event memo: in front of the table, a small direct-mapped array remembers, per
//! (category, name) pair of `&'static str`s, the three indices an event of that pair writes
//! (category, name, thread) in one generation, so that a repeated call site needs no table
//! probe at all: one slot picked by address bits, three compares (`memo`). An entry is filled
//! only once all three are indices; it carries its generation, so a new trace invalidates it
//! without clearing anything. It may also keep the indices of a `#[traced]` site's argument
//! names (keyed by the site's names), registered by this thread like every index here.
//!
//! Everything here is thread-local plain data with a `const` initialiser and no destructor: no
//! allocation, no destructor registration, no lock, and re-entrancy cannot observe a
//! half-updated entry (values are copied in and out of `Cell`s, never borrowed).

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use super::allocator::open_gate_high;
use crate::format::fields::{EventRecord, RecordHeader};
use crate::format::{RecordType, ThreadRef, MAX_STRING_LEN};

/// Most strings one thread caches per generation (Fuchsia's `kMaxStringEntries`).
pub const MAX_STRING_ENTRIES: usize = 256;

/// Slots of the per-thread table: a power of two, twice [`MAX_STRING_ENTRIES`].
const STRING_SLOTS: usize = 2 * MAX_STRING_ENTRIES;
const SLOT_BITS: u32 = STRING_SLOTS.trailing_zeros();
const _: () = assert!(STRING_SLOTS.is_power_of_two() && STRING_SLOTS > MAX_STRING_ENTRIES);

/// Entry flag: an index allocation was attempted for this string (Fuchsia's
/// `kAllocIndexAttempted`); the answer is final for the generation.
pub(crate) const FLAG_INDEX_ATTEMPTED: u8 = 1 << 0;
/// Entry flag: the string is registered at `index` (`kAllocIndexSucceeded`).
pub(crate) const FLAG_INDEX_OK: u8 = 1 << 1;
/// Entry flag: the category answer is cached (`kCategoryChecked`).
pub(crate) const FLAG_CATEGORY_CHECKED: u8 = 1 << 2;
/// Entry flag: the category is enabled (`kCategoryEnabled`).
pub(crate) const FLAG_CATEGORY_ENABLED: u8 = 1 << 3;

/// One cached string: key (address, length) and what is known about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Address of the string's bytes; 0 marks an empty slot (a non-empty `&'static str` never
    /// has address 0).
    addr: usize,
    /// Length in bytes (strings longer than `MAX_STRING_LEN` are never cached).
    len: u32,
    /// String index when [`FLAG_INDEX_OK`] is set.
    pub(crate) index: u16,
    /// `FLAG_*` bits.
    pub(crate) flags: u8,
}

const EMPTY_ENTRY: Entry = Entry {
    addr: 0,
    len: 0,
    index: 0,
    flags: 0,
};

/// In [`Memo`]'s `lengths` (the category's length's top bit): the C API's `_static` path
/// claimed the memo ([`ThreadCache::claim_by_address`]), so its two addresses alone name the
/// pair. No memoised string's length has this bit (only indexed strings are memoised: at
/// most `MAX_STRING_LEN` bytes), so the Rust API's lookup by (address, length) does not find
/// a claimed memo: it fills its own. (A thread calling the same pair from Rust and from C
/// alternately makes each call refill the memo: slower, never wrong.)
#[cfg(feature = "c-api")]
const CLAIMED_BY_ADDRESS: u64 = 1 << 31;
const _: () = assert!((MAX_STRING_LEN as u64) < 1 << 31);

/// The two lengths of a memoised pair in one word: the category's in the low half, the
/// name's in the high half (memoised strings are indexed: at most `MAX_STRING_LEN` bytes; a
/// looked-up string of 4 GiB or more is compared modulo 2^32, as only a prefix of itself at
/// the same address could match).
#[inline(always)]
fn memo_lengths(category: &str, name: &str) -> u64 {
    (category.len() as u64 & 0xffff_ffff) | (name.len() as u64) << 32
}

/// Slots of the event memo (a power of two).
const MEMO_SLOTS: usize = 16;
const _: () = assert!(MEMO_SLOTS.is_power_of_two());

/// What an event of one (category, name) pair writes, in one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Memo {
    /// Generation the indices belong to (0 = empty; generations are never 0).
    generation: u32,
    /// `open_gate_high(generation)`, what the record path compares the gate with.
    open_gate: u32,
    /// [`memo_lengths`] of the pair (one comparison on the hot path).
    lengths: u64,
    category: usize,
    name: usize,
    /// String index of the category.
    pub(crate) category_index: u16,
    /// String index of the name.
    pub(crate) name_index: u16,
    /// The thread's index.
    pub(crate) thread_index: u8,
    /// An indexed event record's header with these three refs (record type Event; event
    /// type and size left zero), computed once when the memo is filled.
    pub(crate) refs_header: u64,
    /// The key of the argument names whose indices [`Self::arg_indices`] holds (the address of
    /// a `#[traced]` call site's names; 0: none).
    pub(crate) args_key: usize,
    /// String indices of up to [`MEMO_ARGS`] argument names in this generation, 16 bits each
    /// (first name lowest), registered by this thread; valid when `args_key` is set.
    pub(crate) arg_indices: u64,
}

/// The calling thread's memo of a pair that the C API's `_static` path claimed (see
/// [`ThreadCache::claimed_by_address`]). Not `Send` (a thread's own cache).
#[cfg(feature = "c-api")]
#[derive(Clone, Copy)]
pub(crate) struct ClaimedPair<'c>(&'c Cell<Memo>);

#[cfg(feature = "c-api")]
impl ClaimedPair<'_> {
    /// The memo.
    #[inline(always)]
    pub(crate) fn memo(self) -> Memo {
        self.0.get()
    }

    /// The addresses of its category and name (read from the memo: a pair changes only when
    /// the thread remembers another pair in its slot).
    #[inline(always)]
    pub(crate) fn addresses(self) -> (usize, usize) {
        let memo = self.0.get();
        (memo.category, memo.name)
    }
}

/// Most argument names whose indices a memo keeps: four 16-bit indices in one word.
pub(crate) const MEMO_ARGS: usize = 4;

/// The header word of an event record of type Event with indexed refs (event type and size
/// zero).
fn indexed_refs_header(category_index: u16, name_index: u16, thread_index: u8) -> u64 {
    RecordHeader::TYPE.make(RecordType::Event as u64)
        | EventRecord::THREAD_REF.make(u64::from(thread_index))
        | EventRecord::CATEGORY_REF.make(u64::from(category_index))
        | EventRecord::NAME_REF.make(u64::from(name_index))
}

impl Memo {
    /// The generation the indices belong to.
    #[inline(always)]
    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// The high half of the generation's open gate ([`open_gate_high`]).
    #[inline(always)]
    pub(crate) fn open_gate(&self) -> u32 {
        self.open_gate
    }

    /// A filled memo with these indices (for encoder tests).
    #[cfg(test)]
    pub(crate) fn for_test(category_index: u16, name_index: u16, thread_index: u8) -> Self {
        Self {
            generation: 1,
            open_gate: open_gate_high(1),
            category_index,
            name_index,
            thread_index,
            refs_header: indexed_refs_header(category_index, name_index, thread_index),
            ..EMPTY_MEMO
        }
    }
}

const EMPTY_MEMO: Memo = Memo {
    generation: 0,
    open_gate: 0,
    lengths: 0,
    category: 0,
    name: 0,
    category_index: 0,
    name_index: 0,
    thread_index: 0,
    refs_header: 0,
    args_key: 0,
    arg_indices: 0,
};

#[inline(always)]
fn memo_slot(category: &'static str, name: &'static str) -> usize {
    memo_slot_of(category.as_ptr() as usize, name.as_ptr() as usize)
}

/// [`memo_slot`] of the strings at addresses `category` and `name`.
#[inline(always)]
fn memo_slot_of(category: usize, name: usize) -> usize {
    ((name ^ (category >> 4)) >> 3) & (MEMO_SLOTS - 1)
}

/// The thread's own ref in the current generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThreadSlot {
    /// Not registered yet in this generation.
    Unknown,
    /// Registered at this index.
    Index(u8),
    /// Registered (name record written) but no index was available: inline refs.
    Inline,
}

/// The per-thread cache. Reached through [`current`]; every method works on the calling
/// thread's own instance.
pub(crate) struct ThreadCache {
    /// Generation the cache belongs to (0 = none yet; generations are never 0).
    generation: Cell<u32>,
    /// Strings cached in this generation.
    used: Cell<u32>,
    /// This thread's ref.
    thread: Cell<ThreadSlot>,
    /// This thread's id (0 = not read yet). Not per generation: it changes only across
    /// `fork`, which resets it ([`forget_ids_after_fork`]).
    tid: Cell<u64>,
    /// The event memo (see the module docs).
    memos: [Cell<Memo>; MEMO_SLOTS],
    entries: [Cell<Entry>; STRING_SLOTS],
}

#[allow(clippy::declare_interior_mutable_const)] // used only as an array-repeat initialiser
const EMPTY_CELL: Cell<Entry> = Cell::new(EMPTY_ENTRY);
#[allow(clippy::declare_interior_mutable_const)] // used only as an array-repeat initialiser
const EMPTY_MEMO_CELL: Cell<Memo> = Cell::new(EMPTY_MEMO);

thread_local! {
    static CACHE: ThreadCache = const {
        ThreadCache {
            generation: Cell::new(0),
            used: Cell::new(0),
            thread: Cell::new(ThreadSlot::Unknown),
            tid: Cell::new(0),
            memos: [EMPTY_MEMO_CELL; MEMO_SLOTS],
            entries: [EMPTY_CELL; STRING_SLOTS],
        }
    };
}

/// The calling thread's cache.
#[inline(always)]
pub(crate) fn current() -> &'static ThreadCache {
    // SAFETY: `CACHE` has a const initialiser and no destructor, so its storage lives as long
    // as the thread (`with` cannot fail, even while other thread-locals are destroyed), and
    // `ThreadCache` is `!Sync` (cells), so the reference cannot reach another thread.
    CACHE.with(|c| unsafe { &*(c as *const ThreadCache) })
}

/// Where a string is, or would go, in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Cached at `slot`.
    Found {
        /// Slot position.
        slot: usize,
        /// The entry.
        entry: Entry,
    },
    /// Not cached; it can be inserted at `slot`.
    Vacant {
        /// Slot position.
        slot: usize,
    },
    /// Not cached and the table is full (or the string is not cacheable): go uncached.
    Full,
}

#[inline(always)]
fn home_slot(addr: usize, len: usize) -> usize {
    // Fibonacci hashing of the address, with the length mixed in (a literal and its prefix
    // share an address).
    let key = (addr as u64) ^ ((len as u64) << 40);
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOT_BITS)) as usize
}

impl ThreadCache {
    /// Make the cache serve `generation`: true when it does (same generation, or older and
    /// now reset), false when the thread already serves a newer generation (the caller then
    /// works uncached).
    #[inline(always)]
    pub(crate) fn adopt(&self, generation: u32) -> bool {
        let current = self.generation.get();
        if current == generation {
            return true;
        }
        if current > generation {
            return false;
        }
        self.reset(generation);
        true
    }

    #[cold]
    #[inline(never)]
    fn reset(&self, generation: u32) {
        for entry in &self.entries {
            entry.set(EMPTY_ENTRY);
        }
        self.used.set(0);
        self.thread.set(ThreadSlot::Unknown);
        self.generation.set(generation);
    }

    /// Find `s`. The caller has adopted the generation.
    #[inline(always)]
    pub(crate) fn lookup(&self, s: &'static str) -> Lookup {
        let addr = s.as_ptr() as usize;
        let len = s.len();
        if len == 0 || len > MAX_STRING_LEN {
            return Lookup::Full;
        }
        let mut slot = home_slot(addr, len);
        // At most `MAX_STRING_ENTRIES` of the slots are used, so the probe meets an empty slot.
        loop {
            let entry = self.entries[slot].get();
            if entry.addr == addr && entry.len as usize == len {
                return Lookup::Found { slot, entry };
            }
            if entry.addr == 0 {
                return if (self.used.get() as usize) < MAX_STRING_ENTRIES {
                    Lookup::Vacant { slot }
                } else {
                    Lookup::Full
                };
            }
            slot = (slot + 1) & (STRING_SLOTS - 1);
        }
    }

    /// The string index of `s` if this cache serves `generation` and holds one for it
    /// (no insertion: the general path interns).
    #[inline(always)]
    pub(crate) fn index_of(&self, generation: u32, s: &'static str) -> Option<u16> {
        if self.generation.get() != generation {
            return None;
        }
        match self.lookup(s) {
            Lookup::Found { entry, .. } if entry.flags & FLAG_INDEX_OK != 0 => Some(entry.index),
            _ => None,
        }
    }

    /// Store what is known about `s` at `slot` (from [`Self::lookup`], in the same
    /// generation, with no insertion in between). `index` matters when `flags` has
    /// [`FLAG_INDEX_OK`].
    #[inline]
    pub(crate) fn store(&self, slot: usize, s: &'static str, index: u16, flags: u8) {
        let cell = &self.entries[slot];
        if cell.get().addr == 0 {
            self.used.set(self.used.get() + 1);
        }
        cell.set(Entry {
            addr: s.as_ptr() as usize,
            len: s.len() as u32,
            index,
            flags,
        });
    }

    /// The indices an event of (`category`, `name`) writes in `generation`, if remembered.
    /// Needs no [`Self::adopt`]: the entry names its generation.
    #[inline(always)]
    pub(crate) fn memo(
        &self,
        generation: u32,
        category: &'static str,
        name: &'static str,
    ) -> Option<Memo> {
        self.memo_any(category, name)
            .filter(|memo| memo.generation == generation)
    }

    /// The memo of (`category`, `name`) in whichever generation it was filled: the caller
    /// compares [`Memo::generation`] with the trace it writes to.
    #[inline(always)]
    pub(crate) fn memo_any(&self, category: &'static str, name: &'static str) -> Option<Memo> {
        let memo = self.memos[memo_slot(category, name)].get();
        // The three equalities as one expression: written as an `&&` chain, the compiler
        // merged them into `sete`/`or` and two branches (4 instructions more).
        let differ = (memo.name ^ name.as_ptr() as usize) as u64
            | (memo.category ^ category.as_ptr() as usize) as u64
            | (memo.lengths ^ memo_lengths(category, name));
        // An empty memo has a null name address, which no string has.
        (differ == 0).then_some(memo)
    }

    /// The thread's memo of the pair whose strings are at addresses `category` and `name`,
    /// whatever their lengths, if the C API's `_static` path claimed it
    /// ([`Self::claim_by_address`]): their promise (unchanged at the same address until the
    /// process exits) makes the address alone the key. A memo the Rust API filled with other
    /// lengths at the same addresses (`&S[..3]` of the same bytes) is not claimed, so never
    /// answers here. A handle, which also gives the two addresses back: a caller that keeps
    /// the handle need not keep them.
    #[cfg(feature = "c-api")]
    #[inline(always)]
    pub(crate) fn claimed_by_address(
        &self,
        category: usize,
        name: usize,
    ) -> Option<ClaimedPair<'_>> {
        let cell = &self.memos[memo_slot_of(category, name)];
        let memo = cell.get();
        // An empty memo is not claimed: a NULL name (an empty text) never matches.
        let claimed = memo.lengths & CLAIMED_BY_ADDRESS != 0;
        (memo.name == name && memo.category == category && claimed).then_some(ClaimedPair(cell))
    }

    /// Mark the memo of (`category`, `name`), if remembered with exactly these strings, as
    /// found by their addresses alone: the C API's `_static` path, whose strings are the
    /// whole C strings at those addresses, after writing through the memoised path.
    #[cfg(feature = "c-api")]
    pub(crate) fn claim_by_address(&self, category: &'static str, name: &'static str) {
        if let Some(memo) = self.memo_any(category, name) {
            self.memos[memo_slot(category, name)].set(Memo {
                lengths: memo.lengths | CLAIMED_BY_ADDRESS,
                ..memo
            });
        }
    }

    /// Remember the indices of (`category`, `name`) events in `generation` (replacing whatever
    /// pair shared the slot).
    #[inline]
    pub(crate) fn remember(
        &self,
        generation: u32,
        (category, category_index): (&'static str, u16),
        (name, name_index): (&'static str, u16),
        thread_index: u8,
    ) {
        self.memos[memo_slot(category, name)].set(Memo {
            generation,
            open_gate: open_gate_high(generation),
            lengths: memo_lengths(category, name),
            category: category.as_ptr() as usize,
            name: name.as_ptr() as usize,
            category_index,
            name_index,
            thread_index,
            refs_header: indexed_refs_header(category_index, name_index, thread_index),
            args_key: 0,
            arg_indices: 0,
        });
    }

    /// Remember the string indices of the argument names keyed `args_key` with the memo of
    /// (`category`, `name`), if it is the one of `generation` (a memo refilled later starts
    /// without them). `arg_indices`: this thread's indices, packed as [`Memo::arg_indices`].
    #[inline]
    pub(crate) fn remember_args(
        &self,
        generation: u32,
        (category, name): (&'static str, &'static str),
        args_key: usize,
        arg_indices: u64,
    ) {
        if let Some(memo) = self.memo(generation, category, name) {
            self.memos[memo_slot(category, name)].set(Memo {
                args_key,
                arg_indices,
                ..memo
            });
        }
    }

    /// Entries cached in the current generation.
    #[cfg(test)]
    pub(crate) fn strings_cached(&self) -> usize {
        self.used.get() as usize
    }

    /// The thread's registered ref in the current generation.
    #[inline(always)]
    pub(crate) fn thread_slot(&self) -> ThreadSlot {
        self.thread.get()
    }

    /// Record the thread's ref for the current generation.
    pub(crate) fn set_thread_slot(&self, slot: ThreadSlot) {
        self.thread.set(slot)
    }

    /// The thread's id (koid on Linux), read once.
    #[inline]
    pub(crate) fn thread_id(&self) -> u64 {
        let tid = self.tid.get();
        if tid != 0 {
            return tid;
        }
        let tid = read_thread_id();
        self.tid.set(tid);
        tid
    }

    /// The thread's inline ref (pid, tid).
    #[inline]
    pub(crate) fn inline_thread_ref(&self) -> ThreadRef {
        ThreadRef::Inline {
            pid: process_id(),
            tid: self.thread_id(),
        }
    }
}

// === process and thread ids ===

/// Rules: the process id, read once (0 = not read). Reset in a forked child.
/// ATOMICS: `Relaxed`: every thread that reads 0 computes the same value.
static PID: AtomicU32 = AtomicU32::new(0);

/// This process's id (koid on Linux), cached.
#[inline]
pub(crate) fn process_id() -> u64 {
    // ATOMICS: `Relaxed`: see `PID`.
    let pid = PID.load(Ordering::Relaxed);
    if pid != 0 {
        return u64::from(pid);
    }
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    u64::from(pid)
}

#[cold]
fn read_thread_id() -> u64 {
    // SAFETY: `gettid` takes no arguments, cannot fail and has no memory effects.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    u64::try_from(tid).unwrap_or(0)
}

/// In a forked child (called from the `pthread_atfork` child handler, on the only thread):
/// forget the parent's ids and this thread's generation, so nothing cached in the parent is
/// reused. Only async-signal-safe operations (atomic and thread-local stores).
pub(crate) fn forget_ids_after_fork() {
    // ATOMICS: `Relaxed`: the child has a single thread.
    PID.store(0, Ordering::Relaxed);
    let c = current();
    c.tid.set(0);
    c.generation.set(0);
    c.used.set(0);
    c.thread.set(ThreadSlot::Unknown);
    for entry in &c.entries {
        entry.set(EMPTY_ENTRY);
    }
    for memo in &c.memos {
        memo.set(EMPTY_MEMO);
    }
}

// === names ===

/// Rules: the newest generation for which this process's name record was claimed; raised
/// with `fetch_max` by the thread that then writes the record.
/// ATOMICS: `Relaxed`: a claim; the record itself is published by its slot commit.
static PROCESS_NAMED: AtomicU32 = AtomicU32::new(0);

/// True exactly once per generation (for the newest generation seen): the caller writes the
/// process name record.
pub(crate) fn claim_process_record(generation: u32) -> bool {
    // ATOMICS: `Relaxed`: see `PROCESS_NAMED`.
    PROCESS_NAMED.fetch_max(generation, Ordering::Relaxed) < generation
}

/// The process name (`/proc/self/comm`, read once; empty if unreadable).
pub(crate) fn process_name() -> &'static str {
    static NAME: OnceLock<Box<str>> = OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read("/proc/self/comm")
            .map(|bytes| utf8_prefix(trim_newline(&bytes)).into())
            .unwrap_or_default()
    })
}

/// The calling thread's name (`pthread_getname_np`, at most 15 bytes), copied into `buf`.
pub(crate) fn thread_name(buf: &mut [u8; 16]) -> &str {
    // SAFETY: `buf` is valid for 16 bytes, the size glibc requires; `pthread_self` is always
    // a valid handle for the calling thread.
    let rc = unsafe {
        libc::pthread_getname_np(libc::pthread_self(), buf.as_mut_ptr().cast(), buf.len())
    };
    if rc != 0 {
        return "";
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    utf8_prefix(&buf[..len])
}

fn trim_newline(bytes: &[u8]) -> &[u8] {
    bytes.strip_suffix(b"\n").unwrap_or(bytes)
}

/// The longest valid UTF-8 prefix (kernel names are bytes; a cut multibyte character at the
/// 15-byte limit is dropped rather than the whole name).
fn utf8_prefix(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "c-api")]
    #[test]
    fn a_memo_the_c_api_claims_is_found_by_address_only() {
        let c = current();
        let (cat, name): (&'static str, &'static str) = ("claim_cat", "claim_name");
        let (cat_at, name_at) = (cat.as_ptr() as usize, name.as_ptr() as usize);
        c.remember(7, (cat, 3), (name, 4), 5);
        assert_eq!(
            c.claimed_by_address(cat_at, name_at).map(ClaimedPair::memo),
            None,
            "not claimed yet"
        );
        c.claim_by_address(cat, name);
        let m = c
            .claimed_by_address(cat_at, name_at)
            .map(ClaimedPair::memo)
            .expect("claimed");
        assert_eq!((m.category_index, m.name_index, m.generation()), (3, 4, 7));
        assert_eq!(c.memo(7, cat, name), None, "the Rust lookup fills its own");
        c.remember(7, (cat, 3), (name, 4), 5);
        assert_eq!(
            c.claimed_by_address(cat_at, name_at).map(ClaimedPair::memo),
            None,
            "refilled: unclaimed"
        );
    }

    #[test]
    fn the_event_memo_answers_its_pair_in_its_generation_only() {
        let c = current();
        let (cat, name, other): (&'static str, &'static str, &'static str) =
            ("memo_cat", "memo_name", "memo_other");
        assert_eq!(c.memo(7, cat, name), None);
        c.remember(7, (cat, 3), (name, 4), 5);
        let m = c.memo(7, cat, name).expect("remembered");
        assert_eq!((m.category_index, m.name_index, m.thread_index), (3, 4, 5));
        assert_eq!(c.memo(8, cat, name), None, "another generation");
        assert_eq!(c.memo(7, name, cat), None, "pair order matters");
        assert_eq!(
            c.memo(7, cat, &name[..4]),
            None,
            "a prefix is another string"
        );
        assert_eq!(
            c.memo(7, &cat[..4], name),
            None,
            "so is a category's prefix"
        );
        assert_eq!(m.open_gate(), open_gate_high(7));
        assert_eq!(c.memo(7, cat, other), None);
        // A pair sharing the slot replaces it.
        let mut evicted = false;
        for candidate in [other, "memo_a", "memo_b", "memo_c", "memo_d", "memo_e"] {
            if memo_slot(cat, candidate) == memo_slot(cat, name) {
                c.remember(7, (cat, 1), (candidate, 2), 5);
                assert_eq!(c.memo(7, cat, name), None);
                evicted = true;
                break;
            }
        }
        if !evicted {
            c.remember(7, (cat, 3), (name, 9), 5);
            assert_eq!(c.memo(7, cat, name).map(|m| m.name_index), Some(9));
        }
        forget_ids_after_fork();
        assert_eq!(
            c.memo(7, cat, name),
            None,
            "a forked child forgets the memo"
        );
    }

    #[test]
    fn generations_adopt_reset_and_refuse_older() {
        std::thread::spawn(|| {
            let c = current();
            assert!(c.adopt(10));
            let s: &'static str = "cache-test";
            let Lookup::Vacant { slot } = c.lookup(s) else {
                panic!("fresh cache")
            };
            c.store(slot, s, 7, FLAG_INDEX_ATTEMPTED | FLAG_INDEX_OK);
            assert_eq!(c.strings_cached(), 1);
            match c.lookup(s) {
                Lookup::Found { entry, .. } => {
                    assert_eq!(entry.index, 7);
                    assert_eq!(entry.flags, FLAG_INDEX_ATTEMPTED | FLAG_INDEX_OK);
                }
                other => panic!("{other:?}"),
            }
            // A prefix shares the address but is another string.
            assert!(matches!(c.lookup(&s[..5]), Lookup::Vacant { .. }));
            assert!(!c.adopt(9), "older generation gets no cache");
            assert!(matches!(c.lookup(s), Lookup::Found { .. }));
            assert!(c.adopt(11));
            assert_eq!(c.strings_cached(), 0);
            assert!(matches!(c.lookup(s), Lookup::Vacant { .. }));
            assert_eq!(c.thread_slot(), ThreadSlot::Unknown);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn table_holds_max_entries_then_reports_full() {
        std::thread::spawn(|| {
            let c = current();
            assert!(c.adopt(5));
            let text: &'static str = Box::leak("x".repeat(MAX_STRING_ENTRIES + 10).into());
            for i in 0..MAX_STRING_ENTRIES {
                let s = &text[i..i + 1];
                match c.lookup(s) {
                    Lookup::Vacant { slot } => c.store(slot, s, i as u16 + 1, FLAG_INDEX_OK),
                    other => panic!("entry {i}: {other:?}"),
                }
            }
            assert_eq!(
                c.lookup(&text[MAX_STRING_ENTRIES..MAX_STRING_ENTRIES + 1]),
                Lookup::Full
            );
            for i in 0..MAX_STRING_ENTRIES {
                match c.lookup(&text[i..i + 1]) {
                    Lookup::Found { entry, .. } => assert_eq!(entry.index, i as u16 + 1),
                    other => panic!("entry {i}: {other:?}"),
                }
            }
            assert_eq!(c.lookup(""), Lookup::Full);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn names_and_ids() {
        assert_eq!(process_id(), u64::from(std::process::id()));
        let tid = current().thread_id();
        assert!(tid > 0);
        assert_eq!(current().thread_id(), tid);
        std::thread::Builder::new()
            .name("cache-name-test-long".into())
            .spawn(move || {
                let mut buf = [0u8; 16];
                assert_eq!(thread_name(&mut buf), "cache-name-test");
                assert_ne!(current().thread_id(), tid);
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(!process_name().is_empty());
        assert_eq!(utf8_prefix(&[b'a', 0xe2, 0x82]), "a");
    }
}

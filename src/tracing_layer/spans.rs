//! What the layer keeps per span, outside the registry: one table of the process, keyed by
//! the layer and the span's id, that every thread reaches (a span created on one thread is
//! entered, recorded and closed on others).
//!
//! Why not the registry's extensions: a span's data there costs a box, a hash-map insert, a
//! lock and a lookup of the span at each access, and the clearing at close (about 600
//! instructions of a span's 2 270 in the CI count of 2026-11-26). Here a span costs a slot
//! claimed at its creation, one slot lock per exit, and the slot freed at close.
//!
//! Layout: levels of buckets of [`BUCKET_SLOTS`] slots; a key's home is one bucket of a
//! level. Its keys are a separate array of words (0: free) so that a lookup reads one cache
//! line per bucket; a slot's contents are read and changed only under its lock. A key that
//! finds its home and the next [`PROBE_BUCKETS`]` - 1` buckets full goes to the next level
//! (allocated then, twice the size), and its home bucket is marked overflowed, so that a
//! lookup of a key of a bucket never overflowed reads that bucket alone. Levels are
//! allocated zeroed (untouched pages cost nothing) and never freed.

use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use tracing::Metadata;

use crate::engine::record::{SpanMemo, INSTALLED_SPAN_ARGS};
use crate::format::{ArgValue, ScalarArg, StringRef};

/// Slots per bucket: their keys fill one 64-byte line.
const BUCKET_SLOTS: usize = 8;
/// Buckets of the first level (2 048 slots); each next level has twice as many.
const FIRST_LEVEL_BUCKETS: usize = 256;
/// Levels at most: 2 048 × (2⁸ − 1) slots in all (522 240 live spans).
const LEVELS: usize = 8;
/// Buckets a key may take a slot in, from its home on: then the next level.
const PROBE_BUCKETS: usize = 4;
/// The top bits of a span id left out of its home bucket's hash ([`Level::home`]).
const GENERATION_BITS: u32 = 13;

/// A span as the table knows it: the layer it belongs to (a subscriber may be given the
/// layer twice, and two subscribers number their spans independently) and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Key {
    pub(super) layer: u32,
    pub(super) span: u64,
}

impl Key {
    /// The key as a word of the key array (never 0, the free word; two keys may share a
    /// word: the slot's own copy decides).
    #[inline(always)]
    fn word(self) -> u64 {
        let word = self.span ^ u64::from(self.layer).wrapping_mul(0x9E37_79B9);
        word.max(1)
    }
}

/// A field value kept with a span.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Owned {
    Scalar(ArgValue<'static>),
    Text(String),
}

/// A span's fields: inline while they are few scalars, owned in a `Vec` otherwise.
#[derive(Debug)]
pub(super) struct SpanFields {
    /// Inline fields: `names[..len]` and `values[..len]` are initialised (while `owned` is
    /// `None`; 0 after).
    len: usize,
    /// At most [`INSTALLED_SPAN_ARGS`] scalar fields, encoded for the record (but for their
    /// names' indices): no allocation.
    names: [MaybeUninit<&'static str>; INSTALLED_SPAN_ARGS],
    values: [MaybeUninit<ScalarArg>; INSTALLED_SPAN_ARGS],
    /// Any fields, once one is a text or there are more than fit inline.
    owned: Option<Vec<(&'static str, Owned)>>,
}

impl SpanFields {
    pub(super) const EMPTY: SpanFields = SpanFields {
        len: 0,
        names: [MaybeUninit::uninit(); INSTALLED_SPAN_ARGS],
        values: [MaybeUninit::uninit(); INSTALLED_SPAN_ARGS],
        owned: None,
    };

    /// The fields while they are inline scalars (names and values side by side).
    #[inline(always)]
    pub(super) fn scalars(&self) -> Option<(&[&'static str], &[ScalarArg])> {
        if self.owned.is_some() {
            return None;
        }
        // SAFETY: `names[..len]` and `values[..len]` are initialised (see `len`);
        // `MaybeUninit<T>` has the layout of `T`.
        unsafe {
            Some((
                std::slice::from_raw_parts(self.names.as_ptr().cast(), self.len),
                std::slice::from_raw_parts(self.values.as_ptr().cast(), self.len),
            ))
        }
    }

    /// Add field `name`, one the span does not have yet (a span's fields at its creation).
    #[inline(always)]
    pub(super) fn push_scalar(&mut self, name: &'static str, value: ArgValue<'static>) {
        match ScalarArg::new(value) {
            Some(scalar) if self.owned.is_none() && self.len < INSTALLED_SPAN_ARGS => {
                self.names[self.len].write(name);
                self.values[self.len].write(scalar);
                self.len += 1;
            }
            _ => self.set(name, Owned::Scalar(value)),
        }
    }

    /// Set field `name` (replacing an earlier value of the same name).
    pub(super) fn set(&mut self, name: &'static str, value: Owned) {
        if let Some((names, _)) = self.scalars() {
            let at = names.iter().position(|n| *n == name);
            let scalar = match &value {
                Owned::Scalar(v) => ScalarArg::new(*v),
                Owned::Text(_) => None,
            };
            match (at, scalar) {
                (Some(at), Some(scalar)) => {
                    self.values[at].write(scalar);
                    return;
                }
                (None, Some(scalar)) if self.len < INSTALLED_SPAN_ARGS => {
                    self.names[self.len].write(name);
                    self.values[self.len].write(scalar);
                    self.len += 1;
                    return;
                }
                _ => {
                    let (names, values) = self.scalars().unwrap_or_default();
                    let owned = names
                        .iter()
                        .zip(values)
                        .map(|(&name, value)| (name, Owned::Scalar(value.value())))
                        .collect();
                    self.owned = Some(owned);
                    self.len = 0;
                }
            }
        }
        if let Some(owned) = &mut self.owned {
            match owned.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => owned.push((name, value)),
            }
        }
    }

    /// Number of fields.
    pub(super) fn len(&self) -> usize {
        self.owned.as_ref().map_or(self.len, Vec::len)
    }

    /// Field `i` (`i < len()`) as an argument value.
    pub(super) fn get(&self, i: usize) -> (&'static str, ArgValue<'_>) {
        match (&self.owned, self.scalars()) {
            (Some(owned), _) => {
                let (name, value) = &owned[i];
                let value = match value {
                    Owned::Scalar(v) => *v,
                    Owned::Text(t) => text_value(t),
                };
                (*name, value)
            }
            (None, Some((names, values))) => (names[i], values[i].value()),
            (None, None) => unreachable!("scalars() is None only with owned fields"),
        }
    }
}

/// A recorded text field's value: inline, or the empty ref for an empty text.
pub(super) fn text_value(text: &str) -> ArgValue<'_> {
    if text.is_empty() {
        ArgValue::Str(StringRef::Empty)
    } else {
        ArgValue::Str(StringRef::Inline(text))
    }
}

/// Why a span's fields are not all kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Missing {
    /// All kept.
    None,
    /// The span was created before the trace started: the fields it was created with are
    /// gone (those recorded since are kept).
    BeforeTrace,
}

/// What the layer keeps of a span it records.
#[derive(Debug)]
pub(super) struct SpanState {
    /// The trace it is recorded in.
    pub(super) generation: u32,
    /// Its call site: target (the category) and name.
    pub(super) metadata: &'static Metadata<'static>,
    /// Where its async begin goes if it crosses threads: its creation (time read unordered,
    /// [`crate::clock::ticks_unordered`], and thread), or, for a span created before the
    /// trace, its first entry in the trace (time 0 until then).
    pub(super) origin: u64,
    pub(super) origin_tid: u64,
    /// Set once, by the first enter (or exit) of the span on a thread other than the
    /// origin's, which then writes the async begin; the close writes the async end.
    pub(super) async_begun: bool,
    pub(super) missing: Missing,
    pub(super) fields: SpanFields,
    /// What the creating thread's event memo said at the creation: the record's header, and
    /// the indices of the argument names when it had them ([`SpanState::all_fields`]).
    pub(super) memo: SpanMemo,
    /// The fields are its call site's, all of them, in their order, and scalars: the
    /// arguments' names are the call site's and `span_id`, which the thread's memo keeps
    /// the indices of under the call site's key ([`args_key`]).
    pub(super) all_fields: bool,
}

/// The key of a span call site's argument names in the thread's event memo
/// ([`crate::engine::record::remember_arg_indices`]): its metadata's address.
pub(super) fn args_key(metadata: &'static Metadata<'static>) -> usize {
    metadata as *const Metadata<'static> as usize
}

/// One span's slot.
struct Slot {
    /// Held while the slot's contents are read or changed.
    /// ATOMICS: `Acquire` on taking, `Release` on giving back: the contents written under
    /// the lock are seen by the next holder.
    locked: AtomicBool,
    /// Initialised while the slot's key word is not 0 (both changed under the lock).
    entry: UnsafeCell<MaybeUninit<(Key, SpanState)>>,
}

// SAFETY: `entry` is read and written only under `locked` (see `SlotGuard`); a `SpanState`
// is `Send` (metadata is `Sync`, the rest owned data).
unsafe impl Sync for Slot {}

/// One level: `buckets` buckets of [`BUCKET_SLOTS`] slots.
struct Level {
    /// A slot's key word, 0 when free. Changed only under the slot's lock; read without it
    /// to find candidates.
    /// ATOMICS: `Release` stores (under the lock, after the entry is written or taken) and
    /// `Relaxed` loads: a load only picks a slot to lock, and the lock orders the entry.
    keys: Box<[AtomicU64]>,
    /// Per bucket: a key whose home it is went to a later bucket or level.
    /// ATOMICS: `Relaxed`: set before the key's slot elsewhere is published (that slot's
    /// lock and key store are `Release`); a lookup of that key runs after the span's
    /// creation returned, which the span's handle orders before it.
    overflowed: Box<[AtomicBool]>,
    slots: Box<[Slot]>,
    /// log2 of the bucket count.
    bits: u32,
}

/// A `Box<[T]>` of `len` zeroed `T`s.
///
/// # Safety
/// The all-zero bit pattern must be a valid `T`.
unsafe fn zeroed_slice<T>(len: usize) -> Box<[T]> {
    let layout = Layout::array::<T>(len).expect("a level's size fits in memory");
    // SAFETY: `layout` has a non-zero size (every level has slots, every `T` here is
    // non-zero-sized).
    let ptr = unsafe { alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        alloc::handle_alloc_error(layout);
    }
    // SAFETY: `ptr` is a fresh allocation of `len` `T`s, all zero, which the caller
    // guarantees is valid; the box frees it with the same layout.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) }
}

impl Level {
    fn new(bits: u32) -> Level {
        let buckets = 1usize << bits;
        // SAFETY: zero is a valid `AtomicU64` (0), `AtomicBool` (false), and `Slot` (unlocked,
        // entry uninitialised: a `MaybeUninit` holds any bits).
        unsafe {
            Level {
                keys: zeroed_slice(buckets * BUCKET_SLOTS),
                overflowed: zeroed_slice(buckets),
                slots: zeroed_slice(buckets * BUCKET_SLOTS),
                bits,
            }
        }
    }

    /// The home bucket of a key word: a hash of all but its top [`GENERATION_BITS`] bits.
    /// The registry's ids (`tracing-subscriber`'s sharded slab) keep a count of the reuses
    /// of the span's slab slot there, the slot and its thread's shard below, so that the
    /// spans a thread creates one after another in the same slab slot (a loop's) keep one
    /// bucket, in cache, rather than each one anywhere in the table.
    #[inline(always)]
    fn home(&self, word: u64) -> usize {
        let place = word & (u64::MAX >> GENERATION_BITS);
        (place.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    #[inline(always)]
    fn bucket_after(&self, bucket: usize, step: usize) -> usize {
        (bucket + step) & ((1 << self.bits) - 1)
    }

    /// The slot of `key` in `bucket`, locked.
    #[inline(always)]
    fn find_in(&self, bucket: usize, key: Key, word: u64) -> Option<SlotGuard<'_>> {
        let first = bucket * BUCKET_SLOTS;
        let keys: &[AtomicU64; BUCKET_SLOTS] = self.keys[first..first + BUCKET_SLOTS]
            .try_into()
            .expect("a bucket's keys");
        for (i, slot_key) in keys.iter().enumerate() {
            // ATOMICS: see `keys`.
            if slot_key.load(Ordering::Relaxed) == word {
                let guard = self.lock(first + i);
                if guard.entry().is_some_and(|(k, _)| *k == key) {
                    return Some(guard);
                }
            }
        }
        None
    }

    /// The slot of `key` in the buckets after its home in this level (its home overflowed),
    /// locked.
    fn find_beyond_home(&self, key: Key, word: u64) -> Option<SlotGuard<'_>> {
        let home = self.home(word);
        (1..PROBE_BUCKETS).find_map(|step| self.find_in(self.bucket_after(home, step), key, word))
    }

    /// A free slot for a key of word `word`, locked; `None` when the key's buckets are full
    /// (its home then marked overflowed). A slot another thread holds is passed over: it may
    /// be one being filled, which takes as long as the program's code that runs meanwhile (a
    /// field's `Debug`).
    fn claim(&self, word: u64) -> Option<SlotGuard<'_>> {
        let home = self.home(word);
        for step in 0..PROBE_BUCKETS {
            let first = self.bucket_after(home, step) * BUCKET_SLOTS;
            for i in first..first + BUCKET_SLOTS {
                // ATOMICS: see `keys`.
                if self.keys[i].load(Ordering::Relaxed) != 0 {
                    continue;
                }
                let Some(guard) = self.try_lock(i) else {
                    continue;
                };
                if guard.entry().is_none() {
                    if step > 0 {
                        // ATOMICS: see `overflowed`.
                        self.overflowed[home].store(true, Ordering::Relaxed);
                    }
                    return Some(guard);
                }
            }
        }
        // ATOMICS: see `overflowed`.
        self.overflowed[home].store(true, Ordering::Relaxed);
        None
    }

    #[inline(always)]
    fn try_lock(&self, i: usize) -> Option<SlotGuard<'_>> {
        let slot = &self.slots[i];
        // ATOMICS: see `Slot::locked`.
        slot.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        Some(SlotGuard {
            slot,
            key: &self.keys[i],
        })
    }

    #[inline(always)]
    fn lock(&self, i: usize) -> SlotGuard<'_> {
        let slot = &self.slots[i];
        // ATOMICS: see `Slot::locked`.
        if slot
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            lock_contended(&slot.locked);
        }
        SlotGuard {
            slot,
            key: &self.keys[i],
        }
    }
}

/// Take a lock another thread holds (it holds it for a few hundred instructions at most:
/// a record written, fields copied).
#[cold]
#[inline(never)]
fn lock_contended(locked: &AtomicBool) {
    let mut spins = 0u32;
    // ATOMICS: see `Slot::locked`.
    while locked
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 100 {
            std::hint::spin_loop();
        } else {
            // The holder may have been preempted.
            std::thread::yield_now();
        }
    }
}

/// A locked slot.
pub(super) struct SlotGuard<'l> {
    slot: &'l Slot,
    key: &'l AtomicU64,
}

impl SlotGuard<'_> {
    #[inline(always)]
    fn entry(&self) -> Option<&(Key, SpanState)> {
        // ATOMICS: see `Level::keys` (under the lock: the key word is this thread's to read).
        if self.key.load(Ordering::Relaxed) == 0 {
            return None;
        }
        // SAFETY: the lock is held; the entry is initialised while the key word is not 0.
        Some(unsafe { (*self.slot.entry.get()).assume_init_ref() })
    }

    /// Put a span made of `new` in this free slot (no fields yet), then let `fill` complete
    /// it in place before any other thread can find it.
    #[inline(always)]
    fn fill(&mut self, word: u64, key: Key, new: NewSpan, fill: impl FnOnce(&mut SpanState)) {
        let entry = self.slot.entry.get();
        // SAFETY: the lock is held and the slot is free (its key word is 0): nothing to drop,
        // and no other thread reads the entry until the key word says it is there. Written
        // field by field: no copy of a whole entry.
        let state = unsafe {
            let entry = (*entry).as_mut_ptr();
            std::ptr::addr_of_mut!((*entry).0).write(key);
            let state = std::ptr::addr_of_mut!((*entry).1);
            std::ptr::addr_of_mut!((*state).generation).write(new.generation);
            std::ptr::addr_of_mut!((*state).metadata).write(new.metadata);
            std::ptr::addr_of_mut!((*state).origin).write(new.origin);
            std::ptr::addr_of_mut!((*state).origin_tid).write(new.origin_tid);
            std::ptr::addr_of_mut!((*state).async_begun).write(false);
            std::ptr::addr_of_mut!((*state).missing).write(new.missing);
            std::ptr::addr_of_mut!((*state).fields).write(SpanFields::EMPTY);
            std::ptr::addr_of_mut!((*state).memo).write(new.memo);
            std::ptr::addr_of_mut!((*state).all_fields).write(false);
            &mut *state
        };
        fill(state);
        // ATOMICS: see `Level::keys`.
        self.key.store(word, Ordering::Release);
    }

    /// Free the slot, dropping what it held.
    fn free(self) {
        // ATOMICS: see `Level::keys`.
        self.key.store(0, Ordering::Release);
        // SAFETY: the lock is held; the guard was handed out for an initialised entry, and
        // the key word now says the slot is free, so nothing reads the entry again.
        unsafe { (*self.slot.entry.get()).assume_init_drop() };
    }
}

impl Deref for SlotGuard<'_> {
    type Target = SpanState;

    fn deref(&self) -> &SpanState {
        // SAFETY: a guard is handed out only for a slot holding an entry (see `Level::find`).
        unsafe { &(*self.slot.entry.get()).assume_init_ref().1 }
    }
}

impl DerefMut for SlotGuard<'_> {
    fn deref_mut(&mut self) -> &mut SpanState {
        // SAFETY: as in `deref`; the lock makes this the only reference.
        unsafe { &mut (*self.slot.entry.get()).assume_init_mut().1 }
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        // ATOMICS: see `Slot::locked`.
        self.slot.locked.store(false, Ordering::Release);
    }
}

/// The levels, allocated as they are first needed.
static LEVELS_IN_USE: [OnceLock<Level>; LEVELS] = [const { OnceLock::new() }; LEVELS];

fn level(n: usize) -> &'static Level {
    LEVELS_IN_USE[n].get_or_init(|| Level::new(FIRST_LEVEL_BUCKETS.trailing_zeros() + n as u32))
}

/// What a new span's state starts with (no fields, no async begin).
#[derive(Debug, Clone, Copy)]
pub(super) struct NewSpan {
    pub(super) generation: u32,
    pub(super) metadata: &'static Metadata<'static>,
    pub(super) origin: u64,
    pub(super) origin_tid: u64,
    pub(super) missing: Missing,
    pub(super) memo: SpanMemo,
}

/// Keep a span made of `new` for `key`, a span the table does not keep (a span's id is
/// unique among the live spans of its subscriber, and its close removes it), completed in
/// place by `fill` (which may run the program's code: no other thread finds the span
/// meanwhile); `false` (`fill` not called) when every level is full.
#[inline(always)]
pub(super) fn insert(key: Key, new: NewSpan, fill: impl FnOnce(&mut SpanState)) -> bool {
    let word = key.word();
    let Some(mut slot) = claim(word) else {
        return false;
    };
    slot.fill(word, key, new, fill);
    true
}

/// A free slot for a key of word `word`, locked, in the first level with room.
fn claim(word: u64) -> Option<SlotGuard<'static>> {
    (0..LEVELS).find_map(|n| level(n).claim(word))
}

/// The span of `key`, locked; `None` if the table does not keep it.
#[inline(always)]
pub(super) fn find(key: Key) -> Option<SlotGuard<'static>> {
    let word = key.word();
    let first = LEVELS_IN_USE[0].get()?;
    let home = first.home(word);
    if let Some(found) = first.find_in(home, key, word) {
        return Some(found);
    }
    // ATOMICS: see `Level::overflowed`.
    if !first.overflowed[home].load(Ordering::Relaxed) {
        return None;
    }
    find_beyond_home(key, word)
}

/// [`find`] past the key's home bucket in the first level: the next buckets there, then the
/// later levels.
#[cold]
#[inline(never)]
fn find_beyond_home(key: Key, word: u64) -> Option<SlotGuard<'static>> {
    for level in LEVELS_IN_USE.iter() {
        let level = level.get()?;
        let home = level.home(word);
        if let Some(found) = level.find_in(home, key, word) {
            return Some(found);
        }
        // ATOMICS: see `Level::overflowed`.
        if !level.overflowed[home].load(Ordering::Relaxed) {
            return None;
        }
        if let Some(found) = level.find_beyond_home(key, word) {
            return Some(found);
        }
    }
    None
}

/// Stop keeping the span of `key`, after `f` of what was kept (if anything).
#[inline]
pub(super) fn remove(key: Key, f: impl FnOnce(&SpanState)) {
    if let Some(found) = find(key) {
        f(&found);
        found.free();
    }
}

/// Stop keeping every span of `layer` (a layer dropped with its subscriber: its spans will
/// never be closed).
pub(super) fn remove_layer(layer: u32) {
    for level in LEVELS_IN_USE.iter().filter_map(OnceLock::get) {
        for i in 0..level.keys.len() {
            // ATOMICS: see `Level::keys`.
            if level.keys[i].load(Ordering::Relaxed) == 0 {
                continue;
            }
            let guard = level.lock(i);
            if guard.entry().is_some_and(|(k, _)| k.layer == layer) {
                guard.free();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(generation: u32) -> NewSpan {
        static CALLSITE: tracing::callsite::DefaultCallsite =
            tracing::callsite::DefaultCallsite::new(&META);
        static META: Metadata<'static> = tracing::metadata!(
            name: "test",
            target: "test",
            level: tracing::Level::INFO,
            fields: &[],
            callsite: &CALLSITE,
            kind: tracing::metadata::Kind::SPAN,
        );
        NewSpan {
            generation,
            metadata: &META,
            origin: 0,
            origin_tid: 0,
            missing: Missing::None,
            memo: SpanMemo::NONE,
        }
    }

    #[test]
    fn a_span_is_found_until_removed_and_keys_of_other_layers_are_apart() {
        // Layer numbers no layer of this process takes (they count up from 1).
        let a = Key {
            layer: u32::MAX,
            span: 42,
        };
        let b = Key {
            layer: u32::MAX - 1,
            span: 42,
        };
        assert!(insert(a, span(1), |_| {}));
        assert!(insert(b, span(2), |_| {}));
        assert_eq!(find(a).map(|s| s.generation), Some(1));
        assert_eq!(find(b).map(|s| s.generation), Some(2));
        let mut removed = None;
        remove(a, |s| removed = Some(s.generation));
        assert_eq!(removed, Some(1));
        assert!(find(a).is_none());
        assert_eq!(find(b).map(|s| s.generation), Some(2));
        remove_layer(u32::MAX - 1);
        assert!(find(b).is_none());
    }

    #[test]
    fn keys_beyond_a_full_bucket_go_to_later_buckets_and_levels() {
        let layer = u32::MAX - 2;
        // More spans than their buckets hold: every one is still found.
        let keys: Vec<Key> = (1..=5000u64).map(|span| Key { layer, span }).collect();
        for (i, key) in keys.iter().enumerate() {
            assert!(insert(*key, span(i as u32), |_| {}));
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(find(*key).map(|s| s.generation), Some(i as u32), "{key:?}");
        }
        assert!(
            LEVELS_IN_USE[1].get().is_some(),
            "5000 spans overflow the first level"
        );
        for key in &keys {
            let mut removed = false;
            remove(*key, |_| removed = true);
            assert!(removed);
        }
        assert!(keys.iter().all(|key| find(*key).is_none()));
    }
}

//! What the layer keeps per span, outside the registry: one table of the process, keyed by
//! the layer and the span's id, that every thread reaches (a span created on one thread is
//! entered, recorded and closed on others).
//!
//! Why not the registry's extensions: a span's data there costs a box, a hash-map insert, a
//! lock and a lookup of the span at each access, and the clearing at close (about 600
//! instructions of a span's 2 270 in the CI count of 2026-11-26). Here a span costs a slot
//! claimed at its creation (one compare-and-swap), one slot lock per exit, and the slot
//! freed at close.
//!
//! Layout: levels of buckets of [`BUCKET_SLOTS`] slots; a key's home is one bucket of a
//! level. The slots' span ids are a separate array of words (0: free) so that a lookup reads
//! one cache line per bucket; a live span's state is read and changed under its slot's lock
//! (its users may be on several threads), its slot claimed with one compare-and-swap and
//! freed by its close with plain stores (see [`Level`]). A key that
//! finds its home and the next [`PROBE_BUCKETS`]` - 1` buckets full goes to the next level
//! (allocated then, twice the size), and its home bucket is marked overflowed, so that a
//! lookup of a key of a bucket never overflowed reads that bucket alone. Levels are
//! allocated zeroed (untouched pages cost nothing) and never freed.

use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

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
    /// The key's layer as a slot's layer word: its number plus 1 (never 0, the word of a
    /// free slot: layers count up from 1, far from `u32::MAX`).
    #[inline(always)]
    fn layer_word(self) -> u32 {
        self.layer.wrapping_add(1)
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
    /// Held while the users of a live span (its enters, exits and records, on any thread)
    /// read or change its state.
    /// ATOMICS: `Acquire` on taking, `Release` on giving back: the state written under the
    /// lock is seen by the next holder.
    locked: AtomicBool,
    /// Initialised from the slot's claim (its id word set) until its free (its id word
    /// cleared); see [`Level::ids`] for who may touch it when.
    state: UnsafeCell<MaybeUninit<SpanState>>,
}

// SAFETY: `state` is written by the thread that claimed the slot until it publishes it, then
// under `locked` by the span's users, and dropped by the span's close when no user is left
// (see `Level::ids`); a `SpanState` is `Send` (metadata is `Sync`, the rest owned data).
unsafe impl Sync for Slot {}

/// One level: `buckets` buckets of [`BUCKET_SLOTS`] slots.
///
/// A slot's life: free (id word 0) → claimed by the creation (or taking in) of a span, by a
/// compare-and-swap of its id word from 0 (one thread wins) → filled by that thread alone
/// (no other thread looks at a slot whose layer word is 0) → published, its layer word set
/// → found by the span's users (its id and layer words both match: one live span has that
/// key), who take the slot's lock to read or change the state → freed by the span's close,
/// when no user is left: the state dropped, the layer word then the id word cleared.
struct Level {
    /// The id of a slot's span, 0 when free.
    /// ATOMICS: the claim's compare-and-swap is `AcqRel` (it reads the free's `Release`
    /// store of 0, so the claimer's writes follow the last occupant's drop; finders'
    /// `Acquire` loads of the id then see the layer word cleared by that free, never the
    /// previous occupant's); the free stores 0 with `Release`.
    ids: Box<[AtomicU64]>,
    /// The slot's span's layer number plus 1, 0 while free or being filled.
    /// ATOMICS: `Release` store when published (after the state is written), `Acquire`
    /// loads by finders; cleared `Relaxed` by the free before its `Release` of the id.
    layers: Box<[AtomicU32]>,
    /// Per bucket: a key whose home it is went to a later bucket or level.
    /// ATOMICS: `Relaxed`: set before the key's slot elsewhere is published; a lookup of
    /// that key runs after the span's creation returned, which the span's handle orders
    /// before it.
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
        // SAFETY: zero is a valid `AtomicU64`, `AtomicU32` (0), `AtomicBool` (false), and
        // `Slot` (unlocked, state uninitialised: a `MaybeUninit` holds any bits).
        unsafe {
            Level {
                ids: zeroed_slice(buckets * BUCKET_SLOTS),
                layers: zeroed_slice(buckets * BUCKET_SLOTS),
                overflowed: zeroed_slice(buckets),
                slots: zeroed_slice(buckets * BUCKET_SLOTS),
                bits,
            }
        }
    }

    /// The home bucket of `key`: a hash of its layer and all but the top
    /// [`GENERATION_BITS`] bits of its id. The registry's ids (`tracing-subscriber`'s
    /// sharded slab) keep a count of the reuses of the span's slab slot there, the slot and
    /// its thread's shard below, so that the spans a thread creates one after another in the
    /// same slab slot (a loop's) keep one bucket, in cache, rather than each one anywhere in
    /// the table.
    #[inline(always)]
    fn home(&self, key: Key) -> usize {
        let place = (key.span & (u64::MAX >> GENERATION_BITS)) ^ (u64::from(key.layer) << 51);
        (place.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    #[inline(always)]
    fn bucket_after(&self, bucket: usize, step: usize) -> usize {
        (bucket + step) & ((1 << self.bits) - 1)
    }

    /// The slot of the live span `key` in `bucket`.
    #[inline(always)]
    fn find_in(&self, bucket: usize, key: Key) -> Option<SlotRef<'_>> {
        let first = bucket * BUCKET_SLOTS;
        let ids: &[AtomicU64; BUCKET_SLOTS] = self.ids[first..first + BUCKET_SLOTS]
            .try_into()
            .expect("a bucket's ids");
        for (i, id) in ids.iter().enumerate() {
            // ATOMICS: see `ids` and `layers`.
            if id.load(Ordering::Acquire) == key.span
                && self.layers[first + i].load(Ordering::Acquire) == key.layer_word()
            {
                return Some(self.slot(first + i));
            }
        }
        None
    }

    /// The slot of `key` in the buckets after its home in this level (its home overflowed).
    fn find_beyond_home(&self, key: Key) -> Option<SlotRef<'_>> {
        let home = self.home(key);
        (1..PROBE_BUCKETS).find_map(|step| self.find_in(self.bucket_after(home, step), key))
    }

    /// A free slot claimed for `key` (its id word set); `None` when the key's buckets are
    /// full (its home then marked overflowed).
    fn claim(&self, key: Key) -> Option<SlotRef<'_>> {
        let home = self.home(key);
        for step in 0..PROBE_BUCKETS {
            let first = self.bucket_after(home, step) * BUCKET_SLOTS;
            for i in first..first + BUCKET_SLOTS {
                // ATOMICS: see `ids`.
                if self.ids[i].load(Ordering::Relaxed) == 0
                    && self.ids[i]
                        .compare_exchange(0, key.span, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    if step > 0 {
                        // ATOMICS: see `overflowed`.
                        self.overflowed[home].store(true, Ordering::Relaxed);
                    }
                    return Some(self.slot(i));
                }
            }
        }
        // ATOMICS: see `overflowed`.
        self.overflowed[home].store(true, Ordering::Relaxed);
        None
    }

    #[inline(always)]
    fn slot(&self, i: usize) -> SlotRef<'_> {
        SlotRef {
            slot: &self.slots[i],
            id: &self.ids[i],
            layer: &self.layers[i],
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

/// A slot: claimed by this thread, or holding a live span this thread is a user of.
#[derive(Clone, Copy)]
pub(super) struct SlotRef<'l> {
    slot: &'l Slot,
    id: &'l AtomicU64,
    layer: &'l AtomicU32,
}

impl<'l> SlotRef<'l> {
    /// The span's state, locked.
    #[inline(always)]
    pub(super) fn lock(self) -> SlotGuard<'l> {
        // ATOMICS: see `Slot::locked`.
        if self
            .slot
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            lock_contended(&self.slot.locked);
        }
        SlotGuard { slot: self.slot }
    }

    /// Fill this claimed slot with a span made of `new` (no fields yet), let `fill` complete
    /// it in place, then publish it for `key`. If `fill` panics (the program's `Debug` of a
    /// field), the slot is freed again.
    #[inline(always)]
    fn fill(self, key: Key, new: NewSpan, fill: impl FnOnce(&mut SpanState)) {
        let state = self.slot.state.get();
        // SAFETY: the slot is claimed by this thread and unpublished (its layer word is 0):
        // no other thread reads or writes the state. Written field by field: no copy of a
        // whole state.
        let state = unsafe {
            let state = (*state).as_mut_ptr();
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
        /// Frees the slot if `fill` unwinds.
        struct Unwinding<'l>(Option<SlotRef<'l>>);
        impl Drop for Unwinding<'_> {
            fn drop(&mut self) {
                if let Some(slot) = self.0.take() {
                    slot.free();
                }
            }
        }
        let mut unwinding = Unwinding(Some(self));
        fill(state);
        unwinding.0 = None;
        // ATOMICS: see `Level::layers`.
        self.layer.store(key.layer_word(), Ordering::Release);
    }

    /// Free the slot, dropping its state: by the span's close (no user is left), or by the
    /// thread that claimed it.
    fn free(self) {
        // SAFETY: the state is initialised (claimed and filled, or its fill began with every
        // field written) and no other thread uses it (see `Level`).
        unsafe { (*self.slot.state.get()).assume_init_drop() };
        // ATOMICS: see `Level::ids` and `Level::layers`.
        self.layer.store(0, Ordering::Relaxed);
        self.id.store(0, Ordering::Release);
    }

    /// The state of the span, which the caller, its last user, is closing.
    fn closing(&self) -> &SpanState {
        // SAFETY: a published slot's state is initialised; at the close no other thread uses
        // it (see `Level`).
        unsafe { (*self.slot.state.get()).assume_init_ref() }
    }
}

/// A locked slot holding a live span.
pub(super) struct SlotGuard<'l> {
    slot: &'l Slot,
}

impl Deref for SlotGuard<'_> {
    type Target = SpanState;

    fn deref(&self) -> &SpanState {
        // SAFETY: a guard is made only for a published slot (initialised state), and the
        // lock makes this the only access.
        unsafe { (*self.slot.state.get()).assume_init_ref() }
    }
}

impl DerefMut for SlotGuard<'_> {
    fn deref_mut(&mut self) -> &mut SpanState {
        // SAFETY: as in `deref`.
        unsafe { (*self.slot.state.get()).assume_init_mut() }
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

/// Keep a span made of `new` for `key`, a span being created (no other thread can know it
/// yet), completed in place by `fill` (which may run the program's code); `false` (`fill`
/// not called) when every level is full.
#[inline(always)]
pub(super) fn insert(key: Key, new: NewSpan, fill: impl FnOnce(&mut SpanState)) -> bool {
    let Some(slot) = claim(key) else {
        return false;
    };
    slot.fill(key, new, fill);
    true
}

/// Serialises the taking in of live spans the table does not keep (their users on several
/// threads may try at once): one entry per span.
static TAKING_IN: Mutex<()> = Mutex::new(());

/// [`insert`] for a live span the table did not keep (created before the trace), unless a
/// user of it on another thread took it in first; `false` when every level is full.
pub(super) fn take_in(key: Key, new: NewSpan, fill: impl FnOnce(&mut SpanState)) -> bool {
    let _one = TAKING_IN.lock().unwrap_or_else(|p| p.into_inner());
    find(key).is_some() || insert(key, new, fill)
}

/// A free slot claimed for `key`, in the first level with room.
fn claim(key: Key) -> Option<SlotRef<'static>> {
    (0..LEVELS).find_map(|n| level(n).claim(key))
}

/// The slot of the live span `key`, if the table keeps it (the caller is a user of the span:
/// it holds a handle, or is its close).
#[inline(always)]
pub(super) fn find(key: Key) -> Option<SlotRef<'static>> {
    let first = LEVELS_IN_USE[0].get()?;
    let home = first.home(key);
    if let Some(found) = first.find_in(home, key) {
        return Some(found);
    }
    // ATOMICS: see `Level::overflowed`.
    if !first.overflowed[home].load(Ordering::Relaxed) {
        return None;
    }
    find_beyond_home(key)
}

/// [`find`] past the key's home bucket in the first level: the next buckets there, then the
/// later levels.
#[cold]
#[inline(never)]
fn find_beyond_home(key: Key) -> Option<SlotRef<'static>> {
    for level in LEVELS_IN_USE.iter() {
        let level = level.get()?;
        let home = level.home(key);
        if let Some(found) = level.find_in(home, key) {
            return Some(found);
        }
        // ATOMICS: see `Level::overflowed`.
        if !level.overflowed[home].load(Ordering::Relaxed) {
            return None;
        }
        if let Some(found) = level.find_beyond_home(key) {
            return Some(found);
        }
    }
    None
}

/// The close of span `key` (its last user): `f` of what was kept, if anything, then the
/// slot freed.
#[inline]
pub(super) fn remove(key: Key, f: impl FnOnce(&SpanState)) {
    if let Some(found) = find(key) {
        f(found.closing());
        found.free();
    }
}

/// Stop keeping every span of `layer` (a layer dropped with its subscriber: none of its spans
/// has a user left, and none will be closed).
pub(super) fn remove_layer(layer: u32) {
    let word = Key { layer, span: 0 }.layer_word();
    for level in LEVELS_IN_USE.iter().filter_map(OnceLock::get) {
        for i in 0..level.ids.len() {
            // ATOMICS: see `Level::layers`.
            if level.layers[i].load(Ordering::Acquire) == word {
                level.slot(i).free();
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
            layer: u32::MAX - 1,
            span: 42,
        };
        let b = Key {
            layer: u32::MAX - 2,
            span: 42,
        };
        assert!(insert(a, span(1), |_| {}));
        assert!(insert(b, span(2), |_| {}));
        assert_eq!(find(a).map(|s| s.lock().generation), Some(1));
        assert_eq!(find(b).map(|s| s.lock().generation), Some(2));
        let mut removed = None;
        remove(a, |s| removed = Some(s.generation));
        assert_eq!(removed, Some(1));
        assert!(find(a).is_none());
        assert_eq!(find(b).map(|s| s.lock().generation), Some(2));
        remove_layer(u32::MAX - 2);
        assert!(find(b).is_none());
    }

    #[test]
    fn keys_beyond_a_full_bucket_go_to_later_buckets_and_levels() {
        let layer = u32::MAX - 3;
        // More spans than their buckets hold: every one is still found.
        let keys: Vec<Key> = (1..=5000u64).map(|span| Key { layer, span }).collect();
        for (i, key) in keys.iter().enumerate() {
            assert!(insert(*key, span(i as u32), |_| {}));
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(
                find(*key).map(|s| s.lock().generation),
                Some(i as u32),
                "{key:?}"
            );
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

    #[test]
    fn a_span_taken_in_by_two_users_has_one_entry() {
        let key = Key {
            layer: u32::MAX - 4,
            span: 7,
        };
        assert!(take_in(key, span(1), |_| {}));
        assert!(take_in(key, span(2), |_| {}));
        assert_eq!(find(key).map(|s| s.lock().generation), Some(1));
        remove(key, |_| {});
        assert!(find(key).is_none(), "one entry, removed by the close");
    }

    #[test]
    fn a_fill_that_panics_leaves_its_slot_free() {
        let key = Key {
            layer: u32::MAX - 5,
            // An id no other test of this process uses.
            span: 0x5eed_0000_0009,
        };
        let filled = std::panic::catch_unwind(|| insert(key, span(1), |_| panic!("a Debug")));
        assert!(filled.is_err());
        assert!(find(key).is_none());
        let claimed = LEVELS_IN_USE
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|level| level.ids.iter())
            .any(|id| id.load(Ordering::Relaxed) == key.span);
        assert!(!claimed, "the slot was freed again");
    }
}

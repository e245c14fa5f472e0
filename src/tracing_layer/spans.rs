//! What the layer keeps per span, outside the registry: one table of the process, keyed by
//! the layer and the span's id, that every thread reaches (a span created on one thread is
//! entered, recorded and closed on others).
//!
//! Why not the registry's extensions: a span's data there costs a box, a hash-map insert, a
//! lock and a lookup of the span at each access, and the clearing at close (about 600
//! instructions of a span's 2 270 in the CI count of 2026-11-26). Here a span costs a slot
//! claimed at its creation (one compare-and-swap), one slot lock per exit, and the slot
//! freed at close; a thread that holds a [`SlotRef`] of the span (from its creation, or
//! its enter) checks that the slot still holds it ([`SlotRef::holds`]: two loads) rather
//! than looking it up.
//!
//! Layout: levels of buckets of [`BUCKET_SLOTS`] slots; a key's home is one bucket of a
//! level. The slots' span ids are a separate array of words (0: free), one 64-byte line per
//! bucket, so that a lookup reads one line per bucket; a live span's state is read and
//! changed under its slot's lock (its users may be on several threads), its slot claimed
//! with one compare-and-swap and freed by its close with plain stores (see [`Level`]). A key
//! that finds its home and the next [`PROBE_BUCKETS`]` - 1` buckets full goes to the next
//! level (allocated then, twice the size), and its home bucket is marked overflowed, so that
//! a lookup of a key of a bucket never overflowed reads that bucket alone. Levels are
//! allocated zeroed (untouched pages cost nothing) and never freed.
//!
//! Signal handlers: a handler that uses `tracing` on a thread interrupted inside the layer
//! may find a lock held by that very thread (a slot's, or the taking in's): it then gets no
//! lock ([`OwnerLock::lock`] answers `None`) and the layer leaves that span alone (a duration
//! not written is counted as dropped), rather than waiting for itself forever.

use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

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

/// Name of a span duration's argument carrying the span's id. A `static`, so that every use
/// is the one address the thread's string cache knows it by (string literals are not
/// guaranteed to be merged).
pub(super) static SPAN_ID: &str = "span_id";

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

// === layer numbers ===

/// The next layer number.
/// ATOMICS: `Relaxed`: a unique counter.
static NEXT_LAYER: AtomicU32 = AtomicU32::new(1);

/// A layer's number in the table, shared by every copy of the layer that uses it (a layer
/// given twice to one subscriber): when the last copy is dropped, no callback of the number
/// runs any more (a subscriber is dropped with its layers; `reload` swaps a layer out once
/// no callback of it is in flight), and the spans it still keeps (never closed: the
/// subscriber went first) are freed.
#[derive(Debug)]
pub(super) struct LayerNumber(u32);

impl LayerNumber {
    pub(super) fn new() -> Arc<LayerNumber> {
        // ATOMICS: see `NEXT_LAYER`.
        Arc::new(LayerNumber(NEXT_LAYER.fetch_add(1, Ordering::Relaxed)))
    }

    pub(super) fn get(&self) -> u32 {
        self.0
    }
}

impl Drop for LayerNumber {
    fn drop(&mut self) {
        remove_layer(self.0);
    }
}

// === a span's state ===

/// A field value kept with a span.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Owned {
    Scalar(ArgValue<'static>),
    Text(String),
}

/// A span's fields: inline while they are few scalars, owned in a `Vec` otherwise. While
/// inline with room, the span's id follows them as one more argument ([`SPAN_ID`]), so that
/// a duration's arguments are one slice ([`SpanFields::args_with_id`]).
#[derive(Debug)]
pub(super) struct SpanFields {
    /// Inline fields: `names[..len]` and `values[..len]` are initialised (while `owned` is
    /// `None`; 0 after), and so are `names[len]` and `values[len]` (the id) when
    /// `len < INSTALLED_SPAN_ARGS`.
    len: usize,
    /// At most [`INSTALLED_SPAN_ARGS`] scalar fields, encoded for the record (but for their
    /// names' indices): no allocation.
    names: [MaybeUninit<&'static str>; INSTALLED_SPAN_ARGS],
    values: [MaybeUninit<ScalarArg>; INSTALLED_SPAN_ARGS],
    /// Any fields, once one is a text or there are more than fit inline.
    owned: Option<Vec<(&'static str, Owned)>>,
    /// The span's id (its `span_id` argument).
    id: u64,
}

impl SpanFields {
    /// No fields yet, of span `id`, written in place (a whole `SpanFields` is not built and
    /// copied: its inline arrays stay uninitialised).
    ///
    /// # Safety
    /// `place` must be valid for writes and aligned.
    #[inline(always)]
    unsafe fn init_in(place: *mut SpanFields, id: u64) {
        // SAFETY: the caller's promise; each field is written through a raw pointer, none
        // read.
        unsafe {
            ptr::addr_of_mut!((*place).len).write(0);
            ptr::addr_of_mut!((*place).owned).write(None);
            ptr::addr_of_mut!((*place).id).write(id);
            ptr::addr_of_mut!((*place).names)
                .cast::<&'static str>()
                .write(SPAN_ID);
            ptr::addr_of_mut!((*place).values)
                .cast::<ScalarArg>()
                .write(id_arg(id));
        }
    }

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

    /// The fields then the id ([`SPAN_ID`]), while the fields are inline scalars with room
    /// for it: a duration's arguments as they are kept.
    #[inline(always)]
    pub(super) fn args_with_id(&self) -> Option<(&[&'static str], &[ScalarArg])> {
        if self.owned.is_some() || self.len >= INSTALLED_SPAN_ARGS {
            return None;
        }
        // SAFETY: `names[..=len]` and `values[..=len]` are initialised while inline with
        // `len < INSTALLED_SPAN_ARGS` (see `len`); `MaybeUninit<T>` has the layout of `T`.
        unsafe {
            Some((
                std::slice::from_raw_parts(self.names.as_ptr().cast(), self.len + 1),
                std::slice::from_raw_parts(self.values.as_ptr().cast(), self.len + 1),
            ))
        }
    }

    /// The span's id.
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// Count one more inline field, and write the id after it if there is room.
    #[inline(always)]
    fn grew(&mut self) {
        self.len += 1;
        if self.len < INSTALLED_SPAN_ARGS {
            self.names[self.len].write(SPAN_ID);
            self.values[self.len].write(id_arg(self.id));
        }
    }

    /// Add field `name`, one the span does not have yet (a span's fields at its creation).
    #[inline(always)]
    pub(super) fn push_scalar(&mut self, name: &'static str, value: ArgValue<'static>) {
        match ScalarArg::new(value) {
            Some(scalar) if self.owned.is_none() && self.len < INSTALLED_SPAN_ARGS => {
                self.names[self.len].write(name);
                self.values[self.len].write(scalar);
                self.grew();
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
                    self.grew();
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

/// A span id as an argument value.
#[inline(always)]
fn id_arg(id: u64) -> ScalarArg {
    ScalarArg::new(ArgValue::U64(id)).unwrap_or(ScalarArg::NULL)
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
    /// The table was full when the span was created: the fields it was created with are
    /// gone (those recorded since are kept).
    TableFull,
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

// === locks ===

thread_local! {
    /// Its address is the thread's key in an [`OwnerLock`] (no destructor, a constant
    /// initialiser: always reachable, never 0).
    static THREAD_KEY: u8 = const { 0 };
}

/// The calling thread's key: unique among live threads.
#[inline(always)]
fn thread_key() -> usize {
    THREAD_KEY.with(|key| key as *const u8 as usize)
}

/// A lock held for a few hundred instructions at most (a record written, fields copied)
/// whose word is its holder's [`thread_key`], 0 when free.
#[derive(Debug)]
struct OwnerLock {
    /// ATOMICS: `Acquire` on taking, `Release` on giving back: what is written under the
    /// lock is seen by the next holder.
    holder: AtomicUsize,
}

impl OwnerLock {
    const fn new() -> OwnerLock {
        OwnerLock {
            holder: AtomicUsize::new(0),
        }
    }

    /// The lock, once its holder (on another thread) gives it back; `None` if the calling
    /// thread holds it already (a signal handler that interrupted the thread inside the
    /// layer): waiting would never end.
    #[inline(always)]
    fn lock(&self) -> Option<OwnerGuard<'_>> {
        let me = thread_key();
        // ATOMICS: see `holder`.
        let taken = self
            .holder
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        // (A guard is made only once the lock is held: dropping one gives the lock back.)
        if taken || lock_contended(&self.holder, me) {
            Some(OwnerGuard {
                holder: &self.holder,
            })
        } else {
            None
        }
    }
}

/// Take a lock held by someone (`me`: the calling thread's key): `false` if that is the
/// calling thread itself.
#[cold]
#[inline(never)]
fn lock_contended(holder: &AtomicUsize, me: usize) -> bool {
    let mut spins = 0u32;
    loop {
        // ATOMICS: see `OwnerLock::holder`.
        match holder.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(current) if current == me => return false,
            Err(_) => {}
        }
        spins += 1;
        if spins < 100 {
            std::hint::spin_loop();
        } else {
            // The holder may have been preempted.
            std::thread::yield_now();
        }
    }
}

/// A held [`OwnerLock`], given back when dropped.
struct OwnerGuard<'l> {
    holder: &'l AtomicUsize,
}

impl Drop for OwnerGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // ATOMICS: see `OwnerLock::holder`.
        self.holder.store(0, Ordering::Release);
    }
}

// === the table ===

/// One span's slot.
struct Slot {
    /// Held while the users of a live span (its enters, exits and records, on any thread)
    /// read or change its state.
    lock: OwnerLock,
    /// Initialised from the slot's claim (its id word set) until its free (its id word
    /// cleared); see [`Level::ids`] for who may touch it when.
    state: UnsafeCell<MaybeUninit<SpanState>>,
}

// SAFETY: `state` is written by the thread that claimed the slot until it publishes it, then
// under `lock` by the span's users, and dropped by the span's close when no user is left
// (see `Level::ids`); a `SpanState` is `Send` (metadata is `Sync`, the rest owned data).
unsafe impl Sync for Slot {}

/// `len` zeroed `T`s, aligned to a 64-byte line, freed when dropped (only a level that lost
/// the race to be installed is dropped: see [`level_or_new`]).
struct Zeroed<T> {
    ptr: NonNull<T>,
    len: usize,
    _owns: PhantomData<T>,
}

// SAFETY: a `Zeroed<T>` is a uniquely owned array of `T`s, shared only as `&[T]`.
unsafe impl<T: Sync> Sync for Zeroed<T> {}
// SAFETY: as above; freeing it on another thread is freeing `T`s that need no drop.
unsafe impl<T: Send> Send for Zeroed<T> {}

impl<T> Zeroed<T> {
    fn layout(len: usize) -> Layout {
        Layout::array::<T>(len)
            .and_then(|layout| layout.align_to(64))
            .expect("a level's size fits in memory")
    }

    /// # Safety
    /// The all-zero bit pattern must be a valid `T`, and `T` must need no drop.
    unsafe fn new(len: usize) -> Zeroed<T> {
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size (every level has slots, every `T` here is
        // non-zero-sized).
        let ptr = unsafe { alloc::alloc_zeroed(layout) }.cast::<T>();
        let Some(ptr) = NonNull::new(ptr) else {
            alloc::handle_alloc_error(layout);
        };
        Zeroed {
            ptr,
            len,
            _owns: PhantomData,
        }
    }
}

impl<T> Deref for Zeroed<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` `T`s, all valid (zero, which `new`'s caller promised is a
        // valid `T`, or written since through shared references to atomics and cells).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for Zeroed<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by `new` with this layout; the `T`s need no drop (`new`'s
        // promise).
        unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) };
    }
}

/// One level: buckets of [`BUCKET_SLOTS`] slots.
///
/// A slot's life: free (id word 0) → claimed by the creation (or taking in) of a span, by a
/// compare-and-swap of its id word from 0 (one thread wins) → filled by that thread alone
/// (no other thread looks at a slot whose layer word is 0) → published, its layer word set
/// → found by the span's users (its id and layer words both match: one live span has that
/// key), who take the slot's lock to read or change the state → freed by the span's close,
/// when no user is left: the state dropped, the layer word then the id word cleared. (Or
/// freed by [`remove_layer`] once no copy of its layer is left.)
struct Level {
    /// Per bucket, the id of each slot's span, 0 when free.
    /// ATOMICS: the claim's compare-and-swap is `AcqRel` (it reads the free's `Release`
    /// store of 0, so the claimer's writes follow the last occupant's drop; finders'
    /// `Acquire` loads of the id then see the layer word cleared by that free, never the
    /// previous occupant's); the free stores 0 with `Release`.
    ids: Zeroed<[AtomicU64; BUCKET_SLOTS]>,
    /// Per bucket, each slot's span's layer number plus 1, 0 while free or being filled.
    /// ATOMICS: `Release` store when published (after the state is written), `Acquire`
    /// loads by finders; cleared `Relaxed` by the free before its `Release` of the id.
    layers: Zeroed<[AtomicU32; BUCKET_SLOTS]>,
    /// Per bucket: a key whose home it is went to a later bucket or level.
    /// ATOMICS: `Relaxed`: set before the key's slot elsewhere is published; a lookup of
    /// that key runs after the span's creation returned, which the span's handle orders
    /// before it.
    overflowed: Zeroed<AtomicBool>,
    slots: Zeroed<[Slot; BUCKET_SLOTS]>,
    /// log2 of the bucket count.
    bits: u32,
}

impl Level {
    fn new(bits: u32) -> Level {
        let buckets = 1usize << bits;
        // SAFETY: zero is a valid `AtomicU64`, `AtomicU32` (0), `AtomicBool` (false), and
        // `Slot` (unlocked, state uninitialised: a `MaybeUninit` holds any bits); none
        // needs a drop (a `Slot`'s state is `MaybeUninit`).
        unsafe {
            Level {
                ids: Zeroed::new(buckets),
                layers: Zeroed::new(buckets),
                overflowed: Zeroed::new(buckets),
                slots: Zeroed::new(buckets),
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
        let ids = &self.ids[bucket];
        let layers = &self.layers[bucket];
        for (i, id) in ids.iter().enumerate() {
            // ATOMICS: see `ids` and `layers`.
            if id.load(Ordering::Acquire) == key.span
                && layers[i].load(Ordering::Acquire) == key.layer_word()
            {
                return Some(self.slot(bucket, i));
            }
        }
        None
    }

    /// The slot of `key` in the buckets after its home in this level (its home overflowed).
    fn find_beyond_home(&self, key: Key) -> Option<SlotRef<'_>> {
        let home = self.home(key);
        (1..PROBE_BUCKETS).find_map(|step| self.find_in(self.bucket_after(home, step), key))
    }

    /// A free slot of `bucket` claimed for `key` (its id word set).
    #[inline(always)]
    fn claim_in(&self, bucket: usize, key: Key) -> Option<SlotRef<'_>> {
        for (i, id) in self.ids[bucket].iter().enumerate() {
            // ATOMICS: see `ids`.
            if id.load(Ordering::Relaxed) == 0
                && id
                    .compare_exchange(0, key.span, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return Some(self.slot(bucket, i));
            }
        }
        None
    }

    /// A free slot claimed for `key` (its id word set); `None` when the key's buckets are
    /// full (its home then marked overflowed).
    fn claim(&self, key: Key) -> Option<SlotRef<'_>> {
        let home = self.home(key);
        if let Some(slot) = self.claim_in(home, key) {
            return Some(slot);
        }
        // ATOMICS: see `overflowed`.
        self.overflowed[home].store(true, Ordering::Relaxed);
        (1..PROBE_BUCKETS).find_map(|step| self.claim_in(self.bucket_after(home, step), key))
    }

    #[inline(always)]
    fn slot(&self, bucket: usize, i: usize) -> SlotRef<'_> {
        SlotRef {
            slot: &self.slots[bucket][i],
            id: &self.ids[bucket][i],
            layer: &self.layers[bucket][i],
        }
    }
}

/// A slot: claimed by this thread, or holding a live span this thread is a user of (or was:
/// see [`SlotRef::holds`]).
#[derive(Clone, Copy)]
pub(super) struct SlotRef<'l> {
    slot: &'l Slot,
    id: &'l AtomicU64,
    layer: &'l AtomicU32,
}

impl std::fmt::Debug for SlotRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotRef")
            .field("slot", &(self.slot as *const Slot))
            .finish()
    }
}

impl<'l> SlotRef<'l> {
    /// Whether the slot holds the live span `key`, for a user of that span (it holds a
    /// handle, or is its close) that kept this slot from an earlier call: one live span has
    /// that key, so matching words are its slot; after the span's close the slot may hold
    /// another span, or none.
    #[inline(always)]
    pub(super) fn holds(self, key: Key) -> bool {
        // ATOMICS: see `Level::ids` and `Level::layers`.
        self.id.load(Ordering::Acquire) == key.span
            && self.layer.load(Ordering::Acquire) == key.layer_word()
    }

    /// The span's state, locked; `None` if the calling thread holds the lock already (a
    /// signal handler: see [`OwnerLock::lock`]).
    #[inline(always)]
    pub(super) fn lock(self) -> Option<SlotGuard<'l>> {
        let guard = self.slot.lock.lock()?;
        Some(SlotGuard {
            slot: self.slot,
            _guard: guard,
        })
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
            ptr::addr_of_mut!((*state).generation).write(new.generation);
            ptr::addr_of_mut!((*state).metadata).write(new.metadata);
            ptr::addr_of_mut!((*state).origin).write(new.origin);
            ptr::addr_of_mut!((*state).origin_tid).write(new.origin_tid);
            ptr::addr_of_mut!((*state).async_begun).write(false);
            ptr::addr_of_mut!((*state).missing).write(new.missing);
            SpanFields::init_in(ptr::addr_of_mut!((*state).fields), key.span);
            ptr::addr_of_mut!((*state).memo).write(new.memo);
            ptr::addr_of_mut!((*state).all_fields).write(false);
            &mut *state
        };
        /// Frees the slot if `fill` unwinds (forgotten when it returns).
        struct Unwinding<'l>(SlotRef<'l>);
        impl Drop for Unwinding<'_> {
            fn drop(&mut self) {
                self.0.free();
            }
        }
        let unwinding = Unwinding(self);
        fill(state);
        std::mem::forget(unwinding);
        // ATOMICS: see `Level::layers`.
        self.layer.store(key.layer_word(), Ordering::Release);
    }

    /// Free the slot, dropping its state: by the span's close (no user is left), by the
    /// thread that claimed it, or once no copy of its layer is left.
    fn free(self) {
        // SAFETY: the state is initialised (claimed and filled, or its fill began with every
        // field written) and no other thread uses it (see `Level`).
        unsafe { (*self.slot.state.get()).assume_init_drop() };
        // ATOMICS: see `Level::ids` and `Level::layers`.
        self.layer.store(0, Ordering::Relaxed);
        self.id.store(0, Ordering::Release);
    }
}

/// A locked slot holding a live span.
pub(super) struct SlotGuard<'l> {
    slot: &'l Slot,
    _guard: OwnerGuard<'l>,
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

/// The levels, installed as they are first needed.
/// ATOMICS: installed by a compare-and-swap from null, `AcqRel` (the level's zeroed memory
/// published with it); read `Acquire`.
static LEVELS_IN_USE: [AtomicPtr<Level>; LEVELS] =
    [const { AtomicPtr::new(ptr::null_mut()) }; LEVELS];

/// How many levels may be used: [`LEVELS`], less in tests that fill the table
/// ([`allow_levels`]).
/// ATOMICS: `Relaxed`: a bound read when a key's first-level home is full.
static LEVELS_ALLOWED: AtomicUsize = AtomicUsize::new(LEVELS);

/// Level `n` if installed.
#[inline(always)]
fn level(n: usize) -> Option<&'static Level> {
    // ATOMICS: see `LEVELS_IN_USE`.
    let level = LEVELS_IN_USE[n].load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked `Box<Level>`, never freed.
    unsafe { level.as_ref() }
}

/// Level `n`, installed now if it was not (lock-free: a signal handler may need a level).
#[cold]
fn level_or_new(n: usize) -> &'static Level {
    if let Some(level) = level(n) {
        return level;
    }
    let bits = FIRST_LEVEL_BUCKETS.trailing_zeros() + n as u32;
    let new = Box::into_raw(Box::new(Level::new(bits)));
    // ATOMICS: see `LEVELS_IN_USE`.
    match LEVELS_IN_USE[n].compare_exchange(
        ptr::null_mut(),
        new,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: `new` is a leaked box, installed for good.
        Ok(_) => unsafe { &*new },
        Err(installed) => {
            // SAFETY: `new` was never shared (another thread installed its level first).
            drop(unsafe { Box::from_raw(new) });
            // SAFETY: as in `level`.
            unsafe { &*installed }
        }
    }
}

/// Let the table use `levels` levels at most (1 to [`LEVELS`]: 2 048 × (2^`levels` − 1)
/// live spans); the previous bound. For tests of a full table; spans already kept beyond
/// stay until closed.
#[cfg(any(test, feature = "test-support"))]
pub(crate) fn allow_levels(levels: usize) -> usize {
    // ATOMICS: see `LEVELS_ALLOWED`.
    LEVELS_ALLOWED.swap(levels.clamp(1, LEVELS), Ordering::Relaxed)
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
/// yet), completed in place by `fill` (which may run the program's code): its slot, or
/// `None` (`fill` not called) when every level is full.
#[inline(always)]
pub(super) fn insert(
    key: Key,
    new: NewSpan,
    fill: impl FnOnce(&mut SpanState),
) -> Option<SlotRef<'static>> {
    let slot = claim(key)?;
    slot.fill(key, new, fill);
    Some(slot)
}

/// Serialises the taking in of live spans the table does not keep (their users on several
/// threads may try at once): one entry per span.
static TAKING_IN: OwnerLock = OwnerLock::new();

/// [`insert`] for a live span the table did not keep (created before the trace, or when it
/// was full), unless a user of it on another thread took it in first: its slot, or `None`
/// when every level is full (or the calling thread is taking a span in already: a signal
/// handler).
pub(super) fn take_in(
    key: Key,
    new: NewSpan,
    fill: impl FnOnce(&mut SpanState),
) -> Option<SlotRef<'static>> {
    let _one = TAKING_IN.lock()?;
    find(key).or_else(|| insert(key, new, fill))
}

/// A free slot claimed for `key`: in its home bucket of the first level (the usual case),
/// else further.
#[inline(always)]
fn claim(key: Key) -> Option<SlotRef<'static>> {
    if let Some(first) = level(0) {
        if let Some(slot) = first.claim_in(first.home(key), key) {
            return Some(slot);
        }
    }
    claim_beyond_home(key)
}

/// [`claim`] past the key's home bucket in the first level (or before the first level is
/// installed): the first level with room among those allowed.
#[cold]
#[inline(never)]
fn claim_beyond_home(key: Key) -> Option<SlotRef<'static>> {
    // ATOMICS: see `LEVELS_ALLOWED`.
    let allowed = LEVELS_ALLOWED.load(Ordering::Relaxed).min(LEVELS);
    (0..allowed).find_map(|n| level_or_new(n).claim(key))
}

/// Whether the table keeps any span (its first level exists).
#[inline(always)]
pub(super) fn in_use() -> bool {
    level(0).is_some()
}

/// The slot of the live span `key`, if the table keeps it (the caller is a user of the span:
/// it holds a handle, or is its close).
#[inline(always)]
pub(super) fn find(key: Key) -> Option<SlotRef<'static>> {
    let first = level(0)?;
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
    for n in 0..LEVELS {
        let level = level(n)?;
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

/// The close of the span in `slot` (its last user, which found the slot holding it): `f`
/// of what was kept, then the slot freed.
#[inline]
pub(super) fn close(slot: SlotRef<'static>, f: impl FnOnce(&SpanState)) {
    // SAFETY: a published slot's state is initialised; at the close no other thread uses it
    // (see `Level`).
    f(unsafe { (*slot.slot.state.get()).assume_init_ref() });
    slot.free();
}

/// Stop keeping every span of `layer` (no copy of the layer is left: none of its spans has a
/// user left, and none will be closed).
fn remove_layer(layer: u32) {
    let word = Key { layer, span: 0 }.layer_word();
    for level in (0..LEVELS).filter_map(level) {
        for (bucket, layers) in level.layers.iter().enumerate() {
            for (i, slot_layer) in layers.iter().enumerate() {
                // ATOMICS: see `Level::layers`.
                if slot_layer.load(Ordering::Acquire) == word {
                    level.slot(bucket, i).free();
                }
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

    fn generation(key: Key) -> Option<u32> {
        find(key).map(|s| s.lock().expect("not held").generation)
    }

    fn remove(key: Key) -> Option<u32> {
        let mut removed = None;
        close(find(key)?, |s| removed = Some(s.generation));
        removed
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
        let slot_a = insert(a, span(1), |_| {}).expect("room");
        assert!(insert(b, span(2), |_| {}).is_some());
        assert_eq!(generation(a), Some(1));
        assert_eq!(generation(b), Some(2));
        assert!(slot_a.holds(a) && !slot_a.holds(b));
        assert_eq!(remove(a), Some(1));
        assert!(find(a).is_none());
        assert!(
            !slot_a.holds(a),
            "a kept slot no longer holds the closed span"
        );
        assert_eq!(generation(b), Some(2));
        remove_layer(u32::MAX - 2);
        assert!(find(b).is_none());
    }

    #[test]
    fn keys_beyond_a_full_bucket_go_to_later_buckets_and_levels() {
        let layer = u32::MAX - 3;
        // More spans than their buckets hold: every one is still found.
        let keys: Vec<Key> = (1..=5000u64).map(|span| Key { layer, span }).collect();
        for (i, key) in keys.iter().enumerate() {
            assert!(insert(*key, span(i as u32), |_| {}).is_some());
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(generation(*key), Some(i as u32), "{key:?}");
        }
        assert!(level(1).is_some(), "5000 spans overflow the first level");
        for key in &keys {
            assert!(remove(*key).is_some());
        }
        assert!(keys.iter().all(|key| find(*key).is_none()));
    }

    #[test]
    fn a_span_taken_in_by_two_users_has_one_entry() {
        let key = Key {
            layer: u32::MAX - 4,
            span: 7,
        };
        let first = take_in(key, span(1), |_| {}).expect("room");
        let second = take_in(key, span(2), |_| {}).expect("found");
        assert!(std::ptr::eq(first.slot, second.slot));
        assert_eq!(generation(key), Some(1));
        assert_eq!(remove(key), Some(1));
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
        let claimed = (0..LEVELS)
            .filter_map(level)
            .flat_map(|level| level.ids.iter().flatten())
            .any(|id| id.load(Ordering::Relaxed) == key.span);
        assert!(!claimed, "the slot was freed again");
    }

    #[test]
    fn a_lock_its_holder_asks_for_again_is_refused_and_others_wait_for_it() {
        let key = Key {
            layer: u32::MAX - 6,
            span: 0x5eed_0000_000a,
        };
        let slot = insert(key, span(3), |_| {}).expect("room");
        let held = slot.lock().expect("free");
        // The holder again (a signal handler on its thread): refused, not a deadlock.
        assert!(slot.lock().is_none());
        let waiter = std::thread::spawn(move || slot.lock().map(|state| state.generation));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished(), "another thread waits for the holder");
        drop(held);
        assert_eq!(waiter.join().unwrap(), Some(3));
        assert_eq!(remove(key), Some(3));
    }

    #[test]
    fn the_last_copy_of_a_layer_number_frees_its_spans() {
        let number = LayerNumber::new();
        let copy = Arc::clone(&number);
        let key = Key {
            layer: number.get(),
            span: 0x5eed_0000_000b,
        };
        insert(key, span(4), |_| {}).expect("room");
        drop(number);
        assert_eq!(generation(key), Some(4), "a copy is left");
        drop(copy);
        assert!(find(key).is_none());
    }

    #[test]
    fn the_span_id_follows_the_inline_fields_until_they_are_full() {
        let mut fields = MaybeUninit::<SpanFields>::uninit();
        // SAFETY: a local's pointer, valid and aligned; every field written.
        let mut fields = unsafe {
            SpanFields::init_in(fields.as_mut_ptr(), 9);
            fields.assume_init()
        };
        let id = id_arg(9);
        assert_eq!(fields.args_with_id(), Some((&[SPAN_ID][..], &[id][..])));
        fields.push_scalar("a", ArgValue::U64(1));
        fields.set("b", Owned::Scalar(ArgValue::I64(-2)));
        let (names, values) = fields.args_with_id().expect("room");
        assert_eq!(names, ["a", "b", SPAN_ID]);
        assert_eq!(values[2], id);
        fields.set("a", Owned::Scalar(ArgValue::U64(3)));
        assert_eq!(
            fields.args_with_id().expect("room").1[0].value(),
            ArgValue::U64(3)
        );
        fields.push_scalar("c", ArgValue::Bool(true));
        fields.push_scalar("d", ArgValue::Bool(false));
        assert_eq!(fields.len(), INSTALLED_SPAN_ARGS);
        assert!(fields.args_with_id().is_none(), "no room for the id");
        fields.set("e", Owned::Text("text".into()));
        assert!(fields.args_with_id().is_none());
        assert_eq!(
            fields.get(4),
            ("e", ArgValue::Str(StringRef::Inline("text")))
        );
    }
}

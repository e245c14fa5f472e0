//! What the layer keeps per span, outside the registry: one table of the process, keyed by
//! the layer and the span's id, that every thread reaches (a span created on one thread is
//! entered, recorded and closed on others).
//!
//! Why not the registry's extensions: a span's data there costs a box, a hash-map insert, a
//! lock and a lookup of the span at each access, and the clearing at close (about 600
//! instructions of a span's 2 270 in the CI count of 2026-11-26). Here a span costs a slot
//! claimed at its creation (one compare-and-swap) and freed at its close (plain stores);
//! its exits read its state without a lock (atomic words and a version, [`SpanState`]),
//! and a thread that holds a [`SlotRef`] of the span (from its creation, or its enter)
//! checks that the slot still holds it ([`SlotRef::holds`]: three loads) rather than looking
//! it up. The slot's lock is taken to change the state (a `record`, an async begin, a span
//! taken into another trace) and by the rare paths that read fields only it guards.
//!
//! Layout: levels of buckets of [`BUCKET_SLOTS`] slots; a key's home is one bucket of a
//! level. The slots' span ids are a separate array of words (0: free), one 64-byte line per
//! bucket, so that a lookup reads one line per bucket (see [`Level`]). A key
//! that finds its home and the next [`PROBE_BUCKETS`]` - 1` buckets full goes to the next
//! level (allocated then, twice the size), and its home bucket is marked overflowed, so that
//! a lookup of a key of a bucket never overflowed reads that bucket alone. Levels are
//! allocated zeroed (untouched pages cost nothing) and never freed.
//!
//! Signal handlers: the layer is not async-signal-safe in general. It allocates (a level the
//! first time it is needed, a text field, the growth of a thread's list of entered spans),
//! and `tracing`'s registry does too. What it does guarantee is narrower: it never waits for
//! itself. A handler that uses `tracing` on a thread interrupted inside the layer may find a
//! lock held by that very thread (a slot's, or the taking in's): it then gets no lock
//! ([`OwnerLock::lock`] answers `None`) and the layer leaves that span alone (a duration or
//! values not kept are counted as dropped); it finds the thread's list of spans borrowed,
//! and leaves it alone the same way.

use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::ptr::{self, NonNull};
use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::Arc;

use tracing::Metadata;

use crate::engine::record::{SpanMemo, INSTALLED_SPAN_ARGS};
use crate::engine::writer::thread_key;
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
        remove_layer(self.0, super::end_kept_span);
    }
}

/// A slot's layer word ([`Level::layers`]): the layer of its span in the low half
/// ([`Key::layer_word`], 0 while free or being filled), the count of the slot's lives in the
/// high half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LayerWord(u64);

impl LayerWord {
    /// The layer of the slot's span ([`Key::layer_word`]), 0 if none is published.
    #[inline(always)]
    fn layer(self) -> u32 {
        self.0 as u32
    }

    /// The word once a span of layer word `layer` is published: one life more (it wraps
    /// after 2³² lives, far more than a slot goes through between two loads of a reader).
    #[inline(always)]
    fn published(self, layer: u32) -> LayerWord {
        LayerWord((self.0 & !u64::from(u32::MAX)).wrapping_add(1 << 32) | u64::from(layer))
    }

    /// The word once the slot is freed: no layer, its lives kept.
    #[inline(always)]
    fn freed(self) -> LayerWord {
        LayerWord(self.0 & !u64::from(u32::MAX))
    }
}

// === a span's state ===

/// A field value kept with a span.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Owned {
    Scalar(ArgValue<'static>),
    Text(String),
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

/// A span's fields once they are not all inline scalars.
type OwnedFields = Vec<(&'static str, Owned)>;

/// Bits of [`SpanState::flags`].
const ASYNC_BEGUN: u32 = 1;
/// The fields are the call site's, all of them, in their order, and scalars: the arguments'
/// names are the call site's and `span_id`, which the thread's memo keeps the indices of
/// under the call site's key ([`args_key`]).
const ALL_FIELDS: u32 = 1 << 1;
/// The fields are in [`SpanState::owned`] (a text, or more than fit inline).
const OWNED: u32 = 1 << 2;
/// [`Missing`], two bits.
const MISSING_SHIFT: u32 = 3;
const MISSING_MASK: u32 = 3 << MISSING_SHIFT;

impl Missing {
    fn bits(self) -> u32 {
        let n = match self {
            Missing::None => 0,
            Missing::BeforeTrace => 1,
            Missing::TableFull => 2,
        };
        n << MISSING_SHIFT
    }

    fn from_bits(flags: u32) -> Missing {
        match (flags & MISSING_MASK) >> MISSING_SHIFT {
            0 => Missing::None,
            1 => Missing::BeforeTrace,
            _ => Missing::TableFull,
        }
    }
}

/// What the layer keeps of a span it records, in its slot. All zero is a valid state (a
/// level is allocated zeroed), and the words stay valid across the slot's lives: a state is
/// never dropped, only its owned fields.
///
/// Rules: `metadata` is written by the claiming thread before the slot is published and
/// does not change until the slot is freed. The other words change only under the slot's
/// lock, each change between two increments of `version` ([`SlotGuard::change`]); a thread
/// without the lock reads them optimistically ([`SpanState::read_then`]) and keeps what it
/// read only if `version` was even and did not move: every word it reads is an atomic, so a
/// read that raced a change is discarded, never a data race. `owned` is read and written
/// under the lock only (and by the claiming thread before the slot is published).
pub(super) struct SpanState {
    /// Its call site: target (the category) and name.
    /// ATOMICS: `Relaxed`: published with the slot (its layer word's `Release`).
    metadata: AtomicPtr<Metadata<'static>>,
    /// The span's id (its `span_id` argument), written with `metadata`.
    id: AtomicU64,
    /// Odd while a change is being made.
    /// ATOMICS: the writer (holding the lock) stores it odd `Relaxed`, a `Release` fence,
    /// its changes `Relaxed`, then even with `Release`; the reader loads it `Acquire`, the
    /// words `Relaxed`, an `Acquire` fence, then it again: the same even value means no
    /// change overlapped the reads (the seqlock of Boehm, "Can seqlocks get along with
    /// programming language memory models?", 2012, with every datum an atomic).
    version: AtomicU32,
    /// The trace it is recorded in.
    generation: AtomicU32,
    /// [`ASYNC_BEGUN`], [`ALL_FIELDS`], [`OWNED`], [`Missing`].
    flags: AtomicU32,
    /// Inline fields: `names[..len]` and `values[..len]` (while not [`OWNED`]); the span's
    /// id follows them (`names[len]`, `values[len]`) when `len < INSTALLED_SPAN_ARGS`.
    len: AtomicU32,
    /// Where its async begin goes if it crosses threads: its creation (time read unordered,
    /// [`crate::clock::ticks_unordered`], and thread), or, for a span created before the
    /// trace, its first entry in the trace (time 0 until then).
    origin: AtomicU64,
    origin_tid: AtomicU64,
    /// What the creating thread's event memo said at the creation ([`SpanMemo::to_words`]):
    /// the record's header, and the indices of the argument names when it had them.
    memo: [AtomicU64; 3],
    /// Each inline argument's name, a `&'static str` as its address and length.
    names: [[AtomicUsize; 2]; INSTALLED_SPAN_ARGS],
    /// Each inline argument's value ([`ScalarArg::to_words`]).
    values: [[AtomicU64; 2]; INSTALLED_SPAN_ARGS],
    /// The fields once [`OWNED`] (a text, or more than fit inline); `None` otherwise.
    owned: UnsafeCell<Option<Box<OwnedFields>>>,
}

// SAFETY: every field but `owned` is an atomic; `owned` is touched under the slot's lock
// only, or by the one thread that claimed the slot before publishing it (see the rules).
unsafe impl Sync for SpanState {}

/// A span's state as read at one moment (under its slot's lock, or optimistically).
#[derive(Debug, Clone, Copy)]
pub(super) struct SpanView {
    pub(super) generation: u32,
    pub(super) origin: u64,
    pub(super) origin_tid: u64,
    pub(super) memo: SpanMemo,
    flags: u32,
    /// The inline fields then the id, `args` of them (0: the fields are not inline scalars
    /// with room for the id, or some are missing: the record takes the general path).
    args: usize,
    /// Whether `names[..args]` were read (always under the lock; without it, only when the
    /// names' indices are not remembered: [`Self::remembered_indices`]).
    named: bool,
    names: [MaybeUninit<&'static str>; INSTALLED_SPAN_ARGS],
    values: [MaybeUninit<ScalarArg>; INSTALLED_SPAN_ARGS],
}

impl SpanView {
    #[inline(always)]
    pub(super) fn async_begun(&self) -> bool {
        self.flags & ASYNC_BEGUN != 0
    }

    #[inline(always)]
    pub(super) fn all_fields(&self) -> bool {
        self.flags & ALL_FIELDS != 0
    }

    /// Whether the fields are inline scalars with room for the id, none missing: a
    /// duration's arguments are [`Self::values`].
    #[inline(always)]
    pub(super) fn has_args(&self) -> bool {
        self.args != 0
    }

    /// The string indices of the arguments' names, packed, when the creation learned them
    /// on the calling thread from its memo (see [`ALL_FIELDS`]).
    #[inline(always)]
    pub(super) fn remembered_indices(&self) -> Option<u64> {
        remembered(self.flags, self.memo)
    }

    /// The fields' values then the id's (empty without [`Self::has_args`]).
    #[inline(always)]
    pub(super) fn values(&self) -> &[ScalarArg] {
        // SAFETY: `values[..args]` are initialised (`SpanState::read`); `MaybeUninit<T>`
        // has the layout of `T`.
        unsafe { std::slice::from_raw_parts(self.values.as_ptr().cast(), self.args) }
    }

    /// The names of [`Self::values`], if they were read.
    #[inline(always)]
    pub(super) fn names(&self) -> Option<&[&'static str]> {
        // SAFETY: `names[..args]` are initialised when `named` (`SpanState::name`);
        // `MaybeUninit<T>` has the layout of `T`.
        self.named
            .then(|| unsafe { std::slice::from_raw_parts(self.names.as_ptr().cast(), self.args) })
    }
}

/// [`SpanView::remembered_indices`] of a state's `flags` and `memo`.
#[inline(always)]
fn remembered(flags: u32, memo: SpanMemo) -> Option<u64> {
    if flags & ALL_FIELDS == 0 {
        return None;
    }
    match memo.arg_indices_here() {
        0 => None,
        indices => Some(indices),
    }
}

/// A span id as an argument value.
#[inline(always)]
fn id_arg(id: u64) -> ScalarArg {
    ScalarArg::new(ArgValue::U64(id)).unwrap_or(ScalarArg::NULL)
}

/// A `&'static str` as two words.
#[inline(always)]
fn str_words(s: &'static str) -> [usize; 2] {
    [s.as_ptr() as usize, s.len()]
}

impl SpanState {
    /// Its call site (the slot holds a span: see the rules).
    #[inline(always)]
    pub(super) fn metadata(&self) -> &'static Metadata<'static> {
        // ATOMICS: see `metadata`.
        let metadata = self.metadata.load(Ordering::Relaxed);
        // SAFETY: written from a `&'static Metadata` before the slot was published, and not
        // changed while it holds a span (the rules); callers read it only then.
        unsafe { &*metadata }
    }

    /// The span's id.
    #[inline(always)]
    pub(super) fn id(&self) -> u64 {
        // ATOMICS: see `metadata`.
        self.id.load(Ordering::Relaxed)
    }

    /// Start the state of a new span in this claimed, unpublished slot: made of `new`, no
    /// fields, span `id`.
    #[inline(always)]
    fn start(&self, new: &NewSpan, id: u64) {
        // ATOMICS: `Relaxed` throughout: the slot is published later with `Release`.
        self.metadata.store(
            new.metadata as *const Metadata<'static> as *mut Metadata<'static>,
            Ordering::Relaxed,
        );
        self.id.store(id, Ordering::Relaxed);
        self.generation.store(new.generation, Ordering::Relaxed);
        self.flags.store(new.missing.bits(), Ordering::Relaxed);
        self.len.store(0, Ordering::Relaxed);
        self.origin.store(new.origin, Ordering::Relaxed);
        self.origin_tid.store(new.origin_tid, Ordering::Relaxed);
        for (word, value) in self.memo.iter().zip(new.memo.to_words()) {
            word.store(value, Ordering::Relaxed);
        }
    }

    /// End the creation begun by [`Self::start`]: the id after the fields (written once, not
    /// moved at each field).
    #[inline(always)]
    fn finish(&self) {
        // ATOMICS: see `start`.
        let len = self.len.load(Ordering::Relaxed) as usize;
        if self.flags() & OWNED == 0 && len < INSTALLED_SPAN_ARGS {
            self.write_arg(len, SPAN_ID, id_arg(self.id()));
        }
    }

    /// Write inline argument `i`.
    #[inline(always)]
    fn write_arg(&self, i: usize, name: &'static str, value: ScalarArg) {
        // ATOMICS: `Relaxed`: under the lock, between `version`'s increments (or before the
        // slot is published).
        for (word, v) in self.names[i].iter().zip(str_words(name)) {
            word.store(v, Ordering::Relaxed);
        }
        for (word, v) in self.values[i].iter().zip(value.to_words()) {
            word.store(v, Ordering::Relaxed);
        }
    }

    #[inline(always)]
    fn flags(&self) -> u32 {
        // ATOMICS: see `version`.
        self.flags.load(Ordering::Relaxed)
    }

    #[inline(always)]
    fn set_flags(&self, flags: u32) {
        // ATOMICS: see `version`.
        self.flags.store(flags, Ordering::Relaxed);
    }

    /// The state as it is, read under the lock (or as a reader that validates it after),
    /// the names of the arguments (as words) only if `names` or they are needed: their
    /// indices are not remembered.
    #[inline(always)]
    fn read(&self, names: bool) -> (SpanView, [[usize; 2]; INSTALLED_SPAN_ARGS]) {
        // ATOMICS: see `version`.
        let flags = self.flags.load(Ordering::Relaxed);
        let len = self.len.load(Ordering::Relaxed) as usize;
        let memo = SpanMemo::from_words(self.memo.each_ref().map(|w| w.load(Ordering::Relaxed)));
        let mut view = SpanView {
            generation: self.generation.load(Ordering::Relaxed),
            origin: self.origin.load(Ordering::Relaxed),
            origin_tid: self.origin_tid.load(Ordering::Relaxed),
            memo,
            flags,
            args: 0,
            named: false,
            names: [MaybeUninit::uninit(); INSTALLED_SPAN_ARGS],
            values: [MaybeUninit::uninit(); INSTALLED_SPAN_ARGS],
        };
        let mut name_words = [[0; 2]; INSTALLED_SPAN_ARGS];
        if flags & (OWNED | MISSING_MASK) == 0 && len < INSTALLED_SPAN_ARGS {
            view.args = len + 1;
            let kept = self.values.iter().zip(&mut view.values);
            for (kept, value) in kept.take(view.args) {
                let words = kept.each_ref().map(|word| word.load(Ordering::Relaxed));
                value.write(ScalarArg::from_words(words));
            }
            view.named = names || remembered(flags, memo).is_none();
            if view.named {
                for (kept, words) in self.names.iter().zip(&mut name_words).take(view.args) {
                    *words = kept.each_ref().map(|word| word.load(Ordering::Relaxed));
                }
            }
        }
        (view, name_words)
    }

    /// Give `view` the names read with it (`names`, as [`Self::read`] gave them), once they
    /// are known to be one state's.
    ///
    /// # Safety
    /// `names[..view.args]` must be words of `&'static str`s ([`str_words`]) written
    /// together with the rest of what `view` holds (read under the lock, or validated) when
    /// `view.named`.
    #[inline(always)]
    unsafe fn name(view: &mut SpanView, names: &[[usize; 2]; INSTALLED_SPAN_ARGS]) {
        if view.named {
            for (name, &[ptr, len]) in view.names.iter_mut().zip(names).take(view.args) {
                // SAFETY: the words of a `&'static str` (the caller's promise).
                name.write(unsafe {
                    std::str::from_utf8_unchecked(std::slice::from_raw_parts(ptr as *const u8, len))
                });
            }
        }
    }

    /// `f` of the state as it is, read without the lock: `None` if a change overlapped the
    /// reads (then read it under the lock). (The view is lent, not returned: it stays where
    /// it was read.)
    #[inline(always)]
    pub(super) fn read_then<R>(&self, f: impl FnOnce(&SpanView) -> R) -> Option<R> {
        // ATOMICS: see `version`.
        let before = self.version.load(Ordering::Acquire);
        let (mut view, names) = self.read(false);
        fence(Ordering::Acquire);
        if before & 1 != 0 || self.version.load(Ordering::Relaxed) != before {
            return None;
        }
        // SAFETY: no change overlapped the reads: the names are those the state held.
        unsafe { Self::name(&mut view, &names) };
        Some(f(&view))
    }

    /// The trace of the span's async begin, if one was written (by its close, its last
    /// user).
    #[inline(always)]
    pub(super) fn async_begun_in(&self) -> Option<u32> {
        // ATOMICS: see `version`.
        (self.flags() & ASYNC_BEGUN != 0).then(|| self.generation.load(Ordering::Relaxed))
    }

    /// The number of fields (under the lock).
    pub(super) fn fields_len(&self) -> usize {
        match self.owned() {
            Some(owned) => owned.len(),
            // ATOMICS: see `version`.
            None => self.len.load(Ordering::Relaxed) as usize,
        }
    }

    /// The owned fields, if the fields are owned (under the lock).
    fn owned(&self) -> Option<&OwnedFields> {
        if self.flags() & OWNED == 0 {
            return None;
        }
        // SAFETY: under the lock (the caller's), so no other access to `owned`.
        unsafe { (*self.owned.get()).as_deref() }
    }

    /// Inline argument `i` (`i <= len`), under the lock.
    fn inline_arg(&self, i: usize) -> (&'static str, ScalarArg) {
        // ATOMICS: see `version`.
        let [ptr, len] = [
            self.names[i][0].load(Ordering::Relaxed),
            self.names[i][1].load(Ordering::Relaxed),
        ];
        // SAFETY: under the lock, argument `i <= len` holds the words of a `&'static str`
        // (`write_arg`).
        let name = unsafe {
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(ptr as *const u8, len))
        };
        let value = ScalarArg::from_words([
            self.values[i][0].load(Ordering::Relaxed),
            self.values[i][1].load(Ordering::Relaxed),
        ]);
        (name, value)
    }

    /// Field `i` (`i < fields_len()`) as an argument value, under the lock.
    pub(super) fn field(&self, i: usize) -> (&'static str, ArgValue<'_>) {
        match self.owned() {
            Some(owned) => {
                let (name, value) = &owned[i];
                let value = match value {
                    Owned::Scalar(v) => *v,
                    Owned::Text(t) => text_value(t),
                };
                (*name, value)
            }
            None => {
                let (name, value) = self.inline_arg(i);
                (name, value.value())
            }
        }
    }

    /// Add field `name`, one the span does not have yet: at its creation (before the slot
    /// is published; [`SlotRef::fill`] then writes the id after the fields).
    #[inline(always)]
    pub(super) fn push_scalar(&self, name: &'static str, value: ArgValue<'static>) {
        // ATOMICS: see `start`.
        let len = self.len.load(Ordering::Relaxed) as usize;
        match ScalarArg::new(value) {
            Some(scalar) if self.flags() & OWNED == 0 && len < INSTALLED_SPAN_ARGS => {
                self.write_arg(len, name, scalar);
                self.len.store(len as u32 + 1, Ordering::Relaxed);
            }
            _ => self.set(name, Owned::Scalar(value)),
        }
    }

    /// Count `len` inline fields, the id after them if there is room.
    #[inline(always)]
    fn grew(&self, len: usize) {
        if len < INSTALLED_SPAN_ARGS {
            self.write_arg(len, SPAN_ID, id_arg(self.id()));
        }
        // ATOMICS: see `version`.
        self.len.store(len as u32, Ordering::Relaxed);
    }

    /// Set field `name` (replacing an earlier value of the same name): at the creation, or
    /// under the lock within [`SlotGuard::change`].
    pub(super) fn set(&self, name: &'static str, value: Owned) {
        if self.flags() & OWNED == 0 {
            // ATOMICS: see `version`.
            let len = self.len.load(Ordering::Relaxed) as usize;
            let at = (0..len).find(|&i| self.inline_arg(i).0 == name);
            let scalar = match &value {
                Owned::Scalar(v) => ScalarArg::new(*v),
                Owned::Text(_) => None,
            };
            match (at, scalar) {
                (Some(at), Some(scalar)) => return self.write_arg(at, name, scalar),
                (None, Some(scalar)) if len < INSTALLED_SPAN_ARGS => {
                    self.write_arg(len, name, scalar);
                    return self.grew(len + 1);
                }
                _ => self.own_fields(len),
            }
        }
        // SAFETY: under the lock, or before the slot is published (the caller's): no other
        // access to `owned`.
        let owned = unsafe { &mut *self.owned.get() }.get_or_insert_with(Box::default);
        match owned.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => owned.push((name, value)),
        }
    }

    /// Move the `len` inline fields to `owned`.
    #[cold]
    fn own_fields(&self, len: usize) {
        let fields = (0..len)
            .map(|i| {
                let (name, value) = self.inline_arg(i);
                (name, Owned::Scalar(value.value()))
            })
            .collect();
        // SAFETY: as in `set`.
        unsafe { *self.owned.get() = Some(Box::new(fields)) };
        self.set_flags((self.flags() | OWNED) & !ALL_FIELDS);
        // ATOMICS: see `version`.
        self.len.store(0, Ordering::Relaxed);
    }

    /// Say whether the fields are all the call site's (see [`ALL_FIELDS`]).
    #[inline(always)]
    pub(super) fn set_all_fields(&self, all: bool) {
        let flags = self.flags() & !ALL_FIELDS;
        self.set_flags(if all { flags | ALL_FIELDS } else { flags });
    }

    /// The number of fields while they are inline scalars.
    #[inline(always)]
    pub(super) fn inline_len(&self) -> Option<usize> {
        // ATOMICS: see `version`.
        (self.flags() & OWNED == 0).then(|| self.len.load(Ordering::Relaxed) as usize)
    }

    /// The async begin is written (under the lock, within [`SlotGuard::change`]).
    pub(super) fn set_async_begun(&self) {
        self.set_flags(self.flags() | ASYNC_BEGUN);
    }

    /// Take the span into trace `generation`, its origin (for an async begin) `origin` on
    /// thread `tid`, no async begin written there, nothing learned from a memo (under the
    /// lock, within [`SlotGuard::change`]).
    pub(super) fn retake(&self, generation: u32, origin: u64, tid: u64) {
        // ATOMICS: see `version`.
        self.generation.store(generation, Ordering::Relaxed);
        self.origin.store(origin, Ordering::Relaxed);
        self.origin_tid.store(tid, Ordering::Relaxed);
        for (word, value) in self.memo.iter().zip(SpanMemo::NONE.to_words()) {
            word.store(value, Ordering::Relaxed);
        }
        self.set_flags(self.flags() & !ASYNC_BEGUN);
    }

    /// Why some fields are not kept.
    #[inline(always)]
    pub(super) fn missing(&self) -> Missing {
        Missing::from_bits(self.flags())
    }

    /// The state as it is, read under the lock (or by the span's close, its last user).
    pub(super) fn view(&self) -> SpanView {
        let (mut view, names) = self.read(true);
        // SAFETY: under the lock, or by the last user: no change overlaps the reads.
        unsafe { Self::name(&mut view, &names) };
        view
    }

    /// Free the owned fields (the slot is being freed).
    #[inline(always)]
    fn clear(&self) {
        // SAFETY: the slot's last user frees it: no other access.
        drop(unsafe { (*self.owned.get()).take() });
    }
}

/// The key of a span call site's argument names in the thread's event memo
/// ([`crate::engine::record::remember_arg_indices`]): its metadata's address.
pub(super) fn args_key(metadata: &'static Metadata<'static>) -> usize {
    metadata as *const Metadata<'static> as usize
}

// === locks ===

/// A lock held for a few hundred instructions at most (a record written, fields copied)
/// whose word is its holder's [`thread_key`] (never reused by another thread), 0 when free.
#[derive(Debug)]
struct OwnerLock {
    /// ATOMICS: `Acquire` on taking, `Release` on giving back: what is written under the
    /// lock is seen by the next holder.
    holder: AtomicU64,
}

impl OwnerLock {
    const fn new() -> OwnerLock {
        OwnerLock {
            holder: AtomicU64::new(0),
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
fn lock_contended(holder: &AtomicU64, me: u64) -> bool {
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
    holder: &'l AtomicU64,
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
    /// The span's state (see its rules; [`Level::ids`] for who may touch it when).
    state: SpanState,
}

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

    /// The array; `None` when the allocation fails (the table is then full: the spans it
    /// cannot keep are counted, never a reason to abort the program).
    ///
    /// # Safety
    /// The all-zero bit pattern must be a valid `T`, and `T` must need no drop.
    unsafe fn new(len: usize) -> Option<Zeroed<T>> {
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size (every level has slots, every `T` here is
        // non-zero-sized).
        let ptr = unsafe { alloc::alloc_zeroed(layout) }.cast::<T>();
        Some(Zeroed {
            ptr: NonNull::new(ptr)?,
            len,
            _owns: PhantomData,
        })
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
    /// store of 0, so the claimer's writes follow the last occupant's drop, and its read of
    /// the slot's lives the free's); the free stores 0 with `Release`; [`SlotRef::holds`]
    /// loads it `Acquire` between two loads of the layer word.
    ids: Zeroed<[AtomicU64; BUCKET_SLOTS]>,
    /// Per bucket, each slot's [`LayerWord`]: its span's layer number plus 1 (0 while free
    /// or being filled), and above it the count of the slot's lives, raised by each publish,
    /// so that a word read twice tells whether the slot changed hands in between
    /// ([`SlotRef::holds`]).
    /// ATOMICS: `Release` store when published (after the state is written), `Acquire`
    /// loads by finders; its layer cleared `Relaxed` by the free before its `Release` of
    /// the id.
    layers: Zeroed<[AtomicU64; BUCKET_SLOTS]>,
    /// Per bucket: a key whose home it is went to a later bucket or level (set, never
    /// cleared: a stale mark only costs a lookup the buckets beyond).
    /// ATOMICS: `Relaxed`: stored before the claim beyond the home, so before the `Release`
    /// that publishes the key's slot there ([`Self::layers`]). A lookup ordered after that
    /// publish sees the mark: one after the span's creation (the handle that names the span
    /// got to the looking thread through some synchronisation), or one made under
    /// [`TAKING_IN`]'s lock after the take-in that kept it. A lookup not so ordered (a user
    /// on another thread racing a take-in) may miss the mark, as it may miss the slot
    /// itself: it finds the span not kept, as it would have a moment earlier; a take-in
    /// looks again under the lock.
    overflowed: Zeroed<AtomicBool>,
    slots: Zeroed<[Slot; BUCKET_SLOTS]>,
    /// log2 of the bucket count.
    bits: u32,
}

impl Level {
    /// A level of 2^`bits` buckets; `None` when its memory cannot be allocated.
    fn new(bits: u32) -> Option<Level> {
        let buckets = 1usize << bits;
        // SAFETY: zero is a valid `AtomicU64`, `AtomicU32` (0), `AtomicBool` (false), and
        // `Slot` (unlocked; its state's words atomics, its metadata a null `AtomicPtr`, its
        // owned fields `None`: a null `Option<Box<_>>`); none needs a drop (a slot's owned
        // fields are dropped when it is freed, and a level is dropped only unused).
        unsafe {
            Some(Level {
                ids: Zeroed::new(buckets)?,
                layers: Zeroed::new(buckets)?,
                overflowed: Zeroed::new(buckets)?,
                slots: Zeroed::new(buckets)?,
                bits,
            })
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
        for (i, id) in self.ids[bucket].iter().enumerate() {
            // ATOMICS: see `ids` (a first sieve: `holds` checks the slot whole).
            if id.load(Ordering::Relaxed) == key.span {
                let slot = self.slot(bucket, i);
                if slot.holds(key) {
                    return Some(slot);
                }
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

    /// Slot `i` of `bucket` (`bucket` a bucket of this level: [`Self::home`],
    /// [`Self::bucket_after`]; `i < BUCKET_SLOTS`).
    #[inline(always)]
    fn slot(&self, bucket: usize, i: usize) -> SlotRef<'_> {
        debug_assert!(bucket < 1 << self.bits && i < BUCKET_SLOTS);
        // SAFETY: each array has a bucket per bucket of the level (`Level::new`); `bucket` is
        // one (the caller's promise: `home` and `bucket_after` keep `bits` bits).
        unsafe {
            SlotRef {
                slot: self.slots.get_unchecked(bucket).get_unchecked(i),
                id: self.ids.get_unchecked(bucket).get_unchecked(i),
                layer: self.layers.get_unchecked(bucket).get_unchecked(i),
            }
        }
    }
}

/// A slot: claimed by this thread, or holding a live span this thread is a user of (or was:
/// see [`SlotRef::holds`]).
#[derive(Clone, Copy)]
pub(super) struct SlotRef<'l> {
    slot: &'l Slot,
    id: &'l AtomicU64,
    layer: &'l AtomicU64,
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
    ///
    /// The layer word is read before and after the id: the same word twice means one life
    /// of the slot (each publish raises its count of lives), so the id read is that life's.
    /// (Two words read once each could be of two lives: the id of a span of another layer,
    /// freed in between, then the layer of a span of this layer with another id.)
    #[inline(always)]
    pub(super) fn holds(self, key: Key) -> bool {
        // ATOMICS: see `Level::ids` and `Level::layers`. The first load of the layer word
        // acquires its publish, so the id load sees that life's claim or later; a free after
        // it clears the layer before its `Release` of the id, so if the id load saw the free
        // (or a later claim), the second layer load, after the `Acquire` id load, sees the
        // cleared word or a later one, never the first again.
        self.holds_with(key, |_| {})
    }

    /// [`Self::holds`], calling `after(n)` after its load `n` (0, 1): a test changes the
    /// slot's hands there.
    #[inline(always)]
    fn holds_with(self, key: Key, mut after: impl FnMut(usize)) -> bool {
        // ATOMICS: see `holds`.
        let word = self.layer.load(Ordering::Acquire);
        after(0);
        if LayerWord(word).layer() != key.layer_word() {
            return false;
        }
        let id = self.id.load(Ordering::Acquire);
        after(1);
        id == key.span && self.layer.load(Ordering::Relaxed) == word
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
    fn fill(self, key: Key, new: NewSpan, fill: impl FnOnce(&SpanState)) {
        let state = &self.slot.state;
        // The slot is claimed by this thread and unpublished (its layer word is 0): no other
        // thread reads or writes the state.
        state.start(&new, key.span);
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
        state.finish();
        // ATOMICS: see `Level::layers`; the slot is this thread's: its word read `Relaxed`.
        let lives = LayerWord(self.layer.load(Ordering::Relaxed));
        self.layer
            .store(lives.published(key.layer_word()).0, Ordering::Release);
    }

    /// The span's state, for its last user (its close) or a reader that validates what it
    /// reads ([`SpanState::read_then`]).
    #[inline(always)]
    pub(super) fn state(self) -> &'l SpanState {
        &self.slot.state
    }

    /// Free the slot, dropping its owned fields: by the span's close (no user is left), by
    /// the thread that claimed it, or once no copy of its layer is left.
    fn free(self) {
        self.slot.state.clear();
        // ATOMICS: see `Level::ids` and `Level::layers`; the slot is this thread's (its last
        // user, or its claimer): its word read `Relaxed`.
        let word = LayerWord(self.layer.load(Ordering::Relaxed));
        self.layer.store(word.freed().0, Ordering::Relaxed);
        self.id.store(0, Ordering::Release);
    }
}

/// A locked slot holding a live span.
pub(super) struct SlotGuard<'l> {
    slot: &'l Slot,
    _guard: OwnerGuard<'l>,
}

impl SlotGuard<'_> {
    /// Change the state (`f` calls its setters), between two increments of its version, so
    /// that optimistic readers see the change whole or read again.
    pub(super) fn change(&self, f: impl FnOnce(&SpanState)) {
        let state = &self.slot.state;
        // ATOMICS: see `SpanState::version`.
        let version = state.version.load(Ordering::Relaxed);
        state
            .version
            .store(version.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        f(state);
        state
            .version
            .store(version.wrapping_add(2), Ordering::Release);
    }
}

impl Deref for SlotGuard<'_> {
    type Target = SpanState;

    fn deref(&self) -> &SpanState {
        &self.slot.state
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

/// Level `n`, installed now if it was not (no lock: two threads may allocate it, one
/// installs its own); `None` when its memory cannot be allocated (the table is full).
#[cold]
fn level_or_new(n: usize) -> Option<&'static Level> {
    if let Some(level) = level(n) {
        return Some(level);
    }
    let bits = FIRST_LEVEL_BUCKETS.trailing_zeros() + n as u32;
    let new = Box::into_raw(Box::new(Level::new(bits)?));
    // ATOMICS: see `LEVELS_IN_USE`.
    match LEVELS_IN_USE[n].compare_exchange(
        ptr::null_mut(),
        new,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: `new` is a leaked box, installed for good.
        Ok(_) => Some(unsafe { &*new }),
        Err(installed) => {
            // SAFETY: `new` was never shared (another thread installed its level first).
            drop(unsafe { Box::from_raw(new) });
            // SAFETY: as in `level`.
            Some(unsafe { &*installed })
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
    fill: impl FnOnce(&SpanState),
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
    fill: impl FnOnce(&SpanState),
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
    for n in 0..allowed {
        // A level that cannot be allocated ends the search: lookups stop at the first
        // missing level.
        if let Some(slot) = level_or_new(n)?.claim(key) {
            return Some(slot);
        }
    }
    None
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
    f(slot.state());
    slot.free();
}

/// Stop keeping every span of `layer` (no copy of the layer is left: none of its spans has a
/// user left through it, and none will be closed through it), `end` of each span's state
/// first (its async end, which its close would have written).
fn remove_layer(layer: u32, end: impl Fn(&SpanState)) {
    let word = Key { layer, span: 0 }.layer_word();
    for level in (0..LEVELS).filter_map(level) {
        for (bucket, layers) in level.layers.iter().enumerate() {
            for (i, slot_layer) in layers.iter().enumerate() {
                // ATOMICS: see `Level::layers`.
                if LayerWord(slot_layer.load(Ordering::Acquire)).layer() == word {
                    let slot = level.slot(bucket, i);
                    end(slot.state());
                    slot.free();
                }
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A new span of a test call site, in trace `generation` (also the layer's tests').
    pub(in crate::tracing_layer) fn span(generation: u32) -> NewSpan {
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
        find(key).map(|s| s.lock().expect("not held").view().generation)
    }

    fn remove(key: Key) -> Option<u32> {
        let mut removed = None;
        close(find(key)?, |s| removed = Some(s.view().generation));
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
        remove_layer(u32::MAX - 2, |_| {});
        assert!(find(b).is_none());
    }

    #[test]
    fn a_level_whose_memory_cannot_be_allocated_is_none_not_an_abort() {
        // 2⁶¹ bytes: a valid layout, more than any address space.
        // SAFETY: zero is a valid `AtomicU64`, which needs no drop.
        let huge = unsafe { Zeroed::<AtomicU64>::new(1 << 58) };
        assert!(huge.is_none());
        // SAFETY: as above.
        let small = unsafe { Zeroed::<AtomicU64>::new(8) }.expect("8 words");
        assert!(small.iter().all(|w| w.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_slots_layer_word_counts_its_lives() {
        let free = LayerWord(0);
        let first = free.published(5);
        assert_eq!(first.layer(), 5);
        assert_eq!(first.freed().layer(), 0);
        let second = first.freed().published(5);
        assert_eq!(second.layer(), 5);
        assert_ne!(first, second, "a slot's next life has another word");
        let wrapped = LayerWord(u64::MAX).published(7);
        assert_eq!((wrapped.layer(), wrapped.0 >> 32), (7, 0));
        // A slot freed and claimed again by a span of the same key: the reference kept from
        // the first life holds the span again (one live span has the key), with a new word.
        let key = Key {
            layer: u32::MAX - 9,
            span: 0x5eed_0000_000e,
        };
        let slot = insert(key, span(8), |_| {}).expect("room");
        // ATOMICS: a test's read of the word.
        let before = slot.layer.load(Ordering::Relaxed);
        close(slot, |_| {});
        assert!(!slot.holds(key));
        let again = insert(key, span(9), |_| {}).expect("room");
        // (Its home slot, unless another test's span took it meanwhile.)
        if std::ptr::eq(slot.slot, again.slot) {
            assert!(slot.holds(key));
            assert_ne!(slot.layer.load(Ordering::Relaxed), before);
        } else {
            assert!(!slot.holds(key));
        }
        assert_eq!(remove(key), Some(9));
    }

    #[test]
    fn a_slot_that_changes_hands_amid_the_checks_loads_never_holds_another_key() {
        // Key `mine` is never in the slot, which goes from a span of layer `b` with id `id`
        // to one of layer `a` with another id, or back, after any load of the check.
        let (a, b, id) = (u32::MAX - 11, u32::MAX - 12, 0x5eed_0000_000f);
        let mine = Key { layer: a, span: id };
        let others = [
            Key { layer: b, span: id },
            Key {
                layer: a,
                span: id + 1,
            },
        ];
        let slot = insert(others[0], span(1), |_| {}).expect("room");
        // Freed and claimed again (its id never 0 meanwhile: no other test's claim takes it).
        let retake = |key: Key| {
            // ATOMICS: as `SlotRef::free` and `Level::claim_in`.
            let word = LayerWord(slot.layer.load(Ordering::Relaxed));
            slot.layer.store(word.freed().0, Ordering::Relaxed);
            slot.id.store(key.span, Ordering::Release);
            slot.fill(key, span(2), |_| {});
        };
        for first in 0..2 {
            for at in 0..2 {
                retake(others[first]);
                let held = slot.holds_with(mine, |n| {
                    if n == at {
                        retake(others[1 - first]);
                    }
                });
                assert!(!held, "from {:?}, changed after load {at}", others[first]);
            }
        }
        slot.free();
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
        let waiter = std::thread::spawn(move || slot.lock().map(|state| state.view().generation));
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
        let key = Key {
            layer: u32::MAX - 7,
            span: 0x5eed_0000_000c,
        };
        let slot = insert(key, span(5), |_| {}).expect("room");
        let args = |slot: SlotRef<'_>| {
            let view = slot.lock().expect("free").view();
            view.has_args().then(|| {
                let names = view.names().expect("read under the lock");
                (names.to_vec(), view.values().to_vec())
            })
        };
        let id = id_arg(key.span);
        assert_eq!(args(slot), Some((vec![SPAN_ID], vec![id])));
        let guard = slot.lock().expect("free");
        guard.change(|state| {
            state.set("a", Owned::Scalar(ArgValue::U64(1)));
            state.set("b", Owned::Scalar(ArgValue::I64(-2)));
        });
        drop(guard);
        let (names, values) = args(slot).expect("room");
        assert_eq!(names, ["a", "b", SPAN_ID]);
        assert_eq!(values[2], id);
        let guard = slot.lock().expect("free");
        guard.change(|state| {
            state.set("a", Owned::Scalar(ArgValue::U64(3)));
            state.set("c", Owned::Scalar(ArgValue::Bool(true)));
            state.set("d", Owned::Scalar(ArgValue::Bool(false)));
        });
        assert_eq!(guard.fields_len(), INSTALLED_SPAN_ARGS);
        assert_eq!(guard.field(0), ("a", ArgValue::U64(3)));
        drop(guard);
        assert!(args(slot).is_none(), "no room for the id");
        let guard = slot.lock().expect("free");
        guard.change(|state| state.set("e", Owned::Text("text".into())));
        assert!(!guard.view().has_args());
        assert_eq!(
            guard.field(4),
            ("e", ArgValue::Str(StringRef::Inline("text")))
        );
        assert_eq!(guard.id(), key.span);
        drop(guard);
        assert_eq!(remove(key), Some(5));
    }

    #[test]
    fn a_read_without_the_lock_sees_a_change_whole_or_not_at_all() {
        let key = Key {
            layer: u32::MAX - 8,
            span: 0x5eed_0000_000d,
        };
        let slot = insert(key, span(6), |state| {
            state.push_scalar("n", ArgValue::U64(1))
        })
        .expect("room");
        let read = || {
            slot.state()
                .read_then(|view| (view.generation, view.values().first().map(|v| v.value())))
        };
        assert_eq!(read(), Some((6, Some(ArgValue::U64(1)))));
        let guard = slot.lock().expect("free");
        guard.change(|state| {
            state.retake(7, 1, 2);
            // A reader during the change reads again under the lock.
            assert_eq!(read(), None);
            state.set("n", Owned::Scalar(ArgValue::U64(2)));
        });
        drop(guard);
        assert_eq!(read(), Some((7, Some(ArgValue::U64(2)))));
        // A writer on another thread, readers here: each read is one state or none (every
        // state written from now on has origin = generation + 1, tid = generation = n).
        let guard = slot.lock().expect("free");
        guard.change(|state| {
            state.retake(0, 1, 0);
            state.set("n", Owned::Scalar(ArgValue::U64(0)));
        });
        drop(guard);
        let writer = std::thread::spawn(move || {
            for n in 0..20_000u64 {
                let guard = slot.lock().expect("free");
                guard.change(|state| {
                    state.retake(n as u32, n + 1, n);
                    state.set("n", Owned::Scalar(ArgValue::U64(n)));
                });
            }
        });
        let check = || {
            slot.state().read_then(|view| {
                let n = u64::from(view.generation);
                assert_eq!((view.origin, view.origin_tid), (n + 1, n), "{view:?}");
                assert_eq!(view.values()[0].value(), ArgValue::U64(n));
                n
            })
        };
        while !writer.is_finished() {
            check();
        }
        writer.join().unwrap();
        assert_eq!(check(), Some(19_999), "no writer left: the read succeeds");
        assert!(remove(key).is_some());
    }
}

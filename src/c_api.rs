//! The C API (`include/fxtrace.h`): trace events from C, C++ or any language with a C FFI.
//!
//! Exported (`#[no_mangle] extern "C"`) by every build that links this library: the
//! `LD_PRELOAD` object `libfxtrace_preload.so`, and any Rust program or library using fxtrace.
//! Events go to the process's current context ([`crate::engine::global`]): the one the
//! preload object installs when a trace manager is listening, or a
//! [`crate::standalone`] session. With none, every call is a no-op.
//!
//! # Cost
//!
//! With no trace started in the process, each function is one relaxed load and a branch: the
//! strings are not even read. With a trace running, a call looks the strings up (`strlen`,
//! UTF-8 check) and writes one record.
//!
//! # Strings
//!
//! - `NULL` is the empty string.
//! - Text is UTF-8. A string with an invalid sequence is cut before it (the valid prefix is
//!   written, never a replacement: that would need an allocation), and a string longer than
//!   the format's 32000 bytes is cut to 32000 bytes at a character boundary.
//! - The plain functions (`fxtrace_instant`, …) accept *any* C string, including stack
//!   buffers freed right after the call: the bytes are copied inline into the record. The
//!   category's enabled answer is cached per thread by the category's *content* (up to
//!   [`CATEGORY_CACHE_ENTRIES`] categories of at most [`CATEGORY_CACHE_MAX_LEN`] bytes per
//!   thread), never by its address.
//! - The `_static` variants take the caller's promise that both strings live, unchanged, at
//!   the same address until the process exits (string literals of the program or of a
//!   library never unloaded). They are then registered once per thread per trace and written
//!   as 2-byte indices, keyed by address like the Rust API's `&'static str`. The header's
//!   `FXTRACE_*` macros call them with literals only (`"" category` fails to compile
//!   otherwise).
//!
//! # Safety against the caller
//!
//! No function unwinds into C: the engine returns errors rather than panicking; the `_static`
//! functions' fast path calls nothing, and every other part of the enabled path runs inside
//! [`catch_panic`] (a panic, say in a buffer handler the program installed, is swallowed and
//! the event dropped). The functions are `extern "C"`, so a panic that escaped anyway would
//! abort the process (Rust 1.81 and later), never unwind into C. Records that cannot be
//! written (full buffer, re-entrant call from a signal handler on a thread already writing)
//! are counted as dropped by the engine.

use std::cell::Cell;
use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::clock;
use crate::engine::category::tracing_maybe_on;
use crate::engine::global::with_current;
use crate::engine::record::{self, TraceStr, TraceWriter};
use crate::engine::writer::{self, Attempt, SlowRecord};
use crate::engine::Context;
use crate::format::{Arg, ArgValue, EventKind, EventType, StringRef, MAX_STRING_LEN};

/// Categories whose enabled answer one thread caches (by content) per trace.
pub const CATEGORY_CACHE_ENTRIES: usize = 8;
/// Longest category (bytes) whose answer is cached; longer ones are checked on every call.
pub const CATEGORY_CACHE_MAX_LEN: usize = 32;

/// Name of the counter event's argument that carries the value.
pub const COUNTER_VALUE_ARG: &str = "value";

/// Run `f`, catching a panic: its value, or `None` after a panic, which is swallowed. The
/// panic's payload is dropped inside `catch_unwind` too (a payload whose destructor panics
/// would otherwise unwind into C, which aborts the process), and leaked if that panics again.
/// What every C entry point runs the program's code (a buffer handler) in.
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => Some(value),
        Err(payload) => {
            if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
                std::mem::forget(again);
            }
            None
        }
    }
}

// === strings ===

/// The text of C string `p`: `""` for `NULL`, else its bytes up to the first invalid UTF-8
/// sequence and at most [`MAX_STRING_LEN`] bytes.
///
/// # Safety
///
/// `p` is `NULL` or points to a NUL-terminated string that stays valid and unchanged for
/// `'a`.
unsafe fn c_text<'a>(p: *const c_char) -> &'a str {
    if p.is_null() {
        return "";
    }
    // SAFETY: the caller's promise: a valid NUL-terminated string living for `'a`.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    utf8_prefix(&bytes[..bytes.len().min(MAX_STRING_LEN)])
}

/// The longest valid UTF-8 prefix of `bytes`.
fn utf8_prefix(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            let (valid, _) = bytes.split_at(e.valid_up_to());
            // `valid_up_to` is the end of the longest valid prefix: this cannot fail.
            std::str::from_utf8(valid).unwrap_or_default()
        }
    }
}

/// `""` is the empty ref; anything else inline.
fn inline_ref(s: &str) -> StringRef<'_> {
    if s.is_empty() {
        StringRef::Empty
    } else {
        StringRef::Inline(s)
    }
}

// === the per-thread category cache (by content) ===

/// One cached category answer.
#[derive(Clone, Copy)]
struct CategoryEntry {
    /// Trace generation of the answer (0 = empty slot; generations are never 0).
    generation: u32,
    len: u8,
    enabled: bool,
    bytes: [u8; CATEGORY_CACHE_MAX_LEN],
}

const EMPTY_CATEGORY: CategoryEntry = CategoryEntry {
    generation: 0,
    len: 0,
    enabled: false,
    bytes: [0; CATEGORY_CACHE_MAX_LEN],
};

/// Plain data, `const`-initialised, no destructor: no allocation and no destructor
/// registration on any thread (safe in threads the preload object never saw start).
struct CategoryCache {
    entries: [Cell<CategoryEntry>; CATEGORY_CACHE_ENTRIES],
    /// Next slot to overwrite when all are taken (round robin).
    next: Cell<u8>,
}

#[allow(clippy::declare_interior_mutable_const)] // array-repeat initialiser only
const EMPTY_CATEGORY_CELL: Cell<CategoryEntry> = Cell::new(EMPTY_CATEGORY);

thread_local! {
    static CATEGORIES: CategoryCache = const {
        CategoryCache {
            entries: [EMPTY_CATEGORY_CELL; CATEGORY_CACHE_ENTRIES],
            next: Cell::new(0),
        }
    };
}

/// Entries of the per-thread cache of `_static` string pairs, by their two addresses.
const STATIC_TEXT_ENTRIES: usize = 32;

/// A `_static` call's two strings, keyed by their addresses (0, 0: empty).
type StaticPair = (usize, usize, &'static str, &'static str);

#[allow(clippy::declare_interior_mutable_const)] // array-repeat initialiser only
const EMPTY_STATIC_PAIR: Cell<StaticPair> = Cell::new((0, 0, "", ""));

/// A thread's cache of `_static` string pairs.
struct StaticTexts {
    /// Set while the thread reads or writes `entries`: a call from a signal handler that
    /// interrupted it finds the flag set and neither reads nor writes the cache (an entry
    /// is several words: read or written half, a text's pointer could go with another's
    /// length). It reads its two strings itself.
    busy: Cell<bool>,
    entries: [Cell<StaticPair>; STATIC_TEXT_ENTRIES],
}

thread_local! {
    /// `_static` string pairs already read, by their addresses (two-way set associative):
    /// their promise (unchanged at the same address until the process exits) makes the
    /// addresses the key; one comparison of both finds a call site's pair. Plain data,
    /// `const`-initialised, no destructor, like [`CATEGORIES`].
    static STATIC_TEXT: StaticTexts = const {
        StaticTexts {
            busy: Cell::new(false),
            entries: [EMPTY_STATIC_PAIR; STATIC_TEXT_ENTRIES],
        }
    };
}

/// `f` of the thread's `_static` cache entries, marked busy meanwhile; `None` while the
/// thread is torn down, or inside a signal handler that interrupted its own use of them.
#[inline(always)]
fn with_static_entries<R>(f: impl FnOnce(&[Cell<StaticPair>]) -> R) -> Option<R> {
    STATIC_TEXT
        .try_with(|cache| {
            if cache.busy.get() {
                return None;
            }
            cache.busy.set(true);
            // Keeps the entries' accesses between the two flag stores (a signal handler is
            // the only other code that can run on this thread meanwhile).
            std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
            let answer = f(&cache.entries);
            std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
            cache.busy.set(false);
            Some(answer)
        })
        .ok()
        .flatten()
}

/// The first of the two cache entries the pair (`a`, `b`) may occupy (Fibonacci hashing of
/// the addresses).
fn static_text_set(a: usize, b: usize) -> usize {
    const BITS: u32 = STATIC_TEXT_ENTRIES.trailing_zeros();
    let key = (a as u64) ^ (b as u64).rotate_left(29);
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - BITS)) as usize & !1
}

/// The texts of a `_static` call's two C strings, each pair read (`strlen`, UTF-8 check) once
/// per thread and pair of addresses; one thread-local access and one comparison of both
/// addresses when cached.
///
/// # Safety
///
/// Each pointer is `NULL` or a valid NUL-terminated string that lives, unchanged, at its
/// address until the process exits.
#[inline(always)]
unsafe fn static_texts(a: *const c_char, b: *const c_char) -> (&'static str, &'static str) {
    let (ka, kb) = (a as usize, b as usize);
    let set = static_text_set(ka, kb);
    let hit = with_static_entries(|cache| {
        let first = cache[set].get();
        if (first.0, first.1) == (ka, kb) {
            return Some((first.2, first.3));
        }
        let second = cache[set + 1].get();
        ((second.0, second.1) == (ka, kb)).then_some((second.2, second.3))
    })
    .flatten();
    match hit {
        Some(texts) => texts,
        // SAFETY: forwarded caller's promise.
        None => unsafe { static_texts_slow(a, b, set) },
    }
}

/// [`static_texts`]'s miss: read both strings and cache the pair.
///
/// # Safety
///
/// As [`static_texts`].
#[cold]
#[inline(never)]
unsafe fn static_texts_slow(
    a: *const c_char,
    b: *const c_char,
    set: usize,
) -> (&'static str, &'static str) {
    let read = |p: *const c_char| -> &'static str {
        if p.is_null() {
            return "";
        }
        // SAFETY: the caller's promise: the string lives, unchanged, for the rest of the
        // process.
        unsafe { c_text(p) }
    };
    let (ta, tb) = (read(a), read(b));
    // An empty way first, else the first way (a third pair in the set evicts it). While the
    // thread is being torn down, or in a signal handler that interrupted the thread's own use
    // of the cache, the texts are simply returned.
    let _ = with_static_entries(|cache| {
        let empty = |i: usize| {
            let e = cache[i].get();
            (e.0, e.1) == (0, 0)
        };
        let way = if empty(set) {
            set
        } else if empty(set + 1) {
            set + 1
        } else {
            set
        };
        cache[way].set((a as usize, b as usize, ta, tb));
    });
    (ta, tb)
}

/// Whether `category` (any text) is enabled in trace `generation` of `context`, through the
/// thread's content-keyed cache.
fn category_enabled_by_content(context: &Context, generation: u32, category: &str) -> bool {
    let bytes = category.as_bytes();
    if bytes.len() > CATEGORY_CACHE_MAX_LEN {
        return context.is_category_enabled(category);
    }
    let cached = CATEGORIES.try_with(|cache| {
        for cell in &cache.entries {
            let entry = cell.get();
            if entry.generation == generation
                && usize::from(entry.len) == bytes.len()
                && &entry.bytes[..bytes.len()] == bytes
            {
                return Some(entry.enabled);
            }
        }
        None
    });
    match cached {
        Ok(Some(enabled)) => enabled,
        Ok(None) => {
            let enabled = context.is_category_enabled(category);
            let _ = CATEGORIES.try_with(|cache| {
                let mut entry = EMPTY_CATEGORY;
                entry.generation = generation;
                entry.len = bytes.len() as u8;
                entry.enabled = enabled;
                entry.bytes[..bytes.len()].copy_from_slice(bytes);
                // Prefer a slot of an older generation, else round robin.
                let slot = cache
                    .entries
                    .iter()
                    .position(|c| c.get().generation != generation)
                    .unwrap_or_else(|| {
                        let next = cache.next.get();
                        cache.next.set((next + 1) % CATEGORY_CACHE_ENTRIES as u8);
                        usize::from(next)
                    });
                cache.entries[slot].set(entry);
            });
            enabled
        }
        // The thread is being torn down: answer without the cache.
        Err(_) => context.is_category_enabled(category),
    }
}

// === the enabled path ===

/// The category's ref if it is enabled: a static category through the engine's per-thread
/// cache (registered, indexed); any other through the content-keyed answer cache, inline.
fn category_ref<'s>(writer: &mut TraceWriter<'_>, category: TraceStr<'s>) -> Option<StringRef<'s>> {
    match category {
        TraceStr::Static(category) => writer.category_ref(category),
        TraceStr::Inline(category) => {
            category_enabled_by_content(writer.context(), writer.generation(), category)
                .then(|| inline_ref(category))
        }
    }
}

/// Write one event of `kind` if its category is enabled; a counter's `value` goes in its
/// `"value"` argument.
fn write_event(category: TraceStr<'_>, name: TraceStr<'_>, kind: EventKind, value: Option<i64>) {
    with_current(|context| {
        let Some(mut writer) = context.trace_writer() else {
            return;
        };
        let Some(category) = category_ref(&mut writer, category) else {
            return;
        };
        let ticks = clock::ticks();
        let arg;
        let args: &[Arg<'_>] = match value {
            Some(value) => {
                arg = [Arg {
                    name: writer.string_ref(TraceStr::Static(COUNTER_VALUE_ARG)),
                    value: ArgValue::I64(value),
                }];
                &arg
            }
            None => &[],
        };
        // A refused record was counted by the engine.
        let _ = writer.event_with_category(ticks, category, name, kind, args);
    });
}

/// Whether the caller promised static strings.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strings {
    /// Any C string: copied inline.
    Inline,
    /// Strings that live, unchanged, until the process exits: cached by address.
    Static,
}

/// The slow path of every event function: read the strings, write, swallow any panic.
///
/// # Safety
///
/// `category` and `name` are `NULL` or valid NUL-terminated strings; with
/// [`Strings::Static`], they also live unchanged at the same address until the process exits.
#[cold]
#[inline(never)]
unsafe fn emit(
    category: *const c_char,
    name: *const c_char,
    strings: Strings,
    kind: EventKind,
    value: Option<i64>,
) {
    catch_panic(|| match strings {
        Strings::Static => {
            // SAFETY: the caller promised strings that live, unchanged, for the rest of the
            // process: `'static`.
            let (category, name) = unsafe { static_texts(category, name) };
            write_event(category.into(), name.into(), kind, value);
        }
        Strings::Inline => {
            // SAFETY: valid C strings for the duration of this call (the caller's promise);
            // the borrows end before we return.
            let (category, name) = unsafe { (c_text(category), c_text(name)) };
            write_event(
                TraceStr::Inline(category),
                TraceStr::Inline(name),
                kind,
                value,
            );
        }
    });
}

/// The `_static` instant and duration functions once tracing may be on. First the fast
/// path: the thread's event memo found by the two addresses alone (their promise makes the
/// address the key), then the installed context's record path. Otherwise the slow path: the
/// strings from the per-thread address cache (each pair read once per thread), then the Rust
/// facade's own path (the thread's event memo, which it teaches). Out of line, so that the
/// exported function stays a load and a branch when tracing is off. One set of functions per
/// kind (no kind to pass or match).
///
/// All are `extern "C"`, which cannot unwind (each catches what it must), so that a call
/// between them needs no landing pad and can be a tail call: the exported function jumps to
/// the fast path, which jumps to a cold function.
///
/// The fast path calls nothing: every other case of the record path ends in a tail call
/// (with at most six arguments, in registers) to a cold function, and the two addresses are
/// not kept past the memo (read back from it), so that the fast path saves few registers
/// (4, against 6 when it called the record path's cold functions itself). Each cold
/// function that can run the program's code (a full rolling buffer's or a service request's
/// buffer handler) runs it in `catch_unwind`: a panic is swallowed, the event dropped, and
/// never unwinds into C.
macro_rules! static_emitters {
    ($($(#[$doc:meta])* $name:ident, $slow:ident, $unused:ident, $refill:ident
        => $kind:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As [`emit`] with [`Strings::Static`].
        #[inline(never)]
        unsafe extern "C" fn $name(category: *const c_char, name: *const c_char) {
            let (c, n) = (category as usize, name as usize);
            let Some((pair, attempt)) = record::try_installed_plain_event_by_address(c, n, $kind)
            else {
                // SAFETY: forwarded caller's promise.
                return unsafe { $slow(category, name) };
            };
            // Past the memo, the addresses are read back from it in the cold cases rather
            // than kept in two registers all along the fast path: the same values (the memo
            // was found by them once the thread was claimed, when no call of this thread, a
            // signal handler's, can replace it).
            let strings = || {
                let (c, n) = pair.addresses();
                (c as *const c_char, n as *const c_char)
            };
            match attempt {
                Attempt::Written => {}
                // Never from an entered section (the arm folds away).
                Attempt::NotApplicable => unreachable!("a section's record is never refused"),
                Attempt::Unused => {
                    let (category, name) = strings();
                    // SAFETY: forwarded caller's promise (the same two addresses); the
                    // section is open (`Unused`).
                    unsafe { $unused(category, name) }
                }
                Attempt::Slow(record) => {
                    let (category, name) = strings();
                    let (open_gate, header, [ticks]) = record.into_parts();
                    // SAFETY: as above; the section is open and these are its record's parts.
                    unsafe { $refill(category, name, open_gate, header, ticks) }
                }
                Attempt::Wanted => serve_wanted_section(),
            }
        }

        /// The slow path of the function above.
        ///
        /// # Safety
        ///
        /// As [`emit`] with [`Strings::Static`].
        #[cold]
        #[inline(never)]
        unsafe extern "C" fn $slow(category: *const c_char, name: *const c_char) {
            catch_panic(|| {
                // SAFETY: the caller's promise (static strings).
                let (category, name) = unsafe { static_texts(category, name) };
                // The facade's memoised path itself (the exported function checked that
                // tracing may be on): a thread-scoped event of static strings, no arguments.
                crate::trace::emit_memoised_plain(category, name, $kind);
                record::claim_pair_by_address(category, name);
            });
        }

        /// The fast path found another context installed: leave its section, then the slow
        /// path.
        ///
        /// # Safety
        ///
        /// As [`emit`] with [`Strings::Static`]; the fast path's section is open (it ended
        /// with [`Attempt::Unused`]).
        #[cold]
        #[inline(never)]
        unsafe extern "C" fn $unused(category: *const c_char, name: *const c_char) {
            writer::leave_unused_section();
            // SAFETY: forwarded caller's promise.
            unsafe { $slow(category, name) }
        }

        /// The fast path's record needs a chunk refill or its trace is not running: write it
        /// on the open section's slow path (which may run the program's buffer handler),
        /// else the slow path.
        ///
        /// # Safety
        ///
        /// As [`emit`] with [`Strings::Static`]; the fast path's section is open and the
        /// record's parts are its (it ended with [`Attempt::Slow`]).
        #[cold]
        #[inline(never)]
        unsafe extern "C" fn $refill(
            category: *const c_char,
            name: *const c_char,
            open_gate: u32,
            header: u64,
            ticks: u64,
        ) {
            let written = catch_panic(|| {
                // SAFETY: the caller's promise: the parts of the open section's record.
                unsafe { SlowRecord::from_parts(open_gate, header, [ticks]) }.write()
            });
            if written == Some(false) {
                // SAFETY: forwarded caller's promise.
                unsafe { $slow(category, name) }
            }
        }
    )*};
}

/// Finish the fast path's [`Attempt::Wanted`] (the record is written): report to the buffer
/// hand-off that asked, whose service routine may run the program's buffer handler (a panic
/// there is swallowed).
#[cold]
#[inline(never)]
extern "C" fn serve_wanted_section() {
    catch_panic(writer::serve_wanted_section);
}

static_emitters! {
    /// `fxtrace_instant_static` when tracing may be on.
    emit_static_instant, emit_static_instant_slow, emit_static_instant_unused,
        emit_static_instant_refill => EventType::Instant;
    /// `fxtrace_duration_begin_static` when tracing may be on.
    emit_static_duration_begin, emit_static_duration_begin_slow,
        emit_static_duration_begin_unused, emit_static_duration_begin_refill
        => EventType::DurationBegin;
    /// `fxtrace_duration_end_static` when tracing may be on.
    emit_static_duration_end, emit_static_duration_end_slow, emit_static_duration_end_unused,
        emit_static_duration_end_refill => EventType::DurationEnd;
}

// === the exported functions ===

/// `fxtrace_instant`: an instant event `name` in `category` on the calling thread.
///
/// # Safety
///
/// `category` and `name` are `NULL` or valid NUL-terminated strings (for the call only).
#[no_mangle]
pub unsafe extern "C" fn fxtrace_instant(category: *const c_char, name: *const c_char) {
    if tracing_maybe_on() {
        // SAFETY: forwarded caller's promise.
        unsafe { emit(category, name, Strings::Inline, EventKind::Instant, None) }
    }
}

/// `fxtrace_duration_begin`: begins duration `name` on the calling thread; end it with
/// [`fxtrace_duration_end`] on the same thread.
///
/// # Safety
///
/// As [`fxtrace_instant`].
#[no_mangle]
pub unsafe extern "C" fn fxtrace_duration_begin(category: *const c_char, name: *const c_char) {
    if tracing_maybe_on() {
        // SAFETY: forwarded caller's promise.
        unsafe {
            emit(
                category,
                name,
                Strings::Inline,
                EventKind::DurationBegin,
                None,
            )
        }
    }
}

/// `fxtrace_duration_end`: ends the innermost duration begun on the calling thread.
///
/// # Safety
///
/// As [`fxtrace_instant`].
#[no_mangle]
pub unsafe extern "C" fn fxtrace_duration_end(category: *const c_char, name: *const c_char) {
    if tracing_maybe_on() {
        // SAFETY: forwarded caller's promise.
        unsafe {
            emit(
                category,
                name,
                Strings::Inline,
                EventKind::DurationEnd,
                None,
            )
        }
    }
}

/// `fxtrace_counter`: a counter event `name` (counter id 0) whose argument `"value"` is
/// `value`.
///
/// # Safety
///
/// As [`fxtrace_instant`].
#[no_mangle]
pub unsafe extern "C" fn fxtrace_counter(category: *const c_char, name: *const c_char, value: i64) {
    if tracing_maybe_on() {
        let kind = EventKind::Counter { id: 0 };
        // SAFETY: forwarded caller's promise.
        unsafe { emit(category, name, Strings::Inline, kind, Some(value)) }
    }
}

/// `fxtrace_is_category_enabled`: 1 if a trace is running and enables `category`, else 0.
///
/// # Safety
///
/// `category` is `NULL` or a valid NUL-terminated string (for the call only).
#[no_mangle]
pub unsafe extern "C" fn fxtrace_is_category_enabled(category: *const c_char) -> c_int {
    if !tracing_maybe_on() {
        return 0;
    }
    // SAFETY: forwarded caller's promise.
    unsafe { is_enabled_slow(category) }
}

/// # Safety
///
/// As [`fxtrace_is_category_enabled`].
#[cold]
#[inline(never)]
unsafe fn is_enabled_slow(category: *const c_char) -> c_int {
    catch_panic(|| {
        // SAFETY: the caller's promise; the borrow ends within the call.
        let category = unsafe { c_text(category) };
        with_current(|context| {
            let generation = context.event_generation(category)?;
            Some(category_enabled_by_content(context, generation, category))
        })
        .flatten()
        .unwrap_or(false)
    })
    .map_or(0, c_int::from)
}

/// `fxtrace_instant_static`: [`fxtrace_instant`] for strings that live, unchanged, until the
/// process exits (cached by address, written as indices).
///
/// # Safety
///
/// `category` and `name` are `NULL` or NUL-terminated strings that stay valid and unchanged at
/// the same address until the process exits.
#[no_mangle]
pub unsafe extern "C" fn fxtrace_instant_static(category: *const c_char, name: *const c_char) {
    if tracing_maybe_on() {
        // SAFETY: forwarded caller's promise (static strings).
        unsafe { emit_static_instant(category, name) }
    }
}

/// `fxtrace_duration_begin_static`: [`fxtrace_duration_begin`] for static strings.
///
/// # Safety
///
/// As [`fxtrace_instant_static`].
#[no_mangle]
pub unsafe extern "C" fn fxtrace_duration_begin_static(
    category: *const c_char,
    name: *const c_char,
) {
    if tracing_maybe_on() {
        // SAFETY: forwarded caller's promise (static strings).
        unsafe { emit_static_duration_begin(category, name) }
    }
}

/// `fxtrace_duration_end_static`: [`fxtrace_duration_end`] for static strings.
///
/// # Safety
///
/// As [`fxtrace_instant_static`].
#[no_mangle]
pub unsafe extern "C" fn fxtrace_duration_end_static(category: *const c_char, name: *const c_char) {
    if tracing_maybe_on() {
        // SAFETY: forwarded caller's promise (static strings).
        unsafe { emit_static_duration_end(category, name) }
    }
}

/// `fxtrace_counter_static`: [`fxtrace_counter`] for static strings.
///
/// # Safety
///
/// As [`fxtrace_instant_static`].
#[no_mangle]
pub unsafe extern "C" fn fxtrace_counter_static(
    category: *const c_char,
    name: *const c_char,
    value: i64,
) {
    if tracing_maybe_on() {
        let kind = EventKind::Counter { id: 0 };
        // SAFETY: forwarded caller's promise (static strings).
        unsafe { emit(category, name, Strings::Static, kind, Some(value)) }
    }
}

/// `fxtrace_alert`: raise alert `name` (at most 14 bytes) through this process's provider;
/// a flight recorder (`fxtrace record --stop-on-alert NAME`) then stops and writes its trace.
/// Returns 1 if the alert was sent, 0 if not (no provider, or the process's trace context is
/// not installed: in a child created by `fork`, which must not speak on its parent's
/// connection), -1 if `name` is not a valid alert name. Never blocks.
///
/// # Safety
///
/// `name` is `NULL` (invalid: -1) or a valid NUL-terminated string (for the call only).
#[no_mangle]
pub unsafe extern "C" fn fxtrace_alert(name: *const c_char) -> c_int {
    if name.is_null() {
        return -1;
    }
    catch_panic(|| {
        // SAFETY: the caller's promise; the borrow ends within the call.
        let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
        let Ok(name) = std::str::from_utf8(bytes) else {
            return -1;
        };
        if crate::protocol::fifo::AlertName::new(name).is_err() {
            return -1;
        }
        if !crate::engine::global::is_installed() {
            return 0;
        }
        match crate::provider::alert(name) {
            Ok(sent) => c_int::from(sent),
            Err(_) => -1,
        }
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::catch_panic;

    #[test]
    fn a_panic_is_swallowed_even_when_its_payload_panics_as_it_is_dropped() {
        struct PanicsOnDrop;
        impl Drop for PanicsOnDrop {
            fn drop(&mut self) {
                panic!("the payload's destructor panics");
            }
        }
        assert_eq!(catch_panic(|| 7), Some(7));
        assert_eq!(
            catch_panic(|| panic!("a buffer handler panics")),
            None::<()>
        );
        assert_eq!(
            catch_panic(|| std::panic::panic_any(PanicsOnDrop)),
            None::<()>,
            "swallowed, the payload leaked rather than unwinding out of its drop"
        );
    }

    /// A call from a signal handler that interrupted the thread's own use of the `_static`
    /// cache (simulated: the busy flag set) neither reads an entry (which could be half
    /// written) nor writes one: it reads its strings itself.
    #[test]
    fn static_texts_leave_the_cache_alone_while_it_is_in_use() {
        let (a, b) = (c"handler category", c"handler name");
        let (ka, kb) = (a.as_ptr() as usize, b.as_ptr() as usize);
        let set = super::static_text_set(ka, kb);
        super::STATIC_TEXT.with(|c| {
            // An entry as an interrupted write could leave it: the keys, other texts.
            c.entries[set].set((ka, kb, "half", "written"));
            c.busy.set(true);
        });
        // SAFETY: C string literals: static and unchanged.
        let texts = unsafe { super::static_texts(a.as_ptr(), b.as_ptr()) };
        assert_eq!(texts, ("handler category", "handler name"));
        super::STATIC_TEXT.with(|c| {
            assert_eq!(
                c.entries[set].get(),
                (ka, kb, "half", "written"),
                "not written"
            );
            assert!(c.busy.get(), "left to the interrupted code");
            c.busy.set(false);
            c.entries[set].set((0, 0, "", ""));
        });
    }

    #[test]
    fn static_texts_are_read_once_per_pair_of_addresses() {
        let a = c"first";
        let b = c"second";
        // SAFETY: C string literals: static and unchanged; NULL is allowed.
        unsafe {
            assert_eq!(
                super::static_texts(a.as_ptr(), b.as_ptr()),
                ("first", "second")
            );
            assert_eq!(
                super::static_texts(std::ptr::null(), b.as_ptr()),
                ("", "second")
            );
        }
        let cached = |x: usize, y: usize| {
            let set = super::static_text_set(x, y);
            super::STATIC_TEXT.with(|c| {
                let c = &c.entries;
                [c[set].get(), c[set + 1].get()]
                    .iter()
                    .any(|e| (e.0, e.1) == (x, y))
            })
        };
        assert!(cached(a.as_ptr() as usize, b.as_ptr() as usize));
        assert!(cached(0, b.as_ptr() as usize));
        // Two pairs of one set keep each other, and a cached pair is not read again.
        let p1 = (0x1000usize, 0x2000usize);
        let set = super::static_text_set(p1.0, p1.1);
        let p2 = (1..)
            .map(|i| (0x1000 + 8 * i, 0x2000))
            .find(|&(x, y)| super::static_text_set(x, y) == set)
            .unwrap();
        super::STATIC_TEXT.with(|c| {
            let c = &c.entries;
            c[set].set((p1.0, p1.1, "one", "uno"));
            c[set + 1].set((p2.0, p2.1, "two", "dos"));
        });
        // SAFETY: both pairs are cached, so no address is read.
        unsafe {
            let texts = |(x, y): (usize, usize)| {
                super::static_texts(x as *const std::ffi::c_char, y as *const std::ffi::c_char)
            };
            assert_eq!(texts(p1), ("one", "uno"));
            assert_eq!(texts(p2), ("two", "dos"));
        }
    }

    use super::*;

    #[test]
    fn text_of_null_invalid_and_long_strings() {
        // SAFETY: NULL is allowed.
        assert_eq!(unsafe { c_text(std::ptr::null()) }, "");
        let s = c"abc";
        // SAFETY: a C string literal.
        assert_eq!(unsafe { c_text(s.as_ptr()) }, "abc");
        let bad = b"ok\xff\xfenot\0";
        // SAFETY: NUL-terminated bytes.
        assert_eq!(unsafe { c_text(bad.as_ptr().cast()) }, "ok");
        let cut = "é".as_bytes();
        assert_eq!(utf8_prefix(&cut[..1]), "");
        let mut long = vec![b'x'; MAX_STRING_LEN + 10];
        long.push(0);
        // SAFETY: NUL-terminated.
        let text = unsafe { c_text(long.as_ptr().cast()) };
        assert_eq!(text.len(), MAX_STRING_LEN);
    }

    #[test]
    fn disabled_calls_are_no_ops() {
        // No context started in this unit-test binary's thread of interest: nothing to do and
        // nothing read (a dangling pointer would not even be touched, but stay well-defined).
        // SAFETY: valid C strings.
        unsafe {
            if !tracing_maybe_on() {
                assert_eq!(fxtrace_is_category_enabled(c"x".as_ptr()), 0);
            }
            fxtrace_instant(std::ptr::null(), std::ptr::null());
            fxtrace_counter(c"c".as_ptr(), std::ptr::null(), -1);
        }
    }
}

//! Typed record writers: the engine's `trace_context_write_*` (Fuchsia `context_api.cc`).
//!
//! Algorithm: "size, reserve once, write through a cursor" (STYLE guideline 7). A record is
//! described once by a [`crate::format`] struct; [`Encode::words`] gives its exact size, the
//! writer reserves that many words in the trace buffer, [`Encode::write_body`] encodes every
//! word after the header *in place* in the reserved slot, and [`Slot::commit`] publishes the
//! header word last, with `Release`. Nothing is copied and nothing allocates.
//!
//! Strings and the thread go through the per-thread caches of `engine::cache`: a
//! `&'static str` is registered once per thread per trace generation with a String record in
//! the durable buffer and then referred to by index; the calling thread is described once per
//! generation by a Kernel Object record (its name, with a `"process"` koid argument), a Thread
//! record, and — once per process per generation — a Kernel Object record naming the process.
//! Past the index limits (32767 strings, 255 threads per trace), past 256 strings per thread,
//! or for strings that are not `'static` ([`TraceStr::Inline`]), refs are written inline.
//!
//! Every record that is not written is counted as dropped by the engine: a full buffer or a
//! stopped trace (the engine counts it), and an invalid record (more than 15 arguments, a
//! string over 32000 bytes, a record over 32760 bytes: counted here through an empty
//! reservation, and returned as [`RecordError::Encode`]).
//!
//! ```
//! use fxtrace::engine::record::{start_trace, Scope};
//! use fxtrace::buffer::TraceBuffer;
//! use fxtrace::engine::{CategoryFilter, Context, ContextConfig, NoHandler, StartMode};
//! use fxtrace_format::{Arg, ArgValue};
//! use std::sync::Arc;
//!
//! let context = Context::new(TraceBuffer::create(1 << 16)?, ContextConfig::default(), Arc::new(NoHandler))?;
//! start_trace(&context, StartMode::ClearEntire, CategoryFilter::all())?;
//! if let Some(mut w) = context.trace_writer() {
//!     if w.category_enabled("app") {
//!         let args = [Arg::new("bytes", ArgValue::U64(512))];
//!         w.instant(fxtrace::clock::ticks(), "app", "read", Scope::Thread, &args)?;
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::allocator::open_gate_high;
use super::cache::{
    self, Lookup, ThreadCache, ThreadSlot, FLAG_CATEGORY_CHECKED, FLAG_CATEGORY_ENABLED,
    FLAG_INDEX_ATTEMPTED, FLAG_INDEX_OK,
};
use super::category::CategoryFilter;
use super::context::{Context, EngineError, StartMode};
use super::writer::{self, Slot, Writer};
use crate::clock;
use crate::format::fields::EventRecord;
use crate::format::{fit_args, truncate_str, ScalarArg, MAX_RECORD_WORDS};
use crate::format::{
    Arg, ArgValue, Blob, BlobType, Encode, EncodeError, Event, EventKind, EventType,
    Initialization, KernelObject, Log, ObjectType, ProcessRef, SchedContextSwitch, StringRecord,
    StringRef, ThreadRecord, ThreadRef, ThreadState, UserspaceObject, MAX_ARGS,
};

/// Scope of an instant event. FXT has no field for it: a non-thread scope is written as a
/// string argument `scope` = `"process"` or `"global"`, which the Chrome converter maps to
/// the JSON `"s"` field. Thread scope (the default) adds nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// The event belongs to the thread (`TRACE_SCOPE_THREAD` = 0).
    #[default]
    Thread = 0,
    /// The event concerns the whole process (`TRACE_SCOPE_PROCESS` = 1).
    Process = 1,
    /// The event concerns the whole system (`TRACE_SCOPE_GLOBAL` = 2).
    Global = 2,
}

impl Scope {
    /// Name of the argument that carries a non-thread scope.
    pub const ARG_NAME: &'static str = "scope";

    /// The `scope` argument's value, `None` for thread scope.
    pub const fn arg_value(self) -> Option<&'static str> {
        match self {
            Scope::Thread => None,
            Scope::Process => Some("process"),
            Scope::Global => Some("global"),
        }
    }
}

/// A string given to a writer: `'static` strings are interned through the per-thread cache
/// (registered once, then referred to by index); other strings are written inline. A string
/// literal converts with `.into()`; wrap a borrowed string in [`TraceStr::Inline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceStr<'a> {
    /// A string that lives for the whole program, cached by address.
    Static(&'static str),
    /// Any other string, written inline in each record.
    Inline(&'a str),
}

impl<'a> From<&'static str> for TraceStr<'a> {
    #[inline]
    fn from(s: &'static str) -> Self {
        TraceStr::Static(s)
    }
}

impl<'a> TraceStr<'a> {
    /// The text.
    pub fn as_str(&self) -> &'a str {
        match *self {
            TraceStr::Static(s) => s,
            TraceStr::Inline(s) => s,
        }
    }
}

/// Why a record was not written. Either way the engine counted it as dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// No room (buffer full, durable buffer full) or tracing stopped.
    #[error("record dropped: no room in the trace buffer, or tracing stopped")]
    Dropped,
    /// The record cannot be encoded (too many arguments, a string or the record too long).
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// Start `context` and write the initialization record (ticks per second of
/// [`clock::ticks`], from [`clock::info`]) as the first record of the trace, before any other
/// thread can write: [`Context::start_with_initialization`]. Returns whether that record was
/// written (not after a [`StartMode::Retain`] start that keeps an earlier one, or when there
/// is no room; see there).
///
/// The context may already be reachable by other threads ([`super::global::install`]): they
/// write nothing until the record is in place.
pub fn start_trace(
    context: &Context,
    mode: StartMode,
    categories: CategoryFilter,
) -> Result<bool, EngineError> {
    // Outside the context's lock: the first call may calibrate the clock.
    let ticks_per_second = clock::info().ticks_per_second;
    context.start_with_initialization(mode, categories, ticks_per_second)
}

/// `""` is the empty ref; anything else inline.
/// The argument of a process's kernel object record that names the instruction its
/// timestamps were read with ([`crate::clock::TICKS_INSTRUCTION`]).
pub const CLOCK_ARG: &str = "fxtrace.clock";

#[inline(always)]
fn inline_ref(s: &str) -> StringRef<'_> {
    if s.is_empty() {
        StringRef::Empty
    } else {
        StringRef::Inline(s)
    }
}

/// Whether `category` is enabled for `context`, through `cache` when given (the caller
/// adopted the generation), else by asking the context.
#[inline(always)]
fn category_enabled_in(
    context: &Context,
    cache: Option<&ThreadCache>,
    category: &'static str,
) -> bool {
    if let Some(cache) = cache {
        let (slot, entry) = match cache.lookup(category) {
            Lookup::Found { slot, entry } => {
                if entry.flags & FLAG_CATEGORY_CHECKED != 0 {
                    return entry.flags & FLAG_CATEGORY_ENABLED != 0;
                }
                (slot, Some(entry))
            }
            Lookup::Vacant { slot } => (slot, None),
            Lookup::Full => return context.is_category_enabled(category),
        };
        let flags = check_category(context, cache, category, slot, entry);
        return flags & FLAG_CATEGORY_ENABLED != 0;
    }
    context.is_category_enabled(category)
}

/// Ask the context about `category` and cache the answer at `slot`; returns the entry's new
/// flags.
#[cold]
#[inline(never)]
fn check_category(
    context: &Context,
    cache: &ThreadCache,
    category: &'static str,
    slot: usize,
    entry: Option<cache::Entry>,
) -> u8 {
    let enabled = context.is_category_enabled(category);
    let (index, flags) = entry.map_or((0, 0), |e| (e.index, e.flags));
    let flags = flags | FLAG_CATEGORY_CHECKED | if enabled { FLAG_CATEGORY_ENABLED } else { 0 };
    cache.store(slot, category, index, flags);
    flags
}

// === impl Context ===

impl Context {
    /// Enter a writer section and wrap it in a [`TraceWriter`]; `None` when tracing is off or
    /// the attempt is dropped (see [`Context::acquire`]).
    #[inline(always)]
    pub fn trace_writer(&self) -> Option<TraceWriter<'_>> {
        let writer = self.acquire()?;
        let cache = cache::current();
        let cached = cache.adopt(writer.generation());
        Some(TraceWriter {
            context: self,
            writer,
            cache,
            cached,
        })
    }

    /// The generation of the current trace, `None` when it is not started (one relaxed load).
    #[inline]
    pub fn started_generation(&self) -> Option<u32> {
        let (started, generation) = self.inner().gate_generation_now();
        started.then_some(generation)
    }

    /// [`Self::started_generation`] for an event (or a check that guards one) of `category`:
    /// when the trace is not started but the context is armed ([`Context::arm`]), the call
    /// is counted as a dropped record of the coming trace.
    #[inline(always)]
    pub(crate) fn event_generation(&self, category: &str) -> Option<u32> {
        let generation = self.started_generation();
        if generation.is_none() {
            self.inner().count_call_before_start(Some(category));
        }
        generation
    }

    /// `trace_acquire_context_for_category`, plus the timestamp: if `category` is enabled,
    /// read the clock, enter a writer section, and return it with the category's ref and the
    /// ticks. The clock is read once the category is known to be enabled but before the
    /// writer section is entered: `rdtscp` waits for the instructions before it, not for
    /// those after it, so entering the section overlaps its latency. In the steady state
    /// the category's answer and index come from one lookup in the thread's cache.
    #[inline(always)]
    pub(crate) fn enter_for_category(
        &self,
        category: &'static str,
    ) -> Option<(TraceWriter<'_>, StringRef<'static>, u64)> {
        const ON_INDEXED: u8 =
            FLAG_CATEGORY_CHECKED | FLAG_CATEGORY_ENABLED | FLAG_INDEX_ATTEMPTED | FLAG_INDEX_OK;
        let generation = self.event_generation(category)?;
        let cache = cache::current();
        if cache.adopt(generation) {
            if let Lookup::Found { entry, .. } = cache.lookup(category) {
                if entry.flags & ON_INDEXED == ON_INDEXED {
                    let ticks = clock::ticks();
                    let mut writer = self.trace_writer()?;
                    if writer.generation() == generation {
                        return Some((writer, StringRef::Index(entry.index), ticks));
                    }
                    // A new trace started in between: resolve again in its generation.
                    let category = writer.category_ref(category)?;
                    return Some((writer, category, ticks));
                }
            }
        }
        self.enter_for_category_slow(category)
    }

    /// The hot path of a thread-scoped event whose category, name and thread are all in the
    /// thread's event memo for the running trace (see `engine::cache`): no table probe, no
    /// [`TraceWriter`]; the clock is read, a writer section entered, and the event encoded
    /// straight into the reserved words. Returns `false` when the memo does not know the
    /// pair (or the trace changed meanwhile): nothing was written or counted, and the caller
    /// takes the general path ([`Self::enter_for_category`], then
    /// [`TraceWriter::event_memoising`], which fills the memo). `true`: handled (written,
    /// or dropped and counted, or tracing is off).
    #[inline(always)]
    pub(crate) fn event_memoised(
        &self,
        category: &'static str,
        name: &'static str,
        kind: EventKind,
        args: &[Arg<'_>],
    ) -> bool {
        let Some(generation) = self.event_generation(category) else {
            return true;
        };
        self.event_memoised_in(generation, None, (category, name), kind, args)
    }

    /// Whether the thread's event memo knows (`category`, `name`) in `generation`, which
    /// implies that the category is enabled in that trace.
    #[inline(always)]
    pub(crate) fn is_memoised(
        &self,
        generation: u32,
        category: &'static str,
        name: &'static str,
    ) -> bool {
        cache::current().memo(generation, category, name).is_some()
    }

    /// [`Self::event_memoised`] for an event of trace `generation` only (an event of another
    /// trace is not written), at `ticks` (`None`: read the clock now).
    #[inline(always)]
    pub(crate) fn event_memoised_in(
        &self,
        generation: u32,
        ticks: Option<u64>,
        (category, name): (&'static str, &'static str),
        kind: EventKind,
        args: &[Arg<'_>],
    ) -> bool {
        let Some(memo) = cache::current().memo(generation, category, name) else {
            return false;
        };
        let ticks = ticks.unwrap_or_else(clock::ticks);
        let Some(mut writer) = self.acquire() else {
            return true;
        };
        if writer.generation() != generation {
            return false; // a new trace started in between: resolve again
        }
        write_memoised(&mut writer, memo, ticks, kind, args);
        true
    }

    #[cold]
    #[inline(never)]
    fn enter_for_category_slow(
        &self,
        category: &'static str,
    ) -> Option<(TraceWriter<'_>, StringRef<'static>, u64)> {
        if !self.is_category_enabled_cached(category) {
            return None;
        }
        let ticks = clock::ticks();
        let mut writer = self.trace_writer()?;
        let category = writer.category_ref(category)?;
        Some((writer, category, ticks))
    }

    /// Whether `category` is enabled in the current trace, answered once per thread per
    /// trace generation and then from the thread's cache (Fuchsia's `kCategoryChecked`).
    /// False when the trace is not started (counted as a drop while armed, as the event it
    /// guards is lost: see [`Context::arm`]). Needs no writer section.
    #[inline]
    pub fn is_category_enabled_cached(&self, category: &'static str) -> bool {
        let Some(generation) = self.event_generation(category) else {
            return false;
        };
        let cache = cache::current();
        let cached = cache.adopt(generation);
        category_enabled_in(self, cached.then_some(cache), category)
    }
}

/// The installed context's path for a thread-scoped event of `'static` strings that the
/// thread's event memo knows (see `engine::cache`): the memo, the clock, one announcement
/// (`writer::with_installed_writer`), the record. No read-side section of the current
/// context, no table probe. `generation`: the trace the event belongs to (a duration's
/// begin), `None` for the running one; `ticks`: `None` reads the clock.
///
/// `true`: written (or dropped and counted). `false`: this path does not apply (memo miss,
/// another trace, the thread not bound to the installed context, not started): nothing was
/// written or counted, and the caller takes the general path.
#[inline(always)]
pub(crate) fn installed_event_memoised(
    generation: Option<u32>,
    ticks: Option<u64>,
    (category, name): (&'static str, &'static str),
    kind: EventKind,
    args: &[Arg<'_>],
) -> bool {
    let Some(memo) = cache::current().memo_any(category, name) else {
        return false;
    };
    if generation.is_some_and(|generation| generation != memo.generation()) {
        return false;
    }
    let ticks = ticks.unwrap_or_else(clock::ticks);
    if args.is_empty() {
        let header = indexed_event_header(kind.event_type(), memo);
        return match kind.data_word() {
            None => writer::installed_record(memo.open_gate(), header, [ticks], 1),
            Some(data) => writer::installed_record(memo.open_gate(), header, [ticks, data], 2),
        };
    }
    writer::with_installed_writer(|writer| {
        if writer.generation() != memo.generation() {
            return false; // another trace: resolve again
        }
        write_memoised(writer, memo, ticks, kind, args);
        true
    })
    .unwrap_or(false)
}

/// [`installed_event_memoised`] for an event without arguments nor type-specific word (an
/// instant, a duration begin or end) at the current time: a two-word record.
#[inline(always)]
pub(crate) fn installed_plain_event(
    category: &'static str,
    name: &'static str,
    event_type: EventType,
) -> bool {
    let Some(memo) = cache::current().memo_any(category, name) else {
        return false;
    };
    let ticks = clock::ticks();
    let header = indexed_event_header(event_type, memo);
    writer::installed_record(memo.open_gate(), header, [ticks], 1)
}

/// [`installed_plain_event`]'s fast path for a pair known by its strings' addresses alone
/// (the C API's `_static` strings: see `ThreadCache::claimed_by_address`), nothing read from
/// the strings: `None` if the installed path does not apply or the thread has no claimed memo
/// of the pair (no section open), else the memo and the record's attempt, each case but
/// `Written` handed back for the caller to finish. The memo is looked up
/// once the thread is claimed ([`writer::ThreadClaim`]): then no call of this thread (a signal
/// handler's) can replace it, so the caller may read the pair's addresses back from it
/// ([`cache::ClaimedPair::addresses`]) rather than keep them.
#[cfg(feature = "c-api")]
#[inline(always)]
pub(crate) fn try_installed_plain_event_by_address(
    category: usize,
    name: usize,
    event_type: EventType,
) -> Option<(cache::ClaimedPair<'static>, writer::Attempt<1>)> {
    let claim = writer::claim_installed()?;
    let Some(pair) = cache::current().claimed_by_address(category, name) else {
        claim.release();
        return None;
    };
    let memo = pair.memo();
    let ticks = clock::ticks();
    let header = indexed_event_header(event_type, memo);
    // Debug builds: checked before the section is announced (a failed assertion leaves the
    // claim behind, never an announced section that `uninstall` would wait for).
    writer::debug_assert_record::<1>(header, 1);
    let attempt = match claim.announce() {
        Some(section) => section.record(memo.open_gate(), header, [ticks], 1),
        None => writer::Attempt::Unused,
    };
    Some((pair, attempt))
}

/// After the C API's `_static` slow path wrote (`category`, `name`) through the memoised
/// path: let [`try_installed_plain_event_by_address`] find the pair by its addresses from now on.
#[cfg(feature = "c-api")]
pub(crate) fn claim_pair_by_address(category: &'static str, name: &'static str) {
    cache::current().claim_by_address(category, name);
}

/// What a span's begin learned from the thread's event memo, so that its end on the same
/// thread writes without looking the memo up again: the duration-complete record's header
/// (refs and event type), the indices of its arguments' names if the memo had them, and the
/// thread both are valid on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpanMemo {
    /// The header (size field zero); 0: nothing learned.
    header: u64,
    /// [`writer::thread_key`] of the thread whose memo it came from.
    thread: u64,
    /// The string indices of the span's argument names, packed as
    /// [`cache::Memo::arg_indices`], if the memo had them; 0: not learned.
    arg_indices: u64,
}

impl SpanMemo {
    /// Nothing learned: the end looks the memo up.
    pub(crate) const NONE: SpanMemo = SpanMemo {
        header: 0,
        thread: 0,
        arg_indices: 0,
    };

    /// The memo as three words (header, thread, argument indices): a copy that can be kept
    /// in atomics; [`Self::from_words`] gives it back.
    #[cfg(feature = "tracing")]
    #[inline(always)]
    pub(crate) fn to_words(self) -> [u64; 3] {
        [self.header, self.thread, self.arg_indices]
    }

    /// The memo whose [`Self::to_words`] these are.
    #[cfg(feature = "tracing")]
    #[inline(always)]
    pub(crate) fn from_words([header, thread, arg_indices]: [u64; 3]) -> SpanMemo {
        SpanMemo {
            header,
            thread,
            arg_indices,
        }
    }

    /// The argument names' indices, packed, if the begin learned them on the calling thread
    /// (they are its own registrations); 0 otherwise.
    #[inline(always)]
    pub(crate) fn arg_indices_here(&self) -> u64 {
        if self.thread == writer::thread_key_if_any() {
            self.arg_indices
        } else {
            0
        }
    }
}

/// The generation of the trace started last in the process, if the thread's event memo
/// knows (`category`, `name`) in it, which implies that the category is enabled there: the
/// begin of a span (a duration guard, `#[traced]`, a `tracing` span) or a layer event
/// without a writer section, with what its end needs. The end writes
/// only if that trace is still the installed context's running one
/// ([`installed_span_end`]); `None`: ask the general path.
/// `args_key`: the key of the span's argument names ([`remember_arg_indices`]; 0: none),
/// whose indices the memo may hold.
#[inline(always)]
pub(crate) fn memoised_latest_generation(
    category: &'static str,
    name: &'static str,
    args_key: usize,
) -> Option<(u32, SpanMemo)> {
    latest_memo(category, name).map(|memo| {
        let header = indexed_event_header(EventType::DurationComplete, memo);
        // (Not 0: the memo was filled in a section of this thread, which bound it.)
        let thread = writer::thread_key_if_any();
        let arg_indices = if args_key != 0 && memo.args_key == args_key {
            memo.arg_indices
        } else {
            0
        };
        let span = SpanMemo {
            header,
            thread,
            arg_indices,
        };
        (memo.generation(), span)
    })
}

/// The calling thread's memo of (`category`, `name`) if it was filled in the trace started
/// last in the process (which implies that the category is enabled there): what
/// [`memoised_latest_generation`] and a layer event ([`installed_instant`]) write with.
#[inline(always)]
pub(crate) fn latest_memo(category: &'static str, name: &'static str) -> Option<cache::Memo> {
    let memo = cache::current().memo_any(category, name)?;
    (memo.generation() == super::context::latest_generation()).then_some(memo)
}

/// The end of a span begun with a [`SpanMemo`]: its duration-complete record from `start`
/// to `end` in trace `generation`, on the installed context's path, if the span ends on the
/// thread it began on (same answers as [`installed_event_memoised`]).
#[inline(always)]
pub(crate) fn installed_span_end(generation: u32, memo: SpanMemo, span: (u64, u64)) -> bool {
    memo.header != 0
        && memo.thread == writer::thread_key_if_any()
        && writer::installed_record(open_gate_high(generation), memo.header, [span.0, span.1], 2)
}

/// The duration-complete record of a span of `'static` strings without arguments that began
/// at `start` in trace `generation`, ending at `end`, on the installed context's path (see
/// [`installed_event_memoised`]; same answers).
#[inline(always)]
pub(crate) fn installed_duration_complete(
    generation: u32,
    (start, end): (u64, u64),
    (category, name): (&'static str, &'static str),
) -> bool {
    let Some(memo) = cache::current().memo_any(category, name) else {
        return false;
    };
    if memo.generation() != generation {
        return false;
    }
    let header = indexed_event_header(EventType::DurationComplete, memo);
    writer::installed_record(open_gate_high(generation), header, [start, end], 2)
}

/// Write a thread-scoped event from its memo, at `ticks`, in `writer`'s section (of the
/// memo's generation). Drops are counted by the reservation.
#[inline(always)]
fn write_memoised(
    writer: &mut Writer<'_>,
    memo: cache::Memo,
    ticks: u64,
    kind: EventKind,
    args: &[Arg<'_>],
) {
    if args.is_empty() {
        // Two or three words, written straight into the reserved slot.
        let data = kind.data_word();
        let words = 2 + usize::from(data.is_some());
        if let Some(mut slot) = writer.reserve(words) {
            let payload = slot.payload();
            payload[0] = ticks;
            if let Some(data) = data {
                payload[1] = data;
            }
            slot.commit(indexed_event_header(kind.event_type(), memo));
        }
        return;
    }
    let event = Event {
        ticks,
        thread: ThreadRef::Index(memo.thread_index),
        category: StringRef::Index(memo.category_index),
        name: StringRef::Index(memo.name_index),
        args,
        kind,
    };
    write_event_in(writer, &event);
}

/// Write `event` in `writer`'s section: sized, reserved, encoded in place. A record whose
/// inline texts together exceed a record is written with them cut to fit ([`fit_args`]);
/// one that cannot be encoded or has no room is dropped and counted.
#[inline(always)]
fn write_event_in(writer: &mut Writer<'_>, event: &Event<'_>) {
    match event.words() {
        Ok(words) => {
            if let Some(slot) = writer.reserve(words) {
                // Sized by `words()`: encoding cannot fail here.
                let _ = encode_and_commit(slot, event, words);
            }
        }
        Err(EncodeError::RecordTooLarge { .. } | EncodeError::ArgumentTooLarge { .. }) => {
            write_event_in_cut(writer, event)
        }
        // Counted as dropped: an empty reservation released without commit.
        Err(_) => drop(writer.reserve(1)),
    }
}

/// Longest inline category or name kept in an event too large for one record, in bytes.
const FITTED_NAME_BYTES: usize = 4096;

/// `event` cut to fit one record: an inline category or name longer than
/// [`FITTED_NAME_BYTES`] cut to it, then the arguments' inline texts cut into the room the
/// rest leaves ([`fit_args`]); `None` if even that fails.
fn fit_event<'o>(event: &Event<'o>, out: &'o mut [Arg<'o>; MAX_ARGS]) -> Option<Event<'o>> {
    let cut_inline = |s: StringRef<'o>| match s {
        StringRef::Inline(text) => StringRef::Inline(truncate_str(text, FITTED_NAME_BYTES)),
        other => other,
    };
    let named = Event {
        category: cut_inline(event.category),
        name: cut_inline(event.name),
        args: &[],
        ..*event
    };
    let room = MAX_RECORD_WORDS.checked_sub(named.words().ok()?)?;
    let args = fit_args(event.args, room, out)?;
    Some(Event { args, ..named })
}

/// [`write_event_in`] of an event too large for one record (see
/// [`TraceWriter::write_event`]).
#[cold]
#[inline(never)]
fn write_event_in_cut(writer: &mut Writer<'_>, event: &Event<'_>) {
    let mut cut = [Arg::new(StringRef::Empty, ArgValue::Null); MAX_ARGS];
    let fitted = fit_event(event, &mut cut);
    match fitted.map(|event| (event.words(), event)) {
        Some((Ok(words), event)) => {
            if let Some(slot) = writer.reserve(words) {
                let _ = encode_and_commit(slot, &event, words);
            }
        }
        // Counted as dropped: an empty reservation released without commit.
        _ => drop(writer.reserve(1)),
    }
}

/// Most arguments of a span that [`installed_span_end_with_args`] writes (more take the
/// general path): as many as a memo keeps the names' indices of.
pub(crate) const INSTALLED_SPAN_ARGS: usize = cache::MEMO_ARGS;

/// Payload words of a span end with up to [`INSTALLED_SPAN_ARGS`] arguments (start, two words
/// per argument, end).
pub(crate) const INSTALLED_SPAN_PAYLOAD: usize = 2 + 2 * INSTALLED_SPAN_ARGS;

/// The end of a span of `'static` strings with scalar arguments: its duration-complete
/// record from `start` to `end` in trace `generation`, on the installed context's path, when
/// the thread's memo knows the pair. `name_indices`: the string indices of the arguments'
/// names in that trace, packed 16 bits each (first lowest; [`arg_name_indices`]), registered
/// by the calling thread (an index registered by another thread may be defined later in the
/// buffer than this record: oneshot mode keeps string records in the writers' chunks). The
/// record is encoded in place: header, start, each argument's words, end. `memo`: what the
/// span's begin learned (the header without a memo lookup when the span ends on the thread it
/// began on). `M`: the payload's words, at least `2 + 2 * args.len()` (a caller that knows
/// its argument count sizes it exactly: fewer words to copy). Same answers as
/// [`installed_event_memoised`].
#[inline(always)]
pub(crate) fn installed_span_end_with_args<const M: usize>(
    generation: u32,
    memo: SpanMemo,
    (start, end): (u64, u64),
    (category, name): (&'static str, &'static str),
    args: &[ScalarArg],
    name_indices: u64,
) -> bool {
    if args.len() > INSTALLED_SPAN_ARGS || 2 + 2 * args.len() > M {
        return false;
    }
    let header = if memo.header != 0 && memo.thread == writer::thread_key_if_any() {
        memo.header
    } else {
        match cache::current().memo_any(category, name) {
            Some(memo) if memo.generation() == generation => {
                indexed_event_header(EventType::DurationComplete, memo)
            }
            _ => return false,
        }
    };
    // Room for the start, every argument's two words, the end.
    let mut payload = [0u64; M];
    payload[0] = start;
    let mut len = 1;
    for (i, arg) in args.iter().enumerate() {
        payload[len] = arg.header((name_indices >> (16 * i)) as u16);
        // Overwritten by what follows when the argument is one word.
        payload[len + 1] = arg.word();
        len += arg.words();
    }
    payload[len] = end;
    len += 1;
    let header = header | EventRecord::ARGUMENT_COUNT.make(args.len() as u64);
    writer::installed_record(open_gate_high(generation), header, payload, len)
}

/// The string indices of `names` (at most [`INSTALLED_SPAN_ARGS`]) in trace `generation`,
/// packed 16 bits each, if the calling thread's string cache holds them all (no insertion:
/// the general path interns).
#[inline]
pub(crate) fn arg_name_indices(generation: u32, names: &[&'static str]) -> Option<u64> {
    if names.len() > INSTALLED_SPAN_ARGS {
        return None;
    }
    let cache = cache::current();
    let mut packed = 0;
    for (i, name) in names.iter().enumerate() {
        packed |= u64::from(cache.index_of(generation, name)?) << (16 * i);
    }
    Some(packed)
}

/// Remember `name_indices` ([`arg_name_indices`]) with the calling thread's memo of the pair in
/// `generation`, keyed `args_key` (the address of the names; never 0): the next begin of a
/// span of that pair and names learns them ([`memoised_latest_generation`]).
#[inline(never)]
pub(crate) fn remember_arg_indices(
    generation: u32,
    pair: (&'static str, &'static str),
    args_key: usize,
    name_indices: u64,
) {
    cache::current().remember_args(generation, pair, args_key, name_indices);
}

/// The string index of `s` in trace `generation` if the calling thread's string cache holds
/// one (no insertion: the general path interns).
#[cfg(feature = "tracing")]
#[inline(always)]
pub(crate) fn string_index(generation: u32, s: &'static str) -> Option<u16> {
    cache::current().index_of(generation, s)
}

/// Payload words of an [`installed_instant`] encoded first into a block of this constant
/// length (most events: a short message, a few scalar fields); a larger one is encoded again
/// into [`writer::MAX_INSTALLED_PAYLOAD`] words.
#[cfg(feature = "tracing")]
const SMALL_INSTANT_PAYLOAD: usize = 8;

/// A thread-scoped instant at `ticks` on the installed context's path, in the trace of
/// `memo` (the calling thread's memo of the event's call site, [`latest_memo`]; see
/// [`TraceWriter::memoise_site`]), with its category and thread refs, named `name` inline
/// (`None`: the site's own name), with `args`: each a `'static` name whose string index the
/// caller knows (non-zero) or the thread's string cache knows in that trace (0: looked up;
/// the general path interns them: the next record finds them), and a value. Same answers as
/// [`installed_event_memoised`].
#[cfg(feature = "tracing")]
#[inline]
pub(crate) fn installed_instant(
    memo: &cache::Memo,
    ticks: u64,
    name: Option<&str>,
    args: &[(&'static str, u16, ArgValue<'_>)],
) -> bool {
    let (memo, generation) = (*memo, memo.generation());
    if args.len() > MAX_ARGS {
        return false;
    }
    let name = name.filter(|name| !name.is_empty());
    let mut header = indexed_event_header(EventType::Instant, memo)
        | EventRecord::ARGUMENT_COUNT.make(args.len() as u64);
    if let Some(name) = name {
        let Ok(name_ref) = StringRef::Inline(name).encode() else {
            return installed_instant_reserved(generation, ticks, memo, Some(name), args);
        };
        header = EventRecord::NAME_REF.set(header, u64::from(name_ref));
    }
    // Encoded on the stack, for `installed_record`: the timestamp, the inline name, each
    // argument (a scalar's words directly, others through the codec's own encoder). A small
    // block first; encoded again into the largest when it does not fit.
    let mut small = [0u64; SMALL_INSTANT_PAYLOAD];
    match encode_instant_payload(&mut small, generation, ticks, name, args) {
        Encoded::Words(len) => writer::installed_record(memo.open_gate(), header, small, len),
        Encoded::UnknownName => false,
        Encoded::TooLarge => {
            let mut payload = [0u64; writer::MAX_INSTALLED_PAYLOAD];
            match encode_instant_payload(&mut payload, generation, ticks, name, args) {
                Encoded::Words(len) => {
                    writer::installed_record(memo.open_gate(), header, payload, len)
                }
                Encoded::UnknownName => false,
                // Larger than the payload, or not encodable: reserved and encoded in place.
                Encoded::TooLarge => {
                    installed_instant_reserved(generation, ticks, memo, name, args)
                }
            }
        }
    }
}

/// What [`encode_instant_payload`] did.
#[cfg(feature = "tracing")]
enum Encoded {
    /// The payload's words.
    Words(usize),
    /// An argument's name is not in the thread's string cache: nothing to write here.
    UnknownName,
    /// More words than the block has, or an argument that does not encode.
    TooLarge,
}

/// The payload of an [`installed_instant`] into `out`.
#[cfg(feature = "tracing")]
#[inline(always)]
fn encode_instant_payload(
    out: &mut [u64],
    generation: u32,
    ticks: u64,
    name: Option<&str>,
    args: &[(&'static str, u16, ArgValue<'_>)],
) -> Encoded {
    use crate::format::{Cursor, Sink};

    let mut out = Cursor::new(out);
    out.word(ticks);
    if let Some(name) = name {
        out.stream(name.as_bytes());
    }
    for &(arg_name, index, value) in args {
        let index = match index {
            0 => match cache::current().index_of(generation, arg_name) {
                Some(index) => index,
                None => return Encoded::UnknownName,
            },
            known => known,
        };
        match ScalarArg::new(value) {
            Some(scalar) => {
                out.word(scalar.header(index));
                if scalar.words() == 2 {
                    out.word(scalar.word());
                }
            }
            None => {
                if Arg::new(StringRef::Index(index), value)
                    .emit(&mut out)
                    .is_err()
                {
                    return Encoded::TooLarge;
                }
            }
        }
    }
    match out.finish() {
        Ok(len) => Encoded::Words(len),
        Err(_) => Encoded::TooLarge,
    }
}

/// [`installed_instant`] for a record larger than an installed record's payload, or one
/// that cannot be encoded (then dropped and counted): reserved and encoded in place.
#[cfg(feature = "tracing")]
#[cold]
#[inline(never)]
fn installed_instant_reserved(
    generation: u32,
    ticks: u64,
    memo: cache::Memo,
    name: Option<&str>,
    args: &[(&'static str, u16, ArgValue<'_>)],
) -> bool {
    let cache = cache::current();
    let mut built = [Arg {
        name: StringRef::Empty,
        value: ArgValue::Null,
    }; MAX_ARGS];
    let args = &args[..args.len().min(MAX_ARGS)];
    for (slot, &(arg_name, index, value)) in built.iter_mut().zip(args) {
        let index = match index {
            0 => match cache.index_of(generation, arg_name) {
                Some(index) => index,
                None => return false,
            },
            known => known,
        };
        *slot = Arg::new(StringRef::Index(index), value);
    }
    let event = Event {
        ticks,
        thread: ThreadRef::Index(memo.thread_index),
        category: StringRef::Index(memo.category_index),
        name: name.map_or(StringRef::Index(memo.name_index), StringRef::Inline),
        args: &built[..args.len()],
        kind: EventKind::Instant,
    };
    // On the installed context's path (see `writer::with_installed_writer`).
    writer::with_installed_writer(|writer| {
        if writer.generation() != generation {
            return false; // another trace: resolve again
        }
        write_event_in(writer, &event);
        true
    })
    .unwrap_or(false)
}

/// The event writers that differ only in their [`EventKind`] (and its id): each is
/// [`TraceWriter::event`] with `ticks, category, name`, the kind's own parameters, then `args`.
macro_rules! event_writers {
    ($( $(#[$doc:meta])* $name:ident ( $($param:ident: $ty:ty),* ) => $kind:expr; )*) => {$(
        $(#[$doc])*
        #[inline]
        pub fn $name<'a>(
            &mut self,
            ticks: u64,
            category: &'static str,
            name: impl Into<TraceStr<'a>>,
            $($param: $ty,)*
            args: &[Arg<'_>],
        ) -> Result<(), RecordError> {
            self.event(ticks, category, name, $kind, args)
        }
    )*};
}

// === impl TraceWriter ===

/// A writer section with typed record writers, string interning and thread registration.
/// Obtained from [`Context::trace_writer`]; dropping it leaves the section. Not `Send`.
pub struct TraceWriter<'c> {
    context: &'c Context,
    writer: Writer<'c>,
    /// The calling thread's cache.
    cache: &'static ThreadCache,
    /// Whether `cache` serves this section's generation.
    cached: bool,
}

impl std::fmt::Debug for TraceWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWriter")
            .field("writer", &self.writer)
            .field("cached", &self.cached)
            .finish()
    }
}

impl<'c> TraceWriter<'c> {
    /// The context written to.
    pub fn context(&self) -> &'c Context {
        self.context
    }

    /// The trace generation of this section.
    pub fn generation(&self) -> u32 {
        self.writer.generation()
    }

    /// Whether this section uses the thread's caches (false when the thread already serves a
    /// newer generation: then every ref is inline).
    pub fn is_cached(&self) -> bool {
        self.cached
    }

    #[inline(always)]
    fn cache(&self) -> Option<&'static ThreadCache> {
        self.cached.then_some(self.cache)
    }

    /// Whether `category` is enabled (cached per thread per generation).
    #[inline(always)]
    pub fn category_enabled(&mut self, category: &'static str) -> bool {
        category_enabled_in(self.context, self.cache(), category)
    }

    /// The ref to write for `category` if it is enabled, `None` if it is not: the enabled
    /// check and the string registration in one cache lookup.
    #[inline(always)]
    pub fn category_ref(&mut self, category: &'static str) -> Option<StringRef<'static>> {
        const ON: u8 = FLAG_CATEGORY_CHECKED | FLAG_CATEGORY_ENABLED;
        const ON_INDEXED: u8 = ON | FLAG_INDEX_ATTEMPTED | FLAG_INDEX_OK;
        if self.cached {
            if let Lookup::Found { entry, .. } = self.cache.lookup(category) {
                if entry.flags & ON_INDEXED == ON_INDEXED {
                    return Some(StringRef::Index(entry.index));
                }
                if entry.flags & ON == FLAG_CATEGORY_CHECKED {
                    return None;
                }
            }
        }
        self.category_ref_slow(category)
    }

    /// [`Self::category_ref`] when the answer or the index is not cached yet (or the cache
    /// is not in use).
    #[cold]
    #[inline(never)]
    fn category_ref_slow(&mut self, category: &'static str) -> Option<StringRef<'static>> {
        let found = if self.cached {
            self.cache.lookup(category)
        } else {
            Lookup::Full
        };
        let (slot, entry) = match found {
            Lookup::Found { slot, entry } => (slot, Some(entry)),
            Lookup::Vacant { slot } => (slot, None),
            Lookup::Full => {
                return self
                    .context
                    .is_category_enabled(category)
                    .then_some(inline_ref(category))
            }
        };
        let index = entry.map_or(0, |e| e.index);
        let mut flags = entry.map_or(0, |e| e.flags);
        if flags & FLAG_CATEGORY_CHECKED == 0 {
            flags = check_category(self.context, self.cache, category, slot, entry);
        }
        if flags & FLAG_CATEGORY_ENABLED == 0 {
            return None;
        }
        Some(if flags & FLAG_INDEX_ATTEMPTED == 0 {
            self.register_string(category, slot, flags)
        } else if flags & FLAG_INDEX_OK != 0 {
            StringRef::Index(index)
        } else {
            StringRef::Inline(category)
        })
    }

    // --- refs ---

    /// The ref to write for `s`: an index (registering the string on first use in this
    /// generation), or inline.
    #[inline(always)]
    pub fn string_ref<'a>(&mut self, s: impl Into<TraceStr<'a>>) -> StringRef<'a> {
        match s.into() {
            TraceStr::Static(s) => self.static_string_ref(s),
            TraceStr::Inline(s) => inline_ref(s),
        }
    }

    #[inline(always)]
    fn static_string_ref(&mut self, s: &'static str) -> StringRef<'static> {
        const INDEXED: u8 = FLAG_INDEX_ATTEMPTED | FLAG_INDEX_OK;
        if self.cached {
            if let Lookup::Found { entry, .. } = self.cache.lookup(s) {
                if entry.flags & INDEXED == INDEXED {
                    return StringRef::Index(entry.index);
                }
            }
        }
        self.static_string_ref_slow(s)
    }

    /// [`Self::static_string_ref`] when `s` is not registered (or the cache is not in use).
    #[cold]
    #[inline(never)]
    fn static_string_ref_slow(&mut self, s: &'static str) -> StringRef<'static> {
        if !self.cached {
            return inline_ref(s);
        }
        match self.cache.lookup(s) {
            Lookup::Found { entry, slot } => {
                if entry.flags & FLAG_INDEX_ATTEMPTED == 0 {
                    self.register_string(s, slot, entry.flags)
                } else if entry.flags & FLAG_INDEX_OK != 0 {
                    StringRef::Index(entry.index)
                } else {
                    StringRef::Inline(s)
                }
            }
            Lookup::Vacant { slot } => self.register_string(s, slot, 0),
            Lookup::Full => inline_ref(s),
        }
    }

    /// `RegisterString`: allocate an index and write the String record (durable); on any
    /// failure the string stays inline for the rest of the generation. `flags` are the
    /// entry's current flags (category answers are kept).
    #[cold]
    #[inline(never)]
    fn register_string(&mut self, s: &'static str, slot: usize, flags: u8) -> StringRef<'static> {
        let mut flags = flags | FLAG_INDEX_ATTEMPTED;
        let mut index = 0;
        if let Some(i) = self.context.alloc_string_index() {
            // If the record cannot be written the index is lost, as in Fuchsia.
            if self
                .write_durable(&StringRecord { index: i, value: s })
                .is_ok()
            {
                flags |= FLAG_INDEX_OK;
                index = i;
            }
        }
        self.cache.store(slot, s, index, flags);
        if flags & FLAG_INDEX_OK != 0 {
            StringRef::Index(index)
        } else {
            StringRef::Inline(s)
        }
    }

    /// The calling thread's ref: its index (registering the thread on first use in this
    /// generation), or inline (pid, tid).
    #[inline(always)]
    pub fn thread_ref(&mut self) -> ThreadRef {
        if !self.cached {
            return self.cache.inline_thread_ref();
        }
        match self.cache.thread_slot() {
            ThreadSlot::Index(index) => ThreadRef::Index(index),
            ThreadSlot::Inline => self.cache.inline_thread_ref(),
            ThreadSlot::Unknown => self.register_thread(),
        }
    }

    /// `trace_context_register_current_thread`: the process name record (once per process
    /// per generation), the thread name record, then an index and the Thread record.
    #[cold]
    #[inline(never)]
    fn register_thread(&mut self) -> ThreadRef {
        let pid = cache::process_id();
        let tid = self.cache.thread_id();
        if cache::claim_process_record(self.generation()) {
            // The instruction the process's timestamps were read with (issue 11: the opt-in
            // `rdtsc` clock is recorded in the trace): `rdtscp`, `rdtsc` or `clock_gettime`.
            let clock = [Arg {
                name: self.static_string_ref(CLOCK_ARG),
                value: ArgValue::Str(self.static_string_ref(crate::clock::TICKS_INSTRUCTION)),
            }];
            let _ = self.write_durable(&KernelObject {
                koid: pid,
                object_type: ObjectType::PROCESS,
                name: inline_ref(cache::process_name()),
                args: &clock,
            });
        }
        let mut buf = [0u8; 16];
        let name = cache::thread_name(&mut buf);
        let process = self.static_string_ref("process");
        let args = [Arg {
            name: process,
            value: ArgValue::Koid(pid),
        }];
        let _ = self.write_durable(&KernelObject {
            koid: tid,
            object_type: ObjectType::THREAD,
            name: inline_ref(name),
            args: &args,
        });
        let slot = match self.context.alloc_thread_index() {
            Some(index)
                if self
                    .write_durable(&ThreadRecord { index, pid, tid })
                    .is_ok() =>
            {
                ThreadSlot::Index(index)
            }
            _ => ThreadSlot::Inline,
        };
        self.cache.set_thread_slot(slot);
        match slot {
            ThreadSlot::Index(index) => ThreadRef::Index(index),
            _ => ThreadRef::Inline { pid, tid },
        }
    }

    // --- any record ---

    /// Write any rolling record: size it, reserve once, encode in place, commit the header
    /// last. Returns its size in words.
    #[inline(always)]
    pub fn write<R: Encode + ?Sized>(&mut self, record: &R) -> Result<usize, RecordError> {
        let words = self.size(record)?;
        match self.writer.reserve(words) {
            Some(slot) => encode_and_commit(slot, record, words),
            None => Err(RecordError::Dropped),
        }
    }

    /// Write any record into the durable buffer (the records later records depend on:
    /// initialization, strings, threads, process and thread names). In oneshot mode this is
    /// the rolling buffer. When the durable buffer is full, tracing stops.
    pub fn write_durable<R: Encode + ?Sized>(&mut self, record: &R) -> Result<usize, RecordError> {
        let words = self.size(record)?;
        match self.writer.reserve_durable(words) {
            Some(slot) => encode_and_commit(slot, record, words),
            None => Err(RecordError::Dropped),
        }
    }

    #[inline(always)]
    fn size<R: Encode + ?Sized>(&mut self, record: &R) -> Result<usize, RecordError> {
        match record.words() {
            Ok(words) => Ok(words),
            Err(error) => {
                self.count_dropped();
                Err(RecordError::Encode(error))
            }
        }
    }

    /// Count a record that cannot be written (invalid, or one the `tracing` layer has no
    /// room to keep the span of) as dropped: an empty reservation, released without commit,
    /// is the engine's way to count one drop against this thread (if even that reservation
    /// fails, the engine counts that instead). Nothing is written.
    #[cold]
    #[inline(never)]
    pub(crate) fn count_dropped(&mut self) {
        drop(self.writer.reserve(1));
    }

    // --- events ---

    /// Event of any kind at `ticks` (for an instant with a scope, see [`Self::instant`]).
    #[inline(always)]
    pub fn event<'a>(
        &mut self,
        ticks: u64,
        category: &'static str,
        name: impl Into<TraceStr<'a>>,
        kind: EventKind,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        let category = self.static_string_ref(category);
        self.event_with_category(ticks, category, name.into(), kind, args)
    }

    /// [`Self::event`] with the category's ref already resolved (by [`Self::category_ref`]).
    #[inline(always)]
    pub fn event_with_category(
        &mut self,
        ticks: u64,
        category: StringRef<'_>,
        name: TraceStr<'_>,
        kind: EventKind,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        let thread = self.thread_ref();
        let name = self.string_ref(name);
        self.write_event(&Event {
            ticks,
            thread,
            category,
            name,
            args,
            kind,
        })
        .map(drop)
    }

    /// Write an event record (as [`Self::write`]); one whose inline texts together exceed a
    /// record is written with them cut to fit ([`fit_args`]), not dropped.
    #[inline(always)]
    pub(crate) fn write_event(&mut self, event: &Event<'_>) -> Result<usize, RecordError> {
        let words = match event.words() {
            Ok(words) => words,
            Err(EncodeError::RecordTooLarge { .. } | EncodeError::ArgumentTooLarge { .. }) => {
                return self.write_event_cut(event);
            }
            Err(error) => {
                self.count_dropped();
                return Err(RecordError::Encode(error));
            }
        };
        match self.writer.reserve(words) {
            Some(slot) => encode_and_commit(slot, event, words),
            None => Err(RecordError::Dropped),
        }
    }

    /// [`Self::write_event`] of an event too large for one record: its texts cut to fit
    /// ([`fit_event`]); dropped (and counted) only if even that fails.
    #[cold]
    #[inline(never)]
    fn write_event_cut(&mut self, event: &Event<'_>) -> Result<usize, RecordError> {
        let mut cut = [Arg::new(StringRef::Empty, ArgValue::Null); MAX_ARGS];
        match fit_event(event, &mut cut) {
            Some(fitted) => self.write(&fitted),
            None => self.write(event),
        }
    }

    /// [`Self::event_with_category`] for a thread-scoped event of a `'static` name, which also
    /// remembers the three indices it wrote (category, name, thread) in the thread's event
    /// memo, so that the next event of the pair takes [`Context::event_memoised`].
    pub(crate) fn event_memoising(
        &mut self,
        ticks: u64,
        (category, category_ref): (&'static str, StringRef<'static>),
        name: &'static str,
        kind: EventKind,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        let (thread, name_ref) = self.memoise((category, category_ref), name);
        self.write_event(&Event {
            ticks,
            thread,
            category: category_ref,
            name: name_ref,
            args,
            kind,
        })
        .map(drop)
    }

    /// The thread's ref and `name`'s (interned), remembered with `category`'s in the thread's
    /// event memo when all three are indices.
    fn memoise(
        &mut self,
        (category, category_ref): (&'static str, StringRef<'static>),
        name: &'static str,
    ) -> (ThreadRef, StringRef<'static>) {
        let thread = self.thread_ref();
        let name_ref = self.static_string_ref(name);
        if let (true, StringRef::Index(c), StringRef::Index(n), ThreadRef::Index(t)) =
            (self.cached, category_ref, name_ref, thread)
        {
            self.cache
                .remember(self.generation(), (category, c), (name, n), t);
        }
        (thread, name_ref)
    }

    /// Intern `category` and `site` and remember the pair in the thread's event memo, for a
    /// front end whose records of a call site are not named by the site's `'static` name
    /// (a `tracing` event is named by its message): its next records there take
    /// [`installed_instant`].
    #[cfg(feature = "tracing")]
    pub(crate) fn memoise_site(&mut self, category: &'static str, site: &'static str) {
        let category_ref = self.static_string_ref(category);
        self.memoise((category, category_ref), site);
    }

    /// Instant event at `ticks`.
    #[inline(always)]
    pub fn instant<'a>(
        &mut self,
        ticks: u64,
        category: &'static str,
        name: impl Into<TraceStr<'a>>,
        scope: Scope,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        let category = self.static_string_ref(category);
        self.instant_with_category(ticks, category, name.into(), scope, args)
    }

    /// [`Self::instant`] with the category's ref already resolved (by
    /// [`Self::category_ref`]).
    #[inline(always)]
    pub fn instant_with_category(
        &mut self,
        ticks: u64,
        category: StringRef<'_>,
        name: TraceStr<'_>,
        scope: Scope,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        match scope.arg_value() {
            None => self.event_with_category(ticks, category, name, EventKind::Instant, args),
            Some(value) => self.scoped_instant(ticks, category, name, value, args),
        }
    }

    #[inline(never)]
    fn scoped_instant(
        &mut self,
        ticks: u64,
        category: StringRef<'_>,
        name: TraceStr<'_>,
        value: &'static str,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        if args.len() >= MAX_ARGS {
            self.count_dropped();
            return Err(RecordError::Encode(EncodeError::TooManyArgs {
                count: args.len() + 1,
            }));
        }
        let key = self.static_string_ref(Scope::ARG_NAME);
        let value = self.static_string_ref(value);
        let mut all = [Arg {
            name: StringRef::Empty,
            value: ArgValue::Null,
        }; MAX_ARGS];
        all[..args.len()].copy_from_slice(args);
        all[args.len()] = Arg {
            name: key,
            value: ArgValue::Str(value),
        };
        let args = &all[..=args.len()];
        self.event_with_category(ticks, category, name, EventKind::Instant, args)
    }

    event_writers! {
        /// Counter event: the arguments are the sampled values of counter `id`.
        counter(id: u64) => EventKind::Counter { id };
        /// Duration begin event.
        duration_begin() => EventKind::DurationBegin;
        /// Duration end event.
        duration_end() => EventKind::DurationEnd;
        /// Async begin event of operation `id`.
        async_begin(id: u64) => EventKind::AsyncBegin { id };
        /// Async instant event of operation `id`.
        async_instant(id: u64) => EventKind::AsyncInstant { id };
        /// Async end event of operation `id`.
        async_end(id: u64) => EventKind::AsyncEnd { id };
        /// Flow begin event of flow `id` (attached to the enclosing duration).
        flow_begin(id: u64) => EventKind::FlowBegin { id };
        /// Flow step event of flow `id`.
        flow_step(id: u64) => EventKind::FlowStep { id };
        /// Flow end event of flow `id`.
        flow_end(id: u64) => EventKind::FlowEnd { id };
    }

    /// Duration complete event: one record for `[start_ticks, end_ticks]`.
    #[inline]
    pub fn duration_complete<'a>(
        &mut self,
        start_ticks: u64,
        end_ticks: u64,
        category: &'static str,
        name: impl Into<TraceStr<'a>>,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        let kind = EventKind::DurationComplete { end_ticks };
        self.event(start_ticks, category, name, kind, args)
    }

    // --- other records ---

    /// Log record: `message` (at most 32000 bytes) on the calling thread.
    pub fn log(&mut self, ticks: u64, message: &str) -> Result<(), RecordError> {
        let thread = self.thread_ref();
        self.write(&Log {
            ticks,
            thread,
            message,
        })
        .map(drop)
    }

    /// Blob record: `payload` (at most 32767 bytes, and the record at most 32760 bytes).
    pub fn blob<'a>(
        &mut self,
        name: impl Into<TraceStr<'a>>,
        blob_type: BlobType,
        payload: &[u8],
    ) -> Result<(), RecordError> {
        let name = self.string_ref(name);
        self.write(&Blob {
            name,
            blob_type,
            payload,
        })
        .map(drop)
    }

    /// Kernel object record naming `koid` (on Linux: a pid with [`ObjectType::PROCESS`], a
    /// tid with [`ObjectType::THREAD`] and a `"process"` koid argument).
    pub fn kernel_object<'a>(
        &mut self,
        koid: u64,
        object_type: ObjectType,
        name: impl Into<TraceStr<'a>>,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        let name = self.string_ref(name);
        self.write(&KernelObject {
            koid,
            object_type,
            name,
            args,
        })
        .map(drop)
    }

    /// Userspace object record labelling `pointer` in the calling process.
    pub fn userspace_object<'a>(
        &mut self,
        pointer: u64,
        name: impl Into<TraceStr<'a>>,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        let process = match self.thread_ref() {
            ThreadRef::Index(index) => ProcessRef::Index(index),
            ThreadRef::Inline { pid, .. } => ProcessRef::Inline(pid),
        };
        let name = self.string_ref(name);
        self.write(&UserspaceObject {
            pointer,
            process,
            name,
            args,
        })
        .map(drop)
    }

    /// Context switch record (scheduling type 1) on `cpu`: `outgoing_tid` left in
    /// `outgoing_state`, `incoming_tid` runs. Conventional arguments: `incoming_weight`,
    /// `outgoing_weight` (i32).
    pub fn context_switch(
        &mut self,
        ticks: u64,
        cpu: u16,
        outgoing_state: ThreadState,
        outgoing_tid: u64,
        incoming_tid: u64,
        args: &[Arg<'_>],
    ) -> Result<(), RecordError> {
        self.write(&SchedContextSwitch {
            ticks,
            cpu,
            outgoing_state,
            outgoing_tid,
            incoming_tid,
            args,
        })
        .map(drop)
    }

    /// Initialization record (durable): the ticks per second of [`clock::ticks`].
    pub fn initialization(&mut self) -> Result<(), RecordError> {
        let ticks_per_second = clock::info().ticks_per_second;
        self.write_durable(&Initialization { ticks_per_second })
            .map(drop)
    }
}

/// The header word of an event without arguments whose thread, category and name are the
/// indices of `memo` (size field left 0: [`Slot::commit`] sets it). Equal to what the
/// [`Event`] encoder writes (tested).
#[inline(always)]
fn indexed_event_header(event_type: EventType, memo: cache::Memo) -> u64 {
    memo.refs_header | EventRecord::EVENT_TYPE.make(event_type as u64)
}

/// Encode `record` into `slot` and commit it (the slot is dropped, and counted, on error).
#[inline(always)]
fn encode_and_commit<R: Encode + ?Sized>(
    mut slot: Slot<'_>,
    record: &R,
    words: usize,
) -> Result<usize, RecordError> {
    let (header, written) = record.write_body(slot.payload())?;
    debug_assert_eq!(written, words, "words() and write_body() disagree");
    slot.commit(header);
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::header::with_record_size_words;

    #[test]
    fn indexed_event_header_matches_the_encoder() {
        let memo = cache::Memo::for_test(0x0fed, 0x7abc, 0xfe);
        for kind in [
            EventKind::Instant,
            EventKind::Counter { id: 9 },
            EventKind::DurationBegin,
            EventKind::DurationEnd,
            EventKind::AsyncEnd { id: u64::MAX },
            EventKind::FlowStep { id: 3 },
        ] {
            let event = Event {
                ticks: 77,
                thread: ThreadRef::Index(0xfe),
                category: StringRef::Index(0x0fed),
                name: StringRef::Index(0x7abc),
                args: &[],
                kind,
            };
            let mut words = [0u64; 4];
            let n = event.write(&mut words).unwrap();
            assert_eq!(n, 2 + usize::from(kind.data_word().is_some()), "{kind:?}");
            let header =
                with_record_size_words(indexed_event_header(kind.event_type(), memo), n as u64);
            assert_eq!(header, words[0], "{kind:?}");
            assert_eq!(words[1], 77);
            assert_eq!(
                kind.data_word().map(|d| d == words[2]),
                kind.data_word().map(|_| true)
            );
        }
    }
}

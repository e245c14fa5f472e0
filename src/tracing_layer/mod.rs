//! `tracing` spans and events written as FXT records: [`TracingLayer`] (feature `tracing`).

mod spans;

#[cfg(any(test, feature = "test-support"))]
pub(crate) use spans::allow_levels;

use std::cell::{Cell, RefCell};
use std::fmt::{self, Write as _};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event as TracingEvent, Subscriber};
use tracing_subscriber::layer::{Context as LayerContext, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::clock;
use crate::engine::cache::Memo;
use crate::engine::category::{active_epoch, tracing_maybe_on};
use crate::engine::context::latest_generation;
use crate::engine::global::with_current;
use crate::engine::record::{
    self, Scope, SpanMemo, TraceStr, TraceWriter, INSTALLED_SPAN_ARGS, INSTALLED_SPAN_PAYLOAD,
};
use crate::engine::Context;
use crate::format::{Arg, ArgValue, Event, EventKind, ScalarArg, StringRef, ThreadRef, MAX_ARGS};
use crate::instrument;
use spans::{
    text_value, Key, LayerNumber, Missing, NewSpan, Owned, SlotGuard, SlotRef, SpanState, SpanView,
    SPAN_ID,
};

/// Longest text argument (string field, `Debug` text, message) written, in bytes.
pub(crate) const MAX_TEXT: usize = 4096;

/// Name of an event's level argument. A `static`, so that every use is the one address the
/// thread's string cache knows it by (string literals are not guaranteed to be merged).
static LEVEL: &str = "level";

/// Name and values of the argument of a span whose fields are not all kept: created before
/// the trace (its fields were recorded then, and are not in the trace), or while the table
/// of spans was full.
static FIELDS: &str = "fields";
static RECORDED_BEFORE_THE_TRACE: &str = "recorded before the trace";
static NOT_KEPT_TABLE_FULL: &str = "not kept: the table of spans was full";

/// Name of the argument counting fields that did not fit in one record.
const FIELDS_DROPPED: &str = "fields_dropped";

/// Most entered spans remembered per thread; beyond, the oldest is forgotten (and its
/// duration not written) — only reached when spans are entered and never exited.
const MAX_ENTERED: usize = 1024;

/// A `tracing-subscriber` layer writing `tracing` spans and events as FXT records into the
/// current fxtrace trace (cargo feature `tracing`, off by default).
///
/// ```no_run
/// use tracing_subscriber::prelude::*;
///
/// tracing_subscriber::registry().with(fxtrace::TracingLayer::new()).init();
/// ```
///
/// Like every fxtrace front end, the layer writes into the process's current trace (a
/// provider session under `fxtrace record` or the trace service, or a [`crate::standalone`]
/// session); with no trace running each callback costs one relaxed load and a branch (a
/// span's close and `record`, once a trace has recorded spans in the process, also look the
/// span up in the layer's table: one cache line). The layer never filters: other layers see every span and event
/// whatever fxtrace records.
///
/// # Mapping
///
/// | `tracing` | FXT |
/// |---|---|
/// | target | category (enabled by the trace's category filter) |
/// | span, each enter → exit on a thread | one duration-complete record on that thread, named after the span, with the span's fields and `span_id` (the span's id: the one its async pair carries, so that the durations of one span, the polls of one connection, can be grouped) |
/// | span entered on a thread other than the one that created it (a future that moved, a task spawned elsewhere) | also an async-begin record (creation time, creating thread, the fields) and, when the span closes, an async-end record; correlation id = the span id |
/// | span created before the trace started, entered during it | its durations as above, named and categorised from its call site; fields recorded (`span.record`) since the trace started are kept, those it was created with are gone: an argument `fields` = `"recorded before the trace"` says so. If it crosses threads its async begin is at its first entry in the trace, on that thread |
/// | event | instant event (thread scope) named by its `message` (the metadata name, e.g. `event src/main.rs:12`, when it has none), with the other fields and `level` as arguments |
/// | field `i64` / `u64` / `f64` / `bool` / `&str` | typed argument `i64` / `u64` / `f64` / `bool` / string |
/// | field recorded by `Debug` (`?x`, `%x`, `i128`, errors) | string argument with the `Debug` text; only then is anything formatted |
///
/// Events become instants rather than FXT log records because a log record carries neither
/// category nor arguments: the target, the level and the fields would be lost, and the
/// category filter could not select them.
///
/// # Costs and limits
///
/// - A span created while a trace runs with its category enabled keeps its fields in the
///   layer's table of spans (not in the registry's extensions): up to four scalar fields
///   inline, no allocation; text fields or more fields take one. A span created with no
///   trace running costs nothing until it is entered during a trace.
/// - A span's enter does not look the span up when it is one of the last eight spans its
///   thread recorded (the usual case); others are looked up (a span entered on another
///   thread, for its async begin; a span from before the trace, to be taken in). Its exit
///   checks the slot its enter had and reads the span's state there without a lock; the
///   record is written on the engine's one-announcement path (up to three scalar fields)
///   once its thread has written the span's name in the trace.
/// - Events with string or `Debug` fields format into a per-thread scratch buffer (no
///   allocation once warm; an event emitted while another's field is formatted takes a
///   string of its own).
/// - Texts are cut at 4 096 bytes, and shorter still (the longest first) when an
///   event's or span's texts together exceed one record (32 760 bytes): the record is
///   written, never dropped for its size; an event or span has at most 15 arguments
///   (`level` or `span_id` included): further fields are replaced by one `fields_dropped`
///   count.
/// - Span ids are reused by the registry after a span closes, so an async id (and
///   `span_id`) is unique only among live spans (async begin/end pairs with the same id do
///   not overlap).
/// - The table keeps up to 522 240 live spans; a span created while it is full is taken in
///   at its first enter if room was made meanwhile (its creation fields then missing, an
///   argument `fields` says so), else its durations are not written, each counted as a
///   dropped record.
/// - A layer swapped out (`tracing_subscriber::reload`) writes the async ends of its spans
///   that crossed threads; the durations of its spans entered at the swap are lost (their
///   exits reach the new layer) and counted as dropped when their thread next exits a span
///   it has no entry of.
/// - Not async-signal-safe: the layer (like `tracing`'s registry) may allocate. A signal
///   handler that uses `tracing` on a thread interrupted inside the layer never deadlocks:
///   what it cannot reach is left alone and counted as dropped.
#[derive(Debug)]
pub struct TracingLayer {
    /// This layer's number in the table of spans (`number`'s): two subscribers number their
    /// spans independently.
    layer: u32,
    /// The number, shared with a copy of this layer that the same subscriber already held
    /// (a configuration mistake that must not panic): the copies then share each span's
    /// entry (one async pair per span), and a copy adds an entry only for a span the other
    /// did not see (its filter may differ). The last copy dropped frees the number's spans.
    number: Arc<LayerNumber>,
    /// The subscriber already held the layer (see `number`).
    shared: bool,
}

impl TracingLayer {
    /// The layer.
    pub fn new() -> Self {
        let number = LayerNumber::new();
        Self {
            layer: number.get(),
            number,
            shared: false,
        }
    }

    #[inline(always)]
    fn key(&self, id: &Id) -> Key {
        Key {
            layer: self.layer,
            span: id.into_u64(),
        }
    }
}

impl Default for TracingLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for TracingLayer {
    /// A layer of its own (its own number in the table of spans).
    fn clone(&self) -> Self {
        Self::new()
    }
}

// === per-thread state ===

thread_local! {
    /// This thread's spans: those it entered, those it created.
    static SPANS: RefCell<ThreadSpans> = const { RefCell::new(ThreadSpans::NEW) };
    /// Scratch text of the event being written (borrowed while in use: a nested event,
    /// formatted inside a field's `Debug`, gets a string of its own).
    static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
    /// This thread's kernel id, 0 until asked.
    static TID: Cell<u64> = const { Cell::new(0) };
}

/// A span entered on this thread and not yet exited.
#[derive(Debug, Clone, Copy)]
struct Entered {
    key: Key,
    start: u64,
    /// Its slot in the table when the enter had it (else the span was not kept then).
    slot: Option<SlotRef<'static>>,
    /// The enter counted the duration as dropped (the table was full): the exit writes
    /// nothing, even if the span was taken in meanwhile.
    counted: bool,
}

/// A span this thread created or exited lately, and its slot in the table: its next enter
/// (or its close) finds the slot without a lookup, after checking that the slot still holds
/// it ([`SlotRef::holds`]; ids are reused once a span closes).
#[derive(Debug, Clone, Copy)]
struct Known {
    key: Key,
    slot: SlotRef<'static>,
}

/// How many of the spans a thread created last it remembers ([`ThreadSpans::created`]).
const CREATED_HINTS: usize = 8;

/// A thread's spans. Borrowed for a few instructions by each callback, which runs none of
/// the program's code meanwhile; a callback that finds it borrowed (a signal handler's, on
/// a thread interrupted inside the layer) leaves it alone, counting what it loses.
struct ThreadSpans {
    /// Entered and not yet exited, innermost last.
    entered: Vec<Entered>,
    /// The epoch of [`active_epoch`] when `entered` was last pushed to: once every context
    /// has stopped since (the only way an exit is skipped, leaving its entry here), the next
    /// enter drops them.
    epoch: u32,
    /// The last spans this thread created that a trace records: a hint that an enter of one
    /// of them is on its creator's thread (ids are reused once a span closes, so the exit
    /// checks again), and needs no lookup for an async begin.
    created: [Option<Known>; CREATED_HINTS],
    next_created: usize,
    /// The span this thread exited last: its close usually follows.
    exited: Option<Known>,
}

impl ThreadSpans {
    const NEW: ThreadSpans = ThreadSpans {
        entered: Vec::new(),
        epoch: 0,
        created: [None; CREATED_HINTS],
        next_created: 0,
        exited: None,
    };

    #[inline]
    fn note_created(&mut self, known: Known) {
        self.created[self.next_created] = Some(known);
        self.next_created = (self.next_created + 1) % CREATED_HINTS;
    }

    /// The slot of span `key` if this thread created it lately.
    #[inline]
    fn created_here(&self, key: Key) -> Option<SlotRef<'static>> {
        // Most often the span the thread created last.
        let last = (self.next_created + CREATED_HINTS - 1) % CREATED_HINTS;
        match self.created[last] {
            Some(known) if known.key == key => Some(known.slot),
            _ => self
                .created
                .iter()
                .flatten()
                .find(|k| k.key == key)
                .map(|k| k.slot),
        }
    }

    /// The slot of span `key` if this thread exited it last or created it lately (not
    /// checked: see [`Known`]).
    #[inline]
    fn slot_hint(&self, key: Key) -> Option<SlotRef<'static>> {
        match self.exited {
            Some(known) if known.key == key => Some(known.slot),
            _ => self.created_here(key),
        }
    }

    /// Push `entered`, first dropping what was entered before the quiet epoch became `epoch`
    /// ([`active_epoch`]).
    #[inline]
    fn enter(&mut self, entered: Entered, epoch: u32) {
        if self.epoch != epoch {
            self.entered.clear();
            self.epoch = epoch;
        }
        if self.entered.len() == MAX_ENTERED {
            self.forget_oldest();
        }
        self.entered.push(entered);
    }

    #[cold]
    fn forget_oldest(&mut self) {
        self.entered.remove(0);
    }

    /// Drop the entries of spans the table no longer keeps although they were kept at their
    /// enter (their layer was swapped out by `reload`: their exits go to another layer,
    /// which does not know them); how many of them were entered in quiet epoch `epoch`
    /// ([`active_epoch`]: older ones were entered in a trace that has stopped since).
    #[cold]
    #[inline(never)]
    fn forget_orphans(&mut self, epoch: Option<u32>) -> usize {
        let before = self.entered.len();
        self.entered.retain(|e| match e.slot {
            Some(slot) => slot.holds(e.key) || spans::find(e.key).is_some(),
            None => true,
        });
        if epoch == Some(self.epoch) {
            before - self.entered.len()
        } else {
            0
        }
    }

    /// Pop span `key`'s entry (the innermost one of it), remembering its slot for its
    /// close.
    #[inline]
    fn exit(&mut self, key: Key) -> Option<Entered> {
        let this = |e: &Entered| e.key == key;
        // Most often the innermost.
        let entered = if self.entered.last().is_some_and(this) {
            self.entered.pop()?
        } else {
            let at = self.entered.iter().rposition(this)?;
            self.entered.remove(at)
        };
        if let Some(slot) = entered.slot {
            self.exited = Some(Known { key, slot });
        }
        Some(entered)
    }
}

/// `f` of the thread's spans, unless they are borrowed (a signal handler that interrupted a
/// callback) or gone (the thread is exiting).
#[inline(always)]
fn with_spans<R>(f: impl FnOnce(&mut ThreadSpans) -> R) -> Option<R> {
    SPANS
        .try_with(|spans| spans.try_borrow_mut().ok().map(|mut spans| f(&mut spans)))
        .ok()
        .flatten()
}

/// The calling thread's kernel id.
#[inline(always)]
fn current_tid() -> u64 {
    match TID.with(Cell::get) {
        0 => first_tid(),
        tid => tid,
    }
}

/// [`current_tid`] the first time on a thread.
#[cold]
#[inline(never)]
fn first_tid() -> u64 {
    // SAFETY: `gettid` has no preconditions.
    let tid = unsafe { libc::gettid() } as u64;
    TID.with(|t| t.set(tid));
    tid
}

// === values ===

/// Cut `s` to [`MAX_TEXT`] bytes at a character boundary.
fn cut(s: &str) -> &str {
    crate::format::truncate_str(s, MAX_TEXT)
}

/// A `fmt::Write` into a `String` that stops at [`MAX_TEXT`] bytes past `start`.
struct CappedString<'s> {
    text: &'s mut String,
    start: usize,
}

impl fmt::Write for CappedString<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = MAX_TEXT - (self.text.len() - self.start);
        let piece = if s.len() <= room {
            s
        } else {
            let mut end = room;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            &s[..end]
        };
        self.text.push_str(piece);
        if piece.len() < s.len() {
            return Err(fmt::Error);
        }
        Ok(())
    }
}

/// Append `value`'s `Debug` text to `text` (cut at [`MAX_TEXT`]); its byte range.
fn push_debug(text: &mut String, value: &dyn fmt::Debug) -> Range<usize> {
    let start = text.len();
    let mut writer = CappedString { text, start };
    // An error only means the text was cut (or the `Debug` impl failed): keep what came.
    let _ = write!(writer, "{value:?}");
    start..text.len()
}

/// Span fields as values to keep, each handed to `set` (name, value).
struct SpanVisitor<F: FnMut(&'static str, Owned)> {
    set: F,
}

impl<F: FnMut(&'static str, Owned)> SpanVisitor<F> {
    fn set(&mut self, name: &'static str, value: Owned) {
        (self.set)(name, value);
    }
}

impl<F: FnMut(&'static str, Owned)> Visit for SpanVisitor<F> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field.name(), Owned::Scalar(ArgValue::F64(value)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field.name(), Owned::Scalar(ArgValue::I64(value)));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field.name(), Owned::Scalar(ArgValue::U64(value)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field.name(), Owned::Scalar(ArgValue::Bool(value)));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let value = match value {
            // No text to keep: one word, like a number (the fields stay inline).
            "" => Owned::Scalar(ArgValue::Str(StringRef::Empty)),
            text => Owned::Text(cut(text).to_owned()),
        };
        self.set(field.name(), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = String::new();
        push_debug(&mut text, value);
        self.set(field.name(), Owned::Text(text));
    }
}

/// A new span's fields, visited straight into its state in the table (its slot not yet
/// published).
struct FieldsVisitor<'s>(&'s SpanState);

impl Visit for FieldsVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.push_scalar(field.name(), ArgValue::F64(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.push_scalar(field.name(), ArgValue::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.push_scalar(field.name(), ArgValue::U64(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.push_scalar(field.name(), ArgValue::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let mut set = |name, value| self.0.set(name, value);
        SpanVisitor { set: &mut set }.record_str(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut set = |name, value| self.0.set(name, value);
        SpanVisitor { set: &mut set }.record_debug(field, value);
    }
}

/// An event's argument: name, the name's string index if known (else 0), value.
type EventArg = (&'static str, u16, ArgValue<'static>);

/// Event fields: scalars as they are, texts (the message, string and `Debug` fields) written
/// into a scratch string.
struct EventVisitor<'t> {
    text: &'t mut String,
    message: Option<Range<usize>>,
    /// The fields, `len` of them, each its name, its name's string index if known (else 0)
    /// and its value (a text field's is a `Null` placeholder whose text is in
    /// `text_ranges`), then room for `level`: uninitialised past `len`, so that an event does
    /// not fill the whole array first.
    fields: [MaybeUninit<EventArg>; MAX_ARGS],
    /// Byte ranges in `text` of the text fields, by slot (those set in `text_slots`; the
    /// others uninitialised).
    text_ranges: [MaybeUninit<(u32, u32)>; MAX_ARGS],
    /// Bit `i` set: field `i` is a text.
    text_slots: u16,
    len: usize,
    /// Fields that did not fit.
    dropped: u32,
}

impl<'t> EventVisitor<'t> {
    /// Room for fields: one slot is kept for `level`.
    const FIELD_SLOTS: usize = MAX_ARGS - 1;

    fn new(text: &'t mut String) -> Self {
        EventVisitor {
            text,
            message: None,
            fields: [const { MaybeUninit::uninit() }; MAX_ARGS],
            text_ranges: [const { MaybeUninit::uninit() }; MAX_ARGS],
            text_slots: 0,
            len: 0,
            dropped: 0,
        }
    }

    fn push(&mut self, name: &'static str, value: ArgValue<'static>) -> Option<usize> {
        if self.len < Self::FIELD_SLOTS {
            self.fields[self.len].write((name, 0, value));
            self.len += 1;
            Some(self.len - 1)
        } else {
            self.dropped += 1;
            None
        }
    }

    fn push_text(&mut self, name: &'static str, range: Range<usize>) {
        if let Some(slot) = self.push(name, ArgValue::Null) {
            // The scratch holds one event's texts: the message and at most 32 fields (a
            // `tracing` field set's limit), each cut at `MAX_TEXT` bytes.
            debug_assert!(u32::try_from(range.end).is_ok());
            self.text_ranges[slot].write((range.start as u32, range.end as u32));
            self.text_slots |= 1 << slot;
        }
    }

    /// The fields as pushed (text fields as placeholders: see [`Self::value`]).
    fn fields(&self) -> &[EventArg] {
        // SAFETY: `push` initialised `fields[..len]` (it writes a slot before counting it);
        // `MaybeUninit<T>` has the layout of `T`.
        unsafe { std::slice::from_raw_parts(self.fields.as_ptr().cast(), self.len) }
    }

    /// Field `i`'s value (`i < len`), texts from the scratch text.
    fn value(&self, i: usize) -> ArgValue<'_> {
        if self.text_slots & (1 << i) != 0 {
            // SAFETY: `push_text` initialised the range of every slot it set in `text_slots`.
            let (start, end) = unsafe { self.text_ranges[i].assume_init() };
            text_value(&self.text[start as usize..end as usize])
        } else {
            self.fields()[i].2
        }
    }

    /// Give the fields the string indices of their names, `packed` 16 bits each (first
    /// lowest; [`record::arg_name_indices`]).
    fn set_name_indices(&mut self, packed: u64) {
        for (i, field) in self.fields[..self.len].iter_mut().enumerate() {
            // SAFETY: `push` initialised `fields[..len]`.
            unsafe { field.assume_init_mut().1 = (packed >> (16 * i)) as u16 };
        }
    }

    /// The key of the fields' names in the call site's memo
    /// ([`record::remember_arg_indices`]) when they are all of the call site's fields but its
    /// message, in its order, few enough for a memo: the metadata's address. 0 otherwise.
    fn args_key(&self, metadata: &'static tracing::Metadata<'static>) -> usize {
        let all = self.dropped == 0
            && self.len <= record::INSTALLED_SPAN_ARGS
            && self.len + usize::from(self.message.is_some()) == metadata.fields().len();
        if all {
            spans::args_key(metadata)
        } else {
            0
        }
    }

    /// `f` of the visitor whose fields are followed by `last` (in the slot kept for `level`).
    fn with_last<R>(&mut self, last: EventArg, f: impl FnOnce(&Self) -> R) -> R {
        self.fields[self.len].write(last);
        self.len += 1;
        let answer = f(self);
        self.len -= 1;
        answer
    }

    /// A text field at `range` of the scratch: the event's message (its first `message`
    /// field, recorded by `Debug` as the macros do or as a `&str`), or an argument.
    fn text_field(&mut self, field: &Field, range: Range<usize>) {
        if field.name() == "message" && self.message.is_none() {
            self.message = Some(range);
        } else {
            self.push_text(field.name(), range);
        }
    }

    /// The event's message, if it has a non-empty one.
    fn message(&self) -> Option<&str> {
        match &self.message {
            Some(range) if !range.is_empty() => Some(&self.text[range.clone()]),
            _ => None,
        }
    }
}

impl Visit for EventVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field.name(), ArgValue::F64(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field.name(), ArgValue::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field.name(), ArgValue::U64(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field.name(), ArgValue::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        let start = self.text.len();
        self.text.push_str(cut(value));
        let range = start..self.text.len();
        self.text_field(field, range);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let range = push_debug(self.text, value);
        self.text_field(field, range);
    }
}

// === writing ===

/// The current trace's generation if `category` is enabled in it.
fn enabled_generation(context: &Context, category: &'static str) -> Option<u32> {
    let generation = context.event_generation(category)?;
    context
        .is_category_enabled_cached(category)
        .then_some(generation)
}

/// A writer on the current context for trace `generation`.
fn with_writer_in(generation: u32, f: impl FnOnce(&mut TraceWriter<'_>)) {
    with_current(|context| {
        if let Some(mut writer) = context.trace_writer() {
            if writer.generation() == generation {
                f(&mut writer);
            }
        }
    });
}

/// Arguments of a span's record (its state read under its slot's lock): its fields, names
/// interned (with the `fields_dropped` count last when they do not all fit), then, if
/// given, `span_id`, then the note of fields not kept when some are missing.
fn span_args<'a>(
    writer: &mut TraceWriter<'_>,
    state: &'a SpanState,
    span_id: Option<u64>,
    out: &mut [Arg<'a>; MAX_ARGS],
) -> usize {
    let missing = state.missing();
    let len = state.fields_len();
    let after = usize::from(span_id.is_some()) + usize::from(missing != Missing::None);
    let room = MAX_ARGS - after;
    let fit = if len > room { room - 1 } else { len };
    for (i, slot) in out.iter_mut().enumerate().take(fit) {
        let (name, value) = state.field(i);
        *slot = Arg::new(writer.string_ref(name), value);
    }
    let mut n = fit;
    if fit < len {
        let dropped = (len - fit) as u32;
        out[n] = Arg::new(writer.string_ref(FIELDS_DROPPED), ArgValue::U32(dropped));
        n += 1;
    }
    if let Some(id) = span_id {
        out[n] = Arg::new(writer.string_ref(SPAN_ID), ArgValue::U64(id));
        n += 1;
    }
    let note = match missing {
        Missing::None => None,
        Missing::BeforeTrace => Some(RECORDED_BEFORE_THE_TRACE),
        Missing::TableFull => Some(NOT_KEPT_TABLE_FULL),
    };
    if let Some(note) = note {
        let note = writer.string_ref(note);
        out[n] = Arg::new(writer.string_ref(FIELDS), ArgValue::Str(note));
        n += 1;
    }
    n
}

const EMPTY_ARG: Arg<'static> = Arg {
    name: StringRef::Empty,
    value: ArgValue::Null,
};

// === impl Layer ===

impl<S> Layer<S> for TracingLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_layer(&mut self, subscriber: &mut S) {
        let inner: &dyn Subscriber = subscriber;
        if let Some(other) = inner.downcast_ref::<TracingLayer>() {
            self.layer = other.layer;
            self.number = Arc::clone(&other.number);
            self.shared = true;
        }
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        if !tracing_maybe_on() {
            return;
        }
        let metadata = attrs.metadata();
        let (category, name) = (metadata.target(), metadata.name());
        // The thread's memo answers for a span it already wrote in the latest trace (with the
        // indices of the argument names once a span of the call site had all its fields).
        let (generation, memo) =
            match record::memoised_latest_generation(category, name, spans::args_key(metadata)) {
                Some(known) => known,
                None => match with_current(|c| enabled_generation(c, category)).flatten() {
                    Some(generation) => (generation, SpanMemo::NONE),
                    None => return,
                },
            };
        let key = self.key(id);
        if self.shared && spans::find(key).is_some() {
            return;
        }
        let new = NewSpan {
            generation,
            metadata,
            origin: clock::ticks_unordered(),
            origin_tid: current_tid(),
            missing: Missing::None,
            memo,
        };
        // The fields are visited into the span's slot, which no other thread finds yet.
        let kept = spans::insert(key, new, |state| {
            attrs.record(&mut FieldsVisitor(state));
            state.set_all_fields(state.inline_len() == Some(metadata.fields().len()));
        });
        match kept {
            Some(slot) => {
                with_spans(|spans| spans.note_created(Known { key, slot }));
            }
            // The table is full: the span's enters take it in if room was made meanwhile,
            // else each counts its duration as dropped.
            None => table_full_at_creation(id, &ctx),
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let key = self.key(id);
        // A span the table keeps takes the values whether a trace runs or not (a later trace
        // writes them); one it does not is taken in if a trace records it.
        let kept = spans::find(key);
        if kept.is_none() && !tracing_maybe_on() {
            return;
        }
        // The values are visited with no lock held: a value's `Debug` is the program's code
        // (it may panic, or record into the same span). Then applied under the lock, which
        // runs none of the program's code.
        let mut recorded = Vec::new();
        values.record(&mut SpanVisitor {
            set: |name, value| recorded.push((name, value)),
        });
        let set_all = |state: &SpanState, recorded: Vec<(&'static str, Owned)>| {
            for (name, value) in recorded {
                state.set(name, value);
            }
            state.set_all_fields(false);
        };
        if let Some(slot) = kept {
            return record_under_lock(slot, |state| set_all(state, recorded));
        }
        // Created before the trace or while the table was full: its other fields are gone;
        // its origin is its first entry in the trace.
        let Some(new) = self.take_in(id, &ctx, 0) else {
            return;
        };
        let mut recorded = Some(recorded);
        let taken = spans::take_in(key, new, |state| {
            if let Some(recorded) = recorded.take() {
                set_all(state, recorded);
            }
        });
        match (taken, recorded) {
            // Taken in now with the values, or by another user meanwhile: they go there.
            (Some(_), None) => {}
            (Some(slot), Some(recorded)) => {
                record_under_lock(slot, |state| set_all(state, recorded));
            }
            // The table is full (or the thread is taking a span in already: a signal
            // handler's record).
            (None, _) => count_dropped_span(),
        }
    }

    fn on_enter(&self, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(epoch) = active_epoch() else {
            return;
        };
        let key = self.key(id);
        // A span this thread created needs no lookup here: its slot is known, and the exit
        // checks it for its record. Another (a span that moved here, or one from before the
        // trace) is looked up now, so that its async begin is in the trace even if the trace
        // stops before this thread exits it.
        let entered_here = with_spans(|spans| {
            let slot = spans.created_here(key)?;
            let start = clock::ticks();
            spans.enter(
                Entered {
                    key,
                    start,
                    slot: Some(slot),
                    counted: false,
                },
                epoch,
            );
            Some(())
        });
        match entered_here {
            Some(Some(())) => return,
            // The thread's spans are out of reach (a signal handler's enter, or one as the
            // thread exits): the duration of a span the trace records is lost.
            None => {
                if spans::find(key).is_some() {
                    count_dropped_span();
                }
                return;
            }
            Some(None) => {}
        }
        let (slot, counted) = self.enter_elsewhere(id, &ctx);
        let start = clock::ticks();
        let entered = Entered {
            key,
            start,
            slot,
            counted,
        };
        if with_spans(|spans| spans.enter(entered, epoch)).is_none() && slot.is_some() {
            count_dropped_span();
        }
    }

    fn on_exit(&self, id: &Id, _ctx: LayerContext<'_, S>) {
        if !tracing_maybe_on() {
            return;
        }
        let end = clock::ticks();
        let key = self.key(id);
        let Some(entered) = with_spans(|spans| spans.exit(key)).flatten() else {
            return exit_not_entered();
        };
        // The slot the enter had (checked: it may have been freed and taken by another span
        // since, if the span closed and its id was reused), else a lookup. Not kept: a
        // category the trace does not enable.
        let slot = match entered.slot {
            Some(slot) if slot.holds(key) => slot,
            // A span the full table could not take in at its enter, counted then as
            // dropped (even if a `record` took it in since).
            None if entered.counted => return,
            _ => match spans::find(key) {
                Some(slot) => slot,
                None => return,
            },
        };
        let span = (entered.start, end);
        // The usual case: a span of the running trace, on the thread it began on or with its
        // async begin written, its fields inline: its state read without the lock.
        let written = slot.state().read_then(|view| {
            let usual = view.generation == latest_generation()
                && view.origin != 0
                && (view.async_begun() || view.origin_tid == current_tid())
                && view.has_args();
            if usual {
                write_span_end(slot, view, span);
            }
            usual
        });
        if written != Some(true) {
            exit_locked(slot, span);
        }
    }

    fn on_close(&self, id: Id, _ctx: LayerContext<'_, S>) {
        if !spans::in_use() {
            return;
        }
        let key = self.key(&id);
        // Most often the span this thread exited last.
        let hint = with_spans(|spans| spans.slot_hint(key)).flatten();
        let slot = match hint {
            Some(slot) if slot.holds(key) => Some(slot),
            _ => spans::find(key),
        };
        if let Some(slot) = slot {
            spans::close(slot, end_kept_span);
        }
    }

    fn on_event(&self, event: &TracingEvent<'_>, _ctx: LayerContext<'_, S>) {
        if !tracing_maybe_on() {
            return;
        }
        let metadata = event.metadata();
        let (category, site) = (metadata.target(), metadata.name());
        // The thread's memo of the call site answers once the site wrote in the latest trace.
        let memo = record::latest_memo(category, site);
        let Some(generation) = memo
            .map(|memo| memo.generation())
            .or_else(|| with_current(|context| enabled_generation(context, category)).flatten())
        else {
            return;
        };
        let ticks = clock::ticks();
        let write = |text: &mut String| {
            text.clear();
            let mut visitor = EventVisitor::new(text);
            event.record(&mut visitor);
            let written = visitor.dropped == 0
                && memo
                    .as_ref()
                    .is_some_and(|memo| write_event_installed(memo, ticks, metadata, &mut visitor));
            if !written {
                write_event(generation, ticks, (category, site), metadata, &visitor);
            }
        };
        // A nested event (formatted inside a field's `Debug`), or one written as the thread
        // exits, writes through a string of its own.
        let scratch =
            SCRATCH.try_with(|scratch| scratch.try_borrow_mut().map(|mut text| write(&mut text)));
        if !matches!(scratch, Ok(Ok(()))) {
            write(&mut String::new());
        }
    }
}

impl TracingLayer {
    /// The enter of a span this thread did not just create: the async begin of a span that
    /// moved here; a span of an earlier trace, or one the layer never recorded (created
    /// before the trace, or while the table was full), taken into this one. Its slot, if the
    /// table keeps it, and whether its duration was counted as dropped (the table is full).
    #[inline(never)]
    fn enter_elsewhere<S>(
        &self,
        id: &Id,
        ctx: &LayerContext<'_, S>,
    ) -> (Option<SlotRef<'static>>, bool)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let key = self.key(id);
        if let Some(slot) = spans::find(key) {
            // Unless this thread holds the lock beneath (a signal handler's enter).
            if let Some(state) = slot.lock() {
                let view = state.view();
                if (view.generation == latest_generation() && view.origin != 0)
                    || take_in_again(&state, clock::ticks_unordered())
                {
                    begin_async_if_moved(&state);
                }
            }
            return (Some(slot), false);
        }
        // Not kept: created before the trace, or while the table was full.
        let Some(new) = self.take_in(id, ctx, clock::ticks_unordered()) else {
            return (None, false);
        };
        let slot = spans::take_in(key, new, |_| {});
        if slot.is_none() {
            count_dropped_span();
        }
        (slot, slot.is_none())
    }

    /// What the table keeps of span `id`, which the layer did not record, if the running
    /// trace enables its category: its origin `origin` (0: at its first entry) on this
    /// thread, its fields missing ([`missing_fields`], if it has any).
    fn take_in<S>(&self, id: &Id, ctx: &LayerContext<'_, S>, origin: u64) -> Option<NewSpan>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let metadata = ctx.metadata(id)?;
        let generation = with_current(|c| enabled_generation(c, metadata.target())).flatten()?;
        let missing = if metadata.fields().is_empty() {
            Missing::None
        } else {
            missing_fields(id, ctx)
        };
        Some(NewSpan {
            generation,
            metadata,
            origin,
            origin_tid: current_tid(),
            missing,
            memo: SpanMemo::NONE,
        })
    }
}

/// Marks, in the registry's extensions, a span created while the table of spans was full:
/// when it is taken in later, its creation fields are missing for that reason.
#[derive(Debug)]
struct CreatedWhileFull;

/// Why span `id`, which the table did not keep, misses the fields it was created with:
/// created while the table was full (its creation marked it so), else before the trace.
fn missing_fields<S>(id: &Id, ctx: &LayerContext<'_, S>) -> Missing
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let full = ctx
        .span(id)
        .is_some_and(|span| span.extensions().get::<CreatedWhileFull>().is_some());
    if full {
        Missing::TableFull
    } else {
        Missing::BeforeTrace
    }
}

/// Span `id` was created while the table was full: marked so.
#[cold]
#[inline(never)]
fn table_full_at_creation<S>(id: &Id, ctx: &LayerContext<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if let Some(span) = ctx.span(id) {
        span.extensions_mut().replace(CreatedWhileFull);
    }
}

/// A span the table keeps, of another trace than the running one (or taken in before its
/// first entry): taken into the running trace if it enables the span's category, its
/// origin (for an async begin) `origin` on this thread; its fields are kept. `false`: the
/// running trace does not record it.
#[cold]
#[inline(never)]
fn take_in_again(state: &SlotGuard<'_>, origin: u64) -> bool {
    let category = state.metadata().target();
    let Some(generation) = with_current(|c| enabled_generation(c, category)).flatten() else {
        return false;
    };
    let view = state.view();
    if generation != view.generation || view.origin == 0 {
        state.change(|state| state.retake(generation, origin, current_tid()));
    }
    true
}

/// Values recorded into a kept span (`slot`), applied by `set` under its lock; counted as
/// dropped when the calling thread holds that lock already (a signal handler's record).
#[cold]
#[inline(never)]
fn record_under_lock(slot: SlotRef<'static>, set: impl FnOnce(&SpanState)) {
    match slot.lock() {
        Some(state) => state.change(set),
        None => count_dropped_span(),
    }
}

/// The exit of a span this thread has no entry of: entered before the trace (nothing to
/// write), or under a layer that `reload` swapped out since, whose entries are dropped here
/// and their durations counted as dropped.
#[cold]
#[inline(never)]
fn exit_not_entered() {
    let epoch = active_epoch();
    let orphans = with_spans(|spans| spans.forget_orphans(epoch)).unwrap_or(0);
    for _ in 0..orphans {
        count_dropped_span();
    }
}

/// The end of a span the table kept, its last user gone (its close, or its layer's removal):
/// its async end if its async begin was written.
fn end_kept_span(state: &SpanState) {
    if let Some(generation) = state.async_begun_in() {
        write_async_end(state.id(), state.metadata(), generation);
    }
}

/// A span's duration, or values recorded into it, that could not be kept: counted as a
/// dropped record of the running trace (if one runs).
#[cold]
#[inline(never)]
fn count_dropped_span() {
    with_current(|context| {
        if let Some(mut writer) = context.trace_writer() {
            writer.count_dropped();
        }
    });
}

/// An event on the engine's one-announcement path (its fields all fit), once its thread has
/// written at its call site in this trace (`memo`, [`record::latest_memo`]); `false`: nothing
/// written, take [`write_event`].
fn write_event_installed(
    memo: &Memo,
    ticks: u64,
    metadata: &'static tracing::Metadata<'static>,
    visitor: &mut EventVisitor<'_>,
) -> bool {
    let generation = memo.generation();
    // The level's text by its index, as the general path writes it (which interns it).
    let Some((name, value)) = level_indices(generation, metadata.level()) else {
        return false;
    };
    let level = (LEVEL, name, ArgValue::Str(StringRef::Index(value)));
    // The names' indices from the call site's memo once an event of the site with all its
    // fields taught it, else from the thread's string cache (then taught).
    let key = visitor.args_key(metadata);
    let remembered = key != 0 && memo.args_key == key;
    if remembered {
        visitor.set_name_indices(memo.arg_indices);
    }
    let written = if visitor.text_slots == 0 {
        // Scalars only: the fields as they are, without a copy.
        visitor.with_last(level, |visitor| {
            record::installed_instant(memo, ticks, visitor.message(), visitor.fields())
        })
    } else {
        let mut args = [("", 0, ArgValue::Null); MAX_ARGS];
        for (i, slot) in args.iter_mut().enumerate().take(visitor.len) {
            let (name, index, _) = visitor.fields()[i];
            *slot = (name, index, visitor.value(i));
        }
        args[visitor.len] = level;
        record::installed_instant(memo, ticks, visitor.message(), &args[..=visitor.len])
    };
    if written && key != 0 && !remembered {
        remember_event_names(memo, metadata, visitor, key);
    }
    written
}

/// Remember the indices of an event's field names with its call site's memo (`key`:
/// [`EventVisitor::args_key`]).
#[cold]
#[inline(never)]
fn remember_event_names(
    memo: &Memo,
    metadata: &'static tracing::Metadata<'static>,
    visitor: &EventVisitor<'_>,
    key: usize,
) {
    let mut names = [""; INSTALLED_SPAN_ARGS];
    for (slot, field) in names.iter_mut().zip(visitor.fields()) {
        *slot = field.0;
    }
    let generation = memo.generation();
    if let Some(indices) = record::arg_name_indices(generation, &names[..visitor.len]) {
        let pair = (metadata.target(), metadata.name());
        record::remember_arg_indices(generation, pair, key, indices);
    }
}

/// A thread's string indices of `level`'s argument name and of each level's text, in one
/// generation (0: not known yet).
#[derive(Debug, Clone, Copy)]
struct LevelIndices {
    generation: u32,
    name: u16,
    texts: [u16; 5],
}

thread_local! {
    /// This thread's [`LevelIndices`].
    static LEVEL_INDICES: Cell<LevelIndices> = const {
        Cell::new(LevelIndices {
            generation: 0,
            name: 0,
            texts: [0; 5],
        })
    };
}

/// The string indices of the `level` argument's name and of `level`'s text in trace
/// `generation`, from the thread's string cache (kept per thread: no probe of the cache once
/// known); `None` until the general path interned them.
#[inline]
fn level_indices(generation: u32, level: &tracing::Level) -> Option<(u16, u16)> {
    let at = match *level {
        tracing::Level::TRACE => 0,
        tracing::Level::DEBUG => 1,
        tracing::Level::INFO => 2,
        tracing::Level::WARN => 3,
        _ => 4,
    };
    let known = LEVEL_INDICES.try_with(Cell::get).ok()?;
    if known.generation == generation && known.name != 0 && known.texts[at] != 0 {
        return Some((known.name, known.texts[at]));
    }
    let name = record::string_index(generation, LEVEL)?;
    let text = record::string_index(generation, level.as_str())?;
    let mut learned = if known.generation == generation {
        known
    } else {
        LevelIndices {
            generation,
            name: 0,
            texts: [0; 5],
        }
    };
    learned.name = name;
    learned.texts[at] = text;
    let _ = LEVEL_INDICES.try_with(|cell| cell.set(learned));
    Some((name, text))
}

/// An event on the general path (the current context's writer section), which also interns
/// its strings and teaches the thread's memo its call site, for [`write_event_installed`].
fn write_event(
    generation: u32,
    ticks: u64,
    (category, site): (&'static str, &'static str),
    metadata: &tracing::Metadata<'_>,
    visitor: &EventVisitor<'_>,
) {
    with_writer_in(generation, |writer| {
        let mut args = [EMPTY_ARG; MAX_ARGS];
        let mut n = 0;
        for (i, &(name, _, _)) in visitor.fields().iter().enumerate() {
            args[n] = Arg::new(writer.string_ref(name), visitor.value(i));
            n += 1;
        }
        if visitor.dropped > 0 {
            // The last field slot gives way to the count.
            n = n.min(EventVisitor::FIELD_SLOTS - 1);
            let dropped = visitor.dropped + (visitor.len - n) as u32;
            args[n] = Arg::new(writer.string_ref(FIELDS_DROPPED), ArgValue::U32(dropped));
            n += 1;
        }
        let level = writer.string_ref(metadata.level().as_str());
        args[n] = Arg::new(writer.string_ref(LEVEL), ArgValue::Str(level));
        n += 1;
        let name = match visitor.message() {
            Some(message) => TraceStr::Inline(message),
            None => TraceStr::Static(site),
        };
        if writer
            .instant(ticks, category, name, Scope::Thread, &args[..n])
            .is_ok()
        {
            writer.memoise_site(category, site);
        }
    });
}

/// The exit of a span (`span`: its entry's start and end ticks) whose state the exit could
/// not read without the lock, or must change: a span of an earlier trace (taken into this
/// one), one that moved here (its async begin), one whose fields are not inline scalars.
#[cold]
#[inline(never)]
fn exit_locked(slot: SlotRef<'static>, span: (u64, u64)) {
    let Some(state) = slot.lock() else {
        // This thread holds the lock beneath (a signal handler's exit).
        return count_dropped_span();
    };
    // A span recorded in an earlier trace, entered on its creator's thread in this one (its
    // enter skipped the lookup): taken in now, its entry the origin.
    let view = state.view();
    if (view.generation != latest_generation() || view.origin == 0)
        && !take_in_again(&state, span.0)
    {
        return;
    }
    // Unless its enter wrote it (a span entered here whose id the thread's hint took for
    // one of its own).
    begin_async_if_moved(&state);
    let view = state.view();
    if view.has_args() {
        drop(state);
        write_span_end(slot, &view, span);
    } else {
        write_span_end_general(&state, &view, span);
    }
}

/// The duration-complete record of one enter → exit of a recorded span (`span`: its start
/// and end ticks), its fields inline with its id (`view`, of the span in `slot`), on the
/// engine's one-announcement path when the names' indices are remembered with the thread's
/// memo (the usual case).
#[inline(always)]
fn write_span_end(slot: SlotRef<'static>, view: &SpanView, span: (u64, u64)) {
    let written = view.remembered_indices().is_some_and(|indices| {
        let metadata = slot.state().metadata();
        let pair = (metadata.target(), metadata.name());
        installed_span_end(
            view.generation,
            view.memo,
            span,
            pair,
            view.values(),
            indices,
        )
    });
    if !written {
        write_span_end_named(slot, view, span);
    }
}

/// [`write_span_end`] by the names: their indices from the thread's string cache (then
/// remembered with its memo), else the general path, which interns them (and teaches the
/// thread's memo).
#[cold]
#[inline(never)]
fn write_span_end_named(slot: SlotRef<'static>, view: &SpanView, span: (u64, u64)) {
    // The names, read under the lock if the view has none.
    let view = match view.names() {
        Some(_) => *view,
        None => match slot.lock() {
            Some(state) => {
                let view = state.view();
                if view.names().is_none() {
                    // The fields moved out of line since the view was read (a `record` on
                    // another thread): the general path, under the lock.
                    return write_span_end_general(&state, &view, span);
                }
                view
            }
            None => return count_dropped_span(),
        },
    };
    let (Some(names), values) = (view.names(), view.values()) else {
        // (Not reached: both views above have their names.)
        return count_dropped_span();
    };
    let metadata = slot.state().metadata();
    let pair = (metadata.target(), metadata.name());
    let generation = view.generation;
    let indices = match view.remembered_indices() {
        // Remembered, yet not written by them: the general path.
        Some(_) => None,
        None => record::arg_name_indices(generation, names),
    };
    let written = indices.is_some_and(|indices| {
        installed_span_end(generation, view.memo, span, pair, values, indices)
    });
    if written && view.all_fields() {
        if let Some(indices) = indices {
            let key = spans::args_key(metadata);
            record::remember_arg_indices(generation, pair, key, indices);
        }
    }
    if !written {
        instrument::end_slow(
            generation,
            instrument::Mode::Complete,
            span,
            pair,
            (names, values),
        );
    }
}

/// [`write_span_end`] for a span whose fields are not inline scalars with room for its id
/// (texts, many fields, some missing), under its slot's lock (`state`, as `view`).
#[cold]
#[inline(never)]
fn write_span_end_general(state: &SpanState, view: &SpanView, span: (u64, u64)) {
    let metadata = state.metadata();
    with_writer_in(view.generation, |writer| {
        let mut args = [EMPTY_ARG; MAX_ARGS];
        let n = span_args(writer, state, Some(state.id()), &mut args);
        let kind = EventKind::DurationComplete { end_ticks: span.1 };
        let _ = writer.event(span.0, metadata.target(), metadata.name(), kind, &args[..n]);
    });
}

/// [`record::installed_span_end_with_args`], its payload sized for the arguments' count.
#[inline(always)]
fn installed_span_end(
    generation: u32,
    memo: SpanMemo,
    span: (u64, u64),
    pair: (&'static str, &'static str),
    args: &[ScalarArg],
    indices: u64,
) -> bool {
    match args.len() {
        0 | 1 => {
            record::installed_span_end_with_args::<4>(generation, memo, span, pair, args, indices)
        }
        2 => record::installed_span_end_with_args::<6>(generation, memo, span, pair, args, indices),
        3 => record::installed_span_end_with_args::<8>(generation, memo, span, pair, args, indices),
        _ => record::installed_span_end_with_args::<INSTALLED_SPAN_PAYLOAD>(
            generation, memo, span, pair, args, indices,
        ),
    }
}

/// The async begin of the span under `state`'s lock if the calling thread is not its
/// origin's and no thread has written it yet.
#[inline]
fn begin_async_if_moved(state: &SlotGuard<'_>) {
    let view = state.view();
    if !view.async_begun() && current_tid() != view.origin_tid {
        state.change(SpanState::set_async_begun);
        write_async_begin(state, &view);
    }
}

/// The async end of span `id` of call site `metadata` in trace `generation` (its close,
/// after its async begin).
#[cold]
#[inline(never)]
fn write_async_end(id: u64, metadata: &'static tracing::Metadata<'static>, generation: u32) {
    let ticks = clock::ticks();
    let (category, name) = (metadata.target(), metadata.name());
    with_writer_in(generation, |writer| {
        let kind = EventKind::AsyncEnd { id };
        let _ = writer.event(ticks, category, name, kind, &[]);
    });
}

/// The async begin of a span that crossed threads (its state under its slot's lock, as
/// `view`): at its origin (creation, or first entry in the trace), on that thread (an inline
/// thread ref), with its fields.
#[cold]
#[inline(never)]
fn write_async_begin(state: &SpanState, view: &SpanView) {
    let metadata = state.metadata();
    with_writer_in(view.generation, |writer| {
        let mut args = [EMPTY_ARG; MAX_ARGS];
        let n = span_args(writer, state, None, &mut args);
        let category = writer.string_ref(metadata.target());
        let name = writer.string_ref(metadata.name());
        let _ = writer.write_event(&Event {
            ticks: view.origin,
            thread: ThreadRef::Inline {
                pid: u64::from(std::process::id()),
                tid: view.origin_tid,
            },
            category,
            name,
            args: &args[..n],
            kind: EventKind::AsyncBegin { id: state.id() },
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(span: u64) -> Key {
        Key { layer: 1, span }
    }

    fn entered(span: u64) -> Entered {
        Entered {
            key: key(span),
            start: span,
            slot: None,
            counted: false,
        }
    }

    #[test]
    fn a_threads_entered_spans_from_before_every_context_stopped_are_dropped_at_the_next_enter() {
        let mut spans = ThreadSpans::NEW;
        spans.enter(entered(1), 7);
        spans.enter(entered(2), 7);
        assert_eq!(spans.exit(key(2)).map(|e| e.key.span), Some(2));
        // Span 1's exit ran with no trace running: its entry stayed.
        spans.enter(entered(3), 8);
        assert_eq!(spans.exit(key(1)).map(|e| e.key.span), None);
        assert_eq!(spans.exit(key(3)).map(|e| e.key.span), Some(3));
        assert!(spans.entered.is_empty());
    }

    /// A span of a layer number no layer of this process takes, kept in the table.
    fn kept(span: u64) -> Known {
        let key = Key {
            layer: u32::MAX - 10,
            span,
        };
        let new = spans::tests::span(1);
        let slot = spans::insert(key, new, |_| {}).expect("room");
        Known { key, slot }
    }

    #[test]
    fn a_thread_remembers_the_last_spans_it_created_and_exited_with_their_slots() {
        let mut spans = ThreadSpans::NEW;
        let known: Vec<Known> = (1..=CREATED_HINTS as u64 + 1).map(kept).collect();
        for k in &known {
            spans.note_created(*k);
        }
        assert!(
            spans.created_here(known[0].key).is_none(),
            "the oldest is forgotten"
        );
        for k in &known[1..] {
            let slot = spans.created_here(k.key).expect("remembered");
            assert!(slot.holds(k.key));
        }
        assert!(spans
            .created_here(Key {
                layer: 2,
                ..known[1].key
            })
            .is_none());
        // The last span exited, forgotten as created, is still known to its close.
        let first = known[0];
        spans.enter(
            Entered {
                key: first.key,
                start: 0,
                slot: Some(first.slot),
                counted: false,
            },
            1,
        );
        assert!(spans.exit(first.key).is_some());
        assert!(spans
            .slot_hint(first.key)
            .is_some_and(|s| s.holds(first.key)));
        for k in known {
            spans::close(k.slot, |_| {});
            assert!(
                !k.slot.holds(k.key),
                "a closed span's slot no longer holds it"
            );
        }
    }

    #[test]
    fn at_most_max_entered_spans_are_kept_the_oldest_forgotten() {
        let mut spans = ThreadSpans::NEW;
        for id in 1..=MAX_ENTERED as u64 + 1 {
            spans.enter(entered(id), 1);
        }
        assert_eq!(spans.entered.len(), MAX_ENTERED);
        assert_eq!(spans.exit(key(1)).map(|e| e.key.span), None);
        assert_eq!(spans.exit(key(2)).map(|e| e.key.span), Some(2));
    }
}

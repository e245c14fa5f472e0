//! `tracing` spans and events written as FXT records: [`TracingLayer`] (feature `tracing`).

use std::cell::{Cell, RefCell};
use std::fmt::{self, Write as _};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event as TracingEvent, Subscriber};
use tracing_subscriber::layer::{Context as LayerContext, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::clock;
use crate::engine::cache::Memo;
use crate::engine::category::{active_epoch, tracing_maybe_on};
use crate::engine::global::with_current;
use crate::engine::record::{
    self, Scope, SpanMemo, TraceStr, TraceWriter, INSTALLED_SPAN_ARGS, INSTALLED_SPAN_PAYLOAD,
};
use crate::engine::Context;
use crate::format::{Arg, ArgValue, Event, EventKind, ScalarArg, StringRef, ThreadRef, MAX_ARGS};
use crate::instrument;

/// Longest text argument (string field, `Debug` text, message) written, in bytes.
pub(crate) const MAX_TEXT: usize = 4096;

/// Name of an event's level argument. A `static`, so that every use is the one address the
/// thread's string cache knows it by (string literals are not guaranteed to be merged).
static LEVEL: &str = "level";

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
/// provider session under `fxtrace record`, or a [`crate::standalone`] session); with no trace
/// running each callback costs one relaxed load and a branch. The layer never filters: other
/// layers see every span and event whatever fxtrace records.
///
/// # Mapping
///
/// | `tracing` | FXT |
/// |---|---|
/// | target | category (enabled by the trace's category filter) |
/// | span, each enter → exit on a thread | one duration-complete record on that thread, named after the span, with the span's fields |
/// | span entered on a thread other than the one that created it (a future that moved, a task spawned elsewhere) | also an async-begin record (creation time, creating thread, the fields) and, when the span closes, an async-end record; correlation id = the span id |
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
/// - A span is recorded if a trace was running with its category enabled when it was
///   created; a span created before the trace started writes nothing.
/// - A span's fields are kept in the span's extensions only while a trace is running with its
///   category enabled. Up to four scalar fields are kept inline: the extension's box (the
///   registry's own, one per span that records) is then the only allocation; text fields or
///   more fields take one more. Such a span's record is written on the engine's
///   one-announcement path once its thread has written the span's name in the trace.
/// - A span's enter does not look the span up when it is one of the last eight spans its
///   thread created that record (the usual case); others are looked up (a span entered on
///   another thread, for its async begin). Its exit looks it up once, for its record.
/// - Events with string or `Debug` fields format into a per-thread scratch buffer (no
///   allocation once warm; an event emitted while another's field is formatted takes a
///   string of its own).
/// - Texts are cut at 4 096 bytes, and shorter still (the longest first) when an
///   event's or span's texts together exceed one record (32 760 bytes): the record is
///   written, never dropped for its size; an event or span has at most 15 arguments
///   (`level` included): further fields are replaced by one `fields_dropped` count.
/// - Span ids are reused by the registry after a span closes, so an async id is unique only
///   among live spans (async begin/end pairs with the same id do not overlap).
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingLayer {
    _private: (),
}

impl TracingLayer {
    /// The layer.
    pub fn new() -> Self {
        Self::default()
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

#[derive(Debug, Clone, Copy)]
struct Entered {
    span: u64,
    start: u64,
}

/// How many of the spans a thread created last it remembers ([`ThreadSpans::created`]).
const CREATED_HINTS: usize = 8;

/// A thread's spans.
struct ThreadSpans {
    /// Entered and not yet exited, innermost last.
    entered: Vec<Entered>,
    /// The epoch of [`active_epoch`] when `entered` was last pushed to: once every context
    /// has stopped since (the only way an exit is skipped, leaving its entry here), the next
    /// enter drops them.
    epoch: u32,
    /// The ids of the last spans this thread created that a trace records: a hint that an
    /// enter of one of them is on its creator's thread (ids are reused once a span closes, so
    /// the exit checks again), and needs no lookup for an async begin.
    created: [u64; CREATED_HINTS],
    next_created: usize,
}

impl ThreadSpans {
    const NEW: ThreadSpans = ThreadSpans {
        entered: Vec::new(),
        epoch: 0,
        created: [0; CREATED_HINTS],
        next_created: 0,
    };

    fn note_created(&mut self, span: u64) {
        self.created[self.next_created] = span;
        self.next_created = (self.next_created + 1) % CREATED_HINTS;
    }

    fn created_here(&self, span: u64) -> bool {
        // Most often the span the thread created last.
        let last = (self.next_created + CREATED_HINTS - 1) % CREATED_HINTS;
        self.created[last] == span || self.created.contains(&span)
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

    #[inline]
    fn exit(&mut self, span: u64) -> Option<Entered> {
        // Most often the innermost.
        if self.entered.last().is_some_and(|e| e.span == span) {
            return self.entered.pop();
        }
        let at = self.entered.iter().rposition(|e| e.span == span)?;
        Some(self.entered.remove(at))
    }
}

fn current_tid() -> u64 {
    TID.with(|t| {
        if t.get() == 0 {
            // SAFETY: `gettid` has no preconditions.
            t.set(unsafe { libc::gettid() } as u64);
        }
        t.get()
    })
}

// === values ===

/// Spans whose async begin was written and whose close has not run yet: while 0, a close
/// has nothing to write and does not look its span up.
/// ATOMICS: `Relaxed`. It counts claimed async begins (`SpanData::async_begun` swapped to
/// true, once per span, at an enter or an exit); each decrement is the close that swapped it
/// back to false, once per span. That close runs after every enter and exit of the span (each runs
/// while its thread holds a handle to the span): `tracing_subscriber::Registry::try_close`
/// decrements the span's reference count with `Release` and fences with `Acquire` before the
/// close, so the close sees the increment and the count never goes below 0.
static ASYNC_SPANS: AtomicUsize = AtomicUsize::new(0);

/// A field value kept with a span.
#[derive(Debug, Clone, PartialEq)]
enum Owned {
    Scalar(ArgValue<'static>),
    Text(String),
}

/// What the layer keeps in a span's extensions while a trace records it.
#[derive(Debug)]
struct SpanData {
    generation: u32,
    category: &'static str,
    name: &'static str,
    /// Creation time (read unordered: [`clock::ticks_unordered`]) and thread, for the
    /// async begin.
    created: u64,
    creator_tid: u64,
    fields: SpanFields,
    /// Rules: set once, by the first enter (or exit) of the span on a thread other than its
    /// creator's, which then writes the async begin; cleared once, by the close that writes
    /// the async end (the span's data is shared by every copy of the layer in a subscriber:
    /// one async pair however many copies close it).
    /// ATOMICS: `Relaxed` `swap`s: only each one's single winner matters; the closes run
    /// after every enter and exit of the span (the registry's span lifecycle orders them).
    async_begun: AtomicBool,
}

/// A span's fields: inline while they are few scalars, owned in a `Vec` otherwise.
#[derive(Debug)]
enum SpanFields {
    /// At most [`INSTALLED_SPAN_ARGS`] fields, all scalar, encoded for the record (but for
    /// their names' indices): no allocation.
    Scalars {
        names: [&'static str; INSTALLED_SPAN_ARGS],
        values: [ScalarArg; INSTALLED_SPAN_ARGS],
        len: usize,
    },
    /// Any fields.
    Owned(Vec<(&'static str, Owned)>),
}

impl SpanFields {
    const EMPTY: SpanFields = SpanFields::Scalars {
        names: [""; INSTALLED_SPAN_ARGS],
        values: [ScalarArg::NULL; INSTALLED_SPAN_ARGS],
        len: 0,
    };

    /// Set field `name` (replacing an earlier value of the same name).
    fn set(&mut self, name: &'static str, value: Owned) {
        let scalar = match &value {
            Owned::Scalar(v) => ScalarArg::new(*v),
            Owned::Text(_) => None,
        };
        if let (SpanFields::Scalars { names, values, len }, Some(scalar)) = (&mut *self, scalar) {
            if let Some(at) = names[..*len].iter().position(|n| *n == name) {
                values[at] = scalar;
                return;
            }
            if *len < INSTALLED_SPAN_ARGS {
                names[*len] = name;
                values[*len] = scalar;
                *len += 1;
                return;
            }
        }
        if let SpanFields::Scalars { names, values, len } = self {
            let owned = names[..*len]
                .iter()
                .zip(&values[..*len])
                .map(|(&name, value)| (name, Owned::Scalar(value.value())))
                .collect();
            *self = SpanFields::Owned(owned);
        }
        if let SpanFields::Owned(owned) = self {
            match owned.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => owned.push((name, value)),
            }
        }
    }

    /// Number of fields.
    fn len(&self) -> usize {
        match self {
            SpanFields::Scalars { len, .. } => *len,
            SpanFields::Owned(owned) => owned.len(),
        }
    }

    /// Field `i` (`i < len()`) as an argument value.
    fn get(&self, i: usize) -> (&'static str, ArgValue<'_>) {
        match self {
            SpanFields::Scalars { names, values, .. } => (names[i], values[i].value()),
            SpanFields::Owned(owned) => {
                let (name, value) = &owned[i];
                let value = match value {
                    Owned::Scalar(v) => *v,
                    Owned::Text(t) => text_value(t),
                };
                (*name, value)
            }
        }
    }
}

/// A recorded text field's value: inline, or the empty ref for an empty text.
fn text_value(text: &str) -> ArgValue<'_> {
    if text.is_empty() {
        ArgValue::Str(StringRef::Empty)
    } else {
        ArgValue::Str(StringRef::Inline(text))
    }
}

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

/// Event fields: scalars as they are, texts (the message, string and `Debug` fields) written
/// into a scratch string.
struct EventVisitor<'t> {
    text: &'t mut String,
    message: Option<Range<usize>>,
    /// The fields, `len` of them (a text field is a `Null` placeholder whose text is in
    /// `text_ranges`), then room for `level`: uninitialised past `len`, so that an event does
    /// not fill the whole array first.
    fields: [MaybeUninit<(&'static str, ArgValue<'static>)>; MAX_ARGS],
    /// Byte ranges in `text` of the text fields, by slot (those set in `text_slots`).
    text_ranges: [(u32, u32); MAX_ARGS],
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
            text_ranges: [(0, 0); MAX_ARGS],
            text_slots: 0,
            len: 0,
            dropped: 0,
        }
    }

    fn push(&mut self, name: &'static str, value: ArgValue<'static>) -> Option<usize> {
        if self.len < Self::FIELD_SLOTS {
            self.fields[self.len].write((name, value));
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
            self.text_ranges[slot] = (range.start as u32, range.end as u32);
            self.text_slots |= 1 << slot;
        }
    }

    /// The fields as pushed (text fields as placeholders: see [`Self::value`]).
    fn fields(&self) -> &[(&'static str, ArgValue<'static>)] {
        // SAFETY: `push` initialised `fields[..len]` (it writes a slot before counting it);
        // `MaybeUninit<T>` has the layout of `T`.
        unsafe { std::slice::from_raw_parts(self.fields.as_ptr().cast(), self.len) }
    }

    /// Field `i`'s value (`i < len`), texts from the scratch text.
    fn value(&self, i: usize) -> ArgValue<'_> {
        if self.text_slots & (1 << i) != 0 {
            let (start, end) = self.text_ranges[i];
            text_value(&self.text[start as usize..end as usize])
        } else {
            self.fields()[i].1
        }
    }

    /// `f` of the visitor whose fields are followed by `last` (in the slot kept for `level`).
    fn with_last<R>(
        &mut self,
        last: (&'static str, ArgValue<'static>),
        f: impl FnOnce(&Self) -> R,
    ) -> R {
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

/// Arguments of a span's fields, names interned; the `fields_dropped` count last when they
/// do not all fit.
fn span_args<'a>(
    writer: &mut TraceWriter<'_>,
    fields: &'a SpanFields,
    out: &mut [Arg<'a>; MAX_ARGS],
) -> usize {
    let fit = if fields.len() > MAX_ARGS {
        MAX_ARGS - 1
    } else {
        fields.len()
    };
    for (i, slot) in out.iter_mut().enumerate().take(fit) {
        let (name, value) = fields.get(i);
        *slot = Arg::new(writer.string_ref(name), value);
    }
    if fit < fields.len() {
        let dropped = (fields.len() - fit) as u32;
        out[fit] = Arg::new(writer.string_ref(FIELDS_DROPPED), ArgValue::U32(dropped));
        return MAX_ARGS;
    }
    fit
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
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        if !tracing_maybe_on() {
            return;
        }
        let metadata = attrs.metadata();
        let (category, name) = (metadata.target(), metadata.name());
        // The thread's memo answers for a span it already wrote in the latest trace.
        let generation = match record::memoised_latest_generation(category, name, 0) {
            Some((generation, _)) => generation,
            None => match with_current(|c| enabled_generation(c, category)).flatten() {
                Some(generation) => generation,
                None => return,
            },
        };
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut fields = SpanFields::EMPTY;
        attrs.record(&mut SpanVisitor {
            set: |name, value| fields.set(name, value),
        });
        // `replace`, not `insert`: a subscriber given the layer twice creates each span's data
        // twice (each copy of the layer then writes its own records, as asked).
        span.extensions_mut().replace(SpanData {
            generation,
            category,
            name,
            created: clock::ticks_unordered(),
            creator_tid: current_tid(),
            fields,
            async_begun: AtomicBool::new(false),
        });
        let _ = SPANS.try_with(|spans| spans.borrow_mut().note_created(id.into_u64()));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        // With no trace running, no span's fields can be written again (a span records only
        // in the trace it was created in).
        if !tracing_maybe_on() {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return;
        };
        if span.extensions().get::<SpanData>().is_none() {
            return;
        }
        // The values are visited with no lock held: a value's `Debug` is the program's code,
        // and a panic in it while the span's extensions were locked would poison them for
        // every later enter, exit and close of the span (a second panic, in a guard's drop
        // during that unwind, aborts the process). Then applied under the lock, which runs
        // none of the program's code.
        let mut recorded = Vec::new();
        values.record(&mut SpanVisitor {
            set: |name, value| recorded.push((name, value)),
        });
        let mut extensions = span.extensions_mut();
        if let Some(data) = extensions.get_mut::<SpanData>() {
            for (name, value) in recorded {
                data.fields.set(name, value);
            }
        }
    }

    fn on_enter(&self, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(epoch) = active_epoch() else {
            return;
        };
        let span_id = id.into_u64();
        // A span this thread created needs no lookup here: the exit looks it up once, for its
        // record. Another (a span that moved here) is looked up now, so that its async begin
        // is in the trace even if the trace stops before this thread exits it.
        let created_here = SPANS
            .try_with(|spans| spans.borrow().created_here(span_id))
            .unwrap_or(false);
        if !created_here {
            with_span_data(&ctx, id, |data| begin_async_if_moved(span_id, data));
        }
        let entered = Entered {
            span: span_id,
            start: clock::ticks(),
        };
        let _ = SPANS.try_with(|spans| spans.borrow_mut().enter(entered, epoch));
    }

    fn on_exit(&self, id: &Id, ctx: LayerContext<'_, S>) {
        if !tracing_maybe_on() {
            return;
        }
        let end = clock::ticks();
        let span_id = id.into_u64();
        let Some(entered) = SPANS
            .try_with(|spans| spans.borrow_mut().exit(span_id))
            .ok()
            .flatten()
        else {
            return;
        };
        with_span_data(&ctx, id, |data| {
            // Unless its enter wrote it (a span entered here whose id the thread's hint took
            // for one of its own).
            begin_async_if_moved(span_id, data);
            write_span_end(data, (entered.start, end));
        });
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        if ASYNC_SPANS.load(Ordering::Relaxed) == 0 {
            return;
        }
        with_span_data(&ctx, &id, |data| {
            // ATOMICS: see `SpanData::async_begun`.
            if data.async_begun.swap(false, Ordering::Relaxed) {
                ASYNC_SPANS.fetch_sub(1, Ordering::Relaxed);
                let ticks = clock::ticks();
                with_writer_in(data.generation, |writer| {
                    let kind = EventKind::AsyncEnd { id: id.into_u64() };
                    let _ = writer.event(ticks, data.category, data.name, kind, &[]);
                });
            }
        });
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

/// An event on the engine's one-announcement path (its fields all fit), once its thread has
/// written at its call site in this trace (`memo`, [`record::latest_memo`]); `false`: nothing
/// written, take [`write_event`].
fn write_event_installed(
    memo: &Memo,
    ticks: u64,
    metadata: &tracing::Metadata<'_>,
    visitor: &mut EventVisitor<'_>,
) -> bool {
    // The level's text by its index, as the general path writes it (which interns it).
    let Some(level) = record::string_index(memo.generation(), metadata.level().as_str()) else {
        return false;
    };
    let level = (LEVEL, ArgValue::Str(StringRef::Index(level)));
    if visitor.text_slots == 0 {
        // Scalars only: the fields as they are, without a copy.
        return visitor.with_last(level, |visitor| {
            record::installed_instant(memo, ticks, visitor.message(), visitor.fields())
        });
    }
    let mut args = [("", ArgValue::Null); MAX_ARGS];
    for (i, slot) in args.iter_mut().enumerate().take(visitor.len) {
        *slot = (visitor.fields()[i].0, visitor.value(i));
    }
    args[visitor.len] = level;
    let args = &args[..=visitor.len];
    record::installed_instant(memo, ticks, visitor.message(), args)
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
        for (i, &(name, _)) in visitor.fields().iter().enumerate() {
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

/// `f` of what the layer keeps with span `id`, if the span is live and was recorded.
#[inline]
fn with_span_data<S, R>(
    ctx: &LayerContext<'_, S>,
    id: &Id,
    f: impl FnOnce(&SpanData) -> R,
) -> Option<R>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let span = ctx.span(id)?;
    let extensions = span.extensions();
    extensions.get::<SpanData>().map(f)
}

/// The duration-complete record of one enter → exit of a recorded span, `span` its start and
/// end ticks.
#[inline]
fn write_span_end(data: &SpanData, span: (u64, u64)) {
    let pair = (data.category, data.name);
    if let SpanFields::Scalars { names, values, len } = &data.fields {
        // The engine's one-announcement path; the first record of the span's name in a
        // trace goes through the general one (and teaches the thread's memo).
        let generation = data.generation;
        let written = record::arg_name_indices(generation, &names[..*len]).is_some_and(|indices| {
            let values = &values[..*len];
            record::installed_span_end_with_args::<INSTALLED_SPAN_PAYLOAD>(
                generation,
                SpanMemo::NONE,
                span,
                pair,
                values,
                indices,
            )
        });
        if !written {
            let mode = instrument::Mode::Complete;
            let fields = (&names[..*len], &values[..*len]);
            instrument::end_slow(generation, mode, span, pair, fields);
        }
        return;
    }
    with_writer_in(data.generation, |writer| {
        let mut args = [EMPTY_ARG; MAX_ARGS];
        let n = span_args(writer, &data.fields, &mut args);
        let kind = EventKind::DurationComplete { end_ticks: span.1 };
        let _ = writer.event(span.0, data.category, data.name, kind, &args[..n]);
    });
}

/// The async begin of span `id` if the calling thread is not its creator and no thread has
/// written it yet.
#[inline]
fn begin_async_if_moved(id: u64, data: &SpanData) {
    // ATOMICS: see `SpanData::async_begun`.
    if current_tid() != data.creator_tid && !data.async_begun.swap(true, Ordering::Relaxed) {
        ASYNC_SPANS.fetch_add(1, Ordering::Relaxed);
        write_async_begin(id, data);
    }
}

/// The async begin of a span that crossed threads: at its creation time, on its creating
/// thread (an inline thread ref), with its fields.
fn write_async_begin(id: u64, data: &SpanData) {
    with_writer_in(data.generation, |writer| {
        let mut args = [EMPTY_ARG; MAX_ARGS];
        let n = span_args(writer, &data.fields, &mut args);
        let category = writer.string_ref(data.category);
        let name = writer.string_ref(data.name);
        let _ = writer.write_event(&Event {
            ticks: data.created,
            thread: ThreadRef::Inline {
                pid: u64::from(std::process::id()),
                tid: data.creator_tid,
            },
            category,
            name,
            args: &args[..n],
            kind: EventKind::AsyncBegin { id },
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entered(span: u64) -> Entered {
        Entered { span, start: span }
    }

    #[test]
    fn a_threads_entered_spans_from_before_every_context_stopped_are_dropped_at_the_next_enter() {
        let mut spans = ThreadSpans::NEW;
        spans.enter(entered(1), 7);
        spans.enter(entered(2), 7);
        assert_eq!(spans.exit(2).map(|e| e.span), Some(2));
        // Span 1's exit ran with no trace running: its entry stayed.
        spans.enter(entered(3), 8);
        assert_eq!(spans.exit(1).map(|e| e.span), None);
        assert_eq!(spans.exit(3).map(|e| e.span), Some(3));
        assert!(spans.entered.is_empty());
    }

    #[test]
    fn a_thread_remembers_the_last_spans_it_created() {
        let mut spans = ThreadSpans::NEW;
        for id in 1..=CREATED_HINTS as u64 + 1 {
            spans.note_created(id);
        }
        assert!(!spans.created_here(1), "the oldest is forgotten");
        assert!((2..=CREATED_HINTS as u64 + 1).all(|id| spans.created_here(id)));
        assert!(!spans.created_here(100));
    }

    #[test]
    fn at_most_max_entered_spans_are_kept_the_oldest_forgotten() {
        let mut spans = ThreadSpans::NEW;
        for id in 1..=MAX_ENTERED as u64 + 1 {
            spans.enter(entered(id), 1);
        }
        assert_eq!(spans.entered.len(), MAX_ENTERED);
        assert_eq!(spans.exit(1).map(|e| e.span), None);
        assert_eq!(spans.exit(2).map(|e| e.span), Some(2));
    }
}

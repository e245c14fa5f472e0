//! The instrumentation API: trace events written into the process's current context
//! ([`crate::engine::global`]), installed by the provider client or a
//! [`crate::standalone`] session. The functions are re-exported at the crate root.
//!
//! ```
//! use fxtrace::{Arg, ArgValue, Scope};
//!
//! fn read_block(n: u64) {
//!     let _span = fxtrace::duration("io", "read_block");
//!     fxtrace::instant("io", "cache_miss", Scope::Thread, &[Arg::new("block", ArgValue::U64(n))]);
//! }
//! read_block(7); // no trace running: each call costs one relaxed load and a branch
//! ```
//!
//! # Cost
//!
//! With no trace started in the process, every function here is one relaxed load of a
//! global and a predictable branch, inlined at the call site. With a trace running, a call
//! enters a read-side section of the current context, a writer section, checks the category
//! (cached per thread per trace, or per call site with a [`CallSite`]), reads the clock and
//! encodes the record in place in the shared buffer. A thread-scoped event whose category and
//! name are `&'static str` finds its three indices (category, name, thread) in the thread's
//! event memo from its second call in a trace on: no table lookup at all.
//!
//! # Categories
//!
//! A category is a `&'static str` (its enabled answer is cached per thread per trace) or a
//! `&'static CallSite` (the answer is cached in the site, for the whole process, per trace).
//!
//! # Names
//!
//! Names and categories that are `&'static str` are registered once per thread per trace and
//! then written as 2-byte indices. Wrap other strings in [`TraceStr::Inline`]: they are
//! copied into each record.
//!
//! # Arguments
//!
//! Up to 15 [`Arg`]s per event (14 for an instant with a process or global [`Scope`]).
//! Argument names are written inline. A record that cannot be encoded is dropped and counted.

use crate::clock;
use crate::engine::category::tracing_maybe_on;
use crate::engine::global::with_current;
use crate::engine::record::{self, SpanMemo, TraceWriter};
use crate::engine::Context;
use crate::format::{EventKind, EventType, StringRef};

pub use crate::engine::category::CallSite;
pub use crate::engine::record::{Scope, TraceStr};
pub use crate::format::{Arg, ArgValue};

/// A category: a `&'static str`, or a `&'static CallSite` that caches its answer.
pub trait Category: Copy {
    /// The category's name.
    fn name(self) -> &'static str;
    /// The call site caching the answer, if any.
    fn site(self) -> Option<&'static CallSite>;
}

impl Category for &'static str {
    #[inline(always)]
    fn name(self) -> &'static str {
        self
    }

    #[inline(always)]
    fn site(self) -> Option<&'static CallSite> {
        None
    }
}

impl Category for &'static CallSite {
    #[inline(always)]
    fn name(self) -> &'static str {
        self.category()
    }

    #[inline(always)]
    fn site(self) -> Option<&'static CallSite> {
        Some(self)
    }
}

/// Whether `category` is enabled in the current trace (false when none is running).
#[inline]
pub fn is_category_enabled(category: impl Category) -> bool {
    tracing_maybe_on() && enabled_slow(category.name(), category.site())
}

#[inline(never)]
fn enabled_slow(name: &'static str, site: Option<&'static CallSite>) -> bool {
    with_current(|context| match site {
        Some(site) => context.category_enabled(site),
        None => context.is_category_enabled_cached(name),
    })
    .unwrap_or(false)
}

/// The enabled path shared by every event: find the context, check the category, enter a
/// writer section, read the clock, write. Inlined into the (inlined) public functions only to
/// pick one of two out-of-line bodies, a choice the compiler makes at compile time for a
/// call site with constant arguments: a thread-scoped event of `'static` strings without a
/// [`CallSite`] takes the memoised path ([`emit_memoised`], fewer arguments to pass and no
/// dispatch), every other event the general one. Failures were counted by the engine.
#[inline(always)]
fn emit(
    category: &'static str,
    site: Option<&'static CallSite>,
    name: TraceStr<'_>,
    scope: Scope,
    kind: EventKind,
    args: &[Arg<'_>],
) {
    match (site, name, scope) {
        (None, TraceStr::Static(name), Scope::Thread)
            if args.is_empty() && kind.data_word().is_none() =>
        {
            emit_memoised_plain(category, name, kind.event_type())
        }
        (None, TraceStr::Static(name), Scope::Thread) => emit_memoised(category, name, kind, args),
        _ => emit_general(category, site, name, scope, kind, args),
    }
}

/// A thread-scoped event of `'static` strings: the thread's event memo, else the general
/// path that fills it. Not generic, so that the whole path is compiled (and inlined) inside
/// this crate.
#[inline(never)]
pub(crate) fn emit_memoised(
    category: &'static str,
    name: &'static str,
    kind: EventKind,
    args: &[Arg<'_>],
) {
    if !record::installed_event_memoised(None, None, (category, name), kind, args) {
        emit_memoised_slow(category, name, kind, args);
    }
}

/// [`emit_memoised`] of an event without arguments nor type-specific word (an instant, a
/// duration begin or end): the shortest path, a two-word record.
#[inline(always)]
pub(crate) fn emit_memoised_plain(
    category: &'static str,
    name: &'static str,
    event_type: EventType,
) {
    if !record::installed_plain_event(category, name, event_type) {
        emit_memoised_slow(category, name, EventKind::from_parts(event_type, 0), &[]);
    }
}

/// [`emit_memoised`] when the installed context's path does not apply: through the current
/// context's read-side section, the memo, else the general path that fills it.
#[cold]
#[inline(never)]
fn emit_memoised_slow(
    category: &'static str,
    name: &'static str,
    kind: EventKind,
    args: &[Arg<'_>],
) {
    with_current(|context| {
        if context.event_memoised(category, name, kind, args) {
            return;
        }
        if let Some((mut writer, category_ref, ticks)) = context.enter_for_category(category) {
            let _ = writer.event_memoising(ticks, (category, category_ref), name, kind, args);
        }
    });
}

/// Any other event (a [`CallSite`], an inline name, another scope).
#[inline(never)]
fn emit_general(
    category: &'static str,
    site: Option<&'static CallSite>,
    name: TraceStr<'_>,
    scope: Scope,
    kind: EventKind,
    args: &[Arg<'_>],
) {
    with_current(|context| {
        let Some((mut writer, category, ticks)) = enter(context, category, site) else {
            return;
        };
        let _ = match kind {
            EventKind::Instant => writer.instant_with_category(ticks, category, name, scope, args),
            kind => writer.event_with_category(ticks, category, name, kind, args),
        };
    });
}

/// A writer section on `context`, the category's ref and the timestamp, if the category is
/// enabled. The clock is read as soon as the category is known to be enabled and before the
/// writer section is entered: `rdtscp` waits for the instructions before it, not for those
/// after it, so entering the section and resolving refs overlap its latency.
#[inline(always)]
fn enter<'c>(
    context: &'c Context,
    category: &'static str,
    site: Option<&'static CallSite>,
) -> Option<(TraceWriter<'c>, StringRef<'static>, u64)> {
    match site {
        Some(site) => {
            if !context.category_enabled(site) {
                return None;
            }
            let ticks = clock::ticks();
            let mut writer = context.trace_writer()?;
            let category = writer.string_ref(category);
            Some((writer, category, ticks))
        }
        None => context.enter_for_category(category),
    }
}

#[inline(never)]
fn emit_log(category: &'static str, site: Option<&'static CallSite>, message: &str) {
    with_current(|context| {
        if let Some((mut writer, _, ticks)) = enter(context, category, site) {
            let _ = writer.log(ticks, message);
        }
    });
}

/// Instant event: something happened now.
#[inline(always)]
pub fn instant<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    scope: Scope,
    args: &[Arg<'_>],
) {
    if tracing_maybe_on() {
        let kind = EventKind::Instant;
        emit(
            category.name(),
            category.site(),
            name.into(),
            scope,
            kind,
            args,
        );
    }
}

/// Counter event: the arguments are the current values of counter `id`.
#[inline]
pub fn counter<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    id: u64,
    args: &[Arg<'_>],
) {
    if tracing_maybe_on() {
        let kind = EventKind::Counter { id };
        emit(
            category.name(),
            category.site(),
            name.into(),
            Scope::Thread,
            kind,
            args,
        );
    }
}

/// Duration begin event; pair it with [`duration_end`] on the same thread (or use
/// [`duration`]).
#[inline(always)]
pub fn duration_begin<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    args: &[Arg<'_>],
) {
    if tracing_maybe_on() {
        let kind = EventKind::DurationBegin;
        emit(
            category.name(),
            category.site(),
            name.into(),
            Scope::Thread,
            kind,
            args,
        );
    }
}

/// Duration end event.
#[inline(always)]
pub fn duration_end<'a>(category: impl Category, name: impl Into<TraceStr<'a>>, args: &[Arg<'_>]) {
    if tracing_maybe_on() {
        let kind = EventKind::DurationEnd;
        emit(
            category.name(),
            category.site(),
            name.into(),
            Scope::Thread,
            kind,
            args,
        );
    }
}

/// Async begin event of operation `id` (which may end on another thread).
#[inline]
pub fn async_begin<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    id: u64,
    args: &[Arg<'_>],
) {
    if tracing_maybe_on() {
        let kind = EventKind::AsyncBegin { id };
        emit(
            category.name(),
            category.site(),
            name.into(),
            Scope::Thread,
            kind,
            args,
        );
    }
}

/// Async instant event of operation `id`.
#[inline]
pub fn async_instant<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    id: u64,
    args: &[Arg<'_>],
) {
    if tracing_maybe_on() {
        let kind = EventKind::AsyncInstant { id };
        emit(
            category.name(),
            category.site(),
            name.into(),
            Scope::Thread,
            kind,
            args,
        );
    }
}

/// Async end event of operation `id`.
#[inline]
pub fn async_end<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    id: u64,
    args: &[Arg<'_>],
) {
    if tracing_maybe_on() {
        let kind = EventKind::AsyncEnd { id };
        emit(
            category.name(),
            category.site(),
            name.into(),
            Scope::Thread,
            kind,
            args,
        );
    }
}

/// Flow begin event of flow `id` (binds to the enclosing duration).
#[inline]
pub fn flow_begin<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    id: u64,
    args: &[Arg<'_>],
) {
    if tracing_maybe_on() {
        let kind = EventKind::FlowBegin { id };
        emit(
            category.name(),
            category.site(),
            name.into(),
            Scope::Thread,
            kind,
            args,
        );
    }
}

/// Flow step event of flow `id`.
#[inline]
pub fn flow_step<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    id: u64,
    args: &[Arg<'_>],
) {
    if tracing_maybe_on() {
        let kind = EventKind::FlowStep { id };
        emit(
            category.name(),
            category.site(),
            name.into(),
            Scope::Thread,
            kind,
            args,
        );
    }
}

/// Flow end event of flow `id`.
#[inline]
pub fn flow_end<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    id: u64,
    args: &[Arg<'_>],
) {
    if tracing_maybe_on() {
        let kind = EventKind::FlowEnd { id };
        emit(
            category.name(),
            category.site(),
            name.into(),
            Scope::Thread,
            kind,
            args,
        );
    }
}

/// Log record with `message` (the category only decides whether it is written; log records
/// carry no category).
#[inline]
pub fn log(category: impl Category, message: &str) {
    if tracing_maybe_on() {
        emit_log(category.name(), category.site(), message);
    }
}

/// A duration that ends when the guard is dropped: one duration complete event with both
/// timestamps. Inert (and free) when the category was disabled at creation.
#[derive(Debug)]
#[must_use = "the duration ends when the guard is dropped"]
pub struct DurationGuard<'a> {
    category: &'static str,
    name: TraceStr<'a>,
    args: &'a [Arg<'a>],
    start: u64,
    /// Generation of the trace the duration began in; 0 = inert.
    generation: u32,
    /// What the begin learned from the thread's event memo, for the end.
    memo: SpanMemo,
}

/// Begin a duration that ends when the returned guard is dropped.
#[inline]
pub fn duration<'a>(category: impl Category, name: impl Into<TraceStr<'a>>) -> DurationGuard<'a> {
    duration_with_args(category, name, &[])
}

/// [`duration`] with arguments (recorded with the complete event).
#[inline]
pub fn duration_with_args<'a>(
    category: impl Category,
    name: impl Into<TraceStr<'a>>,
    args: &'a [Arg<'a>],
) -> DurationGuard<'a> {
    let name = name.into();
    // The guard is built once, from the begin's answers (a guard built and then updated is
    // copied on the way out).
    let mut begun = None;
    if tracing_maybe_on() {
        begun = match (category.site(), name) {
            (None, TraceStr::Static(name)) => {
                record::memoised_latest_generation(category.name(), name, 0)
            }
            _ => None,
        }
        .or_else(|| {
            begin_generation(category.name(), name, category.site())
                .map(|generation| (generation, SpanMemo::NONE))
        });
    }
    let (generation, memo, start) = match begun {
        Some((generation, memo)) => (generation, memo, clock::ticks()),
        None => (0, SpanMemo::NONE, 0),
    };
    DurationGuard {
        category: category.name(),
        name,
        args,
        start,
        generation,
        memo,
    }
}

/// The running trace's generation if `category` is enabled in it.
#[inline(never)]
fn begin_generation(
    category: &'static str,
    name: TraceStr<'_>,
    site: Option<&'static CallSite>,
) -> Option<u32> {
    with_current(|context| {
        let generation = context.event_generation(category)?;
        let enabled = match (site, name) {
            (Some(site), _) => context.category_enabled(site),
            // A memoised pair has an enabled category (and needs no table probe).
            (None, TraceStr::Static(name)) if context.is_memoised(generation, category, name) => {
                true
            }
            (None, _) => context.is_category_enabled_cached(category),
        };
        enabled.then_some(generation)
    })
    .flatten()
}

impl DurationGuard<'_> {
    #[inline(never)]
    fn end(&mut self, end: u64) {
        let kind = EventKind::DurationComplete { end_ticks: end };
        if let TraceStr::Static(name) = self.name {
            let pair = (self.category, name);
            let (generation, start) = (Some(self.generation), Some(self.start));
            if record::installed_event_memoised(generation, start, pair, kind, self.args) {
                return;
            }
        }
        with_current(|context| {
            if let TraceStr::Static(name) = self.name {
                let pair = (self.category, name);
                let (generation, start) = (self.generation, Some(self.start));
                if context.event_memoised_in(generation, start, pair, kind, self.args) {
                    return;
                }
            }
            let Some(mut writer) = context.trace_writer() else {
                return;
            };
            // A duration that began in another trace (or context) is not written.
            if writer.generation() != self.generation {
                return;
            }
            let _ = match self.name {
                TraceStr::Static(name) => {
                    let category = (self.category, writer.string_ref(self.category));
                    writer.event_memoising(self.start, category, name, kind, self.args)
                }
                name => {
                    let category = writer.string_ref(self.category);
                    writer.event_with_category(self.start, category, name, kind, self.args)
                }
            };
        });
    }
}

impl Drop for DurationGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.generation != 0 {
            let end = clock::ticks();
            if self.args.is_empty() {
                let span = (self.start, end);
                if record::installed_span_end(self.generation, self.memo, span) {
                    return;
                }
                // Ended on another thread, or begun on the general path.
                if let TraceStr::Static(name) = self.name {
                    let pair = (self.category, name);
                    if record::installed_duration_complete(self.generation, span, pair) {
                        return;
                    }
                }
            }
            self.end(end);
        }
    }
}

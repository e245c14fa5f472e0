//! Runtime support of `#[traced]` (reached by the expansion as `fxtrace::__private`; not a
//! stable API: call [`crate::traced`] instead).
//!
//! A synchronous function becomes a [`Span`] guard, an `async fn` an [`AsyncSpan`] carried
//! by an [`Instrumented`] future. A synchronous function's body (when its parameters are cheap
//! to move), with its guard first, runs as a closure through [`Span::call`]: in place with no
//! trace running (the guard then known inert, so the untraced call keeps the plain function's
//! code, without the traced path's guard or frame), otherwise from an out-of-line function
//! generic over the closure (compiled in the caller's crate, with the body). With no trace
//! running, a traced call costs one relaxed load of the engine's "any trace started" count and
//! a branch (`Span::call`, the guard's and the future's checks, all `#[inline(always)]`). With
//! a trace running, a closure body's guard begins inside the closure's out-of-line frame; a
//! guard in the traced function itself calls an out-of-line begin, so that the function stays
//! as small as it would be untraced; the end is an out-of-line call in both (inlined, the
//! guard's drop glue would be too large to inline, and the untraced call would call it).
//!
//! # What is written
//!
//! - [`Span`] with no argument, or only scalar ones (integers, floats, bools, pointers, empty
//!   strings): one duration-complete record at exit, with both timestamps and the arguments
//!   (copied into the guard at entry). This is the cheapest path: two clock reads and one
//!   record.
//! - [`Span`] with a non-empty string or a `Debug` argument: the arguments borrow the
//!   parameters, which the body may move or mutate, so they are written at entry on a
//!   duration-begin record, and the exit writes a duration-end record. (Which of the two a
//!   call takes depends on its arguments' values: an empty string is the first kind.)
//! - [`AsyncSpan`]: an async-begin record at the first poll (with the arguments), a
//!   duration-complete record per poll on the polling thread, an async-end record when the
//!   future completes, or when it is dropped unfinished (then with `cancelled = true`). The
//!   correlation id comes from [`NEXT_ASYNC_ID`].
//!
//! A guard or future that began in one trace writes nothing in another (the generation is
//! checked at exit), and the state is decided at entry (or first poll): a call that began
//! with no trace running stays silent.
//!
//! # Limits
//!
//! String values longer than [`MAX_TEXT`] bytes are cut at a character boundary, and
//! shorter still (the longest first) when a call's texts together exceed one record (32 760
//! bytes): the record is written, never dropped for its size; `Debug` text is cut at
//! [`MAX_DEBUG_TEXT`] bytes per argument (and [`DEBUG_BUFFER`] per call) and then ends with
//! `…`. Argument names are interned like every `&'static str`.

use std::fmt::{self, Debug};
use std::future::Future;
use std::marker::PhantomData;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};

use crate::clock;
use crate::engine::category::tracing_maybe_on;
use crate::engine::global::with_current;
use crate::engine::record::{self, SpanMemo, TraceWriter};
use crate::engine::Context;
use crate::format::{Arg, ArgValue, EventKind, ScalarArg, StringRef, MAX_ARGS};

pub use crate::engine::category::CallSite;

/// Longest string argument value written, in bytes (longer ones are cut).
pub const MAX_TEXT: usize = 4096;
/// Longest `Debug` text of one argument, in bytes, `…` included.
pub const MAX_DEBUG_TEXT: usize = 1024;
/// Room for the `Debug` texts of one call (on the stack of the enabled path only).
pub const DEBUG_BUFFER: usize = 4096;

/// Whether any trace may be running in the process: one relaxed load.
#[inline(always)]
pub fn maybe_on() -> bool {
    tracing_maybe_on()
}

/// A function's path from `type_name` of a type declared in its body: drops the type's own
/// segment and the `{{closure}}` segment an `async fn` body adds. Constant-folded.
#[inline(always)]
pub fn fn_path(type_name: &'static str) -> &'static str {
    let path = type_name
        .strip_suffix("::__FxtraceSite")
        .unwrap_or(type_name);
    path.strip_suffix("::{{closure}}").unwrap_or(path)
}

/// A traced function's call site, as a zero-sized type declared in its body by the
/// expansion: the guards name it as a type parameter instead of holding pointers, so an
/// inert guard is only its "inert" word.
pub trait Site {
    /// The category's cached answer (a `static` in the function).
    fn call_site() -> &'static CallSite;
    /// The event name.
    fn name() -> &'static str;
    /// The category, as a constant where the expansion knows it (its address is then an
    /// immediate, not a load from the call site's static); by default the call site's. Its
    /// text must be the call site's, and every call must answer the same address (the memo's
    /// key).
    #[inline(always)]
    fn category() -> &'static str {
        Self::call_site().category()
    }
    /// The names of the arguments, in the order the guard is given them (empty by default):
    /// a `static` of the expansion, whose address also keys their indices in the thread's
    /// memo.
    #[inline(always)]
    fn arg_names() -> &'static [&'static str] {
        &[]
    }
}

// === arguments ===

/// A value `#[traced(args(..))]` records as a typed argument. Implemented for integers,
/// floats, `bool`, `str`, `String`, `Cow<str>`, raw pointers, `NonNull`, and references to
/// any of these. Other types go through `args(name: debug)`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be recorded as a trace argument",
    label = "not an integer, float, bool, string or pointer",
    note = "write `args(name: debug)` to record its `Debug` format instead"
)]
pub trait TraceArg {
    /// The argument's value.
    fn trace_arg(&self) -> ArgValue<'_>;
}

macro_rules! trace_arg_as {
    ($variant:ident($wide:ty): $($t:ty),*) => {$(
        impl TraceArg for $t {
            #[inline(always)]
            fn trace_arg(&self) -> ArgValue<'_> {
                ArgValue::$variant(<$wide>::from(*self))
            }
        }
    )*};
}

trace_arg_as!(U32(u32): u8, u16, u32);
trace_arg_as!(I32(i32): i8, i16, i32);
trace_arg_as!(U64(u64): u64);
trace_arg_as!(I64(i64): i64);
trace_arg_as!(F64(f64): f32, f64);
trace_arg_as!(Bool(bool): bool);

impl TraceArg for usize {
    #[inline(always)]
    fn trace_arg(&self) -> ArgValue<'_> {
        ArgValue::U64(*self as u64)
    }
}

impl TraceArg for isize {
    #[inline(always)]
    fn trace_arg(&self) -> ArgValue<'_> {
        ArgValue::I64(*self as i64)
    }
}

/// `s` cut to [`MAX_TEXT`] bytes at a character boundary; `""` is the empty ref.
fn text_ref(s: &str) -> StringRef<'_> {
    if s.is_empty() {
        return StringRef::Empty;
    }
    StringRef::Inline(crate::format::truncate_str(s, MAX_TEXT))
}

impl TraceArg for str {
    #[inline]
    fn trace_arg(&self) -> ArgValue<'_> {
        ArgValue::Str(text_ref(self))
    }
}

impl TraceArg for String {
    #[inline]
    fn trace_arg(&self) -> ArgValue<'_> {
        ArgValue::Str(text_ref(self))
    }
}

impl TraceArg for std::borrow::Cow<'_, str> {
    #[inline]
    fn trace_arg(&self) -> ArgValue<'_> {
        ArgValue::Str(text_ref(self))
    }
}

impl<T: ?Sized> TraceArg for *const T {
    #[inline(always)]
    fn trace_arg(&self) -> ArgValue<'_> {
        ArgValue::Pointer(self.cast::<()>() as usize as u64)
    }
}

impl<T: ?Sized> TraceArg for *mut T {
    #[inline(always)]
    fn trace_arg(&self) -> ArgValue<'_> {
        ArgValue::Pointer(self.cast::<()>() as usize as u64)
    }
}

impl<T: ?Sized> TraceArg for std::ptr::NonNull<T> {
    #[inline(always)]
    fn trace_arg(&self) -> ArgValue<'_> {
        ArgValue::Pointer(self.as_ptr().cast::<()>() as usize as u64)
    }
}

impl<T: TraceArg + ?Sized> TraceArg for &T {
    #[inline(always)]
    fn trace_arg(&self) -> ArgValue<'_> {
        (**self).trace_arg()
    }
}

impl<T: TraceArg + ?Sized> TraceArg for &mut T {
    #[inline(always)]
    fn trace_arg(&self) -> ArgValue<'_> {
        (**self).trace_arg()
    }
}

/// One argument as the expansion hands it over: a typed value, or a `Debug` value that is
/// formatted only if the category is enabled.
#[derive(Clone, Copy)]
pub enum ArgIn<'a> {
    /// A typed value.
    Value(&'static str, ArgValue<'a>),
    /// A value recorded with its `Debug` format.
    Debug(&'static str, &'a dyn Debug),
}

impl<'a> ArgIn<'a> {
    /// A typed value.
    #[inline(always)]
    pub fn value(name: &'static str, value: ArgValue<'a>) -> Self {
        ArgIn::Value(name, value)
    }

    /// A `Debug` value.
    #[inline(always)]
    pub fn debug(name: &'static str, value: &'a dyn Debug) -> Self {
        ArgIn::Debug(name, value)
    }

    fn name(&self) -> &'static str {
        match *self {
            ArgIn::Value(name, _) | ArgIn::Debug(name, _) => name,
        }
    }

    /// The value encoded, if it fits in the guard as a scalar does (not a non-empty string,
    /// a blob or a `Debug` value).
    #[inline(always)]
    fn scalar(&self) -> Option<ScalarArg> {
        match *self {
            ArgIn::Value(_, value) => ScalarArg::new(value),
            ArgIn::Debug(..) => None,
        }
    }
}

impl Debug for ArgIn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgIn::Value(name, value) => f.debug_tuple("Value").field(name).field(value).finish(),
            ArgIn::Debug(name, _) => f.debug_tuple("Debug").field(name).finish(),
        }
    }
}

/// `Debug` texts of one call, on the stack.
struct DebugText {
    buf: [u8; DEBUG_BUFFER],
    len: usize,
}

/// A `fmt::Write` into a [`DebugText`] that stops at a limit.
struct Capped<'b> {
    text: &'b mut DebugText,
    limit: usize,
    cut: bool,
}

impl fmt::Write for Capped<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.limit - self.text.len;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        let start = self.text.len;
        self.text.buf[start..start + take].copy_from_slice(&s.as_bytes()[..take]);
        self.text.len += take;
        if take < s.len() {
            self.cut = true;
            // Stops the formatting: its cost is bounded by the limit too.
            return Err(fmt::Error);
        }
        Ok(())
    }
}

const ELLIPSIS: &str = "…";

impl DebugText {
    fn new() -> Self {
        DebugText {
            buf: [0; DEBUG_BUFFER],
            len: 0,
        }
    }

    /// Format `value`, cut to [`MAX_DEBUG_TEXT`] (or the room left); its byte range.
    fn push(&mut self, value: &dyn Debug) -> Range<usize> {
        let start = self.len;
        let room = (DEBUG_BUFFER - start).min(MAX_DEBUG_TEXT);
        if room < ELLIPSIS.len() {
            return start..start;
        }
        let mut writer = Capped {
            limit: start + room - ELLIPSIS.len(),
            text: self,
            cut: false,
        };
        let complete = fmt::write(&mut writer, format_args!("{value:?}")).is_ok();
        if writer.cut || !complete {
            let at = self.len;
            self.buf[at..at + ELLIPSIS.len()].copy_from_slice(ELLIPSIS.as_bytes());
            self.len += ELLIPSIS.len();
        }
        start..self.len
    }

    fn get(&self, range: Range<usize>) -> &str {
        // Only whole characters are ever copied in, so this never fails.
        std::str::from_utf8(&self.buf[range]).unwrap_or("")
    }
}

/// Format the `Debug` arguments, then hand `f` the writer and the arguments (names interned).
fn with_args<R>(
    context: &Context,
    generation: u32,
    args: &[ArgIn<'_>],
    f: impl FnOnce(&mut TraceWriter<'_>, &[Arg<'_>]) -> R,
) -> Option<R> {
    let mut text = DebugText::new();
    let mut ranges: [Range<usize>; MAX_ARGS] = Default::default();
    let args = &args[..args.len().min(MAX_ARGS)];
    for (range, arg) in ranges.iter_mut().zip(args) {
        if let ArgIn::Debug(_, value) = arg {
            *range = text.push(*value);
        }
    }
    // The writer is entered after formatting: a `Debug` impl may trace.
    let mut writer = context.trace_writer()?;
    if writer.generation() != generation {
        return None;
    }
    let mut built = [Arg {
        name: StringRef::Empty,
        value: ArgValue::Null,
    }; MAX_ARGS];
    for ((slot, arg), range) in built.iter_mut().zip(args).zip(&ranges) {
        let value = match *arg {
            ArgIn::Value(_, value) => value,
            ArgIn::Debug(..) => ArgValue::Str(text_ref(text.get(range.clone()))),
        };
        *slot = Arg {
            name: writer.string_ref(arg.name()),
            value,
        };
    }
    Some(f(&mut writer, &built[..args.len()]))
}

/// The trace generation if `site`'s category is enabled in the current trace.
#[inline(always)]
fn enabled_generation(context: &Context, site: &CallSite) -> Option<u32> {
    let generation = context.event_generation(site.category())?;
    context.category_enabled(site).then_some(generation)
}

// === impl Span ===

/// How a [`Span`] ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One duration-complete record at exit.
    Complete,
    /// A duration-begin record was written at entry; a duration-end record at exit.
    BeginEnd,
}

/// The guard of a traced synchronous call at site `S`, with room for `N` scalar arguments.
///
/// `INLINE`: the begin is inlined where the guard is entered; for a body run by [`Span::call`],
/// whose traced path is already out of line (two frames, not three). Otherwise (the guard in
/// the traced function itself) it is an out-of-line call, so that the function stays small
/// enough to be inlined where it would be untraced. The end is out of line either way.
#[must_use = "the duration ends when the guard is dropped"]
pub struct Span<S: Site, const N: usize, const INLINE: bool = false> {
    /// Generation of the trace the call began in; 0 = inert.
    generation: u32,
    mode: Mode,
    start: u64,
    /// The arguments, encoded at entry (mode [`Mode::Complete`]; named by
    /// [`Site::arg_names`]).
    args: [ScalarArg; N],
    /// What the begin learned from the thread's event memo, for the end.
    memo: SpanMemo,
    site: PhantomData<fn() -> S>,
}

impl<S: Site, const N: usize, const INLINE: bool> Debug for Span<S, N, INLINE> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Span")
            .field("name", &S::name())
            .field("generation", &self.generation)
            .field("mode", &self.mode)
            .field("start", &self.start)
            .field("args", &self.args)
            .finish()
    }
}

impl<S: Site, const N: usize, const INLINE: bool> Span<S, N, INLINE> {
    /// An inert guard (no trace, or the category disabled).
    pub const OFF: Self = Span {
        generation: 0,
        mode: Mode::Complete,
        start: 0,
        args: [ScalarArg::NULL; N],
        memo: SpanMemo::NONE,
        site: PhantomData,
    };

    /// Run `body`, the body of a traced function, told whether a trace may be running (the
    /// body enters its guard only then): in place with no trace running, so that the call
    /// costs what the plain function costs plus one relaxed load and a branch, and out of
    /// line otherwise (the traced path's frame stays there).
    #[inline(always)]
    pub fn call<R>(body: impl FnOnce(bool) -> R) -> R {
        if !tracing_maybe_on() {
            return body(false);
        }
        Self::call_traced(body)
    }

    #[inline(never)]
    fn call_traced<R>(body: impl FnOnce(bool) -> R) -> R {
        body(true)
    }

    /// Enter a call whose arguments are `args`, named as [`Site::arg_names`] (call only when
    /// [`maybe_on`]). Scalar arguments (and empty strings) are encoded here, inline, where
    /// their types are known (so a `u64` argument is its value and a constant header); any
    /// other kind takes [`Self::begin_args`].
    #[inline(always)]
    pub fn enter_args(args: [ArgIn<'_>; N]) -> Self {
        let mut scalars = [ScalarArg::NULL; N];
        for (slot, arg) in scalars.iter_mut().zip(&args) {
            match arg.scalar() {
                Some(scalar) => *slot = scalar,
                None => return Self::begin_args(&args),
            }
        }
        // Stored here, into the guard the begin returned (kept for the end's record; inert
        // in an inert guard): handed to the begin, they would be stored word by word and
        // loaded back whole, a load that no store can forward.
        let mut span = Self::begin();
        span.args = scalars;
        span
    }

    /// A call with scalar arguments (set by the caller) or none: inlined or out of line
    /// (`INLINE`; out of line, a traced function stays small enough to be inlined where its
    /// caller would inline it untraced).
    #[inline(always)]
    fn begin() -> Self {
        if INLINE {
            Self::begin_here()
        } else {
            Self::begin_out_of_line()
        }
    }

    #[inline(never)]
    fn begin_out_of_line() -> Self {
        Self::begin_here()
    }

    #[inline(always)]
    fn begin_here() -> Self {
        let site = S::call_site();
        // The thread's memo knows the site's pair once a call has ended on this thread in
        // the latest trace (and the arguments' indices, once one has ended on the installed
        // path); else the site's cached answer, else the general path.
        let pair = (S::category(), S::name());
        let begun =
            record::memoised_latest_generation(pair.0, pair.1, Self::args_key()).or_else(|| {
                site.enabled_in_latest()
                    .or_else(|| enter_slow(site))
                    .map(|generation| (generation, SpanMemo::NONE))
            });
        match begun {
            Some((generation, memo)) => Span {
                generation,
                mode: Mode::Complete,
                start: clock::ticks(),
                args: [ScalarArg::NULL; N],
                memo,
                site: PhantomData,
            },
            None => Self::OFF,
        }
    }

    /// A call with a string or `Debug` argument: the arguments borrow the parameters, so they
    /// are written now, on a duration-begin record (the end writes a duration-end record).
    #[inline(never)]
    fn begin_args(args: &[ArgIn<'_>]) -> Self {
        match enter_args_slow(S::call_site(), S::name(), args) {
            Some(generation) => Span {
                generation,
                mode: Mode::BeginEnd,
                ..Self::OFF
            },
            None => Self::OFF,
        }
    }
}

impl<S: Site, const INLINE: bool> Span<S, 0, INLINE> {
    /// Enter a call with no arguments (call only when [`maybe_on`]; the guard is inert when
    /// no trace running enables the call site).
    #[inline(always)]
    pub fn enter() -> Self {
        Self::begin()
    }
}

#[inline(never)]
fn enter_slow(site: &'static CallSite) -> Option<u32> {
    with_current(|context| enabled_generation(context, site)).flatten()
}

/// The duration-begin record of a call with `args` at `site`: the trace's generation if
/// written.
#[inline(never)]
fn enter_args_slow(site: &'static CallSite, name: &'static str, args: &[ArgIn<'_>]) -> Option<u32> {
    with_current(|context| {
        let generation = enabled_generation(context, site)?;
        with_args(context, generation, args, |writer, args| {
            let kind = EventKind::DurationBegin;
            writer.event(clock::ticks(), site.category(), name, kind, args)
        })?
        .ok()?;
        Some(generation)
    })
    .flatten()
}

/// The end of a span of `'static` strings begun in trace `generation` on the general path
/// (the current context's writer section): its duration-complete record from `start` to
/// `end` with scalar arguments `values` named `names` (side by side; interning the strings
/// and teaching the thread's event memo, so that the next end takes the installed context's
/// path), or its duration-end record.
#[inline(never)]
pub(crate) fn end_slow(
    generation: u32,
    mode: Mode,
    (start, end): (u64, u64),
    (category, name): (&'static str, &'static str),
    (names, values): (&[&'static str], &[ScalarArg]),
) {
    let args = (names, &values[..values.len().min(names.len())]);
    with_current(|context| {
        let Some(mut writer) = context.trace_writer() else {
            return;
        };
        // A call that began in another trace is not written.
        if writer.generation() != generation {
            return;
        }
        let _ = match mode {
            Mode::Complete if args.1.is_empty() => {
                // Fills the thread's event memo: the next end of this site takes the
                // installed context's path.
                let kind = EventKind::DurationComplete { end_ticks: end };
                let category = (category, writer.string_ref(category));
                writer.event_memoising(start, category, name, kind, &[])
            }
            Mode::Complete if args.1.len() <= SMALL_ARGS => {
                write_complete::<SMALL_ARGS>(&mut writer, (start, end), category, name, args)
            }
            Mode::Complete => {
                write_complete::<MAX_ARGS>(&mut writer, (start, end), category, name, args)
            }
            Mode::BeginEnd => writer.event(end, category, name, EventKind::DurationEnd, &[]),
        };
    });
}

/// Arguments up to which [`write_complete`] uses a small array (fewer bytes to initialise).
const SMALL_ARGS: usize = 4;

/// A duration-complete record with arguments `values` named `names` (at most `M`), names
/// interned.
#[inline(always)]
fn write_complete<const M: usize>(
    writer: &mut TraceWriter<'_>,
    (start, end): (u64, u64),
    category: &'static str,
    name: &'static str,
    (names, values): (&[&'static str], &[ScalarArg]),
) -> Result<(), crate::engine::RecordError> {
    let mut built = [Arg {
        name: StringRef::Empty,
        value: ArgValue::Null,
    }; M];
    let values = &values[..values.len().min(M)];
    for ((slot, &name), value) in built.iter_mut().zip(names).zip(values) {
        *slot = Arg {
            name: writer.string_ref(name),
            value: value.value(),
        };
    }
    let kind = EventKind::DurationComplete { end_ticks: end };
    // Fills the thread's event memo (the argument names are interned above): the next end
    // of this site takes the installed context's path.
    let category = (category, writer.string_ref(category));
    writer.event_memoising(start, category, name, kind, &built[..values.len()])
}

impl<S: Site, const N: usize, const INLINE: bool> Drop for Span<S, N, INLINE> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.generation != 0 {
            self.end();
        }
    }
}

impl<S: Site, const N: usize, const INLINE: bool> Span<S, N, INLINE> {
    /// The end of a call that began in a trace: always out of line, whatever `INLINE` (inlined,
    /// it would make the guard's drop glue too large to be inlined itself, and then the
    /// untraced call, whose guard is known inert, would call that glue too).
    #[inline(never)]
    fn end(&mut self) {
        let end = clock::ticks();
        let (category, name) = (S::category(), S::name());
        if self.mode == Mode::Complete {
            let span = (self.start, end);
            let written = if N == 0 {
                record::installed_span_end(self.generation, self.memo, span)
                    || record::installed_duration_complete(self.generation, span, (category, name))
            } else {
                match self.memo.arg_indices_here() {
                    0 => self.end_learning(span),
                    indices => self.end_with_args(span, indices),
                }
            };
            if written {
                return;
            }
        }
        self.end_slow(end);
    }

    /// [`Self::end`] when the begin did not learn the arguments' indices from the thread's
    /// memo: from the thread's string cache, then remembered with the memo for the next
    /// begins on this thread. `false`: not written (the general path writes, and interns).
    #[inline(never)]
    fn end_learning(&self, span: (u64, u64)) -> bool {
        let (generation, pair) = (self.generation, (S::category(), S::name()));
        let names = S::arg_names();
        if names.len() != N {
            return false;
        }
        let Some(indices) = record::arg_name_indices(generation, names) else {
            return false;
        };
        let written = self.end_with_args(span, indices);
        if written {
            record::remember_arg_indices(generation, pair, Self::args_key(), indices);
        }
        written
    }

    /// [`record::installed_span_end_with_args`] with the names' `indices`, its payload sized
    /// for `N` arguments (a constant choice).
    #[inline(always)]
    fn end_with_args(&self, span: (u64, u64), indices: u64) -> bool {
        let (generation, memo, args) = (self.generation, self.memo, &self.args[..]);
        let pair = (S::category(), S::name());
        match N {
            0 | 1 => record::installed_span_end_with_args::<4>(
                generation, memo, span, pair, args, indices,
            ),
            2 => record::installed_span_end_with_args::<6>(
                generation, memo, span, pair, args, indices,
            ),
            3 => record::installed_span_end_with_args::<8>(
                generation, memo, span, pair, args, indices,
            ),
            _ => record::installed_span_end_with_args::<{ record::INSTALLED_SPAN_PAYLOAD }>(
                generation, memo, span, pair, args, indices,
            ),
        }
    }

    /// The key of the site's argument names in the thread's memo: their address plus their
    /// count, which the address's alignment leaves unique up to 7 names (more never use the
    /// memo); 0: none.
    #[inline(always)]
    fn args_key() -> usize {
        const { assert!(record::INSTALLED_SPAN_ARGS < std::mem::align_of::<&str>()) };
        if N == 0 {
            0
        } else {
            S::arg_names().as_ptr() as usize + N
        }
    }

    /// [`Self::end`] on the general path ([`end_slow`]).
    #[cold]
    #[inline(never)]
    fn end_slow(&self, end: u64) {
        let pair = (S::category(), S::name());
        let span = (self.start, end);
        // A site whose names do not match its arguments (not the expansion's) writes none;
        // a begin record carried them already.
        let names = S::arg_names();
        let args = if self.mode == Mode::Complete && names.len() == N {
            (names, &self.args[..])
        } else {
            (&[][..], &[][..])
        };
        end_slow(self.generation, self.mode, span, pair, args);
    }
}

// === impl AsyncSpan ===

/// Rules: the next correlation id of a traced future; taken (`fetch_add`) once per traced
/// future that begins while its category is enabled, by any thread. Starts at 1; 2^64 ids
/// do not wrap in practice.
/// ATOMICS: `Relaxed`: only uniqueness matters (one read-modify-write per id, so no two
/// futures get the same one); the id publishes no other data.
pub static NEXT_ASYNC_ID: AtomicU64 = AtomicU64::new(1);

/// The trace state of one traced future.
#[derive(Debug)]
pub struct AsyncSpan {
    /// Generation of the trace the future began in; 0 = inert.
    generation: u32,
    /// Correlation id of the async begin/end records.
    id: u64,
    /// The async end has been written (or cannot be any more).
    ended: bool,
    category: &'static str,
    name: &'static str,
}

impl AsyncSpan {
    /// An inert span.
    pub const OFF: AsyncSpan = AsyncSpan {
        generation: 0,
        id: 0,
        ended: true,
        category: "",
        name: "",
    };

    /// Begin: the async-begin record, with `args`, at the first poll of the traced `async fn`
    /// of site `S`.
    #[inline(always)]
    pub fn begin<S: Site>(args: &[ArgIn<'_>]) -> AsyncSpan {
        if !tracing_maybe_on() {
            return Self::OFF;
        }
        begin_async_slow(S::call_site(), S::name(), args)
    }

    /// The async-end record's arguments.
    fn end(&mut self, ticks: u64, writer: &mut TraceWriter<'_>, args: &[Arg<'_>]) {
        self.ended = true;
        let kind = EventKind::AsyncEnd { id: self.id };
        let _ = writer.event(ticks, self.category, self.name, kind, args);
    }

    /// After a poll that began at `start`: the poll's duration, and the end if `ready`.
    #[inline(never)]
    fn polled(&mut self, start: u64, ready: bool) {
        let end = clock::ticks();
        with_current(|context| {
            let Some(mut writer) = context.trace_writer() else {
                return;
            };
            if writer.generation() != self.generation {
                // The trace this future began in is over: nothing more to write.
                self.generation = 0;
                return;
            }
            let kind = EventKind::DurationComplete { end_ticks: end };
            let _ = writer.event(start, self.category, self.name, kind, &[]);
            if ready {
                self.end(end, &mut writer, &[]);
            }
        });
        if ready {
            self.ended = true;
        }
    }

    #[cold]
    #[inline(never)]
    fn cancelled(&mut self) {
        let ticks = clock::ticks();
        with_current(|context| {
            let Some(mut writer) = context.trace_writer() else {
                return;
            };
            if writer.generation() == self.generation {
                let cancelled = writer.string_ref("cancelled");
                self.end(
                    ticks,
                    &mut writer,
                    &[Arg::new(cancelled, ArgValue::Bool(true))],
                );
            }
        });
    }
}

#[inline(never)]
fn begin_async_slow(site: &'static CallSite, name: &'static str, args: &[ArgIn<'_>]) -> AsyncSpan {
    with_current(|context| {
        let generation = enabled_generation(context, site)?;
        // ATOMICS: see `NEXT_ASYNC_ID`.
        let id = NEXT_ASYNC_ID.fetch_add(1, Ordering::Relaxed);
        let category = site.category();
        with_args(context, generation, args, |writer, args| {
            let kind = EventKind::AsyncBegin { id };
            writer.event(clock::ticks(), category, name, kind, args)
        })?
        .ok()?;
        Some(AsyncSpan {
            generation,
            id,
            ended: false,
            category,
            name,
        })
    })
    .flatten()
    .unwrap_or(AsyncSpan::OFF)
}

impl Drop for AsyncSpan {
    #[inline]
    fn drop(&mut self) {
        if self.generation != 0 && !self.ended {
            self.cancelled();
        }
    }
}

// === impl Instrumented ===

/// A future traced by `#[traced]`: one duration per poll, and the async end.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Instrumented<F> {
    // Declared first: dropped before the span writes a cancelled end.
    inner: F,
    span: AsyncSpan,
}

/// Wrap `future` (its output type named by the expansion, which pins the `async fn`'s return
/// type for inference).
#[inline(always)]
pub fn instrument<F: Future<Output = R>, R>(span: AsyncSpan, future: F) -> Instrumented<F> {
    Instrumented {
        inner: future,
        span,
    }
}

/// Writes the poll's duration when dropped, also when the poll panics.
struct PollGuard<'s> {
    span: &'s mut AsyncSpan,
    start: u64,
    ready: bool,
}

impl Drop for PollGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.span.polled(self.start, self.ready);
    }
}

impl<F: Future> Future for Instrumented<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: it is only ever reached through this
        // projection, never moved out of `self`, and `Instrumented` has no `Drop` impl (the
        // span's does not touch `inner`); `Instrumented: Unpin` only when `F: Unpin`.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: see above.
        let inner = unsafe { Pin::new_unchecked(&mut this.inner) };
        if this.span.generation == 0 {
            return inner.poll(cx);
        }
        let mut guard = PollGuard {
            start: clock::ticks(),
            span: &mut this.span,
            ready: false,
        };
        let poll = inner.poll(cx);
        guard.ready = poll.is_ready();
        poll
    }
}

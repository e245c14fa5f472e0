//! `#[traced]` on synchronous functions, end to end: each test runs traced code under a
//! standalone session, decodes the archive and asserts the record sequence (names,
//! categories, nesting, arguments), the way `tracing_mock` asserts span lifecycles.

#![cfg(feature = "instrument")]

use crate::traced_support;

use std::fmt;

use fxtrace::traced;
use fxtrace_format::{DecodedEventKind, DecodedValue};
use traced_support::{gettid, names, serial, str_value, trace, trace_with, Ev};

// --- functions under test ---

#[traced]
fn leaf(x: u32) -> u32 {
    x + 1
}

#[traced]
fn outer() -> u32 {
    leaf(1) + leaf(2)
}

#[traced]
fn early(flag: bool) -> &'static str {
    if flag {
        return "early";
    }
    leaf(0);
    "late"
}

#[derive(Debug, PartialEq)]
struct Failed(u32);

fn fallible(ok: bool) -> Result<u32, Failed> {
    if ok {
        Ok(7)
    } else {
        Err(Failed(9))
    }
}

#[traced]
fn question_mark(ok: bool) -> Result<u32, Failed> {
    let v = fallible(ok)?;
    leaf(v);
    Ok(v)
}

#[traced]
fn panics(n: u32) -> u32 {
    leaf(n);
    if n > 0 {
        panic!("traced panic {n}");
    }
    n
}

#[traced]
fn depth(n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        1 + depth(n - 1)
    }
}

#[traced]
fn generic<T: fmt::Debug + Default + PartialEq>(value: T) -> bool {
    value == T::default()
}

#[derive(Debug, Default)]
struct Counter {
    n: u64,
}

trait Reset {
    fn reset(&mut self);
}

impl Counter {
    #[traced]
    fn new() -> Self {
        Counter { n: 0 }
    }

    #[traced(args(by))]
    fn bump(&mut self, by: u64) -> u64 {
        self.n += by;
        self.n
    }

    #[traced(args(self: debug))]
    fn into_inner(self) -> u64 {
        self.n
    }
}

impl Reset for Counter {
    #[traced]
    fn reset(&mut self) {
        self.n = 0;
    }
}

#[traced(category = "db", name = "query")]
fn renamed() {}

// A synchronous body runs as a closure (in place for some return types): what that could
// break.

impl Counter {
    /// A reborrow of `&mut self`.
    #[traced]
    fn count_mut(&mut self) -> &mut u64 {
        &mut self.n
    }
}

/// Returns of different types coerced to the declared one.
#[traced]
fn shape(round: bool) -> Box<dyn fmt::Debug> {
    if round {
        return Box::new(1.5f64);
    }
    Box::new("square")
}

/// The caller's location (the body stays in the function).
#[traced]
#[track_caller]
fn caller_line() -> u32 {
    std::panic::Location::caller().line()
}

/// Never returns.
#[traced]
fn diverges() -> ! {
    panic!("diverges")
}

/// An unsafe function.
///
/// # Safety
/// `p` points to a readable `u32`.
#[traced]
unsafe fn read(p: *const u32) -> u32 {
    // SAFETY: the caller's promise.
    unsafe { *p }
}

/// An opaque return type borrowing a parameter.
#[traced]
fn evens(v: &[u32]) -> impl Iterator<Item = &u32> + '_ {
    v.iter().filter(|x| *x % 2 == 0)
}

/// An opaque closure type: its parameter's type is inferred from the declared return type.
#[traced]
fn measure() -> impl Fn(&str) -> usize {
    |s| s.len()
}

/// An opaque type beside a coercion (`Box<Failed>` to `Box<dyn Debug>`) that the declared
/// return type drives.
#[traced]
fn opened(ok: bool) -> Result<impl fmt::Debug, Box<dyn fmt::Debug>> {
    if !ok {
        return Err(Box::new(Failed(3)));
    }
    Ok(1u32)
}

/// Records when it is dropped, with the trace's clock.
struct Dropped<'a>(&'a std::cell::Cell<u64>);

impl Drop for Dropped<'_> {
    fn drop(&mut self) {
        self.0.set(fxtrace::clock::ticks());
    }
}

/// Takes a parameter it drops (boxed: a parameter type that may be large keeps the body in
/// place, this one runs as a closure).
#[traced]
fn takes(d: Box<Dropped<'_>>) -> u32 {
    let _ = &d;
    1
}

/// The same, with an argument.
#[traced(args(n))]
fn takes_n(d: Box<Dropped<'_>>, n: u32) -> u32 {
    let _ = &d;
    n
}

/// The same, in place (a parameter that may be large to move).
#[traced]
fn takes_in_place(d: Dropped<'_>) -> u32 {
    let _ = &d;
    1
}

#[traced(args(a, b, c, d, e, f, g, h, p, m))]
#[allow(clippy::too_many_arguments)]
fn typed(
    a: u8,
    b: i16,
    c: u64,
    d: i64,
    e: f32,
    f: bool,
    g: usize,
    h: &u32,
    p: *const u8,
    m: *mut u8,
) -> u64 {
    let _ = (a, b, d, e, f, g, h, p, m);
    c
}

#[traced(args(n))]
fn mutates(mut n: u32) -> u32 {
    // The argument is the value at entry; the body may change the parameter.
    n *= 10;
    n
}

fn consume(s: String) -> usize {
    s.len()
}

#[traced(args(s, owned))]
fn strings(s: &str, owned: String) -> usize {
    // The body moves the string: non-empty strings ride on a begin record written at entry.
    s.len() + consume(owned)
}

#[derive(Debug)]
struct Request {
    id: u32,
    path: &'static str,
}

#[traced(args(req: debug, id))]
fn handle(req: &Request, id: u32) -> u32 {
    req.id + id
}

struct Big;

impl fmt::Debug for Big {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for _ in 0..10_000 {
            f.write_str("0123456789")?;
        }
        Ok(())
    }
}

#[traced(args(big: debug))]
fn big_debug(big: Big) {
    let _moved = big;
}

// --- tests ---

fn completes(events: &[Ev]) -> Vec<&Ev> {
    events.iter().filter(|e| e.is_complete()).collect()
}

#[test]
fn names_categories_and_nesting() {
    let _s = serial();
    let (v, events) = trace(outer);
    assert_eq!(v, 5);
    assert_eq!(
        names(&events),
        ["api::sync::leaf", "api::sync::leaf", "api::sync::outer"]
    );
    assert!(events.iter().all(|e| e.category == "api::sync"));
    assert!(
        events.iter().all(|e| e.args.is_empty()),
        "no args unless asked"
    );
    assert!(events.iter().all(|e| e.tid == gettid()));
    let (a, b, o) = (&events[0], &events[1], &events[2]);
    assert!(a.inside(o) && b.inside(o));
    assert!(a.end() <= b.start, "the two leaves follow each other");
}

#[test]
fn early_return_closes_the_duration() {
    let _s = serial();
    let ((a, b), events) = trace(|| (early(true), early(false)));
    assert_eq!((a, b), ("early", "late"));
    assert_eq!(
        names(&events),
        ["api::sync::early", "api::sync::leaf", "api::sync::early"]
    );
    assert!(events[1].inside(&events[2]));
    assert!(events[0].end() <= events[2].start);
}

#[test]
fn question_mark_error_path_closes_the_duration() {
    let _s = serial();
    let ((ok, err), events) = trace(|| (question_mark(true), question_mark(false)));
    assert_eq!(ok, Ok(7));
    assert_eq!(err, Err(Failed(9)));
    assert_eq!(
        names(&events),
        [
            "api::sync::leaf",
            "api::sync::question_mark",
            "api::sync::question_mark"
        ]
    );
    assert!(events[0].inside(&events[1]));
}

#[test]
fn a_caught_panic_still_closes_the_duration() {
    let _s = serial();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let (caught, events) = trace(|| std::panic::catch_unwind(|| panics(3)));
    std::panic::set_hook(hook);
    assert!(caught.is_err());
    assert_eq!(names(&events), ["api::sync::leaf", "api::sync::panics"]);
    assert!(events[0].inside(&events[1]));
}

#[test]
fn recursion_nests_one_duration_per_level() {
    let _s = serial();
    let (v, events) = trace(|| depth(6));
    assert_eq!(v, 6);
    assert_eq!(events.len(), 7);
    assert!(events.iter().all(|e| e.name == "api::sync::depth"));
    // The deepest call ends first; each level lies inside the next record's interval.
    for pair in events.windows(2) {
        assert!(pair[0].inside(&pair[1]), "{pair:?}");
    }
}

#[test]
fn generic_instantiations_share_one_name() {
    let _s = serial();
    let (r, events) = trace(|| (generic(0u32), generic("x"), generic(String::new())));
    assert_eq!(r, (true, false, true));
    assert_eq!(events.len(), 3);
    assert!(events.iter().all(|e| e.name == "api::sync::generic"));
}

#[test]
fn methods_are_named_with_their_type() {
    let _s = serial();
    let (n, events) = trace(|| {
        let mut c = Counter::new();
        c.bump(2);
        c.bump(3);
        c.reset();
        c.bump(4);
        c.into_inner()
    });
    assert_eq!(n, 4);
    assert_eq!(
        names(&events),
        [
            "api::sync::Counter::new",
            "api::sync::Counter::bump",
            "api::sync::Counter::bump",
            "<api::sync::Counter as api::sync::Reset>::reset",
            "api::sync::Counter::bump",
            // begin (with the `self` argument) and end
            "api::sync::Counter::into_inner",
            "api::sync::Counter::into_inner",
        ]
    );
    let bumps: Vec<_> = events
        .iter()
        .filter(|e| e.name.ends_with("bump"))
        .map(|e| e.arg("by").cloned())
        .collect();
    assert_eq!(
        bumps,
        [2, 3, 4].map(|v| Some(DecodedValue::U64(v))).to_vec()
    );
    // `self: debug` is a string: written at entry on a begin record.
    let begin = &events[events.len() - 2];
    assert_eq!(begin.kind, DecodedEventKind::DurationBegin);
    assert_eq!(begin.arg("self"), Some(&str_value("Counter { n: 4 }")));
    assert_eq!(events[events.len() - 1].kind, DecodedEventKind::DurationEnd);
}

#[test]
fn options_set_category_and_name() {
    let _s = serial();
    let ((), events) = trace(renamed);
    assert_eq!(names(&events), ["query"]);
    assert_eq!(events[0].category, "db");
}

#[test]
fn a_disabled_category_writes_nothing() {
    let _s = serial();
    let ((), events) = trace_with(&["other"], || {
        renamed();
        outer();
    });
    assert!(events.is_empty(), "{events:?}");
    // The same sites, enabled in the next trace.
    let ((), events) = trace_with(&["db"], || {
        renamed();
        outer();
    });
    assert_eq!(names(&events), ["query"]);
}

#[test]
fn calls_without_a_session_write_nothing_later() {
    let _s = serial();
    // No session: a plain call.
    assert_eq!(outer(), 5);
    let ((), events) = trace(|| ());
    assert!(events.is_empty());
}

#[test]
fn scalar_arguments_are_typed_on_one_complete_record() {
    let _s = serial();
    let mut byte = 0u8;
    let pm: *mut u8 = &mut byte;
    let pc: *const u8 = 0x1000 as *const u8;
    let (c, events) = trace(|| typed(200, -300, 1 << 40, -(1 << 40), 1.5, true, 77, &9, pc, pm));
    assert_eq!(c, 1 << 40);
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert!(e.is_complete());
    let expected = [
        ("a", DecodedValue::U32(200)),
        ("b", DecodedValue::I32(-300)),
        ("c", DecodedValue::U64(1 << 40)),
        ("d", DecodedValue::I64(-(1 << 40))),
        ("e", DecodedValue::F64(1.5)),
        ("f", DecodedValue::Bool(true)),
        ("g", DecodedValue::U64(77)),
        ("h", DecodedValue::U32(9)),
        ("p", DecodedValue::Pointer(0x1000)),
        ("m", DecodedValue::Pointer(pm as u64)),
    ];
    let got: Vec<_> = e
        .args
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn an_argument_is_its_value_at_entry() {
    let _s = serial();
    let (v, events) = trace(|| mutates(4));
    assert_eq!(v, 40);
    assert_eq!(events[0].arg("n"), Some(&DecodedValue::U32(4)));
}

#[test]
fn string_arguments_ride_on_a_begin_record() {
    let _s = serial();
    let (n, events) = trace(|| strings("ab", "cde".to_owned()));
    assert_eq!(n, 5);
    assert_eq!(events.len(), 2);
    let (begin, end) = (&events[0], &events[1]);
    assert_eq!(begin.kind, DecodedEventKind::DurationBegin);
    assert_eq!(end.kind, DecodedEventKind::DurationEnd);
    assert_eq!(begin.name, "api::sync::strings");
    assert_eq!(end.name, begin.name);
    assert!(begin.start <= end.start);
    assert_eq!(begin.arg("s"), Some(&str_value("ab")));
    assert_eq!(begin.arg("owned"), Some(&str_value("cde")));
    assert!(end.args.is_empty());
}

#[test]
fn empty_string_arguments_are_kept_with_the_call_and_written_at_its_end() {
    let _s = serial();
    // Empty texts need no payload: encoded at entry like numbers, written once at the end.
    let (n, events) = trace(|| (0..3).map(|_| strings("", String::new())).sum::<usize>());
    assert_eq!(n, 0);
    assert_eq!(events.len(), 3, "{events:?}");
    for call in &events {
        assert!(call.is_complete(), "{call:?}");
        assert_eq!(call.name, "api::sync::strings");
        assert_eq!(call.arg("s"), Some(&str_value("")));
        assert_eq!(call.arg("owned"), Some(&str_value("")));
    }
}

#[test]
fn debug_arguments_are_formatted_only_when_asked() {
    let _s = serial();
    let req = Request { id: 3, path: "/a" };
    let (v, events) = trace(|| handle(&req, 4));
    assert_eq!(v, 7);
    assert_eq!(events[0].kind, DecodedEventKind::DurationBegin);
    assert_eq!(events[0].arg("req"), Some(&str_value(&format!("{req:?}"))));
    assert_eq!(events[0].arg("id"), Some(&DecodedValue::U32(4)));
    assert!(req.path.starts_with('/'));
}

#[test]
fn long_debug_text_is_cut_with_an_ellipsis() {
    let _s = serial();
    let ((), events) = trace(|| big_debug(Big));
    let Some(DecodedValue::Str(text)) = events[0].arg("big") else {
        panic!("{events:?}");
    };
    assert!(
        text.len() <= fxtrace::__private::MAX_DEBUG_TEXT,
        "{}",
        text.len()
    );
    assert!(text.len() > 1000);
    assert!(text.ends_with('…'));
    assert!(text.starts_with("0123456789"));
}

#[test]
fn many_threads_each_get_their_own_durations() {
    let _s = serial();
    let ((), events) = trace(|| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(|| {
                    outer();
                    gettid()
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    assert_eq!(events.len(), 9);
    let mut tids: Vec<u64> = events.iter().map(|e| e.tid).collect();
    tids.sort();
    tids.dedup();
    assert_eq!(tids.len(), 3);
    for tid in tids {
        let mine: Vec<&Ev> = completes(&events)
            .into_iter()
            .filter(|e| e.tid == tid)
            .collect();
        assert_eq!(mine.len(), 3);
        assert_eq!(mine[2].name, "api::sync::outer");
        assert!(mine[0].inside(mine[2]) && mine[1].inside(mine[2]));
    }
}

#[test]
fn bodies_without_arguments_behave_as_the_plain_function() {
    let _s = serial();
    let run = || {
        let mut c = Counter::default();
        *c.count_mut() += 5;
        let shapes = format!("{:?} {:?}", shape(true), shape(false));
        // The caller's line, and this one.
        let line = (caller_line(), line!());
        let diverged = std::panic::catch_unwind(|| diverges()).is_err();
        let x = 7u32;
        // SAFETY: `&x` is a valid, aligned `u32`.
        let read = unsafe { read(&x) };
        let evens: Vec<u32> = evens(&[1, 2, 3, 4]).copied().collect();
        let opaque = (
            measure()("four"),
            format!("{:?} {:?}", opened(true), opened(false)),
        );
        (c.n, shapes, line, diverged, read, evens, opaque)
    };
    // No trace running (the closure runs in place), then inside spans.
    let untraced = run();
    let (line, line_here) = untraced.2;
    assert_eq!(line, line_here, "#[track_caller] sees its caller");
    let shapes = "1.5 \"square\"".to_owned();
    let opaque = (4, "Ok(1) Err(Failed(3))".to_owned());
    assert_eq!(
        untraced,
        (5, shapes, (line, line), true, 7, vec![2, 4], opaque)
    );
    let (traced, events) = trace(run);
    assert_eq!(traced, untraced);
    assert!(events.iter().all(Ev::is_complete));
    let mut names = names(&events);
    names.sort();
    assert_eq!(
        names,
        [
            "api::sync::Counter::count_mut",
            "api::sync::caller_line",
            "api::sync::diverges",
            "api::sync::evens",
            "api::sync::measure",
            "api::sync::opened",
            "api::sync::opened",
            "api::sync::read",
            "api::sync::shape",
            "api::sync::shape",
        ]
    );
}

#[test]
fn parameters_are_dropped_after_the_span_as_after_a_plain_bodys_locals() {
    let _s = serial();
    let dropped = [0; 3].map(std::cell::Cell::new);
    let (sum, events) = trace(|| {
        takes(Box::new(Dropped(&dropped[0])))
            + takes_n(Box::new(Dropped(&dropped[1])), 2)
            + takes_in_place(Dropped(&dropped[2]))
    });
    assert_eq!(sum, 4);
    assert_eq!(
        names(&events),
        [
            "api::sync::takes",
            "api::sync::takes_n",
            "api::sync::takes_in_place"
        ]
    );
    for (span, dropped) in events.iter().zip(dropped.map(|d| d.get())) {
        assert!(
            dropped > span.end(),
            "{}: dropped at {dropped}, span {}..={}",
            span.name,
            span.start,
            span.end()
        );
    }
}

#[traced(args(a, b, c, d, e, f, g, h))]
#[allow(clippy::too_many_arguments)]
fn eight_texts(a: &str, b: &str, c: &str, d: &str, e: &str, f: &str, g: &str, h: &str) {
    std::hint::black_box((a, b, c, d, e, f, g, h));
}

/// Eight texts of 4 096 bytes each (every one at its own limit) exceed one record (32 760
/// bytes): the span is written with them cut to fit, not dropped (`trace` asserts nothing was
/// dropped).
#[test]
fn a_span_whose_texts_exceed_a_record_is_written_with_them_cut() {
    let _s = serial();
    let long = "z".repeat(5000);
    let l = long.as_str();
    let ((), events) = trace(|| eight_texts(l, l, l, l, l, l, l, l));
    let mut kinds: Vec<String> = events.iter().map(|e| format!("{:?}", e.kind)).collect();
    kinds.sort();
    // Text arguments are written with the begin (the end has none).
    assert_eq!(kinds, ["DurationBegin", "DurationEnd"]);
    let span = events
        .iter()
        .find(|e| e.kind == DecodedEventKind::DurationBegin)
        .unwrap();
    assert_eq!(span.args.len(), 8);
    for (name, value) in &span.args {
        let DecodedValue::Str(text) = value else {
            panic!("{name}: {value:?}");
        };
        assert!(
            (3_000..4_096).contains(&text.len()) && text.bytes().all(|b| b == b'z'),
            "{name}: {} bytes",
            text.len()
        );
    }
}

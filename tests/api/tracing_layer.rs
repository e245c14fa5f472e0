//! `fxtrace::TracingLayer`, end to end: `tracing` spans and events under a standalone
//! session; the archive decodes and holds the durations, instants, async pairs, typed
//! arguments and categories the layer's mapping table promises.

#![cfg(feature = "tracing")]

use crate::traced_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fxtrace::TracingLayer;
use fxtrace_format::{DecodedEventKind, DecodedValue};
use traced_support::{gettid, serial, str_value, trace, trace_with, Ev};
use tracing::{Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Run `f` with the layer as the thread's default subscriber.
fn with_layer<R>(f: impl FnOnce() -> R) -> R {
    let subscriber = tracing_subscriber::registry().with(TracingLayer::new());
    tracing::subscriber::with_default(subscriber, f)
}

/// [`with_layer`] with the layer given twice (a configuration mistake that must not panic).
fn with_layer_twice<R>(f: impl FnOnce() -> R) -> R {
    let subscriber = tracing_subscriber::registry()
        .with(TracingLayer::new())
        .with(TracingLayer::new());
    tracing::subscriber::with_default(subscriber, f)
}

/// A span duration's fields: its arguments less `span_id`, which it must have.
fn fields(event: &Ev) -> Vec<(String, DecodedValue<'static>)> {
    span_id(event);
    event
        .args
        .iter()
        .filter(|(name, _)| name != "span_id")
        .cloned()
        .collect()
}

/// A span duration's `span_id` argument.
fn span_id(event: &Ev) -> u64 {
    match event.arg("span_id") {
        Some(DecodedValue::U64(id)) => *id,
        other => panic!("span_id of {event:?}: {other:?}"),
    }
}

fn only<'a>(events: &'a [Ev], name: &str) -> &'a Ev {
    let found: Vec<&Ev> = events.iter().filter(|e| e.name == name).collect();
    assert_eq!(found.len(), 1, "{name} in {events:?}");
    found[0]
}

#[test]
fn spans_become_nested_durations_with_typed_fields() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            tracing::info_span!("outer", id = 7u64).in_scope(|| {
                let inner = tracing::info_span!(
                    "inner",
                    s = "text",
                    ok = true,
                    f = 1.5,
                    neg = -3i64,
                    list = ?vec![1, 2],
                    shown = %"display",
                    late = tracing::field::Empty,
                );
                inner.record("late", 5u64);
                inner.in_scope(|| {});
            });
        })
    });
    assert_eq!(events.len(), 2, "{events:?}");
    let (inner, outer) = (&events[0], &events[1]);
    assert_eq!(
        (inner.name.as_str(), outer.name.as_str()),
        ("inner", "outer")
    );
    assert!(inner.is_complete() && outer.is_complete());
    assert!(inner.inside(outer));
    assert_eq!(outer.category, "api::tracing_layer", "target → category");
    assert_eq!(fields(outer), [("id".to_owned(), DecodedValue::U64(7))]);
    assert_ne!(span_id(outer), span_id(inner), "each span's own id");
    let expected = [
        ("s", str_value("text")),
        ("ok", DecodedValue::Bool(true)),
        ("f", DecodedValue::F64(1.5)),
        ("neg", DecodedValue::I64(-3)),
        ("list", str_value("[1, 2]")),
        ("shown", str_value("display")),
        ("late", DecodedValue::U64(5)),
    ];
    let got = fields(inner);
    let got: Vec<_> = got.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    assert_eq!(got, expected);
    assert!(events.iter().all(|e| e.tid == gettid()));
}

#[test]
fn a_span_entered_twice_gives_two_durations() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            let span = tracing::info_span!("poll");
            span.in_scope(|| {});
            span.in_scope(|| {});
        })
    });
    assert_eq!(events.len(), 2, "same thread: no async pair: {events:?}");
    assert!(events.iter().all(|e| e.name == "poll" && e.is_complete()));
    assert!(events[0].end() <= events[1].start);
}

#[test]
fn repeated_spans_keep_their_fields_on_the_one_announcement_path() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            // After the first, each span of a name ends on the installed context's path.
            for i in 0..3u64 {
                let span = tracing::info_span!(
                    "step",
                    i,
                    neg = -(i as i64),
                    ok = i % 2 == 0,
                    late = tracing::field::Empty,
                );
                span.record("late", i * 10);
                span.in_scope(|| {});
            }
            // Four scalar fields are kept inline; a fifth recorded later moves them out.
            for i in 0..2u64 {
                let span = tracing::info_span!(
                    "wide",
                    a = i,
                    b = 1u64,
                    c = 2u64,
                    d = 3u64,
                    e = tracing::field::Empty,
                );
                span.in_scope(|| {});
                span.record("e", 4u64);
                span.in_scope(|| {});
            }
        })
    });
    let steps: Vec<&Ev> = events.iter().filter(|e| e.name == "step").collect();
    assert_eq!(steps.len(), 3, "{events:?}");
    for (i, step) in (0u64..).zip(&steps) {
        let expected = [
            ("i".to_owned(), DecodedValue::U64(i)),
            ("neg".to_owned(), DecodedValue::I64(-(i as i64))),
            ("ok".to_owned(), DecodedValue::Bool(i % 2 == 0)),
            ("late".to_owned(), DecodedValue::U64(i * 10)),
        ];
        assert_eq!(fields(step), expected, "step {i}");
        assert!(step.is_complete());
    }
    let wide: Vec<&Ev> = events.iter().filter(|e| e.name == "wide").collect();
    assert_eq!(wide.len(), 4, "{events:?}");
    for (n, span) in wide.iter().enumerate() {
        let i = (n / 2) as u64;
        assert_eq!(span.arg("a"), Some(&DecodedValue::U64(i)), "wide {n}");
        assert_eq!(span.arg("d"), Some(&DecodedValue::U64(3)), "wide {n}");
        let e = (n % 2 == 1).then_some(&DecodedValue::U64(4));
        assert_eq!(
            span.arg("e"),
            e,
            "wide {n}: recorded before the second entry only"
        );
    }
}

#[test]
fn events_become_instants_named_by_their_message() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            tracing::info!(count = 3u64, "hello {}", "world");
            tracing::warn!(target: "net", flag = false);
            tracing::event!(Level::DEBUG, detail = ?Some(1), "");
        })
    });
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(events.iter().all(|e| e.kind == DecodedEventKind::Instant));
    let hello = only(&events, "hello world");
    assert_eq!(hello.category, "api::tracing_layer");
    assert_eq!(
        hello.args,
        [
            ("count".to_owned(), DecodedValue::U64(3)),
            ("level".to_owned(), str_value("INFO")),
        ]
    );
    let net = &events[1];
    assert_eq!(net.category, "net");
    assert!(
        net.name.starts_with("event tests/api/tracing_layer.rs:"),
        "{}",
        net.name
    );
    assert_eq!(net.arg("flag"), Some(&DecodedValue::Bool(false)));
    assert_eq!(net.arg("level"), Some(&str_value("WARN")));
    // An empty message falls back to the metadata name.
    assert!(events[2].name.starts_with("event "));
    assert_eq!(events[2].arg("detail"), Some(&str_value("Some(1)")));
}

#[test]
fn a_message_given_as_a_str_names_the_event_as_a_formatted_one_does() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            tracing::info!(message = "plain", n = 1u64);
            tracing::info!(message = %"shown");
        })
    });
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].name, "plain");
    assert_eq!(events[0].arg("message"), None, "{:?}", events[0].args);
    assert_eq!(events[0].arg("n"), Some(&DecodedValue::U64(1)));
    assert_eq!(events[1].name, "shown");
}

/// A value whose `Debug` panics.
struct PanickingDebug;

impl std::fmt::Debug for PanickingDebug {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        panic!("a Debug that panics")
    }
}

#[test]
fn a_panic_in_a_recorded_values_debug_leaves_the_span_usable() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            let span = tracing::info_span!("kept", x = tracing::field::Empty, n = 1u64);
            // Inside the span: the unwind exits it (the guard's drop runs the layer's exit).
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                span.in_scope(|| span.record("x", tracing::field::debug(PanickingDebug)));
            }));
            assert!(caught.is_err(), "the program's panic reaches the program");
            span.record("n", 2u64);
            span.in_scope(|| {});
        })
    });
    let kept: Vec<&Ev> = events.iter().filter(|e| e.name == "kept").collect();
    assert_eq!(kept.len(), 2, "both enters are written: {events:?}");
    assert!(kept.iter().all(|e| e.arg("x").is_none()));
    assert_eq!(kept[1].arg("n"), Some(&DecodedValue::U64(2)));
}

/// The layer given twice shares each span's entry in its table: spans that cross threads
/// get one async pair each, however many copies of the layer close them.
#[test]
fn the_layer_given_twice_writes_one_async_pair_per_span_that_moves() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer_twice(|| {
            let a = tracing::info_span!("a");
            let b = tracing::info_span!("b");
            let dispatch = tracing::dispatcher::get_default(|d| d.clone());
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    a.in_scope(|| {});
                    b.in_scope(|| {});
                    drop(a);
                    drop(b);
                });
            })
            .join()
            .unwrap();
        })
    });
    let count = |name: &str, end: bool| {
        events
            .iter()
            .filter(|e| e.name == name)
            .filter(|e| match e.kind {
                DecodedEventKind::AsyncBegin { .. } => !end,
                DecodedEventKind::AsyncEnd { .. } => end,
                _ => false,
            })
            .count()
    };
    assert_eq!(
        [
            count("a", false),
            count("a", true),
            count("b", false),
            count("b", true)
        ],
        [1, 1, 1, 1],
        "{events:?}"
    );
}

#[test]
fn the_layer_given_twice_writes_each_span_twice_and_does_not_panic() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer_twice(|| {
            tracing::info_span!("twice", n = 3u64).in_scope(|| {});
        })
    });
    let twice: Vec<&Ev> = events.iter().filter(|e| e.name == "twice").collect();
    assert_eq!(twice.len(), 2, "{events:?}");
    assert!(twice
        .iter()
        .all(|e| e.arg("n") == Some(&DecodedValue::U64(3))));
}

/// Eight text fields of 4 096 bytes each (each at the layer's own limit) exceed one record:
/// the event and the span are written with them cut to fit, not dropped (`trace` asserts
/// nothing was dropped), on the first call and on the memoised path after.
#[test]
fn events_and_spans_whose_texts_exceed_a_record_are_written_with_them_cut() {
    let _s = serial();
    let long = "y".repeat(5000);
    let l = long.as_str();
    let ((), events) = trace(|| {
        with_layer(|| {
            for _ in 0..2 {
                tracing::info!(
                    a = l,
                    b = l,
                    c = l,
                    d = l,
                    e = l,
                    f = l,
                    g = l,
                    h = l,
                    "big"
                );
            }
            tracing::info_span!(
                "wide",
                a = l,
                b = l,
                c = l,
                d = l,
                e = l,
                f = l,
                g = l,
                h = l
            )
            .in_scope(|| {});
        })
    });
    assert_eq!(events.len(), 3, "{events:?}");
    for event in &events {
        let texts: Vec<usize> = event
            .args
            .iter()
            .filter(|(name, _)| name != "level" && name != "span_id")
            .map(|(name, value)| match value {
                DecodedValue::Str(text) if text.bytes().all(|b| b == b'y') => text.len(),
                other => panic!("{name}: {other:?}"),
            })
            .collect();
        assert_eq!(texts.len(), 8, "{}: {:?}", event.name, event.args);
        assert!(
            texts.iter().all(|n| (3_000..4_096).contains(n)),
            "{}: {texts:?}",
            event.name
        );
    }
    assert_eq!(
        (
            events[0].name.as_str(),
            events[1].name.as_str(),
            events[2].name.as_str()
        ),
        ("big", "big", "wide")
    );
}

#[test]
fn repeated_events_keep_their_message_and_fields_on_the_one_announcement_path() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            // After the first, each event of a call site goes the installed context's path.
            for i in 0..3u64 {
                tracing::info!(count = i, text = "t", "tick {i}");
                tracing::warn!(flag = i == 1);
            }
        })
    });
    assert_eq!(events.len(), 6, "{events:?}");
    for (i, pair) in (0u64..).zip(events.chunks(2)) {
        let (tick, bare) = (&pair[0], &pair[1]);
        assert_eq!(tick.name, format!("tick {i}"));
        assert_eq!(tick.category, "api::tracing_layer");
        assert_eq!(
            tick.args,
            [
                ("count".to_owned(), DecodedValue::U64(i)),
                ("text".to_owned(), str_value("t")),
                ("level".to_owned(), str_value("INFO")),
            ],
            "tick {i}"
        );
        assert!(
            bare.name.starts_with("event tests/api/tracing_layer.rs:"),
            "{}",
            bare.name
        );
        assert_eq!(bare.arg("flag"), Some(&DecodedValue::Bool(i == 1)));
        assert_eq!(bare.arg("level"), Some(&str_value("WARN")));
        assert!(tick.tid == gettid() && bare.tid == gettid());
    }
}

#[test]
fn repeated_events_with_text_fields_among_scalars_keep_each_in_its_place() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            for i in 0..2u64 {
                tracing::info!(a = i, s = "text", b = 7u64, d = ?(i, "x"), "outer {i}");
            }
        })
    });
    assert_eq!(events.len(), 2, "{events:?}");
    for (i, outer) in (0u64..).zip(&events) {
        assert_eq!(outer.name, format!("outer {i}"));
        assert_eq!(
            outer.args,
            [
                ("a".to_owned(), DecodedValue::U64(i)),
                ("s".to_owned(), str_value("text")),
                ("b".to_owned(), DecodedValue::U64(7)),
                ("d".to_owned(), str_value(&format!("({i}, \"x\")"))),
                ("level".to_owned(), str_value("INFO")),
            ],
            "outer {i}"
        );
    }
}

#[test]
fn span_fields_of_empty_text_are_written_as_empty_strings() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            for i in 0..2u64 {
                tracing::info_span!("blank", note = "", n = i).in_scope(|| {});
            }
        })
    });
    assert_eq!(events.len(), 2, "{events:?}");
    for (i, span) in (0u64..).zip(&events) {
        assert!(span.is_complete());
        assert_eq!(
            fields(span),
            [
                ("note".to_owned(), str_value("")),
                ("n".to_owned(), DecodedValue::U64(i)),
            ]
        );
    }
}

/// Emits an event of its own when formatted.
struct Noisy;

impl std::fmt::Debug for Noisy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        tracing::info!(depth = 2u64, "inner");
        f.write_str("noisy")
    }
}

/// Marker the child prints once its checks passed.
const NESTED_CHILD_PASSED: &str = "nested-events-child: passed";

/// Set by the parent in the child's environment.
const NESTED_CHILD_ENV: &str = "FXTRACE_NESTED_EVENTS_CHILD";

/// Child of `an_event_formatted_inside_another_events_field_is_written_too`: `tracing`
/// hands an event emitted inside a subscriber's callback to that subscriber only when it is
/// the global default (a scoped default is not re-entered), which a test binary's shared
/// process cannot set: hence a process of its own.
#[test]
#[ignore = "child process of an_event_formatted_inside_another_events_field_is_written_too"]
fn nested_events_child() {
    // Run by the parent test only: it sets a global default, which the tests sharing a
    // process (`--include-ignored`) must not see.
    if std::env::var_os(NESTED_CHILD_ENV).is_none() {
        println!("nested_events_child: skipped (run only by its parent test)");
        return;
    }
    let subscriber = tracing_subscriber::registry().with(TracingLayer::new());
    tracing::subscriber::set_global_default(subscriber).expect("first global default");
    let ((), events) = trace(|| {
        for i in 0..2u64 {
            tracing::info!(a = i, noisy = ?Noisy, "outer {i}");
        }
    });
    assert_eq!(events.len(), 4, "{events:?}");
    for (i, pair) in (0u64..).zip(events.chunks(2)) {
        // The inner event is written first: the outer one once its fields are formatted.
        let (inner, outer) = (&pair[0], &pair[1]);
        assert_eq!(inner.name, "inner");
        assert_eq!(inner.arg("depth"), Some(&DecodedValue::U64(2)));
        assert_eq!(outer.name, format!("outer {i}"));
        assert_eq!(
            outer.args,
            [
                ("a".to_owned(), DecodedValue::U64(i)),
                ("noisy".to_owned(), str_value("noisy")),
                ("level".to_owned(), str_value("INFO")),
            ],
            "outer {i}"
        );
    }
    println!("{NESTED_CHILD_PASSED}");
}

#[test]
fn an_event_formatted_inside_another_events_field_is_written_too() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tracing_layer::nested_events_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(NESTED_CHILD_ENV, "1")
        .output()
        .expect("spawn the child test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(NESTED_CHILD_PASSED),
        "child: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn repeated_events_larger_than_an_installed_record_are_written_whole() {
    let _s = serial();
    // A message and a text field longer than an installed record's payload (15 words): after
    // the first event, each takes the installed path's reserved encoding.
    let long = "x".repeat(200);
    let ((), events) = trace(|| {
        with_layer(|| {
            for i in 0..3u64 {
                tracing::info!(count = i, text = long.as_str(), "{long} {i}");
            }
        })
    });
    assert_eq!(events.len(), 3, "{events:?}");
    for (i, event) in (0u64..).zip(&events) {
        assert_eq!(event.name, format!("{long} {i}"));
        assert_eq!(
            event.args,
            [
                ("count".to_owned(), DecodedValue::U64(i)),
                ("text".to_owned(), str_value(&long)),
                ("level".to_owned(), str_value("INFO")),
            ],
            "event {i}"
        );
    }
}

#[test]
fn repeated_events_of_every_payload_size_are_written_whole() {
    let _s = serial();
    // Messages of 1 to 120 bytes from one call site: after the first event, each takes the
    // installed path, whose record payload (timestamp, message, `count`, `level`) crosses the
    // block copied for small records (8 words), then the largest installed payload (15
    // words), then goes reserved.
    let ((), events) = trace(|| {
        with_layer(|| {
            for len in 1..=120u64 {
                let message = "m".repeat(len as usize);
                tracing::info!(count = len, "{message}");
            }
        })
    });
    assert_eq!(events.len(), 120, "{events:?}");
    for (len, event) in (1u64..).zip(&events) {
        assert_eq!(event.name, "m".repeat(len as usize));
        assert_eq!(
            event.args,
            [
                ("count".to_owned(), DecodedValue::U64(len)),
                ("level".to_owned(), str_value("INFO")),
            ],
            "message of {len} bytes"
        );
    }
}

#[test]
fn too_many_fields_are_counted() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            tracing::info!(
                a = 1,
                b = 2,
                c = 3,
                d = 4,
                e = 5,
                f = 6,
                g = 7,
                h = 8,
                i = 9,
                j = 10,
                k = 11,
                l = 12,
                m = 13,
                n = 14,
                o = 15,
                p = 16,
                "many"
            );
        })
    });
    let many = only(&events, "many");
    assert_eq!(many.args.len(), 15);
    assert_eq!(many.arg("m"), Some(&DecodedValue::I64(13)));
    assert_eq!(many.arg("n"), None);
    assert_eq!(many.arg("fields_dropped"), Some(&DecodedValue::U32(3)));
    assert_eq!(many.arg("level"), Some(&str_value("INFO")));
}

#[test]
fn a_span_that_crosses_threads_gets_an_async_pair() {
    let _s = serial();
    let ((creator, worker), events) = trace(|| {
        with_layer(|| {
            let span = tracing::info_span!("task", job = 4u64);
            let creator = gettid();
            let dispatch = tracing::dispatcher::get_default(|d| d.clone());
            let worker = std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    span.in_scope(|| tracing::info!("working"));
                    drop(span);
                });
                gettid()
            })
            .join()
            .unwrap();
            (creator, worker)
        })
    });
    assert_ne!(creator, worker);
    let begin = events
        .iter()
        .find(|e| matches!(e.kind, DecodedEventKind::AsyncBegin { .. }))
        .expect("async begin");
    let end = events
        .iter()
        .find(|e| matches!(e.kind, DecodedEventKind::AsyncEnd { .. }))
        .expect("async end");
    let (DecodedEventKind::AsyncBegin { id: b }, DecodedEventKind::AsyncEnd { id: e }) =
        (begin.kind, end.kind)
    else {
        unreachable!()
    };
    assert_eq!(b, e);
    assert_eq!(begin.tid, creator, "begins on the creating thread");
    assert_eq!(end.tid, worker);
    assert_eq!(begin.arg("job"), Some(&DecodedValue::U64(4)));
    let run = events.iter().find(|e| e.is_complete()).expect("duration");
    assert_eq!((run.name.as_str(), run.tid), ("task", worker));
    assert!(begin.start <= run.start && run.end() <= end.start);
    let working = only(&events, "working");
    assert_eq!(working.tid, worker);
}

#[test]
fn a_span_still_entered_on_another_thread_when_the_trace_stops_has_its_async_begin() {
    let _s = serial();
    let subscriber = tracing_subscriber::registry().with(TracingLayer::new());
    let dispatch = tracing::Dispatch::new(subscriber);
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (worker, events) = trace(|| {
        let span = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("task"));
        let dispatch = dispatch.clone();
        let worker = std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                let _entered = span.enter();
                entered_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            });
        });
        entered_rx.recv().unwrap();
        worker
    });
    release_tx.send(()).unwrap();
    worker.join().unwrap();
    let begins = events
        .iter()
        .filter(|e| matches!(e.kind, DecodedEventKind::AsyncBegin { .. }))
        .count();
    assert_eq!(begins, 1, "{events:?}");
    assert!(!events.iter().any(|e| e.is_complete()), "{events:?}");
}

#[test]
fn a_span_entered_while_another_context_starts_and_stops_keeps_its_duration() {
    use fxtrace::buffer::TraceBuffer;
    use fxtrace::engine::record::start_trace;
    use fxtrace::engine::{CategoryFilter, Context, ContextConfig, NoHandler, StartMode};

    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            let outer = tracing::info_span!("outer").entered();
            // Another context of the process (not the installed one) starts and stops a trace
            // of its own: the installed trace runs on.
            let buffer = TraceBuffer::create(1 << 20).expect("memfd");
            let other = Context::new(buffer, ContextConfig::default(), Arc::new(NoHandler))
                .expect("context");
            assert!(start_trace(&other, StartMode::ClearEntire, CategoryFilter::all()).unwrap());
            tracing::info_span!("inner").in_scope(|| {});
            other.stop(std::time::Duration::from_secs(5)).expect("stop");
            tracing::info_span!("after").in_scope(|| {});
            drop(outer);
        })
    });
    let mut names: Vec<&str> = events
        .iter()
        .filter(|e| e.is_complete())
        .map(|e| e.name.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["after", "inner", "outer"], "{events:?}");
}

#[test]
fn a_span_entered_on_both_threads_gets_one_async_pair_and_each_duration() {
    let _s = serial();
    let ((creator, worker), events) = trace(|| {
        with_layer(|| {
            let span = tracing::info_span!("task");
            let creator = gettid();
            span.in_scope(|| {});
            let dispatch = tracing::dispatcher::get_default(|d| d.clone());
            let moved = span.clone();
            let worker = std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    moved.in_scope(|| {});
                    moved.in_scope(|| {});
                });
                gettid()
            })
            .join()
            .unwrap();
            span.in_scope(|| {});
            (creator, worker)
        })
    });
    let count = |f: fn(&DecodedEventKind) -> bool| events.iter().filter(|e| f(&e.kind)).count();
    assert_eq!(
        count(|k| matches!(k, DecodedEventKind::AsyncBegin { .. })),
        1,
        "{events:?}"
    );
    assert_eq!(count(|k| matches!(k, DecodedEventKind::AsyncEnd { .. })), 1);
    let tids: Vec<u64> = events
        .iter()
        .filter(|e| e.is_complete())
        .map(|e| e.tid)
        .collect();
    assert_eq!(
        tids.iter().filter(|&&t| t == creator).count(),
        2,
        "{tids:?}"
    );
    assert_eq!(tids.iter().filter(|&&t| t == worker).count(), 2, "{tids:?}");
}

/// Counts the events it sees.
struct Counting(Arc<AtomicUsize>);

impl<S: Subscriber> Layer<S> for Counting {
    fn on_event(&self, _: &tracing::Event<'_>, _: Context<'_, S>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn disabled_categories_write_nothing_and_other_layers_still_see_everything() {
    let _s = serial();
    let seen = Arc::new(AtomicUsize::new(0));
    let run = |seen: Arc<AtomicUsize>| {
        let subscriber = tracing_subscriber::registry()
            .with(TracingLayer::new())
            .with(Counting(seen));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "off", "dropped by the filter");
            tracing::info!(target: "on", "kept");
            tracing::info_span!(target: "off", "quiet").in_scope(|| {});
        })
    };
    // No trace at all.
    run(seen.clone());
    assert_eq!(seen.load(Ordering::Relaxed), 2);
    let ((), events) = trace_with(&["on"], || run(seen.clone()));
    assert_eq!(seen.load(Ordering::Relaxed), 4);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].category.as_str(), events[0].name.as_str()),
        ("on", "kept")
    );
}

#[cfg(feature = "instrument")]
#[test]
fn traced_functions_and_tracing_spans_nest_in_one_trace() {
    let _s = serial();
    #[fxtrace::traced(category = "tracing_layer")]
    fn step() {
        tracing::info_span!("inside").in_scope(|| {});
    }
    let ((), events) = trace(|| with_layer(step));
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].name, "inside");
    assert!(events[1].name.ends_with("::step"), "{}", events[1].name);
    assert!(events[0].inside(&events[1]));
}

/// The issue-33 case: a long-lived span (a connection) created before the trace started,
/// entered during it. Its durations are in the trace, named and categorised from its call
/// site, with its id; the fields it was created with are gone (an argument says so), one
/// recorded during the trace is kept. Its child, created during the trace, nests inside.
#[test]
fn a_span_created_before_a_standalone_session_is_recorded_from_its_first_entry() {
    let _s = serial();
    with_layer(|| {
        let connection =
            tracing::info_span!("connection", peer = 7u64, bytes = tracing::field::Empty);
        // Entered with no trace running: nothing to write, nothing kept.
        connection.in_scope(|| {});
        let ((), events) = trace(|| {
            connection.in_scope(|| {
                tracing::info_span!("request", n = 1u64).in_scope(|| {});
            });
            connection.record("bytes", 512u64);
            connection.in_scope(|| {});
        });
        let polls: Vec<&Ev> = events.iter().filter(|e| e.name == "connection").collect();
        assert_eq!(polls.len(), 2, "{events:?}");
        assert!(polls.iter().all(|e| e.is_complete() && e.tid == gettid()));
        assert!(polls.iter().all(|e| e.category == "api::tracing_layer"));
        let before = str_value("recorded before the trace");
        assert_eq!(fields(polls[0]), [("fields".to_owned(), before.clone())]);
        assert_eq!(
            fields(polls[1]),
            [
                ("bytes".to_owned(), DecodedValue::U64(512)),
                ("fields".to_owned(), before)
            ]
        );
        assert_eq!(span_id(polls[0]), span_id(polls[1]), "one span, one id");
        assert_eq!(span_id(polls[0]), connection.id().unwrap().into_u64());
        let request = only(&events, "request");
        assert!(request.inside(polls[0]));
        assert_eq!(request.arg("n"), Some(&DecodedValue::U64(1)));
        assert!(
            !events
                .iter()
                .any(|e| matches!(e.kind, DecodedEventKind::AsyncBegin { .. })),
            "entered on one thread only: no async pair: {events:?}"
        );
    });
}

/// A span created before the trace that crosses threads during it: its async begin is at its
/// first entry in the trace, on that thread, with the async id its durations carry.
#[test]
fn a_span_created_before_the_trace_that_crosses_threads_gets_its_async_pair_from_its_first_entry() {
    let _s = serial();
    with_layer(|| {
        let task = tracing::info_span!("task", job = 3u64);
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        let ((first, worker), events) = trace(|| {
            task.in_scope(|| {});
            let first = gettid();
            let worker = std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    task.in_scope(|| {});
                    drop(task);
                });
                gettid()
            })
            .join()
            .unwrap();
            (first, worker)
        });
        let kind_of = |f: fn(&DecodedEventKind) -> Option<u64>| -> Vec<(u64, &Ev)> {
            events
                .iter()
                .filter_map(|e| f(&e.kind).map(|id| (id, e)))
                .collect()
        };
        let begins = kind_of(|k| match k {
            DecodedEventKind::AsyncBegin { id } => Some(*id),
            _ => None,
        });
        let ends = kind_of(|k| match k {
            DecodedEventKind::AsyncEnd { id } => Some(*id),
            _ => None,
        });
        assert_eq!((begins.len(), ends.len()), (1, 1), "{events:?}");
        let (id, begin) = begins[0];
        assert_eq!(ends[0].0, id);
        assert_eq!(
            begin.tid, first,
            "begins where it was first entered in the trace"
        );
        assert_eq!(ends[0].1.tid, worker);
        let polls: Vec<&Ev> = events.iter().filter(|e| e.is_complete()).collect();
        assert_eq!(polls.len(), 2, "{events:?}");
        assert_eq!(
            polls.iter().map(|e| e.tid).collect::<Vec<_>>(),
            [first, worker]
        );
        assert!(polls.iter().all(|e| span_id(e) == id), "{polls:?}");
        assert!(begin.start <= polls[0].start);
        assert_eq!(
            begin.arg("fields"),
            Some(&str_value("recorded before the trace"))
        );
    });
}

/// A span recorded in one trace and entered again in the next keeps its fields there.
#[test]
fn a_span_recorded_in_an_earlier_trace_keeps_its_fields_in_the_next() {
    let _s = serial();
    with_layer(|| {
        let (span, first) = trace(|| {
            let span = tracing::info_span!("session", user = 42u64);
            span.in_scope(|| {});
            span
        });
        let ((), second) = trace(|| span.in_scope(|| {}));
        for events in [&first, &second] {
            let session = only(events, "session");
            assert_eq!(
                fields(session),
                [("user".to_owned(), DecodedValue::U64(42))]
            );
        }
    });
}

/// Every duration of a span that crosses threads carries the id of its async pair, so that
/// a reader can group the polls of one task.
#[test]
fn the_durations_of_a_span_that_crosses_threads_carry_the_id_of_its_async_pair() {
    let _s = serial();
    let ((), events) = trace(|| {
        with_layer(|| {
            let dispatch = tracing::dispatcher::get_default(|d| d.clone());
            let tasks: Vec<_> = (0..2u64).map(|n| tracing::info_span!("task", n)).collect();
            for task in &tasks {
                task.in_scope(|| {});
            }
            std::thread::spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    for task in &tasks {
                        task.in_scope(|| {});
                    }
                });
            })
            .join()
            .unwrap();
        })
    });
    for n in 0..2u64 {
        let polls: Vec<&Ev> = events
            .iter()
            .filter(|e| e.is_complete() && e.arg("n") == Some(&DecodedValue::U64(n)))
            .collect();
        let begin = events
            .iter()
            .find(|e| {
                matches!(e.kind, DecodedEventKind::AsyncBegin { .. })
                    && e.arg("n") == Some(&DecodedValue::U64(n))
            })
            .expect("async begin");
        let DecodedEventKind::AsyncBegin { id } = begin.kind else {
            unreachable!()
        };
        assert_eq!(polls.len(), 2, "{events:?}");
        assert!(
            polls.iter().all(|e| span_id(e) == id),
            "task {n}: {events:?}"
        );
    }
}

/// Sets the table of spans' bound back when dropped (a failed assertion included).
struct SpanTableLimit(usize);

impl SpanTableLimit {
    fn new(levels: usize) -> Self {
        Self(fxtrace::test_support::limit_span_table(levels))
    }
}

impl Drop for SpanTableLimit {
    fn drop(&mut self) {
        fxtrace::test_support::limit_span_table(self.0);
    }
}

/// The table of spans full (bounded to its first level, 2 048 slots, for the test): the
/// spans it cannot keep have no durations, each counted as a dropped record, and none is
/// lost silently; once closes make room, such a span is taken in at its next enter, an
/// argument saying why the fields it was created with are missing.
#[test]
fn spans_beyond_a_full_table_are_counted_as_dropped_then_taken_in_when_room_is_made() {
    use fxtrace::buffer::header::BufferingMode;
    use fxtrace::standalone::{self, StandaloneConfig};

    const SPANS: usize = 3000;
    let _s = serial();
    let _limit = SpanTableLimit::new(1);
    let session = standalone::start_with(StandaloneConfig::new(BufferingMode::Oneshot, 4 << 20))
        .expect("standalone session");
    with_layer(|| {
        let spans: Vec<tracing::Span> = (0..SPANS as u64)
            .map(|n| tracing::info_span!("many", n))
            .collect();
        for span in &spans {
            span.in_scope(|| {});
        }
        // Room made: the last span (not kept: created last) is taken in at its enter.
        let last = spans.last().expect("spans").clone();
        drop(spans);
        last.in_scope(|| {});
    });
    let (bytes, report) = session.finish_to_vec().expect("finish");
    let events = traced_support::decode_events(&bytes);
    let many: Vec<&Ev> = events.iter().filter(|e| e.name == "many").collect();
    let written = many.len() - 1;
    let dropped = report.stop.records_dropped as usize;
    assert!(
        dropped > 0 && written >= 1024,
        "{written} written, {dropped} dropped"
    );
    assert_eq!(
        written + dropped,
        SPANS,
        "every duration written or counted"
    );
    let taken_in = many.last().expect("the last span's duration");
    assert_eq!(taken_in.arg("n"), None, "{taken_in:?}");
    assert_eq!(
        taken_in.arg("fields"),
        Some(&str_value("not kept: the table of spans was full"))
    );
    assert!(many[..written].iter().all(|e| e.arg("fields").is_none()));
}

/// Two subscribers whose layers were swapped in through `reload` (such a layer never joins
/// its subscriber: it gets no `on_layer`) number their spans apart: their first spans have
/// the same id in each registry, and each duration is its own span's.
#[test]
fn reloaded_layers_of_two_subscribers_keep_spans_of_the_same_id_apart() {
    use tracing_subscriber::reload;

    let _s = serial();
    let dispatch = || {
        let (layer, handle) = reload::Layer::new(TracingLayer::new());
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        handle.reload(TracingLayer::new()).expect("reload");
        dispatch
    };
    let (first, second) = (dispatch(), dispatch());
    let ((), events) = trace(|| {
        let a = tracing::dispatcher::with_default(&first, || tracing::info_span!("a", n = 1u64));
        let b = tracing::dispatcher::with_default(&second, || tracing::info_span!("b", n = 2u64));
        assert_eq!(a.id(), b.id(), "the registries' first ids on this thread");
        tracing::dispatcher::with_default(&first, || a.in_scope(|| {}));
        tracing::dispatcher::with_default(&second, || b.in_scope(|| {}));
    });
    let a = only(&events, "a");
    let b = only(&events, "b");
    assert_eq!(fields(a), [("n".to_owned(), DecodedValue::U64(1))]);
    assert_eq!(fields(b), [("n".to_owned(), DecodedValue::U64(2))]);
}

/// A layer swapped out (`reload`) while a span it kept is alive: the span's entry goes with
/// the layer, and the layer swapped in takes the span in at its next enter.
#[test]
fn a_span_outlives_the_layer_that_kept_it() {
    use tracing_subscriber::reload;

    let _s = serial();
    let (layer, handle) = reload::Layer::new(TracingLayer::new());
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let ((), events) = trace(|| {
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!("kept", n = 3u64);
            span.in_scope(|| {});
            handle.reload(TracingLayer::new()).expect("reload");
            span.in_scope(|| {});
        });
    });
    let kept: Vec<&Ev> = events.iter().filter(|e| e.name == "kept").collect();
    assert_eq!(kept.len(), 2, "{events:?}");
    assert_eq!(fields(kept[0]), [("n".to_owned(), DecodedValue::U64(3))]);
    assert_eq!(span_id(kept[0]), span_id(kept[1]));
}

/// A span created on a thread that has exited, entered and exited on a new thread
/// that reuses the dead thread's thread-local storage (glibc reuses a dead thread's stack,
/// and its static TLS with it): the duration must be on the thread that ran it. The span's
/// memo is trusted by `writer::thread_key()` (the address of the thread's writer state),
/// which the new thread shared with the dead one: the key is now a number never reused.
#[test]
fn a_span_exited_on_a_thread_that_reuses_a_dead_threads_tls_is_on_that_thread() {
    thread_local! {
        static PROBE: u8 = const { 0 };
    }
    fn probe() -> usize {
        PROBE.with(|p| p as *const u8 as usize)
    }
    let _s = serial();
    let subscriber = tracing_subscriber::registry().with(TracingLayer::new());
    let dispatch = tracing::Dispatch::new(subscriber);
    let ((creator, runner, reused), events) = trace(|| {
        let d = dispatch.clone();
        let (span, creator, creator_tls) = std::thread::spawn(move || {
            tracing::dispatcher::with_default(&d, || {
                // The first span of the call site teaches the thread's memo (its header
                // and, all its fields scalars, its names' indices); the second learns them.
                // (One call site: the memo's names are keyed by it.)
                let mut kept = None;
                for n in 5..=7u64 {
                    let span = tracing::info_span!("hop", n);
                    if n < 7 {
                        span.in_scope(|| {});
                    } else {
                        kept = Some(span);
                    }
                }
                let span = kept.expect("the last span");
                (span, gettid(), probe())
            })
        })
        .join()
        .unwrap();
        let d = dispatch.clone();
        let (runner, runner_tls) = std::thread::spawn(move || {
            tracing::dispatcher::with_default(&d, || {
                span.in_scope(|| {});
                drop(span);
            });
            (gettid(), probe())
        })
        .join()
        .unwrap();
        (creator, runner, creator_tls == runner_tls)
    });
    if !reused {
        println!("skipped: the second thread did not reuse the first one's TLS");
        return;
    }
    let run = events
        .iter()
        .find(|e| e.is_complete() && e.name == "hop" && e.arg("n") == Some(&DecodedValue::U64(7)))
        .expect("the duration of the span that moved");
    assert_ne!(creator, runner);
    assert_eq!(
        run.tid, runner,
        "creator {creator}, runner {runner}: {events:#?}"
    );
}

/// A span created while the table was full, entered (its duration counted as
/// dropped: the table is still full), then taken in by a `record` while it is entered (the
/// spans that filled the table closed meanwhile): its exit finds it and writes the duration
/// that was already counted as dropped, and the duration's note says its fields were
/// "recorded before the trace" (the `record`'s take-in ignores the span's mark of a full
/// table). Each duration is written or counted, never both; the note names the cause.
#[test]
fn a_span_counted_as_dropped_at_its_enter_is_not_also_written() {
    use fxtrace::buffer::header::BufferingMode;
    use fxtrace::standalone::{self, StandaloneConfig};

    let _s = serial();
    let _limit = SpanTableLimit::new(1);
    let session = standalone::start_with(StandaloneConfig::new(BufferingMode::Oneshot, 4 << 20))
        .expect("standalone session");
    with_layer(|| {
        let fillers: Vec<tracing::Span> = (0..5000u64)
            .map(|n| tracing::info_span!("filler", n))
            .collect();
        let late = tracing::info_span!("late", n = 1u64, m = tracing::field::Empty);
        let entered = late.enter();
        drop(fillers);
        late.record("m", 2u64);
        drop(entered);
    });
    let (bytes, report) = session.finish_to_vec().expect("finish");
    let events = traced_support::decode_events(&bytes);
    let late: Vec<&Ev> = events.iter().filter(|e| e.name == "late").collect();
    let dropped = report.stop.records_dropped as usize;
    assert_eq!(late.len() + dropped, 1, "{late:?}, {dropped} dropped");
    if let Some(late) = late.first() {
        assert_eq!(
            late.arg("fields"),
            Some(&str_value("not kept: the table of spans was full")),
            "{late:?}"
        );
    }
}

/// The async begins and ends of a trace.
fn async_pairs(events: &[Ev]) -> (usize, usize) {
    let count = |end: bool| {
        events
            .iter()
            .filter(|e| match e.kind {
                DecodedEventKind::AsyncBegin { .. } => !end,
                DecodedEventKind::AsyncEnd { .. } => end,
                _ => false,
            })
            .count()
    };
    (count(false), count(true))
}

/// Spans shared by threads that enter, exit and record them at once: every enter's
/// duration is written (or counted), none twice.
#[test]
fn spans_shared_by_threads_keep_every_duration() {
    use fxtrace::buffer::header::BufferingMode;
    use fxtrace::standalone::{self, StandaloneConfig};

    const THREADS: usize = 4;
    const ROUNDS: usize = 2000;
    let _s = serial();
    let session = standalone::start_with(StandaloneConfig::new(BufferingMode::Oneshot, 32 << 20))
        .expect("standalone session");
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(TracingLayer::new()));
    tracing::dispatcher::with_default(&dispatch, || {
        for round in 0..ROUNDS / 100 {
            let span = tracing::info_span!("shared", n = round as u64, t = tracing::field::Empty);
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (span, dispatch) = (span.clone(), dispatch.clone());
                    s.spawn(move || {
                        tracing::dispatcher::with_default(&dispatch, || {
                            for i in 0..100u64 {
                                span.in_scope(|| {});
                                if i % 10 == t as u64 {
                                    if i % 20 == 0 {
                                        span.record("t", "text");
                                    } else {
                                        span.record("t", i);
                                    }
                                }
                            }
                        })
                    });
                }
            });
        }
    });
    let (bytes, report) = session.finish_to_vec().expect("finish");
    let events = traced_support::decode_events(&bytes);
    let durations = events
        .iter()
        .filter(|e| e.is_complete() && e.name == "shared")
        .count();
    let (begins, ends) = async_pairs(&events);
    assert_eq!(
        (durations, report.stop.records_dropped, begins, ends),
        (THREADS * ROUNDS, 0, ROUNDS / 100, ROUNDS / 100)
    );
}

/// A span whose async begin is written, its layer then swapped out (`reload`): the
/// trace still gets the async end (an async begin is never left without its end).
#[test]
fn a_span_that_moved_keeps_its_async_end_when_its_layer_is_swapped_out() {
    use tracing_subscriber::reload;

    let _s = serial();
    let (layer, handle) = reload::Layer::new(TracingLayer::new());
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    let ((), events) = trace(|| {
        let span = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("moved"));
        let d = dispatch.clone();
        let moved = span.clone();
        std::thread::spawn(move || tracing::dispatcher::with_default(&d, || moved.in_scope(|| {})))
            .join()
            .unwrap();
        handle.reload(TracingLayer::new()).expect("reload");
        tracing::dispatcher::with_default(&dispatch, || drop(span));
    });
    let (begins, ends) = async_pairs(&events);
    assert_eq!((begins, ends), (1, 1), "{events:#?}");
}

/// A span created while the table was full, taken in by a `record` once room was made (not
/// by its enter): its duration's note names the full table, not the trace's start.
#[test]
fn a_span_taken_in_by_a_record_after_the_table_was_full_says_so() {
    let _s = serial();
    let _limit = SpanTableLimit::new(1);
    let ((), events) = trace(|| {
        with_layer(|| {
            let fillers: Vec<tracing::Span> = (0..5000u64)
                .map(|n| tracing::info_span!("filler", n))
                .collect();
            let late = tracing::info_span!("late", n = 1u64, m = tracing::field::Empty);
            drop(fillers);
            late.record("m", 2u64);
            late.in_scope(|| {});
        })
    });
    let late = only(&events, "late");
    assert_eq!(
        late.arg("fields"),
        Some(&str_value("not kept: the table of spans was full")),
        "{late:?}"
    );
    assert_eq!(late.arg("m"), Some(&DecodedValue::U64(2)), "{late:?}");
}

/// A span entered, its layer then swapped out (`reload`) before the exit: the exit reaches
/// the new layer, which never saw the enter, so the duration is lost; it is counted as
/// dropped, not lost silently.
#[test]
fn a_duration_lost_to_a_layer_swapped_out_while_entered_is_counted() {
    use fxtrace::buffer::header::BufferingMode;
    use fxtrace::standalone::{self, StandaloneConfig};
    use tracing_subscriber::reload;

    let _s = serial();
    let session = standalone::start_with(StandaloneConfig::new(BufferingMode::Oneshot, 4 << 20))
        .expect("standalone session");
    let (layer, handle) = reload::Layer::new(TracingLayer::new());
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
    tracing::dispatcher::with_default(&dispatch, || {
        let span = tracing::info_span!("swapped", n = 1u64);
        let entered = span.enter();
        handle.reload(TracingLayer::new()).expect("reload");
        drop(entered);
        // Later spans of the new layer are written as usual.
        tracing::info_span!("after").in_scope(|| {});
    });
    let (bytes, report) = session.finish_to_vec().expect("finish");
    let events = traced_support::decode_events(&bytes);
    assert!(events.iter().all(|e| e.name != "swapped"), "{events:?}");
    assert!(events.iter().any(|e| e.name == "after"), "{events:?}");
    assert_eq!(report.stop.records_dropped, 1);
}

/// A span entered by a thread-local's destructor, after the layer's own per-thread list of
/// spans is gone: the enter cannot be remembered, so its duration is lost; it is counted as
/// dropped, not lost silently.
#[test]
fn a_span_entered_after_its_threads_list_of_spans_is_gone_is_counted() {
    use fxtrace::buffer::header::BufferingMode;
    use fxtrace::standalone::{self, StandaloneConfig};
    use std::cell::RefCell;

    struct EnterAtExit(RefCell<Option<tracing::Span>>);
    impl Drop for EnterAtExit {
        fn drop(&mut self) {
            if let Some(span) = self.0.borrow_mut().take() {
                span.in_scope(|| {});
            }
        }
    }
    thread_local! {
        static AT_EXIT: EnterAtExit = const { EnterAtExit(RefCell::new(None)) };
    }

    let _s = serial();
    let session = standalone::start_with(StandaloneConfig::new(BufferingMode::Oneshot, 4 << 20))
        .expect("standalone session");
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(TracingLayer::new()));
    std::thread::spawn(move || {
        // Thread-locals are destroyed in the reverse order of their first use. The
        // registry's (a span of a subscriber without the layer) and the engine's (a record)
        // first: gone last, as the destructor below needs them; then this one's; then the
        // layer's: gone before it.
        let plain = tracing::Dispatch::new(tracing_subscriber::registry());
        tracing::dispatcher::with_default(&plain, || tracing::info_span!("plain").in_scope(|| {}));
        fxtrace::instant("api::tracing_layer", "warm", fxtrace::Scope::Thread, &[]);
        AT_EXIT.with(|_| {});
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!("at_exit", n = 1u64);
            span.in_scope(|| {});
            AT_EXIT.with(|at_exit| *at_exit.0.borrow_mut() = Some(span));
        });
    })
    .join()
    .unwrap();
    let (bytes, report) = session.finish_to_vec().expect("finish");
    let events = traced_support::decode_events(&bytes);
    let written = events
        .iter()
        .filter(|e| e.is_complete() && e.name == "at_exit")
        .count();
    assert_eq!((written, report.stop.records_dropped), (1, 1), "{events:?}");
}

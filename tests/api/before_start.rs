//! Calls made after a provider was initialized but before its trace started are counted as
//! dropped records of that trace (issue 13 and 14: "events written before a start are counted
//! as dropped, never silently lost"), through every way a program writes: the record API with
//! and without a call site, `#[traced]`, the `tracing` layer, direct writers. Calls of a
//! category the coming trace does not enable are not counted, and nothing is counted once the
//! context is disarmed.

#![cfg(feature = "instrument")]

use crate::traced_support::serial;

use std::sync::Arc;
use std::time::Duration;

use fxtrace::buffer::header::BufferingMode;
use fxtrace::buffer::TraceBuffer;
use fxtrace::engine::{global, start_trace, CategoryFilter, Context, ContextConfig, NoHandler};
use fxtrace::engine::{StartMode, TraceState};
use fxtrace::{instant, traced, Scope, TraceStr};

#[traced(category = "app")]
fn traced_call() -> u32 {
    7
}

fn armed_context(categories: &[&str]) -> Context {
    let buffer = TraceBuffer::create(1 << 20).expect("memfd buffer");
    let config = ContextConfig {
        mode: BufferingMode::Oneshot,
        ..ContextConfig::default()
    };
    let context = Context::new(buffer, config, Arc::new(NoHandler)).expect("context");
    context
        .arm(CategoryFilter::new(categories.iter().copied()))
        .expect("a stopped context can be armed");
    context
}

#[test]
fn calls_before_the_start_of_an_armed_context_are_counted_as_dropped() {
    let _serial = serial();
    let context = armed_context(&["app"]);
    global::install(context.clone()).expect("no other context installed");
    // Before the start: five calls of "app", two of a category the trace will not enable.
    instant("app", "static name", Scope::Thread, &[]);
    let inline_name = String::from("inline name");
    instant("app", TraceStr::Inline(&inline_name), Scope::Thread, &[]);
    assert_eq!(traced_call(), 7);
    {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(fxtrace::TracingLayer::new());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "app", "from tracing");
        });
    }
    assert!(context.acquire().is_none(), "not started: no writer");
    instant("other", "not in the trace", Scope::Thread, &[]);
    instant("other", "not in the trace", Scope::Process, &[]);

    assert!(start_trace(
        &context,
        StartMode::ClearEntire,
        CategoryFilter::new(["app"])
    )
    .unwrap());
    instant("app", "after the start", Scope::Thread, &[]);
    let context = global::uninstall().expect("uninstall").expect("installed");
    let report = context.stop(Duration::from_secs(5)).expect("stop");
    assert_eq!(
        report.records_dropped, 5,
        "every call of an enabled category before the start is one dropped record"
    );
    let header = context.buffer().header().load();
    assert_eq!(header.num_records_dropped, 5, "and the manager reads it");
    assert_eq!(
        header.dropped_before_start(),
        5,
        "as drops before the start, not a full buffer"
    );
}

#[test]
fn drops_before_a_retaining_start_or_with_no_start_are_told_apart_in_the_header() {
    let _serial = serial();
    // A retaining start (the trace's buffer is kept): the header still says the drops were
    // before the start, not a full buffer.
    let context = armed_context(&["app"]);
    global::install(context.clone()).expect("no other context installed");
    for _ in 0..3 {
        instant("app", "before", Scope::Thread, &[]);
    }
    assert!(start_trace(&context, StartMode::Retain, CategoryFilter::new(["app"])).unwrap());
    instant("app", "after the start", Scope::Thread, &[]);
    let context = global::uninstall().expect("uninstall").expect("installed");
    context.stop(Duration::from_secs(5)).expect("stop");
    let header = context.buffer().header().load();
    assert_eq!(
        (header.num_records_dropped, header.dropped_before_start()),
        (3, 3)
    );

    // Armed, never started (the program ended before its start came): the running counts.
    let context = armed_context(&["app"]);
    global::install(context.clone()).expect("no other context installed");
    instant("app", "before", Scope::Thread, &[]);
    instant("app", "before", Scope::Thread, &[]);
    let header = context.buffer().header().load();
    assert_eq!(
        (header.num_records_dropped, header.dropped_before_start()),
        (2, 2)
    );
    let context = global::uninstall().expect("uninstall").expect("installed");
    assert_eq!(context.disarm(), 2);
}

#[test]
fn a_disarmed_context_counts_nothing_more() {
    let _serial = serial();
    let context = armed_context(&[]);
    global::install(context.clone()).expect("no other context installed");
    instant("any", "before", Scope::Thread, &[]);
    instant("any", "before", Scope::Thread, &[]);
    assert_eq!(context.disarm(), 2, "two calls counted while armed");
    instant("any", "after disarm", Scope::Thread, &[]);
    assert_eq!(context.disarm(), 0, "not armed any more");
    let context = global::uninstall().expect("uninstall").expect("installed");
    assert_eq!(context.state(), TraceState::Stopped);
    // A later start without arming begins a trace with no drops.
    assert!(start_trace(&context, StartMode::ClearEntire, CategoryFilter::all()).unwrap());
    let report = context.stop(Duration::from_secs(5)).expect("stop");
    assert_eq!(report.records_dropped, 0);
}

/// Threads calling in a tight loop on an armed context do not hold its start back (the count
/// takes no lock the start needs; an earlier version took the switch mutex per call and the
/// start waited behind two looping threads for over a minute on a loaded machine), and every
/// call is either counted as dropped or written.
#[test]
fn calls_in_a_loop_do_not_hold_the_start_back() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let _serial = serial();
    let context = armed_context(&["app"]);
    global::install(context.clone()).expect("no other context installed");
    let stop = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    instant("app", "looping", Scope::Thread, &[]);
                    n += 1;
                }
                calls.fetch_add(n, Ordering::Relaxed);
            });
        }
        // Let both threads run into the armed path first.
        while context.stats().records_dropped < 1000 {
            std::thread::yield_now();
        }
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let starter = context.clone();
        s.spawn(move || {
            let started = start_trace(
                &starter,
                StartMode::ClearEntire,
                CategoryFilter::new(["app"]),
            );
            let _ = done_tx.send(started.map_err(|e| e.to_string()));
        });
        let started = done_rx.recv_timeout(Duration::from_secs(30));
        stop.store(true, Ordering::Relaxed);
        assert!(
            matches!(started, Ok(Ok(true))),
            "the start did not complete beside looping callers: {started:?}"
        );
    });
    let context = global::uninstall().expect("uninstall").expect("installed");
    let stop_report = context.stop(Duration::from_secs(5)).expect("stop");
    let calls = calls.load(Ordering::Relaxed);
    assert!(stop_report.records_dropped >= 1000, "{stop_report:?}");
    assert!(
        stop_report.records_dropped <= calls,
        "{stop_report:?} of {calls} calls"
    );
}

/// The process's kernel object record names the instruction its timestamps were read with
/// (`rdtscp` by default, `rdtsc` with the cargo feature), so a reader knows which clock a
/// trace used.
#[test]
fn the_process_record_names_the_clock() {
    use fxtrace_format::{DecodedRecord, DecodedValue, Decoder, ObjectType};
    let _serial = serial();
    let session = fxtrace::standalone::start(BufferingMode::Oneshot, 1 << 20).expect("session");
    instant("app", "one", Scope::Thread, &[]);
    let (bytes, _) = session.finish_to_vec().expect("finish");
    let clocks: Vec<String> = Decoder::new(&bytes)
        .filter_map(|r| match r.expect("decodes").record {
            DecodedRecord::KernelObject {
                object_type, args, ..
            } if object_type == ObjectType::PROCESS => args
                .into_iter()
                .find(|a| a.name == fxtrace::engine::record::CLOCK_ARG)
                .map(|a| match a.value {
                    DecodedValue::Str(s) => s.into_owned(),
                    other => panic!("clock argument {other:?}"),
                }),
            _ => None,
        })
        .collect();
    assert_eq!(clocks, [fxtrace::clock::TICKS_INSTRUCTION]);
    assert!(["rdtscp", "rdtsc", "clock_gettime"].contains(&clocks[0].as_str()));
}

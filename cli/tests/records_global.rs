//! The process-wide current context, the `fxtrace::instant`/`duration`/... facade and
//! standalone sessions, end to end: archives decode, `fxtrace stats` accepts them, disabled
//! call sites write nothing, install/uninstall follow their rules.
//!
//! Every test takes `SERIAL`: there is one current context per process.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fxtrace::buffer::header::BufferingMode;
use fxtrace::buffer::TraceBuffer;
use fxtrace::engine::global::{self, GlobalError};
use fxtrace::engine::standalone::{self, StandaloneConfig, StandaloneError};
use fxtrace::engine::{CallSite, CategoryFilter, Context, ContextConfig, NoHandler, StartMode};
use fxtrace::{Arg, ArgValue, Scope, TraceStr};
use fxtrace_format::{
    Decoded, DecodedEventKind, DecodedRecord, DecodedValue, Decoder, PROVIDER_EVENT_BUFFER_OVERFLOW,
};

#[path = "../../tests/engine_support/mod.rs"]
mod engine_support;

/// One current context per process: every test takes this (and the binary is its own:
/// tests of other modules would install the global context beside these).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn decode(bytes: &[u8]) -> Vec<Decoded<'_>> {
    Decoder::new(bytes)
        .collect::<Result<Vec<_>, _>>()
        .expect("the archive decodes")
}

fn events<'a>(records: &'a [Decoded<'a>]) -> Vec<&'a fxtrace_format::DecodedEvent<'a>> {
    records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

fn by_kind(records: &[Decoded<'_>]) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for d in records {
        *out.entry(d.record.kind_name()).or_default() += 1;
    }
    out
}

/// Every facade function once, on category `cat`.
fn every_call(cat: &'static str) {
    let args = [Arg::new("k", ArgValue::U32(3))];
    fxtrace::instant(cat, "i", Scope::Thread, &args);
    fxtrace::instant(cat, "ig", Scope::Global, &[]);
    fxtrace::counter(cat, "c", 1, &args);
    fxtrace::duration_begin(cat, "d", &[]);
    fxtrace::duration_end(cat, "d", &[]);
    {
        let _g = fxtrace::duration(cat, "g");
        let _h = fxtrace::duration_with_args(cat, TraceStr::Inline("h"), &args);
    }
    fxtrace::async_begin(cat, "a", 5, &[]);
    fxtrace::async_instant(cat, "a", 5, &[]);
    fxtrace::async_end(cat, "a", 5, &[]);
    fxtrace::flow_begin(cat, "f", 6, &[]);
    fxtrace::flow_step(cat, "f", 6, &[]);
    fxtrace::flow_end(cat, "f", 6, &[]);
    fxtrace::log(cat, "a log message");
}

const EVERY_CALL_EVENTS: usize = 13;

#[test]
fn standalone_archive_decodes_and_fxtrace_stats_accepts_it() {
    let _s = serial();
    let session = standalone::start(BufferingMode::Circular, 1 << 20).unwrap();
    assert!(global::is_installed());
    every_call("e2e");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.fxt");
    let report = session.finish(&path).unwrap();
    assert!(!global::is_installed(), "finish uninstalls");
    assert_eq!(report.stop.records_dropped, 0);
    assert_eq!(report.malformed_regions, 0);

    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(report.bytes, bytes.len() as u64);
    let records = decode(&bytes);
    assert_eq!(records[0].record, DecodedRecord::Magic);
    assert!(matches!(
        &records[1].record,
        DecodedRecord::ProviderInfo { provider_id: 1, .. }
    ));
    assert!(matches!(
        records[2].record,
        DecodedRecord::Initialization { ticks_per_second } if ticks_per_second == fxtrace::clock::info().ticks_per_second
    ));
    assert_eq!(report.records, records.len() as u64 - 2);
    let kinds = by_kind(&records);
    assert_eq!(kinds.get("event"), Some(&EVERY_CALL_EVENTS));
    assert_eq!(kinds.get("log"), Some(&1));
    assert_eq!(kinds.get("thread"), Some(&1));
    let ev = events(&records);
    let complete: Vec<_> = ev
        .iter()
        .filter_map(|e| match e.kind {
            DecodedEventKind::DurationComplete { end } => Some((e.name.as_ref(), e.time, end)),
            _ => None,
        })
        .collect();
    // `h` ends first (dropped first), then `g`.
    assert_eq!(complete.len(), 2);
    assert_eq!((complete[0].0, complete[1].0), ("h", "g"));
    for (_, start, end) in &complete {
        assert!(start.ticks <= end.ticks);
    }
    assert!(
        complete[1].1.ticks <= complete[0].1.ticks && complete[0].2.ticks <= complete[1].2.ticks
    );
    let global_scope = ev.iter().find(|e| e.name == "ig").unwrap();
    assert_eq!(
        global_scope.args[0].value,
        DecodedValue::Str("global".into())
    );

    let output = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .arg("stats")
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "fxtrace stats failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("events: {EVERY_CALL_EVENTS}")),
        "{stdout}"
    );
}

#[test]
fn standalone_streaming_saves_every_buffer_in_order() {
    let _s = serial();
    let mut config = StandaloneConfig::new(BufferingMode::Streaming, 64 << 10);
    config.chunk_size = 1024;
    let session = standalone::start_with(config).unwrap();
    const N: u64 = 20_000;
    for i in 0..N {
        fxtrace::counter("stream", "n", 1, &[Arg::new("i", ArgValue::U64(i))]);
    }
    let context = session.context().clone();
    let (bytes, report) = session.finish_to_vec().unwrap();
    assert!(report.stop.wrapped_count >= 10, "{:?}", report.stop);
    let records = decode(&bytes);
    let values: Vec<u64> = events(&records)
        .iter()
        .map(|e| match e.args[0].value {
            DecodedValue::U64(v) => v,
            ref other => panic!("{other:?}"),
        })
        .collect();
    // The saver empties each buffer at once, so nothing is dropped, and the order is kept.
    assert_eq!(report.stop.records_dropped, 0);
    assert_eq!(values, (0..N).collect::<Vec<_>>());
    assert_eq!(context.records_dropped(), 0);
}

#[test]
fn oneshot_overflow_is_counted_and_reported_in_the_archive() {
    let _s = serial();
    let session = standalone::start(BufferingMode::Oneshot, 16 << 10).unwrap();
    const N: usize = 5000;
    for _ in 0..N {
        fxtrace::instant("full", "x", Scope::Thread, &[]);
    }
    let (bytes, report) = session.finish_to_vec().unwrap();
    let records = decode(&bytes);
    let written = events(&records).len();
    assert!(written > 100 && written < N);
    assert_eq!(written as u64 + report.stop.records_dropped, N as u64);
    assert!(matches!(
        records.last().unwrap().record,
        DecodedRecord::ProviderEvent { provider_id: 1, event } if event == PROVIDER_EVENT_BUFFER_OVERFLOW
    ));
}

#[test]
fn disabled_call_sites_write_nothing() {
    let _s = serial();
    // No session at all: nothing happens, nothing is enabled.
    every_call("nothing");
    assert!(!fxtrace::is_category_enabled("nothing"));
    let guard = fxtrace::duration("nothing", "early");

    let mut config = StandaloneConfig::new(BufferingMode::Oneshot, 1 << 16);
    config.categories = CategoryFilter::new(["yes"]);
    let session = standalone::start_with(config).unwrap();
    static SITE_NO: CallSite = CallSite::new("no");
    static SITE_YES: CallSite = CallSite::new("yes");
    assert!(fxtrace::is_category_enabled("yes"));
    assert!(!fxtrace::is_category_enabled("no"));
    assert!(fxtrace::is_category_enabled(&SITE_YES));
    assert!(!fxtrace::is_category_enabled(&SITE_NO));
    every_call("no");
    fxtrace::instant(&SITE_NO, "site", Scope::Thread, &[]);
    fxtrace::instant(&SITE_YES, "site", Scope::Thread, &[]);
    fxtrace::instant("yes", "plain", Scope::Thread, &[]);
    drop(guard); // began before the session: inert
    let (bytes, _) = session.finish_to_vec().unwrap();
    let records = decode(&bytes);
    let names: Vec<&str> = events(&records).iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(names, ["site", "plain"]);
    assert_eq!(by_kind(&records).get("log"), None);
    // A string record for "no" would mean a disabled site did work.
    assert!(!records
        .iter()
        .any(|d| matches!(&d.record, DecodedRecord::String { value, .. } if value == "no")));
}

#[test]
fn a_duration_spanning_two_traces_is_not_written() {
    let _s = serial();
    let first = standalone::start(BufferingMode::Oneshot, 1 << 16).unwrap();
    let guard = fxtrace::duration("span", "across");
    let _ = first.finish_to_vec().unwrap();
    let second = standalone::start(BufferingMode::Oneshot, 1 << 16).unwrap();
    drop(guard);
    let (bytes, _) = second.finish_to_vec().unwrap();
    assert!(events(&decode(&bytes)).is_empty());
}

/// The per-thread event memo (indices of a repeated category/name pair) serves one trace
/// only: in a second trace on the same thread, where the same strings get other indices,
/// every event (instants, counters, durations) still names its own strings and thread.
#[test]
fn repeated_call_sites_resolve_in_every_trace() {
    let _s = serial();
    let names = |bytes: &[u8]| -> Vec<(String, String, u64)> {
        events(&decode(bytes))
            .iter()
            .map(|e| (e.category.to_string(), e.name.to_string(), e.thread.tid))
            .collect()
    };
    let mut per_trace = Vec::new();
    for round in 0..3 {
        let session = standalone::start(BufferingMode::Circular, 1 << 20).unwrap();
        // Shift the string indices of the pair from one trace to the next.
        for shift in ["shift0", "shift1", "shift2"].iter().take(round) {
            fxtrace::instant("memo_other", *shift, Scope::Thread, &[]);
        }
        for _ in 0..3 {
            fxtrace::instant("memo_cat", "memo_instant", Scope::Thread, &[]);
            fxtrace::counter(
                "memo_cat",
                "memo_counter",
                1,
                &[Arg::new("v", ArgValue::U64(2))],
            );
            let _d = fxtrace::duration("memo_cat", "memo_span");
        }
        let (bytes, report) = session.finish_to_vec().unwrap();
        assert_eq!(report.stop.records_dropped, 0);
        let got: Vec<_> = names(&bytes).into_iter().skip(round).collect();
        per_trace.push(got);
    }
    let tid = per_trace[0][0].2;
    let expected: Vec<_> = (0..3)
        .flat_map(|_| ["memo_instant", "memo_counter", "memo_span"])
        .map(|n| ("memo_cat".to_string(), n.to_string(), tid))
        .collect();
    for got in &per_trace {
        assert_eq!(got, &expected);
    }
}

fn bare_context() -> Context {
    let buffer = TraceBuffer::create(1 << 16).unwrap();
    let ctx = Context::new(buffer, ContextConfig::default(), Arc::new(NoHandler)).unwrap();
    ctx.start(StartMode::ClearEntire, CategoryFilter::all())
        .unwrap();
    ctx
}

#[test]
fn install_replace_uninstall_rules() {
    let _s = serial();
    assert!(global::uninstall().unwrap().is_none());
    let a = bare_context();
    let b = bare_context();
    global::install(a.clone()).unwrap();
    assert!(matches!(
        global::install(b.clone()),
        Err(GlobalError::AlreadyInstalled)
    ));
    assert!(matches!(
        standalone::start(BufferingMode::Oneshot, 1 << 16),
        Err(StandaloneError::Global(GlobalError::AlreadyInstalled))
    ));
    assert_eq!(global::current().unwrap().generation(), a.generation());
    let inside = global::with_current(|_| global::uninstall().map(|_| ()));
    assert!(matches!(inside, Some(Err(GlobalError::InsideSection))));
    let old = global::replace(b.clone()).unwrap().unwrap();
    assert_eq!(old.generation(), a.generation());
    assert_eq!(
        global::with_current(|c| c.generation()),
        Some(b.generation())
    );
    let written = global::with_writer(|w| w.instant(1, "c", "n", Scope::Thread, &[]));
    assert_eq!(written, Some(Ok(())));
    let back = global::uninstall().unwrap().unwrap();
    assert_eq!(back.generation(), b.generation());
    assert!(!global::is_installed());
    assert!(global::with_current(|_| ()).is_none());
}

#[test]
fn uninstall_waits_for_sections_in_progress() {
    let _s = serial();
    let ctx = bare_context();
    global::install(ctx).unwrap();
    let entered = Arc::new(Barrier::new(2));
    let left = Arc::new(AtomicBool::new(false));
    let reader = {
        let entered = entered.clone();
        let left = left.clone();
        std::thread::spawn(move || {
            global::with_current(|c| {
                entered.wait();
                std::thread::sleep(Duration::from_millis(100));
                // The context is still usable: uninstall has not returned yet.
                assert!(c.acquire().is_some());
                left.store(true, Ordering::SeqCst);
            })
            .expect("installed")
        })
    };
    entered.wait();
    let started = Instant::now();
    let ctx = global::uninstall().unwrap().expect("was installed");
    assert!(
        left.load(Ordering::SeqCst),
        "uninstall returned while a section was using the context"
    );
    assert!(started.elapsed() >= Duration::from_millis(50));
    reader.join().unwrap();
    drop(ctx);
}

#[test]
fn many_threads_write_while_contexts_are_replaced() {
    let _s = serial();
    let stop = Arc::new(AtomicBool::new(false));
    global::install(bare_context()).unwrap();
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    fxtrace::instant("swap", "x", Scope::Thread, &[]);
                    n += 1;
                }
                n
            })
        })
        .collect();
    // Each replaced context: (its events, its drops).
    let mut replaced = Vec::new();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(2));
        let old = global::replace(bare_context()).unwrap().unwrap();
        // Once replaced, nobody reaches the old context through the global: stop succeeds
        // and the buffer is final, however long the writers go on (into the new context).
        let report = old.stop(Duration::from_secs(5)).unwrap();
        let stopped = engine_support::snapshot(old.buffer());
        std::thread::sleep(Duration::from_millis(2));
        assert!(
            stopped == engine_support::snapshot(old.buffer()),
            "a replaced context's buffer changed after its stop"
        );
        // Every record of it decodes (after a magic record, as in an archive).
        let mut records = fxtrace_format::RecordWriter::with_magic().to_bytes();
        records.extend(engine_support::final_read_raw(&stopped, 0, false));
        let decoded = decode(&records);
        let xs = events(&decoded).iter().filter(|e| e.name == "x").count() as u64;
        replaced.push((xs, report.records_dropped));
    }
    stop.store(true, Ordering::Relaxed);
    let total: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    global::uninstall().unwrap();
    let written: u64 = replaced.iter().map(|&(xs, _)| xs).sum();
    assert!(
        written > 0 && written <= total,
        "{replaced:?} of {total} calls"
    );
}

#[test]
fn a_forked_child_has_no_current_context() {
    let _s = serial();
    global::install(bare_context()).unwrap();
    // SAFETY: the child only performs atomic loads and `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = if global::is_installed() { 1 } else { 0 };
        // SAFETY: `_exit` never returns and runs no destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status));
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the child still saw the context"
    );
    assert!(global::is_installed(), "the parent keeps it");
    global::uninstall().unwrap();
}

//! The C API (`include/fxtrace.h`, `fxtrace::c_api`) called through its C ABI, against a
//! standalone session: the events decode with the right kinds, strings and values; NULL and
//! invalid UTF-8 are handled; plain calls copy their strings, `_static` calls index them;
//! category answers follow the session (cached by content, not by address); with no session
//! every call is a no-op.
//!
//! Every test takes the binary's serial lock: there is one current context per process.

use std::ffi::{c_char, c_int, CStr};

use fxtrace::buffer::header::BufferingMode;
use fxtrace::engine::standalone::{self, StandaloneConfig};
use fxtrace::engine::CategoryFilter;
use fxtrace_format::{
    Decoded, DecodedEvent, DecodedEventKind, DecodedRecord, DecodedValue, Decoder,
};

// The functions as C sees them (declared here as in `include/fxtrace.h`): this checks the
// exported names and signatures, not only the Rust paths.
extern "C" {
    fn fxtrace_instant(category: *const c_char, name: *const c_char);
    fn fxtrace_duration_begin(category: *const c_char, name: *const c_char);
    fn fxtrace_duration_end(category: *const c_char, name: *const c_char);
    fn fxtrace_counter(category: *const c_char, name: *const c_char, value: i64);
    fn fxtrace_is_category_enabled(category: *const c_char) -> c_int;
    fn fxtrace_instant_static(category: *const c_char, name: *const c_char);
    fn fxtrace_duration_begin_static(category: *const c_char, name: *const c_char);
    fn fxtrace_duration_end_static(category: *const c_char, name: *const c_char);
    fn fxtrace_counter_static(category: *const c_char, name: *const c_char, value: i64);
}

// One current context per process: the same lock as the `#[traced]` tests of this binary.
use crate::traced_support::serial;

fn session(categories: &[&str]) -> standalone::StandaloneSession {
    let mut config = StandaloneConfig::new(BufferingMode::Oneshot, 1 << 20);
    config.categories = CategoryFilter::new(categories.iter().copied());
    standalone::start_with(config).expect("a standalone session starts")
}

fn decode(bytes: &[u8]) -> Vec<Decoded<'_>> {
    Decoder::new(bytes)
        .collect::<Result<Vec<_>, _>>()
        .expect("the archive decodes")
}

/// The events in time order (a record larger than the engine's chunk is placed after the
/// chunk in use, so buffer order is not always call order).
fn events<'a>(records: &'a [Decoded<'a>]) -> Vec<&'a DecodedEvent<'a>> {
    let mut events: Vec<_> = records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::Event(e) => Some(e),
            _ => None,
        })
        .collect();
    events.sort_by_key(|e| e.time);
    events
}

fn strings(records: &[Decoded<'_>]) -> Vec<String> {
    records
        .iter()
        .filter_map(|d| match &d.record {
            DecodedRecord::String { value, .. } => Some(value.to_string()),
            _ => None,
        })
        .collect()
}

/// A NUL-terminated copy of `s` (a non-literal C string).
fn owned(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

fn p(bytes: &[u8]) -> *const c_char {
    CStr::from_bytes_until_nul(bytes)
        .expect("NUL-terminated")
        .as_ptr()
}

#[test]
fn every_function_writes_its_event() {
    let _s = serial();
    let session = session(&[]);
    // SAFETY: valid NUL-terminated strings; the _static ones are literals.
    unsafe {
        fxtrace_instant(c"app".as_ptr(), c"plain instant".as_ptr());
        fxtrace_duration_begin(c"app".as_ptr(), c"work".as_ptr());
        fxtrace_counter(c"app".as_ptr(), c"depth".as_ptr(), -42);
        fxtrace_duration_end(c"app".as_ptr(), c"work".as_ptr());
        fxtrace_instant_static(c"lit".as_ptr(), c"static instant".as_ptr());
        fxtrace_duration_begin_static(c"lit".as_ptr(), c"static work".as_ptr());
        fxtrace_counter_static(c"lit".as_ptr(), c"static depth".as_ptr(), i64::MAX);
        fxtrace_duration_end_static(c"lit".as_ptr(), c"static work".as_ptr());
    }
    let (bytes, report) = session.finish_to_vec().unwrap();
    assert_eq!(report.stop.records_dropped, 0);
    let records = decode(&bytes);
    let got: Vec<(String, String, DecodedEventKind)> = events(&records)
        .iter()
        .map(|e| (e.category.to_string(), e.name.to_string(), e.kind))
        .collect();
    let want = [
        ("app", "plain instant", DecodedEventKind::Instant),
        ("app", "work", DecodedEventKind::DurationBegin),
        ("app", "depth", DecodedEventKind::Counter { id: 0 }),
        ("app", "work", DecodedEventKind::DurationEnd),
        ("lit", "static instant", DecodedEventKind::Instant),
        ("lit", "static work", DecodedEventKind::DurationBegin),
        ("lit", "static depth", DecodedEventKind::Counter { id: 0 }),
        ("lit", "static work", DecodedEventKind::DurationEnd),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(c, n, k)| (c.to_string(), n.to_string(), *k))
        .collect();
    assert_eq!(got, want);
    let counters: Vec<&DecodedValue<'_>> = events(&records)
        .iter()
        .filter(|e| matches!(e.kind, DecodedEventKind::Counter { .. }))
        .map(|e| {
            assert_eq!(e.args.len(), 1);
            assert_eq!(e.args[0].name, fxtrace::c_api::COUNTER_VALUE_ARG);
            &e.args[0].value
        })
        .collect();
    assert_eq!(
        counters,
        [&DecodedValue::I64(-42), &DecodedValue::I64(i64::MAX)]
    );
    // Static strings are registered (String records); plain ones are inline only.
    let registered = strings(&records);
    for s in [
        "lit",
        "static instant",
        "static work",
        "static depth",
        "value",
    ] {
        assert!(
            registered.contains(&s.to_string()),
            "{s} not registered: {registered:?}"
        );
    }
    for s in ["app", "plain instant", "work", "depth"] {
        assert!(
            !registered.contains(&s.to_string()),
            "{s} registered: {registered:?}"
        );
    }
}

#[test]
fn repeated_static_calls_keep_their_strings_on_the_address_keyed_path() {
    let _s = serial();
    let session = session(&[]);
    // After the first, each call of a pair is found by its two addresses alone.
    for _ in 0..3 {
        // SAFETY: literals.
        unsafe {
            fxtrace_duration_begin_static(c"lit".as_ptr(), c"again work".as_ptr());
            fxtrace_instant_static(c"lit".as_ptr(), c"again".as_ptr());
            fxtrace_duration_end_static(c"lit".as_ptr(), c"again work".as_ptr());
        }
    }
    let (bytes, report) = session.finish_to_vec().unwrap();
    assert_eq!(report.stop.records_dropped, 0);
    let records = decode(&bytes);
    let got: Vec<(String, String, DecodedEventKind)> = events(&records)
        .iter()
        .map(|e| (e.category.to_string(), e.name.to_string(), e.kind))
        .collect();
    let one = [
        ("lit", "again work", DecodedEventKind::DurationBegin),
        ("lit", "again", DecodedEventKind::Instant),
        ("lit", "again work", DecodedEventKind::DurationEnd),
    ];
    let want: Vec<_> = (0..3)
        .flat_map(|_| one.iter())
        .map(|(c, n, k)| (c.to_string(), n.to_string(), *k))
        .collect();
    assert_eq!(got, want);
    assert!(events(&records).iter().all(|e| e.args.is_empty()));
}

#[test]
fn static_calls_write_into_each_new_session_across_many_chunk_ends() {
    let _s = serial();
    // One writer thread through three sessions: it stays bound to the previous session's
    // context (a session binds only the thread that starts it), so its first call of each
    // session finds another context installed and takes the slow path; ~640 KB of records per
    // session take many chunk refills.
    let (go, rounds) = std::sync::mpsc::channel::<()>();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        for () in rounds {
            for _ in 0..10_000 {
                // SAFETY: literals.
                unsafe {
                    fxtrace_instant_static(c"lit".as_ptr(), c"many".as_ptr());
                    fxtrace_duration_begin_static(c"lit".as_ptr(), c"many span".as_ptr());
                    fxtrace_duration_end_static(c"lit".as_ptr(), c"many span".as_ptr());
                }
            }
            done.send(()).unwrap();
        }
    });
    for round in 0..3 {
        let session = session(&[]);
        go.send(()).unwrap();
        finished.recv().unwrap();
        let (bytes, report) = session.finish_to_vec().unwrap();
        assert_eq!(report.stop.records_dropped, 0, "round {round}");
        let records = decode(&bytes);
        let events = events(&records);
        let count = |name: &str, kind: DecodedEventKind| {
            events
                .iter()
                .filter(|e| e.name == name && e.kind == kind)
                .count()
        };
        assert_eq!(
            count("many", DecodedEventKind::Instant),
            10_000,
            "round {round}"
        );
        assert_eq!(
            count("many span", DecodedEventKind::DurationBegin),
            10_000,
            "round {round}"
        );
        assert_eq!(
            count("many span", DecodedEventKind::DurationEnd),
            10_000,
            "round {round}"
        );
    }
    drop(go);
    writer.join().unwrap();
}

#[test]
fn static_calls_on_a_full_durable_buffer_are_each_counted_dropped() {
    let _s = serial();
    let mut config = StandaloneConfig::new(BufferingMode::Circular, 64 * 1024);
    config.chunk_size = 4096;
    let session = standalone::start_with(config).expect("session");
    let ctx = session.context().clone();
    // The thread's memo knows the pair: later calls take the address-keyed fast path.
    for _ in 0..3 {
        // SAFETY: literals.
        unsafe { fxtrace_instant_static(c"lit".as_ptr(), c"durable full".as_ptr()) };
    }
    let mut writer = ctx.acquire().expect("started");
    while let Some(mut slot) = writer.reserve_durable(7) {
        slot.payload().fill(0);
        // A string record with index 0 (a filler readers skip).
        slot.commit(2 | (7 << 4));
    }
    drop(writer);
    assert!(ctx.stats().durable_buffer_full);
    let before = ctx.records_dropped();
    for _ in 0..5 {
        // SAFETY: literals.
        unsafe { fxtrace_instant_static(c"lit".as_ptr(), c"durable full".as_ptr()) };
    }
    assert_eq!(ctx.records_dropped(), before + 5, "each one counted");
    session.finish_to_vec().expect("finish");
}

#[test]
fn a_rust_call_on_a_prefix_of_a_static_c_string_does_not_answer_for_the_c_call() {
    let _s = serial();
    let session = session(&[]);
    // One static holding both C strings: the Rust call names prefixes at the same addresses.
    static BYTES: &str = "lit\0tick tock\0";
    let category = BYTES.as_ptr().cast::<c_char>();
    // SAFETY: within BYTES.
    let name = unsafe { category.add(4) };
    // SAFETY: NUL-terminated strings inside a static.
    unsafe { fxtrace_instant_static(category, name) };
    fxtrace::instant(&BYTES[..3], &BYTES[4..8], fxtrace::Scope::Thread, &[]);
    // SAFETY: as above.
    unsafe { fxtrace_instant_static(category, name) };
    let (bytes, report) = session.finish_to_vec().unwrap();
    assert_eq!(report.stop.records_dropped, 0);
    let records = decode(&bytes);
    let got: Vec<(String, String)> = events(&records)
        .iter()
        .map(|e| (e.category.to_string(), e.name.to_string()))
        .collect();
    let want = [("lit", "tick tock"), ("lit", "tick"), ("lit", "tick tock")];
    assert_eq!(got, want.map(|(c, n)| (c.to_string(), n.to_string())));
}

#[test]
fn plain_calls_copy_their_strings() {
    let _s = serial();
    let session = session(&[]);
    let mut name = owned("first");
    // SAFETY: valid C strings for each call.
    unsafe { fxtrace_instant(c"app".as_ptr(), p(&name)) };
    // The same address, other text: the event must carry the new text.
    name[..6].copy_from_slice(b"other\0");
    // SAFETY: as above.
    unsafe { fxtrace_instant(c"app".as_ptr(), p(&name)) };
    drop(name);
    let (bytes, _) = session.finish_to_vec().unwrap();
    let records = decode(&bytes);
    let names: Vec<String> = events(&records)
        .iter()
        .map(|e| e.name.to_string())
        .collect();
    assert_eq!(names, ["first", "other"]);
}

#[test]
fn null_invalid_utf8_and_long_strings() {
    let _s = serial();
    let session = session(&[]);
    let invalid = b"ok\xff\xfetail\0";
    let long = owned(&"n".repeat(40_000));
    // SAFETY: NULL is allowed; the others are NUL-terminated.
    unsafe {
        fxtrace_instant(std::ptr::null(), std::ptr::null());
        fxtrace_instant(c"app".as_ptr(), invalid.as_ptr().cast());
        fxtrace_instant(invalid.as_ptr().cast(), c"cat cut".as_ptr());
        fxtrace_instant(c"app".as_ptr(), long.as_ptr().cast());
        fxtrace_counter_static(std::ptr::null(), std::ptr::null(), 1);
        assert_eq!(fxtrace_is_category_enabled(std::ptr::null()), 1);
    }
    let (bytes, report) = session.finish_to_vec().unwrap();
    assert_eq!(report.stop.records_dropped, 0);
    let records = decode(&bytes);
    let got: Vec<(String, usize)> = events(&records)
        .iter()
        .map(|e| (e.category.to_string(), e.name.len()))
        .collect();
    assert_eq!(got[0], (String::new(), 0), "NULL is the empty string");
    assert_eq!(
        events(&records)[1].name,
        "ok",
        "cut before the invalid sequence"
    );
    assert_eq!(got[2], ("ok".to_string(), 7));
    assert_eq!(got[3], ("app".to_string(), fxtrace_format::MAX_STRING_LEN));
    assert_eq!(got[4], (String::new(), 0));
}

/// A category and a name each within the string limit, but together larger than one record:
/// the event is written with them cut, not dropped.
#[test]
fn a_category_and_name_larger_than_a_record_together_are_cut_not_dropped() {
    let _s = serial();
    let session = session(&[]);
    let (category, name) = (owned(&"c".repeat(20_000)), owned(&"n".repeat(20_000)));
    // SAFETY: NUL-terminated strings alive for the call.
    unsafe { fxtrace_instant(p(&category), p(&name)) };
    let (bytes, report) = session.finish_to_vec().unwrap();
    assert_eq!(report.stop.records_dropped, 0);
    let records = decode(&bytes);
    let got: Vec<(usize, usize)> = events(&records)
        .iter()
        .map(|e| (e.category.len(), e.name.len()))
        .collect();
    assert_eq!(got, [(4096, 4096)]);
}

/// A `_static` string longer than a chunk (its definition in a run of its own) is defined
/// before the events that use it: the trace decodes.
#[test]
fn a_static_string_longer_than_a_chunk_is_defined_before_its_uses() {
    let _s = serial();
    let session = session(&[]);
    // Leaked: `_static` strings live until the process exits.
    let long: &'static [u8] = Box::leak(owned(&"s".repeat(20_000)).into_boxed_slice());
    // SAFETY: static, unchanged C strings.
    unsafe {
        fxtrace_instant_static(p(long), c"nm".as_ptr());
        fxtrace_instant_static(p(long), c"nm".as_ptr());
    }
    let (bytes, report) = session.finish_to_vec().unwrap();
    assert_eq!(report.stop.records_dropped, 0);
    // `decode` fails on a string index used before its definition.
    let records = decode(&bytes);
    let got: Vec<usize> = events(&records).iter().map(|e| e.category.len()).collect();
    assert_eq!(got, [20_000, 20_000]);
}

#[test]
fn category_answers_follow_the_session_not_the_address() {
    let _s = serial();
    let mut category = owned("on");
    let long_on = owned(&format!("on{}", "x".repeat(40)));
    let first = session(&["on", "onx*"]);
    // SAFETY: valid C strings.
    unsafe {
        assert_eq!(fxtrace_is_category_enabled(p(&category)), 1);
        // Same address and length, other text: answered for the new text.
        category[..3].copy_from_slice(b"of\0");
        assert_eq!(fxtrace_is_category_enabled(p(&category)), 0);
        fxtrace_instant(p(&category), c"dropped: disabled".as_ptr());
        // Longer than the cache keeps: answered every time.
        assert_eq!(fxtrace_is_category_enabled(p(&long_on)), 1);
        fxtrace_instant(p(&long_on), c"kept".as_ptr());
    }
    let (bytes, _) = first.finish_to_vec().unwrap();
    let records = decode(&bytes);
    let names: Vec<String> = events(&records)
        .iter()
        .map(|e| e.name.to_string())
        .collect();
    assert_eq!(names, ["kept"]);

    // A new session enables the other category: the per-thread answers are not reused.
    let second = session(&["of"]);
    // SAFETY: valid C strings.
    unsafe {
        assert_eq!(fxtrace_is_category_enabled(p(&category)), 1);
        assert_eq!(fxtrace_is_category_enabled(c"on".as_ptr()), 0);
        fxtrace_instant(p(&category), c"now enabled".as_ptr());
    }
    let (bytes, _) = second.finish_to_vec().unwrap();
    let records = decode(&bytes);
    let names: Vec<String> = events(&records)
        .iter()
        .map(|e| e.name.to_string())
        .collect();
    assert_eq!(names, ["now enabled"]);

    // No session: every answer is 0 and every call a no-op.
    // SAFETY: valid C strings.
    unsafe {
        assert_eq!(fxtrace_is_category_enabled(c"of".as_ptr()), 0);
        fxtrace_instant(c"of".as_ptr(), c"nowhere".as_ptr());
        fxtrace_counter(c"of".as_ptr(), c"nowhere".as_ptr(), 3);
    }
}

#[test]
fn more_categories_than_the_cache_holds_and_many_threads() {
    let _s = serial();
    let session = session(&["c*"]);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..3 * fxtrace::c_api::CATEGORY_CACHE_ENTRIES {
                    let category = owned(&format!("c{i}"));
                    let other = owned(&format!("d{i}"));
                    let name = owned(&format!("t{t} e{i}"));
                    // SAFETY: valid C strings.
                    unsafe {
                        fxtrace_duration_begin(p(&category), p(&name));
                        fxtrace_instant(p(&other), p(&name));
                        fxtrace_duration_end(p(&category), p(&name));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (bytes, report) = session.finish_to_vec().unwrap();
    assert_eq!(report.stop.records_dropped, 0);
    let records = decode(&bytes);
    let events = events(&records);
    assert_eq!(
        events.len(),
        4 * 3 * fxtrace::c_api::CATEGORY_CACHE_ENTRIES * 2,
        "every begin/end of an enabled category, no disabled instant"
    );
    assert!(events.iter().all(|e| e.category.starts_with('c')));
    let tids: std::collections::HashSet<u64> = events.iter().map(|e| e.thread.tid).collect();
    assert_eq!(tids.len(), 4);
}

#[test]
fn alerts_without_a_provider() {
    extern "C" {
        fn fxtrace_alert(name: *const c_char) -> c_int;
    }
    let _s = serial();
    // SAFETY: NULL or valid C strings.
    unsafe {
        assert_eq!(fxtrace_alert(std::ptr::null()), -1);
        assert_eq!(
            fxtrace_alert(c"fifteen-bytes-x".as_ptr()),
            -1,
            "longer than 14 bytes"
        );
        assert_eq!(fxtrace_alert(c"oom".as_ptr()), 0, "no context installed");
    }
    let session = session(&[]);
    // SAFETY: a valid C string.
    assert_eq!(unsafe { fxtrace_alert(c"oom".as_ptr()) }, 0, "no provider");
    drop(session);
}

//! The C API's cost per call, through the C ABI (`extern "C"` functions, as a C program
//! calls them), next to the Rust facade: with no trace running, then with a standalone
//! circular session (the buffer wraps; nothing is dropped).
//!
//! Ids: `c_api/disabled_instant`, `c_api/disabled_is_enabled`, `c_api/instant_inline`,
//! `c_api/instant_static`, `c_api/duration_pair_inline`, `c_api/duration_pair_static`,
//! `c_api/counter_inline`, `c_api/is_category_enabled`, `c_api/rust_instant`.
//!
//! Run: `cargo bench -p fxtrace-preload --bench c_api` (or `-- --quick`).

use std::ffi::c_char;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use fxtrace::buffer::header::BufferingMode;
use fxtrace::c_api::{
    fxtrace_counter, fxtrace_duration_begin, fxtrace_duration_begin_static, fxtrace_duration_end,
    fxtrace_duration_end_static, fxtrace_instant, fxtrace_instant_static,
    fxtrace_is_category_enabled,
};

/// The category and name every call uses: C string literals (static, NUL-terminated), as
/// every function's safety contract asks, including the `_static` ones.
const CAT: &std::ffi::CStr = c"bench";
const NAME: &std::ffi::CStr = c"event";

/// Call `f` with the literal category and name (through `black_box`, as a C caller would
/// pass pointers the compiler cannot see through).
fn call(f: unsafe extern "C" fn(*const c_char, *const c_char)) {
    // SAFETY: both pointers are C string literals: valid, NUL-terminated, static.
    unsafe { f(black_box(CAT.as_ptr()), black_box(NAME.as_ptr())) }
}

/// `FXTRACE_BENCH_CALLS=N FXTRACE_BENCH_CANDIDATE=…` mode, for instruction counts (as in
/// `benches/engine.rs`): run one candidate N times under a standalone circular session and
/// exit. Under `valgrind --tool=callgrind --collect-atstart=no
/// --toggle-collect='*counted_loop*'` only the calls are counted.
fn counted_calls() {
    let Some(calls) = std::env::var("FXTRACE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let candidate = std::env::var("FXTRACE_BENCH_CANDIDATE").unwrap_or_default();
    if candidate.starts_with("disabled_") {
        // No session: the disabled path.
        counted_loop(&candidate, calls);
        std::process::exit(0);
    }
    let session =
        fxtrace::standalone::start(BufferingMode::Circular, 64 << 20).expect("standalone session");
    counted_loop(&candidate, calls);
    let (_, report) = session.finish_to_vec().expect("finish");
    assert_eq!(report.stop.records_dropped, 0);
    std::process::exit(0);
}

/// One loop per candidate (no per-call dispatch), out of line for callgrind's toggle.
#[inline(never)]
fn counted_loop(candidate: &str, calls: u64) {
    match candidate {
        "rust_instant" => {
            (0..calls).for_each(|_| fxtrace::instant("bench", "event", fxtrace::Scope::Thread, &[]))
        }
        "instant_static" | "disabled_instant_static" => {
            (0..calls).for_each(|_| call(fxtrace_instant_static))
        }
        "disabled_rust_instant" => {
            (0..calls).for_each(|_| fxtrace::instant("bench", "event", fxtrace::Scope::Thread, &[]))
        }
        "instant_inline" => (0..calls).for_each(|_| call(fxtrace_instant)),
        "duration_pair_static" => (0..calls).for_each(|_| {
            call(fxtrace_duration_begin_static);
            call(fxtrace_duration_end_static);
        }),
        other => panic!("unknown FXTRACE_BENCH_CANDIDATE {other:?}"),
    }
}

fn c_api_benches(c: &mut Criterion) {
    counted_calls();
    let mut g = c.benchmark_group("c_api");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    // SAFETY: a C string literal.
    let enabled = || unsafe { fxtrace_is_category_enabled(black_box(CAT.as_ptr())) };

    assert!(!fxtrace::engine::tracing_maybe_on(), "no session yet");
    g.bench_function("disabled_instant", |b| b.iter(|| call(fxtrace_instant)));
    g.bench_function("disabled_is_enabled", |b| b.iter(enabled));

    let session =
        fxtrace::standalone::start(BufferingMode::Circular, 64 << 20).expect("standalone session");
    g.bench_function("instant_inline", |b| b.iter(|| call(fxtrace_instant)));
    g.bench_function("instant_static", |b| {
        b.iter(|| call(fxtrace_instant_static))
    });
    g.bench_function("duration_pair_inline", |b| {
        b.iter(|| {
            call(fxtrace_duration_begin);
            call(fxtrace_duration_end);
        })
    });
    g.bench_function("duration_pair_static", |b| {
        b.iter(|| {
            call(fxtrace_duration_begin_static);
            call(fxtrace_duration_end_static);
        })
    });
    g.bench_function("counter_inline", |b| {
        // SAFETY: C string literals.
        b.iter(|| unsafe {
            fxtrace_counter(
                black_box(CAT.as_ptr()),
                black_box(NAME.as_ptr()),
                black_box(7),
            )
        })
    });
    g.bench_function("is_category_enabled", |b| b.iter(enabled));
    g.bench_function("rust_instant", |b| {
        b.iter(|| fxtrace::instant("bench", "event", fxtrace::Scope::Thread, &[]))
    });
    g.finish();
    let report = session.finish_to_vec().expect("the session ends").1;
    assert_eq!(report.stop.records_dropped, 0, "no record dropped");
}

criterion_group!(benches, c_api_benches);
criterion_main!(benches);

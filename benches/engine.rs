//! Engine benchmarks: the cost of the building blocks of a trace record, side by side.
//!
//! Ids are stable so figures can be compared across changes (see `BENCHMARKS.md`):
//! `engine/rdtscp`, `engine/rdtsc`, `engine/clock_gettime`, `engine/fetch_add`,
//! `engine/disabled`, `engine/instant_0args`, `engine/instant_2args`,
//! `engine/duration_complete`. Add new
//! engine benches as another `fn xxx_benches(c: &mut Criterion)` using
//! [`support::engine_group`] and list it in `criterion_group!` below.
//!
//! Run: `cargo bench --bench engine` (or `-- --quick` for a fast look).
//!
//! On a shared, noisy machine, `FXTRACE_BENCH_INTERLEAVED=1 cargo bench --bench engine --
//! engine/disabled` also prints the record path against `rdtscp` measured *interleaved*
//! (rounds alternate between the candidates; each keeps its fastest round), so that both sides
//! of a ratio see the same interference.
//!
//! For instruction counts, which do not depend on the load: `FXTRACE_BENCH_CALLS=N
//! FXTRACE_BENCH_CANDIDATE=instant_0args` makes the bench binary run only that candidate `N`
//! times under a standalone circular session and exit; run it under `valgrind
//! --tool=callgrind --collect-atstart=no --toggle-collect='*counted_loop*'` (the calls only,
//! not the session's set-up and read-out) with two values of `N` and divide the difference
//! of the totals by the difference of the calls.

mod support;

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

/// `FXTRACE_BENCH_CALLS` mode (see the module docs): run one candidate and exit.
fn counted_calls() {
    use fxtrace::buffer::header::BufferingMode;

    let Some(calls) = std::env::var("FXTRACE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let candidate = std::env::var("FXTRACE_BENCH_CANDIDATE").unwrap_or_default();
    let session =
        fxtrace::standalone::start(BufferingMode::Circular, 64 << 20).expect("standalone session");
    counted_loop(&candidate, calls);
    let (_, report) = session.finish_to_vec().expect("finish");
    assert_eq!(report.stop.records_dropped, 0);
    std::process::exit(0);
}

/// The calls of the `FXTRACE_BENCH_CALLS` mode, out of line so that callgrind can count this
/// function alone (`--toggle-collect=*counted_loop*`): the session's set-up and its read-out
/// (which grows with the number of records) are left out.
#[inline(never)]
fn counted_loop(candidate: &str, calls: u64) {
    use fxtrace::{Arg, ArgValue, Scope};

    // One loop per candidate: the dispatch is not repeated per call.
    match candidate {
        "rdtscp" => (0..calls).for_each(|_| {
            black_box(fxtrace::clock::ticks());
        }),
        "instant_0args" => {
            (0..calls).for_each(|_| fxtrace::instant("bench", "instant", Scope::Thread, &[]))
        }
        "instant_2args" => (0..calls).for_each(|i| {
            let args = [
                Arg::new("count", ArgValue::U64(black_box(i))),
                Arg::new("flag", ArgValue::I32(black_box(-1))),
            ];
            fxtrace::instant("bench", "instant2", Scope::Thread, &args)
        }),
        "duration_complete" => {
            (0..calls).for_each(|_| drop(fxtrace::duration("bench", "duration")))
        }
        "traced" => (0..calls).for_each(|i| {
            black_box(traced_plain(i, 3));
        }),
        "traced_2args" => (0..calls).for_each(|i| {
            black_box(traced_args(i, 3));
        }),
        #[cfg(feature = "tracing")]
        "layer_span" | "layer_event" | "noop_layer_span" | "noop_layer_event" => {
            layer_loop(candidate, calls)
        }
        other => panic!("unknown FXTRACE_BENCH_CANDIDATE {other:?}"),
    }
}

/// `tracing` spans or events through the registry with fxtrace's layer (`layer_*`) or a
/// layer that does nothing (`noop_layer_*`, the registry's own cost): the candidates of the
/// issue-11 comparison table, one `info_span!` with one `u64` field entered and exited, or one
/// `info!` with one `u64` field and a message.
#[cfg(feature = "tracing")]
fn layer_loop(candidate: &str, calls: u64) {
    use tracing_subscriber::layer::SubscriberExt;

    struct Noop;
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Noop {}

    let _default = if candidate.starts_with("noop") {
        tracing::subscriber::set_default(tracing_subscriber::registry().with(Noop))
    } else {
        tracing::subscriber::set_default(
            tracing_subscriber::registry().with(fxtrace::TracingLayer::new()),
        )
    };
    if candidate.ends_with("span") {
        (0..calls).for_each(|i| {
            tracing::info_span!("bench_span", n = black_box(i)).in_scope(|| black_box(i));
        })
    } else {
        (0..calls).for_each(|i| tracing::info!(n = black_box(i), "bench event"))
    }
}

/// A traced call (`FXTRACE_BENCH_CANDIDATE=traced`).
#[fxtrace::traced(category = "bench")]
#[inline(never)]
fn traced_plain(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_mul(black_box(b))
}

/// A traced call with two integer arguments (`FXTRACE_BENCH_CANDIDATE=traced_2args`).
#[fxtrace::traced(category = "bench", args(a, b))]
#[inline(never)]
fn traced_args(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_mul(black_box(b))
}

/// The clock alone, and what it is compared with.
fn clock_benches(c: &mut Criterion) {
    counted_calls();
    let mut g = support::engine_group(c);
    g.bench_function("rdtscp", |b| b.iter(fxtrace::clock::ticks));
    #[cfg(target_arch = "x86_64")]
    g.bench_function("rdtsc", |b| {
        // SAFETY: `_rdtsc` only reads the time-stamp counter; every x86_64 CPU has it.
        b.iter(|| unsafe { core::arch::x86_64::_rdtsc() })
    });
    g.bench_function("clock_gettime", |b| {
        b.iter(fxtrace::clock::monotonic_raw_ns)
    });
    g.finish();
}

/// One uncontended atomic add: the price of one shared-offset reservation.
fn atomic_benches(c: &mut Criterion) {
    static OFFSET: AtomicU64 = AtomicU64::new(0);
    let mut g = support::engine_group(c);
    g.bench_function("fetch_add", |b| {
        // ATOMICS: Relaxed, as an allocator's offset bump that publishes nothing by itself.
        b.iter(|| OFFSET.fetch_add(black_box(8), Ordering::Relaxed))
    });
    g.finish();
}

/// The record path through the public API (`fxtrace::instant`, `fxtrace::duration`): with no
/// session (the cost of an instrumented call site), then with a standalone circular session
/// installed (the buffer wraps; nothing is dropped).
fn record_benches(c: &mut Criterion) {
    use fxtrace::buffer::header::BufferingMode;
    use fxtrace::{Arg, ArgValue, Scope};

    let mut g = support::engine_group(c);
    assert!(!fxtrace::engine::tracing_maybe_on(), "no session yet");
    g.bench_function("disabled", |b| {
        b.iter(|| fxtrace::instant("bench", "disabled", Scope::Thread, &[]))
    });

    let session =
        fxtrace::standalone::start(BufferingMode::Circular, 64 << 20).expect("standalone session");
    g.bench_function("instant_0args", |b| {
        b.iter(|| fxtrace::instant("bench", "instant", Scope::Thread, &[]))
    });
    g.bench_function("instant_2args", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            let args = [
                Arg::new("count", ArgValue::U64(black_box(i))),
                Arg::new("flag", ArgValue::I32(black_box(-1))),
            ];
            fxtrace::instant("bench", "instant2", Scope::Thread, &args)
        })
    });
    g.bench_function("duration_complete", |b| {
        b.iter(|| {
            let _span = fxtrace::duration("bench", "duration");
        })
    });
    g.finish();
    let (_, report) = session.finish_to_vec().expect("finish");
    assert_eq!(
        report.stop.records_dropped, 0,
        "the benches dropped records"
    );
}

/// Interleaved minimum-of-rounds timing (see the module docs). Prints one line per candidate
/// and the ratios to `rdtscp`.
fn interleaved_report() {
    use fxtrace::buffer::header::BufferingMode;
    use fxtrace::{Arg, ArgValue, Scope};
    use std::time::Instant;

    if std::env::var_os("FXTRACE_BENCH_INTERLEAVED").is_none() {
        return;
    }
    const ROUNDS: usize = 60;
    const ITERS: u32 = 100_000;
    fn round(f: &mut dyn FnMut()) -> f64 {
        let start = Instant::now();
        for _ in 0..ITERS {
            f();
        }
        start.elapsed().as_nanos() as f64 / f64::from(ITERS)
    }
    let session =
        fxtrace::standalone::start(BufferingMode::Circular, 64 << 20).expect("standalone session");
    let mut i = 0u64;
    type Candidate<'a> = (&'static str, Box<dyn FnMut() + 'a>);
    let mut candidates: Vec<Candidate<'_>> = vec![
        (
            "rdtscp",
            Box::new(|| {
                black_box(fxtrace::clock::ticks());
            }),
        ),
        (
            "instant_0args",
            Box::new(|| fxtrace::instant("bench", "instant", Scope::Thread, &[])),
        ),
        (
            "instant_2args",
            Box::new(move || {
                i += 1;
                let args = [
                    Arg::new("count", ArgValue::U64(black_box(i))),
                    Arg::new("flag", ArgValue::I32(black_box(-1))),
                ];
                fxtrace::instant("bench", "instant2", Scope::Thread, &args)
            }),
        ),
        (
            "duration_complete",
            Box::new(|| drop(fxtrace::duration("bench", "duration"))),
        ),
    ];
    let mut best = vec![f64::MAX; candidates.len()];
    for _ in 0..ROUNDS {
        for (k, (_, f)) in candidates.iter_mut().enumerate() {
            best[k] = best[k].min(round(f.as_mut()));
        }
    }
    drop(candidates);
    let (_, report) = session.finish_to_vec().expect("finish");
    println!("interleaved minimum of {ROUNDS} rounds of {ITERS} calls:");
    for (name, ns) in [
        "rdtscp",
        "instant_0args",
        "instant_2args",
        "duration_complete",
    ]
    .iter()
    .zip(&best)
    {
        println!("  {name:<18} {ns:7.2} ns  ({:.2}x rdtscp)", ns / best[0]);
    }
    println!("  records dropped: {}", report.stop.records_dropped);
}

fn record_benches_and_report(c: &mut Criterion) {
    record_benches(c);
    interleaved_report();
}

criterion_group! {
    name = engine;
    config = support::config();
    targets = clock_benches, atomic_benches, record_benches_and_report
}
criterion_main!(engine);

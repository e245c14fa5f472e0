//! `#[traced]` benchmarks: the cost of one call of a small function, with and without the
//! attribute, next to the engine floor (one `rdtscp`).
//!
//! Ids (group `traced`, figures in `BENCHMARKS.md`):
//! - `traced/rdtscp`: one clock read, the floor of any timestamped record;
//! - `traced/uninstrumented`: the same function without the attribute;
//! - `traced/disabled`: the traced function with no trace running in the process;
//! - `traced/enabled`: the traced function with a standalone circular session installed (one
//!   duration-complete record per call; the buffer wraps, nothing is dropped);
//! - `traced/enabled_2args`: the same with `args(a, b)` (two integers on the record);
//! - `traced/category_off`: a trace running but the function's category not enabled;
//! - `traced/facade_guard`: the engine's own guard, `fxtrace::duration(&SITE, ..)` in the
//!   same function, without the attribute: what `#[traced]` adds over the engine.
//!
//! Group `tracing_layer` (feature `tracing`): one `info_span!(..).in_scope(..)` with one
//! `u64` field, or one `info!` event with a message and one field, through
//! `tracing_subscriber::registry()`:
//! - `tracing_layer/span_registry_only`, `tracing_layer/event_registry_only`: the registry
//!   without fxtrace's layer (a bare registry never frees closed spans, tokio-rs/tracing#900,
//!   so its span figure is inflated);
//! - `tracing_layer/span_registry_noop_layer`, `tracing_layer/event_registry_noop_layer`: the
//!   registry plus a layer that does nothing, the baseline issue 11's targets are relative to
//!   (what `tracing` costs anyway with any layer);
//! - `tracing_layer/span_no_trace`, `tracing_layer/event_no_trace`: with the layer, no trace
//!   running;
//! - `tracing_layer/span`, `tracing_layer/event`: with a standalone session recording them
//!   (a duration-complete record per span, an instant per event).
//!
//! Run: `cargo bench --bench traced` (or `-- --quick` for a fast look).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use fxtrace::buffer::header::BufferingMode;
use fxtrace::engine::CategoryFilter;
use fxtrace::standalone::{self, StandaloneConfig};
use fxtrace::traced;

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

#[inline(never)]
fn plain(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_mul(black_box(b))
}

#[traced(category = "bench")]
#[inline(never)]
fn traced_plain(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_mul(black_box(b))
}

#[traced(category = "bench", args(a, b))]
#[inline(never)]
fn traced_args(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_mul(black_box(b))
}

#[traced(category = "bench_off")]
#[inline(never)]
fn traced_off(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_mul(black_box(b))
}

#[inline(never)]
fn guarded(a: u64, b: u64) -> u64 {
    static SITE: fxtrace::CallSite = fxtrace::CallSite::new("bench");
    let _guard = fxtrace::duration(&SITE, "guarded");
    black_box(a).wrapping_mul(black_box(b))
}

fn traced_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("traced");
    g.bench_function("rdtscp", |b| b.iter(fxtrace::clock::ticks));
    g.bench_function("uninstrumented", |b| b.iter(|| plain(3, 5)));
    assert!(!fxtrace::engine::tracing_maybe_on(), "no session yet");
    g.bench_function("disabled", |b| b.iter(|| traced_plain(3, 5)));

    let mut settings = StandaloneConfig::new(BufferingMode::Circular, 64 << 20);
    settings.categories = CategoryFilter::new(["bench"]);
    let session = standalone::start_with(settings).expect("standalone session");
    g.bench_function("enabled", |b| b.iter(|| traced_plain(3, 5)));
    g.bench_function("enabled_2args", |b| b.iter(|| traced_args(3, 5)));
    g.bench_function("category_off", |b| b.iter(|| traced_off(3, 5)));
    g.bench_function("facade_guard", |b| b.iter(|| guarded(3, 5)));
    let (_, report) = session.finish_to_vec().expect("finish");
    assert_eq!(
        report.stop.records_dropped, 0,
        "a circular session drops nothing"
    );
    g.finish();
}

#[cfg(feature = "tracing")]
fn tracing_layer_benches(c: &mut Criterion) {
    use tracing_subscriber::layer::SubscriberExt;

    fn span() {
        tracing::info_span!("bench_span", n = 7u64).in_scope(|| black_box(1));
    }
    fn event() {
        tracing::info!(n = 7u64, "bench event");
    }

    let mut g = c.benchmark_group("tracing_layer");
    {
        let _default = tracing::subscriber::set_default(tracing_subscriber::registry());
        g.bench_function("span_registry_only", |b| b.iter(span));
        g.bench_function("event_registry_only", |b| b.iter(event));
    }
    {
        /// A layer that records nothing (every callback is the trait's default).
        struct NoopLayer;
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}
        let noop = tracing_subscriber::registry().with(NoopLayer);
        let _default = tracing::subscriber::set_default(noop);
        g.bench_function("span_registry_noop_layer", |b| b.iter(span));
        g.bench_function("event_registry_noop_layer", |b| b.iter(event));
    }
    let layered = tracing_subscriber::registry().with(fxtrace::TracingLayer::new());
    let _default = tracing::subscriber::set_default(layered);
    assert!(!fxtrace::engine::tracing_maybe_on(), "no session yet");
    g.bench_function("span_no_trace", |b| b.iter(span));
    g.bench_function("event_no_trace", |b| b.iter(event));
    let session = standalone::start(BufferingMode::Circular, 64 << 20).expect("standalone session");
    g.bench_function("span", |b| b.iter(span));
    g.bench_function("event", |b| b.iter(event));
    let (_, report) = session.finish_to_vec().expect("finish");
    assert_eq!(
        report.stop.records_dropped, 0,
        "a circular session drops nothing"
    );
    g.finish();
}

#[cfg(not(feature = "tracing"))]
fn tracing_layer_benches(_: &mut Criterion) {}

criterion_group! {
    name = benches;
    config = config();
    targets = traced_benches, tracing_layer_benches
}
criterion_main!(benches);

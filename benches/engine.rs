//! Engine benchmarks: the cost of the building blocks of a trace record, side by side.
//!
//! Ids are stable so figures can be compared across changes (see `BENCHMARKS.md`):
//! `engine/rdtscp`, `engine/rdtsc`, `engine/clock_gettime`, `engine/fetch_add`. Add new
//! engine benches as another `fn xxx_benches(c: &mut Criterion)` using
//! [`support::engine_group`] and list it in `criterion_group!` below.
//!
//! Run: `cargo bench --bench engine` (or `-- --quick` for a fast look).

mod support;

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

/// The clock alone, and what it is compared with.
fn clock_benches(c: &mut Criterion) {
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

criterion_group! {
    name = engine;
    config = support::config();
    targets = clock_benches, atomic_benches
}
criterion_main!(engine);

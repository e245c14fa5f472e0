//! Shared set-up for the `engine` benchmarks: one criterion configuration and one group
//! name, so every engine figure in `BENCHMARKS.md` is measured the same way and has an id
//! of the form `engine/<name>` (or `engine_mt/<name>` for multi-thread runs).

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use std::time::Duration;

/// Criterion group name of single-thread engine benchmarks.
pub(crate) const ENGINE_GROUP: &str = "engine";

/// The configuration every engine benchmark runs with: short enough for a 2-core CI box,
/// long enough for stable nanosecond figures.
pub(crate) fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

/// Opens the `engine` group; each bench function in it gets the id `engine/<name>`.
pub(crate) fn engine_group(c: &mut Criterion) -> BenchmarkGroup<'_, WallTime> {
    c.benchmark_group(ENGINE_GROUP)
}

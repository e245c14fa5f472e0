//! fxtrace's criterion benchmarks live beside this file (`engine.rs`, `engine_alloc.rs`,
//! `traced.rs`, `connect.rs`); the figures they give are in `BENCHMARKS.md`. This library is
//! empty: the package exists so that the benchmarks' dependencies (criterion and the tools)
//! are not dependencies of the `fxtrace` library.

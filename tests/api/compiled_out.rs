//! Without the `instrument` feature, `#[traced]` leaves functions untouched: a traced
//! function writes nothing even under a running trace (the options are still checked, see
//! the macro crate's unit tests). Runs with `cargo test --no-default-features --test
//! traced_compiled_out`; with the feature on, this file is empty.

#![cfg(not(feature = "instrument"))]

use crate::traced_support;

use traced_support::{serial, trace};

#[fxtrace::traced(category = "out", args(x, label: debug))]
fn compiled_out(x: u32, label: &str) -> u32 {
    x + label.len() as u32
}

#[fxtrace::traced]
async fn compiled_out_async() -> u32 {
    7
}

#[test]
fn traced_functions_write_nothing() {
    let _s = serial();
    let (v, events) = trace(|| {
        fxtrace::instant("out", "marker", fxtrace::Scope::Thread, &[]);
        compiled_out(1, "ab")
    });
    assert_eq!(v, 3);
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["marker"], "only the explicit instant");
    let _future = compiled_out_async();
}

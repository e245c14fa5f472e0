//! `#[traced]` compile tests (trybuild): `tests/ui/pass` must compile (every shape of
//! function and every option), each file of `tests/ui/fail` must fail with the message and
//! span of its `.stderr` file (one file per error: each duplicate option separately).
//!
//! Regenerate the expected output after a deliberate message change with
//! `TRYBUILD=overwrite cargo test -p fxtrace-macros --test ui`.

#![cfg(feature = "enable")]

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}

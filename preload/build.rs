//! Link `libfxtrace_preload.so` with `-z nodelete`: once loaded, it is never unmapped.
//!
//! Its threads (provider control, capture, flusher) and its `atexit` and `pthread_atfork`
//! hooks run its code for the rest of the process's life; a `dlclose` that unmapped it would
//! leave them pointing at nothing. With `DF_1_NODELETE`, `dlclose` keeps it loaded.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}

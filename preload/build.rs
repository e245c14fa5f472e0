//! Link `libfxtrace_preload.so` with `-z nodelete`: once loaded, it is never unmapped.
//!
//! Its threads (provider control, capture, flusher) and its `atexit` and `pthread_atfork`
//! hooks run its code for the rest of the process's life; a `dlclose` that unmapped it would
//! leave them pointing at nothing. With `DF_1_NODELETE`, `dlclose` keeps it loaded.
//!
//! With glibc, the unwinder (what catches a panic before it crosses into the program, and
//! writes backtraces) is linked in from the compiler's `libgcc_eh.a` instead of loading
//! `libgcc_s.so.1` into every traced process: one object fewer for the dynamic loader to
//! find, map and relocate (0.08 ms of each short process's start, 2026-11-29). Its symbols
//! stay local to the object (the cdylib's version script exports only fxtrace's), so a
//! program's own unwinder (C++ exceptions) is untouched. Where the compiler driver does not
//! know the archive, or when cross-compiling (the host's `cc` would answer with the host's
//! archive), the object links `libgcc_s` as before.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    if native && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu") {
        if let Some(dir) = libgcc_eh_dir() {
            // Before the `-lgcc_s` that std asks for, so the unwinder's symbols are defined
            // when the linker gets there (`--as-needed` then leaves it out).
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static:+verbatim=libgcc_eh.a");
        }
    }
}

/// The directory of the C compiler's `libgcc_eh.a`, if it has one.
fn libgcc_eh_dir() -> Option<std::path::PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let path = std::path::PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    // Not found, the driver prints the bare name back.
    (path.is_absolute() && path.is_file()).then(|| path.parent().map(Into::into))?
}

//! Embeds `libfxtrace_preload.so` into the `fxtrace` binary when the same cargo invocation
//! does not build it beside the binary: `cargo install --path cli` (the README's install), so
//! that `fxtrace record --preload` works with nothing else installed.
//!
//! The workspace's own builds (`cargo build` from the repository, the README's quick start,
//! `cargo test --workspace`) build the object beside the binary: embedding it there would
//! build the library a second time. They are told apart by a feature, not by the target
//! directory (a `--path` install builds in the workspace's own `target/`, and would reuse a
//! quick start's build-script run): the workspace's default members turn on
//! `preload-built-beside` (through `fxtrace-benches`), and cargo resolves features for the
//! packages it builds, so `cargo install --path cli`, which builds `fxtrace-tools` alone,
//! builds it without the feature, in a build directory of its own, and this script runs
//! again there. A release build of the tools alone embeds (`cargo build --release -p
//! fxtrace-tools` builds no object beside); a debug one does not (`cargo test -p
//! fxtrace-tools` would build the library twice at every change; its tests use the object the
//! workspace build put beside).
//!
//! Embedding builds the `fxtrace-preload` package with a nested `cargo build` into a target
//! directory of its own under `OUT_DIR` (a nested cargo on the outer target directory would
//! wait for the outer build's lock forever), same profile, offline, with the workspace's
//! `Cargo.lock`.
//!
//! `FXTRACE_EMBED_PRELOAD=1` embeds from any build, `=0` never. The binary reads the path of
//! what was embedded from `FXTRACE_EMBEDDED_PRELOAD` (an empty file: nothing embedded).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const EMBED_ENV: &str = "FXTRACE_EMBED_PRELOAD";
const LIB_NAME: &str = "libfxtrace_preload.so";

fn main() {
    println!("cargo:rerun-if-env-changed={EMBED_ENV}");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .parent()
        .expect("cli/ sits in the workspace")
        .to_path_buf();
    let embedded = out_dir.join(LIB_NAME);
    let embed = match env::var(EMBED_ENV).as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => {
            env::var_os("CARGO_FEATURE_PRELOAD_BUILT_BESIDE").is_none()
                && env::var("PROFILE").as_deref() == Ok("release")
        }
    };
    if embed {
        if let Err(message) = build_preload(&workspace, &out_dir, &embedded) {
            // A binary without the object still works (FXTRACE_PRELOAD_LIB, or an object next
            // to it); say why it has none.
            println!("cargo:warning=fxtrace: the preload object is not embedded: {message}");
            write_empty(&embedded);
        }
        for dir in ["src", "format/src", "preload/src", "provider-macros/src"] {
            println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
        }
        for file in [
            "Cargo.toml",
            "Cargo.lock",
            "format/Cargo.toml",
            "preload/Cargo.toml",
        ] {
            println!("cargo:rerun-if-changed={}", workspace.join(file).display());
        }
    } else {
        write_empty(&embedded);
    }
    println!(
        "cargo:rustc-env=FXTRACE_EMBEDDED_PRELOAD={}",
        embedded.display()
    );
}

/// Build `fxtrace-preload` into `out_dir/preload-target` and copy the object to `embedded`.
fn build_preload(workspace: &Path, out_dir: &Path, embedded: &Path) -> Result<(), String> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let profile = env::var("PROFILE").unwrap_or_else(|_| "release".into());
    let target_dir = out_dir.join("preload-target");
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--offline")
        .arg("-p")
        .arg("fxtrace-preload")
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    if profile == "release" {
        command.arg("--release");
    }
    // The outer build's settings for this package are not the nested build's.
    for var in ["CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR", "RUSTFLAGS"] {
        command.env_remove(var);
    }
    // No stdin: the nested cargo probes rustc with `rustc -`, which reads its program from
    // stdin; inherited from the outer build (a CI script's, a terminal's), stray input there
    // failed the probe and the object went unembedded.
    let status = command
        .stdin(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build -p fxtrace-preload: {status}"));
    }
    let built = target_dir.join(&profile).join(LIB_NAME);
    std::fs::copy(&built, embedded)
        .map(drop)
        .map_err(|e| format!("copying {}: {e}", built.display()))
}

fn write_empty(path: &Path) {
    std::fs::write(path, b"").expect("OUT_DIR is writable");
}

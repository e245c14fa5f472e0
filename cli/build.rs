//! Embeds `libfxtrace_preload.so` into the `fxtrace` binary when it is built outside the
//! workspace's own target directory (`cargo install --path cli`), so that `fxtrace record
//! --preload` works with nothing else installed.
//!
//! Inside the workspace (`cargo build` from the repository, the README's quick start) the
//! object is built by the same cargo invocation and found next to the binary: embedding it
//! there would build the library a second time, so nothing is embedded. Elsewhere this script
//! builds the `fxtrace-preload` package with a nested `cargo build` into a target directory of
//! its own under `OUT_DIR` (a nested cargo on the outer target directory would wait for the
//! outer build's lock forever), same profile, offline, with the workspace's `Cargo.lock`.
//!
//! `FXTRACE_EMBED_PRELOAD=1` embeds from any build, `=0` never. The binary reads the path of
//! what was embedded from `FXTRACE_EMBEDDED_PRELOAD` (an empty file: nothing embedded).

use std::env;
use std::path::{Component, Path, PathBuf};
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
        _ => !in_workspace_target(&out_dir, &workspace),
    };
    if embed {
        if let Err(message) = build_preload(&workspace, &out_dir, &embedded) {
            // A binary without the object still works (FXTRACE_PRELOAD_LIB, or an object next
            // to it); say why it has none.
            println!("cargo:warning=fxtrace: the preload object is not embedded: {message}");
            write_empty(&embedded);
        }
        for dir in ["src", "preload/src", "provider-macros/src"] {
            println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
        }
        for file in ["Cargo.toml", "Cargo.lock", "preload/Cargo.toml"] {
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

/// Whether `out_dir` lies in the workspace's default target directory:
/// `<workspace>/target/<profile>/build/<pkg>/out` (or `…/target/<triple>/<profile>/…`).
fn in_workspace_target(out_dir: &Path, workspace: &Path) -> bool {
    let target = workspace.join("target");
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let Ok(rel) = canonical(out_dir)
        .strip_prefix(canonical(&target))
        .map(Path::to_path_buf)
    else {
        return false;
    };
    let parts: Vec<String> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    let triple = env::var("TARGET").unwrap_or_default();
    match parts.as_slice() {
        [_profile, build, _pkg, _out] => build == "build",
        [first, _profile, build, _pkg, _out] => *first == triple && build == "build",
        _ => false,
    }
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

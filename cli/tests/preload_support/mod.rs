//! Shared by the `preload_*` tests: build `libfxtrace_preload.so`, compile C programs against
//! it, run `fxtrace record`, decode archives.

#![allow(dead_code)] // each test file uses a part

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::{Decoded, DecodedRecord, Decoder, ObjectType};

/// The `fxtrace` binary of this build.
pub(crate) fn fxtrace_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fxtrace"))
}

/// The repository root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(crate::WORKSPACE)
}

/// `libfxtrace_preload.so` of this build's profile, built once per test binary (`cargo
/// build -p fxtrace-preload`: a no-op when up to date). It lands next to `fxtrace`, where
/// `fxtrace record --preload` looks for it.
pub(crate) fn preload_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = fxtrace_bin()
            .parent()
            .expect("the fxtrace binary is in a directory")
            .to_path_buf();
        let mut cargo = Command::new(option_env!("CARGO").unwrap_or("cargo"));
        cargo
            .current_dir(root())
            .args(["build", "--quiet", "-p", "fxtrace-preload"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("cargo runs");
        assert!(status.success(), "building fxtrace-preload failed");
        let lib = dir.join("libfxtrace_preload.so");
        assert!(lib.is_file(), "{} was not built", lib.display());
        lib
    })
    .clone()
}

/// The C compiler, or `None` (the caller skips: [`skip_without_cc`]).
pub(crate) fn cc() -> Option<&'static str> {
    static CC: OnceLock<Option<&'static str>> = OnceLock::new();
    *CC.get_or_init(|| {
        ["cc", "gcc", "clang"].into_iter().find(|cc| {
            Command::new(cc)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
    })
}

/// Skips the calling test, which needs a C compiler (see [`cc`]).
pub(crate) fn skip_without_cc() {
    skip(Requirement::Cc, "no C compiler (cc, gcc or clang)");
}

/// Compile C `source` into `dir/name`, linked against the preload object when `link_api`.
pub(crate) fn compile_c(dir: &Path, name: &str, source: &str, link_api: bool) -> PathBuf {
    let cc = cc().expect("checked by the caller");
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    let mut cmd = Command::new(cc);
    cmd.args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-I")
        .arg(root().join("include"));
    if link_api {
        let lib_dir = preload_lib().parent().unwrap().to_path_buf();
        cmd.arg("-L")
            .arg(&lib_dir)
            .arg("-lfxtrace_preload")
            .arg(format!("-Wl,-rpath,{}", lib_dir.display()));
    }
    // dlsym (in libc since glibc 2.34; the stub keeps older ones working).
    cmd.arg("-ldl");
    let out = cmd.output().expect("the C compiler runs");
    assert!(
        out.status.success(),
        "{cc} failed on {name}.c:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Whether per-process perf events can be opened here; skips the calling test when not.
pub(crate) fn perf_allowed(test: &str) -> bool {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    match paranoid {
        Some(p) if p <= 2 || root => true,
        other => {
            skip(
                Requirement::Perf,
                format!("{test}: per-process perf events not allowed (paranoid {other:?})"),
            );
            false
        }
    }
}

/// `fxtrace record --preload -o DIR/trace.fxt [extra] -- cmd…`: its output and the archive.
pub(crate) fn record_preload(
    dir: &Path,
    extra: &[&str],
    cmd: &[&str],
    env: &[(&str, &str)],
) -> (Output, Vec<u8>) {
    record_preload_within(dir, extra, cmd, env, RUN_LIMIT)
}

/// [`record_preload`], called hung (killed, and the test fails) after `limit`.
pub(crate) fn record_preload_within(
    dir: &Path,
    extra: &[&str],
    cmd: &[&str],
    env: &[(&str, &str)],
    limit: std::time::Duration,
) -> (Output, Vec<u8>) {
    let archive = dir.join("trace.fxt");
    let _ = std::fs::remove_file(&archive);
    let mut command = Command::new(fxtrace_bin());
    command
        .arg("record")
        .arg("--preload")
        .arg("-o")
        .arg(&archive)
        .args(extra)
        .arg("--")
        .args(cmd)
        .env("FXTRACE_PRELOAD_LIB", preload_lib())
        .env_remove("FXTRACE_SOCKET")
        .env_remove("LD_PRELOAD");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = output_within(&mut command, limit);
    let bytes = std::fs::read(&archive).unwrap_or_default();
    (out, bytes)
}

/// How long a test waits for a program (or `fxtrace record`) to end before it calls it hung.
pub(crate) const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `command.output()`, in a process group of its own, killed (the whole group) and reported
/// as hung if it has not ended within `limit`: a hang fails its test instead of the run.
pub(crate) fn output_within(command: &mut Command, limit: std::time::Duration) -> Output {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;

    let mut child = command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the program starts");
    let pid = child.id() as libc::pid_t;
    let mut readers = [
        Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ]
    .map(|mut pipe| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    })
    .into_iter();
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the program") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: kill has no memory preconditions; -pid names the child's own group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            let _ = child.wait();
            panic!("{command:?} had not ended after {limit:?}: killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut next = || readers.next().unwrap().join().unwrap();
    Output {
        status,
        stdout: next(),
        stderr: next(),
    }
}

/// Every record of an archive; panics if it does not decode.
pub(crate) fn decode(bytes: &[u8]) -> Vec<Decoded<'_>> {
    Decoder::new(bytes)
        .collect::<Result<Vec<_>, _>>()
        .expect("the archive decodes")
}

/// What a test looks at in one archive.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    /// provider id → name.
    pub(crate) providers: BTreeMap<u32, String>,
    /// pid → process names.
    pub(crate) processes: BTreeMap<u64, BTreeSet<String>>,
    /// tid → (pid, thread names).
    pub(crate) threads: BTreeMap<u64, (u64, BTreeSet<String>)>,
    /// (provider, outgoing tid, incoming tid) of each context switch (0: outside).
    pub(crate) switches: Vec<(u32, u64, u64)>,
    /// (provider, pid, tid, category, name) of each event.
    pub(crate) events: Vec<(u32, u64, u64, String, String)>,
    /// Log messages.
    pub(crate) logs: Vec<String>,
}

impl Summary {
    /// Collect from decoded records.
    pub(crate) fn of(records: &[Decoded<'_>]) -> Summary {
        let mut s = Summary::default();
        for d in records {
            let provider = d.provider.unwrap_or(0);
            match &d.record {
                DecodedRecord::ProviderInfo { provider_id, name } => {
                    s.providers.insert(*provider_id, name.to_string());
                }
                DecodedRecord::KernelObject {
                    koid,
                    object_type,
                    name,
                    args,
                } => {
                    if *object_type == ObjectType::PROCESS {
                        s.processes
                            .entry(*koid)
                            .or_default()
                            .insert(name.to_string());
                    } else if *object_type == ObjectType::THREAD {
                        let pid = args
                            .iter()
                            .find_map(|a| match (a.name.as_ref(), &a.value) {
                                ("process", fxtrace_format::DecodedValue::Koid(p)) => Some(*p),
                                _ => None,
                            })
                            .unwrap_or(0);
                        let entry = s.threads.entry(*koid).or_insert((pid, BTreeSet::new()));
                        entry.1.insert(name.to_string());
                    }
                }
                DecodedRecord::ContextSwitch {
                    outgoing, incoming, ..
                } => s.switches.push((provider, outgoing.tid, incoming.tid)),
                DecodedRecord::Event(e) => s.events.push((
                    provider,
                    e.thread.pid,
                    e.thread.tid,
                    e.category.to_string(),
                    e.name.to_string(),
                )),
                DecodedRecord::Log { message, .. } => s.logs.push(message.to_string()),
                _ => {}
            }
        }
        s
    }

    /// The provider id named `name`.
    pub(crate) fn provider(&self, name: &str) -> Option<u32> {
        self.providers
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(id, _)| *id)
    }

    /// Names of events of `provider`.
    pub(crate) fn event_names(&self, provider: u32) -> Vec<&str> {
        self.events
            .iter()
            .filter(|e| e.0 == provider)
            .map(|e| e.4.as_str())
            .collect()
    }

    /// Tids that appear in a context switch of `provider`.
    pub(crate) fn switched_tids(&self, provider: u32) -> BTreeSet<u64> {
        self.switches
            .iter()
            .filter(|s| s.0 == provider)
            .flat_map(|s| [s.1, s.2])
            .filter(|&t| t != 0)
            .collect()
    }

    /// Tids named `name`.
    pub(crate) fn tids_named(&self, name: &str) -> Vec<u64> {
        self.threads
            .iter()
            .filter(|(_, (_, names))| names.contains(name))
            .map(|(tid, _)| *tid)
            .collect()
    }
}

/// `fxtrace stats` on an archive: its output, asserting success.
pub(crate) fn stats(archive: &Path) -> String {
    let out = Command::new(fxtrace_bin())
        .arg("stats")
        .arg(archive)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "fxtrace stats failed: {text}");
    text
}

//! Test support, not API (feature `test-support`): how a test of this workspace skips when
//! the machine lacks something it needs.
//!
//! A skip is one line on the process's real standard error, which the test harness does not
//! capture (it captures `print!`/`eprint!` of the test's thread only), so a run shows every
//! skip even for tests that passed. `FXTRACE_TEST_REQUIRE` (a comma list of
//! [`Requirement`] names, e.g. `root,perf,cc`) turns the skip of a listed requirement into a
//! failure: CI lists everything its machine has (`.ci/run`), so there a test that cannot run
//! fails instead of passing. The scripts' checks (`valgrind`: `scripts/check-instructions.sh`;
//! `clang`: `scripts/make-xray-fixtures.sh --check`) read the same list.

use std::fmt::Display;
use std::io::Write;

/// The variable listing the requirements whose skip is a failure.
pub const REQUIRE_ENV: &str = "FXTRACE_TEST_REQUIRE";

/// Something a test needs from the machine, by its name in [`REQUIRE_ENV`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// `root`: running as root, and what root may do (mount a tmpfs, run a process as
    /// another user).
    Root,
    /// `perf`: the perf_event capture the test makes is allowed and works (system-wide: root
    /// or `CAP_PERFMON`; per-process: `perf_event_paranoid` ≤ 2 or root).
    Perf,
    /// `perf-tsc-clock`: a perf event's mmap page gives the TSC conversion
    /// (`cap_user_time_zero`: the kernel's sched_clock is the TSC; not on most KVM guests).
    PerfTscClock,
    /// `paranoid`: `perf_event_paranoid` ≥ 1, so that an unprivileged user is refused a
    /// system-wide capture.
    Paranoid,
    /// `tracefs-unmounted`: no tracefs mounted (to show the error of its absence).
    TracefsUnmounted,
    /// `procfs`: `/proc/self/fd` names what each descriptor is.
    Procfs,
    /// `direct-io`: the temporary directory's file system takes `O_DIRECT` writes.
    DirectIo,
    /// `cc`: a C compiler (`cc`, `gcc` or `clang`).
    Cc,
    /// `clang`: `clang++` and `llvm-xray`, the XRay tools.
    Clang,
    /// `valgrind`: callgrind, for `scripts/check-instructions.sh`.
    Valgrind,
    /// `node`: `node` and `npm`, and the DevTools trace engine they install.
    Node,
    /// `tools`: the system programs a test runs (`/bin/ls`, util-linux's `setarch`,
    /// binutils' `readelf`).
    Tools,
    /// `examples`: the workspace's examples, built (`cargo test` builds them; a single test
    /// binary does not).
    Examples,
}

impl Requirement {
    /// Every requirement, in the order of the documentation.
    pub const ALL: [Requirement; 13] = [
        Requirement::Root,
        Requirement::Perf,
        Requirement::PerfTscClock,
        Requirement::Paranoid,
        Requirement::TracefsUnmounted,
        Requirement::Procfs,
        Requirement::DirectIo,
        Requirement::Cc,
        Requirement::Clang,
        Requirement::Valgrind,
        Requirement::Node,
        Requirement::Tools,
        Requirement::Examples,
    ];

    /// The name [`REQUIRE_ENV`] lists it by.
    pub fn name(self) -> &'static str {
        match self {
            Requirement::Root => "root",
            Requirement::Perf => "perf",
            Requirement::PerfTscClock => "perf-tsc-clock",
            Requirement::Paranoid => "paranoid",
            Requirement::TracefsUnmounted => "tracefs-unmounted",
            Requirement::Procfs => "procfs",
            Requirement::DirectIo => "direct-io",
            Requirement::Cc => "cc",
            Requirement::Clang => "clang",
            Requirement::Valgrind => "valgrind",
            Requirement::Node => "node",
            Requirement::Tools => "tools",
            Requirement::Examples => "examples",
        }
    }

    /// Whether `list` (a [`REQUIRE_ENV`] value) names `self`; `Err` names an entry that is no
    /// requirement (a typo would otherwise make a requirement silently optional).
    pub fn listed_in(self, list: &str) -> Result<bool, String> {
        let mut listed = false;
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match Requirement::ALL.iter().find(|r| r.name() == entry) {
                Some(&r) => listed |= r == self,
                None => {
                    let known: Vec<&str> = Requirement::ALL.iter().map(|r| r.name()).collect();
                    return Err(format!(
                        "{REQUIRE_ENV} lists `{entry}`, which is no requirement (known: {})",
                        known.join(", ")
                    ));
                }
            }
        }
        Ok(listed)
    }
}

/// Skips the calling test, which cannot run here for lack of `requirement` (`why` says what
/// is missing): writes `skipped <test>: <why> [<requirement>]` to the real standard error and
/// returns, for the caller to return; panics (fails the test) instead when [`REQUIRE_ENV`]
/// lists `requirement`.
#[track_caller]
pub fn skip(requirement: Requirement, why: impl Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let line = format!("skipped {test}: {why} [{}]\n", requirement.name());
    // The harness captures `eprint!` of a test's thread, not the descriptor itself: written
    // there, the line shows for a test that passes too.
    let _ = std::io::stderr().write_all(line.as_bytes());
    let list = std::env::var(REQUIRE_ENV).unwrap_or_default();
    match requirement.listed_in(&list) {
        Ok(false) => {}
        Ok(true) => panic!(
            "{test} cannot run: {why}; {REQUIRE_ENV}={list} requires `{}`",
            requirement.name()
        ),
        Err(problem) => panic!("{problem}"),
    }
}

/// Let `fxtrace::TracingLayer`'s table of spans use `levels` levels at most (1 to 8: 2 048 ×
/// (2^`levels` − 1) live spans; 8 by default); the previous bound. For tests of a full table
/// (a test that lowers it restores it, and runs alone: the table is the process's).
#[cfg(feature = "tracing")]
pub fn limit_span_table(levels: usize) -> usize {
    crate::tracing_layer::allow_levels(levels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_listed_requirement_is_found_among_others_and_spaces() {
        assert_eq!(Requirement::Cc.listed_in("root, cc ,perf"), Ok(true));
        assert_eq!(Requirement::Cc.listed_in("root,clang"), Ok(false));
        assert_eq!(Requirement::Cc.listed_in(""), Ok(false));
        assert_eq!(Requirement::Cc.listed_in(",,"), Ok(false));
        // Names are whole: `cc` is not part of another name.
        assert_eq!(Requirement::Cc.listed_in("procfs"), Ok(false));
    }

    #[test]
    fn an_unknown_name_is_an_error_naming_it() {
        let err = Requirement::Root.listed_in("root,gpu").unwrap_err();
        assert!(
            err.contains("`gpu`") && err.contains("tracefs-unmounted"),
            "{err}"
        );
    }

    /// The child of [`a_skip_is_on_the_real_stderr_and_fails_when_required`].
    #[test]
    #[ignore = "helper: runs as the child of a_skip_is_on_the_real_stderr_and_fails_when_required"]
    fn skipping_child() {
        if std::env::var_os("FXTRACE_SKIPPING_CHILD").is_some() {
            skip(Requirement::Cc, "the skip's own test");
        }
    }

    /// The harness captures the output of passing tests: the skip line reaches the terminal
    /// all the same, and the requirement listed makes the skip a failure.
    #[test]
    fn a_skip_is_on_the_real_stderr_and_fails_when_required() {
        let run = |list: &str| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "test_support::tests::skipping_child",
                    "--ignored",
                ])
                .env("FXTRACE_SKIPPING_CHILD", "1")
                .env(REQUIRE_ENV, list)
                .output()
                .unwrap()
        };
        let line = "skipped test_support::tests::skipping_child: the skip's own test [cc]\n";
        let skipped = run("root,perf");
        let stderr = String::from_utf8_lossy(&skipped.stderr);
        assert!(skipped.status.success(), "{stderr}");
        assert_eq!(stderr, line, "alone on stderr, not in the captured output");
        let required = run("root, cc");
        let stdout = String::from_utf8_lossy(&required.stdout);
        assert!(!required.status.success());
        assert!(
            stdout.contains("FXTRACE_TEST_REQUIRE=root, cc requires `cc`"),
            "{stdout}"
        );
        assert!(String::from_utf8_lossy(&required.stderr).contains(line));
        let typo = run("cc,gpu");
        assert!(!typo.status.success());
        assert!(String::from_utf8_lossy(&typo.stdout).contains("lists `gpu`"));
    }

    /// The scripts' checks read the same list: a missing tool is a skip (exit 0, one line)
    /// with the variable unset, empty or not naming it, a failure with it listed. Run with a
    /// `PATH` of only what they run before their tool check.
    #[test]
    fn the_scripts_skip_a_missing_tool_unless_it_is_required() {
        let bin = std::env::temp_dir().join(format!("fxtrace-scripts-path-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&bin);
        std::fs::create_dir_all(&bin).unwrap();
        let path = std::env::var_os("PATH").unwrap_or_default();
        for tool in ["bash", "dirname", "id"] {
            let found = std::env::split_paths(&path)
                .map(|dir| dir.join(tool))
                .find(|p| p.is_file())
                .unwrap_or_else(|| panic!("{tool} is not on PATH"));
            std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
        }
        let scripts = [
            ("scripts/make-xray-fixtures.sh", "clang"),
            ("scripts/check-instructions.sh", "valgrind"),
        ];
        for (script, tool) in scripts {
            let run = |required: Option<&str>| {
                let mut command =
                    std::process::Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join(script));
                command
                    .arg("--check")
                    .env("PATH", &bin)
                    .env_remove(REQUIRE_ENV);
                if let Some(list) = required {
                    command.env(REQUIRE_ENV, list);
                }
                let out = command.output().unwrap();
                let text = String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr);
                (out.status.code(), text)
            };
            for list in [None, Some(""), Some("root, perf")] {
                let (code, text) = run(list);
                assert_eq!(code, Some(0), "{script} with {list:?}: {text}");
                assert!(text.contains("skipped"), "{script} with {list:?}: {text}");
            }
            let list = format!("root, {tool} ,perf");
            let (code, text) = run(Some(&list));
            assert_eq!(code, Some(1), "{script} with {list:?}: {text}");
            assert!(text.contains("FAIL"), "{script} with {list:?}: {text}");
        }
        std::fs::remove_dir_all(&bin).unwrap();
    }

    #[test]
    fn every_requirement_has_its_own_name() {
        let mut names: Vec<&str> = Requirement::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Requirement::ALL.len());
        for r in Requirement::ALL {
            assert_eq!(r.listed_in(r.name()), Ok(true));
        }
    }
}

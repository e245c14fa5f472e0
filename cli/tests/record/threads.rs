//! `fxtrace record -- examples/threads` in each buffering mode: the archive holds exactly the
//! events the example says it wrote, minus the drops the archive itself reports.

use std::path::PathBuf;
use std::process::Command;

use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::{DecodedRecord, DecodedValue, Decoder};

/// `examples/threads`, built by `cargo test` next to the test binaries.
fn threads_example() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples/threads");
    if path.exists() {
        Some(path)
    } else {
        skip(
            Requirement::Examples,
            format!(
                "{} is not built (`cargo test` builds examples; or `cargo build --example \
                 threads`)",
                path.display()
            ),
        );
        None
    }
}

/// What the archive says about the "threads" provider.
#[derive(Debug, Default)]
struct Counted {
    /// Event records in category "example" plus log records.
    events: u64,
    /// The count argument of the manager's "records dropped" marker (0 without one).
    dropped: u64,
    /// Buffer-overflow provider events.
    overflow_events: u64,
    providers: Vec<String>,
}

fn count(bytes: &[u8]) -> Counted {
    let mut c = Counted::default();
    let mut ours = None;
    for d in Decoder::new(bytes) {
        let d = d.unwrap_or_else(|e| panic!("the archive decodes: {e}"));
        let ours_now = ours.is_some() && d.provider == ours;
        let u64_arg = |args: &[fxtrace_format::DecodedArg<'_>], name: &str| {
            args.iter().find_map(|a| match a.value {
                DecodedValue::U64(n) if a.name == name => Some(n),
                _ => None,
            })
        };
        match &d.record {
            DecodedRecord::ProviderInfo { name, provider_id } => {
                if name == "threads" {
                    ours = Some(*provider_id);
                }
                c.providers.push(name.to_string());
            }
            DecodedRecord::ProviderEvent { .. } if ours_now => c.overflow_events += 1,
            DecodedRecord::Event(e) if ours_now && e.category == "example" => c.events += 1,
            // The manager's markers, in its own section, name the provider they are about.
            DecodedRecord::Event(e)
                if d.provider == Some(fxtrace_format::MANAGER_PROVIDER_ID)
                    && u64_arg(&e.args, "provider").map(|id| id as u32) == ours =>
            {
                c.dropped += u64_arg(&e.args, "records_dropped").unwrap_or(0);
            }
            DecodedRecord::Log { .. } if ours_now => c.events += 1,
            _ => {}
        }
    }
    c
}

/// Records `threads` with `record_args`; returns (events the example wrote, what the archive
/// holds).
fn record(example: &PathBuf, record_args: &[&str], threads: &str, events: &str) -> (u64, Counted) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace.fxt");
    let output = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .arg("record")
        .args(record_args)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(example)
        .args(["--threads", threads, "--events", events])
        .output()
        .expect("run fxtrace record");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "fxtrace record failed: {stdout}\n{stderr}"
    );
    let written: u64 = stdout
        .lines()
        .chain(stderr.lines())
        .find_map(|l| l.strip_prefix("events_written="))
        .unwrap_or_else(|| panic!("the example reports events_written: {stdout}\n{stderr}"))
        .trim()
        .parse()
        .unwrap();
    let bytes = std::fs::read(&out).unwrap();
    (written, count(&bytes))
}

#[test]
fn every_mode_holds_what_the_example_wrote() {
    let Some(example) = threads_example() else {
        return;
    };
    for mode in ["oneshot", "circular", "streaming"] {
        let (written, c) = record(&example, &["-m", mode, "-b", "8"], "3", "500");
        assert_eq!(written, 3 * 500 * 11, "{mode}: the example's own count");
        assert_eq!(c.providers, ["threads"], "{mode}");
        assert_eq!(c.dropped, 0, "{mode}: an 8 MiB buffer holds 16500 records");
        assert_eq!(c.events, written, "{mode}: every event is in the archive");
    }
}

#[test]
fn oneshot_drops_are_counted_exactly() {
    let Some(example) = threads_example() else {
        return;
    };
    // About 29 bytes per record: 2 threads x 4000 x 11 records do not fit 1 MiB.
    let (written, c) = record(&example, &["-m", "oneshot", "-b", "1"], "2", "4000");
    assert_eq!(written, 2 * 4000 * 11);
    assert!(c.dropped > 0, "a 1 MiB oneshot buffer overflows: {c:?}");
    assert_eq!(c.overflow_events, 1, "the overflow is in the metadata too");
    assert_eq!(
        c.events + c.dropped,
        written,
        "written = archived + dropped ({c:?})"
    );
}

#[test]
fn traced_example_through_record_keeps_its_durations() {
    let Some(threads) = threads_example() else {
        return;
    };
    let example = threads.with_file_name("hello_traced");
    if !example.exists() {
        skip(
            Requirement::Examples,
            format!("{} is not built", example.display()),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hello.fxt");
    let output = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .args(["record", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&example)
        .output()
        .expect("run fxtrace record");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bytes = std::fs::read(&out).unwrap();
    let mut fib = 0;
    let mut provider = None;
    for d in Decoder::new(&bytes) {
        match d.expect("the archive decodes").record {
            DecodedRecord::ProviderInfo { name, .. } => provider = Some(name.to_string()),
            DecodedRecord::Event(e) if e.name == "hello_traced::fib" => fib += 1,
            _ => {}
        }
    }
    assert_eq!(provider.as_deref(), Some("hello_traced"));
    // fib(12) makes 465 calls, each one duration-complete record.
    assert_eq!(fib, 465);
}

#[test]
fn standalone_run_prints_a_human_summary() {
    let Some(threads) = threads_example() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(threads)
        .current_dir(dir.path())
        .env_remove("FXTRACE_SOCKET")
        // A socket nobody listens on: the example traces on its own.
        .env("FXTRACE_SOCKET", dir.path().join("none.sock"))
        .args(["--threads", "2", "--events", "100"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("threads: wrote threads.fxt: "))
        .unwrap_or_else(|| panic!("summary line in {stderr}"));
    let bytes = std::fs::read(dir.path().join("threads.fxt")).unwrap();
    assert!(
        line.contains(&format!(" records, {} bytes", bytes.len())),
        "{line}"
    );
    assert!(line.contains("no record dropped"), "{line}");
    assert!(
        !stderr.contains("FinishReport") && !stderr.contains("StopReport"),
        "{stderr}"
    );
}

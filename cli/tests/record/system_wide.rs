//! `fxtrace record --system-wide -- CMD` where CMD is a provider: one archive with the kernel
//! provider's section (context switches of every CPU) and the command's own provider section,
//! each intact; and what is said where LBR cannot be sampled. Needs root or CAP_PERFMON.

use crate::support;

use std::collections::BTreeSet;
use std::process::Command;

use fxtrace::capture::PerfPermissions;
use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::{DecodedRecord, Decoder};

use support::{parse_probe, probe, seqs_of_thread};

#[test]
fn kernel_and_provider_sections_share_one_archive() {
    let perms = PerfPermissions::read();
    if !(perms.root || perms.perfmon) {
        skip(Requirement::Perf, "needs root or CAP_PERFMON");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("both.fxt");
    let out = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .args([
            "record",
            "-a",
            "--no-lbr",
            "-m",
            "streaming",
            "-b",
            "256K",
            "-o",
        ])
        .arg(&trace)
        .arg("--")
        .arg(probe())
        .args([
            "--events",
            "5000",
            "--threads",
            "2",
            "--pause-every",
            "20",
            "--pause-us",
            "200",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report = parse_probe(&String::from_utf8_lossy(&out.stdout));
    let pid = u64::from(report.pid.unwrap());

    // Both summaries: the provider table (with the kernel row) and the system-wide lines.
    assert!(stderr.contains("context switches: "), "{stderr}");
    assert!(stderr.contains("built-in"), "{stderr}");
    assert!(stderr.contains("the command exited"), "{stderr}");

    let bytes = std::fs::read(&trace).unwrap();
    let records: Vec<_> = Decoder::new(&bytes)
        .collect::<Result<_, _>>()
        .expect("the archive decodes");
    // The kernel section opens the archive (started before the command), after the
    // archive's wall-clock anchor.
    assert!(fxtrace_tools::read::wall::WallClock::of(&records[1].record).is_some());
    assert!(matches!(
        &records[2].record,
        DecodedRecord::ProviderInfo { provider_id: 1, name } if name == "kernel"
    ));
    let mut infos = BTreeSet::new();
    let mut switches_of_probe = 0;
    let mut kernel_switches = 0;
    for d in &records {
        match &d.record {
            DecodedRecord::ProviderInfo { provider_id, name } => {
                assert!(infos.insert(*provider_id), "one Provider Info per provider");
                assert!(name == "kernel" || name == "probe", "{name}");
            }
            DecodedRecord::ContextSwitch {
                outgoing, incoming, ..
            } => {
                assert_eq!(d.provider, Some(1), "switches are the kernel's");
                kernel_switches += 1;
                if outgoing.pid == pid || incoming.pid == pid {
                    switches_of_probe += 1;
                }
            }
            DecodedRecord::Event(e) if e.category == "probe" => {
                assert_eq!(d.provider, Some(2), "probe events are the probe's");
            }
            _ => {}
        }
    }
    assert_eq!(infos, BTreeSet::from([1, 2]));
    assert!(kernel_switches > 0);
    assert!(
        switches_of_probe > 0,
        "the probe's threads sleep 200 µs every 20 events: they are switched out"
    );
    let archive = support::decode(&bytes);
    let part = archive.one("probe");
    let kept: usize = (0..2).map(|t| seqs_of_thread(&part.events, t).len()).sum();
    assert_eq!(kept as u64, report.written, "{stderr}");
    println!(
        "system-wide + provider: {kernel_switches} context switches ({switches_of_probe} of the \
         probe), {kept} probe events, {} bytes",
        bytes.len()
    );
}

/// Where LBR cannot be sampled (no PMU: this VM), `record --preload -a` of a shell running three
/// programs says so once, in one short line with the remedy; the trace holds the whole text
/// once (the kernel provider's; the preloaded programs are told not to try), and the readers
/// print it once. (Before: two ~600-character messages on the terminal and ten copies in the
/// trace, two per source, each printed again by `dump`, `convert` and `report lbr`.) Where
/// LBR is sampled, nothing of the kind is said.
#[test]
fn lbr_unavailable_is_said_once_and_kept_once() {
    let perms = PerfPermissions::read();
    if !(perms.root || perms.perfmon) {
        skip(Requirement::Perf, "needs root or CAP_PERFMON");
        return;
    }
    let unavailable = fxtrace::capture::probe::lbr_unavailable(std::process::id()).is_some();
    let fxtrace = env!("CARGO_BIN_EXE_fxtrace");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("lbr.fxt");
    let out = Command::new(fxtrace)
        .args(["record", "--preload", "-a", "-o"])
        .arg(&trace)
        .args(["--", "/bin/sh", "-c", "/bin/true; /bin/true; /bin/true"])
        .env_remove("FXTRACE_PRELOAD_LBR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    if !unavailable {
        assert!(!stderr.contains("LBR unavailable"), "{stderr}");
        return;
    }
    // The whole text's own words, which the short line does not repeat.
    let whole = "hardware branch sampling (LBR) needs";
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("fxtrace: LBR unavailable"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(said[0].len() < 300, "{}", said[0]);
    if !perms.hardware_pmu {
        assert!(said[0].contains("pmu=on"), "the remedy: {}", said[0]);
    }
    assert!(!stderr.contains(whole), "{stderr}");
    let bytes = std::fs::read(&trace).unwrap();
    let copies = |text: &[u8]| {
        text.windows(whole.len())
            .filter(|w| *w == whole.as_bytes())
            .count()
    };
    assert_eq!(copies(&bytes), 1, "the whole text, once in the trace");
    let read = |args: &[&str]| {
        let out = Command::new(fxtrace).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let trace_arg = trace.to_str().unwrap();
    let dump = read(&["dump", trace_arg]);
    assert_eq!(
        dump.lines().filter(|l| l.contains("LBR")).count(),
        1,
        "{dump}"
    );
    let json = dir.path().join("lbr.json");
    read(&[
        "convert",
        "--to",
        "chrome-json",
        trace_arg,
        "-o",
        json.to_str().unwrap(),
    ]);
    assert_eq!(copies(&std::fs::read(&json).unwrap()), 1);
    let report = read(&["report", "lbr", trace_arg]);
    assert_eq!(report.matches("recorded reason: ").count(), 1, "{report}");
    assert!(!report.contains(whole), "{report}");
}

//! `fxtrace import-perf` (issue 36): a real `perf record -e cycles -b` file from an Intel
//! Xeon gives `report lbr` the edge counts, mispredictions and cycles `perf script -F brstack`
//! gives, symbolized with the sampled binary; the same recording as a stream imports the
//! same; Perfetto's importer loads the imports with no error; a `perf sched record` made here
//! (root) imports every switch `perf sched script` shows, with the run times of
//! `perf sched timehist -s`, which `report sched` gives too; crafted inputs (cut at every
//! 4 KiB, lying headers, 2^32 attributes, records of size 0 and 65 535, a zstd bomb, feature
//! sections that repeat the data) import what precedes the damage, name its offset, never
//! panic, and stay in bounded memory.
//!
//! The fixture is a reduced copy of google/autofdo's `testdata/propeller_sample_1.perfdata1`
//! (Apache-2.0; `tests/fixtures/perf/README.md`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fxtrace_format::sched::{Side, SwitchView};
use fxtrace_format::{DecodedRecord, Decoder, ObjectType};
use fxtrace_tools::convert::perf::input::Damage;
use fxtrace_tools::convert::perf::{
    import_perf, ImportError, ImportOptions, ImportSummary, PerfSource, FURTHER_KINDS,
    MAX_SKIPPED_KINDS,
};
use fxtrace_tools::report::LbrReport;

use fxtrace::test_support::{skip, Requirement};

use crate::bounded::{run_within_memory, temp_dir, Run};
use crate::WORKSPACE;

const FXTRACE: &str = env!("CARGO_BIN_EXE_fxtrace");

/// The reduced LBR recording and the binary it sampled.
fn fixture(name: &str) -> PathBuf {
    Path::new(WORKSPACE).join("tests/fixtures/perf").join(name)
}

const LBR_DATA: &str = "propeller_sample_1.perf.data";
const LBR_BINARY: &str = "propeller_sample_1.bin";
/// Where the sampled binary was loaded: its first mapping (the read-only one, before the
/// executable mapping at 0x5629ec742000 that the recording's MMAP2 names).
const LBR_BASE: &str = "0x5629ec741000";

/// Whether `program --version` runs here.
fn runs(program: &Path) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `perf`, when it runs here.
fn perf() -> Option<&'static str> {
    let ok = runs(Path::new("perf"));
    if !ok {
        skip(
            Requirement::Tools,
            "perf is not installed (apt-get install linux-perf)",
        );
    }
    ok.then_some("perf")
}

fn options() -> ImportOptions {
    ImportOptions::new("perf:test")
}

/// Imports `path` in this process.
fn import(path: &Path) -> Result<(Vec<u8>, ImportSummary), ImportError> {
    import_perf(
        &PerfSource::File(path.to_path_buf()),
        Vec::new(),
        &options(),
    )
}

/// Edge → (count, mispredicted, cycles total, entries with cycles).
type Edges = BTreeMap<(u64, u64), (u64, u64, u64, u64)>;

fn fxt_edges(trace: &[u8]) -> Edges {
    let read = LbrReport::read(trace);
    assert!(read.decode_error.is_none(), "{:?}", read.decode_error);
    read.report
        .overall()
        .top(usize::MAX)
        .into_iter()
        .map(|(e, s)| {
            (
                (e.from, e.to),
                (s.count, s.mispredicted, s.cycles_total, s.cycles_known),
            )
        })
        .collect()
}

/// `perf script -F brstack`, aggregated as `report lbr` aggregates: per (from, to), the
/// entries, the mispredicted ones (`M`), the cycles and the entries that have cycles.
fn perf_edges(perf: &str, data: &Path) -> Edges {
    let out = Command::new(perf)
        .args(["script", "-F", "brstack", "-i"])
        .arg(data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut edges = Edges::new();
    for entry in String::from_utf8(out.stdout).unwrap().split_whitespace() {
        // 0xFROM/0xTO/M|P|-/X|-/A|-/CYCLES[/TYPE]
        let f: Vec<&str> = entry.split('/').collect();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let e = edges.entry((hex(f[0]), hex(f[1]))).or_default();
        e.0 += 1;
        e.1 += u64::from(f[2] == "M");
        let cycles: u64 = f[5].parse().unwrap_or(0);
        e.2 += cycles;
        e.3 += u64::from(cycles > 0);
    }
    edges
}

#[test]
fn lbr_edges_mispredictions_and_cycles_are_perfs_own() {
    let data = fixture(LBR_DATA);
    let (trace, summary) = import(&data).unwrap();
    assert_eq!(summary.damage, []);
    assert_eq!(summary.written.branch_blobs, 124, "{summary}");
    assert_eq!(summary.written.mmap_blobs, 4);
    assert_eq!(summary.written.lbr_entries_truncated, 0);
    assert_eq!(summary.written.late, 0, "records written in time order");
    // Nothing dropped silently: what was not converted is listed by kind.
    assert_eq!(summary.skipped.count("PERF_RECORD_THROTTLE"), 29);
    assert_eq!(summary.skipped.count("PERF_RECORD_UNTHROTTLE"), 29);
    assert_eq!(summary.skipped.count("PERF_RECORD_TIME_CONV"), 1);
    let ours = fxt_edges(&trace);
    let Some(perf) = perf() else { return };
    let theirs = perf_edges(perf, &data);
    assert_eq!(ours.len(), 10);
    assert_eq!(
        ours, theirs,
        "edges: (count, mispredicted, cycles, with cycles)"
    );
    // The one misprediction perf marks (M) in these samples, on the hot loop's branch.
    assert_eq!(ours[&(0x5629ec7428e3, 0x5629ec7428f9)].1, 1);
    assert_eq!(ours.values().map(|e| e.1).sum::<u64>(), 1);
}

#[test]
fn report_lbr_names_the_edges_with_the_sampled_binary() {
    let dir = temp_dir("import-perf-report");
    let out = dir.join("lbr.fxt");
    let import = Command::new(FXTRACE)
        .arg("import-perf")
        .arg(fixture(LBR_DATA))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(import.status.success(), "{import:?}");
    let said = String::from_utf8(import.stdout).unwrap();
    assert!(said.contains("124 branch samples"), "{said}");
    assert!(
        said.contains(
            "skipped: 1 PERF_RECORD_TIME_CONV, 29 PERF_RECORD_THROTTLE, 29 PERF_RECORD_UNTHROTTLE"
        ),
        "{said}"
    );
    let binary = format!("{}@{LBR_BASE}", fixture(LBR_BINARY).display());
    let report = Command::new(FXTRACE)
        .args(["report", "lbr", "--top", "3", "--binary", &binary])
        .arg(&out)
        .output()
        .unwrap();
    assert!(report.status.success(), "{report:?}");
    let text = String::from_utf8(report.stdout).unwrap();
    for line in [
        "0x5629ec742967 main+0x47 -> 0x5629ec7428d0 compute_flag",
        "0x5629ec742905 compute_flag+0x35 -> 0x5629ec74296c main+0x4c",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// `perf inject -o -` turns the file into a stream (perf's pipe format): imported from
/// standard input through a pipe, it gives the same edges; cut anywhere, what precedes the
/// cut is imported and the cut named.
#[test]
fn a_stream_imports_as_the_file_does() {
    let Some(perf) = perf() else { return };
    let dir = temp_dir("import-perf-stream");
    let stream = dir.join("stream.data");
    let injected = Command::new(perf)
        .args(["inject", "-o", "-", "-i"])
        .arg(fixture(LBR_DATA))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(injected.status.success(), "{injected:?}");
    std::fs::write(&stream, &injected.stdout).unwrap();
    let from_stdin = |bytes: &[u8]| {
        let out = dir.join("stream.fxt");
        let mut child = Command::new(FXTRACE)
            .args(["import-perf", "-", "-o"])
            .arg(&out)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let bytes = bytes.to_vec();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&bytes);
        });
        let done = child.wait_with_output().unwrap();
        writer.join().unwrap();
        let trace = std::fs::read(&out).unwrap_or_default();
        (done, trace)
    };
    let (done, trace) = from_stdin(&injected.stdout);
    assert!(done.status.success(), "{done:?}");
    let (file_trace, _) = import(&fixture(LBR_DATA)).unwrap();
    assert_eq!(fxt_edges(&trace), fxt_edges(&file_trace));
    for cut in [
        20,
        1000,
        injected.stdout.len() / 2,
        injected.stdout.len() - 3,
    ] {
        let (done, trace) = from_stdin(&injected.stdout[..cut]);
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(1), "cut at {cut}: {stderr}");
        assert!(stderr.contains("byte "), "cut at {cut}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        if cut > 1000 {
            assert!(stderr.contains("holds what was read before it"), "{stderr}");
            assert!(!fxt_edges(&trace).is_empty());
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Perfetto's trace processor: `FXTRACE_TRACE_PROCESSOR`, else beside this checkout
/// (`../shared/tools`).
fn trace_processor() -> Option<PathBuf> {
    let tool = std::env::var_os("FXTRACE_TRACE_PROCESSOR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(WORKSPACE).join("../shared/tools/trace_processor_shell"));
    let runs = runs(&tool);
    if !runs {
        skip(
            Requirement::Tools,
            format!(
                "Perfetto's trace_processor_shell does not run from {} (it needs apt's \
                 libprotobuf32)",
                tool.display()
            ),
        );
    }
    runs.then_some(tool)
}

/// Runs `sql` on `trace` with Perfetto's importer; its CSV output.
fn perfetto_query(tool: &Path, trace: &Path, sql: &str) -> String {
    let query = trace.with_extension("sql");
    std::fs::write(&query, sql).unwrap();
    let out = Command::new(tool)
        .arg("-q")
        .arg(&query)
        .arg(trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Perfetto's error and data-loss stats with a value: none for a sound import.
const ERROR_STATS: &str = "select name, idx, value from stats \
    where (severity = 'error' or severity = 'data_loss') and value > 0;";

#[test]
fn perfetto_loads_the_lbr_import_with_no_error() {
    let Some(tool) = trace_processor() else {
        return;
    };
    let dir = temp_dir("import-perf-perfetto");
    let out = dir.join("lbr.fxt");
    let (trace, _) = import(&fixture(LBR_DATA)).unwrap();
    std::fs::write(&out, trace).unwrap();
    let stats = perfetto_query(&tool, &out, ERROR_STATS);
    assert_eq!(stats.lines().count(), 1, "error stats:\n{stats}");
    // The sampled thread, named and placed in its process.
    let threads = perfetto_query(
        &tool,
        &out,
        "select t.tid, t.name, p.pid from thread t join process p using(upid) where t.tid = 5595;",
    );
    assert!(
        threads.contains("5595,\"propeller_sampl\",5595"),
        "{threads}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// The run time of every thread, from the trace's context switches: each switch ends the
/// outgoing thread's slice, which began at the previous switch of its CPU (the first switch
/// of each CPU begins nothing).
fn run_times_ns(trace: &[u8]) -> (Switches, HashMap<u64, u64>) {
    let mut last: HashMap<u16, u64> = HashMap::new();
    let mut run: HashMap<u64, u64> = HashMap::new();
    let mut switches = Switches::default();
    for d in Decoder::new(trace) {
        let d = d.unwrap();
        let Some(switch) = SwitchView::of(&d.record) else {
            continue;
        };
        let out = match d.record {
            DecodedRecord::ContextSwitch { outgoing, .. } => outgoing.tid,
            DecodedRecord::SchedContextSwitch { outgoing_tid, .. } => outgoing_tid,
            _ => continue,
        };
        switches.all += 1;
        if switch.incoming == Side::Idle {
            switches.to_idle += 1;
        }
        if let Some(start) = last.insert(switch.cpu, switch.time.ns) {
            *run.entry(out).or_default() += switch.time.ns - start;
        }
    }
    (switches, run)
}

/// The threads a trace names `fxtrace-…` (fxtrace's own, which `report sched` leaves out).
fn fxtraces_own_threads(trace: &[u8]) -> HashSet<u64> {
    Decoder::new(trace)
        .filter_map(|d| match d.unwrap().record {
            DecodedRecord::KernelObject {
                koid,
                object_type: ObjectType::THREAD,
                name,
                ..
            } if name.starts_with("fxtrace-") => Some(koid),
            _ => None,
        })
        .collect()
}

/// The context switches of a trace: all of them, and those to the idle task, which get no
/// scheduling slice in Perfetto (its importer opens one for an incoming thread not idle).
#[derive(Default)]
struct Switches {
    all: u64,
    to_idle: u64,
}

/// `perf sched timehist -s`: tid → run time (ns), from its runtime summary and terminated
/// tasks (`comm[tid/pid]  parent  sched-in  run-time(msec)  min  avg  max  stddev  migrations`).
/// perf charges a thread's last slice before it is reaped to a task `-1` (the sample's own
/// pid and tid, which the kernel writes as -1 once the task's pid is detached), where the
/// import, as the live capture, charges it to the thread the tracepoint names (`prev_pid`):
/// that task's run time is the entry `u64::MAX`.
fn timehist_run_times(perf: &str, data: &Path) -> HashMap<u64, u64> {
    let out = Command::new(perf)
        .args(["sched", "timehist", "-s", "-i"])
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut times = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 9 {
            continue;
        }
        let name = fields[..fields.len() - 8].join(" ");
        let Some(ids) = name.rsplit_once('[').and_then(|(_, r)| r.strip_suffix(']')) else {
            continue;
        };
        let tid = match ids.split('/').next().unwrap() {
            "-1" => Ok(u64::MAX),
            tid => tid.parse::<u64>(),
        };
        let (Ok(tid), Ok(ms)) = (tid, fields[fields.len() - 6].parse::<f64>()) else {
            continue;
        };
        *times.entry(tid).or_default() += (ms * 1e6).round() as u64;
    }
    times
}

/// The records perf finds out of time order in a recording (`N out of order events recorded.`
/// on the standard error of `perf script`): a CPU's record that reached its buffer after perf
/// had read a later round of the other CPUs' (a vCPU stalled by its host, say). perf and the
/// import both sort a round with the one before it, no further.
fn perf_out_of_order(stderr: &[u8]) -> u64 {
    String::from_utf8_lossy(stderr)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_suffix(" out of order events recorded.")?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[test]
fn perf_sched_record_imports_every_switch_and_run_time() {
    let Some(perf) = perf() else { return };
    let dir = temp_dir("import-perf-sched");
    let data = dir.join("sched.data");
    // A few threads that sleep, wake and burn CPU, recorded on every CPU, with call chains.
    let record = Command::new(perf)
        .args(["sched", "record", "-g", "-o"])
        .arg(&data)
        .args([
            "--",
            "sh",
            "-c",
            "for i in 1 2 3; do sleep 0.02 & dd if=/dev/zero of=/dev/null bs=64k count=2000 \
             2>/dev/null & done; wait",
        ])
        .output()
        .unwrap();
    if !record.status.success() {
        skip(
            Requirement::Perf,
            format!(
                "perf sched record failed here (needs root and tracefs): {}",
                String::from_utf8_lossy(&record.stderr).trim()
            ),
        );
        return;
    }
    let (trace, summary) = import(&data).unwrap();
    assert_eq!(summary.damage, [], "{summary}");
    let script = Command::new(perf)
        .args(["sched", "script", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let perf_switches = String::from_utf8_lossy(&script.stdout)
        .lines()
        .filter(|l| l.contains("sched:sched_switch:"))
        .count() as u64;
    assert!(perf_switches > 10, "{perf_switches} switches recorded");
    assert_eq!(summary.written.context_switches, perf_switches, "{summary}");
    // In time order, but for the records the recording itself has out of order, which perf
    // counts too: each is written late with at most the two thread announcements of its
    // switch (a loaded host once gave "late: 5").
    let perf_late = perf_out_of_order(&script.stderr);
    assert!(
        summary.written.late <= 3 * perf_late,
        "{} records written late; perf sched script finds {perf_late} out of order",
        summary.written.late
    );
    if perf_late > 0 {
        println!(
            "note: the recording has {perf_late} records out of order (perf's count): {} late",
            summary.written.late
        );
    }
    let (switches, ours) = run_times_ns(&trace);
    assert_eq!(switches.all, perf_switches);
    let mut theirs = timehist_run_times(perf, &data);
    // The three dd's at least ran for a millisecond each.
    assert!(
        theirs.values().filter(|&&ns| ns > 1_000_000).count() >= 3,
        "{theirs:?}"
    );
    // What perf charged to task -1 belongs to threads that exited: the import charges it to
    // them, so their run times may exceed perf's by that much in all, never more.
    let reaped = theirs.remove(&u64::MAX).unwrap_or(0);
    let (mut worst, mut excess) = (0, 0);
    for (tid, ns) in &theirs {
        let got = ours.get(tid).copied().unwrap_or(0);
        let over = got.saturating_sub(*ns);
        assert!(
            got + 1_000_000 >= *ns && over <= reaped + 1_000_000,
            "thread {tid}: {got} ns from the import, {ns} ns from perf sched timehist \
             ({reaped} ns charged to task -1)"
        );
        excess += over.saturating_sub(1_000);
        if over <= 1_000_000 {
            worst = worst.max(got.abs_diff(*ns));
        }
    }
    assert!(
        excess <= reaped + 1_000_000,
        "{excess} ns more than perf's, {reaped} ns of -1"
    );
    println!(
        "{perf_switches} switches; run times of {} threads within {worst} ns of perf sched \
         timehist -s, {excess} ns more in all where perf charged {reaped} ns to task -1",
        theirs.len()
    );
    // Every wake-up perf shows (`sched_waking`, and a new thread's first,
    // `sched_wakeup_new`) is a wakeup record; a blocked thread's switch has its wait point.
    let script = String::from_utf8_lossy(&script.stdout);
    let wakeups = ["sched_waking", "sched_wakeup_new"]
        .iter()
        .map(|tp| {
            let tp = format!("sched:{tp}:");
            script.lines().filter(|l| l.contains(&tp)).count() as u64
        })
        .sum::<u64>();
    assert!(wakeups > 3, "{wakeups} wake-ups recorded");
    assert_eq!(summary.written.wakeups, wakeups, "{summary}");
    assert!(summary.written.wait_points > 0, "{summary}");
    assert!(
        matches!(summary.kernel_symbols, Some(Ok(_))),
        "{:?}",
        summary.kernel_symbols
    );
    if let Some(tool) = trace_processor() {
        let out = dir.join("sched.fxt");
        std::fs::write(&out, &trace).unwrap();
        let stats = perfetto_query(&tool, &out, ERROR_STATS);
        assert_eq!(stats.lines().count(), 1, "error stats:\n{stats}");
        let slices = perfetto_query(&tool, &out, "select count(*) from sched_slice;");
        let slices: u64 = slices.lines().nth(1).unwrap().parse().unwrap();
        println!(
            "Perfetto: {slices} scheduling slices of {perf_switches} switches, {} to idle",
            switches.to_idle
        );
        // A slice per switch to a thread: the idle task has none. (A loaded machine seldom
        // idles; a quiet one switched to idle 8 times in 35 switches.)
        assert_eq!(
            slices,
            perf_switches - switches.to_idle,
            "{slices} slices of {perf_switches} switches, {} of them to idle",
            switches.to_idle
        );
        // The wake-ups as Waking states, each with its waker (a wake-up of a thread that
        // is already runnable may open none).
        let wakes = perfetto_query(
            &tool,
            &out,
            "select count(*), count(waker_utid) from thread_state where state = 'W';",
        );
        let row: Vec<u64> = wakes
            .lines()
            .nth(1)
            .unwrap()
            .split(',')
            .map(|n| n.parse().unwrap())
            .collect();
        println!("Perfetto: {} waking states of {wakeups} wake-ups", row[0]);
        assert!(row[0] <= wakeups && row[0] * 10 >= wakeups * 9, "{wakes}");
        assert_eq!(row[1], row[0], "a waker for each: {wakes}");
    }
    // `fxtrace report sched` gives each thread the on-CPU time the import's switches give,
    // so perf's within the same bounds; fxtrace's own threads (another program traced here
    // while perf records every CPU) it leaves out.
    let out = dir.join("sched.fxt");
    std::fs::write(&out, &trace).unwrap();
    let report = Command::new(FXTRACE)
        .args(["report", "sched", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(report.status.success(), "{report:?}");
    let on_cpu: HashMap<u64, u64> = String::from_utf8_lossy(&report.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|row| row["type"] == "thread")
        .map(|row| {
            (
                row["tid"].as_u64().unwrap(),
                row["on_cpu_ns"].as_u64().unwrap(),
            )
        })
        .collect();
    let own = fxtraces_own_threads(&trace);
    for (tid, ns) in ours
        .iter()
        .filter(|(tid, _)| **tid != 0 && !own.contains(tid))
    {
        assert_eq!(
            on_cpu.get(tid),
            Some(ns),
            "thread {tid}: on CPU in report sched, and from the import's switches"
        );
    }
    let mut worst = 0;
    for (tid, ns) in theirs
        .iter()
        .filter(|(tid, _)| **tid != 0 && !own.contains(tid))
    {
        let got = on_cpu.get(tid).copied().unwrap_or(0);
        assert!(
            got + 1_000_000 >= *ns && got.saturating_sub(*ns) <= reaped + 1_000_000,
            "thread {tid}: {got} ns on CPU in report sched, {ns} ns from perf sched timehist \
             ({reaped} ns charged to task -1)"
        );
        if got.abs_diff(*ns) <= 1_000_000 {
            worst = worst.max(got.abs_diff(*ns));
        }
    }
    println!(
        "report sched: on-CPU time of {} threads within {worst} ns of perf sched timehist -s",
        on_cpu.len()
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `perf record -z`: records inside zstd-compressed records are read as the others.
#[test]
fn compressed_records_are_read() {
    let Some(perf) = perf() else { return };
    let dir = temp_dir("import-perf-zstd");
    let data = dir.join("z.data");
    let record = Command::new(perf)
        .args(["record", "-z", "-e", "sched:sched_switch", "-a", "-o"])
        .arg(&data)
        .args(["--", "sleep", "0.2"])
        .output()
        .unwrap();
    if !record.status.success() {
        skip(
            Requirement::Perf,
            format!(
                "perf record -z -e sched:sched_switch failed here (needs root, tracefs and a \
                 perf built with zstd): {}",
                String::from_utf8_lossy(&record.stderr).trim()
            ),
        );
        return;
    }
    let script = Command::new(perf)
        .args(["script", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let switches = String::from_utf8_lossy(&script.stdout)
        .lines()
        .filter(|l| l.contains("sched:sched_switch:"))
        .count() as u64;
    let (_, summary) = import(&data).unwrap();
    assert_eq!(summary.damage, [], "{summary}");
    assert!(switches > 0);
    assert_eq!(summary.written.context_switches, switches, "{summary}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A program that spins in `spin_here` (most of its CPU time), `other_work`, and reads
/// `/dev/zero` in `read_zeros` (kernel time), by CPU time: the same samples on a loaded host.
const SAMPLED_PROGRAM: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static volatile unsigned long sink;
static char buf[1 << 20];
static double cpu(void) { return (double)clock() / CLOCKS_PER_SEC; }
__attribute__((noinline)) void spin_here(void) { for (long i = 0; i < 2000000; i++) sink += i * i; }
__attribute__((noinline)) void other_work(void) { for (long i = 0; i < 300000; i++) sink ^= i; }
__attribute__((noinline)) void read_zeros(int fd) { for (int i = 0; i < 8; i++) sink += read(fd, buf, sizeof buf); }
int main(void) {
    int fd = open("/dev/zero", O_RDONLY);
    while (cpu() < 0.3) { spin_here(); other_work(); }
    while (cpu() < 0.45) read_zeros(fd);
    printf("%lu\n", sink);
    return 0;
}
"#;

/// `perf report --no-children --sort symbol`: samples by the function they fell in, the
/// biggest first (perf's `[.]`/`[k]` marks dropped).
fn perf_self_counts(perf: &str, data: &Path) -> Vec<(String, u64)> {
    let out = Command::new(perf)
        .args(["report", "--stdio", "--no-children", "--sort", "symbol"])
        .args(["-F", "sample,sym", "-i"])
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut counts: Vec<(String, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let n = f.next()?.parse().ok()?;
            let _mark = f.next()?;
            Some((f.next()?.to_string(), n))
        })
        .collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counts
}

/// `fxtrace report samples`'s hottest functions.
fn our_self_counts(report: &str) -> Vec<(String, u64)> {
    report
        .lines()
        .skip_while(|l| !l.starts_with("hottest functions"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let n = f.next()?.parse().ok()?;
            let _percent = f.next()?;
            Some((f.collect::<Vec<_>>().join(" "), n))
        })
        .collect()
}

fn report_samples(trace: &Path) -> String {
    let out = Command::new(FXTRACE)
        .args(["report", "samples", "--top", "50"])
        .arg(trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// `perf record -F 999 -g` of a program (root here: kernel frames too): every sample is a
/// CPU sample of the import, with its call chain; `report samples` finds the functions
/// `perf report` finds, with the same counts, the kernel's named by the recording kernel's
/// symbols (perf's build-id cache, or this machine's kernel), also when they come from
/// another boot (moved to the recording's kernel address), and kept as addresses without
/// them. Perfetto loads the import with no error.
#[test]
fn perf_record_g_samples_are_cpu_samples_with_perfs_functions() {
    let Some(perf) = perf() else { return };
    let Some(cc) = crate::report_lbr::cc() else {
        skip(
            Requirement::Cc,
            "no C compiler (cc) for the sampled program",
        );
        return;
    };
    let dir = temp_dir("import-perf-samples");
    std::fs::write(dir.join("sampled.c"), SAMPLED_PROGRAM).unwrap();
    let program = dir.join("sampled");
    let built = Command::new(cc)
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&program)
        .arg(dir.join("sampled.c"))
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let data = dir.join("samples.data");
    let record = Command::new(perf)
        .args(["record", "-F", "999", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    if !record.status.success() {
        skip(
            Requirement::Perf,
            format!(
                "perf record -F 999 -g failed here: {}",
                String::from_utf8_lossy(&record.stderr).trim()
            ),
        );
        return;
    }
    // perf script's samples: a line each with the call graph hidden.
    let script = Command::new(perf)
        .args(["script", "-G", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let perf_samples = String::from_utf8_lossy(&script.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count() as u64;
    let (trace, summary) = import(&data).unwrap();
    assert_eq!(summary.damage, [], "{summary}");
    assert!(perf_samples > 100, "{perf_samples} samples");
    assert_eq!(summary.written.samples, perf_samples, "{summary}");
    assert!(summary.written.stack_blobs > 0, "{summary}");
    assert!(
        matches!(summary.kernel_symbols, Some(Ok(_))),
        "{:?}",
        summary.kernel_symbols
    );
    let out = dir.join("samples.fxt");
    std::fs::write(&out, &trace).unwrap();
    let text = report_samples(&out);
    let ours = our_self_counts(&text);
    let theirs = perf_self_counts(perf, &data);
    println!(
        "perf report: {:?}\nours: {:?}",
        &theirs[..theirs.len().min(4)],
        &ours[..ours.len().min(4)]
    );
    assert_eq!(
        ours.first().map(|f| &f.0),
        Some(&"spin_here".to_string()),
        "{text}"
    );
    assert_eq!(ours.first(), theirs.first(), "the hottest function\n{text}");
    // Every function of at least 5 % of the samples, named and counted as perf does: the
    // program's own and the kernel's (reading /dev/zero).
    let big: Vec<&(String, u64)> = theirs.iter().filter(|f| f.1 * 20 >= perf_samples).collect();
    assert!(big.len() >= 2, "{theirs:?}");
    for f in &big {
        assert!(ours.contains(f), "{f:?} (perf report) not in\n{text}");
    }
    let kernel = ours.iter().find(|f| {
        !f.0.starts_with("[kernel]")
            && { !["spin_here", "other_work", "read_zeros", "main"].contains(&f.0.as_str()) }
            && f.1 * 20 >= perf_samples
    });
    assert!(
        kernel.is_some(),
        "a kernel function of the /dev/zero reads in\n{text}"
    );

    // The same kernel's symbols as another boot placed them (KASLR): moved back.
    let shifted: String = std::fs::read_to_string("/proc/kallsyms")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(' ')?;
            let addr = u64::from_str_radix(addr, 16).ok()?;
            Some(format!("{:016x} {rest}\n", addr.wrapping_add(0x1000_0000)))
        })
        .collect();
    std::fs::write(dir.join("kallsyms.shifted"), shifted).unwrap();
    let import_with = |kallsyms: &str, name: &str| {
        let out = dir.join(name);
        let run = Command::new(FXTRACE)
            .arg("import-perf")
            .arg(&data)
            .args(["--kallsyms", kallsyms, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(run.status.success(), "{run:?}");
        (String::from_utf8(run.stdout).unwrap(), report_samples(&out))
    };
    let shifted_path = dir.join("kallsyms.shifted");
    let (said, moved) = import_with(shifted_path.to_str().unwrap(), "moved.fxt");
    assert!(said.contains("moved by -0x10000000"), "{said}");
    assert_eq!(our_self_counts(&moved), ours, "{moved}");
    // None: kernel frames stay addresses, and the import says so.
    let (said, bare) = import_with("none", "bare.fxt");
    assert!(said.contains("kernel frames kept as addresses"), "{said}");
    assert!(bare.contains("[kernel] 0x"), "{bare}");
    assert_eq!(our_self_counts(&bare).first(), ours.first());

    if let Some(tool) = trace_processor() {
        let stats = perfetto_query(&tool, &out, ERROR_STATS);
        assert_eq!(stats.lines().count(), 1, "error stats:\n{stats}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

// --- crafted inputs ---

/// A perf.data file's layout, to make crafted copies of it.
struct Layout {
    bytes: Vec<u8>,
    data_offset: usize,
    data_size: usize,
    /// (bit, offset, size) of each feature section, in table order.
    features: Vec<(u32, u64, u64)>,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

impl Layout {
    fn of(bytes: Vec<u8>) -> Self {
        let data_offset = u64_at(&bytes, 40) as usize;
        let data_size = u64_at(&bytes, 48) as usize;
        let bits: Vec<u32> = (0..256)
            .filter(|&b| u64_at(&bytes, 72 + 8 * (b / 64) as usize) >> (b % 64) & 1 != 0)
            .collect();
        let table = data_offset + data_size;
        let features = bits
            .iter()
            .enumerate()
            .map(|(i, &bit)| {
                (
                    bit,
                    u64_at(&bytes, table + 16 * i),
                    u64_at(&bytes, table + 16 * i + 8),
                )
            })
            .collect();
        Self {
            bytes,
            data_offset,
            data_size,
            features,
        }
    }

    /// The byte offset of every record of the data section.
    fn records(&self) -> Vec<usize> {
        let mut at = self.data_offset;
        let mut out = Vec::new();
        while at < self.data_offset + self.data_size {
            out.push(at);
            at += u16::from_le_bytes([self.bytes[at + 6], self.bytes[at + 7]]) as usize;
        }
        out
    }

    /// Writes the file with its data section repeated `copies` times to `path`, the features
    /// after it, without holding the copies in memory (a test process that grew would inflate
    /// the resident set other tests measure: a child that ends before their first look is
    /// measured by `wait4`, which counts the address space it was forked from).
    fn write_repeated(&self, path: &Path, copies: usize) {
        let data = &self.bytes[self.data_offset..self.data_offset + self.data_size];
        self.write_data(path, &[data], copies);
    }

    /// Writes the file with `parts` (`copies` times over) as its data section to `path`, the
    /// features after it.
    fn write_data(&self, path: &Path, parts: &[&[u8]], copies: usize) {
        use std::io::Write;
        let len: usize = parts.iter().map(|p| p.len()).sum::<usize>() * copies;
        let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
        let mut head = self.bytes[..self.data_offset].to_vec();
        head[48..56].copy_from_slice(&(len as u64).to_le_bytes());
        out.write_all(&head).unwrap();
        for _ in 0..copies {
            for part in parts {
                out.write_all(part).unwrap();
            }
        }
        let mut at = (self.data_offset + len + 16 * self.features.len()) as u64;
        for &(_, _, size) in &self.features {
            out.write_all(&at.to_le_bytes()).unwrap();
            out.write_all(&size.to_le_bytes()).unwrap();
            at += size;
        }
        for &(_, offset, size) in &self.features {
            out.write_all(&self.bytes[offset as usize..(offset + size) as usize])
                .unwrap();
        }
        out.flush().unwrap();
    }

    /// Where feature `bit`'s table entry is.
    fn feature_entry(&self, bit: u32) -> usize {
        let i = self.features.iter().position(|f| f.0 == bit).unwrap();
        self.data_offset + self.data_size + 16 * i
    }
}

/// Every 4 KiB cut of the recording imports what precedes the cut and names it; the first
/// 104 bytes (the header) cannot be cut into.
#[test]
fn cut_at_every_4_kib_imports_what_precedes_the_cut() {
    let bytes = std::fs::read(fixture(LBR_DATA)).unwrap();
    let dir = temp_dir("import-perf-cut");
    let path = dir.join("cut.data");
    let mut last_samples = 0;
    for cut in (0..bytes.len()).step_by(4096).chain([50, 103, 104, 105]) {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        match import(&path) {
            Err(ImportError::Unreadable(Damage { offset, what })) => {
                assert!(cut < 4096 && offset <= cut as u64, "{cut}: {what}");
            }
            Ok((trace, summary)) => {
                let d = summary
                    .damage
                    .first()
                    .unwrap_or_else(|| panic!("{cut}: no damage"));
                assert!(d.offset <= cut as u64, "{cut}: {d}");
                assert!(
                    summary.damage.iter().any(|d| d.what.contains("cut short")
                        || d.what.contains("past the end of the file")),
                    "{cut}: {:?}",
                    summary.damage
                );
                // A valid trace of the samples before the cut, more for a later cut.
                let samples = LbrReport::read(&trace[..]).report.overall().samples();
                assert_eq!(samples, summary.written.branch_blobs);
                if cut > 4096 {
                    assert!(samples >= last_samples, "{cut}");
                }
                last_samples = samples;
            }
            Err(e) => panic!("{cut}: {e}"),
        }
    }
    assert!(last_samples > 100);
    std::fs::remove_dir_all(dir).unwrap();
}

/// `fxtrace import-perf PATH -o OUT` in under 64 MiB, failing (exit 1) with `says` in its
/// message, never a panic (`what` names the case).
fn import_failing(path: &Path, out: &Path, says: &str, what: &str) -> Run {
    let run = run_within_memory(
        &[
            "import-perf",
            path.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        64 * 1024,
    );
    assert_eq!(run.status.code(), Some(1), "{what}: {}", run.stderr);
    assert!(
        run.stderr.contains(says),
        "{what}: {says:?} not in {}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{what}: {}", run.stderr);
    run
}

/// A header lying about its sections, an attribute count of 2^32, an EVENT_DESC claiming
/// 2^32 - 1 events, records of size 0 and 65 535: each through the command, in bounded memory,
/// failing with a message that names the problem and its offset, never a panic; what precedes
/// the damage is written.
#[test]
fn crafted_headers_and_records_are_named_never_trusted() {
    let layout = Layout::of(std::fs::read(fixture(LBR_DATA)).unwrap());
    let records = layout.records();
    let dir = temp_dir("import-perf-crafted");
    let set = |at: usize, value: &[u8]| {
        let mut b = layout.bytes.clone();
        b[at..at + value.len()].copy_from_slice(value);
        b
    };
    let mid = records[records.len() / 2];
    let event_desc = u64_at(&layout.bytes, layout.feature_entry(12)) as usize;
    let build_id_entry = layout.feature_entry(2);
    let cases: Vec<(&str, Vec<u8>, &str, bool)> = vec![
        (
            "data size past the end",
            set(48, &(1u64 << 50).to_le_bytes()),
            "the file ends inside the data section",
            true,
        ),
        (
            "attribute count 2^32",
            set(
                32,
                &((1u64 << 32) * u64_at(&layout.bytes, 16)).to_le_bytes(),
            ),
            "the attribute section",
            false,
        ),
        (
            "attribute size 0",
            set(16, &0u64.to_le_bytes()),
            "attribute size 0",
            false,
        ),
        (
            "build-id section past the end",
            set(build_id_entry + 8, &(1u64 << 40).to_le_bytes()),
            "HEADER_BUILD_ID",
            true,
        ),
        (
            "EVENT_DESC with 2^32 - 1 events",
            set(event_desc, &u32::MAX.to_le_bytes()),
            "HEADER_EVENT_DESC",
            true,
        ),
        (
            "a record of size 0",
            set(mid + 6, &0u16.to_le_bytes()),
            &*Box::leak(format!("byte {mid}: record of type").into_boxed_str()),
            true,
        ),
        (
            "a record of size 65 535",
            set(mid + 6, &u16::MAX.to_le_bytes()),
            "byte ",
            true,
        ),
    ];
    for (what, bytes, says, partial) in cases {
        let path = dir.join("crafted.data");
        let out = dir.join("crafted.fxt");
        let _ = std::fs::remove_file(&out);
        std::fs::write(&path, &bytes).unwrap();
        let run = import_failing(&path, &out, says, what);
        if partial {
            assert!(
                run.stderr.contains("holds what was read before it"),
                "{what}: {}",
                run.stderr
            );
            let trace = std::fs::read(&out).unwrap();
            assert!(
                LbrReport::read(&trace[..]).report.overall().samples() > 0,
                "{what}"
            );
        } else {
            assert!(!out.exists(), "{what}: an output for an unreadable input");
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// A 96 MiB recording (the fixture's records over and over) imports in bounded memory.
#[test]
fn a_large_recording_imports_in_bounded_memory() {
    let layout = Layout::of(std::fs::read(fixture(LBR_DATA)).unwrap());
    let dir = temp_dir("import-perf-large");
    let path = dir.join("large.data");
    let out = dir.join("large.fxt");
    layout.write_repeated(&path, (96 << 20) / layout.data_size);
    let run = run_within_memory(
        &[
            "import-perf",
            path.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        48 * 1024,
    );
    assert!(run.status.success(), "{}", run.stderr);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A compressed record (`perf record -z`) whose 16 KiB of zstd data decompress to 512 MiB
/// (RLE blocks, 4 bytes for 128 KiB each), after half the recording's records: refused by
/// name at its offset before the parser would hold what it decompresses to; the samples before
/// it imported, in bounded memory.
#[test]
fn a_zstd_bomb_is_refused_before_it_is_decompressed() {
    let layout = Layout::of(std::fs::read(fixture(LBR_DATA)).unwrap());
    let records = layout.records();
    let half = records[records.len() / 2];
    let before = &layout.bytes[layout.data_offset..half];
    let samples = records[..records.len() / 2]
        .iter()
        .filter(|&&at| layout.bytes[at..at + 4] == 9u32.to_le_bytes())
        .count() as u64;
    // A zstd frame: no content size, a 128 KiB window, 4096 RLE blocks of 128 KiB of byte 8.
    let mut frame = 0xFD2F_B528u32.to_le_bytes().to_vec();
    frame.extend_from_slice(&[0x00, 7 << 3]);
    for i in 0..4096u32 {
        let header = u32::from(i == 4095) | 1 << 1 | (128 << 10) << 3;
        frame.extend_from_slice(&header.to_le_bytes()[..3]);
        frame.push(8);
    }
    // PERF_RECORD_COMPRESSED (81): the zstd data is the body.
    let mut bomb = 81u32.to_le_bytes().to_vec();
    bomb.extend_from_slice(&0u16.to_le_bytes());
    bomb.extend_from_slice(&(8 + frame.len() as u16).to_le_bytes());
    bomb.extend_from_slice(&frame);
    let dir = temp_dir("import-perf-zstd-bomb");
    let path = dir.join("bomb.data");
    let out = dir.join("bomb.fxt");
    layout.write_data(&path, &[before, &bomb], 1);
    let says = format!("byte {half}: a compressed record decompresses to more than");
    let run = import_failing(&path, &out, &says, "a zstd bomb");
    assert!(
        run.stderr.contains("holds what was read before it"),
        "{}",
        run.stderr
    );
    let trace = std::fs::read(&out).unwrap();
    assert!(samples > 0);
    assert_eq!(
        LbrReport::read(&trace[..]).report.overall().samples(),
        samples
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// 126 feature sections (every bit below 128 but EVENT_DESC and CMDLINE), each the 4 MiB data
/// section again: the parser reads each kept section whole (504 MiB), so at most 32 MiB of
/// them are kept and the others named; every sample is imported, in bounded memory.
#[test]
fn feature_sections_are_read_within_a_bound() {
    let layout = Layout::of(std::fs::read(fixture(LBR_DATA)).unwrap());
    let data = &layout.bytes[layout.data_offset..layout.data_offset + layout.data_size];
    let copies = (4 << 20) / data.len();
    let len = (data.len() * copies) as u64;
    let bits: Vec<u32> = (0..128).filter(|b| ![11, 12].contains(b)).collect();
    let mut file = layout.bytes[..layout.data_offset].to_vec();
    file[48..56].copy_from_slice(&len.to_le_bytes());
    let mut bitmap = [0u64; 4];
    for &b in &bits {
        bitmap[b as usize / 64] |= 1 << (b % 64);
    }
    for (i, word) in bitmap.iter().enumerate() {
        file[72 + 8 * i..80 + 8 * i].copy_from_slice(&word.to_le_bytes());
    }
    for _ in 0..copies {
        file.extend_from_slice(data);
    }
    for _ in &bits {
        file.extend_from_slice(&(layout.data_offset as u64).to_le_bytes());
        file.extend_from_slice(&len.to_le_bytes());
    }
    let dir = temp_dir("import-perf-features");
    let path = dir.join("features.data");
    let out = dir.join("features.fxt");
    std::fs::write(&path, &file).unwrap();
    drop(file);
    let run = import_failing(
        &path,
        &out,
        "would take the feature sections read past 33554432 bytes",
        "126 sections of 4 MiB",
    );
    assert!(run.stderr.contains("more problems"), "{}", run.stderr);
    let trace = std::fs::read(&out).unwrap();
    assert_eq!(
        LbrReport::read(&trace[..]).report.overall().samples(),
        124 * copies as u64
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// The id lists the parser reads whole, one per event, each a section of the file: 1 024
/// events of the old `event_types` section whose ids are each the whole file (305 MB read,
/// before), and a simpleperf file's attributes with ids of 8 GiB each (an 8 GiB allocation,
/// before): refused by name before the parser reads a byte, in bounded memory.
#[test]
fn id_lists_are_checked_before_the_parser_reads_them() {
    let mut layout = Layout::of(std::fs::read(fixture(LBR_DATA)).unwrap());
    // Without EVENT_DESC (its count a lie), the parser reads the ids where the header says.
    let event_desc = u64_at(&layout.bytes, layout.feature_entry(12)) as usize;
    layout.bytes[event_desc..event_desc + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let attr_size = u64_at(&layout.bytes, 16) as usize;
    let (attrs, attrs_size) = (
        u64_at(&layout.bytes, 24) as usize,
        u64_at(&layout.bytes, 32) as usize,
    );
    let dir = temp_dir("import-perf-ids");
    let data = &layout.bytes[layout.data_offset..layout.data_offset + layout.data_size];
    let out = dir.join("ids.fxt");
    // event_types: (attr, ids) × 1 024 after the features, each id list the whole file.
    let old = dir.join("event-types.data");
    layout.write_data(&old, &[data], 1);
    let mut bytes = std::fs::read(&old).unwrap();
    let entries = 1024;
    let len = (bytes.len() + entries * (attr_size + 16)) as u64;
    let at = bytes.len() as u64;
    for _ in 0..entries {
        bytes.extend_from_slice(&layout.bytes[attrs..attrs + attr_size]);
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
    }
    bytes[56..64].copy_from_slice(&at.to_le_bytes());
    bytes[64..72].copy_from_slice(&(len - at).to_le_bytes());
    std::fs::write(&old, bytes).unwrap();
    let says = "take the events' ids past 16777216 bytes";
    import_failing(&old, &out, says, "event_types");
    assert!(!out.exists(), "an output for an unreadable input");
    // simpleperf: HEADER_SIMPLEPERF_META_INFO naming the event; each attribute entry ends
    // with its id section, of 8 GiB.
    let simpleperf = dir.join("simpleperf.data");
    let meta = b"event_type_info\0cycles,0,0\0";
    layout
        .features
        .push((129, layout.bytes.len() as u64, meta.len() as u64));
    layout.bytes.extend_from_slice(meta);
    layout.bytes[72 + 16..72 + 24].copy_from_slice(&(1u64 << 1).to_le_bytes());
    for entry in (attrs..attrs + attrs_size).step_by(attr_size) {
        let ids = entry + attr_size - 16;
        layout.bytes[ids..ids + 8].copy_from_slice(&0u64.to_le_bytes());
        layout.bytes[ids + 8..ids + 16].copy_from_slice(&(8u64 << 30).to_le_bytes());
    }
    let data = layout.bytes[layout.data_offset..layout.data_offset + layout.data_size].to_vec();
    layout.write_data(&simpleperf, &[&data], 1);
    let says = "(offset 0, 8589934592 bytes) lie past the end of the file";
    import_failing(&simpleperf, &out, says, "simpleperf");
    assert!(!out.exists(), "an output for an unreadable input");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A million 8-byte records of a million kinds after the recording's: the parser holds a
/// round of them (at some 20 times their bytes) and each kind is counted; the rounds are
/// counted by what the parser holds, the kinds past the 64th together. (358 MB before.)
#[test]
fn a_million_small_records_of_a_million_kinds_import_in_bounded_memory() {
    let layout = Layout::of(std::fs::read(fixture(LBR_DATA)).unwrap());
    let data = &layout.bytes[layout.data_offset..layout.data_offset + layout.data_size];
    let mut small = Vec::with_capacity(8 << 20);
    for kind in 1_000u32..1_001_000 {
        small.extend_from_slice(&kind.to_le_bytes());
        small.extend_from_slice(&[0, 0, 8, 0]);
    }
    let dir = temp_dir("import-perf-kinds");
    let path = dir.join("kinds.data");
    let out = dir.join("kinds.fxt");
    layout.write_data(&path, &[data, &small], 1);
    drop(small);
    let run = run_within_memory(
        &[
            "import-perf",
            path.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        64 * 1024,
    );
    assert!(run.status.success(), "{}", run.stderr);
    let (_, summary) = import(&path).unwrap();
    // Every record counted: the recording's own (1 TIME_CONV, 29 THROTTLE, 29 UNTHROTTLE)
    // and the million, 64 kinds by name.
    assert_eq!(summary.skipped.total(), 1_000_000 + 59);
    assert_eq!(summary.skipped.kinds().len(), MAX_SKIPPED_KINDS + 1);
    assert!(summary.skipped.count(FURTHER_KINDS) > 999_000);
    assert!(summary.to_string().len() < 4096, "{summary}");
    assert_eq!(summary.written.branch_blobs, 124);
    std::fs::remove_dir_all(dir).unwrap();
}

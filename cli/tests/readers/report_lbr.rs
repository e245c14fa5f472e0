//! `report lbr` on synthetic LBR traces: counts, mispredict rates, average cycles, ordering
//! and top-N, per-CPU and per-thread tables (threads found from context switches), bad
//! payloads, and symbolization against real ELF binaries built here with `cc`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fxtrace::test_support::{skip, Requirement};
use fxtrace_format::lbr::{LbrBranch, LbrPayload};
use fxtrace_format::{
    Arg, ArgValue, Blob, BlobType, ContextSwitch, Initialization, KernelObject, ObjectType,
    RecordWriter, SchedContextSwitch, StringRef, ThreadRef, ThreadState,
};
use fxtrace_tools::report::{
    write_lbr_text, BinarySpec, Breakdown, Edge, EdgeStats, LbrReport, LbrTextOptions, Symbolizer,
};
use object::{Object, ObjectSymbol};

fn lbr_blob(w: &mut RecordWriter, name: &str, cpu: u16, ticks: u64, branches: &[LbrBranch]) {
    let payload = LbrPayload::new(cpu, ticks, 0, branches).unwrap();
    w.push(&Blob {
        name: StringRef::Inline(name),
        blob_type: BlobType::LAST_BRANCH,
        payload: payload.as_bytes(),
    })
    .unwrap();
}

const A: (u64, u64) = (0x1000, 0x2000);
const B: (u64, u64) = (0x3000, 0x4000);
const C: (u64, u64) = (0x5000, 0x6000);

fn br(edge: (u64, u64), cycles: u64, mispredicted: bool) -> LbrBranch {
    LbrBranch::new(edge.0, edge.1, cycles, mispredicted)
}

fn edge(e: (u64, u64)) -> Edge {
    Edge { from: e.0, to: e.1 }
}

/// Edge A taken 5 times (2 mispredicted, cycles 10, 20 and three unknown), B 3 times
/// (never mispredicted, no cycles), C once (mispredicted, 7 cycles); on CPUs 0 and 1.
fn counting_trace() -> Vec<u8> {
    let mut w = RecordWriter::with_magic();
    lbr_blob(
        &mut w,
        "cpu0",
        0,
        100,
        &[br(A, 10, true), br(B, 0, false), br(A, 0, false)],
    );
    lbr_blob(
        &mut w,
        "cpu1",
        1,
        200,
        &[br(A, 20, false), br(C, 7, true), br(B, 0, false)],
    );
    lbr_blob(
        &mut w,
        "cpu0",
        0,
        300,
        &[br(B, 0, false), br(A, 0, true), br(A, 0, false)],
    );
    w.to_bytes()
}

fn text(report: &LbrReport, symbols: &Symbolizer, top: usize, breakdown: Breakdown) -> String {
    let mut out = Vec::new();
    write_lbr_text(
        &mut out,
        report,
        symbols,
        &LbrTextOptions { top, breakdown },
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn counts_rates_and_ordering() {
    let read = LbrReport::read(&counting_trace()[..]);
    assert!(read.decode_error.is_none());
    let r = read.report;
    let all = r.overall();
    assert_eq!(all.samples(), 3);
    assert_eq!(all.branches(), 9);
    assert_eq!(all.mispredicted(), 3);
    assert_eq!(all.distinct_edges(), 3);
    let a = all.get(edge(A)).unwrap();
    assert_eq!(
        a,
        EdgeStats {
            count: 5,
            mispredicted: 2,
            cycles_total: 30,
            cycles_known: 2
        }
    );
    assert_eq!(a.mispredict_rate(), 0.4);
    assert_eq!(a.average_cycles(), Some(15.0));
    assert_eq!(all.get(edge(B)).unwrap().average_cycles(), None);
    let order: Vec<Edge> = all.top(10).into_iter().map(|(e, _)| e).collect();
    assert_eq!(order, [edge(A), edge(B), edge(C)]);
    let top2: Vec<Edge> = all.top(2).into_iter().map(|(e, _)| e).collect();
    assert_eq!(top2, [edge(A), edge(B)]);

    assert_eq!(r.per_cpu().len(), 2);
    let cpu0 = &r.per_cpu()[&0];
    assert_eq!(cpu0.samples(), 2);
    assert_eq!(cpu0.get(edge(A)).unwrap().count, 4);
    assert_eq!(cpu0.get(edge(C)), None);
    assert_eq!(r.per_cpu()[&1].get(edge(C)).unwrap().count, 1);
    // No context switches: every sample is on the unknown thread.
    assert_eq!(r.per_thread().len(), 1);
    assert_eq!(r.per_thread()[&None].samples(), 3);
}

#[test]
fn text_report_overall_top_n_and_per_cpu() {
    let r = LbrReport::read(&counting_trace()[..]).report;
    let overall = text(&r, &Symbolizer::new(), 2, Breakdown::Overall);
    assert_eq!(
        overall,
        "\
LBR report: 3 samples, 9 branches, 3 distinct edges, 2 CPUs
mispredicted: 3 of 9 branches (33.3%)
threads: 0 known; 3 samples not attributed to a thread
symbols: none given, addresses are unsymbolized (--binary PATH or PATH@0xBASE names them)

all CPUs and threads: 3 samples, 9 branches, 33.3% mispredicted; top 2 of 3 edges
    count   share  mispred  avg-cyc  from -> to
        5   55.6%    40.0%     15.0  0x1000 -> 0x2000
        3   33.3%     0.0%        -  0x3000 -> 0x4000
"
    );
    let per_cpu = text(&r, &Symbolizer::new(), 1, Breakdown::PerCpu);
    assert!(
        per_cpu.contains(
            "\nCPU 0: 2 samples, 6 branches, 33.3% mispredicted; top 1 of 2 edges\n\
         \x20   count   share  mispred  avg-cyc  from -> to\n\
         \x20       4   66.7%    50.0%     10.0  0x1000 -> 0x2000\n"
        ),
        "{per_cpu}"
    );
    assert!(
        per_cpu.contains(
            "\nCPU 1: 1 sample, 3 branches, 33.3% mispredicted; top 1 of 3 edges\n\
         \x20   count   share  mispred  avg-cyc  from -> to\n\
         \x20       1   33.3%   100.0%      7.0  0x5000 -> 0x6000\n"
        ),
        "ties broken by mispredictions: {per_cpu}"
    );
}

/// Threads 11 ("worker") and 12 on CPU 0, switched by context-switch records; a 2 GHz
/// clock so that sample times must be converted to be compared with switch times.
#[test]
fn samples_are_attributed_to_threads_by_context_switches() {
    let mut w = RecordWriter::with_magic();
    w.push(&Initialization {
        ticks_per_second: 2_000_000_000,
    })
    .unwrap();
    let process_arg = [Arg::new("process", ArgValue::Koid(10))];
    w.push(&KernelObject {
        koid: 10,
        object_type: ObjectType::PROCESS,
        name: "server".into(),
        args: &[],
    })
    .unwrap();
    w.push(&KernelObject {
        koid: 11,
        object_type: ObjectType::THREAD,
        name: "worker".into(),
        args: &process_arg,
    })
    .unwrap();
    // Before any switch on CPU 0: unknown.
    lbr_blob(&mut w, "cpu0", 0, 100, &[br(C, 0, false)]);
    // 500 ns: 11 comes in (seed layout). 1500 ns: 12 comes in (by-tid layout).
    w.push(&ContextSwitch {
        ticks: 1_000,
        cpu: 0,
        outgoing_state: ThreadState::Blocked,
        outgoing: ThreadRef::Inline { pid: 0, tid: 0 },
        incoming: ThreadRef::Inline { pid: 10, tid: 11 },
        outgoing_priority: 0,
        incoming_priority: 0,
    })
    .unwrap();
    w.push(&SchedContextSwitch {
        ticks: 3_000,
        cpu: 0,
        outgoing_state: ThreadState::Blocked,
        outgoing_tid: 11,
        incoming_tid: 12,
        args: &[],
    })
    .unwrap();
    // Written after both switches, taken at 1000 ns (2000 ticks): thread 11. Comparing raw
    // ticks with switch nanoseconds would wrongly say 12.
    lbr_blob(&mut w, "cpu0", 0, 2_000, &[br(A, 0, true), br(A, 0, false)]);
    // At 2000 ns: thread 12.
    lbr_blob(&mut w, "cpu0", 0, 4_000, &[br(B, 0, false)]);
    // CPU 1 never switched: unknown.
    lbr_blob(&mut w, "cpu1", 1, 4_000, &[br(C, 0, false)]);
    // A bad payload, and a blob whose name disagrees with its payload.
    w.push(&Blob {
        name: StringRef::Inline("cpu0"),
        blob_type: BlobType::LAST_BRANCH,
        payload: &[0; 30],
    })
    .unwrap();
    lbr_blob(&mut w, "cpu5", 0, 4_000, &[br(B, 0, false)]);

    let r = LbrReport::read(&w.to_bytes()[..]).report;
    assert_eq!(r.invalid_payloads(), 1);
    assert_eq!(r.cpu_name_mismatches(), 1);
    let t = r.per_thread();
    assert_eq!(t[&Some(11)].get(edge(A)).unwrap().count, 2);
    assert_eq!(t[&Some(11)].distinct_edges(), 1);
    assert_eq!(t[&Some(12)].samples(), 2);
    assert_eq!(t[&None].samples(), 2);
    assert_eq!(t[&None].get(edge(C)).unwrap().count, 2);

    let out = text(&r, &Symbolizer::new(), 5, Breakdown::PerThread);
    assert!(out.contains("threads: 2 known; 2 samples not attributed to a thread\n"));
    assert!(out.contains("skipped: 1 LAST_BRANCH blob with an invalid payload\n"));
    assert!(out.contains("note: 1 blob named cpu<N> for another CPU than their payload's"));
    let worker = out
        .find("\nthread 11 \"worker\" (process 10 \"server\"): 1 sample, 2 branches, 50.0% mispredicted; top 1 of 1 edge\n")
        .expect(&out);
    let other = out.find("\nthread 12: 2 samples").expect(&out);
    let unknown = out.find("\nthread unknown (").expect(&out);
    assert!(worker < other && other < unknown, "{out}");
}

pub(crate) fn cc() -> Option<PathBuf> {
    let found = Command::new("cc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    found.then(|| PathBuf::from("cc"))
}

const SOURCE: &str = "\
static volatile int sink;
__attribute__((noinline))
int hot(int x) {
    return x * 2 + 1;
}
int main(void) {
    int s = 0;
    for (int i = 0; i < 10; i++) s += hot(i);
    sink = s;
    return 0;
}
";

/// Compiles `SOURCE` with `flags`; returns the binary's path and the file addresses of
/// `hot` and `main` read from its symbol table.
fn build(dir: &Path, flags: &[&str], name: &str) -> (PathBuf, u64, u64) {
    let src = dir.join("t.c");
    std::fs::write(&src, SOURCE).unwrap();
    let bin = dir.join(name);
    let out = Command::new("cc")
        .args(["-O0", "-g"])
        .args(flags)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = std::fs::read(&bin).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let addr = |n: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(n))
            .unwrap_or_else(|| panic!("no symbol {n}"))
            .address()
    };
    (bin, addr("hot"), addr("main"))
}

/// Two samples: main+0x10 → hot taken 3 times, hot+0x8 → main+0x20 once.
fn calls_trace(bias: u64, hot: u64, main: u64) -> Vec<u8> {
    let mut w = RecordWriter::with_magic();
    let call = (bias + main + 0x10, bias + hot);
    let ret = (bias + hot + 0x8, bias + main + 0x20);
    lbr_blob(
        &mut w,
        "cpu0",
        0,
        10,
        &[br(call, 4, false), br(ret, 0, true)],
    );
    lbr_blob(
        &mut w,
        "cpu0",
        0,
        20,
        &[br(call, 0, false), br(call, 0, false)],
    );
    w.to_bytes()
}

#[test]
fn symbolizes_a_non_pie_binary_with_file_and_line() {
    if cc().is_none() {
        skip(Requirement::Cc, "no cc");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (bin, hot, main) = build(dir.path(), &["-no-pie"], "prog");
    let mut symbols = Symbolizer::new();
    let info = symbols
        .add(&BinarySpec {
            path: bin.clone(),
            base: None,
        })
        .unwrap()
        .clone();
    assert!(!info.position_independent);
    assert!(info.debug_info);
    assert_eq!(info.bias, 0);
    assert!(info.warning.is_none());

    let at_hot = symbols.locate(hot).unwrap();
    assert_eq!(at_hot.function, Some(("hot".to_string(), 0)));
    let (file, line) = at_hot.source.clone().unwrap();
    assert!(file.ends_with("t.c"), "{file}");
    assert_eq!(line, 3, "hot's entry is on the line of its definition");
    let in_main = symbols.locate(main + 0x10).unwrap();
    assert_eq!(in_main.function, Some(("main".to_string(), 0x10)));
    assert!(matches!(in_main.source, Some((_, 6..=11))), "{in_main:?}");
    assert_eq!(symbols.locate(0x10), None, "outside the binary's segments");

    let r = LbrReport::read(&calls_trace(0, hot, main)[..]).report;
    let out = text(&r, &symbols, 10, Breakdown::Overall);
    let call_line = out
        .lines()
        .find(|l| l.trim_start().starts_with("3 "))
        .expect(&out);
    assert!(
        call_line.contains(&format!("{:#x} main+0x10 (", main + 0x10)),
        "{call_line}"
    );
    assert!(
        call_line.ends_with(&format!("-> {hot:#x} hot ({file}:3)")),
        "{call_line}"
    );
    assert!(out.contains(&format!("{:#x} hot+0x8 (", hot + 8)), "{out}");
    assert!(out.contains(&format!(
        "binary: {} (executable, bias 0x0, ",
        bin.display()
    )));
}

fn fxtrace(args: &[&str], stdin: &[u8]) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fxtrace"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fxtrace");
    let mut pipe = child.stdin.take().unwrap();
    // fxtrace may exit (on a bad option) before reading its input: a broken pipe then is
    // expected, and the exit status and stderr below are what the test checks.
    if let Err(e) = pipe.write_all(stdin) {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "writing stdin: {e}"
        );
    }
    drop(pipe);
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn cli_symbolizes_a_pie_binary_given_its_load_base() {
    if cc().is_none() {
        skip(Requirement::Cc, "no cc");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (bin, hot, main) = build(dir.path(), &["-fPIE", "-pie"], "pie");
    let base = 0x5555_5555_4000u64;
    let trace = dir.path().join("lbr.fxt");
    std::fs::write(&trace, calls_trace(base, hot, main)).unwrap();
    let trace = trace.to_str().unwrap();

    let with_base = format!("{}@{base:#x}", bin.display());
    let (ok, out, err) = fxtrace(
        &["report", "lbr", trace, "--binary", &with_base, "--top", "1"],
        &[],
    );
    assert!(ok, "{err}");
    assert!(out.contains(&format!(
        "binary: {} (position-independent, bias {base:#x}, ",
        bin.display()
    )));
    assert!(out.contains("top 1 of 2 edges"), "{out}");
    assert!(
        out.contains(&format!("-> {:#x} hot (", base + hot)) && out.contains("t.c:3)"),
        "{out}"
    );
    assert!(!out.contains("hot+0x8"), "--top 1 shows one edge: {out}");

    // Without the base the addresses do not fall in the file: unsymbolized, and said so.
    let (ok, out, _) = fxtrace(
        &["report", "lbr", trace, "--binary", bin.to_str().unwrap()],
        &[],
    );
    assert!(ok);
    assert!(out.contains("warning: ") && out.contains("is position-independent"));
    assert!(out.contains(&format!("{:#x} -> {:#x}\n", base + main + 0x10, base + hot)));
}

#[test]
fn cli_options_and_errors() {
    let trace = counting_trace();
    let (ok, out, _) = fxtrace(&["report", "lbr", "-", "--per-cpu", "--top", "1"], &trace);
    assert!(ok);
    assert!(
        out.contains("\nCPU 0: ") && out.contains("\nCPU 1: "),
        "{out}"
    );
    let (ok, out, _) = fxtrace(&["report", "lbr", "-", "--per-thread"], &trace);
    assert!(ok);
    assert!(out.contains("\nthread unknown ("), "{out}");
    let (ok, _, err) = fxtrace(&["report", "lbr", "-", "--per-thread", "--per-cpu"], &trace);
    assert!(!ok);
    assert!(err.contains("cannot be used with"), "{err}");
    let (ok, _, err) = fxtrace(
        &["report", "lbr", "-", "--binary", "/nonexistent/prog@0x1000"],
        &trace,
    );
    assert!(!ok);
    assert_eq!(
        err.lines().next(),
        Some("/nonexistent/prog: cannot read: No such file or directory (os error 2)")
    );
    let dir = tempfile::tempdir().unwrap();
    let not_elf = dir.path().join("trace.fxt");
    std::fs::write(&not_elf, &trace).unwrap();
    let (ok, _, err) = fxtrace(
        &["report", "lbr", "-", "--binary", not_elf.to_str().unwrap()],
        &trace,
    );
    assert!(!ok);
    assert!(
        err.starts_with(&format!("{}: cannot read: ", not_elf.display()))
            && err.contains("not a readable ELF file"),
        "{err}"
    );
    let (ok, _, err) = fxtrace(&["report", "lbr", "-", "--binary", "x@0xZZ"], &trace);
    assert!(!ok);
    assert!(err.contains("load base"), "{err}");

    // A damaged trace: the error (first), the report of what was read, a failure status.
    let mut damaged = trace.clone();
    damaged.truncate(damaged.len() - 8);
    let (ok, out, err) = fxtrace(&["report", "lbr", "-"], &damaged);
    assert!(!ok);
    assert!(out.starts_with("LBR report: 2 samples"), "{out}");
    assert!(err.starts_with("<stdin>: at byte offset"), "{err}");
    // Not a trace at all: the error alone, no report header.
    let (ok, out, err) = fxtrace(&["report", "lbr", "-"], b"not a trace at all");
    assert!(!ok);
    assert_eq!(out, "", "no header before the error");
    assert!(err.starts_with("<stdin>: "), "{err}");
}

#[test]
fn a_trace_without_samples_says_why() {
    use fxtrace_format::Log;
    let reason = "fxtrace: LBR branch stacks unavailable (errno 2): this CPU has no \
                  last-branch-record PMU (virtual machine?)";
    let mut w = RecordWriter::with_magic();
    for _ in 0..2 {
        // Said by two sources: printed once.
        w.push(&Log {
            ticks: 5,
            thread: ThreadRef::Inline { pid: 1, tid: 1 },
            message: reason,
        })
        .unwrap();
    }
    w.push(&Log {
        ticks: 6,
        thread: ThreadRef::Inline { pid: 1, tid: 1 },
        message: "fxtrace: something else",
    })
    .unwrap();
    let (ok, out, err) = fxtrace(&["report", "lbr", "-"], &w.to_bytes());
    assert!(ok, "{err}");
    assert!(
        out.starts_with("LBR report: no LAST_BRANCH samples in this trace\n"),
        "{out}"
    );
    assert_eq!(out.matches("recorded reason: ").count(), 1, "{out}");
    assert!(
        out.contains(&format!(
            "  recorded reason: {reason} (said by 2 sources)\n"
        )),
        "{out}"
    );
    assert!(!out.contains("something else"), "{out}");
    // Today's form: one event per source, its `reason` one line (the whole text in `detail`
    // is not printed); three sources, one line.
    let mut w = RecordWriter::with_magic();
    for pid in 1..=3u64 {
        w.push(&fxtrace_format::Event {
            ticks: 5,
            thread: ThreadRef::Inline { pid, tid: pid },
            category: StringRef::Inline("fxtrace"),
            name: StringRef::Inline("fxtrace: LBR branch-stack sampling (cpu-cycles) unavailable"),
            args: &[
                fxtrace_format::Arg::new(
                    "reason",
                    fxtrace_format::ArgValue::Str(StringRef::Inline("no hardware PMU")),
                ),
                fxtrace_format::Arg::new(
                    "detail",
                    fxtrace_format::ArgValue::Str(StringRef::Inline("the whole story")),
                ),
            ],
            kind: fxtrace_format::EventKind::Instant,
        })
        .unwrap();
    }
    let (ok, out, err) = fxtrace(&["report", "lbr", "-"], &w.to_bytes());
    assert!(ok, "{err}");
    assert!(
        out.contains("  recorded reason: no hardware PMU (said by 3 sources)\n"),
        "{out}"
    );
    assert_eq!(out.matches("recorded reason: ").count(), 1, "{out}");
    assert!(!out.contains("whole story"), "{out}");
    // Nothing recorded: the report says how LBR gets sampled.
    let (ok, out, _) = fxtrace(
        &["report", "lbr", "-"],
        &RecordWriter::with_magic().to_bytes(),
    );
    assert!(ok);
    assert!(out.contains("the trace does not say why"), "{out}");
}

// === symbolization through the trace's own mappings ("fxtrace:mmap" blobs) ===

/// The executable `PT_LOAD` segment holding `address`: (vaddr, file offset, file size).
fn exec_segment(bin: &Path, address: u64) -> (u64, u64, u64) {
    use object::ObjectSegment;
    let data = std::fs::read(bin).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let seg = file
        .segments()
        .find(|s| (s.address()..s.address() + s.size()).contains(&address))
        .expect("a segment holds the symbol");
    let (offset, size) = seg.file_range();
    (seg.address(), offset, size)
}

fn build_id_of(bin: &Path) -> Option<Vec<u8>> {
    let data = std::fs::read(bin).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.build_id().unwrap().map(<[u8]>::to_vec)
}

/// The mapping a loader makes of the segment holding `address` when the file's first page
/// goes to `base`: page-aligned start and offset, as in `/proc/PID/maps`.
fn loader_mapping(
    pid: u32,
    bin: &Path,
    path: &str,
    base: u64,
    address: u64,
    build_id: Option<&[u8]>,
) -> Vec<u8> {
    let (vaddr, offset, size) = exec_segment(bin, address);
    let page = 0xfff;
    let start = base + (vaddr & !page);
    let pgoff = offset & !page;
    let len = (offset + size - pgoff + page) & !page;
    fxtrace_format::mmap::MmapRecord {
        pid,
        time: 5,
        start,
        len,
        pgoff,
        build_id,
        path: path.as_bytes(),
    }
    .encode()
    .unwrap()
}

fn mmap_blob(w: &mut RecordWriter, payload: &[u8]) {
    w.push(&Blob {
        name: StringRef::Inline(fxtrace_format::mmap::MMAP_BLOB_NAME),
        blob_type: BlobType::DATA,
        payload,
    })
    .unwrap();
}

const LIB_SOURCE: &str = "\
__attribute__((noinline))
int lib_hot(int x) {
    return x * 3;
}
";

/// A PIE at `0x5555_5555_4000` calling a shared library at `0x7f00_0000_0000`, both named by
/// the trace's mappings of process 10; thread 11 of process 10 runs on CPU 0.
#[test]
fn symbolizes_pie_and_shared_library_from_the_trace_mappings() {
    if cc().is_none() {
        skip(Requirement::Cc, "no cc");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (pie, hot, main) = build(dir.path(), &["-fPIE", "-pie", "-Wl,--build-id"], "pie");
    let lib_src = dir.path().join("lib.c");
    std::fs::write(&lib_src, LIB_SOURCE).unwrap();
    let lib = dir.path().join("libt.so");
    let out = Command::new("cc")
        .args(["-O0", "-g", "-shared", "-fPIC", "-Wl,--build-id", "-o"])
        .arg(&lib)
        .arg(&lib_src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lib_hot = {
        let data = std::fs::read(&lib).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let s = file.symbols().find(|s| s.name() == Ok("lib_hot")).unwrap();
        s.address()
    };
    let (base, lib_base) = (0x5555_5555_4000u64, 0x7f00_0000_0000u64);
    let pie_id = build_id_of(&pie);
    assert!(pie_id.is_some(), "cc -Wl,--build-id gives a build-id");

    let mut w = RecordWriter::with_magic();
    let pie_path = pie.to_str().unwrap();
    let lib_path = lib.to_str().unwrap();
    mmap_blob(
        &mut w,
        &loader_mapping(10, &pie, pie_path, base, hot, pie_id.as_deref()),
    );
    mmap_blob(
        &mut w,
        &loader_mapping(10, &lib, lib_path, lib_base, lib_hot, None),
    );
    // Another process has something else mapped where the PIE is in process 10.
    // Process 99 maps something else at the PIE's addresses.
    let other = fxtrace_format::mmap::MmapRecord {
        pid: 99,
        time: 5,
        start: base,
        len: 0x10_0000,
        pgoff: 0,
        build_id: None,
        path: b"/nonexistent/other",
    }
    .encode()
    .unwrap();
    mmap_blob(&mut w, &other);
    w.push(&ContextSwitch {
        ticks: 10,
        cpu: 0,
        outgoing_state: ThreadState::Blocked,
        outgoing: ThreadRef::Inline { pid: 0, tid: 0 },
        incoming: ThreadRef::Inline { pid: 10, tid: 11 },
        outgoing_priority: 0,
        incoming_priority: 0,
    })
    .unwrap();
    let call = (base + main + 0x10, base + hot);
    let to_lib = (base + hot + 4, lib_base + lib_hot);
    lbr_blob(
        &mut w,
        "cpu0",
        0,
        20,
        &[br(call, 0, false), br(to_lib, 0, false)],
    );
    let trace = dir.path().join("mapped.fxt");
    std::fs::write(&trace, w.to_bytes()).unwrap();

    let (ok, out, err) = fxtrace(&["report", "lbr", trace.to_str().unwrap()], &[]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("{:#x} main+0x10 (", base + main + 0x10))
            && out.contains(&format!("-> {:#x} hot (", base + hot))
            && out.contains("t.c:3)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("-> {:#x} lib_hot (", lib_base + lib_hot)),
        "{out}"
    );
    assert!(out.contains(&format!("mapped: {pie_path} (")), "{out}");
    assert!(out.contains(&format!("mapped: {lib_path} (")), "{out}");
    assert!(
        out.contains("mappings: 3 in the trace, 2 holding branch addresses"),
        "{out}"
    );
    assert!(!out.contains("symbols: none given"), "{out}");
    assert!(
        !out.contains("other"),
        "process 99's mapping is not process 10's: {out}"
    );

    // No thread is known (no switch): the report of one sample of edge `to_lib` in address
    // space `aspace` (0: not given), over the two processes' mappings.
    let unattributed = |aspace: u64| {
        let mut w = RecordWriter::with_magic();
        mmap_blob(&mut w, &loader_mapping(10, &pie, pie_path, base, hot, None));
        mmap_blob(
            &mut w,
            &loader_mapping(10, &lib, lib_path, lib_base, lib_hot, None),
        );
        mmap_blob(&mut w, &other);
        let payload = LbrPayload::new(0, 20, aspace, &[br(to_lib, 0, false)]).unwrap();
        w.push(&Blob {
            name: StringRef::Inline("cpu0"),
            blob_type: BlobType::LAST_BRANCH,
            payload: payload.as_bytes(),
        })
        .unwrap();
        let r = LbrReport::read(&w.to_bytes()[..]).report;
        let mut symbols = Symbolizer::new();
        symbols.load_mappings(r.used_mappings());
        text(&r, &symbols, 5, Breakdown::Overall)
    };

    // Without an address space, the address is still resolved when all mappings agree:
    // process 99's covers the PIE's addresses too, so those stay raw; the library's do not.
    let out = unattributed(0);
    assert!(
        out.contains("threads: 0 known; 1 sample not attributed"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "  {:#x} -> {:#x} lib_hot (",
            base + hot + 4,
            lib_base + lib_hot
        )),
        "{out}"
    );

    // A sample that names its address space (fxtrace's capture writes the pid there) needs no
    // thread: process 10's mappings resolve the PIE's addresses too.
    let out = unattributed(10);
    assert!(
        out.contains(&format!(
            "  {:#x} hot+0x4 ({}/t.c:3) -> {:#x} lib_hot (",
            base + hot + 4,
            dir.path().display(),
            lib_base + lib_hot
        )),
        "{out}"
    );
}

#[test]
fn build_id_mismatch_and_missing_file_fall_back_to_file_offsets() {
    if cc().is_none() {
        skip(Requirement::Cc, "no cc");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (pie, hot, _main) = build(dir.path(), &["-fPIE", "-pie", "-Wl,--build-id"], "pie");
    let base = 0x5555_5555_4000u64;
    let wrong_id = [0xab_u8; 20];
    let mut w = RecordWriter::with_magic();
    let pie_path = pie.to_str().unwrap();
    let mapping = loader_mapping(10, &pie, pie_path, base, hot, Some(&wrong_id));
    mmap_blob(&mut w, &mapping);
    let gone_base = 0x7f00_0000_0000u64;
    mmap_blob(
        &mut w,
        &fxtrace_format::mmap::MmapRecord {
            pid: 10,
            time: 5,
            start: gone_base,
            len: 0x4000,
            pgoff: 0x1000,
            build_id: None,
            path: b"/nonexistent/libgone.so",
        }
        .encode()
        .unwrap(),
    );
    // A damaged mapping blob is counted, not trusted.
    mmap_blob(&mut w, &[0u8; 20]);
    lbr_blob(
        &mut w,
        "cpu0",
        0,
        20,
        &[br((base + hot, gone_base + 0x123), 0, false)],
    );
    let r = LbrReport::read(&w.to_bytes()[..]).report;
    assert_eq!(r.invalid_mmaps(), 1);
    let mut symbols = Symbolizer::new();
    symbols.load_mappings(r.used_mappings());
    let out = text(&r, &symbols, 5, Breakdown::Overall);
    assert!(
        out.contains(&format!(
            "warning: mapped file {pie_path} is another build than the traced one (build-id {} in the trace, ",
            "ab".repeat(20)
        )),
        "{out}"
    );
    assert!(
        out.contains("note: mapped file /nonexistent/libgone.so cannot be read ("),
        "{out}"
    );
    assert!(
        out.contains("skipped: 1 fxtrace:mmap blob with an invalid payload"),
        "{out}"
    );
    // Not symbolized with the wrong build: the file offset of hot instead.
    let (vaddr, offset, _) = exec_segment(&pie, hot);
    let hot_offset = hot - vaddr + offset;
    assert!(
        out.contains(&format!("{:#x} pie+{hot_offset:#x} -> ", base + hot)),
        "{out}"
    );
    assert!(!out.contains(" hot"), "{out}");
    assert!(
        out.contains(&format!("-> {:#x} libgone.so+0x1123\n", gone_base + 0x123)),
        "{out}"
    );

    // --binary overrides the mapping: with the right base, hot is named again.
    let spec = format!("{pie_path}@{base:#x}");
    let mut symbols = Symbolizer::new();
    symbols.add(&spec.parse::<BinarySpec>().unwrap()).unwrap();
    symbols.load_mappings(r.used_mappings());
    let out = text(&r, &symbols, 5, Breakdown::Overall);
    assert!(out.contains(&format!("{:#x} hot (", base + hot)), "{out}");
}

/// A trace where `n` mappings of one file (starts `step` bytes apart) all hold the sample's
/// two addresses (its process unknown: any mapping may hold them).
fn crowded_trace(n: u64, step: u64) -> Vec<u8> {
    let mut w = RecordWriter::with_magic();
    for i in 0..n {
        let payload = fxtrace_format::mmap::MmapRecord {
            pid: 7,
            time: 5,
            start: 0x1000 + i * step,
            len: 0x10_0000,
            pgoff: 0,
            build_id: None,
            path: b"/nonexistent/lib.so",
        }
        .encode()
        .unwrap();
        mmap_blob(&mut w, &payload);
    }
    lbr_blob(&mut w, "cpu0", 0, 100, &[br((0x8000, 0x8008), 1, false)]);
    w.to_bytes()
}

#[test]
fn an_address_held_by_too_many_mappings_is_left_unresolved_and_counted() {
    let too_many = fxtrace_tools::report::lbr::MAX_COVERING as u64 + 1;
    let crowded = LbrReport::read(&crowded_trace(too_many, 8)[..]).report;
    assert_eq!(crowded.crowded_addresses(), 2, "the branch's from and to");
    assert!(crowded.mapping_of(0x8000).is_none());
    // Ten mappings of the file at one place: they agree, the address is resolved.
    let fine = LbrReport::read(&crowded_trace(10, 0)[..]).report;
    assert_eq!(fine.crowded_addresses(), 0);
    assert!(fine.mapping_of(0x8000).is_some());
}

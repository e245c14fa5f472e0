//! Cross-checks the XRay reader against `llvm-xray` on real logs.
//!
//! The fixtures in `tests/fixtures/xray/` come from `scripts/make-xray-fixtures.sh`:
//! a two-thread C++ program built with `clang++ -fxray-instrument
//! -fxray-instruction-threshold=1` and run in FDR mode (log version 5) and basic mode
//! (version 3), with `llvm-xray convert --output-format=yaml --symbolize` of each log
//! and `llvm-xray extract --symbolize` of the binary. Set `FXTRACE_XRAY_FIXTURES=DIR`
//! to run the same checks on freshly generated fixtures (what CI does when clang is
//! installed: timestamps differ on every run, so it compares a fresh log with a fresh
//! llvm-xray conversion rather than bytes).

use std::collections::BTreeMap;
use std::path::PathBuf;

use fxtrace_tools::convert::xray::llvm_yaml::{get, parse_flow_mapping, parse_int, YamlValue};
use fxtrace_tools::convert::xray::{read_log, InstrMap, LogType, XrayEventKind, XrayLog};

fn fixture_dir() -> PathBuf {
    match std::env::var_os("FXTRACE_XRAY_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(crate::WORKSPACE).join("tests/fixtures/xray"),
    }
}

fn read(name: &str) -> Vec<u8> {
    let path = fixture_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One event as both sides can describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    kind: String,
    func_id: Option<i64>,
    tsc: u64,
    cpu: u64,
    args: Vec<u64>,
    data: String,
}

/// llvm-xray's YAML: header fields, and per thread id, (process id, events in order).
struct LlvmTrace {
    header: BTreeMap<String, String>,
    threads: BTreeMap<u64, (u64, Vec<Event>)>,
    /// Function id → the name llvm-xray printed for it.
    names: BTreeMap<i64, String>,
}

fn parse_llvm_yaml(text: &str) -> LlvmTrace {
    let mut header = BTreeMap::new();
    let mut threads: BTreeMap<u64, (u64, Vec<Event>)> = BTreeMap::new();
    let mut names = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("- {") {
            let e = parse_flow_mapping(t).unwrap_or_else(|err| panic!("{err}: {t}"));
            let s = |k: &str| {
                get(&e, k)
                    .and_then(YamlValue::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let n = |k: &str| parse_int(&s(k)).unwrap_or_else(|| panic!("no `{k}` in {t}"));
            let kind = s("kind");
            let is_function = kind.starts_with("function-");
            let func_id = is_function.then(|| n("func-id") as i64);
            if let Some(id) = func_id {
                names.insert(id, s("function"));
            }
            let args = match get(&e, "args") {
                Some(YamlValue::Seq(items)) => {
                    items.iter().map(|a| parse_int(a).unwrap()).collect()
                }
                _ => Vec::new(),
            };
            let event = Event {
                kind,
                func_id,
                tsc: n("tsc"),
                cpu: n("cpu"),
                args,
                data: s("data"),
            };
            let entry = threads
                .entry(n("thread"))
                .or_insert_with(|| (n("process"), Vec::new()));
            assert_eq!(entry.0, n("process"), "one process per thread id");
            entry.1.push(event);
        } else if let Some((k, v)) = t.split_once(':') {
            if !v.trim().is_empty() {
                header.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
    }
    LlvmTrace {
        header,
        threads,
        names,
    }
}

fn our_events(log: &XrayLog, tid: u32) -> Vec<Event> {
    let thread = log
        .thread(tid)
        .unwrap_or_else(|| panic!("thread {tid} missing from our decoding"));
    thread
        .events
        .iter()
        .filter_map(|e| {
            let (kind, args, data) = match &e.kind {
                XrayEventKind::Enter { .. } => ("function-enter", vec![], String::new()),
                XrayEventKind::EnterWithArgs { args, .. } => {
                    ("function-enter-arg", args.clone(), String::new())
                }
                XrayEventKind::Exit { .. } => ("function-exit", vec![], String::new()),
                XrayEventKind::TailExit { .. } => ("function-tail-exit", vec![], String::new()),
                XrayEventKind::CustomEvent { data } => (
                    "custom-event",
                    vec![],
                    String::from_utf8_lossy(data).into_owned(),
                ),
                XrayEventKind::TypedEvent { data, .. } => (
                    "typed-event",
                    vec![],
                    String::from_utf8_lossy(data).into_owned(),
                ),
                XrayEventKind::CpuMigration { .. } => return None, // ours only: llvm-xray has no such record
            };
            let func_id = e.kind.func_id().map(i64::from);
            Some(Event {
                kind: kind.to_string(),
                func_id,
                tsc: e.tsc,
                cpu: u64::from(e.cpu),
                args,
                data,
            })
        })
        .collect()
}

/// Decodes `log_name`, parses `yaml_name`, and checks they agree on everything.
fn cross_check(log_name: &str, yaml_name: &str, log_type: LogType) -> (XrayLog, LlvmTrace) {
    let log = read_log(&read(log_name)).expect("header");
    assert_eq!(log.error, None, "{log_name} must decode completely");
    let yaml = String::from_utf8(read(yaml_name)).unwrap();
    let llvm = parse_llvm_yaml(&yaml);

    let h = &log.header;
    assert_eq!(h.log_type, log_type);
    assert_eq!(llvm.header["version"], h.version.to_string());
    assert_eq!(
        llvm.header["type"],
        if log_type == LogType::Fdr { "1" } else { "0" }
    );
    assert_eq!(llvm.header["constant-tsc"], h.constant_tsc.to_string());
    assert_eq!(llvm.header["nonstop-tsc"], h.nonstop_tsc.to_string());
    assert_eq!(
        llvm.header["cycle-frequency"],
        h.cycle_frequency.to_string()
    );

    let our_tids: Vec<u64> = {
        let mut v: Vec<u64> = log.threads.iter().map(|t| u64::from(t.tid)).collect();
        v.sort();
        v
    };
    assert_eq!(
        our_tids,
        llvm.threads.keys().copied().collect::<Vec<_>>(),
        "same threads"
    );
    for (tid, (pid, theirs)) in &llvm.threads {
        let tid = *tid as u32;
        let stream = log.thread(tid).unwrap();
        assert_eq!(stream.pid.map(u64::from), Some(*pid), "pid of thread {tid}");
        let ours = our_events(&log, tid);
        assert_eq!(ours.len(), theirs.len(), "event count of thread {tid}");
        for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
            // llvm-xray leaves the previous record's func-id on custom events: compare the
            // function id only where it means something.
            let b = Event {
                func_id: if a.kind.starts_with("function-") {
                    b.func_id
                } else {
                    None
                },
                ..b.clone()
            };
            assert_eq!(a, &b, "thread {tid}, event {i}");
        }
    }
    (log, llvm)
}

fn count(log: &XrayLog, tid: u32, pred: impl Fn(&XrayEventKind) -> bool) -> usize {
    log.thread(tid)
        .unwrap()
        .events
        .iter()
        .filter(|e| pred(&e.kind))
        .count()
}

#[test]
fn fdr_v5_log_matches_llvm_xray() {
    let (log, llvm) = cross_check("fdr-v5.xray", "fdr-v5.yaml", LogType::Fdr);
    assert_eq!(log.header.version, 5);
    assert_eq!(log.threads.len(), 2, "two worker threads");
    // What the fixture program does on each thread (scripts/xray-fixture/xray_fixture.cc).
    let map = InstrMap::from_yaml(&String::from_utf8(read("instr-map.yaml")).unwrap()).unwrap();
    let id = |name: &str| {
        map.functions()
            .find(|f| f.name.as_deref() == Some(name))
            .map(|f| f.id)
            .unwrap()
    };
    let with_arg = id("with_arg(unsigned long)");
    let mut all_args = Vec::new();
    for t in &log.threads {
        assert_eq!(t.buffers, 1);
        assert_eq!(t.wall_times.len(), 1);
        assert!(
            t.wall_times[0].tsc.is_some(),
            "wall time anchored to the first NewCPUId"
        );
        let enters_with_args: Vec<_> = t
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                XrayEventKind::EnterWithArgs { func_id, args } if *func_id == with_arg => {
                    Some(args.clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(enters_with_args.len(), 3);
        all_args.extend(enters_with_args.into_iter().flatten());
        assert_eq!(
            count(&log, t.tid, |k| matches!(k, XrayEventKind::TailExit { .. })),
            6
        );
        let customs: Vec<_> = t
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                XrayEventKind::CustomEvent { data } => {
                    Some(String::from_utf8_lossy(data).into_owned())
                }
                _ => None,
            })
            .collect();
        assert_eq!(customs.len(), 1);
        assert!(
            customs[0].starts_with("custom event from thread "),
            "{customs:?}"
        );
        // Timestamps within a thread never go backwards.
        assert!(t.events.windows(2).all(|w| w[0].tsc <= w[1].tsc));
        // Every entry has its exit (or tail exit): the program returns from everything.
        let entries = count(&log, t.tid, |k| {
            matches!(
                k,
                XrayEventKind::Enter { .. } | XrayEventKind::EnterWithArgs { .. }
            )
        });
        let exits = count(&log, t.tid, |k| {
            matches!(
                k,
                XrayEventKind::Exit { .. } | XrayEventKind::TailExit { .. }
            )
        });
        assert_eq!(entries, exits);
    }
    all_args.sort();
    assert_eq!(all_args, vec![0, 1, 2, 100, 101, 102]);
    // Thread 0 waits past 2^31 ticks before one call: the runtime wrote a TSCWrap.
    assert!(log.stats.tsc_wraps >= 1, "{:?}", log.stats);
    assert_eq!(log.stats.orphan_call_args, 0);
    // Function names: llvm-xray's symbolized names equal the instr-map extract's.
    for (id, name) in &llvm.names {
        assert_eq!(
            map.function_name(*id as i32),
            Some(name.as_str()),
            "function {id}"
        );
    }
}

#[test]
fn basic_v3_log_matches_llvm_xray() {
    let (log, llvm) = cross_check("basic-v3.xray", "basic-v3.yaml", LogType::Basic);
    assert_eq!(log.header.version, 3);
    assert_eq!(log.threads.len(), 2);
    let args: usize = log
        .threads
        .iter()
        .map(|t| {
            count(
                &log,
                t.tid,
                |k| matches!(k, XrayEventKind::EnterWithArgs { args, .. } if args.len() == 1),
            )
        })
        .sum();
    assert_eq!(args, 6, "one logged argument per with_arg call");
    let map = InstrMap::from_yaml(&String::from_utf8(read("instr-map.yaml")).unwrap()).unwrap();
    for (id, name) in &llvm.names {
        assert_eq!(
            map.function_name(*id as i32),
            Some(name.as_str()),
            "function {id}"
        );
    }
}

#[test]
fn instr_map_extract_names_every_logged_function() {
    let map = InstrMap::from_yaml(&String::from_utf8(read("instr-map.yaml")).unwrap()).unwrap();
    let names: Vec<_> = map
        .functions()
        .map(|f| (f.id, f.name.clone().unwrap_or_default()))
        .collect();
    for want in [
        "leaf(int)",
        "with_arg(unsigned long)",
        "tail_caller(int)",
        "tail_callee(int)",
        "recurse(int)",
        "emit_events(int)",
        "worker(void*)",
    ] {
        assert!(names.iter().any(|(_, n)| n == want), "{want} in {names:?}");
    }
    let log = read_log(&read("fdr-v5.xray")).unwrap();
    for t in &log.threads {
        for e in &t.events {
            if let Some(id) = e.kind.func_id() {
                assert!(
                    map.function_name(id).is_some(),
                    "function id {id} has a name"
                );
            }
        }
    }
}

//! `fxtrace dump`: one line (or one JSON object) per record, all of them or those the filters
//! keep.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{json, Map, Value};

use fxtrace_format::lbr::LbrSample;
use fxtrace_format::mmap::{build_id_hex, MmapRecord, MMAP_BLOB_NAME};
use fxtrace_format::stack::{
    KernelSymbolRecord, SampleRecord, StackRecord, KSYM_BLOB_NAME, SAMPLE_BLOB_NAME,
    STACK_BLOB_NAME,
};
use fxtrace_format::{
    BlobType, Decoded, DecodedArg, DecodedEventKind, DecodedRecord, DecodedValue, RecordHead,
    Thread, ThreadStateName, Timestamp,
};
use fxtrace_tools::read::filter::{Filter, Glob, ProviderName, RelativeTime, TypeName};
use fxtrace_tools::read::{Analysis, FirstTime};

use super::input;
use super::CliError;

const AFTER_HELP: &str = "\
Filters keep the records that match every filter given (a filter given twice keeps either \
value). A record without the property a filter asks for (a string record has no thread) is \
left out. Times are relative to the trace's first timestamp: seconds (1.5), or with a unit \
(250ms, 40us, 1000ns).

EXAMPLES:
    fxtrace dump trace.fxt --tid 4242 --type duration_begin --type duration_end
    fxtrace dump trace.fxt --name 'batch*' --from 2s --to 2.5s --relative
    fxtrace dump trace.fxt --type context_switch --pid 4242 --json | jq .";

/// Arguments of `fxtrace dump`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct DumpArgs {
    /// The trace to read (`-` for standard input).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// Only records of this process (a switch: of either thread's).
    #[arg(long, value_name = "PID")]
    pid: Vec<u64>,
    /// Only records of this thread (a switch: either side; a wake-up: the woken thread).
    #[arg(long, value_name = "TID")]
    tid: Vec<u64>,
    /// Only records of this provider (its id, or its name).
    #[arg(long, value_name = "ID|NAME")]
    provider: Vec<ProviderName>,
    /// Only records whose name matches (`*` and `?` wildcards): events, blobs, objects.
    #[arg(long, value_name = "GLOB")]
    name: Vec<String>,
    /// Only events whose category matches (`*` and `?` wildcards).
    #[arg(long, value_name = "GLOB")]
    category: Vec<String>,
    /// Only records of this type: a record kind (event, context_switch, wakeup, log, blob,
    /// kernel_object, …) or an event type (instant, duration_begin, async_end, …).
    #[arg(long = "type", value_name = "TYPE")]
    types: Vec<TypeName>,
    /// Only records at or after this time since the trace's first timestamp.
    #[arg(long, value_name = "TIME")]
    from: Option<RelativeTime>,
    /// Only records at or before this time since the trace's first timestamp.
    #[arg(long, value_name = "TIME")]
    to: Option<RelativeTime>,
    /// Print times relative to the trace's first timestamp.
    #[arg(long)]
    relative: bool,
}

/// The dump as an analysis: the filter judges, the kept records are written.
struct Dump<W> {
    out: W,
    json: bool,
    filter: Filter,
    /// Times are printed relative to this (0: absolute).
    origin_ns: u64,
}

impl<W: Write> Analysis for Dump<W> {
    fn head(&mut self, head: &RecordHead) -> bool {
        self.filter.head(head)
    }

    fn add(&mut self, _: &RecordHead, d: &Decoded<'_>) -> io::Result<()> {
        if !self.filter.matches(d) {
            return Ok(());
        }
        if self.json {
            writeln!(self.out, "{}", to_json(d, self.origin_ns))
        } else if self.origin_ns > 0 {
            writeln!(self.out, "{}", d.relative_to(self.origin_ns))
        } else {
            writeln!(self.out, "{d}")
        }
    }
}

/// The trace's first timestamp, from a first reading of the heads alone.
struct First(FirstTime);

impl Analysis for First {
    fn head(&mut self, head: &RecordHead) -> bool {
        self.0.head(head);
        false
    }

    fn add(&mut self, _: &RecordHead, _: &Decoded<'_>) -> io::Result<()> {
        Ok(())
    }
}

/// Prints the records kept; on damage, prints the good part and returns the decode error.
pub(crate) fn run(args: &DumpArgs) -> Result<ExitCode, CliError> {
    let mut filter = Filter {
        pids: args.pid.clone(),
        tids: args.tid.clone(),
        providers: args.provider.clone(),
        names: args.name.iter().map(|g| Glob::new(g)).collect(),
        categories: args.category.iter().map(|g| Glob::new(g)).collect(),
        types: args.types.clone(),
        from: args.from,
        to: args.to,
        ..Filter::default()
    };
    let needs_origin = filter.needs_origin() || args.relative;
    let mut input = if needs_origin {
        input::open_rereadable(&args.file)?
    } else {
        input::open(&args.file)?
    };
    if needs_origin {
        let mut first = First(FirstTime::default());
        input::read_all(&mut input, &mut first)?;
        filter.origin_ns = first.0.ns();
    }
    let mut dump = Dump {
        out: BufWriter::new(io::stdout().lock()),
        json: args.json,
        origin_ns: if args.relative { filter.origin_ns } else { 0 },
        filter,
    };
    let outcome = match input::read_all(&mut input, &mut dump) {
        // A closed pipe (`fxtrace dump … | head`) is the reader's choice, not a failure.
        Err(CliError::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
            return Ok(ExitCode::SUCCESS)
        }
        other => other?,
    };
    match dump.out.flush() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        other => other.map_err(CliError::Output)?,
    }
    input::finish(outcome)
}

fn time(t: Timestamp, origin_ns: u64) -> Value {
    json!({ "ns": t.ns.saturating_sub(origin_ns), "ticks": t.ticks })
}

fn thread(t: Thread) -> Value {
    json!({ "pid": t.pid, "tid": t.tid })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn args(args: &[DecodedArg<'_>]) -> Value {
    Value::Array(
        args.iter()
            .map(|a| {
                let value = match &a.value {
                    DecodedValue::Null => Value::Null,
                    DecodedValue::I32(v) => json!(v),
                    DecodedValue::U32(v) => json!(v),
                    DecodedValue::I64(v) => json!(v),
                    DecodedValue::U64(v) => json!(v),
                    DecodedValue::F64(v) => json!(v),
                    DecodedValue::Str(v) => json!(v),
                    DecodedValue::Pointer(v) => json!(format!("{v:#x}")),
                    DecodedValue::Koid(v) => json!(v),
                    DecodedValue::Bool(v) => json!(v),
                    DecodedValue::Blob(v) => json!(hex(v)),
                };
                json!({ "name": a.name, "type": a.value.type_name(), "value": value })
            })
            .collect(),
    )
}

/// One record as a JSON object: `offset`, `provider`, `type`, then the record's fields (times
/// counted from `origin_ns`; names as the text dump gives them).
fn to_json(d: &Decoded<'_>, origin_ns: u64) -> Value {
    let time = |t: Timestamp| time(t, origin_ns);
    let mut o = Map::new();
    o.insert("offset".into(), json!(d.offset));
    o.insert("provider".into(), json!(d.provider));
    o.insert("type".into(), json!(d.record.kind_name()));
    let mut put = |k: &str, v: Value| {
        o.insert(k.to_string(), v);
    };
    match &d.record {
        DecodedRecord::Magic => {}
        DecodedRecord::ProviderInfo { provider_id, name } => {
            put("provider_id", json!(provider_id));
            put("name", json!(name));
        }
        DecodedRecord::ProviderSection { provider_id } => put("provider_id", json!(provider_id)),
        DecodedRecord::ProviderEvent { provider_id, event } => {
            put("provider_id", json!(provider_id));
            put("event", json!(event));
        }
        DecodedRecord::Initialization { ticks_per_second } => {
            put("ticks_per_second", json!(ticks_per_second));
        }
        DecodedRecord::String { index, value } => {
            put("index", json!(index));
            put("value", json!(value));
        }
        DecodedRecord::Thread { index, thread: t } => {
            put("index", json!(index));
            put("thread", thread(*t));
        }
        DecodedRecord::Event(e) => {
            put("event", json!(e.kind.event_type().name()));
            put("time", time(e.time));
            put("thread", thread(e.thread));
            put("category", json!(e.category));
            put("name", json!(e.name));
            put("args", args(&e.args));
            match e.kind {
                DecodedEventKind::DurationComplete { end } => put("end", time(end)),
                kind => {
                    if let Some(id) = kind.id() {
                        put("id", json!(id));
                    }
                }
            }
        }
        DecodedRecord::Blob {
            name,
            blob_type,
            payload,
        } => {
            put("name", json!(name));
            put("blob_type", json!(blob_type.0));
            put("size", json!(payload.len()));
            put("payload", json!(hex(payload)));
            if *blob_type == BlobType::DATA && *name == MMAP_BLOB_NAME {
                if let Ok(m) = MmapRecord::decode(payload) {
                    put(
                        "mmap",
                        json!({
                            "pid": m.pid,
                            "time": time(Timestamp {
                                ticks: m.time,
                                ns: fxtrace_format::ticks_to_ns(m.time, d.ticks_per_second),
                            }),
                            "start": format!("{:#x}", m.start),
                            "end": format!("{:#x}", m.end()),
                            "pgoff": format!("{:#x}", m.pgoff),
                            "build_id": m.build_id.map(build_id_hex),
                            "path": m.path_lossy(),
                        }),
                    );
                }
            }
            if *blob_type == BlobType::DATA {
                let addresses = |ips: &[u64]| -> Vec<String> {
                    ips.iter().map(|ip| format!("{ip:#x}")).collect()
                };
                match name.as_ref() {
                    STACK_BLOB_NAME => {
                        if let Ok(s) = StackRecord::decode(payload) {
                            put(
                                "stack",
                                json!({
                                    "id": s.id,
                                    "kernel": addresses(s.kernel()),
                                    "user": addresses(s.user()),
                                }),
                            );
                        }
                    }
                    SAMPLE_BLOB_NAME => {
                        if let Ok(s) = SampleRecord::decode(payload) {
                            put(
                                "sample",
                                json!({
                                    "time": time(Timestamp {
                                        ticks: s.time,
                                        ns: fxtrace_format::ticks_to_ns(s.time, d.ticks_per_second),
                                    }),
                                    "cpu": s.cpu,
                                    "pid": s.pid,
                                    "tid": s.tid,
                                    "stack": s.stack,
                                }),
                            );
                        }
                    }
                    KSYM_BLOB_NAME => {
                        if let Ok(k) = KernelSymbolRecord::decode(payload) {
                            put(
                                "ksym",
                                json!({
                                    "start": format!("{:#x}", k.start),
                                    "end": format!("{:#x}", k.start.saturating_add(k.len)),
                                    "name": k.name_lossy(),
                                }),
                            );
                        }
                    }
                    _ => {}
                }
            }
            if *blob_type == BlobType::LAST_BRANCH {
                if let Ok(sample) = LbrSample::decode(payload) {
                    let h = sample.header;
                    let branches: Vec<Value> = sample
                        .branches()
                        .map(|b| {
                            json!({
                                "from": format!("{:#x}", b.from),
                                "to": format!("{:#x}", b.to),
                                "cycles": b.cycles(),
                                "mispredicted": b.mispredicted(),
                            })
                        })
                        .collect();
                    put(
                        "lbr",
                        json!({
                            "cpu": h.cpu,
                            "time": time(Timestamp {
                                ticks: h.event_time,
                                ns: fxtrace_format::ticks_to_ns(h.event_time, d.ticks_per_second),
                            }),
                            "aspace": format!("{:#x}", h.aspace),
                            "branches": branches,
                        }),
                    );
                }
            }
        }
        DecodedRecord::UserspaceObject {
            pointer,
            pid,
            name,
            args: a,
        } => {
            put("pointer", json!(format!("{pointer:#x}")));
            put("pid", json!(pid));
            put("name", json!(name));
            put("args", args(a));
        }
        DecodedRecord::KernelObject {
            koid,
            object_type,
            name,
            args: a,
        } => {
            put("koid", json!(koid));
            put("object_type", json!(object_type.0));
            put("name", json!(name));
            put("args", args(a));
        }
        DecodedRecord::ContextSwitch {
            time: t,
            cpu,
            outgoing_state,
            outgoing,
            incoming,
            outgoing_priority,
            incoming_priority,
        } => {
            put("time", time(*t));
            put("cpu", json!(cpu));
            put(
                "outgoing_state",
                json!(ThreadStateName(*outgoing_state).to_string()),
            );
            put("outgoing", thread(*outgoing));
            put("incoming", thread(*incoming));
            put("outgoing_priority", json!(outgoing_priority));
            put("incoming_priority", json!(incoming_priority));
        }
        DecodedRecord::SchedContextSwitch {
            time: t,
            cpu,
            outgoing_state,
            outgoing_tid,
            incoming_tid,
            args: a,
        } => {
            put("time", time(*t));
            put("cpu", json!(cpu));
            put(
                "outgoing_state",
                json!(ThreadStateName(*outgoing_state).to_string()),
            );
            put("outgoing_tid", json!(outgoing_tid));
            put("incoming_tid", json!(incoming_tid));
            put("args", args(a));
        }
        DecodedRecord::SchedThreadWakeup {
            time: t,
            cpu,
            waking_tid,
            args: a,
        } => {
            put("time", time(*t));
            put("cpu", json!(cpu));
            put("waking_tid", json!(waking_tid));
            put("args", args(a));
        }
        DecodedRecord::Log {
            time: t,
            thread: th,
            message,
        } => {
            put("time", time(*t));
            put("thread", thread(*th));
            put("message", json!(message));
        }
        DecodedRecord::LargeBlob {
            category,
            name,
            metadata,
            payload,
        } => {
            put("category", json!(category));
            put("name", json!(name));
            if let Some(m) = metadata {
                put("time", time(m.time));
                put("thread", thread(m.thread));
                put("args", args(&m.args));
            }
            put("size", json!(payload.len()));
            put("payload", json!(hex(payload)));
        }
    }
    Value::Object(o)
}

//! The initialization record leads every trace: threads hammering `fxtrace::instant` while a
//! provider connects, starts, stops and starts again never get a record into the buffer ahead
//! of it (in oneshot mode durable records share the rolling buffer in chunk order; in circular
//! and streaming modes string and thread records share the durable buffer).

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use fxtrace::protocol::control::{BufferingMode, SessionState};
use fxtrace::provider::{Provider, ProviderOptions};
use fxtrace::Scope;
use fxtrace_format::{DecodedRecord, Decoder};
use fxtrace_tools::manager::{Manager, ManagerConfig, SessionConfig};

use support::{drive, SharedOut};

const ROUNDS: usize = 6;
const HAMMERS: usize = 3;

fn manager(socket: &std::path::Path, mode: BufferingMode, size: u64) -> (Manager, SharedOut) {
    let config = ManagerConfig {
        session: SessionConfig {
            buffering_mode: mode,
            buffer_size_bytes: size,
            stop_timeout: Duration::from_secs(2),
            ..SessionConfig::default()
        },
        ..ManagerConfig::new(socket)
    };
    let out = SharedOut::default();
    (Manager::new(config, Box::new(out.clone())).unwrap(), out)
}

/// What one provider's sections hold, in archive order.
#[derive(Debug, Default)]
struct Sections {
    /// Initialization records seen.
    inits: usize,
    /// Events seen.
    events: usize,
    /// Where a record preceded an Initialization record inside its section:
    /// (section number, kind of the first record).
    violations: Vec<(usize, &'static str)>,
}

const EARLY_EVENT: &str = "event before any initialization";

/// Check every section of the (single) provider: an Initialization record, wherever it is,
/// is the first record of its section (after the provider metadata), and no event precedes
/// the first one.
fn check(bytes: &[u8]) -> Sections {
    let mut s = Sections::default();
    let mut section = 0usize;
    // Kind of the first non-metadata record of the current section.
    let mut first: Option<&'static str> = None;
    for (i, d) in Decoder::new(bytes).enumerate() {
        let d = d.unwrap_or_else(|e| panic!("record {i} does not decode: {e}"));
        if d.provider == Some(fxtrace_format::MANAGER_PROVIDER_ID) {
            // The manager's own section (its markers, at its own tick rate): not a trace of
            // the provider's.
            continue;
        }
        match &d.record {
            DecodedRecord::Magic | DecodedRecord::ProviderEvent { .. } => {}
            DecodedRecord::ProviderInfo { .. } | DecodedRecord::ProviderSection { .. } => {
                section += 1;
                first = None;
            }
            DecodedRecord::Initialization { ticks_per_second } => {
                assert!(*ticks_per_second > 0);
                if let Some(kind) = first {
                    s.violations.push((section, kind));
                }
                first.get_or_insert("initialization");
                s.inits += 1;
            }
            other => {
                if let DecodedRecord::Event(e) = other {
                    if e.category != "fxtrace" {
                        s.events += 1;
                    }
                    if s.inits == 0 && s.violations.last() != Some(&(section, EARLY_EVENT)) {
                        s.violations.push((section, EARLY_EVENT));
                    }
                }
                first.get_or_insert(other.kind_name());
            }
        }
    }
    s
}

fn hammer(stop: &AtomicBool, calls: &AtomicU64) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        fxtrace::instant("hammer", "tick", Scope::Thread, &[]);
        n += 1;
    }
    calls.fetch_add(n, Ordering::Relaxed);
}

/// One session of `ROUNDS` starts; `Err` describes what went wrong.
fn run(mode: BufferingMode, size: u64) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let (mut m, out) = manager(&socket, mode, size);
    let mut events = Vec::new();
    let stop = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..HAMMERS {
            s.spawn(|| hammer(&stop, &calls));
        }
        // The session runs before the provider connects: the manager starts it right after
        // registering it, while the hammers are already calling.
        m.start(None).unwrap();
        let opts = ProviderOptions {
            socket_path: Some(socket.clone()),
            exit_hook: false,
            ..ProviderOptions::default()
        };
        let h = s.spawn(move || {
            let provider = Provider::connect_with("init-order", &opts)
                .unwrap()
                .expect("the manager listens");
            provider.install_global().unwrap();
            provider
        });
        drive(&mut m, &mut events, Duration::from_secs(10), |_, _| {
            h.is_finished()
        });
        let provider = h.join().unwrap();
        for round in 0..ROUNDS {
            if round > 0 {
                m.start(None).unwrap();
            }
            drive(&mut m, &mut events, Duration::from_secs(10), |m, _| {
                m.session().state() == SessionState::Started
            });
            assert!(provider.wait_started(Duration::from_secs(5)));
            std::thread::sleep(Duration::from_millis(5));
            m.stop(true).unwrap();
            drive(&mut m, &mut events, Duration::from_secs(10), |m, _| {
                m.session().state() == SessionState::Stopped
            });
        }
        stop.store(true, Ordering::Relaxed);
        drop(provider);
    });
    m.finish().unwrap();
    let sections = check(&out.bytes());
    assert!(calls.load(Ordering::Relaxed) > 0);
    if !sections.violations.is_empty() {
        return Err(format!(
            "{mode:?}: records ahead of the initialization record (section, first kind): {:?}",
            sections.violations
        ));
    }
    if sections.inits != ROUNDS {
        return Err(format!(
            "{mode:?}: {} initialization records for {ROUNDS} clearing starts",
            sections.inits
        ));
    }
    if sections.events == 0 {
        return Err(format!("{mode:?}: the hammers wrote nothing"));
    }
    Ok(())
}

// One test: the process has one current context at a time.
#[test]
fn initialization_record_leads_every_trace_in_every_mode() {
    let failures: Vec<String> = [
        (BufferingMode::Oneshot, 1 << 20),
        (BufferingMode::Circular, 256 << 10),
        (BufferingMode::Streaming, 256 << 10),
    ]
    .into_iter()
    .filter_map(|(mode, size)| run(mode, size).err())
    .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

mod engine_level {
    use std::sync::Arc;
    use std::time::Duration;

    use fxtrace::buffer::header::{copy_records, BufferingMode, Framing, HEADER_SIZE};
    use fxtrace::buffer::TraceBuffer;
    use fxtrace::engine::Scope;
    use fxtrace::engine::{CategoryFilter, Context, ContextConfig, NoHandler, StartMode};
    use fxtrace_format::{DecodedRecord, Decoder};

    fn context(mode: BufferingMode) -> Context {
        let buffer = TraceBuffer::create(64 << 10).unwrap();
        let config = ContextConfig {
            mode,
            chunk_size: 1024,
            ..ContextConfig::default()
        };
        Context::new(buffer, config, Arc::new(NoHandler)).unwrap()
    }

    /// Record kinds of `region` read with `framing`.
    fn kinds(region: &[u8], end: u64, framing: Framing) -> Vec<String> {
        let mut out = Vec::new();
        copy_records(region, end, framing, &mut out).unwrap();
        Decoder::bare(&out)
            .map(|d| match d.unwrap().record {
                DecodedRecord::Initialization { ticks_per_second } => {
                    format!("init {ticks_per_second}")
                }
                other => other.kind_name().to_owned(),
            })
            .collect()
    }

    fn tick(ctx: &Context) {
        let mut w = ctx.trace_writer().expect("started");
        w.instant(1, "cat", "tick", Scope::Thread, &[]).unwrap();
    }

    /// Oneshot: the record opens the first chunk, and the starting thread keeps writing in
    /// the rest of that chunk (nothing is wasted). A retaining start keeps it; a clearing
    /// start writes a new one.
    #[test]
    fn oneshot_first_chunk_starts_with_the_record() {
        let ctx = context(BufferingMode::Oneshot);
        let all = CategoryFilter::all;
        assert!(ctx
            .start_with_initialization(StartMode::Retain, all(), 77)
            .unwrap());
        tick(&ctx);
        let stop = ctx.stop(Duration::from_secs(1)).unwrap();
        assert_eq!(stop.rolling_data_end[0], ctx.chunk_size(), "one chunk used");
        assert!(!ctx
            .start_with_initialization(StartMode::Retain, all(), 77)
            .unwrap());
        tick(&ctx);
        let stop = ctx.stop(Duration::from_secs(1)).unwrap();
        let g = ctx.geometry();
        let bytes = ctx.buffer().copy_range(0, g.total_size).unwrap();
        let rolling = &bytes[g.rolling_offset(0) as usize..];
        let framing = ctx.buffer().header().load().rolling_framing(0);
        let k = kinds(rolling, stop.rolling_data_end[0], framing);
        assert_eq!(k[0], "init 77", "{k:?}");
        assert_eq!(
            k.iter().filter(|k| k.starts_with("init")).count(),
            1,
            "{k:?}"
        );
        assert_eq!(k.iter().filter(|k| *k == "event").count(), 2, "{k:?}");

        assert!(ctx
            .start_with_initialization(StartMode::ClearNondurable, all(), 78)
            .unwrap());
        let stop = ctx.stop(Duration::from_secs(1)).unwrap();
        let bytes = ctx.buffer().copy_range(0, g.total_size).unwrap();
        let rolling = &bytes[g.rolling_offset(0) as usize..];
        assert_eq!(
            kinds(rolling, stop.rolling_data_end[0], framing),
            ["init 78"]
        );
    }

    /// Circular: the record is at offset 0 of the durable buffer; a start that clears the
    /// rolling buffers only appends a new one (ahead of the new trace's records, as Fuchsia
    /// does), a retaining start writes none, a start that clears everything writes it at 0.
    #[test]
    fn durable_buffer_starts_with_the_record() {
        let ctx = context(BufferingMode::Circular);
        let all = CategoryFilter::all;
        let durable = |ctx: &Context, end: u64| {
            let bytes = ctx.buffer().copy_range(HEADER_SIZE, end).unwrap();
            kinds(&bytes, end, Framing::Dense)
        };
        assert!(ctx
            .start_with_initialization(StartMode::ClearEntire, all(), 5)
            .unwrap());
        tick(&ctx);
        let stop = ctx.stop(Duration::from_secs(1)).unwrap();
        let k = durable(&ctx, stop.durable_data_end);
        assert_eq!(k[0], "init 5", "{k:?}");
        assert_eq!(k.iter().filter(|k| k.starts_with("init")).count(), 1);
        assert!(ctx
            .start_with_initialization(StartMode::ClearNondurable, all(), 6)
            .unwrap());
        let stop = ctx.stop(Duration::from_secs(1)).unwrap();
        let before = k.len();
        let k = durable(&ctx, stop.durable_data_end);
        assert_eq!((k[0].as_str(), k[before].as_str()), ("init 5", "init 6"));
        assert_eq!(k.len(), before + 1, "{k:?}");
        assert!(!ctx
            .start_with_initialization(StartMode::Retain, all(), 8)
            .unwrap());
        let stop = ctx.stop(Duration::from_secs(1)).unwrap();
        assert_eq!(durable(&ctx, stop.durable_data_end).len(), before + 1);
        assert!(ctx
            .start_with_initialization(StartMode::ClearEntire, all(), 7)
            .unwrap());
        let stop = ctx.stop(Duration::from_secs(1)).unwrap();
        assert_eq!(durable(&ctx, stop.durable_data_end), ["init 7"]);
    }
}

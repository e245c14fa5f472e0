//! A tiny traced program for the provider/manager tests: connects as a provider, writes
//! numbered instant events through the engine's writer API, and reports what it did.
//!
//! ```text
//! fxtrace record -o t.fxt -- target/debug/examples/provider_probe --events 1000
//! ```
//!
//! Options (all optional):
//!
//! | option | meaning |
//! |---|---|
//! | `--name NAME` | provider name (default `probe`) |
//! | `--events N` | events per thread (default 1000); with `--forever`, events before the alert |
//! | `--threads T` | writer threads (default 1) |
//! | `--pause-every K --pause-us U` | sleep U µs after every K events of a thread |
//! | `--indexed` | register the name and category as string records and each thread as a thread record (durable), and refer to them by index |
//! | `--alert-after K NAME` | raise alert NAME after K events (of thread 0) |
//! | `--forever` | after the events, keep writing until tracing stops |
//! | `--hang-after K` | after K events print `progress=K` and sleep until killed |
//! | `--exit-hook` | end with `exit(0)` without dropping the provider (the exit hook stops it) |
//! | `--wait-ms MS` | how long to wait for tracing to start (default 5000) |
//!
//! Output, on standard output, one `key=value` line each: `connected=<id> mode=<mode> pid=<pid>`
//! (or `connected=none`), then `written=<W> dropped=<D> last_seq=<S> pid=<P>` at the end, where W
//! counts events whose reservation succeeded and D those the engine refused (full buffer).
//! Each event has a `seq` argument: thread `t`'s i-th event has seq `t << 32 | i`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fxtrace::engine::{Context, Writer};
use fxtrace::provider::{Provider, ProviderState};
use fxtrace_format::{
    Arg, ArgValue, Encode, Event, EventKind, StringRecord, StringRef, ThreadRecord, ThreadRef,
};

#[derive(Debug, Clone)]
struct Options {
    name: String,
    events: u64,
    threads: u64,
    pause_every: u64,
    pause_us: u64,
    indexed: bool,
    alert: Option<(u64, String)>,
    forever: bool,
    hang_after: Option<u64>,
    exit_hook: bool,
    wait_ms: u64,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        name: "probe".into(),
        events: 1000,
        threads: 1,
        pause_every: 0,
        pause_us: 0,
        indexed: false,
        alert: None,
        forever: false,
        hang_after: None,
        exit_hook: false,
        wait_ms: 5000,
    };
    let mut args = std::env::args().skip(1);
    let num = |v: Option<String>, what: &str| -> Result<u64, String> {
        v.ok_or(format!("{what} needs a value"))?
            .parse()
            .map_err(|e| format!("{what}: {e}"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--name" => o.name = args.next().ok_or("--name needs a value")?,
            "--events" => o.events = num(args.next(), "--events")?,
            "--threads" => o.threads = num(args.next(), "--threads")?.max(1),
            "--pause-every" => o.pause_every = num(args.next(), "--pause-every")?,
            "--pause-us" => o.pause_us = num(args.next(), "--pause-us")?,
            "--indexed" => o.indexed = true,
            "--alert-after" => {
                let k = num(args.next(), "--alert-after")?;
                let name = args.next().ok_or("--alert-after needs a name")?;
                o.alert = Some((k, name));
            }
            "--forever" => o.forever = true,
            "--hang-after" => o.hang_after = Some(num(args.next(), "--hang-after")?),
            "--exit-hook" => o.exit_hook = true,
            "--wait-ms" => o.wait_ms = num(args.next(), "--wait-ms")?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// Per-thread refs: indexed (registered once in the durable buffer) or inline.
struct Refs<'a> {
    thread: ThreadRef,
    category: StringRef<'a>,
    name: StringRef<'a>,
}

fn encode_into<R: Encode>(writer: &mut Writer<'_>, record: &R, durable: bool) -> bool {
    let mut words = [0u64; 64];
    let Ok(n) = record.words() else { return false };
    if n > words.len() || record.write(&mut words[..n]).is_err() {
        return false;
    }
    let slot = if durable {
        writer.reserve_durable(n)
    } else {
        writer.reserve(n)
    };
    match slot {
        Some(mut slot) => {
            slot.payload().copy_from_slice(&words[1..n]);
            slot.commit(words[0]);
            true
        }
        None => false,
    }
}

fn register<'a>(context: &Context, o: &'a Options, pid: u64, tid: u64) -> Refs<'a> {
    let inline = Refs {
        thread: ThreadRef::Inline { pid, tid },
        category: StringRef::Inline("probe"),
        name: StringRef::Inline(&o.name),
    };
    if !o.indexed {
        return inline;
    }
    let (Some(cat), Some(name), Some(thread)) = (
        context.alloc_string_index(),
        context.alloc_string_index(),
        context.alloc_thread_index(),
    ) else {
        return inline;
    };
    let Some(mut writer) = context.acquire() else {
        return inline;
    };
    let ok = encode_into(
        &mut writer,
        &StringRecord {
            index: cat,
            value: "probe",
        },
        true,
    ) && encode_into(
        &mut writer,
        &StringRecord {
            index: name,
            value: &o.name,
        },
        true,
    ) && encode_into(
        &mut writer,
        &ThreadRecord {
            index: thread,
            pid,
            tid,
        },
        true,
    );
    if !ok {
        return inline;
    }
    Refs {
        thread: ThreadRef::Index(thread),
        category: StringRef::Index(cat),
        name: StringRef::Index(name),
    }
}

fn write_event(context: &Context, refs: &Refs<'_>, seq: u64) -> bool {
    let Some(mut writer) = context.acquire() else {
        return false;
    };
    let args = [Arg::new("seq", ArgValue::U64(seq))];
    let event = Event {
        ticks: fxtrace::clock::ticks(),
        thread: refs.thread,
        category: refs.category,
        name: refs.name,
        args: &args,
        kind: EventKind::Instant,
    };
    encode_into(&mut writer, &event, false)
}

#[derive(Default, Clone, Copy)]
struct Counts {
    written: u64,
    dropped: u64,
    last_seq: Option<u64>,
}

fn gettid() -> u64 {
    // SAFETY: gettid has no arguments and cannot fail.
    (unsafe { libc::gettid() }) as u64
}

fn run_thread(provider: &Provider, o: &Options, t: u64, stop: &AtomicBool) -> Counts {
    let context = provider.context();
    let pid = u64::from(std::process::id());
    let refs = register(context, o, pid, gettid());
    let mut c = Counts::default();
    let mut i = 0u64;
    loop {
        let more = i < o.events
            || (o.forever
                && provider.state() == ProviderState::Started
                && !stop.load(Ordering::Relaxed));
        if !more {
            break;
        }
        let seq = (t << 32) | i;
        if write_event(context, &refs, seq) {
            c.written += 1;
            c.last_seq = Some(seq);
        } else {
            c.dropped += 1;
        }
        i += 1;
        if t == 0 {
            if let Some((k, name)) = &o.alert {
                if i == *k {
                    let _ = fxtrace::alert(name);
                }
            }
            if o.hang_after == Some(i) {
                println!("progress={i} written={} dropped={}", c.written, c.dropped);
                let _ = std::io::stdout().flush();
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
        }
        if o.pause_every > 0 && i % o.pause_every == 0 {
            std::thread::sleep(Duration::from_micros(o.pause_us));
        }
    }
    c
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("provider_probe: {e}");
            return ExitCode::from(2);
        }
    };
    let provider = match Provider::connect(&o.name) {
        Ok(Some(p)) => p,
        Ok(None) => {
            println!("connected=none");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("provider_probe: {e}");
            println!("connected=error");
            return ExitCode::from(3);
        }
    };
    println!(
        "connected={} mode={} pid={}",
        provider.id(),
        provider.buffering_mode(),
        std::process::id()
    );
    let _ = std::io::stdout().flush();
    if !provider.wait_started(Duration::from_millis(o.wait_ms)) {
        eprintln!(
            "provider_probe: tracing did not start within {} ms",
            o.wait_ms
        );
    }
    let stop = AtomicBool::new(false);
    let counts: Vec<Counts> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..o.threads)
            .map(|t| {
                let (provider, o, stop) = (&provider, &o, &stop);
                s.spawn(move || run_thread(provider, o, t, stop))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let written: u64 = counts.iter().map(|c| c.written).sum();
    let dropped: u64 = counts.iter().map(|c| c.dropped).sum();
    let last_seq = counts.iter().filter_map(|c| c.last_seq).max();
    println!(
        "written={written} dropped={dropped} last_seq={} pid={}",
        last_seq.map_or("none".to_string(), |s| s.to_string()),
        std::process::id()
    );
    let _ = std::io::stdout().flush();
    if o.exit_hook {
        std::mem::forget(provider);
        std::process::exit(0);
    }
    drop(provider);
    ExitCode::SUCCESS
}

//! A small traced program: several threads write instant, duration, counter, async and flow
//! events and log records through the `fxtrace` facade.
//!
//! ```sh
//! cargo build --release --example threads
//! cargo run --release -- record -o trace.fxt -- target/release/examples/threads --threads 4 --events 1000
//! cargo run --release -- stats trace.fxt
//! ```
//!
//! Run under `fxtrace record`, it becomes a provider of the session. Run on its own (no
//! manager listening), it records into an in-process buffer and writes `threads.fxt`.
//!
//! The last line it prints is `events_written=<total>`: the number of event and log records
//! it wrote (a begin and its end count as two). With the session's dropped-record count, it
//! tells exactly how many events the archive must hold.

use std::process::ExitCode;
use std::time::Duration;

use fxtrace::buffer::header::BufferingMode;
use fxtrace::{Arg, ArgValue, Scope};

/// Event and log records each iteration of a thread writes: instant, duration begin + end,
/// counter, async begin + instant + end, flow begin + step + end, log.
const RECORDS_PER_ITERATION: u64 = 11;

struct Options {
    threads: usize,
    events: u64,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        threads: 4,
        events: 1000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = args
                .next()
                .ok_or_else(|| format!("{name} needs a number"))?;
            v.parse()
                .map_err(|_| format!("{name} takes a whole number, got '{v}'"))
        };
        match arg.as_str() {
            "--threads" => options.threads = value("--threads")?.clamp(1, 1024) as usize,
            "--events" => options.events = value("--events")?,
            "-h" | "--help" => {
                println!("usage: threads [--threads N] [--events M]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}' (see --help)")),
        }
    }
    Ok(options)
}

/// One thread's work: `events` iterations of every kind of record.
fn work(thread: u64, events: u64) -> u64 {
    let mut written = 0;
    for i in 0..events {
        let id = (thread << 32) | i;
        fxtrace::instant(
            "example",
            "tick",
            Scope::Thread,
            &[Arg::new("i", ArgValue::U64(i))],
        );
        fxtrace::duration_begin(
            "example",
            "step",
            &[Arg::new("thread", ArgValue::U64(thread))],
        );
        fxtrace::counter(
            "example",
            "progress",
            thread,
            &[Arg::new("done", ArgValue::U64(i))],
        );
        fxtrace::async_begin("example", "request", id, &[]);
        fxtrace::async_instant("example", "request", id, &[]);
        fxtrace::flow_begin("example", "handoff", id, &[]);
        fxtrace::flow_step("example", "handoff", id, &[]);
        fxtrace::flow_end("example", "handoff", id, &[]);
        fxtrace::async_end("example", "request", id, &[]);
        fxtrace::log("example", "iteration done");
        fxtrace::duration_end("example", "step", &[]);
        written += RECORDS_PER_ITERATION;
    }
    written
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("threads: {e}");
            return ExitCode::from(2);
        }
    };
    // Under `fxtrace record` the manager is listening: become a provider. Otherwise trace into
    // an in-process buffer and write the archive ourselves.
    let provider = match fxtrace::connect("threads") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("threads: cannot join the trace session ({e}); running untraced");
            None
        }
    };
    let standalone = match &provider {
        Some(p) => {
            if !p.wait_started(Duration::from_secs(5)) {
                eprintln!("threads: the trace manager did not start tracing within 5 s");
            }
            None
        }
        None => match fxtrace::standalone::start(BufferingMode::Circular, 16 << 20) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("threads: cannot start an in-process trace: {e}");
                return ExitCode::FAILURE;
            }
        },
    };

    let handles: Vec<_> = (0..options.threads as u64)
        .map(|t| {
            let events = options.events;
            std::thread::Builder::new()
                .name(format!("worker-{t}"))
                .spawn(move || work(t, events))
                .expect("spawn a worker thread")
        })
        .collect();
    let total: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("worker thread panicked"))
        .sum();

    if let Some(session) = standalone {
        match session.finish("threads.fxt") {
            Ok(report) => eprintln!("threads: wrote threads.fxt: {report}"),
            Err(e) => {
                eprintln!("threads: cannot write threads.fxt: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    // Dropping the provider stops tracing and tells the manager (STOPPED).
    drop(provider);
    println!("events_written={total}");
    ExitCode::SUCCESS
}

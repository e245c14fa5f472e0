//! `#[traced]` on a few plain functions: recursion, an early return, a `?` error path, a
//! method, arguments, and a panic that is caught (its duration still ends).
//!
//! ```text
//! cargo run --example hello_traced -- /tmp/hello.fxt
//! fxtrace dump /tmp/hello.fxt                        # the records
//! fxtrace convert --to chrome-json -o /tmp/hello.json /tmp/hello.fxt   # for ui.perfetto.dev
//! ```
//!
//! With no trace manager the example records itself through a standalone session (the one
//! call in [`start_tracing`]); it then checks its own archive and prints a summary: the
//! number of durations per function, and where the trace was written. It exits with an
//! error if a duration it expects is missing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use fxtrace::buffer::header::BufferingMode;
use fxtrace::standalone::StandaloneSession;
use fxtrace::traced;
use fxtrace_format::{DecodedRecord, Decoder};

/// Recursion: one duration per call, nested.
#[traced(args(n))]
fn fib(n: u32) -> u64 {
    if n < 2 {
        // Early return: the duration ends here too.
        return u64::from(n);
    }
    fib(n - 1) + fib(n - 2)
}

#[derive(Debug)]
struct ParseError(String);

fn lookup(key: &str) -> Result<&'static str, ParseError> {
    match key {
        "threads" => Ok("4"),
        "depth" => Ok("12"),
        _ => Err(ParseError(format!("no key {key:?}"))),
    }
}

/// A `?` error path; a string argument (written at entry).
#[traced(category = "config", args(key))]
fn setting(key: &str) -> Result<u32, ParseError> {
    let text = lookup(key)?;
    text.parse().map_err(|e| ParseError(format!("{key}: {e}")))
}

struct Cache {
    hits: u64,
}

impl Cache {
    /// A method: named `hello_traced::Cache::get`.
    #[traced(args(key))]
    fn get(&mut self, key: u64) -> Option<u64> {
        if key % 3 == 0 {
            self.hits += 1;
            Some(key * 2)
        } else {
            None
        }
    }
}

/// Panics for odd input; the caller catches it.
#[traced(args(n))]
fn fragile(n: u32) -> u32 {
    if n % 2 == 1 {
        panic!("fragile({n}) refuses odd numbers");
    }
    n / 2
}

/// Without a trace manager: a standalone session writing its own archive.
fn start_tracing() -> Result<StandaloneSession, Box<dyn std::error::Error>> {
    Ok(fxtrace::standalone::start(BufferingMode::Oneshot, 4 << 20)?)
}

fn workload() -> u64 {
    let mut total = fib(12);
    for key in ["threads", "depth", "colour"] {
        match setting(key) {
            Ok(v) => total += u64::from(v),
            Err(e) => eprintln!("setting: {}", e.0),
        }
    }
    let mut cache = Cache { hits: 0 };
    total += (0..10).filter_map(|k| cache.get(k)).sum::<u64>();
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for n in [2, 3] {
        match std::panic::catch_unwind(|| fragile(n)) {
            Ok(v) => total += u64::from(v),
            Err(_) => eprintln!("fragile({n}) panicked (caught)"),
        }
    }
    std::panic::set_hook(quiet);
    total + cache.hits
}

fn main() -> ExitCode {
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("hello_traced.fxt"));
    match run(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hello_traced: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(out: &PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    // Under `fxtrace record` (a trace manager is listening), join its session: the durations
    // go into the manager's archive, and the manager's summary reports them.
    if let Some(provider) = fxtrace::connect("hello_traced")? {
        if !provider.wait_started(std::time::Duration::from_secs(5)) {
            eprintln!("hello_traced: the trace manager did not start tracing within 5 s");
        }
        let total = workload();
        drop(provider);
        println!("result {total} (recorded by the trace manager)");
        return Ok(());
    }
    let session = start_tracing()?;
    let total = workload();
    let report = session.finish(out)?;

    let bytes = std::fs::read(out)?;
    let mut per_name = BTreeMap::<String, usize>::new();
    for record in Decoder::new(&bytes) {
        if let DecodedRecord::Event(e) = record?.record {
            *per_name.entry(e.name.into_owned()).or_default() += 1;
        }
    }
    println!("result {total}");
    for (name, n) in &per_name {
        println!("{n:>4}  {name}");
    }
    println!(
        "{} records ({} dropped) written to {}",
        report.records,
        report.stop.records_dropped,
        out.display()
    );
    // fib(12) makes 465 calls; `setting` writes a begin and an end per call (3 calls);
    // the caught panic still closed `fragile`'s duration.
    let expected = [
        ("hello_traced::fib", 465),
        ("hello_traced::setting", 6),
        ("hello_traced::Cache::get", 10),
        ("hello_traced::fragile", 2),
    ];
    for (name, count) in expected {
        let got = per_name.get(name).copied().unwrap_or(0);
        if got != count {
            return Err(format!("expected {count} events named {name}, found {got}").into());
        }
    }
    Ok(())
}

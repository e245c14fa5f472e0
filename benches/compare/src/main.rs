//! fxtrace beside its peers, in one run: every candidate (Tracy, fastrace, `tracing` with a
//! no-op layer, fxtrace's `TracingLayer`, `tracing-chrome`, fxtrace's own calls, an ideal
//! writer) in a process of its own, each 20 ms block of calls timed next to a block of
//! `rdtscp`s in the same process after a warm-up that ends when a block takes no page fault.
//! Rounds alternate the candidates' order; the table gives the median ratio to `rdtscp` over
//! the rounds, with its range, and ns per call. See `README.md` in this directory.
//!
//! ```text
//! fxtrace-compare [--rounds N] [--block-ms MS] [--pairs N] [--max-warmup N] [--only A,B,..]
//! fxtrace-compare --list
//! fxtrace-compare app [--rounds N] [--requests N] [--connections N] [--only LAYER,..]
//! ```
//!
//! `app` is the real-application bench instead (`src/app/`): a tokio server instrumented with
//! `tracing`, its CPU per request under each layer.

mod app;
mod candidates;
mod ideal;
mod machine;
mod measure;
mod table;
mod tracy_drain;
mod tsc;
mod wire;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use candidates::{Candidate, ALL};
use measure::Settings;
use table::Results;
use tracy_drain::Drain;

/// Errors of the bench.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The command line was wrong.
    #[error("{0}")]
    Usage(String),
    /// A system call failed.
    #[error("{0}: {1}")]
    Os(&'static str, #[source] std::io::Error),
    /// fxtrace's standalone session failed.
    #[error("fxtrace session: {0}")]
    Fxtrace(#[from] fxtrace::standalone::StandaloneError),
    /// The Tracy client or the drain failed.
    #[error("Tracy: {0}")]
    Tracy(String),
    /// A candidate ran but its consumer received nothing.
    #[error("nothing recorded: {0}")]
    NotRecorded(String),
    /// A candidate process failed or printed something unreadable.
    #[error("candidate process: {0}")]
    Child(String),
    /// A helper thread panicked.
    #[error("a helper thread panicked")]
    HelperPanicked,
}

/// The command line.
#[derive(Debug)]
struct Options {
    settings: Settings,
    rounds: usize,
    only: Option<Vec<String>>,
    child: Option<String>,
    list: bool,
}

const USAGE: &str = "usage: fxtrace-compare [--rounds N (6)] [--block-ms MS (20)] [--pairs N (3)] \
[--max-warmup BLOCKS (150)] [--only NAME,..] | --list";

fn parse(args: impl Iterator<Item = String>) -> Result<Options, Error> {
    let mut options = Options {
        settings: Settings {
            block: Duration::from_millis(20),
            pairs: 3,
            max_warmup: 150,
        },
        rounds: 6,
        only: None,
        child: None,
        list: false,
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| Error::Usage(format!("{name} needs a value\n{USAGE}")))
        };
        let number = |name: &str, text: String| {
            text.parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::Usage(format!("{name}: `{text}` is not a positive integer")))
        };
        match arg.as_str() {
            "--rounds" => options.rounds = number("--rounds", value("--rounds")?)? as usize,
            "--block-ms" => {
                options.settings.block =
                    Duration::from_millis(number("--block-ms", value("--block-ms")?)?)
            }
            "--pairs" => options.settings.pairs = number("--pairs", value("--pairs")?)? as usize,
            "--max-warmup" => {
                options.settings.max_warmup = number("--max-warmup", value("--max-warmup")?)? as u32
            }
            "--only" => {
                let names: Vec<String> = value("--only")?
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect();
                if let Some(bad) = names.iter().find(|n| !ALL.iter().any(|c| c.name == *n)) {
                    return Err(Error::Usage(format!(
                        "--only: unknown candidate `{bad}`: `--list` shows the names"
                    )));
                }
                options.only = Some(names);
            }
            "--child" => options.child = Some(value("--child")?),
            "--list" => options.list = true,
            "-h" | "--help" => return Err(Error::Usage(USAGE.into())),
            other => return Err(Error::Usage(format!("unknown argument `{other}`\n{USAGE}"))),
        }
    }
    Ok(options)
}

/// In a candidate process: measure, print the result line (or the error line).
fn child(name: &str, settings: &Settings) -> Result<(), Error> {
    let outcome = candidates::run(name, settings);
    let line = match &outcome {
        Ok(outcome) => wire::encode(outcome),
        Err(e) => format!("{}\t{e}", wire::ERROR_PREFIX),
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|e| Error::Os("write the result", e))?;
    outcome.map(drop)
}

/// The arguments a candidate process gets.
fn child_args(name: &str, settings: &Settings) -> Vec<String> {
    vec![
        "--child".into(),
        name.into(),
        "--block-ms".into(),
        settings.block.as_millis().to_string(),
        "--pairs".into(),
        settings.pairs.to_string(),
        "--max-warmup".into(),
        settings.max_warmup.to_string(),
    ]
}

/// Kills a candidate process that has not finished by a deadline (a hung consumer or
/// candidate must not hang the whole run); disarmed when dropped.
struct Watchdog {
    _disarm: std::sync::mpsc::Sender<()>,
}

impl Watchdog {
    fn arm(process: Arc<Mutex<Child>>, name: &'static str, limit: Duration) -> Self {
        let (disarm, armed) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if armed.recv_timeout(limit) == Err(RecvTimeoutError::Timeout) {
                eprintln!("candidate `{name}` still running after {limit:?}: killing it");
                // `Child::kill` signals only a process not yet reaped through this `Child`.
                let mut process = process.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = process.kill() {
                    eprintln!("candidate `{name}`: cannot kill it: {e}");
                }
            }
        });
        Self { _disarm: disarm }
    }
}

/// Wait for `process` to end (polling, so that the watchdog can take the lock to kill it).
fn wait(process: &Mutex<Child>) -> Result<ExitStatus, Error> {
    loop {
        let status = process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_wait()
            .map_err(|e| Error::Os("wait for a candidate process", e))?;
        if let Some(status) = status {
            return Ok(status);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How long a candidate process may take: every block at its longest, twice, plus start-up.
fn process_limit(settings: &Settings) -> Duration {
    let blocks = settings.max_warmup * 3 + settings.pairs as u32 * 4 + 20;
    settings.block * blocks * 2 + Duration::from_secs(60)
}

/// Run `candidate` once in a fresh process of this binary and read its result.
fn run_round(candidate: &Candidate, settings: &Settings) -> Result<wire::Sample, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::Os("find this executable", e))?;
    let mut command = Command::new(exe);
    command
        .args(child_args(candidate.name, settings))
        .stdout(Stdio::piped());
    let drain_port = if candidate.tracy {
        Some(tracy_drain::assign_port(&mut command)?)
    } else {
        None
    };
    let mut process = command
        .spawn()
        .map_err(|e| Error::Os("start a candidate process", e))?;
    let stdout = process
        .stdout
        .take()
        .ok_or_else(|| Error::Child("no stdout pipe".into()))?;
    let process = Arc::new(Mutex::new(process));
    let _watchdog = Watchdog::arm(process.clone(), candidate.name, process_limit(settings));
    let drain = drain_port.map(Drain::attach);
    let mut lines = BufReader::new(stdout).lines();
    let mut result = Err(Error::Child(format!(
        "`{}` exited without a result",
        candidate.name
    )));
    for line in lines.by_ref() {
        let line = line.map_err(|e| Error::Os("read a candidate's output", e))?;
        if line.starts_with(wire::PREFIX) {
            result = wire::decode(&line);
            break;
        }
        if let Some(message) = line.strip_prefix(wire::ERROR_PREFIX) {
            result = Err(Error::Child(format!(
                "`{}`: {}",
                candidate.name,
                message.trim()
            )));
            break;
        }
        eprintln!("[{}] {line}", candidate.name);
    }
    let drained = drain.map(Drain::finish).transpose();
    for line in lines {
        let line = line.map_err(|e| Error::Os("read a candidate's output", e))?;
        eprintln!("[{}] {line}", candidate.name);
    }
    let status = wait(&process)?;
    let mut sample = result?;
    if let Some(bytes) = drained? {
        if bytes == 0 {
            return Err(Error::NotRecorded(
                "the Tracy drain received nothing".into(),
            ));
        }
        sample.check = format!("{}; drain received {} MiB", sample.check, bytes >> 20);
    }
    if !status.success() {
        return Err(Error::Child(format!(
            "`{}` ended with {status}",
            candidate.name
        )));
    }
    Ok(sample)
}

fn orchestrate(options: &Options) -> Result<bool, Error> {
    let chosen: Vec<Candidate> = ALL
        .iter()
        .filter(|c| {
            options
                .only
                .as_ref()
                .is_none_or(|only| only.iter().any(|n| n == c.name))
        })
        .copied()
        .collect();
    let machine = machine::Machine::read();
    let load_before = machine::load_average();
    let started = machine::utc_now();
    let mut results = Results::default();
    for round in 0..options.rounds {
        // Alternate the order, so that a drift of the machine does not favour one end.
        let mut order = chosen.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        eprintln!(
            "round {}/{} (load {})",
            round + 1,
            options.rounds,
            machine::load_average()
        );
        for candidate in &order {
            match run_round(candidate, &options.settings) {
                Ok(sample) => {
                    eprintln!(
                        "  {:<22} {:>7.3}  {:>8.2} ns",
                        candidate.name, sample.value, sample.ns
                    );
                    results
                        .samples
                        .entry(candidate.name)
                        .or_default()
                        .push(sample);
                }
                Err(e) => {
                    eprintln!("  {:<22} FAILED: {e}", candidate.name);
                    results
                        .failures
                        .entry(candidate.name)
                        .or_default()
                        .push(e.to_string());
                }
            }
        }
    }
    let load_after = machine::load_average();
    let rdtscp = results
        .rdtscp_ns()
        .map_or_else(|| "not measured".into(), |ns| format!("{ns:.1} ns"));
    println!(
        "Run of {started}: {} CPUs, `{}`, Linux {}{}; nice {}; load average (1/5/15 min) {load_before} \
         at the start, {load_after} at the end. {} rounds, {} ms blocks, {} candidate blocks per \
         process; `rdtscp` = {rdtscp} (median over all processes); fxtrace's clock: `{}`.\n",
        machine.cpus,
        machine.cpu,
        machine.kernel,
        if machine.hypervisor { ", virtual machine" } else { "" },
        machine.nice,
        options.rounds,
        options.settings.block.as_millis(),
        options.settings.pairs,
        fxtrace::clock::TICKS_INSTRUCTION,
    );
    println!("{}", table::summary(&results));
    println!("Per candidate:\n\n{}", table::details(&chosen, &results));
    for (name, failures) in &results.failures {
        for failure in failures {
            println!("- `{name}` failed: {failure}");
        }
    }
    Ok(results.failures.is_empty())
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("app") {
        return app::main(std::env::args().skip(2));
    }
    let options = match parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("fxtrace-compare: {e}");
            return ExitCode::from(2);
        }
    };
    if options.list {
        for c in ALL {
            println!("{:<22} {}", c.name, c.what);
        }
        return ExitCode::SUCCESS;
    }
    if !tsc::has_rdtscp() {
        eprintln!(
            "fxtrace-compare: this CPU has no `rdtscp`, the unit of every row: nothing to compare"
        );
        return ExitCode::FAILURE;
    }
    let outcome = match &options.child {
        Some(name) => child(name, &options.settings).map(|()| true),
        None => orchestrate(&options),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("fxtrace-compare: some candidates failed (listed under the table)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("fxtrace-compare: {e}");
            ExitCode::FAILURE
        }
    }
}

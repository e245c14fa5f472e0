//! The real-application bench (`fxtrace-compare app`): a small tokio key-value server
//! instrumented with `tracing` ([`server`]), driven over loopback TCP by a load generator in
//! this process, once per layer, in a server process of its own. What is measured is the
//! server's CPU time (user and system, `getrusage`) per request while the load runs, so that
//! the load generator's own work (on the same 2 CPUs) is not counted. Rounds alternate the
//! layers' order; the table gives the median over the rounds, the range, and the difference
//! to the server without any subscriber and to the no-op layer.

mod server;

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::TcpStream;
use std::process::{ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::tracy_drain::{self, Drain};
use crate::{machine, Error};

/// A server's subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    /// No subscriber: every call site disabled.
    None,
    /// `tracing-subscriber`'s registry and a layer that does nothing.
    Noop,
    /// fxtrace's `TracingLayer`, a standalone session recording.
    Fxtrace,
    /// `tracing-tracy`'s layer, the bench's Tracy drain attached.
    Tracy,
    /// `tracing-chrome`'s layer, into a counting sink.
    Chrome,
}

impl Layer {
    const ALL: [Layer; 5] = [
        Layer::None,
        Layer::Noop,
        Layer::Fxtrace,
        Layer::Tracy,
        Layer::Chrome,
    ];

    fn name(self) -> &'static str {
        match self {
            Layer::None => "none",
            Layer::Noop => "noop",
            Layer::Fxtrace => "fxtrace",
            Layer::Tracy => "tracy",
            Layer::Chrome => "chrome",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Layer::None => "no subscriber",
            Layer::Noop => "`tracing` registry + a no-op layer",
            Layer::Fxtrace => "fxtrace `TracingLayer`, recording (standalone session)",
            Layer::Tracy => "`tracing-tracy` `TracyLayer` (drain attached)",
            Layer::Chrome => "`tracing-chrome`",
        }
    }

    fn from_name(name: &str) -> Result<Layer, Error> {
        Layer::ALL
            .into_iter()
            .find(|layer| layer.name() == name)
            .ok_or_else(|| Error::Usage(format!("unknown layer `{name}`\n{USAGE}")))
    }
}

const USAGE: &str = "usage: fxtrace-compare app [--rounds N (5)] [--requests N (40000)] \
[--connections N (8)] [--only LAYER,..]   (layers: none, noop, fxtrace, tracy, chrome)";

/// The command line.
#[derive(Debug)]
struct Options {
    rounds: usize,
    requests: u64,
    connections: u64,
    layers: Vec<Layer>,
    server: Option<Layer>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, Error> {
    let mut options = Options {
        rounds: 5,
        requests: 40_000,
        connections: 8,
        layers: Layer::ALL.to_vec(),
        server: None,
    };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| Error::Usage(format!("{name} needs a value\n{USAGE}")))
        };
        let number = |name: &str, text: String| {
            text.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| Error::Usage(format!("{name}: `{text}` is not a positive integer")))
        };
        match arg.as_str() {
            "--rounds" => options.rounds = number("--rounds", value("--rounds")?)? as usize,
            "--requests" => options.requests = number("--requests", value("--requests")?)?,
            "--connections" => {
                options.connections = number("--connections", value("--connections")?)?
            }
            "--only" => {
                options.layers = value("--only")?
                    .split(',')
                    .map(Layer::from_name)
                    .collect::<Result<_, _>>()?
            }
            "--server" => options.server = Some(Layer::from_name(&value("--server")?)?),
            "-h" | "--help" => return Err(Error::Usage(USAGE.into())),
            other => return Err(Error::Usage(format!("unknown argument `{other}`\n{USAGE}"))),
        }
    }
    Ok(options)
}

/// `fxtrace-compare app ARGS`.
pub(crate) fn main(args: impl Iterator<Item = String>) -> ExitCode {
    let outcome = parse(args).and_then(|options| match options.server {
        Some(layer) => server::serve(layer),
        None => orchestrate(&options),
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fxtrace-compare app: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One run of one layer.
#[derive(Debug, Clone)]
struct Run {
    /// Server CPU per request, µs.
    cpu_us: f64,
    /// Requests per second the load generator saw.
    rate: f64,
    check: String,
}

/// A server process, its control pipes.
struct Server {
    child: std::process::Child,
    input: ChildStdin,
    output: std::io::Lines<BufReader<ChildStdout>>,
    drain: Option<Drain>,
    port: u16,
}

impl Server {
    fn start(layer: Layer) -> Result<Server, Error> {
        let exe = std::env::current_exe().map_err(|e| Error::Os("find this executable", e))?;
        let mut command = Command::new(exe);
        command
            .args(["app", "--server", layer.name()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let tracy_port = if layer == Layer::Tracy {
            Some(tracy_drain::assign_port(&mut command)?)
        } else {
            None
        };
        let mut child = command
            .spawn()
            .map_err(|e| Error::Os("start a server process", e))?;
        let drain = tracy_port.map(Drain::attach);
        let input = child
            .stdin
            .take()
            .ok_or_else(|| Error::Child("no stdin".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Child("no stdout".into()))?;
        let mut server = Server {
            child,
            input,
            output: BufReader::new(stdout).lines(),
            drain,
            port: 0,
        };
        let ready = server.expect("ready")?;
        server.port = ready
            .parse()
            .map_err(|_| Error::Child(format!("bad port `{ready}`")))?;
        Ok(server)
    }

    /// The rest of the next line starting with `word `.
    fn expect(&mut self, word: &str) -> Result<String, Error> {
        for line in self.output.by_ref() {
            let line = line.map_err(|e| Error::Os("read the server", e))?;
            if let Some(rest) = line.strip_prefix(word).and_then(|r| r.strip_prefix(' ')) {
                return Ok(rest.to_owned());
            }
            eprintln!("[server] {line}");
        }
        Err(Error::Child(format!("the server ended before `{word}`")))
    }

    /// Send `command`; the CPU time and request count it answers.
    fn cpu(&mut self, command: &str) -> Result<(u64, u64), Error> {
        writeln!(self.input, "{command}").map_err(|e| Error::Os("command the server", e))?;
        let line = self.expect("cpu")?;
        let mut numbers = line.split(' ').map(str::parse::<u64>);
        match (numbers.next(), numbers.next()) {
            (Some(Ok(cpu)), Some(Ok(requests))) => Ok((cpu, requests)),
            _ => Err(Error::Child(format!("bad cpu line `{line}`"))),
        }
    }

    /// Report and end: the consumer's check.
    fn finish(mut self) -> Result<(u64, u64, String), Error> {
        let (cpu, requests) = self.cpu("report")?;
        let check = self.expect("check")?;
        let drained = self.drain.take().map(Drain::finish).transpose()?;
        let status = self
            .child
            .wait()
            .map_err(|e| Error::Os("wait for the server", e))?;
        if !status.success() {
            return Err(Error::Child(format!("the server exited with {status}")));
        }
        let check = match drained {
            Some(0) => {
                return Err(Error::NotRecorded(
                    "the Tracy drain received nothing".into(),
                ))
            }
            Some(bytes) => format!(
                "{check}; drain received {:.1} MiB",
                bytes as f64 / 1048576.0
            ),
            None => check,
        };
        Ok((cpu, requests, check))
    }
}

/// `requests` requests over `connections` connections to `port`, alternately `SET` and
/// `GET` of 100 keys, each waiting for its answer; the wall time.
fn load(port: u16, requests: u64, connections: u64) -> Result<Duration, Error> {
    let started = Instant::now();
    let threads: Vec<_> = (0..connections)
        .map(|c| {
            let share = requests / connections + u64::from(c < requests % connections);
            std::thread::spawn(move || -> Result<(), Error> {
                let stream = TcpStream::connect(("127.0.0.1", port))
                    .map_err(|e| Error::Os("connect to the server", e))?;
                stream
                    .set_nodelay(true)
                    .map_err(|e| Error::Os("set TCP_NODELAY", e))?;
                let mut reader = BufReader::new(
                    stream
                        .try_clone()
                        .map_err(|e| Error::Os("clone the stream", e))?,
                );
                let mut writer = BufWriter::new(stream);
                let mut reply = String::new();
                for i in 0..share {
                    let key = (c * 31 + i) % 100;
                    if i % 2 == 0 {
                        writeln!(writer, "SET key{key} value{i}")
                    } else {
                        writeln!(writer, "GET key{key}")
                    }
                    .and_then(|()| writer.flush())
                    .map_err(|e| Error::Os("send a request", e))?;
                    reply.clear();
                    let n = reader
                        .read_line(&mut reply)
                        .map_err(|e| Error::Os("read an answer", e))?;
                    if n == 0 {
                        return Err(Error::Child("the server closed a connection".into()));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| Error::HelperPanicked)??;
    }
    Ok(started.elapsed())
}

/// One run of `layer`: a warm-up, then the measured load.
fn run(layer: Layer, options: &Options) -> Result<Run, Error> {
    let mut server = Server::start(layer)?;
    load(server.port, options.requests / 10, options.connections)?;
    let (cpu_before, requests_before) = server.cpu("mark")?;
    let wall = load(server.port, options.requests, options.connections)?;
    let (cpu_after, requests_after, check) = server.finish()?;
    let requests = requests_after - requests_before;
    if requests != options.requests {
        return Err(Error::Child(format!(
            "{requests} requests answered of {}",
            options.requests
        )));
    }
    Ok(Run {
        cpu_us: (cpu_after - cpu_before) as f64 / requests as f64,
        rate: requests as f64 / wall.as_secs_f64(),
        check,
    })
}

/// Median, min and max of `values` (not empty).
fn summary(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    (median, sorted[0], sorted[n - 1])
}

fn orchestrate(options: &Options) -> Result<(), Error> {
    let machine = machine::Machine::read();
    let started = machine::utc_now();
    let load_before = machine::load_average();
    let mut runs: Vec<(Layer, Vec<Run>)> =
        options.layers.iter().map(|&l| (l, Vec::new())).collect();
    let mut failures = Vec::new();
    for round in 0..options.rounds {
        eprintln!(
            "round {}/{} (load {})",
            round + 1,
            options.rounds,
            machine::load_average()
        );
        let mut order: Vec<usize> = (0..runs.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let layer = runs[i].0;
            match run(layer, options) {
                Ok(r) => {
                    eprintln!(
                        "  {:<8} {:7.2} µs/request {:8.0} requests/s",
                        layer.name(),
                        r.cpu_us,
                        r.rate
                    );
                    runs[i].1.push(r);
                }
                Err(e) => {
                    eprintln!("  {:<8} FAILED: {e}", layer.name());
                    failures.push(format!("`{}`: {e}", layer.name()));
                }
            }
        }
    }
    let load_after = machine::load_average();
    let median_of = |layer: Layer| {
        runs.iter()
            .find(|(l, r)| *l == layer && !r.is_empty())
            .map(|(_, r)| summary(&r.iter().map(|r| r.cpu_us).collect::<Vec<_>>()).0)
    };
    let (none, noop) = (median_of(Layer::None), median_of(Layer::Noop));
    println!(
        "Run of {started}: {} CPUs, `{}`, Linux {}{}; nice {}; load average (1/5/15 min) \
         {load_before} at the start, {load_after} at the end. {} rounds; per run and layer a \
         server process (tokio, 2 workers), {} requests over {} loopback connections after a \
         warm-up of {}.\n",
        machine.cpus,
        machine.cpu,
        machine.kernel,
        if machine.hypervisor {
            ", virtual machine"
        } else {
            ""
        },
        machine.nice,
        options.rounds,
        options.requests,
        options.connections,
        options.requests / 10,
    );
    println!("| server's subscriber | server CPU per request (µs, median) | range | over no subscriber | over the no-op layer | requests/s (median) | consumer check |");
    println!("|---|---|---|---|---|---|---|");
    let over = |median: f64, base: Option<f64>| {
        base.map_or_else(
            || "—".into(),
            |b| {
                format!(
                    "{:+.2} µs ({:+.0} %)",
                    median - b,
                    (median / b - 1.0) * 100.0
                )
            },
        )
    };
    for (layer, runs) in &runs {
        if runs.is_empty() {
            println!("| {} | — | — | — | — | — | failed |", layer.what());
            continue;
        }
        let (median, min, max) = summary(&runs.iter().map(|r| r.cpu_us).collect::<Vec<_>>());
        let (rate, _, _) = summary(&runs.iter().map(|r| r.rate).collect::<Vec<_>>());
        println!(
            "| {} | {median:.2} | {min:.2}–{max:.2} | {} | {} | {rate:.0} | {} |",
            layer.what(),
            over(median, none),
            over(median, noop),
            runs.last().map_or("", |r| r.check.as_str()),
        );
    }
    for failure in &failures {
        println!("- {failure}");
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Child(format!(
            "{} runs failed (listed under the table)",
            failures.len()
        )))
    }
}

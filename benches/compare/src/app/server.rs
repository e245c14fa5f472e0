//! The application: a small key-value server on tokio (two worker threads, as many as the
//! machine's CPUs), instrumented with `tracing` as services are (mini-redis's way): a span
//! per connection, created when it is accepted and entered at every poll of its task
//! (`Instrument`), a span per command inside it, and an event per command. The protocol is
//! one line per request, `SET key value` (answered `OK`) or `GET key` (answered with the
//! value, or `-`).
//!
//! With `FXTRACE_APP_ARCHIVE=PATH` the fxtrace server writes its archive there.
//!
//! The process is told what to do on its standard input: `mark` prints its CPU time so far
//! (`cpu MICROSECONDS REQUESTS`); `report` prints it too, then what the layer's consumer
//! received (`check TEXT`), and exits.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

use super::Layer;
use crate::candidates::{tracy_connected, CountingSink, NoopLayer};
use crate::Error;

/// fxtrace's standalone buffer: circular, so that it never fills.
const FXTRACE_BUFFER: u64 = 64 << 20;

/// The store.
type Db = Arc<Mutex<HashMap<String, String>>>;

/// Requests answered.
/// ATOMICS: `Relaxed`: a count read by the control thread, between loads.
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// What keeps the layer's consumer going until the report, and says what it received.
enum Consumer {
    None,
    Fxtrace(fxtrace::standalone::StandaloneSession),
    Tracy(tracy_client::Client),
    Chrome(tracing_chrome::FlushGuard, Arc<AtomicU64>),
}

impl Consumer {
    /// End it: what it received, one short phrase.
    fn finish(self) -> Result<String, Error> {
        match self {
            Consumer::None => Ok("nothing recorded".into()),
            Consumer::Fxtrace(session) => {
                // FXTRACE_APP_ARCHIVE: also keep the archive (to look at it, or check it
                // with Perfetto's importer).
                let report = match std::env::var_os("FXTRACE_APP_ARCHIVE") {
                    Some(path) => session.finish(path)?,
                    None => session.finish_to_vec()?.1,
                };
                if report.records == 0 {
                    return Err(Error::NotRecorded(
                        "the fxtrace session archived no record".into(),
                    ));
                }
                Ok(format!(
                    "fxtrace: {} records in the last {} MiB (circular), {} dropped",
                    report.records,
                    FXTRACE_BUFFER >> 20,
                    report.stop.records_dropped
                ))
            }
            Consumer::Tracy(_client) => {
                if !tracy_client::Client::is_connected() {
                    return Err(Error::Tracy("the drain disconnected".into()));
                }
                Ok("Tracy: consumer connected throughout".into())
            }
            Consumer::Chrome(guard, bytes) => {
                // Flushes and joins the writer thread.
                drop(guard);
                // ATOMICS: relaxed: the writer thread was joined.
                let written = bytes.load(Ordering::Relaxed);
                if written == 0 {
                    return Err(Error::NotRecorded("tracing-chrome wrote nothing".into()));
                }
                Ok(format!("tracing-chrome: {} MiB of JSON", written >> 20))
            }
        }
    }
}

/// Install `layer` as the process's subscriber (none for [`Layer::None`]).
fn install(layer: Layer) -> Result<Consumer, Error> {
    let set = |subscriber: tracing::Dispatch| {
        tracing::dispatcher::set_global_default(subscriber)
            .map_err(|e| Error::Child(format!("set the subscriber: {e}")))
    };
    Ok(match layer {
        Layer::None => Consumer::None,
        Layer::Noop => {
            set(tracing::Dispatch::new(
                tracing_subscriber::registry().with(NoopLayer),
            ))?;
            Consumer::None
        }
        Layer::Fxtrace => {
            let session = fxtrace::standalone::start(
                fxtrace::buffer::header::BufferingMode::Circular,
                FXTRACE_BUFFER,
            )?;
            let subscriber = tracing_subscriber::registry().with(fxtrace::TracingLayer::new());
            set(tracing::Dispatch::new(subscriber))?;
            Consumer::Fxtrace(session)
        }
        Layer::Tracy => {
            let client = tracy_connected()?;
            let subscriber =
                tracing_subscriber::registry().with(tracing_tracy::TracyLayer::default());
            set(tracing::Dispatch::new(subscriber))?;
            Consumer::Tracy(client)
        }
        Layer::Chrome => {
            let bytes = Arc::new(AtomicU64::new(0));
            let (layer, guard) = tracing_chrome::ChromeLayerBuilder::new()
                .writer(CountingSink(bytes.clone()))
                .build();
            set(tracing::Dispatch::new(
                tracing_subscriber::registry().with(layer),
            ))?;
            Consumer::Chrome(guard, bytes)
        }
    })
}

/// This process's CPU time (user and system), in µs.
fn cpu_us() -> u64 {
    // SAFETY: `getrusage` writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// Print `line` on standard output, flushed.
fn say(line: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Error::Os("write to the bench", e))
}

/// Serve with `layer` until told to report.
pub(crate) fn serve(layer: Layer) -> Result<(), Error> {
    let consumer = install(layer)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .map_err(|e| Error::Os("start the tokio runtime", e))?;
    let listener = runtime
        .block_on(TcpListener::bind(("127.0.0.1", 0)))
        .map_err(|e| Error::Os("bind the server's port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::Os("read the server's port", e))?
        .port();
    runtime.spawn(accept(listener));
    say(&format!("ready {port}"))?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| Error::Os("read the bench's command", e))?;
        // ATOMICS: see `REQUESTS`.
        let cpu = format!("cpu {} {}", cpu_us(), REQUESTS.load(Ordering::Relaxed));
        say(&cpu)?;
        if line == "report" {
            runtime.shutdown_background();
            let check = consumer.finish()?;
            return say(&format!("check {check}"));
        }
    }
    Err(Error::Child("the bench closed the server's input".into()))
}

async fn accept(listener: TcpListener) {
    let db = Db::default();
    let mut next = 0u64;
    while let Ok((stream, peer)) = listener.accept().await {
        next += 1;
        let span = tracing::info_span!("connection", id = next, peer = %peer);
        tokio::spawn(connection(stream, db.clone()).instrument(span));
    }
}

/// One connection: a request per line, until the client closes it.
async fn connection(stream: TcpStream, db: Db) {
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = apply(&line, &db);
        // Counted before it is answered: once the load generator has every answer, the
        // count has every request.
        // ATOMICS: see `REQUESTS`.
        REQUESTS.fetch_add(1, Ordering::Relaxed);
        if write.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// One request, in its span, with an event.
fn apply(line: &str, db: &Db) -> String {
    let mut words = line.splitn(3, ' ');
    let (command, key) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let span = tracing::info_span!("apply", command, key);
    let _entered = span.enter();
    tracing::info!(bytes = line.len() as u64, "request");
    let mut db = db.lock().unwrap_or_else(|e| e.into_inner());
    match command {
        "SET" => {
            db.insert(key.to_owned(), words.next().unwrap_or("").to_owned());
            "OK\n".into()
        }
        "GET" => db
            .get(key)
            .map_or_else(|| "-\n".into(), |value| format!("{value}\n")),
        _ => "ERR\n".into(),
    }
}

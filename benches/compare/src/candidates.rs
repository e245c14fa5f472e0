//! The candidates: one row each, run in a process of its own (`--child NAME`), so that no
//! candidate's threads, allocations or global subscriber disturb another's.

use std::ffi::c_char;
use std::hint::black_box;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fxtrace::buffer::header::BufferingMode;
use fxtrace::Scope;
use tracing_subscriber::layer::SubscriberExt;

use crate::ideal::IdealRing;
use crate::measure::{self, Ratio, Scaling, Settings};
use crate::tsc::{rdtsc, rdtscp};
use crate::Error;

/// fxtrace's standalone buffer: circular, so that it never fills (nothing is dropped) and,
/// once it wrapped during the warm-up, the blocks take no page fault.
const FXTRACE_BUFFER: u64 = 32 << 20;
/// The ideal writer's ring.
const IDEAL_RING: usize = 32 << 20;
/// fastrace `LocalSpan`s per root span: a root collects at most 10 240 local spans (fastrace's
/// `DEFAULT_SPAN_QUEUE_SIZE`) and silently skips the rest, so each root holds this many and
/// is then submitted to the collector; its cost is part of the row (÷ this).
const FASTRACE_SPANS_PER_ROOT: u64 = 1000;
/// How long a Tracy candidate waits for the drain to connect.
const TRACY_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a candidate is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One thread, beside `rdtscp`.
    Ratio,
    /// Aggregate rate on 2 threads ÷ rate on 1.
    Scaling,
}

/// A candidate process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    /// Id on the command line (`--child NAME`, `--only NAME,..`).
    pub(crate) name: &'static str,
    /// What one call is.
    pub(crate) what: &'static str,
    /// How it is measured.
    pub(crate) kind: Kind,
    /// Whether the parent attaches a Tracy drain to the process.
    pub(crate) tracy: bool,
}

const fn ratio(name: &'static str, what: &'static str) -> Candidate {
    Candidate {
        name,
        what,
        kind: Kind::Ratio,
        tracy: false,
    }
}

/// Every candidate, in the order of the table.
pub(crate) const ALL: &[Candidate] = &[
    ratio("rdtsc", "`_rdtsc()`"),
    ratio(
        "rdtscp_pair",
        "two `rdtscp` (the floor of a span with two timestamps)",
    ),
    ratio(
        "ideal",
        "ideal writer: rdtscp + fetch_add + 3 stores, pre-faulted ring",
    ),
    ratio(
        "ideal_span",
        "ideal span: two rdtscp + fetch_add + 3 stores, pre-faulted ring",
    ),
    Candidate {
        name: "tracy_zone",
        what: "Tracy zone, `tracy_client::span!` (drain attached)",
        kind: Kind::Ratio,
        tracy: true,
    },
    ratio("fastrace_local_span", "fastrace `LocalSpan` (reporter set)"),
    ratio("fx_instant", "fxtrace `instant` (0 args, static strings)"),
    ratio(
        "fx_c_instant_static",
        "fxtrace C API `fxtrace_instant_static`, through the C ABI",
    ),
    ratio("fx_duration", "fxtrace `duration` guard"),
    ratio("fx_traced", "fxtrace `#[traced]` call"),
    ratio("fx_traced_args", "fxtrace `#[traced]` with `args(a, b)`"),
    ratio("noop_layer_span", "`tracing` registry + no-op layer, span"),
    ratio(
        "noop_layer_event",
        "`tracing` registry + no-op layer, event",
    ),
    ratio(
        "floor_layer_span",
        "`tracing` registry + the least a recording layer does, span",
    ),
    ratio(
        "floor_layer_event",
        "`tracing` registry + the least a recording layer does, event",
    ),
    ratio("fx_layer_span", "fxtrace `TracingLayer`, span"),
    ratio("fx_layer_event", "fxtrace `TracingLayer`, event"),
    Candidate {
        name: "tracy_layer_span",
        what: "`tracing-tracy` `TracyLayer`, span (drain attached)",
        kind: Kind::Ratio,
        tracy: true,
    },
    Candidate {
        name: "tracy_layer_event",
        what: "`tracing-tracy` `TracyLayer`, event (drain attached)",
        kind: Kind::Ratio,
        tracy: true,
    },
    ratio("chrome_span", "`tracing-chrome`, span"),
    ratio("chrome_event", "`tracing-chrome`, event"),
    ratio("empty_loop", "the empty loop"),
    ratio(
        "fx_disabled",
        "fxtrace `instant`, no session (disabled call site)",
    ),
    ratio("plain_fn", "the plain function"),
    ratio("fx_traced_disabled", "`#[traced]` function, no session"),
    Candidate {
        name: "fx_instant_2threads",
        what: "fxtrace `instant`, 2 threads / 1 thread aggregate",
        kind: Kind::Scaling,
        tracy: false,
    },
    Candidate {
        name: "ideal_2threads",
        what: "ideal writer, 2 threads / 1 thread aggregate",
        kind: Kind::Scaling,
        tracy: false,
    },
];

/// What a candidate process reports.
#[derive(Debug, Clone)]
pub(crate) enum Measured {
    /// A single-thread candidate.
    Ratio(Ratio),
    /// A 2-thread candidate.
    Scaling(Scaling),
}

/// A measurement and what shows the candidate really recorded (records written, bytes
/// shipped), or why there is nothing to check.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    /// The numbers.
    pub(crate) measured: Measured,
    /// The consumer check, one short phrase.
    pub(crate) check: String,
}

#[inline(never)]
fn plain(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_mul(black_box(b))
}

#[fxtrace::traced(category = "bench")]
#[inline(never)]
fn traced_plain(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_mul(black_box(b))
}

#[fxtrace::traced(category = "bench", args(a, b))]
#[inline(never)]
fn traced_args(a: u64, b: u64) -> u64 {
    black_box(a).wrapping_mul(black_box(b))
}

/// A `tracing-subscriber` layer that does nothing: the registry's own cost, with the
/// registry freeing closed spans (a bare `registry()` keeps them: tokio-rs/tracing#900).
pub(crate) struct NoopLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoopLayer {}

/// The least any layer that records spans and events must do, and nothing more: the floor
/// under every recording layer's cost (issue 11's `TracingLayer` targets are measured against
/// it). A span's enter and exit each read fxtrace's clock (`rdtscp`, or `rdtsc` in a
/// `--rdtsc` build); an event reads it once. Fields are visited, scalars taken and `Debug` fields (an event's
/// message) formatted into a reused per-thread string. Nothing is kept per span and nothing
/// is written: no record, no lookup of the span, no extension.
struct FloorLayer;

thread_local! {
    /// Clock reads of the entered spans, innermost last.
    static FLOOR_ENTERED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The formatted `Debug` fields of the call being recorded.
    static FLOOR_TEXT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Takes each field as a recording layer must: scalars read, `Debug` fields formatted.
struct FloorVisitor<'t>(&'t mut String);

impl tracing::field::Visit for FloorVisitor<'_> {
    fn record_u64(&mut self, _field: &tracing::field::Field, value: u64) {
        black_box(value);
    }

    fn record_i64(&mut self, _field: &tracing::field::Field, value: i64) {
        black_box(value);
    }

    fn record_f64(&mut self, _field: &tracing::field::Field, value: f64) {
        black_box(value);
    }

    fn record_bool(&mut self, _field: &tracing::field::Field, value: bool) {
        black_box(value);
    }

    fn record_str(&mut self, _field: &tracing::field::Field, value: &str) {
        self.0.push_str(value);
    }

    fn record_debug(&mut self, _field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let _ = write!(self.0, "{value:?}");
    }
}

/// Visit `record`'s fields into the thread's text (cleared first).
fn floor_visit(record: impl FnOnce(&mut FloorVisitor<'_>)) {
    FLOOR_TEXT.with_borrow_mut(|text| {
        text.clear();
        record(&mut FloorVisitor(text));
        black_box(text.len());
    });
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for FloorLayer {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        floor_visit(|visitor| attrs.record(visitor));
    }

    fn on_enter(&self, _id: &tracing::span::Id, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        let start = fxtrace::clock::ticks();
        FLOOR_ENTERED.with_borrow_mut(|entered| entered.push(start));
    }

    fn on_exit(&self, _id: &tracing::span::Id, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        let end = fxtrace::clock::ticks();
        let start = FLOOR_ENTERED.with_borrow_mut(|entered| entered.pop());
        black_box((start, end));
    }

    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        black_box(fxtrace::clock::ticks());
        floor_visit(|visitor| event.record(visitor));
    }
}

/// A `tracing` span (`name` ends with `span`) or event per call, through the subscriber set
/// as this thread's default.
fn tracing_call(name: &str, settings: &Settings) -> Result<Ratio, Error> {
    if name.ends_with("span") {
        measure::ratio(settings, 1, tracing_span)
    } else {
        measure::ratio(settings, 1, tracing_event)
    }
}

fn tracing_span() {
    tracing::info_span!("bench_span", n = 7u64).in_scope(|| black_box(1));
}

fn tracing_event() {
    tracing::info!(n = 7u64, "bench event");
}

/// A writer that counts and discards (tracing-chrome's output).
#[derive(Clone)]
pub(crate) struct CountingSink(pub(crate) Arc<AtomicU64>);

impl Write for CountingSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        // ATOMICS: relaxed: a counter read after the writer thread was flushed and joined.
        self.0.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A fastrace reporter that counts the spans it is given and drops them.
struct CountingReporter(Arc<AtomicU64>);

impl fastrace::collector::Reporter for CountingReporter {
    fn report(&mut self, spans: Vec<fastrace::collector::SpanRecord>) {
        // ATOMICS: relaxed: a counter read after `fastrace::flush`.
        self.0.fetch_add(spans.len() as u64, Ordering::Relaxed);
    }
}

/// Run `f` inside a standalone circular fxtrace session; the check is the finish report.
fn in_fxtrace_session(f: impl FnOnce() -> Result<Measured, Error>) -> Result<Outcome, Error> {
    let session = fxtrace::standalone::start(BufferingMode::Circular, FXTRACE_BUFFER)?;
    let measured = f()?;
    let (_, report) = session.finish_to_vec()?;
    if report.records == 0 {
        return Err(Error::NotRecorded(
            "the fxtrace session archived no record".into(),
        ));
    }
    Ok(Outcome {
        measured,
        check: format!(
            "fxtrace: {} records in the last {} MiB (circular), {} dropped",
            report.records,
            FXTRACE_BUFFER >> 20,
            report.stop.records_dropped
        ),
    })
}

fn no_consumer(measured: Measured, why: &str) -> Outcome {
    Outcome {
        measured,
        check: why.to_string(),
    }
}

/// Run candidate `name` in this process.
pub(crate) fn run(name: &str, settings: &Settings) -> Result<Outcome, Error> {
    // Generic, so that each candidate's call is inlined into its own timing loop.
    fn one<R>(settings: &Settings, op: impl FnMut() -> R) -> Result<Measured, Error> {
        measure::ratio(settings, 1, op).map(Measured::Ratio)
    }
    match name {
        "rdtsc" => Ok(no_consumer(one(settings, rdtsc)?, "clock read")),
        "rdtscp_pair" => Ok(no_consumer(
            one(settings, || {
                black_box(rdtscp()).wrapping_add(black_box(rdtscp()))
            })?,
            "clock reads",
        )),
        "ideal" => {
            let ring = IdealRing::new(IDEAL_RING);
            let measured = one(settings, || ring.write(0x0004_0000_0003_0024, 7))?;
            Ok(no_consumer(
                measured,
                &format!("{} words written", ring.written_words()),
            ))
        }
        "ideal_span" => {
            let ring = IdealRing::new(IDEAL_RING);
            let measured = one(settings, || ring.write_span(0x0004_0000_0003_0034))?;
            Ok(no_consumer(
                measured,
                &format!("{} words written", ring.written_words()),
            ))
        }
        "ideal_2threads" => {
            let ring = IdealRing::new(IDEAL_RING);
            let measured = measure::scaling(settings, || ring.write(0x0004_0000_0003_0024, 7))?;
            Ok(no_consumer(
                Measured::Scaling(measured),
                &format!("{} words written", ring.written_words()),
            ))
        }
        "tracy_zone" => tracy_zone(settings),
        "fastrace_local_span" => fastrace_local_span(settings),
        "fx_instant" => in_fxtrace_session(|| {
            one(settings, || {
                fxtrace::instant("bench", "instant", Scope::Thread, &[])
            })
        }),
        "fx_c_instant_static" => {
            // Called as a C program calls the shared object: through a function pointer the
            // compiler cannot see through (no inlining across the C ABI), with the addresses
            // of two literals.
            let call: unsafe extern "C" fn(*const c_char, *const c_char) =
                black_box(fxtrace::c_api::fxtrace_instant_static);
            in_fxtrace_session(|| {
                one(settings, || {
                    // SAFETY: two C string literals: NUL-terminated, unchanged at the same
                    // address until the process exits (the `_static` contract).
                    unsafe { call(c"bench".as_ptr(), c"instant".as_ptr()) }
                })
            })
        }
        "fx_duration" => in_fxtrace_session(|| {
            one(settings, || {
                let _span = fxtrace::duration("bench", "duration");
            })
        }),
        "fx_traced" => {
            in_fxtrace_session(|| one(settings, || traced_plain(black_box(3), black_box(5))))
        }
        "fx_traced_args" => {
            in_fxtrace_session(|| one(settings, || traced_args(black_box(3), black_box(5))))
        }
        "fx_instant_2threads" => in_fxtrace_session(|| {
            measure::scaling(settings, || {
                fxtrace::instant("bench", "instant", Scope::Thread, &[])
            })
            .map(Measured::Scaling)
        }),
        "noop_layer_span" | "noop_layer_event" => {
            let _default =
                tracing::subscriber::set_default(tracing_subscriber::registry().with(NoopLayer));
            Ok(no_consumer(
                Measured::Ratio(tracing_call(name, settings)?),
                "no-op layer: nothing recorded",
            ))
        }
        "floor_layer_span" | "floor_layer_event" => {
            let _default =
                tracing::subscriber::set_default(tracing_subscriber::registry().with(FloorLayer));
            Ok(no_consumer(
                Measured::Ratio(tracing_call(name, settings)?),
                "floor layer: clock read, fields visited, nothing written",
            ))
        }
        "fx_layer_span" | "fx_layer_event" => {
            let subscriber = tracing_subscriber::registry().with(fxtrace::TracingLayer::new());
            let _default = tracing::subscriber::set_default(subscriber);
            in_fxtrace_session(|| tracing_call(name, settings).map(Measured::Ratio))
        }
        "tracy_layer_span" | "tracy_layer_event" => tracing_tracy(name, settings),
        "chrome_span" | "chrome_event" => tracing_chrome(name, settings),
        "empty_loop" => Ok(no_consumer(one(settings, || ())?, "no session")),
        "fx_disabled" => Ok(no_consumer(
            one(settings, || {
                fxtrace::instant("bench", "instant", Scope::Thread, &[])
            })?,
            "no session",
        )),
        "plain_fn" => Ok(no_consumer(
            one(settings, || plain(black_box(3), black_box(5)))?,
            "no session",
        )),
        "fx_traced_disabled" => Ok(no_consumer(
            one(settings, || traced_plain(black_box(3), black_box(5)))?,
            "no session",
        )),
        other => Err(Error::Usage(format!(
            "unknown candidate `{other}`: `--list` shows the names"
        ))),
    }
}

/// Start Tracy's client and wait for the parent's drain to connect.
pub(crate) fn tracy_connected() -> Result<tracy_client::Client, Error> {
    let client = tracy_client::Client::start();
    let deadline = Instant::now() + TRACY_CONNECT_TIMEOUT;
    while !tracy_client::Client::is_connected() {
        if Instant::now() >= deadline {
            return Err(Error::Tracy(format!(
                "no consumer connected within {TRACY_CONNECT_TIMEOUT:?}: run this candidate \
                 through the bench (it attaches a drain), not alone"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(client)
}

/// The outcome of a Tracy candidate, once the drain is checked to be still connected.
fn tracy_outcome(measured: Ratio) -> Result<Outcome, Error> {
    if !tracy_client::Client::is_connected() {
        return Err(Error::Tracy(
            "the drain disconnected during the measurement".into(),
        ));
    }
    Ok(Outcome {
        measured: Measured::Ratio(measured),
        check: "Tracy: consumer connected throughout".into(),
    })
}

/// A Tracy zone per call, with the parent's drain attached before the first block.
fn tracy_zone(settings: &Settings) -> Result<Outcome, Error> {
    let _client = tracy_connected()?;
    let measured = measure::ratio(settings, 1, || {
        let _zone = tracy_client::span!("zone");
    })?;
    tracy_outcome(measured)
}

/// `tracing-tracy`'s layer (its default configuration: fields formatted into the zone's
/// text), with the parent's drain attached before the first block.
fn tracing_tracy(name: &str, settings: &Settings) -> Result<Outcome, Error> {
    let _client = tracy_connected()?;
    let subscriber = tracing_subscriber::registry().with(tracing_tracy::TracyLayer::default());
    let _default = tracing::subscriber::set_default(subscriber);
    tracy_outcome(tracing_call(name, settings)?)
}

/// fastrace `LocalSpan`s under a root span of [`FASTRACE_SPANS_PER_ROOT`] spans each.
fn fastrace_local_span(settings: &Settings) -> Result<Outcome, Error> {
    use fastrace::prelude::{LocalSpan, Span, SpanContext};

    let reported = Arc::new(AtomicU64::new(0));
    fastrace::set_reporter(
        CountingReporter(reported.clone()),
        fastrace::collector::Config::default(),
    );
    let measured = measure::ratio(settings, FASTRACE_SPANS_PER_ROOT, || {
        let root = Span::root("root", SpanContext::random());
        let _parent = root.set_local_parent();
        for _ in 0..FASTRACE_SPANS_PER_ROOT {
            let span = LocalSpan::enter_with_local_parent("local");
            black_box(&span);
        }
    })?;
    fastrace::flush();
    // ATOMICS: relaxed: `flush` returned after the reporter ran.
    let spans = reported.load(Ordering::Relaxed);
    if spans == 0 {
        return Err(Error::NotRecorded(
            "the fastrace reporter received no span".into(),
        ));
    }
    Ok(Outcome {
        measured: Measured::Ratio(measured),
        check: format!("fastrace: {spans} spans reported"),
    })
}

/// `tracing-chrome`'s layer writing into a counting sink (its writer thread formats the JSON).
fn tracing_chrome(name: &str, settings: &Settings) -> Result<Outcome, Error> {
    let bytes = Arc::new(AtomicU64::new(0));
    let (layer, guard) = tracing_chrome::ChromeLayerBuilder::new()
        .writer(CountingSink(bytes.clone()))
        .build();
    let subscriber = tracing_subscriber::registry().with(layer);
    let default = tracing::subscriber::set_default(subscriber);
    let measured = tracing_call(name, settings)?;
    drop(default);
    // Dropping the guard flushes and joins the writer thread.
    drop(guard);
    // ATOMICS: relaxed: the writer thread was joined.
    let written = bytes.load(Ordering::Relaxed);
    if written == 0 {
        return Err(Error::NotRecorded("tracing-chrome wrote nothing".into()));
    }
    Ok(Outcome {
        measured: Measured::Ratio(measured),
        check: format!("tracing-chrome: {} MiB of JSON", written >> 20),
    })
}

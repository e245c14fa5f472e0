//! A long-running service traced by the trace service (`fxtrace daemon`): it registers at
//! start (or when the service appears), stays idle at the cost of a disabled call site, and
//! is traced whenever someone runs `fxtrace start`.
//!
//! ```text
//! fxtrace daemon &                              # the trace service
//! cargo run --example service -- 60 &           # a service that runs for 60 s
//! fxtrace providers                             # it is registered, idle
//! fxtrace start --duration 2 -o now.fxt         # trace it for 2 s
//! fxtrace stats now.fxt
//! ```
//!
//! Every 10 ms it handles a "request": a `#[traced]` function and an instant event with the
//! request's number. With `FXTRACE_SERVICE_TRACING=1` it also installs
//! [`fxtrace::TracingLayer`] and handles every request inside one long-lived `tracing` span,
//! `connection`, created at start (before any trace: a trace started later records its
//! entries, see the layer's documentation). It runs for the seconds given as its argument (default: until killed),
//! then prints how many requests it handled and where its registration stood. With
//! `FXTRACE_MEASURE_IDLE=1` it first measures what a call site costs while it is registered
//! and idle (`scripts/bench-service.sh`).

use std::time::{Duration, Instant};

use fxtrace::traced;

/// One request: traced, with its number as an argument.
#[traced(category = "service", args(n))]
fn handle(n: u64) -> u64 {
    fxtrace::instant(
        "service",
        "request",
        fxtrace::Scope::Thread,
        &[fxtrace::Arg::new("n", fxtrace::ArgValue::U64(n))],
    );
    (0..200).fold(n, |a, b| a.wrapping_mul(31).wrapping_add(b))
}

fn main() {
    let seconds: Option<f64> = std::env::args().nth(1).and_then(|s| s.parse().ok());
    // FXTRACE_SERVICE_NAME: run as a differently named service (tests run several).
    let name = std::env::var("FXTRACE_SERVICE_NAME").unwrap_or_else(|_| "service-example".into());
    match fxtrace::connect(&name) {
        Ok(Some(_)) => eprintln!("service: under fxtrace record"),
        Ok(None) => {}
        Err(e) => eprintln!("service: not traced: {e}"),
    }
    if std::env::var_os("FXTRACE_MEASURE_IDLE").is_some() {
        measure_idle();
    }
    let connection = std::env::var_os("FXTRACE_SERVICE_TRACING").map(|_| {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(fxtrace::TracingLayer::new());
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        tracing::info_span!(target: "service", "connection", peer = 1u64)
    });
    let end = seconds.map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut n = 0u64;
    let mut sum = 0u64;
    while end.map_or(true, |e| Instant::now() < e) {
        let handled = match &connection {
            Some(connection) => connection.in_scope(|| handle(n)),
            None => handle(n),
        };
        sum = sum.wrapping_add(handled);
        n += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "service: {n} requests (checksum {sum:x}); registration: {:?}",
        fxtrace::provider::service_status().map(|s| s.state)
    );
}

/// ns per call of an `instant` call site while no session traces the process, beside an
/// empty loop, median of 5 alternating rounds of 20 M calls.
fn measure_idle() {
    const CALLS: u64 = 20_000_000;
    let round = |traced: bool| {
        let t = Instant::now();
        for i in 0..CALLS {
            if traced {
                fxtrace::instant("service", "idle", fxtrace::Scope::Thread, &[]);
            }
            std::hint::black_box(i);
        }
        t.elapsed().as_nanos() as f64 / CALLS as f64
    };
    let (mut site, mut empty) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        site.push(round(true));
        empty.push(round(false));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    eprintln!(
        "idle call site: {:.2} ns per call, empty loop {:.2} ns (registration: {:?})",
        median(&mut site),
        median(&mut empty),
        fxtrace::provider::service_status().map(|s| s.state)
    );
}

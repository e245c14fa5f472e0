//! Time from `Provider::connect` to the first event written, in fresh processes, with and
//! without the manager's clock rate (`ProviderOptions::accept_manager_clock`).
//!
//! The bench runs an in-process manager (oneshot, 1 MiB, session started before anyone
//! connects) and spawns itself as a child `RUNS` times per variant, alternating; each child
//! connects, installs its context, waits for STARTED, writes one `fxtrace::instant` and
//! prints its three times (connect returned, started, first event written). Without the
//! hand-off the start (the initialization record) determines the clock itself: on a machine
//! whose CPUID does not give the TSC rate that is a ~30 ms measurement.
//!
//! ```text
//! cargo bench --bench connect            # FXTRACE_CONNECT_RUNS=N (default 20)
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

use fxtrace::protocol::control::BufferingMode;
use fxtrace::provider::{Provider, ProviderOptions};
use fxtrace_tools::manager::{Manager, ManagerConfig, SessionConfig};

const CHILD_ENV: &str = "FXTRACE_CONNECT_BENCH_CHILD";

fn child(accept_manager_clock: bool) {
    let t0 = Instant::now();
    let options = ProviderOptions {
        accept_manager_clock,
        exit_hook: false,
        ..ProviderOptions::default()
    };
    let provider = Provider::connect_with("connect-bench", &options)
        .expect("connect")
        .expect("a manager listens");
    provider.install_global().expect("install");
    let connected = t0.elapsed();
    assert!(provider.wait_started(Duration::from_secs(5)), "no start");
    let started = t0.elapsed();
    fxtrace::instant("bench", "first", fxtrace::Scope::Thread, &[]);
    let first = t0.elapsed();
    assert_eq!(provider.context().records_dropped(), 0);
    println!(
        "{} {} {} {:?}",
        connected.as_nanos(),
        started.as_nanos(),
        first.as_nanos(),
        fxtrace::clock::info().source
    );
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if let Ok(mode) = std::env::var(CHILD_ENV) {
        child(mode == "handoff");
        return;
    }
    // `cargo bench` passes `--bench`; any filter argument that does not name us skips.
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && !"connect".contains(a.as_str()))
    {
        return;
    }
    let runs: usize = std::env::var("FXTRACE_CONNECT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("m.sock");
    let config = ManagerConfig {
        session: SessionConfig {
            buffering_mode: BufferingMode::Oneshot,
            buffer_size_bytes: 1 << 20,
            ..SessionConfig::default()
        },
        ..ManagerConfig::new(&socket)
    };
    let mut manager = Manager::new(config, Box::new(std::io::sink())).expect("manager");
    manager.start(None).expect("start");
    let exe = std::env::current_exe().expect("current_exe");
    let spawner = std::thread::spawn(move || {
        let mut lines: Vec<(&'static str, String)> = Vec::new();
        for _ in 0..runs {
            for mode in ["handoff", "local"] {
                let out = Command::new(&exe)
                    .env(CHILD_ENV, mode)
                    .env("FXTRACE_SOCKET", &socket)
                    .output()
                    .expect("spawn child");
                assert!(out.status.success(), "child failed: {out:?}");
                lines.push((mode, String::from_utf8_lossy(&out.stdout).trim().to_owned()));
            }
        }
        lines
    });
    while !spawner.is_finished() {
        manager
            .poll(&[], Some(Duration::from_millis(20)))
            .expect("poll");
    }
    let lines = spawner.join().expect("spawner");
    println!(
        "connect → first event, {runs} fresh processes per variant (median, ms; clock source):"
    );
    for mode in ["handoff", "local"] {
        let mut times: [Vec<f64>; 3] = Default::default();
        let mut source = String::new();
        for (_, line) in lines.iter().filter(|(m, _)| *m == mode) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            for (i, t) in times.iter_mut().enumerate() {
                t.push(fields[i].parse::<f64>().expect("ns") / 1e6);
            }
            source = fields[3].to_owned();
        }
        let [mut connected, mut started, mut first] = times;
        let worst = first.iter().copied().fold(0.0, f64::max);
        println!(
            "connect/{mode:8} connected {:7.3}  started {:7.3}  first event {:7.3}  (max {:7.3}; {source})",
            median(&mut connected),
            median(&mut started),
            median(&mut first),
            worst,
        );
    }
}

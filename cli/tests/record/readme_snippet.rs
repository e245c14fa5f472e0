//! The README's "Instrumenting a program" snippet, as written (with the `tracing` layer), run
//! as a traced command under a manager whose session is already tracing: every record it
//! writes is in the archive (before: `connect` returned before the start, and 0–12 of 36
//! records were kept with `dropped 0`).
//!
//! The command is this test binary re-executed to run the ignored `readme_child`.

use std::process::Command;
use std::time::Duration;

use fxtrace_format::{DecodedRecord, Decoder};
use fxtrace_tools::manager::{Manager, ManagerConfig, ManagerEvent};

/// Snippet rounds; each writes 3 records (instant, duration, tracing event).
const ROUNDS: usize = 12;
const CHILD_ENV: &str = "FXTRACE_README_CHILD";

/// The README snippet, then the same calls again (one round per loop turn).
fn snippet() -> Result<(), Box<dyn std::error::Error>> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::registry()
        .with(fxtrace::TracingLayer::new())
        .init();
    let _provider = fxtrace::connect("my-service")?; // joins `fxtrace record`, or the trace service
    for _ in 0..ROUNDS {
        fxtrace::instant(
            "net",
            "accept",
            fxtrace::Scope::Thread,
            &[fxtrace::Arg::new("fd", fxtrace::ArgValue::I32(7))],
        );
        let _span = fxtrace::duration("db", "query"); // one duration-complete record on drop
        tracing::info!(target: "app", answer = 42, "hello");
    }
    Ok(())
}

#[test]
#[ignore = "helper: runs as the traced command of readme_snippet_keeps_every_record"]
fn readme_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        println!("skipped: only meaningful as the child of readme_snippet_keeps_every_record");
        return;
    }
    snippet().expect("snippet");
}

#[test]
fn readme_snippet_keeps_every_record() {
    for run in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("m.sock");
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut m = Manager::new(
            ManagerConfig::new(&socket),
            Box::new(SharedVec(out.clone())),
        )
        .unwrap();
        m.start(None).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "readme_snippet::readme_child",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_ENV, "1")
            .env(fxtrace::protocol::transport::SOCKET_ENV, &socket)
            .spawn()
            .unwrap();
        let mut events = Vec::new();
        let status = loop {
            events.extend(m.poll(&[], Some(Duration::from_millis(10))).unwrap().events);
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
        };
        assert!(status.success());
        m.stop(true).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !events
            .iter()
            .any(|e| matches!(e, ManagerEvent::StopAcknowledged { .. }))
        {
            assert!(std::time::Instant::now() < until, "{events:#?}");
            events.extend(m.poll(&[], Some(Duration::from_millis(10))).unwrap().events);
        }
        let reports = m.reports();
        m.finish().unwrap();
        let bytes = out.lock().unwrap().clone();
        let mut kept = 0;
        for d in Decoder::new(&bytes) {
            if let DecodedRecord::Event(e) = d.unwrap().record {
                if ["net", "db", "app"].contains(&&*e.category) {
                    kept += 1;
                }
            }
        }
        let report = &reports[0];
        println!(
            "run {run}: kept {kept} of {} records, dropped {}",
            3 * ROUNDS,
            report.records_dropped
        );
        assert_eq!(kept, 3 * ROUNDS, "run {run}: {report:?}");
        assert!(report.lost.is_none(), "run {run}: {report:?}");
    }
}

/// An archive output shared with the test.
struct SharedVec(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedVec {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

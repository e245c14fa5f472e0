//! Shared helpers of the `#[traced]` tests: run code under a standalone session, decode the
//! archive, and look at its events in order.

#![allow(dead_code)] // each test file uses a part

use std::sync::{Mutex, MutexGuard};

use fxtrace::buffer::header::BufferingMode;
use fxtrace::engine::CategoryFilter;
use fxtrace::standalone::{self, StandaloneConfig};
use fxtrace_format::{DecodedEventKind, DecodedRecord, DecodedValue, Decoder};

/// One current context per process: every test takes this.
static SERIAL: Mutex<()> = Mutex::new(());

pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// An event of the archive, owned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ev {
    pub(crate) kind: DecodedEventKind,
    pub(crate) category: String,
    pub(crate) name: String,
    pub(crate) start: u64,
    pub(crate) tid: u64,
    pub(crate) args: Vec<(String, DecodedValue<'static>)>,
}

impl Ev {
    /// End ticks of a duration-complete event.
    pub(crate) fn end(&self) -> u64 {
        match self.kind {
            DecodedEventKind::DurationComplete { end } => end.ticks,
            ref other => panic!("not a complete duration: {other:?}"),
        }
    }

    pub(crate) fn is_complete(&self) -> bool {
        matches!(self.kind, DecodedEventKind::DurationComplete { .. })
    }

    pub(crate) fn arg(&self, name: &str) -> Option<&DecodedValue<'static>> {
        self.args.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Whether `[start, end]` of `self` lies inside that of `outer`.
    pub(crate) fn inside(&self, outer: &Ev) -> bool {
        outer.start <= self.start && self.end() <= outer.end()
    }
}

/// Run `f` under a standalone oneshot session with `categories` (empty = all) and return
/// the events of the archive, in archive order, with nothing dropped.
pub(crate) fn trace_with<R>(categories: &[&str], f: impl FnOnce() -> R) -> (R, Vec<Ev>) {
    let mut config = StandaloneConfig::new(BufferingMode::Oneshot, 1 << 20);
    config.categories = CategoryFilter::new(categories.iter().copied());
    let session = standalone::start_with(config).expect("standalone session");
    let out = f();
    let (bytes, report) = session.finish_to_vec().expect("finish");
    assert_eq!(report.stop.records_dropped, 0);
    (out, decode_events(&bytes))
}

/// [`trace_with`] with every category enabled.
pub(crate) fn trace<R>(f: impl FnOnce() -> R) -> (R, Vec<Ev>) {
    trace_with(&[], f)
}

/// The events of an archive.
pub(crate) fn decode_events(bytes: &[u8]) -> Vec<Ev> {
    Decoder::new(bytes)
        .map(|r| r.expect("the archive decodes"))
        .filter_map(|d| match d.record {
            DecodedRecord::Event(e) => Some(Ev {
                kind: e.kind,
                category: e.category.into_owned(),
                name: e.name.into_owned(),
                start: e.time.ticks,
                tid: e.thread.tid,
                args: e
                    .args
                    .into_iter()
                    .map(|a| (a.name.into_owned(), owned(a.value)))
                    .collect(),
            }),
            _ => None,
        })
        .collect()
}

fn owned(value: DecodedValue<'_>) -> DecodedValue<'static> {
    match value {
        DecodedValue::Str(s) => DecodedValue::Str(s.into_owned().into()),
        DecodedValue::Null => DecodedValue::Null,
        DecodedValue::I32(v) => DecodedValue::I32(v),
        DecodedValue::U32(v) => DecodedValue::U32(v),
        DecodedValue::I64(v) => DecodedValue::I64(v),
        DecodedValue::U64(v) => DecodedValue::U64(v),
        DecodedValue::F64(v) => DecodedValue::F64(v),
        DecodedValue::Pointer(v) => DecodedValue::Pointer(v),
        DecodedValue::Koid(v) => DecodedValue::Koid(v),
        DecodedValue::Bool(v) => DecodedValue::Bool(v),
        other => panic!("unexpected argument value {other:?}"),
    }
}

/// Names of the events, in order.
pub(crate) fn names(events: &[Ev]) -> Vec<&str> {
    events.iter().map(|e| e.name.as_str()).collect()
}

/// The calling thread's kernel id.
pub(crate) fn gettid() -> u64 {
    // SAFETY: `gettid` has no preconditions.
    unsafe { libc::gettid() as u64 }
}

pub(crate) fn str_value(s: &str) -> DecodedValue<'static> {
    DecodedValue::Str(s.to_owned().into())
}

//! `#[traced]` on `async fn`, end to end: async begin/end pairs with matching ids, one
//! duration per poll on the thread that polled (a future moved across threads shows on
//! both), cancellation, `?`, nesting. A tiny hand-rolled executor drives the futures.

#![cfg(feature = "instrument")]

use crate::traced_support;

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;

use fxtrace::traced;
use fxtrace_format::{DecodedEventKind, DecodedValue};
use traced_support::{gettid, serial, str_value, trace, Ev};

// --- a tiny executor ---

struct ThreadWaker(thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn waker() -> Waker {
    Waker::from(Arc::new(ThreadWaker(thread::current())))
}

fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let waker = waker();
    let mut cx = Context::from_waker(&waker);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => thread::park(),
        }
    }
}

/// Poll once.
fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
    let waker = waker();
    future.poll(&mut Context::from_waker(&waker))
}

/// Pending once (waking itself), then ready.
#[derive(Default)]
struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

// --- functions under test ---

#[traced]
async fn yields(n: u32) -> u32 {
    for _ in 0..n {
        YieldNow::default().await;
    }
    n
}

#[derive(Debug, PartialEq)]
struct Failed(u64);

fn check(id: u64) -> Result<u64, Failed> {
    if id % 2 == 0 {
        Ok(id / 2)
    } else {
        Err(Failed(id))
    }
}

#[traced(args(id))]
async fn fetch(id: u64) -> Result<u64, Failed> {
    YieldNow::default().await;
    let half = check(id)?;
    if half == 0 {
        return Ok(0);
    }
    Ok(half)
}

#[traced]
async fn child(x: u32) -> u32 {
    YieldNow::default().await;
    x * 2
}

#[traced]
async fn parent() -> u32 {
    child(1).await + child(2).await
}

struct Service {
    base: u32,
}

impl Service {
    #[traced(category = "svc", args(x, tag))]
    async fn call(&self, x: u32, tag: &str) -> usize {
        YieldNow::default().await;
        (self.base + x) as usize + tag.len()
    }
}

// --- helpers ---

fn async_id(e: &Ev) -> Option<(bool, u64)> {
    match e.kind {
        DecodedEventKind::AsyncBegin { id } => Some((true, id)),
        DecodedEventKind::AsyncEnd { id } => Some((false, id)),
        _ => None,
    }
}

fn polls<'a>(events: &'a [Ev], name: &str) -> Vec<&'a Ev> {
    events
        .iter()
        .filter(|e| e.is_complete() && e.name == name)
        .collect()
}

// --- tests ---

#[test]
fn begin_polls_end_with_one_id() {
    let _s = serial();
    let (v, events) = trace(|| block_on(yields(2)));
    assert_eq!(v, 2);
    let name = "api::async_fn::yields";
    assert!(events.iter().all(|e| e.name == name), "{events:?}");
    assert_eq!(events.len(), 5, "begin, 3 polls, end: {events:?}");
    let (Some((true, begin_id)), Some((false, end_id))) =
        (async_id(&events[0]), async_id(&events[4]))
    else {
        panic!("{events:?}");
    };
    assert_eq!(begin_id, end_id);
    assert_ne!(begin_id, 0);
    let p = polls(&events, name);
    assert_eq!(p.len(), 3);
    for pair in p.windows(2) {
        assert!(pair[0].end() <= pair[1].start);
    }
    assert!(events[0].start <= p[0].start && p[2].end() <= events[4].start);
    assert!(events.iter().all(|e| e.tid == gettid()));
}

#[test]
fn a_future_moved_across_threads_shows_on_both() {
    let _s = serial();
    let ((tid_a, tid_b, v), events) = trace(|| {
        let mut future = Box::pin(yields(1));
        assert!(poll_once(future.as_mut()).is_pending());
        let tid_a = gettid();
        let (tid_b, v) = thread::spawn(move || (gettid(), block_on(future)))
            .join()
            .unwrap();
        (tid_a, tid_b, v)
    });
    assert_eq!(v, 1);
    assert_ne!(tid_a, tid_b);
    let p = polls(&events, "api::async_fn::yields");
    assert_eq!(p.len(), 2);
    assert_eq!((p[0].tid, p[1].tid), (tid_a, tid_b));
    let begin = events.iter().find(|e| async_id(e).is_some_and(|(b, _)| b));
    let end = events.iter().find(|e| async_id(e).is_some_and(|(b, _)| !b));
    let (begin, end) = (begin.unwrap(), end.unwrap());
    assert_eq!(begin.tid, tid_a);
    assert_eq!(end.tid, tid_b);
    assert_eq!(async_id(begin).unwrap().1, async_id(end).unwrap().1);
}

#[test]
fn a_dropped_future_ends_cancelled() {
    let _s = serial();
    let ((), events) = trace(|| {
        let mut future = Box::pin(yields(5));
        assert!(poll_once(future.as_mut()).is_pending());
        drop(future);
    });
    assert_eq!(events.len(), 3, "{events:?}");
    let end = &events[2];
    assert!(matches!(end.kind, DecodedEventKind::AsyncEnd { .. }));
    assert_eq!(end.arg("cancelled"), Some(&DecodedValue::Bool(true)));
    assert_eq!(async_id(&events[0]).unwrap().1, async_id(end).unwrap().1);
}

#[test]
fn question_mark_and_early_return_end_the_future() {
    let _s = serial();
    let ((a, b, c), events) =
        trace(|| (block_on(fetch(8)), block_on(fetch(3)), block_on(fetch(0))));
    assert_eq!((a, b, c), (Ok(4), Err(Failed(3)), Ok(0)));
    let ids: Vec<(bool, u64)> = events.iter().filter_map(async_id).collect();
    assert_eq!(ids.len(), 6);
    for pair in ids.chunks(2) {
        assert!(pair[0].0 && !pair[1].0, "{ids:?}");
        assert_eq!(pair[0].1, pair[1].1);
    }
    let begins: Vec<&Ev> = events
        .iter()
        .filter(|e| matches!(e.kind, DecodedEventKind::AsyncBegin { .. }))
        .collect();
    let args: Vec<_> = begins.iter().map(|e| e.arg("id").cloned()).collect();
    assert_eq!(args, [8, 3, 0].map(|v| Some(DecodedValue::U64(v))).to_vec());
    // No end carries `cancelled`: each finished.
    assert!(events.iter().all(|e| e.arg("cancelled").is_none()));
}

#[test]
fn nested_futures_have_distinct_ids_and_nested_polls() {
    let _s = serial();
    let (v, events) = trace(|| block_on(parent()));
    assert_eq!(v, 6);
    let mut pairs = std::collections::BTreeMap::<u64, (usize, usize)>::new();
    for e in &events {
        if let Some((begin, id)) = async_id(e) {
            let entry = pairs.entry(id).or_default();
            if begin {
                entry.0 += 1;
            } else {
                entry.1 += 1;
            }
        }
    }
    assert_eq!(pairs.len(), 3, "parent and two children: {pairs:?}");
    assert!(pairs.values().all(|&c| c == (1, 1)));
    let parent_polls = polls(&events, "api::async_fn::parent");
    let child_polls = polls(&events, "api::async_fn::child");
    assert_eq!(child_polls.len(), 4);
    assert_eq!(parent_polls.len(), 3);
    for c in child_polls {
        assert!(
            parent_polls.iter().any(|p| c.inside(p)),
            "a child's poll runs inside a parent's poll"
        );
    }
}

#[test]
fn async_methods_with_string_arguments() {
    let _s = serial();
    let service = Service { base: 10 };
    let (n, events) = trace(|| block_on(service.call(5, "abc")));
    assert_eq!(n, 18);
    let begin = &events[0];
    assert!(matches!(begin.kind, DecodedEventKind::AsyncBegin { .. }));
    assert_eq!(begin.name, "api::async_fn::Service::call");
    assert_eq!(begin.category, "svc");
    assert_eq!(begin.arg("x"), Some(&DecodedValue::U32(5)));
    assert_eq!(begin.arg("tag"), Some(&str_value("abc")));
}

#[test]
fn a_future_first_polled_without_a_session_stays_silent() {
    let _s = serial();
    let mut future = Box::pin(yields(1));
    assert!(poll_once(future.as_mut()).is_pending());
    let (v, events) = trace(|| block_on(future));
    assert_eq!(v, 1);
    assert!(events.is_empty(), "{events:?}");
}

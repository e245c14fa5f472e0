//! `#[traced]` on `async fn`: futures run by a two-thread executor (hand-rolled, 60 lines
//! below) that puts a woken task at the back of a shared queue, so a task's polls usually
//! land on both workers. Each traced future writes an async begin/end pair with one id, plus
//! one duration per poll on the thread that polled.
//!
//! ```text
//! cargo run --example async_traced -- /tmp/async.fxt
//! fxtrace convert --to chrome-json -o /tmp/async.json /tmp/async.fxt   # for ui.perfetto.dev
//! ```
//!
//! Prints how many futures began and ended (their ids match), how many polls each worker
//! thread made, and how many requests were polled on both threads; exits with an error if
//! an async pair does not match.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use fxtrace::buffer::header::BufferingMode;
use fxtrace::standalone::StandaloneSession;
use fxtrace::traced;
use fxtrace_format::{DecodedEventKind, DecodedRecord, Decoder};

// --- the executor ---

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

struct Task {
    future: Mutex<Option<BoxFuture>>,
    queue: Arc<Queue>,
}

#[derive(Default)]
struct Queue {
    state: Mutex<(VecDeque<Arc<Task>>, usize)>, // (runnable, tasks not finished)
    ready: Condvar,
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        let queue = self.queue.clone();
        queue.push(self);
    }
}

impl Queue {
    fn push(&self, task: Arc<Task>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0.push_back(task);
        self.ready.notify_one();
    }

    fn spawn(self: &Arc<Self>, future: impl Future<Output = ()> + Send + 'static) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 += 1;
        self.push(Arc::new(Task {
            future: Mutex::new(Some(Box::pin(future))),
            queue: self.clone(),
        }));
    }

    /// Run tasks until every spawned one finished.
    fn work(&self) {
        loop {
            let task = {
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(task) = state.0.pop_front() {
                        break task;
                    }
                    if state.1 == 0 {
                        return;
                    }
                    state = self.ready.wait(state).unwrap_or_else(|p| p.into_inner());
                }
            };
            let waker = Waker::from(task.clone());
            let mut slot = task.future.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(future) = slot.as_mut() {
                if future
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_ready()
                {
                    *slot = None;
                    let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                    state.1 -= 1;
                    self.ready.notify_all();
                }
            }
        }
    }
}

/// Pending once (asking to be polled again), then ready: a suspension point.
#[derive(Default)]
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

// --- traced async code ---

/// A leaf that suspends `rounds` times.
#[traced(category = "io", args(block, rounds))]
async fn read_block(block: u64, rounds: u32) -> u64 {
    for _ in 0..rounds {
        YieldNow::default().await;
    }
    block * 512
}

/// A request: two reads, awaited one after the other.
#[traced(args(id))]
async fn handle_request(id: u64) -> u64 {
    let a = read_block(id, 2).await;
    YieldNow::default().await;
    let b = read_block(id + 1, 1).await;
    a + b
}

fn start_tracing() -> Result<StandaloneSession, Box<dyn std::error::Error>> {
    Ok(fxtrace::standalone::start(BufferingMode::Oneshot, 4 << 20)?)
}

const REQUESTS: u64 = 16;

/// Runs `REQUESTS` traced requests on a two-thread executor; returns the sum of their results.
fn workload() -> Result<u64, Box<dyn std::error::Error>> {
    let queue = Arc::new(Queue::default());
    let total = Arc::new(Mutex::new(0u64));
    for id in 0..REQUESTS {
        let total = total.clone();
        queue.spawn(async move {
            let v = handle_request(id).await;
            *total.lock().unwrap_or_else(|p| p.into_inner()) += v;
        });
    }
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || queue.work())
        })
        .collect::<Result<_, _>>()?;
    for worker in workers {
        worker.join().map_err(|_| "a worker panicked")?;
    }
    let total = *total.lock().unwrap_or_else(|p| p.into_inner());
    Ok(total)
}

fn main() -> ExitCode {
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("async_traced.fxt"));
    match run(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_traced: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(out: &PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    // Under `fxtrace record` (a trace manager is listening), join its session: the durations
    // go into the manager's archive, and the manager's summary reports them.
    if let Some(provider) = fxtrace::connect("async_traced")? {
        if !provider.wait_started(std::time::Duration::from_secs(5)) {
            eprintln!("async_traced: the trace manager did not start tracing within 5 s");
        }
        let total = workload()?;
        drop(provider);
        println!("result {total} (recorded by the trace manager)");
        return Ok(());
    }
    let session = start_tracing()?;
    let total = workload()?;
    let report = session.finish(out)?;

    let bytes = std::fs::read(out)?;
    // Threads write into their own chunks of the buffer, so the archive is in time order per
    // thread only: an end may come before its begin. Match them by id at the end.
    let mut begins = BTreeMap::<u64, String>::new();
    let mut ends = BTreeMap::<u64, String>::new();
    let mut polls_per_thread = BTreeMap::<u64, usize>::new();
    let mut request_threads = BTreeSet::new();
    for record in Decoder::new(&bytes) {
        let DecodedRecord::Event(e) = record?.record else {
            continue;
        };
        let duplicate = match e.kind {
            DecodedEventKind::AsyncBegin { id } => begins
                .insert(id, e.name.into_owned())
                .map(|_| ("begins", id)),
            DecodedEventKind::AsyncEnd { id } => {
                ends.insert(id, e.name.into_owned()).map(|_| ("ends", id))
            }
            DecodedEventKind::DurationComplete { .. } => {
                *polls_per_thread.entry(e.thread.tid).or_default() += 1;
                if e.name == "async_traced::handle_request" {
                    request_threads.insert(e.thread.tid);
                }
                None
            }
            _ => None,
        };
        if let Some((what, id)) = duplicate {
            return Err(format!("two async {what} with id {id}").into());
        }
    }
    println!("result {total}");
    if begins != ends {
        return Err("async begins and ends do not match by id and name".into());
    }
    let (begun, ended) = (begins.len(), ends.len());
    println!("{begun} futures began, {ended} ended, ids matched");
    for (tid, polls) in &polls_per_thread {
        println!("thread {tid}: {polls} polls");
    }
    println!(
        "requests were polled on {} thread(s); {} records ({} dropped) written to {}",
        request_threads.len(),
        report.records,
        report.stop.records_dropped,
        out.display()
    );
    // Each request: its own future and two reads.
    let expected = 3 * REQUESTS as usize;
    if begun != expected {
        return Err(format!("expected {expected} matched async pairs").into());
    }
    Ok(())
}

//! Threads that wait for each other and compete for the CPUs: the workload of the scheduling
//! tests (wake-ups, wait points, CPU samples) and of their benchmarks.
//!
//! ```text
//! contention lock WAITERS ROUNDS   # one holder, WAITERS threads blocked on its mutexes
//! contention spin THREADS MILLIS   # THREADS threads in a busy loop for MILLIS ms
//! contention work THREADS KILO     # THREADS threads doing KILO thousand steps each, timed
//! ```
//!
//! `lock`: each round, the holder takes one glibc mutex per waiter (`pthread_mutex_lock`),
//! the waiters each block on theirs (`pthread_mutex_lock` → `__lll_lock_wait` → `futex`),
//! the holder keeps them a few milliseconds and releases them one by one: every waiter is
//! woken by the holder. It prints `holder_tid=H waiter_tids=A,B,…`.
//!
//! `spin`: the threads spin in `busy_loop` (more threads than CPUs: they preempt each other).
//! It prints `spin_tids=A,B,…`.
//!
//! `work`: a fixed amount of the same arithmetic per thread, for the slowdown a recorder's
//! sampling costs (`scripts/bench-vs-perf.sh`). It prints `threads=N elapsed_ms=E`.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// A glibc mutex, shared between threads.
struct Mutex(std::cell::UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: a pthread mutex is made to be used from several threads; it is only touched
// through pthread_mutex_lock/unlock, which synchronise.
unsafe impl Sync for Mutex {}

impl Mutex {
    fn new() -> Self {
        Mutex(std::cell::UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER))
    }

    fn lock(&self) {
        // SAFETY: an initialised mutex that lives as long as every thread using it (an Arc).
        unsafe { libc::pthread_mutex_lock(self.0.get()) };
    }

    fn unlock(&self) {
        // SAFETY: as above; called only by the thread that locked it.
        unsafe { libc::pthread_mutex_unlock(self.0.get()) };
    }
}

/// Spins until `deadline`. The inner loop is operators on integers only (xorshift), no call
/// even in a debug build: a CPU sample taken there has `busy_loop` as its innermost frame.
#[inline(never)]
fn busy_loop(deadline: Instant) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while Instant::now() < deadline {
        let mut i = 0u32;
        while i < 100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            i += 1;
        }
    }
    std::hint::black_box(x)
}

/// `steps` steps of `busy_loop`'s arithmetic.
#[inline(never)]
fn steps(steps: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut i = 0;
    while i < steps {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    std::hint::black_box(x)
}

fn work(threads: usize, kilo: u64) -> Result<(), String> {
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("work-{i}"))
                .spawn(move || steps(kilo * 1000))
                .map_err(|e| format!("spawning a worker: {e}"))
        })
        .collect::<Result<_, _>>()?;
    for w in workers {
        w.join().map_err(|_| "a worker panicked".to_owned())?;
    }
    println!(
        "threads={threads} elapsed_ms={}",
        started.elapsed().as_millis()
    );
    Ok(())
}

fn lock(waiters: usize, rounds: u64) -> Result<(), String> {
    let mutexes: Arc<Vec<Mutex>> = Arc::new((0..waiters).map(|_| Mutex::new()).collect());
    // Round r is open for locking when `round` reads r; waiters count themselves in `arrived`
    // before they lock, and in `passed` once through.
    let round = Arc::new(AtomicU64::new(0));
    let arrived = Arc::new(AtomicU64::new(0));
    let passed = Arc::new(AtomicU64::new(0));
    for m in mutexes.iter() {
        m.lock();
    }
    let holder = gettid();
    let mut threads = Vec::new();
    for i in 0..waiters {
        let (mutexes, round) = (mutexes.clone(), round.clone());
        let (arrived, passed) = (arrived.clone(), passed.clone());
        let t = std::thread::Builder::new()
            .name(format!("waiter-{i}"))
            .spawn(move || {
                for r in 1..=rounds {
                    // ATOMICS: Acquire pairs with the holder's Release store of the round.
                    while round.load(Ordering::Acquire) < r {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    // ATOMICS: a count; the mutex orders the rest.
                    arrived.fetch_add(1, Ordering::Relaxed);
                    mutexes[i].lock();
                    mutexes[i].unlock();
                    // ATOMICS: a count (see above).
                    passed.fetch_add(1, Ordering::Relaxed);
                }
                gettid()
            })
            .map_err(|e| format!("spawning a waiter: {e}"))?;
        threads.push(t);
    }
    for r in 1..=rounds {
        // ATOMICS: Release publishes the held mutexes to the waiters.
        round.store(r, Ordering::Release);
        // ATOMICS: a count (see above).
        while arrived.load(Ordering::Relaxed) < r * waiters as u64 {
            std::thread::yield_now();
        }
        // Every waiter is past its count: give them time to block in the kernel.
        std::thread::sleep(Duration::from_millis(5));
        busy_loop(Instant::now() + Duration::from_micros(500));
        for m in mutexes.iter() {
            m.unlock();
        }
        if r < rounds {
            // Wait for the waiters to go through, then take the mutexes again.
            // ATOMICS: a count (see above).
            while passed.load(Ordering::Relaxed) < r * waiters as u64 {
                std::thread::sleep(Duration::from_micros(200));
            }
            for m in mutexes.iter() {
                m.lock();
            }
        }
    }
    let tids: Vec<String> = threads
        .into_iter()
        .map(|t| t.join().map(|tid| tid.to_string()))
        .collect::<Result<_, _>>()
        .map_err(|_| "a waiter panicked".to_owned())?;
    println!("holder_tid={holder} waiter_tids={}", tids.join(","));
    Ok(())
}

fn spin(threads: usize, millis: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_millis(millis);
    let spinners: Vec<_> = (0..threads)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("spin-{i}"))
                .spawn(move || {
                    std::hint::black_box(busy_loop(deadline));
                    gettid()
                })
                .map_err(|e| format!("spawning a spinner: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let tids: Vec<String> = spinners
        .into_iter()
        .map(|t| t.join().map(|tid| tid.to_string()))
        .collect::<Result<_, _>>()
        .map_err(|_| "a spinner panicked".to_owned())?;
    println!("spin_tids={}", tids.join(","));
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: u64| -> Result<u64, String> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse().map_err(|_| format!("{s:?} is not a number"))
        })
    };
    let run = match args.first().map(String::as_str) {
        Some("lock") => number(1, 3).and_then(|w| lock(w as usize, number(2, 1)?)),
        Some("spin") => number(1, 3).and_then(|t| spin(t as usize, number(2, 300)?)),
        Some("work") => number(1, 2).and_then(|t| work(t as usize, number(2, 100_000)?)),
        _ => Err(
            "usage: contention lock WAITERS ROUNDS | spin THREADS MILLIS | work THREADS KILO"
                .into(),
        ),
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("contention: {e}");
            ExitCode::FAILURE
        }
    }
}

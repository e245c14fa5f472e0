//! Timing blocks: a candidate's block of calls beside a block of `rdtscp`s in the same
//! process, after a warm-up that ends when a block takes no page fault.
//!
//! A block is a loop of `n` calls, `n` chosen so that the block lasts about the configured
//! time (20 ms). The warm-up recalibrates `n` after each block and ends after at least
//! [`MIN_WARMUP_BLOCKS`] blocks once a block took no minor page fault on the measuring thread
//! (`getrusage(RUSAGE_THREAD)`), or after the configured maximum (the result says so). The
//! measured part alternates `rdtscp`, candidate, `rdtscp`, …: each candidate block is divided
//! by the mean of the two `rdtscp` blocks around it, and the process reports the median of
//! those ratios.
//!
//! Single-thread blocks are timed with the thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`),
//! so that the time the thread spent preempted by other work on a shared machine is not
//! charged to whichever block it fell into; the share of wall time the thread was off the
//! CPU is reported beside the result. The 2-thread scaling is a matter of concurrency and is
//! timed with the wall clock (the monotonic clock).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::tsc::rdtscp;
use crate::Error;

/// Blocks every warm-up runs at least (the first ones calibrate `n`).
pub(crate) const MIN_WARMUP_BLOCKS: u32 = 3;

/// How blocks are timed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Target length of one block.
    pub(crate) block: Duration,
    /// Candidate blocks measured per process (each between two `rdtscp` blocks).
    pub(crate) pairs: usize,
    /// Warm-up blocks at most.
    pub(crate) max_warmup: u32,
}

/// What one process measured for a single-thread candidate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ratio {
    /// Median over the measured blocks of candidate ns ÷ `rdtscp` ns.
    pub(crate) ratio: f64,
    /// Median ns per candidate call.
    pub(crate) ns: f64,
    /// Median ns per `rdtscp`.
    pub(crate) rdtscp_ns: f64,
    /// Warm-up blocks run.
    pub(crate) warmup_blocks: u32,
    /// Whether the warm-up ended on a block without page fault (else it hit the maximum).
    pub(crate) settled: bool,
    /// Minor page faults of the measuring thread during the measured candidate blocks.
    pub(crate) faults: u64,
    /// Share of the measured blocks' wall time the thread was not running (0 = never
    /// preempted).
    pub(crate) off_cpu: f64,
}

/// What one process measured for a 2-thread candidate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scaling {
    /// Median of (calls per second on 2 threads together) ÷ (calls per second on 1 thread).
    pub(crate) scaling: f64,
    /// Median ns per call on one thread (wall clock).
    pub(crate) ns: f64,
    /// Warm-up blocks run (2-thread blocks).
    pub(crate) warmup_blocks: u32,
    /// Whether the warm-up ended on a block without page fault on either thread.
    pub(crate) settled: bool,
    /// Minor page faults of both threads during the measured blocks.
    pub(crate) faults: u64,
    /// Share of the measuring thread's wall time off the CPU during the measured blocks.
    pub(crate) off_cpu: f64,
}

/// Minor page faults of the calling thread so far.
pub(crate) fn thread_minor_faults() -> Result<u64, Error> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a writable `rusage`; RUSAGE_THREAD exists on Linux since 2.6.26.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    if rc != 0 {
        return Err(Error::Os(
            "getrusage(RUSAGE_THREAD)",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: getrusage succeeded, so it filled the structure (and it was zeroed before).
    Ok(unsafe { usage.assume_init() }.ru_minflt as u64)
}

/// CPU time of the calling thread, in ns.
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a writable timespec; CLOCK_THREAD_CPUTIME_ID always exists on Linux
    // for the calling thread, so the call cannot fail (a failure would leave 0 and show as
    // an absurd block, not as a plausible one).
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// How long a block took.
#[derive(Debug, Clone, Copy)]
struct Timed {
    /// Wall-clock ns.
    wall: f64,
    /// ns the thread was on a CPU.
    cpu: f64,
}

/// Time `n` calls of `op`.
#[inline(never)]
fn block<R>(n: u64, op: &mut impl FnMut() -> R) -> Timed {
    let cpu = thread_cpu_ns();
    let start = Instant::now();
    for _ in 0..n {
        black_box(op());
    }
    let wall = start.elapsed().as_nanos() as f64;
    Timed {
        wall,
        cpu: thread_cpu_ns().saturating_sub(cpu) as f64,
    }
}

/// Calls per block for a block of `target` given that `n` calls took `ns`.
fn recalibrate(target: Duration, ns: f64, n: u64) -> u64 {
    let per = (ns / n as f64).max(0.01);
    ((target.as_nanos() as f64 / per) as u64).clamp(16, 1 << 34)
}

/// Median of a non-empty slice (sorted in place).
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// A calibrated, warmed-up loop of one operation.
struct Warm {
    n: u64,
    blocks: u32,
    settled: bool,
}

/// Warm `op` up: blocks until one takes no page fault (at least [`MIN_WARMUP_BLOCKS`]).
fn warm_up<R>(settings: &Settings, op: &mut impl FnMut() -> R) -> Result<Warm, Error> {
    let mut n = 1024;
    let mut blocks = 0;
    loop {
        let faults = thread_minor_faults()?;
        let timed = block(n, op);
        let faults = thread_minor_faults()? - faults;
        blocks += 1;
        n = recalibrate(settings.block, timed.cpu, n);
        if blocks >= MIN_WARMUP_BLOCKS && faults == 0 {
            return Ok(Warm {
                n,
                blocks,
                settled: true,
            });
        }
        if blocks >= settings.max_warmup.max(MIN_WARMUP_BLOCKS) {
            return Ok(Warm {
                n,
                blocks,
                settled: false,
            });
        }
    }
}

fn off_cpu(wall: f64, cpu: f64) -> f64 {
    if wall > 0.0 {
        (1.0 - cpu / wall).max(0.0)
    } else {
        0.0
    }
}

/// Measure `op` (`calls_per_op` calls each) beside `rdtscp` on this thread.
pub(crate) fn ratio<R>(
    settings: &Settings,
    calls_per_op: u64,
    mut op: impl FnMut() -> R,
) -> Result<Ratio, Error> {
    let mut reference = rdtscp;
    let rn = warm_up(settings, &mut reference)?.n;
    let warm = warm_up(settings, &mut op)?;
    let mut before = block(rn, &mut reference).cpu / rn as f64;
    let (mut ratios, mut ns, mut ref_ns) = (Vec::new(), Vec::new(), vec![before]);
    let (mut faults, mut wall, mut cpu) = (0, 0.0, 0.0);
    for _ in 0..settings.pairs.max(1) {
        let f0 = thread_minor_faults()?;
        let timed = block(warm.n, &mut op);
        faults += thread_minor_faults()? - f0;
        (wall, cpu) = (wall + timed.wall, cpu + timed.cpu);
        let candidate = timed.cpu / (warm.n * calls_per_op) as f64;
        let after = block(rn, &mut reference).cpu / rn as f64;
        ratios.push(candidate / ((before + after) / 2.0));
        ns.push(candidate);
        ref_ns.push(after);
        before = after;
    }
    Ok(Ratio {
        ratio: median(&mut ratios),
        ns: median(&mut ns),
        rdtscp_ns: median(&mut ref_ns),
        warmup_blocks: warm.blocks,
        settled: warm.settled,
        faults,
        off_cpu: off_cpu(wall, cpu),
    })
}

/// Measure the aggregate scaling of `op` from one thread to two: blocks of `n` calls on this
/// thread alone, then on this thread and a helper started together (a barrier); scaling =
/// 2 × (1-thread time) ÷ (2-thread time until both finished), each 2-thread block divided by
/// the mean of the 1-thread blocks around it.
pub(crate) fn scaling<R>(settings: &Settings, op: impl Fn() -> R + Sync) -> Result<Scaling, Error> {
    let mut solo = || op();
    let warm = warm_up(settings, &mut solo)?;
    let n = warm.n;
    let start = Barrier::new(2);
    let done = Barrier::new(2);
    let stop = AtomicBool::new(false);
    let helper_ns = AtomicU64::new(0);
    let helper_faults = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let helper = scope.spawn(|| {
            let mut mine = || op();
            loop {
                start.wait();
                // ATOMICS: relaxed: `stop` is set before the `start` barrier, whose wait
                // orders it before this load.
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let f0 = thread_minor_faults().ok();
                let timed = block(n, &mut mine);
                // `u64::MAX`: getrusage failed; the main thread reports it (after `done`,
                // so that neither thread is left waiting at a barrier).
                let faults = match (f0, thread_minor_faults().ok()) {
                    (Some(f0), Some(f1)) => f1 - f0,
                    _ => u64::MAX,
                };
                // ATOMICS: relaxed: read by the main thread after the `done` barrier.
                helper_faults.store(faults, Ordering::Relaxed);
                helper_ns.store(timed.wall as u64, Ordering::Relaxed);
                done.wait();
            }
        });
        let mut in_pair = || op();
        // One 2-thread block: its timing on this thread, the wall ns until both finished,
        // and the faults on both threads.
        let mut pair = || -> Result<(Timed, f64, u64), Error> {
            start.wait();
            let f0 = thread_minor_faults();
            let mine = block(n, &mut in_pair);
            let f1 = thread_minor_faults();
            done.wait();
            // ATOMICS: relaxed: written before the `done` barrier this thread passed.
            let theirs = helper_ns.load(Ordering::Relaxed) as f64;
            let helper = helper_faults.load(Ordering::Relaxed);
            if helper == u64::MAX {
                return Err(Error::Os(
                    "getrusage(RUSAGE_THREAD) on the helper thread",
                    std::io::Error::other("failed"),
                ));
            }
            Ok((mine, theirs.max(mine.wall), f1? - f0? + helper))
        };
        let result = (|| {
            let mut blocks = 0;
            let settled = loop {
                let (_, _, faults) = pair()?;
                blocks += 1;
                if blocks >= MIN_WARMUP_BLOCKS && faults == 0 {
                    break true;
                }
                if blocks >= settings.max_warmup.max(MIN_WARMUP_BLOCKS) {
                    break false;
                }
            };
            let mut before = block(n, &mut solo).wall;
            let (mut scalings, mut ns) = (Vec::new(), vec![before / n as f64]);
            let (mut faults, mut wall, mut cpu) = (0, 0.0, 0.0);
            for _ in 0..settings.pairs.max(1) {
                let (mine, both, f) = pair()?;
                faults += f;
                (wall, cpu) = (wall + mine.wall, cpu + mine.cpu);
                let after = block(n, &mut solo).wall;
                scalings.push(2.0 * ((before + after) / 2.0) / both);
                ns.push(after / n as f64);
                before = after;
            }
            Ok(Scaling {
                scaling: median(&mut scalings),
                ns: median(&mut ns),
                warmup_blocks: blocks,
                settled,
                faults,
                off_cpu: off_cpu(wall, cpu),
            })
        })();
        // ATOMICS: relaxed: the `start` barrier below orders it before the helper's load.
        stop.store(true, Ordering::Relaxed);
        start.wait();
        helper.join().map_err(|_| Error::HelperPanicked)?;
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn a_block_count_lasts_about_the_target() {
        // 1000 calls took 1 ms: 20 ms needs 20 000.
        assert_eq!(recalibrate(Duration::from_millis(20), 1e6, 1000), 20_000);
        // Never fewer than 16 calls, whatever one call costs.
        assert_eq!(recalibrate(Duration::from_millis(20), 1e12, 10), 16);
    }

    #[test]
    fn a_ratio_is_measured_and_positive() {
        let settings = Settings {
            block: Duration::from_millis(2),
            pairs: 3,
            max_warmup: 10,
        };
        let ratio = ratio(&settings, 1, || {
            black_box(rdtscp());
            black_box(rdtscp())
        })
        .unwrap();
        assert!(
            ratio.ratio > 1.0,
            "two rdtscp cost more than one: {ratio:?}"
        );
        assert!(
            ratio.rdtscp_ns > 0.0 && ratio.ns > ratio.rdtscp_ns,
            "{ratio:?}"
        );
        assert!((MIN_WARMUP_BLOCKS..=10).contains(&ratio.warmup_blocks));
    }
}

//! A `#[traced]` batch loop that is sometimes slow because another process takes its CPU:
//! the example of `fxtrace report spans` (README, "Finding out why it was slow").
//!
//! ```text
//! sudo fxtrace record -a -o /tmp/batches.fxt -- target/release/examples/preempted
//! fxtrace report spans /tmp/batches.fxt --top 3
//! ```
//!
//! The program pins itself to CPU 0 and runs `--batches` batches (`batch`, argument `id`),
//! each the same amount of arithmetic (`--work-us` µs of it on an idle CPU). Halfway through
//! it starts a child process named `backup` pinned to the same CPU, which spins for
//! `--hog-ms` ms at a higher priority (nice -10, when allowed): the batches that run meanwhile
//! get a small share of the CPU and take many times longer, runnable while `backup` runs. It
//! prints `backup_pid=P` and `batches=N`.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use fxtrace::traced;

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it; the call reads
    // it through a pointer to a live local.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Names the calling thread (its `comm`, as `ps` and the trace show it).
fn set_name(name: &str) {
    let name = std::ffi::CString::new(name).expect("no NUL in the name");
    // SAFETY: PR_SET_NAME reads a NUL-terminated string that outlives the call.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
}

/// Arithmetic the optimizer cannot skip.
fn spin(iterations: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..iterations {
        x = x.rotate_left(7) ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d);
    }
    std::hint::black_box(x)
}

/// One batch: the same work every time.
#[traced(args(id))]
fn batch(id: u64, iterations: u64) -> u64 {
    spin(iterations)
}

/// The `backup` process: spins on CPU 0 for `ms` milliseconds, at a higher priority than the
/// batches when allowed (nice -10: it then takes most of the CPU, whatever else runs there).
fn hog(ms: u64) -> ExitCode {
    set_name("backup");
    // SAFETY: setpriority on the calling process; a failure (not root) only keeps nice 0.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) };
    if let Err(e) = pin_to(0) {
        eprintln!("backup: cannot pin to CPU 0: {e}");
        return ExitCode::FAILURE;
    }
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        spin(100_000);
    }
    ExitCode::SUCCESS
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--hog") {
        let ms = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or(400);
        return hog(ms);
    }
    let batches = arg(&args, "--batches", 60);
    let work_us = arg(&args, "--work-us", 2000);
    let hog_ms = arg(&args, "--hog-ms", 400);
    set_name("batches");
    if let Err(e) = pin_to(0) {
        eprintln!("preempted: cannot pin to CPU 0: {e}");
        return ExitCode::FAILURE;
    }
    let provider = match fxtrace::connect("preempted") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("preempted: cannot join the trace session ({e}); running untraced");
            None
        }
    };
    if let Some(p) = &provider {
        p.wait_started(Duration::from_secs(5));
    }
    // How many iterations make `work_us` on this CPU, alone.
    let probe = Instant::now();
    spin(1_000_000);
    let per_us = 1_000_000 / (probe.elapsed().as_micros().max(1) as u64);
    let iterations = per_us.max(1) * work_us;
    let mut backup = None;
    for id in 0..batches {
        if id == batches / 2 {
            let exe = std::env::current_exe().expect("the example's own path");
            match Command::new(exe)
                .args(["--hog", &hog_ms.to_string()])
                .spawn()
            {
                Ok(child) => {
                    println!("backup_pid={}", child.id());
                    backup = Some(child);
                    // Let it start spinning.
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => eprintln!("preempted: cannot start backup: {e}"),
            }
        }
        batch(id, iterations);
    }
    if let Some(mut child) = backup {
        let _ = child.wait();
    }
    drop(provider);
    println!("batches={batches}");
    ExitCode::SUCCESS
}

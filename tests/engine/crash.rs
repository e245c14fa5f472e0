//! A writer process killed with SIGKILL: the parent reads the buffer back from its own mapping of
//! the same memfd, as the manager will, and every record up to the kill decodes.
//!
//! The child is this test binary re-executed to run the ignored `crash_child_writer` test, with
//! the memfd as fd 3.

use crate::engine_support;

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use fxtrace::buffer::header::BufferingMode;
use fxtrace::buffer::TraceBuffer;
use fxtrace::engine::{CategoryFilter, Context, ContextConfig, NoHandler, StartMode};

const CHILD_FD: i32 = 3;
const READY: &str = "FXTRACE_CHILD_READY";

/// Run as a child only (`FXTRACE_CRASH_MODE` set): write records on two threads until killed.
#[test]
#[ignore = "helper: runs as the child process of sigkill_* tests"]
fn crash_child_writer() {
    let Ok(mode) = std::env::var("FXTRACE_CRASH_MODE") else {
        println!("skipped: only meaningful as the child of a sigkill_* test");
        return;
    };
    let mode = if mode == "circular" {
        BufferingMode::Circular
    } else {
        BufferingMode::Oneshot
    };
    // SAFETY: the parent placed the memfd at fd 3 for us; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(CHILD_FD) };
    let buffer = TraceBuffer::from_fd(fd).expect("received buffer");
    let config = ContextConfig {
        mode,
        chunk_size: 4096,
        ..ContextConfig::default()
    };
    let ctx = Context::new(buffer, config, Arc::new(NoHandler)).expect("context");
    ctx.start(StartMode::ClearEntire, CategoryFilter::all())
        .unwrap();
    let past_2000 = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let writers: Vec<_> = (1..=2u64)
        .map(|thread| {
            let ctx = ctx.clone();
            let past_2000 = past_2000.clone();
            std::thread::spawn(move || {
                for seq in 0.. {
                    try_write(&ctx, thread, seq, 3 + (seq % 5) as usize, seq % 1000 == 0);
                    for _ in 0..200 {
                        std::hint::spin_loop();
                    }
                    if seq == 2000
                        && past_2000.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1
                    {
                        println!("{READY}"); // both threads are well under way
                    }
                }
            })
        })
        .collect();
    for w in writers {
        let _ = w.join();
    }
}

/// Spawn the child on `buffer`, let it write, kill it, return the buffer contents.
fn run_and_kill(buffer: &TraceBuffer, mode: &str) -> Vec<u8> {
    let fd = buffer.try_clone_fd().unwrap();
    let raw = fd.as_raw_fd();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "crash::crash_child_writer",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FXTRACE_CRASH_MODE", mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: between fork and exec the closure only calls dup2 (async-signal-safe).
    unsafe {
        command.pre_exec(move || {
            if libc::dup2(raw, CHILD_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("spawn child");
    drop(fd);
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let ready = lines.any(|line| line.map(|l| l.contains(READY)).unwrap_or(false));
    assert!(ready, "child never became ready");
    std::thread::sleep(Duration::from_millis(30));
    // SAFETY: plain kill(2) on our child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    snapshot(buffer)
}

#[test]
fn sigkill_oneshot_every_record_up_to_the_kill_decodes() {
    let buffer = TraceBuffer::create(16 << 20).unwrap();
    let bytes = run_and_kill(&buffer, "oneshot");
    // The header was never finalised: data ends read 0 and the reader scans whole buffers.
    let read = final_read(&bytes, 0, false);
    assert_eq!(read.header.rolling_data_end, [0, 0]);
    let threads = by_thread(&read.rolling);
    assert_eq!(threads.len(), 2);
    for (thread, seqs) in threads {
        // Each thread's records are exactly 0..=k: nothing it committed is missing.
        assert!(
            seqs.len() > 2000,
            "thread {thread} wrote {} records",
            seqs.len()
        );
        assert!(
            seqs.iter().enumerate().all(|(i, &s)| s == i as u64),
            "thread {thread}: not a contiguous prefix"
        );
    }
}

#[test]
fn sigkill_circular_salvages_both_rolling_buffers() {
    let buffer = TraceBuffer::create(256 * 1024).unwrap();
    let bytes = run_and_kill(&buffer, "circular");
    let read = final_read(&bytes, 0, false);
    assert!(
        read.header.wrapped_count >= 1,
        "wrapped {}",
        read.header.wrapped_count
    );
    let threads = by_thread(&read.rolling);
    assert_eq!(threads.len(), 2);
    for (thread, seqs) in &threads {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "thread {thread} out of order"
        );
        assert!(seqs.len() > 100);
    }
    // Durable records (every 1000th) survive every wrap.
    let durable = by_thread(&read.durable);
    for (thread, seqs) in durable {
        assert!(
            seqs.iter().enumerate().all(|(i, &s)| s == i as u64 * 1000),
            "thread {thread}"
        );
    }
}

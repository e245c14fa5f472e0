//! A context-switch-heavy workload: two threads, "pingpong-ping" and "pingpong-pong", bounce
//! one byte through two pipes N times. Every round blocks each thread once in `read`, so the
//! kernel switches at least twice per round.
//!
//! ```text
//! cargo run --release --example pingpong -- 100000
//! rounds=100000 pid=1234 ping_tid=1235 pong_tid=1236 elapsed_ms=1830
//! ```
//!
//! Used by `scripts/bench-vs-perf.sh` and the `fxtrace record` tests, which read the tids from
//! that line.

use std::os::fd::{AsFd, OwnedFd};
use std::process::ExitCode;
use std::time::Instant;

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Reads one byte; false at end of file or on error.
fn read1(fd: &OwnedFd) -> bool {
    let mut b = [0u8; 1];
    matches!(nix::unistd::read(fd.as_fd(), &mut b), Ok(1))
}

/// Writes one byte; false on error.
fn write1(fd: &OwnedFd) -> bool {
    matches!(nix::unistd::write(fd, &[1u8]), Ok(1))
}

/// Runs `rounds` round trips; returns (ping tid, pong tid, rounds completed by ping).
fn ping_pong(rounds: u64) -> Result<(u32, u32, u64), String> {
    let (to_pong_r, to_pong_w) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (to_ping_r, to_ping_w) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    let pong = std::thread::Builder::new()
        .name("pingpong-pong".into())
        .spawn(move || {
            while read1(&to_pong_r) {
                if !write1(&to_ping_w) {
                    break;
                }
            }
            gettid()
        })
        .map_err(|e| format!("spawning pong: {e}"))?;
    let ping = std::thread::Builder::new()
        .name("pingpong-ping".into())
        .spawn(move || {
            let mut done = 0;
            while done < rounds && write1(&to_pong_w) && read1(&to_ping_r) {
                done += 1;
            }
            // Dropping `to_pong_w` here ends pong's loop.
            (gettid(), done)
        })
        .map_err(|e| format!("spawning ping: {e}"))?;
    let (ping_tid, done) = ping.join().map_err(|_| "ping panicked".to_owned())?;
    let pong_tid = pong.join().map_err(|_| "pong panicked".to_owned())?;
    Ok((ping_tid, pong_tid, done))
}

fn main() -> ExitCode {
    let rounds = match std::env::args().nth(1).map(|a| a.parse::<u64>()) {
        None => 100_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("usage: pingpong [ROUNDS] (ROUNDS: a number, default 100000): {e}");
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    match ping_pong(rounds) {
        Ok((ping, pong, done)) => {
            println!(
                "rounds={done} pid={} ping_tid={ping} pong_tid={pong} elapsed_ms={}",
                std::process::id(),
                start.elapsed().as_millis()
            );
            if done == rounds {
                ExitCode::SUCCESS
            } else {
                eprintln!("pingpong: stopped after {done} of {rounds} rounds");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}

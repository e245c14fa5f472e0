//! The preload object's log: silent unless `FXTRACE_PRELOAD_LOG=1`, so that the traced
//! program's standard error stays its own.

use std::sync::atomic::{AtomicBool, Ordering};

/// Rules: set once by the constructor (before any other thread of ours exists), read by every
/// log call. ATOMICS: `Relaxed`: a flag with no data published through it.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turn the log on or off.
pub(crate) fn set_enabled(on: bool) {
    // ATOMICS: see `ENABLED`.
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether the log is on.
pub(crate) fn enabled() -> bool {
    // ATOMICS: see `ENABLED`.
    ENABLED.load(Ordering::Relaxed)
}

/// Write one line `fxtrace-preload[PID]: MESSAGE` to standard error (fd 2, one `write`, no
/// stdio buffer shared with the program), if the log is on.
pub(crate) fn line(message: std::fmt::Arguments<'_>) {
    if !enabled() {
        return;
    }
    let text = format!("fxtrace-preload[{}]: {message}\n", std::process::id());
    // SAFETY: `text` is a live buffer of `text.len()` bytes; writing to fd 2 has no other
    // effect on our memory. A short or failed write only loses log text.
    let _ = unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

/// `log!("...", args)`: a line on standard error when `FXTRACE_PRELOAD_LOG=1`.
macro_rules! log {
    ($($arg:tt)*) => {
        $crate::log::line(format_args!($($arg)*))
    };
}
pub(crate) use log;

/// Where the time of a sequence went (the start at load, the flush at exit), for the log:
/// `register 0.31 ms, start wait 0.12 ms, …`. Costs one clock read per phase.
pub(crate) struct Phases {
    last: std::time::Instant,
    parts: Vec<(&'static str, std::time::Duration)>,
}

impl Phases {
    /// Start timing now.
    pub(crate) fn start() -> Self {
        Self {
            last: std::time::Instant::now(),
            parts: Vec::new(),
        }
    }

    /// The phase `name` ended now.
    pub(crate) fn mark(&mut self, name: &'static str) {
        let now = std::time::Instant::now();
        self.parts.push((name, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total: std::time::Duration = self.parts.iter().map(|(_, d)| *d).sum();
        write!(f, "{:.3} ms (", total.as_secs_f64() * 1e3)?;
        for (i, (name, d)) in self.parts.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{name} {:.3}", d.as_secs_f64() * 1e3)?;
        }
        write!(f, ")")
    }
}

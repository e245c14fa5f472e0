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

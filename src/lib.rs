//! fxtrace: the Fuchsia tracing system on Linux.
//!
//! Providers write Fuchsia Trace Format (FXT) records into a shared buffer; a trace manager
//! collects them into one archive; hardware signals (TSC, context switches, LBR) come from the
//! CPU and the kernel through `rdtscp` and `perf_event_open`. See `shared/DESIGN.md` for the
//! architecture and `AGENTS.md` for the map of this repository.

pub mod buffer;
#[cfg(feature = "c-api")]
pub mod c_api;
#[cfg(feature = "capture")]
pub mod capture;
pub mod clock;
pub mod engine;
pub mod fd_guard;
pub mod format;
/// fxtrace's own threads (for the preload object; not a stable API).
#[doc(hidden)]
pub mod helper_thread;
#[doc(hidden)]
pub mod instrument;
pub mod protocol;
pub mod provider;
mod sys;
pub mod trace;
#[cfg(feature = "tracing")]
pub mod tracing_layer;

#[doc(hidden)]
pub use instrument as __private;

/// The buffering mode of a trace (oneshot, circular, streaming), as
/// [`standalone::start`] takes it.
pub use buffer::header::BufferingMode;
pub use engine::standalone;
/// Each call of the function becomes a duration event in the current trace:
///
/// ```
/// #[fxtrace::traced(category = "db", args(id))]
/// fn query(id: u64) -> u64 {
///     id * 2
/// }
///
/// // No trace running: the call costs one relaxed load and a branch more.
/// assert_eq!(query(21), 42);
/// ```
#[doc(inline)]
pub use fxtrace_macros::traced;
pub use provider::{alert, connect};
pub use trace::{
    async_begin, async_end, async_instant, counter, duration, duration_begin, duration_end,
    duration_with_args, flow_begin, flow_end, flow_step, instant, is_category_enabled, log, Arg,
    ArgValue, CallSite, Scope, TraceStr,
};
#[cfg(feature = "tracing")]
pub use tracing_layer::TracingLayer;

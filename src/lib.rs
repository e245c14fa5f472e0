//! fxtrace: the Fuchsia tracing system on Linux.
//!
//! A program records trace events ([`instant`], [`duration`], `#[traced]`, the `tracing`
//! layer, the C API) into a shared buffer; a trace manager (`fxtrace record`, or the trace
//! service `fxtrace daemon`) collects every program's buffer into one Fuchsia Trace Format
//! (FXT) archive that opens in the Perfetto UI. Timestamps are TSC ticks read with `rdtscp`.
//!
//! ```
//! // Register with whichever trace manager runs (none here: `Ok(None)`, the program runs
//! // untraced at the cost of one relaxed load per call site).
//! let _provider = fxtrace::connect("my-app")?;
//!
//! #[fxtrace::traced(category = "db", args(id))]
//! fn query(id: u64) -> u64 {
//!     id * 2
//! }
//! query(21);
//! fxtrace::instant("db", "cache_miss", fxtrace::Scope::Thread, &[]);
//! # Ok::<(), fxtrace::ProviderError>(())
//! ```
//!
//! Without a manager, [`standalone::start`] traces the process into a file of its own. The FXT
//! codec itself is the crate `fxtrace-format`; the tools (`fxtrace record`, `dump`, `report`,
//! …) are the crate `fxtrace-tools`. `docs/ARCHITECTURE.md` in the repository describes how
//! the parts fit.

// The internals below are shared with fxtrace's own tools (`fxtrace-tools`) and its preload
// object; they are not API (hidden from the documentation, no stability promised). What a
// program calls is re-exported at the root.
#[doc(hidden)]
pub mod buffer;
#[doc(hidden)]
#[cfg(feature = "capture")]
pub mod capture;
#[doc(hidden)]
pub mod engine;
#[doc(hidden)]
pub mod fd_guard;
#[doc(hidden)]
pub mod helper_thread;
#[doc(hidden)]
pub mod instrument;
#[doc(hidden)]
pub mod protocol;
#[doc(hidden)]
pub mod provider;
mod sys;
/// How the workspace's tests skip (feature `test-support`; not API).
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod test_support;

/// The FXT codec, the crate `fxtrace-format` (its own crate, so tools and other readers use it
/// without the engine).
use fxtrace_format as format;

#[cfg(feature = "c-api")]
pub mod c_api;
pub mod clock;
mod trace;
#[cfg(feature = "tracing")]
mod tracing_layer;

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
pub use provider::{alert, connect, Provider, ProviderError};
pub use trace::{
    async_begin, async_end, async_instant, counter, duration, duration_begin, duration_end,
    duration_with_args, flow_begin, flow_end, flow_step, instant, is_category_enabled, log, Arg,
    ArgValue, CallSite, Category, DurationGuard, Scope, TraceStr,
};
#[cfg(feature = "tracing")]
pub use tracing_layer::TracingLayer;

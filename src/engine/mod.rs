//! The in-process trace engine: the Linux counterpart of Fuchsia's trace-engine.
//!
//! - [`context`]: the trace context (buffering modes, start/stop, hand-off); start here.
//! - [`writer`]: writer sections and record slots, the entry point of record writers.
//! - [`category`]: category filters and per-call-site caches.
//! - [`record`]: typed record writers ([`TraceWriter`]) over the per-thread string and thread
//!   caches (`cache`).
//! - [`global`]: the process-wide current context that instrumentation writes into.
//! - [`standalone`]: a trace without a manager, written to an FXT file.
//! - `allocator`, `slots`: the lock-free core (chunked classic allocator; grace periods).
//! - `prefault`: faulting the buffer in ahead of its writers.
//!
//! The buffer the engine writes into, its header layout, geometry and the reader's record
//! framing live in [`crate::buffer`], shared with the provider client and the manager.

mod allocator;
pub(crate) mod cache;
pub mod category;
pub mod context;
pub mod global;
pub(crate) mod prefault;
pub mod record;
mod slots;
pub mod standalone;
pub mod writer;

pub use cache::MAX_STRING_ENTRIES;
pub use category::{tracing_maybe_on, CallSite, CategoryFilter};
pub use context::{
    chunk_size_for, BufferHandler, Context, ContextConfig, EngineError, EngineStats, NoHandler,
    StartMode, StopReport, TraceState, WeakContext, DEFAULT_CHUNK_SIZE, DEFAULT_MAX_WRITER_THREADS,
    MAX_THREAD_RUN,
};
pub use record::{start_trace, RecordError, Scope, TraceStr, TraceWriter};
pub use slots::FencePolicy;
pub use writer::{Slot, Writer};

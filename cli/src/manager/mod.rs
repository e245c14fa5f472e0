//! The trace manager: sessions, the provider registry, buffer draining and the archive writer.
//!
//! - [`session`]: the state machine of `fuchsia.tracing.controller.Session` (pure logic).
//! - [`server`]: the [`Manager`]: socket listener and event loop; its parts in their own files:
//!   `server/registry.rs` (registry and pending connections), `server/fifo.rs` (per-provider
//!   FIFO protocol), `server/executor.rs` (carrying out the session's commands).
//! - [`drain`]: copying a provider's buffer out (streaming saves, final read-out, salvage).
//! - [`archive`]: the FXT stream written (magic, provider metadata, framing-checked records);
//!   [`direct_output`]: `fxtrace record`'s output file, written in blocks with direct I/O by a
//!   writer thread.
//! - [`recorder`]: `fxtrace record` as a library: run a command under a fresh session.
//! - `driver`: the session loop `fxtrace record` and the service's sessions run (the manager's
//!   turns, the duration, the stop alert, the sections of sources outside the protocol,
//!   `section`).
//! - [`report`]: per-provider statistics and the summary table.
//! - [`status`]: the status client (`fxtrace status`): this user's sessions, and what each says.
//! - [`kernel`]: the kernel provider and its section of a recording; [`lifecycle`]: the
//!   recorded command's process group, the recorder's death, stale session directories.
//! - [`service`]: the trace service (`fxtrace daemon`): a registry providers stay in, sessions
//!   started and stopped by controllers, the controller protocol and its client.
//! - `conn`: nonblocking control-frame reading; [`wire`]: the frames the tools add to a
//!   provider's messages (controller documents, the frozen binary status).
//!
//! The manager uses the `format` codec only for framing and the records it composes itself
//! (metadata and markers), the `protocol` module for the wire, and [`fxtrace::buffer`] for the
//! memory it shares with a provider (it creates the sealed memfd, [`fxtrace::buffer::TraceBuffer`],
//! and reads the header's fields); it never touches the engine.

pub mod archive;
mod conn;
pub mod direct_output;
pub mod drain;
mod driver;
pub mod kernel;
pub mod lifecycle;
pub mod recorder;
pub mod report;
mod section;
pub mod server;
pub mod service;
pub mod session;
pub mod status;
pub mod wire;

pub use archive::{Archive, ArchiveError};
pub use drain::{Drain, DrainError, DrainStats};
pub use recorder::{
    ExternalSource, OutputFailure, RecordConfig, RecordReport, Recorder, RecorderError,
    SectionError, SectionSink, StopHandle, StopReason,
};
pub use report::{ProviderReport, RefusedPeer, SectionLosses, SectionReport, SummaryTable};
pub use server::{Manager, ManagerConfig, ManagerError, ManagerEvent, PollOutcome, Waker};
pub use session::{Session, SessionConfig};
